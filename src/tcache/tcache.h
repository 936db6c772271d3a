/*
 * tcache: per-thread caches of small and large objects.
 *
 * Per class up to tcache_max, a cache_bin filled from the arena's bin in
 * batches and flushed in batches (one lock per bin touched, not per
 * object). Capacity per small class: twice the regions of its slab,
 * clamped to [TCACHE_NSLOTS_MIN, TCACHE_NSLOTS_SMALL_MAX]; per large class
 * TCACHE_NSLOTS_LARGE.
 */
#ifndef MYALLOC_TCACHE_H
#define MYALLOC_TCACHE_H

#include "tsd.h"

#define TCACHE_NSLOTS_MIN        20
#define TCACHE_NSLOTS_SMALL_MAX  200
#define TCACHE_NSLOTS_LARGE      20
#define TCACHE_LG_FILL_DIV_INIT  1
#define TCACHE_LG_FILL_DIV_MAX   5

/* Options (set before tcache_boot). */
extern bool tcache_opt_enabled;
extern size_t tcache_opt_max;

/* Effective values after boot. */
extern size_t tcache_maxclass;
extern unsigned tcache_nbins;

bool tcache_boot(void);
bool tcache_init(tsd_t *tsd);
void tcache_destroy(tsd_t *tsd);

/* Pop from bin ind after a fast-path miss (moving the low-water mark or
 * refilling from the arena). NULL when out of memory. */
void *tcache_alloc_hard(tsd_t *tsd, unsigned ind);
/* Push p into bin ind after a fast-path miss (flushing half when full). */
void tcache_dalloc_hard(tsd_t *tsd, unsigned ind, void *p);

/* Add this thread's cache-hit counts to its arena's statistics. */
void tcache_merge_stats(tsd_t *tsd);

/* Return every cached object to its arena. */
void tcache_flush(tsd_t *tsd);
/* Enable or disable this thread's cache (flushing it when disabling). */
void tcache_set_enabled(tsd_t *tsd, bool enabled);
/* One incremental GC step (one bin, round robin). */
void tcache_gc_step(tsd_t *tsd);

/* Whether class ind is cached by this thread now. */
MA_INLINE bool tcache_serves(const tsd_t *tsd, unsigned ind)
{
    return tsd->tcache_enabled && ind < tsd->tcache_nbins;
}

#endif
