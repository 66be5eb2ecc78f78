/* softmax.c — float32 softmax / log-softmax / argmax / stable index sort with torch's CPU operation order
 * (max, expf(x - max), sum, multiply by the reciprocal of the sum), shared by the warpers, the samplers and logprobs. */
#include "sample/sample.h"

#include <math.h>
#include <string.h>

static float max_f32(const float *x, int32_t n) {
    float m = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}

/* x [n] -> probs [n] */
void gp_softmax_f32(const float *x, int32_t n, float *probs) {
    float m = max_f32(x, n);
    if (m == -INFINITY) { /* everything masked: no mass anywhere (torch would give NaN) */
        for (int32_t i = 0; i < n; i++) probs[i] = 0.0f;
        return;
    }
    float s = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        float e = expf(x[i] - m);
        probs[i] = e;
        s += e;
    }
    float r = 1.0f / s;
    for (int32_t i = 0; i < n; i++) probs[i] = probs[i] * r;
}

/* x [n] -> out [n] */
void gp_log_softmax_f32(const float *x, int32_t n, float *out) {
    float m = max_f32(x, n);
    if (m == -INFINITY) {
        for (int32_t i = 0; i < n; i++) out[i] = -INFINITY;
        return;
    }
    float s = 0.0f;
    for (int32_t i = 0; i < n; i++) s += expf(x[i] - m);
    float ls = logf(s);
    for (int32_t i = 0; i < n; i++) out[i] = x[i] - m - ls;
}

/* x [n] -> index of the first maximum */
int32_t gp_argmax_f32(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best] || (isnan(x[best]) && !isnan(x[i]))) best = i;
    return best;
}

/* idx [n] sorted by key ascending, stable; tmp [n] */
void gp_sort_idx_asc(const float *key, int32_t *idx, int32_t *tmp, int32_t n) {
    /* bottom-up merge sort: runs of width w merged from src into dst, then swapped */
    int32_t *src = idx, *dst = tmp;
    for (int32_t w = 1; w < n; w *= 2) {
        for (int32_t lo = 0; lo < n; lo += 2 * w) {
            int32_t mid = lo + w < n ? lo + w : n;
            int32_t hi = lo + 2 * w < n ? lo + 2 * w : n;
            int32_t a = lo, b = mid, k = lo;
            while (a < mid && b < hi) dst[k++] = key[src[b]] < key[src[a]] ? src[b++] : src[a++];
            while (a < mid) dst[k++] = src[a++];
            while (b < hi) dst[k++] = src[b++];
        }
        int32_t *t = src;
        src = dst;
        dst = t;
        if (w > n / 2) break;
    }
    if (src != idx) memcpy(idx, src, (size_t)n * sizeof(int32_t));
}

double gp_logits_kl(const float *a, const float *b, int32_t n) {
    if (n <= 0) return 0.0;
    if (!a || !b) return NAN;
    double ma = -INFINITY, mb = -INFINITY, za = 0, zb = 0, kl = 0;
    for (int32_t i = 0; i < n; i++) {
        ma = a[i] > ma ? a[i] : ma;
        mb = b[i] > mb ? b[i] : mb;
    }
    for (int32_t i = 0; i < n; i++) {
        za += exp((double)a[i] - ma);
        zb += exp((double)b[i] - mb);
    }
    double lza = log(za), lzb = log(zb);
    for (int32_t i = 0; i < n; i++) {
        double pa = exp((double)a[i] - ma - lza);
        if (pa > 0) kl += pa * (((double)a[i] - ma - lza) - ((double)b[i] - mb - lzb));
    }
    return kl;
}
