// skc/policy/cache/cover.hpp: IndexCache::cover, a miss answered from the entries compiled before
// whose ops lie inside the key's (docs/cache.md, "A new shape compiles only itself"). The host
// compiles the ops none of them holds, under their own key (compiler.hpp).
#pragma once

#include <algorithm>
#include <cstddef>
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
    if (std::optional<Hit> h = lookup_pinned(key.hex(), /*wait=*/false); h && verify(*h)) {
        count_hit(*h);
        out.parts.push_back(std::move(*h));
        out.whole = true;
        return out;
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

}  // namespace skc
