/*
 * mutex: the contended half of the lock in mutex.h.
 */
#include "mutex.h"

#include <linux/futex.h>

#include "sys.h"

/* Spins before sleeping: critical sections are a few hundred instructions,
 * so a holder running on another CPU usually lets go within them; a holder
 * that was preempted does not, and then sleeping is better than spinning. */
#define MUTEX_SPINS 100

void ma_mutex_lock_slow(ma_mutex_t *mu)
{
    for (int i = 0; i < MUTEX_SPINS; i++) {
        uint32_t s = ma_load_relaxed(&mu->state);
        if (s == 0) {
            if (__atomic_compare_exchange_n(&mu->state, &s, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
                return;
        } else if (s == 2) {
            break; /* others are already asleep: queue behind them */
        }
        ma_cpu_pause();
    }
    /* Announce a waiter (2) whenever we take or wait: the lock taken here
     * may have had sleepers, and its unlock must wake the next. FUTEX_WAIT
     * fails (EAGAIN) when the word moved: then try again. */
    while (__atomic_exchange_n(&mu->state, 2, __ATOMIC_ACQUIRE) != 0)
        ma_syscall(SYS_futex, &mu->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

void ma_mutex_wake(ma_mutex_t *mu)
{
    ma_syscall(SYS_futex, &mu->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
