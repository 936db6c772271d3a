/*
 * jemalloc's non-standard API (mallocx, rallocx, xallocx, sallocx, dallocx,
 * sdallocx, nallocx) and its flags, against jemalloc's documented
 * semantics; check_sized:true catching wrong sizes in sdallocx and
 * free_sized.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <stdint.h>

#include "core/core.h"
#include "myalloc.h"
#include "sizeclass/sizeclass.h"
#include "test_util.h"

/* Older builds route sized frees around the page map unless this is set;
 * newer ones check opt_check_sized alone (weak: either links). */
extern bool ma_sized_needs_lookup;
#pragma weak ma_sized_needs_lookup

static void check_sized_on(void)
{
    opt_check_sized = true;
    if (&ma_sized_needs_lookup != NULL)
        ma_sized_needs_lookup = true;
}

#define ALIGNED(p, a) ((((uintptr_t)(p)) & ((a) - 1)) == 0)

static uint64_t thread_allocated(void)
{
    uint64_t v;
    size_t len = sizeof(v);
    cr_assert_eq(mallctl("thread.allocated", &v, &len, NULL, 0), 0);
    return v;
}

static uint64_t thread_deallocated(void)
{
    uint64_t v;
    size_t len = sizeof(v);
    cr_assert_eq(mallctl("thread.deallocated", &v, &len, NULL, 0), 0);
    return v;
}

static unsigned narenas(void)
{
    unsigned n;
    size_t len = sizeof(n);
    cr_assert_eq(mallctl("arenas.narenas", &n, &len, NULL, 0), 0);
    return n;
}

static bool all_zero(const void *p, size_t from, size_t to)
{
    const unsigned char *c = p;
    for (size_t i = from; i < to; i++)
        if (c[i] != 0)
            return false;
    return true;
}

/* ---------------------------------------------------------------------
 * The flags' bit layout is jemalloc's.
 */

Test(jemalloc_api, flag_bit_layout_is_jemallocs)
{
    cr_assert_eq(MALLOCX_LG_ALIGN(0), 0);
    cr_assert_eq(MALLOCX_LG_ALIGN(12), 12);
    cr_assert_eq(MALLOCX_LG_ALIGN(30), 30);
    cr_assert_eq(MALLOCX_ALIGN(1), 0);
    cr_assert_eq(MALLOCX_ALIGN(16), 4);
    cr_assert_eq(MALLOCX_ALIGN(4096), 12);
    cr_assert_eq(MALLOCX_ALIGN((size_t)1 << 30), 30);
    cr_assert_eq(MALLOCX_ALIGN((size_t)1 << 40), 40);
    cr_assert_eq(MALLOCX_ZERO, 0x40);
    cr_assert_eq(MALLOCX_TCACHE_NONE, 1 << 8);
    cr_assert_eq(MALLOCX_TCACHE(0), 2 << 8);
    cr_assert_eq(MALLOCX_ARENA(0), 1 << 20);
    cr_assert_eq(MALLOCX_ARENA(5), 6 << 20);
    cr_assert_eq(MALLCTL_ARENAS_ALL, 4096);
    cr_assert_eq(MALLCTL_ARENAS_DESTROYED, 4097);
}

/* ---------------------------------------------------------------------
 * mallocx
 */

Test(jemalloc_api, mallocx_plain_sizes)
{
    for (size_t n = 1; n < 100000; n = n * 5 / 4 + 1) {
        unsigned char *p = mallocx(n, 0);
        cr_assert_not_null(p, "mallocx(%zu)", n);
        cr_assert(ALIGNED(p, 16));
        size_t u = sallocx(p, 0);
        cr_assert_geq(u, n);
        cr_assert_eq(u, nallocx(n, 0));
        memset(p, 0xa5, u);
        dallocx(p, 0);
    }
}

Test(jemalloc_api, mallocx_alignment_flags)
{
    size_t sizes[] = {1, 8, 15, 16, 17, 100, 4095, 4096, 4097, 20000, 100000};
    for (unsigned lg = 0; lg <= 24; lg++) {
        size_t a = (size_t)1 << lg;
        for (size_t s = 0; s < MA_ARRAY_LEN(sizes); s++) {
            int flags[2] = {MALLOCX_LG_ALIGN(lg), MALLOCX_ALIGN(a)};
            for (int f = 0; f < 2; f++) {
                char *p = mallocx(sizes[s], flags[f]);
                cr_assert_not_null(p, "mallocx(%zu, align %zu)", sizes[s], a);
                cr_assert(ALIGNED(p, a), "mallocx(%zu, align %zu) = %p", sizes[s], a, p);
                cr_assert_eq(sallocx(p, 0), nallocx(sizes[s], flags[f]),
                             "size %zu align %zu: sallocx %zu nallocx %zu", sizes[s], a,
                             sallocx(p, 0), nallocx(sizes[s], flags[f]));
                cr_assert_geq(sallocx(p, 0), sizes[s]);
                p[0] = 1;
                p[sizes[s] - 1] = 2;
                dallocx(p, flags[f]);
            }
        }
    }
}

