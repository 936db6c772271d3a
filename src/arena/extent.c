/*
 * extent: page runs, free-extent sets and the page pool, see extent.h.
 */
#include "extent.h"

#include <string.h>

#include "base.h"
#include "pages.h"

#define CHUNK_ALIGN   ((size_t)2 << 20)   /* lets THP back whole chunks */
#define CHUNK_GROW_MIN ((size_t)2 << 20)
#define CHUNK_GROW_MAX ((size_t)1 << 30)

static base_cache_t extent_records = BASE_CACHE_INIT(extent_t);
uint64_t extent_nchunks;

/* 250 ms: see doc/internals.md (decay.c) for what 1000 and 100 cost and gave. */
ssize_t extent_opt_dirty_decay_ms = 250;
ssize_t extent_opt_muzzy_decay_ms = 0;
/* 3 s: see doc/internals.md (decay.c). */
ssize_t extent_opt_dirty_hold_ms = 3000;
bool extent_opt_retain = true;
unsigned extent_opt_thp;

/* ---------------------------------------------------------------------
 * Pairing heap by address. ph_prev is the parent for a leftmost child and
 * the left sibling otherwise; a root has no prev and no next.
 */

static extent_t *ph_meld(extent_t *a, extent_t *b)
{
    if (a == NULL)
        return b;
    if (b == NULL)
        return a;
    if (b->addr < a->addr) {
        extent_t *t = a;
        a = b;
        b = t;
    }
    b->ph_prev = a;
    b->ph_next = a->ph_child;
    if (a->ph_child != NULL)
        a->ph_child->ph_prev = b;
    a->ph_child = b;
    return a;
}

/* Two-pass merge of a sibling list into one heap. */
static extent_t *ph_merge_pairs(extent_t *first)
{
    extent_t *pairs = NULL;
    while (first != NULL) {
        extent_t *a = first, *b = first->ph_next;
        first = b != NULL ? b->ph_next : NULL;
        a->ph_prev = a->ph_next = NULL;
        if (b != NULL) {
            b->ph_prev = b->ph_next = NULL;
            a = ph_meld(a, b);
        }
        a->ph_next = pairs; /* list link while collecting */
        pairs = a;
    }
    extent_t *res = NULL;
    while (pairs != NULL) {
        extent_t *n = pairs->ph_next;
        pairs->ph_next = NULL;
        res = ph_meld(res, pairs);
        pairs = n;
    }
    return res;
}

void extent_heap_insert(extent_heap_t *h, extent_t *e)
{
    e->ph_child = e->ph_prev = e->ph_next = NULL;
    h->root = ph_meld(h->root, e);
}

extent_t *extent_heap_walk_next(extent_t *e)
{
    if (e->ph_child != NULL)
        return e->ph_child;
    for (;;) {
        if (e->ph_next != NULL)
            return e->ph_next;
        /* Up to the parent: back along the siblings to the leftmost child. */
        extent_t *p = e->ph_prev;
        while (p != NULL && p->ph_child != e) {
            e = p;
            p = e->ph_prev;
        }
        if (p == NULL)
            return NULL;
        e = p;
    }
}

void extent_heap_remove(extent_heap_t *h, extent_t *e)
{
    if (h->root == e) {
        h->root = ph_merge_pairs(e->ph_child);
    } else {
        extent_t *prev = e->ph_prev;
        if (prev->ph_child == e)
            prev->ph_child = e->ph_next;
        else
            prev->ph_next = e->ph_next;
        if (e->ph_next != NULL)
            e->ph_next->ph_prev = prev;
        h->root = ph_meld(h->root, ph_merge_pairs(e->ph_child));
    }
    e->ph_child = e->ph_prev = e->ph_next = NULL;
}

/* ---------------------------------------------------------------------
 * Sets of free extents.
 */

static void eset_init(eset_t *s, enum extent_state state)
{
    s->state = state; /* the rest was cleared with the pool */
}

static void eset_insert(eset_t *s, extent_t *e)
{
    unsigned ind = sc_size2index_floor(e->size);
    e->state = (uint8_t)s->state;
    e->szind = SC_NSIZES;
    e->slab = false;
    extent_heap_insert(&s->heaps[ind], e);
    s->nonempty[ind / 64] |= (uint64_t)1 << (ind % 64);
    e->lru_next = NULL;
    e->lru_prev = s->lru.tail;
    if (s->lru.tail != NULL)
        s->lru.tail->lru_next = e;
    else
        s->lru.head = e;
    s->lru.tail = e;
    s->npages += e->size >> LG_PAGE;
    s->nextents++;
}

static void eset_remove(eset_t *s, extent_t *e)
{
    unsigned ind = sc_size2index_floor(e->size);
    extent_heap_remove(&s->heaps[ind], e);
    if (s->heaps[ind].root == NULL)
        s->nonempty[ind / 64] &= ~((uint64_t)1 << (ind % 64));
    if (e->lru_prev != NULL)
        e->lru_prev->lru_next = e->lru_next;
    else
        s->lru.head = e->lru_next;
    if (e->lru_next != NULL)
        e->lru_next->lru_prev = e->lru_prev;
    else
        s->lru.tail = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
    s->npages -= e->size >> LG_PAGE;
    s->nextents--;
}

