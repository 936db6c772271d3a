/*
 * alloc: the standard allocation entry points.
 *
 * malloc and free each have a short inline fast path (thread cache hit,
 * no event due) and one call to a noinline slow path that handles
 * everything else: first use, events (GC, profiling samples), cache misses,
 * large sizes, alignment, errors.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "../arena/extent.h"
#include "../arena/pages.h"
#include "../prof/prof.h"
#include "core.h"
#include "fastpath.h"

/* ---------------------------------------------------------------------
 * Slow paths.
 */

static arena_t *flags_arena(tsd_t *tsd, int flags, bool *explicit_arena)
{
    unsigned a = ((unsigned)flags & MA_FLAG_ARENA_MASK) >> MA_FLAG_ARENA_SHIFT;
    *explicit_arena = a != 0;
    if (a != 0)
        return a - 1 < arena_narenas ? arena_get(a - 1) : NULL;
    return tsd->arena != NULL ? tsd->arena : arena_get(0);
}

/* Allocate usize bytes (a class) for a thread in any state. */
static void *alloc_usize(tsd_t *tsd, size_t usize, size_t align, int flags)
{
    bool zero = flags & MA_FLAG_ZERO, explicit_arena;
    unsigned ind = sc_size2index(usize);
    arena_t *arena = flags_arena(tsd, flags, &explicit_arena);
    if (unlikely(arena == NULL))
        return NULL;
    bool cached = tsd_nominal(tsd) && tcache_serves(tsd, ind) && !explicit_arena &&
                  !(flags & MA_FLAG_TCACHE_NONE) && align <= PAGE;
    void *p;
    if (cached) {
        if (!cache_bin_pop_fast(&tsd->bins[ind], &p))
            p = tcache_alloc_hard(tsd, ind);
        if (p != NULL && zero)
            memset(p, 0, usize);
        return p;
    }
    if (usize <= SC_SMALL_MAXCLASS)
        return arena_malloc_small(arena, ind, zero);
    return arena_malloc_large(arena, usize, MA_MAX(align, PAGE), zero);
}

/* A sampled allocation: the stack capture may allocate (the unwinder), so
 * the thread is re-entrant meanwhile: nested allocations take no events.
 * Inline: each frame here is one more for the unwinder to walk through.
 * Its callers recompute next_event next (they ran the events). */
MA_INLINE void *alloc_sampled(tsd_t *tsd, size_t usize, size_t align, int flags, const prof_bt_start_t *from)
{
    bool explicit_arena;
    arena_t *arena = flags_arena(tsd, flags, &explicit_arena);
    if (unlikely(arena == NULL))
        return NULL;
    tsd_reentrancy_enter(tsd);
    void *p = prof_alloc_sampled(arena, usize, align, flags & MA_FLAG_ZERO, from);
    tsd_reentrancy_leave_deferred(tsd);
    return p;
}

/* gdump: a dump at each new high-water mark of mapped memory. */
static MA_WARM_TEXT MA_NOINLINE void gdump_check(void)
{
    static uint64_t seen;
    uint64_t now = ma_load_acquire(&extent_nchunks);
    uint64_t old = ma_load_relaxed(&seen);
    if (now != old && ma_cas(&seen, &old, now))
        prof_note_growth();
}

