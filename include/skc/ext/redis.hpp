// skc/ext/redis.hpp: skc::RedisRemote, the RemoteTier (policy/remote.hpp) on a Redis server, over
// hiredis's synchronous API.
//
// Opt-in: this header includes <hiredis/hiredis.h>, so only programs built with hiredis include it
// (meson: `dependency('hiredis')`; Debian: libhiredis-dev). The rest of skc never includes it. Use it
// as the remote policy of StaticKernelCompiler (with_remote<RedisRemote>) or open it directly.
//
// The URL (RemoteConfig::url, from the option `remote_cache` or $SKC_REMOTE_CACHE):
//   redis://[user:password@]host[:port][/db][?connect_timeout=MS&command_timeout=MS&lease_ttl=MS]
// host is a name, an IPv4 address or an IPv6 address in brackets ([::1]); port 1..65535 (default
// 6379); db 0..1000 (default 0, else SELECT db). `:password@` authenticates as the default user,
// `user:password@` as an ACL user (both percent-decoded: %40 is '@'). The query parameters replace
// the RemoteConfig fields of the same names (milliseconds, 1..86400000). A URL that is not of this
// form is an Error(invalid_option) for the option `remote_cache`. The password is never shown:
// where() is `redis://host:port/db`, and a message that quotes the URL shows `***` for it.
//
// The keys (ns: the cache namespace, key: the entry's hex digest, token: the upload's fencing token):
//   skc:<ns>:record:<key>                   the record (encode_remote_record); permanent
//   skc:<ns>:chunk:<key>:<token>:<index>    chunk `index` of upload `token`: expiring (PX) until
//                                           committed, then permanent until a later upload replaces
//                                           the record or remove() drops it
//   skc:<ns>:lease:<key>                    the lease: its value is the holder's token, PX lease ttl
//   skc:fence                               an INCR counter: each try_lease takes the next token
// try_lease is INCR skc:fence, then SET lease token NX PX ttl. renew_lease, release_lease, commit
// and remove are Lua scripts (EVAL), so each is atomic on the server: renew and release act only
// while the lease holds the caller's token; commit checks the lease, checks and PERSISTs every chunk
// of the upload, UNLINKs the chunks of the record it replaces (named by that record's first line,
// `skc-remote-record 1 <token> <chunks>`) and SETs the record. The scripts build chunk names from a
// prefix argument (they touch keys not passed in KEYS), which a single Redis server allows; Redis
// Cluster is not supported. Tokens increase strictly while the server keeps skc:fence; a server that
// lost it (restarted without persistence, flushed) lost the leases and chunks of the old tokens too.
//
// Connections: construction only parses the URL. The first command connects (connect_timeout),
// then AUTH and SELECT as the URL says. Every command is bounded by command_timeout, and a chunk
// transfer by max(command_timeout, bytes at 8 MB/s) (a download asks for the chunk's size first,
// STRLEN, then GETs it). Every fault (refused, timed out, closed, an error reply, a reply of an
// unexpected type) throws Error(remote_failed, "<where()>: <what>") and drops the connection, so
// the next call connects again. A mutating call on a read-only tier (RemoteConfig::read_only)
// throws Error(invalid_argument); so does a namespace or key that is not 1..255 printable ASCII
// characters without ':'.
//
// Thread-safe: one mutex guards the connection (a lease-renewal thread calls renew_lease while
// another transfers chunks; it waits for the transfer in progress). SIGPIPE from a write to a
// connection the server closed is blocked and discarded on the calling thread, never delivered.
#pragma once

#include <hiredis/hiredis.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include "../detail/text.hpp"
#include "../error.hpp"
#include "../policy/remote.hpp"
#include "../policy/storage.hpp"