/* The lowest-addressed extent of the smallest size class holding one of at
 * least esize bytes: every extent binned at or above esize's (ceiling) class
 * fits. Taking the smallest class, not the lowest address of all of them,
 * leaves big free runs whole and gives a freed slab's pages back to a slab
 * of the same size, whose objects touch the same pages: with the lowest
 * address of any class, larson 16 B-32 KiB (1 thread) kept cutting slabs
 * out of bigger runs, wrote pages that run had never had written, and
 * reached 24,808 KiB over 15M operations (best fit: 20,456 KiB, tcmalloc
 * 21,204; page faults 5,950 -> 4,890, CPU x 0.94). footprint server (a
 * 4 s day) ends at 190,008 KiB, not 204,720; threads (64 MB, 500 threads)
 * frees down to 26,096 KiB, not 35,860. */
static extent_t *eset_best_fit(eset_t *s, size_t esize)
{
    if (s->nextents == 0 || esize > SC_LARGE_MAXCLASS)
        return NULL;
    unsigned ind = sc_size2index(esize);
    for (unsigned w = ind / 64; w < MA_ARRAY_LEN(s->nonempty); w++) {
        uint64_t bits = s->nonempty[w];
        if (w == ind / 64)
            bits &= ~(uint64_t)0 << (ind % 64);
        if (bits != 0)
            return s->heaps[w * 64 + (unsigned)__builtin_ctzll(bits)].root;
    }
    return NULL;
}

/* An extent of s to cut an align-aligned run of size bytes from: the best
 * fit (above) of the smaller classes, from size's up, whose lowest extent
 * happens to fit (a heap's lowest only), else the best fit of at least
 * esize = size + align - PAGE bytes (every one fits). Without the smaller
 * ones a freed run of large alignment was never found again: dirty, it
 * splits its chunk's retained space into pieces under esize, so the next
 * request mapped a new chunk, and a loop of aligned_alloc(1 << 40, 100)
 * and free ran out of address space in about 180 rounds. */
static bool extent_fits_aligned(const extent_t *e, size_t size, size_t align)
{
    uintptr_t start = MA_ALIGN_UP(e->addr, align);
    return start >= e->addr && start - e->addr <= e->size - size;
}

static extent_t *eset_fit(eset_t *s, size_t size, size_t align, size_t esize)
{
    if (align > PAGE && s->nextents != 0 && size <= SC_LARGE_MAXCLASS) {
        unsigned lo = sc_size2index(size);
        unsigned hi = esize > SC_LARGE_MAXCLASS ? SC_NSIZES : sc_size2index(esize);
        for (unsigned ind = lo; ind < hi; ind++) {
            if (!(s->nonempty[ind / 64] & ((uint64_t)1 << (ind % 64))))
                continue;
            extent_t *e = s->heaps[ind].root;
            if (extent_fits_aligned(e, size, align))
                return e;
        }
    }
    return eset_best_fit(s, esize);
}

static eset_t *pool_set(extent_pool_t *pool, enum extent_state state)
{
    return state == EXTENT_DIRTY ? &pool->dirty : state == EXTENT_MUZZY ? &pool->muzzy : &pool->retained;
}

/* ---------------------------------------------------------------------
 * Page-map registration. Free extents map their first and last page to
 * themselves with szind SC_NSIZES; see rtree.h for the whole contract.
 */

static rtree_elm_t elm_free(extent_t *e) { return rtree_elm_make(e, SC_NSIZES, 0); }

static void register_boundaries(extent_t *e, rtree_elm_t elm)
{
    rtree_write(e->addr, elm);
    if (e->size > PAGE)
        rtree_write(e->addr + e->size - PAGE, elm);
}

/* Pre-create the page-map leaves a range will need, so later writes under
 * the pool lock cannot fail. */
static bool rtree_prepare(uintptr_t addr, size_t size)
{
    for (uintptr_t a = addr; a < addr + size; a += (uintptr_t)1 << RTREE_LG_LEAF_SPAN) {
        if (rtree_elm_get(a) == NULL)
            return false;
    }
    return rtree_elm_get(addr + size - PAGE) != NULL;
}

/* ---------------------------------------------------------------------
 * Pool.
 */

/* Every pool by its index: an active slab finds the fast map of the arena
 * using it through arena_ind (extent_t keeps no pointer to it). */
MA_LARGE_BSS static extent_pool_t *pools_by_ind[EXTENT_POOL_IND_MAX + 1];

/* The pools that lend each other dirty pages ("Shared pools" below), in the order
 * they joined; the first SHARED_FASTMAPS_MAX also share the marks of slabs
 * of whole-line classes (slab_fastmaps_write). */
#define SHARED_POOLS_MAX 64 /* pools of arenas created later keep to themselves */
#define SHARED_FASTMAPS_MAX 16
static extent_pool_t *shared_pools[SHARED_POOLS_MAX];
static unsigned shared_npools;
static ma_mutex_t shared_lock = MA_MUTEX_INITIALIZER;

