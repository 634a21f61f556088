// benchmarks/cache_bench.cpp: a cache hit in skc's IndexCache against the original tool's lookup,
// and against the floor of any file-based lookup, at 10, 1,000 and 100,000 entries.
//
//   BM_Hit_Ours/<n>          IndexCache::lookup(key) returning a hit, then the hit released. The key
//                            is computed beforehand; the cache is opened once, outside the timing.
//                            IndexCache keeps no entries in memory, so every lookup does all of its
//                            file work: per-key shared flock, read and check the entry, lstat of the
//                            package (its size; the package is not read), unlock.
//   BM_Hit_OursOpenClose/<n> the same in a new IndexCache each iteration: open_cache, lookup,
//                            release, and the destructor. What a process that looks up one key and
//                            exits pays. The counters give the steps: open_us (the cache folder
//                            opened, it and the namespace folder judged), lookup_us, release_us,
//                            close_us (the destructor: one line with the counts and the entry used
//                            appended to the statistics log, and the folder closed; about every
//                            9,000th iteration the log has passed 1 MiB and that one folds it).
//   BM_Hit_Original/<n>      the original tool's way: shared flock on `CANN-<ver>_<dev>.lock`, open and
//                            parse the whole `CANN-<ver>_<dev>.json` index (a JSON object, key ->
//                            package path, with nlohmann/json), find the key, stat the package, unlock.
//   BM_Floor/<n>             open + flock(LOCK_SH) + one read + close of one small file (skc's entry
//                            file of the key): the least any lookup that reads a locked file costs.
//
//   BM_CoverMiss/<n>         IndexCache::cover() of a key of 2 ops that no entry has (its other
//                            inputs match no entry's): what a miss pays before its compile since
//                            misses look for a cover (docs/cache.md): every entry is read.
//
// Where a hit's time goes:
//   BM_HitSyscalls/<n>       the 7 system calls of one hit, as IndexCache::lookup makes them (lock
//                            file: open, flock; entry: open, one read, close; package: lstat;
//                            unlock: close; lookup makes them relative to folder descriptors), with
//                            the paths built beforehand and nothing else: the floor of the present
//                            design.
//   BM_HitSteps/<n>          a hit done step by step with the calls IndexCache::lookup makes (FileLock
//                            try_lock, FilesystemStorage read/stat/local_path, decode_entry), each step
//                            timed; the counters give the average time per step.
//
// Every variant cycles through the same probe keys (up to 1,024, spread over the entries), so no
// file stays hot in the CPU caches across iterations. The files are in the OS page cache, as on a
// warm node; a lookup after the caches are dropped would add disk reads to every variant.
//
// Data: one directory per entry count below the data directory (default: `cache_bench_data` in the
// build directory; --cache_data_dir=DIR), populated on first use and reused afterwards: a READY file
// records the data format, and a directory whose probe keys fail their checks is rebuilt. Each holds:
//   skc/       an skc cache of n entries with 256-byte packages. By default a few entries are
//              published through IndexCache::publish and the rest are written directly, byte for byte
//              what publish writes (same package bytes; the entry encoded by the same function from the
//              package's own size; the key's lock file); population checks that claim
//              against the published entries and stops if it does not hold. --populate=publish
//              publishes every entry instead (1 to 3 ms each here: a publish fsyncs the
//              package, the entry and their folder).
//   original/  the original's index of n entries (64-hex-digit SHA-256 keys, absolute package paths
//              in per-run folders, written with nlohmann/json, indented by 4), its lock file, and the
//              packages of the probe keys.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <skc/layout.hpp>
#include <skc/op_set.hpp>
#include <skc/cache_archive.hpp>
#include <skc/policy/cache.hpp>

#ifndef SKC_BENCH_CACHE_DATA_DIR
#define SKC_BENCH_CACHE_DATA_DIR "cache_bench_data"
#endif

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Bump when the population changes: older data directories are then rebuilt.
constexpr std::string_view data_format = "skc-cache-bench-data 1";
constexpr std::string_view toolchain_version = "8.0.0";
constexpr std::string_view device = "Ascend910B1";
constexpr std::size_t max_probes = 1024;
constexpr std::size_t package_bytes = 256;

