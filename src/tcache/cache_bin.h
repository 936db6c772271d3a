/*
 * cache_bin: one thread's stack of cached pointers for one size class.
 *
 * The stack lives in a per-thread block and grows downwards:
 *
 *     full                 head                     empty
 *      |  (free slots)      |  cached pointers ...    |
 *      v                    v                         v
 *      [ . . . . . . . . . .[ p0 p1 p2 ... p(n-1)    ][ next bin's slots
 *
 * head[0] is the next pointer malloc gets (the most recently freed one);
 * the oldest entries sit next to `empty`. Positions are compared on their
 * low 16 bits only: a bin spans far less than 64 KiB, so within one bin the
 * low bits identify a position, and the struct stays 16 bytes.
 *
 * Invariants:
 * - full <= head <= low_water <= empty (as positions of the same bin).
 * - low_water is the highest head position since the last GC step, i.e.
 *   the fewest items the bin held; the items between low_water and empty
 *   went unused and are what the GC flushes.
 * - usize is the class's usable size when it fits 16 bits (every small
 *   class in the default configuration), so free's fast path adds it to
 *   thread_deallocated without a table; classes that do not fit are never
 *   on free's fast path (see the fast map in rtree.h).
 * - A disabled bin has head == low_water == full == empty (all on a dummy
 *   slot): every push and pop fails to the slow path.
 * - An open bin's full is empty less cap slots. A closed bin's full is
 *   where head stood when it closed: it takes no pushes but into the room
 *   its pops made since.
 *   A bin is closed while its thread does not allocate its class: from the
 *   start, and from a GC step that finds it unpopped since the previous
 *   one, until its next fill, GC step with pops, or free of the thread's
 *   own object into it after a pop (tcache.c). Without a pop, such a free
 *   gives the closed bin room for a batch only (TCACHE_FREE_BATCH), which
 *   is flushed whole when full. Free's fast path caches other arenas'
 *   objects of whole-line classes (rtree.h) without a test of its own: a
 *   closed bin refuses them (but into a batch's room), so a thread that
 *   only frees a class (a consumer) sends those home instead of pinning
 *   them.
 */
#ifndef MYALLOC_CACHE_BIN_H
#define MYALLOC_CACHE_BIN_H

#include "../sizeclass/sizeclass.h"

typedef struct cache_bin {
    void **head;
    uint16_t low_water;
    uint16_t full;
    uint16_t empty;
    uint16_t usize;
    uint64_t nrequests;  /* pops not yet merged into the arena's bin stats */
    uint32_t gc_pops;    /* pops merged since this bin's last GC step (saturating) */
    uint16_t cap;        /* capacity in slots (open bins, above) */
    uint16_t unused_;
} cache_bin_t;

/* The size-class lookup table stores bin byte offsets (class << 5), and
 * free indexes bins by (class + 1) << 5. */
#define CACHE_BIN_LG_SIZE SC_LOOKUP_BIN_LG
_Static_assert(sizeof(cache_bin_t) == ((size_t)1 << SC_LOOKUP_BIN_LG), "cache_bin_t size must match the lookup table");

MA_INLINE uint16_t cache_bin_bits(void **pos) { return (uint16_t)(uintptr_t)pos; }

/* Full position from the 16-bit offsets: the stack occupies whole positions
 * below head, so reconstruct by the distance in slots. */
MA_INLINE void **cache_bin_empty_pos(const cache_bin_t *b)
{
    return b->head + (uint16_t)(b->empty - cache_bin_bits(b->head)) / sizeof(void *);
}

/* Open and closed bins (above). */
MA_INLINE void cache_bin_open(cache_bin_t *b) { b->full = cache_bin_bits(cache_bin_empty_pos(b) - b->cap); }
MA_INLINE void cache_bin_close(cache_bin_t *b) { b->full = cache_bin_bits(b->head); }
MA_INLINE bool cache_bin_closed(const cache_bin_t *b)
{
    return b->full != cache_bin_bits(cache_bin_empty_pos(b) - b->cap);
}

MA_INLINE unsigned cache_bin_ncached(const cache_bin_t *b)
{
    return (uint16_t)(b->empty - cache_bin_bits(b->head)) / sizeof(void *);
}

/* Whether the thread took objects out of the bin since the bin's last GC
 * step. Objects of other arenas go to a bin only if so: a thread that only
 * frees a class (a consumer) would never hand them out again, and would pin
 * them (a macro: b may be a plain or a %fs-relative pointer). */
#define cache_bin_popped(b) (((b)->nrequests | (b)->gc_pops) != 0)

MA_INLINE unsigned cache_bin_low_water_count(const cache_bin_t *b)
{
    return (uint16_t)(b->empty - b->low_water) / sizeof(void *);
}

/* The fast paths reach the thread state through %fs (tsd.h, TSD_SEG), the
 * slow paths through plain pointers: the same two operations are stamped
 * out for both address spaces. */
#if defined(__x86_64__) && defined(__SEG_FS) && !defined(MYALLOC_NO_SEG_FS)
#define TSD_SEG __seg_fs
#else
#define TSD_SEG
#endif

/* pop fails when the bin is empty; at the low-water mark (which the empty
 * bin is at too) it moves the mark along, out of line: a bin drained one
 * pop after another moves it at every pop (a third of larson-32k's slow
 * paths when that took the slow path). push fails when full. */
#define CACHE_BIN_DEFINE_OPS(suffix, QUAL)                                   \
    MA_INLINE bool cache_bin_pop##suffix(cache_bin_t QUAL *b, void **out)    \
    {                                                                        \
        void **head = b->head;                                               \
        if (unlikely(cache_bin_bits(head) == b->low_water)) {                \
            if (cache_bin_bits(head) == b->empty)                            \
                return false;                                                \
            b->low_water = cache_bin_bits(head + 1);                         \
        }                                                                    \
        b->head = head + 1;                                                  \
        b->nrequests++;                                                      \
        *out = *head;                                                        \
        return true;                                                         \
    }                                                                        \
    MA_INLINE bool cache_bin_push##suffix(cache_bin_t QUAL *b, void *p)      \
    {                                                                        \
        void **head = b->head;                                               \
        if (unlikely(cache_bin_bits(head) == b->full))                       \
            return false;                                                    \
        head[-1] = p;                                                        \
        b->head = head - 1;                                                  \
        return true;                                                         \
    }

CACHE_BIN_DEFINE_OPS(_fast, )
#if defined(__x86_64__) && defined(__SEG_FS) && !defined(MYALLOC_NO_SEG_FS)
CACHE_BIN_DEFINE_OPS(_seg, TSD_SEG)
#else
#define cache_bin_pop_seg cache_bin_pop_fast
#define cache_bin_push_seg cache_bin_push_fast
#endif

#endif
