/* test_sampler.c — the seeded generator and the multinomial sampler: determinism for a seed, and a chi-square
 * goodness-of-fit test over 50,000 draws that the sampler draws from softmax of the processed scores. */
#include "test.h"

#include "sample/sample.h"

#include <stdint.h>

/* Regularised upper incomplete gamma Q(a, x) (series for x < a + 1, continued fraction otherwise), for the
 * chi-square p-value P(X >= chi2) = Q(df / 2, chi2 / 2). */
static double gamma_q(double a, double x) {
    if (x <= 0) return 1.0;
    double gln = lgamma(a);
    if (x < a + 1) {
        double ap = a, sum = 1.0 / a, del = sum;
        for (int n = 0; n < 1000; n++) {
            ap += 1;
            del *= x / ap;
            sum += del;
            if (fabs(del) < fabs(sum) * 1e-15) break;
        }
        return 1.0 - sum * exp(-x + a * log(x) - gln);
    }
    double b = x + 1 - a, c = 1.0 / 1e-300, d = 1.0 / b, h = d;
    for (int i = 1; i < 1000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < 1e-300) d = 1e-300;
        c = b + an / c;
        if (fabs(c) < 1e-300) c = 1e-300;
        d = 1.0 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1.0) < 1e-15) break;
    }
    return exp(-x + a * log(x) - gln) * h;
}

/* chi-square statistic of counts [n] against probabilities p [n] over N draws; categories with p = 0 must be empty
 * (returns INFINITY otherwise); *df = non-empty categories - 1. */
static double chi_square(const int *counts, const double *p, int n, int N, int *df) {
    double chi = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] == 0) {
            if (counts[i]) return INFINITY;
            continue;
        }
        double e = p[i] * N;
        chi += (counts[i] - e) * (counts[i] - e) / e;
        k++;
    }
    *df = k - 1;
    return chi;
}

static void softmax_ref(const float *s, int n, double *p) {
    double m = -INFINITY, z = 0;
    for (int i = 0; i < n; i++)
        if (s[i] > m) m = s[i];
    for (int i = 0; i < n; i++) z += (p[i] = s[i] == -INFINITY ? 0.0 : exp((double)s[i] - m));
    for (int i = 0; i < n; i++) p[i] /= z;
}

TEST(rng_is_deterministic_and_documented) {
    gp_rng a, b, c;
    gp_rng_seed(&a, 42);
    gp_rng_seed(&b, 42);
    gp_rng_seed(&c, 43);
    int same = 1, differs = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = gp_rng_next(&a), y = gp_rng_next(&b), z = gp_rng_next(&c);
        same &= x == y;
        differs |= x != z;
    }
    CHECK(same);
    CHECK(differs);
    /* xoshiro256** with splitmix64 seeding: state for seed 0 is splitmix64's first four outputs */
    gp_rng r;
    gp_rng_seed(&r, 0);
    CHECK(r.s[0] == 0xe220a8397b1dcdafULL);
    CHECK(r.s[1] == 0x6e789e6aa1b965f4ULL);
    double u_min = 1, u_max = 0;
    for (int i = 0; i < 100000; i++) {
        double u = gp_rng_uniform(&r);
        if (u < u_min) u_min = u;
        if (u > u_max) u_max = u;
    }
    CHECK(u_min >= 0.0 && u_min < 1e-3);
    CHECK(u_max < 1.0 && u_max > 1 - 1e-3);
}

