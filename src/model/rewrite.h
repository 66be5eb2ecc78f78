/* rewrite.h — writing a model folder derived from another one (genparity quantize, genparity fuse): a safetensors
 * file streamed one source tensor at a time (each output tensor is a verbatim copy of a source tensor or one part of
 * what a callback computes from it), config.json edited through a callback, and the other files copied. */
#ifndef GP_REWRITE_H
#define GP_REWRITE_H

#include "genparity.h"
#include "io/safetensors.h"

#include <cJSON.h>

#define GP_RW_PARTS 3

/* One output tensor: part < 0 copies source tensor src byte for byte, else part `part` of compute(src). */
typedef struct gp_rw_out {
    gp_st_write_tensor t;
    int32_t src, part;
} gp_rw_out;

/* Computes every part of source tensor src: parts[k] (malloc'd, freed by the caller) of sizes[k] bytes. */
typedef gp_status (*gp_rw_compute)(void *user, int32_t src, uint8_t *parts[GP_RW_PARTS]);

/* Writes path from outs [n] over the source set st; progress (may be NULL) after each computed source tensor. */
gp_status gp_rw_safetensors(const char *path, const gp_st_set *st, const gp_rw_out *outs, int32_t n,
                            gp_rw_compute compute, void *user, void (*progress)(float, void *), void *pud);

/* out_dir/config.json = dir/config.json after edit(root, user) (may be NULL). */
gp_status gp_rw_config(const char *dir, const char *out_dir, gp_status (*edit)(cJSON *root, const char *path, void *),
                       void *user);

/* Copies every regular file of dir except config.json and the safetensors files/index into out_dir. */
gp_status gp_rw_copy_files(const char *dir, const char *out_dir);

/* Creates out_dir (it may exist) unless it already holds a model.safetensors; *target = its model.safetensors path
 * (caller frees). */
gp_status gp_rw_prepare(const char *out_dir, char **target);

#endif
