// cache_worker: one process using the skc file-system cache, driven by the multiprocess cache test
// (tests/skc/policy/cache_multiprocess_test.cpp), which starts many of these on one cache folder
// and kills some of them at the worst moments. Not a doctest program.
//
//   cache_worker --base DIR --mode MODE [--keys N] [--key I] [--seconds S] [--log FILE]
//                [--compile-ms MS] [--seed N] [--wait-ms MS] [--max-entries N] [--hits N]
//                [--crash-at POINT] [--crash-delay-ms MS] [--signal FILE] [--ready FILE] [--go FILE]
//                [--pause-locks N --pause-dir DIR]
//
// Modes
//   mixed          for S seconds (and at least one pass over every key): lookup() or
//                  get_or_compile() of random keys among N
//   compile-once   one get_or_compile() of key I
//   hold-lock      get_or_compile() of key I whose compile creates --signal and then sleeps forever:
//                  the key's exclusive lock is held until the process is killed
//   hold-pin       lookup() of key I (it must be present), keep the hit (the shared pin), create
//                  --signal and sleep forever
//   hits           once --go exists: open the cache, lookup() key I (it must be present) N times
//                  (--hits; each hit checked, the first verified too), destroy the cache (which
//                  saves the statistics) and print how long that took
// Crash points (the worker kills itself with SIGKILL; the library has no test hooks)
//   during-compile        inside compile, after creating --signal and sleeping --crash-delay-ms
//   during-package-write  the storage wrote half of the package's temporary file, not renamed
//   during-entry-write    the package is published; half of the entry's temporary file written
// Other hooks
//   --signal FILE         compile creates FILE when it starts (hold-pin: once the pin is held)
//   --ready/--go          create --ready once the cache is open, then wait until --go exists
//   --pause-locks N       stop before each of the first N waiting key-lock acquisitions (PausingLock)
//
// Key I is make_cache_key of a small op set derived from I; the package of a key is a few KB
// derived from the key's hex alone, so a hit can be checked byte for byte. Every compile appends
// "compile <keyhex> <pid>\n" to --log with one write() on an O_APPEND descriptor.
//
// Output: compile-once prints "key=<hex> lock_wait_ms=<n> result=<CacheResult text>"; every other
// mode that ends prints "summary hits=.. waits=.. compiles=.. lookup_hits=.. lookup_misses=.. iterations=..",
// except hits: "summary lookup_hits=.. iterations=.. close_us=.." (close: the cache's destruction).
// Exit status: 0 success, 2 usage, 3 wrong or torn data seen, 4 skc::Error (code and message on
// stdout as "error <code> <message>"), 5 another failure.
#include <skc/policy/cache.hpp>
#include <skc/skc.hpp>

#include "cache_fixtures.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;

using skc_test::make_key;
using skc_test::package_content;

// ---- helpers ---------------------------------------------------------------------------------------

[[noreturn]] void die(int code, const std::string& message) {
    std::fprintf(stderr, "cache_worker %ld: %s\n", static_cast<long>(::getpid()), message.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    std::_Exit(code);
}

[[noreturn]] void kill_self() {
    std::fflush(stdout);
    std::fflush(stderr);
    ::raise(SIGKILL);
    std::_Exit(5);  // not reached
}

[[noreturn]] void sleep_forever() {
    std::fflush(stdout);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

void write_fd_all(int fd, std::string_view s, const std::string& what) {
    while (!s.empty()) {
        const ssize_t n = ::write(fd, s.data(), s.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            die(5, "cannot write " + what + ": " + std::strerror(errno));
        }
        s.remove_prefix(static_cast<std::size_t>(n));
    }
}

/// Creates `p` with `content` (a marker file the test polls for).
void create_file(const fs::path& p, std::string_view content = {}) {
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) die(5, "cannot create " + p.string() + ": " + std::strerror(errno));
    write_fd_all(fd, content, p.string());
    ::close(fd);
}

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) return {};
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Args {
    fs::path base;
    std::string mode;
    std::size_t keys = 16;
    std::size_t key = 0;
    double seconds = 1.0;
    fs::path log;
    int compile_ms = 0;
    std::uint64_t seed = 0;
    bool have_seed = false;
    int wait_ms = 30000;
    std::uint64_t max_entries = 0;
    std::string crash_at;
    int crash_delay_ms = 0;
    fs::path signal_file;
    fs::path ready_file;
    fs::path go_file;
    int pause_locks = 0;
    fs::path pause_dir;
    std::uint64_t hits = 1;
};

