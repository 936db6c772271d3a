/*
 * slab: an extent carved into equal regions of one small class, with a
 * bitmap of free regions kept in the extent record (never in the slab's own
 * pages, so purging a slab's pages cannot lose metadata).
 */
#ifndef MYALLOC_SLAB_H
#define MYALLOC_SLAB_H

#include "extent.h"

/* The regions of slab (extent_t: its class's geometry, or the small one). */
MA_INLINE unsigned slab_nregs(const extent_t *slab, unsigned binind)
{
    return sc_bin_info[binind].nregs_of[slab->slab_small];
}

/* slab_small says which geometry the slab (of that many pages) has. */
MA_INLINE void slab_init(extent_t *slab, unsigned binind)
{
    unsigned nregs = slab_nregs(slab, binind);
    slab->nfree = nregs;
    slab->bitmap_hint = 0;
    slab->idle_scans = 0;
    slab->purged_pages = 0;
    for (unsigned w = 0; w < SLAB_BITMAP_WORDS; w++) {
        unsigned lo = w * 64;
        slab->bitmap[w] = lo >= nregs ? 0 : nregs - lo >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << (nregs - lo)) - 1;
    }
}

/* Regions were handed out of a slab with purged pages: the pages they lie
 * on are in use again. */
void slab_unpurge(extent_t *slab, unsigned binind, void *const *regs, unsigned n);

/* Take up to n free regions (lowest first) into out; returns how many. */
MA_INLINE unsigned slab_alloc_batch(extent_t *slab, unsigned binind, void **out, unsigned n)
{
    const sc_bin_info_t *bi = &sc_bin_info[binind];
    unsigned got = 0, w = slab->bitmap_hint;
    if (n > slab->nfree)
        n = slab->nfree;
    while (got < n) {
        uint64_t bits = slab->bitmap[w];
        while (bits != 0 && got < n) {
            unsigned bit = (unsigned)__builtin_ctzll(bits);
            bits &= bits - 1;
            out[got++] = (void *)(slab->addr + (uintptr_t)(w * 64 + bit) * bi->reg_size);
        }
        slab->bitmap[w] = bits;
        if (bits == 0)
            w++;
    }
    slab->bitmap_hint = w;
    slab->nfree -= got;
    slab->idle_scans = 0;
    if (unlikely(slab->purged_pages != 0))
        slab_unpurge(slab, binind, out, got);
    return got;
}

/* Region index of ptr, or -1 if ptr is not the start of a region. */
MA_INLINE long slab_region_index(const extent_t *slab, unsigned binind, const void *ptr)
{
    const sc_bin_info_t *bi = &sc_bin_info[binind];
    uintptr_t off = (uintptr_t)ptr - slab->addr;
    uint64_t idx = ((uint64_t)off * bi->div_magic) >> 32;
    /* No test of off against the slab's size: idx < nregs and an exact
     * multiple put off below nregs * reg_size, within the slab, whatever
     * the product made of an off out of range (one below the slab wraps). */
    if (idx * bi->reg_size != off || idx >= slab_nregs(slab, binind))
        return -1;
    return (long)idx;
}

/* Mark region idx free; false if it already was (a double free). */
MA_INLINE bool slab_free_region(extent_t *slab, unsigned idx)
{
    unsigned w = idx / 64;
    uint64_t bit = (uint64_t)1 << (idx % 64);
    if (unlikely(slab->bitmap[w] & bit))
        return false;
    slab->bitmap[w] |= bit;
    slab->nfree++;
    if (w < slab->bitmap_hint)
        slab->bitmap_hint = w;
    return true;
}

#endif
