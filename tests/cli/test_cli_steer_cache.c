/* test_cli_steer_cache.c — the steering and cache contracts of the CLI: generate --steer-* / --logit-bias-* reproduce
 * the fixtures' steered greedy tokens; cache build + generate --prompt-cache returns exactly the tokens of a plain
 * run of the whole prompt (every fixture model); cache inspect; rotating / quantized flags; steer-vector and
 * validate (determinism, KL against reference logits, thresholds and exit codes). */
#include "fixtures.h"
#include "test.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

/* Loads models/<name>/reference.json; *dir receives the model folder. */
static cJSON *load_ref(const char *name, char **dir) {
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s", name);
    *dir = gp_test_fixture(rel);
    if (!*dir) return NULL;
    char path[1024];
    snprintf(path, sizeof path, "%s/reference.json", *dir);
    return fx_read_json(path);
}

static int tokens_equal(const cJSON *j, const cJSON *want, const char *what) {
    int32_t *a, *b;
    int na = fx_int_array(cJSON_GetObjectItem(j, "tokens"), &a), nb = fx_int_array(want, &b);
    int d = fx_first_diff(a, na, b, nb);
    if (d >= 0) {
        NOTE("%s: tokens differ at %d", what, d);
        fx_print_ids("got ", a, na);
        fx_print_ids("want", b, nb);
    }
    free(a);
    free(b);
    return d < 0;
}

TEST(cli_steering_reproduces_fixture_rows) {
    const char *models[] = {"tiny-llama", "tiny-gemma2"};
    for (int mi = 0; mi < 2; mi++) {
        char *dir;
        cJSON *ref = load_ref(models[mi], &dir);
        if (!ref) {
            free(dir);
            return;
        }
        int32_t *ids;
        int n = fx_int_array(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "prompts"), 0), "ids"), &ids);
        char idbuf[2048], args[8192];
        fx_join_ids(ids, n, idbuf, sizeof idbuf);
        const cJSON *steer = cJSON_GetObjectItem(ref, "steering"), *row;
        cJSON_ArrayForEach(row, cJSON_GetObjectItem(steer, "residual_injection")) {
            snprintf(args, sizeof args,
                     "generate --model '%s' --prompt-ids %s --max-tokens 32 --temp 0 --format json "
                     "--steer-vector '%s/reference.safetensors:steer.vector' --steer-layer %d --steer-alpha %.9g "
                     "--steer-ramp %d",
                     dir, idbuf, dir, cJSON_GetObjectItem(row, "layer")->valueint,
                     cJSON_GetObjectItem(row, "alpha")->valuedouble, cJSON_GetObjectItem(row, "ramp_steps")->valueint);
            cJSON *j = fx_run_json(args);
            CHECK(j && tokens_equal(j, cJSON_GetObjectItem(row, "greedy_32"), models[mi]));
            cJSON_Delete(j);
        }
        cJSON_ArrayForEach(row, cJSON_GetObjectItem(steer, "logit_bias")) {
            snprintf(args, sizeof args,
                     "generate --model '%s' --prompt-ids %s --max-tokens 32 --temp 0 --format json "
                     "--logit-bias-vector '%s/reference.safetensors:steer.vector' --logit-bias-alpha %.9g",
                     dir, idbuf, dir, cJSON_GetObjectItem(row, "alpha")->valuedouble);
            cJSON *j = fx_run_json(args);
            CHECK(j && tokens_equal(j, cJSON_GetObjectItem(row, "greedy_32"), models[mi]));
            cJSON_Delete(j);
        }
        free(ids);
        cJSON_Delete(ref);
        free(dir);
    }
}

