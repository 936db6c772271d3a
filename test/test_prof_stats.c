/*
 * The profiler's numbers: statistical tests with fixed seeds and 6-sigma
 * bounds (wide enough never to flake, narrow enough to catch a wrong
 * formula: each was checked by breaking the formula once).
 *
 * Truth is in usable bytes: the sampler counts usable sizes, so the
 * unbiased estimates are of the memory the objects actually occupy.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>

#include "arena/rtree.h"
#include "core/core.h"
#include "myalloc.h"
#include "prof/prof.h"
#include "tcache/te.h"
#include "test_util.h"

static void prof_start(unsigned lg, uint64_t seed, bool accum)
{
    opt_prof_seed = seed;
    opt_prof_accum = accum;
    size_t lgz = lg;
    cr_assert_eq(mallctl("prof.reset", NULL, NULL, &lgz, sizeof(lgz)), 0);
    bool on = true;
    cr_assert_eq(mallctl("prof.active", NULL, NULL, &on, sizeof(on)), 0);
}

/* Run fn in a fresh thread: its sampler is seeded from prof_seed. */
static void in_thread(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, fn, arg), 0);
    pthread_join(t, NULL);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---------------------------------------------------------------------
 * The waits are exponential with mean R.
 */

static void check_waits(unsigned lg, uint64_t seed)
{
    const size_t n = 200000;
    const double R = (double)((uint64_t)1 << lg);
    double *u = malloc(n * sizeof(double));
    uint64_t state = seed, vstate = seed ^ 0xdeadbeef;
    double sum = 0;
    /* The draws' tables: te_sample_configure fills them when sampling is
     * switched on; this test draws without switching it on. */
    ma_math_boot();
    for (size_t i = 0; i < n; i++) {
        uint64_t w = te_sample_wait(&state, lg);
        cr_assert_geq(w, 1);
        /* w = floor(E) + 1 with E ~ Exp(R), i.e. E in [w-1, w). The
         * randomised probability integral transform
         *   u = F(w-1) + V (F(w) - F(w-1)),  F(x) = 1 - exp(-x/R), V ~ U(0,1)
         * is exactly uniform when that holds, whatever R. */
        double f0 = -expm1(-(double)(w - 1) / R), f1 = -expm1(-(double)w / R);
        double v = (double)(tu_rand(&vstate) >> 11) / 9007199254740992.0;
        u[i] = f0 + v * (f1 - f0);
        sum += (double)w - 0.5;
    }
    qsort(u, n, sizeof(double), cmp_double);
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)(i + 1) / n - u[i]));
        d = fmax(d, fabs(u[i] - (double)i / n));
    }
    free(u);
    /* Kolmogorov-Smirnov: P(sqrt(n) D > 3.3) ~ 2 exp(-2 * 3.3^2) ~ 7e-10. */
    cr_assert_lt(sqrt((double)n) * d, 3.3, "KS statistic %.3f: waits are not Exp(R=%.0f)",
                 sqrt((double)n) * d, R);
    /* E[w - 1/2] = R + O(1/R): the mean, within 6 sigma (sd of Exp is R). */
    double mean = sum / n;
    cr_assert_lt(fabs(mean - R) / (R / sqrt((double)n)), 6.0, "mean wait %.1f, R %.0f", mean, R);
}

Test(prof_stats, waits_are_exponential_with_mean_R)
{
    check_waits(19, 0x1234);
    check_waits(12, 0x5678);
    check_waits(4, 0x9abc);
}

/* ---------------------------------------------------------------------
 * Per usable size Z the sampled fraction is 1 - exp(-Z/R).
 */

typedef struct frac_case {
    size_t size;
    size_t n;
    size_t sampled;
} frac_case_t;

static frac_case_t frac_cases[] = {
    {16, 400000, 0},  {17, 400000, 0},  {100, 200000, 0},   {1000, 50000, 0},  {3000, 20000, 0},
    {8000, 10000, 0}, {20000, 5000, 0}, {100000, 3000, 0},  {1 << 20, 200, 0},
};

static void *frac_worker(void *arg)
{
    (void)arg;
    for (size_t c = 0; c < MA_ARRAY_LEN(frac_cases); c++) {
        frac_case_t *fc = &frac_cases[c];
        for (size_t i = 0; i < fc->n; i++) {
            void *p = malloc(fc->size);
            if (rtree_lookup((uintptr_t)p) & RTREE_SAMPLED)
                fc->sampled++;
            free(p);
        }
    }
    return NULL;
}

