/*
 * Slabs (region bitmaps) for every bin, and the arena's bins: fills,
 * batched frees, statistics, slab lifetime and low-address preference.
 *
 * The bin tests use private arenas (indices no thread is bound to), so
 * their statistics move only with what the test does.
 */
#include "arena/arena.h"
#include "arena/slab.h"
#include "test_util.h"
#include "test_slab_util.h"

/* The fast maps are per arena: a page is on "the" fast map when any arena's
 * map marks it (each slab is marked only in its own arena's). */
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


#define AIND  (ARENAS_MAX - 3)
#define AIND2 (ARENAS_MAX - 4)

static void init_allocator(void) { free(malloc(1)); }

TestSuite(slab, .init = init_allocator);
TestSuite(bin, .init = init_allocator);

/* ---------------------------------------------------------------------
 * slab.h on a record with a made-up address (slab functions compute
 * addresses only; they never touch the slab's memory).
 */

static extent_t fake;

static void fake_slab(unsigned b)
{
    memset(&fake, 0, sizeof(fake));
    fake.addr = (uintptr_t)1 << 44;
    fake.size = (size_t)sc_bin_info[b].slab_pages * PAGE;
    fake.slab = true;
    fake.szind = (uint16_t)b;
    slab_init(&fake, b);
}

static unsigned popcount_bitmap(const extent_t *s)
{
    unsigned n = 0;
    for (unsigned w = 0; w < SLAB_BITMAP_WORDS; w++)
        n += (unsigned)__builtin_popcountll(s->bitmap[w]);
    return n;
}

Test(slab, init_and_allocate_every_region_lowest_first)
{
    unsigned batches[] = {1, 2, 3, 7, 64, 65, 1000};
    for (unsigned b = 0; b < SC_NBINS; b++) {
        const sc_bin_info_t *bi = &sc_bin_info[b];
        fake_slab(b);
        cr_assert_eq(fake.nfree, bi->nregs);
        cr_assert_eq(popcount_bitmap(&fake), bi->nregs, "bin %u: bits past nregs must be 0", b);
        void **out = malloc((bi->nregs + 1000) * sizeof(void *));
        unsigned got = 0, k = 0;
        while (fake.nfree > 0) {
            unsigned want = batches[k++ % MA_ARRAY_LEN(batches)];
            unsigned expect = MA_MIN(want, fake.nfree);
            unsigned g = slab_alloc_batch(&fake, b, out + got, want);
            cr_assert_eq(g, expect, "bin %u: batch of %u gave %u", b, want, g);
            got += g;
        }
        cr_assert_eq(got, bi->nregs);
        for (unsigned i = 0; i < got; i++)
            cr_assert_eq((uintptr_t)out[i], fake.addr + (uintptr_t)i * bi->reg_size,
                         "bin %u: region %u out of order", b, i);
        cr_assert_eq(popcount_bitmap(&fake), 0);
        cr_assert_eq(slab_alloc_batch(&fake, b, out, 5), 0, "a full slab gives nothing");
        free(out);
    }
}

Test(slab, region_index_exact_and_bogus_pointers)
{
    for (unsigned b = 0; b < SC_NBINS; b++) {
        const sc_bin_info_t *bi = &sc_bin_info[b];
        fake_slab(b);
        const uintptr_t base = fake.addr;
        const size_t reg = bi->reg_size;
        for (unsigned i = 0; i < bi->nregs; i++) {
            uintptr_t p = base + (uintptr_t)i * reg;
            cr_assert_eq(slab_region_index(&fake, b, (void *)p), (long)i, "bin %u region %u", b, i);
            /* Interior pointers. */
            uintptr_t in[] = {p + 1, p + 8, p + reg / 2, p + reg - 1, p + QUANTUM};
            for (size_t k = 0; k < MA_ARRAY_LEN(in); k++)
                if (in[k] != p && in[k] < p + reg)
                    cr_assert_eq(slab_region_index(&fake, b, (void *)in[k]), -1,
                                 "bin %u: interior pointer %#lx (region %u + %lu)", b,
                                 (unsigned long)in[k], i, (unsigned long)(in[k] - p));
        }
        /* Outside the slab, both sides. */
        uintptr_t out[] = {base - 1, base - reg, base - PAGE, base + fake.size, base + fake.size + reg,
                           base + fake.size - 1, 0, UINTPTR_MAX,
                           /* the start of the tail past the last region, and
                            * multiples of the region size far off */
                           base + (uintptr_t)bi->nregs * reg, base + ((uintptr_t)reg << 20),
                           base - ((uintptr_t)reg << 20), base + ((uintptr_t)reg << 32)};
        for (size_t k = 0; k < MA_ARRAY_LEN(out); k++)
            cr_assert_eq(slab_region_index(&fake, b, (void *)out[k]), -1, "bin %u: pointer %#lx", b,
                         (unsigned long)out[k]);
    }
}

