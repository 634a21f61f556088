// The skc tool, run as a user runs it: a child process (posix_spawn, no shell) on a real cache that
// the test fills through skc::open_cache, publish() and lookup(). Standard output and error go to
// files; exit statuses, outputs, JSON documents and the files left in the cache are checked.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <skc/op_info_io.hpp>
#include <skc/op_set.hpp>
#include <skc/policy/cache.hpp>

#include "run_packages.hpp"
#include "run_tool.hpp"
#include "test_support.hpp"

extern char** environ;

namespace tools_skc_test {

namespace {

namespace fs = std::filesystem;
using skc_test::TempDir;

const std::string tool = SKC_TOOL;
const std::string ns_a = "CANN-8.0.RC1_Ascend910B";
const std::string ns_b = "CANN-7.0_Ascend310P";
const std::string shown_cache = "base/static_kernel_compile_outputs/static_kernel_cache";

using skc_test::Run;

/// Runs the tool in `cwd` with TZ=UTC (times are printed in local time), stdin from /dev/null.
Run run_skc(const fs::path& cwd, const std::vector<std::string>& args) {
    return skc_test::run_program(tool, cwd, args, {"TZ=UTC"});
}

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

std::int64_t now_s() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

void set_mtime(const fs::path& p, std::int64_t unix_s) {
    const timespec ts[2] = {{static_cast<time_t>(unix_s), 0}, {static_cast<time_t>(unix_s), 0}};
    REQUIRE(::utimensat(AT_FDCWD, p.c_str(), ts, AT_SYMLINK_NOFOLLOW) == 0);
}

std::string utc(std::int64_t unix_s) {
    const auto t = static_cast<std::time_t>(unix_s);
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    char buf[32];
    return std::string(buf, std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm));
}

const skc::Value& at(const skc::Value& v, std::string_view key) {
    const skc::Value* m = v.find(key);
    REQUIRE_MESSAGE(m != nullptr, "missing member " << key);
    return *m;
}

std::uint64_t num(const skc::Value& v, std::string_view key) {
    const skc::Value& m = at(v, key);
    REQUIRE(m.is_integer());
    return m.kind() == skc::Kind::integer ? static_cast<std::uint64_t>(m.as_int()) : m.as_uint();
}

std::string str(const skc::Value& v, std::string_view key) {
    const skc::Value& m = at(v, key);
    REQUIRE(m.is_string());
    return m.as_string();
}

/// One published entry, as the test knows it.
struct Stored {
    std::string ns;
    skc::CacheKey key;
    skc::CacheEntry entry;
    std::int64_t last_used_s = 0;
};

/// A cache with two namespaces:
///   A = CANN-8.0.RC1_Ascend910B: a0 (1 op, 1 KiB, compiled in 1.5 s, last used 40 days ago),
///       a1 (2 ops, 2 KiB, 3 s, 2 days ago), a2 (3 ops, 3 KiB, 4.5 s, 1 hour ago);
///       lookups: a0 and a1 hit, one miss.
///   B = CANN-7.0_Ascend310P: b0 (1 op, 100 bytes, no compile time, 10 days ago); one hit.
struct Fixture {
    TempDir tmp;
    fs::path base = tmp / "base";
    fs::path cache_dir = base / "static_kernel_compile_outputs" / "static_kernel_cache";
    Stored a0, a1, a2, b0;
    std::int64_t now = now_s();

    /// With `makeself`, the packages are real run packages (verify checks them as such) of about the
    /// same content; otherwise plain files of the exact sizes above.
    explicit Fixture(bool makeself = false) {
        fs::create_directories(base);
        const auto package = [&](const std::string& name, std::size_t size, char fill) {
            if (makeself)
                return skc_test::make_package(
                    tmp / "pkgs", name,
                    {{skc_test::digest_of(static_cast<int>(size)), "Add", "kernels/k.so", std::string(size, fill)}});
            const fs::path pkg = tmp / "pkgs" / (name + ".run");
            skc_test::spit(pkg, std::string(size, fill));
            return pkg;
        };
        fs::create_directories(tmp / "pkgs");
        const std::vector<std::string> files = {"Add_float_ND_32_64_9.json", "Gelu_float_ND_32_256_8.json",
                                                "Mul_float_ND_2_16_16_10.json"};
        skc::CacheConfig quiet;
        quiet.log = skc::null_log();
        {
            auto cache = skc::open_cache(skc::Layout(base), "8.0.RC1", "Ascend910B", quiet);
            skc::OpSet set;
            Stored* slots[] = {&a0, &a1, &a2};
            for (std::size_t i = 0; i < 3; ++i) {
                set.insert(skc::read_op_info(skc_test::example_ops_dir() / files[i]), files[i]);
                const skc::CacheKey key = skc::make_cache_key(set, {"8.0.RC1", "Ascend910B", false, {"--opt=1"}});
                const fs::path pkg = package("a" + std::to_string(i), 1024 * (i + 1), static_cast<char>('a' + i));
                slots[i]->ns = ns_a;
                slots[i]->entry = cache->publish(key, pkg, std::chrono::milliseconds(1500 * (i + 1)));
                slots[i]->key = key;
                if (i < 2) CHECK(cache->lookup(key).has_value());
            }
            CHECK_FALSE(cache->lookup(skc::make_cache_key(set, {"8.0.RC1", "Ascend910B", true, {}})).has_value());
        }
        {
            auto cache = skc::open_cache(skc::Layout(base), "7.0", "Ascend310P", quiet);
            skc::OpSet set;
            set.insert(skc::read_op_info(skc_test::example_ops_dir() / "Transpose_float_ND_2_16_64_5.json"));
            const skc::CacheKey key = skc::make_cache_key(set, {"7.0", "Ascend310P", true, {}});
            const fs::path pkg = package("b0", 100, 'b');
            b0.ns = ns_b;
            b0.entry = cache->publish(key, pkg);
            b0.key = key;
            CHECK(cache->lookup(key).has_value());
        }
        // The caches flushed on destruction (their hits' use times are in the statistics logs): fold
        // the logs, so that the use times set below are the last (a use logged within the file
        // system's coarse clock tick before them could count as later).
        skc::open_cache(skc::Layout(base), "8.0.RC1", "Ascend910B", quiet)->fold_stats();
        skc::open_cache(skc::Layout(base), "7.0", "Ascend310P", quiet)->fold_stats();
        a0.last_used_s = now - 40 * 86400;
        a1.last_used_s = now - 2 * 86400;
        a2.last_used_s = now - 3600;
        b0.last_used_s = now - 10 * 86400;
        for (Stored* s : {&a0, &a1, &a2, &b0}) set_mtime(entry_file(*s), s->last_used_s);
    }

    [[nodiscard]] fs::path entry_file(const Stored& s) const { return cache_dir / s.ns / "entries" / s.entry.key; }
    [[nodiscard]] fs::path package_file(const Stored& s) const {
        return cache_dir / s.ns / "packages" / (s.entry.key + ".run");
    }
    [[nodiscard]] bool present(const Stored& s) const {
        return fs::exists(entry_file(s)) && fs::exists(package_file(s));
    }
    [[nodiscard]] bool gone(const Stored& s) const {
        return !fs::exists(fs::symlink_status(entry_file(s))) && !fs::exists(fs::symlink_status(package_file(s)));
    }

    Run run(std::vector<std::string> args) const { return run_skc(tmp.path(), args); }

