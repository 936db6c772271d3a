/*
 * Stress: many threads, remote frees, fork while allocating, thread churn.
 *
 * Every live object carries the tu_fill pattern of its address and size and
 * is checked before it is freed, after it is reallocated (the kept prefix
 * must hold the old object's pattern) and when it changes hands, so an
 * object handed out twice, a stale cache entry, or a copy that went wrong
 * shows up as a content mismatch. Worker threads never call cr_assert: they
 * count failures (and keep the first description), and the test's thread
 * asserts on the counts. Everything is bounded by operation counts, never
 * by time, and no assertion depends on timing.
 */
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "arena/base.h"
#include "myalloc.h"
#include "sizeclass/sizeclass.h"
#include "tcache/tcache.h"
#include "test_util.h"

/* ---------------------------------------------------------------------
 * Failure bookkeeping shared by all threads.
 */

static atomic_ulong n_errors;
static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;
static char first_error[512];

__attribute__((format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
    if (atomic_fetch_add(&n_errors, 1) == 0) {
        va_list ap;
        va_start(ap, fmt);
        pthread_mutex_lock(&err_lock);
        vsnprintf(first_error, sizeof(first_error), fmt, ap);
        pthread_mutex_unlock(&err_lock);
        va_end(ap);
    }
}

static void reset_errors(void)
{
    atomic_store(&n_errors, 0);
    first_error[0] = '\0';
}

#define ASSERT_NO_ERRORS()                                                            \
    cr_assert_eq(atomic_load(&n_errors), 0, "%lu failures; first: %s",                \
                 (unsigned long)atomic_load(&n_errors), first_error)

/* ---------------------------------------------------------------------
 * Objects and patterns.
 */

typedef struct obj {
    void *p;
    size_t size;
} obj_t;

/* Byte j of an object that tu_fill(p, size) wrote. */
static unsigned char pattern_byte(const void *p, size_t size, size_t j)
{
    if (j < (size & ~(size_t)7))
        return (unsigned char)(tu_pattern_word(p, size, j / 8) >> (8 * (j % 8)));
    return (unsigned char)(tu_pattern_word(p, size, j) & 0xff);
}

/* The first n bytes of q hold the pattern tu_fill(oldp, oldsize) wrote
 * (n <= oldsize): what realloc must keep when it moves (or not) an object. */
static int check_moved(const void *q, const void *oldp, size_t oldsize, size_t n)
{
    const uint64_t *w = q;
    size_t nw = n / 8;
    for (size_t i = 0; i < nw; i++)
        if (w[i] != tu_pattern_word(oldp, oldsize, i))
            return 0;
    for (size_t j = nw * 8; j < n; j++)
        if (((const unsigned char *)q)[j] != pattern_byte(oldp, oldsize, j))
            return 0;
    return 1;
}

static int all_zero(const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != 0)
            return 0;
    return 1;
}

/* Log-uniform 1 B .. 256 KiB, and now and then 1 .. 4 MiB. */
static size_t rand_size(uint64_t *s)
{
    if (tu_rand(s) % 200 == 0)
        return ((size_t)1 << 20) + tu_rand(s) % ((size_t)3 << 20);
    unsigned lg = (unsigned)(tu_rand(s) % 18);
    return ((size_t)1 << lg) + tu_rand(s) % ((size_t)1 << lg);
}

/* Allocate size bytes by a random entry point; check what the entry point
 * promises (alignment, zeroing, usable size), then fill. */
static void *alloc_random(uint64_t *s, size_t size)
{
    void *p = NULL;
    size_t align = 0;
    switch (tu_rand(s) % 8) {
    case 0:
        p = calloc(1, size);
        if (p != NULL && !all_zero(p, size))
            fail("calloc(1, %zu) = %p is not zeroed", size, p);
        break;
    case 1:
        if (size % 4 == 0) {
            p = calloc(size / 4, 4);
            if (p != NULL && !all_zero(p, size))
                fail("calloc(%zu, 4) = %p is not zeroed", size / 4, p);
        } else {
            p = malloc(size);
        }
        break;
    case 2:
        align = (size_t)1 << (3 + tu_rand(s) % 10); /* 8 .. 4096 */
        if (tu_rand(s) % 16 == 0)
            align = (size_t)1 << 16;
        if (posix_memalign(&p, align, size) != 0)
            p = NULL;
        break;
    case 3:
        align = (size_t)1 << (4 + tu_rand(s) % 9); /* 16 .. 4096 */
        p = aligned_alloc(align, size);
        break;
    default:
        p = malloc(size);
        break;
    }
    if (p == NULL) {
        fail("allocation of %zu bytes (align %zu) failed", size, align);
        return NULL;
    }
    if (align != 0 && ((uintptr_t)p & (align - 1)) != 0)
        fail("%p is not aligned to %zu", p, align);
    if (malloc_usable_size(p) < size)
        fail("malloc_usable_size(%p) = %zu < %zu", p, malloc_usable_size(p), size);
    tu_fill(p, size);
    return p;
}

