// The file-system cache shared by real processes: many workers (tests/workers/cache_worker.cpp,
// started with posix_spawn) on one cache folder, and workers killed with SIGKILL while they compile,
// write a package, write an entry or hold a pin. Every child is killed and reaped on every path.
#include <doctest/doctest.h>

#include <skc/policy/cache.hpp>
#include <skc/skc.hpp>

#include "cache_fixtures.hpp"

#include "test_support.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

/// Compile logs print as `[<hex> <pid>, ...]` in failed checks.
template <>
struct doctest::StringMaker<std::vector<std::pair<std::string, long>>> {
    static doctest::String convert(const std::vector<std::pair<std::string, long>>& v) {
        std::string out = "[";
        for (const auto& [hex, pid] : v) out += (out.size() > 1 ? ", " : "") + hex + " " + std::to_string(pid);
        out += "]";
        return doctest::String(out.c_str());
    }
};

namespace skc_policy_cache_multiprocess_test {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

using skc_test::make_key;
using skc_test::package_content;

// ---- children ------------------------------------------------------------------------------------------

/// Exit status as a number: the exit code, or 128 + the signal that ended the process; -1 when it
/// had to be killed because it did not end in time.
constexpr int killed_by_sigkill = 128 + SIGKILL;

/// The processes a test started. Whatever happens (a failed REQUIRE throws), the destructor kills
/// and reaps every one that was not reaped yet.
class Children {
public:
    Children() = default;
    Children(const Children&) = delete;
    Children& operator=(const Children&) = delete;
    ~Children() { kill_all(); }

    /// Starts the worker with `args`; its stdout and stderr go to `<out_stem>.out` / `.err`.
    pid_t spawn(const std::vector<std::string>& args, const fs::path& out_stem) {
        std::vector<std::string> all{SKC_CACHE_WORKER};
        all.insert(all.end(), args.begin(), args.end());
        std::vector<char*> argv;
        for (std::string& a : all) argv.push_back(a.data());
        argv.push_back(nullptr);
        const std::string out = out_stem.string() + ".out", err = out_stem.string() + ".err";
        posix_spawn_file_actions_t fa;
        REQUIRE(::posix_spawn_file_actions_init(&fa) == 0);
        ::posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        ::posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ::posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        pid_t pid = -1;
        const int rc = ::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
        ::posix_spawn_file_actions_destroy(&fa);
        REQUIRE_MESSAGE(rc == 0, "posix_spawn failed: " << rc);
        live_.insert(pid);
        return pid;
    }

    /// Waits for `pid` at most `timeout`; on time-out kills it and returns -1.
    int wait(pid_t pid, milliseconds timeout) {
        const auto deadline = Clock::now() + timeout;
        for (;;) {
            int status = 0;
            const pid_t r = ::waitpid(pid, &status, WNOHANG);
            if (r == pid) {
                live_.erase(pid);
                return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            }
            REQUIRE_MESSAGE(r == 0, "waitpid failed for " << pid);
            if (Clock::now() >= deadline) {
                kill_and_reap(pid);
                return -1;
            }
            std::this_thread::sleep_for(milliseconds(2));
        }
    }

    /// True while `pid` runs (not yet exited).
    bool running(pid_t pid) {
        siginfo_t info{};
        return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
    }

    /// SIGKILL and reap: returns the exit status (128 + SIGKILL unless it had ended already).
    int kill_and_reap(pid_t pid) {
        ::kill(pid, SIGKILL);
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        live_.erase(pid);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }

    void kill_all() {
        while (!live_.empty()) kill_and_reap(*live_.begin());
    }

private:
    std::set<pid_t> live_;
};

/// True when this process has no child left (every spawned worker was reaped).
bool no_children() {
    int status = 0;
    return ::waitpid(-1, &status, WNOHANG) == -1 && errno == ECHILD;
}

bool wait_for_file(const fs::path& p, milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!fs::exists(p)) {
        if (Clock::now() >= deadline) return false;
        std::this_thread::sleep_for(milliseconds(1));
    }
    return true;
}

long long ms_since(Clock::time_point t0) { return std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count(); }

// ---- what workers leave ------------------------------------------------------------------------------

struct Fixture {
    skc_test::TempDir tmp;
    fs::path base = tmp.path();
    fs::path log = tmp / "compile.log";
    fs::path cache_root = base / "static_kernel_compile_outputs" / "static_kernel_cache" / "CANN-8.0_dev";
    Children kids;

    std::vector<std::string> args(std::string mode, std::size_t key = 0) const {
        return {"--base", base.string(),   "--log", log.string(),
                "--mode", std::move(mode), "--key", std::to_string(key)};
    }
    fs::path out(const std::string& name) const { return tmp / name; }
    std::string stdout_of(const std::string& name) const { return skc_test::slurp(tmp / (name + ".out")); }
    std::string stderr_of(const std::string& name) const { return skc_test::slurp(tmp / (name + ".err")); }

