/*
 * The sampling heap profiler: activation, dumps and their format, the
 * automatic dumps (final, leak, interval, gdump), sampled objects (placement,
 * page map, usable size, realloc, alignment, memory cost, VMAs), backtraces
 * (first frame is the program's call site, depth cut, frame pointers,
 * re-entrancy), prof.reset and fork.
 *
 * In-process tests drive the profiler through mallctl (the test binary runs
 * on the static library; Criterion runs each test in a process of its own,
 * started without MYALLOC_CONF, so prof:false). Scenarios that need options
 * at startup or look at what a process leaves at exit run
 * test/helpers/prof_probe.c under LD_PRELOAD in a mkdtemp directory.
 *
 * Statistical checks use fixed seeds (prof_seed) and 6-sigma bounds. Nothing
 * here depends on timing; every loop is bounded by a count.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <sys/stat.h>

#include "arena/arena.h"
#include "arena/extent.h"
#include "arena/pages.h"
#include "arena/rtree.h"
#include "core/core.h"
#include "myalloc.h"
#include "prof/prof.h"
#include "prof/prof_table.h"
#include "test_util.h"

#define SITE __attribute__((noinline, used))
/* Sites for the frame-pointer unwinder keep their frame pointer even at -O1
 * (GCC only: the frame-pointer tests skip under clang). */
#ifdef __clang__
#define FPSITE __attribute__((noinline, used))
#else
#define FPSITE __attribute__((noinline, used, optimize("no-omit-frame-pointer")))
#endif
/* Keeps p alive and stops the compiler from turning a call into a tail call
 * (a tail call would take the site's frame off the stack). */
#define BARRIER(p) __asm__ volatile("" : : "r"(p) : "memory")

/* ---------------------------------------------------------------------
 * mallctl shorthands.
 */

static uint64_t ctl_u64(const char *name)
{
    uint64_t v = 0;
    size_t sz = sizeof(v);
    cr_assert_eq(mallctl(name, &v, &sz, NULL, 0), 0, "mallctl(%s)", name);
    return v;
}

static size_t ctl_size(const char *name)
{
    size_t v = 0, sz = sizeof(v);
    cr_assert_eq(mallctl(name, &v, &sz, NULL, 0), 0, "mallctl(%s)", name);
    return v;
}

static bool ctl_bool(const char *name)
{
    bool v = false;
    size_t sz = sizeof(v);
    cr_assert_eq(mallctl(name, &v, &sz, NULL, 0), 0, "mallctl(%s)", name);
    return v;
}

static void ctl_set_bool(const char *name, bool v)
{
    cr_assert_eq(mallctl(name, NULL, NULL, &v, sizeof(v)), 0, "mallctl(%s, %d)", name, v);
}

static void prof_reset_lg(unsigned lg)
{
    size_t z = lg;
    cr_assert_eq(mallctl("prof.reset", NULL, NULL, &z, sizeof(z)), 0);
}

static int dump_to(const char *path)
{
    return mallctl("prof.dump", NULL, NULL, &path, sizeof(path));
}

/* Sampling at R = 2^lg with a fixed seed (applies to threads created after
 * the call), cumulative counts on or off. */
static void prof_start(unsigned lg, uint64_t seed, bool accum)
{
    opt_prof_seed = seed;
    opt_prof_accum = accum;
    prof_reset_lg(lg);
    ctl_set_bool("prof.active", true);
}

/* Run fn in a fresh thread: its sampler is seeded from prof_seed and has no
 * stale wait from before the last change of the sampling state. */
static void in_thread(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, fn, arg), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
}

static bool is_sampled(const void *p)
{
    return (rtree_lookup((uintptr_t)p) & RTREE_SAMPLED) != 0;
}

/* The profiler's record of a sampled object (NULL when not recorded). */
static prof_rec_t *rec_of(const void *p)
{
    rtree_elm_t elm = rtree_lookup((uintptr_t)p);
    if (!(elm & RTREE_SAMPLED))
        return NULL;
    extent_t *e = rtree_elm_extent(elm);
    return e != NULL ? e->prof : NULL;
}

static const char *sym_of(void *ret_addr)
{
    Dl_info info;
    if (dladdr((char *)ret_addr - 1, &info) == 0 || info.dli_sname == NULL)
        return "?";
    return info.dli_sname;
}

/* p(sampled) for usable size z at R = 2^lg. */
static double p_sample(double z, unsigned lg)
{
    return -expm1(-z / (double)((uint64_t)1 << lg));
}

/* Count k of n Bernoulli(p) trials within 6 sigma of n p. */
static void check_binomial(const char *what, uint64_t k, double n, double p)
{
    double mean = n * p, sd = sqrt(n * p * (1 - p));
    cr_assert_leq(fabs((double)k - mean), 6 * sd + 0.5, "%s: %llu sampled, expected %.1f +- %.1f", what,
                  (unsigned long long)k, mean, sd);
}

/* ---------------------------------------------------------------------
 * Files in the temporary directory (tu_tmp_make, test_util.h).
 */

/* Names in tu_tmpdir() ending with suffix, sorted; returns how many. */
static int tmp_list(const char *suffix, char names[][256], int max)
{
    DIR *d = opendir(tu_tmpdir());
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *de;
    size_t sl = strlen(suffix);
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l >= sl && strcmp(de->d_name + l - sl, suffix) == 0) {
            if (n < max)
                snprintf(names[n], 256, "%s", de->d_name);
            n++;
        }
    }
    closedir(d);
    if (n <= max)
        qsort(names, (size_t)n, 256, (int (*)(const void *, const void *))strcmp);
    return n;
}

/* ---------------------------------------------------------------------
 * The probe (test/helpers/prof_probe.c) under LD_PRELOAD in tu_tmpdir().
 */

/* With stdout_file, the probe's stdout goes there and out gets its stderr
 * only. */
static int run_probe_split(const char *conf, const char *args, const char *stdout_file, char *out, size_t outlen)
{
    char build[PATH_MAX], lib[PATH_MAX + 32], probe[PATH_MAX + 32], cmd[8192];
    cr_assert_not_null(realpath(tu_build_dir(), build), "build dir %s", tu_build_dir());
    snprintf(lib, sizeof(lib), "%s/libmyalloc.so", build);
    snprintf(probe, sizeof(probe), "%s/helpers/prof_probe", build);
    cr_assert_eq(access(lib, R_OK), 0, "no %s", lib);
    cr_assert_eq(access(probe, X_OK), 0, "no %s", probe);
    snprintf(cmd, sizeof(cmd), "cd %s && MYALLOC_CONF='%s' LD_PRELOAD=%s %s %s%s%s", tu_tmpdir(), conf, lib, probe, args,
             stdout_file != NULL ? " >" : "", stdout_file != NULL ? stdout_file : "");
    return tu_run(cmd, out, outlen);
}

static int run_probe(const char *conf, const char *args, char *out, size_t outlen)
{
    return run_probe_split(conf, args, NULL, out, outlen);
}

/* Value of "key=" at the start of a line of out. */
static const char *kv_find(const char *out, const char *key)
{
    size_t kl = strlen(key);
    for (const char *l = out; l != NULL && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, key, kl) == 0 && l[kl] == '=')
            return l + kl + 1;
    cr_assert_fail("probe printed no %s=; output:\n%s", key, out);
    return NULL;
}

static unsigned long long kv_num(const char *out, const char *key)
{
    return strtoull(kv_find(out, key), NULL, 0);
}

static uintptr_t kv_ptr(const char *out, const char *key)
{
    return (uintptr_t)strtoull(kv_find(out, key), NULL, 16);
}

/* A site of the probe: the first frame of its records is the return address
 * of its allocation call, after the site's entry and before the next site
 * (the probe prints every site's entry: site_a=0x..., ...). */
#define SITE_SPAN 512

static bool in_site(const char *out, uintptr_t f, uintptr_t site)
{
    if (!(f > site && f < site + SITE_SPAN))
        return false;
    for (const char *l = out; l != NULL && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const char *eq = strchr(l, '=');
        if (strncmp(l, "site_", 5) == 0 && eq != NULL) {
            uintptr_t other = (uintptr_t)strtoull(eq + 1, NULL, 16);
            if (other > site && other < f)
                return false;
        }
    }
    return true;
}

/* ---------------------------------------------------------------------
 * Profiles: read and check the grammar of profile-formats.md section 1.
 */

typedef struct prec {
    unsigned long long n, b, an, ab;
    unsigned depth;
    void **frames;
} prec_t;

typedef struct profile {
    unsigned long long n, b, an, ab, R;
    prec_t *recs;
    size_t nrecs;
    char *text;
    const char *maps; /* what follows "MAPPED_LIBRARIES:\n" */
} profile_t;

static bool is_class_size(unsigned long long s)
{
    return s > 0 && sc_s2u((size_t)s) == s;
}

/* Loads path and asserts: the header line "heap profile: n: b [an: ab] @
 * heap_v2/R" (padding allowed after ':' and '['), R a power of two; each
 * record exactly "n: b [an: ab] @ 0x.. 0x.." with lowercase hex; each
 * record holds one size class (b = n * class size, same for the cumulative
 * pair); the header is the sum of the records; then an empty line and
 * "MAPPED_LIBRARIES:". */
static void profile_load(const char *path, profile_t *p)
{
    memset(p, 0, sizeof(*p));
    p->text = tu_read_file(path, NULL);
    regex_t hre, rre;
    cr_assert_eq(regcomp(&hre, "^heap profile: +[0-9]+: +[0-9]+ \\[ *[0-9]+: +[0-9]+\\] @ heap_v2/[0-9]+$",
                         REG_EXTENDED | REG_NOSUB), 0);
    cr_assert_eq(regcomp(&rre, "^[0-9]+: [0-9]+ \\[[0-9]+: [0-9]+\\] @( 0x[0-9a-f]+)+$", REG_EXTENDED | REG_NOSUB),
                 0);
    char *save = NULL;
    char *line = strtok_r(p->text, "\n", &save);
    cr_assert_not_null(line, "%s is empty", path);
    /* strtok_r skips empty lines: find the blank line by position instead. */
    cr_assert_eq(regexec(&hre, line, 0, NULL, 0), 0, "%s: bad header \"%s\"", path, line);
    cr_assert_eq(sscanf(line, "heap profile: %llu: %llu [ %llu: %llu] @ heap_v2/%llu", &p->n, &p->b, &p->an, &p->ab,
                        &p->R),
                 5);
    cr_assert(p->R != 0 && (p->R & (p->R - 1)) == 0, "R = %llu is not a power of two", p->R);
    size_t cap = 64;
    p->recs = calloc(cap, sizeof(prec_t));
    unsigned long long sn = 0, sb = 0, san = 0, sab = 0;
    for (;;) {
        char *next = save;
        cr_assert(next != NULL && *next != '\0', "%s: no MAPPED_LIBRARIES section", path);
        if (*next == '\n') {
            /* The empty line, then the maps. */
            cr_assert_eq(strncmp(next, "\nMAPPED_LIBRARIES:\n", 19), 0, "%s: after the records: \"%.40s\"", path,
                         next);
            p->maps = next + 19;
            break;
        }
        line = strtok_r(NULL, "\n", &save);
        /* A record's residency (comment lines, which every reader skips). */
        unsigned long long res, swp;
        char tail;
        if (line[0] == '#' && p->nrecs > 0 &&
            sscanf(line, "# myalloc resident=%llu swapped=%llu%c", &res, &swp, &tail) == 2)
            continue;
        cr_assert_eq(regexec(&rre, line, 0, NULL, 0), 0, "%s: bad record \"%s\"", path, line);
        if (p->nrecs == cap)
            p->recs = realloc(p->recs, (cap *= 2) * sizeof(prec_t));
        prec_t *r = &p->recs[p->nrecs++];
        memset(r, 0, sizeof(*r));
        int off = 0;
        cr_assert_eq(sscanf(line, "%llu: %llu [%llu: %llu] @%n", &r->n, &r->b, &r->an, &r->ab, &off), 4);
        r->frames = calloc(PROF_BT_MAX_LIMIT + 1, sizeof(void *));
        for (char *s = line + off; *s == ' ';) {
            char *end;
            void *f = (void *)(uintptr_t)strtoull(s + 1, &end, 16);
            cr_assert_leq(r->depth, PROF_BT_MAX_LIMIT, "record deeper than the limit");
            r->frames[r->depth++] = f;
            s = end;
        }
        cr_assert(r->n > 0 || r->an > 0, "%s: empty record \"%s\"", path, line);
        if (r->n > 0)
            cr_assert(r->b % r->n == 0 && is_class_size(r->b / r->n), "%s: record mixes sizes: \"%s\"", path, line);
        else
            cr_assert_eq(r->b, 0);
        if (r->an > 0)
            cr_assert(r->ab % r->an == 0 && is_class_size(r->ab / r->an), "%s: record mixes sizes: \"%s\"", path,
                      line);
        else
            cr_assert_eq(r->ab, 0);
        if (r->n > 0 && r->an > 0)
            cr_assert_eq(r->b / r->n, r->ab / r->an, "%s: live and cumulative sizes differ: \"%s\"", path, line);
        sn += r->n, sb += r->b, san += r->an, sab += r->ab;
    }
    cr_assert(sn == p->n && sb == p->b && san == p->an && sab == p->ab,
              "%s: header %llu: %llu [%llu: %llu] is not the sum of the records %llu: %llu [%llu: %llu]", path, p->n,
              p->b, p->an, p->ab, sn, sb, san, sab);
    regfree(&hre);
    regfree(&rre);
}