static void check_and_free(obj_t o, const char *who)
{
    if (!tu_check(o.p, o.size))
        fail("%s: object %p of %zu bytes was overwritten", who, o.p, o.size);
    free(o.p);
}

/* Resize o, check the kept prefix, refill. */
static void realloc_checked(obj_t *o, size_t newsize)
{
    void *q = realloc(o->p, newsize);
    if (q == NULL) {
        fail("realloc(%p, %zu) failed", o->p, newsize);
        return; /* the old object is intact and still o */
    }
    size_t keep = o->size < newsize ? o->size : newsize;
    if (!check_moved(q, o->p, o->size, keep))
        fail("realloc(%p of %zu, %zu) = %p lost the contents", o->p, o->size, newsize, q);
    if (malloc_usable_size(q) < newsize)
        fail("realloc gave %zu usable bytes for %zu", malloc_usable_size(q), newsize);
    o->p = q;
    o->size = newsize;
    tu_fill(q, newsize);
}

/* ---------------------------------------------------------------------
 * 1. Random operations in 8 threads, with objects handed between threads.
 */

#define MT_THREADS 8
#define MT_SLOTS 128
#define MT_OPS 20000
#define INBOX_CAP 256

typedef struct inbox {
    pthread_mutex_t lock;
    unsigned head, count;
    obj_t items[INBOX_CAP];
} inbox_t;

static inbox_t inboxes[MT_THREADS];
static pthread_barrier_t mt_barrier;
static atomic_ulong mt_sent, mt_received, mt_ops_done;

static int inbox_put(inbox_t *b, obj_t o)
{
    int ok = 0;
    pthread_mutex_lock(&b->lock);
    if (b->count < INBOX_CAP) {
        b->items[(b->head + b->count) % INBOX_CAP] = o;
        b->count++;
        ok = 1;
    }
    pthread_mutex_unlock(&b->lock);
    return ok;
}

static unsigned inbox_take_all(inbox_t *b, obj_t *out)
{
    pthread_mutex_lock(&b->lock);
    unsigned n = b->count;
    for (unsigned i = 0; i < n; i++)
        out[i] = b->items[(b->head + i) % INBOX_CAP];
    b->head = (b->head + n) % INBOX_CAP;
    b->count = 0;
    pthread_mutex_unlock(&b->lock);
    return n;
}

/* Objects from other threads: check each; free it, or adopt it into an
 * empty slot (so it is later reallocated or freed again by this thread). */
static void drain_inbox(unsigned self, obj_t *slots, uint64_t *s, int adopt)
{
    static __thread obj_t got[INBOX_CAP];
    unsigned n = inbox_take_all(&inboxes[self], got);
    atomic_fetch_add(&mt_received, n);
    for (unsigned i = 0; i < n; i++) {
        unsigned k = (unsigned)(tu_rand(s) % MT_SLOTS);
        if (adopt && slots[k].p == NULL && tu_rand(s) % 2 == 0) {
            if (!tu_check(got[i].p, got[i].size))
                fail("received object %p of %zu bytes was overwritten", got[i].p, got[i].size);
            slots[k] = got[i];
        } else {
            check_and_free(got[i], "remote free");
        }
    }
}

