/*
 * Thread state, thread caches and the byte-driven event ticker, through
 * the public API and tsd_get().
 *
 * Each test runs in its own process. The fixture turns the periodic cache
 * GC event off for the test's thread (gc_next = never) so that no GC step
 * runs behind a test's back; the GC tests call tcache_gc_step themselves.
 */
#include <inttypes.h>
#include <math.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>

#include "arena/base.h"
#include "core/core.h"
#include "myalloc.h"
#include "tcache/tcache.h"
#include "test_util.h"
#include "test_slab_util.h"

/* Several arenas whatever the machine (the default is 4 per CPU): some
 * tests need an arena of their own or objects of another arena. */
const char *malloc_conf = "narenas:4";

static tsd_t *tsd;

static void setup(void)
{
    free(malloc(1));
    tsd = tsd_fetch();
    cr_assert(tsd_nominal(tsd));
    tsd->te.next[TE_GC] = TE_NEVER;
    tsd_update_next_event(tsd);
}

TestSuite(tcache, .init = setup);
TestSuite(te, .init = setup);

static cache_bin_t *bin_of(unsigned ind) { return &tsd->bins[ind]; }
static unsigned ncached(unsigned ind) { return cache_bin_ncached(bin_of(ind)); }
static bin_stats_t *arena_bin_stats(unsigned ind) { return &tsd_arena(tsd)->bins[ind].stats; }

/* ---------------------------------------------------------------------
 * thread_allocated / thread_deallocated
 */

/* Live page runs of large class SC_NBINS + c in arena a. */
static size_t large_live(const arena_t *a, unsigned c)
{
    large_stats_t s;
    arena_large_read(a, c, &s);
    return s.curlextents;
}

Test(tcache, thread_counters_sum_usable_sizes)
{
    void *ps[64];
    unsigned n = 0;
    uint64_t ea = 0, ed = 0;
    const uint64_t a0 = tsd->thread_allocated, d0 = tsd->thread_deallocated;

    /* Nothing in here may allocate except the calls being counted. */
    const size_t sizes[] = {0, 1, 15, 16, 17, 100, 1000, 4096, 5000, SC_SMALL_MAXCLASS,
                            SC_LARGE_MINCLASS, 3 * SC_LARGE_MINCLASS + 1, (size_t)1 << 20, (size_t)10 << 20};
    for (size_t i = 0; i < MA_ARRAY_LEN(sizes); i++) {
        ps[n] = malloc(sizes[i]);
        ea += malloc_usable_size(ps[n]);
        n++;
    }
    for (size_t i = 0; i < 5; i++) {
        ps[n] = calloc(i + 1, 37 * i + 3);
        ea += malloc_usable_size(ps[n]);
        n++;
    }
    ps[n] = calloc(1, 3 * SC_LARGE_MINCLASS);
    ea += malloc_usable_size(ps[n]);
    n++;
    /* Aligned. */
    void *p;
    posix_memalign(&p, 64, 100);
    ps[n++] = p;
    ea += malloc_usable_size(p);
    ps[n] = aligned_alloc(4096, 100);
    ea += malloc_usable_size(ps[n++]);
    ps[n] = aligned_alloc(4 * PAGE, 3 * PAGE);
    ea += malloc_usable_size(ps[n++]);
    ps[n] = memalign(256, 1000);
    ea += malloc_usable_size(ps[n++]);
    ps[n] = valloc(10);
    ea += malloc_usable_size(ps[n++]);
    /* realloc: same class (in place), small -> small, small -> large,
     * large shrink and growth, large -> small, and to size 0 (a free). */
    const size_t rs[] = {101, 300, 2 * SC_LARGE_MINCLASS, SC_LARGE_MINCLASS, 6 * SC_LARGE_MINCLASS, 50};
    p = malloc(100);
    ea += malloc_usable_size(p);
    for (size_t i = 0; i < MA_ARRAY_LEN(rs); i++) {
        size_t old = malloc_usable_size(p);
        void *q = realloc(p, rs[i]);
        ea += malloc_usable_size(q);
        ed += old;
        p = q;
    }
    ed += malloc_usable_size(p);
    void *z = realloc(p, 0);
    p = reallocarray(NULL, 10, 10);
    ea += malloc_usable_size(p);
    ps[n++] = p;
    const uint64_t a1 = tsd->thread_allocated, d1 = tsd->thread_deallocated;
    for (unsigned i = 0; i < n; i++) {
        ed += malloc_usable_size(ps[i]);
        free(ps[i]);
    }
    free(NULL);
    const uint64_t d2 = tsd->thread_deallocated;
    (void)d1;
    cr_assert_null(z, "realloc(p, 0) frees");
    cr_assert_eq(a1 - a0, ea, "thread_allocated grew by %llu, usable sizes sum to %llu",
                 (unsigned long long)(a1 - a0), (unsigned long long)ea);
    cr_assert_eq(tsd->thread_allocated, a1, "free must not change thread_allocated");
    cr_assert_eq(d2 - d0, ed, "thread_deallocated grew by %llu, usable sizes sum to %llu",
                 (unsigned long long)(d2 - d0), (unsigned long long)ed);
}

Test(tcache, thread_counters_with_the_cache_off)
{
    tcache_set_enabled(tsd, false);
    const uint64_t a0 = tsd->thread_allocated, d0 = tsd->thread_deallocated;
    uint64_t ea = 0, ed = 0;
    void *ps[16];
    for (int i = 0; i < 16; i++) {
        ps[i] = malloc((size_t)i * 333);
        ea += malloc_usable_size(ps[i]);
    }
    for (int i = 0; i < 16; i++) {
        ed += malloc_usable_size(ps[i]);
        free(ps[i]);
    }
    cr_assert_eq(tsd->thread_allocated - a0, ea);
    cr_assert_eq(tsd->thread_deallocated - d0, ed);
    tcache_set_enabled(tsd, true);
}

/* ---------------------------------------------------------------------
 * Cache bins.
 */

Test(tcache, freed_objects_are_cached_and_reused_lifo)
{
    const size_t S = 64;
    const unsigned ind = sc_size2index(S);
    cr_assert(tcache_serves(tsd, ind));
    enum { N = 10 };
    void *ps[N];
    tcache_flush(tsd);
    for (int i = 0; i < N; i++)
        ps[i] = malloc(S);
    unsigned n0 = ncached(ind);
    cr_assert_leq(n0 + N, tcache_bin_cap(tsd, ind));
    size_t curregs0 = arena_bin_stats(ind)->curregs;
    for (int i = 0; i < N; i++)
        free(ps[i]);
    cr_assert_eq(ncached(ind), n0 + N, "%u cached after %d frees, was %u", ncached(ind), N, n0);
    cr_assert_eq(arena_bin_stats(ind)->curregs, curregs0, "cached objects stay with the thread");
    /* The most recently freed first. */
    for (int i = 0; i < N; i++)
        cr_assert_eq(bin_of(ind)->head[i], ps[N - 1 - i], "stack slot %d", i);
    for (int i = N - 1; i >= 0; i--) {
        void *p = malloc(S);
        cr_assert_eq(p, ps[i], "malloc returned %p, want the most recently freed %p", p, ps[i]);
    }
    cr_assert_eq(ncached(ind), n0);
    for (int i = 0; i < N; i++)
        free(ps[i]);
}

Test(tcache, lookup_table_offsets_address_the_cache_bins)
{
    /* malloc's fast path finds a class's bin at bins + bin_off, and free's
     * at &bin_none + (class + 1) * sizeof(cache_bin_t). */
    for (size_t size = 0; size <= SC_LOOKUP_MAXCLASS; size += QUANTUM / 2) {
        unsigned ind = sc_size2index(size);
        const sc_lookup_t *lk = sc_lookup(size);
        cr_assert_eq((char *)tsd->bins + lk->bin_off, (char *)&tsd->bins[ind], "size %zu", size);
        cr_assert_eq(lk->usize, sc_index2size(ind));
    }
    cr_assert_eq((char *)&tsd->bin_none + sizeof(cache_bin_t), (char *)&tsd->bins[0]);
}

Test(tcache, tcache_max_decides_the_cached_classes)
{
    /* Every class up to tcache_max (default 32 KiB), none above. */
    size_t max = MA_MIN(tcache_opt_max, TCACHE_MAXCLASS_LIMIT);
    for (unsigned ind = 0; ind < SC_NSIZES && sc_index2size(ind) <= 2 * max; ind++)
        cr_assert_eq(tcache_serves(tsd, ind), sc_index2size(ind) <= max, "class %zu, tcache_max %zu",
                     sc_index2size(ind), max);
    cr_assert_eq(tcache_maxclass, sc_index2size(tcache_nbins - 1));
    cr_assert_leq(tcache_maxclass, max);
    cr_assert_gt(sc_index2size(tcache_nbins), max);
}

Test(tcache, large_classes_are_cached_too)
{
    unsigned ind = SC_NBINS;
    if (MA_MIN(tcache_opt_max, TCACHE_MAXCLASS_LIMIT) < SC_LARGE_MINCLASS) {
        cr_assert_not(tcache_serves(tsd, ind));
        return; /* no large class is small enough for the cache here */
    }
    cr_assert(tcache_serves(tsd, ind), "tcache_max %zu covers class %zu", tcache_opt_max, SC_LARGE_MINCLASS);
    tcache_flush(tsd);
    arena_t *a = tsd_arena(tsd);
    void *p = malloc(SC_LARGE_MINCLASS), *q = malloc(SC_LARGE_MINCLASS);
    size_t cur = large_live(a, 0);
    free(p);
    free(q);
    cr_assert_eq(ncached(ind), 2);
    cr_assert_eq(large_live(a, 0), cur, "a cached large object stays allocated");
    cr_assert_eq(malloc(SC_LARGE_MINCLASS), q);
    cr_assert_eq(malloc(SC_LARGE_MINCLASS), p);
    free(p);
    free(q);
    tcache_flush(tsd);
    cr_assert_eq(ncached(ind), 0);
    cr_assert_eq(large_live(a, 0), cur - 2);
}

Test(tcache, an_empty_bin_is_filled_by_ncached_max_shifted_by_lg_fill_div)
{
    for (unsigned ind = 0; ind < SC_NBINS && ind < tsd->tcache_nbins; ind++) {
        tcache_flush(tsd);
        bin_stats_t *st = arena_bin_stats(ind);
        uint64_t nm0 = st->nmalloc, nf0 = st->nfills;
        unsigned max = tcache_bin_cap(tsd, ind);
        unsigned div = tsd->lg_fill_div[ind]; /* earlier GC steps may have moved it */
        cr_assert(div >= 1 && div <= tcache_bin_lg_fill_max(ind));
        unsigned want = MA_MAX(max >> div, 1);
        void *p = malloc(sc_index2size(ind));
        cr_assert_eq(st->nmalloc - nm0, want, "class %zu: fill took %llu, want %u >> %u = %u", sc_index2size(ind),
                     (unsigned long long)(st->nmalloc - nm0), max, div, want);
        cr_assert_eq(st->nfills - nf0, 1);
        cr_assert_eq(ncached(ind), want - 1);
        /* A bin starts at twice its slab's regions, clamped; it may grow to
         * TCACHE_BIN_BYTES of objects (at least two slabs), clamped, and
         * the classes of a page or more to TCACHE_NSLOTS_PAGE_MAX at
         * least. */
        unsigned twice = 2 * sc_bin_info[ind].nregs;
        unsigned most = (unsigned)MA_MAX(twice, TCACHE_BIN_BYTES / sc_index2size(ind));
        most = MA_MIN(MA_MAX(most, TCACHE_NSLOTS_MIN), TCACHE_NSLOTS_SMALL_MAX);
        if (sc_index2size(ind) >= PAGE)
            most = MA_MAX(most, TCACHE_NSLOTS_PAGE_MAX);
        unsigned init = MA_MIN(MA_MIN(MA_MAX(twice, TCACHE_NSLOTS_MIN), TCACHE_NSLOTS_INIT_MAX), most);
        cr_assert_eq(tcache_bin_cap_max(ind), most, "class %zu largest capacity", sc_index2size(ind));
        cr_assert_eq(tcache_bin_cap_init(ind), init, "class %zu first capacity", sc_index2size(ind));
        cr_assert(max >= init && max <= most, "class %zu capacity %u", sc_index2size(ind), max);
        free(p);
    }
}

/* A new thread fills an eighth of a bin's starting capacity at first; a
 * bin that runs dry between GC steps fills more (up to half) after the
 * next step. Stats are per arena: the thread runs alone in its arena's bin
 * (the main thread does not use this class). */
