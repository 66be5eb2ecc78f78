/* test_chat_template_corpus.c — the engine against transformers on a corpus of real chat templates
 * (the .jinja files of tests/data/templates, copied from llama.cpp's models/templates, which holds the templates of the Hugging
 * Face repos they are named after, and the fixture tokenizers' own templates) × the conversations of
 * tests/data/chat_conversations.json.  The expected texts (or the message a template raised) are
 * tests/data/chat_template_refs.json, written by tools/chat_template_refs.py with transformers 5.17 / jinja2 3.1.
 * Tolerance: identical bytes; raise_exception's message identical; a Python-side type error must be an error here
 * too.  The live test re-runs the oracle into a temporary file first when .venv is present. */
#include "fixtures.h"
#include "test.h"

#include "genparity.h"

#include <cJSON.h>

#include <stdlib.h>
#include <string.h>

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static const cJSON *find_case(const cJSON *cases, const char *name) {
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) if (!strcmp(cJSON_GetObjectItem(c, "name")->valuestring, name)) return c;
    return NULL;
}

/* Loads one corpus template: a .jinja file under the repo, or "fixtures:<rel>" (a tokenizer_config.json). */
static gp_chat_template *load_template(const char *source) {
    gp_chat_template *t = NULL;
    if (!strncmp(source, "fixtures:", 9)) {
        char *cfg = gp_test_fixture(source + 9);
        if (!cfg) return NULL;
        cJSON *j = fx_read_json(cfg);
        const cJSON *ct = cJSON_GetObjectItem(j, "chat_template");
        if (cJSON_IsString(ct)) CHECK_STATUS(gp_chat_template_from_string(ct->valuestring, strlen(ct->valuestring), cfg, source, &t), GP_OK);
        cJSON_Delete(j);
        free(cfg);
        return t;
    }
    char *text = read_all(source);
    if (!text) {
        NOTE("cannot read %s", source);
        gp_test_failed = 1;
        return NULL;
    }
    CHECK_STATUS(gp_chat_template_from_string(text, strlen(text), NULL, source, &t), GP_OK);
    free(text);
    return t;
}

static int check_one(const gp_chat_template *t, const cJSON *tinfo, const cJSON *c, const cJSON *r, int64_t now) {
    cJSON *kw = cJSON_Duplicate(cJSON_GetObjectItem(tinfo, "specials"), 1);
    const cJSON *ckw = cJSON_GetObjectItem(c, "kwargs"), *e;
    cJSON_ArrayForEach(e, ckw) cJSON_AddItemToObject(kw, e->string, cJSON_Duplicate(e, 1));
    const char *src = cJSON_GetObjectItem(tinfo, "source")->valuestring;
    if (!strncmp(src, "fixtures:", 9)) { /* specials come from the tokenizer_config.json itself */
        cJSON_Delete(kw);
        kw = cJSON_Duplicate(ckw ? ckw : cJSON_GetObjectItem(tinfo, "none"), 1);
    }
    char *mj = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "messages"));
    const cJSON *tools = cJSON_GetObjectItem(c, "tools");
    char *tj = tools ? cJSON_PrintUnformatted(tools) : NULL, *kj = kw ? cJSON_PrintUnformatted(kw) : NULL;
    gp_chat_opts o = gp_chat_opts_default();
    o.messages_json = mj;
    o.tools_json = tj;
    o.kwargs_json = kj;
    o.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt"));
    o.now = now;
    char *out = NULL;
    size_t n = 0;
    gp_status st = gp_chat_template_render(t, &o, &out, &n);
    const cJSON *text = cJSON_GetObjectItem(r, "text"), *err = cJSON_GetObjectItem(r, "error");
    const char *tname = cJSON_GetObjectItem(r, "template")->valuestring, *cname = cJSON_GetObjectItem(r, "case")->valuestring;
    int ok;
    if (text) {
        size_t wn = strlen(text->valuestring);
        ok = st == GP_OK && n == wn && memcmp(out, text->valuestring, n) == 0;
        if (!ok && st != GP_OK) NOTE("%s / %s: error %s: %s", tname, cname, gp_status_str(st), gp_errmsg());
        if (!ok && st == GP_OK) {
            size_t i = 0;
            while (i < n && i < wn && out[i] == text->valuestring[i]) i++;
            size_t a = i > 30 ? i - 30 : 0;
            NOTE("%s / %s: first difference at byte %zu (want %zu bytes, got %zu)", tname, cname, i, wn, n);
            NOTE("  want: ...%.*s", (int)(wn - a < 90 ? wn - a : 90), text->valuestring + a);
            NOTE("  got : ...%.*s", (int)(n - a < 90 ? n - a : 90), out + a);
        }
    } else {
        int raised = cJSON_IsTrue(cJSON_GetObjectItem(r, "raised"));
        ok = raised ? st == GP_ERR_TEMPLATE && !strcmp(gp_errmsg(), err->valuestring) : st != GP_OK;
        if (!ok) NOTE("%s / %s: want error \"%s\", got %s \"%s\"", tname, cname, err->valuestring, gp_status_str(st), st == GP_OK ? "" : gp_errmsg());
    }
    gp_free(out);
    free(mj), free(tj), free(kj);
    cJSON_Delete(kw);
    return ok;
}

