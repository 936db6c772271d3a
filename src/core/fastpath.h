/*
 * fastpath: the inline fast paths of the entry points, shared by the
 * standard functions (alloc.c) and jemalloc's (jemalloc.c). Each either
 * completes or returns false for the caller to take its slow path.
 */
#ifndef MYALLOC_FASTPATH_H
#define MYALLOC_FASTPATH_H

#include <string.h>

#include "../arena/slab.h"
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

/* An aligned request of a small class, from the thread cache: a class whose
 * size is a multiple of align (at most a page) has every region aligned
 * (slabs are page-aligned), and the class of size rounded up to align is
 * one (sc_sa2u). A zero size still takes an aligned region. */
MA_INLINE bool alloc_aligned_fast(size_t size, size_t align, void **out)
{
    if (unlikely(align > PAGE || size > SC_LOOKUP_MAXCLASS))
        return false;
    size_t mask = align - 1;
    return alloc_fast(((size | (size == 0)) + mask) & ~mask, out);
}

/* Object on a slab this thread may cache (its own arena's, or any arena's
 * of a whole-line class: rtree.h), not sampled, not large, pushed to the
 * thread cache. The fast map's byte for p's page indexes the bin; 0 (none
 * of those) selects bin_none, which is always full. The push also fails
 * when the bin is full or closed (cache_bin.h: a bin of a class the thread
 * does not allocate takes no pushes, so a consumer's frees go home). */
MA_INLINE bool free_fast(void *p)
{
    tsd_t TSD_SEG *tsd = tsd_fast();
    uintptr_t pg = (uintptr_t)p >> LG_PAGE;
    if (unlikely(pg >= tsd->fastmap_npages))
        return false;
    uintptr_t ind1 = ma_load_relaxed(&tsd->fastmap[pg]);
    cache_bin_t TSD_SEG *bin =
        (cache_bin_t TSD_SEG *)((char TSD_SEG *)&tsd->bin_none + (ind1 << CACHE_BIN_LG_SIZE));
    if (unlikely(!cache_bin_push_seg(bin, p)))
        return false;
    tsd->thread_deallocated += bin->usize;
    return true;
}

/* realloc of a slab object (not sampled) to a size below the extended slab
 * classes (no page run is due: ma_ralloc) and within the size table, with
 * no event due: kept when the size's class is its own, else moved through
 * the two fast paths above. The object's start is checked (its slab's
 * extent, often a cache miss: 46% of ma_check_live's samples in make
 * bench's realloc) after the new object is popped, so that the miss
 * overlaps with the pop; a failed check goes to ma_ralloc or to
 * ma_check_live, which report it. false: nothing was done. */
MA_INLINE bool ralloc_fast(void *p, size_t size, void **out)
{
    if (unlikely(size > MA_MIN(SC_SLAB_EXTENDED_MINCLASS - 1, SC_LOOKUP_MAXCLASS)))
        return false;
    rtree_elm_t elm = rtree_lookup((uintptr_t)p);
    if (unlikely((elm & (RTREE_SLAB | RTREE_SAMPLED)) != RTREE_SLAB))
        return false;
    unsigned ind = rtree_elm_szind(elm);
    const sc_lookup_t *lk = sc_lookup(size);
    if ((unsigned)(lk->bin_off >> SC_LOOKUP_BIN_LG) == ind) {
        tsd_t TSD_SEG *tsd = tsd_fast();
        uint64_t after = tsd->thread_allocated + lk->usize;
        if (unlikely(after >= tsd->next_event) ||
            unlikely(slab_region_index(rtree_elm_extent(elm), ind, p) < 0))
            return false;
        tsd->thread_allocated = after;
        tsd->thread_deallocated += lk->usize;
        *out = p;
        return true;
    }
    void *q;
    if (unlikely(!alloc_fast(size, &q)))
        return false;
    if (unlikely(slab_region_index(rtree_elm_extent(elm), ind, p) < 0))
        ma_check_live(p, elm, "realloc"); /* reports; does not return */
    memcpy(q, p, MA_MIN(sc_index2size(ind), (size_t)lk->usize));
    if (unlikely(!free_fast(p)))
        ma_free_slow(p);
    *out = q;
    return true;
}

#endif
