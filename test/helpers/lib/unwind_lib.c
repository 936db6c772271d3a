/*
 * A shared library for test_prof_unwind.c: call chains that end in a
 * callback into the test program, which compares prof_unwind's stack with
 * libgcc's. Built by the Makefile twice, -O2 with and without frame
 * pointers (libunwind_fp.so, libunwind_nofp.so), and loaded with dlopen.
 *
 *   uwlib_recurse   plain recursion (frameless without frame pointers)
 *   uwlib_alloca    a variable-size array in every frame (CFA from rbp)
 *   uwlib_mixed     the two, alternating, through a static function
 *   uwlib_call      calls fn(arg) through one frame of this library
 */
#include <stddef.h>
#include <string.h>

typedef int uw_cb(void *arg);

#define EXPORT __attribute__((visibility("default"), noinline))
/* Uses r after the call: no tail call, every level keeps its frame. */
#define KEEP(r) __asm__ volatile("" : "+r"(r) : : "memory")

EXPORT int uwlib_recurse(int depth, uw_cb *cb, void *arg)
{
    int r = depth == 0 ? cb(arg) : uwlib_recurse(depth - 1, cb, arg);
    KEEP(r);
    return r + 1;
}

EXPORT int uwlib_alloca(int depth, uw_cb *cb, void *arg)
{
    char buf[16 + 8 * (depth % 7)];
    memset(buf, depth, sizeof(buf));
    __asm__ volatile("" : : "r"(buf) : "memory");
    int r = depth == 0 ? cb(arg) : uwlib_alloca(depth - 1, cb, arg);
    KEEP(r);
    return r + buf[depth % sizeof(buf)];
}

static __attribute__((noinline)) int mixed_static(int depth, uw_cb *cb, void *arg);

EXPORT int uwlib_mixed(int depth, uw_cb *cb, void *arg)
{
    int r = depth == 0 ? cb(arg) : mixed_static(depth - 1, cb, arg);
    KEEP(r);
    return r + 1;
}

static __attribute__((noinline)) int mixed_static(int depth, uw_cb *cb, void *arg)
{
    char buf[8 + (depth & 3) * 24];
    memset(buf, 1, sizeof(buf));
    __asm__ volatile("" : : "r"(buf) : "memory");
    int r = depth == 0 ? cb(arg) : uwlib_mixed(depth - 1, cb, arg);
    KEEP(r);
    return r + buf[0];
}

EXPORT int uwlib_call(uw_cb *cb, void *arg)
{
    int r = cb(arg);
    KEEP(r);
    return r;
}
