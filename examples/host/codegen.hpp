// examples/host/codegen.hpp: shape-specialised C++ source for one recorded op.
//
// generate_kernel(op, symbol, target) returns a self-contained C++ translation unit (it includes no
// header: it uses the compiler's built-ins, __builtin_memcpy, __builtin_sqrtf and the like) defining
//
//     extern "C" void <symbol>(const float* const* inputs, float* const* outputs);
//
// with the pointer convention of plan.hpp, for the instruction set of `target` (target.hpp: the
// vector width; host_op_compiler compiles it with kernel_flags(target)). Every size and stride is
// a constant and every loop has a compile-time trip count; there is no run-time shape arithmetic.
// What the generator does with the sizes it knows:
//   - MatMul / BatchMatMul / FusedMatMul: C in register tiles of 8 rows x 2 vectors (16 floats a
//     vector, 32 registers: AVX-512) or 6 x 2 (8 or 4 floats, 16 registers), each a chain of
//     fused multiply-adds over 128 rows of K with A's element broadcast, added to C block by block
//     (so the rounding error grows as a BLAS's blocked sums, not with all of K). The loops around
//     the tiles are a BLAS's: blocks of 256 rows of A by 256 of K, copied into the tiles' order
//     where that pays, and op(B)'s block for each panel of columns likewise, by the panel's first
//     tile as it reads op(B) where it can (thread-local buffers);
//     elsewhere the tiles read A and B in place.
//     Columns past the last whole vector go through a zero-padded panel. The bias is added to the
//     tile in registers once its sums are complete, the activation right after the tile is
//     stored (still in L1), out of line. One row of A, or at most 64 outputs, with A's rows and
//     op(B)'s columns contiguous along K (a matrix-vector product) is a dot product an output
//     instead, summed in doubles (in floats where the values could leave float's range).
//   - Gelu (both forms) and SoftmaxV2: vectors all the way, with the exp and erf of the vector
//     prelude (vector_prelude()); the last elements of a row through a zero-padded vector.
//   - LayerNorm: a row at a time, its two sums (shifted by the row's first element) in vector lanes,
//     in blocks summed from zero (emit_cascade()), so that a row of 500,000 rounds as torch's.
//   - Transpose: a memcpy per run where the last output dims are contiguous in the input too,
//     else 8 x 8 blocks transposed in vector registers where the sizes allow.
//   - Tanh, Swish, Rsqrt and Power's square roots: vectors too, with the prelude's exp and the
//     square root instruction.
//   - Add, Sub, Mul, RealDiv, Axpy: a loop of constant count per dim of the broadcast (the
//     output's dims merged where the operands allow), the last one a run the compiler vectorises
//     for the target, a broadcast operand read once a run.
//   - Relu, Neg, Power's other exponents: the generic loops with constant counts, which the
//     compiler vectorises for the target.
//   - ReluGrad likewise; GeluGrad (both forms) and SiluGrad: the prelude's vector functions of dy
//     and x, the tail through zero-padded vectors; SoftmaxGrad: a row at a time, sum(dy * y) in
//     vector lanes, then (dy - sum) * y; LayerNormGradV3 likewise, its two row sums in cascaded lanes,
//     dgamma and dbeta added a row at a time.
//   - ReduceMean: a row at a time, its sum in vector lanes in blocks added from zero (the cascade
//     of kernels::sum(), emit_row_sum()), then one division; LogSoftmaxV2 as SoftmaxV2 (its short
//     rows in registers), the row's log once; LogSoftmaxGrad: sum(dy) as ReduceMean's, then
//     dy - e^y sum in vectors.
//   - ConcatD: y in order, each input's contiguous runs copied in vectors (an element loop where a
//     view's last dim is strided); SelectV2 and MaskedFill: the broadcast loops of the binary ops, the
//     condition read as bytes, a run whose condition is broadcast copied (or filled) whole.
// The elementwise ops, MaskedFill and SoftmaxV2 take no __restrict pointers: like their generic
// twins they may run in place (plan.hpp), each element read before the same index is written.
// Results differ from the generic kernels' by rounding only: fused multiply-adds, the prelude's
// exp and erf (and Cephes' tanh), sums in vector lanes. Add, Sub, Mul, RealDiv, Neg, Rsqrt and
// Power round the same correctly rounded operations as the generic kernels (and torch's), in the
// same order, and agree with them bit for bit; ConcatD, SelectV2 and MaskedFill copy bits.
// generated_tolerance() is the bound the tests (tests/examples/host_kernels_test.cpp, also against
// a double-precision reference) and the benchmark (benchmarks/host_kernels_bench.cpp) hold them to. The source compiles
// warning-free with kernel_flags() and `-Wall -Wextra -Wpedantic`, uses at most 6 KiB of stack, and several sources can
// be concatenated into one translation unit (the vector prelude is guarded; the rest is inside the function).
#pragma once

#include <algorithm>
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

#include "kernels.hpp"
#include "plan.hpp"
#include "target.hpp"

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
    /// Appends `text` (whole lines) as it is.
    Src& raw(const std::string& text) {
        out_ += text;
        return *this;
    }
    [[nodiscard]] std::string str() const { return out_; }

private:
    std::string out_;
    int depth_ = 0;
};

inline std::string n(std::int64_t v) { return std::to_string(v); }

/// The preprocessor test for __builtin_shufflevector (Clang; GCC from 12 on), which the generated
/// code's lane folds and register transposes use.
constexpr const char* has_shufflevector = "#if defined(__clang__) || __GNUC__ >= 12";

/// The register tile of C: `rows` x `nv` vectors of `w` floats.
struct Tiling {
    std::int64_t w = 4;   // floats per vector
    std::int64_t mr = 6;  // rows of a full tile
    std::int64_t nv = 2;  // vectors across a full tile
    [[nodiscard]] std::int64_t nr() const { return nv * w; }
    /// Rows of op(B) a tile sums from zero before it adds them to C (emit_tile()): the generic
    /// kernel's block (kernels::matmul_kb), so the paths' blocked sums round alike. Blocks of 32
    /// rows (4 KiB, as the stack could hold) add K / 32 partial sums into C: `linear` of K = 4,096
    /// then has 2x stock torch's largest error.
    [[nodiscard]] std::int64_t kb() const { return kernels::matmul_kb; }
    /// Rows of op(B) in one block of K of the loops (emit_blocks()), read directly or packed:
    /// kc_sums blocks of kb(), each tile summing them one after another with C's tile in L1.
    [[nodiscard]] std::int64_t kc() const;
    /// The packed block of op(B) (packed_block()): kc by nr.
    [[nodiscard]] std::int64_t b_block_floats() const { return kc() * nr(); }
    /// The packed block of A (packed_a_block()): a block of rows (a_block_rows, and the last rows,
    /// fewer than a tile) by kc.
    [[nodiscard]] std::int64_t a_block_floats() const;
};

/// 8 x 2 vectors with 32 vector registers (AVX-512: 16 accumulators), 6 x 2 with 16.
inline Tiling tiling(std::int64_t w) { return Tiling{w, w == 16 ? 8 : 6, 2}; }

/// Rows of A in one block of rows at most (codegen's row_block_rows()), before the last rows, fewer
/// than a tile, which join the last block.
constexpr std::int64_t a_block_rows = 256;
inline std::int64_t Tiling::a_block_floats() const { return (a_block_rows + mr) * kc(); }

/// The loops around the tiles, a BLAS's: blocks of rows of A outermost (row_block_rows()), then
/// the blocks of K; each block of A (rows by kc) is packed once (emit_pack_a()) and stays in L2
/// while every panel of columns reads it, op(B)'s block for the panel packed (or read in place),
/// and C's block is read back once a block of K. Each block of rows reads all of op(B) again, so
/// the blocks are as tall as A's packed block holds (a_block_rows), whatever the width of C: blocks
/// held to 4 MiB of C (32 rows at N = 32,000, a vocabulary's logits) read op(B) 8 times and ran at
/// 0.55x OpenBLAS's AVX-512 kernels; blocks of 128 rows at N = 2,048 were 4 % to 6 % slower.
/// Reading A in place, the tiles of a transposed A ([2048, 256]^T x [256, 512], a weight gradient
/// dY^T X) read K rows 8 KiB apart, which L1 keeps 12 of: 0.76x OpenBLAS's AVX-512 kernels.
inline std::int64_t row_block_rows(const Tiling& t) { return std::max(t.mr, a_block_rows / t.mr * t.mr); }

/// Rows of K in one group of blocked sums, and the floats of the group sums' buffer (group_sums(),
/// thread-local, as the packed blocks). A product of more than sum_group_rows rows of K whose block
/// of rows of C fits in the buffer sums in two levels: the blocks of kb() rows of a group add up in
/// the buffer, and each group's total is added to C. One level, C's partial sum grows with K and
/// each block's rounding grows with it: at K = 16,384 the largest error of [16, K] x [K, 48] and
/// of `linear` [8, K] x [40, K]^T + bias was 1.3x to 2.3x stock torch's (OpenBLAS's Haswell
/// kernels); with groups of 2,048 rows, 0.4x to 0.7x.
constexpr std::int64_t sum_group_rows = kernels::matmul_group;
constexpr std::int64_t group_sums_floats = std::int64_t{64} << 10;

inline bool grouped_sums(const MatMulPlan& p, const Tiling& t) {
    const std::int64_t rows = std::min(p.m, row_block_rows(t) + t.mr);  // a block of rows of C at most
    return p.k > sum_group_rows && rows * p.n <= group_sums_floats;
}

/// The blocked sums (Tiling::kb()) in one block of K of the loops. C is read back and written once
/// a block of the loops, each tile adding its blocked sums into its C (in L1) in between: against
/// one sum a block of the loops, two were 1 % to 3 % faster at [256, 512] x [512, 512 to 2,048],
/// 5 % to 7 % on dY^T X and `linear` [256, 512] x [2048, 512]^T, and [256, 512] x [512, 32000]
/// went from 0.85x to 0.94x OpenBLAS's AVX-512 kernels (C, 32 MB, once less through memory). Four
/// (op(B)'s packed block 64 KiB, past L1) were 5 % to 15 % slower than two below N = 16,384 and
/// level with OpenBLAS at N = 32,000.
constexpr std::int64_t kc_sums = 2;
inline std::int64_t Tiling::kc() const { return kc_sums * kb(); }

/// The name of a matrix product's packed block of A ("a") or op(B) ("b") of `floats` floats: the
/// size is in the name, so that translation units built for other widths never share it.
inline std::string buffer_name(const char* what, std::int64_t floats) {
    return std::string("packed_") + what + "_" + n(floats);
}

/// The packed blocks, one a thread and shared library: inline functions of a named namespace,
/// hidden, so that the translation units of one package share them and another package keeps its
/// own: the library's thread-local blocks are allocated for every thread that calls into it, 152
/// KiB with AVX-512 once (and the group sums' 256 KiB where a product sums in groups), not once a
/// product. Out of line, and the result opaque (the empty asm):
/// Clang 14 propagates the thread-local address into the caller, where it keeps values in
/// xmm16-31 across __tls_get_addr, whose first call in a thread may run glibc's memset, which uses
/// them (a 1 x 1 product read garbage so).
inline std::string block_buffers(std::int64_t w) {
    const Tiling t = tiling(w);
    Src s;
    s.line("namespace skc_blocks {");
    for (const auto& [what, floats] :
         {std::pair{"a", t.a_block_floats()}, std::pair{"b", t.b_block_floats()}, std::pair{"s", group_sums_floats}}) {
        s.open("[[maybe_unused]] __attribute__((visibility(\"hidden\"), noinline)) inline float* " +
               buffer_name(what, floats) + "()");
        s.line("alignas(64) static thread_local float b[" + n(floats) + "];");
        s.line("float* p = b;");
        s.line("__asm__(\"\" : \"+r\"(p));");
        s.line("return p;");
        s.close();
    }
    s.line("}  // namespace skc_blocks");
    return s.str();
}

