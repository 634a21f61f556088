// skc/ext/mpi.hpp: skc::MpiGather, a GatherPolicy for ranks on several nodes, over MPI.
//
// Opt-in: this header includes <mpi.h>, so only programs built with MPI's flags include it (meson:
// `dependency('mpi', language: 'cpp', include_type: 'system')`). The rest of skc never includes it.
// Include MPI's headers as system headers (-isystem): Open MPI's C++ bindings, which its <mpi.h>
// pulls in, are not warning-free at -Wextra.
//
// docs/spec.md section 10 with MPI as the transport. The constructor (collective over the communicator it
// is given) duplicates that communicator and splits it into node-local groups with
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), or by the colour a `node_of` hook returns (tests split
// one machine into fake nodes). Node-local rank 0, the lowest rank of the node, is its leader. Each
// coordinate() is one round on the node communicator:
//   - every follower sends the leader its selected ops: per op the digest, the file name and the
//     file's bytes. The bytes, not a re-serialised record: the union then holds exactly the files
//     each rank selected (what it would have compiled alone, what LocalFsGather links), nothing is
//     parsed twice, and no follower folder needs to be visible to the leader;
//   - the leader decides the union with detail::OpUnion (dedup by content digest, `_1`, `_2` for
//     clashing names; `req.run.gathered()` is written only on a miss), runs `lead` once per node and sends every
//     follower the outcome (detail::ok_outcome / detail::error_outcome as JSON text); a follower raises an error
//     outcome with detail::result_or_throw;
//   - two barriers around `share`, each a status message from every follower to the leader and a
//     verdict back, so that a rank whose `share` throws makes the others fail with
//     Errc::peer_failed instead of waiting (an MPI_Ibarrier cannot carry a failure).
// One compile per key across nodes comes from the cache: the leaders of all nodes share the base
// directory, and IndexCache's single flight makes a second leader with the same key wait for the
// first's compile. Each leader installs into its node's op library; followers only hold the install.
//
// Every wait is bounded: receives are MPI_Improbe/MPI_Imrecv and sends MPI_Isend, polled until a
// deadline, never a blocking call. Arrival of the ops and each barrier are bounded by `timeout`;
// followers wait for the outcome `timeout` plus the request's lead budget, and for a barrier's
// verdict twice `timeout` (the leader's own wait for the slowest rank comes first). A wait that
// ends throws Errc::timeout naming the ranks (node-local and in the communicator) that were awaited.
// Message tags carry the round number, so messages left over from a failed round are never taken
// for a later round's.
//
// The caller owns MPI: MpiGather never calls MPI_Init or MPI_Finalize. Construct it after
// MPI_Init (any thread level; it calls MPI only from the thread that calls its members, so with
// MPI_THREAD_FUNNELED or SERIALIZED that must be the thread allowed to) and destroy it before
// MPI_Finalize: the destructor frees its communicators. Every rank of the communicator constructs
// it and calls coordinate() the same number of times.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../error.hpp"
#include "../op_info_io.hpp"
#include "../op_set.hpp"
#include "../detail/gather_round.hpp"
#include "../policy/gather.hpp"
#include "../value.hpp"

namespace skc {

namespace detail {

[[noreturn]] inline void throw_mpi(const char* call, int rc) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
    const std::string why = len > 0 ? std::string(text, static_cast<std::size_t>(len)) : "error " + std::to_string(rc);
    throw Error(Errc::io_error, std::string(call) + " failed: " + why);
}

inline void check_mpi(int rc, const char* call) {
    if (rc != MPI_SUCCESS) throw_mpi(call, rc);
}

/// Buffers of sends and receives that never completed when their MpiGather went: MPI may still use
/// them, so they live until the process ends (reachable, not leaked).
inline void keep_mpi_buffer(std::shared_ptr<std::string> buffer) {
    static std::mutex m;
    static std::vector<std::shared_ptr<std::string>> kept;
    const std::lock_guard<std::mutex> lock(m);
    kept.push_back(std::move(buffer));
}

/// `s` with every byte that is not part of valid UTF-8 replaced by '?': error messages quote paths,
/// and JSON text (the outcome) must be UTF-8.
inline std::string utf8_or_replaced(std::string s) {
    std::size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
        bool ok = n > 0 && i + n <= s.size();
        for (std::size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
        if (ok && n == 2) ok = c >= 0xc2;  // no overlong forms
        if (ok && n == 3) {
            const auto c1 = static_cast<unsigned char>(s[i + 1]);
            ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);  // no overlong forms, no surrogates
        }
        if (ok && n == 4) {
            const auto c1 = static_cast<unsigned char>(s[i + 1]);
            ok = c <= 0xf4 && !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
        }
        if (!ok) {
            s[i] = '?';
            n = 1;
        }
        i += n;
    }
    return s;
}

}  // namespace detail