    /// A pinned hit: the entry is in use while the returned cache and hit live. (It counts as a hit
    /// in the statistics when the cache is destroyed.)
    struct Pin {
        std::unique_ptr<skc::IndexCache<skc::FilesystemStorage, skc::FileLock>> cache;
        std::optional<skc::CacheHit<skc::FileLock::Guard>> hit;
    };
    Pin pin(const Stored& s) const {
        skc::CacheConfig quiet;
        quiet.log = skc::null_log();
        const std::string version = s.ns == ns_a ? "8.0.RC1" : "7.0",
                          device = s.ns == ns_a ? "Ascend910B" : "Ascend310P";
        Pin p{skc::open_cache(skc::Layout(base), version, device, quiet), std::nullopt};
        p.hit = p.cache->lookup(s.key);
        REQUIRE(p.hit.has_value());
        return p;
    }

    /// The cache's content (every file with its bytes), leaving out what bookkeeping may change:
    /// lock files and the statistics.
    [[nodiscard]] std::set<std::string> content() const {
        std::set<std::string> out;
        for (const std::string& line : skc_test::snapshot(cache_dir)) {
            const std::string path = line.substr(0, line.find('='));
            if (path.ends_with(".lock") || path.find("/keys") != std::string::npos || path.ends_with("/stats") ||
                path.find("/stats.log") != std::string::npos)
                continue;
            out.insert(line);
        }
        return out;
    }

    /// `before` without the entry and package of each of `removed`.
    static std::set<std::string> without(std::set<std::string> before, std::initializer_list<const Stored*> removed) {
        for (const Stored* s : removed) {
            const std::string entry = s->ns + "/entries/" + s->entry.key + "=";
            const std::string package = s->ns + "/packages/" + s->entry.key + ".run=";
            std::erase_if(before, [&](const std::string& l) { return l.starts_with(entry) || l.starts_with(package); });
        }
        return before;
    }
};

/// A row of `skc cache ls`.
std::string ls_row(const Stored& s, const std::string& compile_time) {
    const auto size = [](std::uint64_t b) {
        char buf[32];
        if (b < 1024) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
        else std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / 1024);
        return std::string(buf);
    };
    char line[256];
    std::snprintf(line, sizeof line, "%-34s%10s%6llu  %-21s%-21s%s\n", s.entry.key.c_str(), size(s.entry.size).c_str(),
                  static_cast<unsigned long long>(s.entry.ops), utc(s.entry.created_unix).c_str(),
                  utc(s.last_used_s).c_str(), compile_time.c_str());
    return line;
}

const std::string ls_header =
    "key                                     size   ops  created              last used            compile time\n";

}  // namespace

TEST_CASE("help, version and usage: to standard output, exit status 0") {
    TempDir tmp;
    const Run help = run_skc(tmp.path(), {"--help"});
    CHECK(help.status == 0);
    CHECK(help.err.empty());
    CHECK(help.out.find("\nUsage: skc [OPTIONS] COMMAND\n") != std::string::npos);
    CHECK(help.out.find("\n  --version ") != std::string::npos);
    CHECK(help.out.find("\nCommands:\n") != std::string::npos);
    for (const char* c : {"compile", "ops", "uninstall", "cache", "help"})
        CHECK(help.out.find("\n  " + std::string(c) + " ") != std::string::npos);
    CHECK(help.out.find("\n  cache                             inspect and maintain the package cache") !=
          std::string::npos);
    CHECK(help.out.ends_with("'skc <command> --help' or 'skc help <command>' shows a command's usage.\n"));
    CHECK(run_skc(tmp.path(), {"-h"}).out == help.out);
    CHECK(run_skc(tmp.path(), {"help"}).out == help.out);

    const Run cache_help = run_skc(tmp.path(), {"cache", "--help"});
    CHECK(cache_help.status == 0);
    CHECK(cache_help.err.empty());
    CHECK(
        cache_help.out.starts_with("inspect and maintain the package cache: stats, ls, verify, prune, clear, ...\n"
                                   "Usage: skc cache [OPTIONS] COMMAND\n"));
    for (const char* c : {"stats", "ls", "verify", "prune", "clear", "config", "zero", "explain", "export", "import"})
        CHECK(cache_help.out.find("\n  " + std::string(c) + " ") != std::string::npos);
    CHECK(
        cache_help.out.ends_with("exit status: 0 done, 1 verify found bad entries, 2 bad usage, 3 the cache could "
                                 "not be read or changed\n"));
    CHECK(run_skc(tmp.path(), {"help", "cache"}).out == cache_help.out);
    CHECK(run_skc(tmp.path(), {"cache", "-h"}).out == cache_help.out);

    const Run version = run_skc(tmp.path(), {"--version"});
    CHECK(version.status == 0);
    CHECK(version.err.empty());
    CHECK(version.out == "skc " SKC_VERSION_STRING "\n");
}

TEST_CASE("each command's --help: its usage line and options; skc help <command> prints the same") {
    TempDir tmp;
    const std::string common = "\n  --base DIR ";
    const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> commands = {
        {{"compile"},
         {"Usage: skc compile [OPTIONS]\n", "\n  --ops DIR REQUIRED ", "\n  --base DIR REQUIRED ",
          "\n  --toolchain-version VER REQUIRED ", "\n  --blacklist SUBSTR ... ", "\n  --jobs N ",
          "\n  --timeout SECONDS ", "\n  --mpi ", "\n  --json ", "\nexit status: 0 done (cache hit, compiled"}},
        {{"uninstall"},
         {"Usage: skc uninstall [OPTIONS] [PACKAGE]\n", "\n  PACKAGE ", "\n  --op-library DIR REQUIRED ",
          "\n  --backend NAME ", "\nexit status: 0 done; 1 the op library could not be changed"}},
        {{"ops"}, {"Usage: skc ops [OPTIONS] COMMAND\n", "\nCommands:\n  inspect "}},
        {{"ops", "inspect"},
         {"Usage: skc ops inspect [OPTIONS] DIR\n", "\n  DIR REQUIRED ", "\n  --blacklist SUBSTR ... ", "\n  --json ",
          "\nexit status: 0 every file was read; 2 bad usage"}},
        {{"cache", "stats"},
         {"Usage: skc cache stats [OPTIONS]\n", common, "\n  --cache-dir DIR ", "\n  --namespace NAME ",
          "\n  --json "}},
        {{"cache", "ls"}, {"Usage: skc cache ls [OPTIONS]\n", common}},
        {{"cache", "verify"},
         {"Usage: skc cache verify [OPTIONS]\n", common, "\nexit status: 0 every entry is good; 1"}},
        {{"cache", "prune"},
         {"Usage: skc cache prune [OPTIONS]\n", common, "\n  --max-size SIZE ", "\n  --max-entries N ",
          "\n  --older-than DURATION ", "\nprune needs at least one of --max-size, --max-entries, --older-than"}},
        {{"cache", "clear"}, {"Usage: skc cache clear [OPTIONS]\n", common}},
        {{"cache", "config"},
         {"Usage: skc cache config [OPTIONS]\n", common, "\n  --max-size SIZE ", "\n  --max-entries N "}},
        {{"cache", "zero"}, {"Usage: skc cache zero [OPTIONS]\n", common}},
        {{"cache", "explain"},
         {"Usage: skc cache explain [OPTIONS]\n", common, "\n  --ops DIR REQUIRED ", "\n  --compiler PATH REQUIRED ",
          "\n  --device NAME REQUIRED ", "\n  --compiler-check MODE "}},
        {{"cache", "export"},
         {"Usage: skc cache export [OPTIONS]\n", common, "\n  -o,--output FILE REQUIRED ", "\n  --key KEY ... "}},
        {{"cache", "import"}, {"Usage: skc cache import [OPTIONS] FILE\n", common, "\n  FILE REQUIRED "}},
        {{"help"}, {"Usage: skc help [OPTIONS] [COMMAND...]\n"}},
    };
    for (const auto& [command, lines] : commands) {
        std::string joined;
        for (const std::string& c : command) joined += " " + c;
        INFO("skc" << joined << " --help");
        const Run r = run_skc(tmp.path(), command + std::vector<std::string>{"--help"});
        CHECK(r.status == 0);
        CHECK(r.err.empty());
        CHECK(r.out.find("\n  -h,--help ") != std::string::npos);
        for (const std::string& line : lines) CHECK(r.out.find(line) != std::string::npos);
        const Run h = run_skc(tmp.path(), std::vector<std::string>{"help"} + command);
        CHECK(h.status == 0);
        CHECK(h.out == r.out);
        CHECK(run_skc(tmp.path(), command + std::vector<std::string>{"-h"}).out == r.out);
    }
    // --help wins over the other arguments, good or bad.
    const Run stats_help = run_skc(tmp.path(), {"cache", "stats", "--help"});
    CHECK(run_skc(tmp.path(), {"cache", "stats", "--base", "nowhere", "--help"}).out == stats_help.out);
    CHECK(run_skc(tmp.path(), {"cache", "stats", "--help", "--frob"}).out == stats_help.out);
    CHECK(stats_help.out != run_skc(tmp.path(), {"cache", "ls", "--help"}).out);
}

