// skc/detail/canon.hpp: the canonical byte encoding that digests are computed over.
//
// A JSON value is encoded as a tag byte followed by its payload; all integers are 8 bytes,
// little-endian; lengths and counts come before contents, so no two values share an encoding:
//   null 'n' | false 'f' | true 't'
//   integer 'i' int64   (an unsigned integer that fits in int64 is encoded as 'i' too)
//   unsigned 'u' uint64 (only for values above INT64_MAX)
//   float 'd' IEEE-754 binary64 bits (-0.0 as 0.0)
//   string 's' length bytes
//   array '[' count element...
//   object '{' count (length key-bytes value)...   members sorted by key, bytewise
// The encoding depends only on the JSON content: key order and white space in a file do not
// change it. A Sink is anything with update(string_view), update_byte(unsigned char) and
// update_u64(uint64_t): the Hasher (to digest) or a StringSink (to see the bytes).
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace skc::detail::canon {

/// Collects the canonical bytes in a string (for inspection, tests and documentation).
struct StringSink {
    std::string bytes;
    constexpr void update(std::string_view s) { bytes.append(s); }
    constexpr void update_byte(unsigned char b) { bytes.push_back(static_cast<char>(b)); }
    constexpr void update_u64(std::uint64_t v) {
        for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>(static_cast<unsigned char>(v >> (8 * i))));
    }
};

template <class Sink>
constexpr void put_null(Sink& s) {
    s.update_byte('n');
}

template <class Sink>
constexpr void put_bool(Sink& s, bool b) {
    s.update_byte(b ? 't' : 'f');
}

template <class Sink>
constexpr void put_int(Sink& s, std::int64_t v) {
    s.update_byte('i');
    s.update_u64(static_cast<std::uint64_t>(v));
}

template <class Sink>
constexpr void put_uint(Sink& s, std::uint64_t v) {
    if (v <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        put_int(s, static_cast<std::int64_t>(v));
        return;
    }
    s.update_byte('u');
    s.update_u64(v);
}

/// -0.0 is encoded as 0.0: they compare equal, so they must be one identity.
template <class Sink>
constexpr void put_double(Sink& s, double d) {
    s.update_byte('d');
    s.update_u64(std::bit_cast<std::uint64_t>(d == 0.0 ? 0.0 : d));
}

template <class Sink>
constexpr void put_string(Sink& s, std::string_view v) {
    s.update_byte('s');
    s.update_u64(v.size());
    s.update(v);
}

template <class Sink>
constexpr void begin_array(Sink& s, std::uint64_t count) {
    s.update_byte('[');
    s.update_u64(count);
}

template <class Sink>
constexpr void begin_object(Sink& s, std::uint64_t count) {
    s.update_byte('{');
    s.update_u64(count);
}

/// A member's key; its value follows.
template <class Sink>
constexpr void put_key(Sink& s, std::string_view k) {
    s.update_u64(k.size());
    s.update(k);
}

}  // namespace skc::detail::canon
