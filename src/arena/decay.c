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
static bool h_ready;

static void h_init(void)
{
    for (unsigned i = 0; i < DECAY_NEPOCHS; i++) {
        double x = (double)(i + 1) / DECAY_NEPOCHS;
        double h = x * x * (3.0 - 2.0 * x);
        h_table[i] = (uint32_t)(h * (double)(1u << H_SHIFT) + 0.5);
    }
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
    ma_memzero_sparse(d, sizeof(*d)); /* a new pool's backlog stays untouched */
    d->ms = ms;
    d->interval_ns = ms > 0 ? (uint64_t)ms * 1000000ull / DECAY_NEPOCHS : 0;
    if (ms > 0 && d->interval_ns == 0)
        d->interval_ns = 1;
    d->epoch_start_ns = now_ns;
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
