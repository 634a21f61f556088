// skc/policy/cache.hpp: the CachePolicy concept and its models: IndexCache, one entry per key
// beside the package it names, shared by every process that opens the folder (per-key locks, single
// flight on a miss, checksummed entries, LRU eviction, lazily merged statistics); and NoCache, which
// compiles every time (`disable_static_kernel_compile_cache`). open_cache opens a namespace of a
// cache folder. The key is in cache_key.hpp, the files in cache_format.hpp, the limits in
// cache_limits.hpp; docs/cache.md describes each step, its system calls and its faults.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <stop_token>
#include <thread>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include <unistd.h>

#include "../cache_format.hpp"
#include "../cache_key.hpp"
#include "../cache_limits.hpp"
#include "../detail/hash.hpp"
#include "../detail/names.hpp"
#include "../detail/text.hpp"
#include "../error.hpp"
#include "../fwd.hpp"
#include "../layout.hpp"
#include "../log.hpp"
#include "../options.hpp"
#include "lock.hpp"
#include "remote.hpp"
#include "storage.hpp"

namespace skc {

struct CacheConfig {
    CacheLimits limits;                                              // applied after each publish
    std::chrono::milliseconds wait_timeout = std::chrono::hours(2);  // for another process's compile
    LogSink log = stderr_log();
    CacheMode mode = CacheMode::read_write;  // read-only: never writes; recache: compiles and overwrites
};

/// How a get_or_compile() ended.
enum class CacheResult : unsigned char {
    hit,         // found at once
    waited,      // another process compiled it while this one waited
    compiled,    // compiled here and stored
    disabled,    // compiled here, the cache is off
    downloaded,  // the remote tier had it: downloaded, checked and stored here (policy/remote.hpp)
};

/// The result's fixed identifier: `hit`, `waited`, `compiled`, `disabled`.
constexpr std::string_view to_string(CacheResult r) noexcept {
    switch (r) {
    case CacheResult::hit: return "hit";
    case CacheResult::waited: return "waited";
    case CacheResult::compiled: return "compiled";
    case CacheResult::disabled: return "disabled";
    case CacheResult::downloaded: return "downloaded";
    }
    return {};
}

/// A usable entry, pinned: while this object lives the entry is not evicted or removed. Its
/// `entry.components` are left empty (a lookup does not copy them); entries() has them.
template <class Guard>
struct CacheHit {
    CacheEntry entry;
    std::optional<std::filesystem::path> package_path;  // the package's file, where storage has files
    Guard pin;
};

template <class Guard>
struct CacheOutcome {
    CacheResult result = CacheResult::compiled;
    std::optional<CacheHit<Guard>> hit;  // hit, waited, downloaded; compiled unless removed at once

    std::filesystem::path compiled_package;  // the package the compile produced (compiled, disabled)
    std::chrono::nanoseconds lock_wait{0};
};

struct PruneReport {
    std::uint64_t leftovers_removed = 0;  // temporaries and packages without an entry (killed writers)
    std::uint64_t removed = 0;
    std::uint64_t removed_bytes = 0;
    std::uint64_t skipped_in_use = 0;
    std::uint64_t entries_left = 0;
    std::uint64_t bytes_left = 0;
};

struct VerifyReport {
    std::uint64_t leftovers_removed = 0;
    std::uint64_t checked = 0;
    std::vector<BadEntry> bad;
};

/// What a cache policy offers the compiler host.
template <class C>
concept CachePolicy = requires(C& c, const CacheKey& key, std::filesystem::path (*compile)()) {
    typename C::Guard;
    { c.lookup(key) } -> std::same_as<std::optional<CacheHit<typename C::Guard>>>;
    { c.get_or_compile(key, compile) } -> std::same_as<CacheOutcome<typename C::Guard>>;
    { c.stats() } -> std::same_as<CacheStats>;
};

/// Names the cache uses in its lock policy.
struct CacheLockNames {
    std::string key_prefix = "keys/";          // per-key locks: key_prefix + "key-" + hex
    std::string namespace_lock = "namespace";  // statistics and whole-cache operations
};

/// The cache of a namespace folder (see the header comment). The defaults are in fwd.hpp; a policy
/// that does not fit gets one message per missing member.
template <class S, class L>
class IndexCache {
    static_assert(detail::diagnose_storage<S>() && detail::diagnose_lock<L>());

public:
    using Guard = typename L::Guard;
    using Hit = CacheHit<Guard>;
    using Outcome = CacheOutcome<Guard>;

    IndexCache(S storage, L locks, CacheConfig config = {}, CacheLockNames names = {})
        : storage_(std::move(storage)),
          locks_(std::move(locks)),
          config_(std::move(config)),
          names_(std::move(names)) {}
    IndexCache(const IndexCache&) = delete;
    IndexCache& operator=(const IndexCache&) = delete;
    ~IndexCache() {
        try {
            flush();
        } catch (const std::exception& e) {
            log(LogLevel::warning, std::string("cache statistics not saved: ") + e.what());
        }
    }

    [[nodiscard]] S& storage() noexcept { return storage_; }
    [[nodiscard]] L& locks() noexcept { return locks_; }
    [[nodiscard]] const CacheConfig& config() const noexcept { return config_; }

    /// The cache folder `root` this namespace `stem` is in (open_cache sets it): the limits the
    /// caller left at 0 are filled in from there when they are applied (effective_cache_limits), a
    /// publish writes the namespace's manifest `<root>/<stem>.json` when it is missing or differs,
    /// and the folders below the namespace are judged (check_cache_subfolders_trust) before this
    /// cache first stores or verifies a package. None of it is done when the cache is opened.
    void set_cache_folder(const std::filesystem::path& root, std::string stem) {
        folder_ = CacheFolder{root.native(), std::move(stem)};
    }

    /// Puts `remote` behind this cache as its remote tier, its records in namespace `ns`
    /// (policy/remote.hpp): get_or_compile() looks there after a local miss, and compiles a key
    /// missing in both tiers once across every cache that shares the remote. Not with a read-only
    /// cache (it looks up and compiles here only). Call before the cache is used.
    void set_remote(std::unique_ptr<RemoteTier> remote, std::string ns) {
        if (remote && remote->lease_ttl().count() < 3)
            throw Error(Errc::invalid_argument, "the remote lease's time to live is too short");
        if (remote) remote_lease_ttl_ = remote->lease_ttl();
        remote_ = std::move(remote);
        remote_ns_ = std::move(ns);
        remote_down_.store(false, std::memory_order_relaxed);
    }
    /// The remote tier; nullptr when there is none.
    [[nodiscard]] RemoteTier* remote() noexcept { return remote_.get(); }

    /// The entry for `key` with its package's size checked, pinned; nullopt on a
    /// miss (also when another process holds the key's exclusive lock: it is compiling it).
    std::optional<Hit> lookup(const CacheKey& key) {
        std::optional<Hit> h;
        if (config_.mode != CacheMode::recache) h = lookup_pinned(key.hex(), /*wait=*/false);
        if (h) {
            count_hit(*h);
        } else {
            std::lock_guard lock(mu_);
            ++stats_.misses;
        }
        return h;
    }