void extent_pool_init(extent_pool_t *pool, unsigned ind, bool nohuge)
{
    if (ind > EXTENT_POOL_IND_MAX)
        ma_fatal("extent pool index %u out of range", ind);
    eset_init(&pool->dirty, EXTENT_DIRTY);
    eset_init(&pool->muzzy, EXTENT_MUZZY);
    eset_init(&pool->retained, EXTENT_RETAINED);
    pool->grow_next = CHUNK_GROW_MIN;
    pool->nohuge = nohuge;
    pool->ind = ind;
    uint64_t now = decay_now_ns();
    decay_init(&pool->decay_dirty, extent_opt_dirty_decay_ms, now);
    decay_init(&pool->decay_muzzy, extent_opt_muzzy_decay_ms, now);
    decay_hold_init(&pool->hold, extent_opt_dirty_hold_ms, now, 0);
    ma_store_release(&pools_by_ind[ind], pool);
}

/* Map a new chunk of at least esize bytes into the retained set. */
static bool pool_grow(extent_pool_t *pool, size_t esize)
{
    /* Searches start at esize's ceiling class, and free extents are binned
     * by their floor class: the chunk must be at least that class's size. */
    size_t need = sc_s2u(esize);
    if (need == 0)
        return false;
    size_t size = MA_MAX(pool->grow_next, MA_ALIGN_UP(need, CHUNK_ALIGN));
    if (size < need)
        return false;
    void *p = pages_map(size, CHUNK_ALIGN);
    if (p == NULL && size > need) {
        size = PAGE_CEIL(need);
        p = pages_map(size, PAGE);
    }
    if (p == NULL)
        return false;
    chunk_t *chunk = base_alloc(sizeof(chunk_t), 16);
    extent_t *e = base_cache_get(&extent_records);
    if (chunk == NULL || e == NULL || !rtree_prepare((uintptr_t)p, size)) {
        pages_unmap(p, size);
        if (e != NULL)
            base_cache_put(&extent_records, e);
        return false;
    }
    if (pool->nohuge || extent_opt_thp == 2)
        pages_nohuge(p, size);
    else if (extent_opt_thp == 1)
        pages_huge(p, size);
    chunk->base = (uintptr_t)p;
    chunk->size = size;
    chunk->next = pool->chunks;
    pool->chunks = chunk;
    e->addr = (uintptr_t)p;
    e->size = size;
    e->pool = pool;
    e->chunk = chunk;
    e->arena_ind = pool->ind;
    register_boundaries(e, elm_free(e));
    eset_insert(&pool->retained, e);
    pool->stats.mapped += size;
    ma_fetch_add(&extent_nchunks, 1);
    if (pool->grow_next < CHUNK_GROW_MAX)
        pool->grow_next *= 2;
    return true;
}

/* Cut e at lead_size: e keeps the lead, the returned record the rest.
 * No page-map writes; NULL if no record could be had. */
static extent_t *extent_split_raw(extent_t *e, size_t lead_size)
{
    extent_t *t = base_cache_get(&extent_records);
    if (t == NULL)
        return NULL;
    t->addr = e->addr + lead_size;
    t->size = e->size - lead_size;
    t->pool = e->pool;
    t->chunk = e->chunk;
    t->arena_ind = e->arena_ind;
    e->size = lead_size;
    return t;
}

static void pool_maybe_unmap(extent_pool_t *pool, extent_t *e);
static size_t pool_purge_locked(extent_pool_t *pool, eset_t *from, size_t keep, size_t max_pages,
                                bool to_muzzy);

/* One purge event of kind 0 (dirty) or 1 (muzzy) in the pool's stats. */
static void pool_count_purge_locked(extent_pool_t *pool, int kind, size_t nmadvise, size_t pages)
{
    pool->stats.npurge[kind]++;
    pool->stats.nmadvise[kind] += nmadvise;
    pool->stats.purged_pages[kind] += pages;
}

/* The fast map that marks active slab e's pages: its arena's (arena_ind),
 * for classes a cache bin can hold; NULL for the others, which take free's
 * slow path. */
static rtree_fastmap_t *slab_fastmap(const extent_t *e)
{
    return sc_index2size(e->szind) <= UINT16_MAX ? pools_by_ind[e->arena_ind]->fastmap : NULL;
}

/* Mark slab e's pages as class ind1 - 1 (0: none) in its arena's fast map
 * and, for classes of whole cache lines (rtree_line_class), in those of the
 * first SHARED_FASTMAPS_MAX shared pools too: any thread may cache such an
 * object, and free's fast path then finds another arena's in its own map
 * (rtree.h). A pool shared after e was marked does not see it: its zero
 * bytes send those frees to the slow path, which is always correct. */
static void slab_fastmaps_write(const extent_t *e, unsigned ind1)
{
    rtree_fastmap_t *own = slab_fastmap(e);
    if (own == NULL)
        return;
    bool own_written = false;
    if (rtree_line_class(e->szind)) {
        unsigned n = MA_MIN(ma_load_acquire(&shared_npools), SHARED_FASTMAPS_MAX);
        for (unsigned i = 0; i < n; i++) {
            rtree_fastmap_t *fm = ma_load_relaxed(&shared_pools[i])->fastmap;
            if (fm == NULL)
                continue;
            rtree_fastmap_write(fm, e->addr, e->size, ind1);
            own_written |= fm == own;
        }
    }
    if (!own_written)
        rtree_fastmap_write(own, e->addr, e->size, ind1);
}