fs::path g_data_dir = SKC_BENCH_CACHE_DATA_DIR;
bool g_populate_publish = false;

[[noreturn]] void die(const std::string& message) {
    std::fprintf(stderr, "cache_bench: %s\n", message.c_str());
    std::exit(1);
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) die("cannot read " + p.string());
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

/// Plain write, no fsync: benchmark data, not a cache that must survive a crash.
void write_file(const fs::path& p, std::string_view data) {
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) die("cannot create " + p.string() + ": " + std::strerror(errno));
    std::size_t done = 0;
    while (done < data.size()) {
        const ssize_t w = ::write(fd, data.data() + done, data.size() - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) die("cannot write " + p.string() + ": " + std::strerror(errno));
        done += static_cast<std::size_t>(w);
    }
    ::close(fd);
}

// ---- keys ---------------------------------------------------------------------------------------------

/// skc's key of entry i: a real key whose compiler options differ per entry.
skc::CacheKey our_key(std::size_t i) {
    static const skc::OpSet no_ops;
    return skc::make_cache_key(no_ops,
                               skc::KeyInputs{std::string(toolchain_version),
                                              std::string(device),
                                              false,
                                              {"--op_debug_level=0", "--skc-bench-entry=" + std::to_string(i)}});
}

std::uint64_t splitmix64(std::uint64_t& s) {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/// The original's key of entry i: 64 lower-case hex digits, like a SHA-256 hexdigest.
std::string original_key(std::size_t i) {
    std::uint64_t s = 0x5EED0000ULL + i;
    std::string out;
    char buf[17];
    for (int w = 0; w < 4; ++w) {
        std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(splitmix64(s)));
        out += buf;
    }
    return out;
}

/// The package path the original records for entry i: a run package in its own run folder.
fs::path original_package(const skc::Layout& layout, std::size_t i) {
    const auto t0 = std::chrono::system_clock::time_point(std::chrono::seconds(1793000000));
    const auto started = t0 + std::chrono::seconds(37 * i) + std::chrono::microseconds(i * 7919 % 1000000);
    const auto finished = started + std::chrono::seconds(95) + std::chrono::microseconds(i * 104729 % 1000000);
    return layout.outputs() /
           ("ts" + skc::timestamp(started) + "_pid" + std::to_string(10000 + i * 13 % 90000) + "_outputs") /
           ("static_kernel_" + skc::timestamp(finished) + ".run");
}

std::vector<std::size_t> probe_indices(std::size_t n) {
    const std::size_t p = std::min(n, max_probes);
    std::vector<std::size_t> out;
    for (std::size_t j = 0; j < p; ++j) out.push_back(j * n / p);
    return out;
}

// ---- the data sets ---------------------------------------------------------------------------------------

struct Dataset {
    std::size_t n = 0;
    fs::path root;                               // <data>/n<n>
    fs::path ours_base, original_base;           // root/skc, root/original
    std::vector<skc::CacheKey> probes;           // skc keys looked up
    std::vector<std::string> probe_entry_files;  // their entry files (the floor reads these)
    std::vector<std::string> probe_lock_files, probe_package_files;
    std::vector<std::string> original_probes;  // the original's keys looked up
    fs::path original_lock, original_index;
    std::uintmax_t original_index_bytes = 0;
    bool reused = false;
    double populate_s = 0;
};

std::string package_content() {
    std::string p = "#!/bin/sh\n# skc cache benchmark: a stand-in for a run package\nexit 0\n";
    p.resize(package_bytes, '#');
    p.back() = '\n';
    return p;
}

/// The entry publish() writes for `key`, given its package's info and the fields publish takes
/// from the clock and the compile (`like`).
skc::CacheEntry entry_as_published(const skc::CacheKey& key, const skc::ObjectInfo& package,
                                   const skc::CacheEntry& like) {
    skc::CacheEntry e;
    e.key = key.hex();
    e.package = "packages/" + e.key + ".run";
    e.size = package.size;
    e.checksum = like.checksum;  // the same package bytes
    e.created_unix = like.created_unix;
    e.compile_ns = like.compile_ns;
    for (const auto& c : key.components) {
        e.components.push_back(c);
        if (c.first == "op_count") skc::detail::parse_u64(c.second, e.ops);
    }
    return e;
}

