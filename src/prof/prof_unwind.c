/*
 * prof_unwind: the caching DWARF CFI unwinder, see prof_unwind.h.
 *
 * A frame is (ip, sp, bp): its return address into the function it is in,
 * and rsp and rbp as they were at that call. The rule of a frame, derived
 * once from the FDE covering ip - 1 (the call instruction), says
 *
 *     CFA          = (rbp-based ? bp : sp) + cfa_off
 *     caller's ip  = *(CFA - 8)
 *     caller's bp  = rbp saved ? *(CFA + rbp_off) : bp
 *     caller's sp  = CFA
 *
 * or that the frame is the outermost (its return address is undefined:
 * _start, clone3), or that libgcc must do this stack (give up). Rules are
 * packed into one word and cached in a 4-way set-associative table shared
 * by all threads. Each entry has a sequence number: a writer makes it odd
 * with a compare-and-swap (an entry another writer holds is simply not
 * cached), writes, and makes it even again; a reader reads the number,
 * the entry, and the number again, and uses the entry only if both reads
 * agree and are even. Readers never write: the hit path is loads only.
 *
 * Libraries come and go: each entry carries the loader's generation
 * (dlpi_adds + dlpi_subs, both only ever grow) it was derived under, and
 * an entry from another generation is a miss, so a library mapped where an
 * unloaded one was gets rules of its own. Reading the generation is a
 * dl_iterate_phdr call (the loader's lock, ~150 instructions: a third of
 * a warm walk), so a walk reads it only when it meets a rule that needs
 * it: rules of the objects loaded at startup (the program, its libraries,
 * LD_PRELOAD; listed first in the loader's list, counted when the
 * allocator initialises, before anything could have been dlopen'd: dlopen
 * allocates) are marked permanent, since glibc never unloads those, and
 * hold in every generation. Rules
 * are derived inside dl_iterate_phdr's callback, i.e. under the loader's
 * lock: the .eh_frame being read cannot be unmapped meanwhile. A hit reads
 * no unwind table at all, only the stack. A thread's walk that starts where
 * its last one did replays that one's steps (see "The replay").
 *
 * Stack reads stay within [sp at entry, top of the thread's stack). The
 * bounds are those of the mapping holding the stack, read once per thread
 * from /proc/self/maps with plain system calls (pthread_getattr_np would
 * allocate, and the default unwinder never allocates inside a sample: see
 * test_prof). A thread keeps the bounds of the last two stacks it was
 * seen on (its own, a coroutine's, a signal's alternate stack) and looks
 * up new ones at most PU_SCANS_MAX times; stacks beyond that go to libgcc.
 */
#include "prof_unwind.h"

#include "../common/common.h"
#include "../common/mutex.h"

static uint64_t pu_nderived, pu_ngiveup, pu_nscans, pu_ngen_reads;
/* Per thread: counted on every sample, where an atomic add costs as much
 * as a frame of the walk. */
static __thread uint64_t pu_nfrom __attribute__((tls_model("initial-exec")));
static __thread uint64_t pu_nreplayed __attribute__((tls_model("initial-exec")));

void prof_unwind_stats_get(prof_unwind_stats_t *out)
{
    out->derived = ma_load_relaxed(&pu_nderived);
    out->giveups = ma_load_relaxed(&pu_ngiveup);
    out->scans = ma_load_relaxed(&pu_nscans);
    out->from_frame = pu_nfrom;
    out->gen_reads = ma_load_relaxed(&pu_ngen_reads);
    out->replayed = pu_nreplayed;
}

/*
 * Walks and fork. Unwinding calls dl_iterate_phdr (ours for the loader's
 * generation and new rules; libgcc's on a glibc without _dl_find_object),
 * which holds the loader's lock, and glibc's fork does not take that lock:
 * a fork while another thread was in it left it held in the child, whose
 * first sample then waited for it forever. So whoever may enter the loader
 * counts itself in, and the fork handler waits until nobody is in,
 * holding newcomers back until the fork is done. (Dekker: each side writes
 * its word with a full barrier, then reads the other's.) A warm walk of
 * ours never enters: it costs no atomic operation.
 */
static uint32_t pu_in_loader; /* callers between enter and leave */
static uint32_t pu_forking;   /* a fork is being prepared */

void prof_unwind_loader_enter(void)
{
    for (;;) {
        while (__atomic_load_n(&pu_forking, __ATOMIC_SEQ_CST))
            ma_cpu_pause();
        __atomic_fetch_add(&pu_in_loader, 1, __ATOMIC_SEQ_CST);
        if (!__atomic_load_n(&pu_forking, __ATOMIC_SEQ_CST))
            return;
        __atomic_fetch_sub(&pu_in_loader, 1, __ATOMIC_SEQ_CST);
    }
}

void prof_unwind_loader_leave(void) { __atomic_fetch_sub(&pu_in_loader, 1, __ATOMIC_RELEASE); }

void prof_unwind_prefork(void)
{
    __atomic_store_n(&pu_forking, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&pu_in_loader, __ATOMIC_SEQ_CST) != 0)
        ma_cpu_pause();
}

void prof_unwind_postfork_parent(void) { __atomic_store_n(&pu_forking, 0, __ATOMIC_RELEASE); }

static void pu_cache_postfork_child(void);

void prof_unwind_postfork_child(void)
{
    pu_in_loader = 0;
    pu_forking = 0;
    pu_cache_postfork_child();
}

#if defined(__x86_64__) && defined(__linux__)

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stddef.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../common/sys.h"

/* ---------------------------------------------------------------------
 * Rules, packed into a word (0: none).
 *   bits 0-2    kind (enum prof_unwind_kind)
 *   bit 3       rbp saved
 *   bit 4       permanent: of an object loaded at startup (valid in every
 *               loader generation)
 *   bits 16-31  saved rbp's offset from the CFA (int16)
 *   bits 32-63  CFA offset from rsp or rbp (int32)
 */
#define PU_KIND_MASK 7u
#define PU_RBP_SAVED 8u
#define PU_PERMANENT 16u

static inline uint64_t pu_pack(unsigned kind, bool rbp_saved, int16_t rbp_off, int32_t cfa_off)
{
    return kind | (rbp_saved ? PU_RBP_SAVED : 0) | (uint64_t)(uint16_t)rbp_off << 16 |
           (uint64_t)(uint32_t)cfa_off << 32;
}

#define PU_RULE_END pu_pack(PROF_UNWIND_END, false, 0, 0)
#define PU_RULE_GIVEUP pu_pack(PROF_UNWIND_GIVEUP, false, 0, 0)

