/*
 * footprint: how much memory an allocator keeps (RSS), not how fast it is.
 *
 *   footprint frag    TOTAL_MB CYCLES IDLE_MS
 *   footprint server  PEAK_MB  STEPS  IDLE_MS [DURATION_MS]
 *   footprint threads LIVE_MB  THREADS IDLE_MS
 *
 * frag: the fragmentation cycle. Allocate TOTAL_MB of objects (request
 *   sizes log-uniform 16 B .. 8 KiB), then CYCLES times: free 90% of the
 *   live objects at random and refill to TOTAL_MB with a different size mix
 *   (the window of the log-uniform distribution moves, see MIXES). "mid" is
 *   measured after the first 90% free, "final" after the last refill.
 * server: sessions of varying sizes open and expire while the target live
 *   size follows a day: up to PEAK_MB (first 35% of the STEPS), down to 10%
 *   of it (to 60%; "mid" is measured there), back up to 60% of it with a
 *   shifted size mix (to 80%) and held (to the end; "final"). A session
 *   holds 8..512 objects (16 B .. 4 KiB, the window moving with time) and,
 *   one time in four, a buffer of 8 KiB .. 512 KiB; every step also
 *   replaces one object of a random session, and 5% of the steps close a
 *   random session (turnover). The steps are spread over DURATION_MS of
 *   wall time (default 8000; the program sleeps when it is ahead), so that
 *   the load changes at a pace that time-based purging can follow: a real
 *   server's day is hours, far longer than any decay time.
 * threads: thread churn. THREADS short threads in waves of 4: each replaces
 *   2000 random objects of its quarter of a shared pool of about LIVE_MB
 *   (the objects it frees were allocated by threads that have exited, and
 *   the ones it leaves outlive it) and allocates and frees 256 temporary
 *   objects. "final" is measured when the last wave has exited, "mid"
 *   after the main thread then frees 90% of the pool at random.
 *
 * At the end every workload frees everything, unmaps its own bookkeeping,
 * reads RSS ("freed"), then makes no call at all into the allocator for
 * IDLE_MS milliseconds and reads RSS again ("idle"): what an idle program
 * keeps.
 *
 * Bytes "live" are request sizes (the same for every allocator). RSS is
 * read from /proc/self/statm with read(2) (no allocation), less the
 * harness's own tables (mmap'd; their resident pages counted with
 * mincore); the peak is VmHWM (which includes those tables: a few MiB). Every object is written in full (memset) and stamped; stamps are
 * verified before each free. The timed region is the whole workload up to
 * and including the final frees (the idle wait excluded).
 *
 * The floor: at the workload's peak (the end of each fill of frag, the top
 * of server's day, threads' pool before and after the waves) the harness
 * adds up what the live objects take in the allocator's size classes
 * (obj_floor), outside the timed region. No allocator with the same
 * classes could have less resident at that moment.
 *
 * RESULT ... base_kb mid_kb mid_live final_kb final_live peak_live freed_kb idle_kb
 *            floor_kb floor_live floor_harness_kb
 * (kb: KiB of RSS; live: bytes; floor_harness_kb: the harness's own
 * resident tables at the floor's walk)
 */
#include <fcntl.h>
#include <malloc.h>

#include "bench.h"

static const char usage[] = "footprint frag TOTAL_MB CYCLES IDLE_MS | server PEAK_MB STEPS IDLE_MS [DURATION_MS] | "
                            "threads LIVE_MB THREADS IDLE_MS";

/* ---- measuring --------------------------------------------------------- */

/* The harness's own memory (object tables, from mmap) is resident too; it
 * is the same for every allocator but not the allocator's doing, so the
 * RSS figures leave it out: its resident pages are counted with mincore. */
#define NREGIONS 8
static struct {
    void *p;
    size_t len;
} regions[NREGIONS];
static unsigned char *mincore_vec;
static size_t mincore_len;

