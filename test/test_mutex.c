/*
 * The allocator's lock (src/common/mutex.h): mutual exclusion under
 * contention, sleepers woken, errno kept, fork protocol.
 */
#include <errno.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/mutex.h"
#include "test_util.h"

static ma_mutex_t lock = MA_MUTEX_INITIALIZER;
static volatile uint64_t counter;

enum { NTHREADS = 4, NITER = 200000 };

static void *increment(void *arg)
{
    (void)arg;
    for (int i = 0; i < NITER; i++) {
        ma_mutex_lock(&lock);
        /* A read, a pause, a write: a second holder would lose updates. */
        uint64_t v = counter;
        if ((i & 63) == 0)
            sched_yield();
        counter = v + 1;
        ma_mutex_unlock(&lock);
    }
    return NULL;
}

Test(mutex, excludes_under_contention)
{
    pthread_t t[NTHREADS];
    counter = 0;
    for (int i = 0; i < NTHREADS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, increment, NULL), 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    cr_assert_eq(counter, (uint64_t)NTHREADS * NITER, "lost updates: %llu of %llu", (unsigned long long)counter,
                 (unsigned long long)NTHREADS * NITER);
    cr_assert_eq(lock.state, 0, "left held");
}

static int waiter_errno;

static void *wait_for_lock(void *arg)
{
    (void)arg;
    errno = 1234;
    ma_mutex_lock(&lock); /* spins, then sleeps on the futex */
    waiter_errno = errno;
    ma_mutex_unlock(&lock);
    return NULL;
}

/* A waiter that went to sleep is woken by the unlock (a lost wake would
 * hang here until the test's timeout), and its errno is untouched. */
Test(mutex, a_sleeping_waiter_is_woken_and_keeps_errno, .timeout = 20)
{
    ma_mutex_lock(&lock);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, wait_for_lock, NULL), 0);
    /* Long enough for the spin to end and the waiter to sleep. */
    for (int i = 0; i < 200 && __atomic_load_n(&lock.state, __ATOMIC_RELAXED) != 2; i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    cr_assert_eq(lock.state, 2, "the waiter did not announce itself");
    nanosleep(&(struct timespec){0, 20000000}, NULL);
    ma_mutex_unlock(&lock);
    pthread_join(t, NULL);
    cr_assert_eq(waiter_errno, 1234, "errno changed to %d while waiting", waiter_errno);
    cr_assert_eq(lock.state, 0);
}

/* prefork holds it; the parent gets it back; the child starts it afresh
 * (free, as if no other thread had ever waited). */
Test(mutex, fork_protocol)
{
    ma_mutex_prefork(&lock);
    cr_assert_neq(lock.state, 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        ma_mutex_postfork_child(&lock);
        ma_mutex_lock(&lock);
        ma_mutex_unlock(&lock);
        _exit(lock.state == 0 ? 0 : 1);
    }
    ma_mutex_postfork_parent(&lock);
    cr_assert_eq(lock.state, 0);
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: status %#x", st);
}