/// The vector helpers of width `w` floats (namespace skc_v<w>), emitted once per translation
/// unit: load/store (unaligned), splat, select, max, exp, the activations, horizontal sum and max;
/// for the matrix products the packed blocks (packed_block(), packed_a_block()), and the dot form's loads into
/// doubles (vdload()) and largest |x| (vabsmax()).
/// exp: x clamped to [-87, 88] (NaN stays NaN), x = k ln2 + r with |r| <= ln2 / 2 (ln2 in two
/// parts), e^r by its Taylor polynomial to r^7 / 7!, times 2^k built in the exponent bits: within 2
/// ulp of e^x; below ln(FLT_MIN) = -87.34 it is 0, never a subnormal, whose arithmetic takes a CPU
/// many times longer (stock torch's exp gives subnormals there, under 1.2e-38: the one difference).
/// The activations give what stock torch's CPU kernels give, NaN, infinities and signed zeros
/// included: relu keeps NaN and -0.0 (x < 0 ? 0 : x); gelu_tanh(v) = 0.5 v (1 + tanh(u)) =
/// v / (1 + e^(-2u)), which keeps its relative accuracy where 1 + tanh(u) cancels, and is
/// 0.5 v 0 (-0.0, NaN for -inf) where tanh(u) rounds to -1 (u < -8.6643, as torch's tanh has it);
/// gelu_erf(v) = h + h erf(z), h = v / 2, z = v / sqrt(2), erf(|z|) = 1 - r(t) t e^(-z^2) with
/// t = 1 / (1 + 0.3275911 |z|) (Abramowitz and Stegun 7.1.26, absolute error below 1.5e-7) and
/// the sign of z: the form of the oneDNN kernel torch runs for a dense GELU of two elements or
/// more, so the result is exactly +0.0 where torch's is (every v below -5.54, and -0.0). One
/// element runs torch's scalar formula instead (emit(UnaryPlan)).
inline std::string vector_prelude(std::int64_t w) {
    const std::string ns = "skc_v" + n(w), guard = "SKC_HOST_VECTORS_" + n(w);
    Src s;
    s.line("#ifndef " + guard);
    s.line("#define " + guard);
    s.raw(block_buffers(w));
    s.line("namespace {");
    s.line("namespace " + ns + " {");
    s.line("typedef float vf __attribute__((vector_size(" + n(4 * w) + ")));");
    s.line("typedef int vi __attribute__((vector_size(" + n(4 * w) + ")));");
    s.line("[[maybe_unused]] constexpr __PTRDIFF_TYPE__ W = " + n(w) + ";");
    s.line("[[maybe_unused]] inline vf vload(const float* p) { vf v; __builtin_memcpy(&v, p, sizeof v); return v; }");
    s.line("[[maybe_unused]] inline void vstore(float* p, vf v) { __builtin_memcpy(p, &v, sizeof v); }");
    s.line("[[maybe_unused]] inline vf vsplat(float x) { return vf{} + x; }");
    s.line("[[maybe_unused]] inline vf vsel(vi m, vf a, vf b) { return (vf)((m & (vi)a) | (~m & (vi)b)); }");
    s.line("[[maybe_unused]] inline vf vmax(vf a, vf b) { return vsel(a > b, a, b); }");
    // e^x for x in [-87, 88]: polynomials in Estrin's form (a short chain of dependent operations:
    // the loops are bound by latency, not by the number of operations).
    s.open("[[maybe_unused]] inline vf vexp_in_range(vf x)");
    s.line("const vf t = x * 1.44269504088896341f + 12582912.0f;");
    s.line("const vf k = t - 12582912.0f;");
    s.line("const vi e = ((vi)t - 0x4B400000 + 127) << 23;");
    s.line("const vf r = (x - k * 0.693145751953125f) - k * 1.428606765330187e-6f;");
    s.line("const vf r2 = r * r, r4 = r2 * r2;");
    s.line("const vf p = (1.0f + r) + r2 * (0.5f + r * (1.0f / 6.0f)) +");
    s.line("             r4 * ((1.0f / 24.0f + r * (1.0f / 120.0f)) + r2 * (1.0f / 720.0f + r * (1.0f / 5040.0f)));");
    s.line("return p * (vf)e;");
    s.close();
    s.open("[[maybe_unused]] inline vf vexp(vf x)");
    s.line("const vf y = vexp_in_range(vsel(x > 88.0f, vsplat(88.0f), vsel(x < -87.0f, vsplat(-87.0f), x)));");
    s.line("return vsel(x < -87.33654475f, vf{}, y);");
    s.close();
    // e^x as the C library's off the range too: for x up to ln(FLT_MAX) (e^(x - 1) e, whose 2^k is
    // still a float), infinity above it (so that x / (1 + e^(-x)) is -0.0 where torch's is).
    s.open("[[maybe_unused]] inline vf vexp_wide(vf x)");
    s.line(
        "const vf hi = vexp_in_range(vsel(x > 88.72283172607422f, vsplat(87.0f), x) - 1.0f) * 2.71828182845904524f;");
    s.line("return vsel(x > 88.72283172607422f, vsplat(__builtin_inff()), vsel(x > 88.0f, hi, vexp(x)));");
    s.close();
    // e^x with the subnormal results the C library's (and torch's Sleef's) exp gives below
    // ln(FLT_MIN): from -104 to -87, e^(x + 32 ln2) 2^-32 (a power of two: the only rounding that of
    // the subnormal result); 0 below -104 and at -inf. LogSoftmaxGrad's e^y needs them: a subnormal
    // e^y times an infinite sum is infinite, 0 times it NaN.
    s.open("[[maybe_unused]] inline vf vexp_sub(vf x)");
    s.line("const vf c = vsel(x < -104.0f, vsplat(-104.0f), vsel(x > -87.0f, vsplat(-87.0f), x));");
    s.line("const vf lo = vexp_in_range(c + 22.18070977791825f) * 2.3283064365386963e-10f;");
    s.line("return vsel(x < -104.0f, vf{}, vsel(x < -87.0f, lo, vexp(x)));");
    s.close();
    s.line("[[maybe_unused]] inline vf vrelu(vf v) { return vsel(v < 0.0f, vf{}, v); }");
    // A matrix product's packed blocks (of op(B): packed_block(); of A: packed_a_block()) are
    // thread-local, off the stack: a kernel keeps to a few KiB of stack, for it runs on threads it
    // does not own (block_buffers()).
    const Tiling t = tiling(w);
    s.line("[[maybe_unused]] inline float* packed_block() { return skc_blocks::" +
           buffer_name("b", t.b_block_floats()) + "(); }");
    s.line("[[maybe_unused]] inline float* packed_a_block() { return skc_blocks::" +
           buffer_name("a", t.a_block_floats()) + "(); }");
    s.line("[[maybe_unused]] inline float* group_sums() { return skc_blocks::" + buffer_name("s", group_sums_floats) +
           "(); }");
    // Doubles, half a vector of floats at a time: the dot form of a matrix product sums in them.
    s.line("typedef float vh __attribute__((vector_size(" + n(2 * w) + ")));");
    s.line("typedef double vd __attribute__((vector_size(" + n(4 * w) + ")));");
    s.open("[[maybe_unused]] inline vd vdload(const float* p)");
    s.line("vh h;");
    s.line("__builtin_memcpy(&h, p, sizeof h);");
    // GCC 12 converts in quarters and reassembles them (the kernel 1.6x slower); its built-in is
    // one instruction, as Clang's conversion is.
    if (w == 16 || w == 8) {
        s.line(w == 16 ? "#if defined(__AVX512F__) && !defined(__clang__)"
                       : "#if defined(__AVX__) && !defined(__clang__)");
        s.line(w == 16 ? "return __builtin_ia32_cvtps2pd512_mask(h, vd{}, static_cast<unsigned char>(0xff), 4);"
                       : "return __builtin_ia32_cvtps2pd256(h);");
        s.line("#else");
    }
    s.line("return __builtin_convertvector(h, vd);");
    if (w == 16 || w == 8) s.line("#endif");
    s.close();
    // The largest |x| of n floats, through their bits: an infinity or a NaN is above every finite
    // value (a float compare would drop the NaN).
    s.open("[[maybe_unused]] inline float vabsmax(const float* p, __PTRDIFF_TYPE__ n)");
    s.line("const __PTRDIFF_TYPE__ whole = n - n % W;");
    s.line("vi m = vi{};");
    s.open("for (__PTRDIFF_TYPE__ q = 0; q < whole; q += W)");
    s.line("vi b;");
    s.line("__builtin_memcpy(&b, p + q, sizeof b);");
    s.line("b &= 0x7fffffff;");
    s.line("m = (b > m) ? b : m;");
    s.close();
    s.line("vi b = vi{};");
    s.line("__builtin_memcpy(&b, p + whole, static_cast<unsigned long>(n - whole) * sizeof(float));");
    s.line("b &= 0x7fffffff;");
    s.line("m = (b > m) ? b : m;");
    s.line("int r = 0;");
    s.line("for (__PTRDIFF_TYPE__ i = 0; i < W; ++i) r = m[i] > r ? m[i] : r;");
    s.line("float f;");
    s.line("__builtin_memcpy(&f, &r, sizeof f);");
    s.line("return f;");
    s.close();
    // The square root as the instruction (correctly rounded, as std::sqrt): a loop of std::sqrt
    // does not vectorise, since the C library's sets errno for a negative argument.
    s.open("[[maybe_unused]] inline vf vsqrt(vf v)");
    const char* builtin = w == 16 ? "defined(__AVX512F__)" : w == 8 ? "defined(__AVX__)" : "defined(__SSE__)";
    s.line(std::string("#if ") + builtin + (w == 16 ? " && defined(__clang__)" : ""));
    s.line(w == 16  ? "return __builtin_ia32_sqrtps512(v, 4);"
           : w == 8 ? "return __builtin_ia32_sqrtps256(v);"
                    : "return __builtin_ia32_sqrtps(v);");
    if (w == 16) {
        s.line("#elif defined(__AVX512F__)");
        s.line("return __builtin_ia32_sqrtps512_mask(v, v, static_cast<unsigned short>(0xffff), 4);");
    }
    s.line("#else");
    s.line("vf r;");
    s.line("for (__PTRDIFF_TYPE__ i = 0; i < W; ++i) r[i] = __builtin_sqrtf(v[i]);");
    s.line("return r;");
    s.line("#endif");
    s.close();
    s.line("[[maybe_unused]] inline vf vrsqrt(vf v) { return 1.0f / vsqrt(v); }");
    // tanh as Cephes' tanhf: 1 - 2 / (e^(2|x|) + 1) with x's sign from |x| = 0.625 on (exactly 1
    // above 8.664339742, as torch's Sleef tanh has it), else x (1 + x^2 P(x^2)), which keeps -0.0
    // and subnormals; NaN stays NaN (the second branch).
    s.open("[[maybe_unused]] inline vf vtanh(vf x)");
    s.line("const vf a = (vf)((vi)x & 0x7fffffff);");
    s.line("const vf big = vsel(a > 8.664339742f, vsplat(1.0f), 1.0f - 2.0f / (vexp(a + a) + 1.0f));");
    s.line("const vf z = x * x;");
    s.line(
        "const vf p = (((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) "
        "* z - 3.33332819422e-1f;");
    s.line("const vf small = x * (1.0f + z * p);");
    s.line("return vsel(a >= 0.625f, (vf)((vi)big | ((vi)x & (vi{} - 0x7fffffff - 1))), small);");
    s.close();
    // silu (Swish, scale 1): torch's formula x / (1 + e^(-x)): NaN at -inf (-inf / inf), -0.0 where
    // e^(-x) overflows.
    s.line("[[maybe_unused]] inline vf vsilu(vf x) { return x / (1.0f + vexp_wide(-x)); }");
    ;
    s.open("[[maybe_unused]] inline vf vgelu_tanh(vf v)");
    s.line("const vf u = 0.7978845608f * (v + 0.044715f * v * v * v);");
    s.line("return vsel(u < -8.664339742f, 0.5f * v * vf{}, v / (1.0f + vexp(-2.0f * u)));");
    s.close();
    s.open("[[maybe_unused]] inline vf vgelu_erf(vf v)");
    s.line("const vf z = v * 0.70710678118654752f;");
    s.line("const vf a = (vf)((vi)z & 0x7fffffff);");
    s.line("const vf t = 1.0f / (0.3275911f * a + 1.0f);");
    s.line(
        "const vf r = (((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f;");
    s.line("const vf e = 1.0f - r * t * vexp(-(z * z));");
    s.line("const vf h = 0.5f * v;");
    s.line("return h + h * (vf)((vi)e | ((vi)z & (vi{} - 0x7fffffff - 1)));");
    s.close();
    // The activations' gradients (GradKind), dx from dy and x in torch's forms (kernels.hpp): the
    // erf form as oneDNN's, (0.5 + t) + 0.5 erf(r) with erf as vgelu_erf's (exactly 0 where erf(r)
    // is -1 and 0.5 + t rounds to 0.5), the tanh form with vtanh (exactly -1 where torch's is),
    // silu's with e^(-x) to infinity (s = 0: -0.0 times dy, NaN at -inf).
    s.open("[[maybe_unused]] inline vf vgelu_erf_grad(vf dy, vf x)");
    s.line("const vf r = x * 0.70710678118654752f;");
    s.line("const vf q = vexp(-(r * r));");
    s.line("const vf t = r * 0.56418958354775628f * q;");
    s.line("const vf a = (vf)((vi)r & 0x7fffffff);");
    s.line("const vf w = 1.0f / (0.3275911f * a + 1.0f);");
    s.line(
        "const vf p = (((1.061405429f * w - 1.453152027f) * w + 1.421413741f) * w - 0.284496736f) * w + 0.254829592f;");
    s.line("const vf e = (vf)((vi)(1.0f - p * w * q) | ((vi)r & (vi{} - 0x7fffffff - 1)));");
    s.line("return dy * ((0.5f + t) + 0.5f * e);");
    s.close();
    s.open("[[maybe_unused]] inline vf vgelu_tanh_grad(vf dy, vf x)");
    s.line("const vf x_sq = x * x;");
    s.line("const vf th = vtanh(0.7978845608f * (x + 0.044715f * (x_sq * x)));");
    s.line("const vf right = 0.5f * x * (1.0f - th * th) * (0.7978845608f * (1.0f + 3.0f * 0.044715f * x_sq));");
    s.line("return dy * (0.5f * (1.0f + th) + right);");
    s.close();
    s.open("[[maybe_unused]] inline vf vsilu_grad(vf dy, vf x)");
    s.line("const vf sg = 1.0f / (1.0f + vexp_wide(-x));");
    s.line("return dy * sg * (1.0f + x * (1.0f - sg));");
    s.close();
    // An activation over a tile of C in memory (`cols` a multiple of W), out of line: inlined into
    // a matrix product's tile loop, a function as long as GELU's makes the compiler keep its
    // constants on the stack (Clang: up to 8 KiB a kernel).
    for (const char* f : {"vrelu", "vgelu_tanh", "vgelu_erf"}) {
        s.open(std::string("[[maybe_unused]] __attribute__((noinline)) void ") + f +
               "_tile(float* c, __PTRDIFF_TYPE__ ld, __PTRDIFF_TYPE__ rows, __PTRDIFF_TYPE__ cols)");
        s.line("for (__PTRDIFF_TYPE__ r = 0; r < rows; ++r)");
        s.line(std::string("    for (__PTRDIFF_TYPE__ v = 0; v < cols; v += W) vstore(c + r * ld + v, ") + f +
               "(vload(c + r * ld + v)));");
        s.close();
    }
    // Across the lanes: halves folded onto each other (log2 W steps) where the compiler has
    // __builtin_shufflevector (Clang, GCC 12 on), else one lane at a time.
    std::string fold;  // one `v = op(v, <v rotated by half>)` per step, `op` in place of "OP"
    for (std::int64_t half = w / 2; half >= 1; half /= 2) {
        std::string idx;
        for (std::int64_t i = 0; i < w; ++i) idx += (i ? ", " : "") + n((i + half) % w);
        fold += "    v = OP(v, __builtin_shufflevector(v, v, " + idx + "));\n";
    }
    auto replace_op = [&](const std::string& op) {
        std::string out = fold;
        for (std::size_t at = out.find("OP"); at != std::string::npos; at = out.find("OP", at + op.size()))
            out.replace(at, 2, op);
        return out;
    };
    s.line(has_shufflevector);
    s.line("[[maybe_unused]] inline vf vadd(vf a, vf b) { return a + b; }");
    s.open("[[maybe_unused]] inline float vhsum(vf v)");
    s.raw(replace_op("vadd"));
    s.line("return v[0];");
    s.close();
    s.open("[[maybe_unused]] inline float vhmax(vf v)");
    s.raw(replace_op("vmax"));
    s.line("return v[0];");
    s.close();
    s.line("#else");
    s.open("[[maybe_unused]] inline float vhsum(vf v)");
    s.line("float t[W];");
    s.line("vstore(t, v);");
    s.line("float r = t[0];");
    s.line("for (__PTRDIFF_TYPE__ i = 1; i < W; ++i) r += t[i];");
    s.line("return r;");
    s.close();
    s.open("[[maybe_unused]] inline float vhmax(vf v)");
    s.line("float t[W];");
    s.line("vstore(t, v);");
    s.line("float r = t[0];");
    s.line("for (__PTRDIFF_TYPE__ i = 1; i < W; ++i) r = t[i] > r ? t[i] : r;");
    s.line("return r;");
    s.close();
    s.line("#endif");
    s.line("}  // namespace " + ns);
    s.line("}  // namespace");
    s.line("#endif");
    return s.str();
}

