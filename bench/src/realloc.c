/*
 * realloc: mixed sizes with realloc grow/shrink chains (single thread).
 *
 *   realloc CHAINS STEPS MAXSZ
 *
 * CHAINS live buffers. Each step picks a random chain and reallocs it:
 * 60% of the steps grow it (by 10% to 100%, at least 8 bytes), 40% shrink
 * it (to 50%-90%). A chain that would pass MAXSZ is freed and restarted
 * with a fresh malloc of 16-64 bytes. Every byte of a chain's buffer holds
 * the chain's current seed byte: after each realloc the program checks the
 * first, last and a random byte of the preserved prefix and fills the new
 * tail (memset). A restarted chain gets a new seed.
 * ops = STEPS realloc calls (plus the occasional free + malloc).
 */
#include "bench.h"

static const char usage[] = "realloc CHAINS STEPS MAXSZ";

typedef struct {
    unsigned char *p;
    size_t size;
    unsigned char seed;
} chain_t;

static void fill(chain_t *c, size_t from, size_t to)
{
    memset(c->p + from, c->seed, to - from);
}

static void check(const chain_t *c, size_t n, uint64_t *rng)
{
    if (n == 0)
        return;
    size_t ks[3] = {0, n - 1, (size_t)(rng_next(rng) >> 11) % n};
    for (int i = 0; i < 3; i++)
        if (c->p[ks[i]] != c->seed)
            bench_fail("realloc lost the contents of %p (byte %zu of %zu)", (void *)c->p, ks[i],
                       n);
}

static void restart(chain_t *c, uint64_t *rng)
{
    free(c->p);
    c->size = rng_range(rng, 16, 64);
    c->p = malloc(c->size);
    if (c->p == NULL)
        bench_fail("malloc(%zu) returned NULL", c->size);
    c->seed = (unsigned char)rng_next(rng);
    fill(c, 0, c->size);
}

static BENCH_NOINLINE void run(chain_t *chains, size_t nchains, long steps, size_t maxsz,
                               uint64_t *rng)
{
    for (long s = 0; s < steps; s++) {
        chain_t *c = &chains[(size_t)(rng_next(rng) >> 11) % nchains];
        size_t old = c->size, nsz;
        if (rng_next(rng) % 10 < 6) {
            size_t inc = old * rng_range(rng, 10, 100) / 100;
            nsz = old + (inc < 8 ? 8 : inc);
            if (nsz > maxsz) {
                restart(c, rng);
                continue;
            }
        } else {
            nsz = old * rng_range(rng, 50, 90) / 100;
            if (nsz < 1)
                nsz = 1;
        }
        unsigned char *q = realloc(c->p, nsz);
        if (q == NULL)
            bench_fail("realloc(%p, %zu) returned NULL", (void *)c->p, nsz);
        c->p = q;
        c->size = nsz;
        check(c, old < nsz ? old : nsz, rng);
        if (nsz > old)
            fill(c, old, nsz);
    }
}

int main(int argc, char **argv)
{
    if (argc != 4)
        bench_usage(usage);
    size_t nchains = (size_t)bench_arg(argv[1], usage);
    long steps = bench_arg(argv[2], usage);
    size_t maxsz = (size_t)bench_arg(argv[3], usage);
    if (maxsz < 128)
        bench_usage("realloc: MAXSZ must be >= 128");
    chain_t *chains = hmem(nchains * sizeof(*chains));
    uint64_t rng = 7;
    for (size_t i = 0; i < nchains; i++)
        restart(&chains[i], &rng);
    run(chains, nchains, steps / 10 + 1, maxsz, &rng);
    bstamp_t a, b;
    bstamp(&a);
    run(chains, nchains, steps, maxsz, &rng);
    bstamp(&b);
    for (size_t i = 0; i < nchains; i++) {
        check(&chains[i], chains[i].size, &rng);
        free(chains[i].p);
    }
    bench_report((double)steps, &a, &b, NULL);
    return 0;
}
