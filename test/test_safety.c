/*
 * The safety contract: freeing (or reallocating) a pointer the allocator
 * never returned, or freeing one twice, is detected where it can be cheaply
 * and aborts with one line "<myalloc>: ..." on stderr that says what was
 * wrong and names the pointer (printed as %p: 0x + lowercase hex).
 *
 * Each misuse runs in a forked child (tu_capture): the child must die of
 * SIGABRT, and its stderr must hold exactly one "<myalloc>: " line that
 * contains the expected words and the pointer. The pointers are computed in
 * the parent before the fork, so the parent knows what must be printed (the
 * child is a copy: the same addresses mean the same objects there).
 */
#include <limits.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "myalloc.h"
#include "sizeclass/sizeclass.h"
#include "tcache/tcache.h"
#include "test_util.h"

#define OUTLEN 8192
#define LARGE_SIZE ((size_t)1 << 20) /* larger than the thread cache's 32 KiB */

/* ---------------------------------------------------------------------
 * Checking a child's death.
 */

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* The one "<myalloc>: " line of out, copied into line; returns how many
 * such lines out has. */
static int myalloc_lines(const char *out, char *line, size_t linelen)
{
    int n = 0;
    const char *s = out;
    line[0] = '\0';
    while (*s != '\0') {
        const char *e = strchr(s, '\n');
        size_t len = e != NULL ? (size_t)(e - s) : strlen(s);
        if (strncmp(s, "<myalloc>: ", 11) == 0) {
            if (n == 0) {
                size_t c = len < linelen - 1 ? len : linelen - 1;
                memcpy(line, s, c);
                line[c] = '\0';
            }
            n++;
        }
        if (e == NULL)
            break;
        s = e + 1;
    }
    return n;
}

/* Whether line names p exactly as printf's %p writes it (not as a prefix
 * of a longer number). */
static int names_pointer(const char *line, const void *p)
{
    char want[32];
    snprintf(want, sizeof(want), "%p", p);
    size_t wl = strlen(want);
    for (const char *s = line; (s = strstr(s, want)) != NULL; s++) {
        if (!is_hex(s[wl]) && (s == line || !is_hex(s[-1])))
            return 1;
    }
    return 0;
}

static void check_message(const char *out, const char *what, const void *p)
{
    char line[1024];
    int n = myalloc_lines(out, line, sizeof(line));
    cr_assert_eq(n, 1, "expected exactly one \"<myalloc>: \" line on stderr, got %d:\n%s", n, out);
    cr_assert(strstr(line, what) != NULL, "message does not say \"%s\": %s", what, line);
    cr_assert(names_pointer(line, p), "message does not name the pointer %p: %s", p, line);
}

/* status is a wait status from tu_capture. */
static void expect_abort(int status, const char *out, const char *what, const void *p)
{
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
              "expected death by SIGABRT for a bad pointer %p (%s); wait status 0x%x "
              "(exited %d, signal %d); stderr:\n%s",
              p, what, status, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
              WIFSIGNALED(status) ? WTERMSIG(status) : 0, out);
    check_message(out, what, p);
}

/* Run fn(p) in a child and expect an abort naming `shown` with `what`. */
static void run_expect_abort(void (*fn)(void *), void *p, const char *what, const void *shown)
{
    char out[OUTLEN];
    int st = tu_capture(fn, p, out, sizeof(out));
    expect_abort(st, out, what, shown);
}

/* Run test/helpers/safety_probe's scenario under LD_PRELOAD with
 * tcache:false: it prints the pointer it is about to misuse, and must die
 * by SIGABRT with one message saying `what` and naming that pointer. */
static void probe_without_tcache_expect_abort(const char *scenario, const char *what)
{
    char cmd[2048], out[OUTLEN], so[PATH_MAX], path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/libmyalloc.so", tu_build_dir());
    cr_assert_not_null(realpath(path, so), "no %s", path);
    snprintf(cmd, sizeof(cmd), "MYALLOC_CONF=tcache:false LD_PRELOAD=%s %s/helpers/safety_probe %s; exit $?", so,
             tu_build_dir(), scenario);
    int rc = tu_run(cmd, out, sizeof(out));
    void *p = NULL;
    const char *s = strstr(out, "ptr=");
    cr_assert_not_null(s, "helper printed no pointer: %s", out);
    cr_assert_eq(sscanf(s, "ptr=%p", &p), 1);
    cr_assert_eq(rc, 128 + SIGABRT, "expected SIGABRT (134), got %d:\n%s", rc, out);
    check_message(out, what, p);
}

