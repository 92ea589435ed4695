/* test_act.c — the SwiGLU activation on every ISA path against the
 * reference (model/act.h's bound), over the range activations take, the
 * exp's flush region, odd lengths (masked tails) and non-finite values. */
#include <math.h>

#include "common/rng.h"
#include "model/act.h"
#include "test.h"

TEST(swiglu_every_isa_matches_reference) {
    enum { N = 1000 };
    static float g[N], u[N], want[N], got[N];
    uint64_t seed = 17;
    for (int i = 0; i < N; i++) {
        /* Mostly |g| < 8 as in the model, a tail out to +-120. */
        const double w = i % 10 == 0 ? 120.0 : 8.0;
        g[i] = (float)((2 * kvq_rng_uniform(&seed) - 1) * w);
        u[i] = (float)kvq_rng_normal(&seed);
    }
    g[0] = 0.0f, g[1] = -0.0f, g[2] = INFINITY, g[3] = -70.0f, g[4] = 88.0f, g[5] = NAN, g[6] = 1e-30f;
    for (int isa = 0; isa < KVQ_ISA_COUNT; isa++) {
        if (!kvq_isa_supported((kvq_isa)isa)) continue;
        for (int n = 1; n <= N; n += n < 40 ? 1 : 239) {
            for (int i = 0; i < n; i++) want[i] = got[i] = g[i];
            kvq_swiglu_ref(want, u, n);
            kvq_swiglu((kvq_isa)isa, got, u, n);
            for (int i = 0; i < n; i++) {
                if (isnan(want[i]) || isinf(want[i])) {
                    CHECKF(isnan(want[i]) ? isnan(got[i]) : got[i] == want[i], "isa %d n %d: swiglu(%g) %g, want %g",
                           isa, n, g[i], got[i], want[i]);
                    continue;
                }
                const double err = fabs((double)got[i] - want[i]);
                CHECKF(err <= (1e-6 + 6e-8 * fabs(g[i])) * fabs(want[i]) + 1e-27 * fabs(u[i]), "isa %d n %d: swiglu(%g) x %g = %.9g, want %.9g", isa, n,
                       g[i], u[i], got[i], want[i]);
            }
        }
    }
}
