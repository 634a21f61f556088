// examples/host/kernels.hpp: shape-generic float kernels for the host (CPU) reference backend.
//
// Sizes are run-time arguments: these are the kernels a runtime falls back to when an op has no
// static kernel, built once for any CPU of the architecture. Every kernel here has a
// shape-specialised twin emitted by codegen.hpp that computes the same function (same formulas,
// same in-place rules) for one shape and one instruction set, faster; the two agree within
// codegen.hpp's generated_tolerance(). If you change what a kernel computes here, change the
// generator with it.
//
// Arrays are dense and row-major, except the matmul operands, read through element strides.
// Outputs do not overlap inputs (__restrict), except in the elementwise kernels (binary, unary,
// select) and softmax, whose output may be exactly an input of the same size (in place; see
// plan.hpp): they read every element before they write the same index, and take no __restrict
// pointers.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace skc_host::kernels {

using idx = std::ptrdiff_t;

/// The per-element activations (plan.hpp's UnaryKind), shared by the unary kernels and the
/// matmul epilogues.
inline float relu1(float v) { return v < 0.0f ? 0.0f : v; }  // NaN and -0.0 stay, as torch's relu
inline float gelu_tanh1(float v) { return 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v))); }
inline float gelu_erf1(float v) { return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f)); }
inline float identity1(float v) { return v; }
inline float neg1(float v) { return -v; }
inline float tanh1(float v) {  // +-1 above 8.664339742, as torch's (Sleef's) tanh
    return std::abs(v) > 8.664339742f ? std::copysign(1.0f, v) : std::tanh(v);
}
inline float rsqrt1(float v) { return 1.0f / std::sqrt(v); }       // as torch's: exact
inline float silu1(float v) { return v / (1.0f + std::exp(-v)); }  // torch's formula
inline float square1(float v) { return v * v; }                    // pow(v, 2), as torch's
inline float cube1(float v) { return v * v * v; }                  // pow(v, 3)
inline float sqrt1(float v) { return std::sqrt(v); }               // pow(v, 0.5)
inline float reciprocal1(float v) { return 1.0f / v; }             // pow(v, -1)
inline float inv_square1(float v) { return 1.0f / (v * v); }       // pow(v, -2)
inline float one1(float) { return 1.0f; }                          // pow(v, 0)

/// What a matmul does with an element of c once its sum is complete: nothing.
struct NoEpilogue {
    static constexpr bool active = false;
    float operator()(float v, std::ptrdiff_t) const { return v; }
};

/// ... or Act(v + bias[j]) (the bias only when not null), Act one of the functions above.
template <float (*Act)(float)>
struct Epilogue {
    static constexpr bool active = true;
    const float* bias = nullptr;
    float operator()(float v, std::ptrdiff_t j) const {
        if (bias != nullptr) v += bias[j];
        return Act(v);
    }
};

/// Rows of op(b) summed from zero before their sum is added to c (as the generated kernels read B
/// directly, codegen.hpp): the rounding error grows with k / matmul_kb + matmul_kb, not with k.
constexpr idx matmul_kb = 128;

/// Rows of op(b) in one group of blocks: where k is longer, the blocks of a group add up from zero
/// and each group's total is then added to c (two levels, so that c's partial sum does not round
/// each block's: the largest error at k = 16,384 about halves).
constexpr idx matmul_group = 2048;

