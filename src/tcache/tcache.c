/*
 * tcache: per-thread caches, see tcache.h and cache_bin.h.
 */
#include "tcache.h"

#include <string.h>

#include "../arena/base.h"

bool tcache_opt_enabled = true;
size_t tcache_opt_max = (size_t)32 << 10;

size_t tcache_maxclass;
unsigned tcache_nbins;

static uint16_t bin_nslots[TCACHE_NBINS_LIMIT];     /* reserved: the largest capacity */
static uint16_t bin_cap_init[TCACHE_NBINS_LIMIT];
static uint8_t bin_lg_fill_max[TCACHE_NBINS_LIMIT];  /* fills of one object */
static size_t stack_slots;          /* slots per thread block, incl. the spare */
static base_cache_t stack_blocks;   /* recycled blocks of exited threads */
static void *disabled_slot;         /* what a disabled bin points at */

unsigned tcache_bin_cap_init(unsigned ind) { return bin_cap_init[ind]; }
unsigned tcache_bin_cap_max(unsigned ind) { return bin_nslots[ind]; }
unsigned tcache_bin_lg_fill_init(unsigned ind) { return MA_MIN(TCACHE_LG_FILL_DIV_INIT, bin_lg_fill_max[ind]); }
unsigned tcache_bin_lg_fill_max(unsigned ind) { return bin_lg_fill_max[ind]; }

bool tcache_boot(void)
{
    size_t max = tcache_opt_max;
    if (max > TCACHE_MAXCLASS_LIMIT)
        max = TCACHE_MAXCLASS_LIMIT;
    if (max < QUANTUM)
        max = QUANTUM;
    unsigned nbins = sc_size2index(max) + 1;
    if (sc_index2size(nbins - 1) > max)
        nbins--; /* tcache_max between classes: cache only classes <= it */
    if (nbins < 1)
        nbins = 1;
    tcache_nbins = nbins;
    tcache_maxclass = sc_index2size(nbins - 1);
    size_t total = 0;
    for (unsigned i = 0; i < nbins; i++) {
        unsigned n, init;
        if (i < SC_NBINS) {
            unsigned twice = 2 * sc_bin_info[i].nregs;
            n = (unsigned)MA_MAX(twice, TCACHE_BIN_BYTES / sc_index2size(i));
            n = MA_MIN(MA_MAX(n, TCACHE_NSLOTS_MIN), TCACHE_NSLOTS_SMALL_MAX);
            /* The classes of a page or more may grow past their first
             * 20 too (within the thread's budget of page classes): fixed
             * at 20, larson 16 B-32 KiB (1 thread) took 4% of its objects
             * from slabs, cold, filling and flushing at the bounds of
             * each bin's random walk. For the 16-32 KiB classes, at 40:
             * peak RSS 27.1-27.5 -> 26.1-26.5 MiB (5 runs; fewer slabs
             * emptied and made again), LL misses per op -14%,
             * instructions -1.4% (cachegrind, 8 MiB LL); at 160, with
             * TCACHE_THREAD_BYTES_PAGES, 21,000 KiB. The 4-14 KiB classes
             * too (they stopped at 20: 128 KiB is 9-32 of them): larson
             * 4-16 KiB, 1 thread, CPU -20% (0.0914 -> 0.0731 s, tcmalloc
             * 0.0725; medians of 7 interleaved runs), peak RSS 14.2 ->
             * 12.0 MiB, objects taken from slabs 5% -> 0.9% of requests
             * on 16 B-32 KiB; bench-footprint's server keeps 39 MiB in
             * its idle threads' caches after freeing all, not 28. */
            if (sc_index2size(i) >= PAGE)
                n = MA_MAX(n, TCACHE_NSLOTS_PAGE_MAX);
            init = MA_MIN(MA_MAX(twice, TCACHE_NSLOTS_MIN), TCACHE_NSLOTS_INIT_MAX);
            init = MA_MIN(init, n);
        } else {
            n = init = TCACHE_NSLOTS_LARGE;
        }
        bin_nslots[i] = (uint16_t)n;
        bin_cap_init[i] = (uint16_t)init;
        bin_lg_fill_max[i] = (uint8_t)ma_lg_floor(n);
        total += n;
    }
    stack_slots = total + 1;
    stack_blocks.size = stack_slots * sizeof(void *);
    stack_blocks.align = MA_CACHELINE;
    stack_blocks.no_zero = true; /* slots are written before they are read */
    return true;
}

