/* test.h — the project's tiny test framework: self-registering tests, checks that print the actual values,
 * fixture lookup ($GENPARITY_FIXTURES, else ../shared/fixtures) and the CI rule (CI=true: a missing fixture
 * fails, never skips).  One runner (tests/runner.c) runs them all and ends with "N passed, N failed". */
#ifndef GP_TEST_H
#define GP_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef void (*gp_test_fn)(void);
void gp_test_register(const char *name, const char *file, gp_test_fn fn);

/* State of the running test. */
extern int gp_test_failed;  /* set by CHECK failures */
extern int gp_test_skipped; /* set by SKIP */

#define TEST(name)                                                                     \
    static void test_##name(void);                                                     \
    __attribute__((constructor)) static void register_##name(void) {                   \
        gp_test_register(#name, __FILE__, test_##name);                                \
    }                                                                                  \
    static void test_##name(void)

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            printf("    %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);        \
            gp_test_failed = 1;                                                        \
        }                                                                              \
    } while (0)

#define REQUIRE(cond)                                                                  \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            printf("    %s:%d: REQUIRE(%s) failed\n", __FILE__, __LINE__, #cond);      \
            gp_test_failed = 1;                                                        \
            return;                                                                    \
        }                                                                              \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                             \
    do {                                                                               \
        long long _a = (long long)(a), _b = (long long)(b);                            \
        if (_a != _b) {                                                                \
            printf("    %s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b, _a, _b); \
            gp_test_failed = 1;                                                        \
        }                                                                              \
    } while (0)

#define CHECK_STR(a, b)                                                                \
    do {                                                                               \
        const char *_a = (a), *_b = (b);                                               \
        if (!_a || !_b || strcmp(_a, _b) != 0) {                                       \
            printf("    %s:%d: %s == %s failed: \"%s\" != \"%s\"\n", __FILE__, __LINE__, #a, #b, \
                   _a ? _a : "(null)", _b ? _b : "(null)");                            \
            gp_test_failed = 1;                                                        \
        }                                                                              \
    } while (0)

/* Expects a status; on mismatch prints the library's message. */
#define CHECK_STATUS(expr, want)                                                       \
    do {                                                                               \
        int _s = (int)(expr);                                                          \
        if (_s != (int)(want)) {                                                       \
            printf("    %s:%d: %s returned %d, want %d (%s)\n", __FILE__, __LINE__, #expr, _s, (int)(want), \
                   gp_errmsg());                                                       \
            gp_test_failed = 1;                                                        \
        }                                                                              \
    } while (0)

#define SKIP(...)                                                                      \
    do {                                                                               \
        printf("    skip: ");                                                          \
        printf(__VA_ARGS__);                                                           \
        printf("\n");                                                                  \
        gp_test_skipped = 1;                                                           \
        return;                                                                        \
    } while (0)

/* Prints an informational line under the test (actual errors, sizes). */
#define NOTE(...)                                                                      \
    do {                                                                               \
        printf("    ");                                                                \
        printf(__VA_ARGS__);                                                           \
        printf("\n");                                                                  \
    } while (0)

/* Returns the fixtures root ($GENPARITY_FIXTURES or ../shared/fixtures); static buffer. */
const char *gp_test_fixtures(void);

/* Returns a malloc'd path "<fixtures>/<rel>" if it exists; otherwise NULL after recording a skip
 * (or a failure when CI=true).  Use:  char *p = gp_test_fixture("models/tiny-llama"); if (!p) return; */
char *gp_test_fixture(const char *rel);

/* Returns a malloc'd fresh temporary directory (removed by the runner at exit). */
char *gp_test_tmpdir(void);

/* Returns 1 when running under CI=true. */
int gp_test_ci(void);

#endif
