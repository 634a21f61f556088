#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

#include <skc/kernel_table.hpp>
#include <skc/op_desc.hpp>
#include <skc/op_info_io.hpp>

#include "test_support.hpp"

// Counts heap allocations of this test program, to prove lookups allocate nothing. Normally by
// replacing the global operator new; under ThreadSanitizer, whose runtime defines operator new and
// delete itself (a second definition does not link), by the sanitizer's allocation hook instead,
// which sees every allocation as well (operator new included), so the assertion runs there too.
#if defined(__SANITIZE_THREAD__)
#define SKC_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SKC_TEST_TSAN 1
#endif
#endif

namespace {
std::atomic<std::size_t> allocations{0};
}

#ifdef SKC_TEST_TSAN
extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void*, std::size_t),
                                                         void (*free_hook)(const volatile void*));
namespace {
void count_malloc(const volatile void*, std::size_t) { ++allocations; }
void ignore_free(const volatile void*) {}
const bool hooks_installed = __sanitizer_install_malloc_and_free_hooks(count_malloc, ignore_free) != 0;
}  // namespace
#else
// GCC sees the replaced operators' malloc/free through inlining and takes them for a mismatch;
// they match.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
    ++allocations;
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
// The nothrow form too (std::stable_sort's temporary buffer takes it): every new that a replaced
// delete frees must come from malloc.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    ++allocations;
    return std::malloc(n ? n : 1);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
const bool hooks_installed = true;
#endif

