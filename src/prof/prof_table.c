/*
 * prof_table: the stack table, see prof_table.h.
 */
#include "prof_table.h"

#include <string.h>

#include "../arena/base.h"

#define PROF_NSTRIPES 64
#define PROF_NBUCKETS (1u << 14)

/* Stacks by stack hash, and records by (stack hash, szind, lg_sample): a
 * stack sampled at many sizes (one call site with sizes from a formula) has
 * as many records, and walking its list on every sample cost ~100 ns in
 * cache misses. A record's bucket is in its stack's stripe. */
MA_LARGE_BSS static prof_stack_t *buckets[PROF_NBUCKETS];
MA_LARGE_BSS static prof_rec_t *rec_buckets[PROF_NBUCKETS];
static base_cache_t rec_records = BASE_CACHE_INIT(prof_rec_t);

/* A stripe: the lock of its buckets, and what a sample would otherwise
 * update under locks and atomics of its own: the live sampled extents of
 * its stacks (for residency; linked through lru_prev / lru_next, which the
 * extent layer uses only while an extent is free), their count, the
 * samples recorded and the usable bytes of those with a page run of their
 * own. Sums over the stripes are read without the locks. One cache line
 * each: threads sampling different stacks do not share one. */
typedef struct prof_stripe {
    ma_mutex_t lock;
    extent_t *live;
    size_t nlive;
    uint64_t nsamples;
    size_t small_bytes;
} MA_ALIGNED(MA_CACHELINE) prof_stripe_t;

MA_LARGE_BSS static prof_stripe_t stripes[PROF_NSTRIPES]; /* zero: unlocked, empty */

static prof_stripe_t *stripe_of(uint64_t hash)
{
    return &stripes[(hash & (PROF_NBUCKETS - 1)) % PROF_NSTRIPES];
}

static uint64_t stack_hash(void *const *frames, unsigned depth)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ depth;
    for (unsigned i = 0; i < depth; i++) {
        h ^= (uint64_t)(uintptr_t)frames[i];
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    return h;
}

/* ---------------------------------------------------------------------
 * The peak. A new maximum of the sampled live size starts a new epoch;
 * records keep their live count of the epoch's start lazily (peak_save,
 * under the stripe lock, before any change), so taking the snapshot is
 * O(1) and the peak is exact: the state right after the sample that made
 * the maximum. Records are read under their stripe locks at dump time; a
 * dump that races with a new maximum may mix the two peaks' states.
 */
uint64_t prof_peak_epoch = 1, prof_peak_bytes, prof_live_bytes;

MA_INLINE void peak_save(prof_rec_t *r)
{
    uint64_t e = ma_load_acquire(&prof_peak_epoch);
    if (r->peak_epoch != e) {
        r->peak_live = r->live;
        r->peak_epoch = e;
    }
}

static void peak_add(uint64_t wbytes)
{
    uint64_t now = ma_fetch_add(&prof_live_bytes, wbytes) + wbytes;
    uint64_t peak = ma_load_relaxed(&prof_peak_bytes);
    while (now > peak) {
        if (ma_cas(&prof_peak_bytes, &peak, now)) {
            ma_fetch_add(&prof_peak_epoch, 1);
            break;
        }
    }
}

void prof_peak_restart(void)
{
    ma_store_release(&prof_peak_bytes, ma_load_relaxed(&prof_live_bytes));
    ma_fetch_add(&prof_peak_epoch, 1);
}

static bool stack_is(const prof_stack_t *s, uint64_t h, void *const *frames, unsigned depth)
{
    return s->hash == h && s->depth == depth && memcmp(s->frames, frames, depth * sizeof(void *)) == 0;
}

static unsigned rec_bucket(uint64_t h, unsigned szind, unsigned lg_sample)
{
    uint64_t k = (h ^ ((uint64_t)szind << 8 | lg_sample)) * 0x9e3779b97f4a7c15ULL;
    uint64_t stripe = (h & (PROF_NBUCKETS - 1)) % PROF_NSTRIPES;
    return (unsigned)((((k >> 32) / PROF_NSTRIPES) * PROF_NSTRIPES + stripe) & (PROF_NBUCKETS - 1));
}

