// The PyTorch plugin's mapping from aten calls to op records (examples/torch/mapping.hpp), without
// libtorch. For every op the plugin overrides, many calls with random shapes, layouts (dense,
// transposed, views, broadcast strides) and attributes:
//   - the key from the raw arguments finds the same record: equal keys always describe equal
//     records (so a CallMap entry made once per key is right for every later call);
//   - every described record is valid, and the host backend supports it;
//   - the host's generic kernel, run on the record with the call's data pointers, computes what
//     aten's op computes (a double-precision reference read straight from the strided arguments).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <skc/call_key.hpp>
#include <skc/op_info_io.hpp>
#include <skc/op_record.hpp>

#include "host/dispatch.hpp"
#include "host/plan.hpp"
#include "torch/mapping.hpp"

namespace examples_torch_mapping_test {

namespace {

using skc_torch::Aten;
using skc_torch::Call;
using skc_torch::Description;
using skc_torch::TensorArg;
using Vec = std::vector<std::int64_t>;

std::mt19937_64& rng() {
    static std::mt19937_64 g(20261203);
    return g;
}

std::int64_t pick(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng());
}

/// A strided tensor as a framework hands it out: sizes, strides, and a buffer holding every
/// element it reaches (from its first element on).
struct Strided {
    Vec sizes, strides;
    std::vector<float> data;

    [[nodiscard]] TensorArg arg() const { return {sizes, strides}; }
    [[nodiscard]] std::int64_t offset(const Vec& idx) const {
        std::int64_t o = 0;
        for (std::size_t i = 0; i < idx.size(); ++i) o += idx[i] * strides[i];
        return o;
    }
    [[nodiscard]] double at(const Vec& idx) const { return data[static_cast<std::size_t>(offset(idx))]; }
};

/// `sizes` laid out with dims in memory order `order` (outermost first), each dim's extent padded
/// by `pad[d]` (a window of a larger tensor), dims in `zero` with stride 0 (broadcast).
Strided make_strided(const Vec& sizes, const std::vector<std::size_t>& order, const Vec& pad,
                     const std::vector<std::size_t>& zero = {}) {
    Strided t;
    t.sizes = sizes;
    t.strides.assign(sizes.size(), 0);
    std::int64_t s = 1;
    for (std::size_t k = order.size(); k-- > 0;) {
        const std::size_t d = order[k];
        if (std::find(zero.begin(), zero.end(), d) != zero.end()) continue;
        t.strides[d] = s;
        s *= sizes[d] + pad[d];
    }
    std::int64_t last = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) last += (sizes[i] - 1) * t.strides[i];
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    t.data.resize(static_cast<std::size_t>(last + 1));
    for (float& v : t.data) v = u(rng());
    return t;
}

Strided dense(const Vec& sizes) {
    std::vector<std::size_t> order(sizes.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    return make_strided(sizes, order, Vec(sizes.size(), 0));
}

/// A random layout of `sizes`: dense, the last two dims swapped in memory (a transposed matrix), a
/// random memory order, a window (padding), or a broadcast dim.
Strided random_layout(const Vec& sizes, bool allow_broadcast) {
    const std::size_t r = sizes.size();
    std::vector<std::size_t> order(r);
    for (std::size_t i = 0; i < r; ++i) order[i] = i;
    Vec pad(r, 0);
    std::vector<std::size_t> zero;
    switch (pick(0, 4)) {
    case 0: break;
    case 1:
        if (r >= 2) std::swap(order[r - 1], order[r - 2]);
        break;
    case 2: std::shuffle(order.begin(), order.end(), rng()); break;
    case 3: pad[static_cast<std::size_t>(pick(0, static_cast<std::int64_t>(r) - 1))] = pick(1, 3); break;
    default:
        if (allow_broadcast && r == 3) zero.push_back(0);
        else std::shuffle(order.begin(), order.end(), rng());
    }
    return make_strided(sizes, order, pad, zero);
}

/// Every index of `sizes`, in row-major order.
template <class Fn>
void for_each_index(const Vec& sizes, Fn&& fn) {
    for (std::int64_t s : sizes)
        if (s == 0) return;
    Vec idx(sizes.size(), 0);
    for (;;) {
        fn(idx);
        std::size_t d = sizes.size();
        for (;;) {
            if (d == 0) return;
            --d;
            if (++idx[d] < sizes[d]) break;
            idx[d] = 0;
        }
    }
}

double gelu_erf(double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }
double gelu_tanh(double v) { return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); }

/// A call with its tensors' data, the outputs aten would return, and their reference values.
struct Case {
    Call call;
    std::vector<Strided> in;                // the call's tensors, in aten's order
    std::vector<Vec> out_sizes;             // dense outputs
    std::vector<std::vector<double>> want;  // reference values of each output, row-major
    std::vector<int> slot_of;               // for each kernel input pointer, the index into `in` (-1: none)
    std::vector<TensorArg> list;            // cat: the call's list (call.list), of `in`
};

/// The call's tensors, marked dense as a framework does (is_contiguous) or, at random, left unmarked
/// (the key then holds their strides: another key, the same record).
void finish(Case& c) {
    c.call.n = c.in.size();
    for (std::size_t i = 0; i < c.in.size(); ++i) {
        c.call.t[i] = c.in[i].arg();
        c.call.t[i].dense = pick(0, 1) == 1 && skc_torch::is_dense(c.call.t[i]);
    }
}

Case matmul_case(Aten a) {
    Case c;
    c.call.aten = a;
    const std::int64_t m = pick(1, 13), k = pick(1, 17), n = pick(1, 19);
    const bool bias = a != Aten::mm;
    Strided x = random_layout({m, k}, false), w = random_layout({k, n}, false);
    Strided b = pick(0, 1) == 0 ? dense({n}) : dense({1, n});
    if (a == Aten::addmm_activation) c.call.i0 = pick(0, 1);
    if (bias) c.call.i1 = pick(0, 1);  // keep_negative_zero: the same values, another record
    if (bias) c.in.push_back(b);
    c.in.push_back(x);
    c.in.push_back(w);
    finish(c);
    std::vector<double> y;
    for_each_index({m, n}, [&](const Vec& i) {
        double s = 0;
        for (std::int64_t p = 0; p < k; ++p) s += x.at({i[0], p}) * w.at({p, i[1]});
        if (bias) s += b.data[static_cast<std::size_t>(i[1])];
        if (a == Aten::addmm_activation) s = c.call.i0 != 0 ? gelu_erf(s) : std::max(s, 0.0);
        y.push_back(s);
    });
    c.out_sizes = {{m, n}};
    c.want = {y};
    c.slot_of = bias ? std::vector<int>{1, 2, 0, -1} : std::vector<int>{0, 1, -1, -1};
    return c;
}

