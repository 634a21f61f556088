// benchmarks/remote_bench.cpp: the remote cache tier (skc::RedisRemote) beside the local cache and
// beside the compile a remote hit saves. A real redis-server is started on a free port of 127.0.0.1
// (tests/support/redis_server.hpp, no persistence) for the run; the cache folders are in $TMPDIR.
//
// Packages: `1MB` and `100MB` (10^6 and 10^8 random bytes: 1 and 3 chunks of 32 MiB), and, when
// host_op_compiler is built, `example`: the real package host_op_compiler makes of the example ops
// (examples/op_info), compiled once when first needed. Each is uploaded once through a cache of its
// own (get_or_compile: compiled, published, uploaded) and downloaded once, before anything is timed.
//
//   BM_RemoteHit/<pkg>               IndexCache::get_or_compile of the package's key in a cache
//                                    folder emptied beforehand (clear(); its folders stay), a new
//                                    IndexCache whose RedisRemote is connected beforehand: the local
//                                    miss, the record, the chunks (GET), their size and checksum, the
//                                    local publish; CacheResult::downloaded. Bytes/s: package bytes;
//                                    cpu_ms: this process's CPU time in the call; next_hit_ms: the
//                                    get_or_compile that follows in the same cache (a hit), untimed.
//   BM_Floor_Download/<pkg>          the least a remote hit can do with the same durability: the
//                                    record, each chunk hashed and written as it arrives into a
//                                    temporary file in the cache's package folder, checked, fsync'd
//                                    and renamed, the folder fsync'd, the entry written (fsync'd).
//                                    cpu_ms as above.
//   BM_LocalHit/steady/<pkg>         get_or_compile of a key the cache holds, in a cache that checked
//                                    the package already: lock, entry, lstat of the package.
//   BM_LocalHit/new_process/<pkg>    the same in a new IndexCache each iteration (opened outside the
//                                    timing), the node's memo of the checked package on disk: a read
//                                    of the memo, no hash.
//   BM_LocalHit/first_on_node/<pkg>  the same with the memo removed beforehand: the package is read
//                                    and hashed in full once, and the memo written: the first hit on a
//                                    node, which hashes the package as a remote hit does.
//   BM_HostCompile                   the compile a hit saves: the example ops compiled by the real
//                                    host_op_compiler (StaticKernelCompiler<ProcessInvoker>, 2 jobs,
//                                    a new base each iteration, no install); the time is the report's
//                                    `compile` stage (the compiler process), the whole compile() in
//                                    the counter whole_s.
//   BM_Miss/<tiers>/<key>            a key in neither tier: from the call of get_or_compile to the
//                                    call of the compile function (which throws at once); `local`: a
//                                    cache without a remote tier; `both_tiers`: with RedisRemote.
//                                    `same_key`: one key every iteration (its lock file exists);
//                                    `new_key`: a key never seen before each iteration. median_us:
//                                    the median iteration (the parts below give it too).
//
// The parts of those paths, on their own (for where the time goes):
//   BM_Part_Transfer/<pkg>   the record and every chunk through RedisRemote::get_chunk, discarded.
//   BM_Part_Hash/<pkg>       MurmurHash3 (the cache's checksum) of the bytes in memory.
//   BM_Part_TempWrite/<pkg>  the bytes written to a temporary file in $TMPDIR (closed and removed),
//                            as the download does before it checks them.
//   BM_Part_Import/<pkg>     FilesystemStorage::import_file of a package file into an empty folder:
//                            copied, fsync'd, renamed (the local publish of a download).
//   BM_Part_MissCommands     the commands a miss in both tiers sends before compiling: GET record,
//                            INCR fence, SET lease NX PX, GET record (the lease released untimed).
//   BM_Part_TempFile         a temporary file created and removed in $TMPDIR (each remote lookup
//                            creates one before it knows whether there is a record).
//   BM_Part_Thread           a std::jthread started (the lease renewer), joined untimed.
//   BM_Part_Connect          RedisRemote opened and its first command sent: the connection.
//
// At the end the medians (or single runs) are printed as the ratios docs/performance.md reports.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <skc/compiler.hpp>
#include <skc/ext/redis.hpp>
#include <skc/layout.hpp>
#include <skc/op_info_io.hpp>
#include <skc/op_set.hpp>
#include <skc/policy/cache.hpp>
#include <skc/policy/remote.hpp>

