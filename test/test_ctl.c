/*
 * mallctl, mallctlnametomib, mallctlbymib: every name in the tables (read
 * with its type's size, written and read back where writable), every error
 * code, MIB round trips, statistics that must agree with the program and
 * the kernel, malloc_stats_print (text, JSON, the opts letters,
 * stats_print:true), and the docs naming every option and every name.
 */
#include <inttypes.h>
#include <limits.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "arena/arena.h"
#include "core/conf.h"
#include "core/ctl.h"
#include "myalloc.h"
#include "sizeclass/sizeclass.h"
#include "test_util.h"

#define ALL MALLCTL_ARENAS_ALL

/* ---------------------------------------------------------------------
 * Helpers.
 */

/* Read name into v, which must be exactly its size. */
static void read_ctl(const char *name, void *v, size_t size)
{
    size_t len = size;
    int r = mallctl(name, v, &len, NULL, 0);
    cr_assert_eq(r, 0, "mallctl(\"%s\") = %d", name, r);
    cr_assert_eq(len, size, "mallctl(\"%s\") wrote %zu bytes, %zu expected", name, len, size);
}

static unsigned read_unsigned(const char *name)
{
    unsigned v;
    read_ctl(name, &v, sizeof(v));
    return v;
}

static size_t read_size(const char *name)
{
    size_t v;
    read_ctl(name, &v, sizeof(v));
    return v;
}

static uint64_t read_u64(const char *name)
{
    uint64_t v;
    read_ctl(name, &v, sizeof(v));
    return v;
}

static bool read_bool(const char *name)
{
    bool v;
    read_ctl(name, &v, sizeof(v));
    return v;
}

static const char *read_str(const char *name)
{
    const char *v = NULL;
    read_ctl(name, &v, sizeof(v));
    cr_assert_not_null(v, "%s is NULL", name);
    return v;
}

static void new_epoch(void)
{
    uint64_t e = 1;
    cr_assert_eq(mallctl("epoch", NULL, NULL, &e, sizeof(e)), 0);
}