MA_NOINLINE void *ma_alloc_slow(size_t size, size_t align, int flags, void *caller)
{
    if (unlikely(!ma_init()))
        goto oom;
    size_t usize = align <= QUANTUM ? sc_s2u(size) : sc_sa2u(size, align);
    if (unlikely(usize == 0))
        goto oom;
    tsd_t *tsd = tsd_fetch();
    void *p;
    if (unlikely(!tsd_nominal(tsd))) {
        p = alloc_usize(tsd, usize, align, flags);
    } else if (unlikely(tsd->reentrancy != 0)) {
        te_reentrant_alloc(tsd, usize);
        p = alloc_usize(tsd, usize, align, flags);
    } else if (tsd->thread_allocated + usize >= tsd->next_event) {
        /* Events first: a sample is decided before the object is placed. */
        bool sample = te_alloc_event(tsd, usize);
        if (unlikely(sample) && tsd->prof_thread_active) {
            /* Reached by a tail call (malloc's jmp: the return address
             * here is the program's), this frame sits right on the
             * program's: rbp as saved here (callee-saved registers are
             * the program's again at a tail call) and rsp above the
             * return address are those of the program's call. */
            const uintptr_t *fp = __builtin_frame_address(0);
            prof_bt_start_t from = {caller, 0, 0};
            if ((void *)fp[1] == caller && (uintptr_t)__builtin_dwarf_cfa() == (uintptr_t)(fp + 2)) {
                from.sp = (uintptr_t)(fp + 2);
                from.bp = fp[0];
            }
            p = alloc_sampled(tsd, usize, align, flags, &from);
        } else
            p = alloc_usize(tsd, usize, align, flags);
        if (likely(p != NULL))
            tsd->thread_allocated += usize;
        tsd_update_next_event(tsd);
        goto done;
    } else {
        p = alloc_usize(tsd, usize, align, flags);
    }
    if (likely(p != NULL))
        tsd->thread_allocated += usize;
done:
    if (unlikely(ma_load_relaxed(&prof_gdump_on)))
        gdump_check();
    if (unlikely(p == NULL))
        goto oom;
    return p;
oom:
    errno = ENOMEM;
    return NULL;
}

rtree_elm_t ma_lookup_live(const void *p, const char *func)
{
    return ma_check_live(p, rtree_lookup((uintptr_t)p), func);
}

/* A sampled object's page run kept by the profiler's run cache after its
 * free: still mapped as sampled, its extent no longer `sampled` (prof.c). */
MA_INLINE bool elm_freed_sample(rtree_elm_t elm, const extent_t *e)
{
    return (elm & RTREE_SAMPLED) && !e->sampled;
}

rtree_elm_t ma_check_live(const void *p, rtree_elm_t elm, const char *func)
{
    if (likely(elm & RTREE_SLAB)) {
        if (unlikely(slab_region_index(rtree_elm_extent(elm), rtree_elm_szind(elm), p) < 0))
            ma_fatal("%s(): invalid pointer %p (inside an allocation, not its start)", func, p);
        return elm;
    }
    if (elm == 0)
        ma_fatal("%s(): invalid pointer %p (not allocated by myalloc)", func, p);
    extent_t *e = rtree_elm_extent(elm);
    if (e == NULL || (elm & RTREE_STALE))
        ma_fatal("%s(): double free or invalid pointer %p", func, p);
    if (rtree_elm_szind(elm) == SC_NSIZES || elm_freed_sample(elm, e))
        ma_fatal("%s(): double free of %p", func, p);
    if ((uintptr_t)p != e->addr)
        ma_fatal("%s(): invalid pointer %p (inside an allocation, not its start)", func, p);
    return elm;
}

/* Whether elm is a slab of another arena than the thread's (a remote free:
 * arena.h, bin_t). */
MA_INLINE bool elm_remote_slab(const tsd_t *tsd, rtree_elm_t elm)
{
    return (elm & RTREE_SLAB) && tsd->arena != NULL &&
           ((extent_t *)rtree_elm_extent(elm))->arena_ind != tsd->arena->ind;
}

/* Another arena's object, which ma_check_live found to start a region of
 * its slab. */
static void dalloc_remote(extent_t *slab, unsigned ind, void *p)
{
    arena_dalloc_remote(slab, ind, p, (unsigned)slab_region_index(slab, ind, p));
}