typedef struct {
    unsigned ind;
    uint64_t first, after_dry;
} first_fill_t;

static void *first_fill_thread(void *arg)
{
    first_fill_t *f = arg;
    tsd_t *t = tsd_fetch();
    t->te.next[TE_GC] = TE_NEVER;
    tsd_update_next_event(t);
    const size_t S = sc_index2size(f->ind);
    bin_stats_t *st = &tsd_arena(t)->bins[f->ind].stats;
    uint64_t nm0 = st->nmalloc;
    void *p = malloc(S);
    f->first = st->nmalloc - nm0;
    /* Pop the rest and one more: the bin ran dry and filled again. A GC
     * step that sees it ran dry makes the next fill twice as large. */
    cache_bin_t *b = &t->bins[f->ind];
    void *q[256];
    unsigned n = 0;
    while (cache_bin_ncached(b) > 0 && n < 250)
        q[n++] = malloc(S);
    q[n++] = malloc(S);
    t->gc_cursor = f->ind;
    tcache_gc_step(t);
    while (cache_bin_ncached(b) > 0 && n < 250)
        q[n++] = malloc(S);
    nm0 = st->nmalloc;
    q[n++] = malloc(S);
    f->after_dry = st->nmalloc - nm0;
    for (unsigned i = 0; i < n; i++)
        free(q[i]);
    free(p);
    return NULL;
}

Test(tcache, a_new_thread_fills_an_eighth_of_a_bin_and_more_once_it_runs_dry)
{
    first_fill_t f = {.ind = sc_size2index(160)};
    const unsigned cap = tcache_bin_cap_init(f.ind);
    cr_assert_geq(tcache_bin_lg_fill_max(f.ind), TCACHE_LG_FILL_DIV_INIT);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, first_fill_thread, &f), 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_assert_eq(f.first, cap >> TCACHE_LG_FILL_DIV_INIT, "first fill %" PRIu64 ", want %u >> %u", f.first, cap,
                 TCACHE_LG_FILL_DIV_INIT);
    cr_assert_eq(f.after_dry, cap >> (TCACHE_LG_FILL_DIV_INIT - 1), "fill after running dry %" PRIu64 ", want %u",
                 f.after_dry, cap >> (TCACHE_LG_FILL_DIV_INIT - 1));
}

Test(tcache, a_free_into_a_full_bin_flushes_the_oldest_quarter)
{
    const size_t S = 96;
    const unsigned ind = sc_size2index(S);
    const unsigned max = tcache_bin_cap(tsd, ind);
    void **ps = malloc((max + 1) * sizeof(void *));
    for (unsigned i = 0; i <= max; i++)
        ps[i] = malloc(S);
    tcache_flush(tsd);
    for (unsigned i = 0; i < max; i++)
        free(ps[i]);
    cr_assert_eq(ncached(ind), max, "the bin is full");
    bin_stats_t *st = arena_bin_stats(ind);
    uint64_t nd0 = st->ndalloc, nfl0 = st->nflushes;
    free(ps[max]);
    unsigned nflushed = max / 4; /* the oldest quarter */
    cr_assert_eq(st->ndalloc - nd0, nflushed, "flushed %llu of %u", (unsigned long long)(st->ndalloc - nd0), max);
    cr_assert_geq(st->nflushes - nfl0, 1);
    cr_assert_eq(ncached(ind), max - nflushed + 1);
    /* What is left: the newest, in LIFO order. */
    for (unsigned k = 0; k < ncached(ind); k++)
        cr_assert_eq(bin_of(ind)->head[k], ps[max - k], "slot %u", k);
    /* The oldest went back to their slabs: their bitmap bits are free (or
     * the whole slab went back to the pool: then its pages map no slab). */
    for (unsigned i = 0; i < nflushed; i++) {
        rtree_elm_t elm = rtree_lookup((uintptr_t)ps[i]);
        if (!(elm & RTREE_SLAB))
            continue;
        extent_t *s = rtree_elm_extent(elm);
        long idx = slab_region_index(s, ind, ps[i]);
        cr_assert_geq(idx, 0);
        cr_assert((s->bitmap[idx / 64] >> (idx % 64)) & 1, "flushed object %u not free in its slab", i);
    }
    free(ps);
}

Test(tcache, flush_empties_every_bin)
{
    arena_t *a = tsd_arena(tsd);
    void *ps[1024];
    unsigned n = 0;
    for (unsigned ind = 0; ind < tsd->tcache_nbins && n + 3 <= 1024; ind++) {
        for (int k = 0; k < 3; k++)
            ps[n++] = malloc(sc_index2size(ind));
    }
    for (unsigned i = 0; i < n; i++)
        free(ps[i]);
    static unsigned cached[TCACHE_NBINS_LIMIT];
    static size_t cur[TCACHE_NBINS_LIMIT];
    unsigned total = 0;
    for (unsigned ind = 0; ind < tsd->tcache_nbins; ind++) {
        cached[ind] = ncached(ind);
        total += cached[ind];
        cur[ind] = ind < SC_NBINS ? a->bins[ind].stats.curregs : large_live(a, ind - SC_NBINS);
        cr_assert_geq(cached[ind], 3, "class %zu: %u cached", sc_index2size(ind), cached[ind]);
    }
    tcache_flush(tsd);
    for (unsigned ind = 0; ind < TCACHE_NBINS_LIMIT; ind++)
        cr_assert_eq(ncached(ind), 0, "bin %u still holds %u after a flush", ind, ncached(ind));
    for (unsigned ind = 0; ind < tsd->tcache_nbins; ind++) {
        size_t now = ind < SC_NBINS ? a->bins[ind].stats.curregs : large_live(a, ind - SC_NBINS);
        cr_assert_eq(now, cur[ind] - cached[ind], "class %zu: in use %zu, was %zu with %u cached",
                     sc_index2size(ind), now, cur[ind], cached[ind]);
    }
    cr_assert_gt(total, 0);
    /* Still works after. */
    void *p = malloc(100);
    free(p);
    cr_assert_gt(ncached(sc_size2index(100)), 0);
}

Test(tcache, disabling_flushes_and_bypasses_the_cache)
{
    const size_t S = 64;
    const unsigned ind = sc_size2index(S);
    void *ps[8];
    for (int i = 0; i < 8; i++)
        ps[i] = malloc(S);
    for (int i = 0; i < 8; i++)
        free(ps[i]);
    cr_assert_gt(ncached(ind), 0);
    bin_stats_t *st = arena_bin_stats(ind);
    size_t cur0 = st->curregs;
    unsigned had = ncached(ind);
    tcache_set_enabled(tsd, false);
    cr_assert_not(tsd->tcache_enabled);
    cr_assert_eq(st->curregs, cur0 - had, "disabling must flush");
    for (unsigned i = 0; i < TCACHE_NBINS_LIMIT; i++) {
        cr_assert_eq(ncached(i), 0, "disabled bin %u holds %u", i, ncached(i));
        cr_assert_eq(tcache_bin_cap(tsd, i), 0);
    }
    for (unsigned i = 0; i < SC_NSIZES; i++)
        cr_assert_not(tcache_serves(tsd, i));
    /* Every malloc and free goes to the arena. */
    uint64_t nm0 = st->nmalloc, nd0 = st->ndalloc;
    for (int i = 0; i < 8; i++)
        ps[i] = malloc(S);
    cr_assert_eq(st->nmalloc - nm0, 8, "each malloc takes one region from the bin");
    for (int i = 0; i < 8; i++)
        free(ps[i]);
    cr_assert_eq(st->ndalloc - nd0, 8, "each free returns its region to the bin");
    cr_assert_eq(ncached(ind), 0);
    cr_assert_eq(st->curregs, cur0 - had);
    /* Large too. */
    arena_t *a = tsd_arena(tsd);
    uint64_t lnd0 = a->large[0].ndalloc;
    free(malloc(SC_LARGE_MINCLASS));
    cr_assert_eq(a->large[0].ndalloc, lnd0 + 1);
    /* Idempotent. */
    tcache_set_enabled(tsd, false);
    cr_assert_not(tsd->tcache_enabled);

    /* Re-enabled: objects are cached again. */
    tcache_set_enabled(tsd, true);
    cr_assert(tsd->tcache_enabled);
    cr_assert(tcache_serves(tsd, ind));
    cr_assert_gt(tcache_bin_cap(tsd, ind), 0);
    void *p = malloc(S);
    unsigned after_fill = ncached(ind);
    free(p);
    cr_assert_eq(ncached(ind), after_fill + 1);
    cr_assert_eq(malloc(S), p, "LIFO again after re-enabling");
    free(p);
}

/* ---------------------------------------------------------------------
 * GC.
 */

static void gc_step_on(unsigned ind)
{
    tsd->gc_cursor = ind;
    tcache_gc_step(tsd);
}

/* Bin ind holding exactly the k objects ps[0..k) (ps[k-1] on top), with
 * the low-water mark reset by a GC step that found nothing unused. */
static void bin_with_k_unused(unsigned ind, void **ps, unsigned k)
{
    for (unsigned i = 0; i < k; i++)
        ps[i] = malloc(sc_index2size(ind));
    tcache_flush(tsd);
    cr_assert_eq(ncached(ind), 0);
    for (unsigned i = 0; i < k; i++)
        free(ps[i]);
    cr_assert_eq(ncached(ind), k);
    cr_assert_eq(cache_bin_low_water_count(bin_of(ind)), 0, "the bin was empty since the last step");
    gc_step_on(ind);
    cr_assert_eq(ncached(ind), k, "nothing was below the low-water mark: nothing flushed");
    cr_assert_eq(cache_bin_low_water_count(bin_of(ind)), k, "a step resets the mark to the head");
    tsd->lg_fill_div[ind] = tcache_bin_lg_fill_init(ind);
}

Test(tcache, gc_flushes_three_quarters_below_low_water_and_fills_less)
{
    const unsigned ind = sc_size2index(64);
    enum { K = 16 };
    void *ps[K];
    bin_with_k_unused(ind, ps, K);
    bin_stats_t *st = arena_bin_stats(ind);
    uint64_t nd0 = st->ndalloc;
    /* Unused since the last step: 3/4 of it (rounded up) goes back. */
    gc_step_on(ind);
    unsigned flushed = K - K / 4;
    cr_assert_eq(st->ndalloc - nd0, flushed, "flushed %llu, want %u", (unsigned long long)(st->ndalloc - nd0),
                 flushed);
    cr_assert_eq(ncached(ind), K / 4);
    for (unsigned k = 0; k < K / 4; k++)
        cr_assert_eq(bin_of(ind)->head[k], ps[K - 1 - k], "the newest stay");
    cr_assert_eq(tsd->lg_fill_div[ind], tcache_bin_lg_fill_init(ind) + 1, "fills get smaller");
    /* Another idle step: 3/4 of the rest, and smaller still. */
    gc_step_on(ind);
    cr_assert_eq(ncached(ind), K / 4 - (K / 4 - K / 16));
    cr_assert_eq(tsd->lg_fill_div[ind], tcache_bin_lg_fill_init(ind) + 2);
    /* The next fill uses the new divisor. */
    while (ncached(ind) > 0)
        (void)malloc(64); /* leaks a few cached objects on purpose: they are ps[...] */
    uint64_t nm0 = st->nmalloc;
    void *p = malloc(64);
    unsigned max = tcache_bin_cap(tsd, ind);
    cr_assert_eq(st->nmalloc - nm0, MA_MAX(max >> (tcache_bin_lg_fill_init(ind) + 2), 1u));
    free(p);
}

/* A bin in use keeps a reserve as deep as its use: K objects that sat
 * below the low-water mark while the bin popped at least K times stay;
 * fewer pops than that flush the excess (3/4 of it, as for an idle bin). */
Test(tcache, gc_keeps_what_the_bin_uses_between_steps)
{
    const unsigned ind = sc_size2index(64);
    enum { K = 16 };
    void *ps[K];
    bin_with_k_unused(ind, ps, K);
    /* K pops and K pushes, never below K - 1 cached. */
    for (unsigned i = 0; i < K; i++)
        free(malloc(64));
    cr_assert_eq(cache_bin_low_water_count(bin_of(ind)), K - 1);
    gc_step_on(ind);
    cr_assert_eq(ncached(ind), K, "a bin in use was flushed");
    /* Next interval: 4 pops, K - 1 at the low point: (K - 5) in excess. */
    for (unsigned i = 0; i < 4; i++)
        free(malloc(64));
    gc_step_on(ind);
    unsigned excess = K - 1 - 4;
    cr_assert_eq(ncached(ind), K - (excess - excess / 4));
}

