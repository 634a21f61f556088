// Test helper: the laws of a gather policy (skc::GatherPolicy; docs/spec.md section 10 and the
// comment at the top of include/skc/policy/gather.hpp), checked from inside one rank's process
// without doctest, so that the in-process tests (tests/skc/policy/gather_law_test.cpp), the ranks
// of tests/workers/gather_worker.cpp and every rank of tests/mpi/mpi_gather_test.cpp run the same
// laws and report what they found as strings. Not part of skc.
//
// check_gather_laws(g, setup) runs the rounds of gather_law_rounds, in order, on one policy object;
// every rank of the node calls it at once (each with its own object, as a job does). In each round
// the rank writes its op info files (gather_law_ops: some shared by every rank, one of the same name
// but other content on each rank, one shared by pairs of ranks) and calls coordinate() with a
// `lead` that checks the gathered set and returns a value naming the token and the round (or
// throws, in the failing rounds) and a `share` that records what it got. The laws one rank sees:
//   - local_rank() < local_world_size(), both the same before and after every round;
//   - `lead` runs exactly once per round on the leader (local_rank() == 0) and never elsewhere;
//   - the set the leader gets holds the union of every rank's selected ops, each digest once, under
//     distinct plain names (a name taken by other content gets `_<n>` before `.json`), `ranks` is
//     the world size, `dir` is empty exactly when the set is, and after materialize() (when it has
//     one) `dir` holds every op under its name with that content;
//   - `share` runs exactly once on every rank, after `lead` on the leader, with the value `lead`
//     returned; coordinate() returns that same value;
//   - a `lead` that throws: coordinate() rethrows the same exception on the leader (an skc::Error
//     with its code and message, a std::runtime_error as itself, not turned into an skc::Error) and
//     skc::Error with Errc::peer_failed, carrying the leader's message, on every other rank; `share`
//     runs nowhere;
//   - a round after another (after a failed one too) works again on the same object.
// check_gather_node(results) checks what only the ranks together show: their local ranks are 0 to
// n - 1 once each, they agree on n, `lead` ran once on the node in every round, and every rank got
// (from `share` and from coordinate()) the value the leader's `lead` returned.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

#include <skc/detail/hash.hpp>
#include <skc/detail/names.hpp>
#include <skc/error.hpp>
#include <skc/layout.hpp>
#include <skc/op_info_io.hpp>
#include <skc/policy/gather.hpp>
#include <skc/policy/single_rank.hpp>
#include <skc/select.hpp>
#include <skc/value.hpp>

namespace skc_test {

/// What `lead` does in a round.
enum class LawLead { returns, throws_error, throws_exception };
/// Which ranks select ops in a round.
enum class LawOps { all, even_ranks, none };

struct GatherLawRound {
    const char* what;
    LawLead lead;
    LawOps ops;
};

/// The rounds, in order, on one policy object.
inline constexpr GatherLawRound gather_law_rounds[] = {
    {"every rank selects ops", LawLead::returns, LawOps::all},
    {"right after, on the same object; odd local ranks select nothing", LawLead::returns, LawOps::even_ranks},
    {"lead throws skc::Error", LawLead::throws_error, LawOps::all},
    {"lead throws std::runtime_error", LawLead::throws_exception, LawOps::all},
    {"after two failed rounds, every rank selects ops again", LawLead::returns, LawOps::all},
    {"no rank selects anything", LawLead::returns, LawOps::none},
};
inline constexpr std::size_t gather_law_round_count = std::size(gather_law_rounds);

/// The op info files (name, content) local rank `rank` selects in round `round` (0-based): one op
/// every rank has, one named alike on every rank with content of its own, one shared by ranks 2k
/// and 2k + 1. The round is in every content: no digest is the same in two rounds.
inline std::vector<std::pair<std::string, std::string>> gather_law_ops(std::size_t round, std::size_t rank) {
    const GatherLawRound& r = gather_law_rounds[round];
    if (r.ops == LawOps::none || (r.ops == LawOps::even_ranks && rank % 2 == 1)) return {};
    const std::string tail = ", \"round\": " + std::to_string(round + 1) + "}\n";
    const std::size_t pair = rank / 2;
    return {{"Shared.json", "{\"op\": \"every rank's\"" + tail},
            {"Own.json", "{\"op\": \"local rank " + std::to_string(rank) + "'s own\"" + tail},
            {"Pair" + std::to_string(pair) + ".json", "{\"op\": \"local ranks " + std::to_string(2 * pair) + " and " +
                                                          std::to_string(2 * pair + 1) + "\"" + tail}};
}

/// What one rank saw in one round.
struct GatherLawRoundResult {
    std::size_t lead_calls = 0;
    std::size_t share_calls = 0;
    bool threw = false;
    std::string lead_returned;  // the JSON text of what `lead` returned on this rank (empty: none)
    std::string shared;         // of the value `share` last got (empty: none)
    std::string returned;       // of what coordinate() returned (empty: it threw)
};

/// What check_gather_laws() found on one rank.
struct GatherLawResult {
    std::size_t local_rank = 0;
    std::size_t local_world_size = 0;
    std::vector<GatherLawRoundResult> rounds;
    std::size_t checks = 0;               // laws checked
    std::vector<std::string> violations;  // one line per broken law

