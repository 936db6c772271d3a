/*
 * sys: raw Linux system calls.
 *
 * The allocator makes its system calls (mmap, munmap, madvise, futex, and
 * a few at startup) without libc's wrappers, for two reasons:
 * - errno: a raw call returns -errno and leaves errno alone, so no caller
 *   has to save and restore it around a call that may fail (a failed
 *   madvise must not leak an error into the program's success paths);
 * - resident memory: a libc function called touches its page of libc's
 *   text, and the kernel maps up to 64 KiB around a faulting code page
 *   ("fault-around"), all of it counted in the process's RSS. Without
 *   libc's sysconf, sched_getaffinity, CPU_COUNT, mmap, madvise and
 *   syscall, a program that mallocs once has 64 KiB less RssFile
 *   (1752 -> 1688 KiB).
 *
 * On x86-64 these are inline `syscall` instructions; elsewhere libc's
 * syscall(2), with errno translated to the same -errno convention.
 */
#ifndef MYALLOC_SYS_H
#define MYALLOC_SYS_H

#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
static inline long ma_syscall6(long n, long a, long b, long c, long d, long e, long f)
{
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}
#else
static inline long ma_syscall6(long n, long a, long b, long c, long d, long e, long f)
{
    int saved = errno;
    long ret = syscall(n, a, b, c, d, e, f);
    if (ret == -1) {
        ret = -errno;
        errno = saved;
    }
    return ret;
}
#endif

/* Fewer arguments: the unused registers are passed as 0. */
#define ma_syscall(n, ...) ma_syscall_n_(n, __VA_ARGS__, 0, 0, 0, 0, 0, 0)
#define ma_syscall_n_(n, a, b, c, d, e, f, ...) \
    ma_syscall6((long)(n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))

/* A result of -4095..-1 is an error (-errno), anything else a value. */
static inline int ma_sys_failed(long ret) { return (unsigned long)ret > -4096UL; }

/* Up to cap bytes of a /proc file, read with raw system calls (no errno,
 * no allocation); the length read, or -1 when it cannot be opened. */
static inline long ma_sys_read_proc(const char *path, void *buf, size_t cap)
{
    long fd = ma_syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (ma_sys_failed(fd))
        return -1;
    size_t len = 0;
    while (len < cap) {
        long n = ma_syscall(SYS_read, fd, (char *)buf + len, cap - len);
        if (ma_sys_failed(n) || n == 0)
            break;
        len += (size_t)n;
    }
    ma_syscall(SYS_close, fd);
    return (long)len;
}

#endif
