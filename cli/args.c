/* args.c — the CLI's one checked number parser and flag helpers: a flag value that is not a number, is out of
 * range or has trailing characters is refused with a message naming the flag (the command then exits 2); a flag
 * without its value and a missing required flag are named too.  No atoi/atof/unchecked strtol anywhere else. */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *cli_prog = "genparity";

int cli_to_i64(const char *v, int64_t *out) {
    if (!v || !*v || isspace((unsigned char)v[0])) return -1;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno) return -1;
    *out = (int64_t)x;
    return 0;
}

int cli_to_u64(const char *v, uint64_t *out) {
    if (!v || !*v || isspace((unsigned char)v[0]) || v[0] == '-' || v[0] == '+') return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (end == v || *end || errno) return -1;
    *out = (uint64_t)x;
    return 0;
}

int cli_to_f64(const char *v, double *out) {
    if (!v || !*v || isspace((unsigned char)v[0])) return -1;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || isnan(x) || (errno == ERANGE && isinf(x))) return -1;
    *out = x;
    return 0;
}

int cli_i64(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out) {
    int64_t x;
    if (cli_to_i64(v, &x) || x < lo || x > hi) {
        fprintf(stderr, "%s: %s expects an integer in [%lld, %lld], got '%s'\n", cli_prog, flag, (long long)lo,
                (long long)hi, v ? v : "");
        return -1;
    }
    *out = x;
    return 0;
}

int cli_i32(const char *flag, const char *v, int32_t lo, int32_t hi, int32_t *out) {
    int64_t x;
    if (cli_i64(flag, v, lo, hi, &x)) return -1;
    *out = (int32_t)x;
    return 0;
}

int cli_u64(const char *flag, const char *v, uint64_t *out) {
    if (cli_to_u64(v, out)) {
        fprintf(stderr, "%s: %s expects a non-negative integer below 2^64, got '%s'\n", cli_prog, flag, v ? v : "");
        return -1;
    }
    return 0;
}

int cli_f64(const char *flag, const char *v, double lo, double hi, double *out) {
    double x;
    if (cli_to_f64(v, &x) || !(x >= lo && x <= hi)) {
        fprintf(stderr, "%s: %s expects a number in [%g, %g], got '%s'\n", cli_prog, flag, lo, hi, v ? v : "");
        return -1;
    }
    *out = x;
    return 0;
}

int cli_f64_list(const char *flag, const char *v, double *vals, int cap, int *n) {
    char buf[64];
    int k = 0;
    for (const char *p = v ? v : ""; ; ) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        double x;
        if (len >= sizeof buf || k == cap) {
            fprintf(stderr, "%s: %s takes at most %d numbers of under 64 characters\n", cli_prog, flag, cap);
            return -1;
        }
        memcpy(buf, p, len);
        buf[len] = 0;
        if (cli_to_f64(buf, &x) || !isfinite(x)) {
            fprintf(stderr, "%s: %s expects comma-separated numbers, got '%s' in '%s'\n", cli_prog, flag, buf, v);
            return -1;
        }
        vals[k++] = x;
        if (!comma) break;
        p = comma + 1;
    }
    *n = k;
    return 0;
}

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a value\n", cli_prog, argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int cli_missing(const char *flag, const char *what) {
    fprintf(stderr, "%s: %s is required%s%s (see --help)\n", cli_prog, flag, what ? ": " : "", what ? what : "");
    return 2;
}

int cli_unknown(const char *flag) {
    fprintf(stderr, "%s: unknown flag %s (see --help)\n", cli_prog, flag);
    return 2;
}
