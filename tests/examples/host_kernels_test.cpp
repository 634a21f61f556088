// The host (CPU) reference kernels of examples/host/: every supported op at several shapes is
// turned into a shape-specialised kernel by generate_kernel() for each target this CPU runs (its
// own instruction set, and the x86-64 levels below it with other vector widths), compiled at test
// time with the system C++ compiler (c++ on PATH, or $SKC_HOST_CXX) and host_op_compiler's flags
// into one shared object per target, dlopened, run on random inputs and compared with
// run_generic() and with a double-precision reference (the error bound: generated_tolerance());
// the ops that may run in place are also run so, generated and generic, and must give the
// out-of-place result. The generic kernels are also checked against naive double-precision
// references, and unsupported ops against their reasons.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <skc/op_info_io.hpp>

#include "host/codegen.hpp"
#include "host/dispatch.hpp"
#include "test_support.hpp"

extern char** environ;

namespace examples_host_kernels_test {

namespace {

namespace fs = std::filesystem;
using skc::Attr;
using skc::OpRecord;
using skc::RuntimeShape;
using skc::TensorDesc;
using skc::TensorSlot;

using Kernel = void (*)(const float* const*, float* const*);

TensorDesc tensor(RuntimeShape shape, std::string dtype = "float") {
    return skc::plain_tensor(std::move(shape), std::move(dtype));
}

Attr attr(std::string name, std::string dtype, skc::Value v) {
    Attr a;
    a.name = std::move(name);
    a.dtype = std::move(dtype);
    a.value = std::move(v);
    return a;
}

OpRecord make(std::string type, std::vector<TensorSlot> in, std::vector<TensorSlot> out, std::vector<Attr> attrs = {}) {
    return skc::make_op(std::move(type), std::move(in), std::move(out), std::move(attrs));
}

OpRecord matmul(std::int64_t m, std::int64_t k, std::int64_t n, bool ta, bool tb, std::string type = "MatMulV2") {
    return make(std::move(type),
                {tensor(ta ? RuntimeShape{k, m} : RuntimeShape{m, k}),
                 tensor(tb ? RuntimeShape{n, k} : RuntimeShape{k, n}), std::monostate{}, std::monostate{}},
                {tensor({m, n})},
                {attr("transpose_x1", "bool", ta), attr("transpose_x2", "bool", tb), attr("offset_x", "int", 0)});
}

OpRecord bmm(std::int64_t b1, std::int64_t b2, std::int64_t m, std::int64_t k, std::int64_t n, bool ta, bool tb) {
    return make("BatchMatMulV2",
                {tensor(ta ? RuntimeShape{b1, k, m} : RuntimeShape{b1, m, k}),
                 tensor(tb ? RuntimeShape{b2, n, k} : RuntimeShape{b2, k, n})},
                {tensor({std::max(b1, b2), m, n})}, {attr("adj_x1", "bool", ta), attr("adj_x2", "bool", tb)});
}

/// A view of `shape` with element strides `stride` (x1 and x2 of the matrix products only).
TensorDesc view(RuntimeShape shape, RuntimeShape stride, std::optional<std::int64_t> offset = std::nullopt) {
    TensorDesc t = tensor(std::move(shape));
    t.is_view = true;
    t.stride = std::move(stride);
    t.offset = offset;
    return t;
}

/// The element strides of `t`: its own for a view, dense row-major otherwise.
std::vector<std::int64_t> strides(const TensorDesc& t) {
    if (t.is_view.value_or(false)) return {t.stride->begin(), t.stride->end()};
    std::vector<std::int64_t> st(t.shape.rank());
    std::int64_t acc = 1;
    for (std::size_t d = st.size(); d-- > 0;) st[d] = acc, acc *= t.shape[d];
    return st;
}

/// Floats a buffer for `t` needs: its element count, or for a view 1 + its farthest element.
std::size_t extent(const TensorDesc& t) {
    if (!t.is_view.value_or(false)) return static_cast<std::size_t>(t.shape.element_count().value());
    const std::vector<std::int64_t> st = strides(t);
    std::int64_t reach = 0;
    for (std::size_t d = 0; d < st.size(); ++d) reach += (t.shape[d] - 1) * st[d];
    return static_cast<std::size_t>(reach + 1);
}

/// The bytes of a bool buffer (a float buffer holding one byte an element).
unsigned char* bytes(std::vector<float>& v) { return reinterpret_cast<unsigned char*>(v.data()); }
const unsigned char* bytes(const std::vector<float>& v) { return reinterpret_cast<const unsigned char*>(v.data()); }

/// x1 . x2 as `type` with the given (stored) operands, transpose attrs, bias shape and, for
/// FusedMatMul, fused_op_type (nullopt: no attr). The output shape follows from the operands.
OpRecord mm(std::string type, TensorDesc a, TensorDesc b, bool ta, bool tb,
            std::optional<RuntimeShape> bias = std::nullopt, std::optional<std::string> fused = std::nullopt) {
    const bool batched = type == "BatchMatMulV2";
    const std::size_t r = a.shape.rank();
    const std::int64_t m = ta ? a.shape[r - 1] : a.shape[r - 2], n = tb ? b.shape[r - 2] : b.shape[r - 1];
    RuntimeShape y{m, n};
    if (batched) y = {std::max(a.shape[0], b.shape[0]), m, n};
    std::vector<TensorSlot> in{std::move(a), std::move(b)};
    if (!batched || bias) {
        in.emplace_back(bias ? TensorSlot(tensor(*bias)) : TensorSlot(std::monostate{}));
        in.emplace_back(std::monostate{});
    }
    std::vector<Attr> attrs{attr(batched ? "adj_x1" : "transpose_x1", "bool", ta),
                            attr(batched ? "adj_x2" : "transpose_x2", "bool", tb)};
    if (fused) attrs.push_back(attr("fused_op_type", "str", *fused));
    return make(std::move(type), std::move(in), {tensor(y)}, std::move(attrs));
}

OpRecord gelu(const RuntimeShape& s, std::optional<std::string> approximate) {
    std::vector<Attr> attrs;
    if (approximate) attrs.push_back(attr("approximate", "str", *approximate));
    return make("Gelu", {tensor(s)}, {tensor(s)}, std::move(attrs));
}

/// LayerNorm (`v3`: LayerNormV3) of x `s` over the dims from `axis` on, gamma and beta of those
/// dims, the mean and variance/rstd outputs shaped as aten's ([d0, .., 1, ..]) when wanted.
OpRecord layer_norm_axis(const RuntimeShape& s, std::int64_t axis, bool v3, bool mean, bool third, double eps = 1e-5) {
    const auto r = static_cast<std::int64_t>(s.rank());
    const std::int64_t a = axis < 0 ? axis + r : axis;
    RuntimeShape params, st;
    for (std::int64_t d = 0; d < r; ++d) {
        if (d >= a) params.push_back(s[static_cast<std::size_t>(d)]);
        st.push_back(d < a ? s[static_cast<std::size_t>(d)] : 1);
    }
    std::vector<TensorSlot> out{tensor(s)};
    out.emplace_back(mean ? TensorSlot(tensor(st)) : TensorSlot(std::monostate{}));
    out.emplace_back(third ? TensorSlot(tensor(st)) : TensorSlot(std::monostate{}));
    return make(
        v3 ? "LayerNormV3" : "LayerNorm", {tensor(s), tensor(params), tensor(params)}, std::move(out),
        {attr("begin_norm_axis", "int", axis), attr("begin_params_axis", "int", axis), attr("epsilon", "float", eps)});
}

skc::Array int_array(const std::vector<std::int64_t>& v) {
    skc::Array a;
    for (std::int64_t x : v) a.emplace_back(x);
    return a;
}

/// ReduceMean of x `s` over `axes` (a const_data input, as the torch plugin records it).
OpRecord reduce_mean(const RuntimeShape& s, const std::vector<std::int64_t>& axes, bool keep) {
    const auto r = static_cast<std::int64_t>(s.rank());
    std::vector<bool> red(s.rank(), axes.empty());
    for (std::int64_t a : axes)
        if (r > 0) red[static_cast<std::size_t>(a < 0 ? a + r : a)] = true;
    RuntimeShape y;
    for (std::size_t d = 0; d < s.rank(); ++d)
        if (!red[d]) y.push_back(s[d]);
        else if (keep) y.push_back(1);
    TensorDesc ax = tensor({static_cast<std::int64_t>(axes.size())}, "int64");
    ax.const_data = int_array(axes);
    return make("ReduceMean", {tensor(s), ax}, {tensor(y)},
                {attr("keep_dims", "bool", keep), attr("noop_with_empty_axes", "bool", false)});
}

OpRecord log_softmax(const RuntimeShape& s) {
    return make("LogSoftmaxV2", {tensor(s)}, {tensor(s)}, {attr("axes", "list_int", skc::Array{skc::Value(-1)})});
}

OpRecord log_softmax_grad(const RuntimeShape& s) {
    return make("LogSoftmaxGrad", {tensor(s), tensor(s)}, {tensor(s)},
                {attr("axis", "list_int", skc::Array{skc::Value(-1)})});
}

/// ConcatD of `xs` (dense tensors or views) along `dim`.
OpRecord concat(const std::vector<TensorDesc>& xs, std::int64_t dim) {
    RuntimeShape y = xs[0].shape;
    const std::size_t a = static_cast<std::size_t>(dim < 0 ? dim + static_cast<std::int64_t>(y.rank()) : dim);
    y[a] = 0;
    for (const TensorDesc& x : xs) y[a] += x.shape[a];
    return make("ConcatD", {xs}, {tensor(y)},
                {attr("concat_dim", "int", dim), attr("N", "int", static_cast<std::int64_t>(xs.size()))});
}

/// The broadcast of shapes, NumPy's.
RuntimeShape broadcast(std::initializer_list<RuntimeShape> shapes) {
    std::size_t r = 0;
    for (const RuntimeShape& s : shapes) r = std::max(r, s.rank());
    RuntimeShape y;
    for (std::size_t d = 0; d < r; ++d) y.push_back(1);
    for (const RuntimeShape& s : shapes)
        for (std::size_t k = 0; k < s.rank(); ++k)
            if (s[s.rank() - 1 - k] != 1) y[r - 1 - k] = s[s.rank() - 1 - k];
    return y;
}

OpRecord select(const RuntimeShape& c, const RuntimeShape& a, const RuntimeShape& b) {
    return make("SelectV2", {tensor(c, "bool"), tensor(a), tensor(b)}, {tensor(broadcast({c, a, b}))});
}

OpRecord masked_fill(const RuntimeShape& x, const RuntimeShape& mask) {
    return make("MaskedFill", {tensor(x), tensor(mask, "bool"), tensor({})}, {tensor(broadcast({x, mask}))});
}

/// The ops the torch plugin records beyond the demo's: matmuls with views, biases and fused
/// activations, Gelu's approximate attr, LayerNorm(V3) over any axis. Generated against generic
/// and generic against the naive references both run over these.
std::vector<OpRecord> plugin_cases() {
    std::vector<OpRecord> c;
    // MatMulV2 with a bias [N] or [1, N], every transpose combination, fewer rows than a tile and
    // a full tile with a partial one, N less than a vector.
    for (std::int64_t m : {4, 13})
        for (bool ta : {false, true})
            for (bool tb : {false, true})
                for (const RuntimeShape& bias : {RuntimeShape{11}, RuntimeShape{1, 11}})
                    c.push_back(mm("MatMulV2", tensor(ta ? RuntimeShape{9, m} : RuntimeShape{m, 9}),
                                   tensor(tb ? RuntimeShape{11, 9} : RuntimeShape{9, 11}), ta, tb, bias));
    c.push_back(mm("MatMul", tensor({7, 33}), tensor({16, 33}), false, true, RuntimeShape{16}));  // Linear: x W^T + b
    // One row against a transposed x2 (a matrix-vector product, the dot form): K a few vectors and
    // a tail, K of several blocks of lanes, a bias and an activation, a batch of single rows.
    c.push_back(mm("MatMulV2", tensor({1, 67}), tensor({19, 67}), false, true, RuntimeShape{19}));
    c.push_back(mm("FusedMatMul", tensor({1, 4100}), tensor({5, 4100}), false, true, RuntimeShape{5}, "gelu_erf"));
    c.push_back(mm("MatMulV2", view({1, 16}, {32, 1}), tensor({9, 16}), false, true));
    c.push_back(mm("BatchMatMulV2", tensor({3, 1, 40}), tensor({3, 7, 40}), false, true));
    // Views: a [M, K] window of a wider [M, 2K] matrix, as x1 or x2, with the transposes.
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            c.push_back(mm("MatMulV2", ta ? view({9, 13}, {18, 1}) : view({13, 9}, {18, 1}),
                           tensor(tb ? RuntimeShape{11, 9} : RuntimeShape{9, 11}), ta, tb));
            c.push_back(mm("MatMulV2", tensor(ta ? RuntimeShape{9, 4} : RuntimeShape{4, 9}),
                           tb ? view({11, 9}, {20, 1}) : view({9, 11}, {22, 1}), ta, tb, RuntimeShape{11}));
            // Arbitrary strides on both, column-major with padding and every other column.
            c.push_back(mm("MatMulV2", ta ? view({9, 13}, {1, 12}) : view({13, 9}, {1, 16}),
                           tb ? view({11, 9}, {1, 13}) : view({9, 11}, {23, 2}), ta, tb));
        }
    // x2 an unfold view (strides 1, 1: rows and columns both step one float), N % 16 == 8 and
    // K % 8 == 0: with 16-float vectors the last 8 columns go through a packed panel copied by
    // tr8, whose prelude must be in the source although B's rows are contiguous.
    for (std::int64_t n : {24, 40}) c.push_back(mm("MatMulV2", tensor({5, 16}), view({16, n}, {1, 1}), false, false));
    // Broadcast inner strides: every row of x2 the same row, every column of x1 the same column.
    c.push_back(mm("MatMulV2", view({7, 5}, {1, 0}), view({5, 10}, {0, 1}), false, false));
    // Attention, L = 13 tokens, B * H = 3, D = 4: q, k and v are [L, B*H, D] contiguous, viewed
    // [B*H, L, D] with strides [D, B*H*D, 1]; k^T is the view [B*H, D, L] with strides [D, 1, B*H*D].
    for (std::int64_t l : {5, 13}) {
        const std::int64_t bh = 3, d = 4;
        const TensorDesc q = view({bh, l, d}, {d, bh * d, 1}), kt = view({bh, d, l}, {d, 1, bh * d});
        c.push_back(mm("BatchMatMulV2", q, kt, false, false));                  // q k^T
        c.push_back(mm("BatchMatMulV2", q, q, false, true));                    // q (k)^T by adj_x2
        c.push_back(mm("BatchMatMulV2", kt, kt, true, false));                  // (q^T)^T k^T
        c.push_back(mm("BatchMatMulV2", tensor({bh, l, l}), q, false, false));  // p v
        c.push_back(
            mm("BatchMatMulV2", tensor({bh, l, l}), view({bh, d, l}, {d, 1, bh * d}), false, true));  // p (v^T)^T
    }
    // Expanded batch (stride 0) and a batch of 1 with a stride, broadcast either way.
    c.push_back(mm("BatchMatMulV2", tensor({3, 7, 5}), view({3, 5, 9}, {0, 9, 1}), false, false));
    c.push_back(mm("BatchMatMulV2", view({3, 5, 7}, {0, 1, 5}), tensor({3, 5, 9}), true, false));
    c.push_back(mm("BatchMatMulV2", view({1, 7, 5}, {99, 5, 1}), view({4, 9, 5}, {45, 1, 9}), false, true));
    // FusedMatMul: every activation, with and without a bias, fewer rows than a tile and more, B
    // direct and packed (transposed), N = 13.
    for (const char* f : {"relu", "gelu_erf", "gelu_tanh"})
        for (std::int64_t m : {4, 13})
            for (bool tb : {false, true})
                for (int bias = 0; bias < 3; ++bias) {
                    const std::optional<RuntimeShape> b =
                        bias == 0 ? std::nullopt
                                  : std::optional<RuntimeShape>(bias == 1 ? RuntimeShape{13} : RuntimeShape{1, 13});
                    c.push_back(mm("FusedMatMul", tensor({m, 9}),
                                   tensor(tb ? RuntimeShape{13, 9} : RuntimeShape{9, 13}), false, tb, b, f));
                }
    c.push_back(mm("FusedMatMul", view({9, 6}, {1, 12}), tensor({16, 9}), true, true, RuntimeShape{16}, "gelu_tanh"));
    // K of many packed blocks and a remainder (x2 transposed or strided), with a bias and an
    // activation.
    c.push_back(mm("FusedMatMul", tensor({7, 4097}), tensor({3, 4097}), false, true, RuntimeShape{3}, "gelu_erf"));
    c.push_back(mm("MatMulV2", tensor({7, 4097}), view({4097, 3}, {1, 4100}), false, false, RuntimeShape{3}));
    // The blocks around the tiles (codegen.hpp, row_block_rows()): one block of rows over two blocks
    // of K (the last partial; B's rows packed, the last columns too); blocks of 256 rows (a partial
    // one, then the last rows fewer than a tile), A transposed and packed, B packed (a transposed B:
    // in 8 x 8 blocks; in place: a row at a time), the rest in whole vectors and a packed panel.
    c.push_back(mm("MatMulV2", tensor({40, 300}), tensor({300, 37}), false, false));
    c.push_back(mm("MatMulV2", tensor({136, 490}), tensor({136, 536}), true, false, RuntimeShape{536}));
    c.push_back(mm("FusedMatMul", tensor({1043, 64}), tensor({258, 64}), false, true, RuntimeShape{258}, "relu"));
    // A's blocks packed (codegen.hpp, packs_a()): a transposed A above; A in rows past 256 KiB
    // ([1043, 64] above, and here with its last block of K not a multiple of 8 rows: the copy in 8 x 8
    // blocks, then the loop), three blocks of rows, the last with the last rows fewer than a tile.
    c.push_back(mm("MatMulV2", tensor({600, 131}), tensor({131, 40}), false, false));
    // Blocks of K of two blocked sums each (codegen.hpp, kc_sums): a whole block, then a partial one
    // of a whole sum and a partial sum (K = 256 + 128 + 45), A and op(B) packed or read in place, a
    // bias and an activation applied once, after the last sum.
    c.push_back(mm("MatMulV2", tensor({40, 429}), tensor({429, 70}), false, false));
    c.push_back(mm("FusedMatMul", tensor({429, 40}), tensor({70, 429}), true, true, RuntimeShape{70}, "gelu_erf"));
    c.push_back(mm("MatMulV2", tensor({3, 429}), tensor({429, 2000}), false, false, RuntimeShape{2000}));
    // Sums in two levels past 2,048 rows of K (codegen.hpp, grouped_sums()): two whole groups and a
    // partial one (K = 2 x 2,048 + 404), tiles and the last rows, a panel and the last columns, A
    // packed; op(B) transposed with a bias and an activation; a batch.
    c.push_back(mm("MatMulV2", tensor({20, 4500}), tensor({4500, 37}), false, false));
    c.push_back(mm("FusedMatMul", tensor({9, 4200}), tensor({35, 4200}), false, true, RuntimeShape{35}, "gelu_erf"));
    c.push_back(mm("BatchMatMulV2", tensor({2, 8, 4500}), tensor({2, 4500, 24}), false, false));
    // Gelu: approximate none (erf), tanh, absent (tanh).
    for (const RuntimeShape& s : {RuntimeShape{7, 33}, RuntimeShape{1}}) {
        c.push_back(gelu(s, "none"));
        c.push_back(gelu(s, "tanh"));
        c.push_back(gelu(s, std::nullopt));
    }
    // LayerNorm and LayerNormV3 over the last, the last two, and every dim, by negative and
    // positive axes, with and without the mean and the third output; 8 rows and more use the
    // grouped path of the generated kernel.
    for (bool v3 : {false, true}) {
        c.push_back(layer_norm_axis({3, 8, 5}, -1, v3, true, true));
        c.push_back(layer_norm_axis({3, 8, 5}, 2, v3, false, true));
        c.push_back(layer_norm_axis({3, 8, 5}, -2, v3, true, false));
        c.push_back(layer_norm_axis({16, 2, 7}, 1, v3, true, true, 1e-6));
        c.push_back(layer_norm_axis({16, 2, 7}, -2, v3, false, false));
        c.push_back(layer_norm_axis({2, 3, 5}, 0, v3, true, true));
    }
    // The gradients training calls: ReluGrad, GeluGrad (erf, tanh, and without the attr: tanh),
    // SiluGrad, elementwise of dy and x; one element, whole vectors of every width, and tails.
    for (const RuntimeShape& s : {RuntimeShape{1}, RuntimeShape{7, 33}, RuntimeShape{4, 64}, RuntimeShape{2, 3, 13}}) {
        c.push_back(make("ReluGrad", {tensor(s), tensor(s)}, {tensor(s)}));
        c.push_back(make("SiluGrad", {tensor(s), tensor(s)}, {tensor(s)}));
        for (const char* a : {"none", "tanh"})
            c.push_back(make("GeluGrad", {tensor(s), tensor(s)}, {tensor(s)}, {attr("approximate", "str", a)}));
        c.push_back(make("GeluGrad", {tensor(s), tensor(s)}, {tensor(s)}));
    }
    // SoftmaxGrad over the last axis (-1 or its index): rows of one column, of whole vectors, with
    // tails, and long ones.
    for (const RuntimeShape& s : {RuntimeShape{1, 1}, RuntimeShape{7, 33}, RuntimeShape{2, 16, 16}, RuntimeShape{3, 5},
                                  RuntimeShape{4, 1000}}) {
        c.push_back(make("SoftmaxGrad", {tensor(s), tensor(s)}, {tensor(s)},
                         {attr("axes", "list_int", skc::Array{skc::Value(-1)})}));
        c.push_back(make("SoftmaxGrad", {tensor(s), tensor(s)}, {tensor(s)},
                         {attr("axes", "list_int", skc::Array{skc::Value(static_cast<std::int64_t>(s.rank()) - 1)})}));
    }
    // LayerNormGradV3 over the last dim and the last two, whole vectors and tails, one row and many.
    for (const auto& [x, g] : std::vector<std::pair<RuntimeShape, RuntimeShape>>{
             {{3, 8, 5}, {5}}, {{7, 33}, {33}}, {{2, 16, 16}, {16, 16}}, {{1, 64}, {64}}, {{4, 3, 7}, {3, 7}}}) {
        RuntimeShape st = x;
        for (std::size_t d = x.rank() - g.rank(); d < x.rank(); ++d) st[d] = 1;
        c.push_back(make("LayerNormGradV3", {tensor(x), tensor(x), tensor(st), tensor(st), tensor(g)},
                         {tensor(x), tensor(g), tensor(g)}));
    }
    // ReduceMean over the last axis, the last two, every axis (also as none: dim=[]), keepdim or
    // not; rows of one vector and less, of whole vectors, with tails, and of many blocks and a
    // group of them (16,384 floats with 16-float vectors), so that every level of the cascade runs.
    for (bool keep : {false, true}) {
        c.push_back(reduce_mean({7, 33}, {-1}, keep));
        c.push_back(reduce_mean({9, 3}, {1}, keep));
        c.push_back(reduce_mean({2, 3, 100}, {-1, -2}, keep));
        c.push_back(reduce_mean({2, 16, 16}, {2}, keep));
        c.push_back(reduce_mean({3, 5}, {}, keep));
        c.push_back(reduce_mean({3, 5}, {1, 0}, keep));
        c.push_back(reduce_mean({4, 1000}, {1}, keep));
    }
    c.push_back(reduce_mean({}, {}, false));
    c.push_back(reduce_mean({1}, {0}, true));
    c.push_back(reduce_mean({3, 3000}, {-1}, false));
    c.push_back(reduce_mean({2, 20000}, {-1}, true));
    // Dims of size 1 do not count: a mean over one (a copy divided by 1), or past a kept one.
    c.push_back(reduce_mean({3, 1, 4}, {1}, true));
    c.push_back(reduce_mean({2, 3, 1, 4}, {1, 3}, false));
    // LogSoftmaxV2 and LogSoftmaxGrad over the last axis: one column, rows in registers (whole
    // vectors, and groups with a partial last one), tails, long rows.
    for (const RuntimeShape& s : {RuntimeShape{1, 1}, RuntimeShape{7, 33}, RuntimeShape{2, 16, 16}, RuntimeShape{3, 5},
                                  RuntimeShape{4, 1000}, RuntimeShape{7, 32}}) {
        c.push_back(log_softmax(s));
        c.push_back(log_softmax_grad(s));
    }
    c.push_back(
        make("LogSoftmaxV2", {tensor({})}, {tensor({})}, {attr("axes", "list_int", skc::Array{skc::Value(0)})}));
    c.push_back(make("LogSoftmaxGrad", {tensor({}), tensor({})}, {tensor({})},
                     {attr("axis", "list_int", skc::Array{skc::Value(0)})}));
    // ConcatD: two and three inputs, along the last dim, the first and one between (negative and
    // positive), one input alone; views: a window of a wider tensor, rotary's slice of the last dim
    // (runs of 8 floats 16 apart), a transposed matrix (an element loop), a broadcast row (stride 0).
    c.push_back(concat({tensor({2, 16, 64}), tensor({2, 16, 64})}, 2));
    c.push_back(concat({tensor({3, 5}), tensor({1, 5}), tensor({4, 5})}, 0));
    c.push_back(concat({tensor({2, 3, 4}), tensor({2, 3, 1}), tensor({2, 3, 7})}, -1));
    c.push_back(concat({tensor({2, 3, 4}), tensor({2, 5, 4})}, -2));
    c.push_back(concat({tensor({6, 7})}, 1));
    c.push_back(concat({view({2, 3, 4}, {24, 8, 1}), tensor({2, 3, 5})}, -1));
    c.push_back(concat({tensor({2, 4, 3, 8}), view({2, 4, 3, 8}, {192, 48, 16, 1})}, 3));
    c.push_back(concat({view({4, 3}, {1, 4}), tensor({2, 3})}, 0));
    c.push_back(concat({view({5, 6}, {0, 1}), tensor({5, 2})}, 1));
    // SelectV2 and MaskedFill: equal shapes, a causal mask [T, T] against [B, H, T, T], a condition
    // broadcast along the last dim (one condition a run), a number against a tensor, every
    // operand broadcast, one element.
    c.push_back(select({7, 33}, {7, 33}, {7, 33}));
    c.push_back(select({4, 4}, {2, 3, 4, 4}, {}));
    c.push_back(select({2, 5, 1}, {5, 7}, {2, 5, 7}));
    c.push_back(select({3, 1}, {}, {1, 6}));
    c.push_back(select({1}, {1}, {1}));
    c.push_back(masked_fill({2, 3, 4, 4}, {4, 4}));
    c.push_back(masked_fill({7, 33}, {7, 33}));
    c.push_back(masked_fill({2, 5, 7}, {2, 5, 1}));
    c.push_back(masked_fill({3, 1}, {1, 5}));
    c.push_back(masked_fill({}, {}));
    // A mask broadcast along a middle dim, rows of 8: g++ 12 -O3 with AVX-512 vectorised the
    // unrolled middle loop's conditional loads of x under the first row's mask.
    c.push_back(masked_fill({5, 2, 8}, {5, 1, 8}));
    c.push_back(select({5, 1, 8}, {5, 2, 8}, {5, 1, 8}));
    // Elementwise ops of views (the torch plugin's slices, steps and expanded dims): rotary
    // embedding's halves x[..., 8:] and x[..., :8] of [2, 3, 5, 16]; a run of 14 of [2, 4, 1, 16]
    // (a vector and a tail); a step of 2 along the last dim (binary ops read it at its stride); an
    // expanded middle dim; a view of one element.
    const TensorDesc half = view({2, 3, 5, 8}, {240, 80, 16, 1});
    for (const char* t : {"Neg", "Tanh", "Gelu", "Swish", "Relu"}) c.push_back(make(t, {half}, {tensor({2, 3, 5, 8})}));
    c.push_back(make("Rsqrt", {view({2, 4, 1, 14}, {64, 16, 16, 1})}, {tensor({2, 4, 1, 14})}));
    c.push_back(make("Mul", {half, view({2, 3, 5, 8}, {240, 80, 16, 1})}, {tensor({2, 3, 5, 8})}));
    c.push_back(make("Sub", {view({2, 3, 5, 8}, {240, 80, 16, 2}), tensor({8})}, {tensor({2, 3, 5, 8})}));
    c.push_back(make("RealDiv", {view({4, 6, 16}, {16, 0, 1}), tensor({4, 6, 1})}, {tensor({4, 6, 16})}));
    c.push_back(make("Add", {view({3, 7}, {9, 1}), tensor({})}, {tensor({3, 7})}));
    c.push_back(make("Neg", {view({1, 1}, {5, 3})}, {tensor({1, 1})}));
    return c;
}

OpRecord binary(std::string type, RuntimeShape a, RuntimeShape b, RuntimeShape y) {
    return make(std::move(type), {tensor(std::move(a)), tensor(std::move(b))}, {tensor(std::move(y))});
}

OpRecord unary(std::string type, const RuntimeShape& s) { return make(std::move(type), {tensor(s)}, {tensor(s)}); }

/// Axpy x1 + alpha x2, as the torch plugin records add and sub with alpha != 1.
OpRecord axpy(RuntimeShape a, RuntimeShape b, double alpha) {
    RuntimeShape y = a.rank() >= b.rank() ? a : b;
    for (std::size_t k = 0; k < std::min(a.rank(), b.rank()); ++k) {
        const std::int64_t u = a[a.rank() - 1 - k], v = b[b.rank() - 1 - k];
        y[y.rank() - 1 - k] = u == 1 ? v : u;
    }
    return make("Axpy", {tensor(std::move(a)), tensor(std::move(b))}, {tensor(std::move(y))},
                {attr("alpha", "float", alpha)});
}

/// Power (scale 1, shift 0): x^e, as the torch plugin records pow(x, e).
OpRecord power(const RuntimeShape& s, double e) {
    return make("Power", {tensor(s)}, {tensor(s)},
                {attr("power", "float", e), attr("scale", "float", 1.0), attr("shift", "float", 0.0)});
}

OpRecord softmax(const RuntimeShape& s) {
    return make("SoftmaxV2", {tensor(s)}, {tensor(s)}, {attr("axes", "list_int", skc::Array{skc::Value(-1)})});
}

OpRecord layer_norm(const RuntimeShape& s, bool stats, double eps = 1e-5) {
    const std::int64_t d = s[s.rank() - 1];
    RuntimeShape st = s;
    st[s.rank() - 1] = 1;
    std::vector<TensorSlot> out{tensor(s)};
    if (stats) out.insert(out.end(), {tensor(st), tensor(st)});
    return make(
        "LayerNorm", {tensor(s), tensor({d}), tensor({d})}, std::move(out),
        {attr("begin_norm_axis", "int", -1), attr("begin_params_axis", "int", -1), attr("epsilon", "float", eps)});
}

OpRecord transpose(const RuntimeShape& s, const std::vector<std::int64_t>& perm, bool as_attr = false) {
    RuntimeShape y;
    skc::Array pv;
    for (std::int64_t p : perm) {
        y.push_back(s[static_cast<std::size_t>(p < 0 ? p + static_cast<std::int64_t>(s.rank()) : p)]);
        pv.emplace_back(p);
    }
    if (as_attr) return make("Transpose", {tensor(s)}, {tensor(y)}, {attr("perm", "list_int", pv)});
    TensorDesc pt = tensor({static_cast<std::int64_t>(perm.size())}, "int64");
    pt.const_data = pv;
    return make("Transpose", {tensor(s), pt}, {tensor(y)});
}

/// Every op the test compiles: hand-made shapes plus the supported example op info files.
std::vector<std::pair<std::string, OpRecord>> cases() {
    std::vector<std::pair<std::string, OpRecord>> c;
    auto add = [&](OpRecord r) {
        std::string name = skc_host::detail::describe(r);
        c.emplace_back(std::move(name), std::move(r));
    };
    add(matmul(1, 1, 1, false, false, "MatMul"));
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            add(matmul(7, 33, 5, ta, tb));
            add(matmul(32, 64, 48, ta, tb));
        }
    add(matmul(33, 1, 7, false, true, "MatMul"));
    add(matmul(1, 128, 33, false, false));
    // K above a block of the loops (256 rows of op(B)) with a remainder, primes elsewhere:
    // full panels, whole-vector and sub-vector column tails, row tails, every transpose.
    for (bool ta : {false, true})
        for (bool tb : {false, true}) add(matmul(17, 300, 53, ta, tb));
    add(mm("MatMulV2", tensor({13, 131}), tensor({37, 131}), false, true, RuntimeShape{37}));
    add(mm("MatMulV2", tensor({13, 131}), tensor({131, 37}), false, false, RuntimeShape{1, 37}));
    for (bool ta : {false, true})
        for (bool tb : {false, true}) add(bmm(3, 3, 7, 33, 5, ta, tb));
    add(bmm(2, 2, 16, 64, 16, false, false));
    add(bmm(1, 4, 7, 9, 5, false, false));
    add(bmm(4, 1, 7, 9, 5, true, false));
    add(bmm(1, 1, 1, 1, 1, false, false));
    for (const char* t : {"Add", "Sub", "Mul", "RealDiv"}) {
        add(binary(t, {32, 64}, {32, 64}, {32, 64}));
        add(binary(t, {7, 33}, {}, {7, 33}));
        add(binary(t, {}, {7, 33}, {7, 33}));  // the scalar first: x1 op x2 kept in order
        add(binary(t, {1}, {1}, {1}));
        add(binary(t, {}, {}, {}));
        add(binary(t, {2, 7, 33}, {33}, {2, 7, 33}));
        add(binary(t, {1, 7, 33}, {3, 7, 33}, {3, 7, 33}));
        add(binary(t, {1}, {5, 3}, {5, 3}));
        // Any broadcast: [B, T, 1] op [B, T, D] both ways, [T, D] op [B, H, T, D], an outer
        // product [8, 1] op [1, 16] both ways, and dims of 1 between broadcast ones.
        add(binary(t, {2, 5, 1}, {2, 5, 37}, {2, 5, 37}));
        add(binary(t, {2, 5, 37}, {2, 5, 1}, {2, 5, 37}));
        add(binary(t, {5, 12}, {2, 3, 5, 12}, {2, 3, 5, 12}));
        add(binary(t, {8, 1}, {1, 16}, {8, 16}));
        add(binary(t, {1, 16}, {8, 1}, {8, 16}));
        add(binary(t, {3, 1, 4, 1}, {1, 5, 1, 6}, {3, 5, 4, 6}));
        add(binary(t, {2, 1, 7}, {2, 3, 7}, {2, 3, 7}));
    }
    for (double alpha : {-0.1, 2.5}) {  // add and sub with alpha: SGD's p.add_(grad, alpha=-lr)
        add(axpy({32, 64}, {32, 64}, alpha));
        add(axpy({7, 33}, {}, alpha));
        add(axpy({}, {7, 33}, alpha));
        add(axpy({2, 5, 1}, {2, 5, 37}, alpha));
        add(axpy({5, 12}, {2, 3, 5, 12}, alpha));
        add(axpy({1}, {1}, alpha));
    }
    for (const char* t : {"Relu", "Gelu", "Neg", "Tanh", "Rsqrt", "Swish"}) {
        add(unary(t, {1}));
        add(unary(t, {7, 33}));
        add(unary(t, {32, 256}));
    }
    for (double e : {2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.0, 0.0}) {
        add(power({1}, e));
        add(power({7, 33}, e));
    }
    add(softmax({1, 1}));
    add(softmax({7, 33}));
    add(softmax({2, 16, 16}));
    add(softmax({4, 1000}));
    add(softmax({7, 32}));  // rows in registers, in groups with a partial last group
    add(layer_norm({5, 48}, true));
    add(layer_norm({1, 1}, true));
    add(layer_norm({7, 33}, false));
    add(layer_norm({32, 64}, true, 1e-6));
    add(layer_norm({2, 3, 100}, true));
    add(transpose({2, 16, 64}, {0, 2, 1}));
    add(transpose({7, 33}, {1, 0}));
    add(transpose({2, 3, 5, 7}, {3, 1, 0, 2}));
    add(transpose({2, 3, 5, 7}, {0, 1, 2, 3}, true));
    add(transpose({1, 33, 1}, {2, 0, -2}));
    add(transpose({1}, {0}));
    add(transpose({64, 65}, {1, 0}, true));
    add(transpose({6, 4, 8}, {1, 0, 2}));          // a memcpy per row of 8
    add(transpose({3, 16, 5, 24}, {0, 3, 2, 1}));  // 8 x 8 vector blocks inside two loops
    add(transpose({2, 8, 3}, {2, 0, 1}, true));    // strided last dim, no partner of 8: one by one
    add(transpose({5, 7, 2}, {0, 1, 2}));          // identity: one memcpy
    for (OpRecord& r : plugin_cases()) add(std::move(r));
    for (const auto& e : fs::directory_iterator(skc_test::example_ops_dir())) {
        OpRecord r = skc::read_op_info(e.path());
        if (skc_host::supported(r)) c.emplace_back(e.path().filename().string(), std::move(r));
    }
    return c;
}

