// skc::MpiGather (skc/ext/mpi.hpp) with real MPI processes: run as `mpirun -np 4 test_mpi_gather`.
// The node_of hook splits the 4 ranks of one machine into 2 fake nodes, {0, 2} and {1, 3} (a node's
// ranks need not be contiguous). All ranks share one base directory (so one cache), each node has
// its own op library, and the kernel compiler is the real host_op_compiler behind a wrapper script
// that counts its runs (or fails, for the fault case). Scenarios, in order, on one MpiGather moved
// from compiler to compiler (so several rounds on the same communicators):
//   1. every rank selects different ops, both nodes gather the same union: one compile in the job,
//      one extraction per node, the same key and package everywhere, the union with a `_1` name, and
//      every rank's reselect runs after the install (the installed index lists the kernels);
//   2. the compiler fails: the leaders throw their own compile error, the followers peer_failed;
//   3. `share` (the reselect) throws on a follower of node 0 and on the leader of node 1: the rank
//      that failed throws its own error, its node's other rank peer_failed, nobody hangs;
//   4. a rank of node 1 never joins: its leader times out naming it; node 0 is unaffected;
//   5. (with hiredis) nodes that share only Redis: each node has its own base directory (its own
//      cache) and op library, and one real redis-server is the remote tier
//      (with_remote<RedisRemote>): one compile in the job, the other node downloads the same package,
//      twice (two keys, both nodes starting at once each time);
//   6. the GatherPolicy laws (tests/support/gather_laws.hpp) on every rank, on the object that ran
//      every round above: each rank checks its own laws, rank 0 each node's (lead once per node,
//      every rank gets the leader's value).
// Doctest is not used: every rank would run and report its own copy of every case. Each rank prints
// its failed checks; the exit status is 0 only when no rank failed any.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include <skc/compiler.hpp>
#include <skc/ext/mpi.hpp>
#include <skc/op_info_io.hpp>

#include "gather_laws.hpp"
#include "test_support.hpp"

#ifdef SKC_TEST_WITH_REDIS
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>

#include <skc/ext/redis.hpp>

#include "redis_server.hpp"
#endif

