// skc cache: what its commands share: the options every one takes, the cache they name, checked
// before anything is read or changed, the values of limits, and the run of a command with its exit
// status. The commands themselves are in cache_stats.cpp (stats, config, zero), cache_entries.cpp
// (ls, verify, prune, clear), cache_explain.cpp, cache_transfer.cpp (export, import) and
// cache_failures.cpp (failures, forget-failures).
//
// Exit status: 0 done; 1 `verify` found bad entries, or an export file is bad; 2 bad usage (unknown
// command or option, a missing or malformed value, a base that does not exist, is not a folder or is
// not a safe path); 3 the cache could not be read or changed.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/stat.h>

#include <skc/error.hpp>
#include <skc/layout.hpp>
#include <skc/log.hpp>
#include <skc/options.hpp>
#include <skc/policy/cache.hpp>

#include "cache.hpp"
#include "cli.hpp"
#include "common.hpp"

namespace skc_tool {

namespace {

namespace fs = std::filesystem;

const std::string size_forms =
    "expected a number of bytes with an optional suffix K, M, G or T (powers of 1024), e.g. 10G, 500M, 1024K or "
    "65536";

/// The number of bytes of `s`, or the message saying why it is not a size.
std::string check_size(std::string& s, bool zero_ok) {
    const std::optional<std::uint64_t> n = skc::parse_size(s);
    if (!n) {
        // Digits (and a suffix) that do not fit in 64 bits are a size, only too large.
        const std::string_view digits =
            !s.empty() && std::string_view("KMGTkmgt").find(s.back()) != std::string_view::npos
                ? std::string_view(s).substr(0, s.size() - 1)
                : std::string_view(s);
        const bool numeric = !digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos;
        return bad_value(s) + (numeric ? "the size is too large; " : "") + size_forms;
    }
    if (*n == 0 && !zero_ok)
        return bad_value(s) + "the size must be at least 1 byte; to remove every entry use 'skc cache clear'";
    s = std::to_string(*n);
    return {};
}

/// The number of seconds of `s`, or the message saying why it is not a duration.
std::string check_duration(std::string& s) {
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
    const std::optional<std::uint64_t> n =
        unit == 0 ? std::nullopt : parse_count(std::string_view(s).substr(0, s.size() - 1));
    if (!n) return bad_value(s) + "expected a whole number followed by d, h, m or s, e.g. 30d, 12h, 15m or 90s";
    // The cache compares ages in nanoseconds: at most about 292 years fit.
    constexpr std::int64_t max_seconds = INT64_MAX / 1000000000;
    if (*n > static_cast<std::uint64_t>(max_seconds / unit))
        return bad_value(s) + "the duration is too long; at most " + std::to_string(max_seconds / 86400) + "d";
    s = std::to_string(static_cast<std::int64_t>(*n) * unit);
    return {};
}

/// Checks the base and every path below it that the command may use. Path problems are bad usage
/// (exit status 2), before anything is read or changed.
Target resolve(const CacheOptions& o, const std::string& prefix) {
    Target t;
    t.prefix = prefix;
    // The folder given: the cache folder itself (--cache-dir or SKC_CACHE_DIR), else the base.
    const bool own = o.cache_dir.has_value();
    const std::string& given = own ? *o.cache_dir : *o.base;
    const std::string flag = own ? (o.cache_dir_from_env ? "SKC_CACHE_DIR" : "--cache-dir") : "--base";
    const std::string hint = "give the folder that holds static_kernel_compile_outputs";  // for --base
    const auto path_error = [&](const skc::Error& e) {
        return UsageError{flag + " '" + printable(given) + "': " + printable(e.message()), false};
    };
    // `given` is never empty: the parser refuses an empty value, and an empty SKC_CACHE_DIR is unset.
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
            throw UsageError{"--base '" + printable(given) + "': " +
                                 (err == ENOENT ? std::string("no such directory")
                                                : std::string("cannot access: ") + std::strerror(err)) +
                                 "; " + hint,
                             false};
        }
        if (!S_ISDIR(st.st_mode))
            throw UsageError{"--base '" + printable(given) + "': not a directory; " + hint, false};
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
            throw UsageError{printable(e.what()), false};
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
        throw UsageError{printable(t.shown) + ": not a directory; the cache folder is expected there", false};
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

/// Runs `run` on the cache `o` names: an skc::Error is one line on standard error and its exit status.
int run_cache(const CacheOptions& given, CacheRun run, const std::string& prefix) {
    CacheOptions o = given;
    if (!o.cache_dir)
        if (const char* env = std::getenv("SKC_CACHE_DIR"); env != nullptr && *env != '\0') {
            o.cache_dir = env;
            o.cache_dir_from_env = true;
        }
    if (!o.base && !o.cache_dir && !o.remote)
        throw UsageError{
            "--base DIR is required: the folder that holds static_kernel_compile_outputs (or --cache-dir DIR, or "
            "SKC_CACHE_DIR, for a cache folder of its own)"};
    if (o.check) o.check(o);
    try {
        return run(o.remote ? Target{} : resolve(o, prefix), o);  // --remote: no local cache
    } catch (const skc::Error& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "%s%s\n", prefix.c_str(), printable(e.what()).c_str());
        // A bad export file or op info file is bad input; anything else: the cache could not be used.
        if (e.code() == skc::Errc::corrupt) return exit_bad_entries;
        const bool bad_input = e.code() == skc::Errc::invalid_op_info || e.code() == skc::Errc::invalid_json ||
                               e.code() == skc::Errc::invalid_argument || e.code() == skc::Errc::limit_exceeded ||
                               e.code() == skc::Errc::invalid_option;
        return bad_input ? exit_usage : exit_failed;
    } catch (const UsageError&) {
        throw;
    } catch (const std::exception& e) {  // the cache could not be read or changed
        std::fflush(stdout);
        std::fprintf(stderr, "%s%s\n", prefix.c_str(), printable(e.what()).c_str());
        return exit_failed;
    }
}

}  // namespace

