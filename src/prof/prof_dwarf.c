/*
 * prof_dwarf: DWARF line tables, see prof_dwarf.h.
 *
 * A line program (DWARF 2-5, section 6.2 of the DWARF 5 standard) is a
 * header (with the directory and file tables) and a byte code whose state
 * machine emits rows (address, file, line); a row covers the addresses up
 * to the next row's, and end_sequence closes a run of rows. Sequences
 * starting at address 0 are functions the linker dropped (their rows would
 * cover real addresses of a PIE): skipped.
 */
#include "prof_dwarf.h"

#include <string.h>

#include "../arena/pages.h"
#include "prof_scratch.h"

struct prof_dwarf_unit {
    uint64_t lo, hi; /* the rows' addresses span [lo, hi) */
    uint64_t off;    /* the unit's offset in .debug_line */
};

/* Bounds-checked little-endian reads; a bad read sets bad and returns 0. */
typedef struct rd {
    const unsigned char *p, *end;
    bool bad;
} rd_t;

static uint64_t rd_n(rd_t *r, unsigned n)
{
    if (n > 8 || (size_t)(r->end - r->p) < n) {
        r->bad = true;
        r->p = r->end;
        return 0;
    }
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += n;
    return v;
}

static uint64_t rd_uleb(rd_t *r)
{
    uint64_t v = 0;
    for (unsigned shift = 0; r->p < r->end; shift += 7) {
        unsigned char b = *r->p++;
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    r->bad = true;
    return 0;
}

static int64_t rd_sleb(rd_t *r)
{
    int64_t v = 0;
    unsigned shift = 0;
    while (r->p < r->end) {
        unsigned char b = *r->p++;
        if (shift < 64)
            v |= (int64_t)((uint64_t)(b & 0x7f) << shift);
        shift += 7;
        if (!(b & 0x80)) {
            if (shift < 64 && (b & 0x40))
                v |= -((int64_t)1 << shift);
            return v;
        }
    }
    r->bad = true;
    return 0;
}

static const char *rd_cstr(rd_t *r)
{
    const unsigned char *nul = r->p < r->end ? memchr(r->p, '\0', (size_t)(r->end - r->p)) : NULL;
    if (nul == NULL) {
        r->bad = true;
        r->p = r->end;
        return NULL;
    }
    const char *s = (const char *)r->p;
    r->p = nul + 1;
    return s;
}

static const char *sec_str(const unsigned char *sec, size_t size, uint64_t off)
{
    if (sec == NULL || off >= size || memchr(sec + off, '\0', size - off) == NULL)
        return NULL;
    return (const char *)sec + off;
}

/* A unit's header. */
typedef struct lh {
    unsigned version, addr_size, offset_size;
    unsigned min_inst, line_range, opcode_base;
    int line_base;
    const unsigned char *std_lengths;
    const unsigned char *tables; /* directories, then files */
    const unsigned char *prog, *end;
} lh_t;

/* Parse the header at off; returns the next unit's offset (0 when this
 * one is unusable and nothing follows). */
static uint64_t header(const prof_dwarf_t *d, uint64_t off, lh_t *h, bool *ok)
{
    *ok = false;
    memset(h, 0, sizeof(*h));
    rd_t r = {d->line + off, d->line + d->line_size, false};
    uint64_t len = rd_n(&r, 4);
    h->offset_size = 4;
    if (len == 0xffffffffu) {
        len = rd_n(&r, 8);
        h->offset_size = 8;
    }
    if (r.bad || len > (uint64_t)(r.end - r.p) || len < 2)
        return 0;
    const unsigned char *unit_end = r.p + len;
    uint64_t next = (uint64_t)(unit_end - d->line);
    r.end = unit_end;
    h->version = (unsigned)rd_n(&r, 2);
    if (h->version < 2 || h->version > 5)
        return next;
    h->addr_size = 8;
    if (h->version >= 5) {
        h->addr_size = (unsigned)rd_n(&r, 1);
        rd_n(&r, 1); /* segment selector size */
    }
    uint64_t hlen = rd_n(&r, h->offset_size);
    if (r.bad || hlen > (uint64_t)(r.end - r.p))
        return next;
    h->prog = r.p + hlen;
    h->end = unit_end;
    h->min_inst = (unsigned)rd_n(&r, 1);
    if (h->version >= 4)
        rd_n(&r, 1); /* maximum operations per instruction (VLIW only) */
    rd_n(&r, 1);     /* default_is_stmt */
    h->line_base = (int)(signed char)rd_n(&r, 1);
    h->line_range = (unsigned)rd_n(&r, 1);
    h->opcode_base = (unsigned)rd_n(&r, 1);
    if (r.bad || h->line_range == 0 || h->opcode_base == 0 || (uint64_t)(h->prog - r.p) < h->opcode_base - 1u)
        return next;
    h->std_lengths = r.p;
    h->tables = r.p + h->opcode_base - 1;
    *ok = true;
    return next;
}

enum {
    DW_FORM_block = 0x09, DW_FORM_data1 = 0x0b, DW_FORM_data2 = 0x05, DW_FORM_data4 = 0x06, DW_FORM_data8 = 0x07,
    DW_FORM_data16 = 0x1e, DW_FORM_string = 0x08, DW_FORM_strp = 0x0e, DW_FORM_line_strp = 0x1f,
    DW_FORM_udata = 0x0f, DW_FORM_sdata = 0x0d,
};
enum { DW_LNCT_path = 1, DW_LNCT_directory_index = 2 };

/* One DWARF 5 attribute value: a string, or a number. */
static bool v5_value(const prof_dwarf_t *d, const lh_t *h, rd_t *r, uint64_t form, const char **s, uint64_t *n)
{
    *s = NULL;
    *n = 0;
    switch (form) {
    case DW_FORM_string:
        *s = rd_cstr(r);
        break;
    case DW_FORM_line_strp:
        *s = sec_str(d->line_str, d->line_str_size, rd_n(r, h->offset_size));
        break;
    case DW_FORM_strp:
        *s = sec_str(d->str, d->str_size, rd_n(r, h->offset_size));
        break;
    case DW_FORM_udata:
        *n = rd_uleb(r);
        break;
    case DW_FORM_sdata:
        *n = (uint64_t)rd_sleb(r);
        break;
    case DW_FORM_data1:
        *n = rd_n(r, 1);
        break;
    case DW_FORM_data2:
        *n = rd_n(r, 2);
        break;
    case DW_FORM_data4:
        *n = rd_n(r, 4);
        break;
    case DW_FORM_data8:
        *n = rd_n(r, 8);
        break;
    case DW_FORM_data16:
        rd_n(r, 8);
        rd_n(r, 8);
        break;
    case DW_FORM_block: {
        uint64_t len = rd_uleb(r);
        if (len > (uint64_t)(r->end - r->p))
            return false;
        r->p += len;
        break;
    }
    default:
        return false; /* strx and friends: not in line tables we read */
    }
    return !r->bad;
}

/* Entry idx of a DWARF 5 table at r (advanced past the table): its path
 * and directory index. */
static bool v5_entry(const prof_dwarf_t *d, const lh_t *h, rd_t *r, uint64_t idx, const char **path, uint64_t *dir)
{
    uint64_t fmt[16][2];
    unsigned nfmt = (unsigned)rd_n(r, 1);
    if (nfmt > 16)
        return false;
    for (unsigned i = 0; i < nfmt; i++) {
        fmt[i][0] = rd_uleb(r);
        fmt[i][1] = rd_uleb(r);
    }
    uint64_t count = rd_uleb(r);
    bool found = false;
    for (uint64_t e = 0; e < count && !r->bad; e++) {
        for (unsigned i = 0; i < nfmt; i++) {
            const char *s;
            uint64_t n;
            if (!v5_value(d, h, r, fmt[i][1], &s, &n))
                return false;
            if (e == idx && fmt[i][0] == DW_LNCT_path)
                *path = s;
            if (e == idx && fmt[i][0] == DW_LNCT_directory_index)
                *dir = n;
        }
        found |= e == idx;
    }
    return found && !r->bad;
}

/* File number file of the unit: its directory (NULL if unknown) and name. */
static bool file_name(const prof_dwarf_t *d, const lh_t *h, uint64_t file, const char **dir, const char **name)
{
    rd_t r = {h->tables, h->prog, false};
    *dir = *name = NULL;
    if (h->version >= 5) {
        /* Directories then files, 0-based; directory 0 is the
         * compilation directory. Skip the first table to reach the files. */
        rd_t dirs = r, files = r;
        const char *unused = NULL;
        uint64_t u = 0, di = 0;
        v5_entry(d, h, &files, UINT64_MAX, &unused, &u);
        if (files.bad || !v5_entry(d, h, &files, file, name, &di) || *name == NULL)
            return false;
        if (!v5_entry(d, h, &dirs, di, dir, &u))
            *dir = NULL;
        return true;
    }
    /* DWARF 2-4: directories 1.. (0 is the compilation directory, not
     * listed), then files 1.. with (name, dir, mtime, length). */
    const unsigned char *dir_table = r.p;
    while (!r.bad) {
        const char *s = rd_cstr(&r);
        if (s == NULL || *s == '\0')
            break;
    }
    for (uint64_t i = 1; !r.bad; i++) {
        const char *s = rd_cstr(&r);
        if (s == NULL || *s == '\0')
            return false;
        uint64_t di = rd_uleb(&r);
        rd_uleb(&r);
        rd_uleb(&r);
        if (i == file) {
            *name = s;
            if (di > 0) {
                rd_t dr = {dir_table, h->prog, false};
                for (uint64_t k = 1; k <= di; k++) {
                    const char *x = rd_cstr(&dr);
                    if (x == NULL || *x == '\0')
                        break;
                    if (k == di)
                        *dir = x;
                }
            }
            return true;
        }
    }
    return false;
}

/* Run a unit's program. With find, stop at the row covering target and
 * return its file and line; otherwise compute the span of its rows. */
static bool run(const lh_t *h, bool find, uint64_t target, uint64_t *lo, uint64_t *hi, uint64_t *file,
                uint64_t *line)
{
    rd_t r = {h->prog, h->end, false};
    uint64_t addr = 0, f = 1, seq_start = 0;
    int64_t l = 1;
    bool in_seq = false, have_prev = false;
    uint64_t prev_addr = 0, prev_file = 0;
    int64_t prev_line = 0;
    if (!find) {
        *lo = UINT64_MAX;
        *hi = 0;
    }
    while (r.p < r.end && !r.bad) {
        unsigned op = (unsigned)rd_n(&r, 1);
        bool emit = false, end_seq = false;
        if (op >= h->opcode_base) {
            unsigned adj = op - h->opcode_base;
            addr += (uint64_t)(adj / h->line_range) * h->min_inst;
            l += h->line_base + (int)(adj % h->line_range);
            emit = true;
        } else {
            switch (op) {
            case 0: {
                uint64_t len = rd_uleb(&r);
                if (len == 0 || len > (uint64_t)(r.end - r.p)) {
                    r.bad = true;
                    break;
                }
                const unsigned char *next = r.p + len;
                unsigned sub = (unsigned)rd_n(&r, 1);
                if (sub == 1)
                    emit = end_seq = true;
                else if (sub == 2)
                    addr = rd_n(&r, (unsigned)MA_MIN(len - 1, 8u));
                r.p = next;
                break;
            }
            case 1:
                emit = true;
                break;
            case 2:
                addr += rd_uleb(&r) * h->min_inst;
                break;
            case 3:
                l += rd_sleb(&r);
                break;
            case 4:
                f = rd_uleb(&r);
                break;
            case 5:
            case 12:
                rd_uleb(&r);
                break;
            case 8:
                addr += (uint64_t)((255 - h->opcode_base) / h->line_range) * h->min_inst;
                break;
            case 9:
                addr += rd_n(&r, 2);
                break;
            case 6:
            case 7:
            case 10:
            case 11:
                break;
            default:
                for (unsigned i = 0; i < h->std_lengths[op - 1]; i++)
                    rd_uleb(&r);
                break;
            }
        }
        if (!emit)
            continue;
        if (!in_seq) {
            in_seq = true;
            seq_start = addr;
        }
        bool live = seq_start != 0; /* not a dropped function */
        if (live) {
            if (find) {
                if (have_prev && prev_addr <= target && target < addr) {
                    *file = prev_file;
                    *line = prev_line > 0 ? (uint64_t)prev_line : 0;
                    return true;
                }
            } else {
                *lo = MA_MIN(*lo, addr);
                *hi = MA_MAX(*hi, addr);
            }
        }
        if (end_seq) {
            addr = 0;
            f = 1;
            l = 1;
            in_seq = have_prev = false;
        } else if (live) {
            prev_addr = addr;
            prev_file = f;
            prev_line = l;
            have_prev = true;
        }
    }
    return !find && *lo < *hi;
}

static int unit_cmp(const void *a, const void *b, void *ctx)
{
    (void)ctx;
    uint64_t x = ((const prof_dwarf_unit_t *)a)->lo, y = ((const prof_dwarf_unit_t *)b)->lo;
    return x < y ? -1 : x > y;
}

bool prof_dwarf_init(prof_dwarf_t *d)
{
    if (d->line == NULL || d->line_size == 0)
        return false;
    size_t n = 0;
    bool ok;
    lh_t h;
    for (uint64_t off = 0; off < d->line_size;) {
        uint64_t next = header(d, off, &h, &ok);
        if (next <= off)
            break;
        n += ok;
        off = next;
    }
    if (n == 0)
        return false;
    d->units_bytes = PAGE_CEIL(n * sizeof(prof_dwarf_unit_t));
    d->units = pages_map(d->units_bytes, PAGE);
    if (d->units == NULL)
        return false;
    for (uint64_t off = 0; off < d->line_size && d->nunits < n;) {
        uint64_t next = header(d, off, &h, &ok);
        if (next <= off)
            break;
        uint64_t lo, hi;
        if (ok && run(&h, false, 0, &lo, &hi, NULL, NULL))
            d->units[d->nunits++] = (prof_dwarf_unit_t){lo, hi, off};
        off = next;
    }
    prof_sort(d->units, d->nunits, sizeof(prof_dwarf_unit_t), unit_cmp, NULL);
    return d->nunits > 0;
}

bool prof_dwarf_line(const prof_dwarf_t *d, uint64_t vaddr, const char **dir, const char **file, unsigned *line)
{
    for (size_t i = 0; i < d->nunits && d->units[i].lo <= vaddr; i++) {
        const prof_dwarf_unit_t *u = &d->units[i];
        if (vaddr >= u->hi)
            continue;
        lh_t h;
        bool ok;
        header(d, u->off, &h, &ok);
        uint64_t f, l;
        if (ok && run(&h, true, vaddr, NULL, NULL, &f, &l) && file_name(d, &h, f, dir, file)) {
            *line = (unsigned)MA_MIN(l, (uint64_t)UINT32_MAX);
            return true;
        }
    }
    return false;
}
