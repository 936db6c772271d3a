/*
 * Extents and the page pool, on a private extent_pool_t (no arena uses it),
 * plus the address-ordered pairing heap and the OS page layer.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "arena/arena.h"
#include "arena/extent.h"
#include "arena/pages.h"
#include "test_util.h"

#define POOL_IND (ARENAS_MAX - 2) /* no arena has this index: nothing else uses the pool */

static extent_pool_t pool;

static void setup(void)
{
    free(malloc(1)); /* allocator booted: page map and fast map ready */
    extent_pool_init(&pool, POOL_IND, false);
}

TestSuite(extent, .init = setup);

/* A class size of about npages pages (page multiple, a class in every
 * configuration for npages <= 4 and powers of two). */
static size_t pages_class(size_t npages)
{
    size_t s = sc_s2u(npages * PAGE);
    cr_assert_eq(s % PAGE, 0);
    return s;
}

static void check_registered(extent_t *e, unsigned szind, bool slab)
{
    rtree_elm_t first = rtree_lookup(e->addr), last = rtree_lookup(e->addr + e->size - PAGE);
    cr_assert_eq(rtree_elm_extent(first), e, "first page of %#lx", (unsigned long)e->addr);
    cr_assert_eq(rtree_elm_extent(last), e, "last page of %#lx", (unsigned long)e->addr);
    cr_assert_eq(rtree_elm_szind(first), szind);
    cr_assert_eq(rtree_elm_szind(last), szind);
    cr_assert_eq((first & RTREE_SLAB) != 0, slab);
    cr_assert_eq((last & RTREE_SLAB) != 0, slab);
    cr_assert_eq(first & RTREE_STALE, 0);
    if (slab)
        for (uintptr_t a = e->addr; a < e->addr + e->size; a += PAGE)
            cr_assert_eq(rtree_lookup(a), rtree_elm_make(e, szind, RTREE_SLAB), "slab page %#lx",
                         (unsigned long)a);
    cr_assert_eq(e->state, EXTENT_ACTIVE);
    cr_assert_eq(e->szind, szind);
    cr_assert_eq(e->slab, slab);
    cr_assert_eq(e->pool, &pool);
    cr_assert_geq(e->addr, e->chunk->base);
    cr_assert_leq(e->addr + e->size, e->chunk->base + e->chunk->size);
}

/* ---------------------------------------------------------------------
 * The whole pool's invariants, walked from its sets.
 */

typedef struct {
    size_t nextents, npages;
} walk_t;

static void walk_heap(extent_t *e, uintptr_t parent, eset_t *s, unsigned ind, walk_t *w, extent_pool_t *p)
{
    for (; e != NULL; e = e->ph_next) {
        cr_assert_geq(e->addr, parent, "heap order");
        cr_assert_eq(e->state, s->state, "extent %#lx in the wrong set", (unsigned long)e->addr);
        cr_assert_eq(e->szind, SC_NSIZES);
        cr_assert_eq(e->pool, p);
        cr_assert_eq(sc_size2index_floor(e->size), ind, "extent of %zu bytes binned at %u", e->size, ind);
        cr_assert_eq(e->addr % PAGE, 0);
        cr_assert_eq(e->size % PAGE, 0);
        cr_assert_eq(rtree_lookup(e->addr), rtree_elm_make(e, SC_NSIZES, 0), "free extent first page");
        cr_assert_eq(rtree_lookup(e->addr + e->size - PAGE), rtree_elm_make(e, SC_NSIZES, 0),
                     "free extent last page");
        /* Fully coalesced: the next extent in the chunk is not free in the same state. */
        uintptr_t end = e->addr + e->size;
        if (end < e->chunk->base + e->chunk->size) {
            extent_t *n = rtree_elm_extent(rtree_lookup(end));
            cr_assert_not_null(n, "no extent after %#lx", (unsigned long)e->addr);
            cr_assert(n->state != e->state, "adjacent free extents %#lx and %#lx not coalesced",
                      (unsigned long)e->addr, (unsigned long)n->addr);
        }
        w->nextents++;
        w->npages += e->size / PAGE;
        walk_heap(e->ph_child, e->addr, s, ind, w, p);
    }
}

static void check_pool(extent_pool_t *p)
{
    eset_t *sets[3] = {&p->dirty, &p->muzzy, &p->retained};
    size_t free_pages = 0;
    for (int k = 0; k < 3; k++) {
        eset_t *s = sets[k];
        walk_t w = {0, 0};
        for (unsigned i = 0; i < SC_NSIZES; i++) {
            bool bit = (s->nonempty[i / 64] >> (i % 64)) & 1;
            cr_assert_eq(bit, s->heaps[i].root != NULL, "set %d heap %u nonempty bit", k, i);
            if (s->heaps[i].root != NULL)
                cr_assert_null(s->heaps[i].root->ph_prev);
            walk_heap(s->heaps[i].root, 0, s, i, &w, p);
        }
        cr_assert_eq(w.nextents, s->nextents, "set %d: %zu extents in heaps, counter %zu", k, w.nextents,
                     s->nextents);
        cr_assert_eq(w.npages, s->npages, "set %d: %zu pages in heaps, counter %zu", k, w.npages, s->npages);
        size_t nlru = 0;
        for (extent_t *e = s->lru.head; e != NULL; e = e->lru_next)
            nlru++;
        cr_assert_eq(nlru, s->nextents, "set %d LRU list", k);
        free_pages += s->npages;
    }
    size_t mapped = 0;
    for (chunk_t *c = p->chunks; c != NULL; c = c->next)
        mapped += c->size;
    cr_assert_eq(mapped, p->stats.mapped);
    cr_assert_eq(free_pages + p->stats.active_pages, mapped / PAGE,
                 "free %zu + active %zu pages != mapped %zu", free_pages, p->stats.active_pages,
                 mapped / PAGE);
}

/* ---------------------------------------------------------------------
 */

static int cmp_extent_addr(const void *a, const void *b)
{
    uintptr_t x = (*(extent_t *const *)a)->addr, y = (*(extent_t *const *)b)->addr;
    return x < y ? -1 : x > y;
}

static void check_disjoint(extent_t **es, unsigned n)
{
    extent_t *sorted[1024];
    cr_assert_leq(n, 1024);
    memcpy(sorted, es, n * sizeof(*es));
    qsort(sorted, n, sizeof(*sorted), cmp_extent_addr);
    for (unsigned i = 1; i < n; i++)
        cr_assert_leq(sorted[i - 1]->addr + sorted[i - 1]->size, sorted[i]->addr, "extents overlap: %#lx+%zu, %#lx",
                      (unsigned long)sorted[i - 1]->addr, sorted[i - 1]->size, (unsigned long)sorted[i]->addr);
}