Test(tcache, gc_step_cursor_goes_round_robin)
{
    unsigned nb = tsd->tcache_nbins;
    tsd->gc_cursor = 0;
    for (unsigned i = 0; i < 2 * nb + 3; i++) {
        cr_assert_eq(tsd->gc_cursor, i % nb);
        tcache_gc_step(tsd);
    }
}

/* A bin that ran empty and was refilled since the last GC step held no
 * unused objects at its low point: the step must give nothing back and let
 * the next fills grow again (lg_fill_div - 1). */
Test(tcache, gc_fills_more_after_the_bin_ran_empty)
{
    const unsigned ind = sc_size2index(64);
    enum { K = 16 };
    void *ps[K];
    bin_with_k_unused(ind, ps, K);
    gc_step_on(ind); /* idle: lg_fill_div goes up */
    const unsigned div = tsd->lg_fill_div[ind];
    cr_assert_eq(div, tcache_bin_lg_fill_init(ind) + 1);
    /* Use the bin until it runs empty and is refilled. */
    bin_stats_t *st = arena_bin_stats(ind);
    unsigned left = ncached(ind);
    for (unsigned i = 0; i < left; i++)
        (void)malloc(64);
    cr_assert_eq(ncached(ind), 0);
    uint64_t nm0 = st->nmalloc;
    void *p = malloc(64);
    unsigned filled = (unsigned)(st->nmalloc - nm0);
    cr_assert_eq(filled, MA_MAX(tcache_bin_cap(tsd, ind) >> div, 1u));
    cr_assert(tsd->ran_empty[ind]);
    unsigned cached = ncached(ind);
    cr_assert_eq(cached, filled - 1);
    uint64_t nd0 = st->ndalloc;
    gc_step_on(ind);
    cr_assert_eq(st->ndalloc - nd0, 0,
                 "the bin ran empty since the last step, yet the step flushed %llu of the %u objects "
                 "just filled",
                 (unsigned long long)(st->ndalloc - nd0), cached);
    cr_assert_eq(ncached(ind), cached);
    cr_assert_eq(tsd->lg_fill_div[ind], div - 1, "lg_fill_div %u, want %u after running empty",
                 tsd->lg_fill_div[ind], div - 1);
    free(p);
}

/* ---------------------------------------------------------------------
 * Thread exit.
 */

typedef struct {
    unsigned ind;
    arena_t *arena;
    size_t curregs_before, curregs_cached;
    unsigned ncached;
} exit_probe_t;

static void *exiting_thread(void *arg)
{
    exit_probe_t *r = arg;
    void *ps[40];
    size_t size = sc_index2size(r->ind);
    free(malloc(1)); /* thread state set up */
    tsd_t *t = tsd_fetch();
    r->arena = tsd_arena(t);
    r->curregs_before = r->arena->bins[r->ind].stats.curregs;
    for (int i = 0; i < 40; i++)
        ps[i] = malloc(size);
    for (int i = 0; i < 40; i++)
        free(ps[i]);
    r->ncached = cache_bin_ncached(&t->bins[r->ind]);
    r->curregs_cached = r->arena->bins[r->ind].stats.curregs;
    return NULL;
}

Test(tcache, thread_exit_flushes_its_cache)
{
    exit_probe_t r = {.ind = sc_size2index(320)};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, exiting_thread, &r), 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_assert_geq(r.ncached, 40, "the thread's frees went to its cache");
    cr_assert_geq(r.curregs_cached, r.curregs_before + r.ncached, "cached objects count as in use");
    size_t now = r.arena->bins[r.ind].stats.curregs;
    cr_assert_eq(now, r.curregs_before, "after the thread exited %zu regions are in use, %zu before it ran", now,
                 r.curregs_before);
}

/* A thread's cache stacks live in one block (146 KiB by default) that an
 * exiting thread hands to the next thread. It is not cleared on the way
 * (the stacks are written before they are read; clearing it cost thread
 * churn 7% of its CPU time): the next thread finds the old pointers in its
 * free slots, and its cache works. */
typedef struct {
    void **block;
    uintptr_t first_slot;
    void *ps[40];
    bool distinct;
} block_probe_t;

/* A slot no bin uses here: the bins are packed from the block's start (and
 * block[0] holds the free-list link while the block waits). */
static size_t last_block_slot(void) { return tcache_block_bytes() / sizeof(void *) - 1; }

static void *block_probe_thread(void *arg)
{
    block_probe_t *r = arg;
    unsigned ind = sc_size2index(320);
    free(malloc(1));
    tsd_t *t = tsd_fetch();
    r->block = t->stack_block;
    r->first_slot = (uintptr_t)r->block[last_block_slot()];
    for (int i = 0; i < 40; i++) {
        r->ps[i] = malloc(320);
        memset(r->ps[i], i, 320);
    }
    r->distinct = true;
    for (int i = 0; i < 40; i++)
        for (int j = 0; j < 320; j++)
            if (((unsigned char *)r->ps[i])[j] != i)
                r->distinct = false;
    for (int i = 0; i < 40; i++)
        free(r->ps[i]);
    cr_assert_geq(cache_bin_ncached(&t->bins[ind]), 40);
    r->block[last_block_slot()] = (void *)(uintptr_t)0xdeadbeef;
    return NULL;
}

Test(tcache, an_exited_threads_cache_block_is_reused_uncleared)
{
    block_probe_t a = {0}, b = {0};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, block_probe_thread, &a), 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
    size_t mapped = base_mapped_bytes();
    cr_assert_eq(pthread_create(&th, NULL, block_probe_thread, &b), 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_assert_eq(b.block, a.block, "the second thread got a new cache block");
    cr_assert_eq(b.first_slot, 0xdeadbeef, "the block was cleared on its way to the next thread");
    cr_assert(a.distinct && b.distinct, "objects from a reused block overlap");
    cr_assert_eq(base_mapped_bytes(), mapped, "metadata grew for a recycled block");
}

/* ---------------------------------------------------------------------
 * Remote frees: objects of another arena's slabs.
 */

#define REMOTE_N 16

/* Remote frees into slabs of at most SLAB_REMOTE_BITS regions are bits;
 * into larger ones, lists through the objects. With 4 KiB pages 96 B
 * slabs are of the first kind, 32 B ones of the second; with 64 KiB pages
 * the first kind starts past 1 KiB, in classes of whole cache lines, of
 * which this thread would cache another arena's objects if it allocated
 * the class (the test process's setup does allocate some). */
#define REMOTE_LIST_SIZE 32
static size_t remote_bits_size(void)
{
    for (unsigned i = sc_size2index(96); i < SC_NBINS; i++)
        if (sc_bin_info[i].nregs <= SLAB_REMOTE_BITS && (!rtree_line_class(i) || !cache_bin_popped(bin_of(i))))
            return sc_index2size(i);
    cr_assert_fail("no small class has slabs of at most %u regions", SLAB_REMOTE_BITS);
    return 0;
}
#define REMOTE_BITS_SIZE remote_bits_size()

typedef struct {
    unsigned arena;
    size_t small_size; /* of small[] (0: 96 B) */
    void *small[REMOTE_N], *lines[REMOTE_N];
    pthread_barrier_t allocated, release;
} remote_owner_t;

static void *remote_owner_main(void *arg)
{
    remote_owner_t *o = arg;
    cr_assert_eq(mallctl("thread.arena", NULL, NULL, &o->arena, sizeof(o->arena)), 0);
    for (int i = 0; i < REMOTE_N; i++) {
        o->small[i] = malloc(o->small_size ? o->small_size : 96); /* shares cache lines */
        o->lines[i] = malloc(128); /* two whole cache lines of its own */
    }
    cr_assert_eq(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    pthread_barrier_wait(&o->allocated);
    pthread_barrier_wait(&o->release); /* alive (its arena has a thread) until told */
    return NULL;
}

/* A thread of arena o->arena that allocates its objects and waits. */
static pthread_t remote_owner_start(remote_owner_t *o)
{
    pthread_barrier_init(&o->allocated, NULL, 2);
    pthread_barrier_init(&o->release, NULL, 2);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, remote_owner_main, o), 0);
    pthread_barrier_wait(&o->allocated);
    return th;
}

/* The arena after this thread's (of the narenas:4 this file sets). */
static unsigned other_arena(void)
{
    unsigned narenas = 0;
    size_t sz = sizeof(narenas);
    cr_assert_eq(mallctl("arenas.narenas", &narenas, &sz, NULL, 0), 0);
    cr_assert_geq(narenas, 3);
    return (tsd_arena(tsd)->ind + 1) % narenas;
}

static bool in_list(void *p, void **list, int n)
{
    for (int i = 0; i < n; i++)
        if (list[i] == p)
            return true;
    return false;
}

/* This thread allocates (pops) objects of size twice: its bin of that
 * class is in use. */
static void bin_use(size_t size)
{
    void *a = malloc(size), *b = malloc(size);
    free(a);
    free(b);
    cr_assert(cache_bin_popped(bin_of(sc_size2index(size))));
}

/* An object another arena's thread allocated goes home when freed here,
 * onto its slab's remote list (still in use for the bin until collected),
 * unless its class is made of whole cache lines and this thread allocates
 * that class: those it caches and reuses (no line is shared with another
 * thread either way). The next fill of the owner's bin, or a decay tick,
 * collects the rest. */
Test(tcache, remote_frees_go_home_unless_objects_own_their_cache_lines)
{
    remote_owner_t o = {.arena = other_arena()};
    pthread_t th = remote_owner_start(&o);

    unsigned i96 = sc_size2index(96), i128 = sc_size2index(128);
    bin_use(96);
    bin_use(128);
    arena_t *owner = arenas[o.arena];
    bin_t *bin96 = &owner->bins[i96];
    size_t curregs0 = bin96->stats.curregs;
    unsigned c96 = ncached(i96), c128 = ncached(i128);
    for (int i = 0; i < REMOTE_N; i++) {
        free(o.small[i]);
        free(o.lines[i]);
    }
    cr_assert_eq(ncached(i96), c96, "96-byte objects of another arena were cached here");
    cr_assert_eq(ncached(i128), c128 + REMOTE_N, "128-byte objects of another arena: %u cached, %u expected",
                 ncached(i128) - c128, REMOTE_N);
    cr_assert_not_null(ma_load_relaxed(&bin96->remote_slabs), "the owner's bin was not told of remote frees");
    cr_assert_eq(bin96->stats.curregs, curregs0, "remote frees count as in use until collected");

    /* Allocating here: the line-sized objects come back (LIFO), the others
     * never do. */
    void *mine96[REMOTE_N], *mine128[REMOTE_N];
    for (int i = 0; i < REMOTE_N; i++) {
        mine96[i] = malloc(96);
        mine128[i] = malloc(128);
        cr_assert(!in_list(mine96[i], o.small, REMOTE_N), "a 96-byte object of the other arena was handed out here");
    }
    cr_assert_eq(mine128[0], o.lines[REMOTE_N - 1]);
    for (int i = 0; i < REMOTE_N; i++)
        cr_assert(in_list(mine128[i], o.lines, REMOTE_N), "128-byte object %d was not reused from this cache", i);

    /* A decay tick of the owner's arena collects the remote list. */
    arena_decay(owner, decay_now_ns(), 0);
    cr_assert_null(ma_load_relaxed(&bin96->remote_slabs));
    cr_assert_eq(bin96->stats.curregs, curregs0 - REMOTE_N, "curregs %zu after collecting, %zu before the frees",
                 bin96->stats.curregs, curregs0);

    pthread_barrier_wait(&o.release);
    cr_assert_eq(pthread_join(th, NULL), 0);
    for (int i = 0; i < REMOTE_N; i++) {
        free(mine96[i]);
        free(mine128[i]);
    }
}

/* A thread that only frees a class (a consumer of objects other threads
 * make) sends other arenas' objects of it home even when they own their
 * cache lines: it would never hand them out, and they would stay pinned in
 * its cache. Once it allocates the class itself, it caches them. A new
 * thread plays the consumer: this one has allocated of most classes. */
typedef struct {
    remote_owner_t *owner;
    unsigned cached_unused, cached_used;
    bool popped_before;
} consumer_probe_t;

