// examples/torch/mapping.hpp: which aten calls the PyTorch plugin records, and as what.
//
// The plugin overrides a few aten CPU kernels (plugin.cpp). Each call is described here without
// any PyTorch type, so the mapping is tested and benchmarked without libtorch: a Call holds the
// aten op, its tensor arguments as sizes and strides, and its attributes. From a Call:
//   key_of()   the skc::CallKey of the call's raw arguments: cheap, no allocation, done per call;
//   describe() the OpRecord it is recorded as (the original's op type names), or why it is not
//              supported: done once per distinct key, remembered by the plugin in an skc::CallMap.
// The record is a function of what key_of() writes, so equal keys always mean equal records.
//
// What the records look like (docs/torch.md lists them): float32 tensors in format ND (where's
// condition and masked_fill's mask: bool); a dense tensor is described by its shape, a matrix
// operand of a product that is a transposed dense matrix by its stored shape and a transpose attr
// (as the original does for Linear's weight.t()), and any other strided operand of a product, or
// tensor of cat (a dynamic list), as a view (`is_view`, `stride`; the kernel gets the address of
// its first element, so no offset). Elementwise and row ops need dense (contiguous) tensors.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <skc/call_key.hpp>
#include <skc/op_record.hpp>
#include <skc/value.hpp>

namespace skc_torch {

/// The op types the plugin records: the original's names. Also the rows of counters().
enum class OpType : std::uint8_t {
    MatMulV2,
    FusedMatMul,
    BatchMatMulV2,
    Add,
    Mul,
    Relu,
    Gelu,
    SoftmaxV2,
    LayerNormV3,
    Transpose,
    Sub,
    RealDiv,
    Neg,
    Tanh,
    Rsqrt,
    Swish,
    Power,
    ReluGrad,
    GeluGrad,
    SoftmaxGrad,
    SiluGrad,
    LayerNormGradV3,
    ReduceMean,
    ConcatD,
    LogSoftmaxV2,
    LogSoftmaxGrad,
    SelectV2,
    MaskedFill,
    Axpy
};
inline constexpr std::size_t op_type_count = 29;

constexpr std::string_view name(OpType t) noexcept {
    switch (t) {
    case OpType::MatMulV2: return "MatMulV2";
    case OpType::FusedMatMul: return "FusedMatMul";
    case OpType::BatchMatMulV2: return "BatchMatMulV2";
    case OpType::Add: return "Add";
    case OpType::Mul: return "Mul";
    case OpType::Relu: return "Relu";
    case OpType::Gelu: return "Gelu";
    case OpType::SoftmaxV2: return "SoftmaxV2";
    case OpType::LayerNormV3: return "LayerNormV3";
    case OpType::Transpose: return "Transpose";
    case OpType::Sub: return "Sub";
    case OpType::RealDiv: return "RealDiv";
    case OpType::Neg: return "Neg";
    case OpType::Tanh: return "Tanh";
    case OpType::Rsqrt: return "Rsqrt";
    case OpType::Swish: return "Swish";
    case OpType::Power: return "Power";
    case OpType::ReluGrad: return "ReluGrad";
    case OpType::GeluGrad: return "GeluGrad";
    case OpType::SoftmaxGrad: return "SoftmaxGrad";
    case OpType::SiluGrad: return "SiluGrad";
    case OpType::LayerNormGradV3: return "LayerNormGradV3";
    case OpType::ReduceMean: return "ReduceMean";
    case OpType::ConcatD: return "ConcatD";
    case OpType::LogSoftmaxV2: return "LogSoftmaxV2";
    case OpType::LogSoftmaxGrad: return "LogSoftmaxGrad";
    case OpType::SelectV2: return "SelectV2";
    case OpType::MaskedFill: return "MaskedFill";
    case OpType::Axpy: return "Axpy";
    }
    return {};
}

/// The aten ops the plugin overrides (in-place and out= variants share their op's entry).
enum class Aten : std::uint8_t {
    mm,
    addmm,
    addmm_activation,
    bmm,
    add,
    mul,
    relu,
    gelu,
    softmax,
    native_layer_norm,
    clone,
    sub,
    div,
    neg,
    tanh,
    rsqrt,
    silu,
    pow,
    threshold_backward,
    gelu_backward,
    softmax_backward_data,
    silu_backward,
    native_layer_norm_backward,
    mean,
    cat,
    log_softmax,
    log_softmax_backward_data,
    where,
    masked_fill,
    axpy
};

constexpr OpType op_type_of(Aten a) noexcept {
    switch (a) {
    case Aten::mm:
    case Aten::addmm: return OpType::MatMulV2;
    case Aten::addmm_activation: return OpType::FusedMatMul;
    case Aten::bmm: return OpType::BatchMatMulV2;
    case Aten::add: return OpType::Add;
    case Aten::mul: return OpType::Mul;
    case Aten::relu: return OpType::Relu;
    case Aten::gelu: return OpType::Gelu;
    case Aten::softmax: return OpType::SoftmaxV2;
    case Aten::native_layer_norm: return OpType::LayerNormV3;
    case Aten::clone: return OpType::Transpose;
    case Aten::sub: return OpType::Sub;
    case Aten::div: return OpType::RealDiv;
    case Aten::neg: return OpType::Neg;
    case Aten::tanh: return OpType::Tanh;
    case Aten::rsqrt: return OpType::Rsqrt;
    case Aten::silu: return OpType::Swish;
    case Aten::pow: return OpType::Power;
    case Aten::threshold_backward: return OpType::ReluGrad;
    case Aten::gelu_backward: return OpType::GeluGrad;
    case Aten::softmax_backward_data: return OpType::SoftmaxGrad;
    case Aten::silu_backward: return OpType::SiluGrad;
    case Aten::native_layer_norm_backward: return OpType::LayerNormGradV3;
    case Aten::mean: return OpType::ReduceMean;
    case Aten::cat: return OpType::ConcatD;
    case Aten::log_softmax: return OpType::LogSoftmaxV2;
    case Aten::log_softmax_backward_data: return OpType::LogSoftmaxGrad;
    case Aten::where: return OpType::SelectV2;
    case Aten::masked_fill: return OpType::MaskedFill;
    case Aten::axpy: return OpType::Axpy;
    }
    return OpType::MatMulV2;
}

using Dims = std::span<const std::int64_t>;

/// A tensor argument as the framework hands it over. Only float32 tensors are ever described (and
/// the bool condition of where and mask of masked_fill, which the plugin checks to be bool); the
/// plugin counts calls with other dtypes as unsupported before it builds a Call.
struct TensorArg {
    Dims sizes;
    Dims strides;
    /// True only when is_dense(sizes, strides) (torch's is_contiguous(), a cached flag): the key
    /// then leaves the strides out, since the record of a dense tensor does not depend on them.
    bool dense = false;
};

/// One call of an overridden aten op.
struct Call {
    Aten aten = Aten::mm;
    std::array<TensorArg, 5> t{};  // the tensor arguments, in aten's order (see describe())
    std::size_t n = 0;             // how many of t are used
    std::int64_t i0 = 0;           // softmax: dim; layer norm: number of normalized dims;
                                   // gelu: 1 for tanh; addmm_activation: 1 for gelu;
                                   // gelu_backward: 1 for tanh; _softmax_backward_data: dim;
                                   // native_layer_norm_backward: number of normalized dims;
                                   // mean: the reduced dims, bit d for dim d; cat: dim;
                                   // _log_softmax, _log_softmax_backward_data: dim (all wrapped)
    double f0 = 0;                 // layer norm: eps; pow: the exponent; threshold_backward: threshold;
                                   // axpy: alpha (as a float)
    std::int64_t i1 = 0;           // mean: 1 for keepdim; addmm, addmm_activation: 1 when stock's
                                   // BLAS keeps a -0.0 sum (attr keep_negative_zero)