CLI::Validator size_value(bool zero_ok) {
    return validator([zero_ok](std::string& s) { return check_size(s, zero_ok); });
}

CLI::Validator entries_value(bool zero_ok) {
    return validator([zero_ok](std::string& s) {
        const std::optional<std::uint64_t> n = parse_count(s);
        if (n && (*n != 0 || zero_ok)) return std::string();
        return bad_value(s) +
               "expected a whole number of entries, at least 1, e.g. 1000 (to remove every entry use 'skc cache "
               "clear')";
    });
}

CLI::Validator duration_value() {
    return validator([](std::string& s) { return check_duration(s); });
}

/// Opens a namespace as skc::open_cache does, without creating anything (`mode` read-only: not even
/// a lock file). Messages go nowhere: the commands report what they find themselves.
std::unique_ptr<FsCache> open_namespace(const Target& t, const std::string& stem, skc::CacheMode mode) {
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

void print_namespaces_json(const Target& t, skc::Array namespaces) {
    skc::Object root = json_head(t);
    root.push_back({"namespaces", std::move(namespaces)});
    print_json(std::move(root));
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

CacheCommand add_cache_command(CLI::App& cache, Action& action, const std::string& name, const std::string& summary,
                               CacheRun run) {
    const auto o = std::make_shared<CacheOptions>();
    CLI::App* c = cache.add_subcommand(name, summary);
    add_value(*c, "--base", o->base, "DIR", "the folder that holds static_kernel_compile_outputs");
    add_value(*c, "--cache-dir", o->cache_dir, "DIR",
              "the cache folder itself, shared by many bases (default: $SKC_CACHE_DIR, else the base's)");
    add_value(*c, "--namespace", o->ns, "NAME", "only the namespace NAME, CANN-<version>_<device> (default: all)")
        ->check(validator([](std::string& s) {
            const bool good = s.size() > 5 && s.compare(0, 5, "CANN-") == 0 && s.find('/') == std::string::npos &&
                              s.find('\0') == std::string::npos;
            return good ? std::string()
                        : bad_value(s) +
                              "expected a namespace name CANN-<version>_<device>, without '/' (skc cache stats lists "
                              "them)";
        }));
    add_switch(*c, "--json", o->json, "print one JSON document");
    c->callback([&action, o, run, prefix = "skc cache " + name + ": "] {
        action = [o, run, prefix] { return run_cache(*o, run, prefix); };
    });
    return {*c, *o};
}

void add_cache(CLI::App& skc, Action& action) {
    CLI::App* cache =
        skc.add_subcommand("cache", "inspect and maintain the package cache: stats, ls, verify, prune, clear, ...");
    cache->require_subcommand(1);
    cache->footer(
        "The cache is --cache-dir, else $SKC_CACHE_DIR, else <DIR>/static_kernel_compile_outputs/static_kernel_cache\n"
        "with --base DIR, one namespace CANN-<version>_<device> per toolchain version and device.\n"
        "'skc cache <command> --help' shows a command's options.\n\n"
        "exit status: 0 done, 1 verify found bad entries, 2 bad usage, 3 the cache could not be read or changed");
    add_cache_stats(*cache, action);
    add_cache_ls(*cache, action);
    add_cache_verify(*cache, action);
    add_cache_prune(*cache, action);
    add_cache_clear(*cache, action);
    add_cache_config(*cache, action);
    add_cache_zero(*cache, action);
    add_cache_explain(*cache, action);
    add_cache_export(*cache, action);
    add_cache_import(*cache, action);
    add_cache_failures(*cache, action);
    add_cache_forget_failures(*cache, action);
}

}  // namespace skc_tool
