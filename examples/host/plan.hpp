// examples/host/plan.hpp: what a host (CPU) kernel needs to know about one recorded op.
//
// analyze() checks an skc::OpRecord against what the host kernels support and reduces it to a
// Plan: the op kind with its sizes and attrs. The generic kernels (dispatch.hpp) and the code
// generator (codegen.hpp) both start from the same Plan, so they agree on what an op means and on
// which ops are supported; an unsupported op gets a one-line reason instead.
//
// Calling convention shared by the generic and the generated kernels: `inputs[i]` is the data of
// input slot i of the record, `outputs[i]` that of output slot i, float, except the bool
// condition of SelectV2 and mask of MaskedFill (one byte an element, 0 false, anything else true;
// their pointer is the tensor's address as a `const float*`, which the kernels read as bytes). A
// dynamic (list) input slot takes one pointer per tensor of the list, in list order, in its place:
// ConcatD's only input is its list, so inputs[k] is the k-th tensor. A tensor is dense and
// row-major, except the x1 and x2 inputs of the matrix products (MatMul, MatMulV2, BatchMatMulV2,
// FusedMatMul), ConcatD's inputs and the inputs of Add, Sub, Mul, RealDiv, Axpy and the unary ops
// (a unary op's view with its last dim contiguous), which may be views (`is_view` with element
// `stride`s, 0 for a broadcast dim, no `offset`): their pointer is the address of the view's first
// element, and element (i0, i1, ..) is read at pointer[i0 * stride0 + i1 * stride1 + ..]. Outputs
// are always dense, and a view input never shares an output's memory.
//
// No output overlaps an input, with one exception: the elementwise ops (Add, Sub, Mul, RealDiv,
// Relu, Gelu, Neg, Tanh, Rsqrt, Swish, Power, MaskedFill's x) and SoftmaxV2 may run in place, an
// output pointer equal to a dense input's pointer whose tensor has the output's shape (torch's add_,
// mul_, relu_, masked_fill_, `_softmax.out(x, out=x)`); their kernels read each element before
// writing the same index, so the result is the out-of-place one. A partial overlap is never
// allowed.
// Absent (null) slots and value-dependent inputs whose values are baked into the kernel
// (Transpose's perm) are not read: their pointer may be null.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <skc/detail/text.hpp>
#include <skc/op_record.hpp>
#include <skc/value.hpp>