/// The vector function of UnaryKind `k` (a function of the prelude), or nullptr for the kinds the
/// generated code computes with scalar_fn() in a loop the compiler vectorises.
inline const char* vector_act(UnaryKind k) {
    switch (k) {
    case UnaryKind::relu: return "vrelu";
    case UnaryKind::gelu_tanh: return "vgelu_tanh";
    case UnaryKind::gelu_erf: return "vgelu_erf";
    case UnaryKind::tanh: return "vtanh";
    case UnaryKind::silu: return "vsilu";
    case UnaryKind::rsqrt: return "vrsqrt";
    case UnaryKind::sqrt: return "vsqrt";
    default: return nullptr;
    }
}

/// Whether the unary op of kind `k` runs a vector function of the prelude (else scalar_fn()).
inline bool vector_unary(UnaryKind k) { return k != UnaryKind::relu && vector_act(k) != nullptr; }

/// UnaryKind `k` of the float `v` (a C++ expression) as a C++ expression, for the kinds without a
/// vector function: the formulas of kernels.hpp, as torch's kernels compute them.
inline std::string scalar_fn(UnaryKind k, const std::string& v) {
    switch (k) {
    case UnaryKind::relu: return v + " < 0.0f ? 0.0f : " + v;
    case UnaryKind::neg: return "-" + v;
    case UnaryKind::square: return v + " * " + v;
    case UnaryKind::cube: return v + " * " + v + " * " + v;
    case UnaryKind::reciprocal: return "1.0f / " + v;
    case UnaryKind::inv_square: return "1.0f / (" + v + " * " + v + ")";
    case UnaryKind::copy: return v;
    case UnaryKind::one: return "1.0f";
    default: throw std::logic_error("scalar_fn: a kind with a vector function");
    }
}

/// The operand strides as constants (the ones `names` lists: SAM, SAK, SBK, SBN).
inline void emit_strides(Src& s, const MatMulPlan& p, std::initializer_list<std::string_view> names) {
    std::string line;
    for (std::string_view name : names) {
        const std::int64_t v = name == "SAM" ? p.a.outer : name == "SAK" ? p.a.k : name == "SBK" ? p.b.k : p.b.outer;
        line += (line.empty() ? "constexpr idx " : ", ") + std::string(name) + " = " + n(v);
    }
    s.line(line + ";");
    for (std::string_view name : names) s.line("static_cast<void>(" + std::string(name) + ");");
}

/// Where a register tile reads its operands. op(B): B itself (its rows contiguous) or the packed
/// block bp (nr floats a row). A: A itself or the packed block ap, where the tile at row i0 of the
/// block of rows at ib has its `rows` elements of each p of the block of K contiguous, from
/// ap + (i0 - ib) kc (emit_pack_a()).
struct Sources {
    bool a_packed = false, b_packed = false;
    bool b_fill = false;  // reads B in place and stores each row it loads into bp (b_packed false)
};

/// One block of sums of a register tile (emit_tile()): rows i0 .. i0 + rows, `nv` vectors of
/// columns from j0, the `kb` rows of op(B) from k0 + q0 (of the block of K of the loops at k0, `kc`
/// rows), its operands from `src`. The products are summed from 0; then, unless `first`, C's partial
/// sums are added (a blocked sum, as a BLAS's: each block's rounding error is its own, not carried
/// along all of K); `last`: the epilogue is applied (a C++ bool expression each); `cols`: how many
/// of the tile's columns are C's (the others are padding).
inline void emit_tile_sum(Src& s, const MatMulPlan& p, const Tiling& t, std::int64_t rows, std::int64_t nv,
                          std::int64_t cols, const std::string& k0, std::int64_t kb, std::int64_t kc,
                          const Sources& src, const std::string& first, const std::string& last) {
    const std::int64_t w = t.w;
    const bool full = cols == nv * w;
    s.open("");
    s.line("vf acc[" + n(rows * nv) + "];");
    auto at = [&](std::int64_t r, std::int64_t v) { return "acc[" + n(r * nv + v) + "]"; };
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t v = 0; v < nv; ++v) s.line(at(r, v) + " = vf{};");
    s.open("for (idx p = q0; p < q0 + " + n(kb) + "; ++p)");
    for (std::int64_t v = 0; v < nv; ++v) {
        const std::string b =
            src.b_packed ? "bp + p * " + n(nv * w) + " + " + n(v * w) : "B + (" + k0 + " + p) * SBK + j0 + " + n(v * w);
        s.line("const vf b" + n(v) + " = vload(" + b + ");");
        if (src.b_fill) s.line("vstore(bp + p * " + n(nv * w) + " + " + n(v * w) + ", b" + n(v) + ");");
    }
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::string a = src.a_packed ? "ap[(i0 - ib) * " + n(kc) + " + p * " + n(rows) + " + " + n(r) + "]"
                                           : "A[(i0 + " + n(r) + ") * SAM + (" + k0 + " + p) * SAK]";
        s.line("const float a" + n(r) + " = " + a + ";");
        for (std::int64_t v = 0; v < nv; ++v) s.line(at(r, v) + " += a" + n(r) + " * b" + n(v) + ";");
    }
    s.close();
    // Rows of the tile in C (or in the group's sums) at `base`, the tile's first element: added to
    // the block's sums (padding lanes zero), or stored.
    auto add_rows = [&](const std::string& base) {
        for (std::int64_t r = 0; r < rows; ++r) {
            const std::string row = base + " + " + n(r) + " * N";
            if (full) {
                for (std::int64_t v = 0; v < nv; ++v) s.line(at(r, v) + " += vload(" + row + " + " + n(v * w) + ");");
            } else {
                s.open("");  // one row's buffer at a time: the rows' scopes share its stack slot
                s.line("float t[" + n(nv * w) + "] = {};");
                s.line("__builtin_memcpy(t, " + row + ", " + n(cols) + " * sizeof(float));");
                for (std::int64_t v = 0; v < nv; ++v) s.line(at(r, v) + " += vload(t + " + n(v * w) + ");");
                s.close();
            }
        }
    };
    const std::string cb = "C + i0 * N + j0";
    const bool grouped = grouped_sums(p, t);
    std::string dst = cb;
    if (grouped) {
        // Two levels (grouped_sums()): the blocks of a group of sum_group_rows rows of K add up in
        // the group's sums, each group's total then into C.
        const std::string at_k = "(" + k0 + " + q0)", g = n(sum_group_rows);
        const std::string gfirst = "(" + at_k + " % " + g + " == 0)",
                          glast = "((" + at_k + " + " + n(kb) + ") % " + g + " == 0 || " + last + ")";
        s.line("float* const gs = gsum + (i0 - ib) * N + j0;");
        s.open("if (!" + gfirst + ")");
        add_rows("gs");
        s.close();
        s.open("if (" + glast + " && " + at_k + " >= " + g + ")");
        add_rows(cb);
        s.close();
        s.line("float* const dst = " + glast + " ? " + cb + " : gs;");
        dst = "dst";
    } else {
        s.open("if (!" + first + ")");
        add_rows(cb);
        s.close();
    }
    // The sum's end: the bias, then + 0, as stock's BLAS stores C = 0 + alpha AB (+ beta bias):
    // products that all underflow to -0 (fused multiply-adds round a tiny negative to -0) store +0;
    // or, with keep_negative_zero, AB + bias as it is (a -0.0 bias then keeps the -0).
    s.open("if (" + last + ")");
    if (p.bias) {
        if (full) {
            for (std::int64_t v = 0; v < nv; ++v)
                s.line("const vf bias" + n(v) + " = vload(bias + j0 + " + n(v * w) + ");");
        } else {
            s.line("float bt[" + n(nv * w) + "] = {};");
            s.line("__builtin_memcpy(bt, bias + j0, " + n(cols) + " * sizeof(float));");
            for (std::int64_t v = 0; v < nv; ++v) s.line("const vf bias" + n(v) + " = vload(bt + " + n(v * w) + ");");
        }
    }
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t v = 0; v < nv; ++v)
            s.line(at(r, v) + " = " + at(r, v) + (p.bias ? " + bias" + n(v) : std::string()) +
                   (p.keep_negative_zero ? ";" : " + vf{};"));
    s.close();
    // The activation, once the tile is stored, from memory (L1), by the prelude's out-of-line
    // <act>_tile.
    const std::string act = p.activation ? vector_act(*p.activation) : "";
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::string crow = dst + " + " + n(r) + " * N";
        if (full) {
            for (std::int64_t v = 0; v < nv; ++v) s.line("vstore(" + crow + " + " + n(v * w) + ", " + at(r, v) + ");");
        } else {
            s.open("");
            s.line("float t[" + n(nv * w) + "];");
            for (std::int64_t v = 0; v < nv; ++v) s.line("vstore(t + " + n(v * w) + ", " + at(r, v) + ");");
            if (!act.empty()) s.line("if (" + last + ") " + act + "_tile(t, 0, 1, " + n(nv * w) + ");");
            s.line("__builtin_memcpy(" + crow + ", t, " + n(cols) + " * sizeof(float));");
            s.close();
        }
    }
    if (!act.empty() && full)
        s.line("if (" + last + ") " + act + "_tile(C + i0 * N + j0, N, " + n(rows) + ", " + n(nv * w) + ");");
    s.close();
}

/// `count` rows in blocks of `block`: body(rows) for each, with `var` its first row (a loop variable
/// over the whole blocks, or a constant where there is one, and for the last, partial block).
template <class Body>
inline void emit_blocks(Src& s, const std::string& var, std::int64_t count, std::int64_t block, Body&& body) {
    const std::int64_t full = count - count % block;
    if (full > 0) {
        s.open(full == block
                   ? std::string()
                   : "for (idx " + var + " = 0; " + var + " < " + n(full) + "; " + var + " += " + n(block) + ")");
        if (full == block) s.line("constexpr idx " + var + " = 0;");
        body(block);
        s.close();
    }
    if (count % block != 0) {
        s.open("");
        s.line("constexpr idx " + var + " = " + n(full) + ";");
        body(count % block);
        s.close();
    }
}

/// One register tile over `kc` rows of K from k0, in blocks of t.kb() (emit_blocks(), q0). Each
/// block's products are summed from 0; then, unless it is K's first, C's partial sums are added (a
/// blocked sum, as a BLAS's: each block's rounding error is its own, not carried along all of K);
/// after K's last, the epilogue is applied; `cols`: how many of the tile's columns are C's (the
/// others are padding).
inline void emit_tile(Src& s, const MatMulPlan& p, const Tiling& t, std::int64_t rows, std::int64_t nv,
                      std::int64_t cols, const std::string& k0, std::int64_t kc, const Sources& src) {
    emit_blocks(s, "q0", kc, t.kb(), [&](std::int64_t kb) {
        const std::string first = "(" + k0 + " + q0 == 0)", last = "(" + k0 + " + q0 + " + n(kb) + " == K)";
        emit_tile_sum(s, p, t, rows, nv, cols, k0, kb, kc, src, first, last);
    });
}

/// Rows of C: whole tiles from row `first` up to `end` (C++ expressions; loop variables allowed),
/// then `tail` rows (fewer than a tile) from `end` where `tail_if` holds.
struct Rows {
    std::string first = "0", end;
    std::int64_t tail = 0;
    std::string tail_if = "true";
};

/// fn(count) for each tile of `rows`, i0 (its first row) defined: the whole tiles of `mr` rows in a
/// loop, then the tail.
template <class Fn>
inline void each_tile(Src& s, const Rows& rows, std::int64_t mr, Fn&& fn) {
    if (rows.first != rows.end) {
        s.open("for (idx i0 = " + rows.first + "; i0 < " + rows.end + "; i0 += " + n(mr) + ")");
        fn(mr);
        s.close();
    }
    if (rows.tail > 0) {
        s.open(rows.tail_if == "true" ? std::string() : "if (" + rows.tail_if + ")");
        s.line("const idx i0 = " + rows.end + ";");
        fn(rows.tail);
        s.close();
    }
}

/// The dot form's float sums (emit_dot_rows()): vectors of K each block sums from zero before it is
/// added, the generic kernel's block (the tiles sum blocks of Tiling::kb() rows, the same count).
constexpr std::int64_t direct_kb = kernels::matmul_kb;

/// A block of an operand to pack: `rows` x `cols` elements of `name` from row `row0` and column
/// `col0` (C++ expressions), its strides by name (emit_strides()), and whether the rows' stride is 1.
struct PackSource {
    std::string name, row0, row_stride, col0, col_stride;
    bool unit_rows = false;
    std::int64_t rows = 0, cols = 0;
};

/// The packing copy: dst[p * ds + c] = the source's element (p, c). It runs along the source's
/// contiguous dim: along p where its rows' stride is 1 (a transposed op(B) along K, A's rows along
/// K), in 8 x 8 blocks transposed in registers where both counts are multiples of 8
/// (transpose_prelude()); else along c. The source's offsets stay in the form (row0 + p) stride +
/// (col0 + c) stride: Clang 14 keeps a base pointer computed a panel in stack slots across the
/// panels (10 KiB for [300, 500]^T x [300, 530] + bias).
inline void emit_pack(Src& s, const std::string& dst, std::int64_t ds, const PackSource& f) {
    const std::string at = "(" + f.row0 + " + p) * " + f.row_stride + " + (" + f.col0 + " + c) * " + f.col_stride;
    const std::string copy = dst + "[p * " + n(ds) + " + c] = " + f.name + "[" + at + "];";
    if (f.unit_rows && f.rows % 8 == 0 && f.cols % 8 == 0) {
        s.open("for (idx c = 0; c < " + n(f.cols) + "; c += 8)");
        s.line("for (idx p = 0; p < " + n(f.rows) + "; p += 8) skc_t8::tr8(" + f.name + " + " + at + ", " +
               f.col_stride + ", " + dst + " + p * " + n(ds) + " + c, " + n(ds) + ");");
    } else if (f.unit_rows) {
        s.open("for (idx c = 0; c < " + n(f.cols) + "; ++c)");
        s.line("for (idx p = 0; p < " + n(f.rows) + "; ++p) " + copy);
    } else {
        s.open("for (idx p = 0; p < " + n(f.rows) + "; ++p)");
        s.line("for (idx c = 0; c < " + n(f.cols) + "; ++c) " + copy);
    }
    s.close();
}

