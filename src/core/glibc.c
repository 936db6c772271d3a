/*
 * glibc: the rest of what a glibc malloc replacement must answer
 * (mallinfo, mallinfo2, mallopt, malloc_trim, malloc_stats, malloc_info),
 * so that both LD_PRELOAD and static linking leave no caller reaching
 * glibc's allocator.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>

#include "../common/common.h"
#include "core.h"
#include "stats.h"

MA_EXPORT struct mallinfo2 mallinfo2(void)
{
    struct mallinfo2 mi = {0};
    if (!ma_init())
        return mi;
    stats_totals_t t;
    stats_totals(&t);
    /* The address space holding memory: retained space is purged, and a
     * freed 64 TiB block would otherwise count as 64 TiB for good. */
    size_t held = t.mapped > t.retained ? t.mapped - t.retained : 0;
    mi.arena = held;
    mi.ordblks = 0;
    /* Large objects are page runs of the arenas, not mmapped blocks of
     * their own: they are in uordblks, and hblks / hblkhd stay 0. */
    mi.hblks = 0;
    mi.hblkhd = 0;
    mi.uordblks = t.allocated;            /* bytes in use */
    mi.fordblks = held > t.allocated ? held - t.allocated : 0;
    mi.keepcost = t.dirty;                /* what malloc_trim could release now */
    return mi;
}

MA_EXPORT struct mallinfo mallinfo(void)
{
    struct mallinfo2 m2 = mallinfo2();
    struct mallinfo mi;
    /* The old interface has int fields: saturate rather than wrap. */
#define SAT(x) ((int)((x) > (size_t)0x7fffffff ? 0x7fffffff : (x)))
    mi.arena = SAT(m2.arena);
    mi.ordblks = SAT(m2.ordblks);
    mi.smblks = SAT(m2.smblks);
    mi.hblks = SAT(m2.hblks);
    mi.hblkhd = SAT(m2.hblkhd);
    mi.usmblks = SAT(m2.usmblks);
    mi.fsmblks = SAT(m2.fsmblks);
    mi.uordblks = SAT(m2.uordblks);
    mi.fordblks = SAT(m2.fordblks);
    mi.keepcost = SAT(m2.keepcost);
#undef SAT
    return mi;
}

MA_EXPORT int mallopt(int param, int value)
{
    (void)value;
    switch (param) {
    case M_MXFAST:
    case M_TRIM_THRESHOLD:
    case M_TOP_PAD:
    case M_MMAP_THRESHOLD:
    case M_MMAP_MAX:
    case M_CHECK_ACTION:
    case M_PERTURB:
    case M_ARENA_TEST:
    case M_ARENA_MAX:
        return 1; /* accepted; myalloc's own options (MYALLOC_CONF) govern */
    default:
        return 0;
    }
}

MA_EXPORT int malloc_trim(size_t pad)
{
    (void)pad;
    if (!ma_init())
        return 0;
    tsd_t *tsd = tsd_fetch();
    if (tsd_nominal(tsd))
        tcache_flush(tsd);
    return arena_purge_all() != 0;
}

MA_EXPORT void malloc_stats(void)
{
    stats_totals_t t = {0};
    if (ma_init())
        stats_totals(&t);
    char buf[512];
    size_t n = ma_snprintf(buf, sizeof(buf),
                           "myalloc " "%s\n"
                           "system bytes     = %10zu\n"
                           "in use bytes     = %10zu\n"
                           "active bytes     = %10zu\n"
                           "dirty bytes      = %10zu\n"
                           "metadata bytes   = %10zu\n",
                           "0.1.0", t.mapped, t.allocated, t.active, t.dirty, t.metadata);
    ma_write_all(2, buf, MA_MIN(n, sizeof(buf) - 1));
}

MA_EXPORT int malloc_info(int options, FILE *fp)
{
    if (options != 0) {
        errno = EINVAL;
        return -1;
    }
    stats_totals_t t = {0};
    if (ma_init())
        stats_totals(&t);
    char buf[512];
    size_t n = ma_snprintf(buf, sizeof(buf),
                           "<malloc version=\"myalloc-0.1.0\">\n"
                           "<system type=\"current\" size=\"%zu\"/>\n"
                           "<total type=\"inuse\" size=\"%zu\"/>\n"
                           "<total type=\"active\" size=\"%zu\"/>\n"
                           "<total type=\"dirty\" size=\"%zu\"/>\n"
                           "</malloc>\n",
                           t.mapped, t.allocated, t.active, t.dirty);
    return fwrite(buf, 1, MA_MIN(n, sizeof(buf) - 1), fp) == MA_MIN(n, sizeof(buf) - 1) ? 0 : -1;
}
