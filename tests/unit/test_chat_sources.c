/* test_chat_sources.c — where a model's chat template comes from, as transformers 5 loads it: chat_template.jinja and
 * additional_chat_templates/NAME.jinja take priority over tokenizer_config.json's chat_template (a string or a list of
 * named templates); with several templates "tool_use" is chosen when tools are given, else "default", else the caller
 * must name one; special tokens (plain strings or AddedToken objects) become template variables. */
#include "test.h"

#include "genparity.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void put(const char *dir, const char *name, const char *text) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (f) fputs(text, f), fclose(f);
}

static char *render(const gp_chat_template *t, const char *tools, const char *name, gp_status *st) {
    gp_chat_opts o = gp_chat_opts_default();
    char *out = NULL;
    o.messages_json = "[{\"role\": \"user\", \"content\": \"hi\"}]";
    o.tools_json = tools;
    o.template_name = name;
    *st = gp_chat_template_render(t, &o, &out, NULL);
    return out;
}

TEST(chat_template_sources_and_selection) {
    char *dir = gp_test_tmpdir();
    put(dir, "tokenizer_config.json",
        "{\"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<B>\"}, \"eos_token\": \"<E>\", \"unk_token\": null,"
        " \"chat_template\": [{\"name\": \"default\", \"template\": \"D{{ bos_token }}{{ eos_token }}{{ unk_token is defined }}\"},"
        " {\"name\": \"tool_use\", \"template\": \"T{{ tools|length }}\"}]}");
    gp_chat_template *t = NULL;
    gp_status st;
    REQUIRE(gp_chat_template_load(dir, &t) == GP_OK);
    char *o = render(t, NULL, NULL, &st);
    CHECK_STR(o, "D<B><E>False");
    gp_free(o);
    o = render(t, "[{\"type\": \"function\"}]", NULL, &st);
    CHECK_STR(o, "T1");
    gp_free(o);
    o = render(t, NULL, "tool_use", &st);
    CHECK_EQ_INT(st, GP_ERR_TEMPLATE); /* tools is none: |length of None is a type error, as in Python */
    gp_free(o);
    o = render(t, NULL, "nope", &st);
    CHECK_EQ_INT(st, GP_ERR_MISSING);
    CHECK(strstr(gp_errmsg(), "default, tool_use") != NULL);
    gp_free(o);
    CHECK_STR(gp_chat_template_special(t, "bos_token"), "<B>");
    CHECK(gp_chat_template_special(t, "unk_token") == NULL);
    gp_chat_template_free(t);

    /* template files win over the config's list; the config still gives the special tokens */
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/additional_chat_templates", dir);
    mkdir(sub, 0755);
    put(dir, "additional_chat_templates/tool_use.jinja", "file-tools\n");
    put(dir, "chat_template.jinja", "file-default {{ bos_token }}\n");
    REQUIRE(gp_chat_template_load(dir, &t) == GP_OK);
    o = render(t, NULL, NULL, &st);
    CHECK_STR(o, "file-default <B>"); /* keep_trailing_newline=False */
    gp_free(o);
    o = render(t, "[]", NULL, &st);
    CHECK_STR(o, "file-tools");
    gp_free(o);
    gp_chat_template_free(t);

    /* several named templates, none "default": a name (or tools with tool_use) is required */
    remove(strcat(strcpy(sub, dir), "/chat_template.jinja"));
    REQUIRE(gp_chat_template_load(dir, &t) == GP_OK);
    o = render(t, "[]", NULL, &st);
    CHECK_STR(o, "file-tools"); /* the only template */
    gp_free(o);
    gp_chat_template_free(t);

    put(dir, "tokenizer_config.json", "{\"chat_template\": 42}");
    remove(strcat(strcpy(sub, dir), "/additional_chat_templates/tool_use.jinja"));
    CHECK_STATUS(gp_chat_template_load(dir, &t), GP_ERR_FORMAT);
    CHECK(strstr(gp_errmsg(), "chat_template") != NULL);
    put(dir, "tokenizer_config.json", "{\"eos_token\": \"x\"}");
    CHECK_STATUS(gp_chat_template_load(dir, &t), GP_ERR_MISSING);
    put(dir, "tokenizer_config.json", "{\"chat_template\": \"{% if %}\"}");
    CHECK_STATUS(gp_chat_template_load(dir, &t), GP_ERR_FORMAT);
    CHECK(strstr(gp_errmsg(), "tokenizer_config.json: chat_template:1:") != NULL);
    free(dir);
}
