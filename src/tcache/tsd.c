/*
 * tsd: thread state set-up and tear-down, see tsd.h.
 */
#include "tsd.h"

#include <pthread.h>

#include "tcache.h"

__thread tsd_t tsd_tls __attribute__((tls_model("initial-exec")));

uint64_t tsd_nthreads_created;
void (*tsd_on_all_left)(void);
bool tsd_prof_active_init = true;
static pthread_key_t tsd_key;

/* pthread key destructor: runs at thread exit (after C++ thread_local
 * destructors, which may still free). */
static void tsd_cleanup(void *arg)
{
    (void)arg;
    tsd_t *tsd = tsd_get();
    if (tsd->state != TSD_NOMINAL)
        return;
    tsd->state = TSD_EXITED;
    tsd->next_event = 0;
    tcache_destroy(tsd);
    bool arena_left = arena_thread_leave(tsd->arena);
    /* tsd->arena stays: late frees and mallocs of other destructors use it;
     * they no longer take the fast path. */
    tsd->fastmap_npages = 0;
    void (*all_left)(void) = ma_load_acquire(&tsd_on_all_left);
    if (arena_left && all_left != NULL && arena_nthreads_total() == 0)
        all_left();
}

bool tsd_boot(void)
{
    return pthread_key_create(&tsd_key, tsd_cleanup) == 0;
}

void tsd_update_next_event(tsd_t *tsd)
{
    if (tsd->state != TSD_NOMINAL || tsd->reentrancy != 0)
        tsd->next_event = 0;
    else
        te_update_next(tsd);
}

tsd_t *tsd_fetch_slow(void)
{
    tsd_t *tsd = tsd_get();
    if (tsd->state != TSD_UNINIT)
        return tsd;
    tsd->state = TSD_INITIALIZING;
    tsd->next_event = 0;
    /* May allocate (glibc's second-level key array): such a nested call sees
     * TSD_INITIALIZING and takes the minimal path. */
    pthread_setspecific(tsd_key, tsd);
    if (tsd->arena == NULL)
        tsd_set_arena(tsd, arena_choose());
    tcache_init(tsd);
    te_init(tsd);
    tsd->prof_thread_active = tsd_prof_active_init;
    tsd->state = TSD_NOMINAL;
    tsd_update_next_event(tsd);
    ma_fetch_add(&tsd_nthreads_created, 1);
    return tsd;
}

MA_WARM_TEXT void tsd_postfork_child(void)
{
    /* The forking thread is the child's only thread: count it back in. */
    tsd_t *tsd = tsd_get();
    if (tsd->arena != NULL && tsd->state == TSD_NOMINAL)
        arena_thread_join(tsd->arena);
}
