/*
 * libc_probe: exercises C library functions that allocate internally, then
 * reports which allocator served the process. Used by test_linking.c in
 * three ways: run as built (plain program, glibc's malloc: the control),
 * run with LD_PRELOAD=libmyalloc.so, and recompiled by the test with
 * `-lmyalloc` and with `-static ... libmyalloc.a` (then with -DPROBE_NO_NSS:
 * NSS lookups in a static program would dlopen a second libc).
 *
 * Output on stdout, one "key=value" per line:
 *   heap_before=0|1 [heap_before_range=lo-hi]  the [heap] (brk) mapping at start
 *   heap_after=0|1  [heap_after_range=lo-hi]   ... and at the end
 *   ptrs=N ptrs_in_heap=K      pointers from malloc and from libc, how many in [heap]
 *   libc_objs=N libc_objs_usable=K  libc-allocated objects (FILE, DIR, getline,
 *                              strdup, asprintf, open_memstream buffers) with a
 *                              nonzero malloc_usable_size
 *   usable1=U                  malloc_usable_size(malloc(1))
 *   mi_uordblks=A mi_hblkhd=B  mallinfo2() while a 1 MiB block is live
 *   myalloc_mapped=0|1         a libmyalloc object appears in /proc/self/maps
 *   nss=ok|fail|skipped, locale=ok|fail
 *   done=1
 * Exit 0 when every libc function behaved; 1 (with a message on stderr)
 * when one did not.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* asprintf, open_memstream (the Makefile defines it too) */
#endif
#include <dirent.h>
#include <locale.h>
#include <malloc.h>
#include <pthread.h>
#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifndef PROBE_NO_NSS
#include <netdb.h>
#include <pwd.h>
#include <sys/socket.h>
#endif

#define MAXPTRS 4096
static void *ptrs[MAXPTRS];
static unsigned nptrs;
static unsigned libc_objs, libc_objs_usable;

static void keep(void *p)
{
    if (p != NULL && nptrs < MAXPTRS)
        ptrs[nptrs++] = p;
}

/* An object libc allocated for us: whoever's malloc made it must know it. */
static void libc_obj(void *p)
{
    keep(p);
    libc_objs++;
    if (p != NULL && malloc_usable_size(p) > 0)
        libc_objs_usable++;
}

static int failed;
#define CHECK(cond, ...)                                \
    do {                                                \
        if (!(cond)) {                                  \
            fprintf(stderr, "libc_probe: " __VA_ARGS__); \
            fputc('\n', stderr);                        \
            failed = 1;                                 \
        }                                               \
    } while (0)

/* The [heap] line of /proc/self/maps; returns 1 if present. */
static int heap_range(uintptr_t *lo, uintptr_t *hi, int *myalloc_mapped)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    int found = 0;
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, "[heap]") != NULL) {
            unsigned long a, b;
            if (sscanf(line, "%lx-%lx", &a, &b) == 2) {
                *lo = a;
                *hi = b;
                found = 1;
            }
        }
        if (myalloc_mapped != NULL && strstr(line, "libmyalloc") != NULL)
            *myalloc_mapped = 1;
    }
    fclose(f);
    return found;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void *thread_fn(void *arg)
{
    for (int i = 0; i < 100; i++) {
        char *s = strdup("thread-allocated string");
        free(s);
    }
    char *s = NULL;
    if (asprintf(&s, "thread %d", (int)(intptr_t)arg) < 0)
        s = NULL;
    return s;
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    uintptr_t h0lo = 0, h0hi = 0, h1lo = 0, h1hi = 0;
    int heap0 = heap_range(&h0lo, &h0hi, NULL);

    /* stdio: write a file, read it back with getline. */
    char path[] = "/tmp/libc_probe_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp failed");
    FILE *f = fdopen(fd, "w");
    CHECK(f != NULL, "fdopen failed");
    libc_obj(f);
    for (int i = 0; i < 2000; i++)
        fprintf(f, "line %d %s\n", i, i % 7 == 0 ? "with some more text to make lines longer" : "x");
    CHECK(fclose(f) == 0, "fclose failed");
    f = fopen(path, "r");
    CHECK(f != NULL, "fopen failed");
    libc_obj(f);
    char *line = NULL;
    size_t cap = 0;
    int nlines = 0;
    while (getline(&line, &cap, f) > 0)
        nlines++;
    CHECK(nlines == 2000, "getline read %d lines, wrote 2000", nlines);
    libc_obj(line);
    fclose(f);
    unlink(path);

    /* strdup + qsort (merge sort with a malloc'd buffer for big arrays). */
    enum { NS = 3000 };
    static char *strs[NS];
    for (int i = 0; i < NS; i++) {
        char buf[64];
        snprintf(buf, sizeof(buf), "s%07d", (i * 7919) % NS);
        strs[i] = strdup(buf);
        CHECK(strs[i] != NULL, "strdup failed");
        if (i % 10 == 0)
            libc_obj(strs[i]);
    }
    qsort(strs, NS, sizeof(strs[0]), cmp_str);
    for (int i = 1; i < NS; i++)
        CHECK(strcmp(strs[i - 1], strs[i]) <= 0, "qsort left %s before %s", strs[i - 1], strs[i]);

    /* printf with large widths (vfprintf's own work buffer). */
    FILE *devnull = fopen("/dev/null", "w");
    CHECK(devnull != NULL, "fopen /dev/null failed");
    int n = fprintf(devnull, "%*d|%-*s|%.*f", 100000, 42, 70000, "left", 5000, 1.5);
    CHECK(n == 100000 + 1 + 70000 + 1 + 5002, "fprintf with wide fields wrote %d", n);
    char *wide = NULL;
    n = asprintf(&wide, "%*s", 200000, "x");
    CHECK(n == 200000 && wide != NULL && wide[199999] == 'x', "asprintf with a wide field failed");
    libc_obj(wide);
    fclose(devnull);

    /* open_memstream grows its buffer with realloc. */
    char *mbuf = NULL;
    size_t mlen = 0;
    FILE *ms = open_memstream(&mbuf, &mlen);
    CHECK(ms != NULL, "open_memstream failed");
    for (int i = 0; i < 5000; i++)
        fprintf(ms, "%d,", i);
    fclose(ms);
    CHECK(mbuf != NULL && mlen > 20000, "open_memstream buffer too short (%zu)", mlen);
    libc_obj(mbuf);

    /* Directory listing. */
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL, "opendir failed");
    if (d != NULL) {
        libc_obj(d);
        int entries = 0;
        while (readdir(d) != NULL)
            entries++;
        CHECK(entries >= 3, "readdir saw %d entries", entries);
        closedir(d);
    }

    /* Regular expressions. */
    regex_t re;
    CHECK(regcomp(&re, "^(line|s)[0-9]+ *([a-z]+)?$", REG_EXTENDED) == 0, "regcomp failed");
    regmatch_t m[3];
    CHECK(regexec(&re, "line12 abc", 3, m, 0) == 0, "regexec did not match");
    CHECK(regexec(&re, "nope", 3, m, 0) == REG_NOMATCH, "regexec matched what it should not");
    regfree(&re);

    /* Locale. */
    const char *loc = setlocale(LC_ALL, "C.UTF-8");
    printf("locale=%s\n", loc != NULL ? "ok" : "fail");
    setlocale(LC_ALL, "C");

    /* Name service lookups (files backend: /etc/passwd, /etc/hosts). */
