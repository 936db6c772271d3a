/*
 * static_pages_probe: allocates, writes and frees a few sizes without
 * profiling, then reports how many pages of libmyalloc's writable segment
 * (.data, .bss, .lbss: the allocator's static state) are resident.
 * Run by test_linking.c with LD_PRELOAD.
 *
 * Output on stdout: "segment_pages=N" and "resident_pages=K" lines, or "no_myalloc=1"
 * when no loaded object is named libmyalloc.
 */
#define _GNU_SOURCE
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int found;

static int look(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    if (info->dlpi_name == NULL || strstr(info->dlpi_name, "libmyalloc") == NULL)
        return 0;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W))
            continue;
        uintptr_t lo = (info->dlpi_addr + ph->p_vaddr) & ~(page - 1);
        uintptr_t hi = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz + page - 1) & ~(page - 1);
        size_t n = (hi - lo) / page, resident = 0;
        unsigned char *vec = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (vec == MAP_FAILED || mincore((void *)lo, hi - lo, vec) != 0)
            return 1;
        for (size_t j = 0; j < n; j++)
            resident += vec[j] & 1;
        printf("segment_pages=%zu\nresident_pages=%zu\n", n, resident);
        found = 1;
        return 1;
    }
    return 0;
}

int main(void)
{
    size_t sizes[] = {16, 100, 1000, 5000, 1 << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char *volatile p = malloc(sizes[i]);
        if (p == NULL)
            return 1;
        memset(p, 1, sizes[i]);
        free(p);
    }
    dl_iterate_phdr(look, NULL);
    if (!found)
        printf("no_myalloc=1\n");
    return 0;
}
