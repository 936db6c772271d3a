/*
 * decay_probe: memory-return scenarios that need options read at startup
 * (retain, thp, background_thread). Run by test_decay.c as
 *
 *     MYALLOC_CONF=... LD_PRELOAD=<build>/libmyalloc.so decay_probe MODE [ARGS]
 *
 * It prints key=value lines on stdout; the test checks them. mallctl is a
 * weak reference resolved from the preloaded library (the program is not
 * linked with myalloc). Exit status 0, or 2 when something the scenario
 * relies on failed (error=... says what).
 *
 * Modes:
 *   retain        one 1 GiB object, written, freed, then arena.<all>.purge:
 *                 stats.mapped and the size column of /proc/self/statm
 *                 before and after (retain:false must give the chunk back)
 *   thp           a small and a large object: the VmFlags of the
 *                 /proc/self/smaps mappings that hold them
 *   idle MB MS [thread.idle] [ballast]
 *                 (with ballast: first 2 x MB MiB that stay live) MB MiB of
 *                 mixed objects written, freed in random order
 *                 (then mallctl thread.idle when asked), then no
 *                 allocation at all for up to MS ms while RSS is polled
 *                 (raw read(2) of /proc/self/statm, no stdio) until it is
 *                 back within 10% of MB of where it started
 *   main_exits    (background_thread:true) main allocates, starts a
 *                 thread and calls pthread_exit. That thread waits until
 *                 main is gone (main_gone=1), gives the background thread
 *                 300 ms, reads background_thread (running=1: it did not
 *                 end while a thread was left) and returns: the process
 *                 must then end, the background thread with it.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "myalloc.h"

#pragma weak mallctl

#define MALLCTL_ALL 4096 /* MALLCTL_ARENAS_ALL */

static void die(const char *what)
{
    fprintf(stdout, "error=%s\n", what);
    fflush(stdout);
    exit(2);
}

static size_t ctl_size(const char *name)
{
    size_t v = 0, sz = sizeof(v);
    uint64_t epoch = 1;
    mallctl("epoch", NULL, NULL, &epoch, sizeof(epoch));
    if (mallctl(name, &v, &sz, NULL, 0) != 0)
        die(name);
    return v;
}

static void ctl_do(const char *name)
{
    if (mallctl(name, NULL, NULL, NULL, 0) != 0)
        die(name);
}

/* A /proc file into buf, NUL-terminated, read without allocating; its
 * length, or -1. */
static ssize_t read_proc(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, len - 1) : -1;
    if (fd >= 0)
        close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return n;
}

/* /proc/self/statm field k (0: size, 1: resident) in bytes. */
static size_t statm(int k)
{
    char buf[256];
    if (read_proc("/proc/self/statm", buf, sizeof(buf)) <= 0)
        die("read statm");
    char *s = buf;
    for (int i = 0; i < k; i++) {
        while (*s && *s != ' ')
            s++;
        while (*s == ' ')
            s++;
    }
    return (size_t)strtoull(s, NULL, 10) * (size_t)sysconf(_SC_PAGESIZE);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void *hmem(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        die("mmap");
    memset(p, 0, n);
    return p;
}

static uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dULL;
}

static void mode_retain(void)
{
    char name[64];
    snprintf(name, sizeof(name), "arena.%d.purge", MALLCTL_ALL);
    size_t gib = (size_t)1 << 30;
    size_t mapped0 = ctl_size("stats.mapped"), vsz0 = statm(0);
    char *p = malloc(gib);
    if (p == NULL)
        die("malloc 1 GiB");
    for (size_t i = 0; i < gib; i += 4096)
        p[i] = 1;
    size_t mapped1 = ctl_size("stats.mapped"), vsz1 = statm(0), rss1 = statm(1);
    free(p);
    ctl_do(name);
    size_t mapped2 = ctl_size("stats.mapped"), vsz2 = statm(0), rss2 = statm(1);
    printf("mapped0=%zu\nmapped1=%zu\nmapped2=%zu\nvsz0=%zu\nvsz1=%zu\nvsz2=%zu\nrss1=%zu\nrss2=%zu\n"
           "retained2=%zu\n",
           mapped0, mapped1, mapped2, vsz0, vsz1, vsz2, rss1, rss2, ctl_size("stats.retained"));
}

/* The VmFlags line of the smaps mapping that holds addr. */
static void vmflags_of(const void *addr, char *out, size_t outlen)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (f == NULL)
        die("open smaps");
    char line[512];
    bool in = false;
    out[0] = '\0';
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
            continue;
        }
        if (in && strncmp(line, "VmFlags:", 8) == 0) {
            snprintf(out, outlen, "%s", line + 8);
            out[strcspn(out, "\n")] = '\0';
            break;
        }
    }
    fclose(f);
    if (out[0] == '\0')
        die("no VmFlags for the heap mapping");
}

