/*
 * arena: bins of slabs for small classes, page runs for large ones, the
 * page pool under both, and their statistics. Threads are bound to arenas;
 * an arena never knows about thread caches or the profiler.
 */
#ifndef MYALLOC_ARENA_H
#define MYALLOC_ARENA_H

#include "extent.h"
#include "slab.h"

#define ARENAS_MAX 4096
/* The first arenas' fast maps are reserved together (rtree_fastmap_plan). */
#define ARENA_FASTMAPS_TOGETHER 16
_Static_assert(ARENAS_MAX <= EXTENT_POOL_IND_MAX, "the profiler's pool takes index ARENAS_MAX");

typedef struct bin_stats {
    uint64_t nmalloc;    /* regions handed out of slabs */
    uint64_t ndalloc;    /* regions returned to slabs */
    uint64_t nrequests;  /* allocation requests served (incl. thread-cache hits) */
    uint64_t nfills;     /* thread-cache fills */
    uint64_t nflushes;   /* thread-cache flushes */
    uint64_t nslabs;     /* slabs created */
    size_t curregs;      /* regions in use (handed out, incl. those in caches) */
    size_t curslabs;     /* slabs that exist */
    size_t nonfull_slabs;/* slabs in the nonfull heap */
    uint64_t nlent;      /* regions taken by other arenas' fills (see bin_borrow_locked) */
} bin_stats_t;          /* all fields 64-bit counters: stats.c adds them word by word */

/*
 * bin_t: the slabs of one small class in one arena.
 *
 * Invariants (under lock): slabcur is NULL or a slab of this class (it may
 * be full or empty: it is kept so an alloc/free cycle does not create and
 * destroy a slab each time); every other slab with a free region is in
 * nonfull[bin_bucket(its nfree)]: fills take the fullest bucket first and
 * the lowest address within it, so live objects pack into few slabs and
 * the emptiest ones drain and go back to the pool as whole pages; full
 * slabs are in no structure; a slab that becomes entirely free and is not
 * slabcur goes into the empty heap (nempty of them, address-ordered) while
 * those hold at most BIN_EMPTY_BYTES (at least one slab), else back to the
 * pool (at once while the arena is abandoned: extent_pool_trimming; and
 * all of them, slabcur too when empty, when the arena's last thread
 * leaves it: arena_thread_leave). A fill that finds no free region takes the lowest
 * empty slab before anything else: where objects are freed by other threads (collected in
 * bursts, each emptying slabs) the bin would otherwise give slabs back to
 * the pool and take them again at nearly every fill (prodcons 8+8: 150k
 * slabs made for 6M objects). Decay gives the empty slabs back within
 * ARENA_BIN_SCAN_NS, a purge at once.
 *
 * Remote frees: an object of this bin freed by a thread of another arena
 * goes back to its own slab without the lock: as a bit of the slab's
 * remote_bits when the slab has at most SLAB_REMOTE_BITS regions (one
 * atomic OR, which also tells whether the slab is announced), else onto
 * the slab's remote list through the object's first word (one CAS, as in
 * mimalloc's thread-free lists); the free that finds the slab not
 * announced (no bit's flag, an empty list) pushes it onto remote_slabs.
 * Whoever next takes the lock to fill detaches remote_slabs with one
 * exchange and takes the objects into its thread cache, those that fit and
 * are not a sparse slab's (bin_take_remote_locked; sparse slabs: arena.c);
 * the rest,
 * and all of them when a decay tick or a purge collects, go back to the
 * bitmaps. Until then such objects
 * still count as allocated (in curregs and in their slab's nfree, like
 * objects in a thread cache), so a slab on remote_slabs is never entirely
 * free and is never given back while announced. Objects thus always return
 * to their owner's slabs: no thread hands out an object next to another
 * thread's objects.
 *
 * Borrowing: a fill that finds no free region here takes regions of another
 * arena's non-full slabs (arena.c, bin_borrow_locked), only in classes of
 * whole cache lines, whose regions share no line with a neighbour.
 */
#define BIN_NBUCKETS 4   /* fullness classes of non-full slabs */
/* Sparse slabs (arena.c): frees of the objects of a slab with live regions
 * at most nregs / SLAB_SPARSE_DIV, in a bin of at least
 * BIN_SPARSE_MIN_NONFULL non-full slabs, bypass the thread caches. */