Test(jemalloc_api, mallocx_align_4096_and_1gib)
{
    void *p = mallocx(10, MALLOCX_ALIGN(4096));
    cr_assert_not_null(p);
    cr_assert(ALIGNED(p, 4096));
    cr_assert_eq(sallocx(p, 0), nallocx(10, MALLOCX_ALIGN(4096)));
    sdallocx(p, 10, MALLOCX_ALIGN(4096));

    size_t g = (size_t)1 << 30;
    char *q = mallocx(100, MALLOCX_LG_ALIGN(30));
    cr_assert_not_null(q, "mallocx with 1 GiB alignment");
    cr_assert(ALIGNED(q, g), "%p", q);
    q[0] = 1;
    q[99] = 2;
    cr_assert_eq(sallocx(q, 0), nallocx(100, MALLOCX_LG_ALIGN(30)));
    dallocx(q, MALLOCX_LG_ALIGN(30));
    q = mallocx(g + 1, MALLOCX_ALIGN(g) | MALLOCX_ZERO);
    cr_assert_not_null(q);
    cr_assert(ALIGNED(q, g));
    cr_assert_eq(q[g], 0);
    sdallocx(q, g + 1, MALLOCX_ALIGN(g));
}

Test(jemalloc_api, mallocx_zero_on_reused_memory)
{
    size_t sizes[] = {8, 48, 512, 3000, 14000, 20000, 300000, 5 << 20};
    for (size_t s = 0; s < MA_ARRAY_LEN(sizes); s++) {
        for (int round = 0; round < 20; round++) {
            unsigned char *p = mallocx(sizes[s], 0);
            memset(p, 0xff, sallocx(p, 0));
            dallocx(p, 0);
            unsigned char *q = mallocx(sizes[s], MALLOCX_ZERO);
            cr_assert_not_null(q);
            cr_assert(all_zero(q, 0, sallocx(q, 0)), "MALLOCX_ZERO size %zu", sizes[s]);
            memset(q, 0xee, sallocx(q, 0));
            dallocx(q, 0);
            q = mallocx(sizes[s], MALLOCX_ZERO | MALLOCX_LG_ALIGN(6) | MALLOCX_TCACHE_NONE);
            cr_assert(ALIGNED(q, 64));
            cr_assert(all_zero(q, 0, sallocx(q, 0)), "MALLOCX_ZERO|align size %zu", sizes[s]);
            memset(q, 0xdd, sallocx(q, 0));
            dallocx(q, MALLOCX_TCACHE_NONE);
        }
    }
}

Test(jemalloc_api, mallocx_tcache_none_bypasses_the_cache)
{
    /* Free a small object into the cache, then allocate the same class
     * with MALLOCX_TCACHE_NONE: the cached object must not come back, and
     * a TCACHE_NONE free must not go into the cache. */
    void *cached = mallocx(64, 0);
    dallocx(cached, 0);
    void *p = mallocx(64, MALLOCX_TCACHE_NONE);
    cr_assert_not_null(p);
    cr_assert_neq(p, cached, "MALLOCX_TCACHE_NONE took an object from the thread cache");
    void *again = mallocx(64, 0);
    cr_assert_eq(again, cached, "the cached object should be served next (LIFO cache)");
    dallocx(p, MALLOCX_TCACHE_NONE);
    void *after = mallocx(64, 0);
    cr_assert_neq(after, p, "a MALLOCX_TCACHE_NONE free went into the thread cache");
    dallocx(after, 0);
    dallocx(again, 0);
    /* Many at once, all sizes. */
    void *ps[500];
    for (int i = 0; i < 500; i++) {
        ps[i] = mallocx((size_t)i * 97 + 1, MALLOCX_TCACHE_NONE);
        cr_assert_not_null(ps[i]);
        memset(ps[i], i, (size_t)i * 97 + 1);
    }
    for (int i = 0; i < 500; i++) {
        cr_assert_eq(((unsigned char *)ps[i])[(size_t)i * 97], (unsigned char)i);
        sdallocx(ps[i], (size_t)i * 97 + 1, MALLOCX_TCACHE_NONE);
    }
}

