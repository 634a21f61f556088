// examples/host/codegen.hpp: shape-specialised C++ source for one recorded op.
//
// generate_kernel(op, symbol) returns a self-contained C++ translation unit (it includes only
// <cmath>, <cstddef> and <cstring>) defining
//
//     extern "C" void <symbol>(const float* const* inputs, float* const* outputs);
//
// with the pointer convention of plan.hpp. Every size is a constexpr constant and every loop has a
// compile-time trip count, so the compiler can unroll and vectorise; there is no run-time shape
// arithmetic. Where the sizes make it pay, the generator also chooses a loop structure the generic
// kernels (kernels.hpp) cannot know in advance:
//   - MatMul / BatchMatMul / FusedMatMul: C in register tiles of 6 x 8 (GCC/Clang vector
//     extensions, four floats a vector), over a contiguous copy of an 8-column panel of B, gathered
//     through B's strides (also for a transposed or strided B, whose generic kernel is a chain of
//     dependent additions per element); A is read through its strides, all of them constants;
//     the bias and the activation are applied to a tile once its sums are complete;
//   - LayerNorm: 8 rows reduced together (8 independent chains of additions);
//   - SoftmaxV2: the row maximum in 8 lanes;
//   - Transpose: 8 x 8 tiles when the last output dim is read with a stride.
// Add, Mul, Relu, Gelu and SoftmaxV2 take no __restrict pointers: like their generic twins they
// may run in place (plan.hpp), each element read before the same index is written.
// None of these changes which floating-point operations are done or their order for any output
// element (each sum still runs over its terms in order from 0; max does not round; copies are
// copies), so with the same compiler flags a generated kernel agrees with its generic twin bit for
// bit (checked by tests/examples/host_kernels_test.cpp and benchmarks/host_kernels_bench.cpp).
// The source compiles warning-free with `c++ -std=c++17 -O2 -fPIC -Wall -Wextra -Wpedantic`, and
// several sources can be concatenated into one translation unit (everything but the includes is
// inside the function).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "plan.hpp"