static void *mt_worker(void *arg)
{
    unsigned self = (unsigned)(uintptr_t)arg;
    uint64_t seed = 0x1234567ULL * (self + 1);
    obj_t slots[MT_SLOTS];
    memset(slots, 0, sizeof(slots));
    for (unsigned op = 0; op < MT_OPS; op++) {
        if (op % 16 == 0)
            drain_inbox(self, slots, &seed, 1);
        obj_t *o = &slots[tu_rand(&seed) % MT_SLOTS];
        if (o->p == NULL) {
            size_t size = rand_size(&seed);
            o->p = alloc_random(&seed, size);
            o->size = o->p != NULL ? size : 0;
            continue;
        }
        unsigned r = (unsigned)(tu_rand(&seed) % 10);
        if (r < 4) {
            check_and_free(*o, "local free");
            o->p = NULL;
        } else if (r < 7) {
            /* Mostly a nearby size (grow or shrink in place or not), now
             * and then anything. */
            size_t ns;
            if (tu_rand(&seed) % 3 == 0)
                ns = rand_size(&seed);
            else
                ns = o->size / 2 + tu_rand(&seed) % (o->size + 1) + 1;
            if (ns > ((size_t)6 << 20))
                ns = rand_size(&seed);
            realloc_checked(o, ns);
        } else if (r < 9) {
            unsigned to = (self + 1 + (unsigned)(tu_rand(&seed) % (MT_THREADS - 1))) % MT_THREADS;
            if (inbox_put(&inboxes[to], *o)) {
                atomic_fetch_add(&mt_sent, 1);
            } else {
                check_and_free(*o, "local free (inbox full)");
            }
            o->p = NULL;
        } else if (!tu_check(o->p, o->size)) {
            fail("live object %p of %zu bytes was overwritten", o->p, o->size);
        }
    }
    atomic_fetch_add(&mt_ops_done, MT_OPS);
    /* Nobody sends after this barrier: drain what is left, free the rest. */
    pthread_barrier_wait(&mt_barrier);
    drain_inbox(self, slots, &seed, 0);
    for (unsigned i = 0; i < MT_SLOTS; i++)
        if (slots[i].p != NULL)
            check_and_free(slots[i], "final free");
    return NULL;
}

Test(stress, threads_random_ops_with_remote_frees, .timeout = 60)
{
    reset_errors();
    for (unsigned i = 0; i < MT_THREADS; i++) {
        pthread_mutex_init(&inboxes[i].lock, NULL);
        inboxes[i].head = inboxes[i].count = 0;
    }
    cr_assert_eq(pthread_barrier_init(&mt_barrier, NULL, MT_THREADS), 0);
    pthread_t th[MT_THREADS];
    for (unsigned i = 0; i < MT_THREADS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, mt_worker, (void *)(uintptr_t)i), 0);
    for (unsigned i = 0; i < MT_THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&mt_barrier);
    ASSERT_NO_ERRORS();
    cr_assert_eq(atomic_load(&mt_ops_done), (unsigned long)MT_THREADS * MT_OPS);
    cr_assert_gt(atomic_load(&mt_sent), 1000, "too few objects changed threads to test remote frees");
    cr_assert_eq(atomic_load(&mt_sent), atomic_load(&mt_received), "objects lost in transit");
    for (unsigned i = 0; i < MT_THREADS; i++)
        cr_assert_eq(inboxes[i].count, 0);
}

/* ---------------------------------------------------------------------
 * 2. Producers and consumers: every free is remote.
 */

#define PC_PRODUCERS 2
#define PC_CONSUMERS 2
#define PC_PER_PRODUCER 60000
#define PC_QCAP 1024

static struct {
    pthread_mutex_t lock;
    pthread_cond_t not_empty, not_full;
    unsigned head, count;
    obj_t items[PC_QCAP];
} pcq = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, {{0}}};

static atomic_ulong pc_produced, pc_consumed;

static void pcq_put(obj_t o)
{
    pthread_mutex_lock(&pcq.lock);
    while (pcq.count == PC_QCAP)
        pthread_cond_wait(&pcq.not_full, &pcq.lock);
    pcq.items[(pcq.head + pcq.count) % PC_QCAP] = o;
    pcq.count++;
    pthread_cond_signal(&pcq.not_empty);
    pthread_mutex_unlock(&pcq.lock);
}

static obj_t pcq_get(void)
{
    pthread_mutex_lock(&pcq.lock);
    while (pcq.count == 0)
        pthread_cond_wait(&pcq.not_empty, &pcq.lock);
    obj_t o = pcq.items[pcq.head];
    pcq.head = (pcq.head + 1) % PC_QCAP;
    pcq.count--;
    pthread_cond_signal(&pcq.not_full);
    pthread_mutex_unlock(&pcq.lock);
    return o;
}