#include "bench_support.hpp"
#include "redis_server.hpp"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Cache = skc::IndexCache<skc::FilesystemStorage, skc::FileLock>;

constexpr std::string_view toolchain_version = "8.0.0";
constexpr std::string_view device = "Ascend910B1";

[[noreturn]] void die(const std::string& message) {
    std::fprintf(stderr, "remote_bench: %s\n", message.c_str());
    std::exit(1);
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

/// Per-iteration times, for their median (robust to the preemptions of a busy machine, which the
/// mean Google Benchmark reports is not): set as the counter median_us.
struct Samples {
    std::vector<double> s;
    void add(double seconds) { s.push_back(seconds); }
    void report(benchmark::State& state) {
        if (s.empty()) return;
        std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(s.size() / 2), s.end());
        state.counters["median_us"] = s[s.size() / 2] * 1e6;
    }
};

/// CPU time of this process (every thread), in seconds.
double cpu_seconds() {
    timespec ts{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

/// The remote namespace: the local one's name, as StaticKernelCompiler uses it.
const std::string& remote_ns() {
    static const std::string ns = skc::Layout::cache_stem(toolchain_version, device);
    return ns;
}

/// Warnings and errors of the caches on stderr (none are expected), nothing else.
skc::CacheConfig cache_config() {
    skc::CacheConfig c;
    c.wait_timeout = 60s;
    c.log = [](skc::LogLevel level, std::string_view line) {
        if (level == skc::LogLevel::warning || level == skc::LogLevel::error)
            std::fprintf(stderr, "remote_bench: cache: %.*s\n", static_cast<int>(line.size()), line.data());
    };
    return c;
}

/// The scratch folder and the Redis server of the run, started when first needed.
struct Env {
    skc_bench::Scratch scratch{"skc-remote-bench"};
    skc_test::RedisServer server;
    skc::RemoteConfig remote_config() const {
        skc::RemoteConfig c;
        c.url = server.url();
        return c;
    }
    std::unique_ptr<skc::RemoteTier> open_remote() const {
        std::unique_ptr<skc::RemoteTier> r = skc::RedisRemote::open(remote_config());
        (void)r->lease_held(remote_ns(), "connect");  // connects now, outside any timing
        return r;
    }
    skc::RemoteTier& remote() {  // one connection for the parts
        if (!shared_) shared_ = open_remote();
        return *shared_;
    }

private:
    std::unique_ptr<skc::RemoteTier> shared_;
};

Env& env() {
    static Env e;
    return e;
}

/// A cache folder `dir` (created when missing), with the run's Redis behind it when `remote`.
std::unique_ptr<Cache> open_node(const fs::path& dir, bool remote) {
    auto cache = skc::open_cache(dir, toolchain_version, device, cache_config());
    if (remote) cache->set_remote(env().open_remote(), remote_ns());
    return cache;
}

skc::CacheKey key_named(const std::string& name) {
    static const skc::OpSet no_ops;
    return skc::make_cache_key(
        no_ops, skc::KeyInputs{std::string(toolchain_version), std::string(device), false, {"--skc-bench=" + name}});
}

/// Written and fsync'd, so that its writeback does not fall into a timed iteration.
void write_file(const fs::path& p, std::string_view data) {
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) die("cannot create " + p.string() + ": " + std::strerror(errno));
    skc::detail::write_all(fd, data, p);
    if (::fsync(fd) != 0) die("cannot fsync " + p.string() + ": " + std::strerror(errno));
    ::close(fd);
}

std::string random_bytes(std::size_t n, std::uint64_t seed) {
    std::string out(n, '\0');
    std::uint64_t s = seed;
    for (std::size_t i = 0; i < n; i += 8) {
        std::uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        std::memcpy(out.data() + i, &z, std::min<std::size_t>(8, n - i));
    }
    return out;
}

// ---- the compile a hit saves ----------------------------------------------------------------------

#ifdef SKC_BENCH_HOST_OP_COMPILER
/// The example ops compiled by host_op_compiler in a new base folder `base`, no install.
skc::CompileReport host_compile(const fs::path& base) {
    std::vector<skc::OpRecord> ops;
    for (skc::LoadedOp& op : skc::read_op_info_dir(SKC_BENCH_OP_INFO_DIR).ops) ops.push_back(std::move(op.record));
    fs::create_directories(base);
    skc::StaticKernelCompiler<skc::ProcessInvoker> c(skc::ProcessInvoker(SKC_BENCH_HOST_OP_COMPILER),
                                                     skc_bench::options_for(base), skc_bench::settings_for({}));
    skc::process_compiled().clear();
    skc::CompileReport r = c.compile(ops);
    if (r.outcome != skc::CompileOutcome::compiled) die("the host compile of the example ops did not compile");
    return r;
}
#endif

// ---- packages --------------------------------------------------------------------------------------

struct Package {
    std::string name;
    std::string bytes;
    fs::path file;  // the bytes, as the compile function returns them
    skc::CacheKey key;
    bool uploaded = false;
    std::unique_ptr<Cache> local;  // a cache holding it, checked once (the local hits)
};

/// The package `name` (1MB, 100MB, example), made when first asked for.
Package& package(const std::string& name) {
    static std::map<std::string, std::unique_ptr<Package>> all;
    std::unique_ptr<Package>& slot = all[name];
    if (slot) return *slot;
    auto p = std::make_unique<Package>();
    p->name = name;
    p->key = key_named(name);
    const fs::path dir = env().scratch.dir / "packages";
    fs::create_directories(dir);
    p->file = dir / (name + ".run");
    if (name == "1MB") p->bytes = random_bytes(1'000'000, 1);
    else if (name == "100MB") p->bytes = random_bytes(100'000'000, 2);
#ifdef SKC_BENCH_HOST_OP_COMPILER
    else if (name == "example") {
        const fs::path base = env().scratch.dir / "example-compile";
        const skc::CompileReport r = host_compile(base);
        p->bytes = skc::read_file(r.package, std::size_t{1} << 30);
        fs::remove_all(base);
    }
#endif
    else
        die("no package " + name);
    write_file(p->file, p->bytes);
    slot = std::move(p);
    return *slot;
}

/// get_or_compile of a key that must be there: the compile function is a failure.
template <class C>
auto must_find(C& cache, const skc::CacheKey& key) {
    return cache.get_or_compile(key, []() -> fs::path { throw std::runtime_error("compile called on a hit"); });
}

/// The package with its record and chunks in Redis: compiled (the compile returns its file),
/// published and uploaded by a cache of its own, then downloaded once.
Package& uploaded(const std::string& name) {
    Package& p = package(name);
    if (p.uploaded) return p;
    const fs::path dir = env().scratch.dir / ("publisher-" + name);
    {
        auto cache = open_node(dir, /*remote=*/true);
        const auto out = cache->get_or_compile(p.key, [&] { return p.file; });
        if (out.result != skc::CacheResult::compiled || cache->stats().remote_uploads != 1)
            die("the upload of package " + name + " failed");
    }
    fs::remove_all(dir);
    // One download, untimed, so that no timed download is the process's first.
    const fs::path warm = env().scratch.dir / ("warm-" + name);
    {
        auto cache = open_node(warm, /*remote=*/true);
        if (must_find(*cache, p.key).result != skc::CacheResult::downloaded)
            die("the warm-up download of package " + name + " failed");
    }
    fs::remove_all(warm);
    p.uploaded = true;
    return p;
}

/// A cache that holds the package and has checked it once (so its node memo is on disk).
Cache& local_holder(Package& p) {
    if (p.local) return *p.local;
    p.local = open_node(env().scratch.dir / ("local-" + p.name), /*remote=*/false);
    p.local->publish(p.key, p.file);
    const auto out = p.local->get_or_compile(p.key, [&] { return p.file; });
    if (out.result != skc::CacheResult::hit) die("the local cache does not hit package " + p.name);
    return *p.local;
}

// ---- the remote hit and the local hits -------------------------------------------------------------------

void BM_RemoteHit(benchmark::State& state, std::string name) {
    Package& p = uploaded(name);
    const fs::path dir = env().scratch.dir / "remote-node";
    double next_hit_s = 0, cpu_s = 0;
    for (auto _ : state) {
        auto cache = open_node(dir, /*remote=*/true);
        cache->clear();  // the previous iteration's download; the folders stay
        const double c0 = cpu_seconds();
        const auto t0 = Clock::now();
        auto out = must_find(*cache, p.key);
        const auto t1 = Clock::now();
        cpu_s += cpu_seconds() - c0;
        if (out.result != skc::CacheResult::downloaded || !out.hit || out.hit->entry.size != p.bytes.size() ||
            cache->stats().remote_download_bytes != p.bytes.size()) {
            state.SkipWithError("not a remote hit of the whole package");
            break;
        }
        state.SetIterationTime(seconds(t1 - t0));
        out.hit.reset();
        const auto t2 = Clock::now();
        auto next = must_find(*cache, p.key);
        next_hit_s += seconds(Clock::now() - t2);
        if (next.result != skc::CacheResult::hit) {
            state.SkipWithError("no local hit after the download");
            break;
        }
    }
    fs::remove_all(dir);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * p.bytes.size()));
    state.counters["package_bytes"] = static_cast<double>(p.bytes.size());
    state.counters["next_hit_ms"] = benchmark::Counter(next_hit_s * 1e3, benchmark::Counter::kAvgIterations);
    state.counters["cpu_ms"] = benchmark::Counter(cpu_s * 1e3, benchmark::Counter::kAvgIterations);
}