/// One block of K (rows k0 .. k0 + kc of op(B)) of the panel of `cols` columns at j0, `nv` vectors
/// wide, the tiles of the rows `rows`. Direct: op(B)'s rows are contiguous and the panel is whole
/// vectors; the tiles read B. Packed: the tiles read bp (packed_block()), the block's rows the
/// panel's width apart. Where op(B)'s rows are contiguous and the panel whole vectors, the first
/// tile reads B in place and stores each row it loads into bp, the copy hidden among its fused
/// multiply-adds (a copy ahead of the tiles was 5 % of [64, 128] x [128, 128], a panel's 128 rows
/// 512 bytes apart); else the block is first copied (through op(B)'s strides, zero-padded to nv
/// vectors).
inline void emit_panel_block(Src& s, const MatMulPlan& p, const Tiling& t, const Rows& rows, std::int64_t nv,
                             std::int64_t cols, const Sources& src, std::int64_t kc) {
    const std::int64_t nr = nv * t.w;
    if (src.b_packed && p.b.outer == 1 && cols == nr && rows.first != rows.end) {
        // The first tile reads the block in place and fills bp as it goes; the others read bp.
        s.open("");
        s.line("const idx i0 = " + rows.first + ";");
        emit_tile(s, p, t, t.mr, nv, cols, "k0", kc, Sources{src.a_packed, false, true});
        s.close();
        Rows rest = rows;
        rest.first = "(" + rows.first + " + " + n(t.mr) + ")";
        each_tile(s, rest, t.mr, [&](std::int64_t count) { emit_tile(s, p, t, count, nv, cols, "k0", kc, src); });
        return;
    }
    if (src.b_packed) {
        emit_pack(s, "bp", nr, PackSource{"B", "k0", "SBK", "j0", "SBN", p.b.k == 1, kc, cols});
        if (cols < nr) {
            s.open("for (idx p = 0; p < " + n(kc) + "; ++p)");
            s.line("for (idx c = " + n(cols) + "; c < " + n(nr) + "; ++c) bp[p * " + n(nr) + " + c] = 0.0f;");
            s.close();
        }
    }
    each_tile(s, rows, t.mr, [&](std::int64_t count) { emit_tile(s, p, t, count, nv, cols, "k0", kc, src); });
}

/// Copies one block of A, the rows `rows` (whole tiles, then the tail) by the `kc` of K from k0,
/// into ap in the tiles' order (Sources): each tile's rows for one p side by side, its p in order.
inline void emit_pack_a(Src& s, const MatMulPlan& p, const Rows& rows, std::int64_t mr, std::int64_t kc) {
    each_tile(s, rows, mr, [&](std::int64_t r) {
        s.line("float* __restrict d = ap + (i0 - ib) * " + n(kc) + ";");
        emit_pack(s, "d", r, PackSource{"A", "k0", "SAK", "i0", "SAM", p.a.k == 1, kc, r});
    });
}

/// Whether the blocks of A are packed: where more than one panel reads each (else each tile reads it
/// once), and A is stored transposed (a tile's rows for one p are then one short run, its p a row of
/// A apart) or past packed_a_rows_bytes (a tile's rows are then far apart, the block past L1). The
/// copy costs more than it saves on a small A in rows ([64, 512] x [512, 128]: 3 % slower).
constexpr std::int64_t packed_a_rows_bytes = std::int64_t{256} << 10;

inline bool packs_a(const MatMulPlan& p, const Tiling& t) {
    return p.n > t.nr() && (p.a.k != 1 || p.m * p.k * static_cast<std::int64_t>(sizeof(float)) > packed_a_rows_bytes);
}

/// Whether op(B) is packed where its rows are contiguous (and read in place otherwise): where each
/// panel's block is read by the tiles of at least b_pack_tiles x mr rows. In place, its rows are N
/// floats apart and share L1's sets (N = 2,048: 8 KiB apart, all in the same set).
constexpr std::int64_t b_pack_tiles = 4;

/// Rows of A by op(B), both contiguous along K, where C has one row or at most dot_outputs
/// elements (a matrix-vector product: `linear` of one token; mm by a column): each element of C a
/// dot product along K. A tile would sum K in one chain an output, and with few outputs its
/// largest error is one draw's luck: up to 40x stock torch's on a product of one element.
///   - In range (the row's largest |a| times the column's largest |b| times K at most FLT_MAX, so
///     no product and no partial sum leaves float's range in any order): the sum in doubles,
///     rounded once to float with the bias (half vectors converted, four accumulators; the last
///     K % W terms one by one). The result is then float's closest to the exact sum, as near as
///     any float can be.
///   - Else (infinities, NaN, or values whose float sums overflow): in floats, W lanes, K in blocks
///     of direct_kb vectors each summed from zero, as a BLAS splits K across its lanes; an
///     overflow or an inf - inf then gives what a float sum gives.
/// Then + 0 (as the tile's end) and the activation.
constexpr std::int64_t dot_outputs = 64;

inline bool dot_form(const MatMulPlan& p, std::int64_t w) {
    return p.a.k == 1 && p.b.k == 1 && p.k >= w && (p.m == 1 || p.m * p.n <= dot_outputs);
}

inline void emit_dot_rows(Src& s, const MatMulPlan& p, std::int64_t w) {
    const std::int64_t kv = p.k / w, whole = kv * w, block = direct_kb, h = w / 2;
    const std::string bias = p.bias ? " + bias[j]" : "";
    s.line("constexpr idx SAM = " + n(p.a.outer) + ", SBN = " + n(p.b.outer) + ";");
    s.loop("i", "0", "M");
    s.line("const float* __restrict ar = A + i * SAM;");
    s.line("float* __restrict cr = C + i * N;");
    s.line("const double amax = vabsmax(ar, K);");
    s.loop("j", "0", "N");
    s.line("const float* __restrict bc = B + j * SBN;");
    // A NaN maximum fails the compare, as an infinity does.
    s.open("if (amax * vabsmax(bc, K) * static_cast<double>(K) <= 3.4028234663852886e38)");
    s.line("vd s0 = vd{}, s1 = vd{}, s2 = vd{}, s3 = vd{};");
    const std::int64_t quads = p.k / (4 * h);
    if (quads > 0) {
        s.open("for (idx q = 0; q < " + n(quads * 4 * h) + "; q += " + n(4 * h) + ")");
        for (std::int64_t r = 0; r < 4; ++r)
            s.line("s" + n(r) + " += vdload(ar + q + " + n(r * h) + ") * vdload(bc + q + " + n(r * h) + ");");
        s.close();
    }
    for (std::int64_t q = quads * 4 * h; q + h <= p.k; q += h)
        s.line("s0 += vdload(ar + " + n(q) + ") * vdload(bc + " + n(q) + ");");
    const std::int64_t halves = p.k / h * h;
    s.line("const vd sv = (s0 + s1) + (s2 + s3);");
    s.line("double sum = sv[0];");
    s.line("for (idx e = 1; e < " + n(h) + "; ++e) sum += sv[e];");
    if (halves < p.k) s.line("for (idx q = " + n(halves) + "; q < K; ++q) sum += static_cast<double>(ar[q]) * bc[q];");
    if (p.keep_negative_zero) {
        // The sum rounded once with the bias; where that is zero, its sign as the float sum's: a
        // sum of products that all underflow is -0, plus the bias.
        s.line("const float r = static_cast<float>(sum + static_cast<double>(bias[j]));");
        s.line("cr[j] = r != 0.0f ? r : static_cast<float>(sum) + bias[j];");
    } else {
        s.line("cr[j] = static_cast<float>(sum" + std::string(p.bias ? " + static_cast<double>(bias[j])" : "") +
               ") + 0.0f;");
    }
    s.line("continue;");
    s.close();
    s.line("vf acc = vf{};");
    auto run = [&](const std::string& from, std::int64_t count) {
        s.open("");
        s.line("vf part = vf{};");
        s.line("for (idx q = 0; q < " + n(count) + "; ++q) part += vload(ar + " + from + " + q * W) * vload(bc + " +
               from + " + q * W);");
        s.line("acc += part;");
        s.close();
    };
    if (kv / block > 0) {
        s.open("for (idx b = 0; b < " + n(kv / block) + "; ++b)");
        run("b * " + n(block) + " * W", block);
        s.close();
    }
    if (kv % block > 0) run(n(kv / block * block) + " * W", kv % block);
    s.line("float sum = vhsum(acc);");
    if (whole < p.k) s.line("for (idx q = " + n(whole) + "; q < K; ++q) sum += ar[q] * bc[q];");
    s.line("cr[j] = sum" + bias + (p.keep_negative_zero ? ";" : " + 0.0f;"));
    s.close();
    s.close();
    if (!p.activation) return;
    // The activation in whole vectors (<act>_tile's columns), the last N % W through a padded one.
    const std::string act = vector_act(*p.activation);
    const std::int64_t nw = p.n - p.n % w;
    if (nw > 0) s.line(act + "_tile(C, N, M, " + n(nw) + ");");
    if (nw < p.n) {
        s.loop("i", "0", "M");
        s.line("float t[W] = {};");
        s.line("__builtin_memcpy(t, C + i * N + " + n(nw) + ", " + n(p.n - nw) + " * sizeof(float));");
        s.line(act + "_tile(t, 0, 1, W);");
        s.line("__builtin_memcpy(C + i * N + " + n(nw) + ", t, " + n(p.n - nw) + " * sizeof(float));");
        s.close();
    }
}

/// C = op(A) op(B) (+ bias, activation) for one batch, in register tiles of t.mr rows by t.nv
/// vectors. Panels of t.nr() columns, then the rest: whole vectors, then the last columns, fewer
/// than a vector, zero-padded (packed); op(B)'s rows read in place where they are contiguous and
/// fewer than b_pack_tiles tiles read them, else packed. Each element of
/// C is the sum over p = 0 .. K-1 in order, with fused multiply-adds, in blocks of K each summed
/// from zero and then added to C, so it differs from the generic kernel's by rounding only. The
/// loops around the tiles run in the order c_block_bytes describes; the sums are the same in any
/// order.
inline void emit_matmul_body(Src& s, const MatMulPlan& p, const Tiling& t) {
    if (dot_form(p, t.w)) {
        emit_dot_rows(s, p, t.w);
        return;
    }
    emit_strides(s, p, {"SAM", "SAK", "SBK", "SBN"});
    const bool contiguous = p.b.outer == 1;
    const std::int64_t nr = t.nr(), full_cols = p.n - p.n % nr;
    const std::int64_t rest = p.n % nr, rest_vectors = rest / t.w, last = rest % t.w;
    const std::int64_t full_rows = p.m - p.m % t.mr, mc = row_block_rows(t);
    const bool pack_a = packs_a(p, t), pack_b_direct = std::min(mc, p.m) >= b_pack_tiles * t.mr;
    const bool uses_bp = !contiguous || last != 0 || pack_b_direct;
    if (uses_bp) s.line("float* __restrict bp = packed_block();");
    if (pack_a) s.line("float* __restrict ap = packed_a_block();");
    const bool grouped = grouped_sums(p, t);
    if (grouped) s.line("float* __restrict gsum = group_sums();");
    // fn(nv, cols, packed) for every panel, j0 defined: the full ones, then the rest in whole
    // vectors, then the last columns, fewer than a vector (packed).
    auto each_panel = [&](auto&& fn) {
        if (full_cols > 0) {
            s.open("for (idx j0 = 0; j0 < " + n(full_cols) + "; j0 += " + n(nr) + ")");
            fn(t.nv, nr, !contiguous);
            s.close();
        }
        if (rest_vectors > 0) {
            s.open("");
            s.line("constexpr idx j0 = " + n(full_cols) + ";");
            fn(rest_vectors, rest_vectors * t.w, !contiguous);
            s.close();
        }
        if (last != 0) {
            s.open("");
            s.line("constexpr idx j0 = " + n(p.n - last) + ";");
            fn(1, last, true);
            s.close();
        }
    };
    // The pointers opaque in each block of K: Clang 14 otherwise keeps what every panel computes from
    // them in stack slots across the loops (8 KiB for [500, 300] x [530, 300]^T + bias, relu).
    const std::string opaque = std::string("__asm__(\"\" : \"+r\"(A), \"+r\"(B), \"+r\"(C)") +
                               (p.bias ? ", \"+r\"(bias)" : "") + (uses_bp ? ", \"+r\"(bp)" : "") +
                               (pack_a ? ", \"+r\"(ap)" : "") + (grouped ? ", \"+r\"(gsum)" : "") + ");";
    auto row_block = [&](const Rows& rows) {
        emit_blocks(s, "k0", p.k, t.kc(), [&](std::int64_t kc) {
            s.line(opaque);
            if (pack_a) emit_pack_a(s, p, rows, t.mr, kc);
            each_panel([&](std::int64_t nv, std::int64_t cols, bool packed) {
                const Sources src{pack_a, packed || pack_b_direct};
                emit_panel_block(s, p, t, rows, nv, cols, src, kc);
            });
        });
    };
    // Blocks of mc rows (whole tiles); the last one also has the last rows, fewer than a tile.
    if (mc >= full_rows) {
        s.line("constexpr idx ib = 0;");
        s.line("static_cast<void>(ib);");
        row_block(Rows{"0", n(full_rows), p.m % t.mr});
        return;
    }
    s.open("for (idx ib = 0; ib < " + n(full_rows) + "; ib += " + n(mc) + ")");
    s.line("const idx iend = ib + " + n(mc) + " < " + n(full_rows) + " ? ib + " + n(mc) + " : " + n(full_rows) + ";");
    row_block(Rows{"ib", "iend", p.m % t.mr, "iend == " + n(full_rows)});
    s.close();
}

inline void emit(Src& s, const MatMulPlan& p, std::int64_t w) {
    const Tiling t = tiling(w);
    s.line("using namespace skc_v" + n(w) + ";");
    s.line("constexpr idx M = " + n(p.m) + ", K = " + n(p.k) + ", N = " + n(p.n) + ";");
    s.line("static_cast<void>(M);");
    s.line("static_cast<void>(K);");
    if (p.bias) s.line("const float* __restrict bias = inputs[2];");
    if (p.batch == 1) {
        s.line("const float* __restrict A = inputs[0];");
        s.line("const float* __restrict B = inputs[1];");
        s.line("float* __restrict C = outputs[0];");
        emit_matmul_body(s, p, t);
        return;
    }
    s.line("constexpr idx BATCH = " + n(p.batch) + ";");
    s.loop("t", "0", "BATCH");
    s.line("const float* __restrict A = inputs[0]" + (p.a.batch == 0 ? std::string() : " + t * " + n(p.a.batch)) + ";");
    s.line("const float* __restrict B = inputs[1]" + (p.b.batch == 0 ? std::string() : " + t * " + n(p.b.batch)) + ";");
    s.line("float* __restrict C = outputs[0] + t * (M * N);");
    emit_matmul_body(s, p, t);
    s.close();
}

