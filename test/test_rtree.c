/*
 * The page map (rtree) and the fast map.
 *
 * Addresses written here are reserved first (PROT_NONE, MAP_FIXED_NOREPLACE)
 * or lie above the mappable user range, so the allocator, which registers
 * only its own chunks, can never own them while a test runs.
 */
#include <sys/mman.h>
#include <sys/resource.h>

#include "arena/arena.h"
#include "arena/rtree.h"
#include "tcache/tcache.h"
#include "test_util.h"

/* The fast maps are per arena: a page is on "the" fast map when any arena's
 * map marks it (a slab is marked in its own arena's, and one of a
 * whole-line class in the other arenas' too). */
static uintptr_t rtree_fast_lookup(uintptr_t a)
{
    for (unsigned i = 0; i < ARENAS_MAX; i++) {
        arena_t *ar = ma_load_acquire(&arenas[i]);
        uintptr_t v = ar != NULL ? rtree_fastmap_lookup(&ar->fastmap, a) : 0;
        if (v != 0)
            return v;
    }
    return 0;
}

/* What the fast map of an arena other than the one of the slab at a (if
 * any) holds for a. */
static uintptr_t other_arena_lookup(uintptr_t a)
{
    const extent_t *e = rtree_elm_extent(rtree_lookup(a));
    unsigned other = e != NULL && e->arena_ind == 0 ? 1 : 0;
    arena_t *ar = arena_get(other);
    cr_assert_not_null(ar);
    return rtree_fastmap_lookup(&ar->fastmap, a);
}

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

#define GIB ((uintptr_t)1 << 30)
#define VA_TOP ((uintptr_t)1 << RTREE_LG_VA)

/* A fake extent pointer: 64-byte aligned and below 2^48, never dereferenced. */
static void *fake_extent(uint64_t k) { return (void *)(uintptr_t)(((k % 0xffffffffull) + 1) << 6); }

static void init_allocator(void)
{
    free(malloc(1)); /* boots the page map's fast map */
}

TestSuite(rtree, .init = init_allocator);

/* Reserve [a, a + len) for this test; false if anything is there. */
static bool reserve(uintptr_t a, size_t len)
{
    if (a + len > ((uintptr_t)1 << 47))
        return false;
    void *p = mmap((void *)a, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                   -1, 0);
    if (p == MAP_FAILED)
        return false;
    if ((uintptr_t)p != a) { /* an old kernel ignoring the flag */
        munmap(p, len);
        return false;
    }
    return true;
}

Test(rtree, element_packing)
{
    /* 16 bits of class, 42 bits of 64-byte aligned pointer, 6 bits of flags. */
    const unsigned szinds[] = {0, 1, SC_NBINS - 1, SC_NBINS, SC_NSIZES - 1, SC_NSIZES, 255, 256, 4095, 65535};
    void *const ptrs[] = {(void *)64, fake_extent(12345), (void *)(((uintptr_t)1 << 47) - 64),
                          (void *)(((uintptr_t)1 << 48) - 64)};
    const uint64_t flags[] = {0, RTREE_SLAB, RTREE_SAMPLED, RTREE_STALE, RTREE_SLAB | RTREE_SAMPLED, RTREE_FLAGS};
    for (size_t i = 0; i < MA_ARRAY_LEN(szinds); i++)
        for (size_t j = 0; j < MA_ARRAY_LEN(ptrs); j++)
            for (size_t k = 0; k < MA_ARRAY_LEN(flags); k++) {
                rtree_elm_t x = rtree_elm_make(ptrs[j], szinds[i], flags[k]);
                cr_assert_eq(rtree_elm_extent(x), ptrs[j]);
                cr_assert_eq(rtree_elm_szind(x), szinds[i]);
                cr_assert_eq(x & RTREE_FLAGS, flags[k]);
            }
    cr_assert_null(rtree_elm_extent(RTREE_STALE));
    cr_assert_null(rtree_elm_extent(0));
}

