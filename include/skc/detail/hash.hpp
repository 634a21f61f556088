// skc/detail/hash.hpp: the 128-bit content hash behind every skc digest.
//
// Algorithm: MurmurHash3_x64_128 (Austin Appleby, public domain), seed 0, over a byte stream; the
// 16 digest bytes are h1 then h2, each little-endian. Input bytes are read as little-endian 64-bit
// words whatever the machine (memcpy plus a byte swap on big-endian ones at run time, shifts at
// compile time), so the result is the same on every machine and compiler, and the same at compile
// time (constexpr) and at run time. It is a fast identity hash, not a cryptographic one: skc uses
// it to tell op instances apart and, over a package's bytes, as the cache entry's checksum, which
// catches damage (a truncated or altered file), not a forger (docs/cache.md, "Sharing a cache": who
// can write the cache is trusted).
#pragma once

#include <array>
#include <bit>
#include <compare>
#include <cstring>
#include <type_traits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <optional>
#include <string_view>

namespace skc {

/// A 128-bit content digest. Ordered and printed byte by byte (hex order equals sort order).
struct Digest {
    std::array<unsigned char, 16> bytes{};

    friend constexpr bool operator==(const Digest&, const Digest&) = default;
    /// Byte-wise lexicographic order, compared as two big-endian 64-bit words.
    friend constexpr std::strong_ordering operator<=>(const Digest& a, const Digest& b) noexcept {
        if (const auto c = a.word(0) <=> b.word(0); c != 0) return c;
        return a.word(1) <=> b.word(1);
    }

    /// Bytes [8i, 8i+8) as a big-endian number: comparing words compares bytes in order.
    [[nodiscard]] constexpr std::uint64_t word(std::size_t i) const noexcept {
        if (!std::is_constant_evaluated()) {
            std::uint64_t v;
            std::memcpy(&v, bytes.data() + 8 * i, 8);
            if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap64(v);
            return v;
        }
        std::uint64_t v = 0;
        for (std::size_t k = 0; k < 8; ++k) v = (v << 8) | bytes[8 * i + k];
        return v;
    }

    /// 32 lower-case hex digits.
    [[nodiscard]] std::string hex() const {
        static constexpr char digits[] = "0123456789abcdef";
        std::string out(32, '0');
        for (std::size_t i = 0; i < 16; ++i) {
            out[2 * i] = digits[bytes[i] >> 4];
            out[2 * i + 1] = digits[bytes[i] & 0xF];
        }
        return out;
    }

    /// Parses 32 hex digits (either case); nullopt for anything else.
    [[nodiscard]] static std::optional<Digest> from_hex(std::string_view s) noexcept {
        if (s.size() != 32) return std::nullopt;
        auto nibble = [](char c) -> int {
            if (c >= '0' && c <= '9') return c - '0';
            if (c >= 'a' && c <= 'f') return c - 'a' + 10;
            if (c >= 'A' && c <= 'F') return c - 'A' + 10;
            return -1;
        };
        Digest d;
        for (std::size_t i = 0; i < 16; ++i) {
            const int hi = nibble(s[2 * i]), lo = nibble(s[2 * i + 1]);
            if (hi < 0 || lo < 0) return std::nullopt;
            d.bytes[i] = static_cast<unsigned char>(hi * 16 + lo);
        }
        return d;
    }

    /// The first eight bytes as a number: a well-mixed value for hash tables.
    [[nodiscard]] constexpr std::uint64_t low64() const noexcept {
        if (!std::is_constant_evaluated()) {
            std::uint64_t v;
            std::memcpy(&v, bytes.data(), 8);
            if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
            return v;
        }
        std::uint64_t v = 0;
        for (std::size_t i = 0; i < 8; ++i) v |= std::uint64_t{bytes[i]} << (8 * i);
        return v;
    }