void extent_slab_set_bypass(extent_t *e, bool bypass)
{
    ma_store_relaxed(&e->cache_bypass, bypass);
    slab_fastmaps_write(e, bypass ? 0 : e->szind + 1u);
}

/* Merge e with free neighbours of set's state, then insert it. */
static void pool_insert_coalesced(extent_pool_t *pool, eset_t *set, extent_t *e)
{
    chunk_t *c = e->chunk;
    if (e->addr > c->base) {
        extent_t *n = rtree_elm_extent(rtree_lookup(e->addr - PAGE));
        if (n != NULL && n->state == set->state) {
            eset_remove(set, n);
            if (n->size > PAGE)
                rtree_write(n->addr + n->size - PAGE, RTREE_STALE);
            rtree_write(e->addr, RTREE_STALE);
            n->size += e->size;
            base_cache_put(&extent_records, e);
            e = n;
        }
    }
    uintptr_t end = e->addr + e->size;
    if (end < c->base + c->size) {
        extent_t *n = rtree_elm_extent(rtree_lookup(end));
        if (n != NULL && n->state == set->state) {
            eset_remove(set, n);
            if (e->size > PAGE)
                rtree_write(end - PAGE, RTREE_STALE);
            rtree_write(end, RTREE_STALE);
            e->size += n->size;
            base_cache_put(&extent_records, n);
        }
    }
    register_boundaries(e, elm_free(e));
    eset_insert(set, e);
    if (set == &pool->retained)
        pool_maybe_unmap(pool, e);
}

static void register_active(extent_t *e, extent_pool_t *user, unsigned szind, bool slab)
{
    e->state = EXTENT_ACTIVE;
    e->szind = (uint16_t)szind;
    e->slab = slab;
    e->sampled = false;
    e->prof = NULL;
    e->arena_ind = user->ind;
    e->cache_bypass = false;
    if (slab) {
        e->remote_head = NULL; /* no remote bits either; shares storage with the LRU links */
        e->remote_next = NULL;
        rtree_write_range(e->addr, e->size, rtree_elm_make(e, szind, RTREE_SLAB));
        slab_fastmaps_write(e, szind + 1);
    } else
        register_boundaries(e, rtree_elm_make(e, szind, 0));
}

/* Under pool's lock: npages more are in use (the hold notes the level). */
static void pool_active_grow(extent_pool_t *pool, size_t npages)
{
    pool->stats.active_pages += npages;
    decay_hold_note(&pool->hold, pool->stats.active_pages);
}

/* Under pool's lock: take e out of set and cut it to [start, start + size)
 * with start the first align-aligned address in it (e is one eset_fit
 * chose); the lead and trail stay in set. NULL (e back in set) when no
 * record could be had for a cut. The result counts as pool's active. */
static extent_t *pool_take_locked(extent_pool_t *pool, eset_t *set, extent_t *e, size_t size, size_t align)
{
    eset_remove(set, e);
    uintptr_t start = MA_ALIGN_UP(e->addr, align);
    if (start != e->addr) {
        extent_t *rest = extent_split_raw(e, start - e->addr);
        if (rest == NULL)
            goto fail;
        register_boundaries(e, elm_free(e));
        eset_insert(set, e);
        e = rest;
    }
    if (e->size > size) {
        extent_t *trail = extent_split_raw(e, size);
        if (trail == NULL)
            goto fail;
        register_boundaries(trail, elm_free(trail));
        eset_insert(set, trail);
    }
    pool_active_grow(pool, size >> LG_PAGE);
    return e;
fail:
    register_boundaries(e, elm_free(e));
    pool_insert_coalesced(pool, set, e);
    return NULL;
}

/*
 * Shared pools: each arena has its own pool (its own lock, its own chunks),
 * so pages one arena's objects freed could only serve that arena's next
 * slabs, while another arena mapped fresh ones: a thread that allocated a
 * heap and handed it to workers kept every page its workers freed dirty
 * until decay, and the workers' arenas grew meanwhile. So an arena that
 * finds no dirty or muzzy pages of its own takes another's dirty extent
 * before it touches retained memory or maps a chunk. Only with a try-lock
 * (the taker already holds its own pool's lock, and nothing else ever
 * holds two), skipping pools with no dirty pages without locking them.
 */
/* A thread that allocates 100 MB/s ticks (every TE_PERIODIC_INTERVAL_MAX
 * bytes at most) well within this. */
#define EXTENT_BUSY_NS ((uint64_t)10 * 1000 * 1000)
/* Mark in fm, which slab_fastmaps_write already writes, the slabs of
 * whole-line classes that other arenas made before: those of the arena of
 * the thread that set up a program's heap (larson's) would otherwise take
 * free's slow path from every later arena's threads for good. Each pool's
 * chunks under its lock, where its slabs' marks are written (a sparse
 * slab's under its bin's lock: marked here meanwhile, its frees are cached
 * a while longer, as a policy, never in the wrong bin). Only the shared
 * pools, the arenas' (a later one's slabs stay unmarked here: correct, if
 * slower): the caller holds the arenas' locks, which fork's prepare takes
 * before theirs but after the profiler's pool's (a fork during an arena's
 * creation deadlocked on that one). */