Case bmm_case() {
    Case c;
    c.call.aten = Aten::bmm;
    const std::int64_t bt = pick(1, 5), m = pick(1, 9), k = pick(1, 11), n = pick(1, 10);
    Strided x = random_layout({bt, m, k}, true), w = random_layout({bt, k, n}, true);
    c.in = {x, w};
    finish(c);
    std::vector<double> y;
    for_each_index({bt, m, n}, [&](const Vec& i) {
        double s = 0;
        for (std::int64_t p = 0; p < k; ++p) s += x.at({i[0], i[1], p}) * w.at({i[0], p, i[2]});
        y.push_back(s);
    });
    c.out_sizes = {{bt, m, n}};
    c.want = {y};
    c.slot_of = {0, 1, -1, -1};
    return c;
}

Vec random_sizes(std::size_t rank, std::int64_t hi, std::int64_t lo = 1) {
    Vec s(rank);
    for (auto& v : s) v = pick(lo, hi);
    return s;
}

/// A random broadcast of `full`: leading dims dropped, others made 1, or `full` itself.
Vec broadcast_of(const Vec& full) {
    if (pick(0, 2) == 0) return full;
    Vec s(full.begin() + pick(0, static_cast<std::int64_t>(full.size())), full.end());
    for (auto& v : s)
        if (pick(0, 1) == 1) v = 1;
    return s;
}

Case binary_case(Aten a) {
    Case c;
    c.call.aten = a;
    // Any NumPy broadcast: each operand a broadcast of the output's shape (equal, a 0-dim tensor,
    // trailing dims, [B, T, 1] against [B, T, D], [8, 1] against [1, 16], ...), either first.
    const Vec full = random_sizes(static_cast<std::size_t>(pick(1, 4)), 6);
    const bool swap = pick(0, 1) == 1;
    Vec xs = broadcast_of(full), ys = broadcast_of(full);
    if (swap) std::swap(xs, ys);
    Strided x = dense(xs), y = dense(ys);
    if (a == Aten::axpy) c.call.f0 = pick(0, 1) == 0 ? -0.100000001490116119 : 2.5;  // alpha, a float's value
    c.in = {x, y};
    finish(c);
    const Vec f = skc_torch::detail::broadcast(xs, ys).value();
    std::vector<double> out;
    for_each_index(f, [&](const Vec& i) {
        auto read = [&](const Strided& t) {
            Vec j(t.sizes.size());
            for (std::size_t d = 0; d < j.size(); ++d) j[d] = t.sizes[d] == 1 ? 0 : i[i.size() - j.size() + d];
            return t.at(j);
        };
        const double u = read(x), v = read(y);
        out.push_back(a == Aten::add    ? u + v
                      : a == Aten::sub  ? u - v
                      : a == Aten::mul  ? u * v
                      : a == Aten::axpy ? u + c.call.f0 * v
                                        : u / v);
    });
    c.out_sizes = {f};
    c.want = {out};
    c.slot_of = {0, 1};
    return c;
}

/// pow's exponents the host computes (plan.hpp's Power), and the function of each.
constexpr double exponents[] = {2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.0, 0.0};

Case unary_case(Aten a) {
    Case c;
    c.call.aten = a;
    if (a == Aten::gelu) c.call.i0 = pick(0, 1);
    if (a == Aten::pow) c.call.f0 = exponents[pick(0, 7)];
    Strided x = dense(random_sizes(static_cast<std::size_t>(pick(1, 3)), 9));
    const bool roots = a == Aten::rsqrt || (a == Aten::pow && (c.call.f0 == 0.5 || c.call.f0 == -0.5));
    if (roots)
        for (float& v : x.data) v = std::abs(v);
    c.in = {x};
    finish(c);
    std::vector<double> y;
    for (float f : x.data) {
        const double v = f;
        switch (a) {
        case Aten::relu: y.push_back(std::max(v, 0.0)); break;
        case Aten::gelu: y.push_back(c.call.i0 ? gelu_tanh(v) : gelu_erf(v)); break;
        case Aten::neg: y.push_back(-v); break;
        case Aten::tanh: y.push_back(std::tanh(v)); break;
        case Aten::rsqrt: y.push_back(1 / std::sqrt(v)); break;
        case Aten::silu: y.push_back(v / (1 + std::exp(-v))); break;
        default: y.push_back(std::pow(v, c.call.f0));
        }
    }
    c.out_sizes = {x.sizes};
    c.want = {y};
    c.slot_of = {0};
    return c;
}

Case softmax_case() {
    Case c;
    c.call.aten = Aten::softmax;
    Strided x = dense(random_sizes(static_cast<std::size_t>(pick(1, 4)), 9));
    c.call.i0 = static_cast<std::int64_t>(x.sizes.size()) - 1;  // the host computes the last axis
    c.in = {x};
    finish(c);
    const std::int64_t cols = x.sizes.back();
    std::vector<double> y;
    for (std::size_t r = 0; r < x.data.size(); r += static_cast<std::size_t>(cols)) {
        double mx = -1e300, sum = 0;
        for (std::int64_t j = 0; j < cols; ++j) mx = std::max<double>(mx, x.data[r + static_cast<std::size_t>(j)]);
        for (std::int64_t j = 0; j < cols; ++j) sum += std::exp(x.data[r + static_cast<std::size_t>(j)] - mx);
        for (std::int64_t j = 0; j < cols; ++j)
            y.push_back(std::exp(x.data[r + static_cast<std::size_t>(j)] - mx) / sum);
    }
    c.out_sizes = {x.sizes};
    c.want = {y};
    c.slot_of = {0};
    return c;
}

/// threshold_backward(dy, x, 0), gelu_backward(dy, x, approximate), silu_backward(dy, x): dy and x
/// dense of one shape (more than one element: GELU's of one element runs stock); dx = dy * f'(x).
Case activation_grad_case(Aten a) {
    Case c;
    c.call.aten = a;
    if (a == Aten::gelu_backward) c.call.i0 = pick(0, 1);
    Vec sizes = random_sizes(static_cast<std::size_t>(pick(1, 3)), 9);
    auto one = [](const Vec& v) { return std::all_of(v.begin(), v.end(), [](std::int64_t d) { return d == 1; }); };
    while (a == Aten::gelu_backward && one(sizes)) sizes = random_sizes(static_cast<std::size_t>(pick(1, 3)), 9);
    Strided dy = dense(sizes), x = dense(sizes);
    c.in = {dy, x};
    finish(c);
    constexpr double k = 0.7978845608028654, pi = 3.141592653589793;
    std::vector<double> y;
    for (std::size_t i = 0; i < x.data.size(); ++i) {
        const double v = x.data[i];
        double g = 0;
        if (a == Aten::threshold_backward) {
            g = v <= 0 ? 0.0 : 1.0;
        } else if (a == Aten::silu_backward) {
            const double s = 1 / (1 + std::exp(-v));
            g = s * (1 + v * (1 - s));
        } else if (c.call.i0 == 0) {
            g = 0.5 * (1 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * pi);
        } else {
            const double t = std::tanh(k * (v + 0.044715 * v * v * v));
            g = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v);
        }
        y.push_back(dy.data[i] * g);
    }
    c.out_sizes = {sizes};
    c.want = {y};
    c.slot_of = {0, 1};
    return c;
}

