/*
 * prof_unwind: the caching CFI unwinder, see prof_unwind.h.
 *
 * A frame is (ip, sp, bp): its return address, the stack pointer and rbp
 * as they are in that frame. Its rule, derived from the FDE covering ip - 1
 * by running the CFA program up to there, says
 *
 *     CFA = (rbp ? bp : sp) + cfa_off
 *     caller's ip = *(CFA + ra_off)
 *     caller's bp = rbp_saved ? *(CFA + rbp_off) : bp
 *     caller's sp = CFA
 *
 * or that the frame is the last one (its return address is undefined, as
 * in _start and clone3), or that libgcc must decide (give up). Rules are
 * cached by ip in a table of UW_CACHE_SIZE entries shared by all threads
 * (two-way set-associative: a set is one cache line, so that two hot
 * return addresses hashed together do not evict each other at every
 * sample), each with a sequence number: a writer makes it odd with a
 * compare-and-swap (another writer in the entry: it just does not cache),
 * writes, and makes it even again; a reader reads it, the entry, and it
 * again, and uses the entry only if both reads are equal and even.
 *
 * Objects come from _dl_find_object (glibc >= 2.35; lock-free), called
 * once per object per sample: a cached rule is used only if the object
 * holding ip still has its .eh_frame_hdr where the rule was derived from,
 * so a library unloaded and replaced keeps no stale rule (see the limits
 * in doc/internals.md). Without _dl_find_object, dl_iterate_phdr finds the
 * objects on misses, and rules carry the count of unloaded objects
 * (dlpi_subs, read once per sample) they were derived under.
 *
 * Stack reads stay in [sp at entry, top of the thread's stack), the top
 * being the thread descriptor for threads (glibc puts it above the stack)
 * and __libc_stack_end for the main thread, found without allocating (the
 * default unwinder never allocates inside a sample: see test_prof).
 */
#include "prof_unwind.h"

#include <string.h>

#include "../common/common.h"

bool prof_unwind_enabled = true;
uint64_t prof_unwind_nderived;
uint64_t prof_unwind_ngiveup;

static int uw_giveup(void)
{
    ma_fetch_add(&prof_unwind_ngiveup, 1);
    return -1;
}

#if defined(__x86_64__) && defined(__linux__)

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <sys/resource.h>

/* ---------------------------------------------------------------------
 * Rules and their cache.
 */

enum { UW_CFA_RBP = 1, UW_RBP_SAVED = 2, UW_END = 4, UW_GIVEUP = 8 };

typedef struct uw_rule {
    uint32_t flags;
    int32_t cfa_off;
    int32_t ra_off, rbp_off; /* int16 range: packed into the entry */
} uw_rule_t;

typedef struct uw_entry {
    uint32_t seq;   /* odd while being written */
    uint32_t flags;
    uintptr_t ip;   /* key (0: empty; no frame has ip 0) */
    uintptr_t tag;  /* the object's .eh_frame_hdr, or the unload count */
    uint64_t offs;  /* cfa_off | ra_off << 32 | rbp_off << 48 */
} uw_entry_t;

#define UW_CACHE_LG 12
#define UW_CACHE_SIZE (1u << UW_CACHE_LG)

static uw_entry_t uw_cache[UW_CACHE_SIZE] MA_ALIGNED(MA_CACHELINE);
static unsigned uw_cache_mask = UW_CACHE_SIZE - 1;

/* The two ways of ip's set (one cache line). */
static inline uw_entry_t *uw_set_of(uintptr_t ip)
{
    uint64_t h = ((uint64_t)ip * 0x9e3779b97f4a7c15ull) >> (64 - UW_CACHE_LG);
    return &uw_cache[h & uw_cache_mask & ~1u];
}

static inline bool uw_entry_get(uw_entry_t *e, uintptr_t ip, uintptr_t tag, uw_rule_t *r)
{
    uint32_t s = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
    if (s & 1)
        return false;
    uintptr_t key = __atomic_load_n(&e->ip, __ATOMIC_RELAXED);
    uintptr_t t = __atomic_load_n(&e->tag, __ATOMIC_RELAXED);
    uint32_t flags = __atomic_load_n(&e->flags, __ATOMIC_RELAXED);
    uint64_t offs = __atomic_load_n(&e->offs, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&e->seq, __ATOMIC_RELAXED) != s || key != ip || t != tag)
        return false;
    r->flags = flags;
    r->cfa_off = (int32_t)(uint32_t)offs;
    r->ra_off = (int16_t)(uint16_t)(offs >> 32);
    r->rbp_off = (int16_t)(uint16_t)(offs >> 48);
    return true;
}

static inline bool uw_cache_get(uintptr_t ip, uintptr_t tag, uw_rule_t *r)
{
    uw_entry_t *set = uw_set_of(ip);
    return uw_entry_get(&set[0], ip, tag, r) || uw_entry_get(&set[1], ip, tag, r);
}