static void check_fractions(unsigned lg, uint64_t seed)
{
    prof_start(lg, seed, false);
    in_thread(frac_worker, NULL);
    const double R = (double)((uint64_t)1 << lg);
    for (size_t c = 0; c < MA_ARRAY_LEN(frac_cases); c++) {
        frac_case_t *fc = &frac_cases[c];
        double usize = (double)sc_s2u(fc->size);
        double p = -expm1(-usize / R);
        double mean = fc->n * p, sd = sqrt(fc->n * p * (1 - p));
        double slack = 6 * sd + 0.5; /* + 0.5: p close to 1 */
        cr_assert_leq(fabs((double)fc->sampled - mean), slack,
                      "R=%.0f size %zu (usable %.0f): %zu of %zu sampled, expected %.1f +- %.1f",
                      R, fc->size, usize, fc->sampled, fc->n, mean, sd);
        fc->sampled = 0;
    }
}

Test(prof_stats, sampled_fraction_is_one_minus_exp_of_usable_size_over_R, .timeout = 120)
{
    check_fractions(14, 42);
    check_fractions(17, 43);
}

/* ---------------------------------------------------------------------
 * End to end: known call sites through real malloc and a real dump; the
 * readers' per-record formula applied to the dump gives the truth within
 * six standard deviations, sqrt(sum Z^2 (1-p)/p) for bytes and
 * sqrt(sum (1-p)/p) for objects.
 */

#define E2E_LG 12

typedef struct truth {
    double live_bytes, live_objs, acc_bytes, acc_objs;
    double var_live_bytes, var_live_objs, var_acc_bytes, var_acc_objs;
} truth_t;

typedef struct site {
    const char *name;
    truth_t t;
    double est_live_bytes, est_live_objs, est_acc_bytes, est_acc_objs;
    uint64_t raw_live;
} site_t;

enum { S16, S3000, S1M, SMIX, SEDGE, SCALLOC, SMEMALIGN, SREALLOC, SFREED, NSITES };
static site_t sites[NSITES] = {
    {.name = "site_16"},     {.name = "site_3000"},     {.name = "site_1mib"},
    {.name = "site_mix"},    {.name = "site_edges"},    {.name = "site_calloc"},
    {.name = "site_memalign"}, {.name = "site_realloc"}, {.name = "site_freed"},
};

static double e2e_p(double usize)
{
    return -expm1(-usize / (double)(1 << E2E_LG));
}

static void truth_alloc(truth_t *t, void *p)
{
    double z = (double)malloc_usable_size(p), p_ = e2e_p(z);
    double vb = z * z * (1 - p_) / p_, vo = (1 - p_) / p_;
    t->live_bytes += z;
    t->live_objs += 1;
    t->acc_bytes += z;
    t->acc_objs += 1;
    t->var_live_bytes += vb;
    t->var_live_objs += vo;
    t->var_acc_bytes += vb;
    t->var_acc_objs += vo;
}

static void truth_free(truth_t *t, void *p)
{
    double z = (double)malloc_usable_size(p), p_ = e2e_p(z);
    t->live_bytes -= z;
    t->live_objs -= 1;
    t->var_live_bytes -= z * z * (1 - p_) / p_;
    t->var_live_objs -= (1 - p_) / p_;
}

#define SITE __attribute__((noinline, used))

/* The sites are global so that dladdr names them (the test is linked with
 * -rdynamic). Each allocates through one call instruction. */
SITE void site_16(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = malloc(16);
}

SITE void site_3000(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = malloc(3000);
}

SITE void site_1mib(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = malloc((size_t)1 << 20);
}

SITE void site_mix(void **keep, const size_t *sizes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = malloc(sizes[i]);
}

SITE void site_edges(void **keep, const size_t *sizes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = malloc(sizes[i]);
}

SITE void site_calloc(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = calloc(1, 100);
}

SITE void site_memalign(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(posix_memalign(&keep[i], i % 2 ? 64 : 4096, i % 2 ? 200 : 5000), 0);
}

SITE void *site_realloc(void *p, size_t size)
{
    return realloc(p, size);
}

SITE void site_freed(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = malloc(64);
}