/* The stack of the thread's last sample. A thread samples one site again
 * and again: comparing the frames with that stack's costs less than
 * hashing them, and its records are then found by comparing pointers
 * (stacks are interned and never freed). */
static __thread const prof_stack_t *last_stack __attribute__((tls_model("initial-exec")));

prof_rec_t *prof_table_record(void *const *frames, unsigned depth, unsigned szind, unsigned lg_sample,
                              extent_t *e, size_t small_bytes)
{
    const prof_stack_t *known = last_stack;
    uint64_t h;
    if (known != NULL && known->depth == depth && memcmp(known->frames, frames, depth * sizeof(void *)) == 0) {
        h = known->hash;
    } else {
        known = NULL;
        h = stack_hash(frames, depth);
    }
    prof_rec_t **rbucket = &rec_buckets[rec_bucket(h, szind, lg_sample)];
    prof_stripe_t *st = stripe_of(h);
    ma_mutex_t *lock = &st->lock;
    ma_mutex_lock(lock);
    prof_rec_t *r = *rbucket;
    while (r != NULL && !(r->szind == szind && r->lg_sample == lg_sample &&
                          (known != NULL ? r->stack == known : stack_is(r->stack, h, frames, depth))))
        r = r->hnext;
    if (r != NULL)
        goto found;
    prof_stack_t **bucket = &buckets[h & (PROF_NBUCKETS - 1)];
    prof_stack_t *s = *bucket;
    while (s != NULL && !stack_is(s, h, frames, depth))
        s = s->next;
    if (s == NULL) {
        s = base_alloc(sizeof(prof_stack_t) + depth * sizeof(void *), 16);
        if (s == NULL)
            goto fail;
        s->hash = h;
        s->depth = depth;
        memcpy(s->frames, frames, depth * sizeof(void *));
        s->next = *bucket;
        *bucket = s;
    }
    r = base_cache_get(&rec_records);
    if (r == NULL)
        goto fail;
    r->stack = s;
    r->szind = (uint16_t)szind;
    r->lg_sample = (uint8_t)lg_sample;
    r->wbytes = (uint64_t)ma_llround((double)sc_index2size(szind) * prof_weight(szind, lg_sample));
    r->next = s->recs;
    s->recs = r;
    r->hnext = *rbucket;
    *rbucket = r;
found:
    last_stack = r->stack;
    peak_save(r);
    r->live++;
    r->accum++;
    e->prof = r;
    e->lru_prev = NULL;
    e->lru_next = st->live;
    if (st->live != NULL)
        st->live->lru_prev = e;
    st->live = e;
    st->nlive++;
    st->nsamples++;
    st->small_bytes += small_bytes;
    ma_mutex_unlock(lock);
    peak_add(r->wbytes);
    return r;
fail:
    ma_mutex_unlock(lock);
    return NULL;
}

void prof_table_unrecord(extent_t *e, size_t small_bytes)
{
    prof_rec_t *rec = e->prof;
    prof_stripe_t *st = stripe_of(rec->stack->hash);
    ma_mutex_lock(&st->lock);
    peak_save(rec);
    rec->live--;
    if (e->lru_prev != NULL)
        e->lru_prev->lru_next = e->lru_next;
    else
        st->live = e->lru_next;
    if (e->lru_next != NULL)
        e->lru_next->lru_prev = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
    e->prof = NULL;
    st->nlive--;
    st->small_bytes -= small_bytes;
    ma_mutex_unlock(&st->lock);
    ma_fetch_sub(&prof_live_bytes, rec->wbytes);
}

void prof_table_live_foreach(prof_live_visit_fn *fn, void *arg)
{
    for (unsigned i = 0; i < PROF_NSTRIPES; i++) {
        prof_stripe_t *st = &stripes[i];
        ma_mutex_lock(&st->lock);
        for (const extent_t *e = st->live; e != NULL; e = e->lru_next)
            fn(e, arg);
        ma_mutex_unlock(&st->lock);
    }
}