#define SLAB_SPARSE_DIV 4u
#define BIN_SPARSE_MIN_NONFULL 8u
#define BIN_EMPTY_BYTES (64u << 10) /* slabs a bin keeps empty (see bin_t) */
/* A bin whose slabs take fewer pages than SLAB_SMALL_BIN_SLABS of its
 * class's slabs makes its next slab of the class's small geometry
 * (sc_gen.c, slab_geometry_small): a class the arena holds few objects of
 * keeps them in a page or two, not in a 12-20 KiB slab mostly free, and
 * the class's own slabs, whose ends waste less, serve the bins that hold
 * more. make bench's churn (threads of 256 objects of 16 B-2 KiB), peak
 * RSS, medians of 5 interleaved runs: 1 thread at a time 2,264 -> 2,212
 * KiB, 2 at a time 2,832 -> 2,768. The bound is per class, not in pages: at
 * 64 or 128 KiB for every bin, larson 16 B-1 KiB (2 threads) rose 128-192
 * KiB (3,560 -> 3,688-3,752). With 4, larson 16 B-1 KiB (2 and 8 threads)
 * and prodcons 8+8 did not move; make bench's batch-mixed (one thread,
 * 1000 objects of 16 B-4 KiB) rose 2,408 -> 2,440 KiB (the small slabs'
 * ends). */
#define SLAB_SMALL_BIN_SLABS 4u

/* The fullness class of a non-full slab with nfree free regions: 0 for the
 * fullest quarter, BIN_NBUCKETS - 1 for the emptiest. */
MA_INLINE unsigned bin_bucket(unsigned nfree, unsigned nregs)
{
    return MA_MIN((nfree - 1) * BIN_NBUCKETS / nregs, BIN_NBUCKETS - 1);
}

typedef struct bin {
    ma_mutex_t lock;
    /* Nothing to purge inside its slabs until a region is freed into one
     * or a slab becomes current: the last inspection found every slab with
     * its free pages purged (arena.c, "Purging inside slabs"). Written
     * under the lock, read without it by decay, which then skips the bin. */
    bool slabs_settled;
    extent_t *slabcur;
    extent_heap_t empty;         /* entirely free slabs kept for the next fills */
    unsigned nempty;
    extent_heap_t nonfull[BIN_NBUCKETS];
    /* NULL, or the non-full slab where decay's last visit stopped, having
     * purged all it may: the next visit of the round goes on from there
     * (arena.c). A slab that leaves the non-full heaps clears it. */
    extent_t *purge_resume;
    /* NULL, or the non-full slab where decay's inspection of this bin ran
     * out of its tick's budget of slabs: a later tick's visit goes on
     * inspecting from there (arena.c). Cleared like purge_resume; an
     * inspection whose slab left ends there. */
    extent_t *inspect_resume;
    bool settling; /* the inspection under way may settle the bin (arena.c) */
    bin_stats_t stats;
    uint32_t npages; /* pages of its slabs (of both geometries) */
    /* Slabs with remote frees (bits or a list), linked through remote_next
     * (pushed by other threads without the lock; detached under it). */
    extent_t *remote_slabs MA_ALIGNED(MA_CACHELINE);
} MA_ALIGNED(MA_CACHELINE) bin_t;

/* A large class's statistics as reported (stats.arenas.<i>.lextents.<j>). */
typedef struct large_stats {
    uint64_t nmalloc, ndalloc, nrequests;
    size_t curlextents;
} large_stats_t;

/* What an arena counts per large class, atomics: one read-modify-write per
 * page-run allocation and one per free (a 48 KiB malloc+free pair did 7,
 * which made 112 of its ns 77 when plain). The rest is derived
 * (arena_large_read): live extents are nmalloc - ndalloc, requests are
 * nmalloc plus the thread caches' hits (nrequests_cached), and the arena's
 * large bytes are the live extents times their class sizes (a page run's
 * size is its class's). */
typedef struct large_counts {
    uint64_t nmalloc, ndalloc, nrequests_cached;
} large_counts_t;

