/* mem.c — the process's peak resident set (Linux VmHWM) and resetting it between runs (/proc/self/clear_refs "5"),
 * so that a tool running several models can report each one's own peak. */
#include "util/util.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

uint64_t gp_mem_peak_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kb = 0;
    int found = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) {
            found = sscanf(line + 6, "%llu", &kb) == 1;
            break;
        }
    if (f) fclose(f);
    if (found) return (uint64_t)kb * 1024u;
    struct rusage ru; /* not Linux: the peak since start */
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (uint64_t)ru.ru_maxrss * 1024u : 0;
}

gp_status gp_mem_peak_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return gp_set_error(GP_ERR_UNSUPPORTED, "gp_mem_peak_reset: /proc/self/clear_refs is not available");
    int ok = fputs("5", f) >= 0;
    ok = (fclose(f) == 0) && ok;
    return ok ? GP_OK : gp_set_error(GP_ERR_IO, "gp_mem_peak_reset: writing /proc/self/clear_refs failed");
}
