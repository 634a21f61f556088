// skc cache ls, verify, prune and clear: the entries of the cache. `ls` lists them, least recently
// used first; `verify` checks every package in full and removes bad entries (exit status 1);
// `prune` removes entries over the limits given or unused too long; `clear` removes every entry
// not in use.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <skc/policy/cache.hpp>
#include <skc/policy/remote.hpp>
#include <skc/run_package.hpp>
#include <skc/value.hpp>

#ifdef SKC_TOOL_WITH_REDIS
#include <skc/ext/redis.hpp>
#endif

#include "cache.hpp"
#include "cli.hpp"
#include "common.hpp"

namespace skc_tool {

namespace {

skc::Object entry_json(const Target& t, const std::string& stem, const skc::CacheEntry& e) {
    skc::Object o;
    o.push_back({"key", utf8(e.key)});
    o.push_back({"size", e.size});
    o.push_back({"ops", e.ops});
    o.push_back({"created_unix", e.created_unix});
    o.push_back({"last_used_ns", e.last_used_ns});
    o.push_back({"compile_ns", e.compile_ns});
    o.push_back({"checksum", e.checksum.hex()});
    o.push_back({"package", utf8(e.package)});
    o.push_back({"package_path", utf8(t.shown_path(stem + "/" + e.package))});
    skc::Object components;
    for (const auto& [name, value] : e.components) components.push_back({utf8(name), utf8(value)});
    o.push_back({"components", std::move(components)});
    return o;
}

skc::Object composite_json(const skc::CompositeEntry& c) {
    skc::Object o;
    o.push_back({"key", utf8(c.key)});
    o.push_back({"ops", c.ops});
    o.push_back({"created_unix", c.created_unix});
    o.push_back({"last_used_ns", c.last_used_ns});
    o.push_back({"compile_ns", c.compile_ns});
    skc::Array parts;
    for (const skc::CachePart& p : c.parts)
        parts.emplace_back(skc::Object{{"key", utf8(p.key)}, {"size", p.size}, {"checksum", p.checksum.hex()}});
    o.push_back({"parts", std::move(parts)});
    return o;
}

int cache_ls(const Target& t, const CacheOptions& o) {
    if (nothing_there(t, o)) return exit_ok;
    skc::Array list;
    std::string r;
    for (const std::string& stem : t.namespaces) {
        const std::unique_ptr<FsCache> cache = open_namespace(t, stem);
        std::vector<skc::CacheEntry> entries = cache->entries();
        std::vector<skc::CompositeEntry> composites = cache->composites();
        // Least recently used first, as the cache gives them; entries used at the same instant by key.
        const auto by_use = [](const auto& a, const auto& b) {
            return std::tie(a.last_used_ns, a.key) < std::tie(b.last_used_ns, b.key);
        };
        std::sort(entries.begin(), entries.end(), by_use);
        std::sort(composites.begin(), composites.end(), by_use);
        if (o.json) {
            skc::Array items, comps;
            for (const skc::CacheEntry& e : entries) items.emplace_back(entry_json(t, stem, e));
            for (const skc::CompositeEntry& c : composites) comps.emplace_back(composite_json(c));
            skc::Object n;
            n.push_back({"namespace", utf8(stem)});
            n.push_back({"entries", std::move(items)});
            n.push_back({"composites", std::move(comps)});
            list.emplace_back(std::move(n));
            continue;
        }
        std::uint64_t bytes = 0;
        for (const skc::CacheEntry& e : entries) bytes += e.size;
        if (!r.empty()) r += "\n";
        r += printable(stem) + ": " + plural(entries.size(), "entry", "entries") + ", " + human_size(bytes) + "\n";
        if (entries.empty()) continue;
        r += pad_right("key", 34) + pad_left("size", 10) + pad_left("ops", 6) + "  " + pad_right("created", 21) +
             pad_right("last used", 21) + "compile time\n";
        for (const skc::CacheEntry& e : entries)
            r += pad_right(printable(e.key), 34) + pad_left(human_size(e.size), 10) +
                 pad_left(std::to_string(e.ops), 6) + "  " +
                 pad_right(e.created_unix == 0 ? "-" : local_time(e.created_unix), 21) +
                 pad_right(local_time(e.last_used_ns / 1000000000), 21) +
                 (e.compile_ns == 0 ? "-" : human_duration(e.compile_ns)) + "\n";
        if (composites.empty()) continue;
        // A composite: a set held by the packages of other entries together (a cover).
        r += plural(composites.size(), "composite entry", "composite entries") + ", each held by other entries:\n";
        r += pad_right("key", 34) + pad_left("ops", 6) + "  " + pad_right("last used", 21) + "parts\n";
        for (const skc::CompositeEntry& c : composites) {
            std::string parts;
            for (const skc::CachePart& p : c.parts) parts += (parts.empty() ? "" : " ") + p.key.substr(0, 8);
            r += pad_right(printable(c.key), 34) + pad_left(std::to_string(c.ops), 6) + "  " +
                 pad_right(local_time(c.last_used_ns / 1000000000), 21) + parts + "\n";
        }
    }
    if (o.json) {
        print_namespaces_json(t, std::move(list));
    } else {
        out(r);
    }
    return exit_ok;
}

/// One namespace's verify result as JSON (namespace, checked, bad) and as text: `<ns>: checked N
/// <entries>, all good|M bad` and a line per bad entry, ending `(removed)`, or `kept` when it stays.
struct VerifiedNamespace {
    skc::Object json;
    std::string text;
};
VerifiedNamespace verified_namespace(const std::string& ns, std::uint64_t checked,
                                     const std::vector<skc::BadEntry>& bad, const std::string& one,
                                     const std::string& many, const std::string& kept) {
    skc::Array items;
    std::string lines;
    for (const skc::BadEntry& be : bad) {
        skc::Object b;
        b.push_back({"key", utf8(be.key)});
        b.push_back({"reason", utf8(be.reason)});
        b.push_back({"removed", be.removed});
        items.emplace_back(std::move(b));
        lines += "  " + printable(be.key) + ": " + printable(be.reason) + (be.removed ? " (removed)" : kept) + "\n";
    }
    VerifiedNamespace r;
    r.json.push_back({"namespace", utf8(ns)});
    r.json.push_back({"checked", checked});
    r.json.push_back({"bad", std::move(items)});
    r.text = printable(ns) + ": checked " + plural(checked, one, many) + ", " +
             (bad.empty() ? std::string("all good") : std::to_string(bad.size()) + " bad") + "\n" + lines;
    return r;
}

/// `skc cache verify --remote`: every record of the remote tier (or of --namespace) and its package.
int cache_verify_remote(const Target&, const CacheOptions& o) {
    skc::Options opts;
    if (o.remote_url) opts.remote_cache = *o.remote_url;
    opts.remote_cache_read_only = o.remote_read_only;
    const std::optional<skc::RemoteConfig> rc = skc::resolve_remote_config(opts);
    if (!rc) throw UsageError{"--remote: no remote cache; give --remote-cache URL or set SKC_REMOTE_CACHE"};
    std::unique_ptr<skc::RemoteTier> remote;
#ifdef SKC_TOOL_WITH_REDIS
    remote = skc::RedisRemote::open(*rc);
#endif
    if (!remote)
        throw UsageError{
            "--remote: this skc was built without hiredis (rebuild it with Debian's libhiredis-dev installed)"};
    std::vector<std::string> namespaces;
    if (o.ns) namespaces.push_back(*o.ns);
    else namespaces = remote->namespaces();
    skc::Array list;
    std::uint64_t bad = 0;
    std::string text;
    for (const std::string& ns : namespaces) {
        const skc::RemoteVerifyReport v = skc::verify_remote(*remote, ns);
        bad += v.bad.size();
        VerifiedNamespace n = verified_namespace(ns, v.checked, v.bad, "remote entry", "remote entries", "");
        list.emplace_back(std::move(n.json));
        text += n.text;
    }
    if (o.json) {
        skc::Object root;
        root.push_back({"remote", utf8(remote->where())});
        root.push_back({"namespaces", std::move(list)});
        print_json(std::move(root));
    } else {
        out(printable(remote->where()) + "\n" + (namespaces.empty() ? std::string("  no entries\n") : text));
    }
    return bad == 0 ? exit_ok : exit_bad_entries;
}

int cache_verify(const Target& t, const CacheOptions& o) {
    if (o.remote) return cache_verify_remote(t, o);
    if (nothing_there(t, o)) return exit_ok;
    skc::Array list;
    std::uint64_t checked = 0, bad = 0, removed = 0;
    for (const std::string& stem : t.namespaces) {
        const std::unique_ptr<FsCache> cache = open_namespace(t, stem);
        // Each package's checksum, then the package itself: a package stored damaged is caught too.
        const skc::VerifyReport v =
            cache->verify_all([](const std::filesystem::path& p) { return skc::run_package_fault(p); });
        save_statistics(t, *cache, stem);
        checked += v.checked;
        bad += v.bad.size();
        for (const skc::BadEntry& be : v.bad) removed += be.removed ? 1 : 0;
        // An entry in use is reported but stays until its user lets it go.
        VerifiedNamespace n = verified_namespace(stem, v.checked, v.bad, "entry", "entries", " (in use, not removed)");
        if (o.json) {
            list.emplace_back(std::move(n.json));
        } else {
            out(n.text);
            std::fflush(stdout);
        }
    }
    if (o.json) {
        skc::Object root = json_head(t);
        root.push_back({"namespaces", std::move(list)});
        skc::Object total;
        total.push_back({"checked", checked});
        total.push_back({"bad", bad});
        total.push_back({"removed", removed});
        root.push_back({"total", std::move(total)});
        print_json(std::move(root));
    } else if (bad != 0) {
        out(plural(bad, "bad entry", "bad entries") + " found, " + std::to_string(removed) + " removed\n");
    }
    return bad == 0 ? exit_ok : exit_bad_entries;
}

skc::Object prune_json(const skc::PruneReport& r) {
    skc::Object o;
    o.push_back({"removed", r.removed});
    o.push_back({"removed_bytes", r.removed_bytes});
    o.push_back({"skipped_in_use", r.skipped_in_use});
    o.push_back({"entries_left", r.entries_left});
    o.push_back({"bytes_left", r.bytes_left});
    return o;
}

std::string prune_text(const skc::PruneReport& r) {
    return "removed " + plural(r.removed, "entry", "entries") + " (" + human_size(r.removed_bytes) + "), " +
           std::to_string(r.entries_left) + " left (" + human_size(r.bytes_left) + "), " +
           std::to_string(r.skipped_in_use) + " skipped because in use\n";
}

int cache_prune(const Target& t, const CacheOptions& o) {
    if (nothing_there(t, o)) return exit_ok;
    const skc::CacheLimits limits{o.max_size.value_or(0), o.max_entries.value_or(0)};
    std::optional<std::chrono::seconds> older_than;
    if (o.older_than_s) older_than = std::chrono::seconds(static_cast<std::int64_t>(*o.older_than_s));
    skc::Array list;
    skc::PruneReport total;
    for (const std::string& stem : t.namespaces) {
        const std::unique_ptr<FsCache> cache = open_namespace(t, stem);
        const skc::PruneReport r = cache->prune(limits, older_than);
        save_statistics(t, *cache, stem);
        total.removed += r.removed;
        total.removed_bytes += r.removed_bytes;
        total.skipped_in_use += r.skipped_in_use;
        total.entries_left += r.entries_left;
        total.bytes_left += r.bytes_left;
        if (o.json) {
            skc::Object n;
            n.push_back({"namespace", utf8(stem)});
            for (skc::Member& m : prune_json(r)) n.push_back(std::move(m));
            list.emplace_back(std::move(n));
        } else {
            out(printable(stem) + ": " + prune_text(r));
            std::fflush(stdout);
        }
    }
    if (o.json) {
        skc::Object root = json_head(t);
        skc::Object criteria;
        criteria.push_back({"max_bytes", o.max_size ? skc::Value(*o.max_size) : skc::Value(nullptr)});
        criteria.push_back({"max_entries", o.max_entries ? skc::Value(*o.max_entries) : skc::Value(nullptr)});
        criteria.push_back({"older_than_s", older_than ? skc::Value(older_than->count()) : skc::Value(nullptr)});
        root.push_back({"limits", std::move(criteria)});
        root.push_back({"namespaces", std::move(list)});
        root.push_back({"total", prune_json(total)});
        print_json(std::move(root));
    } else if (t.namespaces.size() > 1) {
        out("total: " + prune_text(total));
    }
    return exit_ok;
}

int cache_clear(const Target& t, const CacheOptions& o) {
    if (nothing_there(t, o)) return exit_ok;
    skc::Array list;
    std::uint64_t removed = 0, left = 0;
    for (const std::string& stem : t.namespaces) {
        const std::unique_ptr<FsCache> cache = open_namespace(t, stem);
        const std::uint64_t n = cache->clear().removed;
        save_statistics(t, *cache, stem);
        // What is left is in use (or was stored since).
        const std::uint64_t l = cache->entries().size();
        removed += n;
        left += l;
        if (o.json) {
            skc::Object j;
            j.push_back({"namespace", utf8(stem)});
            j.push_back({"removed", n});
            j.push_back({"entries_left", l});
            list.emplace_back(std::move(j));
        } else {
            out(printable(stem) + ": removed " + plural(n, "entry", "entries") + ", " + std::to_string(l) + " left\n");
            std::fflush(stdout);
        }
    }
    if (o.json) {
        skc::Object root = json_head(t);
        root.push_back({"namespaces", std::move(list)});
        skc::Object total;
        total.push_back({"removed", removed});
        total.push_back({"entries_left", left});
        root.push_back({"total", std::move(total)});
        print_json(std::move(root));
    } else if (t.namespaces.size() > 1) {
        out("total: removed " + plural(removed, "entry", "entries") + ", " + std::to_string(left) + " left\n");
    }
    return exit_ok;
}

}  // namespace

void add_cache_ls(CLI::App& cache, Action& action) {
    CacheCommand c = add_cache_command(cache, action, "ls", "every entry, least recently used first", cache_ls);
    c.app.footer("exit status: 0 done (also when there is no cache); 2 bad usage; 3 the cache could not be read");
}

void add_cache_verify(CLI::App& cache, Action& action) {
    CacheCommand c = add_cache_command(
        cache, action, "verify", "check every package in full; bad entries are removed (exit status 1)", cache_verify);
    c.app.footer(
        "exit status: 0 every entry is good; 1 bad entries were found; 2 bad usage; 3 the cache could not be read "
        "or changed");
    add_switch(c.app, "--remote", c.options.remote,
               "check the remote cache tier instead (its records and packages; bad ones are removed)");
    add_value(c.app, "--remote-cache", c.options.remote_url, "URL",
              "with --remote: the remote tier, redis://[user:password@]host[:port][/db] (default: $SKC_REMOTE_CACHE)");
    add_switch(c.app, "--remote-read-only", c.options.remote_read_only,
               "with --remote: report bad records, remove nothing");
}

void add_cache_prune(CLI::App& cache, Action& action) {
    CacheCommand c =
        add_cache_command(cache, action, "prune",
                          "remove entries over the limits (least recently used first) or unused too long", cache_prune);
    add_value(c.app, "--max-size", c.options.max_size, "SIZE",
              "keep at most SIZE bytes per namespace: 10G, 500M, 1024K, 65536")
        ->transform(size_value(false));
    add_value(c.app, "--max-entries", c.options.max_entries, "N", "keep at most N entries per namespace")
        ->check(entries_value(false));
    add_value(c.app, "--older-than", c.options.older_than_s, "DURATION",
              "remove entries unused for longer: 30d, 12h, 15m, 90s")
        ->transform(duration_value());
    c.options.check = [](const CacheOptions& o) {
        if (!o.max_size && !o.max_entries && !o.older_than_s)
            throw UsageError{
                "nothing to prune by; give at least one of --max-size SIZE, --max-entries N, --older-than DURATION"};
    };
    c.app.footer(
        "prune needs at least one of --max-size, --max-entries, --older-than; entries in use are skipped.\n\n"
        "exit status: 0 done (also when there is no cache); 2 bad usage; 3 the cache could not be read or changed");
}

void add_cache_clear(CLI::App& cache, Action& action) {
    CacheCommand c = add_cache_command(cache, action, "clear", "remove every entry that is not in use", cache_clear);
    c.app.footer(
        "exit status: 0 done (also when there is no cache); 2 bad usage; 3 the cache could not be read or changed");
}

}  // namespace skc_tool
