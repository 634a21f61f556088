// The host runtime of examples/host/runtime.hpp: dispatch between generic and static kernels,
// recording, and reselects. The static kernels are real: the test's ops are written as op info
// files, compiled by host_op_compiler (through skc::ProcessInvoker) into a makeself run package,
// installed with skc::RunPackageInstaller into a temporary op library and loaded by HostReselect
// (loader.hpp, dlopen). The package is built once per test program.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <skc/layout.hpp>
#include <skc/op_info_io.hpp>
#include <skc/policy/run_package_installer.hpp>
#include <skc/policy/process_invoker.hpp>

#include "host/runtime.hpp"
#include "test_support.hpp"

namespace examples_demo_runtime_test {

namespace {

namespace fs = std::filesystem;
using skc::OpRecord;
using skc::RuntimeShape;
using skc::TensorDesc;
using skc_host::HostOp;
using skc_host::HostReselect;
using skc_host::Runtime;
using skc_test::TempDir;

TensorDesc tensor(RuntimeShape shape, std::string dtype = "float") {
    return skc::plain_tensor(std::move(shape), std::move(dtype));
}

skc::Attr attr(std::string name, std::string dtype, skc::Value v) {
    return skc::Attr{std::move(name), std::move(dtype), {}, std::move(v), {}};
}

OpRecord make(std::string type, std::vector<skc::TensorSlot> in, std::vector<skc::TensorSlot> out,
              std::vector<skc::Attr> attrs = {}) {
    return skc::make_op(std::move(type), std::move(in), std::move(out), std::move(attrs));
}

/// A few ops of different kinds, small enough to compile in seconds.
std::vector<OpRecord> test_ops() {
    TensorDesc perm = tensor({3}, "int64");
    perm.const_data = skc::Value(skc::Array{skc::Value(2), skc::Value(0), skc::Value(1)});
    return {
        make("MatMulV2", {tensor({8, 16}), tensor({16, 4}), std::monostate{}, std::monostate{}}, {tensor({8, 4})},
             {attr("transpose_x1", "bool", false), attr("transpose_x2", "bool", false)}),
        make("Add", {tensor({8, 4}), tensor({4})}, {tensor({8, 4})}),
        make("Transpose", {tensor({2, 3, 4}), perm}, {tensor({4, 2, 3})}),
        make("SoftmaxV2", {tensor({4, 8})}, {tensor({4, 8})}, {attr("axes", "list_int", skc::Array{skc::Value(-1)})}),
        make("LayerNorm", {tensor({4, 8}), tensor({8}), tensor({8})}, {tensor({4, 8})},
             {attr("epsilon", "float", 1e-5)}),
        make("Gelu", {tensor({32})}, {tensor({32})}),
    };
}

/// Inputs and output buffers for one op, from its record: float slots get data, others nullptr.
struct Buffers {
    std::vector<std::vector<float>> in, out;
    std::vector<const float*> in_ptrs;
    std::vector<float*> out_ptrs;

    Buffers(const OpRecord& r, std::uint32_t seed) {
        std::mt19937 g(seed);
        in.resize(r.inputs.size());
        out.resize(r.outputs.size());
        for (std::size_t i = 0; i < r.inputs.size(); ++i) {
            const auto* t = std::get_if<TensorDesc>(&r.inputs[i]);
            if (t != nullptr && t->dtype == "float") {
                in[i].resize(static_cast<std::size_t>(*t->shape.element_count()));
                for (float& v : in[i]) v = static_cast<float>(g() >> 8) * 0x1p-23f - 1.0f;
            }
            in_ptrs.push_back(in[i].empty() ? nullptr : in[i].data());
        }
        for (std::size_t i = 0; i < r.outputs.size(); ++i) {
            const auto* t = std::get_if<TensorDesc>(&r.outputs[i]);
            if (t != nullptr) out[i].assign(static_cast<std::size_t>(*t->shape.element_count()), -7.0f);
            out_ptrs.push_back(out[i].empty() ? nullptr : out[i].data());
        }
    }
};

/// The outputs of `op` from run_generic (the reference).
std::vector<std::vector<float>> reference(const OpRecord& op, std::uint32_t seed) {
    Buffers b(op, seed);
    skc_host::run_generic(op, b.in_ptrs.data(), b.out_ptrs.data());
    return b.out;
}

bool agree(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i].size() != b[i].size()) return false;
        for (std::size_t j = 0; j < a[i].size(); ++j)
            if (!(std::fabs(a[i][j] - b[i][j]) <= 1e-5f * std::max(1.0f, std::fabs(b[i][j])))) return false;
    }
    return true;
}

/// The installed-index context for library `lib`, device dev0.
skc::ReselectContext context(const fs::path& lib) { return skc::ReselectContext{lib, "host", "dev0", ""}; }

