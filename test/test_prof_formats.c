/*
 * Profiles readable anywhere: pprof protobuf (read by go tool pprof plain
 * and gzipped, with and without the binary), in-process symbolisation
 * (static functions, libraries without -g, stripped ones), folded stacks
 * and the SVG flame graph, the peak profile, residency, prof_format /
 * prof.format / prof.dump_peak and the automatic file names, dumps inside
 * malloc (interval) in every format, dumps that allocate nothing, and the
 * myalloc-prof command-line tool.
 *
 * In-process tests run on the static library (linked -rdynamic, so dladdr
 * names the global sites independently of our own symboliser). Scenarios
 * needing a process of their own run test/helpers/prof_formats_probe.c
 * under LD_PRELOAD. go tool pprof (golang-go) and xmllint (libxml2-utils)
 * are skipped with a message when absent; CI installs them.
 *
 * Statistical checks use fixed seeds and 6-sigma bounds.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sys/stat.h>

#include "core/core.h"
#include "myalloc.h"
#include "prof/prof.h"
#include "prof/prof_symbol.h"
#include "prof/prof_table.h"
#include "test_util.h"

#define SITE __attribute__((noinline, used))
#define BARRIER(p) __asm__ volatile("" : : "r"(p) : "memory")

/* ---------------------------------------------------------------------
 * Shorthands.
 */

static void prof_start(unsigned lg, uint64_t seed, bool accum)
{
    opt_prof_seed = seed;
    opt_prof_accum = accum;
    size_t z = lg;
    cr_assert_eq(mallctl("prof.reset", NULL, NULL, &z, sizeof(z)), 0);
    bool on = true;
    cr_assert_eq(mallctl("prof.active", NULL, NULL, &on, sizeof(on)), 0);
}

static void in_thread(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, fn, arg), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
}

static void set_format(const char *f)
{
    cr_assert_eq(mallctl("prof.format", NULL, NULL, &f, sizeof(f)), 0, "prof.format %s", f);
}

static void dump_as(const char *format, const char *path)
{
    set_format(format);
    cr_assert_eq(mallctl("prof.dump", NULL, NULL, &path, sizeof(path)), 0, "prof.dump %s", path);
}

static bool have(const char *tool)
{
    char cmd[256], out[256];
    snprintf(cmd, sizeof(cmd), "command -v %s", tool);
    return tu_run(cmd, out, sizeof(out)) == 0;
}

static const char *self_exe(void)
{
    static char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    cr_assert_gt(n, 0);
    exe[n] = '\0';
    return exe;
}

static const char *sym_of(uint64_t ret_addr)
{
    Dl_info info;
    if (dladdr((char *)(uintptr_t)ret_addr - 1, &info) == 0 || info.dli_sname == NULL)
        return "?";
    return info.dli_sname;
}

/* Records in the table now (each pprof value is rounded per record). */
static void count_visit(const prof_stack_t *s, void *arg)
{
    for (const prof_rec_t *r = s->recs; r != NULL; r = r->next)
        *(size_t *)arg += r->live > 0 || r->accum > 0;
}

static size_t nrecords(void)
{
    size_t n = 0;
    prof_table_foreach(count_visit, &n);
    return n;
}

/* ---------------------------------------------------------------------
 * Files in the temporary directory (tu_tmp_make, test_util.h).
 */

/* The one name in tu_tmpdir() ending with suffix (asserts there is one). */
static void tmp_find(const char *suffix, char *name, size_t len)
{
    DIR *d = opendir(tu_tmpdir());
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *de;
    size_t sl = strlen(suffix);
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l >= sl && strcmp(de->d_name + l - sl, suffix) == 0) {
            snprintf(name, len, "%s", de->d_name);
            n++;
        }
    }
    closedir(d);
    cr_assert_eq(n, 1, "%d files ending in %s in %s", n, suffix, tu_tmpdir());
}

static int tmp_count(const char *suffix)
{
    DIR *d = opendir(tu_tmpdir());
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *de;
    size_t sl = strlen(suffix);
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (de->d_name[0] != '.')
            n += l >= sl && strcmp(de->d_name + l - sl, suffix) == 0;
    }
    closedir(d);
    return n;
}

static int run_probe(const char *conf, const char *probe, const char *args, char *out, size_t outlen)
{
    char build[PATH_MAX], cmd[8192];
    cr_assert_not_null(realpath(tu_build_dir(), build), "build dir %s", tu_build_dir());
    snprintf(cmd, sizeof(cmd), "cd %s && MYALLOC_CONF='%s' LD_PRELOAD=%s/libmyalloc.so %s %s", tu_tmpdir(), conf, build,
             probe, args);
    return tu_run(cmd, out, outlen);
}

static const char *probe_path(void)
{
    static char p[PATH_MAX + 64];
    char build[PATH_MAX];
    cr_assert_not_null(realpath(tu_build_dir(), build));
    snprintf(p, sizeof(p), "%s/helpers/prof_formats_probe", build);
    cr_assert_eq(access(p, X_OK), 0, "no %s", p);
    return p;
}

/* ---------------------------------------------------------------------
 * A text dump through the readers' formula (jeprof AdjustSamples, pprof
 * scaleHeapSample), per record, with each record's first frame and
 * residency line.
 */

typedef struct trec {
    unsigned long long n, b, an, ab, resident, swapped;
    bool has_resid;
    uint64_t frame0;
} trec_t;

typedef struct tprof {
    unsigned long long R;
    trec_t *recs;
    size_t nrecs;
    double live_bytes, live_objs, acc_bytes, acc_objs;
} tprof_t;

static double scale_of(unsigned long long n, unsigned long long b, unsigned long long R)
{
    return n == 0 ? 0 : 1 / -expm1(-((double)b / (double)n) / (double)R);
}

