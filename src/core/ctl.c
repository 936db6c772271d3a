/*
 * ctl: the mallctl tree, see ctl.h.
 */
#include "ctl.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

#include "../arena/base.h"
#include "../prof/prof.h"
#include "conf.h"
#include "core.h"
#include "myalloc.h"
#include "stats.h"

/* ---------------------------------------------------------------------
 * Handlers. Each sets *out to the current value and applies r->in when
 * r->write. Indices of <i> components are in r->idx.
 */

static uint64_t ctl_epoch = 1;

static int h_version(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->s = MYALLOC_VERSION;
    return 0;
}

static int h_epoch(ctl_req_t *r, ctl_val_t *out)
{
    /* Statistics are read live; writing the epoch still advances it, as
     * programs use it to ask for fresh numbers. */
    if (r->write) {
        /* The caller's own cache hits become visible in the bin stats. */
        tsd_t *tsd = tsd_fetch();
        if (tsd_nominal(tsd))
            tcache_merge_stats(tsd);
        ma_fetch_add(&ctl_epoch, 1);
    }
    out->u64 = ma_load_relaxed(&ctl_epoch);
    return 0;
}

static int h_true(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->b = true;
    return 0;
}

static int h_false(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->b = false;
    return 0;
}

static int h_empty_string(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->s = "";
    return 0;
}

/* opt.<name>: read the option's current value from the options table. */
static int h_opt(ctl_req_t *r, ctl_val_t *out)
{
    const conf_option_t *o = r->extra;
    switch (o->type) {
    case CONF_BOOL:
        out->b = *(bool *)o->ptr;
        break;
    case CONF_UNSIGNED:
        out->u64 = *(unsigned *)o->ptr;
        break;
    case CONF_SIZE:
        out->u64 = *(size_t *)o->ptr;
        break;
    case CONF_SSIZE:
        out->i64 = *(ssize_t *)o->ptr;
        break;
    case CONF_UINT64:
        out->u64 = *(uint64_t *)o->ptr;
        break;
    case CONF_STRING:
        out->s = o->ptr;
        break;
    case CONF_CHOICE:
        out->s = o->choices[*(unsigned *)o->ptr];
        break;
    }
    /* Narrow integers to the exposed type. */
    if (o->type == CONF_UNSIGNED || o->type == CONF_SIZE || o->type == CONF_UINT64) {
        uint64_t v = out->u64;
        switch ((ctl_type_t)o->ctl_type) {
        case CTL_UNSIGNED:
            out->u = (unsigned)v;
            break;
        case CTL_SIZE:
            out->z = (size_t)v;
            break;
        default:
            out->u64 = v;
            break;
        }
    } else if (o->type == CONF_SSIZE && o->ctl_type == CTL_SSIZE) {
        out->zs = (ssize_t)out->i64;
    }
    return 0;
}

/* thread.* */

static int h_thread_arena(ctl_req_t *r, ctl_val_t *out)
{
    tsd_t *tsd = tsd_fetch();
    arena_t *old = tsd_arena(tsd);
    out->u = old != NULL ? old->ind : 0;
    if (r->write) {
        if (r->in.u >= arena_narenas)
            return EFAULT;
        arena_t *a = arena_get(r->in.u);
        if (a == NULL)
            return EAGAIN;
        if (a != old) {
            /* Cached objects go back to where they came from first. */
            tcache_flush(tsd);
            arena_thread_leave(old);
            arena_thread_join(a);
            tsd_set_arena(tsd, a);
        }
    }
    return 0;
}

static int h_thread_allocated(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->u64 = tsd_fetch()->thread_allocated;
    return 0;
}

static int h_thread_allocatedp(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->p = &tsd_fetch()->thread_allocated;
    return 0;
}

static int h_thread_deallocated(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->u64 = tsd_fetch()->thread_deallocated;
    return 0;
}

static int h_thread_deallocatedp(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->p = &tsd_fetch()->thread_deallocated;
    return 0;
}

static int h_thread_tcache_enabled(ctl_req_t *r, ctl_val_t *out)
{
    tsd_t *tsd = tsd_fetch();
    out->b = tsd->tcache_enabled;
    if (r->write && tsd_nominal(tsd))
        tcache_set_enabled(tsd, r->in.b);
    return 0;
}