Test(jemalloc_api, mallocx_arena_valid_and_invalid)
{
    unsigned n = narenas();
    cr_assert_geq(n, 1);
    for (unsigned a = 0; a < n && a < 64; a++) {
        size_t sizes[] = {16, 1000, 40000, 1 << 20};
        for (size_t s = 0; s < MA_ARRAY_LEN(sizes); s++) {
            void *p = mallocx(sizes[s], MALLOCX_ARENA(a));
            cr_assert_not_null(p, "mallocx(%zu, MALLOCX_ARENA(%u))", sizes[s], a);
            memset(p, 1, sizes[s]);
            cr_assert_eq(sallocx(p, 0), nallocx(sizes[s], MALLOCX_ARENA(a)));
            dallocx(p, MALLOCX_ARENA(a));
        }
    }
    /* The arena's statistics see an object allocated there. */
    unsigned a = n - 1;
    char name[64];
    uint64_t epoch = 1, before, after;
    size_t len = sizeof(uint64_t);
    snprintf(name, sizeof(name), "stats.arenas.%u.large.nmalloc", a);
    cr_assert_eq(mallctl("epoch", NULL, NULL, &epoch, sizeof(epoch)), 0);
    cr_assert_eq(mallctl(name, &before, &len, NULL, 0), 0);
    void *big = mallocx(1 << 20, MALLOCX_ARENA(a));
    cr_assert_eq(mallctl(name, &after, &len, NULL, 0), 0);
    cr_assert_eq(after, before + 1, "%s went %" PRIu64 " -> %" PRIu64, name, before, after);
    dallocx(big, 0);
    /* Arenas that do not exist: NULL, errno ENOMEM, nothing else. */
    unsigned bad[] = {n, n + 1, 1000, 4094};
    for (size_t i = 0; i < MA_ARRAY_LEN(bad); i++) {
        if (bad[i] < n)
            continue;
        errno = 0;
        cr_assert_null(mallocx(100, MALLOCX_ARENA(bad[i])), "MALLOCX_ARENA(%u) with %u arenas", bad[i], n);
        cr_assert_null(mallocx(100000, MALLOCX_ARENA(bad[i]) | MALLOCX_ZERO));
        cr_assert_eq(nallocx(100, MALLOCX_ARENA(bad[i])), nallocx(100, 0),
                     "nallocx does not depend on the arena");
    }
}

Test(jemalloc_api, mallocx_impossible_requests)
{
    size_t huge[] = {SIZE_MAX, SIZE_MAX - 4096, (size_t)PTRDIFF_MAX, (size_t)PTRDIFF_MAX + 1};
    for (size_t i = 0; i < MA_ARRAY_LEN(huge); i++) {
        cr_assert_null(mallocx(huge[i], 0), "mallocx(%zu)", huge[i]);
        cr_assert_null(mallocx(huge[i], MALLOCX_ZERO));
        cr_assert_null(mallocx(huge[i], MALLOCX_LG_ALIGN(12)));
        cr_assert_eq(nallocx(huge[i], 0), 0);
        cr_assert_eq(nallocx(huge[i], MALLOCX_LG_ALIGN(12)), 0);
    }
    /* Alignment 2^63 cannot be satisfied. */
    errno = 0;
    cr_assert_null(mallocx(1, MALLOCX_LG_ALIGN(63)));
    cr_assert_eq(errno, ENOMEM);
    cr_assert_eq(nallocx(1, MALLOCX_LG_ALIGN(63)), 0);
    /* Explicit thread caches (MALLOCX_TCACHE(tc), tc >= 0) do not exist. */
    errno = 0;
    cr_assert_null(mallocx(10, MALLOCX_TCACHE(0)));
    cr_assert_eq(errno, EINVAL);
    cr_assert_eq(nallocx(10, MALLOCX_TCACHE(0)), 0);
}

/* ---------------------------------------------------------------------
 * nallocx
 */

Test(jemalloc_api, nallocx_equals_what_mallocx_gives)
{
    uint64_t seed = 11;
    for (int i = 0; i < 3000; i++) {
        size_t size;
        switch (i % 4) {
        case 0:
            size = tu_rand(&seed) % 256 + 1;
            break;
        case 1:
            size = tu_rand(&seed) % 20000 + 1;
            break;
        case 2:
            size = tu_rand(&seed) % (1 << 20) + 1;
            break;
        default:
            size = tu_rand(&seed) % (8 << 20) + 1;
            break;
        }
        unsigned lg = (unsigned)(tu_rand(&seed) % 16);
        int flags = (tu_rand(&seed) % 3 == 0) ? 0 : MALLOCX_LG_ALIGN(lg);
        if (tu_rand(&seed) % 4 == 0)
            flags |= MALLOCX_ZERO;
        if (tu_rand(&seed) % 4 == 0)
            flags |= MALLOCX_TCACHE_NONE;
        size_t want = nallocx(size, flags);
        cr_assert_geq(want, size);
        void *p = mallocx(size, flags);
        cr_assert_not_null(p);
        cr_assert_eq(sallocx(p, 0), want, "nallocx(%zu, %#x) = %zu, mallocx gave %zu", size, flags, want,
                     sallocx(p, 0));
        cr_assert_eq(malloc_usable_size(p), want);
        cr_assert(ALIGNED(p, (size_t)1 << (flags & 0x3f)));
        dallocx(p, flags & MALLOCX_TCACHE_NONE);
    }
}

