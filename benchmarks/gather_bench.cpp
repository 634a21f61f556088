// benchmarks/gather_bench.cpp: what many ranks on a node cost and save with LocalFsGather.
//
// Every case forks its ranks as real processes sharing one base directory. Each rank builds its
// StaticKernelCompiler, reports ready and blocks on a pipe; the parent releases all of them at
// once (closes the pipe) and a round lasts from the release until the last rank's compile()
// returns (steady clock, which is system-wide). The ranks report their CompileReport stages, their
// own CPU time inside compile() and their run folder through a shared mapping; the parent removes
// the run folders after the round, outside the timing.
//
//   BM_Hit_SameOps/<n>      n ranks holding the SAME 1,000 distinct MatMulV2 ops (every rank runs the
//                           same model: the data-parallel case), cache warm, no op library (no
//                           install). Each iteration runs three rounds, in alternating order:
//                             single       one SingleRank process with the 1,000 ops;
//                             independent  n SingleRank processes at once, as without the gather
//                                          (the same work per rank, no exchange, no barrier);
//                             gather       n LocalFsGather ranks: one gather, one key and one
//                                          lookup for the node, two barriers.
//                           The benchmark's time is the gather round's. Counters (means over the
//                           iterations): single_ms and independent_ms, the baselines' round times;
//                           vs_single and vs_independent, the ratios gather / baseline;
//                           leader_gather_ms, follower_gather_ms (mean) and follower_gather_max_ms,
//                           the `gather` stage of CompileReport, which includes waiting for the
//                           slowest rank's recording; tail_ms (ind_tail_ms for the independent
//                           round), from the moment the last rank had its selection to the end of
//                           the round: what the gather adds to the critical path; record_ms,
//                           select_ms, lookup_ms (key + cache, on the leader) and their ind_
//                           counterparts; cpu_ms and independent_cpu_ms, the ranks' own CPU time
//                           inside compile(), and extra_cpu_per_rank_ms, their difference per rank;
//                           With one rank, LocalFsGather's work has no `gather` stage of its own:
//                           it is counted in `key` (compare lookup_ms with ind_lookup_ms).
//   BM_Hit_DistinctOps/<n>  the same with n ranks holding DIFFERENT ops, 1,000 each (the leader
//                           gathers and looks up the union of n * 1,000).
//   BM_Miss_Node/<n>        n ranks with the example ops (examples/op_info, 12 selected) in a fresh
//                           base each round, compiled with the real host_op_compiler (-j 2):
//                             gather   LocalFsGather, cache on: the leader compiles once for the node;
//                             each     SingleRank, cache off: every rank compiles (the original
//                                      without sharing);
//                             flight   SingleRank, cache on, one base: the cache's single flight
//                                      (one compiles, the others wait for its entry).
//                           CPU time is getrusage(RUSAGE_CHILDREN) in the parent across the round:
//                           the ranks and every compiler process they reaped. The benchmark's time
//                           is the gather round's wall time.
//
// Ranks die with the parent (PR_SET_PDEATHSIG); a rank that fails reports its error and the case
// is skipped with it. After every round the run folders are removed and the file system synced,
// outside the timing.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <type_traits>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <skc/compiler.hpp>
#include <skc/op_info_io.hpp>
#include <skc/policy/local_fs_gather.hpp>

#include "bench_support.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using skc_bench::Fn;
using Placeholder = skc::FunctionInvoker<Fn>;

constexpr std::size_t ops_per_rank = 1000;
constexpr std::size_t max_ranks = 8;
constexpr std::chrono::seconds gather_timeout{600};

using skc_bench::options_for;
using skc_bench::placeholder_compiler;
using skc_bench::Scratch;
using skc_bench::settings_for;

std::vector<skc::OpRecord> distinct_ops(std::size_t n) { return skc_bench::distinct_ops(n, SKC_BENCH_OP_INFO_DIR); }

std::int64_t ns_of(std::chrono::nanoseconds d) { return static_cast<std::int64_t>(d.count()); }

std::int64_t cpu_now_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