static void dalloc_elm(tsd_t *tsd, void *p, rtree_elm_t elm, int flags)
{
    unsigned ind = rtree_elm_szind(elm);
    extent_t *e = rtree_elm_extent(elm);
    if (unlikely(elm & RTREE_SAMPLED)) {
        prof_free_sampled(p, e);
        tsd->thread_deallocated += sc_index2size(ind);
        return;
    }
    bool cached = tsd_nominal(tsd) && tcache_serves(tsd, ind) && !(flags & MA_FLAG_TCACHE_NONE);
    size_t usize = sc_index2size(ind);
    bool remote = elm_remote_slab(tsd, elm);
    if (remote)
        tcache_note_remote_free(tsd);
    if (remote && (!cached || (usize & (MA_CACHELINE - 1)) != 0 || !cache_bin_popped(&tsd->bins[ind]))) {
        /* Another arena's object that shares cache lines with its
         * neighbours: it goes home, not into this cache, where it would be
         * handed out again next to its owner's objects (false sharing).
         * Objects of whole cache lines (sizes multiple of 64 in slabs that
         * start on a page) share no line with anyone: those this thread
         * reuses, while they are hot in its cache, if it allocates their
         * class at all (a consumer thread that only frees would pin them:
         * prodcons 8+8, 270 KiB of peak RSS). */
        dalloc_remote(e, ind, p);
    } else if (cached && (remote || likely(!ma_load_relaxed(&e->cache_bypass)))) {
        /* (A sparse slab's object, unmarked in the fast map, goes back to
         * its slab below instead: caching it would hand it out again and
         * keep the slab from emptying. arena.c, "Sparse slabs".)
         * A remote object that finds the bin full goes home too: flushing
         * the bin for it cost a thread that only frees (a consumer) ~120
         * instructions per object, the remote list ~25. */
        if (!cache_bin_push_fast(&tsd->bins[ind], p)) {
            if (remote)
                dalloc_remote(e, ind, p);
            else
                tcache_dalloc_hard(tsd, ind, p);
        }
    } else if (elm & RTREE_SLAB) {
        arena_dalloc_small_batch(ind, &p, &e, 1);
    } else {
        arena_dalloc_large(e);
    }
    tsd->thread_deallocated += usize;
}

static void dalloc(void *p, int flags, const char *func)
{
    rtree_elm_t elm = ma_lookup_live(p, func);
    dalloc_elm(tsd_fetch(), p, elm, flags);
}

static MA_NOINLINE void free_elm(void *p, rtree_elm_t elm)
{
    dalloc_elm(tsd_fetch(), p, ma_check_live(p, elm, "free"), 0);
}

/* A sampled object's free, from free's slow path: straight to the profiler,
 * not through free_elm and dalloc_elm's tests and frames (batch-mixed with
 * prof:true, 851 -> 831 instructions a sample), nor a call to ma_check_live
 * (827 -> 807). Out of line, so that ma_free_slow keeps no stack frame for a
 * consumer's remote free. */
static MA_WARM_TEXT MA_NOINLINE void free_sampled(void *p, rtree_elm_t elm)
{
    extent_t *e = rtree_elm_extent(elm);
    /* What ma_check_live would find wrong, tested in line; it reports. */
    if (unlikely(e == NULL || (elm & RTREE_STALE) || !e->sampled || (uintptr_t)p != e->addr))
        ma_check_live(p, elm, "free");
    prof_free_sampled(p, e);
    tsd_fetch()->thread_deallocated += sc_index2size(rtree_elm_szind(elm));
}

/* free's slow path. The object of another arena's slab (not sampled) is
 * the one free of a consumer thread: validated, counted, then straight
 * home to its slab (remote bits or list) with a tail call. dalloc_elm would send it
 * there too (free's fast path has already cached those this thread may
 * reuse), after a dozen tests and a stack frame: prodcons 1+1 under
 * callgrind, 138 -> 84 instructions per free, the remote push included.
 * Where the thread's fast map does not mark other arenas' whole-line slabs
 * (rtree_fastmap_t.marks_lines: no map under a ulimit -v or overcommit
 * mode 2), dalloc_elm decides: sending all of them home made larson
 * 16 B-1 KiB with 8 threads take 7 times as many objects from the slabs
 * and peak at 18-23 MiB of RSS, against 10 with the maps.
 * The rest goes through free_elm, out of line so that its stack frame is
 * not set up here. */
