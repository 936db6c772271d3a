/*
 * stats_print: malloc_stats_print and the stats_print option.
 *
 * Walks the mallctl tables: config.* from the control table, opt.* from the
 * options table, stats.* (totals, arenas, bins, large classes) from the
 * stats table, so anything added there shows up here. Text or JSON ("J");
 * jemalloc's letters leave parts out: g general, m merged arenas, a
 * per-arena, b bins, l large classes (d, x, e accepted; nothing to omit).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../prof/prof.h"
#include "conf.h"
#include "core.h"
#include "ctl.h"
#include "myalloc.h"
#include "stats.h"

typedef struct printer {
    ma_bufwriter_t bw;
    bool json;
    bool first;   /* JSON: no comma before the next member */
    int depth;
} printer_t;

static void indent(printer_t *p)
{
    for (int i = 0; i < p->depth; i++)
        ma_bw_write(&p->bw, "  ", 2);
}

/* Last component of a dotted name. */
static const char *leaf_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot != NULL ? dot + 1 : name;
}

static void json_key(printer_t *p, const char *key)
{
    if (!p->first)
        ma_bw_write(&p->bw, ",\n", 2);
    else
        ma_bw_write(&p->bw, "\n", 1);
    p->first = false;
    indent(p);
    ma_bw_printf(&p->bw, "\"%s\": ", key);
}

static void open_obj(printer_t *p, const char *key, const char *title)
{
    if (p->json) {
        if (key != NULL)
            json_key(p, key);
        ma_bw_write(&p->bw, "{", 1);
        p->first = true;
    } else if (title != NULL) {
        indent(p);
        ma_bw_printf(&p->bw, "%s\n", title);
    }
    p->depth++;
}

static void close_obj(printer_t *p)
{
    p->depth--;
    if (p->json) {
        ma_bw_write(&p->bw, "\n", 1);
        indent(p);
        ma_bw_write(&p->bw, "}", 1);
        p->first = false;
    }
}

static void put_value(printer_t *p, ctl_type_t t, const ctl_val_t *v)
{
    switch (t) {
    case CTL_BOOL:
        ma_bw_puts(&p->bw, v->b ? "true" : "false");
        break;
    case CTL_UNSIGNED:
        ma_bw_printf(&p->bw, "%u", v->u);
        break;
    case CTL_UINT32:
        ma_bw_printf(&p->bw, "%u", (unsigned)v->u32);
        break;
    case CTL_SIZE:
        ma_bw_printf(&p->bw, "%zu", v->z);
        break;
    case CTL_SSIZE:
        ma_bw_printf(&p->bw, "%zd", v->zs);
        break;
    case CTL_UINT64:
        ma_bw_printf(&p->bw, "%llu", (unsigned long long)v->u64);
        break;
    case CTL_INT64:
        ma_bw_printf(&p->bw, "%lld", (long long)v->i64);
        break;
    case CTL_STRING:
        ma_bw_printf(&p->bw, "\"%s\"", v->s != NULL ? v->s : "");
        break;
    default:
        ma_bw_puts(&p->bw, "null");
        break;
    }
}

/* name: value (or "leaf": value in JSON), one line. */
static void put_field(printer_t *p, const char *name, ctl_type_t t, const ctl_val_t *v)
{
    if (p->json) {
        json_key(p, leaf_name(name));
    } else {
        indent(p);
        ma_bw_printf(&p->bw, "%s: ", name);
    }
    put_value(p, t, v);
    if (!p->json)
        ma_bw_write(&p->bw, "\n", 1);
}

/* Every scalar entry under a prefix (entries with <i> are tables). */
typedef struct walk_arg {
    printer_t *p;
    const size_t *idx;
    unsigned nidx;
    unsigned want_idx;   /* only entries with exactly this many <i> */
    size_t strip;        /* text: print names without this many leading chars */
    char group[32];      /* JSON, stripped names: the open sub-object ("small") */
} walk_arg_t;

/* JSON: a stripped name "small.nmalloc" goes in a "small" sub-object (as
 * in jemalloc's output: no key twice). Opens and closes the sub-objects as
 * the walk moves from one group to the next; rest "" closes the last. */
