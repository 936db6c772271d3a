/*
 * core: the public entry points, initialisation and fork handling.
 */
#ifndef MYALLOC_CORE_H
#define MYALLOC_CORE_H

#include "../tcache/tcache.h"

/* Internal flag bits, laid out as jemalloc's MALLOCX_* (see myalloc.h). */
#define MA_FLAG_LG_ALIGN_MASK 0x3f
#define MA_FLAG_ZERO          0x40
#define MA_FLAG_TCACHE_MASK   0x000fff00
#define MA_FLAG_TCACHE_NONE   (1 << 8)   /* MALLOCX_TCACHE(-1) */
#define MA_FLAG_ARENA_MASK    0xfff00000
#define MA_FLAG_ARENA_SHIFT   20

extern bool ma_initialized;
extern unsigned ma_ncpus;

/* Initialise the allocator; false when it cannot run (out of memory). */
bool ma_init_hard(void);
MA_INLINE bool ma_init(void)
{
    return likely(ma_load_acquire(&ma_initialized)) || ma_init_hard();
}

/* The general allocation path: size with alignment align (0 or a power of
 * two) and MA_FLAG_* flags, for the program's call site caller. NULL with
 * errno = ENOMEM on failure. */
void *ma_alloc_slow(size_t size, size_t align, int flags, void *caller);
void ma_free_slow(void *p);
/* Resize; NULL (old object intact) with errno = ENOMEM on failure.
 * round_growth (realloc, not rallocx): growth into the slab classes past
 * jemalloc's gets a page run of the first large class instead. */
void *ma_ralloc(void *p, size_t size, size_t align, int flags, bool round_growth, void *caller);
/* Free with the thread cache or not (MA_FLAG_TCACHE_NONE), for dallocx. */
void ma_dalloc_flags(void *p, int flags);
/* Sized free's slow path (checks the size when opt_check_sized). */
void ma_sdalloc_slow(void *p, size_t size, size_t align, int flags, const char *func);
extern bool opt_check_sized;

/* free and malloc_usable_size under names of our own, for calls from the
 * other files (jemalloc.c): through the exported names such a call goes
 * through the symbol table, to whichever free the process bound first,
 * glibc's when the library is dlopen'ed rather than preloaded. */
void ma_free(void *p);
size_t ma_usable_size(void *p);

/* The return address into the program: every public entry point passes it
 * down its slow path, so a sampled stack starts exactly at the program's
 * call site. */
#define MA_CALLER() __builtin_return_address(0)

/* Hand the profiler's state (active, R, seed) to the per-thread samplers;
 * call after changing it. */
void ma_prof_update(void);
/* Register the stats_print exit report (after init, outside its lock; only
 * with stats_print:true, so that other programs never touch its code). */
void stats_print_boot(void);

/* Purging (background.c): the ticker's hook, and the background thread. */
extern bool opt_background_thread;
void ma_decay_hook(uint64_t bytes);
int ma_background_set(bool on);
bool ma_background_running(void);
void ma_background_postfork_child(void);

/* The page-map element of a pointer the caller claims is live, validated:
 * aborts with "<myalloc>: <func>(): ..." when it is not. */
rtree_elm_t ma_lookup_live(const void *p, const char *func);
/* The same for an element already looked up. */
rtree_elm_t ma_check_live(const void *p, rtree_elm_t elm, const char *func);

#endif
