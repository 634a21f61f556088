// libskc_torch.so: static kernel compilation for PyTorch's CPU backend, through skc.
//
// Loaded with torch.ops.load_library(path) (the Python package skc_torch does that), it defines
// these ops (docs/torch.md):
//   torch.ops.skc.enable(config: str)   start recording (config: skc options plus compiler,
//                                       device, toolchain_version, op_library, timing,
//                                       output_cache_mib)
//   torch.ops.skc.check(config: str)    what enable() checks of a config, without starting anything
//   torch.ops.skc.compile() -> str      end the session, compile or find in the cache, install,
//                                       load the kernels; the report as JSON
//   torch.ops.skc.progress() -> str     the running compile()'s latest skc::CompileProgress as
//                                       JSON, or null (for a progress display in another thread)
//   torch.ops.skc.counters() -> str     per op type: static, stock, recorded, unsupported calls
//   torch.ops.skc.disable()             stock kernels again, nothing recorded
//   torch.ops.skc.output_cache() -> str the static kernels' output memory (output_cache.hpp) as
//                                       JSON: capacity and kept bytes, blocks reused and new
// and overrides the aten CPU kernels of mm, addmm, _addmm_activation, bmm (and bmm.out), add,
// add_, sub, sub_ (alpha 1, or another as Axpy), rsub, mul, mul_, div, div_ (true division), relu,
// relu_, gelu, neg, neg_, tanh, tanh_, rsqrt, rsqrt_, silu, silu_, pow (a tensor to a number) and
// pow_, _softmax (and its out=), _log_softmax, native_layer_norm, clone, mean.dim, cat, where.self,
// masked_fill and masked_fill_ (a number or a 0-dim tensor value), and the backward kernels
// training calls (threshold_backward, gelu_backward, _softmax_backward_data,
// _log_softmax_backward_data, silu_backward, native_layer_norm_backward), as CPU extensions that
// replace aten kernels do. While the plugin is off, each override calls the stock kernel
// (at::cpu::...) and nothing else. While it is on, a call of float32 tensors is keyed by
// its raw arguments (mapping.hpp, skc::CallKey); the first call of each distinct key describes the
// op as an skc::OpRecord once and remembers its digest (skc::CallMap). While recording, a new op
// goes to the session (skc::OpRecorder); after compile(), a call whose op has a static kernel in
// the skc::KernelTable runs it, every other call runs the stock kernel.
//
// Build with -DNDEBUG and -D_GLIBCXX_USE_CXX11_ABI=1, as libtorch was (examples/torch/meson.build).
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/ops/_addmm_activation_cpu_dispatch.h>
#include <ATen/ops/_softmax_cpu_dispatch.h>
#include <ATen/ops/add_cpu_dispatch.h>
#include <ATen/ops/addmm_cpu_dispatch.h>
#include <ATen/ops/bmm_cpu_dispatch.h>
#include <ATen/ops/clone_compositeexplicitautograd_dispatch.h>
#include <ATen/ops/div_cpu_dispatch.h>
#include <ATen/ops/gelu_cpu_dispatch.h>
#include <ATen/ops/mm_cpu_dispatch.h>
#include <ATen/ops/mul_cpu_dispatch.h>
#include <ATen/ops/native_layer_norm_cpu_dispatch.h>
#include <ATen/ops/neg_cpu_dispatch.h>
#include <ATen/ops/pow_cpu_dispatch.h>
#include <ATen/ops/relu_cpu_dispatch.h>
#include <ATen/ops/rsub_cpu_dispatch.h>
#include <ATen/ops/rsqrt_cpu_dispatch.h>
#include <ATen/ops/silu_cpu_dispatch.h>
#include <ATen/ops/sub_cpu_dispatch.h>
#include <ATen/ops/tanh_cpu_dispatch.h>
#include <ATen/ops/threshold_backward_cpu_dispatch.h>
#include <ATen/ops/gelu_backward_cpu_dispatch.h>
#include <ATen/ops/_softmax_backward_data_cpu_dispatch.h>
#include <ATen/ops/silu_backward_cpu_dispatch.h>
#include <ATen/ops/native_layer_norm_backward_cpu_dispatch.h>
#include <ATen/ops/_log_softmax_backward_data_cpu_dispatch.h>
#include <ATen/ops/_log_softmax_cpu_dispatch.h>
#include <ATen/ops/cat_cpu_dispatch.h>
#include <ATen/ops/masked_fill_compositeexplicitautograd_dispatch.h>
#include <ATen/ops/masked_fill_cpu_dispatch.h>
#include <ATen/ops/mean_cpu_dispatch.h>
#include <ATen/ops/where_cpu_dispatch.h>
#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef SKC_TORCH_WITH_REDIS
#include <skc/ext/redis.hpp>
#endif
#include <skc/call_key.hpp>
#include <skc/compiler.hpp>
#include <skc/kernel_table.hpp>
#include <skc/op_info_io.hpp>
#include <skc/options.hpp>
#include <skc/recorder.hpp>

#include "host/loader.hpp"
#include "host/plan.hpp"
#include "host/toolchain.hpp"
#include "mapping.hpp"
#include "output_cache.hpp"

#ifndef SKC_TORCH_HOST_OP_COMPILER
#error "build with -DSKC_TORCH_HOST_OP_COMPILER=\"<path of host_op_compiler>\""
#endif

namespace skc_torch {
namespace {

namespace fs = std::filesystem;
using skc_host::KernelFn;
using Clock = std::chrono::steady_clock;
using Recorder = skc::OpRecorder<>;

/// The remote cache tier (SKC_REMOTE_CACHE, the config's remote_cache): Redis when the plugin is built
/// with hiredis.
#ifdef SKC_TORCH_WITH_REDIS
using PluginRemote = skc::RedisRemote;
#else
using PluginRemote = skc::NoRemote;
#endif

// ---- configuration ---------------------------------------------------------------------------------

/// The config keys the plugin reads itself; every other key is an skc option (docs/options.md).
constexpr std::array<std::string_view, 6> plugin_keys{"compiler",   "device", "toolchain_version",
                                                      "op_library", "timing", "output_cache_mib"};

struct Config {
    skc::Options options;
    fs::path compiler;
    std::string device = "host-cpu";
    std::string toolchain_version;  // empty: the compiler's fingerprint; the target's id is appended
    fs::path op_library;            // empty: <base>/op_library
    bool timing = false;
    std::size_t output_cache_mib = OutputCache::default_capacity >> 20;
};

/// The largest output_cache_mib: 1 TiB.
constexpr std::int64_t max_output_cache_mib = std::int64_t{1} << 20;

[[noreturn]] void config_error(std::string_view key, std::string message) {
    throw skc::Error(skc::Errc::invalid_option, std::move(message), skc::ErrorContext{{}, {}, std::string(key)});
}

std::string config_string(const skc::Value& v, std::string_view key) {
    if (!v.is_string()) config_error(key, "expected a string, found " + skc::detail::found_kind(v));
    if (v.as_string().empty()) config_error(key, "must not be empty");
    return v.as_string();
}

/// This library's file, for the default compiler beside it.
fs::path plugin_file() {
    Dl_info info{};
    if (::dladdr(reinterpret_cast<const void*>(&plugin_file), &info) != 0 && info.dli_fname != nullptr)
        return info.dli_fname;
    return {};
}

/// host_op_compiler beside this library, else where the build put it.
fs::path default_compiler() {
    const fs::path beside = plugin_file().parent_path() / "host_op_compiler";
    if (!plugin_file().empty() && ::access(beside.c_str(), X_OK) == 0) return beside;
    return SKC_TORCH_HOST_OP_COMPILER;
}

Config parse_config(std::string_view text) {
    const skc::Value doc = skc::parse_json(text);
    Config c;
    c.options = skc::parse_options(doc, plugin_keys);
    // Calling enable() asks for the feature: on unless the config turns it off.
    if (doc.find("static_kernel_compile") == nullptr) c.options.static_kernel_compile = true;
    if (const skc::Value* v = doc.find("compiler")) {
        c.compiler = config_string(*v, "compiler");
    } else {
        c.compiler = default_compiler();
    }
    if (const skc::Value* v = doc.find("device")) c.device = config_string(*v, "device");
    if (const skc::Value* v = doc.find("toolchain_version"))
        c.toolchain_version = config_string(*v, "toolchain_version");
    if (const skc::Value* v = doc.find("op_library")) c.op_library = config_string(*v, "op_library");
    if (const skc::Value* v = doc.find("timing")) {
        if (!v->is_bool()) config_error("timing", "expected true or false, found " + skc::detail::found_kind(*v));
        c.timing = v->as_bool();
    }
    if (const skc::Value* v = doc.find("output_cache_mib")) {
        if (v->kind() != skc::Kind::integer || v->as_int() < 0 || v->as_int() > max_output_cache_mib)
            config_error(
                "output_cache_mib",
                "expected an integer from 0 to " + std::to_string(max_output_cache_mib) + ", found " +
                    (v->kind() == skc::Kind::integer ? std::to_string(v->as_int()) : skc::detail::found_kind(*v)));
        c.output_cache_mib = static_cast<std::size_t>(v->as_int());
    }
    const std::string shown = skc::detail::quote(c.compiler.string(), 200);
    struct stat st {};
    if (::stat(c.compiler.c_str(), &st) != 0)
        config_error(
            "compiler",
            shown + " does not exist" +
                (doc.find("compiler") ? std::string()
                                      : " (the default: host_op_compiler beside the plugin or where it was built)"));
    if (!S_ISREG(st.st_mode) || ::access(c.compiler.c_str(), X_OK) != 0)
        config_error("compiler", shown + " is not an executable file");
    return c;
}

// ---- per-op state ------------------------------------------------------------------------------------

/// One distinct op instance (one CallKey), described once. What every call reads comes first,
/// in one cache line; the record and the reason are apart.
struct Instance {
    explicit Instance(Description d) : type(d.type) {
        auto c = std::make_unique<Cold>();
        c->reason = std::move(d.reason);
        if (d.record) {
            try {
                skc::validate(*d.record);
                // Only what the host kernels compile is recorded: an op they reject would only
                // fail the compile (and with it every other op's kernel).
                if (skc_host::Analysis a = skc_host::analyze(*d.record); !a.plan) {
                    c->reason = std::move(a.reason);  // names the op type
                } else {
                    digest = skc::digest(*d.record);
                    c->record = std::move(*d.record);
                }
            } catch (const skc::Error& e) {
                c->reason = std::string(name(type)) + ": " + e.what();
            }
        }
        cold = std::move(c);
    }
    [[nodiscard]] bool supported() const noexcept { return cold->record.has_value(); }
    [[nodiscard]] const skc::OpRecord& record() const noexcept { return *cold->record; }
    [[nodiscard]] const std::string& reason() const noexcept { return cold->reason; }

