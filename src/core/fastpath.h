/*
 * fastpath: the inline fast paths of the entry points, shared by the
 * standard functions (alloc.c) and jemalloc's (jemalloc.c). Each either
 * completes or returns false for the caller to take its slow path.
 */
#ifndef MYALLOC_FASTPATH_H
#define MYALLOC_FASTPATH_H

#include "core.h"

/* Small request served from the thread cache with no event due: a table
 * lookup, one compare, a pop. */
MA_INLINE bool alloc_fast(size_t size, void **out)
{
    if (unlikely(size > SC_LOOKUP_MAXCLASS))
        return false;
    const sc_lookup_t *lk = sc_lookup(size);
    size_t usize = lk->usize;
    size_t bin_off = lk->bin_off; /* class << CACHE_BIN_LG_SIZE */
    tsd_t TSD_SEG *tsd = tsd_fast();
    uint64_t after = tsd->thread_allocated + usize;
    /* next_event == 0 also routes uninitialised / re-entrant threads here. */
    if (unlikely(after >= tsd->next_event))
        return false;
    if (unlikely(!cache_bin_pop_seg(tsd_bin_at(tsd, (intptr_t)bin_off), out)))
        return false;
    tsd->thread_allocated = after;
    return true;
}

/* Push p to the cache bin that map (of npages bytes, see rtree.h) names for
 * its page; false when the byte is 0 (not a slab of that map), the bin is
 * full, or (only_popped: another arena's object) the thread does not
 * allocate from the bin. */
MA_INLINE bool free_to_cache(tsd_t TSD_SEG *tsd, const uint8_t *map, uintptr_t npages, void *p, bool only_popped)
{
    uintptr_t pg = (uintptr_t)p >> LG_PAGE;
    if (unlikely(pg >= npages))
        return false;
    uintptr_t ind1 = ma_load_relaxed(&map[pg]);
    /* ind1 == 0 (not a slab object) selects bin_none, which is always full. */
    cache_bin_t TSD_SEG *bin =
        (cache_bin_t TSD_SEG *)((char TSD_SEG *)&tsd->bin_none + (ind1 << CACHE_BIN_LG_SIZE));
    if (only_popped && !cache_bin_popped(bin))
        return false;
    if (unlikely(!cache_bin_push_seg(bin, p)))
        return false;
    tsd->thread_deallocated += bin->usize;
    return true;
}

/* Object on a slab of this thread's arena (not sampled, not large, not
 * another arena's) pushed to the thread cache. */
MA_INLINE bool free_fast(void *p)
{
    tsd_t TSD_SEG *tsd = tsd_fast();
    return free_to_cache(tsd, tsd->fastmap, tsd->fastmap_npages, p, false);
}

/* The first step of free's slow path: another arena's object of a class of
 * whole cache lines, pushed to this thread's cache (the line map, rtree.h)
 * if the thread allocates that class. Only for a thread that has a fast
 * map (one set up and not exited) and has filled a bin: linemap_npages is
 * 0 otherwise (tsd.h), and a consumer's frees, which find no bin popped,
 * skip the lookup (prodcons 1+1 under callgrind: 256.1 -> 243.8
 * instructions per object). */
MA_INLINE bool free_remote_line(void *p)
{
    tsd_t TSD_SEG *tsd = tsd_fast();
    return free_to_cache(tsd, rtree_linemap.map, tsd->linemap_npages, p, true);
}

#endif
