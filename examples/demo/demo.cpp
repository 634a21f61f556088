// skc_demo: the whole static kernel compile flow on a real model, end to end.
//
// A small transformer block (LayerNorm, Q/K/V projections, multi-head attention, output projection,
// residual Add, LayerNorm, feed-forward with Gelu, residual Add) runs on float tensors with the
// host runtime (examples/host/runtime.hpp):
//   1. once with the shape-generic kernels while a recording session records every op;
//   2. skc::StaticKernelCompiler writes the op info files, selects, looks the set up in the cache or
//      compiles it with host_op_compiler (shape-specialised C++ kernels in a makeself run package),
//      installs the package into the op library and reselects: the runtime's kernel table is
//      reloaded from the installed index;
//   3. again: every supported op must now run its static kernel (the runtime's counters say so);
//   4. the outputs of both runs must agree (relative error at most 1e-4);
//   5. each op type is timed with its generic and its static kernel on the same inputs.
// It prints a table of the timings, the cache outcome, the key, the package, how it was installed
// and the time per stage. A second run with the same --base finds the package in the cache and does
// not compile; nor does it extract the package: the first run's extraction was kept in the op
// library when that run ended (`.kept/`), and the install reuses it.
//
// Exit status: 0 success, 1 failure (a check failed, or an error from skc), 2 bad usage.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <skc/compiler.hpp>
#include <skc/op_info_io.hpp>

#include "host/runtime.hpp"
#include "host/toolchain.hpp"

#ifndef SKC_HOST_OP_COMPILER
#error "build with -DSKC_HOST_OP_COMPILER=\"<path of host_op_compiler>\""
#endif

