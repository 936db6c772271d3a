/*
 * prof_probe: profiler scenarios that need a process of their own (options
 * read at startup, dumps at exit, stderr at exit). Run by test_prof.c as
 *
 *     cd <tmpdir> && MYALLOC_CONF=... LD_PRELOAD=<build>/libmyalloc.so prof_probe MODE ARGS...
 *
 * It prints key=value lines on stdout; the test checks them and the files
 * left behind. mallctl is a weak reference resolved from the preloaded
 * library (the program is not linked with myalloc). Exit status 0, or 2
 * when something the scenario relies on failed (the message says what).
 *
 * Allocation sites are noinline functions with frame pointers (so that
 * prof_bt:fp can walk through them); the test finds their records by
 * address: the first frame of a record lies within SITE_SPAN bytes of the
 * site's address, which the probe prints.
 */
#include <dirent.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "myalloc.h"

#pragma weak mallctl

#ifdef __clang__
#define SITE __attribute__((noinline, used))
#else
#define SITE __attribute__((noinline, used, optimize("no-omit-frame-pointer")))
#endif
#define BARRIER(p) __asm__ volatile("" : : "r"(p) : "memory")

static void die(const char *what)
{
    fprintf(stdout, "error=%s\n", what);
    fflush(stdout);
    exit(2);
}

static uint64_t ctl_u64(const char *name)
{
    uint64_t v = 0;
    size_t sz = sizeof(v);
    if (mallctl(name, &v, &sz, NULL, 0) != 0)
        die(name);
    return v;
}

static bool ctl_bool(const char *name)
{
    bool v = false;
    size_t sz = sizeof(v);
    if (mallctl(name, &v, &sz, NULL, 0) != 0)
        die(name);
    return v;
}

static void ctl_set_bool(const char *name, bool v)
{
    if (mallctl(name, NULL, NULL, &v, sizeof(v)) != 0)
        die(name);
}

static const char *ctl_str(const char *name)
{
    const char *v = NULL;
    size_t sz = sizeof(v);
    if (mallctl(name, &v, &sz, NULL, 0) != 0)
        die(name);
    return v;
}

static void dump_to(const char *path)
{
    if (mallctl("prof.dump", NULL, NULL, path != NULL ? &path : NULL, path != NULL ? sizeof(path) : 0) != 0)
        die("prof.dump");
}

/* ---------------------------------------------------------------------
 * Sites.
 */

SITE void site_a(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        BARRIER(keep[i]);
    }
}

SITE void site_b(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        BARRIER(keep[i]);
    }
}

/* One malloc call per object, called from site_fp_driver: with prof_bt:fp
 * the first two frames are return addresses into these two. */
SITE void *site_fp(size_t size)
{
    void *p = malloc(size);
    BARRIER(p);
    return p;
}

SITE void site_fp_driver(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = site_fp(size);
        BARRIER(keep[i]);
    }
}

static void print_sites(void)
{
    printf("site_a=%p\nsite_b=%p\nsite_fp=%p\nsite_fp_driver=%p\n", (void *)site_a, (void *)site_b,
           (void *)site_fp, (void *)site_fp_driver);
}

static void **keep_array(size_t n)
{
    void **k = calloc(n, sizeof(void *));
    if (k == NULL)
        die("calloc");
    return k;
}

/* ---------------------------------------------------------------------
 * Modes.
 */

typedef struct job {
    void **keep;
    size_t n, size;
    uint64_t samples; /* prof.nsamples delta over the job */
    bool thread_active;
    void (*site)(void **, size_t, size_t);
} job_t;

static void *job_run(void *arg)
{
    job_t *j = arg;
    j->thread_active = ctl_bool("thread.prof.active");
    uint64_t before = ctl_u64("prof.nsamples");
    j->site(j->keep, j->n, j->size);
    j->samples = ctl_u64("prof.nsamples") - before;
    return NULL;
}

static void job_in_thread(job_t *j)
{
    pthread_t t;
    if (pthread_create(&t, NULL, job_run, j) != 0)
        die("pthread_create");
    pthread_join(t, NULL);
}

