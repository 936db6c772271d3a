/*
 * The standard entry points and their edge cases.
 */
#include <malloc.h>
#include <stdint.h>
#include <sys/mman.h>

#include "myalloc.h"
#include "sizeclass/sizeclass.h"
#include "test_util.h"

/* glibc's internal names, which myalloc also defines. */
void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);
void __libc_free(void *);

#define ALIGNED(p, a) ((((uintptr_t)(p)) & ((a) - 1)) == 0)

Test(api, every_pointer_is_16_byte_aligned)
{
    void *ps[4000];
    for (size_t i = 0; i < 4000; i++) {
        ps[i] = malloc(i * 7 % 5000);
        cr_assert_not_null(ps[i]);
        cr_assert(ALIGNED(ps[i], 16), "malloc(%zu) = %p", i * 7 % 5000, ps[i]);
    }
    for (size_t i = 0; i < 4000; i++)
        free(ps[i]);
    for (size_t n = 1; n < 200; n++) {
        void *p = calloc(n, 3);
        cr_assert(ALIGNED(p, 16));
        void *q = realloc(p, n * 11);
        cr_assert(ALIGNED(q, 16));
        free(q);
    }
}

Test(api, malloc_zero_is_unique_and_freeable)
{
    void *a = malloc(0), *b = malloc(0), *c = malloc(0);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_assert_neq(a, b);
    cr_assert_neq(b, c);
    cr_assert_neq(a, c);
    cr_assert_geq(malloc_usable_size(a), 1);
    free(a);
    free(b);
    free(c);
}

Test(api, impossible_sizes_give_enomem)
{
    size_t huge[] = {SIZE_MAX, SIZE_MAX - 4096, (size_t)PTRDIFF_MAX + 1, (size_t)PTRDIFF_MAX};
    for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
        errno = 0;
        cr_assert_null(malloc(huge[i]), "malloc(%zu)", huge[i]);
        cr_assert_eq(errno, ENOMEM);
        errno = 0;
        cr_assert_null(calloc(1, huge[i]));
        cr_assert_eq(errno, ENOMEM);
        void *p = malloc(10);
        errno = 0;
        cr_assert_null(realloc(p, huge[i]));
        cr_assert_eq(errno, ENOMEM);
        cr_assert_eq(malloc_usable_size(p) >= 10, 1, "realloc failure must keep the object");
        free(p);
        errno = 0;
        cr_assert_null(aligned_alloc(64, huge[i]));
        cr_assert_eq(errno, ENOMEM);
        void *q = (void *)1;
        cr_assert_eq(posix_memalign(&q, 64, huge[i]), ENOMEM);
        cr_assert_eq(q, (void *)1, "posix_memalign must not touch *memptr on failure");
    }
}

Test(api, calloc_and_reallocarray_overflow)
{
    errno = 0;
    cr_assert_null(calloc(SIZE_MAX / 2, 3));
    cr_assert_eq(errno, ENOMEM);
    errno = 0;
    cr_assert_null(calloc((size_t)1 << 33, (size_t)1 << 33));
    cr_assert_eq(errno, ENOMEM);
    void *p = malloc(32);
    memset(p, 0xab, 32);
    errno = 0;
    cr_assert_null(reallocarray(p, SIZE_MAX / 4, 8));
    cr_assert_eq(errno, ENOMEM);
    cr_assert_eq(((unsigned char *)p)[31], 0xab, "reallocarray failure must keep the object");
    void *q = reallocarray(p, 100, 8);
    cr_assert_not_null(q);
    cr_assert_eq(((unsigned char *)q)[31], 0xab);
    cr_assert_geq(malloc_usable_size(q), 800);
    free(q);
}

