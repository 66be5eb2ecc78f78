/* test_json.c — the one JSON reader (src/io/json.h): the bounded parse refuses bad syntax with the byte offset,
 * absurd nesting without recursion, trees over the limit before allocating them, duplicate keys on request, and
 * reports an allocation failure inside cJSON as GP_ERR_NOMEM (not "not valid JSON"); the typed getters check types
 * and ranges and name the file and the field. */
#include "io/json.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static gp_status parse(const char *text, size_t max_tree, unsigned flags) {
    cJSON *root = NULL;
    gp_status s = gp_json_parse("t.json", text, strlen(text), max_tree, flags, &root);
    if (s == GP_OK) CHECK(root != NULL);
    else CHECK(root == NULL);
    cJSON_Delete(root);
    return s;
}

TEST(json_syntax_errors_name_the_byte) {
    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"", "byte 0"},
        {"{\"a\": 1,}", "byte 8"},
        {"{\"a\" 1}", "':'"},
        {"[1, 2", "truncated"},
        {"{\"a\": \"x", "truncated"},
        {"[01]", "byte 2"},
        {"[1.]", "malformed number"},
        {"[-]", "malformed number"},
        {"[1e]", "malformed number"},
        {"[tru]", "unexpected"},
        {"[\"\\x\"]", "escape"},
        {"[\"\\u12\"]", "4 hex"},
        {"[\"\\ud800\"]", "surrogate"},
        {"[\"\\udc00\"]", "surrogate"},
        {"{} {}", "after the JSON value"},
        {"[1234567890123456789012345678901234567890123456789012345678901234567890]", "63 characters"},
        {"NaN", "unexpected"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gp_status s = parse(bad[i].text, 1 << 20, 0);
        if (s != GP_ERR_FORMAT || !strstr(gp_errmsg(), "t.json") || !strstr(gp_errmsg(), bad[i].needle)) {
            NOTE("'%s' -> %d '%s' (want FORMAT naming '%s')", bad[i].text, (int)s, gp_errmsg(), bad[i].needle);
            gp_test_failed = 1;
        }
    }
    /* what the scan accepts cJSON parses (so a cJSON failure after the scan can only be memory) */
    static const char *const good[] = {"0", "-0.5e+3", "\"\\ud83d\\ude00\"", "[[], {}, [{}]]", " {\"a\": [true, false, null]} ",
                                       "\"\\u0000\"", "{\"\": 1}", "1E400"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) CHECK_STATUS(parse(good[i], 1 << 20, 0), GP_OK);
}

TEST(json_deep_nesting_is_refused_without_recursion) {
    size_t n = 200000;
    char *t = malloc(2 * n + 1);
    REQUIRE(t);
    memset(t, '[', n);
    memset(t + n, ']', n);
    t[2 * n] = 0;
    CHECK_STATUS(parse(t, (size_t)1 << 30, 0), GP_ERR_FORMAT);
    CHECK(strstr(gp_errmsg(), "nesting") != NULL);
    free(t);
}

TEST(json_tree_over_the_limit_is_refused_before_allocation) {
    /* 1 MB of "1," is ~500k values, ~40 MB as a cJSON tree */
    size_t n = 1 << 20;
    char *t = malloc(n + 3);
    REQUIRE(t);
    t[0] = '[';
    for (size_t i = 1; i + 1 < n; i += 2) t[i] = '1', t[i + 1] = ',';
    t[n - 1] = '1';
    t[n] = ']';
    t[n + 1] = 0;
    size_t est = gp_json_tree_estimate(t, n + 1);
    NOTE("1 MB of small values: tree estimate %zu MB", est >> 20);
    CHECK(est > (size_t)30 << 20);
    CHECK_STATUS(parse(t, (size_t)16 << 20, 0), GP_ERR_FORMAT);
    CHECK(strstr(gp_errmsg(), "over the limit") != NULL);
    CHECK_STATUS(parse(t, (size_t)64 << 20, 0), GP_OK);
    free(t);
}

/* cJSON allocation hooks that fail after a budget of calls (restored after the test). */
static int g_budget;
static void *failing_malloc(size_t n) { return g_budget-- > 0 ? malloc(n) : NULL; }

TEST(json_allocation_failure_is_nomem) {
    const char *text = "{\"a\": [1, 2, 3, {\"b\": \"a string value\"}], \"c\": \"x\"}";
    int n_nomem = 0;
    for (int budget = 0; budget < 12; budget++) {
        cJSON_Hooks h = {failing_malloc, free};
        g_budget = budget;
        cJSON_InitHooks(&h);
        cJSON *root = NULL;
        gp_status s = gp_json_parse("t.json", text, strlen(text), 1 << 20, 0, &root);
        cJSON_InitHooks(NULL);
        if (s == GP_OK) {
            cJSON_Delete(root);
            continue;
        }
        if (s != GP_ERR_NOMEM || strstr(gp_errmsg(), "not valid")) {
            NOTE("budget %d: %d '%s' (want NOMEM)", budget, (int)s, gp_errmsg());
            gp_test_failed = 1;
        }
        n_nomem++;
    }
    NOTE("%d allocation budgets failed, each reported as NOMEM", n_nomem);
    CHECK(n_nomem >= 5);
}