/* prof:true,prof_active:false: nothing is sampled (in the main thread or a
 * new one) until prof.active is set; then a new thread samples. */
static int mode_inactive(size_t n, size_t size, const char *path)
{
    printf("opt_prof=%d\nopt_prof_active=%d\nactive0=%d\n", ctl_bool("opt.prof"), ctl_bool("opt.prof_active"),
           ctl_bool("prof.active"));
    job_t main_job = {keep_array(n), n, size, 0, false, site_a};
    job_run(&main_job);
    job_t thread_job = {keep_array(n), n, size, 0, false, site_a};
    job_in_thread(&thread_job);
    printf("inactive_main_samples=%llu\ninactive_thread_samples=%llu\n", (unsigned long long)main_job.samples,
           (unsigned long long)thread_job.samples);
    ctl_set_bool("prof.active", true);
    printf("active1=%d\n", ctl_bool("prof.active"));
    job_t active_job = {keep_array(n), n, size, 0, false, site_b};
    job_in_thread(&active_job);
    printf("active_samples=%llu\n", (unsigned long long)active_job.samples);
    dump_to(path);
    print_sites();
    return 0;
}

/* prof_thread_active_init:false: new threads start with thread.prof.active
 * false and sample nothing; setting it true in the thread starts sampling. */
static int mode_thread_init(size_t n, size_t size)
{
    printf("opt_tai=%d\nctl_tai=%d\n", ctl_bool("opt.prof_thread_active_init"),
           ctl_bool("prof.thread_active_init"));
    job_t j = {keep_array(n), n, size, 0, false, site_a};
    job_in_thread(&j);
    printf("thread_active=%d\nthread_samples=%llu\n", j.thread_active, (unsigned long long)j.samples);
    return 0;
}

/* Two dumps without a file name: <prefix>.<pid>.<seq>.m.heap. */
static int mode_dumps(size_t n, size_t size)
{
    void **k = keep_array(n);
    site_a(k, n, size);
    dump_to(NULL);
    dump_to(NULL);
    printf("pid=%d\n", (int)getpid());
    print_sites();
    return 0;
}

/* Exit with objects live at site_a (prof_final writes the .f. profile). */
static int mode_final(size_t n, size_t size, bool activate)
{
    if (activate) /* started without prof:true: sampling switched on here */
        ctl_set_bool("prof.active", true);
    void **k = keep_array(n);
    uint64_t before = ctl_u64("prof.nsamples");
    site_a(k, n, size);
    printf("site_samples=%llu\npid=%d\n", (unsigned long long)(ctl_u64("prof.nsamples") - before),
           (int)getpid());
    print_sites();
    return 0;
}

/* Leak n objects of size bytes at site_a; free everything else. */
static int mode_leak(size_t n, size_t size)
{
    print_sites();
    void **k = keep_array(n);
    site_a(k, n, size);
    size_t leaked = 0;
    for (size_t i = 0; i < n; i++)
        leaked += malloc_usable_size(k[i]);
    free(k);
    printf("leaked=%zu\n", leaked);
    /* Everything this (single-threaded) program still holds, in usable bytes:
     * the leak plus libc's own (stdout's buffer). */
    uint64_t live = ctl_u64("thread.allocated") - ctl_u64("thread.deallocated");
    printf("live=%llu\n", (unsigned long long)live);
    fflush(stdout);
    return 0;
}

/* Allocate and free size-byte objects until total bytes were requested;
 * print the thread's exact allocated byte count (usable sizes). */
static int mode_churn(size_t total, size_t size)
{
    for (size_t done = 0; done < total; done += size) {
        void *p = malloc(size);
        BARRIER(p);
        free(p);
    }
    printf("pid=%d\nallocated=%llu\n", (int)getpid(), (unsigned long long)ctl_u64("thread.allocated"));
    return 0;
}

/* In the main thread, n allocations of size bytes, each freed at once:
 * which of them were sampled (prof.nsamples moved), as a hash of their
 * indices. prof_seed makes it the same in every run. */
