// skc/dtype.hpp: the dtype and format names that op info files use.
//
// Records keep dtype and format as the exact text of the file, so a name skc does not list (real
// dumps carry more than any list) is kept and round-tripped, never rejected. The enums give the
// listed names a type, an element size, and a compile-time spelling for OpDesc.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>

namespace skc {

enum class DType : unsigned char {
    float32,
    float16,
    bfloat16,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
    boolean,
    complex64,
    complex128,
    hifloat8,
    float8_e5m2,
    float8_e4m3fn,
    int4,
};

enum class Format : unsigned char {
    ND,
    NCHW,
    NHWC,
    HWCN,
    NDHWC,
    NCDHW,
    NC1HWC0,
    NC1HWC0_C04,
    NDC1HWC0,
    FRACTAL_Z,
    FRACTAL_Z_C04,
    FRACTAL_Z_3D,
    FRACTAL_NZ,
    C1HWNCoC0,
};

namespace detail {

inline constexpr std::array<std::pair<DType, std::string_view>, 19> dtype_names{{
    {DType::float32, "float"},
    {DType::float16, "float16"},
    {DType::bfloat16, "bfloat16"},
    {DType::float64, "double"},
    {DType::int8, "int8"},
    {DType::int16, "int16"},
    {DType::int32, "int32"},
    {DType::int64, "int64"},
    {DType::uint8, "uint8"},
    {DType::uint16, "uint16"},
    {DType::uint32, "uint32"},
    {DType::uint64, "uint64"},
    {DType::boolean, "bool"},
    {DType::complex64, "complex64"},
    {DType::complex128, "complex128"},
    {DType::hifloat8, "hifloat8"},
    {DType::float8_e5m2, "float8_e5m2"},
    {DType::float8_e4m3fn, "float8_e4m3fn"},
    {DType::int4, "int4"},
}};

inline constexpr std::array<std::pair<Format, std::string_view>, 14> format_names{{
    {Format::ND, "ND"},
    {Format::NCHW, "NCHW"},
    {Format::NHWC, "NHWC"},
    {Format::HWCN, "HWCN"},
    {Format::NDHWC, "NDHWC"},
    {Format::NCDHW, "NCDHW"},
    {Format::NC1HWC0, "NC1HWC0"},
    {Format::NC1HWC0_C04, "NC1HWC0_C04"},
    {Format::NDC1HWC0, "NDC1HWC0"},
    {Format::FRACTAL_Z, "FRACTAL_Z"},
    {Format::FRACTAL_Z_C04, "FRACTAL_Z_C04"},
    {Format::FRACTAL_Z_3D, "FRACTAL_Z_3D"},
    {Format::FRACTAL_NZ, "FRACTAL_NZ"},
    {Format::C1HWNCoC0, "C1HWNCoC0"},
}};

}  // namespace detail

/// The name op info files use: `float` for float32, `float16`, `bfloat16`, `int32`, ...
constexpr std::string_view to_string(DType t) noexcept {
    for (const auto& [id, name] : detail::dtype_names)
        if (id == t) return name;
    return {};
}

constexpr std::string_view to_string(Format f) noexcept {
    for (const auto& [id, name] : detail::format_names)
        if (id == f) return name;
    return {};
}

/// The listed dtype with this name, or nullopt for a name skc does not list.
constexpr std::optional<DType> parse_dtype(std::string_view name) noexcept {
    for (const auto& [id, n] : detail::dtype_names)
        if (n == name) return id;
    return std::nullopt;
}

constexpr std::optional<Format> parse_format(std::string_view name) noexcept {
    for (const auto& [id, n] : detail::format_names)
        if (n == name) return id;
    return std::nullopt;
}

/// Bytes per element; 0 for sub-byte types (int4).
constexpr std::size_t size_of(DType t) noexcept {
    switch (t) {
    case DType::int8:
    case DType::uint8:
    case DType::boolean:
    case DType::hifloat8:
    case DType::float8_e5m2:
    case DType::float8_e4m3fn: return 1;
    case DType::float16:
    case DType::bfloat16:
    case DType::int16:
    case DType::uint16: return 2;
    case DType::float32:
    case DType::int32:
    case DType::uint32: return 4;
    case DType::float64:
    case DType::int64:
    case DType::uint64:
    case DType::complex64: return 8;
    case DType::complex128: return 16;
    case DType::int4: return 0;
    }
    return 0;
}

}  // namespace skc
