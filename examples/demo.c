/*
 * The `make run` demo: a small "service" whose memory goes to five known
 * places, profiled by myalloc. It dumps a heap profile, reads it back, and
 * prints for each site the profiler's unbiased estimate (with its standard
 * error) next to the truth it kept itself.
 *
 *   make run       builds the library, then this program (linked with
 *                  -lmyalloc), and runs it with MYALLOC_CONF=prof:true
 *
 * Only the public API is used: malloc & co., and mallctl("prof.dump").
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "myalloc.h"

enum { SESSIONS, DOCUMENTS, INDEX, TOKENS, LOG, NSITES };

static struct site {
    const char *name;      /* the function that allocates */
    const char *what;
    double live_bytes, live_objs, total_bytes;  /* truth, in usable bytes */
    double est_bytes, est_objs, var_bytes;      /* from the profile */
} sites[NSITES] = {
    {"make_sessions", "300k session records of 48 B"},
    {"load_documents", "20k documents of 1-8 KiB"},
    {"build_index", "16 tables of 4 MiB + their list"},
    {"parse_tokens", "1M tokens, 24 B, all freed"},
    {"grow_log", "a log grown by realloc to 24 MiB"},
};

static void note(int s, void *p)
{
    sites[s].live_bytes += (double)malloc_usable_size(p);
    sites[s].live_objs += 1;
    sites[s].total_bytes += (double)malloc_usable_size(p);
}

/* The allocation sites: global and not inlined, so the profile names them
 * (the demo is linked with -rdynamic). */
__attribute__((noinline)) void *make_sessions(size_t n)
{
    void **s = malloc(n * sizeof(void *));
    note(SESSIONS, s); /* the array is allocated here too */
    for (size_t i = 0; i < n; i++)
        note(SESSIONS, s[i] = malloc(48));
    return s;
}

__attribute__((noinline)) void *load_documents(size_t n)
{
    void **d = malloc(n * sizeof(void *));
    note(DOCUMENTS, d);
    uint64_t x = 88172645463325252ULL;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        d[i] = malloc(1024 + x % 7168);
        memset(d[i], 'd', 64);
        note(DOCUMENTS, d[i]);
    }
    return d;
}

__attribute__((noinline)) void *build_index(size_t n)
{
    void **t = malloc(n * sizeof(void *));
    note(INDEX, t);
    for (size_t i = 0; i < n; i++)
        note(INDEX, t[i] = calloc(1, (size_t)4 << 20));
    return t;
}

__attribute__((noinline)) void parse_tokens(size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *tok = malloc(24);
        sites[TOKENS].total_bytes += (double)malloc_usable_size(tok);
        snprintf(tok, 24, "token-%zu", i);
        free(tok);
    }
}

__attribute__((noinline)) char *grow_log(size_t final)
{
    char *log = NULL;
    size_t cap = 0;
    while (cap < final) {
        cap = cap ? cap * 2 : 4096;
        if (log != NULL)
            sites[LOG].live_bytes -= (double)malloc_usable_size(log), sites[LOG].live_objs -= 1;
        log = realloc(log, cap);
        note(LOG, log);
    }
    return log;
}

static struct site *site_of(void *frame)
{
    Dl_info info;
    if (dladdr((char *)frame - 1, &info) == 0 || info.dli_sname == NULL)
        return NULL;
    for (int s = 0; s < NSITES; s++)
        if (strcmp(info.dli_sname, sites[s].name) == 0)
            return &sites[s];
    return NULL;
}

/* Read the dump as jeprof and pprof do: each record is one size class, so
 * scale = 1 / (1 - exp(-size / R)) makes it unbiased; its standard error is
 * size * sqrt(n (1 - p)) / p with p = 1 - exp(-size / R). */