/* Requests served from bin ind go to the thread's arena's statistics. */
static void bin_merge_requests(tsd_t *tsd, unsigned ind)
{
    cache_bin_t *b = &tsd->bins[ind];
    uint64_t n = b->nrequests;
    if (n == 0 || tsd->arena == NULL)
        return;
    b->nrequests = 0;
    b->gc_pops = (uint32_t)MA_MIN(b->gc_pops + n, (uint64_t)UINT32_MAX);
    if (ind < SC_NBINS)
        arena_bin_count_requests(tsd->arena, ind, n);
    else
        arena_large_count_cached(tsd->arena, ind, n);
}

MA_WARM_TEXT void tcache_merge_stats(tsd_t *tsd)
{
    for (unsigned i = 0; i < tsd->tcache_nbins; i++)
        bin_merge_requests(tsd, i);
}

static void bin_disable(cache_bin_t *b)
{
    void **pos = &disabled_slot;
    b->head = pos;
    b->low_water = b->full = b->empty = cache_bin_bits(pos);
    b->usize = 0;
    b->nrequests = 0;
    b->cap = 0;
}

/* Open bins take the new capacity at once, closed ones when they open. */
static void bin_set_cap(cache_bin_t *b, unsigned cap)
{
    bool closed = cache_bin_closed(b);
    b->cap = (uint16_t)cap;
    if (!closed)
        cache_bin_open(b);
}

/*
 * Layout of a thread's block: the bins in class order, each in a region as
 * large as the largest capacity it has had, so bin i's slots run from bin
 * i-1's empty end to its own. A bin uses the top of its region (the empty
 * end) first, so when each bin was given its largest capacity's region, a
 * producer of prodcons 8+8 (12 classes) touched 13-19 of the block's 37
 * pages: one or two per class. Packed, what the bins use is contiguous.
 * A bin that grows past its region moves the bins above it up (rare: a bin
 * grows only by doubling, and a shrunk bin keeps its region).
 */
static void **bin_region_start(tsd_t *tsd, unsigned ind)
{
    return ind == 0 ? (void **)tsd->stack_block : cache_bin_empty_pos(&tsd->bins[ind - 1]);
}

static void bin_reserve(tsd_t *tsd, unsigned ind, unsigned cap)
{
    cache_bin_t *b = &tsd->bins[ind];
    size_t have = (size_t)(cache_bin_empty_pos(b) - bin_region_start(tsd, ind));
    if (cap <= have)
        return;
    /* The block ends past the sum of the largest capacities: there is room
     * above the last bin. Move the cached items only, top bin first. */
    size_t d = cap - have;
    uint16_t dbits = (uint16_t)(d * sizeof(void *));
    for (unsigned j = tsd->tcache_nbins; j-- > ind;) {
        cache_bin_t *c = &tsd->bins[j];
        memmove(c->head + d, c->head, cache_bin_ncached(c) * sizeof(void *));
        c->head += d;
        c->low_water += dbits;
        c->full += dbits;
        c->empty += dbits;
    }
}

static void bins_enable(tsd_t *tsd)
{
    void **pos = tsd->stack_block;
    tsd->cap_bytes = 0;
    tsd->cap_bytes_pages = 0;
    for (unsigned i = 0; i < TCACHE_NBINS_LIMIT; i++) {
        cache_bin_t *b = &tsd->bins[i];
        if (i >= tsd->tcache_nbins) {
            bin_disable(b);
            continue;
        }
        pos += bin_cap_init[i];
        b->head = pos;
        b->low_water = b->empty = cache_bin_bits(pos);
        b->cap = bin_cap_init[i];
        cache_bin_close(b); /* until the thread allocates the class */
        b->usize = sc_index2size(i) <= UINT16_MAX ? (uint16_t)sc_index2size(i) : 0;
        b->nrequests = 0;
        tsd->lg_fill_div[i] = (uint8_t)tcache_bin_lg_fill_init(i);
        tsd->ran_empty[i] = 0;
        tsd->flushed[i] = 0;
    }
}

