/*
 * stats: statistics read live from the arenas, and the table of every
 * stats.* mallctl name (malloc_stats_print walks the same table).
 */
#include "stats.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "../arena/arena.h"
#include "../arena/base.h"
#include "../prof/prof.h"
#include "myalloc.h"

/* ---------------------------------------------------------------------
 * Reading the arenas.
 */

static void bin_read(arena_t *a, unsigned b, bin_stats_t *out)
{
    if (!arena_bin_used(a, b)) {
        memset(out, 0, sizeof(*out));
        return;
    }
    bin_t *bin = &a->bins[b];
    ma_mutex_lock(&bin->lock);
    *out = bin->stats;
    ma_mutex_unlock(&bin->lock);
}

static void bin_add(bin_stats_t *to, const bin_stats_t *s)
{
    _Static_assert(sizeof(bin_stats_t) % sizeof(uint64_t) == 0 && sizeof(size_t) == sizeof(uint64_t),
                   "bin_stats_t is a row of 64-bit counters");
    uint64_t t[sizeof(bin_stats_t) / sizeof(uint64_t)], f[MA_ARRAY_LEN(t)];
    memcpy(t, to, sizeof(t));
    memcpy(f, s, sizeof(f));
    for (size_t i = 0; i < MA_ARRAY_LEN(t); i++)
        t[i] += f[i];
    memcpy(to, t, sizeof(t));
}

static void arena_add(stats_arena_t *to, arena_t *a)
{
    to->nthreads += ma_load_relaxed(&a->nthreads);
    ma_mutex_lock(&a->pool.lock);
    to->pactive += a->pool.stats.active_pages;
    to->pslab_purged += ma_load_relaxed(&a->pool.stats.slab_purged_pages);
    to->pdirty += a->pool.dirty.npages;
    to->pmuzzy += a->pool.muzzy.npages;
    to->mapped += a->pool.stats.mapped;
    to->retained += a->pool.retained.npages << LG_PAGE;
    to->dirty_npurge += a->pool.stats.npurge[0];
    to->dirty_nmadvise += a->pool.stats.nmadvise[0];
    to->dirty_purged += a->pool.stats.purged_pages[0];
    to->muzzy_npurge += a->pool.stats.npurge[1];
    to->muzzy_nmadvise += a->pool.stats.nmadvise[1];
    to->muzzy_purged += a->pool.stats.purged_pages[1];
    ma_mutex_unlock(&a->pool.lock);
    for (unsigned b = 0; b < SC_NBINS; b++) {
        bin_stats_t s;
        bin_read(a, b, &s);
        to->small_allocated += s.curregs * sc_bin_info[b].reg_size;
        to->small_nmalloc += s.nmalloc;
        to->small_ndalloc += s.ndalloc;
        to->small_nrequests += s.nrequests;
        to->small_nfills += s.nfills;
        to->small_nflushes += s.nflushes;
    }
    for (unsigned c = 0; c < SC_NSIZES - SC_NBINS; c++) {
        large_stats_t l;
        arena_large_read(a, c, &l);
        to->large_allocated += l.curlextents * sc_index2size(SC_NBINS + c);
        to->large_nmalloc += l.nmalloc;
        to->large_ndalloc += l.ndalloc;
        to->large_nrequests += l.nrequests;
    }
    to->resident = (to->pactive - to->pslab_purged + to->pdirty) << LG_PAGE;
}


bool stats_arena(size_t i, stats_arena_t *out)
{
    memset(out, 0, sizeof(*out));
    if (i == MALLCTL_ARENAS_ALL) {
        arena_t *a;
        for (unsigned k = 0; (a = arena_next(&k)) != NULL;)
            arena_add(out, a);
        return true;
    }
    arena_t *a = arena_if_exists(i);
    if (a == NULL)
        return false;
    arena_add(out, a);
    return true;
}

bool stats_bin(size_t i, unsigned b, bin_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    if (b >= SC_NBINS)
        return false;
    if (i == MALLCTL_ARENAS_ALL) {
        arena_t *a;
        for (unsigned k = 0; (a = arena_next(&k)) != NULL;) {
            bin_stats_t s;
            bin_read(a, b, &s);
            bin_add(out, &s);
        }
        return true;
    }
    arena_t *a = arena_if_exists(i);
    if (a == NULL)
        return false;
    bin_read(a, b, out);
    return true;
}

bool stats_lextent(size_t i, unsigned c, large_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    if (c >= SC_NSIZES - SC_NBINS)
        return false;
    arena_t *a;
    for (unsigned k = 0; (a = arena_next(&k)) != NULL;) {
        if (i != MALLCTL_ARENAS_ALL && a->ind != i)
            continue;
        large_stats_t l;
        arena_large_read(a, c, &l);
        out->nmalloc += l.nmalloc;
        out->ndalloc += l.ndalloc;
        out->nrequests += l.nrequests;
        out->curlextents += l.curlextents;
    }
    return i == MALLCTL_ARENAS_ALL || arena_if_exists(i) != NULL;
}

void stats_totals(stats_totals_t *t)
{
    *t = (stats_totals_t){0};
    stats_arena_t all;
    stats_arena(MALLCTL_ARENAS_ALL, &all);
    prof_region_t pr;
    prof_region_stats(&pr);
    t->allocated = all.small_allocated + all.large_allocated + pr.allocated;
    t->active = (all.pactive + pr.active_pages) << LG_PAGE;
    t->mapped = all.mapped + pr.mapped;
    t->dirty = (all.pdirty + pr.dirty_pages) << LG_PAGE;
    t->muzzy = all.pmuzzy << LG_PAGE;
    t->retained = all.retained + (pr.retained_pages << LG_PAGE);
    t->metadata = base_mapped_bytes();
    t->resident = t->active - (all.pslab_purged << LG_PAGE) + t->dirty + base_resident_bytes();
    for (unsigned c = 0; c < SC_NSIZES - SC_NBINS; c++) {
        large_stats_t l;
        stats_lextent(MALLCTL_ARENAS_ALL, c, &l);
        t->nlarge += l.curlextents;
    }
}

