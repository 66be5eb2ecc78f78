/* test_cli_beam.c — `genparity generate --num-beams`: the JSON output's `sequences` (best first, `tokens` = the
 * best) equal references/beam_search.json's beam4_ret2_lp2_early row for prompt 0 of tiny-llama; beam search that
 * transformers' semantics do not cover is refused with an error naming the field. */
#include "fixtures.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

TEST(cli_generate_beam_sequences_match_transformers) {
    char *dir = gp_test_fixture("models/tiny-llama");
    char *bj = gp_test_fixture("references/beam_search.json");
    fx_refs fr;
    if (!dir || !bj || fx_refs_load("tiny-llama", &fr)) {
        free(dir);
        free(bj);
        return;
    }
    cJSON *ref = fx_read_json(bj);
    const cJSON *row = cJSON_GetArrayItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "models"), "tiny-llama"), "beam4_ret2_lp2_early"),
        0);
    const cJSON *p0 = cJSON_GetArrayItem(cJSON_GetObjectItem(fr.json, "prompts"), 0);
    int32_t *ids = NULL;
    int n = fx_int_array(cJSON_GetObjectItem(p0, "ids"), &ids);
    REQUIRE(row && n > 0);
    char idbuf[2048], args[4096];
    fx_join_ids(ids, n, idbuf, sizeof idbuf);
    snprintf(args, sizeof args, "generate --model '%s' --prompt-ids %s --max-tokens 24 --num-beams 4 "
             "--num-return-sequences 2 --length-penalty 2 --early-stopping --format json", dir, idbuf);
    cJSON *j = fx_run_json(args);
    CHECK(j);
    const cJSON *got = cJSON_GetObjectItem(j, "sequences"), *want = cJSON_GetObjectItem(row, "sequences");
    CHECK_EQ_INT(cJSON_GetArraySize(got), cJSON_GetArraySize(want));
    for (int k = 0; k < cJSON_GetArraySize(want); k++) {
        int32_t *a = NULL, *b = NULL;
        int na = fx_int_array(cJSON_GetArrayItem(got, k), &a), nb = fx_int_array(cJSON_GetArrayItem(want, k), &b);
        int d = fx_first_diff(a, na, b, nb);
        if (d >= 0) {
            NOTE("sequence %d differs at token %d", k, d);
            gp_test_failed = 1;
        }
        if (k == 0) {
            int32_t *t = NULL;
            int nt = fx_int_array(cJSON_GetObjectItem(j, "tokens"), &t);
            CHECK(fx_first_diff(t, nt, a, na) < 0);
            free(t);
        }
        free(a);
        free(b);
    }
    CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(j, "sequence_scores")), cJSON_GetArraySize(want));
    cJSON_Delete(j);
    /* refused combinations name the field */
    const char *bad[] = {"--num-beams 2 --num-return-sequences 3", "--num-beams 2 --temp 0.7",
                         "--num-beams 2 --stop x", "--num-return-sequences 2"};
    const char *field[] = {"num_return_sequences", "do_sample", "stop_strings", "num_return_sequences"};
    for (int k = 0; k < 4; k++) {
        char cmd[4096], *out = NULL;
        snprintf(cmd, sizeof cmd, "%s generate --model '%s' --prompt-ids %s --max-tokens 4 %s", fx_bin(), dir, idbuf,
                 bad[k]);
        int rc = fx_run(cmd, 1, &out);
        if (rc != 1 || !out || !strstr(out, field[k])) {
            NOTE("'%s': exit %d, output: %s", bad[k], rc, out ? out : "(none)");
            gp_test_failed = 1;
        }
        free(out);
    }
    free(ids);
    cJSON_Delete(ref);
    fx_refs_free(&fr);
    free(dir);
    free(bj);
}
