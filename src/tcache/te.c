/*
 * te: byte-driven thread events, see te.h.
 */
#include "te.h"

#include <time.h>

#include "tcache.h"

uint64_t te_sample_epoch = 1;
bool te_sample_on;
unsigned te_lg_sample = 19;
uint64_t te_sample_seed;
uint64_t te_samples_skipped;

#define TE_PERIODIC_MAX 4
uint64_t te_periodic_interval = TE_PERIODIC_INTERVAL_MAX;
static te_periodic_hook_t *periodic_hooks[TE_PERIODIC_MAX];
static unsigned nperiodic;

void te_periodic_register(te_periodic_hook_t *hook)
{
    if (nperiodic < TE_PERIODIC_MAX)
        periodic_hooks[nperiodic++] = hook;
}

void te_sample_configure(bool on, unsigned lg_sample, uint64_t seed)
{
    if (on)
        ma_math_boot(); /* the draws' tables, before te_sample_on publishes them */
    te_lg_sample = lg_sample;
    te_sample_seed = seed;
    ma_store_release(&te_sample_on, on);
    ma_fetch_add(&te_sample_epoch, 1);
}

uint64_t te_prng_seed(const void *thread_addr, uint64_t serial)
{
    if (te_sample_seed != 0) {
        /* Reproducible: the seed and the thread's creation order only. */
        uint64_t s = te_sample_seed ^ (serial * 0x2545f4914f6cdd1dULL);
        return ma_splitmix_next(&s);
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t s = (uint64_t)(uintptr_t)thread_addr ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec;
    ma_splitmix_next(&s);
    return ma_splitmix_next(&s);
}

MA_WARM_TEXT uint64_t te_sample_wait(uint64_t *prng, unsigned lg_sample)
{
    /* W = E * R with E ~ Exp(1) is Exp(mean R); the sampled byte is the
     * floor(W)-th one ahead, so an allocation of Z bytes is sampled with
     * probability P(W < Z) = 1 - exp(-Z/R). */
    double w = ma_exp_draw(prng) * ma_pow2((int)lg_sample); /* >= 0, finite */
    if (!(w < 9.0e18))
        return (uint64_t)9e18;
    return (uint64_t)(int64_t)w + 1;
}

/* ---------------------------------------------------------------------
 * The event table: when each event next fires and what it does.
 */

static bool sample_current(const tsd_t *tsd)
{
    return tsd->te.sample_epoch == ma_load_acquire(&te_sample_epoch);
}

static uint64_t sample_wait(tsd_t *tsd)
{
    tsd->te.sample_epoch = ma_load_acquire(&te_sample_epoch);
    if (!ma_load_acquire(&te_sample_on)) /* acquire: the draws' tables (te_sample_configure) */
        return TE_NEVER;
    return te_sample_wait(&tsd->te.prng, te_lg_sample);
}

static uint64_t gc_wait(tsd_t *tsd)
{
    (void)tsd;
    return TE_GC_INTERVAL;
}

static void gc_fire(tsd_t *tsd, uint64_t after)
{
    (void)after;
    tcache_gc_step(tsd);
}

static uint64_t periodic_wait(tsd_t *tsd)
{
    (void)tsd;
    return te_periodic_interval;
}

static void periodic_fire(tsd_t *tsd, uint64_t after)
{
    uint64_t bytes = after - tsd->te.periodic_last;
    tsd->te.periodic_last = after;
    for (unsigned i = 0; i < nperiodic; i++)
        periodic_hooks[i](bytes);
}

typedef struct te_event_desc {
    const char *name;
    uint64_t (*wait)(tsd_t *tsd);                 /* bytes from a firing to the next */
    void (*fire)(tsd_t *tsd, uint64_t after);     /* NULL: the caller acts on it */
} te_event_desc_t;

static const te_event_desc_t te_events[TE_NEVENTS] = {
    [TE_SAMPLE] = {"sample", sample_wait, NULL},
    [TE_GC] = {"tcache_gc", gc_wait, gc_fire},
    [TE_PERIODIC] = {"periodic", periodic_wait, periodic_fire},
};

/* Schedule event i from byte position `from` (saturating). */
static void te_schedule(tsd_t *tsd, unsigned i, uint64_t from)
{
    uint64_t w = te_events[i].wait(tsd);
    tsd->te.next[i] = w == TE_NEVER || from > TE_NEVER - w ? TE_NEVER : from + w;
}

void te_init(tsd_t *tsd)
{
    static uint64_t serial;
    tsd->te.prng = te_prng_seed(tsd, ma_fetch_add(&serial, 1));
    tsd->te.periodic_last = tsd->thread_allocated;
    for (unsigned i = 0; i < TE_NEVENTS; i++)
        te_schedule(tsd, i, tsd->thread_allocated);
}

MA_WARM_TEXT void te_resync(tsd_t *tsd)
{
    if (!sample_current(tsd))
        te_schedule(tsd, TE_SAMPLE, tsd->thread_allocated);
    tsd_update_next_event(tsd);
}

void te_update_next(tsd_t *tsd)
{
    uint64_t next = tsd->thread_allocated + TE_MAX_WAIT;
#pragma GCC unroll 8
    for (unsigned i = 0; i < TE_NEVENTS; i++)
        next = MA_MIN(next, tsd->te.next[i]);
    /* A sampling configuration changed: reach the slow path soon to redraw
     * (the GC event bounds how soon). */
    if (!sample_current(tsd))
        next = MA_MIN(next, tsd->te.next[TE_GC]);
    tsd->next_event = next;
}

bool te_alloc_event(tsd_t *tsd, size_t usize)
{
    uint64_t after = tsd->thread_allocated + usize;
    if (!sample_current(tsd))
        te_schedule(tsd, TE_SAMPLE, tsd->thread_allocated);
    bool sample = after >= tsd->te.next[TE_SAMPLE];
#pragma GCC unroll 8
    for (unsigned i = 0; i < TE_NEVENTS; i++) {
        if (after < tsd->te.next[i])
            continue;
        if (te_events[i].fire != NULL)
            te_events[i].fire(tsd, after);
        /* Memoryless for the sampler: a fresh wait from this allocation's end. */
        te_schedule(tsd, i, after);
    }
    /* next_event is set by the caller once the allocation is counted. */
    return sample;
}

MA_WARM_TEXT void te_reentrant_alloc(tsd_t *tsd, size_t usize)
{
    uint64_t after = tsd->thread_allocated + usize;
    if (sample_current(tsd) && after >= tsd->te.next[TE_SAMPLE]) {
        ma_fetch_add(&te_samples_skipped, 1);
        te_schedule(tsd, TE_SAMPLE, after);
    }
}