Test(rtree, round_trips_spread_over_the_address_space)
{
    /* Pages in leaves all over the 47-bit range, including both sides of
     * 1 GiB leaf boundaries; each reserved so no one else uses it. */
    uintptr_t addrs[600];
    rtree_elm_t vals[600];
    unsigned n = 0;
    uint64_t seed = 31337;
    for (unsigned lg = 31; lg < 47 && n + 8 < 600; lg++) {
        for (int k = 0; k < 4; k++) {
            uintptr_t leaf = ((uintptr_t)1 << lg) + (tu_rand(&seed) % ((uintptr_t)1 << lg));
            leaf &= ~(GIB - 1);
            uintptr_t cand[3] = {leaf - PAGE, leaf, leaf + (tu_rand(&seed) % (GIB / PAGE)) * PAGE};
            for (int c = 0; c < 3; c++) {
                if (!reserve(cand[c], PAGE))
                    continue;
                addrs[n] = cand[c];
                vals[n] = rtree_elm_make(fake_extent(n * 977), n % SC_NSIZES, n % 2 ? RTREE_SLAB : 0);
                n++;
            }
        }
    }
    cr_assert_gt(n, 100, "could reserve only %u pages", n);
    for (unsigned i = 0; i < n; i++)
        cr_assert_eq(rtree_lookup(addrs[i]), 0, "%#lx was never written", (unsigned long)addrs[i]);
    for (unsigned i = 0; i < n; i++)
        cr_assert(rtree_write(addrs[i], vals[i]));
    for (unsigned i = 0; i < n; i++) {
        /* Any address inside the page finds the element. */
        uintptr_t a = addrs[i];
        cr_assert_eq(rtree_lookup(a), vals[i], "%#lx", (unsigned long)a);
        cr_assert_eq(rtree_lookup(a + PAGE - 1), vals[i]);
        cr_assert_eq(rtree_lookup(a + PAGE / 2 + 8), vals[i]);
        cr_assert_eq(*rtree_elm_get(a), vals[i]);
    }
    /* Overwrite with 0 and check neighbours are independent. */
    for (unsigned i = 0; i < n; i += 2)
        cr_assert(rtree_write(addrs[i], 0));
    for (unsigned i = 0; i < n; i++)
        cr_assert_eq(rtree_lookup(addrs[i]), i % 2 ? vals[i] : 0);
    for (unsigned i = 0; i < n; i++)
        rtree_write(addrs[i], 0);
    for (unsigned i = 0; i < n; i++)
        munmap((void *)addrs[i], PAGE);
}

/* A GiB boundary (a leaf's start) in [2^40, 2^40 + 2^45), at random. */
static uintptr_t random_gib(uint64_t *seed)
{
    return (((uintptr_t)1 << 40) + (tu_rand(seed) % ((uintptr_t)1 << 45))) & ~(GIB - 1);
}

/* A reserved range of npages straddling a 1 GiB leaf boundary. */
static uintptr_t reserve_across_boundary(size_t npages_before, size_t npages_after)
{
    uint64_t seed = 4242;
    for (int tries = 0; tries < 200; tries++) {
        uintptr_t b = random_gib(&seed);
        uintptr_t a = b - npages_before * PAGE;
        if (reserve(a, (npages_before + npages_after) * PAGE))
            return a;
    }
    cr_assert_fail("no free range across a leaf boundary");
    return 0;
}