    OpType type;
    mutable std::atomic<bool> said_stock{false};        // SKC_TORCH_VERBOSE said it had no kernel
    skc::Digest digest{};                               // the record's digest, when supported
    mutable std::atomic<std::uint64_t> recorded_in{0};  // the last session it was given to
    struct Cold {
        std::optional<skc::OpRecord> record;  // what is recorded, when supported
        std::string reason;                   // why it is not supported
    };
    std::unique_ptr<const Cold> cold;
};

struct TypeCounters {
    std::atomic<std::uint64_t> static_calls{0}, stock_calls{0}, recorded{0}, unsupported{0};
    std::atomic<std::uint64_t> static_ns{0}, stock_ns{0};
};

/// The reselect hook: the installed kernels of the device into the plugin's table.
struct TableReselect {
    skc::KernelTable<KernelFn>* table;
    void reselect(const skc::ReselectContext& ctx) { table->reload(skc_host::load_installed_kernels(ctx)); }
};

/// The plugin's compiler: the node's ranks from the environment (AnyGather: one process, or the
/// ranks torchrun starts), the remote tier when the plugin is built with hiredis, and the reselect
/// hook that loads the installed kernels into the plugin's table.
struct PluginCompiler {
    PluginCompiler(const Config& c, skc::CompilerSettings s, TableReselect hook)
        : compiler(skc::ProcessInvoker(c.compiler), c.options, std::move(s), hook,
                   skc::AnyGather::from_env(c.options.compile_timeout)) {}
    skc::CompileReport compile(Recorder& r) {
        skc::CompileReport report = compiler.compile(r);
        // The plugin lives as long as the process and is never destroyed, so the cache's counters
        // are saved now, not at its destruction (skc cache stats shows them).
        if (auto* cache = compiler.cache()) {
            try {
                cache->flush();
            } catch (const std::exception& e) {
                std::fprintf(stderr, "skc_torch: warning: the cache statistics were not saved: %s\n", e.what());
            }
        }
        return report;
    }
    /// Waits for the op info folders its compile() writes in the background.
    void flush_files() { compiler.flush(); }
    skc::NodeCompiler<skc::ProcessInvoker, PluginRemote, skc::with_reselect<TableReselect>> compiler;
};

// ---- the plugin ---------------------------------------------------------------------------------------

/// What the plugin decided for one call. Every call the plugin looks at is counted once, as
/// static (its static kernel ran), stock (a supported op without a static kernel: the fallback) or
/// unsupported (the plugin cannot describe it: the stock kernel ran, untimed).
struct Decision {
    TypeCounters* counters = nullptr;  // null: nothing is counted (unsupported, counted already)
    const KernelFn* kernel = nullptr;  // the static kernel, or null: stock
    bool timing = false;
};

class Plugin {
public:
    static Plugin& get() {
        static auto* p = [] {
            auto* plugin = new Plugin;  // never destroyed: kernels may run while the process exits
            // but the op info folders that compile() writes in the background are finished first
            std::atexit(+[] { Plugin::get().flush_files(); });
            return plugin;
        }();
        return *p;
    }

    [[nodiscard]] bool on() const noexcept { return on_.load(std::memory_order_acquire); }

    /// The decision for a call of the plugin's, `c`. `describable` says whether its tensors are
    /// float32 and its scalar arguments have the values the records assume (else it is counted as
    /// unsupported and runs the stock kernel).
    Decision decide(bool describable, const Call& c, const char* why_not = "a tensor is not a plain float32 tensor") {
        Decision d;
        TypeCounters& counters = counters_[static_cast<std::size_t>(op_type_of(c.aten))];
        if (!describable) {
            counters.unsupported.fetch_add(1, std::memory_order_relaxed);
            if (verbose()) say_once(std::string(name(op_type_of(c.aten))) + ": " + why_not);
            return d;
        }
        skc::CallKey key;
        key_of(c, key);
        if (!key.ok()) {
            counters.unsupported.fetch_add(1, std::memory_order_relaxed);
            return d;
        }
        const Instance* inst = instances_.find(key);
        if (inst == nullptr) {
            bool made = false;
            inst = &instances_.emplace(key, [&] {
                made = true;
                return Instance(describe(c));
            });
            if (made) said(*inst);
        }
        if (!inst->supported()) {
            counters.unsupported.fetch_add(1, std::memory_order_relaxed);
            const std::uint64_t session = session_.load(std::memory_order_acquire);
            if (session != 0 && inst->recorded_in.exchange(session, std::memory_order_relaxed) != session)
                not_recorded(*inst);
            return d;
        }
        d.counters = &counters;
        d.timing = timing_.load(std::memory_order_relaxed);
        d.kernel = table_.find(inst->digest);
        if (d.kernel == nullptr && verbose() && table_.size() > 0 && !inst->said_stock.exchange(true))
            std::fprintf(stderr, "skc_torch: no static kernel for %s %s: stock\n",
                         std::string(name(inst->type)).c_str(), inst->digest.hex().c_str());
        const std::uint64_t session = session_.load(std::memory_order_acquire);
        if (session != 0 && inst->recorded_in.load(std::memory_order_relaxed) != session) record(*inst, session, d);
        return d;
    }

    /// Runs the stock kernel, counted (and timed) for a supported op.
    template <class Fn>
    decltype(auto) stock(const Decision& d, Fn&& fn) {
        if (d.counters == nullptr) return std::forward<Fn>(fn)();
        d.counters->stock_calls.fetch_add(1, std::memory_order_relaxed);
        if (!d.timing) return std::forward<Fn>(fn)();
        Timer t(d.counters->stock_ns);
        return std::forward<Fn>(fn)();
    }

    /// Runs the static kernel with the data of each input and output slot.
    void run_static(const Decision& d, std::initializer_list<const float*> in, std::initializer_list<float*> out) {
        const float* ins[4] = {};
        float* outs[3] = {};
        std::size_t i = 0;
        for (const float* p : in) ins[i++] = p;
        i = 0;
        for (float* p : out) outs[i++] = p;
        run_static(d, ins, outs);
    }

    /// Runs the static kernel with the pointer arrays of the calling convention (host/plan.hpp).
    void run_static(const Decision& d, const float* const* ins, float* const* outs) {
        d.counters->static_calls.fetch_add(1, std::memory_order_relaxed);
        if (!d.timing) {
            (*d.kernel)(ins, outs);
            return;
        }
        Timer t(d.counters->static_ns);
        (*d.kernel)(ins, outs);
    }

    /// What enable() checks of `text` before it starts a session (the JSON, every key and type,
    /// the compiler, the base), for a caller that wants a bad config refused before it records.
    static void check(std::string_view text) {
        const Config c = parse_config(text);
        if (c.options.static_kernel_compile) (void)skc::resolve_base(c.options);
    }

    void enable(std::string_view text) {
        std::lock_guard lock(mu_);
        if (recorder_ != nullptr)
            throw skc::Error(
                skc::Errc::session_active,
                "a recording session is already active: call torch.ops.skc.compile() or torch.ops.skc.disable() first");
        Config c = parse_config(text);
        if (!c.options.static_kernel_compile) {  // the feature is off: stock kernels, nothing recorded
            turn_off();
            OutputCache::get().set_capacity(c.output_cache_mib << 20);
            off_by_config_ = true;
            return;
        }
        const fs::path base = skc::resolve_base(c.options);  // the error names the path
        skc::CompilerSettings s;
        // A version given in the config still gets the target's id: a package built for one
        // instruction set must not be served to a CPU with another (target.hpp).
        s.toolchain_version = c.toolchain_version.empty() ? skc_host::toolchain_version(c.compiler)
                                                          : c.toolchain_version + "-" + skc_host::host_target().id;
        s.device = c.device;
        s.op_library = c.op_library.empty() ? base / "op_library" : c.op_library;
        s.backend = "host";
        if (s.op_library.is_relative()) s.op_library = fs::absolute(s.op_library);
        // The in-process rule (ops compiled before are not compiled again) holds only while the
        // kernel table can still load those ops: the same op library, device and toolchain. In
        // another, they must be compiled (or found in the cache) again.
        const std::string where = s.op_library.string() + '\n' + s.device + '\n' + s.toolchain_version;
        if (where != compiled_for_) {
            compiled_.clear();
            compiled_for_ = where;
        }
        s.compiled = &compiled_;
        s.progress = [this](const skc::CompileProgress& p) {
            std::lock_guard said(progress_mu_);
            progress_ = p;
        };
        auto compiler = std::make_unique<PluginCompiler>(c, s, TableReselect{&table_});
        std::error_code ec;
        fs::create_directories(s.op_library, ec);
        if (ec)
            throw skc::Error(skc::Errc::io_error, "cannot create the op library: " + ec.message(),
                             skc::ErrorContext{s.op_library.string(), {}, "op_library"});
        {
            std::lock_guard said(said_mu_);
            not_recorded_.clear();
        }
        recorder_ = std::make_unique<Recorder>();
        live_.store(recorder_.get(), std::memory_order_release);
        pending_ = std::move(compiler);
        off_by_config_ = false;
        timing_.store(c.timing, std::memory_order_relaxed);
        OutputCache::get().set_capacity(c.output_cache_mib << 20);  // the config has passed every check
        session_.store(++sessions_, std::memory_order_release);
        on_.store(true, std::memory_order_release);
    }

    std::string compile() {
        std::lock_guard lock(mu_);
        if (recorder_ == nullptr) {
            if (off_by_config_) return skc::dump_json(report_value(skc::CompileReport{}));
            throw skc::Error(skc::Errc::no_session, "no recording session: call torch.ops.skc.enable(config) first");
        }
        session_.store(0, std::memory_order_release);  // calls from now on do not record
        std::unique_ptr<Recorder> rec = std::move(recorder_);
        std::unique_ptr<PluginCompiler> compiler = std::move(pending_);
        skc::CompileReport report;
        try {
            report = compiler->compile(*rec);
        } catch (...) {
            forget_progress();
            rec->discard();
            retire(std::move(rec));
            throw;
        }
        forget_progress();
        retire(std::move(rec));
        compilers_.push_back(std::move(compiler));  // its installs last as long as it does
        // Why the ops the session saw but did not record have no static kernel (with nothing
        // recorded, the outcome is `skipped` and this says why).
        skc::Value out = report_value(report);
        skc::Array why;
        {
            std::lock_guard said(said_mu_);
            for (std::string& r : not_recorded_) why.emplace_back(std::move(r));
            not_recorded_.clear();
        }
        out.as_object().push_back({"not_recorded", skc::Value(std::move(why))});
        return skc::dump_json(out);
    }

