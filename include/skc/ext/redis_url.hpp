// skc/ext/redis_url.hpp: the `redis://` URL of RedisRemote (ext/redis.hpp describes its form): its
// parsing, and its redaction for messages (the password shown as `***`). Needs no hiredis.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "../detail/text.hpp"
#include "../error.hpp"

namespace skc::detail {

inline constexpr std::string_view redis_url_form = "redis://[user:password@]host[:port][/db]";
inline constexpr std::uint64_t redis_max_db = 1000;
inline constexpr std::uint64_t redis_max_url_ms = 86'400'000;

/// A parsed `redis://` URL.
struct RedisUrl {
    std::string host;  // a name, an IPv4 address, or an IPv6 address without its brackets
    bool ipv6 = false;
    int port = 6379;
    int db = 0;
    std::string user;      // empty: the default user
    std::string password;  // empty: no AUTH
    std::optional<std::chrono::milliseconds> connect_timeout;
    std::optional<std::chrono::milliseconds> command_timeout;
    std::optional<std::chrono::milliseconds> lease_ttl;
};

/// `url` with its password (everything between the last '@' and the ':' after the user name, or the
/// whole user part when it has no ':') shown as `***`.
inline std::string redact_redis_url(std::string_view url) {
    std::size_t start = 0;
    if (const std::size_t s = url.find("://"); s != std::string_view::npos && s > 0) {
        const std::string_view scheme = url.substr(0, s);
        if (std::all_of(scheme.begin(), scheme.end(), [](char c) {
                return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' ||
                       c == '-' || c == '.';
            }))
            start = s + 3;
    }
    const std::size_t at = url.rfind('@');
    if (at == std::string_view::npos || at < start) return std::string(url);
    const std::string_view userinfo = url.substr(start, at - start);
    const std::size_t colon = userinfo.find(':');
    std::string out(url.substr(0, start));
    if (colon != std::string_view::npos) out.append(userinfo.substr(0, colon)).append(":***");
    else out += "***";
    out.append(url.substr(at));
    return out;
}

[[noreturn]] inline void bad_redis_url(std::string_view url, const std::string& why) {
    throw Error(
        Errc::invalid_option,
        "remote cache URL " + quote(redact_redis_url(url)) + ": " + why + "; expected " + std::string(redis_url_form),
        ErrorContext{{}, {}, "remote_cache"});
}

inline bool percent_decode(std::string_view s, std::string& out) {
    out.clear();
    const auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '%') {
            out += s[i];
            continue;
        }
        if (i + 2 >= s.size()) return false;
        const int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
        if (hi < 0 || lo < 0) return false;
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
    }
    return true;
}

inline bool redis_host_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
           c == '_';
}

/// What follows position `at` of `rest` (none when `at` is npos); `rest` keeps what precedes it.
inline std::optional<std::string_view> cut_at(std::string_view& rest, std::size_t at) {
    if (at == std::string_view::npos) return std::nullopt;
    const std::string_view after = rest.substr(at + 1);
    rest = rest.substr(0, at);
    return after;
}