static void fastmap_backfill(rtree_fastmap_t *fm)
{
    unsigned n = ma_load_acquire(&shared_npools);
    for (unsigned i = 0; i < n; i++) {
        extent_pool_t *pool = shared_pools[i];
        if (pool->fastmap == fm)
            continue;
        ma_mutex_lock(&pool->lock);
        for (chunk_t *c = pool->chunks; c != NULL; c = c->next) {
            for (uintptr_t a = c->base; a < c->base + c->size;) {
                rtree_elm_t elm = rtree_lookup(a);
                const extent_t *e = rtree_elm_extent(elm);
                if ((elm & RTREE_SLAB) && e->addr == a) {
                    if (rtree_line_class(e->szind) && !ma_load_relaxed(&e->cache_bypass))
                        rtree_fastmap_write(fm, e->addr, e->size, e->szind + 1u);
                    a += e->size;
                } else {
                    a += PAGE;
                }
            }
        }
        ma_mutex_unlock(&pool->lock);
    }
}

void extent_pool_share(extent_pool_t *pool)
{
    ma_mutex_lock(&shared_lock);
    bool maps_shared = false;
    if (!pool->shared && shared_npools < SHARED_POOLS_MAX) {
        pool->shared = true;
        maps_shared = shared_npools < SHARED_FASTMAPS_MAX && pool->fastmap != NULL;
        shared_pools[shared_npools] = pool;
        ma_store_release(&shared_npools, shared_npools + 1);
    }
    ma_mutex_unlock(&shared_lock);
    if (maps_shared) {
        fastmap_backfill(pool->fastmap);
        pool->fastmap->marks_lines = pool->fastmap->npages != 0;
    }
}

/* The taken extent is registered as the taker's (its state, its page-map
 * entries) before the lender's lock is dropped: the extent stays the
 * lender's, and a neighbour freed into the lender's pool looks at its state
 * under that lock only (registered after the unlock, a neighbour could see
 * it still dirty, in no set, and "merge" it: a corrupt heap, as
 * prodcons 8+8 showed in about one run in twenty). */
static extent_t *pool_take_shared(extent_pool_t *taker, size_t size, size_t align, size_t esize,
                                  unsigned szind, bool slab)
{
    unsigned n = ma_load_acquire(&shared_npools);
    for (unsigned i = 0; i < n; i++) {
        extent_pool_t *p = shared_pools[(taker->ind + 1 + i) % n];
        if (p == taker || ma_load_relaxed(&p->dirty.npages) < (esize >> LG_PAGE))
            continue;
        if (!ma_mutex_trylock(&p->lock))
            continue;
        extent_t *e = eset_fit(&p->dirty, size, align, esize);
        if (e != NULL && (e = pool_take_locked(p, &p->dirty, e, size, align)) != NULL)
            register_active(e, taker, szind, slab);
        ma_mutex_unlock(&p->lock);
        if (e != NULL)
            return e;
    }
    return NULL;
}

extent_t *extent_alloc(extent_pool_t *pool, size_t size, size_t align, unsigned szind, bool slab,
                       bool *zeroed)
{
    if (align < PAGE)
        align = PAGE;
    size_t esize = size + (align - PAGE);
    if (esize < size || size == 0)
        return NULL;
    ma_mutex_lock(&pool->lock);
    extent_t *e = NULL;
    eset_t *set = NULL;
    eset_t *order[2] = {&pool->dirty, &pool->muzzy};
    for (int i = 0; i < 2 && e == NULL; i++) {
        set = order[i];
        e = eset_fit(set, size, align, esize);
    }
    if (e == NULL && pool->shared && (e = pool_take_shared(pool, size, align, esize, szind, slab)) != NULL) {
        ma_mutex_unlock(&pool->lock);
        *zeroed = false;
        return e;
    }
    if (e == NULL) {
        set = &pool->retained;
        e = eset_fit(set, size, align, esize);
    }
    if (e == NULL && pool_grow(pool, esize))
        e = eset_best_fit(set, esize);
    if (e == NULL || (e = pool_take_locked(pool, set, e, size, align)) == NULL) {
        ma_mutex_unlock(&pool->lock);
        return NULL;
    }
    *zeroed = set->state == EXTENT_RETAINED;
    register_active(e, pool, szind, slab);
    ma_mutex_unlock(&pool->lock);
    return e;
}

/*
 * The dirty cap. Decay is driven by time, but time only advances for us
 * when some thread allocates (or the background thread runs): a program
 * that frees most of its heap and goes quiet would keep it all. So, beside
 * decay, a pool never keeps more dirty pages than max(twice its active
 * pages, POOL_DIRTY_FLOOR): a heap that shrank to a third of what it holds
 * gives the excess back as it is freed, as glibc trims its top. Steady and
 * growing heaps (dirty far below active) never meet the cap. (Once the
 * active pages, not twice, cost the fragmentation workload of make
 * bench-footprint 40% more CPU: after freeing 90% at random it purged what
 * the refill faulted straight back in.) Purging goes
 * down to half the cap (so it happens in batches, not on every free), at
 * most max(POOL_DIRTY_FLOOR, the freed extent) pages per free (no long
 * stall). dirty_decay_ms:-1 disables it with the rest of purging.
 */