/// c[m, n] = epi(op(a) * op(b)), c dense, op(a)[i, p] = a[i * sam + p * sak] and
/// op(b)[p, j] = b[p * sbk + j * sbn]. When the rows of op(b) are contiguous (sbn == 1) the loop
/// order is i-k-j (the inner loop runs along rows of b and c), otherwise i-j-k (a dot product).
/// Each c element sums over k ascending from 0, in blocks of matmul_kb each summed from zero and
/// then added (in groups of matmul_group rows, each group's total then added to c), then gets its
/// epilogue.
template <class Epi = NoEpilogue>
inline void matmul(const float* __restrict a, const float* __restrict b, float* __restrict c, idx m, idx k, idx n,
                   idx sam, idx sak, idx sbk, idx sbn, Epi epi = {}) {
    if (sbn == 1) {
        std::vector<float> block(static_cast<std::size_t>(2 * n));
        float* __restrict acc = block.data();
        float* __restrict group = acc + n;
        for (idx i = 0; i < m; ++i) {
            float* __restrict crow = c + i * n;
            for (idx j = 0; j < n; ++j) crow[j] = 0.0f;
            for (idx g0 = 0; g0 < k; g0 += matmul_group) {
                for (idx j = 0; j < n; ++j) group[j] = 0.0f;
                for (idx k0 = g0; k0 < std::min(k, g0 + matmul_group); k0 += matmul_kb) {
                    for (idx j = 0; j < n; ++j) acc[j] = 0.0f;
                    for (idx p = k0; p < std::min(k, k0 + matmul_kb); ++p) {
                        const float av = a[i * sam + p * sak];
                        const float* __restrict brow = b + p * sbk;
                        for (idx j = 0; j < n; ++j) acc[j] += av * brow[j];
                    }
                    for (idx j = 0; j < n; ++j) group[j] += acc[j];
                }
                for (idx j = 0; j < n; ++j) crow[j] += group[j];
            }
            if constexpr (Epi::active)
                for (idx j = 0; j < n; ++j) crow[j] = epi(crow[j], j);
        }
    } else {
        for (idx i = 0; i < m; ++i) {
            for (idx j = 0; j < n; ++j) {
                const float* __restrict bcol = b + j * sbn;
                float s = 0.0f;
                for (idx g0 = 0; g0 < k; g0 += matmul_group) {
                    float g = 0.0f;
                    for (idx k0 = g0; k0 < std::min(k, g0 + matmul_group); k0 += matmul_kb) {
                        const idx end = std::min(k, k0 + matmul_kb);
                        float t = 0.0f;
                        if (sak == 1 && sbk == 1) {
                            const float* __restrict arow = a + i * sam;
                            for (idx p = k0; p < end; ++p) t += arow[p] * bcol[p];
                        } else {
                            for (idx p = k0; p < end; ++p) t += a[i * sam + p * sak] * bcol[p * sbk];
                        }
                        g += t;
                    }
                    s += g;
                }
                c[i * n + j] = epi(s, j);
            }
        }
    }
}

/// Batched matmul: operand t of a batch starts at a + t * sab, b + t * sbb (a stride 0
/// broadcasts); c is dense [batch, m, n].
template <class Epi = NoEpilogue>
inline void batch_matmul(const float* __restrict a, const float* __restrict b, float* __restrict c, idx batch, idx m,
                         idx k, idx n, idx sab, idx sam, idx sak, idx sbb, idx sbk, idx sbn, Epi epi = {}) {
    for (idx t = 0; t < batch; ++t) matmul(a + t * sab, b + t * sbb, c + t * m * n, m, k, n, sam, sak, sbk, sbn, epi);
}

/// One run of a broadcast binary op: y[i] = op(a[i * ia], b[i * ib]) for n elements (ia and ib 0
/// or 1 for dense operands, any stride for a view). Where a (or b) is y itself (in place), the loop
/// reads y: an exact alias then needs no run-time overlap check to vectorise (Clang's check fails
/// for it and runs the scalar loop).
template <class Op>
inline void binary_run(const float* a, idx ia, const float* b, idx ib, float* y, idx n, Op op) {
    if (ia > 1 || ib > 1) {  // a view's strided run (never in place: y is dense)
        for (idx i = 0; i < n; ++i) y[i] = op(a[i * ia], b[i * ib]);
    } else if (ia == 1 && ib == 1) {
        if (a == y)
            for (idx i = 0; i < n; ++i) y[i] = op(y[i], b[i]);
        else if (b == y)
            for (idx i = 0; i < n; ++i) y[i] = op(a[i], y[i]);
        else
            for (idx i = 0; i < n; ++i) y[i] = op(a[i], b[i]);
    } else if (ia == 1) {
        const float s = b[0];
        if (a == y)
            for (idx i = 0; i < n; ++i) y[i] = op(y[i], s);
        else
            for (idx i = 0; i < n; ++i) y[i] = op(a[i], s);
    } else if (ib == 1) {
        const float s = a[0];
        if (b == y)
            for (idx i = 0; i < n; ++i) y[i] = op(s, y[i]);
        else
            for (idx i = 0; i < n; ++i) y[i] = op(s, b[i]);
    } else {
        const float v = op(a[0], b[0]);
        for (idx i = 0; i < n; ++i) y[i] = v;
    }
}