namespace {

namespace fs = std::filesystem;
using skc_host::HostOp;
using skc_host::Runtime;

// ---- command line ---------------------------------------------------------------------------------

struct ModelSize {
    std::int64_t seq = 64, hidden = 128, heads = 4, ffn = 512;
};

struct Config {
    ModelSize size;
    int iters = 100;
    unsigned jobs = skc::Options::default_jobs();
    fs::path base = "skc-demo-base";
    fs::path op_library;  // empty: <base>/op_library
    std::string device = "host-cpu";
    bool no_cache = false;
    bool json = false;
};

struct Usage : std::runtime_error {
    using std::runtime_error::runtime_error;
};

constexpr std::string_view usage_text =
    "usage: skc_demo [--base DIR] [--op-library DIR] [--device NAME] [--iters N] [--jobs N]\n"
    "                [--no-cache] [--json] [--small] [--seq N] [--hidden N] [--heads N] [--ffn N]\n"
    "\n"
    "Runs a transformer block with generic kernels while recording its ops, compiles them into\n"
    "static kernels (or finds them in the cache), installs them, runs the block with the static\n"
    "kernels, checks that both runs agree and times every op type both ways.\n"
    "\n"
    "  --base DIR        output base (cache, run folders); default ./skc-demo-base, created if missing\n"
    "  --op-library DIR  where packages are installed; default <base>/op_library\n"
    "  --device NAME     device name (compiler -v, cache namespace); default host-cpu\n"
    "  --iters N         timing iterations; default 100 (5 with --small)\n"
    "  --jobs N          parallel compile jobs; default: the number of CPUs\n"
    "  --no-cache        always compile; do not read or write the cache\n"
    "  --json            print one JSON document instead of the tables\n"
    "  --small           a tiny model (seq 16, hidden 32, heads 2, ffn 64) for tests\n"
    "  --seq/--hidden/--heads/--ffn N   model sizes; default 64/128/4/512; heads must divide hidden\n";

std::int64_t parse_count(std::string_view flag, const std::string& v, std::int64_t max) {
    std::size_t used = 0;
    long long n = 0;
    try {
        n = std::stoll(v, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != v.size() || v.empty() || n < 1 || n > max)
        throw Usage(std::string(flag) + ": expected an integer from 1 to " + std::to_string(max) + ", found \"" + v +
                    "\"");
    return static_cast<std::int64_t>(n);
}

Config parse_args(int argc, char** argv) {
    Config c;
    std::optional<std::int64_t> seq, hidden, heads, ffn, iters;
    bool small = false;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        std::optional<std::string> inline_value;
        if (arg.rfind("--", 0) == 0) {
            if (const std::size_t eq = arg.find('='); eq != std::string::npos) {
                inline_value = arg.substr(eq + 1);
                arg.resize(eq);
            }
        }
        auto value = [&]() -> std::string {
            if (inline_value) return *std::exchange(inline_value, std::nullopt);
            if (i + 1 >= argc) throw Usage(arg + ": missing value");
            return argv[++i];
        };
        if (arg == "--help" || arg == "-h") throw Usage("");
        else if (arg == "--base") c.base = value();
        else if (arg == "--op-library") c.op_library = value();
        else if (arg == "--device") c.device = value();
        else if (arg == "--iters") iters = parse_count(arg, value(), 1000000);
        else if (arg == "--jobs") c.jobs = static_cast<unsigned>(parse_count(arg, value(), 1024));
        else if (arg == "--seq") seq = parse_count(arg, value(), 4096);
        else if (arg == "--hidden") hidden = parse_count(arg, value(), 4096);
        else if (arg == "--heads") heads = parse_count(arg, value(), 4096);
        else if (arg == "--ffn") ffn = parse_count(arg, value(), 16384);
        else if (arg == "--no-cache") c.no_cache = true;
        else if (arg == "--json") c.json = true;
        else if (arg == "--small") small = true;
        else throw Usage("unknown argument \"" + arg + "\"");
        if (inline_value) throw Usage(arg + " takes no value");
    }
    if (small) {
        c.size = ModelSize{16, 32, 2, 64};
        c.iters = 5;
    }
    if (seq) c.size.seq = *seq;
    if (hidden) c.size.hidden = *hidden;
    if (heads) c.size.heads = *heads;
    if (ffn) c.size.ffn = *ffn;
    if (iters) c.iters = static_cast<int>(*iters);
    if (c.size.hidden % c.size.heads != 0)
        throw Usage("--heads " + std::to_string(c.size.heads) + " does not divide --hidden " +
                    std::to_string(c.size.hidden));
    if (c.base.empty() || c.device.empty()) throw Usage("--base and --device must not be empty");
    return c;
}

// ---- op records -------------------------------------------------------------------------------------
// Built as a framework plugin describes live tensors (the fields of real op info dumps for plain
// tensors), in the form examples/host/plan.hpp accepts.

skc::TensorDesc tensor(std::string name, std::int64_t index, skc::RuntimeShape shape, std::string dtype = "float") {
    return skc::plain_tensor(std::move(name), index, std::move(shape), std::move(dtype));
}

skc::Attr attr(std::string name, std::string dtype, std::int64_t index, skc::Value v) {
    return skc::Attr{std::move(name), std::move(dtype), index, std::move(v), {}};
}

skc::OpRecord op(std::string type, std::vector<skc::TensorSlot> in, std::vector<skc::TensorSlot> out,
                 std::vector<skc::Attr> attrs) {
    return skc::make_op(std::move(type), std::move(in), std::move(out), std::move(attrs));
}

skc::OpRecord layer_norm(std::int64_t rows, std::int64_t cols) {
    return op("LayerNorm", {tensor("x", 0, {rows, cols}), tensor("gamma", 1, {cols}), tensor("beta", 2, {cols})},
              {tensor("y", 0, {rows, cols}), tensor("mean", 1, {rows, 1}), tensor("variance", 2, {rows, 1})},
              {attr("begin_norm_axis", "int", 0, -1), attr("begin_params_axis", "int", 1, -1),
               attr("epsilon", "float", 2, 1e-5)});
}

/// y[m, n] = x1[m, k] * x2, x2 stored [k, n], or [n, k] with transpose_x2 (a Linear layer's weight).
skc::OpRecord matmul(std::int64_t m, std::int64_t k, std::int64_t n, bool tb) {
    return op(
        "MatMulV2",
        {tensor("x1", 0, {m, k}), tensor("x2", 1, tb ? skc::RuntimeShape{n, k} : skc::RuntimeShape{k, n}),
         std::monostate{}, std::monostate{}},
        {tensor("y", 0, {m, n})},
        {attr("transpose_x1", "bool", 0, false), attr("transpose_x2", "bool", 1, tb), attr("offset_x", "int", 2, 0)});
}

skc::OpRecord batch_matmul(std::int64_t b, std::int64_t m, std::int64_t k, std::int64_t n) {
    return op("BatchMatMulV2",
              {tensor("x1", 0, {b, m, k}), tensor("x2", 1, {b, k, n}), std::monostate{}, std::monostate{}},
              {tensor("y", 0, {b, m, n})},
              {attr("adj_x1", "bool", 0, false), attr("adj_x2", "bool", 1, false), attr("offset_x", "int", 2, 0)});
}

/// The permutation is a value-dependent input: its values are baked into the kernel, so they are
/// part of the op's identity (const_data).
skc::OpRecord transpose(const skc::RuntimeShape& x, const std::vector<std::int64_t>& perm) {
    skc::RuntimeShape y;
    skc::Array pv;
    for (std::int64_t p : perm) {
        y.push_back(x[static_cast<std::size_t>(p)]);
        pv.emplace_back(p);
    }
    skc::TensorDesc pt = tensor("perm", 1, {static_cast<std::int64_t>(perm.size())}, "int64");
    pt.const_data = skc::Value(std::move(pv));
    return op("Transpose", {tensor("x", 0, x), std::move(pt)}, {tensor("y", 0, std::move(y))}, {});
}

skc::OpRecord binary(std::string type, const skc::RuntimeShape& a, const skc::RuntimeShape& b) {
    return op(std::move(type), {tensor("x1", 0, a), tensor("x2", 1, b)}, {tensor("y", 0, a)}, {});
}

skc::OpRecord softmax(const skc::RuntimeShape& s) {
    return op("SoftmaxV2", {tensor("x", 0, s)}, {tensor("y", 0, s)},
              {attr("axes", "list_int", 0, skc::Array{skc::Value(-1)}), attr("half_to_float", "bool", 1, false)});
}

skc::OpRecord gelu(const skc::RuntimeShape& s) { return op("Gelu", {tensor("x", 0, s)}, {tensor("y", 0, s)}, {}); }

// ---- the model ----------------------------------------------------------------------------------------

/// Deterministic numbers from a fixed seed: mt19937's output sequence is fixed by the standard
/// (the std distributions are not), so every build gets the same weights.
class Rng {
public:
    explicit Rng(std::uint32_t seed) : g_(seed) {}
    float uniform(float lo, float hi) { return lo + (hi - lo) * static_cast<float>(g_() >> 8) * 0x1p-24f; }

private:
    std::mt19937 g_;
};

/// One op call of the block: the op (prepared once) and its data pointers (slot order).
struct Step {
    HostOp op;
    std::vector<const float*> in;
    std::vector<float*> out;
};

/// The transformer block. Every buffer is allocated once; steps hold raw pointers into them.
class Block {
public:
    explicit Block(const ModelSize& sz) : size_(sz) {
        const std::int64_t S = sz.seq, H = sz.hidden, NH = sz.heads, D = sz.hidden / sz.heads, F = sz.ffn;
        Rng rng(20261202);
        const float* x = weight("x", S * H, rng, -1.0f, 1.0f);
        const float* g1 = weight("ln1.gamma", H, rng, 0.9f, 1.1f);
        const float* b1 = weight("ln1.beta", H, rng, -0.1f, 0.1f);
        const float wh = 1.0f / std::sqrt(static_cast<float>(H)), wf = 1.0f / std::sqrt(static_cast<float>(F));
        const float* wq = weight("wq", H * H, rng, -wh, wh);
        const float* wk = weight("wk", H * H, rng, -wh, wh);
        const float* wv = weight("wv", H * H, rng, -wh, wh);
        const float* wo = weight("wo", H * H, rng, -wh, wh);  // stored [out, in]: transpose_x2
        const float* g2 = weight("ln2.gamma", H, rng, 0.9f, 1.1f);
        const float* b2 = weight("ln2.beta", H, rng, -0.1f, 0.1f);
        const float* w1 = weight("w1", H * F, rng, -wh, wh);
        const float* w2 = weight("w2", F * H, rng, -wf, wf);
        std::vector<float>& scale = weights_["scale"];
        scale.assign(1, 1.0f / std::sqrt(static_cast<float>(D)));

        // Attention.
        add(layer_norm(S, H), {x, g1, b1}, {act("ln1", S * H), act("ln1.mean", S), act("ln1.var", S)});
        add(matmul(S, H, H, false), {get("ln1"), wq, nullptr, nullptr}, {act("q", S * H)});
        add(matmul(S, H, H, false), {get("ln1"), wk, nullptr, nullptr}, {act("k", S * H)});
        add(matmul(S, H, H, false), {get("ln1"), wv, nullptr, nullptr}, {act("v", S * H)});
        // [S, H] viewed as [S, NH, D]: heads first for Q and V, K also transposed for Q K^T.
        add(transpose({S, NH, D}, {1, 0, 2}), {get("q"), nullptr}, {act("q.heads", S * H)});
        add(transpose({S, NH, D}, {1, 2, 0}), {get("k"), nullptr}, {act("k.heads_t", S * H)});
        add(transpose({S, NH, D}, {1, 0, 2}), {get("v"), nullptr}, {act("v.heads", S * H)});
        add(batch_matmul(NH, S, D, S), {get("q.heads"), get("k.heads_t"), nullptr, nullptr},
            {act("scores", NH * S * S)});
        add(binary("Mul", {NH, S, S}, {}), {get("scores"), scale.data()}, {act("scores.scaled", NH * S * S)});
        add(softmax({NH, S, S}), {get("scores.scaled")}, {act("probs", NH * S * S)});
        add(batch_matmul(NH, S, S, D), {get("probs"), get("v.heads"), nullptr, nullptr}, {act("context.heads", S * H)});
        add(transpose({NH, S, D}, {1, 0, 2}), {get("context.heads"), nullptr}, {act("context", S * H)});
        add(matmul(S, H, H, true), {get("context"), wo, nullptr, nullptr}, {act("attn", S * H)});
        add(binary("Add", {S, H}, {S, H}), {x, get("attn")}, {act("h1", S * H)});
        // Feed-forward.
        add(layer_norm(S, H), {get("h1"), g2, b2}, {act("ln2", S * H), act("ln2.mean", S), act("ln2.var", S)});
        add(matmul(S, H, F, false), {get("ln2"), w1, nullptr, nullptr}, {act("ffn.up", S * F)});
        add(gelu({S, F}), {get("ffn.up")}, {act("ffn.act", S * F)});
        add(matmul(S, F, H, false), {get("ffn.act"), w2, nullptr, nullptr}, {act("ffn.down", S * H)});
        add(binary("Add", {S, H}, {S, H}), {get("h1"), get("ffn.down")}, {act("y", S * H)});
    }
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;

