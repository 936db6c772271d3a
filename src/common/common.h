/*
 * common: compiler helpers, atomics and the allocator's own diagnostics.
 *
 * Every module may include this header; it includes nothing of ours.
 * Nothing here may call malloc: the allocator is the malloc.
 */
#ifndef MYALLOC_COMMON_H
#define MYALLOC_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define MA_INLINE   static inline __attribute__((always_inline))
#define MA_NOINLINE __attribute__((noinline))
#define MA_COLD     __attribute__((cold, noinline))
#define MA_EXPORT   __attribute__((visibility("default")))
/* An entry point whose fast path is inline in it starts on a cache line:
 * where it starts otherwise follows from everything linked before it, and
 * the pair loop's time with it (make bench's pair-16 took 8% more CPU time
 * after an unrelated change moved free from offset 0x30 of its line to
 * 0x00 and malloc from 0x20 to 0x30; aligned, both builds ran alike). */
#define MA_ENTRY_ALIGNED __attribute__((aligned(64)))
/* A function of a cold file (see the Makefile's COLD_SRC: their .text goes
 * to a mapping of its own) that every program runs all the same (boot,
 * decay ticks): in .text.hot it stays with the code every process has
 * resident. */
#define MA_HOT_TEXT __attribute__((section(".text.hot")))
/* A function that a program reaches only through the interfaces beyond
 * malloc, free, calloc and realloc, the options, fork or the controls (the
 * Makefile's WARM_SRC): into the warm code's mapping, so that the pages of
 * code every process has resident hold only what every process runs. */
#define MA_WARM_TEXT __attribute__((section(".text.warm")))
/* Read-only data that only warm code or the tests read: with the warm code
 * (the Makefile puts the warm files' .rodata there too). */
#define MA_WARM_RODATA __attribute__((section(".rodata.warm")))
/* Read-only data of a warm file that hot code reads: stays in .rodata. */
#define MA_HOT_RODATA __attribute__((section(".rodata.hot")))
/* On an extern declaration: lets the compiler reach the object RIP-relative
 * (the fast paths' tables), since -fvisibility=hidden covers definitions
 * only. */
#define MA_HIDDEN   __attribute__((visibility("hidden")))
#define MA_UNUSED   __attribute__((unused))
/* On the definition of a large zero-initialised array: into .lbss, which
 * the linker places after .bss, so the small variables lie together on a
 * page or two instead of each keeping a page resident between arrays that
 * are touched in one place or not at all (doc/internals.md). */
#define MA_LARGE_BSS __attribute__((section(".lbss")))
#define MA_CACHELINE 64
#define MA_ALIGNED(n) __attribute__((aligned(n)))

#define MA_MIN(a, b) ((a) < (b) ? (a) : (b))
#define MA_MAX(a, b) ((a) > (b) ? (a) : (b))
#define MA_ALIGN_UP(x, a)   (((x) + ((a) - 1)) & ~((uintptr_t)(a) - 1))
#define MA_ALIGN_DOWN(x, a) ((x) & ~((uintptr_t)(a) - 1))
#define MA_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Relaxed atomics are enough for counters and for page-map entries read on
 * the fast path: the pointer being freed was published to the freeing thread
 * by the program's own synchronisation. Acquire/release where data hangs off
 * the value (page-map leaves, arena pointers). */
#define ma_load_relaxed(p)      __atomic_load_n((p), __ATOMIC_RELAXED)
#define ma_load_acquire(p)      __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define ma_store_relaxed(p, v)  __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define ma_store_release(p, v)  __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define ma_fetch_add(p, v)      __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define ma_fetch_sub(p, v)      __atomic_fetch_sub((p), (v), __ATOMIC_RELAXED)
#define ma_cas(p, expp, v) \
    __atomic_compare_exchange_n((p), (expp), (v), false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)

MA_INLINE unsigned ma_lg_floor(uint64_t x) { return 63u - (unsigned)__builtin_clzll(x); }
MA_INLINE unsigned ma_lg_ceil(uint64_t x) { return x <= 1 ? 0 : ma_lg_floor(x - 1) + 1; }
MA_INLINE uint64_t ma_pow2_ceil(uint64_t x) { return (uint64_t)1 << ma_lg_ceil(x); }