namespace skc_host {

namespace detail {

inline bool is_identifier(std::string_view s) {
    if (s.empty() || s.size() > 200) return false;
    for (std::size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
    }
    return true;
}

/// A float as a C++ expression that evaluates to exactly that float.
inline std::string float_literal(float f) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", static_cast<double>(f));
    std::string s = buf;
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return "static_cast<float>(" + s + ")";
}

/// Source lines with indentation.
class Src {
public:
    Src& line(const std::string& s) {
        out_.append(static_cast<std::size_t>(depth_) * 4, ' ');
        out_ += s;
        out_ += '\n';
        return *this;
    }
    Src& open(const std::string& s) {
        line(s.empty() ? "{" : s + " {");
        ++depth_;
        return *this;
    }
    Src& close() {
        --depth_;
        return line("}");
    }
    Src& loop(const std::string& var, const std::string& from, const std::string& to) {
        return open("for (idx " + var + " = " + from + "; " + var + " < " + to + "; ++" + var + ")");
    }
    [[nodiscard]] std::string str() const { return out_; }

private:
    std::string out_;
    int depth_ = 0;
};

inline std::string n(std::int64_t v) { return std::to_string(v); }

/// The activation `k` of the float named `v`, as kernels.hpp's relu1, gelu_tanh1 and gelu_erf1
/// compute it.
inline std::string act_expr(UnaryKind k, const std::string& v) {
    switch (k) {
    case UnaryKind::relu: return v + " > 0.0f ? " + v + " : 0.0f";
    case UnaryKind::gelu_tanh:
        return "0.5f * " + v + " * (1.0f + std::tanh(0.7978845608f * (" + v + " + 0.044715f * " + v + " * " + v +
               " * " + v + ")))";
    case UnaryKind::gelu_erf: return "0.5f * " + v + " * (1.0f + std::erf(" + v + " * 0.70710678118654752f))";
    }
    return v;
}

inline bool has_epilogue(const MatMulPlan& p) { return p.bias || p.activation.has_value(); }

/// `dest = act(value + bias[col])`, with the parts the plan has, as kernels::Epilogue computes it.
/// With an activation it declares `v`: the caller gives it a scope (a loop body).
inline void emit_epilogue(Src& s, const MatMulPlan& p, const std::string& dest, const std::string& value,
                          const std::string& col) {
    const std::string v = p.bias ? value + " + bias[" + col + "]" : value;
    if (!p.activation) {
        s.line(dest + " = " + v + ";");
        return;
    }
    s.line("const float v = " + v + ";");
    s.line(dest + " = " + act_expr(*p.activation, "v") + ";");
}

/// The operand strides as constants (the ones `names` lists: SAM, SAK, SBK, SBN).
inline void emit_strides(Src& s, const MatMulPlan& p, std::initializer_list<std::string_view> names) {
    std::string line;
    for (std::string_view name : names) {
        const std::int64_t v = name == "SAM" ? p.a.outer : name == "SAK" ? p.a.k : name == "SBK" ? p.b.k : p.b.outer;
        line += (line.empty() ? "constexpr idx " : ", ") + std::string(name) + " = " + n(v);
    }
    s.line(line + ";");
}

/// The generic kernel's loop nest (kernels::matmul) with constant sizes and strides: used where
/// register tiles do not pay (fewer than `tile_rows` rows with contiguous rows of op(B), or a
/// panel too large for the stack).
inline void emit_matmul_plain(Src& s, const MatMulPlan& p) {
    if (p.b.outer == 1) {
        emit_strides(s, p, {"SAM", "SAK", "SBK"});
        s.loop("i", "0", "M");
        s.line("float* __restrict crow = C + i * N;");
        s.line("for (idx j = 0; j < N; ++j) crow[j] = 0.0f;");
        s.loop("p", "0", "K");
        s.line("const float av = A[i * SAM + p * SAK];");
        s.line("const float* __restrict brow = B + p * SBK;");
        s.line("for (idx j = 0; j < N; ++j) crow[j] += av * brow[j];");
        s.close();
        if (has_epilogue(p)) {
            s.loop("j", "0", "N");
            emit_epilogue(s, p, "crow[j]", "crow[j]", "j");
            s.close();
        }
        s.close();
    } else {
        emit_strides(s, p, {"SAM", "SAK", "SBK", "SBN"});
        s.loop("i", "0", "M").loop("j", "0", "N");
        s.line("const float* __restrict bcol = B + j * SBN;");
        s.line("float s = 0.0f;");
        s.line("for (idx p = 0; p < K; ++p) s += A[i * SAM + p * SAK] * bcol[p * SBK];");
        emit_epilogue(s, p, "C[i * N + j]", "s", "j");
        s.close().close();
    }
}

/// Register tiles of C: `tile_rows` rows by 8 columns, in 2 * tile_rows four-float vectors (GCC
/// and Clang vector extensions; 12 accumulators and 3 more registers fit the 16 of SSE2).
constexpr std::int64_t tile_rows = 6;
constexpr std::int64_t tile_cols = 8;
constexpr std::int64_t max_panel_k = 4096;  // the packed panel, K x 8 floats, lives on the stack

/// Tiles pay when a tile has its rows: when the rows of op(B) are not contiguous, always (the
/// generic kernel's dot products are one dependent chain of additions; a tile has 48 independent
/// ones), otherwise from `tile_rows` rows on (below, the generic loop nest, which streams B once,
/// is faster).
inline bool matmul_uses_tiles(const MatMulPlan& p) {
    return p.k <= max_panel_k && (p.b.outer != 1 || p.m >= tile_rows);
}

/// One tile of `rows` rows at row i0 and columns j0 .. j0 + cols (cols <= 8; the panel is padded).
inline void emit_matmul_tile(Src& s, const MatMulPlan& p, std::int64_t rows, std::int64_t cols) {
    s.open("");
    s.line("v4f acc[" + n(rows * 2) + "] = {};");
    s.loop("p", "0", "K");
    s.line("v4f b0, b1;");
    s.line("std::memcpy(&b0, bp + p * 8, sizeof b0);");
    s.line("std::memcpy(&b1, bp + p * 8 + 4, sizeof b1);");
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::string a = "a" + n(r);
        s.line("const float " + a + " = A[(i0 + " + n(r) + ") * SAM + p * SAK];");
        s.line("acc[" + n(2 * r) + "] += " + a + " * b0;");
        s.line("acc[" + n(2 * r + 1) + "] += " + a + " * b1;");
    }
    s.close();
    if (cols == tile_cols && !has_epilogue(p)) {
        for (std::int64_t r = 0; r < rows; ++r)
            s.line("std::memcpy(C + (i0 + " + n(r) + ") * N + j0, &acc[" + n(2 * r) + "], sizeof(v4f) * 2);");
    } else {
        s.open("for (idx r = 0; r < " + n(rows) + "; ++r)");
        s.line("float t[8];");
        s.line("std::memcpy(t, &acc[2 * r], sizeof t);");
        if (!has_epilogue(p)) {
            s.line("for (idx c = 0; c < " + n(cols) + "; ++c) C[(i0 + r) * N + j0 + c] = t[c];");
        } else {
            s.loop("c", "0", n(cols));
            emit_epilogue(s, p, "C[(i0 + r) * N + j0 + c]", "t[c]", "j0 + c");
            s.close();
        }
        s.close();
    }
    s.close();
}