Test(jemalloc_api, nallocx_every_class_boundary)
{
    /* Every small class and the first large ones: size, size - 1, size + 1
     * with alignments up to a page. */
    for (unsigned ind = 0; ind < SC_NBINS + 16 && ind < SC_NSIZES; ind++) {
        size_t c = sc_index2size(ind);
        size_t probes[] = {c - 1, c, c + 1};
        for (size_t k = 0; k < 3; k++) {
            size_t s = probes[k];
            if (s == 0)
                continue;
            for (unsigned lg = 0; lg <= LG_PAGE; lg += 2) {
                size_t want = nallocx(s, MALLOCX_LG_ALIGN(lg));
                void *p = mallocx(s, MALLOCX_LG_ALIGN(lg));
                cr_assert_eq(sallocx(p, 0), want, "size %zu lg_align %u", s, lg);
                dallocx(p, 0);
            }
        }
        cr_assert_eq(nallocx(c, 0), c, "a class size is its own usable size");
    }
    /* Monotonic in size. */
    size_t prev = 0;
    for (size_t s = 1; s < (1 << 22); s += s / 64 + 1) {
        size_t u = nallocx(s, 0);
        cr_assert_geq(u, prev);
        cr_assert_geq(u, s);
        prev = u;
    }
}

Test(jemalloc_api, nallocx_matches_standard_functions)
{
    for (size_t n = 1; n < 50000; n = n * 3 / 2 + 1) {
        void *p = malloc(n);
        cr_assert_eq(malloc_usable_size(p), nallocx(n, 0));
        free(p);
        cr_assert_eq(posix_memalign(&p, 256, n), 0);
        cr_assert_eq(malloc_usable_size(p), nallocx(n, MALLOCX_ALIGN(256)));
        free(p);
    }
}

/* ---------------------------------------------------------------------
 * rallocx
 */

Test(jemalloc_api, rallocx_preserves_contents)
{
    uint64_t seed = 5;
    for (int round = 0; round < 400; round++) {
        size_t a = tu_rand(&seed) % 100000 + 1, b = tu_rand(&seed) % 100000 + 1;
        int flags = round % 3 == 0 ? MALLOCX_LG_ALIGN(round % 13) : 0;
        unsigned char *p = mallocx(a, flags);
        for (size_t i = 0; i < a; i++)
            p[i] = (unsigned char)(i * 7 + round);
        unsigned char *q = rallocx(p, b, flags);
        cr_assert_not_null(q);
        cr_assert(ALIGNED(q, (size_t)1 << (flags & 0x3f)));
        cr_assert_eq(sallocx(q, 0), nallocx(b, flags), "rallocx(%zu -> %zu, %#x)", a, b, flags);
        for (size_t i = 0; i < MA_MIN(a, b); i++)
            cr_assert_eq(q[i], (unsigned char)(i * 7 + round), "byte %zu, %zu -> %zu", i, a, b);
        dallocx(q, 0);
    }
}

Test(jemalloc_api, rallocx_zero_zeroes_the_grown_part)
{
    /* Moving (small -> bigger class) and growing in place (a large object
     * into the dirty pages of a freed neighbour). */
    size_t sizes[][2] = {{8, 64}, {100, 5000}, {3000, 14000}, {10000, 200000}, {100, 3 << 20}};
    for (size_t s = 0; s < MA_ARRAY_LEN(sizes); s++) {
        for (int round = 0; round < 10; round++) {
            /* Dirty memory of the target class first. */
            unsigned char *d = mallocx(sizes[s][1], 0);
            memset(d, 0xcc, sallocx(d, 0));
            dallocx(d, 0);
            unsigned char *p = mallocx(sizes[s][0], 0);
            size_t old = sallocx(p, 0);
            memset(p, 0x5a, old);
            unsigned char *q = rallocx(p, sizes[s][1], MALLOCX_ZERO);
            cr_assert_not_null(q);
            size_t nu = sallocx(q, 0);
            for (size_t i = 0; i < old; i++)
                cr_assert_eq(q[i], 0x5a);
            cr_assert(all_zero(q, old, nu), "rallocx(%zu -> %zu, ZERO): grown part not zero",
                      sizes[s][0], sizes[s][1]);
            dallocx(q, 0);
        }
    }
}

Test(jemalloc_api, rallocx_zero_in_place_growth_into_dirty_pages)
{
    const size_t L = SC_LARGE_MINCLASS;
    /* a and b adjacent large objects. A pair that is not adjacent (a took a
     * free extent that fits it exactly) is kept until the end, so that the
     * next pairs come from elsewhere, eventually from fresh memory. */
    int tries = 0, in_place = 0, nkept = 0;
    void *kept[100];
    for (; tries < 50 && in_place < 5; tries++) {
        unsigned char *a = mallocx(4 * L, MALLOCX_TCACHE_NONE);
        unsigned char *b = mallocx(4 * L, MALLOCX_TCACHE_NONE);
        memset(a, 0x11, 4 * L);
        memset(b, 0x77, 4 * L);
        if (b != a + 4 * L) {
            kept[nkept++] = a;
            kept[nkept++] = b;
            continue;
        }
        dallocx(b, MALLOCX_TCACHE_NONE); /* its pages stay dirty: 0x77 */
        unsigned char *q = rallocx(a, 6 * L, MALLOCX_ZERO);
        cr_assert_not_null(q);
        if (q == a)
            in_place++;
        for (size_t i = 0; i < 4 * L; i++)
            cr_assert_eq(q[i], 0x11);
        cr_assert(all_zero(q, 4 * L, sallocx(q, 0)), "in-place growth with MALLOCX_ZERO left dirty bytes");
        dallocx(q, 0);
    }
    for (int i = 0; i < nkept; i++)
        dallocx(kept[i], MALLOCX_TCACHE_NONE);
    cr_assert_gt(in_place, 0, "no in-place growth happened in %d tries", tries);
}