    /// The running compile()'s latest progress report as JSON (docs/torch.md), or null: none is
    /// running, or it has reported nothing yet. Never waits for compile().
    std::string progress() {
        std::lock_guard lock(progress_mu_);
        if (!progress_) return "null";
        const skc::CompileProgress& p = *progress_;
        return skc::dump_json(
            skc::Value(skc::Object{{"phase", skc::Value(skc::to_string(p.phase))},
                                   {"done", skc::Value(p.done)},
                                   {"total", skc::Value(p.total)},
                                   {"op", skc::Value(p.op)},
                                   {"waiting_for", skc::Value(p.waiting_for)},
                                   {"key", skc::Value(p.key)},
                                   {"elapsed_ms", skc::Value(static_cast<double>(p.elapsed.count()) / 1e6)}}));
    }

    /// Finishes the op info folders of every compile() (at exit); a failure is a warning.
    void flush_files() noexcept {
        std::lock_guard lock(mu_);
        for (const auto& c : compilers_) {
            try {
                c->flush_files();
            } catch (const std::exception& e) {
                std::fprintf(stderr, "skc_torch: warning: the op info folders are incomplete: %s\n", e.what());
            }
        }
    }

    void disable() {
        std::lock_guard lock(mu_);
        turn_off();
        off_by_config_ = false;
    }

    std::string counters() const {
        skc::Object o;
        for (std::size_t i = 0; i < op_type_count; ++i) {
            const TypeCounters& c = counters_[i];
            const auto get = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
            if (get(c.static_calls) + get(c.stock_calls) + get(c.recorded) + get(c.unsupported) == 0) continue;
            o.push_back(
                {std::string(name(static_cast<OpType>(i))),
                 skc::Value(skc::Object{{"static", skc::Value(get(c.static_calls))},
                                        {"stock", skc::Value(get(c.stock_calls))},
                                        {"recorded", skc::Value(get(c.recorded))},
                                        {"unsupported", skc::Value(get(c.unsupported))},
                                        {"static_ms", skc::Value(static_cast<double>(get(c.static_ns)) / 1e6)},
                                        {"stock_ms", skc::Value(static_cast<double>(get(c.stock_ns)) / 1e6)}})});
        }
        return skc::dump_json(skc::Value(std::move(o)));
    }

private:
    /// The report as compile() returns it: CompileReport::to_value() and its log line, `summary`.
    static skc::Value report_value(const skc::CompileReport& report) {
        skc::Value out = report.to_value();
        out.as_object().push_back({"summary", skc::Value(report.summary())});
        return out;
    }

    void forget_progress() {
        std::lock_guard lock(progress_mu_);
        progress_.reset();
    }

    /// Adds the time from construction to destruction to a counter.
    struct Timer {
        explicit Timer(std::atomic<std::uint64_t>& to) : to_(to), t0_(Clock::now()) {}
        Timer(const Timer&) = delete;
        Timer& operator=(const Timer&) = delete;
        ~Timer() {
            to_.fetch_add(static_cast<std::uint64_t>(
                              std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0_).count()),
                          std::memory_order_relaxed);
        }
        std::atomic<std::uint64_t>& to_;
        Clock::time_point t0_;
    };

    /// A new op instance, said on stderr when SKC_TORCH_VERBOSE is set (to see what a model's
    /// calls are recorded as, and why some are not).
    static bool verbose() {
        static const bool on = [] {
            const char* v = std::getenv("SKC_TORCH_VERBOSE");
            return v != nullptr && *v != '\0' && std::string_view(v) != "0";
        }();
        return on;
    }

    /// Says `line` on stderr the first time only.
    void say_once(const std::string& line) {
        std::lock_guard lock(said_mu_);
        if (said_.insert(line).second) std::fprintf(stderr, "skc_torch: unsupported call: %s\n", line.c_str());
    }

    static void said(const Instance& inst) {
        if (!verbose()) return;
        const std::string line = inst.supported() ? std::string(name(inst.type)) + " " + inst.digest.hex() + " " +
                                                        skc::op_info_file_name(inst.record(), 0)
                                                  : "unsupported: " + inst.reason();
        std::fprintf(stderr, "skc_torch: new op instance: %s\n", line.c_str());
    }

    /// Gives `inst` to the session once. The session may end meanwhile (compile() or disable()
    /// in another thread): the recorder then refuses with no_session, and the op is not recorded.
    void record(const Instance& inst, std::uint64_t session, const Decision& d) {
        inst.recorded_in.store(session, std::memory_order_relaxed);
        Recorder* rec = live_.load(std::memory_order_acquire);
        if (rec == nullptr) return;
        try {
            const bool added = rec->record(inst.digest, [&] {
                skc::OpRecord r = inst.record();
                r.bin_type = d.kernel != nullptr ? 0 : 1;  // which kernel ran, as the original's files say
                return r;
            });
            if (added) d.counters->recorded.fetch_add(1, std::memory_order_relaxed);
        } catch (const skc::Error& e) {
            if (e.code() != skc::Errc::no_session) throw;
        }
    }

    /// Notes, once per session and op instance, why a call seen while recording is not recorded.
    void not_recorded(const Instance& inst) {
        std::lock_guard lock(said_mu_);
        if (not_recorded_.size() < 100 &&
            std::find(not_recorded_.begin(), not_recorded_.end(), inst.reason()) == not_recorded_.end())
            not_recorded_.push_back(inst.reason());
    }

    /// Keeps a finished session's recorder alive: calls that loaded its address may still use it.
    void retire(std::unique_ptr<Recorder> rec) {
        live_.store(nullptr, std::memory_order_release);
        retired_.push_back(std::move(rec));
    }

    void turn_off() {
        on_.store(false, std::memory_order_release);
        session_.store(0, std::memory_order_release);
        if (recorder_) {
            recorder_->discard();
            retire(std::move(recorder_));
        }
        pending_.reset();
        table_.reload({});
        compilers_.clear();  // their installs are released (other processes may still hold them)
        compiled_.clear();   // so the table has none of the ops compiled so far: a later session compiles them again
    }

    std::atomic<bool> on_{false};
    std::atomic<bool> timing_{false};
    std::atomic<std::uint64_t> session_{0};  // the recording session's number; 0: none
    std::atomic<Recorder*> live_{nullptr};   // the recording session's recorder, for calls
    std::array<TypeCounters, op_type_count> counters_;
    skc::CallMap<Instance> instances_;
    skc::KernelTable<KernelFn> table_;

    std::mutex said_mu_;  // SKC_TORCH_VERBOSE's lines said once; the session's not_recorded_
    std::set<std::string> said_;
    std::vector<std::string> not_recorded_;  // distinct reasons, this session, at most 100
    std::mutex mu_;                          // enable, compile, disable
    std::mutex progress_mu_;                 // progress_, written by compile(), read by progress()
    std::optional<skc::CompileProgress> progress_;
    std::uint64_t sessions_ = 0;
    bool off_by_config_ = false;
    std::unique_ptr<Recorder> recorder_;
    std::unique_ptr<PluginCompiler> pending_;  // made by enable() (checks the config), run by compile()
    std::vector<std::unique_ptr<PluginCompiler>> compilers_;
    skc::CompiledSet compiled_;  // the ops whose kernels the table has (the compilers' in-process rule)
    std::string compiled_for_;   // the op library, device and toolchain compiled_ is for
    std::vector<std::unique_ptr<Recorder>> retired_;
};

// ---- the overrides ----------------------------------------------------------------------------------
//
// Each override: off, or called from inside another override's kernel (a stock kernel's own aten
// calls are not the model's ops), it runs the stock kernel and nothing else. Otherwise it builds
// the Call, asks the plugin, and runs the static kernel (outputs dense, allocated here, or the
// given out= tensor when it fits) or the stock one.

// initial-exec: one instruction to reach it, not a call to __tls_get_addr (as a dlopen'ed
// library's thread-locals otherwise cost); a bool fits the static TLS every glibc reserves.
thread_local bool in_kernel __attribute__((tls_model("initial-exec"))) = false;

/// Marks the thread as inside an override's kernel while it lives.
struct KernelScope {
    KernelScope() noexcept { in_kernel = true; }
    KernelScope(const KernelScope&) = delete;
    KernelScope& operator=(const KernelScope&) = delete;
    ~KernelScope() { in_kernel = false; }
};

/// Whether the plugin looks at this call at all.
bool intercept() noexcept { return !in_kernel && Plugin::get().on(); }

/// A plain float32 tensor: strided, no lazy negation or conjugation, no dimension names (stock
/// torch propagates names and checks that they match; the static kernels know nothing of them).
bool f32(const at::Tensor& t) noexcept {
    return t.defined() && t.scalar_type() == at::kFloat && t.layout() == at::kStrided && !t.is_neg() && !t.is_conj() &&
           !t.has_names();
}

TensorArg arg(const at::Tensor& t) noexcept {
    return {Dims(t.sizes().data(), t.sizes().size()), Dims(t.strides().data(), t.strides().size()), t.is_contiguous()};
}

bool is_one(const at::Scalar& s) {
    if (s.isIntegral(false)) return s.toLong() == 1;
    if (s.isFloatingPoint()) return s.toDouble() == 1.0;
    return false;
}

const float* in(const at::Tensor& t) { return static_cast<const float*>(t.data_ptr()); }
float* out(const at::Tensor& t) { return static_cast<float*>(t.data_ptr()); }

/// A dense float32 CPU tensor, its memory from the output cache (output_cache.hpp: the block a freed
/// output of that size left, else c10::alloc_cpu's, as stock's CPU kernels allocate), made directly
/// as they make theirs (at::empty would go through the dispatcher again: about 75 ns more a call).
at::Tensor new_dense(at::IntArrayRef sizes) {
    return at::Tensor(at::detail::empty_generic(sizes, &OutputCache::get(), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                at::kFloat, c10::nullopt));
}

/// The new output of an elementwise op of `ins` (dense, views, or numbers: 0-dim), with the strides
/// stock's TensorIterator gives it (elementwise_strides(): they differ from new_dense()'s only in
/// the strides of size-1 dims, where the inputs' own strides order them; a view whose output stock
/// lays out otherwise is not described, mapping.hpp's row_major_output()).
at::Tensor new_elementwise(at::IntArrayRef sizes, std::initializer_list<TensorArg> ins) {
    std::array<std::int64_t, 64> strides{};
    if (sizes.size() > strides.size() ||
        !elementwise_strides(Dims(sizes.data(), sizes.size()), ins, std::span(strides.data(), sizes.size())))
        return new_dense(sizes);
    return at::Tensor(at::detail::empty_strided_generic(sizes, at::IntArrayRef(strides.data(), sizes.size()),
                                                        &OutputCache::get(), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                        at::kFloat));
}

/// The bytes a strided tensor's elements span, from its first element's address.
std::pair<std::uintptr_t, std::uintptr_t> span_of(const at::Tensor& t) {
    std::int64_t last = 0;
    for (std::int64_t i = 0; i < t.dim(); ++i) last += (t.size(i) - 1) * t.stride(i);
    const auto b = reinterpret_cast<std::uintptr_t>(t.data_ptr());
    return {b, b + static_cast<std::uintptr_t>(last + 1) * sizeof(float)};
}

bool overlap(const at::Tensor& a, const at::Tensor& b) {
    const auto x = span_of(a), y = span_of(b);
    return x.first < y.second && y.first < x.second;
}

/// `o` can take a dense result of `sizes` written over it: dense, that shape, and apart from
/// `inputs` or exactly one of them (the same elements: in place).
bool fits(const at::Tensor& o, at::IntArrayRef sizes, std::initializer_list<const at::Tensor*> inputs) {
    if (!f32(o) || !o.is_contiguous() || o.sizes() != sizes) return false;
    for (const at::Tensor* t : inputs)
        if (overlap(o, *t) && !(t->data_ptr() == o.data_ptr() && t->sizes() == o.sizes() && t->is_contiguous()))
            return false;
    return true;
}

/// The stock kernel, counted, with the thread marked as inside a kernel.
template <class Fn>
decltype(auto) stock(const Decision& d, Fn&& fn) {
    KernelScope scope;
    return Plugin::get().stock(d, std::forward<Fn>(fn));
}

void run(const Decision& d, std::initializer_list<const float*> ins, std::initializer_list<float*> outs) {
    KernelScope scope;
    Plugin::get().run_static(d, ins, outs);
}

// Matrix products.

at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2) {
    if (!intercept()) return at::cpu::mm(self, mat2);
    const Call c{Aten::mm, {arg(self), arg(mat2)}, 2};
    const Decision d = Plugin::get().decide(f32(self) && f32(mat2), c);
    if (d.kernel != nullptr) {
        at::Tensor y = new_dense({self.size(0), mat2.size(1)});
        run(d, {in(self), in(mat2), nullptr, nullptr}, {out(y)});
        return y;
    }
    return stock(d, [&] { return at::cpu::mm(self, mat2); });
}

