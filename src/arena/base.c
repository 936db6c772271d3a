/*
 * base: metadata allocation, see base.h.
 */
#include "base.h"

#include <string.h>
#include <sys/mman.h>

#include "../common/mutex.h"
#include "pages.h"

#define BASE_BLOCK_MIN ((size_t)2 << 20)

static ma_mutex_t base_lock = MA_MUTEX_INITIALIZER;
static uintptr_t base_cur, base_end;
static size_t base_mapped, base_allocated;

/* Every block mapped, for base_resident_bytes (metadata is touched
 * sparsely: page-map leaves are 2 MiB each but only the parts covering used
 * memory are ever written).
 *
 * A block made for a big allocation (a page-map leaf) holds it alone, and
 * its record is carved from the current block: records of a leaf's own
 * block, right after the leaf, touched a page per leaf (and the kernel a
 * page-table page, each in its own 2 MiB), for the leaf of every GiB a
 * chunk spans (extent.c's rtree_prepare): malloc(1 << 46) cost 258 MiB of
 * RSS. Any other block starts with its first allocation, page-aligned (no
 * page of its own for the record), then its record, then what comes next. */
typedef struct base_block {
    struct base_block *next;
    void *start;
    size_t size;
} base_block_t;
static base_block_t *base_blocks;

static void base_block_note(base_block_t *b, void *start, size_t size)
{
    b->next = base_blocks;
    b->start = start;
    b->size = size;
    base_blocks = b;
    base_mapped += size;
}

/* Under base_lock: a block of its own for an allocation of at least half a
 * block, when the current block has room for its record; NULL otherwise. */
static void *base_alloc_alone(size_t size, size_t align)
{
    uintptr_t r = MA_ALIGN_UP(base_cur, 16);
    if (base_cur == 0 || size < BASE_BLOCK_MIN / 2 || r + sizeof(base_block_t) > base_end)
        return NULL;
    size_t block = PAGE_CEIL(size);
    void *m = pages_map(block, MA_MAX(align, PAGE));
    if (m == NULL)
        return NULL;
    base_cur = r + sizeof(base_block_t);
    base_block_note((base_block_t *)r, m, block);
    return m;
}

void *base_alloc(size_t size, size_t align)
{
    if (align < 16)
        align = 16;
    ma_mutex_lock(&base_lock);
    uintptr_t p = MA_ALIGN_UP(base_cur, align);
    if (base_cur == 0 || p + size > base_end) {
        void *alone = base_alloc_alone(size, align);
        if (alone != NULL) {
            p = (uintptr_t)alone;
            goto done;
        }
        size_t block = MA_MAX(BASE_BLOCK_MIN, PAGE_CEIL(size + align + 16 + sizeof(base_block_t)));
        void *m = pages_map(block, PAGE);
        if (m == NULL) {
            ma_mutex_unlock(&base_lock);
            return NULL;
        }
        p = MA_ALIGN_UP((uintptr_t)m, align);
        base_block_t *b = (base_block_t *)MA_ALIGN_UP(p + size, 16);
        base_block_note(b, m, block);
        base_end = (uintptr_t)m + block;
        base_cur = (uintptr_t)(b + 1); /* the block's next allocation goes past the record */
    } else {
        base_cur = p + size;
    }
done:
    base_allocated += size;
    ma_mutex_unlock(&base_lock);
    return (void *)p; /* fresh mmap memory is zero */
}

void *base_cache_get(base_cache_t *c)
{
    ma_mutex_lock(&base_lock);
    void *p = c->head;
    if (p != NULL)
        c->head = *(void **)p;
    ma_mutex_unlock(&base_lock);
    if (p == NULL)
        return base_alloc(c->size, c->align);
    if (!c->no_zero)
        memset(p, 0, c->size);
    return p;
}

void base_cache_put(base_cache_t *c, void *p)
{
    ma_mutex_lock(&base_lock);
    *(void **)p = c->head;
    c->head = p;
    ma_mutex_unlock(&base_lock);
}

size_t base_mapped_bytes(void)
{
    return ma_load_relaxed(&base_mapped);
}

MA_WARM_TEXT size_t base_resident_bytes(void)
{
    const size_t osp = pages_os_page_size(); /* mincore's unit */
    size_t resident = 0;
    unsigned char vec[256];
    ma_mutex_lock(&base_lock);
    for (base_block_t *b = base_blocks; b != NULL; b = b->next) {
        for (size_t off = 0; off < b->size; off += sizeof(vec) * osp) {
            size_t len = MA_MIN(b->size - off, sizeof(vec) * osp);
            if (mincore((char *)b->start + off, len, vec) != 0) {
                resident += len; /* cannot tell: count it */
                continue;
            }
            for (size_t i = 0; i < (len + osp - 1) / osp; i++)
                resident += (vec[i] & 1) ? osp : 0;
        }
    }
    ma_mutex_unlock(&base_lock);
    return resident;
}

size_t base_allocated_bytes(void)
{
    return ma_load_relaxed(&base_allocated);
}

MA_WARM_TEXT void base_prefork(void) { ma_mutex_prefork(&base_lock); }
MA_WARM_TEXT void base_postfork_parent(void) { ma_mutex_postfork_parent(&base_lock); }
MA_WARM_TEXT void base_postfork_child(void) { ma_mutex_postfork_child(&base_lock); }