static void profile_free(profile_t *p)
{
    for (size_t i = 0; i < p->nrecs; i++)
        free(p->recs[i].frames);
    free(p->recs);
    free(p->text);
    memset(p, 0, sizeof(*p));
}

typedef struct site_sum {
    unsigned long long n, b, an, ab;
    unsigned nrecs;
} site_sum_t;

/* Sum of the records whose first frame is in the function named name (in
 * this process). */
static site_sum_t site_sum(const profile_t *p, const char *name)
{
    site_sum_t s = {0};
    for (size_t i = 0; i < p->nrecs; i++) {
        const prec_t *r = &p->recs[i];
        if (r->depth > 0 && strcmp(sym_of(r->frames[0]), name) == 0) {
            s.n += r->n, s.b += r->b, s.an += r->an, s.ab += r->ab;
            s.nrecs++;
        }
    }
    return s;
}

/* The same for a site of the probe, by the name it printed. */
static site_sum_t site_sum_at(const profile_t *p, const char *out, const char *key)
{
    site_sum_t s = {0};
    uintptr_t site = kv_ptr(out, key);
    for (size_t i = 0; i < p->nrecs; i++) {
        const prec_t *r = &p->recs[i];
        uintptr_t f = r->depth > 0 ? (uintptr_t)r->frames[0] : 0;
        if (in_site(out, f, site)) {
            s.n += r->n, s.b += r->b, s.an += r->an, s.ab += r->ab;
            s.nrecs++;
        }
    }
    return s;
}

/* /proc/self/maps into a static buffer (no allocation: the maps stay as
 * they were). */
static const char *self_maps(void)
{
    static char buf[1 << 20];
    int fd = open("/proc/self/maps", O_RDONLY);
    cr_assert_geq(fd, 0);
    size_t n = 0;
    ssize_t r;
    while ((r = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0)
        n += (size_t)r;
    close(fd);
    buf[n] = '\0';
    return buf;
}

/* Contents that do not depend on the address (survive a move). */
static void fill_pat(void *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        ((unsigned char *)p)[i] = (unsigned char)(i * 131 + (i >> 8) + seed * 7);
}

static bool check_pat(const void *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (((const unsigned char *)p)[i] != (unsigned char)(i * 131 + (i >> 8) + seed * 7))
            return false;
    return true;
}

static unsigned count_lines(const char *s)
{
    unsigned n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* =====================================================================
 * 1. Always available: activation at run time, per thread, initial state.
 */

typedef struct count_job {
    void (*site)(void **, size_t, size_t);
    void **keep;
    size_t n, size;
    uint64_t sampled;        /* objects the page map says are sampled */
    uint64_t nsamples_delta; /* prof.nsamples over the job */
    bool thread_active;      /* thread.prof.active when the job started */
    bool set_inactive;       /* set thread.prof.active false first */
} count_job_t;

SITE void act_site(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        BARRIER(keep[i]);
    }
}

SITE void act_site_2(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        BARRIER(keep[i]);
    }
}

static void *count_job_run(void *arg)
{
    count_job_t *j = arg;
    if (j->set_inactive)
        ctl_set_bool("thread.prof.active", false);
    j->thread_active = ctl_bool("thread.prof.active");
    if (j->keep == NULL)
        j->keep = calloc(j->n, sizeof(void *));
    uint64_t before = ctl_u64("prof.nsamples");
    j->site(j->keep, j->n, j->size);
    j->nsamples_delta = ctl_u64("prof.nsamples") - before;
    j->sampled = 0;
    for (size_t i = 0; i < j->n; i++)
        j->sampled += is_sampled(j->keep[i]);
    return NULL;
}

static void count_job_free(count_job_t *j)
{
    for (size_t i = 0; i < j->n; i++)
        free(j->keep[i]);
    free(j->keep);
    j->keep = NULL;
}

Test(prof, prof_active_starts_sampling_in_a_process_started_without_prof, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    cr_assert_not(ctl_bool("opt.prof"), "the test process must start without prof:true");
    cr_assert_not(ctl_bool("prof.active"));
    uint64_t nsamples0 = ctl_u64("prof.nsamples");
    cr_assert_eq(nsamples0, 0);

    /* Off: nothing is sampled. */
    opt_prof_seed = 11;
    prof_reset_lg(10);
    count_job_t off = {.site = act_site, .n = 20000, .size = 200};
    in_thread(count_job_run, &off);
    cr_assert_eq(off.sampled, 0, "%llu objects sampled while prof.active is false",
                 (unsigned long long)off.sampled);
    cr_assert_eq(off.nsamples_delta, 0);

    /* The draws' tables are filled when sampling is first switched on, not
     * at startup (a program that never samples does not pay for them). */
    cr_assert_eq(ma_exp_zig.k[0], 0, "the sampler's tables were filled before sampling was switched on");

    /* On. */
    ctl_set_bool("prof.active", true);
    cr_assert(ctl_bool("prof.active"));
    cr_assert_neq(ma_exp_zig.k[0], 0, "prof.active did not fill the sampler's tables");
    count_job_t on = {.site = act_site_2, .n = 20000, .size = 200};
    in_thread(count_job_run, &on);
    check_binomial("after prof.active", on.sampled, (double)on.n, p_sample((double)sc_s2u(200), 10));
    cr_assert_eq(on.nsamples_delta, on.sampled, "prof.nsamples grew by %llu, %llu objects sampled",
                 (unsigned long long)on.nsamples_delta, (unsigned long long)on.sampled);

    char path[256];
    tu_tmp_path(path, sizeof(path), "on.heap");
    cr_assert_eq(dump_to(path), 0);
    profile_t p;
    profile_load(path, &p);
    cr_assert_eq(p.R, 1024);
    site_sum_t s_on = site_sum(&p, "act_site_2"), s_off = site_sum(&p, "act_site");
    cr_assert_eq(s_on.n, on.sampled, "the dump holds %llu live samples of act_site_2, the page map %llu", s_on.n,
                 (unsigned long long)on.sampled);
    cr_assert_eq(s_on.b, on.sampled * sc_s2u(200));
    cr_assert_eq(s_off.nrecs, 0, "objects allocated while inactive are in the profile");
    profile_free(&p);
    count_job_free(&off);
    count_job_free(&on);
}

Test(prof, prof_true_prof_active_false_samples_nothing_until_prof_active, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    char path[256], out[1 << 14];
    tu_tmp_path(path, sizeof(path), "inactive.heap");
    char args[512];
    snprintf(args, sizeof(args), "inactive 20000 256 %s", path);
    int rc = run_probe("prof:true,prof_active:false,lg_prof_sample:10,prof_seed:5", args, out, sizeof(out));
    cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
    cr_assert_eq(kv_num(out, "opt_prof"), 1);
    cr_assert_eq(kv_num(out, "opt_prof_active"), 0);
    cr_assert_eq(kv_num(out, "active0"), 0, "prof.active must read false with prof_active:false");
    cr_assert_eq(kv_num(out, "inactive_main_samples"), 0);
    cr_assert_eq(kv_num(out, "inactive_thread_samples"), 0);
    cr_assert_eq(kv_num(out, "active1"), 1);
    unsigned long long k = kv_num(out, "active_samples");
    check_binomial("after prof.active", k, 20000, p_sample((double)sc_s2u(256), 10));

    profile_t p;
    profile_load(path, &p);
    cr_assert_eq(p.R, 1024);
    cr_assert_eq(site_sum_at(&p, out, "site_a").nrecs, 0, "samples from before prof.active");
    site_sum_t b = site_sum_at(&p, out, "site_b");
    cr_assert_eq(b.n, k, "dump: %llu live samples at site_b, prof.nsamples said %llu", b.n, k);
    profile_free(&p);
}

Test(prof, thread_prof_active_false_stops_only_that_thread)
{
    prof_start(8, 21, false);
    count_job_t quiet = {.site = act_site, .n = 20000, .size = 100, .set_inactive = true};
    count_job_t loud = {.site = act_site_2, .n = 20000, .size = 100};
    /* One after the other, so prof.nsamples deltas are per thread. */
    in_thread(count_job_run, &quiet);
    in_thread(count_job_run, &loud);
    cr_assert_not(quiet.thread_active);
    cr_assert_eq(quiet.sampled, 0, "%llu sampled in a thread with thread.prof.active false",
                 (unsigned long long)quiet.sampled);
    cr_assert_eq(quiet.nsamples_delta, 0);
    cr_assert(loud.thread_active, "another thread's setting leaked into a new thread");
    check_binomial("other thread", loud.sampled, (double)loud.n, p_sample((double)sc_s2u(100), 8));
    cr_assert_eq(loud.nsamples_delta, loud.sampled);
    cr_assert(ctl_bool("thread.prof.active"), "the main thread's flag changed");
    cr_assert(ctl_bool("prof.active"));

    /* Concurrently: the quiet thread stays quiet while the other samples. */
    count_job_t q2 = {.site = act_site, .n = 20000, .size = 100, .set_inactive = true};
    count_job_t l2 = {.site = act_site_2, .n = 20000, .size = 100};
    pthread_t tq, tl;
    cr_assert_eq(pthread_create(&tq, NULL, count_job_run, &q2), 0);
    cr_assert_eq(pthread_create(&tl, NULL, count_job_run, &l2), 0);
    pthread_join(tq, NULL);
    pthread_join(tl, NULL);
    cr_assert_eq(q2.sampled, 0);
    check_binomial("concurrent thread", l2.sampled, (double)l2.n, p_sample((double)sc_s2u(100), 8));
    count_job_free(&quiet);
    count_job_free(&loud);
    count_job_free(&q2);
    count_job_free(&l2);
}

static void *reenable_job(void *arg)
{
    count_job_t *j = arg;
    ctl_set_bool("thread.prof.active", false);
    count_job_run(j);
    cr_assert_eq(j->sampled, 0);
    count_job_free(j);
    /* Back on in the same thread. */
    ctl_set_bool("thread.prof.active", true);
    count_job_run(j);
    return NULL;
}

Test(prof, thread_prof_active_can_be_turned_back_on)
{
    prof_start(8, 22, false);
    count_job_t j = {.site = act_site, .n = 20000, .size = 100};
    in_thread(reenable_job, &j);
    cr_assert(j.thread_active);
    check_binomial("re-enabled thread", j.sampled, (double)j.n, p_sample((double)sc_s2u(100), 8));
    count_job_free(&j);
}

Test(prof, thread_active_init_false_makes_new_threads_inactive)
{
    prof_start(8, 23, false);
    cr_assert(ctl_bool("prof.thread_active_init"));
    ctl_set_bool("prof.thread_active_init", false);
    cr_assert_not(ctl_bool("prof.thread_active_init"));
    count_job_t j = {.site = act_site, .n = 20000, .size = 100};
    in_thread(count_job_run, &j);
    cr_assert_not(j.thread_active, "a new thread must start with thread.prof.active false");
    cr_assert_eq(j.sampled, 0);
    cr_assert_eq(j.nsamples_delta, 0);
    cr_assert(ctl_bool("thread.prof.active"), "existing threads keep their setting");

    ctl_set_bool("prof.thread_active_init", true);
    count_job_t k = {.site = act_site_2, .n = 20000, .size = 100};
    in_thread(count_job_run, &k);
    cr_assert(k.thread_active);
    check_binomial("thread_active_init true again", k.sampled, (double)k.n, p_sample((double)sc_s2u(100), 8));
    count_job_free(&j);
    count_job_free(&k);
}

