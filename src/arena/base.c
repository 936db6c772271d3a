/*
 * base: metadata allocation, see base.h.
 */
#include "base.h"

#include <string.h>

#include "../common/mutex.h"
#include "pages.h"

#define BASE_BLOCK_MIN ((size_t)2 << 20)

static ma_mutex_t base_lock = MA_MUTEX_INITIALIZER;
static uintptr_t base_cur, base_end;
static size_t base_mapped, base_allocated;

void *base_alloc(size_t size, size_t align)
{
    if (align < 16)
        align = 16;
    ma_mutex_lock(&base_lock);
    uintptr_t p = MA_ALIGN_UP(base_cur, align);
    if (base_cur == 0 || p + size > base_end) {
        size_t block = MA_MAX(BASE_BLOCK_MIN, PAGE_CEIL(size + align));
        void *m = pages_map(block, PAGE);
        if (m == NULL) {
            ma_mutex_unlock(&base_lock);
            return NULL;
        }
        base_mapped += block;
        base_cur = (uintptr_t)m;
        base_end = base_cur + block;
        p = MA_ALIGN_UP(base_cur, align);
    }
    base_cur = p + size;
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

size_t base_allocated_bytes(void)
{
    return ma_load_relaxed(&base_allocated);
}

void base_prefork(void) { ma_mutex_prefork(&base_lock); }
void base_postfork_parent(void) { ma_mutex_postfork_parent(&base_lock); }
void base_postfork_child(void) { ma_mutex_postfork_child(&base_lock); }