TEST_CASE("bad usage: the command and what is wrong on stderr, where the usage is, exit status 2") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    skc_test::spit(tmp / "file", "x");
    fs::create_symlink(tmp / "base", tmp / "link");
    const std::string cache_commands =
        "commands: stats, ls, verify, prune, clear, config, zero, explain, export, import, failures, forget-failures";
    const std::string accepted_base = "give the folder that holds static_kernel_compile_outputs";
    const std::string size_forms =
        "expected a number of bytes with an optional suffix K, M, G or T (powers of 1024), "
        "e.g. 10G, 500M, 1024K or 65536";
    const std::string duration_forms = "expected a whole number followed by d, h, m or s, e.g. 30d, 12h, 15m or 90s";
    const std::string entries_forms =
        "expected a whole number of entries, at least 1, e.g. 1000 (to remove every entry use 'skc cache clear')";
    const std::string ns_forms =
        "expected a namespace name CANN-<version>_<device>, without '/' (skc cache stats lists them)";
    // The message, then where the usage is: the commands of a command that has them, else the options.
    const auto with_hint = [](const std::string& command, const std::string& message) {
        const std::string usage = command == "skc help" ? "skc" : command;
        return command + ": " + message + "\nrun '" + usage + " --help' for the " +
               (usage == "skc" || usage == "skc cache" || usage == "skc ops" ? "commands" : "options") + "\n";
    };
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        // no command, an unknown command, an unknown option, at each level
        {{}, with_hint("skc", "no command given; commands: compile, ops, uninstall, cache, help")},
        {{"frob"}, with_hint("skc", "unknown command 'frob'; commands: compile, ops, uninstall, cache, help")},
        {{"--frob"}, with_hint("skc", "unknown option '--frob'")},
        {{"help", "frob"},
         with_hint("skc help", "unknown command 'frob'; commands of 'skc': compile, ops, uninstall, cache, help")},
        {{"help", "cache", "frob"},
         with_hint("skc help", "unknown command 'frob'; commands of 'skc cache': " +
                                   cache_commands.substr(std::string("commands: ").size()))},
        {{"cache"}, with_hint("skc cache", "no command given; " + cache_commands)},
        {{"cache", "frob", "--base", "base"}, with_hint("skc cache", "unknown command 'frob'; " + cache_commands)},
        {{"cache", "--frob"}, with_hint("skc cache", "unknown option '--frob'")},
        {{"cache", "stats", "--frob"}, with_hint("skc cache stats", "unknown option '--frob'")},
        // an unknown option is named before a required option that is missing
        {{"cache", "prune", "--bsae", "base"}, with_hint("skc cache prune", "unknown option '--bsae'")},
        {{"cache", "stats", "ls", "--base", "base"}, with_hint("skc cache stats", "unexpected argument 'ls'")},
        // an option of another command
        {{"cache", "stats", "--base", "base", "--max-size", "1G"},
         with_hint("skc cache stats",
                   "unknown option '--max-size'; it applies only to 'skc cache prune' and 'skc cache config'")},
        {{"cache", "clear", "--base", "base", "--older-than", "1d"},
         with_hint("skc cache clear", "unknown option '--older-than'; it applies only to 'skc cache prune'")},
        // missing and repeated values
        {{"cache", "stats"},
         with_hint("skc cache stats",
                   "--base DIR is required: the folder that holds static_kernel_compile_outputs (or --cache-dir DIR, "
                   "or SKC_CACHE_DIR, for a cache folder of its own)")},
        {{"cache", "ls", "--base"}, with_hint("skc cache ls", "--base: 1 required DIR missing")},
        {{"cache", "verify", "--base="}, with_hint("skc cache verify", "--base: 1 required DIR missing")},
        {{"cache", "verify", "--base", ""}, with_hint("skc cache verify", "--base: the value is empty; give one")},
        {{"cache", "prune", "--base", "base", "--max-size"},
         with_hint("skc cache prune", "--max-size: 1 required SIZE missing")},
        {{"cache", "prune", "--base", "base", "--older-than"},
         with_hint("skc cache prune", "--older-than: 1 required DURATION missing")},
        {{"cache", "stats", "--json=yes", "--base", "base"},
         with_hint("skc cache stats", "json was given a disallowed flag override")},
        {{"cache", "stats", "--base", "base", "--base=base"},
         with_hint("skc cache stats", "--base: At Most 1 required but received 2")},
        {{"cache", "prune", "--base", "base"},
         with_hint("skc cache prune",
                   "nothing to prune by; give at least one of --max-size SIZE, --max-entries N, --older-than "
                   "DURATION")},
        {{"cache", "export", "--base", "base"}, with_hint("skc cache export", "--output is required")},
        {{"cache", "import", "--base", "base"}, with_hint("skc cache import", "FILE is required")},
        {{"ops"}, with_hint("skc ops", "no command given; commands: inspect")},
        {{"ops", "inspect"}, with_hint("skc ops inspect", "DIR is required")},
        {{"ops", "inspect", "a", "b"}, with_hint("skc ops inspect", "unexpected argument 'b'")},
        {{"uninstall"}, with_hint("skc uninstall", "--op-library is required")},
        // malformed values, in skc's words
        {{"cache", "prune", "--base", "base", "--max-size", "10X"},
         with_hint("skc cache prune", "--max-size: bad value '10X': " + size_forms)},
        {{"cache", "prune", "--base", "base", "--max-size", "G"},
         with_hint("skc cache prune", "--max-size: bad value 'G': " + size_forms)},
        {{"cache", "prune", "--base", "base", "--max-size", "-5"},
         with_hint("skc cache prune", "--max-size: bad value '-5': " + size_forms)},
        {{"cache", "prune", "--base", "base", "--max-size", "1.5G"},
         with_hint("skc cache prune", "--max-size: bad value '1.5G': " + size_forms)},
        {{"cache", "prune", "--base", "base", "--max-size", "0"},
         with_hint("skc cache prune",
                   "--max-size: bad value '0': the size must be at least 1 byte; to remove every entry use 'skc "
                   "cache clear'")},
        {{"cache", "prune", "--base", "base", "--max-size", "16777216T"},
         with_hint("skc cache prune", "--max-size: bad value '16777216T': the size is too large; " + size_forms)},
        {{"cache", "prune", "--base", "base", "--max-entries", "many"},
         with_hint("skc cache prune", "--max-entries: bad value 'many': " + entries_forms)},
        {{"cache", "prune", "--base", "base", "--max-entries", "0"},
         with_hint("skc cache prune", "--max-entries: bad value '0': " + entries_forms)},
        {{"cache", "prune", "--base", "base", "--max-entries", "-3"},
         with_hint("skc cache prune", "--max-entries: bad value '-3': " + entries_forms)},
        {{"cache", "prune", "--base", "base", "--older-than", "5y"},
         with_hint("skc cache prune", "--older-than: bad value '5y': " + duration_forms)},
        {{"cache", "prune", "--base", "base", "--older-than", "30"},
         with_hint("skc cache prune", "--older-than: bad value '30': " + duration_forms)},
        {{"cache", "prune", "--base", "base", "--older-than", "d"},
         with_hint("skc cache prune", "--older-than: bad value 'd': " + duration_forms)},
        {{"cache", "prune", "--base", "base", "--older-than", "106752d"},
         with_hint("skc cache prune", "--older-than: bad value '106752d': the duration is too long; at most 106751d")},
        {{"cache", "stats", "--base", "base", "--namespace", "Ascend910B"},
         with_hint("skc cache stats", "--namespace: bad value 'Ascend910B': " + ns_forms)},
        {{"cache", "stats", "--base", "base", "--namespace", "CANN-x/../y"},
         with_hint("skc cache stats", "--namespace: bad value 'CANN-x/../y': " + ns_forms)},
        {{"cache", "export", "--base", "base", "-o", "out", "--key", "nothex"},
         with_hint("skc cache export",
                   "--key: bad value 'nothex': expected 32 lowercase hex digits (skc cache ls lists the keys)")},
        // the folder named: one line, which says what to give
        {{"cache", "stats", "--base", "nowhere"},
         "skc cache stats: --base 'nowhere': no such directory; " + accepted_base + "\n"},
        {{"cache", "clear", "--base", "file"},
         "skc cache clear: --base 'file': not a directory; " + accepted_base + "\n"},
        {{"cache", "ls", "--base", "base/../base"},
         "skc cache ls: --base 'base/../base': the path contains a '..' component; give a path without one\n"},
        {{"cache", "stats", "--base", "link"},
         "skc cache stats: --base 'link': component '" + (tmp / "link").string() +
             "' is a symbolic link; give the real path instead\n"},
    };
    for (const auto& [args, message] : cases) {
        std::string joined;
        for (const std::string& a : args) joined += " " + a;
        INFO("skc" << joined);
        const Run r = run_skc(tmp.path(), args);
        CHECK(r.status == 2);
        CHECK(r.out.empty());
        CHECK(r.err == message);
    }
    // Nothing was created by any of them.
    CHECK(fs::is_empty(tmp / "base"));
    CHECK_FALSE(fs::exists(tmp / "out"));
    // The largest values still accepted.
    for (const char* size : {"16777215T", "18446744073709551615"}) {
        const Run r = run_skc(tmp.path(), {"cache", "prune", "--base", "base", "--max-size", size});
        CHECK(r.status == 0);
        CHECK(r.err.empty());
    }
    CHECK(run_skc(tmp.path(), {"cache", "prune", "--base", "base", "--older-than", "106751d"}).status == 0);
    // Values joined with '=', and config's 0 (no limit).
    CHECK(run_skc(tmp.path(), {"cache", "prune", "--base=base", "--max-entries=3", "--json"}).status == 0);
    const Run config = run_skc(tmp.path(), {"cache", "config", "--base", "base", "--max-size", "0", "--json"});
    CHECK(config.status == 0);
    CHECK(config.err.empty());
    CHECK(config.out.find("\"max_bytes\": 0,") != std::string::npos);
}