    /// Whether another process holds `key` exclusively at this instant (it compiles or stores it), so
    /// that get_or_compile() would wait: for a progress display.
    [[nodiscard]] bool busy(const CacheKey& key) {
        return !LockTraits<L>::try_lock(locks_, key_lock(key.hex()), LockMode::shared).owns();
    }

    /// The full checksum of the hit's package before its first use on this node (see the header
    /// comment). On a mismatch the entry is removed, counted as corrupt and false returned: the
    /// caller treats it as a miss.
    bool verify(Hit& hit) {
        judge_subfolders();
        const std::optional<ObjectInfo> info = storage_.stat(hit.entry.package);
        const std::string local = info ? std::to_string(info->identity) : std::string();
        const std::string memo = hit.entry.key + "/" + local;
        {
            std::lock_guard lock(mu_);
            if (verified_.count(memo) != 0) return true;
        }
        if (info && storage_.read(node_memo(hit.entry.key)) == local) {
            std::lock_guard lock(mu_);
            verified_.insert(memo);
            return true;
        }
        if (package_intact(hit.entry)) {
            remember_checked(hit.entry.key, info);
            return true;
        }
        hit.pin = Guard{};  // drop the shared pin so the bad entry can be removed
        discard(hit.entry.key, "the package's checksum does not match the entry");
        return false;
    }

    /// Single flight: a hit, or a compile run by exactly one process per key. `compile` returns the
    /// path of the package it produced; if it throws, nothing is stored and the error propagates.
    /// All waiting together is bounded by config().wait_timeout: Error(timeout) when another
    /// process holds the key longer. Read-only: waits for a process compiling the key, then hits or
    /// compiles without storing (`compiled`, no hit). Recache: compiles and replaces the entry.
    template <class Compile>
    Outcome get_or_compile(const CacheKey& key, Compile&& compile) {
        Outcome out;
        const std::string hex = key.hex();
        const auto t0 = LockClock::now();
        const auto deadline = t0 + config_.wait_timeout;
        if (config_.mode == CacheMode::read_only) {
            if (auto h = lookup_pinned(hex, /*wait=*/true, deadline); h && verify(*h)) {
                count_hit(*h);
                out.result = CacheResult::hit;
                out.hit = std::move(h);
                return out;
            }
            out.compiled_package = compile_counted(compile);
            log(LogLevel::info, "the cache is read-only: the package compiled for key " + hex + " is not stored");
            return out;
        }
        if (config_.mode != CacheMode::recache) {
            if (auto h = lookup_pinned(hex, /*wait=*/false); h && verify(*h)) {
                count_hit(*h);
                out.result = CacheResult::hit;
                out.hit = std::move(h);
                return out;
            }
        }
        Guard ex;
        for (;;) {
            ex = locks_.lock_until(key_lock(hex), LockMode::exclusive, deadline);
            if (!ex.owns()) {
                add_wait(LockClock::now() - t0);
                throw Error(Errc::timeout, "waited " + detail::seconds_text(config_.wait_timeout) +
                                               " for another process compiling cache key " + hex);
            }
            // Still missing (or recache, which replaces whatever is there): this process compiles.
            if (config_.mode == CacheMode::recache || !read_entry(hex, /*repair=*/true)) break;
            // Another process published it while we waited: pin it as a reader.
            ex = Guard{};
            if (auto h = lookup_pinned(hex, /*wait=*/true, deadline); h && verify(*h)) {
                out.lock_wait = LockClock::now() - t0;
                add_wait(out.lock_wait);
                count_hit(*h);
                {
                    std::lock_guard lock(mu_);
                    ++stats_.waits;
                }
                out.result = CacheResult::waited;
                out.hit = std::move(h);
                return out;
            }
            // Removed between our check and the pin (pruned, cleared, found bad): check again.
        }
        // Missing here: the remote tier may have it, or another node may be compiling it.
        std::optional<RemoteLease> lease;
        if (remote_usable()) {
            if (remote_lookup_or_lease(hex, deadline, lease)) {
                ex = Guard{};
                out.lock_wait = LockClock::now() - t0;
                add_wait(out.lock_wait);
                out.result = CacheResult::downloaded;
                out.hit = lookup_pinned(hex, /*wait=*/true, LockClock::now() + config_.wait_timeout);
                evict_over_limits(limits_in_effect(), std::nullopt, hex);
                if (out.hit) return out;
                // Removed in the instant between (pruned by another process): compile after all.
                return get_or_compile(key, std::forward<Compile>(compile));
            }
        }
        out.lock_wait = LockClock::now() - t0;
        add_wait(out.lock_wait);
        std::chrono::nanoseconds compile_ns{0};
        std::filesystem::path package;
        {
            RemoteLeaseHolder holder(*this, lease);  // renewed while compiling; released at the end
            package = compile_counted(compile, &compile_ns);
            const CacheEntry published = publish_locked(key, package, compile_ns);
            if (lease) upload(*lease, published);
        }
        ex = Guard{};
        out.result = CacheResult::compiled;
        out.compiled_package = package;
        // Pinned as a reader; empty only if another process removed the entry in the instant between
        // (compiled_package is the same package and stays usable).
        out.hit = lookup_pinned(hex, /*wait=*/true, LockClock::now() + config_.wait_timeout);
        evict_over_limits(limits_in_effect(), std::nullopt, hex);
        return out;
    }

    /// Stores `package` for `key` (taking the key's exclusive lock). Replaces an existing entry.
    CacheEntry publish(const CacheKey& key, const std::filesystem::path& package,
                       std::chrono::nanoseconds compile_time = {}) {
        refuse_if_read_only("store a package");
        Guard ex = locks_.lock_until(key_lock(key.hex()), LockMode::exclusive, LockClock::now() + config_.wait_timeout);
        if (!ex.owns()) throw Error(Errc::timeout, "cannot take the lock of cache key " + key.hex());
        CacheEntry e = publish_locked(key, package, compile_time);
        ex = Guard{};
        evict_over_limits(limits_in_effect(), std::nullopt, key.hex());
        return e;
    }

    /// Every readable entry, oldest use first. Unreadable ones are skipped (verify_all reports them).
    /// A use is the entry's modification time, or a later one the statistics log records and no
    /// fold applied yet (unless the entry changed after it, as a fold would decide).
    std::vector<CacheEntry> entries() {
        std::vector<CacheEntry> out;
        std::map<std::string, std::int64_t, std::less<>> used;
        if constexpr (StorageTraits<S>::appends) used = logged_uses();
        for (const std::string& name : storage_.list("entries")) {
            const std::optional<std::string> text = storage_.read(name);
            if (!text) continue;
            std::optional<CacheEntry> e = detail::decode_entry(*text);
            if (!e || "entries/" + e->key != name) continue;
            if (const auto info = storage_.stat(name)) {
                e->last_used_ns = info->mtime_ns;
                if (const auto it = used.find(e->key); it != used.end() && it->second > info->ctime_ns)
                    e->last_used_ns = std::max(e->last_used_ns, it->second);
            }
            out.push_back(std::move(*e));
        }
        std::sort(out.begin(), out.end(),
                  [](const CacheEntry& a, const CacheEntry& b) { return a.last_used_ns < b.last_used_ns; });
        return out;
    }