static void *consumer_main(void *arg)
{
    consumer_probe_t *c = arg;
    unsigned i128 = sc_size2index(128);
    free(malloc(16)); /* thread state set up */
    tsd_t *t = tsd_fetch();
    cr_assert_neq(tsd_arena(t)->ind, c->owner->arena);
    c->popped_before = cache_bin_popped(&t->bins[i128]);
    for (int i = 0; i < REMOTE_N / 2; i++)
        free(c->owner->lines[i]);
    c->cached_unused = cache_bin_ncached(&t->bins[i128]);
    void *a = malloc(128), *b = malloc(128);
    free(a);
    free(b);
    unsigned before = cache_bin_ncached(&t->bins[i128]);
    for (int i = REMOTE_N / 2; i < REMOTE_N; i++)
        free(c->owner->lines[i]);
    c->cached_used = cache_bin_ncached(&t->bins[i128]) - before;
    return NULL;
}

Test(tcache, a_thread_that_does_not_allocate_a_class_sends_its_remote_objects_home)
{
    remote_owner_t o = {.arena = other_arena()};
    pthread_t th = remote_owner_start(&o);
    bin_t *bin128 = &arenas[o.arena]->bins[sc_size2index(128)];
    size_t curregs0 = bin128->stats.curregs;

    consumer_probe_t c = {.owner = &o};
    pthread_t ct;
    cr_assert_eq(pthread_create(&ct, NULL, consumer_main, &c), 0);
    cr_assert_eq(pthread_join(ct, NULL), 0);
    cr_assert(!c.popped_before, "a new thread's bin counts as used");
    cr_assert_eq(c.cached_unused, 0, "%u objects of another arena pinned in a bin its thread never allocates from",
                 c.cached_unused);
    cr_assert_eq(c.cached_used, REMOTE_N / 2, "after allocating the class, %u of its %d remote objects were cached",
                 c.cached_used, REMOTE_N / 2);
    /* The first half went home; the consumer's exit flushed the second. */
    arena_decay(arenas[o.arena], decay_now_ns(), 0);
    cr_assert_null(ma_load_relaxed(&bin128->remote_slabs));
    cr_assert_eq(bin128->stats.curregs, curregs0 - REMOTE_N, "curregs %zu, %zu before the frees",
                 bin128->stats.curregs, curregs0);

    pthread_barrier_wait(&o.release);
    cr_assert_eq(pthread_join(th, NULL), 0);
}

/* A new thread's bins are closed: free's fast path, which finds another
 * arena's whole-line objects in the thread's own fast map, pushes none of
 * them (a thread that only frees, a consumer, would pin them); a fill of
 * the class opens its bin, and then they are cached. */
typedef struct {
    remote_owner_t *owner;
    bool marked, closed_before, closed_after_frees, open_after_fill;
    unsigned cached_before_fill, cached_after_fill;
} closed_probe_t;

static void *closed_probe_main(void *arg)
{
    closed_probe_t *c = arg;
    const unsigned i128 = sc_size2index(128);
    free(malloc(16)); /* thread state set up; a fill of 16 B only */
    tsd_t *t = tsd_fetch();
    c->marked = rtree_fastmap_lookup(&tsd_arena(t)->fastmap, (uintptr_t)c->owner->lines[0]) == i128 + 1;
    c->closed_before = cache_bin_closed(&t->bins[i128]);
    for (int i = 0; i < REMOTE_N / 2; i++)
        free(c->owner->lines[i]);
    c->cached_before_fill = cache_bin_ncached(&t->bins[i128]);
    c->closed_after_frees = cache_bin_closed(&t->bins[i128]);
    void *a = malloc(128);
    c->open_after_fill = !cache_bin_closed(&t->bins[i128]);
    unsigned before = cache_bin_ncached(&t->bins[i128]);
    for (int i = REMOTE_N / 2; i < REMOTE_N; i++)
        free(c->owner->lines[i]);
    c->cached_after_fill = cache_bin_ncached(&t->bins[i128]) - before;
    free(a);
    return NULL;
}

/* Without a fast map that marks other arenas' whole-line slabs (none is
 * made under a ulimit -v or with overcommit mode 2; arenas past the shared
 * maps), every free reaches the slow path, which must then apply the rule
 * itself: remote objects of whole cache lines are cached where the thread
 * allocates their class, the others go home. Sent home, all of them, larson
 * 16 B-1 KiB with 8 threads took 7 times as many objects from the slabs and
 * peaked at twice the RSS. */
Test(tcache, without_a_map_of_other_arenas_lines_the_slow_path_caches_remote_line_objects)
{
    remote_owner_t o = {.arena = other_arena(), .small_size = REMOTE_BITS_SIZE};
    pthread_t th = remote_owner_start(&o);
    const unsigned i128 = sc_size2index(128), ismall = sc_size2index(o.small_size);
    bin_use(128);
    arena_t *mine = tsd_arena(tsd);
    const uintptr_t npages = tsd->fastmap_npages;
    const bool lines = mine->fastmap.marks_lines;
    cr_assert(lines, "this arena's map marks no other arena's slabs");
    tsd->fastmap_npages = 0; /* every free misses free's fast path */
    mine->fastmap.marks_lines = false;
    unsigned c128 = ncached(i128), csmall = ncached(ismall);
    for (int i = 0; i < REMOTE_N; i++) {
        free(o.lines[i]);
        free(o.small[i]);
    }
    unsigned got128 = ncached(i128) - c128, gotsmall = ncached(ismall) - csmall;
    tsd->fastmap_npages = npages;
    mine->fastmap.marks_lines = lines;
    cr_assert_eq(got128, REMOTE_N, "%u of %d remote 128-byte objects cached", got128, REMOTE_N);
    cr_assert_eq(gotsmall, 0, "%u remote %zu-byte objects (sharing lines) cached", gotsmall, o.small_size);
    arena_decay(arenas[o.arena], decay_now_ns(), 0);
    pthread_barrier_wait(&o.release);
    cr_assert_eq(pthread_join(th, NULL), 0);
}

Test(tcache, a_new_thread_s_bins_take_remote_objects_only_once_it_allocates_their_class)
{
    remote_owner_t o = {.arena = other_arena()};
    pthread_t th = remote_owner_start(&o);
    closed_probe_t c = {.owner = &o};
    pthread_t ct;
    cr_assert_eq(pthread_create(&ct, NULL, closed_probe_main, &c), 0);
    cr_assert_eq(pthread_join(ct, NULL), 0);
    cr_assert(c.marked, "another arena's 128-byte slab is not marked in this thread's arena's fast map");
    cr_assert(c.closed_before, "a new thread's bin is open before it allocates the class");
    cr_assert_eq(c.cached_before_fill, 0, "%u remote objects cached by a thread that never allocated the class",
                 c.cached_before_fill);
    cr_assert(c.closed_after_frees, "frees alone opened the bin");
    cr_assert(c.open_after_fill, "a fill left the bin closed");
    cr_assert_eq(c.cached_after_fill, REMOTE_N / 2, "after a fill, %u of %d remote objects cached",
                 c.cached_after_fill, REMOTE_N / 2);
    arena_decay(arenas[o.arena], decay_now_ns(), 0);
    pthread_barrier_wait(&o.release);
    cr_assert_eq(pthread_join(th, NULL), 0);
}

/* Pushes a bin takes before it is full (its room between head and full). */
static unsigned bin_room(unsigned ind)
{
    return (uint16_t)(cache_bin_bits(bin_of(ind)->head) - bin_of(ind)->full) / sizeof(void *);
}

/* A GC step closes a bin its thread did not pop from since the previous
 * step, and one with pops opens it again. A free of the thread's own
 * object, which a closed bin must not send to the slow path for good,
 * gives it room for a batch (TCACHE_FREE_BATCH). */
Test(tcache, a_gc_step_closes_a_bin_the_thread_stopped_allocating_from)
{
    const unsigned i128 = sc_size2index(128);
    void *mine[4];
    for (int i = 0; i < 4; i++)
        mine[i] = malloc(128);
    cr_assert(!cache_bin_closed(bin_of(i128)), "the bin is closed after a fill");
    /* Two rounds: the first merges the pops above, the second finds none. */
    for (unsigned r = 0; r < 2 * tsd->tcache_nbins; r++)
        tcache_gc_step(tsd);
    cr_assert(cache_bin_closed(bin_of(i128)), "an unused bin stayed open");

    remote_owner_t o = {.arena = other_arena()};
    pthread_t th = remote_owner_start(&o);
    unsigned c0 = ncached(i128);
    for (int i = 0; i < REMOTE_N; i++)
        free(o.lines[i]);
    cr_assert_eq(ncached(i128), c0, "a closed bin took %u remote objects", ncached(i128) - c0);

    /* Own objects: cached, in a batch's room (no pop since the step). */
    const unsigned batch = MA_MIN(tcache_bin_cap(tsd, i128), TCACHE_FREE_BATCH);
    cr_assert_leq(c0 + 4, batch, "the test needs room for its 4 objects");
    free(mine[0]);
    cr_assert_eq(ncached(i128), c0 + 1, "the thread's own object was not cached");
    cr_assert_eq(bin_room(i128), batch - (c0 + 1), "a free of the thread's own object left room for %u, not a batch",
                 bin_room(i128));
    for (int i = 1; i < 4; i++)
        free(mine[i]);
    cr_assert_eq(ncached(i128), c0 + 4);

    /* Pops since the last step: the next visit keeps it open. */
    void *again = malloc(128);
    for (unsigned r = 0; r < tsd->tcache_nbins; r++)
        tcache_gc_step(tsd);
    cr_assert(!cache_bin_closed(bin_of(i128)), "a GC step closed a bin with pops");
    free(again);
    arena_decay(arenas[o.arena], decay_now_ns(), 0);
    pthread_barrier_wait(&o.release);
    cr_assert_eq(pthread_join(th, NULL), 0);
    for (int i = 0; i < REMOTE_N; i++)
        free(o.small[i]);
}

/* A thread that frees its own arena's objects of a class it does not
 * allocate (a consumer that shares its producer's arena) holds them a
 * batch at a time (TCACHE_FREE_BATCH), each batch flushed whole, not a
 * bin's capacity of them that it would never hand out. */
#define FREE_ONLY_N 200
typedef struct {
    unsigned arena;
    void *objs[FREE_ONLY_N];
    unsigned max_cached, batch;
    uint64_t nflushes;
} free_only_probe_t;

static void *free_only_main(void *arg)
{
    free_only_probe_t *c = arg;
    const unsigned i96 = sc_size2index(96);
    cr_assert_eq(mallctl("thread.arena", NULL, NULL, &c->arena, sizeof(c->arena)), 0);
    free(malloc(16)); /* thread state set up; a fill of 16 B only */
    tsd_t *t = tsd_fetch();
    cr_assert_eq(tsd_arena(t)->ind, c->arena);
    c->batch = MA_MIN(tcache_bin_cap(t, i96), TCACHE_FREE_BATCH);
    bin_stats_t *st = &tsd_arena(t)->bins[i96].stats;
    uint64_t nfl0 = st->nflushes;
    for (int i = 0; i < FREE_ONLY_N; i++) {
        free(c->objs[i]);
        c->max_cached = MA_MAX(c->max_cached, cache_bin_ncached(&t->bins[i96]));
    }
    c->nflushes = st->nflushes - nfl0;
    return NULL;
}

Test(tcache, a_thread_that_only_frees_its_arenas_objects_of_a_class_holds_a_batch_of_them)
{
    free_only_probe_t c = {.arena = tsd_arena(tsd)->ind};
    for (int i = 0; i < FREE_ONLY_N; i++)
        c.objs[i] = malloc(96);
    pthread_t ct;
    cr_assert_eq(pthread_create(&ct, NULL, free_only_main, &c), 0);
    cr_assert_eq(pthread_join(ct, NULL), 0);
    cr_assert_eq(c.max_cached, c.batch, "the freeing thread held up to %u objects, not a batch of %u", c.max_cached,
                 c.batch);
    cr_assert_eq(c.nflushes, (FREE_ONLY_N - 1) / c.batch, "%" PRIu64 " flushes of %d objects in batches of %u",
                 c.nflushes, FREE_ONLY_N, c.batch);
}

/* A line-sized object of another arena that finds this thread's bin full
 * goes home too (its slab's remote list) rather than flushing the bin: a
 * thread that only frees others' objects would otherwise flush on almost
 * every free. */
