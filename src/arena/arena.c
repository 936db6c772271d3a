/*
 * arena: bins, large page runs, arena creation and binding, see arena.h.
 */
#include "arena.h"

#include <string.h>

#include "base.h"
#include "pages.h"
#include "slab.h"

MA_LARGE_BSS arena_t *arenas[ARENAS_MAX];
unsigned arenas_end;
unsigned arena_narenas = 1;
static ma_mutex_t arenas_lock = MA_MUTEX_INITIALIZER; /* creation */

static void arena_init(arena_t *a, unsigned ind)
{
    a->ind = ind;
    a->slabs_round_bin = SC_NBINS; /* no round of slab visits under way */
    rtree_fastmap_init(&a->fastmap);
    extent_pool_init(&a->pool, ind, false);
    a->pool.fastmap = &a->fastmap;
    a->pool.nthreads = &a->nthreads;
    extent_pool_share(&a->pool); /* bins' locks are zero: unlocked */
}

bool arena_boot(unsigned narenas)
{
    if (narenas < 1)
        narenas = 1;
    if (narenas > ARENAS_MAX)
        narenas = ARENAS_MAX;
    arena_narenas = narenas;
    rtree_fastmap_plan(MA_MIN(narenas, ARENA_FASTMAPS_TOGETHER));
    return arena_get(0) != NULL;
}

MA_NOINLINE static arena_t *arena_create(unsigned ind)
{
    ma_mutex_lock(&arenas_lock);
    arena_t *a = ma_load_acquire(&arenas[ind]);
    if (a == NULL) {
        /* Page-aligned: what an arena serving a few small classes touches
         * (its header, pool scalars, decay backlog, first bins) is 3 pages. */
        a = base_alloc(sizeof(arena_t), PAGE);
        if (a != NULL) {
            arena_init(a, ind);
            ma_store_release(&arenas[ind], a);
            if (ind >= arenas_end)
                ma_store_release(&arenas_end, ind + 1);
        }
    }
    ma_mutex_unlock(&arenas_lock);
    return a;
}

arena_t *arena_get(unsigned ind)
{
    if (ind >= ARENAS_MAX)
        return NULL;
    arena_t *a = ma_load_acquire(&arenas[ind]);
    return likely(a != NULL) ? a : arena_create(ind);
}

static ma_mutex_t choose_lock = MA_MUTEX_INITIALIZER;

arena_t *arena_choose(void)
{
    /* Least-loaded first; an arena not created yet has no threads. The
     * choice and the count are one step (threads starting together would
     * otherwise all pick the same idle arena). */
    ma_mutex_lock(&choose_lock);
    unsigned best = 0;
    uint32_t best_n = UINT32_MAX;
    for (unsigned i = 0; i < arena_narenas; i++) {
        arena_t *a = ma_load_acquire(&arenas[i]);
        uint32_t n = a == NULL ? 0 : ma_load_relaxed(&a->nthreads);
        if (n < best_n) {
            best = i;
            best_n = n;
            if (n == 0)
                break;
        }
    }
    arena_t *a = arena_get(best);
    if (a == NULL)
        a = arena_get(0);
    arena_thread_join(a);
    ma_mutex_unlock(&choose_lock);
    return a;
}

/* An arena that threads used and none uses now is abandoned: what other
 * threads free into it goes back to the pool and out of memory at once
 * (bin_slab_emptied_locked, extent_dalloc) instead of waiting for a decay
 * that nothing there ticks, unless threads have been coming back to it
 * (extent_pool_trimming, which reads the count itself). */
void arena_thread_join(arena_t *a)
{
    if (a != NULL && ma_fetch_add(&a->nthreads, 1) == 0 && ma_load_relaxed(&a->pool.ever_left))
        ma_store_relaxed(&a->pool.rejoined_ns, decay_now_ns());
}

static void arena_release_empty_slabs(arena_t *a);

/* The last thread to leave an arena gives back the slabs its exit left
 * empty (and those kept empty before): kept, each bin's would wait for a
 * thread of the same classes, and a bin keeps up to BIN_EMPTY_BYTES, so
 * an arena that short-lived threads come back to came to hold for each
 * class the most that any of them had used, where the pool's pages serve
 * every class. make bench's churn (threads of 256 objects of 16 B-2 KiB,
 * 9 interleaved runs, peak RSS): 1 at a time 2,364 -> 2,288 KiB, 2 at a
 * time 3,048 -> 2,992, 8 at a time 4,768 -> 4,616; CPU time per run
 * unchanged (paired ratio 0.95, [0.77, 1.20], 11 runs). */
bool arena_thread_leave(arena_t *a)
{
    if (a == NULL || ma_fetch_sub(&a->nthreads, 1) != 1)
        return false;
    ma_store_relaxed(&a->pool.ever_left, true);
    arena_release_empty_slabs(a);
    return true;
}

uint32_t arena_nthreads_total(void)
{
    uint32_t n = 0;
    arena_t *a;
    for (unsigned i = 0; (a = arena_next(&i)) != NULL;)
        n += ma_load_relaxed(&a->nthreads);
    return n;
}

/* ---------------------------------------------------------------------
 * Small.
 */

/* A new slab for bin binind of a, of the class's small geometry while the
 * bin's slabs take fewer pages than SLAB_SMALL_BIN_SLABS of the class's
 * (arena.h); counted in the bin's pages. */
static extent_t *arena_slab_new(arena_t *a, bin_t *bin, unsigned binind)
{
    const sc_bin_info_t *bi = &sc_bin_info[binind];
    const bool small = bi->small_pages < bi->slab_pages && bin->npages < SLAB_SMALL_BIN_SLABS * bi->slab_pages;
    const size_t pages = small ? bi->small_pages : bi->slab_pages;
    bool zeroed;
    extent_t *slab = extent_alloc(&a->pool, pages << LG_PAGE, PAGE, binind, true, &zeroed);
    if (slab == NULL)
        return NULL;
    slab->slab_small = small;
    slab_init(slab, binind);
    bin->npages += (uint32_t)pages;
    return slab;
}

static void bin_collect_remote_locked(bin_t *bin, unsigned binind);
static void bin_slab_route_locked(bin_t *bin, unsigned binind, extent_t *slab);
static unsigned bin_take_remote_locked(bin_t *bin, unsigned binind, void **out, unsigned n);

/* Under the bin lock: slab, in no structure of the bin, goes back to the pool. */
static void bin_slab_release_locked(bin_t *bin, extent_t *slab)
{
    bin->stats.curslabs--;
    bin->npages -= (uint32_t)(slab->size >> LG_PAGE);
    extent_dalloc(slab->pool, slab);
}