static void uw_cache_put(uintptr_t ip, uintptr_t tag, const uw_rule_t *r)
{
    /* The way holding ip already, else an empty one, else each in turn
     * (the set's writes so far, mod 2). Racy reads: only a choice. */
    uw_entry_t *set = uw_set_of(ip);
    uintptr_t k0 = __atomic_load_n(&set[0].ip, __ATOMIC_RELAXED), k1 = __atomic_load_n(&set[1].ip, __ATOMIC_RELAXED);
    unsigned way;
    if (k0 == ip || k0 == 0)
        way = 0;
    else if (k1 == ip || k1 == 0)
        way = 1;
    else
        way = ((__atomic_load_n(&set[0].seq, __ATOMIC_RELAXED) + __atomic_load_n(&set[1].seq, __ATOMIC_RELAXED)) >> 1) & 1;
    uw_entry_t *e = &set[way];
    uint32_t s = __atomic_load_n(&e->seq, __ATOMIC_RELAXED);
    if ((s & 1) || !__atomic_compare_exchange_n(&e->seq, &s, s + 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return; /* another writer holds the entry: do not wait for it */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    uint64_t offs = (uint64_t)(uint32_t)r->cfa_off | (uint64_t)(uint16_t)r->ra_off << 32 |
                    (uint64_t)(uint16_t)r->rbp_off << 48;
    __atomic_store_n(&e->ip, ip, __ATOMIC_RELAXED);
    __atomic_store_n(&e->tag, tag, __ATOMIC_RELAXED);
    __atomic_store_n(&e->flags, r->flags, __ATOMIC_RELAXED);
    __atomic_store_n(&e->offs, offs, __ATOMIC_RELAXED);
    __atomic_store_n(&e->seq, s + 2, __ATOMIC_RELEASE);
}

/* ---------------------------------------------------------------------
 * Objects: where a pc's unwind information is.
 */

/* glibc's struct dl_find_object (2.35, x86-64), declared here so that the
 * library neither needs new headers nor links against GLIBC_2.35. */
typedef struct uw_dlfo {
    unsigned long long flags;
    void *map_start, *map_end;
    struct link_map *link_map;
    void *eh_frame;
    unsigned long long reserved[7];
} uw_dlfo_t;
typedef int uw_dlfo_fn(void *pc, uw_dlfo_t *result);

static uw_dlfo_fn *uw_dlfo;
static bool uw_use_phdr;
static bool uw_ready;
static uintptr_t uw_main_stack_max;

extern void *__libc_stack_end;

typedef struct uw_obj {
    uintptr_t lo, hi;         /* the object's mapping */
    uintptr_t hdr;            /* its .eh_frame_hdr (0: none) */
    uintptr_t base;           /* load bias */
    uintptr_t seg_lo, seg_hi; /* the readable segment holding hdr (hi 0: not yet known) */
} uw_obj_t;

#define UW_MEMO 4

/* One sample's walk: the objects seen so far (frames stay in a handful). */
typedef struct uw_walk {
    uw_obj_t obj[UW_MEMO];
    unsigned nobj, next;
    bool phdr;
    uintptr_t tag; /* phdr: 1 + dlpi_subs at the start of the sample */
} uw_walk_t;

typedef struct uw_phdr_arg {
    uintptr_t pc;
    uw_obj_t *o;
    bool found;
} uw_phdr_arg_t;

static int uw_phdr_find(struct dl_phdr_info *info, size_t size, void *p)
{
    (void)size;
    uw_phdr_arg_t *a = p;
    uintptr_t lo = UINTPTR_MAX, hi = 0, hdr = 0;
    bool in = false;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD) {
            uintptr_t s = info->dlpi_addr + ph->p_vaddr, e = s + ph->p_memsz;
            lo = MA_MIN(lo, s);
            hi = MA_MAX(hi, e);
            in |= a->pc >= s && a->pc < e;
        } else if (ph->p_type == PT_GNU_EH_FRAME) {
            hdr = info->dlpi_addr + ph->p_vaddr;
        }
    }
    if (!in)
        return 0;
    uw_obj_t *o = a->o;
    *o = (uw_obj_t){.lo = lo, .hi = hi, .hdr = hdr, .base = info->dlpi_addr};
    for (int i = 0; i < info->dlpi_phnum && hdr != 0; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t s = info->dlpi_addr + ph->p_vaddr, e = s + ph->p_memsz;
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_R) && hdr >= s && hdr < e) {
            o->seg_lo = s;
            o->seg_hi = e;
        }
    }
    a->found = true;
    return 1;
}

static int uw_phdr_subs(struct dl_phdr_info *info, size_t size, void *p)
{
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs))
        *(uintptr_t *)p = (uintptr_t)info->dlpi_subs + 1;
    return 1;
}