void populate_ours(std::size_t n, const fs::path& base, const fs::path& scratch) {
    const skc::Layout layout(base);
    const fs::path source = scratch / "package.run";
    write_file(source, package_content());
    auto cache = skc::open_cache(layout, toolchain_version, device);
    skc::FilesystemStorage& storage = cache->storage();

    if (g_populate_publish) {
        for (std::size_t i = 0; i < n; ++i) {
            cache->publish(our_key(i), source);
            if ((i + 1) % 10000 == 0) std::fprintf(stderr, "cache_bench: published %zu of %zu\n", i + 1, n);
        }
        return;
    }

    // A few entries through the public API; the others written as publish writes them.
    std::vector<std::size_t> published = {0, n / 2, n - 1};
    published.erase(std::unique(published.begin(), published.end()), published.end());
    for (std::size_t i : published) cache->publish(our_key(i), source);
    const std::optional<std::string> first_text = storage.read("entries/" + our_key(0).hex());
    const std::optional<skc::CacheEntry> like = first_text ? skc::detail::decode_entry(*first_text) : std::nullopt;
    if (!like) die("the published entry cannot be read back");
    const std::string package = *storage.read(like->package);

    // The claim "byte for byte what publish writes", checked on the published entries.
    for (std::size_t i : published) {
        const skc::CacheKey key = our_key(i);
        const std::string text = *storage.read("entries/" + key.hex());
        const skc::CacheEntry real = *skc::detail::decode_entry(text);
        skc::CacheEntry as_of = *like;
        as_of.created_unix = real.created_unix;  // publish reads the clock
        const skc::CacheEntry mine = entry_as_published(key, *storage.stat(real.package), as_of);
        if (skc::detail::encode_entry(mine) != text || *storage.read(real.package) != package ||
            !fs::exists(storage.root() / "keys" / ("key-" + key.hex() + ".lock")))
            die("writing entries directly does not reproduce what publish writes; use --populate=publish");
    }

    const fs::path root = storage.root();
    const fs::path keys = root / "keys";
    for (std::size_t i = 0; i < n; ++i) {
        if (std::binary_search(published.begin(), published.end(), i)) continue;
        const skc::CacheKey key = our_key(i);
        const std::string hex = key.hex();
        write_file(root / "packages" / (hex + ".run"), package);
        const skc::CacheEntry e = entry_as_published(key, *storage.stat("packages/" + hex + ".run"), *like);
        write_file(root / "entries" / hex, skc::detail::encode_entry(e));
        write_file(keys / ("key-" + hex + ".lock"), {});  // FileLock's lock file, as publish leaves it
    }
}

void populate_original(std::size_t n, const fs::path& base, const std::vector<std::size_t>& probes) {
    const skc::Layout layout(base);
    fs::create_directories(layout.cache_dir());
    nlohmann::json index = nlohmann::json::object();
    for (std::size_t i = 0; i < n; ++i) index[original_key(i)] = original_package(layout, i).string();
    const fs::path path = layout.cache_index(toolchain_version, device);
    write_file(path.string() + ".tmp", index.dump(4));
    fs::rename(path.string() + ".tmp", path);
    write_file(layout.cache_lock(toolchain_version, device), {});
    const std::string package = package_content();
    for (std::size_t i : probes) {  // only the packages that are looked up need to exist
        const fs::path p = original_package(layout, i);
        fs::create_directories(p.parent_path());
        write_file(p, package);
    }
}

/// Fills d.root with both caches of d.n entries.
void populate(Dataset& d, const std::vector<std::size_t>& probes, const std::string& ready_text) {
    std::fprintf(stderr, "cache_bench: populating %s with %zu entries%s\n", d.root.string().c_str(), d.n,
                 g_populate_publish ? " (publish)" : "");
    const auto t0 = Clock::now();
    fs::remove_all(d.root);
    fs::create_directories(d.ours_base);
    fs::create_directories(d.original_base);
    populate_ours(d.n, d.ours_base, d.root);
    const double ours_s = seconds_since(t0);
    populate_original(d.n, d.original_base, probes);
    d.populate_s = seconds_since(t0);
    write_file(d.root / "READY", ready_text + "seconds_skc " + std::to_string(ours_s) + "\nseconds_total " +
                                     std::to_string(d.populate_s) + "\n");
    std::fprintf(stderr, "cache_bench: populated %zu entries in %.1f s (skc cache %.1f s)\n", d.n, d.populate_s,
                 ours_s);
}

