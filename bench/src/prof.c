/*
 * prof: the workloads of `make bench-prof` (the heap profiler's cost).
 *
 *   prof pairs N MIN MAX    N malloc+free pairs of random sizes in [MIN, MAX]
 *   prof live N SIZE        hold N live objects of SIZE bytes; memory per object
 *
 * The allocator under test and its profiler settings come from the
 * environment (LD_PRELOAD, MYALLOC_CONF / MALLOC_CONF); the program is the
 * same for every configuration. Its allocator is asked through mallctl
 * (looked up with dlsym, so it also runs without one) for:
 *
 *   samples  myalloc: "prof.nsamples" (and "prof.nskipped");
 *            jemalloc: the sum of the "prof.stats.bins.<i>.accum" and
 *            "prof.stats.lextents.<i>.accum" counts, only when it runs
 *            with prof_stats:true (which costs a little itself, so the
 *            timed runs leave it off and bench/prof.py counts in a run of
 *            its own);
 *   stats    stats.allocated / active / metadata / resident / mapped
 *            (after writing "epoch", as jemalloc requires).
 *
 * pairs: a size table (usable size of every request size in [MIN, MAX]),
 * N/10 warm-up pairs, then N timed pairs: s = random in [MIN, MAX],
 * p = malloc(s), write the first and last byte, read them back into a
 * checksum, free(p). The size sequence is the same in every run (fixed
 * seed). Extra RESULT keys:
 *   usable_bytes   sum of the usable sizes allocated in the timed loop
 *   usable_sq      sum of their squares (for the expected number of
 *                  samples, sum of 1 - exp(-Z/R) = B/R - Q/(2R^2) + ...)
 *   nsamples       samples taken during the timed loop (-1: unknown)
 *   nskipped       myalloc: samples it could not record (-1: unknown)
 *
 * live: 64 warm-up objects (first sample, stack table, first chunk), a
 * snapshot, then N objects of SIZE bytes allocated in the timed region and
 * kept, each written at both ends, another snapshot; then all are checked
 * and freed. Extra RESULT keys, differences between the two snapshots:
 *   d_rss          resident set (/proc/self/statm), bytes
 *   d_allocated, d_active, d_metadata, d_resident, d_mapped   mallctl stats
 *                  (absent when the allocator has no mallctl)
 *   nsamples       samples taken (-1: unknown)
 * ops = N.
 */
#include "bench.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>

static const char usage[] = "prof pairs N MIN MAX | prof live N SIZE";

typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);
static mallctl_fn ctl;

static bool ctl_u64(const char *name, uint64_t *v)
{
    size_t len = sizeof(*v);
    return ctl != NULL && ctl(name, v, &len, NULL, 0) == 0 && len == sizeof(*v);
}

static bool ctl_size(const char *name, size_t *v)
{
    size_t len = sizeof(*v);
    return ctl != NULL && ctl(name, v, &len, NULL, 0) == 0 && len == sizeof(*v);
}

static bool ctl_bool(const char *name, bool *v)
{
    size_t len = sizeof(*v);
    return ctl != NULL && ctl(name, v, &len, NULL, 0) == 0 && len == sizeof(*v);
}

/* jemalloc's prof_stats_t: {req_sum, count}. */
typedef struct {
    uint64_t req_sum, count;
} je_prof_stats_t;

static uint64_t je_accum_sum(const char *kind, const char *nname)
{
    unsigned n = 0;
    size_t len = sizeof(n);
    uint64_t sum = 0;
    if (ctl(nname, &n, &len, NULL, 0) != 0)
        return 0;
    for (unsigned i = 0; i < n; i++) {
        char name[64];
        je_prof_stats_t st;
        len = sizeof(st);
        snprintf(name, sizeof(name), "prof.stats.%s.%u.accum", kind, i);
        if (ctl(name, &st, &len, NULL, 0) == 0)
            sum += st.count;
    }
    return sum;
}

