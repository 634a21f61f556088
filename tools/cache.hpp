// tools/cache.hpp: what the `skc cache` commands share (cache.cpp): their options, the cache they
// work on (Target, checked before anything is read or changed) and how each command is added.
//
// `skc cache` inspects and maintains the package cache that compiles fill:
// `<base>/static_kernel_compile_outputs/static_kernel_cache/` (or --cache-dir, or $SKC_CACHE_DIR),
// one namespace `CANN-<version>_<device>` per toolchain version and device. It opens each namespace
// exactly as skc::open_cache does, but never creates one: on a base without a cache it says so and
// changes nothing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <skc/policy/cache.hpp>
#include <skc/value.hpp>

#include "cli.hpp"
#include "commands.hpp"

namespace skc_tool {

using FsCache = skc::IndexCache<skc::FilesystemStorage, skc::FileLock>;

/// What a `skc cache` command is given; each command adds the options it takes.
struct CacheOptions {
    std::optional<std::string> base;
    std::optional<std::string> cache_dir;  // --cache-dir, else $SKC_CACHE_DIR
    bool cache_dir_from_env = false;
    std::optional<std::string> ns;
    bool json = false;
    std::optional<std::uint64_t> max_size;      // prune, config
    std::optional<std::uint64_t> max_entries;   // prune, config
    std::optional<std::uint64_t> older_than_s;  // prune
    KeyArgs key;                                // explain
    std::vector<std::string> keys;              // export: --key
    std::optional<std::string> output;          // export: -o FILE
    std::optional<std::string> file;            // import: the export file
    bool remote = false;                        // verify: the remote tier instead of the local cache
    std::optional<std::string> remote_url;      // verify --remote: --remote-cache URL, else $SKC_REMOTE_CACHE
    bool remote_read_only = false;              // verify --remote: report, remove nothing
    /// Checks of the options together, after parsing and before the cache is looked at (UsageError).
    std::function<void(const CacheOptions&)> check;
};

/// The cache a command works on, resolved and checked before anything is read or changed.
struct Target {
    std::string shown;          // the cache folder as the user named it (--base joined with the layout)
    std::filesystem::path dir;  // the same, absolute
    bool exists = false;
    std::vector<std::string> namespaces;  // the ones to work on, in name order
    std::vector<std::string> all;         // every namespace present
    std::string prefix;                   // "skc cache <command>: "

    [[nodiscard]] std::string shown_path(std::string_view rest) const { return shown + "/" + std::string(rest); }
};

using CacheRun = int (*)(const Target&, const CacheOptions&);

/// Adds `skc cache <name>` with the options every cache command takes (--base, --cache-dir,
/// --namespace, --json); when it is given, `action` runs `run` on the cache those name. The command
/// adds its own options to `options`, which lives as long as the App.
struct CacheCommand {
    CLI::App& app;
    CacheOptions& options;
};
CacheCommand add_cache_command(CLI::App& cache, Action& action, const std::string& name, const std::string& summary,
                               CacheRun run);

// One add_ function per command, in the order `skc cache --help` lists them.
void add_cache_stats(CLI::App& cache, Action& action);            // cache_stats.cpp
void add_cache_ls(CLI::App& cache, Action& action);               // cache_entries.cpp
void add_cache_verify(CLI::App& cache, Action& action);           // cache_entries.cpp
void add_cache_prune(CLI::App& cache, Action& action);            // cache_entries.cpp
void add_cache_clear(CLI::App& cache, Action& action);            // cache_entries.cpp
void add_cache_config(CLI::App& cache, Action& action);           // cache_stats.cpp
void add_cache_zero(CLI::App& cache, Action& action);             // cache_stats.cpp
void add_cache_explain(CLI::App& cache, Action& action);          // cache_explain.cpp
void add_cache_export(CLI::App& cache, Action& action);           // cache_transfer.cpp
void add_cache_import(CLI::App& cache, Action& action);           // cache_transfer.cpp
void add_cache_failures(CLI::App& cache, Action& action);         // cache_failures.cpp
void add_cache_forget_failures(CLI::App& cache, Action& action);  // cache_failures.cpp

/// --max-size: `10G`, `500M`, `1024K`, `65536` (skc::parse_size), as a number of bytes; 0 only where `zero_ok`.
CLI::Validator size_value(bool zero_ok);
/// --max-entries: a whole number; 0 only where `zero_ok`.
CLI::Validator entries_value(bool zero_ok);
/// --older-than: `30d`, `12h`, `15m`, `90s`, as a number of seconds.
CLI::Validator duration_value();

/// Opens a namespace as skc::open_cache does, without creating anything (`mode` read-only: not even
/// a lock file). Messages go nowhere: the commands report what they find themselves.
std::unique_ptr<FsCache> open_namespace(const Target& t, const std::string& stem,
                                        skc::CacheMode mode = skc::CacheMode::read_write);

/// Saves what the command counted (evictions, corrupt entries) into the namespace's statistics; a
/// failure there is worth a warning, not the result.
void save_statistics(const Target& t, FsCache& cache, const std::string& stem);

/// `cache_dir` and `exists`, the start of every JSON document.
skc::Object json_head(const Target& t);
/// Prints the document of a command whose JSON is the head and `namespaces`, one object each.
void print_namespaces_json(const Target& t, skc::Array namespaces);

/// When there is nothing to work on: true after saying so (the command then exits with 0).
bool nothing_there(const Target& t, const CacheOptions& o);

}  // namespace skc_tool