/// C = op(A) op(B) for one batch, in register tiles. Every element of C is still the sum over
/// p = 0 .. K-1 in order, starting from 0, of one product each, then its bias and activation, as
/// in kernels::matmul: the tiles only change which elements are computed together, so the result
/// is bit for bit the same.
inline void emit_matmul_body(Src& s, const MatMulPlan& p) {
    if (!matmul_uses_tiles(p)) {
        emit_matmul_plain(s, p);
        return;
    }
    emit_strides(s, p, {"SAM", "SAK", "SBK", "SBN"});
    const std::int64_t full_rows = p.m - p.m % tile_rows, full_cols = p.n - p.n % tile_cols;
    auto column_block = [&](std::int64_t cols) {
        // The K x 8 panel of op(B) at column j0, zero-padded past `cols`, contiguous for the tiles.
        s.loop("p", "0", "K");
        if (cols < tile_cols) s.line("for (idx c = " + n(cols) + "; c < 8; ++c) bp[p * 8 + c] = 0.0f;");
        s.line("for (idx c = 0; c < " + n(cols) + "; ++c) bp[p * 8 + c] = B[p * SBK + (j0 + c) * SBN];");
        s.close();
        if (full_rows > 0) {
            s.open("for (idx i0 = 0; i0 < M - M % " + n(tile_rows) + "; i0 += " + n(tile_rows) + ")");
            emit_matmul_tile(s, p, tile_rows, cols);
            s.close();
        }
        if (p.m % tile_rows != 0) {
            s.open("");
            s.line("constexpr idx i0 = M - M % " + n(tile_rows) + ";");
            emit_matmul_tile(s, p, p.m % tile_rows, cols);
            s.close();
        }
    };
    s.line("alignas(16) float bp[K * 8];");
    if (full_cols > 0) {
        s.open("for (idx j0 = 0; j0 < N - N % " + n(tile_cols) + "; j0 += " + n(tile_cols) + ")");
        column_block(tile_cols);
        s.close();
    }
    if (p.n % tile_cols != 0) {
        s.open("");
        s.line("constexpr idx j0 = N - N % " + n(tile_cols) + ";");
        column_block(p.n % tile_cols);
        s.close();
    }
}

