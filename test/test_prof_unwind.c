/*
 * prof_unwind, the default unwinder's DWARF CFI walker with its rule cache:
 * differential tests against libgcc's _Unwind_Backtrace, which must report
 * the very same return addresses for every stack, whatever its frames:
 * deep recursion, frameless functions (this file is built -O1, which omits
 * frame pointers), frame-pointer functions, variable-size frames (a CFA
 * from rbp), a shared library built both ways (dlopen'ed from
 * test/helpers/lib/), C++ (templates, std::function, try blocks), a
 * library unloaded and another loaded in its place, several threads at
 * once while others load and unload libraries, other stacks (a thread's
 * own, a coroutine's). Then the reduction to rules, what it gives up on
 * (signal frames, DWARF expressions: libgcc unwinds those, and the
 * profiler's stacks are libgcc's), and samples taken through the profiler
 * with prof_bt:gcc and prof_bt:libgcc, which must record the same stacks.
 *
 * Every comparison is made in one function (uw_take): both unwinders are
 * called from it, so the lists agree from their second entry on (the first
 * is each call's return address into uw_take).
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unwind.h>

#include "arena/rtree.h"
#include "arena/extent.h"
#include "myalloc.h"
#include "prof/prof.h"
#include "prof/prof_table.h"
#include "prof/prof_unwind.h"
#include "test_util.h"

#define NOINLINE __attribute__((noinline, used))
#ifdef __clang__
#define FPFN NOINLINE
#else
#define FPFN __attribute__((noinline, used, optimize("no-omit-frame-pointer")))
#endif
/* Uses r after the call: no tail call, every level keeps its frame. */
#define KEEP(r) __asm__ volatile("" : "+r"(r) : : "memory")
#define BARRIER(p) __asm__ volatile("" : : "r"(p) : "memory")

#define UW_MAX 512

typedef int uw_cb(void *arg);

/* ---------------------------------------------------------------------
 * Both unwinders from one frame.
 */
typedef struct uw_diff {
    int nmine, ngcc;
    void *mine[UW_MAX], *gcc[UW_MAX];
} uw_diff_t;

typedef struct gcc_arg {
    void **buf;
    int n, cap;
} gcc_arg_t;

static _Unwind_Reason_Code gcc_step(struct _Unwind_Context *ctx, void *p)
{
    gcc_arg_t *a = p;
    if (a->n == a->cap)
        return _URC_END_OF_STACK;
    uintptr_t ip = _Unwind_GetIP(ctx);
    if (ip == 0)
        return _URC_END_OF_STACK;
    a->buf[a->n++] = (void *)ip;
    return _URC_NO_REASON;
}

static int uw_cap = UW_MAX;

NOINLINE int uw_take(void *arg)
{
    uw_diff_t *d = arg;
    d->nmine = prof_unwind_backtrace(d->mine, uw_cap);
    gcc_arg_t a = {d->gcc, 0, uw_cap};
    _Unwind_Backtrace(gcc_step, &a);
    d->ngcc = a.n;
    BARRIER(d);
    return 1;
}

static const char *sym_of(void *ret_addr)
{
    Dl_info info;
    if (dladdr((char *)ret_addr - 1, &info) == 0 || info.dli_sname == NULL)
        return "?";
    return info.dli_sname;
}

/* Both lists, side by side, for a failure message. */
static const char *uw_show(const uw_diff_t *d)
{
    static __thread char out[8192];
    size_t len = 0;
    int n = d->nmine > d->ngcc ? d->nmine : d->ngcc;
    for (int i = 0; i < n && len < sizeof(out) - 200; i++) {
        void *m = i < d->nmine ? d->mine[i] : NULL, *g = i < d->ngcc ? d->gcc[i] : NULL;
        len += (size_t)snprintf(out + len, sizeof(out) - len, "\n  %3d %14p %-22.22s %14p %-22.22s%s", i, m,
                                m ? sym_of(m) : "", g, g ? sym_of(g) : "", i > 0 && m != g ? "  <--" : "");
    }
    return out;
}

/* The lists agree (and prof_unwind did not give up). */
static void uw_check(const uw_diff_t *d, const char *what)
{
    cr_assert_geq(d->nmine, 0, "%s: prof_unwind gave up (libgcc: %d frames)%s", what, d->ngcc, uw_show(d));
    cr_assert_geq(d->ngcc, uw_cap < 2 ? uw_cap : 2, "%s: libgcc found %d frames", what, d->ngcc);
    cr_assert_str_eq(sym_of(d->mine[0]), "uw_take", "%s: first frame%s", what, uw_show(d));
    cr_assert_str_eq(sym_of(d->gcc[0]), "uw_take", "%s: libgcc's first frame%s", what, uw_show(d));
    cr_assert_eq(d->nmine, d->ngcc, "%s: %d frames, libgcc %d%s", what, d->nmine, d->ngcc, uw_show(d));
    for (int i = 1; i < d->nmine; i++)
        cr_assert_eq(d->mine[i], d->gcc[i], "%s: frame %d differs%s", what, i, uw_show(d));
}

static int uw_count(const uw_diff_t *d, const char *sym)
{
    int k = 0;
    for (int i = 0; i < d->ngcc; i++)
        k += strcmp(sym_of(d->gcc[i]), sym) == 0;
    return k;
}

/* ---------------------------------------------------------------------
 * Frames of this program (built -O1: frameless unless told otherwise).
 */
NOINLINE int loc_rec(int depth, uw_cb *cb, void *arg)
{
    int r = depth == 0 ? cb(arg) : loc_rec(depth - 1, cb, arg);
    KEEP(r);
    return r + 1;
}

FPFN int loc_fp(int depth, uw_cb *cb, void *arg)
{
    int r = depth == 0 ? cb(arg) : loc_fp(depth - 1, cb, arg);
    KEEP(r);
    return r + 1;
}

NOINLINE int loc_alloca(int depth, uw_cb *cb, void *arg)
{
    char buf[8 + 24 * (depth % 5)];
    memset(buf, 3, sizeof(buf));
    BARRIER(buf);
    int r = depth == 0 ? cb(arg) : loc_alloca(depth - 1, cb, arg);
    KEEP(r);
    return r + buf[sizeof(buf) - 1];
}