/* The object holding pc (memoized for the sample), or NULL. */
static uw_obj_t *uw_obj_find(uw_walk_t *w, uintptr_t pc)
{
    for (unsigned i = 0; i < w->nobj; i++)
        if (pc >= w->obj[i].lo && pc < w->obj[i].hi)
            return &w->obj[i];
    uw_obj_t *o = &w->obj[w->next];
    if (w->phdr) {
        uw_phdr_arg_t a = {pc, o, false};
        dl_iterate_phdr(uw_phdr_find, &a);
        if (!a.found)
            return NULL;
    } else {
        uw_dlfo_t d;
        if (uw_dlfo((void *)pc, &d) != 0)
            return NULL;
        *o = (uw_obj_t){.lo = (uintptr_t)d.map_start, .hi = (uintptr_t)d.map_end, .hdr = (uintptr_t)d.eh_frame,
                        .base = d.link_map != NULL ? d.link_map->l_addr : 0};
        if (!(pc >= o->lo && pc < o->hi))
            return NULL;
    }
    w->next = (w->next + 1) % UW_MEMO;
    if (w->nobj < UW_MEMO)
        w->nobj++;
    return o;
}

/* The readable segment holding the object's .eh_frame_hdr, from its program
 * headers (after the ELF header at the start of its first mapping): every
 * read of unwind information stays inside it. */
static bool uw_obj_segment(uw_obj_t *o)
{
    if (o->seg_hi != 0)
        return true;
    if (o->hdr == 0)
        return false;
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)o->lo;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_phentsize != sizeof(ElfW(Phdr)) || eh->e_phoff > 4096 ||
        eh->e_phoff + (uint64_t)eh->e_phnum * sizeof(ElfW(Phdr)) > 4096)
        return false;
    const ElfW(Phdr) *ph = (const ElfW(Phdr) *)(o->lo + eh->e_phoff);
    for (unsigned i = 0; i < eh->e_phnum; i++) {
        uintptr_t s = o->base + ph[i].p_vaddr, e = s + ph[i].p_memsz;
        if (ph[i].p_type == PT_LOAD && (ph[i].p_flags & PF_R) && o->hdr >= s && o->hdr < e && s >= o->lo &&
            e <= o->hi) {
            o->seg_lo = s;
            o->seg_hi = e;
            return true;
        }
    }
    return false;
}

/* ---------------------------------------------------------------------
 * Reading .eh_frame_hdr and .eh_frame, bounded by the segment.
 */

typedef struct uw_cur {
    const uint8_t *p, *end;
} uw_cur_t;

static bool rd_u8(uw_cur_t *c, uint8_t *v)
{
    if (c->p >= c->end)
        return false;
    *v = *c->p++;
    return true;
}

static bool rd_fixed(uw_cur_t *c, unsigned n, uint64_t *v)
{
    if ((size_t)(c->end - c->p) < n)
        return false;
    uint64_t x = 0;
    memcpy(&x, c->p, n); /* little-endian */
    c->p += n;
    *v = x;
    return true;
}

static bool rd_uleb(uw_cur_t *c, uint64_t *v)
{
    uint64_t x = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        uint8_t b;
        if (!rd_u8(c, &b))
            return false;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

static bool rd_sleb(uw_cur_t *c, int64_t *v)
{
    uint64_t x = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        uint8_t b;
        if (!rd_u8(c, &b))
            return false;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            if (shift + 7 < 64 && (b & 0x40))
                x |= ~(uint64_t)0 << (shift + 7);
            *v = (int64_t)x;
            return true;
        }
    }
    return false;
}

static bool rd_skip(uw_cur_t *c, uint64_t n)
{
    if ((uint64_t)(c->end - c->p) < n)
        return false;
    c->p += n;
    return true;
}

enum {
    PE_absptr = 0x00, PE_uleb128 = 0x01, PE_udata2 = 0x02, PE_udata4 = 0x03, PE_udata8 = 0x04,
    PE_sleb128 = 0x09, PE_sdata2 = 0x0a, PE_sdata4 = 0x0b, PE_sdata8 = 0x0c,
    PE_pcrel = 0x10, PE_datarel = 0x30, PE_indirect = 0x80, PE_omit = 0xff,
};

/* The value of a DW_EH_PE format (low four bits), before its application. */
static bool rd_format(uw_cur_t *c, uint8_t fmt, uint64_t *v)
{
    int64_t s;
    switch (fmt) {
    case PE_absptr:
    case PE_udata8:
    case PE_sdata8:
        return rd_fixed(c, 8, v);
    case PE_udata4:
        return rd_fixed(c, 4, v);
    case PE_udata2:
        return rd_fixed(c, 2, v);
    case PE_sdata4:
        if (!rd_fixed(c, 4, v))
            return false;
        *v = (uint64_t)(int64_t)(int32_t)(uint32_t)*v;
        return true;
    case PE_sdata2:
        if (!rd_fixed(c, 2, v))
            return false;
        *v = (uint64_t)(int64_t)(int16_t)(uint16_t)*v;
        return true;
    case PE_uleb128:
        return rd_uleb(c, v);
    case PE_sleb128:
        if (!rd_sleb(c, &s))
            return false;
        *v = (uint64_t)s;
        return true;
    default:
        return false;
    }
}

