// ProcessInvoker against real child processes; FunctionInvoker; progress lines.
#include <doctest/doctest.h>

#include <csignal>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <skc/policy/process_invoker.hpp>

#include "test_support.hpp"

namespace skc_policy_invoker_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

/// A fake compiler: a shell script given as fixed arguments (`sh -c SCRIPT name ARGS...`), so the
/// standard options arrive as "$@". The script finds -o's value in $out.
skc::ProcessInvoker fake(const std::string& body, std::chrono::milliseconds grace = 2s) {
    const std::string script = "while [ $# -gt 0 ]; do case \"$1\" in -o) out=$2; shift;; esac; shift; done\n" + body;
    return skc::ProcessInvoker("/bin/sh", {"-c", script, "fake_op_compiler"}, grace);
}

skc::CompileRequest request(const skc_test::TempDir& dir, std::chrono::seconds timeout = 30s) {
    skc::CompileRequest r;
    r.json_dir = dir / "json";
    r.device = "Ascend 910B";
    r.jobs = 3;
    r.output_dir = dir / "out";
    r.log_level = skc::LogLevel::info;
    r.extra_args = {"--deterministic=true"};
    r.timeout = timeout;
    return r;
}

std::string error_of(skc::ProcessInvoker& inv, const skc::CompileRequest& r) {
    try {
        (void)inv.compile(r);
    } catch (const skc::Error& e) {
        return std::string(skc::to_string(e.code())) + ": " + e.what();
    }
    return "no error";
}

/// Running (a zombie waiting to be reaped by its new parent counts as gone: it runs nothing).
bool alive(pid_t pid) {
    if (::kill(pid, 0) != 0) return false;
    const std::string stat = skc_test::slurp("/proc/" + std::to_string(pid) + "/stat");
    const auto close = stat.rfind(')');
    return close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] != 'Z';
}

}  // namespace

TEST_CASE("the command line of docs/spec.md section 8, passed without a shell") {
    skc_test::TempDir dir;
    const skc::CompileRequest r = request(dir);
    const skc::ProcessInvoker inv("/opt/op_compiler", {"--fixed"});
    CHECK(inv.command(r) == std::vector<std::string>{"/opt/op_compiler", "--fixed", "-p", (dir / "json").string(), "-v",
                                                     "Ascend 910B", "-j", "3", "-o", (dir / "out").string(), "-l",
                                                     "info", "--deterministic=true"});
}

TEST_CASE("success: the new package is found, output goes to the log, arguments arrive intact") {
    skc_test::TempDir dir;
    skc::ProcessInvoker inv =
        skc::ProcessInvoker("/bin/sh", {"-c",
                                        "for a in \"$@\"; do echo \"arg[$a]\"; done; echo to-stderr >&2\n"
                                        "while [ $# -gt 0 ]; do case \"$1\" in -o) out=$2; shift;; esac; shift; done\n"
                                        "echo payload > \"$out/static_kernel_20261202.run\"",
                                        "fake"});
    fs::create_directories(dir / "out");
    skc_test::spit(dir / "out" / "old.run", "from before");  // not this compile's
    skc::CompileRequest r = request(dir);
    r.device = "a device; with $(shell) `chars`";
    const skc::CompileResult res = inv.compile(r);
    CHECK(res.package == dir / "out" / "static_kernel_20261202.run");
    CHECK(res.log == dir / "out" / "op_compiler.log");
    const std::string log = skc_test::slurp(res.log);
    CHECK(log.find("arg[a device; with $(shell) `chars`]") != std::string::npos);
    CHECK(log.find("arg[-j]\narg[3]") != std::string::npos);
    CHECK(log.find("to-stderr") != std::string::npos);
    CHECK(res.elapsed > 0ns);
}

TEST_CASE("a non-zero exit quotes the last lines of the log") {
    skc_test::TempDir dir;
    auto inv = fake("i=1; while [ $i -le 30 ]; do echo line $i; i=$((i+1)); done; exit 3");
    const std::string log = (dir / "out" / "op_compiler.log").string();
    std::string expected = "compile_failed: " + log + ": the compiler exited with status 3. Last lines of its log:";
    for (int i = 11; i <= 30; ++i) expected += (i == 11 ? "\n" : "\n") + std::string("line ") + std::to_string(i);
    CHECK_EQ(error_of(inv, request(dir)), expected);
}