static void mode_thp(void)
{
    char *small = malloc(100), *large = malloc((size_t)4 << 20);
    if (small == NULL || large == NULL)
        die("malloc");
    memset(small, 1, 100);
    memset(large, 1, (size_t)4 << 20);
    char fs[256], fl[256];
    vmflags_of(small, fs, sizeof(fs));
    vmflags_of(large, fl, sizeof(fl));
    /* Leading space so that the test can look for " nh " / " hg ". */
    printf("small_flags=%s \nlarge_flags=%s \n", fs, fl);
    free(small);
    free(large);
}

/* ballast: first allocate and touch 2 x `mb` MiB that stay live, so that
 * what is freed afterwards (MB MiB requested, somewhat more in pages) stays
 * under the pools' dirty cap (at most the active pages): then only decay
 * can give it back. */
static void mode_idle(size_t mb, uint64_t wait_ms, bool idle_call, bool ballast)
{
    size_t total = mb << 20;
    size_t cap = total / 16;
    void **ps = hmem(cap * sizeof(void *));
    uint64_t seed = 0x1234567;
    if (ballast) {
        char *b = malloc(2 * total);
        if (b == NULL)
            die("malloc");
        memset(b, 1, 2 * total);
    }
    size_t rss0 = statm(1), n = 0, bytes = 0;
    while (bytes < total && n < cap) {
        /* Log-uniform 16 B .. 64 KiB: small and large classes. */
        double u = (double)(rnd(&seed) >> 11) / 9007199254740992.0;
        size_t s = (size_t)(16.0 * __builtin_exp2(u * 12.0));
        char *p = malloc(s);
        if (p == NULL)
            die("malloc");
        memset(p, (int)(n & 0xff), s);
        ps[n++] = p;
        bytes += s;
    }
    size_t rss1 = statm(1);
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(rnd(&seed) % (i + 1));
        void *t = ps[i];
        ps[i] = ps[j];
        ps[j] = t;
    }
    for (size_t i = 0; i < n; i++)
        free(ps[i]);
    if (idle_call)
        ctl_do("thread.idle");
    /* From here on: no allocation. */
    uint64_t t0 = now_ms();
    size_t rss2 = statm(1), rss = rss2;
    long dropped_ms = -1;
    while (now_ms() - t0 < wait_ms) {
        rss = statm(1);
        if (rss < rss0 + total / 10) {
            dropped_ms = (long)(now_ms() - t0);
            break;
        }
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    printf("bytes=%zu\nrss0=%zu\nrss_alloc=%zu\nrss_freed=%zu\nrss_end=%zu\ndropped_ms=%ld\n", bytes, rss0,
           rss1, rss2, rss, dropped_ms);
}

static bool has_arg(int argc, char **argv, const char *word)
{
    for (int i = 4; i < argc; i++)
        if (strcmp(argv[i], word) == 0)
            return true;
    return false;
}

/* Whether main has exited: /proc shows the process as a zombie then. */
static bool main_gone(void)
{
    char buf[1024];
    read_proc("/proc/self/stat", buf, sizeof(buf));
    const char *st = strrchr(buf, ')');
    return st != NULL && st[1] == ' ' && st[2] == 'Z';
}

static void *outlive_main(void *arg)
{
    (void)arg;
    bool gone = false;
    for (int i = 0; i < 500 && !(gone = main_gone()); i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    bool running = false;
    size_t sz = sizeof(running);
    mallctl("background_thread", &running, &sz, NULL, 0);
    printf("main_gone=%d\nrunning=%d\n", gone, running);
    fflush(stdout);
    return NULL;
}

static void mode_main_exits(void)
{
    void *volatile p = malloc(100000); /* volatile: not optimised away */
    free(p);
    pthread_t t;
    if (pthread_create(&t, NULL, outlive_main, NULL) != 0)
        die("pthread_create");
    pthread_exit(NULL);
}

int main(int argc, char **argv)
{
    if (mallctl == NULL)
        die("mallctl not found: run with LD_PRELOAD=<build>/libmyalloc.so");
    if (argc >= 2 && strcmp(argv[1], "retain") == 0)
        mode_retain();
    else if (argc >= 2 && strcmp(argv[1], "thp") == 0)
        mode_thp();
    else if (argc >= 4 && strcmp(argv[1], "idle") == 0)
        mode_idle((size_t)strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10), has_arg(argc, argv, "thread.idle"),
                  has_arg(argc, argv, "ballast"));
    else if (argc >= 2 && strcmp(argv[1], "main_exits") == 0)
        mode_main_exits();
    else
        die("usage: decay_probe retain|thp|idle MB MS [thread.idle] [ballast] | main_exits");
    fflush(stdout);
    return 0;
}