/* An encoded pointer: absolute, pc-relative (to the field) or, with dbase,
 * data-relative. Indirect pointers are only ever skipped (the personality
 * routine's): reading one through here gives up. */
static bool rd_ptr(uw_cur_t *c, uint8_t enc, uintptr_t dbase, uintptr_t *out)
{
    uintptr_t field = (uintptr_t)c->p;
    uint64_t v;
    if (enc == PE_omit || (enc & PE_indirect) || !rd_format(c, enc & 0x0f, &v))
        return false;
    switch (enc & 0x70) {
    case 0:
        break;
    case PE_pcrel:
        v += field;
        break;
    case PE_datarel:
        if (dbase == 0)
            return false;
        v += dbase;
        break;
    default:
        return false;
    }
    *out = (uintptr_t)v;
    return true;
}

static bool skip_ptr(uw_cur_t *c, uint8_t enc)
{
    uint64_t v;
    return enc != PE_omit && rd_format(c, enc & 0x0f, &v);
}

/* Bytes of a fixed-size pointer format (FDE addresses), 0 for others. */
static unsigned fixed_size(uint8_t enc)
{
    switch (enc & 0x0f) {
    case PE_absptr:
    case PE_udata8:
    case PE_sdata8:
        return 8;
    case PE_udata4:
    case PE_sdata4:
        return 4;
    case PE_udata2:
    case PE_sdata2:
        return 2;
    default:
        return 0;
    }
}

/* The FDE for pc from the binary search table of .eh_frame_hdr (NULL:
 * none, or a table this reader does not know). */
static const uint8_t *uw_hdr_search(const uw_obj_t *o, uintptr_t pc)
{
    uw_cur_t c = {(const uint8_t *)o->hdr, (const uint8_t *)o->seg_hi};
    uint8_t version, ptr_enc, count_enc, table_enc;
    uintptr_t count;
    if (!rd_u8(&c, &version) || !rd_u8(&c, &ptr_enc) || !rd_u8(&c, &count_enc) || !rd_u8(&c, &table_enc) ||
        version != 1 || !skip_ptr(&c, ptr_enc) || !rd_ptr(&c, count_enc, o->hdr, &count))
        return NULL;
    if (table_enc != (PE_datarel | PE_sdata4) || count == 0 || count > (uintptr_t)(c.end - c.p) / 8)
        return NULL;
    const uint8_t *table = c.p;
    int64_t rel = (int64_t)(pc - o->hdr);
    size_t lo = 0, hi = count; /* find the last entry with start <= pc */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        int32_t start;
        memcpy(&start, table + mid * 8, 4);
        if ((int64_t)start <= rel)
            lo = mid;
        else
            hi = mid;
    }
    int32_t start, fde;
    memcpy(&start, table + lo * 8, 4);
    memcpy(&fde, table + lo * 8 + 4, 4);
    if ((int64_t)start > rel)
        return NULL;
    return (const uint8_t *)(o->hdr + (intptr_t)fde);
}

/* ---------------------------------------------------------------------
 * The CFA program.
 */

/* DWARF registers (x86-64 psABI) the rules need: rbp, rsp, the return
 * address. Other registers' rules are parsed and ignored (nothing here
 * ever reads their values). */
#define UW_DW_RBP 6
#define UW_DW_RSP 7
#define UW_DW_RA 16

enum { COL_RBP, COL_RSP, COL_RA, NCOL };
enum { HOW_UNSAVED = 0, HOW_OFFSET, HOW_UNDEFINED, HOW_OTHER };

typedef struct uw_row {
    uint64_t cfa_reg;
    int64_t cfa_off;
    bool cfa_exp; /* the CFA is an expression */
    struct {
        uint8_t how;
        int64_t off;
    } col[NCOL];
} uw_row_t;

typedef struct uw_cie {
    uint64_t code_align;
    int64_t data_align;
    uint8_t fde_enc, lsda_enc;
    bool z;
} uw_cie_t;

#define UW_REMEMBER_MAX 8

static int uw_col(uint64_t reg)
{
    switch (reg) {
    case UW_DW_RBP:
        return COL_RBP;
    case UW_DW_RSP:
        return COL_RSP;
    case UW_DW_RA:
        return COL_RA;
    default:
        return -1;
    }
}