/// Add / Sub / Mul / RealDiv: a loop of constant count over each dim of the plan, the last
/// innermost, with constant strides; an operand broadcast along the last dim is read once a run.
/// y may be x1 or x2 where that operand has y's shape (in place), hence no __restrict; such an
/// operand is then read through y (one copy of the loops per operand that may be y), as
/// kernels::binary_run does, so that the run vectorises without an overlap check.
inline void emit(Src& s, const BinaryPlan& p, std::int64_t /*w: scalar code*/) {
    // Axpy: x1 + alpha x2, which -ffp-contract=fast makes one fused multiply-add (kernel_flags()).
    const std::string op = p.kind == BinaryKind::add   ? " + "
                           : p.kind == BinaryKind::sub ? " - "
                           : p.kind == BinaryKind::mul ? " * "
                           : p.kind == BinaryKind::div ? " / "
                                                       : " + " + float_literal(p.alpha) + " * ";
    const std::size_t r = p.dims.size();
    std::vector<std::int64_t> ys(r);  // y's dense strides
    std::int64_t acc = 1;
    for (std::size_t d = r; d-- > 0;) ys[d] = acc, acc *= p.dims[d];
    s.line("const float* x1 = inputs[0];");
    s.line("const float* x2 = inputs[1];");
    s.line("float* y = outputs[0];");
    // The loops reading x1 through `a` and x2 through `b`.
    auto loops = [&](const std::string& a, const std::string& b) {
        std::string yi, ai, bi;
        auto term = [&](std::string& e, const std::string& v, std::int64_t stride) {
            if (stride != 0) e += (e.empty() ? "" : " + ") + v + (stride == 1 ? "" : " * " + n(stride));
        };
        for (std::size_t d = 0; d + 1 < r; ++d) {
            const std::string v = "i" + n(static_cast<std::int64_t>(d));
            s.loop(v, "0", n(p.dims[d]));
            term(yi, v, ys[d]), term(ai, v, p.a[d]), term(bi, v, p.b[d]);
        }
        auto at = [](const std::string& e) { return e.empty() ? std::string("0") : e; };
        // The run's i-th element at stride `st` (1 for a dense operand, any for a view's).
        auto plus_i = [](const std::string& e, std::int64_t st) {
            const std::string i = st == 1 ? "i" : "i * " + n(st);
            return e.empty() ? i : e + " + " + i;
        };
        const bool a_run = p.a[r - 1] != 0, b_run = p.b[r - 1] != 0;
        if (!a_run) s.line("const float sa = " + a + "[" + at(ai) + "];");
        if (!b_run) s.line("const float sb = " + b + "[" + at(bi) + "];");
        s.line("for (idx i = 0; i < " + n(p.dims[r - 1]) + "; ++i) y[" + plus_i(yi, 1) +
               "] = " + (a_run ? a + "[" + plus_i(ai, p.a[r - 1]) + "]" : std::string("sa")) + op +
               (b_run ? b + "[" + plus_i(bi, p.b[r - 1]) + "]" : std::string("sb")) + ";");
        for (std::size_t d = 0; d + 1 < r; ++d) s.close();
    };
    struct Variant {
        std::string cond, a, b;
    };
    std::vector<Variant> in_place;
    if (p.a == ys) in_place.push_back({"x1 == y", "y", "x2"});
    if (p.b == ys) in_place.push_back({"x2 == y", "x1", "y"});
    for (std::size_t v = 0; v < in_place.size(); ++v) {
        s.open((v == 0 ? "if (" : "else if (") + in_place[v].cond + ")");
        loops(in_place[v].a, in_place[v].b);
        s.close();
    }
    if (!in_place.empty()) s.open("else");
    loops("x1", "x2");
    if (!in_place.empty()) s.close();
}

/// `y[i] = f(x[i])` for NUM floats from the pointers `x` and `y` of the generated code, f a vector
/// function of the prelude: whole vectors, then the last NUM % W floats through a zero-padded
/// vector. y may be x: each vector is read before it is written.
inline void emit_vector_map(Src& s, std::int64_t num, std::int64_t w, const std::string& x, const std::string& y,
                            const std::string& f) {
    const std::int64_t whole = num - num % w, rest = num % w;
    if (whole > 0)
        s.line("for (idx i = 0; i < " + n(whole) + "; i += W) vstore(" + y + " + i, " + f + "(vload(" + x + " + i)));");
    if (rest > 0) {
        s.open("");
        s.line("float t[W] = {};");
        s.line("__builtin_memcpy(t, " + x + " + " + n(whole) + ", " + n(rest) + " * sizeof(float));");
        s.line("vstore(t, " + f + "(vload(t)));");
        s.line("__builtin_memcpy(" + y + " + " + n(whole) + ", t, " + n(rest) + " * sizeof(float));");
        s.close();
    }
}

/// The unary ops; y may be x (in place) when x is dense, hence no __restrict. Gelu, Tanh, Swish,
/// Rsqrt and the square roots of Power run the prelude's vector functions; the others (Relu, Neg,
/// Power) the generic loop with a constant count (in place it reads y itself, see the binary ops),
/// which the compiler vectorises. x a view: loops of constant count over the plan's outer dims, and
/// in them the same code over one run of its last dim (contiguous in x and y).
inline void emit(Src& s, const UnaryPlan& p, std::int64_t w) {
    if (p.kind == UnaryKind::gelu_erf && p.n == 1) {  // torch's own scalar path for one element
        s.line("outputs[0][0] = 0.5f * inputs[0][0] * (1.0f + __builtin_erff(inputs[0][0] * 0.70710678118654752f));");
        return;
    }
    if (vector_unary(p.kind)) s.line("using namespace skc_v" + n(w) + ";");
    s.line("const float* x = inputs[0];");
    s.line("float* y = outputs[0];");
    const std::size_t r = p.dims.size();
    if (r <= 1) {
        if (vector_unary(p.kind)) {
            emit_vector_map(s, p.n, w, "x", "y", vector_act(p.kind));
            return;
        }
        s.line("constexpr idx NUM = " + n(p.n) + ";");
        s.open("if (x == y)");
        s.line("for (idx i = 0; i < NUM; ++i) y[i] = " + scalar_fn(p.kind, "y[i]") + ";");
        s.close().open("else");
        s.line("for (idx i = 0; i < NUM; ++i) y[i] = " + scalar_fn(p.kind, "x[i]") + ";");
        s.close();
        return;
    }
    std::string xo, yo;  // the run's offsets in x and y
    auto term = [&](std::string& e, const std::string& v, std::int64_t stride) {
        if (stride != 0) e += (e.empty() ? "" : " + ") + v + (stride == 1 ? "" : " * " + n(stride));
    };
    std::int64_t ys = p.dims[r - 1];  // y's dense stride along the dim
    std::vector<std::int64_t> y_strides(r - 1);
    for (std::size_t d = r - 1; d-- > 0;) y_strides[d] = ys, ys *= p.dims[d];
    for (std::size_t d = 0; d + 1 < r; ++d) {
        const std::string v = "i" + n(static_cast<std::int64_t>(d));
        s.loop(v, "0", n(p.dims[d]));
        term(xo, v, p.x[d]), term(yo, v, y_strides[d]);
    }
    s.line("const float* xr = x + " + (xo.empty() ? std::string("0") : xo) + ";");
    s.line("float* yr = y + " + (yo.empty() ? std::string("0") : yo) + ";");
    if (vector_unary(p.kind)) emit_vector_map(s, p.dims[r - 1], w, "xr", "yr", vector_act(p.kind));
    else s.line("for (idx i = 0; i < " + n(p.dims[r - 1]) + "; ++i) yr[i] = " + scalar_fn(p.kind, "xr[i]") + ";");
    for (std::size_t d = 0; d + 1 < r; ++d) s.close();
}

/// The vector function of GradKind `k` (a function of the prelude), or nullptr for relu, which
/// the generated code computes in a loop the compiler vectorises.
inline const char* vector_grad(GradKind k) {
    switch (k) {
    case GradKind::gelu_erf: return "vgelu_erf_grad";
    case GradKind::gelu_tanh: return "vgelu_tanh_grad";
    case GradKind::silu: return "vsilu_grad";
    default: return nullptr;
    }
}

/// ReluGrad, GeluGrad, SiluGrad: dx = g(dy, x) for NUM floats. Relu's is the generic loop with a
/// constant count (x <= 0 ? 0 : dy, which the compiler vectorises); the others run the prelude's
/// vector functions over whole vectors, then the last NUM % W floats through zero-padded vectors.
inline void emit(Src& s, const GradPlan& p, std::int64_t w) {
    s.line("const float* __restrict dy = inputs[0];");
    s.line("const float* __restrict x = inputs[1];");
    s.line("float* __restrict dx = outputs[0];");
    const char* f = vector_grad(p.kind);
    if (f == nullptr) {
        s.loop("i", "0", n(p.n));
        s.line("const float g = dy[i];  // read whatever x is, as SelectPlan's emit() says why");
        s.line("dx[i] = x[i] <= 0.0f ? 0.0f : g;");
        s.close();
        return;
    }
    const std::int64_t whole = p.n - p.n % w, rest = p.n % w;
    s.line("using namespace skc_v" + n(w) + ";");
    if (whole > 0)
        s.line("for (idx i = 0; i < " + n(whole) + "; i += W) vstore(dx + i, " + f + "(vload(dy + i), vload(x + i)));");
    if (rest > 0) {
        s.open("");
        s.line("float a[W] = {}, b[W] = {};");
        s.line("__builtin_memcpy(a, dy + " + n(whole) + ", " + n(rest) + " * sizeof(float));");
        s.line("__builtin_memcpy(b, x + " + n(whole) + ", " + n(rest) + " * sizeof(float));");
        s.line("vstore(a, " + std::string(f) + "(vload(a), vload(b)));");
        s.line("__builtin_memcpy(dx + " + n(whole) + ", a, " + n(rest) + " * sizeof(float));");
        s.close();
    }
}

/// SoftmaxGrad over the last axis, a row at a time in vectors of W floats: s = the sum of dy * y
/// (in W lanes, then across them; the last COLS % W columns one by one), then dx = (dy - s) * y.
inline void emit(Src& s, const SoftmaxGradPlan& p, std::int64_t w) {
    const std::int64_t whole = p.cols - p.cols % w;
    s.line("using namespace skc_v" + n(w) + ";");
    s.line("constexpr idx ROWS = " + n(p.rows) + ", COLS = " + n(p.cols) + ";");
    s.loop("r", "0", "ROWS");
    s.line("const float* __restrict yr = inputs[0] + r * COLS;");
    s.line("const float* __restrict dyr = inputs[1] + r * COLS;");
    s.line("float* __restrict dxr = outputs[0] + r * COLS;");
    s.line("float sum = 0.0f;");
    if (whole > 0) {
        s.open("");
        s.line("vf acc = vf{};");
        s.line("for (idx c = 0; c < " + n(whole) + "; c += W) acc += vload(dyr + c) * vload(yr + c);");
        s.line("sum = vhsum(acc);");
        s.close();
    }
    if (whole < p.cols) s.line("for (idx c = " + n(whole) + "; c < COLS; ++c) sum += dyr[c] * yr[c];");
    if (whole > 0)
        s.line("for (idx c = 0; c < " + n(whole) +
               "; c += W) vstore(dxr + c, (vload(dyr + c) - sum) * vload(yr + c));");
    if (whole < p.cols) s.line("for (idx c = " + n(whole) + "; c < COLS; ++c) dxr[c] = (dyr[c] - sum) * yr[c];");
    s.close();
}

/// Vectors a block of a row sum adds from zero (in 4 accumulators of 16 terms each), and block
/// sums a group adds from zero: kernels::sum()'s cascade (sum_block and sum_group) in vector lanes.
constexpr std::int64_t sum_block_vectors = 64, sum_group_blocks = 16;

/// kernels::sum()'s cascade over a row's first `nv` vectors, the layout alone: blocks of
/// sum_block_vectors vectors, each summed from zero by `block`; groups of sum_group_blocks block
/// sums summed from zero ("g_" + acc, starting at `zero`); the group sums, then the last blocks'
/// sums, added in order to the caller's vf accumulators `accs`. `block(base, len, to)` emits the
/// sum of `len` vectors from vector `base` (a C++ expression) added to to + acc for each acc.
template <class Block>
inline void emit_cascade_layout(Src& s, std::int64_t nv, const std::vector<std::string>& accs, const std::string& zero,
                                Block&& block) {
    const std::int64_t per_group = sum_block_vectors * sum_group_blocks;
    const std::int64_t groups = nv / per_group, blocks = nv % per_group / sum_block_vectors;
    const std::int64_t left = nv % sum_block_vectors;
    auto group = [&](const std::string& first, const std::string& count) {
        s.open("");
        for (const std::string& a : accs) s.line("vf g_" + a + " = " + zero + ";");
        s.open("for (idx b = 0; b < " + count + "; ++b)");
        block("(" + first + " + b) * " + n(sum_block_vectors), sum_block_vectors, std::string("g_"));
        s.close();
        for (const std::string& a : accs) s.line(a + " += g_" + a + ";");
        s.close();
    };
    if (groups > 0) {
        s.open("for (idx g = 0; g < " + n(groups) + "; ++g)");
        group("g * " + n(sum_group_blocks), n(sum_group_blocks));
        s.close();
    }
    if (blocks > 0) group(n(groups * sum_group_blocks), n(blocks));
    if (left > 0) block(n((groups * sum_group_blocks + blocks) * sum_block_vectors), left, std::string());
}

/// A pass over a row's first `nv` vectors in that cascade, each block in one accumulator an acc,
/// so that a row of n vectors rounds as kernels::sum() does, not as one sum of n terms. `body(c)`
/// emits one vector's statements at column `c` (a C++ expression), adding into "b_" + acc for
/// each acc.
template <class Body>
inline void emit_cascade(Src& s, std::int64_t nv, const std::vector<std::string>& accs, Body&& body) {
    emit_cascade_layout(s, nv, accs, "vf{}", [&](const std::string& base, std::int64_t len, const std::string& to) {
        s.open("");
        for (const std::string& a : accs) s.line("vf b_" + a + " = vf{};");
        s.open("for (idx j = 0; j < " + n(len) + "; ++j)");
        s.line("const idx c = (" + base + " + j) * W;");
        body("c");
        s.close();
        for (const std::string& a : accs) s.line(to + a + " += b_" + a + ";");
        s.close();
    });
}

