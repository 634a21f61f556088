#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

#include <skc/kernel_table.hpp>
#include <skc/op_desc.hpp>
#include <skc/op_info_io.hpp>

#include "test_support.hpp"

// Counts heap allocations of this test program, to prove lookups allocate nothing. GCC sees the
// replaced operators' malloc/free through inlining and takes them for a mismatch; they match.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
namespace {
std::atomic<std::size_t> allocations{0};
}
void* operator new(std::size_t n) {
    ++allocations;
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

using Relu = skc::OpDesc<"Relu", skc::desc::Inputs<skc::desc::Tensor<"x", skc::DType::float32, skc::Format::ND, skc::Shape<4, 8>>>,
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
    for (std::size_t i = 0; i < ops.ops.size(); ++i) entries.emplace_back(skc::digest(ops.ops[i].record), static_cast<int>(i));
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
