/*
 * prof_pprof: heap profiles as gzipped profile.proto (pprof's format),
 * with our own protobuf encoder and gzip framing; no zlib.
 *
 * Layout (as Go's runtime writes heap profiles, see
 * ../shared/reference/profile-formats.md, section 2):
 *
 *   sample_type   alloc_objects/count alloc_space/bytes inuse_objects/count
 *                 inuse_space/bytes resident_space/bytes swapped_space/bytes
 *   sample        one per (stack, size class): values already unbiased
 *                 (pprof never rescales proto values), a numeric label
 *                 bytes = the objects' usable size
 *   mapping       one per executable line of /proc/self/maps, the main
 *                 program first, with its GNU build id; has_functions set
 *   location      one per distinct return address: address = return
 *                 address - 1, one line naming its function
 *   function      name = system_name = the symbol (C++ names mangled;
 *                 pprof demangles them), its source file and first line
 *                 when the object has DWARF line tables (then locations
 *                 carry line numbers too)
 *   period_type   space/bytes, period R, default_sample_type inuse_space
 *
 * The mapping's has_functions flag tells pprof the names are already
 * there, so it reads the profile with no binary at hand.
 *
 * Encoding: the top-level Profile is a sequence of fields, written in
 * order as they are produced (repeated fields may interleave, so each new
 * string goes into string_table the moment it gets its index; index 0 is
 * ""). Sub-messages are small and encoded into a stack buffer first to
 * know their length.
 *
 * gzip: a 10-byte header, "stored" deflate blocks of up to 65535 bytes
 * (block header byte, LEN, ~LEN, the bytes), the CRC-32 and the length.
 * Valid gzip that any reader inflates; no compression.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "prof_out.h"

/* ---------------------------------------------------------------------
 * gzip with stored blocks.
 */

#define GZ_BLOCK 65535

typedef struct gz {
    ma_bufwriter_t bw;
    uint32_t crc;
    uint32_t isize;
    size_t len;
    unsigned char buf[GZ_BLOCK];
} gz_t;

static uint32_t crc_table[256];

