/*
 * larson: a Larson-like server workload with cross-thread frees.
 *
 *   larson THREADS MINSZ MAXSZ SLOTS_PER_THREAD OPS_PER_THREAD
 *
 * A shared array of THREADS*SLOTS_PER_THREAD slots holds live objects.
 * Each thread first fills its own part of the array, then (after a
 * barrier; timing starts here) repeats OPS_PER_THREAD times: pick a random
 * slot of the whole array, allocate a new object of a random size in
 * [MINSZ, MAXSZ], stamp it, swap it into the slot (atomic exchange) and
 * free the object that was there after verifying its stamp. With T
 * threads, (T-1)/T of the frees are of objects another thread allocated.
 * At the end the main thread verifies and frees what is left; the XOR of
 * the tokens of all allocated objects must equal that of all freed ones.
 * ops = THREADS * OPS_PER_THREAD malloc+free pairs.
 */
#include "bench.h"

static const char usage[] = "larson THREADS MINSZ MAXSZ SLOTS_PER_THREAD OPS_PER_THREAD";

static void *_Atomic *slots;
static size_t nslots, minsz, maxsz, per_thread;
static long ops;
/* ready: the threads are set up; go: main has taken its start stamp. Two
 * barriers so that the timed region starts before any thread can begin
 * working, even when the main thread is descheduled on a busy machine. */
static pthread_barrier_t ready, go;

typedef struct {
    unsigned id;
    uint64_t alloc_xor, free_xor, nalloc, nfree;
    char pad[64];
} worker_t;

static void *new_object(worker_t *w, uint64_t *rng)
{
    size_t sz = rng_range(rng, minsz, maxsz);
    void *p = malloc(sz);
    if (p == NULL)
        bench_fail("malloc(%zu) returned NULL", sz);
    uint64_t token = token_make(((uint64_t)w->id << 40) ^ w->nalloc, sz);
    stamp_write(p, sz, token);
    w->alloc_xor ^= token;
    w->nalloc++;
    return p;
}

static void *worker(void *arg)
{
    worker_t *w = arg;
    uint64_t rng = splitmix64(w->id + 1);
    for (size_t i = 0; i < per_thread; i++)
        atomic_store_explicit(&slots[w->id * per_thread + i], new_object(w, &rng),
                              memory_order_release);
    barrier_wait(&ready);
    barrier_wait(&go);
    for (long i = 0; i < ops; i++) {
        size_t s = (size_t)(rng_next(&rng) >> 11) % nslots;
        void *p = new_object(w, &rng);
        void *old = atomic_exchange_explicit(&slots[s], p, memory_order_acq_rel);
        if (old != NULL) {
            w->free_xor ^= stamp_verify_tok(old, "larson");
            w->nfree++;
            free(old);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 6)
        bench_usage(usage);
    unsigned nthreads = (unsigned)bench_arg(argv[1], usage);
    minsz = (size_t)bench_arg(argv[2], usage);
    maxsz = (size_t)bench_arg(argv[3], usage);
    per_thread = (size_t)bench_arg(argv[4], usage);
    ops = bench_arg(argv[5], usage);
    if (minsz < STAMP_MIN || maxsz < minsz)
        bench_usage("larson: need 16 <= MINSZ <= MAXSZ");
    nslots = nthreads * per_thread;
    slots = hmem(nslots * sizeof(*slots));
    worker_t *w = hmem(nthreads * sizeof(*w));
    pthread_t *t = hmem(nthreads * sizeof(*t));
    pthread_barrier_init(&ready, NULL, nthreads + 1);
    pthread_barrier_init(&go, NULL, nthreads + 1);
    for (unsigned i = 0; i < nthreads; i++) {
        w[i].id = i;
        thread_start(&t[i], worker, &w[i]);
    }
    barrier_wait(&ready);
    bstamp_t a, b;
    bstamp(&a);
    barrier_wait(&go);
    for (unsigned i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    bstamp(&b);

    uint64_t ax = 0, fx = 0, na = 0, nf = 0;
    for (unsigned i = 0; i < nthreads; i++) {
        ax ^= w[i].alloc_xor;
        fx ^= w[i].free_xor;
        na += w[i].nalloc;
        nf += w[i].nfree;
    }
    for (size_t i = 0; i < nslots; i++) {
        void *p = atomic_load(&slots[i]);
        if (p == NULL)
            bench_fail("slot %zu empty at the end", i);
        fx ^= stamp_verify_tok(p, "larson (final)");
        nf++;
        free(p);
    }
    if (na != nf || ax != fx)
        bench_fail("allocated %llu objects (xor %016llx) but freed %llu (xor %016llx)",
                   (unsigned long long)na, (unsigned long long)ax, (unsigned long long)nf,
                   (unsigned long long)fx);
    bench_report((double)nthreads * (double)ops, &a, &b, NULL);
    return 0;
}
