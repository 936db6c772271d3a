/*
 * fuzz_ctl: mallctl's name parser and MIB lookup on arbitrary input.
 *
 * The first byte picks what the rest is:
 *   0  a name for mallctl (read only: oldp and oldlenp always given, so no
 *      entry can write), and for ctl_lookup
 *   1  a name for mallctlnametomib, then mallctlbymib reads of the MIB
 *      with one numeric component replaced by the input's last bytes
 *   2  a raw MIB (up to 8 components, each from 2 bytes) for mallctlbymib
 *   3  a name; when it is a void entry (thread.tcache.flush,
 *      arena.<i>.purge, arena.<i>.decay: harmless), it is called
 * Any *oldlenp from 0 to 16 is tried against a 16-byte buffer. No input
 * writes a value: global state only changes through the void entries.
 *
 * Invariants (abort() when broken): a successful read returns exactly the
 * entry's type size; mallctl and mallctlnametomib + mallctlbymib agree;
 * ctl_lookup agrees with mallctl on whether a name exists.
 *
 * Built as a libFuzzer target by `make fuzz` and included by
 * test/test_fuzz_corpus.c (MYALLOC_FUZZ_NO_ENTRY) for the normal suite.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctl.h"
#include "myalloc.h"

#define FUZZ_CTL_NAMEMAX 256

static size_t fuzz_ctl_name(const uint8_t *data, size_t size, char *name)
{
    size_t n = size < FUZZ_CTL_NAMEMAX - 1 ? size : FUZZ_CTL_NAMEMAX - 1;
    memcpy(name, data, n);
    name[n] = '\0';
    return strlen(name);
}

/* A read of name (or mib) into a 16-byte buffer claiming oldlen bytes. */
static int fuzz_ctl_read(const char *name, const size_t *mib, size_t miblen, size_t oldlen, size_t *outlen)
{
    unsigned char buf[16 + 16];
    memset(buf, 0xa5, sizeof(buf));
    size_t len = oldlen;
    int r = name != NULL ? mallctl(name, buf, &len, NULL, 0) : mallctlbymib(mib, miblen, buf, &len, NULL, 0);
    /* Nothing written past what *oldlenp allowed. */
    for (size_t i = oldlen; i < sizeof(buf); i++)
        if (buf[i] != 0xa5)
            abort();
    if (r == 0 && len != oldlen)
        abort();
    if (r == EINVAL && len > oldlen)
        abort();
    *outlen = len;
    return r;
}

static int fuzz_ctl_check(int r)
{
    if (r != 0 && r != ENOENT && r != EINVAL && r != EPERM && r != EFAULT && r != EAGAIN)
        abort();
    return r;
}

int fuzz_ctl_input(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned mode = data[0] % 4;
    data++;
    size--;
    char name[FUZZ_CTL_NAMEMAX];
    size_t outlen;
    switch (mode) {
    case 0: {
        fuzz_ctl_name(data, size, name);
        ctl_entry_t e;
        ctl_req_t req;
        memset(&req, 0, sizeof(req));
        int found = ctl_lookup(name, &e, &req);
        size_t want = found == 0 ? ctl_type_size(e.type) : 8;
        int r = fuzz_ctl_check(fuzz_ctl_read(name, NULL, 0, want, &outlen));
        if (found != 0 && r != ENOENT)
            abort(); /* mallctl found what ctl_lookup did not */
        if (found == 0 && r == ENOENT && e.type == CTL_VOID)
            abort();
        /* Another length: EINVAL, EPERM or the same error as before. */
        size_t other = (size > 0 ? data[size - 1] : 0) % 17;
        int r2 = fuzz_ctl_check(fuzz_ctl_read(name, NULL, 0, other, &outlen));
        if (r == 0 && other != want && r2 != EINVAL)
            abort();
        /* By MIB: the same answer. */
        size_t mib[CTL_MAX_DEPTH], miblen = CTL_MAX_DEPTH;
        if (fuzz_ctl_check(mallctlnametomib(name, mib, &miblen)) == 0) {
            if (miblen == 0 || miblen > CTL_MAX_DEPTH)
                abort();
            int rb = fuzz_ctl_check(fuzz_ctl_read(NULL, mib, miblen, want, &outlen));
            if (rb != r)
                abort();
        } else if (r == 0) {
            abort(); /* readable by name but not translatable */
        }
        break;
    }
    case 1: {
        size_t n = fuzz_ctl_name(data, size, name);
        size_t mib[CTL_MAX_DEPTH], miblen = CTL_MAX_DEPTH;
        if (fuzz_ctl_check(mallctlnametomib(name, mib, &miblen)) != 0)
            break;
        /* Replace one component with a number from the bytes after the
         * name (or the last bytes). */
        const uint8_t *tail = data + (n < size ? n + 1 : (size >= 3 ? size - 3 : 0));
        size_t tl = (size_t)(data + size - tail);
        size_t k = tl > 0 ? tail[0] % miblen : 0;
        size_t v = 0;
        for (size_t i = 1; i < tl && i < 9; i++)
            v = v << 8 | tail[i];
        mib[k] = v;
        for (size_t len = 0; len <= 16; len += 4)
            fuzz_ctl_check(fuzz_ctl_read(NULL, mib, miblen, len, &outlen));
        fuzz_ctl_check(fuzz_ctl_read(NULL, mib, miblen, 1, &outlen));
        break;
    }
    case 2: {
        size_t mib[CTL_MAX_DEPTH + 1];
        size_t miblen = 0;
        for (size_t i = 0; i + 1 < size && miblen < CTL_MAX_DEPTH + 1; i += 2)
            mib[miblen++] = (size_t)data[i] << 8 | data[i + 1];
        /* Large values too: the top bit of a component's first byte
         * stretches it. */
        for (size_t i = 0; i < miblen; i++)
            if (mib[i] & 0x8000)
                mib[i] = ~(size_t)0 - (mib[i] & 0x7fff);
        for (size_t len = 0; len <= 16; len++)
            fuzz_ctl_check(fuzz_ctl_read(NULL, mib, miblen, len, &outlen));
        /* NULL oldlenp with an oldp, and the other way round. */
        unsigned char buf[16];
        size_t len = 8;
        fuzz_ctl_check(mallctlbymib(mib, miblen, buf, NULL, NULL, 0));
        fuzz_ctl_check(mallctlbymib(mib, miblen, NULL, &len, NULL, 0));
        if (len != 8)
            abort(); /* no oldp: *oldlenp untouched */
        break;
    }
    default: {
        fuzz_ctl_name(data, size, name);
        ctl_entry_t e;
        ctl_req_t req;
        memset(&req, 0, sizeof(req));
        if (ctl_lookup(name, &e, &req) != 0 || e.type != CTL_VOID)
            break;
        int r = fuzz_ctl_check(mallctl(name, NULL, NULL, NULL, 0));
        if (r != 0 && r != ENOENT)
            abort();
        break;
    }
    }
    return 0;
}

#ifndef MYALLOC_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_ctl_input(data, size);
}
#endif