inline void emit(Src& s, const MatMulPlan& p) {
    s.line("constexpr idx M = " + n(p.m) + ", K = " + n(p.k) + ", N = " + n(p.n) + ";");
    if (matmul_uses_tiles(p)) s.line("typedef float v4f __attribute__((vector_size(16)));");
    if (p.bias) s.line("const float* __restrict bias = inputs[2];");
    if (p.batch == 1) {
        s.line("const float* __restrict A = inputs[0];");
        s.line("const float* __restrict B = inputs[1];");
        s.line("float* __restrict C = outputs[0];");
        emit_matmul_body(s, p);
        return;
    }
    s.line("constexpr idx BATCH = " + n(p.batch) + ";");
    s.loop("t", "0", "BATCH");
    s.line("const float* __restrict A = inputs[0]" + (p.a.batch == 0 ? std::string() : " + t * " + n(p.a.batch)) + ";");
    s.line("const float* __restrict B = inputs[1]" + (p.b.batch == 0 ? std::string() : " + t * " + n(p.b.batch)) + ";");
    s.line("float* __restrict C = outputs[0] + t * (M * N);");
    emit_matmul_body(s, p);
    s.close();
}

/// Add / Mul; y may be full or rep (in place), hence no __restrict. In place (y == full) the loop
/// reads y itself, as kernels::broadcast_binary does, so that it vectorises without an overlap check.
inline void emit(Src& s, const BinaryPlan& p) {
    const char* op = p.kind == BinaryKind::add ? " + " : " * ";
    s.line("const float* full = inputs[" + n(static_cast<std::int64_t>(p.full)) + "];");
    s.line("const float* rep = inputs[" + n(static_cast<std::int64_t>(p.rep)) + "];");
    s.line("float* y = outputs[0];");
    if (p.inner == 1) {
        s.line("constexpr idx NUM = " + n(p.outer) + ";");
        s.line("const float s = rep[0];");
        s.open("if (full == y)");
        s.line(std::string("for (idx i = 0; i < NUM; ++i) y[i] = y[i]") + op + "s;");
        s.close().open("else");
        s.line(std::string("for (idx i = 0; i < NUM; ++i) y[i] = full[i]") + op + "s;");
        s.close();
        return;
    }
    s.line("constexpr idx OUTER = " + n(p.outer) + ", INNER = " + n(p.inner) + ";");
    for (const char* in : {"y", "full"}) {
        s.open(std::string(in) == "y" ? "if (full == y)" : "else");
        s.loop("o", "0", "OUTER");
        s.line(std::string("for (idx i = 0; i < INNER; ++i) y[o * INNER + i] = ") + in + "[o * INNER + i]" + op +
               "rep[i];");
        s.close().close();
    }
}

/// Relu / Gelu; y may be x (in place), hence no __restrict. Relu in place reads y itself (see the
/// binary ops); Gelu's loop calls std::tanh or std::erf and is not vectorised either way.
inline void emit(Src& s, const UnaryPlan& p) {
    s.line("constexpr idx NUM = " + n(p.n) + ";");
    s.line("const float* x = inputs[0];");
    s.line("float* y = outputs[0];");
    if (p.kind == UnaryKind::relu) {
        s.open("if (x == y)");
        s.line("for (idx i = 0; i < NUM; ++i) y[i] = " + act_expr(p.kind, "y[i]") + ";");
        s.close().open("else");
        s.line("for (idx i = 0; i < NUM; ++i) y[i] = " + act_expr(p.kind, "x[i]") + ";");
        s.close();
    } else {
        s.line(p.kind == UnaryKind::gelu_tanh ? "// GELU, tanh approximation." : "// GELU, erf form.");
        s.loop("i", "0", "NUM");
        s.line("const float v = x[i];");
        s.line("y[i] = " + act_expr(p.kind, "v") + ";");
        s.close();
    }
}

/// Rows of a LayerNorm reduced together, and lanes of a softmax row's maximum.
constexpr std::int64_t reduce_group = 8;

/// "<prefix>0, <prefix>1, ..." style helpers for the unrolled lanes.
inline std::string lane(const std::string& prefix, std::int64_t q) { return prefix + n(q); }

