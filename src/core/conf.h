/*
 * conf: the options. One table (conf.c) names every option, its type, its
 * storage and its bounds; MYALLOC_CONF parsing, the malloc_conf global and
 * mallctl's opt.* names are all driven by it.
 */
#ifndef MYALLOC_CONF_H
#define MYALLOC_CONF_H

#include <sys/types.h>

#include "../common/common.h"
#include "ctl.h"

#define CONF_STRMAX 1024

typedef enum {
    CONF_BOOL,    /* bool */
    CONF_UNSIGNED,/* unsigned */
    CONF_SIZE,    /* size_t */
    CONF_SSIZE,   /* ssize_t (e.g. -1 = never) */
    CONF_UINT64,  /* uint64_t */
    CONF_STRING,  /* char[CONF_STRMAX] */
    CONF_CHOICE,  /* unsigned index into choices; mallctl reads the name */
} conf_type_t;

typedef struct conf_option {
    const char *name;
    conf_type_t type;
    int ctl_type;                 /* the type mallctl("opt.<name>") has (a ctl_type_t) */
    void *ptr;
    int64_t min, max;             /* numbers: accepted range */
    const char *const *choices;   /* CONF_CHOICE: NULL-terminated */
    const char *help;             /* one line for doc/options and errors */
} conf_option_t;

extern const conf_option_t conf_options[];
extern const unsigned conf_noptions;

extern bool opt_abort_conf;
extern bool opt_stats_print;
extern char opt_stats_print_opts[64];
extern unsigned opt_narenas;   /* 0 = automatic (4 x CPUs) */

/* Parse the malloc_conf global and then MYALLOC_CONF (later wins). */
void conf_init(void);

/* Parse one options string. Every bad pair is reported on stderr (one line
 * naming it, the default kept) when report is set; returns the number of
 * bad pairs. */
unsigned conf_parse(const char *source, const char *s, bool report);

const conf_option_t *conf_find(const char *name, size_t len);

/* Set an option from its text form; false when the value is invalid. */
bool conf_set(const conf_option_t *o, const char *v, size_t vlen);

#endif
