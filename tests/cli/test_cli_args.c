/* test_cli_args.c — the CLI's command table and its one number parser: every command listed by `genparity --help`
 * prints its usage through `genparity help NAME`; every flag value that is not a number, is out of range or has
 * trailing characters exits 2 with a message naming the flag; a missing required flag is named. */
#include "fixtures.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TEST(cli_help_lists_every_command_and_each_has_usage) {
    char cmd[512], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s --help", fx_bin());
    CHECK_EQ_INT(fx_run(cmd, 0, &out), 0);
    REQUIRE(out);
    int n = 0;
    char *save = NULL;
    for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char name[64];
        /* command rows: two spaces, the name, then its summary; usage rows are indented further */
        if (strncmp(line, "  ", 2) || line[2] == ' ' || sscanf(line + 2, "%63s", name) != 1) continue;
        char *help = NULL;
        snprintf(cmd, sizeof cmd, "%s help %s", fx_bin(), name);
        int rc = fx_run(cmd, 1, &help);
        char want[96];
        snprintf(want, sizeof want, "usage: genparity %s", name);
        if (rc != 0 || !help || !strstr(help, want)) {
            NOTE("`genparity help %s` -> %d, output lacks '%s'", name, rc, want);
            gp_test_failed = 1;
        }
        free(help);
        n++;
    }
    NOTE("%d commands listed, each prints its usage", n);
    CHECK(n >= 9);
    free(out);
    snprintf(cmd, sizeof cmd, "%s help no-such-command", fx_bin());
    CHECK_EQ_INT(fx_run(cmd, 1, &out), 2);
    free(out);
}

/* Runs "genparity <args>", expects exit 2 and a message containing `needle`. */
static void expect_usage_error(const char *args, const char *needle) {
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s %s < /dev/null", fx_bin(), args);
    int rc = fx_run(cmd, 1, &out);
    if (rc != 2 || !out || !strstr(out, needle)) {
        NOTE("genparity %s -> exit %d, output '%s' (want 2 naming '%s')", args, rc, out ? out : "", needle);
        gp_test_failed = 1;
    }
    free(out);
}

TEST(cli_bad_numbers_exit_2_naming_the_flag) {
    static const char *const cases[][2] = {
        {"validate --layer abc --prompts p --steer-vector v", "--layer"},
        {"validate --layer 3 --max-tokens 1e3 --prompts p --steer-vector v", "--max-tokens"},
        {"validate --layer 1 --prompts p --steer-vector v --alphas 1,,2", "--alphas"},
        {"validate --layer 1 --prompts p --steer-vector v --min-divergence nan", "--min-divergence"},
        {"generate --prompt hi --max-tokens 12x", "--max-tokens"},
        {"generate --prompt hi --max-tokens 99999999999999999999", "--max-tokens"},
        {"generate --prompt hi --max-tokens ' 5'", "--max-tokens"},
        {"generate --prompt hi --max-tokens ''", "--max-tokens"},
        {"generate --prompt hi --temp nan", "--temp"},
        {"generate --prompt hi --top-p 0.5x", "--top-p"},
        {"generate --prompt hi --seed -1", "--seed"},
        {"generate --prompt hi --seed 18446744073709551616", "--seed"},
        {"generate --prompt hi --threads 1.5", "--threads"},
        {"generate --prompt hi --n-ctx 2147483648", "--n-ctx"},
        {"generate --prompt hi --steer-vector v --steer-layer 0 --steer-alpha 1e999", "--steer-alpha"},
        {"generate --prompt hi --steer-vector v --steer-layer x", "--steer-layer"},
        {"generate --prompt hi --logit-bias-alpha inf", "--logit-bias-alpha"},
        {"generate --prompt hi --max-tokens", "--max-tokens"},
        {"bench --model m -p abc", "-p"},
        {"bench --model m -r 0", "-r"},
        {"make-model --shape stories110m -o x --layers 0", "--layers"},
        {"make-model --shape stories110m -o x --seed 0x10", "--seed"},
        {"steer-vector --positive a --negative b -o c --layer -1", "--layer"},
        {"cache build --prompt hi -o x --threads many", "--threads"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_usage_error(cases[i][0], cases[i][1]);
    NOTE("%zu malformed values refused with exit 2", sizeof cases / sizeof cases[0]);
}

TEST(cli_missing_required_flag_is_named) {
    static const char *const cases[][2] = {
        {"validate --prompts p --steer-vector v", "--layer"},
        {"validate --layer 1 --steer-vector v", "--prompts"},
        {"validate --layer 1 --prompts p", "--steer-vector"},
        {"generate --max-tokens 3", "--prompt"},
        {"generate --prompt hi --steer-vector v", "--steer-layer"},
        {"tokenize --text hi", "--model"},
        {"tokenize --model m", "--text"},
        {"detokenize --model m", "--ids"},
        {"cache build --prompt hi", "-o"},
        {"cache build -o x", "--prompt"},
        {"steer-vector --negative b -o c --layer 1", "--positive"},
        {"steer-vector --positive a --negative b -o c", "--layer"},
        {"make-model -o x", "--shape"},
        {"make-model --shape stories110m", "-o"},
        {"bench -p 8", "--model"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_usage_error(cases[i][0], cases[i][1]);
}
