// CallKey and CallMap: keys are equal exactly when the same additions were made with the same
// values; the map finds what it was given, makes each value once however many threads ask, and
// keeps values in place.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <skc/call_key.hpp>

namespace skc_call_key_test {

namespace {

using skc::CallKey;
using Dims = std::vector<std::int64_t>;

CallKey tensor_key(std::uint32_t op, std::uint32_t dtype, const Dims& sizes, const Dims& strides) {
    CallKey k;
    k.word(op).tensor(dtype, sizes, strides);
    return k;
}

}  // namespace

TEST_CASE("equal arguments give equal keys and hashes") {
    const CallKey a = tensor_key(1, 6, {64, 128}, {128, 1});
    const CallKey b = tensor_key(1, 6, {64, 128}, {128, 1});
    CHECK(a == b);
    CHECK_EQ(a.hash(), b.hash());
    CHECK(a.ok());
    CHECK_EQ(a.size(), 7u);  // op id, tensor header (dtype and sizes' length, strides' length), two sizes, two strides
}

TEST_CASE("every difference in an argument gives another key") {
    std::vector<CallKey> keys;
    keys.push_back(tensor_key(1, 6, {64, 128}, {128, 1}));
    keys.push_back(tensor_key(2, 6, {64, 128}, {128, 1}));                     // op
    keys.push_back(tensor_key(1, 7, {64, 128}, {128, 1}));                     // dtype
    keys.push_back(tensor_key(1, 6, {128, 64}, {128, 1}));                     // sizes swapped
    keys.push_back(tensor_key(1, 6, {64, 128}, {1, 64}));                      // strides
    keys.push_back(tensor_key(1, 6, {64, 128}, {}));                           // no strides
    keys.push_back(tensor_key(1, 6, {64, 128, 1}, {128, 1, 1}));               // one more dim
    keys.push_back(tensor_key(1, 6, {64}, {128, 1, 1}));                       // the same words, split differently
    keys.push_back(tensor_key(1, 6, {std::int64_t{1} << 32, 128}, {128, 1}));  // a dim above 32 bits
    keys.push_back(tensor_key(1, 6, {64, 128}, {-128, 1}));                    // a negative value
    {
        CallKey k;
        k.word(1).dims(Dims{64, 128}).dims(Dims{128, 1});  // dims() is not tensor()
        keys.push_back(k);
    }
    {
        CallKey k;
        k.word(1).text("gelu").boolean(true);
        keys.push_back(k);
    }
    {
        CallKey k;
        k.word(1).text(std::string_view("gelu\0", 5)).boolean(true);  // the length tells a trailing NUL apart
        keys.push_back(k);
    }
    {
        CallKey k;
        k.word(1).real(0.0);
        keys.push_back(k);
    }
    {
        CallKey k;
        k.word(1).real(-0.0);
        keys.push_back(k);
    }
    for (std::size_t i = 0; i < keys.size(); ++i) {
        CHECK(keys[i].ok());
        for (std::size_t j = 0; j < keys.size(); ++j) CHECK_MESSAGE((keys[i] == keys[j]) == (i == j), i, " vs ", j);
    }
    std::set<std::uint64_t> hashes;
    for (const CallKey& k : keys) hashes.insert(k.hash());
    CHECK_EQ(hashes.size(), keys.size());
}

TEST_CASE("a key that overflows its capacity is not ok, compares unequal and is refused by the map") {
    skc::BasicCallKey<4> k;
    k.word(1).word(2).word(3);
    CHECK(k.ok());
    k.dims(Dims{1, 2, 3});  // two words: does not fit, adds nothing
    CHECK_FALSE(k.ok());
    CHECK_EQ(k.size(), 3u);
    k.word(4);  // would fit, but the key is already incomplete
    CHECK_EQ(k.size(), 3u);
    CHECK_FALSE(k == k);  // an overflowed key identifies nothing
    skc::BasicCallKey<4> full;
    full.word(1).word(2).word(3).word(4);
    CHECK(full.ok());
    CHECK(full == full);

    skc::CallMap<int, 4> map;
    CHECK(map.find(k) == nullptr);
    CHECK_THROWS_AS(map.emplace(k, [] { return 1; }), std::length_error);
    CHECK_EQ(map.size(), 0u);
}

TEST_CASE("CallMap: find, emplace once, stable addresses across growth") {
    skc::CallMap<std::string> map;
    int made = 0;
    std::vector<const std::string*> addresses;
    for (std::int64_t i = 0; i < 1000; ++i) {
        CallKey k;
        k.word(7).dims(Dims{i, 2 * i});
        CHECK(map.find(k) == nullptr);
        const std::string& v = map.emplace(k, [&] {
            ++made;
            return std::to_string(i);
        });
        addresses.push_back(&v);
    }
    CHECK_EQ(made, 1000);
    CHECK_EQ(map.size(), 1000u);
    for (std::int64_t i = 0; i < 1000; ++i) {
        CallKey k;
        k.word(7).dims(Dims{i, 2 * i});
        const std::string* v = map.find(k);
        REQUIRE(v != nullptr);
        CHECK_EQ(*v, std::to_string(i));
        CHECK_EQ(v, addresses[static_cast<std::size_t>(i)]);
        CHECK_EQ(&map.emplace(k, [&]() -> std::string { throw std::logic_error("made twice"); }), v);
    }
    CHECK_EQ(made, 1000);
    std::size_t seen = 0;
    map.for_each([&](const std::string& v) { CHECK_EQ(v, std::to_string(seen++)); });
    CHECK_EQ(seen, 1000u);
}

TEST_CASE("CallMap: a throwing make inserts nothing") {
    skc::CallMap<int> map;
    CallKey k;
    k.word(1);
    CHECK_THROWS_AS(map.emplace(k, []() -> int { throw std::runtime_error("no"); }), std::runtime_error);
    CHECK(map.find(k) == nullptr);
    CHECK_EQ(map.emplace(k, [] { return 5; }), 5);
}

TEST_CASE("CallMap: many threads asking for the same keys make each value once and all see it") {
    skc::CallMap<std::int64_t> map;
    std::atomic<int> made{0};
    constexpr int threads = 8, keys = 500;
    std::vector<std::thread> pool;
    std::atomic<int> wrong{0};
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            for (int r = 0; r < 3; ++r)
                for (int j = 0; j < keys; ++j) {
                    const std::int64_t i = (j * 7 + t * 13) % keys;  // each thread in its own order
                    CallKey k;
                    k.word(3).integer(i);
                    const std::int64_t* found = map.find(k);
                    const std::int64_t& v = found != nullptr ? *found : map.emplace(k, [&] {
                        made.fetch_add(1);
                        return i * i;
                    });
                    if (v != i * i) wrong.fetch_add(1);
                }
        });
    for (std::thread& th : pool) th.join();
    CHECK_EQ(made.load(), keys);
    CHECK_EQ(wrong.load(), 0);
    CHECK_EQ(map.size(), static_cast<std::size_t>(keys));
}

}  // namespace skc_call_key_test
