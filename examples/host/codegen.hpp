// examples/host/codegen.hpp: shape-specialised C++ source for one recorded op.
//
// generate_kernel(op, symbol) returns a self-contained C++ translation unit (it includes only
// <cmath> and <cstddef>) defining
//
//     extern "C" void <symbol>(const float* const* inputs, float* const* outputs);
//
// with the pointer convention of plan.hpp. Every size is a constexpr constant and every loop has a
// compile-time trip count, so the compiler can unroll and vectorise; there is no run-time shape
// arithmetic. The loop nests and the order of the floating-point operations are those of the
// generic kernels in kernels.hpp, so the two agree to rounding (bit for bit with the same flags).
// The source compiles warning-free with `c++ -std=c++17 -O2 -fPIC -Wall -Wextra -Wpedantic`, and
// several sources can be concatenated into one translation unit (everything but the includes is
// inside the function).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
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
        line(s + " {");
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

inline void emit_matmul_body(Src& s, bool ta, bool tb) {
    const std::string a_elem = ta ? "A[p * M + i]" : "A[i * K + p]";
    if (!tb) {
        s.loop("i", "0", "M");
        s.line("float* __restrict crow = C + i * N;");
        s.line("for (idx j = 0; j < N; ++j) crow[j] = 0.0f;");
        s.loop("p", "0", "K");
        s.line("const float av = " + a_elem + ";");
        s.line("const float* __restrict brow = B + p * N;");
        s.line("for (idx j = 0; j < N; ++j) crow[j] += av * brow[j];");
        s.close().close();
    } else {
        s.loop("i", "0", "M").loop("j", "0", "N");
        s.line("const float* __restrict brow = B + j * K;");
        s.line("float s = 0.0f;");
        if (!ta) {
            s.line("const float* __restrict arow = A + i * K;");
            s.line("for (idx p = 0; p < K; ++p) s += arow[p] * brow[p];");
        } else {
            s.line("for (idx p = 0; p < K; ++p) s += A[p * M + i] * brow[p];");
        }
        s.line("C[i * N + j] = s;");
        s.close().close();
    }
}

inline void emit(Src& s, const MatMulPlan& p) {
    s.line("constexpr idx M = " + n(p.m) + ", K = " + n(p.k) + ", N = " + n(p.n) + ";");
    if (p.batch == 1) {
        s.line("const float* __restrict A = inputs[0];");
        s.line("const float* __restrict B = inputs[1];");
        s.line("float* __restrict C = outputs[0];");
        emit_matmul_body(s, p.ta, p.tb);
        return;
    }
    s.line("constexpr idx BATCH = " + n(p.batch) + ";");
    s.loop("t", "0", "BATCH");
    s.line(std::string("const float* __restrict A = inputs[0]") + (p.a_batch == 1 ? "" : " + t * (M * K)") + ";");
    s.line(std::string("const float* __restrict B = inputs[1]") + (p.b_batch == 1 ? "" : " + t * (K * N)") + ";");
    s.line("float* __restrict C = outputs[0] + t * (M * N);");
    emit_matmul_body(s, p.ta, p.tb);
    s.close();
}

inline void emit(Src& s, const BinaryPlan& p) {
    const char* op = p.kind == BinaryKind::add ? " + " : " * ";
    s.line("const float* __restrict full = inputs[" + n(static_cast<std::int64_t>(p.full)) + "];");
    s.line("const float* __restrict rep = inputs[" + n(static_cast<std::int64_t>(p.rep)) + "];");
    s.line("float* __restrict y = outputs[0];");
    if (p.inner == 1) {
        s.line("constexpr idx NUM = " + n(p.outer) + ";");
        s.line("const float s = rep[0];");
        s.line(std::string("for (idx i = 0; i < NUM; ++i) y[i] = full[i]") + op + "s;");
        return;
    }
    s.line("constexpr idx OUTER = " + n(p.outer) + ", INNER = " + n(p.inner) + ";");
    s.loop("o", "0", "OUTER");
    s.line(std::string("for (idx i = 0; i < INNER; ++i) y[o * INNER + i] = full[o * INNER + i]") + op + "rep[i];");
    s.close();
}