static int h_thread_tcache_flush(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    (void)out;
    tsd_t *tsd = tsd_fetch();
    if (tsd_nominal(tsd))
        tcache_flush(tsd);
    return 0;
}

/* thread.idle: the thread will not allocate for a while: give back what it
 * holds (its cache), collect what others freed into its arena and let the
 * arena purge on time. */
static int h_thread_idle(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    (void)out;
    tsd_t *tsd = tsd_fetch();
    if (tsd_nominal(tsd)) {
        tcache_flush(tsd);
        if (tsd->arena != NULL)
            arena_decay(tsd->arena, decay_now_ns(), SIZE_MAX);
    }
    return 0;
}

static int h_thread_prof_active(ctl_req_t *r, ctl_val_t *out)
{
    tsd_t *tsd = tsd_fetch();
    out->b = tsd->prof_thread_active;
    if (r->write)
        tsd->prof_thread_active = r->in.b;
    return 0;
}

static int h_thread_prof_name(ctl_req_t *r, ctl_val_t *out)
{
    tsd_t *tsd = tsd_fetch();
    out->s = tsd->prof_thread_name;
    if (r->write) {
        const char *name = r->in.s;
        if (name == NULL)
            return EINVAL;
        size_t n = strlen(name);
        if (n >= sizeof(tsd->prof_thread_name))
            return EINVAL;
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)name[i] < 0x20 || (unsigned char)name[i] == 0x7f)
                return EFAULT; /* jemalloc: printable characters only */
        memcpy(tsd->prof_thread_name, name, n + 1);
    }
    return 0;
}

/* arenas.* and arena.<i>.* */

static int h_arenas_narenas(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->u = arena_narenas;
    return 0;
}

static int h_arenas_quantum(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->z = QUANTUM;
    return 0;
}

static int h_arenas_page(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->z = PAGE;
    return 0;
}

static int h_arenas_tcache_max(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->z = tcache_maxclass;
    return 0;
}

static int h_arenas_nbins(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->u = SC_NBINS;
    return 0;
}

static int h_arenas_nhbins(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->u = tcache_nbins;
    return 0;
}

static int h_arenas_nlextents(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->u = SC_NSIZES - SC_NBINS;
    return 0;
}

static int h_arenas_bin_size(ctl_req_t *r, ctl_val_t *out)
{
    if (r->idx[0] >= SC_NBINS)
        return ENOENT;
    out->z = sc_bin_info[r->idx[0]].reg_size;
    return 0;
}

static int h_arenas_bin_nregs(ctl_req_t *r, ctl_val_t *out)
{
    if (r->idx[0] >= SC_NBINS)
        return ENOENT;
    out->u32 = sc_bin_info[r->idx[0]].nregs;
    return 0;
}

static int h_arenas_bin_slab_size(ctl_req_t *r, ctl_val_t *out)
{
    if (r->idx[0] >= SC_NBINS)
        return ENOENT;
    out->z = (size_t)sc_bin_info[r->idx[0]].slab_pages << LG_PAGE;
    return 0;
}

static int h_arenas_lextent_size(ctl_req_t *r, ctl_val_t *out)
{
    if (r->idx[0] >= SC_NSIZES - SC_NBINS)
        return ENOENT;
    out->z = sc_index2size(SC_NBINS + (unsigned)r->idx[0]);
    return 0;
}

/* arena.<i>: MALLCTL_ARENAS_ALL (and, as in jemalloc 4, <i> == narenas)
 * means every arena. */
/* Whether arena index i means every arena (jemalloc accepts narenas too). */
static bool arenas_all(size_t i)
{
    return i == MALLCTL_ARENAS_ALL || i == arena_narenas;
}

static int for_arenas(size_t i, size_t (*fn)(arena_t *))
{
    if (arenas_all(i)) {
        arena_t *a;
        for (unsigned k = 0; (a = arena_next(&k)) != NULL;)
            fn(a);
        return 0;
    }
    arena_t *a = arena_if_exists(i); /* none for MALLCTL_ARENAS_DESTROYED */
    if (a != NULL)
        fn(a);
    return 0;
}

