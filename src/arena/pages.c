/*
 * pages: mmap/munmap/madvise wrappers (raw system calls: errno is never
 * touched, see common/sys.h).
 */
#include "pages.h"

#include <elf.h> /* AT_PAGESZ */
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../common/sys.h"

#ifndef MADV_FREE
#define MADV_FREE 8
#endif

uint64_t pages_nmadvise;

void *pages_map(size_t size, size_t align)
{
    /* mmap aligns to the OS page only, which may be smaller than PAGE (a
     * 64 KiB-page build on 4 KiB pages): over-map by what alignment needs. */
    size_t os_page = pages_os_page_size();
    size_t total = size + (align > os_page ? align - os_page : 0);
    if (total < size)
        return NULL;
    long r = ma_syscall(SYS_mmap, NULL, total, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (ma_sys_failed(r))
        return NULL;
    uintptr_t start = (uintptr_t)r;
    uintptr_t aligned = MA_ALIGN_UP(start, align);
    if (aligned != start)
        pages_unmap((void *)start, aligned - start);
    uintptr_t end = start + total, aend = aligned + size;
    if (end != aend)
        pages_unmap((void *)aend, end - aend);
    return (void *)aligned;
}

void pages_unmap(void *addr, size_t size)
{
    ma_syscall(SYS_munmap, addr, size);
}

static bool pages_advise(void *addr, size_t size, int advice)
{
    ma_fetch_add(&pages_nmadvise, 1);
    return !ma_sys_failed(ma_syscall(SYS_madvise, addr, size, advice));
}

bool pages_purge_forced(void *addr, size_t size)
{
    return pages_advise(addr, size, MADV_DONTNEED);
}

static int lazy_broken; /* the kernel has no MADV_FREE */

MA_WARM_TEXT bool pages_purge_lazy(void *addr, size_t size)
{
    if (!ma_load_relaxed(&lazy_broken)) {
        if (pages_advise(addr, size, MADV_FREE))
            return true;
        ma_store_relaxed(&lazy_broken, 1);
    }
    return pages_purge_forced(addr, size);
}

#ifndef SYS_process_madvise
#define SYS_process_madvise 440 /* the same number on every architecture */
#endif
/* The calling process as a pidfd argument (PIDFD_SELF_THREAD_GROUP). */
#define PIDFD_SELF_PROCESS (-10001)

/* Whether process_madvise on ourselves works: 0 not known yet, 1 yes, -1
 * no (a kernel before process_madvise, before PIDFD_SELF, or one that
 * allows only some advice through it; or a seccomp filter, below), and
 * then madvise does it all.
 * Why bother: on the 2-core VM this was written on, madvise of one page
 * costs ~2.7 us, most of it the call; 512 one-page ranges in one
 * process_madvise cost ~0.9 us each. Purges inside slabs and of a
 * fragmented pool are mostly runs of one to three pages. */
int pages_batch_state;
bool pages_opt_batch = true;

/* Whether a seccomp filter is installed (the Seccomp line of
 * /proc/self/status is not 0), or that cannot be read. A sandbox that
 * allows madvise may kill the process on a system call it does not know
 * (systemd's SystemCallFilter=, libseccomp's SCMP_ACT_KILL): under any
 * filter, batches are not tried. A filter installed after the first batch
 * is not seen; such programs set purge_batch:false (doc/options.md). */
static bool pages_seccomp_filtered(void)
{
    char buf[4096];
    long len = ma_sys_read_proc("/proc/self/status", buf, sizeof(buf) - 1);
    if (len < 0)
        return true;
    buf[len] = '\0';
    const char *v = strstr(buf, "\nSeccomp:");
    if (v == NULL)
        return false; /* a kernel without seccomp */
    v += strlen("\nSeccomp:");
    while (*v == ' ' || *v == '\t')
        v++;
    return !(v[0] == '0' && (v[1] == '\n' || v[1] == '\0'));
}

unsigned pages_purge_batch(const pages_range_t *ranges, unsigned n, bool lazy)
{
    unsigned done = 0, ncalls = 0;
    bool use_free = lazy && !ma_load_relaxed(&lazy_broken);
    bool batch = n > 1 && ma_load_relaxed(&pages_opt_batch) && ma_load_relaxed(&pages_batch_state) >= 0;
    if (batch && ma_load_relaxed(&pages_batch_state) == 0 && pages_seccomp_filtered()) {
        ma_store_relaxed(&pages_batch_state, -1);
        batch = false;
    }
    if (batch) {
        long r = ma_syscall(SYS_process_madvise, PIDFD_SELF_PROCESS, ranges, n,
                            use_free ? MADV_FREE : MADV_DONTNEED, 0);
        ma_fetch_add(&pages_nmadvise, 1);
        ncalls++;
        if (ma_sys_failed(r)) {
            if (ma_load_relaxed(&pages_batch_state) == 0)
                ma_store_relaxed(&pages_batch_state, -1);
        } else {
            ma_store_relaxed(&pages_batch_state, 1);
            /* Fewer bytes than asked: it stopped at an error; the ranges
             * from there (the partly done one again) go one by one. */
            for (size_t left = (size_t)r; done < n && left >= ranges[done].iov_len; done++)
                left -= ranges[done].iov_len;
        }
    }
    for (; done < n; done++, ncalls++) {
        if (lazy)
            pages_purge_lazy(ranges[done].iov_base, ranges[done].iov_len);
        else
            pages_purge_forced(ranges[done].iov_base, ranges[done].iov_len);
    }
    return ncalls;
}

MA_WARM_TEXT void pages_nohuge(void *addr, size_t size)
{
    pages_advise(addr, size, MADV_NOHUGEPAGE);
}

MA_WARM_TEXT void pages_huge(void *addr, size_t size)
{
    pages_advise(addr, size, MADV_HUGEPAGE);
}

/* The kernel's page size from the auxiliary vector (AT_PAGESZ), read with
 * raw system calls; 0 when /proc is not there. */
static size_t pages_auxv_page_size(void)
{
    unsigned long buf[512]; /* (type, value) pairs of the native word; a few dozen in practice */
    long len = ma_sys_read_proc("/proc/self/auxv", buf, sizeof(buf));
    for (size_t i = 0; len > 0 && i + 1 < (size_t)len / sizeof(buf[0]); i += 2)
        if (buf[i] == AT_PAGESZ)
            return buf[i + 1];
    return 0;
}

size_t pages_os_page_size(void)
{
    static size_t page;
    size_t p = ma_load_relaxed(&page);
    if (p == 0) {
        p = pages_auxv_page_size();
        if (p == 0) {
            long s = sysconf(_SC_PAGESIZE);
            p = s > 0 ? (size_t)s : 4096;
        }
        ma_store_relaxed(&page, p);
    }
    return p;
}
