/*
 * stats: totals over all arenas.
 */
#include "stats.h"

#include "../arena/arena.h"
#include "../arena/base.h"
#include "../prof/prof.h"

void stats_totals(stats_totals_t *t)
{
    *t = (stats_totals_t){0};
    for (unsigned i = 0; i < ARENAS_MAX; i++) {
        arena_t *a = ma_load_acquire(&arenas[i]);
        if (a == NULL)
            continue;
        for (unsigned b = 0; b < SC_NBINS; b++) {
            bin_t *bin = &a->bins[b];
            ma_mutex_lock(&bin->lock);
            t->allocated += bin->stats.curregs * sc_bin_info[b].reg_size;
            ma_mutex_unlock(&bin->lock);
        }
        t->allocated += ma_load_relaxed(&a->large_allocated);
        for (unsigned c = 0; c < SC_NSIZES - SC_NBINS; c++)
            t->nlarge += ma_load_relaxed(&a->large[c].curlextents);
        ma_mutex_lock(&a->pool.lock);
        t->active += a->pool.stats.active_pages << LG_PAGE;
        t->mapped += a->pool.stats.mapped;
        t->dirty += a->pool.dirty.npages << LG_PAGE;
        t->muzzy += a->pool.muzzy.npages << LG_PAGE;
        t->retained += a->pool.retained.npages << LG_PAGE;
        ma_mutex_unlock(&a->pool.lock);
    }
    prof_totals_t pt;
    prof_totals_get(&pt);
    t->allocated += pt.sampled_small_bytes;
    t->metadata = base_mapped_bytes();
    t->resident = t->active + t->dirty + t->metadata;
}

#define STATS_TOTAL_HANDLER(field)                                             \
    static int h_stats_##field(ctl_req_t *r, ctl_val_t *out)                   \
    {                                                                          \
        (void)r;                                                               \
        stats_totals_t t;                                                      \
        stats_totals(&t);                                                      \
        out->z = t.field;                                                      \
        return 0;                                                              \
    }
STATS_TOTAL_HANDLER(allocated)
STATS_TOTAL_HANDLER(active)
STATS_TOTAL_HANDLER(metadata)
STATS_TOTAL_HANDLER(resident)
STATS_TOTAL_HANDLER(mapped)
STATS_TOTAL_HANDLER(retained)

const ctl_entry_t stats_ctl_table[] = {
    {"stats.allocated", CTL_SIZE, CTL_R, h_stats_allocated, NULL},
    {"stats.active", CTL_SIZE, CTL_R, h_stats_active, NULL},
    {"stats.metadata", CTL_SIZE, CTL_R, h_stats_metadata, NULL},
    {"stats.resident", CTL_SIZE, CTL_R, h_stats_resident, NULL},
    {"stats.mapped", CTL_SIZE, CTL_R, h_stats_mapped, NULL},
    {"stats.retained", CTL_SIZE, CTL_R, h_stats_retained, NULL},
};
const unsigned stats_ctl_count = MA_ARRAY_LEN(stats_ctl_table);
