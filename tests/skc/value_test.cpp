#include <doctest/doctest.h>

#include <cstdint>
#include <limits>

#include <skc/value.hpp>

namespace skc_value_test {

using skc::Array;
using skc::Kind;
using skc::Object;
using skc::Value;

static std::string canon(const Value& v) {
    skc::detail::canon::StringSink s;
    skc::detail::encode_value(s, v);
    return s.bytes;
}

TEST_CASE("kinds") {
    CHECK(Value().kind() == Kind::null);
    CHECK(Value(true).kind() == Kind::boolean);
    CHECK(Value(-3).kind() == Kind::integer);
    CHECK(Value(3u).kind() == Kind::integer);
    CHECK(Value(std::numeric_limits<std::uint64_t>::max()).kind() == Kind::unsigned_integer);
    CHECK(Value(2.5).kind() == Kind::number);
    CHECK(Value("s").kind() == Kind::string);
    CHECK(Value(Array{}).kind() == Kind::array);
    CHECK(Value(Object{}).kind() == Kind::object);
}

TEST_CASE("object equality ignores member order; canonical bytes too") {
    const Value a(Object{{"x", 1}, {"y", Array{true, nullptr}}});
    const Value b(Object{{"y", Array{true, nullptr}}, {"x", 1}});
    CHECK(a == b);
    CHECK(canon(a) == canon(b));
    CHECK(a.find("x") != nullptr);
    CHECK(a.find("z") == nullptr);
    CHECK(Value(1).find("x") == nullptr);
}

TEST_CASE("canonical bytes keep types apart") {
    CHECK(canon(Value(1)) != canon(Value(1.0)));
    CHECK(canon(Value("1")) != canon(Value(1)));
    CHECK(canon(Value(true)) != canon(Value(1)));
    CHECK(canon(Value(Array{})) != canon(Value(Object{})));
    CHECK(canon(Value(nullptr)) != canon(Value(Array{})));
    // Lengths come first: ["ab","c"] and ["a","bc"] differ.
    CHECK(canon(Value(Array{"ab", "c"})) != canon(Value(Array{"a", "bc"})));
    // An unsigned integer that fits in int64 encodes like the signed one.
    CHECK(canon(Value(std::uint64_t{7})) == canon(Value(std::int64_t{7})));
}

TEST_CASE("exact canonical bytes of a small object") {
    const Value v(Object{{"b", 1}, {"a", "x"}});
    const std::string expected = std::string("{") + std::string("\x02\0\0\0\0\0\0\0", 8) +
                                 std::string("\x01\0\0\0\0\0\0\0", 8) + "a" + "s" +
                                 std::string("\x01\0\0\0\0\0\0\0", 8) + "x" + std::string("\x01\0\0\0\0\0\0\0", 8) +
                                 "b" + "i" + std::string("\x01\0\0\0\0\0\0\0", 8);
    CHECK(canon(v) == expected);
}

}  // namespace skc_value_test