static int h_arena_purge(ctl_req_t *r, ctl_val_t *out)
{
    (void)out;
    /* The calling thread's cached objects keep their slabs in use (with
     * 64 KiB pages, a few MiB of them hold hundreds of MiB): they go back
     * first, as for malloc_trim. */
    tsd_t *tsd = tsd_fetch();
    if (tsd_nominal(tsd))
        tcache_flush(tsd);
    if (arenas_all(r->idx[0])) {
        arena_purge_all();
        return 0;
    }
    return for_arenas(r->idx[0], arena_purge);
}

static size_t arena_decay_now(arena_t *a)
{
    return arena_decay(a, decay_now_ns(), SIZE_MAX);
}

static int h_arena_decay(ctl_req_t *r, ctl_val_t *out)
{
    (void)out;
    return for_arenas(r->idx[0], arena_decay_now);
}

/* The arena named by an arena.<i>.* setting: an existing one, not
 * MALLCTL_ARENAS_ALL (EFAULT otherwise, as in jemalloc). */
static arena_t *ctl_arena_existing(const ctl_req_t *r)
{
    return arena_if_exists(r->idx[0]);
}

/* Whether a written time lies in [lo, hi] (ms). */
static bool ctl_ms_in(const ctl_req_t *r, ssize_t lo, ssize_t hi)
{
    return r->in.zs >= lo && r->in.zs <= hi;
}

/* arena.<i>.dirty_decay_ms / muzzy_decay_ms: writing resets the arena's
 * decay clock. */
static int arena_decay_ms(ctl_req_t *r, ctl_val_t *out, bool dirty)
{
    arena_t *a = ctl_arena_existing(r);
    if (a == NULL)
        return EFAULT;
    out->zs = dirty ? a->pool.decay_dirty.ms : a->pool.decay_muzzy.ms;
    if (r->write) {
        if (!ctl_ms_in(r, -1, SSIZE_MAX))
            return EFAULT;
        extent_set_decay(&a->pool, dirty ? r->in.zs : a->pool.decay_dirty.ms,
                         dirty ? a->pool.decay_muzzy.ms : r->in.zs);
    }
    return 0;
}

static int h_arena_dirty_decay_ms(ctl_req_t *r, ctl_val_t *out) { return arena_decay_ms(r, out, true); }
static int h_arena_muzzy_decay_ms(ctl_req_t *r, ctl_val_t *out) { return arena_decay_ms(r, out, false); }

/* arena.<i>.dirty_hold_ms: the arena's hold window (decay.h); writing
 * starts it afresh. */
static int h_arena_dirty_hold_ms(ctl_req_t *r, ctl_val_t *out)
{
    arena_t *a = ctl_arena_existing(r);
    if (a == NULL)
        return EFAULT;
    out->zs = (ssize_t)(ma_load_relaxed(&a->pool.hold.bucket_ns) * DECAY_HOLD_NBUCKETS / 1000000u);
    if (r->write) {
        if (!ctl_ms_in(r, 0, INT32_MAX))
            return EFAULT;
        extent_set_hold(&a->pool, r->in.zs);
    }
    return 0;
}

/* arenas.dirty_decay_ms / muzzy_decay_ms / dirty_hold_ms: the times new
 * arenas start with, in [lo, hi]. */
static int arenas_ms(ctl_req_t *r, ctl_val_t *out, ssize_t *opt, ssize_t lo, ssize_t hi)
{
    out->zs = *opt;
    if (r->write) {
        if (!ctl_ms_in(r, lo, hi))
            return EFAULT;
        *opt = r->in.zs;
    }
    return 0;
}

static int h_arenas_dirty_decay_ms(ctl_req_t *r, ctl_val_t *out)
{
    return arenas_ms(r, out, &extent_opt_dirty_decay_ms, -1, SSIZE_MAX);
}

static int h_arenas_muzzy_decay_ms(ctl_req_t *r, ctl_val_t *out)
{
    return arenas_ms(r, out, &extent_opt_muzzy_decay_ms, -1, SSIZE_MAX);
}

static int h_arenas_dirty_hold_ms(ctl_req_t *r, ctl_val_t *out)
{
    return arenas_ms(r, out, &extent_opt_dirty_hold_ms, 0, INT32_MAX);
}