namespace skc_kernel_table_test {

namespace {

using Relu =
    skc::OpDesc<"Relu",
                skc::desc::Inputs<skc::desc::Tensor<"x", skc::DType::float32, skc::Format::ND, skc::Shape<4, 8>>>,
                skc::desc::Outputs<skc::desc::Tensor<"y", skc::DType::float32, skc::Format::ND, skc::Shape<4, 8>>>>;

skc::Digest key(int i) {
    skc::Digest d;
    for (std::size_t b = 0; b < 16; ++b) d.bytes[b] = static_cast<unsigned char>((i * 2654435761u) >> ((b % 4) * 8));
    d.bytes[15] = static_cast<unsigned char>(i);
    d.bytes[14] = static_cast<unsigned char>(i >> 8);
    return d;
}

}  // namespace

TEST_CASE("finds what was loaded, by digest, by compile-time op and by record") {
    const auto ops = skc::read_op_info_dir(skc_test::example_ops_dir());
    std::vector<skc::KernelTable<int>::Entry> entries;
    for (std::size_t i = 0; i < ops.ops.size(); ++i)
        entries.emplace_back(skc::digest(ops.ops[i].record), static_cast<int>(i));
    entries.emplace_back(Relu::digest, 99);
    skc::KernelTable<int> table(entries);
    CHECK(table.size() == 15);  // 16 entries, one digest twice (the duplicate example file)
    CHECK(*table.find<Relu>() == 99);
    CHECK(*table.find(Relu::record()) == 99);
    CHECK(*table.find(ops.ops[0].record) == 0);
    CHECK(*table.find(skc::digest(ops.ops[14].record)) == 14);  // the later of two equal digests wins
    CHECK(table.find(key(12345)) == nullptr);
}

TEST_CASE("lookups allocate nothing, also for a run-time record") {
    const skc::OpRecord rec = Relu::record();
    skc::KernelTable<int> table({{Relu::digest, 1}});
    REQUIRE(hooks_installed);
    const std::size_t probe = allocations.load();
    int* volatile seen = new int(1);  // volatile: the allocation cannot be optimised away
    delete seen;
    REQUIRE(allocations.load() == probe + 1);  // the counter does see allocations
    const std::size_t before = allocations.load();
    int sum = 0;
    for (int i = 0; i < 1000; ++i) {
        sum += *table.find<Relu>();
        sum += *table.find(rec);
        sum += table.find(key(i)) == nullptr ? 1 : 0;
    }
    CHECK(allocations.load() == before);
    CHECK(sum == 3000);
}

TEST_CASE("many keys: every one found, absent ones not") {
    std::vector<skc::KernelTable<int>::Entry> entries;
    for (int i = 0; i < 5000; ++i) entries.emplace_back(key(i), i);
    skc::KernelTable<int> table(entries);
    CHECK(table.size() == 5000);
    for (int i = 0; i < 5000; ++i) REQUIRE(*table.find(key(i)) == i);
    for (int i = 5000; i < 6000; ++i) CHECK(table.find(key(i)) == nullptr);
    skc::KernelTable<int> empty;
    CHECK(empty.find(key(1)) == nullptr);
}

TEST_CASE("reload while 4 threads look up: every lookup sees the old or the new table, never garbage") {
    std::vector<skc::KernelTable<int>::Entry> v1, v2;
    for (int i = 0; i < 1000; ++i) {
        v1.emplace_back(key(i), 1);
        v2.emplace_back(key(i), 2);
    }
    skc::KernelTable<int> table(v1);
    std::atomic<bool> stop{false};
    std::atomic<int> bad{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 4; ++t)
        readers.emplace_back([&, t] {
            int i = t;
            while (!stop.load(std::memory_order_relaxed)) {
                const int* k = table.find(key(i % 1000));
                if (k == nullptr || (*k != 1 && *k != 2)) ++bad;
                ++i;
            }
        });
    for (int r = 0; r < 200; ++r) table.reload(r % 2 ? v1 : v2);
    stop = true;
    for (auto& th : readers) th.join();
    CHECK(bad.load() == 0);
    CHECK(*table.find(key(3)) == 1);
}

TEST_CASE("compile-time lookups follow reloads and do not confuse tables") {
    skc::KernelTable<int> a({{Relu::digest, 1}});
    skc::KernelTable<int> b({{Relu::digest, 2}});
    CHECK(*a.find<Relu>() == 1);
    CHECK(*b.find<Relu>() == 2);
    CHECK(*a.find<Relu>() == 1);
    a.reload({{Relu::digest, 3}});
    CHECK(*a.find<Relu>() == 3);
    a.reload({});
    CHECK(a.find<Relu>() == nullptr);
    for (int i = 0; i < 100; ++i) {  // tables at recycled addresses never see another's memo
        auto t = std::make_unique<skc::KernelTable<int>>(std::vector<skc::KernelTable<int>::Entry>{{Relu::digest, i}});
        CHECK(*t->find<Relu>() == i);
    }
}

namespace {

/// A kernel whose fields must agree with each other and with the key it was found under: a lookup
/// that mixed two tables (keys of one, kernels of another) or read a half-built table would not.
struct StampedKernel {
    int generation = 0;
    int index = -1;
    std::uint64_t check = 0;
};

std::uint64_t stamp(int generation, int index) {
    return (static_cast<std::uint64_t>(generation) << 32 | static_cast<std::uint32_t>(index)) * 0x9e3779b97f4a7c15u;
}

/// Generation g holds keys 0 .. 99 + g, each with kernel {g, i}: a key's presence tells which
/// generations may have answered.
std::vector<skc::KernelTable<StampedKernel>::Entry> generation(int g) {
    std::vector<skc::KernelTable<StampedKernel>::Entry> entries;
    for (int i = 0; i < 100 + g; ++i) entries.emplace_back(key(i), StampedKernel{g, i, stamp(g, i)});
    return entries;
}

}  // namespace

TEST_CASE("reload while 4 threads look up: no torn table, and each thread only ever sees newer tables") {
    constexpr int generations = 300;
    skc::KernelTable<StampedKernel> table(generation(0));
    std::atomic<bool> stop{false};
    std::atomic<int> started{0}, torn{0}, went_back{0}, missing{0}, bad_size{0};
    std::atomic<long> lookups{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 4; ++t)
        readers.emplace_back([&, t] {
            ++started;
            int newest = 0;  // the newest generation this thread has seen
            long n = 0;
            for (int i = t; n == 0 || !stop.load(std::memory_order_relaxed); ++i, ++n) {  // one lookup at least
                const int wanted = i % (100 + generations + 10);                          // some keys no generation has
                const StampedKernel* k = table.find(key(wanted));
                if (k == nullptr) {
                    // Absent from every generation from `newest` on, or the table went back.
                    if (wanted < 100 + newest) ++missing;
                    continue;
                }
                if (k->index != wanted || k->check != stamp(k->generation, k->index) || k->generation < 0 ||
                    k->generation > generations || wanted >= 100 + k->generation)
                    ++torn;
                if (k->generation < newest) ++went_back;
                newest = std::max(newest, k->generation);
                const std::size_t size = table.size();
                if (size < 100 + static_cast<std::size_t>(newest) || size > 100 + static_cast<std::size_t>(generations))
                    ++bad_size;
            }
            lookups += n;
        });
    while (started.load() < 4) std::this_thread::yield();  // every reader is looking up
    for (int g = 1; g <= generations; ++g) table.reload(generation(g));
    stop = true;
    for (auto& th : readers) th.join();
    CHECK(lookups.load() > 0);
    CHECK(torn.load() == 0);
    CHECK(went_back.load() == 0);
    CHECK(missing.load() == 0);
    CHECK(bad_size.load() == 0);
    CHECK(table.size() == 100 + generations);
    CHECK(table.find(key(100 + generations - 1))->generation == generations);
}

TEST_CASE("compile-time lookups in 4 threads follow reloads: never older, and the newest table after a reload") {
    // Each thread remembers the slot of find<Relu>() for the table it was found in; a reload must
    // end that memo for every thread, including a reload to a table without the op.
    constexpr int generations = 200;
    skc::KernelTable<int> table({{Relu::digest, 0}});
    std::atomic<bool> stop{false};
    std::atomic<int> phase{0};  // 1: the last reload is done; 2: the op was reloaded away
    std::atomic<int> started{0}, disagree{0}, went_back{0}, stale_after_reload{0}, stale_after_removal{0}, done{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 4; ++t)
        readers.emplace_back([&] {
            ++started;
            int newest = 0;
            while (!stop.load(std::memory_order_relaxed)) {
                const int* memo = table.find<Relu>();
                const int* direct = table.find(Relu::digest);
                if (memo == nullptr || direct == nullptr) {
                    ++disagree;
                    continue;
                }
                if (*memo < newest) ++went_back;
                if (*direct < *memo) ++went_back;  // the later lookup saw an older table
                newest = std::max(newest, *direct);
            }
            while (phase.load(std::memory_order_acquire) < 1) std::this_thread::yield();
            const int* last = table.find<Relu>();
            if (last == nullptr || *last != generations) ++stale_after_reload;
            ++done;
            while (phase.load(std::memory_order_acquire) < 2) std::this_thread::yield();
            if (table.find<Relu>() != nullptr) ++stale_after_removal;
        });
    while (started.load() < 4) std::this_thread::yield();
    for (int g = 1; g <= generations; ++g) table.reload({{Relu::digest, g}});
    stop = true;
    phase.store(1, std::memory_order_release);
    while (done.load() < 4) std::this_thread::yield();
    table.reload({});
    phase.store(2, std::memory_order_release);
    for (auto& th : readers) th.join();
    CHECK(disagree.load() == 0);
    CHECK(went_back.load() == 0);
    CHECK(stale_after_reload.load() == 0);
    CHECK(stale_after_removal.load() == 0);
}

}  // namespace skc_kernel_table_test