static void *producer(void *arg)
{
    uint64_t seed = 0xfeedULL + (uintptr_t)arg * 7919;
    for (unsigned i = 0; i < PC_PER_PRODUCER; i++) {
        /* Mostly small (the thread-cache path), some large. */
        size_t size;
        if (tu_rand(&seed) % 64 == 0)
            size = rand_size(&seed);
        else
            size = 1 + tu_rand(&seed) % (tu_rand(&seed) % 2 ? 256 : 4096);
        obj_t o = {alloc_random(&seed, size), size};
        if (o.p == NULL)
            continue;
        atomic_fetch_add(&pc_produced, 1);
        pcq_put(o);
    }
    return NULL;
}

static void *consumer(void *arg)
{
    (void)arg;
    for (;;) {
        obj_t o = pcq_get();
        if (o.p == NULL)
            return NULL; /* end marker */
        check_and_free(o, "consumer");
        atomic_fetch_add(&pc_consumed, 1);
    }
}

Test(stress, producer_consumer_all_frees_remote, .timeout = 60)
{
    reset_errors();
    malloc_trim(0);
    size_t base_inuse = mallinfo2().uordblks;
    pthread_t prod[PC_PRODUCERS], cons[PC_CONSUMERS];
    for (uintptr_t i = 0; i < PC_CONSUMERS; i++)
        cr_assert_eq(pthread_create(&cons[i], NULL, consumer, (void *)i), 0);
    for (uintptr_t i = 0; i < PC_PRODUCERS; i++)
        cr_assert_eq(pthread_create(&prod[i], NULL, producer, (void *)i), 0);
    for (unsigned i = 0; i < PC_PRODUCERS; i++)
        pthread_join(prod[i], NULL);
    for (unsigned i = 0; i < PC_CONSUMERS; i++)
        pcq_put((obj_t){NULL, 0});
    for (unsigned i = 0; i < PC_CONSUMERS; i++)
        pthread_join(cons[i], NULL);
    ASSERT_NO_ERRORS();
    cr_assert_eq(atomic_load(&pc_produced), (unsigned long)PC_PRODUCERS * PC_PER_PRODUCER);
    cr_assert_eq(atomic_load(&pc_consumed), atomic_load(&pc_produced));
    /* Every object came back: the exited threads' caches were flushed to
     * the arenas of the producers, and nothing is counted as in use. */
    malloc_trim(0);
    size_t inuse = mallinfo2().uordblks;
    cr_assert_leq(inuse, base_inuse + ((size_t)4 << 20),
                  "in-use bytes %zu after all frees, %zu before: remotely freed memory was not returned",
                  inuse, base_inuse);
}

/* ---------------------------------------------------------------------
 * 3. fork while other threads allocate.
 */

#define FORK_BG_THREADS 3
#define FORK_ROUNDS 20

static atomic_int fork_stop;
static atomic_ulong bg_loops;

static void *bg_allocator(void *arg)
{
    uint64_t seed = 0xabcdefULL ^ ((uintptr_t)arg << 20);
    obj_t keep[64];
    memset(keep, 0, sizeof(keep));
    while (!atomic_load(&fork_stop)) {
        obj_t *o = &keep[tu_rand(&seed) % 64];
        if (o->p != NULL) {
            check_and_free(*o, "background free");
            o->p = NULL;
        }
        size_t size = tu_rand(&seed) % 8 == 0 ? rand_size(&seed) : 1 + tu_rand(&seed) % 2048;
        o->p = alloc_random(&seed, size);
        o->size = o->p != NULL ? size : 0;
        atomic_fetch_add(&bg_loops, 1);
    }
    for (unsigned i = 0; i < 64; i++)
        if (keep[i].p != NULL)
            check_and_free(keep[i], "background final free");
    return NULL;
}

