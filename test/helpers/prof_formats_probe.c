/*
 * prof_formats_probe: profile-format scenarios that need a process of
 * their own (a binary that can be deleted, options read at startup, dumps
 * at exit or inside allocations). Run by test_prof_formats.c as
 *
 *     MYALLOC_CONF=... LD_PRELOAD=<build>/libmyalloc.so prof_formats_probe MODE ARGS...
 *
 * Modes:
 *   sites LIBDIR OUTDIR   allocate from static functions of this program and
 *                         from libprof_nog.so / libprof_stripped.so (dlopen'd
 *                         from LIBDIR), then dump OUTDIR/live.heap, .pb.gz,
 *                         .folded and .svg (switching prof.format)
 *   churn BYTES           allocate BYTES in 4 KiB objects, keeping every
 *                         16th (interval dumps happen inside malloc)
 *   peak                  a peak, freed, then prof.dump_peak without a name
 *
 * It prints key=value lines; exit status 0, or 2 when something it relies
 * on failed (error=... says what). mallctl comes from the preloaded library.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "myalloc.h"

#pragma weak mallctl

#define BARRIER(p) __asm__ volatile("" : : "r"(p) : "memory")

static void die(const char *what)
{
    printf("error=%s\n", what);
    fflush(stdout);
    exit(2);
}

static void set_format(const char *f)
{
    if (mallctl("prof.format", NULL, NULL, &f, sizeof(f)) != 0)
        die("prof.format");
}

static void dump(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    const char *p = path;
    if (mallctl("prof.dump", NULL, NULL, &p, sizeof(p)) != 0)
        die("prof.dump");
}

/* Static: named only from the program's .symtab. */
static __attribute__((noinline)) void probe_static_small(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(200);
        memset(keep[i], 7, 200);
    }
    BARRIER(keep);
}

static __attribute__((noinline)) void probe_static_big(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = malloc(64 << 10); /* never touched: not resident */
    BARRIER(keep);
}

typedef void fill_fn(void **, size_t, size_t, int);

static fill_fn *load_fill(const char *dir, const char *lib, const char *sym)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, lib);
    void *h = dlopen(path, RTLD_NOW);
    if (h == NULL)
        die(lib);
    fill_fn *f = (fill_fn *)dlsym(h, sym);
    if (f == NULL)
        die(sym);
    return f;
}

static int mode_sites(const char *libdir, const char *outdir)
{
    static void *keep[60000];
    fill_fn *nog = load_fill(libdir, "libprof_nog.so", "nog_fill");
    fill_fn *stripped = load_fill(libdir, "libprof_stripped.so", "stripped_fill");
    probe_static_small(keep, 20000);
    probe_static_big(keep + 20000, 200);
    nog(keep + 30000, 10000, 1000, 1);
    stripped(keep + 40000, 10000, 1000, 1);
    set_format("text");
    dump(outdir, "live.heap");
    set_format("pprof");
    dump(outdir, "live.pb.gz");
    set_format("folded");
    dump(outdir, "live.folded");
    set_format("svg");
    dump(outdir, "live.svg");
    printf("ok=1\n");
    return 0;
}

static int mode_churn(size_t bytes)
{
    static void *keep[1 << 16];
    size_t n = bytes / 4096, k = 0;
    for (size_t i = 0; i < n; i++) {
        void *p = malloc(4096);
        if (p == NULL)
            die("malloc");
        memset(p, 1, 64);
        if (i % 16 == 0 && k < sizeof(keep) / sizeof(keep[0]))
            keep[k++] = p;
        else
            free(p);
    }
    printf("kept=%zu\n", k);
    return 0;
}

static int mode_peak(void)
{
    static void *keep[4096];
    for (int i = 0; i < 4096; i++)
        keep[i] = malloc(8192);
    for (int i = 0; i < 4096; i++)
        free(keep[i]);
    if (mallctl("prof.dump_peak", NULL, NULL, NULL, 0) != 0)
        die("prof.dump_peak");
    printf("ok=1\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (mallctl == NULL)
        die("not running on myalloc (LD_PRELOAD)");
    const char *fmt = NULL;
    size_t sz = sizeof(fmt);
    if (mallctl("prof.format", &fmt, &sz, NULL, 0) != 0)
        die("prof.format read");
    printf("format=%s\n", fmt);
    if (argc >= 4 && strcmp(argv[1], "sites") == 0)
        return mode_sites(argv[2], argv[3]);
    if (argc >= 3 && strcmp(argv[1], "churn") == 0)
        return mode_churn(strtoull(argv[2], NULL, 0));
    if (argc >= 2 && strcmp(argv[1], "peak") == 0)
        return mode_peak();
    die("usage");
    return 2;
}
