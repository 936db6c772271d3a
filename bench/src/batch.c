/*
 * batch: 1000 allocations, then 1000 frees (in allocation order), repeated.
 *
 *   batch fixed SIZE NBATCH
 *   batch mixed 0 NBATCH
 *
 * fixed: every object is SIZE bytes. mixed: sizes from a fixed table of
 * 1000 sizes (half 16-128 B, a third 129-1024 B, the rest 1025-4096 B; the
 * same sequence for every allocator), rotated from one batch to the next.
 * Each object gets its index written at both ends; all are checked before
 * being freed (objects that overlap would clobber each other).
 * ops = NBATCH * 1000 malloc+free pairs.
 */
#include "bench.h"

#define BATCH 1000

static const char usage[] = "batch fixed|mixed SIZE NBATCH";

static size_t sizes[BATCH];
static void *ptrs[BATCH];

static BENCH_NOINLINE void run(long nbatch, long first)
{
    for (long b = first; b < first + nbatch; b++) {
        size_t rot = (size_t)(b * 7) % BATCH;
        for (size_t i = 0; i < BATCH; i++) {
            size_t sz = sizes[(i + rot) % BATCH];
            unsigned char *p = malloc(sz);
            if (p == NULL)
                bench_fail("malloc(%zu) returned NULL", sz);
            uint32_t tag = (uint32_t)(b * BATCH + (long)i);
            memcpy(p, &tag, 4);
            memcpy(p + sz - 4, &tag, 4);
            ptrs[i] = p;
        }
        for (size_t i = 0; i < BATCH; i++) {
            size_t sz = sizes[(i + rot) % BATCH];
            unsigned char *p = ptrs[i];
            uint32_t tag = (uint32_t)(b * BATCH + (long)i), t1, t2;
            memcpy(&t1, p, 4);
            memcpy(&t2, p + sz - 4, 4);
            if (t1 != tag || t2 != tag)
                bench_fail("object %zu of batch %ld (%p, %zu B) was overwritten", i, b,
                           (void *)p, sz);
            free(p);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 4)
        bench_usage(usage);
    int mixed;
    if (strcmp(argv[1], "fixed") == 0)
        mixed = 0;
    else if (strcmp(argv[1], "mixed") == 0)
        mixed = 1;
    else
        bench_usage(usage);
    long nbatch = bench_arg(argv[3], usage);
    uint64_t rng = 42;
    for (size_t i = 0; i < BATCH; i++) {
        if (!mixed) {
            sizes[i] = (size_t)bench_arg(argv[2], usage);
            if (sizes[i] < 4)
                bench_usage("batch fixed: SIZE must be >= 4");
            continue;
        }
        uint64_t r = rng_next(&rng) % 100;
        if (r < 50)
            sizes[i] = rng_range(&rng, 16, 128);
        else if (r < 85)
            sizes[i] = rng_range(&rng, 129, 1024);
        else
            sizes[i] = rng_range(&rng, 1025, 4096);
    }
    run(nbatch / 10 + 1, 0);
    bstamp_t a, b;
    bstamp(&a);
    run(nbatch, nbatch / 10 + 1);
    bstamp(&b);
    bench_report((double)nbatch * BATCH, &a, &b, NULL);
    return 0;
}
