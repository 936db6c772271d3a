/*
 * rtree: the page map, see rtree.h.
 */
#include "rtree.h"

#include <string.h>

#include "../common/mutex.h"
#include "base.h"
#include "pages.h"

MA_LARGE_BSS rtree_elm_t *rtree_root[RTREE_ROOT_N];
static ma_mutex_t rtree_lock = MA_MUTEX_INITIALIZER; /* serialises leaf creation */

_Static_assert(SC_NBINS < 255, "the fast map stores binind + 1 in a byte");

/* The user address space is 2^47 bytes on x86-64 (4-level paging). */
#define FASTMAP_LG_SPACE 47
/* A fallback map covers at most the first 2^38 bytes (a 64 MiB map). */
#define FASTMAP_LG_FALLBACK_MAX 38

uintptr_t rtree_fastmap_fallback_pages(uintptr_t in_use)
{
    unsigned lg = 32; /* at least the first 4 GiB */
    while (lg < FASTMAP_LG_FALLBACK_MAX && ((uintptr_t)1 << lg) / 4 <= in_use)
        lg++;
    if (((uintptr_t)1 << lg) / 4 <= in_use)
        return 0;
    return (uintptr_t)1 << (lg - LG_PAGE);
}

/* Maps of the whole address space come from one reservation of
 * fastmap_block_n of them, made for the first: the heap's chunks, mapped
 * after it, then lie together below it (mmap places each next to the
 * last) rather than each arena's between two maps 32 GiB apart, and every
 * map covers all arenas' slabs with a page or two instead of a page per
 * arena's chunks. */
static unsigned fastmap_block_n = 1;
static uint8_t *fastmap_block;
static unsigned fastmap_block_left;

void rtree_fastmap_plan(unsigned n)
{
    fastmap_block_n = n < 1 ? 1 : n;
}

static void *fastmap_reserve(size_t npages)
{
    void *m = NULL;
    ma_mutex_lock(&rtree_lock);
    if (fastmap_block == NULL && fastmap_block_n > 1) {
        fastmap_block = pages_map(npages * fastmap_block_n, PAGE);
        if (fastmap_block != NULL)
            fastmap_block_left = fastmap_block_n;
        else
            fastmap_block_n = 1; /* one at a time, as they are needed */
    }
    if (fastmap_block_left != 0) {
        m = fastmap_block + (size_t)(fastmap_block_n - fastmap_block_left) * npages;
        fastmap_block_left--;
    }
    ma_mutex_unlock(&rtree_lock);
    return m != NULL ? m : pages_map(npages, PAGE);
}

/* A map of the whole address space first. When that reservation fails and
 * the allocator's own memory (fm lives in it) sits in the low addresses, a
 * map of those: valgrind places a program's mappings in its first tens of
 * GiB and grants only two 32 GiB reservations, so the second arena on ran
 * without a map there (the first two arenas' maps take them) and
 * every free of its threads took the slow path: under callgrind, larson
 * 16 B-1 KiB with 8 threads counted 442 instructions per operation, 209
 * with the fallback (tcmalloc 212, the harness included). Where mappings live high, as in a
 * process under a ulimit -v, a map of the low addresses would cover none
 * of them and is not made. */
void rtree_fastmap_init(rtree_fastmap_t *fm)
{
    size_t npages = (size_t)1 << (FASTMAP_LG_SPACE - LG_PAGE);
    void *m = fastmap_reserve(npages);
    if (m == NULL) {
        npages = rtree_fastmap_fallback_pages((uintptr_t)fm);
        if (npages == 0 || (m = pages_map(npages, PAGE)) == NULL)
            return; /* every free takes the radix-tree path */
    }
    fm->map = m;
    ma_store_release(&fm->npages, npages);
}

MA_NOINLINE rtree_elm_t *rtree_leaf_create(uintptr_t i)
{
    ma_mutex_lock(&rtree_lock);
    rtree_elm_t *leaf = ma_load_acquire(&rtree_root[i]);
    if (leaf == NULL) {
        /* Page-aligned: the entries of a 2 MiB chunk fill one page. */
        leaf = base_alloc(RTREE_LEAF_N * sizeof(rtree_elm_t), PAGE);
        if (leaf != NULL)
            ma_store_release(&rtree_root[i], leaf);
    }
    ma_mutex_unlock(&rtree_lock);
    return leaf;
}

bool rtree_write_range(uintptr_t addr, size_t size, rtree_elm_t e)
{
    uintptr_t end = addr + size;
    while (addr < end) {
        rtree_elm_t *p = rtree_elm_get(addr);
        if (p == NULL)
            return false;
        /* Write within this leaf without re-walking the root. */
        uintptr_t leaf_end = MA_ALIGN_DOWN(addr, (uintptr_t)1 << RTREE_LG_LEAF_SPAN) +
                             ((uintptr_t)1 << RTREE_LG_LEAF_SPAN);
        uintptr_t stop = MA_MIN(end, leaf_end);
        for (; addr < stop; addr += PAGE, p++)
            ma_store_release(p, e);
    }
    return true;
}

MA_WARM_TEXT void rtree_prefork(void) { ma_mutex_prefork(&rtree_lock); }
MA_WARM_TEXT void rtree_postfork_parent(void) { ma_mutex_postfork_parent(&rtree_lock); }
MA_WARM_TEXT void rtree_postfork_child(void) { ma_mutex_postfork_child(&rtree_lock); }
