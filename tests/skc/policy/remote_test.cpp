// The remote tier's protocol (policy/remote.hpp, IndexCache): two cache folders stand for two nodes
// sharing one remote store, here in memory (tests/support/memory_remote.hpp); tests/redis/ runs the
// same flow against a real redis-server with real processes.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>

#include <skc/policy/cache.hpp>
#include <skc/policy/remote.hpp>

#include "cache_fixtures.hpp"
#include "memory_remote.hpp"
#include "test_support.hpp"

namespace skc_policy_remote_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using skc_test::MemoryRemote;

namespace {

const std::string ns = "CANN-8.0_dev";

/// The log lines a cache wrote, by level.
struct Logged {
    std::mutex mu;
    std::vector<std::pair<skc::LogLevel, std::string>> lines;
    skc::LogSink sink() {
        return [this](skc::LogLevel l, std::string_view s) {
            std::lock_guard lock(mu);
            lines.emplace_back(l, std::string(s));
        };
    }
    int count(skc::LogLevel level) {
        std::lock_guard lock(mu);
        int n = 0;
        for (const auto& [l, s] : lines) n += l == level ? 1 : 0;
        return n;
    }
    std::string all() {
        std::lock_guard lock(mu);
        std::string out;
        for (const auto& [l, s] : lines) out += s + "\n";
        return out;
    }
};

/// One node: a cache folder of its own with the shared remote behind it.
struct Node {
    skc_test::TempDir dir;
    Logged log;
    std::unique_ptr<skc::IndexCache<skc::FilesystemStorage, skc::FileLock>> cache;
    std::atomic<int> compiles{0};

    Node(const std::shared_ptr<MemoryRemote::State>& remote, skc::CacheMode mode = skc::CacheMode::read_write,
         std::chrono::milliseconds lease_ttl = 30s, bool remote_read_only = false) {
        skc::CacheConfig c;
        c.log = log.sink();
        c.mode = mode;
        c.wait_timeout = 20s;
        cache = skc::open_cache(dir.path() / "cache", "8.0", "dev", c);
        if (remote) cache->set_remote(std::make_unique<MemoryRemote>(remote, remote_read_only, lease_ttl), ns);
    }

    /// get_or_compile with a compile that writes key `hex`'s package (after `delay`).
    skc::CacheOutcome<skc::FileLock::Guard> get(const skc::CacheKey& key, std::chrono::milliseconds delay = 0ms) {
        return cache->get_or_compile(key, [&] {
            ++compiles;
            std::this_thread::sleep_for(delay);
            const fs::path p = dir.path() / ("compiled-" + key.hex() + "-" + std::to_string(compiles.load()));
            skc_test::spit(p, skc_test::package_content(key.hex()));
            return p;
        });
    }
};

std::string package_of(const skc::CacheOutcome<skc::FileLock::Guard>& out) {
    REQUIRE(out.hit);
    REQUIRE(out.hit->package_path);
    return skc_test::slurp(*out.hit->package_path);
}

}  // namespace

TEST_CASE("remote: the first node compiles and uploads; the second downloads, checks and stores it") {
    auto remote = std::make_shared<MemoryRemote::State>();
    Node a(remote), b(remote);
    const skc::CacheKey key = skc_test::make_key(1);

    const auto first = a.get(key);
    CHECK(first.result == skc::CacheResult::compiled);
    CHECK(a.compiles == 1);
    CHECK(a.cache->stats().remote_uploads == 1);
    CHECK(a.cache->stats().remote_upload_bytes == skc_test::package_content(key.hex()).size());
    CHECK(a.cache->stats().remote_misses == 1);
    CHECK(remote->leases.empty());  // released after the upload

    const auto second = b.get(key);
    CHECK(second.result == skc::CacheResult::downloaded);
    CHECK(b.compiles == 0);
    CHECK(package_of(second) == skc_test::package_content(key.hex()));
    const skc::CacheStats s = b.cache->stats();
    CHECK(s.remote_hits == 1);
    CHECK(s.remote_download_bytes == skc_test::package_content(key.hex()).size());
    CHECK(s.remote_errors == 0);
    CHECK(b.log.count(skc::LogLevel::warning) == 0);

    // Stored locally: the next lookup does not ask the remote (it would fail).
    remote->fail_from = remote->calls.load();
    const auto third = b.get(key);
    CHECK(third.result == skc::CacheResult::hit);
    CHECK(b.cache->stats().remote_errors == 0);
    // The downloaded entry keeps the key's components and the compile time it saves.
    const std::vector<skc::CacheEntry> entries = b.cache->entries();
    REQUIRE(entries.size() == 1);
    CHECK(entries[0].components == key.components);
    CHECK(b.cache->verify_all().bad.empty());
}

