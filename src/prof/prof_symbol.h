/*
 * prof_symbol: function names for return addresses, with libc only.
 *
 * A frame is located in a memory map (/proc/self/maps, or the
 * MAPPED_LIBRARIES section of a text profile read by tools/myalloc-prof),
 * translated to the object's link-time address through its ELF program
 * headers, and named from the object's own symbol table: .symtab when the
 * file has one (static functions too), .dynsym otherwise (a stripped
 * library), and, when the object has DWARF line tables, its source file
 * and line (prof_dwarf.c). Names are left as they are in the object: C++
 * names stay mangled (pprof demangles them itself; pipe folded stacks
 * through c++filt).
 *
 * Objects are read from mmap'd files; each object's function symbols are
 * copied once into a sorted table in pages_map'd memory and cached for the
 * life of the process (keyed by device, inode and path, so a rebuilt file is
 * read afresh). In this process's own maps a file is opened through
 * /proc/self/map_files first, which is the very file mapped even after it
 * was deleted or replaced. Nothing here calls malloc or takes the dynamic
 * loader's locks (dladdr is only the last resort for a mapping without a
 * readable file, see prof_symbol.c), so it runs inside any dump.
 *
 * Symbolisation happens at dump time only, never when sampling.
 */
#ifndef MYALLOC_PROF_SYMBOL_H
#define MYALLOC_PROF_SYMBOL_H

#include "prof_scratch.h"

/* One line of a maps file. */
typedef struct prof_map {
    uint64_t start, end;   /* [start, end) */
    uint64_t offset;       /* file offset of start */
    uint64_t inode;
    unsigned dev_major, dev_minor;
    char perms[5];         /* "r-xp" */
    bool deleted;          /* the path ended in " (deleted)" (stripped from path) */
    const char *path;      /* "" for an anonymous mapping; "[vdso]", "[stack]", ... */
} prof_map_t;

typedef struct prof_maps {
    prof_map_t *v;         /* sorted by start */
    size_t n;
    bool self;             /* this process's maps: files may be opened by address */
} prof_maps_t;

/* Parse maps text (the format of /proc/<pid>/maps) into scratch memory. */
bool prof_maps_parse(prof_scratch_t *s, const char *text, size_t len, bool self, prof_maps_t *out);
/* Read and parse /proc/self/maps; the raw text is left in *text, *len. */
bool prof_maps_read_self(prof_scratch_t *s, prof_maps_t *out, const char **text, size_t *len);
/* The mapping holding addr, or NULL. */
const prof_map_t *prof_maps_find(const prof_maps_t *m, uint64_t addr);

typedef struct prof_sym {
    const char *name;      /* the function, or NULL when unknown */
    uint64_t fn_offset;    /* address - the function's start */
    /* From the object's DWARF line table (built with -g), when the name
     * is known: the function's source file (a directory, which may be
     * NULL, and a name), the line of the address and the function's first
     * line. line is 0 when the address's row is in another file (code
     * inlined from elsewhere: the table says where that code came from,
     * not where the function called it). */
    const char *file_dir, *file;
    unsigned line, fn_line;
    const prof_map_t *map; /* the mapping holding the address, or NULL */
    uint64_t vaddr;        /* the address as the object's link-time address */
    bool object_read;      /* the object's ELF file could be read */
} prof_sym_t;

/* Name addr (an instruction address: pass a return address minus 1).
 * Returns whether a function name was found; out is filled either way.
 * Strings stay valid for the life of the process. Thread-safe. */
bool prof_symbolize(const prof_maps_t *maps, uint64_t addr, prof_sym_t *out);

/* A printable name for a frame: the function, else "<object>+0x<vaddr>",
 * else "0x<addr>". Returns the length written (like snprintf). */
size_t prof_sym_format(const prof_sym_t *sym, uint64_t addr, char *buf, size_t len);

/* The GNU build id of the object mapped by map, as lowercase hex into hex
 * (NUL-terminated); false when it has none or its file cannot be read. */
bool prof_build_id(const prof_maps_t *maps, const prof_map_t *map, char *hex, size_t len);

/* The last component of path. */
const char *prof_basename(const char *path);

#endif