std::uint64_t to_u64(const std::string& s, const std::string& flag) {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
        die(2, flag + " needs a number, got \"" + s + "\"");
    return std::stoull(s);
}

Args parse(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (i + 1 >= argc) die(2, "missing value after " + flag);
        const std::string v = argv[++i];
        if (flag == "--base") a.base = v;
        else if (flag == "--mode") a.mode = v;
        else if (flag == "--keys") a.keys = to_u64(v, flag);
        else if (flag == "--key") a.key = to_u64(v, flag);
        else if (flag == "--seconds") a.seconds = std::stod(v);
        else if (flag == "--log") a.log = v;
        else if (flag == "--compile-ms") a.compile_ms = static_cast<int>(to_u64(v, flag));
        else if (flag == "--seed") {
            a.seed = to_u64(v, flag);
            a.have_seed = true;
        } else if (flag == "--wait-ms") a.wait_ms = static_cast<int>(to_u64(v, flag));
        else if (flag == "--max-entries") a.max_entries = to_u64(v, flag);
        else if (flag == "--crash-at") a.crash_at = v;
        else if (flag == "--crash-delay-ms") a.crash_delay_ms = static_cast<int>(to_u64(v, flag));
        else if (flag == "--signal") a.signal_file = v;
        else if (flag == "--ready") a.ready_file = v;
        else if (flag == "--go") a.go_file = v;
        else if (flag == "--pause-locks") a.pause_locks = static_cast<int>(to_u64(v, flag));
        else if (flag == "--pause-dir") a.pause_dir = v;
        else if (flag == "--hits") a.hits = to_u64(v, flag);
        else die(2, "unknown option " + flag);
    }
    if (a.base.empty() || a.mode.empty()) die(2, "--base and --mode are required");
    if (a.mode != "mixed" && a.mode != "compile-once" && a.mode != "hold-lock" && a.mode != "hold-pin" &&
        a.mode != "hits")
        die(2, "unknown mode " + a.mode);
    if (!a.crash_at.empty() && a.crash_at != "during-compile" && a.crash_at != "during-package-write" &&
        a.crash_at != "during-entry-write")
        die(2, "unknown crash point " + a.crash_at);
    if (a.keys == 0) die(2, "--keys must be at least 1");
    if (a.pause_locks > 0 && a.pause_dir.empty()) die(2, "--pause-locks needs --pause-dir");
    if ((a.mode == "hold-lock" || a.mode == "hold-pin" || a.crash_at == "during-compile") && a.signal_file.empty())
        die(2, "this mode needs --signal");
    return a;
}

// ---- a storage that dies half-way through a write ---------------------------------------------------

enum class CrashPoint { none, package_write, entry_write };

/// Forwards to FilesystemStorage, except that the first package import (package_write) or entry
/// write (entry_write) writes half of the object to a temporary file named as FilesystemStorage
/// names its own (`.tmp.<pid>.<n>.<file>`, in the target folder), fsyncs it, and SIGKILLs the process
/// before the rename: what a power cut or kill in the middle of FilesystemStorage::publish leaves.
class CrashingStorage {
public:
    CrashingStorage(fs::path root, CrashPoint at) : fs_(std::move(root)), at_(at) {}