/// _softmax_backward_data(dy, y, last dim, float): y a softmax output; recorded (softmax, dy).
Case softmax_grad_case() {
    Case c;
    c.call.aten = Aten::softmax_backward_data;
    const Vec sizes = random_sizes(static_cast<std::size_t>(pick(1, 4)), 9);
    Strided dy = dense(sizes), y = dense(sizes);
    const auto cols = static_cast<std::size_t>(sizes.back());
    for (std::size_t r = 0; r < y.data.size(); r += cols) {
        double sum = 0;
        for (std::size_t j = 0; j < cols; ++j) sum += std::exp(static_cast<double>(y.data[r + j]));
        for (std::size_t j = 0; j < cols; ++j)
            y.data[r + j] = static_cast<float>(std::exp(static_cast<double>(y.data[r + j])) / sum);
    }
    c.call.i0 = static_cast<std::int64_t>(sizes.size()) - 1;  // the host computes the last axis
    c.in = {dy, y};
    finish(c);
    std::vector<double> dx;
    for (std::size_t r = 0; r < y.data.size(); r += cols) {
        double s = 0;
        for (std::size_t j = 0; j < cols; ++j) s += static_cast<double>(dy.data[r + j]) * y.data[r + j];
        for (std::size_t j = 0; j < cols; ++j) dx.push_back((dy.data[r + j] - s) * y.data[r + j]);
    }
    c.out_sizes = {sizes};
    c.want = {dx};
    c.slot_of = {1, 0};
    return c;
}

/// Sizes of 1 to 4 dims and how many of the last ones LayerNorm normalises: rows of more than two
/// elements (shorter ones are not described).
std::pair<Vec, std::size_t> layer_norm_sizes() {
    for (;;) {
        Vec sizes = random_sizes(static_cast<std::size_t>(pick(1, 4)), 8);
        const auto k = static_cast<std::size_t>(pick(1, static_cast<std::int64_t>(sizes.size())));
        const auto first = sizes.end() - static_cast<std::ptrdiff_t>(k);
        if (std::accumulate(first, sizes.end(), std::int64_t{1}, std::multiplies<>()) > 2) return {sizes, k};
    }
}

/// native_layer_norm_backward(dy, x, shape, mean, rstd, weight, bias, all true) over the last k
/// dims: mean and rstd x's own, [d0, .., 1, .., 1] as aten's; recorded (dy, x, rstd, mean, gamma).
Case layer_norm_grad_case() {
    Case c;
    c.call.aten = Aten::native_layer_norm_backward;
    const auto [sizes, k] = layer_norm_sizes();
    const Vec norm(sizes.end() - static_cast<std::ptrdiff_t>(k), sizes.end());
    Vec stat = sizes;
    for (std::size_t d = sizes.size() - k; d < sizes.size(); ++d) stat[d] = 1;
    Strided dy = dense(sizes), x = dense(sizes), mean = dense(stat), rstd = dense(stat), g = dense(norm);
    std::size_t cols = 1;
    for (std::int64_t d : norm) cols *= static_cast<std::size_t>(d);
    const std::size_t rows = x.data.size() / cols;
    for (std::size_t r = 0; r < rows; ++r) {
        double mu = 0, var = 0;
        for (std::size_t j = 0; j < cols; ++j) mu += x.data[r * cols + j];
        mu /= static_cast<double>(cols);
        for (std::size_t j = 0; j < cols; ++j) var += (x.data[r * cols + j] - mu) * (x.data[r * cols + j] - mu);
        mean.data[r] = static_cast<float>(mu);
        rstd.data[r] = static_cast<float>(1 / std::sqrt(var / static_cast<double>(cols) + 1e-5));
    }
    c.call.i0 = static_cast<std::int64_t>(k);
    c.in = {dy, x, mean, rstd, g};
    finish(c);
    std::vector<double> dx, dgamma(cols, 0.0), dbeta(cols, 0.0);
    for (std::size_t r = 0; r < rows; ++r) {
        const double a = rstd.data[r], m = mean.data[r];
        double s1 = 0, s2 = 0;
        for (std::size_t j = 0; j < cols; ++j) {
            const double dg = static_cast<double>(dy.data[r * cols + j]) * g.data[j];
            s1 += dg, s2 += dg * (x.data[r * cols + j] - m) * a;
        }
        s1 /= static_cast<double>(cols), s2 /= static_cast<double>(cols);
        for (std::size_t j = 0; j < cols; ++j) {
            const double d = dy.data[r * cols + j], xh = (x.data[r * cols + j] - m) * a;
            dx.push_back(a * (d * g.data[j] - s1 - xh * s2));
            dgamma[j] += d * xh;
            dbeta[j] += d;
        }
    }
    c.out_sizes = {sizes, norm, norm};
    c.want = {dx, dgamma, dbeta};
    c.slot_of = {0, 1, 3, 2, 4};
    return c;
}

Case layer_norm_case() {
    Case c;
    c.call.aten = Aten::native_layer_norm;
    const auto [sizes, k] = layer_norm_sizes();
    const Vec norm(sizes.end() - static_cast<std::ptrdiff_t>(k), sizes.end());
    Strided x = dense(sizes), g = dense(norm), b = dense(norm);
    c.call.i0 = static_cast<std::int64_t>(k);
    c.call.f0 = 1e-5;
    c.in = {x, g, b};
    finish(c);
    std::int64_t cols = 1;
    for (std::int64_t v : norm) cols *= v;
    std::vector<double> y, mean, rstd;
    for (std::size_t r = 0; r < x.data.size(); r += static_cast<std::size_t>(cols)) {
        double mu = 0, var = 0;
        for (std::int64_t j = 0; j < cols; ++j) mu += x.data[r + static_cast<std::size_t>(j)];
        mu /= static_cast<double>(cols);
        for (std::int64_t j = 0; j < cols; ++j) var += std::pow(x.data[r + static_cast<std::size_t>(j)] - mu, 2);
        var /= static_cast<double>(cols);
        const double rs = 1 / std::sqrt(var + 1e-5);
        for (std::int64_t j = 0; j < cols; ++j)
            y.push_back((x.data[r + static_cast<std::size_t>(j)] - mu) * rs * g.data[static_cast<std::size_t>(j)] +
                        b.data[static_cast<std::size_t>(j)]);
        mean.push_back(mu);
        rstd.push_back(rs);
    }
    Vec stat(sizes.begin(), sizes.end() - static_cast<std::ptrdiff_t>(k));
    stat.resize(sizes.size(), 1);
    c.out_sizes = {sizes, stat, stat};
    c.want = {y, mean, rstd};
    c.slot_of = {0, 1, 2};
    return c;
}