/* Under the bin lock: the empty heap's lowest slab, taken out of it; NULL if
 * it has none. */
static extent_t *bin_take_empty_locked(bin_t *bin)
{
    extent_t *slab = extent_heap_first(&bin->empty);
    if (slab != NULL) {
        extent_heap_remove(&bin->empty, slab);
        bin->nempty--;
    }
    return slab;
}

/* Under the bin lock: a page of a slab may have become free, or a slab
 * with free pages current; decay walks the bin again, and an inspection
 * under way does not settle it. */
static void bin_unsettle_locked(bin_t *bin)
{
    ma_store_relaxed(&bin->slabs_settled, false);
    bin->settling = false;
}

/* Under the bin lock: slab leaves nonfull[k] and the bin's non-full slabs. */
static void bin_nonfull_remove_locked(bin_t *bin, unsigned k, extent_t *slab)
{
    extent_heap_remove(&bin->nonfull[k], slab);
    bin->stats.nonfull_slabs--;
    if (bin->purge_resume == slab)
        bin->purge_resume = NULL;
    if (bin->inspect_resume == slab)
        bin->inspect_resume = NULL;
}

/* Under the bin lock: the fullest (then lowest) non-full slab, taken out of
 * its heap; NULL if there is none. */
static extent_t *bin_take_nonfull_locked(bin_t *bin)
{
    for (unsigned k = 0; k < BIN_NBUCKETS; k++) {
        extent_t *slab = extent_heap_first(&bin->nonfull[k]);
        if (slab != NULL) {
            bin_nonfull_remove_locked(bin, k, slab);
            return slab;
        }
    }
    return NULL;
}

/*
 * Borrowing, for a bin of a (locked) that has no free region left: up to n
 * regions of the same class from other arenas' non-full slabs, before a
 * slab of its own is made. Without it, the holes that threads of one arena
 * free in another's slabs (a pool filled by one thread, replaced by
 * others) are reused only by the owner's threads, maybe never, while the
 * others grow new slabs. The regions stay their slab's: counted in the
 * lender's bin and freed back to it (as remote frees are). Only classes of
 * whole cache lines: such a region shares no line with its neighbours, so
 * borrowing never hands a thread an object next to another thread's (the
 * rule of bin_t; it is why dalloc_elm caches only those remote objects).
 * The other bins are try-locked (we hold our own: no lock order between
 * bins) and skipped without locking when they have no non-full slab. A
 * lender's remote frees are left for it to collect: collecting them here
 * made producers take each other's (prodcons 8+8: +7% CPU), for a smaller
 * gain in memory (larson 16 B-32 KiB, 8 threads: 95 -> 84 MB peak).
 * Returns how many regions were taken.
 */
static unsigned bin_borrow_locked(arena_t *a, unsigned binind, void **out, unsigned n)
{
    if ((sc_bin_info[binind].reg_size & (MA_CACHELINE - 1)) != 0)
        return 0;
    unsigned narenas = arena_narenas;
    for (unsigned k = 1; k < narenas; k++) {
        arena_t *lender = ma_load_acquire(&arenas[(a->ind + k) % narenas]);
        if (lender == NULL)
            continue;
        bin_t *bin = &lender->bins[binind];
        if (!arena_bin_used(lender, binind) || ma_load_relaxed(&bin->stats.nonfull_slabs) == 0 ||
            !ma_mutex_trylock(&bin->lock))
            continue;
        unsigned got = 0;
        extent_t *slab;
        while (got < n && (slab = bin_take_nonfull_locked(bin)) != NULL) {
            got += slab_alloc_batch(slab, binind, out + got, n - got);
            bin_slab_route_locked(bin, binind, slab);
            if (slab->nfree != 0) { /* back in the heap of its new fullness */
                extent_heap_insert(&bin->nonfull[bin_bucket(slab->nfree, slab_nregs(slab, binind))], slab);
                bin->stats.nonfull_slabs++;
            }
        }
        bin->stats.nmalloc += got;
        bin->stats.curregs += got;
        bin->stats.nlent += got;
        ma_mutex_unlock(&bin->lock);
        if (got != 0)
            return got;
    }
    return 0;
}

/* Mark bin b of a used (arena_bin_used) before it is first written. */
static void arena_bin_use(arena_t *a, unsigned b)
{
    if (unlikely(!arena_bin_used(a, b)))
        __atomic_fetch_or(&a->bins_used[b / 64], (uint64_t)1 << (b % 64), __ATOMIC_RELAXED);
}

unsigned arena_fill_small_max(arena_t *a, unsigned binind, void **out, unsigned n, unsigned nmax)
{
    bin_t *bin = &a->bins[binind];
    arena_bin_use(a, binind);
    unsigned got = 0, borrowed = 0;
    ma_mutex_lock(&bin->lock);
    /* What other threads freed first, as much as fits: what is not taken
     * goes through the bitmaps to be taken again. */
    if (ma_load_relaxed(&bin->remote_slabs) != NULL)
        got = bin_take_remote_locked(bin, binind, out, nmax);
    while (got < n) {
        extent_t *slab = bin->slabcur;
        if (slab == NULL || slab->nfree == 0) {
            slab = bin_take_nonfull_locked(bin);
            if (slab == NULL)
                slab = bin_take_empty_locked(bin);
            if (slab == NULL) {
                if ((borrowed = bin_borrow_locked(a, binind, out + got, n - got)) != 0)
                    break;
                slab = arena_slab_new(a, bin, binind);
                if (slab == NULL)
                    break;
                bin->stats.nslabs++;
                bin->stats.curslabs++;
            }
            /* A full slabcur being replaced simply leaves every structure.
             * A new current slab may have free pages still resident. */
            bin->slabcur = slab;
            bin_slab_route_locked(bin, binind, slab);
            bin_unsettle_locked(bin);
        }
        got += slab_alloc_batch(slab, binind, out + got, n - got);
    }
    bin->stats.nmalloc += got;
    bin->stats.curregs += got;
    bin->stats.nfills++;
    ma_mutex_unlock(&bin->lock);
    return got + borrowed;
}

/* Under the bin lock: slab (not slabcur, in no heap) became entirely
 * free. It joins the empty heap (bin_t); when that is full, the highest of
 * its slabs and this one goes back to the pool instead, so the lowest are
 * kept. A slab that had pages purged inside goes back at once: it was idle
 * for a decay period, no fill is waiting for it, and it goes back purged
 * whole (extent_dalloc). */
static void bin_release_empty_slabs_locked(bin_t *bin, unsigned binind);