Test(slab, free_region_and_double_free)
{
    uint64_t seed = 1;
    for (unsigned b = 0; b < SC_NBINS; b++) {
        const sc_bin_info_t *bi = &sc_bin_info[b];
        fake_slab(b);
        unsigned n = bi->nregs;
        void **out = malloc(n * sizeof(void *));
        unsigned *perm = malloc(n * sizeof(unsigned));
        cr_assert_eq(slab_alloc_batch(&fake, b, out, n), n);
        /* Free every region in random order; each second free is refused. */
        for (unsigned i = 0; i < n; i++)
            perm[i] = i;
        for (unsigned i = n - 1; i > 0; i--) {
            unsigned j = (unsigned)(tu_rand(&seed) % (i + 1));
            unsigned t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        for (unsigned i = 0; i < n; i++) {
            long idx = slab_region_index(&fake, b, out[perm[i]]);
            cr_assert_eq(idx, (long)perm[i]);
            cr_assert(slab_free_region(&fake, (unsigned)idx), "bin %u: first free of %u", b, perm[i]);
            cr_assert_eq(fake.nfree, i + 1);
            cr_assert_not(slab_free_region(&fake, (unsigned)idx), "bin %u: double free of %u accepted", b,
                          perm[i]);
            cr_assert_eq(fake.nfree, i + 1, "a refused double free must not count");
        }
        cr_assert_eq(popcount_bitmap(&fake), n);
        /* Everything free again: a refill is in address order. */
        cr_assert_eq(slab_alloc_batch(&fake, b, out, n), n);
        for (unsigned i = 0; i < n; i++)
            cr_assert_eq((uintptr_t)out[i], fake.addr + (uintptr_t)i * bi->reg_size);
        /* Free a random subset; a batch then takes the lowest free ones. */
        static bool isfree[8192];
        memset(isfree, 0, sizeof(isfree));
        unsigned nf = 0;
        for (unsigned i = 0; i < n; i++) {
            if (tu_rand(&seed) % 3 == 0) {
                cr_assert(slab_free_region(&fake, i));
                isfree[i] = true;
                nf++;
            }
        }
        unsigned take = nf / 2;
        cr_assert_eq(slab_alloc_batch(&fake, b, out, take), take);
        unsigned j = 0;
        for (unsigned i = 0; i < n && j < take; i++)
            if (isfree[i])
                cr_assert_eq((uintptr_t)out[j++], fake.addr + (uintptr_t)i * bi->reg_size,
                             "bin %u: batch must take the lowest free regions", b);
        cr_assert_eq(fake.nfree, nf - take);
        free(out);
        free(perm);
    }
}

/* ---------------------------------------------------------------------
 * Bins.
 */

/* On the stack, not malloc'ed: a malloc here could take pages from the
 * pool a test is counting (extent_pool_share). */
static void dalloc_all(unsigned b, void **ps, unsigned n)
{
    extent_t *sl[8 * SC_SLAB_MAXREGS];
    for (unsigned done = 0, k; done < n; done += k) {
        k = MA_MIN(n - done, 8 * SC_SLAB_MAXREGS);
        for (unsigned i = 0; i < k; i++)
            sl[i] = tu_slab_of(ps[done + i]);
        arena_dalloc_small_batch(b, ps + done, sl, k);
    }
}

/* Regions tu_bin_skip_small holds (static: see dalloc_all). */
enum { HELD_MAX = 4096 };
static void *held[HELD_MAX];

/* The regions of slab s among ps[0..n), moved to the front; returns how many. */
static unsigned partition_by_slab(void **ps, unsigned n, extent_t *s)
{
    unsigned k = 0;
    for (unsigned i = 0; i < n; i++) {
        if (tu_slab_of(ps[i]) == s) {
            void *t = ps[k];
            ps[k] = ps[i];
            ps[i] = t;
            k++;
        }
    }
    return k;
}

/* How many entirely free slabs bin b keeps (bin_t: BIN_EMPTY_BYTES, at
 * least one). */
static unsigned bin_empty_cap(unsigned b)
{
    size_t slab = (size_t)sc_bin_info[b].slab_pages * PAGE;
    return slab >= BIN_EMPTY_BYTES ? 1 : (unsigned)(BIN_EMPTY_BYTES / slab);
}

Test(bin, fill_and_batch_free_keep_stats_right)
{
    arena_t *a = arena_get(AIND);
    cr_assert_not_null(a);
    uint64_t seed = 3;
    for (unsigned b = 0; b < SC_NBINS; b++) {
        const sc_bin_info_t *bi = &sc_bin_info[b];
        bin_t *bin = &a->bins[b];
        unsigned nheld = tu_bin_skip_small(a, b, held, HELD_MAX);
        const bin_stats_t st0 = bin->stats;
        unsigned n = 2 * bi->nregs + 3;
        void **ps = malloc(n * sizeof(void *));
        /* Fill in a few calls of different sizes. */
        unsigned got = 0, nfills = 0;
        while (got < n) {
            unsigned r = 1 + (unsigned)(tu_rand(&seed) % (bi->nregs + 5));
            unsigned want = MA_MIN(n - got, r);
            cr_assert_eq(arena_fill_small(a, b, ps + got, want), want);
            got += want;
            nfills++;
        }
        unsigned nslabs = (n + bi->nregs - 1) / bi->nregs;
        cr_assert_eq(bin->stats.nmalloc - st0.nmalloc, n, "bin %u nmalloc %llu, want %u", b,
                     (unsigned long long)(bin->stats.nmalloc - st0.nmalloc), n);
        cr_assert_eq(bin->stats.curregs - st0.curregs, n, "bin %u curregs", b);
        cr_assert_eq(bin->stats.nfills - st0.nfills, nfills, "bin %u nfills", b);
        cr_assert_eq(bin->stats.ndalloc, 0);
        cr_assert_eq(bin->stats.nflushes, 0);
        cr_assert_eq(bin->stats.curslabs - st0.curslabs, nslabs, "bin %u curslabs %zu, want %u", b,
                     bin->stats.curslabs - st0.curslabs, nslabs);
        cr_assert_eq(bin->stats.nslabs - st0.nslabs, nslabs);
        /* Every region is usable, distinct and on a slab of this arena and class. */
        for (unsigned i = 0; i < n; i++) {
            extent_t *s = tu_slab_of(ps[i]);
            cr_assert_eq(s->arena_ind, AIND);
            cr_assert_eq(rtree_elm_szind(rtree_lookup((uintptr_t)ps[i])), b);
            cr_assert_geq(slab_region_index(s, b, ps[i]), 0);
            tu_fill(ps[i], bi->reg_size);
        }
        for (unsigned i = 0; i < n; i++)
            cr_assert(tu_check(ps[i], bi->reg_size), "bin %u: region %p overlaps another", b, ps[i]);
        /* Free in random batches, in random order. */
        for (unsigned i = n - 1; i > 0; i--) {
            unsigned j = (unsigned)(tu_rand(&seed) % (i + 1));
            void *t = ps[i];
            ps[i] = ps[j];
            ps[j] = t;
        }
        unsigned done = 0, nflushes = 0;
        while (done < n) {
            unsigned r = 1 + (unsigned)(tu_rand(&seed) % 50);
            unsigned k = MA_MIN(n - done, r);
            dalloc_all(b, ps + done, k);
            done += k;
            nflushes++;
            cr_assert_eq(bin->stats.curregs - st0.curregs, n - done);
            cr_assert_eq(bin->stats.ndalloc, done);
        }
        cr_assert_eq(bin->stats.nflushes, nflushes);
        cr_assert_eq(bin->stats.nmalloc - st0.nmalloc, n);
        cr_assert_eq(bin->stats.curregs, nheld);
        /* The current slab is kept, and the others emptied as far as
         * the bin keeps empty slabs. */
        unsigned nempty = MA_MIN(nslabs - 1, bin_empty_cap(b));
        cr_assert_eq(bin->nempty, nempty, "bin %u: %u empty slabs kept, want %u", b, bin->nempty, nempty);
        cr_assert_eq(bin->stats.curslabs - st0.curslabs, 1 + nempty, "bin %u: curslabs %zu", b,
                     bin->stats.curslabs);
        cr_assert_not_null(bin->slabcur);
        cr_assert_eq(bin->slabcur->nfree, bi->nregs);
        cr_assert_not(bin->slabcur->slab_small);
        dalloc_all(b, held, nheld);
        cr_assert_eq(bin->stats.curregs, 0);
        free(ps);
    }
}

/* A bin's first slabs are of its class's small geometry, while its slabs
 * take fewer pages than SLAB_SMALL_BIN_SLABS of the class's slabs; then
 * the class's own. Every region lies in its slab, none overlaps another,
 * the bin counts its pages, and a bin whose slabs went back starts small
 * again. */
Test(bin, a_bins_first_slabs_are_small_then_of_its_class)
{
    arena_t *a = arena_get(AIND);
    unsigned tested = 0;
    for (unsigned b = 0; b < SC_NBINS; b++) {
        const sc_bin_info_t *bi = &sc_bin_info[b];
        if (bi->small_pages >= bi->slab_pages)
            continue;
        cr_assert_lt(bi->small_nregs, bi->nregs);
        cr_assert_leq((size_t)bi->small_nregs * bi->reg_size, (size_t)bi->small_pages * PAGE);
        tested++;
        bin_t *bin = &a->bins[b];
        extent_t *prev = NULL;
        size_t pages = 0;
        unsigned n = 0, nsmall = 0, in_slab = 0;
        bool class_slab = false;
        while (!class_slab) {
            cr_assert_lt(n, HELD_MAX);
            void *p;
            cr_assert_eq(arena_fill_small(a, b, &p, 1), 1);
            extent_t *s = tu_slab_of(p);
            if (s != prev) {
                if (prev != NULL) /* the previous slab was filled whole */
                    cr_assert_eq(in_slab, slab_nregs(prev, b), "bin %u: %u regions in a slab of %u", b, in_slab,
                                 slab_nregs(prev, b));
                bool small = pages < SLAB_SMALL_BIN_SLABS * bi->slab_pages;
                cr_assert_eq(s->slab_small, small, "bin %u: slab after %zu pages", b, pages);
                cr_assert_eq(s->size, (size_t)(small ? bi->small_pages : bi->slab_pages) * PAGE);
                cr_assert_eq(slab_nregs(s, b), small ? bi->small_nregs : bi->nregs);
                pages += s->size / PAGE;
                nsmall += small;
                class_slab = !small;
                prev = s;
                in_slab = 0;
            }
            in_slab++;
            cr_assert_geq(slab_region_index(s, b, p), 0, "bin %u: %p is no region of its slab", b, p);
            cr_assert_leq((uintptr_t)p + bi->reg_size, s->addr + s->size, "bin %u: %p runs past its slab", b, p);
            held[n++] = p;
        }
        cr_assert_geq(nsmall, 1);
        cr_assert_eq(bin->npages, pages, "bin %u: %u pages counted, %zu made", b, bin->npages, pages);
        for (unsigned i = 0; i < n; i++)
            tu_fill(held[i], bi->reg_size);
        for (unsigned i = 0; i < n; i++)
            cr_assert(tu_check(held[i], bi->reg_size), "bin %u: region %p overlaps another", b, held[i]);
        dalloc_all(b, held, n);
        cr_assert_eq(bin->stats.curregs, 0);
    }
    cr_assert_geq(tested, 8, "%u classes with a small geometry", tested);
    /* All given back (a decay tick takes the empty slabs and the empty
     * current one): the next slab is small again. */
    arena_decay(a, decay_now_ns(), SIZE_MAX);
    for (unsigned b = 0; b < SC_NBINS; b++) {
        const sc_bin_info_t *bi = &sc_bin_info[b];
        if (bi->small_pages >= bi->slab_pages)
            continue;
        cr_assert_eq(a->bins[b].npages, 0, "bin %u kept %u pages", b, a->bins[b].npages);
        void *p;
        cr_assert_eq(arena_fill_small(a, b, &p, 1), 1);
        cr_assert(tu_slab_of(p)->slab_small, "bin %u: a class slab after all went back", b);
        dalloc_all(b, &p, 1);
    }
}

Test(bin, malloc_small_counts_requests)
{
    arena_t *a = arena_get(AIND);
    unsigned b = sc_size2index(100);
    void *p = arena_malloc_small(a, b, false);
    void *q = arena_malloc_small(a, b, true);
    cr_assert_not_null(p);
    cr_assert_not_null(q);
    for (size_t i = 0; i < sc_bin_info[b].reg_size; i++)
        cr_assert_eq(((unsigned char *)q)[i], 0);
    cr_assert_eq(a->bins[b].stats.nrequests, 2);
    cr_assert_eq(a->bins[b].stats.nmalloc, 2);
    cr_assert_eq(a->bins[b].stats.curregs, 2);
    arena_bin_count_requests(a, b, 5);
    cr_assert_eq(a->bins[b].stats.nrequests, 7);
    dalloc_all(b, &p, 1);
    dalloc_all(b, &q, 1);
    cr_assert_eq(a->bins[b].stats.curregs, 0);
}

/* Slabs emptied (not the current one) are kept while they fit in
 * BIN_EMPTY_BYTES; past that the highest goes back to the pool. Fills take
 * the kept ones (lowest first) before making a slab, and a decay tick
 * gives back what stays empty. */
enum { HELD_BIN_MAX = 512 };
static void *heldb[SC_NBINS][HELD_BIN_MAX];
static unsigned nheldb[SC_NBINS];

Test(bin, emptied_slabs_are_kept_up_to_a_bound_then_go_back_to_the_pool)
{
    arena_t *a = arena_get(AIND);
    for (unsigned b = 0; b < SC_NBINS; b++) {
        const sc_bin_info_t *bi = &sc_bin_info[b];
        bin_t *bin = &a->bins[b];
        const unsigned K = bin_empty_cap(b);
        enum { KMAX = 64 };
        cr_assert_leq(K, KMAX);
        /* The bin's first slabs stay full, out of the way (as the one
         * region per bin of the decay check below). */
        nheldb[b] = tu_bin_skip_small(a, b, heldb[b], HELD_BIN_MAX);
        const size_t H = bin->stats.curslabs;
        /* K + 1 full slabs besides the current one (also full). */
        unsigned n = (K + 2) * bi->nregs;
        void **ps = malloc(n * sizeof(void *));
        cr_assert_eq(arena_fill_small(a, b, ps, n), n);
        cr_assert_eq(bin->stats.curslabs, H + K + 2);
        extent_t *cur = bin->slabcur, *sl[KMAX + 1];
        cr_assert_eq(cur->nfree, 0);
        cr_assert_eq(tu_slabs_besides(ps, n, cur, sl, K + 1), K + 1);
        uint64_t nslabs = bin->stats.nslabs;
        /* Highest first: the last one emptied is the lowest, which the
         * full heap keeps in place of its highest. */
        for (unsigned j = 1; j <= K; j++)
            for (unsigned i = j; i > 0 && sl[i]->addr > sl[i - 1]->addr; i--) {
                extent_t *t = sl[i];
                sl[i] = sl[i - 1];
                sl[i - 1] = t;
            }

        /* The first K emptied are kept: still slabs, pages still active. */
        for (unsigned j = 0; j < K; j++) {
            extent_pool_t *home = sl[j]->pool;
            size_t active = home->stats.active_pages;
            unsigned k = partition_by_slab(ps, n, sl[j]);
            cr_assert_eq(k, bi->nregs);
            dalloc_all(b, ps, k);
            cr_assert_eq(bin->nempty, j + 1, "bin %u: emptied slab %u was not kept", b, j);
            cr_assert_eq(bin->stats.curslabs, H + K + 2);
            cr_assert_eq(home->stats.active_pages, active);
            cr_assert(rtree_lookup(sl[j]->addr) & RTREE_SLAB);
            cr_assert_eq(sl[j]->nfree, bi->nregs);
            for (unsigned i = 0; i < k; i++) /* (keep ps holding only live regions) */
                ps[i] = ps[n - k + i];
            n -= k;
        }

        /* One more: the heap is full and keeps the lowest, so the highest
         * of the K + 1 goes back to the pool its pages came from: this
         * arena's, or another's whose dirty pages it took (extent_pool_share). */
        extent_t *gone = sl[0];
        uintptr_t lowest = sl[0]->addr;
        for (unsigned j = 1; j <= K; j++) {
            gone = sl[j]->addr > gone->addr ? sl[j] : gone;
            lowest = MA_MIN(lowest, sl[j]->addr);
        }
        uintptr_t oaddr = gone->addr;
        size_t osize = gone->size;
        extent_pool_t *home = gone->pool;
        size_t active = home->stats.active_pages;
        unsigned k = partition_by_slab(ps, n, sl[K]);
        cr_assert_eq(k, bi->nregs);
        dalloc_all(b, ps, k - 1); /* all but one region back: the slab stays */
        cr_assert_eq(bin->stats.curslabs, H + K + 2);
        cr_assert(rtree_lookup(sl[K]->addr) & RTREE_SLAB);
        dalloc_all(b, ps + k - 1, 1);
        cr_assert_eq(bin->nempty, K);
        cr_assert_eq(bin->stats.curslabs, H + K + 1, "bin %u: a slab past the bound was kept", b);
        cr_assert_eq(home->stats.active_pages, active - osize / PAGE);
        rtree_elm_t e = rtree_lookup(oaddr);
        cr_assert_eq(e & RTREE_SLAB, 0, "bin %u: the highest slab was kept", b);
        cr_assert_eq(rtree_elm_szind(e), SC_NSIZES, "first page of a free extent");
        cr_assert_eq(((extent_t *)rtree_elm_extent(e))->state, EXTENT_DIRTY);
        cr_assert_eq(rtree_fast_lookup(oaddr), 0);
        cr_assert_eq(rtree_fast_lookup(oaddr + osize - PAGE), 0);
        for (unsigned i = 0; i < k; i++)
            ps[i] = ps[n - k + i];
        n -= k;
        cr_assert_eq(n, bi->nregs, "only the current slab's regions are left");

        /* Fills take the kept slabs, lowest first, and make none. */
        void **got = malloc((size_t)K * bi->nregs * sizeof(void *));
        cr_assert_eq(arena_fill_small(a, b, got, K * bi->nregs), K * bi->nregs);
        cr_assert_eq((uintptr_t)got[0], lowest, "bin %u: the first fill did not take the lowest empty slab", b);
        cr_assert_eq(bin->stats.nslabs, nslabs, "bin %u: a fill made a slab while empty ones were kept", b);
        cr_assert_eq(bin->nempty, 0);
        extent_t *last = tu_slab_of(got[K * bi->nregs - 1]);
        cr_assert_eq(bin->slabcur, last, "bin %u: the current slab is not the last one the fill took", b);

        /* Everything back: the current slab (now the last one the fill
         * took) stays, K empty ones are kept. */
        dalloc_all(b, got, K * bi->nregs);
        dalloc_all(b, ps, n);
        cr_assert_eq(bin->nempty, K);
        cr_assert_eq(bin->slabcur, last, "bin %u: the emptied current slab was replaced", b);
        cr_assert_eq(bin->slabcur->nfree, bi->nregs);
        cr_assert(rtree_lookup(bin->slabcur->addr) & RTREE_SLAB, "bin %u: the empty current slab was given back", b);
        cr_assert_eq(bin->stats.curslabs, H + K + 1);
        cr_assert_eq(bin->stats.curregs, nheldb[b]);
        free(got);
        free(ps);
    }
    /* A decay tick gives the empty ones back, even where the current slab
     * is in use (after the loop: slabs given back coalesce, which would
     * upset the checks above on the next bin's). */
    void *one[SC_NBINS];
    for (unsigned b = 0; b < SC_NBINS; b++)
        cr_assert_eq(arena_fill_small(a, b, &one[b], 1), 1);
    arena_decay(a, decay_now_ns(), SIZE_MAX);
    for (unsigned b = 0; b < SC_NBINS; b++) {
        cr_assert_eq(a->bins[b].nempty, 0, "bin %u: decay left empty slabs", b);
        size_t H = 0; /* the slabs of the held regions, all full */
        for (unsigned i = 0; i < nheldb[b]; i++)
            H += i == 0 || tu_slab_of(heldb[b][i]) != tu_slab_of(heldb[b][i - 1]);
        cr_assert_eq(a->bins[b].stats.curslabs, H + 1);
        cr_assert_eq(tu_slab_of(one[b]), a->bins[b].slabcur);
        dalloc_all(b, &one[b], 1);
        dalloc_all(b, heldb[b], nheldb[b]);
        cr_assert_eq(a->bins[b].stats.curregs, 0);
    }
}

/* When the last thread bound to an arena leaves it, its bins give back
 * every empty slab and an empty current slab (arena_thread_leave), and
 * keep those holding objects; while a thread stays, they keep them. */
Test(bin, the_last_thread_to_leave_an_arena_takes_its_empty_slabs_back)
{
    arena_t *a = arena_get(AIND);
    cr_assert_not_null(a);
    arena_thread_join(a);
    arena_thread_join(a);
    static void *ps[SC_NBINS][3 * SC_SLAB_MAXREGS], *kept[SC_NBINS];
    size_t active0 = a->pool.stats.active_pages;
    for (unsigned b = 0; b < SC_NBINS; b++) {
        /* Three slabs' worth: all but one region back, so two or three
         * slabs are empty (one of them the current one) and one is not. */
        unsigned n = 3 * sc_bin_info[b].nregs;
        cr_assert_eq(arena_fill_small(a, b, ps[b], n), n);
        kept[b] = ps[b][n / 2];
        ps[b][n / 2] = ps[b][n - 1];
        dalloc_all(b, ps[b], n - 1);
        cr_assert_geq(a->bins[b].stats.curslabs, 2, "bin %u keeps no empty slab to give back", b);
    }
    cr_assert_not(arena_thread_leave(a), "a thread is still bound");
    for (unsigned b = 0; b < SC_NBINS; b++)
        cr_assert_geq(a->bins[b].stats.curslabs, 2, "bin %u gave back its slabs with a thread bound", b);
    cr_assert(arena_thread_leave(a));
    size_t pages = 0;
    for (unsigned b = 0; b < SC_NBINS; b++) {
        bin_t *bin = &a->bins[b];
        extent_t *s = tu_slab_of(kept[b]);
        cr_assert_eq(bin->stats.curslabs, 1, "bin %u keeps %zu slabs, want the one with an object", b,
                     bin->stats.curslabs);
        cr_assert_eq(bin->nempty, 0, "bin %u", b);
        cr_assert(bin->slabcur == NULL || bin->slabcur == s, "bin %u kept an empty current slab", b);
        cr_assert(rtree_lookup(s->addr) & RTREE_SLAB, "bin %u: the slab with an object went back", b);
        pages += s->size / PAGE;
        dalloc_all(b, &kept[b], 1);
    }
    /* Of what the test made, only the slabs with objects were still active
     * (a slab may hold pages another arena's pool lent). */
    cr_assert_leq(a->pool.stats.active_pages, active0 + pages);
}

/* Whether this process has touched the page holding p (pagemap: present).
 * A read counts: it maps the shared zero page on most kernels, but on some
 * (Linux 6.18.44-fc here) it gives the process a page of its own, so a
 * read of a page never written costs as much RSS as a write. */
static bool page_touched(const void *p)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    int fd = open("/proc/self/pagemap", O_RDONLY);
    cr_assert_geq(fd, 0, "cannot open /proc/self/pagemap");
    uint64_t e = 0;
    cr_assert_eq(pread(fd, &e, sizeof(e), (off_t)((uintptr_t)p / page * sizeof(e))), (ssize_t)sizeof(e));
    close(fd);
    return (e >> 63) & 1;
}

