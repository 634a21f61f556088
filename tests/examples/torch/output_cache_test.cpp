// examples/torch/output_cache.hpp: the blocks of the PyTorch plugin's static outputs, kept for the next
// output of their size.
#include <doctest/doctest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "torch/output_cache.hpp"

namespace output_cache_test {

using skc_torch::OutputCache;

std::uintptr_t address(const c10::DataPtr& p) { return reinterpret_cast<std::uintptr_t>(p.get()); }

TEST_CASE("output cache: a freed block serves the next output of its size, the last freed first") {
    OutputCache cache;
    std::uintptr_t first = 0, second = 0;
    {
        c10::DataPtr a = cache.allocate(100'000);
        c10::DataPtr b = cache.allocate(100'000);
        first = address(a), second = address(b);
        CHECK(first % 64 == 0);
        CHECK(second % 64 == 0);
        std::memset(a.get(), 1, 100'000);  // the whole size is usable
        std::memset(b.get(), 2, 100'000);
        CHECK(a.device() == c10::Device(c10::DeviceType::CPU));
    }  // b freed, then a: a is the last freed
    CHECK(cache.stats().cached_blocks == 2);
    CHECK(cache.stats().cached_bytes == 2 * 100'032);  // sizes rounded up to 64 bytes
    c10::DataPtr c = cache.allocate(100'000);
    CHECK(address(c) == first);
    c10::DataPtr d = cache.allocate(99'990);  // the same rounded size
    CHECK(address(d) == second);
    c10::DataPtr e = cache.allocate(100'000);  // none kept: a new block
    CHECK(address(e) != first);
    CHECK(address(e) != second);
    const OutputCache::Stats s = cache.stats();
    CHECK(s.reused == 2);
    CHECK(s.allocated == 3);
    CHECK(s.cached_blocks == 0);
    CHECK(s.cached_bytes == 0);
}

TEST_CASE("output cache: another size, or a block smaller than min_size, gets a new block") {
    OutputCache cache;
    std::uintptr_t big = 0;
    {
        c10::DataPtr a = cache.allocate(65'536);
        big = address(a);
    }
    c10::DataPtr b = cache.allocate(65'600);  // another rounded size
    CHECK(address(b) != big);
    CHECK(cache.stats().cached_blocks == 1);
    {
        c10::DataPtr small = cache.allocate(OutputCache::min_size - 64);
        std::memset(small.get(), 3, OutputCache::min_size - 64);
    }
    CHECK(cache.stats().cached_blocks == 1);  // the small one went back to c10::free_cpu
    c10::DataPtr none = cache.allocate(0);    // a usable pointer for an empty tensor
    CHECK(none.get() != nullptr);
}

TEST_CASE("output cache: within capacity and max_blocks, the oldest freed first; set_capacity(0) frees all") {
    OutputCache cache(3 * 8192);
    std::vector<c10::DataPtr> blocks;
    for (int i = 0; i < 5; ++i) blocks.push_back(cache.allocate(8192));
    std::vector<std::uintptr_t> at;
    for (const c10::DataPtr& p : blocks) at.push_back(address(p));
    blocks.clear();  // freed in order 0..4: 0 and 1 are dropped, 2, 3, 4 kept
    CHECK(cache.stats().cached_blocks == 3);
    CHECK(cache.stats().cached_bytes == 3 * 8192);
    std::set<std::uintptr_t> again;
    for (int i = 0; i < 3; ++i) blocks.push_back(cache.allocate(8192));
    for (const c10::DataPtr& p : blocks) again.insert(address(p));
    CHECK(again == std::set<std::uintptr_t>{at[2], at[3], at[4]});
    blocks.clear();

    {
        OutputCache many(std::size_t{1} << 30);
        std::vector<c10::DataPtr> v;
        for (std::size_t i = 0; i < OutputCache::max_blocks + 8; ++i) v.push_back(many.allocate(4096));
        v.clear();
        CHECK(many.stats().cached_blocks == OutputCache::max_blocks);
    }

    CHECK(cache.stats().cached_blocks == 3);
    cache.set_capacity(0);
    CHECK(cache.stats().cached_blocks == 0);
    CHECK(cache.stats().capacity == 0);
    { c10::DataPtr p = cache.allocate(8192); }
    CHECK(cache.stats().cached_blocks == 0);  // nothing kept at capacity 0
    cache.set_capacity(8192);
    { c10::DataPtr p = cache.allocate(16384); }
    CHECK(cache.stats().cached_blocks == 0);  // a block larger than the capacity is not kept
}

TEST_CASE("output cache: under MALLOC_PERTURB_ a reused block is filled as glibc fills a new one") {
    OutputCache cache(OutputCache::default_capacity, 0x5a);
    {
        c10::DataPtr a = cache.allocate(8192);
        std::memset(a.get(), 0x11, 8192);
    }
    c10::DataPtr b = cache.allocate(8192);
    const auto* bytes = static_cast<const unsigned char*>(b.get());
    std::size_t filled = 0;
    for (std::size_t i = 0; i < 8192; ++i) filled += bytes[i] == (0x5a ^ 0xff);
    CHECK(filled == 8192);  // no byte of the last output shows through
    CHECK(cache.stats().reused == 1);
}

TEST_CASE("output cache: threads that allocate and free, and free each other's blocks, share it") {
    OutputCache cache;
    constexpr int threads = 4, rounds = 2000;
    std::atomic<int> overlaps{0};
    std::vector<std::vector<c10::DataPtr>> handed(threads);  // blocks a thread frees for another
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            for (int r = 0; r < rounds; ++r) {
                const std::size_t n = 4096 * static_cast<std::size_t>(1 + (r + t) % 3);
                c10::DataPtr p = cache.allocate(n);
                auto* bytes = static_cast<unsigned char*>(p.get());
                std::memset(bytes, t + 1, n);  // a block handed out twice would be overwritten
                std::this_thread::yield();
                for (std::size_t i = 0; i < n; i += 512) overlaps += bytes[i] != t + 1;
                if (r % 7 == 0) handed[static_cast<std::size_t>(t)].push_back(std::move(p));
            }
        });
    }
    for (std::thread& th : pool) th.join();
    CHECK(overlaps == 0);
    // Freed on this thread, blocks the others allocated.
    for (auto& v : handed) v.clear();
    const OutputCache::Stats s = cache.stats();
    CHECK(s.reused + s.allocated == threads * rounds);
    CHECK(s.cached_blocks <= OutputCache::max_blocks);
    CHECK(s.reused > 0);
}

TEST_CASE("output cache: a child of fork() starts empty and allocates and frees on its own") {
    OutputCache& cache = OutputCache::get();
    c10::DataPtr kept = cache.allocate(8192);
    { c10::DataPtr p = cache.allocate(12288); }  // one block kept in the parent
    const OutputCache::Stats before = cache.stats();
    REQUIRE(before.cached_blocks >= 1);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int bad = cache.stats().cached_blocks == 0 ? 0 : 1;
        { c10::DataPtr p = cache.allocate(12288); }
        bad |= cache.stats().cached_blocks == 1 ? 0 : 2;
        kept = c10::DataPtr();  // a block of the parent's, freed in the child
        bad |= cache.stats().cached_blocks == 2 ? 0 : 4;
        ::_exit(bad);
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(cache.stats().cached_blocks == before.cached_blocks);  // the parent's cache is its own
}

}  // namespace output_cache_test