Test(rtree, leaf_boundaries)
{
    uintptr_t a = reserve_across_boundary(4, 4);
    uintptr_t b = a + 4 * PAGE; /* the boundary */
    cr_assert_eq(b % GIB, 0);
    rtree_elm_t x = rtree_elm_make(fake_extent(1), 3, 0), y = rtree_elm_make(fake_extent(2), 4, RTREE_SLAB);
    cr_assert(rtree_write(b - PAGE, x));
    cr_assert(rtree_write(b, y));
    cr_assert_eq(rtree_lookup(b - 1), x);
    cr_assert_eq(rtree_lookup(b - PAGE), x);
    cr_assert_eq(rtree_lookup(b), y);
    cr_assert_eq(rtree_lookup(b + PAGE - 1), y);
    cr_assert_eq(rtree_lookup(b - 2 * PAGE), 0);
    cr_assert_eq(rtree_lookup(b + PAGE), 0);
    /* Two leaves, each holding its own element. */
    rtree_elm_t *lo = rtree_root[(b - PAGE) >> RTREE_LG_LEAF_SPAN], *hi = rtree_root[b >> RTREE_LG_LEAF_SPAN];
    cr_assert_not_null(lo);
    cr_assert_not_null(hi);
    cr_assert_neq(lo, hi);
    cr_assert_eq(rtree_elm_get(b - PAGE), &lo[RTREE_LEAF_N - 1]);
    cr_assert_eq(rtree_elm_get(b), &hi[0]);
    rtree_write(b - PAGE, 0);
    rtree_write(b, 0);

    /* A range written across the boundary covers exactly its pages. */
    rtree_elm_t z = rtree_elm_make(fake_extent(3), 5, RTREE_SLAB);
    cr_assert(rtree_write_range(b - 3 * PAGE, 6 * PAGE, z));
    cr_assert_eq(rtree_lookup(b - 4 * PAGE), 0);
    for (uintptr_t p = b - 3 * PAGE; p < b + 3 * PAGE; p += PAGE)
        cr_assert_eq(rtree_lookup(p), z, "page %ld from the boundary", (long)(p - b) / (long)PAGE);
    cr_assert_eq(rtree_lookup(b + 3 * PAGE), 0);
    cr_assert(rtree_write_range(b - 3 * PAGE, 6 * PAGE, 0));
    for (uintptr_t p = a; p < a + 8 * PAGE; p += PAGE)
        cr_assert_eq(rtree_lookup(p), 0);
    munmap((void *)a, 8 * PAGE);
}

Test(rtree, write_range_within_a_leaf_and_empty_range)
{
    uintptr_t a = reserve_across_boundary(64, 0); /* 64 pages ending at a boundary */
    rtree_elm_t z = rtree_elm_make(fake_extent(9), 1, 0);
    cr_assert(rtree_write_range(a + PAGE, 10 * PAGE, z));
    cr_assert_eq(rtree_lookup(a), 0);
    for (unsigned i = 1; i <= 10; i++)
        cr_assert_eq(rtree_lookup(a + i * PAGE), z);
    cr_assert_eq(rtree_lookup(a + 11 * PAGE), 0);
    /* Empty range: writes nothing. */
    cr_assert(rtree_write_range(a + 20 * PAGE, 0, z));
    cr_assert_eq(rtree_lookup(a + 20 * PAGE), 0);
    /* The last page of the leaf. */
    cr_assert(rtree_write_range(a + 63 * PAGE, PAGE, z));
    cr_assert_eq(rtree_lookup(a + 63 * PAGE), z);
    cr_assert_eq(rtree_lookup(a + 62 * PAGE), 0);
    cr_assert_eq(rtree_lookup(a + 64 * PAGE), 0);
    rtree_write_range(a, 64 * PAGE, 0);
    munmap((void *)a, 64 * PAGE);
}

Test(rtree, never_written_and_out_of_range_addresses)
{
    /* Leaves nobody created, at random places of the upper half of the
     * 48-bit space (not mappable with 4-level paging). */
    uint64_t seed = 5;
    for (int i = 0; i < 1000; i++) {
        uintptr_t a = ((uintptr_t)1 << 47) + (tu_rand(&seed) % ((uintptr_t)1 << 47));
        cr_assert_eq(rtree_lookup(a), 0, "%#lx", (unsigned long)a);
    }
    /* Addresses at or above 2^48 never map, and cannot be written. */
    uintptr_t big[] = {VA_TOP, VA_TOP + PAGE, VA_TOP + GIB, (uintptr_t)1 << 56, UINTPTR_MAX,
                       UINTPTR_MAX - PAGE + 1, (uintptr_t)0xffff800000000000ull};
    for (size_t i = 0; i < MA_ARRAY_LEN(big); i++) {
        cr_assert_eq(rtree_lookup(big[i]), 0, "%#lx", (unsigned long)big[i]);
        cr_assert_null(rtree_elm_get(big[i]));
        cr_assert_eq(rtree_write(big[i], rtree_elm_make(fake_extent(1), 1, 0)), false);
        cr_assert_eq(rtree_lookup(big[i]), 0);
        cr_assert_eq(rtree_fast_lookup(big[i]), 0);
    }
    cr_assert_eq(rtree_write_range(VA_TOP, 4 * PAGE, rtree_elm_make(fake_extent(1), 1, 0)), false);
    /* The very top of the 48-bit space still works (a leaf like any other). */
    uintptr_t top = VA_TOP - PAGE;
    rtree_elm_t z = rtree_elm_make(fake_extent(77), 2, 0);
    cr_assert(rtree_write(top, z));
    cr_assert_eq(rtree_lookup(top), z);
    cr_assert_eq(rtree_lookup(top - PAGE), 0);
    rtree_write(top, 0);
    /* Page 0 and low addresses. */
    cr_assert_eq(rtree_lookup(0), 0);
    cr_assert_eq(rtree_lookup(PAGE), 0);
}

