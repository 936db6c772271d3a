// A C++ shared library for test_prof_unwind.c: frames of templates,
// lambdas, std::function, a virtual call, objects with destructors and a
// try block (CIEs with a personality routine and LSDAs, 'zPLR'), ending in
// a callback into the test program. Built -O2 by the Makefile when a C++
// compiler is there (libunwind_cxx.so).
#include <functional>
#include <stdexcept>
#include <string>

typedef int uw_cb(void *arg);

namespace {

struct Guard {
    std::string name;
    explicit Guard(const char *n) : name(n) {}
    ~Guard() { __asm__ volatile("" : : "r"(name.data()) : "memory"); }
};

struct Base {
    virtual ~Base() {}
    virtual int run(int depth, uw_cb *cb, void *arg) = 0;
};

template <int N> __attribute__((noinline)) int tdeep(int depth, uw_cb *cb, void *arg);

struct Impl : Base {
    __attribute__((noinline)) int run(int depth, uw_cb *cb, void *arg) override
    {
        Guard g("impl");
        int r = tdeep<3>(depth, cb, arg);
        __asm__ volatile("" : "+r"(r) : : "memory");
        return r + 1;
    }
};

template <int N> __attribute__((noinline)) int tdeep(int depth, uw_cb *cb, void *arg)
{
    Guard g("tdeep");
    int r;
    if constexpr (N == 0) {
        std::function<int(int)> f = [cb, arg](int d) {
            if (d < 0)
                throw std::runtime_error("negative");
            return cb(arg) + d;
        };
        r = f(depth);
    } else {
        r = tdeep<N - 1>(depth, cb, arg);
    }
    __asm__ volatile("" : "+r"(r) : : "memory");
    return r + N;
}

} // namespace

extern "C" __attribute__((visibility("default"), noinline)) int uwcxx_run(int depth, uw_cb *cb, void *arg)
{
    Impl impl;
    Base *b = &impl;
    __asm__ volatile("" : "+r"(b));
    try {
        int r = b->run(depth, cb, arg);
        __asm__ volatile("" : "+r"(r) : : "memory");
        return r;
    } catch (const std::exception &) {
        return -1;
    }
}
