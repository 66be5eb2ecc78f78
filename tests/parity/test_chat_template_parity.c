/* test_chat_template_parity.c — chat templates against transformers: the fixture references
 * (references/chat_templates.json: llama3 and qwen3 conversations rendered by apply_chat_template, text and ids) and
 * the committed corpus of real templates (tests/data/templates/, expected texts rendered by tools/chat_template_refs.py
 * with transformers 5.17 / jinja2).  Tolerance: exact bytes and exact ids; the first differing byte is printed. */
#include "fixtures.h"
#include "test.h"

#include "genparity.h"

#include <cJSON.h>

#include <stdlib.h>
#include <string.h>

static char *print_json(const cJSON *j) { return j ? cJSON_PrintUnformatted(j) : NULL; }

static void show_diff(const char *what, const char *want, size_t nw, const char *got, size_t ng) {
    size_t i = 0;
    while (i < nw && i < ng && want[i] == got[i]) i++;
    NOTE("%s: first difference at byte %zu (want %zu bytes, got %zu)", what, i, nw, ng);
    size_t a = i > 40 ? i - 40 : 0;
    NOTE("  want: ...%.*s", (int)(nw - a < 100 ? nw - a : 100), want + a);
    NOTE("  got : ...%.*s", (int)(ng - a < 100 ? ng - a : 100), got + a);
}

/* Renders one case {messages, add_generation_prompt, kwargs (tools inside)}; returns the text or NULL. */
static char *render_case(const gp_chat_template *t, const cJSON *c, size_t *n, gp_status *st) {
    cJSON *kw = cJSON_Duplicate(cJSON_GetObjectItem(c, "kwargs"), 1);
    cJSON *tools = kw ? cJSON_DetachItemFromObject(kw, "tools") : NULL;
    cJSON *docs = kw ? cJSON_DetachItemFromObject(kw, "documents") : NULL;
    char *mj = print_json(cJSON_GetObjectItem(c, "messages")), *tj = print_json(tools), *kj = print_json(kw);
    char *dj = print_json(docs);
    gp_chat_opts o = gp_chat_opts_default();
    o.messages_json = mj;
    o.tools_json = tj;
    o.documents_json = dj;
    o.kwargs_json = kj;
    o.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt"));
    const cJSON *now = cJSON_GetObjectItem(c, "now");
    if (cJSON_IsNumber(now)) o.now = (int64_t)now->valuedouble;
    char *out = NULL;
    *st = gp_chat_template_render(t, &o, &out, n);
    free(mj), free(tj), free(kj), free(dj);
    cJSON_Delete(kw), cJSON_Delete(tools), cJSON_Delete(docs);
    return out;
}

TEST(chat_template_fixture_references) {
    char *path = gp_test_fixture("references/chat_templates.json");
    if (!path) return;
    cJSON *ref = fx_read_json(path);
    free(path);
    REQUIRE(ref);
    int n_cases = 0, n_ok = 0;
    const cJSON *model;
    cJSON_ArrayForEach(model, ref) {
        char rel[128];
        snprintf(rel, sizeof rel, "models/tiny-%s", model->string);
        char *dir = gp_test_fixture(rel);
        if (!dir) continue;
        gp_chat_template *t = NULL;
        gp_tokenizer *tok = NULL;
        CHECK_STATUS(gp_chat_template_load(dir, &t), GP_OK);
        CHECK_STATUS(gp_tokenizer_load_dir(dir, &tok), GP_OK);
        free(dir);
        if (!t || !tok) {
            gp_chat_template_free(t);
            gp_tokenizer_free(tok);
            continue;
        }
        const cJSON *c;
        cJSON_ArrayForEach(c, model) {
            size_t n = 0;
            gp_status st;
            char *out = render_case(t, c, &n, &st);
            const char *want = cJSON_GetObjectItem(c, "text")->valuestring;
            n_cases++;
            CHECK_STATUS(st, GP_OK);
            if (!out) continue;
            int32_t *ids = NULL, *want_ids = NULL, n_ids = 0;
            int n_want = fx_int_array(cJSON_GetObjectItem(c, "ids"), &want_ids);
            CHECK_STATUS(gp_tokenizer_encode(tok, out, n, 0, &ids, &n_ids), GP_OK);
            int text_ok = n == strlen(want) && memcmp(out, want, n) == 0;
            int ids_ok = ids && n_ids == n_want && memcmp(ids, want_ids, (size_t)n_ids * sizeof *ids) == 0;
            if (!text_ok) show_diff(model->string, want, strlen(want), out, n);
            if (!ids_ok) NOTE("%s case %d: ids differ at %d", model->string, n_cases, fx_first_diff(ids, n_ids, want_ids, n_want));
            CHECK(text_ok && ids_ok);
            n_ok += text_ok && ids_ok;
            gp_free(ids);
            free(want_ids);
            gp_free(out);
        }
        gp_chat_template_free(t);
        gp_tokenizer_free(tok);
    }
    NOTE("%d/%d fixture conversations identical (text and ids)", n_ok, n_cases);
    CHECK(n_cases >= 24);
    cJSON_Delete(ref);
}