/* A variable-size array and a 64-byte aligned local: GCC realigns the
 * stack through a DRAP register, and its CFA is a DWARF expression. */
NOINLINE int loc_realign(int n, uw_cb *cb, void *arg)
{
    char vla[n];
    __attribute__((aligned(64))) char x[64];
    memset(vla, 1, (size_t)n);
    memset(x, 2, sizeof(x));
    __asm__ volatile("" : : "r"(vla), "r"(x) : "memory");
    int r = cb(arg);
    KEEP(r);
    return r + vla[0] + x[1];
}

/* ---------------------------------------------------------------------
 * The helper libraries (see test/helpers/lib/).
 */
typedef int uw_fn(int depth, uw_cb *cb, void *arg);

typedef struct uw_lib {
    void *h;
    uw_fn *recurse, *alloca_, *mixed;
} uw_lib_t;

static void lib_path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/helpers/%s", tu_build_dir(), name);
}

static void *lib_open(const char *name)
{
    char path[512];
    lib_path(path, sizeof(path), name);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(h, "dlopen %s: %s", path, dlerror());
    return h;
}

static void *lib_sym(void *h, const char *name)
{
    void *f = dlsym(h, name);
    cr_assert_not_null(f, "dlsym %s: %s", name, dlerror());
    return f;
}

static void uwlib_open(uw_lib_t *l, const char *name)
{
    l->h = lib_open(name);
    l->recurse = (uw_fn *)lib_sym(l->h, "uwlib_recurse");
    l->alloca_ = (uw_fn *)lib_sym(l->h, "uwlib_alloca");
    l->mixed = (uw_fn *)lib_sym(l->h, "uwlib_mixed");
}

static bool cxx_available(void)
{
    char path[512];
    lib_path(path, sizeof(path), "libunwind_cxx.so");
    return access(path, R_OK) == 0;
}

/* ---------------------------------------------------------------------
 * Chains: a list of (kind, depth) steps, each calling the next through
 * the callback, the last one calling leaf. One of them takes both stacks,
 * another allocates (for the profiler's tests).
 */
enum { K_REC, K_FP, K_ALLOCA, K_NOFP_REC, K_NOFP_ALLOCA, K_NOFP_MIXED, K_FP_REC, K_FP_ALLOCA, K_FP_MIXED, K_CXX, K_N };
static const char *const kind_names[K_N] = {"loc_rec",    "loc_fp",      "loc_alloca", "nofp.recurse",
                                            "nofp.alloca", "nofp.mixed", "fp.recurse", "fp.alloca",
                                            "fp.mixed",    "cxx"};

typedef struct chain {
    int n, pos;
    unsigned kind[16];
    int depth[16];
    uw_cb *leaf;
    void *leaf_arg;
} chain_t;

static uw_lib_t lib_nofp, lib_fp;
static uw_fn *cxx_run;

static void libs_open(void)
{
    uwlib_open(&lib_nofp, "libunwind_nofp.so");
    uwlib_open(&lib_fp, "libunwind_fp.so");
    if (cxx_available())
        cxx_run = (uw_fn *)lib_sym(lib_open("libunwind_cxx.so"), "uwcxx_run");
}

NOINLINE int chain_next(void *arg)
{
    chain_t *c = arg;
    if (c->pos == c->n)
        return c->leaf(c->leaf_arg);
    int i = c->pos++;
    int d = c->depth[i], r;
    switch (c->kind[i]) {
    case K_REC: r = loc_rec(d, chain_next, c); break;
    case K_FP: r = loc_fp(d, chain_next, c); break;
    case K_ALLOCA: r = loc_alloca(d, chain_next, c); break;
    case K_NOFP_REC: r = lib_nofp.recurse(d, chain_next, c); break;
    case K_NOFP_ALLOCA: r = lib_nofp.alloca_(d, chain_next, c); break;
    case K_NOFP_MIXED: r = lib_nofp.mixed(d, chain_next, c); break;
    case K_FP_REC: r = lib_fp.recurse(d, chain_next, c); break;
    case K_FP_ALLOCA: r = lib_fp.alloca_(d, chain_next, c); break;
    case K_FP_MIXED: r = lib_fp.mixed(d, chain_next, c); break;
    default: r = cxx_run != NULL ? cxx_run(d, chain_next, c) : loc_rec(d, chain_next, c); break;
    }
    KEEP(r);
    return r;
}

static const char *chain_name(const chain_t *c)
{
    static __thread char buf[512];
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->n && len < sizeof(buf) - 40; i++)
        len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%s(%d)", i ? " > " : "", kind_names[c->kind[i]],
                                c->depth[i]);
    return buf;
}

static void chain_diff(chain_t *c, uw_diff_t *d)
{
    c->pos = 0;
    c->leaf = uw_take;
    c->leaf_arg = d;
    d->nmine = d->ngcc = -2;
    chain_next(c);
    uw_check(d, chain_name(c));
}

static void chain_random(chain_t *c, uint64_t *rng, int maxlen, int maxdepth)
{
    c->n = 1 + (int)(tu_rand(rng) % (uint64_t)maxlen);
    for (int i = 0; i < c->n; i++) {
        c->kind[i] = (unsigned)(tu_rand(rng) % K_N);
        c->depth[i] = (int)(tu_rand(rng) % (uint64_t)(maxdepth + 1));
    }
}

/* A chain in a thread of its own: two such threads make the same calls
 * from the same return addresses (a loop in one function may not: the
 * compiler can peel or unroll it into two call sites). */
typedef struct chain_job {
    chain_t *c;
    uw_diff_t *d;
} chain_job_t;

static void *chain_job(void *arg)
{
    chain_job_t *j = arg;
    chain_diff(j->c, j->d);
    return NULL;
}

static void in_thread(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, fn, arg), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
}

static prof_unwind_stats_t stats_now(void)
{
    prof_unwind_stats_t s;
    prof_unwind_stats_get(&s);
    return s;
}

/* =====================================================================
 * 1. Rules.
 */

static uintptr_t ra_noted;