/// The op's outputs computed in double precision from its (float) inputs, by the plan's formula
/// (plan.hpp): the reference both kernels are measured against.
std::vector<std::vector<double>> reference(const OpRecord& op, const std::vector<std::vector<float>>& in) {
    const skc_host::Plan plan = *skc_host::analyze(op).plan;
    std::vector<std::vector<double>> out;
    for (const TensorSlot& slot : op.outputs) {
        const auto* t = std::get_if<TensorDesc>(&slot);
        out.emplace_back(t == nullptr ? 0 : extent(*t), 0.0);
    }
    auto act = [](std::optional<skc_host::UnaryKind> k, double v) {
        if (!k) return v;
        switch (*k) {
        case skc_host::UnaryKind::relu: return v > 0 ? v : 0.0;
        // 0.5 (1 + tanh(u)) = 1 / (1 + e^(-2u)) and 1 + erf(z) = erfc(-z): no cancellation for
        // negative v, where 1 + tanh and 1 + erf round to 0 even in double.
        case skc_host::UnaryKind::gelu_tanh:
            return v / (1 + std::exp(-2 * 0.7978845608028654 * (v + 0.044715 * v * v * v)));
        case skc_host::UnaryKind::gelu_erf: return 0.5 * v * std::erfc(-v / std::sqrt(2.0));
        case skc_host::UnaryKind::neg: return -v;
        case skc_host::UnaryKind::tanh: return std::tanh(v);
        case skc_host::UnaryKind::rsqrt: return 1 / std::sqrt(v);
        case skc_host::UnaryKind::silu: return v / (1 + std::exp(-v));
        case skc_host::UnaryKind::square: return v * v;
        case skc_host::UnaryKind::cube: return v * v * v;
        case skc_host::UnaryKind::sqrt: return std::sqrt(v);
        case skc_host::UnaryKind::reciprocal: return 1 / v;
        case skc_host::UnaryKind::inv_square: return 1 / (v * v);
        case skc_host::UnaryKind::copy: return v;
        case skc_host::UnaryKind::one: return 1.0;
        }
        return v;
    };
    auto at = [&](std::size_t slot, std::int64_t i) {
        return static_cast<double>(in[slot][static_cast<std::size_t>(i)]);
    };
    // The elementwise plans: y in order, f(element, position) at each position over `dims`; an
    // operand's index is the sum of position times stride over the dims.
    auto strided_walk = [](std::vector<double>& y, const std::vector<std::int64_t>& dims, auto&& f) {
        std::vector<std::int64_t> pos(dims.size(), 0);
        for (double& out_e : y) {
            f(out_e, pos);
            for (std::size_t d = pos.size(); d-- > 0;) {
                if (++pos[d] < dims[d]) break;
                pos[d] = 0;
            }
        }
    };
    auto index = [](const std::vector<std::int64_t>& pos, const std::vector<std::int64_t>& strides) {
        std::int64_t i = 0;
        for (std::size_t d = 0; d < pos.size(); ++d) i += pos[d] * strides[d];
        return i;
    };
    std::visit(
        [&](const auto& p) {
            using P = std::decay_t<decltype(p)>;
            std::vector<double>& y = out[0];
            if constexpr (std::is_same_v<P, skc_host::MatMulPlan>) {
                for (std::int64_t t = 0; t < p.batch; ++t)
                    for (std::int64_t i = 0; i < p.m; ++i)
                        for (std::int64_t j = 0; j < p.n; ++j) {
                            double sum = 0;
                            for (std::int64_t q = 0; q < p.k; ++q)
                                sum += at(0, t * p.a.batch + i * p.a.outer + q * p.a.k) *
                                       at(1, t * p.b.batch + j * p.b.outer + q * p.b.k);
                            if (p.bias) sum += at(2, j);
                            y[static_cast<std::size_t>((t * p.m + i) * p.n + j)] = act(p.activation, sum);
                        }
            } else if constexpr (std::is_same_v<P, skc_host::BinaryPlan>) {
                strided_walk(y, p.dims, [&](double& out_e, const std::vector<std::int64_t>& pos) {
                    const double a = at(0, index(pos, p.a)), b = at(1, index(pos, p.b));
                    switch (p.kind) {
                    case skc_host::BinaryKind::add: out_e = a + b; break;
                    case skc_host::BinaryKind::sub: out_e = a - b; break;
                    case skc_host::BinaryKind::mul: out_e = a * b; break;
                    case skc_host::BinaryKind::div: out_e = a / b; break;
                    case skc_host::BinaryKind::axpy: out_e = a + static_cast<double>(p.alpha) * b; break;
                    }
                });
            } else if constexpr (std::is_same_v<P, skc_host::UnaryPlan>) {
                strided_walk(y, p.dims, [&](double& out_e, const std::vector<std::int64_t>& pos) {
                    out_e = act(p.kind, at(0, index(pos, p.x)));
                });
            } else if constexpr (std::is_same_v<P, skc_host::SoftmaxPlan>) {
                for (std::int64_t r = 0; r < p.rows; ++r) {
                    double mx = -INFINITY, sum = 0;
                    for (std::int64_t c = 0; c < p.cols; ++c) mx = std::max(mx, at(0, r * p.cols + c));
                    for (std::int64_t c = 0; c < p.cols; ++c) sum += std::exp(at(0, r * p.cols + c) - mx);
                    for (std::int64_t c = 0; c < p.cols; ++c)
                        y[static_cast<std::size_t>(r * p.cols + c)] = std::exp(at(0, r * p.cols + c) - mx) / sum;
                }
            } else if constexpr (std::is_same_v<P, skc_host::LayerNormPlan>) {
                for (std::int64_t r = 0; r < p.rows; ++r) {
                    double mu = 0, var = 0;
                    for (std::int64_t c = 0; c < p.cols; ++c) mu += at(0, r * p.cols + c);
                    mu /= static_cast<double>(p.cols);
                    for (std::int64_t c = 0; c < p.cols; ++c) var += std::pow(at(0, r * p.cols + c) - mu, 2);
                    var /= static_cast<double>(p.cols);
                    const double rstd = 1 / std::sqrt(var + static_cast<double>(p.epsilon));
                    for (std::int64_t c = 0; c < p.cols; ++c)
                        y[static_cast<std::size_t>(r * p.cols + c)] =
                            (at(0, r * p.cols + c) - mu) * rstd * at(1, c) + at(2, c);
                    if (p.mean_out) out[1][static_cast<std::size_t>(r)] = mu;
                    if (p.var_out) out[2][static_cast<std::size_t>(r)] = var;
                    if (p.rstd_out) out[2][static_cast<std::size_t>(r)] = rstd;
                }
            } else if constexpr (std::is_same_v<P, skc_host::GradPlan>) {
                // The derivatives exactly: erfc for 1 + erf (no cancellation), the tanh form's
                // 1 - tanh^2 as 1 / cosh^2.
                constexpr double k = 0.7978845608028654, c = 0.044715, pi = 3.141592653589793;
                for (std::int64_t i = 0; i < p.n; ++i) {
                    const double dy = at(0, i), v = at(1, i);
                    double g = 0;
                    switch (p.kind) {
                    case skc_host::GradKind::relu: g = v > 0 ? 1.0 : 0.0; break;
                    case skc_host::GradKind::gelu_erf:
                        g = 0.5 * std::erfc(-v / std::sqrt(2.0)) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * pi);
                        break;
                    case skc_host::GradKind::gelu_tanh: {
                        const double u = k * (v + c * v * v * v);
                        g = 1 / (1 + std::exp(-2 * u)) + 0.5 * v / std::pow(std::cosh(u), 2) * k * (1 + 3 * c * v * v);
                        break;
                    }
                    case skc_host::GradKind::silu: {
                        const double sg = 1 / (1 + std::exp(-v));
                        g = sg * (1 + v * (1 - sg));
                        break;
                    }
                    }
                    y[static_cast<std::size_t>(i)] = dy * g;
                }
            } else if constexpr (std::is_same_v<P, skc_host::SoftmaxGradPlan>) {
                for (std::int64_t r = 0; r < p.rows; ++r) {
                    double sum = 0;
                    for (std::int64_t c = 0; c < p.cols; ++c) sum += at(0, r * p.cols + c) * at(1, r * p.cols + c);
                    for (std::int64_t c = 0; c < p.cols; ++c)
                        y[static_cast<std::size_t>(r * p.cols + c)] =
                            (at(1, r * p.cols + c) - sum) * at(0, r * p.cols + c);
                }
            } else if constexpr (std::is_same_v<P, skc_host::LayerNormGradPlan>) {
                // dx = rstd (dy gamma - mean(dy gamma) - xhat mean(dy gamma xhat)), xhat = (x - mean) rstd:
                // the same function as torch's b x + c form, without its cancellation.
                std::fill(out[1].begin(), out[1].end(), 0.0);
                std::fill(out[2].begin(), out[2].end(), 0.0);
                for (std::int64_t r = 0; r < p.rows; ++r) {
                    const double a = at(2, r), m = at(3, r);
                    double s1 = 0, s2 = 0;
                    for (std::int64_t c = 0; c < p.cols; ++c) {
                        const double dg = at(0, r * p.cols + c) * at(4, c), xh = (at(1, r * p.cols + c) - m) * a;
                        s1 += dg, s2 += dg * xh;
                    }
                    s1 /= static_cast<double>(p.cols), s2 /= static_cast<double>(p.cols);
                    for (std::int64_t c = 0; c < p.cols; ++c) {
                        const double dyv = at(0, r * p.cols + c), xh = (at(1, r * p.cols + c) - m) * a;
                        y[static_cast<std::size_t>(r * p.cols + c)] = a * (dyv * at(4, c) - s1 - xh * s2);
                        out[1][static_cast<std::size_t>(c)] += dyv * xh;
                        out[2][static_cast<std::size_t>(c)] += dyv;
                    }
                }
            } else if constexpr (std::is_same_v<P, skc_host::ReduceMeanPlan>) {
                for (std::int64_t r = 0; r < p.rows; ++r) {
                    double sum = 0;
                    for (std::int64_t c = 0; c < p.cols; ++c) sum += at(0, r * p.cols + c);
                    y[static_cast<std::size_t>(r)] = sum / static_cast<double>(p.cols);
                }
            } else if constexpr (std::is_same_v<P, skc_host::LogSoftmaxPlan>) {
                for (std::int64_t r = 0; r < p.rows; ++r) {
                    double mx = -INFINITY, sum = 0;
                    for (std::int64_t c = 0; c < p.cols; ++c) mx = std::max(mx, at(0, r * p.cols + c));
                    for (std::int64_t c = 0; c < p.cols; ++c) sum += std::exp(at(0, r * p.cols + c) - mx);
                    for (std::int64_t c = 0; c < p.cols; ++c)
                        y[static_cast<std::size_t>(r * p.cols + c)] = at(0, r * p.cols + c) - mx - std::log(sum);
                }
            } else if constexpr (std::is_same_v<P, skc_host::LogSoftmaxGradPlan>) {
                for (std::int64_t r = 0; r < p.rows; ++r) {
                    double sum = 0;
                    for (std::int64_t c = 0; c < p.cols; ++c) sum += at(0, r * p.cols + c);
                    for (std::int64_t c = 0; c < p.cols; ++c)
                        y[static_cast<std::size_t>(r * p.cols + c)] =
                            at(0, r * p.cols + c) - std::exp(at(1, r * p.cols + c)) * sum;
                }
            } else if constexpr (std::is_same_v<P, skc_host::ConcatPlan>) {
                // Input k (buffer k) element by element through its own shape and strides, into y at
                // the axis offset: y's index from the input's, y's dense strides.
                const auto& list = std::get<std::vector<TensorDesc>>(op.inputs[0]);
                const RuntimeShape& ys = std::get<TensorDesc>(op.outputs[0]).shape;
                std::int64_t axis = 0;
                for (const Attr& a : *op.attrs)
                    if (a.name == "concat_dim") axis = a.value.as_int();
                if (axis < 0) axis += static_cast<std::int64_t>(ys.rank());
                std::int64_t at_axis = 0;
                for (std::size_t k = 0; k < list.size(); ++k) {
                    const TensorDesc& t = list[k];
                    const std::vector<std::int64_t> st = strides(t);
                    std::vector<std::int64_t> pos(t.shape.rank(), 0);
                    for (std::int64_t e = 0; e < t.shape.element_count().value(); ++e) {
                        std::int64_t src = 0, dst = 0, ystride = 1;
                        for (std::size_t d = t.shape.rank(); d-- > 0;) {
                            src += pos[d] * st[d];
                            dst += (pos[d] + (static_cast<std::int64_t>(d) == axis ? at_axis : 0)) * ystride;
                            ystride *= ys[d];
                        }
                        y[static_cast<std::size_t>(dst)] = at(k, src);
                        for (std::size_t d = pos.size(); d-- > 0;) {
                            if (++pos[d] < t.shape[d]) break;
                            pos[d] = 0;
                        }
                    }
                    at_axis += t.shape[static_cast<std::size_t>(axis)];
                }
            } else if constexpr (std::is_same_v<P, skc_host::SelectPlan>) {
                std::vector<std::int64_t> pos(p.dims.size(), 0);
                for (double& out_e : y) {
                    std::int64_t ic = 0, ia = 0, ib = 0;
                    for (std::size_t d = 0; d < pos.size(); ++d)
                        ic += pos[d] * p.c[d], ia += pos[d] * p.a[d], ib += pos[d] * p.b[d];
                    out_e = bytes(in[p.c_slot])[ic] != 0 ? at(p.a_slot, ia) : at(p.b_slot, ib);
                    for (std::size_t d = pos.size(); d-- > 0;) {
                        if (++pos[d] < p.dims[d]) break;
                        pos[d] = 0;
                    }
                }
            } else {
                const std::size_t rank = p.in_dims.size();
                std::vector<std::int64_t> in_stride(rank, 1), dims(rank), pos(rank, 0);
                for (std::size_t d = rank; d-- > 1;) in_stride[d - 1] = in_stride[d] * p.in_dims[d];
                for (std::size_t d = 0; d < rank; ++d) dims[d] = p.in_dims[static_cast<std::size_t>(p.perm[d])];
                for (std::size_t o = 0; o < y.size(); ++o) {
                    std::int64_t src = 0;
                    for (std::size_t d = 0; d < rank; ++d)
                        src += pos[d] * in_stride[static_cast<std::size_t>(p.perm[d])];
                    y[o] = at(0, src);
                    for (std::size_t d = rank; d-- > 0;) {
                        if (++pos[d] < dims[d]) break;
                        pos[d] = 0;
                    }
                }
            }
        },
        plan);
    return out;
}

