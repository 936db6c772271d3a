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
 * memory are ever written). A block's record sits right after the
 * allocation the block was made for, not at its start: that allocation
 * begins on the block's first page, page-aligned, and a page-map leaf
 * aligned so touches one page per 2 MiB chunk it describes, not two, and
 * no page of its own for the record. */
typedef struct base_block {
    struct base_block *next;
    void *start;
    size_t size;
} base_block_t;
static base_block_t *base_blocks;

void *base_alloc(size_t size, size_t align)
{
    if (align < 16)
        align = 16;
    ma_mutex_lock(&base_lock);
    uintptr_t p = MA_ALIGN_UP(base_cur, align);
    if (base_cur == 0 || p + size > base_end) {
        size_t block = MA_MAX(BASE_BLOCK_MIN, PAGE_CEIL(size + align + 16 + sizeof(base_block_t)));
        void *m = pages_map(block, PAGE);
        if (m == NULL) {
            ma_mutex_unlock(&base_lock);
            return NULL;
        }
        base_mapped += block;
        p = MA_ALIGN_UP((uintptr_t)m, align);
        base_block_t *b = (base_block_t *)MA_ALIGN_UP(p + size, 16);
        b->next = base_blocks;
        b->start = m;
        b->size = block;
        base_blocks = b;
        base_end = (uintptr_t)m + block;
        base_cur = (uintptr_t)(b + 1); /* the block's next allocation goes past the record */
    } else {
        base_cur = p + size;
    }
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

size_t base_resident_bytes(void)
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

void base_prefork(void) { ma_mutex_prefork(&base_lock); }
void base_postfork_parent(void) { ma_mutex_postfork_parent(&base_lock); }
void base_postfork_child(void) { ma_mutex_postfork_child(&base_lock); }