typedef struct e2e {
    void **k16, **k3000, **k1m, **kmix, **kedge, **kcalloc, **kalign, **kreal;
    size_t n16, n3000, n1m, nmix, nedge, ncalloc, nalign, nreal;
    char dump[256];
} e2e_t;

static void *e2e_worker(void *arg)
{
    e2e_t *e = arg;
    uint64_t rng = 7;
    e->n16 = 1000000;
    e->k16 = malloc(e->n16 * sizeof(void *));
    site_16(e->k16, e->n16);
    for (size_t i = 0; i < e->n16; i++)
        truth_alloc(&sites[S16].t, e->k16[i]);

    e->n3000 = 10000;
    e->k3000 = malloc(e->n3000 * sizeof(void *));
    site_3000(e->k3000, e->n3000);
    for (size_t i = 0; i < e->n3000; i++)
        truth_alloc(&sites[S3000].t, e->k3000[i]);

    e->n1m = 50;
    e->k1m = malloc(e->n1m * sizeof(void *));
    site_1mib(e->k1m, e->n1m);
    for (size_t i = 0; i < e->n1m; i++)
        truth_alloc(&sites[S1M].t, e->k1m[i]);

    /* Log-uniform sizes 16 B .. 64 KiB on one stack. */
    e->nmix = 40000;
    e->kmix = malloc(e->nmix * sizeof(void *));
    size_t *sizes = malloc(e->nmix * sizeof(size_t));
    for (size_t i = 0; i < e->nmix; i++)
        sizes[i] = (size_t)exp2(4 + 12 * (double)(tu_rand(&rng) % 1000000) / 1e6);
    site_mix(e->kmix, sizes, e->nmix);
    for (size_t i = 0; i < e->nmix; i++)
        truth_alloc(&sites[SMIX].t, e->kmix[i]);

    /* One byte above class boundaries. */
    static const size_t edges[] = {17, 33, 65, 129, 257, 513, 1025, 2049, 4097, 8193, 16385, 32769};
    e->nedge = 24000;
    e->kedge = malloc(e->nedge * sizeof(void *));
    for (size_t i = 0; i < e->nedge; i++)
        sizes[i] = edges[i % MA_ARRAY_LEN(edges)];
    site_edges(e->kedge, sizes, e->nedge);
    for (size_t i = 0; i < e->nedge; i++)
        truth_alloc(&sites[SEDGE].t, e->kedge[i]);
    free(sizes);

    e->ncalloc = 100000;
    e->kcalloc = malloc(e->ncalloc * sizeof(void *));
    site_calloc(e->kcalloc, e->ncalloc);
    for (size_t i = 0; i < e->ncalloc; i++) {
        cr_assert_eq(((char *)e->kcalloc[i])[99], 0);
        truth_alloc(&sites[SCALLOC].t, e->kcalloc[i]);
    }

    e->nalign = 20000;
    e->kalign = malloc(e->nalign * sizeof(void *));
    site_memalign(e->kalign, e->nalign);
    for (size_t i = 0; i < e->nalign; i++) {
        cr_assert_eq((uintptr_t)e->kalign[i] % (i % 2 ? 64 : 4096), 0);
        truth_alloc(&sites[SMEMALIGN].t, e->kalign[i]);
    }

    /* Realloc chains 8 B -> 64 KiB: every call is an allocation event of its
     * new usable size; live is the last of each chain. */
    e->nreal = 3000;
    e->kreal = malloc(e->nreal * sizeof(void *));
    for (size_t i = 0; i < e->nreal; i++) {
        void *p = NULL;
        for (size_t sz = 8; sz <= 65536; sz *= 2) {
            if (p != NULL)
                truth_free(&sites[SREALLOC].t, p);
            p = site_realloc(p, sz + i % 7);
            cr_assert_not_null(p);
            truth_alloc(&sites[SREALLOC].t, p);
        }
        e->kreal[i] = p;
    }

    /* Allocated and freed before the dump: exactly absent from live. */
    size_t nfreed = 100000;
    void **kf = malloc(nfreed * sizeof(void *));
    site_freed(kf, nfreed);
    for (size_t i = 0; i < nfreed; i++) {
        truth_alloc(&sites[SFREED].t, kf[i]);
        truth_free(&sites[SFREED].t, kf[i]);
        free(kf[i]);
    }
    free(kf);

    cr_assert_eq(mallctl("prof.dump", NULL, NULL, &(const char *){e->dump}, sizeof(const char *)), 0);
    return NULL;
}

