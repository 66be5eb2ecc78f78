/* util.c — thread-local error messages, checked allocation, timing and small file helpers. */
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char g_errmsg[1024];

gp_status gp_set_error(gp_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_errmsg, sizeof g_errmsg, fmt, ap);
    va_end(ap);
    return s;
}

void gp_clear_error(void) { g_errmsg[0] = 0; }

const char *gp_errmsg(void) { return g_errmsg; }

const char *gp_version(void) { return "0.1.0"; }

#ifdef GP_CUDA
const char *gp_backends(void) { return "cpu cuda"; }
#else
const char *gp_backends(void) { return "cpu"; }
#endif

const char *gp_status_str(gp_status s) {
    switch (s) {
    case GP_OK: return "GP_OK";
    case GP_ERR_INVALID_ARG: return "GP_ERR_INVALID_ARG";
    case GP_ERR_IO: return "GP_ERR_IO";
    case GP_ERR_FORMAT: return "GP_ERR_FORMAT";
    case GP_ERR_UNSUPPORTED: return "GP_ERR_UNSUPPORTED";
    case GP_ERR_NOMEM: return "GP_ERR_NOMEM";
    case GP_ERR_MISSING: return "GP_ERR_MISSING";
    case GP_ERR_RANGE: return "GP_ERR_RANGE";
    case GP_ERR_STATE: return "GP_ERR_STATE";
    case GP_ERR_CANCELLED: return "GP_ERR_CANCELLED";
    case GP_ERR_TEMPLATE: return "GP_ERR_TEMPLATE";
    case GP_ERR_DEVICE: return "GP_ERR_DEVICE";
    }
    return "GP_ERR_UNKNOWN";
}

void gp_free(void *p) { free(p); }

void *gp_malloc(size_t n, size_t size) {
    size_t t;
    if (!gp_mul_ok(n, size, &t)) {
        gp_set_error(GP_ERR_NOMEM, "allocation of %zu x %zu bytes overflows", n, size);
        return NULL;
    }
    void *p = malloc(t ? t : 1);
    if (!p) gp_set_error(GP_ERR_NOMEM, "out of memory allocating %zu bytes", t);
    return p;
}

void *gp_calloc(size_t n, size_t size) {
    size_t t;
    if (!gp_mul_ok(n, size, &t)) {
        gp_set_error(GP_ERR_NOMEM, "allocation of %zu x %zu bytes overflows", n, size);
        return NULL;
    }
    void *p = calloc(t ? n : 1, t ? size : 1);
    if (!p) gp_set_error(GP_ERR_NOMEM, "out of memory allocating %zu bytes", t);
    return p;
}

void *gp_realloc(void *p, size_t n, size_t size) {
    size_t t;
    if (!gp_mul_ok(n, size, &t)) {
        gp_set_error(GP_ERR_NOMEM, "allocation of %zu x %zu bytes overflows", n, size);
        return NULL;
    }
    void *q = realloc(p, t ? t : 1);
    if (!q) gp_set_error(GP_ERR_NOMEM, "out of memory allocating %zu bytes", t);
    return q;
}

char *gp_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = gp_malloc(n, 1);
    if (d) memcpy(d, s, n);
    return d;
}

double gp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    return "not a regular file";
}

gp_status gp_open_regular(const char *path, int *fd) {
    *fd = -1;
    if (!path) return gp_set_error(GP_ERR_INVALID_ARG, "open: path is NULL");
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (f < 0) {
        int e = errno;
        if (e == ENOENT) return gp_set_error(GP_ERR_MISSING, "%s: cannot open: %s", path, strerror(e));
        if (e == ELOOP) return gp_set_error(GP_ERR_IO, "%s: cannot open: a symbolic link loop (%s)", path, strerror(e));
        return gp_set_error(GP_ERR_IO, "%s: cannot open: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        return gp_set_error(GP_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return gp_set_error(GP_ERR_IO, "%s: is %s; a regular file is required", path, file_kind(st.st_mode));
    }
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0) fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    return GP_OK;
}

gp_status gp_open_write(const char *path, int *fd) {
    *fd = -1;
    if (!path) return gp_set_error(GP_ERR_INVALID_ARG, "open: path is NULL");
    int f = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0644);
    if (f < 0) {
        int e = errno;
        return gp_set_error(GP_ERR_IO, "%s: cannot create: %s", path,
                            e == ENXIO ? "a FIFO (named pipe) without a reader; a regular file is required" : strerror(e));
    }
    struct stat st = {0};
    if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(f);
        return gp_set_error(GP_ERR_IO, "%s: is %s; a regular file is required", path, file_kind(st.st_mode));
    }
    if (ftruncate(f, 0) != 0) {
        int e = errno;
        close(f);
        return gp_set_error(GP_ERR_IO, "%s: cannot truncate: %s", path, strerror(e));
    }
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0) fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    return GP_OK;
}

gp_status gp_read_file(const char *path, size_t max_bytes, char **data, size_t *len) {
    *data = NULL;
    if (len) *len = 0;
    int fd;
    gp_status s = gp_open_regular(path, &fd);
    if (s) return s == GP_ERR_MISSING ? GP_ERR_IO : s;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return gp_set_error(GP_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return gp_set_error(GP_ERR_FORMAT, "%s: file is %lld bytes, over the limit of %zu", path,
                            (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = gp_malloc(n + 1, 1);
    if (!buf) {
        close(fd);
        return GP_ERR_NOMEM;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != n) {
        free(buf);
        return gp_set_error(GP_ERR_IO, "%s: short read (%zu of %zu bytes)", path, got, n);
    }
    buf[n] = 0;
    *data = buf;
    if (len) *len = n;
    return GP_OK;
}

char *gp_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = gp_malloc(a + b + 2, 1);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

int gp_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* 64-bit hash of bytes, 8 at a time (fast enough to fingerprint a checkpoint's weights). */
uint64_t gp_hash_bytes(uint64_t h, const void *data, size_t len) {
    const unsigned char *p = data;
    const uint64_t K = 0x9E3779B97F4A7C15ull;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * K;
        h ^= h >> 29;
    }
    for (; i < len; i++) h = (h ^ p[i]) * K;
    return h ^ (h >> 32);
}

uint64_t gp_hash_file(const char *path) {
    char *text;
    size_t len;
    if (!path || gp_read_file(path, 1u << 30, &text, &len) != GP_OK) return 0;
    uint64_t h = gp_hash_bytes(0xcbf29ce484222325ull, text, len);
    free(text);
    return h;
}