double children_cpu_s() {
    rusage u{};
    ::getrusage(RUSAGE_CHILDREN, &u);
    auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
    return s(u.ru_utime) + s(u.ru_stime);
}

// ---- rounds ---------------------------------------------------------------------------------------------

/// What a rank tells the parent (in a shared mapping).
struct RankSlot {
    std::int64_t end_ns = 0;  // steady clock when compile() returned
    std::int64_t cpu_ns = 0;  // the rank's own CPU time inside compile()
    std::int64_t layout_ns = 0;
    std::int64_t record_ns = 0;
    std::int64_t select_ns = 0;
    std::int64_t gather_ns = 0;
    std::int64_t key_ns = 0;
    std::int64_t cache_ns = 0;
    std::int64_t compile_ns = 0;  // 0 unless this rank ran the compiler
    std::int64_t total_ns = 0;
    int outcome = -1;  // CompileOutcome
    int ok = 0;
    char run_dir[512] = {};
    char error[512] = {};
};

/// A rank's side of the start line: ready, wait for the release; then report the compile.
class Gate {
public:
    Gate(int ready_fd, int release_fd, RankSlot& slot) : ready_fd_(ready_fd), release_fd_(release_fd), slot_(slot) {}

    /// Tells the parent this rank is ready and blocks until every rank is released.
    void start() {
        const char c = 'r';
        if (::write(ready_fd_, &c, 1) != 1) throw std::runtime_error("cannot report ready");
        ::close(ready_fd_);
        char buf = 0;
        ssize_t n = 0;
        while ((n = ::read(release_fd_, &buf, 1)) < 0 && errno == EINTR) {}
        ::close(release_fd_);
        cpu0_ = cpu_now_ns();
    }

    void finish(const skc::CompileReport& r) {
        slot_.end_ns = ns_of(Clock::now().time_since_epoch());
        slot_.cpu_ns = cpu_now_ns() - cpu0_;
        slot_.layout_ns = ns_of(r.stage("layout"));
        slot_.record_ns = ns_of(r.stage("record"));
        slot_.select_ns = ns_of(r.stage("select"));
        slot_.gather_ns = ns_of(r.stage("gather"));
        slot_.key_ns = ns_of(r.stage("key"));
        slot_.cache_ns = ns_of(r.stage("cache"));
        slot_.compile_ns = ns_of(r.stage("compile"));
        slot_.total_ns = ns_of(r.total());
        slot_.outcome = static_cast<int>(r.outcome);
        const std::string d = r.run_dir.string();
        std::snprintf(slot_.run_dir, sizeof slot_.run_dir, "%s", d.c_str());
    }

private:
    int ready_fd_;
    int release_fd_;
    RankSlot& slot_;
    std::int64_t cpu0_ = 0;
};

using RankBody = std::function<void(std::size_t rank, Gate&)>;

struct RoundResult {
    double wall_ms = 0;         // release -> the last rank's compile() returned
    double children_cpu_s = 0;  // RUSAGE_CHILDREN across the round (ranks and what they reaped)
    std::vector<RankSlot> ranks;
    std::string error;  // empty when every rank succeeded

    [[nodiscard]] std::size_t count(skc::CompileOutcome o) const {
        return static_cast<std::size_t>(std::count_if(
            ranks.begin(), ranks.end(), [&](const RankSlot& s) { return s.outcome == static_cast<int>(o); }));
    }
    /// Mean of one stage over the ranks, ms.
    [[nodiscard]] double mean(std::int64_t RankSlot::*stage) const {
        double t = 0;
        for (const RankSlot& s : ranks) t += static_cast<double>(s.*stage) / 1e6;
        return ranks.empty() ? 0 : t / static_cast<double>(ranks.size());
    }
    /// From the moment the last rank had its selection to the end of the round, ms: the critical
    /// path of whatever follows the selection (the gather, the lookup, the barriers), without the
    /// ranks' waits for each other's recording.
    [[nodiscard]] double tail_ms() const {
        std::int64_t selected = 0, end = 0;
        for (const RankSlot& s : ranks) {
            selected = std::max(selected, s.end_ns - (s.total_ns - s.layout_ns - s.record_ns - s.select_ns));
            end = std::max(end, s.end_ns);
        }
        return static_cast<double>(end - selected) / 1e6;
    }
    /// Sum of the ranks' own CPU time inside compile(), ms.
    [[nodiscard]] double rank_cpu_ms() const {
        double t = 0;
        for (const RankSlot& s : ranks) t += static_cast<double>(s.cpu_ns) / 1e6;
        return t;
    }
};

