/*
 * pairs: single-thread malloc+free pairs of one size.
 *
 *   pairs SIZE N
 *
 * N/10 warm-up pairs, then N timed pairs: p = malloc(SIZE); write its first
 * and last byte; read them back into a checksum; free(p).
 * ops = N pairs.
 */
#include "bench.h"

static const char usage[] = "pairs SIZE N";

static BENCH_NOINLINE uint64_t run(size_t size, long n)
{
    uint64_t sum = 0;
    for (long i = 0; i < n; i++) {
        unsigned char *p = malloc(size);
        if (p == NULL)
            bench_fail("malloc(%zu) returned NULL", size);
        p[0] = (unsigned char)i;
        p[size - 1] = (unsigned char)(i >> 8);
        __asm__ volatile("" ::: "memory");
        sum += p[0] + p[size - 1];
        free(p);
    }
    return sum;
}

static uint64_t expected(size_t size, long n)
{
    uint64_t sum = 0;
    for (long i = 0; i < n; i++) /* with size 1, the second write wins */
        sum += size > 1 ? (unsigned char)i + (unsigned char)(i >> 8)
                        : 2u * (unsigned char)(i >> 8);
    return sum;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        bench_usage(usage);
    size_t size = (size_t)bench_arg(argv[1], usage);
    long n = bench_arg(argv[2], usage);
    long warm = n / 10 + 1;
    if (run(size, warm) != expected(size, warm))
        bench_fail("checksum mismatch in warm-up");
    bstamp_t a, b;
    bstamp(&a);
    uint64_t sum = run(size, n);
    bstamp(&b);
    if (sum != expected(size, n))
        bench_fail("checksum mismatch");
    bench_report((double)n, &a, &b, NULL);
    return 0;
}