static void bin_slab_emptied_locked(bin_t *bin, extent_t *slab)
{
    if (slab->purged_pages != 0) {
        bin_slab_release_locked(bin, slab);
        return;
    }
    if (unlikely(extent_pool_trimming(slab->pool))) {
        /* No fill will come: this slab and those kept for fills go back. */
        unsigned binind = slab->szind;
        bin_slab_release_locked(bin, slab);
        bin_release_empty_slabs_locked(bin, binind);
        return;
    }
    if (bin->nempty != 0 && ((size_t)bin->nempty + 1) * slab->size > BIN_EMPTY_BYTES) {
        extent_t *high = extent_heap_first(&bin->empty);
        for (extent_t *e = high; e != NULL; e = extent_heap_walk_next(e))
            high = e->addr > high->addr ? e : high;
        if (high->addr < slab->addr) {
            bin_slab_release_locked(bin, slab);
            return;
        }
        extent_heap_remove(&bin->empty, high);
        bin->nempty--;
        bin_slab_release_locked(bin, high);
    }
    extent_heap_insert(&bin->empty, slab);
    bin->nempty++;
}

/*
 * Sparse slabs. A thread cache hands out first what the thread freed last,
 * wherever it lies: while a heap shrinks with turnover (frees at random,
 * fewer allocations), every slab is refilled at the rate it is emptied and
 * none ever empties, where allocating from the fullest slab (a fill's
 * order, or tcache:false) would let the emptiest drain. So a slab whose
 * live regions fall to a quarter (SLAB_SPARSE_DIV) or less, that is not
 * its bin's current slab, in a bin with at least BIN_SPARSE_MIN_NONFULL
 * non-full slabs, is unmarked in the fast maps (cache_bypass): frees of
 * its objects miss free's fast path, and its slow path gives them straight
 * back to the slab (dalloc_elm; one bin lock per free) instead of
 * caching them; nor does a fill hand out its remote frees.
 * It is marked again when a fill makes it current (the bin has nothing
 * fuller left) or a borrower fills it past the quarter.
 * make bench-footprint's server (one thread, sessions opening and closing
 * as the load falls to 10% of its peak and climbs back to 60%; 3
 * interleaved runs): trough RSS 97.7 -> 76 MiB, end 190.5 -> 183.8 MiB
 * (tcache:false: 61-73 and 182 MiB). The price is a locked free for what
 * a sparse slab gets back: the fragmentation cycle (90% freed at random)
 * took 9.6% more allocator instructions under callgrind. Only past the
 * bin's first slabs: a bin of a few slabs keeps its frees cached (make
 * bench's batch-mixed: 1.5% more instructions in all without that bound).
 */
static void bin_slab_route_locked(bin_t *bin, unsigned binind, extent_t *slab)
{
    const unsigned nregs = slab_nregs(slab, binind);
    bool sparse = slab != bin->slabcur && (nregs - slab->nfree) * SLAB_SPARSE_DIV <= nregs &&
                  bin->stats.nonfull_slabs >= BIN_SPARSE_MIN_NONFULL;
    if (sparse != slab->cache_bypass)
        extent_slab_set_bypass(slab, sparse);
}

/* Under the bin lock, after regions of slab were freed (it had old_nfree
 * free regions before): move it to the heap of its new fullness, or out of
 * every heap when it is entirely free (unless it is slabcur). */
static void bin_slab_freed_locked(bin_t *bin, unsigned binind, extent_t *slab, unsigned old_nfree)
{
    const unsigned nregs = slab_nregs(slab, binind);
    if (slab->nfree == old_nfree)
        return;
    bin_unsettle_locked(bin); /* maybe a page became free */
    if (slab == bin->slabcur)
        return;
    bin_slab_route_locked(bin, binind, slab);
    bool was_listed = old_nfree != 0;
    if (slab->nfree == nregs) {
        if (was_listed)
            bin_nonfull_remove_locked(bin, bin_bucket(old_nfree, nregs), slab);
        bin_slab_emptied_locked(bin, slab);
    } else if (!was_listed) {
        extent_heap_insert(&bin->nonfull[bin_bucket(slab->nfree, nregs)], slab);
        bin->stats.nonfull_slabs++;
    } else if (bin_bucket(old_nfree, nregs) != bin_bucket(slab->nfree, nregs)) {
        extent_heap_remove(&bin->nonfull[bin_bucket(old_nfree, nregs)], slab);
        extent_heap_insert(&bin->nonfull[bin_bucket(slab->nfree, nregs)], slab);
    }
}

MA_INLINE void slab_free_checked(extent_t *slab, unsigned binind, void *ptr)
{
    long idx = slab_region_index(slab, binind, ptr);
    if (unlikely(idx < 0))
        ma_fatal("free(): invalid pointer %p (not the start of an allocation)", ptr);
    if (unlikely(!slab_free_region(slab, (unsigned)idx)))
        ma_fatal("free(): double free of %p", ptr);
}

/* ---------------------------------------------------------------------
 * Remote frees: see bin_t.
 */

/* Push slab onto its bin's remote_slabs: the free that found it not
 * announced. Its object is not visible to the bin before that (a list's
 * head was NULL; a bit sits behind a clear SLAB_REMOTE_ANNOUNCED, which no
 * collection looks at), so it keeps the slab allocated while this writes
 * the link. */
static void bin_announce_remote(bin_t *bin, extent_t *slab)
{
    extent_t *top = ma_load_relaxed(&bin->remote_slabs);
    do {
        slab->remote_next = top;
    } while (!__atomic_compare_exchange_n(&bin->remote_slabs, &top, slab, true, __ATOMIC_RELEASE,
                                          __ATOMIC_RELAXED));
}

/* Out of line: its arguments' addresses would put the common path's on
 * the stack. */
MA_NOINLINE void arena_dalloc_remote_direct(extent_t *slab, unsigned binind, void *ptr)
{
    arena_dalloc_small_batch(binind, &ptr, &slab, 1);
}

void arena_remote_bit_hard(extent_t *slab, unsigned binind, void *ptr, uint64_t old, uint64_t bit)
{
    if (old & bit)
        ma_fatal("free(): double free of %p", ptr);
    bin_announce_remote(&arenas[slab->arena_ind]->bins[binind], slab);
}

void arena_dalloc_remote_list(extent_t *slab, unsigned binind, void *ptr)
{
    arena_t *a = arenas[slab->arena_ind];
    void *old = ma_load_relaxed(&slab->remote_head);
    do {
        *(void **)ptr = old;
    } while (!__atomic_compare_exchange_n(&slab->remote_head, &old, ptr, true, __ATOMIC_RELEASE,
                                          __ATOMIC_RELAXED));
    if (old == NULL) /* the list was empty: this free announces the slab */
        bin_announce_remote(&a->bins[binind], slab);
}

