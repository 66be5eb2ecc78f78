/* fixtures.c — shared helpers of the parity tests (see fixtures.h). */
#include "fixtures.h"
#include "test.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>

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