/// `c++` on PATH, or $SKC_HOST_CXX when set.
std::string on_path(const std::string& program) {
    const char* path = std::getenv("PATH");
    std::string p = path != nullptr ? path : "/usr/bin:/bin";
    for (std::size_t start = 0; start <= p.size();) {
        std::size_t end = p.find(':', start);
        if (end == std::string::npos) end = p.size();
        const std::string dir = end > start ? p.substr(start, end - start) : ".";
        const std::string cand = dir + "/" + program;
        if (::access(cand.c_str(), X_OK) == 0) return cand;
        start = end + 1;
    }
    return {};
}

std::string find_cxx() {
    if (const char* e = std::getenv("SKC_HOST_CXX"); e != nullptr && *e != '\0') return e;
    return on_path("c++");
}

/// Starts `args` (no shell) with stdout and stderr to `log`.
pid_t spawn(std::vector<std::string> args, const fs::path& log) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    REQUIRE(::posix_spawn_file_actions_init(&fa) == 0);
    ::posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    ::posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    ::posix_spawn_file_actions_destroy(&fa);
    REQUIRE_MESSAGE(rc == 0, "posix_spawn " << args[0] << " failed: " << rc);
    return pid;
}

int wait_for(pid_t pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {}
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct Lib {
    void* handle = nullptr;
    explicit Lib(const fs::path& p) : handle(::dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL)) {}
    Lib(const Lib&) = delete;
    Lib& operator=(const Lib&) = delete;
    ~Lib() {
        if (handle != nullptr) ::dlclose(handle);
    }
};

/// One buffer per tensor, in the calling convention's order (a list slot's tensors one after the
/// other, plan.hpp): random for inputs (a view's covers every element it reaches); a bool tensor's
/// bytes 0 or 1 at random, held in a float buffer; null for absent slots and other dtypes.
std::vector<std::vector<float>> buffers(const std::vector<TensorSlot>& slots, std::mt19937& rng, bool random,
                                        float fill) {
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    std::vector<std::vector<float>> out;
    auto one = [&](const TensorDesc* t) {
        if (t != nullptr && t->dtype == "bool") {
            const auto n = static_cast<std::size_t>(t->shape.element_count().value());
            std::vector<float> v((n + 3) / 4, 0.0f);
            for (std::size_t e = 0; e < n; ++e) bytes(v)[e] = static_cast<unsigned char>(rng() % 2);
            out.push_back(std::move(v));
            return;
        }
        if (t == nullptr || t->dtype != "float") {
            out.emplace_back();
            return;
        }
        std::vector<float> v(extent(*t), fill);
        if (random)
            for (float& f : v) f = dist(rng);
        out.push_back(std::move(v));
    };
    for (const TensorSlot& s : slots) {
        if (const auto* list = std::get_if<std::vector<TensorDesc>>(&s))
            for (const TensorDesc& t : *list) one(&t);
        else one(std::get_if<TensorDesc>(&s));
    }
    return out;
}

template <class T>
std::vector<T*> pointers(std::vector<std::vector<float>>& b) {
    std::vector<T*> p;
    for (auto& v : b) p.push_back(v.empty() ? nullptr : v.data());
    return p;
}

/// |a - b| relative to max(|b|, 1): relative for values of magnitude 1 and above.
double rel_err(double a, double b) { return std::abs(a - b) / std::max(1.0, std::abs(b)); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

/// The input slot whose buffer an op's output may be (the elementwise ops, SoftmaxV2), if any:
/// for a binary op the first input with the output's shape.
std::optional<std::size_t> in_place_input(const OpRecord& op) {
    const skc_host::Analysis a = skc_host::analyze(op);
    if (!a.plan) return std::nullopt;
    auto dense_in = [&](std::size_t i) { return !std::get<TensorDesc>(op.inputs[i]).is_view.value_or(false); };
    if (std::holds_alternative<skc_host::BinaryPlan>(*a.plan)) {
        const RuntimeShape& y = std::get<TensorDesc>(op.outputs[0]).shape;
        for (std::size_t i = 0; i < 2; ++i)
            if (std::get<TensorDesc>(op.inputs[i]).shape == y && dense_in(i)) return i;
        return std::nullopt;
    }
    if (std::holds_alternative<skc_host::UnaryPlan>(*a.plan) || std::holds_alternative<skc_host::SoftmaxPlan>(*a.plan))
        return dense_in(0) ? std::optional<std::size_t>(0) : std::nullopt;  // a view's output is a new tensor
    if (op.op_type == "MaskedFill" &&
        std::get<TensorDesc>(op.inputs[0]).shape == std::get<TensorDesc>(op.outputs[0]).shape)
        return 0;
    return std::nullopt;
}

/// LogSoftmaxGrad's x (inputs[1]) is made a log softmax output, as training gives it.
/// Square roots (Rsqrt, Power 0.5 and -0.5) get |x|: the tests compare finite results.
/// SoftmaxGrad's y (inputs[0]) is made a softmax output, each row positive and summing to 1, as
/// training gives it: sum(dy * y) is then an average of dy, not a sum that cancels.
void in_domain(const skc_host::Plan& plan, std::vector<std::vector<float>>& in) {
    if (const auto* g = std::get_if<skc_host::LogSoftmaxGradPlan>(&plan)) {
        for (std::int64_t r = 0; r < g->rows; ++r) {
            float* y = in[1].data() + r * g->cols;
            double sum = 0;
            for (std::int64_t c = 0; c < g->cols; ++c) sum += std::exp(static_cast<double>(y[c]));
            for (std::int64_t c = 0; c < g->cols; ++c) y[c] = static_cast<float>(y[c] - std::log(sum));
        }
        return;
    }
    if (const auto* g = std::get_if<skc_host::SoftmaxGradPlan>(&plan)) {
        for (std::int64_t r = 0; r < g->rows; ++r) {
            float* y = in[0].data() + r * g->cols;
            double sum = 0;
            for (std::int64_t c = 0; c < g->cols; ++c) sum += std::exp(static_cast<double>(y[c]));
            for (std::int64_t c = 0; c < g->cols; ++c)
                y[c] = static_cast<float>(std::exp(static_cast<double>(y[c])) / sum);
        }
        return;
    }
    // LayerNormGradV3's mean and rstd (inputs[3], inputs[2]) are x's, as the forward gave them.
    if (const auto* g = std::get_if<skc_host::LayerNormGradPlan>(&plan)) {
        for (std::int64_t r = 0; r < g->rows; ++r) {
            const float* x = in[1].data() + r * g->cols;
            double mu = 0, var = 0;
            for (std::int64_t c = 0; c < g->cols; ++c) mu += x[c];
            mu /= static_cast<double>(g->cols);
            for (std::int64_t c = 0; c < g->cols; ++c) var += (x[c] - mu) * (x[c] - mu);
            var /= static_cast<double>(g->cols);
            in[3][static_cast<std::size_t>(r)] = static_cast<float>(mu);
            in[2][static_cast<std::size_t>(r)] = static_cast<float>(1 / std::sqrt(var + 1e-5));
        }
        return;
    }
    const auto* p = std::get_if<skc_host::UnaryPlan>(&plan);
    if (p == nullptr || (p->kind != skc_host::UnaryKind::rsqrt && p->kind != skc_host::UnaryKind::sqrt)) return;
    for (float& v : in[0]) v = std::abs(v);
}

/// LayerNorm computes y = (x rstd + (-rstd mean)) gamma + beta, as torch's kernel does (so that
/// the two agree to rounding), and -rstd mean is rounded to float first: y may differ from the
/// exact value by half a float rounding of rstd |mean| |gamma| (the whole of y, when a row's spread is 0).
double layer_norm_slack(const skc_host::Plan& plan, const std::vector<std::vector<float>>& in) {
    const auto* p = std::get_if<skc_host::LayerNormPlan>(&plan);
    if (p == nullptr) return 0.0;
    double worst = 0.0, gamma = 0.0;
    for (float g : in[1]) gamma = std::max(gamma, std::abs(static_cast<double>(g)));
    for (std::int64_t r = 0; r < p->rows; ++r) {
        double sum = 0.0, sq = 0.0;
        for (std::int64_t c = 0; c < p->cols; ++c) sum += in[0][static_cast<std::size_t>(r * p->cols + c)];
        const double mean = sum / static_cast<double>(p->cols);
        for (std::int64_t c = 0; c < p->cols; ++c) {
            const double d = in[0][static_cast<std::size_t>(r * p->cols + c)] - mean;
            sq += d * d;
        }
        const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(p->cols) + p->epsilon);
        worst = std::max(worst, rstd * std::abs(mean));
    }
    return worst * gamma * 0x1p-23;
}

/// `ops` generated for this CPU into one shared object (kernel i named k<i>), compiled with
/// host_op_compiler's flags by `cxx`, and loaded.
class HostKernels {
public:
    HostKernels(const std::string& cxx, const std::vector<OpRecord>& ops) {
        std::string src;
        for (std::size_t i = 0; i < ops.size(); ++i)
            src += skc_host::generate_kernel(ops[i], "k" + std::to_string(i)).value();
        skc_test::spit(dir_ / "k.cpp", src);
        std::vector<std::string> args{cxx};
        for (const std::string& f : skc_host::kernel_flags(skc_host::host_target())) args.push_back(f);
        args.insert(args.end(), {"-shared", "-o", (dir_ / "k.so").string(), (dir_ / "k.cpp").string()});
        REQUIRE_MESSAGE(wait_for(spawn(args, dir_ / "k.log")) == 0, skc_test::slurp(dir_ / "k.log"));
        lib_ = std::make_unique<Lib>(dir_ / "k.so");
        REQUIRE_MESSAGE(lib_->handle != nullptr, ::dlerror());
    }
    Kernel operator[](std::size_t i) const {
        void* sym = ::dlsym(lib_->handle, ("k" + std::to_string(i)).c_str());
        REQUIRE(sym != nullptr);
        return reinterpret_cast<Kernel>(sym);
    }

private:
    skc_test::TempDir dir_;
    std::unique_ptr<Lib> lib_;
};

/// Whether `got` has exactly the bits of `want` (NaN: any NaN): how torch's special values are
/// compared.
bool same(float got, float want) {
    if (std::isnan(want)) return std::isnan(got);
    return std::memcmp(&got, &want, sizeof got) == 0;
}

}  // namespace