static inline unsigned pu_kind(uint64_t r) { return (unsigned)(r & PU_KIND_MASK); }
static inline int32_t pu_cfa_off(uint64_t r) { return (int32_t)(uint32_t)(r >> 32); }
static inline int16_t pu_rbp_off(uint64_t r) { return (int16_t)(uint16_t)(r >> 16); }

/* ---------------------------------------------------------------------
 * The cache: 1024 sets of four 32-byte entries (two cache lines a set),
 * 128 KiB of zeroed static memory, touched only once the profiler runs.
 * Four ways, not two: a hot stack whose return addresses put three keys
 * in one set (with addresses placed at random, one process in about 500
 * on our tests' stacks) would evict one of them at every walk, for good;
 * with four, five must meet in one set.
 */
#define PU_LG_SETS 10
#define PU_NSETS (1u << PU_LG_SETS)
#define PU_WAYS 4

typedef struct pu_entry {
    uint32_t seq;      /* odd while a writer fills the entry */
    uint32_t gen;      /* loader generation the rule was derived under */
    uintptr_t key;     /* ip - 1 */
    uint64_t rule;     /* 0: empty */
    uint64_t unused;
} pu_entry_t;

typedef struct pu_set {
    pu_entry_t way[PU_WAYS];
} MA_ALIGNED(2 * MA_CACHELINE) pu_set_t;

_Static_assert(sizeof(pu_set_t) == 2 * MA_CACHELINE, "a set is two cache lines");

MA_LARGE_BSS static pu_set_t pu_cache[PU_NSETS];
static unsigned pu_victim; /* alternates the way replaced in full sets */

static inline pu_set_t *pu_set_of(uintptr_t key)
{
    return &pu_cache[((uint64_t)key * 0x9e3779b97f4a7c15ull) >> (64 - PU_LG_SETS)];
}

#define PU_GEN_LAZY UINT64_MAX /* no 32-bit generation equals it */

/* gen: the loader's generation (its low 32 bits), or PU_GEN_LAZY (not read yet: only
 * permanent rules hit). */
static inline uint64_t pu_cache_get(uintptr_t key, uint64_t gen)
{
    pu_set_t *s = pu_set_of(key);
    for (unsigned w = 0; w < PU_WAYS; w++) {
        pu_entry_t *e = &s->way[w];
        uint32_t q = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
        uintptr_t k = __atomic_load_n(&e->key, __ATOMIC_RELAXED);
        uint32_t g = __atomic_load_n(&e->gen, __ATOMIC_RELAXED);
        uint64_t r = __atomic_load_n(&e->rule, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (k == key && ((r & PU_PERMANENT) || g == gen) && (q & 1) == 0 &&
            __atomic_load_n(&e->seq, __ATOMIC_RELAXED) == q)
            return r;
    }
    return 0;
}

static void pu_cache_put(uintptr_t key, uint32_t gen, uint64_t rule)
{
    pu_set_t *s = pu_set_of(key);
    unsigned w, pick = PU_WAYS;
    for (w = 0; w < PU_WAYS && pick == PU_WAYS; w++) {
        pu_entry_t *e = &s->way[w];
        if (__atomic_load_n(&e->key, __ATOMIC_RELAXED) == key)
            pick = w;
    }
    for (w = 0; w < PU_WAYS && pick == PU_WAYS; w++) {
        pu_entry_t *e = &s->way[w];
        uint64_t r = __atomic_load_n(&e->rule, __ATOMIC_RELAXED);
        if (r == 0 || (!(r & PU_PERMANENT) && __atomic_load_n(&e->gen, __ATOMIC_RELAXED) != gen))
            pick = w;
    }
    if (pick == PU_WAYS)
        pick = ma_fetch_add(&pu_victim, 1) % PU_WAYS;
    pu_entry_t *e = &s->way[pick];
    uint32_t q = __atomic_load_n(&e->seq, __ATOMIC_RELAXED);
    if ((q & 1) || !__atomic_compare_exchange_n(&e->seq, &q, q + 1, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return; /* another writer has it: leave the entry to it */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&e->key, key, __ATOMIC_RELAXED);
    __atomic_store_n(&e->gen, gen, __ATOMIC_RELAXED);
    __atomic_store_n(&e->rule, rule, __ATOMIC_RELAXED);
    __atomic_store_n(&e->seq, q + 2, __ATOMIC_RELEASE);
}

static void pu_cache_postfork_child(void)
{
    for (unsigned i = 0; i < PU_NSETS; i++) {
        for (unsigned w = 0; w < PU_WAYS; w++) {
            pu_entry_t *e = &pu_cache[i].way[w];
            if (e->seq & 1) {
                e->rule = 0;
                e->seq++;
            }
        }
    }
}

/* ---------------------------------------------------------------------
 * Reading unwind tables: a cursor that never leaves [p, end).
 */
typedef struct pu_cur {
    const uint8_t *p, *end;
    bool bad;
} pu_cur_t;

static inline uint64_t cur_fixed(pu_cur_t *c, size_t n)
{
    if (c->bad || (size_t)(c->end - c->p) < n) {
        c->bad = true;
        return 0;
    }
    uint64_t v = 0;
    memcpy(&v, c->p, n); /* little-endian */
    c->p += n;
    return v;
}

static inline uint8_t cur_u8(pu_cur_t *c) { return (uint8_t)cur_fixed(c, 1); }

/* LEB128, unsigned or sign-extended from the last byte's bit 6. */
static uint64_t cur_leb(pu_cur_t *c, bool is_signed)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
        uint8_t b = cur_u8(c);
        if (c->bad)
            return 0;
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            if (is_signed && shift + 7 < 64 && (b & 0x40))
                v |= ~(uint64_t)0 << (shift + 7);
            return v;
        }
    }
    c->bad = true;
    return 0;
}

static uint64_t cur_uleb(pu_cur_t *c) { return cur_leb(c, false); }
static int64_t cur_sleb(pu_cur_t *c) { return (int64_t)cur_leb(c, true); }

static void cur_skip(pu_cur_t *c, uint64_t n)
{
    if (c->bad || (uint64_t)(c->end - c->p) < n)
        c->bad = true;
    else
        c->p += n;
}