/// Whether stock's addmm keeps a -0.0 sum: C = bias + AB where every product underflows to -0 and
/// the bias is -0.0 is -0.0 with a BLAS whose kernels sum with fused multiply-adds from +0 (a tiny
/// negative product rounds to -0: OpenBLAS's Haswell and later kernels), +0.0 with one that adds
/// rounded products to +0 (its SSE3 kernels). Asked of stock once, on the first addmm the plugin
/// sees; the record carries the answer (keep_negative_zero), so the static kernel gives what the
/// BLAS of this process gives.
bool stock_keeps_negative_zero() {
    static const bool keeps = [] {
        const at::Tensor bias = at::full({16}, -0.0f), a = at::full({4, 8}, -1e-30f), b = at::full({8, 16}, 1e-30f);
        return std::signbit(at::cpu::addmm(bias, a, b).data_ptr<float>()[0]);
    }();
    return keeps;
}

at::Tensor addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                 const at::Scalar& alpha) {
    if (!intercept()) return at::cpu::addmm(self, mat1, mat2, beta, alpha);
    const Call c{Aten::addmm, {arg(self), arg(mat1), arg(mat2)}, 3, 0, 0, stock_keeps_negative_zero() ? 1 : 0};
    const Decision d = Plugin::get().decide(f32(self) && f32(mat1) && f32(mat2) && is_one(beta) && is_one(alpha), c,
                                            "a tensor is not a plain float32 tensor, or beta or alpha is not 1");
    if (d.kernel != nullptr) {
        at::Tensor y = new_dense({mat1.size(0), mat2.size(1)});
        run(d, {in(mat1), in(mat2), in(self), nullptr}, {out(y)});
        return y;
    }
    return stock(d, [&] { return at::cpu::addmm(self, mat1, mat2, beta, alpha); });
}

at::Tensor addmm_activation(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                            const at::Scalar& beta, const at::Scalar& alpha, bool use_gelu) {
    if (!intercept()) return at::cpu::_addmm_activation(self, mat1, mat2, beta, alpha, use_gelu);
    const Call c{Aten::addmm_activation,
                 {arg(self), arg(mat1), arg(mat2)},
                 3,
                 use_gelu ? 1 : 0,
                 0,
                 stock_keeps_negative_zero() ? 1 : 0};
    const Decision d = Plugin::get().decide(f32(self) && f32(mat1) && f32(mat2) && is_one(beta) && is_one(alpha), c,
                                            "a tensor is not a plain float32 tensor, or beta or alpha is not 1");
    if (d.kernel != nullptr) {
        at::Tensor y = new_dense({mat1.size(0), mat2.size(1)});
        run(d, {in(mat1), in(mat2), in(self), nullptr}, {out(y)});
        return y;
    }
    return stock(d, [&] { return at::cpu::_addmm_activation(self, mat1, mat2, beta, alpha, use_gelu); });
}

at::Tensor bmm(const at::Tensor& self, const at::Tensor& mat2) {
    if (!intercept()) return at::cpu::bmm(self, mat2);
    const Call c{Aten::bmm, {arg(self), arg(mat2)}, 2};
    const Decision d = Plugin::get().decide(f32(self) && f32(mat2), c);
    if (d.kernel != nullptr) {
        at::Tensor y = new_dense({self.size(0), self.size(1), mat2.size(2)});
        run(d, {in(self), in(mat2), nullptr, nullptr}, {out(y)});
        return y;
    }
    return stock(d, [&] { return at::cpu::bmm(self, mat2); });
}

at::Tensor& bmm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& result) {
    if (!intercept()) return at::cpu::bmm_outf(self, mat2, result);
    const Call c{Aten::bmm, {arg(self), arg(mat2)}, 2};
    const Decision d = Plugin::get().decide(f32(self) && f32(mat2), c);
    if (d.kernel != nullptr && fits(result, {self.size(0), self.size(1), mat2.size(2)}, {}) && !overlap(result, self) &&
        !overlap(result, mat2)) {
        run(d, {in(self), in(mat2), nullptr, nullptr}, {out(result)});
        return result;
    }
    return stock(d, [&]() -> at::Tensor& { return at::cpu::bmm_outf(self, mat2, result); });
}

// Elementwise ops: add, sub, mul and div, out of place and in place.

constexpr const char* binary_why =
    "a tensor is not a plain float32 tensor, or alpha is not a real number within float's range, or a rounding mode "
    "is given";

/// alpha of add and sub as the float torch computes with (Scalar::to<float>: a real number within
/// float's range, an infinity or NaN; an integer rounded once); nullopt for what torch rejects for
/// a float result (a bool alpha, a complex one, a finite one beyond float's range).
std::optional<float> alpha_value(const at::Scalar& a) {
    if (a.isFloatingPoint()) {
        const double x = a.toDouble();
        if (std::isfinite(x) && std::abs(x) > static_cast<double>(std::numeric_limits<float>::max()))
            return std::nullopt;
        return static_cast<float>(x);
    }
    if (a.isIntegral(false)) return static_cast<float>(a.toLong());
    return std::nullopt;
}

/// An operand of add, sub, mul and div (the second, or the first when the second is a tensor): a
/// float32 tensor, or a Python number (a wrapped 0-dim tensor, which torch casts to the tensor's
/// float32): then described as a 0-dim float tensor, and the kernel reads the number as a float.
struct Other {
    bool ok = false;
    bool number = false;
    float value = 0;
    TensorArg arg;
    [[nodiscard]] const float* data(const at::Tensor& t) const { return number ? &value : in(t); }
};

Other other_operand(const at::Tensor& other) {
    Other o;
    if (f32(other)) {
        o.ok = true;
        o.arg = arg(other);
    } else if (other.defined() && other.unsafeGetTensorImpl()->is_wrapped_number() && other.dim() == 0 &&
               (other.scalar_type() == at::kDouble || other.scalar_type() == at::kLong)) {
        o.ok = o.number = true;
        // Rounded once to float, as torch casts the number: an integer through double would round twice.
        o.value = other.scalar_type() == at::kLong ? static_cast<float>(other.item<std::int64_t>())
                                                   : static_cast<float>(other.item<double>());
        o.arg = TensorArg{Dims{}, Dims{}, true};
    }
    return o;
}

template <Aten A, class Stock>
at::Tensor binary(const at::Tensor& self, const at::Tensor& other, bool describable, Stock&& stock_fn, double f0 = 0) {
    if (!intercept()) return stock_fn();
    // self may be the number (`1 - x`: rsub's stock kernel calls sub(number, x)), not both.
    const Other s = other_operand(self), o = other_operand(other);
    const Call c{A, {s.arg, o.arg}, 2, 0, f0};
    const Decision d = Plugin::get().decide(describable && s.ok && o.ok && !(s.number && o.number), c, binary_why);
    if (d.kernel != nullptr) {
        at::Tensor y = new_elementwise(at::infer_size_dimvector(self.sizes(), other.sizes()), {s.arg, o.arg});
        run(d, {s.data(self), o.data(other)}, {out(y)});
        return y;
    }
    return stock(d, stock_fn);
}

template <Aten A, class Stock>
at::Tensor& binary_(at::Tensor& self, const at::Tensor& other, bool describable, Stock&& stock_fn, double f0 = 0) {
    if (!intercept()) return stock_fn();
    const Other o = other_operand(other);
    const Call c{A, {arg(self), o.arg}, 2, 0, f0};
    const Decision d = Plugin::get().decide(describable && f32(self) && o.ok, c, binary_why);
    if (d.kernel != nullptr && fits(self, at::infer_size_dimvector(self.sizes(), other.sizes()), {&other})) {
        run(d, {in(self), o.data(other)}, {out(self)});
        return self;
    }
    return stock(d, stock_fn);
}

/// Axpy's alpha for add (or, `negate`, sub) with alpha: the float torch computes with, as a double
/// (0 when there is none: the call is not describable then).
double axpy_alpha(const std::optional<float>& a, bool negate) {
    return a ? static_cast<double>(negate ? -*a : *a) : 0.0;
}

