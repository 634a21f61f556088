// The remote cache tier end to end: `skc compile` processes with the real host_op_compiler, two
// bases with caches of their own (standing in for two nodes that share no file system) and one
// real redis-server. Faults: Redis stopped before, killed during a compile and while a process
// waits on it, a tampered remote package, a compiling process killed (its lease expires), and
// Redis evicting keys under maxmemory.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <skc/op_info_io.hpp>
#include <skc/value.hpp>

#include "redis_proxy.hpp"
#include "redis_server.hpp"
#include "run_tool.hpp"
#include "test_support.hpp"

namespace redis_remote_cache_test {

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using skc_test::RedisServer;
using skc_test::Run;
using skc_test::TempDir;

const std::string tool = SKC_TOOL;
const std::string host_compiler = SKC_HOST_OP_COMPILER;

/// A test's files: the ops, a compiler that stalls while the file `stall` exists, and bases.
struct World {
    TempDir tmp;
    fs::path ops = tmp / "ops";
    fs::path stall = tmp / "stall";
    std::string compiler = (tmp / "compiler.sh").string();

    World() {
        fs::create_directories(ops);
        fs::copy_file(skc_test::example_ops_dir() / "Gelu_float_ND_32_256_8.json", ops / "Gelu_float_ND_32_256_8.json");
        skc_test::spit(compiler, "#!/bin/sh\nwhile [ -f '" + stall.string() + "' ]; do sleep 0.05; done\nexec '" +
                                     host_compiler + "' \"$@\"\n");
        fs::permissions(compiler, fs::perms::owner_all);
    }

    /// skc compile of the op files in `op_dir` (empty: `ops`) into `base`, with the remote tier at
    /// `url` (empty: none).
    std::vector<std::string> args(const std::string& base, const std::string& url, const fs::path& op_dir = {}) const {
        std::vector<std::string> a{"compile",
                                   "--ops",
                                   (op_dir.empty() ? ops : op_dir).string(),
                                   "--base",
                                   (tmp / base).string(),
                                   "--compiler",
                                   compiler,
                                   "--device",
                                   "host-cpu",
                                   "--toolchain-version",
                                   "1.0",
                                   "--jobs",
                                   "1",
                                   "--json"};
        if (!url.empty()) a.insert(a.end(), {"--remote-cache", url});
        return a;
    }
    skc_test::Started start(const std::string& base, const std::string& url, const fs::path& io, bool own_group = false,
                            const fs::path& op_dir = {}) const {
        fs::create_directories(tmp / base);
        return skc_test::start_program(tool, tmp.path(), args(base, url, op_dir), {}, io, own_group);
    }
    Run run(const std::string& base, const std::string& url, const fs::path& op_dir = {}) const {
        TempDir io;
        return skc_test::finish(start(base, url, io.path(), false, op_dir));
    }
    /// How many times the compiler ran for `base` (one op_compiler.log per run).
    std::size_t compiler_runs(const std::string& base) const {
        std::size_t n = 0;
        if (fs::exists(tmp / base))
            for (const auto& e : fs::recursive_directory_iterator(tmp / base))
                n += e.path().filename() == "op_compiler.log" ? 1 : 0;
        return n;
    }
    Run skc(const std::vector<std::string>& a) const { return skc_test::run_program(tool, tmp.path(), a); }
    /// The `total` of skc cache stats for `base`.
    skc::Value totals(const std::string& base) const {
        const Run s = skc({"cache", "stats", "--base", (tmp / base).string(), "--json"});
        REQUIRE(s.status == 0);
        return *skc::parse_json(s.out).find("total");
    }
    /// A second op in `ops`; returns a folder of the first alone (a part of the set of both).
    fs::path grow() const {
        const fs::path small = tmp / "small";
        fs::create_directories(small);
        fs::copy_file(ops / "Gelu_float_ND_32_256_8.json", small / "Gelu_float_ND_32_256_8.json");
        fs::copy_file(skc_test::example_ops_dir() / "Add_float_ND_32_64_9.json", ops / "Add_float_ND_32_64_9.json");
        return small;
    }
};

std::string outcome(const Run& r) {
    INFO(r.out, r.err);
    return skc::parse_json(r.out).find("outcome")->as_string();
}

std::size_t count(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

/// Keys of the server matching `pattern`, one per line ("" when none).
std::string keys(RedisServer& r, const std::string& pattern) {
    const std::string k = r.command({"KEYS", pattern});
    return k == "(empty)" ? std::string() : k;
}

/// Waits until a lease is held (`held`), or until none is (each expires on its own).
void wait_for_lease(RedisServer& r, bool held = true) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (keys(r, "skc:*:lease:*").empty() == held) {
        REQUIRE(std::chrono::steady_clock::now() < deadline);
        std::this_thread::sleep_for(20ms);
    }
}

/// The keys of the server's records (what follows `:record:` in their names).
std::set<std::string> record_keys(RedisServer& r) {
    std::set<std::string> out;
    std::istringstream in(keys(r, "skc:*:record:*"));
    for (std::string k; std::getline(in, k);) out.insert(k.substr(k.find(":record:") + 8));
    return out;
}

/// Chunks that no record names and that never expire (a committed upload's chunks persist; an
/// upload never committed leaves chunks that expire): one line each.
std::string chunks_left_for_ever(RedisServer& r) {
    const std::set<std::string> records = record_keys(r);
    std::string out;
    std::istringstream in(keys(r, "skc:*:chunk:*"));
    for (std::string k; std::getline(in, k);) {
        const std::size_t at = k.find(":chunk:") + 7;
        if (r.command({"PTTL", k}) == "-1" && records.count(k.substr(at, k.find(':', at) - at)) == 0) out += k + "\n";
    }
    return out;
}

const std::string failed_warning = "the remote cache failed (";

}  // namespace

