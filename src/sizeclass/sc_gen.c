/*
 * sc_gen: generates the size-class tables for one compile-time configuration.
 *
 *   sc_gen LG_PAGE LG_QUANTUM LG_NGROUP > sc_tables.h
 *
 * Run by the Makefile at build time (it is a build tool, so it may use
 * stdio). The scheme is jemalloc's: after the first group (Q, 2Q, ...,
 * NGROUP*Q) every doubling of size is split into NGROUP classes:
 *
 *     size = 2^lg_base + ndelta * 2^lg_delta,  lg_delta = lg_base - LG_NGROUP
 *
 * Classes below 2^(LG_PAGE + LG_NGROUP) (4 pages by default), and in any
 * case those up to SMALL_MAXCLASS_MIN (32 KiB, the default tcache_max), are
 * "small" (slab allocated); the rest are "large" (page runs). jemalloc
 * stops slabs at 14 KiB; we go on to 32 KiB, so that what the thread
 * caches hold is filled in batches from slabs, and objects of a class keep
 * their places in memory, instead of one page run per object carved out of
 * free extents. A small class's slab is the fewest pages that hold a whole
 * number of regions; for those extended classes, made larger (up to
 * SLAB_GROW_MAX bytes) until it holds SLAB_MIN_REGS regions: a 16 KiB
 * class gets 4-region slabs, not one page run per object.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_CLASSES 1024
#define LG_SIZE_MAX 62          /* the last group starts at 2^62 */
#define SMALL_MAXCLASS_MIN 32768
#define SLAB_MIN_REGS 4
#define SLAB_TAIL_FRAC 64
#define SLAB_SMALL_TAIL_FRAC 8
#define SLAB_GROW_MAX ((uint64_t)128 << 10)
#define LOOKUP_MAXCLASS 32768   /* sizes up to here use a table on the fast path (the default tcache_max: 8 KiB of table with a 16-byte quantum) */

typedef struct {
    int lg_base, lg_delta, ndelta;
    uint64_t size;
} cls_t;

/* The slab of a small class: the fewest pages whose tail (the bytes after
 * the last whole region) is at most 1/SLAB_TAIL_FRAC of the slab; for the
 * classes past jemalloc's small ones (extended), grown to SLAB_MIN_REGS
 * regions if that stays within SLAB_GROW_MAX.
 *
 * Smaller slabs give memory back: a slab returns to the pool only when all
 * its regions are free, and after a random 90% of a class is freed an
 * n-region slab is entirely free with probability 0.9^n (35% at 10 regions,
 * 3% at 32). jemalloc's rule (no tail at all) gives a 160 B class 5-page
 * slabs of 128 regions; a tail of up to 1/64 gives it 2 pages of 51.
 * Measured on the footprint workloads against the no-tail rule: final RSS
 * -2.5% (frag), -4% (threads), -3.6% (server), for +1.4% instructions on
 * frag. A looser bound costs more than it returns: at 1/16 (1-page slabs
 * of 6 x 640 B) frag took 24% more CPU time, at 1/8 twice as much: every
 * slab created and emptied goes through the extent pool. (Growing the
 * slabs of 2, 4, 8 and 12 KiB likewise cost 4% more RSS on frag.) */
static void slab_geometry(uint64_t size, uint64_t page, bool extended, uint64_t *pages, uint64_t *nregs)
{
    uint64_t p = 1;
    while ((p * page) % size * SLAB_TAIL_FRAC > p * page)
        p++;
    uint64_t r = p * page / size;
    if (extended && r < SLAB_MIN_REGS) {
        uint64_t k = (SLAB_MIN_REGS + r - 1) / r;
        while (k > 1 && p * k * page > SLAB_GROW_MAX)
            k--;
        p *= k;
        r *= k;
    }
    *pages = p;
    *nregs = r;
}

/* A bin's first slabs (arena.c, SLAB_SMALL_BIN_SLABS): the fewest pages
 * that hold two regions or more with a tail of at most
 * 1/SLAB_SMALL_TAIL_FRAC of the slab, for the classes below the extended
 * ones where that is fewer pages than the class's slab (big_pages,
 * big_nregs); otherwise the class's slab. A class with few objects then
 * holds them in a page or two, not in a 12-20 KiB slab mostly free: make
 * bench's churn (256 objects of 16 B-2 KiB per thread) spread a thread's
 * objects over 448 KiB of slabs for 294 KiB of regions. */