typedef struct arena {
    unsigned ind;
    uint32_t nthreads;           /* threads bound to it (atomic) */
    rtree_fastmap_t fastmap;     /* its slabs' pages (free's fast path) */
    uint64_t bins_scanned_ns;    /* when arena_decay last looked at the bins */
    uint64_t slabs_scanned_ns;   /* when it last looked for free pages in slabs */
    uint64_t slabs_visited;      /* slabs those looks inspected (atomic; for tests) */
    uint64_t slabs_visit_max;    /* the most slabs one bin visit walked under its lock (for tests) */
    unsigned slabs_round_bin;    /* the next bin that look visits (atomic; >= SC_NBINS: done) */
    uint64_t slabs_redo[(SC_NBINS + 63) / 64]; /* bins a visit left pages to purge in (atomic bits) */
    uint64_t bins_used[(SC_NBINS + 63) / 64];  /* bins ever filled from or counted in (atomic bits) */
    /* The arrays last, each touched only where used (see extent_pool_t):
     * a program that uses a few classes keeps the rest of its 25 KiB
     * untouched. */
    extent_pool_t pool;
    bin_t bins[SC_NBINS];
    large_counts_t large[SC_NSIZES - SC_NBINS];
} arena_t;

#define ARENA_BIN_SCAN_NS 10000000ull /* 10 ms */
/* Runs of pages a decay tick purges at most inside slabs, and one bin lock
 * holds across (arena.c, "Purging inside slabs"). */
#define SLAB_VISIT_RANGES 32
/* Inspections of the slabs per decay period: a slab is purged once no fill
 * took from it for SLAB_IDLE_SCANS of them (the period, plus up to one). */
#define SLAB_IDLE_SCANS 4
/* Slabs a decay tick walks at most inside bins (arena.c). */
#define SLAB_TICK_SLABS 256

extern arena_t *arenas[ARENAS_MAX] MA_HIDDEN;
/* 1 + the highest index of an arena created so far (atomic; it only
 * grows). Loops over the arenas stop there: reading all of arenas[], 32
 * KiB, made 8 pages resident where a read of a page never written costs a
 * page (arena_bin_used), at every fork among others. */
extern unsigned arenas_end MA_HIDDEN;
MA_INLINE unsigned arena_end(void) { return ma_load_acquire(&arenas_end); }
/* Arena i if it exists (any i: indices past ARENAS_MAX name none). */
MA_INLINE arena_t *arena_if_exists(size_t i)
{
    return i < ARENAS_MAX ? ma_load_acquire(&arenas[i]) : NULL;
}
/* The next arena that exists at index *i or above, *i moved past it; NULL
 * past the last. Every loop over the arenas:
 *     for (unsigned i = 0; (a = arena_next(&i)) != NULL;) */
MA_INLINE arena_t *arena_next(unsigned *i)
{
    for (unsigned end = arena_end(); *i < end;) {
        arena_t *a = ma_load_acquire(&arenas[(*i)++]);
        if (a != NULL)
            return a;
    }
    return NULL;
}

/* Whether bin b of a was ever filled from or counted in (arena_bin_use):
 * before that it holds no slab, no remote object and zero statistics, so
 * the loops over an arena's bins (decay, purges, thread exit, stats) skip
 * it without reading it. A read of a page never written costs a page of
 * RSS on kernels without the shared zero page, as on the machines make
 * bench runs on: before this, decay's look at every bin made each arena of
 * prodcons 8+8 (16-256 B) resident in 5 pages instead of 3. */
MA_INLINE bool arena_bin_used(const arena_t *a, unsigned b)
{
    return (ma_load_relaxed(&a->bins_used[b / 64]) >> (b % 64)) & 1;
}
extern unsigned arena_narenas;   /* how many arenas threads are spread over */

bool arena_boot(unsigned narenas);
/* The arena with index ind, created on first use; NULL if it cannot be. */
arena_t *arena_get(unsigned ind);
/* Pick the least-loaded arena for a new thread and count the thread in. */
arena_t *arena_choose(void);
void arena_thread_join(arena_t *a);
/* Count a thread out; true when it was the arena's last, which also gives
 * back every empty slab of its bins. */
bool arena_thread_leave(arena_t *a);
/* Threads counted in over all arenas: those that allocate and have not
 * exited. */
uint32_t arena_nthreads_total(void);

