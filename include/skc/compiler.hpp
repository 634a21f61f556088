// skc/compiler.hpp: StaticKernelCompiler, the host that walks the flow of docs/spec.md once per call.
//
//   layout     a fresh run folder `ts<timestamp>_pid<pid>_outputs/` under the resolved base
//   record     the recording session's ops, taken over in memory
//   select     the op info folders and the selection (blacklist, already compiled by this host,
//              duplicates), decided in memory; a background thread writes the folders once the
//              lookup is done (session_files.hpp), before the kernel compiler starts
//   gather     with several ranks, the node's leader gathers every rank's selection (policy/gather.hpp)
//   key        on the leader: the digest of the gathered set and every kernel-changing input
//   lookup or  on the leader: a cache hit; or a cover, cached packages inside the set (those of the
//   compile    ops this process compiled before among them) and a compile of the rest; or a
//              single-flight compile through the Invoker (one process per key compiles)
//   install    on every rank: the package into the op library (the leader extracts it, the other
//              ranks hold the leader's extraction)
//   reselect   on every rank: the hook that makes the runtime use the installed kernels
//
// Each step is one member function below, in this order. Every role is a policy with a default
// (policies.hpp), so `StaticKernelCompiler<MyInvoker>` is a working configuration; change one by name
// and keep the others (`StaticKernelCompiler<MyInvoker, with_gather<LocalFsGather>>`), or give them
// by position. A policy that does not fit gets one static_assert per missing member, naming the
// member and its signature, instead of a page of template errors.
//
// Packages from the cache are installed from the cache's copy, so every process that finds the
// same key installs the same package (stem = the key in hex) and the installer's reference count
// joins them; with the cache off the freshly compiled `static_kernel_<datetime>.run` is installed.
// Installs live as long as the compiler object; persistent ones (InstallOptions::persistent) stay
// after it and after the process, until uninstalled.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "compile_report.hpp"
#include "compiler_settings.hpp"
#include "detail/compiler_parts.hpp"
#include "detail/stage_clock.hpp"
#include "error.hpp"
#include "known_failures.hpp"
#include "layout.hpp"
#include "options.hpp"
#include "policies.hpp"
#include "recorder.hpp"
#include "select.hpp"
#include "value.hpp"

namespace skc {

template <class Invoker, class... PolicyList>
class StaticKernelCompiler {
    using Chosen = detail::chosen_policies<PolicyList...>;

public:
    using Storage = typename Chosen::template type<PolicyRole::storage>;
    using Lock = typename Chosen::template type<PolicyRole::lock>;
    using Install = typename Chosen::template type<PolicyRole::install>;
    using Reselect = typename Chosen::template type<PolicyRole::reselect>;
    using Gather = typename Chosen::template type<PolicyRole::gather>;
    using Support = typename Chosen::template type<PolicyRole::support>;
    using Targets = typename Chosen::template type<PolicyRole::targets>;
    using Remote = typename Chosen::template type<PolicyRole::remote>;

private:
    static_assert(detail::diagnose_policies<Invoker, Chosen>());
    static constexpr bool cache_fits = skc::Storage<Storage> && LockPolicy<Lock>;

public:
    /// IndexCache<Storage, Lock> (a stand-in when they do not fit: the static_asserts above report it).
    using Cache = typename detail::cache_for<cache_fits, Storage, Lock>::type;

    /// The policy objects that differ from their defaults, in any order, each matched to the role
    /// whose type it has (`Compiler(invoker, options, settings, std::move(gather))`); the others are
    /// default-constructed. A type that fills two roles must be passed by position (below).
    template <class... Ps>
    requires(sizeof...(Ps) > 0 && ((detail::roles_of<Ps, Install, Reselect, Gather, Support, Targets> == 1) && ...))
        StaticKernelCompiler(Invoker invoker, Options options, CompilerSettings settings, Ps&&... policies)
        : StaticKernelCompiler(std::move(invoker), std::move(options), std::move(settings),
                               detail::pick<Install>(std::forward<Ps>(policies)...),
                               detail::pick<Reselect>(std::forward<Ps>(policies)...),
                               detail::pick<Gather>(std::forward<Ps>(policies)...),
                               detail::pick<Support>(std::forward<Ps>(policies)...),
                               detail::pick<Targets>(std::forward<Ps>(policies)...)) {}

