/*
 * te: thread events driven by the bytes a thread allocates.
 *
 * Each event keeps the value of thread_allocated at which it next fires.
 * tsd->next_event is the minimum of them (capped TE_MAX_WAIT ahead), so the
 * malloc fast path checks all of them with one compare:
 *
 *     if (thread_allocated + usize >= next_event) -> slow path
 *
 * The events are one table in te.c (te_events: a name, the wait to the
 * next firing, what firing does), indexed by enum te_event; adding an event
 * is an enum value and a table row:
 *   sample     the profiler's next sampled byte (exponential waits); decided
 *              before the allocation, by the caller, from te_alloc_event's
 *              result
 *   tcache_gc  every TE_GC_INTERVAL bytes: one cache-bin GC step
 *   periodic   every te_periodic_interval bytes: hooks registered by other
 *              modules (profile interval dumps, purging ticks)
 */
#ifndef MYALLOC_TE_H
#define MYALLOC_TE_H

#include "../common/common.h"

#define TE_MAX_WAIT           ((uint64_t)4 << 20)
/* 1 MiB: at 64 KiB (jemalloc's) the GC events of a thread allocating
 * 16 KiB objects cost 40% of the allocator's instructions (callgrind,
 * larson 1 thread 16 B..32 KiB, 200k ops: 81.8 M in all, 58.1 M at
 * 256 KiB, 46.6 M at 1 MiB with the reserve rule of tcache_gc_step, 44.8 M
 * with no GC at all). make bench-footprint's final and peak RSS did not
 * move between 256 KiB and 1 MiB (within 2%). */
#define TE_GC_INTERVAL        ((uint64_t)1 << 20)
#define TE_PERIODIC_INTERVAL_MAX ((uint64_t)1 << 20)
#define TE_NEVER              UINT64_MAX

enum te_event { TE_SAMPLE, TE_GC, TE_PERIODIC, TE_NEVENTS };

typedef struct te_state {
    uint64_t next[TE_NEVENTS];  /* thread_allocated value at which each fires */
    uint64_t periodic_last;     /* thread_allocated at the last periodic call */
    uint64_t prng;              /* the sampler's per-thread generator state */
    uint64_t sample_epoch;      /* te_sample_epoch when next[TE_SAMPLE] was drawn */
} te_state_t;

/* Sampling parameters, set by the profiler (through core). A change bumps
 * te_sample_epoch; each thread redraws its wait on its next slow path. */
extern uint64_t te_sample_epoch;
extern bool te_sample_on;        /* sampling active */
extern unsigned te_lg_sample;    /* R = 2^te_lg_sample */
extern uint64_t te_sample_seed;  /* nonzero: reproducible per-thread seeds */

void te_sample_configure(bool on, unsigned lg_sample, uint64_t seed);

/* A draw of the wait to the next sampled byte: floor(Exp(R)) + 1. */
uint64_t te_sample_wait(uint64_t *prng, unsigned lg_sample);
/* Seed a thread's generator (from the thread and the clock, or the seed). */
uint64_t te_prng_seed(const void *thread_addr, uint64_t serial);

struct tsd;
/* Initialise a new thread's events (its first sampling wait is drawn with
 * the configured R, like every later one). */
void te_init(struct tsd *tsd);
/* The slow path's event check, for an allocation of usize bytes that made
 * thread_allocated + usize reach next_event. Runs the events that are due
 * and returns whether this allocation is to be sampled (decided before it
 * is made). */
bool te_alloc_event(struct tsd *tsd, size_t usize);
/* An allocation made while re-entrant: no events run; a sample that falls
 * on it is counted as skipped (te_samples_skipped) and redrawn. */
void te_reentrant_alloc(struct tsd *tsd, size_t usize);
/* next_event = the nearest event, capped TE_MAX_WAIT ahead. */
void te_update_next(struct tsd *tsd);

extern uint64_t te_samples_skipped;

/* Take up a new sampling configuration now (the thread that changed it);
 * other threads take it up at their next slow path, which the GC event
 * bounds to TE_GC_INTERVAL bytes of their allocation. */
void te_resync(struct tsd *tsd);

/* Periodic hooks (at most a handful, registered at init): called with the
 * bytes the thread allocated since its last call, every te_periodic_interval
 * bytes (at most TE_PERIODIC_INTERVAL_MAX; lowered for fine-grained users
 * such as small profile-dump intervals). */
extern uint64_t te_periodic_interval;
typedef void te_periodic_hook_t(uint64_t bytes);
void te_periodic_register(te_periodic_hook_t *hook);

#endif
