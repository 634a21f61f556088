// skc/compiler.hpp: StaticKernelCompiler, the host that walks SPEC's flow once per call.
//
//   layout    a fresh run folder `ts<timestamp>_pid<pid>_outputs/` under the resolved base
//   record    the recording session's ops, taken over in memory
//   select    the op info folders (`<pid>_debug`, `<pid>`, `<pid>_opcompile`) and the selection
//             (blacklist, already compiled in this process, duplicates: `<pid>_opcompile_selected`),
//             decided in memory and written by a background thread once the lookup is done
//             (session_files.hpp): complete before the kernel compiler starts, at flush() and at
//             the compiler's destruction
//   gather    with several ranks, the node's leader gathers every rank's selection (policy/gather.hpp);
//             key, cache and install run on the leader only, the reselect on every rank
//   key       the digest of the selected set and every kernel-changing input
//   cache     hit, or single-flight compile through the Invoker (one process per key compiles)
//   install   the package into the op library (reference-counted, process-scoped by default)
//   reselect  the hook that makes the runtime use the installed kernels
//
// Every step is a policy with a default, so `StaticKernelCompiler<MyInvoker>` is a working
// configuration: the file-system cache with file locks, the makeself installer, no reselect hook,
// the original's target and support lists. Change one by name and keep the others
// (`StaticKernelCompiler<MyInvoker, with_gather<LocalFsGather>>`, below), or give them by position.
// A policy that does not fit gets one static_assert per missing member, naming the member and its
// signature, instead of a page of template errors.
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
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cache_explain.hpp"
#include "compile_report.hpp"
#include "compiler_check.hpp"
#include "error.hpp"
#include "layout.hpp"
#include "log.hpp"
#include "op_info_io.hpp"
#include "op_record.hpp"
#include "options.hpp"
#include "policy/cache.hpp"
#include "policy/installer.hpp"
#include "policy/invoker.hpp"
#include "policy/gather.hpp"
#include "policy/lock.hpp"
#include "policy/remote.hpp"
#include "policy/reselect.hpp"
#include "policy/storage.hpp"
#include "recorder.hpp"
#include "select.hpp"
#include "value.hpp"

