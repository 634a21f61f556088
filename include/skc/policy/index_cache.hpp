// skc/policy/index_cache.hpp: the results and the configuration of a cache policy, the CachePolicy
// concept, and the interface and state of IndexCache. Include policy/cache.hpp, which has the
// definitions of IndexCache's members too (policy/cache/*.hpp, a file for each role), NoCache and
// open_cache().
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <concepts>
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
#include "filesystem_storage.hpp"

namespace skc {

struct CacheConfig {
    CacheLimits limits;                                              // applied after each publish
    std::chrono::milliseconds wait_timeout = std::chrono::hours(2);  // for another process's compile
    LogSink log = stderr_log();
    CacheMode mode = CacheMode::read_write;  // read-only: never writes; recache: compiles and overwrites
    std::size_t cover_packages = 8;          // most packages a cover may install, the delta's counted (cover())
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

/// A cover of a key's ops (IndexCache::cover): cached entries whose ops all lie inside them.
template <class Guard>
struct CacheCover {
    std::vector<CacheHit<Guard>> parts;              // pinned, largest first
    std::unordered_set<Digest, DigestHash> covered;  // the ops the parts hold
    bool whole = false;                              // the one part is the key's own entry: a plain hit
    bool composite = false;                          // the parts are the key's composite entry: all its ops
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
    std::optional<Hit> lookup(const CacheKey& key);

    /// Whether another process holds `key` exclusively at this instant (it compiles or stores it), so
    /// that get_or_compile() would wait: for a progress display.
    [[nodiscard]] bool busy(const CacheKey& key);

    /// The full checksum of the hit's package before its first use on this node (see the header
    /// comment). On a mismatch the entry is removed, counted as corrupt and false returned: the
    /// caller treats it as a miss.
    bool verify(Hit& hit);

    /// Single flight: a hit, or a compile run by exactly one process per key. `compile` returns the
    /// path of the package it produced; if it throws, nothing is stored and the error propagates.
    /// All waiting together is bounded by config().wait_timeout: Error(timeout) when another
    /// process holds the key longer. Read-only: waits for a process compiling the key, then hits or
    /// compiles without storing (`compiled`, no hit). Recache: compiles and replaces the entry.
    template <class Compile>
    Outcome get_or_compile(const CacheKey& key, Compile&& compile);

    /// The key's own entry (`whole`: a plain hit, the same lookup get_or_compile makes), or else a
    /// miss answered from entries compiled before (docs/cache.md, covers): the entries whose key
    /// inputs are `key`'s but for the ops and whose ops all lie inside `key.ops`, picked largest
    /// first while each adds ops. Each part is pinned, checked as a hit is and counted as one. None
    /// in recache mode, when another process compiles `key`, when its ops are unknown, and when the
    /// parts and the package of the rest would be more than config().cover_packages (the set is
    /// then compiled whole): get_or_compile() takes it from there. Reads every entry and the op
    /// list of each with the same inputs: a miss's cost, not a hit's.
    CacheCover<Guard> cover(const CacheKey& key);

    /// Records that `parts` (the packages of other entries, in install order) hold `key`'s ops
    /// together: a composite entry (`composites/<key>`), so that the next cover() of `key` is one
    /// lookup. Not when the key has an entry of its own or another process holds its lock, and
    /// only in read-write mode; `compile_ns` is what a hit on it saves.
    void record_composite(const CacheKey& key, const std::vector<CachePart>& parts,
                          std::chrono::nanoseconds compile_ns);

    /// Every readable composite entry, oldest use first (as entries()).
    std::vector<CompositeEntry> composites();

    /// Composite `hex`; nullopt when there is none or it is unreadable.
    [[nodiscard]] std::optional<CompositeEntry> composite(const std::string& hex) const {
        const std::optional<std::string> text = storage_.read("composites/" + hex);
        std::optional<CompositeEntry> c = text ? detail::decode_composite(*text) : std::nullopt;
        return c && c->key == hex ? c : std::nullopt;
    }

    /// Counts the ops of a set looked up here: those compiled and those cached packages held.
    void count_ops(std::uint64_t compiled, std::uint64_t reused) {
        std::lock_guard lock(mu_);
        stats_.ops_compiled += compiled;
        stats_.ops_reused += reused;
    }

