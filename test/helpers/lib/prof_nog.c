/*
 * A shared library for the profile-format tests (test_prof_formats.c),
 * loaded with dlopen into test/helpers/prof_formats_probe.c and into the
 * test process. Built without -g by the Makefile, twice:
 *
 *   libprof_nog.so        keeps its .symtab: nog_static_alloc (a static
 *                         function) is named from it
 *   libprof_stripped.so   stripped (-s, -DPROF_NOG_STRIPPED): only the
 *                         exported stripped_alloc / stripped_fill are named,
 *                         from .dynsym
 *
 * Allocations go malloc <- *_static_alloc <- *_alloc <- *_fill <- caller.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#ifdef PROF_NOG_STRIPPED
#define NAME(x) stripped_##x
#else
#define NAME(x) nog_##x
#endif
#define EXPORT __attribute__((visibility("default"), noinline))
/* After the call: no tail call, so each function keeps its frame. */
#define BARRIER(p) __asm__ volatile("" : : "r"(p) : "memory")

static __attribute__((noinline)) void *NAME(static_alloc)(size_t n)
{
    void *p = malloc(n);
    BARRIER(p);
    return p;
}

EXPORT void *NAME(alloc)(size_t n)
{
    void *p = NAME(static_alloc)(n);
    BARRIER(p);
    return p;
}

/* count objects of size bytes into keep, touched when touch is set. */
EXPORT void NAME(fill)(void **keep, size_t count, size_t size, int touch)
{
    for (size_t i = 0; i < count; i++) {
        keep[i] = NAME(alloc)(size);
        if (touch && keep[i] != NULL)
            memset(keep[i], 1, size);
    }
    BARRIER(keep);
}

/* The address of the static function, for the symboliser's tests. */
EXPORT void *NAME(static_address)(void)
{
    return (void *)NAME(static_alloc);
}