TEST_CASE("two bases and one Redis: the first compiles, the second downloads and does not compile") {
    World w;
    RedisServer redis;
    const Run a = w.run("a", redis.url());
    REQUIRE(a.status == 0);
    CHECK(outcome(a) == "compiled");
    const Run b = w.run("b", redis.url());
    REQUIRE(b.status == 0);
    CHECK(outcome(b) == "downloaded");
    CHECK(w.compiler_runs("a") == 1);
    CHECK(w.compiler_runs("b") == 0);
    CHECK(skc::parse_json(a.out).find("key")->as_string() == skc::parse_json(b.out).find("key")->as_string());
    CHECK(count(b.err, failed_warning) == 0);
    // The next run of b is a local hit.
    CHECK(outcome(w.run("b", redis.url())) == "hit");

    const Run sa = w.skc({"cache", "stats", "--base", (w.tmp / "a").string(), "--json"});
    const Run sb = w.skc({"cache", "stats", "--base", (w.tmp / "b").string(), "--json"});
    REQUIRE(sa.status == 0);
    REQUIRE(sb.status == 0);
    const skc::Value ja = skc::parse_json(sa.out), jb = skc::parse_json(sb.out);
    const skc::Value* ra = ja.find("total")->find("remote");
    const skc::Value* rb = jb.find("total")->find("remote");
    REQUIRE(ra);
    REQUIRE(rb);
    CHECK(ra->find("uploads")->as_int() == 1);
    CHECK(ra->find("upload_bytes")->as_int() > 1000);
    CHECK(rb->find("hits")->as_int() == 1);
    CHECK(rb->find("download_bytes")->as_int() == ra->find("upload_bytes")->as_int());
    CHECK(rb->find("errors")->as_int() == 0);
    const Run text = w.skc({"cache", "stats", "--base", (w.tmp / "b").string()});
    CHECK(text.out.find("remote hits:") != std::string::npos);

    const Run v = w.skc({"cache", "verify", "--remote", "--remote-cache", redis.url()});
    CHECK(v.status == 0);
    CHECK(v.out.find("CANN-1.0_host-cpu: checked 1 remote entry, all good") != std::string::npos);
}