    /// Stores `package` for `key` (taking the key's exclusive lock). Replaces an existing entry.
    CacheEntry publish(const CacheKey& key, const std::filesystem::path& package,
                       std::chrono::nanoseconds compile_time = {});

    /// Every readable entry, oldest use first. Unreadable ones are skipped (verify_all reports them).
    /// A use is the entry's modification time, or a later one the statistics log records and no
    /// fold applied yet (unless the entry changed after it, as a fold would decide).
    std::vector<CacheEntry> entries();

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
    bool import_entry(const CacheEntry& e, const std::filesystem::path& package, std::string_view op_list = {});

    /// Adds a composite made elsewhere (`skc cache import`), under its key's exclusive lock, when each
    /// of its parts is an entry here with the package it recorded and the key has neither an entry
    /// nor a composite yet; returns whether it was added.
    bool import_composite(const CompositeEntry& c);

    /// Applies the configured limits now (as after a publish), least recently used first.
    PruneReport apply_limits() { return evict_over_limits(limits_in_effect(), std::nullopt, {}); }

    /// Removes entry `hex` whose package its user found unusable although its checksum matches (it was
    /// stored damaged: `reason` says how), so that the next get_or_compile() compiles it again. Waits
    /// for the key's exclusive lock (up to config().wait_timeout; the caller must not pin it) and
    /// removes the entry only if it still records `checksum`: one another process stored meanwhile
    /// is kept. Counted as corrupt (the caller tells the user why). Returns whether it was removed; a read-only cache
    /// removes nothing. Without `wait`, an entry in use is left (false).
    bool discard_damaged(const std::string& hex, const Digest& checksum, const std::string& reason, bool wait = true);

    /// Checks every entry and its package in full; removes and reports the bad ones (entries in use
    /// are checked but not removed). With `check_package`, each package whose checksum matches is
    /// also given to it (as a file, where the storage keeps files): what it returns is why the
    /// package is unusable (run_package_fault() for run packages), nullopt when it is sound.
    VerifyReport verify_all(
        const std::function<std::optional<std::string>(const std::filesystem::path&)>& check_package = {});

    /// Applies limits and an age (entries unused for longer are removed); entries in use are kept.
    PruneReport prune(CacheLimits limits, std::optional<std::chrono::seconds> older_than = std::nullopt);

    /// Removes every entry not in use (and the leftovers of killed writers).
    PruneReport clear() { return evict_over_limits(CacheLimits{0, 0}, std::chrono::seconds(-1), {}); }

    /// Resets the stored statistics of every process (and this one's) to zero (`skc cache zero`).
    void zero_stats();

    /// This process's counters since construction (flushed or not).
    [[nodiscard]] CacheStats stats() const {
        std::lock_guard lock(mu_);
        return total_copy();
    }

    /// The counters of every process that flushed (`stats` and the log not folded into it yet),
    /// plus this one's unflushed ones. Reads only, under a shared namespace lock so that a fold in
    /// progress is seen whole (read-write: the lock file is created if there is none yet).
    [[nodiscard]] CacheStats persisted_stats() const;

    /// Merges the statistics log into `stats` now, waiting for the namespace lock (publishes,
    /// prune, clear and zero_stats fold too, and an appender that finds the log long).
    void fold_stats();

    /// Saves this process's counters and marks its hits as used now. Called by the destructor;
    /// cheap when there is nothing new. Both go to the statistics log in one append, without the
    /// namespace lock or an fsync; a fold applies the use times to the entries (storages without
    /// appends touch the entries and merge the counters into `stats` under the namespace lock).
    void flush();

private:
    struct CacheFolder {
        std::string root;  // a path; kept as its text, which is cheaper to copy
        std::string stem;
    };

    /// Entry `hex` read and checked (its check line, its package's size): the entry,
    /// or why it cannot be used, or neither when there is no entry object at all.
    struct Loaded {
        std::optional<CacheEntry> entry;
        std::optional<std::string> fault;
    };

    /// What read_unfolded_logs() read: the logs older versions took (name, bytes read), and where the
    /// log was read to (the mark in `stats` when there is no log).
    struct UnfoldedLogs {
        std::vector<std::pair<std::string, std::uint64_t>> taken;
        LogMark mark;
    };

    /// What the local storage threw while a download was stored (not a fault of the remote).
    struct LocalFault {
        std::exception_ptr error;
    };

    /// Holds a remote lease while this process compiles (policy/cache/remote_tier.hpp).
    class RemoteLeaseHolder;