Test(rtree, never_written_pages_of_a_live_leaf_are_zero)
{
    uintptr_t a = reserve_across_boundary(16, 16);
    for (unsigned i = 0; i < 32; i += 3)
        rtree_write(a + i * PAGE, rtree_elm_make(fake_extent(i), i, 0));
    for (unsigned i = 0; i < 32; i++)
        cr_assert_eq(rtree_lookup(a + i * PAGE), i % 3 ? 0 : rtree_elm_make(fake_extent(i), i, 0));
    rtree_write_range(a, 32 * PAGE, 0);
    munmap((void *)a, 32 * PAGE);
}

/* ---------------------------------------------------------------------
 * The fast map.
 */

Test(rtree, fast_map_is_zero_for_unknown_pages)
{
    cr_assert_not_null(arena_get(0));
    cr_assert_gt(arenas[0]->fastmap.npages, 0, "the fast map could not be reserved");
    int on_stack;
    static int in_bss;
    uintptr_t others[] = {0,
                          PAGE,
                          (uintptr_t)&on_stack,
                          (uintptr_t)&in_bss,
                          (uintptr_t)&init_allocator,
                          (uintptr_t)arenas[0]->fastmap.map,
                          ((uintptr_t)1 << 47) - PAGE,
                          (uintptr_t)1 << 47,
                          VA_TOP,
                          UINTPTR_MAX};
    for (size_t i = 0; i < MA_ARRAY_LEN(others); i++) {
        cr_assert_eq(rtree_fast_lookup(others[i]), 0, "%#lx", (unsigned long)others[i]);
        cr_assert_eq(other_arena_lookup(others[i]), 0, "%#lx", (unsigned long)others[i]);
    }
    /* A page we mapped ourselves. */
    void *m = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(m, MAP_FAILED);
    for (unsigned i = 0; i < 4; i++)
        cr_assert_eq(rtree_fast_lookup((uintptr_t)m + i * PAGE), 0);
    munmap(m, 4 * PAGE);
}

/* Whether the fast map carries class ind (cache_bin.h: classes whose size
 * does not fit 16 bits are never on free's fast path). */
static unsigned fast_value(unsigned ind) { return sc_index2size(ind) <= UINT16_MAX ? ind + 1 : 0; }

/* What the other arenas' fast maps hold for a live slab of class ind: ind
 * + 1 when its regions are whole cache lines (so a thread of any arena may
 * cache them), else 0. */
static unsigned line_value(unsigned ind)
{
    size_t usize = sc_index2size(ind);
    return usize % 64 == 0 ? fast_value(ind) : 0;
}

/* An arena made after the slabs marks those of whole-line classes in its
 * map all the same (extent.c, fastmap_backfill). */