#define POOL_DIRTY_FLOOR ((size_t)16 << (20 - LG_PAGE)) /* 16 MiB */

static size_t pool_dirty_cap(extent_pool_t *pool)
{
    return MA_MAX(2 * pool->stats.active_pages, POOL_DIRTY_FLOOR);
}

static void pool_purge_over_cap(extent_pool_t *pool, size_t freed_pages)
{
    size_t max_pages = MA_MAX(freed_pages, POOL_DIRTY_FLOOR);
    pool_purge_locked(pool, &pool->dirty, pool_dirty_cap(pool) / 2, max_pages, pool->decay_muzzy.ms != 0);
    decay_purged(&pool->decay_dirty, pool->dirty.npages);
}

void extent_pool_note_tick(extent_pool_t *pool, uint64_t now)
{
    ma_store_relaxed(&pool->ticked_ns, now);
}

/* Whether a thread bound to a shared pool's arena other than pool's has
 * ticked within EXTENT_BUSY_NS of now. (Pools past SHARED_POOLS_MAX are
 * not looked at.) */
static bool pool_others_busy(const extent_pool_t *pool, uint64_t now)
{
    unsigned n = ma_load_acquire(&shared_npools);
    for (unsigned i = 0; i < n; i++) {
        const extent_pool_t *p = shared_pools[i];
        if (p != pool && ma_load_relaxed(p->nthreads) != 0 && now < ma_load_relaxed(&p->ticked_ns) + EXTENT_BUSY_NS)
            return true;
    }
    return false;
}

/* Its arena's threads have all left (a new arena's none came yet) and
 * decay is on: what needs no clock. */
static bool pool_left(const extent_pool_t *pool)
{
    return pool->nthreads != NULL && ma_load_relaxed(pool->nthreads) == 0 && ma_load_relaxed(&pool->ever_left) &&
           pool->decay_dirty.ms >= 0;
}

/* Left, and none has come back within the dirty decay time (threads that
 * come and go will take the pages). */
static bool pool_deserted(const extent_pool_t *pool, uint64_t now)
{
    if (!pool_left(pool))
        return false;
    uint64_t back = ma_load_relaxed(&pool->rejoined_ns);
    return back == 0 || now - back >= (uint64_t)pool->decay_dirty.ms * 1000000u;
}

/* Asked at every slab freed: the clock (a vDSO call) only for a pool whose
 * threads left (read first, it was 1.4 of the 2.4% of a larson 4-16 KiB
 * run's perf samples in clock_gettime). */
bool extent_pool_trimming(extent_pool_t *pool)
{
    if (likely(!pool_left(pool)))
        return false;
    uint64_t now = decay_now_ns();
    return pool_deserted(pool, now) && !pool_others_busy(pool, now);
}

void extent_dalloc(extent_pool_t *pool, extent_t *e)
{
    /* A slab already purged in part (arena.c, "Purging inside slabs": by
     * decay once unused for the decay time, or by a purge) goes back purged
     * whole, retained: not as dirty pages of which some are not resident.
     * Still ours, so madvised before the lock. */
    const bool purged = e->slab && e->purged_pages != 0;
    if (purged)
        pages_purge_forced((void *)e->addr, e->size);
    ma_mutex_lock(&pool->lock);
    pool->stats.active_pages -= e->size >> LG_PAGE;
    if (e->slab) {
        if (purged) {
            size_t n = (size_t)__builtin_popcountll(e->purged_pages);
            ma_fetch_sub(&pool->stats.slab_purged_pages, n);
            e->purged_pages = 0;
            pool_count_purge_locked(pool, 0, 1, (e->size >> LG_PAGE) - n);
        }
        slab_fastmaps_write(e, 0);
        if (e->size > 2 * PAGE)
            rtree_write_range(e->addr + PAGE, e->size - 2 * PAGE, RTREE_STALE);
    }
    e->slab = false;
    e->sampled = false;
    e->prof = NULL;
    e->arena_ind = pool->ind;
    size_t freed_pages = e->size >> LG_PAGE;
    if (purged) {
        pool_insert_coalesced(pool, &pool->retained, e);
        ma_mutex_unlock(&pool->lock);
        return;
    }
    pool_insert_coalesced(pool, &pool->dirty, e);
    /* dirty_decay_ms:0 purges at once; so does a pool whose arena no thread
     * uses any more (frees after its threads exited: nobody here will take
     * the pages again soon, and no allocation ticks decay for it), as
     * glibc trims a heap's top on free, once EXTENT_TRIM_BATCH pages are
     * dirty (extent.h). */
    if (unlikely(pool->decay_dirty.ms == 0) ||
        (pool->dirty.npages >= EXTENT_TRIM_BATCH && extent_pool_trimming(pool))) {
        pool_purge_locked(pool, &pool->dirty, 0, SIZE_MAX, pool->decay_muzzy.ms != 0);
        decay_purged(&pool->decay_dirty, pool->dirty.npages);
    } else if (unlikely(pool->dirty.npages > pool_dirty_cap(pool)) && pool->decay_dirty.ms > 0) {
        pool_purge_over_cap(pool, freed_pages);
    }
    ma_mutex_unlock(&pool->lock);
}

