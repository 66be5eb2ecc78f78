/* cmd_make_model.c — `genparity make-model`: writes a Hugging Face model folder of a real model's shape
 * (config.json, generation_config.json, model.safetensors with deterministic random weights, a tokenizer copied
 * from the fixtures) so benchmarks run on real sizes without a download.  Weights are streamed to disk in chunks:
 * a multi-GB checkpoint is never held in memory. */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One real model's shape (values from the published config.json of each model). */
typedef struct shape {
    const char *name, *arch, *model_type, *tokenizer; /* tokenizer: fixtures/tokenizers/<name> */
    int hidden, ff, layers, heads, kv, head_dim, vocab, max_pos;
    double eps;
    int bos, eos;
    const char *extra; /* family-specific config.json fields (JSON members, no braces) */
    int qk_norm, sandwich, norm_plus_one;
} shape;

static const shape SHAPES[] = {
    /* karpathy/tinyllamas stories110M: Llama, dim 768, 12 layers, 12 heads, hidden_dim 2048, seq 1024 */
    {"stories110m", "LlamaForCausalLM", "llama", "llama2", 768, 2048, 12, 12, 12, 64, 32000, 1024, 1e-5, 1, 2,
     "\"hidden_act\": \"silu\", \"rope_theta\": 10000.0, \"tie_word_embeddings\": true", 0, 0, 0},
    /* Qwen/Qwen3-0.6B */
    {"qwen3-0.6b", "Qwen3ForCausalLM", "qwen3", "qwen3", 1024, 3072, 28, 16, 8, 128, 151936, 40960, 1e-6, 151643,
     151645,
     "\"hidden_act\": \"silu\", \"rope_theta\": 1000000, \"rope_scaling\": null, \"attention_bias\": false, "
     "\"tie_word_embeddings\": true, \"sliding_window\": null, \"use_sliding_window\": false",
     1, 0, 0},
    /* meta-llama/Llama-3.2-1B */
    {"llama3.2-1b", "LlamaForCausalLM", "llama", "llama3", 2048, 8192, 16, 32, 8, 64, 128256, 131072, 1e-5, 128000,
     128001,
     "\"hidden_act\": \"silu\", \"rope_theta\": 500000.0, \"rope_scaling\": {\"factor\": 32.0, "
     "\"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192, "
     "\"rope_type\": \"llama3\"}, \"attention_bias\": false, \"mlp_bias\": false, \"tie_word_embeddings\": true",
     0, 0, 0},
    /* meta-llama/Llama-3.1-8B, with the embedding tied to lm_head (the original is untied: a decoded token reads the
     * same bytes either way, one [vocab, hidden] matrix for the logits) */
    {"llama3.1-8b", "LlamaForCausalLM", "llama", "llama3", 4096, 14336, 32, 32, 8, 128, 128256, 131072, 1e-5, 128000,
     128001,
     "\"hidden_act\": \"silu\", \"rope_theta\": 500000.0, \"rope_scaling\": {\"factor\": 8.0, "
     "\"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192, "
     "\"rope_type\": \"llama3\"}, \"attention_bias\": false, \"mlp_bias\": false, \"tie_word_embeddings\": true",
     0, 0, 0},
    /* google/gemma-3-1b-it (text): sliding window 512 on 5 of every 6 layers */
    {"gemma3-1b", "Gemma3ForCausalLM", "gemma3_text", "llama2", 1152, 6912, 26, 4, 1, 256, 262144, 32768, 1e-6, 2, 1,
     "\"hidden_activation\": \"gelu_pytorch_tanh\", \"query_pre_attn_scalar\": 256, \"sliding_window\": 512, "
     "\"attn_logit_softcapping\": null, \"final_logit_softcapping\": null, \"attention_bias\": false, "
     "\"tie_word_embeddings\": true, \"rope_parameters\": {\"full_attention\": {\"rope_theta\": 1000000.0, "
     "\"rope_type\": \"default\"}, \"sliding_attention\": {\"rope_theta\": 10000.0, \"rope_type\": \"default\"}}",
     1, 1, 1},
};