static void flush_tcache(void)
{
    cr_assert_eq(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
}

static unsigned nbins(void) { return read_unsigned("arenas.nbins"); }
static unsigned nlextents(void) { return read_unsigned("arenas.nlextents"); }
static unsigned narenas(void) { return read_unsigned("arenas.narenas"); }

/* Every entry of every table, names copied (ctl_walk's opt.* names live in
 * a buffer it reuses). */
typedef struct entries {
    ctl_entry_t e[1024];
    char names[1024][96];
    unsigned n;
} entries_t;

static void collect(const ctl_entry_t *e, void *arg)
{
    entries_t *es = arg;
    cr_assert_lt(es->n, 1024);
    cr_assert_lt(strlen(e->name), sizeof(es->names[0]));
    strcpy(es->names[es->n], e->name);
    es->e[es->n] = *e;
    es->e[es->n].name = es->names[es->n];
    es->n++;
}

static entries_t *all_entries(void)
{
    static entries_t es;
    es.n = 0;
    ctl_walk("", collect, &es);
    cr_assert_gt(es.n, 100);
    return &es;
}

/* The name with each <i> replaced by the next of vals. */
static void concrete(const char *pattern, const size_t *vals, char *out, size_t outlen)
{
    size_t o = 0, k = 0;
    for (const char *p = pattern; *p;) {
        if (strncmp(p, "<i>", 3) == 0) {
            o += (size_t)snprintf(out + o, outlen - o, "%zu", vals[k++]);
            p += 3;
        } else {
            out[o++] = *p++;
        }
        cr_assert_lt(o, outlen);
    }
    out[o] = '\0';
}

static unsigned count_idx(const char *name)
{
    unsigned n = 0;
    for (const char *s = name; (s = strstr(s, "<i>")) != NULL; s += 3)
        n++;
    return n;
}

/* Valid index choices for the k-th <i> of a pattern: {low, high}. */
static void index_choices(const char *pattern, unsigned k, size_t out[2])
{
    const char *s = pattern;
    for (unsigned j = 0; j <= k; j++) {
        const char *n = strstr(s, "<i>");
        cr_assert_not_null(n);
        if (j == k) {
            size_t pre = (size_t)(n - pattern);
            if (pre >= 4 && strncmp(n - 4, "bin.", 4) == 0) {
                out[0] = 0, out[1] = nbins() - 1;
            } else if (pre >= 5 && strncmp(n - 5, "bins.", 5) == 0) {
                out[0] = 0, out[1] = nbins() - 1;
            } else if (pre >= 8 && strncmp(n - 8, "lextent.", 8) == 0) {
                out[0] = 0, out[1] = nlextents() - 1;
            } else if (pre >= 9 && strncmp(n - 9, "lextents.", 9) == 0) {
                out[0] = 0, out[1] = nlextents() - 1;
            } else if ((pre >= 6 && strncmp(n - 6, "arena.", 6) == 0) ||
                       (pre >= 7 && strncmp(n - 7, "arenas.", 7) == 0)) {
                out[0] = 0, out[1] = ALL;
            } else {
                cr_assert_fail("no index rule for the <i> of %s", pattern);
            }
            return;
        }
        s = n + 3;
    }
}

/* ---------------------------------------------------------------------
 * Every name: read with the right size; wrong sizes; access rules.
 */

static void check_read(const ctl_entry_t *e, const char *name)
{
    size_t sz = ctl_type_size(e->type);
    unsigned char buf[32], buf2[32];
    size_t len;
    if (e->type == CTL_VOID) {
        cr_assert_eq(mallctl(name, NULL, NULL, NULL, 0), 0, "void %s", name);
        len = 8;
        cr_assert_eq(mallctl(name, buf, &len, NULL, 0), EPERM, "reading void %s", name);
        uint64_t v = 1;
        cr_assert_eq(mallctl(name, NULL, NULL, &v, sizeof(v)), EPERM, "writing void %s", name);
        cr_assert_eq(mallctl(name, NULL, NULL, NULL, 8), EPERM, "newlen for void %s", name);
        return;
    }
    if (!(e->access & CTL_R)) {
        len = sz;
        cr_assert_eq(mallctl(name, buf, &len, NULL, 0), EPERM, "reading write-only %s", name);
        return;
    }
    memset(buf, 0xee, sizeof(buf));
    len = sz;
    int r = mallctl(name, buf, &len, NULL, 0);
    /* jemalloc: an arena's own settings (arena.<i>.dirty_decay_ms, ...)
     * do not exist for MALLCTL_ARENAS_ALL: EFAULT. */
    if (r == EFAULT && strncmp(name, "arena.4096.", 11) == 0 && (e->access & CTL_W))
        return;
    cr_assert_eq(r, 0, "mallctl(\"%s\") read = %d", name, r);
    cr_assert_eq(len, sz);
    for (size_t i = sz; i < sizeof(buf); i++)
        cr_assert_eq(buf[i], 0xee, "%s wrote past its %zu bytes", name, sz);
    if (e->type == CTL_STRING || e->type == CTL_PTR) {
        void *ptr;
        memcpy(&ptr, buf, sizeof(ptr));
        cr_assert_not_null(ptr, "%s read NULL", name);
    }
    if (e->type == CTL_BOOL)
        cr_assert(buf[0] == 0 || buf[0] == 1, "%s: bool %u", name, buf[0]);
    /* Wrong *oldlenp: EINVAL, min(size, *oldlenp) bytes copied. */
    size_t wrong[] = {sz + 1, sz - 1, 0};
    for (size_t w = 0; w < MA_ARRAY_LEN(wrong); w++) {
        if (wrong[w] == sz || wrong[w] > sizeof(buf2))
            continue;
        memset(buf2, 0xee, sizeof(buf2));
        len = wrong[w];
        cr_assert_eq(mallctl(name, buf2, &len, NULL, 0), EINVAL, "%s read with %zu bytes", name, wrong[w]);
        cr_assert_eq(len, MA_MIN(sz, wrong[w]));
        for (size_t i = len; i < sizeof(buf2); i++)
            cr_assert_eq(buf2[i], 0xee, "%s copied past *oldlenp", name);
    }
    /* Read-only: writing is EPERM (even with the right size). */
    if (!(e->access & CTL_W)) {
        cr_assert_eq(mallctl(name, NULL, NULL, buf, sz), EPERM, "writing read-only %s", name);
        len = sz;
        cr_assert_eq(mallctl(name, buf2, &len, buf, sz), EPERM);
    }
    /* Through a MIB: the same value for values that do not move. */
    size_t mib[CTL_MAX_DEPTH], miblen = CTL_MAX_DEPTH;
    cr_assert_eq(mallctlnametomib(name, mib, &miblen), 0, "mallctlnametomib(%s)", name);
    len = sz;
    memset(buf2, 0xee, sizeof(buf2));
    cr_assert_eq(mallctlbymib(mib, miblen, buf2, &len, NULL, 0), 0, "mallctlbymib(%s)", name);
    cr_assert_eq(len, sz);
    if (strncmp(name, "config.", 7) == 0 || strncmp(name, "opt.", 4) == 0 ||
        strncmp(name, "arenas.", 7) == 0 || strcmp(name, "version") == 0) {
        if (e->type == CTL_STRING) {
            const char *a, *b;
            memcpy(&a, buf, sizeof(a));
            memcpy(&b, buf2, sizeof(b));
            cr_assert_str_eq(a, b, "%s", name);
        } else {
            cr_assert_eq(memcmp(buf, buf2, sz), 0, "%s by name and by MIB differ", name);
        }
    }
}

Test(ctl, every_name_reads_with_its_type_size)
{
    entries_t *es = all_entries();
    unsigned checked = 0;
    for (unsigned k = 0; k < es->n; k++) {
        const ctl_entry_t *e = &es->e[k];
        unsigned ni = count_idx(e->name);
        char name[128];
        if (ni == 0) {
            check_read(e, e->name);
            checked++;
            continue;
        }
        /* Low and high choices of each index (every combination). */
        size_t ch[2][2];
        for (unsigned i = 0; i < ni; i++)
            index_choices(e->name, i, ch[i]);
        for (unsigned mask = 0; mask < (1u << ni); mask++) {
            size_t vals[2];
            for (unsigned i = 0; i < ni; i++)
                vals[i] = ch[i][(mask >> i) & 1];
            concrete(e->name, vals, name, sizeof(name));
            check_read(e, name);
            checked++;
        }
    }
    cr_assert_gt(checked, es->n);
}

Test(ctl, the_tables_hold_the_names_the_issue_lists)
{
    const char *names[] = {
        "version", "epoch", "config.debug", "config.prof", "config.stats", "opt.abort_conf",
        "opt.narenas", "opt.tcache", "opt.tcache_max", "opt.stats_print", "opt.stats_print_opts",
        "opt.check_sized", "opt.prof", "opt.prof_active", "opt.lg_prof_sample", "opt.lg_prof_interval",
        "opt.prof_prefix", "prof.active", "prof.dump", "prof.reset", "prof.lg_sample", "thread.arena",
        "thread.allocated", "thread.allocatedp", "thread.deallocated", "thread.deallocatedp",
        "thread.tcache.enabled", "thread.tcache.flush", "thread.prof.active", "thread.prof.name",
        "arena.<i>.purge", "arena.<i>.decay", "arenas.narenas", "arenas.quantum", "arenas.page",
        "arenas.nbins", "arenas.nlextents", "arenas.bin.<i>.size", "arenas.bin.<i>.nregs",
        "arenas.bin.<i>.slab_size", "arenas.lextent.<i>.size", "arenas.tcache_max", "stats.allocated",
        "stats.active", "stats.metadata", "stats.resident", "stats.mapped", "stats.retained",
        "stats.arenas.<i>.bins.<i>.nmalloc", "stats.arenas.<i>.bins.<i>.ndalloc",
        "stats.arenas.<i>.bins.<i>.nrequests", "stats.arenas.<i>.bins.<i>.curregs",
        "stats.arenas.<i>.bins.<i>.curslabs", "stats.arenas.<i>.bins.<i>.nfills",
        "stats.arenas.<i>.bins.<i>.nflushes", "stats.arenas.<i>.lextents.<i>.nmalloc",
        "stats.arenas.<i>.lextents.<i>.ndalloc", "stats.arenas.<i>.lextents.<i>.curlextents",
    };
    entries_t *es = all_entries();
    for (size_t i = 0; i < MA_ARRAY_LEN(names); i++) {
        bool found = false;
        for (unsigned k = 0; k < es->n && !found; k++)
            found = strcmp(es->e[k].name, names[i]) == 0;
        cr_assert(found, "%s is not in the tables", names[i]);
    }
    /* Every option is an opt.* name of the option's mallctl type, read-only. */
    for (unsigned o = 0; o < conf_noptions; o++) {
        char name[128];
        snprintf(name, sizeof(name), "opt.%s", conf_options[o].name);
        bool found = false;
        for (unsigned k = 0; k < es->n && !found; k++) {
            if (strcmp(es->e[k].name, name) == 0) {
                found = true;
                cr_assert_eq((int)es->e[k].type, conf_options[o].ctl_type, "%s", name);
                cr_assert_eq(es->e[k].access, CTL_R, "%s", name);
            }
        }
        cr_assert(found, "%s missing", name);
    }
    /* No name twice. */
    for (unsigned a = 0; a < es->n; a++)
        for (unsigned b = a + 1; b < es->n; b++)
            cr_assert_str_neq(es->e[a].name, es->e[b].name);
}

Test(ctl, jemalloc_types_of_well_known_names)
{
    struct {
        const char *name;
        ctl_type_t type;
    } t[] = {
        {"version", CTL_STRING},         {"epoch", CTL_UINT64},
        {"opt.narenas", CTL_UNSIGNED},   {"opt.tcache_max", CTL_SIZE},
        {"opt.lg_prof_sample", CTL_SIZE}, {"opt.lg_prof_interval", CTL_SSIZE},
        {"opt.prof_prefix", CTL_STRING}, {"thread.arena", CTL_UNSIGNED},
        {"thread.allocated", CTL_UINT64}, {"thread.allocatedp", CTL_PTR},
        {"arenas.narenas", CTL_UNSIGNED}, {"arenas.quantum", CTL_SIZE},
        {"arenas.page", CTL_SIZE},       {"arenas.nbins", CTL_UNSIGNED},
        {"arenas.bin.0.nregs", CTL_UINT32}, {"arenas.bin.0.size", CTL_SIZE},
        {"stats.allocated", CTL_SIZE},   {"stats.resident", CTL_SIZE},
        {"stats.arenas.0.pactive", CTL_SIZE}, {"stats.arenas.0.bins.0.nmalloc", CTL_UINT64},
        {"stats.arenas.0.bins.0.curregs", CTL_SIZE}, {"stats.arenas.0.lextents.0.curlextents", CTL_SIZE},
        {"prof.active", CTL_BOOL},       {"prof.lg_sample", CTL_SIZE},
        {"prof.interval", CTL_UINT64},   {"prof.reset", CTL_SIZE},
    };
    for (size_t i = 0; i < MA_ARRAY_LEN(t); i++) {
        ctl_entry_t e;
        ctl_req_t req;
        memset(&req, 0, sizeof(req));
        cr_assert_eq(ctl_lookup(t[i].name, &e, &req), 0, "%s", t[i].name);
        cr_assert_eq(e.type, t[i].type, "%s has type %d, jemalloc's is %d", t[i].name, e.type, t[i].type);
    }
}

Test(ctl, values_are_what_they_should_be)
{
    cr_assert_str_eq(read_str("version"), MYALLOC_VERSION);
    cr_assert_eq(read_size("arenas.page"), PAGE);
    cr_assert_eq(read_size("arenas.quantum"), QUANTUM);
    cr_assert_eq(nbins(), SC_NBINS);
    cr_assert_eq(nlextents(), SC_NSIZES - SC_NBINS);
    cr_assert_eq(narenas(), arena_narenas);
    cr_assert_eq(read_unsigned("opt.narenas"), opt_narenas);
    cr_assert_eq(read_bool("config.stats"), true);
    cr_assert_eq(read_bool("config.prof"), true);
    cr_assert_eq(read_bool("opt.tcache"), true);
    cr_assert_eq(read_size("opt.tcache_max"), (size_t)32 << 10);
    cr_assert_eq(read_size("arenas.tcache_max"), (size_t)32 << 10);
    cr_assert_str_eq(read_str("opt.prof_bt"), "gcc");
    cr_assert_eq(read_bool("arena.0.initialized"), true);
    for (unsigned b = 0; b < SC_NBINS; b++) {
        char name[64];
        snprintf(name, sizeof(name), "arenas.bin.%u.size", b);
        cr_assert_eq(read_size(name), sc_index2size(b));
        snprintf(name, sizeof(name), "arenas.bin.%u.nregs", b);
        uint32_t nregs;
        size_t len = sizeof(nregs);
        cr_assert_eq(mallctl(name, &nregs, &len, NULL, 0), 0);
        snprintf(name, sizeof(name), "arenas.bin.%u.slab_size", b);
        size_t slab = read_size(name);
        cr_assert_eq(slab % PAGE, 0);
        cr_assert_eq(nregs, slab / sc_index2size(b), "bin %u: %u regions of %zu in %zu", b, nregs,
                     sc_index2size(b), slab);
    }
    for (unsigned l = 0; l < SC_NSIZES - SC_NBINS; l++) {
        char name[64];
        snprintf(name, sizeof(name), "arenas.lextent.%u.size", l);
        cr_assert_eq(read_size(name), sc_index2size(SC_NBINS + l));
    }
    cr_assert_eq(read_size("arenas.lextent.0.size"), SC_LARGE_MINCLASS);
    /* nallocx and the class tables agree. */
    cr_assert_eq(nallocx(1, 0), read_size("arenas.bin.0.size"));
}

/* ---------------------------------------------------------------------
 * Writable names: write, read back.
 */

static const char *writable[] = {"epoch",
                                 "thread.arena",
                                 "thread.tcache.enabled",
                                 "thread.prof.active",
                                 "thread.prof.name",
                                 "prof.active",
                                 "prof.thread_active_init",
                                 "prof.dump",
                                 "prof.prefix",
                                 "prof.gdump",
                                 "prof.reset",
                                 "prof.format",
                                 "prof.dump_peak",
                                 "background_thread",
                                 "arenas.dirty_decay_ms",
                                 "arenas.muzzy_decay_ms",
                                 "arena.<i>.dirty_decay_ms",
                                 "arena.<i>.muzzy_decay_ms",
                                 "arenas.dirty_hold_ms",
                                 "arena.<i>.dirty_hold_ms"};

static bool name_exists(const char *name)
{
    ctl_entry_t e;
    ctl_req_t req;
    memset(&req, 0, sizeof(req));
    return ctl_lookup(name, &e, &req) == 0;
}

Test(ctl, every_writable_name_is_covered_by_the_write_tests)
{
    entries_t *es = all_entries();
    for (unsigned k = 0; k < es->n; k++) {
        if (!(es->e[k].access & CTL_W))
            continue;
        bool found = false;
        for (size_t i = 0; i < MA_ARRAY_LEN(writable) && !found; i++)
            found = strcmp(writable[i], es->e[k].name) == 0;
        cr_assert(found, "writable %s has no write test in test_ctl.c", es->e[k].name);
    }
}

static void write_bool_and_back(const char *name)
{
    bool old = read_bool(name);
    for (int i = 0; i < 2; i++) {
        bool v = i == 0 ? !old : old, prev;
        size_t len = sizeof(prev);
        cr_assert_eq(mallctl(name, &prev, &len, &v, sizeof(v)), 0, "%s", name);
        cr_assert_eq(prev, i == 0 ? old : !old, "%s: old value on write", name);
        cr_assert_eq(read_bool(name), v, "%s did not take %d", name, v);
        /* Wrong newlen. */
        cr_assert_eq(mallctl(name, NULL, NULL, &v, sizeof(v) + 1), EINVAL, "%s newlen+1", name);
        cr_assert_eq(mallctl(name, NULL, NULL, &v, 0), EINVAL, "%s newlen 0", name);
    }
}

Test(ctl, write_and_read_back)
{
    /* epoch */
    uint64_t e0 = read_u64("epoch"), e1 = 1, old;
    size_t len = sizeof(old);
    cr_assert_eq(mallctl("epoch", &old, &len, &e1, sizeof(e1)), 0);
    cr_assert_gt(read_u64("epoch"), e0);
    cr_assert_eq(mallctl("epoch", NULL, NULL, &e1, 4), EINVAL);

    /* thread.arena */
    unsigned n = narenas(), target = n - 1, prev;
    len = sizeof(prev);
    cr_assert_eq(mallctl("thread.arena", &prev, &len, &target, sizeof(target)), 0);
    cr_assert_eq(read_unsigned("thread.arena"), target);
    void *p = malloc(1 << 20);
    char name[64];
    snprintf(name, sizeof(name), "stats.arenas.%u.large.allocated", target);
    cr_assert_geq(read_size(name), (size_t)1 << 20, "allocation did not go to arena %u", target);
    free(p);
    target = 0;
    cr_assert_eq(mallctl("thread.arena", NULL, NULL, &target, sizeof(target)), 0);
    cr_assert_eq(read_unsigned("thread.arena"), 0);

    write_bool_and_back("thread.tcache.enabled");
    write_bool_and_back("thread.prof.active");
    write_bool_and_back("prof.active");
    write_bool_and_back("prof.thread_active_init");
    write_bool_and_back("prof.gdump");
    bool f = false;
    cr_assert_eq(mallctl("prof.active", NULL, NULL, &f, sizeof(f)), 0);

    /* thread.prof.name */
    const char *nm = "worker-7";
    cr_assert_eq(mallctl("thread.prof.name", NULL, NULL, &nm, sizeof(nm)), 0);
    cr_assert_str_eq(read_str("thread.prof.name"), "worker-7");

    /* prof.reset sets the sample rate. */
    size_t lg = 15;
    cr_assert_eq(mallctl("prof.reset", NULL, NULL, &lg, sizeof(lg)), 0);
    cr_assert_eq(read_size("prof.lg_sample"), 15);
    lg = 19;
    cr_assert_eq(mallctl("prof.reset", NULL, NULL, &lg, sizeof(lg)), 0);
    cr_assert_eq(read_size("prof.lg_sample"), 19);
    /* With no value: the current rate. */
    cr_assert_eq(mallctl("prof.reset", NULL, NULL, NULL, 0), 0);
    cr_assert_eq(read_size("prof.lg_sample"), 19);

    /* prof.dump to a file, then prof.prefix + a dump with no file name. */
    char dir[] = "/tmp/myalloc_ctl_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/one.heap", dir);
    const char *pp = path;
    cr_assert_eq(mallctl("prof.dump", NULL, NULL, &pp, sizeof(pp)), 0);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "prof.dump wrote no %s", path);
    cr_assert_gt(st.st_size, 0);
    char prefix[PATH_MAX];
    snprintf(prefix, sizeof(prefix), "%s/pre", dir);
    const char *pre = prefix;
    cr_assert_eq(mallctl("prof.prefix", NULL, NULL, &pre, sizeof(pre)), 0);
    cr_assert_eq(mallctl("prof.dump", NULL, NULL, NULL, 0), 0);
    snprintf(path, sizeof(path), "%s/pre.%d.0.m.heap", dir, (int)getpid());
    cr_assert_eq(stat(path, &st), 0, "prof.dump with prof.prefix wrote no %s", path);

    /* prof.format: one of the dump formats; anything else is EINVAL. */
    if (name_exists("prof.format")) {
        const char *fmt = "folded", *cur = NULL;
        cr_assert_eq(mallctl("prof.format", NULL, NULL, &fmt, sizeof(fmt)), 0);
        cr_assert_str_eq(read_str("prof.format"), "folded");
        const char *bogus = "bogus";
        len = sizeof(cur);
        int rf = mallctl("prof.format", &cur, &len, &bogus, sizeof(bogus));
        cr_assert_eq(rf, EINVAL, "prof.format = \"bogus\": %d", rf);
        cr_assert_str_eq(read_str("prof.format"), "folded", "a refused format changed the setting");
        fmt = "text";
        cr_assert_eq(mallctl("prof.format", NULL, NULL, &fmt, sizeof(fmt)), 0);
        cr_assert_str_eq(read_str("prof.format"), "text");
    }
    /* prof.dump_peak: the peak profile, to a file. */
    if (name_exists("prof.dump_peak")) {
        snprintf(path, sizeof(path), "%s/peak.heap", dir);
        cr_assert_eq(mallctl("prof.dump_peak", NULL, NULL, &pp, sizeof(pp)), 0);
        cr_assert_eq(stat(path, &st), 0, "prof.dump_peak wrote no %s", path);
        const char *bad = "/nonexistent-dir-myalloc/peak.heap";
        cr_assert_eq(mallctl("prof.dump_peak", NULL, NULL, &bad, sizeof(bad)), EFAULT);
    }
    char cmd[PATH_MAX + 16], out[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    tu_run(cmd, out, sizeof(out));
}

