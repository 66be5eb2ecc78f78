/* runner.c — runs every registered test (optionally only those whose name contains argv[1]) and prints
 * one line per test and the summary line "N passed, N failed, N skipped". */
#include "test.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *name, *file;
    gp_test_fn fn;
} test_entry;

static test_entry *g_tests;
static int g_n, g_cap;
int gp_test_failed, gp_test_skipped;
static char g_tmproot[256];

void gp_test_register(const char *name, const char *file, gp_test_fn fn) {
    if (g_n == g_cap) {
        g_cap = g_cap ? 2 * g_cap : 64;
        g_tests = realloc(g_tests, (size_t)g_cap * sizeof *g_tests);
        if (!g_tests) abort();
    }
    g_tests[g_n++] = (test_entry){name, file, fn};
}

int gp_test_ci(void) {
    const char *ci = getenv("CI");
    return ci && (!strcmp(ci, "true") || !strcmp(ci, "1"));
}

const char *gp_test_fixtures(void) {
    const char *e = getenv("GENPARITY_FIXTURES");
    return e && *e ? e : "../shared/fixtures";
}

char *gp_test_fixture(const char *rel) {
    char *p = malloc(strlen(gp_test_fixtures()) + strlen(rel) + 2);
    if (!p) abort();
    sprintf(p, "%s/%s", gp_test_fixtures(), rel);
    struct stat st;
    if (stat(p, &st) == 0) return p;
    if (gp_test_ci()) {
        printf("    missing fixture %s (CI=true: a missing fixture is a failure)\n", p);
        gp_test_failed = 1;
    } else {
        printf("    skip: missing fixture %s\n", p);
        gp_test_skipped = 1;
    }
    free(p);
    return NULL;
}

char *gp_test_tmpdir(void) {
    static int k;
    if (!g_tmproot[0]) {
        snprintf(g_tmproot, sizeof g_tmproot, "/tmp/gp-test-XXXXXX");
        if (!mkdtemp(g_tmproot)) abort();
    }
    char *p = malloc(strlen(g_tmproot) + 32);
    if (!p) abort();
    sprintf(p, "%s/%d", g_tmproot, k++);
    if (mkdir(p, 0700) != 0) abort();
    return p;
}

static int cmp_entry(const void *a, const void *b) {
    const test_entry *x = a, *y = b;
    int c = strcmp(x->file, y->file);
    return c ? c : strcmp(x->name, y->name);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    qsort(g_tests, (size_t)g_n, sizeof *g_tests, cmp_entry);
    int passed = 0, failed = 0, skipped = 0;
    for (int i = 0; i < g_n; i++) {
        int match = argc < 2;
        for (int a = 1; a < argc; a++)
            if (strstr(g_tests[i].name, argv[a]) || strstr(g_tests[i].file, argv[a])) match = 1;
        if (!match) continue;
        gp_test_failed = gp_test_skipped = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        g_tests[i].fn();
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
        const char *tag = gp_test_failed ? "FAIL" : gp_test_skipped ? "SKIP" : "PASS";
        printf("%s %s (%s, %.0f ms)\n", tag, g_tests[i].name, g_tests[i].file, ms);
        if (gp_test_failed) failed++;
        else if (gp_test_skipped) skipped++;
        else passed++;
    }
    if (g_tmproot[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmproot);
        if (system(cmd) != 0) printf("warning: could not remove %s\n", g_tmproot);
    }
    free(g_tests);
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