    /// Resolves the base directory (docs/spec.md section 3; Error naming the path when it is unusable) and
    /// opens the cache for (toolchain version, device) unless the options disable it.
    /// A policy left out is default-constructed (detail::pick: one message for a type that cannot be).
    StaticKernelCompiler(Invoker invoker, Options options, CompilerSettings settings,
                         Install installer = detail::pick<Install>(), Reselect reselect = detail::pick<Reselect>(),
                         Gather gather = detail::pick<Gather>(), Support support = detail::pick<Support>(),
                         Targets targets = detail::pick<Targets>())
        : invoker_(std::move(invoker)),
          options_(std::move(options)),
          settings_(std::move(settings)),
          installer_(std::move(installer)),
          reselect_(std::move(reselect)),
          gather_(std::move(gather)),
          support_(std::move(support)),
          targets_(std::move(targets)),
          layout_(resolve_base(options_)) {
        const std::string stem = detail::check_settings(options_, settings_);
        const bool read_only = settings_.cache.mode == CacheMode::read_only;
        // A bad remote cache URL is an error before anything is written.
        std::unique_ptr<RemoteTier> remote =
            options_.cache_enabled() ? detail::open_remote<Remote>(options_, settings_.log) : nullptr;
        if (settings_.compiler_fingerprint.empty())
            if (const auto program = InvokerTraits<Invoker>::compiler_path(invoker_))
                settings_.compiler_fingerprint = detail::fingerprint(*program, options_, layout_, settings_.cache.mode);
        if constexpr (cache_fits) {
            if (!options_.cache_enabled()) return;
            const std::filesystem::path root = resolve_cache_dir(options_, layout_.cache_dir(), settings_.cache.mode);
            if constexpr (cache_opening<Storage, Lock>::on_disk) {
                cache_root_ = root;
                known_ = KnownFailures(root / stem, settings_.compiler_fingerprint, read_only);
            }
            cache_ = cache_opening<Storage, Lock>::open(root, stem, settings_.cache);
            detail::attach_remote(*cache_, std::move(remote), stem, read_only, settings_.log);
        }
    }

    StaticKernelCompiler(const StaticKernelCompiler&) = delete;
    StaticKernelCompiler& operator=(const StaticKernelCompiler&) = delete;

    /// Waits for the op info folders still being written (flush()); an error in writing them is
    /// logged, since a destructor cannot throw it.
    ~StaticKernelCompiler() { detail::wait_for_writer(writer_, settings_.log); }

    /// Ends `recorder`'s session and runs the whole flow on what it recorded. The run folder's op
    /// info folders are written in the background (session_files.hpp): complete before the kernel
    /// compiler starts, and by the return of flush() or the compiler's destruction.
    template <class Recorder>
    requires requires(Recorder& r) {
        { r.take() } -> std::same_as<std::vector<RecordedOp>>;
    }
    CompileReport compile(Recorder& recorder) {
        return run_flow([&] { return std::make_shared<std::vector<RecordedOp>>(recorder.take()); });
    }

    /// Runs the whole flow on `ops` as if a recording session had recorded them in this order
    /// (`skc compile` on a folder of op info files); repeated contents count once. The op info
    /// folders are written as with a recorder.
    CompileReport compile(std::vector<OpRecord> ops) {
        return run_flow([&] { return detail::record_ops(std::move(ops), targets_, support_); });
    }

    /// Blocks until the op info folders of every compile() so far are written; throws what failed
    /// writing them (a full disk, say), once.
    void flush() { writer_.wait(); }

