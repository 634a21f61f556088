// skc/cache_explain.hpp: why a key missed: the nearest entry in a cache folder and what differs.
//
// Every entry keeps its key's components (toolchain version, device, deterministic flag, compiler
// options, compiler fingerprint, the op set's digest) and, beside it, the list of its ops with
// their op info file names. explain_miss() compares a key with every entry of every namespace in a
// cache folder, picks the one that differs in the fewest key parts, and names the parts and the
// ops added, removed or changed. Ops are matched by content first; what is left is paired by the
// op info file name without its counter (`Add_float_ND_32_64_7.json` and `Add_float_ND_32_64_2.json`
// are the same op instance, changed), so a renumbered file is not a change.
#pragma once

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "policy/cache.hpp"

namespace skc {

/// A key part that differs: its name (`toolchain_version`, `device`, `deterministic`,
/// `compiler_options`, `compiler`, `format`) and the values in the entry and in the key.
struct PartDifference {
    std::string part;
    std::string entry;
    std::string wanted;
};

struct MissExplanation {
    bool hit = false;                         // the key itself has an entry, or a composite entry (no miss)
    std::optional<CompositeEntry> composite;  // the key's composite entry (a hit on other entries' packages)
    std::string ns;                           // the nearest entry's namespace
    CacheEntry entry;                         // the nearest entry (with its components)
    std::vector<PartDifference> parts;        // the key parts besides the ops that differ
    bool ops_differ = false;
    bool ops_known = false;                                    // both sides have op lists: the lists below are complete
    std::vector<std::string> added;                            // op info files of the key that the entry lacks
    std::vector<std::string> removed;                          // op info files of the entry that the key lacks
    std::vector<std::pair<std::string, std::string>> changed;  // (entry's file, key's file)
    std::size_t common_ops = 0;                                // ops in both

