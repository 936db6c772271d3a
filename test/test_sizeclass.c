/*
 * Size classes: the generated tables and the size <-> class conversions,
 * checked against an independent recomputation of the scheme from
 * SC_LG_QUANTUM, SC_LG_NGROUP and SC_LG_PAGE (make unit runs this file in
 * two configurations).
 *
 *   first group:  Q, 2Q, ..., NGROUP*Q
 *   then, for each doubling 2^lg_base < size <= 2^(lg_base+1), NGROUP
 *   classes spaced 2^(lg_base - LG_NGROUP):
 *       size = 2^lg_base + ndelta * 2^lg_delta,  ndelta = 1..NGROUP
 *   up to the largest such size that is a valid C object size (<= PTRDIFF_MAX).
 */
#include <stdint.h>

#include "myalloc.h"
#include "sizeclass/sizeclass.h"
#include "test_util.h"

#define NGROUP ((size_t)1 << SC_LG_NGROUP)

/* The lookup table's bin offset of class i: the byte offset of its cache
 * bin (test_tcache checks it against the thread cache's layout). */
#ifdef SC_LOOKUP_BIN_LG
#define BIN_OFF(i) ((unsigned)(i) << SC_LOOKUP_BIN_LG)
#else
#define BIN_OFF(i) ((unsigned)(i) * 16)
#endif
#define MAXCLS 2048

typedef struct {
    unsigned lg_base, lg_delta, ndelta;
    size_t size;
} ref_cls_t;

static ref_cls_t ref[MAXCLS];
static unsigned nref;

/* Recompute the classes without looking at any table. */
static void ref_build(void)
{
    nref = 0;
    const unsigned lg_q = SC_LG_QUANTUM;
    for (size_t i = 0; i < NGROUP; i++)
        ref[nref++] = (ref_cls_t){lg_q, lg_q, (unsigned)i, ((size_t)1 << lg_q) * (i + 1)};
    for (unsigned lg_base = lg_q + SC_LG_NGROUP; lg_base < 63; lg_base++) {
        unsigned lg_delta = lg_base - SC_LG_NGROUP;
        for (size_t nd = 1; nd <= NGROUP; nd++) {
            /* 2^lg_base + nd * 2^lg_delta, computed without overflow. */
            unsigned __int128 s = ((unsigned __int128)1 << lg_base) + ((unsigned __int128)nd << lg_delta);
            if (s > (unsigned __int128)PTRDIFF_MAX)
                return;
            cr_assert_lt(nref, MAXCLS);
            ref[nref++] = (ref_cls_t){lg_base, lg_delta, (unsigned)nd, (size_t)s};
        }
    }
}

