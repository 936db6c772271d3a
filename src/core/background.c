/*
 * background: purging outside the allocation paths.
 *
 * Decay purging runs from two places: the byte ticker (each thread, every
 * te_periodic_interval bytes, ticks its own arena, one other arena in
 * turn, and the profiler's sampled region; each tick does a bounded amount
 * of work), and, with background_thread:true, a thread of ours that sleeps
 * until the next decay epoch and ticks every arena. The background thread
 * does not survive fork (the child runs without one until it is switched
 * on again).
 *
 * Nor does it keep the process alive: a program whose main thread calls
 * pthread_exit ends with its last thread, and ours would wait for ever
 * (as jemalloc's does). So while no thread that allocated is alive, the
 * thread looks at each wake-up whether it is the last one (bg_alone), and
 * ends if so; the last such thread's exit wakes it to look at once.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "../arena/arena.h"
#include "../common/sys.h"
#include "../prof/prof.h"
#include "core.h"

#define DECAY_TICK_MAX_PAGES ((size_t)16 << (20 - LG_PAGE)) /* 16 MiB per tick */
#define BACKGROUND_SLEEP_MIN_NS 10000000ull                  /* 10 ms */
#define BACKGROUND_SLEEP_MAX_NS 1000000000ull                /* 1 s */

bool opt_background_thread;

static void decay_one(arena_t *a, uint64_t now)
{
    if (a != NULL)
        arena_decay(a, now, DECAY_TICK_MAX_PAGES);
}

MA_HOT_TEXT void ma_decay_hook(uint64_t bytes)
{
    (void)bytes;
    static unsigned cursor;
    uint64_t now = decay_now_ns();
    arena_t *own = tsd_get()->arena;
    if (own != NULL)
        extent_pool_note_tick(&own->pool, now);
    decay_one(own, now);
    unsigned i = ma_fetch_add(&cursor, 1) % ARENAS_MAX;
    arena_t *other = ma_load_acquire(&arenas[i % MA_MAX(arena_narenas, 1)]);
    if (other != own) /* with one arena, or the cursor on ours: done above */
        decay_one(other, now);
    prof_decay(now, DECAY_TICK_MAX_PAGES);
}

/* ---------------------------------------------------------------------
 * The background thread.
 */

static pthread_mutex_t bg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bg_cond;
static bool bg_running, bg_stop;
static bool bg_woken; /* bg_wake came while the thread was not waiting */
static pthread_t bg_thread;

/* Whether the calling thread is the process's last live one: the main
 * thread has exited (/proc shows the process as a zombie, and counts the
 * zombie among its threads until the process ends) and one thread is left
 * besides. */
static bool bg_alone(void)
{
    char buf[1024];
    long len = ma_sys_read_proc("/proc/self/stat", buf, sizeof(buf) - 1);
    if (len <= 0)
        return false;
    buf[len] = '\0';
    const char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    if (p == NULL || p[1] != ' ' || p[2] != 'Z')
        return false;
    /* Field 20 is num_threads; p[2] is field 3. */
    p += 2;
    for (int field = 3; field < 20 && *p != '\0'; p++)
        field += *p == ' ';
    return p[0] == '2' && p[1] == ' ';
}

static void bg_wake(void)
{
    pthread_mutex_lock(&bg_lock);
    if (bg_running) {
        bg_woken = true;
        pthread_cond_signal(&bg_cond);
    }
    pthread_mutex_unlock(&bg_lock);
}

static void *bg_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&bg_lock);
    while (!bg_stop) {
        bg_woken = false;
        if (arena_nthreads_total() == 0 && bg_alone()) {
            bg_running = false;
            pthread_detach(pthread_self());
            break;
        }
        pthread_mutex_unlock(&bg_lock);
        uint64_t now = decay_now_ns(), next = BACKGROUND_SLEEP_MAX_NS;
        arena_t *a;
        for (unsigned i = 0; (a = arena_next(&i)) != NULL;) {
            arena_decay(a, now, SIZE_MAX);
            next = MA_MIN(next, extent_decay_ns_to_next(&a->pool, now));
        }
        prof_decay(now, SIZE_MAX);
        next = MA_MAX(next, BACKGROUND_SLEEP_MIN_NS);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t until = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + next;
        ts.tv_sec = (time_t)(until / 1000000000ull);
        ts.tv_nsec = (long)(until % 1000000000ull);
        pthread_mutex_lock(&bg_lock);
        if (!bg_stop && !bg_woken)
            pthread_cond_timedwait(&bg_cond, &bg_lock, &ts);
    }
    pthread_mutex_unlock(&bg_lock);
    return NULL;
}

/* Start or stop the background thread; returns 0 or an errno value. Must
 * not be called with any allocator lock held (thread creation may
 * allocate). */
int ma_background_set(bool on)
{
    pthread_mutex_lock(&bg_lock);
    int err = 0;
    if (on)
        ma_store_release(&tsd_on_all_left, bg_wake);
    if (on && !bg_running) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&bg_cond, &ca);
        pthread_condattr_destroy(&ca);
        bg_stop = false;
        err = pthread_create(&bg_thread, NULL, bg_main, NULL);
        if (err == 0)
            bg_running = true;
    } else if (!on && bg_running) {
        bg_stop = true;
        pthread_cond_signal(&bg_cond);
        pthread_mutex_unlock(&bg_lock);
        pthread_join(bg_thread, NULL);
        pthread_mutex_lock(&bg_lock);
        bg_running = false;
    }
    pthread_mutex_unlock(&bg_lock);
    return err;
}

bool ma_background_running(void)
{
    return ma_load_acquire(&bg_running);
}

void ma_background_postfork_child(void)
{
    /* The thread is gone in the child. */
    pthread_mutex_init(&bg_lock, NULL);
    bg_running = false;
    bg_stop = false;
    bg_woken = false;
}
