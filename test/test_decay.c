/*
 * Giving memory back: decay-based purging, explicit purges, retain, thp,
 * the background thread, thread caches that let go, malloc_trim, the
 * fullest-slab-first fill order, and free pages inside slabs in use.
 *
 * Most tests run in the test process (each Criterion test has a process of
 * its own) and set the decay times of their thread's arena with mallctl
 * (arena.<i>.dirty_decay_ms / muzzy_decay_ms); options that only take
 * effect at startup (retain, thp, background_thread) run in
 * helpers/decay_probe under LD_PRELOAD with MYALLOC_CONF.
 *
 * Memory is measured as RSS from /proc/self/statm (read with read(2), so
 * that measuring allocates nothing) relative to a baseline taken just
 * before the test allocates. Nothing is asserted about time except
 * generous upper bounds on how long decay may take; the shape of the decay
 * curve is checked with a made-up clock (decay_advance, extent_decay on a
 * private pool).
 *
 * Page sizes are never assumed: PAGE is the build's page, the OS page
 * comes from sysconf.
 */
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

#include "arena/arena.h"
#include "arena/decay.h"
#include "arena/extent.h"
#include "sizeclass/sizeclass.h"
#include "myalloc.h"
#include "tcache/tcache.h"
#include "test_util.h"
#include "test_slab_util.h"

#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)
#define ALL MALLCTL_ARENAS_ALL

/* Slack on top of the decay times for "has it been purged by now" (a busy
 * 2-core machine can deschedule the test for a while). */
#define DECAY_SLACK_MS 5000

/* Several arenas whatever the machine (the default is 4 per CPU): some
 * tests need an arena of their own or objects of another arena. */
const char *malloc_conf = "narenas:4";

static void init_allocator(void) { free(malloc(1)); }

TestSuite(decay, .init = init_allocator, .timeout = 120);
TestSuite(decay_curve, .init = init_allocator, .timeout = 60);

/* ---------------------------------------------------------------------
 * Measuring without allocating.
 */

/* Field k of /proc/self/statm (0: size, 1: resident), in bytes. */
static size_t statm_field(int k)
{
    char buf[256];
    int fd = open("/proc/self/statm", O_RDONLY);
    cr_assert_geq(fd, 0);
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    cr_assert_gt(n, 0);
    buf[n] = '\0';
    char *s = buf;
    for (int i = 0; i < k; i++) {
        while (*s && *s != ' ')
            s++;
        while (*s == ' ')
            s++;
    }
    return (size_t)strtoull(s, NULL, 10) * (size_t)sysconf(_SC_PAGESIZE);
}

static size_t rss_now(void) { return statm_field(1); }

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static double mib(size_t b) { return (double)b / (double)MIB; }

/* ---------------------------------------------------------------------
 * mallctl.
 */

static void new_epoch(void)
{
    uint64_t e = 1;
    cr_assert_eq(mallctl("epoch", NULL, NULL, &e, sizeof(e)), 0);
}

static size_t ctl_size(const char *name)
{
    size_t v = 0, sz = sizeof(v);
    new_epoch();
    cr_assert_eq(mallctl(name, &v, &sz, NULL, 0), 0, "mallctl(%s)", name);
    return v;
}

static ssize_t ctl_ssize(const char *name)
{
    ssize_t v = 0;
    size_t sz = sizeof(v);
    cr_assert_eq(mallctl(name, &v, &sz, NULL, 0), 0, "mallctl(%s)", name);
    return v;
}

static uint64_t ctl_u64(const char *name)
{
    uint64_t v = 0;
    size_t sz = sizeof(v);
    new_epoch();
    cr_assert_eq(mallctl(name, &v, &sz, NULL, 0), 0, "mallctl(%s)", name);
    return v;
}

static void ctl_do(const char *fmt, size_t arena)
{
    char name[96];
    snprintf(name, sizeof(name), fmt, arena);
    cr_assert_eq(mallctl(name, NULL, NULL, NULL, 0), 0, "mallctl(%s)", name);
}

static size_t astat(unsigned a, const char *field)
{
    char name[96];
    snprintf(name, sizeof(name), "stats.arenas.%u.%s", a, field);
    return ctl_size(name);
}

static uint64_t astat64(unsigned a, const char *field)
{
    char name[96];
    snprintf(name, sizeof(name), "stats.arenas.%u.%s", a, field);
    return ctl_u64(name);
}

static size_t bin_curregs(unsigned a, unsigned bin)
{
    char name[96];
    snprintf(name, sizeof(name), "stats.arenas.%u.bins.%u.curregs", a, bin);
    return ctl_size(name);
}

static unsigned my_arena(void)
{
    unsigned a = 0;
    size_t sz = sizeof(a);
    cr_assert_eq(mallctl("thread.arena", &a, &sz, NULL, 0), 0);
    return a;
}

static unsigned arena_nthreads(unsigned a)
{
    char name[96];
    unsigned v = 0;
    size_t sz = sizeof(v);
    snprintf(name, sizeof(name), "stats.arenas.%u.nthreads", a);
    new_epoch();
    if (mallctl(name, &v, &sz, NULL, 0) != 0)
        return 0; /* not created yet */
    return v;
}

static void set_thread_arena(unsigned a)
{
    cr_assert_eq(mallctl("thread.arena", NULL, NULL, &a, sizeof(a)), 0, "thread.arena = %u", a);
}

static void set_decay(unsigned a, ssize_t dirty_ms, ssize_t muzzy_ms)
{
    char name[96];
    snprintf(name, sizeof(name), "arena.%u.dirty_decay_ms", a);
    cr_assert_eq(mallctl(name, NULL, NULL, &dirty_ms, sizeof(dirty_ms)), 0, "%s", name);
    snprintf(name, sizeof(name), "arena.%u.muzzy_decay_ms", a);
    cr_assert_eq(mallctl(name, NULL, NULL, &muzzy_ms, sizeof(muzzy_ms)), 0, "%s", name);
}

static void set_hold(unsigned a, ssize_t ms)
{
    char name[96];
    snprintf(name, sizeof(name), "arena.%u.dirty_hold_ms", a);
    cr_assert_eq(mallctl(name, NULL, NULL, &ms, sizeof(ms)), 0, "%s", name);
}

/* The byte ticker runs purging every ~1 MiB a thread allocates: this
 * allocates (and frees) bytes in 1 KiB objects, which the thread cache
 * serves, so it adds no memory of its own. */
static void tick(size_t bytes)
{
    for (size_t i = 0; i < bytes / 1024; i++) {
        void *volatile p = malloc(1024);
        free(p);
    }
}

/* ---------------------------------------------------------------------
 * A heap of mixed objects: half the bytes in small ones (log-uniform
 * 16 B .. 8 KiB), half in large ones (log-uniform 16 KiB .. 4 MiB), every
 * byte written. Bookkeeping lives in mmap'd memory, touched before the
 * baseline is taken.
 */

typedef struct {
    void **ps;
    size_t *sizes;
    size_t n, cap, bytes;
    size_t rss0;      /* RSS before allocating */
    size_t map_bytes;
    uint64_t seed;
} heap_t;

static size_t loguniform(uint64_t *seed, double lo, double hi)
{
    double u = (double)(tu_rand(seed) >> 11) / 9007199254740992.0;
    return (size_t)(lo * exp2(u * log2(hi / lo)));
}