/* The last thread's leaving looks at no bin of a class the arena never
 * served: locking every bin wrote their pages (3 of an arena's 6 for a
 * thread that only freed), and reading each one without its lock read
 * them, which on some kernels makes them resident too (page_touched). */
Test(bin, a_leaving_thread_touches_no_bin_it_never_used)
{
    arena_t *a = arena_get(AIND2);
    cr_assert_not_null(a);
    const void *unused = &a->bins[SC_NBINS - 1];
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    if ((uintptr_t)unused / page == (uintptr_t)&a->bins[0] / page)
        cr_skip_test("the first and last bins share a page");
    cr_assert_not(page_touched(unused), "the arena's creation touched the last bin's page");
    arena_thread_join(a);
    void *p;
    cr_assert_eq(arena_fill_small(a, 0, &p, 1), 1);
    dalloc_all(0, &p, 1);
    cr_assert(arena_thread_leave(a));
    cr_assert_eq(a->bins[0].stats.curslabs, 0, "the slab of the class used was not given back");
    cr_assert_not(page_touched(unused), "the last thread's leaving touched the page of a bin never used");
}

/* One batch free whose objects come in runs per slab, a slab appearing in
 * two runs: every partly free slab ends up where fills find it (its free
 * regions are handed out again without a new slab), the emptied one goes
 * back to the pool, and the counts agree. */