namespace skc {

namespace detail {

inline constexpr std::string_view redis_url_form = "redis://[user:password@]host[:port][/db]";
inline constexpr std::uint64_t redis_max_db = 1000;
inline constexpr std::uint64_t redis_max_url_ms = 86'400'000;
/// The slowest transfer a chunk command is given time for: 8 MB/s.
inline constexpr std::uint64_t redis_min_bytes_per_second = 8'000'000;
inline constexpr std::uint64_t redis_max_chunks = remote_max_package_bytes / remote_chunk_bytes;
inline constexpr std::string_view redis_fence_key = "skc:fence";

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

    std::string_view query;
    bool has_query = false;
    if (const std::size_t q = rest.find('?'); q != std::string_view::npos) {
        query = rest.substr(q + 1);
        has_query = true;
        rest = rest.substr(0, q);
    }
    std::string_view path;
    bool has_path = false;
    if (const std::size_t slash = rest.find('/'); slash != std::string_view::npos) {
        path = rest.substr(slash + 1);
        has_path = true;
        rest = rest.substr(0, slash);
    }

    std::string_view port;
    bool has_port = false;
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
            has_port = true;
        }
    } else {
        const std::size_t colon = rest.find(':');
        const std::string_view host = rest.substr(0, colon);
        if (host.empty()) bad_redis_url(url, "there is no host");
        if (!std::all_of(host.begin(), host.end(), redis_host_char))
            bad_redis_url(url, "the host " + quote(host) +
                                   " has a character other than letters, digits, '.', '-' and '_' (an IPv6 "
                                   "address goes in brackets: [::1])");
        u.host = host;
        if (colon != std::string_view::npos) {
            port = rest.substr(colon + 1);
            has_port = true;
        }
    }
    if (has_port) {
        std::uint64_t p = 0;
        if (!parse_u64(port, p) || p < 1 || p > 65535)
            bad_redis_url(url, "the port " + quote(port) + " is not a number from 1 to 65535");
        u.port = static_cast<int>(p);
    }
    if (has_path && !path.empty()) {
        std::uint64_t d = 0;
        if (!parse_u64(path, d) || d > redis_max_db)
            bad_redis_url(url,
                          "the database " + quote(path) + " is not a number from 0 to " + std::to_string(redis_max_db));
        u.db = static_cast<int>(d);
    }
    if (has_query) {
        for (const std::string_view param : split(query, '&')) {
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

/// `s` with Redis's glob characters (`*?[]\`) escaped, for SCAN MATCH.
inline std::string redis_glob_escape(std::string_view s) {
    std::string out;
    for (char c : s) {
        if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
        out += c;
    }
    return out;
}

/// Blocks SIGPIPE on this thread while it lives, and discards one raised meanwhile (hiredis writes
/// with write(2), and a write to a connection the server closed raises it).
class RedisSigpipeGuard {
public:
    RedisSigpipeGuard() noexcept {
        sigset_t pipe;
        sigemptyset(&pipe);
        sigaddset(&pipe, SIGPIPE);
        sigset_t pending;
        sigemptyset(&pending);
        (void)sigpending(&pending);
        was_pending_ = sigismember(&pending, SIGPIPE) == 1;
        (void)pthread_sigmask(SIG_BLOCK, &pipe, &old_);
    }
    RedisSigpipeGuard(const RedisSigpipeGuard&) = delete;
    RedisSigpipeGuard& operator=(const RedisSigpipeGuard&) = delete;
    ~RedisSigpipeGuard() {
        const int saved = errno;
        if (!was_pending_) {
            sigset_t pending;
            sigemptyset(&pending);
            if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
                sigset_t pipe;
                sigemptyset(&pipe);
                sigaddset(&pipe, SIGPIPE);
                const timespec zero{};
                while (sigtimedwait(&pipe, nullptr, &zero) < 0 && errno == EINTR) {}
            }
        }
        (void)pthread_sigmask(SIG_SETMASK, &old_, nullptr);
        errno = saved;
    }

private:
    sigset_t old_{};
    bool was_pending_ = false;
};

inline timeval redis_timeval(std::chrono::milliseconds ms) {
    timeval tv{};
    tv.tv_sec = static_cast<decltype(tv.tv_sec)>(ms.count() / 1000);
    tv.tv_usec = static_cast<decltype(tv.tv_usec)>((ms.count() % 1000) * 1000);
    return tv;
}

inline std::string_view redis_reply_type_name(int type) {
    switch (type) {
    case REDIS_REPLY_STRING: return "a string";
    case REDIS_REPLY_ARRAY: return "an array";
    case REDIS_REPLY_INTEGER: return "an integer";
    case REDIS_REPLY_NIL: return "nil";
    case REDIS_REPLY_STATUS: return "a status";
    case REDIS_REPLY_ERROR: return "an error";
    default: return "an unknown type";
    }
}

/// Reply types a command accepts (an error reply is never accepted).
enum RedisAccept : unsigned {
    redis_string = 1u << REDIS_REPLY_STRING,
    redis_array = 1u << REDIS_REPLY_ARRAY,
    redis_integer = 1u << REDIS_REPLY_INTEGER,
    redis_nil = 1u << REDIS_REPLY_NIL,
    redis_status = 1u << REDIS_REPLY_STATUS,
};

// KEYS[1] the lease; ARGV[1] the token, ARGV[2] the ttl in ms. 1 when renewed.
inline constexpr const char* redis_renew_script = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
)lua";

