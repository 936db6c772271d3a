/*
 * decay: the smooth purge allowance, see decay.h.
 */
#include "decay.h"

#include <string.h>
#include <time.h>

/* smoothstep(x) for x = (i + 1) / NEPOCHS, i = 0 (oldest) .. NEPOCHS-1,
 * in 1/2^24 units, computed once. */
#define H_SHIFT 24
static uint32_t h_table[DECAY_NEPOCHS];
/* The same for x = (i + 1) / DECAY_HOLD_NBUCKETS. */
static uint32_t hold_table[DECAY_HOLD_NBUCKETS];
static bool h_ready;

static uint32_t smoothstep_fixed(double x)
{
    return (uint32_t)(x * x * (3.0 - 2.0 * x) * (double)(1u << H_SHIFT) + 0.5);
}

static void h_init(void)
{
    for (unsigned i = 0; i < DECAY_NEPOCHS; i++)
        h_table[i] = smoothstep_fixed((double)(i + 1) / DECAY_NEPOCHS);
    for (unsigned i = 0; i < DECAY_HOLD_NBUCKETS; i++)
        hold_table[i] = smoothstep_fixed((double)(i + 1) / DECAY_HOLD_NBUCKETS);
    ma_store_release(&h_ready, true);
}

uint64_t decay_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void decay_init(decay_t *d, ssize_t ms, uint64_t now_ns)
{
    if (!ma_load_acquire(&h_ready))
        h_init(); /* idempotent: racing initialisers write the same table */
    d->ms = ms;
    d->interval_ns = ms > 0 ? (uint64_t)ms * 1000000ull / DECAY_NEPOCHS : 0;
    if (ms > 0 && d->interval_ns == 0)
        d->interval_ns = 1;
    d->epoch_start_ns = now_ns;
}

MA_WARM_TEXT void decay_reset(decay_t *d, ssize_t ms, uint64_t now_ns)
{
    memset(d, 0, sizeof(*d));
    decay_init(d, ms, now_ns);
}

bool decay_advance(decay_t *d, uint64_t now_ns, size_t npages, size_t *limit)
{
    if (d->ms <= 0 || now_ns < d->epoch_start_ns + d->interval_ns)
        return false;
    uint64_t nadvance = (now_ns - d->epoch_start_ns) / d->interval_ns;
    d->epoch_start_ns += nadvance * d->interval_ns;
    /* Age the backlog by nadvance epochs; what the set gained since the
     * last close goes in as the newest. */
    if (nadvance >= DECAY_NEPOCHS) {
        memset(d->backlog, 0, sizeof(d->backlog));
    } else {
        memmove(d->backlog, d->backlog + nadvance, (DECAY_NEPOCHS - nadvance) * sizeof(d->backlog[0]));
        memset(d->backlog + DECAY_NEPOCHS - nadvance, 0, nadvance * sizeof(d->backlog[0]));
    }
    size_t gained = npages > d->npages_last ? npages - d->npages_last : 0;
    d->backlog[DECAY_NEPOCHS - 1] = (uint32_t)MA_MIN(gained, (size_t)UINT32_MAX);
    uint64_t sum = 0;
    for (unsigned i = 0; i < DECAY_NEPOCHS; i++)
        sum += (uint64_t)d->backlog[i] * h_table[i];
    *limit = (size_t)(sum >> H_SHIFT);
    d->npages_last = npages;
    return true;
}

void decay_purged(decay_t *d, size_t npages)
{
    d->npages_last = npages;
}

uint64_t decay_ns_to_next_epoch(const decay_t *d, uint64_t now_ns)
{
    if (d->ms <= 0)
        return UINT64_MAX;
    uint64_t end = d->epoch_start_ns + d->interval_ns;
    return end > now_ns ? end - now_ns : 0;
}

void decay_hold_init(decay_hold_t *h, ssize_t ms, uint64_t now_ns, size_t level)
{
    if (!ma_load_acquire(&h_ready))
        h_init();
    h->bucket_ns = ms > 0 ? MA_MAX((uint64_t)ms * 1000000ull / DECAY_HOLD_NBUCKETS, 1) : 0;
    h->bucket_start_ns = now_ns;
    for (unsigned i = 0; i < DECAY_HOLD_NBUCKETS; i++)
        if (h->peak[i] != level) /* a new pool's stay unwritten */
            h->peak[i] = level;
}

size_t decay_hold_pages(decay_hold_t *h, uint64_t now_ns, size_t level)
{
    if (h->bucket_ns == 0)
        return 0;
    if (now_ns >= h->bucket_start_ns + h->bucket_ns) {
        /* Close the slices that ended; the new ones start at today's level
         * (a rise since is noted in the current one). */
        uint64_t n = (now_ns - h->bucket_start_ns) / h->bucket_ns;
        h->bucket_start_ns += n * h->bucket_ns;
        unsigned k = n >= DECAY_HOLD_NBUCKETS ? DECAY_HOLD_NBUCKETS : (unsigned)n;
        memmove(h->peak, h->peak + k, (DECAY_HOLD_NBUCKETS - k) * sizeof(h->peak[0]));
        for (unsigned i = DECAY_HOLD_NBUCKETS - k; i < DECAY_HOLD_NBUCKETS; i++)
            h->peak[i] = level;
    }
    size_t hold = 0;
    for (unsigned i = 0; i < DECAY_HOLD_NBUCKETS; i++) {
        if (h->peak[i] <= level)
            continue;
        size_t w = (size_t)(((unsigned __int128)(h->peak[i] - level) * hold_table[i]) >> H_SHIFT);
        hold = MA_MAX(hold, w);
    }
    return hold;
}
