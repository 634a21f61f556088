// skc/config.hpp: the library's version and every SKC_ macro. No other header defines a macro.
#pragma once

#define SKC_VERSION_MAJOR 0
#define SKC_VERSION_MINOR 1
#define SKC_VERSION_PATCH 0
#define SKC_VERSION_STRING "0.1.0"

// SKC_CONSTEXPR_RECORD marks the run-time record path (Value, Shape, OpRecord and their digest)
// constexpr where the standard library lets std::string, std::vector and std::variant live in
// constant evaluation. There the digest of OpDesc::record() is checked against OpDesc::digest by a
// static_assert; elsewhere (clang with libstdc++) the same check runs as a test.
#if !defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 12
#define SKC_HAS_CONSTEXPR_RECORD 1
#define SKC_CONSTEXPR_RECORD constexpr
#else
#define SKC_HAS_CONSTEXPR_RECORD 0
#define SKC_CONSTEXPR_RECORD inline
#endif