/* What the child does; returns its exit code (0: all good). */
static int child_allocate(uint64_t seed)
{
    enum { N = 200 };
    static __thread obj_t objs[N];
    static const size_t big[] = {(size_t)1 << 20, (size_t)3 << 20, SC_LARGE_MINCLASS, SC_SMALL_MAXCLASS};
    for (unsigned i = 0; i < N; i++) {
        /* The listed sizes, then 1 B .. 64 KiB, log-uniform. */
        unsigned lg = (unsigned)(tu_rand(&seed) % 16);
        size_t size = i < 4 ? big[i] : ((size_t)1 << lg) + tu_rand(&seed) % ((size_t)1 << lg);
        void *p = (i % 3 == 0) ? calloc(1, size) : malloc(size);
        if (p == NULL)
            return 10;
        if (i % 3 == 0 && !all_zero(p, size))
            return 11;
        tu_fill(p, size);
        objs[i] = (obj_t){p, size};
    }
    for (unsigned i = 0; i < N; i += 2) {
        size_t ns = 1 + tu_rand(&seed) % (i < 8 ? ((size_t)2 << 20) : 65536);
        void *q = realloc(objs[i].p, ns);
        if (q == NULL)
            return 12;
        size_t keep = objs[i].size < ns ? objs[i].size : ns;
        if (!check_moved(q, objs[i].p, objs[i].size, keep))
            return 13;
        tu_fill(q, ns);
        objs[i] = (obj_t){q, ns};
    }
    for (unsigned i = 0; i < N; i++) {
        if (!tu_check(objs[i].p, objs[i].size))
            return 14;
        free(objs[i].p);
    }
    return 0;
}

static void *child_thread(void *arg)
{
    return (void *)(intptr_t)child_allocate((uint64_t)(uintptr_t)arg);
}

static int child_main(unsigned round, obj_t *parent_objs, unsigned nparent)
{
    alarm(15); /* a deadlock here must end as a failure, not a hang (the work takes < 1 s) */
    /* The parent's (main thread's) objects are intact in the child and can be
     * freed there. */
    for (unsigned i = 0; i < nparent; i++) {
        if (!tu_check(parent_objs[i].p, parent_objs[i].size))
            return 20;
        free(parent_objs[i].p);
    }
    int rc = child_allocate(0x5eedULL + round);
    if (rc != 0)
        return rc;
    pthread_t t;
    if (pthread_create(&t, NULL, child_thread, (void *)(uintptr_t)(round + 1000)) != 0)
        return 30;
    void *trc;
    if (pthread_join(t, &trc) != 0)
        return 31;
    if (trc != NULL)
        return 40 + (int)(intptr_t)trc;
    malloc_trim(0);
    return 0;
}

Test(stress, fork_while_allocating, .timeout = 60)
{
    reset_errors();
    atomic_store(&fork_stop, 0);
    pthread_t bg[FORK_BG_THREADS];
    for (uintptr_t i = 0; i < FORK_BG_THREADS; i++)
        cr_assert_eq(pthread_create(&bg[i], NULL, bg_allocator, (void *)i), 0);
    int statuses[FORK_ROUNDS];
    unsigned rounds = 0;
    uint64_t seed = 77;
    for (unsigned r = 0; r < FORK_ROUNDS; r++) {
        /* Let the background threads get going between forks (by their
         * progress, not by time). */
        unsigned long target = atomic_load(&bg_loops) + 200;
        while (atomic_load(&bg_loops) < target)
            sched_yield();
        enum { NP = 16 };
        obj_t mine[NP];
        for (unsigned i = 0; i < NP; i++) {
            size_t size = rand_size(&seed);
            mine[i] = (obj_t){malloc(size), size};
            cr_assert_not_null(mine[i].p);
            tu_fill(mine[i].p, size);
        }
        fflush(NULL);
        pid_t pid = fork();
        cr_assert_neq(pid, -1);
        if (pid == 0)
            _exit(child_main(r, mine, NP));
        int st;
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        statuses[r] = st;
        rounds++;
        for (unsigned i = 0; i < NP; i++)
            check_and_free(mine[i], "parent after fork");
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            break; /* one failure says it; do not wait for more */
    }
    atomic_store(&fork_stop, 1);
    for (unsigned i = 0; i < FORK_BG_THREADS; i++)
        pthread_join(bg[i], NULL);
    for (unsigned r = 0; r < rounds; r++) {
        int st = statuses[r];
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "fork round %u: child %s %d (exit codes: 1x child allocations, 2x parent's "
                  "objects, 3x/4x child thread; SIGALRM = deadlock)",
                  r, WIFEXITED(st) ? "exited with" : "killed by signal",
                  WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }
    cr_assert_eq(rounds, FORK_ROUNDS);
    ASSERT_NO_ERRORS();
}

/* ---------------------------------------------------------------------
 * 4. Thread churn: many short-lived threads.
 */

