/*
 * conf: the option table and the MYALLOC_CONF parser.
 *
 * Syntax (jemalloc's): key:value[,key:value]... Keys are [A-Za-z0-9_]+;
 * a value runs to the next comma. Booleans are true/false; numbers are C
 * integer literals (0x.. allowed); strings are taken verbatim.
 */
#include "conf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../arena/pages.h"
#include "../prof/prof.h"
#include "../tcache/tcache.h"
#include "core.h"

bool opt_abort_conf;
unsigned opt_narenas;

static const char *const prof_bt_choices[] = {"gcc", "fp", "libgcc", NULL};
static const char *const thp_choices[] = {"default", "always", "never", NULL};

/* Defined weak so that a program's own definition wins (jemalloc's rule). */
MA_EXPORT const char *malloc_conf __attribute__((weak)) = NULL;

const conf_option_t conf_options[] = {
    {"abort_conf", CONF_BOOL, CTL_BOOL, &opt_abort_conf, 0, 1, NULL,
     "abort on an invalid option instead of warning"},
    {"narenas", CONF_UNSIGNED, CTL_UNSIGNED, &opt_narenas, 0, ARENAS_MAX, NULL,
     "number of arenas threads are spread over (0: 4 x CPUs)"},
    {"tcache", CONF_BOOL, CTL_BOOL, &tcache_opt_enabled, 0, 1, NULL, "per-thread caches"},
    {"tcache_max", CONF_SIZE, CTL_SIZE, &tcache_opt_max, 0, (int64_t)TCACHE_MAXCLASS_LIMIT, NULL,
     "largest size served from thread caches"},
    {"dirty_decay_ms", CONF_SSIZE, CTL_SSIZE, &extent_opt_dirty_decay_ms, -1, INT32_MAX, NULL,
     "time over which freed pages are purged (MADV_FREE, or MADV_DONTNEED when muzzy_decay_ms is 0); -1 never, 0 at once"},
    {"muzzy_decay_ms", CONF_SSIZE, CTL_SSIZE, &extent_opt_muzzy_decay_ms, -1, INT32_MAX, NULL,
     "time over which MADV_FREE'd pages are given back with MADV_DONTNEED; -1 never, 0 at once"},
    {"dirty_hold_ms", CONF_SSIZE, CTL_SSIZE, &extent_opt_dirty_hold_ms, 0, INT32_MAX, NULL,
     "decay keeps freed pages up to the most pages in use within this many ms (fading with age); 0 off"},
    {"retain", CONF_BOOL, CTL_BOOL, &extent_opt_retain, 0, 1, NULL,
     "keep purged address space for reuse instead of unmapping it"},
    {"purge_batch", CONF_BOOL, CTL_BOOL, &pages_opt_batch, 0, 1, NULL,
     "purge many runs of pages in one process_madvise call where the kernel allows it and no seccomp filter is installed at the first such purge (false: one madvise per run)"},
    {"background_thread", CONF_BOOL, CTL_BOOL, &opt_background_thread, 0, 1, NULL,
     "purge from a background thread as well as from allocating threads"},
    {"thp", CONF_CHOICE, CTL_STRING, &extent_opt_thp, 0, 0, thp_choices,
     "transparent huge pages for the heap: default (the system's), always (MADV_HUGEPAGE), never (MADV_NOHUGEPAGE)"},
    {"stats_print", CONF_BOOL, CTL_BOOL, &opt_stats_print, 0, 1, NULL,
     "print statistics (malloc_stats_print) at exit"},
    {"stats_print_opts", CONF_STRING, CTL_STRING, opt_stats_print_opts, 0, 0, NULL,
     "malloc_stats_print options for stats_print (e.g. J for JSON)"},
    {"check_sized", CONF_BOOL, CTL_BOOL, &opt_check_sized, 0, 1, NULL,
     "check the size given to sdallocx / free_sized against the allocation (abort on a mismatch)"},
    {"prof", CONF_BOOL, CTL_BOOL, &opt_prof, 0, 1, NULL,
     "arm the heap profiler at startup (it can also be started later with prof.active)"},
    {"prof_active", CONF_BOOL, CTL_BOOL, &opt_prof_active, 0, 1, NULL,
     "with prof:true, sample from the start (false: armed but idle)"},
    {"prof_thread_active_init", CONF_BOOL, CTL_BOOL, &opt_prof_thread_active_init, 0, 1, NULL,
     "whether new threads sample (thread.prof.active's initial value)"},
    {"lg_prof_sample", CONF_UNSIGNED, CTL_SIZE, &opt_lg_prof_sample, 0, 62, NULL,
     "mean bytes between samples, log2 (R = 2^n)"},
    {"lg_prof_interval", CONF_SSIZE, CTL_SSIZE, &opt_lg_prof_interval, -1, 62, NULL,
     "dump a profile every 2^n bytes allocated (-1: never)"},
    {"prof_accum", CONF_BOOL, CTL_BOOL, &opt_prof_accum, 0, 1, NULL,
     "report cumulative allocations, not only live ones"},
    {"prof_final", CONF_BOOL, CTL_BOOL, &opt_prof_final, 0, 1, NULL, "dump a profile at exit"},
    {"prof_leak", CONF_BOOL, CTL_BOOL, &opt_prof_leak, 0, 1, NULL,
     "print a summary of unfreed memory at exit"},
    {"prof_gdump", CONF_BOOL, CTL_BOOL, &opt_prof_gdump, 0, 1, NULL,
     "dump a profile at each new high-water mark of mapped memory"},
    {"prof_prefix", CONF_STRING, CTL_STRING, opt_prof_prefix, 0, 0, NULL,
     "file name prefix of automatic dumps (<prefix>.<pid>.<seq>.<kind>.heap)"},
    {"prof_seed", CONF_UINT64, CTL_UINT64, &opt_prof_seed, 0, INT64_MAX, NULL,
     "seed of the per-thread samplers (0: from the thread and the clock)"},
    {"prof_bt", CONF_CHOICE, CTL_STRING, &opt_prof_bt, 0, 0, prof_bt_choices,
     "stack unwinder: gcc (DWARF unwind tables with a cache, libgcc for what it cannot do; works without frame pointers), fp (frame pointers) or libgcc (libgcc for every stack)"},
    {"prof_bt_max", CONF_UNSIGNED, CTL_UNSIGNED, &opt_prof_bt_max, 1, PROF_BT_MAX_LIMIT, NULL,
     "deepest stack recorded, in frames"},
    {"prof_format", CONF_CHOICE, CTL_STRING, &opt_prof_format, 0, 0, prof_format_names,
     "format of every dump: text (gperftools heap), pprof (gzipped profile.proto with names), folded, svg"},
};
const unsigned conf_noptions = MA_ARRAY_LEN(conf_options);