Test(bin, a_batch_free_in_runs_per_slab_leaves_every_slab_findable)
{
    arena_t *a = arena_get(AIND);
    for (unsigned b = 0; b < SC_NBINS; b++) {
        const sc_bin_info_t *bi = &sc_bin_info[b];
        const unsigned nr = bi->nregs;
        if (nr < 4)
            continue;
        bin_t *bin = &a->bins[b];
        unsigned nheld = tu_bin_skip_small(a, b, held, HELD_MAX);
        size_t regs_before = bin->stats.curregs;
        /* Four full slabs besides the current one (a fifth, also full). */
        unsigned n = 5 * nr;
        void **ps = malloc(n * sizeof(void *));
        cr_assert_eq(arena_fill_small(a, b, ps, n), n);
        extent_t *cur = bin->slabcur, *sl[4];
        cr_assert_eq(tu_slabs_besides(ps, n, cur, sl, 4), 4);
        /* Regions to free: A 2, B 1, A 1 (A's second run), C nr - 1, D all. */
        void **f = malloc((4 + 2 * (size_t)nr) * sizeof(void *));
        unsigned nf = 0;
        const unsigned counts[] = {2, 1, 1, nr - 1, nr};
        const unsigned which[] = {0, 1, 0, 2, 3};
        unsigned next_reg[4] = {0, 0, 0, 0};
        for (unsigned r = 0; r < 5; r++)
            for (unsigned k = 0; k < counts[r]; k++) {
                unsigned j = which[r];
                f[nf++] = (void *)(sl[j]->addr + (uintptr_t)next_reg[j]++ * bi->reg_size);
            }
        uint64_t nslabs0 = bin->stats.nslabs;
        size_t curslabs0 = bin->stats.curslabs, curregs0 = bin->stats.curregs;
        dalloc_all(b, f, nf);
        cr_assert_eq(bin->stats.curregs, curregs0 - nf);
        /* D, emptied, is kept aside for later fills: they take C, B, A first. */
        cr_assert_eq(bin->stats.curslabs, curslabs0, "bin %u: the emptied slab was given back", b);
        cr_assert_eq(bin->nempty, 1);
        cr_assert_eq(extent_heap_first(&bin->empty), sl[3]);
        cr_assert_eq(bin->stats.nonfull_slabs, 3, "bin %u: %zu slabs in the heaps, want 3", b,
                     bin->stats.nonfull_slabs);
        cr_assert_eq(sl[0]->nfree, 3);
        cr_assert_eq(sl[1]->nfree, 1);
        cr_assert_eq(sl[2]->nfree, nr - 1);
        /* Their 3 + 1 + (nr - 1) free regions come back without a new slab. */
        unsigned want = 3 + 1 + (nr - 1);
        void **got = malloc(want * sizeof(void *));
        cr_assert_eq(arena_fill_small(a, b, got, want), want);
        cr_assert_eq(bin->stats.nslabs, nslabs0, "bin %u: a fill made a new slab while regions were free", b);
        for (unsigned i = 0; i < want; i++) {
            extent_t *s = tu_slab_of(got[i]);
            cr_assert(s == sl[0] || s == sl[1] || s == sl[2], "bin %u: region from an unexpected slab", b);
        }
        cr_assert_eq(sl[0]->nfree + sl[1]->nfree + sl[2]->nfree, 0);
        /* Everything back: got, and what of ps was never in f. */
        dalloc_all(b, got, want);
        for (unsigned i = 0; i < n; i++) {
            bool in_f = false;
            for (unsigned k = 0; k < nf; k++)
                in_f |= f[k] == ps[i];
            if (!in_f)
                dalloc_all(b, &ps[i], 1);
        }
        cr_assert_eq(bin->stats.curregs, regs_before, "bin %u: regions left", b);
        dalloc_all(b, held, nheld);
        cr_assert_eq(bin->stats.curregs, regs_before - nheld);
        free(f);
        free(got);
        free(ps);
    }
}