/// The bytes of a bool tensor held in a Strided's float buffer (one byte an element).
unsigned char* bytes(Strided& t) { return reinterpret_cast<unsigned char*>(t.data.data()); }

/// A dense bool tensor of `sizes`, its bytes 0 or 1 at random.
Strided dense_bool(const Vec& sizes) {
    Strided t = dense(sizes);
    const std::size_t n = t.data.size();  // one float an element: as many bytes
    t.data.assign((n + 3) / 4, 0.0f);
    for (std::size_t e = 0; e < n; ++e) bytes(t)[e] = static_cast<unsigned char>(pick(0, 1));
    return t;
}

/// mean(x, dims, keepdim) over the last k dims (bit mask i0; every dim for a 0-dim x), dense x.
Case mean_case() {
    Case c;
    c.call.aten = Aten::mean;
    const Vec sizes = random_sizes(static_cast<std::size_t>(pick(0, 4)), 9);
    const auto r = static_cast<std::int64_t>(sizes.size());
    const std::int64_t k = r == 0 ? 0 : pick(1, r);
    for (std::int64_t d = r - k; d < r; ++d) c.call.i0 |= std::int64_t{1} << d;
    c.call.i1 = pick(0, 1);
    Strided x = dense(sizes);
    c.in = {x};
    finish(c);
    std::int64_t cols = 1;
    Vec y;
    for (std::int64_t d = 0; d < r; ++d) {
        if (d >= r - k) cols *= sizes[static_cast<std::size_t>(d)];
        if (d < r - k) y.push_back(sizes[static_cast<std::size_t>(d)]);
        else if (c.call.i1 != 0) y.push_back(1);
    }
    std::vector<double> want;
    for (std::size_t row = 0; row < x.data.size(); row += static_cast<std::size_t>(cols)) {
        double sum = 0;
        for (std::int64_t j = 0; j < cols; ++j) sum += x.data[row + static_cast<std::size_t>(j)];
        want.push_back(sum / static_cast<double>(cols));
    }
    c.out_sizes = {y};
    c.want = {want};
    c.slot_of = {0, -1};
    return c;
}

/// cat(tensors, dim) of 1 to 4 tensors of rank 1 to 4, each of a random layout (dense, transposed,
/// permuted, a window, a broadcast dim).
Case cat_case() {
    Case c;
    c.call.aten = Aten::cat;
    const std::size_t r = static_cast<std::size_t>(pick(1, 4));
    const Vec base = random_sizes(r, 5);
    const auto axis = static_cast<std::size_t>(pick(0, static_cast<std::int64_t>(r) - 1));
    const auto n = static_cast<std::size_t>(pick(1, 4));
    Vec y = base;
    y[axis] = 0;
    for (std::size_t k = 0; k < n; ++k) {
        Vec sizes = base;
        sizes[axis] = pick(1, 5);
        y[axis] += sizes[axis];
        c.in.push_back(random_layout(sizes, true));
    }
    c.call.i0 = static_cast<std::int64_t>(axis);
    for (const Strided& t : c.in) {
        TensorArg a = t.arg();
        a.dense = pick(0, 1) == 1 && skc_torch::is_dense(a);
        c.list.push_back(a);
    }
    c.call.list = c.list;
    std::vector<double> want;
    for_each_index(y, [&](const Vec& i) {
        Vec j = i;
        std::size_t k = 0;
        while (j[axis] >= c.in[k].sizes[axis]) j[axis] -= c.in[k++].sizes[axis];
        want.push_back(c.in[k].at(j));
    });
    c.out_sizes = {y};
    c.want = {want};
    for (std::size_t k = 0; k < n; ++k) c.slot_of.push_back(static_cast<int>(k));
    return c;
}

/// _log_softmax(x, last dim) and _log_softmax_backward_data(dy, y, last dim, float), y a log
/// softmax output.
Case log_softmax_case(Aten a) {
    Case c;
    c.call.aten = a;
    const Vec sizes = random_sizes(static_cast<std::size_t>(pick(0, 4)), 9);  // a 0-dim tensor is a row of one
    c.call.i0 = std::max<std::int64_t>(static_cast<std::int64_t>(sizes.size()) - 1, 0);  // the host: the last axis
    const auto cols = static_cast<std::size_t>(sizes.empty() ? 1 : sizes.back());
    Strided x = dense(sizes), dy = dense(sizes);
    std::vector<double> ls;
    for (std::size_t r = 0; r < x.data.size(); r += cols) {
        double mx = -1e300, sum = 0;
        for (std::size_t j = 0; j < cols; ++j) mx = std::max<double>(mx, x.data[r + j]);
        for (std::size_t j = 0; j < cols; ++j) sum += std::exp(x.data[r + j] - mx);
        for (std::size_t j = 0; j < cols; ++j) ls.push_back(x.data[r + j] - mx - std::log(sum));
    }
    if (a == Aten::log_softmax) {
        c.in = {x};
        finish(c);
        c.want = {ls};
        c.slot_of = {0};
    } else {
        Strided y = dense(sizes);
        for (std::size_t i = 0; i < ls.size(); ++i) y.data[i] = static_cast<float>(ls[i]);
        c.in = {dy, y};
        finish(c);
        std::vector<double> dx;
        for (std::size_t r = 0; r < y.data.size(); r += cols) {
            double s = 0;
            for (std::size_t j = 0; j < cols; ++j) s += dy.data[r + j];
            for (std::size_t j = 0; j < cols; ++j) dx.push_back(dy.data[r + j] - std::exp(double{y.data[r + j]}) * s);
        }
        c.want = {dx};
        c.slot_of = {0, 1};
    }
    c.out_sizes = {sizes};
    return c;
}