/// The ranks of a communicator, split into nodes, meeting over MPI (see the header comment).
class MpiGather {
public:
    using clock = std::chrono::steady_clock;
    /// The node (any non-negative colour) of the rank with this rank in the communicator.
    using NodeOf = std::function<int(int rank)>;

    /// Collective over `comm`: every rank constructs its MpiGather with the same `timeout` and an
    /// equivalent `node_of`. `timeout` bounds each wait for other ranks (see the header comment).
    /// `node_of`, when set, replaces the shared-memory split (tests: fake nodes on one machine); it
    /// must return the same colour for the ranks of one node and never a negative one.
    /// Throws Errc::invalid_argument when MPI is not initialised (or already finalised), `comm` is
    /// MPI_COMM_NULL, `timeout` is not positive, or `node_of` fails or gives a negative colour on
    /// any rank (every rank throws then); Errc::io_error when an MPI call fails.
    MpiGather(MPI_Comm comm, std::chrono::nanoseconds timeout, NodeOf node_of = {}) : timeout_(timeout) {
        int initialized = 0, finalized = 0;
        detail::check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
        detail::check_mpi(MPI_Finalized(&finalized), "MPI_Finalized");
        if (!initialized || finalized)
            throw Error(Errc::invalid_argument,
                        "MpiGather needs MPI to be initialised: the caller calls MPI_Init before constructing it and "
                        "MPI_Finalize after destroying it");
        if (comm == MPI_COMM_NULL) throw Error(Errc::invalid_argument, "MpiGather was given MPI_COMM_NULL");
        if (timeout_ <= std::chrono::nanoseconds{0})
            throw Error(Errc::invalid_argument, "the gather timeout must be positive");
        try {
            detail::check_mpi(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
            detail::check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
            detail::check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
            detail::check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
            split(node_of);
        } catch (...) {
            free_comms();
            throw;
        }
    }

    MpiGather(const MpiGather&) = delete;
    MpiGather& operator=(const MpiGather&) = delete;

    MpiGather(MpiGather&& o) noexcept { take(o); }
    MpiGather& operator=(MpiGather&& o) noexcept {
        if (this != &o) {
            release();
            take(o);
        }
        return *this;
    }

    /// Frees the communicators. Sends or receives that never completed (a failed round) are
    /// cancelled where MPI can, and their buffers are kept for the life of the process.
    ~MpiGather() { release(); }

    [[nodiscard]] std::size_t local_rank() const noexcept { return static_cast<std::size_t>(local_rank_); }
    [[nodiscard]] std::size_t local_world_size() const noexcept { return static_cast<std::size_t>(local_size_); }
    /// This rank's node, 0 to nodes() - 1, in the order of the nodes' lowest ranks.
    [[nodiscard]] std::size_t node() const noexcept { return node_index_; }
    [[nodiscard]] std::size_t nodes() const noexcept { return nodes_; }
    /// This rank in the communicator given to the constructor, and its size.
    [[nodiscard]] int rank() const noexcept { return rank_; }
    [[nodiscard]] int world_size() const noexcept { return size_; }
    /// The rank (in the given communicator) of each node-local rank of this node; [0] is the leader.
    [[nodiscard]] const std::vector<int>& node_ranks() const noexcept { return node_ranks_; }
    [[nodiscard]] std::chrono::nanoseconds timeout() const noexcept { return timeout_; }

    Value coordinate(const GatherRequest& req, const LeadFn& lead, const ShareFn& share) {
        if (comm_ == MPI_COMM_NULL) throw Error(Errc::invalid_argument, "this MpiGather was moved from");
        reap();
        const int base = k_tag_kinds * static_cast<int>(round_++ % k_tag_rounds);
        Value outcome;
        if (local_rank_ == 0) outcome = lead_round(req, lead, base);
        else {
            send_ops(req, base + k_ops);
            outcome = await_outcome(req.lead_budget, base + k_outcome);
        }
        // The leader's own error was thrown by lead_round after it sent the outcome.
        Value result;
        if (local_rank_ == 0) {
            if (const Value* r = outcome.find("result")) result = *r;
        } else {
            result = detail::result_or_throw(outcome, leader_name());
        }
        barrier(base + k_b1_status, base + k_b1_verdict, "first", nullptr);
        try {
            share(result);
        } catch (const std::exception& e) {
            const std::string what = e.what();
            try {
                barrier(base + k_b2_status, base + k_b2_verdict, "second", &what);
            } catch (const Error&) {
                // This rank's own error is what it reports.
            }
            throw;
        }
        barrier(base + k_b2_status, base + k_b2_verdict, "second", nullptr);
        reap();
        return result;
    }

private:
    // Message kinds; the tag is kind + k_tag_kinds * (round mod k_tag_rounds), below 32767 (the
    // smallest MPI_TAG_UB the standard allows).
    static constexpr int k_ops = 0, k_outcome = 1, k_b1_status = 2, k_b1_verdict = 3, k_b2_status = 4, k_b2_verdict = 5;
    static constexpr int k_tag_kinds = 6;
    static constexpr std::size_t k_tag_rounds = 5000;

    struct Pending {
        MPI_Request request = MPI_REQUEST_NULL;
        std::shared_ptr<std::string> buffer;
    };

    using Backoff = detail::Backoff;

    static clock::time_point deadline_after(std::chrono::nanoseconds d) {
        const clock::time_point now = clock::now();
        if (d > clock::time_point::max() - now) return clock::time_point::max();
        return now + std::chrono::duration_cast<clock::duration>(d);
    }

    static std::chrono::nanoseconds sum(std::chrono::nanoseconds a, std::chrono::nanoseconds b) {
        if (b > std::chrono::nanoseconds{0} && a > std::chrono::nanoseconds::max() - b)
            return std::chrono::nanoseconds::max();
        return a + b;
    }

    void split(const NodeOf& node_of) {
        if (node_of) {
            int colour = -1;
            try {
                colour = node_of(rank_);
            } catch (...) {
                colour = -1;  // reported below on every rank, not thrown here while the others split
            }
            // Every rank learns whether any colour is bad before anyone enters the split.
            const int bad_here = colour < 0 ? 1 : 0;
            int bad_anywhere = 0;
            detail::check_mpi(MPI_Allreduce(&bad_here, &bad_anywhere, 1, MPI_INT, MPI_MAX, comm_), "MPI_Allreduce");
            if (bad_anywhere)
                throw Error(Errc::invalid_argument,
                            bad_here ? "node_of failed or gave a negative node for rank " + std::to_string(rank_)
                                     : std::string("node_of failed or gave a negative node on another rank"));
            detail::check_mpi(MPI_Comm_split(comm_, colour, rank_, &node_comm_), "MPI_Comm_split");
        } else {
            detail::check_mpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_comm_),
                              "MPI_Comm_split_type");
        }
        detail::check_mpi(MPI_Comm_set_errhandler(node_comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
        detail::check_mpi(MPI_Comm_rank(node_comm_, &local_rank_), "MPI_Comm_rank");
        detail::check_mpi(MPI_Comm_size(node_comm_, &local_size_), "MPI_Comm_size");
        // The key is the rank, so node-local ranks follow the ranks and the leader is the lowest.
        node_ranks_.assign(static_cast<std::size_t>(local_size_), -1);
        detail::check_mpi(MPI_Allgather(&rank_, 1, MPI_INT, node_ranks_.data(), 1, MPI_INT, node_comm_),
                          "MPI_Allgather");
        std::vector<int> leaders(static_cast<std::size_t>(size_), 0);
        const int leader_here = local_rank_ == 0 ? 1 : 0;
        detail::check_mpi(MPI_Allgather(&leader_here, 1, MPI_INT, leaders.data(), 1, MPI_INT, comm_), "MPI_Allgather");
        nodes_ = static_cast<std::size_t>(std::count(leaders.begin(), leaders.end(), 1));
        node_index_ = static_cast<std::size_t>(std::count(leaders.begin(), leaders.begin() + node_ranks_[0], 1));
    }

    // ---- messages (defined in ext/mpi_round.hpp) -----------------------------------------------

    /// Sends `text` to node-local rank `local` (MPI_Isend; completed later by reap()).
    void send(int local, int tag, std::string text);
    /// The message from node-local rank `local` with this tag, when one has arrived (its transfer is
    /// then waited for until `deadline`).
    std::optional<std::string> try_receive(int local, int tag, clock::time_point deadline);

    /// Drops the requests that have completed (and lets MPI progress the others).
    void reap() {
        std::erase_if(pending_, [](Pending& p) {
            int done = 0;
            if (MPI_Test(&p.request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
            return done != 0;
        });
    }

    // ---- names ----------------------------------------------------------------------------------

    [[nodiscard]] std::string local_name(int local) const {
        std::string s = "local rank " + std::to_string(local);
        if (local >= 0 && local < local_size_)
            s += " (rank " + std::to_string(node_ranks_[static_cast<std::size_t>(local)]) + ")";
        return s;
    }
    [[nodiscard]] std::string leader_name() const {
        return "local rank 0 (the leader, rank " + std::to_string(node_ranks_.empty() ? -1 : node_ranks_[0]) + ")";
    }
    [[nodiscard]] std::string list_local(const std::vector<int>& locals) const {
        std::string s = locals.size() == 1 ? "local rank " : "local ranks ";
        std::vector<std::size_t> ks(locals.begin(), locals.end());
        s += detail::list_ranks(ks) + " (";
        s += locals.size() == 1 ? "rank " : "ranks ";
        std::vector<std::size_t> rs;
        for (int k : locals) rs.push_back(static_cast<std::size_t>(node_ranks_[static_cast<std::size_t>(k)]));
        return s + detail::list_ranks(rs) + ")";
    }
    [[nodiscard]] std::string where() const {
        return "node " + std::to_string(node_index_) + " of " + std::to_string(nodes_);
    }

    // ---- the ops and the outcome (defined in ext/mpi_round.hpp) --------------------------------

    // The ops message: "skc-mpi-ops/1\n", then per op "<digest hex> <name bytes> <text bytes>\n"
    // followed by the name and the text; or "skc-mpi-ops-error/1\n<message>" when the rank could
    // not read its ops (the leader then fails the round at once instead of waiting).
    static constexpr std::string_view k_ops_magic = "skc-mpi-ops/1\n";
    static constexpr std::string_view k_ops_error_magic = "skc-mpi-ops-error/1\n";

    /// A follower: sends the leader its selected ops (or why it could not read them, then throws).
    void send_ops(const GatherRequest& req, int tag);
    /// The leader: adds the ops of one follower's message to the union.
    void add_ops(detail::OpUnion& u, int local, std::string_view text) const;
    /// Waits for every follower's ops; local rank -> message.
    std::map<int, std::string> await_ops(int tag);
    /// The leader: gather, run `lead`, send the outcome (its error too). Throws the leader's error.
    Value lead_round(const GatherRequest& req, const LeadFn& lead, int base);
    void send_outcome(const std::string& text, int tag) {
        for (int k = 1; k < local_size_; ++k) send(k, tag, text);
    }
    /// A follower: the leader's outcome, within the timeout plus the leader's budget.
    Value await_outcome(std::chrono::nanoseconds lead_budget, int tag);

    // ---- barriers (defined in ext/mpi_round.hpp) -----------------------------------------------

    /// Every rank reaches the barrier, or every rank fails: followers send the leader their status
    /// (`failed`: this rank's `share` threw), the leader answers each with a verdict. A failing rank
    /// only sends (the leader's verdict when it is the leader) and returns; its caller rethrows.
    void barrier(int status_tag, int verdict_tag, const char* which, const std::string* failed);

    // ---- lifetime -------------------------------------------------------------------------------

    void take(MpiGather& o) noexcept {
        comm_ = std::exchange(o.comm_, MPI_COMM_NULL);
        node_comm_ = std::exchange(o.node_comm_, MPI_COMM_NULL);
        rank_ = o.rank_;
        size_ = o.size_;
        local_rank_ = o.local_rank_;
        local_size_ = o.local_size_;
        node_index_ = o.node_index_;
        nodes_ = o.nodes_;
        node_ranks_ = std::move(o.node_ranks_);
        timeout_ = o.timeout_;
        round_ = o.round_;
        pending_ = std::move(o.pending_);
        o.pending_.clear();
    }

    void release() noexcept {
        int finalized = 1;
        if (MPI_Finalized(&finalized) != MPI_SUCCESS) finalized = 1;
        if (!finalized) {
            reap();
            for (Pending& p : pending_) {
                int done = 0;
                if (MPI_Cancel(&p.request) == MPI_SUCCESS &&
                    MPI_Test(&p.request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
                    continue;
                if (p.request != MPI_REQUEST_NULL) MPI_Request_free(&p.request);
                try {
                    detail::keep_mpi_buffer(std::move(p.buffer));
                } catch (...) {
                    // Out of memory while keeping a buffer: nothing better to do than to go on.
                }
            }
        }
        pending_.clear();
        if (!finalized) free_comms();
        comm_ = MPI_COMM_NULL;
        node_comm_ = MPI_COMM_NULL;
    }

    void free_comms() noexcept {
        if (node_comm_ != MPI_COMM_NULL) MPI_Comm_free(&node_comm_);
        if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    }

    MPI_Comm comm_ = MPI_COMM_NULL;
    MPI_Comm node_comm_ = MPI_COMM_NULL;
    int rank_ = 0;
    int size_ = 1;
    int local_rank_ = 0;
    int local_size_ = 1;
    std::size_t node_index_ = 0;
    std::size_t nodes_ = 1;
    std::vector<int> node_ranks_;
    std::chrono::nanoseconds timeout_{0};
    std::size_t round_ = 0;
    std::vector<Pending> pending_;  // sends and receives not known to be complete
};

}  // namespace skc

// The definitions of MpiGather's round: its messages, the ops and the outcome, the barriers.
#include "mpi_round.hpp"

namespace skc {
static_assert(GatherPolicy<MpiGather>);
}  // namespace skc
