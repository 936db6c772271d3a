/*
 * stats: totals over all arenas.
 */
#include "stats.h"

#include "../arena/arena.h"
#include "../arena/base.h"

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
    t->metadata = base_mapped_bytes();
}
