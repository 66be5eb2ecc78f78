/* sampler.c — choosing the next id from processed scores: the multinomial draw from softmax (argmax lives in
 * softmax.c), and the top-N list behind per-step logprobs. */
#include "sample/sample.h"

#include <math.h>

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

/* logp [n] -> top [k], descending, ties by lower id (insertion into a sorted list of k; k is small) */
void gp_top_n(const float *logp, int32_t n, int32_t k, gp_top_logprob *top) {
    if (k > n) k = n;
    int32_t filled = 0;
    for (int32_t i = 0; i < n; i++) {
        float v = logp[i];
        if (isnan(v)) continue;
        if (filled == k && !(v > top[k - 1].logprob)) continue;
        int32_t j = filled < k ? filled++ : k - 1;
        while (j > 0 && v > top[j - 1].logprob) {
            top[j] = top[j - 1];
            j--;
        }
        top[j].id = i;
        top[j].logprob = v;
    }
    for (int32_t j = filled; j < k; j++) { /* fewer than k non-NaN values */
        top[j].id = -1;
        top[j].logprob = -INFINITY;
    }
}