/// SoftmaxV2; y may be x (in place), hence no __restrict: every pass reads xr[c] before the exp
/// pass writes yr[c].
inline void emit(Src& s, const SoftmaxPlan& p) {
    s.line("constexpr idx ROWS = " + n(p.rows) + ", COLS = " + n(p.cols) + ";");
    s.loop("r", "0", "ROWS");
    s.line("const float* xr = inputs[0] + r * COLS;");
    s.line("float* yr = outputs[0] + r * COLS;");
    s.line("float mx = xr[0];");
    if (p.cols < 2 * reduce_group) {
        s.line("for (idx c = 1; c < COLS; ++c) mx = xr[c] > mx ? xr[c] : mx;");
    } else {
        // The maximum in 8 independent lanes (column c in lane c % 8), then the lanes in order.
        // Each step keeps the larger value, as the generic loop does; max does not round, so the
        // result is the generic one (a NaN in xr[0] stays, any other NaN is passed over in both).
        const std::int64_t g = reduce_group;
        std::string init;
        for (std::int64_t q = 0; q < g; ++q) init += (q ? ", " : "") + lane("m", q) + " = xr[0]";
        s.line("float " + init + ";");
        s.open("for (idx c = 0; c < COLS - COLS % " + n(g) + "; c += " + n(g) + ")");
        for (std::int64_t q = 0; q < g; ++q) {
            const std::string x = "xr[c + " + n(q) + "]", m = lane("m", q);
            s.line(m + " = " + x + " > " + m + " ? " + x + " : " + m + ";");
        }
        s.close();
        for (std::int64_t c = p.cols - p.cols % g; c < p.cols; ++c) {
            const std::string x = "xr[" + n(c) + "]", m = lane("m", c % g);
            s.line(m + " = " + x + " > " + m + " ? " + x + " : " + m + ";");
        }
        for (std::int64_t q = 0; q < g; ++q) s.line("mx = " + lane("m", q) + " > mx ? " + lane("m", q) + " : mx;");
    }
    s.line("float sum = 0.0f;");
    s.loop("c", "0", "COLS");
    s.line("const float e = std::exp(xr[c] - mx);");
    s.line("yr[c] = e;");
    s.line("sum += e;");
    s.close();
    s.line("for (idx c = 0; c < COLS; ++c) yr[c] = yr[c] / sum;");
    s.close();
}

/// One LayerNorm row at a time: the generic kernel's loop nest.
inline void emit_layer_norm_row(Src& s, const LayerNormPlan& p, const std::string& from) {
    s.loop("r", from, "ROWS");
    s.line("const float* __restrict xr = inputs[0] + r * COLS;");
    s.line("float* __restrict yr = outputs[0] + r * COLS;");
    s.line("float s = 0.0f;");
    s.line("for (idx c = 0; c < COLS; ++c) s += xr[c];");
    s.line("const float mu = s / static_cast<float>(COLS);");
    s.line("float s2 = 0.0f;");
    s.loop("c", "0", "COLS");
    s.line("const float d = xr[c] - mu;");
    s.line("s2 += d * d;");
    s.close();
    s.line("const float v = s2 / static_cast<float>(COLS);");
    s.line("const float rstd = 1.0f / std::sqrt(v + eps);");
    s.line("for (idx c = 0; c < COLS; ++c) yr[c] = (xr[c] - mu) * rstd * gamma[c] + beta[c];");
    if (p.mean_out) s.line("mean[r] = mu;");
    if (p.var_out) s.line("var[r] = v;");
    if (p.rstd_out) s.line("rstd_out[r] = rstd;");
    s.close();
}