TEST_CASE("two bases and one Redis: a grown set's composite and its parts; a base with some parts downloads the rest") {
    World w;
    RedisServer redis;
    const fs::path small = w.grow();  // the first op alone
    const auto run = [&](const std::string& base, const fs::path& ops) { return w.run(base, redis.url(), ops); };
    // Base a: the first op, then both: the second compiles only the new op, and uploads the
    // composite of the two packages after them.
    REQUIRE(outcome(run("a", small)) == "compiled");
    const Run grown = run("a", w.ops);
    REQUIRE(grown.status == 0);
    const skc::Value g = skc::parse_json(grown.out);
    CHECK(g.find("counts")->find("compiled")->as_int() == 1);
    CHECK(w.compiler_runs("a") == 2);
    const std::string set_key = g.find("key")->as_string();
    CHECK(count(keys(redis, "skc:*:record:*"), ":record:") == 3);  // two packages and the composite

    // Base b has nothing: it downloads both parts and the composite, and compiles nothing.
    const Run b = run("b", w.ops);
    REQUIRE_MESSAGE(b.status == 0, b.err);
    CHECK(skc::parse_json(b.out).find("counts")->find("compiled")->as_int() == 0);
    CHECK(skc::parse_json(b.out).find("counts")->find("reused")->as_int() == 2);
    CHECK(w.compiler_runs("b") == 0);
    CHECK(w.totals("b").find("remote")->find("hits")->as_int() == 2);
    CHECK(w.totals("b").find("composite_hits")->as_int() == 1);
    CHECK(fs::exists(w.tmp / "b/static_kernel_compile_outputs/static_kernel_cache/CANN-1.0_host-cpu/composites" /
                     set_key));

    // Base c has the first op's package already: it downloads only the second's.
    REQUIRE(outcome(run("c", small)) == "downloaded");
    const std::int64_t bytes_before = w.totals("c").find("remote")->find("download_bytes")->as_int();
    const Run c = run("c", w.ops);
    REQUIRE_MESSAGE(c.status == 0, c.err);
    CHECK(skc::parse_json(c.out).find("counts")->find("compiled")->as_int() == 0);
    CHECK(w.compiler_runs("c") == 0);
    const skc::Value sc = w.totals("c");
    CHECK(sc.find("remote")->find("hits")->as_int() == 2);  // the first op's, then only the second's
    CHECK(sc.find("remote")->find("download_bytes")->as_int() > bytes_before);
    CHECK(count(b.err + c.err, failed_warning) == 0);

    const Run v = w.skc({"cache", "verify", "--remote", "--remote-cache", redis.url()});
    CHECK(v.status == 0);
    CHECK(v.out.find("CANN-1.0_host-cpu: checked 3 remote entries, all good") != std::string::npos);
}

