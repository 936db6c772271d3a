/*
 * extent: runs of pages, and the page pool that hands them out.
 *
 * A pool owns "chunks" mapped from the OS and tiles each chunk with extents.
 * A free extent is in one of three sets by what its pages hold:
 *
 *   dirty     freed by the program, pages likely resident
 *   muzzy     MADV_FREE'd: the kernel may take them; contents undefined
 *   retained  MADV_DONTNEED'd or never touched: not resident, reads as zero
 *
 * Allocation takes the best fit of the dirty set (the lowest-addressed
 * extent of the smallest size class that fits: big runs stay whole, a
 * freed slab's pages go to a slab of its size), then muzzy, then another
 * arena's dirty set (see extent_pool_share), then retained, and maps a new
 * chunk only when none fits. Freed extents are
 * coalesced with free neighbours of the same state in the same chunk.
 * Extents never span chunks, so a pool only ever looks at its own extents.
 *
 * Purging follows decay (decay.h): dirty pages go muzzy (MADV_FREE) after
 * dirty_decay_ms, or straight to retained (MADV_DONTNEED) when
 * muzzy_decay_ms is 0; muzzy pages go to retained after muzzy_decay_ms. The
 * oldest go first; madvise runs with the pool unlocked. With retain off a
 * chunk whose pages are all retained goes back to the OS.
 */
#ifndef MYALLOC_EXTENT_H
#define MYALLOC_EXTENT_H

#include "../common/mutex.h"
#include "../sizeclass/sizeclass.h"
#include "decay.h"
#include "rtree.h"

/* PURGING: taken out of its set while its pages are madvised with the pool
 * unlocked; no set matches it, so neighbours do not coalesce with it. */
enum extent_state { EXTENT_ACTIVE = 0, EXTENT_DIRTY, EXTENT_MUZZY, EXTENT_RETAINED, EXTENT_PURGING };

#define SLAB_BITMAP_WORDS ((SC_SLAB_MAXREGS + 63) / 64)

typedef struct chunk {
    uintptr_t base;
    size_t size;
    struct chunk *next;
} chunk_t;

/*
 * extent_t: one run of pages. Two cache lines: servers keep one per slab
 * (the footprint server: 20k of them, 2.5 MB), so fields that no extent
 * needs at the same time share storage.
 *
 * Invariants:
 * - addr and size are multiples of PAGE; [addr, addr+size) lies in chunk.
 * - state == EXTENT_ACTIVE: owned by a slab or a large allocation, in no
 *   set; szind is the slab's bin or the allocation's class.
 * - state != EXTENT_ACTIVE: in exactly one set of pool (the one named by
 *   state) and on that set's LRU list; szind == SC_NSIZES.
 * - slab: its geometry is its class's (sc_bin_info_t: slab_pages and nregs)
 *   or, when slab_small, the class's small one (small_pages, small_nregs);
 *   size is that many pages, and slab_nregs gives the regions.
 * - slab: bitmap has a 1 for each free region; nfree counts them; bits past
 *   slab_nregs are 0. A slab with nfree > 0 that is not its bin's current slab is
 *   in the bin's nonfull heap, or its empty heap if entirely free (ph_*
 *   links); a full slab is in no heap.
 * - ph_* links are used by exactly one heap at a time (a set's, or a bin's).
 * - slab: a page whose bit is set in purged_pages holds no allocated region
 *   (every region overlapping it is free in bitmap); the bit is cleared when
 *   a region on it is handed out again.
 * - An active slab of a class a cache bin holds (under 64 KiB) has its pages
 *   marked in the fast map of the arena using it (arena_ind), and, for a
 *   whole-line class, in those of the first shared pools (rtree.h), unless
 *   cache_bypass (a sparse slab, arena.c): then they are 0 in every map.
 *   cache_bypass is false for every other active extent.
 * - Shared storage, by what the extent is: lru_* for a free extent (its
 *   set's LRU list) or a sampled one (the profiler's live list, prof.c);
 *   remote_* for an active slab, set to NULL when it becomes one. bitmap
 *   and purged_pages for a slab; prof for a sampled extent (never a slab).
 */