Test(tcache, a_remote_free_into_a_full_bin_goes_home_without_a_flush)
{
    remote_owner_t o = {.arena = other_arena()};
    pthread_t th = remote_owner_start(&o);
    const unsigned i128 = sc_size2index(128);
    unsigned n = 2 * tcache_bin_cap(tsd, i128);
    void **mine = malloc(n * sizeof(void *));
    for (unsigned i = 0; i < n; i++)
        mine[i] = malloc(128);
    unsigned cap = tcache_bin_cap(tsd, i128), k = 0;
    while (ncached(i128) < cap)
        free(mine[k++]);
    bin_t *own = &tsd_arena(tsd)->bins[i128], *theirs = &arenas[o.arena]->bins[i128];
    uint64_t flushes = own->stats.nflushes;
    void *top = bin_of(i128)->head[0];
    for (int i = 0; i < REMOTE_N; i++)
        free(o.lines[i]);
    cr_assert_eq(ncached(i128), cap);
    cr_assert_eq(bin_of(i128)->head[0], top, "the full bin took a remote object");
    cr_assert_eq(own->stats.nflushes, flushes, "a remote free flushed this thread's bin");
    cr_assert_not_null(ma_load_relaxed(&theirs->remote_slabs), "the owner's bin was not told of remote frees");
    pthread_barrier_wait(&o.release);
    cr_assert_eq(pthread_join(th, NULL), 0);
    for (int i = 0; i < REMOTE_N; i++)
        free(o.small[i]);
    for (unsigned i = k; i < n; i++)
        free(mine[i]);
    free(mine);
}

/* Another arena's object of size bytes freed twice from here, another in
 * between. Returns that arena; its thread stays waiting (the process is to
 * abort first). */
static arena_t *free_twice_remotely(size_t size)
{
    static remote_owner_t o;
    o.arena = other_arena();
    o.small_size = size;
    remote_owner_start(&o);
    free(o.small[0]);
    free(o.small[1]);
    free(o.small[0]);
    return arenas[o.arena];
}

/* A remote list made circular by a double free is caught when collected. */
Test(tcache, a_double_remote_free_is_caught_when_collected, .exit_code = 0, .signal = SIGABRT)
{
    arena_decay(free_twice_remotely(REMOTE_LIST_SIZE), decay_now_ns(), 0);
}

/* fn(arg) in a forked child must abort with needle in its message. */
static void expect_abort(void (*fn)(void *), void *arg, const char *needle)
{
    char err[4096];
    int st = tu_capture(fn, arg, err, sizeof(err));
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "status %#x, stderr \"%s\"", st, err);
    cr_assert_not_null(strstr(err, needle), "\"%s\"", err);
}

/* Exits normally (no abort) if the second free returns. */
static void free_twice_remotely_as_bits(void *arg)
{
    (void)arg;
    free_twice_remotely(REMOTE_BITS_SIZE);
    _exit(0);
}

/* A remote free that finds its region's bit set is a double free, caught
 * at that free. */
Test(tcache, a_double_remote_free_as_bits_is_caught_at_the_free)
{
    expect_abort(free_twice_remotely_as_bits, NULL, "double free");
}

/* Another arena's object freed from here (its bit pending), then freed
 * again straight into its slab's bitmap: the collection finds the region
 * free twice. */
static void free_remotely_then_into_the_bitmap(void *arg)
{
    (void)arg;
    static remote_owner_t o;
    o.arena = other_arena();
    o.small_size = REMOTE_BITS_SIZE;
    remote_owner_start(&o);
    extent_t *slab = tu_slab_of(o.small[0]);
    free(o.small[0]);
    arena_dalloc_small_batch(sc_size2index(REMOTE_BITS_SIZE), &o.small[0], &slab, 1);
    arena_decay(arenas[o.arena], decay_now_ns(), 0);
    _exit(0);
}

Test(tcache, remote_bits_of_a_region_already_free_are_a_double_free)
{
    expect_abort(free_remotely_then_into_the_bitmap, NULL, "double free");
}

/* Let the owner thread go, then free its small objects from index from. */
static void remote_owner_finish(remote_owner_t *o, pthread_t th, int from)
{
    pthread_barrier_wait(&o->release);
    cr_assert_eq(pthread_join(th, NULL), 0);
    for (int i = from; i < REMOTE_N; i++)
        free(o->small[i]);
}

/* free's own path for another arena's objects (ma_free_slow): counted in
 * thread.deallocated, checked like any free. */
typedef struct {
    unsigned arena;
    void *obj;
    pthread_barrier_t bound;
} interior_free_t;

static void *bind_and_wait(void *arg)
{
    interior_free_t *f = arg;
    cr_assert_eq(mallctl("thread.arena", NULL, NULL, &f->arena, sizeof(f->arena)), 0);
    pthread_barrier_wait(&f->bound);
    for (;;)
        pause();
    return NULL;
}

/* In a forked child, whose arenas have no threads until one binds: with
 * none, a remote free goes straight to the slab, checked there. */
static void free_inside_remote_object(void *arg)
{
    interior_free_t *f = arg;
    pthread_barrier_init(&f->bound, NULL, 2);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, bind_and_wait, f), 0);
    pthread_barrier_wait(&f->bound);
    free((char *)f->obj + 8);
}

Test(tcache, a_remote_free_is_counted_and_checked_like_any_free)
{
    remote_owner_t o = {.arena = other_arena()};
    pthread_t th = remote_owner_start(&o);
    uint64_t d0 = tsd->thread_deallocated;
    size_t usize = malloc_usable_size(o.small[0]);
    free(o.small[0]);
    cr_assert_eq(tsd->thread_deallocated - d0, usize, "a remote free counted %" PRIu64 " bytes, not %zu",
                 tsd->thread_deallocated - d0, usize);
    cr_assert_not_null(ma_load_relaxed(&arenas[o.arena]->bins[sc_size2index(96)].remote_slabs));

    interior_free_t f = {.arena = o.arena, .obj = o.small[1]};
    expect_abort(free_inside_remote_object, &f, "free(): invalid pointer");
    remote_owner_finish(&o, th, 1);
}

static bool region_allocated(void *p)
{
    extent_t *slab = tu_slab_of(p);
    long idx = slab_region_index(slab, slab->szind, p);
    cr_assert_geq(idx, 0);
    return !(slab->bitmap[idx / 64] & ((uint64_t)1 << (idx % 64)));
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

/* A fill takes what other threads freed straight from the remote bits or
 * lists, up to nmax objects (more than the n it needs), without passing
 * them through their slab's bitmap; the rest goes to the bitmap. Counted
 * as freed and allocated again. Remote bits give the lowest addresses
 * first, in address order; a list gives its first objects (the last
 * freed) in the order they were freed. */
static void check_fill_takes_remote_objects(size_t size)
{
    remote_owner_t o = {.arena = other_arena(), .small_size = size};
    pthread_t th = remote_owner_start(&o);
    unsigned ind = sc_size2index(size);
    cr_assert_eq(sc_bin_info[ind].nregs <= SLAB_REMOTE_BITS, size == REMOTE_BITS_SIZE);
    cr_assert_eq(sc_bin_info[sc_size2index(REMOTE_LIST_SIZE)].nregs > SLAB_REMOTE_BITS, true);
    bin_t *bin = &arenas[o.arena]->bins[ind];
    bin_stats_t st0 = bin->stats;
    for (int i = 0; i < REMOTE_N; i++)
        free(o.small[i]);
    void *out[REMOTE_N], *by_address[REMOTE_N];
    unsigned got = arena_fill_small_max(arenas[o.arena], ind, out, 1, REMOTE_N / 2);
    cr_assert_eq(got, REMOTE_N / 2, "a fill of 1 (at most %d) with %d remote objects at hand took %u", REMOTE_N / 2,
                 REMOTE_N, got);
    memcpy(by_address, o.small, sizeof(by_address));
    qsort(by_address, REMOTE_N, sizeof(void *), cmp_ptr);
    int left_free = 0;
    for (unsigned i = 0; i < got; i++) {
        if (size == REMOTE_BITS_SIZE)
            cr_assert_eq(out[i], by_address[i], "object %u of the fill is not the remote object %u by address", i, i);
        else
            cr_assert_eq(out[i], o.small[REMOTE_N - got + i], "object %u of the fill is not remote object %u", i,
                         REMOTE_N - got + i);
        cr_assert(region_allocated(out[i]), "object %u went through the bitmap", i);
    }
    for (int i = 0; i < REMOTE_N; i++)
        left_free += !in_list(o.small[i], out, (int)got) && !region_allocated(o.small[i]);
    cr_assert_eq(left_free, REMOTE_N / 2, "%d of the objects not taken are free in their slab", left_free);
    cr_assert_null(ma_load_relaxed(&bin->remote_slabs));
    cr_assert_eq(bin->stats.ndalloc - st0.ndalloc, REMOTE_N);
    cr_assert_eq(bin->stats.nmalloc - st0.nmalloc, got);
    cr_assert_eq(st0.curregs - bin->stats.curregs, REMOTE_N - got);

    pthread_barrier_wait(&o.release);
    cr_assert_eq(pthread_join(th, NULL), 0);
    for (unsigned i = 0; i < got; i++)
        free(out[i]);
}

Test(tcache, a_fill_takes_remote_bits_without_the_bitmap)
{
    check_fill_takes_remote_objects(REMOTE_BITS_SIZE);
}

Test(tcache, a_fill_takes_a_remote_list_without_the_bitmap)
{
    check_fill_takes_remote_objects(REMOTE_LIST_SIZE);
}

/* A remote free of a region of a slab of at most SLAB_REMOTE_BITS regions
 * sets its bit and writes nothing into the object; the first one announces
 * the slab to its bin, the next ones find it announced. */
Test(tcache, a_remote_free_as_bits_leaves_the_object_alone_and_announces_its_slab_once)
{
    const size_t size = REMOTE_BITS_SIZE;
    remote_owner_t o = {.arena = other_arena(), .small_size = size};
    pthread_t th = remote_owner_start(&o);
    unsigned ind = sc_size2index(size);
    bin_t *bin = &arenas[o.arena]->bins[ind];
    extent_t *slab = tu_slab_of(o.small[0]);
    cr_assert_eq(tu_slab_of(o.small[1]), slab, "the owner's first two objects are on different slabs");
    memset(o.small[0], 0xa5, size);
    memset(o.small[1], 0x5a, size);
    free(o.small[0]);
    free(o.small[1]);
    for (size_t i = 0; i < size; i++) {
        cr_assert_eq(((unsigned char *)o.small[0])[i], 0xa5, "byte %zu of the first object was written", i);
        cr_assert_eq(((unsigned char *)o.small[1])[i], 0x5a, "byte %zu of the second object was written", i);
    }
    uint64_t want = SLAB_REMOTE_ANNOUNCED | ((uint64_t)1 << slab_region_index(slab, ind, o.small[0])) |
                    ((uint64_t)1 << slab_region_index(slab, ind, o.small[1]));
    cr_assert_eq(ma_load_relaxed(&slab->remote_bits), want, "remote bits %#" PRIx64 ", not %#" PRIx64,
                 ma_load_relaxed(&slab->remote_bits), want);
    cr_assert_eq(ma_load_relaxed(&bin->remote_slabs), slab);
    cr_assert_null(slab->remote_next, "the slab was announced twice");
    cr_assert(region_allocated(o.small[0]) && region_allocated(o.small[1]), "pending remote frees are still "
              "allocated in the bitmap");
    /* Collected by a decay tick: into the bitmap, the announcement cleared. */
    arena_decay(arenas[o.arena], decay_now_ns(), 0);
    cr_assert_eq(ma_load_relaxed(&slab->remote_bits), 0);
    cr_assert_null(ma_load_relaxed(&bin->remote_slabs));
    cr_assert(!region_allocated(o.small[0]) && !region_allocated(o.small[1]));
    remote_owner_finish(&o, th, 2);
}

/* The owner's thread cache, when it runs empty, is refilled with them up
 * to its capacity, not only its fill amount (cap >> lg_fill_div). */
#define REFILL_MAX 1024

/* A round of an owner thread on another arena: it allocates nobj objects
 * of 96 B into obj, flushes its cache and waits; this thread frees them all;
 * then the owner goes on (owner_round_wait returns) and exits. */
typedef struct {
    unsigned arena, nobj;
    void *obj[REFILL_MAX];
    pthread_barrier_t allocated, freed;
} owner_round_t;

/* The owner's side, first: onto the round's arena; its thread and 96 B bin. */
static cache_bin_t *owner_round_join(owner_round_t *r, tsd_t **t)
{
    cr_assert_eq(mallctl("thread.arena", NULL, NULL, &r->arena, sizeof(r->arena)), 0);
    *t = tsd_fetch();
    return &(*t)->bins[sc_size2index(96)];
}

/* The owner's side: its objects, then the wait for this thread's frees. */
static void owner_round_allocate_and_wait(owner_round_t *r, unsigned nobj)
{
    cr_assert_leq(nobj, REFILL_MAX);
    r->nobj = nobj;
    for (unsigned i = 0; i < nobj; i++)
        r->obj[i] = malloc(96);
    cr_assert_eq(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    pthread_barrier_wait(&r->allocated);
    pthread_barrier_wait(&r->freed);
}

/* This thread's side: start owner_main(r) on another arena, free its
 * objects, join it. */
static void owner_round_run(owner_round_t *r, void *(*owner_main)(void *))
{
    r->arena = other_arena();
    pthread_barrier_init(&r->allocated, NULL, 2);
    pthread_barrier_init(&r->freed, NULL, 2);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, owner_main, r), 0);
    pthread_barrier_wait(&r->allocated);
    for (unsigned i = 0; i < r->nobj; i++)
        free(r->obj[i]);
    pthread_barrier_wait(&r->freed);
    cr_assert_eq(pthread_join(th, NULL), 0);
}

