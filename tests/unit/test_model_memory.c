/* test_model_memory.c — weights are memory-mapped, not copied: loading a ~1 GB checkpoint (a sparse file, so it
 * costs no disk) must grow the resident set by far less than its size. */
#include "genparity.h"
#include "test.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long rss_bytes(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
    fclose(f);
    return resident * sysconf(_SC_PAGESIZE);
}

TEST(model_load_maps_1gb_without_reading_it) {
    char *dir = gp_test_tmpdir();
    char path[1024];
    /* Llama: hidden 2048, ff 8192, 3 layers, vocab 32000, untied, F32 -> about 1.07 GB of weights */
    const long E = 2048, F = 8192, V = 32000, L = 3;
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fprintf(f, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": %ld, \"intermediate_size\": %ld, "
               "\"num_hidden_layers\": %ld, \"num_attention_heads\": 16, \"num_key_value_heads\": 16, "
               "\"vocab_size\": %ld, \"tie_word_embeddings\": false}", E, F, L, V);
    fclose(f);
    /* header: every tensor F32, laid out back to back */
    size_t cap = 1 << 16, k = 0;
    char *h = malloc(cap);
    uint64_t off = 0;
    k += (size_t)snprintf(h + k, cap - k, "{");
#define T(name, r, c)                                                                                                \
    do {                                                                                                             \
        uint64_t nb = (uint64_t)(r) * (uint64_t)((c) ? (c) : 1) * 4;                                                 \
        if ((c)) k += (size_t)snprintf(h + k, cap - k, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%ld,%ld],"            \
                                       "\"data_offsets\":[%llu,%llu]}", off ? "," : "", name, (long)(r), (long)(c),  \
                                       (unsigned long long)off, (unsigned long long)(off + nb));                     \
        else k += (size_t)snprintf(h + k, cap - k, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%ld],"                    \
                                   "\"data_offsets\":[%llu,%llu]}", off ? "," : "", name, (long)(r),                 \
                                   (unsigned long long)off, (unsigned long long)(off + nb));                         \
        off += nb;                                                                                                   \
    } while (0)
    T("model.embed_tokens.weight", V, E);
    T("lm_head.weight", V, E);
    T("model.norm.weight", E, 0);
    char n[128];
    for (long i = 0; i < L; i++) {
        const char *sq[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                            "self_attn.o_proj.weight"};
        for (int j = 0; j < 4; j++) {
            snprintf(n, sizeof n, "model.layers.%ld.%s", i, sq[j]);
            T(n, E, E);
        }
        snprintf(n, sizeof n, "model.layers.%ld.mlp.gate_proj.weight", i);
        T(n, F, E);
        snprintf(n, sizeof n, "model.layers.%ld.mlp.up_proj.weight", i);
        T(n, F, E);
        snprintf(n, sizeof n, "model.layers.%ld.mlp.down_proj.weight", i);
        T(n, E, F);
        snprintf(n, sizeof n, "model.layers.%ld.input_layernorm.weight", i);
        T(n, E, 0);
        snprintf(n, sizeof n, "model.layers.%ld.post_attention_layernorm.weight", i);
        T(n, E, 0);
    }
#undef T
    k += (size_t)snprintf(h + k, cap - k, "}");
    while (k % 8) h[k++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    REQUIRE(fd >= 0);
    uint64_t hl = k;
    CHECK(write(fd, &hl, 8) == 8);
    CHECK(write(fd, h, k) == (ssize_t)k);
    CHECK(ftruncate(fd, (off_t)(8 + k + off)) == 0);
    close(fd);
    free(h);

    long before = rss_bytes();
    gp_model *m = NULL;
    CHECK_STATUS(gp_model_load(dir, NULL, &m), GP_OK);
    long after = rss_bytes();
    if (m) {
        uint64_t wb = gp_model_weight_bytes(m);
        NOTE("weights %.2f GB, resident set grew by %.1f MB", (double)wb / 1e9, (double)(after - before) / 1e6);
        CHECK(wb > 1000000000ull);
        CHECK(after - before < 64L * 1024 * 1024);
    }
    gp_model_free(m);
    unlink(path);
    free(dir);
}