/// One run package of test_ops(), built once by host_op_compiler.
const fs::path& package() {
    static TempDir dir;
    static const fs::path pkg = [] {
        const fs::path ops = dir / "ops";
        fs::create_directories(ops);
        for (const OpRecord& r : test_ops()) skc::write_op_info(ops, r, skc::WriteOptions{false, false});
        skc::ProcessInvoker invoker(SKC_HOST_OP_COMPILER);
        skc::CompileRequest req;
        req.json_dir = ops;
        req.device = "dev0";
        req.jobs = 2;
        req.output_dir = dir / "out";
        req.timeout = std::chrono::seconds(600);
        return invoker.compile(req).package;
    }();
    return pkg;
}

}  // namespace

TEST_CASE("HostOp: prepared once, refuses what the host kernels cannot run") {
    const OpRecord mm = test_ops()[0];
    const HostOp op(mm);
    CHECK(op.digest() == skc::digest(mm));
    CHECK(op.op_type() == "MatMulV2");
    CHECK(std::holds_alternative<skc_host::MatMulPlan>(op.plan()));

    try {
        (void)HostOp(make("ReduceSum", {tensor({4, 8})}, {tensor({4})}));
        FAIL("ReduceSum accepted");
    } catch (const skc::Error& e) {
        CHECK(e.code() == skc::Errc::invalid_argument);
        CHECK(std::string(e.what()).find("ReduceSum") != std::string::npos);
    }
    OpRecord bad = mm;
    bad.op_type = "Mat Mul";
    CHECK_THROWS_AS((void)HostOp(bad), skc::Error);
}

TEST_CASE("Runtime: an empty table runs every op with the generic kernels") {
    Runtime rt;
    CHECK(rt.table().size() == 0);
    std::uint32_t seed = 1;
    for (const OpRecord& r : test_ops()) {
        const HostOp op(r);
        Buffers b(r, seed);
        rt.run(op, b.in_ptrs.data(), b.out_ptrs.data());
        CHECK(b.out == reference(r, seed));
        CHECK((rt.static_kernel(op) == nullptr));
        Buffers c(r, seed);
        rt.run(r, c.in_ptrs.data(), c.out_ptrs.data());  // the bare-record path
        CHECK(c.out == b.out);
        ++seed;
    }
    CHECK(rt.counters().generic_calls == 2 * test_ops().size());
    CHECK(rt.counters().static_calls == 0);
    rt.reset_counters();
    CHECK(rt.counters().generic_calls == 0);
}

TEST_CASE("Runtime: ops run while a recorder is attached are recorded once, with bin_type 1 for generic kernels") {
    TempDir base;
    Runtime rt;
    const std::vector<OpRecord> ops = test_ops();
    std::vector<HostOp> prepared(ops.begin(), ops.end());
    skc::OpRecorder<> rec;
    rt.set_recorder(&rec);
    CHECK(rt.recorder() == &rec);
    for (int step = 0; step < 3; ++step)
        for (std::size_t i = 0; i < ops.size(); ++i) {
            Buffers b(ops[i], 7);
            if (i % 2 == 0) rt.run(prepared[i], b.in_ptrs.data(), b.out_ptrs.data());
            else rt.run(ops[i], b.in_ptrs.data(), b.out_ptrs.data());
        }
    rt.set_recorder(nullptr);
    Buffers extra(ops[0], 7);
    rt.run(prepared[0], extra.in_ptrs.data(), extra.out_ptrs.data());  // not recorded: detached
    CHECK(rec.size() == ops.size());

    const skc::RunLayout run = skc::Layout(base.path()).create_run();
    CHECK(rec.stop(run).recorded == ops.size());
    const auto debug = skc::read_op_info_dir(run.debug());
    REQUIRE(debug.ops.size() == ops.size());
    for (const skc::LoadedOp& l : debug.ops) {
        CHECK(l.record.bin_type == std::optional<std::int64_t>(1));
        const bool known = std::any_of(ops.begin(), ops.end(),
                                       [&](const OpRecord& o) { return skc::digest(o) == skc::digest(l.record); });
        CHECK_MESSAGE(known, l.path.string());
    }
}

TEST_CASE("HostReselect: an absent or empty index leaves the runtime on the generic kernels") {
    TempDir lib;
    Runtime rt;
    HostReselect hook(rt);
    hook.reselect(context(lib.path()));  // no static_kernel folder at all
    CHECK(hook.count() == 1);
    CHECK(hook.loaded() == 0);
    CHECK(rt.table().size() == 0);

    const fs::path index = skc_host::installed_index_path(context(lib.path()));
    fs::create_directories(index.parent_path());
    skc_test::spit(
        index,
        R"({"format": "skc-installed-kernels", "version": 1, "backend": "host", "device": "dev0", "kernels": {}})");
    hook.reselect(context(lib.path()));
    CHECK(hook.loaded() == 0);
    CHECK(rt.table().size() == 0);

    const OpRecord r = test_ops()[0];
    const HostOp op(r);
    Buffers b(r, 3);
    rt.run(op, b.in_ptrs.data(), b.out_ptrs.data());
    CHECK(b.out == reference(r, 3));
    CHECK(rt.counters().generic_calls == 1);
    CHECK(rt.counters().static_calls == 0);
}