Test(rtree, fast_map_for_live_slabs_after_malloc)
{
    size_t sizes[] = {1, QUANTUM, 3 * QUANTUM, 100, 1000, 4000, SC_SMALL_MAXCLASS / 2, SC_SMALL_MAXCLASS};
    void *keep[MA_ARRAY_LEN(sizes)];
    for (size_t i = 0; i < MA_ARRAY_LEN(sizes); i++) {
        void *p = malloc(sizes[i]);
        keep[i] = p;
        unsigned ind = sc_size2index(sizes[i]);
        cr_assert_lt(ind, SC_NBINS);
        cr_assert_eq(rtree_fast_lookup((uintptr_t)p), fast_value(ind), "malloc(%zu) = %p: fast map %lu",
                     sizes[i], p, (unsigned long)rtree_fast_lookup((uintptr_t)p));
        /* Every page of its slab, and the radix tree agrees. */
        rtree_elm_t elm = rtree_lookup((uintptr_t)p);
        cr_assert(elm & RTREE_SLAB);
        cr_assert_eq(rtree_elm_szind(elm), ind);
        extent_t *e = rtree_elm_extent(elm);
        cr_assert_not_null(e);
        /* (A bin's first slabs may be of the class's small geometry.) */
        cr_assert_eq(e->size, (size_t)(e->slab_small ? sc_bin_info[ind].small_pages : sc_bin_info[ind].slab_pages) * PAGE);
        for (uintptr_t a = e->addr; a < e->addr + e->size; a += PAGE) {
            cr_assert_eq(rtree_fast_lookup(a), fast_value(ind));
            cr_assert_eq(other_arena_lookup(a), line_value(ind), "malloc(%zu): another arena's map", sizes[i]);
            cr_assert_eq(rtree_lookup(a), elm, "every page of a slab maps to it");
        }
    }
    unsigned fresh = 1;
    while (ma_load_acquire(&arenas[fresh]) != NULL)
        fresh++;
    cr_assert_not_null(arena_get(fresh));
    for (size_t i = 0; i < MA_ARRAY_LEN(sizes); i++) {
        unsigned ind = sc_size2index(sizes[i]);
        cr_assert_eq(rtree_fastmap_lookup(&arenas[fresh]->fastmap, (uintptr_t)keep[i]), line_value(ind),
                     "malloc(%zu): the map of arena %u, made after it", sizes[i], fresh);
    }
    /* Large objects are never on the fast map. */
    size_t large[] = {SC_LARGE_MINCLASS, 3 * SC_LARGE_MINCLASS, (size_t)8 << 20};
    for (size_t i = 0; i < MA_ARRAY_LEN(large); i++) {
        char *p = malloc(large[i]);
        for (size_t off = 0; off < large[i]; off += PAGE)
            cr_assert_eq(rtree_fast_lookup((uintptr_t)p + off), 0);
        rtree_elm_t elm = rtree_lookup((uintptr_t)p);
        cr_assert_eq(elm & RTREE_SLAB, 0);
        cr_assert_eq(rtree_elm_szind(elm), sc_size2index(large[i]));
        free(p);
    }
    for (size_t i = 0; i < MA_ARRAY_LEN(sizes); i++)
        free(keep[i]);
}

/* The fallback covers the first power of two of bytes past four times the
 * highest address in use (at least 4 GiB), and nothing when that would be
 * past 2^38: where mappings live high, a map of the low addresses would
 * cover none of them. */
Test(rtree, fast_map_fallback_covers_four_times_the_memory_in_use)
{
    const uintptr_t G = (uintptr_t)1 << 30;
    struct {
        uintptr_t in_use, bytes;
    } cases[] = {
        {0, 4 * G},        {PAGE, 4 * G},       {G - 1, 4 * G},      {G, 8 * G},
        {16 * G, 128 * G}, {60 * G, 256 * G},   {64 * G - 1, 256 * G}, {64 * G, 0},
        {(uintptr_t)0x7f0000000000, 0},         {UINTPTR_MAX, 0},
    };
    for (size_t i = 0; i < MA_ARRAY_LEN(cases); i++)
        cr_assert_eq(rtree_fastmap_fallback_pages(cases[i].in_use), cases[i].bytes >> LG_PAGE, "in use %#lx: %lu pages",
                     (unsigned long)cases[i].in_use, (unsigned long)rtree_fastmap_fallback_pages(cases[i].in_use));
}

