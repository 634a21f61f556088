// examples/host/dispatch.hpp: runs a recorded op with the shape-generic host kernels.
//
// run_generic() is the fallback when no shape-specialised kernel was compiled for an op, and the
// reference the generated kernels are tested against. Pointers follow the convention of plan.hpp:
// inputs[i] / outputs[i] are the data of input / output slot i.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <variant>
#include <vector>

#include "kernels.hpp"
#include "plan.hpp"

namespace skc_host {

namespace detail {

template <class Epi>
void run_matmul(const MatMulPlan& p, const float* a, const float* b, float* c, Epi epi) {
    kernels::batch_matmul(a, b, c, p.batch, p.m, p.k, p.n, p.a.batch, p.a.outer, p.a.k, p.b.batch, p.b.k, p.b.outer,
                          epi);
}

/// The matmul with its epilogue: none, the bias alone, or the activation after the bias if any.
inline void run_matmul(const MatMulPlan& p, const float* const* inputs, float* const* outputs) {
    namespace k = kernels;
    const float* bias = p.bias ? inputs[2] : nullptr;
    if (!p.activation) {
        if (bias == nullptr) run_matmul(p, inputs[0], inputs[1], outputs[0], k::NoEpilogue{});
        else run_matmul(p, inputs[0], inputs[1], outputs[0], k::Epilogue<k::identity1>{bias});
        return;
    }
    switch (*p.activation) {
    case UnaryKind::relu: run_matmul(p, inputs[0], inputs[1], outputs[0], k::Epilogue<k::relu1>{bias}); return;
    case UnaryKind::gelu_tanh:
        run_matmul(p, inputs[0], inputs[1], outputs[0], k::Epilogue<k::gelu_tanh1>{bias});
        return;
    case UnaryKind::gelu_erf: run_matmul(p, inputs[0], inputs[1], outputs[0], k::Epilogue<k::gelu_erf1>{bias}); return;
    default: throw std::logic_error("a matmul epilogue is relu, gelu_tanh or gelu_erf");  // plan.hpp's fused_op_type
    }
}

inline void run_binary(const BinaryPlan& p, const float* a, const float* b, float* y) {
    namespace k = kernels;
    switch (p.kind) {
    case BinaryKind::add:
        k::broadcast_binary(a, b, y, p.dims, p.a, p.b, [](float u, float v) { return u + v; });
        return;
    case BinaryKind::sub:
        k::broadcast_binary(a, b, y, p.dims, p.a, p.b, [](float u, float v) { return u - v; });
        return;
    case BinaryKind::mul:
        k::broadcast_binary(a, b, y, p.dims, p.a, p.b, [](float u, float v) { return u * v; });
        return;
    case BinaryKind::div:
        k::broadcast_binary(a, b, y, p.dims, p.a, p.b, [](float u, float v) { return u / v; });
        return;
    case BinaryKind::axpy:
        k::broadcast_binary(a, b, y, p.dims, p.a, p.b, [alpha = p.alpha](float u, float v) { return u + alpha * v; });
        return;
    }
}

/// y[i] = f(x[i]) for n contiguous elements, f of `kind`.
inline void run_unary_run(UnaryKind kind, const float* x, float* y, std::int64_t n) {
    namespace k = kernels;
    switch (kind) {
    case UnaryKind::relu: k::relu(x, y, n); return;
    case UnaryKind::gelu_tanh: k::gelu_tanh(x, y, n); return;
    case UnaryKind::gelu_erf: k::gelu_erf(x, y, n); return;
    case UnaryKind::neg: k::unary<k::neg1>(x, y, n); return;
    case UnaryKind::tanh: k::unary<k::tanh1>(x, y, n); return;
    case UnaryKind::rsqrt: k::unary<k::rsqrt1>(x, y, n); return;
    case UnaryKind::silu: k::unary<k::silu1>(x, y, n); return;
    case UnaryKind::square: k::unary<k::square1>(x, y, n); return;
    case UnaryKind::cube: k::unary<k::cube1>(x, y, n); return;
    case UnaryKind::sqrt: k::unary<k::sqrt1>(x, y, n); return;
    case UnaryKind::reciprocal: k::unary<k::reciprocal1>(x, y, n); return;
    case UnaryKind::inv_square: k::unary<k::inv_square1>(x, y, n); return;
    case UnaryKind::copy: k::unary<k::identity1>(x, y, n); return;
    case UnaryKind::one: k::unary<k::one1>(x, y, n); return;
    }
}

/// The unary op over x dense (one run) or a view (a run of its last dim at a time).
inline void run_unary(const UnaryPlan& p, const float* x, float* y) {
    if (p.dims.size() <= 1) {
        run_unary_run(p.kind, x, y, p.n);
        return;
    }
    kernels::for_each_run<1>(p.dims, {&p.x},
                             [&](std::int64_t out, const std::array<std::int64_t, 1>& off, std::int64_t n) {
                                 run_unary_run(p.kind, x + off[0], y + out, n);
                             });
}

inline void run_grad(const GradPlan& p, const float* dy, const float* x, float* dx) {
    namespace k = kernels;
    switch (p.kind) {
    case GradKind::relu: k::grad<k::relu_grad1>(dy, x, dx, p.n); return;
    case GradKind::gelu_erf: k::grad<k::gelu_erf_grad1>(dy, x, dx, p.n); return;
    case GradKind::gelu_tanh: k::grad<k::gelu_tanh_grad1>(dy, x, dx, p.n); return;
    case GradKind::silu: k::grad<k::silu_grad1>(dy, x, dx, p.n); return;
    }
}

/// ConcatD: for each index of the outer dims (an odometer), each input's slice copied in turn.
inline void run_concat(const ConcatPlan& p, const float* const* inputs, float* y) {
    const std::size_t r = p.outer.size();
    std::vector<std::int64_t> pos(r, 0), src(p.parts.size(), 0);
    std::int64_t dst = 0;
    for (;;) {
        for (std::size_t k = 0; k < p.parts.size(); ++k) {
            const ConcatPart& part = p.parts[k];
            kernels::strided_copy(inputs[k] + src[k], y + dst + part.offset, part.dims, part.src, part.dst);
        }
        std::size_t d = r;  // odometer over the outer dims
        for (;;) {
            if (d == 0) return;
            --d;
            dst += p.outer_dst[d];
            for (std::size_t k = 0; k < p.parts.size(); ++k) src[k] += p.parts[k].outer_src[d];
            if (++pos[d] < p.outer[d]) break;
            dst -= p.outer_dst[d] * p.outer[d];
            for (std::size_t k = 0; k < p.parts.size(); ++k) src[k] -= p.parts[k].outer_src[d] * p.outer[d];
            pos[d] = 0;
        }
    }
}

}  // namespace detail

/// Runs the plan of an analysed op.
inline void run_plan(const Plan& plan, const float* const* inputs, float* const* outputs) {
    namespace k = kernels;
    std::visit(
        [&](const auto& p) {
            using P = std::decay_t<decltype(p)>;
            if constexpr (std::is_same_v<P, MatMulPlan>) {
                detail::run_matmul(p, inputs, outputs);
            } else if constexpr (std::is_same_v<P, BinaryPlan>) {
                detail::run_binary(p, inputs[0], inputs[1], outputs[0]);
            } else if constexpr (std::is_same_v<P, UnaryPlan>) {
                detail::run_unary(p, inputs[0], outputs[0]);
            } else if constexpr (std::is_same_v<P, SoftmaxPlan>) {
                k::softmax(inputs[0], outputs[0], p.rows, p.cols);
            } else if constexpr (std::is_same_v<P, LayerNormPlan>) {
                k::layer_norm(inputs[0], inputs[1], inputs[2], outputs[0], p.mean_out ? outputs[1] : nullptr,
                              p.var_out ? outputs[2] : nullptr, p.rstd_out ? outputs[2] : nullptr, p.rows, p.cols,
                              p.epsilon);
            } else if constexpr (std::is_same_v<P, GradPlan>) {
                detail::run_grad(p, inputs[0], inputs[1], outputs[0]);
            } else if constexpr (std::is_same_v<P, SoftmaxGradPlan>) {
                k::softmax_grad(inputs[0], inputs[1], outputs[0], p.rows, p.cols);
            } else if constexpr (std::is_same_v<P, LayerNormGradPlan>) {
                k::layer_norm_grad(inputs[0], inputs[1], inputs[2], inputs[3], inputs[4], outputs[0], outputs[1],
                                   outputs[2], p.rows, p.cols);
            } else if constexpr (std::is_same_v<P, ReduceMeanPlan>) {
                k::reduce_mean(inputs[0], outputs[0], p.rows, p.cols);
            } else if constexpr (std::is_same_v<P, LogSoftmaxPlan>) {
                k::log_softmax(inputs[0], outputs[0], p.rows, p.cols);
            } else if constexpr (std::is_same_v<P, LogSoftmaxGradPlan>) {
                k::log_softmax_grad(inputs[0], inputs[1], outputs[0], p.rows, p.cols);
            } else if constexpr (std::is_same_v<P, ConcatPlan>) {
                detail::run_concat(p, inputs, outputs[0]);
            } else if constexpr (std::is_same_v<P, SelectPlan>) {
                // The condition's bytes, through the float pointer the calling convention gives (plan.hpp).
                const auto* c = reinterpret_cast<const unsigned char*>(inputs[p.c_slot]);
                k::select(c, inputs[p.a_slot], inputs[p.b_slot], outputs[0], p.dims, p.c, p.a, p.b);
            } else {
                static_assert(std::is_same_v<P, TransposePlan>);
                k::transpose(inputs[0], outputs[0], p.in_dims, p.perm);
            }
        },
        plan);
}

/// Runs `op` with the generic kernels. Throws std::invalid_argument with the reason when the op is
/// not supported.
inline void run_generic(const skc::OpRecord& op, const float* const* inputs, float* const* outputs) {
    const Analysis a = analyze(op);
    if (!a.plan) throw std::invalid_argument(a.reason);
    run_plan(*a.plan, inputs, outputs);
}

}  // namespace skc_host
