/* warpers.c — transformers' sampling-only logits warpers, one function each, in the order generate() applies them:
 * temperature, top-k, top-p, min-p, typical, epsilon, eta.  min_tokens_to_keep is 1 (non-beam generate()).
 * Numerics follow torch on CPU: float32 element-wise ops, Python-float parameters rounded to float32 where torch
 * rounds them, cumsum accumulated in double (torch's CPU cumsum accumulator for float32). */
#include "sample/sample.h"

#include <math.h>
#include <string.h>

/* scores [n] /= (float)t */
void gp_warp_temperature(float *scores, int32_t n_vocab, double t) {
    const float tf = (float)t;
    for (int32_t i = 0; i < n_vocab; i++) scores[i] = scores[i] / tf;
}

/* Returns the k-th largest (1-based) of a [n] (a is reordered): iterative quickselect, median of three. */
static float kth_largest(float *a, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        float x = a[lo], y = a[mid], z = a[hi];
        float pivot = (x > y) ? ((y > z) ? y : (x > z ? z : x)) : ((x > z) ? x : (y > z ? z : y));
        int32_t i = lo, j = hi;
        while (i <= j) { /* descending partition */
            while (a[i] > pivot) i++;
            while (a[j] < pivot) j--;
            if (i <= j) {
                float t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return a[want];
    }
    return a[want];
}

/* scores [n] < kth largest -> -inf (ties at the threshold kept: transformers' `scores < topk(scores, k)[0][-1]`) */
void gp_warp_top_k(float *scores, int32_t n_vocab, int32_t k, gp_sample_ws *ws) {
    if (k <= 0) return;
    if (k > n_vocab) k = n_vocab;
    float *tmp = ws->f0;
    int32_t n = 0;
    for (int32_t i = 0; i < n_vocab; i++)
        if (!isnan(scores[i])) tmp[n++] = scores[i];
    if (n == 0) return;
    if (k > n) k = n;
    float thr = kth_largest(tmp, n, k);
    for (int32_t i = 0; i < n_vocab; i++)
        if (scores[i] < thr) scores[i] = -INFINITY;
}

/* Only entries with a finite score can carry probability; -inf entries sort first (ascending) with probability 0,
 * so their cumulative sum is 0 and they stay masked.  Collects the others into idx, returns their count. */
static int32_t finite_indices(const float *scores, int32_t n_vocab, int32_t *idx) {
    int32_t n = 0;
    for (int32_t i = 0; i < n_vocab; i++)
        if (scores[i] > -INFINITY) idx[n++] = i;
    return n;
}

void gp_warp_top_p(float *scores, int32_t n_vocab, double p, gp_sample_ws *ws) {
    int32_t *idx = ws->idx;
    int32_t n = finite_indices(scores, n_vocab, idx);
    if (n <= 1) return;
    gp_sort_idx_asc(scores, idx, ws->idx2, n);
    float *sorted = ws->f0, *probs = ws->f1;
    for (int32_t i = 0; i < n; i++) sorted[i] = scores[idx[i]];
    gp_softmax_f32(sorted, n, probs);
    const float thr = (float)(1.0 - p); /* Python computes 1 - top_p in double; torch compares in float32 */
    double cum = 0.0;
    int32_t n_remove = 0;
    for (int32_t i = 0; i < n - 1; i++) { /* the last (largest) is always kept */
        cum += probs[i];
        if ((float)cum <= thr) n_remove = i + 1;
    }
    /* cumsum is non-decreasing, so the removed entries are a prefix */
    for (int32_t i = 0; i < n_remove; i++) scores[idx[i]] = -INFINITY;
}

void gp_warp_min_p(float *scores, int32_t n_vocab, double min_p, gp_sample_ws *ws) {
    float *probs = ws->f0;
    gp_softmax_f32(scores, n_vocab, probs);
    int32_t top = gp_argmax_f32(probs, n_vocab);
    const float thr = (float)min_p * probs[top];
    for (int32_t i = 0; i < n_vocab; i++)
        if (i != top && probs[i] < thr) scores[i] = -INFINITY;
}

void gp_warp_typical(float *scores, int32_t n_vocab, double mass, gp_sample_ws *ws) {
    float *logp = ws->f0, *shifted = ws->f1;
    gp_log_softmax_f32(scores, n_vocab, logp);
    /* ent = -nansum(logp * exp(logp)) (float32 terms; -inf * 0 is NaN and skipped) */
    double ent_acc = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) {
        float t = logp[i] * expf(logp[i]);
        if (!isnan(t)) ent_acc += t;
    }
    const float ent = -(float)ent_acc;
    for (int32_t i = 0; i < n_vocab; i++) shifted[i] = fabsf(-logp[i] - ent);
    /* sort every id by shifted ascending: -inf scores have shifted = +inf and sort last with probability 0 */
    int32_t *idx = ws->idx;
    int32_t n = finite_indices(scores, n_vocab, idx);
    if (n == 0) return;
    gp_sort_idx_asc(shifted, idx, ws->idx2, n);
    /* cumulative softmax of the scores in that order; logp holds them (it is no longer needed) */
    float *sorted_logits = logp;
    for (int32_t i = 0; i < n; i++) sorted_logits[i] = scores[idx[i]];
    gp_softmax_f32(sorted_logits, n, sorted_logits); /* in place */
    const float m = (float)mass;
    double cum = 0.0;
    int32_t last_ind = 0; /* (cumulative_probs < mass).sum() */
    for (int32_t i = 0; i < n; i++) {
        cum += sorted_logits[i];
        if ((float)cum < m) last_ind++;
    }
    if ((float)cum < m) last_ind += n_vocab - n; /* the masked tail repeats the last cumulative value */
    if (last_ind > n_vocab - 1) last_ind = n_vocab - 1;
    if (last_ind >= n) return; /* the threshold is +inf (a masked entry): nothing is removed */
    const float thr = shifted[idx[last_ind]];
    for (int32_t i = 1; i < n; i++) /* the first (most typical) is always kept */
        if (shifted[idx[i]] > thr) scores[idx[i]] = -INFINITY;
}

void gp_warp_epsilon(float *scores, int32_t n_vocab, double eps, gp_sample_ws *ws) {
    float *probs = ws->f0;
    gp_softmax_f32(scores, n_vocab, probs);
    const float e = (float)eps;
    float top = scores[gp_argmax_f32(scores, n_vocab)];
    for (int32_t i = 0; i < n_vocab; i++)
        if (probs[i] < e && scores[i] < top) scores[i] = -INFINITY;
}

void gp_warp_eta(float *scores, int32_t n_vocab, double eps, gp_sample_ws *ws) {
    float *probs = ws->f0, *logp = ws->f1;
    gp_softmax_f32(scores, n_vocab, probs);
    /* torch.distributions.Categorical(logits=scores).entropy(): logits normalised by logsumexp, clamped to the
     * smallest float so that -inf * 0 = 0, entropy = -sum(logits * softmax(logits)) */
    gp_log_softmax_f32(scores, n_vocab, logp);
    double acc = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) {
        float l = logp[i] < -3.40282347e38f ? -3.40282347e38f : logp[i];
        acc += l * probs[i];
    }
    const float entropy = -(float)acc;
    const float e = (float)eps;
    float eta = sqrtf(e) * expf(-entropy);
    if (e < eta) eta = e;
    float top = scores[gp_argmax_f32(scores, n_vocab)];
    for (int32_t i = 0; i < n_vocab; i++)
        if (probs[i] < eta && scores[i] < top) scores[i] = -INFINITY;
}