static void uw_set(uw_row_t *row, uint64_t reg, uint8_t how, int64_t off)
{
    int i = uw_col(reg);
    if (i >= 0) {
        row->col[i].how = how;
        row->col[i].off = off;
    }
}

/* DW_CFA_restore: libgcc makes the register "unsaved" where DWARF says
 * "as the CIE left it"; the two agree when the CIE leaves it unsaved, and
 * otherwise the rule is not followed. */
static void uw_restore(uw_row_t *row, const uw_row_t *init, uint64_t reg)
{
    int i = uw_col(reg);
    if (i < 0)
        return;
    row->col[i].how = init == NULL || init->col[i].how == HOW_UNSAVED ? HOW_UNSAVED : HOW_OTHER;
    row->col[i].off = 0;
}

/* Runs the instructions in c while the location is at most pc (libgcc's
 * "location < return address"). init: the row the CIE left (NULL while
 * running the CIE's own instructions). false: an instruction it cannot
 * parse or follow. */
static bool uw_exec(uw_cur_t c, const uw_cie_t *cie, uintptr_t *loc, uintptr_t pc, uw_row_t *row,
                    const uw_row_t *init)
{
    uw_row_t saved[UW_REMEMBER_MAX];
    unsigned nsaved = 0;
    while (c.p < c.end && *loc <= pc) {
        uint8_t op;
        uint64_t reg, u;
        int64_t s;
        uintptr_t a;
        if (!rd_u8(&c, &op))
            return false;
        switch (op >> 6) {
        case 1: /* DW_CFA_advance_loc */
            *loc += (op & 0x3f) * cie->code_align;
            continue;
        case 2: /* DW_CFA_offset */
            if (!rd_uleb(&c, &u))
                return false;
            uw_set(row, op & 0x3f, HOW_OFFSET, (int64_t)u * cie->data_align);
            continue;
        case 3: /* DW_CFA_restore */
            uw_restore(row, init, op & 0x3f);
            continue;
        }
        switch (op) {
        case 0x00: /* DW_CFA_nop */
            break;
        case 0x01: /* DW_CFA_set_loc */
            if (!rd_ptr(&c, cie->fde_enc, 0, &a))
                return false;
            *loc = a;
            break;
        case 0x02: /* DW_CFA_advance_loc1 */
        case 0x03: /* DW_CFA_advance_loc2 */
        case 0x04: /* DW_CFA_advance_loc4 */
            if (!rd_fixed(&c, op == 0x02 ? 1 : op == 0x03 ? 2 : 4, &u))
                return false;
            *loc += u * cie->code_align;
            break;
        case 0x05: /* DW_CFA_offset_extended */
            if (!rd_uleb(&c, &reg) || !rd_uleb(&c, &u))
                return false;
            uw_set(row, reg, HOW_OFFSET, (int64_t)u * cie->data_align);
            break;
        case 0x06: /* DW_CFA_restore_extended */
            if (!rd_uleb(&c, &reg))
                return false;
            uw_restore(row, init, reg);
            break;
        case 0x07: /* DW_CFA_undefined */
            if (!rd_uleb(&c, &reg))
                return false;
            uw_set(row, reg, HOW_UNDEFINED, 0);
            break;
        case 0x08: /* DW_CFA_same_value */
            if (!rd_uleb(&c, &reg))
                return false;
            uw_set(row, reg, HOW_UNSAVED, 0);
            break;
        case 0x09: /* DW_CFA_register */
            if (!rd_uleb(&c, &reg) || !rd_uleb(&c, &u))
                return false;
            uw_set(row, reg, HOW_OTHER, 0);
            break;
        case 0x0a: /* DW_CFA_remember_state (the CFA included, as libgcc does) */
            if (nsaved == UW_REMEMBER_MAX)
                return false;
            saved[nsaved++] = *row;
            break;
        case 0x0b: /* DW_CFA_restore_state */
            if (nsaved == 0)
                return false;
            *row = saved[--nsaved];
            break;
        case 0x0c: /* DW_CFA_def_cfa */
            if (!rd_uleb(&c, &reg) || !rd_uleb(&c, &u))
                return false;
            row->cfa_reg = reg;
            row->cfa_off = (int64_t)u;
            row->cfa_exp = false;
            break;
        case 0x0d: /* DW_CFA_def_cfa_register */
            if (!rd_uleb(&c, &reg))
                return false;
            row->cfa_reg = reg;
            row->cfa_exp = false;
            break;
        case 0x0e: /* DW_CFA_def_cfa_offset (how the CFA is computed stays) */
            if (!rd_uleb(&c, &u))
                return false;
            row->cfa_off = (int64_t)u;
            break;
        case 0x0f: /* DW_CFA_def_cfa_expression */
            if (!rd_uleb(&c, &u) || !rd_skip(&c, u))
                return false;
            row->cfa_exp = true;
            break;
        case 0x10: /* DW_CFA_expression */
        case 0x16: /* DW_CFA_val_expression */
            if (!rd_uleb(&c, &reg) || !rd_uleb(&c, &u) || !rd_skip(&c, u))
                return false;
            uw_set(row, reg, HOW_OTHER, 0);
            break;
        case 0x11: /* DW_CFA_offset_extended_sf */
            if (!rd_uleb(&c, &reg) || !rd_sleb(&c, &s))
                return false;
            uw_set(row, reg, HOW_OFFSET, s * cie->data_align);
            break;
        case 0x12: /* DW_CFA_def_cfa_sf */
            if (!rd_uleb(&c, &reg) || !rd_sleb(&c, &s))
                return false;
            row->cfa_reg = reg;
            row->cfa_off = s * cie->data_align;
            row->cfa_exp = false;
            break;
        case 0x13: /* DW_CFA_def_cfa_offset_sf */
            if (!rd_sleb(&c, &s))
                return false;
            row->cfa_off = s * cie->data_align;
            break;
        case 0x14: /* DW_CFA_val_offset */
            if (!rd_uleb(&c, &reg) || !rd_uleb(&c, &u))
                return false;
            uw_set(row, reg, HOW_OTHER, 0);
            break;
        case 0x15: /* DW_CFA_val_offset_sf */
            if (!rd_uleb(&c, &reg) || !rd_sleb(&c, &s))
                return false;
            uw_set(row, reg, HOW_OTHER, 0);
            break;
        case 0x2e: /* DW_CFA_GNU_args_size */
            if (!rd_uleb(&c, &u))
                return false;
            break;
        default: /* DW_CFA_GNU_window_save, _negative_offset_extended, unknown */
            return false;
        }
    }
    return true;
}

