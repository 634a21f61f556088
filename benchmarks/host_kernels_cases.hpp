// benchmarks/host_kernels_cases.hpp: the ops and shapes of the host kernel benchmark.
//
// Shared by the generator (host_kernels_gen.cpp, run at build time: it writes the static kernels
// of these cases into one C++ file) and the benchmark (host_kernels_bench.cpp, which runs them
// beside the generic kernels). Both walk cases() in the same order; kernel i of the generated
// table belongs to case i, and the generated file records the case names so the benchmark can
// check that the two agree.
//
// The shapes are those of one transformer block as the demo runs it: seq S tokens, hidden H,
// 4 heads of size D = H / 4, feed-forward width F = 4 H. Small: S = 64, H = 128; medium: S = 256,
// H = 512.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <skc/op_record.hpp>
#include <skc/value.hpp>

namespace skc_bench {

/// How OpenBLAS computes the same product (cblas_sgemm per batch), when it can.
struct GemmShape {
    std::int64_t batch = 0;  // 0: no OpenBLAS counterpart
    std::int64_t m = 0, k = 0, n = 0;
    bool tb = false;  // the second operand is stored [N, K]
};

struct HostCase {
    std::string op;     // row label, e.g. "MatMulV2" or "BatchMatMulV2 QK^T"
    std::string size;   // "small" or "medium"
    std::string shape;  // shapes in words, for the table
    bool demo = true;   // one of the demo's ops (counted in the geometric mean)
    skc::OpRecord record;
    GemmShape gemm;
    [[nodiscard]] std::string name() const { return op + "/" + size; }
};

namespace detail {

inline skc::TensorDesc tensor(skc::RuntimeShape shape, std::string dtype = "float") {
    return skc::plain_tensor(std::move(shape), std::move(dtype));
}

inline skc::Attr attr(std::string name, std::string dtype, skc::Value v) {
    skc::Attr a;
    a.name = std::move(name);
    a.dtype = std::move(dtype);
    a.value = std::move(v);
    return a;
}

inline skc::OpRecord make(std::string type, std::vector<skc::TensorSlot> in, std::vector<skc::TensorSlot> out,
                          std::vector<skc::Attr> attrs = {}) {
    return skc::make_op(std::move(type), std::move(in), std::move(out), std::move(attrs));
}

inline std::string dims(const skc::RuntimeShape& s) {
    std::string out = "[";
    for (std::size_t i = 0; i < s.rank(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
    return out + "]";
}

inline skc::Array int_array(const std::vector<std::int64_t>& v) {
    skc::Array a;
    for (std::int64_t x : v) a.emplace_back(x);
    return a;
}

}  // namespace detail

/// Every case, in registration order: for each op, small then medium.
inline std::vector<HostCase> cases() {
    using detail::attr;
    using detail::dims;
    using detail::make;
    using detail::tensor;
    using skc::RuntimeShape;
    struct Size {
        const char* name;
        std::int64_t s, h;
    };
    const Size sizes[] = {{"small", 64, 128}, {"medium", 256, 512}};
    std::vector<HostCase> c;
    auto add = [&](std::string op, const Size& z, std::string shape, skc::OpRecord r, GemmShape g = {},
                   bool demo = true) {
        c.push_back(HostCase{std::move(op), z.name, std::move(shape), demo, std::move(r), g});
    };
    for (const Size& z : sizes) {  // x [S, H] . W [H, H]: a projection
        const std::int64_t S = z.s, H = z.h;
        add("MatMulV2", z, dims({S, H}) + " x " + dims({H, H}),
            make(
                "MatMulV2", {tensor({S, H}), tensor({H, H}), std::monostate{}, std::monostate{}}, {tensor({S, H})},
                {attr("transpose_x1", "bool", false), attr("transpose_x2", "bool", false), attr("offset_x", "int", 0)}),
            GemmShape{1, S, H, H, false});
    }
    for (const Size& z : sizes) {  // Q [4, S, D] . K [4, S, D]^T: attention scores
        const std::int64_t S = z.s, D = z.h / 4;
        add("BatchMatMulV2 QK^T", z, dims({4, S, D}) + " x " + dims({4, S, D}) + "^T",
            make("BatchMatMulV2", {tensor({4, S, D}), tensor({4, S, D})}, {tensor({4, S, S})},
                 {attr("adj_x1", "bool", false), attr("adj_x2", "bool", true)}),
            GemmShape{4, S, D, S, true});
    }
    for (const Size& z : sizes) {  // P [4, S, S] . V [4, S, D]: attention output
        const std::int64_t S = z.s, D = z.h / 4;
        add("BatchMatMulV2 PV", z, dims({4, S, S}) + " x " + dims({4, S, D}),
            make("BatchMatMulV2", {tensor({4, S, S}), tensor({4, S, D})}, {tensor({4, S, D})},
                 {attr("adj_x1", "bool", false), attr("adj_x2", "bool", false)}),
            GemmShape{4, S, S, D, false});
    }
    for (const Size& z : sizes) {  // residual connection
        const RuntimeShape x{z.s, z.h};
        add("Add", z, dims(x) + " + " + dims(x), make("Add", {tensor(x), tensor(x)}, {tensor(x)}));
    }
    for (const Size& z : sizes) {  // scores scaled by 1/sqrt(D)
        const RuntimeShape x{4, z.s, z.s};
        add("Mul", z, dims(x) + " * scalar", make("Mul", {tensor(x), tensor({})}, {tensor(x)}));
    }
    for (const Size& z : sizes) {  // feed-forward activation
        const RuntimeShape x{z.s, 4 * z.h};
        add("Gelu", z, dims(x), make("Gelu", {tensor(x)}, {tensor(x)}));
    }
    for (const Size& z : sizes) {  // attention probabilities
        const RuntimeShape x{4, z.s, z.s};
        add("SoftmaxV2", z, dims(x) + ", last axis",
            make("SoftmaxV2", {tensor(x)}, {tensor(x)}, {attr("axes", "list_int", detail::int_array({-1}))}));
    }
    for (const Size& z : sizes) {  // y, mean and variance
        const RuntimeShape x{z.s, z.h}, st{z.s, 1};
        add("LayerNorm", z, dims(x) + ", last axis",
            make("LayerNorm", {tensor(x), tensor({z.h}), tensor({z.h})}, {tensor(x), tensor(st), tensor(st)},
                 {attr("begin_norm_axis", "int", -1), attr("begin_params_axis", "int", -1),
                  attr("epsilon", "float", 1e-5)}));
    }
    for (const Size& z : sizes) {  // split heads: [S, 4, D] -> [4, S, D]
        const std::int64_t S = z.s, D = z.h / 4;
        skc::TensorDesc perm = tensor({3}, "int64");
        perm.const_data = detail::int_array({1, 0, 2});
        add("Transpose (1,0,2)", z, dims({S, 4, D}) + " -> " + dims({4, S, D}),
            make("Transpose", {tensor({S, 4, D}), perm}, {tensor({4, S, D})}));
    }
    for (const Size& z : sizes) {  // K^T per head: [4, S, D] -> [4, D, S]
        const std::int64_t S = z.s, D = z.h / 4;
        skc::TensorDesc perm = tensor({3}, "int64");
        perm.const_data = detail::int_array({0, 2, 1});
        add("Transpose (0,2,1)", z, dims({4, S, D}) + " -> " + dims({4, D, S}),
            make("Transpose", {tensor({4, S, D}), perm}, {tensor({4, D, S})}));
    }
    for (const Size& z : sizes) {  // not in the demo's block; a supported op all the same
        const RuntimeShape x{z.s, 4 * z.h};
        add("Relu", z, dims(x), make("Relu", {tensor(x)}, {tensor(x)}), {}, false);
    }
    // Not in the demo's block either: what the torch plugin records for a Linear layer (weight
    // stored [out, in], transposed, with a bias), a feed-forward layer with its activation fused,
    // and torch's layer_norm.
    for (const Size& z : sizes) {  // x [S, H] . W [H, H]^T + b
        const std::int64_t S = z.s, H = z.h;
        add("MatMulV2 Linear", z, dims({S, H}) + " x " + dims({H, H}) + "^T + " + dims({H}),
            make("MatMulV2", {tensor({S, H}), tensor({H, H}), tensor({H}), std::monostate{}}, {tensor({S, H})},
                 {attr("transpose_x1", "bool", false), attr("transpose_x2", "bool", true), attr("offset_x", "int", 0)}),
            {}, false);
    }
    for (const Size& z : sizes) {  // h [S, 4H] . W [4H, H]: a feed-forward layer's second product, K = 4H
        const std::int64_t S = z.s, H = z.h;
        add("MatMulV2 FFN down", z, dims({S, 4 * H}) + " x " + dims({4 * H, H}),
            make(
                "MatMulV2", {tensor({S, 4 * H}), tensor({4 * H, H}), std::monostate{}, std::monostate{}},
                {tensor({S, H})},
                {attr("transpose_x1", "bool", false), attr("transpose_x2", "bool", false), attr("offset_x", "int", 0)}),
            GemmShape{1, S, 4 * H, H, false}, false);
    }
    for (const Size& z : sizes) {  // gelu(x [S, H] . W [H, 4H] + b), erf form
        const std::int64_t S = z.s, H = z.h;
        add("FusedMatMul gelu_erf", z, dims({S, H}) + " x " + dims({H, 4 * H}) + " + " + dims({4 * H}),
            make("FusedMatMul", {tensor({S, H}), tensor({H, 4 * H}), tensor({4 * H}), std::monostate{}},
                 {tensor({S, 4 * H})},
                 {attr("transpose_x1", "bool", false), attr("transpose_x2", "bool", false),
                  attr("fused_op_type", "str", std::string("gelu_erf"))}),
            {}, false);
    }
    for (const Size& z : sizes) {  // y, mean and rstd as aten's native_layer_norm gives them
        const RuntimeShape x{z.s, z.h}, st{z.s, 1};
        add("LayerNormV3", z, dims(x) + ", last axis",
            make("LayerNormV3", {tensor(x), tensor({z.h}), tensor({z.h})}, {tensor(x), tensor(st), tensor(st)},
                 {attr("begin_norm_axis", "int", -1), attr("begin_params_axis", "int", -1),
                  attr("epsilon", "float", 1e-5)}),
            {}, false);
    }
    // What the torch plugin records for an RMSNorm's mean of squares, a concatenation, a model's
    // log-probabilities and their gradient, and an attention's causal mask (where, masked_fill).
    for (const Size& z : sizes) {  // mean over the last dim, keepdim
        const RuntimeShape x{z.s, z.h};
        skc::TensorDesc axes = tensor({1}, "int64");
        axes.const_data = detail::int_array({1});
        add("ReduceMean", z, dims(x) + ", last axis",
            make("ReduceMean", {tensor(x), axes}, {tensor({z.s, 1})},
                 {attr("keep_dims", "bool", true), attr("noop_with_empty_axes", "bool", false)}),
            {}, false);
    }
    for (const Size& z : sizes) {  // two [S, H] side by side
        const RuntimeShape x{z.s, z.h};
        add("ConcatD", z, dims(x) + " ++ " + dims(x) + ", last axis",
            make("ConcatD", {std::vector<skc::TensorDesc>{tensor(x), tensor(x)}}, {tensor({z.s, 2 * z.h})},
                 {attr("concat_dim", "int", -1), attr("N", "int", 2)}),
            {}, false);
    }
    for (const Size& z : sizes) {  // log-probabilities over a vocabulary of 4H
        const RuntimeShape x{z.s, 4 * z.h};
        add("LogSoftmaxV2", z, dims(x) + ", last axis",
            make("LogSoftmaxV2", {tensor(x)}, {tensor(x)}, {attr("axes", "list_int", detail::int_array({-1}))}), {},
            false);
    }
    for (const Size& z : sizes) {
        const RuntimeShape x{z.s, 4 * z.h};
        add("LogSoftmaxGrad", z, dims(x) + ", last axis",
            make("LogSoftmaxGrad", {tensor(x), tensor(x)}, {tensor(x)},
                 {attr("axis", "list_int", detail::int_array({-1}))}),
            {}, false);
    }
    for (const Size& z : sizes) {  // where(causal [S, S], scores [4, S, S], a number)
        const RuntimeShape x{4, z.s, z.s};
        add("SelectV2", z, dims({z.s, z.s}) + " ? " + dims(x) + " : scalar",
            make("SelectV2", {tensor({z.s, z.s}, "bool"), tensor(x), tensor({})}, {tensor(x)}), {}, false);
    }
    for (const Size& z : sizes) {  // scores [4, S, S] masked_fill(causal [S, S], value)
        const RuntimeShape x{4, z.s, z.s};
        add("MaskedFill", z, dims(x) + " with " + dims({z.s, z.s}),
            make("MaskedFill", {tensor(x), tensor({z.s, z.s}, "bool"), tensor({})}, {tensor(x)}), {}, false);
    }
    return c;
}

}  // namespace skc_bench
