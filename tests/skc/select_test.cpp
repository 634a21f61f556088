#include <doctest/doctest.h>

#include <skc/op_info_io.hpp>
#include <skc/select.hpp>

#include "test_support.hpp"

namespace skc_select_test {

namespace fs = std::filesystem;

namespace {

/// A run folder whose <pid>_opcompile (or <pid>_debug) holds copies of the example op info files.
skc::RunLayout make_run(const skc_test::TempDir& dir, bool as_debug = false) {
    const skc::RunLayout run = skc::Layout(dir.path()).create_run();
    const fs::path target = as_debug ? run.debug() : run.opcompile();
    fs::create_directories(target);
    for (const auto& e : fs::directory_iterator(skc_test::example_ops_dir()))
        fs::copy_file(e.path(), target / e.path().filename());
    return run;
}

std::size_t files_in(const fs::path& p) {
    if (!fs::exists(p)) return 0;
    return static_cast<std::size_t>(std::distance(fs::directory_iterator(p), fs::directory_iterator()));
}

}  // namespace

TEST_CASE("selection: blacklist copied aside, unsupported and duplicates dropped, the rest selected") {
    skc_test::TempDir dir;
    const skc::RunLayout run = make_run(dir);
    const auto before = skc_test::snapshot(run.opcompile());
    skc::CompiledSet none;
    const skc::Selection s = skc::select_for_compile(run, skc::SelectOptions{{"Gelu", "_32_256_"}, false}, none);
    CHECK(s.input_dir == run.opcompile());
    CHECK(s.compile_dir == run.selected());
    CHECK(s.count(skc::Verdict::blacklisted) == 2);  // Gelu_float_ND_32_256_8 and MatMulV2_float_ND_32_256_3
    CHECK(s.count(skc::Verdict::unsupported) == 2);  // ReduceSum, GatherV2
    CHECK(s.count(skc::Verdict::duplicate) == 1);
    CHECK(s.ops.size() == 10);
    CHECK(files_in(run.selected()) == 10);
    CHECK(files_in(run.blacklisted()) == 2);
    CHECK(fs::exists(run.blacklisted() / "Gelu_float_ND_32_256_8.json"));
    CHECK(fs::exists(run.selected() / "MatMulV2_float_ND_32_64_0.json"));  // names are kept
    CHECK(skc_test::snapshot(run.opcompile()) == before);                  // the input is untouched
}

TEST_CASE("ops this process compiled before are not selected again; nothing left means skipped") {
    skc_test::TempDir dir;
    skc::CompiledSet compiled;
    const skc::RunLayout first = make_run(dir);
    const skc::Selection a = skc::select_for_compile(first, {}, compiled);
    CHECK(a.ops.size() == 12);
    compiled.mark(a.ops);

    const skc::RunLayout second = make_run(dir);
    const skc::Selection b = skc::select_for_compile(second, {}, compiled);
    CHECK(b.skipped());
    CHECK(b.compile_dir.empty());
    CHECK(b.count(skc::Verdict::already_compiled) == 13);  // the 12 and the file that repeats one of them
    CHECK_FALSE(fs::exists(second.selected()));            // step 5: skipped quietly, nothing written
}

TEST_CASE("falls back to <pid>_debug when <pid>_opcompile is absent") {
    skc_test::TempDir dir;
    const skc::RunLayout run = make_run(dir, true);
    skc::CompiledSet none;
    const skc::Selection s = skc::select_for_compile(run, {}, none);
    CHECK(s.input_dir == run.debug());
    CHECK(s.ops.size() == 12);
}

TEST_CASE("neither folder: a clear error naming the run folder") {
    skc_test::TempDir dir;
    const skc::RunLayout run = skc::Layout(dir.path()).create_run();
    try {
        (void)skc::select_for_compile(run);
        FAIL("no error");
    } catch (const skc::Error& e) {
        CHECK(e.file() == run.dir().string());
        CHECK(e.message() == "no op info to select from: neither '" + std::to_string(::getpid()) + "_opcompile' nor '" +
                                 std::to_string(::getpid()) + "_debug' exists");
    }
}

TEST_CASE("model compile cache: <pid>_opcompile is compiled directly when nothing is filtered") {
    skc_test::TempDir dir;
    const skc::RunLayout run = skc::Layout(dir.path()).create_run();
    fs::create_directories(run.opcompile());
    fs::copy_file(skc_test::example_ops_dir() / "Add_float_ND_32_64_9.json",
                  run.opcompile() / "Add_float_ND_32_64_9.json");
    skc::CompiledSet none;
    const skc::Selection s = skc::select_for_compile(run, skc::SelectOptions{{}, true}, none);
    CHECK(s.compile_dir == run.opcompile());
    CHECK_FALSE(fs::exists(run.selected()));

    // ... but a blacklist is never ignored: then _selected is written as usual.
    const skc::RunLayout run2 = make_run(dir);
    const skc::Selection s2 = skc::select_for_compile(run2, skc::SelectOptions{{"Gelu"}, true}, none);
    CHECK(s2.compile_dir == run2.selected());
    CHECK(s2.count(skc::Verdict::blacklisted) == 1);
}

TEST_CASE("plan_selection never touches the disk and agrees with select_for_compile") {
    const auto in = skc::read_op_info_dir(skc_test::example_ops_dir());
    skc::CompiledSet none;
    const auto plan = skc::plan_selection(in.ops, skc::SelectOptions{{"Gelu"}, false}, none);
    REQUIRE(plan.size() == 15);
    std::size_t selected = 0;
    for (const auto& d : plan) selected += d.verdict == skc::Verdict::selected;
    CHECK(selected == 11);
}

TEST_CASE("default policies hold the original's lists") {
    const skc::DefaultTargets t;
    CHECK(t.is_target("MatMulV2"));
    CHECK(t.is_target("FlashAttentionScoreGrad"));
    CHECK_FALSE(t.is_target("Add"));
    const skc::DefaultSupport s;
    CHECK_FALSE(s.supports("ReduceSum"));
    CHECK_FALSE(s.supports("Range"));
    CHECK(s.supports("MatMulV2"));
}

TEST_CASE("selecting twice in one run folder is refused before anything is written") {
    skc_test::TempDir dir;
    const skc::RunLayout run = make_run(dir);
    skc::CompiledSet none;
    (void)skc::select_for_compile(run, skc::SelectOptions{{"Gelu"}, false}, none);
    const auto before = skc_test::snapshot(run.dir());
    try {
        (void)skc::select_for_compile(run, skc::SelectOptions{{"Gelu"}, false}, none);
        FAIL("no error");
    } catch (const skc::Error& e) {
        CHECK(e.code() == skc::Errc::invalid_argument);
        CHECK(e.file() == run.dir().string());
        CHECK(e.message() == "selection already ran in this run folder ('" + run.selected().filename().string() +
                                 "' exists); select once per run folder");
    }
    CHECK(skc_test::snapshot(run.dir()) == before);
}

}  // namespace skc_select_test
