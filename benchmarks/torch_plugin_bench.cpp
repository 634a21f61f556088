// What the PyTorch plugin (libskc_torch.so) adds to an op call, beside stock torch's own cost of
// the same call, and what its static kernels give.
//
// Every benchmark calls an aten op through the dispatcher, as a model does (at::gelu(x), ...),
// on one thread. Loading the plugin replaces aten's kernels for the rest of the process, so:
//   Stock/<op>      runs first, before the plugin is loaded: stock torch's whole per-call cost;
//   Off/<op>        loaded, not enabled: the override's check, then the stock kernel;
//   Fallback/<op>   enabled (a recording session), the op instance already seen, no static
//                   kernel: the key from the raw arguments, the CallMap and KernelTable lookups,
//                   the counters, then the stock kernel. Fallback - Off is what the plugin adds
//                   to a call that falls back;
//   Static/<op>     after torch.ops.skc.compile() (host_op_compiler, a few seconds the first
//                   time, a cache hit after it): the op's static kernel, its output allocated by
//                   the plugin. Off / Static is the static kernel's speed against stock's.
// Off, Fallback and Static run interleaved with --benchmark_enable_random_interleaving, so that
// each comparison is paired against a machine load that changes over minutes: each puts the plugin
// in the state it needs before its timed loop (Off: disable(); Fallback: a new session that has
// seen every op; Static: that, then compile()). Off costs a load and a compare more than Stock.
//   Paired/<op>     last: Off, Fallback and Static timed back to back in blocks of about 2 ms, 31
//                   blocks, each with the [64, 512] operands at other addresses (paired_sweep() and
//                   place() below); its counters are the medians over the blocks of Fallback - Off
//                   (added_ns) and Off / Static (off_per_static, with its quartiles), which the
//                   repetitions above cannot resolve for the calls of a few microseconds.
// The ops (ops() below): Relu [16, 64] (so small that the per-call cost shows), Gelu [64, 512]
// (erf), Add [64, 512], _softmax [4, 64, 64] over the last axis, addmm as a Linear layer computes
// it, bias [256] + x [64, 256] @ W[256, 256].t(), and for one row x [1, 256] (the dot form); and
// one call of every other op type the plugin records, at [64, 512] where elementwise: sub, mul,
// div, a [64, 1] broadcast, neg, tanh, rsqrt, silu, pow 2, layer_norm (and without weight and
// bias), bmm, a transpose's contiguous(), and the backward kernels of relu, gelu, silu, softmax and
// layer_norm; mean over the
// last dim (keepdim, as RMSNorm), cat of two [64, 512] along the last dim and of rotary's two
// slices of [2, 64, 4, 32] (views), neg of the second slice and the product of the two, silu of a
// [64, 256] slice of [64, 512] (a gated MLP's half), log_softmax over the last dim and its backward, where under a
// causal mask [64, 64] against [4, 64, 64] with a -inf 0-dim tensor (as torch.where(mask, x, -inf)
// passes it), masked_fill with -inf under the same mask, add with alpha -0.1 (Axpy, as SGD's step
// computes it) and 1 - x (rsub, recorded as Sub).
//
// SKC_BENCH_ITERATIONS=N runs exactly N iterations once per benchmark, for counting instructions
// with valgrind --tool=callgrind (each phase is its own instantiation, so the profile tells them
// apart; docs/performance.md).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <regex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <dlfcn.h>
#include <malloc.h>
#include <stdlib.h>
#include <time.h>

#ifndef SKC_BENCH_TORCH_PLUGIN
#error "build with -DSKC_BENCH_TORCH_PLUGIN=\"<path of libskc_torch.so>\""
#endif