TEST_CASE("remote: a package above one chunk is split and put together again") {
    auto remote = std::make_shared<MemoryRemote::State>();
    Node a(remote), b(remote);
    const skc::CacheKey key = skc_test::make_key(2);
    std::string big(skc::remote_chunk_bytes + 12345, '\0');
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 131) >> 7);
    const fs::path p = a.dir / "big.run";
    skc_test::spit(p, big);
    CHECK(a.cache->get_or_compile(key, [&] { return p; }).result == skc::CacheResult::compiled);
    CHECK(MemoryRemote::chunk_names(*remote, ns, key.hex()).size() == 2);
    const auto got = b.get(key);
    CHECK(got.result == skc::CacheResult::downloaded);
    CHECK(package_of(got) == big);
}

TEST_CASE("remote: a fault of the store falls back to the local cache with one warning") {
    auto remote = std::make_shared<MemoryRemote::State>();
    const skc::CacheKey k1 = skc_test::make_key(3), k2 = skc_test::make_key(4);

    SUBCASE("down from the start") {
        remote->fail_from = 0;
        Node a(remote);
        CHECK(a.get(k1).result == skc::CacheResult::compiled);
        CHECK(a.get(k2).result == skc::CacheResult::compiled);
        CHECK(a.compiles == 2);
        CHECK(a.log.count(skc::LogLevel::warning) == 1);
        CHECK(a.log.all().find("the remote cache failed (memory://test: connection refused); going on with the "
                               "local cache only") != std::string::npos);
        CHECK(a.cache->stats().remote_errors == 1);
        CHECK(a.get(k1).result == skc::CacheResult::hit);
    }
    SUBCASE("during the upload: nothing partial is visible, the local entry is whole") {
        Node a(remote);
        // lookup, lease, lookup again, then the first chunk fails.
        remote->fail_from = 3;
        CHECK(a.get(k1).result == skc::CacheResult::compiled);
        CHECK(a.log.count(skc::LogLevel::warning) == 1);
        CHECK(remote->records.empty());
        CHECK(a.cache->verify_all().bad.empty());
        remote->fail_from = -1;
        // The failed node could not release its lease: here it has expired, and another node compiles.
        Node b(remote);
        remote->leases.clear();
        CHECK(b.get(k1).result == skc::CacheResult::compiled);
        CHECK(remote->records.size() == 1);
    }
    SUBCASE("during a download") {
        Node a(remote), b(remote);
        CHECK(a.get(k1).result == skc::CacheResult::compiled);
        remote->fail_from = remote->calls.load() + 1;  // the record is read, its chunk is not
        const auto out = b.get(k1);
        CHECK(out.result == skc::CacheResult::compiled);
        CHECK(b.compiles == 1);
        CHECK(package_of(out) == skc_test::package_content(k1.hex()));
        CHECK(b.log.count(skc::LogLevel::warning) == 1);
        CHECK(b.cache->verify_all().bad.empty());
    }
}