TEST_CASE("death by a signal is named") {
    skc_test::TempDir dir;
    auto inv = fake("echo about to crash; kill -SEGV $$");
    CHECK_EQ(error_of(inv, request(dir)), "compiler_killed: " + (dir / "out" / "op_compiler.log").string() +
                                              ": the compiler was killed by signal 11 (Segmentation fault). Last "
                                              "lines of its log:\nabout to crash");
}

TEST_CASE("exit 0 without a package is an error") {
    skc_test::TempDir dir;
    auto inv = fake("true");
    CHECK_EQ(error_of(inv, request(dir)), "compile_failed: " + (dir / "out" / "op_compiler.log").string() +
                                              ": the compiler exited with status 0 but wrote no *.run package in " +
                                              (dir / "out").string() + " (its log is empty)");
}

TEST_CASE("a hang past the timeout: the whole process group is killed, in time") {
    skc_test::TempDir dir;
    // The compiler starts a grandchild that ignores SIGTERM, records its pid, and hangs.
    auto inv = fake(
        "sh -c 'trap \"\" TERM; echo $$ > \"$0\"; sleep 1000' \"$out/grandchild.pid\" &\n"
        "trap '' TERM; echo started; sleep 1000",
        300ms);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string err = error_of(inv, request(dir, 1s));
    const auto took = std::chrono::steady_clock::now() - t0;
    CHECK_EQ(err, "timeout: " + (dir / "out" / "op_compiler.log").string() +
                      ": the compiler did not finish within 1 s; its process group was killed. Last lines of its "
                      "log:\nstarted");
    CHECK(took < 1s + 300ms + 1s);
    const pid_t grandchild = std::stoi(skc_test::slurp(dir / "out" / "grandchild.pid"));
    for (int i = 0; i < 100 && alive(grandchild); ++i) std::this_thread::sleep_for(10ms);
    CHECK_FALSE(alive(grandchild));
}

TEST_CASE("huge output does not block the compiler") {
    skc_test::TempDir dir;
    auto inv = fake("head -c 30000000 /dev/zero | tr '\\0' 'x'; echo; echo done; echo p > \"$out/k.run\"");
    const skc::CompileResult res = inv.compile(request(dir));
    CHECK(fs::file_size(res.log) == 30000000 + 6);
    CHECK(res.package.filename() == "k.run");
}

TEST_CASE("a compiler that does not exist") {
    skc_test::TempDir dir;
    skc::ProcessInvoker inv(dir / "no_such_compiler");
    CHECK_EQ(error_of(inv, request(dir)), "invalid_argument: " + (dir / "no_such_compiler").string() +
                                              ": cannot start the compiler: No such file or directory");
}

TEST_CASE("FunctionInvoker wraps a callable") {
    skc_test::TempDir dir;
    int calls = 0;
    skc::FunctionInvoker inv([&](const skc::CompileRequest& r) {
        ++calls;
        return skc::CompileResult{r.output_dir / "x.run", r.output_dir / "log", 1ns};
    });
    static_assert(skc::OpCompilerInvoker<decltype(inv)>);
    CHECK(inv.compile(request(dir)).package == dir / "out" / "x.run");
    CHECK(calls == 1);
}

TEST_CASE("zero jobs is refused before anything runs") {
    skc_test::TempDir dir;
    auto inv = fake("echo ran > \"$out/ran\"");
    skc::CompileRequest r = request(dir);
    r.jobs = 0;
    CHECK_EQ(error_of(inv, r), "invalid_argument: jobs must be at least 1");
    CHECK_FALSE(fs::exists(dir / "out"));
}

namespace {

struct Report {
    std::size_t done, total;
    std::string op;
    bool operator==(const Report&) const = default;
};

doctest::String toString(const std::vector<Report>& v) {
    std::string s = "{";
    for (const Report& r : v) s += " " + std::to_string(r.done) + "/" + std::to_string(r.total) + " '" + r.op + "'";
    return (s + " }").c_str();
}

/// A request whose progress reports are appended to `out`.
skc::CompileRequest recording(const skc_test::TempDir& dir, std::vector<Report>& out,
                              std::chrono::seconds timeout = 30s) {
    skc::CompileRequest r = request(dir, timeout);
    r.on_progress = [&out](std::size_t done, std::size_t total, std::string_view op) {
        out.push_back({done, total, std::string(op)});
    };
    return r;
}

}  // namespace

