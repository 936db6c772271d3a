/*
 * sizeclass: the size-class table and size <-> class conversions.
 *
 * Knows nothing of the rest of the allocator. The tables come from
 * sc_gen for the compile-time configuration (LG_PAGE, LG_QUANTUM,
 * LG_NGROUP); see sc_gen.c for the scheme.
 *
 * Terms: a request of `size` bytes is served from class `ind`, whose
 * usable size is `usize` = sc_index2size(ind) >= size. Classes [0, SC_NBINS)
 * are small (slab-allocated bins), the rest large (page runs).
 */
#ifndef MYALLOC_SIZECLASS_H
#define MYALLOC_SIZECLASS_H

#include "../common/common.h"
#include "sc_tables.h"

#define PAGE        ((size_t)1 << SC_LG_PAGE)
#define PAGE_MASK   (PAGE - 1)
#define LG_PAGE     SC_LG_PAGE
#define QUANTUM     ((size_t)1 << SC_LG_QUANTUM)
#define PAGE_CEIL(s) (((s) + PAGE_MASK) & ~PAGE_MASK)

/* Geometry of one small class's slabs. */
typedef struct sc_bin_info {
    uint32_t reg_size;
    uint32_t div_magic; /* region index = (offset * div_magic) >> 32 */
    /* Regions of the class's slabs, and of a bin's first slabs (arena.c,
     * SLAB_SMALL_BIN_SLABS; equal when the class has no smaller one):
     * nregs_of[slab_small] (slab_nregs, without a branch). */
    union {
        struct {
            uint16_t nregs;
            uint16_t small_nregs;
        };
        uint16_t nregs_of[2];
    };
    uint16_t slab_pages;
    uint16_t small_pages; /* at most slab_pages */
} sc_bin_info_t; /* 16 bytes: free's slow path indexes it with a shift */
_Static_assert(sizeof(sc_bin_info_t) == 16, "sc_bin_info_t is indexed by a shift");

/* {lg_base, lg_delta, ndelta}: size = 2^lg_base + ndelta * 2^lg_delta */
typedef struct sc_formula {
    uint8_t lg_base, lg_delta, ndelta;
} sc_formula_t;

extern const size_t sc_index2size_tab[SC_NSIZES] MA_HIDDEN;
/* The malloc fast path's table, indexed by (size + QUANTUM - 1) >> LG_QUANTUM
 * for size <= SC_LOOKUP_MAXCLASS: both halves it needs sit in one entry,
 * reached from one base register. bin_off = class << SC_LOOKUP_BIN_LG, the
 * byte offset of the class's cache bin (the thread cache's bins are
 * 2^SC_LOOKUP_BIN_LG bytes each; tcache/cache_bin.h asserts it). */
#define SC_LOOKUP_BIN_LG 5
typedef struct sc_lookup {
    uint16_t usize;
    uint16_t bin_off;
} sc_lookup_t;
extern const sc_lookup_t sc_lookup_tab[SC_LOOKUP_NENTRIES] MA_HIDDEN;
/* Usable size by class + 1 (entry 0 is 0): free's fast path gets class + 1
 * from the fast map and indexes this without subtracting. */
extern const size_t sc_usize_by_ind1[SC_NBINS + 1] MA_HIDDEN;
extern const sc_bin_info_t sc_bin_info[SC_NBINS] MA_HIDDEN;
extern const sc_formula_t sc_formula_tab[SC_NSIZES];

MA_INLINE size_t sc_index2size(unsigned ind) { return sc_index2size_tab[ind]; }

/* Fast path: size <= SC_LOOKUP_MAXCLASS, one table load. */
MA_INLINE const sc_lookup_t *sc_lookup(size_t size)
{
    return &sc_lookup_tab[(size + QUANTUM - 1) >> SC_LG_QUANTUM];
}
MA_INLINE unsigned sc_size2index_lookup(size_t size)
{
    return sc_lookup(size)->bin_off >> SC_LOOKUP_BIN_LG;
}

/* Any size <= SC_LARGE_MAXCLASS, by arithmetic on the size's bit length. */
MA_INLINE unsigned sc_size2index_compute(size_t size)
{
    const size_t first_group_max = QUANTUM << SC_LG_NGROUP;
    if (size <= first_group_max)
        return size == 0 ? 0 : (unsigned)((size + QUANTUM - 1) >> SC_LG_QUANTUM) - 1;
    /* 2^lg_base < size <= 2^(lg_base+1) */
    unsigned lg_base = ma_lg_floor(size - 1);
    unsigned lg_delta = lg_base - SC_LG_NGROUP;
    size_t ndelta = ((size - 1 - ((size_t)1 << lg_base)) >> lg_delta) + 1;
    return (1u << SC_LG_NGROUP) +
           (lg_base - (SC_LG_QUANTUM + SC_LG_NGROUP)) * (1u << SC_LG_NGROUP) + (unsigned)ndelta - 1;
}

/* Requires size <= SC_LARGE_MAXCLASS. */
MA_INLINE unsigned sc_size2index(size_t size)
{
    if (likely(size <= SC_LOOKUP_MAXCLASS))
        return sc_size2index_lookup(size);
    return sc_size2index_compute(size);
}

/* Usable size for a request, or 0 when the size is impossible. */
MA_INLINE size_t sc_s2u(size_t size)
{
    if (unlikely(size > SC_LARGE_MAXCLASS))
        return 0;
    return sc_index2size(sc_size2index(size));
}

/* Usable size for a request with an alignment (a power of two), or 0 when
 * impossible. Small classes serve alignments up to a page when the region
 * size is a multiple of the alignment (slabs are page aligned); everything
 * else is a large page run aligned as asked. */
MA_INLINE size_t sc_sa2u(size_t size, size_t align)
{
    if (align <= QUANTUM)
        return sc_s2u(size);
    if (size == 0)
        size = 1; /* a zero-byte object still needs an aligned region */
    if (size <= SC_SMALL_MAXCLASS && align <= PAGE) {
        size_t usize = sc_s2u((size + align - 1) & ~(align - 1));
        if (usize <= SC_SMALL_MAXCLASS)
            return usize;
    }
    if (unlikely(size > SC_LARGE_MAXCLASS || align > ((size_t)1 << 62)))
        return 0;
    if (size < SC_LARGE_MINCLASS)
        size = SC_LARGE_MINCLASS;
    return sc_s2u(size);
}

/* The largest class whose size is <= size (size >= the smallest class). */
MA_INLINE unsigned sc_size2index_floor(size_t size)
{
    unsigned ind = sc_size2index_compute(size);
    if (sc_index2size(ind) > size)
        ind--;
    return ind;
}

#endif
