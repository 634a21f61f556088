// skc/compile_report.hpp: what StaticKernelCompiler::compile() tells its caller: CompileProgress
// while it runs (CompilerSettings::progress), and the CompileReport it returns, with the outcome,
// the counts of each selection step, the time per stage, JSON (`skc compile --json`) and a log line.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "value.hpp"

namespace skc {

/// How far a compile() is, for a progress display (CompilerSettings::progress). Reported from the
/// thread that runs compile(), when a phase begins and, while the compiler runs, as it reports:
///   waiting    before the exchange with the node's other ranks, when there are several:
///              waiting_for is "the node's other ranks" on the leader, "the node's leader (local rank
///              0) compiling or looking up the node's ops" on the others; and on the leader before
///              the cache lookup when another process holds the key's lock (it compiles the key;
///              IndexCache::busy): "another process compiling cache key <hex>";
///   lookup     on the leader, before the cache lookup otherwise (not with the cache off);
///   compiling  when the kernel compiler starts (done 0, total the op info files it gets), then once
///              for each of its progress lines whose done is above the last one reported
///              (docs/file-formats.md, "Progress lines"): done, total and op are the line's;
///   installing before the package is installed into the op library (every rank that installs).
/// A compiler that prints no progress lines gets only the first compiling report. Nothing else is
/// reported after the lookup on a cache hit, nor during the reselect.
struct CompileProgress {
    enum class Phase : unsigned char { waiting, lookup, compiling, installing };
    Phase phase = Phase::compiling;
    std::size_t done = 0;                 // compiling: op info files done
    std::size_t total = 0;                // compiling: op info files in all
    std::string op{};                     // compiling: the op info file just done; empty in the first report
    std::string waiting_for{};            // waiting: what for, in words
    std::string key{};                    // the cache key in hex once known (empty while waiting for ranks)
    std::chrono::nanoseconds elapsed{0};  // since the phase began: the wait, the lookup, the compiler's start
};

/// The phase's fixed identifier: `waiting`, `lookup`, `compiling`, `installing`.
constexpr std::string_view to_string(CompileProgress::Phase p) noexcept {
    switch (p) {
    case CompileProgress::Phase::waiting: return "waiting";
    case CompileProgress::Phase::lookup: return "lookup";
    case CompileProgress::Phase::compiling: return "compiling";
    case CompileProgress::Phase::installing: return "installing";
    }
    return {};
}

/// How a compile() ended.
enum class CompileOutcome : unsigned char {
    skipped,     // nothing selected (docs/spec.md section 6, step 5)
    hit,         // the cache had the package
    waited,      // another process compiled it while this one waited
    compiled,    // compiled here, stored in the cache
    disabled,    // compiled here, the cache is off
    downloaded,  // the remote tier had the package (another node compiled it): downloaded, stored locally
};

/// The outcome's fixed identifier, for machine-readable output and between ranks: `skipped`, `hit`,
/// `waited`, `compiled`, `disabled`, `downloaded`.
constexpr std::string_view to_string(CompileOutcome o) noexcept {
    switch (o) {
    case CompileOutcome::skipped: return "skipped";
    case CompileOutcome::hit: return "hit";
    case CompileOutcome::waited: return "waited";
    case CompileOutcome::compiled: return "compiled";
    case CompileOutcome::disabled: return "disabled";
    case CompileOutcome::downloaded: return "downloaded";
    }
    return {};
}

/// The outcome for people: `skipped`, `hit`, `hit after waiting`, `miss, compiled`,
/// `cache disabled, compiled`, `remote hit, downloaded`.
constexpr std::string_view describe(CompileOutcome o) noexcept {
    switch (o) {
    case CompileOutcome::skipped: return "skipped";
    case CompileOutcome::hit: return "hit";
    case CompileOutcome::waited: return "hit after waiting";
    case CompileOutcome::compiled: return "miss, compiled";
    case CompileOutcome::disabled: return "cache disabled, compiled";
    case CompileOutcome::downloaded: return "remote hit, downloaded";
    }
    return {};
}

/// What one compile() did.
struct CompileReport {
    CompileOutcome outcome = CompileOutcome::skipped;
    std::string key;                // the cache key in hex; empty when skipped
    std::filesystem::path run_dir;  // ts<timestamp>_pid<pid>_outputs
    std::filesystem::path package;  // the package used (the cache's copy on a hit or after a compile)
    std::string installed;          // stem of the package installed last; empty when nothing was installed

    std::size_t recorded = 0;   // distinct ops (`<pid>_debug`)
    std::size_t targets = 0;    // `<pid>`
    std::size_t supported = 0;  // `<pid>_opcompile`
    std::size_t selected = 0;   // compiled (or looked up)
    std::size_t blacklisted = 0;
    std::size_t already_compiled = 0;  // by this process earlier
    std::size_t unsupported = 0;       // only when selecting from `<pid>_debug`
    std::size_t duplicates = 0;