/// The least a remote hit can do with the durability of the cache's publish: the record, then each
/// chunk hashed and written as it arrives into a temporary file in the cache's package folder; the
/// size and checksum checked; the file fsync'd and renamed, its folder fsync'd; the entry written
/// (FilesystemStorage::write: fsync, rename, folder fsync). No lock, no lookup, no limits.
void BM_Floor_Download(benchmark::State& state, std::string name) {
    Package& p = uploaded(name);
    skc::RemoteTier& r = env().remote();
    const std::string hex = p.key.hex();
    const fs::path dir = env().scratch.dir / "floor-node";
    fs::create_directories(dir / "packages");
    fs::create_directories(dir / "entries");
    skc::FilesystemStorage storage(dir);
    const fs::path tmp = dir / "packages" / (".tmp." + hex + ".run");
    const fs::path final_path = dir / "packages" / (hex + ".run");
    double cpu_s = 0;
    for (auto _ : state) {
        fs::remove(final_path);
        fs::remove(dir / "entries" / hex);
        const double c0 = cpu_seconds();
        const auto t0 = Clock::now();
        const std::optional<std::string> text = r.get_record(remote_ns(), hex);
        std::optional<skc::RemoteRecord> rec = text ? skc::decode_remote_record(*text, hex) : std::nullopt;
        if (!rec) {
            state.SkipWithError("no record");
            break;
        }
        const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) die("cannot create " + tmp.string() + ": " + std::strerror(errno));
        skc::detail::Hasher h;
        std::uint64_t got = 0;
        for (std::uint64_t i = 0; i < rec->chunks; ++i)
            r.get_chunk(remote_ns(), hex, rec->token, i, [&](std::string_view c) {
                h.update(c);
                got += c.size();
                skc::detail::write_all(fd, c, tmp);
            });
        const bool whole = got == rec->entry.size && h.digest() == rec->entry.checksum;
        if (::fsync(fd) != 0) die("fsync failed");
        ::close(fd);
        if (!whole) {
            state.SkipWithError("the package is not the record's");
            break;
        }
        fs::rename(tmp, final_path);
        skc::detail::fsync_dir(dir / "packages");
        rec->entry.package = "packages/" + hex + ".run";
        storage.write("entries/" + hex, skc::detail::encode_entry(rec->entry));
        state.SetIterationTime(seconds(Clock::now() - t0));
        cpu_s += cpu_seconds() - c0;
    }
    fs::remove_all(dir);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * p.bytes.size()));
    state.counters["cpu_ms"] = benchmark::Counter(cpu_s * 1e3, benchmark::Counter::kAvgIterations);
}

