// The CachePolicy law suite over every shipped configuration, and the faults a cache must survive.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <sys/stat.h>

#include <skc/op_info_io.hpp>
#include <skc/cache_archive.hpp>
#include <skc/cache_explain.hpp>
#include <skc/policy/cache.hpp>

#include "hostile_storage.hpp"
#include "tamperable_storage.hpp"
#include "run_tool.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

/// Statistics and name sets print as their text in failed checks.
template <>
struct doctest::StringMaker<skc::CacheStats> {
    static doctest::String convert(const skc::CacheStats& s) { return ("\n" + s.encode()).c_str(); }
};
template <>
struct doctest::StringMaker<std::set<std::string>> {
    static doctest::String convert(const std::set<std::string>& v) {
        std::string out = "{";
        for (const std::string& n : v) out += (out.size() > 1 ? ", " : "") + n;
        return (out + "}").c_str();
    }
};

namespace skc_policy_cache_test {

namespace {

skc::OpRecord op(const std::string& type, std::int64_t n) {
    skc::TensorDesc t;
    t.dtype = "float";
    t.format = "ND";
    t.shape = skc::RuntimeShape{n, 8};
    skc::OpRecord r;
    r.op_type = type;
    r.inputs = {t};
    r.outputs = {t};
    return r;
}

skc::CacheKey key_of(int i, skc::KeyInputs in = {"8.0", "dev", false, {}}) {
    skc::OpSet set;
    set.insert(op("MatMulV2", i));
    set.insert(op("Add", i));
    return skc::make_cache_key(set, in);
}

/// Collects log lines of level `min` and above.
struct LogCapture {
    std::shared_ptr<std::vector<std::string>> lines = std::make_shared<std::vector<std::string>>();
    std::shared_ptr<std::mutex> mu = std::make_shared<std::mutex>();
    skc::LogLevel min = skc::LogLevel::warning;
    skc::LogSink sink() {
        return [lines = lines, mu = mu, min = min](skc::LogLevel level, std::string_view l) {
            if (level < min) return;
            std::lock_guard lock(*mu);
            lines->emplace_back(l);
        };
    }
};

/// Compiles by writing a package whose content is derived from the key; counts compiles.
struct Compiler {
    fs::path dir;
    int compiles = 0;
    fs::path operator()(const skc::CacheKey& k) {
        ++compiles;
        const fs::path p = dir / ("static_kernel_" + k.hex().substr(0, 8) + "_" + std::to_string(compiles) + ".run");
        skc_test::spit(p, "#!/bin/sh\n# package for " + k.hex() + "\n" + std::string(1000, 'k'));
        return p;
    }
    static std::string content(const skc::CacheKey& k) {
        return "#!/bin/sh\n# package for " + k.hex() + "\n" + std::string(1000, 'k');
    }
};

template <class Config>
struct Fixture;

struct FsFileLock {};
struct MemProcessLock {};

template <>
struct Fixture<FsFileLock> {
    using Cache = skc::IndexCache<skc::FilesystemStorage, skc::FileLock>;
    skc_test::TempDir dir;
    LogCapture log;
    std::unique_ptr<Cache> make(skc::CacheConfig cfg = {}) {
        cfg.log = log.sink();
        return skc::open_cache(skc::Layout(dir.path()), "8.0", "dev", std::move(cfg));
    }
    std::string package_bytes(Cache& c, const std::string& name) { return *c.storage().read(name); }
};

template <>
struct Fixture<MemProcessLock> {
    using Cache = skc::IndexCache<skc_test::TamperableStorage, skc::ProcessLock>;
    skc_test::TempDir dir;
    LogCapture log;
    skc_test::TamperableStorage storage;  // copies share objects: two caches see one store
    skc::ProcessLock locks;
    std::unique_ptr<Cache> make(skc::CacheConfig cfg = {}) {
        cfg.log = log.sink();
        return std::make_unique<Cache>(storage, locks, std::move(cfg));
    }
    std::string package_bytes(Cache& c, const std::string& name) { return *c.storage().read(name); }
};

}  // namespace

TEST_CASE_TEMPLATE("cache law: miss compiles once, then hits; the hit names the compiled package", C, FsFileLock,
                   MemProcessLock) {
    Fixture<C> fx;
    auto cache = fx.make();
    Compiler compiler{fx.dir.path()};
    const skc::CacheKey k = key_of(1);
    CHECK_FALSE(cache->lookup(k).has_value());
    auto first = cache->get_or_compile(k, [&] { return compiler(k); });
    CHECK(first.result == skc::CacheResult::compiled);
    REQUIRE(first.hit.has_value());
    CHECK(first.hit->entry.key == k.hex());
    CHECK(fx.package_bytes(*cache, first.hit->entry.package) == Compiler::content(k));
    first.hit.reset();
    auto second = cache->get_or_compile(k, [&] { return compiler(k); });
    CHECK(second.result == skc::CacheResult::hit);
    CHECK(compiler.compiles == 1);
    REQUIRE(second.hit.has_value());
    CHECK(second.hit->entry.components.empty());  // lookups do not copy them ...
    REQUIRE(cache->entries().size() == 1);
    CHECK(cache->entries().front().components == k.components);  // ... entries() has them
    CHECK(second.hit->entry.size == Compiler::content(k).size());
    const skc::CacheStats s = cache->stats();
    CHECK(s.compiles == 1);
    CHECK(s.hits == 1);
    CHECK(s.misses == 2);  // the explicit lookup and the first get_or_compile: one per call
    CHECK(fx.log.lines->empty());
}

TEST_CASE_TEMPLATE("cache law: a second cache on the same store sees the entry (a fresh process)", C, FsFileLock,
                   MemProcessLock) {
    Fixture<C> fx;
    Compiler compiler{fx.dir.path()};
    const skc::CacheKey k = key_of(2);
    {
        auto writer = fx.make();
        writer->get_or_compile(k, [&] { return compiler(k); });
    }
    auto reader = fx.make();
    auto hit = reader->lookup(k);
    REQUIRE(hit.has_value());
    CHECK(reader->verify(*hit));
    CHECK(hit->entry.ops == 2);
}

TEST_CASE_TEMPLATE("cache law: statistics survive the process through flush", C, FsFileLock, MemProcessLock) {
    Fixture<C> fx;
    Compiler compiler{fx.dir.path()};
    const skc::CacheKey k = key_of(3);
    {
        auto c = fx.make();
        c->get_or_compile(k, [&] { return compiler(k); });
        c->get_or_compile(k, [&] { return compiler(k); });
    }  // destruction flushes
    auto c = fx.make();
    const skc::CacheStats s = c->persisted_stats();
    CHECK(s.hits == 1);
    CHECK(s.misses == 1);
    CHECK(s.compiles == 1);
}

TEST_CASE_TEMPLATE("cache law: a compile that throws stores nothing and releases the key", C, FsFileLock,
                   MemProcessLock) {
    Fixture<C> fx;
    auto cache = fx.make();
    Compiler compiler{fx.dir.path()};
    const skc::CacheKey k = key_of(4);
    CHECK_THROWS_WITH(cache->get_or_compile(k, []() -> fs::path { throw std::runtime_error("compiler failed"); }),
                      "compiler failed");
    CHECK_FALSE(cache->lookup(k).has_value());
    CHECK(cache->get_or_compile(k, [&] { return compiler(k); }).result == skc::CacheResult::compiled);
}

TEST_CASE_TEMPLATE("cache law: least recently used entries go first; an entry in use never goes", C, FsFileLock,
                   MemProcessLock) {
    Fixture<C> fx;
    auto cache = fx.make();
    Compiler compiler{fx.dir.path()};
    for (int i = 10; i < 14; ++i) {
        cache->get_or_compile(key_of(i), [&] { return compiler(key_of(i)); });
        std::this_thread::sleep_for(15ms);  // distinct modification times
    }
    // Use key 10 (the oldest) and flush: it becomes the most recently used.
    cache->lookup(key_of(10)).reset();
    cache->flush();
    auto pinned = cache->lookup(key_of(11));  // in use while pruning
    REQUIRE(pinned.has_value());
    const skc::PruneReport r = cache->prune(skc::CacheLimits{0, 2});
    CHECK(r.removed == 2);
    CHECK(r.skipped_in_use == 1);
    CHECK(r.entries_left == 2);
    pinned.reset();
    CHECK(cache->lookup(key_of(10)).has_value());
    CHECK(cache->lookup(key_of(11)).has_value());
    CHECK_FALSE(cache->lookup(key_of(12)).has_value());
    CHECK_FALSE(cache->lookup(key_of(13)).has_value());
    CHECK(cache->stats().evictions == 2);
}

TEST_CASE_TEMPLATE("cache law: limits are applied after a publish, never to the entry just stored", C, FsFileLock,
                   MemProcessLock) {
    Fixture<C> fx;
    skc::CacheConfig cfg;
    cfg.limits.max_entries = 2;
    auto cache = fx.make(cfg);
    Compiler compiler{fx.dir.path()};
    for (int i = 20; i < 25; ++i) {
        cache->get_or_compile(key_of(i), [&] { return compiler(key_of(i)); });
        std::this_thread::sleep_for(15ms);
    }
    CHECK(cache->entries().size() == 2);
    CHECK(cache->lookup(key_of(24)).has_value());
    CHECK(cache->lookup(key_of(23)).has_value());
    CHECK(cache->stats().evictions == 3);
}

TEST_CASE_TEMPLATE("cache law: clear removes what is not in use", C, FsFileLock, MemProcessLock) {
    Fixture<C> fx;
    auto cache = fx.make();
    Compiler compiler{fx.dir.path()};
    for (int i = 30; i < 33; ++i) cache->get_or_compile(key_of(i), [&] { return compiler(key_of(i)); });
    auto pinned = cache->lookup(key_of(30));
    const skc::PruneReport first = cache->clear();
    CHECK(first.removed == 2);
    CHECK(first.skipped_in_use == 1);
    CHECK(first.entries_left == 1);
    pinned.reset();
    CHECK(cache->entries().size() == 1);
    CHECK(cache->clear().removed == 1);
    CHECK(cache->entries().empty());
}

TEST_CASE_TEMPLATE("cache law: a package altered in place is caught by verify and becomes a miss", C, FsFileLock,
                   MemProcessLock) {
    Fixture<C> fx;
    Compiler compiler{fx.dir.path()};
    const skc::CacheKey k = key_of(5);
    {
        auto c = fx.make();
        c->get_or_compile(k, [&] { return compiler(k); });
    }
    auto cache = fx.make();
    std::string evil = Compiler::content(k);
    evil[20] = 'X';  // same size
    if constexpr (std::is_same_v<C, MemProcessLock>) {
        fx.storage.tamper("packages/" + k.hex() + ".run", evil);  // same size, same identity
        auto hit = cache->lookup(k);
        REQUIRE(hit.has_value());          // the cheap check cannot see it ...
        CHECK_FALSE(cache->verify(*hit));  // ... the full checksum does
    } else {
        const fs::path pkg = fx.dir / "static_kernel_compile_outputs" / "static_kernel_cache" / "CANN-8.0_dev" /
                             "packages" / (k.hex() + ".run");
        std::fstream f(pkg, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(20);
        f.put('X');
        f.close();
        auto hit = cache->lookup(k);
        REQUIRE(hit.has_value());          // the same size: the cheap check passes ...
        CHECK_FALSE(cache->verify(*hit));  // ... the full checksum before first use does not
    }
    CHECK(cache->stats().corrupt == 1);
    CHECK(cache->entries().empty());  // the bad entry was removed
    REQUIRE(fx.log.lines->size() == 1);
    CHECK(fx.log.lines->front().rfind("cache entry " + k.hex() + " is unusable and treated as a miss: ", 0) == 0);
    auto again = cache->get_or_compile(k, [&] { return compiler(k); });
    CHECK(again.result == skc::CacheResult::compiled);
}

TEST_CASE("the key: order-independent, and every kernel-changing input is in it") {
    skc::OpSet a, b;
    a.insert(op("MatMulV2", 1), "x.json");
    a.insert(op("Add", 1), "y.json");
    b.insert(op("Add", 1), "renamed.json");
    b.insert(op("MatMulV2", 1), "other.json");
    const skc::KeyInputs base{"8.0", "dev", false, {"--opt=1"}};
    CHECK(skc::make_cache_key(a, base).digest == skc::make_cache_key(b, base).digest);
    skc::KeyInputs v = base;
    v.toolchain_version = "8.1";
    CHECK(skc::make_cache_key(a, v).digest != skc::make_cache_key(a, base).digest);
    v = base;
    v.device = "dev2";
    CHECK(skc::make_cache_key(a, v).digest != skc::make_cache_key(a, base).digest);
    v = base;
    v.deterministic = true;
    CHECK(skc::make_cache_key(a, v).digest != skc::make_cache_key(a, base).digest);
    v = base;
    v.compiler_options = {"--opt=2"};
    CHECK(skc::make_cache_key(a, v).digest != skc::make_cache_key(a, base).digest);
    v.compiler_options = {"--opt=1", ""};
    CHECK(skc::make_cache_key(a, v).digest != skc::make_cache_key(a, base).digest);
    skc::OpSet c = a;
    c.insert(op("Mul", 1));
    CHECK(skc::make_cache_key(c, base).digest != skc::make_cache_key(a, base).digest);
    const skc::CacheKey k = skc::make_cache_key(a, base);
    CHECK(k.describe() == "format=skc-cache-key/1\nops=" + a.set_digest().hex() +
                              "\nop_count=2\ntoolchain_version=8.0\ndevice=dev\ndeterministic=false\n"
                              "compiler_option[0]=--opt=1\n");
    skc::Options o;
    o.deterministic = true;
    o.compiler_options = {"--x"};
    const skc::KeyInputs from = skc::key_inputs(o, "8.0", "dev");
    CHECK(from.deterministic);
    CHECK(from.compiler_options == std::vector<std::string>{"--x"});
}

TEST_CASE("NoCache: always compiles, never stores") {
    skc_test::TempDir dir;
    Compiler compiler{dir.path()};
    skc::NoCache cache;
    const skc::CacheKey k = key_of(1);
    for (int i = 0; i < 2; ++i) {
        auto o = cache.get_or_compile(k, [&] { return compiler(k); });
        CHECK(o.result == skc::CacheResult::disabled);
        CHECK_FALSE(o.hit.has_value());
        CHECK(fs::exists(o.compiled_package));
    }
    CHECK(compiler.compiles == 2);
    CHECK_FALSE(cache.lookup(k).has_value());
    CHECK(cache.stats().compiles == 2);
}

TEST_CASE("open_cache: the layout of docs/spec.md section 4") {
    skc_test::TempDir dir;
    Compiler compiler{dir.path()};
    const skc::Layout layout(dir.path());
    auto cache = skc::open_cache(layout, "8.0 RC1", "Ascend 910B", skc::CacheConfig{{}, 1h, skc::null_log()});
    const skc::CacheKey k = key_of(1);
    cache->get_or_compile(k, [&] { return compiler(k); });
    cache->flush();
    const fs::path root = layout.cache_dir();
    CHECK(fs::is_regular_file(root / "CANN-8.0-RC1_Ascend-910B.json"));
    CHECK(fs::is_regular_file(root / "CANN-8.0-RC1_Ascend-910B.lock"));  // the namespace lock (statistics)
    CHECK(fs::is_regular_file(root / "CANN-8.0-RC1_Ascend-910B" / "entries" / k.hex()));
    CHECK(fs::is_regular_file(root / "CANN-8.0-RC1_Ascend-910B" / "packages" / (k.hex() + ".run")));
    CHECK(fs::is_regular_file(root / "CANN-8.0-RC1_Ascend-910B" / "keys" / ("key-" + k.hex() + ".lock")));
    const skc::Value manifest = skc::parse_json(skc_test::slurp(root / "CANN-8.0-RC1_Ascend-910B.json"));
    CHECK(manifest.find("format")->as_string() == "skc-cache");
    CHECK(manifest.find("entries")->as_string() == "CANN-8.0-RC1_Ascend-910B/entries");
}

// ---- faults on a real file system: each a counted miss with a warning, never a crash or wrong hit --------

namespace {

struct FsFault {
    skc_test::TempDir dir;
    LogCapture log;
    Compiler compiler{dir.path()};
    skc::Layout layout{dir.path()};
    skc::CacheKey bad = key_of(40), good = key_of(41);
    fs::path ns() const { return layout.cache_dir() / "CANN-8.0_dev"; }
    fs::path entry(const skc::CacheKey& k) const { return ns() / "entries" / k.hex(); }
    fs::path package(const skc::CacheKey& k) const { return ns() / "packages" / (k.hex() + ".run"); }
    std::unique_ptr<skc::IndexCache<>> open() {
        return skc::open_cache(layout, "8.0", "dev", skc::CacheConfig{{}, 1h, log.sink()});
    }
    FsFault() {
        auto c = open();
        c->get_or_compile(bad, [&] { return compiler(bad); });
        c->get_or_compile(good, [&] { return compiler(good); });
    }
    /// The fault must give a counted miss with one warning naming `reason`, remove only the bad
    /// entry, keep the good one, and recompile the bad key cleanly.
    /// Faults in the package's bytes (same size) pass the lookup's cheap check and are caught by
    /// verify(), before first use (`by_verify`).
    void expect_miss(const std::string& reason, bool by_verify = false) {
        auto c = open();
        if (by_verify) {
            auto h = c->lookup(bad);
            REQUIRE(h.has_value());
            CHECK_FALSE(c->verify(*h));
        } else {
            CHECK_FALSE(c->lookup(bad).has_value());
        }
        CHECK(c->stats().corrupt == 1);
        REQUIRE(log.lines->size() == 1);
        CHECK(log.lines->front() == "cache entry " + bad.hex() + " is unusable and treated as a miss: " + reason);
        CHECK_FALSE(fs::exists(entry(bad)));
        auto g = c->lookup(good);
        REQUIRE(g.has_value());
        CHECK(c->verify(*g));
        g.reset();
        auto again = c->get_or_compile(bad, [&] { return compiler(bad); });
        CHECK(again.result == skc::CacheResult::compiled);
        CHECK(skc_test::slurp(package(bad)) == Compiler::content(bad));
    }
};

}  // namespace

TEST_CASE("fault: a truncated entry") {
    FsFault f;
    const std::string text = skc_test::slurp(f.entry(f.bad));
    skc_test::spit(f.entry(f.bad), text.substr(0, text.size() / 2));
    f.expect_miss("the entry is unreadable (truncated or altered)");
}

TEST_CASE("fault: a garbage entry") {
    FsFault f;
    skc_test::spit(f.entry(f.bad), std::string("\x00\xff garbage \n\n", 13));
    f.expect_miss("the entry is unreadable (truncated or altered)");
}

TEST_CASE("fault: an entry whose one field was edited (its check line no longer matches)") {
    FsFault f;
    std::string text = skc_test::slurp(f.entry(f.bad));
    const auto at = text.find("size ");
    text[at + 5] = text[at + 5] == '9' ? '8' : '9';
    skc_test::spit(f.entry(f.bad), text);
    f.expect_miss("the entry is unreadable (truncated or altered)");
}

TEST_CASE("fault: an entry naming a missing package") {
    FsFault f;
    fs::remove(f.package(f.bad));
    f.expect_miss("the package is missing");
}

TEST_CASE("fault: a package of another size") {
    FsFault f;
    std::ofstream(f.package(f.bad), std::ios::app) << "tail";
    const auto size = Compiler::content(f.bad).size();
    f.expect_miss("the package's size is " + std::to_string(size + 4) + " bytes, the entry says " +
                  std::to_string(size));
}

TEST_CASE("fault: a package replaced by a symlink") {
    FsFault f;
    const fs::path elsewhere = f.dir / "elsewhere.run";
    skc_test::spit(elsewhere, Compiler::content(f.bad));
    fs::remove(f.package(f.bad));
    fs::create_symlink(elsewhere, f.package(f.bad));
    f.expect_miss("the package is not a regular file (a symbolic link or a folder)");
    CHECK(skc_test::slurp(elsewhere) == Compiler::content(f.bad));  // the link target is untouched
}

TEST_CASE("fault: a package replaced by another file of the same size") {
    FsFault f;
    std::string evil = Compiler::content(f.bad);
    evil[15] = '!';
    const fs::path tmp = f.dir / "swap.run";
    skc_test::spit(tmp, evil);
    fs::rename(tmp, f.package(f.bad));
    f.expect_miss("the package's checksum does not match the entry", /*by_verify=*/true);
}

TEST_CASE("fault: a package changed in place, after this node checked it once") {
    FsFault f;
    {
        auto c = f.open();
        auto h = c->lookup(f.bad);
        REQUIRE(h.has_value());
        CHECK(c->verify(*h));  // checked, and remembered for this node
    }
    std::fstream p(f.package(f.bad), std::ios::in | std::ios::out | std::ios::binary);
    p.seekp(15);
    p.put('!');
    p.close();  // a new change time: the node's memo no longer matches, so it is read again
    f.expect_miss("the package's checksum does not match the entry", /*by_verify=*/true);
}

// ---- copies: entries are identified by content, not by the files' device, inode or times ----------------

namespace {

/// Two compiled entries in `from`'s cache, the base copied to `to` by `copy`, then the copy opened:
/// both keys must hit without compiling, and verify_all must find nothing wrong.
void expect_copy_hits(const std::function<void(const fs::path& from, const fs::path& to)>& copy) {
    skc_test::TempDir dir;
    const fs::path a = dir / "a", b = dir / "b";
    fs::create_directories(a);
    Compiler compiler{dir.path()};
    const skc::CacheKey k1 = key_of(70), k2 = key_of(71);
    {
        auto c = skc::open_cache(skc::Layout(a), "8.0", "dev", skc::CacheConfig{{}, 1h, skc::null_log()});
        c->get_or_compile(k1, [&] { return compiler(k1); });
        c->get_or_compile(k2, [&] { return compiler(k2); });
    }
    copy(a, b);
    LogCapture log;
    auto c = skc::open_cache(skc::Layout(b), "8.0", "dev", skc::CacheConfig{{}, 1h, log.sink()});
    for (const skc::CacheKey& k : {k1, k2}) {
        auto out = c->get_or_compile(k, [&]() -> fs::path { throw std::logic_error("compiled a key the copy has"); });
        CHECK(out.result == skc::CacheResult::hit);
        REQUIRE(out.hit.has_value());
        CHECK(skc_test::slurp(*out.hit->package_path) == Compiler::content(k));
    }
    const skc::VerifyReport r = c->verify_all();
    CHECK(r.checked == 2);
    CHECK(r.bad.empty());
    CHECK(c->stats().corrupt == 0);
    CHECK(log.lines->empty());
}

void run(const std::vector<std::string>& argv) {
    const skc_test::Run r = skc_test::run_program(argv.front(), {}, {argv.begin() + 1, argv.end()});
    REQUIRE_MESSAGE(r.status == 0, argv.front(), ": ", r.err);
}

}  // namespace

TEST_CASE("copies hit: cp -r (new inodes and times)") {
    expect_copy_hits([](const fs::path& from, const fs::path& to) {
        run({"/bin/cp", "-r", from.string(), to.string()});
    });
}

TEST_CASE("copies hit: a tar round trip") {
    expect_copy_hits([](const fs::path& from, const fs::path& to) {
        const std::string tarball = (from.parent_path() / "cache.tar").string();
        run({"/bin/tar", "-C", from.string(), "-cf", tarball, "."});
        fs::create_directories(to);
        run({"/bin/tar", "-C", to.string(), "-xf", tarball});
    });
}

TEST_CASE("copies hit: the packages' mode changed (chmod)") {
    expect_copy_hits([](const fs::path& from, const fs::path& to) {
        fs::rename(from, to);
        for (const auto& e : fs::recursive_directory_iterator(to))
            if (e.is_regular_file() && e.path().extension() == ".run")
                fs::permissions(e.path(), fs::perms::owner_read | fs::perms::group_read);
    });
}

TEST_CASE(
    "a node checks a package once: later caches on the node trust its memo (a changed file: see the fault cases)") {
    skc_test::TempDir dir;
    skc_test::TamperableStorage store;
    skc::ProcessLock locks;
    Compiler compiler{dir.path()};
    const skc::CacheKey k = key_of(72);
    auto make = [&] {
        return std::make_unique<skc::IndexCache<skc_test::TamperableStorage, skc::ProcessLock>>(
            store, locks, skc::CacheConfig{{}, 1h, skc::null_log()});
    };
    make()->get_or_compile(k, [&] { return compiler(k); });
    CHECK(store.list("verified").empty());  // a package just compiled here was never checked
    {
        auto c = make();
        auto h = c->lookup(k);
        REQUIRE(h.has_value());
        CHECK(c->verify(*h));  // read in full once ...
    }
    CHECK(store.list("verified") == std::vector<std::string>{"verified/" + k.hex() + "." + skc::detail::node_name()});
    // Bytes changed under the same identity (what TamperableStorage::tamper models): the memo
    // says this node checked this very file, so the package is not read again.
    std::string evil = Compiler::content(k);
    evil[3] = '#';
    store.tamper("packages/" + k.hex() + ".run", evil);
    {
        auto c = make();
        auto h = c->lookup(k);
        REQUIRE(h.has_value());
        CHECK(c->verify(*h));  // ... and not again (the full check is verify_all's)
        h.reset();
        const skc::VerifyReport r = c->verify_all();
        REQUIRE(r.bad.size() == 1);
        CHECK(r.bad[0].removed);
        CHECK(store.list("verified").empty());  // removed with its entry
    }
}

TEST_CASE("fault: verify_all finds what a lookup cannot: same size, same identity, other bytes") {
    skc_test::TempDir dir;
    skc_test::TamperableStorage store;
    skc::ProcessLock locks;
    Compiler compiler{dir.path()};
    skc::IndexCache<skc_test::TamperableStorage, skc::ProcessLock> cache(store, locks,
                                                                         skc::CacheConfig{{}, 1h, skc::null_log()});
    const skc::CacheKey a = key_of(50), b = key_of(51);
    cache.get_or_compile(a, [&] { return compiler(a); });
    cache.get_or_compile(b, [&] { return compiler(b); });
    std::string evil = Compiler::content(a);
    evil[30] = '?';
    store.tamper("packages/" + a.hex() + ".run", evil);
    store.write("entries/" + std::string(32, 'f'), "not an entry");
    const skc::VerifyReport r = cache.verify_all();
    CHECK(r.checked == 3);
    REQUIRE(r.bad.size() == 2);
    CHECK(r.bad[0].key == a.hex());
    CHECK(r.bad[0].reason == "the package's checksum does not match the entry");
    CHECK(r.bad[0].removed);
    CHECK(r.bad[1].key == std::string(32, 'f'));
    CHECK(r.bad[1].reason == "the entry is unreadable (truncated or altered)");
    CHECK(r.bad[1].removed);
    CHECK(cache.entries().size() == 1);
    CHECK(cache.lookup(b).has_value());
}

// ---- a hostile storage ---------------------------------------------------------------------------------

TEST_CASE("hostile storage that throws: the error propagates, nothing half-stored is ever a hit") {
    skc_test::TempDir dir;
    Compiler compiler{dir.path()};
    skc_test::HostileStorage store(skc_test::HostileStorage::Mode::throw_first, 0);  // the package import fails
    skc::IndexCache<skc_test::HostileStorage, skc::ProcessLock> cache(store, skc::ProcessLock{},
                                                                      skc::CacheConfig{{}, 1h, skc::null_log()});
    const skc::CacheKey k = key_of(60);
    CHECK_THROWS_WITH(cache.get_or_compile(k, [&] { return compiler(k); }),
                      ("hostile storage: write of packages/" + k.hex() + ".run failed").c_str());
    CHECK_FALSE(cache.lookup(k).has_value());
    store.fail_after(1);  // the package succeeds, the entry fails
    CHECK_THROWS_WITH(cache.get_or_compile(k, [&] { return compiler(k); }),
                      ("hostile storage: write of entries/" + k.hex() + " failed").c_str());
    CHECK_FALSE(cache.lookup(k).has_value());  // an orphan package is no entry
    store.fail_after(-1);
    CHECK(cache.get_or_compile(k, [&] { return compiler(k); }).result == skc::CacheResult::compiled);
    CHECK(cache.get_or_compile(k, [&] { return compiler(k); }).result == skc::CacheResult::hit);
    CHECK(compiler.compiles == 3);
}

TEST_CASE("hostile storage that writes half an entry: a counted miss, then a clean rebuild") {
    skc_test::TempDir dir;
    Compiler compiler{dir.path()};
    skc_test::HostileStorage store(skc_test::HostileStorage::Mode::half_write, 1);  // package ok, entry half
    skc::IndexCache<skc_test::HostileStorage, skc::ProcessLock> cache(store, skc::ProcessLock{},
                                                                      skc::CacheConfig{{}, 1h, skc::null_log()});
    const skc::CacheKey k = key_of(61);
    CHECK_THROWS_AS(cache.get_or_compile(k, [&] { return compiler(k); }), std::runtime_error);
    REQUIRE(store.inner().read("entries/" + k.hex()).has_value());  // the half entry is there
    store.fail_after(-1);
    CHECK_FALSE(cache.lookup(k).has_value());
    CHECK(cache.stats().corrupt == 1);
    auto o = cache.get_or_compile(k, [&] { return compiler(k); });
    CHECK(o.result == skc::CacheResult::compiled);
    CHECK(*store.read(o.hit->entry.package) == Compiler::content(k));
}

TEST_CASE("leftovers of killed writers are removed by prune, clear and verify_all, and nothing else is") {
    skc_test::TempDir dir;
    Compiler compiler{dir.path()};
    const skc::Layout layout(dir.path());
    auto cache = skc::open_cache(layout, "8.0", "dev", skc::CacheConfig{{}, 1h, skc::null_log()});
    const skc::CacheKey k = key_of(70);
    cache->get_or_compile(k, [&] { return compiler(k); });
    const fs::path ns = layout.cache_dir() / "CANN-8.0_dev";
    // A dead writer's temporary (pid 2^22+1 is above Linux's pid limit: never a live process), a live
    // writer's temporary (this process), and a package whose entry was never written.
    skc_test::spit(ns / "packages" / ".tmp.4194305.0.x.run", "half");
    skc_test::spit(ns / "entries" / (".tmp." + std::to_string(::getpid()) + ".9.y"), "in progress");
    const std::string orphan(32, 'a');
    skc_test::spit(ns / "packages" / (orphan + ".run"), "orphan package");
    const skc::PruneReport r = cache->prune(skc::CacheLimits{1u << 30, 0});
    CHECK(r.leftovers_removed == 2);
    CHECK(r.removed == 0);
    CHECK_FALSE(fs::exists(ns / "packages" / ".tmp.4194305.0.x.run"));
    CHECK_FALSE(fs::exists(ns / "packages" / (orphan + ".run")));
    CHECK(fs::exists(ns / "entries" / (".tmp." + std::to_string(::getpid()) + ".9.y")));  // its writer lives
    CHECK(cache->lookup(k).has_value());
    skc_test::spit(ns / "packages" / (orphan + ".run"), "orphan package");
    CHECK(cache->verify_all().leftovers_removed == 1);
}

TEST_CASE("durations in messages are exact to the millisecond (every timeout message uses them)") {
    CHECK(skc::detail::seconds_text(1000ms) == "1 s");
    CHECK(skc::detail::seconds_text(1500ms) == "1.5 s");
    CHECK(skc::detail::seconds_text(300ms) == "0.3 s");
    CHECK(skc::detail::seconds_text(2999ms) == "2.999 s");
    CHECK(skc::detail::seconds_text(7200000ms) == "7200 s");
    CHECK(skc::detail::seconds_text(std::chrono::nanoseconds(2'000'999'999)) == "2 s");  // cut, not rounded
    CHECK(skc::detail::seconds_text(std::chrono::seconds(600) + std::chrono::milliseconds(5)) == "600.005 s");
}

TEST_CASE("statistics: one hit or one miss per call; a hit that fails verification is a miss") {
    skc_test::TempDir dir;
    skc_test::TamperableStorage store;
    Compiler compiler{dir.path()};
    skc::IndexCache<skc_test::TamperableStorage, skc::ProcessLock> cache(store, skc::ProcessLock{},
                                                                         skc::CacheConfig{{}, 1h, skc::null_log()});
    const skc::CacheKey k = key_of(80);
    cache.get_or_compile(k, [&] { return compiler(k); });
    std::string evil = Compiler::content(k);
    evil[9] = '#';
    store.tamper("packages/" + k.hex() + ".run", evil);
    {
        skc::IndexCache<skc_test::TamperableStorage, skc::ProcessLock> fresh(store, skc::ProcessLock{},
                                                                             skc::CacheConfig{{}, 1h, skc::null_log()});
        const auto o = fresh.get_or_compile(k, [&] { return compiler(k); });
        CHECK(o.result == skc::CacheResult::compiled);
        const skc::CacheStats s = fresh.stats();
        CHECK(s.hits == 0);
        CHECK(s.misses == 1);
        CHECK(s.corrupt == 1);
        CHECK(s.compile_time_saved_ns == 0);
        fresh.get_or_compile(k, [&] { return compiler(k); });
        CHECK(fresh.stats().hits == 1);
    }
}

TEST_CASE("FilesystemStorage: a symlink, folder or FIFO where an entry should be is no entry, and verify removes it") {
    skc_test::TempDir dir;
    const skc::Layout layout(dir.path());
    auto cache = skc::open_cache(layout, "8.0", "dev", skc::CacheConfig{{}, 1h, skc::null_log()});
    const fs::path entries = layout.cache_dir() / "CANN-8.0_dev" / "entries";
    fs::create_directories(entries);
    skc_test::spit(dir / "planted", "x");
    fs::create_symlink(dir / "planted", entries / std::string(32, 'a'));
    fs::create_directory(entries / std::string(32, 'b'));
    REQUIRE(::mkfifo((entries / std::string(32, 'c')).c_str(), 0644) == 0);
    CHECK(cache->entries().empty());
    const skc::VerifyReport r = cache->verify_all();
    CHECK(r.checked == 3);
    CHECK(r.bad.size() == 3);
    CHECK(fs::is_empty(entries));
    CHECK(skc_test::slurp(dir / "planted") == "x");  // the link was removed, not its target
}

TEST_CASE("limits: the caller, then SKC_CACHE_MAX_SIZE, then the cache folder's config, then 5 GiB") {
    CHECK(skc::parse_size("10G") == std::uint64_t{10} << 30);
    CHECK(skc::parse_size("1024k") == std::uint64_t{1} << 20);
    CHECK(skc::parse_size("65536") == 65536u);
    CHECK(skc::parse_size("0") == 0u);
    CHECK_FALSE(skc::parse_size("").has_value());
    CHECK_FALSE(skc::parse_size("G").has_value());
    CHECK_FALSE(skc::parse_size("-1").has_value());
    CHECK_FALSE(skc::parse_size("1.5G").has_value());
    CHECK_FALSE(skc::parse_size("16777216T").has_value());  // 2^64: does not fit

    skc_test::TempDir dir;
    const fs::path root = dir / "cache";
    fs::create_directories(root);
    ::unsetenv("SKC_CACHE_MAX_SIZE");
    skc::EffectiveLimits e = skc::effective_cache_limits({}, root);
    CHECK(e.limits.max_bytes == std::uint64_t{5} << 30);
    CHECK(e.limits.max_entries == 0);
    CHECK(e.size_from == skc::LimitSource::default_value);

    skc::write_cache_limits(root, {std::uint64_t{1} << 20, std::nullopt});
    skc::write_cache_limits(root, {std::nullopt, 7});  // fields not given are kept
    CHECK(skc_test::slurp(root / "config") == "max_size 1048576\nmax_entries 7\n");
    e = skc::effective_cache_limits({}, root);
    CHECK(e.limits.max_bytes == std::uint64_t{1} << 20);
    CHECK(e.limits.max_entries == 7);
    CHECK(e.size_from == skc::LimitSource::cache_folder);
    CHECK(e.entries_from == skc::LimitSource::cache_folder);

    ::setenv("SKC_CACHE_MAX_SIZE", "2M", 1);
    e = skc::effective_cache_limits({}, root);
    CHECK(e.limits.max_bytes == std::uint64_t{2} << 20);
    CHECK(e.size_from == skc::LimitSource::environment);
    e = skc::effective_cache_limits({3000, 2}, root);
    CHECK(e.limits.max_bytes == 3000);
    CHECK(e.limits.max_entries == 2);
    CHECK(e.size_from == skc::LimitSource::caller);

    ::setenv("SKC_CACHE_MAX_SIZE", "lots", 1);
    CHECK_THROWS_WITH(skc::effective_cache_limits({}, root), doctest::Contains("value \"lots\" is not a size"));
    ::unsetenv("SKC_CACHE_MAX_SIZE");

    // A folder's limit reaches every cache opened on it: the second publish evicts the first entry.
    skc::write_cache_limits(root, {0, 1});
    Compiler compiler{dir.path()};
    auto cache = skc::open_cache(root, "8.0", "dev", skc::CacheConfig{{}, 1h, skc::null_log()});
    const skc::CacheKey a = key_of(1), b = key_of(2);
    cache->get_or_compile(a, [&] { return compiler(a); });
    cache->get_or_compile(b, [&] { return compiler(b); });
    CHECK_FALSE(cache->lookup(a).has_value());
    CHECK(cache->lookup(b).has_value());
}

TEST_CASE("cache_mode read-only: hits, compiles a miss without storing it, and writes nothing at all") {
    skc_test::TempDir dir;
    Compiler compiler{dir.path()};
    const fs::path root = dir / "cache";
    const skc::CacheKey stored = key_of(1), missing = key_of(2), bad = key_of(3);
    {
        auto rw = skc::open_cache(root, "8.0", "dev", skc::CacheConfig{{}, 1h, skc::null_log()});
        rw->get_or_compile(stored, [&] { return compiler(stored); });
        rw->get_or_compile(bad, [&] { return compiler(bad); });
    }
    // A package changed in size: a writer would remove the entry; a reader must leave it.
    skc_test::spit(root / "CANN-8.0_dev" / "packages" / (bad.hex() + ".run"), "short");
    const auto before = skc_test::snapshot_with_times(root);

    LogCapture log;
    skc::CacheConfig ro{{}, 1h, log.sink()};
    ro.mode = skc::CacheMode::read_only;
    {
        auto cache = skc::open_cache(root, "8.0", "dev", ro);
        auto hit = cache->get_or_compile(stored, [&] { return compiler(stored); });
        CHECK(hit.result == skc::CacheResult::hit);
        CHECK(compiler.compiles == 2);
        auto miss = cache->get_or_compile(missing, [&] { return compiler(missing); });
        CHECK(miss.result == skc::CacheResult::compiled);
        CHECK_FALSE(miss.hit.has_value());
        CHECK(fs::is_regular_file(miss.compiled_package));
        CHECK(compiler.compiles == 3);
        auto again = cache->get_or_compile(bad, [&] { return compiler(bad); });
        CHECK(again.result == skc::CacheResult::compiled);
        CHECK(cache->stats().corrupt == 1);
        CHECK(cache->stats().hits == 1);
        CHECK(cache->stats().misses == 2);
        CHECK_THROWS_WITH(cache->publish(missing, miss.compiled_package),
                          doctest::Contains("the cache is read-only (cache_mode): cannot store a package"));
        CHECK_THROWS_WITH(cache->clear(), doctest::Contains("read-only"));
        CHECK_THROWS_WITH(cache->zero_stats(), doctest::Contains("read-only"));
        cache->flush();
    }
    CHECK(skc_test::snapshot_with_times(root) == before);
    REQUIRE(log.lines->size() == 1);
    CHECK(log.lines->front().find("unusable and treated as a miss") != std::string::npos);

    // A cache folder that is not there: every lookup misses and nothing is created.
    auto none = skc::open_cache(dir / "none", "8.0", "dev", ro);
    CHECK(none->get_or_compile(stored, [&] { return compiler(stored); }).result == skc::CacheResult::compiled);
    none.reset();
    CHECK_FALSE(fs::exists(dir / "none"));
}

TEST_CASE("cache_mode read-only: a reader waits for a writer compiling the key, then hits") {
    skc_test::TempDir dir;
    const fs::path root = dir / "cache";
    const skc::CacheKey k = key_of(5);
    Compiler compiler{dir.path()};
    auto writer = skc::open_cache(root, "8.0", "dev", skc::CacheConfig{{}, 1h, skc::null_log()});
    skc::CacheConfig ro{{}, 1h, skc::null_log()};
    ro.mode = skc::CacheMode::read_only;
    std::atomic<bool> compiling{false};
    std::thread t([&] {
        writer->get_or_compile(k, [&] {
            compiling = true;
            std::this_thread::sleep_for(300ms);
            return compiler(k);
        });
    });
    while (!compiling) std::this_thread::sleep_for(1ms);
    auto reader = skc::open_cache(root, "8.0", "dev", ro);
    bool reader_compiled = false;
    auto out = reader->get_or_compile(k, [&] {
        reader_compiled = true;
        return compiler(k);
    });
    t.join();
    CHECK(out.result == skc::CacheResult::hit);
    CHECK_FALSE(reader_compiled);
}

namespace {

/// The key of ops MatMulV2 [i, 8] for i in [first, last): the sets of ranges lie inside each other.
skc::CacheKey range_key(int first, int last) {
    skc::OpSet set;
    for (int i = first; i < last; ++i) set.insert(op("MatMulV2", i));
    skc::CacheKey k = skc::make_cache_key(set, {"8.0", "dev", false, {}});
    for (const skc::OpSet::Entry& e : set) k.ops.push_back(skc::KeyOp{e.digest, e.digest.hex() + ".json"});
    return k;
}

template <class Guard>
std::vector<skc::CachePart> parts_of(const skc::CacheCover<Guard>& c) {
    std::vector<skc::CachePart> out;
    for (const auto& h : c.parts) out.push_back(skc::CachePart{h.entry.key, h.entry.size, h.entry.checksum});
    return out;
}

}  // namespace

TEST_CASE_TEMPLATE("composites: a cover once recorded is one lookup; it goes with a part, never while in use", C,
                   FsFileLock, MemProcessLock) {
    Fixture<C> fx;
    auto cache = fx.make();
    Compiler compiler{fx.dir.path()};
    const skc::CacheKey a = range_key(0, 4), b = range_key(4, 8), u = range_key(0, 8);
    for (const skc::CacheKey& k : {a, b}) cache->get_or_compile(k, [&] { return compiler(k); });

    // The first cover of the 8 reads the entries: both parts, nothing left.
    std::vector<skc::CachePart> parts;
    {
        const auto first = cache->cover(u);
        CHECK_FALSE(first.composite);
        CHECK(first.covered.size() == 8);
        parts = parts_of(first);
    }
    REQUIRE(parts.size() == 2);
    cache->record_composite(u, parts, 5ms);
    const std::optional<skc::CompositeEntry> recorded = cache->composite(u.hex());
    REQUIRE(recorded.has_value());
    CHECK(recorded->ops == 8);
    CHECK(recorded->compile_ns == 5000000);
    CHECK(recorded->parts.size() == 2);

    // The next is the composite: its parts in order, one hit, one composite hit.
    const skc::CacheStats before = cache->stats();
    {
        const auto again = cache->cover(u);
        CHECK(again.composite);
        REQUIRE(again.parts.size() == 2);
        for (std::size_t i = 0; i < 2; ++i) {
            CHECK(again.parts[i].entry.key == parts[i].key);
            CHECK(again.parts[i].entry.checksum == parts[i].checksum);
            CHECK(fx.package_bytes(*cache, again.parts[i].entry.package).size() == parts[i].size);
        }
        CHECK(cache->stats().hits == before.hits + 1);
        CHECK(cache->stats().composite_hits == before.composite_hits + 1);
        CHECK(cache->stats().compile_time_saved_ns == before.compile_time_saved_ns + 5000000);
        // In use, it keeps its parts: clear() removes neither.
        const skc::PruneReport kept = cache->clear();
        CHECK(kept.removed == 0);
        CHECK(kept.skipped_in_use == 3);  // the composite and both parts
        CHECK(cache->entries().size() == 2);
        CHECK(cache->composite(u.hex()).has_value());
        CHECK(cache->verify_all().bad.empty());
    }

    // A read-only cache records nothing.
    {
        skc::CacheConfig ro;
        ro.mode = skc::CacheMode::read_only;
        auto reader = fx.make(ro);
        const skc::CacheKey v = range_key(0, 6);
        reader->record_composite(v, parts, 1ms);
        CHECK_FALSE(reader->composite(v.hex()).has_value());
    }

    // Over the limit of one entry, the least recently used part goes, and the composite with it.
    const skc::PruneReport pruned = cache->prune(skc::CacheLimits{0, 1});
    CHECK(pruned.removed == 2);  // a part and the composite
    CHECK(cache->entries().size() == 1);
    CHECK_FALSE(cache->composite(u.hex()).has_value());
    CHECK(cache->composites().empty());
}

TEST_CASE_TEMPLATE("composites: a part replaced, removed or damaged is found; the composite is dropped, not the part",
                   C, FsFileLock, MemProcessLock) {
    Fixture<C> fx;
    auto cache = fx.make();
    Compiler compiler{fx.dir.path()};
    const skc::CacheKey a = range_key(0, 4), b = range_key(4, 8), u = range_key(0, 8);
    for (const skc::CacheKey& k : {a, b}) cache->get_or_compile(k, [&] { return compiler(k); });
    auto record = [&] { cache->record_composite(u, parts_of(cache->cover(u)), 1ms); };
    record();
    REQUIRE(cache->composite(u.hex()).has_value());

    // Part a published again with other bytes of the same size: the composite is not used (the
    // cover is found by reading the entries again) and is dropped; a is kept.
    const fs::path other = fx.dir / "other.run";
    skc_test::spit(other, std::string(Compiler::content(a).size(), 'x'));
    cache->publish(a, other);
    {
        auto fresh = fx.make();  // another process: nothing checked yet
        const auto c = fresh->cover(u);
        CHECK_FALSE(c.composite);
        CHECK(c.parts.size() == 2);
        CHECK(fresh->stats().composite_hits == 0);
    }
    CHECK_FALSE(cache->composite(u.hex()).has_value());
    CHECK(cache->entries().size() == 2);

    // An altered composite is no composite: dropped, and the entries answer.
    record();
    cache->storage().write("composites/" + u.hex(), "skc-cache-composite 1\nkey " + u.hex() + "\ncheck 00\n");
    {
        auto fresh = fx.make();
        CHECK_FALSE(fresh->cover(u).composite);
    }
    CHECK_FALSE(cache->composite(u.hex()).has_value());
    CHECK_FALSE(cache->storage().stat("composites/" + u.hex()).has_value());

    // A part's entry gone: verify_all names the composite and removes it.
    record();
    cache->storage().remove("entries/" + b.hex());
    const skc::VerifyReport v = cache->verify_all();
    REQUIRE(v.bad.size() == 1);
    CHECK(v.bad[0].key == u.hex());
    CHECK(v.bad[0].reason == "its part " + b.hex() + " is no longer the package it recorded");
    CHECK(v.bad[0].removed);
    CHECK_FALSE(cache->composite(u.hex()).has_value());

    // The set's own package replaces a composite.
    cache->get_or_compile(b, [&] { return compiler(b); });
    record();
    REQUIRE(cache->composite(u.hex()).has_value());
    CHECK(cache->get_or_compile(u, [&] { return compiler(u); }).result == skc::CacheResult::compiled);
    CHECK_FALSE(cache->composite(u.hex()).has_value());
    CHECK(cache->cover(u).whole);
}

TEST_CASE_TEMPLATE("composites: verify_all removes a composite whose text is unreadable, says so, and keeps its parts",
                   C, FsFileLock, MemProcessLock) {
    Fixture<C> fx;
    auto cache = fx.make();
    Compiler compiler{fx.dir.path()};
    const skc::CacheKey a = range_key(0, 4), b = range_key(4, 8), u = range_key(0, 8);
    for (const skc::CacheKey& k : {a, b}) cache->get_or_compile(k, [&] { return compiler(k); });
    const std::string name = "composites/" + u.hex();
    cache->record_composite(u, parts_of(cache->cover(u)), 1ms);
    const std::string text = *cache->storage().read(name);
    // The parts as they are: their entries and packages, byte for byte.
    auto parts_now = [&] {
        std::vector<std::optional<std::string>> out;
        for (const skc::CacheKey& k : {a, b})
            for (const std::string& n : {"entries/" + k.hex(), "packages/" + k.hex() + ".run", "oplists/" + k.hex()})
                out.push_back(cache->storage().read(n));
        return out;
    };
    const std::vector<std::optional<std::string>> parts = parts_now();
    std::string altered = text;
    altered[altered.find("\nops 8\n") + 5] = '9';
    const std::vector<std::pair<const char*, std::string>> garbled{
        {"cut in half", text.substr(0, text.size() / 2)},
        {"without its last line", text.substr(0, text.rfind('\n', text.size() - 2) + 1)},
        {"one field altered (its check line no longer matches)", altered},
        {"empty", ""},
        {"not text", std::string("\0\xff\x01garbage", 10)},
    };
    for (const auto& g : garbled) {  // not a structured binding: INFO captures it in a lambda
        INFO(g.first);
        cache->storage().write(name, g.second);
        const skc::VerifyReport v = cache->verify_all();
        CHECK(v.checked == 3);
        REQUIRE(v.bad.size() == 1);
        CHECK(v.bad[0].key == u.hex());
        CHECK(v.bad[0].reason == "the composite is unreadable (truncated or altered)");
        CHECK(v.bad[0].removed);
        CHECK_FALSE(cache->storage().stat(name).has_value());
        CHECK(parts_now() == parts);
        const skc::VerifyReport clean = cache->verify_all();
        CHECK(clean.checked == 2);
        CHECK(clean.bad.empty());
        // The entries cover the set again, and the cover is recorded anew.
        {
            const auto c = cache->cover(u);
            CHECK_FALSE(c.composite);
            CHECK(c.covered.size() == 8);
        }
        cache->record_composite(u, parts_of(cache->cover(u)), 1ms);
        CHECK(cache->composite(u.hex()).has_value());
    }
    CHECK(fx.log.lines->empty());
}

TEST_CASE_TEMPLATE(
    "composites: a part's package of another size drops the composite at the lookup; the entries cover the set "
    "again",
    C, FsFileLock, MemProcessLock) {
    Fixture<C> fx;
    fx.log.min = skc::LogLevel::info;
    auto cache = fx.make();
    Compiler compiler{fx.dir.path()};
    const skc::CacheKey a = range_key(0, 4), b = range_key(4, 8), u = range_key(0, 8);
    for (const skc::CacheKey& k : {a, b}) cache->get_or_compile(k, [&] { return compiler(k); });
    const std::string package = "packages/" + a.hex() + ".run", b_package = "packages/" + b.hex() + ".run";
    const std::string b_bytes = *cache->storage().read(b_package);
    const std::size_t size = Compiler::content(a).size();
    for (const std::size_t other : {size / 2, size + 100}) {  // cut short, then grown
        INFO("part a's package of " << other << " bytes, not " << size);
        cache->record_composite(u, parts_of(cache->cover(u)), 1ms);
        REQUIRE(cache->composite(u.hex()).has_value());
        fx.log.lines->clear();
        if constexpr (std::is_same_v<C, MemProcessLock>) {
            std::string bytes = Compiler::content(a);
            bytes.resize(other, 'k');
            fx.storage.write(package, bytes);
        } else {
            fs::resize_file(*skc::StorageTraits<skc::FilesystemStorage>::local_path(cache->storage(), package), other);
        }
        auto fresh = fx.make();  // another process
        {
            const auto c = fresh->cover(u);
            CHECK_FALSE(c.composite);
            REQUIRE(c.parts.size() == 1);  // b; a's ops are the rest, for the host to compile
            CHECK(c.parts[0].entry.key == b.hex());
            CHECK(c.covered.size() == 4);
        }
        CHECK(*fx.log.lines ==
              std::vector<std::string>{"cache composite " + u.hex() + " is not used: the package of its part " +
                                           a.hex() + " is missing or has another size",
                                       "cache entry " + a.hex() +
                                           " is unusable and treated as a miss: the package's size is " +
                                           std::to_string(other) + " bytes, the entry says " + std::to_string(size)});
        CHECK_FALSE(fresh->composite(u.hex()).has_value());
        CHECK_FALSE(fresh->storage().stat(package).has_value());
        CHECK(*fresh->storage().read(b_package) == b_bytes);
        CHECK(fresh->stats().composite_hits == 0);
        // The rest compiled under a's key, the cover recorded again: the next lookup is the
        // composite, with the packages' right bytes, and the cache verifies clean.
        CHECK(fresh->get_or_compile(a, [&] { return compiler(a); }).result == skc::CacheResult::compiled);
        fresh->record_composite(u, parts_of(fresh->cover(u)), 1ms);
        {
            const auto c = fresh->cover(u);
            CHECK(c.composite);
            REQUIRE(c.parts.size() == 2);
            for (const auto& h : c.parts)
                CHECK(*fresh->storage().read(h.entry.package) == Compiler::content(h.entry.key == a.hex() ? a : b));
        }
        const skc::VerifyReport v = fresh->verify_all();
        CHECK(v.checked == 3);
        CHECK(v.bad.empty());
    }
}

TEST_CASE("import: a composite whose parts are not before it, or whose text is altered, adds nothing and says why") {
    skc_test::TempDir dir;
    const skc::CacheKey a = range_key(0, 4), b = range_key(4, 8), u = range_key(0, 8);
    skc::CompositeEntry c;
    c.key = u.hex();
    c.ops = 8;
    c.parts = {skc::CachePart{a.hex(), 10, {}}, skc::CachePart{b.hex(), 10, {}}};
    const fs::path file = dir / "composite.skcx";
    auto import_of = [&](const std::string& text) {  // a file whose framing and end line are right
        std::string body = std::string(skc::detail::export_magic) + "composite CANN-8.0_dev " +
                           std::to_string(text.size()) + "\n" + text;
        skc::detail::Hasher h;
        h.update(body);
        skc_test::spit(file, body + "end 1 " + h.digest().hex() + "\n");
        return skc::import_cache(dir / "cache", file);
    };
    const std::string text = skc::detail::encode_composite(c);
    const std::string no_part =
        "composite " + u.hex() + ": its part " + a.hex() + " is not among the entries before it; nothing was imported";
    CHECK_THROWS_WITH_AS(import_of(text), doctest::Contains(no_part.c_str()), skc::Error);
    std::string altered = text;
    altered[altered.find("ops 8")] = 'O';
    CHECK_THROWS_WITH_AS(
        import_of(altered),
        doctest::Contains("record 1: the composite text is altered or truncated; nothing was imported"), skc::Error);
    CHECK_FALSE(fs::exists(dir / "cache"));  // nothing was written
}

TEST_CASE("cache_mode recache: compiles again and replaces the entry; zero_stats resets every count") {
    skc_test::TempDir dir;
    Compiler compiler{dir.path()};
    const fs::path root = dir / "cache";
    const skc::CacheKey k = key_of(7);
    skc::CacheConfig rw{{}, 1h, skc::null_log()};
    skc::open_cache(root, "8.0", "dev", rw)->get_or_compile(k, [&] { return compiler(k); });  // pin released at once
    const std::string old_entry = skc_test::slurp(root / "CANN-8.0_dev" / "entries" / k.hex());
    skc::CacheConfig re = rw;
    re.mode = skc::CacheMode::recache;
    {
        auto cache = skc::open_cache(root, "8.0", "dev", re);
        CHECK_FALSE(cache->lookup(k).has_value());
        auto out = cache->get_or_compile(k, [&] {
            const fs::path p = compiler(k);
            skc_test::spit(p, "#!/bin/sh\n# rebuilt\n");
            return p;
        });
        CHECK(out.result == skc::CacheResult::compiled);
        CHECK(compiler.compiles == 2);
    }
    CHECK(skc_test::slurp(root / "CANN-8.0_dev" / "packages" / (k.hex() + ".run")) == "#!/bin/sh\n# rebuilt\n");
    CHECK(skc_test::slurp(root / "CANN-8.0_dev" / "entries" / k.hex()) != old_entry);
    // Read-write again: the replaced entry hits.
    auto cache = skc::open_cache(root, "8.0", "dev", rw);
    CHECK(cache->get_or_compile(k, [&] { return compiler(k); }).result == skc::CacheResult::hit);
    cache->flush();
    CHECK(cache->persisted_stats().compiles == 2);
    cache->zero_stats();
    CHECK(cache->persisted_stats() == skc::CacheStats{});
    CHECK(skc::CacheStats::decode(skc_test::slurp(root / "CANN-8.0_dev" / "stats")) == skc::CacheStats{});
}

// ---- statistics: the log, its folds, and a cheap open ---------------------------------------------------

namespace {

/// A cache folder holding key 1, and the files of its statistics.
struct StatsFx {
    skc_test::TempDir dir;
    Compiler compiler{dir.path()};
    fs::path root = dir / "cache";
    fs::path ns = root / "CANN-8.0_dev";
    fs::path log = ns / "stats.log";
    fs::path stats = ns / "stats";
    skc::CacheKey k = key_of(1);

    StatsFx() {
        open()->get_or_compile(k, [&] { return compiler(k); });
    }
    std::unique_ptr<skc::IndexCache<>> open() const {
        return skc::open_cache(root, "8.0", "dev", skc::CacheConfig{{}, 1h, skc::null_log()});
    }
    /// A process that hits key 1 `n` times and exits.
    void hit(int n) const {
        auto c = open();
        for (int i = 0; i < n; ++i) REQUIRE(c->lookup(k).has_value());
    }
    /// The names in the namespace folder that are statistics logs (the log and taken ones).
    std::set<std::string> logs() const {
        std::set<std::string> out;
        for (const auto& e : fs::directory_iterator(ns))
            if (e.path().filename().string().rfind("stats.log", 0) == 0) out.insert(e.path().filename().string());
        return out;
    }
};

/// A log line as a process that counted `hits` hits (and nothing else) appends it.
std::string hits_line(std::uint64_t hits) {
    skc::CacheStats s;
    s.hits = hits;
    return skc::detail::stats_log_line(s, {}, 0);
}

/// The counts the cases below compare (lock waits and saved compile times vary from run to run).
std::string counts(const skc::CacheStats& s) {
    return "hits " + std::to_string(s.hits) + ", misses " + std::to_string(s.misses) + ", compiles " +
           std::to_string(s.compiles);
}
std::string counts(std::uint64_t hits, std::uint64_t misses, std::uint64_t compiles) {
    skc::CacheStats s;
    s.hits = hits;
    s.misses = misses;
    s.compiles = compiles;
    return counts(s);
}

}  // namespace

TEST_CASE("statistics: a process appends one line to the log; `stats` is written by folds only") {
    StatsFx f;
    CHECK_FALSE(fs::exists(f.stats));  // the publish folded an empty log: nothing to write
    CHECK(f.logs() == std::set<std::string>{"stats.log"});
    f.hit(3);
    f.hit(1);
    CHECK_FALSE(fs::exists(f.stats));
    const std::string text = skc_test::slurp(f.log);
    CHECK(std::count(text.begin(), text.end(), '\n') == 6);  // three lines, each between two line feeds
    CHECK(text.find("\nskc-stats hits 3 ") != std::string::npos);
    CHECK(text.find(" used " + f.k.hex() + " at ") != std::string::npos);  // the use time of the LRU order
    const skc::CacheStats before = f.open()->persisted_stats();
    CHECK(counts(before) == counts(4, 1, 1));

    auto cache = f.open();
    cache->fold_stats();
    CHECK(f.logs() == std::set<std::string>{"stats.log"});  // the log stays: it only grows
    CHECK(skc_test::slurp(f.log) == text);
    const std::string stored = skc_test::slurp(f.stats);
    CHECK(skc::CacheStats::decode(stored) == before);
    struct stat log_st {};
    REQUIRE(::stat(f.log.c_str(), &log_st) == 0);
    // Where the fold stopped reading: the log's inode, and its end.
    CHECK(stored.find("\nlog stats.log " + std::to_string(log_st.st_ino) + " " + std::to_string(text.size()) + "\n") !=
          std::string::npos);
    CHECK(cache->persisted_stats() == before);
    struct stat stats_st {};
    REQUIRE(::stat(f.stats.c_str(), &stats_st) == 0);
    cache->fold_stats();  // nothing new: `stats` is not rewritten
    struct stat again {};
    REQUIRE(::stat(f.stats.c_str(), &again) == 0);
    CHECK(again.st_ino == stats_st.st_ino);
    CHECK(skc::CacheStats::decode(skc_test::slurp(f.stats)) == before);
    f.hit(2);  // appended after the mark: counted once, by the next fold
    CHECK(counts(cache->persisted_stats()) == counts(6, 1, 1));
    cache->fold_stats();
    CHECK(counts(skc::CacheStats::decode(skc_test::slurp(f.stats))) == counts(6, 1, 1));
    CHECK(counts(cache->persisted_stats()) == counts(6, 1, 1));
}

TEST_CASE("statistics: a fold that died at any step loses no count and counts none twice") {
    StatsFx f;
    f.hit(2);
    f.open()->fold_stats();
    const std::string folded_text = skc_test::slurp(f.stats);
    const skc::CacheStats base = skc::CacheStats::decode(folded_text);
    REQUIRE(counts(base) == counts(2, 1, 1));
    const std::string mark = folded_text.substr(folded_text.find("log stats.log "));  // the mark line
    skc::CacheStats want = base;

    const auto append = [&](const std::string& lines) {
        std::ofstream out(f.log, std::ios::binary | std::ios::app);
        out << lines;
    };
    SUBCASE("before writing `stats`: the lines after the mark are added by the next fold") {
        append(hits_line(5) + hits_line(7));
        want.hits += 12;
    }
    SUBCASE("after writing `stats`, before freeing the log's space: nothing is added again") {
        // What the fold wrote stays; the space of the bytes it read was not freed.
    }
    SUBCASE("a mark that names another log (the log was removed and made anew): the log is read whole") {
        fs::remove(f.log);
        append(hits_line(4));
        want.hits += 4;
    }
    SUBCASE("an older version's taken log, not counted yet: added by the next fold") {
        skc_test::spit(f.ns / "stats.log.77.1", hits_line(5) + hits_line(7));
        want.hits += 12;
    }
    SUBCASE("an older version's taken log that `stats` counts: removed, not added again") {
        const std::string taken = hits_line(5) + hits_line(7);
        skc::CacheStats folded = base;
        folded.hits += 12;
        skc_test::spit(f.stats,
                       folded.encode() + mark + "folded stats.log.77.1 " + std::to_string(taken.size()) + "\n");
        skc_test::spit(f.ns / "stats.log.77.1", taken);
        want.hits += 12;
    }
    SUBCASE("the same, and an old appender that had opened the log added a line after the fold died") {
        const std::string taken = hits_line(5) + hits_line(7);
        skc::CacheStats folded = base;
        folded.hits += 12;
        skc_test::spit(f.stats,
                       folded.encode() + mark + "folded stats.log.77.1 " + std::to_string(taken.size()) + "\n");
        skc_test::spit(f.ns / "stats.log.77.1", taken + hits_line(100));
        want.hits += 112;
    }
    SUBCASE("two taken logs, one counted and one not, and lines after the mark") {
        const std::string counted = hits_line(5);
        skc::CacheStats folded = base;
        folded.hits += 5;
        skc_test::spit(f.stats,
                       folded.encode() + mark + "folded stats.log.77.1 " + std::to_string(counted.size()) + "\n");
        skc_test::spit(f.ns / "stats.log.77.1", counted);
        skc_test::spit(f.ns / "stats.log.78.1", hits_line(7));
        append(hits_line(1));
        want.hits += 13;
    }
    CHECK(f.open()->persisted_stats() == want);  // a reader sees the same as a fold makes
    auto cache = f.open();
    cache->fold_stats();
    CHECK(f.logs() == std::set<std::string>{"stats.log"});
    CHECK(cache->persisted_stats() == want);
    CHECK(skc::CacheStats::decode(skc_test::slurp(f.stats)) == want);
    cache->fold_stats();
    CHECK(cache->persisted_stats() == want);
    // A fold names only the taken logs it removed: the names of earlier ones go with their files.
    f.hit(1);
    cache->fold_stats();
    CHECK(skc_test::slurp(f.stats).find("stats.log.77.1") == std::string::npos);
    CHECK(cache->persisted_stats().hits == want.hits + 1);
}

TEST_CASE("statistics: an unfinished last line, a torn line and garbage lines in the log are skipped") {
    StatsFx f;
    const std::string full = hits_line(50);
    std::string tampered = hits_line(1);
    const std::size_t hash_at = tampered.rfind(' ') + 1;
    tampered[hash_at] = tampered[hash_at] == '0' ? '1' : '0';
    const std::string unknown_body = "skc-stats hits 2 frobs 9";  // a counter a later version may add
    const std::string bad_value_body = "skc-stats hits lots";
    const auto checked = [](const std::string& body) {
        return "\n" + body + " check " + skc::detail::hash_bytes(body).hex() + "\n";
    };
    skc_test::spit(f.log, hits_line(3) + full.substr(0, full.size() / 2) +  // written half before the disk filled
                              hits_line(4) + "\ngarbage\n" + std::string("\n\0\xff\n", 4) + tampered +
                              checked(unknown_body) + checked(bad_value_body) + "\nskc-stats hits 1\n" +
                              full.substr(0, full.size() - 1));  // all but its line feed: unfinished
    CHECK(counts(f.open()->persisted_stats()) == counts(3 + 4 + 2, 0, 0));
    {
        auto cache = f.open();
        cache->fold_stats();  // stops before the unfinished line: a writer may still be at it
        CHECK(counts(skc::CacheStats::decode(skc_test::slurp(f.stats))) == counts(9, 0, 0));
    }
    f.hit(1);  // its first line feed ends the unfinished line, which is still no whole line
    CHECK(counts(f.open()->persisted_stats()) == counts(3 + 4 + 2 + 1, 0, 0));
    auto cache = f.open();
    cache->fold_stats();
    CHECK(counts(skc::CacheStats::decode(skc_test::slurp(f.stats))) == counts(10, 0, 0));
    CHECK(counts(cache->persisted_stats()) == counts(10, 0, 0));

    skc::detail::StatsLogLine l;
    CHECK(skc::detail::parse_stats_log_line("skc-stats check " + skc::detail::hash_bytes("skc-stats").hex(), l));
    CHECK_FALSE(skc::detail::parse_stats_log_line("skc-stat check " + skc::detail::hash_bytes("skc-stat").hex(), l));
    CHECK_FALSE(skc::detail::parse_stats_log_line("", l));
}

TEST_CASE("statistics: a line being written is counted once, by the fold after it is whole") {
    StatsFx f;
    const std::string line = hits_line(9);
    for (const std::size_t cut : {std::size_t{1}, line.size() / 2, line.size() - 1}) {
        CAPTURE(cut);
        const skc::CacheStats before = f.open()->persisted_stats();
        {
            std::ofstream out(f.log, std::ios::binary | std::ios::app);
            out << line.substr(0, cut);  // what a reader may see of an append in progress
        }
        auto cache = f.open();
        cache->fold_stats();
        CHECK(cache->persisted_stats().hits == before.hits);
        {
            std::ofstream out(f.log, std::ios::binary | std::ios::app);
            out << line.substr(cut);  // the rest of the same append
        }
        CHECK(cache->persisted_stats().hits == before.hits + 9);
        cache->fold_stats();
        CHECK(skc::CacheStats::decode(skc_test::slurp(f.stats)).hits == before.hits + 9);
        CHECK(cache->persisted_stats().hits == before.hits + 9);
    }
}

TEST_CASE("statistics: `stats` files written before the log are read, and a log adds to them") {
    StatsFx f;
    skc_test::spit(f.stats, "hits 40\nmisses 2\nlock_wait_ns -5\n");
    f.hit(2);
    const skc::CacheStats want = f.open()->persisted_stats();
    CHECK(counts(want) == counts(42, 3, 1));
    f.open()->fold_stats();
    CHECK(skc::CacheStats::decode(skc_test::slurp(f.stats)) == want);
}

TEST_CASE("statistics: the appender that takes the log past a MiB folds it, and its space is freed") {
    StatsFx f;
    const std::string one = hits_line(1);
    std::string big;
    std::uint64_t lines = 0;
    const std::uint64_t start = fs::file_size(f.log);
    while (start + big.size() + one.size() < skc::detail::stats_log_fold_bytes) {
        big += one;
        ++lines;
    }
    {
        std::ofstream out(f.log, std::ios::binary | std::ios::app);
        out << big;
    }
    CHECK_FALSE(fs::exists(f.stats));
    f.hit(1);  // its line crosses 1 MiB
    CHECK(counts(skc::CacheStats::decode(skc_test::slurp(f.stats))) == counts(lines + 1, 1, 1));
    struct stat st {};
    REQUIRE(::stat(f.log.c_str(), &st) == 0);
    CHECK(static_cast<std::uint64_t>(st.st_size) > skc::detail::stats_log_fold_bytes);  // offsets stay
    MESSAGE("the folded log: " << st.st_size << " bytes, " << st.st_blocks * 512 << " on disk");
    CHECK(static_cast<std::uint64_t>(st.st_blocks) * 512 < 64 * 1024);  // the bytes read are a hole
    f.hit(1);                                                           // no fold: far from the next MiB
    CHECK(counts(skc::CacheStats::decode(skc_test::slurp(f.stats))) == counts(lines + 1, 1, 1));
    CHECK(counts(f.open()->persisted_stats()) == counts(lines + 2, 1, 1));
}

TEST_CASE("statistics: zero_stats drops the counts of the log and of taken logs too") {
    StatsFx f;
    f.hit(2);
    skc_test::spit(f.ns / "stats.log.9.9", hits_line(4));
    auto cache = f.open();
    cache->zero_stats();
    CHECK(f.logs() == std::set<std::string>{"stats.log"});
    CHECK(cache->persisted_stats() == skc::CacheStats{});
    f.hit(1);
    CHECK(counts(f.open()->persisted_stats()) == counts(1, 0, 0));
}

TEST_CASE("use times: a hit's is in the log until a fold applies it; entries() and eviction order by it") {
    StatsFx f;
    std::vector<skc::CacheKey> keys;
    {
        auto c = f.open();
        for (int i = 10; i < 14; ++i) {
            keys.push_back(key_of(i));
            c->get_or_compile(keys.back(), [&] { return f.compiler(keys.back()); });
            std::this_thread::sleep_for(15ms);  // distinct modification times
        }
        c->prune(skc::CacheLimits{0, 4});  // removes key 1, the oldest
    }
    REQUIRE(f.open()->entries().size() == 4);
    const fs::path oldest = f.ns / "entries" / keys[0].hex();
    const auto before = fs::last_write_time(oldest);
    {
        auto c = f.open();
        REQUIRE(c->lookup(keys[0]).has_value());
    }  // the use of key 10 is logged; its entry file is not touched
    CHECK(fs::last_write_time(oldest) == before);
    auto cache = f.open();
    const std::vector<skc::CacheEntry> order = cache->entries();
    REQUIRE(order.size() == 4);
    CHECK(order.back().key == keys[0].hex());                         // the most recently used, by the log
    const skc::PruneReport r = cache->prune(skc::CacheLimits{0, 2});  // folds first
    CHECK(r.removed == 2);
    CHECK(cache->lookup(keys[0]).has_value());
    CHECK(cache->lookup(keys[3]).has_value());
    CHECK_FALSE(cache->lookup(keys[1]).has_value());
    CHECK_FALSE(cache->lookup(keys[2]).has_value());
    CHECK(fs::last_write_time(oldest) > before);  // the fold set the logged use time
}

TEST_CASE(
    "open_cache reads and writes nothing in a namespace that exists; a publish rewrites the manifest and reads the "
    "limits") {
    skc_test::TempDir dir;
    Compiler compiler{dir.path()};
    const fs::path root = dir / "cache";
    auto cache = skc::open_cache(root, "8.0", "dev", skc::CacheConfig{{}, 1h, skc::null_log()});
    const std::string manifest = skc_test::slurp(root / "CANN-8.0_dev.json");  // a new namespace: with its manifest
    CHECK(skc::parse_json(manifest).find("packages")->as_string() == "CANN-8.0_dev/packages");
    const std::set<std::string> created{"CANN-8.0_dev", "CANN-8.0_dev.json=" + manifest};
    CHECK(skc_test::snapshot(root) == created);
    cache.reset();  // nothing counted: nothing written
    CHECK(skc_test::snapshot(root) == created);

    skc_test::spit(root / "CANN-8.0_dev.json", "{}");
    cache = skc::open_cache(root, "8.0", "dev", skc::CacheConfig{{}, 1h, skc::null_log()});
    CHECK(skc_test::slurp(root / "CANN-8.0_dev.json") == "{}");  // an open reads and writes no manifest
    skc::write_cache_limits(root, {std::nullopt, 1});            // after the open: still applied
    const skc::CacheKey a = key_of(1), b = key_of(2);
    cache->get_or_compile(a, [&] { return compiler(a); });
    CHECK(skc_test::slurp(root / "CANN-8.0_dev.json") == manifest);  // a publish rewrites it
    cache->get_or_compile(b, [&] { return compiler(b); });
    CHECK_FALSE(cache->lookup(a).has_value());  // the folder's limit of one entry
    CHECK(cache->lookup(b).has_value());
}

TEST_CASE("trust: the folders below a namespace are judged before a package is first stored or verified") {
    StatsFx f;
    const fs::path entries = f.ns / "entries";
    fs::permissions(entries, fs::perms::others_write, fs::perm_options::add);
    const std::string message = entries.string() + ": the cache folder is writable by every user (mode ";
    auto cache = f.open();  // opening judges the cache folder and the namespace folder only
    auto hit = cache->lookup(f.k);
    REQUIRE(hit.has_value());
    CHECK_THROWS_WITH_AS(cache->verify(*hit), doctest::Contains(message.c_str()), skc::Error);
    hit.reset();
    CHECK_THROWS_WITH_AS(f.open()->get_or_compile(f.k, [&] { return f.compiler(f.k); }),
                         doctest::Contains(message.c_str()), skc::Error);
    const skc::CacheKey other = key_of(2);
    CHECK_THROWS_WITH_AS(f.open()->publish(other, f.compiler(other)), doctest::Contains(message.c_str()), skc::Error);
    skc::CacheConfig ro{{}, 1h, skc::null_log()};
    ro.mode = skc::CacheMode::read_only;
    CHECK_THROWS_WITH_AS(
        skc::open_cache(f.root, "8.0", "dev", ro)->get_or_compile(f.k, [&] { return f.compiler(f.k); }),
        doctest::Contains(message.c_str()), skc::Error);
    fs::permissions(entries, fs::perms::others_write, fs::perm_options::remove);
    CHECK(f.open()->get_or_compile(f.k, [&] { return f.compiler(f.k); }).result == skc::CacheResult::hit);

    fs::permissions(f.ns, fs::perms::others_write, fs::perm_options::add);
    const std::string ns_message = f.ns.string() + ": the cache folder is writable by every user";
    CHECK_THROWS_WITH_AS(f.open(), doctest::Contains(ns_message.c_str()), skc::Error);
    fs::permissions(f.ns, fs::perms::others_write, fs::perm_options::remove);
}

// ---- explaining a miss ---------------------------------------------------------------------------------

namespace {

/// A key over named ops (name -> the op's row count, which makes its content).
skc::CacheKey named_key(const std::vector<std::pair<std::string, std::int64_t>>& ops, skc::KeyInputs in) {
    std::vector<skc::Digest> ds;
    std::vector<skc::KeyOp> named;
    for (const auto& [name, n] : ops) {
        const skc::Digest d = skc::digest(op("Add", n));
        ds.push_back(d);
        named.push_back({d, name});
    }
    skc::CacheKey k = skc::make_cache_key(ds, in);
    k.ops = std::move(named);
    return k;
}

}  // namespace

TEST_CASE("explain_miss: the nearest entry, the key parts that differ, and the ops added, removed or changed") {
    CHECK(skc::detail::op_file_stem("Add_float_ND_32_64_7.json") == "Add_float_ND_32_64");
    CHECK(skc::detail::op_file_stem("Add_float_ND_32_64_7_1.json") == "Add_float_ND_32_64_7");
    CHECK(skc::detail::op_file_stem("custom.json") == "custom");

    skc_test::TempDir dir;
    Compiler compiler{dir.path()};
    const fs::path root = dir / "cache";
    const skc::KeyInputs in{"8.0", "dev", false, {"--O2"}, "content:aaaa"};
    const skc::CacheKey stored = named_key({{"Add_a_1.json", 1}, {"Add_b_2.json", 2}, {"Add_c_3.json", 3}}, in);
    {
        auto cache = skc::open_cache(root, "8.0", "dev", skc::CacheConfig{{}, 1h, skc::null_log()});
        cache->get_or_compile(stored, [&] { return compiler(stored); });
        REQUIRE(cache->op_list(stored.hex()).has_value());
        CHECK(cache->op_list(stored.hex())->size() == 3);
    }
    CHECK_FALSE(skc::explain_miss(dir / "nothing", stored).has_value());

    const auto same = skc::explain_miss(root, stored);
    REQUIRE(same.has_value());
    CHECK(same->hit);
    CHECK_FALSE(same->near());

    // b changed (same file stem, other content, renumbered), c removed, d added.
    const skc::CacheKey ops_changed = named_key({{"Add_a_4.json", 1}, {"Add_b_5.json", 20}, {"Add_d_6.json", 4}}, in);
    const auto x = skc::explain_miss(root, ops_changed);
    REQUIRE(x.has_value());
    CHECK_FALSE(x->hit);
    CHECK(x->entry.key == stored.hex());
    CHECK(x->ns == "CANN-8.0_dev");
    CHECK(x->parts.empty());
    CHECK(x->ops_differ);
    CHECK(x->ops_known);
    CHECK(x->common_ops == 1);
    CHECK(x->changed == std::vector<std::pair<std::string, std::string>>{{"Add_b_2.json", "Add_b_5.json"}});
    CHECK(x->added == std::vector<std::string>{"Add_d_6.json"});
    CHECK(x->removed == std::vector<std::string>{"Add_c_3.json"});
    CHECK(x->near());
    CHECK(x->summary() ==
          "nearest cache entry " + stored.hex() +
              " (CANN-8.0_dev) differs in ops: 1 changed (Add_b_5.json) 1 added (Add_d_6.json) 1 removed "
              "(Add_c_3.json)");

    // The compiler and the toolchain changed, the ops did not: looked up across namespaces.
    skc::KeyInputs other = in;
    other.toolchain_version = "9.0";
    other.compiler = "content:bbbb";
    const auto y =
        skc::explain_miss(root, named_key({{"Add_a_1.json", 1}, {"Add_b_2.json", 2}, {"Add_c_3.json", 3}}, other));
    REQUIRE(y.has_value());
    CHECK_FALSE(y->ops_differ);
    REQUIRE(y->parts.size() == 2);
    CHECK(y->parts[0].part == "toolchain_version");
    CHECK(y->parts[0].entry == "8.0");
    CHECK(y->parts[0].wanted == "9.0");
    CHECK(y->parts[1].part == "compiler");
    CHECK(y->near());
    CHECK(y->summary().find("differs in toolchain_version (8.0 -> 9.0); compiler (content:aaaa -> content:bbbb)") !=
          std::string::npos);

    // Nothing in common: not near (a different model, not a change to this one).
    const auto z = skc::explain_miss(root, named_key({{"Add_x_1.json", 50}}, in));
    REQUIRE(z.has_value());
    CHECK_FALSE(z->near());

    // Removing the entry removes its op list; explain reads without writing anything.
    const auto before = skc_test::snapshot_with_times(root);
    (void)skc::explain_miss(root, ops_changed);
    CHECK(skc_test::snapshot_with_times(root) == before);
    skc::open_cache(root, "8.0", "dev", skc::CacheConfig{{}, 1h, skc::null_log()})->clear();
    CHECK_FALSE(fs::exists(root / "CANN-8.0_dev" / "oplists" / stored.hex()));
}

// ---- export and import ---------------------------------------------------------------------------------

TEST_CASE("export and import: a round trip hits; a truncated, altered or foreign file adds nothing and says why") {
    skc_test::TempDir dir;
    Compiler compiler{dir.path()};
    const fs::path from = dir / "from", to = dir / "to";
    const skc::KeyInputs in{"8.0", "dev", false, {}, "content:aaaa"};
    std::vector<skc::CacheKey> keys;
    {
        auto a = skc::open_cache(from, "8.0", "dev", skc::CacheConfig{{}, 1h, skc::null_log()});
        auto b = skc::open_cache(from, "9.0", "dev", skc::CacheConfig{{}, 1h, skc::null_log()});
        for (int i = 0; i < 3; ++i) {
            keys.push_back(named_key({{"Add_a_" + std::to_string(i) + ".json", 100 + i}}, in));
            a->get_or_compile(keys.back(), [&] { return compiler(keys.back()); });
        }
        b->get_or_compile(keys[0], [&] { return compiler(keys[0]); });
    }
    const auto before = skc_test::snapshot_with_times(from);
    const fs::path file = dir / "cache.skc";
    const skc::ExportReport ex = skc::export_cache(from, file);
    CHECK(ex.entries == 4);
    CHECK(ex.skipped.empty());
    CHECK(skc_test::snapshot_with_times(from) == before);  // exporting writes nothing in the cache
    CHECK(skc::export_cache(from, dir / "one.skc", "CANN-8.0_dev", {keys[1].hex()}).entries == 1);

    // Bad files first: each is refused whole, naming what is wrong, and the target stays empty.
    const std::string good = skc_test::slurp(file);
    struct Bad {
        std::string text, why;
    };
    std::string tampered = good;
    tampered[tampered.size() / 2] ^= 0x01;
    const std::vector<Bad> bad{
        {good.substr(0, good.size() - 10), "the file is truncated (a line has no end)"},
        {good.substr(0, good.size() - 10) + "\n", "the end line does not match"},
        {good.substr(0, good.size() / 2), "truncated"},
        {good.substr(0, good.rfind("end ")), "no end line"},
        {tampered, ""},
        {good + "x", "bytes follow the end line"},
        {"PK\x03\x04 not an export\n", "not an skc cache export"},
        {"", "not an skc cache export"},
    };
    for (const Bad& b : bad) {
        skc_test::spit(dir / "bad.skc", b.text);
        CAPTURE(b.why);
        try {
            skc::import_cache(to, dir / "bad.skc", skc::CacheConfig{{}, 1h, skc::null_log()});
            FAIL("accepted a bad export file");
        } catch (const skc::Error& e) {
            CHECK(e.code() == skc::Errc::corrupt);
            CHECK(std::string(e.what()).find("nothing was imported") != std::string::npos);
            CHECK(std::string(e.what()).find(b.why) != std::string::npos);
        }
        CHECK((!fs::exists(to) || fs::is_empty(to)));
    }
    // An entry naming another namespace path is refused too.
    std::string escaped = good;
    escaped.replace(escaped.find("entry CANN-8.0_dev"), 18, "entry CANN-8.0/../");
    skc_test::spit(dir / "bad.skc", escaped);
    CHECK_THROWS_WITH(skc::import_cache(to, dir / "bad.skc"), doctest::Contains("malformed record line"));

    const skc::ImportReport im = skc::import_cache(to, file, skc::CacheConfig{{}, 1h, skc::null_log()});
    CHECK(im.added == 4);
    CHECK(im.present == 0);
    int compiles = compiler.compiles;
    auto cache = skc::open_cache(to, "8.0", "dev", skc::CacheConfig{{}, 1h, skc::null_log()});
    for (const skc::CacheKey& k : keys) {
        auto out = cache->get_or_compile(k, [&] { return compiler(k); });
        CHECK(out.result == skc::CacheResult::hit);
        REQUIRE(out.hit.has_value());
        CHECK(cache->verify(*out.hit));
    }
    CHECK(compiler.compiles == compiles);
    CHECK(cache->op_list(keys[0].hex()).has_value());
    CHECK(cache->verify_all().bad.empty());
    CHECK(skc::import_cache(to, file).present == 4);  // a second import adds nothing
    // The explanation works on imported entries.
    const auto x = skc::explain_miss(to, named_key({{"Add_a_9.json", 100}, {"Add_b_1.json", 7}}, in), "CANN-8.0_dev");
    REQUIRE(x.has_value());
    CHECK(x->added == std::vector<std::string>{"Add_b_1.json"});
}

TEST_CASE("statistics saturate: a huge stats file neither wraps nor is undefined behaviour") {
    skc::CacheStats huge = skc::CacheStats::decode(
        "hits 18446744073709551615\ncompile_time_saved_ns 9223372036854775807\n"
        "lock_wait_ns -9223372036854775807\n");
    skc::CacheStats more;
    more.hits = 5;
    more.compile_time_saved_ns = 4500000000;
    more.lock_wait_ns = -10;
    huge += more;
    CHECK(huge.hits == UINT64_MAX);
    CHECK(huge.compile_time_saved_ns == INT64_MAX);
    CHECK(huge.lock_wait_ns == INT64_MIN);
    skc::CacheStats small;
    small.hits = 1;
    small += more;
    CHECK(small.hits == 6);
    CHECK(small.compile_time_saved_ns == 4500000000);

    // Through a cache: merging into a stats file near the limit keeps the limit.
    skc_test::TempDir dir;
    Compiler compiler{dir.path()};
    const skc::CacheKey k = key_of(1);
    auto cache = skc::open_cache(dir / "c", "8.0", "dev", skc::CacheConfig{{}, 1h, skc::null_log()});
    cache->get_or_compile(k, [&] { return compiler(k); });
    skc_test::spit(dir / "c" / "CANN-8.0_dev" / "stats", "compile_time_saved_ns 9223372036854775000\n");
    cache.reset();
    auto again = skc::open_cache(dir / "c", "8.0", "dev", skc::CacheConfig{{}, 1h, skc::null_log()});
    again->get_or_compile(k, [&] { return compiler(k); });
    again->flush();
    CHECK(again->persisted_stats().compile_time_saved_ns == INT64_MAX);
}

// ---- several threads on one key --------------------------------------------------------------------

namespace {

/// A compile for the threaded cases: counts its calls from any thread, takes long enough that the
/// other threads arrive while it runs, and writes the key's package to a file of its own.
struct SlowCompiler {
    fs::path dir;
    std::atomic<int> calls{0};
    fs::path operator()(const skc::CacheKey& k) {
        const int n = ++calls;
        std::this_thread::sleep_for(100ms);
        const fs::path p = dir / ("threaded_" + std::to_string(n) + ".run");
        skc_test::spit(p, Compiler::content(k));
        return p;
    }
};

/// What one thread's get_or_compile() gave, taken while its hit still pins the entry.
struct ThreadOutcome {
    bool returned = false;
    std::string error;
    skc::CacheResult result = skc::CacheResult::disabled;
    bool has_hit = false;
    std::string key, package, checksum, package_bytes, file_bytes;
};

template <class Cache, class Outcome>
ThreadOutcome describe(Cache& cache, const Outcome& out) {
    ThreadOutcome d;
    d.returned = true;
    d.result = out.result;
    d.has_hit = out.hit.has_value();
    if (!out.hit) return d;
    d.key = out.hit->entry.key;
    d.package = out.hit->entry.package;
    d.checksum = out.hit->entry.checksum.hex();
    d.package_bytes = cache.storage().read(out.hit->entry.package).value_or("(none)");
    if (out.hit->package_path) d.file_bytes = skc_test::slurp(*out.hit->package_path);
    return d;
}

/// The law for N threads on one key: one compile; every thread returned a hit on the same entry,
/// whose package is the compiled one; one thread compiled, the others hit or waited.
void check_one_compile(const std::vector<ThreadOutcome>& outs, const skc::CacheKey& k, int calls, bool files) {
    CHECK(calls == 1);
    int compiled = 0;
    for (const ThreadOutcome& o : outs) {
        CAPTURE(o.error);
        REQUIRE(o.returned);
        REQUIRE(o.has_hit);
        compiled += o.result == skc::CacheResult::compiled ? 1 : 0;
        CHECK((o.result == skc::CacheResult::compiled || o.result == skc::CacheResult::hit ||
               o.result == skc::CacheResult::waited));
        CHECK(o.key == k.hex());
        CHECK(o.package == outs.front().package);
        CHECK(o.checksum == outs.front().checksum);
        CHECK(o.package_bytes == Compiler::content(k));
        if (files) CHECK(o.file_bytes == Compiler::content(k));
    }
    CHECK(compiled == 1);
}

}  // namespace

TEST_CASE_TEMPLATE("8 threads, one cache, one key: one compile, and every thread gets the package", C, FsFileLock,
                   MemProcessLock) {
    Fixture<C> fx;
    auto cache = fx.make();
    SlowCompiler compiler{fx.dir.path()};
    const skc::CacheKey k = key_of(40);
    std::atomic<bool> go{false};
    std::vector<ThreadOutcome> outs(8);
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < outs.size(); ++t)
        threads.emplace_back([&, t] {
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            try {
                const auto out = cache->get_or_compile(k, [&] { return compiler(k); });
                outs[t] = describe(*cache, out);
            } catch (const std::exception& e) {
                outs[t].error = e.what();
            }
        });
    go.store(true, std::memory_order_release);
    for (auto& th : threads) th.join();
    check_one_compile(outs, k, compiler.calls.load(), std::is_same_v<C, FsFileLock>);
    int waited = 0;
    for (const ThreadOutcome& o : outs) waited += o.result == skc::CacheResult::waited ? 1 : 0;
    const skc::CacheStats s = cache->stats();
    CHECK(s.compiles == 1);
    CHECK(s.misses == 1);  // one hit or one miss per call
    CHECK(s.hits == 7);
    CHECK(s.waits == static_cast<std::uint64_t>(waited));
    CHECK(cache->entries().size() == 1);
    CHECK(fx.log.lines->empty());
}

TEST_CASE("8 threads, each with its own cache over one folder, one key: one compile, every thread gets the package") {
    skc_test::TempDir dir;
    const fs::path root = dir / "cache";
    SlowCompiler compiler{dir.path()};
    const skc::CacheKey k = key_of(41);
    LogCapture log;
    std::atomic<bool> go{false};
    std::vector<ThreadOutcome> outs(8);
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < outs.size(); ++t)
        threads.emplace_back([&, t] {
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            try {
                // Opened in the thread, as each process of a node opens its own; destroyed in the
                // thread too (its statistics are merged into the folder's then).
                auto cache = skc::open_cache(root, "8.0", "dev", skc::CacheConfig{{}, 1min, log.sink()});
                const auto out = cache->get_or_compile(k, [&] { return compiler(k); });
                outs[t] = describe(*cache, out);
            } catch (const std::exception& e) {
                outs[t].error = e.what();
            }
        });
    go.store(true, std::memory_order_release);
    for (auto& th : threads) th.join();
    check_one_compile(outs, k, compiler.calls.load(), true);
    int waited = 0;
    for (const ThreadOutcome& o : outs) waited += o.result == skc::CacheResult::waited ? 1 : 0;
    auto after = skc::open_cache(root, "8.0", "dev", skc::CacheConfig{{}, 1min, log.sink()});
    const skc::CacheStats s = after->persisted_stats();  // the 8 caches' statistics, merged
    CHECK(s.compiles == 1);
    CHECK(s.misses == 1);
    CHECK(s.hits == 7);
    CHECK(s.waits == static_cast<std::uint64_t>(waited));
    REQUIRE(after->entries().size() == 1);
    auto hit = after->lookup(k);
    REQUIRE(hit.has_value());
    CHECK(after->verify(*hit));
    CHECK(log.lines->empty());
}

}  // namespace skc_policy_cache_test