// KEYS[1] the lease; ARGV[1] the token. 1 when released.
inline constexpr const char* redis_release_script = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
)lua";

// KEYS[1] the lease, KEYS[2] the record; ARGV[1] the token, ARGV[2] the upload's chunk count,
// ARGV[3] the key's chunk prefix (skc:<ns>:chunk:<key>:), ARGV[4] the record, ARGV[5] the most
// chunks a record may name. 1 when committed, 0 when fenced out or a chunk is missing.
inline constexpr const char* redis_commit_script = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local n = tonumber(ARGV[2])
local p = ARGV[3]
for i = 0, n - 1 do
  if redis.call('EXISTS', p .. ARGV[1] .. ':' .. i) == 0 then return 0 end
end
for i = 0, n - 1 do redis.call('PERSIST', p .. ARGV[1] .. ':' .. i) end
local old = redis.call('GET', KEYS[2])
if old then
  local t, c = string.match(old, '^skc%-remote%-record 1 (%d+) (%d+)\n')
  if t and t ~= ARGV[1] and tonumber(c) <= tonumber(ARGV[5]) then
    for i = 0, tonumber(c) - 1 do redis.call('UNLINK', p .. t .. ':' .. i) end
  end
end
redis.call('SET', KEYS[2], ARGV[4])
return 1
)lua";

// KEYS[1] the record; ARGV[1] the key's chunk prefix, ARGV[2] the most chunks a record may name.
// 1 when a record was removed.
inline constexpr const char* redis_remove_script = R"lua(
local old = redis.call('GET', KEYS[1])
if not old then return 0 end
local t, c = string.match(old, '^skc%-remote%-record 1 (%d+) (%d+)\n')
if t and tonumber(c) <= tonumber(ARGV[2]) then
  for i = 0, tonumber(c) - 1 do redis.call('UNLINK', ARGV[1] .. t .. ':' .. i) end
end
redis.call('DEL', KEYS[1])
return 1
)lua";

}  // namespace detail

/// The remote tier on a Redis server (see the top of this header). A RemotePolicy: R::open(config).
class RedisRemote final : public RemoteTier {
public:
    /// The tier for `c`; Error(invalid_option) when its URL is not a redis:// URL. Does not connect.
    static std::unique_ptr<RemoteTier> open(const RemoteConfig& c) { return std::make_unique<RedisRemote>(c); }