/* The processed scores of a fixed distribution: temperature 0.8, top-k 4 (a tie at the threshold keeps 5). */
TEST(sampler_chi_square_matches_softmax_of_processed_scores) {
    enum { V = 10, N = 50000 };
    const float raw[V] = {2.0f, 1.0f, 0.5f, 0.5f, 0.0f, -0.5f, -1.0f, -INFINITY, 3.0f, -2.0f};
    gp_sample_ws ws;
    REQUIRE(gp_sample_ws_init(&ws, V) == GP_OK);
    gp_gen_config g = gp_gen_config_default();
    g.do_sample = 1;
    g.temperature = 0.8;
    g.top_k = 4;
    float s[V];
    memcpy(s, raw, sizeof s);
    CHECK_STATUS(gp_process_scores(&g, s, V, NULL, 0, 0, 0, &ws), GP_OK);
    double p[V], p_raw[V];
    softmax_ref(s, V, p);
    softmax_ref(raw, V, p_raw);
    int counts[V] = {0};
    gp_rng r;
    gp_rng_seed(&r, 20240601);
    float probs_ws[V];
    for (int i = 0; i < N; i++) {
        int32_t t = gp_sample_multinomial(s, V, gp_rng_uniform(&r), probs_ws);
        REQUIRE(t >= 0 && t < V);
        counts[t]++;
    }
    int df;
    double chi = chi_square(counts, p, V, N, &df);
    double pv = gamma_q(df / 2.0, chi / 2.0);
    NOTE("%d draws: chi2 = %.3f, df = %d, p-value = %.4f (fail below 0.001)", N, chi, df, pv);
    CHECK(df == 4); /* 5 tokens survive top-k 4 (a tie at 0.5) */
    CHECK(pv >= 0.001);
    CHECK_EQ_INT(counts[7], 0); /* -inf never drawn */
    /* the same draws are clearly not from the unprocessed distribution: the test has power */
    int df2;
    double chi2 = chi_square(counts, p_raw, V, N, &df2);
    double pv2 = isinf(chi2) ? 0.0 : gamma_q(df2 / 2.0, chi2 / 2.0);
    NOTE("against softmax of the raw scores: chi2 = %.1f, p-value = %.3g (must be rejected)", chi2, pv2);
    CHECK(pv2 < 0.001);
    gp_sample_ws_free(&ws);
}

TEST(sampler_same_seed_same_draws) {
    const float s[5] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
    float ws[5];
    gp_rng a, b;
    gp_rng_seed(&a, 7);
    gp_rng_seed(&b, 7);
    int same = 1;
    for (int i = 0; i < 2000; i++)
        same &= gp_sample_multinomial(s, 5, gp_rng_uniform(&a), ws) == gp_sample_multinomial(s, 5, gp_rng_uniform(&b), ws);
    CHECK(same);
    /* every id masked: no draw */
    const float none[3] = {-INFINITY, -INFINITY, -INFINITY};
    CHECK_EQ_INT(gp_sample_multinomial(none, 3, 0.5, ws), -1);
    /* u at the edges picks the first / last id with mass */
    const float two[4] = {-INFINITY, 0.0f, 0.0f, -INFINITY};
    CHECK_EQ_INT(gp_sample_multinomial(two, 4, 0.0, ws), 1);
    CHECK_EQ_INT(gp_sample_multinomial(two, 4, 0.9999999999, ws), 2);
}

TEST(top_n_logprobs_are_sorted) {
    const float lp[6] = {-3.0f, -0.5f, -INFINITY, -0.5f, -1.0f, -2.0f};
    gp_top_logprob top[3];
    gp_top_n(lp, 6, 3, top);
    CHECK_EQ_INT(top[0].id, 1); /* tie: lower id first */
    CHECK_EQ_INT(top[1].id, 3);
    CHECK_EQ_INT(top[2].id, 4);
    CHECK(top[2].logprob == -1.0f);
}

TEST(logits_kl_closed_form) {
    float p[3] = {0.0f, 0.0f, -INFINITY}, q[3] = {0.0f, (float)log(3.0), 0.0f};
    /* softmax(p) = (1/2, 1/2, 0); softmax(q) = (1/5, 3/5, 1/5) */
    double want = 0.5 * log(0.5 / 0.2) + 0.5 * log(0.5 / 0.6);
    double got = gp_logits_kl(p, q, 3);
    NOTE("KL = %.12f, closed form %.12f", got, want);
    CHECK(fabs(got - want) < 1e-6);
    CHECK(gp_logits_kl(q, q, 3) == 0.0);
}
