#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include <skc/op_desc.hpp>
#include <skc/recorder.hpp>

#include "test_support.hpp"

namespace {

skc::OpRecord op(const std::string& type, std::int64_t a, std::int64_t b) {
    skc::TensorDesc t;
    t.name = "x";
    t.dtype = "float";
    t.format = "ND";
    t.shape = skc::RuntimeShape{a, b};
    skc::OpRecord r;
    r.op_type = type;
    r.inputs = {t};
    r.outputs = {t};
    return r;
}

}  // namespace

TEST_CASE("one recording session per process; a second start says why it fails") {
    CHECK_FALSE(skc::recording_session_active());
    {
        skc::OpRecorder<> first;
        CHECK(skc::recording_session_active());
        try {
            skc::OpRecorder<> second;
            FAIL("a second session started");
        } catch (const skc::Error& e) {
            CHECK(e.code() == skc::Errc::session_active);
            CHECK_EQ(std::string(e.what()),
                     "a recording session is already active in this process (a profiler that records op arguments "
                     "from step 0 holds it); stop it before enabling static kernel compilation");
        }
        CHECK(skc::recording_session_active());  // the failed start did not release the first
    }
    CHECK_FALSE(skc::recording_session_active());
    skc::OpRecorder<> again;  // free again
    CHECK(skc::recording_session_active());
}

TEST_CASE("8 threads x 10,000 records: each distinct op recorded exactly once") {
    skc::OpRecorder<> rec;
    std::atomic<std::size_t> fresh{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 10000; ++i) {
                // Threads t and t+2, t+4, t+6 record the same 10,000 ops in different orders.
                const int k = (i * (2 * t + 1)) % 10000;
                fresh += rec.record(op("MatMulV2", k % 5000, t % 2 + 1)) ? 1 : 0;
            }
        });
    for (auto& th : threads) th.join();
    CHECK(fresh == 10000);
    CHECK(rec.size() == 10000);
    const skc::OpSet set = rec.snapshot();
    CHECK(set.size() == 10000);
}

TEST_CASE("stop writes <pid>_debug, <pid> and <pid>_opcompile in the order ops were first seen") {
    skc_test::TempDir dir;
    const skc::RunLayout run = skc::Layout(dir.path()).create_run();
    skc::OpRecorder<> rec;
    skc::OpRecord with_bin = op("MatMulV2", 2, 3);
    with_bin.bin_type = 1;
    with_bin.bin_info = skc::Value("matmul_dynamic.o");
    CHECK(rec.record(with_bin));
    CHECK(rec.record(op("ReduceSum", 2, 3)));   // unsupported, not a target
    CHECK(rec.record(op("Add", 2, 3)));         // supported, not a target
    CHECK_FALSE(rec.record(op("Add", 2, 3)));   // same content
    skc::OpRecord same_but_bin = op("MatMulV2", 2, 3);
    same_but_bin.bin_type = 0;                  // the same op after reselect: not a new op
    CHECK_FALSE(rec.record(same_but_bin));

    const skc::RecordingResult res = rec.stop(run);
    CHECK(res.recorded == 3);
    CHECK(res.targets == 1);
    CHECK(res.supported == 2);
    const auto debug = skc::read_op_info_dir(run.debug());
    const auto targets = skc::read_op_info_dir(run.targets());
    const auto opcompile = skc::read_op_info_dir(run.opcompile());
    REQUIRE(debug.ops.size() == 3);
    REQUIRE(targets.ops.size() == 1);
    REQUIRE(opcompile.ops.size() == 2);
    CHECK(targets.ops[0].record.bin_type == 1);  // <pid> and <pid>_debug keep bin fields
    for (const auto& o : opcompile.ops) CHECK_FALSE(o.record.bin_type.has_value());
    std::vector<std::string> types;
    for (const auto& o : opcompile.ops) types.push_back(o.record.op_type);
    std::sort(types.begin(), types.end());
    CHECK(types == std::vector<std::string>{"Add", "MatMulV2"});
}

TEST_CASE("an invalid record is refused with its fault and not recorded") {
    skc::OpRecorder<> rec;
    skc::OpRecord bad = op("Add", 2, 3);
    bad.op_type = "Add; rm -rf /";
    CHECK_THROWS_WITH_AS(rec.record(bad),
                         "op_type: op type \"Add; rm -rf /\" cannot be used in a file name: accepted are 1 to 128 "
                         "letters, digits and '_'",
                         skc::Error);
    CHECK(rec.size() == 0);
}

