/*
 * nullalloc: the harness's own time, for the pair rows of `make bench`.
 *
 * Not an allocator: malloc of exactly NULLALLOC_SIZE bytes returns one
 * static block every time and free does nothing, so a `pairs` run under it
 * costs the loop, its two calls through the PLT and its reads and writes of
 * the object, and no allocator work at all. No allocator can run `pairs`
 * faster (short of being inlined into the program), which bounds what a
 * time ratio between allocators can show on those rows.
 *
 * Everything else (the C library's own buffers) is carved from mmap'd
 * chunks and never reused. Only for `pairs`: a program that keeps two
 * objects of that size alive at once gets the same memory twice.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BLOCK_MAX 65536
#define CHUNK (64u << 20)

static char block[BLOCK_MAX] __attribute__((aligned(64)));
static size_t block_size; /* 0 until the constructor has read NULLALLOC_SIZE */
static char *bump, *bump_end;

__attribute__((constructor)) static void nullalloc_init(void)
{
    const char *s = getenv("NULLALLOC_SIZE");
    size_t n = s ? strtoul(s, NULL, 10) : 0;
    block_size = n <= BLOCK_MAX ? n : 0;
}

/* Each bump object is preceded by 64 bytes holding its size (for realloc). */
static void *bump_alloc(size_t n)
{
    size_t want = n;
    n = 64 + ((n + 63) & ~(size_t)63);
    if (want > CHUNK - 64)
        return NULL;
    if (bump == NULL || n > (size_t)(bump_end - bump)) {
        void *c = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (c == MAP_FAILED)
            return NULL;
        bump = c;
        bump_end = bump + CHUNK;
    }
    char *p = bump;
    bump += n;
    *(size_t *)p = want;
    return p + 64;
}

void *malloc(size_t n)
{
    if (__builtin_expect(n == block_size, 1))
        return block;
    return bump_alloc(n);
}

void free(void *p)
{
    (void)p;
}

void *calloc(size_t a, size_t b)
{
    size_t n;
    if (__builtin_mul_overflow(a, b, &n))
        return NULL;
    void *p = malloc(n);
    return p ? memset(p, 0, n) : NULL;
}

void *realloc(void *p, size_t n)
{
    void *q = bump_alloc(n);
    if (q && p) {
        size_t old = p == (void *)block ? block_size : *(size_t *)((char *)p - 64);
        memcpy(q, p, old < n ? old : n);
    }
    return q;
}