/// The targets this CPU can run: itself, and the x86-64 levels below it with another vector width.
std::vector<skc_host::Target> runnable_targets() {
    std::vector<skc_host::Target> t{skc_host::host_target()};
#if defined(__x86_64__)
    const auto f = skc_host::detail::cpu_features();
    using skc_host::detail::has;
    if (t[0].vector_floats != 8 && has(f, "avx2") && has(f, "fma") && has(f, "bmi2"))
        t.push_back(skc_host::target_for("x86-64-v3"));
    if (t[0].vector_floats != 4) t.push_back(skc_host::target_for("x86-64"));
#endif
    return t;
}

TEST_CASE("generated kernels, built for each target, against the generic kernels and a double-precision reference") {
    const std::string cxx = find_cxx();
    REQUIRE_MESSAGE(!cxx.empty(), "no c++ compiler on PATH (set SKC_HOST_CXX)");
    const auto ops = cases();
    REQUIRE(ops.size() > 60);
    // Each target with the system compiler; this CPU's also with the other compiler, when there is one
    // (Clang and GCC differ in what they keep in registers: the stack bound must hold with both).
    std::vector<skc_host::Target> targets = runnable_targets();
    std::vector<std::string> compilers(targets.size(), cxx);
    std::error_code ec;  // cxx may be a bare name: then not the same file
    for (const char* other : {"clang++", "g++"})
        if (const std::string path = on_path(other); !path.empty() && !fs::equivalent(path, cxx, ec)) {
            targets.push_back(targets.front());
            compilers.push_back(path);
            break;
        }

    // One combined source per target, compiled at once by one compiler process each, with the
    // flags host_op_compiler uses, warnings as errors, and a bound on each kernel's stack frame.
    skc_test::TempDir dir;
    std::vector<pid_t> pids;
    for (std::size_t g = 0; g < targets.size(); ++g) {
        std::string src;
        for (std::size_t i = 0; i < ops.size(); ++i) {
            const std::optional<std::string> code =
                skc_host::generate_kernel(ops[i].second, "skc_host_test_kernel_" + std::to_string(i), targets[g]);
            REQUIRE_MESSAGE(code.has_value(), ops[i].first << ": " << skc_host::unsupported_reason(ops[i].second));
            src += *code;
        }
        const std::string tag = std::to_string(g);
        skc_test::spit(dir / ("kernels" + tag + ".cpp"), src);
        std::vector<std::string> args{compilers[g]};
        for (const std::string& f : skc_host::kernel_flags(targets[g])) args.push_back(f);
        for (const char* f : {"-shared", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-Wframe-larger-than=6144"})
            args.emplace_back(f);
        args.insert(args.end(),
                    {"-o", (dir / ("kernels" + tag + ".so")).string(), (dir / ("kernels" + tag + ".cpp")).string()});
        pids.push_back(spawn(args, dir / ("kernels" + tag + ".log")));
    }
    for (std::size_t g = 0; g < targets.size(); ++g) {
        const fs::path log = dir / ("kernels" + std::to_string(g) + ".log");
        const int rc = wait_for(pids[g]);
        if (rc != 0) {  // which ops the compiler complained about
            const std::string said = skc_test::slurp(log);
            for (std::size_t i = 0; i < ops.size(); ++i)  // g++ names `void name(...)`, clang++ 'name'
                for (const char* after : {"(", "'"})
                    if (said.find("skc_host_test_kernel_" + std::to_string(i) + after) != std::string::npos) {
                        MESSAGE("skc_host_test_kernel_" << i << ": " << ops[i].first);
                        break;
                    }
        }
        REQUIRE_MESSAGE(rc == 0, compilers[g] << " failed for " << targets[g].id << " (" << rc << "):\n"
                                              << skc_test::slurp(log));
        CHECK_MESSAGE(skc_test::slurp(log).empty(), "compiler printed diagnostics");
    }

    // Per op type: the largest error of each kernel against the double-precision reference, as
    // |kernel - reference| / max(|reference|, 1).
    std::map<std::string, std::pair<double, double>> vs_reference;  // op type -> (generated, generic)
    std::mt19937 rng(1234);
    int in_place = 0;
    for (std::size_t g = 0; g < targets.size(); ++g) {
        CAPTURE(targets[g].id);
        CAPTURE(compilers[g]);
        Lib lib(dir / ("kernels" + std::to_string(g) + ".so"));
        REQUIRE_MESSAGE(lib.handle != nullptr, ::dlerror());
        for (std::size_t i = 0; i < ops.size(); ++i) {
            const std::string& name = ops[i].first;
            const OpRecord& op = ops[i].second;
            CAPTURE(name);
            auto* sym = ::dlsym(lib.handle, ("skc_host_test_kernel_" + std::to_string(i)).c_str());
            REQUIRE(sym != nullptr);
            const auto kernel = reinterpret_cast<Kernel>(sym);
            const skc_host::Plan plan = *skc_host::analyze(op).plan;
            auto in = buffers(op.inputs, rng, true, 0.0f);
            in_domain(plan, in);
            const double bound = skc_host::generated_tolerance(plan) + layer_norm_slack(plan, in);
            auto out_static = buffers(op.outputs, rng, false, std::numeric_limits<float>::quiet_NaN());
            auto out_generic = buffers(op.outputs, rng, false, std::numeric_limits<float>::quiet_NaN());
            const auto in_p = pointers<const float>(in);
            kernel(in_p.data(), pointers<float>(out_static).data());
            skc_host::run_generic(op, in_p.data(), pointers<float>(out_generic).data());
            const std::vector<std::vector<double>> ref = reference(op, in);

            double err = 0.0, err_ref = 0.0, generic_ref = 0.0;
            bool all_finite = true;
            for (std::size_t o = 0; o < out_static.size(); ++o) {
                REQUIRE(out_static[o].size() == out_generic[o].size());
                REQUIRE(ref[o].size() == out_static[o].size());
                for (std::size_t e = 0; e < out_static[o].size(); ++e) {
                    all_finite = all_finite && std::isfinite(out_static[o][e]) && std::isfinite(out_generic[o][e]);
                    err = std::max(err, rel_err(out_static[o][e], out_generic[o][e]));
                    err_ref = std::max(err_ref, rel_err(out_static[o][e], ref[o][e]));
                    generic_ref = std::max(generic_ref, rel_err(out_generic[o][e], ref[o][e]));
                }
            }
            CHECK_MESSAGE(all_finite, "an output element was not written (or is not finite)");
            CHECK(err <= bound);
            CHECK(err_ref <= bound);
            auto& worst = vs_reference[op.op_type];
            worst.first = std::max(worst.first, err_ref);
            worst.second = std::max(worst.second, generic_ref);

            // In place: the output is the input with its shape, and gives the out-of-place result bit
            // for bit, generated and generic alike. For equal shapes, x op x with all three one buffer.
            if (const std::optional<std::size_t> slot = in_place_input(op)) {
                ++in_place;
                for (int generated = 0; generated < 2; ++generated) {
                    std::vector<float> buf = in[*slot];
                    std::vector<const float*> ip = in_p;
                    ip[*slot] = buf.data();
                    float* op_p[] = {buf.data()};
                    if (generated == 1) kernel(ip.data(), op_p);
                    else skc_host::run_generic(op, ip.data(), op_p);
                    CHECK_MESSAGE(same_bits(buf, generated == 1 ? out_static[0] : out_generic[0]),
                                  (generated == 1 ? "generated" : "generic") << " kernel in place differs");
                    if (op.inputs.size() == 2 && in[0].size() == in[1].size() && in[0].size() == buf.size()) {
                        std::vector<float> self = in[0], expect(buf.size(), 0.0f);
                        const float* ip2[] = {in[0].data(), in[0].data()};
                        float* ep[] = {expect.data()};
                        float* sp[] = {self.data()};
                        const float* ip3[] = {self.data(), self.data()};
                        if (generated == 1) kernel(ip2, ep), kernel(ip3, sp);
                        else skc_host::run_generic(op, ip2, ep), skc_host::run_generic(op, ip3, sp);
                        CHECK_MESSAGE(same_bits(self, expect), (generated == 1 ? "generated" : "generic")
                                                                   << " x op x in place differs");
                    }
                }
            }
        }
    }
    CHECK(in_place >= 30 * static_cast<int>(targets.size()));
    std::string table;
    for (const auto& [type, e] : vs_reference) {
        char line[160];
        std::snprintf(line, sizeof line, "\n  %-14s generated %.2e  generic %.2e", type.c_str(), e.first, e.second);
        table += line;
    }
    MESSAGE(ops.size() << " kernels, " << targets.size()
                       << " builds (targets and compilers); max error against the double-precision reference, "
                          "per op type:"
                       << table);
}

TEST_CASE("generated products with blocks of rows keep to 6 KiB of stack with g++ and clang++") {
    // Compiled only (running them is the case above's, at smaller sizes): 500 rows, so two blocks of
    // rows (codegen.hpp, a_block_rows), with three blocks of K, A and B packed and an epilogue. Clang 14
    // kept every panel's addresses in stack slots across the loops here (8 KiB; 10 KiB when the copy
    // computed a base pointer a panel) before each block of K made the pointers opaque.
    const std::vector<OpRecord> ops{
        mm("FusedMatMul", tensor({500, 300}), tensor({530, 300}), false, true, RuntimeShape{530}, "relu"),
        mm("MatMulV2", tensor({300, 500}), tensor({300, 530}), true, false, RuntimeShape{530})};
    skc_test::TempDir dir;
    int compiled = 0;
    for (const char* compiler : {"clang++", "g++"}) {
        const std::string cxx = on_path(compiler);
        if (cxx.empty()) continue;
        for (const skc_host::Target& target : runnable_targets()) {
            std::string src;
            for (std::size_t i = 0; i < ops.size(); ++i)
                src += *skc_host::generate_kernel(ops[i], "skc_host_stack_kernel_" + std::to_string(i), target);
            const fs::path file = dir / (std::string(compiler) + "-" + target.id + ".cpp");
            skc_test::spit(file, src);
            std::vector<std::string> args{cxx};
            for (const std::string& f : skc_host::kernel_flags(target)) args.push_back(f);
            for (const char* f : {"-c", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-Wframe-larger-than=6144"})
                args.emplace_back(f);
            args.insert(args.end(), {"-o", file.string() + ".o", file.string()});
            const fs::path log = file.string() + ".log";
            const int rc = wait_for(spawn(args, log));
            CHECK_MESSAGE(rc == 0, compiler << " for " << target.id << ":\n" << skc_test::slurp(log));
            ++compiled;
        }
    }
    CHECK(compiled > 0);
}

TEST_CASE("the products of one package share one packed block of A and of op(B) a thread") {
    // One translation unit a kernel, as host_op_compiler builds a package: the blocks are
    // thread-local, so the library's TLS segment (allocated for every thread that calls it) must
    // hold one set, not one a product.
    const std::string cxx = on_path("c++");
    REQUIRE(!cxx.empty());
    const std::string readelf = on_path("readelf");  // binutils, which the compilers need
    REQUIRE_MESSAGE(!readelf.empty(), "readelf is not on PATH");
    const std::vector<OpRecord> ops{
        mm("MatMulV2", tensor({300, 500}), tensor({300, 530}), true, false, RuntimeShape{530}),
        mm("FusedMatMul", tensor({500, 300}), tensor({530, 300}), false, true, RuntimeShape{530}, "relu"),
        mm("MatMulV2", tensor({600, 131}), tensor({131, 40}), false, false)};
    skc_test::TempDir dir;
    const skc_host::Target target = skc_host::host_target();
    std::vector<std::string> link{cxx, "-shared", "-o", (dir / "k.so").string()};
    for (std::size_t i = 0; i < ops.size(); ++i) {
        const fs::path src = dir / ("k" + std::to_string(i) + ".cpp"), obj = src.string() + ".o";
        skc_test::spit(src, *skc_host::generate_kernel(ops[i], "k" + std::to_string(i), target));
        std::vector<std::string> args{cxx};
        for (const std::string& f : skc_host::kernel_flags(target)) args.push_back(f);
        args.insert(args.end(), {"-c", "-o", obj.string(), src.string()});
        REQUIRE_MESSAGE(wait_for(spawn(args, dir / "c.log")) == 0, skc_test::slurp(dir / "c.log"));
        link.push_back(obj.string());
    }
    REQUIRE_MESSAGE(wait_for(spawn(link, dir / "l.log")) == 0, skc_test::slurp(dir / "l.log"));
    REQUIRE(wait_for(spawn({readelf, "-lW", (dir / "k.so").string()}, dir / "elf.txt")) == 0);
    // "  TLS  0x... 0x... 0x... 0x<filesz> 0x<memsz> R 0x40"
    std::istringstream elf(skc_test::slurp(dir / "elf.txt"));
    std::string line;
    std::optional<unsigned long> memsz;
    while (std::getline(elf, line)) {
        std::istringstream f(line);
        std::string type, offset, vaddr, paddr, filesz, mem;
        if (f >> type >> offset >> vaddr >> paddr >> filesz >> mem && type == "TLS")
            memsz = std::stoul(mem, nullptr, 16);
    }
    REQUIRE(memsz.has_value());
    const skc_host::detail::Tiling t = skc_host::detail::tiling(target.vector_floats);
    const auto one_set = static_cast<unsigned long>((t.a_block_floats() + t.b_block_floats()) * 4);
    CHECK(*memsz >= one_set);
    CHECK(*memsz < one_set + 4096);
    MESSAGE("TLS of " << ops.size() << " products: " << *memsz << " bytes (one set of packed blocks: " << one_set
                      << ")");
}

TEST_CASE("generated Relu, Gelu and Softmax give what torch gives: accuracy, NaN, infinities, signed zeros") {
    const std::string cxx = find_cxx();
    REQUIRE_MESSAGE(!cxx.empty(), "no c++ compiler on PATH (set SKC_HOST_CXX)");
    // x from -9 to 9 in steps of 1/64 (1153 values: whole vectors and a tail).
    std::vector<float> x;
    for (int i = -576; i <= 576; ++i) x.push_back(static_cast<float>(i) / 64.0f);
    const std::int64_t n = static_cast<std::int64_t>(x.size());
    constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    // Special values, as torch 1.13's CPU kernels answer them (dense float32, more than one
    // element): relu keeps NaN and -0.0; GELU(-inf) is NaN; where 1 + erf or 1 + tanh is 0 in
    // float, GELU is 0, +0.0 for erf (torch's oneDNN kernel adds h + h erf) and -0.0 for tanh
    // (0.5 x (1 + tanh)); a one-element GELU with erf takes torch's scalar formula, -0.0.
    const std::vector<float> special{nan, -inf, inf, -0.0f, 0.0f, 1.0f, -100.0f, 1e30f, -1e30f};
    const std::int64_t ns = static_cast<std::int64_t>(special.size());
    const std::vector<OpRecord> ops{gelu({n}, "none"),   gelu({n}, "tanh"),  softmax({1, n}),
                                    unary("Relu", {ns}), gelu({ns}, "none"), gelu({ns}, "tanh"),
                                    gelu({1}, "none"),   softmax({3, 16}),   softmax({2, 5})};
    const HostKernels kernels(cxx, ops);
    auto run = [&](std::size_t i, const std::vector<float>& in) {
        std::vector<float> y(in.size(), -1.0f);
        const float* ip[] = {in.data()};
        float* op[] = {y.data()};
        kernels[i](ip, op);
        return y;
    };
    // Over [-9, 9] against double precision: Softmax strictly relative; GELU tanh strictly
    // relative (v / (1 + e^(-2u)) does not cancel) until torch's tanh(u) is -1 (u below -8.66),
    // then exactly -0.0 (x below -5.06); GELU erf within 1e-6 of max(|y|, 1) (the absolute error of
    // torch's erf form) and exactly +0.0 once 1 - erf(|z|) rounds to 0 (x below -5.6).
    for (std::size_t i = 0; i < 3; ++i) {
        const std::vector<float> y = run(i, x);
        const std::vector<double> r = reference(ops[i], {x}).front();
        double worst = 0.0;
        int zeros = 0;
        for (std::size_t e = 0; e < x.size(); ++e) {
            CAPTURE(x[e]);
            if (i == 0 && x[e] < -5.6f) {
                CHECK(same(y[e], 0.0f));
                ++zeros;
            } else if (i == 1 && 0.7978845608 * (x[e] + 0.044715 * x[e] * x[e] * x[e]) < -8.664339742) {
                CHECK(same(y[e], -0.0f));
                ++zeros;
            } else if (i == 0) {
                worst = std::max(worst, rel_err(y[e], r[e]));
            } else {
                worst = std::max(worst, std::abs(y[e] - r[e]) / std::max(std::abs(r[e]), 1e-300));
            }
        }
        CAPTURE(i);
        CHECK(worst <= (i == 0 ? 1e-6 : 1e-5));
        CHECK(zeros == (i == 0 ? 218 : i == 1 ? 253 : 0));
        const std::string what = skc_host::detail::describe(ops[i]) + (i == 0 ? " (erf)" : i == 1 ? " (tanh)" : "");
        MESSAGE(what << ": max error " << worst << " over [-9, 9], " << zeros << " exact zeros");
    }
    const std::vector<std::vector<float>> want{
        {nan, 0.0f, inf, -0.0f, 0.0f, 1.0f, 0.0f, 1e30f, 0.0f},          // relu
        {nan, nan, inf, 0.0f, 0.0f, 0.8413447f, 0.0f, 1e30f, 0.0f},      // gelu erf
        {nan, nan, inf, -0.0f, 0.0f, 0.8411920f, -0.0f, 1e30f, -0.0f}};  // gelu tanh
    for (std::size_t i = 3; i < 6; ++i) {
        const std::vector<float> y = run(i, special);
        for (std::size_t e = 0; e < special.size(); ++e) {
            CAPTURE(i);
            CAPTURE(special[e]);
            const float w = want[i - 3][e];
            if (w == 1e30f || std::abs(w) == 0.8413447f || std::abs(w) == 0.8411920f)
                CHECK(std::abs(y[e] - w) <= 1e-6f * std::abs(w));
            else CHECK_MESSAGE(same(y[e], w), "got " << y[e] << ", torch gives " << w);
        }
    }
    CHECK(same(run(6, {-100.0f})[0], -0.0f));  // one element: torch's scalar 0.5 x (1 + erf)
    CHECK(same(run(6, {-0.0f})[0], -0.0f));
    CHECK(std::isnan(run(6, {-inf})[0]));
    // Softmax: -inf and -1e9 (attention masks) give exactly 0, as torch; a row of -inf, or with a
    // NaN, is NaN throughout; the whole-vector path (16 columns) and a tail (5).
    for (std::size_t i : {std::size_t{7}, std::size_t{8}}) {
        const std::size_t cols = i == 7 ? 16 : 5;
        std::vector<float> in(cols * (i == 7 ? 3 : 2), 0.0f);
        in[1] = -inf, in[2] = -1e9f, in[3] = 1.0f, in[4] = -100.0f;
        for (std::size_t c = 0; c < cols; ++c) in[cols + c] = -inf;
        if (i == 7) in[2 * cols + 1] = nan;
        const std::vector<float> y = run(i, in);
        CAPTURE(cols);
        CHECK(same(y[1], 0.0f));
        CHECK(same(y[2], 0.0f));
        CHECK(same(y[4], 0.0f));  // e^-100 is below the smallest normal float
        CHECK(y[3] > y[0]);
        for (std::size_t c = cols; c < y.size(); ++c) CHECK(std::isnan(y[c]));
    }
}

TEST_CASE("generated matrix-vector products: the float nearest the exact sum, or float's sums off float's range") {
    const std::string cxx = find_cxx();
    REQUIRE_MESSAGE(!cxx.empty(), "no c++ compiler on PATH (set SKC_HOST_CXX)");
    // The dot form (A's rows and op(B)'s columns contiguous along K): one row of A, and two rows by
    // five columns (few outputs), K with a tail past the last whole vector, a bias.
    const std::int64_t k1 = 4099, k2 = 1001;
    const std::vector<OpRecord> ops{mm("MatMulV2", tensor({1, k1}), tensor({3, k1}), false, true, RuntimeShape{3}),
                                    mm("MatMulV2", tensor({2, k2}), tensor({5, k2}), false, true)};
    const HostKernels kernels(cxx, ops);
    // Integers whose products (below 2^22) are exact and whose partial sums (up to 2^34) are not
    // floats: the exact sum is an int64, and the float nearest it is static_cast<float> of it.
    // Terms alternate in sign around a drift, so the sum cancels to about a thousandth of its terms.
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> mag(1024, 2047);
    auto run = [&](std::size_t i, std::int64_t m, std::int64_t n, std::int64_t k, bool bias) {
        std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(n * k)), c(3, 0.0f);
        for (std::size_t e = 0; e < a.size(); ++e) a[e] = static_cast<float>(mag(rng) * (e % 2 ? -1 : 1));
        for (float& v : b) v = static_cast<float>(mag(rng));
        if (bias) c = {1.0f, -3.0f, 5.0f};
        std::vector<float> y(static_cast<std::size_t>(m * n), std::numeric_limits<float>::quiet_NaN());
        const float* ip[] = {a.data(), b.data(), c.data()};
        float* op[] = {y.data()};
        kernels[i](ip, op);
        int nearest = 0;
        for (std::int64_t r = 0; r < m; ++r)
            for (std::int64_t j = 0; j < n; ++j) {
                std::int64_t exact = bias ? static_cast<std::int64_t>(c[static_cast<std::size_t>(j)]) : 0;
                for (std::int64_t q = 0; q < k; ++q)
                    exact += static_cast<std::int64_t>(a[static_cast<std::size_t>(r * k + q)]) *
                             static_cast<std::int64_t>(b[static_cast<std::size_t>(j * k + q)]);
                CAPTURE(exact);
                nearest += y[static_cast<std::size_t>(r * n + j)] == static_cast<float>(exact);
            }
        return nearest;
    };
    CHECK(run(0, 1, 3, k1, true) == 3);
    CHECK(run(1, 2, 5, k2, false) == 10);
    // Off float's range, the sums are float's, as a BLAS's: 1e30 x 1e30 overflows to inf in float,
    // so 1e30 1e30 - 1e30 1e30 is inf - inf, NaN (exactly 0 in doubles); an infinity stays one.
    constexpr float inf = std::numeric_limits<float>::infinity();
    auto special = [&](float a0, float a1, float b0, float b1) {
        std::vector<float> a(static_cast<std::size_t>(2 * k2), 1.0f), b(static_cast<std::size_t>(5 * k2), 0.5f);
        a[0] = a0, a[1] = a1;
        for (std::size_t j = 0; j < 5; ++j) b[j * k2] = b0, b[j * k2 + 1] = b1;
        std::vector<float> y(10, 0.0f);
        const float* ip[] = {a.data(), b.data()};
        float* op[] = {y.data()};
        kernels[1](ip, op);
        return y;
    };
    const std::vector<float> cancel = special(1e30f, 1e30f, 1e30f, -1e30f);
    for (std::size_t j = 0; j < 5; ++j) CHECK(std::isnan(cancel[j]));
    const std::vector<float> infinite = special(inf, 1.0f, 1.0f, 1.0f);
    for (std::size_t j = 0; j < 5; ++j) CHECK(infinite[j] == inf);
}

TEST_CASE("generated products with a bias: a -0 sum as each BLAS gives it (keep_negative_zero)") {
    const std::string cxx = find_cxx();
    REQUIRE_MESSAGE(!cxx.empty(), "no c++ compiler on PATH (set SKC_HOST_CXX)");
    // Register tiles ([4, 8] x [8, 16], and with a relu) and the dot form ([2, 32] x [3, 32]^T), each
    // without the attr and with it.
    auto keep = [](OpRecord op) {
        op.attrs->push_back(attr("keep_negative_zero", "bool", true));
        return op;
    };
    const OpRecord tile = mm("MatMulV2", tensor({4, 8}), tensor({8, 16}), false, false, RuntimeShape{16});
    const OpRecord relu = mm("FusedMatMul", tensor({4, 8}), tensor({8, 16}), false, false, RuntimeShape{16}, "relu");
    const OpRecord dot = mm("MatMulV2", tensor({2, 32}), tensor({3, 32}), false, true, RuntimeShape{3});
    const std::vector<OpRecord> ops{tile, keep(tile), relu, keep(relu), dot, keep(dot)};
    const HostKernels kernels(cxx, ops);
    auto run = [&](std::size_t i, const std::vector<float>& a, const std::vector<float>& b,
                   const std::vector<float>& bias, std::size_t outputs) {
        std::vector<float> y(outputs, std::numeric_limits<float>::quiet_NaN());
        const float* ip[] = {a.data(), b.data(), bias.data()};
        float* op[] = {y.data()};
        kernels[i](ip, op);
        return y;
    };
    // Every product -1e-60 (-0 in float): AB is -0 summed with fused multiply-adds from +0. Plus a
    // bias of -0.0 (even columns) and +0.0 (odd): without the attr +0.0 everywhere (the sum's + 0);
    // with it the bias's sign, as -0 + -0 and -0 + +0 give.
    for (std::size_t i = 0; i < ops.size(); ++i) {
        const bool dot_form = i >= 4;
        const std::size_t m = dot_form ? 2 : 4, k = dot_form ? 32 : 8, n = dot_form ? 3 : 16;
        std::vector<float> bias(n);
        for (std::size_t j = 0; j < n; ++j) bias[j] = j % 2 == 0 ? -0.0f : 0.0f;
        const std::vector<float> y =
            run(i, std::vector<float>(m * k, -1e-30f), std::vector<float>(k * n, 1e-30f), bias, m * n);
        CAPTURE(i);
        for (std::size_t e = 0; e < y.size(); ++e) {
            CHECK(y[e] == 0.0f);
            CHECK(std::signbit(y[e]) == (i % 2 == 1 && (e % n) % 2 == 0));
        }
    }
    // Elsewhere the attr changes nothing: the same bits on values of both signs, zeros among them.
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    auto values = [&](std::size_t count) {
        std::vector<float> v(count);
        for (float& f : v) f = dist(rng);
        v[1] = 0.0f, v[2] = -0.0f;
        return v;
    };
    for (std::size_t i = 0; i < ops.size(); i += 2) {
        const bool dot_form = i >= 4;
        const std::size_t m = dot_form ? 2 : 4, k = dot_form ? 32 : 8, n = dot_form ? 3 : 16;
        const std::vector<float> a = values(m * k), b = values(k * n), bias = values(n);
        const std::vector<float> plain = run(i, a, b, bias, m * n), kept = run(i + 1, a, b, bias, m * n);
        CHECK(std::memcmp(plain.data(), kept.data(), plain.size() * sizeof(float)) == 0);
    }
}

TEST_CASE("generated Neg, Tanh, Rsqrt, Swish, Power, Sub and RealDiv give what torch gives off the finite path") {
    const std::string cxx = find_cxx();
    REQUIRE_MESSAGE(!cxx.empty(), "no c++ compiler on PATH (set SKC_HOST_CXX)");
    constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    // NaN, infinities, signed zeros, large, subnormal, where silu's e^(-x) overflows (below
    // -88.72), and both sides of tanh's two formulas (|x| = 0.625); the outputs are what stock
    // torch 1.13 gives for these float32 inputs (dense, CPU), probed value by value.
    const std::vector<float> x{{nan,
                                -inf,
                                inf,
                                -0.0f,
                                0.0f,
                                1.0f,
                                -1.0f,
                                100.0f,
                                -100.0f,
                                1.00000002e30f,
                                -1.00000002e30f,
                                9.9999461e-41f,
                                -9.9999461e-41f,
                                0.5f,
                                -2.0f,
                                88.0f,
                                -88.0f,
                                -88.6999969f,
                                -89.0f,
                                20.0f,
                                -20.0f,
                                9.0f,
                                -9.0f,
                                9.99999968e-21f,
                                0.625f,
                                -0.625f,
                                0.600000024f}};
    const std::vector<std::vector<float>> want{
        {{nan,
          inf,
          -inf,
          0.0f,
          -0.0f,
          -1.0f,
          1.0f,
          -100.0f,
          100.0f,
          -1.00000002e30f,
          1.00000002e30f,
          -9.9999461e-41f,
          9.9999461e-41f,
          -0.5f,
          2.0f,
          -88.0f,
          88.0f,
          88.6999969f,
          89.0f,
          -20.0f,
          20.0f,
          -9.0f,
          9.0f,
          -9.99999968e-21f,
          -0.625f,
          0.625f,
          -0.600000024f}},  // neg
        {{nan,
          -1.0f,
          1.0f,
          -0.0f,
          0.0f,
          0.761594176f,
          -0.761594176f,
          1.0f,
          -1.0f,
          1.0f,
          -1.0f,
          9.9999461e-41f,
          -9.9999461e-41f,
          0.462117165f,
          -0.964027584f,
          1.0f,
          -1.0f,
          -1.0f,
          -1.0f,
          1.0f,
          -1.0f,
          1.0f,
          -1.0f,
          9.99999968e-21f,
          0.554599702f,
          -0.554599702f,
          0.537049592f}},  // tanh
        {{nan,         nan,    0.0f,       -inf,           inf, 1.0f,         nan, 0.100000001f,
          nan,         1e-15f, nan,        1.00000266e20f, nan, 1.41421354f,  nan, 0.106600359f,
          nan,         nan,    nan,        0.223606795f,   nan, 0.333333343f, nan, 1e10f,
          1.26491106f, nan,    1.29099441f}},  // rsqrt
        {{nan,
          nan,
          inf,
          -0.0f,
          0.0f,
          0.731058598f,
          -0.268941432f,
          100.0f,
          -0.0f,
          1.00000002e30f,
          -0.0f,
          4.99997305e-41f,
          -4.99997305e-41f,
          0.311229676f,
          -0.238405839f,
          88.0f,
          -5.32804976e-37f,
          -2.66688554e-37f,
          -0.0f,
          20.0f,
          -4.12230747e-08f,
          8.99888992f,
          -0.00111055118f,
          4.99999984e-21f,
          0.407096803f,
          -0.217903197f,
          0.387393802f}},  // silu
        {{nan,     inf,    inf,    0.0f,  0.0f,  1.0f,           1.0f,      10000.0f,  10000.0f,
          inf,     inf,    0.0f,   0.0f,  0.25f, 4.0f,           7744.0f,   7744.0f,   7867.68945f,
          7921.0f, 400.0f, 400.0f, 81.0f, 81.0f, 9.9999461e-41f, 0.390625f, 0.390625f, 0.360000014f}},  // pow 2
        {{nan,        -inf,    inf,      -0.0f,  0.0f,    1.0f,  -1.0f,        1000000.0f,    -1000000.0f,
          inf,        -inf,    0.0f,     -0.0f,  0.125f,  -8.0f, 681472.0f,    -681472.0f,    -697864.0f,
          -704969.0f, 8000.0f, -8000.0f, 729.0f, -729.0f, 0.0f,  0.244140625f, -0.244140625f, 0.216000021f}},  // pow 3
        {{nan,          nan,          inf,         -0.0f,          0.0f, 1.0f,
          nan,          10.0f,        nan,         9.99999987e14f, nan,  9.99997303e-21f,
          nan,          0.707106769f, nan,         9.38083172f,    nan,  nan,
          nan,          4.47213602f,  nan,         3.0f,           nan,  1.00000001e-10f,
          0.790569425f, nan,          0.774596691f}},  // pow 0.5
        {{nan,         nan,    0.0f,       -inf,           inf, 1.0f,         nan, 0.100000001f,
          nan,         1e-15f, nan,        1.00000266e20f, nan, 1.41421354f,  nan, 0.106600359f,
          nan,         nan,    nan,        0.223606795f,   nan, 0.333333343f, nan, 1e10f,
          1.26491106f, nan,    1.29099441f}},  // pow -0.5
        {{nan,
          -0.0f,
          0.0f,
          -inf,
          inf,
          1.0f,
          -1.0f,
          0.00999999978f,
          -0.00999999978f,
          1e-30f,
          -1e-30f,
          inf,
          -inf,
          2.0f,
          -0.5f,
          0.0113636367f,
          -0.0113636367f,
          -0.0112739578f,
          -0.0112359552f,
          0.0500000007f,
          -0.0500000007f,
          0.111111112f,
          -0.111111112f,
          1.00000002e20f,
          1.60000002f,
          -1.60000002f,
          1.66666663f}},  // pow -1
        {{nan,
          0.0f,
          0.0f,
          inf,
          inf,
          1.0f,
          1.0f,
          9.99999975e-05f,
          9.99999975e-05f,
          0.0f,
          0.0f,
          inf,
          inf,
          4.0f,
          0.25f,
          0.000129132226f,
          0.000129132226f,
          0.000127102117f,
          0.000126246683f,
          0.00249999994f,
          0.00249999994f,
          0.0123456791f,
          0.0123456791f,
          inf,
          2.55999994f,
          2.55999994f,
          2.77777767f}},  // pow -2
        x,                // pow 1: x itself, bit for bit
        {{1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f,
          1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f}}};  // pow 0
    const std::vector<float> a{{-0.0f, 0.0f, -0.0f, 0.0f, inf, inf, -inf, 1.0f, -1.0f, 0.0f, nan, 9.9999461e-41f, 3.0f,
                                1.00000002e30f, -1.00000002e30f}};
    const std::vector<float> b{{0.0f, 0.0f, -0.0f, -0.0f, inf, -inf, 2.0f, 0.0f, 0.0f, -1.0f, 1.0f, 3.0f,
                                9.9999461e-41f, 1.00000001e-10f, 1e10f}};
    const std::vector<std::vector<float>> want2{
        {{-0.0f, 0.0f, 0.0f, 0.0f, nan, inf, -inf, 1.0f, -1.0f, 1.0f, nan, -3.0f, 3.0f, 1.00000002e30f,
          -1.00000002e30f}},  // a - b
        {{nan, nan, nan, nan, nan, nan, -inf, inf, -inf, -0.0f, nan, 3.33326866e-41f, inf, inf,
          -1.00000002e20f}},  // a / b
        {{inf, inf, -inf, -inf, 0.0f, -0.0f, 0.5f, inf, inf, -1.0f, 1.0f, 0.333333343f, inf, 1e10f,
          1.00000001e-10f}},  // 1 / b
        {{-2.0f, -2.0f, -2.0f, -2.0f, inf, inf, -inf, -1.0f, -3.0f, -2.0f, nan, -2.0f, 1.0f, 1.00000002e30f,
          -1.00000002e30f}},  // a - 2
        {{-0.0f, 0.0f, 0.0f, 0.0f, nan, inf, -inf, 1.0f, -1.0f, 0.100000001f, nan, -0.300000012f, 3.0f, 1.00000002e30f,
          -1.00000002e30f}},  // torch.add(a, b, alpha=-0.1)
        {{-0.0f, 0.0f, 0.0f, 0.0f, nan, inf, -inf, 1.0f, -1.0f, 2.5f, nan, -7.5f, 3.0f, 1.00000002e30f,
          -1.00000002e30f}},  // torch.sub(a, b, alpha=2.5)
        {{0.0f, 0.0f, 0.0f, -0.0f, nan, -inf, inf, -1.0f, 1.0f, -1.0f, nan, 3.0f, -3.0f, -1.00000002e30f,
          1.00000002e30f}},  // torch.rsub(a, b)
        {{1.0f, 1.0f, 1.0f, 1.0f, -inf, inf, -1.0f, 1.0f, 1.0f, 2.0f, 0.0f, -2.0f, 1.0f, 1.0f, -1e10f}}};  // 1 - b
    const auto nx = static_cast<std::int64_t>(x.size()), nb = static_cast<std::int64_t>(b.size());
    std::vector<OpRecord> ops{unary("Neg", {nx}), unary("Tanh", {nx}), unary("Rsqrt", {nx}), unary("Swish", {nx})};
    for (double e : {2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.0, 0.0}) ops.push_back(power({nx}, e));
    ops.push_back(binary("Sub", {nb}, {nb}, {nb}));
    ops.push_back(binary("RealDiv", {nb}, {nb}, {nb}));
    ops.push_back(binary("RealDiv", {}, {nb}, {nb}));
    ops.push_back(binary("Sub", {nb}, {}, {nb}));
    ops.push_back(axpy({nb}, {nb}, -0.1));           // add with alpha
    ops.push_back(axpy({nb}, {nb}, -2.5));           // sub with alpha 2.5
    ops.push_back(binary("Sub", {nb}, {nb}, {nb}));  // rsub(a, b) = b - a, recorded as Sub(b, a)
    ops.push_back(binary("Sub", {}, {nb}, {nb}));    // 1 - b: rsub(b, 1) = Sub(1, b)
    const HostKernels kernels(cxx, ops);
    auto run = [&](std::size_t i, std::vector<const float*> in, std::size_t n) {
        std::vector<float> y(n, -1.0f);
        float* op[] = {y.data()};
        kernels[i](in.data(), op);
        return y;
    };
    // Exact bits, except tanh and silu of normal non-zero finite results: within 2 ulp of torch's
    // (Sleef's) values, from another approximation.
    int exact = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        const std::vector<float> y = run(i, {x.data()}, x.size());
        const bool approx = i == 1 || i == 3;
        for (std::size_t e = 0; e < x.size(); ++e) {
            CAPTURE(skc_host::detail::describe(ops[i]));
            CAPTURE(x[e]);
            const float w = want[i][e];
            if (approx && std::isnormal(w) && std::abs(w) != 1.0f) {
                CHECK_MESSAGE(std::abs(y[e] - w) <= 2.4e-7f * std::abs(w), "got " << y[e] << ", torch gives " << w);
            } else {
                CHECK_MESSAGE(same(y[e], w), "got " << y[e] << ", torch gives " << w);
                ++exact;
            }
        }
    }
    const float two = 2.0f, one = 1.0f;
    const std::vector<std::vector<const float*>> ins{{a.data(), b.data()}, {a.data(), b.data()}, {&one, b.data()},
                                                     {a.data(), &two},     {a.data(), b.data()}, {a.data(), b.data()},
                                                     {b.data(), a.data()}, {&one, b.data()}};
    for (std::size_t k = 0; k < want2.size(); ++k) {
        const std::vector<float> y = run(want.size() + k, ins[k], b.size());
        for (std::size_t e = 0; e < b.size(); ++e) {
            CAPTURE(skc_host::detail::describe(ops[want.size() + k]));
            CAPTURE(e);
            CHECK_MESSAGE(same(y[e], want2[k][e]), "got " << y[e] << ", torch gives " << want2[k][e]);
            ++exact;
        }
    }
    MESSAGE(exact << " values exactly as torch gives them");
}

TEST_CASE(
    "generated ReluGrad, GeluGrad, SiluGrad, SoftmaxGrad and LayerNormGradV3 give what torch's backward kernels give") {
    const std::string cxx = find_cxx();
    REQUIRE_MESSAGE(!cxx.empty(), "no c++ compiler on PATH (set SKC_HOST_CXX)");
    constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    // x: NaN, infinities, signed zeros, large, subnormal, where GELU's gradients are exactly 0
    // (erf: x below about -6.15; tanh: tanh(u) = -1), where x^2 overflows, where silu's e^(-x) is
    // still finite (-88.7) and where it overflows (-89). The outputs are what stock torch 1.13
    // gives for these float32 inputs (threshold_backward(dy, x, 0), gelu_backward(dy, x, "none" /
    // "tanh"), silu_backward(dy, x), dense, CPU), for dy = 1, -0.0 and inf everywhere.
    const std::vector<float> x{{nan,
                                -inf,
                                inf,
                                -0.0f,
                                0.0f,
                                1.0f,
                                -1.0f,
                                100.0f,
                                -100.0f,
                                1.00000002e+30f,
                                -1.00000002e+30f,
                                9.9999461e-41f,
                                -9.9999461e-41f,
                                -5.0f,
                                -6.0f,
                                -6.25f,
                                -10.0f,
                                3.0f,
                                20.0f,
                                -20.0f,
                                -88.6999969f,
                                -89.0f,
                                1.00000002e+20f,
                                -1.00000002e+20f}};
    const std::vector<float> dys{1.0f, -0.0f, inf};
    static constexpr float kPlusZero = 0.0f;
    const std::vector<std::vector<std::vector<float>>> want{
        {// dy = 1: relu, gelu erf, gelu tanh, silu
         {{1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1.0f, 0.0f, 1.0f, 0.0f, 1.0f, 0.0f, 1.0f,
           0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 0.0f, 0.0f, 0.0f, 1.0f, 0.0f}},
         {{nan,
           nan,
           nan,
           0.5f,
           0.5f,
           1.08331537f,
           -0.0833154321f,
           1.0f,
           0.0f,
           1.0f,
           0.0f,
           0.5f,
           0.5f,
           -7.12275505e-06f,
           -2.98023224e-08f,
           0.0f,
           0.0f,
           1.01194561f,
           1.0f,
           0.0f,
           0.0f,
           0.0f,
           1.0f,
           0.0f}},
         {{nan,  nan,  nan,  0.5f,        0.5f, 1.08296406f, -0.0829640925f,
           1.0f, 0.0f, nan,  nan,         0.5f, 0.5f,        -2.01087573e-06f,
           0.0f, 0.0f, 0.0f, 1.01158428f, 1.0f, 0.0f,        0.0f,
           0.0f, nan,  nan}},
         {{nan,
           nan,
           nan,
           0.5f,
           0.5f,
           0.927670538f,
           0.0723294839f,
           1.0f,
           -0.0f,
           1.0f,
           -0.0f,
           0.5f,
           0.5f,
           -0.0265474338f,
           -0.0123264315f,
           -0.0100921551f,
           -0.000408560241f,
           1.08810413f,
           1.0f,
           -3.91619217e-08f,
           -2.63681951e-37f,
           -0.0f,
           1.0f,
           -0.0f}}},
        {// dy = -0.0
         {{-0.0f, 0.0f, -0.0f, 0.0f, 0.0f, -0.0f, 0.0f,  -0.0f, 0.0f, -0.0f, 0.0f,  -0.0f,
           0.0f,  0.0f, 0.0f,  0.0f, 0.0f, -0.0f, -0.0f, 0.0f,  0.0f, 0.0f,  -0.0f, 0.0f}},
         {{nan,   nan,  nan,  -0.0f, -0.0f, -0.0f, 0.0f,  -0.0f, -0.0f, -0.0f, -0.0f, -0.0f,
           -0.0f, 0.0f, 0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f}},
         {{nan,   nan,  nan,   -0.0f, -0.0f, -0.0f, 0.0f,  -0.0f, -0.0f, nan,   nan, -0.0f,
           -0.0f, 0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, nan, nan}},
         {{nan,   nan,  nan,  -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, 0.0f, -0.0f, 0.0f,  -0.0f,
           -0.0f, 0.0f, 0.0f, 0.0f,  0.0f,  -0.0f, -0.0f, 0.0f,  0.0f, 0.0f,  -0.0f, 0.0f}}},
        {// dy = inf
         {{inf,  0.0f, inf,  0.0f, 0.0f, inf, 0.0f, inf,  0.0f, inf,  0.0f, inf,
           0.0f, 0.0f, 0.0f, 0.0f, 0.0f, inf, inf,  0.0f, 0.0f, 0.0f, inf,  0.0f}},
         {{nan, nan,  nan,  inf, inf, inf, -inf, inf, nan, inf, nan, inf,
           inf, -inf, -inf, nan, nan, inf, inf,  nan, nan, nan, inf, nan}},
         {{nan, nan,  nan, inf, inf, inf, -inf, inf, nan, nan, nan, inf,
           inf, -inf, nan, nan, nan, inf, inf,  nan, nan, nan, nan, nan}},
         {{nan, nan,  nan,  inf,  inf,  inf, inf, inf,  nan,  inf, nan, inf,
           inf, -inf, -inf, -inf, -inf, inf, inf, -inf, -inf, nan, inf, nan}}}};
    // SoftmaxGrad rows (y = torch.softmax of a row with -inf, -1e9 and -100, which give exact and
    // subnormal zeros; of ramps), dy with an inf and a NaN: 5 columns (a tail only) and 16 (whole
    // vectors), 3 rows each; dx = _softmax_backward_data(dy, y, 1, float) as torch gives it.
    const std::vector<float> y5{{0.268941432f, 0.0f, 0.0f, 0.731058598f, 9.80908925e-45f, 0.0116562312f, 0.0316849202f,
                                 0.0861285403f, 0.23412165f, 0.636408627f, 0.0580122173f, 0.095645979f, 0.157693565f,
                                 0.259992719f, 0.428655535f}};
    const std::vector<float> dy5{
        {1.0f, 2.0f, -1.0f, 3.0f, 0.5f, -1.0f, -0.5f, inf, 0.5f, 1.0f, 1.0f, 0.5f, 0.0f, nan, -1.0f}};
    const std::vector<float> dx5{{-0.393223882f, -0.0f, -0.0f, 0.393223852f, -1.96181785e-44f, -inf, -inf, nan, -inf,
                                  -inf, nan, nan, nan, nan, nan}};
    const std::vector<float> y16{
        {0.0679427087f, 0.0f,          0.0f,           0.184687436f,   2.80259693e-45f, 0.0679427087f,  0.0679427087f,
         0.0679427087f, 0.0679427087f, 0.0679427087f,  0.0679427087f,  0.0679427087f,   0.0679427087f,  0.0679427087f,
         0.0679427087f, 0.0679427087f, 0.00434817048f, 0.00567699363f, 0.00741191208f,  0.00967703294f, 0.0126343807f,
         0.0164955165f, 0.0215366334f, 0.0281183366f,  0.0367114358f,  0.0479306392f,   0.0625784993f,  0.0817028061f,
         0.106671609f,  0.139271006f,  0.181832969f,   0.237402052f,   0.0191631746f,   0.0218964349f,  0.0250195414f,
         0.0285881013f, 0.0326656401f, 0.0373247713f,  0.0426484384f,  0.0487314165f,   0.0556820072f,  0.0636239797f,
         0.0726987273f, 0.0830677971f, 0.0949158296f,  0.108453751f,   0.123922601f,    0.141597778f}};
    const std::vector<float> dy16{
        {1.0f,          2.0f,          -1.0f,          3.0f,          0.5f,          0.25f,         0.25f,
         0.25f,         0.25f,         0.25f,          0.25f,         0.25f,         0.25f,         0.25f,
         0.25f,         0.25f,         -1.0f,          -0.866666675f, inf,           -0.599999964f, -0.466666639f,
         -0.333333313f, -0.199999928f, -0.0666666031f, 0.066666618f,  0.199999958f,  0.333333313f,  0.466666639f,
         0.599999964f,  0.73333329f,   0.866666675f,   1.0f,          1.0f,          0.866666675f,  0.733333349f,
         nan,           0.466666639f,  0.333333313f,   0.199999928f,  0.0666666031f, -0.066666618f, -0.199999958f,
         -0.333333313f, -0.466666639f, -0.599999964f,  -0.73333329f,  -0.866666675f, -1.0f}};
    const std::vector<float> dx16{{0.0129874237f,
                                   0.0f,
                                   -0.0f,
                                   0.404678345f,
                                   -1.40129846e-45f,
                                   -0.0379696079f,
                                   -0.0379696079f,
                                   -0.0379696079f,
                                   -0.0379696079f,
                                   -0.0379696079f,
                                   -0.0379696079f,
                                   -0.0379696079f,
                                   -0.0379696079f,
                                   -0.0379696079f,
                                   -0.0379696079f,
                                   -0.0379696079f,
                                   -inf,
                                   -inf,
                                   nan,
                                   -inf,
                                   -inf,
                                   -inf,
                                   -inf,
                                   -inf,
                                   -inf,
                                   -inf,
                                   -inf,
                                   -inf,
                                   -inf,
                                   -inf,
                                   -inf,
                                   -inf,
                                   nan,
                                   nan,
                                   nan,
                                   nan,
                                   nan,
                                   nan,
                                   nan,
                                   nan,
                                   nan,
                                   nan,
                                   nan,
                                   nan,
                                   nan,
                                   nan,
                                   nan,
                                   nan}};
    // LayerNormGradV3 of 4 rows of 11 (mean and rstd as torch's forward gave them): a gradient row
    // of -0.0 (dx +0.0), one with an inf and one with a NaN (NaN throughout the row; dgamma and
    // dbeta inf or NaN in those columns), and a finite one; native_layer_norm_backward's answer.
    const std::vector<float> lx{{1.0f,  2.0f,  3.0f,  4.0f,  5.0f,  6.0f,  7.0f,  8.0f,  9.0f,  10.0f,  11.0f,
                                 -1.0f, -2.0f, -3.0f, -4.0f, -5.0f, -6.0f, -7.0f, -8.0f, -9.0f, -10.0f, -11.0f,
                                 0.5f,  1.0f,  1.5f,  2.0f,  2.5f,  3.0f,  3.5f,  4.0f,  4.5f,  5.0f,   5.5f,
                                 2.0f,  4.0f,  6.0f,  8.0f,  10.0f, 12.0f, 14.0f, 16.0f, 18.0f, 20.0f,  22.0f}};
    const std::vector<float> ldy{{-0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f,
                                  1.0f,  -2.0f, inf,   0.5f,  0.25f, -1.0f, 3.0f,  2.0f,  -0.5f, 1.0f,  0.0f,
                                  0.5f,  0.5f,  0.5f,  0.5f,  0.5f,  nan,   0.5f,  0.5f,  0.5f,  0.5f,  0.5f,
                                  -1.0f, 0.0f,  1.0f,  -1.0f, 0.0f,  1.0f,  -1.0f, 0.0f,  1.0f,  -1.0f, 0.0f}};
    const std::vector<float> lg{{-1.0f, -0.800000012f, -0.600000024f, -0.399999976f, -0.199999988f, -1.49011612e-08f,
                                 0.199999988f, 0.399999976f, 0.600000024f, 0.800000012f, 1.0f}};
    const std::vector<float> lmean{{5.99999952f, -5.99999952f, 2.99999976f, 11.999999f}};
    const std::vector<float> lrstd{{0.316227615f, 0.316227615f, 0.632454276f, 0.158113852f}};
    const std::vector<float> ldx{{0.0f,
                                  0.0f,
                                  0.0f,
                                  0.0f,
                                  0.0f,
                                  0.0f,
                                  0.0f,
                                  0.0f,
                                  0.0f,
                                  0.0f,
                                  0.0f,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  nan,
                                  0.112117119f,
                                  -0.0379473045f,
                                  -0.124766193f,
                                  0.0413970873f,
                                  -0.0137990192f,
                                  -0.00574959442f,
                                  -0.0293229297f,
                                  0.0103492662f,
                                  0.113267012f,
                                  -0.100042962f,
                                  0.0344975516f}};
    const std::vector<float> ldg{{2.37170839f, -3.16227484f, inf, 0.632455707f, -0.0790566355f, nan, -1.10679746f,
                                  -0.9486835f, 1.89736557f, -1.89736724f, 0.790567875f}};
    const std::vector<float> ldb{{0.5f, -1.5f, inf, 0.0f, 0.75f, nan, 2.5f, 2.5f, 1.0f, 0.5f, 0.5f}};
    const RuntimeShape sx{static_cast<std::int64_t>(x.size())};
    const std::vector<OpRecord> ops{
        make("ReluGrad", {tensor(sx), tensor(sx)}, {tensor(sx)}),
        make("GeluGrad", {tensor(sx), tensor(sx)}, {tensor(sx)}, {attr("approximate", "str", "none")}),
        make("GeluGrad", {tensor(sx), tensor(sx)}, {tensor(sx)}, {attr("approximate", "str", "tanh")}),
        make("SiluGrad", {tensor(sx), tensor(sx)}, {tensor(sx)}),
        make("SoftmaxGrad", {tensor({3, 5}), tensor({3, 5})}, {tensor({3, 5})},
             {attr("axes", "list_int", skc::Array{skc::Value(-1)})}),
        make("SoftmaxGrad", {tensor({3, 16}), tensor({3, 16})}, {tensor({3, 16})},
             {attr("axes", "list_int", skc::Array{skc::Value(1)})}),
        make("LayerNormGradV3", {tensor({4, 11}), tensor({4, 11}), tensor({4, 1}), tensor({4, 1}), tensor({11})},
             {tensor({4, 11}), tensor({11}), tensor({11})})};
    const HostKernels kernels(cxx, ops);
    auto run = [&](std::size_t i, const std::vector<float>& a, const std::vector<float>& b) {
        std::vector<float> y(a.size(), -1.0f);
        const float* ip[] = {a.data(), b.data()};
        float* op[] = {y.data()};
        kernels[i](ip, op);
        return y;
    };
    // NaN, infinities and zeros exactly (NaN: any NaN; zeros with their sign bit); other values
    // within 1e-6 of max(|torch's|, 1e-30): the GELU forms' erf and tanh are other approximations
    // than torch's (Sleef's, oneDNN's), the sums of SoftmaxGrad run in another order.
    int exact = 0;
    auto check = [&](const std::string& what, float in, float got, float w) {
        CAPTURE(what);
        CAPTURE(in);
        if (std::isnan(w)) {
            CHECK_MESSAGE(std::isnan(got), "got " << got << ", torch gives NaN");
            ++exact;
        } else if (std::isinf(w) || w == 0.0f) {
            CHECK_MESSAGE(std::memcmp(&got, &w, sizeof got) == 0, "got " << got << ", torch gives " << w);
            ++exact;
        } else {
            CHECK_MESSAGE(std::abs(got - w) <= 1e-6f * std::max(std::abs(w), 1e-30f),
                          "got " << got << ", torch gives " << w);
        }
    };
    for (std::size_t d = 0; d < dys.size(); ++d)
        for (std::size_t i = 0; i < 4; ++i) {
            const std::vector<float> y = run(i, std::vector<float>(x.size(), dys[d]), x);
            for (std::size_t e = 0; e < x.size(); ++e)
                check(skc_host::detail::describe(ops[i]) + " dy " + std::to_string(dys[d]), x[e], y[e], want[d][i][e]);
        }
    for (std::size_t i : {std::size_t{4}, std::size_t{5}}) {
        const std::vector<float>& yv = i == 4 ? y5 : y16;
        const std::vector<float> dx = run(i, yv, i == 4 ? dy5 : dy16);
        for (std::size_t e = 0; e < dx.size(); ++e)
            check(skc_host::detail::describe(ops[i]), yv[e], dx[e], (i == 4 ? dx5 : dx16)[e]);
    }
    {
        std::vector<float> dx(lx.size(), -1.0f), dg(lg.size(), -1.0f), db(lg.size(), -1.0f);
        const float* ip[] = {ldy.data(), lx.data(), lrstd.data(), lmean.data(), lg.data()};
        float* op[] = {dx.data(), dg.data(), db.data()};
        kernels[6](ip, op);
        for (std::size_t e = 0; e < dx.size(); ++e) check("LayerNormGradV3 pd_x", ldy[e], dx[e], ldx[e]);
        for (std::size_t e = 0; e < dg.size(); ++e) {
            check("LayerNormGradV3 pd_gamma", lg[e], dg[e], ldg[e]);
            check("LayerNormGradV3 pd_beta", lg[e], db[e], ldb[e]);
        }
    }
    // GELU's gradients over [-9, 9] in steps of 1/64, dy = 1: exactly +0.0 where torch's are (erf:
    // x below -6.1514; tanh: tanh(u) = -1, u below -8.664339742), else within 2e-6 of the exact
    // derivative (torch's own error, from its erf and tanh, is up to 1.3e-7).
    std::vector<float> grid;
    for (int i = -576; i <= 576; ++i) grid.push_back(static_cast<float>(i) / 64.0f);
    const RuntimeShape sg{static_cast<std::int64_t>(grid.size())};
    for (const std::string a : {"none", "tanh"}) {
        const OpRecord op = make("GeluGrad", {tensor(sg), tensor(sg)}, {tensor(sg)}, {attr("approximate", "str", a)});
        skc_test::TempDir d2;
        skc_test::spit(d2 / "g.cpp", skc_host::generate_kernel(op, "g").value());
        std::vector<std::string> a2{cxx};
        for (const std::string& f : skc_host::kernel_flags(skc_host::host_target())) a2.push_back(f);
        a2.insert(a2.end(), {"-shared", "-o", (d2 / "g.so").string(), (d2 / "g.cpp").string()});
        REQUIRE_MESSAGE(wait_for(spawn(a2, d2 / "g.log")) == 0, skc_test::slurp(d2 / "g.log"));
        Lib g(d2 / "g.so");
        REQUIRE_MESSAGE(g.handle != nullptr, ::dlerror());
        const std::vector<float> ones(grid.size(), 1.0f);
        std::vector<float> y(grid.size(), -1.0f);
        const float* ip[] = {ones.data(), grid.data()};
        float* op_p[] = {y.data()};
        reinterpret_cast<Kernel>(::dlsym(g.handle, "g"))(ip, op_p);
        const std::vector<double> r = reference(op, {ones, grid}).front();
        const bool erf = a == "none";
        int zeros = 0;
        for (std::size_t e = 0; e < grid.size(); ++e) {
            CAPTURE(a);
            CAPTURE(grid[e]);
            const double v = grid[e];
            const bool zero = erf ? v < -6.1514 : 0.7978845608 * (v + 0.044715 * v * v * v) < -8.664339742;
            if (zero) {
                CHECK_MESSAGE(std::memcmp(&y[e], &kPlusZero, sizeof(float)) == 0, "got " << y[e] << ", torch gives 0");
                ++zeros;
            } else {
                CHECK(std::abs(y[e] - r[e]) <= 2e-6 * std::max(1.0, std::abs(r[e])));
            }
        }
        MESSAGE("GeluGrad " << a << ": " << zeros << " exact zeros over [-9, 9]");
    }
    MESSAGE(exact << " special values exactly as torch gives them");
}

TEST_CASE(
    "generated ReduceMean, LogSoftmaxV2, LogSoftmaxGrad, ConcatD, SelectV2 and MaskedFill give what torch gives") {
    const std::string cxx = find_cxx();
    REQUIRE_MESSAGE(!cxx.empty(), "no c++ compiler on PATH (set SKC_HOST_CXX)");
    constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    // Inputs and outputs as stock torch 1.13 gives them (dense float32, CPU), probed value by value:
    // x.mean(-1) of rows of 3 (a tail only) and of 33 (vectors and a tail, keepdim); log_softmax(x, -1)
    // of rows of 5 (a tail) and of 16 (rows in registers); _log_softmax_backward_data(dy, y, 1,
    // float) with y a log_softmax output (-inf, -1e9 and -101.8, whose e^y is subnormal).
    const std::vector<float> m3{{1.0f,  nan,    2.0f,   inf,    -inf,  0.0f,   inf,    1.0f,   2.0f,  3e38f,
                                 3e38f, 0.0f,   -0.0f,  -0.0f,  -0.0f, 1e-40f, 1e-40f, 1e-40f, -inf,  -inf,
                                 5.0f,  -1e38f, -3e38f, -1e38f, 0.1f,  0.2f,   0.3f,   1.0f,   -1.0f, -0.0f}};
    const std::vector<float> m3_want{{nan, nan, inf, inf, 0.0f, 9.99994610111476e-41f, -inf, -inf, 0.200000003f, 0.0f}};
    std::vector<float> m33(3 * 33);
    for (std::size_t c = 0; c < 33; ++c) m33[c] = m33[33 + c] = m33[66 + c] = static_cast<float>(c) * 0.37f - 3.0f;
    m33[33 + 32] = nan, m33[66] = -inf, m33[66 + 20] = inf;
    const std::vector<float> m33_want{{2.92000031f, nan, nan}};
    const std::vector<float> ls5{{0.0f,   -inf,  1.0f, -1e9f, 2.0f, -inf, -inf,    -inf, -inf,   -inf,   1.0f,  nan,
                                  2.0f,   3.0f,  4.0f, 1.0f,  inf,  2.0f, 3.0f,    4.0f, 1e30f,  -1e30f, 0.0f,  3e38f,
                                  -3e38f, -0.0f, 0.0f, -0.0f, 0.0f, 0.0f, -100.0f, 0.0f, 100.0f, 87.0f,  -87.0f}};
    const std::vector<float> ls5_want{{-2.40760589f,
                                       -inf,
                                       -1.40760589f,
                                       -1e9f,
                                       -0.407605946f,
                                       nan,
                                       nan,
                                       nan,
                                       nan,
                                       nan,
                                       nan,
                                       nan,
                                       nan,
                                       nan,
                                       nan,
                                       nan,
                                       nan,
                                       nan,
                                       nan,
                                       nan,
                                       -3.00000001e38f,
                                       -3.00000001e38f,
                                       -3.00000001e38f,
                                       0.0f,
                                       -inf,
                                       -1.60943794f,
                                       -1.60943794f,
                                       -1.60943794f,
                                       -1.60943794f,
                                       -1.60943794f,
                                       -200.0f,
                                       -100.0f,
                                       -2.26497400e-06f,
                                       -13.0000019f,
                                       -187.0f}};
    std::vector<float> ls16(3 * 16, -inf);
    for (std::size_t c = 0; c < 16; ++c) {
        ls16[c] = static_cast<float>(c) * 0.5f - 4.0f;
        ls16[32 + c] = static_cast<float>(c) * 10.0f;
    }
    ls16[3] = -inf, ls16[7] = -1e9f, ls16[16 + 5] = 3.0f;
    std::vector<float> ls16_want{{-8.42419815f, -7.92419815f, -7.42419815f, -inf, -6.42419815f, -5.92419815f,
                                  -5.42419815f, -1e9f, -4.42419815f, -3.92419815f, -3.42419815f, -2.92419815f,
                                  -2.42419815f, -1.92419827f, -1.42419827f, -0.924198270f}};
    for (std::size_t c = 0; c < 16; ++c) ls16_want.push_back(c == 5 ? 0.0f : -inf);
    for (std::size_t c = 0; c < 16; ++c) ls16_want.push_back(static_cast<float>(c) * 10.0f - 150.000046f);
    ls16_want.back() = -4.54177061e-05f;
    const std::vector<float> y5{{-2.40760589f, -inf, -1.40760589f, -1e9f, -0.407605946f, -4.45191431f, -3.45191431f,
                                 -2.45191431f, -1.45191443f, -0.451914400f, -1.28733873f, -2.28733873f, -1.78733873f,
                                 -0.787338674f, -101.787338f}};
    const std::vector<float> dy5{
        {1.0f, 2.0f, -0.0f, 3.0f, 0.5f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, 1.0f, inf, 0.0f, -1.0f, 2.0f}};
    const std::vector<float> dx5_want{{0.41480124f, 2.0f, -1.5907352f, 3.0f, -3.82406664f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f,
                                       -inf, nan, -inf, -inf, -inf}};
    const std::vector<float> dy5b{
        {nan, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f, -1.0f, 1.0f, -1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}};
    const std::vector<float> dx5b_want{
        {nan, nan, nan, nan, nan, 1.0f, -1.0f, 1.0f, -1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}};
    const std::vector<OpRecord> ops{reduce_mean({10, 3}, {-1}, false),
                                    reduce_mean({3, 33}, {1}, true),
                                    log_softmax({7, 5}),
                                    log_softmax({3, 16}),
                                    log_softmax_grad({3, 5}),
                                    concat({tensor({3}), tensor({2})}, 0),
                                    select({5}, {5}, {5}),
                                    masked_fill({5}, {5}),
                                    masked_fill({2, 3, 3}, {3, 3})};
    const HostKernels kernels(cxx, ops);
    auto run = [&](std::size_t i, std::vector<const float*> in, std::size_t n) {
        std::vector<float> y(n, -1.0f);
        float* op[] = {y.data()};
        kernels[i](in.data(), op);
        return y;
    };
    // NaN, infinities, zeros (with their sign) and subnormals exactly; other values within 2.4e-7
    // of torch's, relative (sums in another order; e^x and log from other approximations).
    int exact = 0;
    auto check = [&](const std::string& what, std::size_t e, float got, float w) {
        CAPTURE(what);
        CAPTURE(e);
        if (std::isnan(w) || std::isinf(w) || !std::isnormal(w)) {
            CHECK_MESSAGE(same(got, w), "got " << got << ", torch gives " << w);
            ++exact;
        } else {
            CHECK_MESSAGE(std::abs(got - w) <= 2.4e-7f * std::abs(w), "got " << got << ", torch gives " << w);
        }
    };
    auto check_all = [&](std::size_t i, const std::vector<float>& got, const std::vector<float>& want) {
        REQUIRE(got.size() == want.size());
        for (std::size_t e = 0; e < got.size(); ++e) check(skc_host::detail::describe(ops[i]), e, got[e], want[e]);
    };
    check_all(0, run(0, {m3.data(), nullptr}, 10), m3_want);
    check_all(1, run(1, {m33.data(), nullptr}, 3), m33_want);
    check_all(2, run(2, {ls5.data()}, ls5.size()), ls5_want);
    check_all(3, run(3, {ls16.data()}, ls16.size()), ls16_want);
    check_all(4, run(4, {dy5.data(), y5.data()}, 15), dx5_want);
    check_all(4, run(4, {dy5b.data(), y5.data()}, 15), dx5b_want);
    // ConcatD, SelectV2 and MaskedFill copy bits: a NaN's payload, -0.0, subnormals and infinities
    // come out as they went in (torch's cat, where and masked_fill keep them: 0x7fc00123 stays).
    float payload = 0;
    const std::uint32_t payload_bits = 0x7fc00123u;
    std::memcpy(&payload, &payload_bits, sizeof payload);
    const std::vector<float> a{{payload, -0.0f, 1e-40f, -inf, 3.0f}}, b{{0.0f, payload, inf, -1e-40f, -0.0f}};
    auto same_bits_of = [&](float got, float want) { return std::memcmp(&got, &want, sizeof got) == 0; };
    const std::vector<float> cat = run(5, {a.data(), b.data()}, 5);
    for (std::size_t e = 0; e < 5; ++e) CHECK(same_bits_of(cat[e], e < 3 ? a[e] : b[e - 3]));
    alignas(4) unsigned char cond_bytes[8] = {1, 0, 1, 0, 1, 0, 0, 0};
    const auto* cond = reinterpret_cast<const float*>(cond_bytes);
    const std::vector<float> sel = run(6, {cond, a.data(), b.data()}, 5);
    for (std::size_t e = 0; e < 5; ++e) CHECK(same_bits_of(sel[e], cond_bytes[e] != 0 ? a[e] : b[e]));
    for (const float value : {-inf, nan, -0.0f, payload}) {
        const std::vector<float> mf = run(7, {a.data(), cond, &value}, 5);
        for (std::size_t e = 0; e < 5; ++e) CHECK(same_bits_of(mf[e], cond_bytes[e] != 0 ? value : a[e]));
        exact += 10;
    }
    // A causal mask ([3, 3], true above the diagonal) filling [2, 3, 3] with -inf, as attention does,
    // in place (masked_fill_) and not.
    alignas(4) unsigned char causal[12] = {0, 1, 1, 0, 0, 1, 0, 0, 0};
    std::vector<float> scores(18);
    for (std::size_t e = 0; e < 18; ++e) scores[e] = static_cast<float>(e) - 9.0f;
    const float minus_inf = -inf;
    const std::vector<float> filled =
        run(8, {scores.data(), reinterpret_cast<const float*>(causal), &minus_inf}, scores.size());
    std::vector<float> in_place = scores;
    float* op[] = {in_place.data()};
    const float* ip[] = {in_place.data(), reinterpret_cast<const float*>(causal), &minus_inf};
    kernels[8](ip, op);
    for (std::size_t e = 0; e < 18; ++e) {
        CHECK(same_bits_of(filled[e], causal[e % 9] != 0 ? -inf : scores[e]));
        CHECK(same_bits_of(in_place[e], filled[e]));
    }
    exact += 5 * 5 + 36;
    MESSAGE(exact << " values exactly as torch gives them");
}

TEST_CASE("generic kernels against naive references") {
    std::mt19937 rng(99);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    auto rnd = [&](std::size_t n) {
        std::vector<float> v(n);
        for (float& f : v) f = dist(rng);
        return v;
    };

    SUBCASE("matmul, all transposes, batched with broadcast") {
        for (bool ta : {false, true})
            for (bool tb : {false, true}) {
                const std::int64_t B1 = 1, B2 = 3, M = 7, K = 33, N = 5;
                const OpRecord op = bmm(B1, B2, M, K, N, ta, tb);
                auto a = rnd(B1 * M * K), b = rnd(B2 * K * N);
                std::vector<float> y(B2 * M * N);
                const float* in[] = {a.data(), b.data()};
                float* out[] = {y.data()};
                skc_host::run_generic(op, in, out);
                for (std::int64_t t = 0; t < B2; ++t)
                    for (std::int64_t i = 0; i < M; ++i)
                        for (std::int64_t j = 0; j < N; ++j) {
                            double s = 0;
                            for (std::int64_t p = 0; p < K; ++p) {
                                const float av = ta ? a[static_cast<std::size_t>(p * M + i)]
                                                    : a[static_cast<std::size_t>(i * K + p)];
                                const float bv = tb ? b[static_cast<std::size_t>(t * K * N + j * K + p)]
                                                    : b[static_cast<std::size_t>(t * K * N + p * N + j)];
                                s += static_cast<double>(av) * bv;
                            }
                            CHECK(std::abs(y[static_cast<std::size_t>(t * M * N + i * N + j)] - s) <=
                                  1e-4 * (1 + std::abs(s)));
                        }
            }
    }
    SUBCASE("transpose") {
        const OpRecord op = transpose({2, 3, 5, 7}, {3, 1, 0, 2});
        auto x = rnd(210);
        std::vector<float> y(210);
        const float* in[] = {x.data(), nullptr};
        float* out[] = {y.data()};
        skc_host::run_generic(op, in, out);
        std::size_t o = 0;
        for (std::size_t i3 = 0; i3 < 7; ++i3)
            for (std::size_t i1 = 0; i1 < 3; ++i1)
                for (std::size_t i0 = 0; i0 < 2; ++i0)
                    for (std::size_t i2 = 0; i2 < 5; ++i2) CHECK(y[o++] == x[((i0 * 3 + i1) * 5 + i2) * 7 + i3]);
    }
    SUBCASE("softmax, layer norm, gelu, relu, broadcast add") {
        auto x = rnd(7 * 33);
        std::vector<float> y(x.size()), mean(7), var(7);
        const float* in1[] = {x.data()};
        float* out1[] = {y.data()};
        skc_host::run_generic(softmax({7, 33}), in1, out1);
        for (std::size_t r = 0; r < 7; ++r) {
            double sum = 0, mx = -1e30;
            for (std::size_t c = 0; c < 33; ++c) mx = std::max(mx, static_cast<double>(x[r * 33 + c]));
            for (std::size_t c = 0; c < 33; ++c) sum += std::exp(x[r * 33 + c] - mx);
            for (std::size_t c = 0; c < 33; ++c)
                CHECK(std::abs(y[r * 33 + c] - std::exp(x[r * 33 + c] - mx) / sum) < 1e-6);
        }
        auto g = rnd(33), b = rnd(33);
        const float* in3[] = {x.data(), g.data(), b.data()};
        float* out3[] = {y.data(), mean.data(), var.data()};
        skc_host::run_generic(layer_norm({7, 33}, true), in3, out3);
        for (std::size_t r = 0; r < 7; ++r) {
            double mu = 0, v = 0;
            for (std::size_t c = 0; c < 33; ++c) mu += x[r * 33 + c];
            mu /= 33;
            for (std::size_t c = 0; c < 33; ++c) v += (x[r * 33 + c] - mu) * (x[r * 33 + c] - mu);
            v /= 33;
            CHECK(std::abs(mean[r] - mu) < 1e-5);
            CHECK(std::abs(var[r] - v) < 1e-5);
            for (std::size_t c = 0; c < 33; ++c)
                CHECK(std::abs(y[r * 33 + c] - ((x[r * 33 + c] - mu) / std::sqrt(v + 1e-5) * g[c] + b[c])) < 1e-4);
        }
        skc_host::run_generic(unary("Gelu", {7, 33}), in1, out1);
        for (std::size_t i = 0; i < x.size(); ++i) {
            const double v = x[i];
            CHECK(std::abs(y[i] -
                           0.5 * v * (1 + std::tanh(std::sqrt(2 / 3.141592653589793) * (v + 0.044715 * v * v * v)))) <
                  1e-5);
        }
        skc_host::run_generic(unary("Relu", {7, 33}), in1, out1);
        for (std::size_t i = 0; i < x.size(); ++i) CHECK(y[i] == std::max(x[i], 0.0f));
        const float* in2[] = {b.data(), x.data()};  // [33] + [7, 33]: the first input is broadcast
        skc_host::run_generic(binary("Add", {33}, {7, 33}, {7, 33}), in2, out1);
        for (std::size_t i = 0; i < x.size(); ++i) CHECK(y[i] == x[i] + b[i % 33]);
    }
}

namespace {

bool bool_attr(const OpRecord& op, const std::string& name) {
    for (const Attr& a : *op.attrs)
        if (a.name == name) return a.value.as_bool();
    return false;
}

std::optional<std::string> str_attr(const OpRecord& op, const std::string& name) {
    for (const Attr& a : *op.attrs)
        if (a.name == name) return a.value.as_string();
    return std::nullopt;
}

double gelu_tanh_ref(double v) {
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / 3.141592653589793) * (v + 0.044715 * v * v * v)));
}
double gelu_erf_ref(double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }

double act_ref(const std::string& f, double v) {
    if (f == "relu") return std::max(v, 0.0);
    if (f == "gelu_erf") return gelu_erf_ref(v);
    REQUIRE(f == "gelu_tanh");
    return gelu_tanh_ref(v);
}

/// Checks the generic kernel's output of a matmul-family record against y = act(op(x1) op(x2) +
/// bias) in double, each operand read element by element through its own shape and strides.
void check_matmul(const OpRecord& op, const std::vector<std::vector<float>>& in, const std::vector<float>& y) {
    const auto& a = std::get<TensorDesc>(op.inputs[0]);
    const auto& b = std::get<TensorDesc>(op.inputs[1]);
    const bool batched = op.op_type == "BatchMatMulV2";
    const bool ta = bool_attr(op, batched ? "adj_x1" : "transpose_x1"),
               tb = bool_attr(op, batched ? "adj_x2" : "transpose_x2");
    const std::optional<std::string> fused = str_attr(op, "fused_op_type");
    const float* bias =
        op.inputs.size() > 2 && std::holds_alternative<TensorDesc>(op.inputs[2]) ? in[2].data() : nullptr;
    const auto& yd = std::get<TensorDesc>(op.outputs[0]);
    const std::size_t r = yd.shape.rank();
    const std::int64_t batch = batched ? yd.shape[0] : 1, m = yd.shape[r - 2], n = yd.shape[r - 1];
    const std::int64_t k = ta ? a.shape[r - 2] : a.shape[r - 1];
    // Element (t, row, col) of op(t) for a stored operand: the last two indices swapped when transposed.
    auto at = [&](const TensorDesc& d, const std::vector<float>& buf, std::int64_t t, std::int64_t row,
                  std::int64_t col, bool tr) {
        if (tr) std::swap(row, col);
        const std::vector<std::int64_t> st = strides(d);
        std::int64_t off = row * st[r - 2] + col * st[r - 1];
        if (r == 3 && d.shape[0] != 1) off += t * st[0];
        return static_cast<double>(buf[static_cast<std::size_t>(off)]);
    };
    int bad = 0;
    for (std::int64_t t = 0; t < batch; ++t)
        for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t j = 0; j < n; ++j) {
                double s = 0, mag = 0;
                for (std::int64_t p = 0; p < k; ++p) {
                    const double prod = at(a, in[0], t, i, p, ta) * at(b, in[1], t, p, j, tb);
                    s += prod;
                    mag += std::abs(prod);
                }
                if (bias != nullptr) s += bias[j], mag += std::abs(bias[j]);
                if (fused) s = act_ref(*fused, s);
                const double got = y[static_cast<std::size_t>((t * m + i) * n + j)];
                if (!(std::abs(got - s) <= 1e-5 * (1 + mag))) ++bad;
            }
    CHECK(bad == 0);
}