/* Under the bin lock, for each of the two kinds of remote frees (this one
 * and the next): detach the frees of one announced slab (its link already
 * read), its objects into out while they fit (at most n in all, *got so
 * far) and the slab is not sparse, the rest into its bitmap. Return how
 * many went there.
 * Remote bits come out in address order, and the bin never reads the
 * objects themselves: they may sit in the cache of the thread that freed
 * them, and a fill that walked a list through them waited for each in turn
 * (larson 16-128 B, 8 threads: about 14% of its CPU time on that load). */
static size_t slab_take_remote_bits(extent_t *slab, unsigned binind, void **out, unsigned n, unsigned *got)
{
    uint64_t bits = __atomic_exchange_n(&slab->remote_bits, 0, __ATOMIC_ACQ_REL) & ~SLAB_REMOTE_ANNOUNCED;
    const size_t reg_size = sc_bin_info[binind].reg_size;
    if (!slab->cache_bypass) {
        unsigned k = *got;
        for (; bits != 0 && k < n; bits &= bits - 1)
            out[k++] = (void *)(slab->addr + (uintptr_t)__builtin_ctzll(bits) * reg_size);
        *got = k;
    }
    if (bits == 0)
        return 0;
    /* A region freed into the bitmap meanwhile, and by a remote free too. */
    uint64_t twice = slab->bitmap[0] & bits;
    if (unlikely(twice != 0))
        ma_fatal("free(): double free of %p", (void *)(slab->addr + (uintptr_t)__builtin_ctzll(twice) * reg_size));
    slab->bitmap[0] |= bits;
    slab->bitmap_hint = 0;
    unsigned nbits = (unsigned)__builtin_popcountll(bits);
    slab->nfree = (uint16_t)(slab->nfree + nbits);
    return nbits;
}

/* A list runs from the last free to the first: reversed, the objects go
 * out in the order they were freed, which for a consumer is the order they
 * were made in, usually ascending addresses. In list order, prodcons 1+1
 * took 13% more CPU time. The objects out are only checked to lie in the
 * slab (see bin_take_remote_locked); the rest like any free. */
static size_t slab_take_remote_list(extent_t *slab, unsigned binind, void **out, unsigned n, unsigned *got)
{
    void *p = __atomic_exchange_n(&slab->remote_head, NULL, __ATOMIC_ACQ_REL);
    unsigned first = *got, k = first;
    for (; p != NULL && k < n && !slab->cache_bypass; k++) { /* not a sparse slab's */
        if (unlikely((uintptr_t)p - slab->addr >= slab->size))
            ma_fatal("free(): invalid pointer %p (a remote free list was overwritten)", p);
        out[k] = p;
        p = *(void **)p;
    }
    for (unsigned i = first, j = k; i + 1 < j; i++, j--) {
        void *t = out[i];
        out[i] = out[j - 1];
        out[j - 1] = t;
    }
    *got = k;
    size_t freed = 0;
    for (; p != NULL; freed++) {
        void *link = *(void **)p;
        slab_free_checked(slab, binind, p);
        p = link;
    }
    return freed;
}

/* Under the bin lock: what other threads freed. Every announced slab's
 * remote bits or list are detached; the first n objects go straight to
 * out, the rest into their slab's bitmap. A slab's link is read before its
 * frees are detached: from then on a new remote free may announce it
 * again (rewriting the link).
 * The objects taken skip the bitmap (set, then scanned and cleared by a
 * fill): they were allocated regions and stay so, in a thread cache now.
 * A fill of a producer whose objects all come back by remote frees thus
 * costs about a load and a store per object (prodcons 1+1 under
 * callgrind: collection and fill 58 -> 38 instructions per object, with
 * what still goes through the bitmaps). An object of a list was checked to
 * be a region of its slab when it was freed; here only that it lies in
 * the slab (the link that led to it is the first word of a freed object,
 * which a use after free may have overwritten). The others are checked like
 * any free, which also stops a list made circular by a double free (its
 * second visit finds the region free): a circle always runs past n. A
 * double free whose first free was taken into a thread cache is not
 * caught, as for two frees into one thread cache. Returns how many objects
 * went to out. */
static unsigned bin_take_remote_locked(bin_t *bin, unsigned binind, void **out, unsigned n)
{
    extent_t *slab = __atomic_exchange_n(&bin->remote_slabs, NULL, __ATOMIC_ACQUIRE);
    const bool as_bits = sc_bin_info[binind].nregs <= SLAB_REMOTE_BITS; /* by class: sc_gen.c */
    unsigned got = 0;
    size_t freed = 0;
    while (slab != NULL) {
        extent_t *next = slab->remote_next;
        unsigned old_nfree = slab->nfree;
        size_t k = as_bits ? slab_take_remote_bits(slab, binind, out, n, &got)
                           : slab_take_remote_list(slab, binind, out, n, &got);
        if (k != 0) {
            freed += k;
            bin_slab_freed_locked(bin, binind, slab, old_nfree);
        }
        slab = next;
    }
    /* All were freed; the fill counts those taken as allocated again. */
    bin->stats.ndalloc += got + freed;
    bin->stats.curregs -= got + freed;
    return got;
}

/* Under the bin lock: every announced slab's remote frees into its bitmap
 * (a decay tick, a purge: nobody is filling). */
static void bin_collect_remote_locked(bin_t *bin, unsigned binind)
{
    bin_take_remote_locked(bin, binind, NULL, 0);
}

void arena_dalloc_small_batch(unsigned binind, void **ptrs, extent_t **slabs, unsigned n)
{
    while (n > 0) {
        unsigned ind = slabs[0]->arena_ind;
        bin_t *bin = &arenas[ind]->bins[binind];
        unsigned keep = 0, done = 0;
        ma_mutex_lock(&bin->lock);
        for (unsigned i = 0; i < n;) {
            extent_t *slab = slabs[i];
            if (slab->arena_ind != ind) {
                ptrs[keep] = ptrs[i];
                slabs[keep] = slab;
                keep++;
                i++;
                continue;
            }
            /* A run of objects of one slab (a batch filled from it comes
             * back together): free them all, then move the slab between
             * fullness heaps once, not once per object. */
            unsigned old_nfree = slab->nfree;
            do {
                slab_free_checked(slab, binind, ptrs[i]);
                i++;
                done++;
            } while (i < n && slabs[i] == slab);
            bin_slab_freed_locked(bin, binind, slab, old_nfree);
        }
        bin->stats.ndalloc += done;
        bin->stats.curregs -= done;
        bin->stats.nflushes++;
        ma_mutex_unlock(&bin->lock);
        n = keep;
    }
}

