/* test_cli_chat.c — the chat commands: `chat-template` prints the fixture reference renderings exactly and turns a
 * template's raise_exception into exit 1 + the message; `generate --messages` prompts with the reference ids and splits
 * the reply; `--save-cache` + `--prompt-cache --continue` equals one generation from the concatenated prompt; `chat`
 * keeps the cache across turns (only the new turn is prefilled), /save and /load, and Ctrl-C stops a reply only. */
#include "fixtures.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static char *write_tmp(const char *dir, const char *name, const char *text) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return p;
}

/* The reference case i of a fixture model, its messages/tools written to files; returns the case. */
static const cJSON *ref_case(cJSON *ref, const char *model, int i, const char *dir, char **msgs, char **tools, char **kw) {
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, model), i);
    char *mj = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "messages"));
    cJSON *k = cJSON_Duplicate(cJSON_GetObjectItem(c, "kwargs"), 1), *t = cJSON_DetachItemFromObject(k, "tools");
    char *tj = t ? cJSON_PrintUnformatted(t) : NULL;
    *kw = cJSON_PrintUnformatted(k);
    *msgs = write_tmp(dir, "m.json", mj);
    *tools = tj ? write_tmp(dir, "t.json", tj) : NULL;
    free(mj), free(tj);
    cJSON_Delete(k), cJSON_Delete(t);
    return c;
}

TEST(cli_chat_template_prints_references_exactly) {
    char *path = gp_test_fixture("references/chat_templates.json"), *dir = gp_test_fixture("models/tiny-qwen3");
    if (!path || !dir) return free(path), free(dir);
    cJSON *ref = fx_read_json(path);
    char *tmp = gp_test_tmpdir();
    int n = cJSON_GetArraySize(cJSON_GetObjectItem(ref, "qwen3")), ok = 0;
    for (int i = 0; i < n; i++) {
        char *m, *t, *kw, cmd[4096], *out;
        const cJSON *c = ref_case(ref, "qwen3", i, tmp, &m, &t, &kw);
        snprintf(cmd, sizeof cmd, "%s chat-template --model '%s' --messages '%s' %s%s%s %s --kwargs '%s'", fx_bin(), dir, m,
                 t ? "--tools '" : "", t ? t : "", t ? "'" : "",
                 cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")) ? "--add-generation-prompt" : "", kw);
        int rc = fx_run(cmd, 0, &out);
        const char *want = cJSON_GetObjectItem(c, "text")->valuestring;
        int same = rc == 0 && out && !strcmp(out, want);
        if (!same) NOTE("case %d: exit %d, got \"%.200s\"", i, rc, out ? out : "");
        ok += same;
        free(out), free(m), free(t), free(kw);
    }
    NOTE("%d/%d qwen3 reference renderings printed byte for byte", ok, n);
    CHECK(n > 0 && ok == n);
    /* raise_exception: exit 1, the message alone on stderr */
    char *tpl = write_tmp(tmp, "raise.jinja", "{% if messages[0].role != 'user' %}{{ raise_exception('Unsupported role: ' ~ messages[0].role) }}{% endif %}ok");
    char *m = write_tmp(tmp, "sys.json", "[{\"role\": \"narrator\", \"content\": \"x\"}]"), cmd[4096], *out;
    snprintf(cmd, sizeof cmd, "{ %s chat-template --template '%s' --messages '%s' 2>&1 >/dev/null; }", fx_bin(), tpl, m);
    int rc = fx_run(cmd, 1, &out);
    CHECK_EQ_INT(rc, 1);
    CHECK_STR(out, "Unsupported role: narrator\n");
    free(out);
    snprintf(cmd, sizeof cmd, "%s chat-template --template '%s' --messages '%s' --now 2025-13-01", fx_bin(), tpl, m);
    CHECK_EQ_INT(fx_run(cmd, 0, &out), 2);
    free(out), free(tpl), free(m), free(tmp), free(dir), free(path);
    cJSON_Delete(ref);
}

TEST(cli_generate_messages_uses_the_reference_prompt) {
    char *path = gp_test_fixture("references/chat_templates.json"), *dir = gp_test_fixture("models/tiny-qwen3");
    if (!path || !dir) return free(path), free(dir);
    cJSON *ref = fx_read_json(path);
    char *tmp = gp_test_tmpdir();
    int idx = -1, n = cJSON_GetArraySize(cJSON_GetObjectItem(ref, "qwen3"));
    for (int i = 0; i < n && idx < 0; i++) { /* a case with a generation prompt and tools */
        const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "qwen3"), i);
        if (cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")) && cJSON_GetObjectItem(cJSON_GetObjectItem(c, "kwargs"), "tools")) idx = i;
    }
    REQUIRE(idx >= 0);
    char *m, *t, *kw, args[4096];
    const cJSON *c = ref_case(ref, "qwen3", idx, tmp, &m, &t, &kw);
    snprintf(args, sizeof args, "generate --model '%s' --messages '%s' --tools '%s' --kwargs '%s' --max-tokens 4 --temp 0 --format json --stop-on-special",
             dir, m, t, kw);
    cJSON *j = fx_run_json(args);
    REQUIRE(j);
    int32_t *got, *want;
    int ng = fx_int_array(cJSON_GetObjectItem(j, "prompt_ids"), &got), nw = fx_int_array(cJSON_GetObjectItem(c, "ids"), &want);
    int d = fx_first_diff(got, ng, want, nw);
    if (d >= 0) NOTE("prompt ids differ from the reference at %d", d);
    CHECK(d < 0);
    CHECK(cJSON_GetObjectItem(j, "content") && cJSON_IsArray(cJSON_GetObjectItem(j, "tool_calls")) &&
          cJSON_GetObjectItem(j, "reasoning_content"));
    free(got), free(want), free(m), free(t), free(kw), free(tmp), free(dir), free(path);
    cJSON_Delete(j);
    cJSON_Delete(ref);
}