Test(prof, prof_thread_active_init_option, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    char out[1 << 14];
    int rc = run_probe("prof:true,prof_thread_active_init:false,lg_prof_sample:8,prof_seed:3", "thread_init 20000 100",
                       out, sizeof(out));
    cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
    cr_assert_eq(kv_num(out, "opt_tai"), 0);
    cr_assert_eq(kv_num(out, "ctl_tai"), 0);
    cr_assert_eq(kv_num(out, "thread_active"), 0);
    cr_assert_eq(kv_num(out, "thread_samples"), 0);
    /* The same without the option: the thread samples (the check can fail). */
    rc = run_probe("prof:true,lg_prof_sample:8,prof_seed:3", "thread_init 20000 100", out, sizeof(out));
    cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
    cr_assert_eq(kv_num(out, "thread_active"), 1);
    check_binomial("default thread_active_init", kv_num(out, "thread_samples"), 20000,
                   p_sample((double)sc_s2u(100), 8));
}

/* prof_seed makes runs reproducible, the main thread's too: its sampler is
 * initialised by the first allocation, which may come before the profiler's
 * own setup (it was seeded from the clock then). The same seed samples the
 * same allocations; another seed, others. */
Test(prof, prof_seed_makes_the_main_threads_samples_reproducible, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    char out[1 << 14];
    unsigned long long sig[3], n[3];
    const char *confs[3] = {"prof:true,lg_prof_sample:10,prof_seed:21", "prof:true,lg_prof_sample:10,prof_seed:21",
                            "prof:true,lg_prof_sample:10,prof_seed:22"};
    for (int i = 0; i < 3; i++) {
        int rc = run_probe(confs[i], "seeded 20000 64", out, sizeof(out));
        cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
        n[i] = kv_num(out, "samples");
        sig[i] = kv_ptr(out, "signature");
        check_binomial(confs[i], n[i], 20000, p_sample((double)sc_s2u(64), 10));
    }
    cr_assert_eq(sig[0], sig[1], "prof_seed:21 sampled other allocations in its second run (%llu then %llu samples)",
                 n[0], n[1]);
    cr_assert_neq(sig[0], sig[2], "prof_seed:21 and prof_seed:22 sampled the same allocations");
}

/* =====================================================================
 * 2. Dumps.
 */

SITE void fmt_small(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(24 + i % 300);
        BARRIER(keep[i]);
    }
}

SITE void fmt_large(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(SC_LARGE_MINCLASS + (i % 4) * PAGE * 3);
        BARRIER(keep[i]);
    }
}

typedef struct fmt_job {
    void *small[20000], *large[200];
    uint64_t small_sampled, large_sampled;
} fmt_job_t;

static void *fmt_job(void *arg)
{
    fmt_job_t *j = arg;
    fmt_small(j->small, 20000);
    fmt_large(j->large, 200);
    for (size_t i = 0; i < 20000; i++)
        j->small_sampled += is_sampled(j->small[i]);
    for (size_t i = 0; i < 200; i++)
        j->large_sampled += is_sampled(j->large[i]);
    return NULL;
}

Test(prof, dump_to_a_named_file_has_the_heap_v2_format, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    prof_start(12, 31, false); /* prof_accum's default: false */
    static fmt_job_t j;
    in_thread(fmt_job, &j);
    cr_assert_gt(j.small_sampled, 0);
    cr_assert_gt(j.large_sampled, 0);
    char path[256];
    tu_tmp_path(path, sizeof(path), "named.heap");
    const char *before = strdup(self_maps());
    cr_assert_eq(dump_to(path), 0);
    const char *after = self_maps();
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "prof.dump did not write %s", path);

    profile_t p;
    profile_load(path, &p); /* the grammar, the header sums, one class per record */
    cr_assert_eq(p.R, 4096, "header R %llu, lg_sample 12", p.R);
    cr_assert_gt(p.nrecs, 1);
    cr_assert_eq(p.an, 0, "prof_accum:false: the header's cumulative pair must be [0: 0]");
    cr_assert_eq(p.ab, 0);
    for (size_t i = 0; i < p.nrecs; i++)
        cr_assert(p.recs[i].an == 0 && p.recs[i].ab == 0, "prof_accum:false: record %zu has [%llu: %llu]", i,
                  p.recs[i].an, p.recs[i].ab);
    site_sum_t s = site_sum(&p, "fmt_small"), l = site_sum(&p, "fmt_large");
    cr_assert_eq(s.n, j.small_sampled, "fmt_small: %llu live in the dump, %llu sampled", s.n,
                 (unsigned long long)j.small_sampled);
    cr_assert_eq(l.n, j.large_sampled);
    cr_assert_gt(s.nrecs, 1, "one record per size class expected for mixed sizes");
    /* The maps section is /proc/self/maps at the time of the dump. */
    cr_assert(strcmp(p.maps, after) == 0 || strcmp(p.maps, before) == 0,
              "MAPPED_LIBRARIES is not a copy of /proc/self/maps:\n%.2000s", p.maps);
    /* This executable is in it (readers need it to symbolise). */
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    cr_assert_gt(n, 0);
    exe[n] = '\0';
    cr_assert_not_null(strstr(p.maps, exe));
    profile_free(&p);
    for (size_t i = 0; i < 20000; i++)
        free(j.small[i]);
    for (size_t i = 0; i < 200; i++)
        free(j.large[i]);
}

SITE void accum_site(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(64);
        BARRIER(keep[i]);
    }
}

typedef struct accum_job {
    void *keep[20000];
    bool sampled[20000];
    uint64_t nsampled, nfreed_sampled;
} accum_job_t;

static void *accum_job(void *arg)
{
    accum_job_t *j = arg;
    accum_site(j->keep, 20000);
    for (size_t i = 0; i < 20000; i++) {
        j->sampled[i] = is_sampled(j->keep[i]);
        j->nsampled += j->sampled[i];
    }
    for (size_t i = 0; i < 20000; i += 2) {
        j->nfreed_sampled += j->sampled[i];
        free(j->keep[i]);
        j->keep[i] = NULL;
    }
    return NULL;
}

Test(prof, prof_accum_counts_freed_objects_in_the_cumulative_pair, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    prof_start(10, 32, true);
    static accum_job_t j;
    in_thread(accum_job, &j);
    cr_assert_gt(j.nfreed_sampled, 0);
    char path[256];
    tu_tmp_path(path, sizeof(path), "accum.heap");
    cr_assert_eq(dump_to(path), 0);
    profile_t p;
    profile_load(path, &p);
    site_sum_t s = site_sum(&p, "accum_site");
    cr_assert_eq(s.n, j.nsampled - j.nfreed_sampled, "live samples %llu, expected %llu", s.n,
                 (unsigned long long)(j.nsampled - j.nfreed_sampled));
    cr_assert_eq(s.an, j.nsampled, "cumulative samples %llu, expected %llu", s.an,
                 (unsigned long long)j.nsampled);
    cr_assert_eq(s.ab, j.nsampled * sc_s2u(64));
    cr_assert_gt(p.an, 0, "prof_accum:true: the header's cumulative pair must count");
    profile_free(&p);
    for (size_t i = 0; i < 20000; i++)
        free(j.keep[i]);
}

static void check_seq_names(char names[][256], int n, const char *prefix, int pid, char kind)
{
    /* <prefix>.<pid>.<seq>.<kind>.heap with consecutive seq. */
    long first = -1;
    static long seqs[1024];
    cr_assert_leq(n, 1024);
    for (int i = 0; i < n; i++) {
        char fmt_pid[64];
        snprintf(fmt_pid, sizeof(fmt_pid), "%s.%d.", prefix, pid);
        cr_assert_eq(strncmp(names[i], fmt_pid, strlen(fmt_pid)), 0, "file %s is not %s<seq>.%c.heap", names[i],
                     fmt_pid, kind);
        char *end;
        seqs[i] = strtol(names[i] + strlen(fmt_pid), &end, 10);
        char tail[8];
        snprintf(tail, sizeof(tail), ".%c.heap", kind);
        cr_assert_str_eq(end, tail, "file %s", names[i]);
    }
    for (int i = 0; i < n; i++)
        for (int k = i + 1; k < n; k++)
            if (seqs[k] < seqs[i]) {
                long t = seqs[i];
                seqs[i] = seqs[k];
                seqs[k] = t;
            }
    for (int i = 0; i < n; i++) {
        if (i == 0)
            first = seqs[0];
        cr_assert_eq(seqs[i], first + i, "sequence numbers are not consecutive");
    }
}

Test(prof, dump_without_a_name_uses_the_prefix_pid_and_a_sequence, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    prof_start(12, 33, false);
    char prefix[256];
    tu_tmp_path(prefix, sizeof(prefix), "ctl");
    const char *pp = prefix;
    cr_assert_eq(mallctl("prof.prefix", NULL, NULL, &pp, sizeof(pp)), 0);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(mallctl("prof.dump", NULL, NULL, NULL, 0), 0);
    char names[8][256];
    int n = tmp_list(".heap", names, 8);
    cr_assert_eq(n, 3, "%d files after 3 dumps", n);
    check_seq_names(names, n, "ctl", (int)getpid(), 'm');
    for (int i = 0; i < n; i++) {
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", tu_tmpdir(), names[i]);
        profile_t p;
        profile_load(path, &p);
        cr_assert_eq(p.R, 4096);
        profile_free(&p);
    }
}

Test(prof, prof_prefix_option_names_the_dumps, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    char conf[512], out[1 << 14];
    snprintf(conf, sizeof(conf), "prof:true,prof_prefix:%s/opt,lg_prof_sample:10,prof_accum:true,prof_seed:4", tu_tmpdir());
    int rc = run_probe(conf, "dumps 20000 128", out, sizeof(out));
    cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
    int pid = (int)kv_num(out, "pid");
    char names[8][256];
    int n = tmp_list(".heap", names, 8);
    cr_assert_eq(n, 2, "%d files after 2 dumps", n);
    check_seq_names(names, n, "opt", pid, 'm');
    unsigned long long live[2];
    for (int i = 0; i < 2; i++) {
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", tu_tmpdir(), names[i]);
        profile_t p;
        profile_load(path, &p);
        cr_assert_eq(p.R, 1024);
        site_sum_t s = site_sum_at(&p, out, "site_a");
        live[i] = s.n;
        cr_assert_gt(s.n, 0);
        cr_assert_eq(s.an, s.n, "prof_accum:true, nothing freed: cumulative == live");
        profile_free(&p);
    }
    cr_assert_eq(live[0], live[1]);
}

Test(prof, dump_errors_are_reported)
{
    prof_start(12, 34, false);
    cr_assert_neq(dump_to("/nonexistent-myalloc-dir/x.heap"), 0, "a dump that cannot be written must fail");
    char longp[PROF_PREFIX_MAX + 10];
    memset(longp, 'a', sizeof(longp) - 1);
    longp[sizeof(longp) - 1] = '\0';
    const char *lp = longp;
    cr_assert_eq(mallctl("prof.prefix", NULL, NULL, &lp, sizeof(lp)), EINVAL);
    /* The prefix in place still works: a directory that does not exist. */
    const char *bad = "/nonexistent-myalloc-dir/p";
    cr_assert_eq(mallctl("prof.prefix", NULL, NULL, &bad, sizeof(bad)), 0);
    cr_assert_neq(mallctl("prof.dump", NULL, NULL, NULL, 0), 0);
}

