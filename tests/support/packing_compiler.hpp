// tests/support/packing_compiler.hpp: an invoker for StaticKernelCompiler that makes real makeself
// packages of placeholder kernels, and a supply of distinct ops to compile.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <skc/compiler.hpp>
#include <skc/error.hpp>
#include <skc/op_info_io.hpp>

#include "run_packages.hpp"
#include "test_support.hpp"

namespace skc_test {

using Fn = std::function<skc::CompileResult(const skc::CompileRequest&)>;
using Inv = skc::FunctionInvoker<Fn>;

/// An invoker that packs one placeholder kernel per op info file it is given into a real makeself
/// package, as a kernel compiler would; counts its calls and remembers the requests.
struct PackingCompiler {
    int calls = 0;
    std::vector<skc::CompileRequest> requests;
    bool fail = false;
    std::function<void(const skc::CompileRequest&)> before;  // runs first in each call (progress reports)

    Inv invoker() {
        return Inv(Fn([this](const skc::CompileRequest& r) {
            ++calls;
            requests.push_back(r);
            if (before) before(r);
            if (fail) throw skc::Error(skc::Errc::compile_failed, "the compiler exited with status 1");
            std::vector<PackagedKernel> kernels;
            int i = 0;
            for (const skc::LoadedOp& op : skc::read_op_info_dir(r.json_dir).ops) {
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
