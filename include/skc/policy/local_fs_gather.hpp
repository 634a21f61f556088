// skc/policy/local_fs_gather.hpp: LocalFsGather, the ranks of one node meeting in the base
// directory they share (LOCAL_WORLD_SIZE, LOCAL_RANK and a run id, as torchrun sets them).
//
// Each compile() is a round in `<outputs>/rendezvous/<run id>/<host>/round-<n>/`
// (detail::LocalFsRound): every rank claims its place with a file holding its op list and an open
// file description lock (so a rank that dies is noticed, and a crashed job's files are told from a
// live one's); the leader decides the union in memory, fills the gathered folder only on a miss,
// and publishes the outcome, which is the first barrier; each rank then appends to `passed`, the
// second barrier. Waits sleep on inotify events of the round folder and look again at least every
// 20 ms; every wait is bounded. docs/file-formats.md ("The rendezvous of several ranks") lists the
// files and the steps; docs/tutorial.md (section 10) shows the errors each fault gives. A rank's
// place is in policy/local_ranks.hpp, a round in detail/local_fs_round.hpp and the waits on inotify
// in detail/dir_watch.hpp.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <unistd.h>

#include "../detail/dir_watch.hpp"
#include "../detail/local_fs_round.hpp"
#include "../error.hpp"
#include "../layout.hpp"
#include "../value.hpp"
#include "../detail/gather_round.hpp"
#include "gather.hpp"
#include "local_ranks.hpp"

namespace skc {

/// The ranks of one node, meeting in the shared base directory (see the header comment).
class LocalFsGather {
public:
    using clock = std::chrono::steady_clock;

    /// `timeout` bounds each wait for the other ranks (arrival, barriers); followers wait for the
    /// leader's outcome `timeout` plus the request's lead budget.
    LocalFsGather(LocalRanks ranks, std::chrono::nanoseconds timeout) : ranks_(std::move(ranks)), timeout_(timeout) {
        if (ranks_.local_world_size == 0)
            throw Error(Errc::invalid_option, "the local world size must be positive",
                        ErrorContext{{}, {}, "LOCAL_WORLD_SIZE"});
        if (ranks_.local_rank >= ranks_.local_world_size)
            throw Error(Errc::invalid_option,
                        "local rank " + std::to_string(ranks_.local_rank) +
                            " is out of range for a local world size of " + std::to_string(ranks_.local_world_size),
                        ErrorContext{{}, {}, "LOCAL_RANK"});
        if (ranks_.run_id.empty())
            throw Error(Errc::invalid_option, "the run id is empty", ErrorContext{{}, {}, "SKC_RUN_ID"});
        if (timeout_ <= std::chrono::nanoseconds{0})
            throw Error(Errc::invalid_argument, "the gather timeout must be positive");
    }

    /// From the environment (local_ranks_from_env); throws when the variables are missing.
    static LocalFsGather from_env(std::chrono::nanoseconds timeout, std::string_view fallback_run_id = {}) {
        std::optional<LocalRanks> r = local_ranks_from_env(fallback_run_id);
        if (!r)
            throw Error(Errc::invalid_option, "LOCAL_WORLD_SIZE and LOCAL_RANK are not set",
                        ErrorContext{{}, {}, "LOCAL_WORLD_SIZE"});
        return LocalFsGather(std::move(*r), timeout);
    }

    LocalFsGather(LocalFsGather&&) noexcept = default;
    LocalFsGather& operator=(LocalFsGather&&) noexcept = default;

    [[nodiscard]] std::size_t local_rank() const noexcept { return ranks_.local_rank; }
    [[nodiscard]] std::size_t local_world_size() const noexcept { return ranks_.local_world_size; }
    [[nodiscard]] const std::string& run_id() const noexcept { return ranks_.run_id; }
    [[nodiscard]] std::chrono::nanoseconds timeout() const noexcept { return timeout_; }

    /// The rendezvous folder of this object's next compile() (for tools and tests).
    [[nodiscard]] std::filesystem::path next_round_dir(const Layout& layout) const {
        return round_dir(layout, round_ + 1);
    }

    Value coordinate(const GatherRequest& req, const LeadFn& lead, const ShareFn& share) {
        detail::LocalFsRound r(ranks_, timeout_, watch_, round_dir(req.layout, ++round_));
        r.claim(req);
        // The leader throws its own error after publishing it; a follower throws its view of it.
        // The outcome is the first barrier: the leader publishes it only once every rank has
        // arrived, and no rank goes on before it is there.
        const Value result = ranks_.local_rank == 0
                                 ? r.lead(req, lead)
                                 : detail::result_or_throw(r.await_outcome(req), "local rank 0 (the leader)");
        try {
            share(result);
        } catch (const std::exception& e) {
            r.fail(e.what());
            throw;
        }
        r.barrier();
        r.leave(req.defer);
        return result;
    }

private:
    [[nodiscard]] std::filesystem::path round_dir(const Layout& layout, std::size_t round) const {
        char host[256] = {};
        if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
        return layout.outputs() / "rendezvous" / detail::path_component(ranks_.run_id) / detail::path_component(host) /
               ("round-" + std::to_string(round));
    }

    LocalRanks ranks_;
    std::chrono::nanoseconds timeout_;
    std::size_t round_ = 0;
    detail::DirWatch watch_;  // the current round's folder; one inotify instance for every round
};

static_assert(GatherPolicy<LocalFsGather>);

}  // namespace skc
