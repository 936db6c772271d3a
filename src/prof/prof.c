/*
 * prof: options, state, and the sampled allocation path, see prof.h.
 */
#include "prof.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../arena/pages.h"
#include "prof_scratch.h"
#include "prof_table.h"
#include "prof_unwind.h"

bool opt_prof;
bool opt_prof_active = true;
bool opt_prof_thread_active_init = true;
unsigned opt_lg_prof_sample = 19;
ssize_t opt_lg_prof_interval = -1;
bool opt_prof_accum;
bool opt_prof_final;
bool opt_prof_leak;
bool opt_prof_gdump;
char opt_prof_prefix[PROF_PREFIX_MAX] = "jeprof";
uint64_t opt_prof_seed;
unsigned opt_prof_bt = PROF_BT_GCC;
unsigned opt_prof_bt_max = 128;
unsigned opt_prof_format = PROF_FORMAT_TEXT;

const char *const prof_format_names[] = {"text", "pprof", "folded", "svg", NULL};

bool prof_active;
unsigned prof_lg_sample = 19;
bool prof_gdump_on;
uint64_t prof_nskipped;
unsigned prof_format = PROF_FORMAT_TEXT;

/* The sampled region: small sampled objects get page runs here. Its chunks
 * are madvised MADV_NOHUGEPAGE once each, when mapped, so every sample has
 * native pages of its own (residency is measurable per sample) without a
 * madvise per page (which would split VMAs). */
MA_LARGE_BSS static extent_pool_t sampled_pool;
/* The pool is set up at the first sample, not at startup: its three pages,
 * and that of its slot in the pool table, stay untouched in a program that
 * never profiles. Set once, under sampled_pool_lock. */
static bool sampled_pool_ready;
static ma_mutex_t sampled_pool_lock = MA_MUTEX_INITIALIZER;
static size_t unrecorded_small_bytes; /* of samples the table could not record (rare) */
static bool bt_warm;
static ma_mutex_t active_lock = MA_MUTEX_INITIALIZER;

/*
 * Freed sampled page runs, kept for the next sample of the same page
 * count. Without it the extent allocator's split on allocation and
 * coalesce on free were a third of a sample's cost (make bench-prof).
 * Invariants of a cached extent: EXTENT_ACTIVE in sampled_pool (so no
 * neighbour coalesces with it); its boundaries still map to the class of
 * the object it held, RTREE_SAMPLED, but e->sampled is false, which is how
 * ma_check_live catches a second free of that object as a double free (not
 * rewriting the page map at each put, and at a take of the same class, saved
 * ~40 instructions a sample);
 * linked through lru_next (free of the live list while cached); its pages
 * dirty, counted in npages and reported as dirty, not active. At most
 * RUN_CACHE_MAX_PAGES pages; prof_decay empties the cache when no sample
 * took from it for RUN_CACHE_IDLE_NS, so an idle program's cache goes to
 * the pool, whose decay purges it.
 */
#define RUN_CACHE_IDLE_NS 1000000000ull
#define RUN_CACHE_CLASSES   (PAGE_CEIL(SC_SMALL_MAXCLASS) >> LG_PAGE)
/* 1 MiB: larson 16 B-32 KiB (samples of 1 to 8 pages, ~30 live) missed
 * on 13% of its samples with 512 KiB, 2.7% with 1 MiB, 1% with 2 MiB; a
 * miss costs the extent allocator's split and later coalesce (~850
 * instructions). */
#define RUN_CACHE_MAX_PAGES MA_MAX((size_t)4 * RUN_CACHE_CLASSES, ((size_t)1 << 20) >> LG_PAGE)
static struct {
    ma_mutex_t lock;
    extent_t *head[RUN_CACHE_CLASSES]; /* by page count - 1 */
    size_t npages;
    bool used;         /* a sample took a run since check_ns */
    uint64_t check_ns; /* when prof_decay last looked at used */
} run_cache = {.lock = MA_MUTEX_INITIALIZER};

static extent_t *run_cache_take(size_t npages)
{
    if (ma_load_relaxed(&run_cache.head[npages - 1]) == NULL)
        return NULL;
    ma_mutex_lock(&run_cache.lock);
    extent_t *e = run_cache.head[npages - 1];
    if (e != NULL) {
        run_cache.head[npages - 1] = e->lru_next;
        e->lru_next = NULL;
        run_cache.npages -= npages;
        run_cache.used = true;
    }
    ma_mutex_unlock(&run_cache.lock);
    return e;
}