/// LayerNormGradV3, a row at a time in vectors of W floats (the last COLS % W columns one by one):
/// ds = sum(dy x gamma) and db = sum(dy gamma) in W lanes (emit_cascade()), then across them; then, as torch,
/// dx = rstd dy gamma + b x + c, and dgamma += dy (rstd x + (-rstd mean)), dbeta += dy for the row.
inline void emit(Src& s, const LayerNormGradPlan& p, std::int64_t w) {
    const std::int64_t whole = p.cols - p.cols % w;
    s.line("using namespace skc_v" + n(w) + ";");
    s.line("constexpr idx ROWS = " + n(p.rows) + ", COLS = " + n(p.cols) + ";");
    s.line("const float* __restrict dy = inputs[0];");
    s.line("const float* __restrict x = inputs[1];");
    s.line("const float* __restrict rstd = inputs[2];");
    s.line("const float* __restrict mean = inputs[3];");
    s.line("const float* __restrict gamma = inputs[4];");
    s.line("float* __restrict dx = outputs[0];");
    s.line("float* __restrict dgamma = outputs[1];");
    s.line("float* __restrict dbeta = outputs[2];");
    s.line("constexpr float SCALE = 1.0f / static_cast<float>(COLS);");
    s.line("for (idx c = 0; c < COLS; ++c) dgamma[c] = 0.0f, dbeta[c] = 0.0f;");
    s.loop("r", "0", "ROWS");
    s.line("const float* __restrict dyr = dy + r * COLS;");
    s.line("const float* __restrict xr = x + r * COLS;");
    s.line("float* __restrict dxr = dx + r * COLS;");
    s.line("float ds = 0.0f, db = 0.0f;");
    if (whole > 0) {
        s.open("");
        s.line("vf vds = vf{}, vdb = vf{};");
        emit_cascade(s, whole / w, {"vds", "vdb"}, [&](const std::string& c) {
            s.line("const vf t = vload(dyr + " + c + ") * vload(gamma + " + c + ");");
            s.line("b_vds += t * vload(xr + " + c + ");");
            s.line("b_vdb += t;");
        });
        s.line("ds = vhsum(vds), db = vhsum(vdb);");
        s.close();
    }
    if (whole < p.cols)
        s.line("for (idx c = " + n(whole) +
               "; c < COLS; ++c) ds += dyr[c] * xr[c] * gamma[c], db += dyr[c] * gamma[c];");
    s.line("const float a = rstd[r], m = mean[r];");
    s.line("const float b = (db * m - ds) * a * a * a * SCALE;");
    s.line("const float cc = -b * m - db * a * SCALE;");
    // dgamma as torch's kernel: dy (rstd x + (-rstd mean)), -rstd mean rounded first (volatile, as
    // LayerNorm's), rstd x + it a fused multiply-add, as torch's compiled Vectorized code has it:
    // where x is the mean (a row of one element) its rounding error, not 0, as stock's.
    s.line("volatile float nb_ = -a * m;");
    s.line("const float nb = nb_;");
    if (whole > 0) {
        s.open("for (idx c = 0; c < " + n(whole) + "; c += W)");
        s.line("const vf d = vload(dyr + c), xv = vload(xr + c);");
        s.line("vstore(dxr + c, a * d * vload(gamma + c) + b * xv + cc);");
        s.line("vstore(dgamma + c, vload(dgamma + c) + d * (a * xv + nb));");
        s.line("vstore(dbeta + c, vload(dbeta + c) + d);");
        s.close();
    }
    if (whole < p.cols) {
        s.open("for (idx c = " + n(whole) + "; c < COLS; ++c)");
        s.line("dxr[c] = a * dyr[c] * gamma[c] + b * xr[c] + cc;");
        s.line("dgamma[c] += dyr[c] * (a * xr[c] + nb);");
        s.line("dbeta[c] += dyr[c];");
        s.close();
    }
    s.close();
}

/// Rows short enough to live in registers: whole vectors only (COLS a multiple of W), at most 8 of
/// them. Such a row is read once into registers and every pass runs there (one read of the input
/// instead of two or three), and `group` rows run side by side (up to 8 vectors in all): a short
/// row is one chain of dependent steps (maximum or sums, then exp or the normalisation) that the
/// CPU overlaps with the next rows' only when they are interleaved in the code.
struct RowGroups {
    std::int64_t vectors = 0;  // vectors a row; 0: the row does not fit
    std::int64_t group = 1;    // rows a group
};

inline RowGroups row_groups(std::int64_t cols, std::int64_t w) {
    if (cols % w != 0 || cols / w > 8) return {};
    const std::int64_t v = cols / w;
    return {v, std::max<std::int64_t>(1, std::min<std::int64_t>(4, 8 / v))};
}

/// The row loop of a row kernel in groups of g.group rows: `body(rows)` emits the statements for
/// `rows` rows starting at row r0 (a loop variable, or a constant for the last partial group).
template <class Body>
inline void emit_row_groups(Src& s, std::int64_t rows, const RowGroups& g, Body&& body) {
    const std::int64_t full = rows - rows % g.group;
    if (full > 0) {
        s.open("for (idx r0 = 0; r0 < " + n(full) + "; r0 += " + n(g.group) + ")");
        body(g.group);
        s.close();
    }
    if (rows % g.group != 0) {
        s.open("");
        s.line("constexpr idx r0 = " + n(full) + ";");
        body(rows % g.group);
        s.close();
    }
}

/// "x<row>_<vector>", the registers of a row group.
inline std::string reg(const char* name, std::int64_t row, std::int64_t v) {
    return std::string(name) + n(row) + "_" + n(v);
}

/// SoftmaxV2; y may be x (in place), hence no __restrict: every pass reads xr[c] before it writes
/// yr[c]. Per row, in vectors of W floats: the maximum (lanes, then across them), e^(x - max)
/// stored and summed in W lanes (the last COLS % W columns through a zero-padded vector), then
/// every element divided by the sum.
inline void emit(Src& s, const SoftmaxPlan& p, std::int64_t w) {
    const std::int64_t whole = p.cols - p.cols % w, rest = p.cols % w;
    s.line("using namespace skc_v" + n(w) + ";");
    s.line("[[maybe_unused]] constexpr idx ROWS = " + n(p.rows) + ", COLS = " + n(p.cols) + ";");
    if (const RowGroups g = row_groups(p.cols, w); g.vectors > 0) {
        emit_row_groups(s, p.rows, g, [&](std::int64_t rows) {
            for (std::int64_t r = 0; r < rows; ++r) {
                s.line("const float* x" + n(r) + " = inputs[0] + (r0 + " + n(r) + ") * COLS;");
                for (std::int64_t v = 0; v < g.vectors; ++v)
                    s.line("vf " + reg("x", r, v) + " = vload(x" + n(r) + " + " + n(v * w) + ");");
            }
            for (std::int64_t r = 0; r < rows; ++r) {
                std::string m = reg("x", r, 0);
                for (std::int64_t v = 1; v < g.vectors; ++v) m = "vmax(" + reg("x", r, v) + ", " + m + ")";
                s.line("const float mx" + n(r) + " = vhmax(" + m + ");");
            }
            for (std::int64_t r = 0; r < rows; ++r) {
                std::string sum;
                for (std::int64_t v = 0; v < g.vectors; ++v) {
                    s.line(reg("x", r, v) + " = vexp(" + reg("x", r, v) + " - mx" + n(r) + ");");
                    sum += (v ? " + " : "") + reg("x", r, v);
                }
                s.line("const float sum" + n(r) + " = vhsum(" + sum + ");");
            }
            for (std::int64_t r = 0; r < rows; ++r) {
                s.line("float* y" + n(r) + " = outputs[0] + (r0 + " + n(r) + ") * COLS;");
                for (std::int64_t v = 0; v < g.vectors; ++v)
                    s.line("vstore(y" + n(r) + " + " + n(v * w) + ", " + reg("x", r, v) + " / sum" + n(r) + ");");
            }
        });
        return;
    }
    s.loop("r", "0", "ROWS");
    s.line("const float* xr = inputs[0] + r * COLS;");
    s.line("float* yr = outputs[0] + r * COLS;");
    s.line("float mx = xr[0];");
    if (whole > 0) {
        s.open("");
        s.line("vf m = vsplat(mx);");
        s.line("for (idx c = 0; c < " + n(whole) + "; c += W) m = vmax(vload(xr + c), m);");
        s.line("mx = vhmax(m);");
        s.close();
    }
    if (rest > 0) s.line("for (idx c = " + n(whole) + "; c < COLS; ++c) mx = xr[c] > mx ? xr[c] : mx;");
    s.line("float sum = 0.0f;");
    if (whole > 0) {
        s.open("");
        s.line("vf acc = vf{};");
        s.open("for (idx c = 0; c < " + n(whole) + "; c += W)");
        s.line("const vf e = vexp(vload(xr + c) - mx);");
        s.line("vstore(yr + c, e);");
        s.line("acc += e;");
        s.close();
        s.line("sum = vhsum(acc);");
        s.close();
    }
    if (rest > 0) {
        s.open("");
        s.line("float t[W] = {};");
        s.line("__builtin_memcpy(t, xr + " + n(whole) + ", " + n(rest) + " * sizeof(float));");
        s.line("vstore(t, vexp(vload(t) - mx));");
        s.line("for (idx c = 0; c < " + n(rest) + "; ++c) sum += t[c];");
        s.line("__builtin_memcpy(yr + " + n(whole) + ", t, " + n(rest) + " * sizeof(float));");
        s.close();
    }
    if (whole > 0) s.line("for (idx c = 0; c < " + n(whole) + "; c += W) vstore(yr + c, vload(yr + c) / sum);");
    if (rest > 0) s.line("for (idx c = " + n(whole) + "; c < COLS; ++c) yr[c] = yr[c] / sum;");
    s.close();
}

/// LayerNorm, a row at a time, in vectors of W floats. The sums are shifted by the row's first
/// element x0 (each in W lanes in kernels::sum()'s cascade of blocks, emit_cascade(), then across
/// them, the last COLS % W columns one by one): m = the
/// mean of x - x0, mean = x0 + m, var = the mean of ((x - x0) - m)^2, so a row whose mean is large
/// against its spread loses nothing to cancellation. Then, as torch's kernel (so that the two agree
/// to rounding even where the spread is 0): y = (x rstd + (-rstd mean)) gamma + beta.
inline void emit(Src& s, const LayerNormPlan& p, std::int64_t w) {
    const std::int64_t whole = p.cols - p.cols % w;
    s.line("using namespace skc_v" + n(w) + ";");
    s.line("[[maybe_unused]] constexpr idx ROWS = " + n(p.rows) + ", COLS = " + n(p.cols) + ";");
    s.line("const float eps = " + float_literal(p.epsilon) + ";");
    s.line("const float* __restrict gamma = inputs[1];");
    s.line("const float* __restrict beta = inputs[2];");
    if (p.mean_out) s.line("float* __restrict mean = outputs[1];");
    if (p.var_out) s.line("float* __restrict var = outputs[2];");
    if (p.rstd_out) s.line("float* __restrict rstd_out = outputs[2];");
    // The statistics' outputs and the normalisation of row `r` (suffix `r`, "" for the loop).
    auto finish = [&](const std::string& r, const std::string& row) {
        s.line("const float rstd" + r + " = 1.0f / __builtin_sqrtf(v" + r + " + eps);");
        // Rounded on its own, as torch's kernel has it: a compiler that fuses multiply-adds would
        // otherwise fuse this product into y's and round x rstd instead (volatile: once a row).
        s.line("volatile float nb_" + r + " = -rstd" + r + " * mu" + r + ";");
        s.line("const float nb" + r + " = nb_" + r + ";");
        if (p.mean_out) s.line("mean[" + row + "] = mu" + r + ";");
        if (p.var_out) s.line("var[" + row + "] = v" + r + ";");
        if (p.rstd_out) s.line("rstd_out[" + row + "] = rstd" + r + ";");
    };
    if (const RowGroups g = row_groups(p.cols, w); g.vectors > 0) {
        emit_row_groups(s, p.rows, g, [&](std::int64_t rows) {
            for (std::int64_t r = 0; r < rows; ++r) {
                const std::string x = "x" + n(r);
                s.line("const float* __restrict " + x + " = inputs[0] + (r0 + " + n(r) + ") * COLS;");
                s.line("const float f" + n(r) + " = " + x + "[0];");
                std::string sum;
                for (std::int64_t v = 0; v < g.vectors; ++v) {
                    s.line("const vf " + reg("x", r, v) + " = vload(" + x + " + " + n(v * w) + ") - f" + n(r) + ";");
                    sum += (v ? " + " : "") + reg("x", r, v);
                }
                s.line("const float m" + n(r) + " = vhsum(" + sum + ") / static_cast<float>(COLS);");
                s.line("const float mu" + n(r) + " = f" + n(r) + " + m" + n(r) + ";");
            }
            for (std::int64_t r = 0; r < rows; ++r) {
                std::string sq;
                for (std::int64_t v = 0; v < g.vectors; ++v) {
                    s.line("const vf " + reg("d", r, v) + " = " + reg("x", r, v) + " - m" + n(r) + ";");
                    sq += (v ? " + " : "") + reg("d", r, v) + " * " + reg("d", r, v);
                }
                s.line("const float v" + n(r) + " = vhsum(" + sq + ") / static_cast<float>(COLS);");
                finish(n(r), "r0 + " + n(r));
            }
            for (std::int64_t r = 0; r < rows; ++r) {
                const std::string x = "x" + n(r);
                s.line("float* __restrict y" + n(r) + " = outputs[0] + (r0 + " + n(r) + ") * COLS;");
                for (std::int64_t v = 0; v < g.vectors; ++v)
                    s.line("vstore(y" + n(r) + " + " + n(v * w) + ", (vload(" + x + " + " + n(v * w) + ") * rstd" +
                           n(r) + " + nb" + n(r) + ") * vload(gamma + " + n(v * w) + ") + vload(beta + " + n(v * w) +
                           "));");
            }
        });
        return;
    }
    s.loop("r", "0", "ROWS");
    s.line("const float* __restrict xr = inputs[0] + r * COLS;");
    s.line("float* __restrict yr = outputs[0] + r * COLS;");
    s.line("const float f = xr[0];");
    // The first pass: m, the mean of x - f.
    s.line("float sum = 0.0f;");
    if (whole > 0) {
        s.open("");
        s.line("vf lanes = vf{};");
        emit_cascade(s, whole / w, {"lanes"},
                     [&](const std::string& c) { s.line("b_lanes += vload(xr + " + c + ") - f;"); });
        s.line("sum = vhsum(lanes);");
        s.close();
    }
    if (whole < p.cols) s.line("for (idx c = " + n(whole) + "; c < COLS; ++c) sum += xr[c] - f;");
    s.line("const float m = sum / static_cast<float>(COLS);");
    // The second: the sums of d = (x - f) - m and of d^2. Their mean dm is m's rounding error (the
    // first sum's terms are as large as x0 is far from the mean): the mean is f + (m + dm) and the
    // variance mean(d^2) - dm^2 (the corrected two-pass algorithm).
    s.line("float sq = 0.0f, ds = 0.0f;");
    if (whole > 0) {
        s.open("");
        s.line("vf lanes = vf{}, dlanes = vf{};");
        emit_cascade(s, whole / w, {"lanes", "dlanes"}, [&](const std::string& c) {
            s.line("const vf d = (vload(xr + " + c + ") - f) - m;");
            s.line("b_lanes += d * d;");
            s.line("b_dlanes += d;");
        });
        s.line("sq = vhsum(lanes), ds = vhsum(dlanes);");
        s.close();
    }
    if (whole < p.cols) {
        s.open("for (idx c = " + n(whole) + "; c < COLS; ++c)");
        s.line("const float d = (xr[c] - f) - m;");
        s.line("sq += d * d, ds += d;");
        s.close();
    }
    s.line("const float dm = ds / static_cast<float>(COLS);");
    s.line("const float mu = f + (m + dm);");
    s.line("const float v0 = sq / static_cast<float>(COLS) - dm * dm;");
    s.line("const float v = v0 < 0.0f ? 0.0f : v0;  // NaN stays NaN");
    finish("", "r");
    if (whole > 0)
        s.line("for (idx c = 0; c < " + n(whole) +
               "; c += W) vstore(yr + c, (vload(xr + c) * rstd + nb) * vload(gamma + c) + vload(beta + c));");
    if (whole < p.cols)
        s.line("for (idx c = " + n(whole) + "; c < COLS; ++c) yr[c] = (xr[c] * rstd + nb) * gamma[c] + beta[c];");
    s.close();
}

