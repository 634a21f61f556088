// skc/policy/any_gather.hpp: AnyGather, the gather (gather.hpp) a program uses that runs alone,
// under torchrun or under MPI alike: one chosen at run time.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <memory>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "gather.hpp"
#include "local_fs_gather.hpp"
#include "single_rank.hpp"

namespace skc {

/// A gather chosen at run time. By default from the environment (from_env): the node's ranks through
/// LocalFsGather when LOCAL_WORLD_SIZE and LOCAL_RANK are set (torchrun), else one process
/// (SingleRank); or any other Gather policy given to it (MpiGather). One compiler type serves a
/// program that runs every way: `StaticKernelCompiler<Invoker, with_gather<AnyGather>>`.
class AnyGather {
public:
    /// From the environment, with rank waits bounded by an hour (Options::compile_timeout's default).
    AnyGather() : AnyGather(from_env(std::chrono::hours(1))) {}

    template <class G>
    requires(GatherPolicy<G> && !std::same_as<std::remove_cvref_t<G>, AnyGather>) explicit AnyGather(G gather)
        : gather_(std::make_unique<Model<G>>(std::move(gather))) {}

    /// LocalFsGather when LOCAL_WORLD_SIZE and LOCAL_RANK are set (local_ranks_from_env: an error
    /// when only one is, or when they disagree), else SingleRank. `timeout` bounds the waits for the
    /// other ranks; `run_id`, when the environment names no job, names this one.
    static AnyGather from_env(std::chrono::nanoseconds timeout, std::string_view run_id = {}) {
        if (std::optional<LocalRanks> ranks = local_ranks_from_env(run_id))
            return AnyGather(LocalFsGather(std::move(*ranks), timeout));
        return AnyGather(SingleRank());
    }

    Value coordinate(const GatherRequest& r, const LeadFn& lead, const ShareFn& share) {
        return gather_->coordinate(r, lead, share);
    }
    [[nodiscard]] std::size_t local_rank() const { return gather_->local_rank(); }
    [[nodiscard]] std::size_t local_world_size() const { return gather_->local_world_size(); }

private:
    struct Concept {
        virtual ~Concept() = default;
        virtual Value coordinate(const GatherRequest& r, const LeadFn& lead, const ShareFn& share) = 0;
        [[nodiscard]] virtual std::size_t local_rank() const = 0;
        [[nodiscard]] virtual std::size_t local_world_size() const = 0;
    };
    template <class G>
    struct Model final : Concept {
        explicit Model(G g) : gather(std::move(g)) {}
        Value coordinate(const GatherRequest& r, const LeadFn& lead, const ShareFn& share) override {
            return gather.coordinate(r, lead, share);
        }
        [[nodiscard]] std::size_t local_rank() const override { return gather.local_rank(); }
        [[nodiscard]] std::size_t local_world_size() const override { return gather.local_world_size(); }
        G gather;
    };
    std::unique_ptr<Concept> gather_;
};

static_assert(GatherPolicy<AnyGather>);

}  // namespace skc