/// where(cond, self, other) and masked_fill(self, mask, value): every operand a broadcast of the
/// output's shape, the condition bool; masked_fill's value a float the kernel reads (not one of the
/// call's tensors).
Case select_case(Aten a) {
    Case c;
    c.call.aten = a;
    const Vec full = random_sizes(static_cast<std::size_t>(pick(1, 4)), 6);
    const bool fill = a == Aten::masked_fill;
    Vec cs = broadcast_of(full), xs = broadcast_of(full), ys = broadcast_of(full);
    Strided cond = dense_bool(cs), x = dense(xs), other = dense(ys);
    if (fill) c.in = {x, cond};
    else c.in = {cond, x, other};
    finish(c);
    Strided value = dense({});
    if (fill) c.in.push_back(value);
    const Vec f = fill ? skc_torch::detail::broadcast(xs, cs).value()
                       : skc_torch::detail::broadcast(cs, skc_torch::detail::broadcast(xs, ys).value()).value();
    auto index = [&](const Strided& t, const Vec& i) {
        Vec j(t.sizes.size());
        for (std::size_t d = 0; d < j.size(); ++d) j[d] = t.sizes[d] == 1 ? 0 : i[i.size() - j.size() + d];
        return t.offset(j);
    };
    std::vector<double> out;
    for_each_index(f, [&](const Vec& i) {
        const bool on = bytes(cond)[static_cast<std::size_t>(index(cond, i))] != 0;
        const float t = x.data[static_cast<std::size_t>(index(x, i))];
        if (fill) out.push_back(on ? value.data[0] : t);
        else out.push_back(on ? t : other.data[static_cast<std::size_t>(index(other, i))]);
    });
    c.out_sizes = {f};
    c.want = {out};
    c.slot_of = {0, 1, 2};  // (cond, self, other) or (self, mask, value): the records' order
    return c;
}

Case transpose_case() {
    Case c;
    c.call.aten = Aten::clone;
    const std::size_t r = static_cast<std::size_t>(pick(2, 4));
    Vec sizes = random_sizes(r, 6, 2);
    if (pick(0, 4) == 0) sizes[static_cast<std::size_t>(pick(0, static_cast<std::int64_t>(r) - 1))] = 1;  // a dim of 1
    std::vector<std::size_t> order(r);
    for (std::size_t i = 0; i < r; ++i) order[i] = i;
    do std::shuffle(order.begin(), order.end(), rng());
    while (std::is_sorted(order.begin(), order.end()) && pick(0, 3) != 0);
    Strided x = make_strided(sizes, order, Vec(r, 0));
    c.in = {x};
    finish(c);
    std::vector<double> y;
    for_each_index(sizes, [&](const Vec& i) { y.push_back(x.at(i)); });
    c.out_sizes = {sizes};
    c.want = {y};
    c.slot_of = {0, -1};
    return c;
}

Case random_case(Aten a) {
    switch (a) {
    case Aten::mm:
    case Aten::addmm:
    case Aten::addmm_activation: return matmul_case(a);
    case Aten::bmm: return bmm_case();
    case Aten::add:
    case Aten::sub:
    case Aten::mul:
    case Aten::div:
    case Aten::axpy: return binary_case(a);
    case Aten::relu:
    case Aten::gelu:
    case Aten::neg:
    case Aten::tanh:
    case Aten::rsqrt:
    case Aten::silu:
    case Aten::pow: return unary_case(a);
    case Aten::softmax: return softmax_case();
    case Aten::native_layer_norm: return layer_norm_case();
    case Aten::clone: return transpose_case();
    case Aten::threshold_backward:
    case Aten::gelu_backward:
    case Aten::silu_backward: return activation_grad_case(a);
    case Aten::softmax_backward_data: return softmax_grad_case();
    case Aten::native_layer_norm_backward: return layer_norm_grad_case();
    case Aten::mean: return mean_case();
    case Aten::cat: return cat_case();
    case Aten::log_softmax:
    case Aten::log_softmax_backward_data: return log_softmax_case(a);
    case Aten::where:
    case Aten::masked_fill: return select_case(a);
    }
    return matmul_case(Aten::mm);
}

std::int64_t numel(const Vec& v) {
    std::int64_t n = 1;
    for (std::int64_t x : v) n *= x;
    return n;
}

constexpr Aten all_ops[] = {Aten::mm,
                            Aten::addmm,
                            Aten::addmm_activation,
                            Aten::bmm,
                            Aten::add,
                            Aten::mul,
                            Aten::relu,
                            Aten::gelu,
                            Aten::softmax,
                            Aten::native_layer_norm,
                            Aten::clone,
                            Aten::sub,
                            Aten::div,
                            Aten::neg,
                            Aten::tanh,
                            Aten::rsqrt,
                            Aten::silu,
                            Aten::pow,
                            Aten::threshold_backward,
                            Aten::gelu_backward,
                            Aten::softmax_backward_data,
                            Aten::silu_backward,
                            Aten::native_layer_norm_backward,
                            Aten::mean,
                            Aten::cat,
                            Aten::log_softmax,
                            Aten::log_softmax_backward_data,
                            Aten::where,
                            Aten::masked_fill,
                            Aten::axpy};

}  // namespace

TEST_CASE("every overridden op: the record is the host's, and computes what aten computes") {
    for (Aten a : all_ops) {
        int checked = 0, not_transposes = 0;
        for (int iter = 0; iter < 150; ++iter) {
            Case c = random_case(a);
            const Description d = skc_torch::describe(c.call);
            CAPTURE(static_cast<int>(a));
            CAPTURE(iter);
            if (!d.record) {
                // Only a clone of an already dense tensor is not a transpose.
                REQUIRE_MESSAGE(a == Aten::clone, d.reason);
                CHECK(d.reason == "Transpose: self is already contiguous: a plain copy, not a transpose");
                ++not_transposes;
                continue;
            }
            CHECK_EQ(d.record->op_type, std::string(skc_torch::name(d.type)));
            skc::validate(*d.record);
            const skc_host::Analysis an = skc_host::analyze(*d.record);
            REQUIRE_MESSAGE(an.plan.has_value(), an.reason, " for ", skc::op_info_file_name(*d.record, 0));
            std::vector<const float*> ins;
            for (int s : c.slot_of) ins.push_back(s < 0 ? nullptr : c.in[static_cast<std::size_t>(s)].data.data());
            std::vector<std::vector<float>> outs;
            std::vector<float*> out_ptrs;
            for (const Vec& s : c.out_sizes) outs.emplace_back(static_cast<std::size_t>(numel(s)), std::nanf(""));
            for (auto& o : outs) out_ptrs.push_back(o.data());
            skc_host::run_plan(*an.plan, ins.data(), out_ptrs.data());
            for (std::size_t o = 0; o < outs.size(); ++o) {
                REQUIRE_EQ(outs[o].size(), c.want[o].size());
                for (std::size_t i = 0; i < outs[o].size(); ++i) {
                    const double want = c.want[o][i];
                    if (!(std::fabs(outs[o][i] - want) <= 1e-4 + 1e-4 * std::fabs(want))) {
                        FAIL_CHECK("output ", o, " element ", i, ": ", outs[o][i], " != ", want, " for ",
                                   skc::op_info_file_name(*d.record, 0));
                        break;
                    }
                }
            }
            ++checked;
        }
        CHECK(checked > 100);
        if (a == Aten::clone) CHECK(not_transposes < 40);
    }
}