namespace {

/// Base a compiles the first op without the remote (a part only a has), then the set of both with
/// it: the cover compiles and uploads the second op (the rest), records the composite in a, then
/// uploads the part under its lease and the composite's record last (upload_composite). A proxy in
/// front of Redis stops a's commands where the bytes `stop_at(part)` are, with half a command sent,
/// and a is killed there; `part_whole`: the part's record was committed before. Nothing is lost:
/// each tier verifies clean, and the next node uploads what is missing.
void kill_during_cover_upload(std::vector<std::string> (*stop_at)(const std::string& part), bool part_whole) {
    World w;
    RedisServer redis;
    const std::string url = redis.url() + "?lease_ttl=1000";
    const fs::path small = w.grow();
    const Run first = w.run("a", "", small);
    REQUIRE_MESSAGE(first.status == 0, first.err);
    const std::string part = skc::parse_json(first.out).find("key")->as_string();

    skc_test::RedisProxy proxy(redis.port(), stop_at(part));
    TempDir io;
    const skc_test::Started s = w.start("a", proxy.url() + "?lease_ttl=1000", io.path(), /*own_group=*/true);
    const bool stalled = proxy.stalled(60s);
    ::kill(-s.pid, SIGKILL);
    const Run killed = skc_test::finish(s);
    REQUIRE_MESSAGE(stalled, "the upload did not come to the point: " << killed.out << killed.err);
    CHECK(killed.status == 128 + SIGKILL);

    // a's cache is whole: the part, the rest and the composite; the remote has only whole
    // records, and an upload left half done expires.
    const std::string ns = "CANN-1.0_host-cpu: ";
    const Run local = w.skc({"cache", "verify", "--base", (w.tmp / "a").string()});
    CHECK(local.status == 0);
    CHECK(local.out == ns + "checked 3 entries, all good\n");
    const std::vector<std::string> verify_remote{"cache", "verify", "--remote", "--remote-cache", redis.url()};
    const std::set<std::string> before = record_keys(redis);  // the rest's, and the part's when whole
    CHECK(before.count(part) == (part_whole ? 1 : 0));
    REQUIRE(before.size() == (part_whole ? 2 : 1));
    const std::string rest = *before.begin() == part ? *before.rbegin() : *before.begin();
    const Run v = w.skc(verify_remote);
    CHECK(v.status == 0);
    CHECK(v.out == redis.url() + "/0\n" + ns + "checked " + std::to_string(before.size()) + " remote " +
                       (before.size() == 1 ? "entry" : "entries") + ", all good\n");
    CHECK(chunks_left_for_ever(redis).empty());

    // Once a's leases have expired, base b, which compiled the first op without the remote as a
    // did, asks for the set: its cover downloads the rest (whole there), compiles nothing, and
    // uploads what the remote lacks (the part, when a's upload of it did not end) and the
    // composite.
    wait_for_lease(redis, /*held=*/false);
    const Run b_part = w.run("b", "", small);
    REQUIRE_MESSAGE(b_part.status == 0, b_part.err);
    const Run b = w.run("b", url);
    REQUIRE_MESSAGE(b.status == 0, b.err);
    INFO(b.out, b.err);
    CHECK(skc::parse_json(b.out).find("counts")->find("compiled")->as_int() == 0);
    CHECK(w.totals("b").find("remote")->find("hits")->as_int() == 1);
    const std::string set_key = skc::parse_json(b.out).find("key")->as_string();
    CHECK(record_keys(redis) == std::set<std::string>{part, rest, set_key});
    const Run v2 = w.skc(verify_remote);
    CHECK(v2.status == 0);
    CHECK(v2.out == redis.url() + "/0\n" + ns + "checked 3 remote entries, all good\n");

    // Base c has nothing: it downloads the composite and both parts; a hits its own composite.
    const Run c = w.run("c", url);
    REQUIRE_MESSAGE(c.status == 0, c.err);
    CHECK(skc::parse_json(c.out).find("counts")->find("compiled")->as_int() == 0);
    CHECK(w.compiler_runs("c") == 0);
    CHECK(w.totals("c").find("composite_hits")->as_int() == 1);
    CHECK(w.totals("c").find("remote")->find("hits")->as_int() == 2);
    const Run a = w.run("a", url);
    CHECK(outcome(a) == "hit");
    CHECK(skc::parse_json(a.out).find("counts")->find("compiled")->as_int() == 0);
    // Nothing refused or failed anywhere, and every base verifies clean.
    for (const char* base : {"a", "b", "c"}) {
        CHECK(w.totals(base).find("remote")->find("errors")->as_int() == 0);
        const Run vb = w.skc({"cache", "verify", "--base", (w.tmp / base).string()});
        CHECK_MESSAGE(vb.status == 0, base << ": " << vb.out);
    }
    CHECK(count(b.err + c.err + a.err, "warning") == 0);
}

}  // namespace

TEST_CASE("SIGKILL into the upload of a cover's part: no bad record in either tier, the next node uploads it") {
    kill_during_cover_upload([](const std::string& part) { return std::vector{":chunk:" + part}; }, false);
}