static void *fmem(size_t n)
{
    void *p = hmem(n);
    for (unsigned i = 0; i < NREGIONS; i++)
        if (regions[i].p == NULL) {
            regions[i].p = p;
            regions[i].len = n;
            return p;
        }
    bench_fail("footprint: too many harness regions");
}

static void ffree(void *p)
{
    for (unsigned i = 0; i < NREGIONS; i++)
        if (regions[i].p == p) {
            munmap(p, regions[i].len);
            regions[i].p = NULL;
            return;
        }
}

static long harness_kb(void)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), pages = 0;
    for (unsigned i = 0; i < NREGIONS; i++) {
        if (regions[i].p == NULL)
            continue;
        size_t np = (regions[i].len + pg - 1) / pg;
        if (np > mincore_len) {
            if (mincore_vec != NULL)
                munmap(mincore_vec, mincore_len);
            mincore_len = np;
            mincore_vec = hmem(np);
        }
        if (mincore(regions[i].p, regions[i].len, mincore_vec) != 0)
            continue;
        for (size_t k = 0; k < np; k++)
            pages += mincore_vec[k] & 1;
    }
    return (long)(pages * (pg / 1024));
}

/* RSS less the harness's own pages, KiB. */
static long rss_kb(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *s = strchr(buf, ' ');
    if (s == NULL)
        return -1;
    return strtol(s + 1, NULL, 10) * (sysconf(_SC_PAGESIZE) / 1024) - harness_kb();
}

typedef struct {
    long base_kb, mid_kb, final_kb, freed_kb, idle_kb, floor_harness_kb;
    size_t mid_live, final_live, peak_live, floor_bytes, floor_live;
    double ops;
} fp_t;

/* ---- objects ----------------------------------------------------------- */

typedef struct {
    void *p;
    size_t size;
} obj_t;

/* ---- the size-class floor ---------------------------------------------- */

/* What object o takes in its allocator: its usable size, or its request in
 * whole pages when that is less (the pages past the request of a large
 * object are never written, so never resident). */
static size_t obj_floor(const obj_t *o, size_t pg)
{
    size_t usable = malloc_usable_size(o->p), pages = (o->size + pg - 1) / pg * pg;
    return usable < pages ? usable : pages;
}

/* A walk over the live objects. Its CPU and wall time (floor_paused_*) are
 * taken out of the timed region (floor_unpause): it is the harness's work. */
typedef struct {
    bstamp_t at;
    size_t bytes, live, page;
} floor_walk_t;

static long long floor_paused_user_us, floor_paused_sys_us, floor_paused_wall_ns;

static long long tv_us(struct timeval tv) { return (long long)tv.tv_sec * 1000000 + tv.tv_usec; }

static struct timeval tv_plus_us(struct timeval tv, long long us)
{
    us += tv_us(tv);
    return (struct timeval){.tv_sec = (time_t)(us / 1000000), .tv_usec = (suseconds_t)(us % 1000000)};
}

static void floor_begin(floor_walk_t *w)
{
    w->bytes = w->live = 0;
    w->page = (size_t)sysconf(_SC_PAGESIZE);
    bstamp(&w->at);
}

static void floor_add(floor_walk_t *w, const obj_t *o, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        w->bytes += obj_floor(&o[i], w->page);
        w->live += o[i].size;
    }
}

/* The walk is over: the largest floor so far is kept, with its live bytes
 * and the harness's resident tables at that moment. */
static void floor_end(floor_walk_t *w, fp_t *r)
{
    if (w->bytes > r->floor_bytes) {
        r->floor_bytes = w->bytes;
        r->floor_live = w->live;
        r->floor_harness_kb = harness_kb();
    }
    bstamp_t now;
    bstamp(&now);
    floor_paused_user_us += tv_us(now.ru.ru_utime) - tv_us(w->at.ru.ru_utime);
    floor_paused_sys_us += tv_us(now.ru.ru_stime) - tv_us(w->at.ru.ru_stime);
    floor_paused_wall_ns += (long long)(now.wall.tv_sec - w->at.wall.tv_sec) * 1000000000 +
                            (now.wall.tv_nsec - w->at.wall.tv_nsec);
}

