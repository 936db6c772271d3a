/*
 * stats: totals over all arenas (the control plane builds on these).
 */
#ifndef MYALLOC_STATS_H
#define MYALLOC_STATS_H

#include "../common/common.h"

typedef struct stats_totals {
    size_t allocated;  /* bytes in objects handed out (usable sizes; thread caches count) */
    size_t active;     /* bytes in pages of live slabs and large objects */
    size_t mapped;     /* bytes mapped for arenas */
    size_t dirty;      /* free pages not yet purged */
    size_t muzzy;      /* MADV_FREE'd pages */
    size_t retained;   /* purged pages kept as address space */
    size_t metadata;   /* the allocator's own records */
    size_t nlarge;     /* live large objects */
} stats_totals_t;

void stats_totals(stats_totals_t *t);

#endif