TEST(cli_generate_continue_appends_to_a_saved_cache) {
    char *dir = gp_test_fixture("models/tiny-llama3");
    if (!dir) return;
    char *tmp = gp_test_tmpdir(), args[4096];
    /* one run over "A" + "B" versus: run "A" and save, then --continue with "B" */
    snprintf(args, sizeof args, "generate --model '%s' --prompt 'ROMEO: speak' --max-tokens 5 --temp 0 --format json --save-cache '%s/a.kv'", dir, tmp);
    cJSON *a = fx_run_json(args);
    REQUIRE(a);
    snprintf(args, sizeof args, "generate --model '%s' --prompt-cache '%s/a.kv' --continue --prompt ' and JULIET:' --max-tokens 6 --temp 0 --format json", dir, tmp);
    cJSON *b = fx_run_json(args);
    REQUIRE(b);
    /* the concatenation: ids of A's prompt + A's evaluated reply + B's ids, generated in one go */
    int32_t *pa, *ta, *pb, *tb;
    int npa = fx_int_array(cJSON_GetObjectItem(a, "prompt_ids"), &pa), nta = fx_int_array(cJSON_GetObjectItem(a, "tokens"), &ta);
    int npb = fx_int_array(cJSON_GetObjectItem(b, "prompt_ids"), &pb), ntb = fx_int_array(cJSON_GetObjectItem(b, "tokens"), &tb);
    CHECK_EQ_INT((int)cJSON_GetObjectItem(b, "prompt_cache_tokens")->valuedouble, npa + nta - 1);
    int32_t all[512];
    int k = 0;
    for (int i = 0; i < npa; i++) all[k++] = pa[i];
    for (int i = 0; i < nta - 1; i++) all[k++] = ta[i]; /* the last generated token was never evaluated */
    for (int i = 0; i < npb; i++) all[k++] = pb[i];
    char ids[2048];
    fx_join_ids(all, k, ids, sizeof ids);
    snprintf(args, sizeof args, "generate --model '%s' --prompt-ids %s --max-tokens 6 --temp 0 --format json", dir, ids);
    cJSON *one = fx_run_json(args);
    REQUIRE(one);
    int32_t *to;
    int nto = fx_int_array(cJSON_GetObjectItem(one, "tokens"), &to);
    CHECK(fx_first_diff(tb, ntb, to, nto) < 0);
    /* without --continue a prompt that does not repeat the cache is refused, naming --continue */
    char cmd[4096], *out;
    snprintf(cmd, sizeof cmd, "%s generate --model '%s' --prompt-cache '%s/a.kv' --prompt 'JULIET:' --max-tokens 2", fx_bin(), dir, tmp);
    CHECK_EQ_INT(fx_run(cmd, 1, &out), 1);
    CHECK(out && strstr(out, "--continue"));
    free(out), free(pa), free(ta), free(pb), free(tb), free(to), free(tmp), free(dir);
    cJSON_Delete(a), cJSON_Delete(b), cJSON_Delete(one);
}

