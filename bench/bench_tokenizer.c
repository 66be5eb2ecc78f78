/* bench_tokenizer.c — standalone tokenizer benchmark (not a test): for each tokenizer.json given, the load time
 * and the single-threaded encode / decode throughput on a corpus file.
 * usage: bench_tokenizer CORPUS TOKENIZER.json... */
#include "genparity.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static char *read_all(const char *path, size_t *len) {
    char *b;
    return gp_read_file(path, 256u << 20, &b, len) == GP_OK ? b : NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s CORPUS TOKENIZER.json...\n", argv[0]);
        return 2;
    }
    size_t len;
    char *text = read_all(argv[1], &len);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 1;
    }
    printf("%-55s %9s %12s %12s %9s\n", "tokenizer", "load ms", "encode MB/s", "decode MB/s", "tokens");
    for (int a = 2; a < argc; a++) {
        gp_tokenizer *t;
        double best_load = 1e9;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = gp_now();
            if (gp_tokenizer_load(argv[a], &t) != GP_OK) {
                fprintf(stderr, "%s\n", gp_errmsg());
                return 1;
            }
            double dt = gp_now() - t0;
            if (dt < best_load) best_load = dt;
            if (rep < 2) gp_tokenizer_free(t);
        }
        double best_enc = 1e9, best_dec = 1e9;
        int32_t n = 0;
        for (int rep = 0; rep < 3; rep++) {
            int32_t *ids;
            double t0 = gp_now();
            if (gp_tokenizer_encode(t, text, len, 0, &ids, &n) != GP_OK) {
                fprintf(stderr, "%s\n", gp_errmsg());
                return 1;
            }
            double t1 = gp_now();
            char *out;
            size_t olen;
            if (gp_tokenizer_decode(t, ids, n, 0, &out, &olen) != GP_OK) {
                fprintf(stderr, "%s\n", gp_errmsg());
                return 1;
            }
            double t2 = gp_now();
            if (t1 - t0 < best_enc) best_enc = t1 - t0;
            if (t2 - t1 < best_dec) best_dec = t2 - t1;
            gp_free(out);
            gp_free(ids);
        }
        printf("%-55s %9.1f %12.2f %12.2f %9d\n", argv[a], best_load * 1e3, (double)len / best_enc / 1e6,
               (double)len / best_dec / 1e6, n);
        gp_tokenizer_free(t);
    }
    free(text);
    return 0;
}