Test(prof, prof_final_writes_an_f_profile_at_exit, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    char conf[512], out[1 << 14];
    snprintf(conf, sizeof(conf), "prof:true,prof_final:true,prof_prefix:%s/fin,lg_prof_sample:10,prof_seed:6",
             tu_tmpdir());
    int rc = run_probe(conf, "final 10000 512", out, sizeof(out));
    cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
    char names[8][256];
    int n = tmp_list(".heap", names, 8);
    cr_assert_eq(n, 1, "%d profiles after exit, expected one .f.", n);
    check_seq_names(names, n, "fin", (int)kv_num(out, "pid"), 'f');
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", tu_tmpdir(), names[0]);
    profile_t p;
    profile_load(path, &p);
    site_sum_t s = site_sum_at(&p, out, "site_a");
    cr_assert_eq(s.n, kv_num(out, "site_samples"), "final profile: %llu live samples at the site, %llu taken", s.n,
                 kv_num(out, "site_samples"));
    cr_assert_gt(s.n, 0);
    profile_free(&p);

    /* Without prof_final nothing is written. */
    snprintf(conf, sizeof(conf), "prof:true,prof_prefix:%s/nofin,lg_prof_sample:10", tu_tmpdir());
    rc = run_probe(conf, "final 1000 512", out, sizeof(out));
    cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
    cr_assert_eq(tmp_list(".heap", names, 8), 1);
}

/* prof_final and prof_leak serve a program that starts sampling itself
 * (prof.active) without prof:true too; they were registered only with
 * prof:true, so such a program got no exit profile and no summary. A
 * program that never samples gets neither. */
Test(prof, exit_reports_follow_sampling_started_at_run_time, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    char conf[512], out[1 << 14], names[8][256];
    snprintf(conf, sizeof(conf), "prof_final:true,prof_leak:true,prof_prefix:%s/rt,lg_prof_sample:10", tu_tmpdir());
    int rc = run_probe(conf, "final 10000 512 activate", out, sizeof(out));
    cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
    cr_assert_gt(kv_num(out, "site_samples"), 0, "nothing sampled after prof.active:\n%s", out);
    int n = tmp_list(".heap", names, 8);
    cr_assert_eq(n, 1, "%d profiles after exit, expected one .f.\n%s", n, out);
    check_seq_names(names, n, "rt", (int)kv_num(out, "pid"), 'f');
    cr_assert_not_null(strstr(out, "<myalloc>: leak summary:"), "no leak summary:\n%s", out);

    snprintf(conf, sizeof(conf), "prof_final:true,prof_leak:true,prof_prefix:%s/never", tu_tmpdir());
    rc = run_probe(conf, "final 1000 512", out, sizeof(out));
    cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
    cr_assert_eq(tmp_list(".heap", names, 8), 1, "a profile written by a program that never sampled");
    cr_assert_null(strstr(out, "leak summary"), "a leak summary from a program that never sampled:\n%s", out);
}

Test(prof, prof_leak_estimates_the_unfreed_bytes, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    char err[1 << 16], stdout_file[256];
    const unsigned lg = 16;
    const size_t nobj = 4096, size = 16384; /* 64 MiB */
    char args[128];
    snprintf(args, sizeof(args), "leak %zu %zu", nobj, size);
    tu_tmp_path(stdout_file, sizeof(stdout_file), "stdout");
    /* err: the probe's stderr alone (the summary goes there). */
    int rc = run_probe_split("prof:true,prof_leak:true,lg_prof_sample:16,prof_seed:77", args, stdout_file, err,
                             sizeof(err));
    char *out = tu_read_file(stdout_file, NULL);
    cr_assert_eq(rc, 0, "probe failed (%d):\n%s\n%s", rc, out, err);
    double leaked = (double)kv_num(out, "leaked"), live = (double)kv_num(out, "live");
    cr_assert_eq(leaked, (double)(nobj * sc_s2u(size)));
    const char *sum = strstr(err, "<myalloc>: leak summary:");
    cr_assert_not_null(sum, "no leak summary on stderr:\n%s", err);
    double est_bytes, est_objs;
    unsigned long long nsamp, R;
    unsigned nstacks;
    cr_assert_eq(sscanf(sum,
                        "<myalloc>: leak summary: ~%lf bytes in ~%lf objects unfreed at exit (unbiased, from %llu "
                        "samples on %u stacks, R = %llu)",
                        &est_bytes, &est_objs, &nsamp, &nstacks, &R),
                 5, "summary line: %.300s", sum);
    cr_assert_eq(R, 1ull << lg);
    /* 6 sigma of the unbiased estimate: the leak's sum Z^2 (1-p)/p, plus
     * the rest of the live heap (a few KiB from libc: about Z R each). */
    double z = (double)sc_s2u(size), p = p_sample(z, lg);
    double var = (double)nobj * z * z * (1 - p) / p + fmax(live - leaked, 0) * (double)R;
    double sd = sqrt(var);
    cr_assert_leq(fabs(est_bytes - live), 6 * sd, "leak estimate %.0f, truth %.0f, sd %.0f", est_bytes, live, sd);
    double vo = (double)nobj * (1 - p) / p + fmax(live - leaked, 0) * (double)R / 64;
    cr_assert_leq(fabs(est_objs - (double)nobj), 6 * sqrt(vo) + 64, "objects %.0f, leaked %zu", est_objs, nobj);
    /* The top stack follows: the leaking site holds nearly everything. */
    const char *top = strchr(sum, '\n');
    cr_assert_not_null(top);
    top++;
    double top_bytes, top_objs;
    int off = 0;
    cr_assert_eq(sscanf(top, "<myalloc>:   ~%lf bytes in ~%lf objects at%n", &top_bytes, &top_objs, &off), 2,
                 "top stack line: %.200s", top);
    cr_assert_geq(top_bytes, 0.95 * est_bytes, "top stack %.0f of %.0f bytes", top_bytes, est_bytes);
    const char *frame = strstr(top + off, "0x");
    cr_assert_not_null(frame);
    uintptr_t f0 = (uintptr_t)strtoull(frame, NULL, 16), site = kv_ptr(out, "site_a");
    cr_assert(in_site(out, f0, site), "top stack's first frame %#lx is not in site_a (%#lx)",
              (unsigned long)f0, (unsigned long)site);
    free(out);
}

static void interval_case(unsigned lg_interval, size_t total)
{
    char conf[512], args[128], out[1 << 14];
    static char names[1024][256];
    tu_tmp_cleanup();
    tu_tmp_make();
    snprintf(conf, sizeof(conf), "prof:true,lg_prof_interval:%u,prof_prefix:%s/iv", lg_interval, tu_tmpdir());
    snprintf(args, sizeof(args), "churn %zu 4096", total);
    int rc = run_probe(conf, args, out, sizeof(out));
    cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
    int n = tmp_list(".i.heap", names, 1024);
    unsigned long long allocated = kv_num(out, "allocated");
    /* The ticker reports a thread's bytes at least every min(2^N, 1 MiB):
     * all but the last report's worth reaches the interval counter. */
    unsigned long long interval = 1ull << lg_interval, report = interval < (1u << 20) ? interval : 1u << 20;
    unsigned long long lo = allocated > report ? (allocated - report) / interval : 0, hi = allocated / interval;
    cr_assert(n >= (long long)lo && n <= (long long)hi,
              "lg_prof_interval:%u: %d .i. dumps for %llu bytes allocated, expected %llu..%llu", lg_interval, n,
              allocated, lo, hi);
    cr_assert_gt(n, 0);
    cr_assert_eq(tmp_list(".heap", names, 1024), n, "other dumps than .i.");
    check_seq_names(names, n, "iv", (int)kv_num(out, "pid"), 'i');
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", tu_tmpdir(), names[n - 1]);
    profile_t p;
    profile_load(path, &p);
    profile_free(&p);
}

Test(prof, lg_prof_interval_dumps_once_per_interval_of_allocation, .fini = tu_tmp_cleanup, .timeout = 60)
{
    interval_case(20, (size_t)64 << 20);
    interval_case(22, (size_t)64 << 20);
    interval_case(17, (size_t)16 << 20);
}

Test(prof, gdump_writes_u_profiles_when_memory_grows_only, .fini = tu_tmp_cleanup, .timeout = 60)
{
    tu_tmp_make();
    char conf[512], args[600], out[1 << 14], names[256][256];
    snprintf(args, sizeof(args), "grow %s 128", tu_tmpdir());
    /* R = 1 GiB: a sampled small object would map the sampled region's
     * first chunk (growth, rightly dumped) at a random moment. */
    snprintf(conf, sizeof(conf), "prof:true,prof_gdump:true,lg_prof_sample:30,prof_seed:9,prof_prefix:%s/gd", tu_tmpdir());
    int rc = run_probe(conf, args, out, sizeof(out));
    cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
    cr_assert_eq(kv_num(out, "gdump"), 1);
    int grown = (int)kv_num(out, "u_after_growth"), churned = (int)kv_num(out, "u_after_churn");
    cr_assert_geq(grown, 1, "no .u. profile while growing to 128 MiB");
    cr_assert_leq(grown, 64, "%d .u. profiles for 128 MiB of growth: one per allocation?", grown);
    cr_assert_eq(churned, grown, "churn without growth wrote %d more .u. profiles", churned - grown);
    int n = tmp_list(".heap", names, 256);
    cr_assert_eq(n, grown);
    check_seq_names(names, n, "gd", (int)kv_num(out, "pid"), 'u');
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", tu_tmpdir(), names[n - 1]);
    profile_t p;
    profile_load(path, &p);
    profile_free(&p);

    /* prof.gdump set at run time does the same. */
    tu_tmp_cleanup();
    tu_tmp_make();
    snprintf(args, sizeof(args), "grow %s 128 ctl", tu_tmpdir());
    snprintf(conf, sizeof(conf), "prof:true,lg_prof_sample:30,prof_seed:9,prof_prefix:%s/gd", tu_tmpdir());
    rc = run_probe(conf, args, out, sizeof(out));
    cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
    cr_assert_eq(kv_num(out, "gdump"), 1);
    cr_assert_geq(kv_num(out, "u_after_growth"), 1, "prof.gdump:true at run time wrote no .u. profile");

    /* And without it, none. */
    tu_tmp_cleanup();
    tu_tmp_make();
    snprintf(args, sizeof(args), "grow %s 128", tu_tmpdir());
    rc = run_probe(conf, args, out, sizeof(out));
    cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
    cr_assert_eq(kv_num(out, "gdump"), 0);
    cr_assert_eq(tmp_list(".heap", names, 256), 0, "profiles written without prof_gdump");
}

/* =====================================================================
 * 3. Sampled objects.
 */

/* Every allocation of a thread is sampled (R = 1 byte: an object of Z bytes
 * escapes with probability exp(-Z), below 1e-6 for Z >= 16). */
static void sample_everything(uint64_t seed)
{
    prof_start(0, seed, true);
}

typedef struct range {
    uintptr_t lo, hi;
} range_t;

