/*
 * prof: the sampling heap profiler.
 *
 * Sampling itself is one of the thread events (tcache/te.c): each thread
 * draws exponential waits with mean R = 2^lg_prof_sample bytes, and an
 * allocation of usable size Z that crosses the wait is sampled, with
 * probability 1 - exp(-Z/R). The slow path decides before allocating and
 * calls prof_alloc_sampled, which captures the stack, places the object
 * (a small object gets its own page run from the sampled region; a large
 * one stays in place and is marked) and counts it in the stack table.
 *
 * Counters are kept per (stack, size class, R): raw sampled counts, whose
 * unbiased values are count * w and count * usize * w with
 * w = 1 / (1 - exp(-usize / R)).
 *
 * Depends on arena (sampled pages, large objects) and sizeclass only; the
 * caller (core) guards re-entrancy and owns the thread state.
 */
#ifndef MYALLOC_PROF_H
#define MYALLOC_PROF_H

#include <sys/types.h>

#include "../arena/arena.h"
#include "prof_unwind.h"

#define PROF_BT_MAX_LIMIT 256
#define PROF_PREFIX_MAX 1024

/* The unwinders (prof_bt): gcc, the DWARF unwinder (prof_unwind.c, with
 * libgcc's for the stacks it gives up on); fp, frame pointers; libgcc,
 * libgcc's _Unwind_Backtrace for every stack. */
enum prof_bt_kind { PROF_BT_GCC = 0, PROF_BT_FP = 1, PROF_BT_LIBGCC = 2 };

/* What a dump writes (prof_format / prof.format), see doc/profiling.md:
 *   text    the gperftools heap format (raw counts; jeprof, pprof)   .heap
 *   pprof   gzipped profile.proto, unbiased, with function names     .pb.gz
 *   folded  folded stacks of unbiased live bytes (flame graphs)      .folded
 *   svg     a self-contained SVG flame graph of the live heap        .svg */
enum prof_format { PROF_FORMAT_TEXT = 0, PROF_FORMAT_PPROF, PROF_FORMAT_FOLDED, PROF_FORMAT_SVG, PROF_FORMAT_COUNT };
extern const char *const prof_format_names[]; /* by enum value, NULL-terminated */

/* Options (MYALLOC_CONF / malloc_conf; see src/core/conf.c). */
extern bool opt_prof;                 /* profiling armed at startup */
extern bool opt_prof_active;          /* ... and sampling at startup */
extern bool opt_prof_thread_active_init;
extern unsigned opt_lg_prof_sample;   /* R = 2^this */
extern ssize_t opt_lg_prof_interval;  /* dump every 2^this bytes allocated; -1 off */
extern bool opt_prof_accum;
extern bool opt_prof_final;
extern bool opt_prof_leak;
extern bool opt_prof_gdump;
extern char opt_prof_prefix[PROF_PREFIX_MAX];
extern uint64_t opt_prof_seed;
extern unsigned opt_prof_bt;          /* enum prof_bt_kind */
extern unsigned opt_prof_bt_max;
extern unsigned opt_prof_format;      /* enum prof_format */

/* Run-time state. */
extern bool prof_active;              /* sampling on (prof.active) */
extern unsigned prof_lg_sample;       /* current R (prof.lg_sample) */
extern bool prof_gdump_on;            /* prof.gdump */
extern uint64_t prof_nskipped;        /* samples that could not be recorded */
uint64_t prof_nsamples_get(void);     /* samples recorded */
extern unsigned prof_format;          /* format of every dump (prof.format) */

/* Under the init lock: options into state, tables, the sampled region. */
bool prof_boot(void);
/* After init, outside every lock: warm the unwinder, register exit dumps. */
void prof_boot_late(void);
/* Whether the profiler is armed: prof:true, or prof.active set since. */
bool prof_armed(void);

/* Start or stop sampling (the unwinder is warmed on first activation).
 * The caller then hands prof_active / prof_lg_sample to the samplers (the
 * thread events), see core's ma_prof_update. */
void prof_active_set(bool active);