/* A CIE (at cie, inside c's bounds): its parameters, and its instructions
 * in *insn. */
static bool uw_parse_cie(const uint8_t *cie, const uint8_t *seg_lo, const uint8_t *seg_hi, uw_cie_t *out,
                         uw_cur_t *insn)
{
    if (cie < seg_lo || seg_hi - cie < 8)
        return false;
    uw_cur_t c = {cie, seg_hi};
    uint64_t len, id, u;
    uint8_t version;
    if (!rd_fixed(&c, 4, &len) || len == 0 || len == 0xffffffffu || len > (uint64_t)(seg_hi - c.p))
        return false;
    c.end = c.p + len;
    if (!rd_fixed(&c, 4, &id) || id != 0 || !rd_u8(&c, &version) || (version != 1 && version != 3 && version != 4))
        return false;
    const char *aug = (const char *)c.p;
    size_t auglen = strnlen(aug, (size_t)(c.end - c.p));
    if (!rd_skip(&c, auglen + 1))
        return false;
    if (version == 4) {
        uint8_t addr_size, seg_size;
        if (!rd_u8(&c, &addr_size) || !rd_u8(&c, &seg_size) || addr_size != 8 || seg_size != 0)
            return false;
    }
    *out = (uw_cie_t){.fde_enc = PE_absptr, .lsda_enc = PE_omit};
    if (!rd_uleb(&c, &out->code_align) || !rd_sleb(&c, &out->data_align))
        return false;
    uint64_t ra;
    if (version == 1) {
        uint8_t b;
        if (!rd_u8(&c, &b))
            return false;
        ra = b;
    } else if (!rd_uleb(&c, &ra)) {
        return false;
    }
    if (ra != UW_DW_RA)
        return false;
    const uint8_t *after_aug = NULL;
    size_t i = 0;
    if (auglen > 0) {
        if (aug[0] != 'z') /* "eh" and other pre-'z' forms */
            return false;
        out->z = true;
        if (!rd_uleb(&c, &u) || u > (uint64_t)(c.end - c.p))
            return false;
        after_aug = c.p + u;
        i = 1;
    }
    for (; i < auglen; i++) {
        uint8_t enc;
        switch (aug[i]) {
        case 'L':
            if (!rd_u8(&c, &out->lsda_enc))
                return false;
            break;
        case 'R':
            if (!rd_u8(&c, &out->fde_enc))
                return false;
            break;
        case 'P':
            if (!rd_u8(&c, &enc) || !skip_ptr(&c, enc))
                return false;
            break;
        default: /* 'S' (signal frame), 'B', 'G', unknown */
            return false;
        }
    }
    if (after_aug != NULL) {
        if (c.p > after_aug)
            return false;
        c.p = after_aug;
    }
    *insn = c;
    return true;
}