#define CHURN_BATCHES 40
#define CHURN_PER_BATCH 50
#define CHURN_OBJS 40
#define CHURN_KEEP 8

typedef struct churn_arg {
    uint64_t seed;
    bool together; /* the first batch: wait for the whole batch before exiting */
    obj_t kept[CHURN_KEEP];
} churn_arg_t;

static pthread_barrier_t churn_together;

static void *churn_thread(void *arg)
{
    churn_arg_t *a = arg;
    obj_t objs[CHURN_OBJS];
    for (unsigned i = 0; i < CHURN_OBJS; i++) {
        size_t size = i == 0 ? ((size_t)64 << 10) + tu_rand(&a->seed) % ((size_t)1 << 20)
                             : 1 + tu_rand(&a->seed) % (tu_rand(&a->seed) % 4 == 0 ? 16384 : 512);
        objs[i] = (obj_t){alloc_random(&a->seed, size), size};
        if (objs[i].p == NULL)
            objs[i].size = 0;
    }
    /* Leave CHURN_KEEP for the main thread to free, free the rest here. */
    for (unsigned i = 0; i < CHURN_OBJS; i++) {
        if (i % (CHURN_OBJS / CHURN_KEEP) == 0)
            a->kept[i / (CHURN_OBJS / CHURN_KEEP)] = objs[i];
        else if (objs[i].p != NULL)
            check_and_free(objs[i], "churn thread");
    }
    if (a->together)
        pthread_barrier_wait(&churn_together);
    return NULL;
}

Test(stress, thread_churn, .timeout = 60)
{
    reset_errors();
    static churn_arg_t args[CHURN_PER_BATCH];
    pthread_t th[CHURN_PER_BATCH];
    malloc_trim(0);
    size_t base_inuse = mallinfo2().uordblks;
    size_t rss_first_raw = 0, rss_first = 0, rss_last_raw = 0, rss_last = 0;
    size_t meta_first = 0, meta_last = 0;
    unsigned long threads = 0;
    /* The first batch's threads all live at once: every arena and as many
     * thread blocks as a batch can need exist before the first measure.
     * Left to scheduling, the first batch could run a few threads at a time
     * in a few arenas, and arenas made later (about 4 MiB of metadata each,
     * mostly page-map leaves) passed the bound below (CI: 14.7 MiB after
     * the first batch, 42.0 after the last). */
    cr_assert_eq(pthread_barrier_init(&churn_together, NULL, CHURN_PER_BATCH), 0);
    for (unsigned b = 0; b < CHURN_BATCHES; b++) {
        for (unsigned i = 0; i < CHURN_PER_BATCH; i++) {
            memset(&args[i], 0, sizeof(args[i]));
            args[i].seed = 0x9999ULL + b * 1000 + i;
            args[i].together = b == 0;
            cr_assert_eq(pthread_create(&th[i], NULL, churn_thread, &args[i]), 0);
        }
        for (unsigned i = 0; i < CHURN_PER_BATCH; i++) {
            cr_assert_eq(pthread_join(th[i], NULL), 0);
            threads++;
            for (unsigned k = 0; k < CHURN_KEEP; k++)
                if (args[i].kept[k].p != NULL)
                    check_and_free(args[i].kept[k], "main thread (left by an exited thread)");
        }
        if (b == 0 || b == CHURN_BATCHES - 1) {
            /* RSS as is, and without the free pages the allocator keeps
             * (malloc_trim purges them, and flushes this thread's cache). */
            size_t raw = tu_rss_bytes();
            malloc_trim(0);
            size_t trimmed = tu_rss_bytes();
            if (b == 0) {
                rss_first_raw = raw;
                rss_first = trimmed;
                meta_first = base_mapped_bytes();
            } else {
                rss_last_raw = raw;
                rss_last = trimmed;
                meta_last = base_mapped_bytes();
            }
        }
    }
    pthread_barrier_destroy(&churn_together);
    ASSERT_NO_ERRORS();
    cr_assert_eq(threads, (unsigned long)CHURN_BATCHES * CHURN_PER_BATCH);
    /* Every exited thread's cache was flushed and every object came back:
     * nothing more is in use than before the first thread. */
    size_t inuse = mallinfo2().uordblks;
    cr_assert_leq(inuse, base_inuse + ((size_t)4 << 20),
                  "in-use bytes %zu after %lu threads exited (%zu before): exited threads' caches "
                  "were not flushed",
                  inuse, threads, base_inuse);
    /* Thread state is recycled: the allocator's metadata does not grow with
     * the number of threads that ever lived (a thread's cache block is
     * about 160 KiB with 4 KiB pages: 1950 lost ones would be over 300
     * MiB; a page-map leaf for a new GiB of address space is 2 MiB). The
     * first batch made every block and arena a batch can need (measured:
     * the last figure equals the first); the bound leaves room for a
     * batch's blocks all the same. */
    size_t meta_bound = meta_first + (size_t)CHURN_PER_BATCH * tcache_block_bytes() + ((size_t)16 << 20);
    cr_assert_leq(meta_last, meta_bound,
                  "metadata grew from %zu bytes after the first batch to %zu after the last (bound %zu)",
                  meta_first, meta_last, meta_bound);
    /* Each thread touched ~100 KiB - 1 MiB. Had exited threads' caches,
     * thread blocks or objects been lost, the 1950 threads after the first
     * batch would add hundreds of MiB. What is left once free pages are
     * purged grows only by what the arenas keep by design (an empty current
     * slab per class and arena; up to ~1 MiB each with 64 KiB pages). */
    cr_assert_leq(rss_last, rss_first + ((size_t)128 << 20),
                  "RSS (after malloc_trim) grew from %zu after the first batch to %zu after the last",
                  rss_first, rss_last);
    /* Without purging, free pages are reused: growth is bounded by
     * fragmentation, not by the number of threads. A gross check (dirty pages
     * stay resident until purged: 110-190 MiB after the last batch is
     * normal); never reusing freed pages would add over 1 GiB. */
    cr_assert_leq(rss_last_raw, rss_first_raw + ((size_t)512 << 20),
                  "RSS grew from %zu after the first batch to %zu after the last", rss_first_raw,
                  rss_last_raw);
}