static void slab_geometry_small(uint64_t size, uint64_t page, bool extended, uint64_t big_pages,
                                uint64_t big_nregs, uint64_t *pages, uint64_t *nregs)
{
    *pages = big_pages;
    *nregs = big_nregs;
    if (extended)
        return;
    uint64_t p = 1;
    while (p < big_pages && (p * page < 2 * size || (p * page) % size * SLAB_SMALL_TAIL_FRAC > p * page))
        p++;
    if (p < big_pages) {
        *pages = p;
        *nregs = p * page / size;
    }
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: sc_gen LG_PAGE LG_QUANTUM LG_NGROUP\n");
        return 2;
    }
    int lg_page = atoi(argv[1]), lg_q = atoi(argv[2]), lg_ngroup = atoi(argv[3]);
    /* Quantum >= 16 keeps every pointer 16-byte aligned; the page bounds keep
     * slab bitmaps and region counts within what the code sizes for. */
    if (lg_page < 11 || lg_page > 16 || lg_q < 4 || lg_q > 7 || lg_q >= lg_page ||
        lg_ngroup < 1 || lg_ngroup > 4) {
        fprintf(stderr,
                "sc_gen: invalid configuration LG_PAGE=%d LG_QUANTUM=%d LG_NGROUP=%d\n"
                "  valid: 11 <= LG_PAGE <= 16, 4 <= LG_QUANTUM <= 7 (and < LG_PAGE), "
                "1 <= LG_NGROUP <= 4\n",
                lg_page, lg_q, lg_ngroup);
        return 1;
    }
    const uint64_t page = (uint64_t)1 << lg_page;
    const int ngroup = 1 << lg_ngroup;
    static cls_t cls[MAX_CLASSES];
    int n = 0;

    /* First group: Q, 2Q, ..., NGROUP*Q, written as 2^lg_q + (i-1) * 2^lg_q. */
    for (int i = 0; i < ngroup; i++)
        cls[n++] = (cls_t){lg_q, lg_q, i, ((uint64_t)1 << lg_q) * (uint64_t)(i + 1)};
    for (int lg_base = lg_q + lg_ngroup; lg_base <= LG_SIZE_MAX; lg_base++) {
        int lg_delta = lg_base - lg_ngroup;
        for (int nd = 1; nd <= ngroup; nd++) {
            uint64_t size = ((uint64_t)1 << lg_base) + ((uint64_t)nd << lg_delta);
            if (size > (uint64_t)INT64_MAX)
                break;
            cls[n++] = (cls_t){lg_base, lg_delta, nd, size};
        }
    }

    /* Small classes stop below 2^(LG_PAGE + LG_NGROUP) (4 pages by default)
     * or after SMALL_MAXCLASS_MIN, whichever is later: from there on the
     * spacing is at least a page, so every large class is a whole number of
     * pages (checked). */
    int nbins = 0;
    while (nbins < n && (cls[nbins].size < (page << lg_ngroup) || cls[nbins].size <= SMALL_MAXCLASS_MIN))
        nbins++;
    for (int i = nbins; i < n; i++) {
        if (cls[i].size % page != 0) {
            fprintf(stderr, "sc_gen: large class %llu is not a multiple of the page\n",
                    (unsigned long long)cls[i].size);
            return 1;
        }
    }
    int nlookup = 0;
    while (nlookup < n && cls[nlookup].size <= LOOKUP_MAXCLASS)
        nlookup++;
    int npagecls = 0;
    for (int i = 0; i < n; i++)
        npagecls += (cls[i].size % page) == 0;

    uint64_t maxregs = 0, maxpages = 0;
    for (int i = 0; i < nbins; i++) {
        uint64_t pages, nregs;
        slab_geometry(cls[i].size, page, cls[i].size >= (page << lg_ngroup), &pages, &nregs);
        if (nregs > maxregs)
            maxregs = nregs;
        if (pages > maxpages)
            maxpages = pages;
    }

    printf("/* Generated by sc_gen %d %d %d: do not edit. */\n", lg_page, lg_q, lg_ngroup);
    printf("#ifndef MYALLOC_SC_TABLES_H\n#define MYALLOC_SC_TABLES_H\n\n");
    printf("#define SC_LG_PAGE %d\n#define SC_LG_QUANTUM %d\n#define SC_LG_NGROUP %d\n",
           lg_page, lg_q, lg_ngroup);
    printf("#define SC_NSIZES %d\n", n);
    printf("#define SC_NBINS %d\n", nbins);
    printf("#define SC_SMALL_MAXCLASS ((size_t)%lluULL)\n", (unsigned long long)cls[nbins - 1].size);
    printf("#define SC_LARGE_MINCLASS ((size_t)%lluULL)\n", (unsigned long long)cls[nbins].size);
    /* The first slab class past jemalloc's bound (SC_LARGE_MINCLASS when
     * there is none). */
    int next = 0;
    while (next < nbins && cls[next].size < (page << lg_ngroup))
        next++;
    printf("#define SC_SLAB_EXTENDED_MINCLASS ((size_t)%lluULL)\n", (unsigned long long)cls[next].size);
    printf("#define SC_LARGE_MAXCLASS ((size_t)%lluULL)\n", (unsigned long long)cls[n - 1].size);
    printf("#define SC_LOOKUP_MAXCLASS ((size_t)%d)\n", LOOKUP_MAXCLASS);
    printf("#define SC_LOOKUP_NENTRIES %d\n", (LOOKUP_MAXCLASS >> lg_q) + 1);
    printf("#define SC_NLOOKUP_CLASSES %d\n", nlookup);
    printf("#define SC_SLAB_MAXREGS %llu\n", (unsigned long long)maxregs);
    printf("#define SC_SLAB_MAXPAGES %llu\n\n", (unsigned long long)maxpages);

    printf("#define SC_INIT_INDEX2SIZE { \\\n");
    for (int i = 0; i < n; i++)
        printf("    %lluULL, \\\n", (unsigned long long)cls[i].size);
    printf("}\n\n");

    printf("#define SC_INIT_CLASS_FORMULA { \\\n");
    for (int i = 0; i < n; i++)
        printf("    {%d, %d, %d}, \\\n", cls[i].lg_base, cls[i].lg_delta, cls[i].ndelta);
    printf("}\n\n");

    /* size -> {usable size, class << SC_LOOKUP_BIN_LG} for sizes up to LOOKUP_MAXCLASS,
     * indexed by (size + Q - 1) >> LG_QUANTUM; entry 0 (size 0) is the
     * smallest class. */
    printf("#define SC_INIT_LOOKUP { \\\n");
    for (int j = 0; j <= (LOOKUP_MAXCLASS >> lg_q); j++) {
        uint64_t size = (uint64_t)j << lg_q;
        int i = 0;
        while (cls[i].size < size)
            i++;
        printf("    {%llu, %d << SC_LOOKUP_BIN_LG},%s", (unsigned long long)cls[i].size, i,
               (j % 4 == 3) ? " \\\n" : "");
    }
    printf(" \\\n}\n\n");

    printf("#define SC_INIT_USIZE_BY_IND1 { 0, \\\n");
    for (int i = 0; i < nbins; i++)
        printf("    %llu, \\\n", (unsigned long long)cls[i].size);
    printf("}\n\n");

    /* Bin (small class) geometry: region size, the multiply-shift constant
     * that turns a region offset into its index (idx = (offset * magic) >>
     * 32, exact for offsets that are multiples of the region size: they are
     * below 2^18 * 2^12), the regions of the class's slabs and of a bin's
     * first slabs, then the pages of each (the same when the class has no
     * smaller slab). */
    printf("#define SC_INIT_BIN_INFO { \\\n");
    for (int i = 0; i < nbins; i++) {
        uint64_t size = cls[i].size, pages, nregs;
        slab_geometry(size, page, size >= (page << lg_ngroup), &pages, &nregs);
        uint64_t magic = (((uint64_t)1 << 32) + size - 1) / size;
        uint64_t spages, snregs;
        slab_geometry_small(size, page, size >= (page << lg_ngroup), pages, nregs, &spages, &snregs);
        /* Remote frees take bits or a list by class (arena.h: slabs of at
         * most 63 regions, SLAB_REMOTE_BITS): both of a class's slabs must
         * take the same. */
        if ((nregs <= 63) != (snregs <= 63)) {
            fprintf(stderr, "sc_gen: class %llu: slabs of %llu and %llu regions\n",
                    (unsigned long long)size, (unsigned long long)nregs, (unsigned long long)snregs);
            return 1;
        }
        if (pages > UINT16_MAX || nregs > UINT16_MAX) {
            fprintf(stderr, "sc_gen: class %llu: slabs of %llu pages, %llu regions (16 bits each)\n",
                    (unsigned long long)size, (unsigned long long)pages, (unsigned long long)nregs);
            return 1;
        }
        printf("    {%lluU, %lluU, {{%lluU, %lluU}}, %lluU, %lluU}, \\\n", (unsigned long long)size,
               (unsigned long long)magic, (unsigned long long)nregs, (unsigned long long)snregs,
               (unsigned long long)pages, (unsigned long long)spages);
    }
    printf("}\n\n#endif\n");
    (void)npagecls;
    return 0;
}