static void help(FILE *f) {
    fprintf(f, "usage: genparity make-model --shape NAME [--dtype f32|bf16|f16] [--seed N] [--layers N] -o DIR\n"
               "\n"
               "  --shape NAME    stories110m | qwen3-0.6b | llama3.2-1b | llama3.1-8b | gemma3-1b\n"
               "  --dtype T       stored weight dtype (default bf16)\n"
               "  --seed N        seed of the random weights (default 1)\n"
               "  --layers N      override the number of layers (small folders for tests)\n"
               "  -o DIR          output folder (created)\n"
               "Weights are random (uniform, std 0.02; norms near their identity); the tokenizer is copied from\n"
               "$GENPARITY_FIXTURES or ../shared/fixtures (its vocabulary may be smaller than the shape's).\n");
}

/* The tensors of one shape and the generator state of the one being written. */
typedef struct gen {
    gp_st_write_tensor *t;
    int32_t n, cap;
    char **names;
    uint8_t *kind; /* 0 = matrix (std 0.02), 1 = norm weight */
    int norm_plus_one;
    uint64_t seed, state;
    int32_t cur;
} gen;

static int add_tensor(gen *g, const char *name, int64_t rows, int64_t cols, gp_dtype dt) {
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 64;
        void *a = realloc(g->t, (size_t)g->cap * sizeof *g->t), *b = realloc(g->names, (size_t)g->cap * sizeof(char *));
        void *c = realloc(g->kind, (size_t)g->cap);
        if (a) g->t = a;
        if (b) g->names = b;
        if (c) g->kind = c;
        if (!a || !b || !c) return -1;
    }
    gp_st_write_tensor *t = &g->t[g->n];
    memset(t, 0, sizeof *t);
    g->names[g->n] = strdup(name);
    if (!g->names[g->n]) return -1;
    t->name = g->names[g->n];
    t->dtype = dt;
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    g->kind[g->n] = cols ? 0 : 1;
    g->n++;
    return 0;
}

static inline uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* gp_st_fill_fn: tensor i's bytes in order; each tensor's generator is seeded from (seed, its index). */
static gp_status fill(void *user, int32_t i, uint64_t offset, void *buf, size_t len) {
    gen *g = user;
    if (i != g->cur || offset == 0) {
        g->cur = i;
        g->state = g->seed * 0x100000001B3ull + (uint64_t)i * 0x9E3779B97F4A7C15ull;
    }
    const gp_dtype dt = g->t[i].dtype;
    const size_t es = gp_dtype_size(dt), n = len / es;
    const float a = 0.02f * 1.7320508f; /* uniform [-a, a] has std 0.02 */
    for (size_t k = 0; k < n; k++) {
        float u = (float)(splitmix(&g->state) >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
        float v = g->kind[i] == 0 ? u * a : (g->norm_plus_one ? 0.0f : 1.0f) + 0.1f * u;
        if (dt == GP_DTYPE_F32) memcpy((float *)buf + k, &v, 4);
        else if (dt == GP_DTYPE_BF16) ((uint16_t *)buf)[k] = gp_f32_to_bf16(v);
        else ((uint16_t *)buf)[k] = gp_f32_to_f16(v);
    }
    return GP_OK;
}

/* Opens an output file (never blocking on a FIFO); prints the library's message and returns NULL on failure. */
static FILE *open_out(const char *path) {
    int fd;
    FILE *f = gp_open_write(path, &fd) == GP_OK ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        fprintf(stderr, "genparity make-model: cannot write: %s\n", gp_errmsg());
    }
    return f;
}