    /// The ops entry `hex` was compiled from, with their op info file names; nullopt when its
    /// publisher did not know them or the list is unreadable.
    [[nodiscard]] std::optional<std::vector<KeyOp>> op_list(const std::string& hex) const {
        const std::optional<std::string> text = storage_.read("oplists/" + hex);
        return text ? detail::decode_op_list(*text) : std::nullopt;
    }

    /// Adds an entry made elsewhere (`skc cache import`): `package` must have the entry's size and
    /// checksum, `op_list` is its op list text (empty: none). Under the key's exclusive lock; an
    /// intact entry already there for the key is kept (returns false). Error(corrupt) when the
    /// package is not the entry's; nothing is stored then. The limits are not applied: call
    /// apply_limits() after a batch.
    bool import_entry(const CacheEntry& e, const std::filesystem::path& package, std::string_view op_list = {}) {
        refuse_if_read_only("import entries");
        judge_subfolders();
        Guard ex = locks_.lock_until(key_lock(e.key), LockMode::exclusive, LockClock::now() + config_.wait_timeout);
        if (!ex.owns()) throw Error(Errc::timeout, "cannot take the lock of cache key " + e.key);
        if (const Loaded l = load_entry(e.key, /*with_components=*/false); l.entry && l.entry->checksum == e.checksum)
            return false;
        CacheEntry stored = e;
        stored.package = "packages/" + e.key + ".run";
        const ObjectInfo info = storage_.import_file(stored.package, package);
        if (info.size != e.size || detail::checksum_of([&](const ChunkFn& fn) {
                                       return storage_.read_chunks(stored.package, fn);
                                   }) != e.checksum) {
            storage_.remove(stored.package);
            throw Error(Errc::corrupt,
                        "the package is not the one entry " + e.key + " names (size or checksum differs)");
        }
        if (!op_list.empty()) storage_.write("oplists/" + e.key, std::string(op_list));
        storage_.write("entries/" + e.key, detail::encode_entry(stored));
        write_manifest();
        return true;
    }

    /// Applies the configured limits now (as after a publish), least recently used first.
    PruneReport apply_limits() { return evict_over_limits(limits_in_effect(), std::nullopt, {}); }

    /// Removes entry `hex` whose package its user found unusable although its checksum matches (it was
    /// stored damaged: `reason` says how), so that the next get_or_compile() compiles it again. Waits
    /// for the key's exclusive lock (up to config().wait_timeout; the caller must not pin it) and
    /// removes the entry only if it still records `checksum`: one another process stored meanwhile
    /// is kept. Counted as corrupt (the caller tells the user why). Returns whether it was removed; a read-only cache
    /// removes nothing. Without `wait`, an entry in use is left (false).
    bool discard_damaged(const std::string& hex, const Digest& checksum, const std::string& reason, bool wait = true) {
        {
            std::lock_guard lock(mu_);
            ++stats_.corrupt;
        }
        log(LogLevel::debug, "cache entry " + hex + " is discarded: " + reason);
        if (config_.mode == CacheMode::read_only) return false;
        Guard ex = wait ? locks_.lock_until(key_lock(hex), LockMode::exclusive, LockClock::now() + config_.wait_timeout)
                        : LockTraits<L>::try_lock(locks_, key_lock(hex), LockMode::exclusive);
        if (!ex.owns()) return false;
        const Loaded l = load_entry(hex, /*with_components=*/false);
        if (l.entry && l.entry->checksum != checksum) return false;  // replaced meanwhile
        if (!l.entry && !l.fault) return false;                      // already gone
        remove_entry(hex, "packages/" + hex + ".run");
        return true;
    }

    /// Checks every entry and its package in full; removes and reports the bad ones (entries in use
    /// are checked but not removed). With `check_package`, each package whose checksum matches is
    /// also given to it (as a file, where the storage keeps files): what it returns is why the
    /// package is unusable (run_package_fault() for run packages), nullopt when it is sound.
    VerifyReport verify_all(
        const std::function<std::optional<std::string>(const std::filesystem::path&)>& check_package = {}) {
        VerifyReport r;
        r.leftovers_removed = remove_leftovers();
        for (const std::string& name : storage_.list("entries")) {
            ++r.checked;
            const std::string hex = name.substr(name.find('/') + 1);
            const Loaded l = load_entry(hex, /*with_components=*/false);
            std::string reason;
            if (l.fault) reason = *l.fault;
            else if (!l.entry) reason = "the entry is unreadable (truncated or altered)";  // listed, not a file
            else if (!package_intact(*l.entry)) reason = "the package's checksum does not match the entry";
            else if (const auto path =
                         check_package ? StorageTraits<S>::local_path(storage_, l.entry->package) : std::nullopt) {
                if (std::optional<std::string> fault = check_package(*path)) {
                    reason = "the package was stored damaged (its checksum matches): " + *fault;
                    r.bad.push_back(
                        BadEntry{hex, reason, discard_damaged(hex, l.entry->checksum, reason, /*wait=*/false)});
                }
                continue;
            }
            if (reason.empty()) continue;
            r.bad.push_back(BadEntry{hex, reason, discard(hex, reason)});
        }
        return r;
    }

    /// Applies limits and an age (entries unused for longer are removed); entries in use are kept.
    PruneReport prune(CacheLimits limits, std::optional<std::chrono::seconds> older_than = std::nullopt) {
        return evict_over_limits(limits, older_than, {});
    }

    /// Removes every entry not in use (and the leftovers of killed writers).
    PruneReport clear() { return evict_over_limits(CacheLimits{0, 0}, std::chrono::seconds(-1), {}); }

    /// Resets the stored statistics of every process (and this one's) to zero (`skc cache zero`).
    void zero_stats() {
        refuse_if_read_only("reset the statistics");
        Guard g =
            locks_.lock_until(names_.namespace_lock, LockMode::exclusive, LockClock::now() + std::chrono::seconds(30));
        if (!g.owns()) throw Error(Errc::timeout, "cannot take the cache's namespace lock to reset the statistics");
        if constexpr (StorageTraits<S>::appends) fold_locked(/*zero=*/true);
        else storage_.write("stats", CacheStats{}.encode());
        std::lock_guard lock(mu_);
        flushed_ = CacheStats{};
        stats_ = CacheStats{};
    }

    /// This process's counters since construction (flushed or not).
    [[nodiscard]] CacheStats stats() const {
        std::lock_guard lock(mu_);
        return total_copy();
    }

    /// The counters of every process that flushed (`stats` and the log not folded into it yet),
    /// plus this one's unflushed ones. Reads only, under a shared namespace lock so that a fold in
    /// progress is seen whole (read-write: the lock file is created if there is none yet).
    [[nodiscard]] CacheStats persisted_stats() const {
        CacheStats s;
        {
            Guard g;
            try {
                g = locks_.lock_until(names_.namespace_lock, LockMode::shared,
                                      LockClock::now() + std::chrono::seconds(30));
            } catch (const Error&) {  // a lock file this process may not create: read without it
            }
            s = stored_stats();
        }
        std::lock_guard lock(mu_);
        s += stats_;
        return s;
    }