NOINLINE void note_ra(void)
{
    ra_noted = (uintptr_t)__builtin_return_address(0);
    BARRIER(&ra_noted);
}

NOINLINE int rule_frameless(void)
{
    note_ra();
    int r = 0;
    KEEP(r);
    return r;
}

FPFN int rule_fp(void)
{
    note_ra();
    int r = 0;
    KEEP(r);
    return r;
}

NOINLINE int rule_alloca(int n)
{
    char buf[n];
    memset(buf, 0, (size_t)n);
    BARRIER(buf);
    note_ra();
    int r = buf[0];
    KEEP(r);
    return r;
}

NOINLINE int note_ra_cb(void *arg)
{
    (void)arg;
    ra_noted = (uintptr_t)__builtin_return_address(0);
    BARRIER(&ra_noted);
    return 0;
}

NOINLINE int rule_realign(void)
{
    int r = loc_realign(40, note_ra_cb, NULL);
    KEEP(r);
    return r;
}

Test(prof_unwind, frames_reduce_to_the_expected_rules)
{
    prof_unwind_rule_t r;

    rule_frameless();
    prof_unwind_rule_of(ra_noted, false, &r);
    cr_assert_eq(r.kind, PROF_UNWIND_CFA_RSP, "a frameless function's CFA is rsp-based (kind %d)", r.kind);
    cr_assert_geq(r.cfa_off, 8);
    cr_assert_eq(r.cfa_off % 8, 0);

    rule_alloca(100);
    prof_unwind_rule_of(ra_noted, false, &r);
    cr_assert_eq(r.kind, PROF_UNWIND_CFA_RBP, "a variable-size frame's CFA is rbp-based (kind %d)", r.kind);
    cr_assert_eq(r.cfa_off, 16);
    cr_assert(r.rbp_saved);
    cr_assert_eq(r.rbp_off, -16);

#ifndef __clang__
    rule_fp();
    prof_unwind_rule_of(ra_noted, false, &r);
    cr_assert_eq(r.kind, PROF_UNWIND_CFA_RBP, "a frame-pointer function's CFA is rbp-based (kind %d)", r.kind);
    cr_assert_eq(r.cfa_off, 16);
    cr_assert(r.rbp_saved);
    cr_assert_eq(r.rbp_off, -16);
#endif

    /* The DRAP frame: a CFA expression, given up. */
    rule_realign();
    prof_unwind_rule_of(ra_noted, false, &r);
    cr_assert_eq(r.kind, PROF_UNWIND_GIVEUP, "a CFA expression is given up (kind %d)", r.kind);

    /* Not in any object, and in no FDE: libgcc decides. */
    prof_unwind_rule_of(16, false, &r);
    cr_assert_eq(r.kind, PROF_UNWIND_GIVEUP);

    /* The outermost frame of a full stack: its return address is
     * undefined. */
    uw_diff_t *d = calloc(1, sizeof(*d));
    uw_take(d);
    cr_assert_gt(d->nmine, 1);
    cr_assert_lt(d->nmine, UW_MAX);
    prof_unwind_rule_of((uintptr_t)d->mine[d->nmine - 1], false, &r);
    cr_assert_eq(r.kind, PROF_UNWIND_END, "the last frame (%s) is not the end (kind %d)",
                 sym_of(d->mine[d->nmine - 1]), r.kind);
    free(d);
}

/* =====================================================================
 * 2. The same stacks as libgcc.
 */

Test(prof_unwind, deep_recursion_of_every_kind_of_frame)
{
    uw_diff_t *d = calloc(1, sizeof(*d));
    const unsigned kinds[] = {K_REC, K_FP, K_ALLOCA};
    const int depths[] = {0, 1, 2, 7, 50, 300};
    for (size_t k = 0; k < MA_ARRAY_LEN(kinds); k++) {
        for (size_t j = 0; j < MA_ARRAY_LEN(depths); j++) {
            chain_t c = {.n = 1, .kind = {kinds[k]}, .depth = {depths[j]}};
            chain_diff(&c, d);
            cr_assert_geq(uw_count(d, kind_names[kinds[k]]), depths[j] + 1, "%s", chain_name(&c));
        }
    }
    free(d);
}

Test(prof_unwind, frameless_frame_pointer_and_variable_frames_interleaved)
{
    uw_diff_t *d = calloc(1, sizeof(*d));
    chain_t c = {.n = 6,
                 .kind = {K_REC, K_FP, K_ALLOCA, K_REC, K_ALLOCA, K_FP},
                 .depth = {3, 2, 4, 0, 1, 5}};
    chain_job_t j = {&c, d};
    /* Twice, each time in a new thread running the same code: the same
     * return addresses, and the second time every rule comes from the
     * cache. */
    prof_unwind_stats_t s0 = stats_now();
    in_thread(chain_job, &j);
    prof_unwind_stats_t s1 = stats_now();
    in_thread(chain_job, &j);
    prof_unwind_stats_t s2 = stats_now();
    cr_assert_gt(s1.derived, s0.derived);
    cr_assert_eq(s2.derived, s1.derived, "a repeated stack derived %llu rules again",
                 (unsigned long long)(s2.derived - s1.derived));
    cr_assert_eq(s2.giveups, s0.giveups);
    free(d);
}

/* ---------------------------------------------------------------------
 * The replay of a thread's last walk.
 */
typedef struct replay_job {
    int switch_level; /* rp_rec at this depth calls down through its second call site; -1: none */
    uw_diff_t d[3];
    uint64_t replayed[3]; /* frames replayed by each walk */
} replay_job_t;

static replay_job_t *rp_job;
static int rp_walk;

/* Two call sites of itself: the return addresses above the level that
 * takes the second differ; the frames (and their places) do not. */
NOINLINE int rp_rec(int depth, int switch_level)
{
    int r;
    if (depth == 0) {
        uint64_t before = stats_now().replayed;
        r = uw_take(&rp_job->d[rp_walk]);
        rp_job->replayed[rp_walk] = stats_now().replayed - before;
    } else if (depth == switch_level) {
        r = rp_rec(depth - 1, switch_level);
        KEEP(r);
    } else {
        r = rp_rec(depth - 1, switch_level) + 1;
        KEEP(r);
    }
    return r;
}