MA_NOINLINE void ma_free_slow(void *p)
{
    if (p == NULL)
        return;
    rtree_elm_t elm = rtree_lookup((uintptr_t)p);
    tsd_t *tsd = tsd_get();
    extent_t *slab = rtree_elm_extent(elm);
    unsigned ind = rtree_elm_szind(elm);
    long idx;
    if (unlikely(elm & RTREE_SAMPLED)) {
        free_sampled(p, elm);
        return;
    }
    if (elm_remote_slab(tsd, elm) && likely(tsd->arena->fastmap.marks_lines) &&
        likely((idx = slab_region_index(slab, ind, p)) >= 0)) {
        tsd->thread_deallocated += sc_index2size(ind);
        tcache_note_remote_free(tsd);
        arena_dalloc_remote(slab, ind, p, (unsigned)idx);
        return;
    }
    free_elm(p, elm);
}

MA_WARM_TEXT void ma_dalloc_flags(void *p, int flags)
{
    if (p == NULL)
        return;
    dalloc(p, flags, "dallocx");
}

void *ma_ralloc(void *p, size_t size, size_t align, int flags, bool round_growth, void *caller)
{
    rtree_elm_t elm = ma_lookup_live(p, "realloc");
    size_t old_usize = sc_index2size(rtree_elm_szind(elm));
    size_t usize = align <= QUANTUM ? sc_s2u(size) : sc_sa2u(size, align);
    if (unlikely(usize == 0)) {
        errno = ENOMEM;
        return NULL;
    }
    /* realloc() growing into the slab classes past jemalloc's (16-32 KiB
     * with 4 KiB pages), or resizing a page run into them: take (or keep) a
     * page run of the smallest large class instead, which later growth can
     * extend in place; a slab region never grows, so a realloc chain would
     * copy at every class (make bench's realloc workload: 948 M
     * instructions of memcpy, against 474 M with this and 718 M under
     * tcmalloc, which also rounds growth up). rallocx() keeps jemalloc's
     * contract: the result's usable size is nallocx()'s. */
    if (round_growth && usize >= SC_SLAB_EXTENDED_MINCLASS && usize < SC_LARGE_MINCLASS && align <= PAGE &&
        (usize > old_usize || !(elm & RTREE_SLAB)))
        usize = SC_LARGE_MINCLASS;
    tsd_t *tsd = tsd_fetch();
    /* A reallocation is an allocation of usize bytes for the ticker and the
     * sampler, in place or not: decide first. A sampled result must move
     * (to its own pages); an unsampled one may stay only if the old object
     * was not sampled either. */
    bool sample = false, events = false;
    if (tsd_nominal(tsd) && tsd->reentrancy == 0 && tsd->thread_allocated + usize >= tsd->next_event) {
        sample = te_alloc_event(tsd, usize) && tsd->prof_thread_active;
        events = true;
    }
    bool aligned = align == 0 || ((uintptr_t)p & (align - 1)) == 0;
    void *q = NULL;
    if (!sample && aligned && !(elm & RTREE_SAMPLED)) {
        bool in_place = false;
        if (elm & RTREE_SLAB)
            in_place = usize == old_usize;
        else if (usize >= SC_LARGE_MINCLASS)
            in_place = arena_ralloc_large_in_place(rtree_elm_extent(elm), usize, flags & MA_FLAG_ZERO);
        if (in_place) {
            tsd->thread_allocated += usize;
            tsd->thread_deallocated += old_usize;
            q = p;
            goto out;
        }
    }
    prof_bt_start_t from = {caller, 0, 0};
    q = sample ? alloc_sampled(tsd, usize, align, flags, &from) : alloc_usize(tsd, usize, align, flags);
    if (q != NULL) {
        tsd->thread_allocated += usize;
        memcpy(q, p, MA_MIN(old_usize, usize));
        dalloc_elm(tsd, p, elm, 0);
    } else {
        errno = ENOMEM;
    }
out:
    if (events)
        tsd_update_next_event(tsd);
    return q;
}