    /// Key parts that differ, the ops counting as one.
    [[nodiscard]] std::size_t distance() const noexcept { return parts.size() + (ops_differ ? 1 : 0); }
    /// Close enough to be worth a line on a miss: at most two parts differ, and when the ops do,
    /// some are shared (or the lists are unknown).
    [[nodiscard]] bool near() const noexcept {
        return !hit && distance() <= 2 && (!ops_differ || !ops_known || common_ops > 0);
    }
    /// One line: the nearest entry and what differs.
    [[nodiscard]] std::string summary() const;
};

namespace detail {

/// `Add_float_ND_32_64_7.json` -> `Add_float_ND_32_64`: the op info file name without its counter.
inline std::string_view op_file_stem(std::string_view name) {
    if (name.ends_with(".json")) name.remove_suffix(5);
    const std::size_t us = name.rfind('_');
    if (us != std::string_view::npos && us + 1 < name.size() &&
        name.find_first_not_of("0123456789", us + 1) == std::string_view::npos)
        name = name.substr(0, us);
    return name;
}

/// The key parts: components grouped (every `compiler_option[i]` is one part, `ops` and
/// `op_count` are the op set).
inline std::vector<std::pair<std::string, std::string>> key_parts(
    const std::vector<std::pair<std::string, std::string>>& components) {
    std::vector<std::pair<std::string, std::string>> parts;
    std::string options;
    bool any_option = false;
    for (const auto& [name, value] : components) {
        if (name == "ops" || name == "op_count") continue;
        if (name.starts_with("compiler_option[")) {
            options += (any_option ? " " : "") + value;
            any_option = true;
            continue;
        }
        parts.emplace_back(name, value);
    }
    parts.emplace_back("compiler_options", any_option ? options : std::string("(none)"));
    return parts;
}

inline std::string component(const std::vector<std::pair<std::string, std::string>>& components,
                             std::string_view name) {
    for (const auto& [n, v] : components)
        if (n == name) return v;
    return {};
}

inline std::string short_value(const std::string& v) { return v.size() <= 40 ? v : v.substr(0, 37) + "..."; }

inline std::string name_list(const std::vector<std::string>& names) {
    std::string out;
    for (std::size_t i = 0; i < names.size() && i < 3; ++i) out += (i ? ", " : "") + names[i];
    if (names.size() > 3) out += " and " + std::to_string(names.size() - 3) + " more";
    return out;
}

/// Fills the op differences of `x` between the entry's ops and the key's.
inline void diff_ops(MissExplanation& x, const std::vector<KeyOp>& entry_ops, const std::vector<KeyOp>& key_ops) {
    std::unordered_map<Digest, std::size_t, DigestHash> in_entry;
    for (const KeyOp& op : entry_ops) ++in_entry[op.digest];
    std::vector<const KeyOp*> left_key;
    for (const KeyOp& op : key_ops) {
        auto it = in_entry.find(op.digest);
        if (it != in_entry.end() && it->second > 0) {
            --it->second;
            ++x.common_ops;
        } else {
            left_key.push_back(&op);
        }
    }
    std::vector<const KeyOp*> left_entry;
    for (const KeyOp& op : entry_ops) {
        auto it = in_entry.find(op.digest);
        if (it->second > 0) {
            --it->second;
            left_entry.push_back(&op);
        }
    }
    for (const KeyOp* k : left_key) {
        const auto e = std::find_if(left_entry.begin(), left_entry.end(), [&](const KeyOp* o) {
            return o != nullptr && op_file_stem(o->name) == op_file_stem(k->name);
        });
        if (e != left_entry.end()) {
            x.changed.emplace_back((*e)->name, k->name);
            *e = nullptr;
        } else {
            x.added.push_back(k->name);
        }
    }
    for (const KeyOp* e : left_entry)
        if (e != nullptr) x.removed.push_back(e->name);
}

}  // namespace detail

inline std::string MissExplanation::summary() const {
    if (hit) return "cache key " + entry.key + " has an entry in " + ns;
    std::string s = "nearest cache entry " + entry.key + " (" + ns + ") differs in ";
    bool first = true;
    for (const PartDifference& d : parts) {
        s += (first ? "" : "; ") + d.part + " (" + detail::short_value(d.entry) + " -> " +
             detail::short_value(d.wanted) + ")";
        first = false;
    }
    if (ops_differ) {
        s += first ? "" : "; ";
        if (!ops_known) {
            s += "ops (" + detail::component(entry.components, "op_count") + " ops in the entry; it has no op list)";
        } else {
            s += "ops:";
            if (!changed.empty()) {
                std::vector<std::string> names;
                for (const auto& c : changed) names.push_back(c.second);
                s += " " + std::to_string(changed.size()) + " changed (" + detail::name_list(names) + ")";
            }
            if (!added.empty()) s += " " + std::to_string(added.size()) + " added (" + detail::name_list(added) + ")";
            if (!removed.empty())
                s += " " + std::to_string(removed.size()) + " removed (" + detail::name_list(removed) + ")";
        }
    }
    return s;
}

/// Compares `key` with the entries of every namespace in cache folder `root` (or only namespace
/// `only_ns`); nullopt when there is no entry at all. A key with a composite entry is a hit (its
/// parts in `composite`). Reads only: it creates and locks nothing.
inline std::optional<MissExplanation> explain_miss(const std::filesystem::path& root, const CacheKey& key,
                                                   std::string_view only_ns = {}) {
    const std::vector<std::pair<std::string, std::string>> wanted = detail::key_parts(key.components);
    const std::string wanted_ops = detail::component(key.components, "ops");
    std::optional<MissExplanation> best;
    for (const std::string& stem : cache_namespaces(root, only_ns)) {
        CacheConfig config{{}, std::chrono::seconds(1), null_log()};
        config.mode = CacheMode::read_only;
        IndexCache<FilesystemStorage, FileLock> cache(FilesystemStorage(root / stem),
                                                      FileLock(root, LockAccess::read_only), config,
                                                      CacheLockNames{stem + "/keys/", stem});
        if (std::optional<CompositeEntry> c = cache.composite(key.hex())) {
            MissExplanation x;
            x.ns = stem;
            x.hit = true;
            x.composite = std::move(c);
            return x;
        }
        for (CacheEntry& e : cache.entries()) {
            MissExplanation x;
            x.ns = stem;
            x.hit = e.key == key.hex();
            const std::vector<std::pair<std::string, std::string>> have = detail::key_parts(e.components);
            // (Pairs, not structured bindings: a lambda may not capture those before C++20's last fixes.)
            for (const auto& w : wanted) {
                const auto h =
                    std::find_if(have.begin(), have.end(), [&](const auto& p) { return p.first == w.first; });
                const std::string entry_value = h == have.end() ? std::string("(none)") : h->second;
                if (entry_value != w.second) x.parts.push_back({w.first, entry_value, w.second});
            }
            for (const auto& h : have)
                if (std::none_of(wanted.begin(), wanted.end(), [&](const auto& p) { return p.first == h.first; }))
                    x.parts.push_back({h.first, h.second, "(none)"});
            x.ops_differ = detail::component(e.components, "ops") != wanted_ops;
            const std::optional<std::vector<KeyOp>> entry_ops = cache.op_list(e.key);
            x.ops_known = entry_ops.has_value() && !key.ops.empty();
            if (x.ops_known) detail::diff_ops(x, *entry_ops, key.ops);
            x.entry = std::move(e);
            const auto rank = [](const MissExplanation& m) {
                return std::make_tuple(!m.hit, m.distance(), m.added.size() + m.removed.size() + m.changed.size(),
                                       -m.entry.last_used_ns);
            };
            if (!best || rank(x) < rank(*best)) best = std::move(x);
        }
    }
    return best;
}

}  // namespace skc
