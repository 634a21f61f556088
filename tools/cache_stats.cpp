// skc cache stats, config and zero: the statistics and the limits of the cache. `stats` shows the
// counters of each namespace and in total, with the limits in effect; `config` shows the limits or
// stores new ones in the cache folder; `zero` resets the counters (entries stay, as `ccache -z`).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <skc/config.hpp>
#include <skc/policy/cache.hpp>
#include <skc/value.hpp>

#include "cache.hpp"
#include "cli.hpp"
#include "common.hpp"

namespace skc_tool {

namespace {

struct NamespaceStats {
    std::string name;
    skc::CacheStats stats;
    std::uint64_t entries = 0;
    std::uint64_t composites = 0;
    std::uint64_t bytes = 0;
};

skc::Object stats_json(const NamespaceStats& s) {
    skc::Object o;
    if (!s.name.empty()) o.push_back({"namespace", utf8(s.name)});
    o.push_back({"entries", s.entries});
    o.push_back({"composites", s.composites});
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
    o.push_back({"composite_hits", s.stats.composite_hits});
    o.push_back({"ops_compiled", s.stats.ops_compiled});
    o.push_back({"ops_reused", s.stats.ops_reused});
    o.push_back({"remote", skc::Object{{"hits", s.stats.remote_hits},
                                       {"misses", s.stats.remote_misses},
                                       {"uploads", s.stats.remote_uploads},
                                       {"upload_bytes", s.stats.remote_upload_bytes},
                                       {"downloads", s.stats.remote_hits},
                                       {"download_bytes", s.stats.remote_download_bytes},
                                       {"errors", s.stats.remote_errors}}});
    return o;
}

std::string stats_text(const NamespaceStats& s) {
    const auto row = [](std::string_view label, const std::string& value) {
        return "  " + pad_right(std::string(label) + ":", 21) + value + "\n";
    };
    std::string r;
    r += row("entries", std::to_string(s.entries));
    if (s.composites != 0) r += row("composite entries", std::to_string(s.composites));
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
    const skc::CacheStats& c = s.stats;
    if (c.composite_hits + c.ops_compiled + c.ops_reused != 0) {  // counted by compiles since 2026-12
        r += row("composite hits", std::to_string(c.composite_hits));
        r += row("ops compiled", std::to_string(c.ops_compiled));
        r += row("ops reused",
                 std::to_string(c.ops_reused) + " (" + percent(c.ops_reused, c.ops_reused + c.ops_compiled) + ")");
    }
    if (c.remote_hits + c.remote_misses + c.remote_uploads + c.remote_errors != 0) {
        r += row("remote hits", std::to_string(c.remote_hits));
        r += row("remote misses", std::to_string(c.remote_misses));
        r += row("remote hit rate", percent(c.remote_hits, c.remote_hits + c.remote_misses));
        r += row("uploads", std::to_string(c.remote_uploads) + " (" + human_size(c.remote_upload_bytes) + ")");
        r += row("downloads", std::to_string(c.remote_hits) + " (" + human_size(c.remote_download_bytes) + ")");
        r += row("remote errors", std::to_string(c.remote_errors));
    }
    return r;
}

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
        s.composites = cache->composites().size();
        total.stats += s.stats;
        total.entries += s.entries;
        total.composites += s.composites;
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

/// Resets the stored statistics; entries, limits and packages stay (as `ccache -z`).
int cache_zero(const Target& t, const CacheOptions& o) {
    if (nothing_there(t, o)) return exit_ok;
    skc::Array list;
    for (const std::string& stem : t.namespaces) {
        open_namespace(t, stem)->zero_stats();
        if (o.json) list.emplace_back(skc::Object{{"namespace", utf8(stem)}});
        else out(printable(stem) + ": statistics zeroed\n");
    }
    if (o.json) print_namespaces_json(t, std::move(list));
    return exit_ok;
}

}  // namespace

void add_cache_stats(CLI::App& cache, Action& action) {
    CacheCommand c = add_cache_command(cache, action, "stats",
                                       "hits, misses, entries and size of each namespace, and in total", cache_stats);
    c.app.footer("exit status: 0 done (also when there is no cache); 2 bad usage; 3 the cache could not be read");
}

void add_cache_config(CLI::App& cache, Action& action) {
    CacheCommand c = add_cache_command(
        cache, action, "config", "show the limits every process applies, or store new ones (--max-size, --max-entries)",
        cache_config);
    add_value(c.app, "--max-size", c.options.max_size, "SIZE",
              "keep at most SIZE bytes per namespace: 10G, 500M, 1024K, 65536 (0: no limit)")
        ->transform(size_value(true));
    add_value(c.app, "--max-entries", c.options.max_entries, "N", "keep at most N entries per namespace (0: no limit)")
        ->check(entries_value(true));
    c.app.footer(
        "A limit not given keeps its stored value; the cache folder is created when it does not exist yet.\n\n"
        "exit status: 0 done; 2 bad usage; 3 the cache could not be read or changed");
}

void add_cache_zero(CLI::App& cache, Action& action) {
    CacheCommand c =
        add_cache_command(cache, action, "zero", "reset the statistics to zero (entries stay)", cache_zero);
    c.app.footer("exit status: 0 done (also when there is no cache); 2 bad usage; 3 the cache could not be changed");
}

}  // namespace skc_tool
