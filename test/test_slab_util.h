/*
 * Helpers for tests that look at slabs through the allocator's internals
 * (include after arena/arena.h and test_util.h).
 */
#ifndef MYALLOC_TEST_SLAB_UTIL_H
#define MYALLOC_TEST_SLAB_UTIL_H

/* The slab holding small object p (asserts that p is on one). */
static inline extent_t *tu_slab_of(const void *p)
{
    rtree_elm_t e = rtree_lookup((uintptr_t)p);
    cr_assert(e & RTREE_SLAB, "%p is not on a slab", p);
    return rtree_elm_extent(e);
}

/* The distinct slabs of ps[0..n) other than except, in order of first
 * appearance, into out (at most max); returns how many there are. */
static inline unsigned tu_slabs_besides(void *const *ps, unsigned n, const extent_t *except, extent_t **out,
                                        unsigned max)
{
    unsigned ns = 0;
    for (unsigned i = 0; i < n; i++) {
        extent_t *s = tu_slab_of(ps[i]);
        bool seen = s == except;
        for (unsigned j = 0; j < ns && !seen; j++)
            seen = out[j] == s;
        if (!seen) {
            cr_assert_lt(ns, max, "more than %u slabs", max);
            out[ns++] = s;
        }
    }
    return ns;
}

/* Bin b of arena a past its first slabs, which are of the class's small
 * geometry (arena.h, SLAB_SMALL_BIN_SLABS): regions are filled one at a
 * time into held (room for max) until the bin's next slab is of the
 * class's own geometry and its current slab is full. A test of the bin's
 * mechanics on the class's slabs starts from there: the held regions sit
 * in full slabs, which are in no heap, and fills do not look at them.
 * Returns how many are held (none for a class without a smaller slab). */
static inline unsigned tu_bin_skip_small(arena_t *a, unsigned b, void **held, unsigned max)
{
    const sc_bin_info_t *bi = &sc_bin_info[b];
    bin_t *bin = &a->bins[b];
    unsigned n = 0;
    if (bi->small_pages == bi->slab_pages)
        return 0;
    while (bin->npages < SLAB_SMALL_BIN_SLABS * bi->slab_pages ||
           (bin->slabcur != NULL && bin->slabcur->nfree != 0)) {
        cr_assert_lt(n, max, "bin %u: more than %u regions in small slabs", b, max);
        cr_assert_eq(arena_fill_small(a, b, held + n, 1), 1);
        n++;
    }
    return n;
}

#endif
