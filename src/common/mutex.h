/*
 * mutex: the allocator's lock, a futex word with the fork protocol.
 *
 * Every lock the allocator owns is taken by the pthread_atfork "prepare"
 * handler (in lock order, see doc/internals.md) and released in the parent /
 * re-initialised in the child, so no lock is ever held across fork.
 *
 * Why not pthread_mutex_t: an uncontended trylock + unlock pair is two
 * calls into libc and about 70 instructions; bins, pools and the
 * profiler's table take locks on every fill, flush and sample (6% of the
 * instructions of larson under callgrind). Here it is one compare-and-swap
 * to lock and one exchange to unlock, inline; the futex system call runs
 * only when a thread has to wait. Never allocates.
 */
#ifndef MYALLOC_MUTEX_H
#define MYALLOC_MUTEX_H

#include <stdint.h>

#include "common.h"

/* A spin-wait's pause between reads of what another CPU will write. */
#if defined(__x86_64__) || defined(__i386__)
#define ma_cpu_pause() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define ma_cpu_pause() __asm__ volatile("yield" ::: "memory")
#else
#define ma_cpu_pause() __asm__ volatile("" ::: "memory")
#endif

/* state: 0 free; 1 held, nobody waiting; 2 held, waiters may be asleep on
 * the futex (so the unlock that finds 2 must wake one). A waiter sets 2
 * before sleeping, so a wake is never lost. */
typedef struct ma_mutex {
    uint32_t state;
} ma_mutex_t;

#define MA_MUTEX_INITIALIZER {0}

void ma_mutex_lock_slow(ma_mutex_t *mu);
void ma_mutex_wake(ma_mutex_t *mu);

MA_INLINE void ma_mutex_init(ma_mutex_t *mu) { ma_store_relaxed(&mu->state, 0); }

MA_INLINE void ma_mutex_lock(ma_mutex_t *mu)
{
    uint32_t free_state = 0;
    if (unlikely(!__atomic_compare_exchange_n(&mu->state, &free_state, 1, false, __ATOMIC_ACQUIRE,
                                              __ATOMIC_RELAXED)))
        ma_mutex_lock_slow(mu);
}

/* Take it only if it is free now; never waits. */
MA_INLINE bool ma_mutex_trylock(ma_mutex_t *mu)
{
    uint32_t free_state = 0;
    return ma_load_relaxed(&mu->state) == 0 &&
           __atomic_compare_exchange_n(&mu->state, &free_state, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

MA_INLINE void ma_mutex_unlock(ma_mutex_t *mu)
{
    if (unlikely(__atomic_exchange_n(&mu->state, 0, __ATOMIC_RELEASE) == 2))
        ma_mutex_wake(mu);
}

MA_INLINE void ma_mutex_prefork(ma_mutex_t *mu) { ma_mutex_lock(mu); }
MA_INLINE void ma_mutex_postfork_parent(ma_mutex_t *mu) { ma_mutex_unlock(mu); }
/* In the child only the forking thread exists: start the lock afresh. */
MA_INLINE void ma_mutex_postfork_child(ma_mutex_t *mu) { ma_mutex_init(mu); }

#endif
