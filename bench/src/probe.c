/*
 * probe: print which shared object provides malloc and free in this
 * process, so the runner can check that LD_PRELOAD took effect (ld.so only
 * warns when a preload fails and the program then runs on glibc).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static const char *owner(const char *sym)
{
    void *f = dlsym(RTLD_DEFAULT, sym);
    Dl_info info;
    if (f == NULL || dladdr(f, &info) == 0 || info.dli_fname == NULL)
        return "?";
    return info.dli_fname;
}

int main(void)
{
    void *p = malloc(100);
    if (p == NULL)
        return 3;
    free(p);
    printf("malloc=%s\nfree=%s\n", owner("malloc"), owner("free"));
    return 0;
}
