// examples/host/plan.hpp: what a host (CPU) kernel needs to know about one recorded op.
//
// analyze() checks an skc::OpRecord against what the host kernels support and reduces it to a
// Plan: the op kind with its sizes and attrs. The generic kernels (dispatch.hpp) and the code
// generator (codegen.hpp) both start from the same Plan, so they agree on what an op means and on
// which ops are supported; an unsupported op gets a one-line reason instead.
//
// Calling convention shared by the generic and the generated kernels: `inputs[i]` is the data of
// input slot i of the record, `outputs[i]` that of output slot i, all float, dense, row-major, and
// no output overlaps an input. Absent (null) slots and value-dependent inputs whose values are
// baked into the kernel (Transpose's perm) are not read: their pointer may be null.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <skc/op_record.hpp>
#include <skc/value.hpp>

namespace skc_host {

/// MatMul / MatMulV2 (batch == 1, a_batch == b_batch == 1) and BatchMatMulV2. With ta the first
/// operand is stored [K, M], with tb the second is stored [N, K]. An operand whose batch is 1 is
/// broadcast over the batch of the other.
struct MatMulPlan {
    std::int64_t batch = 1, a_batch = 1, b_batch = 1;
    std::int64_t m = 0, k = 0, n = 0;
    bool ta = false, tb = false;
};

enum class BinaryKind { add, mul };

/// Add / Mul: y[o * inner + i] = full[o * inner + i] (op) rep[i]. `full` is the input with the
/// output's shape, `rep` the other one (same shape: inner = all; a scalar: inner = 1; trailing dims
/// of the full one: inner = their product).
struct BinaryPlan {
    BinaryKind kind = BinaryKind::add;
    std::int64_t outer = 1, inner = 1;
    std::size_t full = 0, rep = 1;  // input slots
};

enum class UnaryKind { relu, gelu };

struct UnaryPlan {
    UnaryKind kind = UnaryKind::relu;
    std::int64_t n = 0;
};

/// SoftmaxV2 over the last axis of a [rows, cols] view.
struct SoftmaxPlan {
    std::int64_t rows = 0, cols = 0;
};

/// LayerNorm over the last axis, gamma and beta of shape [cols]; outputs y, then optionally mean
/// and variance (biased, over the last axis) of shape [rows] (any shape of that element count).
struct LayerNormPlan {
    std::int64_t rows = 0, cols = 0;
    float epsilon = 1e-5f;
    bool mean_out = false, var_out = false;
};

/// Transpose: y has dims in_dims[perm[0]], ..., in_dims[perm[r-1]].
struct TransposePlan {
    std::vector<std::int64_t> in_dims;
    std::vector<std::int64_t> perm;
};

using Plan = std::variant<MatMulPlan, BinaryPlan, UnaryPlan, SoftmaxPlan, LayerNormPlan, TransposePlan>;

/// The plan of a supported op, or the reason it is not supported.
struct Analysis {
    std::optional<Plan> plan;
    std::string reason;  // empty when plan is set
};

namespace detail {

struct Unsupported {
    std::string reason;
};

[[noreturn]] inline void unsupported(std::string reason) { throw Unsupported{std::move(reason)}; }

inline std::string dims_str(const skc::RuntimeShape& s) {
    std::string out = "[";
    for (std::size_t i = 0; i < s.rank(); ++i) {
        if (i > 0) out += ',';
        out += std::to_string(s[i]);
    }
    out += ']';
    return out;
}

inline std::int64_t count(const skc::RuntimeShape& s) { return s.element_count().value_or(-1); }

/// Formats whose storage is a plain dense row-major array (no private blocked layout).
inline bool plain_format(std::string_view f) {
    for (std::string_view p : {"ND", "NCHW", "NHWC", "NC", "NCL", "NCDHW", "NDHWC", "HWCN", "CHWN"})
        if (f == p) return true;
    return false;
}

/// The tensor in slot i, or nullptr when the slot is absent or null; lists are unsupported.
inline const skc::TensorDesc* slot(const std::vector<skc::TensorSlot>& slots, std::size_t i, std::string_view side) {
    if (i >= slots.size()) return nullptr;
    if (std::holds_alternative<std::vector<skc::TensorDesc>>(slots[i]))
        unsupported(std::string(side) + "[" + std::to_string(i) + "] is a dynamic (list) parameter");
    return std::get_if<skc::TensorDesc>(&slots[i]);
}

inline const skc::TensorDesc& float_tensor(const skc::TensorDesc* t, std::size_t i, std::string_view side) {
    const std::string at = std::string(side) + "[" + std::to_string(i) + "]";
    if (t == nullptr) unsupported(at + " is missing");
    if (t->dtype != "float") unsupported(at + " has dtype " + t->dtype + ": only float is supported");
    if (!plain_format(t->format)) unsupported(at + " has format " + t->format + ": only plain (ND-like) formats are supported");
    if (t->is_view.value_or(false)) unsupported(at + " is a view: only dense tensors are supported");
    const std::int64_t n = count(t->shape);
    if (n <= 0) unsupported(at + " has no elements (shape " + dims_str(t->shape) + ")");
    return *t;
}

inline const skc::TensorDesc& in(const skc::OpRecord& op, std::size_t i) { return float_tensor(slot(op.inputs, i, "inputs"), i, "inputs"); }
inline const skc::TensorDesc& out(const skc::OpRecord& op, std::size_t i) { return float_tensor(slot(op.outputs, i, "outputs"), i, "outputs"); }

/// Slots from `from` on must be absent or null.
inline void no_more(const std::vector<skc::TensorSlot>& slots, std::size_t from, std::string_view side, std::string_view what) {
    for (std::size_t i = from; i < slots.size(); ++i)
        if (slot(slots, i, side) != nullptr)
            unsupported(std::string(side) + "[" + std::to_string(i) + "] is present: " + std::string(what));
}

inline const skc::Attr* find_attr(const skc::OpRecord& op, std::string_view name) {
    if (!op.attrs) return nullptr;
    for (const skc::Attr& a : *op.attrs)
        if (a.name == name) return &a;
    return nullptr;
}

inline bool bool_attr(const skc::OpRecord& op, std::string_view name, bool dflt) {
    const skc::Attr* a = find_attr(op, name);
    if (a == nullptr || a->value.is_null()) return dflt;
    if (!a->value.is_bool()) unsupported("attr " + std::string(name) + " is not a bool");
    return a->value.as_bool();
}

inline std::optional<std::int64_t> int_attr(const skc::OpRecord& op, std::string_view name) {
    const skc::Attr* a = find_attr(op, name);
    if (a == nullptr || a->value.is_null()) return std::nullopt;
    if (a->value.kind() != skc::Kind::integer) unsupported("attr " + std::string(name) + " is not an integer");
    return a->value.as_int();
}

inline std::vector<std::int64_t> int_list(const skc::Value& v, std::string_view what) {
    if (!v.is_array()) unsupported(std::string(what) + " is not a list of integers");
    std::vector<std::int64_t> out;
    for (const skc::Value& e : v.as_array()) {
        if (e.kind() != skc::Kind::integer) unsupported(std::string(what) + " is not a list of integers");
        out.push_back(e.as_int());
    }
    return out;
}

inline void expect_shape(const skc::OpRecord& op, std::size_t i, const skc::RuntimeShape& want) {
    const skc::TensorDesc& y = out(op, i);
    if (!(y.shape == want))
        unsupported("outputs[" + std::to_string(i) + "] has shape " + dims_str(y.shape) + ", expected " + dims_str(want));
}

inline void expect_count(const skc::OpRecord& op, std::size_t i, std::int64_t want) {
    const skc::TensorDesc& y = out(op, i);
    if (count(y.shape) != want)
        unsupported("outputs[" + std::to_string(i) + "] has shape " + dims_str(y.shape) + ", expected " +
                    std::to_string(want) + " elements");
}

inline MatMulPlan plan_matmul(const skc::OpRecord& op, bool batched) {
    const skc::TensorDesc& a = in(op, 0);
    const skc::TensorDesc& b = in(op, 1);
    no_more(op.inputs, 2, "inputs", "bias and offset_w are not supported");
    no_more(op.outputs, 1, "outputs", "only one output is supported");
    if (auto off = int_attr(op, "offset_x"); off && *off != 0) unsupported("offset_x is not 0");
    MatMulPlan p;
    const std::size_t r = batched ? 3 : 2;
    if (a.shape.rank() != r || b.shape.rank() != r)
        unsupported(op.op_type + " needs rank-" + std::to_string(r) + " inputs, got " + dims_str(a.shape) + " and " +
                    dims_str(b.shape));
    p.ta = bool_attr(op, batched ? "adj_x1" : "transpose_x1", false);
    p.tb = bool_attr(op, batched ? "adj_x2" : "transpose_x2", false);
    const std::size_t o = batched ? 1 : 0;
    if (batched) {
        p.a_batch = a.shape[0];
        p.b_batch = b.shape[0];
        if (p.a_batch != p.b_batch && p.a_batch != 1 && p.b_batch != 1)
            unsupported("batch dims " + std::to_string(p.a_batch) + " and " + std::to_string(p.b_batch) + " do not broadcast");
        p.batch = std::max(p.a_batch, p.b_batch);
    }
    p.m = p.ta ? a.shape[o + 1] : a.shape[o];
    p.k = p.ta ? a.shape[o] : a.shape[o + 1];
    const std::int64_t kb = p.tb ? b.shape[o + 1] : b.shape[o];
    p.n = p.tb ? b.shape[o] : b.shape[o + 1];
    if (kb != p.k)
        unsupported("inner dims differ: " + dims_str(a.shape) + " x " + dims_str(b.shape) + " with the transpose attrs given");
    expect_shape(op, 0, batched ? skc::RuntimeShape{p.batch, p.m, p.n} : skc::RuntimeShape{p.m, p.n});
    return p;
}

/// `small` repeats in `big` when, without its leading 1s, it equals the trailing dims of `big`.
inline bool repeats_in(const skc::RuntimeShape& small, const skc::RuntimeShape& big) {
    std::size_t first = 0;
    while (first < small.rank() && small[first] == 1) ++first;
    const std::size_t r = small.rank() - first;
    if (r > big.rank()) return false;
    for (std::size_t i = 0; i < r; ++i)
        if (small[first + i] != big[big.rank() - r + i]) return false;
    return true;
}

inline BinaryPlan plan_binary(const skc::OpRecord& op, BinaryKind kind) {
    const skc::TensorDesc& a = in(op, 0);
    const skc::TensorDesc& b = in(op, 1);
    no_more(op.inputs, 2, "inputs", "only two inputs are supported");
    no_more(op.outputs, 1, "outputs", "only one output is supported");
    const skc::TensorDesc& y = out(op, 0);
    BinaryPlan p;
    p.kind = kind;
    if (y.shape == a.shape && repeats_in(b.shape, a.shape)) {
        p.full = 0, p.rep = 1;
    } else if (y.shape == b.shape && repeats_in(a.shape, b.shape)) {
        p.full = 1, p.rep = 0;  // both ops commute exactly
    } else {
        unsupported("shapes " + dims_str(a.shape) + " and " + dims_str(b.shape) + " -> " + dims_str(y.shape) +
                    ": only equal shapes, a scalar, or trailing-dim broadcast are supported");
    }
    p.inner = count(p.rep == 1 ? b.shape : a.shape);
    p.outer = count(y.shape) / p.inner;
    return p;
}

inline UnaryPlan plan_unary(const skc::OpRecord& op, UnaryKind kind) {
    const skc::TensorDesc& x = in(op, 0);
    no_more(op.inputs, 1, "inputs", "only one input is supported");
    no_more(op.outputs, 1, "outputs", "only one output is supported");
    expect_shape(op, 0, x.shape);
    return UnaryPlan{kind, count(x.shape)};
}

/// The normalised axis list of attr `name` must be exactly {rank - 1} (absent means `dflt`).
inline void last_axis_only(const skc::OpRecord& op, std::string_view name, std::size_t rank) {
    const skc::Attr* a = find_attr(op, name);
    if (a == nullptr || a->value.is_null()) return;
    std::vector<std::int64_t> axes;
    if (a->value.is_array()) axes = int_list(a->value, "attr " + std::string(name));
    else if (a->value.kind() == skc::Kind::integer) axes = {a->value.as_int()};
    else unsupported("attr " + std::string(name) + " is not an axis list");
    const auto r = static_cast<std::int64_t>(rank);
    if (axes.size() != 1 || !(axes[0] == -1 || axes[0] == r - 1))
        unsupported("attr " + std::string(name) + " must name only the last axis");
}

inline SoftmaxPlan plan_softmax(const skc::OpRecord& op) {
    const skc::TensorDesc& x = in(op, 0);
    no_more(op.inputs, 1, "inputs", "only one input is supported");
    no_more(op.outputs, 1, "outputs", "only one output is supported");
    if (x.shape.rank() == 0) unsupported("softmax of a scalar");
    last_axis_only(op, "axes", x.shape.rank());
    if (bool_attr(op, "half_to_float", false)) unsupported("half_to_float is set");
    expect_shape(op, 0, x.shape);
    const std::int64_t cols = x.shape[x.shape.rank() - 1];
    return SoftmaxPlan{count(x.shape) / cols, cols};
}

inline LayerNormPlan plan_layer_norm(const skc::OpRecord& op) {
    const skc::TensorDesc& x = in(op, 0);
    const skc::TensorDesc& g = in(op, 1);
    const skc::TensorDesc& b = in(op, 2);
    no_more(op.inputs, 3, "inputs", "only x, gamma and beta are supported");
    no_more(op.outputs, 3, "outputs", "only y, mean and variance are supported");
    if (x.shape.rank() == 0) unsupported("layer norm of a scalar");
    last_axis_only(op, "begin_norm_axis", x.shape.rank());
    last_axis_only(op, "begin_params_axis", x.shape.rank());
    LayerNormPlan p;
    p.cols = x.shape[x.shape.rank() - 1];
    p.rows = count(x.shape) / p.cols;
    if (count(g.shape) != p.cols || count(b.shape) != p.cols)
        unsupported("gamma/beta shapes " + dims_str(g.shape) + ", " + dims_str(b.shape) + " do not match the last axis " +
                    std::to_string(p.cols));
    if (const skc::Attr* e = find_attr(op, "epsilon"); e != nullptr && !e->value.is_null()) {
        if (!e->value.is_number()) unsupported("attr epsilon is not a number");
        p.epsilon = static_cast<float>(e->value.as_double());
        if (!std::isfinite(p.epsilon) || p.epsilon < 0) unsupported("attr epsilon is not a finite non-negative float");
    }
    expect_shape(op, 0, x.shape);
    p.mean_out = slot(op.outputs, 1, "outputs") != nullptr;
    p.var_out = slot(op.outputs, 2, "outputs") != nullptr;
    if (p.mean_out) expect_count(op, 1, p.rows);
    if (p.var_out) expect_count(op, 2, p.rows);
    return p;
}

inline TransposePlan plan_transpose(const skc::OpRecord& op) {
    const skc::TensorDesc& x = in(op, 0);
    no_more(op.outputs, 1, "outputs", "only one output is supported");
    no_more(op.inputs, 2, "inputs", "only x and perm are supported");
    TransposePlan p;
    p.in_dims.assign(x.shape.begin(), x.shape.end());
    const skc::TensorDesc* perm_in = slot(op.inputs, 1, "inputs");
    if (perm_in != nullptr) {
        if (!perm_in->const_data) unsupported("perm input has no const_data: its values must be known when compiling");
        p.perm = int_list(*perm_in->const_data, "perm const_data");
    } else if (const skc::Attr* a = find_attr(op, "perm"); a != nullptr) {
        p.perm = int_list(a->value, "attr perm");
    } else {
        unsupported("no perm (neither a const_data input nor an attr)");
    }
    const auto r = static_cast<std::int64_t>(p.in_dims.size());
    if (static_cast<std::int64_t>(p.perm.size()) != r)
        unsupported("perm has " + std::to_string(p.perm.size()) + " entries for rank " + std::to_string(r));
    std::vector<bool> seen(p.in_dims.size(), false);
    for (std::int64_t& v : p.perm) {
        if (v < 0) v += r;
        if (v < 0 || v >= r || seen[static_cast<std::size_t>(v)]) unsupported("perm is not a permutation");
        seen[static_cast<std::size_t>(v)] = true;
    }
    skc::RuntimeShape want;
    for (std::int64_t v : p.perm) want.push_back(p.in_dims[static_cast<std::size_t>(v)]);
    expect_shape(op, 0, want);
    return p;
}

}  // namespace detail

/// The plan of `op`, or why the host kernels do not support it.
inline Analysis analyze(const skc::OpRecord& op) {
    try {
        const std::string& t = op.op_type;
        Plan p;
        if (t == "MatMul" || t == "MatMulV2") p = detail::plan_matmul(op, false);
        else if (t == "BatchMatMulV2") p = detail::plan_matmul(op, true);
        else if (t == "Add") p = detail::plan_binary(op, BinaryKind::add);
        else if (t == "Mul") p = detail::plan_binary(op, BinaryKind::mul);
        else if (t == "Relu") p = detail::plan_unary(op, UnaryKind::relu);
        else if (t == "Gelu") p = detail::plan_unary(op, UnaryKind::gelu);
        else if (t == "SoftmaxV2") p = detail::plan_softmax(op);
        else if (t == "LayerNorm") p = detail::plan_layer_norm(op);
        else if (t == "Transpose") p = detail::plan_transpose(op);
        else
            return {std::nullopt, t + ": op type " + t +
                                      " is not supported by the host kernels (supported: MatMul, MatMulV2, BatchMatMulV2, "
                                      "Add, Mul, Relu, Gelu, SoftmaxV2, LayerNorm, Transpose)"};
        return {std::move(p), {}};
    } catch (const detail::Unsupported& u) {
        return {std::nullopt, op.op_type + ": " + u.reason};
    }
}

}  // namespace skc_host