TEST_CASE("no cache below the base: every command says so, exits with 0 and creates nothing") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const std::vector<std::vector<std::string>> commands = {
        {"stats"}, {"ls"}, {"verify"}, {"prune", "--max-entries", "1"}, {"clear"}};
    for (const auto& c : commands) {
        INFO("skc cache " << c.front());
        std::vector<std::string> args{"cache"};
        args.insert(args.end(), c.begin(), c.end());
        args.insert(args.end(), {"--base", "base"});
        const Run text = run_skc(tmp.path(), args);
        CHECK(text.status == 0);
        CHECK(text.err.empty());
        CHECK(text.out == "no cache at " + shown_cache + "\n");
        args.emplace_back("--json");
        const Run json = run_skc(tmp.path(), args);
        CHECK(json.status == 0);
        CHECK(json.err.empty());
        CHECK(json.out ==
              "{\n  \"cache_dir\": \"" + shown_cache + "\",\n  \"exists\": false,\n  \"namespaces\": []\n}\n");
    }
    CHECK(fs::is_empty(tmp / "base"));

    // An absolute base is shown as given.
    const Run abs = run_skc(tmp.path(), {"cache", "stats", "--base", (tmp / "base").string()});
    CHECK(abs.out ==
          "no cache at " + (tmp / "base" / "static_kernel_compile_outputs" / "static_kernel_cache").string() + "\n");

    // A cache folder without namespaces.
    fs::create_directories(tmp / "base" / "static_kernel_compile_outputs" / "static_kernel_cache" / "not-a-namespace");
    const Run empty = run_skc(tmp.path(), {"cache", "ls", "--base", "base"});
    CHECK(empty.status == 0);
    CHECK(empty.out == "no cache namespaces in " + shown_cache + "\n");
    const Run empty_json = run_skc(tmp.path(), {"cache", "clear", "--base", "base", "--json"});
    CHECK(empty_json.out ==
          "{\n  \"cache_dir\": \"" + shown_cache + "\",\n  \"exists\": true,\n  \"namespaces\": []\n}\n");
}