/* An ssize_t setting: the good values written read back (then the old one
 * again), the bad ones are refused (with bad_err, or any error when 0) and
 * leave the value as it was, a 4-byte value is EINVAL. */
static void ssize_round_trip(const char *name, const ssize_t *good, size_t ngood, const ssize_t *bad,
                             size_t nbad, int bad_err)
{
    ssize_t old, v, back;
    size_t len = sizeof(old);
    cr_assert_eq(mallctl(name, &old, &len, NULL, 0), 0, "%s", name);
    for (size_t i = 0; i <= ngood; i++) {
        v = i < ngood ? good[i] : old;
        cr_assert_eq(mallctl(name, NULL, NULL, &v, sizeof(v)), 0, "%s = %zd", name, v);
        len = sizeof(back);
        cr_assert_eq(mallctl(name, &back, &len, NULL, 0), 0);
        cr_assert_eq(back, v, "%s: wrote %zd, read %zd", name, v, back);
    }
    for (size_t i = 0; i < nbad; i++) {
        v = bad[i];
        int r = mallctl(name, NULL, NULL, &v, sizeof(v));
        cr_assert(bad_err != 0 ? r == bad_err : r != 0, "%s = %zd accepted (%d)", name, v, r);
        len = sizeof(back);
        cr_assert_eq(mallctl(name, &back, &len, NULL, 0), 0);
        cr_assert_eq(back, old, "%s changed by a refused write", name);
    }
    cr_assert_eq(mallctl(name, NULL, NULL, &v, sizeof(int)), EINVAL, "%s with a 4-byte value", name);
}

/* Decay times: milliseconds, -1 (never) and up. */
static void decay_ms_round_trip(const char *name)
{
    static const ssize_t good[] = {0, -1, 1234}, bad[] = {-2};
    ssize_round_trip(name, good, MA_ARRAY_LEN(good), bad, MA_ARRAY_LEN(bad), 0);
}

/* Hold times: milliseconds, 0 (none) .. 2^31-1. */
static void hold_ms_round_trip(const char *name)
{
    static const ssize_t good[] = {0, 1234, INT32_MAX}, bad[] = {-1, (ssize_t)INT32_MAX + 1};
    ssize_round_trip(name, good, MA_ARRAY_LEN(good), bad, MA_ARRAY_LEN(bad), EFAULT);
}

