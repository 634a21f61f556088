#include <doctest/doctest.h>

#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <skc/op_info_io.hpp>

#include "test_support.hpp"

namespace skc_op_info_io_test {

namespace {

skc::OpRecord example() { return skc::read_op_info(skc_test::data_dir() / "MatMulV2_float_ND_1_2048_0.json"); }

skc::TensorDesc tensor(std::string dtype, skc::RuntimeShape shape, std::string format = "ND") {
    skc::TensorDesc t;
    t.dtype = std::move(dtype);
    t.shape = std::move(shape);
    t.format = std::move(format);
    return t;
}

}  // namespace

TEST_CASE("file names: first input, rank 0, list inputs, absent inputs") {
    skc::OpRecord r;
    r.op_type = "Mul";
    r.inputs = {tensor("float16", {})};
    CHECK(skc::op_info_file_name(r, 7) == "Mul_float16_ND_7.json");  // rank 0: no dims

    r.op_type = "ConcatD";
    r.inputs = {std::vector<skc::TensorDesc>{tensor("int32", {2, 3}, "NCHW"), tensor("float", {9})}};
    CHECK(skc::op_info_file_name(r, 0) == "ConcatD_int32_NCHW_2_3_0.json");  // first element of the list

    r.op_type = "Optional";
    r.inputs = {std::monostate{}, tensor("bfloat16", {4})};
    CHECK(skc::op_info_file_name(r, 1) == "Optional_bfloat16_ND_4_1.json");  // first present input

    r.op_type = "NoInputs";
    r.inputs = {};
    CHECK(skc::op_info_file_name(r, 3) == "NoInputs_3.json");

    r.op_type = "Unknown";
    r.inputs = {tensor("float4_e2m1", {8}, "FRACTAL_NZ")};  // names skc does not list are kept
    CHECK(skc::op_info_file_name(r, 2) == "Unknown_float4_e2m1_FRACTAL_NZ_8_2.json");
}

TEST_CASE("the file counter never repeats, even from many threads") {
    std::mutex mu;
    std::set<std::uint64_t> seen;
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&] {
            std::vector<std::uint64_t> mine;
            for (int i = 0; i < 5000; ++i) mine.push_back(skc::next_op_info_counter());
            std::lock_guard lock(mu);
            seen.insert(mine.begin(), mine.end());
        });
    for (auto& th : threads) th.join();
    CHECK(seen.size() == 8 * 5000);
}

TEST_CASE("write then read gives the same record; names come from the counter") {
    skc_test::TempDir dir;
    const skc::OpRecord r = example();
    const auto p1 = skc::write_op_info(dir.path(), r);
    const auto p2 = skc::write_op_info(dir.path(), r);
    CHECK(p1 != p2);
    CHECK(p1.filename().string().rfind("MatMulV2_float_ND_1_2048_", 0) == 0);
    CHECK(skc::read_op_info(p1) == r);
    CHECK(skc::read_op_info(p2) == r);
    // Nothing but the two files is left behind (no temporary files).
    CHECK(skc_test::snapshot(dir.path()).size() == 2);
}

TEST_CASE("bin fields are written only when asked") {
    skc_test::TempDir dir;
    skc::OpRecord r = example();
    r.bin_type = 1;
    r.bin_info = skc::Value("kernel.o");
    const auto with = skc::write_op_info(dir.path(), r, skc::WriteOptions{true, false});
    const auto without = skc::write_op_info(dir.path(), r, skc::WriteOptions{false, true});
    CHECK(skc::read_op_info(with).bin_type == 1);
    CHECK_FALSE(skc::read_op_info(without).bin_type.has_value());
    CHECK(skc::digest(skc::read_op_info(with)) == skc::digest(skc::read_op_info(without)));
}

TEST_CASE("writing under an existing name fails and keeps the existing file") {
    skc_test::TempDir dir;
    skc_test::spit(dir / "Taken.json", "original");
    try {
        skc::write_op_info_as(dir.path(), "Taken.json", example());
        FAIL("no error");
    } catch (const skc::Error& e) {
        CHECK(e.code() == skc::Errc::io_error);
        CHECK(e.file() == (dir / "Taken.json").string());
        CHECK(e.message() == "cannot publish: File exists");
    }
    CHECK(skc_test::slurp(dir / "Taken.json") == "original");
    CHECK(skc_test::snapshot(dir.path()).size() == 1);  // the temporary file is gone too
}

TEST_CASE("reading a directory: sorted, *.json only, hidden files skipped") {
    skc_test::TempDir dir;
    const std::string text = skc_test::slurp(skc_test::data_dir() / "MatMulV2_float_ND_1_2048_0.json");
    skc_test::spit(dir / "b.json", text);
    skc_test::spit(dir / "a.json", text);
    skc_test::spit(dir / ".tmp.1.2.c.json", "half-writ");
    skc_test::spit(dir / "notes.txt", "not an op");
    std::filesystem::create_directory(dir / "sub.json");
    const auto got = skc::read_op_info_dir(dir.path());
    REQUIRE(got.ops.size() == 2);
    CHECK(got.ops[0].path.filename() == "a.json");
    CHECK(got.ops[1].path.filename() == "b.json");
    CHECK(got.errors.empty());
}

TEST_CASE("reading a missing directory names it") {
    skc_test::TempDir dir;
    try {
        (void)skc::read_op_info_dir(dir / "missing");
        FAIL("no error");
    } catch (const skc::Error& e) {
        CHECK(e.code() == skc::Errc::io_error);
        CHECK(e.file() == (dir / "missing").string());
        CHECK(e.message() == "cannot list directory: No such file or directory");
    }
}

}  // namespace skc_op_info_io_test
