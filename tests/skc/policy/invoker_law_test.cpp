// The OpCompilerInvoker law suite, run over every shipped invoker: ProcessInvoker with a /bin/sh
// script compiler the test writes, and FunctionInvoker with a lambda compiler. Both compilers do
// the same thing, chosen by the request's last extra argument (which ProcessInvoker passes last on
// the command line): print the progress lines of `progress_script` for its mode and write a new
// package into the output folder, or fail.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include <skc/error.hpp>
#include <skc/policy/invoker.hpp>
#include <skc/policy/process_invoker.hpp>

#include "test_support.hpp"

namespace skc_policy_invoker_law_test {

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct Line {
    std::size_t done, total;
    std::string op;
};

/// "1/3 Add.json, 2/3 Mul.json": what a check prints when it fails.
std::string text_of(const std::vector<Line>& lines) {
    std::string s;
    for (const Line& l : lines)
        s += (s.empty() ? "" : ", ") + std::to_string(l.done) + "/" + std::to_string(l.total) + " " + l.op;
    return s;
}

/// The progress lines each mode's compiler prints, in order: "ordered" counts up; "unordered"
/// repeats a line and goes back, which must not reach on_progress (done strictly increases).
const std::map<std::string, std::vector<Line>> progress_script = {
    {"ordered", {{1, 3, "Add.json"}, {2, 3, "Mul.json"}, {3, 3, "Gelu.json"}}},
    {"unordered", {{1, 3, "Add.json"}, {1, 3, "Add.json"}, {3, 3, "Gelu.json"}, {2, 3, "Mul.json"}}},
};

/// The lambda compiler: FunctionInvoker's model of a kernel compiler. It reports its progress
/// through the request's callback, as a compiler prints its lines, and writes a new package.
const auto lambda_compiler = [](const skc::CompileRequest& r) -> skc::CompileResult {
    static std::atomic<int> serial{0};
    const std::string mode = r.extra_args.empty() ? "" : r.extra_args.back().substr(std::string("--law=").size());
    if (mode == "fail") throw skc::Error(skc::Errc::compile_failed, "the lambda compiler failed (law test)");
    if (const auto it = progress_script.find(mode); it != progress_script.end() && r.on_progress)
        for (const Line& l : it->second) r.on_progress(l.done, l.total, l.op);
    const fs::path package = r.output_dir / ("static_kernel_lambda_" + std::to_string(++serial) + ".run");
    skc_test::spit(package, "a package\n");
    return skc::CompileResult{package, {}, 1ns};
};
using LambdaInvoker = skc::FunctionInvoker<std::remove_const_t<decltype(lambda_compiler)>>;

/// The script compiler: docs/spec.md section 8's command line; ordinary output around the progress
/// lines of its mode; a package named after its pid.
std::string compiler_script() {
    std::string s =
        "#!/bin/sh\n"
        "mode=\n"
        "while [ $# -gt 0 ]; do\n"
        "  case \"$1\" in\n"
        "    -o) out=$2; shift ;;\n"
        "    --law=*) mode=${1#--law=} ;;\n"
        "  esac\n"
        "  shift\n"
        "done\n"
        "echo \"compiling into $out\"\n"
        "if [ \"$mode\" = fail ]; then echo 'error: no kernel for you' >&2; exit 1; fi\n";
    for (const auto& [mode, lines] : progress_script) {
        s += "if [ \"$mode\" = " + mode + " ]; then\n";
        for (const Line& l : lines) {
            s += "  echo 'skc-progress: " + std::to_string(l.done) + "/" + std::to_string(l.total) + " " + l.op + "'\n";
            s += "  echo 'an ordinary line'\n";
        }
        s += "fi\n";
    }
    s += "echo \"package $$\" > \"$out/static_kernel_script_$$.run\"\n";
    return s;
}

template <class I>
struct Fixture;

template <>
struct Fixture<skc::ProcessInvoker> {
    skc_test::TempDir dir;
    skc::ProcessInvoker make() {
        const fs::path script = dir / "op_compiler.sh";
        skc_test::spit(script, compiler_script());
        fs::permissions(script, fs::perms::owner_all);
        return skc::ProcessInvoker(script);
    }
};

template <>
struct Fixture<LambdaInvoker> {
    skc_test::TempDir dir;
    LambdaInvoker make() { return LambdaInvoker(lambda_compiler); }
};

/// A request to compile into `<dir>/out` (made, with an older package in it) in `mode`.
template <class I>
skc::CompileRequest request(const Fixture<I>& fx, const std::string& mode) {
    skc::CompileRequest r;
    r.json_dir = fx.dir / "json";
    fs::create_directories(r.json_dir);
    skc_test::spit(r.json_dir / "Add.json", "{}\n");
    r.device = "dev0";
    r.jobs = 2;
    r.output_dir = fx.dir / "out";
    fs::create_directories(r.output_dir);
    if (!fs::exists(r.output_dir / "older.run")) skc_test::spit(r.output_dir / "older.run", "from before\n");
    r.extra_args = {"--law=" + mode};
    r.timeout = 30s;
    return r;
}

}  // namespace