static int h_background_thread(ctl_req_t *r, ctl_val_t *out)
{
    out->b = ma_background_running();
    if (r->write && ma_background_set(r->in.b) != 0)
        return EAGAIN;
    return 0;
}

static int h_arena_initialized(ctl_req_t *r, ctl_val_t *out)
{
    size_t i = r->idx[0];
    out->b = i == MALLCTL_ARENAS_ALL || arena_if_exists(i) != NULL;
    return 0;
}

/* prof.* */

static int h_prof_active(ctl_req_t *r, ctl_val_t *out)
{
    out->b = ma_load_acquire(&prof_active);
    if (r->write) {
        prof_active_set(r->in.b);
        ma_prof_update();
    }
    return 0;
}

static int h_prof_thread_active_init(ctl_req_t *r, ctl_val_t *out)
{
    out->b = tsd_prof_active_init;
    if (r->write)
        tsd_prof_active_init = r->in.b;
    return 0;
}

static int h_prof_dump(ctl_req_t *r, ctl_val_t *out)
{
    (void)out;
    return prof_dump(r->write ? r->in.s : NULL, 'm') == 0 ? 0 : EFAULT;
}

static int h_prof_dump_peak(ctl_req_t *r, ctl_val_t *out)
{
    (void)out;
    return prof_dump_peak(r->write ? r->in.s : NULL) == 0 ? 0 : EFAULT;
}

static int h_prof_format(ctl_req_t *r, ctl_val_t *out)
{
    out->s = prof_format_names[ma_load_acquire(&prof_format)];
    if (r->write) {
        const char *name = r->in.s;
        for (unsigned i = 0; name != NULL && prof_format_names[i] != NULL; i++) {
            if (strcmp(name, prof_format_names[i]) == 0) {
                ma_store_release(&prof_format, i);
                return 0;
            }
        }
        return EINVAL;
    }
    return 0;
}

static int h_prof_prefix(ctl_req_t *r, ctl_val_t *out)
{
    (void)out;
    const char *p = r->in.s;
    if (p == NULL || strlen(p) >= PROF_PREFIX_MAX)
        return EINVAL;
    memcpy(opt_prof_prefix, p, strlen(p) + 1);
    return 0;
}

static int h_prof_gdump(ctl_req_t *r, ctl_val_t *out)
{
    out->b = ma_load_relaxed(&prof_gdump_on);
    if (r->write)
        ma_store_release(&prof_gdump_on, r->in.b);
    return 0;
}

static int h_prof_reset(ctl_req_t *r, ctl_val_t *out)
{
    (void)out;
    size_t lg = r->write ? r->in.z : prof_lg_sample;
    if (lg > 62)
        return EINVAL;
    prof_reset((unsigned)lg);
    ma_prof_update();
    return 0;
}

static int h_prof_lg_sample(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->z = ma_load_acquire(&prof_lg_sample);
    return 0;
}

static int h_prof_interval(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->u64 = opt_lg_prof_interval < 0 ? 0 : (uint64_t)1 << opt_lg_prof_interval;
    return 0;
}

static int h_prof_nskipped(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->u64 = ma_load_relaxed(&prof_nskipped) + ma_load_relaxed(&te_samples_skipped);
    return 0;
}

static int h_prof_nsamples(ctl_req_t *r, ctl_val_t *out)
{
    (void)r;
    out->u64 = prof_nsamples_get();
    return 0;
}

