// skc/policy/gather.hpp: the GatherPolicy concept and what a gather is given and returns. Its
// models: SingleRank (single_rank.hpp), LocalFsGather for the ranks of a node sharing a base
// directory (local_fs_gather.hpp), skc::MpiGather for ranks on several nodes (ext/mpi.hpp), and
// AnyGather (any_gather.hpp), which picks one at run time.
//
// With several ranks (processes) on a node, one of them, the node's leader, compiles and installs
// for all (docs/spec.md section 10): every rank publishes the op info it selected; the leader gathers the
// union, looks up the cache or compiles once and installs once, and publishes the outcome; then
// every rank passes a barrier, reselects, and passes a barrier again. A gather policy is that
// choreography. StaticKernelCompiler hands it a GatherRequest (this rank's run folder, selected ops
// and compile folder, and the leader's time budget), `lead` (run once per node, on the leader, with
// the gathered set; its Value is published to the node's ranks) and `share` (run on every rank
// between the two barriers with that outcome). coordinate() returns the outcome on every rank, or
// throws skc::Error on every rank: the leader's own error on the leader, Errc::peer_failed naming
// the failed rank on the others, Errc::timeout naming the ranks that never arrived.
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../detail/hash.hpp"
#include "../detail/names.hpp"
#include "../detail/text.hpp"
#include "../error.hpp"
#include "../layout.hpp"
#include "../op_info_io.hpp"
#include "../session_files.hpp"
#include "../value.hpp"

namespace skc {

/// What one rank brings to the gather.
struct GatherRequest {
    const Layout& layout;                     // the base: LocalFsGather's rendezvous lives under it
    const RunLayout& run;                     // this rank's run folder (the leader's holds `_gathered`)
    const std::vector<SelectedOp>& selected;  // this rank's selected ops, named by their file names
    std::filesystem::path compile_dir;        // the folder holding them; empty when none were selected
    std::chrono::nanoseconds lead_budget{0};  // how long the leader's compile and install may take
    /// Blocks until compile_dir holds every selected file (the host writes them in the background,
    /// session_files.hpp) and throws what failed the writing; empty when they are written already.
    /// A policy that reads the files itself calls it first.
    std::function<void()> await_files;
    /// Starts writing them and returns at once: a follower whose leader needs its files (a miss).
    /// The host otherwise starts only once the exchange is over, to keep the disk free for it.
    std::function<void()> start_files;
    /// Runs `job` off the critical path (the host's background writer, after this compile's op info
    /// files; done at the latest by the host's flush() or destruction); empty: run it at once.
    std::function<void(std::function<void()>)> defer;
};

/// The union of a node's (or job's) selected ops, ready to compile.
struct GatheredSet {
    std::filesystem::path dir;       // the folder to give the compiler; empty when the set is empty
    std::vector<Digest> digests;     // content digests, distinct
    std::vector<std::string> names;  // their op info file names in `dir`, in the same order
    std::size_t ranks = 1;           // ranks whose ops it holds
    /// Fills `dir` (links or writes every op's file, waiting for files that ranks still write);
    /// empty when `dir` needs nothing more than the host's own files. The host calls it only on a
    /// miss, before the compiler, and only within `lead`: a cache hit writes and links nothing.
    std::function<void()> materialize;
};

using LeadFn = std::function<Value(const GatheredSet&)>;
using ShareFn = std::function<void(const Value&)>;

/// The requirements of a gather policy, one concept each: GatherPolicy is their conjunction and
/// diagnose_gather() names each one a type misses.
namespace detail {
template <class G>
concept gather_coordinate = requires(G& g, const GatherRequest& r, const LeadFn& lead, const ShareFn& share) {
    { g.coordinate(r, lead, share) } -> std::same_as<Value>;
};
template <class G>
concept gather_ranks = requires(const G& g) {
    { g.local_rank() } -> std::convertible_to<std::size_t>;
    { g.local_world_size() } -> std::convertible_to<std::size_t>;
};
}  // namespace detail

template <class G>
concept GatherPolicy = detail::gather_coordinate<G> && detail::gather_ranks<G>;

namespace detail {
/// One message per requirement of GatherPolicy that `G` misses (a host calls it in one line).
template <class G>
consteval bool diagnose_gather() {
    static_assert(gather_coordinate<G>,
                  "skc: the Gather policy needs a member `Value coordinate(const GatherRequest&, const LeadFn&, "
                  "const ShareFn&)`");
    static_assert(gather_ranks<G>,
                  "skc: the Gather policy needs members `std::size_t local_rank() const` and "
                  "`std::size_t local_world_size() const`");
    return true;
}
}  // namespace detail

}  // namespace skc