/// Forks n ranks running `body`, releases them together and waits for all of them.
RoundResult run_round(std::size_t n, const RankBody& body) {
    RoundResult out;
    const std::size_t bytes = sizeof(RankSlot) * max_ranks;
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error(std::string("mmap failed: ") + std::strerror(errno));
    auto* slots = static_cast<RankSlot*>(p);
    for (std::size_t k = 0; k < max_ranks; ++k) new (slots + k) RankSlot;
    // O_CLOEXEC: the compilers the ranks spawn must not hold the release pipe open.
    int ready[2];
    int release[2];
    if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(release, O_CLOEXEC) != 0)
        throw std::runtime_error(std::string("pipe failed: ") + std::strerror(errno));

    const double cpu0 = children_cpu_s();
    std::fflush(nullptr);
    const pid_t parent = ::getpid();
    std::vector<pid_t> pids;
    for (std::size_t k = 0; k < n; ++k) {
        const pid_t pid = ::fork();
        if (pid < 0) {
            out.error = std::string("fork failed: ") + std::strerror(errno);
            break;
        }
        if (pid == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (::getppid() != parent) ::_exit(3);
            ::close(ready[0]);
            ::close(release[1]);
            RankSlot& slot = slots[k];
            try {
                Gate gate(ready[1], release[0], slot);
                body(k, gate);
                slot.ok = 1;
            } catch (const std::exception& e) {
                std::snprintf(slot.error, sizeof slot.error, "rank %zu: %s", k, e.what());
            }
            ::_exit(slot.ok ? 0 : 1);
        }
        pids.push_back(pid);
    }
    ::close(ready[1]);
    ::close(release[0]);
    // Every rank ready (or gone: EOF once all have exited or reported).
    std::size_t got = 0;
    char buf[max_ranks];
    while (got < pids.size()) {
        const ssize_t r = ::read(ready[0], buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += static_cast<std::size_t>(r);
    }
    ::close(ready[0]);
    const Clock::time_point t0 = Clock::now();
    ::close(release[1]);  // the release: every rank's read() returns at once
    for (const pid_t pid : pids) {
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    }
    out.children_cpu_s = children_cpu_s() - cpu0;

    std::int64_t last = ns_of(t0.time_since_epoch());
    for (std::size_t k = 0; k < pids.size(); ++k) {
        out.ranks.push_back(slots[k]);
        if (!slots[k].ok && out.error.empty())
            out.error = slots[k].error[0] ? slots[k].error : "rank " + std::to_string(k) + " died";
        last = std::max(last, slots[k].end_ns);
    }
    if (out.error.empty() && got < n) out.error = "not every rank got ready";
    out.wall_ms = static_cast<double>(last - ns_of(t0.time_since_epoch())) / 1e6;
    ::munmap(p, bytes);
    return out;
}

/// Removes the ranks' run folders (outside the timing) and writes back what the round left dirty,
/// so that the next round does not share the disk with this one's write-back.
void remove_run_dirs(const RoundResult& r) {
    for (const RankSlot& s : r.ranks)
        if (s.run_dir[0]) {
            std::error_code ec;
            fs::remove_all(s.run_dir, ec);
        }
    ::sync();
}

/// The placeholder compiler's package is no run package: nothing installs it (the hit cases have no
/// op library), so nothing checks it; the real compiler's is installed.
template <class Invoker>
using InstallFor =
    std::conditional_t<std::is_same_v<Invoker, skc::ProcessInvoker>, skc::RunPackageInstaller, skc::NoInstall>;