inline void emit(Src& s, const UnaryPlan& p) {
    s.line("constexpr idx NUM = " + n(p.n) + ";");
    s.line("const float* __restrict x = inputs[0];");
    s.line("float* __restrict y = outputs[0];");
    if (p.kind == UnaryKind::relu) {
        s.line("for (idx i = 0; i < NUM; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;");
    } else {
        s.line("// GELU, tanh approximation.");
        s.loop("i", "0", "NUM");
        s.line("const float v = x[i];");
        s.line("y[i] = 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));");
        s.close();
    }
}

inline void emit(Src& s, const SoftmaxPlan& p) {
    s.line("constexpr idx ROWS = " + n(p.rows) + ", COLS = " + n(p.cols) + ";");
    s.loop("r", "0", "ROWS");
    s.line("const float* __restrict xr = inputs[0] + r * COLS;");
    s.line("float* __restrict yr = outputs[0] + r * COLS;");
    s.line("float mx = xr[0];");
    s.line("for (idx c = 1; c < COLS; ++c) mx = xr[c] > mx ? xr[c] : mx;");
    s.line("float sum = 0.0f;");
    s.loop("c", "0", "COLS");
    s.line("const float e = std::exp(xr[c] - mx);");
    s.line("yr[c] = e;");
    s.line("sum += e;");
    s.close();
    s.line("for (idx c = 0; c < COLS; ++c) yr[c] = yr[c] / sum;");
    s.close();
}

inline void emit(Src& s, const LayerNormPlan& p) {
    s.line("constexpr idx ROWS = " + n(p.rows) + ", COLS = " + n(p.cols) + ";");
    s.line("const float eps = " + float_literal(p.epsilon) + ";");
    s.line("const float* __restrict gamma = inputs[1];");
    s.line("const float* __restrict beta = inputs[2];");
    if (p.mean_out) s.line("float* __restrict mean = outputs[1];");
    if (p.var_out) s.line("float* __restrict var = outputs[2];");
    s.loop("r", "0", "ROWS");
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
    s.close();
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
    bool any_loop = false;
    for (std::int64_t d : dims) any_loop = any_loop || d != 1;
    if (any_loop) s.line("using idx = std::ptrdiff_t;");
    s.line("const float* __restrict x = inputs[0];");
    s.line("float* __restrict y = outputs[0];");
    // Output dims in order, the last innermost; dims of size 1 need no loop.
    std::string yi, xi;
    int opened = 0;
    for (std::size_t i = 0; i < r; ++i) {
        if (dims[i] == 1) continue;
        const std::string v = "i" + std::to_string(i);
        s.loop(v, "0", n(dims[i]));
        ++opened;
        yi += (yi.empty() ? "" : " + ") + v + " * " + n(out_stride[i]);
        xi += (xi.empty() ? "" : " + ") + v + " * " + n(stride[i]);
    }
    s.line("y[" + (yi.empty() ? std::string("0") : yi) + "] = x[" + (xi.empty() ? std::string("0") : xi) + "];");
    for (int i = 0; i < opened; ++i) s.close();
}

inline std::string describe(const skc::OpRecord& op) {
    std::string d = op.op_type;
    for (const skc::TensorSlot& slot : op.inputs)
        if (const auto* t = std::get_if<skc::TensorDesc>(&slot)) d += " " + dims_str(t->shape);
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
    s.line("");
    s.open("extern \"C\" void " + std::string(symbol) + "(const float* const* inputs, float* const* outputs)");
    if (!std::holds_alternative<TransposePlan>(*a.plan)) s.line("using idx = std::ptrdiff_t;");
    std::visit([&](const auto& p) { detail::emit(s, p); }, *a.plan);
    s.close();
    return s.str();
}

}  // namespace skc_host
