// benchmarks/host_kernels_bench.cpp: the host (CPU) reference backend's kernels, generic against
// shape-specialised ("static"), with OpenBLAS and LIBXSMM beside the matrix products and a memcpy of
// the same bytes beside the memory-bound ops.
//
//   <op>/<size>/generic   skc_host::run_plan: the shape-generic kernel of examples/host/kernels.hpp,
//                         sizes passed at run time. The plan (skc_host::analyze) is computed once,
//                         outside the timing, as a runtime does when it keeps the plan of an op.
//   <op>/<size>/static    the kernel skc_host::generate_kernel emits for the op's exact shapes,
//                         generated at build time (host_kernels_gen) and compiled into this program.
//   <op>/<size>/openblas  MatMulV2 and BatchMatMulV2 only: cblas_sgemm (once per batch) on one
//                         thread, when OpenBLAS was found at build time.
//   <op>/<size>/libxsmm   the same cases: the kernel LIBXSMM (1.17) JITs for the product, dispatched
//                         once outside the timing and called once per batch item, when LIBXSMM was
//                         found at build time. LIBXSMM is column-major: row-major C[M,N] = A[M,K] .
//                         op(B) is computed as C^T = op(B)^T . A^T (m = N, n = M, k = K; B is the
//                         first operand, A the second). A B stored [N,K] (QK^T) needs that first
//                         operand transposed, which 1.17 does not JIT (LIBXSMM_GEMM_NO_BYPASS refuses
//                         LIBXSMM_GEMM_FLAG_TRANS_A; only TRANS_B is generated): the dispatch gives no
//                         kernel, and the case is reported as an error, "-" in the table. A null
//                         dispatch for any other reason is reported the same way.
//   <op>/<size>/memcpy    the ops that are not matrix products (Add, Mul, Gelu, SoftmaxV2, LayerNorm,
//                         Transpose, Relu, LayerNormV3): one std::memcpy that reads and writes as many
//                         bytes as the op (half the bytes of all its inputs and outputs: for Add, which
//                         reads two arrays and writes one, one and a half arrays), between two buffers
//                         of its own: the floor of an op that moves that much memory once.
//
// The generic kernels are compiled as a framework ships them, for any x86-64 (host_kernels_generic.cpp:
// the project's flags plus -O3, no -march); the static ones as host_op_compiler compiles them, for
// this CPU (the generated file: -O3 -march=native -ffp-contract=fast, the flags of
// examples/host/target.hpp's kernel_flags(); the context line "static" names the target); neither
// with -ffast-math. This file, the harness, gets the project's flags. The harness must not
// instantiate a kernel itself (it does not include dispatch.hpp or kernels.hpp): the kernels are
// inline functions, and the linker would be free to keep the harness's copy, built without -O3.
// OpenBLAS and LIBXSMM pick their code for the CPU they run on (the context lines "openblas" and
// "libxsmm" name it; OpenBLAS follows OPENBLAS_CORETYPE when it is set).
//
// All kernels of a case run on the same buffers. Before timing, each static, OpenBLAS and LIBXSMM
// kernel runs once on outputs set to NaN and is compared with the generic kernel's output: the
// static one must agree within |a - b| <= bound * max(|b|, 1) per element, bound the op's
// skc_host::generated_tolerance() (1e-4 for the matrix products, 1e-5 for the rest: the bound of
// tests/examples/host_kernels_test.cpp; the counter max_rel_err shows the error), OpenBLAS and
// LIBXSMM within 2e-4 (they sum in another order and block K otherwise: two sums each within 1e-4
// of the exact one). A case that fails is reported as an error, not timed.
//
// At the end a summary table gives, per op and size, the median (or single) CPU time of each
// kernel, the speedup generic / static, the ratios OpenBLAS / static and LIBXSMM / static (above 1:
// the static kernel is faster) and static / memcpy, and the geometric mean of the speedups over the
// demo's ops. Under it, the benchmarks that were not timed, with the reason.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <benchmark/benchmark.h>

#include "host/codegen.hpp"
#include "host/plan.hpp"
#include "host_kernels_cases.hpp"
#include "host_kernels_generic.hpp"

#if SKC_BENCH_HAVE_OPENBLAS
// Complex numbers as OpenBLAS's plain structs: its default, C99 _Complex, is an extension in C++
// (clang -Wpedantic). Only cblas_sgemm is used.
#define FORCE_OPENBLAS_COMPLEX_STRUCT 1
#include <cblas.h>
#endif
#if SKC_BENCH_HAVE_LIBXSMM
#include <libxsmm.h>  // clean under -Wall -Wextra -Wpedantic with g++ 12 and clang++ 14
#endif