static void json_group(walk_arg_t *w, const char *rest)
{
    const char *dot = strrchr(rest, '.');
    size_t glen = dot != NULL ? (size_t)(dot - rest) : 0;
    if (glen >= sizeof(w->group))
        glen = 0;
    if (strlen(w->group) == glen && strncmp(w->group, rest, glen) == 0)
        return;
    if (w->group[0] != '\0')
        close_obj(w->p);
    w->group[0] = '\0';
    if (glen != 0) {
        memcpy(w->group, rest, glen);
        w->group[glen] = '\0';
        open_obj(w->p, w->group, NULL);
    }
}

static unsigned count_idx(const char *name)
{
    unsigned n = 0;
    for (const char *s = name; (s = strstr(s, "<i>")) != NULL; s += 3)
        n++;
    return n;
}

static void walk_scalar(const ctl_entry_t *e, void *arg)
{
    walk_arg_t *w = arg;
    if (e->type == CTL_VOID || !(e->access & CTL_R) || count_idx(e->name) != w->want_idx)
        return;
    if (e->type == CTL_PTR)
        return;
    ctl_val_t v;
    if (ctl_read_entry(e, w->idx, w->nidx, &v) != 0)
        return;
    if (w->p->json && w->strip != 0)
        json_group(w, e->name + w->strip);
    put_field(w->p, e->name + w->strip, e->type, &v);
}

static void section(printer_t *p, const char *prefix, const char *key, const char *title)
{
    open_obj(p, key, title);
    walk_arg_t w = {p, NULL, 0, 0, 0, ""};
    ctl_walk(prefix, walk_scalar, &w);
    close_obj(p);
}

/* A table of per-class rows: columns are the entries under colprefix
 * (e.g. "stats.arenas.<i>.bins.<i>."). */
typedef struct table {
    ctl_entry_t cols[16];
    unsigned ncols;
} table_t;

static void collect_col(const ctl_entry_t *e, void *arg)
{
    table_t *t = arg;
    if (t->ncols < MA_ARRAY_LEN(t->cols))
        t->cols[t->ncols++] = *e;
}

static void class_table(printer_t *p, size_t arena, const char *colprefix, const char *key, unsigned first,
                        unsigned n)
{
    table_t t;
    t.ncols = 0;
    ctl_walk(colprefix, collect_col, &t);
    const ctl_entry_t *cols = t.cols;
    if (p->json) {
        json_key(p, key);
        ma_bw_write(&p->bw, "[", 1);
    } else {
        indent(p);
        ma_bw_printf(&p->bw, "%-8s %10s", key, "size");
        for (unsigned c = 0; c < t.ncols; c++)
            ma_bw_printf(&p->bw, " %13s", leaf_name(cols[c].name));
        ma_bw_write(&p->bw, "\n", 1);
    }
    bool first_row = true;
    for (unsigned i = 0; i < n; i++) {
        size_t idx[2] = {arena, i};
        ctl_val_t vals[16];
        uint64_t activity = 0;
        for (unsigned c = 0; c < t.ncols; c++) {
            ctl_read_entry(&cols[c], idx, 2, &vals[c]);
            if (cols[c].type == CTL_UINT64 || cols[c].type == CTL_SIZE)
                activity |= vals[c].u64;
        }
        if (activity == 0)
            continue; /* classes never used */
        size_t size = sc_index2size(first + i);
        if (p->json) {
            ma_bw_printf(&p->bw, "%s\n", first_row ? "" : ",");
            p->depth++;
            indent(p);
            ma_bw_printf(&p->bw, "{\"size\": %zu", size);
            for (unsigned c = 0; c < t.ncols; c++) {
                ma_bw_printf(&p->bw, ", \"%s\": ", leaf_name(cols[c].name));
                put_value(p, cols[c].type, &vals[c]);
            }
            ma_bw_write(&p->bw, "}", 1);
            p->depth--;
        } else {
            indent(p);
            ma_bw_printf(&p->bw, "%-8u %10zu", i, size);
            for (unsigned c = 0; c < t.ncols; c++) {
                ma_bw_write(&p->bw, " ", 1);
                char num[32];
                ma_bufwriter_t *bw = &p->bw;
                size_t len = 0;
                switch (cols[c].type) {
                case CTL_UINT64:
                    len = ma_snprintf(num, sizeof(num), "%13llu", (unsigned long long)vals[c].u64);
                    break;
                default:
                    len = ma_snprintf(num, sizeof(num), "%13zu", vals[c].z);
                    break;
                }
                ma_bw_write(bw, num, MA_MIN(len, sizeof(num) - 1));
            }
            ma_bw_write(&p->bw, "\n", 1);
        }
        first_row = false;
    }
    if (p->json) {
        ma_bw_write(&p->bw, "]", 1);
        p->first = false;
    }
}

