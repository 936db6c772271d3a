/*
 * Two builds of one library for test_prof_unwind.c's dlclose test:
 * libunwind_swap_a.so (SWAP_BYTES 16) and libunwind_swap_b.so (SWAP_BYTES
 * 64). Frames of different sizes, same instructions and lengths (the
 * immediates fit a byte either way): loaded one after the other at the
 * same address, their return addresses are the same and their rules are
 * not, so a rule kept across the dlclose would unwind B wrongly.
 */
typedef int uw_cb(void *arg);

#define EXPORT __attribute__((visibility("default"), noinline))

EXPORT int swap_frame(int depth, uw_cb *cb, void *arg)
{
    volatile char buf[SWAP_BYTES];
    buf[0] = (char)depth;
    int r = depth == 0 ? cb(arg) : swap_frame(depth - 1, cb, arg);
    __asm__ volatile("" : "+r"(r) : : "memory");
    return r + buf[0];
}

/* Which build this is (the test checks it loaded the one it asked for). */
EXPORT int swap_bytes(void)
{
    return SWAP_BYTES;
}