static const ctl_entry_t ctl_table[] = {
    {"version", CTL_STRING, CTL_R, h_version, NULL},
    {"epoch", CTL_UINT64, CTL_RW, h_epoch, NULL},
    {"background_thread", CTL_BOOL, CTL_RW, h_background_thread, NULL},

    {"config.debug", CTL_BOOL, CTL_R, h_false, NULL},
    {"config.fill", CTL_BOOL, CTL_R, h_false, NULL},
    {"config.lazy_lock", CTL_BOOL, CTL_R, h_false, NULL},
    {"config.malloc_conf", CTL_STRING, CTL_R, h_empty_string, NULL},
    {"config.opt_safety_checks", CTL_BOOL, CTL_R, h_true, NULL},
    {"config.prof", CTL_BOOL, CTL_R, h_true, NULL},
    {"config.prof_libgcc", CTL_BOOL, CTL_R, h_true, NULL},
    {"config.prof_libunwind", CTL_BOOL, CTL_R, h_false, NULL},
    {"config.stats", CTL_BOOL, CTL_R, h_true, NULL},
    {"config.utrace", CTL_BOOL, CTL_R, h_false, NULL},
    {"config.xmalloc", CTL_BOOL, CTL_R, h_false, NULL},

    {"thread.arena", CTL_UNSIGNED, CTL_RW, h_thread_arena, NULL},
    {"thread.allocated", CTL_UINT64, CTL_R, h_thread_allocated, NULL},
    {"thread.allocatedp", CTL_PTR, CTL_R, h_thread_allocatedp, NULL},
    {"thread.deallocated", CTL_UINT64, CTL_R, h_thread_deallocated, NULL},
    {"thread.deallocatedp", CTL_PTR, CTL_R, h_thread_deallocatedp, NULL},
    {"thread.tcache.enabled", CTL_BOOL, CTL_RW, h_thread_tcache_enabled, NULL},
    {"thread.tcache.flush", CTL_VOID, 0, h_thread_tcache_flush, NULL},
    {"thread.idle", CTL_VOID, 0, h_thread_idle, NULL},
    {"thread.prof.active", CTL_BOOL, CTL_RW, h_thread_prof_active, NULL},
    {"thread.prof.name", CTL_STRING, CTL_RW, h_thread_prof_name, NULL},

    {"arenas.narenas", CTL_UNSIGNED, CTL_R, h_arenas_narenas, NULL},
    {"arenas.quantum", CTL_SIZE, CTL_R, h_arenas_quantum, NULL},
    {"arenas.page", CTL_SIZE, CTL_R, h_arenas_page, NULL},
    {"arenas.tcache_max", CTL_SIZE, CTL_R, h_arenas_tcache_max, NULL},
    {"arenas.nbins", CTL_UNSIGNED, CTL_R, h_arenas_nbins, NULL},
    {"arenas.nhbins", CTL_UNSIGNED, CTL_R, h_arenas_nhbins, NULL},
    {"arenas.nlextents", CTL_UNSIGNED, CTL_R, h_arenas_nlextents, NULL},
    {"arenas.dirty_decay_ms", CTL_SSIZE, CTL_RW, h_arenas_dirty_decay_ms, NULL},
    {"arenas.muzzy_decay_ms", CTL_SSIZE, CTL_RW, h_arenas_muzzy_decay_ms, NULL},
    {"arenas.dirty_hold_ms", CTL_SSIZE, CTL_RW, h_arenas_dirty_hold_ms, NULL},
    {"arenas.bin.<i>.size", CTL_SIZE, CTL_R, h_arenas_bin_size, NULL},
    {"arenas.bin.<i>.nregs", CTL_UINT32, CTL_R, h_arenas_bin_nregs, NULL},
    {"arenas.bin.<i>.slab_size", CTL_SIZE, CTL_R, h_arenas_bin_slab_size, NULL},
    {"arenas.lextent.<i>.size", CTL_SIZE, CTL_R, h_arenas_lextent_size, NULL},

    {"arena.<i>.initialized", CTL_BOOL, CTL_R, h_arena_initialized, NULL},
    {"arena.<i>.purge", CTL_VOID, 0, h_arena_purge, NULL},
    {"arena.<i>.decay", CTL_VOID, 0, h_arena_decay, NULL},
    {"arena.<i>.dirty_decay_ms", CTL_SSIZE, CTL_RW, h_arena_dirty_decay_ms, NULL},
    {"arena.<i>.muzzy_decay_ms", CTL_SSIZE, CTL_RW, h_arena_muzzy_decay_ms, NULL},
    {"arena.<i>.dirty_hold_ms", CTL_SSIZE, CTL_RW, h_arena_dirty_hold_ms, NULL},

    {"prof.active", CTL_BOOL, CTL_RW, h_prof_active, NULL},
    {"prof.thread_active_init", CTL_BOOL, CTL_RW, h_prof_thread_active_init, NULL},
    {"prof.dump", CTL_STRING, CTL_W, h_prof_dump, NULL},
    {"prof.dump_peak", CTL_STRING, CTL_W, h_prof_dump_peak, NULL},
    {"prof.format", CTL_STRING, CTL_RW, h_prof_format, NULL},
    {"prof.prefix", CTL_STRING, CTL_W, h_prof_prefix, NULL},
    {"prof.gdump", CTL_BOOL, CTL_RW, h_prof_gdump, NULL},
    {"prof.reset", CTL_SIZE, CTL_W, h_prof_reset, NULL},
    {"prof.lg_sample", CTL_SIZE, CTL_R, h_prof_lg_sample, NULL},
    {"prof.interval", CTL_UINT64, CTL_R, h_prof_interval, NULL},
    {"prof.nskipped", CTL_UINT64, CTL_R, h_prof_nskipped, NULL},
    {"prof.nsamples", CTL_UINT64, CTL_R, h_prof_nsamples, NULL},
};