static int cmp_range(const void *a, const void *b)
{
    const range_t *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static bool in_ranges(const range_t *r, size_t n, uintptr_t a)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (a < r[mid].lo)
            hi = mid;
        else if (a >= r[mid].hi)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

static bool is_arena_pool(const extent_pool_t *pool)
{
    for (unsigned i = 0; i < ARENAS_MAX; i++) {
        arena_t *a = arenas[i];
        if (a != NULL && &a->pool == pool)
            return true;
    }
    return false;
}

static void *every_small_class(void *arg)
{
    (void)arg;
    size_t nreq = 2 * SC_NBINS;
    void **objs = calloc(nreq, sizeof(void *));
    size_t *sizes = calloc(nreq, sizeof(size_t));
    range_t *ranges = calloc(nreq, sizeof(range_t));
    for (unsigned i = 0; i < SC_NBINS; i++) {
        /* The class size itself and the smallest request of the class. */
        size_t cls = sc_index2size(i);
        sizes[2 * i] = cls;
        sizes[2 * i + 1] = i == 0 ? 1 : sc_index2size(i - 1) + 1;
    }
    for (size_t k = 0; k < nreq; k++) {
        size_t size = sizes[k], usize = sc_s2u(size);
        void *p = malloc(size);
        cr_assert_not_null(p);
        rtree_elm_t elm = rtree_lookup((uintptr_t)p);
        cr_assert(elm & RTREE_SAMPLED, "malloc(%zu) not marked sampled in the page map", size);
        cr_assert_not(elm & RTREE_SLAB, "a sampled object must not be on a slab (size %zu)", size);
        cr_assert_eq(rtree_elm_szind(elm), sc_size2index(usize), "size %zu: class in the page map", size);
        cr_assert(rtree_lookup((uintptr_t)p + usize - 1) & RTREE_SAMPLED, "size %zu: last page not marked", size);
        cr_assert_eq((uintptr_t)p % PAGE, 0, "sampled object %p (size %zu) is not page aligned", p, size);
        cr_assert_eq(malloc_usable_size(p), usize, "size %zu: usable %zu, expected %zu", size, malloc_usable_size(p),
                     usize);
        extent_t *e = rtree_elm_extent(elm);
        cr_assert_not(is_arena_pool(e->pool), "a small sampled object must come from the sampled region");
        cr_assert_not_null(rec_of(p), "size %zu: no profile record", size);
        tu_fill(p, usize);
        objs[k] = p;
        ranges[k] = (range_t){(uintptr_t)p, (uintptr_t)p + PAGE_CEIL(usize)};
    }
    /* The same sizes unsampled answer the same usable size. */
    ctl_set_bool("thread.prof.active", false);
    for (size_t k = 0; k < nreq; k++) {
        void *q = malloc(sizes[k]);
        cr_assert_not(is_sampled(q));
        cr_assert_eq(malloc_usable_size(q), malloc_usable_size(objs[k]), "size %zu", sizes[k]);
        free(q);
    }
    /* Page runs of their own: no two sampled objects share a page... */
    qsort(ranges, nreq, sizeof(range_t), cmp_range);
    for (size_t k = 1; k < nreq; k++)
        cr_assert_geq(ranges[k].lo, ranges[k - 1].hi, "sampled objects share a page");
    /* ...and no unsampled object lands on their pages. */
    uint64_t rng = 99;
    void **other = calloc(20000, sizeof(void *));
    for (size_t i = 0; i < 20000; i++) {
        size_t size = 1 + tu_rand(&rng) % SC_SMALL_MAXCLASS;
        other[i] = malloc(size);
        cr_assert_not(is_sampled(other[i]));
        uintptr_t a = (uintptr_t)other[i];
        cr_assert_not(in_ranges(ranges, nreq, a) || in_ranges(ranges, nreq, a + malloc_usable_size(other[i]) - 1),
                      "unsampled object %p on a sampled object's page", other[i]);
    }
    for (size_t k = 0; k < nreq; k++)
        cr_assert(tu_check(objs[k], sc_s2u(sizes[k])), "contents of sampled object %zu changed", k);
    for (size_t i = 0; i < 20000; i++)
        free(other[i]);
    for (size_t k = 0; k < nreq; k++)
        free(objs[k]);
    /* Freed: the pages are no longer marked, and reuse is unsampled. */
    for (size_t k = 0; k < nreq; k++) {
        void *q = malloc(sizes[k]);
        cr_assert_not(is_sampled(q), "a freed sampled object's mark survived into a new object");
        objs[k] = q;
    }
    for (size_t k = 0; k < nreq; k++)
        free(objs[k]);
    free(other);
    free(objs);
    free(sizes);
    free(ranges);
    return NULL;
}

Test(prof, sampled_small_objects_of_every_class)
{
    sample_everything(41);
    in_thread(every_small_class, NULL);
}

/* realloc(p, size) with p filled over its whole usable size (a program may
 * use all of it): the result holds min(old usable, size) of those bytes. */
static char *realloc_check(char *p, size_t size, unsigned seed, const char *what)
{
    size_t old = malloc_usable_size(p);
    fill_pat(p, old, seed);
    char *q = realloc(p, size);
    cr_assert_not_null(q, "%s", what);
    cr_assert_geq(malloc_usable_size(q), size);
    cr_assert(check_pat(q, MA_MIN(old, size), seed), "%s lost the contents", what);
    return q;
}

static void *realloc_job(void *arg)
{
    (void)arg;
    const size_t s1 = 100, s2 = 3000, big = SC_LARGE_MINCLASS + 5000, s3 = 200;
    char *p = malloc(s1);
    cr_assert(is_sampled(p));
    char *q = realloc_check(p, s2, 1, "small -> small");
    cr_assert(is_sampled(q) && (uintptr_t)q % PAGE == 0);
    cr_assert_eq(malloc_usable_size(q), sc_s2u(s2));
    char *r = realloc_check(q, big, 2, "small -> large");
    cr_assert(is_sampled(r));
    cr_assert_eq(malloc_usable_size(r), sc_s2u(big));
    char *s = realloc_check(r, s3, 3, "large -> small");
    cr_assert(is_sampled(s) && (uintptr_t)s % PAGE == 0);
    cr_assert_eq(malloc_usable_size(s), sc_s2u(s3));
    char *s4 = realloc_check(s, s3 / 2, 4, "small -> smaller small");
    cr_assert(is_sampled(s4) && (uintptr_t)s4 % PAGE == 0);
    /* sampled -> unsampled and back */
    ctl_set_bool("thread.prof.active", false);
    char *t = realloc_check(s4, s3 + 1000, 5, "sampled -> unsampled");
    cr_assert_not(is_sampled(t));
    ctl_set_bool("thread.prof.active", true);
    char *u = realloc_check(t, s3 + 1100, 6, "unsampled -> sampled");
    cr_assert(is_sampled(u));
    /* Same usable size: the result is sampled again, on its own page. */
    char *v = realloc_check(u, malloc_usable_size(u), 7, "same size");
    cr_assert(is_sampled(v) && (uintptr_t)v % PAGE == 0);
    free(v);
    return NULL;
}

Test(prof, sampled_objects_keep_their_contents_through_realloc)
{
    sample_everything(42);
    in_thread(realloc_job, NULL);
}

/* realloc's fast paths (src/core/fastpath.h) take the sampler's events
 * where they fall. Each realloc here allocates its result's usable size:
 * 48 B -> 208 B moves, 208 B -> 208 B stays in place. The object left at
 * the end is sampled exactly when the second realloc was (a sampled result
 * has its own page; an unsampled one is never a sampled object's). An event
 * that the in-place realloc let pass would land on the next 48 B malloc,
 * and too few final objects would be sampled. */
SITE void realloc_site(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        void *p = malloc(40);
        BARRIER(p);
        p = realloc(p, size);
        BARRIER(p);
        keep[i] = realloc(p, size + 1);
        BARRIER(keep[i]);
    }
}

Test(prof, reallocs_between_small_classes_are_sampled_at_the_rate)
{
    const size_t size = 200;
    cr_assert_eq(sc_s2u(size), sc_s2u(size + 1));
    cr_assert_neq(sc_s2u(40), sc_s2u(size));
    prof_start(10, 12, false);
    count_job_t j = {.site = realloc_site, .n = 20000, .size = size};
    in_thread(count_job_run, &j);
    check_binomial("realloc's results", j.sampled, (double)j.n, p_sample((double)sc_s2u(size), 10));
    count_job_free(&j);
}

/* The aligned entry points' fast path (alloc_aligned_fast) samples as
 * malloc does: at the rate of the usable size it hands out. */
SITE void aligned_site(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(posix_memalign(&keep[i], 64, size), 0);
        BARRIER(keep[i]);
    }
}

Test(prof, aligned_requests_are_sampled_at_the_rate)
{
    const size_t size = 200;
    void *p = NULL;
    cr_assert_eq(posix_memalign(&p, 64, size), 0);
    const size_t usize = malloc_usable_size(p);
    free(p);
    prof_start(10, 13, false);
    count_job_t j = {.site = aligned_site, .n = 20000, .size = size};
    in_thread(count_job_run, &j);
    check_binomial("posix_memalign's results", j.sampled, (double)j.n, p_sample((double)usize, 10));
    for (size_t i = 0; i < j.n; i++)
        cr_assert_eq((uintptr_t)j.keep[i] % 64, 0);
    count_job_free(&j);
}

static void *calloc_job(void *arg)
{
    (void)arg;
    for (unsigned i = 0; i < SC_NBINS; i++) {
        size_t size = sc_index2size(i);
        /* Dirty a sampled run first, so that calloc may get it back. */
        unsigned char *d = malloc(size);
        cr_assert(is_sampled(d));
        memset(d, 0xa5, size);
        free(d);
        unsigned char *c = calloc(1, size);
        cr_assert_not_null(c);
        cr_assert(is_sampled(c));
        for (size_t k = 0; k < size; k++)
            cr_assert_eq(c[k], 0, "calloc(%zu) byte %zu is %#x (reused %s)", size, k, c[k], c == d ? "yes" : "no");
        free(c);
    }
    return NULL;
}

Test(prof, sampled_calloc_returns_zeroed_memory)
{
    sample_everything(43);
    in_thread(calloc_job, NULL);
}

static void *align_job(void *arg)
{
    (void)arg;
    size_t os_page = (size_t)sysconf(_SC_PAGESIZE);
    for (size_t align = sizeof(void *); align <= 4 * PAGE; align *= 2) {
        size_t sizes[] = {1, 100, 3000, SC_LARGE_MINCLASS + 1};
        for (size_t k = 0; k < MA_ARRAY_LEN(sizes); k++) {
            size_t size = sizes[k];
            void *p = NULL;
            cr_assert_eq(posix_memalign(&p, align, size), 0);
            void *q = aligned_alloc(align, size);
            void *r = memalign(align, size);
            void *objs[3] = {p, q, r};
            for (int i = 0; i < 3; i++) {
                cr_assert_not_null(objs[i]);
                cr_assert(is_sampled(objs[i]), "aligned allocation (%zu, %zu) not sampled", align, size);
                cr_assert_eq((uintptr_t)objs[i] % align, 0, "%p not aligned to %zu", objs[i], align);
                cr_assert_geq(malloc_usable_size(objs[i]), size);
                tu_fill(objs[i], size);
            }
            for (int i = 0; i < 3; i++) {
                cr_assert(tu_check(objs[i], size));
                free(objs[i]);
            }
        }
    }
    void *v = valloc(100);
    cr_assert(is_sampled(v));
    cr_assert_eq((uintptr_t)v % os_page, 0);
    free(v);
    return NULL;
}

Test(prof, sampled_aligned_allocations_are_aligned)
{
    sample_everything(44);
    in_thread(align_job, NULL);
}

static size_t freed_size(size_t i)
{
    return 16 + (i % 64) * 100;
}

SITE void freed_site(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(freed_size(i));
        BARRIER(keep[i]);
    }
}

typedef struct freed_job {
    void *keep[2000];
    char dump1[300], dump2[300];
} freed_job_t;

static void *freed_job(void *arg)
{
    freed_job_t *j = arg;
    freed_site(j->keep, 2000);
    for (size_t i = 0; i < 2000; i++)
        cr_assert(is_sampled(j->keep[i]));
    cr_assert_eq(dump_to(j->dump1), 0);
    /* Through every kind of free (the sized ones must look sampled objects
     * up, not cache them by size). */
    for (size_t i = 0; i < 2000; i++) {
        switch (i % 4) {
        case 0:
            free(j->keep[i]);
            break;
        case 1:
            free_sized(j->keep[i], freed_size(i));
            break;
        case 2:
            sdallocx(j->keep[i], freed_size(i), 0);
            break;
        default:
            dallocx(j->keep[i], 0);
            break;
        }
    }
    cr_assert_eq(dump_to(j->dump2), 0);
    /* Nothing freed is handed out twice afterwards. */
    ctl_set_bool("thread.prof.active", false);
    for (size_t i = 0; i < 2000; i++) {
        j->keep[i] = malloc(freed_size(i));
        tu_fill(j->keep[i], freed_size(i));
    }
    for (size_t i = 0; i < 2000; i++) {
        cr_assert(tu_check(j->keep[i], freed_size(i)), "object %zu overwritten: handed out twice", i);
        free(j->keep[i]);
    }
    return NULL;
}

Test(prof, freed_sampled_objects_leave_the_live_counts_exactly, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    sample_everything(45);
    static freed_job_t j;
    tu_tmp_path(j.dump1, sizeof(j.dump1), "before.heap");
    tu_tmp_path(j.dump2, sizeof(j.dump2), "after.heap");
    prof_totals_t t0, t1;
    prof_totals_get(&t0);
    in_thread(freed_job, &j);
    prof_totals_get(&t1);
    profile_t a, b;
    profile_load(j.dump1, &a);
    profile_load(j.dump2, &b);
    site_sum_t sa = site_sum(&a, "freed_site"), sb = site_sum(&b, "freed_site");
    cr_assert_eq(sa.n, 2000);
    cr_assert_eq(sa.an, 2000);
    cr_assert_eq(sb.n, 0, "%llu freed objects still counted live", sb.n);
    cr_assert_eq(sb.b, 0);
    cr_assert_eq(sb.an, 2000, "cumulative counts must survive the frees");
    cr_assert_eq(sb.nrecs, sa.nrecs);
    /* In-process totals: the site's live samples are gone, the small pages
     * returned (nothing else in the process was sampled meanwhile but the
     * thread's own bookkeeping). */
    cr_assert_leq(t1.live_samples, t0.live_samples + 16, "live samples %llu -> %llu",
                  (unsigned long long)t0.live_samples, (unsigned long long)t1.live_samples);
    profile_free(&a);
    profile_free(&b);
}