typedef struct {
    owner_round_t r; /* first: owner_round_run passes it as the thread's argument */
    unsigned n;
    void *first;
    unsigned nfill, ncached_after, nremote_cached;
} refill_owner_t;

static void *refill_owner_main(void *arg)
{
    refill_owner_t *o = arg;
    unsigned i96 = sc_size2index(96);
    tsd_t *t;
    cache_bin_t *b = owner_round_join(&o->r, &t);
    o->n = tcache_bin_cap(t, sc_size2index(96));
    o->nfill = o->n >> t->lg_fill_div[i96];
    owner_round_allocate_and_wait(&o->r, o->n);
    o->first = malloc(96);
    o->ncached_after = cache_bin_ncached(b);
    for (unsigned i = 0; i < o->ncached_after; i++)
        o->nremote_cached += in_list(b->head[i], o->r.obj, (int)o->n);
    return NULL;
}

Test(tcache, an_owner_that_runs_empty_takes_back_all_its_remote_objects_that_fit)
{
    static refill_owner_t o;
    owner_round_run(&o.r, refill_owner_main);
    cr_assert_lt(o.nfill, o.n, "the test needs a fill amount below the capacity");
    cr_assert(in_list(o.first, o.r.obj, (int)o.n), "the refill did not hand out a remote object");
    cr_assert_eq(o.ncached_after, o.n - 1, "%u cached after the refill (fill amount %u, capacity %u)",
                 o.ncached_after, o.nfill, o.n);
    cr_assert_eq(o.nremote_cached, o.n - 1, "%u of the cached objects are the remote ones", o.nremote_cached);
    free(o.first);
}

/* An owner whose objects all come back from another thread, more than its
 * bin holds (a producer): a fill that remote objects filled whole makes the
 * bin grow at its next fill (within the budget of a thread in cross-thread
 * traffic), which takes from the slabs no more than a bin of the first
 * capacity would. */
typedef struct {
    owner_round_t r; /* first: owner_round_run passes it as the thread's argument */
    unsigned cap0, cap1, nfill_slabs, nfill_first;
} grow_owner_t;

static void *grow_owner_main(void *arg)
{
    grow_owner_t *o = arg;
    unsigned i96 = sc_size2index(96);
    tsd_t *t;
    cache_bin_t *b = owner_round_join(&o->r, &t);
    o->cap0 = tcache_bin_cap(t, sc_size2index(96));
    cr_assert_eq(o->cap0, tcache_bin_cap_init(i96));
    owner_round_allocate_and_wait(&o->r, 2 * o->cap0);
    /* The first fill takes cap0 of the 2 x cap0 remote objects; use them up
     * and fill again (the other half of them went into the slabs). */
    bin_stats_t *st = &arenas[o->r.arena]->bins[i96].stats;
    void *ps[REFILL_MAX];
    unsigned n = 0;
    t->remote_cycles = 0;
    ps[n++] = malloc(96);
    cr_assert_eq(cache_bin_ncached(b), o->cap0 - 1, "the first fill did not take %u remote objects", o->cap0);
    /* In cross-thread traffic: its bins grow within TCACHE_THREAD_BYTES. */
    cr_assert_neq(t->remote_cycles, 0, "the thread keeps the budget of one that frees only its own objects");
    while (cache_bin_ncached(b) > 0)
        ps[n++] = malloc(96);
    uint64_t nm0 = st->nmalloc;
    ps[n++] = malloc(96);
    o->cap1 = tcache_bin_cap(t, sc_size2index(96));
    o->nfill_slabs = (unsigned)(st->nmalloc - nm0);
    o->nfill_first = MA_MAX(o->cap0 >> t->lg_fill_div[i96], 1u);
    for (unsigned i = 0; i < n; i++)
        free(ps[i]);
    return NULL;
}

Test(tcache, a_bin_that_remote_objects_fill_whole_grows)
{
    static grow_owner_t o;
    owner_round_run(&o.r, grow_owner_main);
    cr_log_info("96 B bin: capacity %u -> %u; the fill after took %u from the slabs", o.cap0, o.cap1, o.nfill_slabs);
    cr_assert_gt(o.cap1, o.cap0, "the bin did not grow (capacity %u)", o.cap0);
    cr_assert_eq(o.nfill_slabs, o.nfill_first, "the grown bin's fill from the slabs took %u, a first-capacity "
                 "bin's takes %u", o.nfill_slabs, o.nfill_first);
}

/* The same when a fill takes the list: the circle runs past what the fill
 * takes and into the bitmap. */
Test(tcache, a_double_remote_free_is_caught_when_a_fill_takes_the_list, .exit_code = 0, .signal = SIGABRT)
{
    void *out[4];
    arena_fill_small_max(free_twice_remotely(REMOTE_LIST_SIZE), sc_size2index(REMOTE_LIST_SIZE), out, 1, 4);
}

/* The first word of a remotely freed object links its list: a use after
 * free that overwrites it with a pointer out of the slab is caught. */
static void overwrite_remote_link(void *arg)
{
    remote_owner_t *o = arg;
    *(void **)o->small[1] = (void *)(uintptr_t)4096;
    void *out[4];
    arena_fill_small_max(arenas[o->arena], sc_size2index(REMOTE_LIST_SIZE), out, 1, 4);
}

Test(tcache, an_overwritten_remote_list_is_caught)
{
    remote_owner_t o = {.arena = other_arena(), .small_size = REMOTE_LIST_SIZE};
    pthread_t th = remote_owner_start(&o);
    free(o.small[0]);
    free(o.small[1]); /* the list: small[1], then small[0] */
    expect_abort(overwrite_remote_link, &o, "remote free list was overwritten");
    remote_owner_finish(&o, th, 2);
}

/* ---------------------------------------------------------------------
 * te: thread events.
 */

Test(te, next_event_is_ahead_for_a_nominal_thread_and_zero_while_reentrant)
{
    cr_assert(tsd_nominal(tsd));
    cr_assert_eq(tsd->reentrancy, 0);
    cr_assert_gt(tsd->next_event, tsd->thread_allocated);
    cr_assert_leq(tsd->next_event, tsd->thread_allocated + TE_MAX_WAIT);

    tsd_reentrancy_enter(tsd);
    cr_assert_eq(tsd->next_event, 0);
    uint64_t a0 = tsd->thread_allocated;
    void *p = malloc(100); /* the slow path, still counted */
    cr_assert_not_null(p);
    cr_assert_eq(tsd->thread_allocated - a0, malloc_usable_size(p));
    cr_assert_eq(tsd->next_event, 0);
    tsd_reentrancy_enter(tsd);
    cr_assert_eq(tsd->next_event, 0);
    tsd_reentrancy_leave(tsd);
    cr_assert_eq(tsd->next_event, 0, "still re-entrant once");
    tsd_reentrancy_leave(tsd);
    cr_assert_eq(tsd->reentrancy, 0);
    cr_assert_gt(tsd->next_event, tsd->thread_allocated);
    free(p);
}

Test(te, the_gc_event_fires_when_its_byte_threshold_is_crossed)
{
    unsigned c0 = tsd->gc_cursor;
    tsd->te.next[TE_GC] = tsd->thread_allocated + 1;
    tsd_update_next_event(tsd);
    cr_assert_eq(tsd->next_event, tsd->thread_allocated + 1);
    void *p = malloc(100);
    unsigned nb = tsd->tcache_nbins;
    cr_assert_eq(tsd->gc_cursor, (c0 + 1) % nb, "one GC step ran");
    cr_assert_eq(tsd->te.next[TE_GC], tsd->thread_allocated + TE_GC_INTERVAL);
    cr_assert_gt(tsd->next_event, tsd->thread_allocated);
    free(p);
    /* Below the threshold nothing runs. */
    unsigned c1 = tsd->gc_cursor;
    for (int i = 0; i < 10; i++)
        free(malloc(16));
    cr_assert_eq(tsd->gc_cursor, c1);
}

Test(te, sample_wait_mean_is_r)
{
    ma_math_boot(); /* the draws' tables, which turning sampling on would fill */
    const unsigned lgs[] = {4, 12, 19};
    for (size_t k = 0; k < MA_ARRAY_LEN(lgs); k++) {
        const double R = (double)((uint64_t)1 << lgs[k]);
        const int N = 200000;
        uint64_t prng = 0x1234567ULL + k;
        double sum = 0;
        uint64_t mn = UINT64_MAX;
        for (int i = 0; i < N; i++) {
            uint64_t w = te_sample_wait(&prng, lgs[k]);
            sum += (double)w;
            if (w < mn)
                mn = w;
        }
        double mean = sum / N;
        /* floor(Exp(R)) + 1 has mean R + 1/2 (to within 1/12R); sd R. */
        double tol = 6 * R / sqrt((double)N) + 1;
        cr_assert_lt(fabs(mean - R), tol, "lg %u: mean wait %.2f, want %.0f +- %.2f", lgs[k], mean, R, tol);
        cr_assert_geq(mn, 1, "a wait is at least one byte");
    }
    /* Reproducible: the same seed gives the same draws. */
    uint64_t s1 = 99, s2 = 99;
    for (int i = 0; i < 100; i++)
        cr_assert_eq(te_sample_wait(&s1, 19), te_sample_wait(&s2, 19));
}

/* ---------------------------------------------------------------------
 * Adaptive capacity.
 */

/* Everything cached counts as unused since the last GC step. */
static void b_set_low_water_to_head(unsigned ind)
{
    bin_of(ind)->low_water = cache_bin_bits(bin_of(ind)->head);
}

/* A bin that overflows (flush) and then runs dry (refill) before the next
 * GC step doubles, up to its largest capacity; a thread that only frees
 * keeps its bins small. */
Test(tcache, a_thrashing_bin_grows_and_a_freeing_thread_does_not)
{
    const size_t S = 64;
    const unsigned ind = sc_size2index(S);
    tcache_flush(tsd);
    unsigned cap0 = tcache_bin_cap(tsd, ind);
    cr_assert_eq(cap0, tcache_bin_cap_init(ind));
    enum { N = 4 * TCACHE_NSLOTS_SMALL_MAX };
    static void *ps[N];
    /* Frees only: the bin overflows again and again but never refills. */
    for (unsigned i = 0; i < N; i++)
        ps[i] = malloc(S);
    tcache_flush(tsd);
    tsd->flushed[ind] = 0;
    for (unsigned i = 0; i < N; i++)
        free(ps[i]);
    cr_assert_eq(tcache_bin_cap(tsd, ind), cap0, "a freeing thread's bin grew");
    /* Batches of 1000 allocated and freed again: the bin doubles until a
     * batch fits (without GC steps in between: they reset the evidence). */
    unsigned caps[8];
    for (int round = 0; round < 8; round++) {
        for (unsigned i = 0; i < 1000; i++)
            ps[i] = malloc(S);
        for (unsigned i = 0; i < 1000; i++)
            free(ps[i]);
        caps[round] = tcache_bin_cap(tsd, ind);
    }
    unsigned want = MA_MIN(tcache_bin_cap_max(ind), 1024u);
    cr_assert_geq(caps[7], MA_MIN(want, 1000u), "after 8 batches the bin holds %u, cannot keep a batch of 1000", caps[7]);
    cr_assert_leq(caps[7], tcache_bin_cap_max(ind));
    /* A GC step on a bin whose objects went unused (no pops since the
     * previous step, which ends the interval of the batches above) halves
     * it (toward the first capacity), after flushing them. */
    gc_step_on(ind);
    unsigned before = tcache_bin_cap(tsd, ind);
    b_set_low_water_to_head(ind);
    gc_step_on(ind);
    if (before > tcache_bin_cap_init(ind))
        cr_assert_eq(tcache_bin_cap(tsd, ind), MA_MAX(before / 2, tcache_bin_cap_init(ind)),
                     "an idle grown bin shrinks");
}