/* Under an address-space limit the map of the whole space cannot be had:
 * a map whose record lies in the low addresses (as everything does under
 * valgrind) gets a map of those, which marks slabs like the whole one; one
 * whose record lies high gets none. */
Test(rtree, fast_map_falls_back_to_the_low_addresses_when_the_whole_space_cannot_be_reserved)
{
    void *low = mmap((void *)((uintptr_t)1 << 28), PAGE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (low == MAP_FAILED || low != (void *)((uintptr_t)1 << 28))
        cr_skip_test("no page at 256 MiB to put the map's record in");
    rtree_fastmap_t *fm_low = low;
    static rtree_fastmap_t fm_high;
    /* The maps reserved together at boot are used up first: the maps below
     * must be reservations of their own (made under the limit). */
    static rtree_fastmap_t taken[ARENA_FASTMAPS_TOGETHER];
    for (unsigned i = 0; i < ARENA_FASTMAPS_TOGETHER; i++)
        rtree_fastmap_init(&taken[i]);
    struct rlimit lim;
    cr_assert_eq(getrlimit(RLIMIT_AS, &lim), 0);
    size_t vm = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    cr_assert_not_null(f);
    cr_assert_eq(fscanf(f, "%zu", &vm), 1);
    fclose(f);
    rlim_t want = vm * (size_t)sysconf(_SC_PAGESIZE) + ((size_t)256 << 20); /* room for 256 MiB more */
    if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur <= want)
        cr_skip_test("an address-space limit is already set (%lu bytes)", (unsigned long)lim.rlim_cur);
    lim.rlim_cur = want;
    cr_assert_eq(setrlimit(RLIMIT_AS, &lim), 0);

    rtree_fastmap_init(&fm_high);
    cr_assert_eq(fm_high.npages, 0, "a map of the low addresses for a record at %p", (void *)&fm_high);
    rtree_fastmap_init(fm_low);
    cr_assert_eq(fm_low->npages, rtree_fastmap_fallback_pages((uintptr_t)fm_low));
    cr_assert_eq(fm_low->npages, ((uintptr_t)4 << 30) >> LG_PAGE, "%lu pages", (unsigned long)fm_low->npages);
    /* It works as a map: what is written reads back, up to its end. */
    uintptr_t a = ((uintptr_t)3 << 30) + 5 * PAGE, last = (fm_low->npages - 1) << LG_PAGE;
    rtree_fastmap_write(fm_low, a, 2 * PAGE, 7);
    rtree_fastmap_write(fm_low, last, PAGE, 9);
    cr_assert_eq(rtree_fastmap_lookup(fm_low, a), 7);
    cr_assert_eq(rtree_fastmap_lookup(fm_low, a + PAGE), 7);
    cr_assert_eq(rtree_fastmap_lookup(fm_low, a + 2 * PAGE), 0);
    cr_assert_eq(rtree_fastmap_lookup(fm_low, last), 9);
    cr_assert_eq(rtree_fastmap_lookup(fm_low, last + PAGE), 0, "past the map");
}