void BM_LocalHit_Steady(benchmark::State& state, std::string name) {
    Package& p = package(name);
    Cache& cache = local_holder(p);
    for (auto _ : state) {
        auto out = must_find(cache, p.key);
        if (out.result != skc::CacheResult::hit) {
            state.SkipWithError("not a hit");
            break;
        }
        benchmark::DoNotOptimize(out);
    }
    state.counters["package_bytes"] = static_cast<double>(p.bytes.size());
}

/// A hit in a new IndexCache each iteration; `first_on_node`: the node's memo removed beforehand.
void BM_LocalHit_Fresh(benchmark::State& state, std::string name, bool first_on_node) {
    Package& p = package(name);
    const fs::path dir = local_holder(p).locks().dir();
    for (auto _ : state) {
        std::unique_ptr<Cache> cache = open_node(dir, /*remote=*/false);
        if (first_on_node)
            for (const std::string& memo : cache->storage().list("verified")) cache->storage().remove(memo);
        const auto t0 = Clock::now();
        auto out = must_find(*cache, p.key);
        const auto t1 = Clock::now();
        if (out.result != skc::CacheResult::hit) {
            state.SkipWithError("not a hit");
            break;
        }
        state.SetIterationTime(seconds(t1 - t0));
    }
    state.counters["package_bytes"] = static_cast<double>(p.bytes.size());
}