/// LayerNorm / LayerNormV3 against the double-precision mean, biased variance and rstd of each row.
void check_layer_norm(const OpRecord& op, const std::vector<std::vector<float>>& in,
                      const std::vector<std::vector<float>>& out) {
    const auto& x = std::get<TensorDesc>(op.inputs[0]);
    std::int64_t axis = 0, rank = static_cast<std::int64_t>(x.shape.rank());
    double eps = 0;
    for (const Attr& a : *op.attrs) {
        if (a.name == "begin_norm_axis") axis = a.value.as_int();
        if (a.name == "epsilon") eps = a.value.as_double();
    }
    if (axis < 0) axis += rank;
    std::size_t cols = 1;
    for (std::int64_t d = axis; d < rank; ++d) cols *= static_cast<std::size_t>(x.shape[static_cast<std::size_t>(d)]);
    const std::size_t rows = in[0].size() / cols;
    const bool v3 = op.op_type == "LayerNormV3";
    int bad = 0;
    for (std::size_t row = 0; row < rows; ++row) {
        double mu = 0, var = 0;
        for (std::size_t c = 0; c < cols; ++c) mu += in[0][row * cols + c];
        mu /= static_cast<double>(cols);
        for (std::size_t c = 0; c < cols; ++c) var += (in[0][row * cols + c] - mu) * (in[0][row * cols + c] - mu);
        var /= static_cast<double>(cols);
        const double rstd = 1 / std::sqrt(var + eps);
        for (std::size_t c = 0; c < cols; ++c) {
            const double want = (in[0][row * cols + c] - mu) * rstd * in[1][c] + in[2][c];
            if (!(std::abs(out[0][row * cols + c] - want) < 1e-4)) ++bad;
        }
        if (!out[1].empty() && !(std::abs(out[1][row] - mu) < 1e-5)) ++bad;
        if (!out[2].empty() && !(std::abs(out[2][row] - (v3 ? rstd : var)) < 1e-5 * (v3 ? rstd : 1.0))) ++bad;
    }
    CHECK(bad == 0);
}

}  // namespace

