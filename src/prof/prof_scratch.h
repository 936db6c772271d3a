/*
 * prof_scratch: memory and sorting for the profile writers.
 *
 * Dumps may run inside an allocation slow path (interval and gdump dumps),
 * so nothing here calls malloc: scratch memory is a bump allocator over
 * pages_map'd chunks, all unmapped at once when the dump is done, and the
 * sort is a heapsort (glibc's qsort may allocate).
 */
#ifndef MYALLOC_PROF_SCRATCH_H
#define MYALLOC_PROF_SCRATCH_H

#include "../common/common.h"

typedef struct prof_scratch_chunk prof_scratch_chunk_t;

typedef struct prof_scratch {
    prof_scratch_chunk_t *chunks; /* newest first */
    char *cur;                    /* free space of the newest chunk */
    size_t left;
    bool failed;                  /* some allocation returned NULL */
} prof_scratch_t;

void prof_scratch_init(prof_scratch_t *s);
/* size zeroed bytes aligned to 16, or NULL when the OS refuses memory. */
void *prof_scratch_alloc(prof_scratch_t *s, size_t size);
/* A copy of len bytes of str, NUL-terminated. */
char *prof_scratch_strndup(prof_scratch_t *s, const char *str, size_t len);
/* Unmap everything. */
void prof_scratch_free(prof_scratch_t *s);

/* Heapsort n elements of size bytes (size <= 256). */
typedef int prof_cmp_fn(const void *a, const void *b, void *ctx);
void prof_sort(void *base, size_t n, size_t size, prof_cmp_fn *cmp, void *ctx);

/* 64-bit hash of bytes (FNV-1a, finished with a multiply-shift). */
uint64_t prof_hash_bytes(const void *p, size_t len, uint64_t seed);

#endif
