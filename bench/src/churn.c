/*
 * churn: create and join many short-lived threads that allocate.
 *
 *   churn CONCURRENCY TOTAL_THREADS OBJS_PER_THREAD
 *
 * The main thread starts threads in waves of CONCURRENCY and joins each
 * wave before starting the next, until TOTAL_THREADS threads have run.
 * Thread j of a wave first frees (after verifying) the objects that thread
 * j of the previous wave left behind - memory of a thread that has exited -
 * then allocates OBJS_PER_THREAD objects of 16-2048 bytes, frees half of
 * them and leaves the other half for the next wave. The main thread frees
 * the last wave's leftovers; token XORs must match.
 * ops = TOTAL_THREADS thread lifetimes (the table shows threads per
 * CPU-second).
 */
#include "bench.h"

static const char usage[] = "churn CONCURRENCY TOTAL_THREADS OBJS_PER_THREAD";

typedef struct {
    unsigned slot;
    uint64_t serial;
    void **left;     /* objects left for the next wave (per slot) */
    size_t nleft;
    uint64_t alloc_xor, free_xor, nalloc, nfree;
    char pad[64];
} slot_t;

static size_t objs_per_thread;

static void *worker(void *arg)
{
    slot_t *s = arg;
    for (size_t i = 0; i < s->nleft; i++) {
        s->free_xor ^= stamp_verify_tok(s->left[i], "churn (previous wave)");
        s->nfree++;
        free(s->left[i]);
    }
    s->nleft = 0;
    uint64_t rng = splitmix64(s->serial + 1);
    void *mine[4096];
    size_t n = objs_per_thread;
    for (size_t i = 0; i < n; i++) {
        size_t sz = rng_range(&rng, 16, 2048);
        void *p = malloc(sz);
        if (p == NULL)
            bench_fail("malloc(%zu) returned NULL", sz);
        uint64_t token = token_make((s->serial << 24) ^ i, sz);
        stamp_write(p, sz, token);
        s->alloc_xor ^= token;
        s->nalloc++;
        mine[i] = p;
    }
    for (size_t i = 0; i < n; i++) {
        if (i % 2 == 0) {
            s->free_xor ^= stamp_verify_tok(mine[i], "churn");
            s->nfree++;
            free(mine[i]);
        } else {
            s->left[s->nleft++] = mine[i];
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        bench_usage(usage);
    unsigned conc = (unsigned)bench_arg(argv[1], usage);
    long total = bench_arg(argv[2], usage);
    objs_per_thread = (size_t)bench_arg(argv[3], usage);
    if (objs_per_thread > 4096)
        bench_usage("churn: OBJS_PER_THREAD must be <= 4096");
    slot_t *slots = hmem(conc * sizeof(*slots));
    for (unsigned j = 0; j < conc; j++) {
        slots[j].slot = j;
        slots[j].left = hmem(objs_per_thread * sizeof(void *));
    }
    pthread_t *t = hmem(conc * sizeof(*t));
    bstamp_t a, b;
    bstamp(&a);
    long started = 0;
    while (started < total) {
        unsigned k = 0;
        for (; k < conc && started < total; k++, started++) {
            slots[k].serial = (uint64_t)started;
            thread_start(&t[k], worker, &slots[k]);
        }
        for (unsigned j = 0; j < k; j++)
            pthread_join(t[j], NULL);
    }
    bstamp(&b);
    uint64_t ax = 0, fx = 0, na = 0, nf = 0;
    for (unsigned j = 0; j < conc; j++) {
        for (size_t i = 0; i < slots[j].nleft; i++) {
            slots[j].free_xor ^= stamp_verify_tok(slots[j].left[i], "churn (final)");
            slots[j].nfree++;
            free(slots[j].left[i]);
        }
        ax ^= slots[j].alloc_xor;
        fx ^= slots[j].free_xor;
        na += slots[j].nalloc;
        nf += slots[j].nfree;
    }
    if (na != nf || ax != fx || na != (uint64_t)total * objs_per_thread)
        bench_fail("allocated %llu objects (xor %016llx), freed %llu (xor %016llx), expected %llu",
                   (unsigned long long)na, (unsigned long long)ax, (unsigned long long)nf,
                   (unsigned long long)fx, (unsigned long long)total * objs_per_thread);
    bench_report((double)total, &a, &b, NULL);
    return 0;
}
