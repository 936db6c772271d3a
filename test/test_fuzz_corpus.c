/*
 * The fuzz targets' entry points (fuzz/fuzz_conf.c, fuzz/fuzz_ctl.c) in
 * the normal suite: every file of the seed corpus (fuzz/corpus/), then a
 * few thousand inputs made from a fixed seed out of the fuzzers'
 * dictionaries and random bytes. The entry points abort() on a broken
 * invariant; here they run on the real allocator (the test links
 * libmyalloc.a), so CI exercises them without clang. `make fuzz` runs the
 * same functions under libFuzzer with ASan and UBSan.
 */
#include <dirent.h>
#include <limits.h>

#define MYALLOC_FUZZ_NO_ENTRY
#include "../fuzz/fuzz_conf.c"
#include "../fuzz/fuzz_ctl.c"
#include "sizeclass/sizeclass.h"
#include "test_util.h"

typedef int entry_fn(const uint8_t *, size_t);

/* Feed every file of dir; returns how many. */
static unsigned run_corpus(const char *dir, entry_fn *fn)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "no %s (run from the repository root)", dir);
    unsigned n = 0;
    struct dirent *de;
    static uint8_t buf[1 << 16];
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "rb");
        cr_assert_not_null(f, "%s", path);
        size_t len = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        fn(buf, len);
        n++;
    }
    closedir(d);
    return n;
}

/* The quoted tokens of a libFuzzer dictionary (no escapes but \xNN). */
typedef struct dict {
    char tok[256][64];
    size_t len[256];
    unsigned n;
} dict_t;

static void load_dict(const char *path, dict_t *d)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no %s", path);
    char line[256];
    d->n = 0;
    while (fgets(line, sizeof(line), f) != NULL && d->n < 256) {
        char *q = strchr(line, '"');
        if (line[0] == '#' || q == NULL)
            continue;
        size_t k = 0;
        for (char *s = q + 1; *s && *s != '"' && k < 63; s++) {
            if (s[0] == '\\' && s[1] == 'x') {
                unsigned v;
                sscanf(s + 2, "%2x", &v);
                d->tok[d->n][k++] = (char)v;
                s += 3;
            } else {
                d->tok[d->n][k++] = *s;
            }
        }
        d->len[d->n++] = k;
    }
    fclose(f);
    cr_assert_gt(d->n, 10, "%s has too few entries", path);
}

static bool dict_has(const dict_t *d, const char *tok, size_t len)
{
    for (unsigned i = 0; i < d->n; i++)
        if (d->len[i] == len && memcmp(d->tok[i], tok, len) == 0)
            return true;
    return false;
}

/* The dictionaries hold every name the parsers know, so that the fuzzers
 * build valid inputs out of them instead of having to hit each name by
 * chance: every option with its colon and the values of those that take
 * a word, every word of every mallctl name.
 * A name added to a table and not to the dictionary fails here. */
Test(fuzz_corpus, conf_dict_names_every_option)
{
    static dict_t d;
    load_dict("fuzz/conf.dict", &d);
    for (unsigned i = 0; i < conf_noptions; i++) {
        char tok[64];
        snprintf(tok, sizeof(tok), "%s:", conf_options[i].name);
        cr_expect(dict_has(&d, tok, strlen(tok)), "fuzz/conf.dict lacks \"%s\"", tok);
        for (const char *const *c = conf_options[i].choices; c != NULL && *c != NULL; c++)
            cr_expect(dict_has(&d, *c, strlen(*c)), "fuzz/conf.dict lacks \"%s\" (a value of %s)", *c,
                      conf_options[i].name);
    }
}

static void expect_words_in_dict(const ctl_entry_t *e, void *arg)
{
    const dict_t *d = arg;
    for (const char *s = e->name; *s != '\0';) {
        size_t n = strcspn(s, ".");
        if (!(n == 3 && memcmp(s, "<i>", 3) == 0))
            cr_expect(dict_has(d, s, n), "fuzz/ctl.dict lacks \"%.*s\" (of %s)", (int)n, s, e->name);
        s += n + (s[n] == '.');
    }
}

Test(fuzz_corpus, ctl_dict_holds_every_word_of_the_names)
{
    static dict_t d;
    load_dict("fuzz/ctl.dict", &d);
    ctl_walk("", expect_words_in_dict, &d);
}