using skc_bench_kernel_fn = void (*)(const float* const*, float* const*);
extern "C" {
extern const skc_bench_kernel_fn skc_bench_static_kernels[];
extern const char* const skc_bench_static_names[];
extern const unsigned long skc_bench_static_count;
}

namespace {

using skc_bench::HostCase;

constexpr double blas_tolerance = 2e-4;

/// The buffers of one case, inputs random in [-3, 3] (fixed seed), in one arena shared by every
/// kernel kind of the case (see data()): each buffer starts on a 64-byte boundary, 4 KiB-rounded
/// and staggered by 64 bytes more than the one before, so that no two buffers meet at the same
/// offset in a 4 KiB page (a load that aliases an earlier store's page offset stalls). Kernels of
/// a few microseconds moved by 10 to 40% with the placement of separately allocated buffers.
struct Data {
    std::vector<float> arena;
    std::vector<std::size_t> in_n, out_n;      // floats (0: absent slot)
    std::vector<const skc::TensorDesc*> in_t;  // each input tensor (a bool one: in_n floats hold its bytes)
    std::vector<const float*> in_p;
    std::vector<float*> out_p;
    [[nodiscard]] std::size_t outputs() const { return out_n.size(); }
};

/// The floats each tensor needs, in the kernels' calling convention (a list slot's tensors one
/// after the other; a bool tensor one byte an element), and the tensors (null for absent slots).
std::vector<std::size_t> counts(const std::vector<skc::TensorSlot>& slots,
                                std::vector<const skc::TensorDesc*>* tensors = nullptr) {
    std::vector<std::size_t> out;
    auto one = [&](const skc::TensorDesc* t) {
        const bool b = t != nullptr && t->dtype == "bool";
        const auto n = t == nullptr ? 0 : static_cast<std::size_t>(t->shape.element_count().value());
        out.push_back(b ? (n + 3) / 4 : t == nullptr || t->dtype != "float" ? 0 : n);
        if (tensors != nullptr) tensors->push_back(t);
    };
    for (const skc::TensorSlot& s : slots) {
        if (const auto* list = std::get_if<std::vector<skc::TensorDesc>>(&s))
            for (const skc::TensorDesc& t : *list) one(&t);
        else one(std::get_if<skc::TensorDesc>(&s));
    }
    return out;
}

Data make_data(const HostCase& c) {
    Data d;
    d.in_n = counts(c.record.inputs, &d.in_t);
    d.out_n = counts(c.record.outputs);
    constexpr std::size_t page = 1024, line = 16;  // in floats: 4 KiB, 64 bytes
    std::vector<std::size_t> offsets;
    std::size_t total = 0, k = 0;
    for (const auto* ns : {&d.in_n, &d.out_n})
        for (std::size_t n : *ns) {
            offsets.push_back(total);
            total += (n + page - 1) / page * page + line * ++k;
        }
    d.arena.assign(total + line, 0.0f);
    auto* base = d.arena.data();
    while (reinterpret_cast<std::uintptr_t>(base) % 64 != 0) ++base;
    std::mt19937 rng(20261202);
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    k = 0;
    for (std::size_t i = 0; i < d.in_n.size(); ++i) {
        const std::size_t n = d.in_n[i];
        float* p = base + offsets[k++];
        if (const skc::TensorDesc* t = d.in_t[i]; t != nullptr && t->dtype == "bool") {
            // A causal mask: true above the diagonal of the last two dims, as attention's.
            const std::int64_t cols = t->shape.rank() > 0 ? t->shape[t->shape.rank() - 1] : 1;
            auto* b = reinterpret_cast<unsigned char*>(p);
            for (std::int64_t e = 0; e < t->shape.element_count().value(); ++e)
                b[e] = static_cast<unsigned char>(e % cols > e / cols % cols ? 1 : 0);
        } else {
            for (std::size_t e = 0; e < n; ++e) p[e] = dist(rng);
        }
        d.in_p.push_back(n == 0 ? nullptr : p);
    }
    for (std::size_t n : d.out_n) {
        float* p = base + offsets[k++];
        d.out_p.push_back(n == 0 ? nullptr : p);
    }
    // LogSoftmaxGrad's x (inputs[1]) is a log softmax output, as training gives it: each row's
    // e^x sums to 1.
    if (c.record.op_type == "LogSoftmaxGrad") {
        const auto* t = std::get_if<skc::TensorDesc>(&c.record.inputs[1]);
        const auto cols = static_cast<std::size_t>(t->shape[t->shape.rank() - 1]);
        auto* x = const_cast<float*>(d.in_p[1]);
        for (std::size_t r = 0; r < d.in_n[1]; r += cols) {
            double sum = 0;
            for (std::size_t e = 0; e < cols; ++e) sum += std::exp(static_cast<double>(x[r + e]));
            for (std::size_t e = 0; e < cols; ++e) x[r + e] = static_cast<float>(x[r + e] - std::log(sum));
        }
    }
    return d;
}

const std::vector<HostCase>& all_cases() {
    static const std::vector<HostCase> c = skc_bench::cases();
    return c;
}

/// The buffers of case i, made once and shared by its generic, static and OpenBLAS benchmarks, so
/// that all of them run on the same memory.
Data& data(std::size_t i) {
    static std::map<std::size_t, Data> all;  // map nodes do not move; a moved Data keeps its arena
    auto it = all.find(i);
    if (it == all.end()) it = all.emplace(i, make_data(all_cases()[i])).first;
    return it->second;
}

using Outputs = std::vector<std::vector<float>>;

/// The generic kernel's outputs of case i, computed once: the reference of the checks.
const Outputs& reference(std::size_t i) {
    static std::map<std::size_t, Outputs> refs;
    auto it = refs.find(i);
    if (it == refs.end()) {
        Data& d = data(i);
        const skc_host::Analysis a = skc_host::analyze(all_cases()[i].record);
        if (a.plan) skc_bench::run_plan(*a.plan, d.in_p.data(), d.out_p.data());
        Outputs out;
        for (std::size_t o = 0; o < d.outputs(); ++o) out.emplace_back(d.out_p[o], d.out_p[o] + d.out_n[o]);
        it = refs.emplace(i, std::move(out)).first;
    }
    return it->second;
}

/// Runs `kernel` once on case i's buffers, its outputs first set to NaN, and returns the largest
/// |a - b| / max(|b|, 1) against the reference (infinity when an output is not finite).
template <class Run>
double check(std::size_t i, Run&& kernel) {
    const Outputs& ref = reference(i);
    Data& d = data(i);
    for (std::size_t o = 0; o < d.outputs(); ++o) std::fill(d.out_p[o], d.out_p[o] + d.out_n[o], NAN);
    kernel(d);
    double err = 0.0;
    for (std::size_t o = 0; o < d.outputs(); ++o)
        for (std::size_t e = 0; e < d.out_n[o]; ++e) {
            const double x = d.out_p[o][e], y = ref[o][e];
            if (!std::isfinite(x) || !std::isfinite(y)) return INFINITY;
            err = std::max(err, std::abs(x - y) / std::max(1.0, std::abs(y)));
        }
    return err;
}

void set_counters(benchmark::State& state, const HostCase& c) {
    std::int64_t elems = 0;
    for (const skc::TensorSlot& s : c.record.outputs)
        if (const auto* t = std::get_if<skc::TensorDesc>(&s)) elems += t->shape.element_count().value_or(0);
    state.SetItemsProcessed(state.iterations() * elems);  // output elements per second
    if (c.gemm.batch > 0)
        state.counters["GFLOPS"] =
            benchmark::Counter(static_cast<double>(state.iterations()) * 2.0 *
                                   static_cast<double>(c.gemm.batch * c.gemm.m * c.gemm.k * c.gemm.n) / 1e9,
                               benchmark::Counter::kIsRate);
}

void BM_Generic(benchmark::State& state, std::size_t i) {
    const HostCase& c = all_cases()[i];
    const skc_host::Analysis a = skc_host::analyze(c.record);
    if (!a.plan) {
        state.SkipWithError(a.reason.c_str());
        return;
    }
    Data& d = data(i);
    for (auto _ : state) {
        skc_bench::run_plan(*a.plan, d.in_p.data(), d.out_p.data());
        benchmark::DoNotOptimize(d.out_p[0]);
        benchmark::ClobberMemory();
    }
    set_counters(state, c);
}

/// Times `run` (on the case's Data) once its output agrees with the generic kernel's within
/// `bound` (check()); otherwise reports "<who> output differs from the generic one" as the error.
template <class Run>
void time_checked(benchmark::State& state, std::size_t i, const char* who, double bound, Run&& run) {
    const double err = check(i, run);
    state.counters["max_rel_err"] = err;
    if (!(err <= bound)) {
        const std::string msg =
            std::string(who) + " output differs from the generic one: max relative error " + std::to_string(err);
        state.SkipWithError(msg.c_str());
        return;
    }
    Data& d = data(i);
    for (auto _ : state) {
        run(d);
        benchmark::DoNotOptimize(d.out_p[0]);
        benchmark::ClobberMemory();
    }
    set_counters(state, all_cases()[i]);
}

void BM_Static(benchmark::State& state, std::size_t i) {
    const skc_bench_kernel_fn kernel = skc_bench_static_kernels[i];
    time_checked(state, i, "static", skc_host::generated_tolerance(*skc_host::analyze(all_cases()[i].record).plan),
                 [&](Data& d) { kernel(d.in_p.data(), d.out_p.data()); });
}

#if SKC_BENCH_HAVE_OPENBLAS
void run_sgemm(const skc_bench::GemmShape& g, const Data& d) {
    const float* a = d.in_p[0];
    const float* b = d.in_p[1];
    float* y = d.out_p[0];
    const auto m = static_cast<blasint>(g.m), k = static_cast<blasint>(g.k), n = static_cast<blasint>(g.n);
    for (std::int64_t t = 0; t < g.batch; ++t)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a + t * g.m * g.k, k,
                    b + t * g.k * g.n, g.tb ? k : n, 0.0f, y + t * g.m * g.n, n);
}

