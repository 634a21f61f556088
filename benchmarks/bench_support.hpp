// benchmarks/bench_support.hpp: what the benchmarks share: a scratch folder, a generated set of
// distinct ops, the options and settings of their compilers, a stand-in compiler for cache hits,
// and a reporter that keeps each case's median for the ratios a suite prints at its end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <stdlib.h>

#include <benchmark/benchmark.h>
#include <skc/compiler.hpp>
#include <skc/op_info_io.hpp>
#include <skc/op_record.hpp>

#include "compiler_fixtures.hpp"

namespace skc_bench {

/// The console output, and each case's median (or only) real time and counters for the ratios.
class RatioReporter : public benchmark::ConsoleReporter {
public:
    void ReportRuns(const std::vector<Run>& runs) override {
        ConsoleReporter::ReportRuns(runs);
        for (const Run& r : runs) {
            if (r.error_occurred) continue;
            const bool median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
            if (median || (r.run_type == Run::RT_Iteration && r.repetitions <= 1)) {
                times.emplace_back(r.run_name.function_name,
                                   r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit));
                for (const auto& [counter, value] : r.counters)
                    counters[r.run_name.function_name][counter] = value.value;
            }
        }
    }
    /// Case `name`'s time in seconds (the last reported), if it ran.
    [[nodiscard]] std::optional<double> time(const std::string& name) const {
        for (auto it = times.rbegin(); it != times.rend(); ++it)
            if (it->first == name) return it->second;
        return std::nullopt;
    }
    [[nodiscard]] std::optional<double> counter(const std::string& name, const std::string& c) const {
        const auto it = counters.find(name);
        if (it == counters.end()) return std::nullopt;
        const auto v = it->second.find(c);
        return v == it->second.end() ? std::nullopt : std::optional<double>(v->second);
    }
    std::vector<std::pair<std::string, double>> times;              // name, seconds; in the order run
    std::map<std::string, std::map<std::string, double>> counters;  // name, counter, value
};

/// A fresh folder under $TMPDIR, removed at scope exit.
struct Scratch {
    std::filesystem::path dir;
    explicit Scratch(const std::string& prefix = "skc-bench") {
        const char* t = std::getenv("TMPDIR");
        std::string tmpl = std::string(t && *t ? t : "/tmp") + "/" + prefix + "-XXXXXX";
        if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
        dir = tmpl;
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    ~Scratch() {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }
};

/// n distinct MatMulV2 instances: the example op (from `op_info_dir`) with its first input's rows
/// varied, 1 to n.
inline std::vector<skc::OpRecord> distinct_ops(std::size_t n, const std::filesystem::path& op_info_dir) {
    const skc::OpRecord base =
        skc::without_bin_fields(skc::read_op_info(op_info_dir / "MatMulV2_float_ND_32_64_0.json"));
    std::vector<skc::OpRecord> out;
    out.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
        skc::OpRecord r = base;
        auto& x = std::get<skc::TensorDesc>(r.inputs[0]);
        x.shape = skc::RuntimeShape{static_cast<std::int64_t>(i + 1), 64};
        auto& y = std::get<skc::TensorDesc>(r.outputs[0]);
        y.shape = skc::RuntimeShape{static_cast<std::int64_t>(i + 1), std::get<skc::TensorDesc>(r.inputs[1]).shape[1]};
        out.push_back(std::move(r));
    }
    return out;
}

using skc_test::options_for;

/// The bench cache namespace; installs into `lib` (none when empty); no log.
inline skc::CompilerSettings settings_for(const std::filesystem::path& lib = {}) {
    return skc_test::settings_for(lib, "bench", "host-cpu");
}

using Fn = std::function<skc::CompileResult(const skc::CompileRequest&)>;

/// Packs nothing real: only a first call's miss runs it, later calls hit.
inline Fn placeholder_compiler() {
    return [](const skc::CompileRequest& r) {
        skc::CompileResult res;
        res.package = r.output_dir / "static_kernel_placeholder.run";
        skc::FilesystemStorage(r.output_dir).write(res.package.filename().string(), "placeholder package\n");
        return res;
    };
}

}  // namespace skc_bench
