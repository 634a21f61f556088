// skc/policy/cache/cover.hpp: IndexCache::cover, a miss answered from the entries compiled before
// whose ops lie inside the key's (docs/cache.md, "A new shape compiles only itself"), and the
// composite entries that remember such a cover so that the next one is a single lookup. The host
// compiles the ops none of them holds, under their own key (compiler.hpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../../cache_format.hpp"
#include "../../cache_key.hpp"
#include "../index_cache.hpp"

namespace skc {

namespace detail {

/// Whether two keys' components are the same but for the op set (`ops`, `op_count`).
inline bool same_but_ops(const std::vector<std::pair<std::string, std::string>>& a,
                         const std::vector<std::pair<std::string, std::string>>& b) {
    auto rest = [](const std::vector<std::pair<std::string, std::string>>& c) {
        std::vector<std::pair<std::string, std::string>> out;
        for (const auto& p : c)
            if (p.first != "ops" && p.first != "op_count") out.push_back(p);
        return out;
    };
    return rest(a) == rest(b);
}

}  // namespace detail

template <class S, class L>
auto IndexCache<S, L>::cover(const CacheKey& key) -> CacheCover<Guard> {
    CacheCover<Guard> out;
    if (config_.mode == CacheMode::recache) return out;
    Guard pin;  // the key's, when it has no entry: a composite of it is read under it
    if (std::optional<Hit> h = lookup_pinned(key.hex(), /*wait=*/false, LockClock::time_point::min(), &pin);
        h && verify(*h)) {
        count_hit(*h);
        out.parts.push_back(std::move(*h));
        out.whole = true;
        return out;
    }
    if (pin.owns()) {
        if (std::optional<CacheCover<Guard>> c = composite_cover(key, pin)) return std::move(*c);
        if (pin.owns() && remote_usable()) {
            const RemoteHas there = fetch_composite(key.hex());
            if (there == RemoteHas::package) return out;  // get_or_compile() downloads it
            if (there == RemoteHas::composite)
                if (std::optional<CacheCover<Guard>> c = composite_cover(key, pin)) return std::move(*c);
        }
    }
    if (key.ops.size() < 2 || config_.cover_packages < 2 || busy(key)) return out;
    std::unordered_set<Digest, DigestHash> want;
    for (const KeyOp& op : key.ops) want.insert(op.digest);

    struct Candidate {
        CacheEntry entry;
        std::vector<Digest> ops;
    };
    std::vector<Candidate> candidates;
    std::vector<CacheEntry> all = entries();  // oldest use first: the newest wins a tie below
    for (auto e = all.rbegin(); e != all.rend(); ++e) {
        if (e->ops == 0 || e->ops >= want.size() || !detail::same_but_ops(e->components, key.components)) continue;
        const std::optional<std::vector<KeyOp>> list = op_list(e->key);
        if (!list || list->size() != e->ops) continue;
        Candidate c{std::move(*e), {}};
        for (const KeyOp& op : *list) c.ops.push_back(op.digest);
        if (std::all_of(c.ops.begin(), c.ops.end(), [&](const Digest& d) { return want.count(d) != 0; }))
            candidates.push_back(std::move(c));
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate& a, const Candidate& b) { return a.ops.size() > b.ops.size(); });
    for (Candidate& c : candidates) {
        if (out.covered.size() == want.size()) break;
        if (std::all_of(c.ops.begin(), c.ops.end(), [&](const Digest& d) { return out.covered.count(d) != 0; }))
            continue;  // adds nothing
        std::optional<Hit> h = lookup_pinned(c.entry.key, /*wait=*/false);
        if (!h || !verify(*h)) continue;  // removed meanwhile, or found bad (and removed)
        out.covered.insert(c.ops.begin(), c.ops.end());
        out.parts.push_back(std::move(*h));
    }
    const std::size_t packages = out.parts.size() + (out.covered.size() < want.size() ? 1 : 0);
    if (out.parts.empty() || packages > config_.cover_packages) return CacheCover<Guard>{};
    for (const Hit& h : out.parts) count_hit(h);
    return out;
}

/// The key's composite as a cover, its parts checked (their packages' sizes, and their checksums
/// once per node), under the key's shared `pin` (taken by the first part): while a composite is
/// pinned its parts are not evicted (evict_over_limits). nullopt: none, or it proved unusable and
/// was dropped.
template <class S, class L>
auto IndexCache<S, L>::composite_cover(const CacheKey& key, Guard& pin) -> std::optional<CacheCover<Guard>> {
    const std::string hex = key.hex();
    const std::optional<std::string> text = storage_.read("composites/" + hex);
    if (!text) return std::nullopt;
    std::optional<CompositeEntry> c = detail::decode_composite(*text);
    std::string ids;
    std::optional<std::string> fault = !c || c->key != hex
                                           ? std::optional<std::string>("it is unreadable (truncated or altered)")
                                           : composite_fault(*c, ids);
    if (fault) {
        pin = Guard{};
        drop_composite(hex, *fault);
        return std::nullopt;
    }
    CacheCover<Guard> out;
    out.composite = true;
    for (CachePart& p : c->parts) {
        Hit h{CacheEntry{}, {}, out.parts.empty() ? std::move(pin) : Guard{}};
        h.entry.key = std::move(p.key);
        h.entry.package = "packages/" + h.entry.key + ".run";
        h.entry.size = p.size;
        h.entry.checksum = p.checksum;
        h.package_path = StorageTraits<S>::local_path(storage_, h.entry.package);
        out.parts.push_back(std::move(h));
    }
    std::lock_guard lock(mu_);
    ++stats_.hits;
    ++stats_.composite_hits;
    stats_.compile_time_saved_ns += c->compile_ns;
    note_use_locked(hex);
    for (const Hit& h : out.parts) note_use_locked(h.entry.key);  // a use of the composite is one of its packages
    return out;
}

