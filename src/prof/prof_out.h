/*
 * prof_out: what the profile writers other than the text one share.
 *
 * A dump in the pprof, folded or svg format first copies the records'
 * counters into a snapshot (under each stripe lock in turn, no lock held
 * across the dump), then names every distinct frame once (prof_frames),
 * then writes. All memory is scratch (prof_scratch.h), unmapped after the
 * dump: none of it calls malloc.
 */
#ifndef MYALLOC_PROF_OUT_H
#define MYALLOC_PROF_OUT_H

#include "prof_scratch.h"
#include "prof_symbol.h"
#include "prof_table.h"

typedef struct prof_snap_rec {
    const prof_stack_t *stack;  /* stacks are immutable and never freed */
    unsigned szind, lg_sample;
    uint64_t live, accum;       /* raw sampled counts (live at the peak in a peak dump) */
    uint64_t resident, swapped; /* raw bytes of the live samples on resident / swapped pages */
} prof_snap_rec_t;

typedef struct prof_snap {
    prof_scratch_t *sc;
    prof_snap_rec_t *recs;      /* records of one stack are adjacent */
    size_t nrecs;
    unsigned lg_now;            /* the current R = 2^lg_now */
    bool peak;                  /* a peak profile (live at the peak; no cumulative counts) */
    bool resid;                 /* resident / swapped were measured */
    prof_maps_t maps;           /* this process's maps */
    uint64_t time_ns;           /* wall clock at the dump */
} prof_snap_t;

/* The unbiasing weight of a record: a sample stands for w objects. */
MA_INLINE double prof_snap_w(const prof_snap_rec_t *r)
{
    return prof_weight(r->szind, r->lg_sample);
}

/* The distinct frames of a snapshot, named. */
typedef struct prof_frame {
    uint64_t addr;              /* the return address as recorded */
    prof_sym_t sym;             /* of addr - 1 (the call instruction) */
    const char *name;           /* printable: function, or object+offset, or address */
    uint32_t index;             /* dense, from 0 */
} prof_frame_t;

typedef struct prof_frames {
    prof_frame_t *v;
    size_t n;
    uint32_t *slots;            /* open addressing over v: index + 1, 0 empty */
    size_t mask;
} prof_frames_t;

bool prof_frames_build(prof_snap_t *snap, prof_frames_t *f);
const prof_frame_t *prof_frames_get(const prof_frames_t *f, uint64_t addr);

/* Writers: 0 or an errno value. */
int prof_write_pprof(int fd, prof_snap_t *snap);
int prof_write_folded(int fd, prof_snap_t *snap);
int prof_write_svg(int fd, prof_snap_t *snap);

/* Fill every record's resident / swapped bytes (under the dump lock).
 * False when /proc/self/pagemap cannot be read. */
bool prof_residency_collect(void);

#endif