namespace skc {

/// What a compile needs beyond Options: the cache namespace and where to install.
struct CompilerSettings {
    std::string toolchain_version;     // cache namespace (SPEC section 7), part of the key
    std::string device;                // passed to the compiler as -v; cache namespace; part of the key
    std::filesystem::path op_library;  // empty: nothing is installed and no reselect happens
    std::string backend = "host";      // L/static_kernel/<backend>
    bool persistent_install = false;   // the install outlives the process (as running the package by hand)
    std::chrono::seconds install_timeout{300};
    CacheConfig cache{};  // limits, wait timeout for another process's compile, log
    /// The compiler's fingerprint for the cache key. Empty: taken from the invoker's compiler_path()
    /// (ProcessInvoker has one) as options.compiler_check says; an invoker without one adds none.
    std::string compiler_fingerprint;
    LogSink log = stderr_log();
    /// Told how far each compile() is (CompileProgress); empty: nothing is reported. Called from
    /// the thread that runs compile(); what it throws is caught, logged at debug level and ignored.
    std::function<void(const CompileProgress&)> progress;
    /// The ops this host has compiled: selection skips them, and a compile that succeeds adds its
    /// ops. Null: the process's own set (process_compiled()). A host whose runtime can forget
    /// kernels (a plugin that unloads them, or moves to another op library) keeps a set of its own
    /// and clears it then, or ops it still needs would be skipped for ever.
    CompiledSet* compiled = nullptr;
};

namespace detail {

/// IndexCache<S, L> when both policies fit (checked by the host's static_asserts), else a stand-in
/// so that a misfit reports the host's messages and not the cache's constraint failure.
template <bool Fits, class S, class L>
struct cache_for {
    using type = NoCache;
};
template <class S, class L>
struct cache_for<true, S, L> {
    using type = IndexCache<S, L>;
};

/// A policy object for a folder: constructed from the path when it takes one (FilesystemStorage,
/// FileLock), default-constructed otherwise (MemoryStorage, ProcessLock).
/// A lock policy that takes a LockAccess (FileLock) gets read_only when the cache is read-only.
template <class P>
P make_for_dir(const std::filesystem::path& dir, CacheMode mode = CacheMode::read_write) {
    if constexpr (std::is_constructible_v<P, std::filesystem::path, LockAccess>)
        return P(dir, mode == CacheMode::read_only ? LockAccess::read_only : LockAccess::read_write);
    else if constexpr (std::is_constructible_v<P, std::filesystem::path>) return P(dir);
    else return P{};
}

class StageClock {
public:
    explicit StageClock(CompileReport& r) : r_(r), t_(std::chrono::steady_clock::now()) {}
    /// Ends the current stage as `name` (added to it when the stage was timed before).
    void lap(std::string name) {
        const auto now = std::chrono::steady_clock::now();
        for (auto& [n, t] : r_.stages)
            if (n == name) {
                t += now - t_;
                t_ = now;
                return;
            }
        r_.stages.emplace_back(std::move(name), now - t_);
        t_ = now;
    }
    /// Ends the current stage as two: `inner` took `inner_time` of it, `outer` the rest.
    void split(std::string outer, std::string inner, std::chrono::nanoseconds inner_time) {
        const auto now = std::chrono::steady_clock::now();
        const std::chrono::nanoseconds all = now - t_;
        r_.stages.emplace_back(std::move(outer), all > inner_time ? all - inner_time : std::chrono::nanoseconds{0});
        r_.stages.emplace_back(std::move(inner), inner_time);
        t_ = now;
    }

private:
    CompileReport& r_;
    std::chrono::steady_clock::time_point t_;
};

}  // namespace detail

// ---- named configurations -------------------------------------------------------------------
//
// StaticKernelCompiler<Invoker, Policies...> takes its policies either by position (Storage, Lock,
// Install, Reselect, Gather, Support, Targets; trailing ones may be left out) or by name, in any
// order, with the selectors below: `StaticKernelCompiler<MyInvoker, with_gather<LocalFsGather>>`
// keeps every other default. The constructor likewise takes the policy objects that differ from
// their defaults in any order, matched by type.

namespace detail {
struct policy_selector {};  // the base of the with_<role> selectors

enum class PolicyRole { storage, lock, install, reselect, gather, support, targets, remote };

template <class S = FilesystemStorage, class L = FileLock, class I = RunPackageInstaller, class R = NoReselect,
          class G = SingleRank, class Su = DefaultSupport, class T = DefaultTargets, class Rm = NoRemote>
struct Policies {
    using storage = S;
    using lock = L;
    using install = I;
    using reselect = R;
    using gather = G;
    using support = Su;
    using targets = T;
    using remote = Rm;
};

template <class B, class... Selectors>
struct apply_selectors {
    using type = B;
};
template <class B, class S, class... Rest>
struct apply_selectors<B, S, Rest...> {
    using type = typename apply_selectors<typename S::template apply<B>, Rest...>::type;
};

template <class P>
inline constexpr bool is_selector = std::is_base_of_v<policy_selector, P>;

template <bool Named, class... Ps>
consteval bool roles_distinct() {
    if constexpr (!Named || sizeof...(Ps) == 0) {
        return true;
    } else {
        const PolicyRole roles[] = {Ps::role...};
        for (std::size_t i = 0; i < sizeof...(Ps); ++i)
            for (std::size_t j = i + 1; j < sizeof...(Ps); ++j)
                if (roles[i] == roles[j]) return false;
        return true;
    }
}

/// The policies a StaticKernelCompiler<Invoker, Ps...> uses.
template <class... Ps>
struct chosen_policies {
    static_assert((is_selector<Ps> && ...) || (!is_selector<Ps> && ...),
                  "skc::StaticKernelCompiler: name every policy (with_gather<...>, ...) or give them all by position, "
                  "not both");
    static_assert(
        sizeof...(Ps) <= 8,
        "skc::StaticKernelCompiler: at most 8 policies by position (Storage, Lock, Install, Reselect, Gather, "
        "Support, Targets, Remote)");
    static constexpr bool named = sizeof...(Ps) > 0 && (is_selector<Ps> && ...);
    static_assert(roles_distinct<named, Ps...>(),
                  "skc::StaticKernelCompiler: a policy is chosen twice (two with_<role> of the same role)");
};

template <bool Named, class... Ps>
struct policies_for {
    using type = Policies<Ps...>;
};
template <class... Ps>
struct policies_for<true, Ps...> {
    using type = typename apply_selectors<Policies<>, Ps...>::type;
};

/// The constructor's policy objects: the one of type T among `ps`, else T().
template <class T>
T pick() {
    static_assert(
        std::is_default_constructible_v<T>,
        "skc::StaticKernelCompiler: a policy without a default constructor must be passed to the constructor");
    return T();
}
template <class T, class P, class... Ps>
T pick(P&& p, Ps&&... ps) {
    if constexpr (std::is_same_v<std::remove_cvref_t<P>, T>) return T(std::forward<P>(p));
    else return pick<T>(std::forward<Ps>(ps)...);
}

/// How many of the roles' types are exactly P's (a constructor argument must fill exactly one).
template <class P, class... Roles>
inline constexpr std::size_t roles_of = (std::size_t{std::is_same_v<std::remove_cvref_t<P>, Roles>} + ...);
}  // namespace detail

#define SKC_POLICY_SELECTOR(NAME, ROLE)                                      \
    template <class P>                                                       \
    struct NAME : detail::policy_selector {                                  \
        static constexpr detail::PolicyRole role = detail::PolicyRole::ROLE; \
        template <class B>                                                   \
        struct apply : B {                                                   \
            using ROLE = P;                                                  \
        };                                                                   \
    };
/// Selectors: `StaticKernelCompiler<Invoker, with_gather<G>, with_reselect<R>>`.
SKC_POLICY_SELECTOR(with_storage, storage)
SKC_POLICY_SELECTOR(with_lock, lock)
SKC_POLICY_SELECTOR(with_install, install)
SKC_POLICY_SELECTOR(with_reselect, reselect)
SKC_POLICY_SELECTOR(with_gather, gather)
SKC_POLICY_SELECTOR(with_support, support)
SKC_POLICY_SELECTOR(with_targets, targets)
SKC_POLICY_SELECTOR(with_remote, remote)
#undef SKC_POLICY_SELECTOR

/// The host of DESIGN.md's one picture. See the header comment.
template <class Invoker, class... PolicyList>
class StaticKernelCompiler {
    using Chosen = typename detail::policies_for<detail::chosen_policies<PolicyList...>::named, PolicyList...>::type;

public:
    using Storage = typename Chosen::storage;
    using Lock = typename Chosen::lock;
    using Install = typename Chosen::install;
    using Reselect = typename Chosen::reselect;
    using Gather = typename Chosen::gather;
    using Support = typename Chosen::support;
    using Targets = typename Chosen::targets;
    using Remote = typename Chosen::remote;

private:
    // Each role's requirements are stated beside its concept, with one message per missing member
    // (tests/compile_fail/ holds a test per role). The host asks only for what it calls.
    static_assert(detail::diagnose_invoker<Invoker>());
    static_assert(detail::diagnose_storage<Storage>());
    static_assert(detail::diagnose_lock<Lock>());
    static_assert(detail::diagnose_install<Install>());
    static_assert(detail::diagnose_reselect<Reselect>());
    static_assert(detail::diagnose_gather<Gather>());
    static_assert(detail::diagnose_support<Support>());
    static_assert(detail::diagnose_targets<Targets>());
    static_assert(detail::diagnose_remote<Remote>());