/* Pointer encodings (DW_EH_PE_*). */
#define PE_ABSPTR 0x00
#define PE_ULEB128 0x01
#define PE_UDATA2 0x02
#define PE_UDATA4 0x03
#define PE_UDATA8 0x04
#define PE_SIGNED 0x08
#define PE_SLEB128 0x09
#define PE_SDATA2 0x0a
#define PE_SDATA4 0x0b
#define PE_SDATA8 0x0c
#define PE_PCREL 0x10
#define PE_DATAREL 0x30
#define PE_INDIRECT 0x80
#define PE_OMIT 0xff

/* The value's bits as stored (format only). */
static bool cur_enc_raw(pu_cur_t *c, uint8_t enc, uint64_t *v)
{
    switch (enc & 0x0f) {
    case PE_ABSPTR:
    case PE_UDATA8:
    case PE_SIGNED:
    case PE_SDATA8: *v = cur_fixed(c, 8); break;
    case PE_ULEB128: *v = cur_uleb(c); break;
    case PE_UDATA2: *v = cur_fixed(c, 2); break;
    case PE_UDATA4: *v = cur_fixed(c, 4); break;
    case PE_SLEB128: *v = (uint64_t)cur_sleb(c); break;
    case PE_SDATA2: *v = (uint64_t)(int64_t)(int16_t)cur_fixed(c, 2); break;
    case PE_SDATA4: *v = (uint64_t)(int64_t)(int32_t)cur_fixed(c, 4); break;
    default: return false;
    }
    return !c->bad;
}

/* An encoded address: pc-relative to where it is stored, data-relative to
 * dbase (0: not allowed here). Indirect, text-, function-relative and
 * aligned encodings are not used for code addresses by the toolchains:
 * refused. */
static bool cur_enc_ptr(pu_cur_t *c, uint8_t enc, uintptr_t dbase, uintptr_t *out)
{
    if (enc == PE_OMIT || (enc & PE_INDIRECT))
        return false;
    uintptr_t at = (uintptr_t)c->p;
    uint64_t v;
    if (!cur_enc_raw(c, enc, &v))
        return false;
    switch (enc & 0x70) {
    case 0: break;
    case PE_PCREL: v += at; break;
    case PE_DATAREL:
        if (dbase == 0)
            return false;
        v += dbase;
        break;
    default: return false;
    }
    *out = (uintptr_t)v;
    return true;
}

/* ---------------------------------------------------------------------
 * CIEs, FDEs and the CFA program.
 */
typedef struct pu_cie {
    uint64_t code_align;
    int64_t data_align;
    uint64_t ra_reg;
    uint8_t fde_enc;
    bool has_z;
    const uint8_t *insn, *insn_end;
} pu_cie_t;

/* A register's rule, for the three registers a rule needs. */
enum { HOW_SAME = 0, HOW_OFFSET, HOW_UNDEF, HOW_OTHER };
enum { R_RBP = 0, R_RSP = 1, R_RA = 2, R_N = 3 };
#define DW_RBP 6
#define DW_RSP 7
#define DW_RIP 16

typedef struct pu_row {
    uint64_t cfa_reg;
    int64_t cfa_off;
    bool cfa_expr;
    uint8_t how[R_N];
    int64_t off[R_N];
} pu_row_t;

#define PU_REMEMBER_MAX 8

/* The CIE at cie, within [lo, hi). false: malformed or beyond us ('S'
 * signal frames, unknown augmentations, 64-bit lengths). */
static bool pu_cie_parse(const uint8_t *cie, const uint8_t *lo, const uint8_t *hi, pu_cie_t *out)
{
    if (cie < lo || cie >= hi)
        return false;
    pu_cur_t c = {cie, hi, false};
    uint32_t len = (uint32_t)cur_fixed(&c, 4);
    if (c.bad || len == 0 || len == 0xffffffffu || len > (size_t)(hi - c.p))
        return false;
    c.end = c.p + len;
    if (cur_fixed(&c, 4) != 0) /* CIE id */
        return false;
    uint8_t version = cur_u8(&c);
    if (version != 1 && version != 3 && version != 4)
        return false;
    const char *aug = (const char *)c.p;
    const uint8_t *nul = memchr(c.p, 0, (size_t)(c.end - c.p));
    if (nul == NULL)
        return false;
    c.p = nul + 1;
    if (version == 4) {
        if (cur_u8(&c) != 8 || cur_u8(&c) != 0) /* address and segment sizes */
            return false;
    }
    out->code_align = cur_uleb(&c);
    out->data_align = cur_sleb(&c);
    out->ra_reg = version == 1 ? cur_u8(&c) : cur_uleb(&c);
    out->fde_enc = PE_ABSPTR;
    out->has_z = aug[0] == 'z';
    if (c.bad)
        return false;
    if (out->has_z) {
        uint64_t alen = cur_uleb(&c);
        if (c.bad || alen > (uint64_t)(c.end - c.p))
            return false;
        pu_cur_t a = {c.p, c.p + alen, false};
        for (const char *s = aug + 1; *s != '\0'; s++) {
            uint64_t skip;
            switch (*s) {
            case 'R': out->fde_enc = cur_u8(&a); break;
            case 'L': cur_u8(&a); break; /* the LSDA's encoding */
            case 'P': {
                uint8_t penc = cur_u8(&a);
                if ((penc & 0x70) == 0x50 || !cur_enc_raw(&a, penc, &skip)) /* aligned: refused */
                    return false;
                break;
            }
            default: return false; /* 'S' (a signal frame) or unknown */
            }
            if (a.bad)
                return false;
        }
        c.p += alen;
    } else if (aug[0] != '\0') {
        return false;
    }
    out->insn = c.p;
    out->insn_end = c.end;
    return out->code_align != 0;
}

static inline int pu_reg(uint64_t reg, uint64_t ra_reg)
{
    return reg == DW_RBP ? R_RBP : reg == DW_RSP ? R_RSP : reg == ra_reg ? R_RA : -1;
}

static inline void pu_set(pu_row_t *row, uint64_t reg, uint64_t ra_reg, uint8_t how, int64_t off)
{
    int r = pu_reg(reg, ra_reg);
    if (r >= 0) {
        row->how[r] = how;
        row->off[r] = off;
    }
}

/* Run a CFA program from location loc, applying every row that starts at
 * or before addr. init: the row after the CIE's program (the target of
 * DW_CFA_restore), NULL while running the CIE's. false: an instruction
 * beyond us, or malformed. */
