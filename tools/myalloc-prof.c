/*
 * myalloc-prof: read a text heap profile and print where the memory is, in
 * one command, with no jeprof, Perl or binutils.
 *
 *     build/myalloc-prof [options] PROFILE.heap
 *
 * PROFILE is a dump in the gperftools heap format (prof_format:text, the
 * default), from myalloc or any writer of `@ heap_v2/R` profiles. Each
 * record holds n sampled objects of one size Z = b/n, each sampled with
 * probability p = 1 - exp(-Z/R); the estimates are the readers' own
 *
 *     objects = n / p      bytes = b / p
 *     standard error of bytes = Z sqrt(n (1 - p)) / p   (of objects: sqrt(n (1 - p)) / p)
 *
 * and a stack's error combines its records' as the square root of the sum
 * of their variances. Residency comes from the "# myalloc resident=..."
 * lines myalloc writes after each record (raw bytes, unbiased the same way).
 *
 * Frames are named from MAPPED_LIBRARIES with myalloc's own ELF reader
 * (src/prof/prof_symbol.c: .symtab, else .dynsym), so the program and its
 * libraries must still be where the profile says they were.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prof/prof_symbol.h"

typedef struct row {
    char *key;              /* the stack's addresses, as in the file */
    uint64_t *frames;
    unsigned depth;
    double bytes, objects, var_bytes, var_objects, resident, swapped;
    unsigned long long samples;
    unsigned nrecs;
} row_t;

typedef struct opts {
    long top;
    bool alloc, bytes, functions, addresses, lines;
    unsigned depth;
    const char *path;
} opts_t;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: myalloc-prof [options] PROFILE\n"
            "Prints the allocation stacks of a text heap profile (prof_format:text) that hold the most\n"
            "memory: unbiased bytes and objects with their standard errors, resident and swapped bytes.\n"
            "\n"
            "  -n N, --top N   rows to print (default 20; 0 prints all)\n"
            "  --alloc, --cum  everything allocated (the cumulative pair, needs prof_accum:true)\n"
            "                  instead of the live heap\n"
            "  --functions     one row per allocating function (the stacks' first frames)\n"
            "  --depth D       frames shown per stack (default 8)\n"
            "  --bytes         exact byte counts instead of KiB/MiB/GiB\n"
            "  --lines         file:line after each name (objects built with -g)\n"
            "  --addresses     no symbols: print return addresses\n"
            "  -h, --help      this text\n");
}

static void human(char *buf, size_t len, double b, bool exact)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    if (exact) {
        snprintf(buf, len, "%.0f", b);
        return;
    }
    unsigned u = 0;
    double a = fabs(b);
    while (a >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
        a /= 1024;
        b /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%.0f B", b);
    else
        snprintf(buf, len, "%.2f %s", b, units[u]);
}

static int cmp_rows(const void *a, const void *b)
{
    const row_t *x = *(row_t *const *)a, *y = *(row_t *const *)b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return strcmp(x->key, y->key);
}

/* Rows keyed by a string: a small chained hash table. */
typedef struct table {
    row_t **v;
    size_t n, cap;
    size_t *slots, mask;
} table_t;

static row_t *table_get(table_t *t, const char *key)
{
    if (t->slots == NULL || t->n * 2 >= t->mask) {
        size_t ns = t->slots == NULL ? 1024 : (t->mask + 1) * 2;
        free(t->slots);
        t->slots = calloc(ns, sizeof(size_t));
        t->mask = ns - 1;
        for (size_t i = 0; i < t->n; i++) {
            size_t h = (size_t)prof_hash_bytes(t->v[i]->key, strlen(t->v[i]->key), 0) & t->mask;
            while (t->slots[h] != 0)
                h = (h + 1) & t->mask;
            t->slots[h] = i + 1;
        }
    }
    size_t h = (size_t)prof_hash_bytes(key, strlen(key), 0) & t->mask;
    while (t->slots[h] != 0) {
        row_t *r = t->v[t->slots[h] - 1];
        if (strcmp(r->key, key) == 0)
            return r;
        h = (h + 1) & t->mask;
    }
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 256;
        t->v = realloc(t->v, t->cap * sizeof(row_t *));
    }
    row_t *r = calloc(1, sizeof(row_t));
    r->key = strdup(key);
    t->v[t->n++] = r;
    t->slots[h] = t->n;
    return r;
}

static unsigned parse_frames(const char *s, uint64_t **out)
{
    unsigned n = 0, cap = 16;
    uint64_t *v = malloc(cap * sizeof(uint64_t));
    while (*s) {
        while (*s == ' ')
            s++;
        if (*s == '\0' || *s == '\n')
            break;
        char *end;
        uint64_t a = strtoull(s, &end, 16);
        if (end == s)
            break;
        if (n == cap)
            v = realloc(v, (cap *= 2) * sizeof(uint64_t));
        v[n++] = a;
        s = end;
    }
    *out = v;
    return n;
}

