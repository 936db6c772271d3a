/*
 * tcache: per-thread caches of small and large objects.
 *
 * Per class up to tcache_max, a cache_bin filled from the arena's bin in
 * batches and flushed in batches (one lock per bin touched, not per
 * object).
 *
 * Capacity adapts per thread and class. A small bin starts at twice its
 * slab's regions, clamped to [TCACHE_NSLOTS_MIN, TCACHE_NSLOTS_INIT_MAX]
 * (jemalloc's sizing), and doubles each time it thrashes, that is, when it
 * must refill after having overflowed and flushed since the last GC step,
 * up to TCACHE_BIN_BYTES of objects (at least two slabs, at most
 * TCACHE_NSLOTS_SMALL_MAX; at least TCACHE_NSLOTS_PAGE_MAX for the
 * classes of a page or more): a working batch that a thread allocates and frees again ends
 * up cached whole. So does a bin that a fill of other threads' frees of
 * its objects filled whole (a producer's). A thread that only frees (a consumer,
 * or frees of other threads' objects) never refills, so its bins stay small
 * and remote objects go back to their slabs instead of being reused here.
 * All of a thread's bins of classes below a page together grow to
 * TCACHE_THREAD_BYTES at most, or TCACHE_THREAD_BYTES_LOCAL while the
 * thread frees only its own objects; those of a page or more (4-32 KiB
 * with the defaults) have a budget of their own, TCACHE_THREAD_BYTES_PAGES.
 * The GC step gives back 3/4 of the objects that sat below the bin's
 * low-water mark beyond what it popped since the previous step (a bin in
 * use keeps a reserve as deep as its use), and halves a bin that stays
 * mostly unused. Large classes keep
 * TCACHE_NSLOTS_LARGE. A new thread's fills take an eighth of the capacity
 * (TCACHE_LG_FILL_DIV_INIT); the GC step makes fills smaller for bins that
 * idle and larger, up to half the capacity, for bins that run dry. What a
 * fill takes from the slabs follows the first capacity, grown or not (it
 * takes other threads' frees up to the whole capacity). Fills of
 * half the capacity from the start cost short-lived threads (make bench's
 * churn: 256 objects of 16-2048 B per thread) 18% more instructions and
 * 5-7% more peak RSS: they took regions the thread never used.
 * A free into a full bin flushes its oldest quarter: flushing half left a
 * bin whose working batch nearly fills it refilling and flushing on every
 * batch (make bench's batch-mixed: 4 KiB objects, 31 per batch, cap 32).
 * With the quarter and 128 KiB per bin that workload takes 29% fewer
 * allocator instructions (callgrind).
 */
#ifndef MYALLOC_TCACHE_H
#define MYALLOC_TCACHE_H

#include "tsd.h"

#define TCACHE_NSLOTS_MIN        20
#define TCACHE_NSLOTS_INIT_MAX   200
#define TCACHE_NSLOTS_SMALL_MAX  2048
#define TCACHE_NSLOTS_LARGE      20
#define TCACHE_NSLOTS_PAGE_MAX   160   /* slab classes >= PAGE (tcache.c) */
#define TCACHE_LG_FILL_DIV_INIT  3     /* a new thread's fills: capacity >> 3 */
#define TCACHE_BIN_BYTES         ((size_t)128 << 10)
#define TCACHE_FLUSH_BATCH       256   /* objects per arena call when flushing */
/* Growth budget of a thread's bins (beyond their first capacities). 1 MiB
 * let larson 16 B-1 KiB grow every bin of every thread, most of it held
 * idle: at 256 KiB its peak RSS fell 6.5% (2 threads) and 7% (8), with
 * the same callgrind instructions per pair (1 thread: 185.3 -> 185.7;
 * 16 B-32 KiB: 231.3 -> 232.4). make bench-footprint's server (one
 * thread) ends at 196.2 MiB instead of 199.5, for 0.3% more instructions.
 * Lowering the first capacities instead cost 16 B-32 KiB 19% more
 * instructions; 128 KiB gained the server 0.3% more. */
#define TCACHE_THREAD_BYTES      ((size_t)256 << 10)
/* The budget of a thread that frees only its own objects (no remote free
 * for TCACHE_REMOTE_CYCLES whole GC cycles). The larson growth above came
 * from threads freeing each other's objects: at 512 KiB for every thread,
 * larson 16 B-1 KiB's peak RSS rose 6% (2 threads) and 8% (8), and 1
 * thread's not at all. make bench's batch-mixed (1000 objects of 16 B-4 KiB,
 * about 650 KiB, allocated then freed) outgrew 256 KiB: five of its classes
 * filled and flushed 1 to 4 times per batch; at 512 KiB they stop
 * (callgrind, 3000 batches: 20,498 fills and 39,295 flushes -> 296 and 39,
 * 365 M -> 290 M instructions). */
