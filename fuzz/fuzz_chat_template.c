/* fuzz_chat_template.c — libFuzzer target for chat templates: the input is "TEMPLATE\0MESSAGES_JSON" (without a NUL,
 * the whole input is the template and a fixed conversation is rendered).  Parsing fails with a message or gives a
 * template whose rendering returns GP_OK, GP_ERR_FORMAT or GP_ERR_TEMPLATE with a message, within the sandbox limits;
 * the reply parser gets the rendered text. */
#include "fuzz_common.h"

static const char MESSAGES[] = "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": "
                               "\"Hi \\u00e9\"}, {\"role\": \"assistant\", \"content\": \"<think>x</think>Hello\"}, "
                               "{\"role\": \"user\", \"content\": \"And?\"}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - (const char *)data) : size;
    char *msgs = NULL;
    if (nul) {
        size_t mlen = size - tlen - 1;
        msgs = malloc(mlen + 1);
        memcpy(msgs, nul + 1, mlen);
        msgs[mlen] = 0;
    }
    gp_chat_template *t = NULL;
    gp_status s = gp_chat_template_from_string((const char *)data, tlen, NULL, "fuzz", &t);
    if (s != GP_OK) {
        FZ_CHECK(t == NULL && gp_errmsg()[0] != 0);
        free(msgs);
        return 0;
    }
    gp_chat_opts o = gp_chat_opts_default();
    o.messages_json = msgs ? msgs : MESSAGES;
    o.add_generation_prompt = 1;
    o.now = 0;
    char *out = NULL;
    size_t len = 0;
    s = gp_chat_template_render(t, &o, &out, &len);
    FZ_CHECK(s == GP_OK || s == GP_ERR_FORMAT || s == GP_ERR_TEMPLATE || s == GP_ERR_NOMEM);
    if (s == GP_OK) {
        FZ_CHECK(out && strlen(out) <= len);
        char *json = NULL;
        if (gp_chat_parse_reply(out, len, &json) == GP_OK) gp_free(json);
        gp_free(out);
    }
    gp_chat_template_free(t);
    free(msgs);
    return 0;
}
