/*
 * prof_table: interned stacks and their counters per (size class, R).
 *
 * A lock-striped hash table of stacks. Each stack holds a list of records,
 * one per (size class, lg R) it was sampled at, with raw sampled counts:
 *
 *   live   sampled objects of that class on that stack not yet freed
 *   accum  sampled objects ever (since the last prof.reset)
 *
 * Unbiased estimates of a record are count * w and count * usize * w with
 * w = 1 / (1 - exp(-usize / R)) for the record's own R. Records and stacks
 * live in metadata memory and are never freed (they are bounded by the
 * program's distinct allocation sites).
 */
#ifndef MYALLOC_PROF_TABLE_H
#define MYALLOC_PROF_TABLE_H

#include "prof.h"

typedef struct prof_rec prof_rec_t;

typedef struct prof_stack {
    struct prof_stack *next;   /* hash chain */
    prof_rec_t *recs;
    uint64_t hash;
    uint32_t depth;
    void *frames[];            /* return addresses, leaf first */
} prof_stack_t;

struct prof_rec {
    prof_rec_t *next;          /* the stack's list */
    prof_rec_t *hnext;         /* chain of its (stack, szind, lg_sample) bucket */
    prof_stack_t *stack;
    uint16_t szind;
    uint8_t lg_sample;
    uint64_t live;
    uint64_t accum;
    /* The peak: live as it was at the last new maximum of the sampled live
     * size (peak epoch E), saved lazily: the first change of a record after
     * E began copies live into peak_live and sets peak_epoch = E, so a
     * record with peak_epoch != E still has its peak value in live. */
    uint64_t peak_live;
    uint64_t peak_epoch;
    uint64_t wbytes;           /* one sample's unbiased bytes, usize * w, rounded */
    /* Dump-time scratch, written and read under the dump lock only: bytes
     * of this record's live sampled objects on resident / swapped pages. */
    uint64_t resident, swapped;
};

/* Count one sampled object, held by extent e, small_bytes its usable size
 * if it has a page run of its own (0 if large): e is linked into the live
 * list of its record's stripe and e->prof set. NULL when metadata memory
 * is exhausted (e untouched). */
prof_rec_t *prof_table_record(void *const *frames, unsigned depth, unsigned szind, unsigned lg_sample,
                              extent_t *e, size_t small_bytes);
/* Its free (e->prof non-NULL; small_bytes as recorded): unlinked, e->prof
 * cleared. */
void prof_table_unrecord(extent_t *e, size_t small_bytes);
/* Visit every recorded live extent, each stripe's under its lock (the
 * visitor must not allocate or take allocator locks). */
typedef void prof_live_visit_fn(const extent_t *e, void *arg);
void prof_table_live_foreach(prof_live_visit_fn *fn, void *arg);
/* Sums over the stripes, read without their locks. */
typedef struct prof_table_sums {
    size_t nlive;        /* recorded live extents */
    uint64_t nsamples;   /* samples recorded */
    size_t small_bytes;  /* usable bytes of recorded live samples with runs of their own */
} prof_table_sums_t;
prof_table_sums_t prof_table_sums(void);

/* Visit every stack under its stripe's lock (the visitor must not
 * allocate or take allocator locks). */
typedef void prof_visit_fn(const prof_stack_t *stack, void *arg);
void prof_table_foreach(prof_visit_fn *fn, void *arg);

/* Zero every record's cumulative count. */
void prof_table_reset_accum(void);

/* The peak of the sampled live size (the sum of wbytes over live samples,
 * an unbiased estimate of the live heap): prof_peak_epoch counts new
 * maxima; prof_peak_bytes is the latest one; prof_live_bytes the current
 * value. A new maximum costs an atomic add and a compare per sample. */
extern uint64_t prof_peak_epoch, prof_peak_bytes, prof_live_bytes;
/* Live count of rec at the peak whose epoch is epoch (under rec's stripe
 * lock, i.e. inside prof_table_foreach). */
MA_INLINE uint64_t prof_rec_peak_live(const prof_rec_t *r, uint64_t epoch)
{
    return r->peak_epoch == epoch ? r->peak_live : r->live;
}
/* Start the peak over at the current state (prof.reset). */
void prof_peak_restart(void);

/* The unbiasing weight of class szind at R = 2^lg (from the table for that
 * R; prof_weights_prepare builds it ahead of use). */
double prof_weight(unsigned szind, unsigned lg_sample);
void prof_weights_prepare(unsigned lg_sample);

void prof_table_prefork(void);
void prof_table_postfork_parent(void);
void prof_table_postfork_child(void);

#endif
