// The host (CPU) reference kernels of examples/host/: every supported op at several shapes is
// turned into a shape-specialised kernel by generate_kernel(), all of them are compiled at test
// time with the system C++ compiler (c++ on PATH, or $SKC_HOST_CXX) into two shared objects in one
// go, dlopened, run on random inputs and compared with run_generic(). The generic kernels are also
// checked against naive double-precision references, and unsupported ops against their reasons.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
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

namespace {

namespace fs = std::filesystem;
using skc::Attr;
using skc::OpRecord;
using skc::RuntimeShape;
using skc::TensorDesc;
using skc::TensorSlot;

using Kernel = void (*)(const float* const*, float* const*);

TensorDesc tensor(RuntimeShape shape, std::string dtype = "float") {
    TensorDesc t;
    t.dtype = std::move(dtype);
    t.shape = std::move(shape);
    t.format = "ND";
    return t;
}

Attr attr(std::string name, std::string dtype, skc::Value v) {
    Attr a;
    a.name = std::move(name);
    a.dtype = std::move(dtype);
    a.value = std::move(v);
    return a;
}

OpRecord make(std::string type, std::vector<TensorSlot> in, std::vector<TensorSlot> out, std::vector<Attr> attrs = {}) {
    OpRecord r;
    r.op_type = std::move(type);
    r.inputs = std::move(in);
    r.outputs = std::move(out);
    r.attrs = std::move(attrs);
    return r;
}

OpRecord matmul(std::int64_t m, std::int64_t k, std::int64_t n, bool ta, bool tb, std::string type = "MatMulV2") {
    return make(std::move(type),
                {tensor(ta ? RuntimeShape{k, m} : RuntimeShape{m, k}), tensor(tb ? RuntimeShape{n, k} : RuntimeShape{k, n}),
                 std::monostate{}, std::monostate{}},
                {tensor({m, n})},
                {attr("transpose_x1", "bool", ta), attr("transpose_x2", "bool", tb), attr("offset_x", "int", 0)});
}

OpRecord bmm(std::int64_t b1, std::int64_t b2, std::int64_t m, std::int64_t k, std::int64_t n, bool ta, bool tb) {
    return make("BatchMatMulV2",
                {tensor(ta ? RuntimeShape{b1, k, m} : RuntimeShape{b1, m, k}),
                 tensor(tb ? RuntimeShape{b2, n, k} : RuntimeShape{b2, k, n})},
                {tensor({std::max(b1, b2), m, n})}, {attr("adj_x1", "bool", ta), attr("adj_x2", "bool", tb)});
}

OpRecord binary(std::string type, RuntimeShape a, RuntimeShape b, RuntimeShape y) {
    return make(std::move(type), {tensor(std::move(a)), tensor(std::move(b))}, {tensor(std::move(y))});
}

OpRecord unary(std::string type, const RuntimeShape& s) { return make(std::move(type), {tensor(s)}, {tensor(s)}); }

OpRecord softmax(const RuntimeShape& s) {
    return make("SoftmaxV2", {tensor(s)}, {tensor(s)}, {attr("axes", "list_int", skc::Array{skc::Value(-1)})});
}

OpRecord layer_norm(const RuntimeShape& s, bool stats, double eps = 1e-5) {
    const std::int64_t d = s[s.rank() - 1];
    RuntimeShape st = s;
    st[s.rank() - 1] = 1;
    std::vector<TensorSlot> out{tensor(s)};
    if (stats) out.insert(out.end(), {tensor(st), tensor(st)});
    return make("LayerNorm", {tensor(s), tensor({d}), tensor({d})}, std::move(out),
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
    for (bool ta : {false, true})
        for (bool tb : {false, true}) add(bmm(3, 3, 7, 33, 5, ta, tb));
    add(bmm(2, 2, 16, 64, 16, false, false));
    add(bmm(1, 4, 7, 9, 5, false, false));
    add(bmm(4, 1, 7, 9, 5, true, false));
    add(bmm(1, 1, 1, 1, 1, false, false));
    for (const char* t : {"Add", "Mul"}) {
        add(binary(t, {32, 64}, {32, 64}, {32, 64}));
        add(binary(t, {7, 33}, {}, {7, 33}));
        add(binary(t, {1}, {1}, {1}));
        add(binary(t, {2, 7, 33}, {33}, {2, 7, 33}));
        add(binary(t, {1, 7, 33}, {3, 7, 33}, {3, 7, 33}));
        add(binary(t, {1}, {5, 3}, {5, 3}));
    }
    for (const char* t : {"Relu", "Gelu"}) {
        add(unary(t, {1}));
        add(unary(t, {7, 33}));
        add(unary(t, {32, 256}));
    }
    add(softmax({1, 1}));
    add(softmax({7, 33}));
    add(softmax({2, 16, 16}));
    add(softmax({4, 1000}));
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
    for (const auto& e : fs::directory_iterator(skc_test::example_ops_dir())) {
        OpRecord r = skc::read_op_info(e.path());
        if (skc_host::supported(r)) c.emplace_back(e.path().filename().string(), std::move(r));
    }
    return c;
}

/// `c++` on PATH, or $SKC_HOST_CXX when set.
std::string find_cxx() {
    if (const char* e = std::getenv("SKC_HOST_CXX"); e != nullptr && *e != '\0') return e;
    const char* path = std::getenv("PATH");
    std::string p = path != nullptr ? path : "/usr/bin:/bin";
    for (std::size_t start = 0; start <= p.size();) {
        std::size_t end = p.find(':', start);
        if (end == std::string::npos) end = p.size();
        const std::string dir = end > start ? p.substr(start, end - start) : ".";
        const std::string cand = dir + "/c++";
        if (::access(cand.c_str(), X_OK) == 0) return cand;
        start = end + 1;
    }
    return {};
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
    while (::waitpid(pid, &status, 0) < 0) {
    }
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

/// One float buffer per float slot (random for inputs), null for absent or non-float slots.
std::vector<std::vector<float>> buffers(const std::vector<TensorSlot>& slots, std::mt19937& rng, bool random, float fill) {
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    std::vector<std::vector<float>> out;
    for (const TensorSlot& s : slots) {
        const auto* t = std::get_if<TensorDesc>(&s);
        if (t == nullptr || t->dtype != "float") {
            out.emplace_back();
            continue;
        }
        std::vector<float> v(static_cast<std::size_t>(t->shape.element_count().value()), fill);
        if (random)
            for (float& f : v) f = dist(rng);
        out.push_back(std::move(v));
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
double rel_err(float a, float b) {
    return std::abs(static_cast<double>(a) - b) / std::max(1.0, std::abs(static_cast<double>(b)));
}

constexpr double tolerance = 1e-5;

}  // namespace

TEST_CASE("generated kernels compiled with the system compiler agree with the generic kernels") {
    const std::string cxx = find_cxx();
    REQUIRE_MESSAGE(!cxx.empty(), "no c++ compiler on PATH (set SKC_HOST_CXX)");
    const auto ops = cases();
    REQUIRE(ops.size() > 60);

    // Two combined sources, compiled at once by two compiler processes.
    skc_test::TempDir dir;
    std::string src[2];
    std::vector<std::string> symbols;
    for (std::size_t i = 0; i < ops.size(); ++i) {
        symbols.push_back("skc_host_test_kernel_" + std::to_string(i));
        const std::optional<std::string> code = skc_host::generate_kernel(ops[i].second, symbols.back());
        REQUIRE_MESSAGE(code.has_value(), ops[i].first << ": " << skc_host::unsupported_reason(ops[i].second));
        CHECK(code->find("#include <") != std::string::npos);
        src[i % 2] += *code;
    }
    pid_t pids[2];
    for (int j = 0; j < 2; ++j) {
        const fs::path cpp = dir / ("kernels" + std::to_string(j) + ".cpp");
        skc_test::spit(cpp, src[j]);
        pids[j] = spawn({cxx, "-std=c++17", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-o",
                         (dir / ("kernels" + std::to_string(j) + ".so")).string(), cpp.string()},
                        dir / ("kernels" + std::to_string(j) + ".log"));
    }
    for (int j = 0; j < 2; ++j) {
        const int rc = wait_for(pids[j]);
        REQUIRE_MESSAGE(rc == 0, cxx << " failed (" << rc << "):\n" << skc_test::slurp(dir / ("kernels" + std::to_string(j) + ".log")));
        CHECK_MESSAGE(skc_test::slurp(dir / ("kernels" + std::to_string(j) + ".log")).empty(), "compiler printed diagnostics");
    }
    Lib lib0(dir / "kernels0.so"), lib1(dir / "kernels1.so");
    REQUIRE_MESSAGE(lib0.handle != nullptr, ::dlerror());
    REQUIRE_MESSAGE(lib1.handle != nullptr, ::dlerror());

    std::mt19937 rng(1234);
    double worst = 0.0;
    std::string worst_op;
    for (std::size_t i = 0; i < ops.size(); ++i) {
        const std::string& name = ops[i].first;
        const OpRecord& op = ops[i].second;
        CAPTURE(name);
        auto* sym = ::dlsym((i % 2 == 0 ? lib0 : lib1).handle, symbols[i].c_str());
        REQUIRE(sym != nullptr);
        const auto kernel = reinterpret_cast<Kernel>(sym);

        auto in = buffers(op.inputs, rng, true, 0.0f);
        auto out_static = buffers(op.outputs, rng, false, std::numeric_limits<float>::quiet_NaN());
        auto out_generic = buffers(op.outputs, rng, false, std::numeric_limits<float>::quiet_NaN());
        const auto in_p = pointers<const float>(in);
        kernel(in_p.data(), pointers<float>(out_static).data());
        skc_host::run_generic(op, in_p.data(), pointers<float>(out_generic).data());

        double err = 0.0;
        bool all_finite = true;
        for (std::size_t o = 0; o < out_static.size(); ++o) {
            REQUIRE(out_static[o].size() == out_generic[o].size());
            for (std::size_t e = 0; e < out_static[o].size(); ++e) {
                all_finite = all_finite && std::isfinite(out_static[o][e]) && std::isfinite(out_generic[o][e]);
                err = std::max(err, rel_err(out_static[o][e], out_generic[o][e]));
            }
        }
        CHECK_MESSAGE(all_finite, "an output element was not written (or is not finite)");
        CHECK(err <= tolerance);
        if (err > worst) worst = err, worst_op = name;
    }
    MESSAGE(ops.size() << " kernels; max relative error static vs generic: " << worst
                       << (worst_op.empty() ? "" : " (" + worst_op + ")"));
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
                                const float av = ta ? a[static_cast<std::size_t>(p * M + i)] : a[static_cast<std::size_t>(i * K + p)];
                                const float bv = tb ? b[static_cast<std::size_t>(t * K * N + j * K + p)]
                                                    : b[static_cast<std::size_t>(t * K * N + p * N + j)];
                                s += static_cast<double>(av) * bv;
                            }
                            CHECK(std::abs(y[static_cast<std::size_t>(t * M * N + i * N + j)] - s) <= 1e-4 * (1 + std::abs(s)));
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
            for (std::size_t c = 0; c < 33; ++c) CHECK(std::abs(y[r * 33 + c] - std::exp(x[r * 33 + c] - mx) / sum) < 1e-6);
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
            CHECK(std::abs(y[i] - 0.5 * v * (1 + std::tanh(std::sqrt(2 / 3.141592653589793) * (v + 0.044715 * v * v * v)))) < 1e-5);
        }
        skc_host::run_generic(unary("Relu", {7, 33}), in1, out1);
        for (std::size_t i = 0; i < x.size(); ++i) CHECK(y[i] == std::max(x[i], 0.0f));
        const float* in2[] = {b.data(), x.data()};  // [33] + [7, 33]: the first input is broadcast
        skc_host::run_generic(binary("Add", {33}, {7, 33}, {7, 33}), in2, out1);
        for (std::size_t i = 0; i < x.size(); ++i) CHECK(y[i] == x[i] + b[i % 33]);
    }
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
    OpRecord bias = matmul(4, 4, 4, false, false);
    bias.inputs[2] = tensor({4});
    check(bias, "bias");
    check(make("MatMul", {tensor({4, 5}), tensor({6, 4})}, {tensor({4, 4})}), "inner dims differ");
    check(bmm(2, 3, 4, 4, 4, false, false), "do not broadcast");
    check(binary("Add", {4, 5}, {4}, {4, 5}), "trailing-dim broadcast");
    check(binary("Mul", {4, 5}, {4, 5}, {4, 6}), "only equal shapes");
    OpRecord sm = softmax({4, 5});
    (*sm.attrs)[0].value = skc::Array{skc::Value(0)};
    check(sm, "last axis");
    OpRecord ln = layer_norm({4, 5}, true);
    (*ln.attrs)[0].value = 0;
    check(ln, "begin_norm_axis");
    check(transpose({2, 3}, {0, 0}, true), "not a permutation");
    OpRecord tr = transpose({2, 3}, {1, 0});
    std::get<TensorDesc>(tr.inputs[1]).const_data.reset();
    check(tr, "const_data");
    check(make("Relu", {tensor({0, 3})}, {tensor({0, 3})}), "no elements");
    check(make("ConcatD", {std::vector<TensorDesc>{tensor({2}), tensor({2})}}, {tensor({4})}), "ConcatD");
    CHECK_THROWS_AS((void)skc_host::generate_kernel(unary("Relu", {4}), "not an identifier"), std::invalid_argument);

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
    CHECK(skipped == 3);  // ConcatD, GatherV2, ReduceSum
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
}