void BM_OpenBlas(benchmark::State& state, std::size_t i) {
    const HostCase& c = all_cases()[i];
    time_checked(state, i, "OpenBLAS", blas_tolerance, [&](const Data& d) { run_sgemm(c.gemm, d); });
}
#endif

#if SKC_BENCH_HAVE_LIBXSMM
/// LIBXSMM's kernel for the product of g, or null (then `why` says why). Row-major C[M,N] = A[M,K]
/// . op(B) is, column-major, C^T = op(B)^T . A^T: m = N, n = M, k = K, the first operand B
/// (lda = N, or K for a B stored [N,K], which needs LIBXSMM_GEMM_FLAG_TRANS_A), the second A
/// (ldb = K), ldc = N; alpha 1, beta 0 (C is overwritten), no prefetch.
libxsmm_smmfunction xsmm_dispatch(const skc_bench::GemmShape& g, std::string& why) {
    const auto m = static_cast<libxsmm_blasint>(g.n), n = static_cast<libxsmm_blasint>(g.m),
               k = static_cast<libxsmm_blasint>(g.k);
    const libxsmm_blasint lda = g.tb ? k : m, ldb = k, ldc = m;
    const float alpha = 1.0f, beta = 0.0f;
    const int flags = g.tb ? LIBXSMM_GEMM_FLAG_TRANS_A : LIBXSMM_GEMM_FLAG_NONE;
    const int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
    const libxsmm_smmfunction f = libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
    if (f == nullptr)
        why = g.tb ? "LIBXSMM 1.17 JITs no kernel with a transposed first operand (LIBXSMM_GEMM_FLAG_TRANS_A), which "
                     "B stored [N,K] needs in the column-major product"
                   : "libxsmm_smmdispatch returned no kernel for m=" + std::to_string(m) + " n=" + std::to_string(n) +
                         " k=" + std::to_string(k);
    return f;
}