    void run(Runtime& rt) {
        for (const Step& s : steps_) rt.run(s.op, s.in.data(), s.out.data());
    }

    /// Fills every activation with NaN, so that an output a kernel fails to write shows.
    void poison_activations() {
        for (auto& [name, a] : acts_) std::fill(a.begin(), a.end(), std::numeric_limits<float>::quiet_NaN());
    }

    [[nodiscard]] const std::vector<Step>& steps() const noexcept { return steps_; }
    [[nodiscard]] const ModelSize& size() const noexcept { return size_; }
    /// Every activation (op output), by name.
    [[nodiscard]] const std::map<std::string, std::vector<float>>& activations() const noexcept { return acts_; }

private:
    const float* weight(const std::string& name, std::int64_t n, Rng& rng, float lo, float hi) {
        std::vector<float>& w = weights_[name];
        w.resize(static_cast<std::size_t>(n));
        for (float& v : w) v = rng.uniform(lo, hi);
        return w.data();
    }
    float* act(const std::string& name, std::int64_t n) {
        std::vector<float>& a = acts_[name];
        a.assign(static_cast<std::size_t>(n), 0.0f);
        return a.data();
    }
    const float* get(const std::string& name) const { return acts_.at(name).data(); }
    void add(skc::OpRecord r, std::vector<const float*> in, std::vector<float*> out) {
        steps_.push_back(Step{HostOp(std::move(r)), std::move(in), std::move(out)});
    }