/* Smallest reference class >= size (size <= largest class). */
static unsigned ref_ceil(size_t size)
{
    unsigned lo = 0, hi = nref - 1;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (ref[mid].size >= size)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Largest reference class <= size (size >= smallest class). */
static unsigned ref_floor(size_t size)
{
    unsigned i = ref_ceil(size);
    if (ref[i].size > size)
        i--;
    return i;
}

static void setup(void) { ref_build(); }

TestSuite(sizeclass, .init = setup);

Test(sizeclass, configuration_macros_are_consistent)
{
    cr_assert_eq(PAGE, (size_t)1 << SC_LG_PAGE);
    cr_assert_eq(QUANTUM, (size_t)1 << SC_LG_QUANTUM);
    cr_assert_eq(LG_PAGE, SC_LG_PAGE);
    cr_assert_geq(QUANTUM, 16, "every pointer must be 16-byte aligned");
    cr_assert_eq(SC_NSIZES, nref, "SC_NSIZES %d, scheme gives %u classes", SC_NSIZES, nref);
    cr_assert_eq(SC_LARGE_MAXCLASS, ref[nref - 1].size);
    cr_assert_leq(SC_LARGE_MAXCLASS, (size_t)PTRDIFF_MAX);
    cr_assert_eq(SC_LOOKUP_NENTRIES, (int)(SC_LOOKUP_MAXCLASS >> SC_LG_QUANTUM) + 1);
    unsigned nlookup = 0;
    while (nlookup < nref && ref[nlookup].size <= SC_LOOKUP_MAXCLASS)
        nlookup++;
    cr_assert_eq(SC_NLOOKUP_CLASSES, nlookup);
}

Test(sizeclass, every_class_matches_the_formula)
{
    for (unsigned i = 0; i < nref; i++) {
        size_t s = sc_index2size(i);
        cr_assert_eq(s, ref[i].size, "class %u: table %zu, scheme %zu", i, s, ref[i].size);
        cr_assert_eq(sc_index2size_tab[i], s);
        /* The formula table: the same class, written as jemalloc writes it. */
        const sc_formula_t *f = &sc_formula_tab[i];
        unsigned __int128 v = ((unsigned __int128)1 << f->lg_base) + ((unsigned __int128)f->ndelta << f->lg_delta);
        cr_assert(v == (unsigned __int128)s, "class %u (%zu): formula {%u,%u,%u}", i, s, f->lg_base,
                  f->lg_delta, f->ndelta);
        cr_assert_eq(f->lg_base, ref[i].lg_base, "class %u lg_base", i);
        cr_assert_eq(f->lg_delta, ref[i].lg_delta, "class %u lg_delta", i);
        cr_assert_eq(f->ndelta, ref[i].ndelta, "class %u ndelta", i);
        if (i >= NGROUP) {
            /* 2^lg_base < size <= 2^(lg_base+1), NGROUP steps of 2^lg_delta */
            cr_assert_eq(f->lg_delta, f->lg_base - SC_LG_NGROUP);
            cr_assert(f->ndelta >= 1 && f->ndelta <= NGROUP);
            cr_assert_gt(s, (size_t)1 << f->lg_base);
            cr_assert(f->lg_base >= 62 || s <= (size_t)1 << (f->lg_base + 1));
        } else {
            cr_assert_eq(s, QUANTUM * (i + 1), "first group is Q, 2Q, ..., NGROUP*Q");
        }
        cr_assert_eq(s % QUANTUM, 0, "class %zu is not a multiple of the quantum", s);
    }
}

Test(sizeclass, classes_strictly_increase_and_the_spacing_is_right)
{
    for (unsigned i = 1; i < SC_NSIZES; i++) {
        size_t a = sc_index2size(i - 1), b = sc_index2size(i);
        cr_assert_gt(b, a, "class %u (%zu) <= class %u (%zu)", i, b, i - 1, a);
        /* The step is QUANTUM in the first group, else 2^lg_base / NGROUP. */
        size_t step = i < NGROUP ? QUANTUM : ((size_t)1 << ma_lg_floor(b - 1)) >> SC_LG_NGROUP;
        cr_assert_eq(b - a, step, "step from %zu to %zu", a, b);
    }
}

/* Small: below 2^(LG_PAGE + LG_NGROUP) (jemalloc's bound, 4 pages by
 * default) or up to 32 KiB, whichever reaches further; large classes are
 * whole pages. */
static bool is_small_size(size_t s)
{
    return s < ((size_t)1 << (SC_LG_PAGE + SC_LG_NGROUP)) || s <= ((size_t)32 << 10);
}

Test(sizeclass, small_classes_reach_32k_or_ngroup_pages_and_large_are_page_multiples)
{
    for (unsigned i = 0; i < SC_NSIZES; i++) {
        size_t s = sc_index2size(i);
        if (i < SC_NBINS)
            cr_assert(is_small_size(s), "small class %u = %zu", i, s);
        else {
            cr_assert(!is_small_size(s), "large class %u = %zu", i, s);
            cr_assert_eq(s % PAGE, 0, "large class %zu is not a multiple of PAGE", s);
        }
    }
    cr_assert_eq(SC_SMALL_MAXCLASS, sc_index2size(SC_NBINS - 1));
    cr_assert_eq(SC_LARGE_MINCLASS, sc_index2size(SC_NBINS));
    cr_assert_eq(sc_usize_by_ind1[0], 0);
    for (unsigned i = 0; i < SC_NBINS; i++)
        cr_assert_eq(sc_usize_by_ind1[i + 1], sc_index2size(i));
}

/* One size: every conversion agrees with the reference. */
static void check_size(size_t size)
{
    unsigned want = ref_ceil(size);
    unsigned got = sc_size2index(size);
    cr_assert_eq(got, want, "sc_size2index(%zu) = %u (%zu), want %u (%zu)", size, got,
                 got < SC_NSIZES ? sc_index2size(got) : 0, want, ref[want].size);
    unsigned comp = sc_size2index_compute(size);
    cr_assert_eq(comp, want, "sc_size2index_compute(%zu) = %u, want %u", size, comp, want);
    cr_assert_eq(sc_s2u(size), ref[want].size, "sc_s2u(%zu)", size);
    if (size <= SC_LOOKUP_MAXCLASS) {
        const sc_lookup_t *lk = sc_lookup(size);
        cr_assert_eq(lk, &sc_lookup_tab[(size + QUANTUM - 1) >> SC_LG_QUANTUM]);
        cr_assert_eq(lk->usize, ref[want].size, "lookup usize for %zu", size);
        cr_assert_eq(lk->bin_off, BIN_OFF(want), "lookup bin_off for %zu = %u, want %u", size,
                     lk->bin_off, BIN_OFF(want));
        cr_assert_eq(sc_size2index_lookup(size), want);
    }
    if (size >= ref[0].size) {
        unsigned fl = sc_size2index_floor(size);
        cr_assert_eq(fl, ref_floor(size), "sc_size2index_floor(%zu) = %u, want %u", size, fl,
                     ref_floor(size));
    }
}

Test(sizeclass, every_size_up_to_the_lookup_limit)
{
    for (size_t s = 0; s <= SC_LOOKUP_MAXCLASS; s++)
        check_size(s);
    /* Every lookup entry, including those no size reaches exactly. */
    for (unsigned j = 0; j < SC_LOOKUP_NENTRIES; j++) {
        size_t s = (size_t)j << SC_LG_QUANTUM;
        cr_assert_eq(sc_lookup_tab[j].usize, ref[ref_ceil(s)].size, "entry %u", j);
        cr_assert_eq(sc_lookup_tab[j].bin_off, BIN_OFF(ref_ceil(s)), "entry %u", j);
    }
}

Test(sizeclass, boundaries_and_random_sizes_up_to_the_largest_class)
{
    uint64_t seed = 0x5eedULL + SC_LG_PAGE;
    for (unsigned i = 0; i < SC_NSIZES; i++) {
        size_t c = sc_index2size(i);
        check_size(c - 1);
        check_size(c);
        if (c < SC_LARGE_MAXCLASS)
            check_size(c + 1);
        /* Random sizes between this class and the previous one. */
        size_t prev = i == 0 ? 0 : sc_index2size(i - 1);
        for (int k = 0; k < 8; k++)
            check_size(prev + 1 + tu_rand(&seed) % (c - prev));
    }
    /* Powers of two and their neighbours (sizes programs like). */
    for (unsigned lg = 0; lg < 63; lg++) {
        size_t p = (size_t)1 << lg;
        if (p <= SC_LARGE_MAXCLASS)
            check_size(p);
        if (p - 1 <= SC_LARGE_MAXCLASS)
            check_size(p - 1);
        if (p + 1 <= SC_LARGE_MAXCLASS)
            check_size(p + 1);
    }
    check_size(SC_LARGE_MAXCLASS);
    check_size(SC_LARGE_MAXCLASS - 1);
    /* Beyond the largest class: impossible. */
    cr_assert_eq(sc_s2u(SC_LARGE_MAXCLASS + 1), 0);
    cr_assert_eq(sc_s2u(SIZE_MAX), 0);
    cr_assert_eq(sc_s2u((size_t)PTRDIFF_MAX + 1), 0);
}

/* Whether a region of class usize can be handed out aligned to align. */
static bool servable(size_t usize, size_t align)
{
    if (usize <= SC_SMALL_MAXCLASS)
        /* Slabs are page aligned and regions sit at multiples of usize. */
        return align <= PAGE && usize % align == 0;
    return usize >= SC_LARGE_MINCLASS && usize % PAGE == 0; /* page runs aligned as asked */
}

static void check_sa2u(size_t size, size_t align)
{
    size_t u = sc_sa2u(size, align);
    if (size > SC_LARGE_MAXCLASS) {
        cr_assert_eq(u, 0, "sc_sa2u(%zu, %zu) = %zu for an impossible size", size, align, u);
        return;
    }
    cr_assert_neq(u, 0, "sc_sa2u(%zu, %zu) = 0", size, align);
    cr_assert_geq(u, size, "sc_sa2u(%zu, %zu) = %zu", size, align, u);
    cr_assert_eq(sc_s2u(u), u, "sc_sa2u(%zu, %zu) = %zu is not a class", size, align, u);
    cr_assert(servable(u, align), "sc_sa2u(%zu, %zu) = %zu: a region of that class is not %zu-aligned",
              size, align, u, align);
    /* And it is the smallest class that works. */
    unsigned i = ref_ceil(size);
    while (!servable(ref[i].size, align))
        i++;
    cr_assert_eq(u, ref[i].size, "sc_sa2u(%zu, %zu) = %zu, smallest servable class is %zu", size,
                 align, u, ref[i].size);
}

Test(sizeclass, sa2u_gives_a_class_that_serves_the_alignment)
{
    size_t sizes[512];
    unsigned n = 0;
    /* Size 0 has its own test below. */
    sizes[n++] = 1;
    for (unsigned i = 0; i < SC_NSIZES && n + 3 <= 400; i++) {
        size_t c = sc_index2size(i);
        if (c > 64 * SC_LARGE_MINCLASS && i + 1 < SC_NSIZES && i % 7 != 0)
            continue;
        sizes[n++] = c - 1;
        sizes[n++] = c;
        sizes[n++] = c + 1;
    }
    uint64_t seed = 77;
    while (n < 500)
        sizes[n++] = (size_t)(tu_rand(&seed) % (4 * SC_LARGE_MINCLASS)) + 1;
    sizes[n++] = SC_LARGE_MAXCLASS;
    sizes[n++] = SC_LARGE_MAXCLASS + 1;
    for (unsigned k = 0; k < n; k++)
        for (unsigned lg = 0; lg <= 40; lg++)
            check_sa2u(sizes[k], (size_t)1 << lg);
}

Test(sizeclass, sa2u_of_size_zero_is_aligned)
{
    /* A zero-byte request with an alignment is a valid request (posix_memalign,
     * aligned_alloc) and must come back aligned like any other. */
    for (unsigned lg = 0; lg <= SC_LG_PAGE + 2; lg++) {
        size_t a = (size_t)1 << lg;
        size_t u = sc_sa2u(0, a);
        cr_assert_neq(u, 0);
        cr_assert(servable(u, a), "sc_sa2u(0, %zu) = %zu, which a %zu-aligned request cannot use", a,
                  u, a);
    }
}

Test(sizeclass, aligned_zero_byte_requests_are_aligned_end_to_end)
{
    /* The end-to-end consequence of sa2u for size 0. */
    for (unsigned lg = 5; lg <= SC_LG_PAGE; lg++) {
        size_t a = (size_t)1 << lg;
        void *ps[64];
        for (int i = 0; i < 64; i++) {
            ps[i] = NULL;
            cr_assert_eq(posix_memalign(&ps[i], a, 0), 0);
        }
        for (int i = 0; i < 64; i++)
            cr_assert_eq((uintptr_t)ps[i] % a, 0, "posix_memalign(align=%zu, size=0) = %p", a, ps[i]);
        for (int i = 0; i < 64; i++)
            free(ps[i]);
        void *p = aligned_alloc(a, 0);
        void *q = aligned_alloc(a, 0);
        cr_assert_not_null(p);
        cr_assert_eq((uintptr_t)p % a, 0, "aligned_alloc(%zu, 0) = %p", a, p);
        cr_assert_eq((uintptr_t)q % a, 0, "aligned_alloc(%zu, 0) = %p", a, q);
        free(p);
        free(q);
    }
}

Test(sizeclass, slab_geometry_per_bin)
{
    unsigned maxregs = 0, maxpages = 0;
    for (unsigned b = 0; b < SC_NBINS; b++) {
        const sc_bin_info_t *bi = &sc_bin_info[b];
        size_t reg = bi->reg_size;
        cr_assert_eq(reg, sc_index2size(b), "bin %u region size", b);
        /* The fewest pages whose tail (the bytes after the last whole
         * region) is at most 1/64 of the slab; for classes past jemalloc's
         * small ones (from 2^(LG_PAGE + LG_NGROUP)), times the smallest k
         * that makes at least 4 regions while the slab stays within 128 KiB
         * (k = 1 when even 2 would not). */
        unsigned pages = 1;
        while ((pages * PAGE) % reg * 64 > pages * PAGE)
            pages++;
        unsigned regs = (unsigned)(pages * PAGE / reg), grow = 1;
        bool extended = reg >= ((size_t)1 << (SC_LG_PAGE + SC_LG_NGROUP));
        while (extended && regs * grow < 4 && (size_t)pages * (grow + 1) * PAGE <= ((size_t)128 << 10))
            grow++;
        pages *= grow;
        cr_assert_eq(bi->slab_pages, pages, "bin %u (%zu): slab_pages %u, expected %u", b, reg,
                     bi->slab_pages, pages);
        size_t slab = (size_t)bi->slab_pages * PAGE;
        cr_assert_eq(bi->nregs, slab / reg, "bin %u: as many regions as fit", b);
        cr_assert_leq((slab - (size_t)bi->nregs * reg) * 64, slab, "bin %u: tail within 1/64", b);
        cr_assert_geq(bi->nregs, 1);
        /* Multiply-shift index: exact for every region offset. */
        for (uint64_t k = 0; k < bi->nregs; k++) {
            uint64_t off = k * reg;
            uint64_t idx = (off * bi->div_magic) >> 32;
            cr_assert_eq(idx, k, "bin %u (%zu): offset %llu gives %llu", b, reg,
                         (unsigned long long)off, (unsigned long long)idx);
        }
        maxregs = MA_MAX(maxregs, bi->nregs);
        maxpages = MA_MAX(maxpages, bi->slab_pages);
    }
    cr_assert_eq(maxregs, SC_SLAB_MAXREGS);
    cr_assert_eq(maxpages, SC_SLAB_MAXPAGES);
}