template <class Invoker>
using SingleCompiler = skc::StaticKernelCompiler<Invoker, skc::FilesystemStorage, skc::FileLock, InstallFor<Invoker>>;
template <class Invoker>
using GatherCompiler = skc::StaticKernelCompiler<Invoker, skc::FilesystemStorage, skc::FileLock, InstallFor<Invoker>,
                                                 skc::NoReselect, skc::LocalFsGather>;

/// One rank: builds its compiler (a new process has compiled nothing), waits for the release,
/// compiles `ops` once.
template <class Compiler, class Invoker, class... Gather>
void rank_compile(Invoker invoker, const skc::Options& options, const std::vector<skc::OpRecord>& ops, Gate& gate,
                  Gather... gather) {
    skc::process_compiled().clear();
    Compiler c(std::move(invoker), options, settings_for(), InstallFor<Invoker>(), skc::NoReselect(),
               std::move(gather)...);
    gate.start();
    const skc::CompileReport r = c.compile(ops);
    gate.finish(r);
}

skc::LocalFsGather local_gather(std::size_t rank, std::size_t n, const std::string& run_id) {
    return skc::LocalFsGather(skc::LocalRanks{rank, n, run_id}, gather_timeout);
}

double ms(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }

// ---- cache hits: the cost of the gather ---------------------------------------------------------------