Test(rtree, fast_map_through_the_extent_layer)
{
    static extent_pool_t pool;
    static rtree_fastmap_t fm;
    extent_pool_init(&pool, ARENAS_MAX - 1, false);
    rtree_fastmap_init(&fm);
    cr_assert_gt(fm.npages, 0, "the fast map could not be reserved");
    pool.fastmap = &fm; /* as arena_init does for an arena's pool */
    for (unsigned ind = 0; ind < SC_NBINS; ind++) {
        size_t size = (size_t)sc_bin_info[ind].slab_pages * PAGE;
        bool zeroed;
        extent_t *e = extent_alloc(&pool, size, PAGE, ind, true, &zeroed);
        cr_assert_not_null(e);
        for (uintptr_t a = e->addr; a < e->addr + size; a += PAGE) {
            cr_assert_eq(rtree_fastmap_lookup(&fm, a), fast_value(ind), "bin %u", ind);
            cr_assert_eq(rtree_fast_lookup(a), line_value(ind), "bin %u (%zu B): arenas' maps %lu", ind,
                         sc_index2size(ind), (unsigned long)rtree_fast_lookup(a));
        }
        uintptr_t addr = e->addr;
        extent_dalloc(&pool, e);
        for (uintptr_t a = addr; a < addr + size; a += PAGE) {
            cr_assert_eq(rtree_fastmap_lookup(&fm, a), 0, "bin %u: freed slab still on the fast map", ind);
            cr_assert_eq(rtree_fast_lookup(a), 0, "bin %u: freed slab still on an arena's map", ind);
            cr_assert_eq(rtree_lookup(a) & RTREE_SLAB, 0);
        }
    }
    /* A large extent: never on the fast map. */
    bool zeroed;
    extent_t *e = extent_alloc(&pool, 8 * PAGE, PAGE, sc_size2index(8 * PAGE), false, &zeroed);
    for (uintptr_t a = e->addr; a < e->addr + e->size; a += PAGE) {
        cr_assert_eq(rtree_fastmap_lookup(&fm, a), 0);
        cr_assert_eq(rtree_fast_lookup(a), 0);
    }
    extent_dalloc(&pool, e);
}

/* One slab of class ind holding only objects allocated here, freed: off
 * every arena's map. */
static void slab_freed_through_the_bins(unsigned ind)
{
    unsigned nregs = sc_bin_info[ind].nregs;
    /* Allocate until one slab holds only our objects and is not its bin's
     * current slab (earlier users of the bin may own parts of older slabs). */
    unsigned max = 64 * nregs + 64;
    size_t usize = sc_index2size(ind);
    void **ps = malloc(max * sizeof(void *));
    extent_t **ex = malloc(max * sizeof(extent_t *));
    extent_t *mine = NULL;
    unsigned n = 0;
    while (mine == NULL && n < max) {
        ps[n] = malloc(usize);
        ex[n] = rtree_elm_extent(rtree_lookup((uintptr_t)ps[n]));
        n++;
        for (unsigned i = 0; i < n && mine == NULL; i++) {
            extent_t *e = ex[i];
            if (e->nfree != 0 || e == arenas[e->arena_ind]->bins[ind].slabcur)
                continue;
            unsigned cnt = 0;
            for (unsigned j = 0; j < n; j++)
                cnt += ex[j] == e;
            if (cnt == nregs)
                mine = e;
        }
    }
    cr_assert_not_null(mine, "no slab of our own after %u allocations", n);
    uintptr_t addr = mine->addr;
    size_t size = mine->size;
    unsigned aind = mine->arena_ind;
    for (uintptr_t p = addr; p < addr + size; p += PAGE) {
        cr_assert_eq(rtree_fast_lookup(p), fast_value(ind));
        cr_assert_eq(other_arena_lookup(p), line_value(ind));
    }
    /* Free every region of that slab. */
    unsigned freed = 0;
    for (unsigned i = 0; i < n; i++) {
        if (ex[i] == mine) {
            free(ps[i]);
            ps[i] = NULL;
            freed++;
        }
    }
    cr_assert_eq(freed, nregs);
    /* Its bin may keep it, empty, for the next fills (bin_t): still a slab
     * of its arena then, on the maps. A purge of the arena gives it back. */
    arena_purge(arenas[aind]);
    for (uintptr_t p = addr; p < addr + size; p += PAGE) {
        cr_assert_eq(rtree_fast_lookup(p), 0, "page %#lx of a freed slab", (unsigned long)p);
        cr_assert_eq(other_arena_lookup(p), 0, "page %#lx of a freed slab: on another arena's map", (unsigned long)p);
        cr_assert_eq(rtree_lookup(p) & RTREE_SLAB, 0);
    }
    for (unsigned i = 0; i < n; i++)
        free(ps[i]);
    free(ps);
    free(ex);
}

Test(rtree, fast_map_after_a_slab_is_freed_through_the_bins)
{
    /* The thread cache off, so every free reaches the bin at once. */
    tsd_t *tsd = tsd_fetch();
    tcache_set_enabled(tsd, false);
    slab_freed_through_the_bins(sc_size2index(100));    /* shares lines with neighbours */
    slab_freed_through_the_bins(sc_size2index(2 * 64)); /* whole lines: on other arenas' maps too */
    tcache_set_enabled(tsd, true);
}