TEST(json_duplicate_keys) {
    CHECK_STATUS(parse("{\"a\": 1, \"b\": {\"c\": 1, \"c\": 2}}", 1 << 20, 0), GP_OK); /* allowed unless asked */
    CHECK_STATUS(parse("{\"a\": 1, \"b\": {\"c\": 1, \"c\": 2}}", 1 << 20, GP_JSON_NO_DUP_KEYS), GP_ERR_FORMAT);
    CHECK(strstr(gp_errmsg(), "'c' appears twice") != NULL);
    /* a big object (the sorted path) */
    char big[4096];
    size_t k = (size_t)snprintf(big, sizeof big, "{");
    for (int i = 0; i < 100; i++) k += (size_t)snprintf(big + k, sizeof big - k, "\"k%d\": %d, ", i, i);
    snprintf(big + k, sizeof big - k, "\"k57\": 0}");
    CHECK_STATUS(parse(big, 1 << 20, GP_JSON_NO_DUP_KEYS), GP_ERR_FORMAT);
    CHECK(strstr(gp_errmsg(), "'k57'") != NULL);
    big[k - 2] = '}';
    big[k - 1] = 0;
    CHECK_STATUS(parse(big, 1 << 20, GP_JSON_NO_DUP_KEYS), GP_OK);
}

TEST(json_getters_check_types_and_ranges) {
    const char *text = "{\"i\": 7, \"big\": 1e20, \"neg\": -3, \"frac\": 2.5, \"s\": \"x\", \"b\": true, \"n\": null,"
                       "\"ids\": [1, 2], \"bad_ids\": [1, 4e9], \"o\": {\"x\": -1}}";
    cJSON *root;
    REQUIRE(gp_json_parse("m/config.json", text, strlen(text), 1 << 20, 0, &root) == GP_OK);
    gp_jobj o = gp_jobj_root("m/config.json", root);
    int32_t v = -99;
    CHECK_STATUS(gp_json_i32(&o, "i", 0, 10, &v), GP_OK);
    CHECK_EQ_INT(v, 7);
    CHECK_STATUS(gp_json_i32(&o, "absent", 0, 10, &v), GP_OK);
    CHECK_STATUS(gp_json_i32(&o, "n", 0, 10, &v), GP_OK); /* null = not set */
    CHECK_EQ_INT(v, 7);
    CHECK_STATUS(gp_json_need_i32(&o, "absent", 0, 10, &v), GP_ERR_MISSING);
    CHECK(strstr(gp_errmsg(), "m/config.json: field 'absent'") != NULL);
    CHECK_STATUS(gp_json_i32(&o, "big", 0, INT32_MAX, &v), GP_ERR_FORMAT);
    CHECK(strstr(gp_errmsg(), "'big'") != NULL);
    CHECK_STATUS(gp_json_i32(&o, "neg", 0, 10, &v), GP_ERR_FORMAT);
    CHECK_STATUS(gp_json_i32(&o, "frac", 0, 10, &v), GP_ERR_FORMAT);
    CHECK_STATUS(gp_json_i32(&o, "s", 0, 10, &v), GP_ERR_FORMAT);
    int64_t w = 0;
    CHECK_STATUS(gp_json_int(&o, "big", INT64_MIN, INT64_MAX, &w), GP_ERR_FORMAT); /* beyond 2^53: not exact */
    double d = 0;
    CHECK_STATUS(gp_json_num(&o, "frac", 0, 2, &d), GP_ERR_FORMAT);
    CHECK_STATUS(gp_json_num(&o, "frac", 0, 3, &d), GP_OK);
    int b = 0;
    CHECK_STATUS(gp_json_bool(&o, "b", &b), GP_OK);
    CHECK_EQ_INT(b, 1);
    CHECK_STATUS(gp_json_bool(&o, "i", &b), GP_ERR_FORMAT);
    int32_t ids[8], n = 0;
    CHECK_STATUS(gp_json_ids(&o, "ids", 100, ids, 8, &n), GP_OK);
    CHECK_EQ_INT(n, 2);
    CHECK_STATUS(gp_json_ids(&o, "bad_ids", INT32_MAX, ids, 8, &n), GP_ERR_FORMAT);
    CHECK(strstr(gp_errmsg(), "'bad_ids[1]'") != NULL);
    CHECK_STATUS(gp_json_ids(&o, "ids", 100, ids, 1, &n), GP_ERR_FORMAT); /* more than cap */
    char pre[32];
    gp_jobj sub;
    CHECK_STATUS(gp_json_obj(&o, "o", &sub, pre, sizeof pre), GP_OK);
    CHECK_STATUS(gp_json_i32(&sub, "x", 0, 5, &v), GP_ERR_FORMAT);
    CHECK(strstr(gp_errmsg(), "'o.x'") != NULL);
    CHECK_STATUS(gp_json_obj(&o, "s", &sub, pre, sizeof pre), GP_ERR_FORMAT);
    cJSON_Delete(root);
}
