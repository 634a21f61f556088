// skc: the command-line tool of skc.
//
//   skc compile --ops DIR --base DIR --compiler PATH --device NAME --toolchain-version VER [...]
//   skc ops inspect DIR [--blacklist SUBSTR]... [--json]
//   skc uninstall --op-library DIR [PACKAGE]
//   skc cache stats|ls|verify|prune|clear --base DIR [--namespace NAME] [--json] [prune limits]
//   skc --help | --version
//
// compile, ops and uninstall live in compile.cpp and ops.cpp; their exit statuses are their own
// (docs/cli.md). The rest of this header comment is about `skc cache`.
//
// `skc cache` inspects and maintains the package cache that compiles fill:
// `<base>/static_kernel_compile_outputs/static_kernel_cache/`, one namespace `CANN-<version>_<device>`
// per toolchain version and device. It opens each namespace exactly as skc::open_cache does, but
// never creates one: on a base without a cache it says so and changes nothing.
//
// Exit status: 0 done; 1 `verify` found bad entries; 2 bad usage (unknown command or option, a
// missing or malformed value, a base that does not exist, is not a folder or is not a safe path);
// 3 the cache could not be read or changed.
//
// Commands are rows of a table (`commands` below, and `cache_commands` for `skc cache`): a new
// command is a function and a row.
#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <sys/stat.h>

#include <skc/cache_archive.hpp>
#include <skc/config.hpp>
#include <skc/error.hpp>
#include <skc/layout.hpp>
#include <skc/log.hpp>
#include <skc/op_info_io.hpp>
#include <skc/policy/cache.hpp>
#include <skc/run_package.hpp>
#include <skc/value.hpp>

#include "commands.hpp"
#include "common.hpp"

namespace {

namespace fs = std::filesystem;
using namespace skc_tool;

/// `10G`, `500M`, `1024K`, `65536` (skc::parse_size); 0 only where `zero_ok`.
std::uint64_t parse_size(const std::string& prefix, std::string_view s, bool zero_ok) {
    const std::string bad = prefix + "bad --max-size '" + printable(s) + "': ";
    const std::string accepted =
        "expected a number of bytes with an optional suffix K, M, G or T (powers of 1024), "
        "e.g. 10G, 500M, 1024K or 65536";
    const std::optional<std::uint64_t> n = skc::parse_size(s);
    if (!n) {
        // Digits (and a suffix) that do not fit in 64 bits are a size, only too large.
        const std::string_view digits =
            !s.empty() && std::string_view("KMGTkmgt").find(s.back()) != std::string_view::npos
                ? s.substr(0, s.size() - 1)
                : s;
        const bool numeric = !digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos;
        throw UsageError{bad + (numeric ? "the size is too large; " : "") + accepted};
    }
    if (*n == 0 && !zero_ok)
        throw UsageError{bad + "the size must be at least 1 byte; to remove every entry use 'skc cache clear'"};
    return *n;
}

/// `30d`, `12h`, `15m`, `90s`.
std::chrono::seconds parse_duration(const std::string& prefix, std::string_view s) {
    const std::string bad = prefix + "bad --older-than '" + printable(s) + "': ";
    const std::string accepted = "expected a whole number followed by d, h, m or s, e.g. 30d, 12h, 15m or 90s";
    std::int64_t unit = 0;
    if (!s.empty()) {
        switch (s.back()) {
        case 'd': unit = 86400; break;
        case 'h': unit = 3600; break;
        case 'm': unit = 60; break;
        case 's': unit = 1; break;
        default: break;
        }
    }
    const std::optional<std::uint64_t> n = unit == 0 ? std::nullopt : parse_count(s.substr(0, s.size() - 1));
    if (!n) throw UsageError{bad + accepted};
    // The cache compares ages in nanoseconds: at most about 292 years fit.
    constexpr std::int64_t max_seconds = INT64_MAX / 1000000000;
    if (*n > static_cast<std::uint64_t>(max_seconds / unit))
        throw UsageError{bad + "the duration is too long; at most " + std::to_string(max_seconds / 86400) + "d"};
    return std::chrono::seconds(static_cast<std::int64_t>(*n) * unit);
}

// ---- skc cache -------------------------------------------------------------------------------------

using FsCache = skc::IndexCache<skc::FilesystemStorage, skc::FileLock>;

struct CacheOptions {
    std::string command;  // stats, ls, verify, prune, clear
    std::optional<std::string> base;
    std::optional<std::string> cache_dir;  // --cache-dir, else $SKC_CACHE_DIR
    bool cache_dir_from_env = false;
    std::optional<std::string> ns;
    bool json = false;
    std::optional<std::uint64_t> max_size;
    std::optional<std::uint64_t> max_entries;
    std::optional<std::chrono::seconds> older_than;
    std::optional<std::string> output;  // export: -o FILE
    std::optional<std::string> file;    // import: the export file
    ParsedArgs raw;                     // every option as given (explain reads the key's options here)
};

/// The cache a command works on, resolved and checked before anything is read or changed.
struct Target {
    std::string shown;  // the cache folder as the user named it (--base joined with the layout)
    fs::path dir;       // the same, absolute
    bool exists = false;
    std::vector<std::string> namespaces;  // the ones to work on, in name order
    std::vector<std::string> all;         // every namespace present
    std::string prefix;                   // "skc cache <command>: "