static void tprof_load(const char *path, tprof_t *p)
{
    memset(p, 0, sizeof(*p));
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no dump at %s", path);
    static char line[1 << 16];
    cr_assert_not_null(fgets(line, sizeof(line), f));
    unsigned long long hn, hb, han, hab;
    cr_assert_eq(sscanf(line, "heap profile: %llu: %llu [ %llu: %llu] @ heap_v2/%llu", &hn, &hb, &han, &hab, &p->R),
                 5, "bad header: %s", line);
    size_t cap = 64;
    p->recs = calloc(cap, sizeof(trec_t));
    while (fgets(line, sizeof(line), f) != NULL && line[0] != '\n') {
        unsigned long long res, swp;
        if (sscanf(line, "# myalloc resident=%llu swapped=%llu", &res, &swp) == 2) {
            cr_assert_gt(p->nrecs, 0, "residency before any record");
            p->recs[p->nrecs - 1].resident = res;
            p->recs[p->nrecs - 1].swapped = swp;
            p->recs[p->nrecs - 1].has_resid = true;
            continue;
        }
        if (p->nrecs == cap)
            p->recs = realloc(p->recs, (cap *= 2) * sizeof(trec_t));
        trec_t *r = &p->recs[p->nrecs++];
        memset(r, 0, sizeof(*r));
        int off = 0;
        cr_assert_eq(sscanf(line, "%llu: %llu [%llu: %llu] @%n", &r->n, &r->b, &r->an, &r->ab, &off), 4,
                     "bad record: %s", line);
        r->frame0 = strtoull(line + off, NULL, 16);
        double s = scale_of(r->n, r->b, p->R), sa = scale_of(r->an, r->ab, p->R);
        p->live_bytes += (double)r->b * s;
        p->live_objs += (double)r->n * s;
        p->acc_bytes += (double)r->ab * sa;
        p->acc_objs += (double)r->an * sa;
    }
    fclose(f);
}

/* Estimates of one site (records whose first frame is in function fn). */
typedef struct est {
    double bytes, objs, resident;
    unsigned long long raw_bytes, raw_resident, samples;
    unsigned nrecs;
} est_t;

static est_t tprof_site(const tprof_t *p, const char *fn)
{
    est_t e = {0};
    for (size_t i = 0; i < p->nrecs; i++) {
        const trec_t *r = &p->recs[i];
        if (r->n == 0 || strcmp(sym_of(r->frame0), fn) != 0)
            continue;
        double s = scale_of(r->n, r->b, p->R);
        e.bytes += (double)r->b * s;
        e.objs += (double)r->n * s;
        e.resident += (double)r->resident * s;
        e.raw_bytes += r->b;
        e.raw_resident += r->resident;
        e.samples += r->n;
        e.nrecs++;
    }
    return e;
}

/* ---------------------------------------------------------------------
 * go tool pprof.
 */

/* "Showing nodes accounting for X, Y% of Z total": Z, with -unit=B for
 * bytes (plain numbers for counts). */
static double pprof_total(const char *exe, const char *file, const char *index, char *out, size_t outlen)
{
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "HOME=${HOME:-/tmp} go tool pprof -top -unit=B -sample_index=%s %s %s", index,
             exe != NULL ? exe : "", file);
    int rc = tu_run(cmd, out, outlen);
    cr_assert_eq(rc, 0, "%s failed (%d):\n%s", cmd, rc, out);
    const char *s = strstr(out, "% of ");
    cr_assert_not_null(s, "no total in pprof output:\n%s", out);
    double total = -1;
    cr_assert_eq(sscanf(s, "%% of %lf", &total), 1, "pprof: %.200s", s);
    return total;
}

/* ---------------------------------------------------------------------
 * pprof protobuf, in process: go tool pprof reads it plain and gzipped;
 * its totals are ours; every site is named, the static one too.
 */

SITE void site_pp_small(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = malloc(64);
    BARRIER(keep);
}

static __attribute__((noinline)) void site_pp_static(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = malloc(3000);
    BARRIER(keep);
}

SITE void site_pp_large(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = malloc(256 << 10);
    BARRIER(keep);
}

typedef struct pp_run {
    void **keep;
} pp_run_t;

static void *pp_worker(void *arg)
{
    pp_run_t *r = arg;
    r->keep = malloc(200000 * sizeof(void *));
    site_pp_small(r->keep, 100000);
    site_pp_static(r->keep + 100000, 5000);
    site_pp_large(r->keep + 110000, 30);
    /* Half the small ones go: cumulative differs from live. */
    for (size_t i = 0; i < 100000; i += 2)
        free(r->keep[i]);
    return NULL;
}

Test(prof_formats, pprof_is_read_by_go_tool_pprof_plain_and_gzipped_with_our_totals, .timeout = 300,
     .fini = tu_tmp_cleanup)
{
    if (!have("go") || !have("gzip"))
        cr_skip_test("go (golang-go) or gzip not installed");
    tu_tmp_make();
    static pp_run_t run;
    prof_start(14, 11, true);
    in_thread(pp_worker, &run);
    char gz[256], plain[256], cmd[1024], out[1 << 16];
    tu_tmp_path(gz, sizeof(gz), "p.pb.gz");
    tu_tmp_path(plain, sizeof(plain), "p.pb");
    dump_as("pprof", gz);
    prof_totals_t t;
    prof_totals_get(&t);
    double tol = 0.5 * (double)nrecords() + 1;
    /* Our gzip framing and CRC are right for gzip itself. */
    snprintf(cmd, sizeof(cmd), "gzip -t %s && gzip -dc %s > %s", gz, gz, plain);
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "gzip: %s", out);
    const char *files[] = {gz, plain};
    for (int k = 0; k < 2; k++) {
        double b = pprof_total(self_exe(), files[k], "inuse_space", out, sizeof(out));
        cr_assert_leq(fabs(b - t.live_bytes), tol, "%s: pprof inuse_space %.0f, ours %.1f", files[k], b, t.live_bytes);
        cr_assert_not_null(strstr(out, "site_pp_small"), "site_pp_small not named:\n%s", out);
        cr_assert_not_null(strstr(out, "site_pp_static"), "the static site_pp_static not named:\n%s", out);
        cr_assert_not_null(strstr(out, "site_pp_large"), "site_pp_large not named:\n%s", out);
        double o = pprof_total(self_exe(), files[k], "inuse_objects", out, sizeof(out));
        cr_assert_leq(fabs(o - t.live_objects), tol, "pprof inuse_objects %.0f, ours %.1f", o, t.live_objects);
        double ab = pprof_total(self_exe(), files[k], "alloc_space", out, sizeof(out));
        cr_assert_leq(fabs(ab - t.accum_bytes), tol, "pprof alloc_space %.0f, ours %.1f", ab, t.accum_bytes);
        double ao = pprof_total(self_exe(), files[k], "alloc_objects", out, sizeof(out));
        cr_assert_leq(fabs(ao - t.accum_objects), tol, "pprof alloc_objects %.0f, ours %.1f", ao, t.accum_objects);
    }
    /* Header facts: period R, the default sample type, the bytes label. */
    snprintf(cmd, sizeof(cmd), "HOME=${HOME:-/tmp} go tool pprof -raw %s", gz);
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "%s", out);
    cr_assert_not_null(strstr(out, "Period: 16384"), "%.400s", out);
    cr_assert_not_null(strstr(out, "inuse_space/bytes[dflt]"), "%.400s", out);
    cr_assert_not_null(strstr(out, "resident_space/bytes"), "%.400s", out);
    cr_assert_not_null(strstr(out, "bytes:[3072 bytes]"), "no bytes label of the 3000-byte site:\n%.2000s", out);
    cr_assert_not_null(strstr(out, "[FN][FL][LN]"), "mappings must say they carry functions and lines:\n%s", out);
    /* File and line of the call sites (this test is built with -g). */
    snprintf(cmd, sizeof(cmd), "HOME=${HOME:-/tmp} go tool pprof -top -lines %s", gz);
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "%s", out);
    cr_assert_not_null(strstr(out, "site_pp_static "), "%s", out);
    cr_assert_not_null(strstr(strstr(out, "site_pp_static "), "test_prof_formats.c:"), "no file:line:\n%s", out);
}

