/*
 * static_pages_probe: allocates, writes, reallocates and frees a few sizes
 * without profiling, in the main thread and in a thread that then exits,
 * then reports how many pages of libmyalloc's own segments are in memory:
 * of the writable one (.data, .bss, .lbss: the allocator's static state)
 * those resident, and of each executable one (code) those this process has
 * mapped, which is what counts in its RSS (a page of a
 * file mapping can be in the page cache without being mapped here).
 * Run by test_linking.c with LD_PRELOAD.
 *
 * Output on stdout, key=value lines: "segment_pages" and "resident_pages"
 * for the writable segment; "code_segments" and, for each executable
 * segment i in address order, "code_pages_<i>" and "code_mapped_<i>";
 * "unwind_pages" and "unwind_mapped" for the segment that holds the unwind
 * tables (PT_GNU_EH_FRAME); or "no_myalloc=1" when no loaded object is
 * named libmyalloc.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

static int found;

/* Pages of [lo, hi) that this process maps (/proc/self/pagemap's present
 * bit, which needs no privilege); -1 if pagemap cannot be read. */
static long mapped_pages(uintptr_t lo, uintptr_t hi, uintptr_t page)
{
    int fd = open("/proc/self/pagemap", O_RDONLY);
    if (fd < 0)
        return -1;
    long n = 0;
    for (uintptr_t a = lo; a < hi; a += page) {
        uint64_t e;
        if (pread(fd, &e, sizeof(e), (off_t)(a / page * sizeof(e))) != (ssize_t)sizeof(e)) {
            n = -1;
            break;
        }
        n += (long)(e >> 63);
    }
    close(fd);
    return n;
}

static int look(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    if (info->dlpi_name == NULL || strstr(info->dlpi_name, "libmyalloc") == NULL)
        return 0;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    int ncode = 0;
    uintptr_t unwind = 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME)
            unwind = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t lo = (info->dlpi_addr + ph->p_vaddr) & ~(page - 1);
        uintptr_t hi = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz + page - 1) & ~(page - 1);
        size_t n = (hi - lo) / page;
        if (ph->p_flags & PF_X) {
            printf("code_pages_%d=%zu\ncode_mapped_%d=%ld\n", ncode, n, ncode, mapped_pages(lo, hi, page));
            ncode++;
        }
        if (unwind >= lo && unwind < hi)
            printf("unwind_pages=%zu\nunwind_mapped=%ld\n", n, mapped_pages(lo, hi, page));
        if (!(ph->p_flags & PF_W))
            continue;
        size_t resident = 0;
        unsigned char *vec = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (vec == MAP_FAILED || mincore((void *)lo, hi - lo, vec) != 0)
            return 1;
        for (size_t j = 0; j < n; j++)
            resident += vec[j] & 1;
        printf("segment_pages=%zu\nresident_pages=%zu\n", n, resident);
    }
    printf("code_segments=%d\n", ncode);
    found = 1;
    return 1;
}

/* What nearly every program does: malloc, calloc and free of small and
 * large sizes, realloc of small ones (a large object resized in place runs
 * warm code: the Makefile's WARM_SRC); nonzero on a failed allocation. */
static int allocate(void)
{
    size_t sizes[] = {16, 100, 1000, 5000, 1 << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char *volatile p = malloc(sizes[i]);
        if (p == NULL)
            return 1;
        memset(p, 1, sizes[i]);
        char *q = p;
        if (sizes[i] < 8192 && (q = realloc(p, sizes[i] * 3)) == NULL)
            return 1;
        free(q);
        q = calloc(4, sizes[i]);
        if (q == NULL)
            return 1;
        free(q);
    }
    return 0;
}

static void *thread_main(void *arg)
{
    (void)arg;
    return (void *)(intptr_t)allocate();
}

int main(void)
{
    if (allocate() != 0)
        return 1;
    /* A thread that allocates and exits: its cache is flushed then. */
    pthread_t t;
    void *failed;
    if (pthread_create(&t, NULL, thread_main, NULL) != 0 || pthread_join(t, &failed) != 0 || failed != NULL)
        return 1;
    dl_iterate_phdr(look, NULL);
    if (!found)
        printf("no_myalloc=1\n");
    return 0;
}