/* Samples taken so far, or -1 when the allocator does not tell. */
static double samples_now(void)
{
    uint64_t v;
    bool on;
    if (ctl_u64("prof.nsamples", &v))
        return (double)v;
    if (ctl_bool("opt.prof_stats", &on) && on)
        return (double)(je_accum_sum("bins", "arenas.nbins") +
                        je_accum_sum("lextents", "arenas.nlextents"));
    return -1;
}

/* What the allocator says its profiler settings are, so that the driver
 * can check that the options took effect: " opt_prof=0|1 lg_sample=N",
 * or nothing without a mallctl that knows them. */
static void conf_keys(char *buf, size_t len)
{
    bool on;
    size_t lg;
    buf[0] = '\0';
    if (ctl_bool("opt.prof", &on)) {
        int k = snprintf(buf, len, " opt_prof=%d", on ? 1 : 0);
        if (on && ctl_size("prof.lg_sample", &lg))
            snprintf(buf + k, len - (size_t)k, " lg_sample=%zu", lg);
    }
}

static double skipped_now(void)
{
    uint64_t v;
    return ctl_u64("prof.nskipped", &v) ? (double)v : -1;
}

/* ---- pairs --------------------------------------------------------------- */

#define SEED 0x5eed1234abcdull

static BENCH_NOINLINE uint64_t run_pairs(long n, size_t lo, size_t hi, uint64_t seed)
{
    uint64_t rng = seed, sum = 0;
    for (long i = 0; i < n; i++) {
        size_t s = rng_range(&rng, lo, hi);
        unsigned char *p = malloc(s);
        if (p == NULL)
            bench_fail("malloc(%zu) returned NULL", s);
        p[0] = (unsigned char)i;
        p[s - 1] = (unsigned char)(i >> 8);
        __asm__ volatile("" ::: "memory");
        sum += p[0] + p[s - 1];
        free(p);
    }
    return sum;
}

static int pairs_main(long n, size_t lo, size_t hi)
{
    if (lo < 2 || hi < lo || hi > (1u << 20))
        bench_usage("prof pairs: need 2 <= MIN <= MAX <= 1 MiB");
    size_t *usable = hmem((hi + 1) * sizeof(size_t));
    for (size_t s = lo; s <= hi; s++) {
        void *p = malloc(s);
        if (p == NULL)
            bench_fail("malloc(%zu) returned NULL", s);
        usable[s] = malloc_usable_size(p);
        if (usable[s] < s)
            bench_fail("malloc_usable_size(malloc(%zu)) = %zu", s, usable[s]);
        free(p);
    }
    long warm = n / 10 + 1;
    run_pairs(warm, lo, hi, SEED ^ 1);

    double s0 = samples_now(), k0 = skipped_now();
    bstamp_t a, b;
    bstamp(&a);
    uint64_t sum = run_pairs(n, lo, hi, SEED);
    bstamp(&b);
    double s1 = samples_now(), k1 = skipped_now();

    /* Replay the size sequence: the checksum and the bytes allocated. */
    uint64_t rng = SEED, want = 0;
    double bytes = 0, sq = 0;
    for (long i = 0; i < n; i++) {
        size_t s = rng_range(&rng, lo, hi);
        want += (unsigned char)i + (unsigned char)(i >> 8);
        bytes += (double)usable[s];
        sq += (double)usable[s] * (double)usable[s];
    }
    if (sum != want)
        bench_fail("checksum mismatch");
    char extra[256], conf[64];
    conf_keys(conf, sizeof(conf));
    snprintf(extra, sizeof(extra), "usable_bytes=%.0f usable_sq=%.0f nsamples=%.0f nskipped=%.0f%s",
             bytes, sq, s0 < 0 ? -1 : s1 - s0, k0 < 0 ? -1 : k1 - k0, conf);
    bench_report((double)n, &a, &b, extra);
    return 0;
}

/* ---- live ---------------------------------------------------------------- */

typedef struct {
    double rss, allocated, active, metadata, resident, mapped, samples;
    bool have_stats;
} snap_t;

/* Resident set in bytes, read without stdio: fopen would allocate from the
 * allocator under test (and be sampled) in the middle of the measurement. */