    /// Merges the statistics log into `stats` now, waiting for the namespace lock (publishes,
    /// prune, clear and zero_stats fold too, and an appender that finds the log long).
    void fold_stats() {
        if constexpr (StorageTraits<S>::appends) {
            refuse_if_read_only("fold the statistics");
            Guard g = locks_.lock_until(names_.namespace_lock, LockMode::exclusive,
                                        LockClock::now() + std::chrono::seconds(30));
            if (!g.owns()) throw Error(Errc::timeout, "cannot take the cache's namespace lock to fold the statistics");
            fold_locked(/*zero=*/false);
        }
    }

    /// Saves this process's counters and marks its hits as used now. Called by the destructor;
    /// cheap when there is nothing new. Both go to the statistics log in one append, without the
    /// namespace lock or an fsync; a fold applies the use times to the entries (storages without
    /// appends touch the entries and merge the counters into `stats` under the namespace lock).
    void flush() {
        CacheStats delta;
        std::vector<std::array<char, 32>> touched;
        {
            std::lock_guard lock(mu_);
            delta = std::exchange(stats_, CacheStats{});  // what other threads count meanwhile stays for later
            touched.swap(touched_);
            if (config_.mode == CacheMode::read_only) {  // counted in this process only
                flushed_ += delta;
                return;
            }
        }
        std::sort(touched.begin(), touched.end());
        touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
        bool fold_due = false;
        try {
            if constexpr (StorageTraits<S>::appends) {
                if (delta == CacheStats{} && touched.empty()) return;
                const std::int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count();
                const std::string line = detail::stats_log_line(delta, touched, now_ns);
                fold_due = detail::stats_log_fold_due(storage_.append(detail::stats_log, line), line.size());
            } else {
                for (const auto& key : touched) storage_.touch("entries/" + std::string(key.data(), key.size()));
                if (delta == CacheStats{}) return;
                Guard g = locks_.lock_until(names_.namespace_lock, LockMode::exclusive,
                                            LockClock::now() + std::chrono::seconds(30));
                if (!g.owns()) throw Error(Errc::timeout, "cannot take the cache's namespace lock to save statistics");
                CacheStats s;
                if (const auto t = storage_.read("stats")) s = CacheStats::decode(*t);
                s += delta;
                storage_.write("stats", s.encode());
            }
        } catch (...) {
            std::lock_guard lock(mu_);
            stats_ += delta;  // not saved: the next flush tries again
            touched_.insert(touched_.end(), touched.begin(), touched.end());
            throw;
        }
        {
            std::lock_guard lock(mu_);
            flushed_ += delta;
        }
        if (fold_due) fold_quietly();
    }

private:
    [[nodiscard]] std::string key_lock(const std::string& hex) const { return names_.key_prefix + "key-" + hex; }

    /// The node's memo that it checked the package of entry `hex` in full.
    [[nodiscard]] static std::string node_memo(const std::string& hex) {
        return "verified/" + hex + "." + detail::node_name();
    }

    /// After a full check of the package of entry `hex` (its file's `info`): remembered by this
    /// process, and by the node in its memo (not when read-only; a failure to write it only means the
    /// next process checks again).
    void remember_checked(const std::string& hex, const std::optional<ObjectInfo>& info) {
        const std::string local = info ? std::to_string(info->identity) : std::string();
        try {
            if (info && config_.mode != CacheMode::read_only) storage_.write(node_memo(hex), local);
        } catch (const Error& e) {
            log(LogLevel::debug, std::string("cannot remember the checked package: ") + e.what());
        }
        std::lock_guard lock(mu_);
        verified_.insert(hex + "/" + local);
    }

    void refuse_if_read_only(std::string_view what) const {
        if (config_.mode == CacheMode::read_only)
            throw Error(Errc::permission_denied, "the cache is read-only (cache_mode): cannot " + std::string(what));
    }

    /// Runs the compile and counts it (a miss and a compile); its duration in `elapsed`.
    template <class Compile>
    std::filesystem::path compile_counted(Compile& compile, std::chrono::nanoseconds* elapsed = nullptr) {
        const auto c0 = std::chrono::steady_clock::now();
        std::filesystem::path package = compile();
        if (elapsed)
            *elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - c0);
        std::lock_guard lock(mu_);
        ++stats_.compiles;
        ++stats_.misses;
        return package;
    }

    void log(LogLevel level, const std::string& line) const {
        if (config_.log) config_.log(level, line);
    }

    void count_hit(const Hit& h) {
        std::lock_guard lock(mu_);
        ++stats_.hits;
        stats_.compile_time_saved_ns += h.entry.compile_ns;
        if (h.entry.key.size() == 32) {  // kept as fixed arrays: no allocation per hit
            std::array<char, 32> k;
            std::copy(h.entry.key.begin(), h.entry.key.end(), k.begin());
            touched_.push_back(k);
        }
    }

    void add_wait(std::chrono::nanoseconds d) {
        std::lock_guard lock(mu_);
        stats_.lock_wait_ns += d.count();
    }

    // ---- the remote tier (policy/remote.hpp) ----

    [[nodiscard]] bool remote_usable() const noexcept {
        return remote_ && config_.mode != CacheMode::read_only && !remote_down_.load(std::memory_order_relaxed);
    }

    /// A fault of the remote tier: counted, one warning for the whole process, and the remote is not
    /// used again by this cache (every later lookup and compile is local only).
    void remote_failed(const std::string& what) {
        {
            std::lock_guard lock(mu_);
            ++stats_.remote_errors;
        }
        if (!remote_down_.exchange(true))
            log(LogLevel::warning, "the remote cache failed (" + what + "); going on with the local cache only");
    }

    /// After a local miss, under the key's exclusive lock (so one process per node asks the remote):
    /// true when the key's package was downloaded from the remote tier and stored here; otherwise
    /// false, with `lease` set when this process took the key's remote lease (it compiles and
    /// uploads). While another node holds the lease, waits for its upload (until `deadline`, then it
    /// compiles here too), and takes the lease when it ends without one (that node died or failed).
    /// A fault of the remote ends the wait: false without a lease, and the compile is local.
    bool remote_lookup_or_lease(const std::string& hex, LockClock::time_point deadline,
                                std::optional<RemoteLease>& lease) {
        const bool fetch = config_.mode != CacheMode::recache;
        bool got = false;
        std::optional<std::uint64_t> bad;  // the upload found unusable (counted and told once)
        try {
            if (fetch) got = download(hex, /*count_miss=*/true, bad);
            if (!got && !remote_->read_only()) {
                auto pause = std::chrono::milliseconds(10);
                bool told = false;
                for (;;) {
                    if (const std::optional<std::uint64_t> token =
                            remote_->try_lease(remote_ns_, hex, remote_lease_ttl_)) {
                        lease = RemoteLease{remote_ns_, hex, *token};
                        // The lease's holder before may have uploaded it since the lookup above.
                        if (fetch && (got = download(hex, /*count_miss=*/false, bad))) {
                            remote_->release_lease(*lease);
                            lease.reset();
                        }
                        break;
                    }
                    if (!told) {
                        told = true;
                        log(LogLevel::info, "another node is compiling cache key " + hex +
                                                " (it holds the key's lease on " + remote_->where() +
                                                "): waiting for its upload");
                    }
                    if (LockClock::now() + pause >= deadline) {
                        log(LogLevel::warning, "waited " + detail::seconds_text(config_.wait_timeout) +
                                                   " for another node compiling cache key " + hex +
                                                   "; compiling it here");
                        break;
                    }
                    std::this_thread::sleep_for(pause);
                    pause = std::min(pause * 2, std::chrono::milliseconds(500));
                    if (fetch && (got = download(hex, /*count_miss=*/false, bad))) break;
                }
            }
        } catch (const LocalFault& f) {  // this node's storage failed: as a failed publish, an error
            if (lease) release_quietly(*lease);
            std::rethrow_exception(f.error);
        } catch (const std::exception& e) {
            remote_failed(e.what());
            if (lease) release_quietly(*lease);
            lease.reset();
            got = false;
        }
        return got;
    }

