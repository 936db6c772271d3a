/*
 * math: the few elementary functions the allocator needs, so that it does
 * not pull libm into every process it is loaded into (about 320 KiB of
 * RSS for a small program: libm's pages touched by the loader).
 *
 * Accuracy: a few units in the last place over the ranges used (log for
 * the table below and the weights, expm1(-Z/R) for Z/R in (0, 2^62]); the
 * sampler's -log(u), u in (0, 1], once per sample, uses the table log,
 * within 2^-51 of libm's (a wait of R * 2^-51 bytes at most).
 * test_math compares them with libm.
 */
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "mutex.h"

#define LN2_HI 6.93147180369123816490e-01 /* ln 2, high bits: k * LN2_HI is exact */
#define LN2_LO 1.90821492927058770002e-10 /* ln 2 - LN2_HI */
#define LOG2_E 1.44269504088896338700e+00

static double bits_to_double(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof(d));
    return d;
}

static uint64_t double_to_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof(u));
    return u;
}

double ma_log(double x)
{
    if (!(x > 0))
        return x == 0 ? -__builtin_inf() : __builtin_nan(""); /* not 1/0 nor 0/0: UBSan flags those */
    uint64_t u = double_to_bits(x);
    int e = (int)((u >> 52) & 0x7ff);
    if (e == 0x7ff)
        return x; /* inf */
    if (e == 0) { /* subnormal: scale into the normal range first */
        u = double_to_bits(x * 0x1p54);
        e = (int)((u >> 52) & 0x7ff) - 54;
    }
    e -= 1023;
    /* x = m * 2^e with m in [sqrt(1/2), sqrt(2)). */
    double m = bits_to_double((u & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
    if (m > 1.41421356237309504880) {
        m *= 0.5;
        e++;
    }
    /* log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716:
     *   2 (s + s t/3 + s t^2/5 + ... + s t^11/23 + ...),  t = s^2,
     * which has converged to 2^-60 by the t^11 term. The polynomial in t is
     * evaluated in Estrin's scheme (pairs, then pairs of pairs): its
     * products are independent, where dividing each term by 2k+1 in a loop
     * cost 148 instructions and a chain of 12 divisions per call (the
     * sampler draws a log per sample). */
    double s = (m - 1.0) / (m + 1.0), t = s * s, t2 = t * t, t4 = t2 * t2, t8 = t4 * t4;
    double p01 = 1.0 / 3 + t * (1.0 / 5), p23 = 1.0 / 7 + t * (1.0 / 9);
    double p45 = 1.0 / 11 + t * (1.0 / 13), p67 = 1.0 / 15 + t * (1.0 / 17);
    double p89 = 1.0 / 19 + t * (1.0 / 21);
    double p0_3 = p01 + t2 * p23, p4_7 = p45 + t2 * p67, p8_10 = p89 + t2 * (1.0 / 23);
    double q = (p0_3 + t4 * p4_7) + t8 * p8_10;
    /* s + s t q, with s kept apart: the leading term carries most bits. */
    double sum = s + s * t * q;
    return (double)e * LN2_HI + ((double)e * LN2_LO + 2.0 * sum);
}

/*
 * The table log. x = 2^e * m, m in [1, 2); the top LOG_TABLE_BITS bits of
 * m's fraction pick c, the middle of their interval, so that with
 * r = (m - c) / c (m - c exact, the division a multiplication by the
 * tabled 1/c), |r| < 2^-(LOG_TABLE_BITS + 1) and
 *   log x = e ln 2 + log c + log1p(r),
 * log1p(r) = r - r^2/2 + r^3/3 - ... to r^6 (the next term is below
 * 2^-56). log c is tabled from ma_log. About a third of ma_log's cost in
 * time: no division, a shorter dependency chain.
 */
#define LOG_TABLE_BITS 7
#define LOG_TABLE_N (1u << LOG_TABLE_BITS)

static struct {
    double inv_c, log_c;
} log_table[LOG_TABLE_N];

static double log_table_c(unsigned i)
{
    return 1.0 + (double)(2 * i + 1) * (1.0 / (2 * LOG_TABLE_N)); /* exact */
}

/* The ziggurat's r (the base strip's right edge) and v (each strip's
 * area) for 256 strips under e^-x, from Marsaglia and Tsang. */
#define ZIG_R 7.69711747013104972
#define ZIG_V 3.949659822581572e-3
#define ZIG_M 9007199254740992.0 /* 2^53: a strip's points */

ma_exp_zig_t ma_exp_zig;

static double zig_exp_neg(double x) { return 1.0 + ma_expm1(-x); }

/* Strip i (1..255) spans x in [0, x_i) with x_255 = r, x_i shrinking with
 * i; its points below x_(i-1) are under the curve. Strip 0 is the base: a
 * rectangle of width v / e^-r, whose points beyond r stand for the tail. */
static void zig_boot(void)
{
    ma_exp_zig_t *z = &ma_exp_zig;
    double de = ZIG_R, te = ZIG_R, q = ZIG_V / zig_exp_neg(ZIG_R);
    z->k[0] = (uint64_t)((de / q) * ZIG_M);
    z->k[1] = 0;
    z->w[0] = q / ZIG_M;
    z->w[255] = de / ZIG_M;
    z->f[0] = 1.0;
    z->f[255] = zig_exp_neg(de);
    for (int i = 254; i >= 1; i--) {
        de = -ma_log(ZIG_V / de + zig_exp_neg(de));
        z->k[i + 1] = (uint64_t)((de / te) * ZIG_M);
        te = de;
        z->f[i] = zig_exp_neg(de);
        z->w[i] = de / ZIG_M;
    }
}

/* A uniform in (0, 1]. */
static double zig_uniform(uint64_t *state) { return (double)((ma_splitmix_next(state) >> 11) + 1) * (1.0 / ZIG_M); }

double ma_exp_draw_slow(uint64_t *state, uint64_t r)
{
    const ma_exp_zig_t *z = &ma_exp_zig;
    for (;;) {
        unsigned i = (unsigned)(r & 255);
        uint64_t j = r >> 11;
        if (j < z->k[i])
            return (double)j * z->w[i];
        if (i == 0) /* the tail: beyond r, Exp(1) again (it is memoryless) */
            return ZIG_R - ma_log_fast(zig_uniform(state));
        /* The wedge: under the curve with probability its share of the
         * strip between f[i] and f[i - 1]. */
        double x = (double)j * z->w[i];
        if (z->f[i] + zig_uniform(state) * (z->f[i - 1] - z->f[i]) < zig_exp_neg(x))
            return x;
        r = ma_splitmix_next(state);
    }
}

static int boot_state; /* 0: not filled, 1: being filled, 2: ready */

void ma_math_boot(void)
{
    int expected = 0;
    if (ma_load_acquire(&boot_state) == 2)
        return;
    if (!ma_cas(&boot_state, &expected, 1)) {
        while (ma_load_acquire(&boot_state) != 2) /* another thread fills them: ~40 us */
            ma_cpu_pause();
        return;
    }
    for (unsigned i = 0; i < LOG_TABLE_N; i++) {
        log_table[i].inv_c = 1.0 / log_table_c(i);
        log_table[i].log_c = ma_log(log_table_c(i));
    }
    zig_boot();
    ma_store_release(&boot_state, 2);
}

/* A fork while another thread filled the tables: in the child nobody will
 * finish, so the next call fills them again. */
void ma_math_postfork_child(void)
{
    if (ma_load_relaxed(&boot_state) == 1)
        ma_store_relaxed(&boot_state, 0);
}

double ma_log_fast(double x)
{
    uint64_t u = double_to_bits(x);
    int e = (int)(u >> 52) - 1023;
    unsigned i = (unsigned)(u >> (52 - LOG_TABLE_BITS)) & (LOG_TABLE_N - 1);
    double m = bits_to_double((u & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
    double r = (m - log_table_c(i)) * log_table[i].inv_c, r2 = r * r;
    /* Estrin: r + r2 (-1/2 + r/3) + r2^2 (-1/4 + r/5 - r2/6). */
    double p = r + r2 * (-0.5 + r * (1.0 / 3)) + (r2 * r2) * ((-0.25 + r * 0.2) - r2 * (1.0 / 6));
    return (double)e * LN2_HI + (((double)e * LN2_LO + log_table[i].log_c) + p);
}

static double exp_reduced(double x, int *k_out)
{
    /* x = k ln 2 + r, |r| <= ln2 / 2. */
    double kd = x * LOG2_E;
    long long k = (long long)(kd < 0 ? kd - 0.5 : kd + 0.5);
    double r = (x - (double)k * LN2_HI) - (double)k * LN2_LO;
    /* e^r - 1 by its series: |r| <= 0.347, 17 terms reach 2^-60. */
    double term = r, sum = r;
    for (int n = 2; n < 18; n++) {
        term *= r / (double)n;
        sum += term;
    }
    *k_out = (int)k;
    return sum;
}

double ma_expm1(double x)
{
    if (x != x)
        return x;
    if (x < -40.0)
        return -1.0; /* e^x < 2^-57: below half an ulp of 1 */
    if (x > 709.0)
        return __builtin_inf();
    int k;
    double em1 = exp_reduced(x, &k); /* e^x = 2^k (1 + em1) */
    if (k == 0)
        return em1;
    /* 2^k (1 + em1) - 1, with 2^k exact; k is within [-58, 1023] here. */
    double p = ma_pow2(k);
    return (p - 1.0) + p * em1;
}

long long ma_llround(double x)
{
    if (x >= 0x1p52 || x <= -0x1p52)
        return (long long)x; /* already an integer */
    long long t = (long long)x; /* toward zero; x - t is exact */
    double frac = x - (double)t;
    if (frac >= 0.5)
        t++;
    else if (frac <= -0.5)
        t--;
    return t;
}
