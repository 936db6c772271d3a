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
} bin_stats_t;

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
 * slabcur is returned to the pool at once.
 *
 * The mailbox: objects of this bin freed by threads of other arenas come
 * back in chains (linked through their first word) pushed without the lock
 * (one CAS per chain); fills take whole chains into `recycled` (under the
 * lock) and hand those out before touching a slab. Mailbox and recycled
 * objects are still allocated as far as the slabs and curregs are
 * concerned (like objects in a thread cache); purging drains them back.
 */
#define BIN_NBUCKETS 4   /* fullness classes of non-full slabs */

/* The fullness class of a non-full slab with nfree free regions: 0 for the
 * fullest quarter, BIN_NBUCKETS - 1 for the emptiest. */
MA_INLINE unsigned bin_bucket(unsigned nfree, unsigned nregs)
{
    return MA_MIN((nfree - 1) * BIN_NBUCKETS / nregs, BIN_NBUCKETS - 1);
}

typedef struct bin {
    ma_mutex_t lock;
    extent_t *slabcur;
    extent_heap_t nonfull[BIN_NBUCKETS];
    void *recycled;
    size_t nrecycled;
    bin_stats_t stats;
    void *mailbox MA_ALIGNED(MA_CACHELINE); /* written by other threads */
    size_t nmailbox;
    /* The heads of mailbox and recycled at the last decay tick: unchanged
     * at the next one means nobody is consuming them (see arena_decay). */
    void *decay_seen_mail, *decay_seen_recycled;
} MA_ALIGNED(MA_CACHELINE) bin_t;

#define BIN_MAILBOX_BYTES ((size_t)16 << 10) /* beyond, remote frees go to the slabs */

typedef struct large_stats {
    uint64_t nmalloc, ndalloc, nrequests;
    size_t curlextents;
} large_stats_t;

typedef struct arena {
    unsigned ind;
    uint32_t nthreads;           /* threads bound to it (atomic) */
    rtree_fastmap_t fastmap;     /* its slabs' pages (free's fast path) */
    extent_pool_t pool;
    bin_t bins[SC_NBINS];
    large_stats_t large[SC_NSIZES - SC_NBINS]; /* atomics */
    size_t large_allocated;      /* bytes in active large extents (atomic) */
} arena_t;

extern arena_t *arenas[ARENAS_MAX];
extern unsigned arena_narenas;   /* how many arenas threads are spread over */

bool arena_boot(unsigned narenas);
/* The arena with index ind, created on first use; NULL if it cannot be. */
arena_t *arena_get(unsigned ind);
/* Pick the least-loaded arena for a new thread and count the thread in. */
arena_t *arena_choose(void);
void arena_thread_leave(arena_t *a);

/* Small: up to n regions of class binind into out (a thread-cache fill);
 * returns how many (0 only when out of memory). */
unsigned arena_fill_small(arena_t *a, unsigned binind, void **out, unsigned n);
/* Return n small regions of class binind whose extents are given (slabs may
 * belong to any arena). Aborts on a double free or a bogus pointer. */
void arena_dalloc_small_batch(unsigned binind, void **ptrs, extent_t **slabs, unsigned n);
void *arena_malloc_small(arena_t *a, unsigned binind, bool zero);

/* Large: a page run of usize bytes (a large class) aligned to align. */
void *arena_malloc_large(arena_t *a, size_t usize, size_t align, bool zero);
void arena_dalloc_large(extent_t *e);
/* Resize a large allocation in place to new_usize (a large class). */
bool arena_ralloc_large_in_place(extent_t *e, size_t new_usize, bool zero);

/* Hand back n objects of class binind of arena a chained first..last
 * (through their first word; last's link is set here), freed by a thread
 * of another arena. False, with nothing done, when a's mailbox is full or
 * a has no thread to use them: then they go to their slabs instead. */
bool arena_bin_mail(arena_t *a, unsigned binind, void *first, void *last, unsigned n);

/* Record a request served from a thread cache (stats only). */
void arena_bin_count_requests(arena_t *a, unsigned binind, uint64_t n);

size_t arena_purge(arena_t *a);
/* A decay tick (extent_decay, at most max_pages), which also gives back
 * bins' current slabs that are entirely free. */
size_t arena_decay(arena_t *a, uint64_t now_ns, size_t max_pages);

void arena_prefork(void);
void arena_postfork_parent(void);
void arena_postfork_child(void);

#endif