/* The "done when": a cache built from a prompt's prefix + generate --prompt-cache == a plain run. */
TEST(cli_prompt_cache_equals_plain_run_every_model) {
    char *tmp = gp_test_tmpdir();
    for (int mi = 0; mi < GP_N_FIXTURE_MODELS; mi++) {
        char *dir;
        cJSON *ref = load_ref(GP_FIXTURE_MODELS[mi], &dir);
        if (!ref) {
            free(dir);
            break;
        }
        const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "prompts"), 3);
        int32_t *ids;
        int n = fx_int_array(cJSON_GetObjectItem(p, "ids"), &ids);
        char pre[4096], all[4096], args[12288], cache[1024], *out;
        fx_join_ids(ids, n - 3, pre, sizeof pre);
        fx_join_ids(ids, n, all, sizeof all);
        snprintf(cache, sizeof cache, "%s/%s.safetensors", tmp, GP_FIXTURE_MODELS[mi]);
        snprintf(args, sizeof args, "%s cache build --model '%s' --prompt-ids %s -o '%s'", fx_bin(), dir, pre, cache);
        CHECK_EQ_INT(fx_run(args, 1, &out), 0);
        free(out);
        snprintf(args, sizeof args, "generate --model '%s' --prompt-ids %s --max-tokens 48 --temp 0 --format json "
                                    "--prompt-cache '%s'", dir, all, cache);
        cJSON *j = fx_run_json(args);
        CHECK(j && tokens_equal(j, cJSON_GetObjectItem(p, "greedy_48"), GP_FIXTURE_MODELS[mi]));
        CHECK(j && cJSON_GetObjectItem(j, "prompt_cache_tokens")->valueint == n - 3);
        CHECK(j && cJSON_GetObjectItem(j, "kv_cache_bytes")->valuedouble > 0);
        cJSON_Delete(j);
        /* inspect */
        snprintf(args, sizeof args, "cache inspect '%s' --format json", cache);
        j = fx_run_json(args);
        CHECK(j && atoi(cJSON_GetObjectItem(j, "n_past")->valuestring) == n - 3);
        int32_t *got;
        int ng = j ? fx_int_array(cJSON_GetObjectItem(j, "token_ids"), &got) : -1;
        CHECK(ng == n - 3 && fx_first_diff(got, ng, ids, n - 3) < 0);
        if (ng >= 0) free(got);
        cJSON_Delete(j);
        /* a prompt that does not extend the cache is refused */
        snprintf(args, sizeof args, "%s generate --model '%s' --prompt-ids 7,8,9 --prompt-cache '%s'", fx_bin(), dir,
                 cache);
        CHECK_EQ_INT(fx_run(args, 1, &out), 1);
        CHECK(out && strstr(out, "does not extend"));
        free(out);
        free(ids);
        cJSON_Delete(ref);
        free(dir);
    }
    free(tmp);
}

TEST(cli_rotating_and_quantized_flags) {
    char *dir;
    cJSON *ref = load_ref("tiny-llama", &dir);
    if (!ref) {
        free(dir);
        return;
    }
    const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "prompts"), 0);
    int32_t *ids;
    int n = fx_int_array(cJSON_GetObjectItem(p, "ids"), &ids);
    char idbuf[2048], args[4096];
    fx_join_ids(ids, n, idbuf, sizeof idbuf);
    /* a rotating cache larger than the sequence changes nothing */
    snprintf(args, sizeof args, "generate --model '%s' --prompt-ids %s --max-tokens 48 --temp 0 --format json "
                                "--max-kv-size 64 --keep 4", dir, idbuf);
    cJSON *j = fx_run_json(args);
    CHECK(j && tokens_equal(j, cJSON_GetObjectItem(p, "greedy_48"), "max-kv-size 64"));
    double rot = j ? cJSON_GetObjectItem(j, "kv_cache_bytes")->valuedouble : 0;
    cJSON_Delete(j);
    snprintf(args, sizeof args, "generate --model '%s' --prompt-ids %s --max-tokens 48 --temp 0 --format json", dir,
             idbuf);
    j = fx_run_json(args);
    double plain = j ? cJSON_GetObjectItem(j, "kv_cache_bytes")->valuedouble : 0;
    cJSON_Delete(j);
    snprintf(args, sizeof args, "generate --model '%s' --prompt-ids %s --max-tokens 48 --temp 0 --format json "
                                "--kv-bits 4 --kv-group-size 32 --max-kv-size 16", dir, idbuf);
    j = fx_run_json(args);
    double q = j ? cJSON_GetObjectItem(j, "kv_cache_bytes")->valuedouble : 0;
    CHECK(j && cJSON_GetArraySize(cJSON_GetObjectItem(j, "tokens")) == 48);
    cJSON_Delete(j);
    NOTE("kv_cache_bytes: plain %.0f, rotating 64 %.0f, 4-bit rotating 16 %.0f", plain, rot, q);
    CHECK(q > 0 && q < plain && rot > 0);
    char *out;
    snprintf(args, sizeof args, "%s generate --model '%s' --prompt-ids 1 --kv-bits 3", fx_bin(), dir);
    CHECK_EQ_INT(fx_run(args, 1, &out), 2);
    free(out);
    free(ids);
    cJSON_Delete(ref);
    free(dir);
}

