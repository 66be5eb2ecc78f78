/* test_hub_names.c — gp_model_resolve on a fake Hugging Face hub cache made in a temp dir: refs/main, a named ref,
 * a commit given directly, precedence of $HF_HUB_CACHE over $HF_HOME/hub, a local folder as is, and clear errors (a
 * missing model lists every place looked at; a snapshot without config.json; a malformed name).  The CLI loads a
 * fixture model by name through a snapshot of symlinks, as the hub stores them. */
#include "fixtures.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Makes <root>/models--<org>--<name>/{refs/main, snapshots/<commit>/config.json}. */
static void make_repo(const char *root, const char *flat, const char *commit, int with_config) {
    char p[1024];
    snprintf(p, sizeof p, "mkdir -p '%s/%s/refs' '%s/%s/snapshots/%s'", root, flat, root, flat, commit);
    CHECK(system(p) == 0);
    snprintf(p, sizeof p, "%s/%s/refs/main", root, flat);
    char line[128];
    snprintf(line, sizeof line, "%s", commit); /* huggingface_hub writes the hash without a newline */
    write_text(p, line);
    if (with_config) {
        snprintf(p, sizeof p, "%s/%s/snapshots/%s/config.json", root, flat, commit);
        write_text(p, "{}");
    }
}

TEST(hub_names_resolve_offline) {
    char tmpl[] = "/tmp/gp_hub_XXXXXX";
    char *root = mkdtemp(tmpl);
    REQUIRE(root);
    char hub[256], home[256], p[4096];
    snprintf(hub, sizeof hub, "%s/hub", root);
    snprintf(home, sizeof home, "%s/home", root);
    const char *c1 = "0123456789abcdef0123456789abcdef01234567", *c2 = "fedcba9876543210fedcba9876543210fedcba98";
    make_repo(hub, "models--org--tiny", c1, 1);
    snprintf(p, sizeof p, "mkdir -p '%s/models--org--tiny/snapshots/%s' && echo {} > '%s/models--org--tiny/snapshots/%s/config.json'"
             " && printf %s > '%s/models--org--tiny/refs/v2'", hub, c2, hub, c2, c2, hub);
    CHECK(system(p) == 0);
    make_repo(hub, "models--org--broken", c1, 0);
    snprintf(p, sizeof p, "%s/hub", home);
    make_repo(p, "models--other--only-in-home", c2, 1);
    setenv("HF_HUB_CACHE", hub, 1);
    setenv("HF_HOME", home, 1);
    char *dir = NULL, want[1024];
    CHECK_STATUS(gp_model_resolve("org/tiny", &dir), GP_OK);
    snprintf(want, sizeof want, "%s/models--org--tiny/snapshots/%s", hub, c1);
    CHECK_STR(dir, want);
    gp_free(dir);
    CHECK_STATUS(gp_model_resolve("org/tiny@v2", &dir), GP_OK); /* a named ref */
    snprintf(want, sizeof want, "%s/models--org--tiny/snapshots/%s", hub, c2);
    CHECK_STR(dir, want);
    gp_free(dir);
    char name[128];
    snprintf(name, sizeof name, "org/tiny@%s", c2); /* a commit directly */
    CHECK_STATUS(gp_model_resolve(name, &dir), GP_OK);
    CHECK_STR(dir, want);
    gp_free(dir);
    CHECK_STATUS(gp_model_resolve("other/only-in-home", &dir), GP_OK); /* $HF_HOME/hub after $HF_HUB_CACHE */
    CHECK(dir && strstr(dir, "/home/hub/models--other--only-in-home/snapshots/"));
    gp_free(dir);
    CHECK_STATUS(gp_model_resolve(root, &dir), GP_OK); /* an existing folder as is */
    CHECK_STR(dir, root);
    gp_free(dir);
    /* errors */
    CHECK_STATUS(gp_model_resolve("org/missing", &dir), GP_ERR_MISSING);
    CHECK(dir == NULL);
    const char *msg = gp_errmsg();
    if (!strstr(msg, "org/missing") || !strstr(msg, hub) || !strstr(msg, home) || !strstr(msg, ".cache/huggingface/hub")) {
        NOTE("message does not list the caches: %s", msg);
        gp_test_failed = 1;
    }
    CHECK_STATUS(gp_model_resolve("org/tiny@nope", &dir), GP_ERR_MISSING);
    CHECK(strstr(gp_errmsg(), "snapshots/nope") != NULL);
    CHECK_STATUS(gp_model_resolve("org/broken", &dir), GP_ERR_MISSING);
    CHECK(strstr(gp_errmsg(), "config.json") != NULL);
    CHECK_STATUS(gp_model_resolve("no-slash-and-no-folder", &dir), GP_ERR_MISSING);
    CHECK(strstr(gp_errmsg(), "org/name") != NULL);
    CHECK_STATUS(gp_model_resolve("a/b/c", &dir), GP_ERR_MISSING);
    CHECK_STATUS(gp_model_resolve("", &dir), GP_ERR_INVALID_ARG);
    unsetenv("HF_HUB_CACHE");
    unsetenv("HF_HOME");
    snprintf(p, sizeof p, "rm -rf '%s'", root);
    CHECK(system(p) == 0);
}

/* `generate --model org/name` through a snapshot whose files are symlinks (as the hub stores them). */
TEST(cli_generate_model_by_hub_name) {
    char *fx = gp_test_fixture("models/tiny-llama");
    if (!fx) return;
    char tmpl[] = "/tmp/gp_hubcli_XXXXXX";
    char *root = mkdtemp(tmpl);
    REQUIRE(root);
    char p[4096];
    const char *c1 = "0123456789abcdef0123456789abcdef01234567";
    snprintf(p, sizeof p, "set -e; d='%s/models--fixtures--tiny-llama'; mkdir -p \"$d/refs\" \"$d/snapshots/%s\"; "
             "printf %s > \"$d/refs/main\"; for f in '%s'/*.json '%s'/*.safetensors; do "
             "ln -s \"$(readlink -f \"$f\")\" \"$d/snapshots/%s/$(basename \"$f\")\"; done",
             root, c1, c1, fx, fx, c1);
    CHECK(system(p) == 0);
    char args[4096];
    snprintf(args, sizeof args, "generate --model fixtures/tiny-llama --prompt-ids 1,450 --max-tokens 4 --temp 0 "
             "--format json");
    setenv("HF_HUB_CACHE", root, 1);
    cJSON *j = fx_run_json(args);
    CHECK(j && cJSON_GetArraySize(cJSON_GetObjectItem(j, "tokens")) == 4);
    cJSON_Delete(j);
    char *out = NULL;
    snprintf(p, sizeof p, "%s generate --model fixtures/not-there --prompt-ids 1 --max-tokens 1", fx_bin());
    int rc = fx_run(p, 1, &out);
    CHECK_EQ_INT(rc, 1);
    CHECK(out && strstr(out, "not found") && strstr(out, root));
    free(out);
    unsetenv("HF_HUB_CACHE");
    snprintf(p, sizeof p, "rm -rf '%s'", root);
    CHECK(system(p) == 0);
    free(fx);
}