/* The rule for the frame whose pc (return address - 1) is in object o. */
static void uw_derive(uw_obj_t *o, uintptr_t pc, uw_rule_t *r)
{
    *r = (uw_rule_t){.flags = UW_GIVEUP};
    if (!uw_obj_segment(o))
        return;
    const uint8_t *seg_lo = (const uint8_t *)o->seg_lo, *seg_hi = (const uint8_t *)o->seg_hi;
    const uint8_t *fde = uw_hdr_search(o, pc);
    if (fde == NULL || fde < seg_lo || seg_hi - fde < 8)
        return;
    uw_cur_t c = {fde, seg_hi};
    uint64_t len, delta;
    if (!rd_fixed(&c, 4, &len) || len == 0 || len == 0xffffffffu || len > (uint64_t)(seg_hi - c.p))
        return;
    c.end = c.p + len;
    const uint8_t *id_at = c.p;
    if (!rd_fixed(&c, 4, &delta) || delta == 0 || delta > (uint64_t)(id_at - seg_lo))
        return;
    uw_cie_t cie;
    uw_cur_t cie_insn;
    if (!uw_parse_cie(id_at - delta, seg_lo, seg_hi, &cie, &cie_insn))
        return;
    unsigned psize = fixed_size(cie.fde_enc);
    uintptr_t begin;
    uint64_t range;
    if (psize == 0 || !rd_ptr(&c, cie.fde_enc, 0, &begin) || !rd_format(&c, cie.fde_enc & 0x0f, &range))
        return;
    if (psize < 8)
        range &= ((uint64_t)1 << (psize * 8)) - 1;
    if (pc < begin || pc - begin >= range)
        return; /* no FDE covers pc */
    if (cie.z) {
        uint64_t auglen;
        if (!rd_uleb(&c, &auglen) || !rd_skip(&c, auglen))
            return;
    } else if (cie.lsda_enc != PE_omit) {
        return;
    }

    uw_row_t row = {0}, init;
    uintptr_t loc = begin;
    if (!uw_exec(cie_insn, &cie, &loc, pc, &row, NULL))
        return;
    init = row;
    if (!uw_exec(c, &cie, &loc, pc, &row, &init))
        return;

    if (row.col[COL_RA].how == HOW_UNDEFINED) {
        r->flags = UW_END; /* the outermost frame */
        return;
    }
    if (row.cfa_exp || (row.cfa_reg != UW_DW_RSP && row.cfa_reg != UW_DW_RBP) || row.cfa_off != (int32_t)row.cfa_off)
        return;
    if (row.col[COL_RSP].how != HOW_UNSAVED)
        return;
    if (row.col[COL_RA].how != HOW_OFFSET || row.col[COL_RA].off != (int16_t)row.col[COL_RA].off)
        return;
    uint32_t flags = row.cfa_reg == UW_DW_RBP ? UW_CFA_RBP : 0;
    int32_t rbp_off = 0;
    if (row.col[COL_RBP].how == HOW_OFFSET) {
        if (row.col[COL_RBP].off != (int16_t)row.col[COL_RBP].off)
            return;
        flags |= UW_RBP_SAVED;
        rbp_off = (int32_t)row.col[COL_RBP].off;
    } else if (row.col[COL_RBP].how != HOW_UNSAVED) {
        return;
    }
    *r = (uw_rule_t){.flags = flags, .cfa_off = (int32_t)row.cfa_off, .ra_off = (int32_t)row.col[COL_RA].off,
                     .rbp_off = rbp_off};
}

/* ---------------------------------------------------------------------
 * The walk.
 */

/* The rule for the frame whose return address is ip; false: give up. */
static inline bool uw_rule_for(uw_walk_t *w, uintptr_t ip, uw_rule_t *r)
{
    uintptr_t pc = ip - 1;
    uw_obj_t *o = NULL;
    uintptr_t tag = w->tag;
    if (!w->phdr) {
        if ((o = uw_obj_find(w, pc)) == NULL)
            return false;
        tag = o->hdr;
    }
    if (!uw_cache_get(ip, tag, r)) {
        if (o == NULL && (o = uw_obj_find(w, pc)) == NULL)
            return false;
        uw_derive(o, pc, r);
        ma_fetch_add(&prof_unwind_nderived, 1);
        uw_cache_put(ip, tag, r);
    }
    return !(r->flags & UW_GIVEUP);
}

/* The top of the calling thread's stack, for a frame at sp: everything in
 * [sp, top) is that stack (0: sp is on no stack it knows, e.g. a signal
 * stack or a coroutine's far from the thread's). glibc places a thread's
 * descriptor (pthread_self) just above its stack and static TLS, in the
 * same mapping; the main thread's descriptor is elsewhere, and its stack
 * ends at __libc_stack_end (the stack pointer the process started with),
 * within RLIMIT_STACK. */
#define UW_THREAD_STACK_MAX ((uintptr_t)1 << 30)

static inline uintptr_t uw_stack_top(uintptr_t sp)
{
    uintptr_t self = (uintptr_t)pthread_self();
    if (sp < self && self - sp <= UW_THREAD_STACK_MAX)
        return self;
    uintptr_t end = (uintptr_t)__libc_stack_end;
    if (sp < end && end - sp <= uw_main_stack_max)
        return end;
    return 0;
}

