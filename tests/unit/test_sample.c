/* test_sample.c — the sampler: greedy, top-k/top-p/min-p truncation, the
 * repeat penalty rule, determinism per seed, and the distribution of
 * temperature sampling (chi-square). */
#include <math.h>
#include <stdlib.h>

#include "common/rng.h"
#include "test.h"
#include "text/sample.h"

static kvq_sampler_params off_params(float temp, uint64_t seed) {
    kvq_sampler_params p = kvq_sampler_default_params();
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.seed = seed;
    return p;
}

TEST(sample_greedy_is_argmax) {
    kvq_sampler *s;
    kvq_sampler_params p = off_params(0.0f, 1);
    CHECK_OK(kvq_sampler_create(&p, &s));
    uint64_t st = 3;
    float l[1000];
    for (int rep = 0; rep < 20; rep++) {
        int best = 0;
        for (int i = 0; i < 1000; i++) {
            l[i] = (float)kvq_rng_normal(&st);
            if (l[i] > l[best]) best = i;
        }
        int32_t id = -1;
        CHECK_OK(kvq_sampler_sample(s, l, 1000, &id));
        CHECK(id == best);
    }
    // Ties go to the lowest id; -Inf masks.
    float tie[4] = {-INFINITY, 2.0f, 1.0f, 2.0f};
    int32_t id = -1;
    CHECK_OK(kvq_sampler_sample(s, tie, 4, &id));
    CHECK(id == 1);
    float nan_l[2] = {0.0f, NAN};
    CHECK(kvq_sampler_sample(s, nan_l, 2, &id) == KVQ_ERR_NONFINITE);
    float masked[2] = {-INFINITY, -INFINITY};
    CHECK(kvq_sampler_sample(s, masked, 2, &id) == KVQ_ERR_NONFINITE);
    kvq_sampler_free(s);
}

TEST(sample_top_k_1_is_greedy) {
    uint64_t st = 11;
    float l[257];
    for (uint64_t seed = 0; seed < 10; seed++) {
        kvq_sampler_params p = off_params(1.5f, seed);
        p.top_k = 1;
        kvq_sampler *s;
        CHECK_OK(kvq_sampler_create(&p, &s));
        int best = 0;
        for (int i = 0; i < 257; i++) {
            l[i] = (float)kvq_rng_normal(&st);
            if (l[i] > l[best]) best = i;
        }
        int32_t id;
        CHECK_OK(kvq_sampler_sample(s, l, 257, &id));
        CHECK(id == best);
        kvq_sampler_free(s);
    }
}

static void draw_sequence(uint64_t seed, int32_t *out, int n) {
    kvq_sampler_params p = kvq_sampler_default_params();
    p.seed = seed;
    p.repeat_penalty = 1.1f;
    kvq_sampler *s;
    if (kvq_sampler_create(&p, &s) != KVQ_OK) return;
    float l[64];
    for (int i = 0; i < 64; i++) l[i] = (float)(i % 7) * 0.3f;
    for (int k = 0; k < n; k++) {
        if (kvq_sampler_sample(s, l, 64, &out[k]) != KVQ_OK) out[k] = -1;
        kvq_sampler_accept(s, out[k]);
    }
    kvq_sampler_free(s);
}

TEST(sample_same_seed_same_sequence) {
    int32_t a[200], b[200], c[200];
    draw_sequence(42, a, 200);
    draw_sequence(42, b, 200);
    draw_sequence(43, c, 200);
    int differ = 0;
    for (int i = 0; i < 200; i++) {
        CHECK(a[i] == b[i] && a[i] >= 0);
        differ += a[i] != c[i];
    }
    CHECK(differ > 50);
}