/* Waves of short threads, each first freeing what the same slot of the
 * last wave left: objects of arenas whose threads have just exited, freed
 * while the new wave's threads join those arenas again. A remote free that
 * read the arena's thread count twice, and found a thread back the second
 * time, pushed an object of a slab that keeps remote frees as bits onto a
 * list through the same word (double frees and hangs in make bench's
 * churn, in about one run in four). With that fault put back this test
 * failed in 10 runs of 10 (about 1 s each); it also verifies every
 * object's contents. */
#define WAVES 6000
#define WAVE_MAX 4
#define WAVE_OBJS 128

typedef struct wave_slot {
    uint64_t seed;
    obj_t left[WAVE_OBJS / 2];
    unsigned nleft;
} wave_slot_t;

static void *wave_thread(void *arg)
{
    wave_slot_t *w = arg;
    for (unsigned i = 0; i < w->nleft; i++)
        check_and_free(w->left[i], "wave thread (left by the last wave)");
    w->nleft = 0;
    obj_t mine[WAVE_OBJS];
    for (unsigned i = 0; i < WAVE_OBJS; i++) {
        size_t size = 16 + tu_rand(&w->seed) % 2033;
        void *p = malloc(size);
        if (p == NULL)
            fail("malloc(%zu) failed", size);
        else
            tu_fill(p, size);
        mine[i] = (obj_t){p, p != NULL ? size : 0};
    }
    for (unsigned i = 0; i < WAVE_OBJS; i++) {
        if (mine[i].p == NULL)
            continue;
        if (i % 2 == 0)
            check_and_free(mine[i], "wave thread");
        else
            w->left[w->nleft++] = mine[i];
    }
    return NULL;
}

Test(stress, waves_of_threads_free_what_the_last_wave_left, .timeout = 120)
{
    reset_errors();
    static wave_slot_t slots[WAVE_MAX];
    memset(slots, 0, sizeof(slots));
    unsigned long threads = 0;
    for (unsigned wave = 0; wave < WAVES; wave++) {
        unsigned n = 2 + wave % (WAVE_MAX - 1); /* 2, 3, 4, 2, ... */
        pthread_t th[WAVE_MAX];
        for (unsigned j = 0; j < n; j++) {
            slots[j].seed = 0x5eedULL + wave * WAVE_MAX + j;
            cr_assert_eq(pthread_create(&th[j], NULL, wave_thread, &slots[j]), 0);
        }
        for (unsigned j = 0; j < n; j++)
            cr_assert_eq(pthread_join(th[j], NULL), 0);
        threads += n;
    }
    for (unsigned j = 0; j < WAVE_MAX; j++)
        for (unsigned i = 0; i < slots[j].nleft; i++)
            check_and_free(slots[j].left[i], "main thread (left by the last wave)");
    ASSERT_NO_ERRORS();
    cr_assert_eq(threads, (unsigned long)WAVES * 3);
}