Test(jemalloc_api, rallocx_failure_leaves_the_object)
{
    unsigned char *p = mallocx(1000, 0);
    memset(p, 0x3c, 1000);
    size_t u = sallocx(p, 0);
    size_t huge[] = {SIZE_MAX, (size_t)PTRDIFF_MAX, (size_t)1 << 62};
    for (size_t i = 0; i < MA_ARRAY_LEN(huge); i++) {
        cr_assert_null(rallocx(p, huge[i], 0), "rallocx(%zu)", huge[i]);
        cr_assert_null(rallocx(p, huge[i], MALLOCX_ZERO));
        cr_assert_eq(sallocx(p, 0), u);
        for (size_t k = 0; k < 1000; k++)
            cr_assert_eq(p[k], 0x3c);
    }
    /* Unsupported flags and impossible alignments. */
    errno = 0;
    cr_assert_null(rallocx(p, 10, MALLOCX_TCACHE(0)));
    cr_assert_eq(errno, EINVAL);
    cr_assert_null(rallocx(p, 10, MALLOCX_LG_ALIGN(63)));
    /* A nonexistent arena when the object must move. */
    cr_assert_null(rallocx(p, 100000, MALLOCX_ARENA(narenas() + 5)));
    cr_assert_eq(sallocx(p, 0), u);
    for (size_t k = 0; k < 1000; k++)
        cr_assert_eq(p[k], 0x3c);
    /* It is still a live object. */
    unsigned char *q = rallocx(p, 2000, 0);
    cr_assert_not_null(q);
    cr_assert_eq(q[999], 0x3c);
    dallocx(q, 0);
}

Test(jemalloc_api, rallocx_alignment_and_arena)
{
    unsigned n = narenas();
    char *p = mallocx(100, 0);
    strcpy(p, "hello");
    for (unsigned lg = 4; lg <= 22; lg += 3) {
        p = rallocx(p, 100 + lg * 1000, MALLOCX_LG_ALIGN(lg));
        cr_assert_not_null(p);
        cr_assert(ALIGNED(p, (size_t)1 << lg));
        cr_assert_str_eq(p, "hello");
    }
    p = rallocx(p, 1 << 20, MALLOCX_ARENA(n - 1));
    cr_assert_not_null(p);
    cr_assert_str_eq(p, "hello");
    dallocx(p, 0);
}

/* ---------------------------------------------------------------------
 * xallocx
 */

Test(jemalloc_api, xallocx_never_moves)
{
    uint64_t seed = 77;
    for (int round = 0; round < 2000; round++) {
        size_t a = tu_rand(&seed) % 300000 + 1;
        size_t b = tu_rand(&seed) % 300000 + 1;
        size_t extra = tu_rand(&seed) % 3 == 0 ? tu_rand(&seed) % 100000 : 0;
        unsigned char *p = mallocx(a, 0);
        memset(p, 0x42, a);
        size_t before = sallocx(p, 0);
        size_t r = xallocx(p, b, extra, 0);
        /* Same address (nothing to compare with but the object itself):
         * its size is what xallocx says and its bytes are kept. */
        cr_assert_eq(sallocx(p, 0), r, "xallocx(%zu -> %zu + %zu) returned %zu, sallocx %zu", a, b, extra,
                     r, sallocx(p, 0));
        if (r != before) {
            cr_assert_geq(r, b, "a resize must reach at least size");
            cr_assert_leq(r, nallocx(b + extra, 0));
        }
        for (size_t i = 0; i < MA_MIN(a, r); i++)
            cr_assert_eq(p[i], 0x42);
        dallocx(p, 0);
    }
}

Test(jemalloc_api, xallocx_small_objects_stay_as_they_are)
{
    char *p = mallocx(100, 0);
    size_t u = sallocx(p, 0);
    cr_assert_eq(xallocx(p, 5000, 0, 0), u, "a small object cannot grow in place");
    cr_assert_eq(xallocx(p, 10, 0, 0), u, "nor shrink to another class");
    cr_assert_eq(xallocx(p, u, 0, 0), u);
    cr_assert_eq(xallocx(p, u - 1, 1, 0), u, "already within [size, size + extra]");
    cr_assert_eq(sallocx(p, 0), u);
    dallocx(p, 0);
}

