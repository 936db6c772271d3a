/*
 * The caching CFI unwinder (src/prof/prof_unwind.c), differentially against
 * libgcc's _Unwind_Backtrace: from the same frame both must report the same
 * return addresses, or the fast one must give up (-1), never report
 * something else.
 *
 * Stacks: recursion of varying depth through functions with and without
 * frame pointers, alloca and variable-length arrays, frames larger than a
 * page and than 64 KiB, calls through libc (qsort's and bsearch's
 * callbacks), threads (with glibc's stacks and with a stack of their own),
 * a ucontext stack, a shared library built at test time without frame
 * pointers (and replaced by another at the same place), hand-written
 * assembly with CFI the unwinder must follow (remember/restore_state,
 * rules for registers it never reads, an undefined return address) or give
 * up on (expressions, a CFA on another register), and signal handlers (on
 * the thread's stack and on an alternate one): giving up there, cleanly.
 * Both object lookups (_dl_find_object, dl_iterate_phdr) run every case;
 * several threads share a cache cut down to a few entries (every rule
 * overwritten all the time: a torn one would show as a wrong frame).
 * End to end: a sampled malloc records the same stack with the fast
 * unwinder as with libgcc's.
 */
#include <alloca.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unwind.h>

#include "arena/rtree.h"
#include "myalloc.h"
#include "prof/prof.h"
#include "prof/prof_table.h"
#include "prof/prof_unwind.h"
#include "test_util.h"

void prof_bt_boot(void);

#if !(defined(__x86_64__) && defined(__linux__))
Test(prof_unwind, x86_64_linux_only)
{
    cr_skip_test("the fast unwinder is for x86-64 Linux; elsewhere libgcc's does it all");
}
#else

#define NOINLINE __attribute__((noinline, used))
#ifdef __clang__
#define FP NOINLINE
#define NOFP NOINLINE
#else
#define FP __attribute__((noinline, used, optimize("no-omit-frame-pointer")))
#define NOFP __attribute__((noinline, used, optimize("omit-frame-pointer")))
#endif
/* Keeps a value alive and a call from becoming a tail call. */
#define BARRIER(p) __asm__ volatile("" : : "r"(p) : "memory")

#define CAP 256

/* ---------------------------------------------------------------------
 * The two unwinders from one frame.
 */

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

static NOINLINE int gcc_bt(void **buf, int cap)
{
    gcc_arg_t a = {buf, 0, cap};
    _Unwind_Backtrace(gcc_step, &a);
    BARRIER(&a);
    return a.n;
}

/* What one comparison saw. Filled anywhere (threads, handlers, callbacks),
 * asserted on in the test's thread. */
typedef struct probe {
    int ran;
    int fast, gcc;      /* frames reported; fast -1: gave up */
    int diff;           /* first differing frame, -1 none */
    void *fast_at, *gcc_at;
} probe_t;

/* Both unwinders from here. Each reports its own frame first (inside
 * prof_unwind; inside gcc_bt), then the return address into this function
 * (two different calls), then the same frames: compared from the third. */
static NOINLINE void compare_here(void *arg)
{
    probe_t *p = arg;
    void *a[CAP], *b[CAP];
    int n1 = prof_unwind(a, CAP);
    int n2 = gcc_bt(b, CAP);
    p->ran++;
    p->fast = n1;
    p->gcc = n2;
    p->diff = -1;
    if (n1 < 0)
        return;
    int n = MA_MAX(n1, n2);
    for (int i = 2; i < n; i++) {
        void *x = i < n1 ? a[i] : NULL, *y = i < n2 ? b[i] : NULL;
        if (x != y) {
            p->diff = i;
            p->fast_at = x;
            p->gcc_at = y;
            break;
        }
    }
    BARRIER(a);
}

static const char *sym(void *ret)
{
    Dl_info info;
    if (ret == NULL || dladdr((char *)ret - 1, &info) == 0)
        return "?";
    return info.dli_sname != NULL ? info.dli_sname : info.dli_fname;
}

/* The fast unwinder answered, and the same as libgcc. */
static void expect_same(const probe_t *p, const char *what)
{
    cr_assert_gt(p->ran, 0, "%s: the probe never ran", what);
    cr_assert_geq(p->fast, 0, "%s: the fast unwinder gave up (libgcc: %d frames)", what, p->gcc);
    cr_assert_gt(p->gcc, 3, "%s: libgcc saw only %d frames", what, p->gcc);
    cr_assert_eq(p->diff, -1, "%s: frame %d differs: fast %p (%s), libgcc %p (%s); %d and %d frames", what, p->diff,
                 p->fast_at, sym(p->fast_at), p->gcc_at, sym(p->gcc_at), p->fast, p->gcc);
    cr_assert_eq(p->fast, p->gcc, "%s: %d frames, libgcc %d", what, p->fast, p->gcc);
}

