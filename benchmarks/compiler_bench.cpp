// benchmarks/compiler_bench.cpp: what StaticKernelCompiler costs around the kernel compiler.
//
//   BM_Hit_Orchestration/<n>  compile(recorder) of an OpRecorder session of n distinct ops whose package
//                             the cache holds, without an op library (no install), from the end of
//                             recording: the run folder, the plan of the op info folders and of the
//                             selection (in memory; the folders are written by a background thread,
//                             waited for outside the timing), the key and the cache hit (per-key
//                             lock, entry, package checksum once per process). Counters: the
//                             average time of each stage, in ms.
//   BM_Floor_WriteOpInfo/<n>  writing the n op info files once into one folder with skc::write_op_info:
//                             what the hit's critical path used to contain three times over.
//   BM_SkcCompile_Hit/returned/<n>  `skc compile --ops DIR` on a hit, in process: read and parse the
//                             n files, compile() (the critical path);
//   BM_SkcCompile_Hit/written/<n>   the same until the op info folders are written (flush()), as
//                             when the process exits;
//   BM_Floor_ParseOpInfo/<n>  their floor: reading and parsing the n files once (read_op_info_dir).
//   BM_SkcProcess_Hit/1000    the whole `skc compile --ops DIR` process on a hit (start to exit, its
//                             op info folders written), beside `skc ops inspect DIR` (a process that
//                             reads and parses the same files once) in the same iteration: counter
//                             vs_parse_process is the median of the pairs' ratios.
//   BM_EndToEnd/compile       the example op info files (examples/op_info) through the whole flow with
//                             ProcessInvoker running the real host_op_compiler, in a fresh base each
//                             iteration, installed into an op library: the first run of a job.
//   BM_EndToEnd/hit           the same on a warm base: the second run (cache hit, install, no compile).
//
//   BM_Cover/whole            48 ops (MatMulV2 [m, 64] x [64, 192], m = 1 to 48) compiled at once
//                             with host_op_compiler in a fresh base, installed;
//   BM_Cover/delta_16_of_48   the same 48 where the first 32 are cached (compiled outside the timing):
//                             a cover of one package, the other 16 compiled;
//   BM_Cover/hit_one_package  the 48 cached as one package: a plain hit, installed;
//   BM_Cover/covered_by_8_packages  the 48 cached as 8 packages of 6, and the composite entry their
//                             first cover wrote: one lookup, nothing compiled, 8 installed (kept
//                             extractions). Counters: the compile, cache and install stages, in s and
//                             ms, means over the iterations.
//
//   BM_CompilerFingerprint/hash        the compiler's fingerprint (compiler_check content) of
//                                      host_op_compiler, hashed in full: the first run on a cache
//   BM_CompilerFingerprint/remembered  the same remembered in the cache's `compilers` file (a stat
//                                      and a read of the memo): every later run
//
// Run folders are removed between iterations, outside the timing, except BM_SkcCompile_Hit's (see
// skc_compile_data).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <filesystem>
#include <string>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <skc/compiler.hpp>
#include <skc/op_info_io.hpp>

#include "bench_support.hpp"