typedef struct uw_regs {
    uintptr_t ip, sp, bp;
} uw_regs_t;

/* prof_uw_capture(r): the caller's registers as they are once it returns:
 * its return address, its stack pointer after the return, its rbp. An
 * assembly function (never inlined; the compiler sees an ordinary call). */
MA_HIDDEN void prof_uw_capture(uw_regs_t *r);
__asm__(".pushsection .text\n"
        ".globl prof_uw_capture\n"
        ".hidden prof_uw_capture\n"
        ".type prof_uw_capture, @function\n"
        ".p2align 4\n"
        "prof_uw_capture:\n"
        ".cfi_startproc\n"
        "movq (%rsp), %rax\n"
        "movq %rax, 0(%rdi)\n"
        "leaq 8(%rsp), %rax\n"
        "movq %rax, 8(%rdi)\n"
        "movq %rbp, 16(%rdi)\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size prof_uw_capture, .-prof_uw_capture\n"
        ".popsection\n");

static inline bool uw_read(uintptr_t at, uintptr_t lo, uintptr_t hi, uintptr_t *v)
{
    if (at < lo || at > hi - sizeof(uintptr_t))
        return false;
    memcpy(v, (const void *)at, sizeof(*v));
    return true;
}

__attribute__((noinline, no_sanitize_address)) int prof_unwind(void **buf, int cap)
{
    if (!ma_load_acquire(&uw_ready))
        return uw_giveup();
    uw_regs_t regs;
    prof_uw_capture(&regs);
    uintptr_t ip = regs.ip, sp = regs.sp, bp = regs.bp;
    uintptr_t lo = sp, hi = uw_stack_top(sp);
    if (hi == 0 || hi - lo < sizeof(uintptr_t))
        return uw_giveup();
    uw_walk_t w;
    w.nobj = w.next = 0;
    w.phdr = ma_load_relaxed(&uw_use_phdr);
    w.tag = 0;
    if (w.phdr) {
        dl_iterate_phdr(uw_phdr_subs, &w.tag);
        if (w.tag == 0)
            return uw_giveup();
    }
    int n = 0;
    while (n < cap) {
        buf[n++] = (void *)ip;
        uw_rule_t r;
        if (!uw_rule_for(&w, ip, &r))
            return uw_giveup();
        if (r.flags & UW_END)
            break;
        uintptr_t cfa = ((r.flags & UW_CFA_RBP) ? bp : sp) + (uintptr_t)(intptr_t)r.cfa_off;
        uintptr_t ra;
        if (cfa <= sp || cfa > hi || !uw_read(cfa + (uintptr_t)(intptr_t)r.ra_off, lo, hi, &ra))
            return uw_giveup();
        if ((r.flags & UW_RBP_SAVED) && !uw_read(cfa + (uintptr_t)(intptr_t)r.rbp_off, lo, hi, &bp))
            return uw_giveup();
        sp = cfa;
        if (ra == 0)
            break;
        ip = ra;
    }
    return n;
}

void prof_unwind_boot(void)
{
    if (ma_load_acquire(&uw_ready))
        return;
    struct rlimit rl;
    uintptr_t max = (uintptr_t)1 << 30;
    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < max)
        max = (uintptr_t)rl.rlim_cur;
    uw_main_stack_max = max;
    uw_dlfo = (uw_dlfo_fn *)dlsym(RTLD_DEFAULT, "_dl_find_object");
    uw_use_phdr = uw_dlfo == NULL;
    ma_store_release(&uw_ready, true);
}

void prof_unwind_postfork_child(void)
{
    /* An entry a thread of the parent was writing stays odd: empty it. */
    for (unsigned i = 0; i < UW_CACHE_SIZE; i++) {
        uw_entry_t *e = &uw_cache[i];
        if (e->seq & 1) {
            e->ip = 0;
            e->seq++;
        }
    }
}

void prof_unwind_test_config(unsigned mask, bool phdr)
{
    prof_unwind_boot();
    memset(uw_cache, 0, sizeof(uw_cache));
    uw_cache_mask = mask <= 1 || mask >= UW_CACHE_SIZE ? UW_CACHE_SIZE - 1 : mask;
    uw_use_phdr = phdr || uw_dlfo == NULL;
}

#else /* not x86-64 Linux: libgcc does it all */

void prof_unwind_boot(void)
{
}

int prof_unwind(void **buf, int cap)
{
    (void)buf;
    (void)cap;
    return uw_giveup();
}

void prof_unwind_postfork_child(void)
{
}

void prof_unwind_test_config(unsigned mask, bool phdr)
{
    (void)mask;
    (void)phdr;
}

#endif