TEST_CASE_TEMPLATE("invoker law: compile returns a new *.run package in the output folder", I, skc::ProcessInvoker,
                   LambdaInvoker) {
    Fixture<I> fx;
    I inv = fx.make();
    const skc::CompileRequest r = request(fx, "ordered");
    const skc::CompileResult first = inv.compile(r);
    CHECK(first.package.parent_path() == r.output_dir);
    CHECK(first.package.extension() == ".run");
    CHECK(fs::is_regular_file(first.package));
    CHECK(first.package != r.output_dir / "older.run");
    CHECK(skc_test::slurp(r.output_dir / "older.run") == "from before\n");  // left as it was

    // A second compile into the same folder: its own package, the first one still there.
    const skc::CompileResult second = inv.compile(r);
    CHECK(second.package.parent_path() == r.output_dir);
    CHECK(second.package.extension() == ".run");
    CHECK(fs::is_regular_file(second.package));
    CHECK(second.package != first.package);
    CHECK(second.package != r.output_dir / "older.run");
    CHECK(fs::is_regular_file(first.package));
}

TEST_CASE_TEMPLATE("invoker law: progress lines reach on_progress in order, on the thread that runs compile", I,
                   skc::ProcessInvoker, LambdaInvoker) {
    Fixture<I> fx;
    I inv = fx.make();
    skc::CompileRequest r = request(fx, "ordered");
    std::vector<Line> got;
    bool other_thread = false;
    const std::thread::id me = std::this_thread::get_id();
    r.on_progress = [&](std::size_t done, std::size_t total, std::string_view op) {
        got.push_back(Line{done, total, std::string(op)});
        other_thread = other_thread || std::this_thread::get_id() != me;
    };
    const skc::CompileResult res = inv.compile(r);
    CHECK(fs::is_regular_file(res.package));
    CHECK(text_of(got) == text_of(progress_script.at("ordered")));
    CHECK_FALSE(other_thread);
}

TEST_CASE_TEMPLATE(
    "invoker law: a progress line whose done is not above the last one reported does not reach "
    "on_progress",
    I, skc::ProcessInvoker, LambdaInvoker) {
    Fixture<I> fx;
    I inv = fx.make();
    skc::CompileRequest r = request(fx, "unordered");
    std::vector<Line> got;
    r.on_progress = [&](std::size_t done, std::size_t total, std::string_view op) {
        got.push_back(Line{done, total, std::string(op)});
    };
    (void)inv.compile(r);
    CHECK(text_of(got) == "1/3 Add.json, 3/3 Gelu.json");
}

TEST_CASE_TEMPLATE("invoker law: what on_progress throws is caught and ignored", I, skc::ProcessInvoker,
                   LambdaInvoker) {
    Fixture<I> fx;
    I inv = fx.make();
    skc::CompileRequest r = request(fx, "ordered");
    std::size_t calls = 0;
    r.on_progress = [&](std::size_t, std::size_t, std::string_view) {
        ++calls;
        throw std::runtime_error("a progress bar that fails");
    };
    skc::CompileResult res;
    CHECK_NOTHROW(res = inv.compile(r));
    CHECK(fs::is_regular_file(res.package));
    CHECK(calls >= 1);
}

TEST_CASE_TEMPLATE("invoker law: a failing compile throws skc::Error", I, skc::ProcessInvoker, LambdaInvoker) {
    Fixture<I> fx;
    I inv = fx.make();
    const skc::CompileRequest r = request(fx, "fail");
    CHECK_THROWS_AS((void)inv.compile(r), skc::Error);
    // The folder holds no package but the older one.
    std::size_t runs = 0;
    for (const auto& e : fs::directory_iterator(r.output_dir)) runs += e.path().extension() == ".run";
    CHECK(runs == 1);
    // The invoker works again after a failure.
    const skc::CompileResult res = inv.compile(request(fx, "ordered"));
    CHECK(fs::is_regular_file(res.package));
}

}  // namespace skc_policy_invoker_law_test