/* ---------------------------------------------------------------------
 * Without the binary: a probe copied to the temporary directory, with its
 * libraries, all deleted before go tool pprof reads its profile.
 */

Test(prof_formats, pprof_names_functions_with_the_binary_and_libraries_deleted, .timeout = 300,
     .fini = tu_tmp_cleanup)
{
    if (!have("go"))
        cr_skip_test("go (golang-go) not installed");
    tu_tmp_make();
    char build[PATH_MAX], cmd[8192], out[1 << 16];
    cr_assert_not_null(realpath(tu_build_dir(), build));
    snprintf(cmd, sizeof(cmd), "cp %s %s/probe && cp %s/helpers/libprof_nog.so %s/helpers/libprof_stripped.so %s/",
             probe_path(), tu_tmpdir(), build, build, tu_tmpdir());
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "%s", out);
    char args[512];
    snprintf(args, sizeof(args), "sites %s %s", tu_tmpdir(), tu_tmpdir());
    int rc = run_probe("prof:true,lg_prof_sample:14,prof_seed:5", "./probe", args, out, sizeof(out));
    cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
    snprintf(cmd, sizeof(cmd), "rm %s/probe %s/libprof_nog.so %s/libprof_stripped.so", tu_tmpdir(), tu_tmpdir(), tu_tmpdir());
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "%s", out);

    char heap[256], pb[256];
    tu_tmp_path(heap, sizeof(heap), "live.heap");
    tu_tmp_path(pb, sizeof(pb), "live.pb.gz");
    tprof_t tp;
    tprof_load(heap, &tp);
    double b = pprof_total(NULL, pb, "inuse_space", out, sizeof(out));
    static const char *const names[] = {"probe_static_small", "probe_static_big", "nog_static_alloc", "nog_alloc",
                                        "nog_fill", "stripped_alloc", "stripped_fill", "libprof_stripped.so+0x"};
    for (size_t i = 0; i < MA_ARRAY_LEN(names); i++)
        cr_assert_not_null(strstr(out, names[i]), "%s not in go tool pprof -top without the binary:\n%s", names[i],
                           out);
    cr_assert_null(strstr(out, "Local symbolization failed"), "pprof looked for the binary:\n%s", out);
    /* The same totals as the text dump taken at the same moment. */
    double tol = 0.5 * (double)tp.nrecs + 1;
    cr_assert_leq(fabs(b - tp.live_bytes), tol, "pprof %.0f bytes, text dump %.1f", b, tp.live_bytes);
    double o = pprof_total(NULL, pb, "inuse_objects", out, sizeof(out));
    cr_assert_leq(fabs(o - tp.live_objs), tol, "pprof %.0f objects, text dump %.1f", o, tp.live_objs);
    free(tp.recs);
}

/* ---------------------------------------------------------------------
 * The symboliser itself.
 */

static __attribute__((noinline, used)) void *static_symbol_target(size_t n)
{
    void *p = malloc(n);
    BARRIER(p);
    return p;
}

static void *lib_open(const char *name)
{
    char path[PATH_MAX + 64], build[PATH_MAX];
    cr_assert_not_null(realpath(tu_build_dir(), build));
    snprintf(path, sizeof(path), "%s/helpers/%s", build, name);
    void *h = dlopen(path, RTLD_NOW);
    cr_assert_not_null(h, "dlopen %s: %s", path, dlerror());
    return h;
}