    [[nodiscard]] const Layout& layout() const noexcept { return layout_; }
    [[nodiscard]] const Options& options() const noexcept { return options_; }
    [[nodiscard]] const CompilerSettings& settings() const noexcept { return settings_; }
    [[nodiscard]] Invoker& invoker() noexcept { return invoker_; }
    [[nodiscard]] Install& installer() noexcept { return installer_; }
    [[nodiscard]] Reselect& reselect_hook() noexcept { return reselect_; }
    [[nodiscard]] Gather& gather() noexcept { return gather_; }
    /// The cache; nullptr when disabled.
    [[nodiscard]] Cache* cache() noexcept { return cache_.get(); }
    /// The process-scoped installs this compiler holds (released with it).
    [[nodiscard]] const std::vector<Installation>& installations() const noexcept { return installs_; }

private:
    /// The flow: a run folder, the record, select, then the node's gather around key, lookup or compile and
    /// install (lead() on the leader; the other ranks hold its install), then reselect on every rank.
    template <class Record>
    CompileReport run_flow(Record record) {
        CompileReport rep;
        detail::StageClock clock(rep);
        const RunLayout run = layout_.create_run();
        clock.lap("layout");
        std::shared_ptr<const std::vector<RecordedOp>> ops = record();
        clock.lap("record");
        rep.run_dir = run.dir();
        rep.local_rank = gather_.local_rank();
        rep.local_world_size = gather_.local_world_size();
        const bool many = rep.local_world_size > 1;
        // A rank whose selection fails still takes part in the gather and the barriers (docs/spec.md
        // section 10) with nothing selected, and reports its error afterwards.
        std::exception_ptr select_error;
        const std::shared_ptr<const SessionPlan> plan = select(run, std::move(ops), many, select_error, rep, clock);

        std::shared_ptr<void> pin;  // a cache hit stays pinned until every rank has reselected
        bool led = false;
        if (many) detail::report_waiting_for_ranks(settings_, rep.local_rank);
        gather_.coordinate(
            detail::gather_request(layout_, run, *plan, options_, settings_, writer_),
            [&](const GatheredSet& set) -> Value {
                led = true;
                if (many) clock.lap("gather");
                return lead(run, set, *plan, rep, clock, pin);
            },
            [&](const Value& shared) {
                if (many) clock.lap("gather");
                // A follower takes the leader's outcome and holds the packages the leader installed.
                if (!led)
                    for (std::filesystem::path& p : detail::read_leader_message(shared, rep)) {
                        rep.package = std::move(p);
                        install(rep, clock);
                    }
                reselect(rep, clock);
            });
        if (many) clock.lap("gather");
        writer_.start();  // past the critical path: now the op info folders
        if (select_error) std::rethrow_exception(select_error);
        // Only now: a failed install or reselect leaves the ops to the next call (a cache hit then).
        compiled().mark(plan->selected);
        if (settings_.log) settings_.log(LogLevel::info, rep.summary());
        return rep;
    }

    /// Step select: the op info folders and the selection, decided in memory; the folders are
    /// handed to the background writer. With several ranks an error is kept for after the gather.
    std::shared_ptr<const SessionPlan> select(const RunLayout& run, std::shared_ptr<const std::vector<RecordedOp>> ops,
                                              bool many, std::exception_ptr& error, CompileReport& rep,
                                              detail::StageClock& clock) {
        std::shared_ptr<const SessionPlan> plan;
        try {
            plan = std::make_shared<const SessionPlan>(plan_session(
                run, ops, SelectOptions{options_.op_blacklist, options_.use_model_cache_dir()}, compiled(), support_));
            writer_.submit(plan);
        } catch (...) {
            if (!many) throw;
            error = std::current_exception();
            plan = std::make_shared<const SessionPlan>(
                SessionPlan{run, std::make_shared<const std::vector<RecordedOp>>(), {}, {}, {}, {}, false, false});
        }
        detail::count_selection(*plan, rep);
        clock.lap("select");
        return plan;
    }

    [[nodiscard]] CompiledSet& compiled() const noexcept {
        return settings_.compiled != nullptr ? *settings_.compiled : process_compiled();
    }