#ifdef SKC_BENCH_HOST_OP_COMPILER
void BM_HostCompile(benchmark::State& state) {
    double whole_s = 0, bytes = 0, ops = 0;
    int n = 0;
    for (auto _ : state) {
        const fs::path base = env().scratch.dir / ("compile-" + std::to_string(n++));
        const skc::CompileReport r = host_compile(base);
        state.SetIterationTime(seconds(r.stage("compile")));
        whole_s += seconds(r.total());
        bytes = static_cast<double>(fs::file_size(r.package));
        ops = static_cast<double>(r.selected);
        fs::remove_all(base);
    }
    state.counters["whole_s"] = benchmark::Counter(whole_s, benchmark::Counter::kAvgIterations);
    state.counters["package_bytes"] = bytes;
    state.counters["ops"] = ops;
}
#endif

// ---- a key in neither tier -------------------------------------------------------------------------

struct CompileReached {};

void BM_Miss(benchmark::State& state, bool remote, bool new_key) {
    const fs::path dir =
        env().scratch.dir / (std::string(remote ? "miss-both" : "miss-local") + (new_key ? "-new" : "-same"));
    auto cache = open_node(dir, remote);
    std::uint64_t n = 0;
    skc::CacheKey key = key_named("miss");
    Clock::time_point reached;
    const auto compile = [&]() -> fs::path {
        reached = Clock::now();
        throw CompileReached{};
    };
    const auto miss = [&] {
        try {
            (void)cache->get_or_compile(key, compile);
        } catch (const CompileReached&) {
            return true;
        }
        return false;
    };
    if (!new_key && !miss()) die("the key to miss was found");  // its lock file made, untimed
    Samples samples;
    for (auto _ : state) {
        if (new_key) key = key_named("miss-" + std::string(remote ? "both-" : "local-") + std::to_string(n++));
        const auto t0 = Clock::now();
        if (!miss()) {
            state.SkipWithError("the compile function was not called");
            break;
        }
        state.SetIterationTime(seconds(reached - t0));
        samples.add(seconds(reached - t0));
    }
    samples.report(state);
    const skc::CacheStats s = cache->stats();
    if (remote && s.remote_errors != 0) state.SkipWithError("the remote tier failed");
    state.counters["remote_misses"] = static_cast<double>(s.remote_misses);
}

