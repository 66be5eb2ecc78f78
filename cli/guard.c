/* guard.c — the steering guardrail shared by generate --resample-on-suspect and check-models: counting the
 * generated lines that gp_text_suspect flags. */
#include "cli.h"

#include <string.h>

int cli_suspect_lines(const char *text, size_t len, int *n_lines) {
    int n = 0, bad = 0;
    size_t at = 0;
    while (text && at < len) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        size_t l = end - at;
        int blank = 1;
        for (size_t i = at; i < end && blank; i++) blank = text[i] == ' ' || text[i] == '\t' || text[i] == '\r';
        if (!blank) {
            n++;
            if (gp_text_suspect(text + at, l)) bad++;
        }
        at = end + 1;
    }
    if (n_lines) *n_lines = n;
    return bad;
}