void *arena_malloc_small(arena_t *a, unsigned binind, bool zero)
{
    void *p;
    if (arena_fill_small(a, binind, &p, 1) == 0)
        return NULL;
    arena_bin_count_requests(a, binind, 1);
    if (zero)
        memset(p, 0, sc_bin_info[binind].reg_size);
    return p;
}

void arena_bin_count_requests(arena_t *a, unsigned binind, uint64_t n)
{
    arena_bin_use(a, binind);
    ma_fetch_add(&a->bins[binind].stats.nrequests, n);
}

void arena_large_count_cached(arena_t *a, unsigned ind, uint64_t n)
{
    ma_fetch_add(&a->large[ind - SC_NBINS].nrequests_cached, n);
}

/* ndalloc first: every free it counts follows an allocation that nmalloc,
 * read after it, counts too, so the difference never goes below 0. */
void arena_large_read(const arena_t *a, unsigned c, large_stats_t *out)
{
    const large_counts_t *lc = &a->large[c];
    out->ndalloc = ma_load_acquire(&lc->ndalloc);
    out->nmalloc = ma_load_acquire(&lc->nmalloc);
    out->nrequests = out->nmalloc + ma_load_relaxed(&lc->nrequests_cached);
    out->curlextents = (size_t)(out->nmalloc - out->ndalloc);
}

/* ---------------------------------------------------------------------
 * Large.
 */

void *arena_malloc_large(arena_t *a, size_t usize, size_t align, bool zero)
{
    unsigned szind = sc_size2index(usize);
    bool zeroed = false;
    extent_t *e = extent_alloc(&a->pool, usize, align, szind, false, &zeroed);
    if (e == NULL)
        return NULL;
    if (zero && !zeroed)
        memset((void *)e->addr, 0, usize);
    ma_fetch_add(&a->large[szind - SC_NBINS].nmalloc, 1);
    return (void *)e->addr;
}

void arena_dalloc_large(extent_t *e)
{
    ma_fetch_add(&arenas[e->arena_ind]->large[e->szind - SC_NBINS].ndalloc, 1);
    extent_dalloc(e->pool, e);
}

MA_WARM_TEXT bool arena_ralloc_large_in_place(extent_t *e, size_t new_usize, bool zero)
{
    arena_t *a = arenas[e->arena_ind];
    size_t old = e->size;
    unsigned old_ind = e->szind, new_ind = sc_size2index(new_usize);
    if (new_usize == old)
        return true;
    bool ok;
    if (new_usize < old) {
        ok = extent_shrink(e->pool, e, new_usize, new_ind);
    } else {
        bool zeroed = false;
        ok = extent_expand(e->pool, e, new_usize, new_ind, &zeroed);
        if (ok && zero && !zeroed)
            memset((void *)(e->addr + old), 0, new_usize - old);
    }
    if (ok) {
        /* The new class's allocation first (arena_large_read). */
        ma_fetch_add(&a->large[new_ind - SC_NBINS].nmalloc, 1);
        ma_fetch_add(&a->large[old_ind - SC_NBINS].ndalloc, 1);
    }
    return ok;
}

/* Under the bin lock: the empty slabs, and the current slab if entirely
 * free, go back to the pool (dirty: their pages then decay like any other). */
static void bin_release_empty_slabs_locked(bin_t *bin, unsigned binind)
{
    extent_t *slab = bin->slabcur;
    if (slab != NULL && slab->nfree == slab_nregs(slab, binind)) {
        bin->slabcur = NULL;
        bin_slab_release_locked(bin, slab);
    }
    while ((slab = bin_take_empty_locked(bin)) != NULL)
        bin_slab_release_locked(bin, slab);
}

/* Each bin keeps its current slab even when empty, and empty slabs (bin_t);
 * a purge gives those back too, after collecting what other threads freed.
 * A bin with neither slabs nor remote frees is not locked: locking it
 * wrote its page, and the bins of classes the arena never served lie on
 * pages of their own (for a thread that only freed, the 3 pages of its
 * arena's bins, of the arena's 6). */
static void arena_release_empty_slabs(arena_t *a)
{
    for (unsigned b = 0; b < SC_NBINS; b++) {
        bin_t *bin = &a->bins[b];
        if (!arena_bin_used(a, b))
            continue;
        if (ma_load_relaxed(&bin->slabcur) == NULL && ma_load_relaxed(&bin->nempty) == 0 &&
            ma_load_relaxed(&bin->remote_slabs) == NULL)
            continue;
        ma_mutex_lock(&bin->lock);
        bin_collect_remote_locked(bin, b);
        bin_release_empty_slabs_locked(bin, b);
        ma_mutex_unlock(&bin->lock);
    }
}

/* ---------------------------------------------------------------------
 * Purging inside slabs. A slab that stays partly used (its class fell out
 * of the program's mix, or a random 90% of its objects went) keeps every
 * page resident although whole pages of it may hold no object. Those pages
 * are purged (MADV_DONTNEED) like dirty pages, once no fill has taken a
 * region of their slab for a decay period (frees do not count: they only
 * free more pages), and at once by a purge. The slab
 * keeps them (purged_pages says which); a fill that hands out a region on
 * one takes it back into use (slab_unpurge), the kernel giving it a fresh
 * zero page on first touch. Slab metadata is never in the slab's pages
 * (slab.h), and the only word a free writes into an object (a remote-free
 * link) belongs to an object still allocated in the bitmap, so purging
 * under the bin lock cannot lose anything.
 */

/* A decay tick's share of that work: each period starts a round that
 * visits every bin once (the visit is the inspection), and a tick takes
 * bins of the round until it has walked SLAB_TICK_SLABS slabs (arena.h; a
 * visit stops there too, and a later tick goes on with the bin) or purged
 * SLAB_VISIT_RANGES runs of pages (a visit purges at most that many, each
 * about a microsecond under the bin lock, in batches of pages_purge_batch).
 * A bin with slabs left over is marked for another visit (slabs_redo),
 * which the next ticks make first.
 * Walking every bin and purging up to 16 MiB in one tick held bin locks,
 * and stalled the malloc that ran it, for up to 14.5 ms (footprint server,
 * where free pages inside slabs come in runs of one or two pages). */