    [[nodiscard]] std::string shown_path(std::string_view rest) const { return shown + "/" + std::string(rest); }
};

/// Opens a namespace as skc::open_cache does, without creating anything (`mode` read-only: not even
/// a lock file). Messages go nowhere: the commands report what they find themselves.
std::unique_ptr<FsCache> open_namespace(const Target& t, const std::string& stem,
                                        skc::CacheMode mode = skc::CacheMode::read_write) {
    skc::CacheConfig config;
    config.log = skc::null_log();
    config.mode = mode;
    const skc::LockAccess access =
        mode == skc::CacheMode::read_only ? skc::LockAccess::read_only : skc::LockAccess::read_write;
    return std::make_unique<FsCache>(skc::FilesystemStorage(t.dir / stem), skc::FileLock(t.dir, access),
                                     std::move(config), skc::CacheLockNames{stem + "/keys/", stem});
}

/// Saves what the command counted (evictions, corrupt entries) into the namespace's statistics; a
/// failure there is worth a warning, not the result.
void save_statistics(const Target& t, FsCache& cache, const std::string& stem) {
    try {
        cache.flush();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%swarning: the statistics of %s were not saved: %s\n", t.prefix.c_str(),
                     printable(stem).c_str(), printable(e.what()).c_str());
    }
}

skc::Object json_head(const Target& t) {
    skc::Object o;
    o.push_back({"cache_dir", utf8(t.shown)});
    o.push_back({"exists", t.exists});
    return o;
}

/// When there is nothing to work on: true after saying so (the command then exits with 0).
bool nothing_there(const Target& t, const CacheOptions& o) {
    if (!t.namespaces.empty()) return false;
    if (o.json) {
        skc::Object j = json_head(t);
        j.push_back({"namespaces", skc::Array{}});
        print_json(std::move(j));
    } else if (!t.exists) {
        out("no cache at " + printable(t.shown) + "\n");
    } else if (o.ns) {
        std::string names;
        for (const std::string& n : t.all) names += (names.empty() ? "" : ", ") + printable(n);
        out("no cache namespace " + printable(*o.ns) + " in " + printable(t.shown) + "; " +
            (names.empty() ? std::string("it holds none") : "it holds " + names) + "\n");
    } else {
        out("no cache namespaces in " + printable(t.shown) + "\n");
    }
    return true;
}

// stats ------------------------------------------------------------------------------------------------

struct NamespaceStats {
    std::string name;
    skc::CacheStats stats;
    std::uint64_t entries = 0;
    std::uint64_t bytes = 0;
};

skc::Object stats_json(const NamespaceStats& s) {
    skc::Object o;
    if (!s.name.empty()) o.push_back({"namespace", utf8(s.name)});
    o.push_back({"entries", s.entries});
    o.push_back({"bytes", s.bytes});
    o.push_back({"hits", s.stats.hits});
    o.push_back({"misses", s.stats.misses});
    const std::uint64_t lookups = s.stats.hits + s.stats.misses;
    o.push_back({"hit_rate", lookups == 0
                                 ? skc::Value(nullptr)
                                 : skc::Value(static_cast<double>(s.stats.hits) / static_cast<double>(lookups))});
    o.push_back({"corrupt", s.stats.corrupt});
    o.push_back({"evictions", s.stats.evictions});
    o.push_back({"compiles", s.stats.compiles});
    o.push_back({"waits", s.stats.waits});
    o.push_back({"lock_wait_ns", s.stats.lock_wait_ns});
    o.push_back({"compile_time_saved_ns", s.stats.compile_time_saved_ns});
    return o;
}

std::string stats_text(const NamespaceStats& s) {
    const auto row = [](std::string_view label, const std::string& value) {
        return "  " + pad_right(std::string(label) + ":", 21) + value + "\n";
    };
    std::string r;
    r += row("entries", std::to_string(s.entries));
    r += row("size", human_size(s.bytes) + (s.bytes < 1024 ? "" : " (" + std::to_string(s.bytes) + " bytes)"));
    r += row("hits", std::to_string(s.stats.hits));
    r += row("misses", std::to_string(s.stats.misses));
    r += row("hit rate", percent(s.stats.hits, s.stats.hits + s.stats.misses));
    r += row("corrupt entries", std::to_string(s.stats.corrupt));
    r += row("evictions", std::to_string(s.stats.evictions));
    r += row("compiles", std::to_string(s.stats.compiles));
    r += row("waits", std::to_string(s.stats.waits));
    r += row("lock wait time", human_duration(s.stats.lock_wait_ns));
    r += row("compile time saved", human_duration(s.stats.compile_time_saved_ns));
    return r;
}

// config ---------------------------------------------------------------------------------------------------

