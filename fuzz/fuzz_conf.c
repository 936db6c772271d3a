/*
 * fuzz_conf: the option parser (conf_parse, what MYALLOC_CONF and the
 * malloc_conf global go through) on arbitrary bytes.
 *
 * Built two ways: as a libFuzzer target by `make fuzz` (clang,
 * -fsanitize=fuzzer,address,undefined; see fuzz/README.md), and included
 * by test/test_fuzz_corpus.c (with MYALLOC_FUZZ_NO_ENTRY defined) so that
 * the normal test suite runs the corpus through the same function.
 *
 * Every input leaves the options as it found them (they are saved before
 * and restored after), so inputs do not depend on each other.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/conf.h"

/* Bytes an option's storage takes (strings: their arrays). */
static size_t fuzz_conf_storage(const conf_option_t *o)
{
    switch (o->type) {
    case CONF_BOOL:
        return sizeof(bool);
    case CONF_UNSIGNED:
    case CONF_CHOICE:
        return sizeof(unsigned);
    case CONF_SIZE:
        return sizeof(size_t);
    case CONF_SSIZE:
        return sizeof(ssize_t);
    case CONF_UINT64:
        return sizeof(uint64_t);
    case CONF_STRING:
        return 0; /* saved and restored as C strings */
    }
    return 0;
}

#define FUZZ_CONF_MAXOPT 64
#define FUZZ_CONF_SAVE 1100

static unsigned char fuzz_conf_saved[FUZZ_CONF_MAXOPT][FUZZ_CONF_SAVE];

static void fuzz_conf_save(void)
{
    for (unsigned i = 0; i < conf_noptions && i < FUZZ_CONF_MAXOPT; i++) {
        const conf_option_t *o = &conf_options[i];
        if (o->type == CONF_STRING) {
            size_t n = strlen(o->ptr) + 1;
            if (n > FUZZ_CONF_SAVE)
                abort();
            memcpy(fuzz_conf_saved[i], o->ptr, n);
        } else {
            memcpy(fuzz_conf_saved[i], o->ptr, fuzz_conf_storage(o));
        }
    }
}

static void fuzz_conf_restore(void)
{
    for (unsigned i = 0; i < conf_noptions && i < FUZZ_CONF_MAXOPT; i++) {
        const conf_option_t *o = &conf_options[i];
        if (o->type == CONF_STRING)
            memcpy(o->ptr, fuzz_conf_saved[i], strlen((char *)fuzz_conf_saved[i]) + 1);
        else
            memcpy(o->ptr, fuzz_conf_saved[i], fuzz_conf_storage(o));
    }
}

/* Parse data as an options string; abort() on a broken invariant. */
int fuzz_conf_input(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    fuzz_conf_save();
    unsigned bad = conf_parse("fuzz", s, false);
    /* At most one bad pair per comma-separated part. */
    size_t len = strlen(s), parts = 1;
    for (size_t i = 0; i < len; i++)
        parts += s[i] == ',';
    if (bad > parts)
        abort();
    /* Whatever was set is a valid value: in range, a known choice, a
     * string that fits. */
    for (unsigned i = 0; i < conf_noptions; i++) {
        const conf_option_t *o = &conf_options[i];
        int64_t v;
        switch (o->type) {
        case CONF_UNSIGNED:
            v = *(unsigned *)o->ptr;
            break;
        case CONF_SIZE:
            v = (int64_t)*(size_t *)o->ptr;
            break;
        case CONF_SSIZE:
            v = *(ssize_t *)o->ptr;
            break;
        case CONF_UINT64:
            v = (int64_t)*(uint64_t *)o->ptr;
            break;
        case CONF_CHOICE: {
            unsigned n = 0;
            while (o->choices[n] != NULL)
                n++;
            if (*(unsigned *)o->ptr >= n)
                abort();
            continue;
        }
        case CONF_STRING:
            if (strlen(o->ptr) >= CONF_STRMAX)
                abort();
            continue;
        default:
            continue;
        }
        /* Values the parser accepted are within the bounds (defaults may
         * lie outside them, e.g. 0 meaning "automatic"). */
        if (memcmp(o->ptr, fuzz_conf_saved[i], fuzz_conf_storage(o)) != 0 && (v < o->min || v > o->max))
            abort();
    }
    /* Parsing the same string again gives the same count. */
    if (conf_parse("fuzz", s, false) != bad)
        abort();
    fuzz_conf_restore();
    free(s);
    return 0;
}

#ifndef MYALLOC_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_conf_input(data, size);
}
#endif
