/* fixtures.c — shared helpers of the parity tests (see fixtures.h). */
#include "fixtures.h"
#include "test.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

const char *const GP_FIXTURE_MODELS[] = {"tiny-llama",  "tiny-llama3", "tiny-qwen2",       "tiny-qwen3",
                                         "tiny-gemma2", "tiny-gemma3", "shakespeare-llama"};
const int GP_N_FIXTURE_MODELS = 7;

cJSON *fx_read_json(const char *path) {
    char *text;
    if (gp_read_file(path, 64u << 20, &text, NULL) != GP_OK) {
        NOTE("cannot read %s: %s", path, gp_errmsg());
        gp_test_failed = 1;
        return NULL;
    }
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) {
        NOTE("%s: not JSON", path);
        gp_test_failed = 1;
    }
    return j;
}

int fx_refs_load(const char *name, fx_refs *r) {
    char rel[256];
    memset(r, 0, sizeof *r);
    snprintf(rel, sizeof rel, "models/%s/reference.json", name);
    char *rj = gp_test_fixture(rel);
    snprintf(rel, sizeof rel, "models/%s/reference.safetensors", name);
    r->st_path = gp_test_fixture(rel);
    if (rj && r->st_path) {
        r->json = fx_read_json(rj);
        if (gp_st_open_file(r->st_path, &r->st) != GP_OK) {
            NOTE("%s", gp_errmsg());
            gp_test_failed = 1;
        }
    }
    free(rj);
    if (r->json && r->st) return 0;
    fx_refs_free(r);
    return -1;
}

void fx_refs_free(fx_refs *r) {
    cJSON_Delete(r->json);
    gp_st_close(r->st);
    free(r->st_path);
    memset(r, 0, sizeof *r);
}

int fx_int_array(const cJSON *arr, int32_t **out) {
    *out = NULL;
    if (!cJSON_IsArray(arr)) return -1;
    int n = cJSON_GetArraySize(arr);
    int32_t *v = malloc(((size_t)n + 1) * sizeof *v);
    if (!v) return -1;
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) v[i++] = (int32_t)x->valuedouble;
    *out = v;
    return n;
}

gp_ctx_params fx_default_params(void) {
    gp_ctx_params p = gp_ctx_default_params();
    const char *d = getenv("GENPARITY_TEST_DEVICE");
    if (d && !strcmp(d, "cuda")) p.device = GP_DEVICE_CUDA;
    return p;
}

const gp_ctx_params *fx_params(void) {
    static gp_ctx_params p;
    p = fx_default_params();
    return &p;
}

gp_model *fx_load_model(const char *name, int tokenizer) {
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s", name);
    char *dir = gp_test_fixture(rel);
    if (!dir) return NULL;
    gp_model_params p = gp_model_default_params();
    p.load_tokenizer = tokenizer;
    gp_model *m = NULL;
    if (gp_model_load(dir, &p, &m) != GP_OK) {
        NOTE("gp_model_load(%s): %s", dir, gp_errmsg());
        gp_test_failed = 1;
    }
    free(dir);
    return m;
}

double fx_max_abs_diff(const float *a, const float *b, size_t n) {
    double mx = 0;
    for (size_t i = 0; i < n; i++) {
        if (a[i] == b[i]) continue; /* equal infinities too */
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d) || isinf(d)) return INFINITY;
        if (d > mx) mx = d;
    }
    return mx;
}

int fx_first_diff(const int32_t *a, int na, const int32_t *b, int nb) {
    int n = na < nb ? na : nb;
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return i;
    return na == nb ? -1 : n;
}

void fx_print_ids(const char *label, const int32_t *ids, int n) {
    printf("    %s:", label);
    for (int i = 0; i < n; i++) printf(" %d", ids[i]);
    printf("\n");
}

const char *fx_bin(void) {
    const char *b = getenv("GENPARITY_BIN");
    return b && *b ? b : "build/genparity";
}

int fx_run(const char *cmd, int merge_stderr, char **out) {
    size_t n = strlen(cmd) + 32;
    char *full = malloc(n);
    *out = NULL;
    if (!full) return -1;
    snprintf(full, n, "%s%s", cmd, merge_stderr ? " 2>&1" : " 2>/dev/null");
    FILE *p = popen(full, "r");
    free(full);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    if (!p || !buf) {
        if (p) pclose(p);
        free(buf);
        return -1;
    }
    size_t k;
    while ((k = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += k;
        if (len + 1 == cap) {
            char *q = realloc(buf, cap *= 2);
            if (!q) break;
            buf = q;
        }
    }
    buf[len] = 0;
    int st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

cJSON *fx_run_json(const char *args) {
    size_t n = strlen(fx_bin()) + strlen(args) + 2;
    char *cmd = malloc(n), *out;
    if (!cmd) return NULL;
    snprintf(cmd, n, "%s %s", fx_bin(), args);
    int rc = fx_run(cmd, 0, &out);
    free(cmd);
    cJSON *j = out && rc == 0 ? cJSON_Parse(out) : NULL;
    if (!j) printf("    CLI exit %d, output: %.300s\n", rc, out ? out : "");
    free(out);
    return j;
}

void fx_join_ids(const int32_t *ids, int n, char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < n && k + 16 < cap; i++) k += (size_t)snprintf(buf + k, cap - k, "%s%d", i ? "," : "", ids[i]);
}