/// tr8(src, ss, dst, ds): the 8 x 8 block at src (rows ss floats apart) transposed into dst (rows
/// ds floats apart), in vectors of 8 floats and three rounds of shuffles. __builtin_shufflevector
/// is Clang's and GCC's from 12 on; older GCC has __builtin_shuffle.
inline std::string transpose_prelude() {
    Src s;
    s.line("#ifndef SKC_HOST_TRANSPOSE_8");
    s.line("#define SKC_HOST_TRANSPOSE_8");
    s.line(has_shufflevector);
    s.line("#define SKC_SHUFFLE8(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)");
    s.line("#else");
    s.line("#define SKC_SHUFFLE8(a, b, ...) __builtin_shuffle(a, b, skc_t8::v8i{__VA_ARGS__})");
    s.line("#endif");
    s.line("namespace {");
    s.line("namespace skc_t8 {");
    s.line("typedef float v8 __attribute__((vector_size(32)));");
    s.line("typedef int v8i __attribute__((vector_size(32)));");
    s.open(
        "[[maybe_unused]] __attribute__((always_inline)) inline void tr8(const float* src, __PTRDIFF_TYPE__ ss, float* "
        "dst, __PTRDIFF_TYPE__ ds)");
    // Straight-line code, so the compiler keeps the 24 vectors in registers.
    for (int i = 0; i < 8; ++i)
        s.line("v8 r" + std::to_string(i) + ";")
            .line("__builtin_memcpy(&r" + std::to_string(i) + ", src + " + std::to_string(i) + " * ss, sizeof(v8));");
    auto shuffle = [&](const std::string& out, const std::string& a, const std::string& b, const char* idx) {
        s.line("const v8 " + out + " = SKC_SHUFFLE8(" + a + ", " + b + ", " + idx + ");");
    };
    for (int i = 0; i < 8; i += 2) {
        const std::string a = "r" + std::to_string(i), b = "r" + std::to_string(i + 1);
        shuffle("t" + std::to_string(i), a, b, "0, 8, 2, 10, 4, 12, 6, 14");
        shuffle("t" + std::to_string(i + 1), a, b, "1, 9, 3, 11, 5, 13, 7, 15");
    }
    for (int i : {0, 1, 4, 5}) {
        const std::string a = "t" + std::to_string(i), b = "t" + std::to_string(i + 2);
        shuffle("u" + std::to_string(i), a, b, "0, 1, 8, 9, 4, 5, 12, 13");
        shuffle("u" + std::to_string(i + 2), a, b, "2, 3, 10, 11, 6, 7, 14, 15");
    }
    for (int i = 0; i < 4; ++i) {  // u_i and u_(i+4) hold columns i and i + 4
        const std::string a = "u" + std::to_string(i), b = "u" + std::to_string(i + 4);
        shuffle("c" + std::to_string(i), a, b, "0, 1, 2, 3, 8, 9, 10, 11");
        shuffle("c" + std::to_string(i + 4), a, b, "4, 5, 6, 7, 12, 13, 14, 15");
    }
    for (int i = 0; i < 8; ++i)
        s.line("__builtin_memcpy(dst + " + std::to_string(i) + " * ds, &c" + std::to_string(i) + ", sizeof(v8));");
    s.close();
    s.line("}  // namespace skc_t8");
    s.line("}  // namespace");
    s.line("#endif");
    return s.str();
}

/// How a transpose is copied (out_stride: the output's dense strides; stride: where each output
/// dim steps in the input).
struct TransposeShape {
    std::vector<std::int64_t> dims, stride, out_stride;
    std::size_t tiled = 0;  // the output dim tiled with the last one (8 x 8 vector blocks); rank if none
    std::size_t run = 0;    // the output dims from `run` on are contiguous in the input too: memcpy
};

inline TransposeShape transpose_shape(const TransposePlan& p) {
    const std::size_t r = p.in_dims.size();
    TransposeShape t;
    std::vector<std::int64_t> in_stride(r);
    t.dims.resize(r);
    t.stride.resize(r);
    t.out_stride.resize(r);
    std::int64_t acc = 1;
    for (std::size_t i = r; i-- > 0;) {
        in_stride[i] = acc;
        acc *= p.in_dims[i];
    }
    for (std::size_t i = 0; i < r; ++i) {
        t.dims[i] = p.in_dims[static_cast<std::size_t>(p.perm[i])];
        t.stride[i] = in_stride[static_cast<std::size_t>(p.perm[i])];
    }
    acc = 1;
    for (std::size_t i = r; i-- > 0;) {
        t.out_stride[i] = acc;
        acc *= t.dims[i];
    }
    t.run = r;
    while (t.run > 0 && t.stride[t.run - 1] == t.out_stride[t.run - 1]) --t.run;
    t.tiled = r;
    if (t.run == r && r >= 2 && t.dims[r - 1] % 8 == 0)
        for (std::size_t i = 0; i + 1 < r; ++i)
            if (t.stride[i] == 1 && t.dims[i] % 8 == 0) t.tiled = i;
    return t;
}

/// Transpose, in the first of three ways the shape allows: when the last output dims are also
/// contiguous in the input, a memcpy per run of them; when the last output dim is read with a
/// stride and another output dim is the input's contiguous one, both multiples of 8, 8 x 8 blocks
/// transposed in vector registers (tr8); otherwise an element at a time, the output in order.
inline void emit(Src& s, const TransposePlan& p, std::int64_t /*w*/) {
    const std::size_t r = p.in_dims.size();
    const TransposeShape t = transpose_shape(p);
    s.line("const float* __restrict x = inputs[0];");
    s.line("float* __restrict y = outputs[0];");
    std::string yi, xi;
    int opened = 0;
    auto index = [&](const std::string& v, std::size_t i) {
        yi += (yi.empty() ? "" : " + ") + v + " * " + n(t.out_stride[i]);
        xi += (xi.empty() ? "" : " + ") + v + " * " + n(t.stride[i]);
    };
    auto at = [](const std::string& e) { return e.empty() ? std::string("0") : e; };
    const std::size_t looped = t.run < r ? t.run : r;  // dims before a memcpy run
    bool any_loop = false;
    for (std::size_t i = 0; i < looped; ++i) any_loop = any_loop || t.dims[i] != 1;
    if (any_loop) s.line("using idx = __PTRDIFF_TYPE__;");
    // Output dims in order, the last innermost (the tiled pair last); dims of size 1 need no loop.
    for (std::size_t i = 0; i < looped; ++i) {
        if (t.dims[i] == 1 || (t.tiled < r && (i == t.tiled || i == r - 1))) continue;
        const std::string v = "i" + std::to_string(i);
        s.loop(v, "0", n(t.dims[i]));
        ++opened;
        index(v, i);
    }
    if (t.run < r) {
        std::int64_t run = 1;
        for (std::size_t i = t.run; i < r; ++i) run *= t.dims[i];
        s.line("__builtin_memcpy(y + " + at(yi) + ", x + " + at(xi) + ", " + n(run) + " * sizeof(float));");
    } else if (t.tiled < r) {
        // Two blocks side by side along the input's rows where the size allows: each input line
        // (64 bytes) is then read once, whole.
        const std::string vk = "i" + std::to_string(t.tiled), vl = "i" + std::to_string(r - 1);
        const std::int64_t step = t.dims[t.tiled] % 16 == 0 ? 16 : 8;
        s.open("for (idx " + vk + " = 0; " + vk + " < " + n(t.dims[t.tiled]) + "; " + vk + " += " + n(step) + ")");
        s.open("for (idx " + vl + " = 0; " + vl + " < " + n(t.dims[r - 1]) + "; " + vl + " += 8)");
        opened += 2;
        index(vk, t.tiled);
        index(vl, r - 1);
        for (std::int64_t b = 0; b < step; b += 8) {
            const std::string dx = b == 0 ? "" : " + " + n(b * t.stride[t.tiled]);
            const std::string dy = b == 0 ? "" : " + " + n(b * t.out_stride[t.tiled]);
            s.line("skc_t8::tr8(x + " + xi + dx + ", " + n(t.stride[r - 1]) + ", y + " + yi + dy + ", " +
                   n(t.out_stride[t.tiled]) + ");");
        }
    } else {
        s.line("y[" + at(yi) + "] = x[" + at(xi) + "];");
    }
    for (int i = 0; i < opened; ++i) s.close();
}

/// `float <out>`, the sum of the COLS floats at `ptr` (a C++ expression), in W lanes in
/// emit_cascade_layout()'s blocks and groups, each block summed from zero in 4 accumulators; the
/// last cols % W
/// floats through a zero-padded vector; then across the lanes. Every zero is +0.0 (a sum of only
/// -0.0 is +0.0, as torch's sum kernel gives it) or, with `minus_zero`, -0.0, the identity of IEEE
/// addition (a sum of only -0.0 is -0.0, as torch's vec::reduce_all, which starts from the data,
/// gives it).
inline void emit_row_sum(Src& s, const std::string& out, const std::string& ptr, std::int64_t cols, std::int64_t w,
                         bool minus_zero = false) {
    const std::int64_t v = cols / w, rest = cols % w;
    const std::string zero = minus_zero ? "(vf)(vi{} - 0x7fffffff - 1)" : "vf{}";  // -0.0f: the sign bit alone
    s.line("float " + out + " = 0.0f;");
    s.open("");
    s.line("const float* __restrict p = " + ptr + ";");
    s.line("vf total = " + zero + ";");
    // One block of `nv` vectors from vector `base` in four accumulators, added to to + "total".
    emit_cascade_layout(s, v, {"total"}, zero, [&](const std::string& base, std::int64_t nv, const std::string& to) {
        s.open("");
        s.line("vf a0 = " + zero + ", a1 = " + zero + ", a2 = " + zero + ", a3 = " + zero + ";");
        if (nv >= 4) {
            s.open("for (idx j = 0; j < " + n(nv / 4 * 4) + "; j += 4)");
            s.line("const float* q = p + (" + base + " + j) * W;");
            s.line("a0 += vload(q), a1 += vload(q + W), a2 += vload(q + 2 * W), a3 += vload(q + 3 * W);");
            s.close();
        }
        for (std::int64_t k = nv / 4 * 4; k < nv; ++k)
            s.line("a" + n(k % 4) + " += vload(p + (" + base + " + " + n(k) + ") * W);");
        s.line(to + "total += (a0 + a1) + (a2 + a3);");
        s.close();
    });
    if (rest > 0) {
        s.open("");
        s.line("float t[W];");
        s.line("vstore(t, " + zero + ");");
        s.line("__builtin_memcpy(t, p + " + n(v * w) + ", " + n(rest) + " * sizeof(float));");
        s.line("total += vload(t);");
        s.close();
    }
    s.line(out + " = vhsum(total);");
    s.close();
}

/// ReduceMean over trailing axes, a row at a time: the row's sum (emit_row_sum()), then one
/// division by the count, as torch's mean.
inline void emit(Src& s, const ReduceMeanPlan& p, std::int64_t w) {
    s.line("using namespace skc_v" + n(w) + ";");
    s.line("const float* __restrict x = inputs[0];");
    s.line("float* __restrict y = outputs[0];");
    s.loop("r", "0", n(p.rows));
    emit_row_sum(s, "sum", "x + r * " + n(p.cols), p.cols, w);
    s.line("y[r] = sum / " + float_literal(static_cast<float>(p.cols)) + ";");
    s.close();
}

/// LogSoftmaxV2, torch's order: per row the maximum (lanes, then across them), the sum of
/// e^(x - max) in W lanes (the last COLS % W columns through a zero-padded vector), its log, then
/// y = (x - max) - log. Rows of at most 8 whole vectors stay in registers, in groups (row_groups()).
inline void emit(Src& s, const LogSoftmaxPlan& p, std::int64_t w) {
    const std::int64_t whole = p.cols - p.cols % w, rest = p.cols % w;
    s.line("using namespace skc_v" + n(w) + ";");
    s.line("[[maybe_unused]] constexpr idx ROWS = " + n(p.rows) + ", COLS = " + n(p.cols) + ";");
    if (const RowGroups g = row_groups(p.cols, w); g.vectors > 0) {
        emit_row_groups(s, p.rows, g, [&](std::int64_t rows) {
            for (std::int64_t r = 0; r < rows; ++r) {
                s.line("const float* __restrict x" + n(r) + " = inputs[0] + (r0 + " + n(r) + ") * COLS;");
                for (std::int64_t v = 0; v < g.vectors; ++v)
                    s.line("const vf " + reg("x", r, v) + " = vload(x" + n(r) + " + " + n(v * w) + ");");
            }
            for (std::int64_t r = 0; r < rows; ++r) {
                std::string m = reg("x", r, 0);
                for (std::int64_t v = 1; v < g.vectors; ++v) m = "vmax(" + reg("x", r, v) + ", " + m + ")";
                s.line("const float mx" + n(r) + " = vhmax(" + m + ");");
            }
            for (std::int64_t r = 0; r < rows; ++r) {
                std::string sum;
                for (std::int64_t v = 0; v < g.vectors; ++v) {
                    s.line("const vf " + reg("d", r, v) + " = " + reg("x", r, v) + " - mx" + n(r) + ";");
                    sum += (v ? " + " : "") + std::string("vexp(") + reg("d", r, v) + ")";
                }
                s.line("const float ls" + n(r) + " = __builtin_logf(vhsum(" + sum + "));");
            }
            for (std::int64_t r = 0; r < rows; ++r) {
                s.line("float* __restrict y" + n(r) + " = outputs[0] + (r0 + " + n(r) + ") * COLS;");
                for (std::int64_t v = 0; v < g.vectors; ++v)
                    s.line("vstore(y" + n(r) + " + " + n(v * w) + ", " + reg("d", r, v) + " - ls" + n(r) + ");");
            }
        });
        return;
    }
    s.loop("r", "0", "ROWS");
    s.line("const float* __restrict xr = inputs[0] + r * COLS;");
    s.line("float* __restrict yr = outputs[0] + r * COLS;");
    s.line("float mx = xr[0];");
    if (whole > 0) {
        s.open("");
        s.line("vf m = vsplat(mx);");
        s.line("for (idx c = 0; c < " + n(whole) + "; c += W) m = vmax(vload(xr + c), m);");
        s.line("mx = vhmax(m);");
        s.close();
    }
    if (rest > 0) s.line("for (idx c = " + n(whole) + "; c < COLS; ++c) mx = xr[c] > mx ? xr[c] : mx;");
    s.line("float sum = 0.0f;");
    if (whole > 0) {
        s.open("");
        s.line("vf acc = vf{};");
        s.line("for (idx c = 0; c < " + n(whole) + "; c += W) acc += vexp(vload(xr + c) - mx);");
        s.line("sum = vhsum(acc);");
        s.close();
    }
    if (rest > 0) {
        s.open("");
        s.line("float t[W] = {};");
        s.line("__builtin_memcpy(t, xr + " + n(whole) + ", " + n(rest) + " * sizeof(float));");
        s.line("vstore(t, vexp(vload(t) - mx));");
        s.line("for (idx c = 0; c < " + n(rest) + "; ++c) sum += t[c];");
        s.close();
    }
    s.line("const float ls = __builtin_logf(sum);");
    if (whole > 0) s.line("for (idx c = 0; c < " + n(whole) + "; c += W) vstore(yr + c, (vload(xr + c) - mx) - ls);");
    if (rest > 0) s.line("for (idx c = " + n(whole) + "; c < COLS; ++c) yr[c] = (xr[c] - mx) - ls;");
    s.close();
}