const conf_option_t *conf_find(const char *name, size_t len)
{
    for (unsigned i = 0; i < conf_noptions; i++) {
        const conf_option_t *o = &conf_options[i];
        if (strlen(o->name) == len && memcmp(o->name, name, len) == 0)
            return o;
    }
    return NULL;
}

static bool parse_int(const char *v, size_t vlen, bool is_signed, int64_t *out)
{
    char buf[32];
    if (vlen == 0 || vlen >= sizeof(buf))
        return false;
    memcpy(buf, v, vlen);
    buf[vlen] = '\0';
    char *end;
    int saved = errno;
    errno = 0;
    if (is_signed) {
        long long x = strtoll(buf, &end, 0);
        *out = x;
    } else {
        if (buf[0] == '-')
            return false;
        unsigned long long x = strtoull(buf, &end, 0);
        if (x > (unsigned long long)INT64_MAX)
            errno = ERANGE;
        *out = (int64_t)x;
    }
    bool ok = errno == 0 && *end == '\0';
    errno = saved;
    return ok;
}

/* String options live in char arrays of these sizes. */
static size_t conf_strmax(const conf_option_t *o)
{
    return o->ptr == (void *)opt_stats_print_opts ? sizeof(opt_stats_print_opts) : CONF_STRMAX;
}