    /// What the local storage threw while a download was stored (not a fault of the remote).
    struct LocalFault {
        std::exception_ptr error;
    };

    /// Downloads the key's package from the remote tier straight into this cache's storage, checked
    /// as it streams (size and checksum against the record), then writes the entry: true. False when
    /// it is not there (absent, or evicted: a miss) or is refused (tampered: counted as an error, with
    /// a warning); nothing is stored then. An upload found unusable before (`bad`, its token) is not
    /// counted or told again. Faults of the remote throw; those of the storage throw LocalFault.
    bool download(const std::string& hex, bool count_miss, std::optional<std::uint64_t>& bad) {
        std::optional<std::string> record = remote_->get_record(remote_ns_, hex);
        if (!record) {
            if (count_miss) {
                std::lock_guard lock(mu_);
                ++stats_.remote_misses;
            }
            return false;
        }
        struct NotWhole {};
        RemoteRead r;
        bool remote_fault = false, write_failed = false;
        const std::string package = "packages/" + hex + ".run";
        ObjectInfo info;
        try {
            judge_subfolders();
            info = StorageTraits<S>::write_stream(storage_, package, [&](const ChunkFn& write) {
                const ChunkFn sink = [&](std::string_view c) {
                    try {
                        write(c);
                    } catch (...) {
                        write_failed = true;
                        throw;
                    }
                };
                try {
                    r = read_remote_package(*remote_, remote_ns_, hex, sink, std::move(record));
                } catch (...) {
                    remote_fault = true;  // unless the storage's write threw (below)
                    throw;
                }
                if (r.status != RemoteRead::Status::whole) throw NotWhole{};
            });
        } catch (const NotWhole&) {
            // nothing stored: told below
        } catch (const LocalFault&) {
            throw;
        } catch (...) {
            if (!remote_fault || write_failed) throw LocalFault{std::current_exception()};
            throw;
        }
        if (r.status != RemoteRead::Status::whole) {
            if (bad == r.record.token) return false;
            bad = r.record.token;
            std::lock_guard lock(mu_);
            if (r.status == RemoteRead::Status::evicted) {
                ++stats_.remote_misses;
                log(LogLevel::info,
                    "the package of cache key " + hex + " was evicted from " + remote_->where() + ": a miss");
            } else {
                ++stats_.remote_errors;
                log(LogLevel::warning, "the remote package of cache key " + hex + " on " + remote_->where() +
                                           " is refused: " + r.why + "; it is compiled here");
            }
            return false;
        }
        // Checked as it was written: the entry now (after its package, as a publish), and the node's
        // memo that its package is whole, so that the first hit does not read it again.
        CacheEntry e = std::move(r.record.entry);
        e.package = package;
        storage_.write("entries/" + hex, detail::encode_entry(e));
        write_manifest();
        remember_checked(hex, info);
        std::lock_guard lock(mu_);
        ++stats_.remote_hits;
        ++stats_.misses;
        stats_.remote_download_bytes += e.size;
        stats_.compile_time_saved_ns += e.compile_ns;
        return true;
    }

    /// Uploads entry `e`, which this process just published, under `lease`: the package in chunks
    /// (expiring until committed), then the record, committed only while the lease is still ours.
    void upload(const RemoteLease& lease, const CacheEntry& e) {
        if (!remote_usable()) return;
        const std::string& hex = e.key;
        try {
            if (e.size > remote_max_package_bytes) {
                log(LogLevel::warning, "cache key " + hex + " is not uploaded to " + remote_->where() +
                                           ": its package has " + std::to_string(e.size) +
                                           " bytes, above the remote tier's limit of " +
                                           std::to_string(remote_max_package_bytes) + " bytes");
                return;
            }
            std::string chunk;
            chunk.reserve(static_cast<std::size_t>(std::min(e.size, remote_chunk_bytes)));
            std::uint64_t index = 0;
            const auto put = [&] {
                remote_->put_chunk(lease, index++, chunk, remote_chunk_ttl);
                chunk.clear();
            };
            storage_.read_chunks(e.package, [&](std::string_view c) {
                while (!c.empty()) {
                    const std::size_t n = std::min<std::size_t>(c.size(), remote_chunk_bytes - chunk.size());
                    chunk.append(c.substr(0, n));
                    c.remove_prefix(n);
                    if (chunk.size() == remote_chunk_bytes) put();
                }
            });
            if (!chunk.empty() || index == 0) put();
            if (!remote_->commit(lease, index, encode_remote_record(RemoteRecord{lease.token, index, e}))) {
                log(LogLevel::info, "cache key " + hex + " was not uploaded to " + remote_->where() +
                                        ": its lease ended first (another node took the key over)");
                return;
            }
            std::lock_guard lock(mu_);
            ++stats_.remote_uploads;
            stats_.remote_upload_bytes += e.size;
        } catch (const std::exception& err) {
            remote_failed(err.what());
        }
    }

    void release_quietly(const RemoteLease& lease) noexcept {
        try {
            remote_->release_lease(lease);
        } catch (...) {  // it expires on its own
        }
    }

    /// Holds a remote lease while this process compiles: renewed every third of its time to live by
    /// a thread of its own, released at the end (the next node need not wait for it to expire). A
    /// renewal that fails is a fault of the remote, reported when the holder ends.
    class RemoteLeaseHolder {
    public:
        RemoteLeaseHolder(IndexCache& cache, const std::optional<RemoteLease>& lease) : cache_(cache), lease_(lease) {
            if (!lease_) return;
            renewer_ = std::jthread([this](std::stop_token stop) {
                std::mutex m;
                std::condition_variable_any cv;
                std::unique_lock lock(m);
                const auto every = cache_.remote_lease_ttl_ / 3;
                while (!cv.wait_for(lock, stop, every, [&stop] { return stop.stop_requested(); })) {
                    try {
                        if (!cache_.remote_->renew_lease(*lease_, cache_.remote_lease_ttl_)) return;  // fenced out
                    } catch (const std::exception& e) {
                        fault_ = e.what();
                        return;
                    }
                }
            });
        }
        RemoteLeaseHolder(const RemoteLeaseHolder&) = delete;
        RemoteLeaseHolder& operator=(const RemoteLeaseHolder&) = delete;
        ~RemoteLeaseHolder() {
            if (!lease_) return;
            renewer_.request_stop();
            renewer_.join();
            if (!fault_.empty()) cache_.remote_failed(fault_);
            else if (cache_.remote_usable()) cache_.release_quietly(*lease_);
        }

    private:
        IndexCache& cache_;
        const std::optional<RemoteLease>& lease_;
        std::string fault_;
        std::jthread renewer_;
    };

