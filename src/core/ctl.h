/*
 * ctl: mallctl, mallctlnametomib, mallctlbymib.
 *
 * One table (ctl.c) gives every name (with <i> for numeric components),
 * its jemalloc type, whether it reads and/or writes, and its handler.
 * opt.<name> comes from the options table (conf.c), stats.* names from the
 * stats table (stats.c): nothing is listed twice.
 *
 * MIBs: a numeric component is its number; a literal component is its
 * word's index in the list of every literal word in the tables.
 */
#ifndef MYALLOC_CTL_H
#define MYALLOC_CTL_H

#include <sys/types.h>

#include "../common/common.h"

#define CTL_MAX_DEPTH 8

typedef enum {
    CTL_VOID,
    CTL_BOOL,
    CTL_UNSIGNED,
    CTL_UINT32,
    CTL_SIZE,
    CTL_SSIZE,
    CTL_UINT64,
    CTL_INT64,
    CTL_STRING,   /* const char * */
    CTL_PTR,      /* uint64_t * (thread.allocatedp) */
} ctl_type_t;

typedef union ctl_val {
    bool b;
    unsigned u;
    uint32_t u32;
    size_t z;
    ssize_t zs;
    uint64_t u64;
    int64_t i64;
    const char *s;
    void *p;
} ctl_val_t;

typedef struct ctl_req {
    size_t idx[CTL_MAX_DEPTH];  /* the numeric components, in order */
    unsigned nidx;
    bool write;                 /* in holds the new value */
    bool read;                  /* the old value is wanted */
    ctl_val_t in;
    const void *extra;          /* the entry's argument (opt.*, stats.*) */
} ctl_req_t;

/* Returns 0 or an errno value; sets *out to the current (old) value. */
typedef int ctl_fn_t(ctl_req_t *r, ctl_val_t *out);

#define CTL_R 1
#define CTL_W 2
#define CTL_RW 3

typedef struct ctl_entry {
    const char *name;
    ctl_type_t type;
    unsigned access;
    ctl_fn_t *fn;
    const void *extra;
} ctl_entry_t;

size_t ctl_type_size(ctl_type_t t);

/* Visit every entry (every table) whose name starts with prefix. */
typedef void ctl_walk_fn(const ctl_entry_t *e, void *arg);
void ctl_walk(const char *prefix, ctl_walk_fn *fn, void *arg);

/* Read an entry's value with the given indices for its <i> components. */
int ctl_read_entry(const ctl_entry_t *e, const size_t *idx, unsigned nidx, ctl_val_t *out);

/* A name -> entry lookup over every table (also used by the name fuzzer). */
int ctl_lookup(const char *name, ctl_entry_t *entry, ctl_req_t *req);

#endif