    static constexpr bool cache_fits = skc::Storage<Storage> && LockPolicy<Lock>;

public:
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

    /// Resolves the base directory (SPEC section 3; Error naming the path when it is unusable) and
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
        if (!options_.static_kernel_compile)
            throw Error(Errc::invalid_option, "static kernel compilation is off (static_kernel_compile is false)",
                        ErrorContext{{}, {}, "static_kernel_compile"});
        if (settings_.device.empty()) throw Error(Errc::invalid_argument, "the device name is empty");
        if (settings_.toolchain_version.empty()) throw Error(Errc::invalid_argument, "the toolchain version is empty");
        if (options_.jobs == 0)
            throw Error(Errc::invalid_option, "jobs must be at least 1", ErrorContext{{}, {}, "jobs"});
        const std::string stem =
            Layout::cache_stem(settings_.toolchain_version, settings_.device);  // checks both names
        if (!settings_.op_library.empty()) check_path_safety(settings_.op_library, "op_library");
        if (const std::optional<CacheMode> m = requested_cache_mode(options_)) settings_.cache.mode = *m;
        const bool read_only = settings_.cache.mode == CacheMode::read_only;
        // A bad remote cache URL is an error before anything is written.
        std::unique_ptr<RemoteTier> remote = options_.cache_enabled() ? open_remote() : nullptr;
        if constexpr (requires(const Invoker& i) {
                          { i.compiler_path() } -> std::convertible_to<std::filesystem::path>;
                      }) {
            if (settings_.compiler_fingerprint.empty()) {
                // Remembered beside the cache when it is on (it is then read and written anyway).
                std::filesystem::path memo;
                if (options_.cache_enabled()) {
                    memo = resolve_cache_dir(options_, layout_.cache_dir(), settings_.cache.mode);
                    if (!read_only) detail::make_cache_dir(memo);
                }
                settings_.compiler_fingerprint =
                    compiler_fingerprint(invoker_.compiler_path(), options_.compiler_check, memo,
                                         read_only ? MemoAccess::read_only : MemoAccess::read_write);
            }
        }
        if (options_.cache_enabled()) {
            const std::filesystem::path root = resolve_cache_dir(options_, layout_.cache_dir(), settings_.cache.mode);
            if constexpr (std::is_same_v<Storage, FilesystemStorage>) cache_root_ = root;
            if constexpr (std::is_same_v<Storage, FilesystemStorage> && std::is_same_v<Lock, FileLock>) {
                cache_ = open_cache(root, settings_.toolchain_version, settings_.device, settings_.cache);
            } else {
                if (!read_only) detail::make_dir(root / stem);
                cache_ = std::make_unique<Cache>(detail::make_for_dir<Storage>(root / stem),
                                                 detail::make_for_dir<Lock>(root, settings_.cache.mode),
                                                 settings_.cache, CacheLockNames{stem + "/keys/", stem});
            }
            if (remote) {
                if (read_only)
                    log(LogLevel::info, "the cache is read-only: the remote cache " + remote->where() + " is not used");
                else if constexpr (requires { cache_->set_remote(std::move(remote), stem); })
                    cache_->set_remote(std::move(remote), stem);
            }
        }
    }

