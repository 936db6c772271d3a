/*
 * bench.h: shared helpers for the myalloc benchmark programs.
 *
 * Every program prints exactly one line starting with "RESULT " on stdout,
 * made of key=value pairs that bench/bench.py parses:
 *
 *   RESULT ops=<n> wall_s=<s> user_s=<s> sys_s=<s> maxrss_kb=<kB> [extra...]
 *
 * ops/wall/user/sys cover the measured region only (after warm-up and set
 * up); maxrss_kb is the process's peak resident set (see peak_rss_kb).
 * A program that detects a wrong result (corrupted or overlapping objects,
 * lost objects, NULL from malloc) prints "VERIFY FAILED: ..." on stderr and
 * exits with status 3, so a broken allocator cannot win by doing nothing.
 *
 * The harness's own bookkeeping (pointer arrays, queues, address records)
 * lives in memory from mmap, never from the allocator under test.
 */
#ifndef BENCH_H
#define BENCH_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define BENCH_NOINLINE __attribute__((noinline))
#define BENCH_UNUSED __attribute__((unused))

/* ---- failure reporting ------------------------------------------------ */

BENCH_UNUSED __attribute__((format(printf, 1, 2), noreturn))
static void bench_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("VERIFY FAILED: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    _exit(3);
}

BENCH_UNUSED __attribute__((noreturn))
static void bench_usage(const char *usage)
{
    fprintf(stderr, "usage: %s\n", usage);
    exit(2);
}

/* Parse a positive integer argument (accepts k/M suffixes). */
BENCH_UNUSED static long bench_arg(const char *s, const char *usage)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end == 'k' || *end == 'K') {
        v *= 1000;
        end++;
    } else if (*end == 'M') {
        v *= 1000000;
        end++;
    }
    if (errno || *end || v <= 0)
        bench_usage(usage);
    return v;
}

/* ---- harness memory (not from the allocator under test) --------------- */

BENCH_UNUSED static void *hmem(size_t n)
{
    if (n == 0)
        n = 1;
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    return p;
}

/* ---- random numbers ---------------------------------------------------- */

static inline uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* xorshift64*: fast, good enough to pick slots and sizes. */
static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* Uniform in [lo, hi]. */
static inline size_t rng_range(uint64_t *s, size_t lo, size_t hi)
{
    return lo + (size_t)((rng_next(s) >> 11) % (uint64_t)(hi - lo + 1));
}

/* ---- timing ------------------------------------------------------------ */

typedef struct {
    struct timespec wall;
    struct rusage ru;
} bstamp_t;

BENCH_UNUSED static void bstamp(bstamp_t *s)
{
    getrusage(RUSAGE_SELF, &s->ru);
    clock_gettime(CLOCK_MONOTONIC, &s->wall);
}

static inline double tv_s(struct timeval tv)
{
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

/*
 * Peak resident set of this process in KiB: VmHWM from /proc/self/status.
 * getrusage's ru_maxrss would be the natural choice, but Linux carries the
 * peak of the pre-exec image over into it: a program started by a 17 MiB
 * Python driver reports at least 17 MiB whatever it does. VmHWM is the
 * high-water mark of the current address space only (the same counter,
 * without the inherited floor). Falls back to ru_maxrss.
 */
BENCH_UNUSED static long peak_rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    if (f != NULL) {
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
                break;
        fclose(f);
    }
    if (kb < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kb = ru.ru_maxrss;
    }
    return kb;
}

/* Print the RESULT line. extra: more " key=value" text (may be NULL). */
BENCH_UNUSED static void bench_report(double ops, const bstamp_t *a, const bstamp_t *b,
                                      const char *extra)
{
    double wall = (double)(b->wall.tv_sec - a->wall.tv_sec) +
                  (double)(b->wall.tv_nsec - a->wall.tv_nsec) * 1e-9;
    double user = tv_s(b->ru.ru_utime) - tv_s(a->ru.ru_utime);
    double sys = tv_s(b->ru.ru_stime) - tv_s(a->ru.ru_stime);
    printf("RESULT ops=%.0f wall_s=%.6f user_s=%.6f sys_s=%.6f maxrss_kb=%ld%s%s\n", ops, wall,
           user, sys, peak_rss_kb(), extra ? " " : "", extra ? extra : "");
    fflush(stdout);
}

/* ---- object stamps ----------------------------------------------------- */

/*
 * Every multi-threaded workload writes a stamp into each object it
 * allocates: a unique 64-bit token in the first word, a check word derived
 * from it and the size in the second (objects are >= 16 bytes), and the
 * complement of the token in the last 8 bytes when the object has room.
 * The code that frees an object verifies the stamp; the workloads also keep
 * XOR sums of the tokens allocated and freed, which must agree at the end.
 */
#define STAMP_MIN 16

static inline uint64_t stamp_check(uint64_t token, size_t size)
{
    return splitmix64(token ^ ((uint64_t)size << 40)) | 1;
}

static inline void stamp_write(void *p, size_t size, uint64_t token)
{
    uint64_t *w = (uint64_t *)p;
    w[0] = token;
    w[1] = stamp_check(token, size);
    if (size >= 24)
        memcpy((char *)p + size - 8, &(uint64_t){~token}, 8);
}

/* Verify a stamp; returns the token. size is what the writer used. */
static inline uint64_t stamp_verify(const void *p, size_t size, const char *where)
{
    const uint64_t *w = (const uint64_t *)p;
    uint64_t token = w[0];
    if (w[1] != stamp_check(token, size))
        bench_fail("%s: object %p (size %zu) header corrupted", where, p, size);
    if (size >= 24) {
        uint64_t t;
        memcpy(&t, (const char *)p + size - 8, 8);
        if (t != ~token)
            bench_fail("%s: object %p (size %zu) tail corrupted", where, p, size);
    }
    return token;
}

/* Read the size a stamped object was written with, for objects whose size
 * is not known to the freer: we keep it in the upper bits of the token. */
static inline uint64_t token_make(uint64_t unique, size_t size)
{
    return (splitmix64(unique) & 0x00000000ffffffffull) | ((uint64_t)size << 32);
}
static inline size_t token_size(uint64_t token)
{
    return (size_t)(token >> 32);
}

/* Verify an object stamped with a token_make() token (size from the token). */
static inline uint64_t stamp_verify_tok(const void *p, const char *where)
{
    uint64_t token = ((const uint64_t *)p)[0];
    return stamp_verify(p, token_size(token), where);
}

/* ---- a reusable barrier (pthread_barrier_t, checked) ------------------- */

BENCH_UNUSED static void barrier_wait(pthread_barrier_t *b)
{
    int r = pthread_barrier_wait(b);
    if (r != 0 && r != PTHREAD_BARRIER_SERIAL_THREAD) {
        fprintf(stderr, "pthread_barrier_wait: %s\n", strerror(r));
        exit(2);
    }
}

BENCH_UNUSED static void thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
    int r = pthread_create(t, NULL, fn, arg);
    if (r != 0) {
        fprintf(stderr, "pthread_create: %s\n", strerror(r));
        exit(2);
    }
}

#endif