/* Small: n regions of class binind into out (a thread-cache fill), or up
 * to nmax (>= n; out has room for them) while objects that other threads
 * freed are at hand; returns how many (0 only when out of memory). */
unsigned arena_fill_small_max(arena_t *a, unsigned binind, void **out, unsigned n, unsigned nmax);
MA_INLINE unsigned arena_fill_small(arena_t *a, unsigned binind, void **out, unsigned n)
{
    return arena_fill_small_max(a, binind, out, n, n);
}
/* Return n small regions of class binind whose extents are given (slabs may
 * belong to any arena). Aborts on a double free or a bogus pointer. */
void arena_dalloc_small_batch(unsigned binind, void **ptrs, extent_t **slabs, unsigned n);
void *arena_malloc_small(arena_t *a, unsigned binind, bool zero);

/* Large: a page run of usize bytes (a large class) aligned to align. */
void *arena_malloc_large(arena_t *a, size_t usize, size_t align, bool zero);
void arena_dalloc_large(extent_t *e);
/* Resize a large allocation in place to new_usize (a large class). */
bool arena_ralloc_large_in_place(extent_t *e, size_t new_usize, bool zero);

/* The out-of-line parts of arena_dalloc_remote: to the slab at once (an
 * arena with no thread left); the bit set in slab->remote_bits found old
 * there (a double free, or a slab to announce); a remote list. */
void arena_dalloc_remote_direct(extent_t *slab, unsigned binind, void *ptr);
void arena_remote_bit_hard(extent_t *slab, unsigned binind, void *ptr, uint64_t old, uint64_t bit);
void arena_dalloc_remote_list(extent_t *slab, unsigned binind, void *ptr);

/* Free a small object of class binind, region idx of its slab, which
 * belongs to another arena than the calling thread's: into the slab's
 * remote bits or onto its remote list (no lock), or to the slab at once
 * when its arena has no thread left. Inline, for free's slow path: the
 * common case, a bit set in a slab already announced, is one atomic OR
 * and two tests, all that a consumer thread's frees do past the lookup
 * (prodcons 1+1 under callgrind: 265.8 -> 256.1 instructions per object).
 * The arena's thread count is read once: a second read that found a
 * thread back pushed a bits slab's object onto a list (the same word),
 * which make bench's churn caught as double frees and hangs. */
MA_INLINE void arena_dalloc_remote(extent_t *slab, unsigned binind, void *ptr, unsigned idx)
{
    if (unlikely(ma_load_relaxed(&arenas[slab->arena_ind]->nthreads) == 0)) {
        /* Nobody to collect them soon: straight to the slab. */
        arena_dalloc_remote_direct(slab, binind, ptr);
        return;
    }
    if (likely(slab_nregs(slab, binind) <= SLAB_REMOTE_BITS)) { /* by class: sc_gen.c */
        /* One OR sets the region's bit and tells whether the slab is
         * announced; nothing is written into the object. */
        uint64_t bit = (uint64_t)1 << idx;
        uint64_t old = __atomic_fetch_or(&slab->remote_bits, bit | SLAB_REMOTE_ANNOUNCED, __ATOMIC_RELEASE);
        if (unlikely((old & (bit | SLAB_REMOTE_ANNOUNCED)) != SLAB_REMOTE_ANNOUNCED))
            arena_remote_bit_hard(slab, binind, ptr, old, bit);
        return;
    }
    arena_dalloc_remote_list(slab, binind, ptr);
}

/* Record a request served from a thread cache (stats only). */
void arena_bin_count_requests(arena_t *a, unsigned binind, uint64_t n);
/* n requests of large class ind that a thread cache served. */
void arena_large_count_cached(arena_t *a, unsigned ind, uint64_t n);
/* The statistics of large class SC_NBINS + c. */
void arena_large_read(const arena_t *a, unsigned c, large_stats_t *out);

size_t arena_purge(arena_t *a);
/* Every arena's (what arena.<all>.purge and malloc_trim do). */
size_t arena_purge_all(void);
/* A decay tick (extent_decay, at most max_pages), which also collects
 * remote frees and gives back bins' current slabs that are entirely free. */
size_t arena_decay(arena_t *a, uint64_t now_ns, size_t max_pages);

void arena_prefork(void);
void arena_postfork_parent(void);
void arena_postfork_child(void);

#endif
