// skc::RedisRemote (include/skc/ext/redis.hpp) against real redis-server processes: its URLs, the
// lease and upload protocol of RemoteTier, the key layout, authentication and databases, and faults
// (nothing listening, stopped, killed and restarted, slow, paused, error replies).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <skc/ext/redis.hpp>

#include "redis_server.hpp"

namespace redis_redis_remote_test {

using namespace std::chrono_literals;
using skc::Errc;
using skc::RedisRemote;
using skc::RemoteConfig;
using skc::RemoteLease;
using skc_test::RedisServer;

static_assert(skc::RemotePolicy<RedisRemote>);

namespace {

const std::string ns = "CANN-8.0.RC1_Ascend910B";
const std::string key1 = "0123456789abcdef0123456789abcdef";
const std::string key2 = "fedcba9876543210fedcba9876543210";
const std::string url_form = "; expected redis://[user:password@]host[:port][/db]";

RemoteConfig config(std::string url, std::chrono::milliseconds connect = 1000ms,
                    std::chrono::milliseconds command = 2000ms) {
    RemoteConfig c;
    c.url = std::move(url);
    c.connect_timeout = connect;
    c.command_timeout = command;
    return c;
}

/// `n` pseudo-random bytes, every 7th of them NUL, so that binary safety is tested throughout.
std::string bytes(std::size_t n, std::uint64_t seed) {
    std::string out(n, '\0');
    std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (std::size_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[i] = i % 7 == 0 ? '\0' : static_cast<char>(x >> 56);
    }
    return out;
}

/// A record for `chunks` chunks of upload `token`, as the tier sees records: its first line names
/// the upload, the rest is opaque to it.
std::string raw_record(std::uint64_t token, std::uint64_t chunks, std::string_view body = "entry\n") {
    return "skc-remote-record 1 " + std::to_string(token) + " " + std::to_string(chunks) + "\n" + std::string(body);
}

std::string chunk_key(std::string_view space, std::string_view key, std::uint64_t token, std::uint64_t index) {
    return "skc:" + std::string(space) + ":chunk:" + std::string(key) + ":" + std::to_string(token) + ":" +
           std::to_string(index);
}

/// Chunk `index` of upload `token`, nullopt when get_chunk says it is absent.
std::optional<std::string> chunk(RedisRemote& r, std::string_view space, std::string_view key, std::uint64_t token,
                                 std::uint64_t index) {
    std::string got;
    int calls = 0;
    const bool there = r.get_chunk(space, key, token, index, [&](std::string_view b) {
        got.append(b);
        ++calls;
    });
    if (!there) {
        CHECK(calls == 0);
        return std::nullopt;
    }
    CHECK(calls == 1);
    return got;
}

/// Takes the lease of `key`, stores `pieces` as its chunks and commits `record`: the lease.
RemoteLease upload(RedisRemote& r, std::string_view space, std::string_view key, const std::vector<std::string>& pieces,
                   std::optional<std::string> record = std::nullopt) {
    const std::optional<std::uint64_t> token = r.try_lease(space, key, 30s);
    REQUIRE(token);
    const RemoteLease lease{std::string(space), std::string(key), *token};
    for (std::size_t i = 0; i < pieces.size(); ++i) r.put_chunk(lease, i, pieces[i], 1h);
    REQUIRE(r.commit(lease, pieces.size(), record ? *record : raw_record(*token, pieces.size())));
    r.release_lease(lease);
    return lease;
}

/// The skc::Error `f` throws (the case fails when it throws none).
skc::Error error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const skc::Error& e) {
        return e;
    }
    FAIL("no skc::Error was thrown");
    throw std::logic_error("unreachable");
}

std::chrono::milliseconds time_of(const std::function<void()>& f) {
    const auto start = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

}  // namespace

TEST_CASE("URL: every valid form, and nothing connects before the first command") {
    struct Valid {
        std::string url;
        std::string host;
        int port;
        int db;
        std::string user;
        std::string password;
        std::string where;
    };
    const std::vector<Valid> valid = {
        {"redis://cache", "cache", 6379, 0, "", "", "redis://cache:6379/0"},
        {"redis://cache:7000", "cache", 7000, 0, "", "", "redis://cache:7000/0"},
        {"redis://cache:7000/3", "cache", 7000, 3, "", "", "redis://cache:7000/3"},
        {"redis://cache/", "cache", 6379, 0, "", "", "redis://cache:6379/0"},
        {"redis://cache/1000", "cache", 6379, 1000, "", "", "redis://cache:6379/1000"},
        {"redis://10.1.2.3:1", "10.1.2.3", 1, 0, "", "", "redis://10.1.2.3:1/0"},
        {"redis://cache-01.example_net.com:65535", "cache-01.example_net.com", 65535, 0, "", "",
         "redis://cache-01.example_net.com:65535/0"},
        {"redis://:s3cret@cache", "cache", 6379, 0, "", "s3cret", "redis://cache:6379/0"},
        {"redis://alice:s3cret@cache:6380/2", "cache", 6380, 2, "alice", "s3cret", "redis://cache:6380/2"},
        {"redis://alice:p%40ss%2f%3A@cache", "cache", 6379, 0, "alice", "p@ss/:", "redis://cache:6379/0"},
        {"redis://:pa@ss/w?rd:x@cache:1/2", "cache", 1, 2, "", "pa@ss/w?rd:x", "redis://cache:1/2"},
        {"redis://[::1]", "::1", 6379, 0, "", "", "redis://[::1]:6379/0"},
        {"redis://[fe80::1:2]:7000/5", "fe80::1:2", 7000, 5, "", "", "redis://[fe80::1:2]:7000/5"},
        {"redis://:pw@[::ffff:10.0.0.1]:7", "::ffff:10.0.0.1", 7, 0, "", "pw", "redis://[::ffff:10.0.0.1]:7/0"},
    };
    for (const Valid& v : valid) {
        CAPTURE(v.url);
        const skc::detail::RedisUrl u = skc::detail::parse_redis_url(v.url);
        CHECK(u.host == v.host);
        CHECK(u.port == v.port);
        CHECK(u.db == v.db);
        CHECK(u.user == v.user);
        CHECK(u.password == v.password);
        RedisRemote r(config(v.url));
        CHECK(r.where() == v.where);
        CHECK(r.host() == v.host);
        CHECK(r.port() == v.port);
        CHECK(r.db() == v.db);
        CHECK(r.user() == v.user);
        CHECK(r.has_password() == !v.password.empty());
        CHECK_FALSE(r.connected());
        if (!v.password.empty()) CHECK_FALSE(contains(r.where(), v.password));
    }

    SUBCASE("the query replaces the configuration's timeouts") {
        RemoteConfig c = config("redis://cache:1/2?connect_timeout=50&command_timeout=70&lease_ttl=9000", 5s, 6s);
        c.lease_ttl = 7s;
        RedisRemote r(c);
        CHECK(r.config().connect_timeout == 50ms);
        CHECK(r.config().command_timeout == 70ms);
        CHECK(r.config().lease_ttl == 9000ms);
        CHECK(r.where() == "redis://cache:1/2");
        RedisRemote partial(config("redis://cache?lease_ttl=86400000", 5s, 6s));
        CHECK(partial.config().connect_timeout == 5s);
        CHECK(partial.config().command_timeout == 6s);
        CHECK(partial.config().lease_ttl == 86400000ms);
    }
    SUBCASE("open() gives the tier; read_only is kept") {
        RemoteConfig c = config("redis://127.0.0.1:1");
        c.read_only = true;
        const std::unique_ptr<skc::RemoteTier> t = RedisRemote::open(c);
        REQUIRE(t != nullptr);
        CHECK(t->where() == "redis://127.0.0.1:1/0");
        CHECK(t->read_only());
    }
}