/// The runs of a dense y of dims `dims` read from N operands with element strides `st` along them:
/// run(y_offset, offsets, n) for each run of the last dim, in order, with each operand's offset
/// of the run's first element.
template <std::size_t N, class Run>
inline void for_each_run(const std::vector<std::int64_t>& dims, std::array<const std::vector<std::int64_t>*, N> st,
                         Run run) {
    const std::size_t r = dims.size();
    const idx inner = dims[r - 1];
    std::vector<idx> pos(r, 0);
    std::array<idx, N> off{};  // offsets of the current run in each operand
    for (idx out = 0;;) {
        run(out, off, inner);
        out += inner;
        std::size_t d = r - 1;  // odometer over the outer dims
        for (;;) {
            if (d == 0) return;
            --d;
            for (std::size_t o = 0; o < N; ++o) off[o] += (*st[o])[d];
            if (++pos[d] < dims[d]) break;
            for (std::size_t o = 0; o < N; ++o) off[o] -= (*st[o])[d] * dims[d];
            pos[d] = 0;
        }
    }
}

/// y = op(a, b) broadcast (plan.hpp's BinaryPlan): y dense of dims `dims`, a and b read with the
/// element strides sa and sb along them (0: broadcast). The outer dims are walked in order, the
/// last one a run at a time. y may be a or b where that operand has y's shape.
template <class Op>
inline void broadcast_binary(const float* a, const float* b, float* y, const std::vector<std::int64_t>& dims,
                             const std::vector<std::int64_t>& sa, const std::vector<std::int64_t>& sb, Op op) {
    const idx ia = sa.back(), ib = sb.back();
    for_each_run<2>(dims, {&sa, &sb}, [&](idx out, const std::array<idx, 2>& off, idx n) {
        binary_run(a + off[0], ia, b + off[1], ib, y + out, n, op);
    });
}

/// y[i] = f(x[i]); y may be x (then read through y, as in binary_run).
template <float (*F)(float)>
inline void unary(const float* x, float* y, idx n) {
    if (x == y)
        for (idx i = 0; i < n; ++i) y[i] = F(y[i]);
    else
        for (idx i = 0; i < n; ++i) y[i] = F(x[i]);
}

/// y[i] = relu1(x[i]); y may be x.
inline void relu(const float* x, float* y, idx n) { unary<relu1>(x, y, n); }

/// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in float; y may be x.
inline void gelu_tanh(const float* x, float* y, idx n) {
    for (idx i = 0; i < n; ++i) y[i] = gelu_tanh1(x[i]);
}

/// GELU, erf form: 0.5 x (1 + erf(x / sqrt(2))), in float; y may be x.
inline void gelu_erf(const float* x, float* y, idx n) {
    for (idx i = 0; i < n; ++i) y[i] = gelu_erf1(x[i]);
}

/// Softmax over the last axis of [rows, cols]: max, exp(x - max) and its sequential sum, divide.
/// y may be x: each pass reads an element of x before the exp pass writes that index of y.
inline void softmax(const float* x, float* y, idx rows, idx cols) {
    for (idx r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float mx = xr[0];
        for (idx c = 1; c < cols; ++c) mx = xr[c] > mx ? xr[c] : mx;
        float sum = 0.0f;
        for (idx c = 0; c < cols; ++c) {
            const float e = std::exp(xr[c] - mx);
            yr[c] = e;
            sum += e;
        }
        for (idx c = 0; c < cols; ++c) yr[c] = yr[c] / sum;
    }
}