TEST_CASE("SIGKILL after a cover's part is sent, before its record: it expires, the next node uploads it") {
    kill_during_cover_upload(
        [](const std::string& part) {
            return std::vector{":chunk:" + part, ":chunk:" + part};
        },
        false);
}

TEST_CASE("SIGKILL after a cover's parts, before the composite's record: the next node records it") {
    kill_during_cover_upload([](const std::string&) { return std::vector<std::string>{"skc-cache-composite 1\n"}; },
                             true);
}

TEST_CASE("verify --remote: a composite whose part's record is gone is reported bad and removed, nothing else") {
    World w;
    RedisServer redis;
    const fs::path small = w.grow();
    const Run first = w.run("a", redis.url(), small);
    REQUIRE(outcome(first) == "compiled");
    const Run grown = w.run("a", redis.url());
    REQUIRE_MESSAGE(grown.status == 0, grown.err);
    const std::string part = skc::parse_json(first.out).find("key")->as_string();
    const std::string set_key = skc::parse_json(grown.out).find("key")->as_string();
    const std::string rest = fs::path(skc::parse_json(grown.out).find("package")->as_string()).stem().string();
    REQUIRE(record_keys(redis) == std::set<std::string>{part, rest, set_key});
    const std::string rest_chunks = keys(redis, "skc:*:chunk:" + rest + ":*");
    REQUIRE_FALSE(rest_chunks.empty());
    // The first part's record goes, as when Redis evicts it (its chunk goes later, or not at all).
    REQUIRE(redis.command({"DEL", "skc:CANN-1.0_host-cpu:record:" + part}) == "1");

    const std::string head = redis.url() + "/0\nCANN-1.0_host-cpu: checked 2 remote entries, 1 bad\n  " + set_key +
                             ": its part " + part + " is not the package it recorded";
    const std::vector<std::string> verify{"cache", "verify", "--remote", "--remote-cache", redis.url()};
    const Run kept = w.skc({"cache", "verify", "--remote", "--remote-cache", redis.url(), "--remote-read-only"});
    CHECK(kept.status == 1);
    CHECK(kept.out == head + "\n");
    CHECK(record_keys(redis) == std::set<std::string>{rest, set_key});

    // A node that finds the composite cannot download its part: it compiles the set (a miss of the
    // remote, not a fault of it).
    fs::create_directories(w.tmp / "b");
    std::vector<std::string> reader = w.args("b", redis.url());
    reader.push_back("--remote-read-only");
    const Run b = w.skc(reader);
    REQUIRE_MESSAGE(b.status == 0, b.err);
    CHECK(outcome(b) == "compiled");
    CHECK(skc::parse_json(b.out).find("counts")->find("compiled")->as_int() == 2);
    CHECK_MESSAGE(count(b.err, "warning") == 0, b.err);
    CHECK(w.totals("b").find("remote")->find("errors")->as_int() == 0);

    const Run removed = w.skc(verify);
    CHECK(removed.status == 1);
    CHECK(removed.out == head + " (removed)\n");
    CHECK(record_keys(redis) == std::set<std::string>{rest});
    CHECK(keys(redis, "skc:*:chunk:" + rest + ":*") == rest_chunks);
    const Run again = w.skc(verify);
    CHECK(again.status == 0);
    CHECK(again.out == redis.url() + "/0\nCANN-1.0_host-cpu: checked 1 remote entry, all good\n");
    const Run local = w.skc({"cache", "verify", "--base", (w.tmp / "a").string()});
    CHECK(local.status == 0);
    CHECK(local.out == "CANN-1.0_host-cpu: checked 3 entries, all good\n");
}

