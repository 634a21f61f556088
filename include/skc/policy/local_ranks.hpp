// skc/policy/local_ranks.hpp: who a process is among the ranks of its node (LOCAL_WORLD_SIZE,
// LOCAL_RANK and a run id, as torchrun sets them), for LocalFsGather (policy/local_fs_gather.hpp).
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "../detail/text.hpp"
#include "../error.hpp"

namespace skc {

/// Who this process is among the ranks of its node, and which job it belongs to.
struct LocalRanks {
    std::size_t local_rank = 0;
    std::size_t local_world_size = 1;
    std::string run_id;
};

/// Reads LOCAL_WORLD_SIZE, LOCAL_RANK and the run id (SKC_RUN_ID, else TORCHELASTIC_RUN_ID, else
/// `fallback_run_id`) through `getenv`. Every fault is an Errc::invalid_option error naming the
/// variable and its value. Returns nullopt when neither LOCAL_WORLD_SIZE nor LOCAL_RANK is set
/// (a single-rank job).
inline std::optional<LocalRanks> local_ranks_from_env(
    std::string_view fallback_run_id = {},
    const std::function<const char*(const char*)>& getenv = [](const char* n) { return std::getenv(n); }) {
    const char* size = getenv("LOCAL_WORLD_SIZE");
    const char* rank = getenv("LOCAL_RANK");
    if (!size && !rank) return std::nullopt;
    auto parse = [](const char* name, const char* text, bool positive) -> std::size_t {
        const std::string t = text;
        const bool digits =
            !t.empty() && t.size() <= 9 && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
        const std::size_t v = digits ? static_cast<std::size_t>(std::stoul(t)) : 0;
        if (!digits || (positive && v == 0))
            throw Error(Errc::invalid_option,
                        std::string(name) + "=" + detail::quote(t) + " is not " +
                            (positive ? "a positive integer" : "a non-negative integer"),
                        ErrorContext{{}, {}, name});
        return v;
    };
    auto only_one = [](const char* missing, const char* set, const char* value) {
        return Error(
            Errc::invalid_option,
            std::string(missing) + " is not set, but " + set + " is (" + value + "): a multi-rank job needs both",
            ErrorContext{{}, {}, missing});
    };
    if (!size) throw only_one("LOCAL_WORLD_SIZE", "LOCAL_RANK", rank);
    const std::size_t n = parse("LOCAL_WORLD_SIZE", size, true);
    if (!rank) throw only_one("LOCAL_RANK", "LOCAL_WORLD_SIZE", size);
    const std::size_t k = parse("LOCAL_RANK", rank, false);
    if (k >= n)
        throw Error(Errc::invalid_option,
                    "LOCAL_RANK=" + std::to_string(k) + " is out of range for LOCAL_WORLD_SIZE=" + std::to_string(n) +
                        " (0 to " + std::to_string(n - 1) + ")",
                    ErrorContext{{}, {}, "LOCAL_RANK"});
    LocalRanks r{k, n, {}};
    if (const char* id = getenv("SKC_RUN_ID"); id && *id) r.run_id = id;
    else if (const char* tid = getenv("TORCHELASTIC_RUN_ID"); tid && *tid) r.run_id = tid;
    else r.run_id = std::string(fallback_run_id);
    if (r.run_id.empty())
        throw Error(Errc::invalid_option,
                    "local rank " + std::to_string(k) +
                        ": no run id: set SKC_RUN_ID (or TORCHELASTIC_RUN_ID, as torchrun does) to the same value "
                        "on every rank of the job",
                    ErrorContext{{}, {}, "SKC_RUN_ID"});
    return r;
}

}  // namespace skc