    [[nodiscard]] bool ok() const { return violations.empty(); }
    void check(bool ok, const std::string& what) {
        ++checks;
        if (!ok) violations.push_back(what);
    }
    [[nodiscard]] std::string text() const {
        std::string s;
        for (const std::string& v : violations) s += v + "\n";
        return s;
    }

    [[nodiscard]] skc::Value to_value() const {
        skc::Array rs;
        for (const GatherLawRoundResult& r : rounds)
            rs.push_back(skc::Value(skc::Object{{"lead_calls", skc::Value(r.lead_calls)},
                                                {"share_calls", skc::Value(r.share_calls)},
                                                {"threw", skc::Value(r.threw)},
                                                {"lead_returned", skc::Value(r.lead_returned)},
                                                {"shared", skc::Value(r.shared)},
                                                {"returned", skc::Value(r.returned)}}));
        skc::Array vs;
        for (const std::string& v : violations) vs.push_back(skc::Value(v));
        return skc::Value(skc::Object{{"local_rank", skc::Value(local_rank)},
                                      {"local_world_size", skc::Value(local_world_size)},
                                      {"rounds", skc::Value(std::move(rs))},
                                      {"checks", skc::Value(checks)},
                                      {"violations", skc::Value(std::move(vs))}});
    }

    /// From to_value(); a field that is missing or of the wrong kind is a violation of its own.
    static GatherLawResult from_value(const skc::Value& v) {
        GatherLawResult out;
        auto number = [&](const skc::Value& o, std::string_view k) -> std::size_t {
            const skc::Value* f = o.find(k);
            if (f && f->is_integer() && f->as_int() >= 0) return static_cast<std::size_t>(f->as_int());
            out.violations.push_back("the report has no number " + std::string(k));
            return 0;
        };
        auto text = [](const skc::Value& o, std::string_view k) {
            const skc::Value* f = o.find(k);
            return f && f->is_string() ? f->as_string() : std::string();
        };
        if (!v.is_object()) {
            out.violations.push_back("the report is not an object");
            return out;
        }
        out.local_rank = number(v, "local_rank");
        out.local_world_size = number(v, "local_world_size");
        out.checks = number(v, "checks");
        if (const skc::Value* rs = v.find("rounds"); rs && rs->is_array())
            for (const skc::Value& r : rs->as_array()) {
                GatherLawRoundResult x;
                x.lead_calls = number(r, "lead_calls");
                x.share_calls = number(r, "share_calls");
                const skc::Value* threw = r.find("threw");
                x.threw = threw && threw->is_bool() && threw->as_bool();
                x.lead_returned = text(r, "lead_returned");
                x.shared = text(r, "shared");
                x.returned = text(r, "returned");
                out.rounds.push_back(std::move(x));
            }
        else out.violations.push_back("the report has no rounds");
        if (const skc::Value* vs = v.find("violations"); vs && vs->is_array())
            for (const skc::Value& s : vs->as_array()) out.violations.push_back(s.is_string() ? s.as_string() : "?");
        else out.violations.push_back("the report has no violations list");
        return out;
    }
};

/// Where a rank runs the laws.
struct GatherLawSetup {
    std::filesystem::path base;      // the base directory the node's ranks share (skc::Layout)
    std::filesystem::path work;      // this rank's own folder (its op info files and run folders); created
    std::string token;               // the same on every rank of the node, another for each run
    std::size_t expected_world = 0;  // the node's size when the caller knows it; 0: not checked
    std::chrono::nanoseconds lead_budget = std::chrono::seconds(10);
};

namespace gather_law_detail {

inline std::string dump(const skc::Value& v) { return skc::dump_json(v, -1); }

/// The value `lead` returns in a round: the token, the round (1-based), the leader's pid and the
/// digests it got, so that a value of another round, node or job is told from this one.
inline skc::Value lead_value(const std::string& token, std::size_t round, const std::vector<std::string>& digests) {
    skc::Array ds;
    for (const std::string& d : digests) ds.push_back(skc::Value(d));
    return skc::Value(skc::Object{{"token", skc::Value(token)},
                                  {"round", skc::Value(round + 1)},
                                  {"leader_pid", skc::Value(static_cast<std::int64_t>(::getpid()))},
                                  {"digests", skc::Value(std::move(ds))}});
}

inline std::string read_all(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Whether `name` is `original` or `original` with `_<n>` (n >= 1) before `.json` (or after it,
/// for a name without `.json`, with `.json` added).
inline bool renamed_from(const std::string& name, const std::string& original) {
    if (name == original) return true;
    const std::string stem =
        original.size() > 5 && original.ends_with(".json") ? original.substr(0, original.size() - 5) : original;
    if (!name.starts_with(stem + "_") || !name.ends_with(".json")) return false;
    const std::string n = name.substr(stem.size() + 1, name.size() - stem.size() - 1 - 5);
    return !n.empty() && n.find_first_not_of("0123456789") == std::string::npos && n[0] != '0';
}

}  // namespace gather_law_detail

/// Runs the rounds of gather_law_rounds on `g` (this rank's policy object) and returns what broke.
template <skc::GatherPolicy G>
GatherLawResult check_gather_laws(G& g, const GatherLawSetup& setup) {
    namespace fs = std::filesystem;
    using gather_law_detail::dump;
    GatherLawResult out;
    const std::size_t rank = g.local_rank();
    const std::size_t world = g.local_world_size();
    out.local_rank = rank;
    out.local_world_size = world;
    const std::string me = "local rank " + std::to_string(rank) + " of " + std::to_string(world);
    out.check(world >= 1, me + ": local_world_size() is 0");
    out.check(rank < world, me + ": local_rank() is not below local_world_size()");
    out.check(g.local_rank() == rank && g.local_world_size() == world,
              me + ": local_rank() or local_world_size() changed between two calls");
    if (setup.expected_world != 0)
        out.check(world == setup.expected_world,
                  me + ": local_world_size() is not the node's size, " + std::to_string(setup.expected_world));

    const skc::Layout layout(setup.base);
    for (std::size_t round = 0; round < gather_law_round_count; ++round) {
        const GatherLawRound& spec = gather_law_rounds[round];
        const std::string where = me + ", round " + std::to_string(round + 1) + " (" + spec.what + "): ";
        auto law = [&](bool ok, const std::string& what) { out.check(ok, where + what); };
        GatherLawRoundResult res;

        // This rank's op info files, and the union every rank's make.
        const fs::path dir = setup.work / ("round-" + std::to_string(round + 1));
        const fs::path ops_dir = dir / "ops";
        fs::create_directories(ops_dir);
        std::vector<skc::SelectedOp> selected;
        for (const auto& [name, content] : gather_law_ops(round, rank)) {
            std::ofstream(ops_dir / name, std::ios::binary) << content;
            selected.push_back(skc::SelectedOp{skc::detail::hash_bytes(content), name});
        }
        std::map<std::string, std::string> expected;  // digest (hex) -> the name its ranks gave it
        for (std::size_t k = 0; k < world; ++k)
            for (const auto& [name, content] : gather_law_ops(round, k))
                expected.emplace(skc::detail::hash_bytes(content).hex(), name);
        std::vector<std::string> expected_digests;
        for (const auto& [d, name] : expected) expected_digests.push_back(d);

        const skc::RunLayout run(dir, static_cast<long>(::getpid()));
        const skc::GatherRequest req{layout, run, selected, selected.empty() ? fs::path() : ops_dir, setup.lead_budget,
                                     {},     {},  {}};
        const std::string message =
            "lead failed on purpose (token " + setup.token + ", round " + std::to_string(round + 1) + ")";

        bool lead_done = false;
        bool share_before_lead = false;
        const skc::LeadFn lead = [&](const skc::GatheredSet& set) -> skc::Value {
            ++res.lead_calls;
            law(set.ranks == world, "the gathered set says it holds the ops of " + std::to_string(set.ranks) +
                                        " ranks, not " + std::to_string(world));
            std::vector<std::string> hexes;
            for (const skc::Digest& d : set.digests) hexes.push_back(d.hex());
            std::vector<std::string> sorted = hexes;
            std::sort(sorted.begin(), sorted.end());
            law(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
                "a digest is in the gathered set more than once");
            sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
            law(sorted == expected_digests, "the gathered set holds " + std::to_string(sorted.size()) +
                                                " distinct ops, not the union of every rank's " +
                                                std::to_string(expected_digests.size()));
            law(set.names.size() == set.digests.size(), "the gathered set has " + std::to_string(set.names.size()) +
                                                            " names for " + std::to_string(set.digests.size()) +
                                                            " digests");
            const std::set<std::string> distinct(set.names.begin(), set.names.end());
            law(distinct.size() == set.names.size(), "two ops of the gathered set have the same name");
            for (std::size_t i = 0; i < set.names.size() && i < hexes.size(); ++i) {
                const auto it = expected.find(hexes[i]);
                law(skc::detail::is_plain_file_name(set.names[i]) &&
                        (it == expected.end() || gather_law_detail::renamed_from(set.names[i], it->second)),
                    "op " + hexes[i] + " is named \"" + set.names[i] +
                        "\", neither its own name nor that name with _<n>");
            }
            law(set.dir.empty() == set.digests.empty(),
                set.digests.empty() ? "an empty set has a folder" : "a set with ops has no folder");
            try {
                if (set.materialize) set.materialize();
                for (std::size_t i = 0; i < set.names.size() && i < set.digests.size(); ++i) {
                    const fs::path f = set.dir / set.names[i];
                    law(fs::is_regular_file(f), "the set's folder has no file " + set.names[i]);
                    law(!fs::is_regular_file(f) ||
                            skc::detail::hash_bytes(gather_law_detail::read_all(f)) == set.digests[i],
                        "the set's file " + set.names[i] + " does not have the content of its digest");
                }
            } catch (const std::exception& e) {
                law(false, std::string("materializing the gathered set threw: ") + e.what());
            }
            lead_done = true;
            if (spec.lead == LawLead::throws_error) throw skc::Error(skc::Errc::compile_failed, message);
            if (spec.lead == LawLead::throws_exception) throw std::runtime_error(message);
            skc::Value v = gather_law_detail::lead_value(setup.token, round, hexes);
            res.lead_returned = dump(v);
            return v;
        };
        const skc::ShareFn share = [&](const skc::Value& v) {
            ++res.share_calls;
            share_before_lead = share_before_lead || (rank == 0 && !lead_done);
            res.shared = dump(v);
        };

        std::optional<skc::Error> error;  // what coordinate() threw
        std::string other;                // or the what() of another exception
        bool other_is_runtime_error = false;
        bool other_is_not_std = false;
        try {
            res.returned = dump(g.coordinate(req, lead, share));
        } catch (const skc::Error& e) {
            res.threw = true;
            error = e;
        } catch (const std::runtime_error& e) {
            res.threw = true;
            other = e.what();
            other_is_runtime_error = true;
        } catch (const std::exception& e) {
            res.threw = true;
            other = e.what();
        } catch (...) {
            res.threw = true;
            other_is_not_std = true;
        }
        const std::string thrown =
            error ? std::string("skc::Error ") + std::string(skc::to_string(error->code())) + ": " + error->what()
            : other_is_not_std       ? std::string("an exception not derived from std::exception")
            : other_is_runtime_error ? "std::runtime_error: " + other
                                     : "std::exception: " + other;

        law(res.lead_calls == (rank == 0 ? 1u : 0u), "lead ran " + std::to_string(res.lead_calls) +
                                                         " times on this rank, not " + (rank == 0 ? "once" : "never"));
        law(g.local_rank() == rank && g.local_world_size() == world,
            "local_rank() or local_world_size() changed: now " + std::to_string(g.local_rank()) + " of " +
                std::to_string(g.local_world_size()));
        if (spec.lead == LawLead::returns) {
            law(!res.threw, "coordinate() threw " + thrown);
            law(res.share_calls == 1, "share ran " + std::to_string(res.share_calls) + " times, not once");
            law(!share_before_lead, "share ran before lead on the leader");
            law(res.threw || res.shared == res.returned,
                "share got " + res.shared + " but coordinate() returned " + res.returned);
            if (rank == 0)
                law(res.threw || res.returned == res.lead_returned,
                    "coordinate() returned " + res.returned + ", not what lead returned, " + res.lead_returned);
            // A follower cannot know the leader's pid, but it knows the token, round and union.
            if (!res.threw) {
                skc::Value got;
                try {
                    got = skc::parse_json(res.returned);
                } catch (const skc::Error&) {}
                const skc::Value* token = got.find("token");
                const skc::Value* r = got.find("round");
                const skc::Value* ds = got.find("digests");
                std::vector<std::string> digests;
                if (ds && ds->is_array())
                    for (const skc::Value& d : ds->as_array()) digests.push_back(d.is_string() ? d.as_string() : "");
                std::sort(digests.begin(), digests.end());
                law(token && token->is_string() && token->as_string() == setup.token && r && r->is_integer() &&
                        r->as_int() == static_cast<std::int64_t>(round + 1) && digests == expected_digests,
                    "coordinate() returned " + res.returned + ", not this round's value of lead");
            }
        } else {
            law(res.threw, "coordinate() returned " + res.returned + " although lead threw");
            law(res.share_calls == 0, "share ran " + std::to_string(res.share_calls) + " times although lead threw");
            if (rank == 0 && spec.lead == LawLead::throws_error)
                law(error && error->code() == skc::Errc::compile_failed && error->message() == message,
                    "the leader's coordinate() threw " + thrown +
                        ", not lead's own skc::Error compile_failed: " + message);
            if (rank == 0 && spec.lead == LawLead::throws_exception)
                law(!error && other_is_runtime_error && other == message,
                    "the leader's coordinate() threw " + thrown + ", not lead's own std::runtime_error: " + message);
            if (rank != 0)
                law(error && error->code() == skc::Errc::peer_failed &&
                        std::string_view(error->what()).find(message) != std::string_view::npos,
                    "a follower's coordinate() threw " + thrown + ", not skc::Error peer_failed carrying \"" + message +
                        "\"");
        }
        out.rounds.push_back(std::move(res));
    }
    return out;
}

/// The laws only the ranks of a node together show; `ranks` holds every rank's result, in any order.
inline std::vector<std::string> check_gather_node(const std::vector<GatherLawResult>& ranks) {
    std::vector<std::string> v;
    if (ranks.empty()) return {"no rank reported"};
    const std::size_t world = ranks.front().local_world_size;
    std::set<std::size_t> seen;
    for (const GatherLawResult& r : ranks) {
        if (r.local_world_size != world)
            v.push_back("local rank " + std::to_string(r.local_rank) + " says the node has " +
                        std::to_string(r.local_world_size) + " ranks, another says " + std::to_string(world));
        if (!seen.insert(r.local_rank).second)
            v.push_back("two ranks say they are local rank " + std::to_string(r.local_rank));
        if (r.rounds.size() != gather_law_round_count)
            v.push_back("local rank " + std::to_string(r.local_rank) + " reported " + std::to_string(r.rounds.size()) +
                        " rounds, not " + std::to_string(gather_law_round_count));
    }
    if (ranks.size() != world)
        v.push_back(std::to_string(ranks.size()) + " ranks took part in a node of " + std::to_string(world));
    if (!v.empty()) return v;
    const GatherLawResult* leader = nullptr;
    for (const GatherLawResult& r : ranks)
        if (r.local_rank == 0) leader = &r;
    if (leader == nullptr) return {"no rank is local rank 0"};
    for (std::size_t round = 0; round < gather_law_round_count; ++round) {
        const std::string where = "round " + std::to_string(round + 1) + " (" + gather_law_rounds[round].what + "): ";
        std::size_t leads = 0;
        for (const GatherLawResult& r : ranks) leads += r.rounds[round].lead_calls;
        if (leads != 1) v.push_back(where + "lead ran " + std::to_string(leads) + " times on the node, not once");
        if (gather_law_rounds[round].lead != LawLead::returns) continue;
        const std::string& led = leader->rounds[round].lead_returned;
        if (led.empty()) v.push_back(where + "the leader's lead returned nothing");
        for (const GatherLawResult& r : ranks) {
            if (r.rounds[round].shared != led)
                v.push_back(where + "local rank " + std::to_string(r.local_rank) + "'s share got " +
                            r.rounds[round].shared + ", not what the leader's lead returned, " + led);
            if (r.rounds[round].returned != led)
                v.push_back(where + "local rank " + std::to_string(r.local_rank) + "'s coordinate() returned " +
                            r.rounds[round].returned + ", not what the leader's lead returned, " + led);
        }
    }
    return v;
}

}  // namespace skc_test
