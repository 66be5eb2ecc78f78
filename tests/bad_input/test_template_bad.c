/* test_template_bad.c — malformed and hostile chat templates and inputs: every one is a clear error (status, and
 * "name:line:col" for the template's own faults), never a crash, a hang or unbounded memory (run under `make asan`). */
#include "test.h"

#include "genparity.h"

#include <stdlib.h>
#include <string.h>

static gp_status parse(const char *src, gp_chat_template **t) {
    return gp_chat_template_from_string(src, strlen(src), NULL, "t.jinja", t);
}

/* Renders src with one user message; returns the status, *msg = a copy of the error message. */
static gp_status render(const char *src, const char *messages, char **text, char msg[512]) {
    gp_chat_template *t = NULL;
    *text = NULL;
    gp_status st = parse(src, &t);
    if (st == GP_OK) {
        gp_chat_opts o = gp_chat_opts_default();
        o.messages_json = messages ? messages : "[{\"role\": \"user\", \"content\": \"hi\"}]";
        st = gp_chat_template_render(t, &o, text, NULL);
    }
    snprintf(msg, 512, "%s", st == GP_OK ? "" : gp_errmsg());
    gp_chat_template_free(t);
    return st;
}

TEST(template_syntax_errors_name_line_and_column) {
    static const struct { const char *src, *want; } cases[] = {
        {"abc\n{% if x %}never closed", "t.jinja:2:"},
        {"{{ x", "t.jinja:1:3: unexpected end of template"},
        {"ok {# comment", "t.jinja:1:4: missing end of comment tag"},
        {"{% for %}{% endfor %}", "t.jinja:1:8: expected a name"},
        {"{{ 'abc }}", "t.jinja:1:4: unexpected end of template: unterminated string"},
        {"{% endfor %}", "t.jinja:1:4: encountered unknown tag 'endfor'"},
        {"{% raw %}abc", "t.jinja:1:10: missing end of raw directive"},
        {"x\n  {{ 1 + }}", "t.jinja:2:10: unexpected end of print statement"},
        {"{% include 'x' %}", "t.jinja:1:4: 'include' is not available"},
        {"{% break %}", "t.jinja:1:4: 'break' outside of a loop"},
        {"{{ a b }}", "t.jinja:1:6: expected end of print statement"},
        {"{% set %}", "t.jinja:1:8: expected a name"},
        {"{{ x | }}", "t.jinja:1:8: expected a filter name"},
        {"{{ ) }}", "t.jinja:1:4: unexpected ')'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gp_chat_template *t = NULL;
        gp_status st = parse(cases[i].src, &t);
        const char *m = gp_errmsg();
        if (st != GP_ERR_FORMAT || strncmp(m, cases[i].want, strlen(cases[i].want)) != 0) {
            NOTE("template %zu \"%s\": got %s \"%s\", want GP_ERR_FORMAT \"%s...\"", i, cases[i].src, gp_status_str(st), m, cases[i].want);
            gp_test_failed = 1;
        }
        CHECK(t == NULL);
        gp_chat_template_free(t);
    }
}

TEST(template_nesting_is_bounded) {
    size_t n = 100000;
    char *deep = malloc(3 * n + 64);
    REQUIRE(deep);
    strcpy(deep, "{{ ");
    for (size_t i = 0; i < n; i++) deep[3 + i] = '(', deep[3 + n + 1 + i] = ')';
    deep[3 + n] = '1';
    strcpy(deep + 4 + 2 * n, " }}");
    gp_chat_template *t = NULL;
    CHECK_STATUS(parse(deep, &t), GP_ERR_FORMAT);
    NOTE("100000 '(': %s", gp_errmsg());
    CHECK(strstr(gp_errmsg(), "nested too deeply") != NULL);
    deep[0] = 0; /* 5000 nested ifs */
    for (int i = 0; i < 5000; i++) strcat(deep, "{%if 1%}");
    CHECK_STATUS(parse(deep, &t), GP_ERR_FORMAT);
    CHECK(strstr(gp_errmsg(), "nested too deeply") != NULL);
    deep[0] = 0; /* 5000 unary minus, 5000 nots */
    strcat(deep, "{{ ");
    for (int i = 0; i < 5000; i++) strcat(deep, "- not ");
    strcat(deep, "1 }}");
    CHECK_STATUS(parse(deep, &t), GP_ERR_FORMAT);
    free(deep);
    gp_chat_template_free(t);
}

TEST(template_runtime_limits) {
    static const struct { const char *src, *want; } cases[] = {
        {"{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}", "loop iterations"},
        {"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "nested too deeply"},
        {"{% macro f(n) %}{{ f(n + 1) ~ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nested too deeply"},
        {"{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "output exceeds"},
        {"{{ 'x' * 10000000000 }}", "string exceeds"},
        {"{% set ns = namespace(s='xy') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "exceeds"},
        {"{{ range(10000000000) }}", "range of more than"},
        {"{{ 9223372036854775807 + 1 }}", "integer overflow"},
        {"{{ 2 ** 1000 }}", "integer overflow"},
        {"{{ 1 // 0 }}", "division by zero"},
        {"{{ messages.__class__ }}", "unsafe"},
        {"{{ messages.append(1) }}", "unsafe"},
        {"{{ {}.update(a=1) }}", "unsafe"},
        {"{{ undefined_thing.attr }}", "'undefined_thing' is undefined"},
        {"{{ none.x.y }}", "undefined"},
        {"{% for x in none %}{% endfor %}", "not iterable"},
        {"{{ 'a' < 1 }}", "not supported"},
        {"{{ raise_exception('Only user and assistant roles are supported!') }}", "Only user and assistant roles are supported!"},
        {"{{ nofilter | nosuchfilter }}", "no filter named 'nosuchfilter'"},
        {"{{ 1 is nosuchtest }}", "no test named 'nosuchtest'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *text, msg[512];
        gp_status st = render(cases[i].src, NULL, &text, msg);
        if (st != GP_ERR_TEMPLATE || !strstr(msg, cases[i].want)) {
            NOTE("case %zu \"%.60s\": got %s \"%s\", want GP_ERR_TEMPLATE \"...%s...\"", i, cases[i].src, gp_status_str(st), msg, cases[i].want);
            gp_test_failed = 1;
        }
        gp_free(text);
    }
    char *text, msg[512]; /* raise_exception's message is verbatim, no position */
    CHECK_STATUS(render("{{ raise_exception('bad role') }}", NULL, &text, msg), GP_ERR_TEMPLATE);
    CHECK_STR(msg, "bad role");
}

TEST(template_bad_json_inputs) {
    static const char *const bad[] = {"", "[", "[{\"role\": \"user\",}]", "{\"role\": \"user\"}", "[1, 2", "[\"\\x\"]",
                                      "[\"\\ud800\"] trailing", "[nul]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *text, msg[512];
        gp_status st = render("{{ messages }}", bad[i], &text, msg);
        if (st != GP_ERR_FORMAT || !strstr(msg, "messages JSON")) {
            NOTE("messages '%s': got %s \"%s\"", bad[i], gp_status_str(st), msg);
            gp_test_failed = 1;
        }
        gp_free(text);
    }
    gp_chat_template *t = NULL;
    REQUIRE(parse("{{ x }}", &t) == GP_OK);
    gp_chat_opts o = gp_chat_opts_default();
    char *text = NULL;
    o.messages_json = "[]";
    o.kwargs_json = "[1]";
    CHECK_STATUS(gp_chat_template_render(t, &o, &text, NULL), GP_ERR_FORMAT);
    o.kwargs_json = NULL;
    o.tools_json = "{}";
    CHECK_STATUS(gp_chat_template_render(t, &o, &text, NULL), GP_ERR_FORMAT);
    o.tools_json = NULL;
    o.template_name = "tool_use";
    CHECK_STATUS(gp_chat_template_render(t, &o, &text, NULL), GP_ERR_MISSING);
    CHECK_STATUS(gp_chat_template_render(NULL, &o, &text, NULL), GP_ERR_INVALID_ARG);
    CHECK(text == NULL);
    gp_chat_template_free(t);
    gp_chat_template_free(NULL);
    CHECK_STATUS(gp_chat_template_load("/nonexistent-dir", &t), GP_ERR_MISSING);
}

TEST(template_hostile_bytes) {
    /* NUL bytes, invalid UTF-8 and stray braces in text are just text */
    const char src[] = "a\0b{\xff}{ {%- if true -%} x {%- endif -%}";
    gp_chat_template *t = NULL;
    REQUIRE(gp_chat_template_from_string(src, sizeof src - 1, NULL, "t", &t) == GP_OK);
    gp_chat_opts o = gp_chat_opts_default();
    o.messages_json = "[]";
    char *text = NULL;
    size_t n = 0;
    CHECK_STATUS(gp_chat_template_render(t, &o, &text, &n), GP_OK);
    CHECK_EQ_INT(n, 8);
    CHECK(text && memcmp(text, "a\0b{\xff}{x", 8) == 0);
    gp_free(text);
    gp_chat_template_free(t);
}

#include <dirent.h>

/* Every prefix (cut every 61 bytes) of every real template of the corpus, and the same with one byte flipped: a
 * clear status each time (GP_OK, GP_ERR_FORMAT with a position, or GP_ERR_TEMPLATE), never a crash (ASan run). */
TEST(template_truncated_and_mutated_real_templates) {
    DIR *d = opendir("tests/data/templates");
    REQUIRE(d);
    int n_runs = 0, n_bad_status = 0;
    const char *msgs = "[{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"},"
                       " {\"role\": \"assistant\", \"content\": \"a\", \"tool_calls\": [{\"type\": \"function\", \"function\":"
                       " {\"name\": \"f\", \"arguments\": {\"x\": 1}}}]}, {\"role\": \"tool\", \"content\": \"r\"}]";
    for (struct dirent *e; (e = readdir(d));) {
        if (!strstr(e->d_name, ".jinja")) continue;
        char path[512];
        snprintf(path, sizeof path, "tests/data/templates/%s", e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        char *src = malloc(1 << 20);
        size_t len = src ? fread(src, 1, (1 << 20) - 1, f) : 0;
        fclose(f);
        for (size_t cut = 1; src && cut <= len; cut += 61) {
            for (int flip = 0; flip < 2; flip++) {
                char save = src[cut - 1];
                if (flip) src[cut - 1] = "{}%#-()'\"|"[cut % 10];
                gp_chat_template *t = NULL;
                gp_status st = gp_chat_template_from_string(src, flip ? len : cut, NULL, e->d_name, &t);
                if (st == GP_OK) {
                    gp_chat_opts o = gp_chat_opts_default();
                    char *out = NULL;
                    o.messages_json = msgs;
                    o.tools_json = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}]";
                    o.add_generation_prompt = 1;
                    st = gp_chat_template_render(t, &o, &out, NULL);
                    gp_free(out);
                }
                if (st != GP_OK && st != GP_ERR_FORMAT && st != GP_ERR_TEMPLATE) n_bad_status++;
                if (st == GP_ERR_FORMAT && !strstr(gp_errmsg(), e->d_name)) n_bad_status++;
                gp_chat_template_free(t);
                src[cut - 1] = save;
                n_runs++;
            }
        }
        free(src);
    }
    closedir(d);
    NOTE("%d truncated/mutated templates parsed and rendered; %d with an unexpected status", n_runs, n_bad_status);
    CHECK(n_runs > 1000);
    CHECK_EQ_INT(n_bad_status, 0);
}