/* ---------------------------------------------------------------------
 * free() of pointers myalloc never returned.
 */

static char global_buf[256];
static long global_var;

static void do_free(void *p) { free(p); }

static void do_realloc(void *p)
{
    void *volatile q = realloc(p, 100);
    (void)q;
}

static void do_realloc_big(void *p)
{
    void *volatile q = realloc(p, 3 * SC_LARGE_MINCLASS);
    (void)q;
}

Test(safety, free_stack_pointer)
{
    char local[64];
    memset(local, 0, sizeof(local));
    run_expect_abort(do_free, local, "invalid pointer", local);
    long x = 1;
    run_expect_abort(do_free, &x, "invalid pointer", &x);
}

Test(safety, free_global_pointer)
{
    run_expect_abort(do_free, &global_var, "invalid pointer", &global_var);
    run_expect_abort(do_free, global_buf + 16, "invalid pointer", global_buf + 16);
}

Test(safety, free_pointer_into_own_mmap)
{
    size_t len = 16 * (size_t)sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(m, MAP_FAILED);
    run_expect_abort(do_free, m, "invalid pointer", m);
    run_expect_abort(do_free, m + 48, "invalid pointer", m + 48);
    run_expect_abort(do_free, m + len / 2, "invalid pointer", m + len / 2);
    munmap(m, len);
}

Test(safety, free_inside_large_allocation)
{
    char *p = malloc(LARGE_SIZE);
    cr_assert_not_null(p);
    memset(p, 0x11, LARGE_SIZE);
    /* An interior page (not in the page map), the first page at an offset
     * and the last page (both mapped to the extent). */
    run_expect_abort(do_free, p + PAGE, "invalid pointer", p + PAGE);
    run_expect_abort(do_free, p + QUANTUM, "invalid pointer", p + QUANTUM);
    run_expect_abort(do_free, p + LARGE_SIZE - PAGE, "invalid pointer", p + LARGE_SIZE - PAGE);
    run_expect_abort(do_free, p + LARGE_SIZE / 2 + 8, "invalid pointer", p + LARGE_SIZE / 2 + 8);
    /* The parent's object is untouched and still frees normally. */
    cr_assert_eq(p[LARGE_SIZE - 1], 0x11);
    free(p);
}

/* A pointer inside a small object goes into the thread cache unchecked (the
 * fast path does not look); it must be caught when the cache is flushed
 * back to the slab, at the latest. */
static void do_free_then_trim(void *p)
{
    free(p);
    malloc_trim(0);
}

Test(safety, free_inside_small_object_caught_at_flush)
{
    char *p = malloc(4 * QUANTUM);
    cr_assert_not_null(p);
    run_expect_abort(do_free_then_trim, p + QUANTUM, "invalid pointer", p + QUANTUM);
    free(p);
}

Test(safety, free_inside_small_object_without_tcache)
{
    probe_without_tcache_expect_abort("small_interior_free", "invalid pointer");
}

/* ---------------------------------------------------------------------
 * Double frees.
 */

static void do_double_free(void *p)
{
    free(p);
    free(p);
}

Test(safety, double_free_large)
{
    void *p = malloc(LARGE_SIZE);
    cr_assert_not_null(p);
    cr_assert_gt(LARGE_SIZE, (size_t)32 << 10);
    run_expect_abort(do_double_free, p, "double free", p);
    /* Also when the freed extent merged with a free neighbour before it. */
    char *a = malloc(LARGE_SIZE), *b = malloc(LARGE_SIZE);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    free(a);
    run_expect_abort(do_double_free, b, "double free", b);
    free(b);
    free(p);
}

/* The smallest large class may be cached by the thread (in the default
 * configuration it is: 16 KiB <= 32 KiB); the second free then sits in the
 * cache and must be caught when it is flushed. */
static void do_double_free_then_trim(void *p)
{
    free(p);
    free(p);
    malloc_trim(0);
}

Test(safety, double_free_smallest_large_class)
{
    void *p = malloc(SC_LARGE_MINCLASS);
    cr_assert_not_null(p);
    run_expect_abort(do_double_free_then_trim, p, "double free", p);
    free(p);
}

