/*
 * instr: the loops bench/instr.sh runs under callgrind.
 *
 *   instr pairs SIZE N      N malloc(SIZE)+free pairs
 *   instr batch SIZE N      N batches of 1000 mallocs then 1000 frees
 *
 * The loops are kept minimal and live in the non-inlined functions
 * run_pairs and run_batch: bench/instr.sh reads their own (exclusive)
 * instruction counts from callgrind_annotate and subtracts them, so that
 * the "allocator only" figure is what malloc and free cost. The allocated
 * memory is touched (one byte) and checked, so the calls cannot be
 * optimised away or answered with nothing.
 */
#include "bench.h"

#define BATCH 1000

static const char usage[] = "instr pairs|batch SIZE N";

static void *ptrs[BATCH];

BENCH_NOINLINE unsigned long run_pairs(size_t size, long n)
{
    unsigned long sum = 0;
    for (long i = 0; i < n; i++) {
        unsigned char *p = malloc(size);
        if (__builtin_expect(p == NULL, 0))
            bench_fail("malloc(%zu) returned NULL", size);
        *p = 1;
        __asm__ volatile("" ::: "memory");
        sum += *p;
        free(p);
    }
    return sum;
}

BENCH_NOINLINE unsigned long run_batch(size_t size, long n)
{
    unsigned long sum = 0;
    for (long b = 0; b < n; b++) {
        for (int i = 0; i < BATCH; i++) {
            unsigned char *p = malloc(size);
            if (__builtin_expect(p == NULL, 0))
                bench_fail("malloc(%zu) returned NULL", size);
            *p = 1;
            ptrs[i] = p;
        }
        __asm__ volatile("" ::: "memory");
        for (int i = 0; i < BATCH; i++) {
            unsigned char *p = ptrs[i];
            sum += *p;
            free(p);
        }
    }
    return sum;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        bench_usage(usage);
    size_t size = (size_t)bench_arg(argv[2], usage);
    long n = bench_arg(argv[3], usage);
    unsigned long sum, want;
    if (strcmp(argv[1], "pairs") == 0) {
        sum = run_pairs(size, n);
        want = (unsigned long)n;
    } else if (strcmp(argv[1], "batch") == 0) {
        sum = run_batch(size, n);
        want = (unsigned long)n * BATCH;
    } else {
        bench_usage(usage);
    }
    if (sum != want)
        bench_fail("checksum %lu, expected %lu", sum, want);
    printf("RESULT ops=%lu\n", want);
    return 0;
}