/* Either the same as libgcc, or given up. */
static void expect_same_or_giveup(const probe_t *p, const char *what)
{
    cr_assert_gt(p->ran, 0, "%s: the probe never ran", what);
    if (p->fast < 0)
        return;
    cr_assert_eq(p->diff, -1, "%s: frame %d differs: fast %p (%s), libgcc %p (%s)", what, p->diff, p->fast_at,
                 sym(p->fast_at), p->gcc_at, sym(p->gcc_at));
    cr_assert_eq(p->fast, p->gcc, "%s: %d frames, libgcc %d", what, p->fast, p->gcc);
}

static void expect_giveup(const probe_t *p, const char *what)
{
    cr_assert_gt(p->ran, 0, "%s: the probe never ran", what);
    cr_assert_eq(p->fast, -1, "%s: the fast unwinder answered (%d frames; libgcc %d) where it must give up", what,
                 p->fast, p->gcc);
    cr_assert_gt(p->gcc, 2, "%s: libgcc saw only %d frames", what, p->gcc);
}

/* ---------------------------------------------------------------------
 * Stacks to compare on. Every shape calls cb(arg) at its bottom.
 */

typedef void cb_t(void *);

NOFP int rec_nofp(int n, cb_t *cb, void *arg);
FP int rec_fp(int n, cb_t *cb, void *arg);
NOFP int rec_alloca(int n, cb_t *cb, void *arg);
NOFP int rec_vla(int n, cb_t *cb, void *arg);
NOFP int rec_big(int n, cb_t *cb, void *arg);
NOFP int rec_huge(int n, cb_t *cb, void *arg);

/* Which function the next level is: a fixed pattern of the level, so
 * every depth mixes them differently. */
static int next_level(int n, cb_t *cb, void *arg)
{
    switch ((n * 7 + 3) % 11) {
    case 0:
    case 1:
    case 2:
        return rec_nofp(n - 1, cb, arg);
    case 3:
    case 4:
    case 5:
        return rec_fp(n - 1, cb, arg);
    case 6:
    case 7:
        return rec_alloca(n - 1, cb, arg);
    case 8:
        return rec_vla(n - 1, cb, arg);
    case 9:
        return n % 4 == 1 ? rec_huge(n - 1, cb, arg) : rec_big(n - 1, cb, arg);
    default:
        return rec_nofp(n - 1, cb, arg);
    }
}

NOFP int rec_nofp(int n, cb_t *cb, void *arg)
{
    if (n <= 0) {
        cb(arg);
        return 0;
    }
    int r = next_level(n, cb, arg);
    __asm__ volatile("" : "+r"(r));
    return r + 1;
}

FP int rec_fp(int n, cb_t *cb, void *arg)
{
    if (n <= 0) {
        cb(arg);
        return 0;
    }
    int r = next_level(n, cb, arg);
    __asm__ volatile("" : "+r"(r));
    return r + 1;
}

NOFP int rec_alloca(int n, cb_t *cb, void *arg)
{
    volatile char *buf = alloca(8 + (size_t)(n % 13) * 40);
    buf[0] = (char)n;
    int r = n <= 0 ? (cb(arg), 0) : next_level(n, cb, arg);
    __asm__ volatile("" : "+r"(r));
    return r + buf[0];
}

NOFP int rec_vla(int n, cb_t *cb, void *arg)
{
    volatile char vla[24 + (n % 7) * 100];
    vla[0] = (char)n;
    int r = n <= 0 ? (cb(arg), 0) : next_level(n, cb, arg);
    __asm__ volatile("" : "+r"(r));
    return r + vla[0] + (int)sizeof(vla);
}

/* Bigger than a page. */
NOFP int rec_big(int n, cb_t *cb, void *arg)
{
    volatile char big[12000];
    big[0] = (char)n;
    big[sizeof(big) - 1] = 1;
    int r = n <= 0 ? (cb(arg), 0) : next_level(n, cb, arg);
    __asm__ volatile("" : "+r"(r));
    return r + big[0] + big[sizeof(big) - 1];
}

/* Bigger than 64 KiB (offsets beyond 16 bits). */
NOFP int rec_huge(int n, cb_t *cb, void *arg)
{
    volatile char huge[150000];
    huge[0] = (char)n;
    huge[sizeof(huge) - 1] = 1;
    int r = n <= 0 ? (cb(arg), 0) : next_level(n, cb, arg);
    __asm__ volatile("" : "+r"(r));
    return r + huge[0] + huge[sizeof(huge) - 1];
}

/* A recursion of depth n starting with each kind of function. */
static int shape(int kind, int n, cb_t *cb, void *arg)
{
    switch (kind % 6) {
    case 0:
        return rec_nofp(n, cb, arg);
    case 1:
        return rec_fp(n, cb, arg);
    case 2:
        return rec_alloca(n, cb, arg);
    case 3:
        return rec_vla(n, cb, arg);
    case 4:
        return rec_big(n, cb, arg);
    default:
        return rec_huge(n, cb, arg);
    }
}

/* Through libc: qsort's comparison and bsearch's, probing once. */
typedef struct via_libc {
    cb_t *cb;
    void *arg;
    int done;
} via_libc_t;

static via_libc_t *libc_ctx; /* one thread at a time uses it */