static bool pu_run(const pu_cie_t *cie, const uint8_t *p, const uint8_t *end, uintptr_t loc, uintptr_t addr,
                   pu_row_t *row, const pu_row_t *init)
{
    pu_row_t saved[PU_REMEMBER_MAX];
    unsigned depth = 0;
    pu_cur_t c = {p, end, false};
    const uint64_t ra = cie->ra_reg;
    const int64_t da = cie->data_align;
    while (c.p < c.end) {
        uint8_t op = cur_u8(&c);
        uint64_t reg, u;
        int64_t s;
        uintptr_t delta = 0;
        bool advance = false;
        switch (op >> 6) {
        case 1: /* DW_CFA_advance_loc */
            delta = op & 0x3f;
            advance = true;
            break;
        case 2: /* DW_CFA_offset */
            u = cur_uleb(&c);
            pu_set(row, op & 0x3f, ra, HOW_OFFSET, (int64_t)u * da);
            break;
        case 3: /* DW_CFA_restore */
            reg = op & 0x3f;
            goto restore;
        default:
            switch (op) {
            case 0x00: break; /* nop */
            case 0x01: {      /* set_loc */
                uintptr_t to;
                if (!cur_enc_ptr(&c, cie->fde_enc, 0, &to))
                    return false;
                if (to > addr)
                    return true;
                loc = to;
                break;
            }
            case 0x02: delta = cur_fixed(&c, 1), advance = true; break;
            case 0x03: delta = cur_fixed(&c, 2), advance = true; break;
            case 0x04: delta = cur_fixed(&c, 4), advance = true; break;
            case 0x05: /* offset_extended */
                reg = cur_uleb(&c);
                u = cur_uleb(&c);
                pu_set(row, reg, ra, HOW_OFFSET, (int64_t)u * da);
                break;
            case 0x06: /* restore_extended */
                reg = cur_uleb(&c);
            restore: {
                int r = pu_reg(reg, ra);
                if (r >= 0) {
                    row->how[r] = init != NULL ? init->how[r] : HOW_SAME;
                    row->off[r] = init != NULL ? init->off[r] : 0;
                }
                break;
            }
            case 0x07: pu_set(row, cur_uleb(&c), ra, HOW_UNDEF, 0); break;
            case 0x08: pu_set(row, cur_uleb(&c), ra, HOW_SAME, 0); break;
            case 0x09: /* register */
                reg = cur_uleb(&c);
                cur_uleb(&c);
                pu_set(row, reg, ra, HOW_OTHER, 0);
                break;
            case 0x0a: /* remember_state (the CFA rule with the registers) */
                if (depth == PU_REMEMBER_MAX)
                    return false;
                saved[depth++] = *row;
                break;
            case 0x0b: /* restore_state */
                if (depth == 0)
                    return false;
                *row = saved[--depth];
                break;
            case 0x0c: /* def_cfa */
                row->cfa_reg = cur_uleb(&c);
                row->cfa_off = (int64_t)cur_uleb(&c);
                row->cfa_expr = false;
                break;
            case 0x0d: /* def_cfa_register */
                row->cfa_reg = cur_uleb(&c);
                row->cfa_expr = false;
                break;
            case 0x0e: row->cfa_off = (int64_t)cur_uleb(&c); break; /* def_cfa_offset */
            case 0x0f:                                              /* def_cfa_expression */
                cur_skip(&c, cur_uleb(&c));
                row->cfa_expr = true;
                break;
            case 0x10: /* expression */
            case 0x16: /* val_expression */
                reg = cur_uleb(&c);
                cur_skip(&c, cur_uleb(&c));
                pu_set(row, reg, ra, HOW_OTHER, 0);
                break;
            case 0x11: /* offset_extended_sf */
                reg = cur_uleb(&c);
                s = cur_sleb(&c);
                pu_set(row, reg, ra, HOW_OFFSET, s * da);
                break;
            case 0x12: /* def_cfa_sf */
                row->cfa_reg = cur_uleb(&c);
                row->cfa_off = cur_sleb(&c) * da;
                row->cfa_expr = false;
                break;
            case 0x13: row->cfa_off = cur_sleb(&c) * da; break; /* def_cfa_offset_sf */
            case 0x14:                                          /* val_offset */
                reg = cur_uleb(&c);
                cur_uleb(&c);
                pu_set(row, reg, ra, HOW_OTHER, 0);
                break;
            case 0x15: /* val_offset_sf */
                reg = cur_uleb(&c);
                cur_sleb(&c);
                pu_set(row, reg, ra, HOW_OTHER, 0);
                break;
            case 0x2e: cur_uleb(&c); break; /* GNU_args_size: no effect on the CFA */
            case 0x2f:                      /* GNU_negative_offset_extended */
                reg = cur_uleb(&c);
                u = cur_uleb(&c);
                pu_set(row, reg, ra, HOW_OFFSET, -(int64_t)u * da);
                break;
            default: return false;
            }
        }
        if (c.bad)
            return false;
        if (advance) {
            if (init == NULL)
                return false; /* rows in a CIE: not from any toolchain */
            loc += delta * cie->code_align;
            if (loc > addr)
                return true;
        }
    }
    return true;
}

/* A row as a rule, if it is one. */
static uint64_t pu_reduce(const pu_row_t *row)
{
    if (row->how[R_RA] == HOW_UNDEF)
        return PU_RULE_END;
    if (row->cfa_expr || (row->cfa_reg != DW_RSP && row->cfa_reg != DW_RBP))
        return PU_RULE_GIVEUP;
    if (row->how[R_RA] != HOW_OFFSET || row->off[R_RA] != -8 || row->how[R_RSP] != HOW_SAME)
        return PU_RULE_GIVEUP;
    if (row->cfa_off < INT32_MIN || row->cfa_off > INT32_MAX)
        return PU_RULE_GIVEUP;
    unsigned kind = row->cfa_reg == DW_RSP ? PROF_UNWIND_CFA_RSP : PROF_UNWIND_CFA_RBP;
    /* A CFA from rsp must be above it and aligned (rsp is): decided here;
     * the walk checks a CFA from rbp. */
    if (kind == PROF_UNWIND_CFA_RSP && (row->cfa_off <= 0 || (row->cfa_off & 7) != 0))
        return PU_RULE_END;
    if (row->how[R_RBP] == HOW_SAME)
        return pu_pack(kind, false, 0, (int32_t)row->cfa_off);
    if (row->how[R_RBP] != HOW_OFFSET || row->off[R_RBP] < INT16_MIN || row->off[R_RBP] > INT16_MAX)
        return PU_RULE_GIVEUP;
    /* The saved rbp must lie in this frame, below the return address,
     * aligned (the CFA is: the walk checks it). What the offsets alone
     * decide is decided here, once, not at every walk: a rule that fails
     * ends the walk at this frame, as the walk's own checks would. For a
     * CFA from rsp the frame's rsp is CFA - cfa_off, so "not below rsp" is
     * one of them; from rbp, the walk checks it. */
    int64_t off = row->off[R_RBP];
    if (off > -8 || (off & 7) != 0 || (kind == PROF_UNWIND_CFA_RSP && off < -row->cfa_off))
        return PU_RULE_END;
    return pu_pack(kind, true, (int16_t)off, (int32_t)row->cfa_off);
}

