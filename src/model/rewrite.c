/* rewrite.c — derived model folders (rewrite.h): the streamed safetensors writer over a source set, config.json
 * editing, file copying. */
#include "model/rewrite.h"
#include "io/json.h"
#include "util/util.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct rw_job {
    const gp_st_set *st;
    const gp_rw_out *outs;
    gp_rw_compute compute;
    void *user;
    int32_t cur;                   /* source tensor whose parts are held (-1: none) */
    uint8_t *parts[GP_RW_PARTS];
    void (*progress)(float, void *);
    void *pud;
} rw_job;

static void drop(rw_job *j) {
    for (int k = 0; k < GP_RW_PARTS; k++) free(j->parts[k]), j->parts[k] = NULL;
    j->cur = -1;
}

static gp_status fill(void *user, int32_t i, uint64_t off, void *buf, size_t len) {
    rw_job *j = user;
    const gp_rw_out *o = &j->outs[i];
    if (o->part < 0) {
        memcpy(buf, (const uint8_t *)gp_st_at(j->st, o->src)->data + off, len);
        return GP_OK;
    }
    if (j->cur != o->src) {
        drop(j);
        gp_status s = j->compute(j->user, o->src, j->parts);
        if (s) return s;
        j->cur = o->src;
        if (j->progress) j->progress((float)(o->src + 1) / (float)gp_st_count(j->st), j->pud);
    }
    memcpy(buf, j->parts[o->part] + off, len);
    return GP_OK;
}

gp_status gp_rw_safetensors(const char *path, const gp_st_set *st, const gp_rw_out *outs, int32_t n,
                            gp_rw_compute compute, void *user, void (*progress)(float, void *), void *pud) {
    gp_st_write_tensor *t = gp_calloc((size_t)n + 1, sizeof *t);
    if (!t) return GP_ERR_NOMEM;
    for (int32_t i = 0; i < n; i++) t[i] = outs[i].t;
    rw_job j = {st, outs, compute, user, -1, {NULL}, progress, pud};
    gp_status s = gp_st_write_stream(path, t, n, NULL, NULL, 0, fill, &j);
    drop(&j);
    free(t);
    if (!s && progress) progress(1.0f, pud);
    return s;
}

static gp_status write_bytes(const char *path, const void *data, size_t len) {
    int fd;
    gp_status s = gp_open_write(path, &fd);
    if (s) return s;
    const char *p = data;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            close(fd);
            return gp_set_error(GP_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        }
        p += w, len -= (size_t)w;
    }
    return close(fd) ? gp_set_error(GP_ERR_IO, "%s: close failed: %s", path, strerror(errno)) : GP_OK;
}

gp_status gp_rw_config(const char *dir, const char *out_dir, gp_status (*edit)(cJSON *, const char *, void *),
                       void *user) {
    char *in = gp_path_join(dir, "config.json"), *out = gp_path_join(out_dir, "config.json");
    cJSON *root = NULL;
    gp_status s = in && out ? gp_json_load(in, GP_JSON_CONFIG_BYTES, GP_JSON_NO_DUP_KEYS, &root) : GP_ERR_NOMEM;
    if (!s && !cJSON_IsObject(root)) s = gp_set_error(GP_ERR_FORMAT, "%s: top level must be a JSON object", in);
    if (!s && edit) s = edit(root, in, user);
    char *text = s ? NULL : cJSON_Print(root);
    if (!s) s = text ? write_bytes(out, text, strlen(text)) : GP_ERR_NOMEM;
    free(text), free(in), free(out);
    cJSON_Delete(root);
    return s;
}

gp_status gp_rw_copy_files(const char *dir, const char *out_dir) {
    DIR *d = opendir(dir);
    if (!d) return gp_set_error(GP_ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
    gp_status s = GP_OK;
    for (struct dirent *e; !s && (e = readdir(d));) {
        const char *n = e->d_name;
        size_t len = strlen(n);
        if (n[0] == '.' || !strcmp(n, "config.json") || !strcmp(n, "model.safetensors.index.json") ||
            (len > 12 && !strcmp(n + len - 12, ".safetensors")))
            continue;
        char *from = gp_path_join(dir, n), *to = gp_path_join(out_dir, n), *data = NULL;
        struct stat st;
        size_t size = 0;
        if (!from || !to) s = GP_ERR_NOMEM;
        else if (stat(from, &st) == 0 && S_ISREG(st.st_mode) && !(s = gp_read_file(from, (size_t)1 << 30, &data, &size)))
            s = write_bytes(to, data, size);
        free(data), free(from), free(to);
    }
    closedir(d);
    return s;
}

gp_status gp_rw_prepare(const char *out_dir, char **target) {
    *target = gp_path_join(out_dir, "model.safetensors");
    if (!*target) return GP_ERR_NOMEM;
    gp_status s = GP_OK;
    if (gp_file_exists(*target))
        s = gp_set_error(GP_ERR_INVALID_ARG, "%s: already holds a model (model.safetensors); choose an empty folder",
                         out_dir);
    else if (mkdir(out_dir, 0755) && errno != EEXIST)
        s = gp_set_error(GP_ERR_IO, "%s: cannot create: %s", out_dir, strerror(errno));
    if (s) free(*target), *target = NULL;
    return s;
}
