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
 *          RTREE_SAMPLED  the object on this page is a profiler sample (or
 *                         was, if its extent's `sampled` is false: a run
 *                         kept in the profiler's run cache, prof.c)
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
 * Fast maps: one per arena, one byte per page of the user address space, in
 * a MAP_NORESERVE reservation of which only the parts covering slabs are
 * ever touched (a map page covers 4096 pages). A byte holds binind + 1 for
 * every page of a live slab OF THAT ARENA, and of a live slab of ANY arena
 * whose class is a whole number of cache lines and fits a cache bin
 * (rtree_line_class; in the maps of the first arenas only, extent.c); 0 for
 * everything else (large, sampled, free, another arena's slab of another
 * class, a sparse slab whose frees bypass the caches: arena.c). So free's
 * fast path, which reads its own thread's arena's map, is one bounds
 * compare and one byte load for the objects a thread may cache: its own
 * arena's, and other arenas' regions that share no cache line with a
 * neighbour (no false sharing when it hands them out again). The rest of
 * the remote frees miss to the slow path, which sends them home. Caching
 * the whole-line ones here rather than from the slow path (which read a
 * second map shared by the arenas for them) took larson 16 B-1 KiB from
 * 0.198 to 0.184 CPU s with 2 threads (half of the frees remote) and from
 * 0.193 to 0.186 with 8 (tcmalloc 0.182 and 0.182; medians of 9
 * interleaved runs).
 * When a reservation fails (overcommit mode 2, a ulimit -v) npages is 0 and
 * every lookup misses to the slow path, which uses the radix tree; unless
 * the process's mappings live in the low addresses (under valgrind), where
 * a map of those is reserved instead (rtree_fastmap_init).
 * Writers: the extent pool, under its lock, before a slab's regions are
 * handed out and after they have all come back; the slab's bin, under its
 * lock, in between (sparse slabs).
 */
typedef struct rtree_fastmap {
    uint8_t *map;
    uintptr_t npages;
    /* The map marks other arenas' whole-line slabs too: free's fast path
     * caches those remote objects, so its slow path sends every remote
     * object that reaches it home at once. False where it does not (no map,
     * or an arena past the shared maps): the slow path then applies the
     * rule itself (core/alloc.c, dalloc_elm). Set before any thread binds. */
    bool marks_lines;
} rtree_fastmap_t;

/* Whether slabs of class binind are marked in other arenas' fast maps
 * too: its regions are whole cache lines (slabs start on a page). */
MA_INLINE bool rtree_line_class(unsigned binind)
{
    size_t usize = sc_index2size(binind);
    return (usize & (MA_CACHELINE - 1)) == 0 && usize <= UINT16_MAX;
}

MA_INLINE uintptr_t rtree_fastmap_lookup(const rtree_fastmap_t *fm, uintptr_t a)
{
    uintptr_t pg = a >> LG_PAGE;
    if (unlikely(pg >= fm->npages))
        return 0;
    return ma_load_relaxed(&fm->map[pg]);
}

/* Reserve a map (npages stays 0 when the reservation fails). */
void rtree_fastmap_init(rtree_fastmap_t *fm);
/* Before the first map: how many maps to reserve together (rtree.c). */
void rtree_fastmap_plan(unsigned n);
/* Pages a fallback map covers when the whole address space cannot be
 * reserved and the highest address known in use is in_use: the first power
 * of two of bytes past four times it (at least 4 GiB), or 0 beyond 2^38. */
uintptr_t rtree_fastmap_fallback_pages(uintptr_t in_use);
/* Inline: a slab of a whole-line class is written into every shared map
 * (extent.c), a few bytes each. */
MA_INLINE void rtree_fastmap_write(rtree_fastmap_t *fm, uintptr_t addr, size_t size, unsigned v)
{
    uintptr_t pg = addr >> LG_PAGE, n = size >> LG_PAGE;
    if (fm == NULL || pg + n > fm->npages)
        return; /* outside the map: lookups there miss, as they must */
    for (uintptr_t i = 0; i < n; i++)
        ma_store_relaxed(&fm->map[pg + i], (uint8_t)v);
}

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

/* Leaf i of the root, created (under the tree's lock) if it is not yet.
 * NULL only when metadata memory is exhausted. */
rtree_elm_t *rtree_leaf_create(uintptr_t i);

/* Pointer to the element for address a, creating its leaf if needed.
 * NULL only when metadata memory is exhausted (or a is beyond the user
 * address space). Inline: the extent layer writes an extent's first and
 * last pages at every change of it, a sampled object's twice. */
MA_INLINE rtree_elm_t *rtree_elm_get(uintptr_t a)
{
    uintptr_t i = a >> RTREE_LG_LEAF_SPAN;
    if (unlikely(i >= RTREE_ROOT_N))
        return NULL;
    rtree_elm_t *leaf = ma_load_acquire(&rtree_root[i]);
    if (unlikely(leaf == NULL) && (leaf = rtree_leaf_create(i)) == NULL)
        return NULL;
    return &leaf[(a >> LG_PAGE) & (RTREE_LEAF_N - 1)];
}

/* Write e for every page in [addr, addr + size). Returns false when a leaf
 * could not be created (nothing is left half-written for earlier pages that
 * failed; callers check before committing). */
bool rtree_write_range(uintptr_t addr, size_t size, rtree_elm_t e);
MA_INLINE bool rtree_write(uintptr_t addr, rtree_elm_t e)
{
    rtree_elm_t *p = rtree_elm_get(addr);
    if (p == NULL)
        return false;
    ma_store_release(p, e);
    return true;
}

void rtree_prefork(void);
void rtree_postfork_parent(void);
void rtree_postfork_child(void);

#endif