static void *large_job(void *arg)
{
    (void)arg;
    size_t sizes[] = {SC_LARGE_MINCLASS, SC_LARGE_MINCLASS + PAGE + 1, 4 * SC_LARGE_MINCLASS, (size_t)1 << 22};
    for (size_t k = 0; k < MA_ARRAY_LEN(sizes); k++) {
        size_t size = sizes[k], usize = sc_s2u(size);
        void *p = malloc(size);
        rtree_elm_t elm = rtree_lookup((uintptr_t)p);
        cr_assert(elm & RTREE_SAMPLED, "large %zu not marked", size);
        cr_assert_not(elm & RTREE_SLAB);
        cr_assert_eq(rtree_elm_szind(elm), sc_size2index(usize));
        cr_assert(rtree_lookup((uintptr_t)p + usize - 1) & RTREE_SAMPLED, "large %zu: last page not marked", size);
        cr_assert_eq(malloc_usable_size(p), usize);
        cr_assert_eq((uintptr_t)p % PAGE, 0);
        extent_t *e = rtree_elm_extent(elm);
        cr_assert(is_arena_pool(e->pool), "a large sampled object must stay in its arena");
        cr_assert_eq(e->size, PAGE_CEIL(usize), "large sampled extent of %zu bytes for usable %zu", e->size, usize);
        cr_assert_not_null(rec_of(p));
        tu_fill(p, usize);
        cr_assert(tu_check(p, usize));
        free(p);
        /* The same size unsampled, likely at the same place: no stale mark. */
        ctl_set_bool("thread.prof.active", false);
        void *q = malloc(size);
        cr_assert_not(is_sampled(q), "large %zu: %s object marked sampled", size, q == p ? "reused" : "new");
        cr_assert_not(rtree_lookup((uintptr_t)q + usize - 1) & RTREE_SAMPLED);
        free(q);
        ctl_set_bool("thread.prof.active", true);
    }
    return NULL;
}

Test(prof, large_sampled_objects_stay_in_their_arena_and_are_only_marked)
{
    sample_everything(46);
    in_thread(large_job, NULL);
}

/* Memory per live sampled small object. */
typedef struct cost_job {
    size_t n;
    size_t rss_growth;
    size_t active_growth, allocated_growth;
    size_t allocated, active, mapped;
    uint64_t sampled;
} cost_job_t;

static size_t stats_now(const char *name)
{
    uint64_t epoch = 1;
    size_t sz = sizeof(epoch);
    mallctl("epoch", &epoch, &sz, &epoch, sz);
    return ctl_size(name);
}

static void *cost_job(void *arg)
{
    cost_job_t *j = arg;
    void **keep = calloc(j->n, sizeof(void *));
    size_t rss0 = tu_rss_bytes(), active0 = stats_now("stats.active"), allocated0 = stats_now("stats.allocated");
    for (size_t i = 0; i < j->n; i++) {
        keep[i] = malloc(16);
        *(volatile char *)keep[i] = 1; /* make its page resident */
        j->sampled += is_sampled(keep[i]);
    }
    j->rss_growth = tu_rss_bytes() - rss0;
    j->active_growth = stats_now("stats.active") - active0;
    j->allocated = stats_now("stats.allocated");
    j->allocated_growth = j->allocated - allocated0;
    j->active = stats_now("stats.active");
    j->mapped = stats_now("stats.mapped");
    for (size_t i = 0; i < j->n; i++)
        free(keep[i]);
    free(keep);
    return NULL;
}

Test(prof, a_live_sampled_small_object_costs_one_resident_page)
{
    sample_everything(47);
    cost_job_t j = {.n = 2000};
    in_thread(cost_job, &j);
    cr_assert_eq(j.sampled, j.n);
    double os_page = (double)sysconf(_SC_PAGESIZE);
    double per = (double)j.rss_growth / (double)j.n;
    /* One touched page each, plus metadata (extent and stack records). */
    cr_assert(per >= 0.9 * os_page && per <= 1.5 * os_page, "%.0f resident bytes per 16-byte sample, page %.0f", per,
              os_page);
}

Test(prof, stats_count_the_pages_of_sampled_objects)
{
    sample_everything(48);
    cost_job_t j = {.n = 2000};
    in_thread(cost_job, &j);
    cr_assert_eq(j.sampled, j.n);
    double want = (double)j.n * (double)PAGE;
    cr_assert(j.active_growth >= 0.9 * want && j.active_growth <= 1.5 * want,
              "stats.active grew by %zu bytes for %zu live sampled 16-byte objects (%zu-byte pages each: %.0f)",
              j.active_growth, j.n, (size_t)PAGE, want);
    cr_assert_geq(j.mapped, j.active, "stats.mapped %zu < stats.active %zu", j.mapped, j.active);
    cr_assert_leq(j.allocated, j.active, "stats.allocated %zu > stats.active %zu", j.allocated, j.active);
    /* Each sampled object counts its usable size (16), not its page. */
    cr_assert_eq(j.allocated_growth, j.n * sc_s2u(16), "stats.allocated grew by %zu bytes for %zu live sampled 16-byte objects",
                 j.allocated_growth, j.n);
}

/* A freed sampled run is kept for the next sample of its page count (the
 * run cache in prof.c). While kept it is not active memory, a second free of
 * the object it held is still a double free, and the next sample that gets
 * it is a clean object of its own size. */
static void *alloc_3000(void *arg)
{
    *(void **)arg = malloc(3000);
    return NULL;
}

static void free_twice(void *p)
{
    free(p);
    free(p);
}

static void *reuse_job(void *arg)
{
    unsigned char *old = arg;
    for (size_t size = 1; size <= SC_SMALL_MAXCLASS; size = size * 3 + 5) {
        unsigned char *q = calloc(1, size);
        cr_assert(is_sampled(q));
        cr_assert_eq(malloc_usable_size(q), sc_s2u(size), "calloc(%zu) on %s run", size, q == old ? "a kept" : "a new");
        for (size_t k = 0; k < size; k++)
            cr_assert_eq(q[k], 0, "calloc(%zu) byte %zu is %#x", size, k, q[k]);
        memset(q, 0xa5, size);
        free(q);
    }
    return NULL;
}

Test(prof, a_kept_sampled_run_is_not_active_and_catches_a_double_free)
{
    sample_everything(52);
    unsigned char *p = NULL;
    in_thread(alloc_3000, &p);
    cr_assert(is_sampled(p));
    memset(p, 0xa5, 3000);
    char out[4096];
    int st = tu_capture(free_twice, p, out, sizeof(out));
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "second free of a sampled object not caught: status %#x\n%s",
              st, out);
    char want[64];
    snprintf(want, sizeof(want), "double free of %p", (void *)p);
    cr_assert_not_null(strstr(out, want), "%s", out);
    size_t active0 = stats_now("stats.active");
    free(p);
    size_t active1 = stats_now("stats.active");
    cr_assert_eq(malloc_usable_size(p), 0, "a kept run's old object answers usable size %zu", malloc_usable_size(p));
    cr_assert_geq(active0 - active1, PAGE_CEIL(3000), "stats.active fell by %zu when a %zu-byte sampled run was freed",
                  active0 - active1, (size_t)PAGE_CEIL(3000));
    in_thread(reuse_job, p);
}

/* free() of a pointer inside a sampled object (its own page run) is refused
 * as for any object, not taken for the run's start. */
static void free_inside(void *p) { free((unsigned char *)p + 16); }

Test(prof, a_pointer_inside_a_sampled_object_is_refused)
{
    sample_everything(53);
    unsigned char *p = NULL;
    in_thread(alloc_3000, &p);
    cr_assert(is_sampled(p));
    char out[4096];
    int st = tu_capture(free_inside, p, out, sizeof(out));
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "free(p + 16) of a sampled object not caught: status %#x\n%s",
              st, out);
    cr_assert_not_null(strstr(out, "inside an allocation"), "%s", out);
    free(p);
}

/* =====================================================================
 * 4. VMAs: 100,000 live samples stay in a few VMAs.
 */

static void *vma_job(void *arg)
{
    unsigned *res = arg;
    const size_t n = 150000;
    void **keep = calloc(n, sizeof(void *));
    unsigned before = count_lines(self_maps());
    uint64_t madv0 = ma_load_relaxed(&pages_nmadvise);
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(16 + (i % 4) * 16);
        cr_assert(is_sampled(keep[i]));
    }
    res[4] = (unsigned)(ma_load_relaxed(&pages_nmadvise) - madv0);
    /* Holes: every third freed, 100,000 stay live. */
    for (size_t i = 0; i < n; i += 3) {
        free(keep[i]);
        keep[i] = NULL;
    }
    const char *maps = self_maps();
    res[0] = before;
    res[1] = count_lines(maps);
    /* The VMA holding a sample is madvised MADV_NOHUGEPAGE ("nh"). */
    uintptr_t probe = (uintptr_t)keep[1];
    FILE *f = fopen("/proc/self/smaps", "r");
    cr_assert_not_null(f);
    char line[512];
    bool inside = false;
    res[2] = 0;
    res[3] = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = probe >= lo && probe < hi;
            if (inside)
                res[3] = (unsigned)((hi - lo) >> 20);
        } else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            res[2] = strstr(line, " nh") != NULL ? 1 : 2;
        }
    }
    fclose(f);
    for (size_t i = 0; i < n; i++)
        free(keep[i]);
    free(keep);
    return NULL;
}

Test(prof, a_hundred_thousand_live_samples_take_few_vmas, .timeout = 120)
{
    sample_everything(51);
    unsigned res[5];
    in_thread(vma_job, res);
    /* madvise once per chunk (and for purging), not once per sample. */
    cr_assert_lt(res[4], 1000, "%u madvise calls while allocating 150,000 samples", res[4]);
    cr_assert_lt(res[1], 1000, "%u VMAs with 100,000 live samples (%u before)", res[1], res[0]);
    cr_assert_lt(res[1], res[0] + 100, "VMAs grew from %u to %u for 100,000 samples", res[0], res[1]);
    cr_assert_neq(res[2], 0, "the sample's VMA is not in /proc/self/smaps");
    cr_assert_geq(res[3], 2, "the VMA holding a sample spans %u MiB: the sampled region is split", res[3]);
    if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0)
        cr_assert_eq(res[2], 1, "the sampled region is not madvised MADV_NOHUGEPAGE (no \"nh\" in VmFlags)");
}

/* =====================================================================
 * 5. Backtraces.
 */

SITE void *bt_malloc(size_t n)
{
    void *p = malloc(n);
    BARRIER(p);
    return p;
}

SITE void *bt_calloc(size_t n)
{
    void *p = calloc(1, n);
    BARRIER(p);
    return p;
}

SITE void *bt_realloc_null(size_t n)
{
    void *p = realloc(NULL, n);
    BARRIER(p);
    return p;
}

SITE void *bt_realloc_grow(void *old, size_t n)
{
    void *p = realloc(old, n);
    BARRIER(p);
    return p;
}

SITE void *bt_reallocarray(void *old, size_t n)
{
    void *p = reallocarray(old, 2, n / 2);
    BARRIER(p);
    return p;
}

SITE void *bt_posix_memalign(size_t n)
{
    void *p = NULL;
    int rc = posix_memalign(&p, 64, n);
    BARRIER(p);
    return rc == 0 ? p : NULL;
}

SITE void *bt_aligned_alloc(size_t n)
{
    void *p = aligned_alloc(128, n);
    BARRIER(p);
    return p;
}

SITE void *bt_memalign(size_t n)
{
    void *p = memalign(256, n);
    BARRIER(p);
    return p;
}

SITE void *bt_valloc(size_t n)
{
    void *p = valloc(n);
    BARRIER(p);
    return p;
}