/* The first arenas' fast maps are one reservation (rtree_fastmap_plan), so
 * the chunks their pools map after it lie together and every map covers
 * them all with a page or two. Reserved one by one, each map went between
 * the chunks of the arenas before and after it, 32 GiB apart: every map
 * wrote a page for each arena's chunks where it marks their whole-line
 * slabs (prodcons 8+8: 66 map pages, 264 KiB; 13 with the block). */
Test(rtree, the_first_arenas_chunks_lie_within_two_pages_of_every_fast_map)
{
    /* Arenas of the block: 4 x CPUs of them are planned, at least 4. */
    const unsigned N = MA_MIN(4u, arena_narenas);
    cr_assert_geq(N, 2, "%u arenas", arena_narenas);
    const size_t big = (size_t)4 << 20; /* more than any pool holds free: a chunk of its own */
    void *p[4];
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (unsigned i = 0; i < N; i++) {
        arena_t *a = arena_get(i);
        cr_assert_not_null(a);
        p[i] = arena_malloc_large(a, big, PAGE, false);
        cr_assert_not_null(p[i]);
        extent_t *e = rtree_elm_extent(rtree_lookup((uintptr_t)p[i]));
        cr_assert_eq(e->pool, &a->pool, "arena %u's object is another pool's", i);
        lo = MA_MIN(lo, (uintptr_t)p[i]);
        hi = MA_MAX(hi, (uintptr_t)p[i] + big - 1);
    }
    /* A map page covers 2^LG_PAGE pages. */
    uintptr_t pages = (hi >> (2 * LG_PAGE)) - (lo >> (2 * LG_PAGE)) + 1;
    cr_assert_leq(pages, 2, "the chunks of %u arenas span %#lx-%#lx: %lu pages of each fast map", N,
                  (unsigned long)lo, (unsigned long)hi, (unsigned long)pages);
    for (unsigned i = 0; i < N; i++)
        arena_dalloc_large(rtree_elm_extent(rtree_lookup((uintptr_t)p[i])));
}

/* A page-map leaf (2 MiB, one per GiB of address space in use) is written
 * only where it describes memory: one page for a 2 MiB chunk, aligned. It
 * was three: the metadata block's record on the leaf's first page, and the
 * chunk's 512 entries across two pages (the leaf began 64 bytes into its
 * block). */
Test(rtree, a_leaf_writes_one_page_for_a_chunk)
{
    uint64_t seed = 99;
    uintptr_t g = 0;
    for (int tries = 0; tries < 200 && g == 0; tries++) {
        uintptr_t c = random_gib(&seed);
        if (rtree_root[c >> RTREE_LG_LEAF_SPAN] == NULL && reserve(c, GIB))
            g = c;
    }
    cr_assert_neq(g, 0, "no GiB of address space free of the page map");
    const size_t chunk = (size_t)2 << 20, os_page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t c = g + 21 * chunk;
    cr_assert(rtree_write_range(c, chunk, rtree_elm_make(fake_extent(7), 2, RTREE_SLAB)));
    rtree_elm_t *leaf = rtree_root[g >> RTREE_LG_LEAF_SPAN];
    cr_assert_not_null(leaf);
    size_t n = RTREE_LEAF_N * sizeof(rtree_elm_t) / os_page, resident = 0;
    unsigned char *vec = malloc(n);
    cr_assert_eq(mincore(leaf, n * os_page, vec), 0);
    for (size_t i = 0; i < n; i++)
        resident += vec[i] & 1;
    free(vec);
    size_t want = MA_MAX(chunk / PAGE * sizeof(rtree_elm_t) / os_page, 1);
    cr_assert_eq(resident, want, "%zu pages of the leaf resident for one 2 MiB chunk", resident);
    cr_assert(rtree_write_range(c, chunk, 0));
    munmap((void *)g, GIB);
}