/* ---------------------------------------------------------------------
 * The combined view: the table above, opt.<name> from the options table,
 * and the stats table.
 */

static unsigned ctl_count(void)
{
    return MA_ARRAY_LEN(ctl_table) + conf_noptions + stats_ctl_count;
}

static void ctl_entry_at(unsigned k, ctl_entry_t *e, char *namebuf, size_t namelen)
{
    if (k < MA_ARRAY_LEN(ctl_table)) {
        *e = ctl_table[k];
        return;
    }
    k -= MA_ARRAY_LEN(ctl_table);
    if (k < conf_noptions) {
        const conf_option_t *o = &conf_options[k];
        ma_snprintf(namebuf, namelen, "opt.%s", o->name);
        *e = (ctl_entry_t){namebuf, (ctl_type_t)o->ctl_type, CTL_R, h_opt, o};
        return;
    }
    *e = stats_ctl_table[k - conf_noptions];
}

size_t ctl_type_size(ctl_type_t t)
{
    switch (t) {
    case CTL_VOID:
        return 0;
    case CTL_BOOL:
        return sizeof(bool);
    case CTL_UNSIGNED:
        return sizeof(unsigned);
    case CTL_UINT32:
        return sizeof(uint32_t);
    case CTL_SIZE:
        return sizeof(size_t);
    case CTL_SSIZE:
        return sizeof(ssize_t);
    case CTL_UINT64:
        return sizeof(uint64_t);
    case CTL_INT64:
        return sizeof(int64_t);
    case CTL_STRING:
        return sizeof(const char *);
    case CTL_PTR:
        return sizeof(uint64_t *);
    }
    return 0;
}

/* Words: every literal component of every name, numbered for MIBs. */
#define CTL_WORDS_MAX 1024
MA_LARGE_BSS static const char *words[CTL_WORDS_MAX];
static uint8_t word_len[CTL_WORDS_MAX];
static unsigned nwords;
static ma_mutex_t words_lock = MA_MUTEX_INITIALIZER;
static bool words_ready;

static int word_find(const char *w, size_t len)
{
    for (unsigned i = 0; i < nwords; i++)
        if (word_len[i] == len && memcmp(words[i], w, len) == 0)
            return (int)i;
    return -1;
}

static void words_add_name(const char *name)
{
    const char *p = name;
    while (*p) {
        const char *q = p;
        while (*q && *q != '.')
            q++;
        size_t len = (size_t)(q - p);
        if (!(len == 3 && memcmp(p, "<i>", 3) == 0) && word_find(p, len) < 0 && nwords < CTL_WORDS_MAX) {
            words[nwords] = p;
            word_len[nwords] = (uint8_t)len;
            nwords++;
        }
        p = *q ? q + 1 : q;
    }
}

static void words_init(void)
{
    if (ma_load_acquire(&words_ready))
        return;
    ma_mutex_lock(&words_lock);
    if (!words_ready) {
        for (unsigned k = 0; k < MA_ARRAY_LEN(ctl_table); k++)
            words_add_name(ctl_table[k].name);
        words_add_name("opt");
        for (unsigned k = 0; k < conf_noptions; k++)
            words_add_name(conf_options[k].name);
        for (unsigned k = 0; k < stats_ctl_count; k++)
            words_add_name(stats_ctl_table[k].name);
        ma_store_release(&words_ready, true);
    }
    ma_mutex_unlock(&words_lock);
}