static void heap_init(heap_t *h, size_t total, uint64_t seed)
{
    memset(h, 0, sizeof(*h));
    h->cap = total / 1024 + 4096;
    h->map_bytes = h->cap * (sizeof(void *) + sizeof(size_t));
    char *m = mmap(NULL, h->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(m, MAP_FAILED);
    memset(m, 0, h->map_bytes);
    h->ps = (void **)m;
    h->sizes = (size_t *)(m + h->cap * sizeof(void *));
    h->seed = seed;
}

/* Allocate total bytes; pattern: fill with tu_fill (checkable) rather
 * than memset. */
static void heap_alloc(heap_t *h, size_t total, bool pattern, bool zeroed)
{
    h->rss0 = rss_now();
    size_t small = 0, large = 0;
    while (h->bytes < total && h->n < h->cap) {
        bool is_small = small <= large;
        size_t s = is_small ? loguniform(&h->seed, 16, 8192) : loguniform(&h->seed, 16384, 4 << 20);
        char *p = zeroed ? calloc(1, s) : malloc(s);
        cr_assert_not_null(p, "%s(%zu)", zeroed ? "calloc" : "malloc", s);
        if (zeroed) {
            for (size_t i = 0; i < s; i++)
                if (p[i] != 0)
                    cr_assert_fail("calloc(1, %zu) = %p: byte %zu is %#x, not 0", s, (void *)p, i,
                                   (unsigned char)p[i]);
        }
        if (pattern)
            tu_fill(p, s);
        else
            memset(p, 0x5a, s);
        h->ps[h->n] = p;
        h->sizes[h->n] = s;
        h->n++;
        h->bytes += s;
        *(is_small ? &small : &large) += s;
    }
}

static void heap_shuffle(heap_t *h)
{
    for (size_t i = h->n - 1; i > 0; i--) {
        size_t j = (size_t)(tu_rand(&h->seed) % (i + 1));
        void *t = h->ps[i];
        size_t ts = h->sizes[i];
        h->ps[i] = h->ps[j];
        h->sizes[i] = h->sizes[j];
        h->ps[j] = t;
        h->sizes[j] = ts;
    }
}

/* Free every object (in random order) except those with index % keep_every
 * == 0 when keep_every != 0; those move to the front. Returns the bytes
 * freed. */
static size_t heap_free(heap_t *h, size_t keep_every)
{
    heap_shuffle(h);
    size_t kept = 0, freed = 0;
    for (size_t i = 0; i < h->n; i++) {
        if (keep_every != 0 && i % keep_every == 0) {
            h->ps[kept] = h->ps[i];
            h->sizes[kept] = h->sizes[i];
            kept++;
            continue;
        }
        free(h->ps[i]);
        freed += h->sizes[i];
    }
    h->n = kept;
    h->bytes -= freed;
    return freed;
}

static void heap_destroy(heap_t *h)
{
    for (size_t i = 0; i < h->n; i++)
        free(h->ps[i]);
    munmap(h->ps, h->map_bytes);
    h->n = 0;
}

/* ---------------------------------------------------------------------
 * Explicit purge, decay -1, decay on, decay 0, muzzy.
 */

/*
 * Freeing 1 GiB and then arena.<all>.purge: RSS drops below 10% of the
 * GiB. The arena's dirty decay is -1 first, so that this purge is the only
 * thing that purges. Also: the purge statistics move (dirty_npurge,
 * dirty_nmadvise, dirty_purged; pdirty back to 0), stats.retained grows by
 * what was purged, and stats.resident tracks RSS.
 *
 * stats.resident's bound: the allocator's resident memory is part of RSS,
 * and RSS also holds what is not the allocator's (program, libraries,
 * stacks, the test's mmap'd bookkeeping), which this test does not change.
 * So, after the purge: stats.resident <= RSS + 16 MiB (stats.resident
 * counts metadata by an estimate, and active pages whether touched or
 * not), and RSS - stats.resident <= (RSS - stats.resident before the test
 * allocated) + 16 MiB (the allocator hides no memory from its own count);
 * and while the GiB is live, the two grew by the same amount within 5% of
 * it.
 */
Test(decay, purge_all_gives_back_a_freed_gib)
{
    unsigned a = my_arena();
    set_decay(a, -1, -1);
    heap_t h;
    heap_init(&h, GIB, 1);
    size_t res0 = ctl_size("stats.resident");
    heap_alloc(&h, GIB, false, false);
    size_t rss1 = rss_now(), res1 = ctl_size("stats.resident");
    cr_assert_geq(rss1, h.rss0 + GIB * 9 / 10, "allocating 1 GiB: RSS %.0f -> %.0f MiB", mib(h.rss0), mib(rss1));
    double drss = (double)rss1 - (double)h.rss0, dres = (double)res1 - (double)res0;
    cr_assert(fabs(drss - dres) <= 0.05 * (double)GIB,
              "with 1 GiB live, RSS grew %.0f MiB and stats.resident %.0f MiB", drss / MIB, dres / MIB);

    uint64_t npurge0 = astat64(a, "dirty_npurge"), nmadv0 = astat64(a, "dirty_nmadvise"),
             purged0 = astat64(a, "dirty_purged");
    size_t retained0 = ctl_size("stats.retained");
    size_t freed = heap_free(&h, 0);
    size_t rss2 = rss_now();
    cr_assert_geq(rss2, h.rss0 + freed * 8 / 10, "decay -1: freeing alone must not purge (RSS %.0f MiB)",
                  mib(rss2 - h.rss0));
    /* Freed, not purged: still resident, and stats.resident says so. */
    size_t res2 = ctl_size("stats.resident");
    drss = (double)rss2 - (double)h.rss0;
    dres = (double)res2 - (double)res0;
    cr_assert(fabs(drss - dres) <= 0.05 * (double)GIB,
              "freed but not purged: RSS %.0f MiB and stats.resident %.0f MiB over the start", drss / MIB, dres / MIB);

    ctl_do("arena.%zu.purge", ALL);
    size_t rss3 = rss_now();
    cr_log_info("purge: RSS %.1f MiB over the baseline after freeing 1 GiB (was %.1f)", mib(rss3 - h.rss0),
                mib(rss2 - h.rss0));
    cr_assert_lt(rss3, h.rss0 + GIB / 10, "after arena.<all>.purge RSS is %.1f MiB over the baseline (limit %.1f)",
                 mib(rss3 - h.rss0), mib(GIB / 10));

    /* The statistics. */
    cr_assert_eq(astat(a, "pdirty"), 0, "pdirty after purge");
    cr_assert_gt(astat64(a, "dirty_npurge"), npurge0, "dirty_npurge did not move");
    cr_assert_gt(astat64(a, "dirty_nmadvise"), nmadv0, "dirty_nmadvise did not move");
    uint64_t purged = astat64(a, "dirty_purged") - purged0;
    cr_assert_geq(purged * PAGE, freed * 8 / 10, "dirty_purged grew by %llu pages for %zu bytes freed",
                  (unsigned long long)purged, freed);
    size_t retained = ctl_size("stats.retained");
    cr_assert_geq(retained, retained0 + freed * 8 / 10, "stats.retained %.0f -> %.0f MiB", mib(retained0),
                  mib(retained));

    /* stats.resident against RSS (see above). */
    size_t res3 = ctl_size("stats.resident");
    rss3 = rss_now();
    cr_assert_leq(res3, rss3 + 16 * MIB, "after purge: stats.resident %.1f MiB, RSS %.1f MiB", mib(res3),
                  mib(rss3));
    cr_assert_leq((double)rss3 - (double)res3, (double)h.rss0 - (double)res0 + 16.0 * MIB,
                  "after purge RSS - stats.resident = %.1f MiB, before the test %.1f MiB",
                  ((double)rss3 - (double)res3) / MIB, ((double)h.rss0 - (double)res0) / MIB);
    heap_destroy(&h);
}

/* dirty_decay_ms -1: nothing is purged however long the program keeps
 * allocating (the ticker runs ~every MiB), and the pages stay resident. */
Test(decay, minus_one_never_purges)
{
    unsigned a = my_arena();
    set_decay(a, -1, -1);
    heap_t h;
    heap_init(&h, GIB, 2);
    heap_alloc(&h, GIB, false, false);
    size_t freed = heap_free(&h, 0);
    /* Objects in the thread cache are not free yet as far as the pages are
     * concerned: flush, so that all the freed bytes reach the page level. */
    cr_assert_eq(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    uint64_t npurge0 = astat64(a, "dirty_npurge"), mpurge0 = astat64(a, "muzzy_npurge");
    size_t pdirty0 = astat(a, "pdirty");
    cr_assert_geq(pdirty0 * PAGE, freed * 8 / 10);
    /* Longer than the default decay time (250 ms): this waits 1.5 s, ticking all along. */
    uint64_t t0 = now_ms();
    while (now_ms() - t0 < 1500) {
        tick(MIB);
        sleep_ms(2);
    }
    ctl_do("arena.%zu.decay", a);
    size_t rss = rss_now();
    cr_assert_eq(astat64(a, "dirty_npurge"), npurge0, "decay -1 purged dirty pages");
    cr_assert_eq(astat64(a, "muzzy_npurge"), mpurge0, "decay -1 purged muzzy pages");
    /* (The ticks' own allocations may reuse a few dirty pages.) */
    cr_assert_geq(astat(a, "pdirty") * PAGE + 4 * MIB, pdirty0 * PAGE, "pdirty %zu -> %zu pages with decay -1",
                  pdirty0, astat(a, "pdirty"));
    cr_assert_geq(rss, h.rss0 + freed * 8 / 10, "RSS %.0f MiB over the baseline after freeing %.0f MiB",
                  mib(rss - h.rss0), mib(freed));
    heap_destroy(&h);
}

/* Keep the ticker running (1 MiB allocated per round) until RSS is within
 * limit bytes over base, or deadline_ms passes. Returns the ms it took, or
 * -1. Also records the largest pmuzzy of arena a seen on the way. */
static long tick_until_rss_below(size_t base, size_t limit, uint64_t deadline_ms, unsigned a, size_t *max_pmuzzy)
{
    uint64_t t0 = now_ms();
    for (;;) {
        if (max_pmuzzy != NULL) {
            size_t m = astat(a, "pmuzzy");
            if (m > *max_pmuzzy)
                *max_pmuzzy = m;
        }
        size_t rss = rss_now();
        if (rss < base + limit && (max_pmuzzy == NULL || astat(a, "pmuzzy") == 0))
            return (long)(now_ms() - t0);
        if (now_ms() - t0 > deadline_ms)
            return -1;
        tick(MIB);
        sleep_ms(2);
    }
}

/* Decay on (dirty 1000 ms, muzzy 0): a freed GiB goes back
 * to the OS within the decay time plus slack, purged by the ticker of a
 * thread that keeps allocating a little. */
Test(decay, a_freed_gib_decays_within_the_decay_time)
{
    unsigned a = my_arena();
    const ssize_t dirty_ms = 1000;
    set_decay(a, dirty_ms, 0);
    heap_t h;
    heap_init(&h, GIB, 3);
    heap_alloc(&h, GIB, false, false);
    uint64_t npurge0 = astat64(a, "dirty_npurge"), purged0 = astat64(a, "dirty_purged");
    size_t retained0 = ctl_size("stats.retained");
    size_t freed = heap_free(&h, 0);
    size_t rss_freed = rss_now();
    long ms = tick_until_rss_below(h.rss0, GIB / 10, (uint64_t)dirty_ms + DECAY_SLACK_MS, a, NULL);
    size_t rss = rss_now();
    cr_log_info("decay %zd ms: RSS back within 10%% of 1 GiB after %ld ms (from %.0f to %.0f MiB over the baseline)",
                dirty_ms, ms, mib(rss_freed - h.rss0), mib(rss - h.rss0));
    cr_assert_geq(ms, 0, "dirty_decay_ms %zd: RSS still %.0f MiB over the baseline %d ms after freeing 1 GiB",
                  dirty_ms, mib(rss - h.rss0), (int)dirty_ms + DECAY_SLACK_MS);
    cr_assert_gt(astat64(a, "dirty_npurge"), npurge0);
    cr_assert_geq((astat64(a, "dirty_purged") - purged0) * PAGE, freed * 8 / 10);
    cr_assert_geq(ctl_size("stats.retained"), retained0 + freed * 8 / 10);
    heap_destroy(&h);
}

/* dirty_decay_ms:N,muzzy_decay_ms:M: freed pages go muzzy (MADV_FREE;
 * pmuzzy > 0 on the way, the dirty counters move), then to retained
 * (MADV_DONTNEED; the muzzy counters move), and RSS drops. */
Test(decay, dirty_goes_muzzy_then_retained)
{
    unsigned a = my_arena();
    const ssize_t dirty_ms = 300, muzzy_ms = 300;
    set_decay(a, dirty_ms, muzzy_ms);
    heap_t h;
    heap_init(&h, GIB, 4);
    heap_alloc(&h, GIB, false, false);
    uint64_t d0 = astat64(a, "dirty_npurge"), dm0 = astat64(a, "dirty_nmadvise"), dp0 = astat64(a, "dirty_purged");
    uint64_t m0 = astat64(a, "muzzy_npurge"), mm0 = astat64(a, "muzzy_nmadvise"), mp0 = astat64(a, "muzzy_purged");
    size_t freed = heap_free(&h, 0);
    size_t max_pmuzzy = 0;
    long ms = tick_until_rss_below(h.rss0, GIB / 10, (uint64_t)(dirty_ms + muzzy_ms) + DECAY_SLACK_MS, a,
                                   &max_pmuzzy);
    size_t rss = rss_now();
    cr_log_info("muzzy: pmuzzy peaked at %zu pages; RSS back after %ld ms", max_pmuzzy, ms);
    cr_assert_gt(max_pmuzzy, 0, "pages never went muzzy");
    cr_assert_geq(max_pmuzzy * PAGE, freed / 10, "only %zu pages went muzzy", max_pmuzzy);
    cr_assert_geq(ms, 0, "RSS still %.0f MiB over the baseline (pdirty %zu, pmuzzy %zu pages) %zd ms after freeing",
                  mib(rss - h.rss0), astat(a, "pdirty"), astat(a, "pmuzzy"), dirty_ms + muzzy_ms + DECAY_SLACK_MS);
    cr_assert_gt(astat64(a, "dirty_npurge"), d0);
    cr_assert_gt(astat64(a, "dirty_nmadvise"), dm0);
    cr_assert_geq((astat64(a, "dirty_purged") - dp0) * PAGE, freed * 8 / 10);
    cr_assert_gt(astat64(a, "muzzy_npurge"), m0, "muzzy_npurge did not move");
    cr_assert_gt(astat64(a, "muzzy_nmadvise"), mm0, "muzzy_nmadvise did not move");
    cr_assert_geq((astat64(a, "muzzy_purged") - mp0) * PAGE, freed * 8 / 10, "muzzy_purged grew by %llu pages",
                  (unsigned long long)(astat64(a, "muzzy_purged") - mp0));
    heap_destroy(&h);
}

/* dirty_decay_ms 0: pages are purged as they are freed: no purge call, no
 * ticking, and pdirty stays 0. (The thread cache is flushed after the
 * frees: objects it holds are not free yet as far as the pages are
 * concerned.) */
Test(decay, zero_purges_at_free)
{
    unsigned a = my_arena();
    set_decay(a, 0, 0);
    heap_t h;
    heap_init(&h, GIB, 5);
    heap_alloc(&h, GIB, false, false);
    uint64_t npurge0 = astat64(a, "dirty_npurge");
    size_t retained0 = ctl_size("stats.retained");
    size_t freed = heap_free(&h, 0);
    cr_assert_eq(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    size_t rss = rss_now();
    cr_assert_eq(astat(a, "pdirty"), 0, "decay 0: %zu dirty pages left", astat(a, "pdirty"));
    cr_assert_gt(astat64(a, "dirty_npurge"), npurge0);
    cr_assert_geq(ctl_size("stats.retained"), retained0 + freed * 8 / 10);
    cr_assert_lt(rss, h.rss0 + GIB / 10, "decay 0: RSS %.1f MiB over the baseline right after freeing 1 GiB",
                 mib(rss - h.rss0));
    heap_destroy(&h);
}

/* Every bin keeps its current slab even when it empties (so an alloc/free
 * cycle does not make and unmake a slab). Decay must still give such a
 * slab back once it stays empty: here every small class gets a fresh slab
 * that is then emptied, and a thread that keeps allocating (in one class)
 * must see the arena's active pages fall back to where they were within
 * the decay time plus slack. (With 64 KiB pages these slabs are tens of
 * MiB per arena.) */
Test(decay, empty_current_slabs_are_given_back_by_decay)
{
    unsigned a = my_arena();
    set_decay(a, 100, 0);
    cr_assert_eq(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    ctl_do("arena.%zu.purge", a);
    tick(4 * MIB); /* the ticking class's slab exists and is in use */
    size_t pactive0 = astat(a, "pactive");
    /* Each class: enough objects for two slabs, all allocated first, then
     * all freed (frees do not tick, so no decay runs in between). */
    size_t slab_pages = 0;
    void **ps[SC_NBINS] = {0};
    for (unsigned b = 0; b < SC_NBINS; b++) {
        const sc_bin_info_t *bi = &sc_bin_info[b];
        size_t size = bi->reg_size;
        if (size == 1024)
            continue; /* the ticker's class */
        unsigned n = 2 * bi->nregs + 1;
        ps[b] = malloc(n * sizeof(void *));
        for (unsigned i = 0; i < n; i++) {
            ps[b][i] = malloc(size);
            cr_assert_not_null(ps[b][i]);
            memset(ps[b][i], 3, size);
        }
        slab_pages += bi->slab_pages;
    }
    for (unsigned b = 0; b < SC_NBINS; b++) {
        if (ps[b] == NULL)
            continue;
        for (unsigned i = 0; i < 2 * sc_bin_info[b].nregs + 1; i++)
            free(ps[b][i]);
        free(ps[b]);
    }
    cr_assert_eq(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    size_t pactive1 = astat(a, "pactive");
    cr_assert_geq(pactive1, pactive0 + slab_pages / 2, "the emptied current slabs: %zu -> %zu pages (%zu expected)",
                  pactive0, pactive1, slab_pages);
    uint64_t t0 = now_ms();
    size_t pactive = pactive1;
    while (now_ms() - t0 < 100 + DECAY_SLACK_MS) {
        tick(MIB);
        sleep_ms(2);
        pactive = astat(a, "pactive");
        if (pactive <= pactive0 + (pactive1 - pactive0) / 10)
            break;
    }
    cr_log_info("empty current slabs: %zu pages active, %zu with them, %zu after decay", pactive0, pactive1, pactive);
    cr_assert_leq(pactive, pactive0 + (pactive1 - pactive0) / 10,
                  "%zu pages of emptied current slabs (%.1f MiB) still active %d ms later", pactive - pactive0,
                  mib((pactive - pactive0) * PAGE), 100 + DECAY_SLACK_MS);
}

/* Objects another thread frees (of a class that shares cache lines, which
 * the freeing thread does not cache) wait on their slab's remote list,
 * still allocated as far as the bin is concerned, until the owner's next
 * fill collects them. A decay tick collects them too, so an owner that
 * exited or went idle does not leave them pinning their slabs; and the
 * owner's exit collects those freed before it, when it is the last thread
 * of its arena (arena_thread_leave). */
typedef struct remote_owner {
    unsigned arena;
    unsigned n;
    size_t size;
    void **ps;
    pthread_barrier_t *allocated, *freed, *release;
} remote_owner_t;

static void *remote_owner_main(void *arg)
{
    remote_owner_t *o = arg;
    set_thread_arena(o->arena);
    for (unsigned i = 0; i < o->n; i++) {
        o->ps[i] = malloc(o->size);
        cr_assert_not_null(o->ps[i]);
    }
    cr_assert_eq(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    pthread_barrier_wait(o->allocated);
    pthread_barrier_wait(o->freed);
    if (o->release != NULL)
        pthread_barrier_wait(o->release); /* stay alive, idle, until told */
    return NULL;
}

typedef enum {
    OWNER_IDLE,        /* frees while the owner lives; it stays, idle */
    OWNER_EXITS_AFTER, /* frees while the owner lives; then it exits (a free
                        * into an arena without threads goes straight back:
                        * arena.h, arena_dalloc_remote) */
} owner_case_t;

static void remote_free_all(void **ps, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        free(ps[i]);
    cr_assert_eq(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0); /* pushes the remote frees out */
}

static void remote_frees_are_collected(owner_case_t how)
{
    static const char *const names[] = {"idle", "exits after the frees"};
    const size_t size = 96; /* not a multiple of a cache line */
    const unsigned n = 200;
    unsigned bin = 0;
    while (sc_bin_info[bin].reg_size != size)
        bin++;
    unsigned narenas = 0;
    size_t nsz = sizeof(narenas);
    cr_assert_eq(mallctl("arenas.narenas", &narenas, &nsz, NULL, 0), 0);
    cr_assert_geq(narenas, 2, "need two arenas");
    /* An arena no thread uses (Criterion has threads of its own). */
    unsigned home = my_arena(), x = home;
    for (unsigned i = 1; i < narenas && x == home; i++)
        if (arena_nthreads((home + i) % narenas) == 0)
            x = (home + i) % narenas;
    cr_assert_neq(x, home, "no arena without threads among %u", narenas);
    char name[96];
    size_t base = 0, sz = sizeof(base);
    snprintf(name, sizeof(name), "stats.arenas.%u.bins.%u.curregs", x, bin);
    new_epoch();
    if (mallctl(name, &base, &sz, NULL, 0) != 0)
        base = 0; /* the arena is not created yet */

    pthread_barrier_t allocated, freed, release;
    pthread_barrier_init(&allocated, NULL, 2);
    pthread_barrier_init(&freed, NULL, 2);
    pthread_barrier_init(&release, NULL, 2);
    void *ps[200];
    remote_owner_t o = {x, n, size, ps, &allocated, &freed, how == OWNER_IDLE ? &release : NULL};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, remote_owner_main, &o), 0);
    pthread_barrier_wait(&allocated);
    remote_free_all(ps, n);
    pthread_barrier_wait(&freed);
    if (how == OWNER_EXITS_AFTER)
        cr_assert_eq(pthread_join(t, NULL), 0);
    size_t pending = bin_curregs(x, bin);
    if (how == OWNER_EXITS_AFTER) {
        cr_log_info("remote frees (owner %s): curregs %zu, %zu after its exit", names[how], base, pending);
        cr_assert_leq(pending, base + n / 10, "%zu remotely freed objects still held after their owner's exit",
                      pending - base);
    } else {
        cr_assert_geq(pending, base + n / 2, "the remote frees did not wait on their slabs (curregs %zu -> %zu)",
                      base, pending);
        ctl_do("arena.%zu.decay", x);
        size_t after = bin_curregs(x, bin);
        cr_log_info("remote frees (owner %s): curregs %zu, %zu with them pending, %zu after decay", names[how], base,
                    pending, after);
        cr_assert_leq(after, base + n / 10, "owner %s: %zu remotely freed objects still held after decay", names[how],
                      after - base);
    }
    if (how == OWNER_IDLE) {
        pthread_barrier_wait(&release);
        cr_assert_eq(pthread_join(t, NULL), 0);
    }
    pthread_barrier_destroy(&allocated);
    pthread_barrier_destroy(&freed);
    pthread_barrier_destroy(&release);
}

Test(decay, remote_frees_are_collected_when_the_owner_exits) { remote_frees_are_collected(OWNER_EXITS_AFTER); }
Test(decay, remote_frees_are_collected_when_the_owner_is_idle) { remote_frees_are_collected(OWNER_IDLE); }

/* ---------------------------------------------------------------------
 * An arena whose threads have all exited: what other threads free into it
 * goes back to the pool and out of memory at once (arena.c,
 * arena_thread_leave), unless decay is off.
 */

typedef struct abandon {
    unsigned arena;
    void **ps;
    unsigned n;
    pthread_barrier_t *allocated, *freed;
} abandon_t;

enum { ABANDON_N = 4096 }; /* objects per size: 384 KiB of 96 B, 4 MiB of 1 KiB */

static void *abandon_owner_main(void *arg)
{
    abandon_t *o = arg;
    set_thread_arena(o->arena);
    for (unsigned i = 0; i < o->n; i++) {
        size_t size = i % 2 == 0 ? 96 : 1024; /* one class of whole cache lines, one not */
        o->ps[i] = malloc(size);
        cr_assert_not_null(o->ps[i]);
        memset(o->ps[i], 0x5a, size);
    }
    cr_assert_eq(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    pthread_barrier_wait(o->allocated);
    if (o->freed != NULL)
        pthread_barrier_wait(o->freed); /* alive while the others free */
    return NULL;
}

/* The owner allocates on an arena no other thread uses, then exits (or
 * stays alive); this thread frees everything; returns the pages the arena
 * purged meanwhile, and its dirty and active pages after. */
static void *visit_arena_main(void *arg)
{
    set_thread_arena(*(unsigned *)arg);
    free(malloc(64));
    return NULL;
}

/* Mark the threads of pool's arena busy (a decay tick an hour ahead, so
 * that no scheduling delay ends it) or idle (no tick). */
static void set_busy(extent_pool_t *pool, bool busy)
{
    extent_pool_note_tick(pool, busy ? decay_now_ns() + (uint64_t)3600 * 1000000000u : 0);
}

/* How free_into_arena goes. */
typedef struct {
    bool owner_exits; /* before the frees (else it stays alive meanwhile) */
    bool revisited;   /* a thread used the arena and exited before the owner came */
    ssize_t dirty_ms; /* the arena's dirty decay time */
    ssize_t hold_ms;  /* its hold, set before the owner allocates (-1: as it is) */
    bool busy;        /* a thread of this thread's arena counts as busy (a
                       * decay tick an hour ahead) while the objects are freed */
    bool then_idle;   /* busy: one object is kept back and freed after, idle */
} free_into_t;

/* What it measured: the arena; the pages it purged meanwhile, its dirty and
 * active pages after; with then_idle, the pages purged in all and the dirty
 * pages once the last object was freed. */
typedef struct {
    unsigned arena;
    size_t purged, pdirty, pactive;
    size_t purged_idle, pdirty_idle;
    size_t npurge; /* purge passes over the dirty pages meanwhile */
} freed_t;

static freed_t free_into_arena(free_into_t how)
{
    unsigned narenas = 0;
    size_t nsz = sizeof(narenas);
    cr_assert_eq(mallctl("arenas.narenas", &narenas, &nsz, NULL, 0), 0);
    unsigned home = my_arena(), x = home;
    for (unsigned i = 1; i < narenas && x == home; i++)
        if (arena_nthreads((home + i) % narenas) == 0)
            x = (home + i) % narenas;
    cr_assert_neq(x, home, "no arena without threads among %u", narenas);
    cr_assert_not_null(arena_get(x));
    set_decay(x, how.dirty_ms, 0);
    if (how.hold_ms >= 0)
        set_hold(x, how.hold_ms); /* forgets the peaks so far */
    if (how.revisited) {
        /* A thread uses the arena and exits before the owner comes. */
        pthread_t v;
        cr_assert_eq(pthread_create(&v, NULL, visit_arena_main, &x), 0);
        cr_assert_eq(pthread_join(v, NULL), 0);
    }
    uint64_t purged0 = astat64(x, "dirty_purged"), npurge0 = astat64(x, "dirty_npurge");

    unsigned n = 2 * ABANDON_N;
    void **ps = calloc(n, sizeof(*ps));
    cr_assert_not_null(ps);
    pthread_barrier_t allocated, freed;
    pthread_barrier_init(&allocated, NULL, 2);
    pthread_barrier_init(&freed, NULL, 2);
    abandon_t o = {x, ps, n, &allocated, how.owner_exits ? NULL : &freed};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, abandon_owner_main, &o), 0);
    pthread_barrier_wait(&allocated);
    if (how.owner_exits)
        cr_assert_eq(pthread_join(t, NULL), 0);
    cr_assert_eq(arena_nthreads(x), how.owner_exits ? 0u : 1u);
    extent_pool_t *home_pool = &arena_get(home)->pool;
    unsigned held = n; /* the object kept for then_idle */
    /* This thread's last tick (its allocations above may have made one)
     * would count as busy for 10 ms: none, unless busy. */
    set_busy(home_pool, how.busy);
    if (how.busy && how.then_idle) {
        /* In a slab of the arena's own pages (its first slabs may be pages
         * taken from this thread's pool) that is not its bin's current. */
        for (held = n / 2; held < n && tu_slab_of(ps[held])->pool != &arena_get(x)->pool; held++)
            ;
        cr_assert_lt(held, n);
    }
    for (unsigned i = 0; i < n; i++)
        if (i != held)
            free(ps[i]);
    cr_assert_eq(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    if (!how.owner_exits) {
        /* What the owner would collect: the remote frees, into their
         * slabs; empty slabs into the pool (no purge: decay is long). */
        ctl_do("arena.%zu.decay", x);
    }
    freed_t r = {x,    (size_t)(astat64(x, "dirty_purged") - purged0), astat(x, "pdirty"), astat(x, "pactive"), 0, 0,
                 (size_t)(astat64(x, "dirty_npurge") - npurge0)};
    set_busy(home_pool, false);
    if (how.busy && how.then_idle) {
        free(ps[held]);
        cr_assert_eq(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
        r.purged_idle = (size_t)(astat64(x, "dirty_purged") - purged0);
        r.pdirty_idle = astat(x, "pdirty");
    }
    if (!how.owner_exits) {
        pthread_barrier_wait(&freed);
        cr_assert_eq(pthread_join(t, NULL), 0);
    }
    pthread_barrier_destroy(&allocated);
    pthread_barrier_destroy(&freed);
    free(ps);
    return r;
}

/* Pages of the slabs the owner filled: 96 B and 1 KiB objects. */
static size_t abandon_pages(void)
{
    return (size_t)ABANDON_N * (96 + 1024) / PAGE;
}

/* Purged as it is freed, a batch of EXTENT_TRIM_BATCH pages at a time (a
 * madvise per emptied slab cost larson's teardown 8% of its CPU time):
 * fewer than that stay dirty. */
Test(decay, what_is_freed_into_an_abandoned_arena_is_purged_in_batches)
{
    freed_t r = free_into_arena((free_into_t){.owner_exits = true, .dirty_ms = 10000, .hold_ms = -1});
    size_t purged = r.purged, pdirty = r.pdirty, pactive = r.pactive, pages = abandon_pages();
    cr_log_info("abandoned arena: %zu pages purged (slabs of %zu pages), %zu dirty, %zu active left", purged,
                pages, pdirty, pactive);
    /* All but what is left of the last batch (4 pages of 70 with 64 KiB
     * pages). */
    cr_assert_geq(purged + EXTENT_TRIM_BATCH, pages * 9 / 10, "only %zu of %zu pages purged", purged, pages);
    cr_assert_lt(pdirty, EXTENT_TRIM_BATCH, "%zu dirty pages kept by an arena without threads (a batch is %zu)",
                 pdirty, (size_t)EXTENT_TRIM_BATCH);
    cr_assert_leq(r.npurge, purged / EXTENT_TRIM_BATCH + 1, "%zu pages purged in %zu passes: not in batches of %zu",
                  purged, r.npurge, (size_t)EXTENT_TRIM_BATCH);
    /* The bins keep no empty slabs for fills (at most a slab or two of
     * objects the owner did not allocate here). */
    cr_assert_leq(pactive, 8, "%zu pages still active in empty slabs", pactive);
}

/* Freed into arena x with decay on, the pages stay (dirty, or in slabs the
 * bins keep) for decay: nothing purged yet. */
static void expect_kept_for_decay(const char *what, bool owner_exits, bool revisited)
{
    freed_t r = free_into_arena(
        (free_into_t){.owner_exits = owner_exits, .revisited = revisited, .dirty_ms = 10000, .hold_ms = -1});
    size_t purged = r.purged, pdirty = r.pdirty, pactive = r.pactive, pages = abandon_pages();
    cr_log_info("%s: %zu pages purged, %zu dirty, %zu active", what, purged, pdirty, pactive);
    cr_assert_leq(purged, pages / 10, "%s: %zu pages purged before their decay time", what, purged);
    cr_assert_geq(pdirty + pactive, pages * 9 / 10, "%s: only %zu + %zu of %zu pages kept", what, pdirty,
                  pactive, pages);
}

Test(decay, an_arena_with_a_thread_keeps_what_is_freed_for_decay)
{
    expect_kept_for_decay("arena with its thread", false, false);
}

/* Threads come and go on it (each wave of a thread pool): the next one will
 * take the pages, which stay until decay. */
Test(decay, an_arena_that_threads_come_back_to_keeps_what_is_freed_for_decay)
{
    expect_kept_for_decay("arena abandoned again", true, true);
}

/* While a thread of another arena allocates (ticks), what is freed into an
 * abandoned arena stays for decay (and for the busy threads to take); once
 * none is busy, the next slab that empties there takes all of it out (all
 * but less than a batch: the bin's kept empty slabs follow it). */
Test(decay, an_abandoned_arena_keeps_what_is_freed_while_others_are_busy)
{
    freed_t r = free_into_arena(
        (free_into_t){.owner_exits = true, .dirty_ms = 10000, .hold_ms = -1, .busy = true, .then_idle = true});
    size_t pages = abandon_pages();
    cr_log_info("abandoned arena, another busy: %zu pages purged, %zu dirty, %zu active; then idle: %zu purged, "
                "%zu dirty", r.purged, r.pdirty, r.pactive, r.purged_idle, r.pdirty_idle);
    cr_assert_leq(r.purged, pages / 10, "%zu pages purged while another arena was busy", r.purged);
    cr_assert_geq(r.pdirty + r.pactive, pages * 9 / 10, "only %zu + %zu of %zu pages kept", r.pdirty, r.pactive,
                  pages);
    cr_assert_geq(r.purged_idle, r.pdirty, "only %zu of the %zu dirty pages purged once the others were idle",
                  r.purged_idle, r.pdirty);
    cr_assert_lt(r.pdirty_idle, EXTENT_TRIM_BATCH, "%zu dirty pages left once the others were idle (a batch is %zu)",
                 r.pdirty_idle, (size_t)EXTENT_TRIM_BATCH);
}

/* Left to decay (another arena busy), an abandoned arena's pages go at the
 * decay's pace: the hold, which keeps pages for an arena's threads to come
 * back to, does not keep them (an hour's hold here). */
Test(decay, an_abandoned_arena_decays_without_the_hold)
{
    freed_t r = free_into_arena((free_into_t){.owner_exits = true, .dirty_ms = 100, .hold_ms = 3600 * 1000, .busy = true});
    size_t pages = abandon_pages();
    cr_log_info("abandoned arena, another busy, decay 100 ms: %zu pages purged at once, %zu dirty", r.purged, r.pdirty);
    cr_assert_geq(r.pdirty, pages / 2, "only %zu dirty pages of %zu left to decay", r.pdirty, pages);
    unsigned x = r.arena;
    /* Busy still: the empty slabs a decay gives back to the pool must not
     * trim it (which would purge everything whatever the hold). A decay
     * tick now starts the pages' decay (as the busy thread's would), one
     * after 3 x the decay time ends it. */
    extent_pool_t *home_pool = &arena_get(my_arena())->pool;
    set_busy(home_pool, true);
    ctl_do("arena.%zu.decay", x);
    uint64_t purged0 = astat64(x, "dirty_purged");
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    ctl_do("arena.%zu.decay", x);
    set_busy(home_pool, false);
    size_t left = astat(x, "pdirty");
    cr_log_info("after 300 ms and a decay: %zu more purged, %zu dirty", (size_t)(astat64(x, "dirty_purged") - purged0),
                left);
    cr_assert_eq(left, 0, "%zu dirty pages kept past 3x the decay time (%zu after the frees)", left, r.pdirty);
}

Test(decay, an_abandoned_arena_with_decay_off_purges_nothing)
{
    freed_t r = free_into_arena((free_into_t){.owner_exits = true, .dirty_ms = -1, .hold_ms = -1});
    size_t purged = r.purged, pdirty = r.pdirty, pactive = r.pactive, pages = abandon_pages();
    cr_log_info("abandoned arena, decay -1: %zu pages purged, %zu dirty, %zu active", purged, pdirty, pactive);
    cr_assert_eq(purged, 0, "%zu pages purged with dirty_decay_ms -1", purged);
    cr_assert_geq(pdirty + pactive, pages * 9 / 10, "only %zu + %zu of %zu pages kept", pdirty, pactive, pages);
}

/* ---------------------------------------------------------------------
 * Contents after purging and reuse.
 */

static void check_survivors(heap_t *h, const char *when)
{
    for (size_t i = 0; i < h->n; i++)
        cr_assert(tu_check(h->ps[i], h->sizes[i]), "%s: live object %p (%zu bytes) changed", when, h->ps[i],
                  h->sizes[i]);
}

/* Reuse after a purge: every 8th object survives (and must keep its
 * contents), the rest is freed and purged (MADV_DONTNEED, or MADV_FREE for
 * the muzzy case), then the same amount is allocated again with calloc
 * (every byte must read 0, also from pages the allocator believes are
 * zero) and written with a pattern that is read back. */
static void reuse_after_purge(bool muzzy)
{
    unsigned a = my_arena();
    /* Muzzy: frees go straight to MADV_FREE and stay there. */
    if (muzzy)
        set_decay(a, 0, -1);
    else
        set_decay(a, -1, -1);
    heap_t h;
    heap_init(&h, 256 * MIB, muzzy ? 6 : 7);
    heap_alloc(&h, 256 * MIB, true, false);
    size_t freed = heap_free(&h, 8);
    if (muzzy) {
        cr_assert_geq(astat(a, "pmuzzy") * PAGE, freed / 2, "pmuzzy %zu pages after freeing %zu bytes",
                      astat(a, "pmuzzy"), freed);
    } else {
        ctl_do("arena.%zu.purge", ALL);
        cr_assert_eq(astat(a, "pdirty"), 0);
    }
    check_survivors(&h, "after the purge");
    heap_t r;
    heap_init(&r, freed, 8);
    heap_alloc(&r, freed, true, true);
    for (size_t i = 0; i < r.n; i++)
        cr_assert(tu_check(r.ps[i], r.sizes[i]), "new object %p changed", r.ps[i]);
    check_survivors(&h, "after reuse");
    heap_destroy(&r);
    heap_destroy(&h);
}

Test(decay, purged_pages_read_back_right_and_calloc_is_zero)
{
    reuse_after_purge(false);
}

Test(decay, muzzy_pages_read_back_right_and_calloc_is_zero)
{
    reuse_after_purge(true);
}

/* ---------------------------------------------------------------------
 * malloc_trim, MALLCTL_ARENAS_ALL.
 */

Test(decay, malloc_trim_purges_everything_it_can)
{
    unsigned a = my_arena();
    set_decay(a, -1, -1);
    heap_t h;
    heap_init(&h, 256 * MIB, 9);
    heap_alloc(&h, 256 * MIB, false, false);
    size_t freed = heap_free(&h, 0);
    size_t rss1 = rss_now();
    cr_assert_geq(rss1, h.rss0 + freed * 8 / 10);
    cr_assert_eq(malloc_trim(0), 1, "malloc_trim(0) after freeing 256 MiB");
    size_t rss2 = rss_now();
    cr_assert_lt(rss2, h.rss0 + freed / 10, "malloc_trim: RSS %.1f MiB over the baseline", mib(rss2 - h.rss0));
    cr_assert_eq(astat(ALL, "pdirty"), 0, "dirty pages left after malloc_trim");
    cr_assert_eq(astat(ALL, "pmuzzy"), 0, "muzzy pages left after malloc_trim");
    heap_destroy(&h);
}

/* The next two arenas after this thread's (which it returns). */
static unsigned two_other_arenas(unsigned *x, unsigned *y)
{
    unsigned home = my_arena();
    unsigned narenas = 0;
    size_t nsz = sizeof(narenas);
    cr_assert_eq(mallctl("arenas.narenas", &narenas, &nsz, NULL, 0), 0);
    cr_assert_geq(narenas, 3, "need three arenas");
    *x = (home + 1) % narenas;
    *y = (home + 2) % narenas;
    return home;
}

/* Allocate and free bytes in arenas x and y (this thread moves there and
 * back; the moves flush its cache), leaving dirty pages in both pools. An
 * arena short of dirty pages takes another's (extent_pool_share) and freed
 * pages go back to the pool they came from: so first no pool has a dirty
 * page, and both heaps are live at once. */
static void dirty_in_arenas(unsigned x, unsigned y, size_t bytes, uint64_t seed)
{
    unsigned home = my_arena();
    ctl_do("arena.%zu.purge", ALL);
    heap_t hx, hy;
    set_thread_arena(x);
    heap_init(&hx, bytes, seed);
    heap_alloc(&hx, bytes, false, false);
    set_thread_arena(y);
    heap_init(&hy, bytes, seed + 1000);
    heap_alloc(&hy, bytes, false, false);
    set_thread_arena(x);
    heap_free(&hx, 0);
    heap_destroy(&hx);
    set_thread_arena(y);
    heap_free(&hy, 0);
    heap_destroy(&hy);
    set_thread_arena(home);
}

/* arena.<i>.purge / arena.<i>.decay act on arena i alone;
 * arena.<MALLCTL_ARENAS_ALL>.purge / .decay on every arena. */
Test(decay, arenas_all_purge_and_decay)
{
    unsigned x, y, home = two_other_arenas(&x, &y);
    const size_t bytes = 64 * MIB, want = bytes / 2 / PAGE;
    /* Arenas are created on first use: visit both. */
    set_thread_arena(x);
    set_thread_arena(y);
    set_thread_arena(home);
    set_decay(x, -1, -1);
    set_decay(y, -1, -1);

    /* purge */
    dirty_in_arenas(x, y, bytes, 10);
    size_t dy = astat(y, "pdirty");
    cr_assert_geq(astat(x, "pdirty"), want);
    cr_assert_geq(dy, want);
    ctl_do("arena.%zu.purge", x);
    cr_assert_eq(astat(x, "pdirty"), 0, "arena.%u.purge", x);
    cr_assert_eq(astat(y, "pdirty"), dy, "arena.%u.purge touched arena %u", x, y);
    dirty_in_arenas(x, y, bytes, 12);
    cr_assert_geq(astat(x, "pdirty"), want);
    cr_assert_geq(astat(y, "pdirty"), want);
    ctl_do("arena.%zu.purge", ALL);
    cr_assert_eq(astat(x, "pdirty"), 0, "arena.<all>.purge left arena %u dirty", x);
    cr_assert_eq(astat(y, "pdirty"), 0, "arena.<all>.purge left arena %u dirty", y);

    /* decay: both get dirty with decay off (the ticks of this thread's
     * allocations visit every arena in turn), then 100 ms (a new decay
     * time restarts the clock: the pages already dirty are due at the next
     * epoch), then this thread sleeps (no allocation, so no ticks) well
     * past it: only the decay calls may purge. */
    dirty_in_arenas(x, y, bytes, 13);
    set_decay(x, 100, 0);
    set_decay(y, 100, 0);
    set_hold(x, 0); /* decay alone (the hold has tests of its own) */
    set_hold(y, 0);
    sleep_ms(400);
    size_t dx = astat(x, "pdirty");
    dy = astat(y, "pdirty");
    cr_assert_geq(dx, want, "nothing ticked: the pages must still be dirty");
    cr_assert_geq(dy, want);
    /* A decay call may also hand an empty current slab of a bin to the
     * dirty set (fresh pages, not due): count what was purged. */
    uint64_t px = astat64(x, "dirty_purged"), py = astat64(y, "dirty_purged");
    ctl_do("arena.%zu.decay", x);
    cr_assert_geq(astat64(x, "dirty_purged") - px, dx, "arena.%u.decay 400 ms after a 100 ms decay purged %llu of %zu pages",
                  x, (unsigned long long)(astat64(x, "dirty_purged") - px), dx);
    cr_assert_eq(astat(y, "pdirty"), dy, "arena.%u.decay touched arena %u", x, y);
    cr_assert_eq(astat64(y, "dirty_purged"), py, "arena.%u.decay touched arena %u", x, y);
    ctl_do("arena.%zu.decay", ALL);
    cr_assert_geq(astat64(y, "dirty_purged") - py, dy, "arena.<all>.decay purged %llu of arena %u's %zu due pages",
                  (unsigned long long)(astat64(y, "dirty_purged") - py), y, dy);
}

/* An arena with no dirty pages of its own takes another arena's before it
 * uses retained memory or maps more (extent_pool_share): the pages stay
 * counted in the arena they came from, and go back to it when freed. */
Test(decay, an_arena_without_dirty_pages_takes_another_arenas)
{
    unsigned x, y, home = two_other_arenas(&x, &y);
    enum { N = 8 };
    const size_t big = MIB, want = N * big / PAGE;
    void *ps[N];
    set_thread_arena(y);
    set_thread_arena(x);
    set_decay(x, -1, -1);
    ctl_do("arena.%zu.purge", ALL);
    for (int i = 0; i < N; i++)
        cr_assert_not_null(ps[i] = malloc(big));
    for (int i = 0; i < N; i++)
        free(ps[i]);
    size_t dirty0 = astat(ALL, "pdirty"), mapped0 = astat(ALL, "mapped"), yactive0 = astat(y, "pactive");
    cr_assert_geq(astat(x, "pdirty"), want);

    set_thread_arena(y);
    for (int i = 0; i < N; i++)
        cr_assert_not_null(ps[i] = malloc(big));
    cr_assert_leq(astat(ALL, "pdirty") + want, dirty0, "arena %u took %zu dirty pages of %zu", y,
                  dirty0 - astat(ALL, "pdirty"), want);
    cr_assert_eq(astat(ALL, "mapped"), mapped0, "arena %u mapped memory while others had dirty pages", y);
    cr_assert_eq(astat(y, "pactive"), yactive0, "the pages count where they came from");
    for (int i = 0; i < N; i++)
        free(ps[i]);
    cr_assert_eq(astat(ALL, "pdirty"), dirty0, "freed, they went back as dirty pages");
    cr_assert_eq(astat(y, "pdirty"), 0);
    set_thread_arena(home);
    set_decay(x, 1000, 0);
}

/* Borrowing (bin_borrow_locked): arena x's thread fills slabs of one class
 * and frees every other object; then a thread of arena y (whose bin of that
 * class is empty) allocates as many. Returns how many of y's objects took
 * the holes x left, and x's bin's nlent count for the class. */
static unsigned borrowed_holes(unsigned x, unsigned y, size_t size, uint64_t *nlent)
{
    enum { N = 4096 };
    void *ps[N], *holes[N / 2], *qs[N / 2];
    unsigned bin = sc_size2index(size);
    set_thread_arena(x);
    for (int i = 0; i < N; i++)
        cr_assert_not_null(ps[i] = malloc(size));
    for (int i = 0; i < N / 2; i++) {
        holes[i] = ps[2 * i + 1];
        free(holes[i]);
    }
    set_thread_arena(y); /* the move flushes: the holes are back in x's slabs */
    char name[96];
    snprintf(name, sizeof(name), "stats.arenas.%u.bins.%u.nlent", x, bin);
    uint64_t lent0 = ctl_u64(name);
    for (int i = 0; i < N / 2; i++)
        cr_assert_not_null(qs[i] = malloc(size));
    *nlent = ctl_u64(name) - lent0;
    qsort(holes, N / 2, sizeof(void *), tu_cmp_ptr);
    unsigned n = 0;
    for (int i = 0; i < N / 2; i++)
        n += bsearch(&qs[i], holes, N / 2, sizeof(void *), tu_cmp_ptr) != NULL;
    for (int i = 0; i < N / 2; i++) {
        free(qs[i]);
        free(ps[2 * i]);
    }
    return n;
}

Test(decay, a_bin_with_no_free_region_borrows_another_arenas_holes)
{
    unsigned x, y, home = two_other_arenas(&x, &y);
    uint64_t nlent;
    /* 256 B: whole cache lines, borrowed (the last few may come from a
     * slab of y's own once x has no non-full slab left). */
    unsigned n = borrowed_holes(x, y, 256, &nlent);
    cr_assert_geq(n, 2048 * 9 / 10, "%u of 2048 objects in the holes of arena %u", n, x);
    cr_assert_geq(nlent, n, "stats: %" PRIu64 " lent", nlent);
    /* 80 B regions share lines with their neighbours: never borrowed. */
    n = borrowed_holes(x, y, 80, &nlent);
    cr_assert_eq(n, 0, "%u objects of 80 B in another arena's holes", n);
    cr_assert_eq(nlent, 0);
    set_thread_arena(home);
}

/* Lending while the lender frees: arena y has no dirty pages ever (decay 0)
 * and takes every extent from x's dirty set, while a thread of x keeps
 * freeing extents next to those taken into x's pool (coalescing). A taken
 * extent must stop being x's free extent under x's lock: registered after
 * the unlock, x's coalescing could merge it while y used it: a corrupt
 * heap, which crashed this test in 7 of 8 runs (a race: not every run). */
#define LEND_ROUNDS 2000000
#define LEND_LIVE 2

typedef struct {
    unsigned arena;
    uint64_t seed;
} lend_job_t;

static void *lend_churn(void *arg)
{
    lend_job_t *j = arg;
    set_thread_arena(j->arena);
    void *live[LEND_LIVE] = {0};
    uint64_t r = j->seed;
    for (int i = 0; i < LEND_ROUNDS; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        unsigned k = (unsigned)(r >> 33) % LEND_LIVE;
        free(live[k]);
        /* Large (past the thread cache): straight to the pools. */
        size_t size = (size_t)(64 + (r >> 40) % 64) * 1024;
        live[k] = malloc(size);
        if (live[k] == NULL)
            return "malloc failed";
        memset(live[k], 0x5a, 64);
    }
    for (int k = 0; k < LEND_LIVE; k++)
        free(live[k]);
    return NULL;
}

Test(decay, lending_races_with_the_lenders_own_frees)
{
    unsigned x, y, home = two_other_arenas(&x, &y);
    set_thread_arena(y); /* creates it */
    set_thread_arena(x);
    set_decay(x, -1, -1);
    set_decay(y, 0, 0);
    lend_job_t jx = {x, 1}, jy = {y, 2};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, lend_churn, &jy), 0);
    void *rx = lend_churn(&jx), *ry;
    pthread_join(t, &ry);
    cr_assert_null(rx, "%s", (char *)rx);
    cr_assert_null(ry, "%s", (char *)ry);
    cr_assert_eq(astat(y, "pdirty"), 0);
    set_thread_arena(home);
    set_decay(x, 1000, 0);
    set_decay(y, 1000, 0);
}

/* ---------------------------------------------------------------------
 * Free pages inside slabs still in use (arena.c, "Purging inside slabs"):
 * slabs of a class of several pages each keep only their first region; the
 * pages past it hold no object and are purged by arena.<i>.purge at once,
 * by decay once no fill has come to the slab for the decay time, never
 * with decay -1.
 */
#define INNER_NSLABS 64

typedef struct {
    unsigned arena, bin, nslabs;
    size_t size;
    extent_t *slab[INNER_NSLABS];
    unsigned char *keep[INNER_NSLABS]; /* the one region kept in each slab */
    size_t free_pages;                 /* pages of those slabs the kept regions do not touch */
    size_t written;                    /* OS pages of them that regions cover (resident) */
} inner_t;

/* The first class whose slabs span at least four pages with regions of at
 * least half a page (so that most pages of a slab hold one or two), or
 * with regions larger than a page (so that some page holds no region's
 * start: handing out a region must take back every page it covers). */
static unsigned inner_class(bool over_page)
{
    for (unsigned b = 0; b < SC_NBINS; b++)
        if (sc_bin_info[b].slab_pages >= 4 && sc_bin_info[b].nregs >= 2 &&
            (over_page ? sc_bin_info[b].reg_size > PAGE : sc_bin_info[b].reg_size >= PAGE / 2))
            return b;
    cr_assert_fail("no class of multi-page slabs");
    return 0;
}

/* Calls f(slab offset) for each OS page of slab i that no page the kept
 * region touches contains. */
#define INNER_FOR_FREE_OS_PAGES(t, i, off)                                                          \
    for (size_t kp0_ = ((uintptr_t)(t)->keep[i] - (t)->slab[i]->addr) / PAGE * PAGE,                  \
                kp1_ = ((uintptr_t)(t)->keep[i] - (t)->slab[i]->addr + (t)->size + PAGE - 1) / PAGE * PAGE, \
                os_ = (size_t)sysconf(_SC_PAGESIZE), off = 0;                                       \
         off < (t)->slab[i]->size; off += os_)                                                      \
        if (off < kp0_ || off >= kp1_)

static void inner_add(inner_t *t, extent_t *s, unsigned char *keep)
{
    cr_assert_lt(t->nslabs, INNER_NSLABS);
    const size_t written_end = sc_bin_info[t->bin].nregs * t->size;
    unsigned i = t->nslabs++;
    t->slab[i] = s;
    t->keep[i] = keep;
    size_t os_pages = 0;
    INNER_FOR_FREE_OS_PAGES(t, i, off)
    {
        os_pages++;
        t->written += off < written_end;
    }
    t->free_pages += os_pages * (size_t)sysconf(_SC_PAGESIZE) / PAGE;
}

/* Slabs of the class, each keeping one region: the first in half of them,
 * one that straddles a page boundary in the others (a page whose first
 * region is free may still hold a live one). */
static void inner_setup(inner_t *t, unsigned arena, unsigned bin)
{
    memset(t, 0, sizeof(*t));
    t->arena = arena;
    t->bin = bin;
    t->size = sc_bin_info[t->bin].reg_size;
    const unsigned nregs = sc_bin_info[t->bin].nregs, n = INNER_NSLABS * nregs;
    unsigned straddle = 0;
    for (unsigned k = 0; k < nregs && straddle == 0; k++)
        if (k * t->size / PAGE != ((k + 1) * t->size - 1) / PAGE)
            straddle = k;
    unsigned char **ps = mmap(NULL, n * sizeof(void *), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(ps, MAP_FAILED);
    /* Past the bin's first slabs, of the class's small geometry: the
     * fixture is made of the class's own. Those regions stay allocated
     * (full slabs, nothing to purge in them) until the test ends. */
    static void *small_held[512];
    cr_assert_not_null(arena_get(arena));
    tu_bin_skip_small(arena_get(arena), bin, small_held, MA_ARRAY_LEN(small_held));
    set_thread_arena(arena);
    for (unsigned i = 0; i < n; i++) {
        cr_assert_not_null(ps[i] = malloc(t->size));
        memset(ps[i], 0xa0 + (int)(i % 16), t->size);
    }
    /* The slabs whose every region is ours (a slab begun before us holds
     * others'). */
    for (unsigned i = 0; i < n && t->nslabs < INNER_NSLABS - 1; i++) { /* one left for the current slab */
        if (ps[i] == NULL) /* a region kept in a slab before */
            continue;
        extent_t *s = tu_slab_of(ps[i]);
        if ((uintptr_t)ps[i] != s->addr || i + nregs > n)
            continue;
        bool all = true;
        for (unsigned j = 1; j < nregs && all; j++)
            all = (uintptr_t)ps[i + j] == s->addr + j * t->size;
        if (!all)
            continue;
        unsigned k = t->nslabs % 2 ? straddle : 0;
        inner_add(t, s, ps[i + k]);
        ps[i + k] = NULL;
    }
    cr_assert_geq(t->nslabs, INNER_NSLABS / 2, "only %u whole slabs of %zu B", t->nslabs, t->size);
    for (unsigned i = 0; i < n; i++)
        free(ps[i]);
    cr_assert_eq(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    munmap(ps, n * sizeof(void *));
    /* The thread cache's last fill left the bin's current slab with all
     * its regions free (they were in the cache): one more object, past
     * the cache, takes its first region and makes it a slab of the
     * fixture, so that the current slab is covered too. */
    bool off = false, on = true;
    cr_assert_eq(mallctl("thread.tcache.enabled", NULL, NULL, &off, sizeof(off)), 0);
    unsigned char *p = malloc(t->size), *rest[SC_SLAB_MAXREGS];
    cr_assert_not_null(p);
    memset(p, 0xaf, t->size);
    for (unsigned j = 1; j < nregs; j++) { /* its other pages resident, like the others' */
        cr_assert_not_null(rest[j] = malloc(t->size));
        memset(rest[j], 0x11, t->size);
    }
    for (unsigned j = 1; j < nregs; j++)
        free(rest[j]);
    cr_assert_eq(mallctl("thread.tcache.enabled", NULL, NULL, &on, sizeof(on)), 0);
    extent_t *cur = arenas[arena]->bins[t->bin].slabcur;
    cr_assert(cur == tu_slab_of(p) && cur->addr == (uintptr_t)p && cur->nfree == nregs - 1,
              "the bin's current slab is not a fresh one");
    inner_add(t, cur, p);
}

/* Of the OS pages of the fixture's slabs that the kept regions do not
 * touch, how many are resident; checks the kept regions' contents on the
 * way. */
static size_t inner_resident(const inner_t *t)
{
    size_t n = 0;
    for (unsigned i = 0; i < t->nslabs; i++) {
        const unsigned char c = t->keep[i][0];
        size_t b = 0;
        while (b < t->size && t->keep[i][b] == c)
            b++;
        cr_assert(c >= 0xa0 && c < 0xb0 && b == t->size, "kept object %p changed at byte %zu", t->keep[i], b);
        INNER_FOR_FREE_OS_PAGES(t, i, off)
        {
            unsigned char v = 0;
            cr_assert_eq(mincore((void *)(t->slab[i]->addr + off), 1, &v), 0);
            n += v & 1;
        }
    }
    return n;
}

static void inner_teardown(inner_t *t)
{
    for (unsigned i = 0; i < t->nslabs; i++)
        free(t->keep[i]);
}

/* The arena a fixture test runs in (one besides this thread's, which goes
 * into *home): the thread moves there, with the given decay times. */
static unsigned inner_arena_enter(unsigned *home, ssize_t dirty_ms, ssize_t muzzy_ms)
{
    unsigned x, y;
    *home = two_other_arenas(&x, &y);
    set_thread_arena(x);
    set_decay(x, dirty_ms, muzzy_ms);
    return x;
}

/* inner_arena_enter with dirty_ms (muzzy 0), then the fixture there for
 * the class under a page. */
static unsigned inner_enter_setup(inner_t *t, unsigned *home, ssize_t dirty_ms)
{
    /* Decay off while the fixture is made: the ticks of its own mallocs
     * would inspect some of its slabs and not others (when a round of
     * visits a tick began is done depends on the budget of the ticks). */
    unsigned x = inner_arena_enter(home, -1, -1);
    inner_setup(t, x, inner_class(false));
    set_decay(x, dirty_ms, dirty_ms < 0 ? -1 : 0);
    return x;
}

static void inner_arena_leave(unsigned x, unsigned home)
{
    set_thread_arena(home);
    set_decay(x, 1000, 0);
}

/* By arena.<x>.purge, or by malloc_trim(0) (every arena, as glibc's trims
 * the free pages inside its chunks). */
static void purge_inside_slabs(unsigned x, unsigned bin, bool trim)
{
    inner_t t;
    inner_setup(&t, x, bin);
    cr_assert_geq(inner_resident(&t), t.written, "freed regions' pages start resident");
    /* Stats of all arenas: a new arena's slabs may be in pages another
     * arena lent it (extent_pool_share), which count there. */
    size_t purged0 = astat(ALL, "pslab_purged"), resident0 = astat(ALL, "resident");
    uint64_t calls0 = astat64(ALL, "dirty_nmadvise");
    if (trim)
        malloc_trim(0);
    else
        ctl_do("arena.%zu.purge", x);
    cr_assert_eq(inner_resident(&t), 0, "free pages of slabs in use left resident by %s",
                 trim ? "malloc_trim(0)" : "arena.<i>.purge");
    size_t purged = astat(ALL, "pslab_purged") - purged0;
    cr_assert_geq(purged, t.free_pages, "stats: %zu pages purged in slabs, %zu expected", purged, t.free_pages);
    cr_assert_leq(astat(ALL, "resident") + t.free_pages * PAGE, resident0, "stats.arenas.all.resident");
    /* Every slab has a run of free pages; runs go to the kernel in
     * batches where it takes them (pages_purge_batch), one by one else. */
    uint64_t calls = astat64(ALL, "dirty_nmadvise") - calls0;
    if (tu_kernel_batches_madvise())
        cr_assert_lt(calls, t.nslabs / 4, "%llu system calls to purge inside %u slabs", (unsigned long long)calls,
                     t.nslabs);
    else
        cr_assert_geq(calls, t.nslabs, "%llu system calls counted for %u slabs", (unsigned long long)calls,
                      t.nslabs);

    /* The holes are handed out again: the pages come back, zeroed. */
    const unsigned nregs = sc_bin_info[t.bin].nregs, n = t.nslabs * (nregs - 1);
    unsigned char **ps = mmap(NULL, n * sizeof(void *), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(ps, MAP_FAILED);
    for (unsigned i = 0; i < n; i++) {
        cr_assert_not_null(ps[i] = calloc(1, t.size));
        for (size_t b = 0; b < t.size; b += 64)
            cr_assert_eq(ps[i][b], 0, "calloc on a purged page");
        memset(ps[i], 0x3c, t.size);
    }
    cr_assert_geq(inner_resident(&t), t.written, "the refilled slabs' pages");
    cr_assert_leq(astat(ALL, "pslab_purged") + t.free_pages, purged0 + purged,
                  "stats: pages in use again still counted purged");
    for (unsigned i = 0; i < n; i++) {
        for (size_t b = 0; b < t.size; b += 64)
            cr_assert_eq(ps[i][b], 0x3c);
        free(ps[i]);
    }
    munmap(ps, n * sizeof(void *));
    inner_teardown(&t);
}

Test(decay, a_purge_gives_back_free_pages_of_slabs_in_use)
{
    unsigned home, x = inner_arena_enter(&home, -1, -1);
    purge_inside_slabs(x, inner_class(false), false);
    purge_inside_slabs(x, inner_class(true), true);
    inner_arena_leave(x, home);
}

/* A slab purged inside that then empties goes back to the pool purged
 * whole (retained), not as dirty pages some of which are not resident. */
Test(decay, a_slab_purged_inside_goes_back_purged_when_it_empties)
{
    unsigned home;
    inner_t t;
    unsigned x = inner_enter_setup(&t, &home, -1);
    ctl_do("arena.%zu.purge", x);
    size_t dirty0 = astat(ALL, "pdirty"), purged0 = astat(ALL, "pslab_purged");
    extent_t *cur = arenas[x]->bins[t.bin].slabcur; /* stays, empty, as the current slab */
    uintptr_t addr[INNER_NSLABS];
    size_t size[INNER_NSLABS];
    for (unsigned i = 0; i < t.nslabs; i++) {
        addr[i] = t.slab[i] == cur ? 0 : t.slab[i]->addr;
        size[i] = t.slab[i]->size;
    }
    inner_teardown(&t);
    cr_assert_eq(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    cr_assert_eq(astat(ALL, "pdirty"), dirty0, "emptied slabs went back as %zu dirty pages",
                 astat(ALL, "pdirty") - dirty0);
    cr_assert_leq(astat(ALL, "pslab_purged") + (t.nslabs - 1) * (t.free_pages / t.nslabs), purged0,
                  "stats: pages of slabs given back still counted purged");
    const size_t os_page = (size_t)sysconf(_SC_PAGESIZE);
    size_t resident = 0;
    for (unsigned i = 0; i < t.nslabs; i++) {
        for (size_t off = 0; addr[i] != 0 && off < size[i]; off += os_page) {
            unsigned char v = 0;
            cr_assert_eq(mincore((void *)(addr[i] + off), 1, &v), 0);
            resident += v & 1;
        }
    }
    cr_assert_eq(resident, 0, "%zu OS pages of emptied slabs still resident", resident);
    inner_arena_leave(x, home);
}

/* Calls arena.<a>.decay every 20 ms until the fixture's free pages are no
 * longer resident or deadline_ms passes; returns how many are left. */
static size_t inner_decay_until_purged(const inner_t *t, uint64_t deadline_ms)
{
    size_t left;
    while ((left = inner_resident(t)) != 0 && now_ms() < deadline_ms) {
        sleep_ms(20);
        ctl_do("arena.%zu.decay", t->arena);
    }
    return left;
}

Test(decay, free_pages_of_slabs_in_use_decay_when_no_fill_comes)
{
    const unsigned decay_ms = 400;
    unsigned home;
    inner_t t;
    unsigned x = inner_enter_setup(&t, &home, decay_ms);
    uint64_t t0 = now_ms();
    ctl_do("arena.%zu.decay", x);
    size_t fresh = inner_resident(&t);
    if (now_ms() - t0 < decay_ms / 2) /* not when the machine stalled us */
        cr_assert_geq(fresh, t.written, "pages freed just now purged before the decay time");
    size_t left = inner_decay_until_purged(&t, now_ms() + decay_ms + DECAY_SLACK_MS);
    cr_assert_eq(left, 0, "%zu OS pages free in slabs still resident %u ms after the decay time", left,
                 DECAY_SLACK_MS);
    cr_assert_geq(now_ms() - t0, decay_ms * 3 / 4, "purged after %" PRIu64 " ms, the decay time is %u ms",
                  now_ms() - t0, decay_ms);
    inner_teardown(&t);
    inner_arena_leave(x, home);
}

/* How many of the fixture's slabs have pages purged inside. */
static unsigned inner_slabs_purged(const inner_t *t)
{
    unsigned n = 0;
    for (unsigned i = 0; i < t->nslabs; i++)
        n += t->slab[i]->purged_pages != 0;
    return n;
}

/* A decay tick (what the ticker runs in a malloc: a budget of pages, not
 * SIZE_MAX) purges at most SLAB_VISIT_RANGES runs of pages inside slabs,
 * so that no malloc stalls on a long purge under a bin lock; the next
 * ticks do the rest. Each of the fixture's slabs has at least one run. The
 * clock is the test's: a period (decay_ms / 4) passes between rounds. */
Test(decay, a_decay_tick_purges_inside_slabs_a_bounded_amount)
{
    const unsigned decay_ms = 400;
    unsigned home;
    inner_t t;
    unsigned x = inner_enter_setup(&t, &home, decay_ms);
    cr_assert_gt(t.nslabs, SLAB_VISIT_RANGES, "the fixture needs more slabs than a tick may purge");
    const size_t tick_pages = (size_t)16 << (20 - LG_PAGE);
    const uint64_t period_ns = (uint64_t)decay_ms * 1000000ull / 4;
    uint64_t now = decay_now_ns();
    unsigned rounds = 0;
    while (inner_slabs_purged(&t) == 0 && rounds < 20) {
        now += period_ns + 1;
        arena_decay(arenas[x], now, tick_pages);
        rounds++;
    }
    unsigned first = inner_slabs_purged(&t);
    cr_assert_gt(first, 0, "nothing purged inside slabs after %u decay periods", rounds);
    cr_assert_leq(first, SLAB_VISIT_RANGES, "one tick purged inside %u slabs (at most %d runs)", first,
                  SLAB_VISIT_RANGES);
    cr_assert_geq(rounds, 4, "purged after %u inspections", rounds);
    /* The next ticks, with no time passing, go on where it stopped. */
    unsigned ticks = 0, before = first;
    while (inner_resident(&t) != 0 && ticks < 4 * INNER_NSLABS) {
        arena_decay(arenas[x], now, tick_pages);
        unsigned after = inner_slabs_purged(&t);
        cr_assert_leq(after - before, SLAB_VISIT_RANGES, "one tick purged inside %u slabs", after - before);
        before = after;
        ticks++;
    }
    cr_assert_eq(inner_resident(&t), 0, "free pages inside slabs left resident after %u more ticks", ticks);
    cr_assert_eq(inner_slabs_purged(&t), t.nslabs);
    inner_teardown(&t);
    inner_arena_leave(x, home);
}

/* Once the free pages of every slab of a bin are purged, decay stops
 * walking that bin (slabs_settled) until a region is freed into one of its
 * slabs or a slab becomes current; then what the free left free is purged
 * like the rest. The clock is the test's, as above. */
Test(decay, a_settled_bin_is_not_walked_until_a_region_is_freed)
{
    const unsigned decay_ms = 400;
    unsigned home;
    inner_t t;
    unsigned x = inner_enter_setup(&t, &home, decay_ms);
    bin_t *bin = &arenas[x]->bins[t.bin];
    const uint64_t period_ns = (uint64_t)decay_ms * 1000000ull / 4;
    uint64_t now = decay_now_ns();
    unsigned rounds = 0;
    for (; inner_resident(&t) != 0 && rounds < 20; rounds++)
        arena_decay(arenas[x], now += period_ns + 1, SIZE_MAX);
    cr_assert_eq(inner_resident(&t), 0, "free pages inside slabs left resident after %u periods", rounds);
    arena_decay(arenas[x], now += period_ns + 1, SIZE_MAX);
    cr_assert(ma_load_relaxed(&bin->slabs_settled), "every slab purged, yet the bin is not settled");

    /* A fill from the current slab takes a region (its page comes back)
     * and restarts the slab's idle count; no page became free, so the bin
     * stays settled and its slabs are not inspected: the count stays 0. */
    bool off = false, on = true;
    cr_assert_eq(mallctl("thread.tcache.enabled", NULL, NULL, &off, sizeof(off)), 0);
    extent_t *cur = bin->slabcur;
    unsigned char *p = malloc(t.size);
    cr_assert(p != NULL && tu_slab_of(p) == cur, "the region did not come from the current slab");
    memset(p, 0x5a, t.size);
    cr_assert_eq(cur->idle_scans, 0);
    for (unsigned i = 0; i < 3; i++)
        arena_decay(arenas[x], now += period_ns + 1, SIZE_MAX);
    cr_assert_eq(cur->idle_scans, 0, "a settled bin's slab was inspected %u times", cur->idle_scans);
    cr_assert(ma_load_relaxed(&bin->slabs_settled));

    /* Freed, the region leaves its page free again: the bin is walked, and
     * the page purged once the slab has been idle for the decay time. */
    free(p);
    cr_assert_eq(mallctl("thread.tcache.enabled", NULL, NULL, &on, sizeof(on)), 0);
    cr_assert_not(ma_load_relaxed(&bin->slabs_settled), "a free into a slab left the bin settled");
    for (rounds = 0; inner_resident(&t) != 0 && rounds < 20; rounds++)
        arena_decay(arenas[x], now += period_ns + 1, SIZE_MAX);
    cr_assert_eq(inner_resident(&t), 0, "the freed region's page still resident after %u periods", rounds);
    cr_assert_geq(rounds, 4, "purged after %u inspections", rounds);
    inner_teardown(&t);
    inner_arena_leave(x, home);
}

/* A visit that purged all it may stops, and the next visit of the round
 * goes on from there: after the inspection, each slab is visited once
 * more at most, not the slabs purged already again on every visit (about
 * n^2 / (2 SLAB_VISIT_RANGES) visits for n slabs: a program that freed
 * most of a large heap spent most of its time there). */
Test(decay, visits_after_a_full_one_go_on_where_it_stopped)
{
    const unsigned decay_ms = 400;
    unsigned home;
    inner_t t;
    unsigned x = inner_enter_setup(&t, &home, decay_ms);
    const uint64_t period_ns = (uint64_t)decay_ms * 1000000ull / 4;
    uint64_t now = decay_now_ns();
    /* Idle for the decay time: the inspections only count. */
    for (unsigned i = 0; i < 4; i++)
        arena_decay(arenas[x], now += period_ns + 1, SIZE_MAX);
    cr_assert_neq(inner_resident(&t), 0, "purged before the slabs had been idle for the decay time");
    const uint64_t visited0 = ma_load_relaxed(&arenas[x]->slabs_visited);
    unsigned ranges = 0;
    for (unsigned i = 0; i < t.nslabs; i++)
        ranges += (unsigned)__builtin_popcountll(t.slab[i]->purged_pages) == 0;
    /* One whole round: the inspection, then as many visits as it takes. */
    arena_decay(arenas[x], now += period_ns + 1, SIZE_MAX);
    cr_assert_eq(inner_resident(&t), 0, "a whole round left free pages inside slabs resident");
    uint64_t visits = ma_load_relaxed(&arenas[x]->slabs_visited) - visited0, slabs = 0;
    for (unsigned b = 0; b < SC_NBINS; b++) /* the round visits every bin of the arena */
        slabs += arenas[x]->bins[b].stats.curslabs;
    cr_assert_geq(ranges, SLAB_VISIT_RANGES, "%u slabs to purge: one visit would do", ranges);
    /* The inspection visits every slab and purges SLAB_VISIT_RANGES runs
     * (at least half as many slabs: a kept region leaves at most two runs);
     * after it each slab left is visited once. */
    cr_assert_leq(visits, slabs + ranges - SLAB_VISIT_RANGES / 2,
                  "%" PRIu64 " slab inspections to purge inside %u slabs (%" PRIu64 " in the arena)", visits, ranges,
                  slabs);
    inner_teardown(&t);
    inner_arena_leave(x, home);
}

/* Makes want slabs of bin in this thread's arena and keeps the first
 * region of each (in keep[], written 0x5c in full), freeing the rest: the
 * slabs stay non-full, with free pages. */
static void kept_slabs_setup(unsigned bin, unsigned want, extent_t **slab, void **keep)
{
    const unsigned nregs = sc_bin_info[bin].nregs;
    const size_t size = sc_bin_info[bin].reg_size, n = (size_t)(want + 2) * nregs;
    void **ps = mmap(NULL, n * sizeof(void *), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(ps, MAP_FAILED);
    for (size_t i = 0; i < n; i++) {
        cr_assert_not_null(ps[i] = malloc(size));
        memset(ps[i], 0x5c, size);
    }
    unsigned nslabs = 0;
    for (size_t i = 0; i < n && nslabs < want; i++) {
        extent_t *s = tu_slab_of(ps[i]);
        if ((uintptr_t)ps[i] == s->addr) {
            slab[nslabs] = s;
            keep[nslabs++] = ps[i];
            ps[i] = NULL;
        }
    }
    for (size_t i = 0; i < n; i++)
        free(ps[i]);
    cr_assert_eq(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    munmap(ps, n * sizeof(void *));
    cr_assert_eq(nslabs, want, "only %u slabs of %zu B", nslabs, size);
}

/* How many of the n slabs have had free pages purged. */
static unsigned slabs_with_purged_pages(extent_t *const *slab, unsigned n)
{
    unsigned purged = 0;
    for (unsigned i = 0; i < n; i++)
        purged += slab[i]->purged_pages != 0;
    return purged;
}

static void kept_slabs_teardown(unsigned bin, unsigned n, void **keep)
{
    const size_t size = sc_bin_info[bin].reg_size;
    for (unsigned i = 0; i < n; i++) {
        cr_assert_eq(((unsigned char *)keep[i])[size - 1], 0x5c);
        free(keep[i]);
    }
}

/* A bin of many non-full slabs: a decay tick walks SLAB_TICK_SLABS of
 * them at most (an inspection of the whole bin in one tick stalled a
 * malloc for as long as the bin was large), and the next ticks go on with
 * the inspection where it paused: each slab is inspected once per period,
 * not twice, and none is left out. The clock is the test's. */
Test(decay, a_tick_inspects_a_bounded_number_of_slabs_and_the_next_go_on)
{
    enum { WANT = 3 * SLAB_TICK_SLABS };
    const unsigned decay_ms = 400;
    unsigned home, x = inner_arena_enter(&home, -1, -1); /* decay off while made, as above */
    const unsigned bin = inner_class(false);
    static extent_t *slab[WANT];
    static void *keep[WANT];
    static unsigned char scans[WANT];
    kept_slabs_setup(bin, WANT, slab, keep);
    set_decay(x, decay_ms, 0);

    const uint64_t period_ns = (uint64_t)decay_ms * 1000000ull / 4;
    const size_t tick_pages = (size_t)16 << (20 - LG_PAGE);
    uint64_t now = decay_now_ns() + period_ns + 1;
    for (unsigned i = 0; i < WANT; i++)
        scans[i] = slab[i]->idle_scans;
    uint64_t v0 = ma_load_relaxed(&arenas[x]->slabs_visited);
    arena_decay(arenas[x], now, tick_pages);
    uint64_t first = ma_load_relaxed(&arenas[x]->slabs_visited) - v0;
    cr_assert_gt(first, 0, "the tick inspected nothing");
    cr_assert_leq(first, SLAB_TICK_SLABS + 1, "one tick walked %" PRIu64 " slabs (the budget is %d)", first,
                  SLAB_TICK_SLABS);
    /* The same period's next ticks finish the inspection, and then walk
     * no slab again: each slab is counted once. */
    for (unsigned i = 0; i < 2 * WANT / SLAB_TICK_SLABS + 2; i++)
        arena_decay(arenas[x], now, tick_pages);
    unsigned once = 0, twice = 0;
    for (unsigned i = 0; i < WANT; i++) {
        once += slab[i]->idle_scans == MA_MIN(scans[i] + 1, SLAB_IDLE_SCANS);
        twice += slab[i]->idle_scans > scans[i] + 1;
    }
    cr_assert_eq(twice, 0, "%u slabs inspected twice in one period", twice);
    cr_assert_eq(once, WANT, "%u of %u slabs inspected in the period", once, WANT);
    /* Ticks over the next periods purge the free pages of every slab. */
    for (unsigned p = 0; p < 2 * SLAB_IDLE_SCANS; p++) {
        now += period_ns + 1;
        for (unsigned i = 0; i < 2 * WANT / SLAB_TICK_SLABS + 2 + WANT / SLAB_VISIT_RANGES; i++)
            arena_decay(arenas[x], now, tick_pages);
    }
    unsigned purged = slabs_with_purged_pages(slab, WANT);
    cr_assert_eq(purged, WANT, "free pages purged in %u of %u slabs", purged, WANT);
    kept_slabs_teardown(bin, WANT, keep);
    inner_arena_leave(x, home);
}

/* Ticks too few to finish a round of slab visits per period (here one tick
 * per period, and a first bin that takes three): a new round waits for
 * the last one to be done, so the bins after the large one are inspected
 * too, and their free pages purged. Starting over at the first bin each
 * period, the rounds never got past it. */
Test(decay, scarce_ticks_still_reach_every_bin)
{
    enum { WANT = 3 * SLAB_TICK_SLABS };
    const unsigned decay_ms = 400;
    unsigned home, x = inner_arena_enter(&home, -1, -1);
    const unsigned late = inner_class(false);
    unsigned early = 0;
    while (early < late && sc_bin_info[early].slab_pages < 2)
        early++;
    cr_assert_lt(early, late, "no class of multi-page slabs before %u", late);
    static extent_t *slab[WANT];
    static void *keep[WANT];
    kept_slabs_setup(early, WANT, slab, keep);
    inner_t t;
    inner_setup(&t, x, late);
    set_decay(x, decay_ms, 0);

    const uint64_t period_ns = (uint64_t)decay_ms * 1000000ull / 4;
    const size_t tick_pages = (size_t)16 << (20 - LG_PAGE);
    uint64_t now = decay_now_ns();
    unsigned ticks = 0;
    const unsigned max_ticks = 4 * (SLAB_IDLE_SCANS + 2) * (WANT / SLAB_TICK_SLABS + 2);
    bool off = false, on = true;
    cr_assert_eq(mallctl("thread.tcache.enabled", NULL, NULL, &off, sizeof(off)), 0);
    while (inner_resident(&t) != 0 && ticks < max_ticks) {
        /* A region freed into the large bin each period: it never
         * settles, so its inspections never stop. */
        free(malloc(sc_bin_info[early].reg_size));
        arena_decay(arenas[x], now += period_ns + 1, tick_pages);
        ticks++;
    }
    cr_assert_eq(mallctl("thread.tcache.enabled", NULL, NULL, &on, sizeof(on)), 0);
    cr_assert_eq(inner_resident(&t), 0, "the later bin's free pages still resident after %u ticks", ticks);
    inner_teardown(&t);
    kept_slabs_teardown(early, WANT, keep);
    inner_arena_leave(x, home);
}

/* A purge of everything (arena.<i>.purge, malloc_trim) and a whole decay
 * round (the background thread, arena.<i>.decay) let go of a bin's lock
 * every SLAB_TICK_SLABS slabs at most, and go on where they stopped: the
 * lock is held for bounded work whoever purges, and every slab's free
 * pages are purged all the same. Before, both walked the whole bin in one
 * hold, and a purge of everything also purged every run of pages it found
 * there. */
Test(decay, a_whole_purge_lets_go_of_the_bin_lock_between_bounded_visits)
{
    enum { WANT = 3 * SLAB_TICK_SLABS };
    const unsigned decay_ms = 400;
    unsigned home, x = inner_arena_enter(&home, -1, -1);
    const unsigned bin = inner_class(false);
    static extent_t *slab[WANT];
    static void *keep[WANT];
    for (int whole_round = 0; whole_round < 2; whole_round++) {
        const char *how = whole_round ? "a whole decay round" : "a purge of everything";
        kept_slabs_setup(bin, WANT, slab, keep);
        ma_store_relaxed(&arenas[x]->slabs_visit_max, 0);
        if (!whole_round) {
            arena_purge(arenas[x]);
            arena_purge(arenas[x]); /* nothing left to purge: it only walks */
        } else {
            set_decay(x, decay_ms, 0);
            const uint64_t period_ns = (uint64_t)decay_ms * 1000000ull / 4;
            uint64_t now = decay_now_ns();
            for (unsigned p = 0; p < 2 * SLAB_IDLE_SCANS; p++)
                arena_decay(arenas[x], now += period_ns + 1, SIZE_MAX);
        }
        uint64_t most = ma_load_relaxed(&arenas[x]->slabs_visit_max);
        cr_assert_gt(most, 0, "%s walked no slab", how);
        cr_assert_leq(most, SLAB_TICK_SLABS + 1, "%s walked %" PRIu64 " slabs under one hold of the lock", how,
                      most);
        unsigned purged = slabs_with_purged_pages(slab, WANT);
        cr_assert_eq(purged, WANT, "%s purged free pages in %u of %u slabs", how, purged, WANT);
        kept_slabs_teardown(bin, WANT, keep);
        set_decay(x, -1, -1);
    }
    inner_arena_leave(x, home);
}

Test(decay, free_pages_of_slabs_in_use_stay_with_decay_minus_one)
{
    unsigned home;
    inner_t t;
    unsigned x = inner_enter_setup(&t, &home, -1);
    size_t left = inner_decay_until_purged(&t, now_ms() + 500);
    cr_assert_geq(left, t.written, "decay -1 purged pages inside slabs");
    inner_teardown(&t);
    inner_arena_leave(x, home);
}

/* ---------------------------------------------------------------------
 * Options read at startup: helpers/decay_probe under LD_PRELOAD.
 */

static const char *abs_build(const char *rel, char *out, size_t outlen)
{
    char dir[PATH_MAX];
    cr_assert_not_null(realpath(tu_build_dir(), dir), "build dir %s", tu_build_dir());
    snprintf(out, outlen, "%s/%s", dir, rel);
    return out;
}

/* Run decay_probe ARGS with MYALLOC_CONF=conf; its key=value output in out. */
static void probe(const char *conf, const char *args, char *out, size_t outlen)
{
    char lib[PATH_MAX + 32], bin[PATH_MAX + 32], cmd[3 * PATH_MAX];
    abs_build("libmyalloc.so", lib, sizeof(lib));
    abs_build("helpers/decay_probe", bin, sizeof(bin));
    snprintf(cmd, sizeof(cmd), "MYALLOC_CONF='%s' LD_PRELOAD='%s' '%s' %s", conf, lib, bin, args);
    int rc = tu_run(cmd, out, outlen);
    cr_assert_eq(rc, 0, "%s: exit %d\n%s", cmd, rc, out);
    cr_assert_null(strstr(out, "<myalloc>"), "%s complained:\n%s", cmd, out);
}

static long long kv(const char *out, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "%s=", key);
    const char *s = out;
    while ((s = strstr(s, pat)) != NULL) {
        if (s == out || s[-1] == '\n')
            return strtoll(s + strlen(pat), NULL, 10);
        s++;
    }
    cr_assert_fail("no %s in:\n%s", key, out);
    return 0;
}

static void kv_str(const char *out, const char *key, char *val, size_t vallen)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\n%s=", key);
    char buf[8192 + 1];
    snprintf(buf, sizeof(buf), "\n%s", out);
    const char *s = strstr(buf, pat);
    cr_assert_not_null(s, "no %s in:\n%s", key, out);
    s += strlen(pat);
    size_t n = strcspn(s, "\n");
    snprintf(val, vallen, "%.*s", (int)MA_MIN(n, vallen - 1), s);
}

/* retain:false: a chunk whose pages are all purged goes back to the OS
 * (stats.mapped and the size column of /proc/self/statm drop by the GiB);
 * retain:true (the default) keeps the address space (stats.mapped stays,
 * stats.retained holds it) and only the pages go. */
Test(decay, retain_false_unmaps_a_freed_gib_chunk)
{
    char out[8192];
    probe("retain:false", "retain", out, sizeof(out));
    long long mapped0 = kv(out, "mapped0"), mapped1 = kv(out, "mapped1"), mapped2 = kv(out, "mapped2");
    long long vsz1 = kv(out, "vsz1"), vsz2 = kv(out, "vsz2"), rss1 = kv(out, "rss1"), rss2 = kv(out, "rss2");
    cr_assert_geq(mapped1 - mapped0, (long long)GIB, "retain:false: mapped %lld -> %lld", mapped0, mapped1);
    cr_assert_geq(mapped1 - mapped2, (long long)GIB, "retain:false: stats.mapped %lld -> %lld after the purge",
                  mapped1, mapped2);
    cr_assert_geq(vsz1 - vsz2, (long long)GIB, "retain:false: statm size %lld -> %lld after the purge", vsz1, vsz2);
    cr_assert_geq(rss1 - rss2, (long long)GIB * 9 / 10);

    probe("retain:true", "retain", out, sizeof(out));
    mapped1 = kv(out, "mapped1");
    mapped2 = kv(out, "mapped2");
    vsz1 = kv(out, "vsz1");
    vsz2 = kv(out, "vsz2");
    cr_assert_eq(mapped2, mapped1, "retain:true: stats.mapped %lld -> %lld", mapped1, mapped2);
    cr_assert_lt(vsz1 - vsz2, (long long)GIB / 2, "retain:true: statm size %lld -> %lld", vsz1, vsz2);
    cr_assert_geq(kv(out, "retained2"), (long long)GIB);
    cr_assert_geq(kv(out, "rss1") - kv(out, "rss2"), (long long)GIB * 9 / 10);
}

/* thp:never / thp:always: the heap's mappings carry VmFlags nh / hg in
 * /proc/self/smaps; thp:default madvises neither. */
Test(decay, thp_option_shows_in_smaps_vmflags)
{
    char out[8192], fs[256], fl[256];
    struct {
        const char *conf, *want, *not;
    } cases[] = {
        {"thp:never", " nh ", " hg "},
        {"thp:always", " hg ", " nh "},
        {"thp:default", NULL, NULL},
    };
    for (size_t i = 0; i < MA_ARRAY_LEN(cases); i++) {
        probe(cases[i].conf, "thp", out, sizeof(out));
        kv_str(out, "small_flags", fs, sizeof(fs));
        kv_str(out, "large_flags", fl, sizeof(fl));
        const char *flags[2] = {fs, fl}, *what[2] = {"small object", "large object"};
        for (int k = 0; k < 2; k++) {
            if (cases[i].want != NULL) {
                cr_assert_not_null(strstr(flags[k], cases[i].want), "%s: %s's mapping has VmFlags \"%s\"",
                                   cases[i].conf, what[k], flags[k]);
                cr_assert_null(strstr(flags[k], cases[i].not), "%s: %s's mapping has VmFlags \"%s\"",
                               cases[i].conf, what[k], flags[k]);
            } else {
                cr_assert(strstr(flags[k], " hg ") == NULL && strstr(flags[k], " nh ") == NULL,
                          "%s: %s's mapping has VmFlags \"%s\"", cases[i].conf, what[k], flags[k]);
            }
        }
    }
}

/* background_thread:true: with the default decay time, 512 MiB freed by a
 * program that then goes idle (thread.idle, then no allocation at all) go
 * back within the decay time plus slack. A live ballast as large as what is
 * freed keeps the dirty pages under the pools' dirty cap, so only decay can
 * give them back; without the background thread the same program keeps
 * them (nothing else runs purging while it is idle). thread.idle is part
 * of going idle here: a thread's cache holds objects that keep their slabs
 * in use (with 64 KiB pages a few hundred MiB of slabs for a few MiB of
 * cached objects), and only the thread itself can give those back. */
Test(decay, background_thread_purges_while_idle)
{
    char out[8192], args[64];
    const long mb = 512;
    /* This process runs with the default decay times (malloc_conf above
     * sets only narenas), as the probe does. */
    const int deadline_ms = (int)ctl_ssize("opt.dirty_decay_ms") + DECAY_SLACK_MS;
    snprintf(args, sizeof(args), "idle %ld %d thread.idle ballast", mb, deadline_ms);
    probe("background_thread:true", args, out, sizeof(out));
    long long dropped = kv(out, "dropped_ms");
    cr_log_info("background thread: RSS back after %lld ms", dropped);
    cr_assert_geq(dropped, 0, "background_thread:true: RSS still %lld MiB over the start %d ms after freeing %ld MiB\n%s",
                  (kv(out, "rss_end") - kv(out, "rss0")) >> 20, deadline_ms, mb, out);
    cr_assert_geq(kv(out, "rss_freed") - kv(out, "rss0"), (long long)(mb << 20) / 2,
                  "RSS dropped at the frees already: nothing left for the background thread to show\n%s", out);

    snprintf(args, sizeof(args), "idle %ld %d thread.idle ballast", mb, 2000);
    probe("background_thread:false", args, out, sizeof(out));
    cr_assert_eq(kv(out, "dropped_ms"), -1, "without the background thread, idle memory was purged\n%s", out);
}

/* background_thread:true does not keep a process alive: when main calls
 * pthread_exit, the process ends with its last thread, and the background
 * thread must end then too (it once waited for ever, as jemalloc's does),
 * but not before: while another thread lives, it stays. A hang is killed
 * by timeout(1) and fails the test. */
Test(decay, background_thread_ends_with_the_last_thread, .timeout = 60)
{
    char out[4096], lib[PATH_MAX + 32], bin[PATH_MAX + 32], cmd[3 * PATH_MAX];
    abs_build("libmyalloc.so", lib, sizeof(lib));
    abs_build("helpers/decay_probe", bin, sizeof(bin));
    snprintf(cmd, sizeof(cmd), "timeout 20 env MYALLOC_CONF=background_thread:true LD_PRELOAD='%s' '%s' main_exits", lib,
             bin);
    int rc = tu_run(cmd, out, sizeof(out));
    cr_assert_eq(rc, 0, "%s: exit %d (124: it did not end)\n%s", cmd, rc, out);
    cr_assert_eq(kv(out, "main_gone"), 1, "main did not exit\n%s", out);
    cr_assert_eq(kv(out, "running"), 1, "the background thread ended while a thread was left\n%s", out);
}

/* The dirty cap: a program that frees (nearly) all of its heap and goes
 * idle gets the memory back with default options (no background thread):
 * a pool keeps at most max(twice its active pages, 16 MiB) dirty, purged as the
 * frees happen. The same program with dirty_decay_ms:-1 keeps it all. */
Test(decay, freeing_the_heap_gives_it_back_without_a_background_thread)
{
    char out[8192], args[64];
    const long mb = 512;
    snprintf(args, sizeof(args), "idle %ld %d thread.idle", mb, 0);
    probe("background_thread:false", args, out, sizeof(out));
    long long left = kv(out, "rss_freed") - kv(out, "rss0");
    cr_log_info("dirty cap: %lld MiB left resident after freeing %ld MiB", left >> 20, mb);
    cr_assert_lt(left, (long long)(mb << 20) / 10, "%lld MiB of the %ld MiB freed still resident\n%s", left >> 20, mb, out);

    probe("background_thread:false,dirty_decay_ms:-1", args, out, sizeof(out));
    left = kv(out, "rss_freed") - kv(out, "rss0");
    cr_assert_gt(left, (long long)(mb << 20) * 9 / 10, "dirty_decay_ms:-1 purged: only %lld MiB of %ld MiB still resident\n%s",
                 left >> 20, mb, out);
}

/* ---------------------------------------------------------------------
 * Thread caches that let go.
 */

static unsigned ncached_now(unsigned ind)
{
    tsd_t *tsd = tsd_fetch();
    return ind < tsd->tcache_nbins && tsd->tcache_enabled ? cache_bin_ncached(&tsd->bins[ind]) : 0;
}

static unsigned ncached_total(void)
{
    tsd_t *tsd = tsd_fetch();
    unsigned n = 0;
    for (unsigned i = 0; tsd->tcache_enabled && i < tsd->tcache_nbins; i++)
        n += cache_bin_ncached(&tsd->bins[i]);
    return n;
}

/* thread.idle empties the calling thread's cache: the arena's curregs of
 * the class goes back to what it was before the burst. */
Test(decay, thread_idle_flushes_the_calling_threads_cache)
{
    unsigned a = my_arena();
    const size_t size = 2000;
    unsigned ind = sc_size2index(size);
    cr_assert_lt(ind, SC_NBINS);
    size_t cur0 = bin_curregs(a, ind);
    enum { N = 300 };
    void *ps[N];
    for (int i = 0; i < N; i++) {
        ps[i] = malloc(size);
        memset(ps[i], 1, size);
    }
    for (int i = 0; i < N; i++)
        free(ps[i]);
    cr_assert_gt(ncached_now(ind), 0, "the burst's objects should be cached");
    cr_assert_gt(bin_curregs(a, ind), cur0, "cached objects count in curregs");
    cr_assert_eq(mallctl("thread.idle", NULL, NULL, NULL, 0), 0);
    cr_assert_eq(ncached_total(), 0, "thread.idle left %u objects cached", ncached_total());
    cr_assert_leq(bin_curregs(a, ind), cur0, "curregs %zu after thread.idle, %zu before the burst",
                  bin_curregs(a, ind), cur0);
}

typedef struct {
    bool use_idle;        /* call thread.idle (else: allocate other classes) */
    unsigned arena, ind;
    size_t alloc0;        /* small.allocated of its arena before the burst */
    size_t cur0;          /* curregs of the class before the burst */
    unsigned cached_after_burst, cached_after;
    size_t gc_bytes;      /* bytes allocated to run GC steps */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool ready, done;
} idle_thread_t;

static void *idle_thread_main(void *arg)
{
    idle_thread_t *t = arg;
    t->arena = my_arena();
    const size_t size = 3000;
    t->ind = sc_size2index(size);
    t->alloc0 = astat(t->arena, "small.allocated");
    t->cur0 = bin_curregs(t->arena, t->ind);
    enum { N = 2000 };
    void **ps = malloc(N * sizeof(void *));
    for (int i = 0; i < N; i++) {
        ps[i] = malloc(size);
        memset(ps[i], 2, size);
    }
    for (int i = 0; i < N; i++)
        free(ps[i]);
    free(ps);
    t->cached_after_burst = ncached_now(t->ind);
    if (t->use_idle) {
        mallctl("thread.idle", NULL, NULL, NULL, 0);
    } else {
        /* Other classes only: every TE_GC_INTERVAL bytes allocated is one
         * GC step, one bin per step round robin; 16 rounds over every bin. */
        tsd_t *tsd = tsd_fetch();
        size_t rounds_bytes = (size_t)16 * tsd->tcache_nbins * TE_GC_INTERVAL;
        const size_t other[] = {64, 1024};
        for (size_t done = 0; done < rounds_bytes;) {
            size_t s = other[(done >> 10) & 1];
            void *volatile p = malloc(s);
            free(p);
            done += s;
        }
        t->gc_bytes = rounds_bytes;
    }
    t->cached_after = ncached_now(t->ind);
    /* Now idle: stay alive (holding whatever the cache still has). */
    pthread_mutex_lock(&t->lock);
    t->ready = true;
    pthread_cond_broadcast(&t->cond);
    while (!t->done)
        pthread_cond_wait(&t->cond, &t->lock);
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

static void idle_thread_run(idle_thread_t *t)
{
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, idle_thread_main, t), 0);
    pthread_mutex_lock(&t->lock);
    while (!t->ready)
        pthread_cond_wait(&t->cond, &t->lock);
    pthread_mutex_unlock(&t->lock);
    /* The thread is alive and idle: what does its arena still hold? */
    size_t cur = bin_curregs(t->arena, t->ind), alloc = astat(t->arena, "small.allocated");
    cr_log_info("%s: %u cached after the burst, %u after; curregs %zu (before %zu)",
                t->use_idle ? "thread.idle" : "GC", t->cached_after_burst, t->cached_after, cur, t->cur0);
    pthread_mutex_lock(&t->lock);
    t->done = true;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
    pthread_join(th, NULL);
    cr_assert_gt(t->cached_after_burst, 0, "the burst left nothing cached: nothing to test");
    cr_assert_eq(t->cached_after, 0, "%s: the idle thread still caches %u objects of the burst's class",
                 t->use_idle ? "thread.idle" : "after GC", t->cached_after);
    cr_assert_leq(cur, t->cur0, "curregs of the burst's class: %zu with the thread idle, %zu before the burst", cur,
                  t->cur0);
    if (t->use_idle)
        cr_assert_leq(alloc, t->alloc0, "small.allocated of the idle thread's arena: %zu, %zu before", alloc,
                      t->alloc0);
}

/* A thread that bursts in one class and then allocates only other classes:
 * the GC steps flush the burst's class from its cache. */
Test(decay, gc_flushes_a_class_the_thread_stopped_using)
{
    idle_thread_t t = {.use_idle = false};
    idle_thread_run(&t);
}

/* A thread that calls thread.idle and then sleeps pins nothing. */
Test(decay, an_idle_thread_pins_no_memory)
{
    idle_thread_t t = {.use_idle = true};
    idle_thread_run(&t);
}

/* ---------------------------------------------------------------------
 * Fullest slabs first (private arenas: indices no thread is bound to).
 */

#define AIND  (ARENAS_MAX - 3)
#define AIND2 (ARENAS_MAX - 4)

static void dalloc_one(unsigned b, void *p)
{
    extent_t *s = tu_slab_of(p);
    arena_dalloc_small_batch(b, &p, &s, 1);
}

static int cmp_slab_addr(const void *x, const void *y)
{
    uintptr_t a = (*(extent_t *const *)x)->addr, b = (*(extent_t *const *)y)->addr;
    return a < b ? -1 : a > b;
}

/* With slabs at various fullness, fills take the fullest slab first, even
 * when it lies at the highest address: here the highest slab has 10% of
 * its regions free, the middle ones half, the lowest 90%. Fills must drain
 * the highest first, then the middle ones (lowest address first), then
 * the lowest. */
Test(decay, fills_take_the_fullest_slab_first)
{
    arena_t *a = arena_get(AIND);
    cr_assert_not_null(a);
    unsigned b = sc_size2index(64);
    const sc_bin_info_t *bi = &sc_bin_info[b];
    bin_t *bin = &a->bins[b];
    unsigned nregs = bi->nregs;
    cr_assert_geq(nregs, 10);
    enum { NS = 6 };
    unsigned n = NS * nregs;
    void **ps = malloc(n * sizeof(void *));
    cr_assert_eq(arena_fill_small(a, b, ps, n), n);
    extent_t *cur = bin->slabcur;
    cr_assert_eq(cur->nfree, 0);
    /* The slabs other than the current one, by address. */
    extent_t *slabs[NS];
    unsigned ns = tu_slabs_besides(ps, n, cur, slabs, NS);
    cr_assert_eq(ns, NS - 1);
    qsort(slabs, ns, sizeof(slabs[0]), cmp_slab_addr);
    unsigned nfree[NS];
    for (unsigned j = 0; j < ns; j++)
        nfree[j] = j == 0 ? nregs * 9 / 10 : j == ns - 1 ? MA_MAX(nregs / 10, 1) : nregs / 2;
    /* Free that many regions of each slab (the first ones found). */
    for (unsigned j = 0; j < ns; j++) {
        unsigned left = nfree[j];
        for (unsigned i = 0; i < n && left > 0; i++) {
            if (ps[i] != NULL && tu_slab_of(ps[i]) == slabs[j]) {
                dalloc_one(b, ps[i]);
                ps[i] = NULL;
                left--;
            }
        }
        cr_assert_eq(slabs[j]->nfree, nfree[j]);
    }
    /* Expected order: the highest (fullest), the middle ones by address,
     * the lowest (emptiest). */
    unsigned order[NS], k = 0;
    order[k++] = ns - 1;
    for (unsigned j = 1; j + 1 < ns; j++)
        order[k++] = j;
    order[k++] = 0;
    for (unsigned o = 0; o < ns; o++) {
        extent_t *want = slabs[order[o]];
        unsigned cnt = nfree[order[o]];
        for (unsigned c = 0; c < cnt; c++) {
            void *p;
            cr_assert_eq(arena_fill_small(a, b, &p, 1), 1);
            cr_assert_eq(tu_slab_of(p), want,
                         "fill %u of slab %u (%u free of %u): got a region of slab %#lx, want %#lx (the %s)", c,
                         o, cnt, nregs, (unsigned long)tu_slab_of(p)->addr, (unsigned long)want->addr,
                         o == 0 ? "fullest, at the highest address" : o + 1 == ns ? "emptiest" : "half-full");
            for (unsigned i = 0; i < n; i++)
                if (ps[i] == NULL) {
                    ps[i] = p;
                    break;
                }
        }
    }
    for (unsigned i = 0; i < n; i++)
        dalloc_one(b, ps[i]);
    free(ps);
}

/* Free 90% of many slabs' regions at random, then churn (free a random
 * live object, allocate one) for a while: new objects go to the fullest
 * slabs, the emptiest drain and go back to the pool, so the number of
 * slabs falls towards what the live objects need. */
Test(decay, churn_packs_objects_into_fewer_slabs)
{
    arena_t *a = arena_get(AIND2);
    unsigned b = sc_size2index(64);
    const sc_bin_info_t *bi = &sc_bin_info[b];
    bin_t *bin = &a->bins[b];
    enum { NS = 64 };
    unsigned n = NS * bi->nregs;
    void **ps = malloc(n * sizeof(void *));
    cr_assert_eq(arena_fill_small(a, b, ps, n), n);
    uint64_t seed = 99;
    for (unsigned i = n - 1; i > 0; i--) {
        unsigned j = (unsigned)(tu_rand(&seed) % (i + 1));
        void *t = ps[i];
        ps[i] = ps[j];
        ps[j] = t;
    }
    unsigned live = n / 10;
    for (unsigned i = live; i < n; i++)
        dalloc_one(b, ps[i]);
    size_t before = bin->stats.curslabs;
    size_t need = (live + bi->nregs - 1) / bi->nregs;
    for (unsigned step = 0; step < 20 * live; step++) {
        unsigned i = (unsigned)(tu_rand(&seed) % live);
        dalloc_one(b, ps[i]);
        cr_assert_eq(arena_fill_small(a, b, &ps[i], 1), 1);
    }
    size_t after = bin->stats.curslabs - bin->nempty; /* slabs holding objects (the bin keeps some empty) */
    cr_log_info("churn: %zu slabs before, %zu after, %zu needed", before, after, need);
    cr_assert_geq(before, NS * 8 / 10, "after freeing 90%% at random most slabs still hold something");
    /* Fullest first leaves the live objects in (nearly) the fewest slabs
     * they fit in; filling the emptiest first, say, leaves about half as
     * many again. */
    cr_assert_leq(after, need + 2, "after churn %zu slabs hold %u objects that fit in %zu (%zu before)", after, live,
                  need, before);
    for (unsigned i = 0; i < live; i++)
        dalloc_one(b, ps[i]);
    free(ps);
}

/* ---------------------------------------------------------------------
 * The decay curve with a made-up clock.
 */

/* Pages freed at once decay along smoothstep: all stay for the first
 * epoch, half at the middle of the period, none after it; the allowance
 * never rises and never falls by more than 1% of the pages per epoch (the
 * steepest slope of smoothstep is 1.5 per period: 0.75% per epoch). */
Test(decay_curve, allowance_follows_a_smooth_curve)
{
    decay_t d = {0}; /* decay_init starts a zero decay; decay_reset one in use */
    const ssize_t ms = 1000;
    const uint64_t t0 = 1000000000ull;
    decay_init(&d, ms, t0);
    const size_t P = 100000;
    uint64_t iv = d.interval_ns;
    cr_assert_eq(iv, (uint64_t)ms * 1000000 / DECAY_NEPOCHS);
    size_t limit, prev = P;
    cr_assert_not(decay_advance(&d, t0 + iv / 2, P, &limit), "no epoch has ended yet");
    size_t at_half = 0;
    for (unsigned k = 1; k <= DECAY_NEPOCHS + 2; k++) {
        cr_assert(decay_advance(&d, t0 + k * iv + iv / 2, P, &limit), "epoch %u", k);
        if (k == 1)
            cr_assert_eq(limit, P, "fresh pages all stay (%zu of %zu)", limit, P);
        cr_assert_leq(limit, prev, "epoch %u: the allowance rose from %zu to %zu", k, prev, limit);
        cr_assert_leq(prev - limit, P / 100, "epoch %u: a step of %zu pages of %zu", k, prev - limit, P);
        if (k == DECAY_NEPOCHS / 2 + 1)
            at_half = limit;
        if (k == DECAY_NEPOCHS / 4 + 1) /* smoothstep(3/4) = 0.84375: not a straight line (0.75) */
            cr_assert(limit > P * 82 / 100 && limit < P * 87 / 100, "a quarter into the period %zu of %zu stay",
                      limit, P);
        prev = limit;
    }
    cr_assert(at_half > P * 45 / 100 && at_half < P * 55 / 100, "half-way through the period %zu of %zu stay",
              at_half, P);
    cr_assert_eq(limit, 0, "after the period nothing may stay");
    /* A long gap (a thread that stopped allocating): all due at once. */
    decay_reset(&d, ms, t0);
    cr_assert(decay_advance(&d, t0 + iv, P, &limit));
    cr_assert(decay_advance(&d, t0 + 10 * (uint64_t)ms * 1000000, P, &limit));
    cr_assert_eq(limit, 0);
    /* -1 and 0 never advance (-1: never purge; 0: the owner purges at free). */
    decay_reset(&d, -1, t0);
    cr_assert_not(decay_advance(&d, t0 + 100ull * 1000000000, P, &limit));
    cr_assert_eq(decay_ns_to_next_epoch(&d, t0), UINT64_MAX);
    decay_reset(&d, 0, t0);
    cr_assert_not(decay_advance(&d, t0 + 100ull * 1000000000, P, &limit));
}

#define POOL_IND (ARENAS_MAX - 2) /* no arena has this index */
static extent_pool_t pool;

/* extent_pool_init takes zero memory: a test that starts the pool again
 * clears it first (what the last start's extents held leaks). */
static void pool_start(void)
{
    memset(&pool, 0, sizeof(pool));
    extent_pool_init(&pool, POOL_IND, false);
}

/* n extents of the smallest large class freed into the pool's dirty set,
 * with an active one between each two (so that they do not coalesce);
 * keep[] gets the active ones (to free later). */
static void pool_fill_dirty(unsigned n, extent_t **keep)
{
    unsigned szind = sc_size2index(SC_LARGE_MINCLASS);
    extent_t **all = malloc(2 * n * sizeof(extent_t *));
    for (unsigned i = 0; i < 2 * n; i++) {
        bool z;
        all[i] = extent_alloc(&pool, SC_LARGE_MINCLASS, PAGE, szind, false, &z);
        cr_assert_not_null(all[i]);
    }
    for (unsigned i = 0; i < n; i++) {
        extent_dalloc(&pool, all[2 * i]);
        keep[i] = all[2 * i + 1];
    }
    free(all);
}

/* extent_decay on a private pool, driven with a made-up clock: nothing
 * goes in the first epoch, about half by the middle of the period (the
 * oldest first), everything after it; each call does at most max_pages;
 * with muzzy decay on, pages go dirty -> muzzy -> retained. */
Test(decay_curve, pool_purges_gradually_and_boundedly)
{
    pool_start();
    const ssize_t ms = 1000;
    extent_set_decay(&pool, ms, 0);
    extent_set_hold(&pool, 0); /* the curve alone: the hold is tested below */
    /* The decay clock starts at extent_set_decay: made-up times from there. */
    uint64_t t0 = pool.decay_dirty.epoch_start_ns, iv = pool.decay_dirty.interval_ns;
    enum { N = 400 };
    static extent_t *keep[N];
    /* An active ballast (never touched) as large as everything freed here
     * keeps the dirty pages under the pool's dirty cap (max(2 x active, 16
     * MiB)): only decay purges in this test. */
    bool z;
    size_t ballast_size = 2 * N * SC_LARGE_MINCLASS;
    extent_t *ballast = extent_alloc(&pool, ballast_size, PAGE, sc_size2index(ballast_size), false, &z);
    cr_assert_not_null(ballast);
    pool_fill_dirty(N, keep);
    size_t per = SC_LARGE_MINCLASS / PAGE, total = N * per;
    cr_assert_eq(pool.dirty.npages, total);
    cr_assert_eq(extent_decay(&pool, t0 + iv + iv / 2, SIZE_MAX), 0, "fresh pages purged");
    cr_assert_eq(pool.dirty.npages, total);
    /* Half-way: about half gone. */
    size_t p = extent_decay(&pool, t0 + (DECAY_NEPOCHS / 2 + 1) * iv + iv / 2, SIZE_MAX);
    cr_assert(p > total * 40 / 100 && p < total * 60 / 100, "half-way: %zu of %zu pages purged", p, total);
    cr_assert_eq(pool.dirty.npages, total - p);
    cr_assert_eq(pool.retained.npages >= p, true);
    /* Bounded work: at most max_pages (plus the rest of the last extent). */
    size_t q = extent_decay(&pool, t0 + (DECAY_NEPOCHS * 3 / 4) * iv + iv / 2, 3 * per);
    cr_assert(q > 0 && q <= 3 * per, "max_pages %zu: purged %zu", 3 * per, q);
    /* After the period: all of it, calls of max_pages at a time. */
    uint64_t tend = t0 + (DECAY_NEPOCHS + 2) * iv;
    unsigned calls = 0;
    while (pool.dirty.npages > 0 && calls < 10 * N) {
        size_t r = extent_decay(&pool, tend + calls * iv, 10 * per);
        cr_assert_leq(r, 10 * per);
        calls++;
    }
    cr_assert_eq(pool.dirty.npages, 0, "dirty pages left after the period");
    cr_assert_geq(calls, (unsigned)((total - p - q) / (10 * per)), "bounded calls");
    cr_assert_eq(pool.stats.purged_pages[0], total);
    cr_assert_eq(pool.stats.npurge[1], 0);

    /* Muzzy on: dirty -> muzzy after the dirty period, muzzy -> retained
     * after the muzzy one. */
    extent_set_decay(&pool, ms, ms);
    t0 = pool.decay_dirty.epoch_start_ns;
    cr_assert_eq(pool.decay_muzzy.epoch_start_ns, t0);
    for (unsigned i = 0; i < N; i++)
        extent_dalloc(&pool, keep[i]);
    size_t total2 = pool.dirty.npages;
    cr_assert_geq(total2, N * per);
    size_t retained_before = pool.retained.npages;
    /* Drive the clock one epoch at a time (a tick per epoch). */
    uint64_t t = t0 + iv / 2;
    size_t max_muzzy = 0;
    for (unsigned k = 1; k <= DECAY_NEPOCHS + 2; k++)
        extent_decay(&pool, t + k * iv, SIZE_MAX), max_muzzy = MA_MAX(max_muzzy, pool.muzzy.npages);
    cr_assert_eq(pool.dirty.npages, 0);
    cr_assert_gt(max_muzzy, 0, "nothing went muzzy");
    cr_assert_gt(pool.stats.npurge[0], 0);
    cr_assert_gt(pool.muzzy.npages, 0, "muzzy pages must wait for the muzzy period");
    for (unsigned k = DECAY_NEPOCHS + 3; k <= 2 * DECAY_NEPOCHS + 4; k++)
        extent_decay(&pool, t + k * iv, SIZE_MAX);
    cr_assert_eq(pool.muzzy.npages, 0, "muzzy pages left after the muzzy period");
    cr_assert_gt(pool.stats.npurge[1], 0);
    cr_assert_geq(pool.stats.purged_pages[1], total2);
    cr_assert_geq(pool.retained.npages, retained_before + total2);
}

/* A set empty now and at its last close has no decay work: ticks leave its
 * epochs alone. Pages freed after a long empty spell then decay from when
 * they came, as in pool_purges_gradually_and_boundedly: nothing in their
 * first epoch, about half by the middle of the period. */
Test(decay_curve, an_empty_set_skips_its_epochs_and_then_decays_as_usual)
{
    pool_start();
    extent_set_decay(&pool, 1000, 0);
    extent_set_hold(&pool, 0); /* as there */
    uint64_t t0 = pool.decay_dirty.epoch_start_ns, iv = pool.decay_dirty.interval_ns;
    cr_assert_eq(extent_decay(&pool, t0 + 50 * iv + iv / 2, SIZE_MAX), 0);
    cr_assert_eq(pool.decay_dirty.epoch_start_ns, t0, "an empty set's epochs advanced");
    enum { N = 400 };
    static extent_t *keep[N];
    bool z;
    size_t ballast_size = 2 * N * SC_LARGE_MINCLASS; /* under the dirty cap, as there */
    cr_assert_not_null(extent_alloc(&pool, ballast_size, PAGE, sc_size2index(ballast_size), false, &z));
    pool_fill_dirty(N, keep);
    size_t total = pool.dirty.npages;
    uint64_t t1 = t0 + 100 * iv;
    cr_assert_eq(extent_decay(&pool, t1 + iv / 2, SIZE_MAX), 0, "fresh pages purged");
    cr_assert_eq(pool.decay_dirty.epoch_start_ns, t1, "the epochs did not catch up");
    size_t p = extent_decay(&pool, t1 + (DECAY_NEPOCHS / 2) * iv + iv / 2, SIZE_MAX);
    cr_assert(p > total * 40 / 100 && p < total * 60 / 100, "half-way: %zu of %zu pages purged", p, total);
}

/* The hold (decay.h): a level noted now is held in full, then by
 * smoothstep of what is left of the window, slice by slice, and not at all
 * once the window has passed; a level at or below today's holds nothing;
 * a rise is noted in the slice it happens in; a window of 0 holds nothing. */
Test(decay_curve, the_hold_fades_along_smoothstep_over_its_window)
{
    decay_hold_t h = {0}; /* decay_hold_init too */
    const uint64_t t0 = 1000000000ull, slice = 100 * 1000000ull; /* 800 ms window */
    decay_hold_init(&h, 800, t0, 0);
    cr_assert_eq(h.bucket_ns, slice);
    const size_t P = 1000000;
    decay_hold_note(&h, P);
    cr_assert_eq(decay_hold_pages(&h, t0, 0), P, "a fresh peak is held in full");
    cr_assert_eq(decay_hold_pages(&h, t0 + slice / 2, P / 4), P - P / 4, "held above today's level");
    cr_assert_eq(decay_hold_pages(&h, t0 + slice / 2, P), 0, "nothing held at the peak itself");
    size_t prev = P;
    for (unsigned k = 1; k <= DECAY_HOLD_NBUCKETS; k++) {
        size_t got = decay_hold_pages(&h, t0 + k * slice + slice / 2, 0);
        double x = (double)(DECAY_HOLD_NBUCKETS - k) / DECAY_HOLD_NBUCKETS;
        double want = (double)P * x * x * (3 - 2 * x);
        cr_assert(fabs((double)got - want) <= 1.0, "%u slices on: %zu held, smoothstep says %.0f", k, got, want);
        cr_assert_leq(got, prev);
        prev = got;
    }
    cr_assert_eq(prev, 0, "held after the window");
    /* A later, lower peak: the larger of the two weighted differences. */
    decay_hold_init(&h, 800, t0, 0);
    decay_hold_note(&h, P);
    cr_assert_eq(decay_hold_pages(&h, t0 + 4 * slice, 0), P / 2, "half-way: smoothstep(1/2)");
    decay_hold_note(&h, P / 4);
    cr_assert_eq(decay_hold_pages(&h, t0 + 4 * slice + 1, 0), P / 2, "the older, higher peak still counts");
    /* Three slices later the older is at smoothstep(1/8) (4%) of P, the
     * newer at smoothstep(5/8) (68%) of P/4. */
    size_t got = decay_hold_pages(&h, t0 + 7 * slice + 1, 0);
    double want = (double)(P / 4) * 0.625 * 0.625 * (3 - 2 * 0.625);
    cr_assert(fabs((double)got - want) <= 1.0, "the newer peak outlasts the older: %zu held, want %.0f", got, want);
    /* A long gap: everything aged out at once. */
    cr_assert_eq(decay_hold_pages(&h, t0 + 100 * slice, 0), 0);
    /* No window. */
    decay_hold_init(&h, 0, t0, 0);
    decay_hold_note(&h, P);
    cr_assert_eq(decay_hold_pages(&h, t0, 0), 0);
}

/* The hold in a pool: pages freed by a heap that was larger a moment ago
 * outlast their decay period, fading with the peak's age; after the window
 * decay takes them all. Explicit purges and the dirty cap ignore the hold. */
Test(decay_curve, pool_decay_holds_the_pages_of_a_recent_peak)
{
    pool_start();
    extent_set_decay(&pool, 1000, 0);
    extent_set_hold(&pool, 4000); /* slices of 500 ms; peaks from now on */
    uint64_t t0 = pool.hold.bucket_start_ns, slice = pool.hold.bucket_ns;
    cr_assert_eq(slice, 500 * 1000000ull);
    enum { N = 400 };
    static extent_t *keep[N];
    bool z;
    size_t ballast_size = 2 * N * SC_LARGE_MINCLASS; /* under the dirty cap */
    cr_assert_not_null(extent_alloc(&pool, ballast_size, PAGE, sc_size2index(ballast_size), false, &z));
    pool_fill_dirty(N, keep); /* the peak: ballast + 2N extents; then N freed */
    size_t total = pool.dirty.npages;
    cr_assert_eq(total, N * (SC_LARGE_MINCLASS / PAGE));
    /* Decay learns of them at its first epoch (pages are dated by the
     * epoch in which it sees them). */
    uint64_t iv = pool.decay_dirty.interval_ns;
    cr_assert_eq(extent_decay(&pool, pool.decay_dirty.epoch_start_ns + iv + iv / 2, SIZE_MAX), 0);
    /* Three slices on (1.5 s): every freed page is past its decay period,
     * but the peak, 3 slices old, is held at smoothstep(5/8) = 0.6836. */
    size_t p = extent_decay(&pool, t0 + 3 * slice + slice / 2, SIZE_MAX);
    size_t held = pool.dirty.npages;
    cr_assert(held >= total * 67 / 100 && held <= total * 70 / 100, "1.5 s on: %zu of %zu pages held", held, total);
    cr_assert_eq(p, total - held);
    /* Half-way through the window: half held, a little at a time. */
    extent_decay(&pool, t0 + 4 * slice + slice / 2, SIZE_MAX);
    cr_assert(pool.dirty.npages >= total * 49 / 100 && pool.dirty.npages <= total * 51 / 100,
              "2 s on: %zu of %zu pages held", pool.dirty.npages, total);
    /* After the window: all gone. */
    extent_decay(&pool, t0 + 8 * slice + slice / 2, SIZE_MAX);
    cr_assert_eq(pool.dirty.npages, 0, "%zu pages held after the window", pool.dirty.npages);

    /* An explicit purge does not wait for the hold. */
    for (unsigned i = 0; i < N; i++)
        extent_dalloc(&pool, keep[i]);
    cr_assert_geq(pool.dirty.npages, total);
    extent_purge_all(&pool);
    cr_assert_eq(pool.dirty.npages, 0);
}

/* The dirty cap: whatever the decay time, a pool keeps at most max(2 x active
 * pages, 16 MiB) dirty; going over it purges (oldest first) down to half
 * of it, at the free. Under the cap nothing is purged; with -1 never. */
static size_t pool_free_many(size_t bytes, size_t extent_bytes)
{
    unsigned n = (unsigned)(bytes / extent_bytes);
    unsigned szind = sc_size2index(extent_bytes);
    extent_t **all = malloc(n * sizeof(extent_t *));
    for (unsigned i = 0; i < n; i++) {
        bool z;
        all[i] = extent_alloc(&pool, extent_bytes, PAGE, szind, false, &z);
        cr_assert_not_null(all[i]);
    }
    for (unsigned i = 0; i < n; i++)
        extent_dalloc(&pool, all[i]);
    free(all);
    return (size_t)n * (extent_bytes / PAGE);
}

Test(decay_curve, pool_caps_dirty_pages)
{
    const size_t floor_pages = ((size_t)16 << 20) / PAGE, ext = (size_t)1 << 20;
    /* Nothing else active: the cap is the 16 MiB floor. */
    pool_start();
    extent_set_decay(&pool, 10000, 0);
    size_t freed = pool_free_many((size_t)64 << 20, ext);
    cr_assert_leq(pool.dirty.npages, floor_pages, "%zu dirty pages over the %zu-page cap", pool.dirty.npages,
                  floor_pages);
    cr_assert_eq(pool.stats.purged_pages[0] + pool.dirty.npages, freed);
    cr_assert_geq(pool.stats.purged_pages[0], freed - floor_pages);
    cr_assert_gt(pool.stats.npurge[0], 0);
    cr_assert_lt(pool.stats.npurge[0], freed / (floor_pages / 2) + 2, "purged in %llu runs: not in batches",
                 (unsigned long long)pool.stats.npurge[0]);

    /* 128 MiB active (never touched): 64 MiB freed stays dirty. */
    pool_start();
    extent_set_decay(&pool, 10000, 0);
    bool z;
    size_t big = (size_t)128 << 20;
    cr_assert_not_null(extent_alloc(&pool, big, PAGE, sc_size2index(big), false, &z));
    freed = pool_free_many((size_t)64 << 20, ext);
    cr_assert_eq(pool.dirty.npages, freed, "under the cap, %zu of %zu pages purged", freed - pool.dirty.npages,
                 freed);
    cr_assert_eq(pool.stats.purged_pages[0], 0);

    /* 32 MiB active: the cap is 64 MiB. 56 MiB freed stay; 96 MiB do not. */
    for (int k = 0; k < 2; k++) {
        pool_start();
        extent_set_decay(&pool, 10000, 0);
        size_t act = (size_t)32 << 20, cap_pages = 2 * act / PAGE;
        cr_assert_not_null(extent_alloc(&pool, act, PAGE, sc_size2index(act), false, &z));
        freed = pool_free_many(k == 0 ? (size_t)56 << 20 : (size_t)96 << 20, ext);
        if (k == 0)
            cr_assert_eq(pool.stats.purged_pages[0], 0, "56 MiB freed next to 32 MiB active: %zu pages purged",
                         (size_t)pool.stats.purged_pages[0]);
        else
            cr_assert(pool.stats.purged_pages[0] > 0 && pool.dirty.npages <= cap_pages,
                      "96 MiB freed next to 32 MiB active: %zu pages dirty (cap %zu)", pool.dirty.npages, cap_pages);
    }

    /* -1: never. */
    pool_start();
    extent_set_decay(&pool, -1, -1);
    freed = pool_free_many((size_t)64 << 20, ext);
    cr_assert_eq(pool.dirty.npages, freed);
    cr_assert_eq(pool.stats.purged_pages[0], 0);
}

/* Decay 0: pages are purged in extent_dalloc; -1: never, however late. */
Test(decay_curve, pool_zero_and_minus_one)
{
    pool_start();
    enum { N = 8 };
    extent_t *keep[N];
    extent_set_decay(&pool, 0, 0);
    pool_fill_dirty(N, keep);
    cr_assert_eq(pool.dirty.npages, 0, "decay 0 left dirty pages");
    cr_assert_eq(pool.muzzy.npages, 0);
    cr_assert_eq(pool.stats.purged_pages[0], N * (SC_LARGE_MINCLASS / PAGE));
    for (unsigned i = 0; i < N; i++)
        extent_dalloc(&pool, keep[i]);
    cr_assert_eq(pool.dirty.npages, 0);

    pool_start();
    extent_set_decay(&pool, -1, -1);
    pool_fill_dirty(N, keep);
    size_t d = pool.dirty.npages;
    cr_assert_eq(d, N * (SC_LARGE_MINCLASS / PAGE));
    cr_assert_eq(extent_decay(&pool, decay_now_ns() + 3600ull * 1000000000, SIZE_MAX), 0);
    cr_assert_eq(pool.dirty.npages, d);
    cr_assert_eq(extent_decay_ns_to_next(&pool, decay_now_ns()), UINT64_MAX);
    /* An explicit purge still purges. */
    cr_assert_eq(extent_purge_all(&pool), d);
    cr_assert_eq(pool.dirty.npages, 0);
}