/* An input of dictionary tokens, digits, separators and random bytes. */
static size_t gen_input(uint64_t *seed, const dict_t *d, uint8_t *out, size_t cap, bool mode_byte)
{
    size_t len = 0;
    if (mode_byte)
        out[len++] = (uint8_t)(tu_rand(seed) % 4);
    unsigned parts = 1 + (unsigned)(tu_rand(seed) % 12);
    for (unsigned i = 0; i < parts && len + 64 < cap; i++) {
        uint64_t r = tu_rand(seed);
        switch (r % 6) {
        case 0:
        case 1:
        case 2: {
            unsigned t = (unsigned)(tu_rand(seed) % d->n);
            memcpy(out + len, d->tok[t], d->len[t]);
            len += d->len[t];
            break;
        }
        case 3:
            len += (size_t)snprintf((char *)out + len, cap - len, "%llu",
                                    (unsigned long long)(tu_rand(seed) % (r & 64 ? 5000 : 40)));
            break;
        case 4:
            out[len++] = (r >> 8) & 1 ? '.' : ',';
            if ((r >> 9) & 1)
                out[len++] = ':';
            break;
        default: {
            unsigned k = (unsigned)(tu_rand(seed) % 8);
            for (unsigned j = 0; j < k; j++)
                out[len++] = (uint8_t)tu_rand(seed);
            break;
        }
        }
    }
    return len;
}

/* The options a few readers use, to see that fuzz_conf restores them. */
static void options_snapshot(char *out, size_t outlen)
{
    size_t o = 0;
    for (unsigned i = 0; i < conf_noptions; i++) {
        char name[128];
        snprintf(name, sizeof(name), "opt.%s", conf_options[i].name);
        uint64_t v = 0;
        size_t len = ctl_type_size((ctl_type_t)conf_options[i].ctl_type);
        cr_assert_eq(mallctl(name, &v, &len, NULL, 0), 0, "%s", name);
        if (conf_options[i].ctl_type == CTL_STRING)
            o += (size_t)snprintf(out + o, outlen - o, "%s=%s;", name, *(const char **)&v);
        else
            o += (size_t)snprintf(out + o, outlen - o, "%s=%llu;", name, (unsigned long long)v);
        cr_assert_lt(o, outlen);
    }
}

Test(fuzz_corpus, conf_seed_corpus)
{
    static char before[1 << 15], after[1 << 15];
    options_snapshot(before, sizeof(before));
    unsigned n = run_corpus("fuzz/corpus/conf", fuzz_conf_input);
    cr_assert_geq(n, 5, "the conf corpus has %u files", n);
    options_snapshot(after, sizeof(after));
    cr_assert_str_eq(before, after, "fuzz_conf_input left the options changed");
}

Test(fuzz_corpus, conf_generated_inputs)
{
    static dict_t d;
    load_dict("fuzz/conf.dict", &d);
    static char before[1 << 15], after[1 << 15];
    options_snapshot(before, sizeof(before));
    uint64_t seed = 20240611;
    static uint8_t buf[4096];
    for (int i = 0; i < 4000; i++) {
        size_t len;
        if (i % 5 == 4) {
            len = tu_rand(&seed) % 200;
            for (size_t j = 0; j < len; j++)
                buf[j] = (uint8_t)tu_rand(&seed);
        } else {
            len = gen_input(&seed, &d, buf, sizeof(buf), false);
        }
        fuzz_conf_input(buf, len);
    }
    /* Long inputs: past every buffer the parser has. */
    memset(buf, 'a', sizeof(buf));
    fuzz_conf_input(buf, sizeof(buf));
    memcpy(buf, "prof_prefix:", 12);
    fuzz_conf_input(buf, sizeof(buf));
    options_snapshot(after, sizeof(after));
    cr_assert_str_eq(before, after, "fuzz_conf_input left the options changed");
}

Test(fuzz_corpus, ctl_seed_corpus)
{
    unsigned n = run_corpus("fuzz/corpus/ctl", fuzz_ctl_input);
    cr_assert_geq(n, 5, "the ctl corpus has %u files", n);
}

/* Real names (every pattern of the tables, <i> replaced by numbers near
 * the edges), some mutated: near misses reach the parser's corners. */
typedef struct patterns {
    char name[1024][96];
    unsigned n;
} patterns_t;