static void bins_disable(tsd_t *tsd)
{
    for (unsigned i = 0; i < TCACHE_NBINS_LIMIT; i++)
        bin_disable(&tsd->bins[i]);
}

bool tcache_init(tsd_t *tsd)
{
    tsd->tcache_nbins = tcache_nbins;
    tsd->tcache_enabled = false;
    bins_disable(tsd);
    if (!tcache_opt_enabled)
        return true;
    tsd->stack_block = base_cache_get(&stack_blocks);
    if (tsd->stack_block == NULL)
        return true; /* no cache, still a working thread */
    tsd->tcache_enabled = true;
    bins_enable(tsd);
    return true;
}

/* Flush the nflush oldest items of bin ind (those next to `empty`). */
static void bin_flush_oldest(tsd_t *tsd, unsigned ind, unsigned nflush)
{
    cache_bin_t *b = &tsd->bins[ind];
    unsigned ncached = cache_bin_ncached(b);
    if (nflush > ncached)
        nflush = ncached;
    if (nflush == 0)
        return;
    void **empty = cache_bin_empty_pos(b);
    void **items = empty - nflush;
    if (ind < SC_NBINS) {
        extent_t *slabs[TCACHE_FLUSH_BATCH];
        /* Remote objects here came in through free's fast path (rtree.h). */
        uint32_t home = tsd->arena != NULL ? tsd->arena->ind : UINT32_MAX;
        bool remote = false;
        for (unsigned done = 0; done < nflush; done += TCACHE_FLUSH_BATCH) {
            unsigned n = MA_MIN(nflush - done, TCACHE_FLUSH_BATCH);
            for (unsigned i = 0; i < n; i++) {
                /* A pointer freed twice may meet a slab that the first copy's
                 * flush already gave back: it is no slab of this class now. */
                rtree_elm_t elm = rtree_lookup((uintptr_t)items[done + i]);
                if (unlikely(!(elm & RTREE_SLAB) || rtree_elm_szind(elm) != ind))
                    ma_fatal("free(): double free or invalid pointer %p", items[done + i]);
                slabs[i] = rtree_elm_extent(elm);
                remote |= slabs[i]->arena_ind != home;
            }
            arena_dalloc_small_batch(ind, items + done, slabs, n);
        }
        if (remote)
            tcache_note_remote_free(tsd);
    } else {
        for (unsigned i = 0; i < nflush; i++) {
            /* A large object freed twice sits in the cache twice: the second
             * finds its pages already free. */
            rtree_elm_t elm = rtree_lookup((uintptr_t)items[i]);
            extent_t *e = rtree_elm_extent(elm);
            if (e == NULL || (elm & RTREE_STALE) || rtree_elm_szind(elm) != ind ||
                e->addr != (uintptr_t)items[i])
                ma_fatal("free(): double free of %p", items[i]);
            arena_dalloc_large(e);
        }
    }
    /* Slide the younger items down to the empty end. */
    memmove(b->head + nflush, b->head, (size_t)(ncached - nflush) * sizeof(void *));
    b->head += nflush;
    unsigned lw = cache_bin_low_water_count(b);
    lw = lw > nflush ? lw - nflush : 0;
    b->low_water = (uint16_t)(b->empty - lw * sizeof(void *));
}