/* The bins sit packed in the thread's block, in class order: bin i's
 * slots start where bin i-1's end (its empty end), and a fresh thread's
 * bins take the sum of their first capacities, not of their largest (a
 * producer of prodcons 8+8 touched one or two block pages per class). */
static void **region_start(unsigned ind)
{
    return ind == 0 ? (void **)tsd->stack_block : cache_bin_empty_pos(bin_of(ind - 1));
}

static void assert_bins_packed(void)
{
    for (unsigned i = 0; i < tsd->tcache_nbins; i++) {
        void **empty = cache_bin_empty_pos(bin_of(i));
        void **full = empty - tcache_bin_cap(tsd, i);
        cr_assert_geq((uintptr_t)full, (uintptr_t)region_start(i), "class %zu overlaps the bin below",
                      sc_index2size(i));
        cr_assert_leq((uintptr_t)empty, (uintptr_t)((char *)tsd->stack_block + tcache_block_bytes()),
                      "class %zu ends past the block", sc_index2size(i));
    }
}

static void *packed_bins_thread(void *arg)
{
    (void)arg;
    free(malloc(1));
    tsd = tsd_fetch();
    size_t first = 0;
    for (unsigned i = 0; i < tsd->tcache_nbins; i++) {
        first += tcache_bin_cap_init(i);
        cr_assert_eq(cache_bin_empty_pos(bin_of(i)) - region_start(i), (ptrdiff_t)tcache_bin_cap_init(i),
                     "class %zu: region of %td slots, first capacity %u", sc_index2size(i),
                     cache_bin_empty_pos(bin_of(i)) - region_start(i), tcache_bin_cap_init(i));
    }
    void **end = cache_bin_empty_pos(bin_of(tsd->tcache_nbins - 1));
    cr_assert_eq((size_t)(end - (void **)tsd->stack_block), first);
    assert_bins_packed();
    return NULL;
}

Test(tcache, a_new_threads_bins_are_packed_at_their_first_capacities)
{
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, packed_bins_thread, NULL), 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
}

/* A bin that grows past its region moves the bins above it, with what they
 * hold, in the same order: those caches hand out the same objects. */
Test(tcache, a_bin_that_outgrows_its_region_moves_the_bins_above_with_their_objects)
{
    enum { NCLASS = 5, PER = 10 };
    static void *held[NCLASS + 1][TCACHE_NSLOTS_INIT_MAX];
    static unsigned nheld[NCLASS + 1];
    const unsigned grow = sc_size2index(16);
    tcache_flush(tsd);
    for (unsigned c = grow + 1; c <= grow + NCLASS; c++) {
        void *ps[PER];
        for (unsigned i = 0; i < PER; i++)
            ps[i] = malloc(sc_index2size(c));
        for (unsigned i = 0; i < PER; i++)
            free(ps[i]);
        nheld[c - grow] = ncached(c);
        cr_assert_gt(nheld[c - grow], 0);
        memcpy(held[c - grow], bin_of(c)->head, nheld[c - grow] * sizeof(void *));
    }
    unsigned cap0 = tcache_bin_cap(tsd, grow);
    enum { N = 1000 };
    static void *ps[N];
    for (int round = 0; round < 4; round++) {
        for (unsigned i = 0; i < N; i++)
            ps[i] = malloc(16);
        for (unsigned i = 0; i < N; i++)
            free(ps[i]);
    }
    cr_assert_gt(tcache_bin_cap(tsd, grow), cap0, "the 16 B bin did not grow");
    assert_bins_packed();
    for (unsigned c = grow + 1; c <= grow + NCLASS; c++) {
        cr_assert_eq(ncached(c), nheld[c - grow], "class %zu lost objects", sc_index2size(c));
        for (unsigned i = 0; i < nheld[c - grow]; i++)
            cr_assert_eq(malloc(sc_index2size(c)), held[c - grow][i], "class %zu, object %u", sc_index2size(c), i);
    }
}

/* Every cached slab class of a page or more (slabs of a few regions, first
 * capacity TCACHE_NSLOTS_MIN) grows too: a batch half as large again as
 * its first capacity ends up cached whole, without fills. (The 4-14 KiB
 * classes used to stop at TCACHE_BIN_BYTES of objects, 9-32 of them.) */
Test(tcache, bins_of_classes_of_a_page_or_more_grow_past_their_first_capacity)
{
    unsigned top = MA_MIN(tsd->tcache_nbins, (unsigned)SC_NBINS) - 1, tested = 0;
    size_t growth = 0;
    static void *ps[TCACHE_NSLOTS_SMALL_MAX];
    for (unsigned ind = 0; ind <= top; ind++) {
        if (sc_index2size(ind) < PAGE)
            continue;
        unsigned cap0 = tcache_bin_cap_init(ind), n = cap0 + cap0 / 2;
        cr_assert_geq(tcache_bin_cap_max(ind), n, "class %zu: largest capacity %u, first %u", sc_index2size(ind),
                      tcache_bin_cap_max(ind), cap0);
        cr_assert_leq((size_t)(n - cap0) * sc_index2size(ind), tcache_thread_budget(tsd),
                      "the test's batch outgrows the thread's budget");
        growth += (size_t)cap0 * sc_index2size(ind); /* one doubling */
        cr_assert_leq(growth, tcache_bin_growth_budget(tsd, ind), "the test's batches outgrow the thread's budget");
        bin_t *bin = &tsd_arena(tsd)->bins[ind];
        uint64_t fills = 0;
        for (int round = 0; round < 12; round++) {
            if (round == 8)
                fills = bin->stats.nfills;
            for (unsigned i = 0; i < n; i++)
                ps[i] = malloc(sc_index2size(ind));
            for (unsigned i = 0; i < n; i++)
                free(ps[i]);
        }
        cr_assert_geq(tcache_bin_cap(tsd, ind), n, "class %zu: capacity %u, first %u, batch %u",
                      sc_index2size(ind), tcache_bin_cap(tsd, ind), cap0, n);
        cr_assert_eq(bin->stats.nfills, fills, "class %zu: the batch is still filled from slabs", sc_index2size(ind));
        tested++;
    }
    if (tested == 0)
        cr_skip_test("no class of a page or more is cached in this configuration");
}

/* Bins grow only within the thread's budget: thrash enough classes (the
 * largest cached classes of the kind that can grow, whatever the page
 * size) that together they could outgrow it; the growth they got stays
 * within it, and reaches it. Classes below a page share one budget: with
 * remote frees among the thrashing (a 96 B object of another arena's, which
 * goes home, every round) TCACHE_THREAD_BYTES, without,
 * TCACHE_THREAD_BYTES_LOCAL. Classes of a page or more have their own,
 * TCACHE_THREAD_BYTES_PAGES: a cached object of theirs pins little but
 * itself. */
static void thrash_within_budget(bool remote, bool pages)
{
    enum { N = TCACHE_NSLOTS_SMALL_MAX };
    static void *ps[N];
    const size_t budget = pages ? TCACHE_THREAD_BYTES_PAGES : remote ? TCACHE_THREAD_BYTES : TCACHE_THREAD_BYTES_LOCAL;
    remote_owner_t o = {.arena = other_arena()};
    pthread_t th = remote ? remote_owner_start(&o) : (pthread_t)0;
    cr_assert_eq(tsd->remote_cycles, 0, "a fresh thread counts as freeing others' objects");
    unsigned top = MA_MIN(tsd->tcache_nbins, (unsigned)SC_NBINS) - 1;
    while (!pages && top > 0 && sc_index2size(top) >= PAGE)
        top--;
    if (pages && sc_index2size(top) < PAGE)
        cr_skip_test("no class of a page or more is cached in this configuration");
    unsigned lo = top + 1;
    size_t could = 0, smallest = 0;
    while (lo > 0 && could <= budget + ((size_t)64 << 10) && (sc_index2size(lo - 1) >= PAGE) == pages) {
        lo--;
        unsigned most = tcache_bin_cap_max(lo);
        if (most > tcache_bin_cap_init(lo)) {
            could += (size_t)(most - tcache_bin_cap_init(lo)) * sc_index2size(lo);
            smallest = sc_index2size(lo);
        }
    }
    cr_assert_gt(could, budget, "the cached classes cannot outgrow the budget");
    for (int round = 0; round < 8; round++) {
        if (remote) {
            free(o.small[round]);
            cr_assert_eq(tcache_thread_budget(tsd), TCACHE_THREAD_BYTES, "a remote free did not count");
        }
        for (unsigned ind = lo; ind <= top; ind++) {
            unsigned n = tcache_bin_cap_max(ind);
            for (unsigned i = 0; i < n; i++)
                ps[i] = malloc(sc_index2size(ind));
            for (unsigned i = 0; i < n; i++)
                free(ps[i]);
        }
    }
    size_t grown = 0, grown_other = 0;
    for (unsigned ind = 0; ind < tsd->tcache_nbins; ind++) {
        unsigned cap = tcache_bin_cap(tsd, ind);
        cr_assert_geq(cap, tcache_bin_cap_init(ind), "class %zu below its first capacity", sc_index2size(ind));
        size_t g = (size_t)(cap - tcache_bin_cap_init(ind)) * sc_index2size(ind);
        *((sc_index2size(ind) >= PAGE) == pages ? &grown : &grown_other) += g;
    }
    cr_assert_eq(grown, pages ? tsd->cap_bytes_pages : tsd->cap_bytes, "the thread's growth account is off");
    cr_assert_eq(grown_other, pages ? tsd->cap_bytes : tsd->cap_bytes_pages, "the other account is off");
    cr_assert_leq(grown, budget, "bins grew by %zu bytes, over the thread's budget of %zu", grown, budget);
    cr_assert_geq(grown, budget - smallest, "bins grew by %zu bytes only (budget %zu)", grown, budget);
    if (remote)
        remote_owner_finish(&o, th, 8);
}

Test(tcache, all_bins_of_a_thread_grow_within_its_budget)
{
    thrash_within_budget(false, false);
}

Test(tcache, a_thread_freeing_others_objects_grows_within_the_smaller_budget)
{
    thrash_within_budget(true, false);
}

Test(tcache, the_bins_of_classes_of_a_page_or_more_grow_within_their_own_budget)
{
    thrash_within_budget(false, true);
}

/* A sized free of another arena's object (free_sized: through dalloc_elm,
 * not free's slow path) counts too. */
Test(tcache, a_sized_free_of_another_arenas_object_counts_as_remote_freeing)
{
    remote_owner_t o = {.arena = other_arena()};
    pthread_t th = remote_owner_start(&o);
    cr_assert_eq(tcache_thread_budget(tsd), TCACHE_THREAD_BYTES_LOCAL);
    free_sized(o.small[0], 96);
    cr_assert_eq(tcache_thread_budget(tsd), TCACHE_THREAD_BYTES, "free_sized of a remote object did not count");
    remote_owner_finish(&o, th, 1);
}

/* Whole-line objects of another arena are cached here on free (the line
 * map) without a look at their arena; flushing them back home is what
 * counts as freeing others' objects. */
Test(tcache, flushing_cached_objects_of_another_arena_counts_as_remote_freeing)
{
    remote_owner_t o = {.arena = other_arena()};
    pthread_t th = remote_owner_start(&o);
    unsigned i128 = sc_size2index(128);
    bin_use(128);
    unsigned c128 = ncached(i128);
    for (int i = 0; i < REMOTE_N; i++)
        free(o.lines[i]);
    cr_assert_eq(ncached(i128), c128 + REMOTE_N, "the 128-byte objects of another arena were not cached here");
    cr_assert_eq(tcache_thread_budget(tsd), TCACHE_THREAD_BYTES_LOCAL);
    tcache_flush(tsd);
    cr_assert_eq(tcache_thread_budget(tsd), TCACHE_THREAD_BYTES, "the flush of another arena's objects did not count");
    remote_owner_finish(&o, th, 0);
}

/* A remote free counts for TCACHE_REMOTE_CYCLES whole GC cycles: after
 * them, with no other, the thread has the larger budget again. */