TEST_CASE(
    "HostReselect with a real installed package: static kernels, a bad index changes nothing, uninstall goes back") {
    TempDir lib;
    Runtime rt;
    HostReselect hook(rt);
    const std::vector<OpRecord> ops = test_ops();
    std::vector<HostOp> prepared(ops.begin(), ops.end());

    skc::RunPackageInstaller installer;
    skc::Installation inst = installer.install(package(), lib.path(), skc::InstallOptions{});
    hook.reselect(context(lib.path()));
    CHECK(hook.loaded() == ops.size());
    CHECK(rt.table().size() == ops.size());

    for (std::size_t i = 0; i < ops.size(); ++i) {
        CHECK((rt.static_kernel(prepared[i]) != nullptr));
        Buffers b(ops[i], 11);
        rt.run(prepared[i], b.in_ptrs.data(), b.out_ptrs.data());
        CHECK_MESSAGE(agree(b.out, reference(ops[i], 11)), ops[i].op_type);
    }
    CHECK(rt.counters().static_calls == ops.size());
    CHECK(rt.counters().generic_calls == 0);

    // A damaged index is an error and the table keeps the kernels it had.
    const fs::path index = skc_host::installed_index_path(context(lib.path()));
    const std::string good = skc_test::slurp(index);
    skc_test::spit(index, "{\"format\": \"skc-installed-kernels\", \"version\": 1, ");
    CHECK_THROWS_AS(hook.reselect(context(lib.path())), skc::Error);
    CHECK(rt.table().size() == ops.size());
    skc_test::spit(index, good);

    // Uninstalled: the index is gone, so a reselect drops the static kernels.
    inst.release();
    CHECK_FALSE(fs::exists(index));
    hook.reselect(context(lib.path()));
    CHECK(rt.table().size() == 0);
    rt.reset_counters();
    Buffers b(ops[0], 11);
    rt.run(prepared[0], b.in_ptrs.data(), b.out_ptrs.data());
    CHECK(rt.counters().generic_calls == 1);
}

TEST_CASE("Runtime: reselects while other threads run and record ops") {
    TempDir lib, base;
    Runtime rt;
    HostReselect hook(rt);
    const std::vector<OpRecord> ops = test_ops();
    const std::vector<HostOp> prepared(ops.begin(), ops.end());
    std::vector<std::vector<std::vector<float>>> refs;
    for (const OpRecord& r : ops) refs.push_back(reference(r, 5));

    skc::RunPackageInstaller installer;
    const skc::Installation inst = installer.install(package(), lib.path(), skc::InstallOptions{});
    skc::OpRecorder<> rec;
    rt.set_recorder(&rec);

    // Every thread runs ops until the reloads are over (and at least `rounds` times), so the two
    // overlap however the threads are scheduled.
    constexpr int threads = 4, rounds = 200, reloads = 40;
    std::atomic<int> mismatches{0};
    std::atomic<std::uint64_t> calls{0};
    std::atomic<bool> go{false}, done{false};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            while (!go.load()) std::this_thread::yield();
            for (int i = 0; i < rounds || !done.load(); ++i) {
                const std::size_t k = static_cast<std::size_t>(i + t) % ops.size();
                Buffers b(ops[k], 5);
                if (i % 3 == 0) rt.run(ops[k], b.in_ptrs.data(), b.out_ptrs.data());
                else rt.run(prepared[k], b.in_ptrs.data(), b.out_ptrs.data());
                if (!agree(b.out, refs[k])) ++mismatches;
                ++calls;
            }
        });
    go = true;
    for (int i = 0; i < reloads; ++i) {  // flip between the installed kernels and none
        hook.reselect(context(lib.path()));
        rt.reload({});
    }
    hook.reselect(context(lib.path()));
    done = true;
    for (std::thread& th : pool) th.join();
    rt.set_recorder(nullptr);

    CHECK(mismatches.load() == 0);
    const Runtime::Counters c = rt.counters();
    CHECK(c.static_calls + c.generic_calls == calls.load());
    CHECK(calls.load() >= static_cast<std::uint64_t>(threads * rounds));
    CHECK(rec.size() == ops.size());
    CHECK(rt.table().size() == ops.size());
    CHECK(hook.count() == reloads + 1);
}

}  // namespace examples_demo_runtime_test