/* The PT_LOAD segment of an object holding address a, as [lo, hi). */
static bool pu_segment(const struct dl_phdr_info *info, uintptr_t a, const uint8_t **lo, const uint8_t **hi)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t s = info->dlpi_addr + ph->p_vaddr;
        if (a - s < ph->p_memsz) {
            *lo = (const uint8_t *)s;
            *hi = (const uint8_t *)(s + ph->p_memsz);
            return true;
        }
    }
    return false;
}

static inline int32_t rd32(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* No FDE covers addr, a return address - 1 in a loaded object: libgcc
 * then looks for the x86-64 rt_sigreturn sequence (movq $15, %rax;
 * syscall) at the return address, a signal frame without unwind tables,
 * and otherwise takes the frame as the outermost (makecontext's
 * __start_context, code without tables). The same here, but a signal
 * frame is left to libgcc. */
static uint64_t pu_no_fde(const struct dl_phdr_info *info, uintptr_t addr)
{
    static const uint8_t sigreturn[9] = {0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05};
    const uint8_t *lo, *hi, *pc = (const uint8_t *)addr + 1;
    if (pu_segment(info, addr + 1, &lo, &hi) && (size_t)(hi - pc) >= sizeof(sigreturn) &&
        memcmp(pc, sigreturn, sizeof(sigreturn)) == 0)
        return PU_RULE_GIVEUP;
    return PU_RULE_END;
}

/* The rule at addr, in an object whose search table is at hdr. */
static uint64_t pu_derive_in(const struct dl_phdr_info *info, uintptr_t hdr, uintptr_t addr)
{
    const uint8_t *slo, *shi;
    if (!pu_segment(info, hdr, &slo, &shi))
        return PU_RULE_GIVEUP;
    /* .eh_frame_hdr: version, three encodings, the .eh_frame pointer, the
     * count, then (initial location, FDE) pairs sorted by location. */
    pu_cur_t c = {(const uint8_t *)hdr, shi, false};
    uint8_t version = cur_u8(&c), ptr_enc = cur_u8(&c), count_enc = cur_u8(&c), table_enc = cur_u8(&c);
    uintptr_t ehframe, count;
    if (c.bad || version != 1 || table_enc != (PE_DATAREL | PE_SDATA4) || !cur_enc_ptr(&c, ptr_enc, hdr, &ehframe) ||
        !cur_enc_ptr(&c, count_enc, hdr, &count) || count == 0 || count > (uintptr_t)(shi - c.p) / 8)
        return PU_RULE_GIVEUP; /* no search table: libgcc scans .eh_frame */
    const uint8_t *tab = c.p;
    size_t lo = 0, hi = count;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (hdr + (intptr_t)rd32(tab + 8 * mid) <= addr)
            lo = mid;
        else
            hi = mid;
    }
    if (hdr + (intptr_t)rd32(tab + 8 * lo) > addr)
        return pu_no_fde(info, addr);
    uintptr_t fde = hdr + (intptr_t)rd32(tab + 8 * lo + 4);
    /* The FDE and its CIE, within the segment holding the FDE. */
    const uint8_t *flo, *fhi;
    if (!pu_segment(info, fde, &flo, &fhi))
        return PU_RULE_GIVEUP;
    pu_cur_t f = {(const uint8_t *)fde, fhi, false};
    uint32_t len = (uint32_t)cur_fixed(&f, 4);
    if (f.bad || len == 0 || len == 0xffffffffu || len > (size_t)(fhi - f.p))
        return PU_RULE_GIVEUP;
    f.end = f.p + len;
    const uint8_t *idp = f.p;
    uint32_t cie_off = (uint32_t)cur_fixed(&f, 4);
    if (f.bad || cie_off == 0 || cie_off > (size_t)(idp - flo))
        return PU_RULE_GIVEUP;
    pu_cie_t cie;
    if (!pu_cie_parse(idp - cie_off, flo, fhi, &cie) || cie.ra_reg != DW_RIP)
        return PU_RULE_GIVEUP;
    uintptr_t pc_begin, pc_range;
    if (!cur_enc_ptr(&f, cie.fde_enc, 0, &pc_begin) || !cur_enc_ptr(&f, cie.fde_enc & 0x0f, 0, &pc_range))
        return PU_RULE_GIVEUP;
    if (addr < pc_begin || addr - pc_begin >= pc_range)
        return pu_no_fde(info, addr);
    if (cie.has_z)
        cur_skip(&f, cur_uleb(&f));
    if (f.bad)
        return PU_RULE_GIVEUP;
    pu_row_t init = {0}, row;
    if (!pu_run(&cie, cie.insn, cie.insn_end, 0, UINTPTR_MAX, &init, NULL))
        return PU_RULE_GIVEUP;
    row = init;
    if (!pu_run(&cie, f.p, f.end, pc_begin, addr, &row, &init))
        return PU_RULE_GIVEUP;
    return pu_reduce(&row);
}

/* ---------------------------------------------------------------------
 * Objects: dl_iterate_phdr, for the generation and for derivations.
 */
#define PU_GEN_UNKNOWN UINT64_MAX

static uint64_t pu_info_gen(const struct dl_phdr_info *info, size_t size)
{
    if (size < offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs))
        return PU_GEN_UNKNOWN;
    return (uint64_t)info->dlpi_adds + (uint64_t)info->dlpi_subs;
}

static int pu_gen_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    *(uint64_t *)arg = pu_info_gen(info, size);
    return 1;
}

/* The current generation, low 32 bits (as cached), or PU_GEN_UNKNOWN. */
static MA_NOINLINE uint64_t pu_gen_read(void)
{
    uint64_t gen = PU_GEN_UNKNOWN;
    ma_fetch_add(&pu_ngen_reads, 1);
    prof_unwind_loader_enter();
    dl_iterate_phdr(pu_gen_cb, &gen);
    prof_unwind_loader_leave();
    return gen == PU_GEN_UNKNOWN ? gen : (uint32_t)gen;
}

