// mt_program: a deterministic multi-threaded C++17 workload for
// tools/check-real.sh. It is run once on the system malloc and once with
// LD_PRELOAD=lib/libmyalloc.so; the two outputs must be identical.
//
// What it exercises:
//   1. producer/consumer: producers build Items (strings, vectors, maps,
//      shared_ptrs to shared Blobs) and hand them through a mutex-protected
//      bounded queue to consumers, which hash and destroy them: most frees
//      happen on a thread other than the allocating one, and a Blob dies on
//      whichever thread drops its last reference.
//   2. per-thread std::map / std::unordered_map building with growth and
//      shrinking (string appends, vector push_back, shrink_to_fit, rehash),
//      merged into one global ordered map under a mutex.
//   3. large buffers (1 KiB .. 2 MiB) passed around a ring of threads, resized
//      (realloc-like growth) by each owner before being passed on.
//   4. over-aligned objects (aligned operator new) and thread_local objects
//      with destructors that run at thread exit.
//
// Every printed number is independent of scheduling: each thread's work is
// a function of its index only, and results are combined with commutative
// operations (sum, xor) or through ordered containers.
//
// usage: mt_program [scale]   (default 1)
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace {

// ---------------------------------------------------------------------------
// Deterministic helpers

struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
    uint64_t next()
    {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    uint32_t below(uint32_t n) { return (uint32_t)(next() % n); }
};

uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h * 0x100000001B3ull;
}

uint64_t hash_bytes(const void *p, size_t n, uint64_t h = 0xCBF29CE484222325ull)
{
    const unsigned char *b = static_cast<const unsigned char *>(p);
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001B3ull;
    }
    return h;
}

uint64_t hash_str(const std::string &s) { return hash_bytes(s.data(), s.size()); }

