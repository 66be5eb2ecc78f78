/* hub.c — models by name, offline: a local folder as is (mlx-lm's load(path) when the path exists), else
 * "org/name[@revision]" looked up in the Hugging Face hub cache ($HF_HUB_CACHE, $HF_HOME/hub,
 * $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub): models--org--name/refs/<revision> holds a commit hash,
 * models--org--name/snapshots/<commit>/ the files.  Nothing is downloaded; a miss lists every place looked at. */
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int is_dir(const char *p) {
    struct stat st;
    return p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Appends "  - <line>\n" to the looked-at list (best effort; the list is only for the message). */
static void note(char *buf, size_t cap, const char *what, const char *path) {
    size_t n = strlen(buf);
    if (n + 8 < cap) snprintf(buf + n, cap - n, "\n  - %s%s", what, path ? path : "");
}

/* Reads the first line of a refs/<rev> file (a 40-hex commit) into out [cap]; returns 0 if it exists. */
static int read_ref(const char *path, char *out, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    fclose(f);
    out[n] = 0;
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r' || out[n - 1] == ' ')) out[--n] = 0;
    return n > 0 && !strchr(out, '/') ? 0 : -1;
}

/* Checks "org/name" (one slash, no "..", no spaces) and splits off "@revision". */
static int split_name(const char *name, char *repo, size_t cap, char *rev, size_t rcap) {
    const char *at = strchr(name, '@');
    size_t n = at ? (size_t)(at - name) : strlen(name);
    if (n == 0 || n >= cap) return -1;
    memcpy(repo, name, n);
    repo[n] = 0;
    snprintf(rev, rcap, "%s", at && at[1] ? at + 1 : "main");
    const char *slash = strchr(repo, '/');
    if (!slash || slash == repo || !slash[1] || strchr(slash + 1, '/') || strstr(repo, "..") || strchr(repo, ' '))
        return -1;
    if (strchr(rev, '/') && strstr(rev, "..")) return -1;
    return 0;
}

/* Tries one hub cache folder; returns a new string with the snapshot folder, or NULL (and notes why). */
static char *try_cache(const char *cache, const char *repo, const char *rev, char *looked, size_t cap) {
    char base[4096], path[4096 + 512], commit[256];
    size_t k = (size_t)snprintf(base, sizeof base, "%s/models--", cache);
    for (const char *p = repo; *p && k + 3 < sizeof base; p++) { /* org/name -> org--name */
        if (*p == '/') {
            base[k++] = '-';
            base[k++] = '-';
        } else base[k++] = *p;
    }
    base[k] = 0;
    if (!is_dir(base)) {
        note(looked, cap, "", base);
        return NULL;
    }
    snprintf(path, sizeof path, "%s/refs/%s", base, rev);
    if (read_ref(path, commit, sizeof commit) != 0) snprintf(commit, sizeof commit, "%s", rev); /* a commit hash */
    snprintf(path, sizeof path, "%s/snapshots/%s", base, commit);
    if (!is_dir(path)) {
        note(looked, cap, "", path);
        return NULL;
    }
    char *cfg = gp_path_join(path, "config.json");
    int ok = cfg && gp_file_exists(cfg);
    free(cfg);
    if (!ok) {
        note(looked, cap, "no config.json (incomplete download?) in ", path);
        return NULL;
    }
    return gp_strdup(path);
}

gp_status gp_model_resolve(const char *name, char **dir) {
    if (!dir) return gp_set_error(GP_ERR_INVALID_ARG, "gp_model_resolve: dir is NULL");
    *dir = NULL;
    if (!name || !*name) return gp_set_error(GP_ERR_INVALID_ARG, "gp_model_resolve: the model name is empty");
    char looked[8192] = "";
    char expanded[4096];
    const char *home = getenv("HOME");
    if (name[0] == '~' && name[1] == '/' && home) {
        snprintf(expanded, sizeof expanded, "%s%s", home, name + 1);
        name = expanded;
    }
    /* an existing folder, or an explicit path (loading then says what is missing there) */
    if (is_dir(name) || name[0] == '/' || !strncmp(name, "./", 2) || !strncmp(name, "../", 3)) {
        *dir = gp_strdup(name);
        return *dir ? GP_OK : GP_ERR_NOMEM;
    }
    note(looked, sizeof looked, "a local folder: ", name);
    char repo[1024], rev[256];
    if (split_name(name, repo, sizeof repo, rev, sizeof rev) != 0)
        return gp_set_error(GP_ERR_MISSING, "model '%s' not found: not a folder, and not a hub name of the form "
                            "org/name[@revision]; looked at:%s", name, looked);
    /* the hub caches, in huggingface_hub's order of precedence */
    char caches[5][4096];
    int nc = 0;
    const char *e;
    if ((e = getenv("HF_HUB_CACHE")) && *e) snprintf(caches[nc++], 4096, "%s", e);
    if ((e = getenv("HUGGINGFACE_HUB_CACHE")) && *e) snprintf(caches[nc++], 4096, "%s", e);
    if ((e = getenv("HF_HOME")) && *e) snprintf(caches[nc++], 4096, "%s/hub", e);
    if ((e = getenv("XDG_CACHE_HOME")) && *e) snprintf(caches[nc++], 4096, "%s/huggingface/hub", e);
    if (home && *home) snprintf(caches[nc++], 4096, "%s/.cache/huggingface/hub", home);
    for (int i = 0; i < nc; i++) {
        char *p = try_cache(caches[i], repo, rev, looked, sizeof looked);
        if (p) {
            *dir = p;
            return GP_OK;
        }
    }
    return gp_set_error(GP_ERR_MISSING, "model '%s' (revision '%s') not found offline (nothing is downloaded); looked "
                        "at:%s", repo, rev, looked);
}
