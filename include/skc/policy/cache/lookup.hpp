// skc/policy/cache/lookup.hpp: IndexCache's lookups (a pinned entry, its package checked once per
// node), the single flight of get_or_compile() (one compile per key across processes), and the
// publishing of entries (package first, then the entry naming it).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "../../cache_format.hpp"
#include "../../cache_key.hpp"
#include "../../detail/hash.hpp"
#include "../../detail/text.hpp"
#include "../../error.hpp"
#include "../index_cache.hpp"
#include "../filesystem_storage.hpp"

namespace skc {

template <class S, class L>
auto IndexCache<S, L>::lookup(const CacheKey& key) -> std::optional<Hit> {
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

template <class S, class L>
bool IndexCache<S, L>::busy(const CacheKey& key) {
    return !LockTraits<L>::try_lock(locks_, key_lock(key.hex()), LockMode::shared).owns();
}

template <class S, class L>
bool IndexCache<S, L>::verify(Hit& hit) {
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

template <class S, class L>
template <class Compile>
auto IndexCache<S, L>::get_or_compile(const CacheKey& key, Compile&& compile) -> Outcome {
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

template <class S, class L>
CacheEntry IndexCache<S, L>::publish(const CacheKey& key, const std::filesystem::path& package,
                                     std::chrono::nanoseconds compile_time) {
    refuse_if_read_only("store a package");
    Guard ex = locks_.lock_until(key_lock(key.hex()), LockMode::exclusive, LockClock::now() + config_.wait_timeout);
    if (!ex.owns()) throw Error(Errc::timeout, "cannot take the lock of cache key " + key.hex());
    CacheEntry e = publish_locked(key, package, compile_time);
    ex = Guard{};
    evict_over_limits(limits_in_effect(), std::nullopt, key.hex());
    return e;
}

template <class S, class L>
bool IndexCache<S, L>::import_entry(const CacheEntry& e, const std::filesystem::path& package,
                                    std::string_view op_list) {
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
        throw Error(Errc::corrupt, "the package is not the one entry " + e.key + " names (size or checksum differs)");
    }
    if (!op_list.empty()) storage_.write("oplists/" + e.key, std::string(op_list));
    storage_.write("entries/" + e.key, detail::encode_entry(stored));
    write_manifest();
    return true;
}

template <class S, class L>
bool IndexCache<S, L>::discard_damaged(const std::string& hex, const Digest& checksum, const std::string& reason,
                                       bool wait) {
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

/// After a full check of the package of entry `hex` (its file's `info`): remembered by this
/// process, and by the node in its memo (not when read-only; a failure to write it only means the
/// next process checks again).
template <class S, class L>
void IndexCache<S, L>::remember_checked(const std::string& hex, const std::optional<ObjectInfo>& info) {
    const std::string local = info ? std::to_string(info->identity) : std::string();
    try {
        if (info && config_.mode != CacheMode::read_only) storage_.write(node_memo(hex), local);
    } catch (const Error& e) {
        log(LogLevel::debug, std::string("cannot remember the checked package: ") + e.what());
    }
    std::lock_guard lock(mu_);
    verified_.insert(hex + "/" + local);
}

/// Runs the compile and counts it (a miss and a compile); its duration in `elapsed`.
template <class S, class L>
template <class Compile>
std::filesystem::path IndexCache<S, L>::compile_counted(Compile& compile, std::chrono::nanoseconds* elapsed) {
    const auto c0 = std::chrono::steady_clock::now();
    std::filesystem::path package = compile();
    if (elapsed) *elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - c0);
    std::lock_guard lock(mu_);
    ++stats_.compiles;
    ++stats_.misses;
    return package;
}

template <class S, class L>
void IndexCache<S, L>::count_hit(const Hit& h) {
    std::lock_guard lock(mu_);
    ++stats_.hits;
    stats_.compile_time_saved_ns += h.entry.compile_ns;
    note_use_locked(h.entry.key);
}

/// Records a use of key `hex` for the next flush (under mu_). Kept as fixed arrays: no allocation
/// per hit.
template <class S, class L>
void IndexCache<S, L>::note_use_locked(const std::string& hex) {
    if (hex.size() != 32) return;
    std::array<char, 32> k;
    std::copy(hex.begin(), hex.end(), k.begin());
    touched_.push_back(k);
}

template <class S, class L>
void IndexCache<S, L>::add_wait(std::chrono::nanoseconds d) {
    std::lock_guard lock(mu_);
    stats_.lock_wait_ns += d.count();
}

/// Once per cache: refuses the folders below the namespace when every user may write them.
template <class S, class L>
void IndexCache<S, L>::judge_subfolders() {
    const int dir = LockTraits<L>::dir_fd(locks_);
    if (dir < 0 || !folder_ || subfolders_judged_.load(std::memory_order_acquire)) return;
    check_cache_subfolders_trust(dir, folder_->root, folder_->stem);
    subfolders_judged_.store(true, std::memory_order_release);
}

/// The namespace's manifest beside its folder, written when it is missing or differs.
template <class S, class L>
void IndexCache<S, L>::write_manifest() {
    if (!folder_) return;
    FilesystemStorage top(folder_->root);
    const std::string name = folder_->stem + ".json";
    const std::string manifest = detail::cache_manifest(folder_->stem);
    if (top.read(name) != manifest) top.write(name, manifest);
}

/// Why the entry's package cannot be used, or nullopt when its size matches (its content is
/// verify()'s business).
template <class S, class L>
std::optional<std::string> IndexCache<S, L>::package_fault(const CacheEntry& e) const {
    const std::optional<ObjectInfo> info = storage_.stat(e.package);
    if (!info) return "the package is missing";
    if (!info->regular) return "the package is not a regular file (a symbolic link or a folder)";
    if (info->size != e.size)
        return "the package's size is " + std::to_string(info->size) + " bytes, the entry says " +
               std::to_string(e.size);
    return std::nullopt;
}

template <class S, class L>
auto IndexCache<S, L>::load_entry(const std::string& hex, bool with_components) const -> Loaded {
    const std::optional<std::string> text = storage_.read("entries/" + hex);
    if (!text) return {};
    std::optional<CacheEntry> e = detail::decode_entry(*text, with_components);
    if (!e || e->key != hex) return {std::nullopt, "the entry is unreadable (truncated or altered)"};
    if (auto fault = package_fault(*e)) return {std::nullopt, std::move(fault)};
    return {std::move(e), std::nullopt};
}

/// Whether the package's bytes still have the checksum the entry recorded (reads all of it).
template <class S, class L>
bool IndexCache<S, L>::package_intact(const CacheEntry& e) const {
    return detail::checksum_of([&](const ChunkFn& fn) { return storage_.read_chunks(e.package, fn); }) == e.checksum;
}

/// Reads and checks entry `hex`; a bad one is removed (when `repair`) and reported as absent.
template <class S, class L>
std::optional<CacheEntry> IndexCache<S, L>::read_entry(const std::string& hex, bool repair) {
    Loaded l = load_entry(hex, /*with_components=*/false);
    if (l.fault && repair) discard(hex, *l.fault);
    return std::move(l.entry);
}

template <class S, class L>
auto IndexCache<S, L>::lookup_pinned(const std::string& hex, bool wait, LockClock::time_point deadline,
                                     Guard* absent_pin) -> std::optional<Hit> {
    Guard pin = wait ? locks_.lock_until(key_lock(hex), LockMode::shared, deadline)
                     : LockTraits<L>::try_lock(locks_, key_lock(hex), LockMode::shared);
    if (!pin.owns()) return std::nullopt;
    Loaded l = load_entry(hex, /*with_components=*/false);
    if (l.fault) {
        pin = Guard{};
        discard(hex, *l.fault);
    }
    if (!l.entry) {
        if (absent_pin && pin.owns()) *absent_pin = std::move(pin);  // no entry: the caller looks further
        return std::nullopt;
    }
    Hit h{std::move(*l.entry), {}, std::move(pin)};
    h.package_path = StorageTraits<S>::local_path(storage_, h.entry.package);
    return h;
}

/// Removes a bad entry (and its package) if no one is using it, counts and logs it. Returns
/// whether it was removed. Under the key's exclusive lock the entry is checked again, so an
/// entry another process rebuilt meanwhile is kept.
template <class S, class L>
bool IndexCache<S, L>::discard(const std::string& hex, const std::string& reason) {
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
template <class S, class L>
void IndexCache<S, L>::remove_entry(const std::string& hex, const std::string& package) {
    storage_.remove("entries/" + hex);
    storage_.remove(package);
    storage_.remove("oplists/" + hex);
    forget_checked(hex);
}

/// Removes what nodes remembered of checking key `hex` (`verified/<hex>.<node>`).
template <class S, class L>
void IndexCache<S, L>::forget_checked(const std::string& hex) {
    for (const std::string& name : storage_.list("verified"))
        if (name.compare(9, hex.size() + 1, hex + ".") == 0) storage_.remove(name);
}

/// Package first, then the entry naming it: a crash in between leaves an orphan package that the
/// next publish of the key overwrites, never an entry without its package.
template <class S, class L>
CacheEntry IndexCache<S, L>::publish_locked(const CacheKey& key, const std::filesystem::path& package,
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
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    e.compile_ns = compile_time.count();
    for (const auto& c : key.components) {
        e.components.push_back(c);
        if (c.first == "op_count") detail::parse_u64(c.second, e.ops);
    }
    // The op list before the entry: an entry is never seen without the list its publisher knew.
    if (!key.ops.empty()) storage_.write("oplists/" + hex, detail::encode_op_list(key.ops));
    else storage_.remove("oplists/" + hex);
    storage_.write("entries/" + hex, detail::encode_entry(e));
    storage_.remove("composites/" + hex);  // the set's one package replaces the packages it was covered by
    write_manifest();
    for (const auto& [name, value] : key.components)
        log(LogLevel::debug, "cache key " + hex + ": " + name + "=" + value);
    return e;
}

}  // namespace skc
