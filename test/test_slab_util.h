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

#endif
