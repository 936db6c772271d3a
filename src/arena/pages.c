/*
 * pages: mmap/munmap/madvise wrappers.
 */
#include "pages.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_FREE
#define MADV_FREE 8
#endif

uint64_t pages_nmadvise;

void *pages_map(size_t size, size_t align)
{
    int saved = errno; /* a failed mmap must not leak ENOMEM into success paths */
    /* mmap aligns to the OS page only, which may be smaller than PAGE (a
     * 64 KiB-page build on 4 KiB pages): over-map by what alignment needs. */
    static size_t os_page;
    if (os_page == 0)
        os_page = pages_os_page_size();
    size_t total = size + (align > os_page ? align - os_page : 0);
    if (total < size)
        return NULL;
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
        errno = saved;
        return NULL;
    }
    uintptr_t start = (uintptr_t)p;
    uintptr_t aligned = MA_ALIGN_UP(start, align);
    if (aligned != start)
        munmap(p, aligned - start);
    uintptr_t end = start + total, aend = aligned + size;
    if (end != aend)
        munmap((void *)aend, end - aend);
    errno = saved;
    return (void *)aligned;
}

void pages_unmap(void *addr, size_t size)
{
    munmap(addr, size);
}

bool pages_purge_forced(void *addr, size_t size)
{
    ma_fetch_add(&pages_nmadvise, 1);
    return madvise(addr, size, MADV_DONTNEED) == 0;
}

bool pages_purge_lazy(void *addr, size_t size)
{
    static int lazy_broken;
    if (!ma_load_relaxed(&lazy_broken)) {
        ma_fetch_add(&pages_nmadvise, 1);
        int saved = errno;
        if (madvise(addr, size, MADV_FREE) == 0)
            return true;
        errno = saved;
        ma_store_relaxed(&lazy_broken, 1); /* kernel without MADV_FREE */
    }
    return pages_purge_forced(addr, size);
}

void pages_nohuge(void *addr, size_t size)
{
    ma_fetch_add(&pages_nmadvise, 1);
    int saved = errno;
    madvise(addr, size, MADV_NOHUGEPAGE);
    errno = saved;
}

void pages_huge(void *addr, size_t size)
{
    ma_fetch_add(&pages_nmadvise, 1);
    int saved = errno;
    madvise(addr, size, MADV_HUGEPAGE);
    errno = saved;
}

size_t pages_os_page_size(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}