TEST(cli_chat_keeps_the_cache_across_turns) {
    char *dir = gp_test_fixture("models/tiny-qwen3");
    if (!dir) return;
    char *tmp = gp_test_tmpdir(), cmd[4096], *out;
    snprintf(cmd, sizeof cmd,
             "printf 'Hello!\\nHow are you?\\n/save %s/conv.json\\n/reset\\n/load %s/conv.json\\nAnd now?\\n/quit\\n' | "
             "%s chat --model '%s' --system 'Be brief.' --kwargs '{\"enable_thinking\": false}' --max-tokens 6 --temp 0 --stats",
             tmp, tmp, fx_bin(), dir);
    int rc = fx_run(cmd, 1, &out);
    CHECK_EQ_INT(rc, 0);
    /* every turn after the first reuses every cached position and prefills only the new turn */
    int turns = 0, all_reused = 1;
    for (const char *p = out; p && (p = strstr(p, "[prompt ")); p++) {
        int n, reused, cached, pre;
        if (sscanf(p, "[prompt %d tokens: %d reused from the cache (of %d cached), %d prefilled]", &n, &reused, &cached, &pre) != 4) continue;
        if (turns++ && (reused != cached || cached == 0 || pre >= n)) all_reused = 0;
    }
    if (!all_reused || turns != 3) NOTE("output: %s", out ? out : "");
    CHECK_EQ_INT(turns, 3);
    CHECK(all_reused);
    CHECK(out && strstr(out, "[loaded 5 messages;"));
    free(out), free(tmp), free(dir);
}

TEST(cli_chat_ctrl_c_stops_the_reply_not_the_program) {
    char *dir = gp_test_fixture("models/tiny-llama3");
    if (!dir) return;
    char *tmp = gp_test_tmpdir(), cmd[4096], *out;
    /* waits until the reply has started streaming (no timing is measured), interrupts it, then saves and quits */
    snprintf(cmd, sizeof cmd,
             "D='%s'; mkfifo $D/F && { %s chat --model '%s' --max-tokens 100000 --stats < $D/F > $D/OUT 2> $D/ERR & P=$!; "
             "exec 3>$D/F; printf 'Tell a long story\\n' >&3; i=0; "
             "while [ ! -s $D/OUT ] && kill -0 $P 2>/dev/null && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; "
             "kill -INT $P; printf '/save %s/c.json\\n/quit\\n' >&3; exec 3>&-; wait $P; echo rc=$?; cat $D/OUT $D/ERR; }",
             tmp, fx_bin(), dir, tmp);
    fx_run(cmd, 1, &out);
    CHECK(out && strstr(out, "rc=0"));
    CHECK(out && strstr(out, "[stopped]"));
    CHECK(out && strstr(out, "[saved 2 messages")); /* still serving commands, the partial reply kept */
    if (!out || !strstr(out, "[saved")) NOTE("output: %.500s", out ? out : "");
    free(out), free(tmp), free(dir);
}
