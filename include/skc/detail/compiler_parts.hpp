// skc/detail/compiler_parts.hpp: the pieces of StaticKernelCompiler's steps that need none of its
// policies: checking the settings, the compiler's fingerprint, the requests and options it hands
// on, the message from the node's leader to the other ranks, and its reports.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../cache_explain.hpp"
#include "../compile_report.hpp"
#include "../compiler_check.hpp"
#include "../compiler_settings.hpp"
#include "../error.hpp"
#include "../layout.hpp"
#include "../log.hpp"
#include "../op_info_io.hpp"
#include "../policy/gather.hpp"
#include "../policy/filesystem_storage.hpp"
#include "../options.hpp"
#include "../policy/installer.hpp"
#include "../policy/invoker.hpp"
#include "../policy/remote.hpp"
#include "../select.hpp"
#include "../session_files.hpp"
#include "../value.hpp"
#include "isolate.hpp"
#include "stage_clock.hpp"

namespace skc::detail {

/// Checks what the constructor is given (Error naming the option or name) and applies the cache
/// mode the options ask for to `settings`; returns the cache namespace's stem.
inline std::string check_settings(const Options& options, CompilerSettings& settings) {
    if (!options.static_kernel_compile)
        throw Error(Errc::invalid_option, "static kernel compilation is off (static_kernel_compile is false)",
                    ErrorContext{{}, {}, "static_kernel_compile"});
    if (settings.device.empty()) throw Error(Errc::invalid_argument, "the device name is empty");
    if (settings.toolchain_version.empty()) throw Error(Errc::invalid_argument, "the toolchain version is empty");
    if (options.jobs == 0) throw Error(Errc::invalid_option, "jobs must be at least 1", ErrorContext{{}, {}, "jobs"});
    std::string stem = Layout::cache_stem(settings.toolchain_version, settings.device);  // checks both names
    if (!settings.op_library.empty()) check_path_safety(settings.op_library, "op_library");
    if (const std::optional<CacheMode> m = requested_cache_mode(options)) settings.cache.mode = *m;
    return stem;
}

/// The remote tier the options or the environment ask for (resolve_remote_config); nullptr when
/// none is. A bad URL is an error; a program whose Remote policy is NoRemote says once that it has
/// none.
template <class Remote>
std::unique_ptr<RemoteTier> open_remote(const Options& options, const LogSink& log) {
    const std::optional<RemoteConfig> rc = resolve_remote_config(options);
    if (!rc) return nullptr;
    std::unique_ptr<RemoteTier> tier = Remote::open(*rc);
    if (!tier && log)
        log(LogLevel::warning,
            "a remote cache is configured (remote_cache or SKC_REMOTE_CACHE), but this program "
            "has no remote tier (its Remote policy is NoRemote): the local cache only");
    return tier;
}

/// The fingerprint of the kernel compiler at `compiler` as options.compiler_check says, remembered
/// beside the cache when it is on (it is then read and written anyway).
inline std::string fingerprint(const std::filesystem::path& compiler, const Options& options, const Layout& layout,
                               CacheMode mode) {
    const bool read_only = mode == CacheMode::read_only;
    std::filesystem::path memo;
    if (options.cache_enabled()) {
        memo = resolve_cache_dir(options, layout.cache_dir(), mode);
        if (!read_only) make_cache_dir(memo);
    }
    return compiler_fingerprint(compiler, options.compiler_check, memo,
                                read_only ? MemoAccess::read_only : MemoAccess::read_write);
}

/// `ops` as a recording session would have recorded them, in order; repeated contents count once.
template <class Targets, class Support>
std::shared_ptr<std::vector<RecordedOp>> record_ops(std::vector<OpRecord> ops, const Targets& targets,
                                                    const Support& support) {
    auto recorded = std::make_shared<std::vector<RecordedOp>>();
    recorded->reserve(ops.size());
    std::unordered_set<Digest, DigestHash> seen;
    for (OpRecord& r : ops) {
        validate(r);
        const Digest d = digest(r);
        if (!seen.insert(d).second) continue;
        const bool target = targets.is_target(r.op_type), supported = support.supports(r.op_type);
        recorded->push_back(RecordedOp{d, std::move(r), target, supported});
    }
    return recorded;
}

/// The cache key of the gathered set: its digests (named, when the ranks gave names) and every
/// kernel-changing input.
inline CacheKey cache_key_for(const GatheredSet& set, const Options& options, const CompilerSettings& settings) {
    CacheKey k = make_cache_key(
        set.digests, key_inputs(options, settings.toolchain_version, settings.device, settings.compiler_fingerprint));
    if (set.names.size() == set.digests.size())
        for (std::size_t i = 0; i < set.digests.size(); ++i) k.ops.push_back(KeyOp{set.digests[i], set.names[i]});
    return k;
}

/// A cache entry's package copied out of a storage that keeps no files (MemoryStorage) into `dir`.
template <class Storage>
std::filesystem::path package_copy(const Storage& storage, const CacheEntry& entry, const std::filesystem::path& dir) {
    const std::optional<std::string> bytes = storage.read(entry.package);
    if (!bytes)
        throw Error(Errc::corrupt, "the cache entry's package disappeared while in use",
                    ErrorContext{entry.package, {}, {}});
    FilesystemStorage(dir).write(entry.key + ".run", *bytes);
    return dir / (entry.key + ".run");
}

/// A cache hit's package as a file: the storage's own file, or a copy in the run folder for
/// storages that keep no files (MemoryStorage). `CacheFits`: the host's cache is an IndexCache (not
/// the stand-in its static_asserts report on), so that it has a storage.
template <bool CacheFits, class Hit, class Cache>
std::filesystem::path hit_package(const Hit& hit, const RunLayout& run, Cache* cache) {
    if (hit.package_path) return *hit.package_path;
    if constexpr (CacheFits) {
        return package_copy(cache->storage(), hit.entry, run.dir());
    } else {
        throw Error(Errc::corrupt, "the cache returned a package without a file");
    }
}

/// The selection's counts into the report.
inline void count_selection(const SessionPlan& plan, CompileReport& rep) {
    rep.recorded = plan.recorded.recorded;
    rep.targets = plan.recorded.targets;
    rep.supported = plan.recorded.supported;
    rep.selected = plan.selected.size();
    rep.blacklisted = plan.count(Verdict::blacklisted);
    rep.already_compiled = plan.count(Verdict::already_compiled);
    rep.unsupported = plan.count(Verdict::unsupported);
    rep.duplicates = plan.count(Verdict::duplicate);
}

/// The kernel compiler's request for the op info files in `json_dir`, its output in `output_dir`.
inline CompileRequest compile_request(const Options& options, const CompilerSettings& settings,
                                      std::filesystem::path json_dir, std::filesystem::path output_dir) {
    CompileRequest req;
    req.json_dir = std::move(json_dir);
    req.device = settings.device;
    req.jobs = options.jobs;
    req.output_dir = std::move(output_dir);
    req.log_level = options.log_level;
    req.extra_args = options.compiler_options;
    req.timeout = options.compile_timeout;
    return req;
}

inline CompileOutcome compile_outcome(CacheResult r) noexcept {
    switch (r) {
    case CacheResult::hit: return CompileOutcome::hit;
    case CacheResult::waited: return CompileOutcome::waited;
    case CacheResult::compiled: return CompileOutcome::compiled;
    case CacheResult::disabled: return CompileOutcome::disabled;
    case CacheResult::downloaded: return CompileOutcome::downloaded;
    }
    return CompileOutcome::compiled;
}

/// On a miss in the cache folder `cache_root` (empty: the cache is not on disk): one line naming the
/// nearest entry and what differs, when one is near (cache_explain.hpp). A miss is about to
/// compile: reading the entries is cheap beside it.
inline void explain_miss_in_log(const std::filesystem::path& cache_root, const CacheKey& key, const LogSink& log) {
    if (cache_root.empty() || !log) return;
    try {
        if (const std::optional<MissExplanation> x = explain_miss(cache_root, key); x && x->near())
            log(LogLevel::info, "cache miss for key " + key.hex() + ": " + x->summary());
    } catch (const std::exception& e) {  // an explanation is never worth a failed compile
        log(LogLevel::debug, std::string("cannot explain the cache miss: ") + e.what());
    }
}

inline InstallOptions install_options(const CompilerSettings& settings, bool cache_on) {
    InstallOptions io;
    io.backend = settings.backend;
    io.persistent = settings.persistent_install;
    io.timeout = settings.install_timeout;
    // Extractions are kept for the next process within the cache's size limit; packages without a
    // cache have fresh names every time, so keeping one would never pay.
    io.keep_bytes = !cache_on                              ? 0
                    : settings.cache.limits.max_bytes != 0 ? settings.cache.limits.max_bytes
                                                           : default_cache_limits.max_bytes;
    return io;
}

/// Hands `p` to settings.progress, if any; what it throws ends here.
inline void report_progress(const CompilerSettings& settings, const CompileProgress& p) noexcept {
    if (!settings.progress) return;
    try {
        settings.progress(p);
    } catch (const std::exception& e) {
        try {
            if (settings.log) settings.log(LogLevel::debug, std::string("the progress callback failed: ") + e.what());
        } catch (...) {}
    } catch (...) {}
}

/// Notes an install in the report (the package `rep.package`) and keeps its handle.
inline void note_install(Installation inst, CompileReport& rep, std::vector<Installation>& installs) {
    rep.installed = inst.stem();
    rep.packages.push_back(rep.installed);
    rep.package_files.push_back(rep.package);
    rep.extracted = inst.extracted();
    rep.reused = inst.reused();
    installs.push_back(std::move(inst));
}

/// The first installs of `packages` (of the cache outcomes `outs`): those the Install policy makes in
/// one go without extracting (InstallerTraits::installs_kept), noted in the report. Returns how many.
template <class Install, class Outcome>
std::size_t install_kept(Install& installer, const CompilerSettings& settings, bool cache_on,
                         const std::vector<Outcome>& outs, const std::vector<std::filesystem::path>& packages,
                         CompileReport& rep, std::vector<Installation>& installs, StageClock& clock) {
    if constexpr (InstallerTraits<Install>::installs_kept) {
        if (settings.op_library.empty()) return 0;
        report_progress(settings, {.phase = CompileProgress::Phase::installing, .key = rep.key});
        std::vector<InstallRequest> requests;
        for (std::size_t i = 0; i < packages.size(); ++i) {
            requests.push_back({packages[i], install_options(settings, cache_on)});
            if (outs[i].hit) requests.back().options.checksum = outs[i].hit->entry.checksum;
        }
        std::vector<Installation> done = installer.install_kept(requests, settings.op_library);
        for (std::size_t i = 0; i < done.size(); ++i) {
            rep.package = packages[i];
            note_install(std::move(done[i]), rep, installs);
        }
        if (!done.empty()) clock.lap("install");
        return done.size();
    } else {
        return 0;
    }
}

/// Reports the compile of `total` op info files under `key` as starting, and has `req` forward the
/// kernel compiler's progress lines to settings.progress with the time since it started (`done`
/// strictly increases).
inline void report_compiling(CompileRequest& req, const CompilerSettings& settings, const std::string& key,
                             std::size_t total) {
    if (settings.progress)
        req.on_progress = [&settings, key, started = std::chrono::steady_clock::now(), last_done = std::size_t{0}](
                              std::size_t done, std::size_t all, std::string_view op) mutable {
            if (done <= last_done) return;
            last_done = done;
            report_progress(settings, {.phase = CompileProgress::Phase::compiling,
                                       .done = done,
                                       .total = all,
                                       .op = std::string(op),
                                       .key = key,
                                       .elapsed = std::chrono::steady_clock::now() - started});
        };
    report_progress(settings, {.phase = CompileProgress::Phase::compiling, .total = total, .key = key});
}

/// The kernel compiler's run on a miss, for the host's cache: the op info files of every rank (the
/// host's writer done, the others' linked in), the Invoker, and a package that can be installed (a
/// full disk can cut one short; it never enters the cache). `elapsed`: the compiler's time.
template <class Invoker, class Host>
struct KernelCompile {
    Invoker& invoker;
    Host& host;
    const RunLayout& run;
    const GatheredSet& set;
    const CacheKey& key;
    std::chrono::nanoseconds elapsed{0};