Test(ctl, write_and_read_back_decay_and_background_thread)
{
    if (!name_exists("arenas.dirty_decay_ms"))
        cr_skip_test("no decay settings in this build");
    decay_ms_round_trip("arenas.dirty_decay_ms");
    decay_ms_round_trip("arenas.muzzy_decay_ms");
    decay_ms_round_trip("arena.0.dirty_decay_ms");
    decay_ms_round_trip("arena.0.muzzy_decay_ms");
    hold_ms_round_trip("arenas.dirty_hold_ms");
    hold_ms_round_trip("arena.0.dirty_hold_ms");
    char name[64];
    snprintf(name, sizeof(name), "arena.%d.dirty_decay_ms", ALL);
    ssize_t v = 100;
    cr_assert_eq(mallctl(name, NULL, NULL, &v, sizeof(v)), EFAULT, "jemalloc: no per-arena setting for all");
    snprintf(name, sizeof(name), "arena.%d.dirty_hold_ms", ALL);
    cr_assert_eq(mallctl(name, NULL, NULL, &v, sizeof(v)), EFAULT, "no per-arena hold for all");
    if (name_exists("background_thread")) {
        bool on = true, off = false, now;
        int r = mallctl("background_thread", NULL, NULL, &on, sizeof(on));
        cr_assert(r == 0 || r == EAGAIN, "background_thread = true: %d", r);
        if (r == 0)
            cr_assert_eq(read_bool("background_thread"), true);
        cr_assert_eq(mallctl("background_thread", NULL, NULL, &off, sizeof(off)), 0);
        size_t len = sizeof(now);
        cr_assert_eq(mallctl("background_thread", &now, &len, NULL, 0), 0);
        cr_assert_eq(now, false);
    }
}

/* ---------------------------------------------------------------------
 * Error codes.
 */

Test(ctl, enoent_unknown_partial_and_out_of_range_names)
{
    unsigned nb = nbins(), nl = nlextents();
    char bin_beyond[64], lext_beyond[64], stats_bin_beyond[80], stats_lext_beyond[80], no_arena[64],
        arena_beyond[64];
    snprintf(bin_beyond, sizeof(bin_beyond), "arenas.bin.%u.size", nb);
    snprintf(lext_beyond, sizeof(lext_beyond), "arenas.lextent.%u.size", nl);
    snprintf(stats_bin_beyond, sizeof(stats_bin_beyond), "stats.arenas.0.bins.%u.nmalloc", nb);
    snprintf(stats_lext_beyond, sizeof(stats_lext_beyond), "stats.arenas.0.lextents.%u.nmalloc", nl);
    /* An arena that exists nowhere: beyond narenas. */
    snprintf(no_arena, sizeof(no_arena), "stats.arenas.%u.pactive", narenas() + 1);
    snprintf(arena_beyond, sizeof(arena_beyond), "arena.%u.purge", narenas() + 1);
    const char *names[] = {"",
                           "nope",
                           "versionx",
                           "version.x",
                           "Version",
                           "stats",
                           "stats.arenas",
                           "stats.arenas.0",
                           "stats.arenas.0.bins.0",
                           "arenas.bin",
                           "arenas.bin.0",
                           "arena.0",
                           "thread.tcache",
                           "opt",
                           "opt.narenasx",
                           "opt.narena",
                           "opt.nope",
                           "config.nope",
                           "epoch.",
                           ".epoch",
                           "epoch..",
                           "stats..allocated",
                           "arenas.bin.x.size",
                           "arenas.bin.-1.size",
                           "arenas.bin.0x1.size",
                           "arenas.bin.99999999999999999999999.size",
                           "arenas.bin.0.size.more",
                           "arenas.narenas.0",
                           bin_beyond,
                           lext_beyond,
                           stats_bin_beyond,
                           stats_lext_beyond,
                           no_arena,
                           arena_beyond,
                           "stats.arenas.4095.pactive",
                           "arena.<i>.purge",
                           "arenas.bin.<i>.size"};
    for (size_t i = 0; i < MA_ARRAY_LEN(names); i++) {
        size_t v[4];
        size_t len = sizeof(size_t);
        int r = mallctl(names[i], v, &len, NULL, 0);
        cr_assert_eq(r, ENOENT, "mallctl(\"%s\") = %d, want ENOENT", names[i], r);
        r = mallctl(names[i], NULL, NULL, NULL, 0);
        cr_assert_eq(r, ENOENT, "mallctl(\"%s\", NULLs) = %d, want ENOENT", names[i], r);
    }
    cr_assert_eq(mallctl(NULL, NULL, NULL, NULL, 0), ENOENT);
    /* mallctlnametomib: unknown names are ENOENT; an interior node is a
     * valid MIB prefix, but not a name mallctlbymib can read. */
    size_t mib[8], miblen = 8;
    cr_assert_eq(mallctlnametomib("nope.x", mib, &miblen), ENOENT);
    miblen = 8;
    cr_assert_eq(mallctlnametomib("arenas.bin.0.nope", mib, &miblen), ENOENT);
    miblen = 8;
    cr_assert_eq(mallctlnametomib("stats.arenas", mib, &miblen), 0);
    cr_assert_eq(miblen, 2);
    size_t z, len = sizeof(z);
    cr_assert_eq(mallctlbymib(mib, miblen, &z, &len, NULL, 0), ENOENT);
    cr_assert_eq(mallctlbymib(mib, 0, &z, &len, NULL, 0), ENOENT);
    cr_assert_eq(mallctlbymib(NULL, 2, &z, &len, NULL, 0), ENOENT);
    size_t junk[8] = {999999, 5, 5, 5, 5, 5, 5, 5};
    cr_assert_eq(mallctlbymib(junk, 3, &z, &len, NULL, 0), ENOENT);
    cr_assert_eq(mallctlbymib(junk, 8, &z, &len, NULL, 0), ENOENT);
    cr_assert_eq(mallctlbymib(junk, 9, &z, &len, NULL, 0), ENOENT);
}

