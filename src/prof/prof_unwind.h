/*
 * prof_unwind: the profiler's own DWARF CFI unwinder, with a cache of
 * reduced rules, for code built with or without frame pointers.
 *
 * For each return address it finds the FDE (through the object's
 * PT_GNU_EH_FRAME search table), runs the CFA program up to the call and
 * reduces the row to a rule of a few numbers (CFA = rsp or rbp + offset,
 * return address at CFA - 8, rbp saved at CFA + k or unchanged), which a
 * shared lock-free cache keeps by address. A warm sample is then a few
 * loads per frame. Anything the rule cannot express (signal frames, DWARF
 * expressions, a CFA on another register, no FDE, a stack it cannot
 * bound, another architecture) makes it give up on the whole stack: the
 * caller (prof_bt.c) then asks libgcc's _Unwind_Backtrace, so a stack is
 * always the one libgcc would have reported.
 *
 * Never allocates, takes no lock of the allocator, reads the stack only
 * within the calling thread's stack and unwind tables only of objects that
 * are loaded (under the loader's lock). See doc/internals.md.
 */
#ifndef MYALLOC_PROF_UNWIND_H
#define MYALLOC_PROF_UNWIND_H

#include <stdbool.h>
#include <stdint.h>

/* The calling thread's stack as return addresses, innermost first, as
 * _Unwind_Backtrace reports them: buf[0] is the return address into the
 * caller of prof_unwind_backtrace, the last one the outermost frame's
 * (_start, clone3). Stops at cap frames or a zero return address. Returns
 * the number written, or -1: gave up (buf holds nothing useful), ask
 * libgcc. */
int prof_unwind_backtrace(void **buf, int cap);

/* Outside malloc, at the profiler's warm-up: one unwind, so that the
 * calling thread's stack bounds are known and the cache holds the
 * library's own frames. */
void prof_unwind_boot(void);

/* The same from a frame of the caller's caller (or further up): ip its
 * return address, sp and bp rsp and rbp as they were at that call (exact
 * at any call, as for the caller's own frame). buf[0] is ip. -1: given up,
 * as above. */
int prof_unwind_backtrace_from(void **buf, int cap, uintptr_t ip, uintptr_t sp, uintptr_t bp);

/* At the allocator's initialisation (before anything could have been
 * dlopen'd: dlopen allocates): how many objects the loader lists, those
 * loaded at startup, which are never unloaded and whose rules are cached
 * for good. */
void prof_unwind_count_startup_objects(void);

/* Around any call that may take the loader's lock (dl_iterate_phdr,
 * libgcc's unwinder): fork waits until nobody is inside (see the .c). */
void prof_unwind_loader_enter(void);
void prof_unwind_loader_leave(void);

/* Fork: prepare waits for callers inside the loader; in the child, entries
 * another thread was writing at the fork are emptied (their writer does
 * not exist here). */
void prof_unwind_prefork(void);
void prof_unwind_postfork_parent(void);
void prof_unwind_postfork_child(void);

/* Counters, relaxed (for tests and diagnostics). */
typedef struct prof_unwind_stats {
    uint64_t derived;    /* rules derived from the unwind tables (misses) */
    uint64_t giveups;    /* stacks handed to libgcc */
    uint64_t scans;      /* stack-bound look-ups (/proc/self/maps) */
    uint64_t from_frame; /* the calling thread's walks started at a given frame (..._from) */
    uint64_t gen_reads;  /* walks that read the loader's generation */
    uint64_t replayed;   /* the calling thread's frames replayed from its last walk (no rule looked up) */
} prof_unwind_stats_t;
void prof_unwind_stats_get(prof_unwind_stats_t *out);

/* Tests only: the rule derived for address addr, looked up as a return
 * address (addr - 1) unless exact: kind, the CFA offset and the offset of
 * the saved rbp from the CFA (rbp_saved false: unchanged). */
enum prof_unwind_kind {
    PROF_UNWIND_NONE = 0,
    PROF_UNWIND_CFA_RSP = 1,
    PROF_UNWIND_CFA_RBP = 2,
    PROF_UNWIND_END = 3,     /* outermost frame: the return address is undefined */
    PROF_UNWIND_GIVEUP = 4   /* beyond the rule: libgcc must unwind this stack */
};
typedef struct prof_unwind_rule {
    enum prof_unwind_kind kind;
    int32_t cfa_off;
    bool rbp_saved;
    int16_t rbp_off;
} prof_unwind_rule_t;
void prof_unwind_rule_of(uintptr_t addr, bool exact, prof_unwind_rule_t *out);

/* Tests only: the cache set a key (an address, as looked up) falls in, and
 * whether the cache holds a rule for it valid now. */
unsigned prof_unwind_cache_set(uintptr_t key);
bool prof_unwind_cache_holds(uintptr_t key);

#endif