TEST_CASE("stats: per namespace and in total") {
    Fixture f;
    const auto before = skc_test::snapshot(f.cache_dir);
    const Run r = f.run({"cache", "stats", "--base", "base"});
    CHECK(r.status == 0);
    CHECK(r.err.empty());
    CHECK(r.out == "cache directory: " + shown_cache +
                       "\n"
                       "limits: at most 5.0 GiB (default), no entry limit (default), in each namespace; applied after "
                       "each compile\n"
                       "\n"
                       "CANN-7.0_Ascend310P\n"
                       "  entries:             1\n"
                       "  size:                100 B\n"
                       "  hits:                1\n"
                       "  misses:              0\n"
                       "  hit rate:            100.00 %\n"
                       "  corrupt entries:     0\n"
                       "  evictions:           0\n"
                       "  compiles:            0\n"
                       "  waits:               0\n"
                       "  lock wait time:      0 s\n"
                       "  compile time saved:  0 s\n"
                       "\n"
                       "CANN-8.0.RC1_Ascend910B\n"
                       "  entries:             3\n"
                       "  size:                6.0 KiB (6144 bytes)\n"
                       "  hits:                2\n"
                       "  misses:              1\n"
                       "  hit rate:            66.67 %\n"
                       "  corrupt entries:     0\n"
                       "  evictions:           0\n"
                       "  compiles:            0\n"
                       "  waits:               0\n"
                       "  lock wait time:      0 s\n"
                       "  compile time saved:  4.50 s\n"
                       "\n"
                       "total (2 namespaces)\n"
                       "  entries:             4\n"
                       "  size:                6.1 KiB (6244 bytes)\n"
                       "  hits:                3\n"
                       "  misses:              1\n"
                       "  hit rate:            75.00 %\n"
                       "  corrupt entries:     0\n"
                       "  evictions:           0\n"
                       "  compiles:            0\n"
                       "  waits:               0\n"
                       "  lock wait time:      0 s\n"
                       "  compile time saved:  4.50 s\n");

    const Run one = f.run({"cache", "stats", "--base", "base", "--namespace", ns_b});
    CHECK(one.status == 0);
    CHECK(one.out == "cache directory: " + shown_cache +
                         "\n"
                         "limits: at most 5.0 GiB (default), no entry limit (default), in each namespace; applied "
                         "after each compile\n"
                         "\nCANN-7.0_Ascend310P\n"
                         "  entries:             1\n"
                         "  size:                100 B\n"
                         "  hits:                1\n"
                         "  misses:              0\n"
                         "  hit rate:            100.00 %\n"
                         "  corrupt entries:     0\n"
                         "  evictions:           0\n"
                         "  compiles:            0\n"
                         "  waits:               0\n"
                         "  lock wait time:      0 s\n"
                         "  compile time saved:  0 s\n");

    const Run json = f.run({"cache", "stats", "--base", "base", "--json"});
    CHECK(json.status == 0);
    CHECK(json.err.empty());
    const skc::Value doc = skc::parse_json(json.out);
    CHECK(str(doc, "cache_dir") == shown_cache);
    CHECK(at(doc, "exists").as_bool());
    const skc::Array& list = at(doc, "namespaces").as_array();
    REQUIRE(list.size() == 2);
    CHECK(str(list[0], "namespace") == ns_b);
    CHECK(str(list[1], "namespace") == ns_a);
    const skc::Value& a = list[1];
    CHECK(num(a, "entries") == 3);
    CHECK(num(a, "bytes") == 6144);
    CHECK(num(a, "hits") == 2);
    CHECK(num(a, "misses") == 1);
    CHECK(at(a, "hit_rate").as_double() == doctest::Approx(2.0 / 3.0));
    CHECK(num(a, "corrupt") == 0);
    CHECK(num(a, "evictions") == 0);
    CHECK(num(a, "compiles") == 0);
    CHECK(num(a, "waits") == 0);
    CHECK(num(a, "lock_wait_ns") == 0);
    CHECK(num(a, "compile_time_saved_ns") == 4500000000ULL);
    const skc::Value& total = at(doc, "total");
    CHECK(total.find("namespace") == nullptr);
    CHECK(num(total, "entries") == 4);
    CHECK(num(total, "bytes") == 6244);
    CHECK(num(total, "hits") == 3);
    CHECK(num(total, "misses") == 1);
    CHECK(at(total, "hit_rate").as_double() == 0.75);
    CHECK(num(total, "compile_time_saved_ns") == 4500000000ULL);

    const Run missing = f.run({"cache", "stats", "--base", "base", "--namespace", "CANN-9.9_Nowhere"});
    CHECK(missing.status == 0);
    CHECK(missing.out ==
          "no cache namespace CANN-9.9_Nowhere in " + shown_cache + "; it holds " + ns_b + ", " + ns_a + "\n");
    const Run missing_json = f.run({"cache", "stats", "--base", "base", "--namespace", "CANN-9.9_Nowhere", "--json"});
    CHECK(missing_json.out ==
          "{\n  \"cache_dir\": \"" + shown_cache + "\",\n  \"exists\": true,\n  \"namespaces\": []\n}\n");

    // stats reads only: not even a lock file is created.
    CHECK(skc_test::snapshot(f.cache_dir) == before);
}

TEST_CASE("stats: every counter as the cache stored it, and a namespace with no entries yet") {
    TempDir tmp;
    skc::CacheConfig quiet;
    quiet.log = skc::null_log();
    (void)skc::open_cache(skc::Layout(tmp / "base"), "8.0", "Ascend910B", quiet);  // the manifest, no entries
    skc::CacheStats s;
    s.hits = 5;
    s.misses = 3;
    s.corrupt = 1;
    s.evictions = 4;
    s.compiles = 3;
    s.waits = 2;
    s.lock_wait_ns = 123456789;                 // 123.5 ms
    s.compile_time_saved_ns = 7384000000000LL;  // 2 h 3 min 4 s
    s.composite_hits = 2;
    s.ops_compiled = 10;
    s.ops_reused = 30;
    skc::FilesystemStorage(tmp / "base" / "static_kernel_compile_outputs" / "static_kernel_cache" /
                           "CANN-8.0_Ascend910B")
        .write("stats", s.encode());
    const Run r = run_skc(tmp.path(), {"cache", "stats", "--base", "base"});
    CHECK(r.status == 0);
    CHECK(r.out == "cache directory: " + shown_cache +
                       "\nlimits: at most 5.0 GiB (default), no entry limit (default), in each namespace; applied "
                       "after each compile\n"
                       "\nCANN-8.0_Ascend910B\n"
                       "  entries:             0\n"
                       "  size:                0 B\n"
                       "  hits:                5\n"
                       "  misses:              3\n"
                       "  hit rate:            62.50 %\n"
                       "  corrupt entries:     1\n"
                       "  evictions:           4\n"
                       "  compiles:            3\n"
                       "  waits:               2\n"
                       "  lock wait time:      123.5 ms\n"
                       "  compile time saved:  2h 03m 04s\n"
                       "  composite hits:      2\n"
                       "  ops compiled:        10\n"
                       "  ops reused:          30 (75.00 %)\n");
    const skc::Value doc = skc::parse_json(run_skc(tmp.path(), {"cache", "stats", "--base", "base", "--json"}).out);
    const skc::Value& n = at(doc, "namespaces").as_array().at(0);
    CHECK(num(n, "corrupt") == 1);
    CHECK(num(n, "evictions") == 4);
    CHECK(num(n, "compiles") == 3);
    CHECK(num(n, "waits") == 2);
    CHECK(num(n, "lock_wait_ns") == 123456789);
    CHECK(num(n, "compile_time_saved_ns") == 7384000000000ULL);
    CHECK(at(n, "hit_rate").as_double() == 0.625);
    CHECK(num(n, "composite_hits") == 2);
    CHECK(num(n, "ops_compiled") == 10);
    CHECK(num(n, "ops_reused") == 30);
    CHECK(num(n, "composites") == 0);

    // No lookups at all: no hit rate.
    skc::FilesystemStorage(tmp / "base" / "static_kernel_compile_outputs" / "static_kernel_cache" /
                           "CANN-8.0_Ascend910B")
        .write("stats", skc::CacheStats{}.encode());
    CHECK(run_skc(tmp.path(), {"cache", "stats", "--base", "base"}).out.find("  hit rate:            -\n") !=
          std::string::npos);
    const skc::Value none = skc::parse_json(run_skc(tmp.path(), {"cache", "stats", "--base", "base", "--json"}).out);
    CHECK(at(at(none, "namespaces").as_array().at(0), "hit_rate").is_null());
}