Test(bin, fills_prefer_the_lowest_address_nonfull_slab)
{
    arena_t *a = arena_get(AIND);
    uint64_t seed = 11;
    enum { NS = 6 };
    unsigned tested = 0;
    for (unsigned b = 0; b < SC_NBINS; b++) {
        const sc_bin_info_t *bi = &sc_bin_info[b];
        /* A slab of one region is never non-full: freeing the region empties
         * it, and where the next one comes from is the pool's best fit
         * (test_extent). */
        if (bi->nregs == 1)
            continue;
        tested++;
        bin_t *bin = &a->bins[b];
        unsigned nheld = tu_bin_skip_small(a, b, held, HELD_MAX);
        unsigned n = NS * bi->nregs;
        void **ps = malloc(n * sizeof(void *));
        cr_assert_eq(arena_fill_small(a, b, ps, n), n);
        cr_assert_eq(bin->slabcur->nfree, 0, "the current slab is full");
        /* The other slabs, and one region of each to free. */
        extent_t *slabs[NS];
        unsigned ns = tu_slabs_besides(ps, n, bin->slabcur, slabs, NS);
        cr_assert_eq(ns, NS - 1);
        void *freed[NS];
        for (unsigned j = 0; j < ns; j++) {
            /* A random region of slab j. */
            unsigned r = (unsigned)(tu_rand(&seed) % bi->nregs);
            freed[j] = (void *)(slabs[j]->addr + (uintptr_t)r * bi->reg_size);
        }
        /* Free them in random order. */
        for (unsigned j = ns - 1; j > 0; j--) {
            unsigned k = (unsigned)(tu_rand(&seed) % (j + 1));
            void *t = freed[j];
            freed[j] = freed[k];
            freed[k] = t;
        }
        for (unsigned j = 0; j < ns; j++) {
            void *p = freed[j];
            dalloc_all(b, &p, 1);
            /* (keep ps consistent: mark it) */
            for (unsigned i = 0; i < n; i++)
                if (ps[i] == freed[j])
                    ps[i] = NULL;
        }
        /* Fills now come back lowest slab first. */
        qsort(freed, ns, sizeof(void *), tu_cmp_ptr);
        for (unsigned j = 0; j < ns; j++) {
            void *p;
            cr_assert_eq(arena_fill_small(a, b, &p, 1), 1);
            cr_assert_eq(p, freed[j], "bin %u: fill %u gave %p, lowest nonfull slab's free region is %p", b,
                         j, p, freed[j]);
            for (unsigned i = 0; i < n; i++)
                if (ps[i] == NULL) {
                    ps[i] = p;
                    break;
                }
        }
        /* Every slab full again: the next fill makes a new slab. */
        size_t curslabs = bin->stats.curslabs;
        void *p;
        cr_assert_eq(arena_fill_small(a, b, &p, 1), 1);
        cr_assert_eq(bin->stats.curslabs, curslabs + 1);
        for (unsigned j = 0; j < ns; j++)
            cr_assert_neq(tu_slab_of(p), slabs[j]);
        dalloc_all(b, &p, 1);
        dalloc_all(b, ps, n);
        cr_assert_eq(bin->stats.curregs, nheld);
        dalloc_all(b, held, nheld);
        cr_assert_eq(bin->stats.curregs, 0);
        free(ps);
    }
    cr_assert_gt(tested, SC_NBINS / 2, "most classes have slabs of several regions");
}