Test(api, invalid_alignments_give_einval)
{
    void *p = (void *)1;
    size_t bad[] = {0, 1, 2, 4, 3, 24, 48, 100, 4097};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int expect = (bad[i] >= sizeof(void *) && (bad[i] & (bad[i] - 1)) == 0) ? 0 : EINVAL;
        int r = posix_memalign(&p, bad[i], 10);
        cr_assert_eq(r, expect, "posix_memalign(align=%zu) = %d", bad[i], r);
        if (r == 0)
            free(p);
    }
    size_t not_pow2[] = {0, 3, 24, 48, 100, 4097};
    for (size_t i = 0; i < sizeof(not_pow2) / sizeof(not_pow2[0]); i++) {
        errno = 0;
        cr_assert_null(aligned_alloc(not_pow2[i], 64), "aligned_alloc(%zu)", not_pow2[i]);
        cr_assert_eq(errno, EINVAL);
        errno = 0;
        cr_assert_null(memalign(not_pow2[i], 64));
        cr_assert_eq(errno, EINVAL);
    }
}

Test(api, alignments_up_to_1gib)
{
    for (unsigned lg = 0; lg <= 30; lg++) {
        size_t a = (size_t)1 << lg;
        size_t sizes[] = {1, a / 2 + 1, a, a + 1, 3 * a + 5};
        for (size_t s = 0; s < 5; s++) {
            void *p = NULL;
            if (a >= sizeof(void *)) {
                cr_assert_eq(posix_memalign(&p, a, sizes[s]), 0, "align %zu size %zu", a, sizes[s]);
                cr_assert(ALIGNED(p, a));
                cr_assert_geq(malloc_usable_size(p), sizes[s]);
                ((char *)p)[sizes[s] - 1] = 1;
                free(p);
            }
            p = aligned_alloc(a, sizes[s]);
            cr_assert_not_null(p);
            cr_assert(ALIGNED(p, a > 16 ? a : 16));
            free(p);
            p = memalign(a, sizes[s]);
            cr_assert_not_null(p);
            cr_assert(ALIGNED(p, a));
            free(p);
        }
    }
}

/* Zero bytes at an alignment: still an aligned region, also when the thread
 * cache holds objects of the smallest class (the fast path rounds 0 up to
 * the alignment, not to the smallest class). */
Test(api, aligned_requests_of_zero_bytes_are_aligned)
{
    for (size_t a = 32; a <= 4096; a *= 2) {
        void *small[8];
        for (int i = 0; i < 8; i++)
            small[i] = malloc(1);
        for (int i = 0; i < 8; i++)
            free(small[i]);
        for (int k = 0; k < 3; k++) {
            void *p = NULL;
            cr_assert_eq(posix_memalign(&p, a, 0), 0);
            cr_assert(ALIGNED(p, a), "posix_memalign(%zu, 0) = %p", a, p);
            void *q = aligned_alloc(a, 0);
            cr_assert(q != NULL && ALIGNED(q, a), "aligned_alloc(%zu, 0) = %p", a, q);
            free(p);
            free(q);
        }
    }
}

Test(api, valloc_and_pvalloc_are_page_aligned)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    void *p = valloc(10);
    cr_assert(ALIGNED(p, pg));
    free(p);
    p = pvalloc(10);
    cr_assert(ALIGNED(p, pg));
    cr_assert_geq(malloc_usable_size(p), pg);
    free(p);
    p = pvalloc(0);
    cr_assert_not_null(p);
    cr_assert_geq(malloc_usable_size(p), pg);
    free(p);
}

Test(api, realloc_keeps_contents_in_both_directions)
{
    uint64_t seed = 42;
    for (int round = 0; round < 300; round++) {
        size_t a = tu_rand(&seed) % 200000 + 1, b = tu_rand(&seed) % 200000 + 1;
        unsigned char *p = malloc(a);
        for (size_t i = 0; i < a; i++)
            p[i] = (unsigned char)(i * 131 + round);
        unsigned char *q = realloc(p, b);
        cr_assert_not_null(q);
        size_t n = a < b ? a : b;
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(q[i], (unsigned char)(i * 131 + round), "byte %zu after %zu -> %zu", i, a, b);
        free(q);
    }
}

Test(api, realloc_null_and_zero)
{
    void *p = realloc(NULL, 100);
    cr_assert_not_null(p);
    cr_assert_geq(malloc_usable_size(p), 100);
    cr_assert_null(realloc(p, 0), "realloc(p, 0) frees p and returns NULL (glibc)");
}