/* A walk over one array of live objects. */
static void floor_walk(fp_t *r, const obj_t *o, size_t n)
{
    floor_walk_t w;
    floor_begin(&w);
    floor_add(&w, o, n);
    floor_end(&w, r);
}

/* t0 moved later by the walks' time: t1 - t0 is then the workload's alone. */
static void floor_unpause(bstamp_t *t0)
{
    t0->ru.ru_utime = tv_plus_us(t0->ru.ru_utime, floor_paused_user_us);
    t0->ru.ru_stime = tv_plus_us(t0->ru.ru_stime, floor_paused_sys_us);
    long long ns = (long long)t0->wall.tv_sec * 1000000000 + t0->wall.tv_nsec + floor_paused_wall_ns;
    t0->wall.tv_sec = (time_t)(ns / 1000000000);
    t0->wall.tv_nsec = (long)(ns % 1000000000);
}

static uint64_t serial;
static uint64_t alloc_xor, free_xor;

/* 2^e for e >= 0, without libm (the bench programs link only libc). */
static double pow2(double e)
{
    int k = (int)e;
    double f = (e - k) * 0.69314718055994530942, term = 1.0, sum = 1.0;
    for (int i = 1; i < 12; i++) {
        term *= f / i;
        sum += term;
    }
    return sum * (double)((uint64_t)1 << k);
}

/* Log-uniform between 2^lg_lo and 2^lg_hi. */
static size_t loguniform(uint64_t *rng, double lg_lo, double lg_hi)
{
    double u = (double)(rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
    size_t s = (size_t)pow2(lg_lo + u * (lg_hi - lg_lo));
    return s < STAMP_MIN ? STAMP_MIN : s;
}

static void *obj_new(size_t size)
{
    void *p = malloc(size);
    if (p == NULL)
        bench_fail("malloc(%zu) returned NULL", size);
    memset(p, (int)(size & 0xff), size);
    uint64_t token = token_make(__atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED), size);
    stamp_write(p, size, token);
    __atomic_xor_fetch(&alloc_xor, token, __ATOMIC_RELAXED);
    return p;
}

static void obj_free(void *p, size_t size, const char *where)
{
    uint64_t token = stamp_verify(p, size, where);
    if (token_size(token) != size)
        bench_fail("%s: object %p has the size %zu of another", where, p, token_size(token));
    __atomic_xor_fetch(&free_xor, token, __ATOMIC_RELAXED);
    free(p);
}

