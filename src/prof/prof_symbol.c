/*
 * prof_symbol: maps, ELF symbol tables and the symbol cache, see
 * prof_symbol.h.
 *
 * Why not dladdr first: dladdr sees only exported (.dynsym) names, so the
 * static functions of a program would stay anonymous, and it takes the
 * dynamic loader's lock, which a thread inside dlopen holds while it calls
 * malloc (an interval dump may run right there). The ELF reader needs
 * neither. dladdr is kept as the last resort for a mapping whose file
 * cannot be opened at all.
 */
#include "prof_symbol.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../arena/base.h"
#include "../arena/pages.h"
#include "../common/mutex.h"
#include "../common/sys.h"
#include "prof_dwarf.h"

/* ---------------------------------------------------------------------
 * Maps.
 */

static const char *parse_hex(const char *p, const char *end, uint64_t *v)
{
    uint64_t x = 0;
    const char *start = p;
    for (; p < end; p++) {
        char c = *p;
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            break;
        x = x * 16 + d;
    }
    *v = x;
    return p == start ? NULL : p;
}

static const char *parse_dec(const char *p, const char *end, uint64_t *v)
{
    uint64_t x = 0;
    const char *start = p;
    for (; p < end && *p >= '0' && *p <= '9'; p++)
        x = x * 10 + (uint64_t)(*p - '0');
    *v = x;
    return p == start ? NULL : p;
}

static const char *skip_spaces(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

/* One line "start-end perms offset maj:min inode [path]". */
static bool parse_map_line(prof_scratch_t *s, const char *p, const char *end, prof_map_t *m)
{
    uint64_t v;
    memset(m, 0, sizeof(*m));
    if ((p = parse_hex(p, end, &m->start)) == NULL || p >= end || *p++ != '-')
        return false;
    if ((p = parse_hex(p, end, &m->end)) == NULL)
        return false;
    p = skip_spaces(p, end);
    for (int i = 0; i < 4; i++) {
        if (p >= end || *p == ' ')
            return false;
        m->perms[i] = *p++;
    }
    p = skip_spaces(p, end);
    if ((p = parse_hex(p, end, &m->offset)) == NULL)
        return false;
    p = skip_spaces(p, end);
    if ((p = parse_hex(p, end, &v)) == NULL || p >= end || *p++ != ':')
        return false;
    m->dev_major = (unsigned)v;
    if ((p = parse_hex(p, end, &v)) == NULL)
        return false;
    m->dev_minor = (unsigned)v;
    p = skip_spaces(p, end);
    if ((p = parse_dec(p, end, &m->inode)) == NULL)
        return false;
    p = skip_spaces(p, end);
    const char *q = end;
    while (q > p && (q[-1] == ' ' || q[-1] == '\r'))
        q--;
    static const char deleted[] = " (deleted)";
    if ((size_t)(q - p) > sizeof(deleted) - 1 && memcmp(q - (sizeof(deleted) - 1), deleted, sizeof(deleted) - 1) == 0) {
        q -= sizeof(deleted) - 1;
        m->deleted = true;
    }
    m->path = prof_scratch_strndup(s, p, (size_t)(q - p));
    return m->path != NULL && m->end > m->start;
}

bool prof_maps_parse(prof_scratch_t *s, const char *text, size_t len, bool self, prof_maps_t *out)
{
    const char *end = text + len;
    size_t lines = 1;
    for (const char *p = text; p < end; p++)
        lines += *p == '\n';
    out->v = prof_scratch_alloc(s, lines * sizeof(prof_map_t));
    out->n = 0;
    out->self = self;
    if (out->v == NULL)
        return false;
    const char *p = text;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl != NULL ? nl : end;
        if (le > p && parse_map_line(s, p, le, &out->v[out->n])) {
            /* Keep them sorted (they are, in a real maps file). */
            if (out->n == 0 || out->v[out->n].start >= out->v[out->n - 1].start)
                out->n++;
        }
        p = le + 1;
    }
    return true;
}