TEST_CASE("equal keys describe equal records, and the key has every argument the record depends on") {
    for (Aten a : all_ops) {
        std::map<std::vector<std::uint64_t>, std::string> by_key;  // key words -> digest or reason
        for (int iter = 0; iter < 300; ++iter) {
            Case c = random_case(a);
            skc::CallKey key;
            skc_torch::key_of(c.call, key);
            REQUIRE(key.ok());
            const Description d = skc_torch::describe(c.call);
            const std::string what = d.record ? skc::digest(*d.record).hex() : d.reason;
            const std::vector<std::uint64_t> words(key.words().begin(), key.words().end());
            const auto inserted = by_key.emplace(words, what);
            const std::string& before = inserted.first->second;
            CHECK_MESSAGE(before == what, "one key, two descriptions: ", before, " and ", what);
            // The same call again: the same key, the same record.
            skc::CallKey again;
            skc_torch::key_of(c.call, again);
            CHECK(again == key);
            CHECK_EQ(again.hash(), key.hash());
        }
        CHECK(by_key.size() > 20);  // the random calls were mostly distinct
    }
}

TEST_CASE("a CallMap made once per key gives every later call the digest of its own record") {
    skc::CallMap<skc::Digest> map;
    std::size_t made = 0;
    std::vector<Case> seen;
    for (Aten a : all_ops)
        for (int iter = 0; iter < 40; ++iter) seen.push_back(random_case(a));
    for (int round = 0; round < 2; ++round)
        for (const Case& c : seen) {
            const Description d = skc_torch::describe(c.call);
            if (!d.record) continue;
            skc::CallKey key;
            skc_torch::key_of(c.call, key);
            const skc::Digest& got = map.emplace(key, [&] {
                ++made;
                return skc::digest(*d.record);
            });
            CHECK(got == skc::digest(*d.record));
        }
    CHECK(made == map.size());
    CHECK(made > 300);
}

TEST_CASE("addmm records keep_negative_zero where stock's BLAS keeps a -0.0 sum (Call::i1)") {
    const Vec s4{4}, st1{1}, s23{2, 3}, st31{3, 1}, s34{3, 4}, st41{4, 1};
    auto keeps = [](const Call& c) {
        const std::optional<skc::OpRecord> r = skc_torch::describe(c).record;
        REQUIRE(r.has_value());
        REQUIRE(r->attrs.has_value());
        int found = 0;
        for (const skc::Attr& a : *r->attrs)
            if (a.name == "keep_negative_zero") found += a.value.is_bool() && a.value.as_bool() ? 1 : 100;
        return found;
    };
    const std::array<TensorArg, 5> biased{TensorArg{s4, st1}, TensorArg{s23, st31}, TensorArg{s34, st41}};
    CHECK(keeps(Call{Aten::addmm, biased, 3, 0, 0, 1}) == 1);
    CHECK(keeps(Call{Aten::addmm, biased, 3, 0, 0, 0}) == 0);
    CHECK(keeps(Call{Aten::addmm_activation, biased, 3, 1, 0, 1}) == 1);
    CHECK(keeps(Call{Aten::addmm_activation, biased, 3, 0, 0, 0}) == 0);
    CHECK(keeps(Call{Aten::mm, {TensorArg{s23, st31}, TensorArg{s34, st41}}, 2, 0, 0, 1}) == 0);  // no bias
}