TEST_CASE("ls: one line per entry, least recently used first; --json gives every field") {
    Fixture f;
    const auto before = skc_test::snapshot(f.cache_dir);
    const Run r = f.run({"cache", "ls", "--base", "base"});
    CHECK(r.status == 0);
    CHECK(r.err.empty());
    CHECK(r.out == ns_b + ": 1 entry, 100 B\n" + ls_header + ls_row(f.b0, "-") + "\n" + ns_a +
                       ": 3 entries, 6.0 KiB\n" + ls_header + ls_row(f.a0, "1.50 s") + ls_row(f.a1, "3.00 s") +
                       ls_row(f.a2, "4.50 s"));

    const Run one = f.run({"cache", "ls", "--namespace", ns_a, "--base", "base"});
    CHECK(one.out == ns_a + ": 3 entries, 6.0 KiB\n" + ls_header + ls_row(f.a0, "1.50 s") + ls_row(f.a1, "3.00 s") +
                         ls_row(f.a2, "4.50 s"));

    const Run json = f.run({"cache", "ls", "--base", "base", "--json"});
    CHECK(json.status == 0);
    CHECK(json.err.empty());
    const skc::Value doc = skc::parse_json(json.out);
    CHECK(str(doc, "cache_dir") == shown_cache);
    const skc::Array& list = at(doc, "namespaces").as_array();
    REQUIRE(list.size() == 2);
    const auto check_entries = [&](const skc::Value& n, const std::string& ns, std::vector<const Stored*> expected) {
        CHECK(str(n, "namespace") == ns);
        const skc::Array& entries = at(n, "entries").as_array();
        REQUIRE(entries.size() == expected.size());
        for (std::size_t i = 0; i < expected.size(); ++i) {
            const skc::Value& e = entries[i];
            const skc::CacheEntry& want = expected[i]->entry;
            CHECK(str(e, "key") == want.key);
            CHECK(num(e, "size") == want.size);
            CHECK(num(e, "ops") == want.ops);
            CHECK(num(e, "created_unix") == static_cast<std::uint64_t>(want.created_unix));
            CHECK(num(e, "last_used_ns") == static_cast<std::uint64_t>(expected[i]->last_used_s) * 1000000000ULL);
            CHECK(num(e, "compile_ns") == static_cast<std::uint64_t>(want.compile_ns));
            CHECK(str(e, "checksum") == want.checksum.hex());
            CHECK(str(e, "package") == "packages/" + want.key + ".run");
            CHECK(str(e, "package_path") == shown_cache + "/" + ns + "/packages/" + want.key + ".run");
            const skc::Object& components = at(e, "components").as_object();
            REQUIRE(components.size() == expected[i]->key.components.size());
            for (std::size_t k = 0; k < components.size(); ++k) {
                CHECK(components[k].key == expected[i]->key.components[k].first);
                CHECK(components[k].value.as_string() == expected[i]->key.components[k].second);
            }
        }
    };
    check_entries(list[0], ns_b, {&f.b0});
    check_entries(list[1], ns_a, {&f.a0, &f.a1, &f.a2});
    // The key components, by name.
    const skc::Value& a2 = at(list[1], "entries").as_array()[2];
    CHECK(str(at(a2, "components"), "toolchain_version") == "8.0.RC1");
    CHECK(str(at(a2, "components"), "device") == "Ascend910B");
    CHECK(str(at(a2, "components"), "op_count") == "3");
    CHECK(str(at(a2, "components"), "compiler_option[0]") == "--opt=1");
    CHECK(num(a2, "compile_ns") == 4500000000ULL);

    // ls reads only: not even a lock file is created.
    CHECK(skc_test::snapshot(f.cache_dir) == before);

    // An empty namespace.
    const Run cleared = f.run({"cache", "clear", "--base", "base", "--namespace", ns_b});
    CHECK(cleared.status == 0);
    CHECK(f.run({"cache", "ls", "--base", "base", "--namespace", ns_b}).out == ns_b + ": 0 entries, 0 B\n");
}

TEST_CASE("verify: bad entries are reported and removed, exit status 1") {
    Fixture f(/*makeself=*/true);
    const auto untouched = skc_test::snapshot(f.cache_dir);
    const Run clean = f.run({"cache", "verify", "--base", "base"});
    CHECK(clean.status == 0);
    CHECK(clean.err.empty());
    CHECK(clean.out == ns_b + ": checked 1 entry, all good\n" + ns_a + ": checked 3 entries, all good\n");
    CHECK(skc_test::snapshot(f.cache_dir) == untouched);  // a good cache is only read

    const auto before = f.content();
    {  // a1's package changed in place (same size), a2's entry truncated, b0's package gone
        const int fd = ::open(f.package_file(f.a1).c_str(), O_WRONLY);
        REQUIRE(fd >= 0);
        REQUIRE(::pwrite(fd, "XY", 2, 100) == 2);
        ::close(fd);
        fs::resize_file(f.entry_file(f.a2), 20);
        fs::remove(f.package_file(f.b0));
    }
    const auto damaged = f.content();
    const Stored* a_bad[] = {&f.a1, &f.a2};
    std::sort(std::begin(a_bad), std::end(a_bad),
              [](const Stored* x, const Stored* y) { return x->entry.key < y->entry.key; });
    const auto reason = [&](const Stored* s) {
        return s == &f.a1 ? "the package's checksum does not match the entry"
                          : "the entry is unreadable (truncated or altered)";
    };
    const Run r = f.run({"cache", "verify", "--base", "base"});
    CHECK(r.status == 1);
    CHECK(r.err.empty());
    CHECK(r.out == ns_b + ": checked 1 entry, 1 bad\n  " + f.b0.entry.key + ": the package is missing (removed)\n" +
                       ns_a + ": checked 3 entries, 2 bad\n  " + a_bad[0]->entry.key + ": " + reason(a_bad[0]) +
                       " (removed)\n  " + a_bad[1]->entry.key + ": " + reason(a_bad[1]) +
                       " (removed)\n3 bad entries found, 3 removed\n");
    CHECK(f.gone(f.a1));
    CHECK(f.gone(f.a2));
    CHECK(f.gone(f.b0));
    CHECK(f.present(f.a0));
    CHECK(f.content() == Fixture::without(damaged, {&f.a1, &f.a2, &f.b0}));
    CHECK(f.content() == Fixture::without(before, {&f.a1, &f.a2, &f.b0}));

    // The removals are counted as corrupt entries.
    const skc::Value stats = skc::parse_json(f.run({"cache", "stats", "--base", "base", "--json"}).out);
    CHECK(num(at(stats, "total"), "corrupt") == 3);
    CHECK(num(at(stats, "total"), "entries") == 1);

    const Run again = f.run({"cache", "verify", "--base", "base"});
    CHECK(again.status == 0);
    CHECK(again.out == ns_b + ": checked 0 entries, all good\n" + ns_a + ": checked 1 entry, all good\n");
}

TEST_CASE("verify checks the packages themselves: one stored cut short, with its own checksum, is found and removed") {
    Fixture f(/*makeself=*/true);
    // What a full disk did to makeself before packages were checked: it exited 0 after a write
    // error, and the cut package was stored with the checksum of its cut bytes.
    const fs::path whole = f.package_file(f.a2);
    const fs::path cut = f.tmp / "pkgs" / "cut.run";
    const std::string bytes = skc_test::slurp(whole);
    skc_test::spit(cut, bytes.substr(0, bytes.size() - 10));
    {
        skc::CacheConfig quiet;
        quiet.log = skc::null_log();
        auto cache = skc::open_cache(skc::Layout(f.base), "8.0.RC1", "Ascend910B", quiet);
        cache->publish(f.a2.key, cut);
    }
    const auto before = f.content();
    const Run r = f.run({"cache", "verify", "--base", "base", "--namespace", ns_a});
    CHECK(r.status == 1);
    CHECK(r.err.empty());
    CHECK(r.out.rfind(ns_a + ": checked 3 entries, 1 bad\n  " + f.a2.entry.key +
                          ": the package was stored damaged (its checksum matches): the package is " +
                          std::to_string(bytes.size() - 10) + " bytes, its makeself header says " +
                          std::to_string(bytes.size()) + " (",
                      0) == 0);
    CHECK(r.out.find(" (removed)\n1 bad entry found, 1 removed\n") != std::string::npos);
    CHECK(r.out.find(": it was cut short (a write error while it was made?)") != std::string::npos);
    CHECK(f.gone(f.a2));
    CHECK(f.present(f.a0));
    CHECK(f.present(f.a1));
    CHECK(f.content() == Fixture::without(before, {&f.a2}));
    CHECK(f.run({"cache", "verify", "--base", "base"}).status == 0);
}