typedef struct extent {
    uintptr_t addr;
    size_t size;
    struct extent_pool *pool;
    chunk_t *chunk;
    uint16_t szind;
    uint8_t state;
    bool slab;
    bool sampled;
    uint8_t idle_scans;         /* slab: purge scans since a fill took a region (arena.c) */
    uint16_t nfree;
    uint16_t bitmap_hint;       /* no free region in words below this one */
    bool cache_bypass;          /* slab: sparse, unmarked in the fast maps (arena.c; atomic) */
    bool slab_small;            /* slab: of its class's small geometry (small_pages, small_nregs) */
    uint32_t arena_ind;         /* active: the arena using it; free: its pool's */
    struct extent *ph_child, *ph_prev, *ph_next;
    union {
        struct {
            struct extent *lru_prev, *lru_next;
        };
        /* Slab: objects freed by threads of other arenas, and the link in
         * the bin's remote_slabs while the slab is announced there (see
         * bin_t). A slab of at most SLAB_REMOTE_BITS regions keeps them as
         * bits of remote_bits (region i: bit i; SLAB_REMOTE_ANNOUNCED: the
         * slab is on remote_slabs), set with one atomic OR; a larger one as
         * a list linked through the objects' first word (pushed with a
         * CAS), whose head is remote_head. */
        struct {
            union {
                void *remote_head;
                uint64_t remote_bits;
            };
            struct extent *remote_next;
        };
    };
    union {
        struct {
            uint64_t bitmap[SLAB_BITMAP_WORDS];
            uint64_t purged_pages; /* bit p set = page p was purged since the slab was made */
        };
        void *prof;                /* the profiler's record of a sampled object */
    };
} MA_ALIGNED(64) extent_t;

_Static_assert(SC_SLAB_MAXREGS <= UINT16_MAX, "nfree is 16 bits");
_Static_assert(SLAB_BITMAP_WORDS > 4 || sizeof(extent_t) == 128, "extent_t grew past two cache lines");

/* Remote frees as bits (see extent_t.remote_bits): slabs of at most 63
 * regions; bit 63 says the slab is announced. */
#define SLAB_REMOTE_BITS 63u
#define SLAB_REMOTE_ANNOUNCED ((uint64_t)1 << 63)

/* A pairing heap of extents ordered by address (lowest first). */
typedef struct extent_heap {
    extent_t *root;
} extent_heap_t;

void extent_heap_insert(extent_heap_t *h, extent_t *e);
void extent_heap_remove(extent_heap_t *h, extent_t *e);
MA_INLINE extent_t *extent_heap_first(extent_heap_t *h) { return h->root; }
/* The heap's next extent after e in a walk of all of them (no order), or
 * NULL; the heap must not change during the walk. */
extent_t *extent_heap_walk_next(extent_t *e);

typedef struct extent_list {
    extent_t *head, *tail;  /* head = oldest */
} extent_list_t;

/* A set of free extents of one state, binned by size class (floor). */
typedef struct eset {
    enum extent_state state;
    size_t npages;
    size_t nextents;
    extent_list_t lru;
    uint64_t nonempty[(SC_NSIZES + 63) / 64];
    extent_heap_t heaps[SC_NSIZES];
} eset_t;

typedef struct pool_stats {
    size_t mapped;             /* bytes of chunks */
    size_t active_pages;
    uint64_t npurge[2];        /* [0] dirty -> muzzy/retained, [1] muzzy -> retained */
    uint64_t nmadvise[2];
    uint64_t purged_pages[2];
    size_t slab_purged_pages;  /* pages of active slabs purged (arena.c; atomic) */
} pool_stats_t;

/* 7.4 KiB, most of it heaps and decay backlogs that a pool touches only as
 * it uses them; the scalars come first. Every arena has one, in its
 * arena_t: an arena serving the small classes writes 3 pages of both
 * (test_slab_bin, an_arena_serving_the_smallest_classes_...). */
