/*
 * fmt: printf-style formatting and writing that never allocate.
 *
 * glibc's printf family may call malloc (wide conversions, large
 * precisions, positional arguments), and the allocator must never call
 * malloc while it holds a lock, so every message, stats report and profile
 * dump is formatted here.
 */
#include "common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char *buf;
    size_t size;
    size_t len;
} fmt_out_t;

static void fmt_putc(fmt_out_t *o, char c)
{
    if (o->len + 1 < o->size)
        o->buf[o->len] = c;
    o->len++;
}

static void fmt_pad(fmt_out_t *o, char c, int n)
{
    while (n-- > 0)
        fmt_putc(o, c);
}

/* Digits of v in base, least significant first; returns the count. */
static int fmt_digits(char *tmp, uint64_t v, unsigned base)
{
    int n = 0;
    do {
        unsigned d = (unsigned)(v % base);
        tmp[n++] = (char)(d < 10 ? '0' + d : 'a' + d - 10);
        v /= base;
    } while (v != 0);
    return n;
}

static void fmt_number(fmt_out_t *o, uint64_t v, bool neg, unsigned base, int width,
                       bool zero, bool left, const char *prefix)
{
    char tmp[72];
    int n = fmt_digits(tmp, v, base);
    int plen = (int)strlen(prefix) + (neg ? 1 : 0);
    int padding = width - n - plen;
    if (!left && !zero)
        fmt_pad(o, ' ', padding);
    if (neg)
        fmt_putc(o, '-');
    for (const char *p = prefix; *p; p++)
        fmt_putc(o, *p);
    if (!left && zero)
        fmt_pad(o, '0', padding);
    while (n > 0)
        fmt_putc(o, tmp[--n]);
    if (left)
        fmt_pad(o, ' ', padding);
}

static void fmt_double(fmt_out_t *o, double d, int prec, int width, bool left)
{
    char tmp[80];
    fmt_out_t t = {tmp, sizeof(tmp), 0};
    if (prec < 0)
        prec = 6;
    if (prec > 17)
        prec = 17;
    if (d != d) {
        memcpy(tmp, "nan", 3);
        t.len = 3;
    } else {
        bool neg = d < 0;
        if (neg)
            d = -d;
        if (d > 1.8e19) {
            /* Beyond uint64: print in e-notation-free form is not needed
             * by any writer here; clamp readably. */
            if (neg)
                fmt_putc(&t, '-');
            for (const char *p = "inf"; *p; p++)
                fmt_putc(&t, *p);
        } else {
            uint64_t scale = 1;
            for (int i = 0; i < prec; i++)
                scale *= 10;
            double r = d * (double)scale + 0.5;
            uint64_t whole, frac;
            if (r < 1.8e19) {
                uint64_t all = (uint64_t)r;
                whole = all / scale;
                frac = all % scale;
            } else {
                whole = (uint64_t)d;
                frac = 0;
            }
            if (neg && (whole | frac))
                fmt_putc(&t, '-');
            char dig[72];
            int n = fmt_digits(dig, whole, 10);
            while (n > 0)
                fmt_putc(&t, dig[--n]);
            if (prec > 0) {
                fmt_putc(&t, '.');
                n = fmt_digits(dig, frac, 10);
                for (int i = n; i < prec; i++)
                    fmt_putc(&t, '0');
                while (n > 0)
                    fmt_putc(&t, dig[--n]);
            }
        }
    }
    int padding = width - (int)t.len;
    if (!left)
        fmt_pad(o, ' ', padding);
    for (size_t i = 0; i < t.len; i++)
        fmt_putc(o, tmp[i]);
    if (left)
        fmt_pad(o, ' ', padding);
}