bool prof_maps_read_self(prof_scratch_t *s, prof_maps_t *out, const char **textp, size_t *lenp)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    size_t cap = 64 << 10, len = 0;
    char *buf = prof_scratch_alloc(s, cap);
    while (buf != NULL) {
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        if (len == cap) {
            char *bigger = prof_scratch_alloc(s, cap * 2);
            if (bigger != NULL)
                memcpy(bigger, buf, len);
            buf = bigger;
            cap *= 2;
        }
    }
    close(fd);
    if (buf == NULL)
        return false;
    *textp = buf;
    *lenp = len;
    return prof_maps_parse(s, buf, len, true, out);
}

const prof_map_t *prof_maps_find(const prof_maps_t *m, uint64_t addr)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->v[mid].start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const prof_map_t *x = &m->v[lo - 1];
    return addr < x->end ? x : NULL;
}

const char *prof_basename(const char *path)
{
    const char *b = strrchr(path, '/');
    return b != NULL ? b + 1 : path;
}

/* ---------------------------------------------------------------------
 * ELF objects.
 */

typedef struct sym_ent {
    uint64_t addr, size;
    uint32_t name;   /* offset into the object's names */
    uint32_t rank;   /* preference among symbols at one address (higher wins) */
} sym_ent_t;

typedef struct elf_load {
    uint64_t off, vaddr, filesz;
} elf_load_t;

#define OBJ_MAX_LOADS 16

typedef struct sym_obj {
    struct sym_obj *next;
    uint64_t inode;
    unsigned dev_major, dev_minor;
    const char *path;
    bool ok;                   /* the file was read and is an ELF object */
    bool symtab;               /* names come from .symtab (else .dynsym) */
    unsigned nload;
    elf_load_t load[OBJ_MAX_LOADS];
    sym_ent_t *syms;
    size_t nsyms, syms_bytes;
    char *names;
    size_t names_bytes;
    unsigned build_id_len;
    unsigned char build_id[64];
    /* Line tables: read in place from the file's mapping, kept (read-only,
     * page cache) for objects that have them. */
    prof_dwarf_t dwarf;
    bool has_dwarf;
} sym_obj_t;

static sym_obj_t *objs;
static ma_mutex_t sym_lock = MA_MUTEX_INITIALIZER;

/* Bounds-checked reads from the mapped file. */
typedef struct elf_file {
    const unsigned char *p;
    size_t size;
} elf_file_t;

static bool in_file(const elf_file_t *f, uint64_t off, uint64_t len)
{
    return off <= f->size && len <= f->size - off;
}

static bool rd(const elf_file_t *f, uint64_t off, void *dst, size_t len)
{
    if (!in_file(f, off, len))
        return false;
    memcpy(dst, f->p + off, len);
    return true;
}

static void scan_notes(sym_obj_t *o, const elf_file_t *f, uint64_t off, uint64_t size)
{
    if (!in_file(f, off, size))
        return;
    uint64_t pos = 0;
    while (o->build_id_len == 0 && pos + sizeof(Elf64_Nhdr) <= size) {
        Elf64_Nhdr nh;
        rd(f, off + pos, &nh, sizeof(nh));
        uint64_t name_off = pos + sizeof(nh);
        uint64_t desc_off = name_off + MA_ALIGN_UP((uint64_t)nh.n_namesz, 4);
        uint64_t next = desc_off + MA_ALIGN_UP((uint64_t)nh.n_descsz, 4);
        if (next > size || next <= pos)
            break;
        if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && memcmp(f->p + off + name_off, "GNU", 4) == 0 &&
            nh.n_descsz > 0 && nh.n_descsz <= sizeof(o->build_id)) {
            memcpy(o->build_id, f->p + off + desc_off, nh.n_descsz);
            o->build_id_len = nh.n_descsz;
        }
        pos = next;
    }
}