TEST_CASE("arguments the plugin cannot describe give the reason") {
    const Vec s23{2, 3}, s34{3, 4}, s5{5}, st31{3, 1}, st1{1}, s0{0, 3};
    auto describe = [](Call c) { return skc_torch::describe(c).reason; };
    CHECK_EQ(describe(Call{Aten::mm, {TensorArg{s23, st31}, TensorArg{s5, st1}}, 2}),
             "MatMulV2: the second matrix has rank 1, expected 2");
    CHECK_EQ(describe(Call{Aten::mm, {TensorArg{s23, st31}, TensorArg{s23, st31}}, 2}),
             "MatMulV2: inner dims differ: [2,3] x [2,3]");
    const Vec s4{4}, s14{1, 4}, s24{2, 4}, st41{4, 1};
    CHECK_EQ(describe(Call{Aten::addmm, {TensorArg{s24, st41}, TensorArg{s23, st31}, TensorArg{s34, st41}}, 3}),
             "MatMulV2: the added tensor has shape [2,4]: only a bias row [4] or [1, 4] is supported");
    CHECK(describe(Call{Aten::addmm, {TensorArg{s14, st41}, TensorArg{s23, st31}, TensorArg{s34, st41}}, 3}).empty());
    // At most 64 outputs from a first matrix stored transposed (a.t() of [K, M]), K of 32 or more:
    // stock (the host kernel would sum them in float tiles); 66 outputs, K of 31, or one row: static.
    const std::string few =
        ": at most 64 outputs from a first matrix stored transposed: the host kernel would sum them in floats, "
        "less accurately than stock";
    const Vec a2{2, 64}, at2{1, 2}, b3{64, 3}, bt3{3, 1}, b33{64, 33}, bt33{33, 1}, a31{2, 31}, b31{31, 3};
    CHECK_EQ(describe(Call{Aten::mm, {TensorArg{a2, at2}, TensorArg{b3, bt3}}, 2}), "MatMulV2" + few);
    CHECK_EQ(describe(Call{Aten::addmm, {TensorArg{Vec{3}, st1}, TensorArg{a2, at2}, TensorArg{b3, bt3}}, 3}),
             "MatMulV2" + few);
    CHECK(describe(Call{Aten::mm, {TensorArg{a2, at2}, TensorArg{b33, bt33}}, 2}).empty());
    CHECK(describe(Call{Aten::mm, {TensorArg{a31, at2}, TensorArg{b31, bt3}}, 2}).empty());
    CHECK(describe(Call{Aten::mm, {TensorArg{a2, Vec{64, 1}}, TensorArg{b3, bt3}}, 2}).empty());  // A's rows dense
    const Vec ba{4, 2, 64}, bat{128, 1, 2}, bb{4, 64, 3}, bbt{192, 3, 1};
    CHECK_EQ(describe(Call{Aten::bmm, {TensorArg{ba, bat}, TensorArg{bb, bbt}}, 2}), "BatchMatMulV2" + few);
    const Vec s03{0, 3};
    CHECK_EQ(describe(Call{Aten::relu, {TensorArg{s03, st31}}, 1}), "Relu: self has no elements");
    const Vec st13{1, 3};
    // A transposed view: stock lays its output out transposed, the host kernels write row-major.
    CHECK_EQ(describe(Call{Aten::relu, {TensorArg{s23, st13}}, 1}),
             "Relu: stock lays the output out with strides [1,2] (from its inputs' strides), not row-major");
    CHECK_EQ(describe(Call{Aten::add, {TensorArg{s23, st31}, TensorArg{s34, st41}}, 2}),
             "Add: shapes [2,3] and [3,4] do not broadcast");
    CHECK_EQ(describe(Call{Aten::div, {TensorArg{s23, st31}, TensorArg{s34, st41}}, 2}),
             "RealDiv: shapes [2,3] and [3,4] do not broadcast");
    CHECK_EQ(describe(Call{Aten::sub, {TensorArg{s23, st13}, TensorArg{s23, st31}}, 2}),
             "Sub: stock lays the output out with strides [1,2] (from its inputs' strides), not row-major");
    CHECK_EQ(describe(Call{Aten::tanh, {TensorArg{s03, st31}}, 1}), "Tanh: self has no elements");
    CHECK_EQ(describe(Call{Aten::silu, {TensorArg{s23, st13}}, 1}),
             "Swish: stock lays the output out with strides [1,2] (from its inputs' strides), not row-major");
    // A slice's step along the last dim: a binary op reads it at its stride; a unary op's view is
    // described, and the host kernels say why not (their runs must be contiguous).
    const Vec s2x3{2, 3}, st_step{6, 2};
    CHECK(describe(Call{Aten::mul, {TensorArg{s2x3, st_step}, TensorArg{s23, st31}}, 2}).empty());
    const Description step = skc_torch::describe(Call{Aten::neg, {TensorArg{s2x3, st_step}}, 1});
    REQUIRE(step.record.has_value());
    CHECK_EQ(skc_host::analyze(*step.record).reason,
             "Neg: inputs[0] is a view whose last dim has stride 2: a unary op reads runs of contiguous elements");
    // A broadcast of x1 and x2 ([2,1] and [1,4]: neither has the output's shape) is described and
    // compiled; an exponent the host does not compute is described, and the host says why not.
    const Vec s21{2, 1}, s14b{1, 4}, st11{1, 1}, st44{4, 1};
    CHECK(describe(Call{Aten::mul, {TensorArg{s21, st11}, TensorArg{s14b, st44}}, 2}).empty());
    const Description pow15 = skc_torch::describe(Call{Aten::pow, {TensorArg{s23, st31}}, 1, 0, 1.5});
    REQUIRE(pow15.record.has_value());
    CHECK_EQ(skc_host::analyze(*pow15.record).reason,
             "Power: attr power 1.500000 is not supported (2, 3, 0.5, -0.5, -1, -2, 1 or 0)");
    const Vec st62{6, 2};
    CHECK_EQ(describe(Call{Aten::clone, {TensorArg{s23, st62}}, 1}),
             "Transpose: self (sizes [2,3], strides [6,2]) is not a permutation of a dense tensor");
    const Vec s234{2, 3, 4}, st_421{12, 4, 1}, s3{3};
    CHECK_EQ(describe(Call{
                 Aten::native_layer_norm, {TensorArg{s234, st_421}, TensorArg{s3, st1}, TensorArg{s3, st1}}, 3, 1}),
             "LayerNormV3: weight [3] and bias [3] are not the normalized shape [4]");
    // The gradients: equal dense shapes, relu's threshold 0, GELU's of more than one element; a
    // softmax gradient over another axis is described, and the host says why not.
    const Vec s32{3, 2}, st21{2, 1}, s1{1};
    CHECK_EQ(describe(Call{Aten::threshold_backward, {TensorArg{s23, st31}, TensorArg{s32, st21}}, 2}),
             "ReluGrad: grad_output [2,3] and self [3,2] differ in shape");
    CHECK_EQ(describe(Call{Aten::threshold_backward, {TensorArg{s23, st31}, TensorArg{s23, st31}}, 2, 0, 0.5}),
             "ReluGrad: threshold 0.500000 is not 0 (only relu's backward)");
    CHECK(describe(Call{Aten::threshold_backward, {TensorArg{s23, st31}, TensorArg{s23, st31}}, 2}).empty());
    CHECK_EQ(describe(Call{Aten::gelu_backward, {TensorArg{s23, st31}, TensorArg{s23, st13}}, 2, 1}),
             "GeluGrad: self is not contiguous (sizes [2,3], strides [1,3])");
    CHECK_EQ(describe(Call{Aten::gelu_backward, {TensorArg{s1, st1}, TensorArg{s1, st1}}, 2}),
             "GeluGrad: a GELU gradient of one element");
    CHECK_EQ(describe(Call{Aten::silu_backward, {TensorArg{s03, st31}, TensorArg{s03, st31}}, 2}),
             "SiluGrad: grad_output has no elements");
    const Description sg0 =
        skc_torch::describe(Call{Aten::softmax_backward_data, {TensorArg{s23, st31}, TensorArg{s23, st31}}, 2, 0});
    REQUIRE(sg0.record.has_value());
    CHECK_EQ(skc_host::analyze(*sg0.record).reason, "SoftmaxGrad: attr axes must name only the last axis");
    CHECK_EQ(describe(Call{Aten::native_layer_norm_backward,
                           {TensorArg{s234, st_421}, TensorArg{s234, st_421}, TensorArg{s23, st31},
                            TensorArg{s23, st31}, TensorArg{s3, st1}},
                           5,
                           1}),
             "LayerNormGradV3: weight [3] is not the normalized shape [4]");
    const Vec s231{2, 3, 1}, st_311{3, 1, 1};
    CHECK_EQ(describe(Call{Aten::native_layer_norm_backward,
                           {TensorArg{s231, st_311}, TensorArg{s231, st_311}, TensorArg{s231, st_311},
                            TensorArg{s231, st_311}, TensorArg{s1, st1}},
                           5,
                           1}),
             "LayerNormGradV3: rows of one or two elements (dx is rounding error times rstd^3)");
    // mean, cat, log_softmax, where and masked_fill: a mean or a log_softmax over another dim than
    // the last is described, and the host says why not; tensors that do not fit are not described.
    const Description mean0 = skc_torch::describe(Call{Aten::mean, {TensorArg{s23, st31}}, 1, 1});
    REQUIRE(mean0.record.has_value());
    CHECK_EQ(skc_host::analyze(*mean0.record).reason,
             "ReduceMean: axes [0] of x [2,3] are not the last ones: only a mean over trailing axes is supported");
    const Description mean1 = skc_torch::describe(Call{Aten::mean, {TensorArg{s23, st31}}, 1, 2, 0, 1});
    REQUIRE(mean1.record.has_value());
    CHECK(skc_host::analyze(*mean1.record).plan.has_value());
    CHECK_EQ(std::get<skc::TensorDesc>(mean1.record->outputs[0]).shape, skc::RuntimeShape{2, 1});
    const Description ls0 = skc_torch::describe(Call{Aten::log_softmax, {TensorArg{s23, st31}}, 1, 0});
    REQUIRE(ls0.record.has_value());
    CHECK_EQ(skc_host::analyze(*ls0.record).reason, "LogSoftmaxV2: attr axes must name only the last axis");
    const TensorArg cat_args[] = {TensorArg{s23, st31}, TensorArg{s34, st41}};
    Call cat{Aten::cat, {}, 0, 1};
    cat.list = cat_args;
    CHECK_EQ(describe(cat), "ConcatD: tensors[1] has shape [3,4], tensors[0] [2,3]: they must differ along dim 1 only");
    const TensorArg cat_empty[] = {TensorArg{s23, st31}, TensorArg{s03, st31}};
    cat.list = cat_empty;
    cat.i0 = 0;
    CHECK_EQ(describe(cat), "ConcatD: tensors[1] has no elements");
    const TensorArg cat_views[] = {TensorArg{s23, st13}, TensorArg{s23, st62}};
    cat.list = cat_views;
    const Description cat_ok = skc_torch::describe(cat);
    REQUIRE(cat_ok.record.has_value());
    CHECK(skc_host::analyze(*cat_ok.record).plan.has_value());
    const Vec s2{2}, s3v{3};
    CHECK_EQ(describe(Call{Aten::where, {TensorArg{s2, st1}, TensorArg{s3v, st1}, TensorArg{s3v, st1}}, 3}),
             "SelectV2: shapes [2], [3] and [3] do not broadcast");
    CHECK_EQ(describe(Call{Aten::masked_fill, {TensorArg{s23, st31}, TensorArg{s23, st13}}, 2}),
             "MaskedFill: mask is not contiguous (sizes [2,3], strides [1,3])");
    CHECK_EQ(describe(Call{Aten::masked_fill, {TensorArg{s23, st31}, TensorArg{s34, st41}}, 2}),
             "MaskedFill: shapes [2,3] and [3,4] do not broadcast");
    (void)s0;
}