size_t ma_vsnprintf(char *buf, size_t size, const char *fmt, va_list ap)
{
    fmt_out_t o = {buf, size, 0};
    for (const char *f = fmt; *f; f++) {
        if (*f != '%') {
            fmt_putc(&o, *f);
            continue;
        }
        f++;
        bool left = false, zero = false;
        for (;; f++) {
            if (*f == '-')
                left = true;
            else if (*f == '0')
                zero = true;
            else
                break;
        }
        int width = 0, prec = -1;
        if (*f == '*') {
            width = va_arg(ap, int);
            f++;
        } else {
            while (*f >= '0' && *f <= '9')
                width = width * 10 + (*f++ - '0');
        }
        if (*f == '.') {
            f++;
            prec = 0;
            if (*f == '*') {
                prec = va_arg(ap, int);
                f++;
            } else {
                while (*f >= '0' && *f <= '9')
                    prec = prec * 10 + (*f++ - '0');
            }
        }
        int lmod = 0; /* 0 int, 1 long, 2 long long, 3 size_t */
        if (*f == 'l') {
            lmod = 1;
            if (f[1] == 'l') {
                lmod = 2;
                f++;
            }
            f++;
        } else if (*f == 'z') {
            lmod = 3;
            f++;
        }
        switch (*f) {
        case 'd':
        case 'i': {
            int64_t v = lmod == 0   ? va_arg(ap, int)
                        : lmod == 1 ? va_arg(ap, long)
                        : lmod == 2 ? va_arg(ap, long long)
                                    : (int64_t)va_arg(ap, ssize_t);
            uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
            fmt_number(&o, mag, v < 0, 10, width, zero, left, "");
            break;
        }
        case 'u':
        case 'x': {
            uint64_t v = lmod == 0   ? va_arg(ap, unsigned)
                         : lmod == 1 ? va_arg(ap, unsigned long)
                         : lmod == 2 ? va_arg(ap, unsigned long long)
                                     : va_arg(ap, size_t);
            fmt_number(&o, v, false, *f == 'u' ? 10 : 16, width, zero, left, "");
            break;
        }
        case 'p':
            fmt_number(&o, (uintptr_t)va_arg(ap, void *), false, 16, width, zero, left, "0x");
            break;
        case 'f':
            fmt_double(&o, va_arg(ap, double), prec, width, left);
            break;
        case 'c':
            fmt_putc(&o, (char)va_arg(ap, int));
            break;
        case 's': {
            const char *s = va_arg(ap, const char *);
            if (s == NULL)
                s = "(null)";
            size_t n = strlen(s);
            if (prec >= 0 && (size_t)prec < n)
                n = (size_t)prec;
            if (!left)
                fmt_pad(&o, ' ', width - (int)n);
            for (size_t i = 0; i < n; i++)
                fmt_putc(&o, s[i]);
            if (left)
                fmt_pad(&o, ' ', width - (int)n);
            break;
        }
        case '%':
            fmt_putc(&o, '%');
            break;
        default: /* unknown conversion: print it verbatim */
            fmt_putc(&o, '%');
            if (*f)
                fmt_putc(&o, *f);
            else
                f--;
            break;
        }
    }
    if (size > 0)
        buf[o.len < size ? o.len : size - 1] = '\0';
    return o.len;
}

size_t ma_snprintf(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = ma_vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    return n;
}

bool ma_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        p += n;
        len -= (size_t)n;
    }
    return true;
}

static void ma_vmessage(const char *fmt, va_list ap)
{
    char line[512];
    int saved = errno;
    size_t n = ma_snprintf(line, sizeof(line), "<myalloc>: ");
    n += ma_vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
    if (n > sizeof(line) - 2)
        n = sizeof(line) - 2;
    line[n++] = '\n';
    ma_write_all(STDERR_FILENO, line, n);
    errno = saved;
}

void ma_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ma_vmessage(fmt, ap);
    va_end(ap);
}

MA_WARM_TEXT void ma_fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ma_vmessage(fmt, ap);
    va_end(ap);
    abort();
}

void ma_bw_init_fd(ma_bufwriter_t *bw, int fd)
{
    bw->cb = NULL;
    bw->opaque = NULL;
    bw->fd = fd;
    bw->failed = false;
    bw->len = 0;
}

void ma_bw_init_cb(ma_bufwriter_t *bw, ma_write_cb_t *cb, void *opaque)
{
    bw->cb = cb;
    bw->opaque = opaque;
    bw->fd = -1;
    bw->failed = false;
    bw->len = 0;
}

bool ma_bw_flush(ma_bufwriter_t *bw)
{
    if (bw->len == 0)
        return !bw->failed;
    if (bw->cb != NULL) {
        bw->buf[bw->len] = '\0';
        bw->cb(bw->opaque, bw->buf);
    } else if (!bw->failed && !ma_write_all(bw->fd, bw->buf, bw->len)) {
        bw->failed = true;
    }
    bw->len = 0;
    return !bw->failed;
}

void ma_bw_write(ma_bufwriter_t *bw, const char *s, size_t len)
{
    /* Keep one byte for the terminator the callback flavour needs. */
    const size_t cap = sizeof(bw->buf) - 1;
    while (len > 0) {
        if (bw->len == cap)
            ma_bw_flush(bw);
        size_t n = MA_MIN(len, cap - bw->len);
        memcpy(bw->buf + bw->len, s, n);
        bw->len += n;
        s += n;
        len -= n;
    }
}

void ma_bw_puts(ma_bufwriter_t *bw, const char *s)
{
    ma_bw_write(bw, s, strlen(s));
}

void ma_bw_printf(ma_bufwriter_t *bw, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    size_t n = ma_vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    ma_bw_write(bw, tmp, MA_MIN(n, sizeof(tmp) - 1));
}