/* Three walks from the same place of this thread's stack: the same stack
 * twice, then one whose return address differs above level switch_level.
 * Frame-pointer code: rbp is the same at every call. */
FPFN void *replay_thread(void *arg)
{
    rp_job = arg;
    for (rp_walk = 0; rp_walk < 3; rp_walk++) /* one call site: one return address */
        rp_rec(12, rp_walk == 2 ? rp_job->switch_level : -1);
    return NULL;
}

Test(prof_unwind, a_repeated_stack_is_replayed_up_to_the_first_frame_that_differs)
{
    for (int level = 3; level <= 9; level += 6) {
        replay_job_t *j = calloc(1, sizeof(*j));
        j->switch_level = level;
        in_thread(replay_thread, j);
        for (int w = 0; w < 3; w++)
            uw_check(&j->d[w], "replay");
        cr_assert_eq(j->d[0].nmine, j->d[1].nmine);
        /* The second walk, the same stack: every frame replayed, none
         * looked up. */
        cr_assert_eq(j->replayed[1], (uint64_t)j->d[1].nmine, "replayed %llu of %d frames of a repeated stack",
                     (unsigned long long)j->replayed[1], j->d[1].nmine);
        /* The third: frames 0 (uw_take), 1 (rp_rec 0) .. level (rp_rec
         * level - 1) are as before; frame level + 1, the return into
         * rp_rec(level), is the other call site. */
        cr_assert_neq(j->d[2].mine[level + 1], j->d[1].mine[level + 1]);
        cr_assert_eq(j->d[2].mine[level], j->d[1].mine[level]);
        cr_assert_eq(j->replayed[2], (uint64_t)level + 1, "switch at level %d: replayed %llu frames", level,
                     (unsigned long long)j->replayed[2]);
        free(j);
    }
}

/* The same return addresses at the same places, but a frame whose CFA
 * comes from rbp sits elsewhere: the outer va_frame's alloca grows by as
 * much as the inner one's shrinks, so every frame from the inner one down
 * is where it was, and only rbp tells that the inner one's caller's frame
 * moved. The replay must see it (the regions are zeroed: stale return
 * addresses of the first walk would be read back as if nothing had
 * moved). */
NOINLINE int va_inner(void *arg)
{
    int r = uw_take(arg);
    KEEP(r);
    return r;
}

NOINLINE int va_frame(int depth, size_t n, void *arg)
{
    char *x = alloca(n);
    memset(x, 0, n);
    BARRIER(x);
    int r = depth == 0 ? va_inner(arg) : va_frame(depth - 1, 4096 - n, arg);
    KEEP(r);
    return r;
}

typedef struct va_job {
    uw_diff_t d[2];
    uint64_t replayed[2];
} va_job_t;

static va_job_t *va_job_cur;
static int va_walk;

FPFN void *va_thread(void *arg)
{
    va_job_cur = arg;
    for (va_walk = 0; va_walk < 2; va_walk++) {
        uint64_t before = stats_now().replayed;
        va_frame(1, va_walk == 0 ? 64 : 1024, &va_job_cur->d[va_walk]);
        va_job_cur->replayed[va_walk] = stats_now().replayed - before;
    }
    return NULL;
}

Test(prof_unwind, a_replay_checks_rbp_where_a_frame_depends_on_it)
{
    va_job_t *j = calloc(1, sizeof(*j));
    in_thread(va_thread, j);
    uw_check(&j->d[0], "pad 64");
    uw_check(&j->d[1], "pad 1024");
    cr_assert_lt(j->replayed[1], (uint64_t)j->d[1].nmine, "all %d frames replayed though a frame moved",
                 j->d[1].nmine);
    free(j);
}

/* A walk cut at its cap records no step past it. Walk 0 goes through a
 * small alloca; walks 1 and 2 start lower, below a large one, and walk 1 is
 * cut after three frames: the steps it leaves must not include walk 0's
 * fourth, whose place was measured from walk 0's start, or walk 2 (same
 * start, whole) would replay it and go astray. */
NOINLINE int cap_plain(size_t n, void *arg)
{
    int r = va_frame(0, n, arg);
    KEEP(r);
    return r;
}

static va_job_t *cap_job;
static int cap_walk;

FPFN void *cap_thread(void *arg)
{
    cap_job = arg;
    for (cap_walk = 0; cap_walk < 3; cap_walk++) { /* one call site */
        uw_cap = cap_walk == 1 ? 3 : UW_MAX;
        cap_plain(cap_walk == 0 ? 64 : 1024, &cap_job->d[cap_walk == 2]);
    }
    uw_cap = UW_MAX;
    return NULL;
}

Test(prof_unwind, a_walk_cut_at_its_cap_leaves_no_step_past_it_to_replay)
{
    va_job_t *j = calloc(1, sizeof(*j));
    in_thread(cap_thread, j);
    uw_check(&j->d[0], "small alloca");
    uw_check(&j->d[1], "large alloca, after a walk cut at 3 frames");
    free(j);
}

Test(prof_unwind, frames_of_a_shared_library_with_and_without_frame_pointers)
{
    libs_open();
    uw_diff_t *d = calloc(1, sizeof(*d));
    const unsigned kinds[] = {K_NOFP_REC, K_NOFP_ALLOCA, K_NOFP_MIXED, K_FP_REC, K_FP_ALLOCA, K_FP_MIXED};
    for (size_t k = 0; k < MA_ARRAY_LEN(kinds); k++) {
        for (int depth = 0; depth < 40; depth += 13) {
            chain_t c = {.n = 1, .kind = {kinds[k]}, .depth = {depth}};
            chain_diff(&c, d);
        }
    }
    /* The library calling back into the program and into itself. */
    chain_t c = {.n = 7,
                 .kind = {K_NOFP_MIXED, K_REC, K_FP_ALLOCA, K_NOFP_REC, K_FP, K_FP_MIXED, K_ALLOCA},
                 .depth = {5, 2, 3, 1, 2, 6, 2}};
    chain_diff(&c, d);
    cr_assert_geq(uw_count(d, "uwlib_mixed"), 6);
    free(d);
}

