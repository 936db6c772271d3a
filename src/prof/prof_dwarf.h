/*
 * prof_dwarf: source file and line of an address from an object's DWARF
 * line tables (.debug_line, versions 2 to 5), for prof_symbol.c.
 *
 * The sections are read in place from the object's read-only file mapping,
 * which prof_symbol keeps for objects that have them (address space and
 * page cache, no anonymous memory). prof_dwarf_init runs every line
 * program once to index the units by address range; a lookup then runs the
 * one program that covers the address. Compressed sections (-gz) are not
 * read (that would need zlib). No malloc.
 */
#ifndef MYALLOC_PROF_DWARF_H
#define MYALLOC_PROF_DWARF_H

#include "../common/common.h"

typedef struct prof_dwarf_unit prof_dwarf_unit_t;

typedef struct prof_dwarf {
    const unsigned char *line, *line_str, *str; /* sections, or NULL */
    size_t line_size, line_str_size, str_size;
    prof_dwarf_unit_t *units;                   /* sorted by lo */
    size_t nunits, units_bytes;
} prof_dwarf_t;

/* Index the line programs; false when there is nothing usable. */
bool prof_dwarf_init(prof_dwarf_t *d);

/* The row covering vaddr: its file as a directory (may be NULL) and a
 * name, and its line. Strings point into the sections. */
bool prof_dwarf_line(const prof_dwarf_t *d, uint64_t vaddr, const char **dir, const char **file, unsigned *line);

#endif
