/* suspect.c — heuristics that flag lines of generated text typical of broken steering (long digit runs, LaTeX-like
 * junk, unbalanced braces, non-printable characters, degenerate repetition); see GP_SUSPECT_* in genparity.h. */
#include "genparity.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static int digit_run(const char *s, size_t n) {
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        run = isdigit((unsigned char)s[i]) ? run + 1 : 0;
        if (run >= 8) return 1;
    }
    return 0;
}

static int latex(const char *s, size_t n) {
    int cmds = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        if ((s[i] == '^' || s[i] == '_') && s[i + 1] == '{') return 1;
        if (s[i] != '\\') continue;
        size_t j = i + 1;
        while (j < n && isalpha((unsigned char)s[j])) j++;
        if (j - i - 1 >= 2) {
            if ((j - i - 1 == 5 && !strncmp(s + i + 1, "begin", 5)) || (j - i - 1 == 4 && !strncmp(s + i + 1, "frac", 4)))
                return 1;
            cmds++;
        }
    }
    return cmds >= 2;
}

static int braces(const char *s, size_t n) {
    const char *open = "([{", *close = ")]}";
    int depth[3] = {0, 0, 0};
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 3; k++) {
            if (s[i] == open[k]) depth[k]++;
            if (s[i] == close[k] && --depth[k] < 0) return 1;
        }
    return depth[0] >= 2 || depth[1] >= 2 || depth[2] >= 2;
}

/* Control characters, U+FFFD (EF BF BD) or invalid UTF-8. */
static int nonprint(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        if (c < 0x80) {
            if ((c < 0x20 && c != '\t') || c == 0x7f) return 1;
            i++;
            continue;
        }
        int len = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
        if (!len || i + (size_t)len > n) return 1;
        for (int k = 1; k < len; k++)
            if ((s[i + k] & 0xc0) != 0x80) return 1;
        if (len == 3 && c == 0xef && s[i + 1] == 0xbf && s[i + 2] == 0xbd) return 1;
        if (len == 2 && c == 0xc2 && s[i + 1] < 0xa0) return 1; /* C1 controls */
        i += (size_t)len;
    }
    return 0;
}

static int repetition(const char *s, size_t n) {
    /* a unit of 1..8 characters repeated 6+ times in a row (spaces count) */
    for (size_t u = 1; u <= 8; u++) {
        size_t run = 0;
        for (size_t i = u; i < n; i++) {
            run = s[i] == s[i - u] ? run + 1 : 0;
            if (run >= 5 * u && s[i] != ' ' && s[i] != '-' && s[i] != '=' && s[i] != '.') return 1;
        }
    }
    /* words: the same word 4+ times in a row; under 30% distinct words in a line of 10+ words */
    const char *w[256];
    size_t wl[256];
    int nw = 0;
    for (size_t i = 0; i < n && nw < 256;) {
        while (i < n && isspace((unsigned char)s[i])) i++;
        size_t a = i;
        while (i < n && !isspace((unsigned char)s[i])) i++;
        if (i > a) {
            w[nw] = s + a;
            wl[nw++] = i - a;
        }
    }
    int same = 1;
    for (int i = 1; i < nw; i++) {
        same = wl[i] == wl[i - 1] && !memcmp(w[i], w[i - 1], wl[i]) ? same + 1 : 1;
        if (same >= 4) return 1;
    }
    if (nw >= 10) {
        int distinct = 0;
        for (int i = 0; i < nw; i++) {
            int seen = 0;
            for (int j = 0; j < i && !seen; j++) seen = wl[i] == wl[j] && !memcmp(w[i], w[j], wl[i]);
            distinct += !seen;
        }
        if (distinct * 10 < nw * 3) return 1;
    }
    return 0;
}

uint32_t gp_text_suspect(const char *line, size_t len) {
    if (!line) return 0;
    uint32_t f = 0;
    if (digit_run(line, len)) f |= GP_SUSPECT_DIGIT_RUN;
    if (latex(line, len)) f |= GP_SUSPECT_LATEX;
    if (braces(line, len)) f |= GP_SUSPECT_BRACES;
    if (nonprint((const unsigned char *)line, len)) f |= GP_SUSPECT_NONPRINT;
    if (repetition(line, len)) f |= GP_SUSPECT_REPETITION;
    return f;
}
