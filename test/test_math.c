/*
 * The allocator's own log, expm1 and llround (src/common/math.c) against
 * libm's, over the ranges the sampler and the profile writers use, plus
 * the edge cases; and its Exp(1) draws (the sampler's waits) against the
 * exponential distribution, in the body, the strips' wedges and the tail.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "common/common.h"
#include "test_util.h"

static double rel_err(double got, double want)
{
    if (got == want)
        return 0;
    return fabs(got - want) / fmax(fabs(want), DBL_MIN);
}

/* The sampler draws -log(u) for u = k / 2^53, k in [1, 2^53]. */
Test(math, log_matches_libm)
{
    uint64_t seed = 7;
    double worst = 0;
    for (int i = 0; i < 200000; i++) {
        double u = (double)((tu_rand(&seed) >> 11) + 1) / 9007199254740992.0;
        worst = fmax(worst, rel_err(ma_log(u), log(u)));
    }
    /* Across magnitudes, subnormals included. */
    for (double x = 4.9e-324; x < 1e300; x *= 3.7)
        worst = fmax(worst, rel_err(ma_log(x), log(x)));
    for (int i = -20; i <= 20; i++) {
        double x = 1.0 + i * 0x1p-40; /* near 1, where log is tiny */
        cr_assert_leq(fabs(ma_log(x) - log(x)), 4 * DBL_EPSILON * fabs(log(x)) + 1e-300, "log(1 + %d * 2^-40)", i);
    }
    cr_log_info("log: worst relative error %.3g", worst);
    cr_assert_lt(worst, 4 * DBL_EPSILON, "log: relative error %.3g", worst);
    cr_assert_eq(ma_log(1.0), 0.0);
    cr_assert(isinf(ma_log(0.0)) && ma_log(0.0) < 0);
    cr_assert(isnan(ma_log(-1.0)));
    cr_assert(isinf(ma_log(INFINITY)));
}

/* The table log (the sampler's draws beyond the ziggurat's last strip):
 * over its range (and across magnitudes) within 2^-51 * max(1, |log x|)
 * of libm's (twice its rounding), and near x = 1 within 2^-51 absolutely. */
Test(math, table_log_matches_libm)
{
    ma_math_boot(); /* this test links math.c alone: no allocator initialisation */
    uint64_t seed = 11;
    double worst = 0;
    for (int i = 0; i < 400000; i++) {
        double u = (double)((tu_rand(&seed) >> 11) + 1) / 9007199254740992.0;
        worst = fmax(worst, fabs(ma_log_fast(u) - log(u)) / fmax(1.0, fabs(log(u))));
    }
    for (double x = 2.3e-308; x < 1e300; x *= 1.37)
        worst = fmax(worst, fabs(ma_log_fast(x) - log(x)) / fmax(1.0, fabs(log(x))));
    /* Every table interval, at its ends and its middle. */
    for (int i = 0; i < 128; i++) {
        for (int k = 0; k < 3; k++) {
            double x = 1.0 + (i + k * 0.5) / 128.0 - (k == 2 ? 0x1p-52 : 0);
            worst = fmax(worst, fabs(ma_log_fast(x) - log(x)));
            worst = fmax(worst, fabs(ma_log_fast(x / 8) - log(x / 8)) / fabs(log(x / 8)));
        }
    }
    for (int i = -20; i <= 20; i++) {
        double x = 1.0 + i * 0x1p-40;
        worst = fmax(worst, fabs(ma_log_fast(x) - log(x)));
    }
    cr_log_info("table log: worst error %.3g", worst);
    cr_assert_lt(worst, 0x1p-51, "table log: error %.3g", worst);
    cr_assert_leq(fabs(ma_log_fast(1.0)), 0x1p-52);
}