void BM_Hit(benchmark::State& state, bool same_ops) {
    const auto n = static_cast<std::size_t>(state.range(0));
    const std::vector<skc::OpRecord> all = distinct_ops(same_ops ? ops_per_rank : ops_per_rank * n);
    auto ops_of = [&](std::size_t rank) {
        if (same_ops) return all;
        return std::vector<skc::OpRecord>(all.begin() + static_cast<std::ptrdiff_t>(rank * ops_per_rank),
                                          all.begin() + static_cast<std::ptrdiff_t>((rank + 1) * ops_per_rank));
    };
    Scratch s("skc-gather-bench");
    const skc::Options opts = options_for(s.dir, true);
    int round_no = 0;  // a run id per round: each round's ranks meet in a folder of their own

    const RankBody single = [&](std::size_t, Gate& g) {
        rank_compile<SingleCompiler<Placeholder>>(Placeholder(placeholder_compiler()), opts, ops_of(0), g);
    };
    const RankBody independent = [&](std::size_t rank, Gate& g) {
        rank_compile<SingleCompiler<Placeholder>>(Placeholder(placeholder_compiler()), opts, ops_of(rank), g);
    };
    auto gather_body = [&](const std::string& run_id) -> RankBody {
        return [&, run_id](std::size_t rank, Gate& g) {
            rank_compile<GatherCompiler<Placeholder>>(Placeholder(placeholder_compiler()), opts, ops_of(rank), g,
                                                      local_gather(rank, n, run_id));
        };
    };
    enum Kind { k_single, k_independent, k_gather };
    auto round = [&](Kind kind) {
        RoundResult r = kind == k_single        ? run_round(1, single)
                        : kind == k_independent ? run_round(n, independent)
                                                : run_round(n, gather_body("bench-" + std::to_string(round_no++)));
        remove_run_dirs(r);
        return r;
    };

    // Warm-up, untimed: fills the cache with every key used below and the page cache.
    for (Kind k : {k_single, k_independent, k_gather}) {
        const RoundResult r = round(k);
        if (!r.error.empty()) {
            state.SkipWithError(r.error.c_str());
            return;
        }
    }

    // Sums over the iterations; every stage is a mean over the round's ranks.
    double single_ms = 0, independent_ms = 0, gather_ms = 0;
    double leader_gather = 0, follower_gather = 0, follower_gather_max = 0;
    double record = 0, select = 0, lookup = 0, ind_record = 0, ind_select = 0, ind_lookup = 0;
    double gather_cpu = 0, independent_cpu = 0, tail = 0, ind_tail = 0;
    int iter = 0;
    for (auto _ : state) {
        // Alternating order, so that a change of load meets every kind alike.
        const std::vector<Kind> order = iter++ % 2 == 0 ? std::vector<Kind>{k_single, k_independent, k_gather}
                                                        : std::vector<Kind>{k_gather, k_independent, k_single};
        RoundResult rs, ri, rg;
        for (Kind k : order) {
            if (k == k_independent && n == 1) continue;  // the same as single
            RoundResult r = round(k);
            if (!r.error.empty()) {
                state.SkipWithError(r.error.c_str());
                return;
            }
            if (r.count(skc::CompileOutcome::hit) != r.ranks.size()) {
                state.SkipWithError("expected a cache hit on every rank");
                return;
            }
            (k == k_single ? rs : k == k_independent ? ri : rg) = std::move(r);
        }
        if (n == 1) ri = rs;
        state.SetIterationTime(rg.wall_ms / 1e3);
        single_ms += rs.wall_ms;
        independent_ms += ri.wall_ms;
        gather_ms += rg.wall_ms;
        leader_gather += ms(rg.ranks[0].gather_ns);
        double fmax = 0;
        for (std::size_t k = 1; k < rg.ranks.size(); ++k) fmax = std::max(fmax, ms(rg.ranks[k].gather_ns));
        if (n > 1)
            follower_gather += (rg.mean(&RankSlot::gather_ns) * static_cast<double>(n) - ms(rg.ranks[0].gather_ns)) /
                               static_cast<double>(n - 1);
        follower_gather_max += fmax;
        record += rg.mean(&RankSlot::record_ns);
        select += rg.mean(&RankSlot::select_ns);
        lookup += ms(rg.ranks[0].key_ns + rg.ranks[0].cache_ns);  // only the leader looks up
        ind_record += ri.mean(&RankSlot::record_ns);
        ind_select += ri.mean(&RankSlot::select_ns);
        ind_lookup += ri.mean(&RankSlot::key_ns) + ri.mean(&RankSlot::cache_ns);
        gather_cpu += rg.rank_cpu_ms();
        independent_cpu += ri.rank_cpu_ms();
        tail += rg.tail_ms();
        ind_tail += ri.tail_ms();
    }
    const double it = static_cast<double>(state.iterations());
    auto avg = [&](double v) { return benchmark::Counter(v / it); };
    state.counters["single_ms"] = avg(single_ms);
    state.counters["independent_ms"] = avg(independent_ms);
    state.counters["vs_single"] = benchmark::Counter(gather_ms / single_ms);
    state.counters["vs_independent"] = benchmark::Counter(gather_ms / independent_ms);
    state.counters["leader_gather_ms"] = avg(leader_gather);
    state.counters["follower_gather_ms"] = avg(follower_gather);
    state.counters["follower_gather_max_ms"] = avg(follower_gather_max);
    state.counters["record_ms"] = avg(record);
    state.counters["select_ms"] = avg(select);
    state.counters["lookup_ms"] = avg(lookup);
    state.counters["ind_record_ms"] = avg(ind_record);
    state.counters["ind_select_ms"] = avg(ind_select);
    state.counters["ind_lookup_ms"] = avg(ind_lookup);
    state.counters["cpu_ms"] = avg(gather_cpu);                   // all ranks, inside compile()
    state.counters["independent_cpu_ms"] = avg(independent_cpu);  // the same for the independent round
    state.counters["tail_ms"] = avg(tail);
    state.counters["ind_tail_ms"] = avg(ind_tail);
    state.counters["extra_cpu_per_rank_ms"] = avg((gather_cpu - independent_cpu) / static_cast<double>(n));
}

void hit_args(benchmark::internal::Benchmark* b) { b->Unit(benchmark::kMillisecond)->UseManualTime(); }

BENCHMARK_CAPTURE(BM_Hit, SameOps, true)->Arg(1)->Arg(2)->Arg(4)->Iterations(3)->Apply(hit_args);
BENCHMARK_CAPTURE(BM_Hit, SameOps, true)->Arg(8)->Iterations(2)->Apply(hit_args);
BENCHMARK_CAPTURE(BM_Hit, DistinctOps, false)->Arg(2)->Arg(4)->Iterations(3)->Apply(hit_args);
BENCHMARK_CAPTURE(BM_Hit, DistinctOps, false)->Arg(8)->Iterations(2)->Apply(hit_args);

// ---- misses: one compile for the node against one per rank -------------------------------------------

