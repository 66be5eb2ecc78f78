/* cli.h — the genparity command-line tool's subcommands (parsing and printing only; the work is the library's).
 *
 * The CLI uses the public genparity.h plus two privileged internal headers, included here only:
 *   io/safetensors.h  reading and writing tensor files (steering vectors, reference logits, make-model), and
 *   util/util.h       gp_read_file / gp_set_error (prompt files, messages in the library's style).
 * Commands include only this header; cli/commands.c also includes server/server.h for cmd_serve (the HTTP server
 * is a separate component beside the CLI). */
#ifndef GP_CLI_H
#define GP_CLI_H

#include "genparity.h"
#include "io/safetensors.h"
#include "util/util.h"

#include <stdint.h>
#include <stdio.h>

/* One command: its name, a one-line summary (genparity --help), its usage line, and its entry point (argv[0] is the
 * command's name; returns the exit code: 0 ok, 1 failure, 2 usage error).  The table ends with a NULL name. */
typedef struct cli_command {
    const char *name;
    const char *summary;
    const char *usage;
    int (*run)(int argc, char **argv);
} cli_command;
extern const cli_command cli_commands[]; /* cli/commands.c: how to add a command is written there */

/* "genparity <command>", the prefix of every message (set by main before running a command). */
extern const char *cli_prog;

/* The one checked number parser (cli/args.c).  cli_to_*: the whole string is one decimal number (no blanks, no
 * trailing characters, no overflow, no NaN); 0 or -1.  cli_i32/i64/u64/f64: also the range [lo, hi]; on failure
 * print "<prog>: <flag> expects ..., got '<v>'" and return -1 (the command exits 2). */
int cli_to_i64(const char *v, int64_t *out);
int cli_to_u64(const char *v, uint64_t *out);
int cli_to_f64(const char *v, double *out);
int cli_i64(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out);
int cli_i32(const char *flag, const char *v, int32_t lo, int32_t hi, int32_t *out);
int cli_u64(const char *flag, const char *v, uint64_t *out);
int cli_f64(const char *flag, const char *v, double lo, double hi, double *out);
/* "1,2.5,-3" -> vals [*n <= cap] (finite numbers); -1 after printing a message naming the flag. */
int cli_f64_list(const char *flag, const char *v, double *vals, int cap, int *n);
/* The value of the flag argv[*i] (advances *i), or NULL after printing "<flag> needs a value". */
const char *cli_value(int argc, char **argv, int *i);
/* Prints "<prog>: <flag> is required[: what]" and returns 2. */
int cli_missing(const char *flag, const char *what);
/* Prints "<prog>: unknown flag <flag>" and returns 2. */
int cli_unknown(const char *flag);

int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_steer_vector(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_validate(int argc, char **argv);

/* Context flags (threads, chunk, n_ctx, KV cache kind): returns 1 if argv[*i] was one (value consumed), 0 if not,
 * -1 on a bad value (message printed). */
/* --adapter DIR[:SCALE] (repeatable; cli/adapters.c): the flags as given, then the loaded adapters. */
#define CLI_MAX_ADAPTERS 8
typedef struct cli_adapters {
    char dir[CLI_MAX_ADAPTERS][1024];
    float scale[CLI_MAX_ADAPTERS];
    gp_adapter *loaded[CLI_MAX_ADAPTERS];
    int n;
} cli_adapters;
/* argv[*i] == "--adapter": consumes its value into a; 1 when taken, 0 when not this flag, -1 after printing. */
int cli_adapter_flag(int argc, char **argv, int *i, cli_adapters *a);
/* Loads every listed adapter for m; 0, or -1 after printing (cli_adapters_free frees what was loaded). */
int cli_adapters_load(const gp_model *m, cli_adapters *a);
/* Sets the loaded adapters on c (nothing when none); 0 or -1 after printing. */
int cli_adapters_set(gp_ctx *c, const cli_adapters *a);
void cli_adapters_free(cli_adapters *a);
int cli_ctx_flag(int argc, char **argv, int *i, gp_ctx_params *p);
void cli_ctx_flags_help(FILE *f);
int cmd_make_model(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_fuse(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_check_models(int argc, char **argv);
int cmd_serve(int argc, char **argv); /* server/serve.c: the OpenAI-compatible HTTP server */
int cmd_chat_template(int argc, char **argv);
int cmd_chat(int argc, char **argv);

/* Chat helpers (cli/cmd_chat.c): ISO-8601 date to epoch seconds (0, or -1 if malformed); whole file as a malloc'd
 * NUL-terminated string (NULL + library error on failure); the template of --model DIR or --template FILE (0, or 1
 * after printing the error). */
int cli_parse_iso8601(const char *s, int64_t *out);
char *cli_read_text(const char *path);
int cli_load_template(const char *model, const char *tfile, const char *config, gp_chat_template **t);

/* Chat flags of `generate` (cli/gen_chat.c). */
typedef struct cli_chat_opts {
    const char *messages, *tools, *kwargs, *now, *save_cache;
    int cont, stop_on_special;
} cli_chat_opts;
/* Parses argv[*i] if it is a chat flag: 1 (value consumed), 0 (not one), -1 (bad value, printed). */
int cli_chat_flag(int argc, char **argv, int *i, cli_chat_opts *o);
void cli_chat_flags_help(FILE *f);
/* Renders --messages through the model's template (add_generation_prompt) and encodes it without added specials.
 * Returns 0, or 1 after printing the error (a template's raise_exception message verbatim). */
int cli_chat_prompt(const cli_chat_opts *o, const char *model_dir, const gp_tokenizer *tok, int32_t **ids, int32_t *n);
/* Writes the context's cache to path (0, or 1 after printing the error). */
int cli_save_cache(const gp_ctx *c, const gp_ctx_params *cp, const char *path);
/* Prints ,"content":...,"reasoning_content":...,"tool_calls":[...] for a reply (gp_chat_parse_reply). */
void cli_print_reply_fields(FILE *f, const char *text, size_t len);

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

/* Prints ,"logprobs":[{"id":..,"logprob":..[,"top":[..]]},..] for r->logprobs (with the top-N when kept). */
void cli_print_logprobs_json(const gp_gen_result *r);
/* Prints the beam-search fields of a result (",\"sequences\":...,\"sequence_scores\":...,\"sequence_texts\":..."). */
void cli_print_sequences_json(const gp_gen_result *r);

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
 * flag is taken to have a value except --ignore-eos, --help, --mlock, --resample-on-suspect, --continue and
 * --stop-on-special. */
void cli_apply_gen_flags(int argc, char **argv, gp_gen_config *g);
/* Frees what the sampling flags allocated; call after the last use of the config. */
void cli_gen_flags_free(void);

#endif