/* The weights use expm1(-Z/R): Z/R from 2^-19 (16 B at R = 2^19) to 2^62. */
Test(math, expm1_matches_libm)
{
    double worst = 0;
    for (double x = 0x1p-40; x < 800; x *= 1.01) {
        worst = fmax(worst, rel_err(ma_expm1(-x), expm1(-x)));
        if (x < 700)
            worst = fmax(worst, rel_err(ma_expm1(x), expm1(x)));
    }
    uint64_t seed = 11;
    for (int i = 0; i < 200000; i++) {
        double x = -ldexp((double)(tu_rand(&seed) >> 11), -53) * 64; /* (-64, 0] */
        worst = fmax(worst, rel_err(ma_expm1(x), expm1(x)));
    }
    cr_log_info("expm1: worst relative error %.3g", worst);
    cr_assert_lt(worst, 4 * DBL_EPSILON, "expm1: relative error %.3g", worst);
    cr_assert_eq(ma_expm1(0.0), 0.0);
    cr_assert_eq(ma_expm1(-1e6), -1.0);
    cr_assert(isinf(ma_expm1(1e6)));
    /* What the weight table computes: 1 / (1 - e^(-Z/R)). */
    for (unsigned lg = 0; lg < 40; lg++)
        for (double z = 16; z < 1e12; z *= 2.5) {
            double r = ldexp(1, (int)lg);
            cr_assert_lt(rel_err(1.0 / -ma_expm1(-z / r), 1.0 / -expm1(-z / r)), 4 * DBL_EPSILON, "Z %g R 2^%u", z,
                         lg);
        }
}

Test(math, llround_matches_libm)
{
    const double cases[] = {0.0,  0.5,  -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999999999999994, -0.49999999999999994,
                            1e15 + 0.5, 4503599627370495.5, 4503599627370497.0, -4503599627370497.0, 9.2e18,
                            -9.2e18, 123456.789, -123456.789};
    for (size_t i = 0; i < MA_ARRAY_LEN(cases); i++)
        cr_assert_eq(ma_llround(cases[i]), llround(cases[i]), "llround(%.17g): %lld vs %lld", cases[i],
                     ma_llround(cases[i]), llround(cases[i]));
    uint64_t seed = 3;
    for (int i = 0; i < 100000; i++) {
        double x = ldexp((double)(int64_t)tu_rand(&seed), -(int)(tu_rand(&seed) % 60));
        cr_assert_eq(ma_llround(x), llround(x), "llround(%.17g)", x);
    }
}

/* 2^24 draws of ma_exp_draw, fixed seed. Under Exp(1), u = 1 - e^-E is
 * uniform: the largest gap between the draws' distribution of u and the
 * uniform one (Kolmogorov-Smirnov, over 2^16 bins: the binning only makes
 * it smaller) stays under 3.3 / sqrt(n) but with probability 7e-10. A
 * ziggurat that took every point of its strips' wedges (1.1% of draws
 * decided there) or returned r for every tail draw fails here or below. */
Test(math, exp_draws_are_exponential)
{
    ma_math_boot();
    const size_t n = (size_t)1 << 24, nbins = (size_t)1 << 16;
    const double r = 7.69711747013104972; /* the ziggurat's last strip ends here */
    uint32_t *bins = calloc(nbins, sizeof(uint32_t));
    uint64_t state = 0x5eed, ntail = 0;
    double sum = 0, tail_excess = 0;
    for (size_t i = 0; i < n; i++) {
        double e = ma_exp_draw(&state);
        cr_assert(e >= 0 && isfinite(e), "draw %zu: %g", i, e);
        double u = -expm1(-e);
        size_t b = (size_t)(u * (double)nbins);
        bins[b < nbins ? b : nbins - 1]++;
        sum += e;
        if (e > r) {
            ntail++;
            tail_excess += e - r;
        }
    }
    double d = 0, cum = 0;
    for (size_t b = 0; b < nbins; b++) {
        cum += bins[b];
        d = fmax(d, fabs(cum / (double)n - (double)(b + 1) / (double)nbins));
    }
    free(bins);
    cr_assert_lt(sqrt((double)n) * d, 3.3, "KS statistic %.3f: the draws are not Exp(1)", sqrt((double)n) * d);
    /* The mean: 1, sd 1 / sqrt(n). */
    cr_assert_lt(fabs(sum / (double)n - 1.0) * sqrt((double)n), 6.0, "mean %.6f", sum / (double)n);
    /* The tail beyond r (P = e^-r, 4.5e-4: ~7,600 draws), binomial within
     * 6 sigma, and its excess over r again Exp(1): mean 1, sd 1/sqrt(k). */
    double p = exp(-r), mean = (double)n * p, sd = sqrt((double)n * p * (1 - p));
    cr_assert_lt(fabs((double)ntail - mean), 6 * sd, "%llu draws beyond r, expected %.0f +- %.0f",
                 (unsigned long long)ntail, mean, sd);
    cr_assert_lt(fabs(tail_excess / (double)ntail - 1.0) * sqrt((double)ntail), 6.0,
                 "mean excess beyond r %.4f over %llu draws", tail_excess / (double)ntail, (unsigned long long)ntail);
}