    /// The cache as a user process opens it.
    std::unique_ptr<skc::IndexCache<skc::FilesystemStorage, skc::FileLock>> open(
        milliseconds wait = milliseconds(30000)) const {
        skc::CacheConfig cfg;
        cfg.log = skc::null_log();
        cfg.wait_timeout = wait;
        return skc::open_cache(skc::Layout(base), "8.0", "dev", cfg);
    }

    /// The names in a folder of the cache (with hidden ones); empty when the folder does not exist.
    std::set<std::string> names(const std::string& folder) const {
        std::set<std::string> out;
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(cache_root / folder, ec)) out.insert(e.path().filename().string());
        return out;
    }
    /// The same without hidden names (temporary files start with '.').
    std::set<std::string> visible(const std::string& folder) const {
        std::set<std::string> out;
        for (const std::string& n : names(folder))
            if (n.front() != '.') out.insert(n);
        return out;
    }

    /// The log as (key hex, pid) pairs; every line must be `compile <32 hex digits> <pid>`.
    std::vector<std::pair<std::string, long>> compiles() const {
        std::vector<std::pair<std::string, long>> out;
        const std::string text = skc_test::slurp(log);
        std::size_t pos = 0;
        while (pos < text.size()) {
            const std::size_t nl = text.find('\n', pos);
            REQUIRE_MESSAGE(nl != std::string::npos, "unterminated log line: " << text.substr(pos));
            const std::string line = text.substr(pos, nl - pos);
            pos = nl + 1;
            REQUIRE_MESSAGE(line.size() > 42, "bad log line: " << line);
            REQUIRE_MESSAGE(line.substr(0, 8) == "compile ", "bad log line: " << line);
            REQUIRE_MESSAGE(line[40] == ' ', "bad log line: " << line);
            const std::string hex = line.substr(8, 32), pid = line.substr(41);
            REQUIRE_MESSAGE(hex.find_first_not_of("0123456789abcdef") == std::string::npos, "bad log line: " << line);
            REQUIRE_MESSAGE(pid.find_first_not_of("0123456789") == std::string::npos, "bad log line: " << line);
            out.emplace_back(hex, std::stol(pid));
        }
        return out;
    }
};

/// `name=value` numbers of the worker's "summary" line.
std::map<std::string, std::uint64_t> summary(const std::string& out) {
    std::map<std::string, std::uint64_t> s;
    const std::size_t at = out.find("summary ");
    REQUIRE_MESSAGE(at != std::string::npos, "no summary in: " << out);
    std::string line = out.substr(at + 8, out.find('\n', at) - at - 8);
    std::size_t pos = 0;
    while (pos < line.size()) {
        std::size_t sp = line.find(' ', pos);
        if (sp == std::string::npos) sp = line.size();
        const std::string field = line.substr(pos, sp - pos);
        const std::size_t eq = field.find('=');
        REQUIRE(eq != std::string::npos);
        s[field.substr(0, eq)] = std::stoull(field.substr(eq + 1));
        pos = sp + 1;
    }
    return s;
}

/// The `key=` and `result=` of a compile-once worker, and its lock wait.
struct Once {
    std::string key, result;
    long long lock_wait_ms = -1;
};

Once once_of(const std::string& out) {
    Once o;
    const std::size_t at = out.find("key=");
    REQUIRE_MESSAGE(at == 0, "no key line in: " << out);
    const std::string line = out.substr(0, out.find('\n'));
    o.key = line.substr(4, 32);
    const std::size_t w = line.find(" lock_wait_ms="), r = line.find(" result=");
    REQUIRE(w != std::string::npos);
    REQUIRE(r != std::string::npos);
    o.lock_wait_ms = std::stoll(line.substr(w + 14, r - w - 14));
    o.result = line.substr(r + 8);
    return o;
}

/// Looks `i` up in `cache` and checks the package byte for byte.
template <class Cache>
void check_present(Cache& cache, std::size_t i) {
    const std::string hex = make_key(i).hex();
    auto h = cache.lookup(make_key(i));
    REQUIRE_MESSAGE(h.has_value(), "key " << i << " (" << hex << ") is missing");
    CHECK(cache.verify(*h));
    CHECK(h->entry.key == hex);
    CHECK(h->entry.size == package_content(hex).size());
    REQUIRE(h->package_path.has_value());
    CHECK(skc_test::slurp(*h->package_path) == package_content(hex));
}

}  // namespace

