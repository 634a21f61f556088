// skc_demo, run as a user runs it (posix_spawn, no shell) on a fresh temporary base: the first run
// compiles (a cache miss), the second finds the package in the cache and does not run the compiler,
// --no-cache compiles again without touching the cache, and bad command lines exit 2.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <skc/op_info_io.hpp>
#include <skc/value.hpp>

#include "run_tool.hpp"
#include "test_support.hpp"

namespace examples_demo_demo_test {

namespace {

namespace fs = std::filesystem;
using skc_test::TempDir;

using skc_test::Run;

Run run_demo(const fs::path& cwd, const std::vector<std::string>& args) {
    return skc_test::run_program(SKC_DEMO, cwd, args);
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

/// Run folders below `base` that hold a compiler log or a package (the compiler ran there).
int compiled_runs(const fs::path& base) {
    int n = 0;
    for (const auto& e : fs::directory_iterator(base / "static_kernel_compile_outputs")) {
        if (e.path().filename() == "static_kernel_cache") continue;
        bool ran = false;
        for (const auto& f : fs::directory_iterator(e.path()))
            ran = ran || f.path().extension() == ".run" || f.path().filename() == "op_compiler.log";
        n += ran ? 1 : 0;
    }
    return n;
}

}  // namespace

TEST_CASE("skc_demo --small: a miss that compiles, then a cache hit without compiling, then --no-cache") {
    TempDir dir;
    const fs::path base = dir / "base";  // created by the demo

    const Run first = run_demo(dir.path(), {"--small", "--base", base.string(), "--jobs", "2", "--iters", "2"});
    INFO("first run stdout:\n" << first.out << "\nstderr:\n" << first.err);
    CHECK(first.status == 0);
    CHECK(has(first.out, "cache: miss (compiled)"));
    CHECK(has(first.out, "static run:  19 static, 0 generic calls (expected 19 static"));
    CHECK(has(first.out, "geomean speedup over op types:"));
    CHECK(compiled_runs(base) == 1);
    CHECK(fs::is_directory(base / "op_library"));

    const Run second = run_demo(dir.path(), {"--small", "--base", base.string(), "--iters", "2", "--json"});
    INFO("second run stdout:\n" << second.out << "\nstderr:\n" << second.err);
    CHECK(second.status == 0);
    CHECK(compiled_runs(base) == 1);  // the compiler did not run again
    const skc::Value doc = skc::parse_json(second.out);
    CHECK(doc.find("cache")->as_string() == "hit");
    CHECK(doc.find("report")->find("cache_hit")->as_bool());
    CHECK(doc.find("static_run")->find("ok")->as_bool());
    CHECK(doc.find("static_run")->find("generic_calls")->as_int() == 0);
    CHECK(doc.find("agreement")->find("ok")->as_bool());
    CHECK(doc.find("timing")->find("ops")->as_array().size() == 8);

    const Run third =
        run_demo(dir.path(), {"--small", "--base", base.string(), "--iters", "2", "--no-cache", "--jobs", "2"});
    INFO("third run stdout:\n" << third.out << "\nstderr:\n" << third.err);
    CHECK(third.status == 0);
    CHECK(has(third.out, "cache: disabled (compiled)"));
    CHECK(compiled_runs(base) == 2);
}

TEST_CASE("skc_demo: bad command lines exit 2 with the usage; --help exits 0") {
    TempDir dir;
    for (const std::vector<std::string>& args : {std::vector<std::string>{"--bogus"},
                                                 {"--iters"},
                                                 {"--iters", "0"},
                                                 {"--seq", "x"},
                                                 {"--small", "--heads", "3"},
                                                 {"--json=yes"}}) {
        const Run r = run_demo(dir.path(), args);
        INFO(args.front() << ": " << r.err);
        CHECK(r.status == 2);
        CHECK(has(r.err, "usage: skc_demo"));
        CHECK(r.out.empty());
    }
    const Run help = run_demo(dir.path(), {"--help"});
    CHECK(help.status == 0);
    CHECK(has(help.out, "usage: skc_demo"));
    CHECK(fs::is_empty(dir.path()));  // nothing was created
}

}  // namespace examples_demo_demo_test