    [[nodiscard]] std::string key_lock(const std::string& hex) const { return names_.key_prefix + "key-" + hex; }

    /// The node's memo that it checked the package of entry `hex` in full.
    [[nodiscard]] static std::string node_memo(const std::string& hex) {
        return "verified/" + hex + "." + detail::node_name();
    }

    void refuse_if_read_only(std::string_view what) const {
        if (config_.mode == CacheMode::read_only)
            throw Error(Errc::permission_denied, "the cache is read-only (cache_mode): cannot " + std::string(what));
    }

    void log(LogLevel level, const std::string& line) const {
        if (config_.log) config_.log(level, line);
    }

    /// The limits to apply after a publish: the caller's, those of the cache folder filled in.
    CacheLimits limits_in_effect() const {
        return folder_ ? effective_cache_limits(config_.limits, folder_->root).limits : config_.limits;
    }

    CacheStats total_copy() const {
        CacheStats s = flushed_;
        s += stats_;
        return s;
    }

    [[nodiscard]] bool remote_usable() const noexcept {
        return remote_ && config_.mode != CacheMode::read_only && !remote_down_.load(std::memory_order_relaxed);
    }

    // Lookup, single flight and publishing (policy/cache/lookup.hpp).
    void remember_checked(const std::string& hex, const std::optional<ObjectInfo>& info);
    template <class Compile>
    std::filesystem::path compile_counted(Compile& compile, std::chrono::nanoseconds* elapsed = nullptr);
    void count_hit(const Hit& h);
    void note_use_locked(const std::string& hex);
    void add_wait(std::chrono::nanoseconds d);
    void judge_subfolders();
    void write_manifest();
    std::optional<std::string> package_fault(const CacheEntry& e) const;
    Loaded load_entry(const std::string& hex, bool with_components) const;
    bool package_intact(const CacheEntry& e) const;
    std::optional<CacheEntry> read_entry(const std::string& hex, bool repair);
    std::optional<Hit> lookup_pinned(const std::string& hex, bool wait,
                                     LockClock::time_point deadline = LockClock::time_point::min(),
                                     Guard* absent_pin = nullptr);
    bool discard(const std::string& hex, const std::string& reason);
    void remove_entry(const std::string& hex, const std::string& package);
    void forget_checked(const std::string& hex);
    CacheEntry publish_locked(const CacheKey& key, const std::filesystem::path& package,
                              std::chrono::nanoseconds compile_time);

    // Composite entries (policy/cache/cover.hpp).
    std::optional<CacheCover<Guard>> composite_cover(const CacheKey& key, Guard& pin);
    std::optional<std::string> composite_fault(const CompositeEntry& c, std::string& identities);
    void drop_composite(const std::string& hex, const std::string& reason);
    void remove_composite(const std::string& hex);

    std::int64_t last_use(const std::string& name, const std::string& key,
                          const std::map<std::string, std::int64_t, std::less<>>& used) const;

    // Eviction over the limits and the leftovers of killed writers (policy/cache/eviction.hpp).
    std::uint64_t remove_leftovers();
    PruneReport evict_over_limits(CacheLimits limits, std::optional<std::chrono::seconds> older_than,
                                  const std::string& keep);

    // The statistics log (policy/cache/stats_log.hpp).
    template <class Fn>
    UnfoldedLogs read_unfolded_logs(std::string_view stats_text, Fn&& fn) const;
    CacheStats stored_stats() const;
    void fold_locked(bool zero);
    static void note_use(std::map<std::string, std::int64_t, std::less<>>& used, std::string_view key,
                         std::int64_t at_ns);
    std::map<std::string, std::int64_t, std::less<>> logged_uses() const;
    void fold_quietly();

    // The remote tier (policy/cache/remote_tier.hpp).
    void remote_failed(const std::string& what);
    bool remote_lookup_or_lease(const std::string& hex, LockClock::time_point deadline,
                                std::optional<RemoteLease>& lease);
    bool download(const std::string& hex, bool count_miss, std::optional<std::uint64_t>& bad);
    void upload(const RemoteLease& lease, const CacheEntry& e);
    void release_quietly(const RemoteLease& lease) noexcept;
    enum class RemoteHas : unsigned char { nothing, package, composite };
    RemoteHas fetch_composite(const std::string& hex);
    void upload_composite(const CompositeEntry& c);

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

}  // namespace skc