Test(bin, a_batch_can_mix_arenas)
{
    arena_t *a = arena_get(AIND), *c = arena_get(AIND2);
    unsigned b = sc_size2index(64);
    enum { N = 40 };
    void *pa[N], *pc[N], *mix[2 * N];
    cr_assert_eq(arena_fill_small(a, b, pa, N), N);
    cr_assert_eq(arena_fill_small(c, b, pc, N), N);
    for (unsigned i = 0; i < N; i++) {
        mix[2 * i] = pa[i];
        mix[2 * i + 1] = pc[i];
    }
    dalloc_all(b, mix, 2 * N);
    cr_assert_eq(a->bins[b].stats.curregs, 0);
    cr_assert_eq(c->bins[b].stats.curregs, 0);
    cr_assert_eq(a->bins[b].stats.ndalloc, N);
    cr_assert_eq(c->bins[b].stats.ndalloc, N);
    cr_assert_eq(a->bins[b].stats.nflushes, 1);
    cr_assert_eq(c->bins[b].stats.nflushes, 1);
}

/* Misuse aborts with a clear message. */
static void double_free_child(void *arg)
{
    (void)arg;
    arena_t *a = arena_get(AIND);
    unsigned b = sc_size2index(48);
    void *p[2];
    arena_fill_small(a, b, p, 2);
    void *q = p[0];
    dalloc_all(b, &q, 1);
    q = p[0];
    dalloc_all(b, &q, 1);
}

