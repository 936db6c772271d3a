/*
 * pages: the OS layer. Every mmap / munmap / madvise the allocator makes
 * goes through here.
 */
#ifndef MYALLOC_PAGES_H
#define MYALLOC_PAGES_H

#include <sys/uio.h>

#include "../sizeclass/sizeclass.h"

/* Map size bytes (a multiple of PAGE) aligned to align (a power of two
 * >= PAGE), readable and writable, zero-filled. NULL on failure. */
void *pages_map(size_t size, size_t align);
void pages_unmap(void *addr, size_t size);

/* Give pages back and make them read as zero again (MADV_DONTNEED). */
bool pages_purge_forced(void *addr, size_t size);
/* Let the kernel take pages when it needs them (MADV_FREE); contents are
 * undefined afterwards. Falls back to pages_purge_forced. */
bool pages_purge_lazy(void *addr, size_t size);

/* A range of pages to purge: iov_base, iov_len (a multiple of PAGE). */
typedef struct iovec pages_range_t;
/* Most ranges one pages_purge_batch call takes. */
#define PAGES_BATCH_MAX 64

/* Purge n ranges (n <= PAGES_BATCH_MAX) as pages_purge_lazy (lazy) or
 * pages_purge_forced would, in one system call where the kernel allows it
 * (process_madvise on this process; not under a seccomp filter, not with
 * purge_batch:false), else one madvise per range. Returns the system
 * calls made. */
unsigned pages_purge_batch(const pages_range_t *ranges, unsigned n, bool lazy);

/* The purge_batch option. */
extern bool pages_opt_batch;
/* Whether batches go to process_madvise: 0 not known yet (the next batch
 * finds out; tests reset it), 1 yes, -1 no. */
extern int pages_batch_state;

void pages_nohuge(void *addr, size_t size);
void pages_huge(void *addr, size_t size);

/* The page size the OS uses (checked against PAGE at init). */
size_t pages_os_page_size(void);

/* Counters of system calls made, for stats and tests. */
extern uint64_t pages_nmadvise;

#endif
