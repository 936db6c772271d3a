/*
 * safety_probe: one misuse of the allocator, chosen by argv[1], for
 * test_safety.c to run as a subprocess under LD_PRELOAD (so that
 * MYALLOC_CONF, read once at initialisation, can differ from the test's).
 *
 * Prints "ptr=<%p>" on stdout (flushed) before the misuse, so the test can
 * look for that value in the allocator's message. Exit 0 means the misuse
 * went undetected; 2 is a usage error.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void announce(const void *p)
{
    printf("ptr=%p\n", p);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    const char *c = argv[1];
    /* volatile: keep the compiler from reasoning about the misuse. */
    char *volatile p = malloc(64);
    if (p == NULL)
        return 3;
    memset(p, 1, 64);
    if (strcmp(c, "small_double_free") == 0) {
        announce(p);
        free(p);
        free(p);
    } else if (strcmp(c, "small_interior_free") == 0) {
        /* Through an integer, so the compiler does not warn about it. */
        volatile uintptr_t a = (uintptr_t)p + 16;
        announce((void *)a);
        free((void *)a);
    } else {
        return 2;
    }
    printf("misuse not detected\n");
    return 0;
}