/* Objects loaded at startup: the first pu_nstartup of the loader's list
 * (dl_iterate_phdr lists the caller's namespace in load order, and glibc
 * never unloads them, so they keep their places). 0 until counted. */
static unsigned pu_nstartup;

/* Both run at every startup, profiling or not: MA_COLD places them in
 * .text.unlikely, which stays with the code every program runs when this
 * file's .text goes to the cold mapping (the Makefile's COLD_SRC), so a
 * program that never profiles never touches the profiler's pages. */
static MA_COLD int pu_count_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)info;
    (void)size;
    ++*(unsigned *)arg;
    return 0;
}

MA_COLD void prof_unwind_count_startup_objects(void)
{
    unsigned n = 0;
    dl_iterate_phdr(pu_count_cb, &n);
    ma_store_release(&pu_nstartup, n);
}

typedef struct pu_find {
    uintptr_t addr;
    uint64_t rule;
    uint64_t gen;
    unsigned index; /* of the object being looked at, in the loader's list */
} pu_find_t;

static int pu_find_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    pu_find_t *f = arg;
    if (f->index++ == 0)
        f->gen = pu_info_gen(info, size);
    const ElfW(Phdr) *eh = NULL;
    bool inside = false;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && f->addr - (info->dlpi_addr + ph->p_vaddr) < ph->p_memsz)
            inside = true;
        else if (ph->p_type == PT_GNU_EH_FRAME)
            eh = ph;
    }
    if (!inside)
        return 0;
    f->rule = eh != NULL ? pu_derive_in(info, info->dlpi_addr + eh->p_vaddr, f->addr) : PU_RULE_GIVEUP;
    if (f->index <= ma_load_acquire(&pu_nstartup) && pu_kind(f->rule) != PROF_UNWIND_GIVEUP)
        f->rule |= PU_PERMANENT;
    return 1;
}

/* Derive (and cache) the rule at addr. */
static MA_NOINLINE uint64_t pu_derive(uintptr_t addr)
{
    pu_find_t f = {addr, PU_RULE_GIVEUP, PU_GEN_UNKNOWN, 0};
    prof_unwind_loader_enter();
    dl_iterate_phdr(pu_find_cb, &f);
    prof_unwind_loader_leave();
    ma_fetch_add(&pu_nderived, 1);
    if (f.gen != PU_GEN_UNKNOWN)
        pu_cache_put(addr, (uint32_t)f.gen, f.rule);
    return f.rule;
}

/* ---------------------------------------------------------------------
 * The thread's stack.
 */
/* The two stacks the thread was last seen on (its own and, say, a
 * coroutine's), [lo, hi), the latest first. */
static __thread uintptr_t pu_stack[2][2] __attribute__((tls_model("initial-exec")));
static __thread unsigned pu_stack_scans __attribute__((tls_model("initial-exec")));

#define PU_SCANS_MAX 32               /* per thread: then stacks it does not know are given up */
#define PU_MAIN_STACK_MAX (1ul << 30) /* how far below its top the main stack may reach, at most */

static bool pu_hex(const char **p, const char *end, uintptr_t *v)
{
    uintptr_t x = 0;
    const char *s = *p;
    for (; s < end; s++) {
        unsigned d;
        if (*s >= '0' && *s <= '9')
            d = (unsigned)(*s - '0');
        else if (*s >= 'a' && *s <= 'f')
            d = (unsigned)(*s - 'a' + 10);
        else
            break;
        x = x << 4 | d;
    }
    if (s == *p)
        return false;
    *p = s;
    *v = x;
    return true;
}

/* A line of /proc/self/maps (possibly cut short): does its mapping hold sp? */
static bool pu_maps_line(const char *p, const char *end, uintptr_t sp, uintptr_t *lo, uintptr_t *hi)
{
    uintptr_t a, b;
    if (!pu_hex(&p, end, &a) || p == end || *p++ != '-' || !pu_hex(&p, end, &b))
        return false;
    if (sp < a || sp >= b)
        return false;
    *lo = a;
    *hi = b;
    /* The main thread's stack grows down below its mapping's start: up to
     * its limit (the kernel keeps other mappings out of that range). */
    if (end - p >= 7 && memcmp(end - 7, "[stack]", 7) == 0) {
        struct rlimit rl;
        uintptr_t span = PU_MAIN_STACK_MAX;
        if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < span)
            span = rl.rlim_cur;
        if (b > span && b - span < a)
            *lo = b - span;
    }
    return true;
}

/* The mapping holding sp, from /proc/self/maps, read without allocating,
 * with system calls that are not cancellation points (open and read are:
 * a thread must not be cancelled inside malloc). */
static bool pu_stack_scan(uintptr_t sp, uintptr_t *lo, uintptr_t *hi)
{
    ma_fetch_add(&pu_nscans, 1);
    long fd = ma_syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (ma_sys_failed(fd))
        return false;
    char buf[2048];
    size_t have = 0;
    bool found = false, skipping = false;
    while (!found) {
        long r = ma_syscall(SYS_read, fd, buf + have, sizeof(buf) - have);
        if (r == -EINTR)
            continue;
        if (r <= 0)
            break;
        have += (size_t)r;
        size_t at = 0;
        const char *nl;
        while (!found && (nl = memchr(buf + at, '\n', have - at)) != NULL) {
            if (!skipping)
                found = pu_maps_line(buf + at, nl, sp, lo, hi);
            skipping = false;
            at = (size_t)(nl - buf) + 1;
        }
        memmove(buf, buf + at, have - at);
        have -= at;
        if (!found && have == sizeof(buf)) {
            /* A line longer than the buffer (a long path): its start is
             * here; the rest is skipped. */
            if (!skipping)
                found = pu_maps_line(buf, buf + have, sp, lo, hi);
            skipping = true;
            have = 0;
        }
    }
    ma_syscall(SYS_close, fd);
    return found;
}

/* The top of the stack sp is on, if it is one of the thread's, else 0. */
static inline uintptr_t pu_stack_top(uintptr_t sp)
{
    if (likely(sp >= pu_stack[0][0] && sp < pu_stack[0][1]))
        return pu_stack[0][1];
    uintptr_t lo = pu_stack[1][0], hi = pu_stack[1][1];
    if (!(sp >= lo && sp < hi)) {
        if (pu_stack_scans >= PU_SCANS_MAX)
            return 0;
        pu_stack_scans++;
        if (!pu_stack_scan(sp, &lo, &hi))
            return 0;
    }
    pu_stack[1][0] = pu_stack[0][0];
    pu_stack[1][1] = pu_stack[0][1];
    pu_stack[0][0] = lo;
    pu_stack[0][1] = hi;
    return hi;
}