Test(prof_formats, symbolizer_names_static_functions_and_libraries_built_without_debug_info)
{
    void *nog = lib_open("libprof_nog.so"), *stripped = lib_open("libprof_stripped.so");
    prof_scratch_t sc;
    prof_scratch_init(&sc);
    prof_maps_t maps;
    const char *text;
    size_t len;
    cr_assert(prof_maps_read_self(&sc, &maps, &text, &len));
    cr_assert_gt(maps.n, 3);
    prof_sym_t s;
    char buf[256];

    /* A static function of the program: only .symtab has it. */
    uint64_t a = (uint64_t)(uintptr_t)static_symbol_target;
    cr_assert(prof_symbolize(&maps, a + 3, &s), "static function not named");
    cr_assert_str_eq(s.name, "static_symbol_target");
    cr_assert_eq(s.fn_offset, 3);
    cr_assert(s.object_read);
    cr_assert_not_null(s.map);
    cr_assert_str_eq(s.map->path, self_exe());
    /* Its file and line from the DWARF line table (this test is built
     * with -g), as addr2line reads them. */
    cr_assert_not_null(s.file, "no file for a function built with -g");
    cr_assert_str_eq(prof_basename(s.file), "test_prof_formats.c");
    cr_assert_gt(s.line, 0);
    cr_assert_geq(s.line, s.fn_line);
    if (have("addr2line")) {
        char cmd[PATH_MAX + 128], out[1024];
        uint64_t at[2] = {s.vaddr, s.vaddr - s.fn_offset};
        unsigned want[2] = {s.line, s.fn_line};
        for (int i = 0; i < 2; i++) {
            snprintf(cmd, sizeof(cmd), "addr2line -e %s 0x%llx", self_exe(), (unsigned long long)at[i]);
            cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "%s", out);
            const char *colon = strrchr(out, ':');
            cr_assert_not_null(colon, "%s", out);
            cr_assert_eq((unsigned)atoi(colon + 1), want[i], "line %u, addr2line says %s", want[i], out);
        }
    }
    /* A libc export (Debian's libc has .dynsym only). */
    cr_assert(prof_symbolize(&maps, (uint64_t)(uintptr_t)qsort + 1, &s));
    cr_assert_str_eq(s.name, "qsort");

    /* A library built without -g: its .symtab names the static function. */
    void *(*nog_static)(void) = (void *(*)(void))dlsym(nog, "nog_static_address");
    cr_assert_not_null(nog_static);
    prof_maps_read_self(&sc, &maps, &text, &len); /* after the dlopens */
    cr_assert(prof_symbolize(&maps, (uint64_t)(uintptr_t)nog_static() + 1, &s));
    cr_assert_str_eq(s.name, "nog_static_alloc");
    cr_assert(prof_symbolize(&maps, (uint64_t)(uintptr_t)dlsym(nog, "nog_alloc") + 2, &s));
    cr_assert_str_eq(s.name, "nog_alloc");
    cr_assert_str_eq(prof_basename(s.map->path), "libprof_nog.so");
    cr_assert_null(s.file, "a library without -g has no line table");

    /* Stripped: exports from .dynsym; the static function has no name, and
     * is shown as object+offset (its link-time address). */
    cr_assert(prof_symbolize(&maps, (uint64_t)(uintptr_t)dlsym(stripped, "stripped_alloc") + 2, &s));
    cr_assert_str_eq(s.name, "stripped_alloc");
    void *(*st_static)(void) = (void *(*)(void))dlsym(stripped, "stripped_static_address");
    uint64_t sa = (uint64_t)(uintptr_t)st_static();
    cr_assert_not(prof_symbolize(&maps, sa + 1, &s), "stripped static function named %s", s.name);
    prof_sym_format(&s, sa + 1, buf, sizeof(buf));
    Dl_info info;
    cr_assert_neq(dladdr((void *)(uintptr_t)sa, &info), 0);
    char want[128];
    snprintf(want, sizeof(want), "libprof_stripped.so+0x%llx",
             (unsigned long long)(sa + 1 - (uint64_t)(uintptr_t)info.dli_fbase));
    cr_assert_str_eq(buf, want);

    /* Nothing maps address 8: no name, the address itself. */
    cr_assert_not(prof_symbolize(&maps, 8, &s));
    prof_sym_format(&s, 8, buf, sizeof(buf));
    cr_assert_str_eq(buf, "0x8");

    /* The program's build id, as readelf -n prints it. */
    char hex[160], cmd[PATH_MAX + 128], out[4096];
    cr_assert(prof_build_id(&maps, prof_maps_find(&maps, a), hex, sizeof(hex)));
    snprintf(cmd, sizeof(cmd), "readelf -n %s | sed -n 's/.*Build ID: //p'", self_exe());
    if (have("readelf") && tu_run(cmd, out, sizeof(out)) == 0 && out[0] != '\0') {
        out[strcspn(out, "\n")] = '\0';
        cr_assert_str_eq(hex, out);
    }
    prof_scratch_free(&sc);
}

Test(prof_formats, maps_lines_parse_with_spaces_and_deleted_files)
{
    static const char text[] =
        "55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 1234                       /usr/bin/prog\n"
        "55d0c0a01000-55d0c0a05000 r-xp 00001000 08:01 1234                       /usr/bin/prog\n"
        "7f0000000000-7f0000001000 r-xp 00002000 fd:02 99                         /tmp/a dir/lib x.so (deleted)\n"
        "7f0000002000-7f0000003000 rw-p 00000000 00:00 0 \n"
        "7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0                          [vdso]\n"
        "garbage line\n";
    prof_scratch_t sc;
    prof_scratch_init(&sc);
    prof_maps_t m;
    cr_assert(prof_maps_parse(&sc, text, sizeof(text) - 1, false, &m));
    cr_assert_eq(m.n, 5);
    cr_assert_eq(m.v[1].start, 0x55d0c0a01000ull);
    cr_assert_eq(m.v[1].offset, 0x1000);
    cr_assert_eq(m.v[1].inode, 1234);
    cr_assert_str_eq(m.v[1].perms, "r-xp");
    cr_assert_str_eq(m.v[2].path, "/tmp/a dir/lib x.so");
    cr_assert(m.v[2].deleted);
    cr_assert_eq(m.v[2].dev_major, 0xfd);
    cr_assert_str_eq(m.v[3].path, "");
    cr_assert_str_eq(m.v[4].path, "[vdso]");
    cr_assert_eq(prof_maps_find(&m, 0x55d0c0a01fffull), &m.v[1]);
    cr_assert_null(prof_maps_find(&m, 0x7f0000001000ull));
    prof_scratch_free(&sc);
}

/* ---------------------------------------------------------------------
 * Folded stacks and the SVG flame graph.
 */

SITE void site_flame_a(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = malloc(100);
    BARRIER(keep);
}

SITE void site_flame_b(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = malloc(10000);
    BARRIER(keep);
}

/* A name with XML's special characters (an assembler-level name; C++
 * names written demangled would have them too). */
SITE void site_flame_xml(void **keep, size_t n) __asm__("\"site<&>q\"");
SITE void site_flame_xml(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = malloc(5000);
    BARRIER(keep);
}

SITE void *flame_worker(void *arg)
{
    void **keep = malloc(60000 * sizeof(void *));
    site_flame_a(keep, 50000);
    site_flame_b(keep + 50000, 3000);
    site_flame_xml(keep + 53000, 1000);
    *(void ***)arg = keep;
    return NULL;
}