TEST_CASE("recording with a compile-time digest builds the record only for a new op") {
    using Relu = skc::OpDesc<"Relu",
        skc::desc::Inputs<skc::desc::Tensor<"x", skc::DType::float32, skc::Format::ND, skc::Shape<4, 8>>>,
        skc::desc::Outputs<skc::desc::Tensor<"y", skc::DType::float32, skc::Format::ND, skc::Shape<4, 8>>>>;
    skc::OpRecorder<> rec;
    int built = 0;
    auto make = [&] {
        ++built;
        return Relu::record();
    };
    CHECK(rec.record(Relu::digest, make));
    CHECK_FALSE(rec.record(Relu::digest, make));
    CHECK_FALSE(rec.record(Relu::record()));  // the run-time path agrees it is the same op
    CHECK(built == 1);
    CHECK(rec.size() == 1);
}

TEST_CASE("custom target and support policies") {
    skc_test::TempDir dir;
    const skc::RunLayout run = skc::Layout(dir.path()).create_run();
    using List = skc::OpTypeList;
    skc::OpRecorder<List, List> rec(List(List::Mode::only_these, {"Add"}), List(List::Mode::all_but_these, {"Add"}));
    rec.record(op("Add", 1, 1));
    rec.record(op("Mul", 1, 1));
    const auto res = rec.stop(run);
    CHECK(res.targets == 1);
    CHECK(res.supported == 1);
    CHECK(skc::read_op_info_dir(run.targets()).ops[0].record.op_type == "Add");
    CHECK(skc::read_op_info_dir(run.opcompile()).ops[0].record.op_type == "Mul");
}

TEST_CASE("stop ends the session: the process may record again, this recorder may not") {
    skc_test::TempDir dir;
    const skc::Layout layout(dir.path());
    skc::OpRecorder<> rec;
    rec.record(op("Add", 1, 2));
    rec.stop(layout.create_run());
    CHECK_FALSE(rec.active());
    CHECK_FALSE(skc::recording_session_active());
    CHECK_THROWS_WITH_AS(rec.record(op("Add", 3, 4)),
                         "the recording session was stopped; start a new OpRecorder to record again", skc::Error);
    CHECK_THROWS_WITH_AS(rec.stop(layout.create_run()), "the recording session was already stopped", skc::Error);
    skc::OpRecorder<> next;  // the process's session is free again
    CHECK(next.record(op("Add", 1, 2)));
}

TEST_CASE("a compile-time digest that does not match the record is refused") {
    skc::OpRecorder<> rec;
    const skc::Digest wrong = skc::digest(op("Mul", 1, 1));
    try {
        rec.record(wrong, [] { return op("Add", 1, 1); });
        FAIL("no error");
    } catch (const skc::Error& e) {
        CHECK(e.code() == skc::Errc::invalid_argument);
        CHECK(e.message() == "the digest given to record() (" + wrong.hex() + ") is not the digest of the record (" +
                                 skc::digest(op("Add", 1, 1)).hex() + ")");
    }
    CHECK(rec.size() == 0);
}

TEST_CASE("discard ends the session without writing: the process may record again, this recorder may not") {
    skc_test::TempDir dir;
    const skc::Layout layout(dir.path());
    skc::OpRecorder<> rec;
    rec.record(op("Add", 1, 2));
    rec.discard();
    CHECK_FALSE(rec.active());
    CHECK_FALSE(skc::recording_session_active());
    CHECK_THROWS_WITH_AS(rec.record(op("Add", 3, 4)),
                         "the recording session was stopped; start a new OpRecorder to record again", skc::Error);
    CHECK_THROWS_WITH_AS(rec.record(skc::digest(op("Add", 5, 6)), [] { return op("Add", 5, 6); }),
                         "the recording session was stopped; start a new OpRecorder to record again", skc::Error);
    CHECK_THROWS_WITH_AS(rec.stop(layout.create_run()), "the recording session was already stopped", skc::Error);
    rec.discard();  // twice is harmless
    skc::OpRecorder<> next;  // the process's session is free again
    CHECK(next.record(op("Add", 1, 2)));
}