/* ---------------------------------------------------------------------
 * The walk.
 */
static MA_NOINLINE int pu_giveup(void)
{
    ma_fetch_add(&pu_ngiveup, 1);
    return -1;
}

/* A rule and the generation it holds in (see pu_rule_miss). */
typedef struct pu_lookup {
    uint64_t rule, gen;
} pu_lookup_t;

/* The rule for key when the cache has none valid in generation gen: read
 * the loader's generation once per walk (only a frame that is not a
 * startup object's needs it), look again, else derive the rule. Out of
 * line, and returning both words in registers, so that the walk's loop
 * keeps its values in registers. */
static MA_NOINLINE pu_lookup_t pu_rule_miss(uintptr_t key, uint64_t gen)
{
    if (gen == PU_GEN_LAZY) {
        if ((gen = pu_gen_read()) == PU_GEN_UNKNOWN)
            return (pu_lookup_t){PU_RULE_GIVEUP, gen};
        uint64_t rule = pu_cache_get(key, gen);
        if (rule != 0)
            return (pu_lookup_t){rule, gen};
    }
    return (pu_lookup_t){pu_derive(key), gen};
}

/* ---------------------------------------------------------------------
 * The replay. A thread's samples come from a few call sites, and a site's
 * stack is mostly the same from one sample to the next: the same frames at
 * the same places. Each thread keeps the steps of its last walk: for each
 * frame its (ip, bp) and where its caller's return address and rbp were
 * read, as offsets from the first frame's sp. A walk that starts at the
 * same (ip, sp, bp) on the same stack replays them: it reads the same
 * slots and checks each value read against the last walk's, with no rule
 * looked up and nothing checked again. Each step of the walk proper is a
 * function of the frame's (ip, sp, bp), its rule and the stack's top, so
 * while the values agree the replay is that walk; at the first that
 * differs, or past the steps kept, the walk proper goes on from that frame.
 * Only frames whose rules are permanent (startup objects') are kept: their
 * rules hold in every loader generation. A replayed frame costs ~17
 * instructions, a walked one ~50 (callgrind, batch mixed: 5 frames, the
 * walk 281 -> 146 instructions a sample with its entry and exit). The
 * loop's one bound is the last step it may replay (kept, and with room
 * in buf), so a frame pays one test for both.
 */
#define PU_MEMO_MAX 24

typedef struct pu_step {
    uintptr_t ip, bp; /* the frame's return address and rbp */
    uint32_t cfa;     /* its CFA - the first sp; 0: the walk ended at this frame */
    uint16_t bp_at;   /* its CFA - where its caller's rbp was read (at most 2^15); 0: rbp unchanged */
    uint8_t bp_cfa;   /* its CFA is computed from rbp */
    uint8_t bp_used;  /* rbp's value here decides the walk from here on (else it is not compared) */
} pu_step_t;

/* Invariants: steps [0, n) are the first n steps of the walk from
 * (step[0].ip, sp, step[0].bp) on the stack ending at hi, whose frames all
 * have permanent rules; every slot they name lies in [sp, hi). busy while a
 * walk runs (a walk nested in it, from a signal handler, neither replays
 * nor records).
 *
 * Code built without frame pointers uses rbp as any other register: its
 * value at a call site changes from one call to the next. It matters only
 * to a frame whose CFA is computed from it, and to those above it up to
 * the first that reloads it from the stack: bp_used marks those, and only
 * there is rbp compared. */
typedef struct pu_memo {
    uintptr_t sp, hi;
    unsigned n;
    bool busy;
    pu_step_t step[PU_MEMO_MAX];
} pu_memo_t;

static __thread pu_memo_t pu_memo __attribute__((tls_model("initial-exec")));

/* Which steps' rbp matters, from the last to the first: a step's does if
 * its CFA is computed from it, or if it leaves rbp unchanged and the next
 * step's does; past the steps kept (a walk that went on, or would with a
 * larger cap), it is taken to. */
static void pu_memo_close(pu_memo_t *memo)
{
    bool used_after = memo->n != 0 && memo->step[memo->n - 1].cfa != 0;
    for (unsigned i = memo->n; i-- > 0;) {
        pu_step_t *st = &memo->step[i];
        bool used = st->bp_cfa || (st->bp_at == 0 && used_after);
        st->bp_used = used;
        used_after = used;
    }
}

/* The walk proper, from frame (ip, sp, bp), the (out - buf)-th, whose
 * frames before it are in buf. With memo, it records its steps there from
 * that frame on while their rules are permanent and it has room (memo->n
 * counts them; a walk given up leaves none). */
static int pu_walk_from(void **buf, void **out, void **const end, uintptr_t ip, uintptr_t sp, uintptr_t bp,
                        const uintptr_t hi, pu_memo_t *memo)
{
    uint64_t gen = PU_GEN_LAZY;
    const uintptr_t sp0 = memo != NULL ? memo->sp : 0;
    /* The step this frame records into, or NULL once recording stopped. */
    pu_step_t *rec = memo != NULL && memo->n < PU_MEMO_MAX ? &memo->step[memo->n] : NULL;
    while (ip != 0 && out < end) {
        *out++ = (void *)ip;
        uint64_t rule = pu_cache_get(ip - 1, gen);
        if (unlikely(rule == 0)) {
            pu_lookup_t lk = pu_rule_miss(ip - 1, gen);
            rule = lk.rule;
            gen = lk.gen;
        }
        unsigned kind = pu_kind(rule);
        if (rec != NULL && !(rule & PU_PERMANENT))
            rec = NULL; /* this frame's rule may change: replays stop before it */
        if (rec != NULL) {
            rec->ip = ip;
            rec->bp = bp;
            rec->cfa = 0; /* ends here unless a step follows */
            rec->bp_at = 0;
            rec->bp_cfa = kind == PROF_UNWIND_CFA_RBP;
        }
        if (unlikely(kind >= PROF_UNWIND_END)) {
            if (kind == PROF_UNWIND_END)
                goto ended;
            if (memo != NULL)
                memo->n = 0;
            return pu_giveup();
        }
        /* Up the stack, within it, aligned: else the stack is not what the
         * tables say (hand-written code, a corrupted stack): stop here. For
         * a CFA from rsp, pu_reduce checked the first and the last. */
        uintptr_t cfa;
        if (kind == PROF_UNWIND_CFA_RSP) {
            cfa = sp + (intptr_t)pu_cfa_off(rule);
        } else {
            cfa = bp + (intptr_t)pu_cfa_off(rule);
            if (cfa <= sp || (cfa & 7) != 0)
                goto ended;
        }
        if (cfa > hi)
            goto ended;
        uintptr_t at = 0;
        if (rule & PU_RBP_SAVED) {
            /* Saved inside this frame: between its rsp and its CFA, aligned
             * (pu_reduce checked all but rsp <= at for a CFA from rbp). */
            at = cfa + (intptr_t)pu_rbp_off(rule);
            if (kind == PROF_UNWIND_CFA_RBP && at < sp)
                goto ended;
            bp = *(const uintptr_t *)at;
        }
        ip = *(const uintptr_t *)(cfa - 8);
        sp = cfa;
        if (rec != NULL) {
            if (cfa - sp0 <= UINT32_MAX) {
                rec->cfa = (uint32_t)(cfa - sp0);
                rec->bp_at = at != 0 ? (uint16_t)(cfa - at) : 0;
                memo->n++;
                rec = memo->n < PU_MEMO_MAX ? rec + 1 : NULL;
            } else {
                rec = NULL;
            }
        }
    }
    rec = NULL; /* the walk went on past its last step recorded */
ended:
    if (rec != NULL)
        memo->n++; /* a step that ends the walk (cfa 0) */
    if (memo != NULL)
        pu_memo_close(memo);
    return (int)(out - buf);
}