    /// cat: its tensors (t and n are unused).
    std::span<const TensorArg> list{};
};

/// Dense row-major (torch's is_contiguous: strides of size-1 dims do not matter; no elements is dense).
inline bool is_dense(Dims sizes, Dims strides) noexcept {
    std::int64_t expected = 1;
    for (std::size_t i = sizes.size(); i-- > 0;) {
        if (sizes[i] == 0) return true;
        if (sizes[i] != 1 && strides[i] != expected) return false;
        expected *= sizes[i];
    }
    return true;
}

inline bool is_dense(const TensorArg& t) noexcept { return is_dense(t.sizes, t.strides); }

/// The strides stock torch (its TensorIterator) gives the new output of an elementwise op of
/// inputs `ins` (dense or views) broadcast to `sizes`, into `out` (sizes.size() of them). The
/// layout is always dense. For dense inputs only a size-1 dim's stride can differ from the
/// row-major one, so `out` is that unless the output has a size-1 dim and the inputs are not all
/// of its shape; with a view among the inputs, or in that case, TensorIterator orders the dims by
/// the inputs' strides: innermost first, a dim broadcast in an input (stride 0) decides nothing,
/// equal strides put the smaller size inside; each output stride is the product of the sizes
/// inside it. x [3,1,32] with strides (32,1,1) times a number gives (32,1,1), not (32,32,1); the
/// negation of a transposed view is laid out transposed. Returns whether `out` differs from the
/// row-major strides.
inline bool elementwise_strides(Dims sizes, std::initializer_list<TensorArg> ins, std::span<std::int64_t> out) {
    const std::size_t r = sizes.size();
    std::int64_t acc = 1;
    bool unit = false;
    for (std::size_t d = r; d-- > 0;) out[d] = acc, acc *= sizes[d], unit = unit || sizes[d] == 1;
    bool same = true, dense = true;
    for (const TensorArg& t : ins) same = same && std::ranges::equal(t.sizes, sizes), dense = dense && is_dense(t);
    // Dense inputs of the output's shape: TensorIterator's contiguous fast path. A view (not dense)
    // takes its general path: the order of the dims from the inputs' strides.
    if (r < 2 || (dense && (!unit || same))) return false;
    // Each input's stride along output dim d: 0 where it is broadcast or has no such dim.
    auto stride = [&](const TensorArg& t, std::size_t d) -> std::int64_t {
        const std::size_t lead = r - t.sizes.size();
        if (d < lead) return 0;
        return t.sizes[d - lead] == 1 && sizes[d] != 1 ? 0 : t.strides[d - lead];
    };
    // 1: dim a goes inside dim b; -1: outside; 0: the inputs do not say.
    auto inner_after = [&](std::size_t a, std::size_t b) {
        for (const TensorArg& t : ins) {
            const std::int64_t sa = stride(t, a), sb = stride(t, b);
            if (sa == 0 || sb == 0) continue;
            if (sa != sb) return sa < sb ? -1 : 1;
            if (sizes[a] > sizes[b]) return 1;
        }
        return 0;
    };
    std::array<std::size_t, 64> perm{};  // innermost first; starts as row-major
    if (r > perm.size()) return false;
    for (std::size_t i = 0; i < r; ++i) perm[i] = r - 1 - i;
    for (std::size_t i = 1; i < r; ++i) {  // TensorIterator's insertion sort
        std::size_t b = i;
        for (std::size_t a = i; a-- > 0;) {
            const int c = inner_after(perm[a], perm[b]);
            if (c > 0) {
                std::swap(perm[a], perm[b]);
                b = a;
            } else if (c < 0) {
                break;
            }
        }
    }
    acc = 1;
    bool moved = false;
    for (std::size_t i = 0; i < r; ++i) {
        moved = moved || out[perm[i]] != acc;
        out[perm[i]] = acc, acc *= sizes[perm[i]];
    }
    return moved;
}

/// Whether the records of `a` depend on Call::i0, and on Call::f0.
constexpr bool uses_i0(Aten a) noexcept {
    return a == Aten::addmm_activation || a == Aten::gelu || a == Aten::softmax || a == Aten::native_layer_norm ||
           a == Aten::gelu_backward || a == Aten::softmax_backward_data || a == Aten::native_layer_norm_backward ||
           a == Aten::mean || a == Aten::cat || a == Aten::log_softmax || a == Aten::log_softmax_backward_data;
}
constexpr bool uses_f0(Aten a) noexcept {
    return a == Aten::native_layer_norm || a == Aten::pow || a == Aten::threshold_backward || a == Aten::axpy;
}

/// The call's raw arguments as a key: the op, every tensor's sizes and strides (none for a tensor
/// marked dense: an empty list, which no non-dense tensor has), cat's list of tensors likewise
/// (its length first, in the first word), the attributes the op's records use.
template <std::size_t Words>
void key_of(const Call& c, skc::BasicCallKey<Words>& k) noexcept {
    k.word(static_cast<std::uint64_t>(c.aten) | (static_cast<std::uint64_t>(c.n) << 8) |
           (static_cast<std::uint64_t>(c.list.size()) << 16));
    for (std::size_t i = 0; i < c.n; ++i) k.tensor(0, c.t[i].sizes, c.t[i].dense ? Dims{} : c.t[i].strides);
    for (const TensorArg& t : c.list) k.tensor(0, t.sizes, t.dense ? Dims{} : t.strides);
    if (uses_i0(c.aten)) k.integer(c.i0);
    if (uses_f0(c.aten)) k.real(c.f0);
    if (c.aten == Aten::mean || c.aten == Aten::addmm || c.aten == Aten::addmm_activation) k.integer(c.i1);
}

/// What a call is recorded as, or why it is not recorded.
struct Description {
    OpType type = OpType::MatMulV2;
    std::optional<skc::OpRecord> record;  // set when supported
    std::string reason;                   // set when not
};

namespace detail {

struct Unsupported {
    std::string reason;
};

[[noreturn]] inline void unsupported(std::string reason) { throw Unsupported{std::move(reason)}; }

inline std::string dims_str(Dims d) {
    std::string s = "[";
    for (std::size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
    return s + "]";
}

inline std::int64_t numel(Dims d) {
    std::int64_t n = 1;
    for (std::int64_t v : d) n *= v;
    return n;
}

inline skc::RuntimeShape shape(Dims d) {
    skc::RuntimeShape s;
    for (std::int64_t v : d) s.push_back(v);
    return s;
}

inline skc::TensorDesc dense(std::string name, std::int64_t index, Dims sizes) {
    return skc::plain_tensor(std::move(name), index, shape(sizes));
}

inline skc::TensorDesc dense(std::string name, std::int64_t index, const std::vector<std::int64_t>& sizes) {
    return dense(std::move(name), index, Dims(sizes));
}

inline skc::Attr attr(std::string name, std::string dtype, std::int64_t index, skc::Value v) {
    return skc::Attr{std::move(name), std::move(dtype), index, std::move(v), {}};
}

inline skc::OpRecord op(std::string type, std::vector<skc::TensorSlot> in, std::vector<skc::TensorSlot> out,
                        std::vector<skc::Attr> attrs) {
    skc::OpRecord r;
    r.op_type = std::move(type);
    r.inputs = std::move(in);
    r.outputs = std::move(out);
    r.attrs = std::move(attrs);
    return r;
}

/// An elementwise op's input (Add, Sub, Mul, RealDiv, Axpy and the unary ops): dense, or a view
/// described with its strides (`is_view`: a slice, a step, an expanded dim), with elements. What
/// the host kernels take of views (a unary op's last dim contiguous) is theirs to say (host
/// plan.hpp): the plugin records only what they analyse.
inline skc::TensorDesc elementwise_input(const TensorArg& t, std::string name, std::int64_t index,
                                         std::string_view what) {
    if (numel(t.sizes) == 0) unsupported(std::string(what) + " has no elements");
    skc::TensorDesc d = dense(std::move(name), index, t.sizes);
    if (!is_dense(t)) {
        d.is_view = true;
        d.stride = shape(t.strides);
    }
    return d;
}

/// A new output of `sizes` from inputs `ins` among which a view: stock's TensorIterator lays it out
/// from the views' strides (elementwise_strides()); the host kernels write it row-major, so that
/// layout must be row-major but for the strides of size-1 dims (which place no element).
inline void row_major_output(Dims sizes, std::initializer_list<TensorArg> ins) {
    std::array<std::int64_t, 64> st{};
    if (sizes.size() > st.size()) unsupported("rank above 64");
    elementwise_strides(sizes, ins, std::span(st.data(), sizes.size()));
    std::int64_t acc = 1;
    for (std::size_t d = sizes.size(); d-- > 0;) {
        if (sizes[d] != 1 && st[d] != acc) {
            std::vector<std::int64_t> got(st.begin(), st.begin() + static_cast<std::ptrdiff_t>(sizes.size()));
            unsupported("stock lays the output out with strides " + dims_str(got) +
                        " (from its inputs' strides), not row-major");
        }
        acc *= sizes[d];
    }
}

/// An elementwise or row op's input: dense float with elements.
inline const TensorArg& dense_input(const Call& c, std::size_t i, std::string_view what) {
    const TensorArg& t = c.t[i];
    if (!is_dense(t))
        unsupported(std::string(what) + " is not contiguous (sizes " + dims_str(t.sizes) + ", strides " +
                    dims_str(t.strides) + ")");
    if (numel(t.sizes) == 0) unsupported(std::string(what) + " has no elements");
    return t;
}

/// A matrix operand of a product (the last two dims are the matrix): dense as it is, dense once
/// its last two dims are swapped (described by the stored shape and the transpose attr), or a view.
struct Operand {
    skc::TensorDesc desc;
    bool transposed = false;
};

inline Operand operand(const TensorArg& t, std::string name, std::int64_t index) {
    if (is_dense(t)) return {dense(std::move(name), index, t.sizes), false};
    const std::size_t r = t.sizes.size();
    std::vector<std::int64_t> ss(t.sizes.begin(), t.sizes.end()), st(t.strides.begin(), t.strides.end());
    std::swap(ss[r - 1], ss[r - 2]);
    std::swap(st[r - 1], st[r - 2]);
    if (is_dense(ss, st)) return {dense(std::move(name), index, ss), true};
    skc::TensorDesc d = dense(std::move(name), index, t.sizes);
    d.is_view = true;
    d.stride = shape(t.strides);
    return {std::move(d), false};
}

inline void matrix(const TensorArg& t, std::size_t rank, std::string_view what) {
    if (t.sizes.size() != rank)
        unsupported(std::string(what) + " has rank " + std::to_string(t.sizes.size()) + ", expected " +
                    std::to_string(rank));
    if (numel(t.sizes) == 0) unsupported(std::string(what) + " has no elements");
}

/// addmm's `self` as a MatMulV2 bias: a dense row of n elements ([n] or [1, n]).
inline skc::TensorDesc bias(const TensorArg& b, std::int64_t n) {
    const bool row =
        (b.sizes.size() == 1 && b.sizes[0] == n) || (b.sizes.size() == 2 && b.sizes[0] == 1 && b.sizes[1] == n);
    if (!row)
        unsupported("the added tensor has shape " + dims_str(b.sizes) + ": only a bias row [" + std::to_string(n) +
                    "] or [1, " + std::to_string(n) + "] is supported");
    if (!is_dense(b)) unsupported("the bias is not contiguous");
    return dense("bias", 2, b.sizes);
}

/// A product of at most this many outputs (per batch), of two rows or more, whose first matrix is
/// stored transposed (a.t() of [K, M]), with K of at least few_outputs_min_k, runs stock. The host
/// kernels sum a product of few outputs (at most codegen.hpp's dot_outputs, the same 64) in doubles
/// only where A's rows are contiguous along K; this one they sum in float tiles, where the largest
/// error of a few outputs is one draw's luck: above 2x stock torch's in 8 to 20 of 60 draws of
/// [K, 2 to 5]^T x [K, 1 to 5], K of 1,024 to 16,384.
constexpr std::int64_t few_outputs = 64;
constexpr std::int64_t few_outputs_min_k = 32;

inline void not_few_transposed(const Operand& x1, std::int64_t m, std::int64_t k, std::int64_t n) {
    if (x1.transposed && m > 1 && m * n <= few_outputs && k >= few_outputs_min_k)
        unsupported("at most " + std::to_string(few_outputs) +
                    " outputs from a first matrix stored transposed: the host kernel would sum them in floats, "
                    "less accurately than stock");
}

/// mm(self, mat2), addmm(self, mat1, mat2), _addmm_activation(self, mat1, mat2, use_gelu).
inline skc::OpRecord matmul(const Call& c) {
    const bool with_bias = c.aten != Aten::mm;
    const TensorArg& a = c.t[with_bias ? 1 : 0];
    const TensorArg& b = c.t[with_bias ? 2 : 1];
    matrix(a, 2, "the first matrix");
    matrix(b, 2, "the second matrix");
    const std::int64_t m = a.sizes[0], n = b.sizes[1];
    if (a.sizes[1] != b.sizes[0]) unsupported("inner dims differ: " + dims_str(a.sizes) + " x " + dims_str(b.sizes));
    Operand x1 = operand(a, "x1", 0), x2 = operand(b, "x2", 1);
    not_few_transposed(x1, m, a.sizes[1], n);
    std::vector<skc::TensorSlot> in{std::move(x1.desc), std::move(x2.desc), std::monostate{}, std::monostate{}};
    if (with_bias) in[2] = bias(c.t[0], n);
    std::vector<skc::Attr> attrs{attr("transpose_x1", "bool", 0, x1.transposed),
                                 attr("transpose_x2", "bool", 1, x2.transposed)};
    if (c.aten == Aten::addmm_activation) {
        if (c.i0 != 0 && m * n == 1)  // torch's GELU of one element takes another path (its scalar formula)
            unsupported("a GELU epilogue of one element");
        attrs.push_back(attr("fused_op_type", "str", 2, c.i0 != 0 ? "gelu_erf" : "relu"));
        if (c.i1 != 0) attrs.push_back(attr("keep_negative_zero", "bool", 3, true));
        return op("FusedMatMul", std::move(in), {dense("y", 0, std::vector<std::int64_t>{m, n})}, std::move(attrs));
    }
    attrs.push_back(attr("offset_x", "int", 2, 0));
    if (with_bias && c.i1 != 0) attrs.push_back(attr("keep_negative_zero", "bool", 3, true));
    return op("MatMulV2", std::move(in), {dense("y", 0, std::vector<std::int64_t>{m, n})}, std::move(attrs));
}

/// bmm(self, mat2) and bmm.out.
inline skc::OpRecord batch_matmul(const Call& c) {
    const TensorArg &a = c.t[0], &b = c.t[1];
    matrix(a, 3, "the first batch of matrices");
    matrix(b, 3, "the second batch of matrices");
    if (a.sizes[0] != b.sizes[0] || a.sizes[2] != b.sizes[1])
        unsupported("shapes " + dims_str(a.sizes) + " and " + dims_str(b.sizes) + " do not multiply");
    Operand x1 = operand(a, "x1", 0), x2 = operand(b, "x2", 1);
    not_few_transposed(x1, a.sizes[1], a.sizes[2], b.sizes[2]);
    const std::vector<std::int64_t> y{a.sizes[0], a.sizes[1], b.sizes[2]};
    const bool t1 = x1.transposed, t2 = x2.transposed;
    return op("BatchMatMulV2", {std::move(x1.desc), std::move(x2.desc), std::monostate{}, std::monostate{}},
              {dense("y", 0, y)},
              {attr("adj_x1", "bool", 0, t1), attr("adj_x2", "bool", 1, t2), attr("offset_x", "int", 2, 0)});
}

/// The shape of a broadcast of two shapes; nullopt when they do not broadcast.
inline std::optional<std::vector<std::int64_t>> broadcast(Dims a, Dims b) {
    const std::size_t r = std::max(a.size(), b.size());
    std::vector<std::int64_t> out(r);
    for (std::size_t i = 0; i < r; ++i) {
        const std::int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
        const std::int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
        if (x != y && x != 1 && y != 1) return std::nullopt;
        out[i] = x == 1 ? y : x;
    }
    return out;
}

/// add(self, other), add_, sub, sub_, mul, mul_, div, div_ (true division): x1 = self, x2 = other,
/// any broadcast of the two; add and sub with alpha != 1 (axpy) as Axpy x1 + alpha x2 with attr
/// alpha (f0: alpha for add, -alpha for sub, as the float torch computes with); rsub(self, other,
/// alpha) as Sub or Axpy of (other, self).
inline skc::OpRecord binary(const Call& c) {
    const TensorArg &a = c.t[0], &b = c.t[1];
    skc::TensorDesc x1 = elementwise_input(a, "x1", 0, "self"), x2 = elementwise_input(b, "x2", 1, "other");
    const auto y = broadcast(a.sizes, b.sizes);
    if (!y) unsupported("shapes " + dims_str(a.sizes) + " and " + dims_str(b.sizes) + " do not broadcast");
    if (!is_dense(a) || !is_dense(b)) row_major_output(*y, {a, b});
    std::vector<skc::Attr> attrs;
    if (c.aten == Aten::axpy) attrs.push_back(attr("alpha", "float", 0, c.f0));
    return op(std::string(name(op_type_of(c.aten))), {std::move(x1), std::move(x2)}, {dense("y", 0, *y)},
              std::move(attrs));
}

/// relu(self), relu_, gelu(self, approximate), neg, neg_, tanh, tanh_, rsqrt, rsqrt_, silu, silu_
/// (Swish with scale 1, as the original's Swish has it), pow(self, exponent) with a number (Power
/// with power = the exponent, scale 1, shift 0).
inline skc::OpRecord unary(const Call& c) {
    const TensorArg& x = c.t[0];
    skc::TensorDesc xd = elementwise_input(x, "x", 0, "self");
    if (!is_dense(x)) row_major_output(x.sizes, {x});
    std::vector<skc::Attr> attrs;
    if (c.aten == Aten::gelu) attrs.push_back(attr("approximate", "str", 0, c.i0 != 0 ? "tanh" : "none"));
    if (c.aten == Aten::silu) attrs.push_back(attr("scale", "float", 0, 1.0));
    if (c.aten == Aten::pow)
        attrs = {attr("power", "float", 0, c.f0), attr("scale", "float", 1, 1.0), attr("shift", "float", 2, 0.0)};
    return op(std::string(name(op_type_of(c.aten))), {std::move(xd)}, {dense("y", 0, x.sizes)}, std::move(attrs));
}

/// _softmax(self, dim, half_to_float=false) and _softmax.out; dim already wrapped to [0, rank).
inline skc::OpRecord softmax(const Call& c) {
    const TensorArg& x = dense_input(c, 0, "self");
    if (x.sizes.empty()) unsupported("softmax of a 0-dim tensor");
    return op("SoftmaxV2", {dense("x", 0, x.sizes)}, {dense("y", 0, x.sizes)},
              {attr("axes", "list_int", 0, skc::Array{skc::Value(c.i0)}), attr("half_to_float", "bool", 1, false)});
}

/// native_layer_norm(input, normalized_shape, weight, bias, eps): the normalized dims are the last
/// i0 dims of the input; weight and bias are given (elementwise affine).
inline skc::OpRecord layer_norm(const Call& c) {
    const TensorArg& x = dense_input(c, 0, "input");
    const TensorArg& g = dense_input(c, 1, "weight");
    const TensorArg& b = dense_input(c, 2, "bias");
    const auto k = static_cast<std::size_t>(c.i0);
    if (k == 0 || k > x.sizes.size())
        unsupported("normalized_shape has " + std::to_string(c.i0) + " dims for an input of rank " +
                    std::to_string(x.sizes.size()));
    const std::size_t axis = x.sizes.size() - k;
    const Dims norm = x.sizes.subspan(axis);
    if (!std::equal(g.sizes.begin(), g.sizes.end(), norm.begin(), norm.end()) ||
        !std::equal(b.sizes.begin(), b.sizes.end(), norm.begin(), norm.end()))
        unsupported("weight " + dims_str(g.sizes) + " and bias " + dims_str(b.sizes) +
                    " are not the normalized shape " + dims_str(norm));
    // Such rows normalise to 0, or to -1 and 1, whatever x is, and their gradient is rounding
    // error times rstd^3: only stock's own mean and rstd, and its backward, give stock's.
    if (numel(norm) <= 2) unsupported("rows of one or two elements (see LayerNormGradV3)");
    std::vector<std::int64_t> stat(x.sizes.begin(), x.sizes.begin() + static_cast<std::ptrdiff_t>(axis));
    stat.resize(x.sizes.size(), 1);  // aten keeps the rank: [d0, .., 1, .., 1]
    const auto a = static_cast<std::int64_t>(axis);
    return op("LayerNormV3", {dense("x", 0, x.sizes), dense("gamma", 1, g.sizes), dense("beta", 2, b.sizes)},
              {dense("y", 0, x.sizes), dense("mean", 1, stat), dense("rstd", 2, stat)},
              {attr("begin_norm_axis", "int", 0, a), attr("begin_params_axis", "int", 1, a),
               attr("epsilon", "float", 2, c.f0)});
}

/// clone(self, memory_format=contiguous) of a permuted view of a dense tensor: Transpose. The
/// input is described as that dense tensor and the permutation, a value-dependent input whose
/// values are part of the op's identity (const_data), as the original's Transpose takes it.
inline skc::OpRecord transpose(const Call& c) {
    const TensorArg& v = c.t[0];
    const std::size_t r = v.sizes.size();
    if (numel(v.sizes) == 0) unsupported("self has no elements");
    if (is_dense(v)) unsupported("self is already contiguous: a plain copy, not a transpose");
    // The dense tensor's dims are the view's dims ordered by stride, largest first (dims of size 1
    // after the others of their stride, in index order, so the order is a function of the view).
    std::vector<std::size_t> order(r);
    for (std::size_t i = 0; i < r; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
        if (v.strides[x] != v.strides[y]) return v.strides[x] > v.strides[y];
        return v.sizes[x] != 1 && v.sizes[y] == 1;
    });
    std::vector<std::int64_t> in_dims(r), in_strides(r), perm(r);
    for (std::size_t j = 0; j < r; ++j) {
        in_dims[j] = v.sizes[order[j]];
        in_strides[j] = v.strides[order[j]];
        perm[order[j]] = static_cast<std::int64_t>(j);
    }
    if (!is_dense(in_dims, in_strides))
        unsupported("self (sizes " + dims_str(v.sizes) + ", strides " + dims_str(v.strides) +
                    ") is not a permutation of a dense tensor");
    // y dim i is x dim perm[i]: y = x.permute(perm).
    skc::TensorDesc p = dense("perm", 1, std::vector<std::int64_t>{static_cast<std::int64_t>(r)});
    p.dtype = "int64";
    skc::Array pv;
    for (std::int64_t d : perm) pv.emplace_back(d);
    p.const_data = skc::Value(std::move(pv));
    return op("Transpose", {dense("x", 0, in_dims), std::move(p)}, {dense("y", 0, v.sizes)}, {});
}

/// The gradient's two dense inputs of one shape, with elements: (grad_output, self) of
/// threshold_backward, gelu_backward, silu_backward, (grad_output, output) of _softmax_backward_data.
inline Dims grad_inputs(const Call& c, std::string_view second) {
    const TensorArg& dy = dense_input(c, 0, "grad_output");
    const TensorArg& x = dense_input(c, 1, second);
    if (!std::equal(dy.sizes.begin(), dy.sizes.end(), x.sizes.begin(), x.sizes.end()))
        unsupported("grad_output " + dims_str(dy.sizes) + " and " + std::string(second) + " " + dims_str(x.sizes) +
                    " differ in shape");
    return x.sizes;
}

/// threshold_backward(grad_output, self, 0) (relu's backward: self is relu's output) as ReluGrad
/// (gradients, features) -> backprops; gelu_backward(grad_output, self, approximate) as GeluGrad
/// (dy, x) -> z with attr approximate; silu_backward(grad_output, self) as SiluGrad (dy, x) -> dx.
inline skc::OpRecord activation_grad(const Call& c) {
    const Dims x = grad_inputs(c, "self");
    if (c.aten == Aten::threshold_backward) {
        if (c.f0 != 0) unsupported("threshold " + std::to_string(c.f0) + " is not 0 (only relu's backward)");
        return op("ReluGrad", {dense("gradients", 0, x), dense("features", 1, x)}, {dense("backprops", 0, x)}, {});
    }
    if (c.aten == Aten::gelu_backward) {
        if (numel(x) == 1)  // torch's GELU gradient of one element takes another path (its scalar formula)
            unsupported("a GELU gradient of one element");
        return op("GeluGrad", {dense("dy", 0, x), dense("x", 1, x)}, {dense("z", 0, x)},
                  {attr("approximate", "str", 0, c.i0 != 0 ? "tanh" : "none")});
    }
    return op("SiluGrad", {dense("dy", 0, x), dense("x", 1, x)}, {dense("dx", 0, x)}, {});
}

/// _softmax_backward_data(grad_output, output, dim, float) as SoftmaxGrad (softmax, grad_softmax)
/// -> grad_x, the original's input order: the softmax output first. dim already wrapped.
inline skc::OpRecord softmax_grad(const Call& c) {
    const Dims y = grad_inputs(c, "output");
    if (y.empty()) unsupported("softmax gradient of a 0-dim tensor");
    return op("SoftmaxGrad", {dense("softmax", 0, y), dense("grad_softmax", 1, y)}, {dense("grad_x", 0, y)},
              {attr("axes", "list_int", 0, skc::Array{skc::Value(c.i0)})});
}

/// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
/// [true, true, true]) as LayerNormGradV3 (dy, x, rstd, mean, gamma) -> (pd_x, pd_gamma, pd_beta),
/// the original's order; tensors (grad_out, input, mean, rstd, weight), the normalized dims the
/// last i0 of the input (bias is not read: its gradient is pd_beta's shape, weight's).
inline skc::OpRecord layer_norm_grad(const Call& c) {
    const TensorArg& dy = dense_input(c, 0, "grad_out");
    const TensorArg& x = dense_input(c, 1, "input");
    const TensorArg& mean = dense_input(c, 2, "mean");
    const TensorArg& rstd = dense_input(c, 3, "rstd");
    const TensorArg& g = dense_input(c, 4, "weight");
    if (!std::equal(dy.sizes.begin(), dy.sizes.end(), x.sizes.begin(), x.sizes.end()))
        unsupported("grad_out " + dims_str(dy.sizes) + " and input " + dims_str(x.sizes) + " differ in shape");
    const auto k = static_cast<std::size_t>(c.i0);
    if (k == 0 || k > x.sizes.size())
        unsupported("normalized_shape has " + std::to_string(c.i0) + " dims for an input of rank " +
                    std::to_string(x.sizes.size()));
    const Dims norm = x.sizes.subspan(x.sizes.size() - k);
    if (!std::equal(g.sizes.begin(), g.sizes.end(), norm.begin(), norm.end()))
        unsupported("weight " + dims_str(g.sizes) + " is not the normalized shape " + dims_str(norm));
    // Rows of one or two elements normalise to 0 or to -1 and 1, whatever x is: dx is 0 but for
    // rounding errors times rstd^3 (1e18 at eps 1e-12), which only stock's order of operations,
    // from stock's own mean and rstd, reproduces (the forward runs stock for them too).
    if (numel(norm) <= 2) unsupported("rows of one or two elements (dx is rounding error times rstd^3)");
    const std::int64_t rows = numel(x.sizes) / numel(norm);
    if (numel(mean.sizes) != rows || numel(rstd.sizes) != rows)
        unsupported("mean " + dims_str(mean.sizes) + " and rstd " + dims_str(rstd.sizes) +
                    " are not one value a row (" + std::to_string(rows) + ")");
    return op("LayerNormGradV3",
              {dense("dy", 0, x.sizes), dense("x", 1, x.sizes), dense("rstd", 2, rstd.sizes),
               dense("mean", 3, mean.sizes), dense("gamma", 4, g.sizes)},
              {dense("pd_x", 0, x.sizes), dense("pd_gamma", 1, g.sizes), dense("pd_beta", 2, g.sizes)}, {});
}

/// mean.dim(self, dim, keepdim) with dtype None or float, the reduced dims a bit mask (i0, bit d
/// for dim d; every dim for dim=None or [], as aten's mean; a 0-dim self reduces its one element),
/// keepdim i1: ReduceMean (x, axes) -> y, axes an int64 input with the reduced dims in ascending
/// order as const_data (as the original's ReduceMean takes them), attrs keep_dims and
/// noop_with_empty_axes = false. The host compiles only a mean over the last dims.
inline skc::OpRecord reduce_mean(const Call& c) {
    const TensorArg& x = dense_input(c, 0, "self");
    const std::size_t r = x.sizes.size();
    if (r > 62) unsupported("self has rank " + std::to_string(r) + ": at most 62 is supported");
    std::vector<std::int64_t> y;
    skc::Array axes;
    for (std::size_t d = 0; d < r; ++d) {
        const bool reduced = ((static_cast<std::uint64_t>(c.i0) >> d) & 1U) != 0;
        if (reduced) axes.emplace_back(static_cast<std::int64_t>(d));
        if (!reduced) y.push_back(x.sizes[d]);
        else if (c.i1 != 0) y.push_back(1);
    }
    skc::TensorDesc a = dense("axes", 1, std::vector<std::int64_t>{static_cast<std::int64_t>(axes.size())});
    a.dtype = "int64";
    a.const_data = skc::Value(std::move(axes));
    return op("ReduceMean", {dense("x", 0, x.sizes), std::move(a)}, {dense("y", 0, y)},
              {attr("keep_dims", "bool", 0, c.i1 != 0), attr("noop_with_empty_axes", "bool", 1, false)});
}

/// cat(tensors, dim) of the tensors in `list` (i0 the dim, wrapped): ConcatD (x, a dynamic list) ->
/// y, attrs concat_dim and N. Every tensor has elements and the first one's rank (at least 1) and
/// dims but along dim. A tensor is described by its shape when dense, else as a view (`is_view`,
/// `stride`: a slice of a wider tensor, a transposed one), as the matrix products' operands.
inline skc::OpRecord concat(const Call& c) {
    if (c.list.empty()) unsupported("no tensors");
    const std::size_t r = c.list[0].sizes.size();
    if (r == 0) unsupported("a 0-dim tensor cannot be concatenated");
    if (c.i0 < 0 || c.i0 >= static_cast<std::int64_t>(r))
        unsupported("dim " + std::to_string(c.i0) + " is out of range for rank " + std::to_string(r));
    const auto axis = static_cast<std::size_t>(c.i0);
    std::vector<std::int64_t> y(c.list[0].sizes.begin(), c.list[0].sizes.end());
    y[axis] = 0;
    std::vector<skc::TensorDesc> xs;
    for (std::size_t k = 0; k < c.list.size(); ++k) {
        const TensorArg& t = c.list[k];
        const std::string what = "tensors[" + std::to_string(k) + "]";
        if (numel(t.sizes) == 0) unsupported(what + " has no elements");
        bool same = t.sizes.size() == r;
        for (std::size_t d = 0; same && d < r; ++d) same = d == axis || t.sizes[d] == c.list[0].sizes[d];
        if (!same)
            unsupported(what + " has shape " + dims_str(t.sizes) + ", tensors[0] " + dims_str(c.list[0].sizes) +
                        ": they must differ along dim " + std::to_string(axis) + " only");
        y[axis] += t.sizes[axis];
        skc::TensorDesc d = dense("x", 0, t.sizes);
        d.param_type = skc::ParamType::dynamic;
        if (!is_dense(t)) {
            d.is_view = true;
            d.stride = shape(t.strides);
        }
        xs.push_back(std::move(d));
    }
    const auto n = static_cast<std::int64_t>(xs.size());
    return op("ConcatD", {std::move(xs)}, {dense("y", 0, y)},
              {attr("concat_dim", "int", 0, c.i0), attr("N", "int", 1, n)});
}

/// _log_softmax(self, dim, false) as LogSoftmaxV2 (logits) -> logsoftmax with attr axes [dim];
/// _log_softmax_backward_data(grad_output, output, dim, float) as LogSoftmaxGrad (grad, x: the
/// forward's output) -> y with attr axis [dim]. dim already wrapped (0 for a 0-dim tensor).
inline skc::OpRecord log_softmax(const Call& c) {
    if (c.aten == Aten::log_softmax) {
        const TensorArg& x = dense_input(c, 0, "self");
        return op("LogSoftmaxV2", {dense("logits", 0, x.sizes)}, {dense("logsoftmax", 0, x.sizes)},
                  {attr("axes", "list_int", 0, skc::Array{skc::Value(c.i0)})});
    }
    const Dims y = grad_inputs(c, "output");
    return op("LogSoftmaxGrad", {dense("grad", 0, y), dense("x", 1, y)}, {dense("y", 0, y)},
              {attr("axis", "list_int", 0, skc::Array{skc::Value(c.i0)})});
}

/// A dense bool tensor described (the plugin has checked the dtype).
inline skc::TensorDesc bool_desc(const Call& c, std::size_t i, std::string name, std::int64_t index,
                                 std::string_view what) {
    const TensorArg& t = dense_input(c, i, what);
    return skc::plain_tensor(std::move(name), index, shape(t.sizes), "bool");
}

/// where(condition, self, other) as SelectV2 (condition, x1, x2) -> y: the condition bool, self and
/// other float32 (a Python number comes as a 0-dim float32 tensor), any broadcast of the three.
/// masked_fill(self, mask, value) and masked_fill_ (value a number, or a 0-dim float32 tensor) as
/// MaskedFill (x, mask, value) -> y, value a float input of shape [] (the kernel reads it: the
/// value is not part of the op), y the broadcast of self and mask.
inline skc::OpRecord select(const Call& c) {
    if (c.aten == Aten::where) {
        skc::TensorDesc cond = bool_desc(c, 0, "condition", 0, "condition");
        const TensorArg& a = dense_input(c, 1, "self");
        const TensorArg& b = dense_input(c, 2, "other");
        const auto ab = broadcast(a.sizes, b.sizes);
        const auto y = ab ? broadcast(c.t[0].sizes, *ab) : std::nullopt;
        if (!y)
            unsupported("shapes " + dims_str(c.t[0].sizes) + ", " + dims_str(a.sizes) + " and " + dims_str(b.sizes) +
                        " do not broadcast");
        return op("SelectV2", {std::move(cond), dense("x1", 1, a.sizes), dense("x2", 2, b.sizes)}, {dense("y", 0, *y)},
                  {});
    }
    const TensorArg& x = dense_input(c, 0, "self");
    skc::TensorDesc mask = bool_desc(c, 1, "mask", 1, "mask");
    const auto y = broadcast(x.sizes, c.t[1].sizes);
    if (!y) unsupported("shapes " + dims_str(x.sizes) + " and " + dims_str(c.t[1].sizes) + " do not broadcast");
    return op("MaskedFill", {dense("x", 0, x.sizes), std::move(mask), dense("value", 2, std::vector<std::int64_t>{})},
              {dense("y", 0, *y)}, {});
}

}  // namespace detail

/// What `c` is recorded as. Never throws for unsupported arguments: the reason is returned.
inline Description describe(const Call& c) {
    Description d;
    d.type = op_type_of(c.aten);
    try {
        switch (c.aten) {
        case Aten::mm:
        case Aten::addmm:
        case Aten::addmm_activation: d.record = detail::matmul(c); break;
        case Aten::bmm: d.record = detail::batch_matmul(c); break;
        case Aten::add:
        case Aten::sub:
        case Aten::mul:
        case Aten::div:
        case Aten::axpy: d.record = detail::binary(c); break;
        case Aten::relu:
        case Aten::gelu:
        case Aten::neg:
        case Aten::tanh:
        case Aten::rsqrt:
        case Aten::silu:
        case Aten::pow: d.record = detail::unary(c); break;
        case Aten::softmax: d.record = detail::softmax(c); break;
        case Aten::native_layer_norm: d.record = detail::layer_norm(c); break;
        case Aten::clone: d.record = detail::transpose(c); break;
        case Aten::threshold_backward:
        case Aten::gelu_backward:
        case Aten::silu_backward: d.record = detail::activation_grad(c); break;
        case Aten::softmax_backward_data: d.record = detail::softmax_grad(c); break;
        case Aten::native_layer_norm_backward: d.record = detail::layer_norm_grad(c); break;
        case Aten::mean: d.record = detail::reduce_mean(c); break;
        case Aten::cat: d.record = detail::concat(c); break;
        case Aten::log_softmax:
        case Aten::log_softmax_backward_data: d.record = detail::log_softmax(c); break;
        case Aten::where:
        case Aten::masked_fill: d.record = detail::select(c); break;
        }
    } catch (const detail::Unsupported& u) {
        d.reason = std::string(name(d.type)) + ": " + u.reason;
    }
    return d;
}

}  // namespace skc_torch