#ifdef SKC_BENCH_HOST_OP_COMPILER
void BM_Miss_Node(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    std::vector<skc::OpRecord> ops;
    for (skc::LoadedOp& op : skc::read_op_info_dir(SKC_BENCH_OP_INFO_DIR).ops) ops.push_back(std::move(op.record));
    Scratch s("skc-gather-bench");
    int round_no = 0;
    enum Kind { k_gather, k_each, k_flight };
    // A fresh base per round: every round is a first run (a miss).
    auto round = [&](Kind kind) {
        const fs::path base = s.dir / ("base" + std::to_string(round_no++));
        fs::create_directories(base);
        const skc::Options opts = options_for(base, kind != k_each);
        const std::string run_id = "bench-" + std::to_string(round_no);
        const RankBody body = [&](std::size_t rank, Gate& g) {
            skc::ProcessInvoker inv(SKC_BENCH_HOST_OP_COMPILER);
            if (kind == k_gather)
                rank_compile<GatherCompiler<skc::ProcessInvoker>>(std::move(inv), opts, ops, g,
                                                                  local_gather(rank, n, run_id));
            else rank_compile<SingleCompiler<skc::ProcessInvoker>>(std::move(inv), opts, ops, g);
        };
        RoundResult r = run_round(n, body);
        std::error_code ec;
        fs::remove_all(base, ec);
        ::sync();
        return r;
    };
    // Ranks that ran the compiler (a follower reports the leader's outcome, "compiled", too).
    auto compiles = [](const RoundResult& r) {
        return std::count_if(r.ranks.begin(), r.ranks.end(), [](const RankSlot& s) { return s.compile_ns > 0; });
    };

    double gather_wall = 0, each_wall = 0, flight_wall = 0;
    double gather_cpu = 0, each_cpu = 0, flight_cpu = 0;
    double gather_compiles = 0, each_compiles = 0, flight_compiles = 0;
    int iter = 0;
    for (auto _ : state) {
        const std::vector<Kind> order = iter++ % 2 == 0 ? std::vector<Kind>{k_gather, k_each, k_flight}
                                                        : std::vector<Kind>{k_flight, k_each, k_gather};
        for (Kind k : order) {
            const RoundResult r = round(k);
            if (!r.error.empty()) {
                state.SkipWithError(r.error.c_str());
                return;
            }
            const auto c = static_cast<double>(compiles(r));
            if (k == k_gather) {
                state.SetIterationTime(r.wall_ms / 1e3);
                gather_wall += r.wall_ms;
                gather_cpu += r.children_cpu_s;
                gather_compiles += c;
            } else if (k == k_each) {
                each_wall += r.wall_ms;
                each_cpu += r.children_cpu_s;
                each_compiles += c;
            } else {
                flight_wall += r.wall_ms;
                flight_cpu += r.children_cpu_s;
                flight_compiles += c;
            }
        }
    }
    const double it = static_cast<double>(state.iterations());
    auto avg = [&](double v) { return benchmark::Counter(v / it); };
    state.counters["gather_cpu_s"] = avg(gather_cpu);
    state.counters["each_cpu_s"] = avg(each_cpu);
    state.counters["flight_cpu_s"] = avg(flight_cpu);
    state.counters["each_wall_ms"] = avg(each_wall);
    state.counters["flight_wall_ms"] = avg(flight_wall);
    state.counters["cpu_each_over_gather"] = benchmark::Counter(each_cpu / gather_cpu);
    state.counters["wall_each_over_gather"] = benchmark::Counter(each_wall / gather_wall);
    state.counters["wall_flight_over_gather"] = benchmark::Counter(flight_wall / gather_wall);
    state.counters["gather_compiles"] = avg(gather_compiles);
    state.counters["each_compiles"] = avg(each_compiles);
    state.counters["flight_compiles"] = avg(flight_compiles);
}
BENCHMARK(BM_Miss_Node)->Arg(2)->Arg(4)->Iterations(2)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(BM_Miss_Node)->Arg(8)->Iterations(1)->Unit(benchmark::kMillisecond)->UseManualTime();
#endif

}  // namespace

BENCHMARK_MAIN();