static int cmp_probe(const void *x, const void *y)
{
    if (!libc_ctx->done) {
        libc_ctx->done = 1;
        libc_ctx->cb(libc_ctx->arg);
    }
    int a = *(const int *)x, b = *(const int *)y;
    return (a > b) - (a < b);
}

static NOINLINE void through_qsort(cb_t *cb, void *arg)
{
    int v[300];
    for (int i = 0; i < 300; i++)
        v[i] = (i * 7919) % 300;
    via_libc_t ctx = {cb, arg, 0};
    libc_ctx = &ctx;
    qsort(v, 300, sizeof(int), cmp_probe);
    libc_ctx = NULL;
    BARRIER(v);
}

static NOINLINE void through_bsearch(cb_t *cb, void *arg)
{
    int v[64];
    for (int i = 0; i < 64; i++)
        v[i] = i;
    int key = 37;
    via_libc_t ctx = {cb, arg, 0};
    libc_ctx = &ctx;
    void *r = bsearch(&key, v, 64, sizeof(int), cmp_probe);
    libc_ctx = NULL;
    BARRIER(r);
}

/* ---------------------------------------------------------------------
 * Recursion, frame pointers or none, alloca, big frames, libc.
 */

/* Every depth 0..120 from every kind of first function, and past CAP. */
static void all_depths(void)
{
    char what[64];
    for (int kind = 0; kind < 6; kind++) {
        for (int depth = 0; depth <= 120; depth += kind + 1) {
            probe_t p = {0};
            shape(kind, depth, compare_here, &p);
            snprintf(what, sizeof(what), "shape %d depth %d", kind, depth);
            expect_same(&p, what);
        }
        probe_t p = {0};
        shape(kind, CAP + 40, compare_here, &p);
        snprintf(what, sizeof(what), "shape %d beyond %d frames", kind, CAP);
        expect_same(&p, what);
        cr_assert_eq(p.fast, CAP, "%d frames past the cap", p.fast);
    }
}

static void through_libc(void)
{
    probe_t p = {0};
    through_qsort(compare_here, &p);
    expect_same(&p, "qsort's callback");
    memset(&p, 0, sizeof(p));
    through_bsearch(compare_here, &p);
    expect_same(&p, "bsearch's callback");
}

/* The two callbacks inside a recursion: libc in the middle of our frames. */
static void libc_in_the_middle_cb(void *arg)
{
    through_qsort(compare_here, arg);
}

static void libc_in_the_middle(void)
{
    for (int kind = 0; kind < 6; kind++) {
        probe_t p = {0};
        shape(kind, 9, libc_in_the_middle_cb, &p);
        expect_same(&p, "qsort inside a recursion");
    }
}

Test(prof_unwind, recursion_with_and_without_frame_pointers_alloca_and_big_frames)
{
    prof_unwind_boot();
    all_depths();
}

Test(prof_unwind, calls_through_libc)
{
    prof_unwind_boot();
    through_libc();
    libc_in_the_middle();
}

Test(prof_unwind, with_dl_iterate_phdr_instead_of_dl_find_object)
{
    prof_unwind_test_config(0, true);
    all_depths();
    through_libc();
    libc_in_the_middle();
}

/* A stack seen once is not derived again. (One call site in a loop the
 * compiler cannot peel: the return address into this test is one of the
 * frames.) */
Test(prof_unwind, rules_are_cached)
{
    prof_unwind_test_config(0, false);
    uint64_t derived[7];
    probe_t p[6];
    derived[0] = ma_load_relaxed(&prof_unwind_nderived);
    for (volatile int i = 0; i < 6; i++) {
        memset(&p[i], 0, sizeof(p[i]));
        shape(0, 30, compare_here, &p[i]);
        derived[i + 1] = ma_load_relaxed(&prof_unwind_nderived);
    }
    for (int i = 0; i < 6; i++)
        expect_same(&p[i], "walk");
    cr_assert_gt(derived[1] - derived[0], 10, "the first walk derived %llu rules",
                 (unsigned long long)(derived[1] - derived[0]));
    cr_assert_eq(derived[6], derived[1], "%llu rules derived again for a stack seen before",
                 (unsigned long long)(derived[6] - derived[1]));
}

/* ---------------------------------------------------------------------
 * Threads.
 */

static void *thread_cases(void *arg)
{
    (void)arg;
    all_depths();
    through_libc();
    return NULL;
}

Test(prof_unwind, threads)
{
    prof_unwind_boot();
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, thread_cases, NULL), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
}

/* A thread on a stack the program gave it (glibc puts the thread's
 * descriptor at its top, as on its own stacks). */
Test(prof_unwind, thread_on_a_stack_of_its_own)
{
    prof_unwind_boot();
    size_t size = 4 << 20;
    void *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(stack, MAP_FAILED);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    cr_assert_eq(pthread_attr_setstack(&attr, stack, size), 0);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, &attr, thread_cases, NULL), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
    pthread_attr_destroy(&attr);
    munmap(stack, size);
}

/* A ucontext stack (a coroutine's): whatever the stack check decides, the
 * answer is libgcc's or none. */