static int mode_seeded(size_t n, size_t size)
{
    uint64_t sig = 0xcbf29ce484222325ull, samples = 0, seen = ctl_u64("prof.nsamples");
    for (size_t i = 0; i < n; i++) {
        void *p = malloc(size);
        if (p == NULL)
            die("malloc");
        BARRIER(p);
        free(p);
        uint64_t now = ctl_u64("prof.nsamples");
        if (now != seen) {
            sig = (sig ^ i) * 0x100000001b3ull;
            samples += now - seen;
            seen = now;
        }
    }
    printf("samples=%llu\nsignature=%llx\n", (unsigned long long)samples, (unsigned long long)sig);
    return 0;
}

static int count_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        die("opendir");
    int n = 0;
    struct dirent *de;
    size_t sl = strlen(suffix);
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l >= sl && strcmp(de->d_name + l - sl, suffix) == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* Grow to nmib MiB of live 1 MiB objects, then churn the same pattern with
 * no growth. "ctl" turns prof.gdump on with mallctl first. */
static int mode_grow(const char *dir, size_t nmib, bool ctl)
{
    if (ctl)
        ctl_set_bool("prof.gdump", true);
    printf("gdump=%d\n", ctl_bool("prof.gdump"));
    void **k = keep_array(nmib);
    for (size_t i = 0; i < nmib; i++) {
        k[i] = malloc((size_t)1 << 20);
        if (k[i] == NULL)
            die("malloc");
        memset(k[i], 1, 64);
    }
    printf("u_after_growth=%d\n", count_files(dir, ".u.heap"));
    for (int round = 0; round < 20; round++) {
        for (size_t i = 0; i < nmib; i++)
            free(k[i]);
        for (size_t i = 0; i < nmib; i++)
            if ((k[i] = malloc((size_t)1 << 20)) == NULL)
                die("malloc");
    }
    printf("u_after_churn=%d\n", count_files(dir, ".u.heap"));
    printf("pid=%d\n", (int)getpid());
    return 0;
}

/* Samples through site_fp_driver -> site_fp, dumped to path. */
static int mode_fp(size_t n, size_t size, const char *path)
{
    printf("opt_prof_bt=%s\n", ctl_str("opt.prof_bt"));
    void **k = keep_array(n);
    site_fp_driver(k, n, size);
    dump_to(path);
    print_sites();
    return 0;
}

int main(int argc, char **argv)
{
    if (mallctl == NULL)
        die("mallctl not found: run with LD_PRELOAD=<build>/libmyalloc.so");
    if (argc < 2)
        die("usage");
    const char *m = argv[1];
#define ARG(i) (argc > (i) ? argv[i] : (die("missing argument"), ""))
#define NUM(i) ((size_t)strtoull(ARG(i), NULL, 0))
    int rc = 2;
    if (strcmp(m, "inactive") == 0)
        rc = mode_inactive(NUM(2), NUM(3), ARG(4));
    else if (strcmp(m, "thread_init") == 0)
        rc = mode_thread_init(NUM(2), NUM(3));
    else if (strcmp(m, "dumps") == 0)
        rc = mode_dumps(NUM(2), NUM(3));
    else if (strcmp(m, "final") == 0)
        rc = mode_final(NUM(2), NUM(3), argc > 4 && strcmp(argv[4], "activate") == 0);
    else if (strcmp(m, "leak") == 0)
        rc = mode_leak(NUM(2), NUM(3));
    else if (strcmp(m, "seeded") == 0)
        rc = mode_seeded(NUM(2), NUM(3));
    else if (strcmp(m, "churn") == 0)
        rc = mode_churn(NUM(2), NUM(3));
    else if (strcmp(m, "grow") == 0)
        rc = mode_grow(ARG(2), NUM(3), argc > 4 && strcmp(argv[4], "ctl") == 0);
    else if (strcmp(m, "fp") == 0)
        rc = mode_fp(NUM(2), NUM(3), ARG(4));
    else
        die("unknown mode");
    fflush(stdout);
    return rc;
}
