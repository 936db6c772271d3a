/*
 * dlopen_probe: libmyalloc loaded with dlopen, after the C library's
 * malloc has served the process. Run by test_linking.c as
 *
 *     GLIBC_TUNABLES=glibc.rtld.optional_static_tls=... dlopen_probe LIB
 *
 * (the library's initial-exec TLS needs static TLS room that dlopen only
 * has with the tunable). It allocates and frees through the jemalloc
 * entry points looked up in LIB: those must stay in myalloc, not reach
 * the free or malloc_usable_size the process bound first (glibc's). It
 * prints key=value lines; dlopen_failed=1 when there was no room.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (h == NULL) {
        printf("dlopen_failed=1\nerror=%s\ndone=1\n", dlerror());
        return 0;
    }
    void *(*mallocx)(size_t, int) = (void *(*)(size_t, int))dlsym(h, "mallocx");
    size_t (*sallocx)(const void *, int) = (size_t(*)(const void *, int))dlsym(h, "sallocx");
    void (*dallocx)(void *, int) = (void (*)(void *, int))dlsym(h, "dallocx");
    void (*sdallocx)(void *, size_t, int) = (void (*)(void *, size_t, int))dlsym(h, "sdallocx");
    if (mallocx == NULL || sallocx == NULL || dallocx == NULL || sdallocx == NULL)
        return 3;
    size_t usable = 0;
    for (int i = 0; i < 1000; i++) {
        void *p = mallocx(100, 0), *q = mallocx(5000, 0);
        usable = sallocx(p, 0);
        dallocx(p, 0);
        sdallocx(q, 5000, 0);
    }
    printf("dlopen_failed=0\nusable100=%zu\ndone=1\n", usable);
    return 0;
}