/* The loader-generation reads of n walks of c, all from one call site
 * (the same return addresses every time). */
__attribute__((noipa)) static uint64_t gen_reads_of_walks(chain_t *c, uw_diff_t *d, int n)
{
    uint64_t before = stats_now().gen_reads;
    for (int i = 0; i < n; i++)
        chain_diff(c, d);
    return stats_now().gen_reads - before;
}

/* Rules of the objects loaded at startup (this program, libc, Criterion's
 * libraries) hold in every loader generation: walks through them alone ask
 * the loader for it at most once, in the first walk, whose new return
 * addresses need rules derived. A frame of a dlopen'd library and every
 * walk must ask, once. */
Test(prof_unwind, only_frames_of_dlopened_libraries_make_a_walk_read_the_loader_generation)
{
    libs_open();
    uw_diff_t *d = calloc(1, sizeof(*d));
    chain_t local = {.n = 3, .kind = {K_REC, K_FP, K_ALLOCA}, .depth = {3, 2, 1}};
    chain_t lib = {.n = 2, .kind = {K_REC, K_NOFP_REC}, .depth = {2, 3}};
    prof_unwind_stats_t s0 = stats_now();
    uint64_t n = gen_reads_of_walks(&local, d, 20);
    cr_assert_leq(n, 1, "20 walks of startup objects read the generation %llu times", (unsigned long long)n);
    n = gen_reads_of_walks(&lib, d, 20);
    cr_assert_eq(n, 20, "20 walks through a dlopen'd library read the generation %llu times", (unsigned long long)n);
    cr_assert_eq(stats_now().giveups, s0.giveups);
    free(d);
}

/* The loaded segment of this program holding addr. */
typedef struct seg_find {
    uintptr_t addr, lo, hi;
} seg_find_t;

static int seg_find_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    seg_find_t *f = arg;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && f->addr - lo < ph->p_memsz) {
            f->lo = lo;
            f->hi = lo + ph->p_memsz;
            return 1;
        }
    }
    return 0;
}

/* Up to four keys that fall in one set of the rule cache all stay there:
 * the frames of a hot stack that happen to share a set do not evict each
 * other at every walk (with two ways, three such frames did: one process
 * in about 500 failed the test above). */
Test(prof_unwind, four_keys_in_one_cache_set_all_stay_cached)
{
    seg_find_t seg = {(uintptr_t)uw_take, 0, 0};
    cr_assert_eq(dl_iterate_phdr(seg_find_cb, &seg), 1);
    uintptr_t keys[4];
    unsigned n = 0, set = prof_unwind_cache_set(seg.lo);
    for (uintptr_t k = seg.lo; k < seg.hi && n < MA_ARRAY_LEN(keys); k++)
        if (prof_unwind_cache_set(k) == set)
            keys[n++] = k;
    cr_assert_eq(n, MA_ARRAY_LEN(keys), "only %u keys of the program's text fall in set %u", n, set);
    prof_unwind_rule_t r;
    for (unsigned i = 0; i < n; i++)
        prof_unwind_rule_of(keys[i], true, &r);
    for (unsigned i = 0; i < n; i++)
        cr_assert(prof_unwind_cache_holds(keys[i]), "key %u of %u (%#lx) was evicted from set %u", i + 1, n,
                  (unsigned long)keys[i], set);
}

Test(prof_unwind, frames_of_cxx_code)
{
    if (!cxx_available())
        cr_skip_test("libunwind_cxx.so not built (no C++ compiler)");
    libs_open();
    uw_diff_t *d = calloc(1, sizeof(*d));
    for (int depth = 0; depth < 4; depth++) {
        chain_t c = {.n = 3, .kind = {K_CXX, K_REC, K_CXX}, .depth = {depth, 2, depth + 1}};
        chain_diff(&c, d);
        cr_assert_geq(uw_count(d, "uwcxx_run"), 2, "%s", uw_show(d));
    }
    free(d);
}

Test(prof_unwind, stacks_cut_at_the_cap_agree)
{
    uw_diff_t *d = calloc(1, sizeof(*d));
    const int caps[] = {1, 2, 5, 33};
    for (size_t i = 0; i < MA_ARRAY_LEN(caps); i++) {
        uw_cap = caps[i];
        chain_t c = {.n = 2, .kind = {K_REC, K_ALLOCA}, .depth = {20, 20}};
        chain_diff(&c, d);
        cr_assert_eq(d->nmine, caps[i]);
    }
    uw_cap = UW_MAX;
    free(d);
}

/* Many random chains: every kind of frame, library and depth mixed. */
Test(prof_unwind, random_chains, .timeout = 120)
{
    libs_open();
    uw_diff_t *d = calloc(1, sizeof(*d));
    uint64_t rng = 0x5eed;
    for (int i = 0; i < 400; i++) {
        chain_t c;
        chain_random(&c, &rng, 8, 9);
        chain_diff(&c, d);
    }
    free(d);
}

/* =====================================================================
 * 3. Libraries unloaded.
 */

typedef struct swap_lib {
    void *h;
    uw_fn *frame;
    uintptr_t base;
} swap_lib_t;

static void swap_open(swap_lib_t *s, const char *name, int bytes)
{
    s->h = lib_open(name);
    s->frame = (uw_fn *)lib_sym(s->h, "swap_frame");
    int (*nbytes)(void) = (int (*)(void))lib_sym(s->h, "swap_bytes");
    cr_assert_eq(nbytes(), bytes, "%s is not the build asked for", name);
    Dl_info info;
    cr_assert_neq(dladdr((void *)s->frame, &info), 0);
    s->base = (uintptr_t)info.dli_fbase;
}