inline void emit(Src& s, const LayerNormPlan& p) {
    s.line("constexpr idx ROWS = " + n(p.rows) + ", COLS = " + n(p.cols) + ";");
    s.line("const float eps = " + float_literal(p.epsilon) + ";");
    s.line("const float* __restrict gamma = inputs[1];");
    s.line("const float* __restrict beta = inputs[2];");
    if (p.mean_out) s.line("float* __restrict mean = outputs[1];");
    if (p.var_out) s.line("float* __restrict var = outputs[2];");
    if (p.rstd_out) s.line("float* __restrict rstd_out = outputs[2];");
    const std::int64_t g = reduce_group;
    if (p.rows < g) {
        emit_layer_norm_row(s, p, "0");
        return;
    }
    // Rows in groups of 8: each row's two sums are still one sequential sum from 0 (as in the
    // generic kernel, so the results are the same bit for bit), but the 8 rows' sums are
    // independent chains of additions that the CPU overlaps.
    auto each = [&](const std::string& text) {  // `text` with every '#' replaced by the lane number
        for (std::int64_t q = 0; q < g; ++q) {
            std::string t;
            for (char ch : text) t += ch == '#' ? n(q) : std::string(1, ch);
            s.line(t);
        }
    };
    s.open("for (idx r0 = 0; r0 < ROWS - ROWS % " + n(g) + "; r0 += " + n(g) + ")");
    each("const float* __restrict x# = inputs[0] + (r0 + #) * COLS;");
    each("float s# = 0.0f;");
    s.open("for (idx c = 0; c < COLS; ++c)");
    each("s# += x#[c];");
    s.close();
    each("const float mu# = s# / static_cast<float>(COLS);");
    each("float q# = 0.0f;");
    s.open("for (idx c = 0; c < COLS; ++c)");
    each("const float d# = x#[c] - mu#;");
    each("q# += d# * d#;");
    s.close();
    each("const float v# = q# / static_cast<float>(COLS);");
    each("const float rstd# = 1.0f / std::sqrt(v# + eps);");
    for (std::int64_t q = 0; q < g; ++q) {
        const std::string k = n(q);
        s.open("");
        s.line("float* __restrict y = outputs[0] + (r0 + " + k + ") * COLS;");
        s.line("for (idx c = 0; c < COLS; ++c) y[c] = (x" + k + "[c] - mu" + k + ") * rstd" + k +
               " * gamma[c] + beta[c];");
        s.close();
    }
    if (p.mean_out) each("mean[r0 + #] = mu#;");
    if (p.var_out) each("var[r0 + #] = v#;");
    if (p.rstd_out) each("rstd_out[r0 + #] = rstd#;");
    s.close();
    if (p.rows % g != 0) emit_layer_norm_row(s, p, "ROWS - ROWS % " + n(g));
}

