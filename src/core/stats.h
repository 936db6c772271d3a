/*
 * stats: the allocator's statistics, read live. One table (stats.c) lists
 * every stats.* mallctl name with how to compute it; malloc_stats_print
 * walks the same table.
 */
#ifndef MYALLOC_STATS_H
#define MYALLOC_STATS_H

#include "ctl.h"

typedef struct stats_totals {
    size_t allocated;  /* bytes in objects handed out (usable sizes; thread caches count) */
    size_t active;     /* bytes in pages of live slabs and large and sampled objects */
    size_t mapped;     /* bytes mapped for arenas and the sampled region */
    size_t dirty;      /* free pages not yet purged */
    size_t muzzy;      /* MADV_FREE'd pages */
    size_t retained;   /* purged pages kept as address space */
    size_t metadata;   /* the allocator's own records */
    size_t resident;   /* an upper estimate of resident bytes */
    size_t nlarge;     /* live large objects */
} stats_totals_t;

void stats_totals(stats_totals_t *t);

extern const ctl_entry_t stats_ctl_table[];
extern const unsigned stats_ctl_count;

#endif
