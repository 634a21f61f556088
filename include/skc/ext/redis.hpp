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
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../detail/text.hpp"
#include "../error.hpp"
#include "../policy/remote.hpp"
#include "../policy/storage.hpp"
#include "redis_detail.hpp"
#include "redis_url.hpp"

namespace skc {

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