// add and sub with alpha 1 are Add and Sub; with another alpha, Axpy (self + alpha other; sub's
// alpha negated, as torch's sub kernel is its add kernel with -alpha).
at::Tensor add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
    auto stock_fn = [&] { return at::cpu::add(self, other, alpha); };
    if (is_one(alpha)) return binary<Aten::add>(self, other, true, stock_fn);
    const std::optional<float> a = alpha_value(alpha);
    return binary<Aten::axpy>(self, other, a.has_value(), stock_fn, axpy_alpha(a, false));
}
at::Tensor& add_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
    auto stock_fn = [&]() -> at::Tensor& { return at::cpu::add_(self, other, alpha); };
    if (is_one(alpha)) return binary_<Aten::add>(self, other, true, stock_fn);
    const std::optional<float> a = alpha_value(alpha);
    return binary_<Aten::axpy>(self, other, a.has_value(), stock_fn, axpy_alpha(a, false));
}
at::Tensor sub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
    auto stock_fn = [&] { return at::cpu::sub(self, other, alpha); };
    if (is_one(alpha)) return binary<Aten::sub>(self, other, true, stock_fn);
    const std::optional<float> a = alpha_value(alpha);
    return binary<Aten::axpy>(self, other, a.has_value(), stock_fn, axpy_alpha(a, true));
}
at::Tensor& sub_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
    auto stock_fn = [&]() -> at::Tensor& { return at::cpu::sub_(self, other, alpha); };
    if (is_one(alpha)) return binary_<Aten::sub>(self, other, true, stock_fn);
    const std::optional<float> a = alpha_value(alpha);
    return binary_<Aten::axpy>(self, other, a.has_value(), stock_fn, axpy_alpha(a, true));
}

/// rsub(self, other, alpha) = other - alpha self (`1 - x` comes here with other the number): Sub
/// (other, self), or Axpy (other, self) with -alpha; other may be a number (a 0-dim float).
at::Tensor rsub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
    auto stock_fn = [&] { return at::cpu::rsub(self, other, alpha); };
    if (!intercept()) return stock_fn();
    const bool one = is_one(alpha);
    const std::optional<float> a = one ? std::optional<float>(1.0f) : alpha_value(alpha);
    const Other o = other_operand(other);
    const Call c{one ? Aten::sub : Aten::axpy, {o.arg, arg(self)}, 2, 0, one ? 0.0 : axpy_alpha(a, true)};
    const Decision d = Plugin::get().decide(f32(self) && o.ok && a.has_value(), c, binary_why);
    if (d.kernel != nullptr) {
        at::Tensor y = new_elementwise(at::infer_size_dimvector(other.sizes(), self.sizes()), {o.arg, arg(self)});
        run(d, {o.data(other), in(self)}, {out(y)});
        return y;
    }
    return stock(d, stock_fn);
}
at::Tensor mul(const at::Tensor& self, const at::Tensor& other) {
    return binary<Aten::mul>(self, other, true, [&] { return at::cpu::mul(self, other); });
}
at::Tensor& mul_(at::Tensor& self, const at::Tensor& other) {
    return binary_<Aten::mul>(self, other, true, [&]() -> at::Tensor& { return at::cpu::mul_(self, other); });
}
at::Tensor div(const at::Tensor& self, const at::Tensor& other) {
    return binary<Aten::div>(self, other, true, [&] { return at::cpu::div(self, other); });
}
at::Tensor& div_(at::Tensor& self, const at::Tensor& other) {
    return binary_<Aten::div>(self, other, true, [&]() -> at::Tensor& { return at::cpu::div_(self, other); });
}
/// div with rounding_mode: true division (RealDiv) only without one.
at::Tensor div_mode(const at::Tensor& self, const at::Tensor& other, c10::optional<c10::string_view> mode) {
    return binary<Aten::div>(self, other, !mode.has_value(), [&] { return at::cpu::div(self, other, mode); });
}
at::Tensor& div_mode_(at::Tensor& self, const at::Tensor& other, c10::optional<c10::string_view> mode) {
    return binary_<Aten::div>(self, other, !mode.has_value(),
                              [&]() -> at::Tensor& { return at::cpu::div_(self, other, mode); });
}

// Activations and rows.

at::Tensor relu(const at::Tensor& self) {
    if (!intercept()) return at::cpu::relu(self);
    const Call c{Aten::relu, {arg(self)}, 1};
    const Decision d = Plugin::get().decide(f32(self), c);
    if (d.kernel != nullptr) {
        at::Tensor y = new_elementwise(self.sizes(), {arg(self)});
        run(d, {in(self)}, {out(y)});
        return y;
    }
    return stock(d, [&] { return at::cpu::relu(self); });
}

at::Tensor& relu_(at::Tensor& self) {
    if (!intercept()) return at::cpu::relu_(self);
    const Call c{Aten::relu, {arg(self)}, 1};
    const Decision d = Plugin::get().decide(f32(self), c);
    if (d.kernel != nullptr && self.is_contiguous()) {  // a view's kernel writes a new dense output
        run(d, {in(self)}, {out(self)});
        return self;
    }
    return stock(d, [&]() -> at::Tensor& { return at::cpu::relu_(self); });
}

/// y = f(self), dense: neg, tanh, rsqrt, silu, and pow by a number (`f0` the exponent).
template <Aten A, class Stock>
at::Tensor unary(const at::Tensor& self, Stock&& stock_fn, bool describable = true, double f0 = 0,
                 const char* why_not = "self is not a plain float32 tensor") {
    if (!intercept()) return stock_fn();
    const Call c{A, {arg(self)}, 1, 0, f0};
    const Decision d = Plugin::get().decide(describable && f32(self), c, why_not);
    if (d.kernel != nullptr) {
        at::Tensor y = new_elementwise(self.sizes(), {arg(self)});
        run(d, {in(self)}, {out(y)});
        return y;
    }
    return stock(d, stock_fn);
}

/// self = f(self), in place.
template <Aten A, class Stock>
at::Tensor& unary_(at::Tensor& self, Stock&& stock_fn, bool describable = true, double f0 = 0,
                   const char* why_not = "self is not a plain float32 tensor") {
    if (!intercept()) return stock_fn();
    const Call c{A, {arg(self)}, 1, 0, f0};
    const Decision d = Plugin::get().decide(describable && f32(self), c, why_not);
    if (d.kernel != nullptr && self.is_contiguous()) {  // a view's kernel writes a new dense output
        run(d, {in(self)}, {out(self)});
        return self;
    }
    return stock(d, stock_fn);
}

at::Tensor neg(const at::Tensor& self) {
    return unary<Aten::neg>(self, [&] { return at::cpu::neg(self); });
}
at::Tensor& neg_(at::Tensor& self) {
    return unary_<Aten::neg>(self, [&]() -> at::Tensor& { return at::cpu::neg_(self); });
}
at::Tensor tanh(const at::Tensor& self) {
    return unary<Aten::tanh>(self, [&] { return at::cpu::tanh(self); });
}
at::Tensor& tanh_(at::Tensor& self) {
    return unary_<Aten::tanh>(self, [&]() -> at::Tensor& { return at::cpu::tanh_(self); });
}
at::Tensor rsqrt(const at::Tensor& self) {
    return unary<Aten::rsqrt>(self, [&] { return at::cpu::rsqrt(self); });
}
at::Tensor& rsqrt_(at::Tensor& self) {
    return unary_<Aten::rsqrt>(self, [&]() -> at::Tensor& { return at::cpu::rsqrt_(self); });
}
at::Tensor silu(const at::Tensor& self) {
    return unary<Aten::silu>(self, [&] { return at::cpu::silu(self); });
}
at::Tensor& silu_(at::Tensor& self) {
    return unary_<Aten::silu>(self, [&]() -> at::Tensor& { return at::cpu::silu_(self); });
}

/// pow's exponent as a double when it is a real number (an integer is exact up to 2^53; only
/// small ones are supported: host plan.hpp's Power).
constexpr const char* pow_why = "self is not a plain float32 tensor, or the exponent is not a real number";
bool real_exponent(const at::Scalar& e) { return e.isFloatingPoint() || e.isIntegral(false); }
double exponent_of(const at::Scalar& e) { return real_exponent(e) ? e.toDouble() : 0.0; }

at::Tensor pow(const at::Tensor& self, const at::Scalar& exponent) {
    return unary<Aten::pow>(
        self, [&] { return at::cpu::pow(self, exponent); }, real_exponent(exponent), exponent_of(exponent), pow_why);
}
at::Tensor& pow_(at::Tensor& self, const at::Scalar& exponent) {
    return unary_<Aten::pow>(
        self, [&]() -> at::Tensor& { return at::cpu::pow_(self, exponent); }, real_exponent(exponent),
        exponent_of(exponent), pow_why);
}

at::Tensor gelu(const at::Tensor& self, c10::string_view approximate) {
    if (!intercept()) return at::cpu::gelu(self, approximate);
    const bool tanh = approximate == "tanh";
    const Call c{Aten::gelu, {arg(self)}, 1, tanh ? 1 : 0};
    const Decision d =
        Plugin::get().decide(f32(self) && (tanh || approximate == "none"), c,
                             "self is not a plain float32 tensor, or approximate is neither none nor tanh");
    if (d.kernel != nullptr) {
        at::Tensor y = new_elementwise(self.sizes(), {arg(self)});
        run(d, {in(self)}, {out(y)});
        return y;
    }
    return stock(d, [&] { return at::cpu::gelu(self, approximate); });
}

/// _softmax's dim wrapped to [0, rank), or -1 when out of range (the stock kernel then reports it).
std::int64_t softmax_dim(const at::Tensor& self, std::int64_t dim) {
    const std::int64_t r = std::max<std::int64_t>(self.dim(), 1);
    if (dim < -r || dim >= r) return -1;
    return dim < 0 ? dim + r : dim;
}

/// softmax and log_softmax: a float32 tensor along one dim, without half_to_float.
Decision decide_softmax(Aten op, const at::Tensor& self, std::int64_t dim, bool half_to_float) {
    const std::int64_t wrapped = softmax_dim(self, dim);
    return Plugin::get().decide(f32(self) && !half_to_float && wrapped >= 0, Call{op, {arg(self)}, 1, wrapped},
                                "self is not a plain float32 tensor, or half_to_float is set, or dim is out of range");
}

template <class Stock>
at::Tensor softmax_like(Aten op, const at::Tensor& self, std::int64_t dim, bool half_to_float, Stock stock_fn) {
    if (!intercept()) return stock_fn();
    const Decision d = decide_softmax(op, self, dim, half_to_float);
    if (d.kernel != nullptr) {
        at::Tensor y = new_dense(self.sizes());
        run(d, {in(self)}, {out(y)});
        return y;
    }
    return stock(d, stock_fn);
}