TEST_CASE("16 processes look up and compile on one cache: no torn read, one compile per key, nothing lost") {
    Fixture f;
    constexpr std::size_t workers = 16, keys = 32;
    std::vector<pid_t> pids;
    for (std::size_t w = 0; w < workers; ++w) {
        const std::string name = "mixed" + std::to_string(w);
        std::vector<std::string> a = f.args("mixed");
        a.insert(a.end(),
                 {"--keys", std::to_string(keys), "--seconds", "3", "--compile-ms", "10", "--seed",
                  std::to_string(w + 1), "--ready", f.out(name + ".ready").string(), "--go", f.out("go").string()});
        pids.push_back(f.kids.spawn(a, f.out(name)));
    }
    for (std::size_t w = 0; w < workers; ++w)
        REQUIRE(wait_for_file(f.out("mixed" + std::to_string(w) + ".ready"), milliseconds(30000)));
    const auto t0 = Clock::now();
    skc_test::spit(f.out("go"), "");

    std::map<std::string, std::uint64_t> total;
    std::map<long, std::uint64_t> compiles_by_pid;
    for (std::size_t w = 0; w < workers; ++w) {
        const std::string name = "mixed" + std::to_string(w);
        const int status = f.kids.wait(pids[w], milliseconds(60000));
        INFO(name << " stdout: " << f.stdout_of(name) << " stderr: " << f.stderr_of(name));
        REQUIRE(status == 0);
        CHECK(f.stderr_of(name).empty());
        const auto s = summary(f.stdout_of(name));
        for (const auto& [k, v] : s) total[k] += v;
        compiles_by_pid[static_cast<long>(pids[w])] = s.at("compiles");
        CHECK(s.at("iterations") >= keys);
    }
    MESSAGE("16 workers ran " << ms_since(t0) << " ms: " << total["iterations"] << " calls, " << total["hits"]
                              << " hits, " << total["waits"] << " hits after waiting, " << total["compiles"]
                              << " compiles, " << total["lookup_hits"] << " lookup hits, " << total["lookup_misses"]
                              << " lookup misses");

    // Every key was compiled exactly once, by the worker that says it compiled it.
    std::set<std::string> all;
    for (std::size_t i = 0; i < keys; ++i) all.insert(make_key(i).hex());
    REQUIRE(all.size() == keys);
    std::map<std::string, int> per_key;
    std::map<long, std::uint64_t> per_pid;
    for (const auto& [hex, pid] : f.compiles()) {
        ++per_key[hex];
        ++per_pid[pid];
    }
    CHECK(per_key.size() == keys);
    for (const auto& kn : per_key) {  // (no structured bindings: clang 14 cannot capture them in CHECK_MESSAGE)
        const std::string& hex = kn.first;
        const int n = kn.second;
        CHECK_MESSAGE(all.count(hex) == 1, hex);
        CHECK_MESSAGE(n == 1, hex << " was compiled " << n << " times");
    }
    CHECK(total["compiles"] == keys);
    for (const auto& pn : compiles_by_pid) {
        const long pid = pn.first;
        CHECK_MESSAGE(per_pid[pid] == pn.second, "worker " << pid);
    }

    // Exactly one entry and one package per key, no temporary file left, and all of them sound.
    std::set<std::string> packages;
    for (const std::string& hex : all) packages.insert(hex + ".run");
    CHECK(f.names("entries") == all);
    CHECK(f.names("packages") == packages);
    auto cache = f.open();
    const skc::CacheStats st = cache->persisted_stats();
    CHECK(st.compiles == keys);
    CHECK(st.corrupt == 0);
    CHECK(st.evictions == 0);
    CHECK(st.waits == total["waits"]);
    // One hit or one miss per call: a wait that ends in a hit is a hit.
    CHECK(st.hits == total["hits"] + total["waits"] + total["lookup_hits"]);
    CHECK(st.misses == total["compiles"] + total["lookup_misses"]);
    CHECK(cache->entries().size() == keys);
    const skc::VerifyReport v = cache->verify_all();
    CHECK(v.checked == keys);
    CHECK(v.bad.empty());
    for (std::size_t i = 0; i < keys; ++i) check_present(*cache, i);
    CHECK(f.names("entries") == all);
    CHECK(no_children());
}

