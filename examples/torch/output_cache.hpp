// The memory of the static kernels' outputs: freed blocks kept for the next output of their size.
//
// Stock CPU kernels take each output from c10::alloc_cpu (posix_memalign, 64-byte aligned). Once
// the heap around a freed block is in use, glibc may not give that block back: a loop of
// `y = f(x)` then writes each output to memory it has not touched for a while, and a call that
// would run from the core's cache waits on memory (softmax's backward of [4, 64, 64]: 2.7 µs with
// the block of the call before, 4 to 11 µs when glibc hands out a new one each call). The
// plugin's outputs come from an OutputCache instead: the block of that size freed last (the
// likeliest still in the core's cache), else a new one from c10::alloc_cpu. A freed block is kept
// while the cache holds at most capacity() bytes and max_blocks blocks; beyond that the oldest go
// back to c10::free_cpu. An output's values are never read before a kernel writes them all, as
// with a new block.
//
// - Thread-safe: one mutex, held for a scan of at most max_blocks sizes. A block may be freed on
//   any thread (its header names its cache).
// - Fork-safe: a child of fork() starts with an empty cache and a new mutex.
// - It outlives every tensor: get()'s cache is never destroyed.
// - Under glibc's MALLOC_PERTURB_ (as meson runs the tests) a reused block is filled as glibc
//   fills a new one, so that an element a kernel fails to write shows as it would with a new
//   block.
// - torch.profiler's memory view (profile_memory=True) sees each output's allocation and free, as
//   from stock's allocator.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <pthread.h>

namespace skc_torch {

class OutputCache final : public c10::Allocator {
public:
    static constexpr std::size_t max_blocks = 32;
    static constexpr std::size_t min_size = 4096;  // smaller blocks are freed: glibc's bins do well
    static constexpr std::size_t default_capacity = std::size_t{64} << 20;

    /// What the cache did since it was made.
    struct Stats {
        std::size_t capacity = 0;       // bytes kept at most
        std::size_t cached_bytes = 0;   // bytes kept now
        std::size_t cached_blocks = 0;  // blocks kept now
        std::uint64_t reused = 0;       // allocations of min_size or more served with a kept block
        std::uint64_t allocated = 0;    // those served by c10::alloc_cpu
    };

    /// `perturb`: glibc's MALLOC_PERTURB_ value (0: none): a reused block's bytes become
    /// perturb ^ 0xff, as glibc's malloc leaves a new one.
    explicit OutputCache(std::size_t capacity = default_capacity, int perturb = 0)
        : capacity_(capacity), perturb_(perturb & 0xff) {
        free_.reserve(max_blocks + 1);  // give_back() never allocates
    }
    OutputCache(const OutputCache&) = delete;
    OutputCache& operator=(const OutputCache&) = delete;
    /// Every block it handed out must have been freed before (get()'s cache is never destroyed).
    ~OutputCache() override { clear(); }

    /// The process's cache: MALLOC_PERTURB_ from the environment, created on first use and never
    /// destroyed.
    static OutputCache& get() {
        static OutputCache* const cache = [] {
            const char* p = std::getenv("MALLOC_PERTURB_");
            auto* c = new OutputCache(default_capacity, p != nullptr ? std::atoi(p) : 0);
            ::pthread_atfork(nullptr, nullptr, [] { get().after_fork(); });
            return c;
        }();
        return *cache;
    }

    /// Keeps at most `bytes` of freed blocks (0: none; each block is freed when its tensor is),
    /// freeing the oldest kept ones beyond it now.
    void set_capacity(std::size_t bytes) {
        std::lock_guard lock(mu_);
        capacity_ = bytes;
        trim();
    }

    [[nodiscard]] Stats stats() const {
        std::lock_guard lock(mu_);
        return {capacity_, cached_, free_.size(), reused_, allocated_};
    }

    /// Frees every kept block.
    void clear() {
        std::lock_guard lock(mu_);
        const std::size_t c = std::exchange(capacity_, 0);
        trim();
        capacity_ = c;
    }