/// Why composite `c` cannot be used now, or nullopt: every part's package there with the size it
/// recorded, and its content checked in full once per node (remembered by the identities of the
/// parts' files, `identities`, in the node's memo of the composite; a part replaced since has
/// another identity and is checked again, against the checksum the composite recorded).
template <class S, class L>
std::optional<std::string> IndexCache<S, L>::composite_fault(const CompositeEntry& c, std::string& identities) {
    judge_subfolders();
    std::vector<std::string> names;
    for (const CachePart& p : c.parts) {
        names.push_back("packages/" + p.key + ".run");
        const std::optional<ObjectInfo> info = storage_.stat(names.back());
        if (!info || !info->regular || info->size != p.size)
            return "the package of its part " + p.key + " is missing or has another size";
        identities += std::to_string(info->identity) + ",";
    }
    const std::string memo = c.key + "/" + identities;
    {
        std::lock_guard lock(mu_);
        if (verified_.count(memo) != 0) return std::nullopt;
    }
    if (storage_.read(node_memo(c.key)) != identities) {
        for (std::size_t i = 0; i < c.parts.size(); ++i)
            if (detail::checksum_of([&](const ChunkFn& fn) { return storage_.read_chunks(names[i], fn); }) !=
                c.parts[i].checksum)
                return "the package of its part " + c.parts[i].key + " is not the one it recorded";
        try {
            if (config_.mode != CacheMode::read_only) storage_.write(node_memo(c.key), identities);
        } catch (const Error& e) {
            log(LogLevel::debug, std::string("cannot remember the checked composite: ") + e.what());
        }
    }
    std::lock_guard lock(mu_);
    verified_.insert(memo);
    return std::nullopt;
}

/// Removes composite `hex`, found unusable (`reason`), unless it is in use or was rewritten
/// meanwhile: the next cover of its set looks for parts again. Its parts are not touched.
template <class S, class L>
void IndexCache<S, L>::drop_composite(const std::string& hex, const std::string& reason) {
    log(LogLevel::info, "cache composite " + hex + " is not used: " + reason);
    if (config_.mode == CacheMode::read_only) return;
    Guard ex = LockTraits<L>::try_lock(locks_, key_lock(hex), LockMode::exclusive);
    if (!ex.owns()) return;
    std::string ids;
    const std::optional<CompositeEntry> c = composite(hex);
    if (c && !composite_fault(*c, ids)) return;  // rewritten and sound
    remove_composite(hex);
}

/// Removes composite `hex` and what nodes remembered of it (under the key's exclusive lock).
template <class S, class L>
void IndexCache<S, L>::remove_composite(const std::string& hex) {
    storage_.remove("composites/" + hex);
    forget_checked(hex);
}

template <class S, class L>
void IndexCache<S, L>::record_composite(const CacheKey& key, const std::vector<CachePart>& parts,
                                        std::chrono::nanoseconds compile_ns) {
    if (config_.mode != CacheMode::read_write || parts.size() < 2) return;
    const std::string hex = key.hex();
    Guard ex = LockTraits<L>::try_lock(locks_, key_lock(hex), LockMode::exclusive);
    if (!ex.owns() || storage_.stat("entries/" + hex)) return;  // busy, or compiled whole meanwhile
    CompositeEntry c;
    c.key = hex;
    c.parts = parts;
    c.created_unix =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    c.compile_ns = compile_ns.count();
    c.ops = key.ops.size();
    storage_.write("composites/" + hex, detail::encode_composite(c));
    log(LogLevel::debug, "cache key " + hex + ": a composite of " + std::to_string(parts.size()) + " packages");
    ex = Guard{};
    upload_composite(c);
}

template <class S, class L>
bool IndexCache<S, L>::import_composite(const CompositeEntry& c) {
    refuse_if_read_only("import entries");
    Guard ex = locks_.lock_until(key_lock(c.key), LockMode::exclusive, LockClock::now() + config_.wait_timeout);
    if (!ex.owns()) throw Error(Errc::timeout, "cannot take the lock of cache key " + c.key);
    if (storage_.stat("entries/" + c.key) || composite(c.key)) return false;
    for (const CachePart& p : c.parts)
        if (const Loaded l = load_entry(p.key, /*with_components=*/false); !l.entry || l.entry->checksum != p.checksum)
            return false;
    storage_.write("composites/" + c.key, detail::encode_composite(c));
    return true;
}

template <class S, class L>
std::vector<CompositeEntry> IndexCache<S, L>::composites() {
    std::vector<CompositeEntry> out;
    std::map<std::string, std::int64_t, std::less<>> used;
    if constexpr (StorageTraits<S>::appends) used = logged_uses();
    for (const std::string& name : storage_.list("composites")) {
        std::optional<CompositeEntry> c = composite(name.substr(name.find('/') + 1));
        if (!c) continue;
        c->last_used_ns = last_use(name, c->key, used);
        out.push_back(std::move(*c));
    }
    std::sort(out.begin(), out.end(),
              [](const CompositeEntry& a, const CompositeEntry& b) { return a.last_used_ns < b.last_used_ns; });
    return out;
}

}  // namespace skc