bool conf_set(const conf_option_t *o, const char *v, size_t vlen)
{
    int64_t x;
    switch (o->type) {
    case CONF_BOOL:
        if (vlen == 4 && memcmp(v, "true", 4) == 0)
            *(bool *)o->ptr = true;
        else if (vlen == 5 && memcmp(v, "false", 5) == 0)
            *(bool *)o->ptr = false;
        else
            return false;
        return true;
    case CONF_UNSIGNED:
    case CONF_SIZE:
    case CONF_SSIZE:
    case CONF_UINT64:
        if (!parse_int(v, vlen, o->type == CONF_SSIZE, &x) || x < o->min || x > o->max)
            return false;
        if (o->type == CONF_UNSIGNED)
            *(unsigned *)o->ptr = (unsigned)x;
        else if (o->type == CONF_SIZE)
            *(size_t *)o->ptr = (size_t)x;
        else if (o->type == CONF_SSIZE)
            *(ssize_t *)o->ptr = (ssize_t)x;
        else
            *(uint64_t *)o->ptr = (uint64_t)x;
        return true;
    case CONF_STRING:
        if (vlen >= conf_strmax(o))
            return false;
        memcpy(o->ptr, v, vlen);
        ((char *)o->ptr)[vlen] = '\0';
        return true;
    case CONF_CHOICE:
        for (unsigned i = 0; o->choices[i] != NULL; i++) {
            if (strlen(o->choices[i]) == vlen && memcmp(o->choices[i], v, vlen) == 0) {
                *(unsigned *)o->ptr = i;
                return true;
            }
        }
        return false;
    }
    return false;
}

static bool is_key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

unsigned conf_parse(const char *source, const char *s, bool report)
{
    unsigned bad = 0;
    if (s == NULL)
        return 0;
    while (*s != '\0') {
        const char *k = s;
        while (is_key_char(*s))
            s++;
        size_t klen = (size_t)(s - k);
        if (klen == 0 || *s != ':') {
            /* Not key:value; report up to the next comma and go on. */
            const char *e = strchr(k, ',');
            size_t n = e ? (size_t)(e - k) : strlen(k);
            if (report)
                ma_warn("%s: malformed option \"%.*s\" (expected key:value; ignored)", source,
                        (int)MA_MIN(n, 200), k);
            bad++;
            if (e == NULL)
                break;
            s = e + 1;
            continue;
        }
        s++; /* ':' */
        const char *v = s;
        while (*s != '\0' && *s != ',')
            s++;
        size_t vlen = (size_t)(s - v);
        const conf_option_t *o = conf_find(k, klen);
        if (o == NULL) {
            if (report)
                ma_warn("%s: unknown option \"%.*s\" (ignored)", source, (int)MA_MIN(klen, 200), k);
            bad++;
        } else if (!conf_set(o, v, vlen)) {
            if (report)
                ma_warn("%s: invalid value \"%.*s\" for option %s (default kept)", source,
                        (int)MA_MIN(vlen, 200), v, o->name);
            bad++;
        }
        if (*s == ',')
            s++;
    }
    return bad;
}

/* Environment lookup that works before libc's environ is fully usable and
 * never allocates (it may run inside the first malloc). */
extern char **environ;

static const char *ma_getenv(const char *name)
{
    size_t n = strlen(name);
    if (environ == NULL)
        return NULL;
    for (char **e = environ; *e != NULL; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    }
    return NULL;
}

/* The parser and this file's strings are warm (the Makefile's WARM_SRC):
 * the parser is called only for a string there is, and the variable's name
 * stays with the hot read-only data. */
static const char conf_env_name[] MA_HOT_RODATA = "MYALLOC_CONF";

MA_HOT_TEXT void conf_init(void)
{
    unsigned bad = 0;
    const char *env = ma_getenv(conf_env_name);
    if (malloc_conf != NULL)
        bad += conf_parse("malloc_conf", malloc_conf, true);
    if (env != NULL)
        bad += conf_parse("MYALLOC_CONF", env, true);
    if (bad != 0 && opt_abort_conf)
        ma_fatal("invalid configuration and abort_conf:true: aborting");
}