/* Compares the engine with every result of a reference file; returns the number of mismatches (-1: no file). */
static int run_corpus(const char *refs_path, const char *conv_path, int *n_total) {
    cJSON *ref = fx_read_json(refs_path), *conv = fx_read_json(conv_path);
    int bad = 0;
    *n_total = 0;
    if (!ref || !conv) {
        cJSON_Delete(ref), cJSON_Delete(conv);
        return -1;
    }
    const cJSON *cases = cJSON_GetObjectItem(conv, "cases"), *tinfo;
    int64_t now = (int64_t)cJSON_GetObjectItem(ref, "now_epoch")->valuedouble;
    cJSON_ArrayForEach(tinfo, cJSON_GetObjectItem(ref, "templates")) {
        gp_chat_template *t = load_template(cJSON_GetObjectItem(tinfo, "source")->valuestring);
        if (!t) continue;
        const cJSON *r;
        cJSON_ArrayForEach(r, cJSON_GetObjectItem(ref, "results")) {
            if (strcmp(cJSON_GetObjectItem(r, "template")->valuestring, tinfo->string)) continue;
            const cJSON *c = find_case(cases, cJSON_GetObjectItem(r, "case")->valuestring);
            (*n_total)++;
            if (!c || !check_one(t, tinfo, c, r, now)) bad++;
        }
        gp_chat_template_free(t);
    }
    cJSON_Delete(ref);
    cJSON_Delete(conv);
    return bad;
}

TEST(chat_template_corpus_matches_transformers) {
    int n = 0, bad = run_corpus("tests/data/chat_template_refs.json", "tests/data/chat_conversations.json", &n);
    REQUIRE(bad >= 0);
    NOTE("%d/%d renderings identical to transformers (tests/data/chat_template_refs.json)", n - bad, n);
    CHECK(n >= 200);
    CHECK_EQ_INT(bad, 0);
}

TEST(chat_template_corpus_live_oracle) {
    if (system(".venv/bin/python -c 'import transformers, jinja2' >/dev/null 2>&1") != 0) SKIP(".venv with transformers not present");
    char *dir = gp_test_tmpdir(), cmd[1024], out[512];
    snprintf(out, sizeof out, "%s/refs.json", dir);
    snprintf(cmd, sizeof cmd, ".venv/bin/python tools/chat_template_refs.py --out %s >/dev/null 2>&1", out);
    free(dir);
    REQUIRE(system(cmd) == 0);
    int n = 0, bad = run_corpus(out, "tests/data/chat_conversations.json", &n);
    NOTE("live oracle: %d/%d renderings identical", n - bad, n);
    CHECK(n >= 200);
    CHECK_EQ_INT(bad, 0);
}