/* Where a sampled stack starts: ip is the return address into the program
 * (the first frame kept). When the entry point reached its slow path by a
 * tail call, that path knows the program's frame itself: sp and bp are rsp
 * and rbp as they were at the program's call (sp == 0: not known), and the
 * default unwinder starts there instead of walking the allocator's own
 * frames to find it (3 frames, ~11% of a sample's instructions). */
typedef struct prof_bt_start {
    void *ip;
    uintptr_t sp, bp;
} prof_bt_start_t;

/* A sampled allocation of usize bytes (a class) aligned to align; zero
 * fills it with zeros. from says where its stack starts. arena serves
 * large objects. NULL when out of memory. */
void *prof_alloc_sampled(arena_t *arena, size_t usize, size_t align, bool zero, const prof_bt_start_t *from);

/* Free a sampled object (its page-map element says sampled). */
void prof_free_sampled(void *p, extent_t *e);

/* A walk that starts in prof_bt_walk_cut's own frame and cuts the
 * allocator's frames (prof_bt.c), with the walker of kind. */
unsigned prof_bt_walk_cut(void **frames, unsigned max, void *caller, unsigned kind);

/* Backtrace of the current thread starting at from's frame; returns the
 * number of frames written (at most max). In line: the common sample
 * (prof_bt:gcc from the program's frame) goes straight to our unwinder, with
 * no frame of a dispatcher between (batch-mixed: 807 -> 800 instructions a
 * sample). */
MA_INLINE unsigned prof_backtrace(void **frames, unsigned max, const prof_bt_start_t *from)
{
    if (max > PROF_BT_MAX_LIMIT)
        max = PROF_BT_MAX_LIMIT;
    unsigned kind = opt_prof_bt;
    if (kind == PROF_BT_GCC && from->sp != 0) {
        int n = prof_unwind_backtrace_from(frames, (int)max, (uintptr_t)from->ip, from->sp, from->bp);
        if (n >= 0)
            return (unsigned)n;
        kind = PROF_BT_LIBGCC; /* it gave up on one of the program's frames: libgcc walks the stack */
    }
    return prof_bt_walk_cut(frames, max, from->ip, kind);
}

/* Dumps, in the current prof_format. filename NULL:
 * <prefix>.<pid>.<seq>.<kind>.<suffix> (suffix heap, pb.gz, folded or svg).
 * Returns 0 or an errno value. */
int prof_dump(const char *filename, char kind);
/* The same for the peak profile: the live samples as they were at the
 * highest sampled live size seen (kind 'p'). */
int prof_dump_peak(const char *filename);
/* Forget all samples' cumulative counts and start over with R = 2^lg (live
 * objects stay counted, under the R they were sampled with). */
void prof_reset(unsigned lg_sample);

/* The sampled region's memory, for the allocator's statistics. */
typedef struct prof_region {
    size_t allocated;        /* usable bytes of live sampled small objects */
    size_t active_pages, dirty_pages, retained_pages;
    size_t mapped;
} prof_region_t;
void prof_region_stats(prof_region_t *out);

/* Unbiased totals over all records (exact sums of the estimates). */
typedef struct prof_totals {
    double live_objects, live_bytes;
    double accum_objects, accum_bytes;
    uint64_t live_samples, accum_samples;
    size_t sampled_small_bytes;   /* usable bytes of live sampled small objects */
} prof_totals_t;
void prof_totals_get(prof_totals_t *t);

/* Byte counter hook from the thread events: an interval dump when the
 * process's allocated bytes cross a multiple of 2^lg_prof_interval. Runs on
 * an allocation slow path, outside the allocator's locks. */
void prof_bytes_hook(uint64_t bytes);
/* A new chunk of memory was mapped (a new high-water mark): gdump. */
void prof_note_growth(void);
/* The short unbiased summary of unfreed memory (prof_leak, at exit). */
void prof_leak_report(void);

/* Decay purging of the sampled region's free pages (at most max_pages). */
void prof_decay(uint64_t now_ns, size_t max_pages);

void prof_prefork(void);
void prof_postfork_parent(void);
void prof_postfork_child(void);

#endif