Test(prof_formats, folded_stacks_are_root_first_with_unbiased_live_bytes, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    static void **keep;
    prof_start(14, 21, false);
    in_thread(flame_worker, &keep);
    char path[256];
    tu_tmp_path(path, sizeof(path), "f.folded");
    dump_as("folded", path);
    prof_totals_t t;
    prof_totals_get(&t);
    char *text = tu_read_file(path, NULL);
    double sum = 0;
    unsigned lines = 0, a = 0, b = 0;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save)) {
        char *sp = strrchr(l, ' ');
        cr_assert_not_null(sp, "no value: %s", l);
        char *end;
        double v = strtod(sp + 1, &end);
        cr_assert(*end == '\0' && v > 0, "bad value: %s", l);
        sum += v;
        lines++;
        *sp = '\0';
        /* Leaf last, callers before it, root first. */
        const char *leaf = strrchr(l, ';') ? strrchr(l, ';') + 1 : l;
        if (strcmp(leaf, "site_flame_a") == 0 || strcmp(leaf, "site_flame_b") == 0) {
            char *w = strstr(l, ";flame_worker;site_flame_");
            cr_assert_not_null(w, "caller not just before the leaf: %s", l);
            cr_assert_null(strstr(w + 1, "start_thread"), "the root must come first: %s", l);
            a += leaf[11] == 'a';
            b += leaf[11] == 'b';
        }
    }
    cr_assert_eq(a, 1, "site_flame_a: %u lines", a);
    cr_assert_eq(b, 1, "site_flame_b: %u lines", b);
    /* Each line is rounded once. */
    cr_assert_leq(fabs(sum - t.live_bytes), 0.5 * lines + 1, "folded total %.0f, ours %.1f", sum, t.live_bytes);
    free(text);
}

Test(prof_formats, svg_flame_graph_parses_as_xml_and_names_the_call_sites, .fini = tu_tmp_cleanup)
{
    if (!have("xmllint"))
        cr_skip_test("xmllint (libxml2-utils) not installed");
    tu_tmp_make();
    static void **keep;
    prof_start(14, 22, false);
    in_thread(flame_worker, &keep);
    char path[256], cmd[1024], out[1 << 14];
    tu_tmp_path(path, sizeof(path), "f.svg");
    dump_as("svg", path);
    prof_totals_t t;
    prof_totals_get(&t); /* before popen allocates */
    snprintf(cmd, sizeof(cmd), "xmllint --noout %s", path);
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "not XML: %s", out);
    snprintf(cmd, sizeof(cmd), "xmllint --xpath 'count(//*[local-name()=\"rect\"])' %s", path);
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "%s", out);
    cr_assert_geq(atoi(out), 5, "rects: %s", out);
    char *svg = tu_read_file(path, NULL);
    cr_assert(strncmp(svg, "<?xml", 5) == 0 && strstr(svg, "<svg ") != NULL);
    cr_assert_null(strstr(svg, "<script"), "self-contained, no script");
    cr_assert_null(strstr(svg, "href"), "no external reference");
    /* The sites as visible labels and in the tooltips, with their bytes. */
    cr_assert_not_null(strstr(svg, ">site_flame_a ("), "site_flame_a label missing");
    cr_assert_not_null(strstr(svg, ">site_flame_b ("), "site_flame_b label missing");
    cr_assert_not_null(strstr(svg, "<title>flame_worker ("));
    cr_assert_not_null(strstr(svg, "site&lt;&amp;&gt;q"), "special characters not escaped");
    const char *all = strstr(svg, "<title>all (live heap) (");
    cr_assert_not_null(all);
    double root = 0;
    const char *comma = strchr(all, ',');
    cr_assert_eq(sscanf(comma, ", %lf bytes", &root), 1, "%.120s", all);
    cr_assert_leq(fabs(root - t.live_bytes), 1, "root %.0f bytes, ours %.1f", root, t.live_bytes);
    free(svg);
}

/* ---------------------------------------------------------------------
 * The peak profile.
 */

#define PEAK_LG 12

static double p_of(double z)
{
    return -expm1(-z / (double)(1 << PEAK_LG));
}

typedef struct truth {
    double bytes, objs, var_bytes, var_objs;
} truth_t;

static void truth_add(truth_t *t, void *p)
{
    double z = (double)malloc_usable_size(p), q = p_of(z);
    t->bytes += z;
    t->objs += 1;
    t->var_bytes += z * z * (1 - q) / q;
    t->var_objs += (1 - q) / q;
}

SITE void site_peak_a(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = malloc(512);
    BARRIER(keep);
}

SITE void site_peak_b(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = malloc(24 << 10);
    BARRIER(keep);
}

SITE void site_after_peak(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = malloc(256);
    BARRIER(keep);
}

typedef struct peak_run {
    truth_t a, b;
    void **after;
} peak_run_t;

static void *peak_worker(void *arg)
{
    peak_run_t *r = arg;
    size_t na = 40000, nb = 800;
    void **ka = malloc(na * sizeof(void *)), **kb = malloc(nb * sizeof(void *));
    site_peak_a(ka, na / 2);
    site_peak_b(kb, nb);
    site_peak_a(ka + na / 2, na / 2);
    for (size_t i = 0; i < na; i++)
        truth_add(&r->a, ka[i]);
    for (size_t i = 0; i < nb; i++)
        truth_add(&r->b, kb[i]);
    /* Down from the peak, then a little elsewhere. */
    for (size_t i = 0; i < na; i++)
        free(ka[i]);
    for (size_t i = 0; i < nb; i++)
        free(kb[i]);
    free(ka);
    free(kb);
    r->after = malloc(2000 * sizeof(void *));
    site_after_peak(r->after, 2000);
    return NULL;
}

static void check_site(const char *what, const est_t *e, const truth_t *t)
{
    double sb = sqrt(t->var_bytes), so = sqrt(t->var_objs);
    cr_assert_leq(fabs(e->bytes - t->bytes), 6 * sb + 1, "%s bytes: estimate %.0f, truth %.0f, sd %.0f", what,
                  e->bytes, t->bytes, sb);
    cr_assert_leq(fabs(e->objs - t->objs), 6 * so + 1, "%s objects: estimate %.0f, truth %.0f, sd %.0f", what,
                  e->objs, t->objs, so);
}