Test(jemalloc_api, xallocx_large_shrinks_and_grows_in_place_with_extra)
{
    const size_t L = SC_LARGE_MINCLASS;
    int grew = 0;
    for (int tries = 0; tries < 50 && grew < 3; tries++) {
        unsigned char *a = mallocx(8 * L, MALLOCX_TCACHE_NONE);
        memset(a, 0x21, 8 * L);
        /* Shrink: always possible for a large object. */
        size_t r = xallocx(a, 2 * L, 0, 0);
        cr_assert_eq(r, nallocx(2 * L, 0), "shrinking %zu -> %zu gave %zu", 8 * L, 2 * L, r);
        cr_assert_eq(sallocx(a, 0), r);
        /* Grow back into the freed tail, asking for more as extra. */
        r = xallocx(a, 4 * L, 4 * L, MALLOCX_ZERO);
        cr_assert_geq(r, 4 * L);
        if (r == sallocx(a, 0) && r >= 4 * L)
            grew++;
        for (size_t i = 0; i < 2 * L; i++)
            cr_assert_eq(a[i], 0x21);
        cr_assert(all_zero(a, 2 * L, r), "xallocx with MALLOCX_ZERO left dirty bytes");
        /* The extra is a wish: an impossible extra still resizes to size. */
        size_t r2 = xallocx(a, 3 * L, SIZE_MAX / 2, 0);
        cr_assert_eq(sallocx(a, 0), r2);
        cr_assert_geq(r2, 3 * L);
        dallocx(a, MALLOCX_TCACHE_NONE);
    }
    cr_assert_gt(grew, 0);
    /* An impossible size: unchanged. */
    unsigned char *b = mallocx(2 * L, 0);
    size_t u = sallocx(b, 0);
    cr_assert_eq(xallocx(b, SIZE_MAX, 0, 0), u);
    cr_assert_eq(xallocx(b, (size_t)PTRDIFF_MAX, 0, 0), u);
    cr_assert_eq(sallocx(b, 0), u);
    dallocx(b, 0);
}

Test(jemalloc_api, xallocx_growth_blocked_by_a_neighbour)
{
    const size_t L = SC_LARGE_MINCLASS;
    for (int tries = 0; tries < 50; tries++) {
        unsigned char *a = mallocx(2 * L, MALLOCX_TCACHE_NONE);
        unsigned char *b = mallocx(2 * L, MALLOCX_TCACHE_NONE);
        if (b == a + 2 * L) {
            memset(b, 0x99, 2 * L);
            size_t r = xallocx(a, 4 * L, 0, 0);
            cr_assert_eq(r, 2 * L, "growth over a live neighbour");
            for (size_t i = 0; i < 2 * L; i++)
                cr_assert_eq(b[i], 0x99);
            dallocx(a, MALLOCX_TCACHE_NONE);
            dallocx(b, MALLOCX_TCACHE_NONE);
            return;
        }
        dallocx(a, MALLOCX_TCACHE_NONE);
        dallocx(b, MALLOCX_TCACHE_NONE);
    }
    cr_skip_test("never got two adjacent large objects");
}

/* ---------------------------------------------------------------------
 * sallocx, dallocx, sdallocx
 */

Test(jemalloc_api, sallocx_equals_malloc_usable_size)
{
    for (size_t n = 1; n < (4 << 20); n = n * 9 / 8 + 1) {
        void *p = mallocx(n, 0);
        cr_assert_eq(sallocx(p, 0), malloc_usable_size(p));
        cr_assert_eq(sallocx(p, MALLOCX_LG_ALIGN(4)), malloc_usable_size(p), "flags do not matter");
        dallocx(p, 0);
        p = malloc(n);
        cr_assert_eq(sallocx(p, 0), malloc_usable_size(p));
        free(p);
    }
}

Test(jemalloc_api, dallocx_and_sdallocx_with_flags)
{
    unsigned n = narenas();
    int flagsets[] = {0,
                      MALLOCX_TCACHE_NONE,
                      MALLOCX_LG_ALIGN(6),
                      MALLOCX_LG_ALIGN(12) | MALLOCX_TCACHE_NONE,
                      MALLOCX_ARENA(0),
                      MALLOCX_ARENA(n - 1) | MALLOCX_TCACHE_NONE,
                      MALLOCX_ZERO};
    for (int round = 0; round < 3; round++) {
        for (size_t f = 0; f < MA_ARRAY_LEN(flagsets); f++) {
            void *ps[200];
            size_t sz[200];
            for (int i = 0; i < 200; i++) {
                sz[i] = (size_t)(i * 613 % 70000) + 1;
                ps[i] = mallocx(sz[i], flagsets[f]);
                cr_assert_not_null(ps[i]);
                tu_fill(ps[i], sz[i]);
            }
            for (int i = 0; i < 200; i++) {
                cr_assert(tu_check(ps[i], sz[i]));
                /* Any size between the request and the usable size. */
                size_t s = (i % 3 == 0) ? sallocx(ps[i], 0) : sz[i];
                if (i % 2)
                    sdallocx(ps[i], s, flagsets[f]);
                else
                    dallocx(ps[i], flagsets[f]);
            }
        }
    }
    dallocx(NULL, 0);
    dallocx(NULL, MALLOCX_TCACHE_NONE);
    sdallocx(NULL, 10, 0);
}