    StaticKernelCompiler(const StaticKernelCompiler&) = delete;
    StaticKernelCompiler& operator=(const StaticKernelCompiler&) = delete;

    /// Waits for the op info folders still being written (flush()); an error in writing them is
    /// logged, since a destructor cannot throw it.
    ~StaticKernelCompiler() {
        try {
            writer_.wait();
        } catch (const std::exception& e) {
            try {
                log(LogLevel::warning,
                    std::string("the op info folders of the last compile are incomplete: ") + e.what());
            } catch (...) {}
        }
    }

    /// Ends `recorder`'s session and runs the whole flow on what it recorded. The run folder's op
    /// info folders are written in the background (session_files.hpp): complete before the kernel
    /// compiler starts, and by the return of flush() or the compiler's destruction.
    template <class Recorder>
    requires requires(Recorder& r) {
        { r.take() } -> std::same_as<std::vector<RecordedOp>>;
    }
    CompileReport compile(Recorder& recorder) {
        CompileReport rep;
        detail::StageClock clock(rep);
        const RunLayout run = layout_.create_run();
        clock.lap("layout");
        auto ops = std::make_shared<std::vector<RecordedOp>>(recorder.take());
        clock.lap("record");
        finish(run, std::move(ops), rep, clock);
        return rep;
    }