Test(prof_formats, peak_profile_shows_the_peak_sites_after_they_are_freed, .timeout = 120, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    static peak_run_t run;
    prof_start(PEAK_LG, 31, false);
    in_thread(peak_worker, &run);
    char path[256], now[256];
    tu_tmp_path(path, sizeof(path), "peak.heap");
    tu_tmp_path(now, sizeof(now), "now.heap");
    set_format("text");
    const char *p = path;
    cr_assert_eq(mallctl("prof.dump_peak", NULL, NULL, &p, sizeof(p)), 0);
    dump_as("text", now);
    tprof_t pk, cur;
    tprof_load(path, &pk);
    tprof_load(now, &cur);
    est_t a = tprof_site(&pk, "site_peak_a"), b = tprof_site(&pk, "site_peak_b");
    cr_assert_gt(a.samples, 0, "site_peak_a missing from the peak profile");
    cr_assert_gt(b.samples, 0, "site_peak_b missing from the peak profile");
    check_site("peak site_peak_a", &a, &run.a);
    check_site("peak site_peak_b", &b, &run.b);
    cr_assert_eq(tprof_site(&pk, "site_after_peak").samples, 0, "allocated after the peak");
    /* The live profile is the other way round. */
    cr_assert_eq(tprof_site(&cur, "site_peak_a").samples + tprof_site(&cur, "site_peak_b").samples, 0);
    cr_assert_gt(tprof_site(&cur, "site_after_peak").samples, 0);
    /* The peak is the highest sampled live size: what the profile adds up to. */
    double peak_est = (double)ma_load_relaxed(&prof_peak_bytes), nsamples = 0;
    for (size_t i = 0; i < pk.nrecs; i++)
        nsamples += (double)pk.recs[i].n;
    /* (the running total adds each sample's unbiased bytes rounded) */
    cr_assert_leq(fabs(pk.live_bytes - peak_est), 0.5 * nsamples + 1,
                  "peak profile %.0f bytes, sampled peak %.0f", pk.live_bytes, peak_est);

    /* Without a name: <prefix>.<pid>.<seq>.p.<suffix>, in the current format. */
    char prefix[256], name[256], want[64];
    tu_tmp_path(prefix, sizeof(prefix), "pk");
    const char *pp = prefix;
    cr_assert_eq(mallctl("prof.prefix", NULL, NULL, &pp, sizeof(pp)), 0);
    set_format("folded");
    cr_assert_eq(mallctl("prof.dump_peak", NULL, NULL, NULL, 0), 0);
    tmp_find(".p.folded", name, sizeof(name));
    snprintf(want, sizeof(want), "pk.%d.", (int)getpid());
    cr_assert_eq(strncmp(name, want, strlen(want)), 0, "%s", name);
    char fpath[512];
    snprintf(fpath, sizeof(fpath), "%s/%s", tu_tmpdir(), name);
    char *folded = tu_read_file(fpath, NULL);
    cr_assert_not_null(strstr(folded, ";site_peak_b "), "%s", folded);
    cr_assert_null(strstr(folded, "site_after_peak"), "%s", folded);
    free(folded);
    free(pk.recs);
    free(cur.recs);
}

/* ---------------------------------------------------------------------
 * Residency.
 */

SITE void site_touched(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(2000);
        memset(keep[i], 1, 2000);
    }
    BARRIER(keep);
}

SITE void site_untouched(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = malloc(2000);
    BARRIER(keep);
}

static void *resid_worker(void *arg)
{
    void **keep = malloc(8000 * sizeof(void *));
    site_untouched(keep, 4000);
    site_touched(keep + 4000, 4000);
    *(void ***)arg = keep;
    return NULL;
}

Test(prof_formats, residency_of_sampled_objects_per_record, .timeout = 120, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    static void **keep;
    prof_start(12, 41, false);
    in_thread(resid_worker, &keep);
    char path[256], out[1 << 16];
    tu_tmp_path(path, sizeof(path), "r.heap");
    dump_as("text", path);
    tprof_t tp;
    tprof_load(path, &tp);
    for (size_t i = 0; i < tp.nrecs; i++)
        cr_assert(tp.recs[i].n == 0 || tp.recs[i].has_resid, "record %zu without residency", i);
    /* Sampled objects have pages of their own: a touched one is resident
     * whole, an untouched one (fresh pages) not at all. */
    est_t t = tprof_site(&tp, "site_touched"), u = tprof_site(&tp, "site_untouched");
    cr_assert_gt(t.samples, 100);
    cr_assert_gt(u.samples, 100);
    cr_assert_eq(t.raw_resident, t.raw_bytes, "touched: %llu of %llu bytes resident", t.raw_resident, t.raw_bytes);
    cr_assert_eq(u.raw_resident, 0, "untouched: %llu bytes resident", u.raw_resident);
    for (size_t i = 0; i < tp.nrecs; i++)
        cr_assert_eq(tp.recs[i].swapped, 0); /* no swap here */
    /* The same through pprof's resident_space. */
    if (have("go")) {
        char pb[256], cmd[1024];
        tu_tmp_path(pb, sizeof(pb), "r.pb.gz");
        dump_as("pprof", pb);
        snprintf(cmd, sizeof(cmd),
                 "HOME=${HOME:-/tmp} go tool pprof -top -unit=B -sample_index=resident_space %s %s | "
                 "awk '$6 == \"site_touched\" || $6 == \"site_untouched\" {print $6, $1}'",
                 self_exe(), pb);
        cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "%s", out);
        double v = 0;
        const char *line = strstr(out, "site_touched ");
        cr_assert_not_null(line, "site_touched has no resident bytes in pprof:\n%s", out);
        cr_assert_eq(sscanf(line, "site_touched %lfB", &v), 1, "%s", out);
        cr_assert_leq(fabs(v - t.bytes), 1.0 * t.nrecs, "pprof resident %.0f, unbiased bytes %.1f", v, t.bytes);
        line = strstr(out, "site_untouched ");
        cr_assert(line == NULL || (sscanf(line, "site_untouched %lfB", &v) == 1 && v == 0),
                  "untouched memory counted resident:\n%s", out);
    }
    free(tp.recs);
}

/* ---------------------------------------------------------------------
 * Asking for a format.
 */

Test(prof_formats, prof_format_mallctl_reads_writes_and_rejects)
{
    const char *f = NULL, *old = NULL;
    size_t sz = sizeof(f);
    cr_assert_eq(mallctl("prof.format", &f, &sz, NULL, 0), 0);
    cr_assert_str_eq(f, "text");
    cr_assert_eq(mallctl("opt.prof_format", &f, &sz, NULL, 0), 0);
    cr_assert_str_eq(f, "text");
    const char *names[] = {"pprof", "folded", "svg", "text"};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(mallctl("prof.format", &old, &sz, &names[i], sizeof(names[i])), 0);
        cr_assert_eq(mallctl("prof.format", &f, &sz, NULL, 0), 0);
        cr_assert_str_eq(f, names[i]);
    }
    const char *bad = "xml";
    cr_assert_eq(mallctl("prof.format", NULL, NULL, &bad, sizeof(bad)), EINVAL);
    const char *none = NULL;
    cr_assert_eq(mallctl("prof.format", NULL, NULL, &none, sizeof(none)), EINVAL);
    cr_assert_eq(mallctl("prof.format", &f, &sz, NULL, 0), 0);
    cr_assert_str_eq(f, "text", "a rejected value must not change the format");
    cr_assert_eq(mallctl("prof.dump_peak", &f, &sz, NULL, 0), EPERM, "write-only");
}

