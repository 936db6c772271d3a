/*
 * Helpers shared by the Criterion tests. Test binaries link
 * lib/libmyalloc.a, so the whole test process (Criterion included) runs on
 * myalloc, and the tests may call internal functions through src/ headers.
 */
#ifndef MYALLOC_TEST_UTIL_H
#define MYALLOC_TEST_UTIL_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

/* Build directory of this configuration (helpers, the shared library). */
static inline const char *tu_build_dir(void)
{
    const char *b = getenv("MYALLOC_TEST_BUILD");
    return b != NULL ? b : "build/p12-q4-g2";
}

/* The sanitizer the library and the tests were built with (make
 * check-ubsan sets MYALLOC_TEST_SANITIZE), or NULL. */
static inline const char *tu_sanitizer(void)
{
    const char *s = getenv("MYALLOC_TEST_SANITIZE");
    return s != NULL && *s != '\0' ? s : NULL;
}

/* Whether the allocator purges a batch of page ranges in one system call
 * here: the kernel takes process_madvise(MADV_DONTNEED) on the calling
 * process (PIDFD_SELF_THREAD_GROUP; asked directly, not through the
 * allocator) and no seccomp filter is installed (under one it does not
 * try, see pages.c). */
static inline bool tu_kernel_batches_madvise(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    cr_assert_not_null(f);
    char line[256];
    bool filtered = false;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "Seccomp:", 8) == 0)
            filtered = strtol(line + 8, NULL, 10) != 0;
    fclose(f);
    if (filtered)
        return false;
    const size_t len = (size_t)sysconf(_SC_PAGESIZE);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(p, MAP_FAILED);
    struct iovec v = {p, len};
    long r = syscall(440 /* process_madvise */, -10001, &v, 1, MADV_DONTNEED, 0);
    munmap(p, len);
    return r == (long)len;
}

/* The whole file at path, NUL terminated (malloc'ed); its length in *len
 * unless len is NULL. Paths are relative to the repository root. */
static inline char *tu_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap)
            buf = realloc(buf, cap *= 2);
    }
    buf[n] = '\0';
    fclose(f);
    if (len != NULL)
        *len = n;
    return buf;
}

/* A temporary directory for one test process, /tmp/<test program>.XXXXXX:
 * tu_tmp_make creates it, tu_tmp_cleanup removes its files and itself
 * (usable as a Criterion .fini). */
static inline char *tu_tmpdir(void)
{
    static char dir[64];
    return dir;
}

static inline void tu_tmp_make(void)
{
    snprintf(tu_tmpdir(), 64, "/tmp/%s.XXXXXX", program_invocation_short_name);
    cr_assert_not_null(mkdtemp(tu_tmpdir()));
}

static inline void tu_tmp_cleanup(void)
{
    char *dir = tu_tmpdir();
    if (dir[0] == '\0')
        return;
    DIR *d = opendir(dir);
    if (d != NULL) {
        struct dirent *de;
        char path[PATH_MAX];
        while ((de = readdir(d)) != NULL) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
    dir[0] = '\0';
}

static inline void tu_tmp_path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", tu_tmpdir(), name);
}

/* Run fn(arg) in a forked child with its stderr captured into out (NUL
 * terminated); returns the child's wait status. */
static inline int tu_capture(void (*fn)(void *), void *arg, char *out, size_t outlen)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t n;
    while ((n = read(fds[0], out + len, outlen - 1 - len)) > 0) {
        len += (size_t)n;
        if (len == outlen - 1)
            break;
    }
    out[len] = '\0';
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    return status;
}

/* Run a shell command; stdout+stderr into out; returns the exit status
 * (or 128 + signal). */
static inline int tu_run(const char *cmd, char *out, size_t outlen)
{
    char full[8192];
    snprintf(full, sizeof(full), "(%s) 2>&1", cmd);
    FILE *f = popen(full, "r");
    cr_assert_not_null(f, "popen failed for %s", cmd);
    size_t len = fread(out, 1, outlen - 1, f);
    out[len] = '\0';
    int st = pclose(f);
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return -1;
}

/* Resident set size of this process in bytes (from /proc/self/statm). */
static inline size_t tu_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (f != NULL) {
        if (fscanf(f, "%lu %lu", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* Content patterns derived from an object's address and size: a stale or
 * overlapping object shows up as a mismatch. */
static inline uint64_t tu_pattern_word(const void *p, size_t size, size_t i)
{
    uint64_t x = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ULL ^ size * 0xc2b2ae3d27d4eb4fULL ^ i;
    return x ^ (x >> 29);
}

static inline void tu_fill(void *p, size_t size)
{
    uint64_t *w = p;
    for (size_t i = 0; i < size / 8; i++)
        w[i] = tu_pattern_word(p, size, i);
    for (size_t i = size & ~(size_t)7; i < size; i++)
        ((unsigned char *)p)[i] = (unsigned char)(tu_pattern_word(p, size, i) & 0xff);
}

static inline int tu_check(const void *p, size_t size)
{
    const uint64_t *w = p;
    for (size_t i = 0; i < size / 8; i++)
        if (w[i] != tu_pattern_word(p, size, i))
            return 0;
    for (size_t i = size & ~(size_t)7; i < size; i++)
        if (((const unsigned char *)p)[i] != (unsigned char)(tu_pattern_word(p, size, i) & 0xff))
            return 0;
    return 1;
}

/* A small deterministic PRNG for tests (xorshift64*). */
/* qsort / bsearch order of pointers (an array of void *). */
static inline int tu_cmp_ptr(const void *x, const void *y)
{
    uintptr_t a = (uintptr_t)*(void *const *)x, b = (uintptr_t)*(void *const *)y;
    return a < b ? -1 : a > b;
}

static inline uint64_t tu_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dULL;
}

#endif