std::string make_word(Rng &r, size_t len)
{
    static const char alpha[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    std::string w;
    for (size_t i = 0; i < len; i++)
        w.push_back(alpha[r.below(sizeof(alpha) - 1)]);
    return w;
}

// Commutative accumulator for results produced on any thread.
struct Acc {
    std::atomic<uint64_t> sum{0}, x{0}, count{0};
    void add(uint64_t h)
    {
        sum.fetch_add(h, std::memory_order_relaxed);
        x.fetch_xor(h * 0xD6E8FEB86659FD93ull, std::memory_order_relaxed);
        count.fetch_add(1, std::memory_order_relaxed);
    }
};

void print_acc(const char *name, const Acc &a)
{
    std::printf("%-26s count=%llu sum=%016llx xor=%016llx\n", name,
                (unsigned long long)a.count.load(), (unsigned long long)a.sum.load(),
                (unsigned long long)a.x.load());
}

// ---------------------------------------------------------------------------
// A bounded blocking queue (mutex + condition variables).

template <class T> class Queue {
  public:
    explicit Queue(size_t cap) : cap_(cap) {}
    void push(T v)
    {
        std::unique_lock<std::mutex> lk(m_);
        not_full_.wait(lk, [&] { return q_.size() < cap_; });
        q_.push_back(std::move(v));
        not_empty_.notify_one();
    }
    // false once closed and drained.
    bool pop(T &out)
    {
        std::unique_lock<std::mutex> lk(m_);
        not_empty_.wait(lk, [&] { return !q_.empty() || closed_; });
        if (q_.empty())
            return false;
        out = std::move(q_.front());
        q_.pop_front();
        not_full_.notify_one();
        return true;
    }
    void close()
    {
        std::lock_guard<std::mutex> lk(m_);
        closed_ = true;
        not_empty_.notify_all();
    }

  private:
    std::mutex m_;
    std::condition_variable not_full_, not_empty_;
    std::deque<T> q_;
    size_t cap_;
    bool closed_ = false;
};

// ---------------------------------------------------------------------------
// thread_local state with a destructor (runs at each thread's exit).

Acc g_tls_acc;
std::atomic<int> g_tls_alive{0};

struct ThreadLog {
    std::vector<std::string> lines;
    std::unordered_map<uint32_t, std::string> cache;
    std::unique_ptr<std::map<std::string, uint64_t>> tally;
    ThreadLog() : tally(new std::map<std::string, uint64_t>) { g_tls_alive++; }
    ~ThreadLog()
    {
        uint64_t h = 0;
        for (const auto &l : lines)
            h = mix(h, hash_str(l));
        for (const auto &kv : *tally)
            h = mix(h, hash_str(kv.first) + kv.second);
        // The cache is unordered: fold it commutatively.
        uint64_t c = 0;
        for (const auto &kv : cache)
            c += mix(kv.first, hash_str(kv.second));
        if (!lines.empty() || !cache.empty())
            g_tls_acc.add(mix(h, c));
        g_tls_alive--;
    }
    void note(const std::string &what, uint32_t key)
    {
        lines.push_back(what);
        if (lines.size() > 64)
            lines.erase(lines.begin(), lines.begin() + 32);
        cache[key % 97] = what;
        (*tally)[what.substr(0, 2)] += key;
    }
};

thread_local ThreadLog t_log;

// ---------------------------------------------------------------------------
// Phase 1: producer/consumer with shared blobs.

std::atomic<uint64_t> g_blobs_made{0}, g_blobs_freed{0};

struct Blob {
    std::vector<uint64_t> words;
    std::string tag;
    Blob(Rng &r, size_t n) : words(n), tag(make_word(r, 8 + r.below(40)))
    {
        for (auto &w : words)
            w = r.next();
        g_blobs_made++;
    }
    ~Blob() { g_blobs_freed++; }
    uint64_t hash() const { return hash_bytes(words.data(), words.size() * 8, hash_str(tag)); }
};

struct alignas(64) Aligned {
    uint64_t v[8];
};

struct Item {
    uint64_t id;
    std::string name;
    std::vector<uint32_t> data;
    std::map<std::string, int> attrs;
    std::shared_ptr<Blob> blob;
    std::unique_ptr<Aligned> aligned;
    std::list<std::string> notes;
};

std::unique_ptr<Item> make_item(Rng &r, uint64_t id, const std::vector<std::shared_ptr<Blob>> &pool)
{
    auto it = std::make_unique<Item>();
    it->id = id;
    it->name = make_word(r, 1 + r.below(r.below(8) == 0 ? 600 : 40));
    size_t n = r.below(r.below(16) == 0 ? 5000 : 64);
    for (size_t i = 0; i < n; i++)
        it->data.push_back((uint32_t)r.next());
    unsigned na = r.below(12);
    for (unsigned i = 0; i < na; i++)
        it->attrs[make_word(r, 3 + r.below(20))] = (int)r.below(1000);
    it->blob = pool[r.below((uint32_t)pool.size())];
    if (r.below(4) == 0) {
        it->aligned.reset(new Aligned);
        for (int i = 0; i < 8; i++)
            it->aligned->v[i] = r.next();
    }
    unsigned nn = r.below(5);
    for (unsigned i = 0; i < nn; i++)
        it->notes.push_back(make_word(r, 10 + r.below(100)));
    return it;
}

uint64_t hash_item(const Item &it)
{
    uint64_t h = mix(0, it.id);
    h = mix(h, hash_str(it.name));
    h = mix(h, hash_bytes(it.data.data(), it.data.size() * 4));
    for (const auto &kv : it.attrs)
        h = mix(mix(h, hash_str(kv.first)), (uint64_t)kv.second);
    h = mix(h, it.blob->hash());
    if (it.aligned) {
        if (reinterpret_cast<uintptr_t>(it.aligned.get()) % 64 != 0) {
            std::printf("ERROR: misaligned object %p\n", (void *)it.aligned.get());
            std::exit(3);
        }
        h = mix(h, hash_bytes(it.aligned->v, sizeof(it.aligned->v)));
    }
    for (const auto &s : it.notes)
        h = mix(h, hash_str(s));
    return h;
}

void phase1(unsigned producers, unsigned consumers, unsigned items_per_producer)
{
    Queue<std::unique_ptr<Item>> q(256);
    Acc produced, consumed;
    std::atomic<uint64_t> kept_total{0};
    std::mutex grave_mu;
    std::vector<std::unique_ptr<Item>> graveyard; // freed by the main thread

    std::vector<std::thread> ts;
    for (unsigned p = 0; p < producers; p++) {
        ts.emplace_back([&, p] {
            Rng r(1000 + p);
            std::vector<std::shared_ptr<Blob>> pool;
            for (int i = 0; i < 24; i++)
                pool.push_back(std::make_shared<Blob>(r, 1 + r.below(r.below(6) == 0 ? 20000 : 300)));
            for (unsigned i = 0; i < items_per_producer; i++) {
                auto it = make_item(r, (uint64_t)p << 32 | i, pool);
                produced.add(hash_item(*it));
                t_log.note(it->name, (uint32_t)i);
                q.push(std::move(it));
                if (i % 500 == 499) {
                    // Replace part of the pool: old blobs now live only in
                    // queued items and die on a consumer thread.
                    for (int k = 0; k < 8; k++)
                        pool[r.below((uint32_t)pool.size())] =
                            std::make_shared<Blob>(r, 1 + r.below(2000));
                }
            }
        });
    }
    std::vector<std::thread> cs;
    for (unsigned c = 0; c < consumers; c++) {
        cs.emplace_back([&] {
            std::unordered_map<uint64_t, std::string> seen;
            std::unique_ptr<Item> it;
            uint64_t kept = 0;
            while (q.pop(it)) {
                uint64_t h = hash_item(*it);
                consumed.add(h);
                // Which items a consumer gets depends on scheduling, so its
                // thread_local log gets only scheduling-independent notes.
                if (t_log.lines.empty())
                    t_log.note("consumer", 7);
                seen[h] = it->name; // copy made on this thread
                if (seen.size() > 4096)
                    seen.clear();
                if (h % 7 == 0) {
                    std::lock_guard<std::mutex> lk(grave_mu);
                    graveyard.push_back(std::move(it));
                    kept++;
                }
                it.reset(); // cross-thread free of the Item (and maybe its Blob)
            }
            kept_total += kept;
        });
    }
    for (auto &t : ts)
        t.join();
    q.close();
    for (auto &t : cs)
        t.join();
    // Order-independent view of the graveyard.
    std::multiset<uint64_t> ids;
    for (const auto &it : graveyard)
        ids.insert(it->id);
    uint64_t gh = 0;
    for (uint64_t id : ids)
        gh = mix(gh, id);
    graveyard.clear();

    print_acc("phase1 produced", produced);
    print_acc("phase1 consumed", consumed);
    std::printf("%-26s kept=%llu ids=%016llx\n", "phase1 graveyard",
                (unsigned long long)kept_total.load(), (unsigned long long)gh);
    std::printf("%-26s made=%llu freed=%llu\n", "phase1 blobs",
                (unsigned long long)g_blobs_made.load(), (unsigned long long)g_blobs_freed.load());
    std::printf("%-26s %s\n", "phase1 match",
                produced.sum == consumed.sum && produced.x == consumed.x ? "yes" : "NO");
}

// ---------------------------------------------------------------------------
// Phase 2: per-thread maps, merged.

void phase2(unsigned threads, unsigned rounds)
{
    std::mutex mu;
    std::map<std::string, std::vector<uint64_t>> global;
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < threads; t++) {
        ts.emplace_back([&, t] {
            Rng r(2000 + t);
            std::map<std::string, std::vector<uint64_t>> local;
            std::unordered_map<std::string, std::string> umap;
            for (unsigned i = 0; i < rounds; i++) {
                std::string k = make_word(r, 1 + r.below(3)) + std::to_string(r.below(500));
                auto &v = local[k];
                v.push_back(r.next() % 1000003);
                if (v.size() > 50 && r.below(3) == 0) {
                    v.resize(v.size() / 3);
                    v.shrink_to_fit();
                }
                std::string &s = umap[k];
                s += make_word(r, 1 + r.below(30));
                if (s.size() > 3000)
                    s = s.substr(s.size() / 2);
                if (r.below(50) == 0) {
                    umap.erase(make_word(r, 1 + r.below(3)) + std::to_string(r.below(500)));
                    umap.rehash(umap.size() * 2 + 1);
                }
                if (r.below(2000) == 0)
                    local.erase(local.begin(), std::next(local.begin(), (long)(local.size() / 4)));
            }
            uint64_t uh = 0;
            for (const auto &kv : umap)
                uh += mix(hash_str(kv.first), hash_str(kv.second));
            local["~umap" + std::to_string(t)].push_back(uh);
            t_log.note("phase2-" + std::to_string(t), (uint32_t)uh);
            std::lock_guard<std::mutex> lk(mu);
            for (auto &kv : local) {
                auto &g = global[kv.first];
                g.insert(g.end(), kv.second.begin(), kv.second.end());
            }
        });
    }
    for (auto &t : ts)
        t.join();
    uint64_t h = 0, n = 0;
    for (auto &kv : global) {
        std::sort(kv.second.begin(), kv.second.end()); // merge order varies
        h = mix(h, hash_str(kv.first));
        h = mix(h, hash_bytes(kv.second.data(), kv.second.size() * 8));
        n += kv.second.size();
    }
    std::printf("%-26s keys=%zu values=%llu hash=%016llx\n", "phase2 merged", global.size(),
                (unsigned long long)n, (unsigned long long)h);
}