void slab_unpurge(extent_t *slab, unsigned binind, void *const *regs, unsigned n)
{
    const size_t reg_size = sc_bin_info[binind].reg_size;
    uint64_t back = 0;
    for (unsigned i = 0; i < n; i++) {
        size_t off = (uintptr_t)regs[i] - slab->addr;
        unsigned p0 = (unsigned)(off >> LG_PAGE), p1 = (unsigned)((off + reg_size - 1) >> LG_PAGE);
        back |= (~(uint64_t)0 >> (63 - p1)) & (~(uint64_t)0 << p0);
    }
    back &= slab->purged_pages;
    slab->purged_pages &= ~back;
    ma_fetch_sub(&slab->pool->stats.slab_purged_pages, (size_t)__builtin_popcountll(back));
}

/* Whether regions r0..r1 of slab are all free. */
static bool slab_regions_free(const extent_t *slab, unsigned r0, unsigned r1)
{
    for (unsigned r = r0; r <= r1;) {
        unsigned bit = r % 64, n = MA_MIN(r1 - r + 1, 64 - bit);
        uint64_t want = (n == 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1) << bit;
        if ((slab->bitmap[r / 64] & want) != want)
            return false;
        r += n;
    }
    return true;
}

/* The pages of slab that no allocated region touches, as a mask. */
static uint64_t slab_free_pages(const extent_t *slab, unsigned binind)
{
    const sc_bin_info_t *bi = &sc_bin_info[binind];
    const unsigned pages = (unsigned)(slab->size >> LG_PAGE), nregs = slab_nregs(slab, binind);
    uint64_t mask = 0;
    for (unsigned p = 0; p < pages; p++) {
        size_t lo = (size_t)p << LG_PAGE;
        unsigned r0 = (unsigned)(lo / bi->reg_size);
        unsigned r1 = MA_MIN((unsigned)((lo + PAGE - 1) / bi->reg_size), nregs - 1);
        if (r0 > r1 || slab_regions_free(slab, r0, r1))
            mask |= (uint64_t)1 << p;
    }
    return mask;
}

typedef struct slab_purge_pass {
    unsigned min_idle;    /* inspections without a fill a slab needs (0: any slab) */
    bool decay;           /* a decay pass (inspections), not a purge of everything */
    bool counting;        /* this visit is one of those inspections */
    bool resume;          /* this visit goes on where the last one stopped */
    size_t pages, nranges, nslabs, ncalls;
    size_t max_slabs;     /* the budget of slab visits (SLAB_TICK_SLABS for a tick) */
    bool waiting;         /* a slab of the bin visited may have pages to purge once idle */
    bool stopped;         /* the pass was too full for a slab of the bin visited */
    extent_t *stopped_at; /* the first such slab in the non-full heaps */
    size_t max_pages, max_ranges;
    unsigned nbatch;      /* runs in batch, not purged yet */
    pages_range_t *batch; /* PAGES_BATCH_MAX runs, left uninitialized (zeroing
                           * them cost 143 instructions per decay tick) */
} slab_purge_pass_t;

/* Under the bin lock that took the runs in t->batch: purge them. Never
 * after it is released: a fill could then hand out a region on such a
 * page, and its contents would be lost. */
static void slab_purge_flush_locked(slab_purge_pass_t *t)
{
    if (t->nbatch != 0)
        t->ncalls += pages_purge_batch(t->batch, t->nbatch, false);
    t->nbatch = 0;
}

/* Whether the pass has purged all it may. */
static bool slab_purge_pass_full(const slab_purge_pass_t *t)
{
    return t->pages >= t->max_pages || t->nranges >= t->max_ranges;
}

/* Under the bin lock: purge the free pages of slab if no fill took from it
 * for t->min_idle inspections (counting this one when t->counting). */
static void slab_purge_locked(extent_t *s, unsigned binind, slab_purge_pass_t *t)
{
    t->nslabs++;
    const bool room = (size_t)s->nfree * sc_bin_info[binind].reg_size >= PAGE; /* for a free page */
    if (s->idle_scans < t->min_idle) {
        if (t->counting)
            s->idle_scans++;
        t->waiting |= room;
        return;
    }
    if (!room)
        return;
    if (slab_purge_pass_full(t)) {
        t->stopped = true;
        if (t->stopped_at == NULL)
            t->stopped_at = s;
        return;
    }
    uint64_t mask = slab_free_pages(s, binind) & ~s->purged_pages;
    if (mask == 0)
        return;
    s->purged_pages |= mask;
    size_t n = (size_t)__builtin_popcountll(mask);
    ma_fetch_add(&s->pool->stats.slab_purged_pages, n);
    t->pages += n;
    while (mask != 0) { /* one range per run of pages */
        unsigned p = (unsigned)__builtin_ctzll(mask);
        uint64_t rest = ~(mask >> p);
        unsigned len = rest == 0 ? 64 - p : (unsigned)__builtin_ctzll(rest);
        if (t->nbatch == PAGES_BATCH_MAX)
            slab_purge_flush_locked(t);
        t->batch[t->nbatch++] =
            (pages_range_t){(void *)(s->addr + ((uintptr_t)p << LG_PAGE)), (size_t)len << LG_PAGE};
        t->nranges++;
        mask &= ~((len == 64 ? ~(uint64_t)0 : ((uint64_t)1 << len) - 1) << p);
    }
}

/* Whether a visit that is not an inspection can stop: nothing it walks
 * further could be purged by this pass. */
static bool slab_purge_pass_done(const slab_purge_pass_t *t)
{
    return !t->counting && slab_purge_pass_full(t);
}

/* Under the bin lock: the pass t inspects the bin's current and non-full
 * slabs and purges what it may. A decay visit that is not an inspection
 * goes on where the round's last visit stopped: starting over, the visits
 * after a large free walked the slabs purged already again and again (a
 * program that freed 60% of 2 GiB of small objects, then allocated on: 22
 * million slab visits, most of its CPU time, in 4 s). Any visit stops
 * when t->max_slabs slabs are walked (an inspection of every slab of a bin
 * in one tick stalled the malloc that ran it for as long as the bin was
 * large: 13,905 slabs in one tick of the same program with 1 GiB); the
 * next visit to a bin whose inspection paused goes on with that one. */