/// LayerNorm over the last axis of [rows, cols], two passes over x - x0 (x0 the row's first
/// element): m = their sum / cols, mean = x0 + m, var = the sum of ((x - x0) - m)^2 / cols
/// (biased), rstd = 1 / sqrt(var + eps), y = (x * rstd + (-rstd * mean)) * gamma + beta (torch's
/// order). mean, var and rstd (one value per row) are written when not null.
inline void layer_norm(const float* __restrict x, const float* __restrict gamma, const float* __restrict beta,
                       float* __restrict y, float* __restrict mean, float* __restrict var, float* __restrict rstd_out,
                       idx rows, idx cols, float eps) {
    for (idx r = 0; r < rows; ++r) {
        const float* __restrict xr = x + r * cols;
        float* __restrict yr = y + r * cols;
        const float f = xr[0];  // the sums are shifted by the first element: no cancellation
        float s = 0.0f;
        for (idx c = 0; c < cols; ++c) s += xr[c] - f;
        const float m = s / static_cast<float>(cols);
        const float mu = f + m;
        float s2 = 0.0f;
        for (idx c = 0; c < cols; ++c) {
            const float d = (xr[c] - f) - m;
            s2 += d * d;
        }
        const float v = s2 / static_cast<float>(cols);
        const float rstd = 1.0f / std::sqrt(v + eps);
        const float nb = -rstd * mu;
        for (idx c = 0; c < cols; ++c) yr[c] = (xr[c] * rstd + nb) * gamma[c] + beta[c];
        if (mean != nullptr) mean[r] = mu;
        if (var != nullptr) var[r] = v;
        if (rstd_out != nullptr) rstd_out[r] = rstd;
    }
}

/// Transpose: y has dims in_dims[perm[0]], ...; y is written in order (contiguous stores), x is
/// read with the permuted strides, the last output dim innermost.
inline void transpose(const float* __restrict x, float* __restrict y, const std::vector<std::int64_t>& in_dims,
                      const std::vector<std::int64_t>& perm) {
    const std::size_t r = in_dims.size();
    if (r == 0) {
        y[0] = x[0];
        return;
    }
    std::vector<idx> in_stride(r), dims(r), stride(r), pos(r, 0);
    idx s = 1;
    for (std::size_t i = r; i-- > 0;) {
        in_stride[i] = s;
        s *= static_cast<idx>(in_dims[i]);
    }
    for (std::size_t i = 0; i < r; ++i) {
        dims[i] = static_cast<idx>(in_dims[static_cast<std::size_t>(perm[i])]);
        stride[i] = in_stride[static_cast<std::size_t>(perm[i])];
    }
    const idx inner = dims[r - 1], inner_stride = stride[r - 1];
    idx base = 0;  // input offset of the current output row
    for (float* out = y;;) {
        const float* __restrict xr = x + base;
        for (idx j = 0; j < inner; ++j) out[j] = xr[j * inner_stride];
        out += inner;
        std::size_t d = r - 1;  // odometer over the outer output dims
        for (;;) {
            if (d == 0) return;
            --d;
            base += stride[d];
            if (++pos[d] < dims[d]) break;
            base -= stride[d] * dims[d];
            pos[d] = 0;
        }
    }
}

/// The activations' gradients (plan.hpp's GradKind): dx from dy and x, in torch's forms.
inline float relu_grad1(float dy, float x) { return x <= 0.0f ? 0.0f : dy; }  // NaN x passes dy
inline float gelu_erf_grad1(float dy, float x) {                              // oneDNN's (0.5 + t) + 0.5 erf(r)
    const float r = x * 0.70710678118654752f;
    const float t = r * 0.56418958354775628f * std::exp(-(r * r));
    return dy * ((0.5f + t) + 0.5f * std::erf(r));
}
inline float gelu_tanh_grad1(float dy, float x) {  // torch's left and right derivatives
    constexpr float k = 0.7978845608f, c = 0.044715f;
    const float x_sq = x * x;
    const float th = tanh1(k * (x + c * (x_sq * x)));
    const float left = 0.5f * x;
    const float right_derivative = left * (1.0f - th * th) * (k * (1.0f + 3.0f * c * x_sq));
    return dy * (0.5f * (1.0f + th) + right_derivative);
}
inline float silu_grad1(float dy, float x) {
    const float s = 1.0f / (1.0f + std::exp(-x));
    return dy * s * (1.0f + x * (1.0f - s));
}

