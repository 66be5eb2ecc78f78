/* rng.c — the sampler's generator: xoshiro256** 1.0 (Blackman & Vigna, 2018, public-domain algorithm), its 256-bit
 * state filled by splitmix64 from the 64-bit seed, and 53-bit uniform doubles.  Deterministic on every platform. */
#include "sample/sample.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void gp_rng_seed(gp_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t gp_rng_next(gp_rng *r) {
    uint64_t *s = r->s;
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double gp_rng_uniform(gp_rng *r) { return (double)(gp_rng_next(r) >> 11) * 0x1.0p-53; }