    std::filesystem::path operator()() {
        const CompilerSettings& settings = host.settings_;
        if (settings.cache.mode != CacheMode::recache && host.cache_)
            explain_miss_in_log(host.cache_root_, key, settings.cache.log);
        host.writer_.wait();
        if (set.materialize) set.materialize();
        CompileRequest req = compile_request(host.options_, settings, set.dir, run.dir());
        std::error_code ec;
        std::filesystem::remove(req.output_dir / failed_ops_file, ec);  // an earlier attempt's list
        report_compiling(req, settings, key.hex(), set.digests.size());
        CompileResult res;
        try {
            res = invoker.compile(req);
        } catch (const Error& e) {
            // The ops at fault, if the failure is theirs: the host leaves them out and compiles the rest.
            std::optional<OpsFailed> failed = find_failed_ops(
                invoker, req, set, e, run.dir() / "finding_failed_ops", [&](std::size_t i, std::size_t most) {
                    report_progress(settings, {.phase = CompileProgress::Phase::waiting,
                                               .waiting_for = "the kernel compiler failed: finding the ops at fault, "
                                                              "trial compile " +
                                                              std::to_string(i) + " of at most " + std::to_string(most),
                                               .key = key.hex()});
                });
            if (!failed) throw;
            throw std::move(*failed);
        }
        elapsed = res.elapsed;
        if (std::optional<std::string> fault = host.package_fault(res.package))
            throw Error(Errc::compile_failed,
                        "the compiler's package is unusable, so it is neither stored nor installed: " + *fault,
                        ErrorContext{res.package.string(), {}, {}});
        return res.package;
    }
};

/// Whether another process compiles `key` in `cache` right now, so that the lookup is about to wait
/// (IndexCache::busy); asked only when someone hears of it (settings.progress), false on any doubt
/// (the lookup waits anyway).
template <class Cache>
bool key_busy(Cache& cache, const CacheKey& key, const CompilerSettings& settings) noexcept {
    if (!settings.progress) return false;
    try {
        return cache.busy(key);
    } catch (...) {
        return false;
    }
}

/// The progress report before the cache lookup of `key`: waiting, when another process compiles it.
template <class Cache>
void report_lookup(Cache& cache, const CacheKey& key, const CompilerSettings& settings) {
    if (key_busy(cache, key, settings))
        report_progress(settings, {.phase = CompileProgress::Phase::waiting,
                                   .waiting_for = "another process compiling cache key " + key.hex(),
                                   .key = key.hex()});
    else report_progress(settings, {.phase = CompileProgress::Phase::lookup, .key = key.hex()});
}

/// What the host gives its Gather policy: this rank's selection and its files, the leader's time
/// budget, and the background writer of the op info folders.
inline GatherRequest gather_request(const Layout& layout, const RunLayout& run, const SessionPlan& plan,
                                    const Options& options, const CompilerSettings& settings, FileWriter& writer) {
    return GatherRequest{layout,
                         run,
                         plan.selected,
                         plan.compile_dir(),
                         std::chrono::duration_cast<std::chrono::nanoseconds>(options.compile_timeout) +
                             std::chrono::duration_cast<std::chrono::nanoseconds>(settings.install_timeout),
                         [&writer] { writer.wait(); },
                         [&writer] { writer.start(); },
                         [&writer](std::function<void()> job) { writer.defer(std::move(job)); }};
}

/// The progress report of a rank before the exchange with the node's others.
inline void report_waiting_for_ranks(const CompilerSettings& settings, std::size_t local_rank) {
    report_progress(settings, {.phase = CompileProgress::Phase::waiting,
                               .waiting_for = local_rank == 0 ? "the node's other ranks"
                                                              : "the node's leader (local rank 0) compiling or "
                                                                "looking up the node's ops"});
}

/// The warning for a cached package (entry `hex`) that cannot be installed because it is damaged.
inline void warn_damaged(const LogSink& log, const std::string& hex, const Error& e, const std::string& fault) {
    if (log)
        log(LogLevel::warning, "the cached package for key " + hex + " cannot be installed (" + e.message() +
                                   "); it is damaged (" + fault + "), so it is discarded and compiled again");
}

/// Waits for the op info folders still being written; an error in writing them is logged (for a
/// destructor, which cannot throw it).
inline void wait_for_writer(FileWriter& writer, const LogSink& log) noexcept {
    try {
        writer.wait();
    } catch (const std::exception& e) {
        try {
            if (log)
                log(LogLevel::warning,
                    std::string("the op info folders of the last compile are incomplete: ") + e.what());
        } catch (...) {}
    }
}

/// What the node's leader tells the other ranks: the outcome, the key, the counts, and the packages
/// it installed, in order (`install`: one, or a cover's parts and the rest's; none when it
/// installed nothing), which each of them installs too.
inline Value leader_message(const CompileReport& rep) {
    Array files;
    for (const std::filesystem::path& p : rep.package_files) files.emplace_back(p.string());
    return Value(Object{{"outcome", Value(to_string(rep.outcome))},
                        {"install", Value(std::move(files))},
                        {"key", Value(rep.key)},
                        {"package", Value(rep.package.string())},
                        {"installed", Value(rep.installed)},
                        {"gathered", Value(rep.gathered)},
                        {"known_failed", Value(rep.known_failed)},
                        {"failed", Value(rep.failed)},
                        {"compiled", Value(rep.ops_compiled)},
                        {"reused", Value(rep.ops_reused)},
                        {"cached_packages", Value(rep.cached_packages)}});
}

/// `set` and the ops of `plan` that this process compiled before (verdict already_compiled; their
/// packages are installed), for the key only: it names no folder. A cover of it finds the packages of
/// those ops among the cached ones (the in-process rule as a case of covers, docs/cache.md).
inline GatheredSet with_earlier(const GatheredSet& set, const SessionPlan& plan) {
    GatheredSet whole{{}, set.digests, set.names, set.ranks, {}};
    std::unordered_set<Digest, DigestHash> seen(set.digests.begin(), set.digests.end());
    for (const Decision& d : plan.decisions)
        if (d.verdict == Verdict::already_compiled && seen.insert(d.digest).second) {
            whole.digests.push_back(d.digest);
            whole.names.push_back(d.name);
        }
    return whole;
}

/// A leader's attempt at its set starts with nothing installed or reused (an earlier attempt's
/// installs stay held, but the report tells of the last).
inline void start_lead(CompileReport& rep) noexcept {
    rep.cached_packages = 0;
    rep.packages.clear();
    rep.package_files.clear();
}

/// Puts `remote` behind `cache` (not behind a read-only one: that is said at info level).
template <class Cache>
void attach_remote(Cache& cache, std::unique_ptr<RemoteTier> remote, const std::string& stem, bool read_only,
                   const LogSink& log) {
    if (!remote) return;
    if (!read_only) cache.set_remote(std::move(remote), stem);
    else if (log) log(LogLevel::info, "the cache is read-only: the remote cache " + remote->where() + " is not used");
}

/// counts.compiled and counts.reused of the leader's set of `n` ops (what was left of the gathered
/// set once the failing ops were left out), of which the package looked up or compiled under a key
/// of its own holds `built` (all n, or a cover's delta; the cover's parts are counted already):
/// from the outcome of that package's lookup.
template <bool CacheFits, class Cache>
void count_work(std::size_t n, std::size_t built, CompileReport& rep, Cache* cache) {
    const bool cached = rep.cache_hit();
    rep.ops_compiled = cached ? 0 : built;
    rep.ops_reused = n - rep.ops_compiled;
    if (cached && built > 0) ++rep.cached_packages;
    if constexpr (CacheFits)
        if (cache) cache->count_ops(rep.ops_compiled, rep.ops_reused);
}

/// The leader's message into a follower's report; the packages the leader installed, in order.
inline std::vector<std::filesystem::path> read_leader_message(const Value& message, CompileReport& rep) {
    auto text = [&](std::string_view k) { return string_member(message, k); };
    const std::string outcome = text("outcome");
    for (CompileOutcome o : {CompileOutcome::skipped, CompileOutcome::hit, CompileOutcome::waited,
                             CompileOutcome::compiled, CompileOutcome::disabled, CompileOutcome::downloaded})
        if (to_string(o) == outcome) rep.outcome = o;
    rep.key = text("key");
    rep.package = text("package");
    for (auto [name, count] :
         {std::pair{"gathered", &rep.gathered}, std::pair{"known_failed", &rep.known_failed},
          std::pair{"failed", &rep.failed}, std::pair{"compiled", &rep.ops_compiled},
          std::pair{"reused", &rep.ops_reused}, std::pair{"cached_packages", &rep.cached_packages}})
        if (const Value* v = message.find(name); v && v->is_number()) *count = static_cast<std::size_t>(v->as_double());
    std::vector<std::filesystem::path> install;
    if (const Value* v = message.find("install"); v && v->is_array())
        for (const Value& p : v->as_array())
            if (p.is_string()) install.emplace_back(p.as_string());
    return install;
}

/// A hit, or a miss answered by a cover (IndexCache::cover; docs/cache.md, covers): the cached
/// packages whose ops lie inside `set` (on a hit, the key's own), pinned in `pin`, and the rest (the delta, its op info
/// files in `delta/` of the run folder) looked up or compiled under its own key by `build(delta)` (a cache outcome);
/// then every part's package and the delta's installed in that order by `install(outcomes, packages)`, false when
/// one is damaged (discarded). `package_of(hit)` is a hit's package file. Returns the delta's size; nullopt when there
/// is no cover, when a package proves damaged, or when the compiler fails on every op of the delta: that is the ops'
/// fault only beside the set's others, so the whole set's compile is to find which (isolate.hpp).
template <class Cache, class Build, class Install, class PackageOf>
std::optional<std::size_t> cover_step(Cache& cache, const CacheKey& key, const GatheredSet& set, const RunLayout& run,
                                      CompileReport& rep, StageClock& clock, std::shared_ptr<void>& pin, Build&& build,
                                      Install&& install, PackageOf&& package_of) {
    auto cover = cache.cover(key);
    if (cover.parts.empty()) return std::nullopt;
    rep.cached_packages = cover.parts.size();
    const bool complete = cover.whole || cover.composite;
    const GatheredSet delta = complete ? GatheredSet{} : without(set, cover.covered, run.dir() / "delta");
    auto pins = std::make_shared<std::vector<typename Cache::Outcome>>(cover.parts.size());
    for (std::size_t i = 0; i < cover.parts.size(); ++i) (*pins)[i].hit = std::move(cover.parts[i]);
    pin = pins;
    rep.outcome = CompileOutcome::hit;
    std::filesystem::path rest;  // the delta's package
    if (delta.digests.empty()) {
        clock.split("cache", "compile", std::chrono::nanoseconds{0});
    } else {
        try {
            pins->push_back(build(delta));
        } catch (const Error& e) {
            if (!may_be_ops_fault(e)) throw;
            return std::nullopt;
        }
        rest = rep.package;
    }
    std::vector<std::filesystem::path> packages;  // the parts', then the delta's
    for (std::size_t i = 0; i < pins->size(); ++i)
        packages.push_back(i < cover.parts.size() ? package_of(*(*pins)[i].hit) : rest);
    if (!install(*pins, packages)) return std::nullopt;
    if (!complete) {  // remembered, so that the next cover of the set is one lookup
        std::vector<CachePart> parts;
        std::chrono::nanoseconds saved{0};
        for (const auto& out : *pins)
            if (out.hit) {
                parts.push_back(CachePart{out.hit->entry.key, out.hit->entry.size, out.hit->entry.checksum});
                saved += std::chrono::nanoseconds(out.hit->entry.compile_ns);
            }
        // Only when the packages hold every op of the key: ops compiled before by this process and
        // not in a part are held by its own installs (with_earlier).
        std::unordered_set<Digest, DigestHash> held(delta.digests.begin(), delta.digests.end());
        held.insert(cover.covered.begin(), cover.covered.end());
        const bool all =
            std::all_of(key.ops.begin(), key.ops.end(), [&](const KeyOp& op) { return held.count(op.digest) != 0; });
        if (all && parts.size() == pins->size()) cache.record_composite(key, parts, saved);
    }
    return delta.digests.size();
}

}  // namespace skc::detail