static int copy_file(const char *src, const char *dst) {
    int fd;
    if (gp_open_regular(src, &fd) != GP_OK) return -1; /* a FIFO in the source folder must not block */
    FILE *a = fdopen(fd, "rb");
    if (!a) {
        close(fd);
        return -1;
    }
    int wfd;
    FILE *b = gp_open_write(dst, &wfd) == GP_OK ? fdopen(wfd, "wb") : NULL; /* never blocks on a FIFO */
    if (!b) {
        if (wfd >= 0) close(wfd);
        fclose(a);
        return -1;
    }
    char buf[1 << 16];
    size_t k;
    int ok = 1;
    while ((k = fread(buf, 1, sizeof buf, a)) > 0) ok &= fwrite(buf, 1, k, b) == k;
    ok &= !ferror(a);
    fclose(a);
    ok &= fclose(b) == 0;
    return ok ? 0 : -1;
}

/* Fixtures root: $GENPARITY_FIXTURES, else ../shared/fixtures from the working directory or beside the repo. */
static const char *fixtures_root(void) {
    static char buf[PATH_MAX + 64];
    const char *e = getenv("GENPARITY_FIXTURES");
    if (e && *e) return e;
    if (access("../shared/fixtures/tokenizers", R_OK) == 0) return "../shared/fixtures";
    if (cli_path_beside_exe("../../shared/fixtures", buf, sizeof buf) == 0) return buf;
    return NULL;
}

static void write_config(FILE *f, const shape *s, const char *dtype_name) {
    fprintf(f, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n", s->arch, s->model_type);
    fprintf(f, "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n", s->hidden, s->ff,
            s->layers);
    fprintf(f, "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n", s->heads, s->kv,
            s->head_dim);
    fprintf(f, "  \"vocab_size\": %d,\n  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %g,\n", s->vocab,
            s->max_pos, s->eps);
    fprintf(f, "  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n  \"torch_dtype\": \"%s\",\n", s->bos, s->eos,
            dtype_name);
    if (s->sandwich) { /* Gemma 3: 5 sliding layers, then 1 full, repeated */
        fprintf(f, "  \"layer_types\": [");
        for (int i = 0; i < s->layers; i++)
            fprintf(f, "%s\"%s\"", i ? ", " : "", (i + 1) % 6 == 0 ? "full_attention" : "sliding_attention");
        fprintf(f, "],\n");
    }
    fprintf(f, "  %s\n}\n", s->extra);
}

/* Writes DIR/model.safetensors: every tensor of shape s, random values from seed (streamed, never all in memory).
 * Returns 0, or 1 after printing. */
static int write_weights(const shape *s, const char *out, gp_dtype dt, uint64_t seed) {
    char path[PATH_MAX];
    /* tensors, in the order transformers' save_pretrained would list them (sorted by name on load anyway) */
    gen g = {0};
    g.seed = seed;
    g.cur = -1;
    g.norm_plus_one = s->norm_plus_one;
    const int64_t E = s->hidden, Q = (int64_t)s->heads * s->head_dim, KV = (int64_t)s->kv * s->head_dim, F = s->ff;
    int rc = add_tensor(&g, "model.embed_tokens.weight", s->vocab, E, dt);
    char name[160];
#define T(suffix, r, c)                                                                                               \
    do {                                                                                                              \
        snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);                                                 \
        rc |= add_tensor(&g, name, r, c, dt);                                                                         \
    } while (0)
    for (int l = 0; l < s->layers; l++) {
        T("input_layernorm.weight", E, 0);
        T("self_attn.q_proj.weight", Q, E);
        T("self_attn.k_proj.weight", KV, E);
        T("self_attn.v_proj.weight", KV, E);
        T("self_attn.o_proj.weight", E, Q);
        if (s->qk_norm) {
            T("self_attn.q_norm.weight", s->head_dim, 0);
            T("self_attn.k_norm.weight", s->head_dim, 0);
        }
        T("post_attention_layernorm.weight", E, 0);
        if (s->sandwich) {
            T("pre_feedforward_layernorm.weight", E, 0);
            T("post_feedforward_layernorm.weight", E, 0);
        }
        T("mlp.gate_proj.weight", F, E);
        T("mlp.up_proj.weight", F, E);
        T("mlp.down_proj.weight", E, F);
    }
#undef T
    rc |= add_tensor(&g, "model.norm.weight", E, 0, dt);
    int ret = 0;
    if (rc) {
        fprintf(stderr, "genparity make-model: out of memory\n");
        ret = 1;
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", out);
        const char *mk[] = {"format"}, *mv[] = {"pt"};
        if (gp_st_write_stream(path, g.t, g.n, mk, mv, 1, fill, &g) != GP_OK) ret = cli_fail("writing the weights");
    }
    for (int32_t i = 0; i < g.n; i++) free(g.names[i]);
    free(g.names);
    free(g.t);
    free(g.kind);
    return ret;

}