Test(tcache, a_remote_free_counts_for_a_few_gc_cycles)
{
    remote_owner_t o = {.arena = other_arena()};
    pthread_t th = remote_owner_start(&o);
    free(o.small[0]);
    cr_assert_eq(tcache_thread_budget(tsd), TCACHE_THREAD_BYTES);
    for (unsigned cycle = 0; cycle < TCACHE_REMOTE_CYCLES; cycle++) {
        cr_assert_eq(tcache_thread_budget(tsd), TCACHE_THREAD_BYTES, "cycle %u", cycle);
        for (unsigned i = 0; i < tsd->tcache_nbins; i++)
            tcache_gc_step(tsd);
    }
    cr_assert_eq(tcache_thread_budget(tsd), TCACHE_THREAD_BYTES_LOCAL);
    remote_owner_finish(&o, th, 1);
}

/* ---------------------------------------------------------------------
 * Sparse slabs: frees bypass the cache (arena.c, "Sparse slabs")
 */

enum { SPARSE_SIZE = 64, SPARSE_MAXSLABS = 64 };

typedef struct sparse_bin {
    unsigned ind, nslabs;
    extent_t *slab[SPARSE_MAXSLABS];
    void *kept[SPARSE_MAXSLABS][8]; /* the objects left live on each slab */
    unsigned nkept;
} sparse_bin_t;

/* Fill nslabs whole slabs of SPARSE_SIZE, then free all but keep objects
 * of each slab other than the bin's current one and give the freed
 * objects back to their slabs (a flush): those slabs are at keep / nregs.
 * In two flushes, the second one object per slab: a slab is looked at as
 * regions come back to it, and the first slabs of the first flush thin out
 * while the bin has few non-full slabs yet. */
static void sparse_bin_make(sparse_bin_t *sb, unsigned nslabs, unsigned keep)
{
    sb->ind = sc_size2index(SPARSE_SIZE);
    const unsigned nregs = sc_bin_info[sb->ind].nregs;
    cr_assert(keep < 8 && nslabs + 2 <= SPARSE_MAXSLABS);
    tcache_flush(tsd);
    unsigned n = (nslabs + 2) * nregs;
    void **ps = malloc(n * sizeof(void *));
    cr_assert_not_null(ps);
    for (unsigned i = 0; i < n; i++)
        ps[i] = malloc(SPARSE_SIZE);
    tcache_flush(tsd); /* what the last fill left in the cache */
    /* The slabs all of whose regions are ours (the first may hold objects
     * allocated before the test), but the current one. */
    bin_t *bin = &tsd_arena(tsd)->bins[sb->ind];
    extent_t *all[SPARSE_MAXSLABS];
    unsigned nall = tu_slabs_besides(ps, n, bin->slabcur, all, SPARSE_MAXSLABS), count[SPARSE_MAXSLABS] = {0};
    for (unsigned i = 0; i < n; i++)
        for (unsigned k = 0; k < nall; k++)
            count[k] += tu_slab_of(ps[i]) == all[k];
    sb->nslabs = 0;
    for (unsigned k = 0; k < nall && sb->nslabs < nslabs; k++)
        if (count[k] == nregs)
            sb->slab[sb->nslabs++] = all[k];
    cr_assert_eq(sb->nslabs, nslabs, "%u objects filled %u whole slabs only", n, sb->nslabs);
    sb->nkept = keep;
    unsigned seen[SPARSE_MAXSLABS] = {0};
    for (unsigned i = 0; i < n; i++) {
        extent_t *s = tu_slab_of(ps[i]);
        unsigned k = 0;
        while (k < nslabs && sb->slab[k] != s)
            k++;
        if (k < nslabs && seen[k] <= keep)
            sb->kept[k][seen[k]++] = ps[i];
        else if (k < nslabs)
            free(ps[i]);
    }
    tcache_flush(tsd);
    for (unsigned k = 0; k < nslabs; k++)
        free(sb->kept[k][keep]);
    free(ps);
    tcache_flush(tsd);
}

static uintptr_t fastmap_byte(const void *p) { return rtree_fastmap_lookup(&tsd_arena(tsd)->fastmap, (uintptr_t)p); }

Test(tcache, frees_into_a_sparse_slab_bypass_the_cache_and_empty_it)
{
    cr_assert_gt(tsd_arena(tsd)->fastmap.npages, 0, "the fast map could not be reserved");
    sparse_bin_t sb;
    const unsigned nregs = sc_bin_info[sc_size2index(SPARSE_SIZE)].nregs;
    sparse_bin_make(&sb, 16, nregs / SLAB_SPARSE_DIV < 7 ? nregs / SLAB_SPARSE_DIV : 7);
    for (unsigned k = 0; k < sb.nslabs; k++) {
        cr_assert(sb.slab[k]->cache_bypass, "slab %u with %u of %u regions live is not sparse", k, sb.nkept, nregs);
        cr_assert_eq(fastmap_byte(sb.kept[k][0]), 0, "slab %u is still marked in the fast map", k);
    }
    /* A free of one of their objects goes straight back to its slab. */
    extent_t *s = sb.slab[3];
    unsigned cached = ncached(sb.ind), nfree = s->nfree;
    size_t curregs = arena_bin_stats(sb.ind)->curregs;
    void *q = sb.kept[3][0];
    free(q);
    cr_assert_eq(ncached(sb.ind), cached, "the free of a sparse slab's object was cached");
    cr_assert_eq(s->nfree, nfree + 1, "the object did not go back to its slab");
    cr_assert_eq(arena_bin_stats(sb.ind)->curregs, curregs - 1);
    void *p = malloc(SPARSE_SIZE);
    cr_assert_neq(p, q, "the sparse slab's object was handed out again");
    cr_assert_neq(tu_slab_of(p), s, "an object of the sparse slab was handed out");
    free(p);
    /* Its last objects freed, the slab is empty and leaves the bin's slabs
     * in use (kept empty for the next fills, or given back). */
    size_t curslabs = arena_bin_stats(sb.ind)->curslabs;
    for (unsigned j = 1; j < sb.nkept; j++)
        free(sb.kept[3][j]);
    bin_t *bin = &tsd_arena(tsd)->bins[sb.ind];
    bool in_empty = false;
    for (extent_t *e = extent_heap_first(&bin->empty); e != NULL; e = extent_heap_walk_next(e))
        in_empty |= e == s;
    cr_assert(in_empty || arena_bin_stats(sb.ind)->curslabs == curslabs - 1,
              "the emptied sparse slab is neither kept empty nor given back");
    for (unsigned k = 0; k < sb.nslabs; k++)
        for (unsigned j = 0; j < sb.nkept && k != 3; j++)
            free(sb.kept[k][j]);
}

Test(tcache, a_bin_of_few_slabs_keeps_caching_the_frees_of_its_sparse_ones)
{
    sparse_bin_t sb;
    sparse_bin_make(&sb, BIN_SPARSE_MIN_NONFULL - 2, 1);
    for (unsigned k = 0; k < sb.nslabs; k++) {
        cr_assert(!sb.slab[k]->cache_bypass, "slab %u bypasses with %u non-full slabs in the bin", k,
                  (unsigned)arena_bin_stats(sb.ind)->nonfull_slabs);
        cr_assert_eq(fastmap_byte(sb.kept[k][0]), sb.ind + 1);
    }
    void *q = sb.kept[0][0];
    unsigned cached = ncached(sb.ind);
    free(q);
    cr_assert_eq(ncached(sb.ind), cached + 1, "the free was not cached");
    cr_assert_eq(malloc(SPARSE_SIZE), q, "the cache did not hand back the object freed last");
}

Test(tcache, a_sparse_slab_that_a_fill_makes_current_is_cached_again)
{
    sparse_bin_t sb;
    sparse_bin_make(&sb, 12, 2);
    cr_assert(sb.slab[0]->cache_bypass);
    /* Fills take the fullest, then the lowest slab: with every other
     * slab as sparse, some fill takes one of them. */
    bin_t *bin = &tsd_arena(tsd)->bins[sb.ind];
    enum { MAXP = 4096 };
    static void *ps[MAXP];
    unsigned n = 0, k = sb.nslabs;
    while (k == sb.nslabs) {
        cr_assert_lt(n, MAXP, "no fill took a sparse slab");
        ps[n++] = malloc(SPARSE_SIZE);
        for (k = 0; k < sb.nslabs && bin->slabcur != sb.slab[k]; k++)
            ;
    }
    extent_t *s = sb.slab[k];
    cr_assert(!s->cache_bypass, "the current slab still bypasses the cache");
    cr_assert_eq(fastmap_byte(sb.kept[k][0]), sb.ind + 1, "the current slab is not marked again");
    unsigned cached = ncached(sb.ind);
    free(sb.kept[k][0]);
    cr_assert_eq(ncached(sb.ind), cached + 1, "a free into the current slab was not cached");
    while (n > 0)
        free(ps[--n]);
}

/* End to end: a heap that shrinks to a tenth with turnover (two frees at
 * random, one allocation) gives most of its slabs back. With every free
 * cached the thread reuses objects all over the slabs and keeps 82% of
 * them (2038 of 2500 slabs of 256 B when written); sparse slabs draining
 * keep 57%; allocating from the fullest slab alone (tcache:false) 36%. */
Test(tcache, a_heap_shrinking_with_turnover_gives_its_sparse_slabs_back)
{
    /* Slabs of 16 regions whatever the page size: a slab of hundreds
     * would not drain at random at a tenth of its objects anyway. */
    const size_t S = PAGE / 16;
    const unsigned ind = sc_size2index(S);
    cr_assert_eq(sc_bin_info[ind].nregs, 16);
    const unsigned N = 2500 * 16;
    void **o = malloc(N * sizeof(void *));
    cr_assert_not_null(o);
    for (unsigned i = 0; i < N; i++)
        o[i] = malloc(S);
    size_t peak = arena_bin_stats(ind)->curslabs;
    cr_assert_geq(peak * sc_bin_info[ind].nregs, N);
    uint64_t rng = 12345;
    unsigned n = N;
    while (n > N / 10) {
        for (int k = 0; k < 2; k++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            unsigned j = (unsigned)(rng % n);
            free(o[j]);
            o[j] = o[--n];
        }
        o[n++] = malloc(S);
    }
    tcache_flush(tsd);
    size_t left = arena_bin_stats(ind)->curslabs;
    cr_assert_leq(left * 10, peak * 7, "%zu of %zu slabs still in use at a tenth of the objects", left, peak);
    for (unsigned i = 0; i < n; i++)
        free(o[i]);
    free(o);
}

typedef struct {
    unsigned arena;
    void **objs;
    unsigned n;
} remote_freer_t;

static void *remote_freer_main(void *arg)
{
    remote_freer_t *f = arg;
    cr_assert_eq(mallctl("thread.arena", NULL, NULL, &f->arena, sizeof(f->arena)), 0);
    for (unsigned i = 0; i < f->n; i++)
        free(f->objs[i]);
    return NULL;
}

/* Objects of sparse slabs that other threads free wait on their slabs'
 * remote lists like any; a fill, which takes remote objects first, leaves
 * those for their slabs (and collects them there). */
Test(tcache, a_fill_leaves_the_remote_frees_of_sparse_slabs_to_their_slabs)
{
    sparse_bin_t sb;
    sparse_bin_make(&sb, 12, 3);
    enum { NR = 8 };
    void *objs[NR];
    unsigned nfree[NR];
    for (unsigned k = 0; k < NR; k++) {
        cr_assert(sb.slab[k]->cache_bypass);
        objs[k] = sb.kept[k][0];
        nfree[k] = sb.slab[k]->nfree;
    }
    remote_freer_t f = {.arena = other_arena(), .objs = objs, .n = NR};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, remote_freer_main, &f), 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
    bin_t *bin = &tsd_arena(tsd)->bins[sb.ind];
    cr_assert_not_null(bin->remote_slabs, "the remote frees did not wait on their slabs' lists");
    cr_assert_eq(ncached(sb.ind), 0);
    void *p = malloc(SPARSE_SIZE); /* a fill */
    cr_assert(!in_list(p, objs, NR), "a fill handed out a sparse slab's remote free %p", p);
    for (unsigned i = 0; i < ncached(sb.ind); i++)
        cr_assert(!in_list(bin_of(sb.ind)->head[i], objs, NR), "a fill cached a sparse slab's remote free");
    cr_assert_null(bin->remote_slabs);
    for (unsigned k = 0; k < NR; k++)
        cr_assert_eq(sb.slab[k]->nfree, nfree[k] + 1, "slab %u did not get its object back", k);
    free(p);
}