static site_t *site_of(void *frame)
{
    Dl_info info;
    if (dladdr((char *)frame - 1, &info) == 0 || info.dli_sname == NULL)
        return NULL;
    for (int s = 0; s < NSITES; s++)
        if (strcmp(info.dli_sname, sites[s].name) == 0)
            return &sites[s];
    return NULL;
}

/* Apply the readers' formula (jeprof AdjustSamples / pprof scaleHeapSample)
 * to every record of the dump. Returns the total live bytes it implies. */
static double parse_dump(const char *path, double *total_objs, unsigned *nrecords)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no dump at %s", path);
    char line[1 << 16];
    cr_assert_not_null(fgets(line, sizeof(line), f));
    unsigned long long hn, hb, han, hab, R;
    cr_assert_eq(sscanf(line, "heap profile: %llu: %llu [ %llu: %llu] @ heap_v2/%llu", &hn, &hb, &han, &hab, &R), 5,
                 "bad header: %s", line);
    cr_assert_eq(R, 1ull << E2E_LG);
    unsigned long long sn = 0, sb = 0, san = 0, sab = 0;
    double total = 0;
    *total_objs = 0;
    *nrecords = 0;
    while (fgets(line, sizeof(line), f) != NULL && line[0] != '\n') {
        if (strncmp(line, "# myalloc resident=", 19) == 0) /* residency, see prof_dump.c */
            continue;
        unsigned long long n, b, an, ab;
        int off = 0;
        cr_assert_eq(sscanf(line, "%llu: %llu [%llu: %llu] @%n", &n, &b, &an, &ab, &off), 4, "bad record: %s", line);
        sn += n, sb += b, san += an, sab += ab;
        (*nrecords)++;
        void *frame0 = (void *)strtoull(line + off, NULL, 16);
        cr_assert(strstr(line, "0X") == NULL, "addresses must be lowercase");
        site_t *s = site_of(frame0);
        if (n > 0) {
            double scale = 1 / -expm1(-((double)b / n) / R);
            total += b * scale;
            *total_objs += n * scale;
            if (s != NULL) {
                s->est_live_bytes += b * scale;
                s->est_live_objs += n * scale;
                s->raw_live += n;
            }
        }
        if (an > 0 && s != NULL) {
            double scale = 1 / -expm1(-((double)ab / an) / R);
            s->est_acc_bytes += ab * scale;
            s->est_acc_objs += an * scale;
        }
    }
    cr_assert_str_eq(fgets(line, sizeof(line), f), "MAPPED_LIBRARIES:\n");
    fclose(f);
    cr_assert(sn == hn && sb == hb && san == han && sab == hab, "header totals must be the sums of the records");
    return total;
}

static void check_estimate(const char *site, const char *what, double est, double truth, double var)
{
    double sd = sqrt(fmax(var, 0));
    cr_assert_leq(fabs(est - truth), 6 * sd + 1e-6 * truth + 1e-6,
                  "%s %s: estimate %.1f, truth %.1f, sd %.1f (%.2f sigma)", site, what, est, truth, sd,
                  sd > 0 ? fabs(est - truth) / sd : INFINITY);
}

Test(prof_stats, end_to_end_sites_match_the_truth_through_a_real_dump, .timeout = 300)
{
    static e2e_t e;
    snprintf(e.dump, sizeof(e.dump), "/tmp/myalloc-test-e2e.%d.heap", (int)getpid());
    prof_start(E2E_LG, 2024, true);
    in_thread(e2e_worker, &e);
    double objs;
    unsigned nrec;
    double total = parse_dump(e.dump, &objs, &nrec);
    for (int s = 0; s < NSITES; s++) {
        site_t *x = &sites[s];
        check_estimate(x->name, "live bytes", x->est_live_bytes, x->t.live_bytes, x->t.var_live_bytes);
        check_estimate(x->name, "live objects", x->est_live_objs, x->t.live_objs, x->t.var_live_objs);
        check_estimate(x->name, "cumulative bytes", x->est_acc_bytes, x->t.acc_bytes, x->t.var_acc_bytes);
        check_estimate(x->name, "cumulative objects", x->est_acc_objs, x->t.acc_objs, x->t.var_acc_objs);
    }
    cr_assert_eq(sites[SFREED].raw_live, 0, "freed objects must be exactly absent from live");
    cr_assert_gt(sites[SFREED].est_acc_objs, 0, "freed objects still count as cumulative");
    /* The in-process totals are the same sums (no rounding anywhere). */
    prof_totals_t t;
    prof_totals_get(&t);
    cr_assert_leq(fabs(t.live_bytes - total), 1e-9 * total + 1, "in-process %.1f, dump %.1f", t.live_bytes, total);
    cr_assert_leq(fabs(t.live_objects - objs), 1e-9 * objs + 1);
    unlink(e.dump);
}