/// The parts of `url`; Error(invalid_option) for the option `remote_cache` naming what is wrong.
inline RedisUrl parse_redis_url(std::string_view url) {
    if (url.empty()) bad_redis_url(url, "it is empty");
    if (std::any_of(url.begin(), url.end(), [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; }))
        bad_redis_url(url, "it has a space or a control character (write them as %XX in a password)");
    constexpr std::string_view scheme = "redis://";
    if (!url.starts_with(scheme)) {
        if (url.starts_with("rediss://")) bad_redis_url(url, "TLS (rediss://) is not supported");
        bad_redis_url(url, "the scheme is not redis://");
    }
    RedisUrl u;
    std::string_view rest = url.substr(scheme.size());

    // The user part ends at the last '@', so that a password may hold '@', '/' or '?' unencoded.
    if (const std::size_t at = rest.rfind('@'); at != std::string_view::npos) {
        const std::string_view userinfo = rest.substr(0, at);
        rest.remove_prefix(at + 1);
        const std::size_t colon = userinfo.find(':');
        if (colon == std::string_view::npos)
            bad_redis_url(url, "a user name needs a password (user:password@, or :password@ for the default user)");
        if (!percent_decode(userinfo.substr(0, colon), u.user) ||
            !percent_decode(userinfo.substr(colon + 1), u.password))
            bad_redis_url(url, "the user name or password has a % that is not followed by two hex digits");
        if (u.password.empty()) bad_redis_url(url, "the password is empty");
    }

    const std::optional<std::string_view> query = cut_at(rest, rest.find('?'));
    const std::optional<std::string_view> path = cut_at(rest, rest.find('/'));
    std::optional<std::string_view> port;
    if (rest.starts_with('[')) {
        const std::size_t close = rest.find(']');
        if (close == std::string_view::npos) bad_redis_url(url, "the IPv6 address has no closing ']'");
        const std::string_view host = rest.substr(1, close - 1);
        if (host.empty()) bad_redis_url(url, "there is no host");
        if (host.find(':') == std::string_view::npos || !std::all_of(host.begin(), host.end(), [](char c) {
                return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' ||
                       c == '.';
            }))
            bad_redis_url(url, "the IPv6 address " + quote(host) + " is not hex digits, ':' and '.'");
        u.host = host;
        u.ipv6 = true;
        const std::string_view after = rest.substr(close + 1);
        if (!after.empty()) {
            if (after[0] != ':') bad_redis_url(url, "the IPv6 address is followed by " + quote(after) + ", not :port");
            port = after.substr(1);
        }
    } else {
        port = cut_at(rest, rest.find(':'));
        const std::string_view host = rest;
        if (host.empty()) bad_redis_url(url, "there is no host");
        if (!std::all_of(host.begin(), host.end(), redis_host_char))
            bad_redis_url(url, "the host " + quote(host) +
                                   " has a character other than letters, digits, '.', '-' and '_' (an IPv6 "
                                   "address goes in brackets: [::1])");
        u.host = host;
    }
    if (port) {
        std::uint64_t p = 0;
        if (!parse_u64(*port, p) || p < 1 || p > 65535)
            bad_redis_url(url, "the port " + quote(*port) + " is not a number from 1 to 65535");
        u.port = static_cast<int>(p);
    }
    if (path && !path->empty()) {
        std::uint64_t d = 0;
        if (!parse_u64(*path, d) || d > redis_max_db)
            bad_redis_url(
                url, "the database " + quote(*path) + " is not a number from 0 to " + std::to_string(redis_max_db));
        u.db = static_cast<int>(d);
    }
    if (query) {
        for (const std::string_view param : split(*query, '&')) {
            const std::size_t eq = param.find('=');
            if (eq == std::string_view::npos)
                bad_redis_url(url, "the parameter " + quote(param) + " is not name=value");
            const std::string_view name = param.substr(0, eq), value = param.substr(eq + 1);
            std::optional<std::chrono::milliseconds>* field = nullptr;
            if (name == "connect_timeout") field = &u.connect_timeout;
            else if (name == "command_timeout") field = &u.command_timeout;
            else if (name == "lease_ttl") field = &u.lease_ttl;
            else
                bad_redis_url(url, "unknown parameter " + quote(name) +
                                       " (accepted: connect_timeout, command_timeout, lease_ttl)");
            if (field->has_value()) bad_redis_url(url, "the parameter " + quote(name) + " is given twice");
            std::uint64_t ms = 0;
            if (!parse_u64(value, ms) || ms < 1 || ms > redis_max_url_ms)
                bad_redis_url(url, std::string(name) + "=" + quote(value) +
                                       " is not a number of milliseconds from 1 to " +
                                       std::to_string(redis_max_url_ms));
            *field = std::chrono::milliseconds(static_cast<std::int64_t>(ms));
        }
    }
    return u;
}

}  // namespace skc::detail