TEST(sample_temperature_distribution_chi_square) {
    const float l[5] = {1.0f, 0.5f, 0.0f, -0.5f, -2.0f};
    const float temp = 0.7f;
    double w[5], sum = 0.0;
    for (int i = 0; i < 5; i++) sum += w[i] = exp(l[i] / temp);
    kvq_sampler_params p = off_params(temp, 2024);
    kvq_sampler *s;
    CHECK_OK(kvq_sampler_create(&p, &s));
    const int n = 20000;
    int count[5] = {0};
    for (int k = 0; k < n; k++) {
        int32_t id;
        CHECK_OK(kvq_sampler_sample(s, l, 5, &id));
        CHECK(id >= 0 && id < 5);
        count[id]++;
    }
    double chi2 = 0.0;
    for (int i = 0; i < 5; i++) {
        double e = n * w[i] / sum;
        chi2 += (count[i] - e) * (count[i] - e) / e;
    }
    // 4 degrees of freedom: P(chi2 > 18.47) = 0.001.
    CHECKF(chi2 < 18.47, "chi2 %.2f (counts %d %d %d %d %d)", chi2, count[0], count[1], count[2],
           count[3], count[4]);
    kvq_sampler_free(s);
}

TEST(sample_repeat_penalty_rule) {
    kvq_cand c[4] = {{0, 2.0f}, {1, -2.0f}, {2, 1.0f}, {3, 0.5f}};
    const int32_t hist[] = {0, 1, 0, 9, -1};  // 0 twice: penalized once
    int32_t tmp[5];
    kvq_sample_penalty(c, 4, hist, 5, 2.0f, tmp);
    CHECK(c[0].logit == 1.0f && c[1].logit == -4.0f && c[2].logit == 1.0f && c[3].logit == 0.5f);
    // Through the sampler: the penalty turns greedy away from a repeat.
    kvq_sampler_params p = off_params(0.0f, 0);
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 2;
    kvq_sampler *s;
    CHECK_OK(kvq_sampler_create(&p, &s));
    const float l[3] = {2.0f, 1.5f, 0.0f};
    int32_t id;
    kvq_sampler_accept(s, 0);
    CHECK_OK(kvq_sampler_sample(s, l, 3, &id));
    CHECK(id == 1);
    // The window is 2: after two more tokens, 0 is no longer penalized.
    kvq_sampler_accept(s, 2);
    kvq_sampler_accept(s, 2);
    CHECK_OK(kvq_sampler_sample(s, l, 3, &id));
    CHECK(id == 0);
    kvq_sampler_free(s);
}

TEST(sample_top_p_min_p_truncation) {
    kvq_cand c[3] = {{2, logf(0.2f)}, {0, logf(0.5f)}, {1, logf(0.3f)}};
    CHECK(kvq_sample_top_k(c, 3, 0) == 3);
    CHECK(c[0].id == 0 && c[1].id == 1 && c[2].id == 2);
    CHECK(kvq_sample_top_p(c, 3, 0.7f) == 2);
    CHECK(kvq_sample_top_p(c, 3, 0.5f) == 1);
    CHECK(kvq_sample_top_p(c, 3, 0.99f) == 3);
    CHECK(kvq_sample_min_p(c, 3, 0.5f) == 2);
    CHECK(kvq_sample_min_p(c, 3, 0.39f) == 3);
    CHECK(kvq_sample_min_p(c, 3, 1.0f) == 1);
    // top-k keeps the k best, sorted.
    kvq_cand d[6] = {{0, 0.1f}, {1, 3.0f}, {2, -1.0f}, {3, 2.0f}, {4, 2.5f}, {5, 3.0f}};
    CHECK(kvq_sample_top_k(d, 6, 3) == 3);
    CHECK(d[0].id == 1 && d[1].id == 5 && d[2].id == 4);
    // With top-p 0.5 at temperature 1, only the 0.5 token survives: every
    // draw picks it, whatever the seed.
    kvq_sampler_params p = off_params(1.0f, 5);
    p.top_p = 0.5f;
    kvq_sampler *s;
    CHECK_OK(kvq_sampler_create(&p, &s));
    const float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    for (int k = 0; k < 50; k++) {
        int32_t id;
        CHECK_OK(kvq_sampler_sample(s, l, 3, &id));
        CHECK(id == 0);
    }
    kvq_sampler_free(s);
    p.repeat_penalty = 0.0f;
    CHECK(kvq_sampler_create(&p, &s) == KVQ_ERR_INVALID_ARG);
}