    /// The node's leader (every process when alone): key, lookup or compile, install (lead_set), with
    /// the ops the compiler fails on left out (detail/isolate.hpp). Returns what the other ranks need.
    Value lead(const RunLayout& run, const GatheredSet& gathered, const SessionPlan& plan, CompileReport& rep,
               detail::StageClock& clock, std::shared_ptr<void>& pin) {
        rep.gathered = gathered.digests.size();
        GatheredSet set = detail::leave_out_known(known_, gathered, run, rep, settings_.log);
        std::vector<FailedOp> blamed;  // remembered once the rest has compiled
        for (;;) {
            if (set.digests.empty()) return detail::leader_message(rep);  // skipped
            try {
                const auto [held, built] = lead_set(run, set, detail::with_earlier(set, plan), rep, clock, pin);
                detail::count_work<cache_fits>(held, built, rep, cache_.get());
                detail::remember_failures(known_, blamed, settings_.log);
                return detail::leader_message(rep);
            } catch (const detail::OpsFailed& failed) {
                set = detail::leave_out_failed(failed, set, run, rep, blamed, settings_.log);
            }
        }
    }

    /// Key, lookup or compile, install. A cover is looked up for `whole`: `set` and the ops this process
    /// compiled before, whose packages it installed (the in-process rule as a cover, docs/cache.md). Returns
    /// how many ops the installs answer and how many of them were compiled or looked up under their own key.
    std::pair<std::size_t, std::size_t> lead_set(const RunLayout& run, const GatheredSet& set, const GatheredSet& whole,
                                                 CompileReport& rep, detail::StageClock& clock,
                                                 std::shared_ptr<void>& pin) {
        detail::start_lead(rep);
        const CacheKey k = key(set, rep, clock);
        Compile compile_it{invoker_, *this, run, set, k};
        if constexpr (cache_fits)
            if (cache_) {
                const CacheKey kw = whole.digests.size() == set.digests.size() ? k : key(whole, rep, clock);
                detail::report_lookup(*cache_, kw, settings_);
                if (auto built = lead_cover(run, set, kw, rep, clock, pin)) return {whole.digests.size(), *built};
                rep.key = k.hex();
                auto out = lookup_or_compile(*cache_, k, compile_it, run, rep, clock);
                if (!install_hit(out, rep, clock)) {
                    // Damaged and discarded: compile once more (read-only: not stored, it was not discarded).
                    if (settings_.cache.mode == CacheMode::read_only) {
                        lookup_or_compile(NoCache(), k, compile_it, run, rep, clock);
                        install(rep, clock);
                        rep.outcome = CompileOutcome::compiled;
                    } else {
                        out = lookup_or_compile(*cache_, k, compile_it, run, rep, clock);
                        install(rep, clock, out.hit ? std::optional(out.hit->entry.checksum) : std::nullopt);
                    }
                }
                pin = std::make_shared<decltype(out)>(std::move(out));
                return {set.digests.size(), set.digests.size()};
            }
        lookup_or_compile(NoCache(), k, compile_it, run, rep, clock);
        install(rep, clock);
        return {set.digests.size(), set.digests.size()};
    }

    /// A hit, or a miss answered by a cover: the cached packages inside the set, and one lookup or
    /// compile of the rest under its own key (detail::cover_step), installed in order: in one go those
    /// the installer need not extract (detail::install_kept), then the others. nullopt: get_or_compile decides.
    std::optional<std::size_t> lead_cover(const RunLayout& run, const GatheredSet& set, const CacheKey& k,
                                          CompileReport& rep, detail::StageClock& clock, std::shared_ptr<void>& pin) {
        return detail::cover_step(
            *cache_, k, set, run, rep, clock, pin,
            [&](const GatheredSet& delta) {
                const CacheKey dk = detail::cache_key_for(delta, options_, settings_);
                Compile compile_delta{invoker_, *this, run, delta, dk};
                return lookup_or_compile(*cache_, dk, compile_delta, run, rep, clock);
            },
            [&](auto& outs, const std::vector<std::filesystem::path>& packages) {
                auto i = detail::install_kept(installer_, settings_, cache_ != nullptr, outs, packages, rep, installs_,
                                              clock);
                for (; i < outs.size(); ++i)
                    if (rep.package = packages[i]; !install_hit(outs[i], rep, clock)) return false;
                return true;
            },
            [&](const auto& hit) { return detail::hit_package<cache_fits>(hit, run, cache_.get()); });
    }

