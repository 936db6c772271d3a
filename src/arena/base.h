/*
 * base: the allocator's own metadata memory (extent records, page-map
 * leaves, arenas, thread-cache stacks, profiler records).
 *
 * A bump allocator over mmapped blocks, plus exact-size free lists so that
 * records of one kind are recycled. Never returns memory to the OS: the
 * number of records is bounded by the peak of what they describe.
 */
#ifndef MYALLOC_BASE_H
#define MYALLOC_BASE_H

#include "../common/common.h"

/* Zeroed memory of size bytes aligned to align (<= PAGE), or NULL. */
void *base_alloc(size_t size, size_t align);

/* A free list of fixed-size records: base_cache_get pops one or carves a
 * new one; base_cache_put pushes it back. Thread-safe. A record comes back
 * zeroed unless no_zero is set: for memory whose user writes before it
 * reads (a thread cache's stacks: clearing an exited thread's 146 KiB block
 * took 7% of the CPU time of thread churn). */
typedef struct base_cache {
    size_t size, align;
    void *head;
    bool no_zero;
} base_cache_t;

#define BASE_CACHE_INIT(type) {sizeof(type), _Alignof(type) < 64 ? 64 : _Alignof(type), NULL, false}

void *base_cache_get(base_cache_t *c);
void base_cache_put(base_cache_t *c, void *p);

/* Bytes mapped for metadata so far. */
size_t base_mapped_bytes(void);
size_t base_allocated_bytes(void);
/* Bytes of metadata actually resident (mincore). */
size_t base_resident_bytes(void);

void base_prefork(void);
void base_postfork_parent(void);
void base_postfork_child(void);

#endif