#ifndef PROBE_NO_NSS
    struct passwd *pw = getpwnam("root");
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo("localhost", "80", &hints, &ai);
    if (gai == 0)
        freeaddrinfo(ai);
    printf("nss=%s\n", pw != NULL && pw->pw_uid == 0 && gai == 0 ? "ok" : "fail");
#else
    printf("nss=skipped\n");
#endif

    /* popen: pipe, fork, exec, FILE. */
    FILE *pp = popen("echo probe-says-hello", "r");
    CHECK(pp != NULL, "popen failed");
    if (pp != NULL) {
        char buf[128] = {0};
        CHECK(fgets(buf, sizeof(buf), pp) != NULL && strcmp(buf, "probe-says-hello\n") == 0,
              "popen read '%s'", buf);
        CHECK(pclose(pp) == 0, "pclose failed");
    }

    /* A thread that allocates. */
    pthread_t t;
    void *tret = NULL;
    CHECK(pthread_create(&t, NULL, thread_fn, (void *)(intptr_t)7) == 0, "pthread_create failed");
    pthread_join(t, &tret);
    CHECK(tret != NULL, "thread asprintf failed");
    libc_obj(tret);

    /* Plain allocations of many sizes. */
    for (unsigned i = 0; i < 500; i++)
        keep(malloc(1 + (i * 37u) % 5000));
    keep(malloc(200000));

    /* Which allocator is this? */
    void *one = malloc(1);
    keep(one);
    size_t usable1 = malloc_usable_size(one);
    void *mib = malloc((size_t)1 << 20);
    memset(mib, 1, (size_t)1 << 20);
    struct mallinfo2 mi = mallinfo2();
    int myalloc_mapped = 0;
    int heap1 = heap_range(&h1lo, &h1hi, &myalloc_mapped);
    unsigned in_heap = 0;
    for (unsigned i = 0; i < nptrs; i++)
        if (heap1 == 1 && (uintptr_t)ptrs[i] >= h1lo && (uintptr_t)ptrs[i] < h1hi)
            in_heap++;

    printf("heap_before=%d\n", heap0);
    if (heap0 == 1)
        printf("heap_before_range=%lx-%lx\n", (unsigned long)h0lo, (unsigned long)h0hi);
    printf("heap_after=%d\n", heap1);
    if (heap1 == 1)
        printf("heap_after_range=%lx-%lx\n", (unsigned long)h1lo, (unsigned long)h1hi);
    printf("ptrs=%u\nptrs_in_heap=%u\n", nptrs, in_heap);
    printf("libc_objs=%u\nlibc_objs_usable=%u\n", libc_objs, libc_objs_usable);
    printf("usable1=%zu\n", usable1);
    printf("mi_uordblks=%zu\nmi_hblkhd=%zu\n", mi.uordblks, mi.hblkhd);
    printf("myalloc_mapped=%d\n", myalloc_mapped);
    free(mib);
    for (int i = 0; i < NS; i++)
        free(strs[i]);
    printf("done=1\n");
    return failed;
}