namespace {

namespace fs = std::filesystem;
using skc_bench::Fn;
using skc_bench::options_for;
using skc_bench::placeholder_compiler;
using skc_bench::Scratch;
using skc_bench::settings_for;

/// The placeholder compiler's package is no run package: nothing installs it, so nothing checks it.
using PlaceholderCompiler =
    skc::StaticKernelCompiler<skc::FunctionInvoker<Fn>, skc::FilesystemStorage, skc::FileLock, skc::NoInstall>;

std::vector<skc::OpRecord> distinct_ops(std::size_t n) { return skc_bench::distinct_ops(n, SKC_BENCH_OP_INFO_DIR); }

void BM_Hit_Orchestration(benchmark::State& state) {
    const std::vector<skc::OpRecord> ops = distinct_ops(static_cast<std::size_t>(state.range(0)));
    Scratch s;
    PlaceholderCompiler compiler(skc::FunctionInvoker<Fn>(placeholder_compiler()), options_for(s.dir),
                                 settings_for({}));
    skc::process_compiled().clear();
    fs::remove_all(compiler.compile(ops).run_dir);  // the miss that fills the cache
    std::map<std::string, double> stage_ms;
    for (auto _ : state) {
        state.PauseTiming();
        skc::process_compiled().clear();  // as a new process: nothing compiled yet
        std::optional<skc::OpRecorder<>> recorder(std::in_place);
        for (const skc::OpRecord& r : ops) recorder->record(r);
        state.ResumeTiming();
        const skc::CompileReport r = compiler.compile(*recorder);  // from the end of recording
        state.PauseTiming();
        if (r.outcome != skc::CompileOutcome::hit) state.SkipWithError("expected a cache hit");
        for (const auto& [name, t] : r.stages) stage_ms[name] += static_cast<double>(t.count()) / 1e6;
        compiler.flush();  // the op info folders, written meanwhile in the background
        recorder.reset();
        fs::remove_all(r.run_dir);
        state.ResumeTiming();
    }
    for (const auto& [name, ms] : stage_ms)
        state.counters[name + "_ms"] = benchmark::Counter(ms / static_cast<double>(state.iterations()));
    state.SetItemsProcessed(state.iterations() * state.range(0));
}
// Fixed iteration counts: the untimed part of each iteration (recording, writing the folders,
// removing them) is far longer than the timed one, and the library would otherwise repeat it
// until the timed part alone adds up to its minimum time.
BENCHMARK(BM_Hit_Orchestration)->Arg(10)->Iterations(200)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Hit_Orchestration)->Arg(1000)->Iterations(30)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Hit_Orchestration)->Arg(10000)->Iterations(5)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Floor_WriteOpInfo(benchmark::State& state) {
    const std::vector<skc::OpRecord> ops = distinct_ops(static_cast<std::size_t>(state.range(0)));
    Scratch s;
    for (auto _ : state) {
        const fs::path dir = s.dir / "ops";
        fs::create_directories(dir);
        for (const skc::OpRecord& r : ops) skc::write_op_info(dir, r, skc::WriteOptions{false, false});
        state.PauseTiming();
        fs::remove_all(dir);
        state.ResumeTiming();
    }
    state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Floor_WriteOpInfo)->Arg(10)->Iterations(200)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Floor_WriteOpInfo)->Arg(1000)->Iterations(5)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Floor_WriteOpInfo)->Arg(10000)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

/// A folder of n op info files, as `skc compile --ops` gets it.
fs::path op_info_folder(const Scratch& s, std::size_t n) {
    const fs::path dir = s.dir / ("ops-" + std::to_string(n));
    if (!fs::exists(dir)) {
        fs::create_directories(dir);
        for (const skc::OpRecord& r : distinct_ops(n)) skc::write_op_info(dir, r, skc::WriteOptions{false, false});
    }
    return dir;
}

/// The folder of `n` op info files and a base whose cache holds their package, shared by the
/// repetitions of BM_SkcCompile_Hit and BM_Floor_ParseOpInfo and removed at exit, with every run
/// folder they made: on ext4 without a journal, creating a file scans the inodes freed in the last
/// minutes (the kernel's recently_deleted()), so removing the files of one iteration or repetition
/// would slow the next one's creations by as much as the benchmark measures.
struct SkcCompileData {
    Scratch s;
    fs::path dir;
};
const SkcCompileData& skc_compile_data(std::size_t n) {
    static std::map<std::size_t, SkcCompileData> data;
    auto [it, added] = data.try_emplace(n);
    if (added) {
        it->second.dir = op_info_folder(it->second.s, n);
        PlaceholderCompiler warm(skc::FunctionInvoker<Fn>(placeholder_compiler()), options_for(it->second.s.dir),
                                 settings_for({}));
        std::vector<skc::OpRecord> ops;
        for (skc::LoadedOp& op : skc::read_op_info_dir(it->second.dir).ops) ops.push_back(std::move(op.record));
        skc::process_compiled().clear();
        (void)warm.compile(std::move(ops));  // the miss that fills the cache
    }
    return it->second;
}