    [[nodiscard]] std::optional<std::string> read(std::string_view name) const { return fs_.read(name); }
    void write(std::string_view name, std::string_view data) {
        if (at_ == CrashPoint::entry_write && name.substr(0, 8) == "entries/") crash_in_temp(name, data);
        fs_.write(name, data);
    }
    skc::ObjectInfo import_file(std::string_view name, const fs::path& file) {
        if (at_ == CrashPoint::package_write && name.substr(0, 9) == "packages/") crash_in_temp(name, read_file(file));
        return fs_.import_file(name, file);
    }
    bool remove(std::string_view name) { return fs_.remove(name); }
    [[nodiscard]] std::optional<skc::ObjectInfo> stat(std::string_view name) const { return fs_.stat(name); }
    void touch(std::string_view name) { fs_.touch(name); }
    void touch(std::string_view name, std::int64_t mtime_ns) { fs_.touch(name, mtime_ns); }
    std::uint64_t append(std::string_view name, std::string_view data) { return fs_.append(name, data); }
    [[nodiscard]] std::optional<skc::LogTail> read_log(std::string_view name, const skc::LogMark& mark) const {
        return fs_.read_log(name, mark);
    }
    void discard_log(std::string_view name, const skc::LogMark& mark) { fs_.discard_log(name, mark); }
    [[nodiscard]] std::vector<std::string> list(std::string_view folder) const { return fs_.list(folder); }
    bool read_chunks(std::string_view name, const skc::ChunkFn& fn) const { return fs_.read_chunks(name, fn); }
    [[nodiscard]] std::optional<fs::path> local_path(std::string_view name) const { return fs_.local_path(name); }

private:
    [[noreturn]] void crash_in_temp(std::string_view name, std::string_view data) {
        const fs::path target = fs_.root() / fs::path(std::string(name));
        fs::create_directories(target.parent_path());
        const fs::path tmp =
            target.parent_path() / (".tmp." + std::to_string(::getpid()) + ".0." + target.filename().string());
        const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) die(5, "cannot create " + tmp.string() + ": " + std::strerror(errno));
        write_fd_all(fd, data.substr(0, data.size() / 2), tmp.string());
        (void)::fsync(fd);
        kill_self();  // with the temporary file still open and not renamed
    }

    skc::FilesystemStorage fs_;
    CrashPoint at_;
};

static_assert(skc::Storage<CrashingStorage> && skc::StorageTraits<CrashingStorage>::appends);

// ---- a lock policy that stops before waiting for a key -------------------------------------------------

/// FileLock, except that the first `pauses` waiting acquisitions of a key lock (lock_until, lock)
/// stop first: before the k-th one (k = 1, 2, ...) it creates `<dir>/lock<k>.<shared|exclusive>` and
/// waits until `<dir>/go<k>` exists. The test uses it to let other processes act at exactly that
/// point (between two lock operations of get_or_compile, where the library has no hook).
class PausingLock {
public:
    using Guard = skc::FileLock::Guard;

    PausingLock(fs::path lock_dir, int pauses, fs::path pause_dir)
        : locks_(std::move(lock_dir)), pauses_(pauses), dir_(std::move(pause_dir)) {}

    Guard try_lock(std::string_view name, skc::LockMode mode) { return locks_.try_lock(name, mode); }
    Guard lock_until(std::string_view name, skc::LockMode mode, skc::LockClock::time_point deadline) {
        pause(name, mode);
        return locks_.lock_until(name, mode, deadline);
    }
    Guard lock(std::string_view name, skc::LockMode mode) {
        pause(name, mode);
        return locks_.lock(name, mode);
    }

private:
    void pause(std::string_view name, skc::LockMode mode) {
        if (name.find("/keys/") == std::string_view::npos || done_ >= pauses_) return;
        const std::string k = std::to_string(++done_);
        create_file(dir_ / ("lock" + k + (mode == skc::LockMode::shared ? ".shared" : ".exclusive")));
        while (!fs::exists(dir_ / ("go" + k))) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }

    skc::FileLock locks_;
    int pauses_;
    fs::path dir_;
    int done_ = 0;
};

static_assert(skc::LockPolicy<PausingLock>);

// ---- the work ----------------------------------------------------------------------------------------

struct Counts {
    std::uint64_t hits = 0, waits = 0, compiles = 0, lookup_hits = 0, lookup_misses = 0, iterations = 0;
};