TEST_CASE("single flight: 8 processes asking for one key at once compile it once") {
    Fixture f;
    constexpr std::size_t workers = 8;
    std::vector<pid_t> pids;
    for (std::size_t w = 0; w < workers; ++w) {
        const std::string name = "once" + std::to_string(w);
        std::vector<std::string> a = f.args("compile-once", 0);
        a.insert(a.end(),
                 {"--compile-ms", "500", "--ready", f.out(name + ".ready").string(), "--go", f.out("go").string()});
        pids.push_back(f.kids.spawn(a, f.out(name)));
    }
    for (std::size_t w = 0; w < workers; ++w)
        REQUIRE(wait_for_file(f.out("once" + std::to_string(w) + ".ready"), milliseconds(30000)));
    const auto t0 = Clock::now();
    skc_test::spit(f.out("go"), "");

    const std::string hex = make_key(0).hex();
    std::map<std::string, int> results;
    long compiler = -1;
    for (std::size_t w = 0; w < workers; ++w) {
        const std::string name = "once" + std::to_string(w);
        const int status = f.kids.wait(pids[w], milliseconds(30000));
        INFO(name << " stdout: " << f.stdout_of(name) << " stderr: " << f.stderr_of(name));
        REQUIRE(status == 0);
        const Once o = once_of(f.stdout_of(name));
        CHECK(o.key == hex);
        ++results[o.result];
        if (o.result == "compiled") compiler = static_cast<long>(pids[w]);
        if (o.result == "waited") CHECK(o.lock_wait_ms >= 100);  // it waited for the 500 ms compile
    }
    MESSAGE("8 processes, one 500 ms compile: " << ms_since(t0) << " ms");
    CHECK(results == std::map<std::string, int>{{"waited", 7}, {"compiled", 1}});
    CHECK(f.compiles() == std::vector<std::pair<std::string, long>>{{hex, compiler}});

    auto cache = f.open();
    const skc::CacheStats st = cache->persisted_stats();
    CHECK(st.compiles == 1);
    CHECK(st.waits == 7);
    CHECK(st.hits == 7);
    CHECK(st.misses == 1);
    CHECK(st.corrupt == 0);
    CHECK(f.names("entries") == std::set<std::string>{hex});
    const skc::VerifyReport v = cache->verify_all();
    CHECK(v.checked == 1);
    CHECK(v.bad.empty());
    check_present(*cache, 0);
    CHECK(no_children());
}

// ---- statistics of many processes ------------------------------------------------------------------

namespace {

/// Key 0 in the cache, published by this process.
void publish_key0(Fixture& f) {
    const fs::path pkg = f.out("package.run");
    skc_test::spit(pkg, package_content(make_key(0).hex()));
    f.open()->publish(make_key(0), pkg);
}

/// Starts `workers` processes (named `<prefix><n>`) that each open the cache, hit key 0 `hits`
/// times and destroy the cache, all let go at once (they wait for a file that appears when every one
/// is ready); waits for them. Returns the longest destruction (which saves the statistics), in µs.
std::uint64_t run_hitters(Fixture& f, const std::string& prefix, std::size_t workers, std::uint64_t hits) {
    std::vector<pid_t> pids;
    const fs::path go = f.out(prefix + ".go");
    for (std::size_t w = 0; w < workers; ++w) {
        const std::string name = prefix + std::to_string(w);
        std::vector<std::string> a = f.args("hits", 0);
        a.insert(a.end(),
                 {"--hits", std::to_string(hits), "--ready", f.out(name + ".ready").string(), "--go", go.string()});
        pids.push_back(f.kids.spawn(a, f.out(name)));
    }
    for (std::size_t w = 0; w < workers; ++w)
        REQUIRE(wait_for_file(f.out(prefix + std::to_string(w) + ".ready"), milliseconds(30000)));
    skc_test::spit(go, "");
    std::uint64_t longest = 0;
    for (std::size_t w = 0; w < workers; ++w) {
        const std::string name = prefix + std::to_string(w);
        const int status = f.kids.wait(pids[w], milliseconds(60000));
        INFO(name << " stdout: " << f.stdout_of(name) << " stderr: " << f.stderr_of(name));
        REQUIRE(status == 0);
        const auto s = summary(f.stdout_of(name));
        CHECK(s.at("lookup_hits") == hits);
        longest = std::max(longest, s.at("close_us"));
    }
    return longest;
}

}  // namespace

