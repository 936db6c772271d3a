/*
 * prof_bt: stack capture for samples.
 *
 * The default unwinder (prof_bt:gcc) follows the DWARF unwind tables, so
 * it works for code built without frame pointers: prof_unwind.c with its
 * cache of rules first, and libgcc's _Unwind_Backtrace (or glibc's
 * backtrace()) for the stacks it gives up on. prof_bt:libgcc skips the
 * former; prof_bt:fp walks frame pointers instead (needs
 * -fno-omit-frame-pointer code).
 *
 * The allocator's own frames are cut exactly: every entry point passes the
 * return address into the program ("caller") down its slow path, and the
 * kept stack starts at the first frame equal to it. Should the unwinder not
 * report that frame, frames inside the allocator's own text are skipped
 * instead. With prof_bt:gcc, a slow path that knows the program's frame
 * (prof_bt_start_t) has the walk start there: no own frame is walked at all.
 */
#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <pthread.h>
#include <string.h>
#include <unwind.h>

#include "prof.h"
#include "prof_unwind.h"

#define PROF_BT_SKIP_MAX 32 /* the allocator's own frames are far fewer */

static uintptr_t own_text_lo, own_text_hi;

/* libgcc's unwinder, called directly (found at warm-up with dlsym, so that
 * nothing more is linked): it saves backtrace()'s own frames and helper.
 * NULL: use backtrace(). */
typedef _Unwind_Reason_Code unwind_backtrace_fn(_Unwind_Trace_Fn, void *);
typedef _Unwind_Ptr unwind_getip_fn(struct _Unwind_Context *);
static unwind_backtrace_fn *unwind_backtrace;
static unwind_getip_fn *unwind_getip;

typedef struct unwind_arg {
    void **buf;
    int n, cap;
} unwind_arg_t;

static _Unwind_Reason_Code unwind_step(struct _Unwind_Context *ctx, void *p)
{
    unwind_arg_t *a = p;
    if (a->n == a->cap)
        return _URC_END_OF_STACK;
    uintptr_t ip = unwind_getip(ctx);
    if (ip == 0)
        return _URC_END_OF_STACK;
    a->buf[a->n++] = (void *)ip;
    return _URC_NO_REASON;
}

static int bt_libgcc(void **buf, int cap)
{
    if (unwind_backtrace == NULL)
        return backtrace(buf, cap);
    unwind_arg_t a = {buf, 0, cap};
    unwind_backtrace(unwind_step, &a);
    return a.n;
}

/* The DWARF unwinder; libgcc's when it gives up (prof_unwind's first
 * frame is then one in here, as libgcc's is: both are cut below). */
static int bt_gcc(void **buf, int cap)
{
    int n = prof_unwind_backtrace(buf, cap);
    return n >= 0 ? n : bt_libgcc(buf, cap);
}

/* The thread's stack top, for bounding the frame-pointer walk. */
static __thread uintptr_t bt_stack_hi __attribute__((tls_model("initial-exec")));

static uintptr_t stack_top(void)
{
    if (bt_stack_hi == 0) {
        pthread_attr_t attr;
        void *addr;
        size_t size;
        /* May allocate (glibc reads /proc/self/maps for the main thread):
         * the caller is re-entrant here, so those allocations are plain. */
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            if (pthread_attr_getstack(&attr, &addr, &size) == 0)
                bt_stack_hi = (uintptr_t)addr + size;
            pthread_attr_destroy(&attr);
        }
        if (bt_stack_hi == 0)
            bt_stack_hi = UINTPTR_MAX; /* unknown: rely on the other checks */
    }
    return bt_stack_hi;
}

/* Walk saved frame pointers: each frame is {saved fp, return address}.
 * Stops at a null or misaligned fp, one that does not move up the stack,
 * or one beyond the thread's stack. */