#define TCACHE_THREAD_BYTES_LOCAL ((size_t)512 << 10)
/* The budget of the bins of classes of a page or more. A cached small
 * object can keep a whole slab of others from going back (the server's
 * figures above); one of a page or more pins little but itself, and a
 * thread cycling such objects through bins too small for its working set
 * flushes them to their slabs, where they sit as holes, and fills with
 * colder ones (tcmalloc lets a thread cache hold 4 MiB). larson 16 B-32
 * KiB, 1 thread: peak RSS 26,500 -> 21,000 KiB, program instructions 66.7 M ->
 * 63.9 M (callgrind, 300k pairs), CPU time per pair against tcmalloc's
 * (make bench, 5 runs) 1.66 -> 1.22; this and TCACHE_NSLOTS_PAGE_MAX
 * 40 -> 160 together, neither alone. bench-footprint's server: trough
 * +1,500 KiB, end and after freeing all unchanged; frag: after freeing
 * all +2,376 KiB. */
#define TCACHE_THREAD_BYTES_PAGES ((size_t)4 << 20)
#define TCACHE_REMOTE_CYCLES     2
/* What a closed bin (cache_bin.h: its thread has not allocated the class
 * yet, or not for a whole GC interval) holds of the thread's own frees: a
 * batch to flush in one go, not a cache. Opened to its capacity instead,
 * the bins of a consumer that shares its producer's arena stayed 3/4 to
 * all full of objects it would never hand out. prodcons with narenas:1,
 * peak RSS (medians of 9 runs) and CPU time (paired, 11 runs): 1+1 2,264
 * -> 2,212 KiB, x 0.93; 2+2 2,776 -> 2,640 KiB, x 0.88; 8+8 5,508 ->
 * 4,976 KiB, x 0.88. With the default arenas (8 on 2 CPUs) few consumers
 * share one with a producer: 8+8's peak RSS did not move, CPU paired 0.95
 * [0.86, 1.24] over 15 runs; 16+16 9,836 -> 9,516 KiB (7 runs). */
#define TCACHE_FREE_BATCH        32

/* Options (set before tcache_boot). */
extern bool tcache_opt_enabled;
extern size_t tcache_opt_max;

/* Effective values after boot. */
extern size_t tcache_maxclass;
extern unsigned tcache_nbins;

bool tcache_boot(void);
bool tcache_init(tsd_t *tsd);
void tcache_destroy(tsd_t *tsd);
/* The size of one thread's cache block (metadata; recycled at thread exit). */
size_t tcache_block_bytes(void);

/* The capacity of the thread's bin ind (0 while its cache is disabled). */
MA_INLINE unsigned tcache_bin_cap(const tsd_t *tsd, unsigned ind) { return tsd->bins[ind].cap; }

/* Refill bin ind, empty (a pop failed), from the arena and pop. NULL when
 * out of memory. */
void *tcache_alloc_hard(tsd_t *tsd, unsigned ind);
/* Push p into bin ind after a fast-path miss (flushing the oldest quarter when full). */
void tcache_dalloc_hard(tsd_t *tsd, unsigned ind, void *p);


/* Add this thread's cache-hit counts to its arena's statistics. */
void tcache_merge_stats(tsd_t *tsd);

/* Return every cached object to its arena. */
void tcache_flush(tsd_t *tsd);
/* Enable or disable this thread's cache (flushing it when disabling). */
void tcache_set_enabled(tsd_t *tsd, bool enabled);
/* One incremental GC step (one bin, round robin). */
void tcache_gc_step(tsd_t *tsd);

/* The thread freed another arena's object: for the next
 * TCACHE_REMOTE_CYCLES GC cycles its bins grow within TCACHE_THREAD_BYTES
 * only. */
MA_INLINE void tcache_note_remote_free(tsd_t *tsd) { tsd->remote_cycles = TCACHE_REMOTE_CYCLES; }

/* What this thread's bins may grow to in all (see TCACHE_THREAD_BYTES). */
MA_INLINE size_t tcache_thread_budget(const tsd_t *tsd)
{
    return tsd->remote_cycles != 0 ? TCACHE_THREAD_BYTES : TCACHE_THREAD_BYTES_LOCAL;
}

/* The account and the budget of bin ind's growth. */
MA_INLINE size_t *tcache_bin_growth_account(tsd_t *tsd, unsigned ind)
{
    return sc_index2size(ind) >= PAGE ? &tsd->cap_bytes_pages : &tsd->cap_bytes;
}

MA_INLINE size_t tcache_bin_growth_budget(const tsd_t *tsd, unsigned ind)
{
    return sc_index2size(ind) >= PAGE ? TCACHE_THREAD_BYTES_PAGES : tcache_thread_budget(tsd);
}

/* A bin's starting and largest capacity, and its first lg_fill_div and the
 * largest (fills of one object). */
unsigned tcache_bin_cap_init(unsigned ind);
unsigned tcache_bin_cap_max(unsigned ind);
unsigned tcache_bin_lg_fill_init(unsigned ind);
unsigned tcache_bin_lg_fill_max(unsigned ind);

/* Whether class ind is cached by this thread now. */
MA_INLINE bool tcache_serves(const tsd_t *tsd, unsigned ind)
{
    return tsd->tcache_enabled && ind < tsd->tcache_nbins;
}

#endif