    /// What read_unfolded_logs() read: the logs older versions took (name, bytes read), and where the
    /// log was read to (the mark in `stats` when there is no log).
    struct UnfoldedLogs {
        std::vector<std::pair<std::string, std::uint64_t>> taken;
        LogMark mark;
    };

    /// Gives `fn` each whole line of the statistics logs that `stats` (text `stats_text`) does not
    /// count yet: the log's from the mark `stats` records on (all of it when that mark names another
    /// log), and those of logs taken by versions that renamed the log to fold it, beyond the bytes
    /// `stats` names. No lock is needed: the log only grows.
    template <class Fn>
    UnfoldedLogs read_unfolded_logs(std::string_view stats_text, Fn&& fn) const {
        UnfoldedLogs out;
        out.mark = detail::stats_log_mark(stats_text);
        const auto folded = detail::folded_stats_logs(stats_text);
        for (const std::string& name : storage_.list("")) {
            if (name.rfind(detail::taken_stats_log, 0) != 0) continue;
            const std::optional<std::string> log = storage_.read(name);
            if (!log) continue;
            const auto counted = folded.find(name);
            detail::for_each_stats_log_line(*log, counted == folded.end() ? 0 : counted->second, fn);
            out.taken.emplace_back(name, log->size());
        }
        if (const std::optional<LogTail> tail = storage_.read_log(detail::stats_log, out.mark)) {
            detail::for_each_stats_log_line(tail->data, 0, fn);
            out.mark = detail::stats_log_read_to(*tail);
        }
        return out;
    }

    /// What `stats` and the statistics logs hold: `stats`, plus the lines it does not count yet.
    CacheStats stored_stats() const {
        const std::optional<std::string> text = storage_.read("stats");
        CacheStats s = text ? CacheStats::decode(*text) : CacheStats{};
        if constexpr (StorageTraits<S>::appends)
            (void)read_unfolded_logs(text ? std::string_view(*text) : std::string_view(),
                                     [&](const detail::StatsLogLine& l) { s += l.counts; });
        return s;
    }

    /// Under the namespace lock: adds the lines of the statistics log that `stats` does not count
    /// to it and applies the use times they record to the entries (with `zero`, resets `stats`
    /// instead of adding). The use times are applied first, then `stats` is written (a temporary,
    /// fsync'd and renamed) with the sum and the mark where the log was read to; then the space of
    /// the log's bytes before the mark is freed. The log is never renamed or shortened, so an
    /// appender needs no lock and every append is read by the fold after it: a fold that dies before
    /// writing `stats` leaves the old mark, and one that dies after it the new one. Logs taken by
    /// older versions (which renamed the log) are added beyond the bytes `stats` names, named in
    /// `stats` with their size, and removed after it is written. No count is lost or counted twice;
    /// a use time applied twice is the same time.
    void fold_locked(bool zero) {
        const std::optional<std::string> text = storage_.read("stats");
        const std::string_view stats_text = text ? std::string_view(*text) : std::string_view();
        CacheStats sum = text && !zero ? CacheStats::decode(*text) : CacheStats{};
        std::map<std::string, std::int64_t, std::less<>> used;
        const UnfoldedLogs read = read_unfolded_logs(stats_text, [&](const detail::StatsLogLine& l) {
            if (!zero) sum += l.counts;
            for (const std::string_view key : l.used) note_use(used, key, l.at_ns);
        });
        if (read.taken.empty() && read.mark == detail::stats_log_mark(stats_text) && !zero) return;
        for (const auto& [key, at_ns] : used) storage_.touch("entries/" + key, at_ns);
        std::string records = detail::stats_log_mark_line(read.mark);
        for (const auto& [name, size] : read.taken) records += "folded " + name + " " + std::to_string(size) + "\n";
        storage_.write("stats", sum.encode() + records);
        for (const auto& taken : read.taken) storage_.remove(taken.first);
        storage_.discard_log(detail::stats_log, read.mark);
    }

    /// Keeps the latest use of `key`.
    static void note_use(std::map<std::string, std::int64_t, std::less<>>& used, std::string_view key,
                         std::int64_t at_ns) {
        const auto it = used.find(key);
        if (it == used.end()) used.emplace(std::string(key), at_ns);
        else it->second = std::max(it->second, at_ns);
    }

    /// The last use of each entry the statistics logs record (not folded yet).
    std::map<std::string, std::int64_t, std::less<>> logged_uses() const {
        std::map<std::string, std::int64_t, std::less<>> used;
        const std::optional<std::string> text = storage_.read("stats");
        (void)read_unfolded_logs(text ? std::string_view(*text) : std::string_view(),
                                 [&](const detail::StatsLogLine& l) {
                                     for (const std::string_view key : l.used) note_use(used, key, l.at_ns);
                                 });
        return used;
    }

    /// Folds the statistics log unless another process holds the namespace lock (it is folding, or
    /// zeroing); a failure is logged, never thrown: statistics are not worth failing a publish for.
    void fold_quietly() {
        if constexpr (StorageTraits<S>::appends) {
            try {
                Guard g = LockTraits<L>::try_lock(locks_, names_.namespace_lock, LockMode::exclusive);
                if (g.owns()) fold_locked(/*zero=*/false);
            } catch (const std::exception& e) {
                log(LogLevel::warning, std::string("the cache's statistics log was not folded: ") + e.what());
            }
        }
    }

    /// The limits to apply after a publish: the caller's, those of the cache folder filled in.
    CacheLimits limits_in_effect() const {
        return folder_ ? effective_cache_limits(config_.limits, folder_->root).limits : config_.limits;
    }

    /// Once per cache: refuses the folders below the namespace when every user may write them.
    void judge_subfolders() {
        if constexpr (requires { locks_.dir_fd(); }) {
            if (!folder_ || subfolders_judged_.load(std::memory_order_acquire)) return;
            check_cache_subfolders_trust(locks_.dir_fd(), folder_->root, folder_->stem);
            subfolders_judged_.store(true, std::memory_order_release);
        }
    }

    /// The namespace's manifest beside its folder, written when it is missing or differs.
    void write_manifest() {
        if (!folder_) return;
        FilesystemStorage top(folder_->root);
        const std::string name = folder_->stem + ".json";
        const std::string manifest = detail::cache_manifest(folder_->stem);
        if (top.read(name) != manifest) top.write(name, manifest);
    }

    CacheStats total_copy() const {
        CacheStats s = flushed_;
        s += stats_;
        return s;
    }

    /// Why the entry's package cannot be used, or nullopt when its size matches (its content is
    /// verify()'s business).
    std::optional<std::string> package_fault(const CacheEntry& e) const {
        const std::optional<ObjectInfo> info = storage_.stat(e.package);
        if (!info) return "the package is missing";
        if (!info->regular) return "the package is not a regular file (a symbolic link or a folder)";
        if (info->size != e.size)
            return "the package's size is " + std::to_string(info->size) + " bytes, the entry says " +
                   std::to_string(e.size);
        return std::nullopt;
    }