    /// Parses `c.url` (its query overrides the timeouts of `c`); does not connect.
    explicit RedisRemote(const RemoteConfig& c) : config_(c), url_(detail::parse_redis_url(c.url)) {
        if (url_.connect_timeout) config_.connect_timeout = *url_.connect_timeout;
        if (url_.command_timeout) config_.command_timeout = *url_.command_timeout;
        if (url_.lease_ttl) config_.lease_ttl = *url_.lease_ttl;
        for (const auto& [name, value] :
             {std::pair{"connect_timeout", config_.connect_timeout},
              std::pair{"command_timeout", config_.command_timeout}, std::pair{"lease_ttl", config_.lease_ttl}}) {
            if (value.count() < 1 || value.count() > static_cast<std::int64_t>(detail::redis_max_url_ms))
                throw Error(Errc::invalid_option,
                            std::string("remote cache: ") + name + " " + std::to_string(value.count()) +
                                " ms is not from 1 ms to 1 day",
                            ErrorContext{{}, {}, "remote_cache"});
        }
        where_ = "redis://" + (url_.ipv6 ? "[" + url_.host + "]" : url_.host) + ":" + std::to_string(url_.port) + "/" +
                 std::to_string(url_.db);
    }
    RedisRemote(const RedisRemote&) = delete;
    RedisRemote& operator=(const RedisRemote&) = delete;
    ~RedisRemote() override = default;

    [[nodiscard]] std::string where() const override { return where_; }
    [[nodiscard]] bool read_only() const override { return config_.read_only; }

    /// The configuration in use: the one given, with the URL's query applied. (A cache that renews
    /// leases takes lease_ttl from here.)
    [[nodiscard]] std::chrono::milliseconds lease_ttl() const override { return config_.lease_ttl; }
    [[nodiscard]] const RemoteConfig& config() const noexcept { return config_; }
    [[nodiscard]] const std::string& host() const noexcept { return url_.host; }
    [[nodiscard]] int port() const noexcept { return url_.port; }
    [[nodiscard]] int db() const noexcept { return url_.db; }
    [[nodiscard]] const std::string& user() const noexcept { return url_.user; }
    [[nodiscard]] bool has_password() const noexcept { return !url_.password.empty(); }
    /// Whether a connection is open now (none before the first command, none after a fault).
    [[nodiscard]] bool connected() const {
        std::lock_guard lock(mutex_);
        return ctx_ != nullptr;
    }

    std::optional<std::string> get_record(std::string_view ns, std::string_view key) override {
        const std::string k = record_key(ns, key);
        Reply r = command({"GET", k}, detail::redis_string | detail::redis_nil, "GET " + k, config_.command_timeout);
        if (r->type == REDIS_REPLY_NIL) return std::nullopt;
        return std::string(r->str, r->len);
    }

    bool get_chunk(std::string_view ns, std::string_view key, std::uint64_t token, std::uint64_t index,
                   const ChunkFn& fn) override {
        const std::string k = chunk_prefix(ns, key) + std::to_string(token) + ":" + std::to_string(index);
        Reply r;
        {
            // STRLEN first, so that the GET is given the time its size needs and a server that
            // stopped answering is noticed within command_timeout.
            std::lock_guard lock(mutex_);
            if (!ctx_) connect_locked();
            const Reply len = run_locked({"STRLEN", k}, detail::redis_integer, "STRLEN " + k, {});
            r = run_locked({"GET", k}, detail::redis_string | detail::redis_nil, "GET " + k,
                           transfer_timeout(len->integer > 0 ? static_cast<std::uint64_t>(len->integer) : 0));
        }
        if (r->type == REDIS_REPLY_NIL) return false;
        fn(std::string_view(r->str, r->len));  // outside the lock: a slow sink does not hold up a renewal
        return true;
    }

    std::optional<std::uint64_t> try_lease(std::string_view ns, std::string_view key,
                                           std::chrono::milliseconds ttl) override {
        require_writable("try_lease");
        const std::string k = lease_key(ns, key);
        const std::string px = ttl_text(ttl);
        Reply fence = command({"INCR", detail::redis_fence_key}, detail::redis_integer,
                              "INCR " + std::string(detail::redis_fence_key), config_.command_timeout);
        if (fence->integer < 1)
            fail("INCR " + std::string(detail::redis_fence_key) + ": the fencing counter is " +
                 std::to_string(fence->integer) + ", not positive");
        const auto token = static_cast<std::uint64_t>(fence->integer);
        const std::string t = std::to_string(token);
        Reply r = command({"SET", k, t, "NX", "PX", px}, detail::redis_status | detail::redis_nil, "SET " + k + " NX",
                          config_.command_timeout);
        if (r->type == REDIS_REPLY_NIL) return std::nullopt;
        expect_ok(r, "SET " + k + " NX");
        return token;
    }