/// What `skc compile --ops DIR` does on a hit, in process: read and parse the folder, then
/// compile(); `written` adds the wait for the op info folders (the compiler's destruction at exit).
void BM_SkcCompile_Hit(benchmark::State& state, bool written) {
    const SkcCompileData& d = skc_compile_data(static_cast<std::size_t>(state.range(0)));
    using Compiler = PlaceholderCompiler;
    for (auto _ : state) {
        state.PauseTiming();
        skc::process_compiled().clear();
        std::optional<Compiler> compiler(std::in_place, skc::FunctionInvoker<Fn>(placeholder_compiler()),
                                         options_for(d.s.dir), settings_for({}));
        state.ResumeTiming();
        std::vector<skc::OpRecord> ops;
        for (skc::LoadedOp& op : skc::read_op_info_dir(d.dir).ops) ops.push_back(std::move(op.record));
        const skc::CompileReport r = compiler->compile(std::move(ops));
        if (written) compiler->flush();
        state.PauseTiming();
        if (r.outcome != skc::CompileOutcome::hit) state.SkipWithError("expected a cache hit");
        compiler.reset();
        state.ResumeTiming();
    }
    state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK_CAPTURE(BM_SkcCompile_Hit, returned, false)
    ->Arg(1000)
    ->Iterations(10)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_SkcCompile_Hit, written, true)
    ->Arg(1000)
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// The floor of the two above: reading and parsing the folder once.
void BM_Floor_ParseOpInfo(benchmark::State& state) {
    const fs::path& dir = skc_compile_data(static_cast<std::size_t>(state.range(0))).dir;
    for (auto _ : state) benchmark::DoNotOptimize(skc::read_op_info_dir(dir));
    state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Floor_ParseOpInfo)->Arg(1000)->Unit(benchmark::kMillisecond)->UseRealTime();