void run_xsmm(libxsmm_smmfunction f, const skc_bench::GemmShape& g, const Data& d) {
    const float* a = d.in_p[0];
    const float* b = d.in_p[1];
    float* y = d.out_p[0];
    for (std::int64_t t = 0; t < g.batch; ++t) f(b + t * g.k * g.n, a + t * g.m * g.k, y + t * g.m * g.n);
}

void BM_Libxsmm(benchmark::State& state, std::size_t i) {
    const HostCase& c = all_cases()[i];
    std::string why;
    const libxsmm_smmfunction f = xsmm_dispatch(c.gemm, why);
    if (f == nullptr) {
        state.SkipWithError(why.c_str());
        return;
    }
    time_checked(state, i, "LIBXSMM", blas_tolerance, [&](const Data& d) { run_xsmm(f, c.gemm, d); });
}
#endif

/// Whether case c gets a memcpy baseline: every op but the matrix products.
bool memory_bound(const HostCase& c) {
    const std::string& t = c.record.op_type;
    return t != "MatMulV2" && t != "BatchMatMulV2" && t != "FusedMatMul";
}

void BM_Memcpy(benchmark::State& state, std::size_t i) {
    const HostCase& c = all_cases()[i];
    const Data& d = data(i);
    // As many bytes read and written as the op reads and writes: half its inputs' and outputs' bytes
    // copied (Add reads two arrays and writes one: one and a half copied).
    std::size_t floats = 0;
    for (std::size_t n : d.in_n) floats += n;
    for (std::size_t n : d.out_n) floats += n;
    floats /= 2;
    if (floats == 0) {
        state.SkipWithError("the op has no float inputs or outputs");
        return;
    }
    std::vector<float> src(floats, 1.0f), dst(floats, 0.0f);
    for (auto _ : state) {
        std::memcpy(dst.data(), src.data(), floats * sizeof(float));
        benchmark::DoNotOptimize(dst.data());
        benchmark::ClobberMemory();
    }
    set_counters(state, c);
    state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(floats * sizeof(float)));
}