/* From the frame (ip, sp, bp): the caller of prof_unwind_backtrace at its
 * call, whose rsp (the CFA of prof_unwind_backtrace's frame) and rbp are
 * exact there; unwind tables are exact at every call. */
static int pu_walk(void **buf, int cap, uintptr_t ip, uintptr_t sp, uintptr_t bp)
{
    const uintptr_t hi = pu_stack_top(sp);
    if (hi == 0)
        return pu_giveup();
    void **out = buf, **const end = buf + (cap > 0 ? cap : 0);
    pu_memo_t *const m = &pu_memo;
    if (unlikely(m->busy))
        return pu_walk_from(buf, out, end, ip, sp, bp, hi, NULL);
    const uintptr_t sp0 = sp;
    const pu_step_t *st = m->step;
    /* The steps this walk may replay: those kept, as far as buf has room. */
    const pu_step_t *const last = st + MA_MIN(m->n, (size_t)(end - out));
    if (st != last && m->sp == sp && m->hi == hi && st->ip == ip && (!st->bp_used || st->bp == bp)) {
        for (;;) {
            *out++ = (void *)ip;
            if (st->cfa == 0) {
                pu_nreplayed += (uint64_t)(out - buf); /* replay starts at buf */
                return (int)(out - buf);
            }
            const uintptr_t cfa = sp0 + st->cfa;
            if (st->bp_at != 0)
                bp = *(const uintptr_t *)(cfa - st->bp_at);
            ip = *(const uintptr_t *)(cfa - 8);
            sp = cfa;
            if (++st == last || ip != st->ip || (st->bp_used && bp != st->bp))
                break;
        }
        pu_nreplayed += (uint64_t)(out - buf);
    }
    m->busy = true;
    m->n = (unsigned)(st - m->step); /* the steps replayed stay; the walk records the next ones */
    m->sp = sp0;
    m->hi = hi;
    int n = pu_walk_from(buf, out, end, ip, sp, bp, hi, m);
    m->busy = false;
    return n;
}

MA_NOINLINE int prof_unwind_backtrace(void **buf, int cap)
{
    /* __builtin_frame_address keeps this function's frame pointer: fp[0]
     * is the caller's rbp, fp[1] the return address, and the caller's rsp
     * at the call is just above them. */
    const uintptr_t *fp = __builtin_frame_address(0);
    uintptr_t ip = (uintptr_t)__builtin_return_address(0);
    uintptr_t sp = (uintptr_t)__builtin_dwarf_cfa();
    if (sp != (uintptr_t)(fp + 2) || fp[1] != ip || (sp & 7) != 0)
        return pu_giveup(); /* not the frame layout assumed */
    return pu_walk(buf, cap, ip, sp, fp[0]);
}

int prof_unwind_backtrace_from(void **buf, int cap, uintptr_t ip, uintptr_t sp, uintptr_t bp)
{
    if ((sp & 7) != 0)
        return pu_giveup();
    pu_nfrom++;
    return pu_walk(buf, cap, ip, sp, bp);
}

void prof_unwind_rule_of(uintptr_t addr, bool exact, prof_unwind_rule_t *out)
{
    uint64_t r = pu_derive(exact ? addr : addr - 1);
    out->kind = (enum prof_unwind_kind)pu_kind(r);
    out->cfa_off = pu_cfa_off(r);
    out->rbp_saved = (r & PU_RBP_SAVED) != 0;
    out->rbp_off = pu_rbp_off(r);
}

unsigned prof_unwind_cache_set(uintptr_t key) { return (unsigned)(pu_set_of(key) - pu_cache); }

bool prof_unwind_cache_holds(uintptr_t key) { return pu_cache_get(key, pu_gen_read()) != 0; }

#else /* not x86-64 Linux: every stack goes to libgcc */

int prof_unwind_backtrace(void **buf, int cap)
{
    (void)buf;
    (void)cap;
    ma_fetch_add(&pu_ngiveup, 1);
    return -1;
}

static void pu_cache_postfork_child(void) {}

void prof_unwind_count_startup_objects(void) {}

int prof_unwind_backtrace_from(void **buf, int cap, uintptr_t ip, uintptr_t sp, uintptr_t bp)
{
    (void)buf;
    (void)cap;
    (void)ip;
    (void)sp;
    (void)bp;
    ma_fetch_add(&pu_ngiveup, 1);
    return -1;
}

void prof_unwind_rule_of(uintptr_t addr, bool exact, prof_unwind_rule_t *out)
{
    (void)addr;
    (void)exact;
    *out = (prof_unwind_rule_t){PROF_UNWIND_GIVEUP, 0, false, 0};
}

unsigned prof_unwind_cache_set(uintptr_t key)
{
    (void)key;
    return 0;
}

bool prof_unwind_cache_holds(uintptr_t key)
{
    (void)key;
    return false;
}

#endif

void prof_unwind_boot(void)
{
    void *warm[8];
    prof_unwind_backtrace(warm, 8);
}