namespace {

namespace fs = std::filesystem;

int world_rank = -1;
int failures = 0;

void expect(bool ok, const std::string& what, int line) {
    if (ok) return;
    ++failures;
    std::fprintf(stderr, "[rank %d] line %d: check failed: %s\n", world_rank, line, what.c_str());
}
#define EXPECT(cond) expect(static_cast<bool>(cond), #cond, __LINE__)
#define EXPECT_MSG(cond, msg) expect(static_cast<bool>(cond), std::string(#cond) + ": " + (msg), __LINE__)

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// Every rank's `text`, on rank 0 (empty elsewhere).
std::vector<std::string> gather_to_root(const std::string& text) {
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int n = static_cast<int>(text.size());
    std::vector<int> sizes(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
    MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    int total = 0;
    for (int i = 0; i < size; ++i) {
        offsets[static_cast<std::size_t>(i)] = total;
        total += sizes[static_cast<std::size_t>(i)];
    }
    std::string all(static_cast<std::size_t>(world_rank == 0 ? total : 0), '\0');
    MPI_Gatherv(text.data(), n, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
    std::vector<std::string> out;
    if (world_rank == 0)
        for (int i = 0; i < size; ++i)
            out.push_back(all.substr(static_cast<std::size_t>(offsets[static_cast<std::size_t>(i)]),
                                     static_cast<std::size_t>(sizes[static_cast<std::size_t>(i)])));
    return out;
}

std::string broadcast_from_root(std::string text) {
    int n = static_cast<int>(text.size());
    MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
    text.resize(static_cast<std::size_t>(n));
    MPI_Bcast(text.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
    return text;
}

std::vector<skc::OpRecord> load_ops(const std::vector<std::string>& names) {
    std::vector<skc::OpRecord> out;
    for (const std::string& n : names) out.push_back(skc::read_op_info(skc_test::example_ops_dir() / n));
    return out;
}

skc::Digest digest_of(const std::string& name) { return skc::digest(load_ops({name})[0]); }

/// Records each reselect and what the installed index held at that moment; throws on request.
struct RecordingReselect {
    std::vector<std::string> packages;           // stems, one per call
    std::vector<std::set<std::string>> indexed;  // digests the global index gave to that stem
    bool fail = false;

    void reselect(const skc::ReselectContext& c) {
        packages.push_back(c.package);
        std::set<std::string> ds;
        const fs::path index =
            c.op_library / "static_kernel" / c.backend / "config" / c.device / "binary_info_config.json";
        if (fs::is_regular_file(index)) {
            const skc::Value v = skc::parse_json(skc::read_file(index, std::size_t{16} << 20));
            if (const skc::Value* ks = v.find("kernels"); ks && ks->is_object())
                for (const skc::Member& m : ks->as_object())
                    if (const skc::Value* p = m.value.find("package");
                        p && p->is_string() && p->as_string() == c.package)
                        ds.insert(m.key);
        }
        indexed.push_back(std::move(ds));
        if (fail) throw skc::Error(skc::Errc::io_error, "reselect failed on rank " + std::to_string(world_rank));
    }
};

using Compiler = skc::StaticKernelCompiler<skc::ProcessInvoker, skc::FilesystemStorage, skc::FileLock,
                                           skc::RunPackageInstaller, RecordingReselect, skc::MpiGather>;

struct Setup {
    fs::path root;        // shared by every rank
    fs::path count_file;  // one line per compiler run
    fs::path wrapper;     // counts, then runs host_op_compiler, or fails
};

Compiler make_compiler(const Setup& s, skc::MpiGather gather, bool compiler_fails, bool reselect_fails) {
    skc::Options o;
    o.static_kernel_compile = true;
    o.base_dir = (s.root / "base").string();
    o.jobs = 2;
    o.compile_timeout = std::chrono::seconds(120);
    skc::CompilerSettings st;
    st.toolchain_version = "1.0";
    st.device = "host-cpu";
    st.op_library = s.root / ("lib-node" + std::to_string(gather.node()));
    st.install_timeout = std::chrono::seconds(60);
    st.log = nullptr;
    RecordingReselect rs;
    rs.fail = reselect_fails;
    return Compiler(skc::ProcessInvoker(s.wrapper, {s.count_file.string(), compiler_fails ? "fail" : "ok"}), o, st,
                    skc::RunPackageInstaller(), std::move(rs), std::move(gather));
}

std::size_t lines_in(const fs::path& p) {
    const std::string t = skc_test::slurp(p);
    std::size_t n = 0;
    for (char c : t) n += c == '\n';
    return n;
}

void print_error(const char* scenario, const std::optional<skc::Error>& e) {
    if (e)
        std::printf("%s: rank %d: %s: %s\n", scenario, world_rank, std::string(skc::to_string(e->code())).c_str(),
                    e->what());
    else std::printf("%s: rank %d: no error\n", scenario, world_rank);
    std::fflush(stdout);
}

/// Runs `f`; returns the skc::Error it threw, or nullopt (another exception is a failed check).
template <class F>
std::optional<skc::Error> error_of(F&& f) {
    try {
        f();
    } catch (const skc::Error& e) {
        return e;
    } catch (const std::exception& e) {
        expect(false, std::string("an skc::Error, not: ") + e.what(), __LINE__);
        return skc::Error(skc::Errc::io_error, e.what());
    }
    return std::nullopt;
}

// ---- 1. one compile per key in the job, one install per node ------------------------------------

skc::MpiGather union_and_single_compile(const Setup& s, skc::MpiGather gather) {
    const int node = static_cast<int>(gather.node());
    const bool leader = gather.local_rank() == 0;
    // Ranks 0 and 2 (node 0), 1 and 3 (node 1). Both nodes' unions are {m0, m1, add}. The ops are
    // written with the same per-process counters, so two different MatMuls get the same file name
    // on each node: one of them must become `..._1.json`.
    const std::map<int, std::vector<std::string>> ops_of = {
        {0, {"MatMulV2_float_ND_32_64_0.json", "Add_float_ND_32_64_9.json"}},
        {2, {"MatMulV2_float_ND_32_64_1.json", "Add_float_ND_32_64_9.json"}},
        {1, {"MatMulV2_float_ND_32_64_1.json", "Add_float_ND_32_64_9.json"}},
        {3, {"MatMulV2_float_ND_32_64_0.json"}},
    };
    const std::set<std::string> union_digests = {digest_of("MatMulV2_float_ND_32_64_0.json").hex(),
                                                 digest_of("MatMulV2_float_ND_32_64_1.json").hex(),
                                                 digest_of("Add_float_ND_32_64_9.json").hex()};

    Compiler c = make_compiler(s, std::move(gather), false, false);
    EXPECT(c.gather().nodes() == 2);
    EXPECT(static_cast<int>(c.gather().node()) == world_rank % 2);
    EXPECT(c.gather().local_world_size() == 2);
    EXPECT(static_cast<int>(c.gather().local_rank()) == world_rank / 2);
    EXPECT((c.gather().node_ranks() == std::vector<int>{world_rank % 2, world_rank % 2 + 2}));

    const auto t0 = std::chrono::steady_clock::now();
    skc::CompileReport rep;
    if (auto e = error_of([&] { rep = c.compile(load_ops(ops_of.at(world_rank))); }))
        EXPECT_MSG(false, std::string("compile threw: ") + e->what());
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    EXPECT(rep.local_rank == c.gather().local_rank());
    EXPECT(rep.local_world_size == 2);
    EXPECT(rep.selected == ops_of.at(world_rank).size());
    EXPECT(rep.gathered == 3);
    EXPECT(rep.key.size() == 32);
    EXPECT(rep.installed == rep.key);
    EXPECT(rep.extracted == leader);  // the leader extracts, the follower only holds
    EXPECT(fs::is_regular_file(rep.package));
    EXPECT(rep.package.string().starts_with((s.root / "base").string()));  // the cache's copy

    // Reselect ran once, after the install: the global index already gave the union to the package.
    const RecordingReselect& rs = c.reselect_hook();
    EXPECT(rs.packages.size() == 1);
    if (rs.packages.size() == 1) {
        EXPECT(rs.packages[0] == rep.key);
        EXPECT_MSG(rs.indexed[0] == union_digests, "the index at reselect did not list the union under the package");
    }

    // The leader that compiled wrote the union: three files, distinct contents, one clash renamed
    // with `_1`. A leader whose lookup hit (it waited for the other node's compile) wrote none.
    const fs::path dir = rep.run_dir / (std::to_string(::getpid()) + "_opcompile_gathered");
    if (leader && rep.outcome != skc::CompileOutcome::compiled) EXPECT(!fs::exists(dir));
    if (leader && rep.outcome == skc::CompileOutcome::compiled) {
        std::set<std::string> digests;
        std::size_t files = 0, renamed = 0;
        for (const auto& e : fs::directory_iterator(dir)) {
            ++files;
            digests.insert(skc::digest(skc::read_op_info(e.path())).hex());
            renamed += e.path().filename().string().ends_with("_1.json");
        }
        EXPECT(files == 3);
        EXPECT(digests == union_digests);
        EXPECT(renamed == 1);
    }

    // Across the job: one key and package, one compile, one extraction per node.
    const std::vector<std::string> all = gather_to_root(skc::dump_json(
        skc::Value(skc::Object{{"node", skc::Value(node)}, {"report", rep.to_value()}, {"ms", skc::Value(ms)}}), -1));
    if (world_rank == 0) {
        std::set<std::string> keys, packages, outcomes;
        std::map<int, int> extracted_per_node;
        for (const std::string& t : all) {
            const skc::Value v = skc::parse_json(t);
            const skc::Value& r = *v.find("report");
            keys.insert(r.find("key")->as_string());
            packages.insert(r.find("package")->as_string());
            outcomes.insert(r.find("outcome")->as_string());
            extracted_per_node[static_cast<int>(v.find("node")->as_int())] += r.find("extracted")->as_bool() ? 1 : 0;
            std::printf("scenario 1: rank %d node %lld: %s in %.0f ms\n", static_cast<int>(&t - all.data()),
                        static_cast<long long>(v.find("node")->as_int()), r.find("outcome")->as_string().c_str(),
                        v.find("ms")->as_double());
        }
        EXPECT(keys.size() == 1);
        EXPECT(packages.size() == 1);
        EXPECT((extracted_per_node == std::map<int, int>{{0, 1}, {1, 1}}));
        // One node's leader compiled; the other's found it, or waited for it (single flight).
        EXPECT(outcomes.count("compiled") == 1);
        EXPECT(outcomes.size() == 2);
        EXPECT_MSG(lines_in(s.count_file) == 1, "compiler runs: " + std::to_string(lines_in(s.count_file)));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return std::move(c.gather());
}

// ---- 2. the leaders' compile fails ---------------------------------------------------------------

skc::MpiGather compile_fails(const Setup& s, skc::MpiGather gather) {
    const bool leader = gather.local_rank() == 0;
    Compiler c = make_compiler(s, std::move(gather), true, false);
    const std::vector<std::string> ops = world_rank % 2 == 0 ? std::vector<std::string>{"Gelu_float_ND_32_256_8.json"}
                                                             : std::vector<std::string>{"Mul_float_ND_2_16_16_10.json"};
    const std::optional<skc::Error> e = error_of([&] { c.compile(load_ops(ops)); });
    EXPECT(e.has_value());
    if (e && leader) {
        EXPECT_MSG(e->code() == skc::Errc::compile_failed, e->what());
    } else if (e) {
        EXPECT_MSG(e->code() == skc::Errc::peer_failed, e->what());
        EXPECT_MSG(contains(e->what(), "local rank 0 (the leader, rank " + std::to_string(world_rank % 2) + ") failed"),
                   e->what());
        EXPECT_MSG(contains(e->what(), "compile_failed"), e->what());
    }
    print_error("scenario 2", e);
    EXPECT(c.reselect_hook().packages.empty());
    MPI_Barrier(MPI_COMM_WORLD);
    return std::move(c.gather());
}

// ---- 3. a rank's share throws ----------------------------------------------------------------------

skc::MpiGather share_fails(const Setup& s, skc::MpiGather gather) {
    // Rank 2 is node 0's follower, rank 1 node 1's leader.
    const bool fails = world_rank == 2 || world_rank == 1;
    Compiler c = make_compiler(s, std::move(gather), false, fails);
    const std::vector<std::string> ops = world_rank < 2 ? std::vector<std::string>{"Transpose_float_ND_2_16_64_5.json"}
                                                        : std::vector<std::string>{"ConcatD_float_ND_2_16_64_12.json"};
    const auto t0 = std::chrono::steady_clock::now();
    const std::optional<skc::Error> e = error_of([&] { c.compile(load_ops(ops)); });
    const auto waited = std::chrono::steady_clock::now() - t0;
    EXPECT(e.has_value());
    if (e && fails) {
        EXPECT_MSG(e->code() == skc::Errc::io_error && contains(e->what(), "reselect failed on rank"), e->what());
    } else if (e && world_rank == 0) {
        EXPECT_MSG(e->code() == skc::Errc::peer_failed, e->what());
        EXPECT_MSG(contains(e->what(), "local rank 1 (rank 2) failed: reselect failed on rank 2"), e->what());
    } else if (e && world_rank == 3) {
        EXPECT_MSG(e->code() == skc::Errc::peer_failed, e->what());
        EXPECT_MSG(contains(e->what(), "local rank 0 (the leader, rank 1) failed: reselect failed on rank 1"),
                   e->what());
    }
    print_error("scenario 3", e);
    // Told at once, not after the gather timeout.
    EXPECT(waited < std::chrono::seconds(15));
    EXPECT(c.reselect_hook().packages.size() == 1);  // every rank got as far as its reselect
    MPI_Barrier(MPI_COMM_WORLD);
    return std::move(c.gather());
}

// ---- 4. a rank never arrives -----------------------------------------------------------------------

void rank_missing(const Setup& s) {
    // A fresh MpiGather with a short timeout: rank 3 constructs it but never compiles.
    skc::MpiGather gather(MPI_COMM_WORLD, std::chrono::milliseconds(1500), [](int r) { return r % 2; });
    if (world_rank == 3) {
        MPI_Barrier(MPI_COMM_WORLD);
        return;
    }
    const bool leader = gather.local_rank() == 0;
    Compiler c = make_compiler(s, std::move(gather), false, false);
    // An op every one of these ranks compiled in scenario 1: nothing is selected, no compiler runs.
    const std::vector<std::string> ops = {"Add_float_ND_32_64_9.json"};
    const std::optional<skc::Error> e = error_of([&] { c.compile(load_ops(ops)); });
    print_error("scenario 4", e);
    if (world_rank == 1) {
        EXPECT(e.has_value());
        if (e) {
            EXPECT_MSG(e->code() == skc::Errc::timeout, e->what());
            EXPECT_MSG(
                contains(e->what(), "local rank 1 (rank 3) of 2 on node 1 of 2 did not send its ops within 1.5 s"),
                e->what());
        }
    } else {
        EXPECT_MSG(!e.has_value(), e ? e->what() : "");
        (void)leader;
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

#ifdef SKC_TEST_WITH_REDIS
// ---- 5. nodes that share only Redis ------------------------------------------------------------------

using RedisCompiler = skc::StaticKernelCompiler<skc::ProcessInvoker, skc::with_reselect<RecordingReselect>,
                                                skc::with_gather<skc::MpiGather>, skc::with_remote<skc::RedisRemote>>;

/// Node `node`'s own folder: its base directory (so its own cache and run folders) and its op
/// library. Nothing of one node is below the other's, and the shared `base` of cases 1-4 is unused.
fs::path own_dir(const Setup& s, int node) { return s.root / "redis" / ("node" + std::to_string(node)); }

/// The op_compiler.log files below both nodes' base directories: one per kernel compiler run.
std::size_t compiler_logs(const Setup& s) {
    std::size_t n = 0;
    for (int node = 0; node < 2; ++node) {
        const fs::path base = own_dir(s, node) / "base";
        if (!fs::exists(base)) continue;
        for (const auto& e : fs::recursive_directory_iterator(base))
            n += e.is_regular_file() && e.path().filename() == "op_compiler.log";
    }
    return n;
}

/// The warnings and errors skc logged on this rank (from any thread).
struct WarningLog {
    std::mutex mu;
    std::vector<std::string> lines;
};

/// The lines of a RedisServer::command reply (an array's elements), as a set.
std::set<std::string> lines_of(const std::string& reply) {
    std::set<std::string> out;
    std::size_t at = 0;
    while (at < reply.size()) {
        const std::size_t eol = std::min(reply.find('\n', at), reply.size());
        out.insert(reply.substr(at, eol - at));
        at = eol + 1;
    }
    return out;
}

/// One round: after a barrier every rank compiles its ops at once; both nodes' unions are the same,
/// so the job has one key. `server` is the Redis server on rank 0 (nullptr elsewhere), `count_file`
/// has a line per compiler run of the whole case, `keys` (rank 0) the keys of the rounds before.
skc::MpiGather redis_round(const Setup& s, const fs::path& count_file, const std::string& url,
                           skc_test::RedisServer* server, std::size_t round,
                           const std::map<int, std::vector<std::string>>& ops_of, std::set<std::string>& keys,
                           skc::MpiGather gather) {
    const int node = static_cast<int>(gather.node());
    const bool leader = gather.local_rank() == 0;
    const fs::path own = own_dir(s, node);
    std::set<std::string> union_digests;
    for (const auto& [rank, names] : ops_of)
        for (const std::string& n : names) union_digests.insert(digest_of(n).hex());

    skc::Options o;
    o.static_kernel_compile = true;
    o.base_dir = (own / "base").string();
    o.jobs = 2;
    o.compile_timeout = std::chrono::seconds(120);
    o.remote_cache = url;
    skc::CompilerSettings st;
    st.toolchain_version = "1.0";
    st.device = "host-cpu";
    st.op_library = own / "lib";
    st.install_timeout = std::chrono::seconds(60);
    auto warnings = std::make_shared<WarningLog>();
    const skc::LogSink sink = [warnings](skc::LogLevel level, std::string_view line) {
        if (static_cast<int>(level) < static_cast<int>(skc::LogLevel::warning)) return;
        std::lock_guard lock(warnings->mu);
        warnings->lines.emplace_back(line);
    };
    st.log = sink;
    st.cache.log = sink;
    RedisCompiler c(skc::ProcessInvoker(s.wrapper, {count_file.string(), "ok"}), o, st, skc::RunPackageInstaller(),
                    RecordingReselect{}, std::move(gather));
    EXPECT(c.cache() != nullptr && c.cache()->remote() != nullptr);

    MPI_Barrier(MPI_COMM_WORLD);  // both nodes start at once
    const auto t0 = std::chrono::steady_clock::now();
    skc::CompileReport rep;
    const std::optional<skc::Error> e = error_of([&] { rep = c.compile(load_ops(ops_of.at(world_rank))); });
    EXPECT_MSG(!e.has_value(), std::string("compile threw: ") + (e ? e->what() : ""));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    EXPECT(rep.selected == ops_of.at(world_rank).size());
    EXPECT(rep.gathered == union_digests.size());
    EXPECT(rep.key.size() == 32);
    EXPECT(rep.installed == rep.key);
    EXPECT(rep.extracted == leader);
    EXPECT(fs::is_regular_file(rep.package));
    // The package is this node's own cache's copy (downloaded or compiled here).
    EXPECT_MSG(rep.package.string().starts_with((own / "base").string() + "/"), rep.package.string());
    const RecordingReselect& rs = c.reselect_hook();
    EXPECT(rs.packages.size() == 1);
    if (rs.packages.size() == 1) {
        EXPECT(rs.packages[0] == rep.key);
        EXPECT_MSG(rs.indexed[0] == union_digests, "the index at reselect did not list the union under the package");
    }
    const skc::CacheStats cs = c.cache() != nullptr ? c.cache()->stats() : skc::CacheStats{};
    const std::string bytes_hash =
        fs::is_regular_file(rep.package) ? skc::detail::hash_bytes(skc_test::slurp(rep.package)).hex() : "";
    std::string logged;
    {
        std::lock_guard lock(warnings->mu);
        for (const std::string& l : warnings->lines) logged += l + "\n";
    }

    // Across the job: one key, the same bytes on both nodes from one compile, each node its own copy.
    const std::vector<std::string> all = gather_to_root(skc::dump_json(
        skc::Value(skc::Object{{"node", skc::Value(node)},
                               {"leader", skc::Value(leader)},
                               {"ok", skc::Value(!e.has_value())},
                               {"outcome", skc::Value(skc::to_string(rep.outcome))},
                               {"key", skc::Value(rep.key)},
                               {"package", skc::Value(rep.package.string())},
                               {"bytes", skc::Value(bytes_hash)},
                               {"remote_hits", skc::Value(static_cast<std::int64_t>(cs.remote_hits))},
                               {"remote_uploads", skc::Value(static_cast<std::int64_t>(cs.remote_uploads))},
                               {"remote_errors", skc::Value(static_cast<std::int64_t>(cs.remote_errors))},
                               {"warnings", skc::Value(logged)},
                               {"ms", skc::Value(ms)}}),
        -1));
    if (world_rank == 0) {
        std::set<std::string> job_keys, hashes, packages;
        std::map<int, std::set<std::string>> outcomes_of_node;
        std::map<std::string, int> leaders_by_outcome;
        int ok = 0;
        for (const std::string& t : all) {
            const skc::Value v = skc::parse_json(t);
            const auto num = [&](const char* k) { return static_cast<long long>(v.find(k)->as_double()); };
            const int rank = static_cast<int>(&t - all.data());
            const int n = static_cast<int>(num("node"));
            const std::string outcome = v.find("outcome")->as_string();
            std::printf("scenario 5, round %zu: rank %d node %d: %s in %.0f ms\n", round, rank, n, outcome.c_str(),
                        v.find("ms")->as_double());
            ok += v.find("ok")->as_bool() ? 1 : 0;
            job_keys.insert(v.find("key")->as_string());
            hashes.insert(v.find("bytes")->as_string());
            packages.insert(v.find("package")->as_string());
            outcomes_of_node[n].insert(outcome);
            EXPECT_MSG(num("remote_errors") == 0, "rank " + std::to_string(rank));
            EXPECT_MSG(v.find("warnings")->as_string().empty(),
                       "rank " + std::to_string(rank) + " logged: " + v.find("warnings")->as_string());
            if (v.find("leader")->as_bool()) {
                ++leaders_by_outcome[outcome];
                // The leader that compiled uploaded; the other downloaded; neither did both.
                if (outcome == "compiled")
                    EXPECT_MSG(num("remote_uploads") == 1 && num("remote_hits") == 0, "rank " + std::to_string(rank));
                if (outcome == "downloaded")
                    EXPECT_MSG(num("remote_hits") == 1 && num("remote_uploads") == 0, "rank " + std::to_string(rank));
            }
        }
        EXPECT(ok == 4);
        EXPECT(job_keys.size() == 1);
        EXPECT(hashes.size() == 1 && !hashes.begin()->empty());
        EXPECT(packages.size() == 2);  // one copy per node, each in its own cache
        // A follower reports its leader's outcome: one node compiled, the other downloaded.
        EXPECT(outcomes_of_node[0].size() == 1 && outcomes_of_node[1].size() == 1);
        EXPECT((leaders_by_outcome == std::map<std::string, int>{{"compiled", 1}, {"downloaded", 1}}));
        // One compiler run in this round, counted by the wrapper and by the compiler's logs.
        EXPECT_MSG(lines_in(count_file) == round, "compiler runs: " + std::to_string(lines_in(count_file)));
        EXPECT_MSG(compiler_logs(s) == round, "op_compiler.log files: " + std::to_string(compiler_logs(s)));
        const std::string key = job_keys.empty() ? std::string() : *job_keys.begin();
        EXPECT_MSG(!keys.contains(key), "the key of an earlier round: " + key);
        keys.insert(key);
        // Each node installed it into its own op library (held until the compilers are gone).
        for (int n = 0; n < 2; ++n) {
            std::set<std::string> stems;
            for (const skc::InstalledPackage& p : skc::RunPackageInstaller().list(own_dir(s, n) / "lib", "host"))
                stems.insert(p.stem);
            EXPECT_MSG((stems == std::set<std::string>{key}), "node " + std::to_string(n));
        }
        // Redis holds a record per round's key, and no lease is left.
        const std::string ns = skc::Layout::cache_stem("1.0", "host-cpu");
        std::set<std::string> want;
        for (const std::string& k : keys) want.insert("skc:" + ns + ":record:" + k);
        const std::string records = server->command({"KEYS", "skc:*:record:*"});
        EXPECT_MSG(lines_of(records) == want, "records: " + records);
        EXPECT(server->command({"KEYS", "skc:*:lease:*"}).empty());
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return std::move(c.gather());
}

skc::MpiGather nodes_share_only_redis(const Setup& s, skc::MpiGather gather) {
    // One redis-server for the job, on rank 0; its URL is broadcast (empty: it did not start).
    std::unique_ptr<skc_test::RedisServer> server;
    std::string url;
    const fs::path count_file = s.root / "redis" / "compiler-runs.txt";
    if (world_rank == 0) {
        try {
            server = std::make_unique<skc_test::RedisServer>();
            url = server->url();
        } catch (const std::exception& e) {
            expect(false, std::string("cannot start redis-server: ") + e.what(), __LINE__);
        }
        for (int node = 0; node < 2; ++node) fs::create_directories(own_dir(s, node) / "base");
        skc_test::spit(count_file, "");
    }
    url = broadcast_from_root(url);
    if (url.empty()) return gather;

    std::set<std::string> keys;  // rank 0: the keys of the rounds so far
    // Round 1: the ranks of a node select different ops; both nodes gather {LayerNorm, SoftmaxV2}.
    gather = redis_round(s, count_file, url, server.get(), 1,
                         {{0, {"LayerNorm_float_ND_32_64_7.json"}},
                          {2, {"SoftmaxV2_float_ND_2_16_16_6.json"}},
                          {1, {"SoftmaxV2_float_ND_2_16_16_6.json", "LayerNorm_float_ND_32_64_7.json"}},
                          {3, {"LayerNorm_float_ND_32_64_7.json"}}},
                         keys, std::move(gather));
    // Round 2, on a key no cache or Redis has yet: both nodes start at once again.
    gather = redis_round(s, count_file, url, server.get(), 2,
                         {{0, {"BatchMatMulV2_float_ND_2_16_64_4.json", "MatMulV2_float_ND_32_256_3.json"}},
                          {2, {"Gelu_float_ND_32_256_8.json"}},
                          {1, {"Gelu_float_ND_32_256_8.json", "BatchMatMulV2_float_ND_2_16_64_4.json"}},
                          {3, {"MatMulV2_float_ND_32_256_3.json"}}},
                         keys, std::move(gather));

    // Every compiler of this case is gone: each node's process-scoped installs were released.
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank == 0) {
        for (int node = 0; node < 2; ++node) {
            skc::RunPackageInstaller inst;
            EXPECT_MSG(inst.list(own_dir(s, node) / "lib", "host").empty(), "node " + std::to_string(node));
        }
        server->stop();
        EXPECT(!server->running());
    }
    return gather;
}
#endif  // SKC_TEST_WITH_REDIS

// ---- 6. the GatherPolicy laws ------------------------------------------------------------------------

skc::MpiGather gather_laws(const Setup& s, skc::MpiGather gather) {
    const int node = static_cast<int>(gather.node());
    const skc_test::GatherLawSetup setup{s.root / "laws" / "base",
                                         s.root / "laws" / ("rank-" + std::to_string(world_rank)), "mpi-laws", 2,
                                         std::chrono::seconds(20)};
    const auto t0 = std::chrono::steady_clock::now();
    const skc_test::GatherLawResult r = skc_test::check_gather_laws(gather, setup);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (const std::string& v : r.violations) expect(false, "gather law: " + v, __LINE__);
    EXPECT(r.checks >= 6 * skc_test::gather_law_round_count);

    // Each node's laws, on rank 0.
    const std::vector<std::string> all =
        gather_to_root(skc::dump_json(skc::Value(skc::Object{{"node", skc::Value(node)}, {"laws", r.to_value()}}), -1));
    if (world_rank == 0) {
        std::map<int, std::vector<skc_test::GatherLawResult>> nodes;
        std::size_t checks = 0;
        for (const std::string& t : all) {
            const skc::Value v = skc::parse_json(t);
            nodes[static_cast<int>(v.find("node")->as_int())].push_back(
                skc_test::GatherLawResult::from_value(*v.find("laws")));
            checks += nodes[static_cast<int>(v.find("node")->as_int())].back().checks;
        }
        EXPECT(nodes.size() == 2);
        for (const auto& [n, ranks] : nodes)
            for (const std::string& v : skc_test::check_gather_node(ranks))
                expect(false, "gather law of node " + std::to_string(n) + ": " + v, __LINE__);
        std::printf("scenario 6: %zu laws checked on 4 ranks in %zu rounds, rank 0 in %.0f ms\n", checks,
                    skc_test::gather_law_round_count, ms);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return gather;
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 4) {
        if (world_rank == 0) std::fprintf(stderr, "run this test with 4 ranks: mpirun -np 4 %s\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    const auto t0 = std::chrono::steady_clock::now();

    // One temporary folder for the job, made by rank 0.
    std::optional<skc_test::TempDir> tmp;
    Setup s;
    std::string root;
    if (world_rank == 0) {
        tmp.emplace();
        root = tmp->path().string();
        s.root = root;
        s.count_file = s.root / "compiler-runs.txt";
        s.wrapper = s.root / "counting_op_compiler.sh";
        skc_test::spit(s.wrapper,
                       "#!/bin/sh\n"
                       "# counting_op_compiler.sh COUNT_FILE ok|fail <op_compiler arguments>\n"
                       "count=$1; mode=$2; shift 2\n"
                       "echo \"$$\" >> \"$count\"\n"
                       "if [ \"$mode\" = fail ]; then echo 'the compiler failed (test)' >&2; exit 1; fi\n"
                       "exec '" SKC_HOST_OP_COMPILER "' \"$@\"\n");
        fs::permissions(s.wrapper, fs::perms::owner_all);
        skc_test::spit(s.count_file, "");
        fs::create_directories(s.root / "base");
    }
    root = broadcast_from_root(root);
    s.root = root;
    s.count_file = s.root / "compiler-runs.txt";
    s.wrapper = s.root / "counting_op_compiler.sh";

    try {
        skc::MpiGather gather(MPI_COMM_WORLD, std::chrono::seconds(20), [](int r) { return r % 2; });
        gather = union_and_single_compile(s, std::move(gather));
        gather = compile_fails(s, std::move(gather));
        gather = share_fails(s, std::move(gather));
        rank_missing(s);
#ifdef SKC_TEST_WITH_REDIS
        gather = nodes_share_only_redis(s, std::move(gather));
#endif
        gather = gather_laws(s, std::move(gather));
        // Every compiler is gone: the process-scoped installs were released on every rank.
        MPI_Barrier(MPI_COMM_WORLD);
        if (world_rank == 0)
            for (const char* lib : {"lib-node0", "lib-node1"}) {
                skc::RunPackageInstaller inst;
                EXPECT_MSG(inst.list(s.root / lib, "host").empty(), lib);
            }
    } catch (const std::exception& e) {
        expect(false, std::string("unexpected exception: ") + e.what(), __LINE__);
    }

    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (world_rank == 0)
        std::printf("%s: %d failed checks on 4 ranks, %.1f s\n", total == 0 ? "PASS" : "FAIL", total,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    MPI_Barrier(MPI_COMM_WORLD);
    tmp.reset();
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