static const char *frame_name(const prof_maps_t *maps, uint64_t addr, const opts_t *o, char *buf, size_t len)
{
    if (o->addresses || maps->n == 0) {
        snprintf(buf, len, "0x%llx", (unsigned long long)addr);
        return buf;
    }
    prof_sym_t sym;
    prof_symbolize(maps, addr - 1, &sym);
    size_t n = prof_sym_format(&sym, addr, buf, len);
    if (o->lines && sym.file != NULL && n < len) {
        if (sym.line != 0)
            snprintf(buf + n, len - n, " (%s:%u)", sym.file, sym.line);
        else
            snprintf(buf + n, len - n, " (%s)", sym.file);
    }
    return buf;
}

int main(int argc, char **argv)
{
    opts_t o = {.top = 20, .depth = 8};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if ((strcmp(a, "-n") == 0 || strcmp(a, "--top") == 0) && i + 1 < argc) {
            o.top = strtol(argv[++i], NULL, 10);
        } else if (strncmp(a, "--top=", 6) == 0) {
            o.top = strtol(a + 6, NULL, 10);
        } else if (strcmp(a, "--alloc") == 0 || strcmp(a, "--cum") == 0) {
            o.alloc = true;
        } else if (strcmp(a, "--functions") == 0) {
            o.functions = true;
        } else if (strcmp(a, "--depth") == 0 && i + 1 < argc) {
            o.depth = (unsigned)strtoul(argv[++i], NULL, 10);
        } else if (strncmp(a, "--depth=", 8) == 0) {
            o.depth = (unsigned)strtoul(a + 8, NULL, 10);
        } else if (strcmp(a, "--bytes") == 0) {
            o.bytes = true;
        } else if (strcmp(a, "--lines") == 0) {
            o.lines = true;
        } else if (strcmp(a, "--addresses") == 0) {
            o.addresses = true;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "myalloc-prof: unknown option %s\n", a);
            usage(stderr);
            return 2;
        } else if (o.path == NULL) {
            o.path = a;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (o.path == NULL) {
        usage(stderr);
        return 2;
    }
    FILE *f = strcmp(o.path, "-") == 0 ? stdin : fopen(o.path, "r");
    if (f == NULL) {
        fprintf(stderr, "myalloc-prof: %s: %s\n", o.path, strerror(errno));
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len = getline(&line, &cap, f);
    unsigned long long hn, hb, han, hab, R = 0;
    bool sampled = true;
    if (len > 0 && sscanf(line, "heap profile: %llu: %llu [ %llu: %llu] @ heap_v2/%llu", &hn, &hb, &han, &hab, &R) == 5) {
        sampled = R > 0;
    } else if (len > 0 && sscanf(line, "heap profile: %llu: %llu [ %llu: %llu] @ heapprofile", &hn, &hb, &han, &hab) == 4) {
        sampled = false;
    } else {
        fprintf(stderr, "myalloc-prof: %s: not a heap profile (expected \"heap profile: ... @ heap_v2/R\")\n", o.path);
        return 1;
    }
    table_t stacks = {0};
    row_t *last = NULL;
    double last_scale = 0;
    unsigned long long nrecs = 0, samples = 0;
    bool have_resid = false;
    char *maps_text = NULL;
    size_t maps_len = 0, maps_cap = 0;
    bool in_maps = false;
    while ((len = getline(&line, &cap, f)) > 0) {
        if (in_maps) {
            if (maps_len + (size_t)len + 1 > maps_cap) {
                maps_cap = (maps_len + (size_t)len + 1) * 2;
                maps_text = realloc(maps_text, maps_cap);
            }
            memcpy(maps_text + maps_len, line, (size_t)len);
            maps_len += (size_t)len;
            continue;
        }
        if (strncmp(line, "MAPPED_LIBRARIES:", 17) == 0) {
            in_maps = true;
            continue;
        }
        unsigned long long res, swp;
        if (sscanf(line, "# myalloc resident=%llu swapped=%llu", &res, &swp) == 2) {
            if (last != NULL && !o.alloc) {
                last->resident += (double)res * last_scale;
                last->swapped += (double)swp * last_scale;
                have_resid = true;
            }
            continue;
        }
        unsigned long long n, b, an, ab;
        int off = 0;
        if (sscanf(line, "%llu: %llu [%llu: %llu] @%n", &n, &b, &an, &ab, &off) != 4 || off == 0) {
            last = NULL;
            continue;
        }
        char *stack = line + off;
        stack[strcspn(stack, "\n")] = '\0';
        unsigned long long cn = o.alloc ? an : n, cb = o.alloc ? ab : b;
        nrecs++;
        row_t *r = table_get(&stacks, stack);
        if (r->frames == NULL)
            r->depth = parse_frames(stack, &r->frames);
        last = r;
        last_scale = 0;
        if (cn == 0)
            continue;
        double Z = (double)cb / (double)cn;
        double p = sampled ? -expm1(-Z / (double)R) : 1.0;
        double scale = 1 / p;
        r->bytes += (double)cb * scale;
        r->objects += (double)cn * scale;
        r->var_bytes += Z * Z * (double)cn * (1 - p) / (p * p);
        r->var_objects += (double)cn * (1 - p) / (p * p);
        r->samples += cn;
        r->nrecs++;
        samples += cn;
        last_scale = scale;
    }
    if (f != stdin)
        fclose(f);

    prof_scratch_t sc;
    prof_scratch_init(&sc);
    prof_maps_t maps = {0};
    if (maps_text != NULL && !o.addresses)
        prof_maps_parse(&sc, maps_text, maps_len, false, &maps);

    /* Rows: stacks, or allocating functions. */
    table_t funcs = {0};
    table_t *rows = &stacks;
    char name[1024];
    if (o.functions) {
        for (size_t i = 0; i < stacks.n; i++) {
            row_t *s = stacks.v[i];
            if (s->samples == 0)
                continue;
            const char *fn = s->depth > 0 ? frame_name(&maps, s->frames[0], &o, name, sizeof(name)) : "?";
            row_t *r = table_get(&funcs, fn);
            r->bytes += s->bytes;
            r->objects += s->objects;
            r->var_bytes += s->var_bytes;
            r->var_objects += s->var_objects;
            r->resident += s->resident;
            r->swapped += s->swapped;
            r->samples += s->samples;
            r->nrecs += s->nrecs;
        }
        rows = &funcs;
    }
    double tb = 0, to = 0, tvb = 0, tvo = 0, tr = 0, ts = 0;
    size_t nonzero = 0;
    for (size_t i = 0; i < rows->n; i++) {
        row_t *r = rows->v[i];
        tb += r->bytes, to += r->objects, tvb += r->var_bytes, tvo += r->var_objects;
        tr += r->resident, ts += r->swapped;
        nonzero += r->samples > 0;
    }
    qsort(rows->v, rows->n, sizeof(row_t *), cmp_rows);

    char b1[32], b2[32], b3[32], b4[32];
    printf("%s: %s, %s; %llu samples in %llu records on %zu stacks\n", o.path,
           o.alloc ? "everything allocated (cumulative)" : "live heap",
           sampled ? "unbiased estimates" : "unsampled counts", samples, nrecs, stacks.n);
    if (sampled)
        printf("R = %llu bytes (mean bytes between samples)\n", R);
    human(b1, sizeof(b1), tb, o.bytes);
    human(b2, sizeof(b2), sqrt(tvb), o.bytes);
    printf("total: %s +- %s in %.0f +- %.0f objects", b1, b2, to, sqrt(tvo));
    if (have_resid) {
        human(b3, sizeof(b3), tr, o.bytes);
        human(b4, sizeof(b4), ts, o.bytes);
        printf("; resident %s, swapped %s", b3, b4);
    }
    printf("\n\n");
    printf("%12s %11s %6s %6s %10s %8s %12s %12s  %s\n", "bytes", "+- s.e.", "%", "cum%", "objects", "+- s.e.",
           "resident", "swapped", o.functions ? "allocating function" : "stack (allocating frame first)");
    double cum = 0;
    long shown = 0;
    for (size_t i = 0; i < rows->n; i++) {
        row_t *r = rows->v[i];
        if (r->samples == 0)
            continue;
        if (o.top > 0 && shown == o.top)
            break;
        shown++;
        cum += r->bytes;
        human(b1, sizeof(b1), r->bytes, o.bytes);
        human(b2, sizeof(b2), sqrt(r->var_bytes), o.bytes);
        if (have_resid) {
            human(b3, sizeof(b3), r->resident, o.bytes);
            human(b4, sizeof(b4), r->swapped, o.bytes);
        } else {
            snprintf(b3, sizeof(b3), "-");
            snprintf(b4, sizeof(b4), "-");
        }
        printf("%12s %11s %5.1f%% %5.1f%% %10.0f %8.0f %12s %12s  ", b1, b2, tb > 0 ? 100 * r->bytes / tb : 0,
               tb > 0 ? 100 * cum / tb : 0, r->objects, sqrt(r->var_objects), b3, b4);
        if (o.functions) {
            printf("%s\n", r->key);
            continue;
        }
        for (unsigned k = 0; k < r->depth && k < o.depth; k++)
            printf("%s%s", k ? " < " : "", frame_name(&maps, r->frames[k], &o, name, sizeof(name)));
        if (r->depth > o.depth)
            printf(" < ...");
        printf("\n");
    }
    if ((size_t)shown < nonzero)
        printf("... %zu more (-n 0 shows all)\n", nonzero - (size_t)shown);
    prof_scratch_free(&sc);
    return 0;
}