inline void emit(Src& s, const TransposePlan& p) {
    const std::size_t r = p.in_dims.size();
    std::vector<std::int64_t> in_stride(r), dims(r), stride(r), out_stride(r);
    std::int64_t acc = 1;
    for (std::size_t i = r; i-- > 0;) {
        in_stride[i] = acc;
        acc *= p.in_dims[i];
    }
    for (std::size_t i = 0; i < r; ++i) {
        dims[i] = p.in_dims[static_cast<std::size_t>(p.perm[i])];
        stride[i] = in_stride[static_cast<std::size_t>(p.perm[i])];
    }
    acc = 1;
    for (std::size_t i = r; i-- > 0;) {
        out_stride[i] = acc;
        acc *= dims[i];
    }
    // When the last output dim is read with a stride and another output dim k is the input's
    // contiguous one, the two are copied in 8 x 8 tiles: the 8 input lines a tile reads serve 8
    // output rows before they leave the cache. Only the order of the copies changes.
    constexpr std::int64_t tile = 8;
    std::size_t k = r;  // the tiled partner of the last dim, or r for none
    if (r >= 2 && stride[r - 1] != 1 && dims[r - 1] % tile == 0)
        for (std::size_t i = 0; i + 1 < r; ++i)
            if (stride[i] == 1 && dims[i] % tile == 0) k = i;
    bool any_loop = false;
    for (std::int64_t d : dims) any_loop = any_loop || d != 1;
    if (any_loop) s.line("using idx = std::ptrdiff_t;");
    s.line("const float* __restrict x = inputs[0];");
    s.line("float* __restrict y = outputs[0];");
    // Output dims in order, the last innermost (the tiled pair last); dims of size 1 need no loop.
    std::string yi, xi;
    int opened = 0;
    auto index = [&](const std::string& v, std::size_t i) {
        yi += (yi.empty() ? "" : " + ") + v + " * " + n(out_stride[i]);
        xi += (xi.empty() ? "" : " + ") + v + " * " + n(stride[i]);
    };
    for (std::size_t i = 0; i < r; ++i) {
        if (dims[i] == 1 || (k < r && (i == k || i == r - 1))) continue;
        const std::string v = "i" + std::to_string(i);
        s.loop(v, "0", n(dims[i]));
        ++opened;
        index(v, i);
    }
    if (k < r) {
        const std::string vk = "i" + std::to_string(k), vl = "i" + std::to_string(r - 1);
        s.open("for (idx " + vk + "b = 0; " + vk + "b < " + n(dims[k]) + "; " + vk + "b += " + n(tile) + ")");
        s.open("for (idx " + vl + "b = 0; " + vl + "b < " + n(dims[r - 1]) + "; " + vl + "b += " + n(tile) + ")");
        s.loop(vk, vk + "b", vk + "b + " + n(tile));
        s.loop(vl, vl + "b", vl + "b + " + n(tile));
        opened += 4;
        index(vk, k);
        index(vl, r - 1);
    }
    s.line("y[" + (yi.empty() ? std::string("0") : yi) + "] = x[" + (xi.empty() ? std::string("0") : xi) + "];");
    for (int i = 0; i < opened; ++i) s.close();
}

inline std::string describe(const skc::OpRecord& op) {
    std::string d = op.op_type;
    for (const skc::TensorSlot& slot : op.inputs)
        if (const auto* t = std::get_if<skc::TensorDesc>(&slot)) {
            d += " " + dims_str(t->shape);
            if (t->is_view.value_or(false) && t->stride) d += " (stride " + dims_str(*t->stride) + ")";
        }
    d += " ->";
    for (const skc::TensorSlot& slot : op.outputs)
        if (const auto* t = std::get_if<skc::TensorDesc>(&slot)) d += " " + dims_str(t->shape);
    return d;
}

}  // namespace detail

/// Whether generate_kernel() supports `op`.
inline bool supported(const skc::OpRecord& op) { return analyze(op).plan.has_value(); }

/// Why `op` is not supported ("" when it is), for listing skipped ops.
inline std::string unsupported_reason(const skc::OpRecord& op) { return analyze(op).reason; }

/// Source of `extern "C" void <symbol>(const float* const* inputs, float* const* outputs)` for the
/// exact shapes and attrs of `op`, or nullopt when the op is not supported. Throws
/// std::invalid_argument when `symbol` is not a C identifier.
inline std::optional<std::string> generate_kernel(const skc::OpRecord& op, std::string_view symbol) {
    if (!detail::is_identifier(symbol))
        throw std::invalid_argument("kernel symbol \"" + std::string(symbol) + "\" is not a C identifier");
    const Analysis a = analyze(op);
    if (!a.plan) return std::nullopt;
    detail::Src s;
    s.line("// " + std::string(symbol) + ": " + detail::describe(op) + " (generated by skc examples/host/codegen.hpp)");
    s.line("#include <cmath>");
    s.line("#include <cstddef>");
    s.line("#include <cstring>");
    s.line("");
    s.open("extern \"C\" void " + std::string(symbol) + "(const float* const* inputs, float* const* outputs)");
    if (!std::holds_alternative<TransposePlan>(*a.plan)) s.line("using idx = std::ptrdiff_t;");
    std::visit([&](const auto& p) { detail::emit(s, p); }, *a.plan);
    s.close();
    return s.str();
}

}  // namespace skc_host