static void interior_free_child(void *arg)
{
    (void)arg;
    arena_t *a = arena_get(AIND);
    unsigned b = sc_size2index(48);
    void *p;
    arena_fill_small(a, b, &p, 1);
    void *q = (char *)p + 8;
    extent_t *s = tu_slab_of(p);
    arena_dalloc_small_batch(b, &q, &s, 1);
}

Test(bin, double_and_interior_frees_abort)
{
    char err[4096];
    int st = tu_capture(double_free_child, NULL, err, sizeof(err));
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "status %#x", st);
    cr_assert(strncmp(err, "<myalloc>: ", 11) == 0, "\"%s\"", err);
    cr_assert_not_null(strstr(err, "double free"), "\"%s\"", err);
    st = tu_capture(interior_free_child, NULL, err, sizeof(err));
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "status %#x", st);
    cr_assert_not_null(strstr(err, "invalid pointer"), "\"%s\"", err);
}

/* Pages of [p, p + len) this process has touched (page_touched: a read
 * counts). -1 if /proc/self/pagemap is unreadable. */
static long touched_pages(const void *p, size_t len)
{
    const size_t os_page = (size_t)sysconf(_SC_PAGESIZE);
    int fd = open("/proc/self/pagemap", O_RDONLY);
    if (fd < 0)
        return -1;
    long n = 0;
    for (uintptr_t pg = (uintptr_t)p / os_page; pg < ((uintptr_t)p + len) / os_page; pg++) {
        uint64_t e;
        if (pread(fd, &e, sizeof(e), (off_t)(pg * sizeof(e))) != (ssize_t)sizeof(e)) {
            close(fd);
            return -1;
        }
        n += e >> 63 & 1;
    }
    close(fd);
    return n;
}

