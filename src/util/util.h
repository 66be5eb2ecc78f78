/* util.h — internal helpers shared by every layer: error reporting, checked allocation, timing, files. */
#ifndef GP_UTIL_H
#define GP_UTIL_H

#include "genparity.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Records a thread-local error message (printf format) and returns s, so callers write
 *   return gp_set_error(GP_ERR_FORMAT, "%s: field 'x' ...", path);                                           */
gp_status gp_set_error(gp_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears the thread-local error message. */
void gp_clear_error(void);

/* Overflow-checked allocation: return NULL (and set GP_ERR_NOMEM) when n*size overflows or malloc fails. */
void *gp_malloc(size_t n, size_t size);
void *gp_calloc(size_t n, size_t size);
void *gp_realloc(void *p, size_t n, size_t size);
char *gp_strdup(const char *s);

/* a*b into *out; returns 0 on overflow. */
static inline int gp_mul_ok(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }

/* Seconds since an arbitrary monotonic origin. */
double gp_now(void);

/* Opens path read-only for a caller that needs a regular file, without ever blocking: the open is O_NONBLOCK, the
 * type is checked with fstat, and a FIFO, socket, device or directory is refused before any read (O_NONBLOCK is
 * then cleared).  Returns GP_OK and *fd (caller closes), GP_ERR_MISSING when the path does not exist, or GP_ERR_IO
 * with a message naming the path and what it is (FIFO, directory, symlink loop...).  Every path the library and the
 * CLI read goes through here. */
gp_status gp_open_regular(const char *path, int *fd);

/* Opens path for writing (created 0644 or truncated) without ever blocking: O_NONBLOCK makes a FIFO without a reader
 * fail at once (ENXIO) and one with a reader is refused after fstat, like every other non-regular file.  Returns
 * GP_OK and *fd (caller closes; O_NONBLOCK cleared) or GP_ERR_IO naming the path. */
gp_status gp_open_write(const char *path, int *fd);

/* Reads a whole file into a NUL-terminated buffer (caller frees). Returns GP_OK or GP_ERR_IO/GP_ERR_NOMEM.
 * max_bytes guards against absurd files. */
gp_status gp_read_file(const char *path, size_t max_bytes, char **data, size_t *len);

/* Joins dir and name with '/' into a new string (caller frees), or NULL on allocation failure. */
char *gp_path_join(const char *dir, const char *name);

/* Returns 1 if path exists and is a regular file. */
int gp_file_exists(const char *path);

/* 64-bit hash of len bytes continuing from h (8 bytes at a time: fast enough for a checkpoint's weights). */
uint64_t gp_hash_bytes(uint64_t h, const void *data, size_t len);
/* Hash of a file's bytes (at most 1 GiB), 0 when it cannot be read. */
uint64_t gp_hash_file(const char *path);

#endif
