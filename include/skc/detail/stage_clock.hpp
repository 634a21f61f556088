// skc/detail/stage_clock.hpp: the stage times of a CompileReport.
#pragma once

#include <chrono>
#include <string>
#include <utility>

#include "../compile_report.hpp"

namespace skc::detail {

/// Times the stages of one compile() into its report, each stage from the end of the one before.
class StageClock {
public:
    explicit StageClock(CompileReport& r) : r_(r), t_(std::chrono::steady_clock::now()) {}
    /// Ends the current stage as `name` (added to it when the stage was timed before).
    void lap(std::string name) {
        const auto now = std::chrono::steady_clock::now();
        add(std::move(name), now - t_);
        t_ = now;
    }
    /// Ends the current stage as two: `inner` took `inner_time` of it, `outer` the rest (each added
    /// to the stage of that name when it was timed before).
    void split(std::string outer, std::string inner, std::chrono::nanoseconds inner_time) {
        const auto now = std::chrono::steady_clock::now();
        const std::chrono::nanoseconds all = now - t_;
        add(std::move(outer), all > inner_time ? all - inner_time : std::chrono::nanoseconds{0});
        add(std::move(inner), inner_time);
        t_ = now;
    }

private:
    void add(std::string name, std::chrono::nanoseconds d) {
        for (auto& [n, t] : r_.stages)
            if (n == name) {
                t += d;
                return;
            }
        r_.stages.emplace_back(std::move(name), d);
    }

    CompileReport& r_;
    std::chrono::steady_clock::time_point t_;
};

}  // namespace skc::detail