namespace skc_host {

/// The per-element functions of the unary ops, applied in float. The activations of Relu, Gelu
/// and FusedMatMul (FusedMatMul has only these three):
///   relu       v < 0 ? 0 : v   (NaN and -0.0 stay, as torch's)
///   gelu_tanh  0.5 v (1 + tanh(0.7978845608 (v + 0.044715 v^3)))   (Gelu's default)
///   gelu_erf   0.5 v (1 + erf(v * 0.70710678118654752))            (Gelu approximate "none")
/// (the generated kernels compute the GELUs in torch's own forms: codegen.hpp, vector_prelude());
/// Neg, Tanh, Rsqrt and Swish (scale 1, torch's silu):
///   neg        -v
///   tanh       tanh(v)              (+-1 above 8.664339742, as torch's Sleef tanh)
///   rsqrt      1 / sqrt(v)          (two correctly rounded steps, as torch's: exact)
///   silu       v / (1 + e^(-v))     (torch's formula: -0.0 below -88.72, NaN at -inf)
/// and Power with scale 1, shift 0 and one of the exponents torch computes without pow():
///   square v v (2), cube v v v (3), sqrt (0.5), rsqrt (-0.5), reciprocal 1 / v (-1),
///   inv_square 1 / (v v) (-2), copy v (1), one 1 (0: 1 even for NaN, as torch fills it).
enum class UnaryKind {
    relu,
    gelu_tanh,
    gelu_erf,
    neg,
    tanh,
    rsqrt,
    silu,
    square,
    cube,
    sqrt,
    reciprocal,
    inv_square,
    copy,
    one
};

/// How a matmul operand is read: element strides along its batch, its outer dim (M for the first
/// operand, N for the second) and K, after the transpose attr is applied. A dense [M, K] has
/// outer K, k 1; a dense [K, M] read transposed has outer 1, k M; a view has its own strides,
/// swapped by the transpose attr. A batch stride is 0 for rank 2 and for a broadcast batch of 1.
struct MatMulOperand {
    std::int64_t batch = 0, outer = 0, k = 0;
};

/// MatMul / MatMulV2 / FusedMatMul (batch == 1) and BatchMatMulV2, with op(x) the operand after its
/// transpose attr:
///   y[t, i, j] = act(sum over p = 0 .. k-1 of op(x1)[t, i, p] * op(x2)[t, p, j]  (+ bias[j]))
/// op(x1)[t, i, p] = x1[t * a.batch + i * a.outer + p * a.k], op(x2)[t, p, j] = x2[t * b.batch +
/// j * b.outer + p * b.k]; y is dense [batch, m, n]. The bias (inputs[2], n floats) is added once
/// the sum is complete, then the activation (FusedMatMul) is applied.
struct MatMulPlan {
    std::int64_t batch = 1;
    std::int64_t m = 0, k = 0, n = 0;
    MatMulOperand a, b;
    bool bias = false;
    /// With a bias: C = AB + bias as it is, where AB is summed from +0 with fused multiply-adds, so
    /// that products that all underflow to -0 plus a -0.0 bias give -0.0 (attr keep_negative_zero,
    /// a BLAS whose kernels fuse multiply-adds); else + 0 after it (+0.0 there: a BLAS that adds
    /// rounded products to +0).
    bool keep_negative_zero = false;
    std::optional<UnaryKind> activation;
};

/// Add x1 + x2, Sub x1 - x2, Mul x1 * x2, RealDiv x1 / x2, Axpy x1 + alpha x2 (in float; the
/// operands in this order; Axpy's product and sum one fused multiply-add where the target has
/// them, as torch's vectorised add with alpha computes it).
enum class BinaryKind { add, sub, mul, div, axpy };

/// Add / Sub / Mul / RealDiv / Axpy of two operands under NumPy broadcasting, each dense or a view
/// (`is_view` with element strides: a slice, a step, an expanded dim). y (dense, the broadcast
/// shape) is seen as the dims `dims` (the output's dims with those of size 1 dropped and
/// neighbours merged where both operands step through them alike), and the operands through their
/// element strides along them, `a` for x1 and `b` for x2: 0 where the operand is broadcast, else
/// its own stride. y[i0, i1, ..] = x1[i0 * a0 + i1 * a1 + ..] (op) x2[i0 * b0 + i1 * b1 + ..].
/// Dense operands have innermost strides 0 or 1; a view may have any. Equal dense shapes are one
/// dim of every element, strides 1 and 1; a scalar x2 is strides 1 and 0.
struct BinaryPlan {
    BinaryKind kind = BinaryKind::add;
    std::vector<std::int64_t> dims;  // at least one; the product is y's element count
    std::vector<std::int64_t> a, b;  // element strides of x1 and x2 along dims
    float alpha = 1.0f;              // Axpy's attr alpha, as a float
};

/// The unary ops: y[i] = f(x[i]) for n elements, f of UnaryKind. x dense, or a view whose last
/// strided dim has stride 1 (a slice, as rotary embedding's x[..., h:]): y (dense) is then seen as
/// the dims `dims` (merged as BinaryPlan's, the last a run of contiguous elements in both) and x
/// through its element strides `x` along them. Dense x: dims {n}, x {1}.
struct UnaryPlan {
    UnaryKind kind = UnaryKind::relu;
    std::int64_t n = 0;
    std::vector<std::int64_t> dims;  // at least one; the product is n
    std::vector<std::int64_t> x;     // x's element strides along dims; the last is 1
};

/// SoftmaxV2 over the last axis of a [rows, cols] view.
struct SoftmaxPlan {
    std::int64_t rows = 0, cols = 0;
};

/// LayerNorm / LayerNormV3 of x viewed as [rows, cols], cols the product of the dims from
/// begin_norm_axis on, gamma and beta of cols elements; outputs y, then optionally the mean and
/// (LayerNorm) the biased variance or (LayerNormV3) rstd = 1 / sqrt(variance + epsilon), one per
/// row (any shape of `rows` elements).
struct LayerNormPlan {
    std::int64_t rows = 0, cols = 0;
    float epsilon = 1e-5f;
    bool mean_out = false, var_out = false, rstd_out = false;
};

/// Transpose: y has dims in_dims[perm[0]], ..., in_dims[perm[r-1]].
struct TransposePlan {
    std::vector<std::int64_t> in_dims;
    std::vector<std::int64_t> perm;
};

/// The gradients of the activations, dx[i] = dy[i] * f'(x[i]) for n elements, from inputs dy
/// (inputs[0]) and x (inputs[1]), both dense of dx's shape, each as torch 1.13's CPU kernel
/// computes it (NaN, infinities and signed zeros included):
///   relu       x <= 0 ? 0 : dy, x the relu's output (aten threshold_backward with threshold 0:
///              +0.0 where x is -0.0 or 0, dy where x is NaN)
///   gelu_erf   dy ((0.5 + t) + 0.5 erf(r)), r = x / sqrt(2), t = r e^(-r^2) / sqrt(pi) (the form
///              of the oneDNN kernel torch runs for two elements or more: exactly 0 where erf(r)
///              rounds to -1 and 0.5 + t to 0.5, x below about -6.15; NaN at +-inf)
///   gelu_tanh  dy (0.5 (1 + th) + 0.5 x (1 - th^2) k (1 + 3 c x^2)), th = tanh(k (x + c x^3)),
///              k = sqrt(2 / pi), c = 0.044715 (0 where th is -1; NaN at +-inf and where x^2 overflows)
///   silu       dy s (1 + x (1 - s)), s = 1 / (1 + e^(-x))  (NaN at +-inf, -0.0 where s is 0)
enum class GradKind { relu, gelu_erf, gelu_tanh, silu };

/// ReluGrad, GeluGrad, SiluGrad: dx = grad(dy, x) elementwise (GradKind) for n elements.
struct GradPlan {
    GradKind kind = GradKind::relu;
    std::int64_t n = 0;
};

/// SoftmaxGrad over the last axis of [rows, cols], inputs y (softmax's output, inputs[0]) and dy
/// (inputs[1]): dx = (dy - sum(dy * y)) * y per row, as torch's _softmax_backward_data.
struct SoftmaxGradPlan {
    std::int64_t rows = 0, cols = 0;
};

/// LayerNormGradV3 over the trailing dims of x viewed as [rows, cols], inputs dy and x (dense, x's
/// shape), rstd and mean (rows elements each), gamma (cols elements); outputs pd_x (x's shape),
/// pd_gamma and pd_beta (gamma's), as torch's native_layer_norm_backward computes them: per row,
/// ds = sum(dy x gamma), db = sum(dy gamma), b = (db mean - ds) rstd^3 / cols,
/// c = -b mean - db rstd / cols, pd_x = rstd dy gamma + b x + c; per column, over the rows,
/// pd_gamma = sum(dy (rstd x + (-rstd mean))), pd_beta = sum(dy).
struct LayerNormGradPlan {
    std::int64_t rows = 0, cols = 0;
};

/// ReduceMean over trailing axes: x viewed as [rows, cols], cols the product of the reduced dims
/// (the last ones), y[r] = (the sum of row r) / cols, the sum in blocks as torch's cascade sum (each
/// block summed from zero, the block sums in blocks again), then one division by cols, as torch's
/// mean (sum, then div_ by the count). A sum of only zeros is +0.0, as stock's.
struct ReduceMeanPlan {
    std::int64_t rows = 0, cols = 0;
};

/// LogSoftmaxV2 over the last axis of [rows, cols], torch's formula and order:
/// y = (x - max) - log(sum of e^(x - max)) per row (NaN anywhere in a row, or +inf, or a row of
/// -inf makes the row NaN; -inf gives -inf).
struct LogSoftmaxPlan {
    std::int64_t rows = 0, cols = 0;
};

/// LogSoftmaxGrad over the last axis of [rows, cols], inputs grad (dy, inputs[0]) and x (the
/// forward's output y, inputs[1]): dx = dy - e^y * sum(dy) per row, as torch's
/// _log_softmax_backward_data.
struct LogSoftmaxGradPlan {
    std::int64_t rows = 0, cols = 0;
};

/// One input of ConcatD within one slice of y (ConcatPlan): its dims from concat_dim on, `dims`
/// (those of size 1 dropped and neighbours merged where both sides step through them alike; at
/// least one), read with the element strides `src` (a view's own, or its dense ones) and written
/// with `dst` (y's dense strides) from the slice's element `offset` on; the last dim a run (a
/// contiguous copy where both of its strides are 1). `outer_src`: the input's strides along the
/// plan's outer dims.
struct ConcatPart {
    std::vector<std::int64_t> outer_src;
    std::vector<std::int64_t> dims, src, dst;
    std::int64_t offset = 0;
};

/// ConcatD: y (dense) is the inputs side by side along attr concat_dim, in list order, written in
/// order as torch's serial cat kernel writes it: for each index of y's dims before concat_dim
/// (`outer`, merged where y and every input allow; {1} when there are none), each input's slice in
/// turn. The input is one dynamic (list) slot: inputs[k] is the k-th tensor of the list (plan.hpp's
/// header).
struct ConcatPlan {
    std::vector<std::int64_t> outer, outer_dst;  // at least one dim; y's strides along them
    std::vector<ConcatPart> parts;               // one per input
};

/// SelectV2 y = condition ? x1 : x2 and MaskedFill y = mask ? value : x, every operand broadcast
/// to y as in BinaryPlan: `dims` are y's dims (merged), `c`, `a` and `b` the element strides along
/// them of the condition (bool, one byte an element), of the value where it is true and of the
/// value where it is false (0 where broadcast), read from input slots c_slot, a_slot, b_slot.
/// SelectV2 (condition, x1, x2): slots 0, 1, 2; MaskedFill (x, mask, value): slots 1, 2 (value, a
/// float of shape [], every stride 0) and 0. A condition byte other than 0 is true. MaskedFill
/// may run in place (y is x, masked_fill_); a pure selection: the results are bitwise the inputs'.
struct SelectPlan {
    std::vector<std::int64_t> dims;     // at least one
    std::vector<std::int64_t> c, a, b;  // strides along dims
    std::size_t c_slot = 0, a_slot = 1, b_slot = 2;
};

using Plan = std::variant<MatMulPlan, BinaryPlan, UnaryPlan, SoftmaxPlan, LayerNormPlan, TransposePlan, GradPlan,
                          SoftmaxGradPlan, LayerNormGradPlan, ReduceMeanPlan, LogSoftmaxPlan, LogSoftmaxGradPlan,
                          ConcatPlan, SelectPlan>;

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

/// A view's stride must have the shape's rank, no negative entry, and no offset (the kernel gets the
/// address of the view's first element); the farthest element it reaches must fit in int64.
inline void check_view(const skc::TensorDesc& t, const std::string& at) {
    if (!t.stride) unsupported(at + " is a view without a stride");
    const skc::RuntimeShape& st = *t.stride;
    if (st.rank() != t.shape.rank())
        unsupported(at + " has stride " + dims_str(st) + " for shape " + dims_str(t.shape) + ": the ranks differ");
    if (t.offset.value_or(0) != 0)
        unsupported(at + " is a view with offset " + std::to_string(*t.offset) +
                    ": the kernel takes the address of the view's first element, so the offset must be 0");
    std::int64_t reach = 0;  // the index of the farthest element, sum (dim - 1) * stride
    for (std::size_t d = 0; d < st.rank(); ++d) {
        if (st[d] < 0) unsupported(at + " has stride " + dims_str(st) + ": strides must be >= 0");
        const std::int64_t room = std::numeric_limits<std::int64_t>::max() - reach;
        if (st[d] != 0 && t.shape[d] - 1 > room / st[d])
            unsupported(at + " has stride " + dims_str(st) + " for shape " + dims_str(t.shape) +
                        ": it spans more than 2^63 elements");
        reach += (t.shape[d] - 1) * st[d];
    }
}

/// A float tensor in a plain format with elements; a view only where `view_ok`.
inline const skc::TensorDesc& float_tensor(const skc::TensorDesc* t, std::size_t i, std::string_view side,
                                           bool view_ok) {
    const std::string at = std::string(side) + "[" + std::to_string(i) + "]";
    if (t == nullptr) unsupported(at + " is missing");
    if (t->dtype != "float") unsupported(at + " has dtype " + t->dtype + ": only float is supported");
    if (!plain_format(t->format))
        unsupported(at + " has format " + t->format + ": only plain (ND-like) formats are supported");
    const bool view = t->is_view.value_or(false);
    if (view && !view_ok) unsupported(at + " is a view: only dense tensors are supported");
    const std::int64_t n = count(t->shape);
    if (n <= 0) unsupported(at + " has no elements (shape " + dims_str(t->shape) + ")");
    if (view) check_view(*t, at);
    return *t;
}

inline const skc::TensorDesc& in(const skc::OpRecord& op, std::size_t i, bool view_ok = false) {
    return float_tensor(slot(op.inputs, i, "inputs"), i, "inputs", view_ok);
}
inline const skc::TensorDesc& out(const skc::OpRecord& op, std::size_t i) {
    return float_tensor(slot(op.outputs, i, "outputs"), i, "outputs", false);
}

/// The element strides of `t`: its own for a view, else those of its dense row-major shape.
inline std::vector<std::int64_t> strides_of(const skc::TensorDesc& t) {
    if (t.is_view.value_or(false)) return {t.stride->begin(), t.stride->end()};
    std::vector<std::int64_t> st(t.shape.rank());
    std::int64_t acc = 1;
    for (std::size_t d = st.size(); d-- > 0;) {
        st[d] = acc;
        acc *= t.shape[d];
    }
    return st;
}

/// Slots from `from` on must be absent or null.
inline void no_more(const std::vector<skc::TensorSlot>& slots, std::size_t from, std::string_view side,
                    std::string_view what) {
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

inline std::optional<std::string> str_attr(const skc::OpRecord& op, std::string_view name) {
    const skc::Attr* a = find_attr(op, name);
    if (a == nullptr || a->value.is_null()) return std::nullopt;
    if (!a->value.is_string()) unsupported("attr " + std::string(name) + " is not a string");
    return a->value.as_string();
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
        unsupported("outputs[" + std::to_string(i) + "] has shape " + dims_str(y.shape) + ", expected " +
                    dims_str(want));
}

inline void expect_count(const skc::OpRecord& op, std::size_t i, std::int64_t want) {
    const skc::TensorDesc& y = out(op, i);
    if (count(y.shape) != want)
        unsupported("outputs[" + std::to_string(i) + "] has shape " + dims_str(y.shape) + ", expected " +
                    std::to_string(want) + " elements");
}

/// Float attr `name`, or `dflt` when absent.
inline double float_attr(const skc::OpRecord& op, std::string_view name, double dflt) {
    const skc::Attr* a = find_attr(op, name);
    if (a == nullptr || a->value.is_null()) return dflt;
    if (!a->value.is_number()) unsupported("attr " + std::string(name) + " is not a number");
    return a->value.as_double();
}

enum class MatMulOp { matmul, batch_matmul, fused_matmul };

/// op(t) of a matmul operand of rank 2 or 3, its last two dims swapped when `trans`: dims
/// [batch, rows, cols] and the element strides along them (batch stride 0 for a batch of 1).
struct OperandDims {
    std::int64_t batch = 1, rows = 0, cols = 0;
    std::int64_t s_batch = 0, s_rows = 0, s_cols = 0;
};

inline OperandDims operand_dims(const skc::TensorDesc& t, bool trans) {
    const std::size_t r = t.shape.rank();
    const std::vector<std::int64_t> st = strides_of(t);
    OperandDims o;
    if (r == 3) {
        o.batch = t.shape[0];
        o.s_batch = o.batch == 1 ? 0 : st[0];
    }
    o.rows = t.shape[r - 2], o.cols = t.shape[r - 1];
    o.s_rows = st[r - 2], o.s_cols = st[r - 1];
    if (trans) std::swap(o.rows, o.cols), std::swap(o.s_rows, o.s_cols);
    return o;
}

inline UnaryKind fused_op_type(const skc::OpRecord& op) {
    const std::optional<std::string> f = str_attr(op, "fused_op_type");
    if (!f) unsupported("attr fused_op_type is missing (relu, gelu_erf or gelu_tanh)");
    if (*f == "relu") return UnaryKind::relu;
    if (*f == "gelu_erf") return UnaryKind::gelu_erf;
    if (*f == "gelu_tanh") return UnaryKind::gelu_tanh;
    unsupported("attr fused_op_type " + skc::detail::quote(*f, 64) + " is not supported (relu, gelu_erf or gelu_tanh)");
}

/// MatMul, MatMulV2 and FusedMatMul: rank 2, inputs [x1, x2, bias, offset_w / x3]; BatchMatMulV2:
/// rank 3, inputs [x1, x2] (a bias is not supported). x1 and x2 may be views.
inline MatMulPlan plan_matmul(const skc::OpRecord& op, MatMulOp kind) {
    const bool batched = kind == MatMulOp::batch_matmul;
    const skc::TensorDesc& a = in(op, 0, true);
    const skc::TensorDesc& b = in(op, 1, true);
    if (batched && slot(op.inputs, 2, "inputs") != nullptr)
        unsupported("inputs[2] is present: BatchMatMulV2 with a bias is not supported");
    if (slot(op.inputs, 3, "inputs") != nullptr)
        unsupported(kind == MatMulOp::fused_matmul ? "inputs[3] is present: x3 is not supported"
                                                   : "inputs[3] is present: offset_w is not supported");
    no_more(op.inputs, 4, "inputs",
            "only x1, x2, bias and " + std::string(kind == MatMulOp::fused_matmul ? "x3" : "offset_w") + " are known");
    no_more(op.outputs, 1, "outputs", "only one output is supported");
    if (auto off = int_attr(op, "offset_x"); off && *off != 0) unsupported("offset_x is not 0");
    MatMulPlan p;
    const std::size_t r = batched ? 3 : 2;
    if (a.shape.rank() != r || b.shape.rank() != r)
        unsupported(op.op_type + " needs rank-" + std::to_string(r) + " inputs, got " + dims_str(a.shape) + " and " +
                    dims_str(b.shape));
    if (kind == MatMulOp::fused_matmul) p.activation = fused_op_type(op);
    const OperandDims x1 = operand_dims(a, bool_attr(op, batched ? "adj_x1" : "transpose_x1", false));
    const OperandDims x2 = operand_dims(b, bool_attr(op, batched ? "adj_x2" : "transpose_x2", false));
    if (x1.batch != x2.batch && x1.batch != 1 && x2.batch != 1)
        unsupported("batch dims " + std::to_string(x1.batch) + " and " + std::to_string(x2.batch) +
                    " do not broadcast");
    p.batch = std::max(x1.batch, x2.batch);
    p.m = x1.rows, p.k = x1.cols, p.n = x2.cols;
    if (x2.rows != p.k)
        unsupported("inner dims differ: " + dims_str(a.shape) + " x " + dims_str(b.shape) +
                    " with the transpose attrs given");
    p.a = MatMulOperand{x1.s_batch, x1.s_rows, x1.s_cols};
    p.b = MatMulOperand{x2.s_batch, x2.s_cols, x2.s_rows};
    if (!batched && slot(op.inputs, 2, "inputs") != nullptr) {
        const skc::TensorDesc& bias = in(op, 2);
        if (!(bias.shape == skc::RuntimeShape{p.n} || bias.shape == skc::RuntimeShape{1, p.n}))
            unsupported("bias (inputs[2]) has shape " + dims_str(bias.shape) + ", expected [" + std::to_string(p.n) +
                        "] or [1," + std::to_string(p.n) + "]");
        p.bias = true;
        p.keep_negative_zero = bool_attr(op, "keep_negative_zero", false);
    }
    expect_shape(op, 0, batched ? skc::RuntimeShape{p.batch, p.m, p.n} : skc::RuntimeShape{p.m, p.n});
    return p;
}

/// The element strides of a dense `t` along the dims of `y` (t's dims aligned to y's last ones):
/// 0 where t has no such dim or a 1 for y's larger size.
inline std::vector<std::int64_t> broadcast_strides(const skc::RuntimeShape& t, const skc::RuntimeShape& y) {
    std::vector<std::int64_t> st(y.rank(), 0);
    std::int64_t acc = 1;
    for (std::size_t k = 0; k < t.rank(); ++k) {
        const std::size_t dt = t.rank() - 1 - k, dy = y.rank() - 1 - k;
        if (t[dt] != 1) st[dy] = acc;
        acc *= t[dt];
    }
    return st;
}

/// The element strides of `t` (dense or a view) along the dims of `y` (t's dims aligned to y's
/// last ones): 0 where t has no such dim or a 1 for y's larger size.
inline std::vector<std::int64_t> operand_strides(const skc::TensorDesc& t, const skc::RuntimeShape& y) {
    if (!t.is_view.value_or(false)) return broadcast_strides(t.shape, y);
    std::vector<std::int64_t> st(y.rank(), 0);
    for (std::size_t k = 0; k < t.shape.rank(); ++k) {
        const std::size_t dt = t.shape.rank() - 1 - k, dy = y.rank() - 1 - k;
        if (t.shape[dt] != 1) st[dy] = (*t.stride)[dt];
    }
    return st;
}

/// y's dims `want` with those of size 1 dropped, and a dim merged into the one before it where every
/// operand steps from one into the other as through a single dim (its stride = the next one's
/// stride times its size): `dims`, and each operand's strides along them in `strides` (one list an
/// operand, their strides along want in `along`). At least one dim: one element is {1}, strides 0.
inline void merge_dims(const skc::RuntimeShape& want, const std::vector<std::vector<std::int64_t>>& along,
                       std::vector<std::int64_t>& dims, std::vector<std::vector<std::int64_t>*> strides) {
    for (std::size_t d = 0; d < want.rank(); ++d) {
        if (want[d] == 1) continue;
        bool merge = !dims.empty();
        for (std::size_t o = 0; merge && o < along.size(); ++o) merge = strides[o]->back() == along[o][d] * want[d];
        if (merge) {
            dims.back() *= want[d];
            for (std::size_t o = 0; o < along.size(); ++o) strides[o]->back() = along[o][d];
            continue;
        }
        dims.push_back(want[d]);
        for (std::size_t o = 0; o < along.size(); ++o) strides[o]->push_back(along[o][d]);
    }
    if (dims.empty()) {
        dims = {1};
        for (auto* st : strides) *st = {0};
    }
}

inline BinaryPlan plan_binary(const skc::OpRecord& op, BinaryKind kind) {
    const skc::TensorDesc& x1 = in(op, 0, true);
    const skc::TensorDesc& x2 = in(op, 1, true);
    no_more(op.inputs, 2, "inputs", "only two inputs are supported");
    no_more(op.outputs, 1, "outputs", "only one output is supported");
    // The broadcast shape: x1's and x2's dims aligned to the last, each pair equal or one of them 1.
    const std::size_t r = std::max(x1.shape.rank(), x2.shape.rank());
    skc::RuntimeShape want;
    for (std::size_t d = 0; d < r; ++d) {
        const std::int64_t u = d + x1.shape.rank() < r ? 1 : x1.shape[d + x1.shape.rank() - r];
        const std::int64_t v = d + x2.shape.rank() < r ? 1 : x2.shape[d + x2.shape.rank() - r];
        if (u != v && u != 1 && v != 1)
            unsupported("shapes " + dims_str(x1.shape) + " and " + dims_str(x2.shape) + " do not broadcast");
        want.push_back(u == 1 ? v : u);
    }
    expect_shape(op, 0, want);
    BinaryPlan p;
    p.kind = kind;
    if (kind == BinaryKind::axpy) {
        const skc::Attr* a = find_attr(op, "alpha");
        if (a == nullptr || a->value.is_null()) unsupported("attr alpha is missing");
        const double alpha = float_attr(op, "alpha", 1.0);
        if (std::isfinite(alpha) && std::abs(alpha) > static_cast<double>(std::numeric_limits<float>::max()))
            unsupported("attr alpha is beyond float's range");
        p.alpha = static_cast<float>(alpha);
    }
    merge_dims(want, {operand_strides(x1, want), operand_strides(x2, want)}, p.dims, {&p.a, &p.b});
    return p;
}

inline UnaryPlan plan_unary(const skc::OpRecord& op, UnaryKind kind) {
    const skc::TensorDesc& x = in(op, 0, true);
    no_more(op.inputs, 1, "inputs", "only one input is supported");
    no_more(op.outputs, 1, "outputs", "only one output is supported");
    expect_shape(op, 0, x.shape);
    UnaryPlan p{kind, count(x.shape), {count(x.shape)}, {1}};
    if (!x.is_view.value_or(false)) return p;
    p.dims.clear(), p.x.clear();
    merge_dims(x.shape, {operand_strides(x, x.shape)}, p.dims, {&p.x});
    if (p.x.back() != 1 && p.n > 1)
        unsupported("inputs[0] is a view whose last dim has stride " + std::to_string(p.x.back()) +
                    ": a unary op reads runs of contiguous elements");
    if (p.n == 1) p.x = {1};  // one element: a run of one
    return p;
}

/// Gelu's attr approximate: "tanh" or absent (the tanh formula), "none" (the erf one).
inline UnaryKind gelu_kind(const skc::OpRecord& op) {
    const std::optional<std::string> a = str_attr(op, "approximate");
    if (!a || *a == "tanh") return UnaryKind::gelu_tanh;
    if (*a == "none") return UnaryKind::gelu_erf;
    unsupported("attr approximate " + skc::detail::quote(*a, 64) + " is not supported (none or tanh)");
}

/// Swish: y = x / (1 + e^(-scale x)); only scale 1 (SiLU) is supported.
inline UnaryKind swish_kind(const skc::OpRecord& op) {
    if (const double scale = float_attr(op, "scale", 1.0); scale != 1.0)
        unsupported("attr scale " + std::to_string(scale) + " is not supported (only 1)");
    return UnaryKind::silu;
}

/// Power: y = (scale x + shift)^power; only scale 1, shift 0 and the powers torch computes
/// without pow() (2, 3, 0.5, -0.5, -1, -2, 1, 0: UnaryKind) are supported.
inline UnaryKind power_kind(const skc::OpRecord& op) {
    if (float_attr(op, "scale", 1.0) != 1.0 || float_attr(op, "shift", 0.0) != 0.0)
        unsupported("attrs scale and shift must be 1 and 0");
    const double e = float_attr(op, "power", 1.0);
    if (e == 2.0) return UnaryKind::square;
    if (e == 3.0) return UnaryKind::cube;
    if (e == 0.5) return UnaryKind::sqrt;
    if (e == -0.5) return UnaryKind::rsqrt;
    if (e == -1.0) return UnaryKind::reciprocal;
    if (e == -2.0) return UnaryKind::inv_square;
    if (e == 1.0) return UnaryKind::copy;
    if (e == 0.0) return UnaryKind::one;
    unsupported("attr power " + std::to_string(e) + " is not supported (2, 3, 0.5, -0.5, -1, -2, 1 or 0)");
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

/// Int attr `name` as an axis of a tensor of rank `rank`: negative counts from the end, absent is -1.
inline std::int64_t axis_attr(const skc::OpRecord& op, std::string_view name, std::size_t rank) {
    const std::int64_t v = int_attr(op, name).value_or(-1);
    const auto r = static_cast<std::int64_t>(rank);
    if (v < -r || v >= r)
        unsupported("attr " + std::string(name) + " " + std::to_string(v) + " is out of range for rank " +
                    std::to_string(r));
    return v < 0 ? v + r : v;
}

/// LayerNorm (outputs y, mean, variance) and LayerNormV3 (outputs y, mean, rstd) over the dims
/// from begin_norm_axis on; mean and the third output may be absent.
inline LayerNormPlan plan_layer_norm(const skc::OpRecord& op, bool v3) {
    const skc::TensorDesc& x = in(op, 0);
    const skc::TensorDesc& g = in(op, 1);
    const skc::TensorDesc& b = in(op, 2);
    no_more(op.inputs, 3, "inputs", "only x, gamma and beta are supported");
    no_more(op.outputs, 3, "outputs",
            v3 ? "only y, mean and rstd are supported" : "only y, mean and variance are supported");
    if (x.shape.rank() == 0) unsupported("layer norm of a scalar");
    const std::int64_t axis = axis_attr(op, "begin_norm_axis", x.shape.rank());
    const std::int64_t params_axis = axis_attr(op, "begin_params_axis", x.shape.rank());
    if (params_axis != axis)
        unsupported("begin_params_axis is axis " + std::to_string(params_axis) + ", begin_norm_axis axis " +
                    std::to_string(axis) + ": they must be the same axis");
    LayerNormPlan p;
    p.rows = 1, p.cols = 1;
    skc::RuntimeShape normalised;
    for (std::size_t d = 0; d < x.shape.rank(); ++d) {
        if (static_cast<std::int64_t>(d) < axis) {
            p.rows *= x.shape[d];
        } else {
            p.cols *= x.shape[d];
            normalised.push_back(x.shape[d]);
        }
    }
    for (std::size_t i : {std::size_t{1}, std::size_t{2}}) {
        const skc::TensorDesc& t = i == 1 ? g : b;
        if (count(t.shape) != p.cols)
            unsupported(std::string(i == 1 ? "gamma" : "beta") + " (inputs[" + std::to_string(i) + "]) has shape " +
                        dims_str(t.shape) + ", expected " + std::to_string(p.cols) + " elements (the normalised dims " +
                        dims_str(normalised) + ")");
    }
    if (const skc::Attr* e = find_attr(op, "epsilon"); e != nullptr && !e->value.is_null()) {
        if (!e->value.is_number()) unsupported("attr epsilon is not a number");
        p.epsilon = static_cast<float>(e->value.as_double());
        if (!std::isfinite(p.epsilon) || p.epsilon < 0) unsupported("attr epsilon is not a finite non-negative float");
    }
    expect_shape(op, 0, x.shape);
    p.mean_out = slot(op.outputs, 1, "outputs") != nullptr;
    const bool third = slot(op.outputs, 2, "outputs") != nullptr;
    (v3 ? p.rstd_out : p.var_out) = third;
    if (p.mean_out) expect_count(op, 1, p.rows);
    if (third) expect_count(op, 2, p.rows);
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

/// ReluGrad (gradients, features), GeluGrad and SiluGrad (dy, x): two dense inputs of one shape,
/// the output of that shape.
inline GradPlan plan_grad(const skc::OpRecord& op, GradKind kind) {
    const skc::TensorDesc& dy = in(op, 0);
    const skc::TensorDesc& x = in(op, 1);
    no_more(op.inputs, 2, "inputs", "only two inputs are supported");
    no_more(op.outputs, 1, "outputs", "only one output is supported");
    if (!(dy.shape == x.shape))
        unsupported("inputs have shapes " + dims_str(dy.shape) + " and " + dims_str(x.shape) + ": they must be equal");
    expect_shape(op, 0, x.shape);
    return GradPlan{kind, count(x.shape)};
}

/// GeluGrad's attr approximate, as Gelu's: "tanh" or absent (the tanh formula), "none" (erf).
inline GradKind gelu_grad_kind(const skc::OpRecord& op) {
    return gelu_kind(op) == UnaryKind::gelu_erf ? GradKind::gelu_erf : GradKind::gelu_tanh;
}

/// SoftmaxGrad (softmax, grad_softmax) over the last axis only.
inline SoftmaxGradPlan plan_softmax_grad(const skc::OpRecord& op) {
    const skc::TensorDesc& y = in(op, 0);
    const skc::TensorDesc& dy = in(op, 1);
    no_more(op.inputs, 2, "inputs", "only softmax and grad_softmax are supported");
    no_more(op.outputs, 1, "outputs", "only one output is supported");
    if (y.shape.rank() == 0) unsupported("softmax gradient of a scalar");
    if (!(dy.shape == y.shape))
        unsupported("inputs have shapes " + dims_str(y.shape) + " and " + dims_str(dy.shape) + ": they must be equal");
    last_axis_only(op, "axes", y.shape.rank());
    expect_shape(op, 0, y.shape);
    const std::int64_t cols = y.shape[y.shape.rank() - 1];
    return SoftmaxGradPlan{count(y.shape) / cols, cols};
}

/// LayerNormGradV3 (dy, x, rstd, mean, gamma) -> (pd_x, pd_gamma, pd_beta): gamma's shape must be
/// x's trailing dims (the normalised ones), rstd and mean one value per row of the others.
inline LayerNormGradPlan plan_layer_norm_grad(const skc::OpRecord& op) {
    const skc::TensorDesc& dy = in(op, 0);
    const skc::TensorDesc& x = in(op, 1);
    const skc::TensorDesc& rstd = in(op, 2);
    const skc::TensorDesc& mean = in(op, 3);
    const skc::TensorDesc& gamma = in(op, 4);
    no_more(op.inputs, 5, "inputs", "only dy, x, rstd, mean and gamma are supported");
    no_more(op.outputs, 3, "outputs", "only pd_x, pd_gamma and pd_beta are supported");
    if (!(dy.shape == x.shape))
        unsupported("dy " + dims_str(dy.shape) + " and x " + dims_str(x.shape) + " differ in shape");
    const std::size_t r = x.shape.rank(), k = gamma.shape.rank();
    bool trailing = k >= 1 && k <= r;
    for (std::size_t i = 0; trailing && i < k; ++i) trailing = gamma.shape[i] == x.shape[r - k + i];
    if (!trailing)
        unsupported("gamma " + dims_str(gamma.shape) + " is not the trailing dims of x " + dims_str(x.shape));
    LayerNormGradPlan p;
    p.cols = count(gamma.shape);
    p.rows = count(x.shape) / p.cols;
    for (std::size_t i : {std::size_t{2}, std::size_t{3}})
        if (count((i == 2 ? rstd : mean).shape) != p.rows)
            unsupported(std::string(i == 2 ? "rstd" : "mean") + " (inputs[" + std::to_string(i) + "]) has shape " +
                        dims_str((i == 2 ? rstd : mean).shape) + ", expected " + std::to_string(p.rows) + " elements");
    expect_shape(op, 0, x.shape);
    expect_shape(op, 1, gamma.shape);
    expect_shape(op, 2, gamma.shape);
    return p;
}

/// ReduceMean (x, axes) with axes a const_data input (int32 or int64) or, as ReduceMeanD has it,
/// an attr `axes`; attr keep_dims (default false). The axes must be the last ones, any order (dims
/// of size 1 do not count: reduced or kept, anywhere); none at all reduces every dim (torch's mean
/// over dim=[] or None; attr noop_with_empty_axes must then be false or absent).
inline ReduceMeanPlan plan_reduce_mean(const skc::OpRecord& op) {
    const skc::TensorDesc& x = in(op, 0);
    no_more(op.inputs, 2, "inputs", "only x and axes are supported");
    no_more(op.outputs, 1, "outputs", "only one output is supported");
    std::vector<std::int64_t> axes;
    if (const skc::TensorDesc* a = slot(op.inputs, 1, "inputs"); a != nullptr) {
        if (!a->const_data) unsupported("axes input has no const_data: its values must be known when compiling");
        axes = int_list(*a->const_data, "axes const_data");
    } else if (const skc::Attr* at = find_attr(op, "axes"); at != nullptr && !at->value.is_null()) {
        axes = int_list(at->value, "attr axes");
    } else {
        unsupported("no axes (neither a const_data input nor an attr)");
    }
    const auto r = static_cast<std::int64_t>(x.shape.rank());
    if (axes.empty() && bool_attr(op, "noop_with_empty_axes", false))
        unsupported("empty axes with noop_with_empty_axes: a copy, not a mean");
    std::vector<bool> reduced(x.shape.rank(), axes.empty());
    const std::int64_t wrap = std::max<std::int64_t>(r, 1);  // a scalar takes axis 0 or -1, as torch's
    for (std::int64_t v : axes) {
        const std::int64_t a = v < 0 ? v + wrap : v;
        if (a < 0 || a >= wrap || (r > 0 && reduced[static_cast<std::size_t>(a)]))
            unsupported("axes " + dims_str(skc::RuntimeShape(axes)) + " are not distinct axes of rank " +
                        std::to_string(r));
        if (r > 0) reduced[static_cast<std::size_t>(a)] = true;
    }
    ReduceMeanPlan p;
    p.rows = 1, p.cols = 1;
    const bool keep = bool_attr(op, "keep_dims", false);
    skc::RuntimeShape want;
    bool past = false;  // a reduced dim of more than one element came before: x is [rows, cols]
    for (std::size_t d = 0; d < x.shape.rank(); ++d) {
        if (x.shape[d] != 1 && reduced[d]) past = true;
        if (x.shape[d] != 1 && !reduced[d] && past)
            unsupported("axes " + dims_str(skc::RuntimeShape(axes)) + " of x " + dims_str(x.shape) +
                        " are not the last ones: only a mean over trailing axes is supported");
        if (reduced[d]) {
            p.cols *= x.shape[d];
            if (keep) want.push_back(1);
        } else {
            p.rows *= x.shape[d];
            want.push_back(x.shape[d]);
        }
    }
    expect_shape(op, 0, want);
    return p;
}

/// LogSoftmaxV2 over the last axis only (attr axes, default the last; a scalar is one row of one,
/// its axis 0 or -1, as torch's).
inline LogSoftmaxPlan plan_log_softmax(const skc::OpRecord& op) {
    const skc::TensorDesc& x = in(op, 0);
    no_more(op.inputs, 1, "inputs", "only one input is supported");
    no_more(op.outputs, 1, "outputs", "only one output is supported");
    last_axis_only(op, "axes", std::max<std::size_t>(x.shape.rank(), 1));
    expect_shape(op, 0, x.shape);
    const std::int64_t cols = x.shape.rank() == 0 ? 1 : x.shape[x.shape.rank() - 1];
    return LogSoftmaxPlan{count(x.shape) / cols, cols};
}

/// LogSoftmaxGrad (grad, x) over the last axis only (attr axis, default the last; a scalar as
/// LogSoftmaxV2's).
inline LogSoftmaxGradPlan plan_log_softmax_grad(const skc::OpRecord& op) {
    const skc::TensorDesc& dy = in(op, 0);
    const skc::TensorDesc& y = in(op, 1);
    no_more(op.inputs, 2, "inputs", "only grad and x are supported");
    no_more(op.outputs, 1, "outputs", "only one output is supported");
    if (!(dy.shape == y.shape))
        unsupported("inputs have shapes " + dims_str(dy.shape) + " and " + dims_str(y.shape) + ": they must be equal");
    last_axis_only(op, "axis", std::max<std::size_t>(y.shape.rank(), 1));
    expect_shape(op, 0, y.shape);
    const std::int64_t cols = y.shape.rank() == 0 ? 1 : y.shape[y.shape.rank() - 1];
    return LogSoftmaxGradPlan{count(y.shape) / cols, cols};
}

/// The tensors of the dynamic (list) input slot i: at least one, each a float tensor in a plain
/// format with elements, views allowed.
inline const std::vector<skc::TensorDesc>& list_in(const skc::OpRecord& op, std::size_t i) {
    const std::string at = "inputs[" + std::to_string(i) + "]";
    if (i >= op.inputs.size() || !std::holds_alternative<std::vector<skc::TensorDesc>>(op.inputs[i]))
        unsupported(at + " is not a dynamic (list) parameter");
    const auto& list = std::get<std::vector<skc::TensorDesc>>(op.inputs[i]);
    if (list.empty()) unsupported(at + " is an empty list");
    for (std::size_t k = 0; k < list.size(); ++k) float_tensor(&list[k], k, at, true);
    return list;
}

/// `dims` with those of size 1 dropped and a dim merged into the one before it where every
/// operand steps from one into the other as through a single dim (its stride is the next one's
/// times the next one's size); `st[k]`, operand k's strides along `dims`, merged alike. Returns the
/// merged dims, at least one ({1} with strides 0 for one element).
inline std::vector<std::int64_t> merge_dims(const std::vector<std::int64_t>& dims,
                                            std::vector<std::vector<std::int64_t>>& st) {
    std::vector<std::int64_t> out;
    std::vector<std::vector<std::int64_t>> merged(st.size());
    for (std::size_t d = 0; d < dims.size(); ++d) {
        if (dims[d] == 1) continue;
        bool joins = !out.empty();
        for (std::size_t k = 0; joins && k < st.size(); ++k) joins = merged[k].back() == st[k][d] * dims[d];
        if (joins) {
            out.back() *= dims[d];
            for (std::size_t k = 0; k < st.size(); ++k) merged[k].back() = st[k][d];
            continue;
        }
        out.push_back(dims[d]);
        for (std::size_t k = 0; k < st.size(); ++k) merged[k].push_back(st[k][d]);
    }
    if (out.empty()) {
        out = {1};
        for (auto& m : merged) m = {0};
    }
    st = std::move(merged);
    return out;
}

/// ConcatD (x: a list of N tensors, views allowed) along attr concat_dim (negative counts from the
/// end); attr N, when given, must be the list's size. Every input has y's rank (at least 1) and
/// y's dims but along concat_dim.
inline ConcatPlan plan_concat(const skc::OpRecord& op) {
    const std::vector<skc::TensorDesc>& xs = list_in(op, 0);
    no_more(op.inputs, 1, "inputs", "only the list x is supported");
    no_more(op.outputs, 1, "outputs", "only one output is supported");
    if (const std::optional<std::int64_t> n = int_attr(op, "N"); n && *n != static_cast<std::int64_t>(xs.size()))
        unsupported("attr N is " + std::to_string(*n) + " for a list of " + std::to_string(xs.size()) + " tensors");
    const std::size_t r = xs[0].shape.rank();
    if (r == 0) unsupported("inputs[0][0] is a scalar: concatenation needs rank 1 or more");
    const std::optional<std::int64_t> cd = int_attr(op, "concat_dim");
    if (!cd) unsupported("attr concat_dim is missing");
    const std::int64_t axis = axis_attr(op, "concat_dim", r);
    skc::RuntimeShape want = xs[0].shape;
    want[static_cast<std::size_t>(axis)] = 0;
    for (std::size_t k = 0; k < xs.size(); ++k) {
        const skc::RuntimeShape& s = xs[k].shape;
        bool same = s.rank() == r;
        for (std::size_t d = 0; same && d < r; ++d)
            same = d == static_cast<std::size_t>(axis) || s[d] == xs[0].shape[d];
        if (!same)
            unsupported("inputs[0][" + std::to_string(k) + "] has shape " + dims_str(s) + ", inputs[0][0] " +
                        dims_str(xs[0].shape) + ": they must differ along concat_dim " + std::to_string(axis) +
                        " only");
        want[static_cast<std::size_t>(axis)] += s[static_cast<std::size_t>(axis)];
    }
    expect_shape(op, 0, want);
    std::vector<std::int64_t> ys(r);
    std::int64_t acc = 1;
    for (std::size_t d = r; d-- > 0;) ys[d] = acc, acc *= want[d];
    const auto a = static_cast<std::size_t>(axis);
    const auto before = [&](const std::vector<std::int64_t>& v) {
        return std::vector<std::int64_t>(v.begin(), v.begin() + axis);
    };
    const auto from = [&](const std::vector<std::int64_t>& v) {
        return std::vector<std::int64_t>(v.begin() + axis, v.end());
    };
    // The outer dims, merged where y and every input step through them alike.
    std::vector<std::vector<std::int64_t>> outer{before(ys)};
    for (const skc::TensorDesc& x : xs) outer.push_back(before(strides_of(x)));
    ConcatPlan p;
    p.outer = merge_dims(before(std::vector<std::int64_t>(want.begin(), want.end())), outer);
    p.outer_dst = std::move(outer[0]);
    std::int64_t at = 0;  // where the next input starts along the axis
    for (std::size_t k = 0; k < xs.size(); ++k) {
        const skc::TensorDesc& x = xs[k];
        std::vector<std::vector<std::int64_t>> st{from(strides_of(x)), from(ys)};
        ConcatPart part;
        part.outer_src = std::move(outer[k + 1]);
        part.dims = merge_dims(from(std::vector<std::int64_t>(x.shape.begin(), x.shape.end())), st);
        part.src = std::move(st[0]);
        part.dst = std::move(st[1]);
        part.offset = at * ys[a];
        at += x.shape[a];
        p.parts.push_back(std::move(part));
    }
    return p;
}

/// A dense bool tensor in a plain format with elements (SelectV2's condition, MaskedFill's mask).
inline const skc::TensorDesc& bool_in(const skc::OpRecord& op, std::size_t i) {
    const skc::TensorDesc* t = slot(op.inputs, i, "inputs");
    const std::string at = "inputs[" + std::to_string(i) + "]";
    if (t == nullptr) unsupported(at + " is missing");
    if (t->dtype != "bool") unsupported(at + " has dtype " + t->dtype + ": only bool is supported");
    if (!plain_format(t->format))
        unsupported(at + " has format " + t->format + ": only plain (ND-like) formats are supported");
    if (t->is_view.value_or(false)) unsupported(at + " is a view: only dense tensors are supported");
    if (count(t->shape) <= 0) unsupported(at + " has no elements (shape " + dims_str(t->shape) + ")");
    return *t;
}

/// The broadcast of `shapes` (NumPy's: aligned to the last dim, each dim equal or 1).
inline skc::RuntimeShape broadcast_all(const std::vector<const skc::RuntimeShape*>& shapes) {
    std::size_t r = 0;
    for (const skc::RuntimeShape* s : shapes) r = std::max(r, s->rank());
    skc::RuntimeShape want;
    for (std::size_t d = 0; d < r; ++d) want.push_back(1);
    for (const skc::RuntimeShape* s : shapes)
        for (std::size_t k = 0; k < s->rank(); ++k) {
            const std::int64_t v = (*s)[s->rank() - 1 - k];
            std::int64_t& w = want[r - 1 - k];
            if (v != w && v != 1 && w != 1) {
                std::string all;
                for (const skc::RuntimeShape* t : shapes) all += (all.empty() ? "" : " and ") + dims_str(*t);
                unsupported("shapes " + all + " do not broadcast");
            }
            if (v != 1) w = v;
        }
    return want;
}

/// SelectV2 (condition, x1, x2) -> y, and MaskedFill (x, mask, value) -> y with value a float of
/// shape [] (or [1]): each broadcast to y.
inline SelectPlan plan_select(const skc::OpRecord& op, bool masked_fill) {
    SelectPlan p;
    if (masked_fill) p.c_slot = 1, p.a_slot = 2, p.b_slot = 0;
    const skc::TensorDesc& c = bool_in(op, p.c_slot);
    const skc::TensorDesc& a = in(op, p.a_slot);
    const skc::TensorDesc& b = in(op, p.b_slot);
    no_more(op.inputs, 3, "inputs", masked_fill ? "only x, mask and value are supported" : "only three are supported");
    no_more(op.outputs, 1, "outputs", "only one output is supported");
    if (masked_fill && count(a.shape) != 1)
        unsupported("value (inputs[2]) has shape " + dims_str(a.shape) + ": only one value is supported");
    const skc::RuntimeShape want =
        masked_fill ? broadcast_all({&b.shape, &c.shape}) : broadcast_all({&c.shape, &a.shape, &b.shape});
    expect_shape(op, 0, want);
    std::vector<std::vector<std::int64_t>> st{
        broadcast_strides(c.shape, want),
        masked_fill ? std::vector<std::int64_t>(want.rank(), 0) : broadcast_strides(a.shape, want),
        broadcast_strides(b.shape, want)};
    p.dims = merge_dims(std::vector<std::int64_t>(want.begin(), want.end()), st);
    p.c = std::move(st[0]);
    p.a = std::move(st[1]);
    p.b = std::move(st[2]);
    return p;
}

}  // namespace detail

/// The op types analyze() supports, as its reason for any other type lists them.
inline constexpr std::string_view supported_op_types =
    "MatMul, MatMulV2, BatchMatMulV2, FusedMatMul, Add, Sub, Mul, RealDiv, Relu, Gelu, Neg, Tanh, Rsqrt, Swish, "
    "Power, SoftmaxV2, LayerNorm, LayerNormV3, Transpose, ReluGrad, GeluGrad, SiluGrad, SoftmaxGrad, LayerNormGradV3, "
    "ReduceMean, ReduceMeanD, LogSoftmaxV2, LogSoftmaxGrad, ConcatD, SelectV2, MaskedFill, Axpy";

/// The plan of `op`, or why the host kernels do not support it.
inline Analysis analyze(const skc::OpRecord& op) {
    try {
        const std::string& t = op.op_type;
        Plan p;
        if (t == "MatMul" || t == "MatMulV2") p = detail::plan_matmul(op, detail::MatMulOp::matmul);
        else if (t == "BatchMatMulV2") p = detail::plan_matmul(op, detail::MatMulOp::batch_matmul);
        else if (t == "FusedMatMul") p = detail::plan_matmul(op, detail::MatMulOp::fused_matmul);
        else if (t == "Add") p = detail::plan_binary(op, BinaryKind::add);
        else if (t == "Sub") p = detail::plan_binary(op, BinaryKind::sub);
        else if (t == "Mul") p = detail::plan_binary(op, BinaryKind::mul);
        else if (t == "RealDiv") p = detail::plan_binary(op, BinaryKind::div);
        else if (t == "Axpy") p = detail::plan_binary(op, BinaryKind::axpy);
        else if (t == "Relu") p = detail::plan_unary(op, UnaryKind::relu);
        else if (t == "Neg") p = detail::plan_unary(op, UnaryKind::neg);
        else if (t == "Tanh") p = detail::plan_unary(op, UnaryKind::tanh);
        else if (t == "Rsqrt") p = detail::plan_unary(op, UnaryKind::rsqrt);
        else if (t == "Swish") p = detail::plan_unary(op, detail::swish_kind(op));
        else if (t == "Power") p = detail::plan_unary(op, detail::power_kind(op));
        else if (t == "Gelu") p = detail::plan_unary(op, detail::gelu_kind(op));
        else if (t == "SoftmaxV2") p = detail::plan_softmax(op);
        else if (t == "LayerNorm") p = detail::plan_layer_norm(op, false);
        else if (t == "LayerNormV3") p = detail::plan_layer_norm(op, true);
        else if (t == "Transpose") p = detail::plan_transpose(op);
        else if (t == "ReluGrad") p = detail::plan_grad(op, GradKind::relu);
        else if (t == "GeluGrad") p = detail::plan_grad(op, detail::gelu_grad_kind(op));
        else if (t == "SiluGrad") p = detail::plan_grad(op, GradKind::silu);
        else if (t == "SoftmaxGrad") p = detail::plan_softmax_grad(op);
        else if (t == "LayerNormGradV3") p = detail::plan_layer_norm_grad(op);
        else if (t == "ReduceMean" || t == "ReduceMeanD") p = detail::plan_reduce_mean(op);
        else if (t == "LogSoftmaxV2") p = detail::plan_log_softmax(op);
        else if (t == "LogSoftmaxGrad") p = detail::plan_log_softmax_grad(op);
        else if (t == "ConcatD") p = detail::plan_concat(op);
        else if (t == "SelectV2") p = detail::plan_select(op, false);
        else if (t == "MaskedFill") p = detail::plan_select(op, true);
        else
            return {std::nullopt, t + ": op type " + t + " is not supported by the host kernels (supported: " +
                                      std::string(supported_op_types) + ")"};
        return {std::move(p), {}};
    } catch (const detail::Unsupported& u) {
        return {std::nullopt, op.op_type + ": " + u.reason};
    }
}

}  // namespace skc_host