static void crc_init(void)
{
    if (crc_table[255] != 0)
        return;
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc_update(uint32_t crc, const unsigned char *p, size_t len)
{
    crc = ~crc;
    for (size_t i = 0; i < len; i++)
        crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static void gz_block(gz_t *g, bool final)
{
    unsigned char hdr[5];
    hdr[0] = final ? 1 : 0; /* BFINAL, BTYPE 00 (stored); the rest of the byte is padding */
    hdr[1] = (unsigned char)(g->len & 0xff);
    hdr[2] = (unsigned char)(g->len >> 8);
    hdr[3] = (unsigned char)(~g->len & 0xff);
    hdr[4] = (unsigned char)((~g->len >> 8) & 0xff);
    ma_bw_write(&g->bw, (const char *)hdr, sizeof(hdr));
    ma_bw_write(&g->bw, (const char *)g->buf, g->len);
    g->len = 0;
}

static void gz_start(gz_t *g, int fd)
{
    crc_init();
    ma_bw_init_fd(&g->bw, fd);
    g->crc = 0;
    g->isize = 0;
    g->len = 0;
    /* magic, deflate, no flags, no mtime, no extra flags, OS unix */
    static const unsigned char hdr[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    ma_bw_write(&g->bw, (const char *)hdr, sizeof(hdr));
}

static void gz_write(gz_t *g, const void *data, size_t len)
{
    const unsigned char *p = data;
    g->crc = crc_update(g->crc, p, len);
    g->isize += (uint32_t)len;
    while (len > 0) {
        size_t n = MA_MIN(len, GZ_BLOCK - g->len);
        memcpy(g->buf + g->len, p, n);
        g->len += n;
        p += n;
        len -= n;
        if (g->len == GZ_BLOCK)
            gz_block(g, false);
    }
}

static bool gz_finish(gz_t *g)
{
    gz_block(g, true);
    unsigned char t[8];
    for (int i = 0; i < 4; i++) {
        t[i] = (unsigned char)(g->crc >> (8 * i));
        t[4 + i] = (unsigned char)(g->isize >> (8 * i));
    }
    ma_bw_write(&g->bw, (const char *)t, sizeof(t));
    return ma_bw_flush(&g->bw);
}

/* ---------------------------------------------------------------------
 * Protobuf.
 */

enum { WIRE_VARINT = 0, WIRE_LEN = 2 };

/* A message being built. */
typedef struct pb {
    unsigned char *p;
    size_t len, cap;
    bool overflow;
} pb_t;

static void pb_byte(pb_t *m, unsigned char c)
{
    if (m->len < m->cap)
        m->p[m->len++] = c;
    else
        m->overflow = true;
}

static void pb_varint(pb_t *m, uint64_t v)
{
    while (v >= 0x80) {
        pb_byte(m, (unsigned char)(v | 0x80));
        v >>= 7;
    }
    pb_byte(m, (unsigned char)v);
}

static void pb_tag(pb_t *m, unsigned field, unsigned wire)
{
    pb_varint(m, (uint64_t)field << 3 | wire);
}

/* An integer field (int64 values are written as their two's complement,
 * which is what protobuf does for non-negative ones too); zero is the
 * default and is left out. */
static void pb_int(pb_t *m, unsigned field, uint64_t v)
{
    if (v == 0)
        return;
    pb_tag(m, field, WIRE_VARINT);
    pb_varint(m, v);
}

static void pb_bytes(pb_t *m, unsigned field, const void *data, size_t len)
{
    pb_tag(m, field, WIRE_LEN);
    pb_varint(m, len);
    for (size_t i = 0; i < len; i++)
        pb_byte(m, ((const unsigned char *)data)[i]);
}

/* A nested message held in sub. */
static void pb_msg(pb_t *m, unsigned field, const pb_t *sub)
{
    pb_bytes(m, field, sub->p, sub->len);
}

typedef struct pprof_w {
    gz_t *gz;
    prof_snap_t *snap;
    prof_frames_t frames;
    /* Strings: open addressing by content; index order = emission order. */
    struct str_ent {
        const char *s;
        size_t len;
        uint32_t idx;
    } *strs;
    size_t str_mask, nstrs;
    uint32_t *fid_of_str;  /* function id per name's string index (0: none yet) */
    size_t fid_cap;
    uint32_t nfuncs;
    uint32_t *mapping_of;  /* mapping id per maps line (0: none) */
    bool overflow;
} pprof_w_t;

static void top_field(pprof_w_t *w, unsigned field, const pb_t *sub)
{
    unsigned char hdr[16];
    pb_t h = {hdr, 0, sizeof(hdr), false};
    pb_tag(&h, field, WIRE_LEN);
    pb_varint(&h, sub->len);
    gz_write(w->gz, hdr, h.len);
    gz_write(w->gz, sub->p, sub->len);
    w->overflow |= sub->overflow;
}

static void top_int(pprof_w_t *w, unsigned field, uint64_t v)
{
    unsigned char b[24];
    pb_t m = {b, 0, sizeof(b), false};
    pb_int(&m, field, v);
    gz_write(w->gz, b, m.len);
}

/* The string's index in string_table, written there if new. */
static int64_t str_index(pprof_w_t *w, const char *s, size_t len)
{
    size_t h = (size_t)prof_hash_bytes(s, len, 1) & w->str_mask;
    while (w->strs[h].s != NULL) {
        if (w->strs[h].len == len && memcmp(w->strs[h].s, s, len) == 0)
            return w->strs[h].idx;
        h = (h + 1) & w->str_mask;
    }
    if (w->nstrs >= w->str_mask / 2) {
        w->overflow = true;
        return 0;
    }
    w->strs[h] = (struct str_ent){s, len, (uint32_t)w->nstrs};
    w->nstrs++;
    unsigned char hdr[16];
    pb_t m = {hdr, 0, sizeof(hdr), false};
    pb_tag(&m, 6, WIRE_LEN); /* string_table */
    pb_varint(&m, len);
    gz_write(w->gz, hdr, m.len);
    gz_write(w->gz, s, len);
    return w->strs[h].idx;
}

static int64_t str_of(pprof_w_t *w, const char *s)
{
    return str_index(w, s, strlen(s));
}

/* The same for a string in a temporary buffer (the table keeps pointers). */
static int64_t str_copy(pprof_w_t *w, const char *s)
{
    char *copy = prof_scratch_strndup(w->snap->sc, s, strlen(s));
    if (copy == NULL) {
        w->overflow = true;
        return 0;
    }
    return str_of(w, copy);
}

static void value_type(pprof_w_t *w, unsigned field, const char *type, const char *unit)
{
    int64_t t = str_of(w, type), u = str_of(w, unit);
    unsigned char b[32];
    pb_t m = {b, 0, sizeof(b), false};
    pb_int(&m, 1, (uint64_t)t);
    pb_int(&m, 2, (uint64_t)u);
    top_field(w, field, &m);
}

/* Mappings: the executable lines of the maps, the main program first. */
static void write_mappings(pprof_w_t *w)
{
    const prof_maps_t *maps = &w->snap->maps;
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = '\0';
    /* " (deleted)" is part of the link's text when the file is gone. */
    static const char deleted[] = " (deleted)";
    size_t el = strlen(exe), dl = sizeof(deleted) - 1;
    if (el > dl && strcmp(exe + el - dl, deleted) == 0)
        exe[el - dl] = '\0';
    uint32_t next_id = 1;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < maps->n; i++) {
            const prof_map_t *m = &maps->v[i];
            if (m->perms[2] != 'x' || m->path[0] == '\0' || w->mapping_of[i] != 0)
                continue;
            bool main = exe[0] != '\0' && strcmp(m->path, exe) == 0;
            if (pass == 0 && !main)
                continue;
            uint32_t id = next_id++;
            w->mapping_of[i] = id;
            int64_t file = str_of(w, m->path);
            char hex[160];
            int64_t bid = 0;
            if (m->path[0] == '/' && prof_build_id(maps, m, hex, sizeof(hex)))
                bid = str_copy(w, hex);
            unsigned char b[128];
            pb_t mm = {b, 0, sizeof(b), false};
            pb_int(&mm, 1, id);
            pb_int(&mm, 2, m->start);
            pb_int(&mm, 3, m->end);
            pb_int(&mm, 4, m->offset);
            pb_int(&mm, 5, (uint64_t)file);
            pb_int(&mm, 6, (uint64_t)bid);
            pb_int(&mm, 7, 1); /* has_functions: the names are in the profile */
            bool files = false, lines = false;
            for (size_t k = 0; k < w->frames.n; k++) {
                const prof_sym_t *sym = &w->frames.v[k].sym;
                if (sym->map == m) {
                    files |= sym->file != NULL;
                    lines |= sym->line != 0;
                }
            }
            pb_int(&mm, 8, files);
            pb_int(&mm, 9, lines);
            top_field(w, 3, &mm);
        }
    }
}

static uint32_t function_id(pprof_w_t *w, const prof_frame_t *fr)
{
    int64_t name = str_of(w, fr->name);
    if ((size_t)name >= w->fid_cap) {
        w->overflow = true;
        return 0;
    }
    if (w->fid_of_str[name] != 0)
        return w->fid_of_str[name];
    int64_t file = 0;
    if (fr->sym.file != NULL) {
        char path[1024];
        if (fr->sym.file_dir != NULL && fr->sym.file[0] != '/')
            ma_snprintf(path, sizeof(path), "%s/%s", fr->sym.file_dir, fr->sym.file);
        else
            ma_snprintf(path, sizeof(path), "%s", fr->sym.file);
        file = str_copy(w, path);
    }
    uint32_t id = ++w->nfuncs;
    w->fid_of_str[name] = id;
    unsigned char b[64];
    pb_t m = {b, 0, sizeof(b), false};
    pb_int(&m, 1, id);
    pb_int(&m, 2, (uint64_t)name);
    pb_int(&m, 3, (uint64_t)name);
    pb_int(&m, 4, (uint64_t)file);
    pb_int(&m, 5, fr->sym.fn_line);
    top_field(w, 5, &m);
    return id;
}

static void write_locations(pprof_w_t *w)
{
    const prof_maps_t *maps = &w->snap->maps;
    for (size_t i = 0; i < w->frames.n; i++) {
        const prof_frame_t *fr = &w->frames.v[i];
        uint32_t fid = function_id(w, fr);
        uint32_t mid = 0;
        if (fr->sym.map != NULL)
            mid = w->mapping_of[fr->sym.map - maps->v];
        unsigned char lb[32], b[96];
        pb_t line = {lb, 0, sizeof(lb), false};
        pb_int(&line, 1, fid);
        pb_int(&line, 2, fr->sym.line);
        pb_t m = {b, 0, sizeof(b), false};
        pb_int(&m, 1, fr->index + 1);
        pb_int(&m, 2, mid);
        pb_int(&m, 3, fr->addr - 1); /* the call, not the return address */
        pb_msg(&m, 4, &line);
        top_field(w, 4, &m);
    }
}

static void write_samples(pprof_w_t *w)
{
    const prof_snap_t *snap = w->snap;
    int64_t bytes_key = str_of(w, "bytes");
    unsigned char buf[PROF_BT_MAX_LIMIT * 10 + 256], vbuf[128], labuf[48];
    for (size_t i = 0; i < snap->nrecs; i++) {
        const prof_snap_rec_t *r = &snap->recs[i];
        uint64_t accum = opt_prof_accum ? r->accum : 0;
        if (r->live == 0 && accum == 0)
            continue;
        double wt = prof_snap_w(r), usize = (double)sc_index2size(r->szind);
        int64_t v[6] = {
            ma_llround((double)accum * wt),        ma_llround((double)accum * wt * usize),
            ma_llround((double)r->live * wt),      ma_llround((double)r->live * wt * usize),
            ma_llround((double)r->resident * wt),  ma_llround((double)r->swapped * wt),
        };
        pb_t m = {buf, 0, sizeof(buf), false};
        /* location_id, packed, leaf first */
        pb_tag(&m, 1, WIRE_LEN);
        size_t depth = r->stack->depth, lsize = 0;
        for (size_t k = 0; k < depth; k++) {
            const prof_frame_t *fr = prof_frames_get(&w->frames, (uint64_t)(uintptr_t)r->stack->frames[k]);
            uint64_t id = fr != NULL ? fr->index + 1 : 0;
            do {
                lsize++;
                id >>= 7;
            } while (id != 0);
        }
        pb_varint(&m, lsize);
        for (size_t k = 0; k < depth; k++) {
            const prof_frame_t *fr = prof_frames_get(&w->frames, (uint64_t)(uintptr_t)r->stack->frames[k]);
            pb_varint(&m, fr != NULL ? fr->index + 1 : 0);
        }
        /* value, packed */
        pb_t vals = {vbuf, 0, sizeof(vbuf), false};
        for (int k = 0; k < 6; k++)
            pb_varint(&vals, (uint64_t)v[k]);
        pb_bytes(&m, 2, vals.p, vals.len);
        /* label bytes = usize */
        pb_t lab = {labuf, 0, sizeof(labuf), false};
        pb_int(&lab, 1, (uint64_t)bytes_key);
        pb_int(&lab, 3, sc_index2size(r->szind));
        pb_int(&lab, 4, (uint64_t)bytes_key);
        pb_msg(&m, 3, &lab);
        top_field(w, 2, &m);
    }
}

int prof_write_pprof(int fd, prof_snap_t *snap)
{
    pprof_w_t w;
    memset(&w, 0, sizeof(w));
    w.snap = snap;
    w.gz = prof_scratch_alloc(snap->sc, sizeof(gz_t));
    if (w.gz == NULL || !prof_frames_build(snap, &w.frames))
        return ENOMEM;
    /* Strings: names and files of frames, mapping paths and build ids,
     * and a few constants. */
    size_t want = 2 * (2 * w.frames.n + 2 * snap->maps.n + 64), slots = 64;
    while (slots < 2 * want)
        slots *= 2;
    w.str_mask = slots - 1;
    w.strs = prof_scratch_alloc(snap->sc, slots * sizeof(*w.strs));
    w.fid_cap = slots / 2 + 1;
    w.fid_of_str = prof_scratch_alloc(snap->sc, w.fid_cap * sizeof(uint32_t));
    w.mapping_of = prof_scratch_alloc(snap->sc, (snap->maps.n + 1) * sizeof(uint32_t));
    if (w.strs == NULL || w.fid_of_str == NULL || w.mapping_of == NULL)
        return ENOMEM;

    gz_start(w.gz, fd);
    str_index(&w, "", 0); /* string_table[0] */
    value_type(&w, 1, "alloc_objects", "count");
    value_type(&w, 1, "alloc_space", "bytes");
    value_type(&w, 1, "inuse_objects", "count");
    value_type(&w, 1, "inuse_space", "bytes");
    value_type(&w, 1, "resident_space", "bytes");
    value_type(&w, 1, "swapped_space", "bytes");
    write_mappings(&w);
    write_locations(&w);
    write_samples(&w);
    top_int(&w, 9, snap->time_ns);
    value_type(&w, 11, "space", "bytes");
    top_int(&w, 12, (uint64_t)1 << snap->lg_now);
    char c[160];
    ma_snprintf(c, sizeof(c), "myalloc %s heap profile, values unbiased from samples at R = %llu bytes",
                snap->peak ? "peak" : "live", (unsigned long long)((uint64_t)1 << snap->lg_now));
    top_int(&w, 13, (uint64_t)str_copy(&w, c));
    if (snap->peak) {
        ma_snprintf(c, sizeof(c), "peak: the live samples at the highest sampled live size, ~%llu bytes",
                    (unsigned long long)ma_load_relaxed(&prof_peak_bytes));
        top_int(&w, 13, (uint64_t)str_copy(&w, c));
    }
    top_int(&w, 14, (uint64_t)str_of(&w, "inuse_space"));
    if (w.overflow)
        return ENOMEM;
    if (!gz_finish(w.gz))
        return errno != 0 ? errno : EIO;
    return 0;
}
