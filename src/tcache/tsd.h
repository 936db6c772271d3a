/*
 * tsd: the thread state, an initial-exec TLS struct.
 *
 * The first cache line holds only what the malloc and free fast paths
 * touch: the byte counters, the event threshold and the first cache bins.
 */
#ifndef MYALLOC_TSD_H
#define MYALLOC_TSD_H

#include "../arena/arena.h"
#include "cache_bin.h"
#include "te.h"


/* Thread caches serve classes up to this size at most (tcache_max's cap). */
#define TCACHE_MAXCLASS_LIMIT ((size_t)8 << 20)
/* Class index of TCACHE_MAXCLASS_LIMIT (a power of two, so the last class
 * of the group starting at 2^22), plus one. */
#define TCACHE_NBINS_LIMIT                                                    \
    MA_MIN(SC_NSIZES, (1 << SC_LG_NGROUP) +                                   \
                          (22 - SC_LG_QUANTUM - SC_LG_NGROUP) * (1 << SC_LG_NGROUP) + \
                          (1 << SC_LG_NGROUP))

enum tsd_state {
    TSD_UNINIT = 0,    /* zero-initialised TLS: nothing set up yet */
    TSD_INITIALIZING,  /* being set up; nested calls take the minimal path */
    TSD_NOMINAL,       /* fast paths may run */
    TSD_EXITED,        /* thread-exit cleanup ran; minimal path from now on */
};

/*
 * tsd_t invariants:
 * - next_event == 0 unless state == TSD_NOMINAL and reentrancy == 0, so the
 *   one compare of the malloc fast path also routes every other state to the
 *   slow path.
 * - bins[i] is a live bin for i < tcache_nbins when tcache_enabled, and a
 *   disabled bin (see cache_bin.h) otherwise; zeroed bins (TSD_UNINIT) fail
 *   every push, and pops are never reached since next_event == 0.
 * - thread_allocated / thread_deallocated count usable bytes, monotonic.
 * - bin_none is never written: zero, so (uint16)head == full, always full.
 * - fastmap / fastmap_npages are those of `arena` (0 while there is none), so
 *   free's fast path caches the objects its arena's map marks (rtree.h): the
 *   arena's own and other arenas' of whole-line classes; the latter only
 *   into open bins (cache_bin.h), those the thread allocates from. The other
 *   remote frees go back to their own slabs (arena_dalloc_remote).
 */
typedef struct tsd {
    /* --- fast line --- */
    uint64_t thread_allocated;
    uint64_t next_event;
    uint64_t thread_deallocated;
    uint8_t *fastmap;           /* this thread's arena's fast map (rtree.h) */
    uintptr_t fastmap_npages;   /* its bound; 0 when there is none */
    uint64_t pad_[3];           /* bins start 32-byte aligned */
    /* bin_none + (class + 1) is bins[class]. free's fast path indexes from
     * here with the fast map's byte, so a 0 byte (not a slab) lands on
     * bin_none, which stays all-zero and therefore always full: the push
     * fails to the slow path without a separate test. */
    cache_bin_t bin_none;
    cache_bin_t bins[TCACHE_NBINS_LIMIT];

    /* --- cold --- */
    uint8_t state;
    uint8_t reentrancy;
    bool tcache_enabled;
    unsigned tcache_nbins;
    unsigned gc_cursor;
    arena_t *arena;
    void **stack_block;
    te_state_t te;
    uint8_t lg_fill_div[TCACHE_NBINS_LIMIT];
    uint8_t ran_empty[TCACHE_NBINS_LIMIT];  /* refilled since the last GC step */
    uint8_t flushed[TCACHE_NBINS_LIMIT];    /* overflowed since the last GC step */
    size_t cap_bytes;           /* growth of the bins of classes below a page: capacity x size */
    size_t cap_bytes_pages;     /* the same for the classes of a page or more */
    uint8_t remote_cycles;      /* GC cycles left that count as freeing others' objects */
    bool prof_thread_active;
    char prof_thread_name[64];
} tsd_t;

extern __thread tsd_t tsd_tls __attribute__((tls_model("initial-exec"))) MA_HIDDEN;

MA_INLINE tsd_t *tsd_get(void) { return &tsd_tls; }

/* The thread state for the fast paths: addressed through %fs where the
 * compiler supports it, so that any field, including the bin of a class
 * computed at run time, is one instruction away. The offset of tsd_tls
 * from the thread pointer is fixed at load time (initial-exec TLS). */
#if defined(__x86_64__) && defined(__SEG_FS) && !defined(MYALLOC_NO_SEG_FS)
MA_INLINE tsd_t TSD_SEG *tsd_fast(void)
{
    uintptr_t off;
    __asm__("movq tsd_tls@gottpoff(%%rip), %0" : "=r"(off));
    return (tsd_t TSD_SEG *)off;
}
#else
MA_INLINE tsd_t *tsd_fast(void) { return &tsd_tls; }
#endif

MA_INLINE bool tsd_nominal(const tsd_t *tsd) { return tsd->state == TSD_NOMINAL; }

/* The thread state, set up on first use. Requires the allocator to be
 * initialised. Never NULL. */
tsd_t *tsd_fetch_slow(void);
MA_INLINE tsd_t *tsd_fetch(void)
{
    tsd_t *tsd = tsd_get();
    if (unlikely(tsd->state == TSD_UNINIT))
        tsd = tsd_fetch_slow();
    return tsd;
}

/* The cache bin at byte offset off from bins[0] (the fast paths compute
 * offsets directly: class << CACHE_BIN_LG_SIZE). */
MA_INLINE cache_bin_t TSD_SEG *tsd_bin_at(tsd_t TSD_SEG *tsd, intptr_t off)
{
    return (cache_bin_t TSD_SEG *)((char TSD_SEG *)tsd->bins + off);
}

/* Bind the thread to arena a (its fast map included). */
MA_INLINE void tsd_set_arena(tsd_t *tsd, arena_t *a)
{
    tsd->arena = a;
    tsd->fastmap = a != NULL ? a->fastmap.map : NULL;
    tsd->fastmap_npages = a != NULL ? a->fastmap.npages : 0;
}

/* The arena this thread allocates from (bound on first use). */
MA_INLINE arena_t *tsd_arena(tsd_t *tsd)
{
    if (unlikely(tsd->arena == NULL))
        tsd_set_arena(tsd, arena_choose());
    return tsd->arena;
}

/* Recompute next_event from the events and the thread's state. */
void tsd_update_next_event(tsd_t *tsd);

/* Re-entrancy: while > 0, allocations take no events (no samples). */
MA_INLINE void tsd_reentrancy_enter(tsd_t *tsd)
{
    tsd->reentrancy++;
    tsd->next_event = 0;
}
MA_INLINE void tsd_reentrancy_leave(tsd_t *tsd)
{
    tsd->reentrancy--;
    tsd_update_next_event(tsd);
}
/* The same for a caller that calls tsd_update_next_event itself right
 * after (next_event stays 0 meanwhile: the slow path). */
MA_INLINE void tsd_reentrancy_leave_deferred(tsd_t *tsd) { tsd->reentrancy--; }

bool tsd_boot(void);
void tsd_postfork_child(void);

/* Whether a new thread samples (thread.prof.active's initial value). */
extern bool tsd_prof_active_init;

/* Threads that have a thread state (for stats). */
extern uint64_t tsd_nthreads_created;

/* Called by the exit of a thread that leaves no thread counted in any
 * arena (arena_nthreads_total() 0); background.c sets it: its thread may
 * be the last one left, see there. */
extern void (*tsd_on_all_left)(void);

#endif