TEST_CASE("remote: a tampered package is refused, compiled here and replaced there") {
    auto remote = std::make_shared<MemoryRemote::State>();
    Node a(remote), b(remote), c(remote);
    const skc::CacheKey key = skc_test::make_key(5);
    CHECK(a.get(key).result == skc::CacheResult::compiled);
    const std::vector<std::string> chunks = MemoryRemote::chunk_names(*remote, ns, key.hex());
    REQUIRE(chunks.size() == 1);
    remote->chunks[chunks[0]][10] ^= 1;

    const auto out = b.get(key);
    CHECK(out.result == skc::CacheResult::compiled);
    CHECK(package_of(out) == skc_test::package_content(key.hex()));
    CHECK(b.log.all().find("the remote package of cache key " + key.hex() +
                           " on memory://test is refused: its package's checksum does not match the record; it is "
                           "compiled here") != std::string::npos);
    CHECK(b.cache->stats().remote_errors == 1);
    CHECK(b.cache->stats().remote_uploads == 1);  // the good package replaced it
    CHECK(c.get(key).result == skc::CacheResult::downloaded);
    CHECK(c.compiles == 0);
}

TEST_CASE("remote: an evicted chunk is a miss, not an error") {
    auto remote = std::make_shared<MemoryRemote::State>();
    Node a(remote), b(remote);
    const skc::CacheKey key = skc_test::make_key(6);
    CHECK(a.get(key).result == skc::CacheResult::compiled);
    for (const std::string& n : MemoryRemote::chunk_names(*remote, ns, key.hex())) remote->chunks.erase(n);
    CHECK(b.get(key).result == skc::CacheResult::compiled);
    CHECK(b.log.count(skc::LogLevel::warning) == 0);
    CHECK(b.cache->stats().remote_errors == 0);
    CHECK(b.cache->stats().remote_misses == 1);
}

TEST_CASE("remote: a record that is not whole is refused") {
    auto remote = std::make_shared<MemoryRemote::State>();
    Node a(remote), b(remote);
    const skc::CacheKey key = skc_test::make_key(7);
    CHECK(a.get(key).result == skc::CacheResult::compiled);
    std::string& rec = remote->records.begin()->second;
    rec.resize(rec.size() - 20);
    CHECK(b.get(key).result == skc::CacheResult::compiled);
    CHECK(b.log.all().find("is refused: its record is unreadable (truncated or altered)") != std::string::npos);
    CHECK(remote->records.begin()->second.size() > rec.size() - 1);  // replaced by b's upload
    CHECK(skc::decode_remote_record(remote->records.begin()->second, key.hex()));
}

TEST_CASE("remote: a node holding the lease is waited for; a dead one's lease expires and another compiles") {
    auto remote = std::make_shared<MemoryRemote::State>();
    const skc::CacheKey key = skc_test::make_key(8);
    SUBCASE("the holder uploads: the waiter downloads") {
        Node a(remote), b(remote);
        std::thread t([&] { CHECK(a.get(key, 400ms).result == skc::CacheResult::compiled); });
        while (remote->leases_taken.load() == 0) std::this_thread::sleep_for(1ms);
        const auto out = b.get(key);
        t.join();
        CHECK(out.result == skc::CacheResult::downloaded);
        CHECK(b.compiles == 0);
        CHECK(b.log.all().find("another node is compiling cache key " + key.hex()) != std::string::npos);
    }
    SUBCASE("the holder died: its lease expires") {
        MemoryRemote dead(remote);
        REQUIRE(dead.try_lease(ns, key.hex(), 500ms));
        Node b(remote);
        const auto t0 = std::chrono::steady_clock::now();
        CHECK(b.get(key).result == skc::CacheResult::compiled);
        CHECK(std::chrono::steady_clock::now() - t0 >= 450ms);
        CHECK(remote->records.size() == 1);
    }
    SUBCASE("a holder fenced out cannot commit over the one that took over") {
        MemoryRemote slow(remote);
        const std::optional<std::uint64_t> old = slow.try_lease(ns, key.hex(), 1ms);
        REQUIRE(old);
        std::this_thread::sleep_for(5ms);
        Node b(remote);
        CHECK(b.get(key).result == skc::CacheResult::compiled);
        const std::string committed = remote->records.begin()->second;
        slow.put_chunk(skc::RemoteLease{ns, key.hex(), *old}, 0, "stale", 1h);
        CHECK_FALSE(slow.commit(skc::RemoteLease{ns, key.hex(), *old}, 1, "stale record"));
        CHECK(remote->records.begin()->second == committed);
    }
}

