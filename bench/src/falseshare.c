/*
 * falseshare: how often does the allocator hand objects on one 64-byte
 * cache line to different threads?
 *
 *   falseshare THREADS OBJS_PER_THREAD
 *
 * Phase "fresh": the threads allocate OBJS_PER_THREAD small objects each
 * (sizes cycling 8, 16, 24, 32 B), concurrently, in rounds of ROUND
 * allocations separated by barriers so that the threads really interleave
 * even on a machine with fewer cores than threads. Each object is filled
 * with its owner's id and its address recorded.
 * Phase "remote": each thread frees every other object of the next thread
 * (remote frees), then (after a barrier) every thread allocates
 * OBJS_PER_THREAD/2 new objects, again in barrier-separated rounds.
 *
 * After each phase (all threads stopped at a barrier, all objects live)
 * the main thread checks that no two live objects overlap and that every
 * object still holds its owner's fill, then computes the share of live
 * objects that have at least one cache line in common with a live object
 * of another thread. It prints fs_fresh=<percent> fs_remote=<percent>.
 * ops = objects allocated in both phases (timing is not the point here).
 */
#include "bench.h"

#define ROUND 64
#define LINE 64

static const char usage[] = "falseshare THREADS OBJS_PER_THREAD";
static const size_t size_cycle[4] = {8, 16, 24, 32};

typedef struct {
    unsigned char *addr;
    uint32_t size;
    uint32_t tid;
} obj_t;

static unsigned nthreads;
static size_t per_thread;
static obj_t *objs;       /* [thread][0 .. per_thread + per_thread/2) */
static size_t stride;     /* entries per thread in objs */
static pthread_barrier_t bar;

static void alloc_range(unsigned tid, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        size_t sz = size_cycle[i % 4];
        unsigned char *p = malloc(sz);
        if (p == NULL)
            bench_fail("malloc(%zu) returned NULL", sz);
        memset(p, (int)(tid + 1), sz);
        objs[tid * stride + i] = (obj_t){p, (uint32_t)sz, tid};
    }
}

static void *worker(void *arg)
{
    unsigned tid = (unsigned)(uintptr_t)arg;
    /* fresh: per_thread objects, in rounds */
    barrier_wait(&bar);
    for (size_t r = 0; r < per_thread; r += ROUND) {
        alloc_range(tid, r, r + ROUND < per_thread ? r + ROUND : per_thread);
        barrier_wait(&bar);
    }
    barrier_wait(&bar); /* main measures */
    barrier_wait(&bar);
    /* remote: free every other object of the next thread */
    unsigned victim = (tid + 1) % nthreads;
    for (size_t i = 0; i < per_thread; i += 2) {
        obj_t *o = &objs[victim * stride + i];
        free(o->addr);
        o->addr = NULL;
    }
    barrier_wait(&bar);
    size_t half = per_thread / 2;
    for (size_t r = 0; r < half; r += ROUND) {
        alloc_range(tid, per_thread + r, per_thread + (r + ROUND < half ? r + ROUND : half));
        barrier_wait(&bar);
    }
    barrier_wait(&bar); /* main measures */
    barrier_wait(&bar);
    return NULL;
}

typedef struct {
    uintptr_t line;
    uint32_t tid;
    uint32_t obj; /* index into the live list */
} lent_t;

static int cmp_obj(const void *a, const void *b)
{
    const obj_t *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int cmp_line(const void *a, const void *b)
{
    const lent_t *x = a, *y = b;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* Share (percent) of live objects sharing a cache line with another
 * thread's live object; verifies contents and non-overlap on the way. */
static double measure(size_t nper, const char *phase)
{
    size_t cap = nthreads * stride;
    obj_t *live = hmem(cap * sizeof(*live));
    size_t n = 0;
    for (unsigned t = 0; t < nthreads; t++)
        for (size_t i = 0; i < nper; i++) {
            obj_t o = objs[t * stride + i];
            if (o.addr == NULL)
                continue;
            for (size_t k = 0; k < o.size; k++)
                if (o.addr[k] != (unsigned char)(o.tid + 1))
                    bench_fail("%s: object %p of thread %u overwritten", phase, (void *)o.addr,
                               o.tid);
            live[n++] = o;
        }
    qsort(live, n, sizeof(*live), cmp_obj);
    for (size_t i = 1; i < n; i++)
        if (live[i - 1].addr + live[i - 1].size > live[i].addr)
            bench_fail("%s: objects %p (%u B, thread %u) and %p (thread %u) overlap", phase,
                       (void *)live[i - 1].addr, live[i - 1].size, live[i - 1].tid,
                       (void *)live[i].addr, live[i].tid);
    lent_t *ent = hmem(2 * n * sizeof(*ent));
    size_t ne = 0;
    for (size_t i = 0; i < n; i++) {
        uintptr_t first = (uintptr_t)live[i].addr / LINE;
        uintptr_t last = ((uintptr_t)live[i].addr + live[i].size - 1) / LINE;
        for (uintptr_t l = first; l <= last; l++)
            ent[ne++] = (lent_t){l, live[i].tid, (uint32_t)i};
    }
    qsort(ent, ne, sizeof(*ent), cmp_line);
    unsigned char *shared = hmem(n);
    for (size_t i = 0; i < ne;) {
        size_t j = i;
        int mixed = 0;
        while (j < ne && ent[j].line == ent[i].line) {
            if (ent[j].tid != ent[i].tid)
                mixed = 1;
            j++;
        }
        if (mixed)
            for (size_t k = i; k < j; k++)
                shared[ent[k].obj] = 1;
        i = j;
    }
    size_t nshared = 0;
    for (size_t i = 0; i < n; i++)
        nshared += shared[i];
    munmap(live, cap * sizeof(*live));
    munmap(ent, 2 * n * sizeof(*ent));
    munmap(shared, n);
    return n ? 100.0 * (double)nshared / (double)n : 0.0;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        bench_usage(usage);
    nthreads = (unsigned)bench_arg(argv[1], usage);
    per_thread = (size_t)bench_arg(argv[2], usage);
    if (nthreads < 2)
        bench_usage("falseshare: THREADS must be >= 2");
    per_thread = (per_thread + 1) & ~(size_t)1;
    stride = per_thread + per_thread / 2;
    objs = hmem(nthreads * stride * sizeof(*objs));
    pthread_t *t = hmem(nthreads * sizeof(*t));
    pthread_barrier_init(&bar, NULL, nthreads + 1);
    for (unsigned i = 0; i < nthreads; i++)
        thread_start(&t[i], worker, (void *)(uintptr_t)i);
    bstamp_t a, b;
    bstamp(&a);
    barrier_wait(&bar);
    for (size_t r = 0; r < per_thread; r += ROUND)
        barrier_wait(&bar);
    barrier_wait(&bar);
    double fresh = measure(per_thread, "fresh");
    barrier_wait(&bar);
    barrier_wait(&bar);
    for (size_t r = 0; r < per_thread / 2; r += ROUND)
        barrier_wait(&bar);
    barrier_wait(&bar);
    double remote = measure(stride, "remote");
    barrier_wait(&bar);
    for (unsigned i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    bstamp(&b);
    for (size_t i = 0; i < nthreads * stride; i++)
        free(objs[i].addr);
    char extra[128];
    snprintf(extra, sizeof(extra), "fs_fresh=%.2f fs_remote=%.2f", fresh, remote);
    bench_report((double)nthreads * (double)stride, &a, &b, extra);
    return 0;
}