void *tcache_alloc_hard(tsd_t *tsd, unsigned ind)
{
    cache_bin_t *b = &tsd->bins[ind];
    void *p;
    tsd->ran_empty[ind] = 1;
    bin_merge_requests(tsd, ind);
    if (ind >= SC_NBINS) {
        /* Large classes are not batch-filled: a miss allocates one (which
         * the arena counts as a request itself). */
        return arena_malloc_large(tsd_arena(tsd), sc_index2size(ind), PAGE, false);
    }
    /* Overflowed and flushed, and now empty again, since the last GC step:
     * the bin is too small for what this thread cycles through. */
    unsigned cap = b->cap;
    if (tsd->flushed[ind] && cap < bin_nslots[ind]) {
        /* Within the thread's budget for grown bins. */
        size_t usize = sc_index2size(ind);
        size_t budget = tcache_bin_growth_budget(tsd, ind), *account = tcache_bin_growth_account(tsd, ind);
        size_t room = budget > *account ? budget - *account : 0;
        unsigned grown = (unsigned)MA_MIN((size_t)MA_MIN(2 * cap, bin_nslots[ind]), cap + room / usize);
        if (grown > cap) {
            *account += (grown - cap) * usize;
            cap = grown;
            bin_reserve(tsd, ind, cap);
            bin_set_cap(b, cap);
        }
        tsd->flushed[ind] = 0;
    }
    void **empty = cache_bin_empty_pos(b); /* bin_reserve may have moved it */
    /* What a fill takes from the slabs follows the first capacity: a bin
     * grown to hold what comes back (a working batch, or other threads'
     * frees, below) gets that from there. Sized by the grown capacity, a
     * producer's fills took regions it then left unused: prodcons 1+1,
     * peak RSS 2.1 -> 2.5 MiB. */
    unsigned nfill = MA_MIN(cap, bin_cap_init[ind]) >> tsd->lg_fill_div[ind];
    if (nfill == 0)
        nfill = 1;
    unsigned got = arena_fill_small_max(tsd_arena(tsd), ind, empty - cap, nfill, cap);
    if (got == 0)
        return NULL;
    /* Allocating the class: other arenas' frees of it may come here. */
    cache_bin_open(b);
    /* Other threads' frees filled the bin whole (only those can: a fill
     * takes at most nfill from the slabs): more came back than it holds,
     * and the rest went into the slabs' bitmaps, for later fills to take
     * out again (prodcons 1+1 under callgrind: 55% of the objects, about 45
     * instructions each). Like a bin that overflowed, it grows at its next
     * fill, within the budget of a thread that frees other threads'
     * objects (it takes part in that traffic): prodcons 1+1 / 8+8, 11% / 8%
     * less CPU time, peak RSS +128 / +244 KiB (7 interleaved runs; +760 KiB
     * on 8+8 with the budget of a thread that frees only its own). */
    if (got == cap && nfill < cap) {
        tsd->flushed[ind] = 1;
        tcache_note_remote_free(tsd);
    }
    if (got < cap) /* keep the filled items contiguous at the empty end */
        memmove(empty - got, empty - cap, got * sizeof(void *));
    b->head = empty - got;
    b->nrequests++;
    p = *b->head;
    b->head++;
    /* The bin ran empty: its low-water mark stays at 0 (the empty end)
     * until the next GC step, which then fills more, not flushes. */
    b->low_water = b->empty;
    return p;
}

void tcache_dalloc_hard(tsd_t *tsd, unsigned ind, void *p)
{
    cache_bin_t *b = &tsd->bins[ind];
    if (cache_bin_closed(b) && !cache_bin_popped(b)) {
        /* The thread's own object, into a bin of a class it does not
         * allocate: a batch (TCACHE_FREE_BATCH), flushed whole when full,
         * with room left open for the rest of it (free's fast path fills
         * that room, with other arenas' line objects too: they leave with
         * the batch). */
        unsigned batch = MA_MIN((unsigned)b->cap, TCACHE_FREE_BATCH);
        if (cache_bin_ncached(b) >= batch)
            bin_flush_oldest(tsd, ind, cache_bin_ncached(b));
        b->full = cache_bin_bits(b->head - (batch - cache_bin_ncached(b)));
        bool pushed = cache_bin_push_fast(b, p);
        (void)pushed; /* there is room: batch > ncached */
        return;
    }
    /* The thread's own object (dalloc_elm), into a bin it pops from: it
     * uses the class after all. */
    if (cache_bin_closed(b)) {
        cache_bin_open(b);
        if (cache_bin_push_fast(b, p))
            return;
    }
    tsd->flushed[ind] = 1;
    bin_flush_oldest(tsd, ind, MA_MAX(b->cap / 4, 1));
    bool pushed = cache_bin_push_fast(b, p);
    (void)pushed; /* there is room after the flush */
}

