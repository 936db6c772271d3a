/*
 * myalloc: a general-purpose memory allocator with a sampling heap profiler.
 *
 * The one public header. Link with -lmyalloc or load with LD_PRELOAD; the
 * standard functions replace the C library's. The non-standard functions
 * follow jemalloc's API (names, flags and bit layout), so programs written
 * for jemalloc build and run unchanged.
 */
#ifndef MYALLOC_H
#define MYALLOC_H

#include <stddef.h>
#include <strings.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MYALLOC_VERSION "0.1.0"
#define MYALLOC_VERSION_MAJOR 0
#define MYALLOC_VERSION_MINOR 1
#define MYALLOC_VERSION_PATCH 0

/* ---- Standard C / POSIX / glibc ------------------------------------- */

void *malloc(size_t size);
void *calloc(size_t nmemb, size_t size);
void *realloc(void *ptr, size_t size);
void free(void *ptr);
int posix_memalign(void **memptr, size_t alignment, size_t size);
void *aligned_alloc(size_t alignment, size_t size);
void *memalign(size_t alignment, size_t size);
void *valloc(size_t size);
void *pvalloc(size_t size);
void *reallocarray(void *ptr, size_t nmemb, size_t size);
size_t malloc_usable_size(void *ptr);
/* C23: free with the size (and alignment) the object was allocated with. */
void free_sized(void *ptr, size_t size);
void free_aligned_sized(void *ptr, size_t alignment, size_t size);

/* ---- jemalloc-compatible API ---------------------------------------- */

/* Flags for mallocx and friends (jemalloc's bit layout). */
#define MALLOCX_LG_ALIGN(la) ((int)(la))
#define MALLOCX_ALIGN(a)                                                     \
    ((int)(((size_t)(a) < (size_t)2147483647) ? ffs((int)(a)) - 1            \
                                              : ffs((int)(((size_t)(a)) >> 32)) + 31))
#define MALLOCX_ZERO ((int)0x40)
/* Bypass the thread cache. (jemalloc's explicit caches, MALLOCX_TCACHE(tc)
 * with tc >= 0, are not supported: mallocx and rallocx given such flags
 * return NULL with errno EINVAL, nallocx returns 0.) */
#define MALLOCX_TCACHE(tc) ((int)(((tc) + 2) << 8))
#define MALLOCX_TCACHE_NONE MALLOCX_TCACHE(-1)
/* Allocate from arena a (bypasses the thread cache). Shifted as unsigned:
 * from arena 2047 on, a + 1 reaches int's sign bit, and shifting a signed
 * int there is undefined (jemalloc's header does it; UBSan reports it). */
#define MALLOCX_ARENA(a) ((int)(((unsigned)(a) + 1u) << 20))

/* mallctl index meaning "all arenas" / "destroyed arenas" in arena.<i>.* */
#define MALLCTL_ARENAS_ALL 4096
#define MALLCTL_ARENAS_DESTROYED 4097

void *mallocx(size_t size, int flags);
void *rallocx(void *ptr, size_t size, int flags);
size_t xallocx(void *ptr, size_t size, size_t extra, int flags);
size_t sallocx(const void *ptr, int flags);
void dallocx(void *ptr, int flags);
void sdallocx(void *ptr, size_t size, int flags);
size_t nallocx(size_t size, int flags);

int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);
int mallctlnametomib(const char *name, size_t *mibp, size_t *miblenp);
int mallctlbymib(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                 size_t newlen);
void malloc_stats_print(void (*write_cb)(void *, const char *), void *cbopaque, const char *opts);

/* Options compiled into the program, read before MYALLOC_CONF:
 *     const char *malloc_conf = "prof:true,lg_prof_sample:17";       */
extern const char *malloc_conf;

#ifdef __cplusplus
}
#endif

#endif
