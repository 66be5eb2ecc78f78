/* extras.c — decoding knobs that transformers does not have, clearly apart from its processors: OpenAI's
 * frequency/presence penalties and logit_bias.  (The penalty window, mlx-lm's repetition_context_size, is applied by
 * the pipeline, which passes only the last tokens.) */
#include "sample/sample.h"

#include <math.h>

/* scores [n_vocab] -= freq * count + pres * (count > 0), counts over ids [n_ids] */
void gp_proc_freq_presence(float *scores, int32_t n_vocab, const int32_t *ids, int32_t n_ids, double freq,
                           double pres, gp_sample_ws *ws) {
    int32_t *c = ws->counts;
    for (int32_t i = 0; i < n_ids; i++)
        if (ids[i] >= 0 && ids[i] < n_vocab) c[ids[i]]++;
    const float f = (float)freq, p = (float)pres;
    for (int32_t i = 0; i < n_ids; i++) {
        int32_t t = ids[i];
        if (t < 0 || t >= n_vocab || c[t] == 0) continue;
        scores[t] = scores[t] - (f * (float)c[t] + p);
        c[t] = 0; /* once per distinct id; leaves counts zeroed */
    }
}

/* scores [n_vocab] += bias, per listed id */
void gp_proc_logit_bias(float *scores, int32_t n_vocab, const gp_token_bias *lb, int32_t n_lb) {
    for (int32_t i = 0; i < n_lb; i++)
        if (lb[i].id >= 0 && lb[i].id < n_vocab) scores[lb[i].id] = scores[lb[i].id] + (float)lb[i].bias;
}