/* ---------------------------------------------------------------------
 * 5. Where the kernel puts mappings.
 *
 * mmap(NULL, ...) returns any address aligned to the OS page, nothing more:
 * where it lands depends on what else was mapped and unmapped before (a
 * thread stack is 8 MiB + one 4 KiB guard page, so thread churn shifts
 * later mappings by single OS pages). The allocator must work wherever its
 * mappings land, also when its own page (LG_PAGE) is larger than the OS
 * page. This binary links libmyalloc.a, whose calls to mmap bind to the
 * definition below: a pass-through unless a test asks it to place each
 * anonymous mapping one OS page past a 4 MiB boundary (legal for the
 * kernel, the worst case for alignment arithmetic), with an inaccessible
 * guard right after it so that any use beyond the mapping faults at once.
 */
#include <sys/mman.h>
#include <sys/syscall.h>

static atomic_int mmap_skew;

static void *raw_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (!atomic_load_explicit(&mmap_skew, memory_order_relaxed) || addr != NULL ||
        !(flags & MAP_ANONYMOUS) || (flags & MAP_FIXED))
        return raw_mmap(addr, len, prot, flags, fd, off);
    const uintptr_t os = (uintptr_t)sysconf(_SC_PAGESIZE), span = (uintptr_t)4 << 20;
    const uintptr_t guard = (uintptr_t)1 << 20; /* more than any LG_PAGE slop */
    len = (len + os - 1) & ~(os - 1);
    char *raw = raw_mmap(NULL, len + 2 * span + guard, prot, flags, fd, off);
    if (raw == MAP_FAILED)
        return raw;
    uintptr_t r = (uintptr_t)raw, end = r + len + 2 * span + guard;
    uintptr_t s = ((r + span - 1) & ~(span - 1)) + os; /* one OS page past a 4 MiB boundary */
    if (s > r)
        munmap(raw, s - r);
    mprotect((void *)(s + len), guard, PROT_NONE);
    if (end > s + len + guard)
        munmap((void *)(s + len + guard), end - (s + len + guard));
    return (void *)s;
}

static void allocate_with_skewed_mappings(void *arg)
{
    (void)arg;
    atomic_store(&mmap_skew, 1);
    /* New chunks: each object is larger than anything mapped before, so
     * the pool grows for it; a chunk sized to the object puts the object's
     * end at the chunk's end. Touch every OS page of each. */
    size_t os = (size_t)sysconf(_SC_PAGESIZE);
    for (unsigned i = 0; i < 4; i++) {
        size_t size = ((size_t)(96 + 32 * i)) << 20;
        char *p = malloc(size);
        if (p == NULL)
            _exit(3);
        for (size_t off = size - ((size_t)2 << 20); off < size; off += os)
            p[off] = 1;
        p[0] = 1;
        p[size - 1] = 1;
    }
    /* New metadata and slabs: many objects over many classes. */
    for (unsigned i = 0; i < 20000; i++) {
        size_t size = 1 + (i * 7919u) % (SC_SMALL_MAXCLASS < 65536 ? SC_SMALL_MAXCLASS : 65536);
        char *p = malloc(size);
        if (p == NULL)
            _exit(4);
        p[0] = 1;
        p[size - 1] = 1;
    }
    atomic_store(&mmap_skew, 0);
}

Test(stress, mappings_at_any_os_page_alignment, .timeout = 60)
{
    char out[4096];
    int st = tu_capture(allocate_with_skewed_mappings, NULL, out, sizeof(out));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "allocating with mmap returning addresses one OS page past a 4 MiB boundary: child %s %d "
              "(PAGE = %zu, OS page = %ld); stderr:\n%s",
              WIFEXITED(st) ? "exited with" : "killed by signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st),
              (size_t)PAGE, sysconf(_SC_PAGESIZE), out);
}