static void arena_section(printer_t *p, size_t arena, const char *opts)
{
    char key[32], title[64];
    if (arena == MALLCTL_ARENAS_ALL) {
        ma_snprintf(key, sizeof(key), "merged");
        ma_snprintf(title, sizeof(title), "Merged arenas:");
    } else {
        ma_snprintf(key, sizeof(key), "%zu", arena);
        ma_snprintf(title, sizeof(title), "Arena %zu:", arena);
    }
    open_obj(p, key, title);
    walk_arg_t w = {p, &arena, 1, 1, strlen("stats.arenas.<i>."), ""};
    ctl_walk("stats.arenas.<i>.", walk_scalar, &w);
    if (p->json)
        json_group(&w, "");
    if (strchr(opts, 'b') == NULL)
        class_table(p, arena, "stats.arenas.<i>.bins.<i>.", "bins", 0, SC_NBINS);
    if (strchr(opts, 'l') == NULL)
        class_table(p, arena, "stats.arenas.<i>.lextents.<i>.", "lextents", SC_NBINS, SC_NSIZES - SC_NBINS);
    close_obj(p);
}

static void stderr_cb(void *opaque, const char *s)
{
    (void)opaque;
    ma_write_all(STDERR_FILENO, s, strlen(s));
}

MA_EXPORT void malloc_stats_print(void (*write_cb)(void *, const char *), void *cbopaque, const char *opts)
{
    if (!ma_init())
        return;
    if (opts == NULL)
        opts = "";
    MA_LARGE_BSS static printer_t pr; /* 4 KiB buffer: not on the caller's stack */
    static ma_mutex_t print_lock = MA_MUTEX_INITIALIZER;
    ma_mutex_lock(&print_lock);
    printer_t *p = &pr;
    memset(p, 0, sizeof(*p));
    ma_bw_init_cb(&p->bw, write_cb != NULL ? write_cb : stderr_cb, cbopaque);
    p->json = strchr(opts, 'J') != NULL;
    p->first = true;

    if (p->json) {
        ma_bw_write(&p->bw, "{", 1);
        p->depth = 1;
        open_obj(p, "myalloc", NULL);
    } else {
        ma_bw_puts(&p->bw, "___ Begin myalloc statistics ___\n");
    }
    if (strchr(opts, 'g') == NULL) {
        ctl_val_t v = {.s = MYALLOC_VERSION};
        put_field(p, "version", CTL_STRING, &v);
        section(p, "config.", "config", "Build-time configuration:");
        section(p, "opt.", "opt", "Run-time options:");
        section(p, "arenas.", "arenas", "Arenas:");
        section(p, "prof.", "prof", "Profiler:");
    }
    open_obj(p, "stats", "Totals:");
    walk_arg_t w = {p, NULL, 0, 0, 0, ""};
    ctl_walk("stats.", walk_scalar, &w);
    bool merged = strchr(opts, 'm') == NULL, each = strchr(opts, 'a') == NULL;
    if (!p->json)
        p->depth--; /* text: arena sections are top level */
    if (merged || each) {
        open_obj(p, "arenas", NULL);
        if (!p->json)
            p->depth--;
        if (merged)
            arena_section(p, MALLCTL_ARENAS_ALL, opts);
        arena_t *a;
        if (each)
            for (unsigned i = 0; (a = arena_next(&i)) != NULL;)
                arena_section(p, a->ind, opts);
        if (!p->json)
            p->depth++;
        close_obj(p);
    }
    if (!p->json)
        p->depth++;
    close_obj(p);
    if (p->json) {
        close_obj(p);
        ma_bw_puts(&p->bw, "\n}\n");
    } else {
        ma_bw_puts(&p->bw, "___ End myalloc statistics ___\n");
    }
    ma_bw_flush(&p->bw);
    ma_mutex_unlock(&print_lock);
}

/* stats_print:true prints at exit, with stats_print_opts. */
bool opt_stats_print;
char opt_stats_print_opts[64];

static void stats_print_atexit(void)
{
    malloc_stats_print(NULL, NULL, opt_stats_print_opts);
}

void stats_print_boot(void)
{
    atexit(stats_print_atexit);
}