void extent_set_szind(extent_t *e, unsigned szind, uint64_t flags)
{
    e->szind = (uint16_t)szind;
    register_boundaries(e, rtree_elm_make(e, szind, flags));
}

MA_WARM_TEXT bool extent_shrink(extent_pool_t *pool, extent_t *e, size_t new_size, unsigned szind)
{
    ma_mutex_lock(&pool->lock);
    extent_t *trail = extent_split_raw(e, new_size);
    if (trail == NULL) {
        ma_mutex_unlock(&pool->lock);
        return false;
    }
    pool->stats.active_pages -= trail->size >> LG_PAGE;
    extent_set_szind(e, szind, e->sampled ? RTREE_SAMPLED : 0);
    register_boundaries(trail, elm_free(trail));
    pool_insert_coalesced(pool, &pool->dirty, trail);
    ma_mutex_unlock(&pool->lock);
    return true;
}

MA_WARM_TEXT bool extent_expand(extent_pool_t *pool, extent_t *e, size_t new_size, unsigned szind, bool *zeroed)
{
    size_t extra = new_size - e->size;
    uintptr_t end = e->addr + e->size;
    bool ok = false;
    ma_mutex_lock(&pool->lock);
    if (end < e->chunk->base + e->chunk->size) {
        extent_t *n = rtree_elm_extent(rtree_lookup(end));
        /* A free neighbour in a set: not ACTIVE, and not PURGING (being
         * madvised by another thread with the lock dropped, in no set). */
        bool in_set = n != NULL && (n->state == EXTENT_DIRTY || n->state == EXTENT_MUZZY ||
                                    n->state == EXTENT_RETAINED);
        if (in_set && n->size >= extra) {
            eset_t *set = pool_set(pool, (enum extent_state)n->state);
            extent_t *rest = NULL;
            eset_remove(set, n);
            if (n->size > extra && (rest = extent_split_raw(n, extra)) == NULL) {
                eset_insert(set, n);
                goto out;
            }
            /* n now covers exactly [end, end + extra). */
            if (rest != NULL) {
                register_boundaries(rest, elm_free(rest));
                eset_insert(set, rest);
            }
            if (e->size > PAGE)
                rtree_write(end - PAGE, RTREE_STALE);
            if (n->size > PAGE)
                rtree_write(n->addr + n->size - PAGE, RTREE_STALE);
            rtree_write(n->addr, RTREE_STALE);
            *zeroed = set->state == EXTENT_RETAINED;
            e->size = new_size;
            pool_active_grow(pool, extra >> LG_PAGE);
            base_cache_put(&extent_records, n);
            extent_set_szind(e, szind, e->sampled ? RTREE_SAMPLED : 0);
            ok = true;
        }
    }
out:
    ma_mutex_unlock(&pool->lock);
    return ok;
}

/* With retain off, a chunk whose every page is retained goes back to the
 * OS (its one extent covers it: extents coalesce within a chunk). */