TEST_CASE("16 processes hitting at once: every hit is counted once, and no process waits for another's fsync") {
    Fixture f;
    publish_key0(f);
    const fs::path stats = f.cache_root / "stats";
    skc_test::spit(stats, "hits 1000\n");  // what earlier processes saved
    struct stat before {};
    REQUIRE(::stat(stats.c_str(), &before) == 0);

    const std::uint64_t longest = run_hitters(f, "hits", 16, 50);
    MESSAGE("16 processes, 50 hits each: the longest destruction took " << longest << " µs");
    // None rewrote `stats` (an fsync'd write under the namespace lock, for which processes closing at
    // the same time used to wait in turn): each appended one line to the log.
    struct stat after {};
    REQUIRE(::stat(stats.c_str(), &after) == 0);
    CHECK(after.st_ino == before.st_ino);
    CHECK(after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
    const std::string log = skc_test::slurp(f.cache_root / "stats.log");
    std::size_t lines = 0;
    for (std::size_t at = 0; (at = log.find("\nskc-stats ", at)) != std::string::npos; ++at) ++lines;
    CHECK(lines == 16);

    auto cache = f.open();
    CHECK(cache->persisted_stats().hits == 1000 + 16 * 50);
    cache->fold_stats();
    CHECK(skc_test::slurp(f.cache_root / "stats.log") == log);  // read, not moved: appends take no lock
    CHECK(skc::CacheStats::decode(skc_test::slurp(stats)).hits == 1000 + 16 * 50);
    CHECK(cache->persisted_stats().hits == 1000 + 16 * 50);
    CHECK(no_children());
}

TEST_CASE("16 processes append while one of them folds the full log: no count lost or counted twice") {
    Fixture f;
    publish_key0(f);
    const fs::path stats = f.cache_root / "stats";
    std::uint64_t want = 0;
    for (int round = 0; round < 3; ++round) {
        // A log filled to less than a line short of the next MiB: the first process to close takes
        // it past the MiB and folds it while the others append.
        skc::CacheStats one;
        one.hits = 1;
        const std::string line = skc::detail::stats_log_line(one, {}, 0);
        std::error_code ec;
        const std::uint64_t size = fs::file_size(f.cache_root / "stats.log", ec);
        const std::uint64_t next =
            ((ec ? 0 : size) / skc::detail::stats_log_fold_bytes + 1) * skc::detail::stats_log_fold_bytes;
        std::string big;
        while ((ec ? 0 : size) + big.size() + line.size() < next) big += line;
        {
            std::ofstream out(f.cache_root / "stats.log", std::ios::binary | std::ios::app);
            out << big;
        }
        const std::uint64_t prefilled = big.size() / line.size();
        run_hitters(f, "round" + std::to_string(round) + "-", 16, 20);
        want += prefilled + 16 * 20;
        CAPTURE(round);
        CHECK(skc::CacheStats::decode(skc_test::slurp(stats)).hits >= want - 16 * 20);  // folded by a worker
        CHECK(f.open()->persisted_stats().hits == want);
    }
    auto cache = f.open();
    cache->fold_stats();
    CHECK(cache->persisted_stats().hits == want);
    CHECK(skc::CacheStats::decode(skc_test::slurp(stats)).hits == want);
    CHECK(no_children());
}

TEST_CASE("single flight holds when the entry a waiter saw is evicted before it pins it") {
    // get_or_compile of P1, stopped by the worker's PausingLock between its lock operations:
    //   lookup misses (C compiles) -> exclusive (#1) -> C published: entry seen, exclusive released
    //   -> shared pin (#2): here the entry is cleared -> miss -> exclusive again (#3): here P2
    //   compiles and publishes the key -> P1 takes the exclusive lock. P2's entry is there: P1 must
    //   use it (a hit after waiting), not compile the key a second time.
    Fixture f;
    const std::string hex = make_key(0).hex();
    const fs::path pauses = f.out("p1");
    fs::create_directories(pauses);

    std::vector<std::string> c = f.args("compile-once", 0);
    c.insert(c.end(), {"--compile-ms", "1500", "--signal", f.out("c.sig").string()});
    const pid_t pc = f.kids.spawn(c, f.out("c"));
    REQUIRE(wait_for_file(f.out("c.sig"), milliseconds(30000)));

    std::vector<std::string> p = f.args("compile-once", 0);
    p.insert(p.end(), {"--pause-locks", "3", "--pause-dir", pauses.string()});
    const pid_t p1 = f.kids.spawn(p, f.out("p1"));
    REQUIRE(wait_for_file(pauses / "lock1.exclusive", milliseconds(30000)));
    skc_test::spit(pauses / "go1", "");

    REQUIRE(f.kids.wait(pc, milliseconds(30000)) == 0);
    CHECK(once_of(f.stdout_of("c")).result == "compiled");
    REQUIRE(wait_for_file(pauses / "lock2.shared", milliseconds(30000)));
    auto cache = f.open();
    CHECK(cache->clear().removed == 1);  // say, `skc cache clear` in another shell
    CHECK(f.visible("entries").empty());
    skc_test::spit(pauses / "go2", "");

    REQUIRE(wait_for_file(pauses / "lock3.exclusive", milliseconds(30000)));
    const pid_t p2 = f.kids.spawn(f.args("compile-once", 0), f.out("p2"));
    REQUIRE(f.kids.wait(p2, milliseconds(10000)) == 0);
    CHECK(once_of(f.stdout_of("p2")).result == "compiled");
    CHECK(f.visible("entries") == std::set<std::string>{hex});
    skc_test::spit(pauses / "go3", "");

    const int status = f.kids.wait(p1, milliseconds(10000));
    INFO("p1 stdout: " << f.stdout_of("p1") << " stderr: " << f.stderr_of("p1"));
    REQUIRE(status == 0);
    CHECK(once_of(f.stdout_of("p1")).result == "waited");
    CHECK(f.compiles() ==
          std::vector<std::pair<std::string, long>>{{hex, static_cast<long>(pc)}, {hex, static_cast<long>(p2)}});
    const skc::VerifyReport v = cache->verify_all();
    CHECK(v.checked == 1);
    CHECK(v.bad.empty());
    check_present(*cache, 0);
    CHECK(no_children());
}

TEST_CASE("a process killed while it compiles releases the key: the waiter compiles, no hang") {
    Fixture f;
    const std::string hex = make_key(0).hex();
    // A logs its compile, creates its signal file, and SIGKILLs itself 1.5 s later, holding the key.
    std::vector<std::string> a = f.args("compile-once", 0);
    a.insert(a.end(),
             {"--crash-at", "during-compile", "--crash-delay-ms", "1500", "--signal", f.out("a.sig").string()});
    const pid_t pa = f.kids.spawn(a, f.out("a"));
    REQUIRE(wait_for_file(f.out("a.sig"), milliseconds(30000)));

    std::vector<std::string> b = f.args("compile-once", 0);
    b.insert(b.end(), {"--wait-ms", "30000", "--compile-ms", "50", "--ready", f.out("b.ready").string()});
    const auto t0 = Clock::now();
    const pid_t pb = f.kids.spawn(b, f.out("b"));
    REQUIRE(wait_for_file(f.out("b.ready"), milliseconds(30000)));
    CHECK(f.kids.running(pa));  // B asks while A still holds the key

    CHECK(f.kids.wait(pa, milliseconds(30000)) == killed_by_sigkill);
    const int status = f.kids.wait(pb, milliseconds(10000));  // far less than B's 30 s wait_timeout
    const long long took = ms_since(t0);
    MESSAGE("the waiter finished " << took << " ms after it started (A died about 1.5 s after its signal)");
    INFO("b stdout: " << f.stdout_of("b") << " stderr: " << f.stderr_of("b"));
    REQUIRE(status == 0);
    CHECK(took < 10000);
    const Once o = once_of(f.stdout_of("b"));
    CHECK(o.key == hex);
    CHECK(o.result == "compiled");
    CHECK(o.lock_wait_ms >= 200);  // it waited for A's death, not for a timeout
    CHECK(o.lock_wait_ms < 10000);
    CHECK(f.compiles() ==
          std::vector<std::pair<std::string, long>>{{hex, static_cast<long>(pa)}, {hex, static_cast<long>(pb)}});

    CHECK(f.names("entries") == std::set<std::string>{hex});
    CHECK(f.names("packages") == std::set<std::string>{hex + ".run"});
    auto cache = f.open();
    const skc::CacheStats st = cache->persisted_stats();  // A never saved its counters
    CHECK(st.compiles == 1);
    CHECK(st.corrupt == 0);
    const skc::VerifyReport v = cache->verify_all();
    CHECK(v.checked == 1);
    CHECK(v.bad.empty());
    check_present(*cache, 0);
    CHECK(no_children());
}

TEST_CASE("a process killed while writing a package: the next one compiles, the temporary is no entry") {
    Fixture f;
    const std::string hex = make_key(0).hex();
    std::vector<std::string> a = f.args("compile-once", 0);
    a.insert(a.end(), {"--crash-at", "during-package-write"});
    const pid_t pa = f.kids.spawn(a, f.out("a"));
    CHECK(f.kids.wait(pa, milliseconds(30000)) == killed_by_sigkill);

    // What the kill left: half a package in a temporary file, no entry.
    const std::string tmp_name = ".tmp." + std::to_string(pa) + ".0." + hex + ".run";
    REQUIRE(f.names("packages") == std::set<std::string>{tmp_name});
    const std::string full = package_content(hex);
    CHECK(skc_test::slurp(f.cache_root / "packages" / tmp_name) == full.substr(0, full.size() / 2));
    CHECK(f.names("entries").empty());

    auto cache = f.open();
    CHECK_FALSE(cache->lookup(make_key(0)).has_value());
    CHECK(cache->entries().empty());
    skc::VerifyReport v = cache->verify_all();
    CHECK(v.checked == 0);
    CHECK(v.bad.empty());

    const auto t0 = Clock::now();
    const pid_t pb = f.kids.spawn(f.args("compile-once", 0), f.out("b"));
    const int status = f.kids.wait(pb, milliseconds(10000));
    MESSAGE("the next process finished in " << ms_since(t0) << " ms");
    INFO("b stdout: " << f.stdout_of("b") << " stderr: " << f.stderr_of("b"));
    REQUIRE(status == 0);
    CHECK(once_of(f.stdout_of("b")).result == "compiled");
    const pid_t pc = f.kids.spawn(f.args("compile-once", 0), f.out("c"));
    REQUIRE(f.kids.wait(pc, milliseconds(10000)) == 0);
    CHECK(once_of(f.stdout_of("c")).result == "hit");
    CHECK(f.compiles() ==
          std::vector<std::pair<std::string, long>>{{hex, static_cast<long>(pa)}, {hex, static_cast<long>(pb)}});

    CHECK(f.visible("entries") == std::set<std::string>{hex});
    CHECK(f.visible("packages") == std::set<std::string>{hex + ".run"});
    CHECK(cache->entries().size() == 1);
    v = cache->verify_all();
    CHECK(v.checked == 1);
    CHECK(v.bad.empty());
    check_present(*cache, 0);
    CHECK(cache->stats().corrupt == 0);
    CHECK(no_children());
}

TEST_CASE("a process killed while writing an entry: the orphan package and the temporary are no entry") {
    Fixture f;
    const std::string hex = make_key(0).hex();
    std::vector<std::string> a = f.args("compile-once", 0);
    a.insert(a.end(), {"--crash-at", "during-entry-write"});
    const pid_t pa = f.kids.spawn(a, f.out("a"));
    CHECK(f.kids.wait(pa, milliseconds(30000)) == killed_by_sigkill);

    // What the kill left: the whole package (published first), half an entry in a temporary file.
    const std::string tmp_name = ".tmp." + std::to_string(pa) + ".0." + hex;
    REQUIRE(f.names("entries") == std::set<std::string>{tmp_name});
    const std::string half = skc_test::slurp(f.cache_root / "entries" / tmp_name);
    CHECK(half.substr(0, 18) == "skc-cache-entry 1\n");
    CHECK(half.find("check ") == std::string::npos);
    CHECK(f.names("packages") == std::set<std::string>{hex + ".run"});
    CHECK(skc_test::slurp(f.cache_root / "packages" / (hex + ".run")) == package_content(hex));

    auto cache = f.open();
    CHECK_FALSE(cache->lookup(make_key(0)).has_value());
    CHECK(cache->entries().empty());
    skc::VerifyReport v = cache->verify_all();
    CHECK(v.checked == 0);
    CHECK(v.bad.empty());

    const auto t0 = Clock::now();
    const pid_t pb = f.kids.spawn(f.args("compile-once", 0), f.out("b"));
    const int status = f.kids.wait(pb, milliseconds(10000));
    MESSAGE("the next process finished in " << ms_since(t0) << " ms");
    INFO("b stdout: " << f.stdout_of("b") << " stderr: " << f.stderr_of("b"));
    REQUIRE(status == 0);
    CHECK(once_of(f.stdout_of("b")).result == "compiled");
    const pid_t pc = f.kids.spawn(f.args("compile-once", 0), f.out("c"));
    REQUIRE(f.kids.wait(pc, milliseconds(10000)) == 0);
    CHECK(once_of(f.stdout_of("c")).result == "hit");
    CHECK(f.compiles() ==
          std::vector<std::pair<std::string, long>>{{hex, static_cast<long>(pa)}, {hex, static_cast<long>(pb)}});

    CHECK(f.visible("entries") == std::set<std::string>{hex});
    CHECK(f.names("packages") == std::set<std::string>{hex + ".run"});
    CHECK(cache->entries().size() == 1);
    v = cache->verify_all();
    CHECK(v.checked == 1);
    CHECK(v.bad.empty());
    check_present(*cache, 0);
    CHECK(cache->stats().corrupt == 0);
    CHECK(no_children());
}

TEST_CASE("a process killed while holding a pin: its pin dies with it, eviction and prune proceed") {
    Fixture f;
    const std::string k0 = make_key(0).hex(), k1 = make_key(1).hex(), k2 = make_key(2).hex();
    const pid_t p0 = f.kids.spawn(f.args("compile-once", 0), f.out("w0"));
    REQUIRE(f.kids.wait(p0, milliseconds(10000)) == 0);

    std::vector<std::string> h = f.args("hold-pin", 0);
    h.insert(h.end(), {"--signal", f.out("pin.sig").string()});
    const pid_t holder = f.kids.spawn(h, f.out("holder"));
    REQUIRE(wait_for_file(f.out("pin.sig"), milliseconds(30000)));

    // Key 1 with room for one entry: key 0 is over the limit but pinned, so it stays.
    std::vector<std::string> w1 = f.args("compile-once", 1);
    w1.insert(w1.end(), {"--max-entries", "1"});
    const pid_t p1 = f.kids.spawn(w1, f.out("w1"));
    REQUIRE(f.kids.wait(p1, milliseconds(10000)) == 0);
    CHECK(once_of(f.stdout_of("w1")).result == "compiled");
    CHECK(f.names("entries") == std::set<std::string>{k0, k1});

    auto cache = f.open();
    skc::PruneReport r = cache->prune(skc::CacheLimits{0, 0}, std::chrono::seconds(0));
    CHECK(r.removed == 1);         // key 1
    CHECK(r.skipped_in_use == 1);  // key 0, pinned
    CHECK(r.entries_left == 1);
    CHECK(r.bytes_left == package_content(k0).size());
    CHECK(f.names("entries") == std::set<std::string>{k0});
    CHECK(f.kids.running(holder));

    CHECK(f.kids.kill_and_reap(holder) == killed_by_sigkill);

    // Key 2 with room for one entry: key 0 is no longer pinned and is evicted.
    std::vector<std::string> w2 = f.args("compile-once", 2);
    w2.insert(w2.end(), {"--max-entries", "1"});
    const pid_t p2 = f.kids.spawn(w2, f.out("w2"));
    REQUIRE(f.kids.wait(p2, milliseconds(10000)) == 0);
    CHECK(once_of(f.stdout_of("w2")).result == "compiled");
    CHECK(f.names("entries") == std::set<std::string>{k2});
    CHECK(f.names("packages") == std::set<std::string>{k2 + ".run"});
    check_present(*cache, 2);

    r = cache->prune(skc::CacheLimits{0, 0}, std::chrono::seconds(0));
    CHECK(r.removed == 1);
    CHECK(r.removed_bytes == package_content(k2).size());
    CHECK(r.skipped_in_use == 0);
    CHECK(r.entries_left == 0);
    CHECK(f.names("entries").empty());
    CHECK(f.names("packages").empty());
    const skc::CacheStats st = cache->persisted_stats();
    CHECK(st.evictions == 3);  // key 0 by w2's publish, key 1 and key 2 by this process's prunes
    CHECK(st.compiles == 3);
    CHECK(no_children());
}

TEST_CASE("a key held by a process that never lets go: waiters get Errc::timeout after their wait_timeout") {
    Fixture f;
    const std::string hex = make_key(0).hex();
    std::vector<std::string> h = f.args("hold-lock", 0);
    h.insert(h.end(), {"--signal", f.out("hold.sig").string()});
    const pid_t holder = f.kids.spawn(h, f.out("holder"));
    REQUIRE(wait_for_file(f.out("hold.sig"), milliseconds(30000)));

    const std::string expected = "waited 1 s for another process compiling cache key " + hex;

    // Another process with a 1 s wait_timeout, at the same time as this one.
    std::vector<std::string> w = f.args("compile-once", 0);
    w.insert(w.end(), {"--wait-ms", "1000"});
    const pid_t waiter = f.kids.spawn(w, f.out("waiter"));

    auto cache = f.open(milliseconds(1000));
    auto t0 = Clock::now();
    CHECK_FALSE(cache->lookup(make_key(0)).has_value());  // a lookup does not wait
    CHECK(ms_since(t0) < 500);

    bool compiled = false;
    t0 = Clock::now();
    try {
        (void)cache->get_or_compile(make_key(0), [&]() -> fs::path {
            compiled = true;
            return {};
        });
        FAIL("get_or_compile returned while another process held the key");
    } catch (const skc::Error& e) {
        const long long took = ms_since(t0);
        MESSAGE("timed out after " << took << " ms");
        CHECK(e.code() == skc::Errc::timeout);
        CHECK(e.message() == expected);
        CHECK(std::string(e.what()) == expected);
        CHECK(took >= 1000);
        CHECK(took < 2500);
    }
    CHECK_FALSE(compiled);

    const int ws = f.kids.wait(waiter, milliseconds(10000));
    INFO("waiter stdout: " << f.stdout_of("waiter") << " stderr: " << f.stderr_of("waiter"));
    CHECK(ws == 4);
    CHECK(f.stdout_of("waiter") == "error timeout " + expected + "\n");

    // Killed, the holder lets go: the key can be compiled at once.
    CHECK(f.kids.running(holder));
    CHECK(f.kids.kill_and_reap(holder) == killed_by_sigkill);
    const fs::path pkg = f.out("package.run");
    skc_test::spit(pkg, package_content(hex));
    t0 = Clock::now();
    auto out = cache->get_or_compile(make_key(0), [&] { return pkg; });
    CHECK(ms_since(t0) < 1000);
    CHECK(out.result == skc::CacheResult::compiled);
    REQUIRE(out.hit.has_value());
    CHECK(skc_test::slurp(*out.hit->package_path) == package_content(hex));
    CHECK(f.compiles() == std::vector<std::pair<std::string, long>>{{hex, static_cast<long>(holder)}});
    CHECK(no_children());
}

}  // namespace skc_policy_cache_multiprocess_test