/* ---------------------------------------------------------------------
 * The standard readers agree with our totals.
 */

typedef struct reader_run {
    char dump[256];
    void **keep;
    size_t n;
} reader_run_t;

static void *reader_worker(void *arg)
{
    reader_run_t *r = arg;
    r->n = 200000;
    r->keep = malloc(r->n * sizeof(void *));
    site_16(r->keep, r->n / 2);
    site_3000(r->keep + r->n / 2, r->n / 20);
    site_1mib(r->keep + r->n / 2 + r->n / 20, 20);
    cr_assert_eq(mallctl("prof.dump", NULL, NULL, &(const char *){r->dump}, sizeof(const char *)), 0);
    return NULL;
}

static bool have(const char *tool)
{
    char cmd[256], out[256];
    snprintf(cmd, sizeof(cmd), "command -v %s", tool);
    return tu_run(cmd, out, sizeof(out)) == 0;
}

Test(prof_stats, jeprof_and_pprof_totals_equal_ours, .timeout = 300)
{
    if (!have("jeprof") || !have("go"))
        cr_skip_test("jeprof (libjemalloc-dev) or go (golang-go) not installed");
    static reader_run_t r;
    snprintf(r.dump, sizeof(r.dump), "/tmp/myalloc-test-readers.%d.heap", (int)getpid());
    prof_start(14, 99, false);
    in_thread(reader_worker, &r);
    prof_totals_t t;
    prof_totals_get(&t);
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    cr_assert_gt(n, 0);
    exe[n] = '\0';
    char cmd[8192], out[1 << 16];

    snprintf(cmd, sizeof(cmd), "jeprof --text --show_bytes %s %s 2>/dev/null | grep '^Total:'", exe, r.dump);
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "jeprof failed: %s", out);
    double jb = 0;
    cr_assert_eq(sscanf(out, "Total: %lf B", &jb), 1, "jeprof: %s", out);
    snprintf(cmd, sizeof(cmd), "jeprof --text --inuse_objects %s %s 2>/dev/null | grep '^Total:'", exe, r.dump);
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "jeprof failed: %s", out);
    double jo = 0;
    cr_assert_eq(sscanf(out, "Total: %lf objects", &jo), 1, "jeprof: %s", out);
    cr_assert_leq(fabs(jb - t.live_bytes), 2, "jeprof total bytes %.0f, ours %.1f", jb, t.live_bytes);
    cr_assert_leq(fabs(jo - t.live_objects), 2, "jeprof total objects %.0f, ours %.1f", jo, t.live_objects);

    /* go tool pprof: sum the per-sample values it prints (it truncates
     * each record's scaled values to integers). */
    snprintf(cmd, sizeof(cmd),
             "HOME=${HOME:-/tmp} go tool pprof -raw %s %s 2>/dev/null | "
             "awk '/^Samples:/{s=1;next} /^Locations/{s=0} s && $2 ~ /:$/ {o+=$1; sub(\":\",\"\",$2); b+=$2; k++} "
             "END {printf \"%%d %%d %%d\\n\", o, b, k}'",
             exe, r.dump);
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "pprof failed: %s", out);
    double po, pb, pk;
    cr_assert_eq(sscanf(out, "%lf %lf %lf", &po, &pb, &pk), 3, "pprof: %s", out);
    cr_assert_gt(pk, 0, "pprof printed no samples");
    cr_assert(pb <= t.live_bytes + 1e-6 && pb >= t.live_bytes - pk, "pprof bytes %.0f, ours %.1f (%.0f records)",
              pb, t.live_bytes, pk);
    cr_assert(po <= t.live_objects + 1e-6 && po >= t.live_objects - pk, "pprof objects %.0f, ours %.1f", po,
              t.live_objects);
    unlink(r.dump);
}
