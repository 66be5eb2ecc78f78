/* test_tokenizer_parity.c — every row of references/tokenizers.json (transformers' fast tokenizers) for llama2,
 * llama3 and qwen3: encode with and without special tokens, decode with and without skip_special, and the
 * streaming detokenizer against decode; the first mismatch of each kind is printed with its string. */
#include "genparity.h"
#include "test.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

static cJSON *load_refs(void) {
    char *p = gp_test_fixture("references/tokenizers.json");
    if (!p) return NULL;
    FILE *f = fopen(p, "rb");
    free(p);
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!buf || got != (size_t)n) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    return j;
}

static gp_tokenizer *load_tok(const char *name) {
    char rel[128];
    snprintf(rel, sizeof rel, "tokenizers/%s", name);
    char *dir = gp_test_fixture(rel);
    if (!dir) return NULL;
    gp_tokenizer *t = NULL;
    gp_status s = gp_tokenizer_load_dir(dir, &t);
    free(dir);
    if (s != GP_OK) {
        printf("    load %s: %s\n", name, gp_errmsg());
        gp_test_failed = 1;
        return NULL;
    }
    return t;
}

static int *json_ids(const cJSON *a, int *n) {
    *n = cJSON_GetArraySize(a);
    int *v = malloc(sizeof(int) * (size_t)(*n + 1));
    int i = 0;
    for (const cJSON *e = a->child; e; e = e->next) v[i++] = e->valueint;
    return v;
}

static void print_ids(const char *what, const int32_t *a, int n) {
    printf("      %s [", what);
    for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", a[i]);
    printf("]\n");
}

/* Returns 1 if the ids equal the reference array. */
static int same_ids(const int32_t *got, int n_got, const cJSON *want) {
    int n;
    int *w = json_ids(want, &n);
    int ok = n == n_got;
    for (int i = 0; ok && i < n; i++) ok = w[i] == got[i];
    free(w);
    return ok;
}

static int32_t *to_i32(const cJSON *a, int *n) {
    *n = cJSON_GetArraySize(a);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)(*n + 1));
    int i = 0;
    for (const cJSON *e = a->child; e; e = e->next) v[i++] = (int32_t)e->valueint;
    return v;
}

/* Streams ids through a detokenizer; returns the concatenated pieces (malloc'd) or NULL. */
static char *stream(const gp_tokenizer *t, const int32_t *ids, int n, int skip) {
    gp_detok *d;
    if (gp_detok_init(t, skip, &d) != GP_OK) return NULL;
    size_t cap = 64, len = 0;
    char *out = malloc(cap);
    out[0] = 0;
    for (int i = 0; i <= n; i++) {
        const char *piece;
        gp_status s = i < n ? gp_detok_push(d, ids[i], &piece) : gp_detok_flush(d, &piece);
        if (s != GP_OK) {
            free(out);
            gp_detok_free(d);
            return NULL;
        }
        size_t k = strlen(piece);
        while (len + k + 1 > cap) out = realloc(out, cap *= 2);
        memcpy(out + len, piece, k + 1);
        len += k;
    }
    gp_detok_free(d);
    return out;
}

static void check_tokenizer(const char *name) {
    cJSON *refs = load_refs();
    if (!refs) return;
    gp_tokenizer *t = load_tok(name);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(refs, name);
    if (!t || !cJSON_IsArray(rows)) {
        if (t) {
            printf("    no rows for %s\n", name);
            gp_test_failed = 1;
        }
        cJSON_Delete(refs);
        gp_tokenizer_free(t);
        return;
    }
    int rows_n = 0, bad[6] = {0};
    const char *kinds[6] = {"ids", "ids_with_special", "decoded", "decoded_skip_special", "detok", "detok_skip"};
    for (const cJSON *r = rows->child; r; r = r->next, rows_n++) {
        const char *text = cJSON_GetObjectItemCaseSensitive(r, "text")->valuestring;
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(r, "ids");
        const cJSON *idsw = cJSON_GetObjectItemCaseSensitive(r, "ids_with_special");
        const char *dec = cJSON_GetObjectItemCaseSensitive(r, "decoded")->valuestring;
        const char *decs = cJSON_GetObjectItemCaseSensitive(r, "decoded_skip_special")->valuestring;
        for (int special = 0; special < 2; special++) {
            int32_t *got = NULL, n = 0;
            gp_status s = gp_tokenizer_encode(t, text, strlen(text), special, &got, &n);
            if (s != GP_OK || !same_ids(got, n, special ? idsw : ids)) {
                if (!bad[special]++) {
                    printf("    %s: %s mismatch for \"%s\" (%s)\n", name, kinds[special], text, gp_errmsg());
                    print_ids("got ", got, n);
                    int wn;
                    int32_t *w = to_i32(special ? idsw : ids, &wn);
                    print_ids("want", w, wn);
                    free(w);
                }
            }
            gp_free(got);
        }
        /* decoded = decode(ids, skip_special=False); decoded_skip_special = decode(ids_with_special, True) */
        for (int skip = 0; skip < 2; skip++) {
            int n;
            int32_t *v = to_i32(skip ? idsw : ids, &n);
            char *txt = NULL;
            size_t len = 0;
            gp_status s = gp_tokenizer_decode(t, v, n, skip, &txt, &len);
            const char *want = skip ? decs : dec;
            if (s != GP_OK || strcmp(txt, want) != 0 || len != strlen(want)) {
                if (!bad[2 + skip]++)
                    printf("    %s: %s mismatch for \"%s\": got \"%s\" want \"%s\" (%s)\n", name, kinds[2 + skip], text,
                           txt ? txt : "(null)", want, gp_errmsg());
            }
            char *st = stream(t, v, n, skip);
            if (!st || !txt || strcmp(st, txt) != 0) {
                if (!bad[4 + skip]++)
                    printf("    %s: %s differs from decode for \"%s\": \"%s\" vs \"%s\"\n", name, kinds[4 + skip], text,
                           st ? st : "(error)", txt ? txt : "(null)");
            }
            free(st);
            gp_free(txt);
            free(v);
        }
    }
    for (int k = 0; k < 6; k++)
        if (bad[k]) {
            printf("    %s: %d of %d rows differ in %s\n", name, bad[k], rows_n, kinds[k]);
            gp_test_failed = 1;
        }
    NOTE("%s: %d rows checked", name, rows_n);
    gp_tokenizer_free(t);
    cJSON_Delete(refs);
}

TEST(tokenizer_parity_llama2) { check_tokenizer("llama2"); }
TEST(tokenizer_parity_llama3) { check_tokenizer("llama3"); }
TEST(tokenizer_parity_qwen3) { check_tokenizer("qwen3"); }
