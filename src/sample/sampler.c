/* sampler.c — choosing the next id from processed scores: the multinomial draw from softmax (argmax lives in
 * softmax.c), and the top-N list behind per-step logprobs. */
#include "sample/sample.h"

#include <math.h>
#include <stdio.h>

/* scores [n] -> id drawn with probability softmax(scores)[id]; u in [0, 1); probs_ws [n] */
int32_t gp_sample_multinomial(const float *scores, int32_t n, double u, float *probs_ws) {
    gp_softmax_f32(scores, n, probs_ws);
    double total = 0.0;
    for (int32_t i = 0; i < n; i++) total += probs_ws[i];
    if (!(total > 0.0)) return -1;
    const double target = u * total;
    double cum = 0.0;
    int32_t last = -1;
    for (int32_t i = 0; i < n; i++) {
        if (!(probs_ws[i] > 0.0f)) continue;
        cum += probs_ws[i];
        last = i;
        if (target < cum) return i;
    }
    return last; /* rounding: u * total landed on the total */
}

/* a ranks before b: higher logprob, ties by lower id */
static int ranks_before(const gp_top_logprob *a, const gp_top_logprob *b) {
    return a->logprob > b->logprob || (a->logprob == b->logprob && a->id < b->id);
}

/* heap [k] whose root is the entry that ranks last; restores the order below position j */
static void sift_down(gp_top_logprob *h, int32_t k, int32_t j) {
    for (;;) {
        int32_t l = 2 * j + 1, r = l + 1, w = j;
        if (l < k && ranks_before(&h[w], &h[l])) w = l;
        if (r < k && ranks_before(&h[w], &h[r])) w = r;
        if (w == j) return;
        gp_top_logprob t = h[j];
        h[j] = h[w];
        h[w] = t;
        j = w;
    }
}

/* logp [n] -> top [k], descending, ties by lower id; NaN entries never listed.  A bounded heap of the k best so far:
 * O(n log k + k log k), so k = n costs n log n, not n * k. */
void gp_top_n(const float *logp, int32_t n, int32_t k, gp_top_logprob *top) {
    if (k > n) k = n;
    if (k <= 0) return;
    int32_t filled = 0;
    for (int32_t i = 0; i < n; i++) {
        float v = logp[i];
        if (isnan(v)) continue;
        gp_top_logprob e = {i, v};
        if (filled < k) { /* sift up */
            int32_t j = filled++;
            while (j > 0 && ranks_before(&top[(j - 1) / 2], &e)) {
                top[j] = top[(j - 1) / 2];
                j = (j - 1) / 2;
            }
            top[j] = e;
        } else if (ranks_before(&e, &top[0])) {
            top[0] = e;
            sift_down(top, k, 0);
        }
    }
    for (int32_t m = filled; m > 1; m--) { /* heap sort: the last-ranked root goes to the end */
        gp_top_logprob t = top[0];
        top[0] = top[m - 1];
        top[m - 1] = t;
        sift_down(top, m - 1, 0);
    }
    for (int32_t j = filled; j < k; j++) { /* fewer than k non-NaN values */
        top[j].id = -1;
        top[j].logprob = -INFINITY;
    }
}

/* Describes why scores [n] leave nothing to sample: NaN or +inf entries (an underflowing temperature, several +inf
 * biases) or every entry -inf (all masked).  Writes a NUL-terminated sentence to buf. */
void gp_scores_diagnose(const float *scores, int32_t n, char *buf, size_t cap) {
    int32_t n_nan = 0, n_pinf = 0, n_ninf = 0;
    for (int32_t i = 0; i < n; i++) {
        if (isnan(scores[i])) n_nan++;
        else if (scores[i] == INFINITY) n_pinf++;
        else if (scores[i] == -INFINITY) n_ninf++;
    }
    if (n_nan || n_pinf)
        snprintf(buf, cap, "the processed scores hold %d NaN and %d +inf entries, so softmax is undefined (a "
                 "temperature so small that scores / temperature overflow, or infinite positive biases)",
                 (int)n_nan, (int)n_pinf);
    else if (n_ninf == n) snprintf(buf, cap, "every token is masked (all %d scores are -inf)", (int)n);
    else snprintf(buf, cap, "softmax of the processed scores sums to zero");
}