static double rss_bytes(void)
{
    char buf[128];
    long size = 0, res = 0;
    int fd = open("/proc/self/statm", O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
    if (fd >= 0)
        close(fd);
    if (n <= 0 || (buf[n] = '\0', sscanf(buf, "%ld %ld", &size, &res)) != 2) {
        perror("/proc/self/statm");
        exit(2);
    }
    return (double)res * (double)sysconf(_SC_PAGESIZE);
}

static void snapshot(snap_t *s)
{
    uint64_t epoch = 1;
    size_t v;
    memset(s, 0, sizeof(*s));
    if (ctl != NULL)
        ctl("epoch", NULL, NULL, &epoch, sizeof(epoch));
    s->have_stats = ctl_size("stats.active", &v);
    if (s->have_stats) {
        s->active = (double)v;
        s->allocated = ctl_size("stats.allocated", &v) ? (double)v : 0;
        s->metadata = ctl_size("stats.metadata", &v) ? (double)v : 0;
        s->resident = ctl_size("stats.resident", &v) ? (double)v : 0;
        s->mapped = ctl_size("stats.mapped", &v) ? (double)v : 0;
    }
    s->samples = samples_now();
    s->rss = rss_bytes(); /* last: the calls above may touch memory */
}

#define LIVE_WARM 64

static int live_main(long n, size_t size)
{
    if (size < 8)
        bench_usage("prof live: need SIZE >= 8");
    unsigned char **objs = hmem((size_t)(n + LIVE_WARM) * sizeof(*objs));
    memset(objs, 0, (size_t)(n + LIVE_WARM) * sizeof(*objs)); /* resident before s0 */
    for (long i = 0; i < LIVE_WARM; i++)
        if ((objs[n + i] = malloc(size)) == NULL)
            bench_fail("malloc(%zu) returned NULL", size);
    snap_t s0, s1;
    snapshot(&s0);
    bstamp_t a, b;
    bstamp(&a);
    for (long i = 0; i < n; i++) {
        unsigned char *p = malloc(size);
        if (p == NULL)
            bench_fail("malloc(%zu) returned NULL", size);
        uint32_t tag = (uint32_t)i;
        memcpy(p, &tag, 4);
        memcpy(p + size - 4, &tag, 4);
        objs[i] = p;
    }
    bstamp(&b);
    snapshot(&s1);
    for (long i = 0; i < n; i++) {
        uint32_t t1, t2;
        memcpy(&t1, objs[i], 4);
        memcpy(&t2, objs[i] + size - 4, 4);
        if (t1 != (uint32_t)i || t2 != (uint32_t)i)
            bench_fail("object %ld (%p) was overwritten", i, (void *)objs[i]);
    }
    for (long i = 0; i < n + LIVE_WARM; i++)
        free(objs[i]);
    char extra[512], conf[64];
    conf_keys(conf, sizeof(conf));
    int len = snprintf(extra, sizeof(extra), "d_rss=%.0f nsamples=%.0f%s", s1.rss - s0.rss,
                       s0.samples < 0 ? -1 : s1.samples - s0.samples, conf);
    if (s0.have_stats)
        snprintf(extra + len, sizeof(extra) - (size_t)len,
                 " d_allocated=%.0f d_active=%.0f d_metadata=%.0f d_resident=%.0f d_mapped=%.0f",
                 s1.allocated - s0.allocated, s1.active - s0.active, s1.metadata - s0.metadata,
                 s1.resident - s0.resident, s1.mapped - s0.mapped);
    bench_report((double)n, &a, &b, extra);
    return 0;
}

int main(int argc, char **argv)
{
    ctl = (mallctl_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "mallctl");
    if (argc == 5 && strcmp(argv[1], "pairs") == 0)
        return pairs_main(bench_arg(argv[2], usage), (size_t)bench_arg(argv[3], usage),
                          (size_t)bench_arg(argv[4], usage));
    if (argc == 4 && strcmp(argv[1], "live") == 0)
        return live_main(bench_arg(argv[2], usage), (size_t)bench_arg(argv[3], usage));
    bench_usage(usage);
}