void tcache_gc_step(tsd_t *tsd)
{
    if (!tsd->tcache_enabled)
        return;
    unsigned ind = tsd->gc_cursor;
    tsd->gc_cursor = ind + 1 >= tsd->tcache_nbins ? 0 : ind + 1;
    if (tsd->gc_cursor == 0 && tsd->remote_cycles != 0)
        tsd->remote_cycles--;
    cache_bin_t *b = &tsd->bins[ind];
    unsigned lw = cache_bin_low_water_count(b), cap = b->cap;
    uint64_t pops = b->gc_pops + b->nrequests;
    if (lw > 0) {
        /* lw objects sat unused since the last step: give back 3/4 of what
         * exceeds the pops of the interval, fill less. A bin in use keeps
         * a reserve as deep as its use: with sizes at random its level is
         * a random walk whose low point is rarely 0, and flushing that
         * only to refill it (with colder objects) cost larson 16 B-32 KiB
         * 30% of its time. An idle bin (no pops) is flushed as before. */
        unsigned idle = lw > pops ? lw - (unsigned)pops : 0;
        if (idle > 0)
            bin_flush_oldest(tsd, ind, idle - idle / 4);
        /* Mostly unused: a grown bin shrinks back towards its start. */
        if (lw >= cap / 2 && cap > bin_cap_init[ind] && cache_bin_ncached(b) <= cap / 2) {
            unsigned shrunk = MA_MAX(cap / 2, bin_cap_init[ind]);
            *tcache_bin_growth_account(tsd, ind) -= (cap - shrunk) * sc_index2size(ind);
            bin_set_cap(b, shrunk);
        }
        if (tsd->lg_fill_div[ind] < bin_lg_fill_max[ind])
            tsd->lg_fill_div[ind]++;
    } else if (tsd->ran_empty[ind] && tsd->lg_fill_div[ind] > 1) {
        tsd->lg_fill_div[ind]--; /* it kept running dry: fill more */
    }
    tsd->ran_empty[ind] = 0;
    tsd->flushed[ind] = 0;
    b->low_water = cache_bin_bits(b->head);
    if (pops == 0)
        cache_bin_close(b);
    else
        cache_bin_open(b);
    bin_merge_requests(tsd, ind);
    b->gc_pops = 0;
}

void tcache_flush(tsd_t *tsd)
{
    if (!tsd->tcache_enabled)
        return;
    for (unsigned i = 0; i < tsd->tcache_nbins; i++) {
        bin_flush_oldest(tsd, i, cache_bin_ncached(&tsd->bins[i]));
        bin_merge_requests(tsd, i);
    }
}

MA_WARM_TEXT void tcache_set_enabled(tsd_t *tsd, bool enabled)
{
    if (enabled == tsd->tcache_enabled)
        return;
    if (!enabled) {
        tcache_flush(tsd);
        tsd->tcache_enabled = false;
        bins_disable(tsd);
        return;
    }
    if (tsd->stack_block == NULL && (tsd->stack_block = base_cache_get(&stack_blocks)) == NULL)
        return;
    tsd->tcache_nbins = tcache_nbins;
    tsd->tcache_enabled = true;
    bins_enable(tsd);
}

size_t tcache_block_bytes(void) { return stack_blocks.size; }

void tcache_destroy(tsd_t *tsd)
{
    tcache_flush(tsd);
    tsd->tcache_enabled = false;
    bins_disable(tsd);
    if (tsd->stack_block != NULL) {
        base_cache_put(&stack_blocks, tsd->stack_block);
        tsd->stack_block = NULL;
    }
}