TEST_CASE("verify --json, and a bad entry in use is reported but kept") {
    Fixture f(/*makeself=*/true);
    const Run clean = f.run({"cache", "verify", "--base", "base", "--json", "--namespace", ns_a});
    CHECK(clean.status == 0);
    CHECK(clean.out ==
          "{\n  \"cache_dir\": \"" + shown_cache +
              "\",\n  \"exists\": true,\n  \"namespaces\": [\n    {\n      \"namespace\": \"" + ns_a +
              "\",\n      \"checked\": 3,\n      \"bad\": []\n    }\n  ],\n  \"total\": {\n    \"checked\": 3,\n"
              "    \"bad\": 0,\n    \"removed\": 0\n  }\n}\n");

    std::optional<Fixture::Pin> pin = f.pin(f.a1);  // a1 is in use ...
    skc_test::spit(f.package_file(f.a0),
                   std::string(fs::file_size(f.package_file(f.a0)), 'z'));  // ... a0 and a1 are damaged
    {
        const int fd = ::open(f.package_file(f.a1).c_str(), O_WRONLY);
        REQUIRE(fd >= 0);
        REQUIRE(::pwrite(fd, "XY", 2, 0) == 2);
        ::close(fd);
    }
    const auto damaged = f.content();
    const Run r = f.run({"cache", "verify", "--base", "base", "--json"});
    CHECK(r.status == 1);
    CHECK(r.err.empty());
    const skc::Value doc = skc::parse_json(r.out);
    CHECK(num(at(doc, "total"), "checked") == 4);
    CHECK(num(at(doc, "total"), "bad") == 2);
    CHECK(num(at(doc, "total"), "removed") == 1);
    const skc::Array& list = at(doc, "namespaces").as_array();
    REQUIRE(list.size() == 2);
    CHECK(str(list[0], "namespace") == ns_b);
    CHECK(num(list[0], "checked") == 1);
    CHECK(at(list[0], "bad").as_array().empty());
    CHECK(str(list[1], "namespace") == ns_a);
    CHECK(num(list[1], "checked") == 3);
    const skc::Array& bad = at(list[1], "bad").as_array();
    REQUIRE(bad.size() == 2);
    std::map<std::string, const skc::Value*> by_key;
    for (const skc::Value& b : bad) by_key[str(b, "key")] = &b;
    REQUIRE(by_key.count(f.a0.entry.key) == 1);
    REQUIRE(by_key.count(f.a1.entry.key) == 1);
    CHECK(str(*by_key[f.a0.entry.key], "reason") == "the package's checksum does not match the entry");
    CHECK(at(*by_key[f.a0.entry.key], "removed").as_bool());
    CHECK(str(*by_key[f.a1.entry.key], "reason") == "the package's checksum does not match the entry");
    CHECK_FALSE(at(*by_key[f.a1.entry.key], "removed").as_bool());
    CHECK(f.gone(f.a0));
    CHECK(f.present(f.a1));
    CHECK(f.content() == Fixture::without(damaged, {&f.a0}));

    // In text, the entry in use says so.
    const Run text = f.run({"cache", "verify", "--base", "base", "--namespace", ns_a});
    CHECK(text.status == 1);
    CHECK(text.out == ns_a + ": checked 2 entries, 1 bad\n  " + f.a1.entry.key +
                          ": the package's checksum does not match the entry (in use, not removed)\n"
                          "1 bad entry found, 0 removed\n");
    // Once it is let go, the next verify removes it.
    pin.reset();
    const Run after = f.run({"cache", "verify", "--base", "base", "--namespace", ns_a});
    CHECK(after.status == 1);
    CHECK(after.out == ns_a + ": checked 2 entries, 1 bad\n  " + f.a1.entry.key +
                           ": the package's checksum does not match the entry (removed)\n"
                           "1 bad entry found, 1 removed\n");
    CHECK(f.gone(f.a1));
    CHECK(f.run({"cache", "verify", "--base", "base"}).status == 0);
}

TEST_CASE("prune --max-entries removes the least recently used entries of each namespace") {
    Fixture f;
    const auto before = f.content();
    const Run r = f.run({"cache", "prune", "--base", "base", "--max-entries", "2"});
    CHECK(r.status == 0);
    CHECK(r.err.empty());
    CHECK(r.out == ns_b + ": removed 0 entries (0 B), 1 left (100 B), 0 skipped because in use\n" + ns_a +
                       ": removed 1 entry (1.0 KiB), 2 left (5.0 KiB), 0 skipped because in use\n"
                       "total: removed 1 entry (1.0 KiB), 3 left (5.1 KiB), 0 skipped because in use\n");
    CHECK(f.gone(f.a0));
    CHECK(f.content() == Fixture::without(before, {&f.a0}));
    // Counted as evictions.
    const skc::Value stats = skc::parse_json(f.run({"cache", "stats", "--base", "base", "--json"}).out);
    CHECK(num(at(stats, "namespaces").as_array()[1], "evictions") == 1);

    const Run json = f.run({"cache", "prune", "--base", "base", "--max-entries", "1", "--json"});
    CHECK(json.status == 0);
    CHECK(json.err.empty());
    CHECK(json.out ==
          "{\n"
          "  \"cache_dir\": \"" +
              shown_cache +
              "\",\n"
              "  \"exists\": true,\n"
              "  \"limits\": {\n"
              "    \"max_bytes\": null,\n"
              "    \"max_entries\": 1,\n"
              "    \"older_than_s\": null\n"
              "  },\n"
              "  \"namespaces\": [\n"
              "    {\n"
              "      \"namespace\": \"" +
              ns_b +
              "\",\n"
              "      \"removed\": 0,\n"
              "      \"removed_bytes\": 0,\n"
              "      \"skipped_in_use\": 0,\n"
              "      \"entries_left\": 1,\n"
              "      \"bytes_left\": 100\n"
              "    },\n"
              "    {\n"
              "      \"namespace\": \"" +
              ns_a +
              "\",\n"
              "      \"removed\": 1,\n"
              "      \"removed_bytes\": 2048,\n"
              "      \"skipped_in_use\": 0,\n"
              "      \"entries_left\": 1,\n"
              "      \"bytes_left\": 3072\n"
              "    }\n"
              "  ],\n"
              "  \"total\": {\n"
              "    \"removed\": 1,\n"
              "    \"removed_bytes\": 2048,\n"
              "    \"skipped_in_use\": 0,\n"
              "    \"entries_left\": 2,\n"
              "    \"bytes_left\": 3172\n"
              "  }\n"
              "}\n");
    CHECK(f.content() == Fixture::without(before, {&f.a0, &f.a1}));
    CHECK(f.present(f.a2));
    CHECK(f.present(f.b0));
}

TEST_CASE("prune --older-than removes entries unused for longer") {
    Fixture f;
    const auto before = f.content();
    const Run r = f.run({"cache", "prune", "--base", "base", "--older-than", "30d"});
    CHECK(r.status == 0);
    CHECK(r.out == ns_b + ": removed 0 entries (0 B), 1 left (100 B), 0 skipped because in use\n" + ns_a +
                       ": removed 1 entry (1.0 KiB), 2 left (5.0 KiB), 0 skipped because in use\n"
                       "total: removed 1 entry (1.0 KiB), 3 left (5.1 KiB), 0 skipped because in use\n");
    CHECK(f.content() == Fixture::without(before, {&f.a0}));

    // Only the namespace asked for: b0 (10 days) stays although it is older than 36 hours.
    const Run json = f.run({"cache", "prune", "--base", "base", "--older-than", "36h", "--namespace", ns_a, "--json"});
    CHECK(json.status == 0);
    const skc::Value doc = skc::parse_json(json.out);
    CHECK(num(at(doc, "limits"), "older_than_s") == 36 * 3600);
    CHECK(at(at(doc, "limits"), "max_bytes").is_null());
    const skc::Array& list = at(doc, "namespaces").as_array();
    REQUIRE(list.size() == 1);
    CHECK(str(list[0], "namespace") == ns_a);
    CHECK(num(list[0], "removed") == 1);
    CHECK(num(list[0], "removed_bytes") == 2048);
    CHECK(num(list[0], "entries_left") == 1);
    CHECK(num(list[0], "bytes_left") == 3072);
    CHECK(num(at(doc, "total"), "removed") == 1);
    CHECK(f.content() == Fixture::without(before, {&f.a0, &f.a1}));

    // Minutes and seconds: a2 was used an hour ago.
    CHECK(f.run({"cache", "prune", "--base", "base", "--older-than", "61m", "--namespace", ns_a}).out ==
          ns_a + ": removed 0 entries (0 B), 1 left (3.0 KiB), 0 skipped because in use\n");
    CHECK(f.run({"cache", "prune", "--base", "base", "--older-than", "3500s", "--namespace", ns_a}).out ==
          ns_a + ": removed 1 entry (3.0 KiB), 0 left (0 B), 0 skipped because in use\n");
    CHECK(f.content() == Fixture::without(before, {&f.a0, &f.a1, &f.a2}));
    CHECK(f.present(f.b0));
}