    /// Runs the whole flow on `ops` as if a recording session had recorded them in this order
    /// (`skc compile` on a folder of op info files); repeated contents count once. The op info
    /// folders are written as with a recorder.
    CompileReport compile(std::vector<OpRecord> ops) {
        CompileReport rep;
        detail::StageClock clock(rep);
        const RunLayout run = layout_.create_run();
        clock.lap("layout");
        auto recorded = std::make_shared<std::vector<RecordedOp>>();
        recorded->reserve(ops.size());
        std::unordered_set<Digest, DigestHash> seen;
        for (OpRecord& r : ops) {
            validate(r);
            const Digest d = digest(r);
            if (!seen.insert(d).second) continue;
            const bool target = targets_.is_target(r.op_type), supported = support_.supports(r.op_type);
            recorded->push_back(RecordedOp{d, std::move(r), target, supported});
        }
        clock.lap("record");
        finish(run, std::move(recorded), rep, clock);
        return rep;
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
    void finish(const RunLayout& run, std::shared_ptr<const std::vector<RecordedOp>> ops, CompileReport& rep,
                detail::StageClock& clock) {
        rep.run_dir = run.dir();
        rep.local_rank = gather_.local_rank();
        rep.local_world_size = gather_.local_world_size();
        const bool many = rep.local_world_size > 1;

        // Steps 2 to 5 decided in memory; the folders are written in the background. A rank whose
        // plan fails still takes part in the gather and the barriers (SPEC section 10) with nothing
        // selected, and reports its error afterwards.
        std::shared_ptr<const SessionPlan> plan;
        std::exception_ptr select_error;
        try {
            plan = std::make_shared<const SessionPlan>(plan_session(
                run, ops, SelectOptions{options_.op_blacklist, options_.use_model_cache_dir()}, compiled(), support_));
            writer_.submit(plan);
        } catch (...) {
            if (!many) throw;
            select_error = std::current_exception();
            plan = std::make_shared<const SessionPlan>(
                SessionPlan{run, std::make_shared<const std::vector<RecordedOp>>(), {}, {}, {}, {}, false, false});
        }
        rep.recorded = plan->recorded.recorded;
        rep.targets = plan->recorded.targets;
        rep.supported = plan->recorded.supported;
        rep.selected = plan->selected.size();
        rep.blacklisted = plan->count(Verdict::blacklisted);
        rep.already_compiled = plan->count(Verdict::already_compiled);
        rep.unsupported = plan->count(Verdict::unsupported);
        rep.duplicates = plan->count(Verdict::duplicate);
        clock.lap("select");

        std::unique_ptr<Pin> pin;  // a cache hit stays pinned until every rank has reselected
        const GatherRequest req{layout_,
                                run,
                                plan->selected,
                                plan->compile_dir(),
                                std::chrono::duration_cast<std::chrono::nanoseconds>(options_.compile_timeout) +
                                    std::chrono::duration_cast<std::chrono::nanoseconds>(settings_.install_timeout),
                                [this] { writer_.wait(); },
                                [this] { writer_.start(); },
                                [this](std::function<void()> job) { writer_.defer(std::move(job)); }};
        bool led = false;
        if (many)
            report(CompileProgress{CompileProgress::Phase::waiting,
                                   0,
                                   0,
                                   {},
                                   rep.local_rank == 0
                                       ? "the node's other ranks"
                                       : "the node's leader (local rank 0) compiling or looking up the node's ops",
                                   {},
                                   std::chrono::nanoseconds{0}});
        gather_.coordinate(
            req,
            [&](const GatheredSet& set) -> Value {
                led = true;
                if (many) clock.lap("gather");
                return lead(run, set, rep, clock, pin);
            },
            [&](const Value& shared) {
                if (many) clock.lap("gather");
                share(shared, led, rep, clock);
            });
        if (many) clock.lap("gather");
        writer_.start();  // past the critical path: now the op info folders
        if (select_error) std::rethrow_exception(select_error);
        // Only now: a failed install or reselect leaves the ops to the next call (a cache hit then).
        compiled().mark(plan->selected);
        log(LogLevel::info, rep.summary());
    }

    [[nodiscard]] CompiledSet& compiled() const noexcept {
        return settings_.compiled != nullptr ? *settings_.compiled : process_compiled();
    }

    /// What keeps a cache hit's package from being evicted while it is being installed.
    struct Pin {
        virtual ~Pin() = default;
    };
    template <class Outcome>
    struct PinOf : Pin {
        explicit PinOf(Outcome o) : out(std::move(o)) {}
        Outcome out;
    };

    /// The node's leader (every process when alone): key, cache or compile, install. Returns what
    /// the other ranks need.
    Value lead(const RunLayout& run, const GatheredSet& set, CompileReport& rep, detail::StageClock& clock,
               std::unique_ptr<Pin>& pin) {
        rep.gathered = set.digests.size();
        if (set.digests.empty()) return Value(Object{{"outcome", Value(to_string(CompileOutcome::skipped))}});
        CacheKey key = make_cache_key(set.digests, key_inputs(options_, settings_.toolchain_version, settings_.device,
                                                              settings_.compiler_fingerprint));
        if (set.names.size() == set.digests.size())
            for (std::size_t i = 0; i < set.digests.size(); ++i) key.ops.push_back(KeyOp{set.digests[i], set.names[i]});
        rep.key = key.hex();
        clock.lap("key");

        std::chrono::nanoseconds compile_time{0};
        auto run_compiler = [&]() -> std::filesystem::path {
            explain_miss_in_log(key);
            // The compiler reads the op info files: this process's, then the other ranks' linked in.
            writer_.wait();
            if (set.materialize) set.materialize();
            CompileRequest req;
            req.json_dir = set.dir;
            req.device = settings_.device;
            req.jobs = options_.jobs;
            req.output_dir = run.dir();
            req.log_level = options_.log_level;
            req.extra_args = options_.compiler_options;
            req.timeout = options_.compile_timeout;
            // The compiler's progress lines, forwarded with the time since it started; done strictly increases.
            const auto started = std::chrono::steady_clock::now();
            std::size_t last_done = 0;
            if (settings_.progress)
                req.on_progress = [&](std::size_t done, std::size_t total, std::string_view op) {
                    if (done <= last_done) return;
                    last_done = done;
                    report(CompileProgress{CompileProgress::Phase::compiling,
                                           done,
                                           total,
                                           std::string(op),
                                           {},
                                           rep.key,
                                           std::chrono::steady_clock::now() - started});
                };
            report(CompileProgress{CompileProgress::Phase::compiling,
                                   0,
                                   set.digests.size(),
                                   {},
                                   {},
                                   rep.key,
                                   std::chrono::nanoseconds{0}});
            CompileResult res = invoker_.compile(req);
            compile_time = res.elapsed;
            // A package that cannot be installed never enters the cache (a full disk can cut it short).
            if (std::optional<std::string> fault = package_fault(res.package))
                throw Error(Errc::compile_failed,
                            "the compiler's package is unusable, so it is neither stored nor installed: " + *fault,
                            ErrorContext{res.package.string(), {}, {}});
            return res.package;
        };
        if (cache_) {
            if (key_busy(key))
                report(CompileProgress{CompileProgress::Phase::waiting,
                                       0,
                                       0,
                                       {},
                                       "another process compiling cache key " + rep.key,
                                       rep.key,
                                       std::chrono::nanoseconds{0}});
            else
                report(CompileProgress{
                    CompileProgress::Phase::lookup, 0, 0, {}, {}, rep.key, std::chrono::nanoseconds{0}});
            auto out = cache_->get_or_compile(key, run_compiler);
            if (!conclude(out, run, rep, clock, compile_time)) {
                // The cached package was damaged and is discarded: compile again, once (a read-only
                // cache could not discard it, so its compile is not stored).
                if (settings_.cache.mode == CacheMode::read_only) {
                    auto fresh = NoCache().get_or_compile(key, run_compiler);
                    conclude(fresh, run, rep, clock, compile_time, /*retry_damaged=*/false);
                    rep.outcome = CompileOutcome::compiled;
                } else {
                    out = cache_->get_or_compile(key, run_compiler);
                    conclude(out, run, rep, clock, compile_time, /*retry_damaged=*/false);
                }
            }
            pin = std::make_unique<PinOf<decltype(out)>>(std::move(out));
        } else {
            auto out = NoCache().get_or_compile(key, run_compiler);
            conclude(out, run, rep, clock, compile_time, /*retry_damaged=*/false);
        }
        return Value(Object{{"outcome", Value(to_string(rep.outcome))},
                            {"key", Value(rep.key)},
                            {"package", Value(rep.package.string())},
                            {"installed", Value(rep.installed)},
                            {"gathered", Value(rep.gathered)}});
    }

    /// The remote tier the options or the environment ask for (resolve_remote_config); nullptr when
    /// none is. A bad URL is an error; a program whose Remote policy is NoRemote says once that it has
    /// none.
    std::unique_ptr<RemoteTier> open_remote() const {
        const std::optional<RemoteConfig> rc = resolve_remote_config(options_);
        if (!rc) return nullptr;
        std::unique_ptr<RemoteTier> tier = Remote::open(*rc);
        if (!tier)
            log(LogLevel::warning,
                "a remote cache is configured (remote_cache or SKC_REMOTE_CACHE), but this program "
                "has no remote tier (its Remote policy is NoRemote): the local cache only");
        return tier;
    }

    /// On a miss in a cache folder on disk: one line naming the nearest entry and what differs, when
    /// one is near (cache_explain.hpp). A miss is about to compile: reading the entries is cheap beside it.
    void explain_miss_in_log(const CacheKey& key) {
        if (!cache_ || cache_root_.empty() || settings_.cache.mode == CacheMode::recache || !settings_.cache.log)
            return;
        try {
            if (const std::optional<MissExplanation> x = explain_miss(cache_root_, key); x && x->near())
                settings_.cache.log(LogLevel::info, "cache miss for key " + key.hex() + ": " + x->summary());
        } catch (const std::exception& e) {  // an explanation is never worth a failed compile
            settings_.cache.log(LogLevel::debug, std::string("cannot explain the cache miss: ") + e.what());
        }
    }

    /// After the cache, on the leader: the outcome, the package and the install. With `retry_damaged`,
    /// a cached package whose install fails and which the installer finds damaged (check()) is
    /// discarded from the cache and false returned: the caller compiles again.
    template <class Outcome>
    bool conclude(Outcome& out, const RunLayout& run, CompileReport& rep, detail::StageClock& clock,
                  std::chrono::nanoseconds compile_time, bool retry_damaged = true) {
        switch (out.result) {
        case CacheResult::hit: rep.outcome = CompileOutcome::hit; break;
        case CacheResult::waited: rep.outcome = CompileOutcome::waited; break;
        case CacheResult::compiled: rep.outcome = CompileOutcome::compiled; break;
        case CacheResult::disabled: rep.outcome = CompileOutcome::disabled; break;
        case CacheResult::downloaded: rep.outcome = CompileOutcome::downloaded; break;
        }
        rep.package = out.hit ? package_file(*out.hit, run) : out.compiled_package;
        clock.split("cache", "compile", compile_time);
        if (settings_.op_library.empty()) return true;
        report(CompileProgress{CompileProgress::Phase::installing, 0, 0, {}, {}, rep.key, std::chrono::nanoseconds{0}});
        std::optional<Installation> inst;
        try {
            InstallOptions io = install_options();
            if (out.hit) io.checksum = out.hit->entry.checksum;  // the installer need not hash the package
            inst.emplace(installer_.install(rep.package, settings_.op_library, io));
        } catch (const Error& e) {
            if (!retry_damaged || !out.hit) throw;
            std::optional<std::string> fault = package_fault(rep.package);
            if (!fault) throw;
            if constexpr (requires { cache_->discard_damaged(out.hit->entry.key, out.hit->entry.checksum, *fault); }) {
                if (settings_.cache.log)
                    settings_.cache.log(LogLevel::warning, "the cached package for key " + rep.key +
                                                               " cannot be installed (" + e.message() +
                                                               "); it is damaged (" + *fault +
                                                               "), so it is discarded and compiled again");
                const std::string hex = out.hit->entry.key;
                const Digest checksum = out.hit->entry.checksum;
                out.hit.reset();  // unpinned, so that it can be removed
                cache_->discard_damaged(hex, checksum, *fault);
                clock.lap("install");
                return false;
            } else {
                throw;
            }
        }
        rep.installed = inst->stem();
        rep.extracted = inst->extracted();
        rep.reused = inst->reused();
        installs_.push_back(std::move(*inst));
        clock.lap("install");
        return true;
    }

    /// Why `package` cannot be installed, when the Install policy can tell (RunPackageInstaller::check).
    [[nodiscard]] std::optional<std::string> package_fault(const std::filesystem::path& package) const {
        if constexpr (requires(const Install& i) {
                          { i.check(package) } -> std::convertible_to<std::optional<std::string>>;
                      })
            return installer_.check(package);
        else return std::nullopt;
    }

    /// On every rank, between the barriers: a follower takes the leader's outcome and holds the
    /// package the leader installed (no second extraction); then every rank reselects.
    void share(const Value& shared, bool led, CompileReport& rep, detail::StageClock& clock) {
        if (!led) {
            auto text = [&](std::string_view k) {
                const Value* v = shared.find(k);
                return v && v->is_string() ? v->as_string() : std::string();
            };
            const std::string outcome = text("outcome");
            for (CompileOutcome o : {CompileOutcome::skipped, CompileOutcome::hit, CompileOutcome::waited,
                                     CompileOutcome::compiled, CompileOutcome::disabled, CompileOutcome::downloaded})
                if (to_string(o) == outcome) rep.outcome = o;
            rep.key = text("key");
            rep.package = text("package");
            if (const Value* g = shared.find("gathered"); g && g->is_number())
                rep.gathered = static_cast<std::size_t>(g->as_double());
            if (!text("installed").empty() && !settings_.op_library.empty()) {
                report(CompileProgress{
                    CompileProgress::Phase::installing, 0, 0, {}, {}, rep.key, std::chrono::nanoseconds{0}});
                Installation inst = installer_.install(rep.package, settings_.op_library, install_options());
                rep.installed = inst.stem();
                rep.extracted = inst.extracted();
                rep.reused = inst.reused();
                installs_.push_back(std::move(inst));
                clock.lap("install");
            }
        }
        if (rep.installed.empty()) return;
        reselect_.reselect(ReselectContext{settings_.op_library, settings_.backend, settings_.device, rep.installed});
        clock.lap("reselect");
    }

    [[nodiscard]] InstallOptions install_options() const {
        InstallOptions io;
        io.backend = settings_.backend;
        io.persistent = settings_.persistent_install;
        io.timeout = settings_.install_timeout;
        // Extractions are kept for the next process within the cache's size limit; packages without
        // a cache have fresh names every time, so keeping one would never pay.
        io.keep_bytes = !cache_                                 ? 0
                        : settings_.cache.limits.max_bytes != 0 ? settings_.cache.limits.max_bytes
                                                                : default_cache_limits.max_bytes;
        return io;
    }

    /// The hit's package as a file: the storage's own file, or a copy in the run folder for storages
    /// that keep no files (MemoryStorage).
    template <class Guard>
    std::filesystem::path package_file(const CacheHit<Guard>& hit, const RunLayout& run) {
        if (hit.package_path) return *hit.package_path;
        if constexpr (!std::is_same_v<Cache, NoCache>) {
            const std::optional<std::string> bytes = cache_->storage().read(hit.entry.package);
            if (!bytes)
                throw Error(Errc::corrupt, "the cache entry's package disappeared while in use",
                            ErrorContext{hit.entry.package, {}, {}});
            FilesystemStorage(run.dir()).write(hit.entry.key + ".run", *bytes);
            return run.dir() / (hit.entry.key + ".run");
        } else {
            throw Error(Errc::corrupt, "the cache returned a package without a file");
        }
    }

    /// Hands `p` to CompilerSettings::progress, if any; what it throws ends here.
    void report(const CompileProgress& p) const noexcept {
        if (!settings_.progress) return;
        try {
            settings_.progress(p);
        } catch (const std::exception& e) {
            try {
                log(LogLevel::debug, std::string("the progress callback failed: ") + e.what());
            } catch (...) {}
        } catch (...) {}
    }

    /// Whether another process compiles `key` right now, so that the lookup is about to wait
    /// (IndexCache::busy); false on any doubt (the lookup waits anyway).
    bool key_busy(const CacheKey& key) const noexcept {
        if (!settings_.progress || !cache_) return false;
        try {
            return cache_->busy(key);
        } catch (...) {
            return false;
        }
    }

    void log(LogLevel level, const std::string& line) const {
        if (settings_.log) settings_.log(level, line);
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
    std::vector<Installation> installs_;  // destroyed first: released before the cache goes
    FileWriter writer_;                   // the op info folders, written in the background
};

/// A configuration with everything in the process: the cache in memory, process-local locks and no
/// installs (tests, dry runs).
template <class Invoker>
using InMemoryCompiler = StaticKernelCompiler<Invoker, MemoryStorage, ProcessLock, NoInstall>;

}  // namespace skc