SITE void *bt_pvalloc(size_t n)
{
    void *p = pvalloc(n);
    BARRIER(p);
    return p;
}

FPSITE void *fp_malloc(size_t n)
{
    void *p = malloc(n);
    BARRIER(p);
    return p;
}

FPSITE void *fp_calloc(size_t n)
{
    void *p = calloc(1, n);
    BARRIER(p);
    return p;
}

FPSITE void *fp_realloc_grow(void *old, size_t n)
{
    void *p = realloc(old, n);
    BARRIER(p);
    return p;
}

FPSITE void *fp_posix_memalign(size_t n)
{
    void *p = NULL;
    int rc = posix_memalign(&p, 64, n);
    BARRIER(p);
    return rc == 0 ? p : NULL;
}

FPSITE void *fp_aligned_alloc(size_t n)
{
    void *p = aligned_alloc(128, n);
    BARRIER(p);
    return p;
}

FPSITE void *fp_memalign(size_t n)
{
    void *p = memalign(256, n);
    BARRIER(p);
    return p;
}

FPSITE void *fp_valloc(size_t n)
{
    void *p = valloc(n);
    BARRIER(p);
    return p;
}

/* The first frame is the site, the second its caller (the driver): no
 * allocator frame comes first. */
static void check_top_frames(void *p, const char *site, const char *driver)
{
    cr_assert_not_null(p, "%s returned NULL", site);
    prof_rec_t *r = rec_of(p);
    cr_assert_not_null(r, "%s: object not sampled or not recorded", site);
    const prof_stack_t *s = r->stack;
    cr_assert_geq(s->depth, 2, "%s: recorded stack has %u frames", site, s->depth);
    cr_assert_str_eq(sym_of(s->frames[0]), site, "%s: first frame is %s (%p)", site, sym_of(s->frames[0]),
                     s->frames[0]);
    cr_assert_str_eq(sym_of(s->frames[1]), driver, "%s: second frame is %s, expected %s", site, sym_of(s->frames[1]),
                     driver);
}

SITE void *bt_driver(void *arg)
{
    (void)arg;
    const size_t sizes[] = {24, 1000, SC_LARGE_MINCLASS + 100};
    for (size_t k = 0; k < MA_ARRAY_LEN(sizes); k++) {
        size_t n = sizes[k];
        void *p;
        p = bt_malloc(n);
        check_top_frames(p, "bt_malloc", "bt_driver");
        free(p);
        p = bt_calloc(n);
        check_top_frames(p, "bt_calloc", "bt_driver");
        free(p);
        p = bt_realloc_null(n);
        check_top_frames(p, "bt_realloc_null", "bt_driver");
        p = bt_realloc_grow(p, n + 3000);
        check_top_frames(p, "bt_realloc_grow", "bt_driver");
        p = bt_reallocarray(p, n + 6000);
        check_top_frames(p, "bt_reallocarray", "bt_driver");
        free(p);
        p = bt_posix_memalign(n);
        check_top_frames(p, "bt_posix_memalign", "bt_driver");
        free(p);
        p = bt_aligned_alloc(n);
        check_top_frames(p, "bt_aligned_alloc", "bt_driver");
        free(p);
        p = bt_memalign(n);
        check_top_frames(p, "bt_memalign", "bt_driver");
        free(p);
        p = bt_valloc(n);
        check_top_frames(p, "bt_valloc", "bt_driver");
        free(p);
        p = bt_pvalloc(n);
        check_top_frames(p, "bt_pvalloc", "bt_driver");
        free(p);
    }
    BARRIER(arg);
    return NULL;
}

FPSITE void *fp_driver(void *arg)
{
    (void)arg;
    const size_t sizes[] = {24, 1000, SC_LARGE_MINCLASS + 100};
    for (size_t k = 0; k < MA_ARRAY_LEN(sizes); k++) {
        size_t n = sizes[k];
        void *p;
        p = fp_malloc(n);
        check_top_frames(p, "fp_malloc", "fp_driver");
        free(p);
        p = fp_calloc(n);
        check_top_frames(p, "fp_calloc", "fp_driver");
        p = fp_realloc_grow(p, n + 3000);
        check_top_frames(p, "fp_realloc_grow", "fp_driver");
        free(p);
        p = fp_posix_memalign(n);
        check_top_frames(p, "fp_posix_memalign", "fp_driver");
        free(p);
        p = fp_aligned_alloc(n);
        check_top_frames(p, "fp_aligned_alloc", "fp_driver");
        free(p);
        p = fp_memalign(n);
        check_top_frames(p, "fp_memalign", "fp_driver");
        free(p);
        p = fp_valloc(n);
        check_top_frames(p, "fp_valloc", "fp_driver");
        free(p);
    }
    BARRIER(arg);
    return NULL;
}

Test(prof, first_frame_is_the_call_site_of_every_entry_point)
{
    cr_assert_eq(opt_prof_bt, PROF_BT_GCC, "the default unwinder is gcc");
    sample_everything(61);
    in_thread(bt_driver, NULL);
}

/* Recursion to a depth beyond prof_bt_max, then one allocation. */
SITE unsigned deep(unsigned n, void **out)
{
    unsigned r;
    if (n == 0) {
        *out = malloc(64);
        r = 0;
    } else {
        r = deep(n - 1, out) + 1;
    }
    BARRIER(out);
    __asm__ volatile("" : "+r"(r));
    return r;
}

FPSITE unsigned deep_fp(unsigned n, void **out)
{
    unsigned r;
    if (n == 0) {
        *out = malloc(64);
        r = 0;
    } else {
        r = deep_fp(n - 1, out) + 1;
    }
    BARRIER(out);
    __asm__ volatile("" : "+r"(r));
    return r;
}

typedef struct deep_case {
    unsigned (*fn)(unsigned, void **);
    const char *name;
    unsigned levels, max;
} deep_case_t;

static void *deep_job(void *arg)
{
    deep_case_t *c = arg;
    opt_prof_bt_max = c->max;
    void *p = NULL;
    cr_assert_eq(c->fn(c->levels, &p), c->levels);
    prof_rec_t *r = rec_of(p);
    cr_assert_not_null(r, "deep allocation not sampled");
    cr_assert_eq(r->stack->depth, c->max, "%u-frame recursion recorded %u frames with prof_bt_max %u", c->levels,
                 r->stack->depth, c->max);
    for (unsigned i = 0; i < r->stack->depth; i++)
        cr_assert_str_eq(sym_of(r->stack->frames[i]), c->name, "frame %u is %s", i, sym_of(r->stack->frames[i]));
    free(p);
    return NULL;
}

Test(prof, deep_stacks_are_cut_at_prof_bt_max)
{
    sample_everything(62);
    deep_case_t cases[] = {{deep, "deep", 200, 128}, {deep, "deep", 200, 40}, {deep, "deep", 300, PROF_BT_MAX_LIMIT}};
    for (size_t i = 0; i < MA_ARRAY_LEN(cases); i++)
        in_thread(deep_job, &cases[i]);
}

Test(prof, frame_pointer_unwinder_records_the_call_site)
{
#ifdef __clang__
    cr_skip_test("the frame-pointer sites rely on GCC's optimize attribute");
#endif
    opt_prof_bt = PROF_BT_FP;
    sample_everything(63);
    in_thread(fp_driver, NULL);
    deep_case_t cases[] = {{deep_fp, "deep_fp", 200, 128}, {deep_fp, "deep_fp", 200, 40}};
    for (size_t i = 0; i < MA_ARRAY_LEN(cases); i++)
        in_thread(deep_job, &cases[i]);
}

Test(prof, prof_bt_fp_option_records_the_call_site_under_ld_preload, .fini = tu_tmp_cleanup)
{
#ifdef __clang__
    cr_skip_test("the probe's frame-pointer sites rely on GCC's optimize attribute");
#endif
    tu_tmp_make();
    char path[256], args[512], out[1 << 14];
    tu_tmp_path(path, sizeof(path), "fp.heap");
    snprintf(args, sizeof(args), "fp 5000 1000 %s", path);
    int rc = run_probe("prof:true,prof_bt:fp,lg_prof_sample:10,prof_seed:8", args, out, sizeof(out));
    cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
    cr_assert_eq(strncmp(kv_find(out, "opt_prof_bt"), "fp\n", 3), 0, "opt.prof_bt is not fp:\n%s", out);
    profile_t p;
    profile_load(path, &p);
    uintptr_t site = kv_ptr(out, "site_fp"), driver = kv_ptr(out, "site_fp_driver");
    site_sum_t s = site_sum_at(&p, out, "site_fp");
    cr_assert_gt(s.n, 0, "no record starts in site_fp: prof_bt:fp lost the call site (%zu records, first: %p)",
                 p.nrecs, p.nrecs > 0 && p.recs[0].depth > 0 ? p.recs[0].frames[0] : NULL);
    for (size_t i = 0; i < p.nrecs; i++) {
        const prec_t *r = &p.recs[i];
        uintptr_t f0 = (uintptr_t)r->frames[0];
        if (in_site(out, f0, site)) {
            cr_assert_geq(r->depth, 2);
            uintptr_t f1 = (uintptr_t)r->frames[1];
            cr_assert(in_site(out, f1, driver), "second frame %#lx is not in site_fp_driver",
                      (unsigned long)f1);
        }
    }
    /* The same probe with the default unwinder (the check can pass). */
    tu_tmp_path(path, sizeof(path), "gcc.heap");
    snprintf(args, sizeof(args), "fp 5000 1000 %s", path);
    rc = run_probe("prof:true,lg_prof_sample:10,prof_seed:8", args, out, sizeof(out));
    cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
    profile_t g;
    profile_load(path, &g);
    cr_assert_gt(site_sum_at(&g, out, "site_fp").n, 0);
    profile_free(&g);
    profile_free(&p);
}

/* Re-entrancy. Many threads with a small R: every sample captures a stack
 * (libgcc's unwinder, warmed at activation); none may hang or recurse. */

SITE void churn_site(void **slots, size_t nslots, uint64_t *rng, size_t iters, uint64_t *sampled)
{
    for (size_t i = 0; i < iters; i++) {
        size_t k = tu_rand(rng) % nslots;
        free(slots[k]);
        size_t size = 8 + tu_rand(rng) % 4096;
        slots[k] = malloc(size);
        BARRIER(slots[k]);
        *sampled += is_sampled(slots[k]);
    }
}

typedef struct churn_arg {
    unsigned id;
    uint64_t sampled;
} churn_arg_t;

static void *churn_thread(void *arg)
{
    churn_arg_t *a = arg;
    void *slots[64] = {0};
    uint64_t rng = 0x1234 + a->id;
    churn_site(slots, 64, &rng, 20000, &a->sampled);
    for (int i = 0; i < 64; i++)
        free(slots[i]);
    return NULL;
}

Test(prof, many_sampling_threads_neither_hang_nor_recurse, .timeout = 60, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    prof_start(8, 71, true);
    uint64_t samples0 = ctl_u64("prof.nsamples"), skipped0 = ctl_u64("prof.nskipped");
    uint64_t sampled = 0;
    for (int round = 0; round < 4; round++) {
        pthread_t t[8];
        churn_arg_t a[8];
        for (unsigned i = 0; i < 8; i++) {
            a[i] = (churn_arg_t){round * 8 + i, 0};
            cr_assert_eq(pthread_create(&t[i], NULL, churn_thread, &a[i]), 0);
        }
        /* Dumps taken while the threads sample are consistent (the header
         * is the sum of the records written). */
        for (int d = 0; d < 3; d++) {
            char path[256], name[32];
            snprintf(name, sizeof(name), "busy%d.%d.heap", round, d);
            tu_tmp_path(path, sizeof(path), name);
            cr_assert_eq(dump_to(path), 0);
            profile_t p;
            profile_load(path, &p);
            profile_free(&p);
            unlink(path);
        }
        for (unsigned i = 0; i < 8; i++) {
            pthread_join(t[i], NULL);
            sampled += a[i].sampled;
        }
    }
    uint64_t samples = ctl_u64("prof.nsamples") - samples0, skipped = ctl_u64("prof.nskipped") - skipped0;
    cr_assert_gt(sampled, 100000, "only %llu samples taken", (unsigned long long)sampled);
    cr_assert_geq(samples, sampled, "prof.nsamples grew by %llu for %llu sampled objects",
                  (unsigned long long)samples, (unsigned long long)sampled);
    /* The default unwinder is warmed up at activation: it never allocates
     * inside a sample, so nothing is skipped. */
    cr_assert_eq(skipped, 0, "%llu samples skipped with the warmed-up gcc unwinder", (unsigned long long)skipped);
}