TEST_CASE("progress lines reach the callback in order while the log keeps all the output") {
    skc_test::TempDir dir;
    auto inv = fake(
        "echo 'skc-progress: 0/3'; echo compiling a\n"
        "echo 'skc-progress: 1/3 a.json'\n"
        "echo 'skc-progress: 2/3 b c.json' >&2\n"
        "printf 'skc-progress: 3/3 c.json\\r\\n'\n"
        "echo linked; echo p > \"$out/k.run\"");
    std::vector<Report> seen;
    const skc::CompileResult res = inv.compile(recording(dir, seen));
    CHECK(seen == std::vector<Report>{{0, 3, ""}, {1, 3, "a.json"}, {2, 3, "b c.json"}, {3, 3, "c.json"}});
    CHECK(skc_test::slurp(res.log) ==
          "skc-progress: 0/3\ncompiling a\nskc-progress: 1/3 a.json\nskc-progress: 2/3 b c.json\n"
          "skc-progress: 3/3 c.json\r\nlinked\n");
}

TEST_CASE("progress lines are read while the compiler runs, not after it ends") {
    skc_test::TempDir dir;
    // The compiler waits until the first report has been seen (the callback creates a file).
    auto inv = fake(
        "echo 'skc-progress: 1/2 a.json'\n"
        "i=0; while [ ! -e \"$out/seen\" ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done\n"
        "[ -e \"$out/seen\" ] && echo p > \"$out/k.run\"");
    skc::CompileRequest r = request(dir);
    int calls = 0;
    r.on_progress = [&](std::size_t, std::size_t, std::string_view) {
        if (calls++ == 0) skc_test::spit(dir / "out" / "seen", "");
    };
    CHECK(inv.compile(r).package.filename() == "k.run");
    CHECK(calls == 1);
}

TEST_CASE("malformed, overlong, repeated and backward progress lines are ignored; the log has them all") {
    skc_test::TempDir dir;
    const std::vector<std::string> bad = {"skc-progress: x/y",
                                          "skc-progress: 5/3 too-many.json",
                                          "skc-progress: 1/0",
                                          "skc-progress: -1/3",
                                          "skc-progress: +1/3",
                                          "skc-progress: 1 /3",
                                          "skc-progress: 1/ 3",
                                          "skc-progress:1/3 no-space.json",
                                          " skc-progress: 1/3 indented.json",
                                          "skc-progress: 1/3x",
                                          "skc-progress: 1/3\tx",
                                          "SKC-PROGRESS: 1/3",
                                          "skc-progress: 1234567890123456789/99999999999999999999",
                                          "skc-progress: 0x1/3",
                                          "skc-progress: ",
                                          "skc-progress: 1"};
    std::string body;
    for (const std::string& b : bad) body += "echo '" + b + "'\n";
    body +=
        "printf 'skc-progress: 1/3 '; head -c 5000 /dev/zero | tr '\\0' x; echo\n"  // longer than 4096 bytes
        "echo 'skc-progress: 2/3 good.json'\n"
        "echo 'skc-progress: 1/3 back.json'\n"
        "echo 'skc-progress: 2/3 again.json'\n"
        "head -c 3000000 /dev/zero | tr '\\0' y; echo\n"
        "printf 'skc-progress: 3/3 last.json'\n"  // no line feed at the end: still a line
        "echo p > \"$out/k.run\"";
    auto inv = fake(body);
    std::vector<Report> seen;
    const skc::CompileResult res = inv.compile(recording(dir, seen));
    CHECK(seen == std::vector<Report>{{2, 3, "good.json"}, {3, 3, "last.json"}});
    const std::string log = skc_test::slurp(res.log);
    for (const std::string& b : bad) CHECK(log.find(b + "\n") != std::string::npos);
    CHECK(log.find("skc-progress: 1/3 " + std::string(5000, 'x') + "\n") != std::string::npos);
    CHECK(log.find("\n" + std::string(3000000, 'y') + "\n") != std::string::npos);
    CHECK(log.substr(log.size() - 28) == "\nskc-progress: 3/3 last.json");
}