static void idle_phase(fp_t *r, long idle_ms)
{
    r->freed_kb = rss_kb();
    struct timespec ts = {idle_ms / 1000, (idle_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
    r->idle_kb = rss_kb();
}

static void check_xor(void)
{
    if (alloc_xor != free_xor)
        bench_fail("tokens allocated and freed differ: objects lost or freed twice");
}

/* Free nfree of the n objects, chosen at random; they end up in o[0..nfree)
 * (the survivors after them). Returns the bytes freed. */
static size_t free_random(obj_t *o, size_t n, size_t nfree, uint64_t *rng, const char *where)
{
    size_t bytes = 0;
    for (size_t i = 0; i < nfree; i++) {
        size_t j = i + (size_t)(rng_next(rng) % (n - i));
        obj_t t = o[i];
        o[i] = o[j];
        o[j] = t;
        obj_free(o[i].p, o[i].size, where);
        bytes += o[i].size;
    }
    return bytes;
}

/* ---- frag -------------------------------------------------------------- */

/* Size windows of the initial fill and each refill: log-uniform between
 * 2^a and 2^b bytes. Each refill moves the window by a factor of two,
 * down and up in turn: 16 B .. 8 KiB, 16 B .. 4 KiB, 32 B .. 8 KiB, ... */
static const double MIXES[][2] = {
    {4, 13}, {4, 12}, {5, 13},
};
#define NMIXES (sizeof(MIXES) / sizeof(MIXES[0]))

static void run_frag(fp_t *r, size_t total, long cycles)
{
    size_t cap = total / 16 + 1024;
    obj_t *o = fmem(cap * sizeof(obj_t));
    size_t n = 0, live = 0;
    uint64_t rng = 0x5eed;
    for (long c = 0; c <= cycles; c++) {
        if (c > 0) {
            size_t nfree = n - n / 10;
            live -= free_random(o, n, nfree, &rng, "frag");
            memmove(o, o + nfree, (n - nfree) * sizeof(obj_t));
            n -= nfree;
            if (c == 1) {
                r->mid_kb = rss_kb();
                r->mid_live = live;
            }
        }
        const double *mix = MIXES[c == 0 ? 0 : 1 + (c - 1) % (NMIXES - 1)];
        while (live < total && n < cap) {
            size_t s = loguniform(&rng, mix[0], mix[1]);
            o[n].p = obj_new(s);
            o[n].size = s;
            n++;
            live += s;
            r->ops++;
        }
        if (live > r->peak_live)
            r->peak_live = live;
        floor_walk(r, o, n);
    }
    r->final_kb = rss_kb();
    r->final_live = live;
    for (size_t i = 0; i < n; i++)
        obj_free(o[i].p, o[i].size, "frag (end)");
    ffree(o);
}

/* ---- server ------------------------------------------------------------ */

typedef struct {
    obj_t *objs;     /* harness memory, SESSION_MAX slots */
    unsigned n;
    size_t bytes;
    double lo, hi;   /* its objects' size window (log2 of bytes) */
} session_t;

#define SESSION_MAX 513

static size_t server_live;

static void session_open(session_t *s, uint64_t *rng, double shift, fp_t *r)
{
    /* The size window moves with time: [16 B, 4 KiB] * 2^shift. */
    s->lo = 4 + shift;
    s->hi = 12 + shift;
    s->n = (unsigned)loguniform(rng, 3, 9);
    s->bytes = 0;
    for (unsigned i = 0; i < s->n; i++) {
        size_t sz = loguniform(rng, s->lo, s->hi);
        s->objs[i].p = obj_new(sz);
        s->objs[i].size = sz;
        s->bytes += sz;
        r->ops++;
    }
    if (rng_next(rng) % 4 == 0) {
        size_t sz = loguniform(rng, 13, 19);
        s->objs[s->n].p = obj_new(sz);
        s->objs[s->n].size = sz;
        s->n++;
        s->bytes += sz;
        r->ops++;
    }
    server_live += s->bytes;
}

static void session_close(session_t *s)
{
    for (unsigned i = 0; i < s->n; i++)
        obj_free(s->objs[i].p, s->objs[i].size, "server");
    server_live -= s->bytes;
    s->n = 0;
    s->bytes = 0;
}

/* The target live bytes at step t of steps (see the header). It peaks at
 * the fraction SERVER_TOP of the steps, where the floor is walked. */
#define SERVER_TOP 0.35

static double server_target(long t, long steps, double peak)
{
    double x = (double)t / (double)steps;
    if (x < SERVER_TOP)
        return peak * x / SERVER_TOP;
    if (x < 0.60)
        return peak * (1.0 - 0.9 * (x - SERVER_TOP) / 0.25);
    if (x < 0.80)
        return peak * (0.1 + 0.5 * (x - 0.60) / 0.20);
    return peak * 0.6;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void run_server(fp_t *r, size_t peak, long steps, long duration_ms)
{
    const uint64_t start = now_ns(), duration = (uint64_t)duration_ms * 1000000ull;
    /* Sessions average roughly 60 KiB: room for twice the peak at 4 KiB. */
    size_t max_sessions = peak / 4096 + 1024;
    session_t *ss = fmem(max_sessions * sizeof(session_t));
    obj_t *slots = fmem(max_sessions * SESSION_MAX * sizeof(obj_t));
    for (size_t i = 0; i < max_sessions; i++)
        ss[i].objs = slots + i * SESSION_MAX;
    size_t nlive = 0;
    uint64_t rng = 0xfeed;
    bool mid_done = false, top_done = false;
    for (long t = 0; t < steps; t++) {
        if (t % 64 == 0) { /* keep to the schedule */
            uint64_t due = start + (uint64_t)((double)duration * (double)t / (double)steps), now = now_ns();
            if (now < due) {
                struct timespec ts = {(time_t)((due - now) / 1000000000ull), (long)((due - now) % 1000000000ull)};
                nanosleep(&ts, NULL);
            }
        }
        double target = server_target(t, steps, (double)peak);
        /* The mix shifts by up to one doubling over the run. */
        double shift = (double)t / (double)steps;
        while ((double)server_live < target && nlive < max_sessions)
            session_open(&ss[nlive++], &rng, shift, r);
        while ((double)server_live > target * 1.02 && nlive > 1) {
            size_t k = (size_t)(rng_next(&rng) % nlive);
            session_close(&ss[k]);
            session_t tmp = ss[k];
            ss[k] = ss[--nlive];
            ss[nlive] = tmp;
        }
        if (nlive > 0 && rng_next(&rng) % 20 == 0) { /* turnover */
            size_t k = (size_t)(rng_next(&rng) % nlive);
            session_close(&ss[k]);
            session_open(&ss[k], &rng, shift, r);
        }
        if (nlive > 0) { /* one request: replace an object of a session */
            session_t *s = &ss[rng_next(&rng) % nlive];
            unsigned i = (unsigned)(rng_next(&rng) % s->n);
            size_t sz = s->objs[i].size > 8192 ? s->objs[i].size : loguniform(&rng, s->lo, s->hi);
            obj_free(s->objs[i].p, s->objs[i].size, "server");
            s->bytes -= s->objs[i].size;
            server_live -= s->objs[i].size;
            s->objs[i].p = obj_new(sz);
            s->objs[i].size = sz;
            s->bytes += sz;
            server_live += sz;
            r->ops++;
        }
        if (server_live > r->peak_live)
            r->peak_live = server_live;
        if (!top_done && (double)(t + 1) / (double)steps >= SERVER_TOP) {
            floor_walk_t w;
            floor_begin(&w);
            for (size_t i = 0; i < nlive; i++)
                floor_add(&w, ss[i].objs, ss[i].n);
            floor_end(&w, r);
            top_done = true;
        }
        if (!mid_done && (double)t / (double)steps >= 0.60) {
            r->mid_kb = rss_kb();
            r->mid_live = server_live;
            mid_done = true;
        }
    }
    r->final_kb = rss_kb();
    r->final_live = server_live;
    for (size_t i = 0; i < nlive; i++)
        session_close(&ss[i]);
    ffree(slots);
    ffree(ss);
}

/* ---- threads ----------------------------------------------------------- */

#define WAVE 4
#define REPLACE_PER_THREAD 2000
#define TEMP_PER_THREAD 256

typedef struct {
    obj_t *pool;       /* this thread's quarter of the pool */
    size_t n;
    uint64_t seed;
    double ops;
    size_t live_delta; /* signed, as size_t arithmetic */
} tjob_t;

static void *thread_main(void *arg)
{
    tjob_t *j = arg;
    uint64_t rng = splitmix64(j->seed);
    obj_t temp[TEMP_PER_THREAD];
    for (unsigned i = 0; i < TEMP_PER_THREAD; i++) {
        temp[i].size = loguniform(&rng, 4, 13);
        temp[i].p = obj_new(temp[i].size);
    }
    for (unsigned k = 0; k < REPLACE_PER_THREAD; k++) {
        obj_t *o = &j->pool[rng_next(&rng) % j->n];
        size_t sz = loguniform(&rng, 4, 13);
        j->live_delta += sz - o->size;
        obj_free(o->p, o->size, "threads (pool)");
        o->p = obj_new(sz);
        o->size = sz;
        if (k % 8 == 0) { /* temporaries come and go */
            unsigned t = (unsigned)(rng_next(&rng) % TEMP_PER_THREAD);
            obj_free(temp[t].p, temp[t].size, "threads (temp)");
            temp[t].size = loguniform(&rng, 4, 13);
            temp[t].p = obj_new(temp[t].size);
            j->ops++;
        }
    }
    for (unsigned i = 0; i < TEMP_PER_THREAD; i++)
        obj_free(temp[i].p, temp[i].size, "threads (temp)");
    j->ops += TEMP_PER_THREAD + REPLACE_PER_THREAD;
    return NULL;
}

static void run_threads(fp_t *r, size_t live_target, long nthreads)
{
    /* Log-uniform 16 B .. 8 KiB averages about 1310 B. */
    size_t n = live_target / 1310 + WAVE;
    obj_t *pool = fmem(n * sizeof(obj_t));
    uint64_t rng = 0xbeef;
    size_t live = 0;
    for (size_t i = 0; i < n; i++) {
        pool[i].size = loguniform(&rng, 4, 13);
        pool[i].p = obj_new(pool[i].size);
        live += pool[i].size;
        r->ops++;
    }
    r->peak_live = live;
    floor_walk(r, pool, n);
    size_t per = n / WAVE;
    for (long started = 0; started < nthreads; started += WAVE) {
        pthread_t t[WAVE];
        tjob_t jobs[WAVE];
        for (unsigned w = 0; w < WAVE; w++) {
            jobs[w] = (tjob_t){.pool = pool + w * per, .n = per, .seed = (uint64_t)(started + w)};
            thread_start(&t[w], thread_main, &jobs[w]);
        }
        for (unsigned w = 0; w < WAVE; w++) {
            pthread_join(t[w], NULL);
            live += jobs[w].live_delta;
            r->ops += jobs[w].ops;
        }
        if (live > r->peak_live)
            r->peak_live = live;
    }
    floor_walk(r, pool, n);
    r->final_kb = rss_kb();
    r->final_live = live;
    /* Free 90% of the pool at random (main thread: all remote frees). */
    size_t nfree = n - n / 10;
    live -= free_random(pool, n, nfree, &rng, "threads (90%)");
    r->mid_kb = rss_kb();
    r->mid_live = live;
    for (size_t i = nfree; i < n; i++)
        obj_free(pool[i].p, pool[i].size, "threads (end)");
    ffree(pool);
}

/* ---- main -------------------------------------------------------------- */

int main(int argc, char **argv)
{
    if (argc != 5 && !(argc == 6 && strcmp(argv[1], "server") == 0))
        bench_usage(usage);
    long a = bench_arg(argv[2], usage), b = bench_arg(argv[3], usage);
    char *end;
    long idle_ms = strtol(argv[4], &end, 10);
    if (*end || idle_ms < 0)
        bench_usage(usage);
    fp_t r = {0};
    r.base_kb = rss_kb();
    bstamp_t t0, t1;
    bstamp(&t0);
    if (strcmp(argv[1], "frag") == 0)
        run_frag(&r, (size_t)a << 20, b);
    else if (strcmp(argv[1], "server") == 0)
        run_server(&r, (size_t)a << 20, b, argc == 6 ? bench_arg(argv[5], usage) : 8000);
    else if (strcmp(argv[1], "threads") == 0)
        run_threads(&r, (size_t)a << 20, b);
    else
        bench_usage(usage);
    bstamp(&t1);
    floor_unpause(&t0);
    check_xor();
    idle_phase(&r, idle_ms);
    char extra[512];
    snprintf(extra, sizeof(extra),
             "base_kb=%ld mid_kb=%ld mid_live=%zu final_kb=%ld final_live=%zu peak_live=%zu freed_kb=%ld "
             "idle_kb=%ld idle_ms=%ld floor_kb=%zu floor_live=%zu floor_harness_kb=%ld",
             r.base_kb, r.mid_kb, r.mid_live, r.final_kb, r.final_live, r.peak_live, r.freed_kb, r.idle_kb,
             idle_ms, r.floor_bytes >> 10, r.floor_live, r.floor_harness_kb);
    bench_report(r.ops, &t0, &t1, extra);
    return 0;
}
