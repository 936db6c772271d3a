/*
 * prof_scratch: scratch memory and sorting for dumps, see prof_scratch.h.
 */
#include "prof_scratch.h"

#include <string.h>

#include "../arena/pages.h"

#define SCRATCH_CHUNK ((size_t)1 << 20)

struct prof_scratch_chunk {
    prof_scratch_chunk_t *next;
    size_t size;
};

#define HDR MA_ALIGN_UP(sizeof(prof_scratch_chunk_t), 16)

void prof_scratch_init(prof_scratch_t *s)
{
    memset(s, 0, sizeof(*s));
}

void *prof_scratch_alloc(prof_scratch_t *s, size_t size)
{
    size = MA_ALIGN_UP(size == 0 ? 16 : size, 16);
    if (size > s->left) {
        size_t need = size + HDR;
        if (need < size)
            goto fail;
        size_t csize = PAGE_CEIL(MA_MAX(SCRATCH_CHUNK, need));
        prof_scratch_chunk_t *c = pages_map(csize, PAGE);
        if (c == NULL)
            goto fail;
        c->size = csize;
        c->next = s->chunks;
        s->chunks = c;
        s->cur = (char *)c + HDR;
        s->left = csize - HDR;
    }
    void *p = s->cur;
    s->cur += size;
    s->left -= size;
    return p;
fail:
    s->failed = true;
    return NULL;
}

char *prof_scratch_strndup(prof_scratch_t *s, const char *str, size_t len)
{
    char *p = prof_scratch_alloc(s, len + 1);
    if (p != NULL) {
        memcpy(p, str, len);
        p[len] = '\0';
    }
    return p;
}

void prof_scratch_free(prof_scratch_t *s)
{
    prof_scratch_chunk_t *c = s->chunks;
    while (c != NULL) {
        prof_scratch_chunk_t *next = c->next;
        pages_unmap(c, c->size);
        c = next;
    }
    memset(s, 0, sizeof(*s));
}

static void swap_bytes(char *a, char *b, size_t size)
{
    char tmp[256];
    memcpy(tmp, a, size);
    memcpy(a, b, size);
    memcpy(b, tmp, size);
}

static void sift_down(char *base, size_t root, size_t n, size_t size, prof_cmp_fn *cmp, void *ctx)
{
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= n)
            return;
        if (child + 1 < n && cmp(base + child * size, base + (child + 1) * size, ctx) < 0)
            child++;
        if (cmp(base + root * size, base + child * size, ctx) >= 0)
            return;
        swap_bytes(base + root * size, base + child * size, size);
        root = child;
    }
}

void prof_sort(void *base, size_t n, size_t size, prof_cmp_fn *cmp, void *ctx)
{
    char *b = base;
    if (n < 2 || size > 256)
        return;
    for (size_t i = n / 2; i-- > 0;)
        sift_down(b, i, n, size, cmp, ctx);
    for (size_t end = n - 1; end > 0; end--) {
        swap_bytes(b, b + end * size, size);
        sift_down(b, 0, end, size, cmp, ctx);
    }
}

uint64_t prof_hash_bytes(const void *p, size_t len, uint64_t seed)
{
    const unsigned char *c = p;
    uint64_t h = 0xcbf29ce484222325ULL ^ seed;
    for (size_t i = 0; i < len; i++) {
        h ^= c[i];
        h *= 0x100000001b3ULL;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}
