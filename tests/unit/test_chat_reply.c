/* test_chat_reply.c — gp_chat_parse_reply: reasoning (<think>...</think>, also when <think> was in the prompt or the
 * reply stopped inside it), Hermes/Qwen <tool_call> blocks (several, arguments as objects or strings, malformed ones
 * left in content), Llama 3.x JSON calls (with or without <|python_tag|>), and plain text. */
#include "test.h"

#include "genparity.h"

#include <cJSON.h>

#include <stdlib.h>
#include <string.h>

static cJSON *parse(const char *text) {
    char *j = NULL;
    if (gp_chat_parse_reply(text, strlen(text), &j) != GP_OK) return NULL;
    cJSON *o = cJSON_Parse(j);
    if (!o) NOTE("not JSON: %s", j);
    gp_free(j);
    return o;
}

static const char *str(const cJSON *o, const char *k) { return cJSON_GetStringValue(cJSON_GetObjectItem(o, k)); }

static const char *call(const cJSON *o, int i, const char *k) {
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "tool_calls"), i);
    return cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "function"), k));
}

TEST(chat_reply_reasoning_and_tool_calls) {
    cJSON *o = parse("<think>\nLet me check.\n</think>\n\nSure. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                     "{\"city\": \"Par\\u00eds\", \"n\": 1.0}}\n</tool_call>\n<tool_call>{\"name\": \"add\", \"arguments\": "
                     "\"{\\\"a\\\": 1}\"}</tool_call>");
    REQUIRE(o);
    CHECK_STR(str(o, "reasoning_content"), "Let me check.");
    CHECK_STR(str(o, "content"), "Sure.");
    CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(o, "tool_calls")), 2);
    CHECK_STR(call(o, 0, "name"), "get_weather");
    CHECK_STR(call(o, 0, "arguments"), "{\"city\": \"París\", \"n\": 1.0}"); /* json.dumps(ensure_ascii=False) */
    CHECK_STR(call(o, 1, "name"), "add");
    CHECK_STR(call(o, 1, "arguments"), "{\"a\": 1}");
    CHECK_STR(str(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "tool_calls"), 1), "type"), "function");
    cJSON_Delete(o);

    o = parse("reasoning started in the prompt</think>The answer is 4.");
    CHECK_STR(str(o, "reasoning_content"), "reasoning started in the prompt");
    CHECK_STR(str(o, "content"), "The answer is 4.");
    cJSON_Delete(o);

    o = parse("<think>stopped while thinking");
    CHECK_STR(str(o, "reasoning_content"), "stopped while thinking");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(o, "content")));
    cJSON_Delete(o);

    o = parse("<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"x\"}}");
    CHECK_STR(call(o, 0, "name"), "search");
    CHECK_STR(call(o, 0, "arguments"), "{\"q\": \"x\"}");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(o, "content")));
    cJSON_Delete(o);

    o = parse("Plain text {not json} <tool_call>{broken</tool_call>");
    CHECK_STR(str(o, "content"), "Plain text {not json} <tool_call>{broken</tool_call>");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(o, "reasoning_content")));
    CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(o, "tool_calls")), 0);
    cJSON_Delete(o);

    o = parse("");
    CHECK(o && cJSON_IsNull(cJSON_GetObjectItem(o, "content")));
    cJSON_Delete(o);
    char *j = NULL;
    CHECK_STATUS(gp_chat_parse_reply(NULL, 3, &j), GP_ERR_INVALID_ARG);
}