TEST_CASE("prune --max-size, with an entry in use skipped") {
    Fixture f;
    const auto before = f.content();
    const Run r = f.run({"cache", "prune", "--base", "base", "--max-size", "5K"});
    CHECK(r.status == 0);
    CHECK(r.out.find(ns_a + ": removed 1 entry (1.0 KiB), 2 left (5.0 KiB), 0 skipped because in use\n") !=
          std::string::npos);
    CHECK(f.content() == Fixture::without(before, {&f.a0}));

    const Fixture::Pin pin = f.pin(f.a2);  // the newest is in use
    const Run json = f.run({"cache", "prune", "--base", "base", "--max-size", "2048", "--json"});
    CHECK(json.status == 0);
    CHECK(json.err.empty());
    const skc::Value doc = skc::parse_json(json.out);
    CHECK(num(at(doc, "limits"), "max_bytes") == 2048);
    const skc::Value& a = at(doc, "namespaces").as_array()[1];
    CHECK(str(a, "namespace") == ns_a);
    CHECK(num(a, "removed") == 1);
    CHECK(num(a, "removed_bytes") == 2048);
    CHECK(num(a, "skipped_in_use") == 1);
    CHECK(num(a, "entries_left") == 1);
    CHECK(num(a, "bytes_left") == 3072);
    CHECK(num(at(doc, "total"), "skipped_in_use") == 1);
    CHECK(f.present(f.a2));
    CHECK(f.present(f.b0));
    CHECK(f.content() == Fixture::without(before, {&f.a0, &f.a1}));

    const Run text = f.run({"cache", "prune", "--base", "base", "--max-size", "1k", "--namespace", ns_a});
    CHECK(text.out == ns_a + ": removed 0 entries (0 B), 1 left (3.0 KiB), 1 skipped because in use\n");
    CHECK(f.present(f.a2));

    // Suffixes M, G and T parse (nothing is over such limits here).
    for (const char* size : {"1M", "10G", "2T", "500m"})
        CHECK(f.run({"cache", "prune", "--base", "base", "--max-size", size}).status == 0);
    CHECK(f.content() == Fixture::without(before, {&f.a0, &f.a1}));
}

TEST_CASE("clear removes every entry not in use") {
    Fixture f;
    const auto before = f.content();
    std::optional<Fixture::Pin> pin = f.pin(f.a1);
    const Run r = f.run({"cache", "clear", "--base", "base"});
    CHECK(r.status == 0);
    CHECK(r.err.empty());
    CHECK(r.out == ns_b + ": removed 1 entry, 0 left\n" + ns_a +
                       ": removed 2 entries, 1 left\ntotal: removed 3 entries, 1 left\n");
    CHECK(f.content() == Fixture::without(before, {&f.a0, &f.a2, &f.b0}));
    CHECK(f.present(f.a1));
    // The manifests stay: the namespaces are still there, empty.
    CHECK(fs::is_regular_file(f.cache_dir / (ns_a + ".json")));
    CHECK(fs::is_regular_file(f.cache_dir / (ns_b + ".json")));

    pin.reset();
    const Run json = f.run({"cache", "clear", "--base", "base", "--json"});
    CHECK(json.status == 0);
    CHECK(json.err.empty());
    CHECK(json.out == "{\n  \"cache_dir\": \"" + shown_cache +
                          "\",\n  \"exists\": true,\n  \"namespaces\": [\n"
                          "    {\n      \"namespace\": \"" +
                          ns_b +
                          "\",\n      \"removed\": 0,\n      \"entries_left\": 0\n    },\n"
                          "    {\n      \"namespace\": \"" +
                          ns_a +
                          "\",\n      \"removed\": 1,\n      \"entries_left\": 0\n    }\n"
                          "  ],\n  \"total\": {\n    \"removed\": 1,\n    \"entries_left\": 0\n  }\n}\n");
    CHECK(f.content() == Fixture::without(before, {&f.a0, &f.a1, &f.a2, &f.b0}));
    const skc::Value stats = skc::parse_json(f.run({"cache", "stats", "--base", "base", "--json"}).out);
    CHECK(num(at(stats, "total"), "entries") == 0);
    CHECK(num(at(stats, "total"), "evictions") == 4);
    CHECK(num(at(stats, "total"), "hits") == 4);  // the statistics survive a clear (the pin was a hit)

    // One namespace only.
    Fixture g;
    const auto g_before = g.content();
    CHECK(g.run({"cache", "clear", "--base", "base", "--namespace", ns_b}).out == ns_b + ": removed 1 entry, 0 left\n");
    CHECK(g.content() == Fixture::without(g_before, {&g.b0}));
}

TEST_CASE("symbolic links below the base are refused before anything is touched (exit status 2)") {
    Fixture f;
    const auto before = f.content();
    const fs::path entries = f.cache_dir / ns_a / "entries";
    fs::rename(entries, f.tmp / "elsewhere");
    fs::create_directory_symlink(f.tmp / "elsewhere", entries);
    const Run r = f.run({"cache", "clear", "--base", "base"});
    CHECK(r.status == 2);
    CHECK(r.out.empty());
    CHECK(r.err == "skc cache clear: " + entries.string() + ": component '" + entries.string() +
                       "' is a symbolic link; give the real path instead\n");
    CHECK(f.present(f.b0));  // the other namespace was not cleared either
    CHECK(fs::exists(f.tmp / "elsewhere" / f.a0.entry.key));

    TempDir tmp;
    fs::create_directories(tmp / "real" / "static_kernel_cache");
    fs::create_directories(tmp / "base");
    fs::create_directory_symlink(tmp / "real", tmp / "base" / "static_kernel_compile_outputs");
    const Run link = run_skc(tmp.path(), {"cache", "stats", "--base", "base"});
    CHECK(link.status == 2);
    const std::string outputs = (tmp / "base" / "static_kernel_compile_outputs").string();
    CHECK(link.err == "skc cache stats: " + outputs + "/static_kernel_cache: component '" + outputs +
                          "' is a symbolic link; give the real path instead\n");
}

TEST_CASE(
    "what is not a file where the statistics should be counts as no statistics; a file as cache folder is refused") {
    Fixture f;
    const fs::path stats = f.cache_dir / ns_a / "stats";
    fs::remove(stats);
    fs::create_directory(stats);
    const Run r = f.run({"cache", "stats", "--base", "base", "--json"});
    CHECK(r.status == 0);
    CHECK(r.err.empty());
    CHECK(f.run({"cache", "ls", "--base", "base"}).status == 0);

    TempDir tmp;
    fs::create_directories(tmp / "base" / "static_kernel_compile_outputs");
    skc_test::spit(tmp / "base" / "static_kernel_compile_outputs" / "static_kernel_cache", "not a folder");
    const Run file = run_skc(tmp.path(), {"cache", "ls", "--base", "base"});
    CHECK(file.status == 2);
    CHECK(file.err == "skc cache ls: " + shown_cache + ": not a directory; the cache folder is expected there\n");
}

}  // namespace tools_skc_test