static ucontext_t uc_main, uc_co;
static probe_t uc_probe;

static void co_entry(void)
{
    shape(1, 6, compare_here, &uc_probe);
}

Test(prof_unwind, a_coroutine_stack)
{
    prof_unwind_boot();
    size_t size = 256 << 10;
    char *stack = malloc(size);
    cr_assert_not_null(stack);
    getcontext(&uc_co);
    uc_co.uc_stack.ss_sp = stack;
    uc_co.uc_stack.ss_size = size;
    uc_co.uc_link = &uc_main;
    makecontext(&uc_co, co_entry, 0);
    cr_assert_eq(swapcontext(&uc_main, &uc_co), 0);
    expect_same_or_giveup(&uc_probe, "on a ucontext stack");
    free(stack);
}

/* A forked child (the cache comes along) walks as its parent did. */
Test(prof_unwind, after_fork)
{
    prof_unwind_test_config(0, false);
    probe_t p = {0};
    shape(2, 20, compare_here, &p);
    expect_same(&p, "before fork");
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int bad = 0;
        for (int kind = 0; kind < 6; kind++) {
            probe_t q = {0};
            shape(kind, 20, compare_here, &q);
            bad += q.fast < 0 || q.diff != -1 || q.fast != q.gcc;
        }
        _exit(bad);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child saw %d walks differ (status %#x)",
              WEXITSTATUS(status), status);
}

/* ---------------------------------------------------------------------
 * Many threads, one cache cut down to 8 entries: every walk overwrites
 * rules another thread is reading.
 */

typedef struct hammer {
    int id, iters;
    int bad, giveups, runs;
    probe_t first_bad;
} hammer_t;

static void *hammer_thread(void *arg)
{
    hammer_t *h = arg;
    for (int i = 0; i < h->iters; i++) {
        probe_t p = {0};
        int kind = (h->id + i) % 6, depth = (h->id * 5 + i * 3) % 40;
        shape(kind, depth, compare_here, &p);
        h->runs++;
        if (p.fast < 0) {
            h->giveups++;
        } else if (p.diff != -1 || p.fast != p.gcc) {
            if (h->bad++ == 0)
                h->first_bad = p;
        }
    }
    return NULL;
}

static void hammer(unsigned mask, bool phdr)
{
    prof_unwind_test_config(mask, phdr);
    uint64_t d0 = ma_load_relaxed(&prof_unwind_nderived);
    enum { N = 6 };
    pthread_t t[N];
    hammer_t h[N];
    for (int i = 0; i < N; i++) {
        h[i] = (hammer_t){.id = i, .iters = 400};
        cr_assert_eq(pthread_create(&t[i], NULL, hammer_thread, &h[i]), 0);
    }
    int bad = 0, giveups = 0;
    for (int i = 0; i < N; i++) {
        cr_assert_eq(pthread_join(t[i], NULL), 0);
        cr_assert_eq(h[i].runs, h[i].iters);
        giveups += h[i].giveups;
        if (h[i].bad > 0 && bad == 0) {
            const probe_t *p = &h[i].first_bad;
            cr_log_error("thread %d: frame %d: fast %p (%s), libgcc %p (%s)", i, p->diff, p->fast_at,
                         sym(p->fast_at), p->gcc_at, sym(p->gcc_at));
        }
        bad += h[i].bad;
    }
    cr_assert_eq(bad, 0, "%d walks differed from libgcc's", bad);
    cr_assert_eq(giveups, 0, "%d walks gave up", giveups);
    uint64_t derived = ma_load_relaxed(&prof_unwind_nderived) - d0;
    if (mask != 0)
        cr_assert_gt(derived, 10000, "only %llu rules derived: the small cache was not contended",
                     (unsigned long long)derived);
    prof_unwind_test_config(0, false);
}

Test(prof_unwind, threads_share_a_small_cache_without_torn_rules, .timeout = 120)
{
    hammer(7, false);
}

Test(prof_unwind, threads_share_the_whole_cache, .timeout = 120)
{
    hammer(0, false);
}

Test(prof_unwind, threads_share_a_small_cache_with_dl_iterate_phdr, .timeout = 120)
{
    hammer(7, true);
}

/* ---------------------------------------------------------------------
 * Signal handlers: __restore_rt's FDE is a signal frame ('S'); the fast
 * unwinder gives up, on the thread's stack and on an alternate stack.
 */

static probe_t sig_probe;

static void on_signal(int sig)
{
    (void)sig;
    rec_nofp(3, compare_here, &sig_probe);
}

static void raise_usr1(void *arg)
{
    (void)arg;
    raise(SIGUSR1);
}