Test(safety, double_free_small_flushed_by_trim)
{
    for (size_t sz = 1; sz <= SC_SMALL_MAXCLASS; sz = sz * 3 + 7) {
        void *p = malloc(sz);
        cr_assert_not_null(p);
        run_expect_abort(do_double_free_then_trim, p, "double free", p);
        free(p);
    }
}

/* Flush the thread cache the ordinary way: free many more objects of the
 * same class, so the bin overflows and its oldest entries (the two copies of
 * p) go back to the slab. */
static void do_double_free_then_overflow(void *p)
{
    /* Enough to overflow any cache bin, whatever it held before. */
    enum { N = 3 * TCACHE_NSLOTS_SMALL_MAX };
    static void *others[N];
    size_t sz = malloc_usable_size(p);
    for (int i = 0; i < N; i++)
        others[i] = malloc(sz);
    free(p);
    free(p);
    for (int i = 0; i < N; i++)
        free(others[i]);
}

Test(safety, double_free_small_flushed_by_overflow)
{
    void *p = malloc(3 * QUANTUM);
    cr_assert_not_null(p);
    run_expect_abort(do_double_free_then_overflow, p, "double free", p);
    free(p);
}

/* Without thread caches every free reaches the slab bitmap at once. */
Test(safety, double_free_small_without_tcache)
{
    probe_without_tcache_expect_abort("small_double_free", "double free");
}

/* ---------------------------------------------------------------------
 * realloc() of pointers that are not live objects.
 */

Test(safety, realloc_invalid_pointers)
{
    char local[64];
    memset(local, 0, sizeof(local));
    run_expect_abort(do_realloc, local, "invalid pointer", local);
    run_expect_abort(do_realloc, &global_var, "invalid pointer", &global_var);
    char *p = malloc(LARGE_SIZE);
    cr_assert_not_null(p);
    run_expect_abort(do_realloc, p + PAGE, "invalid pointer", p + PAGE);
    run_expect_abort(do_realloc, p + QUANTUM, "invalid pointer", p + QUANTUM);
    free(p);
}

static void do_free_then_realloc(void *p)
{
    free(p);
    void *volatile q = realloc(p, 100);
    (void)q;
}

Test(safety, realloc_of_freed_large_object)
{
    void *p = malloc(LARGE_SIZE);
    cr_assert_not_null(p);
    run_expect_abort(do_free_then_realloc, p, "realloc", p);
    free(p);
}

/* realloc is a slow path that looks the pointer up anyway: a pointer into
 * the middle of a small object is as cheap to reject there as in free's
 * flush (the region index check), and accepting it hands out overlapping
 * memory. */
Test(safety, realloc_inside_small_object)
{
    char *p = malloc(4 * QUANTUM);
    cr_assert_not_null(p);
    run_expect_abort(do_realloc_big, p + QUANTUM, "invalid pointer", p + QUANTUM);
    run_expect_abort(do_realloc, p + QUANTUM, "invalid pointer", p + QUANTUM);
    free(p);
}

/* ---------------------------------------------------------------------
 * What must not crash.
 */

Test(safety, null_free_and_foreign_usable_size)
{
    free(NULL);
    free_sized(NULL, 10);
    free(realloc(NULL, 0));
    char local[64];
    cr_assert_eq(malloc_usable_size(local), 0, "usable size of a stack pointer");
    cr_assert_eq(malloc_usable_size(&global_var), 0, "usable size of a global");
    size_t len = 4 * (size_t)sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(m, MAP_FAILED);
    cr_assert_eq(malloc_usable_size(m), 0, "usable size of the test's own mmap");
    cr_assert_eq(malloc_usable_size(m + 40), 0);
    munmap(m, len);
    char *big = malloc(LARGE_SIZE);
    cr_assert_geq(malloc_usable_size(big), LARGE_SIZE);
    cr_assert_eq(malloc_usable_size(big + PAGE), 0, "usable size inside a large object");
    cr_assert_eq(malloc_usable_size(big + QUANTUM), 0);
    cr_assert_eq(malloc_usable_size(big + LARGE_SIZE - PAGE), 0);
    char *small = malloc(4 * QUANTUM);
    cr_assert_geq(malloc_usable_size(small), 4 * QUANTUM);
    cr_assert_eq(malloc_usable_size(small + QUANTUM), 0, "usable size inside a small object");
    free(small);
    free(big);
    cr_assert_eq(malloc_usable_size(big), 0, "usable size of a freed large object");
    cr_assert_eq(malloc_usable_size(NULL), 0);
}