/* With prof_bt:fp the unwinder's first use in a thread asks glibc for the
 * thread's stack (pthread_getattr_np), which allocates: that allocation
 * happens inside a sample, with R = 1 it is due to be sampled itself, and
 * it must be skipped (counted in prof.nskipped), not recursed into. */
static void *getattr_bytes(void *arg)
{
    uint64_t *bytes = arg;
    uint64_t before = ctl_u64("thread.allocated");
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0)
        pthread_attr_destroy(&attr);
    *bytes = ctl_u64("thread.allocated") - before;
    return NULL;
}

static void *first_sample(void *arg)
{
    void **p = arg;
    *p = malloc(100);
    BARRIER(*p);
    return NULL;
}

Test(prof, an_allocation_inside_a_stack_capture_is_skipped_not_recursed, .timeout = 60)
{
    uint64_t bytes = 0;
    in_thread(getattr_bytes, &bytes);
    opt_prof_bt = PROF_BT_FP;
    sample_everything(72);
    uint64_t skipped0 = ctl_u64("prof.nskipped"), samples0 = ctl_u64("prof.nsamples");
    void *p = NULL;
    in_thread(first_sample, &p);
    cr_assert(is_sampled(p));
    cr_assert_not_null(rec_of(p));
    cr_assert_eq(malloc_usable_size(p), sc_s2u(100));
    free(p);
    uint64_t skipped = ctl_u64("prof.nskipped") - skipped0, samples = ctl_u64("prof.nsamples") - samples0;
    cr_assert_geq(samples, 1);
    if (bytes > 0)
        cr_assert_gt(skipped, 0, "pthread_getattr_np allocated %llu bytes inside the sample, none counted skipped",
                     (unsigned long long)bytes);
    else
        cr_log_info("pthread_getattr_np does not allocate here: no nested allocation to skip");
}

/* =====================================================================
 * 6. prof.reset.
 */

SITE void reset_site_1(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(256);
        BARRIER(keep[i]);
    }
}

SITE void reset_site_2(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(256);
        BARRIER(keep[i]);
    }
}

typedef struct reset_job {
    void (*site)(void **, size_t);
    void *keep[40000];
    uint64_t sampled;
} reset_job_t;

static void *reset_job(void *arg)
{
    reset_job_t *j = arg;
    j->site(j->keep, 40000);
    for (size_t i = 0; i < 40000; i++)
        j->sampled += is_sampled(j->keep[i]);
    return NULL;
}

static double reader_estimate(const profile_t *p, const char *site, double *objs)
{
    double bytes = 0;
    *objs = 0;
    for (size_t i = 0; i < p->nrecs; i++) {
        const prec_t *r = &p->recs[i];
        if (r->n == 0 || strcmp(sym_of(r->frames[0]), site) != 0)
            continue;
        double scale = 1 / -expm1(-((double)r->b / (double)r->n) / (double)p->R);
        bytes += (double)r->b * scale;
        *objs += (double)r->n * scale;
    }
    return bytes;
}

Test(prof, reset_changes_the_rate_zeroes_cumulative_and_keeps_live, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    prof_start(12, 81, true);
    static reset_job_t j1, j2;
    j1.site = reset_site_1;
    in_thread(reset_job, &j1);
    check_binomial("R = 4096", j1.sampled, 40000, p_sample((double)sc_s2u(256), 12));
    char d1[256], d2[256], d3[256], d4[256];
    tu_tmp_path(d1, sizeof(d1), "1.heap");
    tu_tmp_path(d2, sizeof(d2), "2.heap");
    tu_tmp_path(d3, sizeof(d3), "3.heap");
    tu_tmp_path(d4, sizeof(d4), "4.heap");
    cr_assert_eq(dump_to(d1), 0);
    prof_totals_t t1, t2;
    prof_totals_get(&t1);
    cr_assert_gt(t1.accum_samples, 0);

    prof_reset_lg(14);
    cr_assert_eq(ctl_size("prof.lg_sample"), 14);
    prof_totals_get(&t2);
    cr_assert_eq(t2.accum_samples, 0, "prof.reset must zero the cumulative counts");
    cr_assert_eq(t2.accum_objects, 0);
    cr_assert_eq(t2.live_samples, t1.live_samples, "prof.reset must keep live objects counted");
    cr_assert_leq(fabs(t2.live_bytes - t1.live_bytes), 1e-9 * t1.live_bytes,
                  "live estimate %.1f before the reset, %.1f after (records keep their own R)", t1.live_bytes,
                  t2.live_bytes);
    cr_assert_eq(dump_to(d2), 0);

    profile_t p1, p2;
    profile_load(d1, &p1);
    profile_load(d2, &p2);
    cr_assert_eq(p1.R, 4096);
    cr_assert_eq(p2.R, 16384, "the dump after prof.reset must carry the new R, not %llu", p2.R);
    cr_assert_eq(p2.an, 0, "cumulative counts after the reset");
    site_sum_t s1 = site_sum(&p1, "reset_site_1"), s2 = site_sum(&p2, "reset_site_1");
    cr_assert_eq(s1.n, j1.sampled);
    cr_assert_eq(s1.an, j1.sampled);
    cr_assert_eq(s2.an, 0);
    /* Live records sampled at the old R are written at the new one. */
    double z = (double)sc_s2u(256), w1 = 1 / p_sample(z, 12), w2 = 1 / p_sample(z, 14);
    cr_assert_eq(s2.n, (unsigned long long)llround((double)s1.n * w1 / w2), "live count %llu at R 16384 for %llu at 4096",
                 s2.n, s1.n);
    double o1, o2;
    double e1 = reader_estimate(&p1, "reset_site_1", &o1), e2 = reader_estimate(&p2, "reset_site_1", &o2);
    cr_assert_leq(fabs(e1 - e2), z * w2, "readers' live estimate %.0f before, %.0f after the reset", e1, e2);
    profile_free(&p1);
    profile_free(&p2);

    /* New samples at the new rate. */
    j2.site = reset_site_2;
    in_thread(reset_job, &j2);
    check_binomial("R = 16384 after reset", j2.sampled, 40000, p_sample(z, 14));
    cr_assert_eq(dump_to(d3), 0);
    profile_t p3;
    profile_load(d3, &p3);
    site_sum_t s3 = site_sum(&p3, "reset_site_2");
    cr_assert_eq(s3.n, j2.sampled);
    cr_assert_eq(s3.an, j2.sampled);
    cr_assert_eq(site_sum(&p3, "reset_site_1").an, 0);
    profile_free(&p3);

    /* Objects sampled before the reset, freed after it, leave exactly. */
    for (size_t i = 0; i < 40000; i++)
        free(j1.keep[i]);
    prof_totals_t t4;
    prof_totals_get(&t4);
    cr_assert_eq(t4.live_samples, t2.live_samples - j1.sampled + j2.sampled);
    cr_assert_eq(dump_to(d4), 0);
    profile_t p4;
    profile_load(d4, &p4);
    cr_assert_eq(site_sum(&p4, "reset_site_1").nrecs, 0, "freed objects sampled before the reset still in the profile");
    profile_free(&p4);
    for (size_t i = 0; i < 40000; i++)
        free(j2.keep[i]);

    /* No value: same R; a value beyond 2^62: EINVAL. */
    cr_assert_eq(mallctl("prof.reset", NULL, NULL, NULL, 0), 0);
    cr_assert_eq(ctl_size("prof.lg_sample"), 14);
    size_t bad = 63;
    cr_assert_eq(mallctl("prof.reset", NULL, NULL, &bad, sizeof(bad)), EINVAL);
    cr_assert_eq(ctl_size("prof.lg_sample"), 14);
}

/* =====================================================================
 * 7. fork with profiling active.
 */

SITE void fork_site(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(128);
        BARRIER(keep[i]);
    }
}

static volatile int fork_stop;

static void *fork_background(void *arg)
{
    (void)arg;
    void *slots[32] = {0};
    uint64_t rng = 5;
    while (!fork_stop) {
        size_t k = tu_rand(&rng) % 32;
        free(slots[k]);
        slots[k] = malloc(16 + tu_rand(&rng) % 2000);
    }
    for (int i = 0; i < 32; i++)
        free(slots[i]);
    return NULL;
}

/* In the child: no Criterion asserts; the exit status says what failed. */
static int fork_child(int i)
{
    alarm(30);
    enum { N = 4000 };
    static void *keep[N];
    fork_site(keep, N);
    unsigned long sampled = 0;
    for (size_t k = 0; k < N; k++)
        sampled += is_sampled(keep[k]);
    if (sampled == 0)
        return 3;
    char path[300], cpath[300];
    snprintf(path, sizeof(path), "%s/child%d.heap", tu_tmpdir(), i);
    if (dump_to(path) != 0)
        return 4;
    snprintf(cpath, sizeof(cpath), "%s/child%d.count", tu_tmpdir(), i);
    FILE *f = fopen(cpath, "w");
    if (f == NULL)
        return 5;
    fprintf(f, "%lu\n", sampled);
    fclose(f);
    for (size_t k = 0; k < N; k++)
        free(keep[k]);
    return 0;
}

Test(prof, a_forked_child_samples_and_dumps, .fini = tu_tmp_cleanup, .timeout = 120)
{
    tu_tmp_make();
    prof_start(8, 91, false);
    pthread_t bg;
    cr_assert_eq(pthread_create(&bg, NULL, fork_background, NULL), 0);
    for (int i = 0; i < 10; i++) {
        fflush(NULL);
        pid_t pid = fork();
        cr_assert_neq(pid, -1);
        if (pid == 0)
            _exit(fork_child(i));
        int st;
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: %s %d", i,
                  WIFEXITED(st) ? "exit status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        char path[300], cpath[300];
        snprintf(path, sizeof(path), "%s/child%d.heap", tu_tmpdir(), i);
        snprintf(cpath, sizeof(cpath), "%s/child%d.count", tu_tmpdir(), i);
        char *cnt = tu_read_file(cpath, NULL);
        unsigned long long sampled = strtoull(cnt, NULL, 10);
        free(cnt);
        profile_t p;
        profile_load(path, &p);
        cr_assert_eq(p.R, 256);
        cr_assert_eq(site_sum(&p, "fork_site").n, sampled, "child %d: dump has %llu samples at the site, %llu taken", i,
                     site_sum(&p, "fork_site").n, sampled);
        profile_free(&p);
    }
    fork_stop = 1;
    pthread_join(bg, NULL);
    /* The parent still samples and dumps. */
    char path[300];
    tu_tmp_path(path, sizeof(path), "parent.heap");
    cr_assert_eq(dump_to(path), 0);
    profile_t p;
    profile_load(path, &p);
    cr_assert_eq(site_sum(&p, "fork_site").nrecs, 0, "the children's samples are in the parent's profile");
    profile_free(&p);
}

/* A fork while another thread is unwinding: the unwinder holds the loader's
 * lock inside dl_iterate_phdr, which glibc's fork does not take, so unless
 * the fork waits for the walk, the child's first sample waits for that lock
 * forever (seen once in 150 runs of the test above). Here a thread samples
 * every allocation, so some walk is in progress at most forks. */
static void *walk_background(void *arg)
{
    (void)arg;
    while (!fork_stop)
        free(malloc(64));
    return NULL;
}

Test(prof, a_fork_during_another_threads_walk_leaves_the_child_able_to_sample, .timeout = 120)
{
    prof_start(0, 92, false);
    fork_stop = 0;
    pthread_t bg;
    cr_assert_eq(pthread_create(&bg, NULL, walk_background, NULL), 0);
    int hung = 0;
    for (int i = 0; i < 200; i++) {
        pid_t pid = fork();
        cr_assert_neq(pid, -1);
        if (pid == 0) {
            alarm(5);
            free(malloc(64)); /* sampled (lg_prof_sample 0): a walk */
            _exit(0);
        }
        int st;
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) {
            hung = i + 1;
            break;
        }
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: status %d", i, st);
    }
    fork_stop = 1;
    pthread_join(bg, NULL);
    cr_assert_eq(hung, 0, "child %d hung in its first sample", hung - 1);
}