TEST_CASE("parse_progress_line and lines cut anywhere") {
    CHECK(skc::parse_progress_line("skc-progress: 0/1").has_value());
    const auto p = skc::parse_progress_line("skc-progress: 17/17 MatMulV2_float_ND_32_64_1.json");
    REQUIRE(p.has_value());
    CHECK(p->done == 17);
    CHECK(p->total == 17);
    CHECK(p->op == "MatMulV2_float_ND_32_64_1.json");
    CHECK(skc::parse_progress_line("skc-progress: 999999999999999999/999999999999999999 x")->done ==
          999999999999999999u);
    CHECK_FALSE(skc::parse_progress_line("skc-progress: 1/1" + std::string(5000, ' ')).has_value());
    CHECK_FALSE(skc::parse_progress_line("skc-progress: 1/1 " + std::string(4096, 'a')).has_value());
    CHECK_FALSE(skc::parse_progress_line("skc-progress: 1/1\n").has_value());
    CHECK_FALSE(skc::parse_progress_line(std::string_view("skc-progress: 1\0/1", 18)).has_value());

    // The same output fed one byte at a time, and in one piece, gives the same reports.
    const std::string output =
        "skc-progress: 0/2\nnoise skc-progress: 1/2 no\nskc-progress: 1/2 a.json\r\n"
        "skc-progress: 2/2 b.json";
    for (const std::size_t step : {std::size_t{1}, std::size_t{3}, output.size()}) {
        CAPTURE(step);
        std::vector<Report> seen;
        const skc::ProgressCallback cb = [&](std::size_t d, std::size_t t, std::string_view op) {
            seen.push_back({d, t, std::string(op)});
        };
        skc::detail::ProgressScanner scanner(cb);
        for (std::size_t i = 0; i < output.size(); i += step) scanner.feed(std::string_view(output).substr(i, step));
        scanner.finish();
        CHECK(seen == std::vector<Report>{{0, 2, ""}, {1, 2, "a.json"}, {2, 2, "b.json"}});
    }
}

TEST_CASE("a progress callback that throws does not break the compile") {
    skc_test::TempDir dir;
    auto inv = fake("echo 'skc-progress: 1/2 a.json'; echo 'skc-progress: 2/2 b.json'; echo p > \"$out/k.run\"");
    skc::CompileRequest r = request(dir);
    int calls = 0;
    r.on_progress = [&](std::size_t, std::size_t, std::string_view) {
        ++calls;
        throw std::runtime_error("the display is gone");
    };
    const skc::CompileResult res = inv.compile(r);
    CHECK(res.package.filename() == "k.run");
    CHECK(calls == 2);
    CHECK(skc_test::slurp(res.log) == "skc-progress: 1/2 a.json\nskc-progress: 2/2 b.json\n");
}

TEST_CASE("a compiler that prints no progress lines: no reports, and it succeeds") {
    skc_test::TempDir dir;
    auto inv = fake("echo compiled everything; echo p > \"$out/k.run\"");
    std::vector<Report> seen;
    const skc::CompileResult res = inv.compile(recording(dir, seen));
    CHECK(seen.empty());
    CHECK(skc_test::slurp(res.log) == "compiled everything\n");
}

TEST_CASE("the output's end is not awaited: a compiler that closes its output early, a helper that keeps it open") {
    skc_test::TempDir dir;
    SUBCASE("closed early: the compiler is still waited for") {
        auto inv = fake("echo 'skc-progress: 1/1 a.json'; exec >&- 2>&-; sleep 0.3; echo p > \"$out/k.run\"");
        std::vector<Report> seen;
        const skc::CompileResult res = inv.compile(recording(dir, seen));
        CHECK(res.package.filename() == "k.run");
        CHECK(seen == std::vector<Report>{{1, 1, "a.json"}});
    }
    SUBCASE(
        "a child in a Unix session of its own (setsid) keeps the pipe open: compile() returns when the compiler ends") {
        auto inv = fake("setsid sleep 5 & echo 'skc-progress: 1/1 a.json'; echo p > \"$out/k.run\"");
        std::vector<Report> seen;
        const auto t0 = std::chrono::steady_clock::now();
        const skc::CompileResult res = inv.compile(recording(dir, seen));
        CHECK(std::chrono::steady_clock::now() - t0 < 3s);
        CHECK(seen == std::vector<Report>{{1, 1, "a.json"}});
        CHECK(skc_test::slurp(res.log) == "skc-progress: 1/1 a.json\n");
    }
}

TEST_CASE("on a timeout the progress seen so far was reported and the log quoted") {
    skc_test::TempDir dir;
    auto inv = fake("echo 'skc-progress: 0/2'; echo 'skc-progress: 1/2 a.json'; sleep 1000", 300ms);
    std::vector<Report> seen;
    const std::string err = error_of(inv, recording(dir, seen, 1s));
    CHECK(seen == std::vector<Report>{{0, 2, ""}, {1, 2, "a.json"}});
    CHECK(err.find("did not finish within 1 s; its process group was killed. Last lines of its log:\n"
                   "skc-progress: 0/2\nskc-progress: 1/2 a.json") != std::string::npos);
}

}  // namespace skc_policy_invoker_test