static MA_NOINLINE int bt_fp(void **buf, int max)
{
    uintptr_t hi = stack_top();
    void **fp = __builtin_frame_address(0);
    int n = 0;
    while (n < max) {
        uintptr_t f = (uintptr_t)fp;
        if ((f & 7) != 0 || f + 2 * sizeof(void *) > hi)
            break;
        void *ra = fp[1];
        if (ra == NULL)
            break;
        buf[n++] = ra;
        void **next = (void **)fp[0];
        if (next <= fp || (uintptr_t)next - f > ((uintptr_t)64 << 20))
            break;
        fp = next;
    }
    return n;
}

/* Walks that may enter the loader (libgcc's, backtrace()) hold fork back
 * while they run (prof_unwind.h, prof_unwind_loader_enter); ours enters
 * only around its own dl_iterate_phdr calls, the frame-pointer walk never. */
/* A walk that starts in this function: the allocator's own frames are cut
 * below. Out of line: its buffer makes a large frame, which the common
 * sample (prof_bt:gcc from the program's frame) does not need. */
MA_NOINLINE unsigned prof_bt_walk_cut(void **frames, unsigned max, void *caller, unsigned kind)
{
    void *buf[PROF_BT_MAX_LIMIT + PROF_BT_SKIP_MAX];
    int cap = (int)max + PROF_BT_SKIP_MAX;
    int n;
    if (kind == PROF_BT_FP) {
        n = bt_fp(buf, cap);
    } else {
        prof_unwind_loader_enter();
        n = kind == PROF_BT_LIBGCC ? bt_libgcc(buf, cap) : bt_gcc(buf, cap);
        prof_unwind_loader_leave();
    }
    int start = -1;
    for (int i = 0; i < n && i < PROF_BT_SKIP_MAX; i++) {
        if (buf[i] == caller) {
            start = i;
            break;
        }
    }
    if (start < 0) {
        start = 0;
        while (start < n && (uintptr_t)buf[start] >= own_text_lo && (uintptr_t)buf[start] < own_text_hi)
            start++;
    }
    unsigned depth = (unsigned)(n - start);
    if (depth > max)
        depth = max;
    memcpy(frames, buf + start, depth * sizeof(void *));
    return depth;
}

/* Our code: from the first to the end of the last executable segment of
 * the object holding self (the allocation paths and the cold code are two,
 * with a hole between them: Makefile, COLD_SRC). */
static int find_own_text(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    uintptr_t self = (uintptr_t)arg, lo = UINTPTR_MAX, hi = 0;
    bool mine = false;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uintptr_t s = info->dlpi_addr + ph->p_vaddr, e = s + ph->p_memsz;
        lo = MA_MIN(lo, s);
        hi = MA_MAX(hi, e);
        mine |= self >= s && self < e;
    }
    if (!mine)
        return 0;
    own_text_lo = lo;
    own_text_hi = hi;
    return 1;
}

void prof_bt_boot(void)
{
    /* Where our own code lives (the library, or the program when linked
     * statically: then the fallback cut is less precise, see above). */
    dl_iterate_phdr(find_own_text, (void *)(uintptr_t)&prof_backtrace);
    /* The first backtrace() loads libgcc_s and allocates: do it now, not
     * inside a sampled malloc; then take libgcc's unwinder itself. */
    void *warm[4];
    backtrace(warm, 4);
    void *gcc = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (gcc == NULL)
        gcc = dlopen("libgcc_s.so.1", RTLD_NOW);
    if (gcc != NULL) {
        unwind_getip = (unwind_getip_fn *)dlsym(gcc, "_Unwind_GetIP");
        unwind_backtrace_fn *ub = (unwind_backtrace_fn *)dlsym(gcc, "_Unwind_Backtrace");
        if (unwind_getip != NULL && ub != NULL) {
            void *w[4];
            unwind_arg_t a = {w, 0, 4};
            ub(unwind_step, &a); /* warm its caches too */
            ma_store_release(&unwind_backtrace, ub);
        }
    }
    /* This thread's stack bounds and the library's own rules. */
    prof_unwind_boot();
}