/// Runs `argv` (output to /dev/null) and waits for it; its wall time in ms. Throws when it fails.
double run_process(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    ::posix_spawn_file_actions_init(&actions);
    ::posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    ::posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    const auto t0 = std::chrono::steady_clock::now();
    pid_t pid = 0;
    const int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
    ::posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw std::runtime_error("cannot start " + argv[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {}
    const auto t1 = std::chrono::steady_clock::now();
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error(argv[0] + " " + argv[1] + " failed");
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

/// The whole `skc compile` process on a hit beside `skc ops inspect` of the same folder. The
/// kernel compiler of the first run (the miss) is a script that packs an empty makeself archive.
void BM_SkcProcess_Hit(benchmark::State& state) {
    const SkcCompileData& d = skc_compile_data(static_cast<std::size_t>(state.range(0)));
    const fs::path base = d.s.dir / "process-base", compiler = d.s.dir / "pack-nothing.sh";
    fs::create_directories(base);
    {
        std::ofstream out(compiler);
        out << "#!/bin/sh\n"
               "while [ $# -gt 0 ]; do case \"$1\" in -o) out=\"$2\"; shift;; esac; shift; done\n"
               "d=$(mktemp -d) && echo 'exit 0' > \"$d/setup.sh\" && chmod +x \"$d/setup.sh\" &&\n"
               "makeself --quiet \"$d\" \"$out/static_kernel_bench.run\" bench ./setup.sh >/dev/null 2>&1\n"
               "rc=$?; rm -rf \"$d\"; exit $rc\n";
    }
    fs::permissions(compiler, fs::perms::owner_all);
    const std::vector<std::string> compile = {SKC_BENCH_SKC_TOOL,
                                              "compile",
                                              "--ops",
                                              d.dir.string(),
                                              "--compiler",
                                              compiler.string(),
                                              "--device",
                                              "bench-device",
                                              "--toolchain-version",
                                              "1",
                                              "--base",
                                              base.string(),
                                              "--compiler-check",
                                              "none"};
    const std::vector<std::string> inspect = {SKC_BENCH_SKC_TOOL, "ops", "inspect", d.dir.string()};
    try {
        (void)run_process(compile);  // the miss that fills the cache and the op info store
    } catch (const std::exception& e) {
        state.SkipWithError(e.what());
        return;
    }
    std::vector<double> ratios;
    double parse_ms = 0;
    for (auto _ : state) {
        double hit_ms = 0;
        try {
            hit_ms = run_process(compile);
            const double p = run_process(inspect);
            parse_ms += p;
            ratios.push_back(hit_ms / p);
        } catch (const std::exception& e) {
            state.SkipWithError(e.what());
            break;
        }
        state.SetIterationTime(hit_ms / 1e3);
    }
    if (ratios.empty()) return;
    std::sort(ratios.begin(), ratios.end());
    state.counters["vs_parse_process"] = ratios[ratios.size() / 2];
    state.counters["parse_process_ms"] = parse_ms / static_cast<double>(ratios.size());
}
BENCHMARK(BM_SkcProcess_Hit)->Arg(1000)->Iterations(15)->Unit(benchmark::kMillisecond)->UseManualTime();

void BM_EndToEnd(benchmark::State& state, bool hit) {
    std::vector<skc::OpRecord> ops;
    for (skc::LoadedOp& op : skc::read_op_info_dir(SKC_BENCH_OP_INFO_DIR).ops) ops.push_back(std::move(op.record));
    Scratch s;
    using Compiler = skc::StaticKernelCompiler<skc::ProcessInvoker>;
    auto run_once = [&](const fs::path& base) {
        fs::create_directories(base);
        Compiler c(skc::ProcessInvoker(SKC_BENCH_HOST_OP_COMPILER), options_for(base), settings_for(s.dir / "lib"));
        skc::process_compiled().clear();
        return c.compile(ops);  // the install ends with the compiler, as at the end of a process
    };
    if (hit) run_once(s.dir / "warm");
    int n = 0;
    for (auto _ : state) {
        const fs::path base = hit ? s.dir / "warm" : s.dir / ("cold" + std::to_string(n++));
        const skc::CompileReport r = run_once(base);
        state.PauseTiming();
        if (r.cache_hit() != hit) state.SkipWithError(hit ? "expected a cache hit" : "expected a compile");
        state.counters["compile_s"] = benchmark::Counter(static_cast<double>(r.stage("compile").count()) / 1e9);
        state.counters["install_ms"] = benchmark::Counter(static_cast<double>(r.stage("install").count()) / 1e6);
        fs::remove_all(r.run_dir);
        if (!hit) fs::remove_all(base);
        state.ResumeTiming();
    }
}
BENCHMARK_CAPTURE(BM_EndToEnd, compile, false)->Iterations(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_EndToEnd, hit, true)->Iterations(20)->Unit(benchmark::kMillisecond)->UseRealTime();

/// What the set of BM_Cover is cached as before its timed compiles.
enum class Cached { nothing, first_32, eight_parts, whole };

/// 48 ops (MatMulV2 [m, 64] x [64, 192], m = 1 to 48) through the whole flow with the real
/// host_op_compiler, installed, after `cached` was compiled into the base (outside the timing).
void BM_Cover(benchmark::State& state, Cached cached) {
    const std::vector<skc::OpRecord> ops = distinct_ops(48);
    Scratch s;
    using Compiler = skc::StaticKernelCompiler<skc::ProcessInvoker>;
    auto run_once = [&](const fs::path& base, std::vector<skc::OpRecord> set) {
        fs::create_directories(base);
        Compiler c(skc::ProcessInvoker(SKC_BENCH_HOST_OP_COMPILER), options_for(base), settings_for(s.dir / "lib"));
        skc::process_compiled().clear();
        return c.compile(std::move(set));
    };
    auto slice = [&](std::size_t first, std::size_t last) {
        return std::vector<skc::OpRecord>(ops.begin() + static_cast<std::ptrdiff_t>(first),
                                          ops.begin() + static_cast<std::ptrdiff_t>(last));
    };
    auto prepare = [&](const fs::path& base) {
        if (cached == Cached::first_32) run_once(base, slice(0, 32));
        if (cached == Cached::whole) run_once(base, ops);
        if (cached == Cached::eight_parts) {
            for (std::size_t i = 0; i < 48; i += 6) run_once(base, slice(i, i + 6));
            run_once(base, ops);  // the first cover of the 48 finds the parts and writes their composite
        }
    };
    // A compile changes the base: each iteration of those that compile has a fresh one.
    const bool compiles = cached == Cached::nothing || cached == Cached::first_32;
    if (!compiles) prepare(s.dir / "warm");
    int n = 0;
    double compile_s = 0, cache_ms = 0, install_ms = 0;  // sums: the counters are their means
    for (auto _ : state) {
        state.PauseTiming();
        const fs::path base = compiles ? s.dir / ("cold" + std::to_string(n++)) : s.dir / "warm";
        if (compiles) prepare(base);
        state.ResumeTiming();
        const skc::CompileReport r = run_once(base, ops);
        state.PauseTiming();
        const std::size_t want_compiled = cached == Cached::nothing ? 48 : cached == Cached::first_32 ? 16 : 0;
        const std::size_t want_packages = cached == Cached::eight_parts ? 8 : cached == Cached::whole ? 1 : 0;
        if (r.ops_compiled != want_compiled || r.ops_reused != 48 - want_compiled ||
            (want_packages != 0 && r.cached_packages != want_packages))
            state.SkipWithError(("unexpected: " + r.work()).c_str());
        compile_s += static_cast<double>(r.stage("compile").count()) / 1e9;
        cache_ms += static_cast<double>(r.stage("cache").count()) / 1e6;
        install_ms += static_cast<double>(r.stage("install").count()) / 1e6;
        fs::remove_all(r.run_dir);
        if (compiles) fs::remove_all(base);
        state.ResumeTiming();
    }
    state.counters["compile_s"] = benchmark::Counter(compile_s, benchmark::Counter::kAvgIterations);
    state.counters["cache_ms"] = benchmark::Counter(cache_ms, benchmark::Counter::kAvgIterations);
    state.counters["install_ms"] = benchmark::Counter(install_ms, benchmark::Counter::kAvgIterations);
}
BENCHMARK_CAPTURE(BM_Cover, whole, Cached::nothing)->Iterations(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Cover, delta_16_of_48, Cached::first_32)
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Cover, hit_one_package, Cached::whole)
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Cover, covered_by_8_packages, Cached::eight_parts)
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_CompilerFingerprint(benchmark::State& state, bool remembered) {
    Scratch s;
    const fs::path memo = remembered ? s.dir : fs::path();
    if (remembered) (void)skc::compiler_fingerprint(SKC_BENCH_HOST_OP_COMPILER, {}, memo);
    for (auto _ : state) benchmark::DoNotOptimize(skc::compiler_fingerprint(SKC_BENCH_HOST_OP_COMPILER, {}, memo));
    state.counters["bytes"] = benchmark::Counter(static_cast<double>(fs::file_size(SKC_BENCH_HOST_OP_COMPILER)));
}
BENCHMARK_CAPTURE(BM_CompilerFingerprint, hash, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_CompilerFingerprint, remembered, true)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