/* ---------------------------------------------------------------------
 * The stats.* names. A field is read from a snapshot by offset and type;
 * malloc_stats_print walks this table too.
 */

static int read_field(const void *base, const stats_field_t *f, ctl_val_t *out)
{
    memcpy(out, (const char *)base + f->offset, ctl_type_size(f->type));
    return 0;
}

static int h_total(ctl_req_t *r, ctl_val_t *out)
{
    stats_totals_t t;
    stats_totals(&t);
    return read_field(&t, r->extra, out);
}

static int h_arena(ctl_req_t *r, ctl_val_t *out)
{
    stats_arena_t s;
    if (!stats_arena(r->idx[0], &s))
        return ENOENT;
    return read_field(&s, r->extra, out);
}

static int h_bin(ctl_req_t *r, ctl_val_t *out)
{
    bin_stats_t s;
    if (!stats_bin(r->idx[0], (unsigned)MA_MIN(r->idx[1], UINT32_MAX), &s))
        return ENOENT;
    return read_field(&s, r->extra, out);
}

static int h_lextent(ctl_req_t *r, ctl_val_t *out)
{
    large_stats_t s;
    if (!stats_lextent(r->idx[0], (unsigned)MA_MIN(r->idx[1], UINT32_MAX), &s))
        return ENOENT;
    return read_field(&s, r->extra, out);
}

#define F(st, field, t) (&(const stats_field_t){offsetof(st, field), t})
#define TOTAL(name, field) {"stats." name, CTL_SIZE, CTL_R, h_total, F(stats_totals_t, field, CTL_SIZE)}
#define ARENA(name, field, t) {"stats.arenas.<i>." name, t, CTL_R, h_arena, F(stats_arena_t, field, t)}
#define BIN(name, field, t) {"stats.arenas.<i>.bins.<i>." name, t, CTL_R, h_bin, F(bin_stats_t, field, t)}
#define LEXT(name, field, t) {"stats.arenas.<i>.lextents.<i>." name, t, CTL_R, h_lextent, F(large_stats_t, field, t)}

const ctl_entry_t stats_ctl_table[] = {
    TOTAL("allocated", allocated),
    TOTAL("active", active),
    TOTAL("metadata", metadata),
    TOTAL("resident", resident),
    TOTAL("mapped", mapped),
    TOTAL("retained", retained),

    ARENA("nthreads", nthreads, CTL_UNSIGNED),
    ARENA("pactive", pactive, CTL_SIZE),
    ARENA("pdirty", pdirty, CTL_SIZE),
    ARENA("pmuzzy", pmuzzy, CTL_SIZE),
    ARENA("pslab_purged", pslab_purged, CTL_SIZE),
    ARENA("mapped", mapped, CTL_SIZE),
    ARENA("retained", retained, CTL_SIZE),
    ARENA("resident", resident, CTL_SIZE),
    ARENA("dirty_npurge", dirty_npurge, CTL_UINT64),
    ARENA("dirty_nmadvise", dirty_nmadvise, CTL_UINT64),
    ARENA("dirty_purged", dirty_purged, CTL_UINT64),
    ARENA("muzzy_npurge", muzzy_npurge, CTL_UINT64),
    ARENA("muzzy_nmadvise", muzzy_nmadvise, CTL_UINT64),
    ARENA("muzzy_purged", muzzy_purged, CTL_UINT64),
    ARENA("small.allocated", small_allocated, CTL_SIZE),
    ARENA("small.nmalloc", small_nmalloc, CTL_UINT64),
    ARENA("small.ndalloc", small_ndalloc, CTL_UINT64),
    ARENA("small.nrequests", small_nrequests, CTL_UINT64),
    ARENA("small.nfills", small_nfills, CTL_UINT64),
    ARENA("small.nflushes", small_nflushes, CTL_UINT64),
    ARENA("large.allocated", large_allocated, CTL_SIZE),
    ARENA("large.nmalloc", large_nmalloc, CTL_UINT64),
    ARENA("large.ndalloc", large_ndalloc, CTL_UINT64),
    ARENA("large.nrequests", large_nrequests, CTL_UINT64),

    BIN("nmalloc", nmalloc, CTL_UINT64),
    BIN("ndalloc", ndalloc, CTL_UINT64),
    BIN("nrequests", nrequests, CTL_UINT64),
    BIN("curregs", curregs, CTL_SIZE),
    BIN("nfills", nfills, CTL_UINT64),
    BIN("nflushes", nflushes, CTL_UINT64),
    BIN("nslabs", nslabs, CTL_UINT64),
    BIN("curslabs", curslabs, CTL_SIZE),
    BIN("nonfull_slabs", nonfull_slabs, CTL_SIZE),
    BIN("nlent", nlent, CTL_UINT64),

    LEXT("nmalloc", nmalloc, CTL_UINT64),
    LEXT("ndalloc", ndalloc, CTL_UINT64),
    LEXT("nrequests", nrequests, CTL_UINT64),
    LEXT("curlextents", curlextents, CTL_SIZE),
};
const unsigned stats_ctl_count = MA_ARRAY_LEN(stats_ctl_table);