static bool run_cache_put(extent_t *e)
{
    size_t npages = e->size >> LG_PAGE;
    if (npages > RUN_CACHE_CLASSES)
        return false;
    ma_mutex_lock(&run_cache.lock);
    bool put = run_cache.npages + npages <= RUN_CACHE_MAX_PAGES;
    if (put) {
        e->lru_next = run_cache.head[npages - 1];
        run_cache.head[npages - 1] = e;
        run_cache.npages += npages;
    }
    ma_mutex_unlock(&run_cache.lock);
    return put;
}

/* Return every cached run to the pool. */
static void run_cache_drain(void)
{
    extent_t *list = NULL;
    ma_mutex_lock(&run_cache.lock);
    for (size_t i = 0; i < RUN_CACHE_CLASSES; i++) {
        for (extent_t *e = run_cache.head[i], *next; e != NULL; e = next) {
            next = e->lru_next;
            e->lru_next = list;
            list = e;
        }
        run_cache.head[i] = NULL;
    }
    run_cache.npages = 0;
    ma_mutex_unlock(&run_cache.lock);
    for (extent_t *e = list, *next; e != NULL; e = next) {
        next = e->lru_next;
        e->lru_next = NULL;
        extent_dalloc(&sampled_pool, e);
    }
}

static extent_pool_t *sampled_pool_get(void)
{
    if (unlikely(!ma_load_acquire(&sampled_pool_ready))) {
        ma_mutex_lock(&sampled_pool_lock);
        if (!sampled_pool_ready) {
            extent_pool_init(&sampled_pool, ARENAS_MAX, true);
            ma_store_release(&sampled_pool_ready, true);
        }
        ma_mutex_unlock(&sampled_pool_lock);
    }
    return &sampled_pool;
}

void prof_bt_boot(void);
void prof_dump_boot(void);
void prof_dump_prefork(void);
void prof_dump_postfork_parent(void);
void prof_dump_postfork_child(void);

MA_HOT_TEXT bool prof_boot(void)
{
    prof_unwind_count_startup_objects();
    prof_lg_sample = opt_lg_prof_sample;
    prof_gdump_on = opt_prof && opt_prof_gdump;
    prof_active = opt_prof && opt_prof_active;
    prof_format = opt_prof_format;
    return true;
}

MA_HOT_TEXT void prof_boot_late(void)
{
    /* The exit report and profile also serve a program that starts
     * sampling itself, without prof:true (prof_dump.c's prof_atexit then
     * writes nothing if it never did). Tested here: prof_dump.c is cold
     * code, which a program that does not profile never touches. */
    if (opt_prof_final || opt_prof_leak)
        prof_dump_boot();
    if (!opt_prof)
        return;
    prof_active_set(prof_active);
}

bool prof_armed(void)
{
    return opt_prof || ma_load_acquire(&bt_warm);
}

void prof_active_set(bool active)
{
    ma_mutex_lock(&active_lock);
    if (active && !bt_warm) {
        /* Outside malloc: the unwinder's first use may allocate. */
        prof_bt_boot();
        ma_store_release(&bt_warm, true);
    }
    if (active)
        prof_weights_prepare(prof_lg_sample);
    ma_store_release(&prof_active, active);
    ma_mutex_unlock(&active_lock);
}

void prof_reset(unsigned lg_sample)
{
    ma_mutex_lock(&active_lock);
    prof_weights_prepare(lg_sample);
    ma_store_release(&prof_lg_sample, lg_sample);
    prof_table_reset_accum();
    prof_peak_restart();
    ma_mutex_unlock(&active_lock);
}