// ---- the summary ------------------------------------------------------------------------------------

/// The console output, plus a table of medians and speedups at the end.
class SummaryReporter : public benchmark::ConsoleReporter {
public:
    void ReportRuns(const std::vector<Run>& runs) override {
        ConsoleReporter::ReportRuns(runs);
        for (const Run& r : runs) {
            if (r.error_occurred) {
                errors_.emplace(r.run_name.function_name, r.error_message);
                continue;
            }
            // With repetitions, the median; without, the one run.
            const bool median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
            if (!(median || (r.run_type == Run::RT_Iteration && r.repetitions <= 1))) continue;
            std::string name = r.run_name.function_name;  // "<op>/<size>/<kind>"
            const std::size_t slash = name.rfind('/');
            if (slash == std::string::npos) continue;
            const double ns = r.GetAdjustedCPUTime() * to_ns(r.time_unit);
            times_[name.substr(0, slash)][name.substr(slash + 1)] = ns;
        }
    }

    void Finalize() override {
        ConsoleReporter::Finalize();
        std::FILE* o = stdout;
        std::fprintf(o,
                     "\nSummary (CPU time per call, median of the repetitions; speedup = generic / static; "
                     "OpenBLAS/static and LIBXSMM/static above 1: static is faster):\n\n");
        std::fprintf(o,
                     "| Op | Size | Shapes | Generic | Static | Speedup | OpenBLAS | LIBXSMM | memcpy "
                     "| OpenBLAS/static | LIBXSMM/static | static/memcpy |\n");
        std::fprintf(o, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        double log_sum = 0, log_sum_all = 0;
        int count = 0, count_all = 0;
        double worst = INFINITY;
        std::string worst_name;
        for (const HostCase& c : all_cases()) {
            const auto it = times_.find(c.name());
            if (it == times_.end()) continue;
            const auto& t = it->second;
            const double g = value(t, "generic"), s = value(t, "static"), b = value(t, "openblas"),
                         x = value(t, "libxsmm"), m = value(t, "memcpy");
            const double speedup = ratio(g, s);
            std::fprintf(o, "| %s%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.op.c_str(),
                         c.demo ? "" : " (not in the demo)", c.size.c_str(), c.shape.c_str(), fmt_time(g).c_str(),
                         fmt_time(s).c_str(), fmt_ratio(speedup).c_str(), fmt_time(b).c_str(), fmt_time(x).c_str(),
                         fmt_time(m).c_str(), fmt_ratio(ratio(b, s)).c_str(), fmt_ratio(ratio(x, s)).c_str(),
                         fmt_ratio(ratio(s, m)).c_str());
            if (speedup <= 0) continue;
            log_sum_all += std::log(speedup);
            ++count_all;
            if (!c.demo) continue;
            log_sum += std::log(speedup);
            ++count;
            if (speedup < worst) worst = speedup, worst_name = c.name();
        }
        if (count > 0)
            std::fprintf(o, "\nGeometric mean speedup over the demo's ops: %.2fx (%d cases; lowest %.2fx, %s)\n",
                         std::exp(log_sum / count), count, worst, worst_name.c_str());
        if (count_all > count)
            std::fprintf(o, "Geometric mean speedup over every case: %.2fx (%d cases)\n",
                         std::exp(log_sum_all / count_all), count_all);
        if (!errors_.empty()) std::fprintf(o, "\nNot timed (\"-\" above):\n");
        for (const auto& [name, message] : errors_) std::fprintf(o, "- %s: %s\n", name.c_str(), message.c_str());
        std::fflush(o);
    }

private:
    static double to_ns(benchmark::TimeUnit u) {
        switch (u) {
        case benchmark::kNanosecond: return 1.0;
        case benchmark::kMicrosecond: return 1e3;
        case benchmark::kMillisecond: return 1e6;
        case benchmark::kSecond: return 1e9;
        }
        return 1.0;
    }
    static double value(const std::map<std::string, double>& t, const std::string& k) {
        const auto it = t.find(k);
        return it == t.end() ? 0.0 : it->second;
    }
    static std::string fmt_time(double ns) {
        if (ns <= 0) return "-";
        char buf[32];
        if (ns < 1e3) std::snprintf(buf, sizeof buf, "%.0f ns", ns);
        else if (ns < 1e6) std::snprintf(buf, sizeof buf, "%.*f µs", ns < 1e4 ? 2 : ns < 1e5 ? 1 : 0, ns / 1e3);
        else std::snprintf(buf, sizeof buf, "%.*f ms", ns < 1e7 ? 2 : ns < 1e8 ? 1 : 0, ns / 1e6);
        return buf;
    }
    static double ratio(double num, double den) { return num > 0 && den > 0 ? num / den : 0; }
    static std::string fmt_ratio(double r) {
        if (r <= 0) return "-";
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.2f", r);
        return buf;
    }

    std::map<std::string, std::map<std::string, double>> times_;
    std::map<std::string, std::string> errors_;  // benchmark name -> why it was not timed
};

void register_all() {
    const auto& cases = all_cases();
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const std::string name = cases[i].name();
        benchmark::RegisterBenchmark((name + "/generic").c_str(), BM_Generic, i)->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark((name + "/static").c_str(), BM_Static, i)->Unit(benchmark::kMicrosecond);
#if SKC_BENCH_HAVE_OPENBLAS
        if (cases[i].gemm.batch > 0)
            benchmark::RegisterBenchmark((name + "/openblas").c_str(), BM_OpenBlas, i)->Unit(benchmark::kMicrosecond);
#endif
#if SKC_BENCH_HAVE_LIBXSMM
        if (cases[i].gemm.batch > 0)
            benchmark::RegisterBenchmark((name + "/libxsmm").c_str(), BM_Libxsmm, i)->Unit(benchmark::kMicrosecond);
#endif
        if (memory_bound(cases[i]))
            benchmark::RegisterBenchmark((name + "/memcpy").c_str(), BM_Memcpy, i)->Unit(benchmark::kMicrosecond);
    }
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    // The generated table must be the one of these cases, in this order.
    const auto& cases = all_cases();
    if (skc_bench_static_count != cases.size()) {
        std::fprintf(stderr, "host_kernels_bench: %lu generated kernels for %zu cases: rebuild\n",
                     skc_bench_static_count, cases.size());
        return 1;
    }
    for (std::size_t i = 0; i < cases.size(); ++i)
        if (cases[i].name() != skc_bench_static_names[i]) {
            std::fprintf(stderr, "host_kernels_bench: generated kernel %zu is for %s, not %s: rebuild\n", i,
                         skc_bench_static_names[i], cases[i].name().c_str());
            return 1;
        }
    const skc_host::Target target = skc_host::target_for("native");  // what host_kernels_gen generated for
    benchmark::AddCustomContext("static", "target " + target.id + " (-march=" + target.march + ", " +
                                              std::to_string(target.vector_floats) + " floats a vector)");
#if SKC_BENCH_HAVE_OPENBLAS
    openblas_set_num_threads(1);  // one thread, as the static and generic kernels
    benchmark::AddCustomContext("openblas", std::string(openblas_get_config()) + ", threads " +
                                                std::to_string(openblas_get_num_threads()) + ", core " +
                                                openblas_get_corename());
#else
    benchmark::AddCustomContext("openblas", "not found at build time");
#endif
#if SKC_BENCH_HAVE_LIBXSMM
    libxsmm_init();
    benchmark::AddCustomContext("libxsmm",
                                std::string(LIBXSMM_CONFIG_VERSION) + ", target " + libxsmm_get_target_arch());
#else
    benchmark::AddCustomContext("libxsmm", "not found at build time");
#endif
    register_all();
    SummaryReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::Shutdown();
#if SKC_BENCH_HAVE_LIBXSMM
    libxsmm_finalize();
#endif
    return 0;
}