int cmd_make_model(int argc, char **argv) {
    const char *shape_name = NULL, *dtype = "bf16", *out = NULL;
    uint64_t seed = 1;
    int32_t layers = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "genparity make-model: unknown flag or missing value: %s\n", a);
            return 2;
        }
        if (!strcmp(a, "--shape")) shape_name = v;
        else if (!strcmp(a, "--dtype")) dtype = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--layers")) {
            if (cli_i32(a, v, 1, 1024, &layers)) return 2;
        } else if (!strcmp(a, "--seed")) {
            if (cli_u64(a, v, &seed)) return 2;
        } else {
            fprintf(stderr, "genparity make-model: unknown flag %s (see --help)\n", a);
            return 2;
        }
        i++;
    }
    const shape *s = NULL;
    shape custom;
    for (size_t i = 0; shape_name && i < sizeof SHAPES / sizeof SHAPES[0]; i++)
        if (!strcmp(SHAPES[i].name, shape_name)) s = &SHAPES[i];
    if (s && layers) { /* fewer layers, same widths (tests) */
        custom = *s;
        custom.layers = layers;
        s = &custom;
    }
    if (!shape_name) return cli_missing("--shape", "stories110m, qwen3-0.6b, llama3.2-1b, llama3.1-8b or gemma3-1b");
    if (!s) {
        fprintf(stderr, "%s: --shape must be stories110m, qwen3-0.6b, llama3.2-1b, llama3.1-8b or gemma3-1b, got '%s'\n",
                cli_prog, shape_name);
        return 2;
    }
    if (!out) return cli_missing("-o", "the model folder to write");
    gp_dtype dt;
    const char *torch_dtype;
    if (!strcmp(dtype, "f32")) dt = GP_DTYPE_F32, torch_dtype = "float32";
    else if (!strcmp(dtype, "bf16")) dt = GP_DTYPE_BF16, torch_dtype = "bfloat16";
    else if (!strcmp(dtype, "f16")) dt = GP_DTYPE_F16, torch_dtype = "float16";
    else {
        fprintf(stderr, "genparity make-model: --dtype must be f32, bf16 or f16\n");
        return 2;
    }
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "genparity make-model: cannot create %s: %s\n", out, strerror(errno));
        return 1;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", out);
    FILE *f = open_out(path);
    if (!f) return 1;
    write_config(f, s, torch_dtype);
    if (fclose(f) != 0) return 1;
    snprintf(path, sizeof path, "%s/generation_config.json", out);
    if (!(f = open_out(path))) return 1;
    fprintf(f, "{\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n  \"do_sample\": false\n}\n", s->bos, s->eos);
    if (fclose(f) != 0) return 1;

    int ret = write_weights(s, out, dt, seed);
    if (ret) return ret;

    const char *fx = fixtures_root();
    const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        char src[PATH_MAX + 128];
        snprintf(src, sizeof src, "%s/tokenizers/%s/%s", fx ? fx : "../shared/fixtures", s->tokenizer, files[i]);
        snprintf(path, sizeof path, "%s/%s", out, files[i]);
        if (!fx || copy_file(src, path) != 0) {
            fprintf(stderr, "genparity make-model: warning: no tokenizer copied (%s not readable)\n", src);
            break;
        }
    }
    printf("wrote %s (%s, %s)\n", out, s->name, dtype);
    return 0;
}
