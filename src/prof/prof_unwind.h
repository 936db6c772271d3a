/*
 * prof_unwind: a caching DWARF CFI unwinder for the profiler's samples.
 *
 * The default unwinder (prof_bt:gcc) tries this first and falls back to
 * libgcc's _Unwind_Backtrace whenever it gives up: on x86-64 Linux it
 * derives, once per return address, a small rule from the object's
 * .eh_frame (CFA = rsp or rbp + offset, the return address and the caller's
 * rbp at fixed offsets from the CFA) and keeps it in a global cache, so that a sample walks its frames with a few loads each instead of
 * re-interpreting the CFI of every frame. See doc/internals.md.
 *
 * Never allocates, takes no lock, and reads the stack only inside the
 * calling thread's stack. Anything it does not handle (signal frames, CFI
 * expressions, a CFA on another register, no unwind information, a stack
 * it cannot bound, other architectures) makes it give up for the whole
 * sample: the caller then asks libgcc, so results are libgcc's either way.
 */
#ifndef MYALLOC_PROF_UNWIND_H
#define MYALLOC_PROF_UNWIND_H

#include <stdbool.h>
#include <stdint.h>

/* Outside malloc (at the profiler's warm-up): find _dl_find_object, read
 * the stack limit. Idempotent. Until it has run, prof_unwind gives up. */
void prof_unwind_boot(void);

/* The calling thread's stack as return addresses, innermost first, the way
 * _Unwind_Backtrace reports it to a callback that stops at cap frames or at
 * a zero address: the first one is inside prof_unwind itself (as libgcc's is
 * inside its caller), the last one the outermost frame (_start, clone3).
 * Returns the number written (at most cap), or -1: gave up, buf is
 * garbage, ask libgcc. */
int prof_unwind(void **buf, int cap);

/* In the child after fork: entries a vanished thread was writing. */
void prof_unwind_postfork_child(void);

/* Counters (relaxed, for tests and curiosity): rules derived (cache
 * misses) and samples given up. */
extern uint64_t prof_unwind_nderived;
extern uint64_t prof_unwind_ngiveup;

/* Tests only. prof_unwind_enabled: prof_bt:gcc tries prof_unwind first
 * (default true). prof_unwind_test_config: forget every cached rule, use
 * only the first (mask + 1) cache entries (mask + 1 a power of two, at
 * least 4, at most the table size; 0: all), and look objects up with dl_iterate_phdr instead of
 * _dl_find_object (phdr true), as on glibc before 2.35. Single-threaded
 * callers only. */
extern bool prof_unwind_enabled;
void prof_unwind_test_config(unsigned mask, bool phdr);

#endif
