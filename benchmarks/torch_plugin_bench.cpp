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
//                   to a call that falls back (Off and Fallback run interleaved with
//                   --benchmark_enable_random_interleaving, each setting the plugin's state
//                   before its timed loop; Off costs a load and a compare more than Stock);
//   Static/<op>     after torch.ops.skc.compile() (host_op_compiler, a few seconds): the op's
//                   static kernel, its output allocated by the plugin.
// The ops: Relu [16, 64] (so small that the per-call cost shows), Gelu [64, 512] (erf), Add
// [64, 512], _softmax [4, 64, 64] over the last axis, and addmm as a Linear layer computes it,
// bias [256] + x [64, 256] @ W[256, 256].t().
//
// SKC_BENCH_ITERATIONS=N runs exactly N iterations once per benchmark, for counting instructions
// with valgrind --tool=callgrind (each phase is its own instantiation, so the profile tells them
// apart; docs/performance.md).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <dlfcn.h>
#include <malloc.h>
#include <stdlib.h>

#ifndef SKC_BENCH_TORCH_PLUGIN
#error "build with -DSKC_BENCH_TORCH_PLUGIN=\"<path of libskc_torch.so>\""
#endif

namespace {

struct Inputs {
    at::Tensor small = at::randn({16, 64});
    at::Tensor x = at::randn({64, 512});
    at::Tensor y = at::randn({64, 512});
    at::Tensor scores = at::randn({4, 64, 64});
    at::Tensor bias = at::randn({256});
    at::Tensor lin_x = at::randn({64, 256});
    at::Tensor w = at::randn({256, 256});
};

Inputs& inputs() {
    static Inputs in;
    return in;
}

void step();
void enable(const std::string& config);
void disable();

/// The plugin's state for the Off and Fallback benchmarks, which run interleaved: each sets the
/// state it needs before its timed loop.
struct PluginState {
    std::string config;  // enable()'s config; empty until the plugin is loaded
    bool on = false;
};
PluginState plugin;

template <int Phase>
void prepare(const benchmark::State&) {
    if constexpr (Phase == 1) {
        if (plugin.on) disable();
        plugin.on = false;
    } else if constexpr (Phase == 2) {
        if (!plugin.on) {
            enable(plugin.config);
            step();  // every instance seen once: from now on the lookup finds it
        }
        plugin.on = true;
    }
}

/// Makes each phase's instantiation its own code (identical ones would be folded into one), so that
/// a profile (callgrind) tells the phases apart.
template <int Phase>
void keep_apart() {
    int p = Phase;
    benchmark::DoNotOptimize(p);
}

/// One instantiation per phase, so that a profile (callgrind) tells the phases apart.
template <int Phase>
void relu(benchmark::State& s) {
    keep_apart<Phase>();
    const at::Tensor& x = inputs().small;
    for (auto _ : s) benchmark::DoNotOptimize(at::relu(x));
}
template <int Phase>
void gelu(benchmark::State& s) {
    keep_apart<Phase>();
    const at::Tensor& x = inputs().x;
    for (auto _ : s) benchmark::DoNotOptimize(at::gelu(x));
}
template <int Phase>
void add(benchmark::State& s) {
    keep_apart<Phase>();
    const Inputs& in = inputs();
    for (auto _ : s) benchmark::DoNotOptimize(at::add(in.x, in.y));
}
template <int Phase>
void softmax(benchmark::State& s) {
    keep_apart<Phase>();
    const at::Tensor& x = inputs().scores;
    for (auto _ : s) benchmark::DoNotOptimize(at::_softmax(x, -1, false));
}
template <int Phase>
void linear(benchmark::State& s) {
    keep_apart<Phase>();
    const Inputs& in = inputs();
    for (auto _ : s) benchmark::DoNotOptimize(at::addmm(in.bias, in.lin_x, in.w.t()));
}

/// Every op once (a model's step).
void step() {
    const Inputs& in = inputs();
    (void)at::relu(in.small);
    (void)at::gelu(in.x);
    (void)at::add(in.x, in.y);
    (void)at::_softmax(in.scores, -1, false);
    (void)at::addmm(in.bias, in.lin_x, in.w.t());
}

template <int Phase>
void register_phase(const std::string& phase) {
    for (auto [name, fn] :
         {std::pair{"Relu", &relu<Phase>}, std::pair{"Gelu", &gelu<Phase>}, std::pair{"Add", &add<Phase>},
          std::pair{"Softmax", &softmax<Phase>}, std::pair{"Linear", &linear<Phase>}}) {
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
    register_phase<0>("Stock");
    register_phase<1>("Off");
    register_phase<2>("Fallback");
    register_phase<3>("Static");
    // --benchmark_filter picks ops (e.g. Gelu); the phases always run in this order.
    const std::string filter = benchmark::GetBenchmarkFilter();
    const std::string ops = filter.empty() || filter == "all" || filter == "." ? ".*" : "(" + filter + ")";
    // One reporter for the four runs (the library's default one does not survive a second run).
    benchmark::BenchmarkReporter* reporter = benchmark::CreateDefaultDisplayReporter();
    const auto phase = [&](const char* name) {
        benchmark::RunSpecifiedBenchmarks(reporter, "^" + std::string(name) + "/" + ops);
    };

    step();  // torch's own one-time set-up is not part of the first benchmark
    phase("Stock");
    if (::dlopen(SKC_BENCH_TORCH_PLUGIN, RTLD_NOW | RTLD_GLOBAL) == nullptr) {
        std::fprintf(stderr, "cannot load %s: %s\n", SKC_BENCH_TORCH_PLUGIN, ::dlerror());
        return 1;
    }
    char tmpl[] = "/tmp/skc-torch-bench-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return 1;
    const std::string base = tmpl;
    plugin.config = R"({"base_dir": ")" + base + R"("})";
    benchmark::RunSpecifiedBenchmarks(reporter, "^(Off|Fallback)/" + ops);  // interleaved when asked

    if (!plugin.on) {
        enable(plugin.config);
        step();
    }
    const std::string report = compile();
    if (report.find("\"installed\": \"\"") != std::string::npos) {
        std::fprintf(stderr, "compile() installed nothing: %s\n", report.c_str());
        return 1;
    }
    phase("Static");
    std::printf("plugin counters after the run: %s\n", counters().c_str());
    disable();
    std::error_code ec;
    std::filesystem::remove_all(base, ec);
    benchmark::Shutdown();
    return 0;
}
