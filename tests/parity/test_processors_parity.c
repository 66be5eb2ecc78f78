/* test_processors_parity.c — every case of references/logits_processors.json (each transformers processor/warper
 * applied once to the same 64 scores) through genparity's one function per processor: within 1e-6, -inf exact.
 * The reference file stores no parameters; they come from the case names and the fixture README (penalties 1.5 and
 * 0.8), and for the four unnamed ones from the table below (the parameters the fixture was generated with). */
#include "test.h"

#include "sample/sample.h"

#include <cJSON.h>
#include <stdlib.h>

#include "util/util.h"

#define LP_TOL 1e-6

typedef struct {
    const char *name;
    int32_t ids[16];
    int32_t n;
    float in[64], ref[64];
} lp_case;

static float json_float(const cJSON *v) {
    if (cJSON_IsString(v)) {
        if (!strcmp(v->valuestring, "-inf")) return -INFINITY;
        if (!strcmp(v->valuestring, "inf")) return INFINITY;
        return NAN;
    }
    return (float)v->valuedouble;
}

/* Loads the reference file; returns the array (caller deletes) or NULL after a skip/failure. */
static cJSON *load_cases(void) {
    char *path = gp_test_fixture("references/logits_processors.json");
    if (!path) return NULL;
    char *text = NULL;
    size_t len = 0;
    if (gp_read_file(path, 64u << 20, &text, &len) != GP_OK) {
        printf("    cannot read %s: %s\n", path, gp_errmsg());
        gp_test_failed = 1;
        free(path);
        return NULL;
    }
    cJSON *root = cJSON_Parse(text);
    free(text);
    free(path);
    if (!cJSON_IsArray(root)) {
        printf("    logits_processors.json is not a JSON array\n");
        gp_test_failed = 1;
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static int read_case(const cJSON *c, lp_case *out) {
    const cJSON *name = cJSON_GetObjectItem(c, "name"), *ids = cJSON_GetObjectItem(c, "input_ids");
    const cJSON *in = cJSON_GetObjectItem(c, "scores_in"), *o = cJSON_GetObjectItem(c, "scores_out");
    if (!cJSON_IsString(name) || !cJSON_IsArray(ids) || !cJSON_IsArray(in) || !cJSON_IsArray(o)) return 0;
    if (cJSON_GetArraySize(in) != 64 || cJSON_GetArraySize(o) != 64 || cJSON_GetArraySize(ids) > 16) return 0;
    out->name = name->valuestring;
    out->n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, ids) out->ids[out->n++] = (int32_t)v->valuedouble;
    int i = 0;
    cJSON_ArrayForEach(v, in) out->in[i++] = json_float(v);
    i = 0;
    cJSON_ArrayForEach(v, o) out->ref[i++] = json_float(v);
    return 1;
}

/* the number after the last '_' of a case name ("top_p_0.8" -> 0.8) */
static double name_param(const char *name) {
    const char *u = strrchr(name, '_');
    return u ? strtod(u + 1, NULL) : 0.0;
}

/* Applies the processor named by the case; returns 0 if the name is unknown. */
static int apply_case(const lp_case *c, float *s, gp_sample_ws *ws) {
    const int32_t V = 64;
    const char *n = c->name;
    static const int32_t eos[] = {2};
    if (!strcmp(n, "repetition_penalty")) gp_proc_repetition_penalty(s, V, c->ids, c->n, 1.5, ws);
    else if (!strcmp(n, "repetition_penalty_lt1")) gp_proc_repetition_penalty(s, V, c->ids, c->n, 0.8, ws);
    else if (!strncmp(n, "no_repeat_ngram_", 16)) gp_proc_no_repeat_ngram(s, V, c->ids, c->n, (int32_t)name_param(n));
    else if (!strncmp(n, "temperature_", 12)) gp_warp_temperature(s, V, name_param(n));
    else if (!strncmp(n, "top_k_", 6)) gp_warp_top_k(s, V, (int32_t)name_param(n), ws);
    else if (!strncmp(n, "top_p_", 6)) gp_warp_top_p(s, V, name_param(n), ws);
    else if (!strncmp(n, "min_p_", 6)) gp_warp_min_p(s, V, name_param(n), ws);
    else if (!strncmp(n, "typical_", 8)) gp_warp_typical(s, V, name_param(n), ws);
    else if (!strncmp(n, "epsilon_", 8)) gp_warp_epsilon(s, V, name_param(n), ws);
    else if (!strncmp(n, "eta_", 4)) gp_warp_eta(s, V, name_param(n), ws);
    else if (!strcmp(n, "bad_words")) {
        /* bad_words_ids = [[4], [7, 11]]: the second is inactive after ...2 */
        static const int32_t w0[] = {4}, w1[] = {7, 11};
        const gp_token_seq bw[] = {{w0, 1}, {w1, 2}};
        gp_proc_bad_words(s, V, c->ids, c->n, bw, 2, eos, 1);
    } else if (!strcmp(n, "sequence_bias")) {
        /* sequence_bias = [[[5], 2.0]] */
        static const int32_t q0[] = {5};
        const gp_seq_bias sb[] = {{q0, 1, 2.0}};
        gp_proc_sequence_bias(s, V, c->ids, c->n, sb, 1, ws);
    } else if (!strcmp(n, "min_length")) {
        /* min_length = 20 > 12 ids, eos_token_id = 2 */
        gp_proc_min_length(s, V, c->n, 20, eos, 1);
    } else if (!strcmp(n, "suppress_tokens")) {
        static const int32_t sup[] = {0, 1, 2};
        gp_proc_suppress_tokens(s, V, sup, 3);
    } else return 0;
    return 1;
}

TEST(processors_match_transformers) {
    cJSON *root = load_cases();
    if (!root) return;
    gp_sample_ws ws;
    REQUIRE(gp_sample_ws_init(&ws, 64) == GP_OK);
    int n_cases = 0;
    double worst = 0.0;
    const cJSON *c;
    cJSON_ArrayForEach(c, root) {
        lp_case k;
        if (!read_case(c, &k)) {
            printf("    malformed case in logits_processors.json\n");
            gp_test_failed = 1;
            continue;
        }
        float s[64];
        memcpy(s, k.in, sizeof s);
        if (!apply_case(&k, s, &ws)) {
            printf("    %s: no genparity processor for this case\n", k.name);
            gp_test_failed = 1;
            continue;
        }
        double max_err = 0.0;
        int inf_mismatch = 0;
        for (int i = 0; i < 64; i++) {
            if (isinf(k.ref[i]) || isinf(s[i])) {
                if (s[i] != k.ref[i]) {
                    if (!inf_mismatch)
                        printf("    %s: id %d: got %.9g, want %.9g\n", k.name, i, (double)s[i], (double)k.ref[i]);
                    inf_mismatch++;
                }
                continue;
            }
            double e = fabs((double)s[i] - (double)k.ref[i]);
            if (e > max_err) max_err = e;
        }
        NOTE("%-24s max error %.3g (tol %.0e), -inf mismatches %d", k.name, max_err, LP_TOL, inf_mismatch);
        if (max_err > LP_TOL || inf_mismatch) gp_test_failed = 1;
        if (max_err > worst) worst = max_err;
        n_cases++;
    }
    NOTE("%d cases, worst max error %.3g", n_cases, worst);
    CHECK(n_cases >= 16);
    gp_sample_ws_free(&ws);
    cJSON_Delete(root);
}