/* A name as a MIB: numbers for numeric components, word ids otherwise.
 * Returns the depth, or -1 for a malformed name or an unknown word. */
static int name_to_mib(const char *name, size_t *mib, size_t maxlen)
{
    size_t depth = 0;
    const char *p = name;
    if (*p == '\0')
        return -1;
    for (;;) {
        const char *q = p;
        while (*q && *q != '.')
            q++;
        size_t len = (size_t)(q - p);
        if (len == 0 || depth >= maxlen || depth >= CTL_MAX_DEPTH)
            return -1;
        bool numeric = true;
        for (size_t i = 0; i < len; i++)
            numeric &= p[i] >= '0' && p[i] <= '9';
        if (numeric) {
            if (len > 18)
                return -1;
            size_t v = 0;
            for (size_t i = 0; i < len; i++)
                v = v * 10 + (size_t)(p[i] - '0');
            mib[depth] = v;
        } else {
            int id = word_find(p, len);
            if (id < 0)
                return -1;
            mib[depth] = (size_t)id;
        }
        depth++;
        if (*q == '\0')
            break;
        p = q + 1;
    }
    return (int)depth;
}

/* Match a MIB against a pattern name: 1 full match, 2 the MIB is a proper
 * prefix of the pattern (an interior node), 0 no match. */
static int mib_match(const char *pattern, const size_t *mib, size_t miblen, ctl_req_t *req)
{
    const char *p = pattern;
    size_t depth = 0;
    req->nidx = 0;
    while (*p) {
        const char *q = p;
        while (*q && *q != '.')
            q++;
        size_t len = (size_t)(q - p);
        if (depth == miblen)
            return 2;
        if (len == 3 && memcmp(p, "<i>", 3) == 0) {
            if (req->nidx < CTL_MAX_DEPTH)
                req->idx[req->nidx++] = mib[depth];
        } else {
            if (mib[depth] >= nwords || word_len[mib[depth]] != len ||
                memcmp(words[mib[depth]], p, len) != 0)
                return 0;
        }
        depth++;
        p = *q ? q + 1 : q;
    }
    return depth == miblen ? 1 : 0;
}

/* arena.<i>.*: as in jemalloc, an index beyond narenas names no node
 * (ENOENT, before any access check), except MALLCTL_ARENAS_ALL and
 * MALLCTL_ARENAS_DESTROYED (and <i> == narenas, jemalloc 4's "all"). */
static bool arena_index_ok(const ctl_entry_t *e, const ctl_req_t *req)
{
    if (strncmp(e->name, "arena.<i>.", 10) != 0)
        return true;
    size_t i = req->idx[0];
    return i <= arena_narenas || i == MALLCTL_ARENAS_ALL || i == MALLCTL_ARENAS_DESTROYED;
}

/* 0 with *entry set for a full match; ENOENT otherwise. interior tells
 * whether the MIB names an interior node. */
static int mib_lookup(const size_t *mib, size_t miblen, ctl_entry_t *entry, ctl_req_t *req,
                      bool *interior, char *namebuf, size_t namelen)
{
    *interior = false;
    unsigned n = ctl_count();
    for (unsigned k = 0; k < n; k++) {
        ctl_entry_t e;
        ctl_entry_at(k, &e, namebuf, namelen);
        int m = mib_match(e.name, mib, miblen, req);
        if (m == 1 && !arena_index_ok(&e, req))
            return ENOENT;
        if (m == 1) {
            *entry = e;
            req->extra = e.extra;
            return 0;
        }
        if (m == 2)
            *interior = true;
    }
    return ENOENT;
}

int ctl_lookup(const char *name, ctl_entry_t *entry, ctl_req_t *req)
{
    words_init();
    size_t mib[CTL_MAX_DEPTH];
    int depth = name_to_mib(name, mib, CTL_MAX_DEPTH);
    if (depth < 0)
        return ENOENT;
    static __thread char namebuf[128];
    bool interior;
    return mib_lookup(mib, (size_t)depth, entry, req, &interior, namebuf, sizeof(namebuf));
}

void ctl_walk(const char *prefix, ctl_walk_fn *fn, void *arg)
{
    size_t plen = strlen(prefix);
    unsigned n = ctl_count();
    char namebuf[128];
    for (unsigned k = 0; k < n; k++) {
        ctl_entry_t e;
        ctl_entry_at(k, &e, namebuf, sizeof(namebuf));
        if (strncmp(e.name, prefix, plen) == 0)
            fn(&e, arg);
    }
}