static void bin_purge_slabs_locked(bin_t *bin, unsigned binind, slab_purge_pass_t *t)
{
    extent_t *s = NULL;
    unsigned k = 0;
    bool resumed_inspection = false, paused = false;
    t->waiting = t->stopped = false;
    t->stopped_at = NULL;
    if (t->resume && t->decay && bin->inspect_resume != NULL) {
        s = bin->inspect_resume;
        t->counting = resumed_inspection = true;
    } else if (t->resume) {
        s = bin->purge_resume;
    } else if (t->counting) {
        bin->settling = true;
    }
    if (t->counting) /* going on with the paused inspection, or a new one instead */
        bin->inspect_resume = NULL;
    if (s != NULL) {
        k = bin_bucket(s->nfree, slab_nregs(s, binind));
    } else {
        if (bin->slabcur != NULL)
            slab_purge_locked(bin->slabcur, binind, t);
        t->stopped_at = NULL; /* not slabcur: it is in no heap to go on in */
        s = extent_heap_first(&bin->nonfull[0]);
    }
    for (;;) {
        for (; s != NULL; s = extent_heap_walk_next(s)) {
            if (t->nslabs >= t->max_slabs) {
                if (t->counting) {
                    bin->inspect_resume = s;
                    paused = true;
                } else {
                    t->stopped = true;
                    if (t->stopped_at == NULL)
                        t->stopped_at = s;
                }
                goto out;
            }
            if (slab_purge_pass_done(t)) {
                t->stopped = true;
                t->stopped_at = s;
                goto out;
            }
            slab_purge_locked(s, binind, t);
        }
        if (++k == BIN_NBUCKETS)
            break;
        s = extent_heap_first(&bin->nonfull[k]);
    }
out:
    /* An inspection that went on keeps an earlier stop of the round's
     * purging: the slabs from there to where it went on are not done. */
    if (!(resumed_inspection && bin->purge_resume != NULL))
        bin->purge_resume = t->stopped_at;
    if (t->counting) {
        /* Settled once an inspection, in one visit or several, found
         * nothing to purge later and left nothing, and no region was freed
         * into the bin meanwhile (bin_unsettle_locked). */
        if (t->waiting || t->stopped || bin->purge_resume != NULL)
            bin->settling = false;
        if (!paused && bin->settling)
            ma_store_relaxed(&bin->slabs_settled, true);
    }
    t->stopped |= paused || bin->purge_resume != NULL;
    slab_purge_flush_locked(t);
}

/* Whether bin b has multi-page slabs that could hold free pages. */
static bool bin_has_slabs_to_purge(bin_t *bin, unsigned b)
{
    return sc_bin_info[b].slab_pages > 1 &&
           (ma_load_relaxed(&bin->stats.nonfull_slabs) != 0 || ma_load_relaxed(&bin->slabcur) != NULL);
}

/* A bin marked in slabs_redo, claimed by clearing its bit; SC_NBINS when
 * there is none. */
static unsigned arena_take_redo_bin(arena_t *a)
{
    for (unsigned w = 0; w < MA_ARRAY_LEN(a->slabs_redo); w++)
        for (uint64_t bits = ma_load_relaxed(&a->slabs_redo[w]); bits != 0; bits &= bits - 1) {
            uint64_t bit = bits & -bits;
            if (__atomic_fetch_and(&a->slabs_redo[w], ~bit, __ATOMIC_RELAXED) & bit)
                return w * 64 + (unsigned)__builtin_ctzll(bit);
        }
    return SC_NBINS;
}

/* Whether the arena's round of slab visits has visited every bin, and
 * made every visit its visits left to make. */
static bool arena_slab_round_done(arena_t *a)
{
    if (ma_load_relaxed(&a->slabs_round_bin) < SC_NBINS)
        return false;
    for (unsigned w = 0; w < MA_ARRAY_LEN(a->slabs_redo); w++)
        if (ma_load_relaxed(&a->slabs_redo[w]) != 0)
            return false;
    return true;
}

/* Visit bin b of a under its lock, walking at most SLAB_TICK_SLABS slabs
 * and purging at most SLAB_VISIT_RANGES runs of pages more than the pass
 * has so far, within the pass's own limits: the lock is held for that much
 * work at most, whoever visits (malloc_trim on a heap of 1 GiB of small
 * objects walked 13,897 slabs of one bin, and purged every run of pages
 * found there, in one 28 ms hold of its lock). */
static void arena_visit_bin(arena_t *a, unsigned b, slab_purge_pass_t *t)
{
    bin_t *bin = &a->bins[b];
    const size_t max_slabs = t->max_slabs, max_ranges = t->max_ranges, nslabs = t->nslabs;
    t->max_slabs = MA_MIN(max_slabs, nslabs + SLAB_TICK_SLABS);
    t->max_ranges = MA_MIN(max_ranges, t->nranges + SLAB_VISIT_RANGES);
    ma_mutex_lock(&bin->lock);
    bin_purge_slabs_locked(bin, b, t);
    ma_mutex_unlock(&bin->lock);
    t->max_slabs = max_slabs;
    t->max_ranges = max_ranges;
    if (t->nslabs - nslabs > ma_load_relaxed(&a->slabs_visit_max))
        ma_store_relaxed(&a->slabs_visit_max, (uint64_t)(t->nslabs - nslabs));
}

/* Purge free pages inside the slabs of a: when decay, those no fill took
 * from for a decay period, a tick's share of the round (all of the round
 * that is left when max_pages is SIZE_MAX: mallctl's decay, the background
 * thread); all of them otherwise. Returns the pages purged. */