TEST_CASE("remote: the lease is renewed while a compile runs longer than its time to live") {
    auto remote = std::make_shared<MemoryRemote::State>();
    Node a(remote, skc::CacheMode::read_write, 150ms), b(remote, skc::CacheMode::read_write, 150ms);
    const skc::CacheKey key = skc_test::make_key(9);
    std::thread t([&] { a.get(key, 700ms); });
    while (remote->leases_taken.load() == 0) std::this_thread::sleep_for(1ms);
    const auto out = b.get(key);
    t.join();
    CHECK(out.result == skc::CacheResult::downloaded);
    CHECK(a.compiles + b.compiles == 1);
}

TEST_CASE("remote: 8 threads over two nodes compile a key once") {
    auto remote = std::make_shared<MemoryRemote::State>();
    Node a(remote), b(remote);
    const skc::CacheKey key = skc_test::make_key(10);
    std::vector<std::thread> ts;
    std::atomic<int> downloaded{0};
    for (int i = 0; i < 8; ++i)
        ts.emplace_back([&, i] {
            Node& n = i % 2 ? a : b;
            const auto out = n.get(key, 100ms);
            CHECK(package_of(out) == skc_test::package_content(key.hex()));
            if (out.result == skc::CacheResult::downloaded) ++downloaded;
        });
    for (std::thread& t : ts) t.join();
    CHECK(a.compiles + b.compiles == 1);
    CHECK(downloaded == 1);  // one process on the other node downloads; its neighbours find it local
    CHECK(remote->uploads == 1);
}

TEST_CASE("remote: read-only tiers and caches") {
    auto remote = std::make_shared<MemoryRemote::State>();
    const skc::CacheKey key = skc_test::make_key(11);
    SUBCASE("a read-only remote downloads but never leases or uploads") {
        Node r(remote, skc::CacheMode::read_write, 30s, /*remote_read_only=*/true);
        CHECK(r.get(key).result == skc::CacheResult::compiled);
        CHECK(remote->leases_taken == 0);
        CHECK(remote->records.empty());
        Node w(remote);
        const skc::CacheKey other = skc_test::make_key(12);
        CHECK(w.get(other).result == skc::CacheResult::compiled);
        CHECK(r.get(other).result == skc::CacheResult::downloaded);
    }
    SUBCASE("a read-only local cache does not use the remote") {
        Node r(remote, skc::CacheMode::read_only);
        remote->fail_from = 0;
        CHECK(r.get(key).result == skc::CacheResult::compiled);
        CHECK(remote->calls == 0);
    }
    SUBCASE("recache compiles and replaces the remote record") {
        Node a(remote), b(remote, skc::CacheMode::recache);
        CHECK(a.get(key).result == skc::CacheResult::compiled);
        const std::string before = remote->records.begin()->second;
        CHECK(b.get(key).result == skc::CacheResult::compiled);
        CHECK(b.compiles == 1);
        CHECK(remote->records.begin()->second != before);
    }
}