typedef struct extent_pool {
    ma_mutex_t lock;
    chunk_t *chunks;
    size_t grow_next;          /* size of the next chunk to map */
    bool nohuge;               /* MADV_NOHUGEPAGE each new chunk once */
    rtree_fastmap_t *fastmap;  /* where its slabs are marked (NULL: nowhere) */
    unsigned ind;              /* arena index, for messages and stats */
    bool shared;               /* in the pools that lend each other dirty pages */
    const uint32_t *nthreads;  /* its arena's thread count (NULL: the profiler's pool) */
    bool ever_left;            /* a thread has left its arena (atomic; never cleared) */
    uint64_t rejoined_ns;      /* when a thread last joined its arena with none in it (atomic) */
    uint64_t ticked_ns;        /* its threads' last decay tick (atomic; extent_pool_note_tick) */
    pool_stats_t stats;
    decay_hold_t hold;         /* of the dirty set, on stats.active_pages (decay.h) */
    decay_t decay_dirty, decay_muzzy;
    eset_t dirty, muzzy, retained;
} extent_pool_t;

/* Pool indices: arenas' 0 .. ARENAS_MAX - 1, the profiler's ARENAS_MAX. */
#define EXTENT_POOL_IND_MAX 4096

/* Set up pool, whose memory is zero: what a new pool does not use stays
 * untouched, out of RSS (an arena's pool is 7.6 KiB; clearing it, even
 * only the words not zero, made all of it resident on kernels where a read
 * of a page never written maps a page of the process's own). */
void extent_pool_init(extent_pool_t *pool, unsigned ind, bool nohuge);
/* Make pool's dirty pages available to the other shared pools, and theirs
 * to it (the arenas' pools; not the profiler's). An extent taken from
 * another pool stays that pool's (its chunk's): its pages count as that
 * pool's active pages and go back to it when freed; only the arena using
 * it (arena_ind) and the fast map marking it are the taker's. */
void extent_pool_share(extent_pool_t *pool);

/* Whether what is freed into pool goes back to the system as it is freed,
 * a batch at a time (EXTENT_TRIM_BATCH; arena.c, extent_dalloc):
 * its arena is abandoned (threads used it, none does now), decay is on, no
 * thread has come back to the arena within the dirty decay time (where
 * threads come and go, the next one takes the pages, and purging them would
 * only fault them in again), and no thread of another arena is busy
 * (extent_pool_note_tick). */
bool extent_pool_trimming(extent_pool_t *pool);
/* Dirty pages a trimming pool gathers before it purges them, in one call:
 * purged one emptied slab at a time, larson 16 B-32 KiB (1 thread) made
 * 491 madvise calls when its main thread freed the heap at the end (8% of
 * its CPU time in them, TLB shootdowns mostly); gathered, 81, and CPU time
 * x 0.934 (21 paired runs). What is left under the batch goes at decay's
 * pace (other arenas' ticks visit the pool) or with the next batch. */
#define EXTENT_TRIM_BATCH ((((size_t)256) << 10) >> LG_PAGE) /* 256 KiB */
/* A thread of pool's arena had a decay tick (it allocates) at now. While
 * such a thread is busy (a tick within EXTENT_BUSY_NS), what is freed into
 * abandoned arenas is left to decay, which its ticks drive, and dirty for
 * it to take (shared pools). Purging each emptied slab at once while
 * others ran made larson 16 B-32 KiB, 8 threads, madvise ~1,300 times as
 * its threads exited one by one, for 15% more CPU time. Trimming is for a
 * program tearing down (a main thread freeing what exited workers left, its
 * own last allocation long ago), after which no tick may come. */
void extent_pool_note_tick(extent_pool_t *pool, uint64_t now);

/* Options (set before any pool exists): the decay times (ms; -1 never,
 * 0 at once), the hold's window (ms; 0 none), whether address space is
 * kept (retain), and huge pages for regular chunks (thp: 0 default, 1
 * always, 2 never). */
extern ssize_t extent_opt_dirty_decay_ms;
extern ssize_t extent_opt_muzzy_decay_ms;
extern ssize_t extent_opt_dirty_hold_ms;
extern bool extent_opt_retain;
extern unsigned extent_opt_thp;

/* Whether a set has decay work now: an epoch ended, or decay 0 with pages
 * (read without the lock: a stale answer only delays the work a tick).
 * A set empty now and at its last close has none: the epochs it skips are
 * aged in one step by the next advance, which then finds the same backlog
 * (zeros for the skipped epochs, what came since as the newest) as epoch
 * by epoch would have. A pool never used (the profiler's sampled pool) or
 * a set kept empty takes no lock and no backlog pass per tick. */