static void signal_case(bool altstack)
{
    prof_unwind_boot();
    stack_t ss = {0};
    if (altstack) {
        ss.ss_size = 1 << 16;
        ss.ss_sp = malloc(ss.ss_size);
        cr_assert_not_null(ss.ss_sp);
        cr_assert_eq(sigaltstack(&ss, NULL), 0);
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sa.sa_flags = altstack ? SA_ONSTACK : 0;
    sigemptyset(&sa.sa_mask);
    cr_assert_eq(sigaction(SIGUSR1, &sa, NULL), 0);
    for (int kind = 0; kind < 6; kind++) {
        memset(&sig_probe, 0, sizeof(sig_probe));
        uint64_t g0 = ma_load_relaxed(&prof_unwind_ngiveup);
        shape(kind, 5, raise_usr1, NULL);
        expect_giveup(&sig_probe, altstack ? "a handler on an alternate stack" : "a signal handler");
        cr_assert_gt(ma_load_relaxed(&prof_unwind_ngiveup), g0);
    }
    /* And a walk after it is back to normal. */
    probe_t p = {0};
    shape(2, 12, compare_here, &p);
    expect_same(&p, "after the signals");
    if (altstack) {
        stack_t off = {.ss_flags = SS_DISABLE};
        sigaltstack(&off, NULL);
        free(ss.ss_sp);
    }
}

Test(prof_unwind, signal_handler_frames_give_up)
{
    signal_case(false);
}

Test(prof_unwind, signal_handler_on_an_alternate_stack_gives_up)
{
    signal_case(true);
}

/* ---------------------------------------------------------------------
 * Hand-written CFI. Each function is fn(cb, arg): it calls cb(arg) with
 * the frame its CFI describes.
 */

#define ASM_FN(name, body)                                                                         \
    __asm__(".pushsection .text\n.globl " #name "\n.type " #name ", @function\n.p2align 4\n" #name \
            ":\n.cfi_startproc\nendbr64\n" body ".cfi_endproc\n.size " #name ", .-" #name "\n.popsection\n")

/* remember_state / restore_state around an early return (as GCC emits
 * for epilogues in the middle of a function), and a restore of rbp. */
void cfi_remember(cb_t *cb, void *arg);
ASM_FN(cfi_remember,
       "pushq %rbp\n.cfi_def_cfa_offset 16\n.cfi_offset rbp, -16\n"
       "movq %rsp, %rbp\n.cfi_def_cfa_register rbp\n"
       "testq %rdi, %rdi\njne 1f\n"
       ".cfi_remember_state\n"
       "popq %rbp\n.cfi_restore rbp\n.cfi_def_cfa rsp, 8\nret\n"
       "1:\n.cfi_restore_state\n"
       "movq %rdi, %rax\nmovq %rsi, %rdi\ncall *%rax\n"
       "popq %rbp\n.cfi_def_cfa rsp, 8\nret\n");

/* Rules for registers the unwinder never reads (an expression for rbx, a
 * val_offset for r13, r14 in r15): followed, the rules ignored. */
void cfi_other_regs(cb_t *cb, void *arg);
ASM_FN(cfi_other_regs,
       "pushq %rbx\n.cfi_def_cfa_offset 16\n.cfi_offset rbx, -16\n"
       "subq $16, %rsp\n.cfi_def_cfa_offset 32\n"
       /* DW_CFA_expression rbx: DW_OP_breg7 (rsp) +16 */
       ".cfi_escape 0x10, 0x03, 0x02, 0x77, 0x10\n"
       ".cfi_val_offset r13, -24\n"
       ".cfi_register r14, r15\n"
       "movq %rdi, %rax\nmovq %rsi, %rdi\ncall *%rax\n"
       "addq $16, %rsp\n.cfi_def_cfa_offset 16\n"
       "popq %rbx\n.cfi_def_cfa_offset 8\nret\n");

/* A frame whose return address is undefined: the last one (as _start). */
void cfi_outermost(cb_t *cb, void *arg);
ASM_FN(cfi_outermost,
       "subq $8, %rsp\n.cfi_def_cfa_offset 16\n.cfi_undefined rip\n"
       "movq %rdi, %rax\nmovq %rsi, %rdi\ncall *%rax\n"
       "addq $8, %rsp\n.cfi_def_cfa_offset 8\nret\n");

/* The CFA as an expression: DW_OP_breg6 (rbp) +16. */
void cfi_cfa_expression(cb_t *cb, void *arg);
ASM_FN(cfi_cfa_expression,
       "pushq %rbp\n.cfi_def_cfa_offset 16\n.cfi_offset rbp, -16\n"
       "movq %rsp, %rbp\n.cfi_escape 0x0f, 0x02, 0x76, 0x10\n"
       "movq %rdi, %rax\nmovq %rsi, %rdi\ncall *%rax\n"
       "popq %rbp\n.cfi_def_cfa rsp, 8\nret\n");

/* The CFA on r12 (which the unwinder does not track). */
void cfi_cfa_r12(cb_t *cb, void *arg);
ASM_FN(cfi_cfa_r12,
       "pushq %r12\n.cfi_def_cfa_offset 16\n.cfi_offset r12, -16\n"
       "leaq 16(%rsp), %r12\n.cfi_def_cfa r12, 0\n"
       "movq %rdi, %rax\nmovq %rsi, %rdi\ncall *%rax\n"
       "leaq -16(%r12), %rsp\n.cfi_def_cfa rsp, 16\n"
       "popq %r12\n.cfi_def_cfa_offset 8\nret\n");

/* rbp saved where an expression says (DW_CFA_expression rbp: DW_OP_breg6 0). */
void cfi_rbp_expression(cb_t *cb, void *arg);
ASM_FN(cfi_rbp_expression,
       "pushq %rbp\n.cfi_def_cfa_offset 16\n"
       "movq %rsp, %rbp\n.cfi_def_cfa rbp, 16\n.cfi_escape 0x10, 0x06, 0x02, 0x76, 0x00\n"
       "movq %rdi, %rax\nmovq %rsi, %rdi\ncall *%rax\n"
       "popq %rbp\n.cfi_def_cfa rsp, 8\nret\n");

/* The return address in another register's rule (DW_CFA_register). */
void cfi_ra_register(cb_t *cb, void *arg);
ASM_FN(cfi_ra_register,
       "pushq %rbx\n.cfi_def_cfa_offset 16\n.cfi_offset rbx, -16\n"
       "movq 8(%rsp), %rbx\n.cfi_register rip, rbx\n"
       "movq %rdi, %rax\nmovq %rsi, %rdi\ncall *%rax\n"
       ".cfi_offset rip, -8\n"
       "popq %rbx\n.cfi_def_cfa_offset 8\nret\n");

/* No unwind information at all (libgcc stops there). */
void cfi_none(cb_t *cb, void *arg);
__asm__(".pushsection .text\n.globl cfi_none\n.type cfi_none, @function\n.p2align 4\ncfi_none:\n"
        "endbr64\nsubq $8, %rsp\nmovq %rdi, %rax\nmovq %rsi, %rdi\ncall *%rax\naddq $8, %rsp\nret\n"
        ".size cfi_none, .-cfi_none\n.popsection\n");

/* Two levels of our recursion, the hand-written frame, two more levels. */
typedef struct asm_case {
    void (*fn)(cb_t *, void *);
    void *arg;
} asm_case_t;

static void asm_bottom(void *arg)
{
    rec_alloca(2, compare_here, arg);
}

static void asm_middle(void *arg)
{
    asm_case_t *c = arg;
    c->fn(asm_bottom, c->arg);
}

static void asm_probe(void (*fn)(cb_t *, void *), probe_t *p)
{
    memset(p, 0, sizeof(*p));
    asm_case_t c = {fn, p};
    rec_fp(2, asm_middle, &c);
}

Test(prof_unwind, cfi_it_follows)
{
    for (int phdr = 0; phdr < 2; phdr++) {
        prof_unwind_test_config(0, phdr);
        probe_t p;
        asm_probe(cfi_remember, &p);
        expect_same(&p, "remember_state/restore_state");
        asm_probe(cfi_other_regs, &p);
        expect_same(&p, "rules for registers it never reads");
        asm_probe(cfi_outermost, &p);
        expect_same(&p, "an undefined return address");
        cr_assert_lt(p.fast, 12, "%d frames past a frame whose return address is undefined", p.fast);
    }
}

Test(prof_unwind, cfi_it_gives_up_on)
{
    struct {
        void (*fn)(cb_t *, void *);
        const char *what;
    } cases[] = {
        {cfi_cfa_expression, "a CFA expression"},
        {cfi_cfa_r12, "a CFA on r12"},
        {cfi_rbp_expression, "an expression for rbp"},
        {cfi_ra_register, "the return address in a register"},
        {cfi_none, "a function without unwind information"},
    };
    for (int phdr = 0; phdr < 2; phdr++) {
        prof_unwind_test_config(0, phdr);
        for (size_t i = 0; i < MA_ARRAY_LEN(cases); i++) {
            probe_t p;
            asm_probe(cases[i].fn, &p);
            expect_giveup(&p, cases[i].what);
            /* Given up again from the cache, and a normal walk still works. */
            asm_probe(cases[i].fn, &p);
            expect_giveup(&p, cases[i].what);
            probe_t q = {0};
            shape(3, 7, compare_here, &q);
            expect_same(&q, "after giving up");
        }
    }
}

/* ---------------------------------------------------------------------
 * A shared library without frame pointers, built here; then replaced by
 * another one (dlclose, dlopen: usually at the same address).
 */

static const char lib_src[] =
    "#include <alloca.h>\n"
    "typedef void cb_t(void *);\n"
    "int lib_rec(int n, cb_t *cb, void *arg);\n"
    "#ifdef VARIANT\n"
    "__attribute__((noinline)) int lib_pad(int n) { volatile char b[300]; b[0] = n; return b[0] * 3 + n; }\n"
    "#endif\n"
    "__attribute__((noinline)) static int lib_big(int n, cb_t *cb, void *arg)\n"
    "{\n"
    "    volatile char b[FRAME];\n"
    "    b[0] = (char)n;\n"
    "    int r = lib_rec(n - 1, cb, arg);\n"
    "    __asm__ volatile(\"\" : \"+r\"(r));\n"
    "    return r + b[0];\n"
    "}\n"
    "__attribute__((noinline)) int lib_rec(int n, cb_t *cb, void *arg)\n"
    "{\n"
    "    if (n <= 0) { cb(arg); return 0; }\n"
    "    volatile char *a = alloca(16 + (n % 5) * 24);\n"
    "    a[0] = (char)n;\n"
    "    int r = (n % 3 == 0) ? lib_big(n, cb, arg) : lib_rec(n - 1, cb, arg);\n"
    "    __asm__ volatile(\"\" : \"+r\"(r));\n"
    "    return r + a[0];\n"
    "}\n";

static char lib_dir[256];

static void lib_cleanup(void)
{
    if (lib_dir[0] != '\0') {
        char cmd[512], out[1024];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", lib_dir);
        tu_run(cmd, out, sizeof(out));
    }
}

/* Builds lib<name>.so with cc -shared -O2, no frame pointers. */
static void build_lib(const char *name, const char *defs)
{
    if (lib_dir[0] == '\0') {
        snprintf(lib_dir, sizeof(lib_dir), "/tmp/myalloc-uw.XXXXXX");
        cr_assert_not_null(mkdtemp(lib_dir));
    }
    char src[512], cmd[2048], out[4096];
    snprintf(src, sizeof(src), "%s/%s.c", lib_dir, name);
    FILE *f = fopen(src, "w");
    cr_assert_not_null(f);
    fputs(lib_src, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "cc -shared -fPIC -O2 -fomit-frame-pointer %s -o '%s/lib%s.so' '%s'", defs, lib_dir,
             name, src);
    int rc = tu_run(cmd, out, sizeof(out));
    cr_assert_eq(rc, 0, "%s failed:\n%s", cmd, out);
}

typedef int lib_rec_fn(int, cb_t *, void *);

static void *lib_open(const char *name, lib_rec_fn **fn)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/lib%s.so", lib_dir, name);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(h, "dlopen %s: %s", path, dlerror());
    *fn = (lib_rec_fn *)dlsym(h, "lib_rec");
    cr_assert_not_null(*fn);
    return h;
}

/* Through the library, with our own frames above and below it. */
typedef struct lib_case {
    lib_rec_fn *fn;
    int depth;
    probe_t *p;
} lib_case_t;

static void lib_below(void *arg)
{
    rec_nofp(3, compare_here, arg);
}

static void lib_above(void *arg)
{
    lib_case_t *c = arg;
    c->fn(c->depth, lib_below, c->p);
}

static void lib_cases(lib_rec_fn *fn, const char *what)
{
    char msg[128];
    for (int depth = 0; depth < 40; depth += 3) {
        probe_t p = {0};
        lib_case_t c = {fn, depth, &p};
        shape(depth % 6, 4, lib_above, &c);
        snprintf(msg, sizeof(msg), "%s, depth %d", what, depth);
        expect_same(&p, msg);
    }
}

Test(prof_unwind, a_shared_library_without_frame_pointers, .fini = lib_cleanup, .timeout = 120)
{
    build_lib("uwa", "-DFRAME=5000");
    build_lib("uwb", "-DFRAME=70000 -DVARIANT");
    for (int phdr = 0; phdr < 2; phdr++) {
        prof_unwind_test_config(0, phdr);
        lib_rec_fn *fn;
        void *h = lib_open("uwa", &fn);
        lib_cases(fn, "library a");
        uintptr_t a_at = (uintptr_t)fn;
        cr_assert_eq(dlclose(h), 0);
        /* Another library, usually where the first one was: its rules are
         * derived anew, not taken from the cache. */
        uint64_t d0 = ma_load_relaxed(&prof_unwind_nderived);
        h = lib_open("uwb", &fn);
        lib_cases(fn, "library b, loaded after a was unloaded");
        cr_log_info("library a's lib_rec at %#lx, b's at %#lx", (unsigned long)a_at, (unsigned long)(uintptr_t)fn);
        cr_assert_gt(ma_load_relaxed(&prof_unwind_nderived), d0);
        cr_assert_eq(dlclose(h), 0);
    }
}

/* ---------------------------------------------------------------------
 * End to end: a sampled allocation records the same stack either way.
 */

static prof_rec_t *rec_of(const void *p)
{
    rtree_elm_t elm = rtree_lookup((uintptr_t)p);
    if (!(elm & RTREE_SAMPLED))
        return NULL;
    extent_t *e = rtree_elm_extent(elm);
    return e != NULL ? e->prof : NULL;
}

static void *e2e_ptr;

void e2e_alloc(void *arg); /* extern: dladdr names it */
NOINLINE void e2e_alloc(void *arg)
{
    (void)arg;
    e2e_ptr = malloc(200);
    BARRIER(e2e_ptr);
}

static void sample_everything(void)
{
    opt_prof_seed = 99;
    size_t lg = 0;
    cr_assert_eq(mallctl("prof.reset", NULL, NULL, &lg, sizeof(lg)), 0);
    bool on = true;
    cr_assert_eq(mallctl("prof.active", NULL, NULL, &on, sizeof(on)), 0);
}

typedef struct e2e {
    int kind, depth;
    prof_stack_t *fast, *gcc;
    uint64_t fast_giveups;
} e2e_t;

/* The same call site twice: with the fast unwinder, then with libgcc's. */
static void *e2e_thread(void *arg)
{
    e2e_t *e = arg;
    for (int pass = 0; pass < 2; pass++) {
        prof_unwind_enabled = pass == 0;
        uint64_t g0 = ma_load_relaxed(&prof_unwind_ngiveup);
        shape(e->kind, e->depth, e2e_alloc, NULL);
        if (pass == 0)
            e->fast_giveups = ma_load_relaxed(&prof_unwind_ngiveup) - g0;
        prof_rec_t *r = rec_of(e2e_ptr);
        prof_stack_t *s = r != NULL ? r->stack : NULL;
        if (pass == 0)
            e->fast = s;
        else
            e->gcc = s;
        /* freed after the comparison: the record stays while live */
    }
    prof_unwind_enabled = true;
    return NULL;
}

Test(prof_unwind, a_sampled_malloc_records_the_same_stack_as_with_libgcc)
{
    sample_everything();
    for (int kind = 0; kind < 6; kind++) {
        for (int depth = 0; depth < 30; depth += 7) {
            e2e_t e = {kind, depth, NULL, NULL, 0};
            pthread_t t;
            cr_assert_eq(pthread_create(&t, NULL, e2e_thread, &e), 0);
            cr_assert_eq(pthread_join(t, NULL), 0);
            cr_assert_not_null(e.fast, "shape %d depth %d: not sampled with the fast unwinder", kind, depth);
            cr_assert_not_null(e.gcc, "shape %d depth %d: not sampled with libgcc's", kind, depth);
            cr_assert_eq(e.fast_giveups, 0, "shape %d depth %d: the fast unwinder gave up", kind, depth);
            cr_assert_eq(e.fast->depth, e.gcc->depth, "shape %d depth %d: %u frames, libgcc %u", kind, depth,
                         e.fast->depth, e.gcc->depth);
            for (uint32_t i = 0; i < e.fast->depth; i++)
                cr_assert_eq(e.fast->frames[i], e.gcc->frames[i], "shape %d depth %d: frame %u: %s vs %s", kind,
                             depth, i, sym(e.fast->frames[i]), sym(e.gcc->frames[i]));
            /* Equal stacks are one stack in the table. */
            cr_assert_eq(e.fast, e.gcc);
            cr_assert_str_eq(sym(e.fast->frames[0]), "e2e_alloc");
        }
    }
}

/* prof_backtrace, where the fast unwinder gives up (a signal handler):
 * libgcc's answer. */
static void *bt_frames[2][PROF_BT_MAX_LIMIT];
static unsigned bt_depth[2];
static uint64_t bt_giveups;

static NOINLINE void bt_entry(void *arg)
{
    (void)arg;
    void *caller = __builtin_return_address(0);
    for (int pass = 0; pass < 2; pass++) {
        prof_unwind_enabled = pass == 0;
        uint64_t g0 = ma_load_relaxed(&prof_unwind_ngiveup);
        bt_depth[pass] = prof_backtrace(bt_frames[pass], 128, caller);
        if (pass == 0)
            bt_giveups = ma_load_relaxed(&prof_unwind_ngiveup) - g0;
    }
    prof_unwind_enabled = true;
    BARRIER(caller);
}

static void bt_on_signal(int sig)
{
    (void)sig;
    rec_fp(2, bt_entry, NULL);
}

static void bt_raise(void *arg)
{
    (void)arg;
    raise(SIGUSR2);
}

static void expect_bt_same(const char *what)
{
    cr_assert_gt(bt_depth[1], 3, "%s: libgcc's stack has %u frames", what, bt_depth[1]);
    cr_assert_eq(bt_depth[0], bt_depth[1], "%s: %u frames, libgcc %u", what, bt_depth[0], bt_depth[1]);
    for (unsigned i = 0; i < bt_depth[0]; i++)
        cr_assert_eq(bt_frames[0][i], bt_frames[1][i], "%s: frame %u: %s vs %s", what, i, sym(bt_frames[0][i]),
                     sym(bt_frames[1][i]));
    cr_assert_eq(strncmp(sym(bt_frames[0][0]), "rec_", 4), 0, "%s: the first frame is %s", what,
                 sym(bt_frames[0][0]));
}

Test(prof_unwind, prof_backtrace_falls_back_to_libgcc_in_a_signal_handler)
{
    prof_bt_boot();
    shape(4, 6, bt_entry, NULL);
    expect_bt_same("a plain stack");
    cr_assert_eq(bt_giveups, 0);
    struct sigaction sa = {0};
    sa.sa_handler = bt_on_signal;
    sigemptyset(&sa.sa_mask);
    cr_assert_eq(sigaction(SIGUSR2, &sa, NULL), 0);
    shape(1, 6, bt_raise, NULL);
    expect_bt_same("in a signal handler");
    cr_assert_eq(bt_giveups, 1, "the fast unwinder did not give up in the handler");
}

#endif