/* Every arena's state is resident for as long as the process lives, and a
 * program has up to 4 per CPU. One that serves the classes of 16-256 B
 * (prodcons) touches its header, its pool's scalars and dirty-decay
 * backlog and the bins of those classes, nothing past them: with 4 KiB
 * pages and a 16-byte quantum that is 3 pages (it was 4-5: 8-byte backlog
 * entries, and the arena not page-aligned; then 5 again where a read makes
 * a page resident: decay read every bin, arena_bin_used). Whole pages of
 * the arena only: the last one is shared with whatever metadata follows. */
Test(bin, an_arena_serving_the_smallest_classes_touches_only_the_pages_up_to_their_bins)
{
    arena_t *a = arena_get(AIND);
    cr_assert_not_null(a);
    const unsigned nbins = sc_size2index(256) + 1;
    void *ps[64];
    for (unsigned b = 0; b < nbins; b++) {
        cr_assert_eq(arena_fill_small(a, b, ps, 64), 64);
        dalloc_all(b, ps, 64);
    }
    arena_decay(a, decay_now_ns(), SIZE_MAX); /* looks at every bin */
    const size_t os_page = (size_t)sysconf(_SC_PAGESIZE);
    long touched = touched_pages(a, sizeof(arena_t) / os_page * os_page);
    if (touched < 0)
        cr_skip_test("/proc/self/pagemap is not readable here");
    size_t used_end = offsetof(arena_t, bins) + nbins * sizeof(bin_t);
    long bound = (long)((used_end + os_page - 1) / os_page);
    cr_log_info("arena state: %ld pages touched of %zu; its first %u bins end at byte %zu", touched,
                sizeof(arena_t) / os_page, nbins, used_end);
    cr_assert_eq((uintptr_t)a % PAGE, 0, "arena state at %p, not page-aligned", (void *)a);
    cr_assert_leq(touched, bound, "%ld pages of the arena's state touched, %ld hold what it used", touched, bound);
#if SC_LG_PAGE == 12 && SC_LG_QUANTUM == 4 && SC_LG_NGROUP == 2
    cr_assert_leq(used_end, 3 * 4096, "the arena's header, pool and first %u bins take %zu bytes", nbins, used_end);
#endif
}