    bool renew_lease(const RemoteLease& lease, std::chrono::milliseconds ttl) override {
        require_writable("renew_lease");
        const std::string k = lease_key(lease.ns, lease.key);
        Reply r = command({"EVAL", detail::redis_renew_script, "1", k, std::to_string(lease.token), ttl_text(ttl)},
                          detail::redis_integer, "EVAL renew " + k, config_.command_timeout);
        return r->integer == 1;
    }

    void release_lease(const RemoteLease& lease) override {
        require_writable("release_lease");
        const std::string k = lease_key(lease.ns, lease.key);
        (void)command({"EVAL", detail::redis_release_script, "1", k, std::to_string(lease.token)},
                      detail::redis_integer, "EVAL release " + k, config_.command_timeout);
    }

    bool lease_held(std::string_view ns, std::string_view key) override {
        const std::string k = lease_key(ns, key);
        Reply r = command({"EXISTS", k}, detail::redis_integer, "EXISTS " + k, config_.command_timeout);
        return r->integer > 0;
    }

    void put_chunk(const RemoteLease& lease, std::uint64_t index, std::string_view bytes,
                   std::chrono::milliseconds ttl) override {
        require_writable("put_chunk");
        const std::string k =
            chunk_prefix(lease.ns, lease.key) + std::to_string(lease.token) + ":" + std::to_string(index);
        Reply r = command({"SET", k, bytes, "PX", ttl_text(ttl)}, detail::redis_status, "SET " + k,
                          transfer_timeout(bytes.size()));
        expect_ok(r, "SET " + k);
    }

    bool commit(const RemoteLease& lease, std::uint64_t chunks, std::string_view record) override {
        require_writable("commit");
        if (chunks > detail::redis_max_chunks)
            throw Error(Errc::invalid_argument, where_ + ": commit of " + std::to_string(chunks) + " chunks: at most " +
                                                    std::to_string(detail::redis_max_chunks));
        const std::string lk = lease_key(lease.ns, lease.key);
        const std::string rk = record_key(lease.ns, lease.key);
        Reply r = command(
            {"EVAL", detail::redis_commit_script, "2", lk, rk, std::to_string(lease.token), std::to_string(chunks),
             chunk_prefix(lease.ns, lease.key), record, std::to_string(detail::redis_max_chunks)},
            detail::redis_integer, "EVAL commit " + rk, transfer_timeout(record.size()));
        return r->integer == 1;
    }

    std::vector<std::string> namespaces() override {
        std::set<std::string> out;
        for (const std::string& k : scan("skc:*:record:*")) {
            const std::size_t at = k.rfind(":record:");
            if (!k.starts_with("skc:") || at == std::string::npos || at <= 4) continue;
            out.insert(k.substr(4, at - 4));
        }
        return {out.begin(), out.end()};
    }

    std::vector<std::string> keys(std::string_view ns) override {
        check_name("namespace", ns);
        const std::string prefix = "skc:" + std::string(ns) + ":record:";
        std::set<std::string> out;
        for (const std::string& k : scan("skc:" + detail::redis_glob_escape(ns) + ":record:*")) {
            if (!k.starts_with(prefix)) continue;
            std::string key = k.substr(prefix.size());
            if (!key.empty() && key.find(':') == std::string::npos) out.insert(std::move(key));
        }
        return {out.begin(), out.end()};
    }

    void remove(std::string_view ns, std::string_view key) override {
        require_writable("remove");
        const std::string rk = record_key(ns, key);
        (void)command({"EVAL", detail::redis_remove_script, "1", rk, chunk_prefix(ns, key),
                       std::to_string(detail::redis_max_chunks)},
                      detail::redis_integer, "EVAL remove " + rk, config_.command_timeout);
    }

private:
    struct FreeReply {
        void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
    };
    struct FreeContext {
        void operator()(redisContext* c) const noexcept { redisFree(c); }
    };
    using Reply = std::unique_ptr<redisReply, FreeReply>;

