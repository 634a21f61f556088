// skc/policy/cache/eviction.hpp: IndexCache's entries by last use, their eviction over the limits
// (least recently used first, never an entry in use), prune, verify_all, and the removal of what
// killed writers left (temporaries, packages without an entry).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "../../cache_format.hpp"
#include "../../cache_limits.hpp"
#include "../index_cache.hpp"
#include "../storage.hpp"

namespace skc {

template <class S, class L>
std::vector<CacheEntry> IndexCache<S, L>::entries() {
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

template <class S, class L>
VerifyReport IndexCache<S, L>::verify_all(
    const std::function<std::optional<std::string>(const std::filesystem::path&)>& check_package) {
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
                r.bad.push_back(BadEntry{hex, reason, discard_damaged(hex, l.entry->checksum, reason, /*wait=*/false)});
            }
            continue;
        }
        if (reason.empty()) continue;
        r.bad.push_back(BadEntry{hex, reason, discard(hex, reason)});
    }
    return r;
}

template <class S, class L>
PruneReport IndexCache<S, L>::prune(CacheLimits limits, std::optional<std::chrono::seconds> older_than) {
    return evict_over_limits(limits, older_than, {});
}

/// What killed writers leave: the storage's temporaries, and packages whose entry was never
/// written (a publisher holds the key's lock from package to entry, so a package without an
/// entry whose lock is free is an orphan).
template <class S, class L>
std::uint64_t IndexCache<S, L>::remove_leftovers() {
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

/// Removes least recently used entries until within `limits` (0: no limit; both 0 with a
/// negative age removes everything), and entries older than `older_than`. Never removes `keep`
/// or an entry in use.
template <class S, class L>
PruneReport IndexCache<S, L>::evict_over_limits(CacheLimits limits, std::optional<std::chrono::seconds> older_than,
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

}  // namespace skc
