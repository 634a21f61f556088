// The GatherPolicy law suite (tests/support/gather_laws.hpp), run over the shipped gather policies
// that need no MPI: SingleRank and AnyGather (holding a SingleRank) in this process, and
// LocalFsGather with real processes, the ranks of one node being tests/workers/gather_worker.cpp
// programs (its `laws` mode) on one base directory. skc::MpiGather runs the same laws in
// tests/mpi/mpi_gather_test.cpp. The last cases check that the laws catch gathers that break them.
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <cstddef>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <skc/op_info_io.hpp>
#include <skc/policy/any_gather.hpp>
#include <skc/policy/gather.hpp>
#include <skc/policy/single_rank.hpp>
#include <skc/policy/local_fs_gather.hpp>

#include "gather_laws.hpp"
#include "run_tool.hpp"
#include "test_support.hpp"

namespace skc_policy_gather_law_test {

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using skc_test::GatherLawResult;
using skc_test::GatherLawSetup;

GatherLawSetup setup_of(const fs::path& root, std::size_t rank, const std::string& token, std::size_t world) {
    return GatherLawSetup{root / "base", root / ("rank-" + std::to_string(rank)), token, world, 10s};
}

/// A node of ranks of policy G that runs the laws, every rank's result.
template <class G>
struct LawNode;

template <>
struct LawNode<skc::SingleRank> {
    static constexpr std::size_t world = 1;
    static std::vector<GatherLawResult> run(const fs::path& root, const std::string& token) {
        skc::SingleRank g;
        return {skc_test::check_gather_laws(g, setup_of(root, 0, token, world))};
    }
};

/// AnyGather, the gather chosen at run time, holding a SingleRank: what a program that runs alone
/// gets from AnyGather::from_env.
template <>
struct LawNode<skc::AnyGather> {
    static constexpr std::size_t world = 1;
    static std::vector<GatherLawResult> run(const fs::path& root, const std::string& token) {
        skc::AnyGather g{skc::SingleRank()};
        return {skc_test::check_gather_laws(g, setup_of(root, 0, token, world))};
    }
};

/// Three ranks, each a gather_worker process with LOCAL_RANK, LOCAL_WORLD_SIZE and SKC_RUN_ID set
/// as torchrun sets them, reading the node from the environment (LocalFsGather::from_env).
template <>
struct LawNode<skc::LocalFsGather> {
    static constexpr std::size_t world = 3;
    static std::vector<GatherLawResult> run(const fs::path& root, const std::string& token) {
        struct Rank {
            pid_t pid = -1;
            fs::path io, report;
            int status = -1;
        };
        std::vector<Rank> ranks(world);
        for (std::size_t k = 0; k < world; ++k) {
            Rank& r = ranks[k];
            r.io = root / ("io-" + std::to_string(k));
            fs::create_directories(r.io);
            r.report = r.io / "report.json";
            const GatherLawSetup s = setup_of(root, k, token, world);
            r.pid = skc_test::start_program(
                        SKC_GATHER_WORKER, root,
                        {"laws", "--base", s.base.string(), "--work", s.work.string(), "--token", token, "--world",
                         std::to_string(world), "--timeout", "10", "--report", r.report.string()},
                        {"LOCAL_WORLD_SIZE=" + std::to_string(world), "LOCAL_RANK=" + std::to_string(k),
                         "SKC_RUN_ID=" + token, "TORCHELASTIC_RUN_ID="},
                        r.io)
                        .pid;
        }
        // Every rank ends well within the gather's timeout; one still running then is killed.
        const auto deadline = Clock::now() + 90s;
        for (Rank& r : ranks) {
            int status = 0;
            while (::waitpid(r.pid, &status, WNOHANG) == 0) {
                if (Clock::now() >= deadline) {
                    ::kill(r.pid, SIGKILL);
                    ::waitpid(r.pid, &status, 0);
                    break;
                }
                std::this_thread::sleep_for(5ms);
            }
            r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        std::vector<GatherLawResult> out;
        for (const Rank& r : ranks) {
            const std::string err = skc_test::slurp(r.io / "stderr");
            INFO("rank pid " << r.pid << ", status " << r.status << ", stderr:\n" << err);
            CHECK(r.status == 0);  // 0: the report was written (8: with violations, which are checked below)
            CHECK(err.find("runtime error:") == std::string::npos);
            CHECK(err.find("Sanitizer") == std::string::npos);
            if (!fs::exists(r.report)) {
                GatherLawResult missing;
                missing.violations.push_back("rank pid " + std::to_string(r.pid) + " wrote no report");
                out.push_back(missing);
                continue;
            }
            out.push_back(GatherLawResult::from_value(skc::parse_json(skc_test::slurp(r.report))));
        }
        return out;
    }
};

std::string joined(const std::vector<std::string>& lines) {
    std::string s;
    for (const std::string& l : lines) s += l + "\n";
    return s;
}

}  // namespace

TEST_CASE_TEMPLATE("gather law: every rank's laws and the node's hold, round after round", G, skc::SingleRank,
                   skc::AnyGather, skc::LocalFsGather) {
    skc_test::TempDir tmp;
    const std::string token = "laws-" + std::to_string(::getpid());
    const std::vector<GatherLawResult> ranks = LawNode<G>::run(tmp.path(), token);
    REQUIRE(ranks.size() == LawNode<G>::world);
    for (const GatherLawResult& r : ranks) {
        CAPTURE(r.local_rank);
        CHECK_MESSAGE(r.ok(), r.text());
        CHECK(r.rounds.size() == skc_test::gather_law_round_count);
        CHECK(r.checks >= 6 * skc_test::gather_law_round_count);  // the laws ran, not a rank that stopped early
    }
    const std::vector<std::string> node = skc_test::check_gather_node(ranks);
    CHECK_MESSAGE(node.empty(), joined(node));
}

TEST_CASE("gather law: a LocalFsGather node of one rank, in this process") {
    skc_test::TempDir tmp;
    const std::string token = "alone-" + std::to_string(::getpid());
    skc::LocalFsGather g(skc::LocalRanks{0, 1, token}, 30s);
    const GatherLawResult r = skc_test::check_gather_laws(g, setup_of(tmp.path(), 0, token, 1));
    CHECK_MESSAGE(r.ok(), r.text());
    CHECK(r.checks >= 6 * skc_test::gather_law_round_count);
    const std::vector<std::string> node = skc_test::check_gather_node({r});
    CHECK_MESSAGE(node.empty(), joined(node));
}

// ---- the laws catch gathers that break them -------------------------------------------------------

namespace {

/// SingleRank with one fault.
enum class Fault { share_twice, return_other, lead_error_replaced, digest_twice, rank_drifts, lead_on_follower };

template <Fault F>
struct Broken {
    skc::Value coordinate(const skc::GatherRequest& r, const skc::LeadFn& lead, const skc::ShareFn& share) {
        if constexpr (F == Fault::lead_error_replaced) {
            try {
                return skc::SingleRank{}.coordinate(r, lead, share);
            } catch (const std::exception& e) {
                throw skc::Error(skc::Errc::io_error, std::string("wrapped: ") + e.what());
            }
        } else if constexpr (F == Fault::digest_twice) {
            const skc::LeadFn doubled = [&](const skc::GatheredSet& set) {
                skc::GatheredSet twice = set;
                if (!set.digests.empty()) {
                    twice.digests.push_back(set.digests.front());
                    twice.names.push_back("Again.json");
                }
                return lead(twice);
            };
            return skc::SingleRank{}.coordinate(r, doubled, share);
        } else {
            skc::Value v = skc::SingleRank{}.coordinate(r, lead, share);
            if constexpr (F == Fault::share_twice) share(v);
            if constexpr (F == Fault::return_other) return skc::Value("another value");
            return v;
        }
    }
    [[nodiscard]] std::size_t local_rank() const noexcept { return F == Fault::lead_on_follower ? 1 : 0; }
    [[nodiscard]] std::size_t local_world_size() const noexcept {
        if constexpr (F == Fault::rank_drifts) return ++calls > 1 ? 2 : 1;  // 1, then 2
        return F == Fault::lead_on_follower ? 2 : 1;
    }
    mutable std::size_t calls = 0;
};

/// Every violation the laws find in `Broken<F>`, as one text.
template <Fault F>
std::string violations_of() {
    skc_test::TempDir tmp;
    Broken<F> g;
    const GatherLawResult r = skc_test::check_gather_laws(g, setup_of(tmp.path(), 0, "broken", 0));
    return r.text();
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("gather law: the laws catch a gather that breaks one") {
    const std::string twice = violations_of<Fault::share_twice>();
    CHECK_MESSAGE(has(twice, "round 1 (every rank selects ops): share ran 2 times, not once"), twice);

    const std::string other = violations_of<Fault::return_other>();
    CHECK_MESSAGE(has(other, "round 1 (every rank selects ops): share got "), other);
    CHECK_MESSAGE(has(other, "coordinate() returned \"another value\", not what lead returned"), other);

    const std::string replaced = violations_of<Fault::lead_error_replaced>();
    CHECK_MESSAGE(
        has(replaced, "round 3 (lead throws skc::Error): the leader's coordinate() threw skc::Error io_error"),
        replaced);
    CHECK_MESSAGE(has(replaced, "round 4 (lead throws std::runtime_error): the leader's coordinate() threw skc::Error"),
                  replaced);
    CHECK_FALSE(has(replaced, "round 1 "));  // the rounds whose lead returns are not affected

    const std::string digests = violations_of<Fault::digest_twice>();
    CHECK_MESSAGE(has(digests, "round 1 (every rank selects ops): a digest is in the gathered set more than once"),
                  digests);
    CHECK_FALSE(has(digests, "round 6 "));  // an empty set has nothing to repeat

    const std::string drifts = violations_of<Fault::rank_drifts>();
    CHECK_MESSAGE(has(drifts, "local_rank() or local_world_size() changed between two calls"), drifts);

    // It says it is local rank 1 of 2 but runs lead (and no other rank exists).
    const std::string follower = violations_of<Fault::lead_on_follower>();
    CHECK_MESSAGE(has(follower,
                      "local rank 1 of 2, round 1 (every rank selects ops): lead ran 1 times on this "
                      "rank, not never"),
                  follower);
    CHECK_MESSAGE(has(follower, "a follower's coordinate() threw std::runtime_error: lead failed on purpose"),
                  follower);
}

TEST_CASE("gather law: the node's laws catch ranks that disagree") {
    skc_test::TempDir tmp;
    skc::SingleRank g;
    const GatherLawResult good = skc_test::check_gather_laws(g, setup_of(tmp.path(), 0, "node", 1));
    REQUIRE(good.ok());
    CHECK(skc_test::check_gather_node({good}).empty());

    // Two ranks of a node of two: a copy of the leader that did not lead, and got another value.
    GatherLawResult follower = good;
    follower.local_rank = 1;
    for (skc_test::GatherLawRoundResult& r : follower.rounds) r.lead_calls = 0;
    GatherLawResult leader = good;
    leader.local_world_size = follower.local_world_size = 2;
    follower.rounds[0].shared = follower.rounds[0].returned = "\"stale\"";
    const std::string text = joined(skc_test::check_gather_node({leader, follower}));
    CHECK_MESSAGE(has(text, "round 1 (every rank selects ops): local rank 1's share got \"stale\""), text);
    CHECK_MESSAGE(has(text, "round 1 (every rank selects ops): local rank 1's coordinate() returned \"stale\""), text);
    CHECK_FALSE(has(text, "round 2 "));

    // Both ran lead in every round.
    GatherLawResult second_leader = good;
    second_leader.local_rank = 1;
    second_leader.local_world_size = 2;
    const std::string twice = joined(skc_test::check_gather_node({leader, second_leader}));
    CHECK_MESSAGE(has(twice, "round 3 (lead throws skc::Error): lead ran 2 times on the node, not once"), twice);

    // Two ranks say they are local rank 0; a rank counts another world size.
    const std::string same = joined(skc_test::check_gather_node({leader, leader}));
    CHECK_MESSAGE(has(same, "two ranks say they are local rank 0"), same);
    GatherLawResult three = follower;
    three.local_world_size = 3;
    const std::string sizes = joined(skc_test::check_gather_node({leader, three}));
    CHECK_MESSAGE(has(sizes, "local rank 1 says the node has 3 ranks, another says 2"), sizes);
}

}  // namespace skc_policy_gather_law_test