// ---------------------------------------------------------------------------
// Phase 3: large buffers around a ring of threads.

void phase3(unsigned threads, unsigned laps)
{
    std::vector<std::unique_ptr<Queue<std::vector<unsigned char>>>> ring;
    for (unsigned t = 0; t < threads; t++)
        ring.emplace_back(new Queue<std::vector<unsigned char>>(4));
    Acc acc;
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < threads; t++) {
        ts.emplace_back([&, t] {
            Rng r(3000 + t);
            auto &in = *ring[t];
            auto &out = *ring[(t + 1) % threads];
            // Each thread starts one buffer of its own.
            std::vector<unsigned char> b(1024 + r.below(64 * 1024));
            for (size_t i = 0; i < b.size(); i++)
                b[i] = (unsigned char)(i * 31 + t);
            out.push(std::move(b));
            for (unsigned lap = 0; lap < laps; lap++) {
                std::vector<unsigned char> v;
                if (!in.pop(v))
                    break;
                // The buffer's content depends on whose it was and how far
                // it travelled; hash before changing it.
                acc.add(hash_bytes(v.data(), v.size()));
                size_t target = 1024 + ((size_t)(hash_bytes(v.data(), 64) % (2u << 20)));
                if (target > v.size()) {
                    size_t old = v.size();
                    v.resize(target);
                    for (size_t i = old; i < v.size(); i += 4096)
                        v[i] = (unsigned char)(i >> 12);
                } else {
                    v.resize(target);
                    v.shrink_to_fit();
                }
                v[0] ^= (unsigned char)(lap + 1);
                out.push(std::move(v));
            }
        });
    }
    for (auto &t : ts)
        t.join();
    // Drain what is left in the ring (buffers are freed here, on main).
    size_t left = 0;
    for (auto &q : ring) {
        q->close();
        std::vector<unsigned char> v;
        while (q->pop(v)) {
            acc.add(hash_bytes(v.data(), v.size()));
            left++;
        }
    }
    print_acc("phase3 buffers", acc);
    std::printf("%-26s %zu\n", "phase3 left in ring", left);
}

