// tools/common.hpp: what every skc command shares: exit statuses and output helpers
// (printable text, valid UTF-8 for JSON, sizes and durations for people).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>
#include <string_view>

#include <skc/detail/text.hpp>
#include <skc/op_info_io.hpp>
#include <skc/value.hpp>

namespace skc_tool {

constexpr int exit_ok = 0;
constexpr int exit_bad_entries = 1;
constexpr int exit_usage = 2;
constexpr int exit_failed = 3;

// ---- text ------------------------------------------------------------------------------------------

inline void out(std::string_view s) { std::fwrite(s.data(), 1, s.size(), stdout); }

/// Control characters as \xNN, so that a hostile name cannot forge lines of output; with
/// `keep_newlines`, line breaks stay (for messages that quote a log's last lines).
inline std::string printable(std::string_view s, bool keep_newlines = false) {
    std::string r;
    for (const char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if ((u < 0x20 && !(keep_newlines && c == '\n')) || u == 0x7f) skc::detail::append_hex_escape(r, c);
        else r += c;
    }
    return r;
}

/// Valid UTF-8 for JSON (skc::dump_json refuses invalid UTF-8, and names and paths on disk are
/// arbitrary bytes): see skc::detail::to_valid_utf8.
inline std::string utf8(std::string_view s) { return skc::detail::to_valid_utf8(s); }

inline std::string pad_left(std::string s, std::size_t width) {
    if (s.size() < width) s.insert(0, width - s.size(), ' ');
    return s;
}

inline std::string pad_right(std::string s, std::size_t width) {
    if (s.size() < width) s.append(width - s.size(), ' ');
    return s;
}

template <class... T>
inline std::string format(const char* fmt, T... args) {
    char buf[128];
    const int n = std::snprintf(buf, sizeof buf, fmt, args...);
    return std::string(buf, n < 0 ? 0 : std::min(static_cast<std::size_t>(n), sizeof buf - 1));
}

/// 1023 B, 1.0 KiB, 12.5 MiB, ... (powers of 1024, as --max-size reads them).
inline std::string human_size(std::uint64_t bytes) {
    if (bytes < 1024) return std::to_string(bytes) + " B";
    static constexpr std::array<const char*, 6> units{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = static_cast<double>(bytes) / 1024;
    std::size_t u = 0;
    while (v >= 1024 && u + 1 < units.size()) {
        v /= 1024;
        ++u;
    }
    return format("%.1f %s", v, units[u]);
}

inline std::string human_duration(std::int64_t ns) {
    if (ns <= 0) return "0 s";
    const auto d = static_cast<double>(ns);
    if (ns < 1000) return std::to_string(ns) + " ns";
    if (ns < 1000000) return format("%.1f us", d / 1e3);
    if (ns < 1000000000) return format("%.1f ms", d / 1e6);
    if (ns < 60 * 1000000000LL) return format("%.2f s", d / 1e9);
    const std::int64_t s = ns / 1000000000;
    if (s < 3600) return format("%lldm %02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
    if (s < 86400)
        return format("%lldh %02lldm %02llds", static_cast<long long>(s / 3600), static_cast<long long>(s / 60 % 60),
                      static_cast<long long>(s % 60));
    return format("%lldd %02lldh %02lldm", static_cast<long long>(s / 86400), static_cast<long long>(s / 3600 % 24),
                  static_cast<long long>(s / 60 % 60));
}

/// `YYYY-mm-dd HH:MM:SS` in local time.
inline std::string local_time(std::int64_t unix_seconds) {
    const auto t = static_cast<std::time_t>(unix_seconds);
    std::tm tm{};
    if (::localtime_r(&t, &tm) == nullptr) return "-";
    char buf[32];
    const std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
    return std::string(buf, n);
}

inline std::string plural(std::uint64_t n, std::string_view one, std::string_view many) {
    return std::to_string(n) + " " + std::string(n == 1 ? one : many);
}

inline std::string percent(std::uint64_t part, std::uint64_t whole) {
    return whole == 0 ? "-" : format("%.2f %%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

inline void print_json(skc::Object root) { out(skc::dump_json(skc::Value(std::move(root)), 2) + "\n"); }

}  // namespace skc_tool
