// skc cache export and import: entries with their packages moved between caches in one file.
// `export` writes every entry (or those of --namespace, or the --key keys) to -o FILE, checking each
// package on the way out; `import` checks a whole export file before it adds anything.
#include <memory>
#include <string>
#include <vector>

#include <skc/cache_archive.hpp>
#include <skc/log.hpp>
#include <skc/value.hpp>

#include "cache.hpp"
#include "cli.hpp"
#include "common.hpp"

namespace skc_tool {

namespace {

/// Writes entries and packages to one file (-o), checked on the way out.
int cache_export(const Target& t, const CacheOptions& o) {
    const skc::ExportReport r = skc::export_cache(t.dir, *o.output, o.ns.value_or(""), o.keys);
    if (o.json) {
        skc::Object root = json_head(t);
        root.push_back({"file", utf8(*o.output)});
        root.push_back({"entries", r.entries});
        root.push_back({"composites", r.composites});
        root.push_back({"package_bytes", r.package_bytes});
        skc::Array skipped;
        for (const std::string& k : r.skipped) skipped.emplace_back(k);
        root.push_back({"skipped", std::move(skipped)});
        print_json(std::move(root));
    } else {
        out("exported " + plural(r.entries, "entry", "entries") + " (" + human_size(r.package_bytes) + " of packages)" +
            (r.composites != 0 ? " and " + plural(r.composites, "composite entry", "composite entries") : "") + " to " +
            printable(*o.output) + "\n");
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
        root.push_back({"composites_added", r.composites_added});
        root.push_back({"present", r.present});
        root.push_back({"package_bytes", r.package_bytes});
        print_json(std::move(root));
    } else {
        out("imported " + plural(r.added, "entry", "entries") + " (" + human_size(r.package_bytes) + " of packages)" +
            (r.composites_added != 0 ? " and " + plural(r.composites_added, "composite entry", "composite entries")
                                     : "") +
            " into " + printable(t.shown) +
            (r.present != 0 ? "; " + std::to_string(r.present) + " already there" : std::string()) + "\n");
    }
    return exit_ok;
}
}  // namespace

void add_cache_export(CLI::App& cache, Action& action) {
    CacheCommand c = add_cache_command(cache, action, "export",
                                       "write entries and their packages to one file (-o FILE)", cache_export);
    add_value(c.app, "-o,--output", c.options.output, "FILE", "the export file to write")->required();
    add_values(c.app, "--key", c.options.keys, "KEY", "only the entry of KEY (default: every entry)")
        ->check(validator([](std::string& s) {
            skc::Digest d;
            return skc::detail::parse_hex_digest(s, d)
                       ? std::string()
                       : bad_value(s) + "expected 32 lowercase hex digits (skc cache ls lists the keys)";
        }));
    c.app.footer(
        "The file is written to a temporary and renamed: a whole file or none.\n\n"
        "exit status: 0 done; 2 bad usage; 3 the cache could not be read or the file not written");
}

void add_cache_import(CLI::App& cache, Action& action) {
    CacheCommand c =
        add_cache_command(cache, action, "import", "check an export file whole, then add its entries", cache_import);
    add_value(c.app, "FILE", c.options.file, "", "the export file to read")->required();
    c.app.footer(
        "A truncated, altered or foreign file adds nothing.\n\n"
        "exit status: 0 done; 1 the file is bad (nothing was imported); 2 bad usage; 3 the cache could not be read "
        "or changed");
}

}  // namespace skc_tool