/// Checks every probe (an skc hit whose package passes the full checksum; an original hit) and
/// records the probes. This also brings the files into the page cache. False when one fails.
bool check_probes(Dataset& d, const std::vector<std::size_t>& probes) {
    d.probes.clear();
    d.probe_entry_files.clear();
    d.probe_lock_files.clear();
    d.probe_package_files.clear();
    d.original_probes.clear();
    const skc::Layout ours(d.ours_base), original(d.original_base);
    const fs::path cache_root = ours.cache_dir() / skc::Layout::cache_stem(toolchain_version, device);
    {
        skc::CacheConfig quiet;
        quiet.log = skc::null_log();
        auto cache = skc::open_cache(ours, toolchain_version, device, quiet);
        for (std::size_t i : probes) {
            skc::CacheKey key = our_key(i);
            auto hit = cache->lookup(key);
            if (!hit || !cache->verify(*hit) || hit->entry.size != package_bytes) return false;
            d.probe_entry_files.push_back((cache_root / "entries" / key.hex()).string());
            d.probe_lock_files.push_back((cache_root / "keys" / ("key-" + key.hex() + ".lock")).string());
            d.probe_package_files.push_back((cache_root / "packages" / (key.hex() + ".run")).string());
            d.probes.push_back(std::move(key));
        }
    }
    d.original_lock = original.cache_lock(toolchain_version, device);
    d.original_index = original.cache_index(toolchain_version, device);
    std::error_code ec;
    d.original_index_bytes = fs::file_size(d.original_index, ec);
    if (ec) return false;
    const nlohmann::json index =
        nlohmann::json::parse(read_file(d.original_index), nullptr, /*allow_exceptions=*/false);
    if (!index.is_object() || index.size() != d.n) return false;
    for (std::size_t i : probes) {
        std::string key = original_key(i);
        const auto it = index.find(key);
        if (it == index.end() || !it->is_string() || !fs::exists(it->get<std::string>(), ec)) return false;
        d.original_probes.push_back(std::move(key));
    }
    return true;
}

/// The data set of n entries: reused when its READY file matches, (re)populated otherwise.
const Dataset& dataset(std::size_t n) {
    static std::map<std::size_t, std::unique_ptr<Dataset>> all;
    std::unique_ptr<Dataset>& slot = all[n];
    if (slot) return *slot;
    auto d = std::make_unique<Dataset>();
    d->n = n;
    d->root = fs::absolute(g_data_dir) / ("n" + std::to_string(n));
    d->ours_base = d->root / "skc";
    d->original_base = d->root / "original";
    const std::vector<std::size_t> probes = probe_indices(n);
    const std::string ready_text = std::string(data_format) + "\nentries " + std::to_string(n) + "\npopulated_by " +
                                   (g_populate_publish ? "publish" : "direct") + "\n";
    std::error_code ec;
    d->reused = fs::exists(d->root / "READY", ec) &&
                read_file(d->root / "READY").compare(0, ready_text.size(), ready_text) == 0;
    if (d->reused && !check_probes(*d, probes)) {
        std::fprintf(stderr, "cache_bench: %s does not pass its checks (an older entry format?)\n",
                     d->root.string().c_str());
        d->reused = false;
    }
    if (!d->reused) {
        populate(*d, probes, ready_text);
        if (!check_probes(*d, probes)) die("the freshly populated " + d->root.string() + " does not pass its checks");
    }
    slot = std::move(d);
    return *slot;
}

// ---- the original's lookup ---------------------------------------------------------------------------