static unsigned leading_underscores(const char *s)
{
    unsigned n = 0;
    while (s[n] == '_')
        n++;
    return n;
}

/* Which of several names at one address to show: a function over an
 * untyped label, global over weak over local, fewer leading underscores
 * (malloc rather than __libc_malloc). */
static uint32_t sym_rank(unsigned type, unsigned bind, const char *name)
{
    uint32_t t = type == STT_FUNC ? 3 : type == STT_GNU_IFUNC ? 2 : 1;
    uint32_t b = bind == STB_GLOBAL ? 3 : bind == STB_WEAK ? 2 : 1;
    uint32_t u = 15 - MA_MIN(leading_underscores(name), 15u);
    return t << 8 | b << 4 | u;
}

static int sym_cmp(const void *a, const void *b, void *ctx)
{
    const sym_ent_t *x = a, *y = b;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank > y->rank ? -1 : 1; /* best first */
    return strcmp((const char *)ctx + x->name, (const char *)ctx + y->name);
}

typedef struct symtab_ref {
    Elf64_Shdr sym, str;
    bool found;
} symtab_ref_t;

static bool keep_symbol(const elf_file_t *f, const Elf64_Ehdr *eh, const Elf64_Sym *s, const symtab_ref_t *t,
                        const char **name)
{
    unsigned type = ELF64_ST_TYPE(s->st_info);
    if (s->st_shndx == SHN_UNDEF || s->st_shndx >= SHN_LORESERVE || s->st_value == 0 || s->st_name == 0)
        return false;
    if (type != STT_FUNC && type != STT_GNU_IFUNC) {
        if (type != STT_NOTYPE)
            return false;
        /* An untyped label (assembly) counts when it is in code. */
        Elf64_Shdr sh;
        if (s->st_shndx >= eh->e_shnum ||
            !rd(f, eh->e_shoff + (uint64_t)s->st_shndx * sizeof(Elf64_Shdr), &sh, sizeof(sh)) ||
            !(sh.sh_flags & SHF_EXECINSTR))
            return false;
    }
    if (s->st_name >= t->str.sh_size)
        return false;
    const char *n = (const char *)f->p + t->str.sh_offset + s->st_name;
    size_t max = t->str.sh_size - s->st_name;
    if (memchr(n, '\0', max) == NULL || n[0] == '\0' || n[0] == '$' || n[0] == '.')
        return false;
    *name = n;
    return true;
}

static void *map_long_lived(size_t bytes, size_t *mapped)
{
    *mapped = PAGE_CEIL(MA_MAX(bytes, (size_t)1));
    return pages_map(*mapped, PAGE);
}