TEST_CASE("8 processes across two bases at once: one compile") {
    World w;
    RedisServer redis;
    skc_test::spit(w.stall, "");  // every process starts before the compile can end
    std::vector<TempDir> io(8);
    std::vector<skc_test::Started> started;
    for (int i = 0; i < 8; ++i) started.push_back(w.start(i % 2 ? "a" : "b", redis.url(), io[i].path()));
    std::this_thread::sleep_for(500ms);
    fs::remove(w.stall);
    std::vector<std::string> outcomes;
    for (const auto& s : started) {
        const Run r = skc_test::finish(s);
        INFO(r.err);
        CHECK(r.status == 0);
        outcomes.push_back(outcome(r));
    }
    CHECK(std::count(outcomes.begin(), outcomes.end(), "compiled") == 1);
    CHECK(std::count(outcomes.begin(), outcomes.end(), "downloaded") == 1);
    CHECK(w.compiler_runs("a") + w.compiler_runs("b") == 1);
}

TEST_CASE("Redis stopped before a compile: exit 0, one warning, the local cache whole") {
    World w;
    RedisServer redis;
    redis.stop();
    const Run a = w.run("a", redis.url());
    CHECK(a.status == 0);
    CHECK(outcome(a) == "compiled");
    CHECK(count(a.err, failed_warning) == 1);
    CHECK(a.err.find("going on with the local cache only") != std::string::npos);
    CHECK(w.skc({"cache", "verify", "--base", (w.tmp / "a").string()}).status == 0);
    CHECK(outcome(w.run("a", redis.url())) == "hit");
}

TEST_CASE("Redis killed during a compile: exit 0, one warning, no partial entry in either tier") {
    World w;
    RedisServer redis;
    skc_test::spit(w.stall, "");
    TempDir io;
    const skc_test::Started s = w.start("a", redis.url(), io.path());
    wait_for_lease(redis);
    redis.kill();
    fs::remove(w.stall);
    const Run a = skc_test::finish(s);
    CHECK(a.status == 0);
    CHECK(outcome(a) == "compiled");
    CHECK(count(a.err, failed_warning) == 1);
    CHECK(w.skc({"cache", "verify", "--base", (w.tmp / "a").string()}).status == 0);
    redis.start();
    CHECK(keys(redis, "skc:*:record:*").empty());
    // Redis back: another node compiles (nothing partial was left to download) and uploads.
    const Run b = w.run("b", redis.url());
    CHECK(outcome(b) == "compiled");
    CHECK_FALSE(keys(redis, "skc:*:record:*").empty());
}

TEST_CASE("Redis killed while a process waits on it: exit 0, a correct result, one warning") {
    World w;
    RedisServer redis;
    REQUIRE(outcome(w.run("a", redis.url())) == "compiled");
    ::kill(redis.pid(), SIGSTOP);  // b's lookup and download hang on it until it dies
    TempDir io;
    const skc_test::Started s = w.start("b", redis.url(), io.path());
    std::this_thread::sleep_for(300ms);
    ::kill(redis.pid(), SIGKILL);  // while stopped: it answers nothing more (kill() would let it go on first)
    redis.kill();
    const Run b = skc_test::finish(s);
    INFO(b.out, b.err);
    CHECK(b.status == 0);
    CHECK(outcome(b) == "compiled");
    CHECK(count(b.err, failed_warning) == 1);
    CHECK(w.skc({"cache", "verify", "--base", (w.tmp / "b").string()}).status == 0);
}

TEST_CASE("a tampered remote package is refused, compiled again and replaced") {
    World w;
    RedisServer redis;
    REQUIRE(outcome(w.run("a", redis.url())) == "compiled");
    const std::string chunk = keys(redis, "skc:*:chunk:*");
    REQUIRE_FALSE(chunk.empty());
    REQUIRE(chunk.find('\n') == std::string::npos);
    redis.command({"SETRANGE", chunk, "100", "tampered"});
    const Run v = w.skc({"cache", "verify", "--remote", "--remote-cache", redis.url(), "--remote-read-only"});
    CHECK(v.status == 1);
    CHECK(v.out.find("its package's checksum does not match the record") != std::string::npos);

    const Run b = w.run("b", redis.url());
    CHECK(b.status == 0);
    CHECK(outcome(b) == "compiled");
    CHECK(b.err.find("is refused: its package's checksum does not match the record; it is compiled here") !=
          std::string::npos);
    CHECK(count(b.err, failed_warning) == 0);
    CHECK(outcome(w.run("c", redis.url())) == "downloaded");
    CHECK(w.skc({"cache", "verify", "--remote", "--remote-cache", redis.url()}).status == 0);
}

