// ProcessInvoker against real child processes; FunctionInvoker.
#include <doctest/doctest.h>

#include <csignal>
#include <thread>

#include <skc/policy/invoker.hpp>

#include "test_support.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

/// A fake compiler: a shell script given as fixed arguments (`sh -c SCRIPT name ARGS...`), so the
/// standard options arrive as "$@". The script finds -o's value in $out.
skc::ProcessInvoker fake(const std::string& body, std::chrono::milliseconds grace = 2s) {
    const std::string script =
        "while [ $# -gt 0 ]; do case \"$1\" in -o) out=$2; shift;; esac; shift; done\n" + body;
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

TEST_CASE("the command line of SPEC section 8, passed without a shell") {
    skc_test::TempDir dir;
    const skc::CompileRequest r = request(dir);
    const skc::ProcessInvoker inv("/opt/op_compiler", {"--fixed"});
    CHECK(inv.command(r) == std::vector<std::string>{"/opt/op_compiler", "--fixed", "-p", (dir / "json").string(), "-v",
                                                     "Ascend 910B", "-j", "3", "-o", (dir / "out").string(), "-l",
                                                     "info", "--deterministic=true"});
}

TEST_CASE("success: the new package is found, output goes to the log, arguments arrive intact") {
    skc_test::TempDir dir;
    skc::ProcessInvoker inv = skc::ProcessInvoker(
        "/bin/sh", {"-c",
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
    CHECK_EQ(error_of(inv, request(dir)), "compile_failed: " + (dir / "out" / "op_compiler.log").string() +
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
    auto inv = fake("sh -c 'trap \"\" TERM; echo $$ > \"$0\"; sleep 1000' \"$out/grandchild.pid\" &\n"
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
    CHECK_EQ(error_of(inv, request(dir)),
             "invalid_argument: " + (dir / "no_such_compiler").string() + ": cannot start the compiler: No such file or directory");
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