Test(ctl, einval_sizes_values_and_arguments)
{
    /* Wrong *oldlenp, too small and too large. */
    size_t z;
    size_t len = 4;
    cr_assert_eq(mallctl("stats.allocated", &z, &len, NULL, 0), EINVAL);
    cr_assert_eq(len, 4);
    len = 16;
    cr_assert_eq(mallctl("stats.allocated", &z, &len, NULL, 0), EINVAL);
    cr_assert_eq(len, 8);
    unsigned u;
    len = 8;
    cr_assert_eq(mallctl("arenas.narenas", &u, &len, NULL, 0), EINVAL);
    /* Wrong newlen. */
    unsigned a = 0;
    cr_assert_eq(mallctl("thread.arena", NULL, NULL, &a, 8), EINVAL);
    cr_assert_eq(mallctl("thread.arena", NULL, NULL, &a, 2), EINVAL);
    uint64_t e = 1;
    cr_assert_eq(mallctl("epoch", NULL, NULL, &e, 1), EINVAL);
    /* Invalid values. */
    char longname[200];
    memset(longname, 'n', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    const char *ln = longname;
    cr_assert_eq(mallctl("thread.prof.name", NULL, NULL, &ln, sizeof(ln)), EINVAL);
    const char *nul = NULL;
    cr_assert_eq(mallctl("thread.prof.name", NULL, NULL, &nul, sizeof(nul)), EINVAL);
    size_t lg = 63;
    cr_assert_eq(mallctl("prof.reset", NULL, NULL, &lg, sizeof(lg)), EINVAL);
    lg = SIZE_MAX;
    cr_assert_eq(mallctl("prof.reset", NULL, NULL, &lg, sizeof(lg)), EINVAL);
    static char longprefix[PATH_MAX * 2];
    memset(longprefix, 'p', sizeof(longprefix) - 1);
    const char *lp = longprefix;
    cr_assert_eq(mallctl("prof.prefix", NULL, NULL, &lp, sizeof(lp)), EINVAL);
    cr_assert_eq(mallctl("prof.prefix", NULL, NULL, &nul, sizeof(nul)), EINVAL);
    /* The failed writes changed nothing. */
    cr_assert_neq(read_size("prof.lg_sample"), 63);
    cr_assert_neq(strlen(read_str("thread.prof.name")), sizeof(longname) - 1);
    /* mallctlnametomib: miblen too small, NULL arguments. */
    size_t mib[8], miblen = 2;
    cr_assert_eq(mallctlnametomib("arenas.bin.0.size", mib, &miblen), EINVAL);
    miblen = 8;
    cr_assert_eq(mallctlnametomib(NULL, mib, &miblen), EINVAL);
    cr_assert_eq(mallctlnametomib("epoch", NULL, &miblen), EINVAL);
    cr_assert_eq(mallctlnametomib("epoch", mib, NULL), EINVAL);
}

Test(ctl, eperm_access_rules)
{
    size_t z = 5;
    const char *s = "x";
    cr_assert_eq(mallctl("stats.allocated", NULL, NULL, &z, sizeof(z)), EPERM);
    cr_assert_eq(mallctl("version", NULL, NULL, &s, sizeof(s)), EPERM);
    unsigned u = 3;
    cr_assert_eq(mallctl("opt.narenas", NULL, NULL, &u, sizeof(u)), EPERM);
    cr_assert_eq(mallctl("arenas.narenas", NULL, NULL, &u, sizeof(u)), EPERM);
    cr_assert_eq(read_unsigned("opt.narenas"), opt_narenas, "a refused write changed the value");
    /* Write-only entries cannot be read. */
    size_t len = sizeof(s);
    cr_assert_eq(mallctl("prof.dump", &s, &len, NULL, 0), EPERM);
    cr_assert_eq(mallctl("prof.prefix", &s, &len, NULL, 0), EPERM);
    len = sizeof(z);
    cr_assert_eq(mallctl("prof.reset", &z, &len, NULL, 0), EPERM);
    /* Void entries take no values. */
    cr_assert_eq(mallctl("thread.tcache.flush", &z, &len, NULL, 0), EPERM);
    cr_assert_eq(mallctl("thread.tcache.flush", NULL, NULL, &z, sizeof(z)), EPERM);
    cr_assert_eq(mallctl("arena.0.purge", NULL, NULL, &z, sizeof(z)), EPERM);
    cr_assert_eq(mallctl("arena.0.decay", NULL, &len, NULL, 0), EPERM);
    char name[64];
    snprintf(name, sizeof(name), "arena.%d.purge", ALL);
    cr_assert_eq(mallctl(name, NULL, NULL, NULL, 0), 0);
    /* jemalloc's other spellings of "all" and of the destroyed arenas. */
    snprintf(name, sizeof(name), "arena.%u.purge", narenas());
    cr_assert_eq(mallctl(name, NULL, NULL, NULL, 0), 0);
    snprintf(name, sizeof(name), "arena.%d.decay", MALLCTL_ARENAS_DESTROYED);
    cr_assert_eq(mallctl(name, NULL, NULL, NULL, 0), 0);
}

Test(ctl, efault_unwritable_dump_bad_arena_bad_name)
{
    const char *bad[] = {"/nonexistent-dir-myalloc/x.heap", "/proc/self/nope.heap", ""};
    for (size_t i = 0; i < MA_ARRAY_LEN(bad); i++)
        cr_assert_eq(mallctl("prof.dump", NULL, NULL, &bad[i], sizeof(bad[i])), EFAULT, "prof.dump to \"%s\"",
                     bad[i]);
    unsigned n = narenas(), cur = read_unsigned("thread.arena");
    unsigned beyond[] = {n, n + 1, 4095, 4096, UINT_MAX};
    for (size_t i = 0; i < MA_ARRAY_LEN(beyond); i++) {
        unsigned prev = 12345;
        size_t len = sizeof(prev);
        cr_assert_eq(mallctl("thread.arena", &prev, &len, &beyond[i], sizeof(beyond[i])), EFAULT,
                     "thread.arena = %u with %u arenas", beyond[i], n);
        cr_assert_eq(read_unsigned("thread.arena"), cur);
    }
    /* Thread names: printable characters only (jemalloc: EFAULT). */
    const char *ctrl = "bad\nname";
    cr_assert_eq(mallctl("thread.prof.name", NULL, NULL, &ctrl, sizeof(ctrl)), EFAULT);
}

/* EAGAIN: mallctl answers it when the allocator cannot be initialised, and
 * thread.arena when the arena it names cannot be created (out of memory).
 * The second is produced here: in a child, with the address space capped,
 * threads are moved to new arenas until one cannot be made. */
static void eagain_child(void *arg)
{
    (void)arg;
    arena_narenas = ARENAS_MAX; /* let thread.arena name every arena */
    struct rlimit rl = {0, 0};
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long vm = 0;
    if (f == NULL || fscanf(f, "%lu", &vm) != 1)
        _exit(3);
    fclose(f);
    rl.rlim_cur = rl.rlim_max = vm * (unsigned long)sysconf(_SC_PAGESIZE) + (1 << 20);
    if (setrlimit(RLIMIT_AS, &rl) != 0)
        _exit(4);
    for (unsigned i = 1; i < ARENAS_MAX; i++) {
        int r = mallctl("thread.arena", NULL, NULL, &i, sizeof(i));
        if (r == EAGAIN) {
            fprintf(stderr, "EAGAIN at arena %u\n", i);
            _exit(0);
        }
        if (r != 0) {
            fprintf(stderr, "thread.arena %u: %d\n", i, r);
            _exit(5);
        }
    }
    fprintf(stderr, "never EAGAIN\n");
    _exit(6);
}

Test(ctl, eagain_when_an_arena_cannot_be_created)
{
    char err[512];
    int st = tu_capture(eagain_child, NULL, err, sizeof(err));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x: %s", st, err);
    cr_assert_not_null(strstr(err, "EAGAIN at arena"), "%s", err);
}

/* ---------------------------------------------------------------------
 * MIBs.
 */

Test(ctl, mib_round_trips_vary_numeric_components)
{
    size_t mib[8], miblen = 8;
    cr_assert_eq(mallctlnametomib("arenas.bin.0.size", mib, &miblen), 0);
    cr_assert_eq(miblen, 4);
    cr_assert_eq(mib[2], 0);
    for (unsigned b = 0; b < SC_NBINS; b++) {
        mib[2] = b;
        size_t z, len = sizeof(z);
        cr_assert_eq(mallctlbymib(mib, miblen, &z, &len, NULL, 0), 0);
        cr_assert_eq(z, sc_index2size(b), "bin %u", b);
    }
    mib[2] = SC_NBINS;
    size_t z, len = sizeof(z);
    cr_assert_eq(mallctlbymib(mib, miblen, &z, &len, NULL, 0), ENOENT);
    mib[2] = SIZE_MAX;
    cr_assert_eq(mallctlbymib(mib, miblen, &z, &len, NULL, 0), ENOENT);

    /* Two numeric components: stats.arenas.<i>.bins.<j>.nmalloc. */
    void *hold = malloc(64);
    flush_tcache();
    new_epoch();
    miblen = 8;
    cr_assert_eq(mallctlnametomib("stats.arenas.0.bins.0.curregs", mib, &miblen), 0);
    cr_assert_eq(miblen, 6);
    unsigned b64 = (unsigned)sc_size2index(64);
    mib[2] = ALL;
    mib[4] = b64;
    size_t cur_all;
    len = sizeof(cur_all);
    cr_assert_eq(mallctlbymib(mib, miblen, &cur_all, &len, NULL, 0), 0);
    cr_assert_geq(cur_all, 1);
    char name[80];
    snprintf(name, sizeof(name), "stats.arenas.%d.bins.%u.curregs", ALL, b64);
    cr_assert_eq(read_size(name), cur_all);
    free(hold);

    /* Names and MIBs agree for every concrete name in the tables. */
    entries_t *es = all_entries();
    for (unsigned k = 0; k < es->n; k++) {
        size_t vals[2] = {0, 0};
        char nm[128];
        concrete(es->e[k].name, vals, nm, sizeof(nm));
        size_t m1[8], l1 = 8, m2[8], l2 = 8;
        cr_assert_eq(mallctlnametomib(nm, m1, &l1), 0, "%s", nm);
        cr_assert_eq(mallctlnametomib(nm, m2, &l2), 0);
        cr_assert_eq(l1, l2);
        cr_assert_eq(memcmp(m1, m2, l1 * sizeof(size_t)), 0, "%s: MIBs differ between calls", nm);
        /* A prefix of it is an interior node: also translatable. */
        char *dot = strrchr(nm, '.');
        if (dot != NULL) {
            *dot = '\0';
            size_t m3[8], l3 = 8;
            cr_assert_eq(mallctlnametomib(nm, m3, &l3), 0, "prefix %s", nm);
            cr_assert_eq(l3, l1 - 1);
            cr_assert_eq(memcmp(m1, m3, l3 * sizeof(size_t)), 0);
        }
    }
    /* A larger *miblenp is set to the depth. */
    miblen = 8;
    cr_assert_eq(mallctlnametomib("epoch", mib, &miblen), 0);
    cr_assert_eq(miblen, 1);
    uint64_t e1 = 1, ep;
    len = sizeof(ep);
    cr_assert_eq(mallctlbymib(mib, miblen, &ep, &len, &e1, sizeof(e1)), 0, "writes by MIB");
}

Test(ctl, mib_walk_of_lextents_and_arenas)
{
    size_t mib[8], miblen = 8;
    cr_assert_eq(mallctlnametomib("arenas.lextent.0.size", mib, &miblen), 0);
    size_t prev = 0;
    for (unsigned l = 0; l < SC_NSIZES - SC_NBINS; l++) {
        mib[2] = l;
        size_t z, len = sizeof(z);
        cr_assert_eq(mallctlbymib(mib, miblen, &z, &len, NULL, 0), 0);
        cr_assert_gt(z, prev);
        prev = z;
    }
    /* arena.<i>.purge for every arena by MIB, and for all of them. */
    miblen = 8;
    cr_assert_eq(mallctlnametomib("arena.0.purge", mib, &miblen), 0);
    cr_assert_eq(miblen, 3);
    for (unsigned a = 0; a < narenas(); a++) {
        mib[1] = a;
        cr_assert_eq(mallctlbymib(mib, miblen, NULL, NULL, NULL, 0), 0, "arena.%u.purge", a);
    }
    mib[1] = ALL;
    cr_assert_eq(mallctlbymib(mib, miblen, NULL, NULL, NULL, 0), 0);
}

/* ---------------------------------------------------------------------
 * Statistics that must agree.
 */

typedef struct {
    void *p;
    size_t size;
} held_t;

Test(ctl, stats_allocated_counts_what_the_program_holds)
{
    /* Nothing cached: what the program holds is all that changes. */
    flush_tcache();
    new_epoch();
    size_t base = read_size("stats.allocated");
    static held_t held[3000];
    uint64_t seed = 17;
    size_t want = 0;
    for (int i = 0; i < 3000; i++) {
        size_t s;
        switch (i % 5) {
        case 0:
            s = tu_rand(&seed) % 128 + 1;
            break;
        case 1:
            s = tu_rand(&seed) % 4096 + 1;
            break;
        case 2:
            s = tu_rand(&seed) % 20000 + 1;
            break;
        case 3:
            s = tu_rand(&seed) % 300000 + 1;
            break;
        default:
            s = tu_rand(&seed) % (3 << 20) + 1;
            break;
        }
        held[i].p = malloc(s);
        cr_assert_not_null(held[i].p);
        held[i].size = malloc_usable_size(held[i].p);
        want += held[i].size;
    }
    /* Thread caches count as allocated: objects still in them (freed by
     * the program) are returned first. */
    flush_tcache();
    new_epoch();
    size_t now = read_size("stats.allocated");
    cr_assert_eq(now - base, want, "stats.allocated grew by %zu, the test holds %zu", now - base, want);
    /* Free every other one. */
    for (int i = 0; i < 3000; i += 2) {
        want -= held[i].size;
        free(held[i].p);
    }
    flush_tcache();
    new_epoch();
    now = read_size("stats.allocated");
    cr_assert_eq(now - base, want, "after frees: %zu, the test holds %zu", now - base, want);
    /* Objects sitting in the thread cache still count (a fill brings a
     * batch of them), until flushed. */
    void *c = malloc(48);
    size_t cu = malloc_usable_size(c);
    free(c); /* into the cache */
    new_epoch();
    cr_assert_geq(read_size("stats.allocated") - base, want + cu, "a cached object must count as allocated");
    flush_tcache();
    new_epoch();
    cr_assert_eq(read_size("stats.allocated") - base, want);
    for (int i = 1; i < 3000; i += 2)
        free(held[i].p);
    flush_tcache();
    new_epoch();
    cr_assert_eq(read_size("stats.allocated"), base);
    /* Per-arena small + large add up to the total. */
    char name[80];
    snprintf(name, sizeof(name), "stats.arenas.%d.small.allocated", ALL);
    size_t small = read_size(name);
    snprintf(name, sizeof(name), "stats.arenas.%d.large.allocated", ALL);
    size_t large = read_size(name);
    cr_assert_leq(small + large, read_size("stats.allocated"));
}

/* The loops over all arenas stop past the highest index created
 * (arena_end): an arena created out of order, with lower indices still
 * unmade, counts in the merged statistics and is purged with the rest. */
Test(ctl, an_arena_created_out_of_order_is_in_every_all_arenas_loop)
{
    unsigned last = narenas() - 1;
    if (last == 0)
        cr_skip_test("one arena only");
    char name[80];
    snprintf(name, sizeof(name), "arena.%u.dirty_decay_ms", last);
    ssize_t ms = 0;
    size_t sz = sizeof(ms);
    cr_assert_eq(mallctl(name, &ms, &sz, NULL, 0), EFAULT, "arena %u exists before the test made it", last);
    unsigned old = read_unsigned("thread.arena");
    cr_assert_eq(mallctl("thread.arena", NULL, NULL, &last, sizeof(last)), 0);
    flush_tcache();
    new_epoch();
    snprintf(name, sizeof(name), "stats.arenas.%d.small.allocated", ALL);
    size_t before = read_size(name);
    void *p = malloc(100);
    cr_assert_not_null(p);
    size_t u = malloc_usable_size(p);
    flush_tcache();
    new_epoch();
    cr_assert_eq(read_size(name) - before, u, "the merged small.allocated grew by %zu, not by the %zu held in arena %u",
                 read_size(name) - before, u, last);
    free(p);
    flush_tcache(); /* the slab, now empty, stays with its bin until a purge */
    snprintf(name, sizeof(name), "arena.%d.purge", ALL);
    cr_assert_eq(mallctl(name, NULL, NULL, NULL, 0), 0);
    new_epoch();
    snprintf(name, sizeof(name), "stats.arenas.%u.pdirty", last);
    cr_assert_eq(read_size(name), 0, "arena %u kept dirty pages through arena.<ALL>.purge", last);
    cr_assert_eq(mallctl("thread.arena", NULL, NULL, &old, sizeof(old)), 0);
}

Test(ctl, stats_relations)
{
    void *big = malloc(64 << 20);
    memset(big, 1, 64 << 20);
    new_epoch();
    size_t allocated = read_size("stats.allocated"), active = read_size("stats.active"),
           resident = read_size("stats.resident"), mapped = read_size("stats.mapped"),
           metadata = read_size("stats.metadata");
    cr_assert_geq(active, allocated);
    cr_assert_geq(resident, active);
    cr_assert_geq(mapped, active);
    cr_assert_gt(metadata, 0);
    cr_assert_eq(active % PAGE, 0);
    free(big);
    /* Purging all arenas makes dirty pages go away. */
    char name[64];
    snprintf(name, sizeof(name), "arena.%d.purge", ALL);
    cr_assert_eq(mallctl(name, NULL, NULL, NULL, 0), 0);
    new_epoch();
    snprintf(name, sizeof(name), "stats.arenas.%d.pdirty", ALL);
    cr_assert_eq(read_size(name), 0);
    snprintf(name, sizeof(name), "stats.arenas.%d.dirty_purged", ALL);
    cr_assert_geq(read_u64(name), (64u << 20) / PAGE);
    cr_assert_lt(read_size("stats.resident"), resident - (32u << 20));
}

Test(ctl, stats_bins_and_lextents_count_operations)
{
    unsigned b = sc_size2index(200);
    char nm[128];
#define BIN(f) (snprintf(nm, sizeof(nm), "stats.arenas.%d.bins.%u." f, ALL, b), read_u64(nm))
    flush_tcache();
    new_epoch();
    uint64_t nreq0 = BIN("nrequests"), nmalloc0 = BIN("nmalloc"), nfills0 = BIN("nfills"),
             nflush0 = BIN("nflushes");
    snprintf(nm, sizeof(nm), "stats.arenas.%d.bins.%u.curregs", ALL, b);
    size_t cur0 = read_size(nm);
    void *ps[1000];
    for (int i = 0; i < 1000; i++)
        ps[i] = malloc(200);
    new_epoch();
    cr_assert_eq(BIN("nrequests") - nreq0, 1000, "nrequests counts cache hits too");
    cr_assert_geq(BIN("nmalloc") - nmalloc0, 1000);
    cr_assert_gt(BIN("nfills"), nfills0);
    for (int i = 0; i < 1000; i++)
        free(ps[i]);
    flush_tcache();
    new_epoch();
    cr_assert_gt(BIN("nflushes"), nflush0);
    snprintf(nm, sizeof(nm), "stats.arenas.%d.bins.%u.curregs", ALL, b);
    cr_assert_eq(read_size(nm), cur0);
    snprintf(nm, sizeof(nm), "stats.arenas.%d.bins.%u.curslabs", ALL, b);
    read_size(nm);
#undef BIN
    /* Large classes: curlextents follows live objects of the class. */
    size_t big = 5 << 20;
    unsigned l = sc_size2index(big) - SC_NBINS;
    snprintf(nm, sizeof(nm), "stats.arenas.%d.lextents.%u.curlextents", ALL, l);
    size_t c0 = read_size(nm);
    char nm2[128];
    snprintf(nm2, sizeof(nm2), "stats.arenas.%d.lextents.%u.nmalloc", ALL, l);
    uint64_t m0 = read_u64(nm2);
    void *q[3];
    for (int i = 0; i < 3; i++)
        q[i] = malloc(big);
    cr_assert_eq(read_size(nm), c0 + 3);
    cr_assert_eq(read_u64(nm2), m0 + 3);
    for (int i = 0; i < 3; i++)
        free(q[i]);
    cr_assert_eq(read_size(nm), c0);
    snprintf(nm2, sizeof(nm2), "stats.arenas.%d.lextents.%u.ndalloc", ALL, l);
    cr_assert_geq(read_u64(nm2), 3);
}

static void rss_check(const char *when)
{
    new_epoch();
    size_t resident = read_size("stats.resident");
    size_t rss = tu_rss_bytes();
    double ratio = (double)resident / (double)rss;
    cr_assert(ratio > 0.9 && ratio < 1.1, "%s: stats.resident %zu vs RSS %zu (ratio %.3f)", when, resident, rss,
              ratio);
}

Test(ctl, stats_resident_is_within_10_percent_of_rss)
{
    /* A few hundred MB: small objects, large ones, touched. */
    static void *small[400000];
    void *large[300];
    for (int i = 0; i < 400000; i++) {
        small[i] = malloc((size_t)(i % 50) * 16 + 200);
        memset(small[i], 1, (size_t)(i % 50) * 16 + 200);
    }
    for (int i = 0; i < 300; i++) {
        size_t s = (size_t)(i % 7 + 1) * 150000;
        large[i] = malloc(s);
        memset(large[i], 2, s);
    }
    cr_assert_gt(tu_rss_bytes(), (size_t)300 << 20);
    rss_check("after allocating");
    /* Free half: the pages stay dirty (still resident) until purged. */
    for (int i = 0; i < 400000; i += 2)
        free(small[i]);
    for (int i = 0; i < 300; i += 2)
        free(large[i]);
    flush_tcache();
    rss_check("after freeing half");
    char name[64];
    snprintf(name, sizeof(name), "arena.%d.purge", ALL);
    cr_assert_eq(mallctl(name, NULL, NULL, NULL, 0), 0);
    rss_check("after purging");
    for (int i = 1; i < 400000; i += 2)
        free(small[i]);
    for (int i = 1; i < 300; i += 2)
        free(large[i]);
}

Test(ctl, thread_allocated_equals_bytes_allocated)
{
    uint64_t a0 = read_u64("thread.allocated"), d0 = read_u64("thread.deallocated");
    uint64_t want_a = 0, want_d = 0;
    void *ps[400];
    for (int i = 0; i < 400; i++) {
        size_t s = (size_t)(i * 7919 % 300000) + 1;
        switch (i % 4) {
        case 0:
            ps[i] = malloc(s);
            break;
        case 1:
            ps[i] = calloc(1, s);
            break;
        case 2:
            cr_assert_eq(posix_memalign(&ps[i], 512, s), 0);
            break;
        default:
            ps[i] = aligned_alloc(64, s);
            break;
        }
        want_a += malloc_usable_size(ps[i]);
    }
    cr_assert_eq(read_u64("thread.allocated") - a0, want_a);
    for (int i = 0; i < 400; i += 3) {
        size_t old = malloc_usable_size(ps[i]);
        ps[i] = realloc(ps[i], (size_t)i * 101 + 5);
        want_a += malloc_usable_size(ps[i]);
        want_d += old;
    }
    for (int i = 0; i < 400; i++) {
        want_d += malloc_usable_size(ps[i]);
        free(ps[i]);
    }
    cr_assert_eq(read_u64("thread.allocated") - a0, want_a);
    cr_assert_eq(read_u64("thread.deallocated") - d0, want_d);
}

/* ---------------------------------------------------------------------
 * malloc_stats_print.
 */

static char print_buf[4 << 20];
static size_t print_len;

static void print_cb(void *opaque, const char *s)
{
    (void)opaque;
    size_t n = strlen(s);
    cr_assert_lt(print_len + n, sizeof(print_buf));
    memcpy(print_buf + print_len, s, n);
    print_len += n;
    print_buf[print_len] = '\0';
}

static const char *stats_text(const char *opts)
{
    print_len = 0;
    print_buf[0] = '\0';
    malloc_stats_print(print_cb, NULL, opts);
    return print_buf;
}

Test(stats_print, text_has_our_statistics)
{
    void *hold = malloc(100000);
    void *small = malloc(100);
    const char *t = stats_text(NULL);
    const char *want[] = {"___ Begin myalloc statistics ___", "___ End myalloc statistics ___",
                          "version: \"" MYALLOC_VERSION "\"", "Build-time configuration:",
                          "Run-time options:", "opt.narenas: ", "opt.tcache: true", "Arenas:",
                          "arenas.narenas: ", "arenas.page: ", "Totals:", "stats.allocated: ",
                          "stats.active: ", "stats.resident: ", "stats.mapped: ", "stats.metadata: ",
                          "Merged arenas:", "Arena 0:", "bins ", "lextents ", "nmalloc", "curregs",
                          "curlextents", "pactive: "};
    for (size_t i = 0; i < MA_ARRAY_LEN(want); i++)
        cr_assert_not_null(strstr(t, want[i]), "no \"%s\" in:\n%s", want[i], t);
    /* The numbers are mallctl's. */
    new_epoch();
    t = stats_text("");
    char line[128];
    snprintf(line, sizeof(line), " stats.allocated: %zu\n", read_size("stats.allocated"));
    cr_assert_not_null(strstr(t, line), "no \"%s\" in the text", line);
    snprintf(line, sizeof(line), " arenas.narenas: %u\n", narenas());
    cr_assert_not_null(strstr(t, line));
    /* NULL callback: stderr. */
    free(hold);
    free(small);
}

static void print_to_stderr(void *arg)
{
    malloc_stats_print(NULL, NULL, arg);
}

Test(stats_print, null_callback_writes_to_stderr)
{
    static char err[1 << 20];
    int st = tu_capture(print_to_stderr, "ga", err, sizeof(err));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    cr_assert_not_null(strstr(err, "___ Begin myalloc statistics ___"));
    cr_assert_not_null(strstr(err, "stats.allocated: "));
}

Test(stats_print, opts_letters_leave_parts_out)
{
    void *hold = malloc(100000), *s = malloc(100);
    struct {
        const char *opts, *gone, *kept;
    } c[] = {
        {"g", "Run-time options:", "Totals:"},   {"g", "opt.narenas", "Merged arenas:"},
        {"g", "Build-time configuration:", "stats.allocated"},
        {"m", "Merged arenas:", "Arena 0:"},     {"a", "Arena 0:", "Merged arenas:"},
        {"b", "bins ", "lextents "},             {"l", "lextents ", "bins "},
        {"ma", "Arena 0:", "stats.allocated"},   {"gmabl", "curregs", "stats.resident"},
        {"ma", "Merged arenas:", "Totals:"},
    };
    for (size_t i = 0; i < MA_ARRAY_LEN(c); i++) {
        const char *t = stats_text(c[i].opts);
        cr_assert_null(strstr(t, c[i].gone), "opts \"%s\" still prints \"%s\"", c[i].opts, c[i].gone);
        cr_assert_not_null(strstr(t, c[i].kept), "opts \"%s\" lost \"%s\"", c[i].opts, c[i].kept);
    }
    /* Letters jemalloc has that leave nothing out here are accepted. */
    cr_assert_not_null(strstr(stats_text("dxe"), "Merged arenas:"));
    free(hold);
    free(s);
}

/* Parse, refusing any object with a key twice (a key written twice loses
 * a number for every reader). */
#define JSON_STRICT                                                                                   \
    "import json,sys\n"                                                                              \
    "def h(pairs):\n"                                                                               \
    "    keys=[k for k,v in pairs]\n"                                                               \
    "    assert len(keys)==len(set(keys)), \"duplicate keys %s\" % keys\n"                          \
    "    return dict(pairs)\n"                                                                      \
    "json.load(open(sys.argv[1]), object_pairs_hook=h)\n"

/* Run python3 on the JSON in a file; returns its stdout. */
static int python_on_json(const char *json, const char *script, char *out, size_t outlen)
{
    char path[] = "/tmp/myalloc_stats_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    size_t n = strlen(json);
    cr_assert_eq(write(fd, json, n), (ssize_t)n);
    close(fd);
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 -c '%s' %s", script, path);
    int r = tu_run(cmd, out, outlen);
    unlink(path);
    return r;
}

Test(stats_print, json_parses_and_holds_mallctls_numbers)
{
    if (access("/usr/bin/python3", X_OK) != 0)
        cr_skip_test("no /usr/bin/python3 to validate the JSON with");
    void *hold = malloc(300000), *s = malloc(100);
    new_epoch();
    size_t allocated = read_size("stats.allocated"), resident = read_size("stats.resident");
    unsigned na = narenas();
    char nm[80];
    snprintf(nm, sizeof(nm), "stats.arenas.%d.pactive", ALL);
    size_t pactive = read_size(nm);
    unsigned b = sc_size2index(100);
    snprintf(nm, sizeof(nm), "stats.arenas.%d.bins.%u.nmalloc", ALL, b);
    uint64_t nmalloc = read_u64(nm);
    static char json[4 << 20];
    strcpy(json, stats_text("J"));
    /* Nothing allocated by the print itself. */
    new_epoch();
    cr_assert_eq(read_size("stats.allocated"), allocated);
    static char out[1 << 16];
    int r = python_on_json(json, JSON_STRICT, out, sizeof(out));
    cr_assert_eq(r, 0, "invalid JSON: %s\n%.2000s", out, json);
    const char *script =
        "import json,sys\n"
        "d=json.load(open(sys.argv[1]))[\"myalloc\"]\n"
        "m=d[\"stats\"][\"arenas\"][\"merged\"]\n"
        "bins={x[\"size\"]: x for x in m[\"bins\"]}\n"
        "print(d[\"stats\"][\"allocated\"], d[\"stats\"][\"resident\"], d[\"arenas\"][\"narenas\"],"
        " m[\"pactive\"], bins[int(sys.argv[2])][\"nmalloc\"], d[\"version\"],"
        " m[\"small\"][\"allocated\"] + m[\"large\"][\"allocated\"] <= d[\"stats\"][\"allocated\"],"
        " d[\"opt\"][\"tcache\"], d[\"config\"][\"prof\"], \"0\" in d[\"stats\"][\"arenas\"])\n";
    char script2[2048];
    snprintf(script2, sizeof(script2), "%s", script);
    char cmdscript[2300];
    /* python_on_json passes the file as argv[1]; the bin size follows it. */
    snprintf(cmdscript, sizeof(cmdscript), "%s", script2);
    char path[] = "/tmp/myalloc_stats_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_eq(write(fd, json, strlen(json)), (ssize_t)strlen(json));
    close(fd);
    char pyf[] = "/tmp/myalloc_py_XXXXXX";
    fd = mkstemp(pyf);
    cr_assert_eq(write(fd, cmdscript, strlen(cmdscript)), (ssize_t)strlen(cmdscript));
    close(fd);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s %s %zu", pyf, path, sc_index2size(b));
    r = tu_run(cmd, out, sizeof(out));
    unlink(path);
    unlink(pyf);
    cr_assert_eq(r, 0, "%s", out);
    char want[512];
    snprintf(want, sizeof(want), "%zu %zu %u %zu %" PRIu64 " %s True True True True\n", allocated, resident, na,
             pactive, nmalloc, MYALLOC_VERSION);
    cr_assert_str_eq(out, want);
    /* The opts letters apply to JSON too, and it still parses. */
    const char *opts[] = {"Jg", "Jm", "Ja", "Jb", "Jl", "Jgmabl"};
    for (size_t i = 0; i < MA_ARRAY_LEN(opts); i++) {
        strcpy(json, stats_text(opts[i]));
        r = python_on_json(json, JSON_STRICT, out, sizeof(out));
        cr_assert_eq(r, 0, "opts %s: invalid JSON: %s\n%.2000s", opts[i], out, json);
    }
    strcpy(json, stats_text("Jg"));
    cr_assert_null(strstr(json, "\"opt\""));
    strcpy(json, stats_text("Jb"));
    cr_assert_null(strstr(json, "\"bins\""));
    cr_assert_not_null(strstr(json, "\"lextents\""));
    free(hold);
    free(s);
}

/* stats_print:true prints at exit (text, or JSON with stats_print_opts:J). */
Test(stats_print, stats_print_option_prints_at_exit)
{
    char lib[PATH_MAX], cmd[2 * PATH_MAX], out[1 << 16];
    cr_assert_not_null(realpath(tu_build_dir(), lib));
    strcat(lib, "/libmyalloc.so");
    snprintf(cmd, sizeof(cmd), "MYALLOC_CONF=stats_print:true LD_PRELOAD=%s /bin/true 2>&1 >/dev/null", lib);
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0);
    cr_assert_not_null(strstr(out, "___ Begin myalloc statistics ___"), "%s", out);
    cr_assert_not_null(strstr(out, "___ End myalloc statistics ___"));
    cr_assert_not_null(strstr(out, "opt.stats_print: true"));
    snprintf(cmd, sizeof(cmd), "MYALLOC_CONF=stats_print:false LD_PRELOAD=%s /bin/true", lib);
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0);
    cr_assert_str_eq(out, "");
    if (access("/usr/bin/python3", X_OK) == 0) {
        snprintf(cmd, sizeof(cmd),
                 "MYALLOC_CONF=stats_print:true,stats_print_opts:Jmb LD_PRELOAD=%s /bin/true 2>&1 >/dev/null "
                 "| /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin)[\"myalloc\"]; "
                 "print(d[\"opt\"][\"stats_print_opts\"], \"merged\" in d[\"stats\"][\"arenas\"])'",
                 lib);
        cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "%s", out);
        cr_assert_str_eq(out, "Jmb False\n");
    }
}