static void collect_pattern(const ctl_entry_t *e, void *arg)
{
    patterns_t *p = arg;
    if (p->n < 1024 && strlen(e->name) < sizeof(p->name[0]))
        strcpy(p->name[p->n++], e->name);
}

static size_t gen_name(uint64_t *seed, const patterns_t *pat, const dict_t *d, uint8_t *out, size_t cap)
{
    static const size_t edges[] = {0, 1, 2, 3, SC_NBINS - 1, SC_NBINS, SC_NSIZES - SC_NBINS - 1,
                                    SC_NSIZES - SC_NBINS, 4095, 4096, 4097, 99999};
    size_t len = 0;
    out[len++] = (uint8_t)(tu_rand(seed) % 4);
    const char *p = pat->name[tu_rand(seed) % pat->n];
    while (*p && len + 24 < cap) {
        if (strncmp(p, "<i>", 3) == 0) {
            size_t v = tu_rand(seed) % 3 ? edges[tu_rand(seed) % MA_ARRAY_LEN(edges)] : tu_rand(seed) % 100;
            len += (size_t)snprintf((char *)out + len, cap - len, "%zu", v);
            p += 3;
        } else {
            out[len++] = (uint8_t)*p++;
        }
    }
    unsigned muts = tu_rand(seed) % 2 ? 0 : 1 + (unsigned)(tu_rand(seed) % 3);
    for (unsigned m = 0; m < muts && len > 1; m++) {
        size_t at = 1 + tu_rand(seed) % (len - 1);
        switch (tu_rand(seed) % 4) {
        case 0: /* delete */
            memmove(out + at, out + at + 1, len - at - 1);
            len--;
            break;
        case 1: /* replace */
            out[at] = (uint8_t)"._0x9\xff"[tu_rand(seed) % 6];
            break;
        case 2: /* truncate */
            len = at;
            break;
        default: { /* insert a token */
            unsigned t = (unsigned)(tu_rand(seed) % d->n);
            if (len + d->len[t] < cap) {
                memmove(out + at + d->len[t], out + at, len - at);
                memcpy(out + at, d->tok[t], d->len[t]);
                len += d->len[t];
            }
            break;
        }
        }
    }
    /* Bytes for mode 1's component replacement. */
    if (len + 10 < cap && tu_rand(seed) % 2) {
        out[len++] = 0;
        for (int k = 0; k < 9; k++)
            out[len++] = (uint8_t)(k < 7 ? 0 : tu_rand(seed));
    }
    return len;
}

Test(fuzz_corpus, ctl_generated_inputs)
{
    static dict_t d;
    load_dict("fuzz/ctl.dict", &d);
    uint64_t seed = 77;
    static uint8_t buf[1024];
    unsigned found = 0;
    static patterns_t pat;
    ctl_walk("", collect_pattern, &pat);
    cr_assert_gt(pat.n, 100);
    for (int i = 0; i < 5000; i++) {
        size_t len;
        if (i % 5 == 4) {
            len = tu_rand(&seed) % 40;
            for (size_t j = 0; j < len; j++)
                buf[j] = (uint8_t)tu_rand(&seed);
        } else if (i % 5 == 3) {
            len = gen_input(&seed, &d, buf, sizeof(buf), true);
        } else {
            len = gen_name(&seed, &pat, &d, buf, sizeof(buf));
        }
        fuzz_ctl_input(buf, len);
        /* How many were names that exist (the generator must reach them). */
        if (len > 1) {
            char name[FUZZ_CTL_NAMEMAX];
            fuzz_ctl_name(buf + 1, len - 1, name);
            ctl_entry_t e;
            ctl_req_t req;
            memset(&req, 0, sizeof(req));
            found += ctl_lookup(name, &e, &req) == 0;
        }
    }
    cr_assert_geq(found, 1000, "only %u of the generated names exist", found);
    /* Every real name, in each mode. */
    static const char *names[] = {"stats.arenas.0.bins.1.nmalloc", "arenas.lextent.3.size", "thread.arena",
                                  "opt.prof_bt", "arena.0.purge", "stats.allocated"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        for (uint8_t mode = 0; mode < 4; mode++) {
            size_t n = strlen(names[i]);
            buf[0] = mode;
            memcpy(buf + 1, names[i], n);
            memcpy(buf + 1 + n, "\0\002\000\000\000\000\000\000\000\003", 10);
            fuzz_ctl_input(buf, n + 11);
        }
    }
}