static void elf_read_symbols(sym_obj_t *o, const elf_file_t *f, const Elf64_Ehdr *eh)
{
    if (eh->e_shoff == 0 || eh->e_shentsize != sizeof(Elf64_Shdr) ||
        !in_file(f, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr)))
        return;
    symtab_ref_t t;
    memset(&t, 0, sizeof(t));
    for (unsigned want = SHT_SYMTAB;; want = SHT_DYNSYM) {
        for (unsigned i = 0; i < eh->e_shnum && !t.found; i++) {
            Elf64_Shdr sh;
            rd(f, eh->e_shoff + (uint64_t)i * sizeof(sh), &sh, sizeof(sh));
            if (sh.sh_type == SHT_NOTE && o->build_id_len == 0)
                scan_notes(o, f, sh.sh_offset, sh.sh_size);
            if (sh.sh_type != want || sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_link >= eh->e_shnum ||
                !in_file(f, sh.sh_offset, sh.sh_size))
                continue;
            Elf64_Shdr str;
            rd(f, eh->e_shoff + (uint64_t)sh.sh_link * sizeof(str), &str, sizeof(str));
            if (str.sh_type != SHT_STRTAB || !in_file(f, str.sh_offset, str.sh_size))
                continue;
            t.sym = sh;
            t.str = str;
            t.found = true;
            o->symtab = want == SHT_SYMTAB;
        }
        if (t.found || want == SHT_DYNSYM)
            break;
    }
    if (!t.found)
        return;
    size_t nsym = t.sym.sh_size / sizeof(Elf64_Sym), count = 0, bytes = 0;
    for (size_t i = 0; i < nsym; i++) {
        Elf64_Sym s;
        const char *name;
        rd(f, t.sym.sh_offset + i * sizeof(s), &s, sizeof(s));
        if (keep_symbol(f, eh, &s, &t, &name)) {
            count++;
            bytes += strlen(name) + 1;
        }
    }
    if (count == 0 || bytes >= UINT32_MAX)
        return;
    size_t sb, nb;
    sym_ent_t *syms = map_long_lived(count * sizeof(sym_ent_t), &sb);
    char *names = map_long_lived(bytes, &nb);
    if (syms == NULL || names == NULL) {
        if (syms != NULL)
            pages_unmap(syms, sb);
        if (names != NULL)
            pages_unmap(names, nb);
        return;
    }
    size_t k = 0, pos = 0;
    for (size_t i = 0; i < nsym && k < count; i++) {
        Elf64_Sym s;
        const char *name;
        rd(f, t.sym.sh_offset + i * sizeof(s), &s, sizeof(s));
        if (!keep_symbol(f, eh, &s, &t, &name))
            continue;
        size_t l = strlen(name) + 1;
        memcpy(names + pos, name, l);
        syms[k] = (sym_ent_t){s.st_value, s.st_size, (uint32_t)pos,
                              sym_rank(ELF64_ST_TYPE(s.st_info), ELF64_ST_BIND(s.st_info), name)};
        pos += l;
        k++;
    }
    prof_sort(syms, k, sizeof(sym_ent_t), sym_cmp, names);
    /* One entry per address (the best name, the largest size); an entry
     * without a size reaches to the next address. */
    size_t n = 0;
    for (size_t i = 0; i < k; i++) {
        if (n > 0 && syms[n - 1].addr == syms[i].addr) {
            syms[n - 1].size = MA_MAX(syms[n - 1].size, syms[i].size);
            continue;
        }
        syms[n++] = syms[i];
    }
    for (size_t i = 0; i < n; i++)
        if (syms[i].size == 0)
            syms[i].size = i + 1 < n ? syms[i + 1].addr - syms[i].addr : 4096;
    o->syms = syms;
    o->nsyms = n;
    o->syms_bytes = sb;
    o->names = names;
    o->names_bytes = nb;
}

/* The DWARF sections the line tables need (uncompressed only). */
static void elf_find_debug(sym_obj_t *o, const elf_file_t *f, const Elf64_Ehdr *eh)
{
    Elf64_Shdr names;
    if (eh->e_shoff == 0 || eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shstrndx >= eh->e_shnum ||
        !in_file(f, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr)) ||
        !rd(f, eh->e_shoff + (uint64_t)eh->e_shstrndx * sizeof(names), &names, sizeof(names)) ||
        !in_file(f, names.sh_offset, names.sh_size))
        return;
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        Elf64_Shdr sh;
        rd(f, eh->e_shoff + (uint64_t)i * sizeof(sh), &sh, sizeof(sh));
        if (sh.sh_type != SHT_PROGBITS || (sh.sh_flags & SHF_COMPRESSED) || sh.sh_name >= names.sh_size ||
            !in_file(f, sh.sh_offset, sh.sh_size))
            continue;
        const char *n = (const char *)f->p + names.sh_offset + sh.sh_name;
        size_t max = names.sh_size - sh.sh_name;
        const unsigned char *p = f->p + sh.sh_offset;
        if (strnlen(n, max) == max)
            continue;
        if (strcmp(n, ".debug_line") == 0) {
            o->dwarf.line = p;
            o->dwarf.line_size = sh.sh_size;
        } else if (strcmp(n, ".debug_line_str") == 0) {
            o->dwarf.line_str = p;
            o->dwarf.line_str_size = sh.sh_size;
        } else if (strcmp(n, ".debug_str") == 0) {
            o->dwarf.str = p;
            o->dwarf.str_size = sh.sh_size;
        }
    }
}