TEST(cli_steer_vector_and_validate) {
    char *dir;
    cJSON *ref = load_ref("tiny-llama", &dir);
    if (!ref) {
        free(dir);
        return;
    }
    char *tmp = gp_test_tmpdir();
    char prompts[1024], pos[1024], neg[1024], vec[1024], args[8192], *out;
    snprintf(prompts, sizeof prompts, "%s/prompts.txt", tmp);
    snprintf(pos, sizeof pos, "%s/pos.txt", tmp);
    snprintf(neg, sizeof neg, "%s/neg.txt", tmp);
    snprintf(vec, sizeof vec, "%s/v.safetensors", tmp);
    FILE *f = fopen(prompts, "w");
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(ref, "prompts")) {
        char *lit = cJSON_PrintUnformatted(cJSON_GetObjectItem(p, "text"));
        fprintf(f, "%s\n", lit); /* JSON string lines: the texts hold newlines */
        free(lit);
    }
    fclose(f);
    f = fopen(pos, "w");
    fputs("I love thee, my sweet lord.\nO happy, happy day!\n", f);
    fclose(f);
    f = fopen(neg, "w");
    fputs("I hate thee, vile knave.\nO cursed, wretched day!\n", f);
    fclose(f);
    snprintf(args, sizeof args, "%s steer-vector --model '%s' --positive '%s' --negative '%s' --layer 1 -o '%s'",
             fx_bin(), dir, pos, neg, vec);
    CHECK_EQ_INT(fx_run(args, 1, &out), 0);
    free(out);
    float *v;
    int32_t nv;
    char spec[1100];
    snprintf(spec, sizeof spec, "%s:steer.vector", vec);
    CHECK_STATUS(gp_steer_vector_load(spec, &v, &nv), GP_OK);
    CHECK_EQ_INT(nv, 64);
    gp_free(v);
    snprintf(args, sizeof args,
             "validate --model '%s' --prompts '%s' --steer-vector '%s' --layer 1 --alphas 0,4,40 --seed 3 "
             "--max-tokens 24 --reference-logits '%s/reference.safetensors' --format json",
             dir, prompts, vec, dir);
    cJSON *j = fx_run_json(args);
    REQUIRE(j);
    const cJSON *vs = cJSON_GetObjectItem(j, "variants");
    CHECK_EQ_INT(cJSON_GetArraySize(vs), 3);
    const cJSON *base = cJSON_GetArrayItem(vs, 0), *strong = cJSON_GetArrayItem(vs, 2);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(base, "deterministic")));
    double kl0 = cJSON_GetObjectItem(base, "kl_mean")->valuedouble;
    double kl40 = cJSON_GetObjectItem(strong, "kl_mean")->valuedouble;
    NOTE("validate: KL(ref || alpha 0) = %.3g, KL(ref || alpha 40) = %.3g, divergence at 40: %.0f%%", kl0, kl40,
         cJSON_GetObjectItem(strong, "divergence_pct")->valuedouble);
    CHECK(kl0 < 1e-6); /* unsteered == transformers' reference distribution */
    CHECK(kl40 > kl0);
    CHECK(cJSON_GetObjectItem(base, "divergence_pct")->valuedouble == 0);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(j, "pass")));
    cJSON_Delete(j);
    /* an impossible threshold fails with exit code 1 */
    snprintf(args, sizeof args,
             "%s validate --model '%s' --prompts '%s' --steer-vector '%s' --layer 1 --alphas 4 --seed 3 "
             "--max-tokens 8 --min-divergence 101",
             fx_bin(), dir, prompts, vec);
    CHECK_EQ_INT(fx_run(args, 0, &out), 1);
    CHECK(out && strstr(out, "FAIL"));
    free(out);
    free(tmp);
    cJSON_Delete(ref);
    free(dir);
}

/* examples/isolated_caches.sh runs end to end on the embedded model: four caches, four answers. */
TEST(cli_example_isolated_caches) {
    char cmd[1024], *out;
    snprintf(cmd, sizeof cmd, "sh examples/isolated_caches.sh %s", fx_bin());
    CHECK_EQ_INT(fx_run(cmd, 1, &out), 0);
    int caches = 0;
    for (const char *p = out; p && (p = strstr(p, "== cache '")); p++) caches++;
    CHECK_EQ_INT(caches, 4);
    CHECK(out && strstr(out, "bytes of KV cache"));
    free(out);
}