    std::size_t local_rank = 0;        // this rank among the ranks of its node (0: the leader)
    std::size_t local_world_size = 1;  // ranks on the node
    std::size_t gathered = 0;          // ops the node compiled or looked up: the union of its ranks' selections
    std::size_t known_failed = 0;      // gathered ops left out: the compiler failed on them before (known_failures.hpp)
    std::size_t failed = 0;            // gathered ops the compiler failed on in this compile, left out and remembered
    std::size_t isolation_compiles = 0;  // extra compiles spent finding those (detail/isolate.hpp)
    std::size_t ops_compiled = 0;  // counts.compiled: ops of the node's set the kernel compiler built in this compile
    std::size_t ops_reused = 0;    // counts.reused: ops of the set whose kernels came from cached packages
    std::size_t cached_packages = 0;                   // the cached packages those came from
    std::vector<std::string> packages;                 // stems of the packages this rank installed, in install order
    std::vector<std::filesystem::path> package_files;  // those packages' files (the leader's go to its followers)
    bool extracted = false;                            // this rank extracted the package (the node's one install)
    bool reused = false;                               // this rank installed an extraction kept from an earlier holder

    /// Time per stage, in flow order: layout, record, select, [gather], key, cache, compile, install,
    /// reselect. A skipped compile ends after select; install and reselect are absent when nothing
    /// was installed; compile is 0 on a cache hit. With several ranks, `gather` is the time spent
    /// exchanging and waiting for the other ranks, and only the leader has key, cache and compile
    /// (a follower's install is holding the package the leader installed).
    std::vector<std::pair<std::string, std::chrono::nanoseconds>> stages;

    [[nodiscard]] std::chrono::nanoseconds stage(std::string_view name) const noexcept {
        for (const auto& [n, t] : stages)
            if (n == name) return t;
        return std::chrono::nanoseconds{0};
    }
    [[nodiscard]] std::chrono::nanoseconds total() const noexcept {
        std::chrono::nanoseconds t{0};
        for (const auto& s : stages) t += s.second;
        return t;
    }
    [[nodiscard]] bool cache_hit() const noexcept {
        return outcome == CompileOutcome::hit || outcome == CompileOutcome::waited ||
               outcome == CompileOutcome::downloaded;
    }

    /// The report as JSON (`skc compile --json`; docs/cli.md lists the fields).
    [[nodiscard]] Value to_value() const {
        Object counts{{"recorded", Value(recorded)},       {"targets", Value(targets)},
                      {"supported", Value(supported)},     {"selected", Value(selected)},
                      {"blacklisted", Value(blacklisted)}, {"already_compiled", Value(already_compiled)},
                      {"unsupported", Value(unsupported)}, {"duplicates", Value(duplicates)},
                      {"gathered", Value(gathered)},       {"known_failed", Value(known_failed)},
                      {"failed", Value(failed)},           {"isolation_compiles", Value(isolation_compiles)},
                      {"compiled", Value(ops_compiled)},   {"reused", Value(ops_reused)}};
        Array stems;
        for (const std::string& p : packages) stems.emplace_back(p);
        Object times;
        for (const auto& [n, t] : stages) times.push_back({n, Value(static_cast<double>(t.count()) / 1e6)});
        return Value(Object{{"outcome", Value(to_string(outcome))},
                            {"cache_hit", Value(cache_hit())},
                            {"key", Value(key)},
                            {"run_dir", Value(run_dir.string())},
                            {"package", Value(package.string())},
                            {"installed", Value(installed)},
                            {"packages", Value(std::move(stems))},
                            {"extracted", Value(extracted)},
                            {"reused", Value(reused)},
                            {"local_rank", Value(local_rank)},
                            {"local_world_size", Value(local_world_size)},
                            {"counts", Value(std::move(counts))},
                            {"stage_ms", Value(std::move(times))},
                            {"total_ms", Value(static_cast<double>(total().count()) / 1e6)}});
    }

    /// What was compiled and what came from the cache, for people: `compiled 16 of 48 ops (32 from
    /// 1 cached package)`; `compiled 12 of 12 ops` on a miss; `compiled 0 of 12 ops (12 from 1 cached
    /// package)` on a hit; empty when nothing was compiled or looked up.
    [[nodiscard]] std::string work() const {
        if (ops_compiled + ops_reused == 0) return {};
        std::string s =
            "compiled " + std::to_string(ops_compiled) + " of " + std::to_string(ops_compiled + ops_reused) + " ops";
        if (ops_reused > 0)
            s += " (" + std::to_string(ops_reused) + " from " + std::to_string(cached_packages) + " cached package" +
                 (cached_packages == 1 ? ")" : "s)");
        return s;
    }

    /// One line for a log.
    [[nodiscard]] std::string summary() const {
        std::string s = "static kernel compile: " + std::string(describe(outcome));
        if (!key.empty()) s += ", key " + key;
        s += ", " + std::to_string(selected) + " of " + std::to_string(recorded) + " ops selected";
        if (local_world_size > 1)
            s += " (local rank " + std::to_string(local_rank) + " of " + std::to_string(local_world_size) + ", " +
                 std::to_string(gathered) + " gathered)";
        if (failed > 0)
            s += ", " + std::to_string(failed) + " failed in the compiler (found with " +
                 std::to_string(isolation_compiles) + " more compiles) and left out";
        if (known_failed > 0) s += ", " + std::to_string(known_failed) + " known to fail left out";
        if (const std::string w = work(); !w.empty()) s += ", " + w;
        if (!installed.empty()) s += ", installed " + installed;
        const auto ms = static_cast<double>(total().count()) / 1e6;
        return s + ", " + std::to_string(static_cast<long long>(ms)) + " ms";
    }
};

}  // namespace skc
