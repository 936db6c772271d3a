/*
 * prof_dump: dumps (file names, the format in use, the snapshot the other
 * writers work from), heap profiles in the gperftools text format, and the
 * leak summary printed at exit.
 *
 *   heap profile: <n>: <b> [<an>: <ab>] @ heap_v2/<R>
 *   <n>: <b> [<an>: <ab>] @ 0x<leaf> 0x<caller> ...
 *   ...
 *
 *   MAPPED_LIBRARIES:
 *   <copy of /proc/self/maps>
 *
 * One record line per (stack, size class) with raw sampled counts, so that
 * the readers' own per-record unbiasing (by the record's average size,
 * which is its class size) is exact. See ../shared/reference/
 * profile-formats.md for what jeprof, google-pprof and go tool pprof
 * accept.
 *
 * The header is written first with fixed-width numbers and rewritten in
 * place at the end (every reader accepts the padding), so the header is
 * exactly the sum of the records even though samplers keep running: no
 * lock is held across the whole dump.
 *
 * Residency: after a record's line, a comment line
 *
 *   # myalloc resident=<bytes> swapped=<bytes>
 *
 * gives the bytes of its live sampled objects on resident / swapped pages
 * (raw, like the counts; tools/myalloc-prof unbiases them). jeprof and
 * pprof skip '#' lines.
 *
 * The other formats (prof_pprof.c, prof_flame.c) work from a snapshot of
 * the records, see prof_out.h.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prof_out.h"

static ma_mutex_t dump_lock = MA_MUTEX_INITIALIZER;
static uint64_t dump_seq;

typedef struct dump_state {
    ma_bufwriter_t bw;
    unsigned lg_now;
    bool peak, resid;
    uint64_t epoch;        /* the peak's, in a peak dump */
    uint64_t n, b, an, ab; /* header sums */
} dump_state_t;

/* Raw count of a record expressed at the dump's R: exact when the record
 * was sampled at that R, otherwise rescaled by the ratio of weights and
 * rounded (the text format has one R per file). */
static uint64_t count_at(uint64_t count, const prof_rec_t *r, unsigned lg_now)
{
    if (r->lg_sample == lg_now || count == 0)
        return count;
    double x = (double)count * prof_weight(r->szind, r->lg_sample) / prof_weight(r->szind, lg_now);
    return (uint64_t)ma_llround(x);
}

static void dump_visit(const prof_stack_t *s, void *arg)
{
    dump_state_t *d = arg;
    for (const prof_rec_t *r = s->recs; r != NULL; r = r->next) {
        uint64_t live = d->peak ? prof_rec_peak_live(r, d->epoch) : r->live;
        uint64_t n = count_at(live, r, d->lg_now);
        uint64_t an = opt_prof_accum && !d->peak ? count_at(r->accum, r, d->lg_now) : 0;
        if (n == 0 && an == 0)
            continue;
        uint64_t usize = sc_index2size(r->szind);
        ma_bw_printf(&d->bw, "%llu: %llu [%llu: %llu] @", (unsigned long long)n,
                     (unsigned long long)(n * usize), (unsigned long long)an,
                     (unsigned long long)(an * usize));
        for (uint32_t i = 0; i < s->depth; i++)
            ma_bw_printf(&d->bw, " 0x%lx", (unsigned long)(uintptr_t)s->frames[i]);
        ma_bw_write(&d->bw, "\n", 1);
        if (d->resid && n > 0) {
            /* In the record's counts' terms (rescaled like them). */
            double k = live > 0 ? (double)n / (double)live : 0;
            ma_bw_printf(&d->bw, "# myalloc resident=%llu swapped=%llu\n",
                         (unsigned long long)ma_llround((double)r->resident * k),
                         (unsigned long long)ma_llround((double)r->swapped * k));
        }
        d->n += n;
        d->b += n * usize;
        d->an += an;
        d->ab += an * usize;
    }
}

static size_t format_header(char *buf, size_t len, const dump_state_t *d)
{
    return ma_snprintf(buf, len, "heap profile: %20llu: %20llu [%20llu: %20llu] @ heap_v2/%llu\n",
                       (unsigned long long)d->n, (unsigned long long)d->b, (unsigned long long)d->an,
                       (unsigned long long)d->ab, (unsigned long long)((uint64_t)1 << d->lg_now));
}

static void copy_maps(ma_bufwriter_t *bw)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        ma_bw_write(bw, buf, (size_t)n);
    close(fd);
}

