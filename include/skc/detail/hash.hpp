// skc/detail/hash.hpp: the 128-bit content hash behind every skc digest.
//
// Algorithm: MurmurHash3_x64_128 (Austin Appleby, public domain), seed 0, over a byte stream; the
// 16 digest bytes are h1 then h2, each little-endian. Input bytes are assembled into 64-bit words
// with shifts, never by type punning, so the result is the same on every machine, compiler and
// byte order, and the same at compile time (constexpr) and at run time. It is a fast identity hash,
// not a cryptographic one: skc uses it to tell op instances apart, and checks package integrity
// with a separate checksum.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace skc {

/// A 128-bit content digest. Ordered and printed byte by byte (hex order equals sort order).
struct Digest {
    std::array<unsigned char, 16> bytes{};

    friend constexpr bool operator==(const Digest&, const Digest&) = default;
    friend constexpr auto operator<=>(const Digest&, const Digest&) = default;

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

    /// The first eight bytes as a number: a well-mixed value for hash tables.
    [[nodiscard]] constexpr std::uint64_t low64() const noexcept {
        std::uint64_t v = 0;
        for (std::size_t i = 0; i < 8; ++i) v |= std::uint64_t{bytes[i]} << (8 * i);
        return v;
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
class Hasher {
    // Helpers come first: clang needs them defined before constexpr use from other classes.
    static constexpr std::uint64_t c1 = 0x87c37b91114253d5ULL;
    static constexpr std::uint64_t c2 = 0x4cf5ad432745937fULL;

    template <class Byte>
    static constexpr std::uint64_t load64(const Byte* p) noexcept {
        std::uint64_t v = 0;
        for (int i = 0; i < 8; ++i) v |= std::uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
        return v;
    }

    template <class Byte>
    constexpr void block(const Byte* p) noexcept {
        std::uint64_t k1 = load64(p);
        std::uint64_t k2 = load64(p + 8);
        k1 *= c1;
        k1 = rotl64(k1, 31);
        k1 *= c2;
        h1_ ^= k1;
        h1_ = rotl64(h1_, 27);
        h1_ += h2_;
        h1_ = h1_ * 5 + 0x52dce729;
        k2 *= c2;
        k2 = rotl64(k2, 33);
        k2 *= c1;
        h2_ ^= k2;
        h2_ = rotl64(h2_, 31);
        h2_ += h1_;
        h2_ = h2_ * 5 + 0x38495ab5;
    }


public:
    constexpr void update(std::string_view s) noexcept { update(s.data(), s.size()); }

    constexpr void update(const char* p, std::size_t n) noexcept {
        total_ += n;
        if (buffered_ != 0) {
            while (buffered_ < 16 && n != 0) {
                buf_[buffered_++] = static_cast<unsigned char>(*p++);
                --n;
            }
            if (buffered_ < 16) return;
            block(buf_.data());
            buffered_ = 0;
        }
        while (n >= 16) {
            block(p);
            p += 16;
            n -= 16;
        }
        while (n != 0) {
            buf_[buffered_++] = static_cast<unsigned char>(*p++);
            --n;
        }
    }

    constexpr void update_byte(unsigned char b) noexcept {
        ++total_;
        buf_[buffered_++] = b;
        if (buffered_ == 16) {
            block(buf_.data());
            buffered_ = 0;
        }
    }

    /// Eight bytes, little-endian.
    constexpr void update_u64(std::uint64_t v) noexcept {
        if (buffered_ <= 8) {  // fast path: fits in the buffer without a block boundary in between
            for (int i = 0; i < 8; ++i) buf_[buffered_++] = static_cast<unsigned char>(v >> (8 * i));
            total_ += 8;
            if (buffered_ == 16) {
                block(buf_.data());
                buffered_ = 0;
            }
            return;
        }
        for (int i = 0; i < 8; ++i) update_byte(static_cast<unsigned char>(v >> (8 * i)));
    }

    [[nodiscard]] constexpr Digest digest() const noexcept {
        std::uint64_t h1 = h1_, h2 = h2_;
        std::uint64_t k1 = 0, k2 = 0;
        const std::size_t tail = buffered_;
        for (std::size_t i = tail; i > 8; --i) k2 ^= std::uint64_t{buf_[i - 1]} << (8 * (i - 9));
        if (tail > 8) {
            k2 *= c2;
            k2 = rotl64(k2, 33);
            k2 *= c1;
            h2 ^= k2;
        }
        for (std::size_t i = tail < 8 ? tail : 8; i > 0; --i) k1 ^= std::uint64_t{buf_[i - 1]} << (8 * (i - 1));
        if (tail > 0) {
            k1 *= c1;
            k1 = rotl64(k1, 31);
            k1 *= c2;
            h1 ^= k1;
        }
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
    std::array<unsigned char, 16> buf_{};
    std::size_t buffered_ = 0;
};

/// One-shot hash of a byte string.
constexpr Digest hash_bytes(std::string_view s) noexcept {
    Hasher h;
    h.update(s);
    return h.digest();
}

}  // namespace detail
}  // namespace skc