/* ---------------------------------------------------------------------
 * thread.allocated / thread.deallocated through these entry points.
 */

Test(jemalloc_api, thread_counters_agree_with_usable_sizes)
{
    uint64_t seed = 3;
    uint64_t a0 = thread_allocated(), d0 = thread_deallocated();
    uint64_t want_a = 0, want_d = 0;
    void *ps[300];
    for (int i = 0; i < 300; i++) {
        size_t s = tu_rand(&seed) % (i % 10 == 0 ? 2000000 : 5000) + 1;
        int flags = i % 4 == 0 ? MALLOCX_LG_ALIGN(i % 14) : 0;
        if (i % 5 == 0)
            flags |= MALLOCX_ZERO | MALLOCX_TCACHE_NONE;
        ps[i] = mallocx(s, flags);
        cr_assert_not_null(ps[i]);
        want_a += nallocx(s, flags);
    }
    cr_assert_eq(thread_allocated() - a0, want_a);
    cr_assert_eq(thread_deallocated() - d0, 0);
    /* rallocx: an allocation of the new size and a free of the old. */
    for (int i = 0; i < 300; i += 2) {
        size_t old = sallocx(ps[i], 0);
        size_t s = tu_rand(&seed) % 100000 + 1;
        ps[i] = rallocx(ps[i], s, 0);
        cr_assert_not_null(ps[i]);
        want_a += sallocx(ps[i], 0);
        want_d += old;
    }
    cr_assert_eq(thread_allocated() - a0, want_a);
    cr_assert_eq(thread_deallocated() - d0, want_d);
    /* xallocx: counted as rallocx when it resizes, not at all otherwise. */
    for (int i = 1; i < 300; i += 2) {
        size_t old = sallocx(ps[i], 0);
        size_t r = xallocx(ps[i], old > SC_LARGE_MINCLASS ? old / 2 : old + 100000, 0, 0);
        if (r != old) {
            want_a += r;
            want_d += old;
        }
    }
    cr_assert_eq(thread_allocated() - a0, want_a);
    cr_assert_eq(thread_deallocated() - d0, want_d);
    for (int i = 0; i < 300; i++) {
        want_d += sallocx(ps[i], 0);
        if (i % 3 == 0)
            sdallocx(ps[i], sallocx(ps[i], 0), 0);
        else if (i % 3 == 1)
            dallocx(ps[i], MALLOCX_TCACHE_NONE);
        else
            dallocx(ps[i], 0);
    }
    cr_assert_eq(thread_allocated() - a0, want_a);
    cr_assert_eq(thread_deallocated() - d0, want_d);
}

Test(jemalloc_api, thread_allocatedp_points_at_the_live_counter)
{
    uint64_t *ap, *dp;
    size_t len = sizeof(ap);
    cr_assert_eq(mallctl("thread.allocatedp", &ap, &len, NULL, 0), 0);
    cr_assert_eq(mallctl("thread.deallocatedp", &dp, &len, NULL, 0), 0);
    uint64_t a = *ap, d = *dp;
    void *p = mallocx(12345, 0);
    cr_assert_eq(*ap - a, nallocx(12345, 0));
    sdallocx(p, 12345, 0);
    cr_assert_eq(*dp - d, nallocx(12345, 0));
}

/* ---------------------------------------------------------------------
 * check_sized:true: a wrong size given to sdallocx / free_sized aborts
 * with one "<myalloc>: " line.
 */

typedef struct {
    const char *func;
    size_t alloc, claim;
} sized_case_t;

static void wrong_size_child(void *arg)
{
    sized_case_t *c = arg;
    check_sized_on();
    void *p = mallocx(c->alloc, 0);
    if (strcmp(c->func, "sdallocx") == 0)
        sdallocx(p, c->claim, 0);
    else if (strcmp(c->func, "sdallocx_none") == 0)
        sdallocx(p, c->claim, MALLOCX_TCACHE_NONE);
    else
        free_sized(p, c->claim);
    fprintf(stderr, "not caught\n");
}

static void right_size_child(void *arg)
{
    (void)arg;
    check_sized_on();
    for (size_t n = 1; n < 300000; n = n * 3 / 2 + 1) {
        void *p = mallocx(n, 0);
        sdallocx(p, n, 0);
        p = mallocx(n, 0);
        sdallocx(p, sallocx(p, 0), MALLOCX_TCACHE_NONE); /* any size up to the usable one */
        p = malloc(n);
        free_sized(p, n);
        p = mallocx(n, MALLOCX_LG_ALIGN(10));
        sdallocx(p, n, MALLOCX_LG_ALIGN(10));
        /* realloc may round growth up to a page run: the size asked of
         * realloc still frees it. */
        p = malloc(n / 2 + 1);
        p = realloc(p, n);
        free_sized(p, n);
    }
}

