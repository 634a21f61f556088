// tests/support/packing_compiler.hpp: an invoker for StaticKernelCompiler that makes real makeself
// packages of placeholder kernels, and a supply of distinct ops to compile.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <skc/compiler.hpp>
#include <skc/error.hpp>
#include <skc/op_info_io.hpp>
#include <skc/value.hpp>

#include "run_packages.hpp"
#include "test_support.hpp"

namespace skc_test {

using Fn = std::function<skc::CompileResult(const skc::CompileRequest&)>;
using Inv = skc::FunctionInvoker<Fn>;

/// An invoker that packs one placeholder kernel per op info file it is given into a real makeself
/// package, as a kernel compiler would; counts its calls and remembers the requests. It fails on
/// the ops in `bad` (naming them in failed_ops.json when `name_bad`), and on every call with
/// `fail_with` when that is set.
struct PackingCompiler {
    int calls = 0;
    std::vector<skc::CompileRequest> requests;
    bool fail = false;
    std::optional<skc::Errc> fail_with;
    std::unordered_set<skc::Digest, skc::DigestHash> bad;
    bool name_bad = false;
    std::function<void(const skc::CompileRequest&)> before;  // runs first in each call (progress reports)

    Inv invoker() {
        return Inv(Fn([this](const skc::CompileRequest& r) {
            ++calls;
            requests.push_back(r);
            if (before) before(r);
            if (fail) throw skc::Error(skc::Errc::compile_failed, "the compiler exited with status 1");
            if (fail_with) throw skc::Error(*fail_with, "the compiler was stopped");
            const std::vector<skc::LoadedOp> ops = skc::read_op_info_dir(r.json_dir).ops;
            skc::Array named;
            for (const skc::LoadedOp& op : ops)
                if (bad.count(skc::digest(op.record)) != 0)
                    named.push_back(skc::Value(skc::Object{{"file", skc::Value(op.path.filename().string())},
                                                           {"message", skc::Value("no kernel for this shape")}}));
            if (!named.empty()) {
                if (name_bad)
                    spit(r.output_dir / "failed_ops.json",
                         skc::dump_json(skc::Value(skc::Object{{"format", skc::Value("skc-failed-ops/1")},
                                                               {"ops", skc::Value(std::move(named))}})));
                throw skc::Error(skc::Errc::compile_failed, "the compiler exited with status 1: no kernel for a shape");
            }
            std::vector<PackagedKernel> kernels;
            int i = 0;
            for (const skc::LoadedOp& op : ops) {
                const std::string file = "kernels/k" + std::to_string(i++) + ".so";
                kernels.push_back({skc::digest(op.record).hex(), op.record.op_type, file, "kernel " + file + "\n"});
            }
            skc::CompileResult res;
            res.package = make_package(
                r.output_dir, "static_kernel_" + skc::timestamp(std::chrono::system_clock::now()), kernels, r.device);
            return res;
        }));
    }
};

/// `n` distinct MatMulV2 ops.
inline std::vector<skc::OpRecord> many_ops(std::size_t n) {
    const skc::OpRecord base = skc::read_op_info(example_ops_dir() / "MatMulV2_float_ND_32_64_0.json");
    std::vector<skc::OpRecord> out;
    for (std::size_t i = 0; i < n; ++i) {
        skc::OpRecord r = base;
        std::get<skc::TensorDesc>(r.inputs[0]).shape = skc::RuntimeShape{static_cast<std::int64_t>(i + 1), 64};
        out.push_back(std::move(r));
    }
    return out;
}

}  // namespace skc_test