Test(prof_formats, prof_format_option_names_the_automatic_dumps, .timeout = 120, .fini = tu_tmp_cleanup)
{
    static const struct {
        const char *format, *suffix;
    } cases[] = {{"pprof", ".f.pb.gz"}, {"folded", ".f.folded"}, {"svg", ".f.svg"}, {"text", ".f.heap"}};
    char conf[512], out[1 << 14], name[256], path[512], cmd[1024], want[64];
    for (size_t i = 0; i < MA_ARRAY_LEN(cases); i++) {
        tu_tmp_cleanup();
        tu_tmp_make();
        snprintf(conf, sizeof(conf), "prof:true,prof_final:true,lg_prof_sample:12,prof_format:%s,prof_prefix:%s/auto",
                 cases[i].format, tu_tmpdir());
        int rc = run_probe(conf, probe_path(), "churn 4000000", out, sizeof(out));
        cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
        char fl[64];
        snprintf(fl, sizeof(fl), "format=%s\n", cases[i].format);
        cr_assert_not_null(strstr(out, fl), "prof.format does not follow prof_format:%s:\n%s", cases[i].format, out);
        tmp_find(cases[i].suffix, name, sizeof(name));
        snprintf(want, sizeof(want), "auto.");
        cr_assert_eq(strncmp(name, want, strlen(want)), 0, "%s", name);
        cr_assert_eq(tmp_count(""), 1, "one file only");
        snprintf(path, sizeof(path), "%s/%s", tu_tmpdir(), name);
        struct stat st;
        cr_assert_eq(stat(path, &st), 0);
        cr_assert_gt(st.st_size, 40, "%s is nearly empty", name);
        if (strcmp(cases[i].format, "pprof") == 0 && have("gzip")) {
            snprintf(cmd, sizeof(cmd), "gzip -t %s", path);
            cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "%s: %s", name, out);
        }
    }
    /* A bad value: one line on stderr naming it, and the default. */
    tu_tmp_cleanup();
    tu_tmp_make();
    int rc = run_probe("prof:true,prof_format:xml", probe_path(), "churn 1000", out, sizeof(out));
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert_not_null(strstr(out, "prof_format"), "no message naming the bad option:\n%s", out);
    cr_assert_not_null(strstr(out, "format=text\n"), "%s", out);
}

/* Interval dumps run inside malloc's slow path: every format there, valid,
 * with no recursion or deadlock; and a peak dump from a probe. */
Test(prof_formats, interval_dumps_inside_malloc_in_every_format, .timeout = 300, .fini = tu_tmp_cleanup)
{
    static const char *const formats[] = {"pprof", "folded", "svg"};
    static const char *const suffixes[] = {".i.pb.gz", ".i.folded", ".i.svg"};
    char conf[512], out[1 << 14], cmd[1024];
    for (size_t i = 0; i < MA_ARRAY_LEN(formats); i++) {
        tu_tmp_cleanup();
        tu_tmp_make();
        snprintf(conf, sizeof(conf), "prof:true,lg_prof_sample:14,lg_prof_interval:23,prof_format:%s,prof_prefix:%s/iv",
                 formats[i], tu_tmpdir());
        int rc = run_probe(conf, probe_path(), "churn 67108864", out, sizeof(out));
        cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
        int n = tmp_count(suffixes[i]);
        cr_assert_geq(n, 4, "%s: %d interval dumps for 64 MiB at 8 MiB", formats[i], n);
        if (strcmp(formats[i], "pprof") == 0 && have("gzip"))
            snprintf(cmd, sizeof(cmd), "cd %s && for f in *.i.pb.gz; do gzip -t $f || exit 1; done", tu_tmpdir());
        else if (strcmp(formats[i], "svg") == 0 && have("xmllint"))
            snprintf(cmd, sizeof(cmd), "cd %s && xmllint --noout *.i.svg", tu_tmpdir());
        else
            snprintf(cmd, sizeof(cmd), "cd %s && ! grep -v -E '^[^ ].* [0-9]+$' *.i.folded", tu_tmpdir());
        cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "%s dumps are malformed:\n%s", formats[i], out);
    }
    tu_tmp_cleanup();
    tu_tmp_make();
    snprintf(conf, sizeof(conf), "prof:true,lg_prof_sample:14,prof_format:svg,prof_prefix:%s/pk", tu_tmpdir());
    int rc = run_probe(conf, probe_path(), "peak", out, sizeof(out));
    cr_assert_eq(rc, 0, "probe failed (%d):\n%s", rc, out);
    cr_assert_eq(tmp_count(".p.svg"), 1);
}

/* A dump calls no malloc: this thread's allocation counter does not move
 * (an allocation inside the allocator would also risk deadlock). */
Test(prof_formats, dumps_in_every_format_allocate_nothing, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    static void **keep;
    prof_start(12, 51, true);
    in_thread(flame_worker, &keep);
    keep = malloc(1000 * sizeof(void *));
    for (int i = 0; i < 1000; i++)
        keep[i] = malloc(1000); /* samples of this thread too */
    static const char *const formats[] = {"text", "pprof", "folded", "svg"};
    for (size_t i = 0; i < MA_ARRAY_LEN(formats); i++) {
        char path[256];
        tu_tmp_path(path, sizeof(path), formats[i]);
        set_format(formats[i]);
        uint64_t a0, d0, a1, d1;
        size_t sz = sizeof(uint64_t);
        const char *p = path;
        cr_assert_eq(mallctl("thread.allocated", &a0, &sz, NULL, 0), 0);
        cr_assert_eq(mallctl("thread.deallocated", &d0, &sz, NULL, 0), 0);
        cr_assert_eq(mallctl("prof.dump", NULL, NULL, &p, sizeof(p)), 0);
        cr_assert_eq(mallctl("prof.dump_peak", NULL, NULL, &p, sizeof(p)), 0);
        cr_assert_eq(mallctl("thread.allocated", &a1, &sz, NULL, 0), 0);
        cr_assert_eq(mallctl("thread.deallocated", &d1, &sz, NULL, 0), 0);
        cr_assert_eq(a1, a0, "%s dump allocated %llu bytes", formats[i], (unsigned long long)(a1 - a0));
        cr_assert_eq(d1, d0, "%s dump freed %llu bytes", formats[i], (unsigned long long)(d1 - d0));
    }
}