// ---- the parts ---------------------------------------------------------------------------------------

void BM_Part_Transfer(benchmark::State& state, std::string name) {
    Package& p = uploaded(name);
    skc::RemoteTier& r = env().remote();
    const std::string hex = p.key.hex();
    for (auto _ : state) {
        std::uint64_t got = 0;
        const std::optional<std::string> text = r.get_record(remote_ns(), hex);
        const std::optional<skc::RemoteRecord> rec = text ? skc::decode_remote_record(*text, hex) : std::nullopt;
        if (!rec) {
            state.SkipWithError("no record");
            break;
        }
        for (std::uint64_t i = 0; i < rec->chunks; ++i)
            r.get_chunk(remote_ns(), hex, rec->token, i, [&](std::string_view c) { got += c.size(); });
        if (got != p.bytes.size()) {
            state.SkipWithError("a chunk is missing");
            break;
        }
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * p.bytes.size()));
}

void BM_Part_Hash(benchmark::State& state, std::string name) {
    Package& p = package(name);
    for (auto _ : state) {
        skc::detail::Hasher h;
        h.update(p.bytes);
        benchmark::DoNotOptimize(h.digest());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * p.bytes.size()));
}

void BM_Part_TempWrite(benchmark::State& state, std::string name) {
    Package& p = package(name);
    for (auto _ : state) {
        skc::detail::TempFile tmp = skc::detail::TempFile::create("skc-download-");
        for (std::size_t at = 0; at < p.bytes.size(); at += skc::remote_chunk_bytes)
            skc::detail::write_all(tmp.fd(), std::string_view(p.bytes).substr(at, skc::remote_chunk_bytes), tmp.path());
        tmp.close();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * p.bytes.size()));
}

void BM_Part_Import(benchmark::State& state, std::string name) {
    Package& p = package(name);
    const fs::path dir = env().scratch.dir / "import";
    for (auto _ : state) {
        fs::remove_all(dir);
        fs::create_directories(dir / "packages");
        skc::FilesystemStorage storage(dir);
        const auto t0 = Clock::now();
        (void)storage.import_file("packages/p.run", p.file);
        state.SetIterationTime(seconds(Clock::now() - t0));
    }
    fs::remove_all(dir);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * p.bytes.size()));
}

void BM_Part_MissCommands(benchmark::State& state) {
    skc::RemoteTier& r = env().remote();
    const std::string hex = key_named("miss-commands").hex();
    Samples samples;
    for (auto _ : state) {
        const auto t0 = Clock::now();
        const bool absent = !r.get_record(remote_ns(), hex);
        const std::optional<std::uint64_t> token = r.try_lease(remote_ns(), hex, 30s);
        const bool still_absent = !r.get_record(remote_ns(), hex);
        const double t = seconds(Clock::now() - t0);
        state.SetIterationTime(t);
        samples.add(t);
        if (!absent || !token || !still_absent) {
            state.SkipWithError("the key has a record, or its lease is held");
            break;
        }
        r.release_lease(skc::RemoteLease{remote_ns(), hex, *token});
    }
    samples.report(state);
}

void BM_Part_TempFile(benchmark::State& state) {
    Samples samples;
    for (auto _ : state) {
        const auto t0 = Clock::now();
        {
            skc::detail::TempFile tmp = skc::detail::TempFile::create("skc-download-");
            benchmark::DoNotOptimize(tmp.fd());
        }
        const double t = seconds(Clock::now() - t0);
        state.SetIterationTime(t);
        samples.add(t);
    }
    samples.report(state);
}

void BM_Part_Thread(benchmark::State& state) {
    Samples samples;
    for (auto _ : state) {
        const auto t0 = Clock::now();
        std::jthread t([](std::stop_token stop) {
            std::mutex m;
            std::condition_variable_any cv;
            std::unique_lock lock(m);
            cv.wait(lock, stop, [] { return false; });
        });
        const double took = seconds(Clock::now() - t0);
        state.SetIterationTime(took);
        samples.add(took);
        t.request_stop();
        t.join();
    }
    samples.report(state);
}

