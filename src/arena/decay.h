/*
 * decay: how many free pages may stay unpurged, as a smooth function of
 * when they were freed.
 *
 * Time is cut into DECAY_NEPOCHS epochs per decay period (decay_ms). For
 * each of the last DECAY_NEPOCHS epochs we remember how many pages the set
 * gained then; a page freed k epochs ago may stay with weight
 * h(1 - k/NEPOCHS), where h is smoothstep (3x^2 - 2x^3): fresh pages all
 * stay, pages a whole period old never do, and in between the allowance
 * falls off gently, so purging happens a little at a time instead of in
 * bursts. The owner (a page pool) purges down to the limit, oldest first.
 *
 * ms == -1: never purge; ms == 0: purge as soon as pages are freed.
 */
#ifndef MYALLOC_DECAY_H
#define MYALLOC_DECAY_H

#include <sys/types.h>

#include "../common/common.h"

#define DECAY_NEPOCHS 200

typedef struct decay {
    ssize_t ms;
    uint64_t interval_ns;        /* one epoch */
    uint64_t epoch_start_ns;     /* when the current epoch began */
    size_t npages_last;          /* the set's size when the last epoch closed */
    /* Pages gained per epoch, [NEPOCHS-1] newest; 32 bits (16 TiB of 4 KiB
     * pages per epoch at most) so that a pool's two backlogs take 1.6 KiB,
     * not 3.2: each arena has one, and these pages are resident. */
    uint32_t backlog[DECAY_NEPOCHS];
} decay_t;

/* Start d, which is zero (fresh memory: a new pool's backlog stays
 * untouched until used). decay_reset starts over a decay in use. */
void decay_init(decay_t *d, ssize_t ms, uint64_t now_ns);
void decay_reset(decay_t *d, ssize_t ms, uint64_t now_ns);

/* Close the epochs that ended by now (if any), given the set's current
 * size; returns true when at least one did and *limit is the number of
 * pages the set may keep. */
bool decay_advance(decay_t *d, uint64_t now_ns, size_t npages, size_t *limit);

/* After purging: the set now holds npages. */
void decay_purged(decay_t *d, size_t npages);

/* The time to the end of the current epoch (for a sleeping purger). */
uint64_t decay_ns_to_next_epoch(const decay_t *d, uint64_t now_ns);

uint64_t decay_now_ns(void);

/*
 * The hold: a heap that shrank keeps free pages up to the highest level of
 * pages in use it had within the last window, with a weight that falls off
 * along the same smoothstep as the page's age in the window grows. Decay
 * purges no further than that (a pool's dirty set only; the dirty cap,
 * explicit purges and abandoned arenas ignore it). A program whose heap
 * goes down and comes back up within the window finds its pages still
 * there, instead of faulting in again what decay purged meanwhile (the
 * server workload of make bench-footprint: purged and faulted-in pages were
 * its main cost over never purging); a heap that stays lower for longer
 * gives them back, gradually.
 *
 * peak[] is the highest level seen in each of the last NBUCKETS slices of
 * the window ([NBUCKETS-1] the current one); hold pages are
 * max over slices of (peak - now) x smoothstep(age).
 */
#define DECAY_HOLD_NBUCKETS 8

typedef struct decay_hold {
    uint64_t bucket_ns;       /* one slice: window / NBUCKETS; 0: no hold */
    uint64_t bucket_start_ns; /* when the current slice began */
    size_t peak[DECAY_HOLD_NBUCKETS];
} decay_hold_t;

/* A window of ms (0: no hold); level is the pages in use now. */
void decay_hold_init(decay_hold_t *h, ssize_t ms, uint64_t now_ns, size_t level);

/* The level rose to `level` (under the owner's lock; no clock read). */
MA_INLINE void decay_hold_note(decay_hold_t *h, size_t level)
{
    if (level > h->peak[DECAY_HOLD_NBUCKETS - 1])
        h->peak[DECAY_HOLD_NBUCKETS - 1] = level;
}

/* How many free pages to keep now, at the given level. */
size_t decay_hold_pages(decay_hold_t *h, uint64_t now_ns, size_t level);

#endif
