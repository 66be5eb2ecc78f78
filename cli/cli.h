/* cli.h — the genparity command-line tool's subcommands (parsing and printing only; the work is the library's). */
#ifndef GP_CLI_H
#define GP_CLI_H

#include "genparity.h"

#include <stdio.h>

int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_steer_vector(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_validate(int argc, char **argv);

/* Context flags (threads, chunk, n_ctx, KV cache kind): returns 1 if argv[*i] was one (value consumed), 0 if not,
 * -1 on a bad value (message printed). */
int cli_ctx_flag(int argc, char **argv, int *i, gp_ctx_params *p);
void cli_ctx_flags_help(FILE *f);
int cmd_make_model(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_check_models(int argc, char **argv);

/* Prints "genparity: <what>: <library message>" to stderr and returns 1. */
int cli_fail(const char *what);

/* Parses "1,2,3" into a malloc'd array; returns 0 on success, -1 on a malformed list. */
int cli_parse_ids(const char *s, int32_t **ids, int32_t *n);

/* Reads a prompt file: one entry per line (a line starting with '"' is a JSON string, so it may hold newlines);
 * empty lines are skipped.  Returns the count and *lines (free each, then the array with cli_free_lines), or -1
 * after setting the library error message. */
int cli_read_lines(const char *path, char ***lines);
void cli_free_lines(char **lines, int n);

/* Writes s as a JSON string literal (quotes and escapes) to f. */
#include <stdio.h>
void cli_json_string(FILE *f, const char *s, size_t len);

/* Writes "<directory of the running executable>/<rel>" into buf; returns 0 if that path is readable, else -1. */
int cli_path_beside_exe(const char *rel, char *buf, size_t cap);

/* Loads the model named by --model: a folder, or "org/name[@revision]" from the Hugging Face hub cache (offline).
 * Returns the library's status (message from gp_errmsg). */
gp_status cli_model_load(const char *name, gp_model **out);

/* Prints one result as the JSON object of `generate --format json` (one line); extra (may be NULL) is a fragment
 * of more fields (",\"k\":v") put before the closing brace. */
void cli_print_result_json(const gp_gen_result *r, const int32_t *ids, int32_t n_ids, const gp_ctx *c,
                           int32_t cached_before, const char *extra);

/* Counts the lines of text [len] and those gp_text_suspect flags; returns the suspect count. */
int cli_suspect_lines(const char *text, size_t len, int *n_lines);

/* `generate --prompts-file`: every prompt of path generated with g in batches of batch_size (gp_generate_batch),
 * printed in input order.  Returns the exit code. */
int cli_generate_prompts_file(gp_model *m, const gp_ctx_params *cp, const gp_gen_config *g, const char *path,
                              int json, int32_t batch_size);

/* Default model folder: $GENPARITY_MODEL, else models/shakespeare-llama beside the executable's build dir. */
const char *cli_default_model(void);

/* Sampling flags (cli/gen_flags.c).  Parses argv[*i] (and its value) into g if it is a sampling flag: returns 1 with *i
 * on the last argument it consumed (the flag's value); 0 if argv[*i] is not a sampling flag; -1 on a bad value, after printing an error.
 * Arrays given by flags (--stop, --bad-words, --logit-bias) live until cli_gen_flags_free(). */
int cli_gen_flag(int argc, char **argv, int *i, gp_gen_config *g);
/* Prints the sampling flags' help (names, transformers' names and defaults) to f. */
void cli_gen_flags_help(FILE *f);
/* Applies every sampling flag of argv onto g (the second pass, after the model's config is known); every other
 * flag is taken to have a value except --ignore-eos, --help, --mlock and --resample-on-suspect. */
void cli_apply_gen_flags(int argc, char **argv, gp_gen_config *g);
/* Frees what the sampling flags allocated; call after the last use of the config. */
void cli_gen_flags_free(void);

#endif
