#include <doctest/doctest.h>

#include <skc/dtype.hpp>

namespace skc_dtype_test {

TEST_CASE("dtype names as real dumps write them") {
    CHECK(skc::to_string(skc::DType::float32) == "float");
    CHECK(skc::to_string(skc::DType::float16) == "float16");
    CHECK(skc::to_string(skc::DType::bfloat16) == "bfloat16");
    CHECK(skc::to_string(skc::DType::int32) == "int32");
    CHECK(skc::parse_dtype("float") == skc::DType::float32);
    CHECK(skc::parse_dtype("bool") == skc::DType::boolean);
    CHECK_FALSE(skc::parse_dtype("float4_e2m1").has_value());  // unknown names are not an error here
    static_assert(skc::size_of(skc::DType::bfloat16) == 2);
    static_assert(skc::size_of(skc::DType::complex128) == 16);
}

TEST_CASE("every listed dtype and format round-trips through its name") {
    for (const auto& [id, name] : skc::detail::dtype_names) CHECK(skc::parse_dtype(name) == id);
    for (const auto& [id, name] : skc::detail::format_names) CHECK(skc::parse_format(name) == id);
    CHECK(skc::to_string(skc::Format::FRACTAL_NZ) == "FRACTAL_NZ");
    CHECK_FALSE(skc::parse_format("NOPE").has_value());
}

}  // namespace skc_dtype_test
