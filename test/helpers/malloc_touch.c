/*
 * malloc_touch: a trivial program that allocates (so that an allocator
 * given by LD_PRELOAD initialises), writes and frees, then exits 0.
 * Run by test_config.c. Prints nothing.
 */
#include <stdlib.h>
#include <string.h>

int main(void)
{
    size_t sizes[] = {1, 100, 5000, 1 << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char *volatile p = malloc(sizes[i]);
        if (p == NULL)
            return 1;
        memset(p, 1, sizes[i]);
        free(p);
    }
    return 0;
}
