#include <doctest/doctest.h>

#include <string>

#include <skc/detail/hash.hpp>

namespace skc_hash_test {

using skc::detail::hash_bytes;
using skc::detail::Hasher;

TEST_CASE("MurmurHash3_x64_128 reference vectors (seed 0)") {
    CHECK_EQ(hash_bytes("").hex(), "00000000000000000000000000000000");
    CHECK_EQ(hash_bytes("The quick brown fox jumps over the lazy dog").hex(), "6c1b07bc7bbc4be347939ac4a93c437a");
}

TEST_CASE("the hash is a constant expression") {
    constexpr skc::Digest d = hash_bytes("The quick brown fox jumps over the lazy dog");
    static_assert(d.bytes[0] == 0x6c && d.bytes[15] == 0x7a);
    CHECK(d == hash_bytes("The quick brown fox jumps over the lazy dog"));
}

TEST_CASE("streaming in pieces of any size gives the one-shot digest") {
    std::string text;
    for (int i = 0; i < 300; ++i) text += static_cast<char>('a' + (i * 7) % 26);
    for (std::size_t len : {0u, 1u, 7u, 8u, 15u, 16u, 17u, 31u, 32u, 33u, 100u, 300u}) {
        const std::string_view s(text.data(), len);
        const skc::Digest whole = hash_bytes(s);
        for (std::size_t piece : {1u, 3u, 5u, 8u, 16u, 17u}) {
            Hasher h;
            for (std::size_t at = 0; at < len; at += piece) h.update(s.substr(at, piece));
            CHECK_MESSAGE(h.digest() == whole, "len " << len << " piece " << piece);
        }
    }
}

TEST_CASE("update_u64 and update_byte are little-endian byte streams") {
    Hasher a;
    a.update_byte(1);
    a.update_u64(0x0807060504030201ULL);                              // crosses no boundary
    for (int i = 0; i < 3; ++i) a.update_u64(0x1122334455667788ULL);  // crosses block boundaries
    std::string bytes = "\x01\x01\x02\x03\x04\x05\x06\x07\x08";
    for (int i = 0; i < 3; ++i) bytes += "\x88\x77\x66\x55\x44\x33\x22\x11";
    CHECK(a.digest() == hash_bytes(bytes));
}

TEST_CASE("digests order byte by byte, like their hex") {
    skc::Digest a, b;
    a.bytes[0] = 1;
    b.bytes[1] = 0xff;
    CHECK(b < a);
    CHECK(b.hex() < a.hex());
}

}  // namespace skc_hash_test