static int dump_text(int fd, bool peak, bool resid)
{
    dump_state_t d;
    memset(&d, 0, sizeof(d));
    ma_bw_init_fd(&d.bw, fd);
    d.lg_now = ma_load_acquire(&prof_lg_sample);
    d.peak = peak;
    d.resid = resid;
    d.epoch = ma_load_acquire(&prof_peak_epoch);
    char header[256];
    size_t hlen = format_header(header, sizeof(header), &d);
    ma_bw_write(&d.bw, header, hlen);
    prof_table_foreach(dump_visit, &d);
    ma_bw_puts(&d.bw, "\nMAPPED_LIBRARIES:\n");
    copy_maps(&d.bw);
    if (!ma_bw_flush(&d.bw))
        return errno != 0 ? errno : EIO;
    size_t hlen2 = format_header(header, sizeof(header), &d);
    if (hlen2 != hlen || pwrite(fd, header, hlen, 0) != (ssize_t)hlen)
        return errno != 0 ? errno : EIO;
    return 0;
}

/* ---------------------------------------------------------------------
 * The snapshot the other writers work from.
 */

typedef struct snap_state {
    prof_snap_t *snap;
    size_t cap;
    uint64_t epoch;
} snap_state_t;

static void snap_count_visit(const prof_stack_t *s, void *arg)
{
    size_t *n = arg;
    for (const prof_rec_t *r = s->recs; r != NULL; r = r->next)
        (*n)++;
}

static void snap_visit(const prof_stack_t *s, void *arg)
{
    snap_state_t *st = arg;
    prof_snap_t *snap = st->snap;
    for (const prof_rec_t *r = s->recs; r != NULL && snap->nrecs < st->cap; r = r->next) {
        uint64_t live = snap->peak ? prof_rec_peak_live(r, st->epoch) : r->live;
        uint64_t accum = snap->peak ? 0 : r->accum;
        if (live == 0 && accum == 0)
            continue;
        snap->recs[snap->nrecs++] = (prof_snap_rec_t){s, r->szind, r->lg_sample, live, accum,
                                                      snap->resid ? r->resident : 0, snap->resid ? r->swapped : 0};
    }
}

static bool snap_build(prof_snap_t *snap, prof_scratch_t *sc, bool peak, bool resid)
{
    memset(snap, 0, sizeof(*snap));
    snap->sc = sc;
    snap->peak = peak;
    snap->resid = resid;
    snap->lg_now = ma_load_acquire(&prof_lg_sample);
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) == 0)
        snap->time_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    size_t n = 0;
    prof_table_foreach(snap_count_visit, &n);
    /* Records made meanwhile are left for the next dump. */
    snap_state_t st = {snap, n + n / 8 + 64, ma_load_acquire(&prof_peak_epoch)};
    snap->recs = prof_scratch_alloc(sc, st.cap * sizeof(prof_snap_rec_t));
    if (snap->recs == NULL)
        return false;
    prof_table_foreach(snap_visit, &st);
    const char *text;
    size_t len;
    return prof_maps_read_self(sc, &snap->maps, &text, &len);
}

bool prof_frames_build(prof_snap_t *snap, prof_frames_t *f)
{
    memset(f, 0, sizeof(*f));
    size_t total = 0;
    for (size_t i = 0; i < snap->nrecs; i++)
        if (i == 0 || snap->recs[i].stack != snap->recs[i - 1].stack)
            total += snap->recs[i].stack->depth;
    size_t slots = 64;
    while (slots < 2 * total)
        slots *= 2;
    f->mask = slots - 1;
    f->slots = prof_scratch_alloc(snap->sc, slots * sizeof(uint32_t));
    f->v = prof_scratch_alloc(snap->sc, (total + 1) * sizeof(prof_frame_t));
    if (f->slots == NULL || f->v == NULL)
        return false;
    for (size_t i = 0; i < snap->nrecs; i++) {
        const prof_stack_t *s = snap->recs[i].stack;
        if (i > 0 && s == snap->recs[i - 1].stack)
            continue;
        for (uint32_t k = 0; k < s->depth; k++) {
            uint64_t addr = (uint64_t)(uintptr_t)s->frames[k];
            size_t h = (size_t)prof_hash_bytes(&addr, sizeof(addr), 0) & f->mask;
            while (f->slots[h] != 0 && f->v[f->slots[h] - 1].addr != addr)
                h = (h + 1) & f->mask;
            if (f->slots[h] != 0)
                continue;
            prof_frame_t *fr = &f->v[f->n];
            fr->addr = addr;
            fr->index = (uint32_t)f->n;
            prof_symbolize(&snap->maps, addr - 1, &fr->sym);
            char name[512];
            size_t len = prof_sym_format(&fr->sym, addr, name, sizeof(name));
            fr->name = prof_scratch_strndup(snap->sc, name, MA_MIN(len, sizeof(name) - 1));
            if (fr->name == NULL)
                return false;
            f->n++;
            f->slots[h] = (uint32_t)f->n;
        }
    }
    return true;
}