Test(prof_unwind, a_library_unloaded_and_another_loaded_in_its_place)
{
    uw_diff_t *d = calloc(1, sizeof(*d));
    int same_place = 0;
    uintptr_t last_base = 0;
    void *last_ips[UW_MAX];
    int nlast = 0, reused = 0;
    for (int round = 0; round < 6; round++) {
        swap_lib_t s;
        if (round % 2 == 0)
            swap_open(&s, "libunwind_swap_a.so", 16);
        else
            swap_open(&s, "libunwind_swap_b.so", 64);
        same_place += s.base == last_base;
        last_base = s.base;
        d->nmine = d->ngcc = -2;
        s.frame(4, uw_take, d);
        uw_check(d, round % 2 == 0 ? "swap_a" : "swap_b");
        cr_assert_eq(uw_count(d, "swap_frame"), 5, "%s", uw_show(d));
        /* Return addresses also seen in the other build, at the same
         * place: those whose rules had to change. */
        for (int i = 1; i < d->nmine; i++)
            for (int j = 1; j < nlast; j++)
                reused += d->mine[i] == last_ips[j] && strcmp(sym_of(d->mine[i]), "swap_frame") == 0;
        memcpy(last_ips, d->mine, sizeof(void *) * (size_t)d->nmine);
        nlast = d->nmine;
        cr_assert_eq(dlclose(s.h), 0);
    }
    if (same_place == 0)
        cr_log_warn("the two builds never loaded at the same address: stale rules not exercised");
    else
        cr_assert_gt(reused, 0, "the builds loaded at the same place but share no return address");
    free(d);
}

/* =====================================================================
 * 4. Threads.
 */

typedef struct thread_job {
    uint64_t seed;
    int iters;
} thread_job_t;

static void *chains_thread(void *arg)
{
    thread_job_t *j = arg;
    uw_diff_t *d = calloc(1, sizeof(*d));
    uint64_t rng = j->seed;
    for (int i = 0; i < j->iters; i++) {
        chain_t c;
        chain_random(&c, &rng, 6, 12);
        chain_diff(&c, d);
    }
    free(d);
    return NULL;
}

static volatile int loader_stop;

static void *loader_thread(void *arg)
{
    int *cycles = arg;
    while (!loader_stop) {
        swap_lib_t s;
        swap_open(&s, (*cycles & 1) ? "libunwind_swap_b.so" : "libunwind_swap_a.so", (*cycles & 1) ? 64 : 16);
        dlclose(s.h);
        ++*cycles;
    }
    return NULL;
}