/* Formatting without malloc (src/common/fmt.c). Supports %s %c %d %i %u %x
 * %p %f %e %g-less subset with l/ll/z modifiers, width, zero padding, '-' and
 * precision. Returns the length the full output would have (like snprintf). */
size_t ma_vsnprintf(char *buf, size_t size, const char *fmt, va_list ap);
size_t ma_snprintf(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Elementary functions without libm (src/common/math.c): natural log,
 * e^x - 1, and round-half-away-from-zero to an integer. */
double ma_log(double x);
/* log x for x positive, normal and finite, from a table (ma_math_boot fills
 * it): no division, for the sampler's draw per sample. Error under 2^-51 *
 * max(1, |log x|). */
double ma_log_fast(double x);
/* Fills the tables of ma_log_fast and ma_exp_draw; once, any thread may
 * call it (the others wait for the first). Only sampling needs them: it is
 * called when sampling is switched on, not at startup, where its ~130,000
 * instructions were a third of a small program's whole run. */
void ma_math_boot(void);
void ma_math_postfork_child(void);
double ma_expm1(double x);
long long ma_llround(double x);

/* 2^k for -1022 <= k <= 1023, exactly: built from its exponent's bits. */
MA_INLINE double ma_pow2(int k)
{
    uint64_t u = (uint64_t)(k + 1023) << 52;
    double d;
    __builtin_memcpy(&d, &u, sizeof(d));
    return d;
}

/* splitmix64: one word of state, full period, passes BigCrush. */
MA_INLINE uint64_t ma_splitmix_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Exp(1) draws by Marsaglia and Tsang's ziggurat (J. Stat. Softw. 5(8),
 * 2000): 256 strips of equal area under e^-x; a draw picks a strip (the
 * low 8 bits of a generator word) and a point across it (its top 53 bits)
 * and returns it when it lies under the strip's part that is wholly under
 * the curve, 98.9% of draws: a table load, a compare and a multiply, where
 * -log(u) cost ~100 instructions. The rest (the strip's wedge, the tail
 * beyond r) is decided exactly, out of line. Tables from ma_math_boot,
 * which must have returned before the first draw. */
typedef struct ma_exp_zig {
    uint64_t k[256]; /* a point j (53 bits) of strip i is under the curve if j < k[i] */
    double w[256];   /* its x: j * w[i] */
    double f[256];   /* e^-x at strip i's right edge */
} ma_exp_zig_t;
extern ma_exp_zig_t ma_exp_zig MA_HIDDEN;
double ma_exp_draw_slow(uint64_t *state, uint64_t r);

MA_INLINE double ma_exp_draw(uint64_t *state)
{
    uint64_t r = ma_splitmix_next(state);
    unsigned i = (unsigned)(r & 255);
    uint64_t j = r >> 11;
    if (likely(j < ma_exp_zig.k[i]))
        return (double)j * ma_exp_zig.w[i];
    return ma_exp_draw_slow(state, r);
}

/* Write all of buf to fd, retrying on EINTR and short writes. */
bool ma_write_all(int fd, const void *buf, size_t len);

/* One line on stderr starting "<myalloc>: ". */
void ma_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same, then abort(). */
void ma_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn, cold));

/* A write callback in malloc_stats_print's shape, and a small buffered
 * writer on top of it, used by the stats and profile writers. */
typedef void ma_write_cb_t(void *opaque, const char *s);

typedef struct ma_bufwriter {
    ma_write_cb_t *cb;   /* flushes go to cb(opaque, buf) when cb != NULL ... */
    void *opaque;
    int fd;              /* ... or to fd otherwise */
    bool failed;         /* a write to fd failed; later output is dropped */
    size_t len;
    char buf[4096];
} ma_bufwriter_t;

void ma_bw_init_fd(ma_bufwriter_t *bw, int fd);
void ma_bw_init_cb(ma_bufwriter_t *bw, ma_write_cb_t *cb, void *opaque);
void ma_bw_write(ma_bufwriter_t *bw, const char *s, size_t len);
void ma_bw_puts(ma_bufwriter_t *bw, const char *s);
void ma_bw_printf(ma_bufwriter_t *bw, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool ma_bw_flush(ma_bufwriter_t *bw);

#endif