static void elf_read(sym_obj_t *o, const elf_file_t *f)
{
    Elf64_Ehdr eh;
    if (!rd(f, 0, &eh, sizeof(eh)) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64)
        return;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (eh.e_ident[EI_DATA] != ELFDATA2LSB)
        return;
#else
    if (eh.e_ident[EI_DATA] != ELFDATA2MSB)
        return;
#endif
    o->ok = true;
    if (eh.e_phoff != 0 && eh.e_phentsize == sizeof(Elf64_Phdr) &&
        in_file(f, eh.e_phoff, (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr))) {
        for (unsigned i = 0; i < eh.e_phnum; i++) {
            Elf64_Phdr ph;
            rd(f, eh.e_phoff + (uint64_t)i * sizeof(ph), &ph, sizeof(ph));
            if (ph.p_type == PT_LOAD && o->nload < OBJ_MAX_LOADS)
                o->load[o->nload++] = (elf_load_t){ph.p_offset, ph.p_vaddr, ph.p_filesz};
            else if (ph.p_type == PT_NOTE && o->build_id_len == 0)
                scan_notes(o, f, ph.p_offset, ph.p_filesz);
        }
    }
    elf_read_symbols(o, f, &eh);
    if (o->nsyms > 0)
        elf_find_debug(o, f, &eh);
}