/* A new pool (every arena has one) touches only its scalars and the
 * headers of its decay state and sets: its heaps and decay backlogs stay
 * untouched, out of RSS, until used. The pools sit in fresh anonymous
 * memory, each at an OS page boundary. Where a pool spans 3 OS pages or
 * more (64 KiB pages' classes), clearing all of it (memset) makes every one
 * of its pages resident, and so did a clear of only the words not zero
 * where reading a page never written gives the process a page (Linux
 * 6.18.44-fc: 4 pages each of 4): its last stays untouched. With 4 KiB
 * pages the pool is 2 pages and init writes a header on each: there the
 * bound is the same 2.5 pages per pool as for the 3-page pool it was. */
Test(extent, a_new_pool_leaves_most_of_its_pages_untouched)
{
    const size_t osp = (size_t)sysconf(_SC_PAGESIZE), n = 256;
    const size_t stride = (sizeof(extent_pool_t) + osp - 1) / osp * osp, pages_each = stride / osp;
    cr_assert_geq(pages_each, 2, "extent_pool_t is %zu bytes", sizeof(extent_pool_t));
    char *m = mmap(NULL, n * stride, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(m, MAP_FAILED);
    size_t rss0 = tu_rss_bytes();
    for (size_t i = 0; i < n; i++)
        extent_pool_init((extent_pool_t *)(m + i * stride), ARENAS_MAX - 1 - (unsigned)(i % 8), false);
    size_t grew = (tu_rss_bytes() - rss0) / osp;
    /* At most pages_each - 1 each (2 for a 2-page pool), and half a page
     * more each for anything else the test touches meanwhile (measured:
     * 10-40 pages in all). */
    cr_assert_leq(grew, MA_MAX(pages_each - 1, 2) * n + n / 2,
                  "%zu new pools made %zu pages resident (%zu pages each)", n, grew, pages_each);
    extent_pool_t *p = (extent_pool_t *)m;
    cr_assert_eq(p->dirty.state, EXTENT_DIRTY);
    cr_assert_eq(p->muzzy.state, EXTENT_MUZZY);
    cr_assert_eq(p->retained.state, EXTENT_RETAINED);
    cr_assert_eq(p->decay_dirty.ms, extent_opt_dirty_decay_ms);
    cr_assert_eq(p->decay_muzzy.ms, extent_opt_muzzy_decay_ms);
    munmap(m, n * stride);
}

Test(extent, alloc_sizes_and_alignments)
{
    size_t npages[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 33, 100};
    size_t aligns[] = {0, 1, PAGE, 2 * PAGE, 4 * PAGE, 16 * PAGE, (size_t)1 << 20, (size_t)4 << 20};
    extent_t *es[1024];
    unsigned n = 0;
    for (size_t i = 0; i < MA_ARRAY_LEN(npages); i++) {
        for (size_t j = 0; j < MA_ARRAY_LEN(aligns); j++) {
            size_t size = npages[i] * PAGE, align = aligns[j];
            unsigned szind = sc_size2index(size);
            bool zeroed = false;
            extent_t *e = extent_alloc(&pool, size, align, szind, false, &zeroed);
            cr_assert_not_null(e, "extent_alloc(%zu, %zu)", size, align);
            cr_assert_eq(e->addr % PAGE, 0);
            if (align > PAGE)
                cr_assert_eq(e->addr % align, 0, "extent_alloc(%zu, align %zu) = %#lx", size, align,
                             (unsigned long)e->addr);
            cr_assert_eq(e->size, size);
            check_registered(e, szind, false);
            cr_assert(zeroed, "memory never used must be reported zeroed");
            /* Fresh memory reads zero; mark its ends. */
            unsigned char *m = (unsigned char *)e->addr;
            cr_assert_eq(m[0], 0);
            cr_assert_eq(m[size - 1], 0);
            tu_fill(m, 64);
            tu_fill(m + size - 64, 64);
            es[n++] = e;
        }
    }
    /* Slabs of every bin: every page registered. */
    for (unsigned b = 0; b < SC_NBINS; b++) {
        bool zeroed;
        extent_t *e = extent_alloc(&pool, (size_t)sc_bin_info[b].slab_pages * PAGE, PAGE, b, true, &zeroed);
        cr_assert_not_null(e);
        check_registered(e, b, true);
        tu_fill((void *)e->addr, 64);
        tu_fill((void *)(e->addr + e->size - 64), 64);
        es[n++] = e;
    }
    check_disjoint(es, n);
    check_pool(&pool);
    for (unsigned i = 0; i < n; i++) {
        cr_assert(tu_check((void *)es[i]->addr, 64), "extent %u overwritten", i);
        cr_assert(tu_check((void *)(es[i]->addr + es[i]->size - 64), 64), "extent %u overwritten", i);
    }
    for (unsigned i = 0; i < n; i++)
        extent_dalloc(&pool, es[i]);
    cr_assert_eq(pool.stats.active_pages, 0);
    check_pool(&pool);
}

Test(extent, impossible_requests_fail_cleanly)
{
    bool zeroed;
    cr_assert_null(extent_alloc(&pool, 0, PAGE, 0, false, &zeroed));
    cr_assert_null(extent_alloc(&pool, SIZE_MAX & ~PAGE_MASK, PAGE, 0, false, &zeroed));
    cr_assert_null(extent_alloc(&pool, PAGE, (size_t)1 << 63, 0, false, &zeroed));
    cr_assert_null(extent_alloc(&pool, (size_t)1 << 62, PAGE, 0, false, &zeroed));
    check_pool(&pool);
    extent_t *e = extent_alloc(&pool, PAGE, PAGE, 0, false, &zeroed);
    cr_assert_not_null(e, "the pool still works");
    extent_dalloc(&pool, e);
    check_pool(&pool);
}

Test(extent, freed_extents_are_reused_best_fit_then_lowest_address)
{
    const size_t S = pages_class(2);
    const unsigned szind = sc_size2index(S);
    extent_t *es[10];
    bool zeroed;
    for (int i = 0; i < 10; i++) {
        es[i] = extent_alloc(&pool, S, PAGE, szind, false, &zeroed);
        cr_assert_not_null(es[i]);
    }
    for (int i = 1; i < 10; i++)
        cr_assert_eq(es[i]->addr, es[i - 1]->addr + S, "consecutive allocations from one chunk are adjacent");
    uintptr_t a2 = es[2]->addr, a5 = es[5]->addr, a7 = es[7]->addr;
    /* Free out of address order; they are not adjacent, so they stay apart. */
    extent_dalloc(&pool, es[7]);
    extent_dalloc(&pool, es[2]);
    extent_dalloc(&pool, es[5]);
    cr_assert_eq(pool.dirty.nextents, 3);
    cr_assert_eq(pool.dirty.npages, 3 * S / PAGE);
    check_pool(&pool);
    es[2] = extent_alloc(&pool, S, PAGE, szind, false, &zeroed);
    cr_assert_eq(es[2]->addr, a2, "first fit must take the lowest address");
    cr_assert_not(zeroed, "dirty memory is not known to be zero");
    es[5] = extent_alloc(&pool, S, PAGE, szind, false, &zeroed);
    cr_assert_eq(es[5]->addr, a5);
    es[7] = extent_alloc(&pool, S, PAGE, szind, false, &zeroed);
    cr_assert_eq(es[7]->addr, a7);
    cr_assert_eq(pool.dirty.nextents, 0);
    /* A smaller request also takes the lowest fitting dirty extent, and the
     * rest of it stays in the dirty set. */
    extent_dalloc(&pool, es[7]);
    extent_dalloc(&pool, es[3]);
    extent_t *small = extent_alloc(&pool, PAGE, PAGE, 0, false, &zeroed);
    cr_assert_eq(small->addr, a2 + S, "the lowest dirty extent is the one es[3] had");
    cr_assert_eq(pool.dirty.nextents, 2);
    cr_assert_eq(pool.dirty.npages, (2 * S - PAGE) / PAGE);
    check_pool(&pool);
    /* The dirty rest (S - PAGE) is too small; es[7]'s old place fits. */
    extent_t *again = extent_alloc(&pool, S, PAGE, szind, false, &zeroed);
    cr_assert_eq(again->addr, a7, "the lowest dirty extent that fits");
    check_pool(&pool);

    /* Across sizes: an exact fit at a higher address is preferred to a
     * bigger free extent at a lower one, which stays whole (a fresh pool:
     * known layout). */
    static extent_pool_t p2;
    extent_pool_init(&p2, POOL_IND, false);
    const size_t B = pages_class(4);
    extent_t *big = extent_alloc(&p2, B, PAGE, sc_size2index(B), false, &zeroed);
    extent_t *sep1 = extent_alloc(&p2, PAGE, PAGE, 0, false, &zeroed);
    extent_t *exact = extent_alloc(&p2, S, PAGE, szind, false, &zeroed);
    extent_t *sep2 = extent_alloc(&p2, PAGE, PAGE, 0, false, &zeroed);
    cr_assert_eq(sep1->addr, big->addr + B);
    cr_assert_eq(exact->addr, sep1->addr + PAGE);
    cr_assert_eq(sep2->addr, exact->addr + S);
    uintptr_t bigaddr = big->addr;
    extent_dalloc(&p2, exact);
    extent_dalloc(&p2, big);
    cr_assert_eq(p2.dirty.nextents, 2);
    extent_t *fit = extent_alloc(&p2, S, PAGE, szind, false, &zeroed);
    cr_assert_eq(fit->addr, sep1->addr + PAGE, "best fit: the smallest class that fits");
    cr_assert_eq(p2.dirty.nextents, 1);
    cr_assert_eq(p2.dirty.npages, B / PAGE, "the bigger extent is left whole");
    extent_t *fit2 = extent_alloc(&p2, S, PAGE, szind, false, &zeroed);
    cr_assert_eq(fit2->addr, bigaddr, "then the bigger one, cut at its start");
    check_pool(&p2);
}

Test(extent, coalescing_three_neighbours)
{
    const size_t S = pages_class(2);
    const unsigned szind = sc_size2index(S);
    bool zeroed;
    extent_t *A = extent_alloc(&pool, S, PAGE, szind, false, &zeroed);
    extent_t *B = extent_alloc(&pool, S, PAGE, szind, false, &zeroed);
    extent_t *C = extent_alloc(&pool, S, PAGE, szind, false, &zeroed);
    extent_t *D = extent_alloc(&pool, S, PAGE, szind, false, &zeroed); /* keeps C off the chunk's tail */
    cr_assert_eq(B->addr, A->addr + S);
    cr_assert_eq(C->addr, B->addr + S);
    cr_assert_eq(D->addr, C->addr + S);
    uintptr_t base = A->addr;
    extent_dalloc(&pool, A);
    extent_dalloc(&pool, C);
    cr_assert_eq(pool.dirty.nextents, 2);
    cr_assert_eq(pool.dirty.npages, 2 * S / PAGE);
    check_pool(&pool);
    extent_dalloc(&pool, B);
    cr_assert_eq(pool.dirty.nextents, 1, "A, B and C must merge into one extent");
    cr_assert_eq(pool.dirty.npages, 3 * S / PAGE);
    rtree_elm_t first = rtree_lookup(base), last = rtree_lookup(base + 3 * S - PAGE);
    extent_t *m = rtree_elm_extent(first);
    cr_assert_not_null(m);
    cr_assert_eq(rtree_elm_extent(last), m, "first and last page map to the merged extent");
    cr_assert_eq(m->addr, base);
    cr_assert_eq(m->size, 3 * S);
    cr_assert_eq(m->state, EXTENT_DIRTY);
    cr_assert_eq(rtree_elm_szind(first), SC_NSIZES);
    cr_assert_eq(rtree_elm_szind(last), SC_NSIZES);
    /* The old inner boundaries no longer name an extent. */
    uintptr_t inner[] = {base + S - PAGE, base + S, base + 2 * S - PAGE, base + 2 * S};
    for (size_t i = 0; i < MA_ARRAY_LEN(inner); i++) {
        rtree_elm_t x = rtree_lookup(inner[i]);
        cr_assert(x == 0 || x == RTREE_STALE, "inner page %zu maps to %#llx", i, (unsigned long long)x);
    }
    check_pool(&pool);

    /* Split remainders go back to the set. */
    extent_t *lead = extent_alloc(&pool, PAGE, PAGE, 0, false, &zeroed);
    cr_assert_eq(lead->addr, base);
    cr_assert_eq(pool.dirty.nextents, 1);
    cr_assert_eq(pool.dirty.npages, 3 * S / PAGE - 1);
    extent_t *rest = rtree_elm_extent(rtree_lookup(base + PAGE));
    cr_assert_not_null(rest);
    cr_assert_eq(rest->addr, base + PAGE);
    cr_assert_eq(rest->size, 3 * S - PAGE);
    cr_assert_eq(rest->state, EXTENT_DIRTY);
    cr_assert_eq(rtree_elm_extent(rtree_lookup(base + 3 * S - PAGE)), rest);
    check_pool(&pool);
    /* Freeing the lead merges it back. */
    extent_dalloc(&pool, lead);
    cr_assert_eq(pool.dirty.nextents, 1);
    cr_assert_eq(pool.dirty.npages, 3 * S / PAGE);
    /* D freed too: it merges with ABC (dirty) but not with the retained tail. */
    extent_dalloc(&pool, D);
    cr_assert_eq(pool.dirty.nextents, 1);
    cr_assert_eq(pool.dirty.npages, 4 * S / PAGE);
    check_pool(&pool);
}

Test(extent, aligned_allocation_leaves_the_lead_free)
{
    bool zeroed;
    extent_t *a = extent_alloc(&pool, PAGE, PAGE, 0, false, &zeroed); /* chunk base + 0 */
    const size_t align = 16 * PAGE;
    extent_t *b = extent_alloc(&pool, 2 * PAGE, align, 1, false, &zeroed);
    cr_assert_eq(b->addr % align, 0);
    cr_assert_gt(b->addr, a->addr);
    /* The gap between a and b is free (retained) and registered. */
    extent_t *gap = rtree_elm_extent(rtree_lookup(a->addr + PAGE));
    cr_assert_not_null(gap);
    cr_assert_eq(gap->addr, a->addr + PAGE);
    cr_assert_eq(gap->addr + gap->size, b->addr);
    cr_assert_neq(gap->state, EXTENT_ACTIVE);
    check_pool(&pool);
    /* The gap is used again: one-page requests take the best fit, the
     * smaller (by size class) of the gap and the rest of the chunk, until
     * they reach the gap's first page. With 4 KiB pages the gap is the
     * smaller and the first request takes it. */
    extent_t *c[64];
    unsigned n = 0;
    bool found = false;
    while (n < 64 && !found) {
        c[n] = extent_alloc(&pool, PAGE, PAGE, 0, false, &zeroed);
        cr_assert_not_null(c[n]);
        found = c[n++]->addr == a->addr + PAGE;
    }
    cr_assert(found, "the gap before an aligned extent is never used");
    if (PAGE == 4096)
        cr_assert_eq(n, 1, "the gap is the best fit");
    extent_dalloc(&pool, a);
    extent_dalloc(&pool, b);
    for (unsigned i = 0; i < n; i++)
        extent_dalloc(&pool, c[i]);
    check_pool(&pool);
}

/* A run of large alignment, freed, is dirty in the middle of its chunk's
 * retained space, which it splits into pieces smaller than size + align:
 * the next request of that alignment must find the freed run itself, not
 * map a chunk each time (a loop of aligned_alloc(1 << 40) and free once ran
 * out of address space). */
Test(extent, a_freed_run_of_large_alignment_is_found_again)
{
    bool zeroed;
    const size_t align = (size_t)1 << 30, size = 3 * PAGE;
    extent_t *e = extent_alloc(&pool, size, align, sc_size2index(size), false, &zeroed);
    cr_assert_not_null(e);
    const uintptr_t addr = e->addr;
    extent_dalloc(&pool, e);
    const size_t mapped = pool.stats.mapped;
    for (int i = 0; i < 20; i++) {
        e = extent_alloc(&pool, size, align, sc_size2index(size), false, &zeroed);
        cr_assert_not_null(e);
        cr_assert_eq(e->addr, addr, "round %d: %#lx, not the freed run %#lx", i, (unsigned long)e->addr,
                     (unsigned long)addr);
        extent_dalloc(&pool, e);
        check_pool(&pool);
    }
    cr_assert_eq(pool.stats.mapped, mapped, "mapped %zu bytes more", pool.stats.mapped - mapped);
    /* A freed run that is too small or not aligned enough is not taken. */
    e = extent_alloc(&pool, size, align, sc_size2index(size), false, &zeroed);
    extent_t *bigger = extent_alloc(&pool, 4 * PAGE, align, sc_size2index(4 * PAGE), false, &zeroed);
    extent_dalloc(&pool, e);
    extent_t *wider = extent_alloc(&pool, size, 2 * align, sc_size2index(size), false, &zeroed);
    extent_t *longer = extent_alloc(&pool, 5 * PAGE, align, sc_size2index(5 * PAGE), false, &zeroed);
    cr_assert(wider != NULL && longer != NULL);
    cr_assert_eq(wider->addr % (2 * align), 0);
    cr_assert_eq(longer->addr % align, 0);
    cr_assert_neq(longer->addr, addr, "a 5-page run cut from the freed 3-page one");
    extent_t *es[] = {bigger, wider, longer};
    check_disjoint(es, 3);
    extent_dalloc(&pool, bigger);
    extent_dalloc(&pool, wider);
    extent_dalloc(&pool, longer);
    check_pool(&pool);
}

Test(extent, shrink_and_expand_in_place)
{
    const size_t P8 = pages_class(8), P4 = pages_class(4);
    cr_assert_eq(P8, 8 * PAGE);
    cr_assert_eq(P4, 4 * PAGE);
    bool zeroed;
    extent_t *E = extent_alloc(&pool, P8, PAGE, sc_size2index(P8), false, &zeroed);
    extent_t *F = extent_alloc(&pool, P8, PAGE, sc_size2index(P8), false, &zeroed);
    cr_assert_eq(F->addr, E->addr + P8);
    uintptr_t ea = E->addr;
    tu_fill((void *)ea, P4);
    size_t active0 = pool.stats.active_pages;

    /* Shrink: the tail becomes a dirty extent of its own (F is active). */
    cr_assert(extent_shrink(&pool, E, P4, sc_size2index(P4)));
    cr_assert_eq(E->addr, ea);
    cr_assert_eq(E->size, P4);
    cr_assert_eq(pool.stats.active_pages, active0 - 4);
    check_registered(E, sc_size2index(P4), false);
    cr_assert(tu_check((void *)ea, P4), "shrinking must keep the contents");
    extent_t *tail = rtree_elm_extent(rtree_lookup(ea + P4));
    cr_assert_not_null(tail);
    cr_assert_eq(tail->addr, ea + P4);
    cr_assert_eq(tail->size, P8 - P4);
    cr_assert_eq(tail->state, EXTENT_DIRTY);
    cr_assert_eq(pool.dirty.npages, 4);
    check_pool(&pool);

    /* Expand back into it. */
    zeroed = true;
    cr_assert(extent_expand(&pool, E, P8, sc_size2index(P8), &zeroed));
    cr_assert_not(zeroed, "grown into dirty pages: not known zero");
    cr_assert_eq(E->addr, ea);
    cr_assert_eq(E->size, P8);
    cr_assert_eq(pool.dirty.npages, 0);
    cr_assert_eq(pool.stats.active_pages, active0);
    check_registered(E, sc_size2index(P8), false);
    rtree_elm_t mid = rtree_lookup(ea + P4);
    cr_assert_null(rtree_elm_extent(mid), "the old tail's first page must not name an extent");
    cr_assert(tu_check((void *)ea, P4));
    check_pool(&pool);

    /* No room: the next extent is active. */
    cr_assert_not(extent_expand(&pool, E, P8 + PAGE, sc_size2index(P8 + PAGE), &zeroed));
    cr_assert_eq(E->size, P8);
    check_registered(E, sc_size2index(P8), false);

    /* F is the last allocation: it grows into the retained rest of the chunk,
     * which reads as zero; part of a free extent is taken, the rest stays. */
    size_t retained0 = pool.retained.npages;
    cr_assert_gt(retained0, 8);
    cr_assert(extent_expand(&pool, F, P8 + P4, sc_size2index(P8 + P4), &zeroed));
    cr_assert(zeroed, "grown into retained pages: zeroed");
    cr_assert_eq(F->size, P8 + P4);
    cr_assert_eq(pool.retained.npages, retained0 - 4);
    check_registered(F, sc_size2index(P8 + P4), false);
    check_pool(&pool);

    /* Not enough free space after F: fails and changes nothing. */
    size_t huge = F->size + (retained0 + 1) * PAGE;
    cr_assert_not(extent_expand(&pool, F, huge, sc_size2index(huge), &zeroed));
    cr_assert_eq(F->size, P8 + P4);
    check_pool(&pool);

    /* Shrink next to a free extent: the tail coalesces with it. */
    cr_assert(extent_shrink(&pool, F, P4, sc_size2index(P4)));
    cr_assert_eq(pool.retained.npages, retained0 - 4);
    cr_assert_eq(pool.dirty.npages, 8, "the dirty tail stays apart from retained pages");
    check_pool(&pool);
    extent_dalloc(&pool, F);
    cr_assert_eq(pool.dirty.nextents, 1, "F merges with its dirty tail");
    cr_assert_eq(pool.dirty.npages, 12);
    extent_dalloc(&pool, E);
    cr_assert_eq(pool.dirty.nextents, 1);
    cr_assert_eq(pool.dirty.npages, 20);
    check_pool(&pool);
}

Test(extent, purge_moves_dirty_to_retained_and_reuse_is_zeroed)
{
    const size_t S = pages_class(4);
    const unsigned szind = sc_size2index(S);
    bool zeroed;
    extent_t *x = extent_alloc(&pool, S, PAGE, szind, false, &zeroed);
    extent_t *y = extent_alloc(&pool, S, PAGE, szind, false, &zeroed);
    uintptr_t xa = x->addr;
    memset((void *)xa, 0xab, S);
    memset((void *)y->addr, 0xcd, S);
    extent_dalloc(&pool, x);
    cr_assert_eq(pool.dirty.npages, S / PAGE);
    size_t retained0 = pool.retained.npages;

    /* Reused while dirty: not zeroed, contents as left. */
    x = extent_alloc(&pool, S, PAGE, szind, false, &zeroed);
    cr_assert_eq(x->addr, xa);
    cr_assert_not(zeroed);
    cr_assert_eq(((unsigned char *)xa)[S - 1], 0xab);
    extent_dalloc(&pool, x);

    size_t purged = extent_purge_all(&pool);
    cr_assert_eq(purged, S / PAGE);
    cr_assert_eq(pool.dirty.npages, 0);
    cr_assert_eq(pool.dirty.nextents, 0);
    cr_assert_eq(pool.retained.npages, retained0 + S / PAGE);
    cr_assert_geq(pool.stats.npurge[0], 1);
    cr_assert_eq(pool.stats.purged_pages[0], S / PAGE);
    cr_assert_eq(extent_pool_dirty_pages(&pool), 0);
    check_pool(&pool);
    /* Nothing left to purge. */
    cr_assert_eq(extent_purge_all(&pool), 0);

    /* Dirty pages are used before retained ones, even at a higher address. */
    uintptr_t ya = y->addr;
    extent_dalloc(&pool, y);
    y = extent_alloc(&pool, S, PAGE, szind, false, &zeroed);
    cr_assert_eq(y->addr, ya, "dirty extents come before lower retained ones");
    cr_assert_not(zeroed);

    x = extent_alloc(&pool, S, PAGE, szind, false, &zeroed);
    cr_assert_eq(x->addr, xa, "the purged extent is the lowest free one");
    cr_assert(zeroed, "memory from the retained set must be reported zeroed");
    for (size_t i = 0; i < S; i++)
        cr_assert_eq(((unsigned char *)xa)[i], 0, "purged byte %zu is not zero", i);
    cr_assert_eq(((unsigned char *)y->addr)[0], 0xcd, "the live neighbour is untouched");
    extent_dalloc(&pool, x);
    extent_dalloc(&pool, y);
    check_pool(&pool);
}

/* The ranges of pages_purge_batch_purges_every_range_in_as_few_calls_as_it_can,
 * written then purged; true when all of them read zero after. */
static bool purge_four_ranges(unsigned *calls)
{
    unsigned char *p = mmap(NULL, 10 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return false;
    memset(p, 0x5a, 10 * PAGE);
    pages_range_t r[] = {{p + PAGE, PAGE}, {p + 3 * PAGE, 2 * PAGE}, {p + 7 * PAGE, PAGE}, {p + 9 * PAGE, PAGE}};
    *calls = pages_purge_batch(r, 4, false);
    bool ok = p[PAGE] == 0 && p[3 * PAGE] == 0 && p[5 * PAGE - 1] == 0 && p[7 * PAGE] == 0 && p[9 * PAGE] == 0 &&
              p[0] == 0x5a && p[2 * PAGE] == 0x5a && p[8 * PAGE] == 0x5a;
    munmap(p, 10 * PAGE);
    return ok;
}

/* The first batch a process tries finds out whether the kernel takes
 * them (pages_batch_state): where it does not (a kernel without
 * process_madvise on the calling process, before PIDFD_SELF; valgrind),
 * that try is one system call more. Tests that count calls settle it
 * first, so that they count the purge under test. */
static void settle_batching(void)
{
    unsigned char *p = mmap(NULL, 3 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(p, MAP_FAILED);
    pages_range_t r[] = {{p, PAGE}, {p + 2 * PAGE, PAGE}};
    pages_purge_batch(r, 2, false);
    munmap(p, 3 * PAGE);
}

/* purge_batch:false: one madvise per range, all purged. */
Test(extent, purge_batch_false_makes_one_call_per_range)
{
    pages_opt_batch = false;
    unsigned calls;
    cr_assert(purge_four_ranges(&calls));
    cr_assert_eq(calls, 4);
    pages_opt_batch = true;
    settle_batching();
    cr_assert(purge_four_ranges(&calls));
    cr_assert_eq(calls, tu_kernel_batches_madvise() ? 1u : 4u);
}

/* Under a seccomp filter, no process_madvise is tried: here a filter that
 * kills the process on process_madvise (as sandboxes that allow madvise
 * but not system calls they do not know do). The child must live and its
 * ranges be purged, one madvise each. */
Test(extent, no_batch_is_tried_under_a_seccomp_filter)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        struct sock_filter code[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 440 /* process_madvise */, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = {MA_ARRAY_LEN(code), code};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
            _exit(3);
        pages_batch_state = 0; /* as if no batch had been tried yet */
        pages_opt_batch = true;
        unsigned calls;
        bool ok = purge_four_ranges(&calls);
        _exit(!ok ? 1 : calls != 4 ? 2 : 0);
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(!WIFSIGNALED(st), "the child was killed by signal %d (a batch tried under the filter)", WTERMSIG(st));
    cr_assert(WIFEXITED(st));
    cr_assert_neq(WEXITSTATUS(st), 3, "could not install the seccomp filter");
    cr_assert_eq(WEXITSTATUS(st), 0, "child status %d (1: a range not purged, 2: not one call per range)",
                 WEXITSTATUS(st));
}

/* A purge of many separate dirty extents makes one system call per batch
 * of PAGES_BATCH_MAX where the kernel allows it (stats count calls), and
 * every page of them reads back zero. */
Test(extent, a_purge_of_scattered_extents_batches_its_system_calls)
{
    enum { N = 100 };
    const size_t S = pages_class(1);
    const unsigned szind = sc_size2index(S);
    bool zeroed;
    extent_t *e[2 * N];
    for (unsigned i = 0; i < 2 * N; i++) {
        e[i] = extent_alloc(&pool, S, PAGE, szind, false, &zeroed);
        cr_assert_not_null(e[i]);
        memset((void *)e[i]->addr, 0x77, S);
    }
    /* Every other one freed: N dirty extents that cannot coalesce. */
    uintptr_t freed[N];
    for (unsigned i = 0; i < N; i++) {
        freed[i] = e[2 * i]->addr;
        extent_dalloc(&pool, e[2 * i]);
    }
    cr_assert_eq(pool.dirty.nextents, N);
    settle_batching();
    uint64_t calls0 = pool.stats.nmadvise[0];
    cr_assert_eq(extent_purge_all(&pool), N * (S / PAGE));
    uint64_t calls = pool.stats.nmadvise[0] - calls0;
    const uint64_t batched = (N + PAGES_BATCH_MAX - 1) / PAGES_BATCH_MAX;
    if (tu_kernel_batches_madvise())
        cr_assert_eq(calls, batched, "%llu calls to purge %d extents", (unsigned long long)calls, N);
    else
        cr_assert_eq(calls, N, "%llu calls to purge %d extents", (unsigned long long)calls, N);
    for (unsigned i = 0; i < N; i++) {
        cr_assert_eq(((unsigned char *)freed[i])[0], 0, "extent %u not purged", i);
        cr_assert_eq(((unsigned char *)freed[i])[S - 1], 0, "extent %u not purged", i);
        cr_assert_eq(((unsigned char *)e[2 * i + 1]->addr)[0], 0x77, "live extent %u touched", i);
    }
    for (unsigned i = 0; i < N; i++)
        extent_dalloc(&pool, e[2 * i + 1]);
    extent_purge_all(&pool);
    check_pool(&pool);
}

Test(extent, pages_purge_forced_zeroes_memory)
{
    /* Straight from mmap, so that only the purge is under test here. */
    size_t size = 8 * PAGE;
    unsigned char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(p, MAP_FAILED);
    memset(p, 0x5a, size);
    uint64_t nm0 = pages_nmadvise;
    cr_assert(pages_purge_forced(p + 2 * PAGE, 4 * PAGE));
    cr_assert_gt(pages_nmadvise, nm0);
    for (size_t i = 0; i < size; i++) {
        unsigned char want = (i >= 2 * PAGE && i < 6 * PAGE) ? 0 : 0x5a;
        cr_assert_eq(p[i], want, "byte %zu after purging pages 2..5", i);
    }
    /* Purged pages are usable again. */
    p[3 * PAGE] = 7;
    cr_assert_eq(p[3 * PAGE], 7);
    /* Lazy purging: contents undefined, pages stay usable. */
    cr_assert(pages_purge_lazy(p, size));
    p[0] = 1;
    cr_assert_eq(p[0], 1);
    munmap(p, size);
}

/* Runs of pages purged in one call where the kernel allows it, each range
 * zeroed and nothing between them touched, also when a range in the
 * middle is not mapped (the kernel stops there; the rest must still be
 * purged). */
Test(extent, pages_purge_batch_purges_every_range_in_as_few_calls_as_it_can)
{
    const size_t npages = 16;
    unsigned char *p = mmap(NULL, npages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(p, MAP_FAILED);
    memset(p, 0x5a, npages * PAGE);
    /* Pages 1, 3-4, 7 and 9. */
    pages_range_t r[] = {{p + PAGE, PAGE}, {p + 3 * PAGE, 2 * PAGE}, {p + 7 * PAGE, PAGE}, {p + 9 * PAGE, PAGE}};
    const bool batches = tu_kernel_batches_madvise();
    settle_batching();
    uint64_t nm0 = pages_nmadvise;
    unsigned calls = pages_purge_batch(r, 4, false);
    cr_assert_eq(calls, batches ? 1u : 4u, "%u system calls for 4 ranges (kernel batches: %d)", calls, batches);
    cr_assert_eq(pages_nmadvise - nm0, calls);
    for (size_t i = 0; i < npages * PAGE; i += 64) {
        size_t pg = i / PAGE;
        bool purged = pg == 1 || pg == 3 || pg == 4 || pg == 7 || pg == 9;
        cr_assert_eq(p[i], purged ? 0 : 0x5a, "byte %zu (page %zu)", i, pg);
    }
    /* A hole in the middle: pages 11 and 13 purged all the same. */
    memset(p, 0x5a, 12 * PAGE);
    memset(p + 13 * PAGE, 0x5a, 3 * PAGE);
    cr_assert_eq(munmap(p + 12 * PAGE, PAGE), 0);
    pages_range_t h[] = {{p + 11 * PAGE, PAGE}, {p + 12 * PAGE, PAGE}, {p + 13 * PAGE, PAGE}};
    pages_purge_batch(h, 3, false);
    cr_assert_eq(p[11 * PAGE], 0, "the range before the hole was not purged");
    cr_assert_eq(p[13 * PAGE], 0, "the range after the hole was not purged");
    cr_assert_eq(p[10 * PAGE], 0x5a);
    cr_assert_eq(p[14 * PAGE], 0x5a);
    /* Lazy: contents undefined, pages usable. */
    pages_purge_batch(r, 4, true);
    p[PAGE] = 3;
    cr_assert_eq(p[PAGE], 3);
    munmap(p, 12 * PAGE);
    munmap(p + 13 * PAGE, 3 * PAGE);
}

Test(extent, pages_system_calls_report_the_kernel_and_leave_errno_alone)
{
    /* The page size comes from the auxiliary vector (raw reads of
     * /proc/self/auxv, see common/sys.h): the same as libc's. */
    cr_assert_eq(pages_os_page_size(), (size_t)sysconf(_SC_PAGESIZE));
    /* Failing calls return failure without touching errno. */
    errno = 1234;
    cr_assert_null(pages_map((size_t)1 << 62, PAGE), "a 4 EiB mapping cannot succeed");
    cr_assert_eq(errno, 1234, "pages_map's failure leaked errno %d", errno);
    unsigned char *p = pages_map(4 * PAGE, PAGE);
    cr_assert_not_null(p);
    cr_assert_not(pages_purge_forced(p + 1, PAGE), "madvise of an unaligned address must fail");
    cr_assert_eq(errno, 1234, "a failed madvise leaked errno %d", errno);
    cr_assert(pages_purge_forced(p, PAGE));
    cr_assert_eq(errno, 1234);
    pages_unmap(p, 4 * PAGE);
}

/* Whether [addr, addr + len) lies entirely in read-write mappings of this
 * process (from /proc/self/maps). */
static bool range_is_rw_mapped(uintptr_t addr, size_t len, uintptr_t *gap)
{
    FILE *f = fopen("/proc/self/maps", "r");
    cr_assert_not_null(f);
    static uintptr_t st[65536], en[65536];
    static bool rw[65536];
    unsigned n = 0;
    char line[4096];
    while (n < 65536 && fgets(line, sizeof(line), f) != NULL) {
        unsigned long s0, e0;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &s0, &e0, perms) != 3)
            continue;
        st[n] = s0;
        en[n] = e0;
        rw[n] = perms[0] == 'r' && perms[1] == 'w';
        n++;
    }
    fclose(f);
    uintptr_t cur = addr;
    while (cur < addr + len) {
        unsigned i = 0;
        while (i < n && !(st[i] <= cur && cur < en[i]))
            i++;
        if (i == n || !rw[i]) {
            *gap = cur;
            return false;
        }
        cur = en[i];
    }
    return true;
}

Test(extent, pages_map_returns_whole_aligned_mappings)
{
    /* mmap hands out OS pages; PAGE may be larger (LG_PAGE=16 on a 4 KiB
     * system). Whatever mmap returns, pages_map must give size bytes of
     * its own mapping at the alignment asked for. A PROT_NONE mapping of a
     * varying number of OS pages shifts where the kernel puts the next one
     * (and sits just above it: any overrun lands on it). */
    const size_t os = (size_t)sysconf(_SC_PAGESIZE);
    const size_t aligns[] = {PAGE, 2 * PAGE, (size_t)2 << 20, (size_t)4 << 20};
    const size_t sizes[] = {PAGE, 3 * PAGE};
    for (size_t ai = 0; ai < MA_ARRAY_LEN(aligns); ai++) {
        for (size_t si = 0; si < MA_ARRAY_LEN(sizes); si++) {
            for (size_t shift = 0; shift <= PAGE / os + 2; shift++) {
                size_t align = aligns[ai], size = sizes[si];
                void *pert = NULL;
                if (shift > 0) {
                    pert = mmap(NULL, shift * os, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                    cr_assert_neq(pert, MAP_FAILED);
                }
                unsigned char *p = pages_map(size, align);
                cr_assert_not_null(p);
                cr_assert_eq((uintptr_t)p % align, 0, "pages_map(%zu, %zu) = %p", size, align, (void *)p);
                uintptr_t gap = 0;
                bool ok = range_is_rw_mapped((uintptr_t)p, size, &gap);
                cr_assert(ok,
                          "pages_map(%zu, %zu) = %p, but %#lx (offset %#lx) is not in a read-write mapping "
                          "(PAGE %zu, OS page %zu)",
                          size, align, (void *)p, (unsigned long)gap, (unsigned long)(gap - (uintptr_t)p), PAGE,
                          os);
                for (size_t i = 0; i < size; i += os) {
                    cr_assert_eq(p[i], 0, "fresh pages read zero");
                    p[i] = 1;
                }
                pages_unmap(p, size);
                if (pert != NULL)
                    munmap(pert, shift * os);
            }
        }
    }
}

/* Random allocations and frees against a model: extents never overlap,
 * contents survive, and the pool's invariants hold throughout. */
Test(extent, random_alloc_and_free_keep_the_pool_consistent)
{
    enum { N = 256 };
    extent_t *live[N] = {0};
    uint64_t seed = 12345;
    for (int step = 0; step < 4000; step++) {
        unsigned k = (unsigned)(tu_rand(&seed) % N);
        if (live[k] == NULL) {
            size_t np = 1 + tu_rand(&seed) % (tu_rand(&seed) % 4 == 0 ? 64 : 6);
            size_t size = pages_class(np);
            size_t align = (tu_rand(&seed) % 5 == 0) ? PAGE << (tu_rand(&seed) % 6) : PAGE;
            bool zeroed;
            extent_t *e = extent_alloc(&pool, size, align, sc_size2index(size), false, &zeroed);
            cr_assert_not_null(e);
            cr_assert_eq(e->addr % align, 0);
            if (zeroed)
                cr_assert_eq(*(uint64_t *)e->addr, 0, "zeroed extent is not zero");
            tu_fill((void *)e->addr, 64);
            tu_fill((void *)(e->addr + size - 64), 64);
            live[k] = e;
        } else {
            extent_t *e = live[k];
            cr_assert(tu_check((void *)e->addr, 64));
            cr_assert(tu_check((void *)(e->addr + e->size - 64), 64));
            if (tu_rand(&seed) % 8 == 0 && e->size > PAGE) {
                size_t ns = pages_class(e->size / PAGE / 2);
                if (ns < e->size && extent_shrink(&pool, e, ns, sc_size2index(ns))) {
                    tu_fill((void *)(e->addr + ns - 64), 64);
                    continue;
                }
            }
            extent_dalloc(&pool, e);
            live[k] = NULL;
        }
        if (step % 97 == 0) {
            extent_t *es[N];
            unsigned n = 0;
            for (unsigned i = 0; i < N; i++)
                if (live[i] != NULL)
                    es[n++] = live[i];
            check_disjoint(es, n);
            check_pool(&pool);
        }
        if (step % 1000 == 999)
            extent_purge_all(&pool);
    }
    for (unsigned i = 0; i < N; i++)
        if (live[i] != NULL)
            extent_dalloc(&pool, live[i]);
    check_pool(&pool);
    cr_assert_eq(pool.stats.active_pages, 0);
}

/* ---------------------------------------------------------------------
 * The pairing heap.
 */

enum { HN = 3000 };

static extent_t *heap_nodes(void)
{
    extent_t *v = aligned_alloc(64, HN * sizeof(extent_t));
    cr_assert_not_null(v);
    memset(v, 0, HN * sizeof(extent_t));
    /* Distinct addresses in random order: a shuffled permutation. */
    uint64_t seed = 99;
    for (unsigned i = 0; i < HN; i++)
        v[i].addr = (uintptr_t)(i + 1) * PAGE;
    for (unsigned i = HN - 1; i > 0; i--) {
        unsigned j = (unsigned)(tu_rand(&seed) % (i + 1));
        uintptr_t t = v[i].addr;
        v[i].addr = v[j].addr;
        v[j].addr = t;
    }
    return v;
}

static extent_t *model_min(extent_t *v, const bool *in)
{
    extent_t *m = NULL;
    for (unsigned i = 0; i < HN; i++)
        if (in[i] && (m == NULL || v[i].addr < m->addr))
            m = &v[i];
    return m;
}

Test(extent_heap, behaves_like_a_priority_queue)
{
    extent_t *v = heap_nodes();
    static bool in[HN];
    memset(in, 0, sizeof(in));
    extent_heap_t h = {NULL};
    cr_assert_null(extent_heap_first(&h));
    uint64_t seed = 7;
    unsigned nin = 0;
    /* Interleaved inserts, removals of the first, and removals of arbitrary
     * elements; after each, first() is the lowest address present. */
    for (int step = 0; step < 20000; step++) {
        unsigned r = (unsigned)(tu_rand(&seed) % 10);
        if (r < 5 || nin == 0) {
            unsigned i = (unsigned)(tu_rand(&seed) % HN);
            if (!in[i]) {
                extent_heap_insert(&h, &v[i]);
                in[i] = true;
                nin++;
            }
        } else if (r < 7) {
            extent_t *f = extent_heap_first(&h);
            cr_assert_eq(f, model_min(v, in));
            extent_heap_remove(&h, f);
            in[f - v] = false;
            nin--;
        } else {
            unsigned i = (unsigned)(tu_rand(&seed) % HN);
            while (!in[i])
                i = (i + 1) % HN;
            extent_heap_remove(&h, &v[i]);
            in[i] = false;
            nin--;
        }
        cr_assert_eq(extent_heap_first(&h), model_min(v, in), "step %d", step);
    }
    /* Drain: strictly increasing addresses. */
    uintptr_t prev = 0;
    while (nin > 0) {
        extent_t *f = extent_heap_first(&h);
        cr_assert_not_null(f);
        cr_assert_gt(f->addr, prev);
        prev = f->addr;
        extent_heap_remove(&h, f);
        nin--;
    }
    cr_assert_null(extent_heap_first(&h));
    free(v);
}

Test(extent_heap, fill_then_remove_arbitrary_then_drain_sorted)
{
    extent_t *v = heap_nodes();
    extent_heap_t h = {NULL};
    for (unsigned i = 0; i < HN; i++)
        extent_heap_insert(&h, &v[i]);
    cr_assert_eq(extent_heap_first(&h)->addr, PAGE);
    /* Remove every third element (in insertion order: random addresses),
     * including, at some point, the current minimum. */
    static bool removed[HN + 1];
    memset(removed, 0, sizeof(removed));
    for (unsigned i = 0; i < HN; i += 3) {
        extent_heap_remove(&h, &v[i]);
        removed[v[i].addr / PAGE] = true;
    }
    extent_heap_remove(&h, extent_heap_first(&h));
    unsigned want = 1;
    while (removed[want])
        want++;
    removed[want] = true;
    /* Pop everything: exactly the remaining addresses in increasing order. */
    unsigned popped = 0;
    for (unsigned a = 1; a <= HN; a++) {
        if (removed[a])
            continue;
        extent_t *f = extent_heap_first(&h);
        cr_assert_not_null(f);
        cr_assert_eq(f->addr, (uintptr_t)a * PAGE, "popped %#lx, want %#lx", (unsigned long)f->addr,
                     (unsigned long)a * PAGE);
        extent_heap_remove(&h, f);
        popped++;
    }
    cr_assert_null(extent_heap_first(&h));
    cr_assert_eq(popped, HN - (HN + 2) / 3 - 1);
    free(v);
}