/// dx[i] = G(dy[i], x[i]) for n elements.
template <float (*G)(float, float)>
inline void grad(const float* __restrict dy, const float* __restrict x, float* __restrict dx, idx n) {
    for (idx i = 0; i < n; ++i) dx[i] = G(dy[i], x[i]);
}

/// Softmax's gradient over the last axis of [rows, cols], from its output y: per row the
/// sequential sum s of dy * y, then dx = (dy - s) * y (torch's order).
inline void softmax_grad(const float* __restrict y, const float* __restrict dy, float* __restrict dx, idx rows,
                         idx cols) {
    for (idx r = 0; r < rows; ++r) {
        const float* __restrict yr = y + r * cols;
        const float* __restrict dyr = dy + r * cols;
        float s = 0.0f;
        for (idx c = 0; c < cols; ++c) s += dyr[c] * yr[c];
        for (idx c = 0; c < cols; ++c) dx[r * cols + c] = (dyr[c] - s) * yr[c];
    }
}

/// LayerNorm's gradient over the last axis of [rows, cols] (plan.hpp's LayerNormGradPlan), in
/// torch's order: per row the sequential sums ds = sum(dy x gamma) and db = sum(dy gamma), then
/// dx = rstd dy gamma + b x + c; dgamma (dy (rstd x + (-rstd mean))) and dbeta summed over the
/// rows in order.
inline void layer_norm_grad(const float* __restrict dy, const float* __restrict x, const float* __restrict rstd,
                            const float* __restrict mean, const float* __restrict gamma, float* __restrict dx,
                            float* __restrict dgamma, float* __restrict dbeta, idx rows, idx cols) {
    const float scale = 1.0f / static_cast<float>(cols);
    for (idx c = 0; c < cols; ++c) dgamma[c] = 0.0f, dbeta[c] = 0.0f;
    for (idx r = 0; r < rows; ++r) {
        const float* __restrict dyr = dy + r * cols;
        const float* __restrict xr = x + r * cols;
        float ds = 0.0f, db = 0.0f;
        for (idx c = 0; c < cols; ++c) {
            ds += dyr[c] * xr[c] * gamma[c];
            db += dyr[c] * gamma[c];
        }
        const float a = rstd[r], m = mean[r];
        const float b = (db * m - ds) * a * a * a * scale;
        const float cc = -b * m - db * a * scale;
        const float nb = -a * m;  // dgamma as torch's: dy (rstd x + (-rstd mean))
        for (idx c = 0; c < cols; ++c) {
            dx[r * cols + c] = a * dyr[c] * gamma[c] + b * xr[c] + cc;
            dgamma[c] += dyr[c] * (a * xr[c] + nb);
            dbeta[c] += dyr[c];
        }
    }
}

/// Elements a block of sum() adds from zero, and block sums a group adds from zero: a cascade as
/// torch's sum kernel has (levels of 16, 4 accumulators), so that the rounding error grows with the
/// depth of the cascade, not with the length of the row.
constexpr idx sum_block = 64, sum_group = 16;

/// The sum of p[0 .. n): blocks of sum_block elements each summed from zero, groups of sum_group
/// block sums summed from zero, the group sums in order. Every zero is `zero`: +0.0 (a sum of only
/// -0.0 is +0.0, as torch's sum kernel gives it) or -0.0, the identity of IEEE addition (a sum of
/// only -0.0 is -0.0, as torch's vec::reduce_all, which starts from the data, gives it).
inline float sum(const float* __restrict p, idx n, float zero = 0.0f) {
    float total = zero;
    for (idx g = 0; g < n; g += sum_block * sum_group) {
        float group = zero;
        for (idx b = g; b < std::min(n, g + sum_block * sum_group); b += sum_block) {
            float block = zero;
            for (idx i = b; i < std::min(n, b + sum_block); ++i) block += p[i];
            group += block;
        }
        total += group;
    }
    return total;
}

/// The mean of each row of [rows, cols]: sum() / cols, as torch's mean (sum, then div_ by the count).
inline void reduce_mean(const float* __restrict x, float* __restrict y, idx rows, idx cols) {
    for (idx r = 0; r < rows; ++r) y[r] = sum(x + r * cols, cols) / static_cast<float>(cols);
}