// ---------------------------------------------------------------------------
// Phase 4: short-lived threads with thread_local state and C allocation
// functions freed elsewhere.

void phase4(unsigned waves, unsigned per_wave)
{
    std::mutex mu;
    std::vector<void *> handoff; // malloc'd on worker threads, freed on main
    std::vector<size_t> sizes;
    for (unsigned w = 0; w < waves; w++) {
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < per_wave; t++) {
            ts.emplace_back([&, w, t] {
                Rng r(4000 + w * 100 + t);
                for (int i = 0; i < 200; i++)
                    t_log.note(make_word(r, 2 + r.below(60)), (uint32_t)r.next());
                std::vector<void *> mine;
                for (int i = 0; i < 300; i++) {
                    size_t sz = 1 + r.below(r.below(10) == 0 ? 100000 : 512);
                    void *p;
                    size_t align = 16;
                    switch (r.below(4)) {
                    case 0: p = std::malloc(sz); break;
                    case 1: p = std::calloc(1, sz); break;
                    case 2:
                        align = (size_t)64 << r.below(6); // 64 .. 2048
                        sz = (sz + align - 1) & ~(align - 1);
                        p = std::aligned_alloc(align, sz);
                        break;
                    default: {
                        p = std::malloc(sz / 2 + 1);
                        std::memset(p, 0x5a, sz / 2 + 1);
                        p = std::realloc(p, sz);
                        for (size_t k = 0; p != nullptr && k < sz / 2 + 1; k++)
                            if (static_cast<unsigned char *>(p)[k] != 0x5a) {
                                std::printf("ERROR: realloc lost content at %zu of %zu\n", k, sz);
                                std::exit(3);
                            }
                        break;
                    }
                    }
                    if (p == nullptr) {
                        std::printf("ERROR: allocation of %zu bytes failed\n", sz);
                        std::exit(3);
                    }
                    if (reinterpret_cast<uintptr_t>(p) % align != 0) {
                        std::printf("ERROR: misaligned block %p\n", p);
                        std::exit(3);
                    }
                    std::memset(p, (int)(i & 0xff), sz);
                    mine.push_back(p);
                    std::lock_guard<std::mutex> lk(mu);
                    if (i % 3 == 0) {
                        handoff.push_back(p);
                        sizes.push_back(sz);
                        mine.pop_back();
                    }
                }
                for (void *p : mine)
                    std::free(p);
            });
        }
        for (auto &t : ts)
            t.join();
    }
    // Check the content of the handed-off blocks (order varies: commutative).
    uint64_t s = 0;
    for (size_t i = 0; i < handoff.size(); i++) {
        s += hash_bytes(handoff[i], sizes[i]);
        std::free(handoff[i]);
    }
    std::printf("%-26s blocks=%zu sum=%016llx\n", "phase4 handoff", handoff.size(), (unsigned long long)s);
}

} // namespace

int main(int argc, char **argv)
{
    unsigned scale = argc > 1 ? (unsigned)std::atoi(argv[1]) : 1;
    if (scale == 0)
        scale = 1;
    phase1(4, 3, 4000 * scale);
    phase2(4, 60000 * scale);
    phase3(4, 200 * scale);
    phase4(8 * scale, 4);
    // thread_local destructors of every joined thread have run by now.
    print_acc("thread_local destructors", g_tls_acc);
    std::printf("%-26s %d\n", "thread_local alive", g_tls_alive.load());
    return 0;
}
