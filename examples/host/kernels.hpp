// examples/host/kernels.hpp: shape-generic float kernels for the host (CPU) reference backend.
//
// Sizes are run-time arguments. Every kernel here has a shape-specialised twin emitted by
// codegen.hpp that runs the same algorithm with the same loop nest and the same order of every
// floating-point operation (in particular, each reduction is a plain sequential sum starting from
// 0), so with the same compiler flags the two agree bit for bit, up to -ffp-contract differences.
// If you change an algorithm here, change the generator with it.
//
// All arrays are dense and row-major; outputs must not overlap inputs (__restrict).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace skc_host::kernels {

using idx = std::ptrdiff_t;

/// c[m, n] = op(a) * op(b); a is [m, k] ([k, m] with ta), b is [k, n] ([n, k] with tb).
/// Without tb the loop order is i-k-j (the inner loop runs along rows of b and c); with tb it is
/// i-j-k (a dot product of two contiguous rows unless ta). Each c element sums over k ascending.
inline void matmul(const float* __restrict a, const float* __restrict b, float* __restrict c, idx m, idx k, idx n,
                   bool ta, bool tb) {
    if (!tb) {
        for (idx i = 0; i < m; ++i) {
            float* __restrict crow = c + i * n;
            for (idx j = 0; j < n; ++j) crow[j] = 0.0f;
            for (idx p = 0; p < k; ++p) {
                const float av = ta ? a[p * m + i] : a[i * k + p];
                const float* __restrict brow = b + p * n;
                for (idx j = 0; j < n; ++j) crow[j] += av * brow[j];
            }
        }
    } else {
        for (idx i = 0; i < m; ++i) {
            for (idx j = 0; j < n; ++j) {
                const float* __restrict brow = b + j * k;
                float s = 0.0f;
                if (!ta) {
                    const float* __restrict arow = a + i * k;
                    for (idx p = 0; p < k; ++p) s += arow[p] * brow[p];
                } else {
                    for (idx p = 0; p < k; ++p) s += a[p * m + i] * brow[p];
                }
                c[i * n + j] = s;
            }
        }
    }
}

/// Batched matmul: batch `batch`; an operand with batch 1 is broadcast.
inline void batch_matmul(const float* __restrict a, const float* __restrict b, float* __restrict c, idx batch,
                         idx a_batch, idx b_batch, idx m, idx k, idx n, bool ta, bool tb) {
    for (idx t = 0; t < batch; ++t)
        matmul(a + (a_batch == 1 ? 0 : t) * m * k, b + (b_batch == 1 ? 0 : t) * k * n, c + t * m * n, m, k, n, ta, tb);
}

/// y[o * inner + i] = full[o * inner + i] + rep[i].
inline void add(const float* __restrict full, const float* __restrict rep, float* __restrict y, idx outer, idx inner) {
    if (inner == 1) {
        const float s = rep[0];
        for (idx i = 0; i < outer; ++i) y[i] = full[i] + s;
        return;
    }
    for (idx o = 0; o < outer; ++o)
        for (idx i = 0; i < inner; ++i) y[o * inner + i] = full[o * inner + i] + rep[i];
}

/// y[o * inner + i] = full[o * inner + i] * rep[i].
inline void mul(const float* __restrict full, const float* __restrict rep, float* __restrict y, idx outer, idx inner) {
    if (inner == 1) {
        const float s = rep[0];
        for (idx i = 0; i < outer; ++i) y[i] = full[i] * s;
        return;
    }
    for (idx o = 0; o < outer; ++o)
        for (idx i = 0; i < inner; ++i) y[o * inner + i] = full[o * inner + i] * rep[i];
}

inline void relu(const float* __restrict x, float* __restrict y, idx n) {
    for (idx i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in float.
inline void gelu(const float* __restrict x, float* __restrict y, idx n) {
    for (idx i = 0; i < n; ++i) {
        const float v = x[i];
        y[i] = 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
    }
}

/// Softmax over the last axis of [rows, cols]: max, exp(x - max) and its sequential sum, divide.
inline void softmax(const float* __restrict x, float* __restrict y, idx rows, idx cols) {
    for (idx r = 0; r < rows; ++r) {
        const float* __restrict xr = x + r * cols;
        float* __restrict yr = y + r * cols;
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

/// LayerNorm over the last axis of [rows, cols], two passes: mean = sum / cols, var = sum of
/// squared deviations / cols (biased), y = (x - mean) * (1 / sqrt(var + eps)) * gamma + beta.
/// mean and var (one value per row) are written when not null.
inline void layer_norm(const float* __restrict x, const float* __restrict gamma, const float* __restrict beta,
                       float* __restrict y, float* __restrict mean, float* __restrict var, idx rows, idx cols,
                       float eps) {
    for (idx r = 0; r < rows; ++r) {
        const float* __restrict xr = x + r * cols;
        float* __restrict yr = y + r * cols;
        float s = 0.0f;
        for (idx c = 0; c < cols; ++c) s += xr[c];
        const float mu = s / static_cast<float>(cols);
        float s2 = 0.0f;
        for (idx c = 0; c < cols; ++c) {
            const float d = xr[c] - mu;
            s2 += d * d;
        }
        const float v = s2 / static_cast<float>(cols);
        const float rstd = 1.0f / std::sqrt(v + eps);
        for (idx c = 0; c < cols; ++c) yr[c] = (xr[c] - mu) * rstd * gamma[c] + beta[c];
        if (mean != nullptr) mean[r] = mu;
        if (var != nullptr) var[r] = v;
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

}  // namespace skc_host::kernels