at::Tensor softmax(const at::Tensor& self, std::int64_t dim, bool half_to_float) {
    return softmax_like(Aten::softmax, self, dim, half_to_float,
                        [&] { return at::cpu::_softmax(self, dim, half_to_float); });
}

at::Tensor& softmax_out(const at::Tensor& self, std::int64_t dim, bool half_to_float, at::Tensor& result) {
    auto stock_fn = [&]() -> at::Tensor& { return at::cpu::_softmax_outf(self, dim, half_to_float, result); };
    if (!intercept()) return stock_fn();
    const Decision d = decide_softmax(Aten::softmax, self, dim, half_to_float);
    if (d.kernel != nullptr && fits(result, self.sizes(), {&self})) {  // the fast path runs it in place
        run(d, {in(self)}, {out(result)});
        return result;
    }
    return stock(d, stock_fn);
}

/// Whether every row's statistics, from the static kernel, keep the row's values and their squared
/// deviations within float's range, which is where stock's agree with them: each |x| < 1e18 and
/// the row's sum of squared deviations < 1e36, as |mean| + sqrt(cols) / rstd < 1e18 bounds both.
/// Beyond it stock's moments (Welford's sums, in float) overflow into NaN or 0 depending on the
/// row's length and where its large values sit, and the static kernel's shifted sums do not: such
/// a call takes stock's result instead.
bool moments_in_range(const at::Tensor& mean, const at::Tensor& rstd, std::int64_t cols) {
    constexpr float limit = 1e18f;
    const float root = std::sqrt(static_cast<float>(cols));
    const float* m = in(mean);
    const float* r = in(rstd);
    bool ok = true;
    for (std::int64_t i = 0, n = mean.numel(); i < n; ++i) {
        const float a = std::abs(m[i]);
        ok = ok && a < limit && root < (limit - a) * r[i];  // false on NaN
    }
    return ok;
}

/// `n` floats of value `v` (1 or 0), never freed nor written: the weight and bias LayerNorm's kernel
/// reads for a call without them. Thread-safe; a longer row gets a new block, the old ones stay.
const float* constant_row(float v, std::int64_t n) {
    static std::mutex mu;
    static std::vector<std::pair<std::int64_t, std::unique_ptr<float[]>>> blocks[2];
    std::lock_guard lock(mu);
    auto& mine = blocks[v == 0.0f ? 0 : 1];
    if (mine.empty() || mine.back().first < n) {
        auto b = std::make_unique<float[]>(static_cast<std::size_t>(n));
        std::fill_n(b.get(), n, v);
        mine.emplace_back(n, std::move(b));
    }
    return mine.back().second.get();
}

/// The input's last dims where normalized_shape is them, else nullopt (stock raises; the key holds
/// only their count).
std::optional<at::IntArrayRef> normalized_dims(const at::Tensor& input, c10::SymIntArrayRef normalized_shape) {
    const auto k = static_cast<std::int64_t>(normalized_shape.size());
    if (k > input.dim()) return std::nullopt;
    for (std::int64_t i = 0; i < k; ++i)
        if (normalized_shape[static_cast<std::size_t>(i)] != input.size(input.dim() - k + i)) return std::nullopt;
    return input.sizes().slice(static_cast<std::size_t>(input.dim() - k));
}

/// The description of a constant row (constant_row()) of the normalized dims `norm`: dense, its
/// strides written into `strides`, which must outlive the description.
TensorArg constant_arg(at::IntArrayRef norm, std::vector<std::int64_t>& strides) {
    strides.resize(norm.size());
    std::int64_t acc = 1;
    for (std::size_t i = norm.size(); i-- > 0;) strides[i] = acc, acc *= norm[i];
    return TensorArg{Dims(norm.data(), norm.size()), Dims(strides), true};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm(const at::Tensor& input,
                                                                 c10::SymIntArrayRef normalized_shape,
                                                                 const c10::optional<at::Tensor>& weight,
                                                                 const c10::optional<at::Tensor>& bias, double eps) {
    auto stock_fn = [&] { return at::cpu::native_layer_norm_symint(input, normalized_shape, weight, bias, eps); };
    if (!intercept()) return stock_fn();
    const auto k = static_cast<std::int64_t>(normalized_shape.size());
    const std::optional<at::IntArrayRef> dims = normalized_dims(input, normalized_shape);
    const bool trailing = dims.has_value();
    // Without a weight (or a bias) stock computes (x rstd - rstd mean) 1 + 0 (its kernel's own
    // formula), so the op is the affine one with a weight of ones (a bias of zeros) of the
    // normalized shape: the same record and kernel, given constant rows.
    const bool has_w = weight.has_value() && weight->defined(), has_b = bias.has_value() && bias->defined();
    const at::IntArrayRef norm = dims.value_or(at::IntArrayRef{});
    const std::int64_t cols = c10::multiply_integers(norm);  // a row's elements
    // The constant rows' description (the normalized dims, dense), for a call without both.
    std::vector<std::int64_t> norm_strides;
    const TensorArg constant = trailing && !(has_w && has_b) ? constant_arg(norm, norm_strides) : TensorArg{};
    const Call c{Aten::native_layer_norm,
                 {arg(input), has_w ? arg(*weight) : constant, has_b ? arg(*bias) : constant},
                 3,
                 k,
                 eps};
    const Decision d = Plugin::get().decide(
        trailing && f32(input) && (!has_w || f32(*weight)) && (!has_b || f32(*bias)), c,
        "a tensor is not a plain float32 tensor, or normalized_shape is not the input's last dims");
    if (d.kernel != nullptr) {
        std::vector<std::int64_t> stat(input.sizes().begin(), input.sizes().end());
        for (std::size_t i = stat.size() - static_cast<std::size_t>(k); i < stat.size(); ++i) stat[i] = 1;
        at::Tensor y = new_dense(input.sizes()), mean = new_dense(stat), rstd = new_dense(stat);
        run(d,
            {in(input), has_w ? in(*weight) : constant_row(1.0f, cols), has_b ? in(*bias) : constant_row(0.0f, cols)},
            {out(y), out(mean), out(rstd)});
        if (moments_in_range(mean, rstd, cols)) return {y, mean, rstd};
        // Counted as both: the static kernel ran, and its result was replaced by stock's.
    }
    return stock(d, stock_fn);
}

at::Tensor clone(const at::Tensor& self, c10::optional<at::MemoryFormat> memory_format) {
    if (!intercept()) return at::compositeexplicitautograd::clone(self, memory_format);
    const Call c{Aten::clone, {arg(self)}, 1};
    const Decision d =
        Plugin::get().decide(f32(self) && memory_format == at::MemoryFormat::Contiguous, c,
                             "self is not a plain float32 tensor, or the clone is not to a contiguous tensor");
    if (d.kernel != nullptr) {
        at::Tensor y = new_dense(self.sizes());
        run(d, {in(self), nullptr}, {out(y)});  // self's first element is the dense tensor's
        return y;
    }
    return stock(d, [&] { return at::compositeexplicitautograd::clone(self, memory_format); });
}

// Backward kernels: the gradients autograd calls for relu (threshold_backward of relu's output),
// GELU, softmax and SiLU. Each takes two dense float32 tensors of one shape (else stock) and gives a
// new dense tensor of that shape, as stock's does for such inputs.

/// dx = kernel(a, b) into a new dense tensor of `sizes`, or the stock kernel.
template <class Stock>
at::Tensor grad(const Decision& d, const at::Tensor& a, const at::Tensor& b, at::IntArrayRef sizes, Stock&& stock_fn) {
    if (d.kernel != nullptr) {
        at::Tensor dx = new_dense(sizes);
        run(d, {in(a), in(b)}, {out(dx)});
        return dx;
    }
    return stock(d, stock_fn);
}

at::Tensor threshold_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Scalar& threshold) {
    if (!intercept()) return at::cpu::threshold_backward(grad_output, self, threshold);
    const bool real = threshold.isFloatingPoint() || threshold.isIntegral(false);
    const Call c{Aten::threshold_backward, {arg(grad_output), arg(self)}, 2, 0, real ? threshold.toDouble() : 0.0};
    const Decision d =
        Plugin::get().decide(f32(grad_output) && f32(self) && real, c,
                             "a tensor is not a plain float32 tensor, or threshold is not a real number");
    return grad(d, grad_output, self, self.sizes(),
                [&] { return at::cpu::threshold_backward(grad_output, self, threshold); });
}

at::Tensor gelu_backward(const at::Tensor& grad_output, const at::Tensor& self, c10::string_view approximate) {
    if (!intercept()) return at::cpu::gelu_backward(grad_output, self, approximate);
    const bool tanh = approximate == "tanh";
    const Call c{Aten::gelu_backward, {arg(grad_output), arg(self)}, 2, tanh ? 1 : 0};
    const Decision d =
        Plugin::get().decide(f32(grad_output) && f32(self) && (tanh || approximate == "none"), c,
                             "a tensor is not a plain float32 tensor, or approximate is neither none nor tanh");
    return grad(d, grad_output, self, self.sizes(),
                [&] { return at::cpu::gelu_backward(grad_output, self, approximate); });
}

at::Tensor silu_backward(const at::Tensor& grad_output, const at::Tensor& self) {
    if (!intercept()) return at::cpu::silu_backward(grad_output, self);
    const Call c{Aten::silu_backward, {arg(grad_output), arg(self)}, 2};
    const Decision d = Plugin::get().decide(f32(grad_output) && f32(self), c);
    return grad(d, grad_output, self, self.sizes(), [&] { return at::cpu::silu_backward(grad_output, self); });
}

at::Tensor softmax_backward_data(const at::Tensor& grad_output, const at::Tensor& output, std::int64_t dim,
                                 at::ScalarType input_dtype) {
    if (!intercept()) return at::cpu::_softmax_backward_data(grad_output, output, dim, input_dtype);
    const std::int64_t wrapped = softmax_dim(output, dim);
    const Call c{Aten::softmax_backward_data, {arg(grad_output), arg(output)}, 2, wrapped};
    const Decision d = Plugin::get().decide(
        f32(grad_output) && f32(output) && input_dtype == at::kFloat && wrapped >= 0, c,
        "a tensor is not a plain float32 tensor, or input_dtype is not float, or dim is out of range");
    // The record's inputs are (softmax, grad_softmax): the output first.
    return grad(d, output, grad_output, output.sizes(),
                [&] { return at::cpu::_softmax_backward_data(grad_output, output, dim, input_dtype); });
}

