#include <doctest/doctest.h>

#include <algorithm>
#include <random>

#include <skc/op_info_io.hpp>
#include <skc/op_set.hpp>

#include "test_support.hpp"

namespace skc_op_set_test {

TEST_CASE("OpSet deduplicates by content, not by name") {
    const auto dir = skc::read_op_info_dir(skc_test::example_ops_dir());
    skc::OpSet set;
    std::size_t inserted = 0;
    for (const auto& op : dir.ops) inserted += set.insert(op.record, op.path.filename().string());
    CHECK(dir.ops.size() == 15);
    CHECK(inserted == 14);  // MatMulV2_float_ND_32_64_14.json repeats _1's content
    CHECK(set.size() == 14);
    const skc::Digest d = skc::digest(dir.ops.front().record);
    CHECK(set.contains(d));
    CHECK(set.find(d)->name == dir.ops.front().path.filename().string());
}

TEST_CASE("the set digest does not depend on order or names, and depends on every member") {
    const auto dir = skc::read_op_info_dir(skc_test::example_ops_dir());
    skc::OpSet a;
    for (const auto& op : dir.ops) a.insert(op.record, op.path.filename().string());
    std::vector<skc::LoadedOp> shuffled = dir.ops;
    std::mt19937 rng(42);
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    skc::OpSet b;
    for (const auto& op : shuffled) b.insert(op.record, "renamed");
    CHECK(a.set_digest() == b.set_digest());

    skc::OpSet c;
    for (std::size_t i = 1; i < dir.ops.size(); ++i) c.insert(dir.ops[i].record);
    CHECK(c.set_digest() != a.set_digest());
    CHECK(skc::OpSet{}.set_digest() != c.set_digest());
}

}  // namespace skc_op_set_test