class Worker {
public:
    explicit Worker(Args a) : args_(std::move(a)) {
        for (std::size_t i = 0; i < std::max(args_.keys, args_.key + 1); ++i) {
            keys_.push_back(make_key(i));
            contents_.push_back(package_content(keys_.back().hex()));
        }
        if (!args_.log.empty()) {
            log_fd_ = ::open(args_.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
            if (log_fd_ < 0) die(5, "cannot open log " + args_.log.string() + ": " + std::strerror(errno));
        }
        scratch_ = args_.base / "scratch" / std::to_string(::getpid());
        fs::create_directories(scratch_);
    }
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;
    ~Worker() {
        if (log_fd_ >= 0) ::close(log_fd_);
    }

    /// What compile does for key `i`: log, optionally crash or hang, write the package.
    fs::path compile(std::size_t i) {
        const std::string hex = keys_[i].hex();
        if (log_fd_ >= 0) write_fd_all(log_fd_, "compile " + hex + " " + std::to_string(::getpid()) + "\n", "the log");
        if (!args_.signal_file.empty() && args_.mode != "hold-pin") create_file(args_.signal_file);
        if (args_.mode == "hold-lock") sleep_forever();
        if (args_.crash_at == "during-compile") {
            std::this_thread::sleep_for(std::chrono::milliseconds(args_.crash_delay_ms));
            kill_self();
        }
        if (args_.compile_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(args_.compile_ms));
        const fs::path p = scratch_ / (hex + "." + std::to_string(serial_++) + ".run");
        create_file(p, contents_[i]);
        ++counts_.compiles;
        return p;
    }

    /// A hit must name key `i` and its package must hold exactly what compile(i) writes.
    template <class Hit>
    void check_hit(const Hit& h, std::size_t i, std::string_view how) const {
        const std::string hex = keys_[i].hex();
        if (!h.pin.owns()) die(3, std::string(how) + ": the hit of " + hex + " holds no pin");
        if (h.entry.key != hex) die(3, std::string(how) + ": asked for " + hex + ", the entry is " + h.entry.key);
        if (!h.package_path) die(3, std::string(how) + ": the hit of " + hex + " has no package path");
        const std::string got = read_file(*h.package_path);
        if (got != contents_[i])
            die(3, std::string(how) + ": the package of " + hex + " (" + h.package_path->string() + ") has " +
                       std::to_string(got.size()) + " bytes that are not the compiled " +
                       std::to_string(contents_[i].size()) + " bytes: wrong or torn");
        if (h.entry.size != contents_[i].size())
            die(3, std::string(how) + ": the entry of " + hex + " records size " + std::to_string(h.entry.size));
    }

    /// Creates --ready, then waits until --go exists.
    void ready_and_wait() const {
        if (!args_.ready_file.empty()) create_file(args_.ready_file);
        if (!args_.go_file.empty())
            while (!fs::exists(args_.go_file)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }

    /// hits: a process that opens the cache, hits one key --hits times and exits.
    int run_hits(const skc::Layout& layout, const skc::CacheConfig& cfg) {
        ready_and_wait();
        auto cache = skc::open_cache(layout, "8.0", "dev", cfg);
        for (std::uint64_t n = 0; n < args_.hits; ++n) {
            auto h = cache->lookup(keys_[args_.key]);
            if (!h) die(5, "hits: key " + std::to_string(args_.key) + " is not in the cache");
            if (n == 0) {
                if (!cache->verify(*h))
                    die(3, "hits: the package of key " + std::to_string(args_.key) + " fails verify");
                check_hit(*h, args_.key, "hits");
            }
            ++counts_.lookup_hits;
            ++counts_.iterations;
        }
        const auto t0 = std::chrono::steady_clock::now();
        cache.reset();
        const auto close_us =
            std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
        std::printf("summary lookup_hits=%llu iterations=%llu close_us=%lld\n",
                    static_cast<unsigned long long>(counts_.lookup_hits),
                    static_cast<unsigned long long>(counts_.iterations), static_cast<long long>(close_us));
        return 0;
    }

    template <class Cache>
    int run(Cache& cache) {
        ready_and_wait();

        if (args_.mode == "mixed") run_mixed(cache);
        else if (args_.mode == "hold-pin") {
            auto h = cache.lookup(keys_[args_.key]);
            if (!h) die(5, "hold-pin: key " + std::to_string(args_.key) + " is not in the cache");
            if (!cache.verify(*h))
                die(3, "hold-pin: the package of key " + std::to_string(args_.key) + " fails verify");
            check_hit(*h, args_.key, "hold-pin");
            create_file(args_.signal_file);
            sleep_forever();
        } else {  // compile-once, hold-lock
            auto out = cache.get_or_compile(keys_[args_.key], [&] { return compile(args_.key); });
            record(out.result);
            if (!out.hit) die(3, "get_or_compile returned no hit for key " + std::to_string(args_.key));
            check_hit(*out.hit, args_.key, "compile-once");
            const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(out.lock_wait).count();
            std::printf("key=%s lock_wait_ms=%lld result=%s\n", keys_[args_.key].hex().c_str(),
                        static_cast<long long>(wait_ms), std::string(skc::to_string(out.result)).c_str());
        }
        std::printf("summary hits=%llu waits=%llu compiles=%llu lookup_hits=%llu lookup_misses=%llu iterations=%llu\n",
                    static_cast<unsigned long long>(counts_.hits), static_cast<unsigned long long>(counts_.waits),
                    static_cast<unsigned long long>(counts_.compiles),
                    static_cast<unsigned long long>(counts_.lookup_hits),
                    static_cast<unsigned long long>(counts_.lookup_misses),
                    static_cast<unsigned long long>(counts_.iterations));
        return 0;
    }

private:
    void record(skc::CacheResult r) {
        if (r == skc::CacheResult::hit) ++counts_.hits;
        else if (r == skc::CacheResult::waited) ++counts_.waits;
        else if (r != skc::CacheResult::compiled) die(3, "unexpected result " + std::string(skc::to_string(r)));
    }

    /// A first pass over every key in a random order (so that every key is compiled), then random
    /// keys until the time is up. One call in four is a plain lookup() (in the first pass, followed
    /// by get_or_compile() when it misses).
    template <class Cache>
    void run_mixed(Cache& cache) {
        std::mt19937_64 rng(args_.have_seed ? args_.seed : static_cast<std::uint64_t>(::getpid()));
        std::vector<std::size_t> order(args_.keys);
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::shuffle(order.begin(), order.end(), rng);
        const auto deadline = std::chrono::steady_clock::now() +
                              std::chrono::microseconds(static_cast<std::int64_t>(args_.seconds * 1e6));
        for (std::size_t n = 0; n < order.size() || std::chrono::steady_clock::now() < deadline; ++n) {
            const std::size_t i = n < order.size() ? order[n] : static_cast<std::size_t>(rng() % args_.keys);
            ++counts_.iterations;
            if (rng() % 4 == 0) {
                auto h = cache.lookup(keys_[i]);
                if (h) {
                    if (!cache.verify(*h)) die(3, "lookup: the package of " + keys_[i].hex() + " fails its checksum");
                    check_hit(*h, i, "lookup");
                    ++counts_.lookup_hits;
                    continue;
                }
                ++counts_.lookup_misses;
                if (n >= order.size()) continue;  // the first pass goes on to get_or_compile
            }
            const std::uint64_t before = counts_.compiles;
            auto out = cache.get_or_compile(keys_[i], [&] { return compile(i); });
            record(out.result);
            if ((out.result == skc::CacheResult::compiled) != (counts_.compiles == before + 1))
                die(3, "get_or_compile said " + std::string(skc::to_string(out.result)) + " but compile ran " +
                           std::to_string(counts_.compiles - before) + " times");
            if (!out.hit) die(3, "get_or_compile returned no hit for " + keys_[i].hex());
            check_hit(*out.hit, i, std::string(skc::to_string(out.result)));
        }
    }

    Args args_;
    std::vector<skc::CacheKey> keys_;
    std::vector<std::string> contents_;
    fs::path scratch_;
    int log_fd_ = -1;
    std::uint64_t serial_ = 0;
    Counts counts_;
};

int run(const Args& args) {
    skc::CacheConfig cfg;
    cfg.log = skc::null_log();
    cfg.wait_timeout = std::chrono::milliseconds(args.wait_ms);
    cfg.limits.max_entries = args.max_entries;
    const skc::Layout layout(args.base);
    Worker w(args);
    if (args.mode == "hits") return w.run_hits(layout, cfg);
    // open_cache creates the folders and the manifest; the crashing variant then uses the same
    // storage root, lock folder and lock names as open_cache, so that it shares the cache.
    auto cache = skc::open_cache(layout, "8.0", "dev", cfg);
    const CrashPoint at = args.crash_at == "during-package-write" ? CrashPoint::package_write
                          : args.crash_at == "during-entry-write" ? CrashPoint::entry_write
                                                                  : CrashPoint::none;
    if (at == CrashPoint::none && args.pause_locks == 0) return w.run(*cache);
    cache.reset();
    const std::string stem = skc::Layout::cache_stem("8.0", "dev");
    skc::IndexCache<CrashingStorage, PausingLock> hooked(
        CrashingStorage(layout.cache_dir() / stem, at),
        PausingLock(layout.cache_dir(), args.pause_locks, args.pause_dir), cfg,
        skc::CacheLockNames{stem + "/keys/", stem});
    return w.run(hooked);
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(parse(argc, argv));
    } catch (const skc::Error& e) {
        std::printf("error %s %s\n", std::string(skc::to_string(e.code())).c_str(), e.what());
        std::fflush(stdout);
        std::fprintf(stderr, "cache_worker %ld: skc::Error: %s\n", static_cast<long>(::getpid()), e.what());
        return 4;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "cache_worker %ld: %s\n", static_cast<long>(::getpid()), e.what());
        return 5;
    }
}