TEST_CASE("URL: each bad form is refused with what is wrong, and never shows the password") {
    struct Bad {
        std::string url;
        std::string message;  // after `remote cache URL `
    };
    const std::string host_chars =
        "has a character other than letters, digits, '.', '-' and '_' (an IPv6 address goes in brackets: [::1])";
    const std::string ms_range = " is not a number of milliseconds from 1 to 86400000";
    const std::vector<Bad> bad = {
        {"", R"("": it is empty)"},
        {"localhost:6379", R"("localhost:6379": the scheme is not redis://)"},
        {"http://cache", R"("http://cache": the scheme is not redis://)"},
        {"REDIS://cache", R"("REDIS://cache": the scheme is not redis://)"},
        {"rediss://cache", R"("rediss://cache": TLS (rediss://) is not supported)"},
        {"redis://", R"("redis://": there is no host)"},
        {"redis://:6379", R"("redis://:6379": there is no host)"},
        {"redis:///0", R"("redis:///0": there is no host)"},
        {"redis://::1", R"("redis://::1": there is no host)"},
        {"redis://cache:0", R"("redis://cache:0": the port "0" is not a number from 1 to 65535)"},
        {"redis://cache:65536", R"("redis://cache:65536": the port "65536" is not a number from 1 to 65535)"},
        {"redis://cache:", R"("redis://cache:": the port "" is not a number from 1 to 65535)"},
        {"redis://cache:x1", R"("redis://cache:x1": the port "x1" is not a number from 1 to 65535)"},
        {"redis://cache:-1", R"("redis://cache:-1": the port "-1" is not a number from 1 to 65535)"},
        {"redis://cache:1:2", R"("redis://cache:1:2": the port "1:2" is not a number from 1 to 65535)"},
        {"redis://cache/1001", R"("redis://cache/1001": the database "1001" is not a number from 0 to 1000)"},
        {"redis://cache/db", R"("redis://cache/db": the database "db" is not a number from 0 to 1000)"},
        {"redis://cache/1/2", R"("redis://cache/1/2": the database "1/2" is not a number from 0 to 1000)"},
        {"redis://cache/-0", R"("redis://cache/-0": the database "-0" is not a number from 0 to 1000)"},
        {"redis://ca che",
         R"("redis://ca che": it has a space or a control character (write them as %XX in a password))"},
        {"redis://cache\n",
         R"("redis://cache\x0a": it has a space or a control character (write them as %XX in a password))"},
        {"redis://ca$he", R"("redis://ca$he": the host "ca$he" )" + host_chars},
        {"redis://[::1", R"("redis://[::1": the IPv6 address has no closing ']')"},
        {"redis://[]:1", R"("redis://[]:1": there is no host)"},
        {"redis://[cache]", R"("redis://[cache]": the IPv6 address "cache" is not hex digits, ':' and '.')"},
        {"redis://[::1]x", R"("redis://[::1]x": the IPv6 address is followed by "x", not :port)"},
        {"redis://[::1]:0", R"("redis://[::1]:0": the port "0" is not a number from 1 to 65535)"},
        {"redis://hunter2@cache",
         R"("redis://***@cache": a user name needs a password (user:password@, or :password@ for the default user))"},
        {"redis://alice:@cache", R"("redis://alice:***@cache": the password is empty)"},
        {"redis://:hunter2%4@cache",
         R"("redis://:***@cache": the user name or password has a % that is not followed by two hex digits)"},
        {"redis://:hunter2%zz@cache",
         R"("redis://:***@cache": the user name or password has a % that is not followed by two hex digits)"},
        {"redis://cache?foo=1",
         R"("redis://cache?foo=1": unknown parameter "foo" (accepted: connect_timeout, command_timeout, lease_ttl))"},
        {"redis://cache?connect_timeout",
         R"("redis://cache?connect_timeout": the parameter "connect_timeout" is not name=value)"},
        {"redis://cache?", R"("redis://cache?": the parameter "" is not name=value)"},
        {"redis://cache?lease_ttl=1&", R"("redis://cache?lease_ttl=1&": the parameter "" is not name=value)"},
        {"redis://cache?connect_timeout=0", R"("redis://cache?connect_timeout=0": connect_timeout="0")" + ms_range},
        {"redis://cache?command_timeout=1s", R"("redis://cache?command_timeout=1s": command_timeout="1s")" + ms_range},
        {"redis://cache?lease_ttl=86400001", R"("redis://cache?lease_ttl=86400001": lease_ttl="86400001")" + ms_range},
        {"redis://cache?lease_ttl=1&lease_ttl=2",
         R"("redis://cache?lease_ttl=1&lease_ttl=2": the parameter "lease_ttl" is given twice)"},
        {"redis://:hunter2@cache:99999",
         R"("redis://:***@cache:99999": the port "99999" is not a number from 1 to 65535)"},
        {"redis://alice:hunter2@cache/99999",
         R"("redis://alice:***@cache/99999": the database "99999" is not a number from 0 to 1000)"},
        {"redis://:hunter2@", R"("redis://:***@": there is no host)"},
        {"redis://alice:hun@ter2@ca$he", R"("redis://alice:***@ca$he": the host "ca$he" )" + host_chars},
    };
    for (const Bad& b : bad) {
        CAPTURE(b.url);
        const skc::Error e = error_of([&] { RedisRemote r(config(b.url)); });
        CHECK(e.code() == Errc::invalid_option);
        CHECK(e.option() == "remote_cache");
        CHECK(e.message() == "remote cache URL " + b.message + url_form);
        CHECK(std::string(e.what()) == "option 'remote_cache': " + e.message());
        CHECK_FALSE(contains(e.what(), "hunter2"));
        CHECK_FALSE(contains(e.what(), "ter2"));
        // open(), the policy's entry, refuses it the same way.
        CHECK(error_of([&] { (void)RedisRemote::open(config(b.url)); }).message() == e.message());
    }

    SUBCASE("a timeout of the configuration that is not positive") {
        const skc::Error e = error_of([] { RedisRemote r(config("redis://cache", 0ms)); });
        CHECK(e.code() == Errc::invalid_option);
        CHECK(e.message() == "remote cache: connect_timeout 0 ms is not from 1 ms to 1 day");
    }
}

TEST_CASE("a package of several small chunks round-trips: lease, put_chunk, commit, get_record, get_chunk") {
    RedisServer server;
    RedisRemote r(config(server.url()));
    CHECK_FALSE(r.connected());
    CHECK(r.get_record(ns, key1) == std::nullopt);
    CHECK(r.connected());
    CHECK_FALSE(r.lease_held(ns, key1));

    const std::optional<std::uint64_t> token = r.try_lease(ns, key1, 30s);
    REQUIRE(token);
    CHECK(r.lease_held(ns, key1));
    CHECK(server.command({"GET", "skc:" + ns + ":lease:" + key1}) == std::to_string(*token));
    const RemoteLease lease{ns, key1, *token};
    const std::vector<std::string> pieces = {bytes(1000, 1), std::string("\0\0\0", 3), bytes(1, 3)};
    for (std::size_t i = 0; i < pieces.size(); ++i) r.put_chunk(lease, i, pieces[i], 1h);
    // Uploaded, not committed: the chunks expire, and there is no record yet.
    const std::int64_t ttl = std::stoll(server.command({"PTTL", chunk_key(ns, key1, *token, 0)}));
    CHECK(ttl > 3'000'000);
    CHECK(ttl <= 3'600'000);
    CHECK(r.get_record(ns, key1) == std::nullopt);

    const std::string record = raw_record(*token, 3, std::string("body with a NUL \0 and more\n", 27));
    REQUIRE(r.commit(lease, 3, record));
    CHECK(r.get_record(ns, key1) == record);
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        CAPTURE(i);
        CHECK(chunk(r, ns, key1, *token, i) == pieces[i]);
        CHECK(server.command({"PTTL", chunk_key(ns, key1, *token, i)}) == "-1");  // committed: permanent
    }
    CHECK(server.command({"PTTL", "skc:" + ns + ":record:" + key1}) == "-1");
    CHECK(chunk(r, ns, key1, *token, 3) == std::nullopt);
    // An empty chunk (the one chunk of an empty package) is there, and empty.
    const RemoteLease empty{ns, key2, r.try_lease(ns, key2, 30s).value()};
    r.put_chunk(empty, 0, "", 1h);
    CHECK(chunk(r, ns, key2, empty.token, 0) == "");
    r.release_lease(empty);
    CHECK(chunk(r, ns, key1, *token + 1, 0) == std::nullopt);
    CHECK(r.get_record(ns, key2) == std::nullopt);

    // Committing does not end the lease; releasing does.
    CHECK(r.lease_held(ns, key1));
    r.release_lease(lease);
    CHECK_FALSE(r.lease_held(ns, key1));
    CHECK(r.get_record(ns, key1) == record);
    // The key layout the header documents, and nothing else.
    const std::string all = server.command({"KEYS", "*"});
    std::set<std::string> keys;
    for (std::size_t pos = 0; pos <= all.size();) {
        const std::size_t nl = std::min(all.find('\n', pos), all.size());
        keys.insert(all.substr(pos, nl - pos));
        pos = nl + 1;
    }
    CHECK(keys == std::set<std::string>{"skc:fence", "skc:" + ns + ":record:" + key1, chunk_key(ns, key1, *token, 0),
                                        chunk_key(ns, key1, *token, 1), chunk_key(ns, key1, *token, 2),
                                        chunk_key(ns, key2, empty.token, 0)});
}

TEST_CASE("a 40 MiB package in two real chunks with NUL bytes round-trips exactly, the boundary included") {
    RedisServer server;
    RedisRemote r(config(server.url()));
    const std::string package = bytes(40u << 20, 42);
    const std::size_t boundary = skc::remote_chunk_bytes;

    skc::CacheEntry entry;
    entry.key = key1;
    entry.package = "packages/" + key1 + ".run";
    entry.size = package.size();
    entry.checksum = skc::detail::hash_bytes(package);
    entry.created_unix = 1700000000;
    entry.ops = 3;
    const RemoteLease lease{ns, key1, r.try_lease(ns, key1, 30s).value()};
    skc::RemoteRecord rec;
    rec.token = lease.token;
    rec.chunks = 2;
    rec.entry = entry;
    r.put_chunk(lease, 0, std::string_view(package).substr(0, boundary), 1h);
    r.put_chunk(lease, 1, std::string_view(package).substr(boundary), 1h);
    REQUIRE(r.commit(lease, 2, skc::encode_remote_record(rec)));
    r.release_lease(lease);

    RedisRemote reader(config(server.url()));
    const std::optional<std::string> text = reader.get_record(ns, key1);
    REQUIRE(text);
    const std::optional<skc::RemoteRecord> got = skc::decode_remote_record(*text, key1);
    REQUIRE(got);
    CHECK(got->token == lease.token);
    REQUIRE(got->chunks == 2);
    CHECK(got->entry.size == package.size());
    std::string down;
    std::vector<std::size_t> sizes;
    for (std::uint64_t i = 0; i < got->chunks; ++i) {
        REQUIRE(reader.get_chunk(ns, key1, got->token, i, [&](std::string_view b) {
            sizes.push_back(b.size());
            down.append(b);
        }));
    }
    CHECK(sizes == std::vector<std::size_t>{boundary, package.size() - boundary});
    CHECK(down.size() == package.size());
    CHECK(down.substr(boundary - 8, 16) == package.substr(boundary - 8, 16));
    CHECK(down == package);
    CHECK(skc::detail::hash_bytes(down) == got->entry.checksum);
    CHECK(server.command({"STRLEN", chunk_key(ns, key1, lease.token, 0)}) == std::to_string(boundary));
}

TEST_CASE("leases: one holder at a time, tokens strictly increase across clients") {
    RedisServer server;
    RedisRemote a(config(server.url()));
    RedisRemote b(config(server.url()));
    const std::optional<std::uint64_t> t1 = a.try_lease(ns, key1, 30s);
    REQUIRE(t1);
    CHECK(b.try_lease(ns, key1, 30s) == std::nullopt);
    CHECK(a.try_lease(ns, key1, 30s) == std::nullopt);  // not re-entrant either
    CHECK(b.lease_held(ns, key1));
    const std::optional<std::uint64_t> t2 = b.try_lease(ns, key2, 30s);
    REQUIRE(t2);
    CHECK(*t2 > *t1);
    const std::optional<std::uint64_t> t3 = a.try_lease("other_ns", key1, 30s);  // namespaces are apart
    REQUIRE(t3);
    CHECK(*t3 > *t2);
    a.release_lease({ns, key1, *t1});
    CHECK_FALSE(a.lease_held(ns, key1));
    const std::optional<std::uint64_t> t4 = b.try_lease(ns, key1, 30s);
    REQUIRE(t4);
    CHECK(*t4 > *t3);
    CHECK(server.command({"PTTL", "skc:" + ns + ":lease:" + key1}) != "-1");

    SUBCASE("many threads on many clients draw distinct, increasing tokens") {
        constexpr int threads = 4, per_thread = 50;
        std::vector<std::vector<std::uint64_t>> tokens(threads);
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t) {
            pool.emplace_back([&, t] {
                RedisRemote c(config(server.url()));
                for (int i = 0; i < per_thread; ++i) {
                    const std::optional<std::uint64_t> tok =
                        c.try_lease(ns, "k" + std::to_string(t) + "_" + std::to_string(i), 30s);
                    tokens[static_cast<std::size_t>(t)].push_back(tok.value_or(0));
                }
            });
        }
        for (std::thread& th : pool) th.join();
        std::set<std::uint64_t> all;
        for (const auto& v : tokens) {
            CHECK(std::is_sorted(v.begin(), v.end()));
            CHECK(std::adjacent_find(v.begin(), v.end()) == v.end());
            all.insert(v.begin(), v.end());
        }
        CHECK(all.size() == static_cast<std::size_t>(threads * per_thread));
        CHECK(*all.begin() > *t4);
    }
}

TEST_CASE("leases: a renewal after expiry fails, and a stale token neither renews nor releases the new holder's") {
    RedisServer server;
    RedisRemote a(config(server.url()));
    RedisRemote b(config(server.url()));
    const RemoteLease la{ns, key1, a.try_lease(ns, key1, 150ms).value()};
    CHECK(a.renew_lease(la, 150ms));
    std::this_thread::sleep_for(400ms);
    CHECK_FALSE(a.lease_held(ns, key1));
    CHECK_FALSE(a.renew_lease(la, 30s));  // expired: renewing does not take it back
    CHECK_FALSE(a.lease_held(ns, key1));

    const RemoteLease lb{ns, key1, b.try_lease(ns, key1, 10s).value()};
    CHECK(lb.token > la.token);
    a.release_lease(la);  // stale: the lease is b's now
    CHECK(a.lease_held(ns, key1));
    CHECK(server.command({"GET", "skc:" + ns + ":lease:" + key1}) == std::to_string(lb.token));
    CHECK_FALSE(a.renew_lease(la, 60s));
    CHECK(std::stoll(server.command({"PTTL", "skc:" + ns + ":lease:" + key1})) <= 10'000);
    CHECK(b.renew_lease(lb, 60s));
    CHECK(std::stoll(server.command({"PTTL", "skc:" + ns + ":lease:" + key1})) > 10'000);
    b.release_lease(lb);
    CHECK_FALSE(b.lease_held(ns, key1));
}

TEST_CASE("commit: fenced out once the lease expired, whether or not another node took it over") {
    RedisServer server;
    RedisRemote a(config(server.url()));
    RedisRemote b(config(server.url()));

    SUBCASE("another node took the lease and committed: the first node's commit changes nothing") {
        const RemoteLease la{ns, key1, a.try_lease(ns, key1, 200ms).value()};
        a.put_chunk(la, 0, "from a", 1h);
        std::this_thread::sleep_for(450ms);
        const RemoteLease lb{ns, key1, b.try_lease(ns, key1, 30s).value()};
        b.put_chunk(lb, 0, "from b", 1h);
        REQUIRE(b.commit(lb, 1, raw_record(lb.token, 1)));
        CHECK_FALSE(a.commit(la, 1, raw_record(la.token, 1)));
        CHECK(a.get_record(ns, key1) == raw_record(lb.token, 1));
        CHECK(chunk(a, ns, key1, lb.token, 0) == "from b");
        CHECK(std::stoll(server.command({"PTTL", chunk_key(ns, key1, la.token, 0)})) > 0);  // still expiring
    }
    SUBCASE("another node holds the lease and has not committed yet") {
        const RemoteLease la{ns, key1, a.try_lease(ns, key1, 200ms).value()};
        a.put_chunk(la, 0, "from a", 1h);
        std::this_thread::sleep_for(450ms);
        const RemoteLease lb{ns, key1, b.try_lease(ns, key1, 30s).value()};
        CHECK_FALSE(a.commit(la, 1, raw_record(la.token, 1)));
        CHECK(a.get_record(ns, key1) == std::nullopt);
        CHECK(b.lease_held(ns, key1));
        CHECK(server.command({"GET", "skc:" + ns + ":lease:" + key1}) == std::to_string(lb.token));
    }
    SUBCASE("the lease expired and no one took it") {
        const RemoteLease la{ns, key1, a.try_lease(ns, key1, 200ms).value()};
        a.put_chunk(la, 0, "from a", 1h);
        std::this_thread::sleep_for(450ms);
        CHECK_FALSE(a.commit(la, 1, raw_record(la.token, 1)));
        CHECK(a.get_record(ns, key1) == std::nullopt);
    }
    SUBCASE("a lease on another key does not let a node commit this one") {
        const RemoteLease l2{ns, key2, a.try_lease(ns, key2, 30s).value()};
        const RemoteLease forged{ns, key1, l2.token};
        a.put_chunk(forged, 0, "x", 1h);
        CHECK_FALSE(a.commit(forged, 1, raw_record(l2.token, 1)));
        CHECK(a.get_record(ns, key1) == std::nullopt);
    }
}

TEST_CASE("commit: refused while a chunk of the upload is missing (evicted, or never stored)") {
    RedisServer server;
    RedisRemote r(config(server.url()));
    const RemoteLease lease{ns, key1, r.try_lease(ns, key1, 30s).value()};
    for (std::uint64_t i = 0; i < 3; ++i) r.put_chunk(lease, i, bytes(100, i), 1h);
    CHECK(server.command({"DEL", chunk_key(ns, key1, lease.token, 1)}) == "1");
    CHECK_FALSE(r.commit(lease, 3, raw_record(lease.token, 3)));
    CHECK(r.get_record(ns, key1) == std::nullopt);
    // Nothing was made permanent.
    CHECK(std::stoll(server.command({"PTTL", chunk_key(ns, key1, lease.token, 0)})) > 0);
    CHECK(std::stoll(server.command({"PTTL", chunk_key(ns, key1, lease.token, 2)})) > 0);
    CHECK_FALSE(r.commit(lease, 4, raw_record(lease.token, 4)));  // chunk 3 was never stored
    // Stored again, the upload commits.
    r.put_chunk(lease, 1, bytes(100, 1), 1h);
    CHECK(r.commit(lease, 3, raw_record(lease.token, 3)));
    CHECK(chunk(r, ns, key1, lease.token, 1) == bytes(100, 1));
}

TEST_CASE("commit: a record that replaces another drops the old upload's chunks") {
    RedisServer server;
    RedisRemote r(config(server.url()));
    const RemoteLease first = upload(r, ns, key1, {"a0", "a1"});
    CHECK(server.command({"EXISTS", chunk_key(ns, key1, first.token, 0), chunk_key(ns, key1, first.token, 1)}) == "2");
    const RemoteLease second = upload(r, ns, key1, {"b0", "b1", "b2"});
    CHECK(server.command({"EXISTS", chunk_key(ns, key1, first.token, 0), chunk_key(ns, key1, first.token, 1)}) == "0");
    CHECK(chunk(r, ns, key1, first.token, 0) == std::nullopt);
    CHECK(r.get_record(ns, key1) == raw_record(second.token, 3));
    for (std::uint64_t i = 0; i < 3; ++i) CHECK(chunk(r, ns, key1, second.token, i) == "b" + std::to_string(i));

    SUBCASE("committing the same upload twice keeps its chunks") {
        const RemoteLease again{ns, key1, r.try_lease(ns, key1, 30s).value()};
        r.put_chunk(again, 0, "c0", 1h);
        REQUIRE(r.commit(again, 1, raw_record(again.token, 1)));
        REQUIRE(r.commit(again, 1, raw_record(again.token, 1)));
        CHECK(chunk(r, ns, key1, again.token, 0) == "c0");
        CHECK(chunk(r, ns, key1, second.token, 0) == std::nullopt);
    }
    SUBCASE("an unreadable old record is replaced; chunks of other keys are left alone") {
        const RemoteLease other = upload(r, ns, key2, {"o0"});
        CHECK(server.command({"SET", "skc:" + ns + ":record:" + key1, "not a record"}) == "OK");
        const RemoteLease third = upload(r, ns, key1, {"d0"});
        CHECK(r.get_record(ns, key1) == raw_record(third.token, 1));
        CHECK(chunk(r, ns, key2, other.token, 0) == "o0");
    }
}

TEST_CASE("chunks of an upload that is never committed expire; committed ones do not") {
    RedisServer server;
    RedisRemote r(config(server.url()));
    const RemoteLease lease{ns, key1, r.try_lease(ns, key1, 30s).value()};
    r.put_chunk(lease, 0, "expires", 150ms);
    CHECK(chunk(r, ns, key1, lease.token, 0) == "expires");
    std::this_thread::sleep_for(400ms);
    CHECK(chunk(r, ns, key1, lease.token, 0) == std::nullopt);

    r.put_chunk(lease, 0, "kept", 300ms);
    REQUIRE(r.commit(lease, 1, raw_record(lease.token, 1)));
    std::this_thread::sleep_for(500ms);
    CHECK(chunk(r, ns, key1, lease.token, 0) == "kept");
}

TEST_CASE("namespaces(), keys() and remove()") {
    RedisServer server;
    RedisRemote r(config(server.url()));
    CHECK(r.namespaces().empty());
    CHECK(r.keys(ns).empty());
    const std::string other = "CANN-7.0.0_Ascend310P";
    // Glob characters in a namespace match only themselves: unescaped, "odd*ns?[xy]" would match
    // "oddAAnsBx" too, and "back\\slash" would match "backslash" but not itself.
    const std::string glob = "odd*ns?[xy]", glob_like = "oddAAnsBx";
    const std::string backslash = "back\\slash", backslash_like = "backslash";
    upload(r, ns, key2, {"n2"});
    const RemoteLease l1 = upload(r, ns, key1, {"n1a", "n1b"});
    upload(r, other, key1, {"o1"});
    upload(r, glob, key1, {"g1"});
    upload(r, glob_like, key2, {"g2"});
    upload(r, backslash, key1, {"b1"});
    upload(r, backslash_like, key2, {"b2"});
    // Keys that are not records: a held lease, chunks of an upload in progress, another program's keys.
    const RemoteLease pending{"pending_ns", key1, r.try_lease("pending_ns", key1, 30s).value()};
    r.put_chunk(pending, 0, "p", 1h);
    CHECK(server.command({"SET", "unrelated:key", "x"}) == "OK");
    CHECK(server.command({"SET", "skc:ns", "x"}) == "OK");

    const auto sorted = [](std::set<std::string> s) { return std::vector<std::string>(s.begin(), s.end()); };
    CHECK(r.namespaces() == sorted({ns, other, glob, glob_like, backslash, backslash_like}));
    CHECK(r.keys(ns) == std::vector<std::string>{key1, key2});
    CHECK(r.keys(other) == std::vector<std::string>{key1});
    CHECK(r.keys(glob) == std::vector<std::string>{key1});
    CHECK(r.keys(glob_like) == std::vector<std::string>{key2});
    CHECK(r.keys(backslash) == std::vector<std::string>{key1});
    CHECK(r.keys(backslash_like) == std::vector<std::string>{key2});
    CHECK(r.keys("CANN") == std::vector<std::string>{});
    CHECK(r.keys("pending_ns").empty());

    r.remove(ns, key1);
    CHECK(r.get_record(ns, key1) == std::nullopt);
    CHECK(server.command({"EXISTS", chunk_key(ns, key1, l1.token, 0), chunk_key(ns, key1, l1.token, 1)}) == "0");
    CHECK(r.keys(ns) == std::vector<std::string>{key2});
    CHECK(r.get_record(other, key1).has_value());
    r.remove(ns, key1);  // nothing left: no error
    r.remove(ns, key2);
    CHECK(r.namespaces() == sorted({other, glob, glob_like, backslash, backslash_like}));

    SUBCASE("many records: SCAN goes through all of them") {
        for (int i = 0; i < 2500; ++i)
            (void)server.command({"SET", "skc:many:record:k" + std::to_string(10000 + i), raw_record(1, 1)});
        const std::vector<std::string> keys = r.keys("many");
        CHECK(keys.size() == 2500);
        CHECK(keys.front() == "k10000");
        CHECK(keys.back() == "k12499");
    }
}

TEST_CASE("namespaces and keys that cannot be part of a Redis key name, and a read-only tier, are refused") {
    RedisServer server;
    RedisRemote r(config(server.url()));
    for (const std::string& bad :
         {std::string(), std::string("a:b"), std::string("a b"), std::string("a\nb"), std::string(256, 'a')}) {
        CAPTURE(bad);
        CHECK(error_of([&] { (void)r.get_record(bad, key1); }).code() == Errc::invalid_argument);
        CHECK(error_of([&] { (void)r.get_record(ns, bad); }).code() == Errc::invalid_argument);
        CHECK(error_of([&] { (void)r.keys(bad); }).code() == Errc::invalid_argument);
        CHECK(error_of([&] { (void)r.try_lease(bad, key1, 1s); }).code() == Errc::invalid_argument);
    }
    CHECK(error_of([&] { (void)r.get_record("a:b", key1); }).message() ==
          R"(remote cache: the namespace "a:b" is not 1 to 255 printable characters without ':')");
    CHECK(error_of([&] { (void)r.try_lease(ns, key1, 0ms); }).code() == Errc::invalid_argument);
    CHECK_FALSE(r.lease_held(ns, key1));  // the refused calls stored nothing

    RemoteConfig c = config(server.url());
    c.read_only = true;
    RedisRemote ro(c);
    CHECK(ro.read_only());
    const RemoteLease lease{ns, key1, 1};
    for (const auto& refused : std::vector<std::pair<std::string, std::function<void()>>>{
             {"try_lease", [&] { (void)ro.try_lease(ns, key1, 1s); }},
             {"renew_lease", [&] { (void)ro.renew_lease(lease, 1s); }},
             {"release_lease", [&] { ro.release_lease(lease); }},
             {"put_chunk", [&] { ro.put_chunk(lease, 0, "x", 1s); }},
             {"commit", [&] { (void)ro.commit(lease, 1, "x"); }},
             {"remove", [&] { ro.remove(ns, key1); }},
         }) {
        const std::string& name = refused.first;  // not a structured binding: CAPTURE is a lambda
        CAPTURE(name);
        const skc::Error e = error_of(refused.second);
        CHECK(e.code() == Errc::invalid_argument);
        CHECK(e.message() == ro.where() + ": " + name + " refused: the remote cache is read-only");
    }
    CHECK_FALSE(ro.connected());
    upload(r, ns, key1, {"x"});
    CHECK(ro.get_record(ns, key1).has_value());
    CHECK(ro.keys(ns) == std::vector<std::string>{key1});
    CHECK_FALSE(ro.lease_held(ns, key1));
}

TEST_CASE("AUTH: the default user's password (requirepass), and an ACL user") {
    SUBCASE("requirepass, with characters a URL must percent-encode") {
        RedisServer server({"--requirepass", "p@ss/w:rd%"});
        RedisRemote good(config("redis://:p%40ss%2Fw%3Ard%25@127.0.0.1:" + std::to_string(server.port())));
        upload(good, ns, key1, {"secret data"});
        CHECK(good.get_record(ns, key1).has_value());
        CHECK(server.command({"EXISTS", "skc:" + ns + ":record:" + key1}) == "1");
        CHECK_FALSE(contains(good.where(), "p@ss"));

        RedisRemote wrong(config("redis://:hunter2@127.0.0.1:" + std::to_string(server.port())));
        skc::Error e = error_of([&] { (void)wrong.get_record(ns, key1); });
        CHECK(e.code() == Errc::remote_failed);
        CHECK(e.message().starts_with(wrong.where() + ": AUTH: the server answered \"WRONGPASS"));
        CHECK_FALSE(contains(e.what(), "hunter2"));
        CHECK_FALSE(wrong.connected());

        RedisRemote none(config(server.url()));
        e = error_of([&] { (void)none.get_record(ns, key1); });
        CHECK(e.code() == Errc::remote_failed);
        CHECK(e.message().starts_with(none.where() + ": GET skc:" + ns + ":record:" + key1 +
                                      ": the server answered \"NOAUTH"));
    }
    SUBCASE("user:password of an ACL user") {
        RedisServer server;
        CHECK(server.command({"ACL", "SETUSER", "alice", "on", ">wonderland", "~skc:*", "+@all"}) == "OK");
        const std::string at = "@127.0.0.1:" + std::to_string(server.port());
        RedisRemote alice(config("redis://alice:wonderland" + at));
        upload(alice, ns, key1, {"alice's"});
        CHECK(alice.keys(ns) == std::vector<std::string>{key1});

        RedisRemote wrong(config("redis://alice:hunter2" + at));
        const skc::Error e = error_of([&] { (void)wrong.get_record(ns, key1); });
        CHECK(e.code() == Errc::remote_failed);
        CHECK(e.message().starts_with(wrong.where() + ": AUTH alice: the server answered \"WRONGPASS"));
        CHECK_FALSE(contains(e.what(), "hunter2"));

        // A user without rights on the keys: the first command fails, cleanly.
        CHECK(server.command({"ACL", "SETUSER", "bob", "on", ">builder", "~other:*", "+@all"}) == "OK");
        RedisRemote bob(config("redis://bob:builder" + at));
        CHECK(error_of([&] { (void)bob.get_record(ns, key1); }).code() == Errc::remote_failed);
    }
}

TEST_CASE("SELECT: a URL's database holds the keys, and other databases do not see them") {
    RedisServer server;
    RedisRemote db3(config(server.url() + "/3"));
    CHECK(db3.where() == "redis://127.0.0.1:" + std::to_string(server.port()) + "/3");
    upload(db3, ns, key1, {"in db 3"});
    const std::string keyspace = server.command({"INFO", "keyspace"});
    CHECK(contains(keyspace, "db3:keys="));
    CHECK_FALSE(contains(keyspace, "db0:"));
    RedisRemote db0(config(server.url()));
    CHECK(db0.get_record(ns, key1) == std::nullopt);
    CHECK(db0.namespaces().empty());
    CHECK(db3.namespaces() == std::vector<std::string>{ns});

    RedisRemote db999(config(server.url() + "/999"));  // the server has 16 databases
    const skc::Error e = error_of([&] { (void)db999.get_record(ns, key1); });
    CHECK(e.code() == Errc::remote_failed);
    CHECK(e.message().starts_with(db999.where() + ": SELECT 999: the server answered \"ERR"));
}

TEST_CASE("faults: nothing listening, every call throws remote_failed quickly and the next one tries again") {
    int port = 0;
    {
        RedisServer server;
        port = server.port();
    }  // stopped: nothing listens on the port now
    RedisRemote r(config("redis://127.0.0.1:" + std::to_string(port), 200ms, 300ms));  // not an error
    const RemoteLease lease{ns, key1, 1};
    const std::vector<std::function<void()>> calls = {
        [&] { (void)r.get_record(ns, key1); },
        [&] { (void)r.get_chunk(ns, key1, 1, 0, [](std::string_view) {}); },
        [&] { (void)r.try_lease(ns, key1, 1s); },
        [&] { (void)r.renew_lease(lease, 1s); },
        [&] { r.release_lease(lease); },
        [&] { (void)r.lease_held(ns, key1); },
        [&] { r.put_chunk(lease, 0, "x", 1s); },
        [&] { (void)r.commit(lease, 1, "x"); },
        [&] { (void)r.namespaces(); },
        [&] { (void)r.keys(ns); },
        [&] { r.remove(ns, key1); },
    };
    for (std::size_t i = 0; i < calls.size(); ++i) {
        CAPTURE(i);
        skc::Error e(Errc::io_error, "");
        const auto took = time_of([&] { e = error_of(calls[i]); });
        CHECK(took < 2s);
        CHECK(e.code() == Errc::remote_failed);
        CHECK(e.message() == r.where() + ": cannot connect: Connection refused");
        CHECK_FALSE(r.connected());
    }
}

TEST_CASE("faults: a server that stops, or is killed and restarted: the call throws, a later one reconnects") {
    RedisServer server;
    RedisRemote r(config(server.url(), 200ms, 500ms));
    upload(r, ns, key1, {"before"});
    REQUIRE(r.connected());

    SUBCASE("stopped") {
        server.stop();
        skc::Error e(Errc::io_error, "");
        const auto took = time_of([&] { e = error_of([&] { (void)r.get_record(ns, key1); }); });
        CHECK(took < 2s);
        CHECK(e.code() == Errc::remote_failed);
        CHECK(e.message().starts_with(r.where() + ": GET skc:" + ns + ":record:" + key1 + ": "));
        CHECK_FALSE(r.connected());
        CHECK(error_of([&] { (void)r.get_record(ns, key1); }).message() ==
              r.where() + ": cannot connect: Connection refused");
        server.start();
        CHECK(r.get_record(ns, key1) == std::nullopt);  // no persistence: the restarted server is empty
        CHECK(r.connected());
    }
    SUBCASE("killed, then restarted on the same port") {
        server.kill();
        server.start();
        const skc::Error e = error_of([&] { (void)r.lease_held(ns, key1); });
        CHECK(e.code() == Errc::remote_failed);
        CHECK(e.message() ==
              r.where() + ": EXISTS skc:" + ns + ":lease:" + key1 + ": the server closed the connection");
        CHECK_FALSE(r.connected());
        CHECK_FALSE(r.lease_held(ns, key1));
        CHECK(r.connected());
        upload(r, ns, key1, {"after"});
        CHECK(r.get_record(ns, key1).has_value());
    }
    SUBCASE("killed during an upload: a large write to the closed connection raises no SIGPIPE") {
        const RemoteLease lease{ns, key2, r.try_lease(ns, key2, 30s).value()};
        server.kill();
        const skc::Error e = error_of([&] { r.put_chunk(lease, 0, bytes(16u << 20, 5), 1h); });
        CHECK(e.code() == Errc::remote_failed);
        CHECK(e.message().starts_with(r.where() + ": SET " + chunk_key(ns, key2, lease.token, 0) + ": "));
        // The process is still here, and SIGPIPE is neither blocked nor pending afterwards.
        sigset_t mask;
        sigemptyset(&mask);
        pthread_sigmask(SIG_BLOCK, nullptr, &mask);
        CHECK_FALSE(sigismember(&mask, SIGPIPE));
        sigset_t pending;
        sigemptyset(&pending);
        sigpending(&pending);
        CHECK_FALSE(sigismember(&pending, SIGPIPE));
        server.start();
        const RemoteLease again{ns, key2, r.try_lease(ns, key2, 30s).value()};
        r.put_chunk(again, 0, "small", 1h);
        CHECK(r.commit(again, 1, raw_record(again.token, 1)));
    }
}

TEST_CASE("faults: a slow server (DEBUG SLEEP) and a paused one time out after command_timeout") {
    RedisServer server({"--enable-debug-command", "yes"});
    RedisRemote r(config(server.url(), 200ms, 300ms));
    upload(r, ns, key1, {"data"});

    SUBCASE("DEBUG SLEEP from another connection") {
        std::thread sleeper([&] { (void)server.command({"DEBUG", "SLEEP", "2"}); });
        std::this_thread::sleep_for(300ms);  // the server is asleep now
        skc::Error e(Errc::io_error, "");
        const auto took = time_of([&] { e = error_of([&] { (void)r.get_record(ns, key1); }); });
        sleeper.join();
        CHECK(took >= 250ms);
        CHECK(took < 1500ms);
        CHECK(e.code() == Errc::remote_failed);
        CHECK(e.message() ==
              r.where() + ": GET skc:" + ns + ":record:" + key1 + ": no answer within 0.3 s (timed out)");
        CHECK_FALSE(r.connected());
        CHECK(r.get_record(ns, key1) == raw_record(1, 1));  // awake again: a new connection works
    }
    SUBCASE("paused (SIGSTOP): connecting succeeds in the kernel, the command gets no answer") {
        RedisRemote fresh(config(server.url(), 200ms, 300ms));
        server.pause();
        skc::Error e(Errc::io_error, "");
        const auto took = time_of([&] { e = error_of([&] { (void)fresh.try_lease(ns, key2, 1s); }); });
        CHECK(took < 1500ms);
        CHECK(e.code() == Errc::remote_failed);
        CHECK(contains(e.message(), "no answer within 0.3 s (timed out)"));
        const auto took2 = time_of([&] { e = error_of([&] { (void)r.lease_held(ns, key2); }); });
        CHECK(took2 < 1500ms);
        CHECK(e.code() == Errc::remote_failed);
        // A download asks for the chunk's size first: no answer is noticed within command_timeout,
        // not after the 4 s a 32 MiB chunk would be given.
        const auto took3 = time_of([&] { e = error_of([&] { (void)chunk(r, ns, key1, 1, 0); }); });
        CHECK(took3 < 1500ms);
        CHECK(e.message() ==
              r.where() + ": STRLEN " + chunk_key(ns, key1, 1, 0) + ": no answer within 0.3 s (timed out)");
        server.resume();
        CHECK(fresh.get_record(ns, key1) == raw_record(1, 1));
    }
    SUBCASE("a chunk transfer gets more than command_timeout: bytes at 8 MB/s") {
        // 16 MiB at 8 MB/s is 2 s, more than the 300 ms command timeout: a server that needs 1 s
        // for it still answers in time.
        const RemoteLease lease{ns, key2, r.try_lease(ns, key2, 30s).value()};
        std::thread sleeper([&] { (void)server.command({"DEBUG", "SLEEP", "1"}); });
        std::this_thread::sleep_for(200ms);
        r.put_chunk(lease, 0, bytes(16u << 20, 9), 1h);
        sleeper.join();
        CHECK(r.commit(lease, 1, raw_record(lease.token, 1)));
        CHECK(chunk(r, ns, key2, lease.token, 0) == bytes(16u << 20, 9));
    }
}

TEST_CASE("faults: error replies and replies of the wrong type throw remote_failed and drop the connection") {
    RedisServer server;
    RedisRemote r(config(server.url()));
    const RemoteLease lease{ns, key1, r.try_lease(ns, key1, 30s).value()};

    SUBCASE("out of memory (maxmemory, noeviction)") {
        CHECK(server.command({"CONFIG", "SET", "maxmemory-policy", "noeviction"}) == "OK");
        CHECK(server.command({"CONFIG", "SET", "maxmemory", "1mb"}) == "OK");
        const skc::Error e = error_of([&] { r.put_chunk(lease, 0, bytes(4u << 20, 1), 1h); });
        CHECK(e.code() == Errc::remote_failed);
        CHECK(e.message().starts_with(r.where() + ": SET " + chunk_key(ns, key1, lease.token, 0) +
                                      ": the server answered \"OOM"));
        CHECK_FALSE(r.connected());
        CHECK(server.command({"CONFIG", "SET", "maxmemory", "0"}) == "OK");
        r.put_chunk(lease, 0, bytes(4u << 20, 1), 1h);
        CHECK(r.commit(lease, 1, raw_record(lease.token, 1)));
    }
    SUBCASE("the fencing counter is not a number, or not positive") {
        CHECK(server.command({"SET", "skc:fence", "not a number"}) == "OK");
        skc::Error e = error_of([&] { (void)r.try_lease(ns, key2, 1s); });
        CHECK(e.code() == Errc::remote_failed);
        CHECK(e.message().starts_with(r.where() + ": INCR skc:fence: the server answered \"ERR"));
        CHECK(server.command({"SET", "skc:fence", "-5"}) == "OK");
        e = error_of([&] { (void)r.try_lease(ns, key2, 1s); });
        CHECK(e.message() == r.where() + ": INCR skc:fence: the fencing counter is -4, not positive");
        CHECK_FALSE(r.connected());
        CHECK_FALSE(r.lease_held(ns, key2));
    }
    SUBCASE("a key of the wrong type") {
        CHECK(server.command({"HSET", "skc:" + ns + ":record:" + key2, "f", "v"}) == "1");
        const skc::Error e = error_of([&] { (void)r.get_record(ns, key2); });
        CHECK(e.code() == Errc::remote_failed);
        CHECK(contains(e.message(), "WRONGTYPE"));
        CHECK_FALSE(r.connected());
        CHECK(r.get_record(ns, key1) == std::nullopt);
    }
}

TEST_CASE("threads: a renewal thread keeps the lease while another transfers the chunks") {
    RedisServer server;
    RedisRemote r(config(server.url()));
    // A lease of 1 s renewed every 50 ms: a thread starved for most of a second (a loaded machine,
    // a sanitizer) still keeps it.
    const RemoteLease lease{ns, key1, r.try_lease(ns, key1, 1s).value()};
    std::atomic<bool> done{false};
    std::atomic<int> renewals{0}, lost{0};
    std::thread renewer([&] {
        while (!done.load()) {
            if (r.renew_lease(lease, 1s)) ++renewals;
            else ++lost;
            std::this_thread::sleep_for(50ms);
        }
    });
    std::vector<std::string> pieces;
    for (std::uint64_t i = 0; i < 6; ++i) pieces.push_back(bytes(4u << 20, 100 + i));
    for (std::uint64_t i = 0; i < pieces.size(); ++i) {
        r.put_chunk(lease, i, pieces[i], 1h);
        std::this_thread::sleep_for(250ms);  // longer, all in all, than the lease's 1 s
    }
    const bool committed = r.commit(lease, pieces.size(), raw_record(lease.token, pieces.size()));
    done = true;
    renewer.join();
    CHECK(committed);
    CHECK(lost.load() == 0);
    CHECK(renewals.load() >= 5);
    for (std::uint64_t i = 0; i < pieces.size(); ++i) CHECK(chunk(r, ns, key1, lease.token, i) == pieces[i]);
}

}  // namespace redis_redis_remote_test