static int open_object(const prof_maps_t *maps, const prof_map_t *m)
{
    int fd = -1;
    if (maps->self) {
        /* The file actually mapped, even if deleted or replaced since. */
        char p[96];
        ma_snprintf(p, sizeof(p), "/proc/self/map_files/%llx-%llx", (unsigned long long)m->start,
                    (unsigned long long)m->end);
        fd = open(p, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0 && m->path[0] == '/')
        fd = open(m->path, O_RDONLY | O_CLOEXEC);
    return fd;
}

static sym_obj_t *obj_load(const prof_maps_t *maps, const prof_map_t *m)
{
    size_t plen = strlen(m->path);
    sym_obj_t *o = base_alloc(sizeof(sym_obj_t), 16);
    char *path = base_alloc(plen + 1, 1);
    if (o == NULL || path == NULL)
        return NULL;
    memcpy(path, m->path, plen + 1);
    o->path = path;
    o->inode = m->inode;
    o->dev_major = m->dev_major;
    o->dev_minor = m->dev_minor;
    int saved = errno;
    int fd = open_object(maps, m);
    if (fd >= 0) {
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
            size_t size = (size_t)st.st_size;
            long r = ma_syscall(SYS_mmap, NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (!ma_sys_failed(r)) {
                void *p = (void *)r;
                elf_file_t f = {p, size};
                elf_read(o, &f);
                o->has_dwarf = prof_dwarf_init(&o->dwarf);
                if (!o->has_dwarf)
                    pages_unmap(p, size);
            }
        }
        close(fd);
    }
    errno = saved;
    o->next = objs;
    objs = o;
    return o;
}

/* The cached object for a mapping (read on first use); NULL for an
 * anonymous or special mapping. Under sym_lock. */
static sym_obj_t *obj_get(const prof_maps_t *maps, const prof_map_t *m)
{
    if (m->path[0] != '/')
        return NULL;
    for (sym_obj_t *o = objs; o != NULL; o = o->next)
        if (o->inode == m->inode && o->dev_major == m->dev_major && o->dev_minor == m->dev_minor &&
            strcmp(o->path, m->path) == 0)
            return o;
    return obj_load(maps, m);
}

static const sym_ent_t *obj_lookup(const sym_obj_t *o, uint64_t vaddr)
{
    size_t lo = 0, hi = o->nsyms;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (o->syms[mid].addr <= vaddr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const sym_ent_t *s = &o->syms[lo - 1];
    return vaddr - s->addr < s->size ? s : NULL;
}

static bool same_str(const char *a, const char *b)
{
    return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* File and line of out->vaddr in the function s, see prof_sym_t. */
static void sym_lines(const sym_obj_t *o, const sym_ent_t *s, prof_sym_t *out)
{
    const char *dir, *file, *fdir, *ffile;
    unsigned line, fline;
    bool at = prof_dwarf_line(&o->dwarf, out->vaddr, &dir, &file, &line);
    bool start = prof_dwarf_line(&o->dwarf, s->addr, &fdir, &ffile, &fline);
    if (start) {
        out->file_dir = fdir;
        out->file = ffile;
        out->fn_line = fline;
        if (at && same_str(dir, fdir) && same_str(file, ffile))
            out->line = line;
    } else if (at) {
        out->file_dir = dir;
        out->file = file;
        out->line = line;
    }
}

bool prof_symbolize(const prof_maps_t *maps, uint64_t addr, prof_sym_t *out)
{
    memset(out, 0, sizeof(*out));
    const prof_map_t *m = prof_maps_find(maps, addr);
    out->map = m;
    if (m == NULL)
        return false;
    uint64_t fo = addr - m->start + m->offset;
    out->vaddr = fo;
    ma_mutex_lock(&sym_lock);
    sym_obj_t *o = obj_get(maps, m);
    if (o != NULL && o->ok) {
        out->object_read = true;
        for (unsigned i = 0; i < o->nload; i++) {
            const elf_load_t *l = &o->load[i];
            if (fo >= l->off && fo - l->off < l->filesz) {
                out->vaddr = fo - l->off + l->vaddr;
                break;
            }
        }
        const sym_ent_t *s = obj_lookup(o, out->vaddr);
        if (s != NULL) {
            out->name = o->names + s->name;
            out->fn_offset = out->vaddr - s->addr;
            if (o->has_dwarf)
                sym_lines(o, s, out);
        }
    }
    ma_mutex_unlock(&sym_lock);
    if (out->name == NULL && !out->object_read && maps->self && m->path[0] != '\0') {
        /* No readable file (the vdso, a file gone with no map_files):
         * what the loader knows of its exports. */
        Dl_info info;
        if (dladdr((void *)(uintptr_t)addr, &info) != 0 && info.dli_sname != NULL && info.dli_saddr != NULL) {
            out->name = info.dli_sname;
            out->fn_offset = addr - (uint64_t)(uintptr_t)info.dli_saddr;
        }
    }
    return out->name != NULL;
}

size_t prof_sym_format(const prof_sym_t *sym, uint64_t addr, char *buf, size_t len)
{
    if (sym->name != NULL)
        return ma_snprintf(buf, len, "%s", sym->name);
    if (sym->map != NULL && sym->map->path[0] != '\0')
        return ma_snprintf(buf, len, "%s+0x%llx", prof_basename(sym->map->path), (unsigned long long)sym->vaddr);
    return ma_snprintf(buf, len, "0x%llx", (unsigned long long)addr);
}

bool prof_build_id(const prof_maps_t *maps, const prof_map_t *map, char *hex, size_t len)
{
    bool ok = false;
    ma_mutex_lock(&sym_lock);
    sym_obj_t *o = obj_get(maps, map);
    if (o != NULL && o->build_id_len > 0 && len > 2 * o->build_id_len) {
        static const char digits[] = "0123456789abcdef";
        for (unsigned i = 0; i < o->build_id_len; i++) {
            hex[2 * i] = digits[o->build_id[i] >> 4];
            hex[2 * i + 1] = digits[o->build_id[i] & 15];
        }
        hex[2 * o->build_id_len] = '\0';
        ok = true;
    }
    ma_mutex_unlock(&sym_lock);
    return ok;
}