int ctl_read_entry(const ctl_entry_t *e, const size_t *idx, unsigned nidx, ctl_val_t *out)
{
    ctl_req_t req;
    memset(&req, 0, sizeof(req));
    /* No memcpy from idx when there is none: a null source is undefined
     * even for 0 bytes (stats_print reads its scalars with idx NULL). */
    req.nidx = MA_MIN(nidx, CTL_MAX_DEPTH);
    if (req.nidx != 0)
        memcpy(req.idx, idx, req.nidx * sizeof(size_t));
    req.read = true;
    req.extra = e->extra;
    memset(out, 0, sizeof(*out));
    return e->fn(&req, out);
}

/* ---------------------------------------------------------------------
 * The API.
 */

static int ctl_call(const ctl_entry_t *e, ctl_req_t *req, void *oldp, size_t *oldlenp, void *newp,
                    size_t newlen)
{
    size_t sz = ctl_type_size(e->type);
    bool want_read = oldp != NULL && oldlenp != NULL;
    if (e->type == CTL_VOID) {
        if (oldp != NULL || oldlenp != NULL || newp != NULL || newlen != 0)
            return EPERM;
    } else {
        if (newp != NULL && !(e->access & CTL_W))
            return EPERM;
        if ((oldp != NULL || oldlenp != NULL) && !(e->access & CTL_R))
            return EPERM;
        /* A write-only entry may be triggered with no value (prof.dump). */
        if (newp != NULL && newlen != sz)
            return EINVAL;
    }
    req->write = newp != NULL;
    req->read = want_read;
    if (req->write)
        memcpy(&req->in, newp, sz);
    ctl_val_t out;
    memset(&out, 0, sizeof(out));
    int err = e->fn(req, &out);
    if (err != 0)
        return err;
    if (want_read) {
        if (*oldlenp != sz) {
            size_t n = MA_MIN(sz, *oldlenp);
            memcpy(oldp, &out, n);
            *oldlenp = n;
            return EINVAL;
        }
        memcpy(oldp, &out, sz);
    }
    return 0;
}

MA_EXPORT int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen)
{
    if (!ma_init())
        return EAGAIN;
    if (name == NULL)
        return ENOENT;
    ctl_entry_t e;
    ctl_req_t req;
    memset(&req, 0, sizeof(req));
    int err = ctl_lookup(name, &e, &req);
    if (err != 0)
        return err;
    return ctl_call(&e, &req, oldp, oldlenp, newp, newlen);
}

MA_EXPORT int mallctlnametomib(const char *name, size_t *mibp, size_t *miblenp)
{
    if (!ma_init())
        return EAGAIN;
    if (name == NULL || mibp == NULL || miblenp == NULL)
        return EINVAL;
    words_init();
    size_t mib[CTL_MAX_DEPTH];
    int depth = name_to_mib(name, mib, CTL_MAX_DEPTH);
    if (depth < 0)
        return ENOENT;
    ctl_entry_t e;
    ctl_req_t req;
    bool interior;
    char namebuf[128];
    if (mib_lookup(mib, (size_t)depth, &e, &req, &interior, namebuf, sizeof(namebuf)) != 0 && !interior)
        return ENOENT;
    if ((size_t)depth > *miblenp)
        return EINVAL;
    memcpy(mibp, mib, (size_t)depth * sizeof(size_t));
    *miblenp = (size_t)depth;
    return 0;
}

MA_EXPORT int mallctlbymib(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                           size_t newlen)
{
    if (!ma_init())
        return EAGAIN;
    if (mib == NULL || miblen == 0 || miblen > CTL_MAX_DEPTH)
        return ENOENT;
    words_init();
    ctl_entry_t e;
    ctl_req_t req;
    memset(&req, 0, sizeof(req));
    bool interior;
    char namebuf[128];
    if (mib_lookup(mib, miblen, &e, &req, &interior, namebuf, sizeof(namebuf)) != 0)
        return ENOENT;
    return ctl_call(&e, &req, oldp, oldlenp, newp, newlen);
}
