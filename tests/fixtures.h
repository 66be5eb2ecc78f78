/* fixtures.h — helpers shared by the parity tests: the fixture model list, reading reference.json and
 * reference.safetensors, comparing float arrays with a stated tolerance. */
#ifndef GP_TEST_FIXTURES_H
#define GP_TEST_FIXTURES_H

#include "genparity.h"
#include "io/safetensors.h"

#include <cJSON.h>

extern const char *const GP_FIXTURE_MODELS[];
extern const int GP_N_FIXTURE_MODELS;

/* Parses a JSON file (NULL + failure noted on error); caller cJSON_Delete()s. */
cJSON *fx_read_json(const char *path);

/* A fixture model's references: reference.json parsed and reference.safetensors mapped. */
typedef struct fx_refs {
    cJSON *json;
    gp_st_set *st;
    char *st_path; /* path of reference.safetensors (for "PATH:TENSOR" specs) */
} fx_refs;

/* Loads models/<name>/reference.{json,safetensors}; returns 0 with every field set, else -1 with nothing to free
 * (a missing fixture is a skip, or a failure under CI=true; an unreadable one is a failure). */
int fx_refs_load(const char *name, fx_refs *r);
void fx_refs_free(fx_refs *r);

/* Reads a JSON array of ints into a malloc'd array; returns count or -1. */
int fx_int_array(const cJSON *arr, int32_t **out);

/* Loads models/<name> without its tokenizer (tokenizer = 0) or with it; NULL + failure on error. */
gp_model *fx_load_model(const char *name, int tokenizer);

/* The context params of the parity tests: gp_ctx_default_params() on the device $GENPARITY_TEST_DEVICE names
 * ("cuda", or the CPU when unset): `make test-cuda` runs the cache, steering, LoRA, batch, quantization and
 * generation suites a second time on the GPU through these.  fx_params() points at a static copy. */
gp_ctx_params fx_default_params(void);
const gp_ctx_params *fx_params(void);

/* max |a - b| over n floats (inf - inf of equal sign counts 0; mismatched infinities count as inf). */
double fx_max_abs_diff(const float *a, const float *b, size_t n);

/* Index of the first differing element of two id arrays, or -1 if identical (lengths compared too). */
int fx_first_diff(const int32_t *a, int na, const int32_t *b, int nb);

/* The genparity binary under test: $GENPARITY_BIN, else build/genparity. */
const char *fx_bin(void);

/* Runs a shell command; returns its exit code (-1 if it could not run) and its stdout (plus stderr when
 * merge_stderr; else stderr is discarded) in *out (malloc'd, caller frees). */
int fx_run(const char *cmd, int merge_stderr, char **out);

/* Runs "<bin> <args>" and parses its stdout as one JSON object; NULL (after printing the output) if it exited
 * non-zero or printed something else.  Caller cJSON_Delete()s. */
cJSON *fx_run_json(const char *args);

/* Writes ids as "1,2,3" into buf. */
void fx_join_ids(const int32_t *ids, int n, char *buf, size_t cap);

/* Prints "  ids: a b c ..." for debugging mismatches. */
void fx_print_ids(const char *label, const int32_t *ids, int n);

#endif