/* ---------------------------------------------------------------------
 * myalloc-prof.
 */

SITE void site_cli_small(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        keep[i] = malloc(100);
    BARRIER(keep);
}

SITE void site_cli_big(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(5000);
        memset(keep[i], 3, 5000);
    }
    BARRIER(keep);
}

static void *cli_worker(void *arg)
{
    void **keep = malloc(70000 * sizeof(void *));
    site_cli_small(keep, 60000);
    site_cli_big(keep + 60000, 3000);
    for (size_t i = 0; i < 60000; i += 3)
        free(keep[i]);
    *(void ***)arg = keep;
    return NULL;
}

static const char *tool_path(void)
{
    static char p[PATH_MAX + 64];
    char build[PATH_MAX];
    cr_assert_not_null(realpath(tu_build_dir(), build));
    snprintf(p, sizeof(p), "%s/myalloc-prof", build);
    cr_assert_eq(access(p, X_OK), 0, "no %s (make %s)", p, p);
    return p;
}

/* The row of out whose text ends with "  <what>" (the stack or function). */
static const char *row_of(const char *out, const char *what)
{
    for (const char *l = out; l != NULL && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const char *nl = strchr(l, '\n');
        size_t len = nl ? (size_t)(nl - l) : strlen(l);
        const char *s = memmem(l, len, what, strlen(what));
        if (s != NULL && s > l + 2 && s[-1] == ' ' && s[-2] == ' ')
            return l;
    }
    return NULL;
}

Test(prof_formats, myalloc_prof_prints_unbiased_bytes_with_standard_errors, .timeout = 120, .fini = tu_tmp_cleanup)
{
    tu_tmp_make();
    static void **keep;
    prof_start(14, 61, true);
    in_thread(cli_worker, &keep);
    char path[256], cmd[1024], out[1 << 16];
    tu_tmp_path(path, sizeof(path), "c.heap");
    dump_as("text", path);
    tprof_t tp;
    tprof_load(path, &tp);
    snprintf(cmd, sizeof(cmd), "%s --bytes -n 0 %s", tool_path(), path);
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "%s", out);
    /* Totals: the readers' formula, and sqrt of the summed variances. */
    double tb, tse, to, tose, var = 0, varo = 0;
    const char *tl = strstr(out, "total: ");
    cr_assert_not_null(tl, "%s", out);
    cr_assert_eq(sscanf(tl, "total: %lf +- %lf in %lf +- %lf objects", &tb, &tse, &to, &tose), 4, "%s", out);
    for (size_t i = 0; i < tp.nrecs; i++) {
        const trec_t *r = &tp.recs[i];
        if (r->n == 0)
            continue;
        double z = (double)r->b / (double)r->n, q = -expm1(-z / (double)tp.R);
        var += z * z * (double)r->n * (1 - q) / (q * q);
        varo += (double)r->n * (1 - q) / (q * q);
    }
    cr_assert_leq(fabs(tb - tp.live_bytes), 1, "total %.0f, formula %.1f", tb, tp.live_bytes);
    cr_assert_leq(fabs(to - tp.live_objs), 1, "objects %.0f, formula %.1f", to, tp.live_objs);
    cr_assert_leq(fabs(tse - sqrt(var)), 1, "s.e. %.0f, formula %.1f", tse, sqrt(var));
    cr_assert_leq(fabs(tose - sqrt(varo)), 1, "objects s.e. %.0f, formula %.1f", tose, sqrt(varo));
    /* One site: one record (one size class), so its error is the record's
     * Z sqrt(n (1 - p)) / p; its residency column. */
    est_t big = tprof_site(&tp, "site_cli_big"), small = tprof_site(&tp, "site_cli_small");
    cr_assert_eq(big.nrecs, 1);
    const char *row = row_of(out, "site_cli_big < cli_worker");
    cr_assert_not_null(row, "no row for site_cli_big:\n%s", out);
    double rb, rse, rpct, rcum, ro, rose, rres, rswp;
    cr_assert_eq(sscanf(row, "%lf %lf %lf%% %lf%% %lf %lf %lf %lf", &rb, &rse, &rpct, &rcum, &ro, &rose, &rres, &rswp),
                 8, "%.200s", row);
    double n = (double)big.samples, z = (double)big.raw_bytes / n, q = -expm1(-z / (double)tp.R);
    cr_assert_leq(fabs(rb - big.bytes), 1, "row %.0f, formula %.1f", rb, big.bytes);
    cr_assert_leq(fabs(rse - z * sqrt(n * (1 - q)) / q), 1, "row s.e. %.0f", rse);
    cr_assert_leq(fabs(rres - big.bytes), 1, "touched site: resident %.0f of %.0f", rres, big.bytes);
    cr_assert_eq(rswp, 0);
    /* Rows by bytes: the larger site first. */
    const char *rs = row_of(out, "site_cli_small < cli_worker");
    cr_assert_not_null(rs, "%s", out);
    cr_assert_eq(big.bytes > small.bytes, row < rs, "rows not sorted by bytes:\n%s", out);
    /* Human units by default, one row per function, cumulative counts. */
    snprintf(cmd, sizeof(cmd), "%s --functions %s", tool_path(), path);
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "%s", out);
    cr_assert_not_null(row_of(out, "site_cli_big"), "%s", out);
    cr_assert_not_null(strstr(out, "MiB"), "%s", out);
    snprintf(cmd, sizeof(cmd), "%s --alloc --bytes %s", tool_path(), path);
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "%s", out);
    tl = strstr(out, "total: ");
    cr_assert_not_null(tl, "%s", out);
    cr_assert_eq(sscanf(tl, "total: %lf", &tb), 1);
    cr_assert_leq(fabs(tb - tp.acc_bytes), 1, "cumulative %.0f, formula %.1f", tb, tp.acc_bytes);
    /* Errors are reported. */
    snprintf(cmd, sizeof(cmd), "%s %s/none.heap", tool_path(), tu_tmpdir());
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 1, "%s", out);
    snprintf(cmd, sizeof(cmd), "%s %s", tool_path(), self_exe());
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 1, "%s", out);
    cr_assert_not_null(strstr(out, "not a heap profile"), "%s", out);
    free(tp.recs);
}