/* ---------------------------------------------------------------------
 * Standard entry points.
 */

MA_EXPORT MA_ENTRY_ALIGNED void *malloc(size_t size)
{
    void *p;
    if (likely(alloc_fast(size, &p)))
        return p;
    return ma_alloc_slow(size, 0, 0, MA_CALLER());
}

MA_EXPORT MA_ENTRY_ALIGNED void free(void *p)
{
    if (likely(free_fast(p)))
        return;
    ma_free_slow(p);
}

MA_EXPORT MA_ENTRY_ALIGNED void *calloc(size_t n, size_t size)
{
    size_t total;
    if (unlikely(__builtin_mul_overflow(n, size, &total))) {
        errno = ENOMEM;
        return NULL;
    }
    void *p;
    if (likely(alloc_fast(total, &p))) {
        memset(p, 0, total);
        return p;
    }
    return ma_alloc_slow(total, 0, MA_FLAG_ZERO, MA_CALLER());
}

static void *realloc_caller(void *p, size_t size, void *caller)
{
    if (p == NULL)
        return ma_alloc_slow(size, 0, 0, caller);
    if (size == 0) { /* glibc's behaviour: free and return NULL */
        free(p);
        return NULL;
    }
    void *q;
    if (likely(ralloc_fast(p, size, &q)))
        return q;
    return ma_ralloc(p, size, 0, 0, true, caller);
}

MA_EXPORT void *realloc(void *p, size_t size)
{
    return realloc_caller(p, size, MA_CALLER());
}

MA_EXPORT MA_WARM_TEXT void *reallocarray(void *p, size_t n, size_t size)
{
    size_t total;
    if (unlikely(__builtin_mul_overflow(n, size, &total))) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc_caller(p, total, MA_CALLER());
}

static bool is_pow2(size_t a) { return a != 0 && (a & (a - 1)) == 0; }

MA_EXPORT MA_WARM_TEXT int posix_memalign(void **memptr, size_t align, size_t size)
{
    if (unlikely(align < sizeof(void *) || !is_pow2(align)))
        return EINVAL;
    void *p;
    if (likely(alloc_aligned_fast(size, align, &p))) {
        *memptr = p;
        return 0;
    }
    int saved = errno;
    p = ma_alloc_slow(size, align, 0, MA_CALLER());
    errno = saved;
    if (unlikely(p == NULL))
        return ENOMEM;
    *memptr = p;
    return 0;
}

static MA_WARM_TEXT void *aligned_caller(size_t align, size_t size, void *caller)
{
    if (unlikely(!is_pow2(align))) {
        errno = EINVAL;
        return NULL;
    }
    void *p;
    if (likely(alloc_aligned_fast(size, align, &p)))
        return p;
    return ma_alloc_slow(size, align, 0, caller);
}

MA_EXPORT MA_WARM_TEXT void *aligned_alloc(size_t align, size_t size)
{
    return aligned_caller(align, size, MA_CALLER());
}

MA_EXPORT MA_WARM_TEXT void *memalign(size_t align, size_t size)
{
    return aligned_caller(align, size, MA_CALLER());
}

MA_EXPORT MA_WARM_TEXT void *valloc(size_t size)
{
    void *p;
    if (likely(alloc_aligned_fast(size, pages_os_page_size(), &p)))
        return p;
    return ma_alloc_slow(size, pages_os_page_size(), 0, MA_CALLER());
}

MA_EXPORT MA_WARM_TEXT void *pvalloc(size_t size)
{
    size_t pg = pages_os_page_size();
    size_t rounded = (size + pg - 1) & ~(pg - 1);
    if (rounded < size) {
        errno = ENOMEM;
        return NULL;
    }
    return ma_alloc_slow(rounded == 0 ? pg : rounded, pg, 0, MA_CALLER());
}

