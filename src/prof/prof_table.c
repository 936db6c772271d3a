/*
 * prof_table: the stack table, see prof_table.h.
 */
#include "prof_table.h"

#include <math.h>
#include <string.h>

#include "../arena/base.h"

#define PROF_NSTRIPES 64
#define PROF_NBUCKETS (1u << 14)

static prof_stack_t *buckets[PROF_NBUCKETS];
static ma_mutex_t stripes[PROF_NSTRIPES];
static base_cache_t rec_records = BASE_CACHE_INIT(prof_rec_t);

void prof_table_boot(void)
{
    for (unsigned i = 0; i < PROF_NSTRIPES; i++)
        ma_mutex_init(&stripes[i]);
}

static ma_mutex_t *stripe_of(uint64_t hash)
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

prof_rec_t *prof_table_record(void *const *frames, unsigned depth, unsigned szind, unsigned lg_sample)
{
    uint64_t h = stack_hash(frames, depth);
    prof_stack_t **bucket = &buckets[h & (PROF_NBUCKETS - 1)];
    ma_mutex_t *lock = stripe_of(h);
    ma_mutex_lock(lock);
    prof_stack_t *s = *bucket;
    while (s != NULL && !(s->hash == h && s->depth == depth &&
                          memcmp(s->frames, frames, depth * sizeof(void *)) == 0))
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
    prof_rec_t *r = s->recs;
    while (r != NULL && !(r->szind == szind && r->lg_sample == lg_sample))
        r = r->next;
    if (r == NULL) {
        r = base_cache_get(&rec_records);
        if (r == NULL)
            goto fail;
        r->stack = s;
        r->szind = (uint16_t)szind;
        r->lg_sample = (uint8_t)lg_sample;
        r->next = s->recs;
        s->recs = r;
    }
    r->live++;
    r->accum++;
    ma_mutex_unlock(lock);
    return r;
fail:
    ma_mutex_unlock(lock);
    return NULL;
}

void prof_table_unrecord(prof_rec_t *rec)
{
    ma_mutex_t *lock = stripe_of(rec->stack->hash);
    ma_mutex_lock(lock);
    rec->live--;
    ma_mutex_unlock(lock);
}

void prof_table_foreach(prof_visit_fn *fn, void *arg)
{
    for (unsigned st = 0; st < PROF_NSTRIPES; st++) {
        ma_mutex_t *lock = &stripes[st];
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
                t->w[i] = 1.0 / -expm1(-(double)sc_index2size(i) / R);
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
        return 1.0 / -expm1(-(double)sc_index2size(szind) / (double)((uint64_t)1 << lg_sample));
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
        ma_mutex_prefork(&stripes[i]);
    ma_mutex_prefork(&weight_lock);
}

void prof_table_postfork_parent(void)
{
    ma_mutex_postfork_parent(&weight_lock);
    for (unsigned i = 0; i < PROF_NSTRIPES; i++)
        ma_mutex_postfork_parent(&stripes[i]);
}

void prof_table_postfork_child(void)
{
    ma_mutex_postfork_child(&weight_lock);
    for (unsigned i = 0; i < PROF_NSTRIPES; i++)
        ma_mutex_postfork_child(&stripes[i]);
}