void *prof_alloc_sampled(arena_t *arena, size_t usize, size_t align, bool zero, const prof_bt_start_t *from)
{
    void *frames[PROF_BT_MAX_LIMIT];
    unsigned depth = prof_backtrace(frames, opt_prof_bt_max, from);
    unsigned szind = sc_size2index(usize);
    extent_t *e;
    void *p;
    bool mapped = false; /* the page map already says szind, RTREE_SAMPLED */
    if (usize <= SC_SMALL_MAXCLASS) {
        bool zeroed = false;
        e = align <= PAGE ? run_cache_take(PAGE_CEIL(usize) >> LG_PAGE) : NULL;
        if (e != NULL)
            mapped = e->szind == szind;
        else
            e = extent_alloc(sampled_pool_get(), PAGE_CEIL(usize), MA_MAX(align, PAGE), szind, false, &zeroed);
        if (e == NULL)
            return NULL;
        p = (void *)e->addr;
        if (zero && !zeroed)
            memset(p, 0, usize);
    } else {
        p = arena_malloc_large(arena, usize, MA_MAX(align, PAGE), zero);
        if (p == NULL)
            return NULL;
        e = rtree_elm_extent(rtree_lookup((uintptr_t)p));
    }
    const size_t small_bytes = usize <= SC_SMALL_MAXCLASS ? usize : 0;
    /* Sets e->prof and links e into the live list (residency), or leaves
     * e->prof NULL. */
    e->prof = NULL;
    if (prof_table_record(frames, depth, szind, ma_load_acquire(&prof_lg_sample), e, small_bytes) == NULL) {
        ma_fetch_add(&prof_nskipped, 1);
        ma_fetch_add(&unrecorded_small_bytes, small_bytes);
    }
    /* Marked sampled either way: free must come back here for small ones. */
    e->sampled = true;
    if (!mapped)
        extent_set_szind(e, szind, RTREE_SAMPLED);
    return p;
}

uint64_t prof_nsamples_get(void) { return prof_table_sums().nsamples; }

void prof_free_sampled(void *p, extent_t *e)
{
    (void)p;
    const bool small = e->pool == &sampled_pool;
    const size_t small_bytes = small ? sc_index2size(e->szind) : 0;
    if (e->prof != NULL)
        prof_table_unrecord(e, small_bytes);
    else if (small)
        ma_fetch_sub(&unrecorded_small_bytes, small_bytes);
    if (small) {
        e->sampled = false;
        if (!run_cache_put(e))
            extent_dalloc(&sampled_pool, e);
    } else {
        arena_dalloc_large(e);
    }
}

MA_HOT_TEXT void prof_decay(uint64_t now_ns, size_t max_pages)
{
    if (ma_load_relaxed(&run_cache.npages) > 0 && now_ns - ma_load_relaxed(&run_cache.check_ns) >= RUN_CACHE_IDLE_NS) {
        ma_mutex_lock(&run_cache.lock);
        bool used = run_cache.used;
        run_cache.used = false;
        run_cache.check_ns = now_ns;
        ma_mutex_unlock(&run_cache.lock);
        if (!used)
            run_cache_drain();
    }
    if (ma_load_acquire(&sampled_pool_ready))
        extent_decay(&sampled_pool, now_ns, max_pages);
}

void prof_region_stats(prof_region_t *out)
{
    ma_mutex_lock(&sampled_pool.lock);
    ma_mutex_lock(&run_cache.lock);
    size_t cached = run_cache.npages;
    ma_mutex_unlock(&run_cache.lock);
    out->active_pages = sampled_pool.stats.active_pages - cached;
    out->dirty_pages = sampled_pool.dirty.npages + sampled_pool.muzzy.npages + cached;
    out->retained_pages = sampled_pool.retained.npages;
    out->mapped = sampled_pool.stats.mapped;
    ma_mutex_unlock(&sampled_pool.lock);
    out->allocated = prof_table_sums().small_bytes + ma_load_relaxed(&unrecorded_small_bytes);
}

typedef struct totals_arg {
    prof_totals_t *t;
} totals_arg_t;

static void totals_visit(const prof_stack_t *s, void *arg)
{
    prof_totals_t *t = ((totals_arg_t *)arg)->t;
    for (const prof_rec_t *r = s->recs; r != NULL; r = r->next) {
        double w = prof_weight(r->szind, r->lg_sample);
        double usize = (double)sc_index2size(r->szind);
        t->live_objects += (double)r->live * w;
        t->live_bytes += (double)r->live * usize * w;
        t->accum_objects += (double)r->accum * w;
        t->accum_bytes += (double)r->accum * usize * w;
        t->live_samples += r->live;
        t->accum_samples += r->accum;
    }
}

void prof_totals_get(prof_totals_t *t)
{
    memset(t, 0, sizeof(*t));
    totals_arg_t a = {t};
    prof_table_foreach(totals_visit, &a);
    t->sampled_small_bytes = prof_table_sums().small_bytes + ma_load_relaxed(&unrecorded_small_bytes);
}

/* ---------------------------------------------------------------------
 * Residency: which pages of the live sampled objects are in RAM or in
 * swap, from /proc/self/pagemap (bit 63 present, bit 62 swapped; readable
 * without privileges). Each object has pages of its own, so its bytes on
 * resident pages are its resident bytes.
 */

