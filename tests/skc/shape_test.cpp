#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include <boost/hana/at.hpp>
#include <boost/hana/equal.hpp>
#include <boost/hana/length.hpp>

#include <skc/shape.hpp>

namespace skc_shape_test {

namespace hana = boost::hana;

template <class S>
concept has_element_count = requires {
    S::element_count();
};

TEST_CASE("compile-time shape") {
    using S = skc::Shape<1, 2048>;
    static_assert(S::rank == 2);
    static_assert(hana::length(S::dims) == hana::size_c<2>);
    static_assert(hana::at_c<1>(S::dims) == hana::llong_c<2048>);
    static_assert(S::is_static);
    static_assert(S::element_count() == 2048);
    static_assert(skc::Shape<>::element_count() == 1);  // rank 0: one element
    static_assert(skc::Shape<0, 5>::element_count() == 0);
    using D = skc::Shape<skc::dyn, 64>;
    static_assert(!D::is_static);
    static_assert(!has_element_count<D>, "a dynamic shape has no element count");
    static_assert(has_element_count<S>);
    CHECK(S::array[1] == 2048);
}

TEST_CASE("run-time shape stays inline up to rank 8, spills above") {
    skc::RuntimeShape s{1, 2, 3, 4, 5, 6, 7, 8};
    CHECK(s.rank() == 8);
    CHECK_FALSE(s.on_heap());
    s.push_back(9);
    CHECK(s.on_heap());
    CHECK(s.rank() == 9);
    for (std::size_t i = 0; i < 9; ++i) CHECK(s[i] == static_cast<std::int64_t>(i + 1));
    skc::RuntimeShape copy = s;
    CHECK(copy == s);
    skc::RuntimeShape moved = std::move(copy);
    CHECK(moved == s);
    CHECK(copy.rank() == 0);  // NOLINT: moved-from is empty by contract
    skc::RuntimeShape big;
    for (int i = 0; i < 100; ++i) big.push_back(i);
    CHECK(big.rank() == 100);
    CHECK(big[99] == 99);
    big = skc::RuntimeShape{3};
    CHECK(big.rank() == 1);
    CHECK_FALSE(big.on_heap());
}

TEST_CASE("run-time shape from a compile-time shape") {
    const skc::RuntimeShape s{skc::Shape<2, 3, 4>{}};
    CHECK(s == skc::RuntimeShape{2, 3, 4});
    CHECK(s.element_count() == 24);
}

TEST_CASE("element counts are overflow-checked") {
    CHECK(skc::RuntimeShape{}.element_count() == 1);
    CHECK(skc::RuntimeShape{4294967296, 2147483647}.element_count() == 4294967296LL * 2147483647LL);
    CHECK_FALSE(skc::RuntimeShape{4294967296, 4294967296}.element_count().has_value());
    CHECK_FALSE(skc::RuntimeShape{std::numeric_limits<std::int64_t>::max(), 2}.element_count().has_value());
    CHECK(skc::RuntimeShape{0, std::numeric_limits<std::int64_t>::max(), 2}.element_count() == 0);
    CHECK_FALSE(skc::RuntimeShape{-1, 4}.element_count().has_value());
}

}  // namespace skc_shape_test
