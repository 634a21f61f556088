// skc/policy/single_rank.hpp: SingleRank, the gather (gather.hpp) of a process that runs alone: it
// is its own leader, and nothing is exchanged.
#pragma once

#include <cstddef>

#include "../value.hpp"
#include "gather.hpp"

namespace skc {

/// One process: it is its own leader, nothing is exchanged.
struct SingleRank {
    Value coordinate(const GatherRequest& r, const LeadFn& lead, const ShareFn& share) {
        GatheredSet set;
        if (!r.selected.empty()) set.dir = r.compile_dir;
        set.digests.reserve(r.selected.size());
        set.names.reserve(r.selected.size());
        for (const SelectedOp& e : r.selected) {
            set.digests.push_back(e.digest);
            set.names.push_back(e.name);
        }
        Value out = lead(set);
        share(out);
        return out;
    }
    [[nodiscard]] std::size_t local_rank() const noexcept { return 0; }
    [[nodiscard]] std::size_t local_world_size() const noexcept { return 1; }
};

static_assert(GatherPolicy<SingleRank>);

}  // namespace skc