    static void check_name(std::string_view what, std::string_view s) {
        const bool ok = !s.empty() && s.size() <= 255 &&
                        std::all_of(s.begin(), s.end(), [](char c) { return c > 0x20 && c < 0x7f && c != ':'; });
        if (!ok)
            throw Error(Errc::invalid_argument, "remote cache: the " + std::string(what) + " " + detail::quote(s, 64) +
                                                    " is not 1 to 255 printable characters without ':'");
    }
    static std::string record_key(std::string_view ns, std::string_view key) {
        check_name("namespace", ns);
        check_name("key", key);
        return "skc:" + std::string(ns) + ":record:" + std::string(key);
    }
    static std::string lease_key(std::string_view ns, std::string_view key) {
        check_name("namespace", ns);
        check_name("key", key);
        return "skc:" + std::string(ns) + ":lease:" + std::string(key);
    }
    // The chunks of `key` are this followed by `<token>:<index>`.
    static std::string chunk_prefix(std::string_view ns, std::string_view key) {
        check_name("namespace", ns);
        check_name("key", key);
        return "skc:" + std::string(ns) + ":chunk:" + std::string(key) + ":";
    }
    static std::string ttl_text(std::chrono::milliseconds ttl) {
        if (ttl.count() < 1)
            throw Error(Errc::invalid_argument,
                        "remote cache: a time to live of " + std::to_string(ttl.count()) + " ms (at least 1 ms)");
        return std::to_string(ttl.count());
    }
    [[nodiscard]] std::chrono::milliseconds transfer_timeout(std::uint64_t bytes) const {
        const auto need =
            std::chrono::milliseconds(static_cast<std::int64_t>(bytes * 1000 / detail::redis_min_bytes_per_second));
        return std::max(config_.command_timeout, need);
    }
    void require_writable(std::string_view op) const {
        if (config_.read_only)
            throw Error(Errc::invalid_argument,
                        where_ + ": " + std::string(op) + " refused: the remote cache is read-only");
    }

    /// Drops the connection and throws Error(remote_failed, "<where>: <what>").
    [[noreturn]] void fail(const std::string& what) {
        {
            std::lock_guard lock(mutex_);
            drop_locked();
        }
        throw Error(Errc::remote_failed, where_ + ": " + what);
    }
    [[noreturn]] void fail_locked(const std::string& what) {
        drop_locked();
        throw Error(Errc::remote_failed, where_ + ": " + what);
    }
    void drop_locked() noexcept {
        ctx_.reset();
        timeout_ = {};
    }

    void expect_ok(const Reply& r, const std::string& what) {
        if (std::string_view(r->str, r->len) != "OK")
            fail(what + ": the reply is " + detail::quote(std::string_view(r->str, r->len), 100) + ", not OK");
    }

    // What went wrong on the connection, after a call of hiredis that failed.
    [[nodiscard]] std::string io_error_locked(std::chrono::milliseconds timeout) const {
        if (ctx_->err == REDIS_ERR_EOF) return "the server closed the connection";
        const std::string why = ctx_->errstr;
        if (ctx_->err == REDIS_ERR_IO && (why == std::strerror(EAGAIN) || why == std::strerror(EWOULDBLOCK)))
            return "no answer within " + detail::seconds_text(timeout) + " (timed out)";
        return why.empty() ? "connection error " + std::to_string(ctx_->err) : why;
    }

    void set_timeout_locked(std::chrono::milliseconds t) {
        if (timeout_ == t) return;
        if (redisSetTimeout(ctx_.get(), detail::redis_timeval(t)) != REDIS_OK)
            fail_locked("cannot set the timeout: " + std::string(ctx_->errstr));
        timeout_ = t;
    }