    ModelSize size_;
    std::map<std::string, std::vector<float>> weights_, acts_;  // map nodes never move: pointers stay valid
    std::vector<Step> steps_;
};

// ---- checks and timing ----------------------------------------------------------------------------------

struct Agreement {
    double max_abs = 0, max_rel = 0;  // rel: per tensor, relative to the tensor's largest magnitude
    std::string worst;                // tensor with the largest relative error
    bool finite = true;
};

Agreement compare(const std::map<std::string, std::vector<float>>& ref,
                  const std::map<std::string, std::vector<float>>& got) {
    Agreement a;
    for (const auto& [name, r] : ref) {
        const std::vector<float>& g = got.at(name);
        double err = 0, mag = 0;
        for (std::size_t i = 0; i < r.size(); ++i) {
            if (!std::isfinite(r[i]) || !std::isfinite(g[i])) a.finite = false;
            err = std::max(err, std::fabs(static_cast<double>(r[i]) - static_cast<double>(g[i])));
            mag = std::max(mag, std::fabs(static_cast<double>(r[i])));
        }
        const double rel = mag > 0 ? err / mag : err;
        a.max_abs = std::max(a.max_abs, err);
        if (rel > a.max_rel) {
            a.max_rel = rel;
            a.worst = name;
        }
    }
    return a;
}

struct TypeTiming {
    std::string op_type;
    std::size_t calls = 0;
    double generic_us = 0, static_us = 0;  // per block: sum over its calls of the median call time
    [[nodiscard]] double speedup() const { return static_us > 0 ? generic_us / static_us : 0; }
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// Times every call of the block with its generic and its static kernel, on the same inputs, the
/// two alternating (each iteration runs every step both ways, in turn first), after two warm-up
/// iterations. A call's time is its median over the iterations; an op type's the sum over its calls.
std::vector<TypeTiming> time_ops(const Block& block, const Runtime& rt, int iters) {
    using clock = std::chrono::steady_clock;
    const std::vector<Step>& steps = block.steps();
    std::vector<std::vector<double>> gen(steps.size()), sta(steps.size());
    for (int it = -2; it < iters; ++it) {
        for (std::size_t s = 0; s < steps.size(); ++s) {
            const Step& st = steps[s];
            const skc_host::KernelFn k = rt.static_kernel(st.op);
            for (int pass = 0; pass < 2; ++pass) {
                const bool generic = (pass == 0) == (it % 2 == 0);
                const auto t0 = clock::now();
                if (generic || k == nullptr) Runtime::run_generic_kernel(st.op, st.in.data(), st.out.data());
                else k(st.in.data(), st.out.data());
                const auto t1 = clock::now();
                if (it >= 0)
                    (generic ? gen : sta)[s].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
            }
        }
    }
    std::vector<TypeTiming> out;
    for (std::size_t s = 0; s < steps.size(); ++s) {
        const std::string& type = steps[s].op.op_type();
        auto row = std::find_if(out.begin(), out.end(), [&](const TypeTiming& t) { return t.op_type == type; });
        if (row == out.end()) row = out.insert(out.end(), TypeTiming{type, 0, 0, 0});
        ++row->calls;
        row->generic_us += median(gen[s]);
        row->static_us += median(sta[s]);
    }
    return out;
}

std::string fixed(double v, int digits) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}

std::string pad(std::string s, std::size_t w, bool right) {
    if (s.size() >= w) return s;
    return right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
}

std::string cache_line(const skc::CompileReport& r) {
    switch (r.outcome) {
    case skc::CompileOutcome::hit: return "hit";
    case skc::CompileOutcome::waited: return "hit (waited for another process's compile)";
    case skc::CompileOutcome::compiled: return "miss (compiled)";
    case skc::CompileOutcome::disabled: return "disabled (compiled)";
    case skc::CompileOutcome::downloaded: return "remote hit (downloaded from another node's compile)";
    case skc::CompileOutcome::skipped: return "skipped (nothing to compile)";
    }
    return "?";
}

double ms(std::chrono::nanoseconds t) { return static_cast<double>(t.count()) / 1e6; }

/// How the package got into the op library: `extracted`, `reused` (its extraction kept by an earlier
/// process), `held` (installed already: one more holder), or `-` (nothing installed).
std::string install_kind(const std::vector<skc::Installation>& installs, const skc::CompileReport& r) {
    if (r.installed.empty() || installs.empty()) return "-";
    const skc::Installation& inst = installs.back();  // this compile's
    return inst.extracted() ? "extracted" : inst.reused() ? "reused" : "held";
}

std::string install_note(const std::string& kind) {
    if (kind == "extracted") return " (extracted)";
    if (kind == "reused") return " (reused the extraction kept from an earlier run: not extracted again)";
    if (kind == "held") return " (installed already: one more holder, not extracted again)";
    return {};
}

// ---- the flow ---------------------------------------------------------------------------------------

// The defaults but for the reselect hook (docs/tutorial.md, "Choosing policies").
using Compiler = skc::StaticKernelCompiler<skc::ProcessInvoker, skc::with_reselect<skc_host::HostReselect>>;

int run(const Config& cfg) {
    std::error_code ec;
    fs::create_directories(cfg.base, ec);
    if (ec)
        throw skc::Error(skc::Errc::io_error, "cannot create the base directory: " + ec.message(),
                         skc::ErrorContext{cfg.base.string(), {}, {}});
    const fs::path base = fs::absolute(cfg.base);
    const fs::path library = cfg.op_library.empty() ? base / "op_library" : fs::absolute(cfg.op_library);
    fs::create_directories(library, ec);
    if (ec)
        throw skc::Error(skc::Errc::io_error, "cannot create the op library: " + ec.message(),
                         skc::ErrorContext{library.string(), {}, {}});

    Block block(cfg.size);
    Runtime runtime;
    const std::size_t calls = block.steps().size();
    std::size_t distinct = 0;
    {
        std::vector<skc::Digest> ds;
        for (const Step& s : block.steps()) ds.push_back(s.op.digest());
        std::sort(ds.begin(), ds.end());
        distinct = static_cast<std::size_t>(std::unique(ds.begin(), ds.end()) - ds.begin());
    }

    // 1. Generic run, recorded.
    skc::OpRecorder<> recorder;
    runtime.set_recorder(&recorder);
    block.run(runtime);
    runtime.set_recorder(nullptr);
    const auto generic_out = block.activations();
    const Runtime::Counters first = runtime.counters();

    // 2. Compile (or find in the cache), install, reselect.
    skc::Options options;
    options.static_kernel_compile = true;
    options.disable_static_kernel_compile_cache = cfg.no_cache;
    options.base_dir = base.string();
    options.jobs = cfg.jobs;
    skc::CompilerSettings settings;
    settings.toolchain_version = skc_host::toolchain_version(SKC_HOST_OP_COMPILER);
    settings.device = cfg.device;
    settings.op_library = library;
    settings.backend = "host";
    Compiler compiler(skc::ProcessInvoker(SKC_HOST_OP_COMPILER), options, settings, skc_host::HostReselect(runtime));
    const skc::CompileReport report = compiler.compile(recorder);

    // 3. Static run: every call whose op type is supported must use its static kernel.
    std::size_t expected_static = 0;
    for (const Step& s : block.steps())
        if (skc::DefaultSupport{}.supports(s.op.op_type())) ++expected_static;
    runtime.reset_counters();
    block.poison_activations();
    block.run(runtime);
    const Runtime::Counters second = runtime.counters();
    const bool all_static = second.static_calls == expected_static && second.generic_calls == calls - expected_static;

    // 4. Agreement.
    const Agreement agree = compare(generic_out, block.activations());
    constexpr double tolerance = 1e-4;
    const bool agrees = agree.finite && agree.max_rel <= tolerance;

    // 5. Timing.
    const std::vector<TypeTiming> times = time_ops(block, runtime, cfg.iters);
    double log_sum = 0, gen_total = 0, sta_total = 0;
    for (const TypeTiming& t : times) {
        log_sum += std::log(std::max(t.speedup(), 1e-9));
        gen_total += t.generic_us;
        sta_total += t.static_us;
    }
    const double geomean = times.empty() ? 0 : std::exp(log_sum / static_cast<double>(times.size()));

    const std::size_t loaded = compiler.reselect_hook().loaded();
    const std::string installed_how = install_kind(compiler.installations(), report);
    if (cfg.json) {
        skc::Array rows;
        for (const TypeTiming& t : times)
            rows.emplace_back(skc::Object{{"op_type", skc::Value(t.op_type)},
                                          {"calls", skc::Value(t.calls)},
                                          {"generic_us", skc::Value(t.generic_us)},
                                          {"static_us", skc::Value(t.static_us)},
                                          {"speedup", skc::Value(t.speedup())}});
        const skc::Value doc(skc::Object{
            {"model", skc::Value(skc::Object{{"seq", skc::Value(cfg.size.seq)},
                                             {"hidden", skc::Value(cfg.size.hidden)},
                                             {"heads", skc::Value(cfg.size.heads)},
                                             {"ffn", skc::Value(cfg.size.ffn)},
                                             {"calls", skc::Value(calls)},
                                             {"distinct_ops", skc::Value(distinct)}})},
            {"generic_run", skc::Value(skc::Object{{"static_calls", skc::Value(first.static_calls)},
                                                   {"generic_calls", skc::Value(first.generic_calls)}})},
            {"static_run", skc::Value(skc::Object{{"static_calls", skc::Value(second.static_calls)},
                                                  {"generic_calls", skc::Value(second.generic_calls)},
                                                  {"expected_static_calls", skc::Value(expected_static)},
                                                  {"kernels_loaded", skc::Value(loaded)},
                                                  {"ok", skc::Value(all_static)}})},
            {"agreement", skc::Value(skc::Object{{"max_abs_error", skc::Value(agree.max_abs)},
                                                 {"max_rel_error", skc::Value(agree.max_rel)},
                                                 {"worst_tensor", skc::Value(agree.worst)},
                                                 {"tolerance", skc::Value(tolerance)},
                                                 {"ok", skc::Value(agrees)}})},
            {"timing", skc::Value(skc::Object{{"iterations", skc::Value(cfg.iters)},
                                              {"ops", skc::Value(std::move(rows))},
                                              {"generic_us", skc::Value(gen_total)},
                                              {"static_us", skc::Value(sta_total)},
                                              {"geomean_speedup", skc::Value(geomean)}})},
            {"cache", skc::Value(cache_line(report))},
            {"install", skc::Value(installed_how)},
            {"toolchain_version", skc::Value(settings.toolchain_version)},
            {"device", skc::Value(settings.device)},
            {"report", report.to_value()},
        });
        std::cout << skc::dump_json(doc, 2) << "\n";
    } else {
        std::cout << "transformer block: seq " << cfg.size.seq << ", hidden " << cfg.size.hidden << ", heads "
                  << cfg.size.heads << ", ffn " << cfg.size.ffn << ": " << calls << " op calls, " << distinct
                  << " distinct ops\n"
                  << "generic run: " << first.generic_calls << " generic, " << first.static_calls
                  << " static calls; recorded " << report.recorded << " ops, " << report.selected << " selected\n"
                  << "static run:  " << second.static_calls << " static, " << second.generic_calls
                  << " generic calls (expected " << expected_static << " static; " << loaded
                  << " kernels loaded by the reselect)\n"
                  << "agreement:   max abs error " << agree.max_abs << ", max rel error " << agree.max_rel
                  << (agree.max_rel > 0 ? " (in " + agree.worst + ")" : std::string()) << ", limit " << tolerance
                  << "\n\n";
        std::cout << "time per block, median of " << cfg.iters << " iterations\n"
                  << pad("op type", 16, false) << pad("calls", 6, true) << pad("generic µs", 12, true)
                  << pad("static µs", 12, true) << pad("speedup", 10, true) << "\n";
        for (const TypeTiming& t : times)
            std::cout << pad(t.op_type, 16, false) << pad(std::to_string(t.calls), 6, true)
                      << pad(fixed(t.generic_us, 1), 11, true) << pad(fixed(t.static_us, 1), 11, true)
                      << pad(fixed(t.speedup(), 2) + "x", 10, true) << "\n";
        std::cout << pad("all", 16, false) << pad(std::to_string(calls), 6, true) << pad(fixed(gen_total, 1), 11, true)
                  << pad(fixed(sta_total, 1), 11, true)
                  << pad(fixed(sta_total > 0 ? gen_total / sta_total : 0, 2) + "x", 10, true) << "\n"
                  << "geomean speedup over op types: " << fixed(geomean, 2) << "x\n\n";
        std::cout << "cache: " << cache_line(report) << "\n"
                  << "toolchain: " << settings.toolchain_version << " (device " << settings.device << ")\n"
                  << "key: " << (report.key.empty() ? "-" : report.key) << "\n"
                  << "package: " << (report.package.empty() ? "-" : report.package.string()) << "\n"
                  << "installed: " << (report.installed.empty() ? "-" : report.installed) << " in " << library.string()
                  << install_note(installed_how) << "\n"
                  << "run folder: " << report.run_dir.string() << "\n"
                  << "stages:";
        for (const auto& [name, t] : report.stages) std::cout << " " << name << " " << fixed(ms(t), 1) << " ms,";
        std::cout << " total " << fixed(ms(report.total()), 1) << " ms\n";
    }

    int rc = 0;
    if (!all_static) {
        std::cerr << "skc_demo: FAILED: the static run made " << second.static_calls << " static and "
                  << second.generic_calls << " generic calls; expected " << expected_static << " static\n";
        rc = 1;
    }
    if (!agrees) {
        std::cerr << "skc_demo: FAILED: static and generic outputs differ: max rel error " << agree.max_rel << " in "
                  << agree.worst << (agree.finite ? "" : " (non-finite values)") << ", limit " << tolerance << "\n";
        rc = 1;
    }
    return rc;
}

}  // namespace

int main(int argc, char** argv) {
    Config cfg;
    try {
        cfg = parse_args(argc, argv);
    } catch (const Usage& u) {
        const bool help = std::string_view(u.what()).empty();
        if (!help) std::cerr << "skc_demo: " << u.what() << "\n";
        (help ? std::cout : std::cerr) << usage_text;
        return help ? 0 : 2;
    }
    try {
        return run(cfg);
    } catch (const std::exception& e) {  // skc::Error (with file and option context) and anything else
        std::cerr << "skc_demo: " << e.what() << "\n";
        return 1;
    }
}
