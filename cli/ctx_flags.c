/* ctx_flags.c — the context flags shared by every command that runs the model: threads, prefill chunk, n_ctx and
 * the KV cache kind (rotating, quantized, memory limit). */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

void cli_ctx_flags_help(FILE *f) {
    fprintf(f, "context and KV cache:\n"
               "  --threads N             worker threads (default: all CPUs)\n"
               "  --prefill-chunk N       prompt tokens per batched forward (default 512; results do not depend on it)\n"
               "  --n-ctx N               KV cache positions (default: max_position_embeddings)\n"
               "  --max-kv-size N         rotating cache of N positions per layer (mlx-lm RotatingKVCache semantics)\n"
               "  --keep K                rotating: the first K positions are never evicted (default 4, as mlx-lm; at most N-1)\n"
               "  --kv-bits 4|8|16|32     cache rows: affine-quantized groups, bfloat16 (half the bytes; the same\n"
               "                          logits with --compute bf16) or float32 (default: float32; bfloat16 with\n"
               "                          --compute bf16 --device cuda)\n"
               "  --kv-group-size 32|64|128  quantization group size (default 64)\n"
               "  --quantized-kv-start N  positions before N stay float32 (default 0)\n"
               "  --mem-limit-mb N        refuse a prefill that would grow caches + scratch past N MB\n"
               "  --device cpu|cuda       where the forward runs (default cpu; cuda needs `make cuda` and a GPU)\n"
               "  --compute f32|bf16      activations in float32 (default) or rounded to bfloat16 where transformers'\n"
               "                          bf16 forward rounds them (CPU)\n");
}

static int parse_i32(const char *flag, const char *v, int32_t lo, int32_t *out) {
    return cli_i32(flag, v, lo, 1 << 30, out);
}

/* --device cpu|cuda or --compute f32|bf16 (a = the flag): 1 consumed, -1 bad value. */
static int choice_flag(int argc, char **argv, int *i, const char *a, gp_ctx_params *p) {
    const int dev = !strcmp(a, "--device");
    const char *one = dev ? "cpu" : "f32", *two = dev ? "cuda" : "bf16";
    if (*i + 1 >= argc) {
        fprintf(stderr, "genparity: %s needs a value (%s or %s)\n", a, one, two);
        return -1;
    }
    const char *v = argv[++*i];
    if (strcmp(v, one) && strcmp(v, two)) {
        fprintf(stderr, "genparity: %s must be %s or %s, got '%s'\n", a, one, two, v);
        return -1;
    }
    const int second = !strcmp(v, two);
    if (dev) p->device = second ? GP_DEVICE_CUDA : GP_DEVICE_CPU;
    else p->compute = second ? GP_COMPUTE_BF16 : GP_COMPUTE_F32;
    return 1;
}

int cli_ctx_flag(int argc, char **argv, int *i, gp_ctx_params *p) {
    const char *a = argv[*i];
    if (!strcmp(a, "--device") || !strcmp(a, "--compute")) return choice_flag(argc, argv, i, a, p);
    static const char *flags[] = {"--threads", "--prefill-chunk", "--n-ctx", "--max-kv-size", "--keep", "--kv-bits",
                                  "--kv-group-size", "--quantized-kv-start", "--mem-limit-mb"};
    int k = -1;
    for (int j = 0; j < (int)(sizeof flags / sizeof flags[0]); j++)
        if (!strcmp(a, flags[j])) k = j;
    if (k < 0) return 0;
    const char *v = cli_value(argc, argv, i);
    if (!v) return -1;
    int32_t x;
    if (parse_i32(a, v, k == 1 ? 1 : 0, &x)) return -1;
    switch (k) {
    case 0: p->n_threads = x; break;
    case 1: p->prefill_chunk = x; break;
    case 2: p->n_ctx = x; break;
    case 3: p->max_kv_size = x; break;
    case 4: p->keep = x; break;
    case 5:
        if (x != 4 && x != 8 && x != 16 && x != 32) {
            fprintf(stderr, "genparity: --kv-bits must be 4, 8, 16 or 32\n");
            return -1;
        }
        p->kv_bits = x;
        break;
    case 6:
        if (x != 32 && x != 64 && x != 128) {
            fprintf(stderr, "genparity: --kv-group-size must be 32, 64 or 128\n");
            return -1;
        }
        p->kv_group_size = x;
        break;
    case 7: p->quantized_kv_start = x; break;
    case 8: p->mem_limit_bytes = (uint64_t)x * 1000000u; break;
    }
    return 1;
}
