/*
 * jemalloc: jemalloc's non-standard API with its documented semantics
 * (mallocx, rallocx, xallocx, sallocx, dallocx, sdallocx, nallocx) and
 * the same flag bits (MALLOCX_LG_ALIGN, MALLOCX_ZERO, MALLOCX_TCACHE_NONE,
 * MALLOCX_ARENA; see include/myalloc.h).
 */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "../prof/prof.h"
#include "core.h"
#include "fastpath.h"

/* Alignment from MALLOCX_LG_ALIGN (0: none). */
static size_t flags_align(int flags)
{
    unsigned lg = (unsigned)flags & MA_FLAG_LG_ALIGN_MASK;
    return lg == 0 ? 0 : (size_t)1 << lg;
}

/* Explicit thread caches (MALLOCX_TCACHE(tc), tc >= 0) do not exist here. */
static bool flags_supported(int flags)
{
    unsigned tc = ((unsigned)flags & MA_FLAG_TCACHE_MASK) >> 8;
    return tc == 0 || tc == 1; /* automatic, or MALLOCX_TCACHE_NONE */
}

static size_t flags_usize(size_t size, int flags)
{
    size_t align = flags_align(flags);
    return align <= QUANTUM ? sc_s2u(size) : sc_sa2u(size, align);
}

MA_EXPORT MA_ENTRY_ALIGNED void *mallocx(size_t size, int flags)
{
    void *p;
    if (likely(flags == 0)) {
        if (likely(alloc_fast(size, &p)))
            return p;
        return ma_alloc_slow(size, 0, 0, MA_CALLER());
    }
    if ((flags & ~MA_FLAG_LG_ALIGN_MASK) == 0 && alloc_aligned_fast(size, flags_align(flags), &p))
        return p;
    if (unlikely(!flags_supported(flags))) {
        errno = EINVAL;
        return NULL;
    }
    return ma_alloc_slow(size, flags_align(flags), flags, MA_CALLER());
}

MA_EXPORT void *rallocx(void *p, size_t size, int flags)
{
    if (unlikely(!flags_supported(flags))) {
        errno = EINVAL;
        return NULL;
    }
    void *q;
    if (flags == 0 && size != 0 && likely(ralloc_fast(p, size, &q)))
        return q;
    int saved = errno;
    q = ma_ralloc(p, size, flags_align(flags), flags, false, MA_CALLER());
    errno = saved;
    return q;
}

MA_EXPORT size_t sallocx(const void *p, int flags)
{
    (void)flags;
    return ma_usable_size((void *)p);
}

/* Resize in place to at least size bytes, to size + extra if that works
 * too; never moves. Returns the usable size afterwards (the old one when
 * nothing could be done). */
MA_EXPORT size_t xallocx(void *p, size_t size, size_t extra, int flags)
{
    rtree_elm_t elm = ma_lookup_live(p, "xallocx");
    size_t old = sc_index2size(rtree_elm_szind(elm));
    size_t align = flags_align(flags);
    if (size > SC_LARGE_MAXCLASS)
        return old;
    if (extra > SC_LARGE_MAXCLASS - size)
        extra = SC_LARGE_MAXCLASS - size;
    size_t lo = flags_usize(size, flags), hi = flags_usize(size + extra, flags);
    if (lo == 0 || hi == 0 || (align != 0 && ((uintptr_t)p & (align - 1)) != 0))
        return old;
    /* Already within [size, size + extra]: nothing to do. */
    if (lo <= old && old <= hi)
        return old;
    /* Slab and sampled objects cannot change size in place. */
    if (elm & (RTREE_SLAB | RTREE_SAMPLED))
        return old;
    if (lo < SC_LARGE_MINCLASS)
        lo = SC_LARGE_MINCLASS;
    if (hi < lo)
        return old;
    tsd_t *tsd = tsd_fetch();
    extent_t *e = rtree_elm_extent(elm);
    /* A resize is an allocation of the new size for the sampler (see
     * ma_ralloc); one that would be sampled cannot move, so it is not made. */
    size_t targets[2] = {hi, lo};
    for (int i = 0; i < 2; i++) {
        size_t usize = targets[i];
        if (i == 1 && usize == hi)
            break;
        if (tsd_nominal(tsd) && tsd->reentrancy == 0 && tsd->thread_allocated + usize >= tsd->next_event) {
            bool sample = te_alloc_event(tsd, usize) && tsd->prof_thread_active;
            tsd_update_next_event(tsd);
            if (sample)
                return old;
        }
        if (arena_ralloc_large_in_place(e, usize, flags & MA_FLAG_ZERO)) {
            tsd->thread_allocated += usize;
            tsd->thread_deallocated += old;
            return usize;
        }
    }
    return old;
}

MA_EXPORT MA_ENTRY_ALIGNED void dallocx(void *p, int flags)
{
    if (likely(flags == 0)) {
        ma_free(p);
        return;
    }
    ma_dalloc_flags(p, flags);
}

MA_EXPORT MA_ENTRY_ALIGNED void sdallocx(void *p, size_t size, int flags)
{
    if (likely(flags == 0) && likely(!opt_check_sized) && likely(free_fast(p)))
        return;
    ma_sdalloc_slow(p, size, flags_align(flags), flags, "sdallocx");
}

MA_EXPORT size_t nallocx(size_t size, int flags)
{
    if (unlikely(!flags_supported(flags)))
        return 0;
    return flags_usize(size, flags);
}