    /// Entry `hex` read and checked (its check line, its package's size): the entry,
    /// or why it cannot be used, or neither when there is no entry object at all.
    struct Loaded {
        std::optional<CacheEntry> entry;
        std::optional<std::string> fault;
    };
    Loaded load_entry(const std::string& hex, bool with_components) const {
        const std::optional<std::string> text = storage_.read("entries/" + hex);
        if (!text) return {};
        std::optional<CacheEntry> e = detail::decode_entry(*text, with_components);
        if (!e || e->key != hex) return {std::nullopt, "the entry is unreadable (truncated or altered)"};
        if (auto fault = package_fault(*e)) return {std::nullopt, std::move(fault)};
        return {std::move(e), std::nullopt};
    }

    /// Whether the package's bytes still have the checksum the entry recorded (reads all of it).
    bool package_intact(const CacheEntry& e) const {
        return detail::checksum_of([&](const ChunkFn& fn) { return storage_.read_chunks(e.package, fn); }) ==
               e.checksum;
    }

    /// Reads and checks entry `hex`; a bad one is removed (when `repair`) and reported as absent.
    std::optional<CacheEntry> read_entry(const std::string& hex, bool repair) {
        Loaded l = load_entry(hex, /*with_components=*/false);
        if (l.fault && repair) discard(hex, *l.fault);
        return std::move(l.entry);
    }

    std::optional<Hit> lookup_pinned(const std::string& hex, bool wait,
                                     LockClock::time_point deadline = LockClock::time_point::min()) {
        Guard pin = wait ? locks_.lock_until(key_lock(hex), LockMode::shared, deadline)
                         : LockTraits<L>::try_lock(locks_, key_lock(hex), LockMode::shared);
        if (!pin.owns()) return std::nullopt;
        Loaded l = load_entry(hex, /*with_components=*/false);
        if (l.fault) {
            pin = Guard{};
            discard(hex, *l.fault);
        }
        if (!l.entry) return std::nullopt;
        Hit h{std::move(*l.entry), {}, std::move(pin)};
        h.package_path = StorageTraits<S>::local_path(storage_, h.entry.package);
        return h;
    }

    /// Removes a bad entry (and its package) if no one is using it, counts and logs it. Returns
    /// whether it was removed. Under the key's exclusive lock the entry is checked again, so an
    /// entry another process rebuilt meanwhile is kept.
    bool discard(const std::string& hex, const std::string& reason) {
        {
            std::lock_guard lock(mu_);
            ++stats_.corrupt;
        }
        log(LogLevel::warning, "cache entry " + hex + " is unusable and treated as a miss: " + reason);
        if (config_.mode == CacheMode::read_only) return false;  // a writer removes it
        Guard ex = LockTraits<L>::try_lock(locks_, key_lock(hex), LockMode::exclusive);
        if (!ex.owns()) return false;  // in use or being rebuilt: whoever holds it will see the fault
        if (const Loaded l = load_entry(hex, /*with_components=*/false); l.entry && package_intact(*l.entry))
            return false;  // rebuilt and sound
        remove_entry(hex, "packages/" + hex + ".run");
        return true;
    }

    /// Removes an entry, then its package and what nodes remembered of it (under the key's lock).
    void remove_entry(const std::string& hex, const std::string& package) {
        storage_.remove("entries/" + hex);
        storage_.remove(package);
        storage_.remove("oplists/" + hex);
        for (const std::string& name : storage_.list("verified"))
            if (name.compare(9, hex.size() + 1, hex + ".") == 0) storage_.remove(name);
    }

    /// What killed writers leave: the storage's temporaries, and packages whose entry was never
    /// written (a publisher holds the key's lock from package to entry, so a package without an
    /// entry whose lock is free is an orphan).
    std::uint64_t remove_leftovers() {
        std::uint64_t n = StorageTraits<S>::collect_garbage(storage_);
        for (const std::string& name : storage_.list("packages")) {
            const std::string file = name.substr(name.find('/') + 1);
            if (file.size() != 36 || file.substr(32) != ".run") continue;
            const std::string hex = file.substr(0, 32);
            if (storage_.stat("entries/" + hex)) continue;
            Guard ex = LockTraits<L>::try_lock(locks_, key_lock(hex), LockMode::exclusive);
            if (!ex.owns() || storage_.stat("entries/" + hex)) continue;
            n += storage_.remove(name) ? 1 : 0;
        }
        for (const std::string& name : storage_.list("oplists")) {
            const std::string hex = name.substr(name.find('/') + 1);
            if (storage_.stat("entries/" + hex)) continue;
            Guard ex = LockTraits<L>::try_lock(locks_, key_lock(hex), LockMode::exclusive);
            if (!ex.owns() || storage_.stat("entries/" + hex)) continue;
            n += storage_.remove(name) ? 1 : 0;
        }
        return n;
    }

    /// Package first, then the entry naming it: a crash in between leaves an orphan package that the
    /// next publish of the key overwrites, never an entry without its package.
    CacheEntry publish_locked(const CacheKey& key, const std::filesystem::path& package,
                              std::chrono::nanoseconds compile_time) {
        judge_subfolders();
        const std::string hex = key.hex();
        CacheEntry e;
        e.key = hex;
        e.package = "packages/" + hex + ".run";
        e.checksum = detail::checksum_of([&](const ChunkFn& fn) {
            return FilesystemStorage(package.parent_path()).read_chunks(package.filename().string(), fn);
        });
        const ObjectInfo info = storage_.import_file(e.package, package);
        e.size = info.size;
        // The copy must be what was hashed: a package changing while it was copied is refused.
        if (detail::checksum_of([&](const ChunkFn& fn) { return storage_.read_chunks(e.package, fn); }) != e.checksum) {
            storage_.remove(e.package);
            throw Error(Errc::corrupt, "the package changed while it was stored in the cache",
                        ErrorContext{package.string(), {}, {}});
        }
        e.created_unix =
            std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                .count();
        e.compile_ns = compile_time.count();
        for (const auto& c : key.components) {
            e.components.push_back(c);
            if (c.first == "op_count") detail::parse_u64(c.second, e.ops);
        }
        // The op list before the entry: an entry is never seen without the list its publisher knew.
        if (!key.ops.empty()) storage_.write("oplists/" + hex, detail::encode_op_list(key.ops));
        else storage_.remove("oplists/" + hex);
        storage_.write("entries/" + hex, detail::encode_entry(e));
        write_manifest();
        for (const auto& [name, value] : key.components)
            log(LogLevel::debug, "cache key " + hex + ": " + name + "=" + value);
        return e;
    }

