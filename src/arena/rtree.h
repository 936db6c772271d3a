/*
 * rtree: the page map, a two-level radix tree from page number to one
 * packed 64-bit element.
 *
 * The root is a static array (in BSS: untouched entries cost nothing), so a
 * lookup is two dependent loads and needs no per-thread cache: a cache
 * check costs as many instructions as the lookup it would save.
 *
 * Element layout:
 *
 *   63          48 47                                   6  5..0
 *   +------------+----------------------------------------+-------+
 *   |   szind    |   extent_t * (64-byte aligned)         | flags |
 *   +------------+----------------------------------------+-------+
 *
 *   flags: RTREE_SLAB     the page belongs to a slab of small class szind
 *          RTREE_SAMPLED  the object on this page is a profiler sample
 *          RTREE_STALE    the page once bounded an extent since merged into a
 *                         free one: a pointer here is a double free or bogus
 *
 * Invariants: every page of a slab maps to its extent with RTREE_SLAB and
 * the bin's szind; an active large extent maps its first and last page
 * (szind = its class); a free extent maps its first and last page with
 * szind = SC_NSIZES; everything else is 0 or RTREE_STALE. The fast path may
 * read any element without a lock; writers hold the owning extent pool's
 * lock.
 */
#ifndef MYALLOC_RTREE_H
#define MYALLOC_RTREE_H

#include "../sizeclass/sizeclass.h"

#define RTREE_LG_VA         48  /* x86-64 / aarch64 user address bits */
#define RTREE_LG_LEAF_SPAN  30  /* one leaf covers 1 GiB */
#define RTREE_ROOT_N        ((size_t)1 << (RTREE_LG_VA - RTREE_LG_LEAF_SPAN))
#define RTREE_LEAF_N        ((size_t)1 << (RTREE_LG_LEAF_SPAN - LG_PAGE))

#define RTREE_SLAB     ((uint64_t)1)
#define RTREE_SAMPLED  ((uint64_t)2)
#define RTREE_STALE    ((uint64_t)4)
#define RTREE_FLAGS    ((uint64_t)63)
#define RTREE_SZIND_SHIFT 48
#define RTREE_PTR_MASK ((((uint64_t)1 << RTREE_SZIND_SHIFT) - 1) & ~RTREE_FLAGS)

typedef uint64_t rtree_elm_t;

extern rtree_elm_t *rtree_root[RTREE_ROOT_N] MA_HIDDEN;

/*
 * The fast map: one byte per page of the user address space, in a
 * MAP_NORESERVE reservation of which only the parts covering slabs are ever
 * touched (a map page covers 4096 pages). A byte holds binind + 1 for every
 * page of a live slab and 0 for everything else (large, sampled, free,
 * foreign), so free's fast path is one bounds compare and one byte load.
 * When the reservation fails (overcommit mode 2, a ulimit -v) npages is 0
 * and every lookup misses to the slow path, which uses the radix tree.
 * Writers: the extent pool, under its lock, before a slab's regions are
 * handed out and after they have all come back.
 */
extern uint8_t *rtree_fastmap MA_HIDDEN;
extern uintptr_t rtree_fastmap_npages MA_HIDDEN;

MA_INLINE uintptr_t rtree_fast_lookup(uintptr_t a)
{
    uintptr_t pg = a >> LG_PAGE;
    if (unlikely(pg >= rtree_fastmap_npages))
        return 0;
    return ma_load_relaxed(&rtree_fastmap[pg]);
}

void rtree_fastmap_boot(void);
void rtree_fastmap_write(uintptr_t addr, size_t size, unsigned v);

/* Element for address a, or 0 when no leaf covers it (also for addresses
 * beyond the user address space). */
MA_INLINE rtree_elm_t rtree_lookup(uintptr_t a)
{
    uintptr_t i = a >> RTREE_LG_LEAF_SPAN;
    if (unlikely(i >= RTREE_ROOT_N))
        return 0;
    rtree_elm_t *leaf = ma_load_acquire(&rtree_root[i]);
    if (unlikely(leaf == NULL))
        return 0;
    return ma_load_relaxed(&leaf[(a >> LG_PAGE) & (RTREE_LEAF_N - 1)]);
}

MA_INLINE unsigned rtree_elm_szind(rtree_elm_t e) { return (unsigned)(e >> RTREE_SZIND_SHIFT); }
MA_INLINE void *rtree_elm_extent(rtree_elm_t e) { return (void *)(uintptr_t)(e & RTREE_PTR_MASK); }

MA_INLINE rtree_elm_t rtree_elm_make(const void *extent, unsigned szind, uint64_t flags)
{
    return ((uint64_t)szind << RTREE_SZIND_SHIFT) | (uint64_t)(uintptr_t)extent | flags;
}

/* Pointer to the element for address a, creating its leaf if needed.
 * NULL only when metadata memory is exhausted. */
rtree_elm_t *rtree_elm_get(uintptr_t a);

/* Write e for every page in [addr, addr + size). Returns false when a leaf
 * could not be created (nothing is left half-written for earlier pages that
 * failed; callers check before committing). */
bool rtree_write_range(uintptr_t addr, size_t size, rtree_elm_t e);
bool rtree_write(uintptr_t addr, rtree_elm_t e);

void rtree_prefork(void);
void rtree_postfork_parent(void);
void rtree_postfork_child(void);

#endif
