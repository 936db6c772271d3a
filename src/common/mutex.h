/*
 * mutex: the allocator's lock, a pthread mutex with the fork protocol.
 *
 * Every lock the allocator owns is taken by the pthread_atfork "prepare"
 * handler (in lock order, see doc/internals.md) and released in the parent /
 * re-initialised in the child, so no lock is ever held across fork.
 * pthread mutexes never allocate.
 */
#ifndef MYALLOC_MUTEX_H
#define MYALLOC_MUTEX_H

#include <pthread.h>

#include "common.h"

typedef struct ma_mutex {
    pthread_mutex_t m;
} ma_mutex_t;

#define MA_MUTEX_INITIALIZER {PTHREAD_MUTEX_INITIALIZER}

MA_INLINE void ma_mutex_init(ma_mutex_t *mu)
{
    pthread_mutex_init(&mu->m, NULL);
}

MA_INLINE void ma_mutex_lock(ma_mutex_t *mu)
{
    /* Try first: the uncontended case skips the call's slower bookkeeping. */
    if (unlikely(pthread_mutex_trylock(&mu->m) != 0))
        pthread_mutex_lock(&mu->m);
}

MA_INLINE void ma_mutex_unlock(ma_mutex_t *mu)
{
    pthread_mutex_unlock(&mu->m);
}

MA_INLINE void ma_mutex_prefork(ma_mutex_t *mu) { pthread_mutex_lock(&mu->m); }
MA_INLINE void ma_mutex_postfork_parent(ma_mutex_t *mu) { pthread_mutex_unlock(&mu->m); }
/* In the child only the forking thread exists: start the lock afresh. */
MA_INLINE void ma_mutex_postfork_child(ma_mutex_t *mu) { pthread_mutex_init(&mu->m, NULL); }

#endif