/// LayerNorm's backward, the normalized dims the input's last: dx (dense, the input's shape), dgamma
/// and dbeta (the weight's and the bias's), each where output_mask asks for it (else undefined, as
/// stock's). Without a weight (elementwise_affine=False, or a bias only) stock's gradient is its
/// affine one with a weight of ones, so the kernel is given a constant row (native_layer_norm());
/// it computes all three, and what the mask does not ask for is dropped. A gradient of a weight or
/// a bias the call does not have runs stock.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef normalized_shape, const at::Tensor& mean,
    const at::Tensor& rstd, const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias,
    std::array<bool, 3> output_mask) {
    auto stock_fn = [&] {
        return at::cpu::native_layer_norm_backward_symint(grad_out, input, normalized_shape, mean, rstd, weight, bias,
                                                          output_mask);
    };
    if (!intercept()) return stock_fn();
    const bool has_w = weight.has_value() && weight->defined(), has_b = bias.has_value() && bias->defined();
    const auto k = static_cast<std::int64_t>(normalized_shape.size());
    const std::optional<at::IntArrayRef> dims = normalized_dims(input, normalized_shape);
    const bool trailing = dims.has_value();
    const at::IntArrayRef norm = dims.value_or(at::IntArrayRef{});
    const std::int64_t cols = c10::multiply_integers(norm);
    // The weight's description when there is none: the normalized dims, dense.
    std::vector<std::int64_t> norm_strides;
    const TensorArg constant = trailing && !has_w ? constant_arg(norm, norm_strides) : TensorArg{};
    const Call c{Aten::native_layer_norm_backward,
                 {arg(grad_out), arg(input), arg(mean), arg(rstd), has_w ? arg(*weight) : constant},
                 5,
                 k};
    // A weight or a bias of another shape than normalized_shape: stock raises.
    const Decision d = Plugin::get().decide(
        trailing && f32(grad_out) && f32(input) && f32(mean) && f32(rstd) &&
            (!has_w || (f32(*weight) && weight->sizes() == norm)) &&
            (!has_b || (f32(*bias) && bias->sizes() == norm)) && (has_w || !output_mask[1]) &&
            (has_b || !output_mask[2]),
        c,
        "a tensor is not a plain float32 tensor, or normalized_shape is not the input's last dims, or the "
        "weight or bias is not of normalized_shape, or a gradient of a missing weight or bias is asked for "
        "(output_mask)");
    if (d.kernel != nullptr) {
        at::Tensor dx = new_dense(input.sizes()), dgamma = new_dense(has_w ? weight->sizes() : norm),
                   dbeta = new_dense(has_b ? bias->sizes() : norm);
        run(d, {in(grad_out), in(input), in(rstd), in(mean), has_w ? in(*weight) : constant_row(1.0f, cols)},
            {out(dx), out(dgamma), out(dbeta)});
        return {output_mask[0] ? dx : at::Tensor(), output_mask[1] ? dgamma : at::Tensor(),
                output_mask[2] ? dbeta : at::Tensor()};
    }
    return stock(d, stock_fn);
}

// Reductions, concatenation, log softmax and selections.

/// mean.dim's reduced dims as a bit mask, bit d for dim d (every dim for dim=None or []; 0 for a
/// 0-dim self, whose one element is its mean), or -1 when a dim is out of range or named twice
/// (stock raises), or the rank is above 62.
std::int64_t mean_dims(const at::Tensor& self, at::OptionalIntArrayRef dim) {
    const std::int64_t r = self.dim();
    if (r > 62) return -1;
    if (!dim.has_value() || dim->empty()) return r == 0 ? 0 : (std::int64_t{1} << r) - 1;
    if (r == 0 && dim->size() > 1) return -1;  // dim 0 and -1 are the same dim of a 0-dim tensor: named twice
    const std::int64_t wrap = std::max<std::int64_t>(r, 1);
    std::int64_t mask = 0;
    for (const std::int64_t d : *dim) {
        if (d < -wrap || d >= wrap) return -1;
        if (r == 0) continue;
        const std::int64_t w = d < 0 ? d + wrap : d;
        if (((mask >> w) & 1) != 0) return -1;
        mask |= std::int64_t{1} << w;
    }
    return mask;
}

/// torch.mean(self, dim, keepdim) (mean.dim; `mean(self)` comes here with no dims): a float32 result
/// (dtype None or float) of a dense self, y = the sum of the reduced elements / their count. The
/// host compiles a mean over the last dims (ReduceMean); other dims run stock.
at::Tensor mean(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                c10::optional<at::ScalarType> dtype) {
    auto stock_fn = [&] { return at::cpu::mean(self, dim, keepdim, dtype); };
    if (!intercept()) return stock_fn();
    const std::int64_t dims = mean_dims(self, dim);
    const Call c{Aten::mean, {arg(self)}, 1, dims, 0, keepdim ? 1 : 0};
    const Decision d = Plugin::get().decide(
        f32(self) && (!dtype.has_value() || *dtype == at::kFloat) && dims >= 0, c,
        "self is not a plain float32 tensor, or dtype is not float, or a dim is out of range or repeated");
    if (d.kernel != nullptr) {
        std::vector<std::int64_t> y;
        for (std::int64_t i = 0; i < self.dim(); ++i) {
            if (((dims >> i) & 1) == 0) y.push_back(self.size(i));
            else if (keepdim) y.push_back(1);
        }
        at::Tensor out_t = new_dense(y);
        run(d, {in(self), nullptr}, {out(out_t)});
        return out_t;
    }
    return stock(d, stock_fn);
}

/// torch.cat(tensors, dim) of 1 to 16 float32 tensors, each with elements (stock skips a legacy
/// empty [0] tensor) and at least one of them laid out contiguously (stock's output is then
/// contiguous; when every input is channels-last, so is stock's output). Dense tensors and views
/// (slices, transposes) alike; the output is a new dense tensor.
at::Tensor cat(const at::ITensorListRef& tensors, std::int64_t dim) {
    auto stock_fn = [&] { return at::cpu::cat(tensors, dim); };
    if (!intercept()) return stock_fn();
    constexpr std::size_t max_inputs = 16;
    std::array<TensorArg, max_inputs> args{};
    std::array<const float*, max_inputs> data{};
    std::size_t n = 0;
    bool plain = true, contiguous_format = false;
    for (const at::Tensor& t : tensors) {
        if (n == max_inputs || !f32(t)) {
            plain = false;
            break;
        }
        contiguous_format = contiguous_format || t.suggest_memory_format() == at::MemoryFormat::Contiguous;
        data[n] = in(t);
        args[n++] = arg(t);
    }
    const std::int64_t r = n > 0 ? static_cast<std::int64_t>(args[0].sizes.size()) : 0;
    const std::int64_t wrapped = r > 0 && dim >= -r && dim < r ? (dim < 0 ? dim + r : dim) : -1;
    Call c{Aten::cat, {}, 0, wrapped};
    c.list = std::span<const TensorArg>(args.data(), n);
    const Decision d = Plugin::get().decide(
        plain && n > 0 && contiguous_format && wrapped >= 0, c,
        "a tensor is not a plain float32 tensor, or more than 16 tensors, or none laid out contiguously, or dim is "
        "out of range");
    if (d.kernel != nullptr) {
        std::vector<std::int64_t> y(args[0].sizes.begin(), args[0].sizes.end());
        y[static_cast<std::size_t>(wrapped)] = 0;
        for (std::size_t i = 0; i < n; ++i)
            y[static_cast<std::size_t>(wrapped)] += args[i].sizes[static_cast<std::size_t>(wrapped)];
        at::Tensor out_t = new_dense(y);
        float* outs[1] = {out(out_t)};
        KernelScope scope;
        Plugin::get().run_static(d, data.data(), outs);
        return out_t;
    }
    return stock(d, stock_fn);
}

at::Tensor log_softmax(const at::Tensor& self, std::int64_t dim, bool half_to_float) {
    return softmax_like(Aten::log_softmax, self, dim, half_to_float,
                        [&] { return at::cpu::_log_softmax(self, dim, half_to_float); });
}

at::Tensor log_softmax_backward_data(const at::Tensor& grad_output, const at::Tensor& output, std::int64_t dim,
                                     at::ScalarType input_dtype) {
    if (!intercept()) return at::cpu::_log_softmax_backward_data(grad_output, output, dim, input_dtype);
    const std::int64_t wrapped = softmax_dim(output, dim);
    const Call c{Aten::log_softmax_backward_data, {arg(grad_output), arg(output)}, 2, wrapped};
    const Decision d = Plugin::get().decide(
        f32(grad_output) && f32(output) && input_dtype == at::kFloat && wrapped >= 0, c,
        "a tensor is not a plain float32 tensor, or input_dtype is not float, or dim is out of range");
    return grad(d, grad_output, output, output.sizes(),
                [&] { return at::cpu::_log_softmax_backward_data(grad_output, output, dim, input_dtype); });
}

/// A plain bool tensor: strided, no dimension names (where's condition, masked_fill's mask; a
/// uint8 one, which stock converts with a deprecation warning, runs stock).
bool bool_tensor(const at::Tensor& t) noexcept {
    return t.defined() && t.scalar_type() == at::kBool && t.layout() == at::kStrided && !t.has_names();
}

/// where(condition, self, other): self and other float32 tensors, or one of them a Python number
/// (torch.where(c, x, 0.0) gives a 0-dim float32 tensor; a wrapped number is read as the float
/// torch casts it to), the output a new dense tensor of the broadcast shape.
at::Tensor where(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other) {
    if (!intercept()) return at::cpu::where(condition, self, other);
    const Other a = other_operand(self), b = other_operand(other);
    const Call c{Aten::where, {arg(condition), a.arg, b.arg}, 3};
    const Decision d = Plugin::get().decide(
        bool_tensor(condition) && a.ok && b.ok && !(a.number && b.number), c,
        "condition is not a plain bool tensor, or self or other is not a plain float32 tensor (or a number)");
    if (d.kernel != nullptr) {
        at::Tensor y = new_elementwise(
            at::infer_size_dimvector(condition.sizes(), at::infer_size_dimvector(self.sizes(), other.sizes())),
            {arg(condition), a.arg, b.arg});
        run(d, {in(condition), a.data(self), b.data(other)}, {out(y)});
        return y;
    }
    return stock(d, [&] { return at::cpu::where(condition, self, other); });
}