typedef struct resid_obj {
    uint64_t addr, size;
    prof_rec_t *rec;
} resid_obj_t;

static int resid_cmp(const void *a, const void *b, void *ctx)
{
    (void)ctx;
    uint64_t x = ((const resid_obj_t *)a)->addr, y = ((const resid_obj_t *)b)->addr;
    return x < y ? -1 : x > y;
}

static void resid_zero_visit(const prof_stack_t *s, void *arg)
{
    (void)arg;
    for (prof_rec_t *r = s->recs; r != NULL; r = r->next)
        r->resident = r->swapped = 0;
}

#define PAGEMAP_WINDOW 512

typedef struct resid_copy {
    resid_obj_t *v;
    size_t n, cap;
    bool overflow;
} resid_copy_t;

static void resid_copy_visit(const extent_t *e, void *arg)
{
    resid_copy_t *c = arg;
    if (c->n < c->cap)
        c->v[c->n++] = (resid_obj_t){e->addr, sc_index2size(e->szind), e->prof};
    else
        c->overflow = true;
}

bool prof_residency_collect(void)
{
    prof_table_foreach(resid_zero_visit, NULL);
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    prof_scratch_t sc;
    prof_scratch_init(&sc);
    resid_obj_t *v = NULL;
    size_t n = 0;
    /* Copy the list under the lock (no system call while it is held). */
    for (int attempt = 0; attempt < 4; attempt++) {
        resid_copy_t c = {NULL, 0, prof_table_sums().nlive + 256 + ((size_t)attempt << 12), false};
        c.v = prof_scratch_alloc(&sc, c.cap * sizeof(resid_obj_t));
        if (c.v == NULL)
            break;
        prof_table_live_foreach(resid_copy_visit, &c);
        v = c.v;
        n = c.n;
        if (!c.overflow)
            break;
        n = 0; /* more than cap were live: again with room for more */
    }
    prof_sort(v, n, sizeof(resid_obj_t), resid_cmp, NULL);
    uint64_t os_page = pages_os_page_size();
    uint64_t win[PAGEMAP_WINDOW], win_first = 0, win_n = 0;
    bool ok = v != NULL;
    for (size_t i = 0; i < n && ok; i++) {
        uint64_t a = v[i].addr, end = a + v[i].size;
        while (a < end) {
            uint64_t pg = a / os_page;
            if (pg < win_first || pg >= win_first + win_n) {
                ssize_t got = pread(fd, win, sizeof(win), (off_t)(pg * 8));
                if (got < 8) {
                    ok = false;
                    break;
                }
                win_first = pg;
                win_n = (uint64_t)got / 8;
            }
            uint64_t ent = win[pg - win_first];
            uint64_t next = MA_MIN(end, (pg + 1) * os_page), bytes = next - a;
            if (ent & ((uint64_t)1 << 63))
                v[i].rec->resident += bytes;
            else if (ent & ((uint64_t)1 << 62))
                v[i].rec->swapped += bytes;
            a = next;
        }
    }
    close(fd);
    prof_scratch_free(&sc);
    return ok;
}

/* Lock order: active, dump, table stripes, weights, the sampled region,
 * the run cache. */
void prof_prefork(void)
{
    prof_unwind_prefork();
    ma_mutex_prefork(&active_lock);
    prof_dump_prefork();
    prof_table_prefork();
    ma_mutex_prefork(&sampled_pool_lock);
    extent_pool_prefork(&sampled_pool);
    ma_mutex_prefork(&run_cache.lock);
}

void prof_postfork_parent(void)
{
    ma_mutex_postfork_parent(&run_cache.lock);
    extent_pool_postfork_parent(&sampled_pool);
    ma_mutex_postfork_parent(&sampled_pool_lock);
    prof_table_postfork_parent();
    prof_dump_postfork_parent();
    ma_mutex_postfork_parent(&active_lock);
    prof_unwind_postfork_parent();
}

void prof_postfork_child(void)
{
    ma_mutex_postfork_child(&run_cache.lock);
    extent_pool_postfork_child(&sampled_pool);
    ma_mutex_postfork_child(&sampled_pool_lock);
    prof_table_postfork_child();
    prof_dump_postfork_child();
    prof_unwind_postfork_child();
    ma_mutex_postfork_child(&active_lock);
}