const prof_frame_t *prof_frames_get(const prof_frames_t *f, uint64_t addr)
{
    size_t h = (size_t)prof_hash_bytes(&addr, sizeof(addr), 0) & f->mask;
    while (f->slots[h] != 0) {
        const prof_frame_t *fr = &f->v[f->slots[h] - 1];
        if (fr->addr == addr)
            return fr;
        h = (h + 1) & f->mask;
    }
    return NULL;
}

static int dump_to_fd(int fd, unsigned format, bool peak)
{
    /* Residency describes the live objects now, so not a peak's. */
    bool resid = !peak && prof_residency_collect();
    if (format == PROF_FORMAT_TEXT)
        return dump_text(fd, peak, resid);
    prof_scratch_t sc;
    prof_scratch_init(&sc);
    prof_snap_t snap;
    int err = ENOMEM;
    if (snap_build(&snap, &sc, peak, resid)) {
        switch (format) {
        case PROF_FORMAT_PPROF:
            err = prof_write_pprof(fd, &snap);
            break;
        case PROF_FORMAT_FOLDED:
            err = prof_write_folded(fd, &snap);
            break;
        default:
            err = prof_write_svg(fd, &snap);
            break;
        }
    }
    prof_scratch_free(&sc);
    return err;
}

static const char *const format_suffix[] = {"heap", "pb.gz", "folded", "svg"};

static int dump_common(const char *filename, char kind, bool peak)
{
    char path[PROF_PREFIX_MAX + 80];
    int saved = errno;
    ma_mutex_lock(&dump_lock);
    unsigned format = ma_load_acquire(&prof_format);
    if (format >= PROF_FORMAT_COUNT)
        format = PROF_FORMAT_TEXT;
    if (filename == NULL) {
        if (opt_prof_prefix[0] == '\0') {
            ma_mutex_unlock(&dump_lock);
            return EINVAL;
        }
        ma_snprintf(path, sizeof(path), "%s.%d.%llu.%c.%s", opt_prof_prefix, (int)getpid(),
                    (unsigned long long)dump_seq++, kind, format_suffix[format]);
        filename = path;
    }
    int err = 0;
    int fd = open(filename, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        err = errno;
    } else {
        err = dump_to_fd(fd, format, peak);
        if (close(fd) != 0 && err == 0)
            err = errno;
    }
    ma_mutex_unlock(&dump_lock);
    errno = saved;
    return err;
}

int prof_dump(const char *filename, char kind)
{
    return dump_common(filename, kind, false);
}

int prof_dump_peak(const char *filename)
{
    return dump_common(filename, 'p', true);
}

/* ---------------------------------------------------------------------
 * Interval and high-water dumps.
 */

static uint64_t interval_bytes;

void prof_bytes_hook(uint64_t bytes)
{
    if (opt_lg_prof_interval < 0 || !ma_load_acquire(&prof_active))
        return;
    uint64_t interval = (uint64_t)1 << opt_lg_prof_interval;
    uint64_t before = ma_fetch_add(&interval_bytes, bytes);
    if ((before + bytes) / interval != before / interval)
        prof_dump(NULL, 'i');
}

void prof_note_growth(void)
{
    if (ma_load_acquire(&prof_gdump_on) && ma_load_acquire(&prof_active))
        prof_dump(NULL, 'u');
}

/* ---------------------------------------------------------------------
 * Exit: the final dump and the leak summary.
 */

#define LEAK_TOP 8

typedef struct leak_entry {
    const prof_stack_t *stack;
    double bytes, objects, resident;
} leak_entry_t;

typedef struct leak_state {
    leak_entry_t top[LEAK_TOP];
    unsigned ntop;
    double bytes, objects, resident, swapped;
    uint64_t samples;
    unsigned nstacks;
} leak_state_t;