    /// Removes least recently used entries until within `limits` (0: no limit; both 0 with a
    /// negative age removes everything), and entries older than `older_than`. Never removes `keep`
    /// or an entry in use.
    PruneReport evict_over_limits(CacheLimits limits, std::optional<std::chrono::seconds> older_than,
                                  const std::string& keep) {
        refuse_if_read_only("remove entries");
        fold_quietly();  // publishes, prune and clear fold the statistics log: off the lookup path
        PruneReport r;
        const bool clear_all = older_than && older_than->count() < 0;
        if (!clear_all && limits.max_bytes == 0 && limits.max_entries == 0 && !older_than) return r;
        if (keep.empty()) r.leftovers_removed = remove_leftovers();  // prune and clear, not after a publish
        std::vector<CacheEntry> all = entries();
        std::uint64_t bytes = 0;
        for (const CacheEntry& e : all) bytes += e.size;
        std::uint64_t count = all.size();
        const std::int64_t now_ns =
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
                .count();
        for (const CacheEntry& e : all) {
            // Ages beyond 285 years (where nanoseconds overflow) match nothing.
            const bool too_old = clear_all || (older_than && older_than->count() < 9000000000LL &&
                                               now_ns - e.last_used_ns > older_than->count() * 1000000000LL);
            const bool over = (limits.max_bytes != 0 && bytes > limits.max_bytes) ||
                              (limits.max_entries != 0 && count > limits.max_entries);
            if (!too_old && !over) continue;
            if (e.key == keep) continue;
            Guard ex = LockTraits<L>::try_lock(locks_, key_lock(e.key), LockMode::exclusive);
            if (!ex.owns()) {
                ++r.skipped_in_use;
                continue;
            }
            remove_entry(e.key, e.package);
            ++r.removed;
            r.removed_bytes += e.size;
            bytes -= e.size;
            --count;
        }
        if (r.removed != 0) {
            std::lock_guard lock(mu_);
            stats_.evictions += r.removed;
        }
        r.entries_left = count;
        r.bytes_left = bytes;
        return r;
    }

    struct CacheFolder {
        std::string root;  // a path; kept as its text, which is cheaper to copy
        std::string stem;
    };

    S storage_;
    mutable L locks_;  // persisted_stats() reads under a shared lock: locking changes nothing
    CacheConfig config_;
    CacheLockNames names_;
    std::optional<CacheFolder> folder_;
    std::atomic<bool> subfolders_judged_{false};
    mutable std::mutex mu_;
    CacheStats stats_;                           // not yet flushed
    mutable CacheStats flushed_;                 // flushed by this process
    std::vector<std::array<char, 32>> touched_;  // keys hit since the last flush (may repeat)
    std::unordered_set<std::string> verified_;
    std::unique_ptr<RemoteTier> remote_;  // the remote tier; nullptr: none
    std::string remote_ns_;
    std::chrono::milliseconds remote_lease_ttl_{30000};
    std::atomic<bool> remote_down_{false};  // it failed: not used again by this cache
};

/// `disable_static_kernel_compile_cache`: every call compiles; nothing is read or written.
class NoCache {
public:
    using Guard = NoLock::Guard;
    std::optional<CacheHit<Guard>> lookup(const CacheKey&) {
        ++stats_.misses;
        return std::nullopt;
    }
    template <class Compile>
    CacheOutcome<Guard> get_or_compile(const CacheKey&, Compile&& compile) {
        CacheOutcome<Guard> out;
        out.result = CacheResult::disabled;
        out.compiled_package = compile();
        ++stats_.compiles;
        return out;
    }
    [[nodiscard]] CacheStats stats() const { return stats_; }

private:
    CacheStats stats_;
};

static_assert(CachePolicy<IndexCache<>> && CachePolicy<IndexCache<MemoryStorage, ProcessLock>> && CachePolicy<NoCache>);

/// The file-system cache of docs/spec.md section 4 for one toolchain version and device, in the cache folder
/// `root` (`<base>/static_kernel_compile_outputs/static_kernel_cache` by default, or any folder
/// shared by many bases: resolve_cache_dir):
///   <root>/CANN-<version>_<device>.json   a small manifest (format, where entries are)
///   <root>/CANN-<version>_<device>.lock   the namespace lock (statistics, pruning)
///   <root>/CANN-<version>_<device>/       entries/, packages/, keys/ (per-key locks), stats, verified/
/// The namespace `stem` (`CANN-<version>_<device>`, as Layout::cache_stem makes it) of cache folder `root`.
/// Opening is cheap: the cache folder is opened once (locks and objects are opened relative to it),
/// it and the namespace folder are judged (check_cache_trust), and created when missing (with the
/// manifest). The folders below are created when first written and judged before a package is
/// first stored or verified; the limits (`<root>/config`) are read when applied, and a publish
/// rewrites a manifest that is missing or differs. Read-only creates nothing.
inline std::unique_ptr<IndexCache<FilesystemStorage, FileLock>> open_cache_namespace(std::filesystem::path root,
                                                                                     const std::string& stem,
                                                                                     CacheConfig config = {}) {
    const bool read_only = config.mode == CacheMode::read_only;
    // A bad SKC_CACHE_MAX_SIZE is an error now, not after a compile.
    if (!read_only && config.limits.max_bytes == 0) (void)detail::env_cache_max_size();
    FileLock locks(std::move(root),
                   read_only ? LockAccess::read_only : LockAccess::read_write);  // a path is costly to copy
    const std::filesystem::path& dir = locks.dir();
    if (!read_only && locks.dir_fd() < 0) detail::make_cache_dir(dir);
    if (!check_cache_trust(locks.dir_fd(), dir, stem) && !read_only) {
        // A new namespace: its folder, and the manifest that names it a namespace (`skc cache`
        // lists it before anything is stored).
        detail::make_cache_dir(dir / stem);
        FilesystemStorage(dir).write(stem + ".json", detail::cache_manifest(stem));
    }
    FilesystemStorage storage(locks.dir_handle(), stem);
    auto cache = std::make_unique<IndexCache<FilesystemStorage, FileLock>>(
        std::move(storage), std::move(locks), std::move(config), CacheLockNames{stem + "/keys/", stem});
    cache->set_cache_folder(cache->locks().dir(), stem);
    return cache;
}

namespace detail {

/// A namespace name as read from a folder or a file: `CANN-` and more, no '/', NUL or space (stems
/// have '-' for spaces), not a manifest or lock file name.
inline bool valid_namespace(std::string_view ns) {
    return ns.size() > 5 && ns.size() <= Layout::max_cache_stem && ns.starts_with("CANN-") && is_plain_file_name(ns) &&
           ns.find(' ') == std::string_view::npos && !ns.ends_with(".json") && !ns.ends_with(".lock");
}

}  // namespace detail

/// The namespaces of cache folder `root` that hold entries (or only `only_ns`), in name order; none
/// when the folder does not exist.
inline std::vector<std::string> cache_namespaces(const std::filesystem::path& root, std::string_view only_ns = {}) {
    std::vector<std::string> stems;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (detail::valid_namespace(name) && (only_ns.empty() || name == only_ns) &&
            std::filesystem::is_directory(it->path() / "entries", ec))
            stems.push_back(name);
    }
    std::sort(stems.begin(), stems.end());
    return stems;
}

/// The namespace of toolchain `version` and `device` in cache folder `root`.
inline std::unique_ptr<IndexCache<FilesystemStorage, FileLock>> open_cache(std::filesystem::path root,
                                                                           std::string_view version,
                                                                           std::string_view device,
                                                                           CacheConfig config = {}) {
    return open_cache_namespace(std::move(root), Layout::cache_stem(version, device), std::move(config));
}

/// The same in the base's own cache folder (`layout.cache_dir()`).
inline std::unique_ptr<IndexCache<FilesystemStorage, FileLock>> open_cache(const Layout& layout,
                                                                           std::string_view version,
                                                                           std::string_view device,
                                                                           CacheConfig config = {}) {
    return open_cache(layout.cache_dir(), version, device, std::move(config));
}

}  // namespace skc