Test(prof_unwind, several_threads_at_once_while_libraries_come_and_go, .timeout = 180)
{
    libs_open();
    enum { NT = 4 };
    pthread_t t[NT], loader;
    thread_job_t jobs[NT];
    int cycles = 0;
    loader_stop = 0;
    cr_assert_eq(pthread_create(&loader, NULL, loader_thread, &cycles), 0);
    for (int i = 0; i < NT; i++) {
        jobs[i] = (thread_job_t){0x1000 + (uint64_t)i, 150};
        cr_assert_eq(pthread_create(&t[i], NULL, chains_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < NT; i++)
        cr_assert_eq(pthread_join(t[i], NULL), 0);
    loader_stop = 1;
    cr_assert_eq(pthread_join(loader, NULL), 0);
    cr_assert_gt(cycles, 0);
}

/* A thread on a stack of its own (pthread_attr_setstack), and a
 * coroutine's stack (makecontext): bounded by their own mappings. */
static void *own_stack_thread(void *arg)
{
    uw_diff_t *d = arg;
    chain_t c = {.n = 2, .kind = {K_ALLOCA, K_REC}, .depth = {10, 10}};
    chain_diff(&c, d);
    return NULL;
}

Test(prof_unwind, a_thread_on_a_stack_of_its_own)
{
    size_t size = 1 << 20;
    void *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(stack, MAP_FAILED);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstack(&attr, stack, size);
    uw_diff_t *d = calloc(1, sizeof(*d));
    pthread_t t;
    cr_assert_eq(pthread_create(&t, &attr, own_stack_thread, d), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
    free(d);
    munmap(stack, size);
}

static ucontext_t co_main, co_ctx;
static uw_diff_t *co_diff;

static void co_body(void)
{
    chain_t c = {.n = 1, .kind = {K_REC}, .depth = {5}};
    c.leaf = uw_take;
    c.leaf_arg = co_diff;
    chain_next(&c);
}

Test(prof_unwind, a_coroutine_stack_is_bounded_by_its_own_mapping)
{
    size_t size = 256 << 10;
    void *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(stack, MAP_FAILED);
    co_diff = calloc(1, sizeof(*co_diff));
    for (int round = 0; round < 3; round++) {
        cr_assert_eq(getcontext(&co_ctx), 0);
        co_ctx.uc_stack.ss_sp = stack;
        co_ctx.uc_stack.ss_size = size;
        co_ctx.uc_link = &co_main;
        makecontext(&co_ctx, co_body, 0);
        co_diff->nmine = co_diff->ngcc = -2;
        cr_assert_eq(swapcontext(&co_main, &co_ctx), 0);
        cr_assert_geq(co_diff->ngcc, 2);
        cr_assert_geq(co_diff->nmine, 0, "the coroutine's stack was given up%s", uw_show(co_diff));
        cr_assert_eq(co_diff->nmine, co_diff->ngcc, "%s", uw_show(co_diff));
        for (int i = 1; i < co_diff->nmine; i++)
            cr_assert_eq(co_diff->mine[i], co_diff->gcc[i], "frame %d%s", i, uw_show(co_diff));
        /* And back on the thread's own stack. */
        uw_diff_t *d = calloc(1, sizeof(*d));
        chain_t c = {.n = 1, .kind = {K_FP}, .depth = {3}};
        chain_diff(&c, d);
        free(d);
    }
    free(co_diff);
    munmap(stack, size);
}

/* After fork, in the child: the cache and the stack bounds carry over. */
Test(prof_unwind, a_forked_child_unwinds)
{
    libs_open();
    uw_diff_t *d = calloc(1, sizeof(*d));
    chain_t c = {.n = 3, .kind = {K_NOFP_MIXED, K_FP, K_ALLOCA}, .depth = {3, 3, 3}};
    chain_diff(&c, d);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        chain_t cc = {.n = 3, .kind = {K_ALLOCA, K_FP_REC, K_REC}, .depth = {2, 4, 6}};
        cc.leaf = uw_take;
        cc.leaf_arg = d;
        chain_next(&cc);
        bool same = d->nmine >= 2 && d->nmine == d->ngcc;
        for (int i = 1; same && i < d->nmine; i++)
            same = d->mine[i] == d->gcc[i];
        _exit(same ? 0 : 1);
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's stack differs from libgcc's (status %#x)", st);
    free(d);
}

/* =====================================================================
 * 5. What it gives up on, and libgcc then.
 */

static uw_diff_t *sig_diff;
static void *sig_prof[PROF_BT_MAX_LIMIT];
static unsigned sig_nprof;

NOINLINE void sig_probe(void)
{
    uw_take(sig_diff);
    /* The profiler's stack from here: prof_bt:gcc hands it to libgcc. */
    sig_nprof = prof_backtrace(sig_prof, PROF_BT_MAX_LIMIT, &(prof_bt_start_t){__builtin_return_address(0), 0, 0});
    BARRIER(sig_prof);
}

static void sig_handler(int sig)
{
    (void)sig;
    sig_probe();
    __asm__ volatile("" : : : "memory"); /* not a tail call */
}

NOINLINE int raise_usr1(void *arg)
{
    (void)arg;
    raise(SIGUSR1);
    return 1;
}

static void check_signal_stack(const char *what)
{
    uw_diff_t *d = sig_diff;
    cr_assert_eq(d->nmine, -1, "%s: a stack through a signal frame was not given up%s", what, uw_show(d));
    cr_assert_geq(uw_count(d, "raise_usr1"), 1, "%s: libgcc did not unwind through the signal frame%s", what,
                  uw_show(d));
    /* gcc[1] is sig_probe's return address into the handler. */
    cr_assert_eq(sig_nprof, (unsigned)d->ngcc - 2, "%s: profiler's stack has %u frames, libgcc %d", what, sig_nprof,
                 d->ngcc);
    for (unsigned i = 0; i < sig_nprof; i++)
        cr_assert_eq(sig_prof[i], d->gcc[i + 2], "%s: profiler's frame %u", what, i);
}

Test(prof_unwind, signal_frames_are_given_up_and_left_to_libgcc)
{
    opt_prof_bt = PROF_BT_GCC;
    bool on = true;
    cr_assert_eq(mallctl("prof.active", NULL, NULL, &on, sizeof(on)), 0); /* warms the unwinders */
    sig_diff = calloc(1, sizeof(*sig_diff));
    struct sigaction sa = {0};
    sa.sa_handler = sig_handler;
    cr_assert_eq(sigaction(SIGUSR1, &sa, NULL), 0);
    prof_unwind_stats_t s0 = stats_now();
    chain_t c = {.n = 1, .kind = {K_ALLOCA}, .depth = {3}, .leaf = raise_usr1};
    chain_next(&c);
    check_signal_stack("signal");
    cr_assert_geq(stats_now().giveups, s0.giveups + 2);

    /* On an alternate signal stack. */
    stack_t ss = {0};
    ss.ss_size = 1 << 16;
    ss.ss_sp = mmap(NULL, ss.ss_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(ss.ss_sp, MAP_FAILED);
    cr_assert_eq(sigaltstack(&ss, NULL), 0);
    sa.sa_flags = SA_ONSTACK;
    cr_assert_eq(sigaction(SIGUSR1, &sa, NULL), 0);
    c.pos = 0;
    chain_next(&c);
    check_signal_stack("sigaltstack");
    free(sig_diff);
}

Test(prof_unwind, a_cfa_expression_is_given_up)
{
    uw_diff_t *d = calloc(1, sizeof(*d));
    prof_unwind_stats_t s0 = stats_now();
    loc_realign(100, uw_take, d);
    cr_assert_eq(d->nmine, -1, "%s", uw_show(d));
    cr_assert_geq(uw_count(d, "loc_realign"), 1);
    cr_assert_eq(stats_now().giveups, s0.giveups + 1);
    free(d);
}

/* The first stack of a thread reads its bounds without allocating. */
static void *first_in_thread(void *arg)
{
    uint64_t *bytes = arg;
    uint64_t before = 0, after = 0;
    size_t sz = sizeof(before);
    cr_assert_eq(mallctl("thread.allocated", &before, &sz, NULL, 0), 0);
    void *buf[64];
    int n = prof_unwind_backtrace(buf, 64);
    cr_assert_eq(mallctl("thread.allocated", &after, &sz, NULL, 0), 0);
    cr_assert_gt(n, 1);
    *bytes = after - before;
    return NULL;
}

Test(prof_unwind, never_allocates)
{
    prof_unwind_stats_t s0 = stats_now();
    uint64_t bytes = 1;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, first_in_thread, &bytes), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
    cr_assert_eq(bytes, 0, "the first unwind of a thread allocated %llu bytes", (unsigned long long)bytes);
    cr_assert_gt(stats_now().scans, s0.scans, "the new thread's stack bounds were not looked up");
}

/* =====================================================================
 * 6. Through the profiler: prof_bt:gcc and prof_bt:libgcc record the same
 * stacks.
 */

static prof_rec_t *rec_of(const void *p)
{
    rtree_elm_t elm = rtree_lookup((uintptr_t)p);
    if (!(elm & RTREE_SAMPLED))
        return NULL;
    extent_t *e = rtree_elm_extent(elm);
    return e != NULL ? e->prof : NULL;
}

NOINLINE int alloc_leaf(void *arg)
{
    void **out = arg;
    *out = malloc(48);
    BARRIER(*out);
    return 1;
}

/* One sampled allocation at the end of a chain, in a thread of its own
 * (so that the two engines' samples have the same return addresses). */
typedef struct sample_job {
    chain_t *c;
    void *p;
    uint64_t from_frame; /* the thread's walks that started at the program's frame */
} sample_job_t;

static void *sample_thread(void *arg)
{
    sample_job_t *j = arg;
    j->c->pos = 0;
    j->c->leaf = alloc_leaf;
    j->c->leaf_arg = &j->p;
    uint64_t f0 = stats_now().from_frame;
    chain_next(j->c);
    j->from_frame = stats_now().from_frame - f0;
    return NULL;
}

/* Returns how many of the prof_bt:gcc samples' walks started at the
 * program's frame. */
static uint64_t engines_compare(uint64_t seed, int iters)
{
    uint64_t rng = seed, from_frame = 0;
    for (int i = 0; i < iters; i++) {
        chain_t c;
        chain_random(&c, &rng, 5, 8);
        sample_job_t j[2] = {{&c, NULL, 0}, {&c, NULL, 0}};
        opt_prof_bt = PROF_BT_GCC;
        in_thread(sample_thread, &j[0]);
        opt_prof_bt = PROF_BT_LIBGCC;
        in_thread(sample_thread, &j[1]);
        opt_prof_bt = PROF_BT_GCC;
        prof_rec_t *r0 = rec_of(j[0].p), *r1 = rec_of(j[1].p);
        cr_assert_not_null(r0, "not sampled: %s", chain_name(&c));
        cr_assert_not_null(r1, "not sampled: %s", chain_name(&c));
        const prof_stack_t *s0 = r0->stack, *s1 = r1->stack;
        cr_assert_str_eq(sym_of(s0->frames[0]), "alloc_leaf", "%s", chain_name(&c));
        cr_assert_eq(s0->depth, s1->depth, "%s: %u frames with prof_bt:gcc, %u with prof_bt:libgcc", chain_name(&c),
                     s0->depth, s1->depth);
        for (unsigned k = 0; k < s0->depth; k++)
            cr_assert_eq(s0->frames[k], s1->frames[k], "%s: frame %u (%s / %s)", chain_name(&c), k,
                         sym_of(s0->frames[k]), sym_of(s1->frames[k]));
        cr_assert_eq(s0, s1, "the same stack is interned once");
        free(j[0].p);
        free(j[1].p);
        from_frame += j[0].from_frame;
    }
    return from_frame;
}

/* Samples of other threads meanwhile, whichever engine is set. */
static volatile int busy_stop;

static void *busy_sampler(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg;
    while (!busy_stop) {
        chain_t c;
        chain_random(&c, &rng, 4, 6);
        void *p = NULL;
        c.pos = 0;
        c.leaf = alloc_leaf;
        c.leaf_arg = &p;
        chain_next(&c);
        free(p);
    }
    return NULL;
}

/* A sample taken in a signal handler: the walk from the program's frame
 * meets the signal frame and gives up, once; libgcc then walks the whole
 * stack, through the signal frame, and the record starts at the program's
 * call. */
static void *sig_obj;

static void alloc_sig_handler(int sig)
{
    (void)sig;
    alloc_leaf(&sig_obj);
    __asm__ volatile("" : : : "memory"); /* not a tail call */
}

Test(prof_unwind, a_sample_in_a_signal_handler_is_given_up_once_and_left_to_libgcc)
{
    opt_prof_bt = PROF_BT_GCC;
    size_t lg = 0;
    cr_assert_eq(mallctl("prof.reset", NULL, NULL, &lg, sizeof(lg)), 0); /* every allocation sampled */
    bool on = true;
    cr_assert_eq(mallctl("prof.active", NULL, NULL, &on, sizeof(on)), 0);
    struct sigaction sa = {0};
    sa.sa_handler = alloc_sig_handler;
    cr_assert_eq(sigaction(SIGUSR1, &sa, NULL), 0);
    prof_unwind_stats_t s0 = stats_now();
    raise_usr1(NULL);
    prof_unwind_stats_t s1 = stats_now();
    cr_assert_eq(s1.from_frame - s0.from_frame, 1, "the walk did not start at the program's frame");
    cr_assert_eq(s1.giveups - s0.giveups, 1, "%llu give-ups for one stack",
                 (unsigned long long)(s1.giveups - s0.giveups));
    prof_rec_t *r = rec_of(sig_obj);
    cr_assert_not_null(r, "not sampled");
    const prof_stack_t *st = r->stack;
    cr_assert_str_eq(sym_of(st->frames[0]), "alloc_leaf");
    bool through = false;
    for (unsigned k = 0; k < st->depth; k++)
        through |= strcmp(sym_of(st->frames[k]), "raise_usr1") == 0;
    cr_assert(through, "the recorded stack does not go through the signal frame");
    free(sig_obj);
}

Test(prof_unwind, samples_record_the_same_stacks_as_with_libgcc, .timeout = 120)
{
    libs_open();
    cr_assert_eq(opt_prof_bt, PROF_BT_GCC, "the default unwinder is gcc");
    const char *bt = NULL;
    size_t sz = sizeof(bt);
    cr_assert_eq(mallctl("opt.prof_bt", &bt, &sz, NULL, 0), 0);
    cr_assert_str_eq(bt, "gcc");
    size_t lg = 0;
    cr_assert_eq(mallctl("prof.reset", NULL, NULL, &lg, sizeof(lg)), 0); /* every allocation sampled */
    bool on = true;
    cr_assert_eq(mallctl("prof.active", NULL, NULL, &on, sizeof(on)), 0);
    prof_unwind_stats_t s0 = stats_now();
    uint64_t from_frame = engines_compare(77, 150);
    cr_assert_eq(stats_now().giveups, s0.giveups, "prof_unwind gave up on an ordinary stack");
    /* malloc reaches its slow path by a tail call: every prof_bt:gcc sample
     * above started its walk at the program's frame (and recorded the same
     * stack as libgcc's walk through the allocator's frames). */
    cr_assert_geq(from_frame, 150, "%llu of 150 walks started at the program's frame", (unsigned long long)from_frame);
    /* Again while two other threads sample all the time. */
    pthread_t busy[2];
    busy_stop = 0;
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&busy[i], NULL, busy_sampler, (void *)(uintptr_t)(900 + i)), 0);
    engines_compare(78, 150);
    busy_stop = 1;
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_join(busy[i], NULL), 0);
    uint64_t skipped = 0;
    sz = sizeof(skipped);
    cr_assert_eq(mallctl("prof.nskipped", &skipped, &sz, NULL, 0), 0);
    cr_assert_eq(skipped, 0, "%llu samples skipped", (unsigned long long)skipped);
}