/* ---------------------------------------------------------------------
 * The docs name every option and every mallctl name.
 */

Test(docs, every_option_and_every_mallctl_name_is_documented)
{
    const char *options = tu_read_file("doc/options.md", NULL);
    const char *mallctl_doc = tu_read_file("doc/mallctl.md", NULL);
    for (unsigned o = 0; o < conf_noptions; o++) {
        char want[128];
        snprintf(want, sizeof(want), "`%s`", conf_options[o].name);
        cr_assert_not_null(strstr(options, want), "doc/options.md does not document %s", want);
    }
    entries_t *es = all_entries();
    for (unsigned k = 0; k < es->n; k++) {
        char want[128];
        snprintf(want, sizeof(want), "`%s`", es->e[k].name);
        cr_assert_not_null(strstr(mallctl_doc, want), "doc/mallctl.md does not document %s", want);
    }
}

/* Each option's row in doc/options.md gives the default this build has:
 * the value malloc_stats_print reports as opt.<name> (it writes them as
 * the doc does: true/false, numbers, quoted strings). The options the
 * environment's MYALLOC_CONF sets are left out. */
Test(docs, every_documented_default_is_the_default)
{
    const char *options = tu_read_file("doc/options.md", NULL);
    const char *stats = stats_text("mabl");
    const char *env = getenv("MYALLOC_CONF");
    for (unsigned o = 0; o < conf_noptions; o++) {
        const char *name = conf_options[o].name;
        char row[128], line[128];
        if (env != NULL && strstr(env, name) != NULL)
            continue;
        /* | `name` | type | default | meaning | example | */
        snprintf(row, sizeof(row), "| `%s` | ", name);
        const char *r = strstr(options, row);
        cr_assert_not_null(r, "doc/options.md has no row for %s", name);
        const char *def = strstr(r + strlen(row), " | ");
        cr_assert_not_null(def);
        def += 3;
        const char *def_end = strstr(def, " | ");
        cr_assert_not_null(def_end);
        snprintf(line, sizeof(line), "  opt.%s: ", name);
        const char *v = strstr(stats, line);
        cr_assert_not_null(v, "malloc_stats_print has no line for opt.%s", name);
        v += strlen(line);
        size_t vlen = strcspn(v, "\n");
        cr_assert(vlen == (size_t)(def_end - def) && memcmp(def, v, vlen) == 0,
                  "doc/options.md gives %s the default %.*s; it is %.*s", name, (int)(def_end - def), def,
                  (int)vlen, v);
    }
}

