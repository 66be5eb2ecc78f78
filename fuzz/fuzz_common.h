/* fuzz_common.h — helpers shared by the libFuzzer targets: a per-process scratch folder, writing an input to a file
 * there (the loaders take paths), and the fixture/model locations.  Targets abort (__builtin_trap) when an oracle
 * fails, so libFuzzer reports the input. */
#ifndef GP_FUZZ_COMMON_H
#define GP_FUZZ_COMMON_H

#include "genparity.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A scratch folder of this process (created once). */
static inline const char *fz_dir(void) {
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/gpfuzz-%d", (int)getpid());
        mkdir(dir, 0700);
    }
    return dir;
}

/* Writes data to DIR/name and returns the path (static buffer per call site is the caller's copy). */
static inline const char *fz_write(const char *name, const uint8_t *data, size_t n) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", fz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    fclose(f);
    return path;
}

/* The repository's embedded model (fuzz binaries run from the repository root). */
#define FZ_MODEL "models/shakespeare-llama"

/* The fixtures' root ($GENPARITY_FIXTURES, else ../shared/fixtures). */
static inline const char *fz_fixtures(void) {
    const char *e = getenv("GENPARITY_FIXTURES");
    return e && *e ? e : "../shared/fixtures";
}

#define FZ_CHECK(cond)                                                                   \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "oracle failed: %s (%s:%d): %s\n", #cond, __FILE__, __LINE__, gp_errmsg()); \
            __builtin_trap();                                                            \
        }                                                                                \
    } while (0)

#endif