static void pool_maybe_unmap(extent_pool_t *pool, extent_t *e)
{
    chunk_t *c = e->chunk;
    if (extent_opt_retain || e->state != EXTENT_RETAINED || e->addr != c->base || e->size != c->size)
        return;
    eset_remove(&pool->retained, e);
    rtree_write(e->addr, 0);
    if (e->size > PAGE)
        rtree_write(e->addr + e->size - PAGE, 0);
    for (chunk_t **pp = &pool->chunks; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    pool->stats.mapped -= c->size;
    pages_unmap((void *)c->base, c->size);
    base_cache_put(&extent_records, e);
    /* The chunk record stays in metadata (it is small and never reused). */
}

#define PURGE_BATCH PAGES_BATCH_MAX

/* Purge the oldest extents of `from` until it holds at most keep pages (or
 * max_pages are done): DONTNEED into retained, or FREE into muzzy when
 * to_muzzy. Takes a batch out of the set under the lock (state PURGING),
 * madvises it unlocked, puts it back. Called and returns locked. */
static size_t pool_purge_locked(extent_pool_t *pool, eset_t *from, size_t keep, size_t max_pages, bool to_muzzy)
{
    int kind = from == &pool->dirty ? 0 : 1;
    size_t purged = 0, nmadvise = 0;
    while (from->npages > keep && purged < max_pages && from->lru.head != NULL) {
        extent_t *batch[PURGE_BATCH];
        unsigned n = 0;
        size_t want = MA_MIN(from->npages - keep, max_pages - purged);
        size_t taken = 0;
        while (n < PURGE_BATCH && taken < want && from->lru.head != NULL) {
            extent_t *e = from->lru.head;
            eset_remove(from, e);
            e->state = EXTENT_PURGING;
            batch[n++] = e;
            taken += e->size >> LG_PAGE;
        }
        ma_mutex_unlock(&pool->lock);
        pages_range_t ranges[PURGE_BATCH];
        for (unsigned i = 0; i < n; i++)
            ranges[i] = (pages_range_t){(void *)batch[i]->addr, batch[i]->size};
        nmadvise += pages_purge_batch(ranges, n, to_muzzy);
        ma_mutex_lock(&pool->lock);
        eset_t *to = to_muzzy ? &pool->muzzy : &pool->retained;
        for (unsigned i = 0; i < n; i++) {
            extent_t *e = batch[i];
            pool_insert_coalesced(pool, to, e);
        }
        purged += taken;
    }
    if (nmadvise != 0)
        pool_count_purge_locked(pool, kind, nmadvise, purged);
    return purged;
}

void extent_count_slab_purge(extent_pool_t *pool, size_t nmadvise, size_t pages)
{
    ma_mutex_lock(&pool->lock);
    pool_count_purge_locked(pool, 0, nmadvise, pages);
    ma_mutex_unlock(&pool->lock);
}

MA_WARM_TEXT size_t extent_purge_all(extent_pool_t *pool)
{
    ma_mutex_lock(&pool->lock);
    size_t n = pool_purge_locked(pool, &pool->dirty, 0, SIZE_MAX, false);
    n += pool_purge_locked(pool, &pool->muzzy, 0, SIZE_MAX, false);
    decay_purged(&pool->decay_dirty, pool->dirty.npages);
    decay_purged(&pool->decay_muzzy, pool->muzzy.npages);
    ma_mutex_unlock(&pool->lock);
    return n;
}

size_t extent_decay_hard(extent_pool_t *pool, uint64_t now_ns, size_t max_pages)
{
    size_t purged = 0, limit;
    ma_mutex_lock(&pool->lock);
    bool muzzy_on = pool->decay_muzzy.ms != 0;
    if (pool->decay_dirty.ms == 0) {
        purged += pool_purge_locked(pool, &pool->dirty, 0, max_pages, muzzy_on);
    } else if (decay_advance(&pool->decay_dirty, now_ns, pool->dirty.npages, &limit)) {
        /* The hold keeps pages for the arena's threads to come back to; a
         * deserted arena's go at the decay's pace (busy threads of other
         * arenas take what they need of them meanwhile: extent_pool_share). */
        if (!pool_deserted(pool, now_ns))
            limit = MA_MAX(limit, decay_hold_pages(&pool->hold, now_ns, pool->stats.active_pages));
        purged += pool_purge_locked(pool, &pool->dirty, limit, max_pages, muzzy_on);
        decay_purged(&pool->decay_dirty, pool->dirty.npages);
    }
    if (pool->decay_muzzy.ms == 0) {
        purged += pool_purge_locked(pool, &pool->muzzy, 0, max_pages, false);
    } else if (decay_advance(&pool->decay_muzzy, now_ns, pool->muzzy.npages, &limit)) {
        purged += pool_purge_locked(pool, &pool->muzzy, limit, max_pages, false);
        decay_purged(&pool->decay_muzzy, pool->muzzy.npages);
    }
    ma_mutex_unlock(&pool->lock);
    return purged;
}

MA_WARM_TEXT void extent_set_decay(extent_pool_t *pool, ssize_t dirty_ms, ssize_t muzzy_ms)
{
    uint64_t now = decay_now_ns();
    ma_mutex_lock(&pool->lock);
    decay_reset(&pool->decay_dirty, dirty_ms, now);
    decay_reset(&pool->decay_muzzy, muzzy_ms, now);
    decay_purged(&pool->decay_dirty, pool->dirty.npages);
    decay_purged(&pool->decay_muzzy, pool->muzzy.npages);
    ma_mutex_unlock(&pool->lock);
}

MA_WARM_TEXT void extent_set_hold(extent_pool_t *pool, ssize_t ms)
{
    ma_mutex_lock(&pool->lock);
    decay_hold_init(&pool->hold, ms, decay_now_ns(), pool->stats.active_pages);
    ma_mutex_unlock(&pool->lock);
}

MA_WARM_TEXT uint64_t extent_decay_ns_to_next(extent_pool_t *pool, uint64_t now_ns)
{
    ma_mutex_lock(&pool->lock);
    uint64_t a = pool->dirty.npages > 0 ? decay_ns_to_next_epoch(&pool->decay_dirty, now_ns) : UINT64_MAX;
    uint64_t b = pool->muzzy.npages > 0 ? decay_ns_to_next_epoch(&pool->decay_muzzy, now_ns) : UINT64_MAX;
    ma_mutex_unlock(&pool->lock);
    return MA_MIN(a, b);
}

size_t extent_pool_dirty_pages(extent_pool_t *pool)
{
    return ma_load_relaxed(&pool->dirty.npages);
}

MA_WARM_TEXT void extent_pool_prefork(extent_pool_t *pool) { ma_mutex_prefork(&pool->lock); }
MA_WARM_TEXT void extent_pool_postfork_parent(extent_pool_t *pool) { ma_mutex_postfork_parent(&pool->lock); }
MA_WARM_TEXT void extent_pool_postfork_child(extent_pool_t *pool) { ma_mutex_postfork_child(&pool->lock); }
