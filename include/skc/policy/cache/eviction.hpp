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

/// When object `name` of key `key` was last used: its modification time, or a later use the
/// statistics log records (`used`) unless the object changed after it.
template <class S, class L>
std::int64_t IndexCache<S, L>::last_use(const std::string& name, const std::string& key,
                                        const std::map<std::string, std::int64_t, std::less<>>& used) const {
    const std::optional<ObjectInfo> info = storage_.stat(name);
    if (!info) return 0;
    const auto it = used.find(key);
    return it != used.end() && it->second > info->ctime_ns ? std::max(info->mtime_ns, it->second) : info->mtime_ns;
}

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
        e->last_used_ns = last_use(name, e->key, used);
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
    // Composites after the entries: one whose part was bad (and removed above) is bad too.
    for (const std::string& name : storage_.list("composites")) {
        ++r.checked;
        const std::string hex = name.substr(name.find('/') + 1);
        const std::optional<CompositeEntry> c = composite(hex);
        std::string reason = c ? std::string() : "the composite is unreadable (truncated or altered)";
        for (std::size_t i = 0; c && reason.empty() && i < c->parts.size(); ++i) {
            const Loaded l = load_entry(c->parts[i].key, /*with_components=*/false);
            if (!l.entry || l.entry->checksum != c->parts[i].checksum)
                reason = "its part " + c->parts[i].key + " is no longer the package it recorded";
        }
        if (reason.empty()) continue;
        Guard ex = LockTraits<L>::try_lock(locks_, key_lock(hex), LockMode::exclusive);
        const bool removed = ex.owns() && config_.mode != CacheMode::read_only;
        if (removed) remove_composite(hex);
        r.bad.push_back(BadEntry{hex, reason, removed});
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
    const std::int64_t now_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    // Ages beyond 285 years (where nanoseconds overflow) match nothing.
    const auto too_old = [&](std::int64_t last_used_ns) {
        return clear_all || (older_than && older_than->count() < 9000000000LL &&
                             now_ns - last_used_ns > older_than->count() * 1000000000LL);
    };
    // Composites hold no bytes and are not counted against the limits; one goes with its age, or
    // with any of its parts (below). A composite in use keeps its parts: they are in use too.
    std::map<std::string, std::vector<std::string>, std::less<>> users;  // part -> composites using it
    for (const CompositeEntry& c : composites()) {
        if (too_old(c.last_used_ns) && c.key != keep) {
            Guard ex = LockTraits<L>::try_lock(locks_, key_lock(c.key), LockMode::exclusive);
            if (ex.owns()) {
                remove_composite(c.key);
                ++r.removed;
                continue;
            }
            ++r.skipped_in_use;
        }
        for (const CachePart& p : c.parts) users[p.key].push_back(c.key);
    }
    std::vector<std::string> composites_seen = storage_.list("composites");
    std::vector<CacheEntry> all = entries();
    std::uint64_t bytes = 0;
    for (const CacheEntry& e : all) bytes += e.size;
    std::uint64_t count = all.size();
    for (const CacheEntry& e : all) {
        const bool over = (limits.max_bytes != 0 && bytes > limits.max_bytes) ||
                          (limits.max_entries != 0 && count > limits.max_entries);
        if (!too_old(e.last_used_ns) && !over) continue;
        if (e.key == keep) continue;
        Guard ex = LockTraits<L>::try_lock(locks_, key_lock(e.key), LockMode::exclusive);
        // A composite written since the listing names a part its writer held then: read them again.
        if (std::vector<std::string> now = ex.owns() ? storage_.list("composites") : composites_seen;
            now != composites_seen) {
            composites_seen = std::move(now);
            users.clear();
            for (const CompositeEntry& c : composites())
                for (const CachePart& p : c.parts) users[p.key].push_back(c.key);
        }
        std::vector<Guard> held;  // the composites that use it, which go with it
        if (const auto it = ex.owns() ? users.find(e.key) : users.end(); it != users.end())
            for (const std::string& c : it->second) {
                held.push_back(LockTraits<L>::try_lock(locks_, key_lock(c), LockMode::exclusive));
                if (!held.back().owns()) break;
            }
        if (!ex.owns() || (!held.empty() && !held.back().owns())) {
            ++r.skipped_in_use;
            continue;
        }
        if (const auto it = users.find(e.key); it != users.end())
            for (const std::string& c : it->second) {
                if (storage_.stat("composites/" + c)) ++r.removed;
                remove_composite(c);
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