prof_table_sums_t prof_table_sums(void)
{
    prof_table_sums_t t = {0, 0, 0};
    for (unsigned i = 0; i < PROF_NSTRIPES; i++) {
        t.nlive += ma_load_relaxed(&stripes[i].nlive);
        t.nsamples += ma_load_relaxed(&stripes[i].nsamples);
        t.small_bytes += ma_load_relaxed(&stripes[i].small_bytes);
    }
    return t;
}

void prof_table_foreach(prof_visit_fn *fn, void *arg)
{
    for (unsigned st = 0; st < PROF_NSTRIPES; st++) {
        ma_mutex_t *lock = &stripes[st].lock;
        ma_mutex_lock(lock);
        for (unsigned b = st; b < PROF_NBUCKETS; b += PROF_NSTRIPES)
            for (const prof_stack_t *s = buckets[b]; s != NULL; s = s->next)
                fn(s, arg);
        ma_mutex_unlock(lock);
    }
}

static void reset_visit(const prof_stack_t *s, void *arg)
{
    (void)arg;
    for (prof_rec_t *r = s->recs; r != NULL; r = r->next)
        r->accum = 0;
}

void prof_table_reset_accum(void)
{
    prof_table_foreach(reset_visit, NULL);
}

/* w = 1 / (1 - exp(-usize / R)) for every class, one table per R: built on
 * first use of that R (prof_boot and prof.reset build the current one),
 * published once and never rewritten, so readers need no lock. */
typedef struct prof_weights {
    double w[SC_NSIZES];
} prof_weights_t;

static prof_weights_t *weights_by_lg[64];
static ma_mutex_t weight_lock = MA_MUTEX_INITIALIZER;

static const prof_weights_t *weights_get(unsigned lg_sample)
{
    prof_weights_t *t = ma_load_acquire(&weights_by_lg[lg_sample]);
    if (likely(t != NULL))
        return t;
    ma_mutex_lock(&weight_lock);
    t = weights_by_lg[lg_sample];
    if (t == NULL) {
        t = base_alloc(sizeof(*t), 64);
        if (t != NULL) {
            double R = (double)((uint64_t)1 << lg_sample);
            for (unsigned i = 0; i < SC_NSIZES; i++) /* expm1: exact at small ratios */
                t->w[i] = 1.0 / -ma_expm1(-(double)sc_index2size(i) / R);
            ma_store_release(&weights_by_lg[lg_sample], t);
        }
    }
    ma_mutex_unlock(&weight_lock);
    return t;
}

double prof_weight(unsigned szind, unsigned lg_sample)
{
    const prof_weights_t *t = weights_get(lg_sample);
    if (unlikely(t == NULL)) /* no metadata memory: compute */
        return 1.0 / -ma_expm1(-(double)sc_index2size(szind) / (double)((uint64_t)1 << lg_sample));
    return t->w[szind];
}

void prof_weights_prepare(unsigned lg_sample)
{
    weights_get(lg_sample);
}

/* Lock order: a stripe, then the weight lock (a dump computes weights
 * under a stripe). */
void prof_table_prefork(void)
{
    for (unsigned i = 0; i < PROF_NSTRIPES; i++)
        ma_mutex_prefork(&stripes[i].lock);
    ma_mutex_prefork(&weight_lock);
}

void prof_table_postfork_parent(void)
{
    ma_mutex_postfork_parent(&weight_lock);
    for (unsigned i = 0; i < PROF_NSTRIPES; i++)
        ma_mutex_postfork_parent(&stripes[i].lock);
}

void prof_table_postfork_child(void)
{
    ma_mutex_postfork_child(&weight_lock);
    for (unsigned i = 0; i < PROF_NSTRIPES; i++)
        ma_mutex_postfork_child(&stripes[i].lock);
}