MA_INLINE bool extent_set_decay_due(const decay_t *d, const eset_t *s, uint64_t now_ns)
{
    ssize_t ms = ma_load_relaxed(&d->ms);
    size_t npages = ma_load_relaxed(&s->npages);
    if (ms == 0)
        return npages > 0;
    return ms > 0 && (npages > 0 || ma_load_relaxed(&d->npages_last) > 0) &&
           now_ns >= ma_load_relaxed(&d->epoch_start_ns) + d->interval_ns;
}

size_t extent_decay_hard(extent_pool_t *pool, uint64_t now_ns, size_t max_pages);

/* Purge what decay says should go by now; at most max_pages pages. Returns
 * the pages purged. Ticks come every MiB a thread allocates, epochs every
 * decay_ms/200: most ticks have nothing to do, and need not take the lock,
 * set up the work's frame, or even make a call (the check is in line here:
 * a tick of the profiler's sampled pool with nothing due cost ~45
 * instructions as calls, ~23 a sample on batch-mixed). */
MA_INLINE size_t extent_decay(extent_pool_t *pool, uint64_t now_ns, size_t max_pages)
{
    if (!extent_set_decay_due(&pool->decay_dirty, &pool->dirty, now_ns) &&
        !extent_set_decay_due(&pool->decay_muzzy, &pool->muzzy, now_ns))
        return 0;
    return extent_decay_hard(pool, now_ns, max_pages);
}
/* Change a pool's decay times (ms; -1 never, 0 at once). */
void extent_set_decay(extent_pool_t *pool, ssize_t dirty_ms, ssize_t muzzy_ms);
/* Change a pool's hold window (ms; 0 none): its peaks so far are forgotten. */
void extent_set_hold(extent_pool_t *pool, ssize_t ms);
/* Time until the pool's next decay epoch (UINT64_MAX: nothing to do). */
uint64_t extent_decay_ns_to_next(extent_pool_t *pool, uint64_t now_ns);

/* Chunks mapped by all pools so far: a change means memory reached a new
 * high-water mark (the profiler's gdump watches it). */
extern uint64_t extent_nchunks;

/* An active extent of size bytes aligned to align (power of two >= PAGE),
 * registered in the page map as a slab of class szind (every page) or as a
 * large allocation (first and last page). *zeroed tells whether its pages
 * are known to read as zero. NULL when out of memory. */
extent_t *extent_alloc(extent_pool_t *pool, size_t size, size_t align, unsigned szind, bool slab,
                       bool *zeroed);

/* Return an active extent to the pool: dirty; a slab with pages purged
 * inside (purged_pages) is purged whole and retained. */
void extent_dalloc(extent_pool_t *pool, extent_t *e);

/* Large in-place resizing: shrink e to new_size (the tail becomes dirty), or
 * grow it into the free extent that follows. szind is the new class. */
bool extent_shrink(extent_pool_t *pool, extent_t *e, size_t new_size, unsigned szind);
bool extent_expand(extent_pool_t *pool, extent_t *e, size_t new_size, unsigned szind, bool *zeroed);

/* Change the class recorded for an active large extent (first/last page). */
void extent_set_szind(extent_t *e, unsigned szind, uint64_t flags);
/* Active slab e: unmark its pages in the fast maps (bypass: free's slow path
 * then returns its objects to it, past the thread caches) or mark them
 * again. Under its bin's lock. */
void extent_slab_set_bypass(extent_t *e, bool bypass);

/* Purge free pages: dirty -> retained (forced), muzzy -> retained. Returns
 * the number of pages purged. */
size_t extent_purge_all(extent_pool_t *pool);

/* Count in pool's dirty purge statistics a purge of pages inside slabs
 * (arena.c: they never were in a free set). */
void extent_count_slab_purge(extent_pool_t *pool, size_t nmadvise, size_t pages);

/* Sizes in pages, read without the lock (stats). */
size_t extent_pool_dirty_pages(extent_pool_t *pool);

void extent_pool_prefork(extent_pool_t *pool);
void extent_pool_postfork_parent(extent_pool_t *pool);
void extent_pool_postfork_child(extent_pool_t *pool);

#endif