    /// Step key: the digest of the gathered set and every kernel-changing input.
    CacheKey key(const GatheredSet& set, CompileReport& rep, detail::StageClock& clock) const {
        CacheKey k = detail::cache_key_for(set, options_, settings_);
        rep.key = k.hex();
        clock.lap("key");
        return k;
    }

    using Compile = detail::KernelCompile<Invoker, StaticKernelCompiler>;
    friend Compile;

    /// Step lookup or compile: `cache` (NoCache: compile) for the key; the outcome and its package.
    template <class C>
    auto lookup_or_compile(C&& cache, const CacheKey& k, Compile& compile_it, const RunLayout& run, CompileReport& rep,
                           detail::StageClock& clock) {
        auto out = cache.get_or_compile(k, [&] { return compile_it(); });
        rep.outcome = detail::compile_outcome(out.result);
        rep.package = out.hit ? detail::hit_package<cache_fits>(*out.hit, run, cache_.get()) : out.compiled_package;
        clock.split("cache", "compile", compile_it.elapsed);
        return out;
    }

    /// Step install (every rank): `rep.package` into the op library, when there is one. `checksum`:
    /// the package's, when the cache knows it (the installer need not hash the package).
    void install(CompileReport& rep, detail::StageClock& clock, std::optional<Digest> checksum = std::nullopt) {
        if (settings_.op_library.empty()) return;
        detail::report_progress(settings_, {.phase = CompileProgress::Phase::installing, .key = rep.key});
        InstallOptions io = detail::install_options(settings_, cache_ != nullptr);
        io.checksum = checksum;
        detail::note_install(installer_.install(rep.package, settings_.op_library, io), rep, installs_);
        clock.lap("install");
    }

    /// A cache outcome's install. False when a cached package cannot be installed and the installer
    /// finds it damaged (package_fault): it is discarded from the cache, for the caller to compile again.
    template <class Outcome>
    bool install_hit(Outcome& out, CompileReport& rep, detail::StageClock& clock) {
        try {
            install(rep, clock, out.hit ? std::optional(out.hit->entry.checksum) : std::nullopt);
            return true;
        } catch (const Error& e) {
            const std::optional<std::string> fault = out.hit ? package_fault(rep.package) : std::nullopt;
            if (!fault) throw;
            const std::string hex = out.hit->entry.key;
            detail::warn_damaged(settings_.cache.log, hex, e, *fault);
            const Digest checksum = out.hit->entry.checksum;
            out.hit.reset();  // unpinned, so that it can be removed
            cache_->discard_damaged(hex, checksum, *fault);
            clock.lap("install");
            return false;
        }
    }

    /// Step reselect (every rank): the runtime takes the installed kernels.
    void reselect(CompileReport& rep, detail::StageClock& clock) {
        if (rep.installed.empty()) return;
        reselect_.reselect(ReselectContext{settings_.op_library, settings_.backend, settings_.device, rep.installed});
        clock.lap("reselect");
    }

    /// Why `package` cannot be installed, when the Install policy can tell (RunPackageInstaller::check).
    [[nodiscard]] std::optional<std::string> package_fault(const std::filesystem::path& package) const {
        return InstallerTraits<Install>::check(installer_, package);
    }

    Invoker invoker_;
    Options options_;
    CompilerSettings settings_;
    Install installer_;
    Reselect reselect_;
    Gather gather_;
    Support support_;
    Targets targets_;
    Layout layout_;
    std::unique_ptr<Cache> cache_;
    std::filesystem::path cache_root_;    // the cache folder, when the cache is on disk (explains misses)
    KnownFailures known_;                 // the ops the compiler failed on (in the cache namespace)
    std::vector<Installation> installs_;  // destroyed first: released before the cache goes
    FileWriter writer_;                   // the op info folders, written in the background
};

}  // namespace skc
