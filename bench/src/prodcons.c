/*
 * prodcons: producer/consumer pairs; every free is remote.
 *
 *   prodcons PAIRS OBJS_PER_PAIR MINSZ MAXSZ
 *
 * Each pair has a producer thread, a consumer thread and a bounded queue
 * of RING batches of BATCH pointers (a mutex and two condition variables
 * guard the batch states; waiting threads sleep, so waiting costs no CPU
 * time). The producer allocates objects of random sizes in [MINSZ, MAXSZ],
 * stamps them and fills a batch; the consumer takes a full batch, verifies
 * and frees every object. The XOR of tokens produced must equal the XOR of
 * tokens consumed. Timing runs from the start barrier to the last join.
 * ops = PAIRS * OBJS_PER_PAIR objects, each one malloc + one remote free.
 */
#include "bench.h"

#define RING 8
#define BATCH 256

static const char usage[] = "prodcons PAIRS OBJS_PER_PAIR MINSZ MAXSZ";

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t not_full, not_empty;
    int full[RING];    /* 1 while a batch waits for the consumer */
    void *obj[RING][BATCH];
    unsigned id;
    long nbatch;
    _Alignas(64) uint64_t prod_xor, nprod; /* producer's, own cache line */
    _Alignas(64) uint64_t cons_xor, ncons; /* consumer's, own cache line */
} pair_t;

static size_t minsz, maxsz;
/* ready: the threads are set up; go: main has taken its start stamp. Two
 * barriers so that the timed region starts before any thread can begin
 * working, even when the main thread is descheduled on a busy machine. */
static pthread_barrier_t ready, go;

static void *producer(void *arg)
{
    pair_t *q = arg;
    uint64_t rng = splitmix64(q->id * 2 + 1);
    barrier_wait(&ready);
    barrier_wait(&go);
    for (long b = 0; b < q->nbatch; b++) {
        int k = (int)(b % RING);
        pthread_mutex_lock(&q->mu);
        while (q->full[k])
            pthread_cond_wait(&q->not_full, &q->mu);
        pthread_mutex_unlock(&q->mu);
        for (int i = 0; i < BATCH; i++) {
            size_t sz = rng_range(&rng, minsz, maxsz);
            void *p = malloc(sz);
            if (p == NULL)
                bench_fail("malloc(%zu) returned NULL", sz);
            uint64_t token = token_make(((uint64_t)q->id << 40) ^ q->nprod, sz);
            stamp_write(p, sz, token);
            q->prod_xor ^= token;
            q->nprod++;
            q->obj[k][i] = p;
        }
        pthread_mutex_lock(&q->mu);
        q->full[k] = 1;
        pthread_cond_signal(&q->not_empty);
        pthread_mutex_unlock(&q->mu);
    }
    return NULL;
}

static void *consumer(void *arg)
{
    pair_t *q = arg;
    barrier_wait(&ready);
    barrier_wait(&go);
    for (long b = 0; b < q->nbatch; b++) {
        int k = (int)(b % RING);
        pthread_mutex_lock(&q->mu);
        while (!q->full[k])
            pthread_cond_wait(&q->not_empty, &q->mu);
        pthread_mutex_unlock(&q->mu);
        for (int i = 0; i < BATCH; i++) {
            void *p = q->obj[k][i];
            q->cons_xor ^= stamp_verify_tok(p, "prodcons");
            q->ncons++;
            free(p);
        }
        pthread_mutex_lock(&q->mu);
        q->full[k] = 0;
        pthread_cond_signal(&q->not_full);
        pthread_mutex_unlock(&q->mu);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 5)
        bench_usage(usage);
    unsigned npairs = (unsigned)bench_arg(argv[1], usage);
    long per_pair = bench_arg(argv[2], usage);
    minsz = (size_t)bench_arg(argv[3], usage);
    maxsz = (size_t)bench_arg(argv[4], usage);
    if (minsz < STAMP_MIN || maxsz < minsz)
        bench_usage("prodcons: need 16 <= MINSZ <= MAXSZ");
    long nbatch = (per_pair + BATCH - 1) / BATCH;
    pair_t *q = hmem(npairs * sizeof(*q));
    pthread_t *t = hmem(2 * npairs * sizeof(*t));
    pthread_barrier_init(&ready, NULL, 2 * npairs + 1);
    pthread_barrier_init(&go, NULL, 2 * npairs + 1);
    for (unsigned i = 0; i < npairs; i++) {
        pthread_mutex_init(&q[i].mu, NULL);
        pthread_cond_init(&q[i].not_full, NULL);
        pthread_cond_init(&q[i].not_empty, NULL);
        q[i].id = i;
        q[i].nbatch = nbatch;
        thread_start(&t[2 * i], producer, &q[i]);
        thread_start(&t[2 * i + 1], consumer, &q[i]);
    }
    barrier_wait(&ready);
    bstamp_t a, b;
    bstamp(&a);
    barrier_wait(&go);
    for (unsigned i = 0; i < 2 * npairs; i++)
        pthread_join(t[i], NULL);
    bstamp(&b);
    uint64_t n = 0;
    for (unsigned i = 0; i < npairs; i++) {
        if (q[i].nprod != q[i].ncons || q[i].prod_xor != q[i].cons_xor)
            bench_fail("pair %u: produced %llu (xor %016llx), consumed %llu (xor %016llx)", i,
                       (unsigned long long)q[i].nprod, (unsigned long long)q[i].prod_xor,
                       (unsigned long long)q[i].ncons, (unsigned long long)q[i].cons_xor);
        n += q[i].ncons;
    }
    if (n != (uint64_t)npairs * (uint64_t)nbatch * BATCH)
        bench_fail("consumed %llu objects, expected %llu", (unsigned long long)n,
                   (unsigned long long)npairs * (unsigned long long)nbatch * BATCH);
    bench_report((double)n, &a, &b, NULL);
    return 0;
}