    /// Equality as two 64-bit compares (no memcmp call).
    [[nodiscard]] constexpr bool same_as(const Digest& o) const noexcept {
        if (!std::is_constant_evaluated()) {
            std::uint64_t a[2], b[2];
            std::memcpy(a, bytes.data(), 16);
            std::memcpy(b, o.bytes.data(), 16);
            return ((a[0] ^ b[0]) | (a[1] ^ b[1])) == 0;
        }
        return bytes == o.bytes;
    }
};

/// Hash functor for unordered containers keyed by Digest.
struct DigestHash {
    std::size_t operator()(const Digest& d) const noexcept { return static_cast<std::size_t>(d.low64()); }
};

namespace detail {

constexpr std::uint64_t rotl64(std::uint64_t x, int r) noexcept { return (x << r) | (x >> (64 - r)); }

constexpr std::uint64_t fmix64(std::uint64_t k) noexcept {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

/// Streaming MurmurHash3_x64_128. update() any number of times, then digest().
///
/// Input is staged in a 128-byte buffer and hashed eight blocks at a time, so the many small
/// pieces of a canonical encoding (a tag byte, an 8-byte length, a short key) each cost an append.
/// The buffer has 16 bytes of slack past its 128, so a piece of up to 16 bytes is always copied
/// whole, with fixed-size copies; what ran past the end is moved to the front once the 128 bytes
/// are hashed.
class Hasher {
    // Helpers come first: clang needs them defined before constexpr use from other classes.
    static constexpr std::uint64_t c1 = 0x87c37b91114253d5ULL;
    static constexpr std::uint64_t c2 = 0x4cf5ad432745937fULL;
    static constexpr std::size_t capacity = 128;  // a multiple of the 16-byte block
    static constexpr std::size_t slack = 16;      // room past capacity for one short append

    template <class Byte>
    static constexpr std::uint64_t load64(const Byte* p) noexcept {
        if (!std::is_constant_evaluated()) {
            std::uint64_t v;
            std::memcpy(&v, p, 8);
            if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
            return v;
        }
        std::uint64_t v = 0;
        for (int i = 0; i < 8; ++i) v |= std::uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
        return v;
    }

    /// The two lanes' key scrambles: lane 1 multiplies by c1, rotates by 31, multiplies by c2; lane 2
    /// the other way round, by 33.
    static constexpr std::uint64_t key1(std::uint64_t k) noexcept { return rotl64(k * c1, 31) * c2; }
    static constexpr std::uint64_t key2(std::uint64_t k) noexcept { return rotl64(k * c2, 33) * c1; }

    /// Mixes `blocks` 16-byte blocks from p into h1, h2.
    template <class Byte>
    static constexpr void mix(std::uint64_t& h1, std::uint64_t& h2, const Byte* p, std::size_t blocks) noexcept {
        for (std::size_t b = 0; b < blocks; ++b, p += 16) {
            h1 ^= key1(load64(p));
            h1 = (rotl64(h1, 27) + h2) * 5 + 0x52dce729;
            h2 ^= key2(load64(p + 8));
            h2 = (rotl64(h2, 31) + h1) * 5 + 0x38495ab5;
        }
    }

    /// Hashes the full buffer and keeps what an append wrote past it (at most `slack` bytes).
    /// Out of line, so that the appends stay small enough to be inlined where they are used.
    [[gnu::noinline]] constexpr void spill() noexcept {
        mix(h1_, h2_, buf_.data(), capacity / 16);
        buffered_ -= capacity;
        for (std::size_t i = 0; i < buffered_; ++i) buf_[i] = buf_[capacity + i];
    }

    /// Restores buffered_ < capacity after an append of at most `slack` bytes.
    constexpr void settle() noexcept {
        if (buffered_ >= capacity) spill();
    }

    /// Appends n <= slack bytes (there is room: buffered_ < capacity on entry).
    constexpr void append_short(const char* p, std::size_t n) noexcept {
        unsigned char* dst = buf_.data() + buffered_;
        if (std::is_constant_evaluated()) {
            for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<unsigned char>(p[i]);
        } else if (n >= 8) {  // fixed-size copies, overlapping when n < 16: no library call
            std::uint64_t a, b;
            std::memcpy(&a, p, 8);
            std::memcpy(&b, p + n - 8, 8);
            std::memcpy(dst, &a, 8);
            std::memcpy(dst + n - 8, &b, 8);
        } else if (n >= 4) {
            std::uint32_t a, b;
            std::memcpy(&a, p, 4);
            std::memcpy(&b, p + n - 4, 4);
            std::memcpy(dst, &a, 4);
            std::memcpy(dst + n - 4, &b, 4);
        } else if (n > 0) {
            dst[0] = static_cast<unsigned char>(p[0]);
            dst[n / 2] = static_cast<unsigned char>(p[n / 2]);
            dst[n - 1] = static_cast<unsigned char>(p[n - 1]);
        }
        buffered_ += n;
        total_ += n;
        settle();
    }

    /// Appends a piece longer than `slack`: whole blocks in place when the buffer is empty.
    [[gnu::noinline]] constexpr void append_long(const char* p, std::size_t n) noexcept {
        total_ += n;
        if (buffered_ == 0 && n >= capacity) {
            const std::size_t blocks = n / 16;
            mix(h1_, h2_, p, blocks);
            p += blocks * 16;
            n -= blocks * 16;
        }
        while (n != 0) {
            const std::size_t take = n < capacity - buffered_ ? n : capacity - buffered_;
            if (!std::is_constant_evaluated()) {
                std::memcpy(buf_.data() + buffered_, p, take);
            } else {
                for (std::size_t i = 0; i < take; ++i) buf_[buffered_ + i] = static_cast<unsigned char>(p[i]);
            }
            buffered_ += take;
            p += take;
            n -= take;
            settle();
        }
    }

public:
    constexpr void update(std::string_view s) noexcept { update(s.data(), s.size()); }

    constexpr void update(const char* p, std::size_t n) noexcept {
        if (n <= slack) append_short(p, n);
        else append_long(p, n);
    }

    constexpr void update_byte(unsigned char b) noexcept {
        ++total_;
        buf_[buffered_++] = b;
        settle();
    }

    /// Eight bytes, little-endian.
    constexpr void update_u64(std::uint64_t v) noexcept {
        if (!std::is_constant_evaluated()) {
            if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
            std::memcpy(buf_.data() + buffered_, &v, 8);
        } else {
            for (int i = 0; i < 8; ++i)
                buf_[buffered_ + static_cast<std::size_t>(i)] = static_cast<unsigned char>(v >> (8 * i));
        }
        buffered_ += 8;
        total_ += 8;
        settle();
    }

    [[nodiscard]] constexpr Digest digest() const noexcept {
        std::uint64_t h1 = h1_, h2 = h2_;
        const std::size_t full = buffered_ / 16;
        mix(h1, h2, buf_.data(), full);
        const unsigned char* t = buf_.data() + full * 16;
        const std::size_t tail = buffered_ - full * 16;
        std::uint64_t k1 = 0, k2 = 0;
        for (std::size_t i = tail; i > 8; --i) k2 ^= std::uint64_t{t[i - 1]} << (8 * (i - 9));
        if (tail > 8) h2 ^= key2(k2);
        for (std::size_t i = tail < 8 ? tail : 8; i > 0; --i) k1 ^= std::uint64_t{t[i - 1]} << (8 * (i - 1));
        if (tail > 0) h1 ^= key1(k1);
        h1 ^= total_;
        h2 ^= total_;
        h1 += h2;
        h2 += h1;
        h1 = fmix64(h1);
        h2 = fmix64(h2);
        h1 += h2;
        h2 += h1;
        Digest d;
        for (std::size_t i = 0; i < 8; ++i) {
            d.bytes[i] = static_cast<unsigned char>(h1 >> (8 * i));
            d.bytes[8 + i] = static_cast<unsigned char>(h2 >> (8 * i));
        }
        return d;
    }

private:
    std::uint64_t h1_ = 0, h2_ = 0;
    std::uint64_t total_ = 0;
    std::array<unsigned char, capacity + slack> buf_{};
    std::size_t buffered_ = 0;  // < capacity between calls
};

/// One-shot hash of a byte string.
constexpr Digest hash_bytes(std::string_view s) noexcept {
    Hasher h;
    h.update(s);
    return h.digest();
}

}  // namespace detail
}  // namespace skc