Test(jemalloc_api, check_sized_catches_wrong_sizes)
{
    sized_case_t cases[] = {
        {"sdallocx", 64, 128},       {"sdallocx", 64, 16},        {"sdallocx_none", 1000, 3000},
        {"free_sized", 100, 200},    {"free_sized", 100000, 10},  {"sdallocx", 100000, 200000},
        {"sdallocx", 20, 1 << 20},   {"free_sized", 5000, 4000},
    };
    for (size_t i = 0; i < MA_ARRAY_LEN(cases); i++) {
        char err[4096];
        int st = tu_capture(wrong_size_child, &cases[i], err, sizeof(err));
        cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
                  "%s(%zu-byte object, size %zu): status %#x, stderr \"%s\"", cases[i].func, cases[i].alloc,
                  cases[i].claim, st, err);
        cr_assert_eq(strncmp(err, "<myalloc>: ", 11), 0, "message \"%s\"", err);
        const char *fn = strncmp(cases[i].func, "sdallocx", 8) == 0 ? "sdallocx" : "free_sized";
        cr_assert_not_null(strstr(err, fn), "message does not name %s: \"%s\"", fn, err);
        char num[32];
        snprintf(num, sizeof(num), "%zu", cases[i].claim);
        cr_assert_not_null(strstr(err, num), "message does not give the size %s: \"%s\"", num, err);
        cr_assert_null(strstr(err, "not caught"));
        cr_assert_eq(strchr(err, '\n'), err + strlen(err) - 1, "one line: \"%s\"", err);
    }
    char err[4096];
    int st = tu_capture(right_size_child, NULL, err, sizeof(err));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "right sizes: status %#x, \"%s\"", st, err);
    cr_assert_str_eq(err, "");
}

/* The same through MYALLOC_CONF in a program that loads the library with
 * LD_PRELOAD (the option read at start-up, not set by the test). */
static void preload_child(void *arg)
{
    const char **argv = arg;
    char lib[PATH_MAX];
    cr_assert_not_null(realpath(tu_build_dir(), lib));
    strcat(lib, "/libmyalloc.so");
    char preload[PATH_MAX + 16];
    snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", lib);
    char *env[] = {preload, (char *)argv[0], NULL};
    execve("/bin/sh", (char *[]){"sh", "-c", (char *)argv[1], NULL}, env);
    _exit(127);
}

Test(jemalloc_api, check_sized_from_myalloc_conf)
{
    /* A tiny C program calling free_sized / sdallocx through dlsym, built
     * once per run. */
    char dir[] = "/tmp/myalloc_jeapi_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char src[PATH_MAX], bin[PATH_MAX], cmd[3 * PATH_MAX], out[8192];
    snprintf(src, sizeof(src), "%s/p.c", dir);
    snprintf(bin, sizeof(bin), "%s/p", dir);
    FILE *f = fopen(src, "w");
    cr_assert_not_null(f);
    fputs("#include <dlfcn.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
          "int main(int c, char **v) {\n"
          "  void (*fs)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, \"free_sized\");\n"
          "  void (*sd)(void *, size_t, int) = (void (*)(void *, size_t, int))dlsym(RTLD_DEFAULT, \"sdallocx\");\n"
          "  if (!fs || !sd) return 3;\n"
          "  char *p = malloc(64);\n"
          "  if (strcmp(v[1], \"fs\") == 0) fs(p, atoi(v[2])); else sd(p, atoi(v[2]), 0);\n"
          "  puts(\"survived\");\n  return 0;\n}\n",
          f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "cc -O1 -o %s %s -ldl", bin, src);
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "%s: %s", cmd, out);
    struct {
        const char *conf, *args;
        bool abort;
    } cases[] = {
        {"MYALLOC_CONF=check_sized:true", "fs 4000", true},
        {"MYALLOC_CONF=check_sized:true", "sd 4000", true},
        {"MYALLOC_CONF=check_sized:true", "fs 64", false},
        {"MYALLOC_CONF=check_sized:true", "sd 50", false},
        {"MYALLOC_CONF=check_sized:false", "sd 64", false},
    };
    for (size_t i = 0; i < MA_ARRAY_LEN(cases); i++) {
        char sh[PATH_MAX + 64];
        snprintf(sh, sizeof(sh), "exec %s %s >/dev/null", bin, cases[i].args);
        const char *argv[] = {cases[i].conf, sh};
        char err[4096];
        int st = tu_capture(preload_child, argv, err, sizeof(err));
        if (cases[i].abort) {
            cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "%s %s: status %#x \"%s\"", cases[i].conf,
                      cases[i].args, st, err);
            cr_assert_eq(strncmp(err, "<myalloc>: ", 11), 0, "\"%s\"", err);
            cr_assert_not_null(strstr(err, "4000"), "\"%s\"", err);
        } else {
            cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s %s: status %#x \"%s\"", cases[i].conf,
                      cases[i].args, st, err);
        }
    }
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    tu_run(cmd, out, sizeof(out));
}