/// Log softmax over the last axis of [rows, cols], torch's order: mx the maximum, s the sum of
/// e^(x - mx), y = (x - mx) - log(s).
inline void log_softmax(const float* __restrict x, float* __restrict y, idx rows, idx cols) {
    for (idx r = 0; r < rows; ++r) {
        const float* __restrict xr = x + r * cols;
        float* __restrict yr = y + r * cols;
        float mx = xr[0];
        for (idx c = 1; c < cols; ++c) mx = xr[c] > mx ? xr[c] : mx;
        float s = 0.0f;
        for (idx c = 0; c < cols; ++c) s += std::exp(xr[c] - mx);
        const float ls = std::log(s);
        for (idx c = 0; c < cols; ++c) yr[c] = (xr[c] - mx) - ls;
    }
}

/// Log softmax's gradient over the last axis of [rows, cols], from its output y: s the sum of dy
/// (sum() from -0.0, as torch's reduce_all starts from the data: a row of -0.0 sums to -0.0),
/// dx = dy - e^y s (torch's order).
inline void log_softmax_grad(const float* __restrict dy, const float* __restrict y, float* __restrict dx, idx rows,
                             idx cols) {
    for (idx r = 0; r < rows; ++r) {
        const float* __restrict dyr = dy + r * cols;
        const float* __restrict yr = y + r * cols;
        const float s = sum(dyr, cols, -0.0f);
        for (idx c = 0; c < cols; ++c) dx[r * cols + c] = dyr[c] - std::exp(yr[c]) * s;
    }
}

/// One strided copy: dims[k] elements along dim k, read with the element strides src[k] and
/// written with dst[k] (the last dim a run), from x and y on.
inline void strided_copy(const float* __restrict x, float* __restrict y, const std::vector<std::int64_t>& dims,
                         const std::vector<std::int64_t>& src, const std::vector<std::int64_t>& dst) {
    const std::size_t r = dims.size();
    const idx inner = dims[r - 1], si = src[r - 1], di = dst[r - 1];
    std::vector<idx> pos(r, 0);
    idx ox = 0, oy = 0;
    for (;;) {
        if (si == 1 && di == 1)
            for (idx i = 0; i < inner; ++i) y[oy + i] = x[ox + i];
        else
            for (idx i = 0; i < inner; ++i) y[oy + i * di] = x[ox + i * si];
        std::size_t d = r - 1;  // odometer over the outer dims
        for (;;) {
            if (d == 0) return;
            --d;
            ox += src[d], oy += dst[d];
            if (++pos[d] < dims[d]) break;
            ox -= src[d] * dims[d], oy -= dst[d] * dims[d];
            pos[d] = 0;
        }
    }
}

/// y = c ? a : b, every operand read with its element strides along `dims` (0: broadcast; the
/// last 0 or 1), c one byte an element (not 0: true). y may be b where b has y's shape (in place:
/// each element read before the same index is written).
inline void select(const unsigned char* c, const float* a, const float* b, float* y,
                   const std::vector<std::int64_t>& dims, const std::vector<std::int64_t>& sc,
                   const std::vector<std::int64_t>& sa, const std::vector<std::int64_t>& sb) {
    const std::size_t r = dims.size();
    const idx inner = dims[r - 1], ic = sc[r - 1], ia = sa[r - 1], ib = sb[r - 1];
    std::vector<idx> pos(r, 0);
    idx oc = 0, oa = 0, ob = 0;
    for (float* out = y;;) {
        for (idx i = 0; i < inner; ++i) {  // both read, as the generated kernel does (codegen.hpp)
            const float ta = a[oa + i * ia], tb = b[ob + i * ib];
            out[i] = c[oc + i * ic] != 0 ? ta : tb;
        }
        out += inner;
        std::size_t d = r - 1;
        for (;;) {
            if (d == 0) return;
            --d;
            oc += sc[d], oa += sa[d], ob += sb[d];
            if (++pos[d] < dims[d]) break;
            oc -= sc[d] * dims[d], oa -= sa[d] * dims[d], ob -= sb[d] * dims[d];
            pos[d] = 0;
        }
    }
}

}  // namespace skc_host::kernels