Test(api, realloc_in_place_when_it_can)
{
    /* Same class: in place. */
    char *p = malloc(100);
    cr_assert_eq(realloc(p, 110), p);
    free(p);
    /* Large (sizes relative to this configuration's first large class):
     * shrinking keeps the address. */
    const size_t L = SC_LARGE_MINCLASS;
    p = malloc(8 * L);
    memset(p, 7, 8 * L);
    char *q = realloc(p, 2 * L);
    cr_assert_eq(q, p, "large shrink must be in place");
    cr_assert_eq(q[2 * L - 1], 7);
    /* Growing into the pages just given back: in place again. */
    char *r = realloc(q, 6 * L);
    cr_assert_eq(r, p, "large growth into free neighbouring pages must be in place");
    cr_assert_eq(r[2 * L - 1], 7);
    cr_assert_geq(malloc_usable_size(r), 6 * L);
    free(r);
}

/* Slab classes past jemalloc's (16-32 KiB with 4 KiB pages) cannot grow in
 * place, so realloc hands out a page run of the first large class when it
 * grows into them, and keeps a page run as one when it shrinks into them:
 * a realloc chain through those sizes then grows in place. malloc of such
 * a size still gets a slab region. */
Test(api, realloc_through_the_extended_slab_classes_takes_page_runs)
{
    const size_t X = SC_SLAB_EXTENDED_MINCLASS, L = SC_LARGE_MINCLASS;
    if (X >= L)
        cr_skip_test("no slab classes past jemalloc's in this configuration");
    char *m = malloc(X + 1);
    cr_assert_lt(malloc_usable_size(m), L, "malloc(%zu) should be a slab region", X + 1);
    free(m);
    size_t below = X - PAGE;
    char *p = malloc(below);
    memset(p, 3, below);
    char *q = realloc(p, X + 1);
    cr_assert_not_null(q);
    cr_assert_eq(malloc_usable_size(q), L, "growing into %zu: usable %zu, not a page run of %zu", X + 1,
                 malloc_usable_size(q), L);
    cr_assert_eq(q[below - 1], 3);
    memset(q, 4, X + 1);
    char *r = realloc(q, X + PAGE);
    cr_assert_eq(r, q, "a page run resized within the extended classes must stay in place");
    cr_assert_eq(malloc_usable_size(r), L);
    cr_assert_eq(r[X], 4);
    free(r);
}

Test(api, calloc_is_zero_even_on_reused_memory)
{
    for (int round = 0; round < 50; round++) {
        size_t n = (size_t)(round * 977 % 70000) + 1;
        unsigned char *p = malloc(n);
        memset(p, 0xff, n);
        free(p);
        unsigned char *q = calloc(1, n);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(q[i], 0, "calloc(%zu) byte %zu", n, i);
        free(q);
    }
    /* Large memory that was dirtied and freed comes back zeroed too. */
    unsigned char *big = malloc(8 << 20);
    memset(big, 0x5a, 8 << 20);
    free(big);
    big = calloc(8 << 20, 1);
    for (size_t i = 0; i < (8u << 20); i += 4096)
        cr_assert_eq(big[i], 0);
    free(big);
}

Test(api, calloc_does_not_touch_fresh_pages)
{
    size_t before = tu_rss_bytes();
    size_t n = (size_t)512 << 20;
    char *p = calloc(1, n);
    cr_assert_not_null(p);
    size_t after = tu_rss_bytes();
    cr_assert_lt(after - before, (size_t)32 << 20,
                 "calloc of fresh memory touched %zu bytes", after - before);
    cr_assert_eq(p[0], 0);
    cr_assert_eq(p[n - 1], 0);
    free(p);
}

Test(api, allocation_above_4gib_works)
{
    size_t n = ((size_t)4 << 30) + 12345;
    char *p = malloc(n);
    cr_assert_not_null(p);
    cr_assert_geq(malloc_usable_size(p), n);
    p[0] = 1;
    p[(size_t)2 << 30] = 2;
    p[n - 1] = 3;
    cr_assert_eq(p[0] + p[(size_t)2 << 30] + p[n - 1], 6);
    char *q = realloc(p, n + ((size_t)1 << 30));
    cr_assert_not_null(q);
    cr_assert_eq(q[n - 1], 3);
    free(q);
}