TEST_CASE("generic kernels of the plugin's ops against naive references") {
    std::mt19937 rng(2024);
    int checked = 0;
    for (const OpRecord& op : plugin_cases()) {
        const std::string name = skc_host::detail::describe(op);
        CAPTURE(name);
        REQUIRE_MESSAGE(skc_host::supported(op), skc_host::unsupported_reason(op));
        auto in = buffers(op.inputs, rng, true, 0.0f);
        const skc_host::Analysis analysis = skc_host::analyze(op);
        in_domain(*analysis.plan, in);
        auto out = buffers(op.outputs, rng, false, std::numeric_limits<float>::quiet_NaN());
        skc_host::run_generic(op, pointers<const float>(in).data(), pointers<float>(out).data());
        const bool elementwise = std::holds_alternative<skc_host::UnaryPlan>(*analysis.plan) ||
                                 std::holds_alternative<skc_host::BinaryPlan>(*analysis.plan);
        if (op.op_type == "ReluGrad" || op.op_type == "GeluGrad" || op.op_type == "SiluGrad" ||
            op.op_type == "SoftmaxGrad" || op.op_type == "LayerNormGradV3" || op.op_type == "ReduceMean" ||
            op.op_type == "LogSoftmaxV2" || op.op_type == "LogSoftmaxGrad" || op.op_type == "ConcatD" ||
            op.op_type == "SelectV2" || op.op_type == "MaskedFill" || elementwise) {
            // In double precision (reference()), within 1e-5 of max(|y|, 1); the copies exactly.
            const std::vector<std::vector<double>> want = reference(op, in);
            const bool copy = op.op_type == "ConcatD" || op.op_type == "SelectV2" || op.op_type == "MaskedFill";
            const double tol = copy ? 0.0 : 1e-5;
            int bad = 0;
            for (std::size_t o = 0; o < want.size(); ++o)
                for (std::size_t i = 0; i < want[o].size(); ++i)
                    if (!(std::abs(out[o][i] - want[o][i]) <= tol * std::max(1.0, std::abs(want[o][i])))) ++bad;
            CHECK(bad == 0);
        } else if (op.op_type == "LayerNorm" || op.op_type == "LayerNormV3") {
            check_layer_norm(op, in, out);
        } else {
            check_matmul(op, in, out[0]);
        }
        ++checked;
    }
    CHECK(checked > 175);
    MESSAGE(checked << " plugin ops checked against naive references");
}

TEST_CASE("Gelu approximate none and tanh differ; absent is tanh, bit for bit") {
    std::mt19937 rng(5);
    const auto check_same = [&](const OpRecord& a, const OpRecord& b, bool same) {
        auto in = buffers(a.inputs, rng, true, 0.0f);
        auto ya = buffers(a.outputs, rng, false, 0.0f), yb = buffers(b.outputs, rng, false, 0.0f);
        skc_host::run_generic(a, pointers<const float>(in).data(), pointers<float>(ya).data());
        skc_host::run_generic(b, pointers<const float>(in).data(), pointers<float>(yb).data());
        CHECK(same_bits(ya[0], yb[0]) == same);
    };
    check_same(gelu({7, 33}, std::nullopt), gelu({7, 33}, "tanh"), true);
    check_same(gelu({7, 33}, std::nullopt), unary("Gelu", {7, 33}), true);
    check_same(gelu({7, 33}, "none"), gelu({7, 33}, "tanh"), false);
}