/// The original's lookup: shared lock, whole index parsed, key found, package stat'ed, unlock.
bool original_lookup(const Dataset& d, const std::string& key) {
    const int lock_fd = ::open(d.original_lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0) die("cannot open " + d.original_lock.string());
    while (::flock(lock_fd, LOCK_SH) != 0)
        if (errno != EINTR) die("flock failed");
    bool hit = false;
    {
        std::string text;
        const int fd = ::open(d.original_index.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) die("cannot open " + d.original_index.string());
        struct stat st {};
        if (::fstat(fd, &st) == 0) text.resize(static_cast<std::size_t>(st.st_size));
        std::size_t got = 0;
        for (;;) {
            if (got == text.size()) text.resize(text.size() + 4096);
            const ssize_t r = ::read(fd, text.data() + got, text.size() - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += static_cast<std::size_t>(r);
        }
        ::close(fd);
        text.resize(got);
        const nlohmann::json index = nlohmann::json::parse(text);
        const auto it = index.find(key);
        if (it != index.end() && it->is_string()) {
            struct stat pst {};
            hit = ::stat(it->get_ref<const std::string&>().c_str(), &pst) == 0;
        }
    }
    ::close(lock_fd);
    return hit;
}

// ---- benchmarks -------------------------------------------------------------------------------------------

void set_context(benchmark::State& state, const Dataset& d) {
    state.counters["entries"] = static_cast<double>(d.n);
    state.counters["probes"] = static_cast<double>(d.probes.size());
}

void BM_CoverMiss(benchmark::State& state, std::size_t n) {
    const Dataset& d = dataset(n);
    auto cache = skc::open_cache(skc::Layout(d.ours_base), toolchain_version, device);
    skc::CacheKey key = our_key(n + 1);  // no entry has it
    for (const char* hex : {"00000000000000000000000000000001", "00000000000000000000000000000002"})
        key.ops.push_back(skc::KeyOp{*skc::Digest::from_hex(hex), std::string(hex) + ".json"});
    for (auto _ : state) {
        const auto cover = cache->cover(key);
        if (!cover.parts.empty()) {
            state.SkipWithError("an entry covered ops no entry has");
            break;
        }
    }
    set_context(state, d);
}

void BM_Hit_Ours(benchmark::State& state, std::size_t n) {
    const Dataset& d = dataset(n);
    auto cache = skc::open_cache(skc::Layout(d.ours_base), toolchain_version, device);
    std::size_t i = 0;
    for (auto _ : state) {
        auto hit = cache->lookup(d.probes[i]);
        if (!hit || hit->entry.size != package_bytes) {
            state.SkipWithError("lookup missed");
            break;
        }
        benchmark::DoNotOptimize(hit);
        hit.reset();  // releases the pin
        if (++i == d.probes.size()) i = 0;
    }
    set_context(state, d);
}

void BM_Hit_OursOpenClose(benchmark::State& state, std::size_t n) {
    const Dataset& d = dataset(n);
    const skc::Layout layout(d.ours_base);
    std::size_t i = 0;
    double open_ns = 0, lookup_ns = 0, release_ns = 0, close_ns = 0;
    for (auto _ : state) {
        const auto t0 = Clock::now();
        auto cache = skc::open_cache(layout, toolchain_version, device);
        const auto t1 = Clock::now();
        auto hit = cache->lookup(d.probes[i]);
        const auto t2 = Clock::now();
        if (!hit || hit->entry.size != package_bytes) {
            state.SkipWithError("lookup missed");
            break;
        }
        benchmark::DoNotOptimize(hit);
        hit.reset();
        const auto t3 = Clock::now();
        cache.reset();  // flushes the statistics
        const auto t4 = Clock::now();
        open_ns += std::chrono::duration<double, std::nano>(t1 - t0).count();
        lookup_ns += std::chrono::duration<double, std::nano>(t2 - t1).count();
        release_ns += std::chrono::duration<double, std::nano>(t3 - t2).count();
        close_ns += std::chrono::duration<double, std::nano>(t4 - t3).count();
        if (++i == d.probes.size()) i = 0;
    }
    set_context(state, d);
    const auto avg = benchmark::Counter::kAvgIterations;
    state.counters["open_us"] = benchmark::Counter(open_ns / 1000, avg);
    state.counters["lookup_us"] = benchmark::Counter(lookup_ns / 1000, avg);
    state.counters["release_us"] = benchmark::Counter(release_ns / 1000, avg);
    state.counters["close_us"] = benchmark::Counter(close_ns / 1000, avg);
}

void BM_Hit_Original(benchmark::State& state, std::size_t n) {
    const Dataset& d = dataset(n);
    std::size_t i = 0;
    for (auto _ : state) {
        if (!original_lookup(d, d.original_probes[i])) {
            state.SkipWithError("the original's lookup missed");
            break;
        }
        if (++i == d.original_probes.size()) i = 0;
    }
    set_context(state, d);
    state.counters["index_bytes"] = static_cast<double>(d.original_index_bytes);
}

void BM_Floor(benchmark::State& state, std::size_t n) {
    const Dataset& d = dataset(n);
    std::size_t i = 0;
    char buf[4096];
    for (auto _ : state) {
        const int fd = ::open(d.probe_entry_files[i].c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0 || ::flock(fd, LOCK_SH) != 0 || ::read(fd, buf, sizeof buf) <= 0) {
            state.SkipWithError("cannot read an entry file");
            break;
        }
        ::close(fd);
        benchmark::DoNotOptimize(buf);
        if (++i == d.probe_entry_files.size()) i = 0;
    }
    set_context(state, d);
}

void BM_HitSyscalls(benchmark::State& state, std::size_t n) {
    const Dataset& d = dataset(n);
    std::size_t i = 0;
    char buf[4096];
    struct stat st {};
    for (auto _ : state) {
        const int lock_fd = ::open(d.probe_lock_files[i].c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        bool ok = lock_fd >= 0 && ::flock(lock_fd, LOCK_SH | LOCK_NB) == 0;
        const int fd = ::open(d.probe_entry_files[i].c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        ok = ok && fd >= 0 && ::read(fd, buf, sizeof buf) > 0;
        ::close(fd);
        ok = ok && ::lstat(d.probe_package_files[i].c_str(), &st) == 0;
        ::close(lock_fd);
        if (!ok) {
            state.SkipWithError("a system call failed");
            break;
        }
        benchmark::DoNotOptimize(buf);
        if (++i == d.probes.size()) i = 0;
    }
    set_context(state, d);
}

void BM_HitSteps(benchmark::State& state, std::size_t n) {
    const Dataset& d = dataset(n);
    const skc::Layout layout(d.ours_base);
    const std::string stem = skc::Layout::cache_stem(toolchain_version, device);
    skc::FileLock locks(layout.cache_dir());
    skc::FilesystemStorage storage(layout.cache_dir() / stem);
    enum Step { step_name, step_lock, step_read, step_decode, step_stat, step_path, step_release, steps };
    constexpr const char* step_names[steps] = {"name_us", "lock_us", "read_us",   "decode_us",
                                               "stat_us", "path_us", "release_us"};
    double ns[steps] = {};
    std::size_t i = 0;
    for (auto _ : state) {
        Clock::time_point t[steps + 1];
        t[step_name] = Clock::now();
        const std::string hex = d.probes[i].hex();
        const std::string lock_name = stem + "/keys/key-" + hex;
        t[step_lock] = Clock::now();
        auto pin = locks.try_lock(lock_name, skc::LockMode::shared);
        t[step_read] = Clock::now();
        std::optional<std::string> text = storage.read("entries/" + hex);
        t[step_decode] = Clock::now();
        std::optional<skc::CacheEntry> e = text ? skc::detail::decode_entry(*text) : std::nullopt;
        t[step_stat] = Clock::now();
        const std::optional<skc::ObjectInfo> info = e ? storage.stat(e->package) : std::nullopt;
        t[step_path] = Clock::now();
        std::optional<fs::path> local = e ? storage.local_path(e->package) : std::nullopt;
        t[step_release] = Clock::now();
        const bool ok = pin.owns() && e && e->key == hex && info && info->size == e->size;
        benchmark::DoNotOptimize(local);
        e.reset();
        text.reset();
        local.reset();
        pin.release();
        t[steps] = Clock::now();
        if (!ok) {
            state.SkipWithError("a step failed");
            break;
        }
        for (int k = 0; k < steps; ++k) ns[k] += std::chrono::duration<double, std::nano>(t[k + 1] - t[k]).count();
        if (++i == d.probes.size()) i = 0;
    }
    set_context(state, d);
    for (int k = 0; k < steps; ++k)
        state.counters[step_names[k]] = benchmark::Counter(ns[k] / 1000, benchmark::Counter::kAvgIterations);
}

/// `skc cache export` of every entry (1,000 here) to one file: read, checked and copied.
void BM_Export(benchmark::State& state, std::size_t n) {
    const Dataset& d = dataset(n);
    const fs::path root = skc::Layout(d.ours_base).cache_dir();
    const fs::path file = d.root / "export.skcx";
    std::uint64_t entries = 0;
    for (auto _ : state) entries = skc::export_cache(root, file).entries;
    if (entries != n) state.SkipWithError("the export missed entries");
    set_context(state, d);
    state.counters["file_bytes"] = static_cast<double>(fs::file_size(file));
}

/// `skc cache import` of that file into an empty cache folder: checked whole, then every entry
/// published (fsync'd as a compile's publish is).
void BM_Import(benchmark::State& state, std::size_t n) {
    const Dataset& d = dataset(n);
    const fs::path file = d.root / "export.skcx";
    if (!fs::exists(file)) skc::export_cache(skc::Layout(d.ours_base).cache_dir(), file);
    const fs::path into = d.root / "imported";
    skc::CacheConfig config;
    config.log = skc::null_log();
    std::uint64_t added = 0;
    for (auto _ : state) {
        state.PauseTiming();
        fs::remove_all(into);
        state.ResumeTiming();
        added = skc::import_cache(into, file, config).added;
    }
    fs::remove_all(into);
    if (added != n) state.SkipWithError("the import missed entries");
    set_context(state, d);
}

constexpr std::size_t sizes[] = {10, 1'000, 100'000};

void register_all() {
    for (std::size_t n : sizes) {
        const std::string suffix = "/" + std::to_string(n);
        benchmark::RegisterBenchmark(("BM_Hit_Ours" + suffix).c_str(), BM_Hit_Ours, n)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        benchmark::RegisterBenchmark(("BM_Hit_OursOpenClose" + suffix).c_str(), BM_Hit_OursOpenClose, n)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        benchmark::RegisterBenchmark(("BM_Hit_Original" + suffix).c_str(), BM_Hit_Original, n)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        benchmark::RegisterBenchmark(("BM_Floor" + suffix).c_str(), BM_Floor, n)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        benchmark::RegisterBenchmark(("BM_HitSyscalls" + suffix).c_str(), BM_HitSyscalls, n)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        benchmark::RegisterBenchmark(("BM_HitSteps" + suffix).c_str(), BM_HitSteps, n)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        benchmark::RegisterBenchmark(("BM_CoverMiss" + suffix).c_str(), BM_CoverMiss, n)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->Iterations(n > 10'000 ? 3 : 30);
    }
    benchmark::RegisterBenchmark("BM_Export/1000", BM_Export, 1'000)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->Iterations(5);
    benchmark::RegisterBenchmark("BM_Import/1000", BM_Import, 1'000)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->Iterations(3);
}

}  // namespace

int main(int argc, char** argv) {
    // Take our own options out before Google Benchmark sees the arguments.
    constexpr std::string_view dir_flag = "--cache_data_dir=";
    constexpr std::string_view populate_flag = "--populate=";
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg.substr(0, dir_flag.size()) == dir_flag) {
            g_data_dir = std::string(arg.substr(dir_flag.size()));
        } else if (arg.substr(0, populate_flag.size()) == populate_flag) {
            const std::string_view how = arg.substr(populate_flag.size());
            if (how != "publish" && how != "direct") die("--populate takes publish or direct");
            g_populate_publish = how == "publish";
        } else {
            argv[kept++] = argv[i];
        }
    }
    argc = kept;

    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    register_all();
    benchmark::AddCustomContext("cache_data_dir", fs::absolute(g_data_dir).string());
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