void BM_Part_Connect(benchmark::State& state) {
    Samples samples;
    for (auto _ : state) {
        const auto t0 = Clock::now();
        std::unique_ptr<skc::RemoteTier> r = env().open_remote();
        const double t = seconds(Clock::now() - t0);
        state.SetIterationTime(t);
        samples.add(t);
        r.reset();
    }
    samples.report(state);
}

// ---- registration and the ratios -------------------------------------------------------------------

std::vector<std::string> package_names() {
    std::vector<std::string> out = {"1MB", "100MB"};
#ifdef SKC_BENCH_HOST_OP_COMPILER
    out.emplace_back("example");
#endif
    return out;
}

void register_all() {
    using benchmark::kMicrosecond;
    using benchmark::kMillisecond;
    for (const std::string& name : package_names()) {
        const bool big = name == "100MB";
        const std::string at = "/" + name;
        benchmark::RegisterBenchmark(("BM_RemoteHit" + at).c_str(), BM_RemoteHit, name)
            ->Unit(kMillisecond)
            ->UseManualTime()
            ->Iterations(big ? 3 : 30);
        benchmark::RegisterBenchmark(("BM_Floor_Download" + at).c_str(), BM_Floor_Download, name)
            ->Unit(kMillisecond)
            ->UseManualTime()
            ->Iterations(big ? 3 : 30);
        benchmark::RegisterBenchmark(("BM_LocalHit/steady" + at).c_str(), BM_LocalHit_Steady, name)
            ->Unit(kMicrosecond)
            ->UseRealTime();
        benchmark::RegisterBenchmark(("BM_LocalHit/new_process" + at).c_str(), BM_LocalHit_Fresh, name, false)
            ->Unit(kMicrosecond)
            ->UseManualTime()
            ->Iterations(100);
        benchmark::RegisterBenchmark(("BM_LocalHit/first_on_node" + at).c_str(), BM_LocalHit_Fresh, name, true)
            ->Unit(kMillisecond)
            ->UseManualTime()
            ->Iterations(big ? 10 : 50);
        benchmark::RegisterBenchmark(("BM_Part_Transfer" + at).c_str(), BM_Part_Transfer, name)
            ->Unit(kMillisecond)
            ->UseRealTime()
            ->Iterations(big ? 5 : 50);
        benchmark::RegisterBenchmark(("BM_Part_Hash" + at).c_str(), BM_Part_Hash, name)
            ->Unit(kMillisecond)
            ->UseRealTime();
        benchmark::RegisterBenchmark(("BM_Part_TempWrite" + at).c_str(), BM_Part_TempWrite, name)
            ->Unit(kMillisecond)
            ->UseRealTime()
            ->Iterations(big ? 5 : 50);
        benchmark::RegisterBenchmark(("BM_Part_Import" + at).c_str(), BM_Part_Import, name)
            ->Unit(kMillisecond)
            ->UseManualTime()
            ->Iterations(big ? 3 : 30);
    }
#ifdef SKC_BENCH_HOST_OP_COMPILER
    benchmark::RegisterBenchmark("BM_HostCompile", BM_HostCompile)->Unit(kMillisecond)->UseManualTime()->Iterations(1);
#endif
    for (const bool remote : {false, true})
        for (const bool new_key : {false, true})
            benchmark::RegisterBenchmark(
                (std::string("BM_Miss/") + (remote ? "both_tiers" : "local") + (new_key ? "/new_key" : "/same_key"))
                    .c_str(),
                BM_Miss, remote, new_key)
                ->Unit(kMicrosecond)
                ->UseManualTime()
                ->Iterations(300);
    benchmark::RegisterBenchmark("BM_Part_MissCommands", BM_Part_MissCommands)
        ->Unit(kMicrosecond)
        ->UseManualTime()
        ->Iterations(300);
    benchmark::RegisterBenchmark("BM_Part_TempFile", BM_Part_TempFile)
        ->Unit(kMicrosecond)
        ->UseManualTime()
        ->Iterations(300);
    benchmark::RegisterBenchmark("BM_Part_Thread", BM_Part_Thread)
        ->Unit(kMicrosecond)
        ->UseManualTime()
        ->Iterations(300);
    benchmark::RegisterBenchmark("BM_Part_Connect", BM_Part_Connect)
        ->Unit(kMicrosecond)
        ->UseManualTime()
        ->Iterations(100);
}