TEST_CASE("elementwise_strides: the strides stock torch 1.13 gives a new elementwise output") {
    // Each case as torch printed it: the inputs' sizes and strides (a number is 0-dim), the output.
    struct Case {
        const char* what;
        std::vector<std::pair<Vec, Vec>> ins;
        Vec sizes, want;
    };
    const std::vector<Case> cases{
        {"[3,32,1].transpose(1,2) * 2", {{{3, 1, 32}, {32, 1, 1}}, {{}, {}}}, {3, 1, 32}, {32, 1, 1}},
        {"the same minus a row [1,32]", {{{3, 1, 32}, {32, 1, 1}}, {{1, 32}, {32, 1}}}, {3, 1, 32}, {32, 1, 1}},
        {"the same plus a dense [3,1,32] (one shape: row-major)",
         {{{3, 1, 32}, {32, 1, 1}}, {{3, 1, 32}, {32, 32, 1}}},
         {3, 1, 32},
         {32, 32, 1}},
        {"[4,1].t() * 2", {{{1, 4}, {1, 1}}, {{}, {}}}, {1, 4}, {1, 1}},
        {"[2,1,1,3] strides (3,3,3,1) * 2", {{{2, 1, 1, 3}, {3, 3, 3, 1}}, {{}, {}}}, {2, 1, 1, 3}, {3, 3, 3, 1}},
        {"[5,1,4] + [1,6,1]", {{{5, 1, 4}, {4, 4, 1}}, {{1, 6, 1}, {6, 1, 1}}}, {5, 6, 4}, {24, 4, 1}},
        {"[2,3,1].permute(2,0,1) * 1.5", {{{1, 2, 3}, {1, 3, 1}}, {{}, {}}}, {1, 2, 3}, {1, 3, 1}},
        {"where(c [1,2,3] (1,3,1), x, 0.0)",
         {{{1, 2, 3}, {1, 3, 1}}, {{1, 2, 3}, {1, 3, 1}}, {{}, {}}},
         {1, 2, 3},
         {1, 3, 1}},
        // Views (not dense): TensorIterator's general path, even with one input of the output's shape.
        {"x [2,4,6,16][..., 8:] * 2", {{{2, 4, 6, 8}, {384, 96, 16, 1}}, {{}, {}}}, {2, 4, 6, 8}, {192, 48, 8, 1}},
        {"x[..., ::2] * 2", {{{2, 4, 6, 8}, {384, 96, 16, 2}}, {{}, {}}}, {2, 4, 6, 8}, {192, 48, 8, 1}},
        {"x[:, 0:1, :, 2:] * 2", {{{2, 1, 6, 14}, {384, 96, 16, 1}}, {{}, {}}}, {2, 1, 6, 14}, {84, 84, 14, 1}},
        {"[3,2].t() + [2,3]", {{{2, 3}, {1, 2}}, {{2, 3}, {3, 1}}}, {2, 3}, {1, 2}},
        {"[2,3] + [3,2].t()", {{{2, 3}, {3, 1}}, {{2, 3}, {1, 2}}}, {2, 3}, {3, 1}},
        {"[4,1,16].expand(4,6,16) + [4,6,16]",
         {{{4, 6, 16}, {16, 0, 1}}, {{4, 6, 16}, {96, 16, 1}}},
         {4, 6, 16},
         {96, 16, 1}},
    };
    for (const Case& c : cases) {
        INFO(c.what);
        std::vector<TensorArg> args;
        for (const auto& in : c.ins)
            args.push_back(TensorArg{skc_torch::Dims(in.first), skc_torch::Dims(in.second),
                                     skc_torch::is_dense(skc_torch::Dims(in.first), skc_torch::Dims(in.second))});
        Vec got(c.sizes.size());
        const bool moved = args.size() == 2 ? skc_torch::elementwise_strides(c.sizes, {args[0], args[1]}, got)
                                            : skc_torch::elementwise_strides(c.sizes, {args[0], args[1], args[2]}, got);
        CHECK(got == c.want);
        Vec row_major(c.sizes.size());
        std::int64_t acc = 1;
        for (std::size_t d = c.sizes.size(); d-- > 0;) row_major[d] = acc, acc *= c.sizes[d];
        CHECK(moved == (got != row_major));
    }
}

}  // namespace examples_torch_mapping_test