TEST_CASE("unsupported ops give nullopt and a clear reason") {
    auto check = [](const OpRecord& op, const std::string& needle) {
        CAPTURE(needle);
        CHECK_FALSE(skc_host::supported(op));
        CHECK_FALSE(skc_host::generate_kernel(op, "k").has_value());
        const std::string why = skc_host::unsupported_reason(op);
        CAPTURE(why);
        CHECK(why.find(needle) != std::string::npos);
        const float* in[4] = {};
        float* out[4] = {};
        CHECK_THROWS_AS(skc_host::run_generic(op, in, out), std::invalid_argument);
    };
    OpRecord half = matmul(4, 4, 4, false, false);
    std::get<TensorDesc>(half.inputs[0]).dtype = "float16";
    check(half, "dtype float16");
    OpRecord nz = unary("Relu", {4, 4});
    std::get<TensorDesc>(nz.inputs[0]).format = "FRACTAL_NZ";
    check(nz, "format FRACTAL_NZ");
    check(unary("Sigmoid", {4}), "op type Sigmoid is not supported");
    check(make("MatMulV2", {tensor({2, 4, 4}), tensor({2, 4, 4})}, {tensor({2, 4, 4})}), "rank-2");
    check(make("MatMul", {tensor({4, 5}), tensor({6, 4})}, {tensor({4, 4})}), "inner dims differ");
    check(bmm(2, 3, 4, 4, 4, false, false), "do not broadcast");
    OpRecord sm = softmax({4, 5});
    (*sm.attrs)[0].value = skc::Array{skc::Value(0)};
    check(sm, "last axis");
    check(transpose({2, 3}, {0, 0}, true), "not a permutation");
    OpRecord tr = transpose({2, 3}, {1, 0});
    std::get<TensorDesc>(tr.inputs[1]).const_data.reset();
    check(tr, "const_data");
    check(make("Relu", {tensor({0, 3})}, {tensor({0, 3})}), "no elements");
    check(make("ConcatD", {std::vector<TensorDesc>{tensor({2}), tensor({2})}}, {tensor({4})}),
          "ConcatD: attr concat_dim is missing");
    check(unary("ReduceSum", {4}), "op type ReduceSum is not supported");
    CHECK_THROWS_AS((void)skc_host::generate_kernel(unary("Relu", {4}), "not an identifier"), std::invalid_argument);

    // The whole reason, for the plugin's conventions.
    auto exact = [&](const OpRecord& op, const std::string& reason) {
        CHECK(skc_host::unsupported_reason(op) == reason);
        check(op, reason);
    };
    exact(binary("Add", {4, 5}, {4}, {4, 5}), "Add: shapes [4,5] and [4] do not broadcast");
    exact(binary("Sub", {4, 1}, {1, 5}, {4, 1}), "Sub: outputs[0] has shape [4,1], expected [4,5]");
    exact(binary("RealDiv", {4, 5}, {4, 5}, {4, 6}), "RealDiv: outputs[0] has shape [4,6], expected [4,5]");
    exact(make("Swish", {tensor({4})}, {tensor({4})}, {attr("scale", "float", 2.0)}),
          "Swish: attr scale 2.000000 is not supported (only 1)");
    exact(power({4}, 1.5), "Power: attr power 1.500000 is not supported (2, 3, 0.5, -0.5, -1, -2, 1 or 0)");
    OpRecord shifted = power({4}, 2.0);
    (*shifted.attrs)[2].value = 1.0;
    exact(shifted, "Power: attrs scale and shift must be 1 and 0");
    exact(make("Neg", {tensor({4}), tensor({4})}, {tensor({4})}),
          "Neg: inputs[1] is present: only one input is supported");
    const TensorDesc q = view({3, 5, 4}, {4, 12, 1});
    exact(mm("MatMulV2", view({4, 5}, {10, 1}, 3), tensor({5, 6}), false, false),
          "MatMulV2: inputs[0] is a view with offset 3: the kernel takes the address of the view's first element, so "
          "the offset "
          "must be 0");
    CHECK(skc_host::supported(mm("MatMulV2", view({4, 5}, {10, 1}, 0), tensor({5, 6}), false, false)));
    OpRecord view_out = mm("MatMulV2", tensor({4, 5}), tensor({5, 6}), false, false);
    view_out.outputs[0] = view({4, 6}, {6, 1});
    exact(view_out, "MatMulV2: outputs[0] is a view: only dense tensors are supported");
    exact(mm("BatchMatMulV2", q, q, false, true, RuntimeShape{5}),
          "BatchMatMulV2: inputs[2] is present: BatchMatMulV2 with a bias is not supported");
    exact(mm("FusedMatMul", tensor({4, 5}), tensor({5, 6}), false, false, std::nullopt, "sigmoid"),
          "FusedMatMul: attr fused_op_type \"sigmoid\" is not supported (relu, gelu_erf or gelu_tanh)");
    exact(mm("FusedMatMul", tensor({4, 5}), tensor({5, 6}), false, false, std::nullopt, ""),
          "FusedMatMul: attr fused_op_type \"\" is not supported (relu, gelu_erf or gelu_tanh)");
    exact(mm("FusedMatMul", tensor({4, 5}), tensor({5, 6}), false, false),
          "FusedMatMul: attr fused_op_type is missing (relu, gelu_erf or gelu_tanh)");
    exact(gelu({4}, "exact"), "Gelu: attr approximate \"exact\" is not supported (none or tanh)");
    OpRecord gelu_int = gelu({4}, std::nullopt);
    gelu_int.attrs->push_back(attr("approximate", "int", 0));
    exact(gelu_int, "Gelu: attr approximate is not a string");
    OpRecord params = layer_norm_axis({4, 5}, 0, false, true, true);
    (*params.attrs)[1].value = -1;
    exact(params, "LayerNorm: begin_params_axis is axis 1, begin_norm_axis axis 0: they must be the same axis");
    OpRecord gamma = layer_norm_axis({4, 5}, -1, true, true, true);
    gamma.inputs[1] = tensor({4});
    exact(gamma, "LayerNormV3: gamma (inputs[1]) has shape [4], expected 5 elements (the normalised dims [5])");
    OpRecord beta = layer_norm_axis({2, 4, 5}, 1, false, false, false);
    beta.inputs[2] = tensor({5});
    exact(beta, "LayerNorm: beta (inputs[2]) has shape [5], expected 20 elements (the normalised dims [4,5])");
    exact(layer_norm_axis({4, 5}, 2, false, true, true),
          "LayerNorm: attr begin_norm_axis 2 is out of range for rank 2");
    OpRecord rstd = layer_norm_axis({2, 4, 5}, 1, true, true, true);
    rstd.outputs[2] = tensor({4});
    exact(rstd, "LayerNormV3: outputs[2] has shape [4], expected 2 elements");
    // Other view and bias faults.
    exact(mm("MatMulV2", view({4, 5}, {5}), tensor({5, 6}), false, false),
          "MatMulV2: inputs[0] has stride [5] for shape [4,5]: the ranks differ");
    TensorDesc no_stride = tensor({5, 6});
    no_stride.is_view = true;
    exact(mm("MatMulV2", tensor({4, 5}), no_stride, false, false), "MatMulV2: inputs[1] is a view without a stride");
    exact(mm("MatMulV2", tensor({4, 5}), view({5, 6}, {-6, 1}), false, false),
          "MatMulV2: inputs[1] has stride [-6,1]: strides must be >= 0");
    exact(mm("MatMulV2", tensor({4, 5}), view({5, 6}, {std::int64_t{1} << 62, 1}), false, false),
          "MatMulV2: inputs[1] has stride [4611686018427387904,1] for shape [5,6]: it spans more than 2^63 elements");
    exact(mm("MatMulV2", tensor({4, 5}), tensor({5, 6}), false, false, RuntimeShape{5}),
          "MatMulV2: bias (inputs[2]) has shape [5], expected [6] or [1,6]");
    exact(mm("MatMulV2", tensor({4, 5}), tensor({5, 6}), false, false, RuntimeShape{4, 6}),
          "MatMulV2: bias (inputs[2]) has shape [4,6], expected [6] or [1,6]");
    OpRecord offset_w = mm("MatMulV2", tensor({4, 5}), tensor({5, 6}), false, false);
    offset_w.inputs[3] = tensor({6});
    exact(offset_w, "MatMulV2: inputs[3] is present: offset_w is not supported");
    OpRecord x3 = mm("FusedMatMul", tensor({4, 5}), tensor({5, 6}), false, false, RuntimeShape{6}, "relu");
    x3.inputs[3] = tensor({4, 6});
    exact(x3, "FusedMatMul: inputs[3] is present: x3 is not supported");
    OpRecord bias_view = mm("MatMulV2", tensor({4, 5}), tensor({5, 6}), false, false, RuntimeShape{6});
    bias_view.inputs[2] = view({6}, {1});
    exact(bias_view, "MatMulV2: inputs[2] is a view: only dense tensors are supported");
    exact(mm("FusedMatMul", tensor({2, 4, 5}), tensor({2, 5, 6}), false, false, std::nullopt, "relu"),
          "FusedMatMul: FusedMatMul needs rank-2 inputs, got [2,4,5] and [2,5,6]");
    OpRecord add_view = binary("Add", {4, 5}, {4, 5}, {4, 5});
    add_view.inputs[0] = view({4, 5}, {10, 2});
    CHECK(skc_host::supported(add_view));  // a binary op reads a view at its strides
    exact(make("Neg", {view({4, 5}, {10, 2})}, {tensor({4, 5})}),
          "Neg: inputs[0] is a view whose last dim has stride 2: a unary op reads runs of contiguous elements");
    exact(make("Tanh", {view({4, 5}, {5, 0})}, {tensor({4, 5})}),
          "Tanh: inputs[0] is a view whose last dim has stride 0: a unary op reads runs of contiguous elements");
    OpRecord relu_view_out = unary("Relu", {4, 5});
    relu_view_out.outputs[0] = view({4, 5}, {10, 1});
    exact(relu_view_out, "Relu: outputs[0] is a view: only dense tensors are supported");
    OpRecord no_alpha = axpy({4}, {4}, 2.0);
    no_alpha.attrs->clear();
    exact(no_alpha, "Axpy: attr alpha is missing");
    exact(axpy({4}, {4}, 1e300), "Axpy: attr alpha is beyond float's range");
    // The ops added for the plugin's mean, cat, log_softmax, where and masked_fill.
    exact(reduce_mean({3, 4, 5}, {1}, false),
          "ReduceMean: axes [1] of x [3,4,5] are not the last ones: only a mean over trailing axes is supported");
    exact(reduce_mean({3, 4, 5}, {0, 2}, true),
          "ReduceMean: axes [0,2] of x [3,4,5] are not the last ones: only a mean over trailing axes is supported");
    exact(reduce_mean({3, 4}, {1, -1}, false), "ReduceMean: axes [1,-1] are not distinct axes of rank 2");
    exact(reduce_mean({3, 4}, {2}, false), "ReduceMean: axes [2] are not distinct axes of rank 2");
    OpRecord mean_shape = reduce_mean({3, 4}, {1}, false);
    mean_shape.outputs[0] = tensor({3, 1});
    exact(mean_shape, "ReduceMean: outputs[0] has shape [3,1], expected [3]");
    OpRecord mean_axes = reduce_mean({3, 4}, {1}, false);
    std::get<TensorDesc>(mean_axes.inputs[1]).const_data.reset();
    exact(mean_axes, "ReduceMean: axes input has no const_data: its values must be known when compiling");
    OpRecord noop = reduce_mean({3, 4}, {}, false);
    (*noop.attrs)[1].value = true;
    exact(noop, "ReduceMean: empty axes with noop_with_empty_axes: a copy, not a mean");
    OpRecord ls_axis = log_softmax({4, 5});
    (*ls_axis.attrs)[0].value = skc::Array{skc::Value(0)};
    exact(ls_axis, "LogSoftmaxV2: attr axes must name only the last axis");
    exact(make("LogSoftmaxGrad", {tensor({4, 5}), tensor({5, 4})}, {tensor({4, 5})}),
          "LogSoftmaxGrad: inputs have shapes [4,5] and [5,4]: they must be equal");
    exact(concat({tensor({2, 3}), tensor({3, 3})}, 1),
          "ConcatD: inputs[0][1] has shape [3,3], inputs[0][0] [2,3]: they must differ along concat_dim 1 only");
    exact(concat({tensor({2, 3}), tensor({2, 3, 1})}, 0),
          "ConcatD: inputs[0][1] has shape [2,3,1], inputs[0][0] [2,3]: they must differ along concat_dim 0 only");
    exact(concat({tensor({}), tensor({})}, 0), "ConcatD: inputs[0][0] is a scalar: concatenation needs rank 1 or more");
    exact(concat({tensor({2, 3}), tensor({2, 3})}, 2), "ConcatD: attr concat_dim 2 is out of range for rank 2");
    OpRecord cat_n = concat({tensor({2, 3}), tensor({2, 3})}, 0);
    (*cat_n.attrs)[1].value = 3;
    exact(cat_n, "ConcatD: attr N is 3 for a list of 2 tensors");
    OpRecord cat_half = concat({tensor({2, 3}), tensor({2, 3})}, 0);
    std::get<std::vector<TensorDesc>>(cat_half.inputs[0])[1].dtype = "float16";
    exact(cat_half, "ConcatD: inputs[0][1] has dtype float16: only float is supported");
    exact(make("ConcatD", {tensor({2, 3})}, {tensor({2, 3})}, {attr("concat_dim", "int", 0)}),
          "ConcatD: inputs[0] is not a dynamic (list) parameter");
    OpRecord sel_float = select({4}, {4}, {4});
    std::get<TensorDesc>(sel_float.inputs[0]).dtype = "float";
    exact(sel_float, "SelectV2: inputs[0] has dtype float: only bool is supported");
    exact(make("SelectV2", {tensor({2}, "bool"), tensor({3}), tensor({3})}, {tensor({3})}),
          "SelectV2: shapes [2] and [3] and [3] do not broadcast");
    exact(make("MaskedFill", {tensor({4}), tensor({4}, "bool"), tensor({2})}, {tensor({4})}),
          "MaskedFill: value (inputs[2]) has shape [2]: only one value is supported");
    exact(make("MaskedFill", {tensor({4}), tensor({4}, "bool"), tensor({})}, {tensor({1, 4})}),
          "MaskedFill: outputs[0] has shape [1,4], expected [4]");
    OpRecord mask_view = masked_fill({4}, {4});
    std::get<TensorDesc>(mask_view.inputs[1]) = view({4}, {2});
    std::get<TensorDesc>(mask_view.inputs[1]).dtype = "bool";
    exact(mask_view, "MaskedFill: inputs[1] is a view: only dense tensors are supported");

    // The example files the host kernels do not cover are reported, not compiled.
    int skipped = 0;
    for (const auto& e : fs::directory_iterator(skc_test::example_ops_dir())) {
        const OpRecord r = skc::read_op_info(e.path());
        if (skc_host::supported(r)) continue;
        ++skipped;
        CHECK_FALSE(skc_host::generate_kernel(r, "k").has_value());
        CHECK(skc_host::unsupported_reason(r).rfind(r.op_type + ": ", 0) == 0);
        MESSAGE("skipped " << e.path().filename().string() << ": " << skc_host::unsupported_reason(r));
    }
    CHECK(skipped == 2);  // GatherV2, ReduceSum
}

TEST_CASE("generated source: constants, not run-time shape arithmetic") {
    const std::string s = skc_host::generate_kernel(matmul(7, 33, 5, false, true), "mm").value();
    CHECK(s.find("extern \"C\" void mm(const float* const* inputs, float* const* outputs)") != std::string::npos);
    CHECK(s.find("constexpr idx M = 7, K = 33, N = 5;") != std::string::npos);
    const std::string t = skc_host::generate_kernel(transpose({2, 3}, {1, 0}), "tr").value();
    CHECK(t.find("inputs[1]") == std::string::npos);  // the perm is baked in
    CHECK(t.find("i0 < 3") != std::string::npos);
    const std::string l = skc_host::generate_kernel(layer_norm({2, 3}, false, 1e-5), "ln").value();
    CHECK(l.find("outputs[1]") == std::string::npos);
    // A view's strides are constants too; the bias and the activation are in the source.
    const OpRecord fused =
        mm("FusedMatMul", view({9, 13}, {1, 12}), tensor({11, 9}), true, true, RuntimeShape{11}, "gelu_erf");
    const std::string v = skc_host::generate_kernel(fused, "fused", skc_host::target_for("x86-64-v4")).value();
    CHECK(v.find("constexpr idx SAM = 12, SAK = 1, SBK = 1, SBN = 9;") != std::string::npos);
    CHECK(v.find("__builtin_memcpy(bt, bias + j0, 11 * sizeof(float));") != std::string::npos);  // 11 of 16 lanes
    CHECK(v.find("acc[0] = acc[0] + bias0 + vf{};") != std::string::npos);  // then + 0: no -0.0 sum
    CHECK(v.find("vgelu_erf_tile(t, 0, 1, 16);") != std::string::npos);     // after the sums
    // The target's vector width: 16, 8 and 4 floats.
    CHECK(v.find("vector_size(64)") != std::string::npos);
    CHECK(skc_host::generate_kernel(fused, "f", skc_host::target_for("x86-64-v3")).value().find("vector_size(32)") !=
          std::string::npos);
    CHECK(skc_host::generate_kernel(fused, "f", skc_host::target_for("x86-64")).value().find("vector_size(16)") !=
          std::string::npos);
    const OpRecord bmm_views =
        mm("BatchMatMulV2", view({3, 5, 4}, {4, 12, 1}), view({1, 4, 5}, {7, 1, 4}), false, false);
    const std::string bm = skc_host::generate_kernel(bmm_views, "bmm").value();
    CHECK(bm.find("inputs[0] + t * 4;") != std::string::npos);
    CHECK(bm.find("const float* __restrict B = inputs[1];") != std::string::npos);  // batch 1: broadcast
    // A broadcast: one loop of constant count per merged dim, the broadcast operand read once a
    // run, the operands in their order (x1 - x2), and a copy of the loops reading x2 through y.
    const std::string sub = skc_host::generate_kernel(binary("Sub", {2, 5, 1}, {2, 5, 37}, {2, 5, 37}), "sub").value();
    CHECK(sub.find("for (idx i0 = 0; i0 < 10; ++i0)") != std::string::npos);
    CHECK(sub.find("const float sa = x1[i0];") != std::string::npos);
    CHECK(sub.find("for (idx i = 0; i < 37; ++i) y[i0 * 37 + i] = sa - x2[i0 * 37 + i];") != std::string::npos);
    CHECK(sub.find("if (x2 == y)") != std::string::npos);
    CHECK(sub.find("x1 == y") == std::string::npos);  // x1 is not of y's shape: never y
    const std::string outer = skc_host::generate_kernel(binary("Add", {8, 1}, {1, 16}, {8, 16}), "outer").value();
    CHECK(outer.find("y[i0 * 16 + i] = sa + x2[i];") != std::string::npos);
    CHECK(outer.find("== y") == std::string::npos);  // neither operand has y's shape
    // ConcatD writes y in order: per outer index each input's run, in vectors; ReduceMean divides
    // once by the count; a MaskedFill whose mask is broadcast along the last dim tests it once a run
    // and reads the value once; in place, a run left as it is is not copied onto itself.
    const std::string cat = skc_host::generate_kernel(concat({tensor({2, 16, 64}), tensor({2, 16, 64})}, 2), "cat",
                                                      skc_host::target_for("x86-64-v4"))
                                .value();
    CHECK(cat.find("for (idx o0 = 0; o0 < 32; ++o0)") != std::string::npos);
    CHECK(cat.find("const float* __restrict x = inputs[1] + o0 * 64;") != std::string::npos);
    CHECK(cat.find("float* __restrict yr = y + o0 * 128 + 64;") != std::string::npos);
    CHECK(cat.find("for (idx i = 0; i < 64; i += W) vstore(yr + i, vload(xr + i));") != std::string::npos);
    const std::string mean = skc_host::generate_kernel(reduce_mean({7, 33}, {-1}, false), "mean").value();
    CHECK(mean.find("y[r] = sum / static_cast<float>(33.0);") != std::string::npos);
    const std::string mf = skc_host::generate_kernel(masked_fill({2, 5, 7}, {2, 5, 1}), "mf").value();
    CHECK(mf.find("const float sa = a[0];") != std::string::npos);
    CHECK(mf.find("if (c[i0] != 0)") != std::string::npos);
    CHECK(mf.find("y[i0 * 7 + i] = y[i0 * 7 + i]") == std::string::npos);
    CHECK(mf.find("y[i0 * 7 + i] = b[i0 * 7 + i]") != std::string::npos);
    // The kernels that may run in place promise no __restrict.
    for (const OpRecord& op :
         {binary("Add", {4, 5}, {5}, {4, 5}), binary("Mul", {4, 5}, {}, {4, 5}),
          binary("RealDiv", {4, 1}, {4, 5}, {4, 5}), unary("Relu", {4}), unary("Tanh", {4}), unary("Rsqrt", {4}),
          power({4}, 2.0), gelu({4}, "none"), softmax({2, 40}), masked_fill({2, 4}, {4}), masked_fill({3, 1}, {3, 1})})
        CHECK(skc_host::generate_kernel(op, "k").value().find("__restrict") == std::string::npos);
}

}  // namespace examples_host_kernels_test