/* Reserving 16 TiB (untouched: MAP_NORESERVE memory) costs little RSS:
 * the page-map leaves for the chunk (one per GiB) are address space until
 * used, and their records share pages (base.c). They once cost a page and
 * a page-table page each: 66 MiB for this block. */
Test(api, a_huge_reservation_costs_little_memory)
{
    const size_t n = (size_t)1 << 44;
    size_t before = tu_rss_bytes();
    char *p = malloc(n);
    if (p == NULL)
        cr_skip_test("no 16 TiB of address space here (overcommit policy)");
    size_t after = tu_rss_bytes();
    p[0] = 1;
    p[n - 1] = 2;
    free(p);
    cr_assert_lt(after - before, (size_t)8 << 20, "malloc(16 TiB) took %zu KiB of RSS", (after - before) >> 10);
}

Test(api, usable_size_matches_class_and_is_writable)
{
    for (size_t n = 0; n < 70000; n += (n < 1024 ? 1 : 97)) {
        unsigned char *p = malloc(n);
        size_t u = malloc_usable_size(p);
        cr_assert_geq(u, n);
        cr_assert_leq(u, n + n / 4 + QUANTUM, "usable %zu for %zu wastes more than a class step", u, n);
        memset(p, 0x33, u);
        free(p);
    }
    cr_assert_eq(malloc_usable_size(NULL), 0);
}

Test(api, sized_frees)
{
    for (size_t n = 1; n < 40000; n = n * 3 + 1) {
        void *p = malloc(n);
        free_sized(p, n);
        void *q = aligned_alloc(256, n);
        cr_assert(ALIGNED(q, 256));
        free_aligned_sized(q, 256, n);
    }
    free_sized(NULL, 0);
}

Test(api, libc_aliases_and_glibc_extras)
{
    void *p = __libc_malloc(10);
    p = __libc_realloc(p, 1000);
    __libc_free(p);
    p = __libc_calloc(10, 10);
    cr_assert_eq(((char *)p)[99], 0);
    __libc_free(p);
    p = __libc_memalign(4096, 10);
    cr_assert(ALIGNED(p, 4096));
    __libc_free(p);

    cr_assert_eq(mallopt(M_ARENA_MAX, 2), 1);
    cr_assert_eq(mallopt(12345, 2), 0, "unknown mallopt parameters are refused");
    void *hold = malloc(1 << 20);
    struct mallinfo2 mi = mallinfo2();
    cr_assert_geq(mi.uordblks, 1 << 20, "mallinfo2 in-use bytes count live objects");
    cr_assert_geq(mi.arena, mi.uordblks);
    struct mallinfo m1 = mallinfo();
    cr_assert_gt(m1.uordblks, 0);
    free(hold);
    /* Freed large memory is dirty until trimmed; malloc_trim purges it. */
    void *big = malloc(64 << 20);
    memset(big, 1, 64 << 20);
    free(big);
    cr_assert_eq(malloc_trim(0), 1, "malloc_trim releases the freed pages");
    /* A huge block freed and trimmed is purged address space: not counted
     * as the arena's memory or as free memory any more. */
    void *huge = malloc((size_t)1 << 36);
    cr_assert_not_null(huge);
    mi = mallinfo2();
    cr_assert_geq(mi.uordblks, (size_t)1 << 36);
    cr_assert_geq(mi.arena, mi.uordblks);
    cr_assert_eq(mi.hblks + mi.hblkhd, 0, "large objects are counted in uordblks, not as mmapped blocks");
    free(huge);
    malloc_trim(0);
    mi = mallinfo2();
    cr_assert_lt(mi.arena, (size_t)1 << 32, "arena %zu bytes after freeing and trimming 64 GiB", mi.arena);
    cr_assert_eq(mi.fordblks, mi.arena - mi.uordblks);
    cr_assert_eq(malloc_info(1, stdout), -1);
    cr_assert_eq(errno, EINVAL);
}


