// tools/common.hpp: what every skc command shares: exit statuses, usage errors, output helpers
// (printable text, valid UTF-8 for JSON, sizes and durations for people) and number parsing.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <map>
#include <vector>
#include <optional>
#include <span>
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

/// Bad usage: the whole one-line message (already prefixed with the command), exit status 2.
struct UsageError {
    std::string message;
};

using Args = std::span<const std::string_view>;

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

// ---- values of options -----------------------------------------------------------------------------

inline std::optional<std::uint64_t> parse_count(std::string_view s) {
    if (s.empty() || s.size() > 20) return std::nullopt;
    std::uint64_t v = 0;
    for (const char c : s) {
        if (c < '0' || c > '9') return std::nullopt;
        const auto d = static_cast<std::uint64_t>(c - '0');
        if (v > (UINT64_MAX - d) / 10) return std::nullopt;
        v = v * 10 + d;
    }
    return v;
}

// ---- options -----------------------------------------------------------------------------------------

/// One option of a command: `--name VALUE` (or `--name=VALUE`), or a flag when `value` is empty.
struct OptionSpec {
    std::string_view name;
    std::string_view value;  // what the value is, for messages ("DIR"); empty for a flag
    std::string_view help;
    bool repeatable = false;
};

struct ParsedArgs {
    std::map<std::string, std::vector<std::string>, std::less<>> values;  // flags hold one empty string
    std::vector<std::string> positional;
    bool help = false;

    [[nodiscard]] bool has(std::string_view name) const { return values.find(name) != values.end(); }
    [[nodiscard]] std::optional<std::string> get(std::string_view name) const {
        const auto it = values.find(name);
        if (it == values.end()) return std::nullopt;
        return it->second.front();
    }
    [[nodiscard]] std::vector<std::string> all(std::string_view name) const {
        const auto it = values.find(name);
        return it == values.end() ? std::vector<std::string>{} : it->second;
    }
};

inline std::string option_names(std::span<const OptionSpec> specs) {
    std::string r;
    for (const OptionSpec& s : specs) r += (r.empty() ? "" : ", ") + std::string(s.name);
    return r;
}

/// Parses `args` against `specs`; `prefix` starts every message ("skc compile: "). At most
/// `max_positional` arguments that are not options. Errors are UsageError.
inline ParsedArgs parse_args(const std::string& prefix, std::span<const OptionSpec> specs, Args args,
                             std::size_t max_positional, std::string_view see) {
    ParsedArgs p;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string_view a = args[i];
        if (a == "--help" || a == "-h") {
            p.help = true;
            return p;
        }
        if (a.size() < 2 || a[0] != '-') {
            if (p.positional.size() == max_positional)
                throw UsageError{prefix + "unexpected argument '" + printable(a) + "' (see " + std::string(see) + ")"};
            p.positional.emplace_back(a);
            continue;
        }
        const std::size_t eq = a.find('=');
        const std::string_view name = a.substr(0, eq);
        const auto spec = std::find_if(specs.begin(), specs.end(), [&](const OptionSpec& s) { return s.name == name; });
        if (spec == specs.end())
            throw UsageError{prefix + "unknown option '" + printable(name) + "'; options: " + option_names(specs)};
        std::string value;
        if (spec->value.empty()) {
            if (eq != std::string_view::npos)
                throw UsageError{prefix + "option " + std::string(name) + " takes no value"};
        } else if (eq != std::string_view::npos) {
            value = std::string(a.substr(eq + 1));
        } else if (i + 1 < args.size()) {
            value = std::string(args[++i]);
        } else {
            throw UsageError{prefix + "option " + std::string(name) + " needs a value: " + std::string(spec->value) +
                             ", " + std::string(spec->help)};
        }
        if (!spec->value.empty() && value.empty())
            throw UsageError{prefix + "option " + std::string(name) + " needs a non-empty " + std::string(spec->value)};
        auto& slot = p.values[std::string(name)];
        if (!slot.empty() && !spec->repeatable)
            throw UsageError{prefix + "option " + std::string(name) + " is given twice; give it once"};
        slot.push_back(std::move(value));
    }
    return p;
}

/// The usage text of a command's options, one per line.
inline std::string options_help(std::span<const OptionSpec> specs) {
    std::string r;
    for (const OptionSpec& s : specs) {
        std::string left = "  " + std::string(s.name) + (s.value.empty() ? "" : " " + std::string(s.value));
        if (left.size() < 28) left.append(28 - left.size(), ' ');
        else left += "  ";
        r += left + std::string(s.help) + "\n";
    }
    return r;
}

}  // namespace skc_tool