static void leak_visit(const prof_stack_t *s, void *arg)
{
    leak_state_t *l = arg;
    double bytes = 0, objects = 0, resident = 0;
    for (const prof_rec_t *r = s->recs; r != NULL; r = r->next) {
        if (r->live == 0)
            continue;
        double w = prof_weight(r->szind, r->lg_sample);
        objects += (double)r->live * w;
        bytes += (double)r->live * w * (double)sc_index2size(r->szind);
        resident += (double)r->resident * w;
        l->swapped += (double)r->swapped * w;
        l->samples += r->live;
    }
    if (objects == 0)
        return;
    l->bytes += bytes;
    l->objects += objects;
    l->resident += resident;
    l->nstacks++;
    /* Keep the LEAK_TOP largest, sorted by bytes. */
    unsigned i = l->ntop < LEAK_TOP ? l->ntop++ : LEAK_TOP;
    while (i > 0 && l->top[i - 1].bytes < bytes) {
        if (i < LEAK_TOP)
            l->top[i] = l->top[i - 1];
        i--;
    }
    if (i < LEAK_TOP)
        l->top[i] = (leak_entry_t){s, bytes, objects, resident};
}

static void describe_frame(char *buf, size_t len, void *addr)
{
    Dl_info info;
    /* A return address points after the call: look up the call itself. */
    if (dladdr((char *)addr - 1, &info) != 0 && info.dli_sname != NULL)
        ma_snprintf(buf, len, "%s+0x%lx", info.dli_sname,
                    (unsigned long)((uintptr_t)addr - (uintptr_t)info.dli_saddr));
    else if (dladdr((char *)addr - 1, &info) != 0 && info.dli_fname != NULL)
        ma_snprintf(buf, len, "%p (%s)", addr, info.dli_fname);
    else
        ma_snprintf(buf, len, "%p", addr);
}

void prof_leak_report(void)
{
    leak_state_t l;
    memset(&l, 0, sizeof(l));
    ma_mutex_lock(&dump_lock); /* the records' residency fields */
    bool resid = prof_residency_collect();
    prof_table_foreach(leak_visit, &l);
    ma_mutex_unlock(&dump_lock);
    if (l.samples == 0) {
        ma_warn("leak summary: no sampled object is still allocated");
        return;
    }
    char rs[128] = "";
    if (resid)
        ma_snprintf(rs, sizeof(rs), "; ~%.0f bytes of it resident, ~%.0f swapped", l.resident, l.swapped);
    ma_warn("leak summary: ~%.0f bytes in ~%.0f objects unfreed at exit (unbiased, from %llu "
            "samples on %u stacks, R = %llu)%s",
            l.bytes, l.objects, (unsigned long long)l.samples, l.nstacks,
            (unsigned long long)((uint64_t)1 << prof_lg_sample), rs);
    for (unsigned i = 0; i < l.ntop; i++) {
        char line[1024];
        size_t n = ma_snprintf(line, sizeof(line), "  ~%.0f bytes in ~%.0f objects at", l.top[i].bytes,
                               l.top[i].objects);
        const prof_stack_t *s = l.top[i].stack;
        for (uint32_t f = 0; f < s->depth && f < 6 && n < sizeof(line) - 200; f++) {
            char fr[160];
            describe_frame(fr, sizeof(fr), s->frames[f]);
            n += ma_snprintf(line + n, sizeof(line) - n, "%s %s", f == 0 ? "" : " <-", fr);
        }
        if (resid && n < sizeof(line))
            ma_snprintf(line + n, sizeof(line) - n, " (~%.0f resident)", l.top[i].resident);
        ma_warn("%s", line);
    }
}

static void prof_atexit(void)
{
    if (!prof_armed())
        return;
    if (opt_prof_final && prof_dump(NULL, 'f') != 0)
        ma_warn("prof_final: could not write the final profile (prof_prefix \"%s\")", opt_prof_prefix);
    if (opt_prof_leak)
        prof_leak_report();
}

void prof_dump_boot(void)
{
    if (opt_prof_final || opt_prof_leak)
        atexit(prof_atexit);
}

void prof_dump_prefork(void) { ma_mutex_prefork(&dump_lock); }
void prof_dump_postfork_parent(void) { ma_mutex_postfork_parent(&dump_lock); }
void prof_dump_postfork_child(void) { ma_mutex_postfork_child(&dump_lock); }
