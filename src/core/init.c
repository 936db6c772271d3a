/*
 * init: one-time initialisation and the fork protocol.
 */
#include <pthread.h>

#include "../arena/base.h"
#include "../arena/pages.h"
#include "../common/sys.h"
#include "../prof/prof.h"
#include "conf.h"
#include "core.h"

bool ma_initialized;
unsigned ma_ncpus = 1;
static ma_mutex_t init_lock = MA_MUTEX_INITIALIZER;
static bool init_busy; /* set while this thread initialises: catches recursion */

/* The CPUs this process may run on (raw sched_getaffinity, which returns
 * the bytes of the mask it wrote). */
static unsigned count_cpus(void)
{
    uint64_t mask[16] = {0}; /* 1024 CPUs, as cpu_set_t */
    long r = ma_syscall(SYS_sched_getaffinity, 0, sizeof(mask), mask);
    unsigned n = 0;
    if (!ma_sys_failed(r))
        for (size_t i = 0; i < (size_t)r / sizeof(mask[0]); i++)
            n += (unsigned)__builtin_popcountll(mask[i]);
    return n > 0 ? n : 1;
}

/* No lock is held across fork: prepare takes every lock in lock order
 * (init, profiler, arenas' bins, arenas' pools, page map, metadata), the
 * parent releases them, the child re-initialises them. */
static MA_WARM_TEXT void ma_prefork(void)
{
    if (!ma_load_acquire(&ma_initialized))
        return;
    ma_mutex_prefork(&init_lock);
    prof_prefork();
    arena_prefork();
    rtree_prefork();
    base_prefork();
}

static MA_WARM_TEXT void ma_postfork_parent(void)
{
    if (!ma_load_acquire(&ma_initialized))
        return;
    base_postfork_parent();
    rtree_postfork_parent();
    arena_postfork_parent();
    prof_postfork_parent();
    ma_mutex_postfork_parent(&init_lock);
}

static MA_WARM_TEXT void ma_postfork_child(void)
{
    if (!ma_load_acquire(&ma_initialized))
        return;
    base_postfork_child();
    rtree_postfork_child();
    arena_postfork_child();
    prof_postfork_child();
    ma_mutex_postfork_child(&init_lock);
    tsd_postfork_child();
    ma_background_postfork_child();
    ma_math_postfork_child();
}

bool ma_init_hard(void)
{
    ma_mutex_lock(&init_lock);
    if (ma_initialized) {
        ma_mutex_unlock(&init_lock);
        return true;
    }
    if (init_busy)
        ma_fatal("initialisation re-entered itself (a libc call made during init allocated)");
    init_busy = true;

    size_t os_page = pages_os_page_size();
    if (os_page > PAGE || PAGE % os_page != 0)
        ma_fatal("built for %zu-byte pages (LG_PAGE=%d) but the system page size is %zu; "
                 "rebuild with make LG_PAGE=%u",
                 (size_t)PAGE, LG_PAGE, os_page, ma_lg_floor(os_page));
    conf_init();
    /* The seed before any thread state exists: the first allocation made
     * below (the unwinder's warm-up in prof_boot_late, say) initialises the
     * calling thread's sampler, which would otherwise be seeded from the
     * clock, and prof_seed would not make the main thread's samples
     * reproducible. */
    te_sample_seed = opt_prof_seed;
    ma_ncpus = count_cpus();
    /* Four arenas per CPU, as jemalloc: threads get arenas of their own up
     * to that many, and objects return to their own arena's slabs, so
     * threads do not share cache lines. (One per CPU kept memory tighter
     * and larson 10-15% faster on 2 CPUs, but 8 threads on 2 arenas then
     * reused each other's line neighbours: falseshare 73% after remote
     * frees, against 0% with 8 arenas.) */
    unsigned narenas = opt_narenas != 0 ? opt_narenas : 4 * ma_ncpus;
    tsd_prof_active_init = opt_prof_thread_active_init;
    te_periodic_register(ma_decay_hook);
    if (opt_lg_prof_interval >= 0) {
        uint64_t interval = (uint64_t)1 << MA_MIN(opt_lg_prof_interval, 62);
        te_periodic_interval = MA_MIN(interval, TE_PERIODIC_INTERVAL_MAX);
        te_periodic_register(prof_bytes_hook);
    }
    bool ok = arena_boot(narenas) && tcache_boot() && tsd_boot() && prof_boot();
    if (ok) {
        pthread_atfork(ma_prefork, ma_postfork_parent, ma_postfork_child);
        ma_store_release(&ma_initialized, true);
    }
    init_busy = false;
    ma_mutex_unlock(&init_lock);
    /* Outside the lock: these may allocate (the unwinder's warm-up, atexit). */
    if (ok) {
        prof_boot_late();
        ma_prof_update();
        if (opt_stats_print)
            stats_print_boot();
        if (opt_background_thread && ma_background_set(true) != 0)
            ma_warn("background_thread: could not start the thread; purging runs from allocations");
    }
    return ok;
}

/* Initialise when the library is loaded, not only on the first malloc: a
 * configuration that cannot run (the page size) must fail at startup even
 * in a program that never allocates. */
__attribute__((constructor)) static void ma_init_at_load(void)
{
    ma_init();
}

void ma_prof_update(void)
{
    te_sample_configure(ma_load_acquire(&prof_active), ma_load_acquire(&prof_lg_sample), opt_prof_seed);
    /* The calling thread takes the new setting at once. */
    tsd_t *tsd = tsd_get();
    if (tsd_nominal(tsd))
        te_resync(tsd);
}