static size_t arena_purge_slabs(arena_t *a, bool decay, uint64_t now_ns, size_t max_pages)
{
    pages_range_t batch[PAGES_BATCH_MAX];
    slab_purge_pass_t t = {
        .decay = decay, .max_pages = max_pages, .max_ranges = SIZE_MAX, .max_slabs = SIZE_MAX, .batch = batch};
    if (!decay) {
        for (unsigned b = 0; b < SC_NBINS; b++) {
            if (!arena_bin_used(a, b) || !bin_has_slabs_to_purge(&a->bins[b], b))
                continue;
            /* Visit after visit, each going on where the last stopped. */
            t.resume = false;
            do {
                arena_visit_bin(a, b, &t);
                t.resume = true;
            } while (t.stopped && !slab_purge_pass_full(&t));
        }
    } else {
        ssize_t ms = ma_load_relaxed(&a->pool.decay_dirty.ms);
        if (ms < 0)
            return 0;
        uint64_t period = MA_MAX((uint64_t)ms * 1000000ull / SLAB_IDLE_SCANS, ARENA_BIN_SCAN_NS);
        uint64_t last = ma_load_relaxed(&a->slabs_scanned_ns);
        /* One round per period, whoever claims it (a second would count
         * the slabs idle twice); each bin of it goes to one caller. Not
         * before the last round is done, visits again included: ticks too
         * few for a round per period would otherwise start over at the
         * first bins and never reach the last. */
        if (!(now_ns - last < period && now_ns >= last) && arena_slab_round_done(a) &&
            __atomic_compare_exchange_n(&a->slabs_scanned_ns, &last, now_ns, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            ma_store_relaxed(&a->slabs_round_bin, 0);
        t.min_idle = ms == 0 ? 0 : SLAB_IDLE_SCANS;
        if (max_pages != SIZE_MAX) { /* a tick's share, not the whole round */
            t.max_slabs = SLAB_TICK_SLABS;
            t.max_ranges = SLAB_VISIT_RANGES;
        }
        while (t.nslabs < t.max_slabs && t.nranges < t.max_ranges && t.pages < max_pages) {
            /* A bin to visit again first, else the round's next one. */
            unsigned b = arena_take_redo_bin(a);
            t.counting = b == SC_NBINS;
            t.resume = !t.counting;
            if (t.counting) {
                b = ma_load_relaxed(&a->slabs_round_bin);
                if (b >= SC_NBINS)
                    break;
                if (!__atomic_compare_exchange_n(&a->slabs_round_bin, &b, b + 1, false, __ATOMIC_RELAXED,
                                                 __ATOMIC_RELAXED))
                    continue;
            }
            bin_t *bin = &a->bins[b];
            /* A settled bin is not walked: walking every slab of every
             * bin each period for nothing took 3% of footprint server's
             * CPU time once the load had shrunk. Its slabs' idle counts
             * wait, so a slab there purges up to one period later. */
            if (!arena_bin_used(a, b) || !bin_has_slabs_to_purge(bin, b) ||
                ma_load_relaxed(&bin->slabs_settled))
                continue;
            arena_visit_bin(a, b, &t);
            if (t.stopped) /* maybe more: again soon */
                __atomic_fetch_or(&a->slabs_redo[b / 64], (uint64_t)1 << (b % 64), __ATOMIC_RELAXED);
        }
    }
    if (t.ncalls != 0)
        extent_count_slab_purge(&a->pool, t.ncalls, t.pages);
    ma_fetch_add(&a->slabs_visited, (uint64_t)t.nslabs);
    return t.pages;
}

MA_WARM_TEXT size_t arena_purge(arena_t *a)
{
    arena_release_empty_slabs(a);
    size_t n = arena_purge_slabs(a, false, 0, SIZE_MAX);
    return n + extent_purge_all(&a->pool);
}

MA_WARM_TEXT size_t arena_purge_all(void)
{
    /* Every arena's empty slabs first: a slab may have come from another
     * arena's pool (extent_pool_share), which would be dirty again after
     * its own purge. */
    arena_t *a;
    for (unsigned i = 0; (a = arena_next(&i)) != NULL;)
        arena_release_empty_slabs(a);
    size_t n = 0;
    for (unsigned i = 0; (a = arena_next(&i)) != NULL;)
        n += arena_purge(a);
    return n;
}

/*
 * Decay's part of the above, for what nobody is going to use soon:
 * - objects other threads freed are collected into their slabs (the work
 *   the owner's next fill would do), so an owner that went idle or exited
 *   does not leave them pinning their slabs;
 * - a current slab found entirely free, and the empty slabs, go back to the
 *   pool, so an arena does not keep idle slabs per bin forever (tens of
 *   MiB per arena with 64 KiB pages).
 * Both are checked with unlocked peeks first, redone under the lock.
 */
size_t arena_decay(arena_t *a, uint64_t now_ns, size_t max_pages)
{
    /* The bins are looked at every ARENA_BIN_SCAN_NS at most from the
     * ticker (40 bins, two cache lines each; ticks come every MiB
     * allocated), at every call from mallctl and the background thread. */
    uint64_t last = ma_load_relaxed(&a->bins_scanned_ns);
    size_t n = arena_purge_slabs(a, true, now_ns, max_pages);
    if (max_pages != SIZE_MAX && now_ns - last < ARENA_BIN_SCAN_NS && now_ns >= last)
        return n + extent_decay(&a->pool, now_ns, max_pages);
    ma_store_relaxed(&a->bins_scanned_ns, now_ns);
    for (unsigned b = 0; b < SC_NBINS; b++) {
        if (!arena_bin_used(a, b))
            continue;
        bin_t *bin = &a->bins[b];
        extent_t *slab = ma_load_relaxed(&bin->slabcur);
        bool slab_idle = slab != NULL && ma_load_relaxed(&slab->nfree) == slab_nregs(slab, b);
        bool remote = ma_load_relaxed(&bin->remote_slabs) != NULL;
        if (!slab_idle && !remote && ma_load_relaxed(&bin->nempty) == 0)
            continue;
        ma_mutex_lock(&bin->lock);
        bin_collect_remote_locked(bin, b);
        bin_release_empty_slabs_locked(bin, b);
        ma_mutex_unlock(&bin->lock);
    }
    return n + extent_decay(&a->pool, now_ns, max_pages);
}

/* ---------------------------------------------------------------------
 * Fork: every bin lock of every arena, then every pool lock (the order in
 * which a thread may nest them).
 */

MA_WARM_TEXT void arena_prefork(void)
{
    ma_mutex_prefork(&choose_lock);
    ma_mutex_prefork(&arenas_lock);
    arena_t *a;
    for (unsigned i = 0; (a = arena_next(&i)) != NULL;)
        for (unsigned b = 0; b < SC_NBINS; b++)
            ma_mutex_prefork(&a->bins[b].lock);
    for (unsigned i = 0; (a = arena_next(&i)) != NULL;)
        extent_pool_prefork(&a->pool);
}

MA_WARM_TEXT void arena_postfork_parent(void)
{
    arena_t *a;
    for (unsigned i = 0; (a = arena_next(&i)) != NULL;) {
        extent_pool_postfork_parent(&a->pool);
        for (unsigned b = 0; b < SC_NBINS; b++)
            ma_mutex_postfork_parent(&a->bins[b].lock);
    }
    ma_mutex_postfork_parent(&arenas_lock);
    ma_mutex_postfork_parent(&choose_lock);
}

MA_WARM_TEXT void arena_postfork_child(void)
{
    arena_t *a;
    for (unsigned i = 0; (a = arena_next(&i)) != NULL;) {
        extent_pool_postfork_child(&a->pool);
        for (unsigned b = 0; b < SC_NBINS; b++)
            ma_mutex_postfork_child(&a->bins[b].lock);
        /* Only the forking thread survives; it re-counts itself. */
        a->nthreads = 0;
        a->pool.ever_left = true; /* the other threads are gone */
    }
    ma_mutex_postfork_child(&arenas_lock);
    ma_mutex_postfork_child(&choose_lock);
}