MA_EXPORT MA_WARM_TEXT size_t malloc_usable_size(void *p)
{
    if (p == NULL)
        return 0;
    rtree_elm_t elm = rtree_lookup((uintptr_t)p);
    extent_t *e = rtree_elm_extent(elm);
    unsigned ind = rtree_elm_szind(elm);
    if (e == NULL || (elm & RTREE_STALE) || ind >= SC_NSIZES || elm_freed_sample(elm, e))
        return 0; /* not ours, or freed: answer 0 rather than crash */
    if (elm & RTREE_SLAB)
        return slab_region_index(e, ind, p) < 0 ? 0 : sc_index2size(ind);
    return (uintptr_t)p == e->addr ? sc_index2size(ind) : 0;
}

bool opt_check_sized;

/* A sized free the fast path could not take: look the object up, check the
 * size when checks are on (or when it cannot be trusted), free. */
MA_WARM_TEXT MA_NOINLINE void ma_sdalloc_slow(void *p, size_t size, size_t align, int flags, const char *func)
{
    if (p == NULL)
        return;
    rtree_elm_t elm = ma_lookup_live(p, func);
    if (opt_check_sized) {
        size_t usize = align <= QUANTUM ? sc_s2u(size) : sc_sa2u(size, align);
        size_t actual = sc_index2size(rtree_elm_szind(elm));
        /* realloc() may have rounded such a size up to a page run (ma_ralloc). */
        bool rounded = actual == SC_LARGE_MINCLASS && !(elm & RTREE_SLAB) &&
                       usize >= SC_SLAB_EXTENDED_MINCLASS && usize < SC_LARGE_MINCLASS;
        if (usize != actual && !rounded)
            ma_fatal("%s(): size %zu does not match the allocation at %p (usable size %zu)", func, size, p,
                     actual);
    }
    dalloc_elm(tsd_fetch(), p, elm, flags);
}

/* Sized frees take free's fast path: its one byte load from the fast map
 * gives the class and says the object may be cached here (which the size
 * alone could not: another arena's object of a class that shares cache
 * lines must go home). With
 * check_sized they take the slow path, which compares the size. */
MA_EXPORT MA_WARM_TEXT MA_ENTRY_ALIGNED void free_sized(void *p, size_t size)
{
    if (likely(!opt_check_sized) && likely(free_fast(p)))
        return;
    ma_sdalloc_slow(p, size, 0, 0, "free_sized");
}

MA_EXPORT MA_WARM_TEXT MA_ENTRY_ALIGNED void free_aligned_sized(void *p, size_t align, size_t size)
{
    if (likely(!opt_check_sized) && likely(free_fast(p)))
        return;
    ma_sdalloc_slow(p, size, align, 0, "free_aligned_sized");
}

/* glibc's internal names, for code that calls them directly and so that
 * static linking never pulls in glibc's malloc. */
MA_EXPORT void *__libc_malloc(size_t size) __attribute__((alias("malloc")));
MA_EXPORT void __libc_free(void *p) __attribute__((alias("free")));
MA_EXPORT void *__libc_calloc(size_t n, size_t size) __attribute__((alias("calloc")));
MA_EXPORT void *__libc_realloc(void *p, size_t size) __attribute__((alias("realloc")));
MA_EXPORT void *__libc_memalign(size_t align, size_t size) __attribute__((alias("memalign")));
MA_EXPORT void *__libc_valloc(size_t size) __attribute__((alias("valloc")));
MA_EXPORT void *__libc_pvalloc(size_t size) __attribute__((alias("pvalloc")));
MA_EXPORT void cfree(void *p) __attribute__((alias("free")));

void ma_free(void *p) __attribute__((alias("free")));
size_t ma_usable_size(void *p) __attribute__((alias("malloc_usable_size")));