/// masked_fill's value as the float the kernel writes, when torch converts it without an error
/// (Scalar::to<float>: a real number within float's range, an infinity or NaN, an integer rounded
/// once, a bool); otherwise nullopt (stock raises, or it is complex).
std::optional<float> fill_value(const at::Scalar& v) {
    if (v.isFloatingPoint()) {
        const double x = v.toDouble();
        if (std::isfinite(x) && std::abs(x) > static_cast<double>(std::numeric_limits<float>::max()))
            return std::nullopt;
        return static_cast<float>(x);
    }
    if (v.isIntegral(false)) return static_cast<float>(v.toLong());
    if (v.isBoolean()) return v.toBool() ? 1.0f : 0.0f;
    return std::nullopt;
}

constexpr const char* masked_fill_why =
    "self is not a plain float32 tensor, or mask is not a plain bool tensor, or value is not a real number within "
    "float's range";

/// masked_fill(self, mask, value) with a number: a new dense tensor of the broadcast of self and
/// mask (stock's composite: expand, clone, masked_fill_), value where mask is true.
at::Tensor masked_fill(const at::Tensor& self, const at::Tensor& mask, const at::Scalar& value) {
    auto stock_fn = [&] { return at::compositeexplicitautograd::masked_fill(self, mask, value); };
    if (!intercept()) return stock_fn();
    const std::optional<float> v = fill_value(value);
    const Call c{Aten::masked_fill, {arg(self), arg(mask)}, 2};
    const Decision d = Plugin::get().decide(f32(self) && bool_tensor(mask) && v.has_value(), c, masked_fill_why);
    if (d.kernel != nullptr) {
        at::Tensor y = new_dense(at::infer_size_dimvector(self.sizes(), mask.sizes()));
        const float fill = *v;
        run(d, {in(self), in(mask), &fill}, {out(y)});
        return y;
    }
    return stock(d, stock_fn);
}

/// masked_fill_(self, mask, value) with a number, in place: self dense with the broadcast's shape.
at::Tensor& masked_fill_(at::Tensor& self, const at::Tensor& mask, const at::Scalar& value) {
    auto stock_fn = [&]() -> at::Tensor& { return at::cpu::masked_fill_(self, mask, value); };
    if (!intercept()) return stock_fn();
    const std::optional<float> v = fill_value(value);
    const Call c{Aten::masked_fill, {arg(self), arg(mask)}, 2};
    const Decision d = Plugin::get().decide(f32(self) && bool_tensor(mask) && v.has_value(), c, masked_fill_why);
    if (d.kernel != nullptr && fits(self, at::infer_size_dimvector(self.sizes(), mask.sizes()), {})) {
        const float fill = *v;
        run(d, {in(self), in(mask), &fill}, {out(self)});
        return self;
    }
    return stock(d, stock_fn);
}

/// masked_fill with a tensor value: a 0-dim float32 tensor, whose float the kernel reads (stock
/// takes value.item(), the same float); other values (another dtype, more dims: stock raises) run
/// stock.
constexpr const char* masked_fill_tensor_why =
    "self is not a plain float32 tensor, or mask is not a plain bool tensor, or value is not a 0-dim float32 tensor";

at::Tensor masked_fill_t(const at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
    auto stock_fn = [&] { return at::compositeexplicitautograd::masked_fill(self, mask, value); };
    if (!intercept()) return stock_fn();
    const Call c{Aten::masked_fill, {arg(self), arg(mask)}, 2};
    const Decision d = Plugin::get().decide(f32(self) && bool_tensor(mask) && f32(value) && value.dim() == 0, c,
                                            masked_fill_tensor_why);
    if (d.kernel != nullptr) {
        at::Tensor y = new_dense(at::infer_size_dimvector(self.sizes(), mask.sizes()));
        run(d, {in(self), in(mask), in(value)}, {out(y)});
        return y;
    }
    return stock(d, stock_fn);
}

at::Tensor& masked_fill_t_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
    auto stock_fn = [&]() -> at::Tensor& { return at::cpu::masked_fill_(self, mask, value); };
    if (!intercept()) return stock_fn();
    const Call c{Aten::masked_fill, {arg(self), arg(mask)}, 2};
    const Decision d = Plugin::get().decide(f32(self) && bool_tensor(mask) && f32(value) && value.dim() == 0, c,
                                            masked_fill_tensor_why);
    // The value must not be an element of self: stock reads it once, before it writes.
    if (d.kernel != nullptr && fits(self, at::infer_size_dimvector(self.sizes(), mask.sizes()), {}) &&
        !overlap(self, value)) {
        run(d, {in(self), in(mask), in(value)}, {out(self)});
        return self;
    }
    return stock(d, stock_fn);
}

// ---- the entry points ---------------------------------------------------------------------------------

/// skc's errors reach Python as RuntimeError with skc's message.
template <class Fn>
decltype(auto) entry(Fn&& fn) {
    try {
        return std::forward<Fn>(fn)();
    } catch (const skc::Error& e) {
        throw std::runtime_error(std::string("skc: ") + e.what());
    }
}

void op_enable(std::string config) {
    entry([&] { Plugin::get().enable(config); });
}
void op_check(std::string config) {
    entry([&] { Plugin::check(config); });
}
std::string op_compile() {
    return entry([] { return Plugin::get().compile(); });
}
std::string op_progress() {
    return entry([] { return Plugin::get().progress(); });
}
std::string op_counters() {
    return entry([] { return Plugin::get().counters(); });
}
std::string op_output_cache() {
    const OutputCache::Stats st = OutputCache::get().stats();
    const auto u = [](std::uint64_t n) { return skc::Value(n); };
    return skc::dump_json(skc::Value(skc::Object{{"capacity_bytes", u(st.capacity)},
                                                 {"cached_bytes", u(st.cached_bytes)},
                                                 {"cached_blocks", u(st.cached_blocks)},
                                                 {"reused", u(st.reused)},
                                                 {"allocated", u(st.allocated)}}));
}
void op_disable() {
    entry([] { Plugin::get().disable(); });
}

/// Overriding aten's kernels makes the dispatcher warn once per op ("Overriding a previously
/// registered kernel ..."); that is this plugin's purpose, so those warnings are dropped while the
/// overrides register (the objects around TORCH_LIBRARY_IMPL below run in definition order).
class QuietOverrides final : public c10::WarningHandler {
public:
    void process(const c10::SourceLocation& where, const std::string& msg, bool verbatim) override {
        if (msg.rfind("Overriding a previously registered kernel", 0) == 0) return;
        (previous != nullptr ? previous : &fallback)->process(where, msg, verbatim);
    }
    c10::WarningHandler* previous = nullptr;
    c10::WarningHandler fallback;
};

QuietOverrides quiet_overrides;
[[maybe_unused]] const bool quiet_on = [] {
    quiet_overrides.previous = c10::Warning::get_warning_handler();
    c10::Warning::set_warning_handler(&quiet_overrides);
    return true;
}();

}  // namespace
}  // namespace skc_torch

TORCH_LIBRARY(skc, m) {
    m.def("enable(str config) -> ()", &skc_torch::op_enable);
    m.def("check(str config) -> ()", &skc_torch::op_check);
    m.def("compile() -> str", &skc_torch::op_compile);
    m.def("progress() -> str", &skc_torch::op_progress);
    m.def("counters() -> str", &skc_torch::op_counters);
    m.def("disable() -> ()", &skc_torch::op_disable);
    m.def("output_cache() -> str", &skc_torch::op_output_cache);
}

TORCH_LIBRARY_IMPL(aten, CPU, m) {
    m.impl("mm", &skc_torch::mm);
    m.impl("addmm", &skc_torch::addmm);
    m.impl("_addmm_activation", &skc_torch::addmm_activation);
    m.impl("bmm", &skc_torch::bmm);
    m.impl("bmm.out", &skc_torch::bmm_out);
    m.impl("add.Tensor", &skc_torch::add);
    m.impl("add_.Tensor", &skc_torch::add_);
    m.impl("sub.Tensor", &skc_torch::sub);
    m.impl("sub_.Tensor", &skc_torch::sub_);
    m.impl("rsub.Tensor", &skc_torch::rsub);
    m.impl("mul.Tensor", &skc_torch::mul);
    m.impl("mul_.Tensor", &skc_torch::mul_);
    m.impl("div.Tensor", &skc_torch::div);
    m.impl("div_.Tensor", &skc_torch::div_);
    m.impl("div.Tensor_mode", &skc_torch::div_mode);
    m.impl("div_.Tensor_mode", &skc_torch::div_mode_);
    m.impl("relu", &skc_torch::relu);
    m.impl("relu_", &skc_torch::relu_);
    m.impl("gelu", &skc_torch::gelu);
    m.impl("neg", &skc_torch::neg);
    m.impl("neg_", &skc_torch::neg_);
    m.impl("tanh", &skc_torch::tanh);
    m.impl("tanh_", &skc_torch::tanh_);
    m.impl("rsqrt", &skc_torch::rsqrt);
    m.impl("rsqrt_", &skc_torch::rsqrt_);
    m.impl("silu", &skc_torch::silu);
    m.impl("silu_", &skc_torch::silu_);
    m.impl("pow.Tensor_Scalar", &skc_torch::pow);
    m.impl("pow_.Scalar", &skc_torch::pow_);
    m.impl("_softmax", &skc_torch::softmax);
    m.impl("_softmax.out", &skc_torch::softmax_out);
    m.impl("native_layer_norm", &skc_torch::native_layer_norm);
    m.impl("clone", &skc_torch::clone);
    m.impl("threshold_backward", &skc_torch::threshold_backward);
    m.impl("gelu_backward", &skc_torch::gelu_backward);
    m.impl("_softmax_backward_data", &skc_torch::softmax_backward_data);
    m.impl("silu_backward", &skc_torch::silu_backward);
    m.impl("native_layer_norm_backward", &skc_torch::native_layer_norm_backward);
    m.impl("mean.dim", &skc_torch::mean);
    m.impl("cat", &skc_torch::cat);
    m.impl("_log_softmax", &skc_torch::log_softmax);
    m.impl("_log_softmax_backward_data", &skc_torch::log_softmax_backward_data);
    m.impl("where.self", &skc_torch::where);
    m.impl("masked_fill.Scalar", &skc_torch::masked_fill);
    m.impl("masked_fill_.Scalar", &skc_torch::masked_fill_);
    m.impl("masked_fill.Tensor", &skc_torch::masked_fill_t);
    m.impl("masked_fill_.Tensor", &skc_torch::masked_fill_t_);
}

namespace skc_torch {
namespace {
[[maybe_unused]] const bool quiet_off = [] {
    c10::Warning::set_warning_handler(quiet_overrides.previous);
    return true;
}();
}  // namespace
}  // namespace skc_torch
