// skc/detail/text.hpp: how skc shows untrusted text in a message: quoted, with control characters,
// quotes and backslashes as \xNN, so a hostile name cannot forge lines or hide its end; and how it
// reads a number from untrusted text.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace skc::detail {

/// Appends `c` to `out` as \xNN (the one spelling of a byte that must not be shown as it is).
inline void append_hex_escape(std::string& out, char c) {
    static constexpr char digits[] = "0123456789abcdef";
    const auto u = static_cast<unsigned char>(c);
    out += "\\x";
    out += digits[u >> 4];
    out += digits[u & 0xF];
}

/// `s` in double quotes, control characters, DEL, '"' and '\' shown as \xNN. With `max` > 0, only
/// the first `max` bytes are shown, followed by `...` after the closing quote when cut.
inline std::string quote(std::string_view s, std::size_t max = 0) {
    const bool cut = max > 0 && s.size() > max;
    std::string out = "\"";
    for (char c : cut ? s.substr(0, max) : s) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7f || c == '"' || c == '\\') append_hex_escape(out, c);
        else out += c;
    }
    out += '"';
    if (cut) out += "...";
    return out;
}

/// "1 s", "1.5 s", "0.3 s": a duration for messages, to the millisecond (cut, not rounded).
inline std::string seconds_text(std::chrono::nanoseconds d) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
    std::string out = (ms < 0 ? "-" : "") + std::to_string(std::abs(ms) / 1000);
    if (const auto frac = std::abs(ms) % 1000; frac != 0) {
        std::string f = std::to_string(frac);
        f.insert(0, 3 - f.size(), '0');
        while (f.back() == '0') f.pop_back();
        out += "." + f;
    }
    return out + " s";
}

/// `s` cut at every `sep`: "a b" -> {"a", "b"}, "" -> {""}, "a  b" -> {"a", "", "b"}.
inline std::vector<std::string_view> split(std::string_view s, char sep) {
    std::vector<std::string_view> parts;
    for (std::size_t pos = 0;;) {
        const std::size_t at = s.find(sep, pos);
        parts.push_back(s.substr(pos, at == std::string_view::npos ? std::string_view::npos : at - pos));
        if (at == std::string_view::npos) return parts;
        pos = at + 1;
    }
}

/// A decimal number of at most 20 digits that fits in 64 bits, nothing else (no sign, no space).
inline bool parse_u64(std::string_view s, std::uint64_t& out) {
    if (s.empty() || s.size() > 20) return false;
    std::uint64_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        const auto d = static_cast<std::uint64_t>(c - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    out = v;
    return true;
}

/// Valid UTF-8 for JSON: every byte that does not start a well-formed sequence becomes U+FFFD.
/// (skc::dump_json refuses invalid UTF-8, and names, paths and messages quoting them are arbitrary bytes.)
inline std::string to_valid_utf8(std::string_view s) {
    std::string r;
    std::size_t i = 0;
    while (i < s.size()) {
        const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
        const unsigned char c = b(i);
        std::size_t n = 0;
        unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
        if (c < 0x80) n = 1;
        else if (c >= 0xC2 && c <= 0xDF) n = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            n = 3;
            if (c == 0xE0) lo = 0xA0;  // no overlong forms
            if (c == 0xED) hi = 0x9F;  // no surrogates
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
        }
        bool ok = n != 0 && i + n <= s.size();
        for (std::size_t k = 1; ok && k < n; ++k) {
            const unsigned char lower = k == 1 ? lo : 0x80, upper = k == 1 ? hi : 0xBF;
            ok = b(i + k) >= lower && b(i + k) <= upper;
        }
        if (ok) {
            r.append(s.substr(i, n));
            i += n;
        } else {
            r += "\xEF\xBF\xBD";
            ++i;
        }
    }
    return r;
}

}  // namespace skc::detail