    void connect_locked() {
        redisContext* c =
            redisConnectWithTimeout(url_.host.c_str(), url_.port, detail::redis_timeval(config_.connect_timeout));
        if (c == nullptr) fail_locked("cannot connect: out of memory");
        if (c->err != 0) {
            std::string why = c->errstr;
            redisFree(c);
            if (why == std::strerror(ETIMEDOUT) || why == std::strerror(EINPROGRESS))
                why = "no connection within " + detail::seconds_text(config_.connect_timeout) + " (timed out)";
            fail_locked("cannot connect: " + why);
        }
        ctx_.reset(c);
        timeout_ = {};
        if (!url_.password.empty()) {
            if (url_.user.empty()) (void)run_locked({"AUTH", url_.password}, detail::redis_status, "AUTH", {});
            else (void)run_locked({"AUTH", url_.user, url_.password}, detail::redis_status, "AUTH " + url_.user, {});
        }
        if (url_.db != 0)
            (void)run_locked({"SELECT", std::to_string(url_.db)}, detail::redis_status,
                             "SELECT " + std::to_string(url_.db), {});
    }

    // One command on the connection (connecting first when there is none). `timeout` zero: the
    // command timeout.
    Reply run_locked(std::initializer_list<std::string_view> args, unsigned accept, const std::string& what,
                     std::chrono::milliseconds timeout) {
        if (timeout.count() <= 0) timeout = config_.command_timeout;
        set_timeout_locked(timeout);
        std::vector<const char*> argv;
        std::vector<std::size_t> lens;
        argv.reserve(args.size());
        lens.reserve(args.size());
        for (std::string_view a : args) {
            argv.push_back(a.data());
            lens.push_back(a.size());
        }
        void* raw = nullptr;
        {
            const detail::RedisSigpipeGuard guard;
            raw = redisCommandArgv(ctx_.get(), static_cast<int>(argv.size()), argv.data(), lens.data());
        }
        if (raw == nullptr) fail_locked(what + ": " + io_error_locked(timeout));
        Reply r(static_cast<redisReply*>(raw));
        if (r->type == REDIS_REPLY_ERROR)
            fail_locked(what + ": the server answered " + detail::quote(std::string_view(r->str, r->len), 200));
        if (r->type < 0 || r->type >= 32 || (accept & (1u << r->type)) == 0)
            fail_locked(what + ": unexpected reply: " + std::string(detail::redis_reply_type_name(r->type)));
        return r;
    }

    Reply command(std::initializer_list<std::string_view> args, unsigned accept, const std::string& what,
                  std::chrono::milliseconds timeout) {
        std::lock_guard lock(mutex_);
        if (!ctx_) connect_locked();
        return run_locked(args, accept, what, timeout);
    }

    // Every key matching `pattern` (SCAN; a key may come twice).
    std::vector<std::string> scan(const std::string& pattern) {
        std::vector<std::string> out;
        std::string cursor = "0";
        do {
            Reply r = command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}, detail::redis_array,
                              "SCAN MATCH " + pattern, config_.command_timeout);
            if (r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
                r->element[1]->type != REDIS_REPLY_ARRAY)
                fail("SCAN MATCH " + pattern + ": unexpected reply: not [cursor, keys]");
            cursor.assign(r->element[0]->str, r->element[0]->len);
            const redisReply* keys = r->element[1];
            for (std::size_t i = 0; i < keys->elements; ++i) {
                const redisReply* k = keys->element[i];
                if (k->type != REDIS_REPLY_STRING)
                    fail("SCAN MATCH " + pattern + ": unexpected reply: a key not a string");
                out.emplace_back(k->str, k->len);
            }
        } while (cursor != "0");
        return out;
    }

    RemoteConfig config_;
    detail::RedisUrl url_;
    std::string where_;
    mutable std::mutex mutex_;
    std::unique_ptr<redisContext, FreeContext> ctx_;  // guarded by mutex_; null: not connected
    std::chrono::milliseconds timeout_{};             // the connection's timeout now; zero: not set
};

}  // namespace skc