std::string_view source_name(skc::LimitSource s) {
    switch (s) {
    case skc::LimitSource::caller: return "given";
    case skc::LimitSource::environment: return "SKC_CACHE_MAX_SIZE";
    case skc::LimitSource::cache_folder: return "skc cache config";
    case skc::LimitSource::default_value: return "default";
    }
    return {};
}

/// The fixed identifier of a limit's source in JSON.
std::string source_id(skc::LimitSource s) {
    switch (s) {
    case skc::LimitSource::caller: return "caller";
    case skc::LimitSource::environment: return "SKC_CACHE_MAX_SIZE";
    case skc::LimitSource::cache_folder: return "config";
    case skc::LimitSource::default_value: return "default";
    }
    return {};
}

skc::Object limits_json(const skc::EffectiveLimits& e) {
    skc::Object o;
    o.push_back({"max_bytes", e.limits.max_bytes});
    o.push_back({"max_bytes_from", source_id(e.size_from)});
    o.push_back({"max_entries", e.limits.max_entries});
    o.push_back({"max_entries_from", source_id(e.entries_from)});
    return o;
}

std::string limits_text(const skc::EffectiveLimits& e) {
    const std::string size = e.limits.max_bytes == 0 ? "no size limit" : "at most " + human_size(e.limits.max_bytes);
    const std::string entries =
        e.limits.max_entries == 0 ? "no entry limit" : "at most " + plural(e.limits.max_entries, "entry", "entries");
    return "limits: " + size + " (" + std::string(source_name(e.size_from)) + "), " + entries + " (" +
           std::string(source_name(e.entries_from)) + "), in each namespace; applied after each compile\n";
}

/// Shows the limits every process applies to this cache folder, or stores new ones there.
int cache_config(const Target& t, const CacheOptions& o) {
    if (o.max_size || o.max_entries) {
        skc::detail::make_dir(t.dir);
        skc::write_cache_limits(t.dir, skc::StoredLimits{o.max_size, o.max_entries});
    }
    const skc::EffectiveLimits e = skc::effective_cache_limits({}, t.dir);
    if (o.json) {
        skc::Object root = json_head(t);
        root.push_back({"limits", limits_json(e)});
        print_json(std::move(root));
    } else {
        out("cache directory: " + printable(t.shown) + "\n" + limits_text(e));
    }
    return exit_ok;
}

int cache_stats(const Target& t, const CacheOptions& o) {
    if (nothing_there(t, o)) return exit_ok;
    std::vector<NamespaceStats> all;
    NamespaceStats total;
    for (const std::string& stem : t.namespaces) {
        // Read-only: `stats` and the statistics log not folded into it yet, without writing anything.
        const std::unique_ptr<FsCache> cache = open_namespace(t, stem, skc::CacheMode::read_only);
        NamespaceStats s;
        s.name = stem;
        s.stats = cache->persisted_stats();
        for (const skc::CacheEntry& e : cache->entries()) {
            ++s.entries;
            s.bytes += e.size;
        }
        total.stats += s.stats;
        total.entries += s.entries;
        total.bytes += s.bytes;
        all.push_back(std::move(s));
    }
    if (o.json) {
        skc::Object root = json_head(t);
        root.push_back({"limits", limits_json(skc::effective_cache_limits({}, t.dir))});
        skc::Array list;
        for (const NamespaceStats& s : all) list.emplace_back(stats_json(s));
        root.push_back({"namespaces", std::move(list)});
        root.push_back({"total", stats_json(total)});
        print_json(std::move(root));
        return exit_ok;
    }
    std::string r =
        "cache directory: " + printable(t.shown) + "\n" + limits_text(skc::effective_cache_limits({}, t.dir));
    for (const NamespaceStats& s : all) r += "\n" + printable(s.name) + "\n" + stats_text(s);
    if (all.size() > 1) r += "\ntotal (" + std::to_string(all.size()) + " namespaces)\n" + stats_text(total);
    out(r);
    return exit_ok;
}

// ls -----------------------------------------------------------------------------------------------------

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