namespace {

struct Inputs {
    at::Tensor small = at::randn({16, 64});
    at::Tensor x = at::randn({64, 512});
    at::Tensor y = at::randn({64, 512});
    at::Tensor col = at::randn({64, 1});
    at::Tensor positive = at::rand({64, 512}) + 0.5;
    at::Tensor scores = at::randn({4, 64, 64});
    at::Tensor probs = at::_softmax(scores, -1, false);
    at::Tensor bias = at::randn({256});
    at::Tensor lin_x = at::randn({64, 256});
    at::Tensor one_row = at::randn({1, 256});
    at::Tensor w = at::randn({256, 256});
    at::Tensor q = at::randn({8, 64, 32});
    at::Tensor k = at::randn({8, 32, 64});
    at::Tensor heads = at::randn({64, 8, 64});
    at::Tensor gamma = at::randn({512});
    at::Tensor beta = at::randn({512});
    at::Tensor relu_out = at::relu(x);
    std::tuple<at::Tensor, at::Tensor, at::Tensor> ln = at::native_layer_norm(x, {512}, gamma, beta, 1e-5);
    at::Tensor logp = at::_log_softmax(x, -1, false);
    at::Tensor causal = at::ones({64, 64}, at::TensorOptions().dtype(at::kBool)).triu(1);
    at::Tensor minus_inf = at::full({}, -std::numeric_limits<float>::infinity());
    at::Tensor rotary = at::randn({2, 64, 4, 32});  // [B, T, H, D]
};

Inputs& inputs() {
    static Inputs in;
    return in;
}

/// Where the [64, 512] operands x, y and positive sit, for the paired sweep. An op that streams
/// through L2 (Add: two 128 KiB inputs and a 128 KiB output) runs at a speed that depends on the
/// inputs' addresses against the output's modulo 4 KiB (a load that follows a store to an address
/// with the same low 12 bits waits for it): stock's loop of Add took 4.3 to 5.7 µs over 16 output
/// offsets here, the static kernel 3.7 to 4.2 µs. One fixed place is one sample of that, and a
/// run's allocations decide which; so each block of the sweep moves the operands, keeping their
/// values, to its own 64-byte-aligned offsets in a pool (place(block)), and the median over the
/// blocks is one over places, as a model's tensors land.
struct Places {
    static constexpr std::int64_t slack = 1024;  // floats: 4 KiB of offsets
    at::Tensor x, y, positive;                   // the values, as Inputs made them
    at::Tensor pool[3];
};

void place(int block) {
    static Places p = [] {
        Places q;
        const Inputs& in = inputs();
        q.x = in.x, q.y = in.y, q.positive = in.positive;
        for (at::Tensor& t : q.pool) t = at::empty({in.x.numel() + Places::slack});
        return q;
    }();
    Inputs& in = inputs();
    const at::Tensor* values[3] = {&p.x, &p.y, &p.positive};
    at::Tensor* operands[3] = {&in.x, &in.y, &in.positive};
    constexpr std::int64_t steps[3] = {7, 13, 29};  // 64-byte steps per block, apart for each operand
    for (int i = 0; i < 3; ++i) {
        const std::int64_t offset = (block * steps[i] % (Places::slack / 16)) * 16;
        *operands[i] = p.pool[i].narrow(0, offset, values[i]->numel()).view(values[i]->sizes()).copy_(*values[i]);
    }
}

void step();
void enable(const std::string& config);
std::string compile();
void disable();

/// The plugin's state for the Off, Fallback and Static benchmarks, which run interleaved: each
/// puts the plugin in the state it needs before its timed loop.
enum class State { off, recording, compiled };
struct PluginState {
    std::string config;  // enable()'s config; empty until the plugin is loaded
    State state = State::off;
};
PluginState plugin;

/// Puts the plugin in state `want` (outside the timing). A session starts with no static kernel
/// (disable() empties the kernel table); its compile() is a cache hit after the first one.
void enter(State want) {
    if (plugin.state == want) return;
    if (plugin.state != State::off) disable();
    plugin.state = State::off;
    if (want == State::off) return;
    enable(plugin.config);
    step();  // every instance seen once: from now on the lookup finds it
    if (want == State::compiled) {
        const std::string report = compile();
        if (report.find("\"installed\": \"\"") != std::string::npos) {
            std::fprintf(stderr, "compile() installed nothing: %s\n", report.c_str());
            std::exit(1);
        }
    }
    plugin.state = want;
}

template <int Phase>
void prepare(const benchmark::State&) {
    if constexpr (Phase > 0) enter(static_cast<State>(Phase - 1));
}

/// Makes each phase's instantiation its own code (identical ones would be folded into one), so that
/// a profile (callgrind) tells the phases apart.
template <int Phase>
void keep_apart() {
    int p = Phase;
    benchmark::DoNotOptimize(p);
}

/// One op call as a model makes it.
struct Op {
    const char* name;
    at::Tensor (*call)();
};

at::Tensor first(const std::tuple<at::Tensor, at::Tensor, at::Tensor>& t) { return std::get<0>(t); }

constexpr Op op_list[] = {
    {"Relu", [] { return at::relu(inputs().small); }},
    {"Gelu", [] { return at::gelu(inputs().x); }},
    {"Add", [] { return at::add(inputs().x, inputs().y); }},
    {"Softmax", [] { return at::_softmax(inputs().scores, -1, false); }},
    {"Linear", [] { return at::addmm(inputs().bias, inputs().lin_x, inputs().w.t()); }},
    {"LinearOneRow", [] { return at::addmm(inputs().bias, inputs().one_row, inputs().w.t()); }},  // the dot form
    {"Sub", [] { return at::sub(inputs().x, inputs().y); }},
    {"Mul", [] { return at::mul(inputs().x, inputs().y); }},
    {"RealDiv", [] { return at::div(inputs().x, inputs().positive); }},
    {"MulBroadcast", [] { return at::mul(inputs().x, inputs().col); }},
    {"Neg", [] { return at::neg(inputs().x); }},
    {"Tanh", [] { return at::tanh(inputs().x); }},
    {"Rsqrt", [] { return at::rsqrt(inputs().positive); }},
    {"Swish", [] { return at::silu(inputs().x); }},
    {"Power", [] { return at::pow(inputs().x, 2); }},
    {"LayerNormV3",
     [] { return first(at::native_layer_norm(inputs().x, {512}, inputs().gamma, inputs().beta, 1e-5)); }},
    {"LayerNormNoAffine", [] { return first(at::native_layer_norm(inputs().x, {512}, {}, {}, 1e-5)); }},
    {"BatchMatMulV2", [] { return at::bmm(inputs().q, inputs().k); }},
    {"Transpose", [] { return inputs().heads.transpose(0, 1).contiguous(); }},
    {"ReluGrad", [] { return at::threshold_backward(inputs().y, inputs().relu_out, 0); }},
    {"GeluGrad", [] { return at::gelu_backward(inputs().y, inputs().x); }},
    {"SiluGrad", [] { return at::silu_backward(inputs().y, inputs().x); }},
    {"SoftmaxGrad", [] { return at::_softmax_backward_data(inputs().scores, inputs().probs, -1, at::kFloat); }},
    {"LayerNormGradV3",
     [] {
         const Inputs& in = inputs();
         return first(at::native_layer_norm_backward(in.y, in.x, {512}, std::get<1>(in.ln), std::get<2>(in.ln),
                                                     in.gamma, in.beta, {true, true, true}));
     }},
    {"ReduceMean", [] { return at::mean(inputs().x, {-1}, true); }},
    {"ConcatD",
     [] {
         return at::cat({inputs().x, inputs().y}, -1);
     }},
    {"ConcatDViews",
     [] {
         const at::Tensor& r = inputs().rotary;  // rotate_half's halves, the second one negated first
         return at::cat({r.slice(3, 16, 32), r.slice(3, 0, 16)}, -1);
     }},
    {"NegView", [] { return at::neg(inputs().rotary.slice(3, 16, 32)); }},  // rotate_half's -x[..., h:]
    {"MulViews", [] { return at::mul(inputs().rotary.slice(3, 0, 16), inputs().rotary.slice(3, 16, 32)); }},
    {"SwishView", [] { return at::silu(inputs().x.slice(1, 0, 256)); }},  // a gated MLP's first half
    {"LogSoftmaxV2", [] { return at::_log_softmax(inputs().x, -1, false); }},
    {"LogSoftmaxGrad", [] { return at::_log_softmax_backward_data(inputs().y, inputs().logp, -1, at::kFloat); }},
    {"SelectV2", [] { return at::where(inputs().causal, inputs().minus_inf, inputs().scores); }},
    {"Axpy", [] { return at::add(inputs().x, inputs().y, -0.1); }},
    {"Rsub", [] { return at::rsub(inputs().x, 1); }},
    {"MaskedFill",
     [] { return at::masked_fill(inputs().scores, inputs().causal, -std::numeric_limits<float>::infinity()); }},
};
constexpr std::size_t op_count = sizeof op_list / sizeof op_list[0];

/// The paired sweep (Paired/<op>): the three states timed back to back, in blocks of about 2 ms of
/// calls per op and state, 31 blocks, the states' order reversed in every other block. A
/// benchmark's repetitions are seconds apart and the machine's load moves between them by more than
/// the differences asked about (what the plugin adds to a call that falls back: tens of ns on a
/// call of 3 µs); within a block the three states see the same load, and the median over the
/// blocks of each block's difference is what the Paired/<op> rows report (as counters). Each
/// block also puts the [64, 512] operands at other addresses (place()).
struct PairedOp {
    std::vector<double> ns[3];  // per call, per block, for each State
};
constexpr int paired_blocks = 31;

/// Thread CPU time: a block preempted by another process is not charged for it.
double cpu_ns() {
    timespec t{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

/// The q-quantile of v (0.5: the median), the nearest rank.
double quantile(std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}
double median(std::vector<double> v) { return quantile(std::move(v), 0.5); }

std::string paired_ops = ".*";  // the ops of the sweep: a regular expression (--benchmark_filter)

/// Runs the sweep once, for the ops paired_ops names, and keeps its figures.
const std::vector<PairedOp>& paired_sweep() {
    static const std::vector<PairedOp> sweep = [] {
        const std::regex selected(paired_ops);
        std::vector<PairedOp> ops(op_count);
        std::vector<long> calls(op_count, 0);  // per block, from the first state's calibration
        for (int block = 0; block < paired_blocks; ++block) {
            place(block);
            for (int k = 0; k < 3; ++k) {
                const int state = block % 2 == 0 ? k : 2 - k;
                enter(static_cast<State>(state));
                for (std::size_t i = 0; i < op_count; ++i) {
                    if (!std::regex_search(op_list[i].name, selected)) continue;
                    if (calls[i] == 0) {  // about 2 ms of calls, timed on 20 warm ones
                        for (int w = 0; w < 20; ++w) benchmark::DoNotOptimize(op_list[i].call());
                        const double t0 = cpu_ns();
                        for (int w = 0; w < 20; ++w) benchmark::DoNotOptimize(op_list[i].call());
                        calls[i] = std::max(20L, static_cast<long>(2e6 / ((cpu_ns() - t0) / 20)));
                    }
                    for (long w = 0; w < calls[i] / 10; ++w) benchmark::DoNotOptimize(op_list[i].call());
                    const double t0 = cpu_ns();
                    for (long n = 0; n < calls[i]; ++n) benchmark::DoNotOptimize(op_list[i].call());
                    ops[i].ns[state].push_back((cpu_ns() - t0) / static_cast<double>(calls[i]));
                }
            }
        }
        return ops;
    }();
    return sweep;
}

/// Reports op I's row of the sweep: per-call medians of each state, the median of the blocks'
/// Fallback - Off (what the plugin adds to a call that falls back) and of their Off / Static.
template <std::size_t I>
void paired(benchmark::State& s) {
    const PairedOp& op = paired_sweep()[I];
    for (auto _ : s) benchmark::DoNotOptimize(op.ns[0].size());
    std::vector<double> added;
    std::vector<double> speedup;
    for (std::size_t b = 0; b < op.ns[0].size(); ++b) {
        added.push_back(op.ns[1][b] - op.ns[0][b]);
        speedup.push_back(op.ns[0][b] / op.ns[2][b]);
    }
    s.counters["off_ns"] = median(op.ns[0]);
    s.counters["fallback_ns"] = median(op.ns[1]);
    s.counters["static_ns"] = median(op.ns[2]);
    s.counters["added_ns"] = median(added);
    s.counters["off_per_static"] = median(speedup);
    s.counters["off_per_static_q1"] = quantile(speedup, 0.25);  // the spread over places and load
    s.counters["off_per_static_q3"] = quantile(speedup, 0.75);
}

template <std::size_t... I>
void register_paired(std::index_sequence<I...>) {
    for (auto [name, fn] : {std::pair{op_list[I].name, &paired<I>}...})
        benchmark::RegisterBenchmark((std::string("Paired/") + name).c_str(), fn)->Iterations(1);
}

/// One instantiation per phase and op, so that a profile (callgrind) tells the phases apart.
template <int Phase, std::size_t I>
void bench(benchmark::State& s) {
    keep_apart<Phase>();
    for (auto _ : s) benchmark::DoNotOptimize(op_list[I].call());
}

/// Every op once (a model's step).
void step() {
    for (const Op& op : op_list) (void)op.call();
}

template <int Phase, std::size_t... I>
void register_phase(const std::string& phase, std::index_sequence<I...>) {
    for (auto [name, fn] : {std::pair{op_list[I].name, &bench<Phase, I>}...}) {
        benchmark::internal::Benchmark* b = benchmark::RegisterBenchmark((phase + "/" + name).c_str(), fn);
        b->Setup(&prepare<Phase>);  // the plugin's state, outside the benchmark's function
        if (const char* n = std::getenv("SKC_BENCH_ITERATIONS")) b->Iterations(std::atoll(n));
    }
}

/// The plugin's entry points, as torch.ops.skc.* calls them.
c10::OperatorHandle entry(const char* name) { return c10::Dispatcher::singleton().findSchemaOrThrow(name, ""); }
void enable(const std::string& config) { entry("skc::enable").typed<void(std::string)>().call(config); }
std::string compile() { return entry("skc::compile").typed<std::string()>().call(); }
std::string counters() { return entry("skc::counters").typed<std::string()>().call(); }
void disable() { entry("skc::disable").typed<void()>().call(); }

}  // namespace

int main(int argc, char** argv) {
    // Tensors of 128 KiB sit at glibc's default mmap threshold, which moves as blocks are freed; a
    // fixed one keeps allocation alike in every phase.
    ::mallopt(M_MMAP_THRESHOLD, 16 << 20);
    ::mallopt(M_TRIM_THRESHOLD, 64 << 20);
    at::set_num_threads(1);
    benchmark::Initialize(&argc, argv);
    register_phase<0>("Stock", std::make_index_sequence<op_count>{});
    register_phase<1>("Off", std::make_index_sequence<op_count>{});
    register_phase<2>("Fallback", std::make_index_sequence<op_count>{});
    register_phase<3>("Static", std::make_index_sequence<op_count>{});
    register_paired(std::make_index_sequence<op_count>{});
    // --benchmark_filter picks ops (e.g. Gelu); Stock runs first, then the other three phases.
    const std::string filter = benchmark::GetBenchmarkFilter();
    const std::string ops = filter.empty() || filter == "all" || filter == "." ? ".*" : "(" + filter + ")";
    // One reporter for the two runs (the library's default one does not survive a second run).
    benchmark::BenchmarkReporter* reporter = benchmark::CreateDefaultDisplayReporter();

    step();  // torch's own one-time set-up is not part of the first benchmark
    benchmark::RunSpecifiedBenchmarks(reporter, "^Stock/" + ops);
    if (::dlopen(SKC_BENCH_TORCH_PLUGIN, RTLD_NOW | RTLD_GLOBAL) == nullptr) {
        std::fprintf(stderr, "cannot load %s: %s\n", SKC_BENCH_TORCH_PLUGIN, ::dlerror());
        return 1;
    }
    char tmpl[] = "/tmp/skc-torch-bench-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return 1;
    const std::string base = tmpl;
    plugin.config = R"({"base_dir": ")" + base + R"(")";
    // SKC_BENCH_OUTPUT_CACHE_MIB=0: the static outputs from c10::alloc_cpu, as stock's, for the
    // share of the static path's gain that the plugin's output cache makes (output_cache.hpp).
    if (const char* mib = std::getenv("SKC_BENCH_OUTPUT_CACHE_MIB"))
        plugin.config += std::string(R"(, "output_cache_mib": )") + std::to_string(std::atoll(mib));
    plugin.config += "}";
    enter(State::compiled);  // the first compile, outside every benchmark's repetitions
    benchmark::RunSpecifiedBenchmarks(reporter, "^(Off|Fallback|Static)/" + ops);  // interleaved when asked
    paired_ops = ops;
    benchmark::RunSpecifiedBenchmarks(reporter, "^Paired/" + ops);
    std::printf("plugin counters after the run: %s\n", counters().c_str());
    disable();
    std::error_code ec;
    std::filesystem::remove_all(base, ec);
    benchmark::Shutdown();
    return 0;
}