TEST_CASE("a compiling process killed with SIGKILL: another compiles once its lease expires") {
    World w;
    RedisServer redis;
    const std::string url = redis.url() + "?lease_ttl=1500";
    skc_test::spit(w.stall, "");
    TempDir io;
    const skc_test::Started s = w.start("a", url, io.path(), /*own_group=*/true);
    wait_for_lease(redis);
    ::kill(-s.pid, SIGKILL);
    skc_test::finish(s);
    fs::remove(w.stall);
    const auto t0 = std::chrono::steady_clock::now();
    const Run b = w.run("b", url);
    CHECK(b.status == 0);
    CHECK(outcome(b) == "compiled");
    CHECK(b.err.find("another node is compiling cache key") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - t0 < 20s);
    CHECK_FALSE(keys(redis, "skc:*:record:*").empty());
    CHECK(keys(redis, "skc:*:lease:*").empty());
}

TEST_CASE("Redis evicting keys under maxmemory: a miss, not an error") {
    World w;
    RedisServer redis({"--maxmemory-policy", "allkeys-lru"});
    REQUIRE(outcome(w.run("a", redis.url())) == "compiled");
    REQUIRE_FALSE(keys(redis, "skc:*:record:*").empty());
    const std::string info = redis.command({"INFO", "memory"});
    const std::size_t at = info.find("used_memory:");
    REQUIRE(at != std::string::npos);
    const long used = std::stol(info.substr(at + 12));
    redis.command({"CONFIG", "SET", "maxmemory", std::to_string(used + (3 << 20))});
    // Writes beyond the limit: the least recently used keys (skc's, the oldest) are evicted.
    for (int i = 0; i < 12; ++i) redis.command({"SET", "filler" + std::to_string(i), std::string(512 << 10, 'x')});
    REQUIRE((keys(redis, "skc:*:record:*").empty() || keys(redis, "skc:*:chunk:*").empty()));
    const Run b = w.run("b", redis.url());
    CHECK(b.status == 0);
    CHECK(outcome(b) == "compiled");
    CHECK(count(b.err, failed_warning) == 0);
    CHECK(count(b.err, "warning") == 0);
    // b uploaded under the same limit (Redis evicts fillers for it): c downloads.
    CHECK(outcome(w.run("c", redis.url())) == "downloaded");
}

TEST_CASE("bad remote input: a bad URL is exit 2 before anything is written; verify --remote says what it needs") {
    World w;
    fs::create_directories(w.tmp / "a");
    const Run bad =
        w.skc({"compile", "--ops", w.ops.string(), "--base", (w.tmp / "a").string(), "--compiler", w.compiler,
               "--device", "host-cpu", "--toolchain-version", "1.0", "--remote-cache", "redis://u:secret@host:99999"});
    CHECK(bad.status == 2);
    CHECK(bad.err ==
          "skc compile: option 'remote_cache': remote cache URL \"redis://u:***@host:99999\": the port "
          "\"99999\" is not a number from 1 to 65535; expected redis://[user:password@]host[:port][/db]\n");
    CHECK(fs::is_empty(w.tmp / "a"));

    const Run none = skc_test::run_program(tool, w.tmp.path(), {"cache", "verify", "--remote"}, {"SKC_REMOTE_CACHE="});
    CHECK(none.status == 2);
    CHECK(none.err.starts_with(
        "skc cache verify: --remote: no remote cache; give --remote-cache URL or set SKC_REMOTE_CACHE\n"));

    RedisServer redis;
    const std::string url = redis.url();
    redis.stop();
    const Run down = w.skc({"cache", "verify", "--remote", "--remote-cache", url + "?connect_timeout=200"});
    CHECK(down.status == 3);
    CHECK(down.err.find("skc cache verify: " + url + "/0: ") == 0);
}

}  // namespace redis_remote_cache_test
