/* stop.c — stop strings over the generated text: finding the earliest match (across token boundaries, since the
 * text is the concatenation of all pieces) and how much of the text's end to hold back from streaming because it
 * could still become a stop string. */
#include "sample/sample.h"

#include <string.h>

int64_t gp_stop_find(const char *text, size_t len, size_t from, const char *const *stops, int32_t n_stops,
                     int32_t *which) {
    int64_t best = -1;
    for (int32_t i = 0; i < n_stops; i++) {
        size_t L = stops[i] ? strlen(stops[i]) : 0;
        if (L == 0 || L > len) continue;
        /* earlier text held no match, so a new one must end after byte `from` */
        size_t start = from >= L ? from - L + 1 : 0;
        const char *p = memmem(text + start, len - start, stops[i], L);
        if (!p) continue;
        int64_t at = p - text;
        if (best < 0 || at < best) {
            best = at;
            if (which) *which = i;
        }
    }
    return best;
}

size_t gp_stop_holdback(const char *text, size_t len, const char *const *stops, int32_t n_stops) {
    size_t hold = 0;
    for (int32_t i = 0; i < n_stops; i++) {
        size_t L = stops[i] ? strlen(stops[i]) : 0;
        for (size_t k = (L - 1 < len ? L - 1 : len); k > hold && L > 0; k--)
            if (!memcmp(text + len - k, stops[i], k)) {
                hold = k;
                break;
            }
    }
    return hold;
}
