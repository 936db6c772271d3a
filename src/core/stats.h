/*
 * stats: the allocator's statistics, read live. One table (stats.c) lists
 * every stats.* mallctl name with where its value comes from;
 * malloc_stats_print (stats_print.c) walks the same table.
 */
#ifndef MYALLOC_STATS_H
#define MYALLOC_STATS_H

#include "../arena/arena.h"
#include "ctl.h"

typedef struct stats_totals {
    size_t allocated;  /* bytes in objects handed out (usable sizes; thread caches count) */
    size_t active;     /* bytes in pages of live slabs, large and sampled objects */
    size_t mapped;     /* bytes mapped for arenas and the sampled region */
    size_t dirty;      /* free pages not yet purged */
    size_t muzzy;      /* MADV_FREE'd pages */
    size_t retained;   /* purged pages kept as address space */
    size_t metadata;   /* bytes mapped for the allocator's own records */
    size_t resident;   /* active + dirty + resident metadata, less slab pages purged (an upper bound) */
    size_t nlarge;     /* live large objects */
} stats_totals_t;

/* One arena's numbers (or all arenas merged). */
typedef struct stats_arena {
    unsigned nthreads;
    size_t pactive, pdirty, pmuzzy;     /* pages */
    size_t pslab_purged;                /* pages of active slabs purged (in pactive) */
    size_t mapped, retained, resident;  /* bytes */
    uint64_t dirty_npurge, dirty_nmadvise, dirty_purged;
    uint64_t muzzy_npurge, muzzy_nmadvise, muzzy_purged;
    size_t small_allocated;
    uint64_t small_nmalloc, small_ndalloc, small_nrequests, small_nfills, small_nflushes;
    size_t large_allocated;
    uint64_t large_nmalloc, large_ndalloc, large_nrequests;
} stats_arena_t;

typedef struct stats_field {
    size_t offset;
    ctl_type_t type;
} stats_field_t;

void stats_totals(stats_totals_t *t);
/* i is an arena index or MALLCTL_ARENAS_ALL; false if no such arena. */
bool stats_arena(size_t i, stats_arena_t *out);
bool stats_bin(size_t i, unsigned bin, bin_stats_t *out);
bool stats_lextent(size_t i, unsigned lextent, large_stats_t *out);

extern const ctl_entry_t stats_ctl_table[];
extern const unsigned stats_ctl_count;

#endif