/// LogSoftmaxGrad, a row at a time: s = the sum of dy (emit_row_sum() from -0.0, as torch's
/// reduce_all: a row of -0.0 sums to -0.0, and dx = -0.0 - e^y (-0.0) is +0.0), then dx = dy - e^y s in
/// vectors, the last COLS % W columns through zero-padded vectors, e^y with its subnormal values
/// (vexp_sub(): a subnormal e^y times an infinite sum is infinite, as stock's, not NaN).
inline void emit(Src& s, const LogSoftmaxGradPlan& p, std::int64_t w) {
    const std::int64_t whole = p.cols - p.cols % w, rest = p.cols % w;
    s.line("using namespace skc_v" + n(w) + ";");
    s.line("constexpr idx ROWS = " + n(p.rows) + ", COLS = " + n(p.cols) + ";");
    s.loop("r", "0", "ROWS");
    s.line("const float* __restrict dyr = inputs[0] + r * COLS;");
    s.line("const float* __restrict yr = inputs[1] + r * COLS;");
    s.line("float* __restrict dxr = outputs[0] + r * COLS;");
    emit_row_sum(s, "sum", "dyr", p.cols, w, true);
    if (whole > 0)
        s.line("for (idx c = 0; c < " + n(whole) +
               "; c += W) vstore(dxr + c, vload(dyr + c) - vexp_sub(vload(yr + c)) * sum);");
    if (rest > 0) {
        s.open("");
        s.line("float a[W] = {}, b[W] = {};");
        s.line("__builtin_memcpy(a, dyr + " + n(whole) + ", " + n(rest) + " * sizeof(float));");
        s.line("__builtin_memcpy(b, yr + " + n(whole) + ", " + n(rest) + " * sizeof(float));");
        s.line("vstore(a, vload(a) - vexp_sub(vload(b)) * sum);");
        s.line("__builtin_memcpy(dxr + " + n(whole) + ", a, " + n(rest) + " * sizeof(float));");
        s.close();
    }
    s.close();
}

/// ConcatD, in y's order as torch's serial cat kernel writes it: a loop of constant count per
/// outer dim of the plan, and inside, each input's slice in turn, a loop per merged dim of its
/// part; a run contiguous on both sides is copied in vectors (and the last run % W floats by one
/// memcpy of constant size), another run an element at a time.
inline void emit(Src& s, const ConcatPlan& p, std::int64_t w) {
    s.line("using namespace skc_v" + n(w) + ";");
    s.line("float* __restrict y = outputs[0];");
    auto term = [&](std::string& e, const std::string& v, std::int64_t stride) {
        if (stride != 0) e += (e.empty() ? "" : " + ") + v + (stride == 1 ? "" : " * " + n(stride));
    };
    auto at = [](const std::string& e) { return e.empty() ? std::string("0") : e; };
    std::string yo;  // y's offset of the outer index
    std::vector<std::string> xo(p.parts.size());
    for (std::size_t d = 0; d < p.outer.size(); ++d) {
        if (p.outer[d] == 1) continue;
        const std::string v = "o" + n(static_cast<std::int64_t>(d));
        s.loop(v, "0", n(p.outer[d]));
        term(yo, v, p.outer_dst[d]);
        for (std::size_t k = 0; k < p.parts.size(); ++k) term(xo[k], v, p.parts[k].outer_src[d]);
    }
    for (std::size_t k = 0; k < p.parts.size(); ++k) {
        const ConcatPart& part = p.parts[k];
        const std::size_t r = part.dims.size();
        s.open("");
        s.line("const float* __restrict x = inputs[" + n(static_cast<std::int64_t>(k)) + "]" +
               (xo[k].empty() ? "" : " + " + xo[k]) + ";");
        std::string xi, yi = yo;
        if (part.offset != 0) yi += (yi.empty() ? "" : " + ") + n(part.offset);
        for (std::size_t d = 0; d + 1 < r; ++d) {
            const std::string v = "i" + n(static_cast<std::int64_t>(d));
            s.loop(v, "0", n(part.dims[d]));
            term(xi, v, part.src[d]), term(yi, v, part.dst[d]);
        }
        const std::int64_t inner = part.dims[r - 1], whole = inner - inner % w;
        if (part.src[r - 1] == 1 && part.dst[r - 1] == 1) {
            s.line("const float* __restrict xr = x + " + at(xi) + ";");
            s.line("float* __restrict yr = y + " + at(yi) + ";");
            if (whole > 0) s.line("for (idx i = 0; i < " + n(whole) + "; i += W) vstore(yr + i, vload(xr + i));");
            if (whole < inner)
                s.line("__builtin_memcpy(yr + " + n(whole) + ", xr + " + n(whole) + ", " + n(inner - whole) +
                       " * sizeof(float));");
        } else {
            std::string xe = xi, ye = yi;
            term(xe, "i", part.src[r - 1]), term(ye, "i", part.dst[r - 1]);
            s.line("for (idx i = 0; i < " + n(inner) + "; ++i) y[" + at(ye) + "] = x[" + at(xe) + "];");
        }
        for (std::size_t d = 0; d + 1 < r; ++d) s.close();
        s.close();
    }
    for (std::size_t d = 0; d < p.outer.size(); ++d)
        if (p.outer[d] != 1) s.close();
}

/// SelectV2 and MaskedFill: a loop of constant count over each dim of the plan, the last
/// innermost, y = c ? a : b with each operand read at its constant strides, or once a run where
/// it is broadcast along the last dim (MaskedFill's value once). MaskedFill may run in place (y
/// is x, its b): then a copy of the loops reads b through y (see the binary ops), hence no
/// __restrict.
inline void emit(Src& s, const SelectPlan& p, std::int64_t /*w: scalar code*/) {
    const std::size_t r = p.dims.size();
    std::vector<std::int64_t> ys(r);  // y's dense strides
    std::int64_t acc = 1;
    for (std::size_t d = r; d-- > 0;) ys[d] = acc, acc *= p.dims[d];
    s.line("const unsigned char* c = reinterpret_cast<const unsigned char*>(inputs[" +
           n(static_cast<std::int64_t>(p.c_slot)) + "]);");
    s.line("const float* a = inputs[" + n(static_cast<std::int64_t>(p.a_slot)) + "];");
    s.line("const float* b = inputs[" + n(static_cast<std::int64_t>(p.b_slot)) + "];");
    s.line("float* y = outputs[0];");
    bool a_const = true;
    for (std::int64_t v : p.a) a_const = a_const && v == 0;
    if (a_const) s.line("const float sa = a[0];");
    auto loops = [&](const std::string& bname) {
        std::string yi, ci, ai, bi;
        auto term = [&](std::string& e, const std::string& v, std::int64_t stride) {
            if (stride != 0) e += (e.empty() ? "" : " + ") + v + (stride == 1 ? "" : " * " + n(stride));
        };
        for (std::size_t d = 0; d + 1 < r; ++d) {
            const std::string v = "i" + n(static_cast<std::int64_t>(d));
            s.loop(v, "0", n(p.dims[d]));
            term(yi, v, ys[d]), term(ci, v, p.c[d]), term(ai, v, p.a[d]), term(bi, v, p.b[d]);
        }
        auto at = [](const std::string& e) { return e.empty() ? std::string("0") : e; };
        auto plus_i = [](const std::string& e) { return e.empty() ? std::string("i") : e + " + i"; };
        const bool c_run = p.c[r - 1] == 1, a_run = p.a[r - 1] == 1, b_run = p.b[r - 1] == 1;
        if (!a_run && !a_const) s.line("const float sa = a[" + at(ai) + "];");
        if (!b_run) s.line("const float sb = " + bname + "[" + at(bi) + "];");
        const std::string av = a_run ? "a[" + plus_i(ai) + "]" : "sa";
        const std::string bv = b_run ? bname + "[" + plus_i(bi) + "]" : "sb";
        const std::string run = "for (idx i = 0; i < " + n(p.dims[r - 1]) + "; ++i) y[" + plus_i(yi) + "] = ";
        if (c_run) {
            // Both operands read whatever the condition: a read under it becomes a masked load, and
            // g++ 12 at -O3 with AVX-512 gives the loads of an unrolled outer loop the first
            // iteration's mask (a MaskedFill [5,2,8] by [5,1,8] kept x only where mask[0] was false).
            s.loop("i", "0", n(p.dims[r - 1]));
            s.line("const float ta = " + av + ", tb = " + bv + ";");
            s.line("y[" + plus_i(yi) + "] = c[" + plus_i(ci) + "] != 0 ? ta : tb;");
            s.close();
        } else {  // one condition for the whole run: a copy (or fill) of one operand
            s.open("if (c[" + at(ci) + "] != 0)");
            s.line(run + av + ";");
            s.close();
            if (!(bname == "y" && b_run)) {  // in place, a false run is y as it is
                s.open("else");
                s.line(run + bv + ";");
                s.close();
            }
        }
        for (std::size_t d = 0; d + 1 < r; ++d) s.close();
    };
    if (p.b_slot == 0 && p.b == ys) {  // MaskedFill with x of y's shape: maybe in place
        s.open("if (b == y)");
        loops("y");
        s.close().open("else");
        loops("b");
        s.close();
        return;
    }
    loops("b");
}

inline std::string describe(const skc::OpRecord& op) {
    std::string d = op.op_type;
    auto one = [&](const skc::TensorDesc& t) {
        d += " " + dims_str(t.shape);
        if (t.is_view.value_or(false) && t.stride) d += " (stride " + dims_str(*t.stride) + ")";
    };
    for (const skc::TensorSlot& slot : op.inputs) {
        if (const auto* t = std::get_if<skc::TensorDesc>(&slot)) one(*t);
        if (const auto* list = std::get_if<std::vector<skc::TensorDesc>>(&slot)) {
            d += " (";
            for (const skc::TensorDesc& t : *list) one(t);
            d += " )";
        }
    }
    d += " ->";
    for (const skc::TensorSlot& slot : op.outputs)
        if (const auto* t = std::get_if<skc::TensorDesc>(&slot)) d += " " + dims_str(t->shape);
    return d;
}

}  // namespace detail

/// The bound the tests and the benchmark hold a generated kernel to, against the generic one and
/// a double-precision reference: |static - other| <= bound * max(|other|, 1) per element. The
/// generated matrix products sum with fused multiply-adds (one rounding per term instead of two),
/// Gelu and Softmax use the prelude's exp and erf instead of the C library's, and the sums of
/// Softmax and LayerNorm run in vector lanes, so neither agrees with the generic kernel bit for
/// bit. The matrix products get the bound the benchmark gives OpenBLAS, growing with the square
/// root of K past 1024 terms (the rounding error of a sum grows so).
inline double generated_tolerance(const Plan& plan) {
    if (const auto* m = std::get_if<MatMulPlan>(&plan))
        return 1e-4 * std::max(1.0, std::sqrt(static_cast<double>(m->k) / 1024.0));
    return 1e-5;
}

/// Whether generate_kernel() supports `op`.
inline bool supported(const skc::OpRecord& op) { return analyze(op).plan.has_value(); }

/// Why `op` is not supported ("" when it is), for listing skipped ops.
inline std::string unsupported_reason(const skc::OpRecord& op) { return analyze(op).reason; }

/// Source of `extern "C" void <symbol>(const float* const* inputs, float* const* outputs)` for the
/// exact shapes and attrs of `op`, or nullopt when the op is not supported. Throws
/// std::invalid_argument when `symbol` is not a C identifier.
inline std::optional<std::string> generate_kernel(const skc::OpRecord& op, std::string_view symbol,
                                                  const Target& target = host_target()) {
    if (!detail::is_identifier(symbol))
        throw std::invalid_argument("kernel symbol \"" + std::string(symbol) + "\" is not a C identifier");
    const Analysis a = analyze(op);
    if (!a.plan) return std::nullopt;
    detail::Src s;
    s.line("// " + std::string(symbol) + ": " + detail::describe(op) + " (generated by skc examples/host/codegen.hpp)");
    // No #include: the compiler's built-ins (__builtin_memcpy, __builtin_sqrtf, __PTRDIFF_TYPE__, ...)
    // are what <cstring>, <cmath> and <cstddef> would give (the same instructions and calls), and
    // parsing those headers took two thirds of a kernel's compile.
    s.line("");
    const std::int64_t w = target.vector_floats;
    const bool vectors = std::visit(
        [](const auto& p) {
            using P = std::decay_t<decltype(p)>;
            if constexpr (std::is_same_v<P, UnaryPlan>) return detail::vector_unary(p.kind);
            else if constexpr (std::is_same_v<P, GradPlan>) return detail::vector_grad(p.kind) != nullptr;
            else if constexpr (std::is_same_v<P, SoftmaxGradPlan> || std::is_same_v<P, LayerNormGradPlan> ||
                               std::is_same_v<P, ReduceMeanPlan> || std::is_same_v<P, LogSoftmaxPlan> ||
                               std::is_same_v<P, LogSoftmaxGradPlan> || std::is_same_v<P, ConcatPlan>)
                return true;
            else
                return std::is_same_v<P, MatMulPlan> || std::is_same_v<P, SoftmaxPlan> ||
                       std::is_same_v<P, LayerNormPlan>;
        },
        *a.plan);
    if (vectors) s.raw(detail::vector_prelude(w));
    const auto* tp = std::get_if<TransposePlan>(&*a.plan);
    const auto* mp = std::get_if<MatMulPlan>(&*a.plan);
    // Every product whose op(B) or A has unit stride along K may copy blocks with tr8 (a packed
    // panel of op(B); a packed block of A, emit_pack_a()).
    if ((tp && detail::transpose_shape(*tp).tiled < tp->perm.size()) || (mp && (mp->b.k == 1 || mp->a.k == 1)))
        s.raw(detail::transpose_prelude());
    s.open("extern \"C\" void " + std::string(symbol) + "(const float* const* inputs, float* const* outputs)");
    if (!std::holds_alternative<TransposePlan>(*a.plan)) s.line("using idx [[maybe_unused]] = __PTRDIFF_TYPE__;");
    std::visit([&](const auto& p) { detail::emit(s, p, w); }, *a.plan);
    s.close();
    return s.str();
}

}  // namespace skc_host