    /// A block of n bytes (64-byte aligned), freed into this cache when its DataPtr is.
    c10::DataPtr allocate(std::size_t n) const override { return const_cast<OutputCache*>(this)->take(n); }

private:
    /// A block starts with a header (its data's size, rounded up to 64 bytes, and its cache), then
    /// the data, 64-byte aligned as c10::alloc_cpu aligns.
    struct Header {
        std::size_t size;
        OutputCache* cache;
    };
    static constexpr std::size_t header_bytes = 64;
    static_assert(sizeof(Header) <= header_bytes);

    struct Kept {
        std::size_t size;
        void* block;
    };

    c10::DataPtr take(std::size_t n) {
        const std::size_t size = (std::max<std::size_t>(n, 1) + 63) / 64 * 64;
        void* block = nullptr;
        if (size >= min_size) {
            std::lock_guard lock(mu_);
            for (std::size_t i = free_.size(); i-- > 0;) {  // the last freed first
                if (free_[i].size != size) continue;
                block = free_[i].block;
                free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
                cached_ -= size;
                ++reused_;
                break;
            }
            if (block == nullptr) ++allocated_;
        }
        char* data = nullptr;
        if (block != nullptr) {
            data = static_cast<char*>(block) + header_bytes;
            if (perturb_ != 0) std::memset(data, perturb_ ^ 0xff, size);
        } else {
            block = c10::alloc_cpu(size + header_bytes);
            const Header h{size, this};
            std::memcpy(block, &h, sizeof h);
            data = static_cast<char*>(block) + header_bytes;
        }
        if (c10::memoryProfilingEnabled())
            c10::reportMemoryUsageToProfiler(data, static_cast<std::int64_t>(size), live_.fetch_add(size) + size, 0,
                                             c10::Device(c10::DeviceType::CPU));
        else live_.fetch_add(size, std::memory_order_relaxed);
        return {data, block, &release, c10::Device(c10::DeviceType::CPU)};
    }

    static void release(void* block) {
        Header h{};
        std::memcpy(&h, block, sizeof h);
        h.cache->give_back(block, h.size);
    }

    void give_back(void* block, std::size_t size) {
        const std::size_t live = live_.fetch_sub(size, std::memory_order_relaxed) - size;
        if (c10::memoryProfilingEnabled())
            c10::reportMemoryUsageToProfiler(static_cast<char*>(block) + header_bytes, -static_cast<std::int64_t>(size),
                                             live, 0, c10::Device(c10::DeviceType::CPU));
        if (size >= min_size) {
            std::lock_guard lock(mu_);
            if (size <= capacity_) {
                free_.push_back({size, block});
                cached_ += size;
                trim();
                return;
            }
        }
        c10::free_cpu(block);
    }

    /// Frees the oldest kept blocks until within capacity_ and max_blocks (mu_ held).
    void trim() {
        std::size_t drop = 0;
        while (drop < free_.size() && (cached_ > capacity_ || free_.size() - drop > max_blocks))
            cached_ -= free_[drop++].size;
        for (std::size_t i = 0; i < drop; ++i) c10::free_cpu(free_[i].block);
        free_.erase(free_.begin(), free_.begin() + static_cast<std::ptrdiff_t>(drop));
    }

    /// In a child of fork(): another thread may have held mu_ (and been changing free_). The
    /// list and its blocks are dropped, not freed: the child cannot trust them.
    void after_fork() {
        std::construct_at(&mu_);
        std::construct_at(&free_);
        free_.reserve(max_blocks + 1);
        cached_ = 0;
    }

    mutable std::mutex mu_;
    std::vector<Kept> free_;  // the oldest first
    std::size_t cached_ = 0;
    std::size_t capacity_;
    std::uint64_t reused_ = 0;
    std::uint64_t allocated_ = 0;
    std::atomic<std::size_t> live_{0};  // bytes of blocks in use, for the profiler
    const int perturb_;
};

}  // namespace skc_torch