void print_ratios(const skc_bench::RatioReporter& rep) {
    const auto t = [&](const std::string& n) { return rep.time(n); };
    const auto ms = [](double s) { return s * 1e3; };
    std::printf("\nremote tier, medians (ratios in the same run):\n");
    const std::optional<double> compile = t("BM_HostCompile");
    for (const std::string& name : package_names()) {
        const std::optional<double> remote = t("BM_RemoteHit/" + name);
        if (!remote) continue;
        std::printf("  %s: remote hit %.3f ms\n", name.c_str(), ms(*remote));
        for (const char* local : {"steady", "new_process", "first_on_node"})
            if (const auto l = t(std::string("BM_LocalHit/") + local + "/" + name))
                std::printf("    / local hit %-13s %10.3f ms: %9.1fx\n", local, ms(*l), *remote / *l);
        if (compile)
            std::printf("    / compile saved (host_op_compiler, example ops) %.0f ms: %.4f (1/%.0f)\n", ms(*compile),
                        *remote / *compile, *compile / *remote);
        if (const auto floor = t("BM_Floor_Download/" + name)) {
            std::printf("    / floor (one pass: transfer, hash, write; the same fsyncs) %.3f ms: %.2fx (+%.3f ms)\n",
                        ms(*floor), *remote / *floor, ms(*remote - *floor));
            const auto rc = rep.counter("BM_RemoteHit/" + name, "cpu_ms"),
                       fc = rep.counter("BM_Floor_Download/" + name, "cpu_ms");
            if (rc && fc)
                std::printf("      CPU of this process: remote hit %.3f ms, floor %.3f ms: %.2fx\n", *rc, *fc,
                            *rc / *fc);
        }
        const auto transfer = t("BM_Part_Transfer/" + name), hash = t("BM_Part_Hash/" + name),
                   temp = t("BM_Part_TempWrite/" + name), import = t("BM_Part_Import/" + name);
        if (transfer && hash && temp && import)
            std::printf("    parts: transfer %.3f, hash %.3f, temporary file %.3f, import %.3f ms\n", ms(*transfer),
                        ms(*hash), ms(*temp), ms(*import));
    }
    // The misses: the median iteration (median_us), of the median repetition.
    const auto us = [&](const std::string& n) { return rep.counter(n, "median_us"); };
    for (const char* which : {"same_key", "new_key"}) {
        const auto local = us(std::string("BM_Miss/local/") + which);
        const auto both = us(std::string("BM_Miss/both_tiers/") + which);
        if (local && both)
            std::printf("  miss (%s), median iteration: both tiers %.1f us / local %.1f us: %.2fx (+%.1f us)\n", which,
                        *both, *local, *both / *local, *both - *local);
    }
    const auto commands = us("BM_Part_MissCommands"), temp_file = us("BM_Part_TempFile"), thread = us("BM_Part_Thread"),
               connect = us("BM_Part_Connect");
    if (commands && temp_file && thread && connect)
        std::printf(
            "    parts: 4 commands %.1f us, 2 temporary files %.1f us, lease thread %.1f us; (a connection %.1f us)\n",
            *commands, 2 * *temp_file, *thread, *connect);
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    register_all();
    benchmark::AddCustomContext("redis", env().server.url());
    benchmark::AddCustomContext("scratch", env().scratch.dir.string());
    skc_bench::RatioReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    print_ratios(reporter);
    benchmark::Shutdown();
    return 0;
}