/* Every example in the docs works as written: each ```c block is a whole
 * program that must build against this configuration's library and exit
 * 0; each ```sh block is run from the repository root with sh -e and must
 * exit 0 (they use lib/libmyalloc.so, which make builds first). */
static unsigned run_doc_examples(const char *doc, const char *tmpdir)
{
    const char *text = tu_read_file(doc, NULL);
    unsigned n = 0;
    for (const char *s = text; (s = strstr(s, "\n```")) != NULL;) {
        s += 4;
        bool c = strncmp(s, "c\n", 2) == 0, sh = strncmp(s, "sh\n", 3) == 0;
        const char *body = strchr(s, '\n') + 1;
        const char *end = strstr(body, "\n```");
        cr_assert_not_null(end, "%s: unterminated code block", doc);
        s = end + 4;
        if (!c && !sh)
            continue;
        char path[PATH_MAX], cmd[3 * PATH_MAX], out[16384];
        snprintf(path, sizeof(path), "%s/ex%u.%s", tmpdir, n, c ? "c" : "sh");
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fwrite(body, 1, (size_t)(end - body) + 1, f);
        fclose(f);
        if (c) {
            char lib[PATH_MAX], san[64] = "";
            cr_assert_not_null(realpath(tu_build_dir(), lib));
            if (tu_sanitizer() != NULL) /* a sanitized libmyalloc.a needs the sanitizer's runtime */
                snprintf(san, sizeof(san), "-fsanitize=%s", tu_sanitizer());
            snprintf(cmd, sizeof(cmd),
                     "cc -Wall -Wextra -Werror -o %s/ex%u %s -Iinclude %s/libmyalloc.a -lm -pthread %s && %s/ex%u",
                     tmpdir, n, path, lib, san, tmpdir, n);
        } else {
            snprintf(cmd, sizeof(cmd), "sh -e %s", path);
        }
        int r = tu_run(cmd, out, sizeof(out));
        cr_assert_eq(r, 0, "%s: example %u (%s) failed with %d:\n%.*s\n--- output:\n%s", doc, n, c ? "c" : "sh", r,
                     (int)(end - body), body, out);
        n++;
    }
    return n;
}

Test(docs, every_example_works_as_written, .timeout = 120)
{
    char dir[] = "/tmp/myalloc_docs_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    const char *docs[] = {"doc/options.md", "doc/mallctl.md", "doc/stats.md"};
    for (size_t i = 0; i < MA_ARRAY_LEN(docs); i++) {
        unsigned n = run_doc_examples(docs[i], dir);
        cr_assert_geq(n, 1, "%s has no runnable example", docs[i]);
    }
    char cmd[PATH_MAX + 16], out[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    tu_run(cmd, out, sizeof(out));
}