static int read_profile(const char *path, double *R_out)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char line[1 << 15];
    double R = 0;
    if (fgets(line, sizeof(line), f) == NULL || strstr(line, "heap_v2/") == NULL) {
        fclose(f);
        return -1;
    }
    R = atof(strstr(line, "heap_v2/") + 8);
    while (fgets(line, sizeof(line), f) != NULL && line[0] != '\n') {
        unsigned long long n, b;
        int off = 0;
        if (sscanf(line, "%llu: %llu [%*u: %*u] @%n", &n, &b, &off) < 2 || n == 0)
            continue;
        struct site *s = site_of((void *)strtoull(line + off, NULL, 16));
        if (s == NULL)
            continue;
        double size = (double)b / (double)n, p = -expm1(-size / R);
        s->est_bytes += (double)b / p;
        s->est_objs += (double)n / p;
        s->var_bytes += size * size * (double)n * (1 - p) / (p * p);
    }
    fclose(f);
    *R_out = R;
    return 0;
}

int main(int argc, char **argv)
{
    const char *dump = argc > 1 ? argv[1] : "demo.heap";
    bool active = false;
    size_t len = sizeof(active);
    if (mallctl("prof.active", &active, &len, NULL, 0) != 0) {
        fprintf(stderr, "demo: mallctl(\"prof.active\") failed: not running on myalloc?\n");
        return 1;
    }
    if (!active) {
        /* Not started with prof:true: turn sampling on now (myalloc can). */
        active = true;
        mallctl("prof.active", NULL, NULL, &active, sizeof(active));
    }

    void *sessions = make_sessions(300000);
    void *docs = load_documents(20000);
    void *index = build_index(16);
    parse_tokens(1000000);
    char *log = grow_log((size_t)24 << 20);

    /* The table below reads the dump back: text format for this one, even
     * when prof_format asks another for the program's other dumps. */
    const char *format = NULL, *text = "text";
    len = sizeof(format);
    mallctl("prof.format", &format, &len, &text, sizeof(text));
    int dumped = mallctl("prof.dump", NULL, NULL, &dump, sizeof(dump));
    mallctl("prof.format", NULL, NULL, &format, sizeof(format));
    if (dumped != 0) {
        fprintf(stderr, "demo: prof.dump to %s failed\n", dump);
        return 1;
    }
    double R;
    if (read_profile(dump, &R) != 0) {
        fprintf(stderr, "demo: could not read %s back\n", dump);
        return 1;
    }
    uint64_t nsamples = 0;
    len = sizeof(nsamples);
    mallctl("prof.nsamples", &nsamples, &len, NULL, 0);

    printf("Where the demo's memory went: live heap by allocation site\n");
    printf("(myalloc heap profile, one sample per %.0f bytes on average, %llu samples)\n\n", R,
           (unsigned long long)nsamples);
    printf("%-16s %-34s %10s %19s %12s %12s\n", "site", "what", "truth MiB", "estimate MiB", "truth objs",
           "est. objs");
    double tt = 0, te = 0, tv = 0;
    for (int s = 0; s < NSITES; s++) {
        struct site *x = &sites[s];
        char est[32];
        snprintf(est, sizeof(est), "%.2f +- %.2f", x->est_bytes / 1048576, sqrt(x->var_bytes) / 1048576);
        printf("%-16s %-34s %10.2f %19s %12.0f %12.0f\n", x->name, x->what, x->live_bytes / 1048576, est,
               x->live_objs, x->est_objs);
        tt += x->live_bytes, te += x->est_bytes, tv += x->var_bytes;
    }
    char est[32];
    snprintf(est, sizeof(est), "%.2f +- %.2f", te / 1048576, sqrt(tv) / 1048576);
    printf("%-16s %-34s %10.2f %19s\n", "all sites", "", tt / 1048576, est);
    printf("\n(+- is one standard error; parse_tokens' memory was all freed, so it is absent.)\n");
    printf("Profile written to %s. Read it with:\n", dump);
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = '\0';
    char *abs_dump = realpath(dump, NULL);
    printf("  jeprof --text %s %s\n", exe, abs_dump ? abs_dump : dump);
    printf("  go tool pprof -top %s %s\n", exe, abs_dump ? abs_dump : dump);
    free(abs_dump);
    free(sessions);
    free(docs);
    free(index);
    free(log);
    return 0;
}