int cache_ls(const Target& t, const CacheOptions& o) {
    if (nothing_there(t, o)) return exit_ok;
    skc::Array list;
    std::string r;
    for (const std::string& stem : t.namespaces) {
        std::vector<skc::CacheEntry> entries = open_namespace(t, stem)->entries();
        // Least recently used first, as the cache gives them; entries used at the same instant by key.
        std::sort(entries.begin(), entries.end(), [](const skc::CacheEntry& a, const skc::CacheEntry& b) {
            return std::tie(a.last_used_ns, a.key) < std::tie(b.last_used_ns, b.key);
        });
        if (o.json) {
            skc::Array items;
            for (const skc::CacheEntry& e : entries) items.emplace_back(entry_json(t, stem, e));
            skc::Object n;
            n.push_back({"namespace", utf8(stem)});
            n.push_back({"entries", std::move(items)});
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
    }
    if (o.json) {
        skc::Object root = json_head(t);
        root.push_back({"namespaces", std::move(list)});
        print_json(std::move(root));
    } else {
        out(r);
    }
    return exit_ok;
}

// verify -------------------------------------------------------------------------------------------------

int cache_verify(const Target& t, const CacheOptions& o) {
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
        skc::Array items;
        std::string lines;
        for (const skc::BadEntry& be : v.bad) {
            const std::string& key = be.key;
            const std::string& reason = be.reason;
            // An entry in use is reported but stays until its user lets it go.
            const bool gone = be.removed;
            removed += gone ? 1 : 0;
            skc::Object b;
            b.push_back({"key", utf8(key)});
            b.push_back({"reason", utf8(reason)});
            b.push_back({"removed", gone});
            items.emplace_back(std::move(b));
            lines += "  " + printable(key) + ": " + printable(reason) +
                     (gone ? " (removed)" : " (in use, not removed)") + "\n";
        }
        if (o.json) {
            skc::Object n;
            n.push_back({"namespace", utf8(stem)});
            n.push_back({"checked", v.checked});
            n.push_back({"bad", std::move(items)});
            list.emplace_back(std::move(n));
        } else {
            out(printable(stem) + ": checked " + plural(v.checked, "entry", "entries") + ", " +
                (v.bad.empty() ? std::string("all good") : std::to_string(v.bad.size()) + " bad") + "\n" + lines);
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

// prune and clear ----------------------------------------------------------------------------------------

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
    skc::Array list;
    skc::PruneReport total;
    for (const std::string& stem : t.namespaces) {
        const std::unique_ptr<FsCache> cache = open_namespace(t, stem);
        const skc::PruneReport r = cache->prune(limits, o.older_than);
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
        criteria.push_back({"older_than_s", o.older_than ? skc::Value(o.older_than->count()) : skc::Value(nullptr)});
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

/// Resets the stored statistics; entries, limits and packages stay (as `ccache -z`).
int cache_zero(const Target& t, const CacheOptions& o) {
    if (nothing_there(t, o)) return exit_ok;
    skc::Array list;
    for (const std::string& stem : t.namespaces) {
        open_namespace(t, stem)->zero_stats();
        if (o.json) list.emplace_back(skc::Object{{"namespace", utf8(stem)}});
        else out(printable(stem) + ": statistics zeroed\n");
    }
    if (o.json) {
        skc::Object root = json_head(t);
        root.push_back({"namespaces", std::move(list)});
        print_json(std::move(root));
    }
    return exit_ok;
}

/// The key of --ops and the nearest entry, with what differs (compile.cpp makes the key as skc compile does).
int cache_explain(const Target& t, const CacheOptions& o) {
    return explain_cache_miss(t.prefix, o.raw, t.dir, t.shown, o.ns, o.json);
}

/// Writes entries and packages to one file (-o), checked on the way out.
int cache_export(const Target& t, const CacheOptions& o) {
    std::vector<std::string> keys = o.raw.all("--key");
    for (const std::string& k : keys)
        if (skc::Digest d; !skc::detail::parse_hex_digest(k, d))
            throw UsageError{t.prefix + "bad --key '" + printable(k) +
                             "': expected 32 lowercase hex digits (skc cache ls lists the keys)"};
    const skc::ExportReport r = skc::export_cache(t.dir, *o.output, o.ns.value_or(""), keys);
    if (o.json) {
        skc::Object root = json_head(t);
        root.push_back({"file", utf8(*o.output)});
        root.push_back({"entries", r.entries});
        root.push_back({"package_bytes", r.package_bytes});
        skc::Array skipped;
        for (const std::string& k : r.skipped) skipped.emplace_back(k);
        root.push_back({"skipped", std::move(skipped)});
        print_json(std::move(root));
    } else {
        out("exported " + plural(r.entries, "entry", "entries") + " (" + human_size(r.package_bytes) +
            " of packages) to " + printable(*o.output) + "\n");
        for (const std::string& k : r.skipped)
            out("skipped " + k + ": the entry or its package is bad (run skc cache verify)\n");
    }
    return exit_ok;
}

/// Checks a whole export file, then adds its entries (all or none).
int cache_import(const Target& t, const CacheOptions& o) {
    skc::CacheConfig config;
    config.log = skc::null_log();
    const skc::ImportReport r = skc::import_cache(t.dir, *o.file, config);
    if (o.json) {
        skc::Object root = json_head(t);
        root.push_back({"file", utf8(*o.file)});
        root.push_back({"added", r.added});
        root.push_back({"present", r.present});
        root.push_back({"package_bytes", r.package_bytes});
        print_json(std::move(root));
    } else {
        out("imported " + plural(r.added, "entry", "entries") + " (" + human_size(r.package_bytes) +
            " of packages) into " + printable(t.shown) +
            (r.present != 0 ? "; " + std::to_string(r.present) + " already there" : std::string()) + "\n");
    }
    return exit_ok;
}

// the cache command's arguments ----------------------------------------------------------------------------

struct CacheCommand {
    std::string_view name;
    std::string_view summary;
    int (*run)(const Target&, const CacheOptions&);
};

constexpr std::array cache_commands{
    CacheCommand{"stats", "hits, misses, entries and size of each namespace, and in total", cache_stats},
    CacheCommand{"ls", "every entry, least recently used first", cache_ls},
    CacheCommand{"verify", "check every package in full; bad entries are removed (exit status 1)", cache_verify},
    CacheCommand{"prune", "remove entries over the limits (least recently used first) or unused too long", cache_prune},
    CacheCommand{"clear", "remove every entry that is not in use", cache_clear},
    CacheCommand{"config", "show the limits every process applies, or store new ones (--max-size, --max-entries)",
                 cache_config},
    CacheCommand{"zero", "reset the statistics to zero (entries stay)", cache_zero},
    CacheCommand{"explain", "why the ops in --ops miss: the nearest entry and what differs", cache_explain},
    CacheCommand{"export", "write entries and their packages to one file (-o FILE)", cache_export},
    CacheCommand{"import", "check an export file whole, then add its entries", cache_import},
};

struct CacheOptionSpec {
    std::string_view name;
    std::string_view value;  // empty: a flag
    std::string_view help;
    std::string_view commands = {};  // the commands it applies to, space-separated; empty: every command
    bool repeatable = false;
};

constexpr std::array cache_option_specs{
    CacheOptionSpec{"--base", "DIR", "the folder that holds static_kernel_compile_outputs"},
    CacheOptionSpec{"--cache-dir", "DIR",
                    "the cache folder itself, shared by many bases (default: $SKC_CACHE_DIR, else the base's)"},
    CacheOptionSpec{"--namespace", "NAME", "only the namespace NAME, CANN-<version>_<device> (default: all)"},
    CacheOptionSpec{"--json", "", "print one JSON document"},
    CacheOptionSpec{"--max-size", "SIZE", "keep at most SIZE bytes per namespace: 10G, 500M, 1024K, 65536",
                    "prune config"},
    CacheOptionSpec{"--max-entries", "N", "keep at most N entries per namespace", "prune config"},
    CacheOptionSpec{"--older-than", "DURATION", "remove entries unused for longer: 30d, 12h, 15m, 90s", "prune"},
    CacheOptionSpec{"--ops", "DIR", "the op info files whose key to explain (as skc compile --ops)", "explain"},
    CacheOptionSpec{"--compiler", "PATH", "the kernel compiler (its fingerprint is in the key)", "explain"},
    CacheOptionSpec{"--device", "NAME", "the device name", "explain"},
    CacheOptionSpec{"--toolchain-version", "VER", "the toolchain version", "explain"},
    CacheOptionSpec{"--compiler-arg", "ARG", "a compiler argument in the key (repeatable)", "explain", true},
    CacheOptionSpec{"--deterministic", "", "the deterministic flag in the key", "explain"},
    CacheOptionSpec{"--compiler-check", "MODE", "content, mtime, none, string:TEXT or command:CMD", "explain"},
    CacheOptionSpec{"--blacklist", "SUBSTR", "leave out op info files whose name contains SUBSTR (repeatable)",
                    "explain", true},
    CacheOptionSpec{"--key", "KEY", "only the entry of KEY (repeatable; default: every entry)", "export", true},
    CacheOptionSpec{"--output", "FILE", "the export file to write (also -o FILE)", "export"},
};

std::string cache_command_names() {
    std::string r;
    for (const CacheCommand& c : cache_commands) r += (r.empty() ? "" : ", ") + std::string(c.name);
    return r;
}

std::string cache_usage() {
    std::string r =
        "usage: skc cache <command> (--base DIR | --cache-dir DIR) [--namespace NAME] [--json]\n"
        "       skc cache prune (--base DIR | --cache-dir DIR) [--max-size SIZE] [--max-entries N]\n"
        "                       [--older-than DURATION] [--namespace NAME] [--json]\n"
        "\n"
        "The cache is --cache-dir, else $SKC_CACHE_DIR, else <DIR>/static_kernel_compile_outputs/static_kernel_cache,\n"
        "one namespace CANN-<version>_<device> per toolchain version and device.\n"
        "\ncommands:\n";
    for (const CacheCommand& c : cache_commands)
        r += "  " + pad_right(std::string(c.name), 11) + std::string(c.summary) + "\n";
    r += "\noptions:\n";
    for (const CacheOptionSpec& s : cache_option_specs) {
        std::string applies(s.commands);
        std::replace(applies.begin(), applies.end(), ' ', ',');
        for (std::size_t at = 0; (at = applies.find(',', at)) != std::string::npos; at += 2)
            applies.insert(at + 1, " ");
        r += "  " + pad_right(std::string(s.name) + (s.value.empty() ? "" : " " + std::string(s.value)), 23) +
             (applies.empty() ? "" : applies + ": ") + std::string(s.help) + "\n";
    }
    r += "\nprune needs at least one of --max-size, --max-entries, --older-than.\n"
         "exit status: 0 done, 1 verify found bad entries, 2 bad usage, 3 the cache could not be read or changed\n";
    return r;
}

/// Whether option `s` applies to `command` (every option before a command is known).
bool applies_to(const CacheOptionSpec& s, std::string_view command) {
    if (s.commands.empty() || command.empty()) return true;
    const std::vector<std::string_view> names = skc::detail::split(s.commands, ' ');
    return std::find(names.begin(), names.end(), command) != names.end();
}

/// `'skc cache prune' and 'skc cache config'`.
std::string command_list(std::string_view commands) {
    const std::vector<std::string_view> names = skc::detail::split(commands, ' ');
    std::string r;
    for (std::size_t i = 0; i < names.size(); ++i)
        r += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + ("'skc cache " + std::string(names[i]) + "'");
    return r;
}

std::string accepted_options(std::string_view command) {
    std::string r;
    for (const CacheOptionSpec& s : cache_option_specs) {
        if (!applies_to(s, command)) continue;
        r += (r.empty() ? "" : ", ") + std::string(s.name) + (s.value.empty() ? "" : " " + std::string(s.value));
    }
    return r;
}

/// Parses `skc cache ...`: the command and options in any order, `--opt VALUE` or `--opt=VALUE`.
/// Returns nullopt after printing the usage for --help.
std::optional<CacheOptions> parse_cache_args(Args args) {
    CacheOptions o;
    std::vector<std::pair<const CacheOptionSpec*, std::string>> given;  // option, value in the order given
    const auto prefix = [&] { return "skc cache" + (o.command.empty() ? std::string() : " " + o.command) + ": "; };
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string_view a = args[i];
        if (a == "--help" || a == "-h") {
            out(cache_usage());
            return std::nullopt;
        }
        if (a.size() < 2 || a[0] != '-') {
            if (o.command == "import" && !o.file) {  // import's one argument: the export file
                o.file = std::string(a);
                continue;
            }
            if (!o.command.empty())
                throw UsageError{prefix() + "unexpected argument '" + printable(a) +
                                 "'; give one command, then options (see skc cache --help)"};
            const auto c = std::find_if(cache_commands.begin(), cache_commands.end(),
                                        [&](const CacheCommand& k) { return k.name == a; });
            if (c == cache_commands.end())
                throw UsageError{"skc cache: unknown command '" + printable(a) +
                                 "'; commands: " + cache_command_names() + " (see skc cache --help)"};
            o.command = std::string(a);
            continue;
        }
        const std::size_t eq = a.find('=');
        const std::string_view name = a == "-o" ? std::string_view("--output") : a.substr(0, eq);
        const auto spec = std::find_if(cache_option_specs.begin(), cache_option_specs.end(),
                                       [&](const CacheOptionSpec& s) { return s.name == name; });
        if (spec == cache_option_specs.end())
            throw UsageError{prefix() + "unknown option '" + printable(name) +
                             "'; options: " + accepted_options(o.command)};
        std::string value;
        if (spec->value.empty()) {
            if (eq != std::string_view::npos)
                throw UsageError{prefix() + "option " + std::string(name) + " takes no value"};
        } else if (eq != std::string_view::npos) {
            value = std::string(a.substr(eq + 1));
        } else if (i + 1 < args.size()) {
            value = std::string(args[++i]);
        } else {
            throw UsageError{prefix() + "option " + std::string(name) + " needs a value: " + std::string(spec->value) +
                             ", " + std::string(spec->help)};
        }
        if (!spec->repeatable &&
            std::any_of(given.begin(), given.end(), [&](const auto& g) { return g.first == &*spec; }))
            throw UsageError{prefix() + "option " + std::string(name) + " is given twice; give it once"};
        given.emplace_back(&*spec, std::move(value));
    }
    if (o.command.empty())
        throw UsageError{"skc cache: no command given; commands: " + cache_command_names() + " (see skc cache --help)"};
    const std::string p = prefix();
    for (auto& [spec, value] : given) {
        const std::string_view name = spec->name;
        if (!applies_to(*spec, o.command))
            throw UsageError{p + "option " + std::string(name) + " applies only to " + command_list(spec->commands) +
                             "; options: " + accepted_options(o.command)};
        o.raw.values[std::string(name)].push_back(value);
        if (name == "--base") o.base = std::move(value);
        else if (name == "--cache-dir") o.cache_dir = std::move(value);
        else if (name == "--namespace") o.ns = std::move(value);
        else if (name == "--json") o.json = true;
        else if (name == "--output") o.output = std::move(value);
        else if (name == "--max-size") o.max_size = parse_size(p, value, o.command == "config");
        else if (name == "--older-than") o.older_than = parse_duration(p, value);
        else if (name == "--max-entries") {
            const std::optional<std::uint64_t> n = parse_count(value);
            if (!n || (*n == 0 && o.command != "config"))
                throw UsageError{p + "bad --max-entries '" + printable(value) +
                                 "': expected a whole number of entries, at least 1, e.g. 1000 (to remove every entry "
                                 "use 'skc cache clear')"};
            o.max_entries = n;
        }
    }
    if (!o.cache_dir)
        if (const char* env = std::getenv("SKC_CACHE_DIR"); env != nullptr && *env != '\0') {
            o.cache_dir = env;
            o.cache_dir_from_env = true;
        }
    if (!o.base && !o.cache_dir)
        throw UsageError{p +
                         "--base DIR is required: the folder that holds static_kernel_compile_outputs (or --cache-dir "
                         "DIR, or SKC_CACHE_DIR, for a cache folder of its own)"};
    if (o.ns && (o.ns->size() <= 5 || o.ns->compare(0, 5, "CANN-") != 0 || o.ns->find('/') != std::string::npos ||
                 o.ns->find('\0') != std::string::npos))
        throw UsageError{
            p + "bad --namespace '" + printable(*o.ns) +
            "': expected a namespace name CANN-<version>_<device>, without '/' (skc cache stats lists them)"};
    if (o.command == "explain")
        for (const char* required : {"--ops", "--compiler", "--device", "--toolchain-version"})
            if (!o.raw.has(required))
                throw UsageError{p + "missing " + std::string(required) +
                                 "; explain takes the key's options as skc compile does"};
    if (o.command == "export" && !o.output) throw UsageError{p + "missing -o FILE: the export file to write"};
    if (o.command == "import" && !o.file)
        throw UsageError{p + "missing the export file: skc cache import --base DIR FILE"};
    if (o.command == "prune" && !o.max_size && !o.max_entries && !o.older_than)
        throw UsageError{p +
                         "nothing to prune by; give at least one of --max-size SIZE, --max-entries N, "
                         "--older-than DURATION"};
    return o;
}

/// Checks the base and every path below it that the command may use. Path problems are bad usage
/// (exit status 2), before anything is read or changed.
Target resolve(const CacheOptions& o) {
    Target t;
    t.prefix = "skc cache " + o.command + ": ";
    // The folder given: the cache folder itself (--cache-dir or SKC_CACHE_DIR), else the base.
    const bool own = o.cache_dir.has_value();
    const std::string& given = own ? *o.cache_dir : *o.base;
    const std::string flag = own ? (o.cache_dir_from_env ? "SKC_CACHE_DIR" : "--cache-dir") : "--base";
    const std::string hint = own ? "give the cache folder" : "give the folder that holds static_kernel_compile_outputs";
    const auto path_error = [&](const skc::Error& e) {
        return UsageError{t.prefix + flag + " '" + printable(given) + "': " + printable(e.message())};
    };
    if (given.empty()) throw UsageError{t.prefix + flag + " is empty; " + hint};
    fs::path abs;
    try {
        abs = skc::check_path_safety(given, flag);
    } catch (const skc::Error& e) {
        throw path_error(e);
    }
    if (own) {  // a cache folder that does not exist is an empty cache, as below
        t.dir = fs::absolute(abs);
        t.shown = given;
    } else {
        struct stat st {};
        if (::stat(abs.c_str(), &st) != 0) {
            const int err = errno;
            throw UsageError{t.prefix + "--base '" + printable(given) + "': " +
                             (err == ENOENT ? std::string("no such directory")
                                            : std::string("cannot access: ") + std::strerror(err)) +
                             "; " + hint};
        }
        if (!S_ISDIR(st.st_mode))
            throw UsageError{t.prefix + "--base '" + printable(given) + "': not a directory; " + hint};
        try {
            skc::check_access(abs, skc::Access::read, "--base");
        } catch (const skc::Error& e) {
            throw path_error(e);
        }
        t.dir = skc::Layout(abs).cache_dir();
        t.shown = (fs::path(given) / "static_kernel_compile_outputs" / "static_kernel_cache").string();
    }
    // Every path below the base that the cache uses: no symbolic link anywhere on the way.
    const auto check = [&](const fs::path& p) {
        try {
            skc::check_path_safety(p);
        } catch (const skc::Error& e) {
            throw UsageError{t.prefix + printable(e.what())};
        }
    };
    check(t.dir);
    struct stat cs {};
    if (::lstat(t.dir.c_str(), &cs) != 0) {
        if (errno == ENOENT) return t;  // no cache: nothing to do
        throw skc::Error(skc::Errc::io_error, std::string("cannot inspect: ") + std::strerror(errno),
                         skc::ErrorContext{t.shown, {}, {}});
    }
    if (!S_ISDIR(cs.st_mode))
        throw UsageError{t.prefix + printable(t.shown) + ": not a directory; the cache folder is expected there"};
    t.exists = true;

    // The namespaces: folders CANN-* with their manifest CANN-*.json beside them, or an entries folder.
    std::error_code ec;
    for (fs::directory_iterator it(t.dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.compare(0, 5, "CANN-") != 0 || name.size() <= 5) continue;
        if (name.ends_with(".json") || name.ends_with(".lock")) continue;
        check(t.dir / name);
        struct stat ns {};
        if (::lstat((t.dir / name).c_str(), &ns) != 0 || !S_ISDIR(ns.st_mode)) continue;
        struct stat m {};
        const bool manifest = ::lstat((t.dir / (name + ".json")).c_str(), &m) == 0 && S_ISREG(m.st_mode);
        struct stat en {};
        const bool entries = ::lstat((t.dir / name / "entries").c_str(), &en) == 0;
        if (manifest || entries) t.all.push_back(name);
    }
    if (ec)
        throw skc::Error(skc::Errc::io_error, "cannot list the cache folder: " + ec.message(),
                         skc::ErrorContext{t.shown, {}, {}});
    std::sort(t.all.begin(), t.all.end());
    if (o.ns) {
        if (std::find(t.all.begin(), t.all.end(), *o.ns) != t.all.end()) t.namespaces = {*o.ns};
        else t.namespaces = {};
    } else {
        t.namespaces = t.all;
    }
    for (const std::string& stem : t.namespaces)
        for (const char* sub : {"entries", "packages", "keys", "stats"}) check(t.dir / stem / sub);
    return t;
}

int run_cache(Args args) {
    const std::optional<CacheOptions> o = parse_cache_args(args);
    if (!o) return exit_ok;
    const std::string prefix = "skc cache " + o->command + ": ";
    const auto c = std::find_if(cache_commands.begin(), cache_commands.end(),
                                [&](const CacheCommand& k) { return k.name == o->command; });
    try {
        return c->run(resolve(*o), *o);
    } catch (const skc::Error& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "%s%s\n", prefix.c_str(), printable(e.what()).c_str());
        // A bad export file or op info file is bad input; anything else: the cache could not be used.
        if (e.code() == skc::Errc::corrupt) return exit_bad_entries;
        const bool bad_input = e.code() == skc::Errc::invalid_op_info || e.code() == skc::Errc::invalid_json ||
                               e.code() == skc::Errc::invalid_argument || e.code() == skc::Errc::limit_exceeded;
        return bad_input ? exit_usage : exit_failed;
    } catch (const std::exception& e) {  // not a UsageError: the cache could not be read or changed
        std::fflush(stdout);
        std::fprintf(stderr, "%s%s\n", prefix.c_str(), printable(e.what()).c_str());
        return exit_failed;
    }
}

// ---- skc ---------------------------------------------------------------------------------------------

struct Command {
    std::string_view name;
    std::string_view summary;
    int (*run)(Args);
    std::string (*usage)();
};

constexpr std::array commands{
    Command{"compile", "compile a folder of op info files into a run package (or find it in the cache)", run_compile,
            compile_usage},
    Command{"ops", "inspect a folder of op info files: what it holds and what a compile would select", run_ops,
            ops_usage},
    Command{"uninstall", "remove packages that 'skc compile --op-library' installed", run_uninstall, uninstall_usage},
    Command{"cache", "inspect and maintain the package cache: stats, ls, verify, prune, clear", run_cache, cache_usage},
};

std::string command_names() {
    std::string r;
    for (const Command& c : commands) r += (r.empty() ? "" : ", ") + std::string(c.name);
    return r;
}

std::string usage() {
    std::string r = "usage: skc <command> [<args>]\n\ncommands:\n";
    for (const Command& c : commands) r += "  " + pad_right(std::string(c.name), 11) + std::string(c.summary) + "\n";
    r += "\nskc <command> --help shows a command's usage; skc --version prints the version.\n";
    return r;
}

const Command* find_command(std::string_view name) {
    const auto c = std::find_if(commands.begin(), commands.end(), [&](const Command& k) { return k.name == name; });
    return c == commands.end() ? nullptr : &*c;
}

int run(Args args) {
    if (args.empty()) throw UsageError{"skc: no command given; commands: " + command_names() + " (see skc --help)"};
    const std::string_view first = args.front();
    if (first == "--help" || first == "-h" || first == "help") {
        if (first == "help" && args.size() > 1) {
            const Command* c = find_command(args[1]);
            if (c == nullptr)
                throw UsageError{"skc: unknown command '" + printable(args[1]) + "'; commands: " + command_names() +
                                 " (see skc --help)"};
            out(c->usage());
        } else {
            out(usage());
        }
        return exit_ok;
    }
    if (first == "--version") {
        out("skc " SKC_VERSION_STRING "\n");
        return exit_ok;
    }
    if (!first.empty() && first[0] == '-')
        throw UsageError{"skc: unknown option '" + printable(first) + "'; options: --help, --version (see skc --help)"};
    const Command* c = find_command(first);
    if (c == nullptr)
        throw UsageError{"skc: unknown command '" + printable(first) + "'; commands: " + command_names() +
                         " (see skc --help)"};
    return c->run(args.subspan(1));
}

}  // namespace

int main(int argc, char** argv) {
    const std::vector<std::string_view> args(argv + (argc > 0 ? 1 : 0), argv + argc);
    try {
        return run(args);
    } catch (const UsageError& e) {
        std::fprintf(stderr, "%s\n", e.message.c_str());
        return exit_usage;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "skc: %s\n", printable(e.what()).c_str());
        return exit_failed;
    }
}