TEST_CASE("remote: verify_remote reports and removes bad records") {
    auto remote = std::make_shared<MemoryRemote::State>();
    Node a(remote);
    const skc::CacheKey k1 = skc_test::make_key(13), k2 = skc_test::make_key(14), k3 = skc_test::make_key(15);
    a.get(k1);
    a.get(k2);
    a.get(k3);
    remote->chunks[MemoryRemote::chunk_names(*remote, ns, k2.hex())[0]][0] ^= 1;
    remote->chunks.erase(MemoryRemote::chunk_names(*remote, ns, k3.hex())[0]);
    MemoryRemote ro(remote, /*read_only=*/true);
    skc::RemoteVerifyReport r = skc::verify_remote(ro, ns);
    CHECK(r.checked == 3);
    REQUIRE(r.bad.size() == 2);
    CHECK_FALSE(r.bad[0].removed);
    MemoryRemote rw(remote);
    r = skc::verify_remote(rw, ns);
    REQUIRE(r.bad.size() == 2);
    for (const skc::BadEntry& b : r.bad) {
        CHECK(b.removed);
        if (b.key == k2.hex()) CHECK(b.reason == "its package's checksum does not match the record");
        else CHECK(b.reason == "a chunk of its package is gone (evicted)");
    }
    CHECK(rw.keys(ns) == std::vector<std::string>{k1.hex()});
    CHECK(skc::verify_remote(rw, ns).bad.empty());
}

TEST_CASE("remote: records decode only when whole and of their key") {
    skc::RemoteRecord r;
    r.token = 7;
    r.chunks = 1;
    r.entry.key = std::string(32, 'a');
    r.entry.package = "packages/" + r.entry.key + ".run";
    r.entry.size = 10;
    const std::string text = skc::encode_remote_record(r);
    const auto back = skc::decode_remote_record(text, r.entry.key);
    REQUIRE(back);
    CHECK(back->token == 7);
    CHECK(back->entry.size == 10);
    CHECK_FALSE(skc::decode_remote_record(text, std::string(32, 'b')));
    CHECK_FALSE(skc::decode_remote_record(text.substr(0, text.size() - 3), r.entry.key));
    r.chunks = 2;  // more chunks than 10 bytes need
    CHECK_FALSE(skc::decode_remote_record(skc::encode_remote_record(r), r.entry.key));
    CHECK_FALSE(skc::decode_remote_record("skc-remote-record 1 x 1\n", r.entry.key));
}

TEST_CASE("remote: a download is stored as it streams, and the node remembers it checked it") {
    auto remote = std::make_shared<MemoryRemote::State>();
    Node a(remote), b(remote);
    const skc::CacheKey key = skc_test::make_key(16);
    a.get(key);
    CHECK(b.get(key).result == skc::CacheResult::downloaded);
    const fs::path ns_dir = b.dir / "cache" / ns;
    CHECK(fs::exists(ns_dir / "verified" / (key.hex() + "." + skc::detail::node_name())));
    std::size_t temporaries = 0;
    for (const auto& e : fs::recursive_directory_iterator(ns_dir))
        temporaries += e.path().filename().string().starts_with(".tmp.") ? 1 : 0;
    CHECK(temporaries == 0);
}

TEST_CASE_TEMPLATE("write_stream publishes all the pieces or nothing", S, skc::FilesystemStorage, skc::MemoryStorage) {
    skc_test::TempDir dir;
    S storage = [&] {
        if constexpr (std::is_same_v<S, skc::FilesystemStorage>) return S(dir.path());
        else return S();
    }();
    const auto produce = [](const skc::ChunkFn& write) {
        write("abc");
        write("");
        write("def");
    };
    CHECK(skc::StorageTraits<S>::write_stream(storage, "packages/x.run", produce).size == 6);
    CHECK(storage.read("packages/x.run") == "abcdef");
    CHECK_THROWS_AS(skc::StorageTraits<S>::write_stream(storage, "packages/x.run",
                                                        [](const skc::ChunkFn& write) {
                                                            write("partial");
                                                            throw std::runtime_error("the remote failed");
                                                        }),
                    std::runtime_error);
    CHECK(storage.read("packages/x.run") == "abcdef");  // the old object, whole
    if constexpr (std::is_same_v<S, skc::FilesystemStorage>) CHECK(storage.collect_garbage() == 0);
}

}  // namespace skc_policy_remote_test
