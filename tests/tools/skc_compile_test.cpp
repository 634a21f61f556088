// skc compile, skc uninstall and skc ops inspect, run as a user runs them: the real host_op_compiler
// (examples/host) compiles real kernels; small shell scripts stand in for compilers that hang or
// fail. Exit statuses, messages, and what is left on disk are checked.
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <skc/layout.hpp>
#include <skc/op_info_io.hpp>
#include <skc/op_record_digest.hpp>
#include <skc/policy/cache.hpp>

#include "run_packages.hpp"
#include "run_tool.hpp"
#include "test_support.hpp"

namespace tools_skc_compile_test {

namespace {

namespace fs = std::filesystem;
using skc_test::Run;
using skc_test::TempDir;

const std::string tool = SKC_TOOL;
const std::string host_compiler = SKC_HOST_OP_COMPILER;

Run run_skc(const fs::path& cwd, const std::vector<std::string>& args) {
    return skc_test::run_program(tool, cwd, args);
}

/// A folder holding the given example op info files.
fs::path ops_dir(const TempDir& tmp, const std::vector<std::string>& names) {
    const fs::path dir = tmp / "ops";
    fs::create_directories(dir);
    for (const std::string& n : names) fs::copy_file(skc_test::example_ops_dir() / n, dir / n);
    return dir;
}

/// An executable shell script standing in for a compiler.
std::string script(const TempDir& tmp, const std::string& name, const std::string& body) {
    const fs::path p = tmp / name;
    skc_test::spit(p, "#!/bin/sh\n" + body + "\n");
    fs::permissions(p, fs::perms::owner_all);
    return p.string();
}

std::vector<std::string> compile_args(const TempDir& tmp, const fs::path& ops, const std::string& compiler) {
    return {"compile",    "--ops",  ops.string(), "--base",   (tmp / "base").string(),
            "--compiler", compiler, "--device",   "host-cpu", "--toolchain-version",
            "1.0",        "--jobs", "2"};
}

/// The line after a message about the command line: where the command's options are.
std::string hint(const std::string& command) { return "run '" + command + " --help' for the options\n"; }

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

std::size_t run_packages_in(const fs::path& run_dir) {
    std::size_t n = 0;
    for (const auto& e : fs::directory_iterator(run_dir)) n += e.path().extension() == ".run";
    return n;
}

const std::string small_op = "Gelu_float_ND_32_256_8.json";

/// What skc printed with its standard error on a pseudo-terminal, as when a person watches.
struct TtyRun {
    int status = -1;
    std::string out;  // standard output (a file)
    std::string tty;  // what the terminal got: standard error, with the terminal's \n -> \r\n
};

TtyRun run_skc_on_tty(const fs::path& cwd, const std::vector<std::string>& args) {
    int master = -1, slave = -1;
    winsize ws{};
    ws.ws_col = 200;
    ws.ws_row = 50;
    REQUIRE(::openpty(&master, &slave, nullptr, nullptr, &ws) == 0);
    TempDir io;
    const std::string out_file = (io / "stdout").string();
    posix_spawn_file_actions_t fa;
    REQUIRE(posix_spawn_file_actions_init(&fa) == 0);
    REQUIRE(posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0) == 0);
    REQUIRE(posix_spawn_file_actions_addopen(&fa, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644) == 0);
    REQUIRE(posix_spawn_file_actions_adddup2(&fa, slave, 2) == 0);
    REQUIRE(posix_spawn_file_actions_addclose(&fa, slave) == 0);
    REQUIRE(posix_spawn_file_actions_addclose(&fa, master) == 0);
    REQUIRE(posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str()) == 0);
    std::vector<char*> argv{const_cast<char*>(tool.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, tool.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(slave);
    REQUIRE(rc == 0);
    // Read as it comes (a full terminal would block skc) until every writer has closed it.
    TtyRun r;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    char buf[4096];
    while (std::chrono::steady_clock::now() < deadline) {
        pollfd pfd{master, POLLIN, 0};
        if (::poll(&pfd, 1, 100) <= 0) continue;
        const ssize_t n = ::read(master, buf, sizeof buf);
        if (n <= 0) break;  // EIO: the terminal's other side is closed
        r.tty.append(buf, static_cast<std::size_t>(n));
    }
    ::close(master);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {}
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = skc_test::slurp(out_file);
    return r;
}

}  // namespace

TEST_CASE("skc compile: compiles with the real host compiler, installs, hits the cache the second time, uninstalls") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const fs::path lib = tmp / "lib";
    const auto args = compile_args(tmp, skc_test::example_ops_dir(), host_compiler) +
                      std::vector<std::string>{"--op-library", lib.string(), "--json"};

    const Run first = run_skc(tmp.path(), args);
    INFO(first.err);
    REQUIRE(first.status == 0);
    const skc::Value a = skc::parse_json(first.out);
    CHECK(a.find("outcome")->as_string() == "compiled");
    const std::string key = a.find("key")->as_string();
    CHECK(a.find("installed")->as_string() == key);
    CHECK(a.find("counts")->find("selected")->as_int() == 12);
    CHECK(a.find("counts")->find("compiled")->as_int() == 12);
    CHECK(a.find("counts")->find("reused")->as_int() == 0);
    const fs::path run1 = a.find("run_dir")->as_string();
    CHECK(run_packages_in(run1) == 1);  // the compiler's own static_kernel_<datetime>.run
    CHECK(fs::exists(run1 / "op_compiler.log"));
    const fs::path index = lib / "static_kernel/host/config/host-cpu/binary_info_config.json";
    const skc::Value installed = skc::parse_json(skc_test::slurp(index));
    // host_op_compiler builds a kernel for each of the 12 selected ops.
    CHECK(installed.find("kernels")->as_object().size() == 12);

    const Run second = run_skc(tmp.path(), args);
    REQUIRE(second.status == 0);
    const skc::Value b = skc::parse_json(second.out);
    CHECK(b.find("outcome")->as_string() == "hit");
    CHECK(b.find("key")->as_string() == key);
    const fs::path run2 = b.find("run_dir")->as_string();
    CHECK(run_packages_in(run2) == 0);  // the compiler did not run
    CHECK_FALSE(fs::exists(run2 / "op_compiler.log"));
    CHECK(b.find("stage_ms")->find("compile")->as_double() == 0.0);
    CHECK(b.find("counts")->find("compiled")->as_int() == 0);
    CHECK(b.find("counts")->find("reused")->as_int() == 12);

    const Run text = run_skc(tmp.path(), compile_args(tmp, skc_test::example_ops_dir(), host_compiler));
    CHECK(text.status == 0);
    CHECK(text.out.rfind("skc compile: hit\n  key        " + key + "\n", 0) == 0);
    CHECK(text.out.find("  installed  no (give --op-library to install)\n") != std::string::npos);
    CHECK(text.out.find("\n  kernels    compiled 0 of 12 ops (12 from 1 cached package)\n") != std::string::npos);

    const Run un = run_skc(tmp.path(), {"uninstall", "--op-library", lib.string()});
    CHECK(un.status == 0);
    CHECK(un.out == "uninstalled " + key + "\n");
    CHECK_FALSE(fs::exists(index));
    CHECK_FALSE(fs::exists(lib / "static_kernel/host" / key));

    const Run none = run_skc(tmp.path(), {"uninstall", "--op-library", lib.string()});
    CHECK(none.status == 0);
    CHECK(none.out == "nothing installed in " + (lib / "static_kernel/host").string() + "\n");
    const Run no_lib = run_skc(tmp.path(), {"uninstall", "--op-library", (tmp / "nolib").string()});
    CHECK(no_lib.status == 2);
    CHECK(no_lib.err == "skc uninstall: --op-library " + (tmp / "nolib").string() + ": no such folder\n");
    const Run unknown = run_skc(tmp.path(), {"uninstall", "--op-library", lib.string(), "static_kernel_1"});
    CHECK(unknown.status == 2);
    CHECK(unknown.err == "skc uninstall: no package 'static_kernel_1' in " + (lib / "static_kernel/host").string() +
                             "; none is installed\n");
}

TEST_CASE("skc compile --no-cache compiles every time and writes no cache") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const auto args =
        compile_args(tmp, ops_dir(tmp, {small_op}), host_compiler) + std::vector<std::string>{"--no-cache"};
    for (int i = 0; i < 2; ++i) {
        const Run r = run_skc(tmp.path(), args);
        INFO(r.err);
        CHECK(r.status == 0);
        CHECK(r.out.rfind("skc compile: cache disabled, compiled\n", 0) == 0);
    }
    CHECK_FALSE(fs::exists(tmp / "base/static_kernel_compile_outputs/static_kernel_cache"));
}

TEST_CASE("skc compile: a compiler past --timeout is killed and the exit status is 3") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const std::string hang = script(tmp, "hang.sh", "echo started\nsleep 60");
    const auto t0 = std::chrono::steady_clock::now();
    const Run r = run_skc(
        tmp.path(), compile_args(tmp, ops_dir(tmp, {small_op}), hang) + std::vector<std::string>{"--timeout", "1"});
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
    CHECK(r.status == 3);
    // The message names the compiler's log and quotes its last lines.
    CHECK(r.err.rfind("skc compile: " + (tmp / "base/static_kernel_compile_outputs").string(), 0) == 0);
    CHECK(r.err.find("/op_compiler.log: the compiler did not finish within 1 s; its process group was killed. Last "
                     "lines of its log:\nstarted\n") != std::string::npos);
}

TEST_CASE("skc compile: a failing compiler is exit status 1 with the tail of its log, and nothing is cached") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const std::string fail = script(tmp, "fail.sh", "echo 'error: kernel MatMul does not fit' >&2\nexit 4");
    const Run r = run_skc(tmp.path(), compile_args(tmp, ops_dir(tmp, {small_op}), fail));
    CHECK(r.status == 1);
    CHECK(r.err.find("/op_compiler.log: the compiler exited with status 4. Last lines of its log:\n"
                     "error: kernel MatMul does not fit\n") != std::string::npos);
    const Run ls = run_skc(tmp.path(), {"cache", "ls", "--base", (tmp / "base").string(), "--json"});
    CHECK(ls.status == 0);
    CHECK(skc::parse_json(ls.out).find("namespaces")->as_array().at(0).find("entries")->as_array().empty());
}

TEST_CASE(
    "skc compile: an op the compiler fails on is left out, the rest installed, and remembered; skc cache failures "
    "and forget-failures") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const std::string bad_op = "Add_float_ND_32_64_9.json";
    const fs::path ops = ops_dir(tmp, {small_op, bad_op});
    const std::string symbol = "skc_k_" + skc::digest(skc::read_op_info(ops / bad_op)).hex();
    // A C++ compiler that cannot compile the Add kernel.
    const std::string picky =
        script(tmp, "picky-cxx",
               "case \"$*\" in *" + symbol +
                   "*) echo 'picky-cxx: no kernel for this shape' >&2; exit 1 ;; esac\nexec c++ \"$@\"");
    // host_op_compiler without its failed_ops.json: skc must find the op by bisection.
    const std::string silent = script(tmp, "silent-compiler",
                                      "for a; do [ \"$prev\" = -o ] && out=$a; prev=$a; done\n'" + host_compiler +
                                          "' \"$@\"\nrc=$?\nrm -f \"$out/failed_ops.json\"\nexit $rc");
    const fs::path lib = tmp / "lib";
    const fs::path index = lib / "static_kernel/host/config/host-cpu/binary_info_config.json";
    const std::vector<std::string> env{"CXX=" + picky};
    const std::string base = (tmp / "base").string();

    for (const bool named : {true, false}) {
        CAPTURE(named);
        fs::remove_all(tmp / "base");
        fs::create_directories(tmp / "base");
        const auto args = compile_args(tmp, ops, named ? host_compiler : silent) +
                          std::vector<std::string>{"--op-library", lib.string(), "--json"};
        const Run first = skc_test::run_program(tool, tmp.path(), args, env);
        INFO(first.err);
        REQUIRE(first.status == 0);
        const skc::Value a = skc::parse_json(first.out);
        CHECK(a.find("outcome")->as_string() == "compiled");
        CHECK(a.find("counts")->find("selected")->as_int() == 2);
        CHECK(a.find("counts")->find("failed")->as_int() == 1);
        CHECK(a.find("counts")->find("isolation_compiles")->as_int() == (named ? 0 : 2));  // 2 log2(2)
        CHECK(first.err.find("the kernel compiler failed on 1 of 2 ops") != std::string::npos);
        CHECK(first.err.find(": Add (Add_float_ND_32_64_") != std::string::npos);  // its name in the run folder
        // The other op's kernel is installed.
        CHECK(skc::parse_json(skc_test::slurp(index)).find("kernels")->as_object().size() == 1);

        // The next process leaves the op out without compiling: a hit.
        const Run second = skc_test::run_program(tool, tmp.path(), args, env);
        REQUIRE(second.status == 0);
        const skc::Value b = skc::parse_json(second.out);
        CHECK(b.find("outcome")->as_string() == "hit");
        CHECK(b.find("counts")->find("known_failed")->as_int() == 1);
        CHECK(b.find("counts")->find("failed")->as_int() == 0);
        CHECK(second.err.find("1 op(s) left out, which the kernel compiler failed on before") != std::string::npos);
        const Run text =
            skc_test::run_program(tool, tmp.path(), compile_args(tmp, ops, named ? host_compiler : silent), env);
        CHECK(text.out.find("\n  left out   1 op the compiler failed on before (skc cache forget-failures tries them "
                            "again)\n") != std::string::npos);

        const Run listed = run_skc(tmp.path(), {"cache", "failures", "--base", base});
        CHECK(listed.status == 0);
        CHECK(listed.out.rfind("CANN-1.0_host-cpu: 1 op the compiler failed on (compiler ", 0) == 0);
        CHECK(listed.out.find("\n  " + symbol.substr(6) + "  Add  Add_float_ND_32_64_") != std::string::npos);
        const Run json = run_skc(tmp.path(), {"cache", "failures", "--base", base, "--json"});
        REQUIRE_FALSE(json.out.empty());
        const skc::Value failed = skc::parse_json(json.out);
        REQUIRE(failed.is_object());
        const skc::Array& listed_ops = failed.find("namespaces")->as_array().at(0).find("ops")->as_array();
        REQUIRE(listed_ops.size() == 1);
        CHECK(listed_ops[0].find("message")->as_string().find("picky-cxx: no kernel for this shape") !=
              std::string::npos);

        const Run forgot = run_skc(tmp.path(), {"cache", "forget-failures", "--base", base});
        CHECK(forgot.status == 0);
        CHECK(forgot.out == "CANN-1.0_host-cpu: forgot 1 failed op\n");
        CHECK(run_skc(tmp.path(), {"cache", "failures", "--base", base}).out ==
              "CANN-1.0_host-cpu: no known failures\n");
        // Tried again, with a C++ compiler that can: both ops compile.
        const Run again = run_skc(tmp.path(), args);
        REQUIRE(again.status == 0);
        const skc::Value c = skc::parse_json(again.out);
        CHECK(c.find("outcome")->as_string() == "compiled");
        CHECK(c.find("counts")->find("failed")->as_int() == 0);
        CHECK(c.find("counts")->find("known_failed")->as_int() == 0);
        CHECK(skc::parse_json(skc_test::slurp(index)).find("kernels")->as_object().size() == 2);
        fs::remove_all(lib);
    }
}

TEST_CASE(
    "skc compile with LOCAL_WORLD_SIZE/LOCAL_RANK: the ranks of a node compile once; a missing rank is 3, the "
    "leader's failure 1") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const fs::path ops = ops_dir(tmp, {small_op, "Add_float_ND_32_64_9.json"});
    // Starts `ranks` of a node of `size` with `compiler` and `--timeout timeout` (seconds: the bound
    // of the compile and of the wait for a rank); returns each rank's run.
    auto node = [&](std::size_t size, std::size_t ranks, const std::string& run_id, const std::string& compiler,
                    const std::vector<std::string>& extra = {}, const std::string& timeout = "2") {
        std::vector<TempDir> io(ranks);
        std::vector<skc_test::Started> started;
        for (std::size_t k = 0; k < ranks; ++k)
            started.push_back(skc_test::start_program(
                tool, tmp.path(),
                compile_args(tmp, ops, compiler) + std::vector<std::string>{"--timeout", timeout, "--json"} + extra,
                {"LOCAL_WORLD_SIZE=" + std::to_string(size), "LOCAL_RANK=" + std::to_string(k), "SKC_RUN_ID=" + run_id,
                 "TORCHELASTIC_RUN_ID="},
                io[k].path()));
        std::vector<Run> runs;
        for (const auto& st : started) runs.push_back(skc_test::finish(st));
        return runs;
    };

    SUBCASE("three ranks: one compile, the same key and package everywhere, one extraction") {
        const std::string counter = (tmp / "compiles").string();
        const std::string counting =
            script(tmp, "counting.sh", "echo run >> " + counter + "\nexec " + host_compiler + " \"$@\"");
        // A compile bound a loaded machine cannot miss: this case is about one compile for the node.
        const std::vector<Run> runs =
            node(3, 3, "job-ok", counting, {"--op-library", (tmp / "lib").string()}, /*timeout=*/"120");
        std::size_t extracted = 0;
        std::string key;
        for (std::size_t k = 0; k < runs.size(); ++k) {
            INFO(runs[k].err);
            REQUIRE(runs[k].status == 0);
            const skc::Value v = skc::parse_json(runs[k].out);
            CHECK(v.find("local_rank")->as_double() == static_cast<double>(k));
            CHECK(v.find("local_world_size")->as_double() == 3.0);
            CHECK(v.find("counts")->find("gathered")->as_double() == 2.0);
            if (k == 0) key = v.find("key")->as_string();
            CHECK(v.find("key")->as_string() == key);
            extracted += v.find("extracted")->as_bool() ? 1 : 0;
        }
        CHECK(extracted == 1);  // the leader's install; the followers hold it
        CHECK(skc_test::slurp(counter) == "run\n");
    }
    SUBCASE("a rank that never comes: every started rank exits 3 within the timeout, naming it") {
        const auto t0 = std::chrono::steady_clock::now();
        const std::vector<Run> runs = node(3, 2, "job-missing", host_compiler);
        CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(4));
        for (const Run& r : runs) {
            CHECK(r.status == 3);
            CHECK(r.out.empty());
            CHECK(r.err.find(": local rank 2 of 3 did not arrive within 2 s (run id \"job-missing\")\n") !=
                  std::string::npos);
        }
    }
    SUBCASE("bad rank variables are exit status 2, and nothing is written") {
        const Run r = skc_test::run_program(tool, tmp.path(), compile_args(tmp, ops, host_compiler),
                                            {"LOCAL_WORLD_SIZE=2", "LOCAL_RANK=2", "SKC_RUN_ID=job-bad"});
        CHECK(r.status == 2);
        CHECK(r.err ==
              "skc compile: option 'LOCAL_RANK': LOCAL_RANK=2 is out of range for LOCAL_WORLD_SIZE=2 (0 to 1)\n");
        CHECK(fs::is_empty(tmp / "base"));
        const Run no_id =
            skc_test::run_program(tool, tmp.path(), compile_args(tmp, ops, host_compiler),
                                  {"LOCAL_WORLD_SIZE=2", "LOCAL_RANK=1", "SKC_RUN_ID=", "TORCHELASTIC_RUN_ID="});
        CHECK(no_id.status == 2);
        CHECK(no_id.err.find("no run id: set SKC_RUN_ID (or TORCHELASTIC_RUN_ID, as torchrun does)") !=
              std::string::npos);
        CHECK(fs::is_empty(tmp / "base"));
    }
    SUBCASE("the leader's compile fails: the leader and every follower exit 1") {
        const std::string fail = script(tmp, "fail.sh", "echo 'error: no kernel' >&2\nexit 4");
        const std::vector<Run> runs = node(2, 2, "job-fail", fail);
        CHECK(runs[0].status == 1);
        CHECK(runs[0].err.find("the compiler exited with status 4") != std::string::npos);
        CHECK(runs[1].status == 1);
        CHECK(runs[1].err.rfind("skc compile: local rank 0 (the leader) failed (compile_failed): ", 0) == 0);
    }
}

TEST_CASE("skc compile: bad usage and bad input are exit status 2, and nothing is written") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const fs::path ops = ops_dir(tmp, {small_op});
    auto check = [&](const std::vector<std::string>& args, const std::string& err) {
        const Run r = run_skc(tmp.path(), args);
        CHECK(r.status == 2);
        CHECK(r.err == err);
        CHECK(r.out.empty());
        CHECK(skc_test::snapshot(tmp / "base").empty());
    };
    // The first required option missing, in the order of skc compile --help.
    check({"compile", "--ops", ops.string()}, "skc compile: --compiler is required\n" + hint("skc compile"));
    check({"compile", "--ops", ops.string(), "--compiler", host_compiler, "--device", "d", "--toolchain-version", "1"},
          "skc compile: --base is required\n" + hint("skc compile"));
    check(compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--jobs"},
          "skc compile: --jobs: 1 required N missing\n" + hint("skc compile"));
    check(compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--no-cache=1"},
          "skc compile: no-cache was given a disallowed flag override\n" + hint("skc compile"));
    check({"compile", "--ops", ops.string(), "--base", (tmp / "base").string(), "--compiler", host_compiler, "--device",
           "d", "--toolchain-version", "1", "--jobs", "0"},
          "skc compile: --jobs: bad value '0': expected a whole number from 1 to 1024\n" + hint("skc compile"));
    check(compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--timeout", "soon"},
          "skc compile: --timeout: bad value 'soon': expected a whole number from 1 to 604800\n" + hint("skc compile"));
    check(compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--backend", "../x"},
          "skc compile: --backend: bad value '../x': use letters, digits, '_', '-' and '.', not starting with '.'\n" +
              hint("skc compile"));
    check(compile_args(tmp, tmp / "nowhere", host_compiler),
          "skc compile: --ops " + (tmp / "nowhere").string() + ": no such folder\n");
    check(compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--log-level", "loud"},
          "skc compile: --log-level: bad value 'loud': expected debug, info, warning or error\n" + hint("skc compile"));
    check(compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--frobnicate"},
          "skc compile: unknown option '--frobnicate'\n" + hint("skc compile"));
    check(compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--namespace", "x"},
          "skc compile: unknown option '--namespace'\n" + hint("skc compile"));
    check(compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"extra"},
          "skc compile: unexpected argument 'extra'\n" + hint("skc compile"));
    check(compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--device", "x"},
          "skc compile: --device: At Most 1 required but received 2\n" + hint("skc compile"));

    // A bad op info file: its name and the JSON path of the fault.
    const fs::path bad = tmp / "bad";
    fs::create_directories(bad);
    skc_test::spit(bad / "Add_float_ND_1_0.json", R"({"op_type": 7})");
    const Run r = run_skc(tmp.path(), compile_args(tmp, bad, host_compiler));
    CHECK(r.status == 2);
    CHECK(r.err.rfind("skc compile: ", 0) == 0);
    CHECK(r.err.find("Add_float_ND_1_0.json") != std::string::npos);
    CHECK(r.err.find("op_type") != std::string::npos);
    CHECK(skc_test::snapshot(tmp / "base").empty());

    fs::create_directories(tmp / "empty");
    check(compile_args(tmp, tmp / "empty", host_compiler),
          "skc compile: " + (tmp / "empty").string() + ": no op info files (*.json) in the folder\n");

    check(compile_args(tmp, ops, (tmp / "no-such-compiler").string()),
          "skc compile: --compiler " + (tmp / "no-such-compiler").string() + ": no such file\n");
    const Run no_base = run_skc(tmp.path(), {"compile", "--ops", ops.string(), "--base", (tmp / "nowhere").string(),
                                             "--compiler", host_compiler, "--device", "d", "--toolchain-version", "1"});
    CHECK(no_base.status == 2);
    CHECK(no_base.err == "skc compile: --base " + (tmp / "nowhere").string() + ": no such folder\n");
}

TEST_CASE("skc compile: nothing selected is success without compiling") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const std::string fail = script(tmp, "fail.sh", "exit 1");
    const Run r = run_skc(tmp.path(), compile_args(tmp, ops_dir(tmp, {small_op, "Add_float_ND_32_64_9.json"}), fail) +
                                          std::vector<std::string>{"--blacklist", "Gelu", "--blacklist", "Add"});
    CHECK(r.status == 0);
    CHECK(r.out.rfind("skc compile: skipped\n  nothing to compile: 2 distinct ops, 2 supported, 2 blacklisted\n", 0) ==
          0);
}

TEST_CASE("skc ops inspect: the summary, the JSON, and unreadable files") {
    TempDir tmp;
    const Run text = run_skc(tmp.path(), {"ops", "inspect", skc_test::example_ops_dir().string()});
    CHECK(text.status == 0);
    CHECK(text.out.rfind("15 op info files in " + skc_test::example_ops_dir().string() +
                             ": 14 distinct ops, 12 selected for compilation\n",
                         0) == 0);
    CHECK(text.out.find("  GatherV2_float_ND_1000_64_13.json        unsupported: GatherV2 does not support static "
                        "compilation\n") != std::string::npos);

    const Run json =
        run_skc(tmp.path(), {"ops", "inspect", skc_test::example_ops_dir().string(), "--json", "--blacklist", "Gelu"});
    CHECK(json.status == 0);
    const skc::Value v = skc::parse_json(json.out);
    CHECK(v.find("files")->as_int() == 15);
    CHECK(v.find("selected")->as_int() == 11);

    const fs::path dir = ops_dir(tmp, {small_op});
    skc_test::spit(dir / "Broken_1.json", "{");
    const Run bad = run_skc(tmp.path(), {"ops", "inspect", dir.string()});
    CHECK(bad.status == 2);
    CHECK(bad.out.find("Unreadable files (1):") != std::string::npos);
    CHECK(bad.out.find("Broken_1.json") != std::string::npos);

    const Run no_cmd = run_skc(tmp.path(), {"ops"});
    CHECK(no_cmd.status == 2);
    CHECK(no_cmd.err == "skc ops: no command given; commands: inspect\nrun 'skc ops --help' for the commands\n");
    const Run no_dir = run_skc(tmp.path(), {"ops", "inspect"});
    CHECK(no_dir.status == 2);
    CHECK(no_dir.err == "skc ops inspect: DIR is required\n" + hint("skc ops inspect"));
}

TEST_CASE(
    "skc compile: a base copied with cp -r (and its packages chmod'ed) hits, and skc cache verify finds it clean") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const fs::path ops = ops_dir(tmp, {small_op, "Add_float_ND_32_64_9.json"});
    const Run first = run_skc(tmp.path(), compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--json"});
    REQUIRE_MESSAGE(first.status == 0, first.err);
    const std::string key = skc::parse_json(first.out).find("key")->as_string();

    const Run cp = skc_test::run_program("/bin/cp", tmp.path(), {"-r", "base", "copy"});
    REQUIRE(cp.status == 0);
    for (const auto& e : fs::recursive_directory_iterator(tmp / "copy"))
        if (e.is_regular_file() && e.path().extension() == ".run")
            fs::permissions(e.path(), fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
    const Run verify = run_skc(tmp.path(), {"cache", "verify", "--base", "copy"});
    CHECK(verify.status == 0);
    CHECK(verify.out == "CANN-1.0_host-cpu: checked 1 entry, all good\n");
    CHECK(verify.err.empty());

    std::vector<std::string> args = compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--json"};
    args[4] = (tmp / "copy").string();  // --base copy
    const Run second = run_skc(tmp.path(), args);
    REQUIRE_MESSAGE(second.status == 0, second.err);
    const skc::Value b = skc::parse_json(second.out);
    CHECK(b.find("outcome")->as_string() == "hit");
    CHECK(b.find("key")->as_string() == key);
    CHECK(run_packages_in(b.find("run_dir")->as_string()) == 0);  // nothing compiled
}

TEST_CASE("skc compile: the compiler is in the key: a changed compiler misses, an identical copy elsewhere hits") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const fs::path ops = ops_dir(tmp, {small_op});
    for (const char* d : {"a", "b", "c"}) {
        fs::create_directories(tmp / d);
        fs::copy_file(host_compiler, tmp / d / "host_op_compiler");
    }
    {  // c: the same program with other bytes (a rebuilt compiler under the same toolchain version)
        std::ofstream out(tmp / "c" / "host_op_compiler", std::ios::app | std::ios::binary);
        out << "rebuilt";
    }
    auto outcome = [&](const std::string& dir, const std::vector<std::string>& more = {}) {
        const Run r = run_skc(tmp.path(), compile_args(tmp, ops, (tmp / dir / "host_op_compiler").string()) +
                                              std::vector<std::string>{"--json"} + more);
        REQUIRE_MESSAGE(r.status == 0, r.err);
        return skc::parse_json(r.out).find("outcome")->as_string();
    };
    CHECK(outcome("a") == "compiled");
    CHECK(outcome("b") == "hit");       // the same bytes at another path
    CHECK(outcome("c") == "compiled");  // other bytes: another key
    CHECK(outcome("c") == "hit");
    // The other modes: none ignores the compiler, string:TEXT is the user's word, command: its output.
    CHECK(outcome("a", {"--compiler-check", "none"}) == "compiled");
    CHECK(outcome("c", {"--compiler-check", "none"}) == "hit");
    CHECK(outcome("a", {"--compiler-check", "string:v1"}) == "compiled");
    CHECK(outcome("c", {"--compiler-check", "string:v1"}) == "hit");
    CHECK(outcome("c", {"--compiler-check", "string:v2"}) == "compiled");
    CHECK(outcome("a", {"--compiler-check", "command:echo 1"}) == "compiled");
    CHECK(outcome("b", {"--compiler-check", "command:echo 1"}) == "hit");
    // The key's components say which compiler fingerprint each entry was built with.
    const Run ls = run_skc(tmp.path(), {"cache", "ls", "--base", (tmp / "base").string(), "--json"});
    REQUIRE(ls.status == 0);
    CHECK(ls.out.find("\"compiler\": \"content:") != std::string::npos);
    CHECK(ls.out.find("\"compiler\": \"string:v2\"") != std::string::npos);
    CHECK(ls.out.find("\"compiler\": \"none\"") != std::string::npos);

    const Run bad = run_skc(
        tmp.path(), compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--compiler-check", "size"});
    CHECK(bad.status == 2);
    CHECK(bad.err ==
          "skc compile: option '--compiler-check': value \"size\" is not accepted: use content, mtime, none, "
          "string:TEXT or command:CMD\n" +
              hint("skc compile"));
}

TEST_CASE("skc compile on a superset of a folder compiled before compiles only the new ops; again, nothing") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const fs::path ops = ops_dir(tmp, {small_op, "Add_float_ND_32_64_9.json", "MatMulV2_float_ND_32_64_0.json"});
    const auto args = compile_args(tmp, ops, host_compiler) +
                      std::vector<std::string>{"--op-library", (tmp / "lib").string(), "--json"};
    const Run first = run_skc(tmp.path(), args);
    REQUIRE_MESSAGE(first.status == 0, first.err);
    const std::string first_key = skc::parse_json(first.out).find("key")->as_string();

    for (const char* more : {"LayerNorm_float_ND_32_64_7.json", "Mul_float_ND_2_16_16_10.json"})
        fs::copy_file(skc_test::example_ops_dir() / more, ops / more);
    const Run second = run_skc(tmp.path(), args);
    REQUIRE_MESSAGE(second.status == 0, second.err);
    const skc::Value b = skc::parse_json(second.out);
    CHECK(b.find("outcome")->as_string() == "compiled");
    CHECK(b.find("counts")->find("compiled")->as_int() == 2);
    CHECK(b.find("counts")->find("reused")->as_int() == 3);
    const skc::Array& installed = b.find("packages")->as_array();
    REQUIRE(installed.size() == 2);
    CHECK(installed[0].as_string() == first_key);
    // The compiler was given the two new ops only (under the names selection gives them).
    std::multiset<std::string> given;
    for (const auto& e : fs::directory_iterator(fs::path(b.find("run_dir")->as_string()) / "delta"))
        given.insert(skc::read_op_info(e.path()).op_type);
    CHECK(given == std::multiset<std::string>{"LayerNorm", "Mul"});
    const skc::Value index =
        skc::parse_json(skc_test::slurp(tmp / "lib/static_kernel/host/config/host-cpu/binary_info_config.json"));
    CHECK(index.find("kernels")->as_object().size() == 5);

    const Run third = run_skc(tmp.path(), compile_args(tmp, ops, host_compiler));
    REQUIRE_MESSAGE(third.status == 0, third.err);
    CHECK(third.out.rfind("skc compile: hit\n", 0) == 0);
    CHECK(third.out.find("\n  kernels    compiled 0 of 5 ops (5 from 2 cached packages)\n") != std::string::npos);

    // The second wrote a composite entry for the 5: the third found it in one lookup.
    const std::string base = (tmp / "base").string(), set_key = b.find("key")->as_string();
    const Run ls = run_skc(tmp.path(), {"cache", "ls", "--base", base, "--json"});
    REQUIRE_MESSAGE(ls.status == 0, ls.err);
    const skc::Value listed = skc::parse_json(ls.out);
    const skc::Value& ns = listed.find("namespaces")->as_array().at(0);
    CHECK(ns.find("entries")->as_array().size() == 2);
    const skc::Array& composites = ns.find("composites")->as_array();
    REQUIRE(composites.size() == 1);
    CHECK(composites[0].find("key")->as_string() == set_key);
    CHECK(composites[0].find("ops")->as_int() == 5);
    REQUIRE(composites[0].find("parts")->as_array().size() == 2);
    CHECK(composites[0].find("parts")->as_array()[0].find("key")->as_string() == installed[0].as_string());
    CHECK(composites[0].find("parts")->as_array()[1].find("key")->as_string() == installed[1].as_string());
    const Run ls_text = run_skc(tmp.path(), {"cache", "ls", "--base", base});
    CHECK(ls_text.out.find("1 composite entry, each held by other entries:\n") != std::string::npos);
    CHECK(ls_text.out.find(installed[0].as_string().substr(0, 8) + " " + installed[1].as_string().substr(0, 8) +
                           "\n") != std::string::npos);

    const Run stats = run_skc(tmp.path(), {"cache", "stats", "--base", base, "--json"});
    const skc::Value st = *skc::parse_json(stats.out).find("total");
    CHECK(st.find("composite_hits")->as_int() == 1);
    CHECK(st.find("ops_compiled")->as_int() == 3 + 2);  // the first 3, then the 2 new
    CHECK(st.find("ops_reused")->as_int() == 3 + 5);
    const Run stats_text = run_skc(tmp.path(), {"cache", "stats", "--base", base});
    CHECK(stats_text.out.find("  composite hits:      1\n") != std::string::npos);
    CHECK(stats_text.out.find("  ops reused:          8 (61.54 %)\n") != std::string::npos);

    const Run explain = run_skc(tmp.path(), {"cache", "explain", "--base", base, "--ops", ops.string(), "--compiler",
                                             host_compiler, "--device", "host-cpu", "--toolchain-version", "1.0"});
    REQUIRE_MESSAGE(explain.status == 0, explain.err);
    CHECK(explain.out.find("hit: the key is a composite entry in CANN-1.0_host-cpu, held by 2 packages of other "
                           "entries:\n  " +
                           installed[0].as_string() + "  ") != std::string::npos);

    // Exported and imported, the composite comes with its parts: the other base hits all 5 at once.
    const std::string file = (tmp / "set.skcx").string();
    fs::create_directories(tmp / "other");
    const Run ex = run_skc(tmp.path(), {"cache", "export", "--base", base, "--key", set_key, "-o", file});
    REQUIRE_MESSAGE(ex.status == 0, ex.err);
    CHECK(ex.out.find("exported 2 entries (") != std::string::npos);
    CHECK(ex.out.find(" of packages) and 1 composite entry to ") != std::string::npos);
    const Run im = run_skc(tmp.path(), {"cache", "import", "--base", (tmp / "other").string(), file, "--json"});
    REQUIRE_MESSAGE(im.status == 0, im.err);
    CHECK(skc::parse_json(im.out).find("added")->as_int() == 2);
    CHECK(skc::parse_json(im.out).find("composites_added")->as_int() == 1);
    std::vector<std::string> other = args;
    other[4] = (tmp / "other").string();
    const Run there = run_skc(tmp.path(), other);
    REQUIRE_MESSAGE(there.status == 0, there.err);
    CHECK(skc::parse_json(there.out).find("outcome")->as_string() == "hit");
    CHECK(skc::parse_json(there.out).find("counts")->find("compiled")->as_int() == 0);
    const Run other_stats = run_skc(tmp.path(), {"cache", "stats", "--base", (tmp / "other").string(), "--json"});
    CHECK(skc::parse_json(other_stats.out).find("total")->find("composite_hits")->as_int() == 1);

    // Pruned to one entry, the composite goes with the part that went; verify finds nothing bad.
    const Run prune = run_skc(tmp.path(), {"cache", "prune", "--base", base, "--max-entries", "1"});
    REQUIRE_MESSAGE(prune.status == 0, prune.err);
    const Run after = run_skc(tmp.path(), {"cache", "ls", "--base", base, "--json"});
    const skc::Value after_json = skc::parse_json(after.out);
    const skc::Value& left = after_json.find("namespaces")->as_array().at(0);
    CHECK(left.find("entries")->as_array().size() == 1);
    CHECK(left.find("composites")->as_array().empty());
    CHECK(run_skc(tmp.path(), {"cache", "verify", "--base", base}).status == 0);
}

TEST_CASE("skc compile: bases sharing a cache folder (--cache-dir, SKC_CACHE_DIR) compile each key once") {
    TempDir tmp;
    const fs::path ops = ops_dir(tmp, {small_op});
    for (const char* b : {"a", "b", "c"}) fs::create_directories(tmp / b);
    const fs::path shared = tmp / "shared";
    auto args_for = [&](const std::string& base) {
        std::vector<std::string> args = compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--json"};
        args[4] = (tmp / base).string();
        return args;
    };
    const Run a = run_skc(tmp.path(), args_for("a") + std::vector<std::string>{"--cache-dir", shared.string()});
    REQUIRE_MESSAGE(a.status == 0, a.err);
    CHECK(skc::parse_json(a.out).find("outcome")->as_string() == "compiled");
    CHECK(fs::is_directory(shared / "CANN-1.0_host-cpu" / "entries"));
    CHECK_FALSE(fs::exists(tmp / "a" / "static_kernel_compile_outputs" / "static_kernel_cache"));  // not in the base

    const Run b = skc_test::run_program(tool, tmp.path(), args_for("b"), {"SKC_CACHE_DIR=" + shared.string()});
    REQUIRE_MESSAGE(b.status == 0, b.err);
    CHECK(skc::parse_json(b.out).find("outcome")->as_string() == "hit");

    // --cache-dir beats the environment; without either, the base's own folder (a miss here).
    const Run c = skc_test::run_program(tool, tmp.path(), args_for("c"), {"SKC_CACHE_DIR="});
    REQUIRE_MESSAGE(c.status == 0, c.err);
    CHECK(skc::parse_json(c.out).find("outcome")->as_string() == "compiled");

    const Run stats = skc_test::run_program(tool, tmp.path(), {"cache", "stats"}, {"SKC_CACHE_DIR=" + shared.string()});
    CHECK(stats.status == 0);
    CHECK(stats.out.find("CANN-1.0_host-cpu") != std::string::npos);
    CHECK(stats.out.find("  entries:             1\n") != std::string::npos);
    const Run ls = run_skc(tmp.path(), {"cache", "ls", "--cache-dir", shared.string(), "--json"});
    CHECK(ls.status == 0);
    CHECK(ls.out.find(skc::parse_json(a.out).find("key")->as_string()) != std::string::npos);

    fs::create_directory_symlink(shared, tmp / "link");
    const Run bad =
        run_skc(tmp.path(), args_for("a") + std::vector<std::string>{"--cache-dir", (tmp / "link").string()});
    CHECK(bad.status == 2);
    CHECK(bad.err.find("option 'cache_dir'") != std::string::npos);
    CHECK(bad.err.find("symbolic link") != std::string::npos);
}

TEST_CASE("skc cache config: limits stored in the cache folder apply to every later process") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const fs::path cache = tmp / "cache";
    const Run shown = run_skc(tmp.path(), {"cache", "config", "--cache-dir", cache.string()});
    CHECK(shown.status == 0);
    CHECK(shown.out == "cache directory: " + cache.string() +
                           "\nlimits: at most 5.0 GiB (default), no entry limit (default), in each namespace; applied "
                           "after each compile\n");
    const Run set = run_skc(tmp.path(), {"cache", "config", "--cache-dir", cache.string(), "--max-entries", "1"});
    CHECK(set.status == 0);
    CHECK(set.out.find("at most 1 entry (skc cache config)") != std::string::npos);

    // Two compiles of different ops: the second evicts the first's entry (it never evicts its own).
    std::vector<std::string> keys;
    for (const std::string& op : {small_op, std::string("Add_float_ND_32_64_9.json")}) {
        TempDir opsdir;
        const fs::path ops = ops_dir(opsdir, {op});
        const Run r = run_skc(tmp.path(), compile_args(tmp, ops, host_compiler) +
                                              std::vector<std::string>{"--cache-dir", cache.string(), "--json"});
        REQUIRE_MESSAGE(r.status == 0, r.err);
        keys.push_back(skc::parse_json(r.out).find("key")->as_string());
    }
    CHECK_FALSE(fs::exists(cache / "CANN-1.0_host-cpu" / "entries" / keys[0]));
    CHECK(fs::exists(cache / "CANN-1.0_host-cpu" / "entries" / keys[1]));
    const Run stats = run_skc(tmp.path(), {"cache", "stats", "--cache-dir", cache.string(), "--json"});
    const skc::Value v = skc::parse_json(stats.out);
    CHECK(v.find("limits")->find("max_entries")->as_int() == 1);
    CHECK(v.find("limits")->find("max_bytes_from")->as_string() == "default");
    CHECK(v.find("limits")->find("max_entries_from")->as_string() == "config");
    CHECK(v.find("namespaces")->as_array()[0].find("evictions")->as_int() == 1);

    // The environment's size limit wins over the folder's; a bad one is an error naming it.
    const Run env = skc_test::run_program(tool, tmp.path(), {"cache", "config", "--cache-dir", cache.string()},
                                          {"SKC_CACHE_MAX_SIZE=1M"});
    CHECK(env.out.find("at most 1.0 MiB (SKC_CACHE_MAX_SIZE)") != std::string::npos);
    const Run bad = skc_test::run_program(tool, tmp.path(), {"cache", "config", "--cache-dir", cache.string()},
                                          {"SKC_CACHE_MAX_SIZE=lots"});
    CHECK(bad.status != 0);
    CHECK(bad.err.find("option 'SKC_CACHE_MAX_SIZE': value \"lots\" is not a size") != std::string::npos);
    const Run zero = run_skc(
        tmp.path(), {"cache", "config", "--cache-dir", cache.string(), "--max-size", "0", "--max-entries", "0"});
    CHECK(zero.out.find("no size limit (skc cache config), no entry limit (skc cache config)") != std::string::npos);
}

TEST_CASE("skc compile --cache-mode: read-only writes nothing in the cache, recache recompiles; skc cache zero") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const fs::path cache = tmp / "cache";
    const fs::path ops = ops_dir(tmp, {small_op});
    TempDir other_dir;
    const fs::path other = ops_dir(other_dir, {std::string("Add_float_ND_32_64_9.json")});
    auto args = [&](const fs::path& o, std::vector<std::string> more) {
        return compile_args(tmp, o, host_compiler) + std::vector<std::string>{"--cache-dir", cache.string(), "--json"} +
               more;
    };
    auto outcome = [](const Run& r) { return skc::parse_json(r.out).find("outcome")->as_string(); };
    const Run first = run_skc(tmp.path(), args(ops, {}));
    REQUIRE_MESSAGE(first.status == 0, first.err);
    CHECK(outcome(first) == "compiled");

    const auto before = skc_test::snapshot_with_times(cache);
    const Run hit = run_skc(tmp.path(), args(ops, {"--cache-mode", "read-only"}));
    REQUIRE_MESSAGE(hit.status == 0, hit.err);
    CHECK(outcome(hit) == "hit");
    const Run miss = skc_test::run_program(tool, tmp.path(), args(other, {}), {"SKC_CACHE_MODE=read-only"});
    REQUIRE_MESSAGE(miss.status == 0, miss.err);
    CHECK(outcome(miss) == "compiled");
    CHECK(miss.err.find("the cache is read-only: the package compiled for key") != std::string::npos);
    CHECK(fs::is_regular_file(skc::parse_json(miss.out).find("package")->as_string()));  // in the run folder
    CHECK(skc_test::snapshot_with_times(cache) == before);

    // --cache-mode beats the environment; a bad value names where it came from.
    const Run re =
        skc_test::run_program(tool, tmp.path(), args(ops, {"--cache-mode", "recache"}), {"SKC_CACHE_MODE=read-only"});
    REQUIRE_MESSAGE(re.status == 0, re.err);
    CHECK(outcome(re) == "compiled");
    CHECK(skc_test::snapshot_with_times(cache) != before);
    const Run after = run_skc(tmp.path(), args(ops, {}));
    CHECK(outcome(after) == "hit");
    const Run bad_env = skc_test::run_program(tool, tmp.path(), args(ops, {}), {"SKC_CACHE_MODE=sometimes"});
    CHECK(bad_env.status == 2);
    CHECK(bad_env.err ==
          "skc compile: option 'SKC_CACHE_MODE': value \"sometimes\" is not accepted: use read-write, "
          "read-only or recache\n");
    const Run bad_flag = run_skc(tmp.path(), args(ops, {"--cache-mode", "ro"}));
    CHECK(bad_flag.status == 2);
    CHECK(bad_flag.err.find("'--cache-mode': value \"ro\" is not accepted") != std::string::npos);

    const Run stats = run_skc(tmp.path(), {"cache", "stats", "--cache-dir", cache.string(), "--json"});
    const skc::Value stats_doc = skc::parse_json(stats.out);
    const skc::Value& ns = stats_doc.find("namespaces")->as_array()[0];
    CHECK(ns.find("compiles")->as_int() == 2);  // read-only counts are never stored
    CHECK(ns.find("hits")->as_int() == 1);
    const Run zero = run_skc(tmp.path(), {"cache", "zero", "--cache-dir", cache.string()});
    CHECK(zero.status == 0);
    CHECK(zero.out == "CANN-1.0_host-cpu: statistics zeroed\n");
    const Run zeroed = run_skc(tmp.path(), {"cache", "stats", "--cache-dir", cache.string(), "--json"});
    const skc::Value zeroed_doc = skc::parse_json(zeroed.out);
    const skc::Value& z = zeroed_doc.find("namespaces")->as_array()[0];
    CHECK(z.find("compiles")->as_int() == 0);
    CHECK(z.find("hits")->as_int() == 0);
    CHECK(z.find("entries")->as_int() == 1);  // the entry stays (the read-only miss was never stored)
}

TEST_CASE("skc cache explain: names the nearest entry and the op that changed; skc compile logs it on a miss") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const fs::path ops = ops_dir(tmp, {small_op, "Add_float_ND_32_64_9.json", "LayerNorm_float_ND_32_64_7.json"});
    const Run first = run_skc(tmp.path(), compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--json"});
    REQUIRE_MESSAGE(first.status == 0, first.err);
    CHECK(first.err.empty());  // nothing to explain in an empty cache
    const std::string stored = skc::parse_json(first.out).find("key")->as_string();
    const std::vector<std::string> key_args{
        "--ops",       ops.string(), "--base",   (tmp / "base").string(), "--compiler",
        host_compiler, "--device",   "host-cpu", "--toolchain-version",   "1.0"};
    const Run same = run_skc(tmp.path(), std::vector<std::string>{"cache", "explain"} + key_args);
    REQUIRE_MESSAGE(same.status == 0, same.err);
    CHECK(same.out.find("key " + stored + " (3 ops)\nhit: the key has an entry in CANN-1.0_host-cpu\n") !=
          std::string::npos);

    // Change a field of the Add op (same file name and shape): one op changed.
    const fs::path add = ops / "Add_float_ND_32_64_9.json";
    std::string add_text = skc_test::slurp(add);
    const std::string field = "\"tune_mode\": \"all\"";
    REQUIRE(add_text.find(field) != std::string::npos);
    add_text.replace(add_text.find(field), field.size(), "\"tune_mode\": \"none\"");
    skc_test::spit(add, add_text);
    const Run text = run_skc(tmp.path(), std::vector<std::string>{"cache", "explain"} + key_args);
    REQUIRE_MESSAGE(text.status == 0, text.err);
    CHECK(text.out.find("miss\nnearest entry: " + stored + " in CANN-1.0_host-cpu") != std::string::npos);
    CHECK(text.out.find("  ops: 1 changed, 0 added, 0 removed, 2 the same\n") != std::string::npos);
    CHECK(text.out.find("    changed  Add_float_ND_32_64_9.json (the entry's Add_float_ND_32_64_") !=
          std::string::npos);
    const Run json =
        run_skc(tmp.path(), std::vector<std::string>{"cache", "explain", "--json", "--compiler-arg", "-O3"} + key_args);
    REQUIRE_MESSAGE(json.status == 0, json.err);
    const skc::Value j = skc::parse_json(json.out);
    CHECK_FALSE(j.find("hit")->as_bool());
    const skc::Value& nearest = *j.find("nearest");
    CHECK(nearest.find("key")->as_string() == stored);
    CHECK(nearest.find("parts")->as_array().size() == 1);
    CHECK(nearest.find("parts")->as_array()[0].find("part")->as_string() == "compiler_options");
    CHECK(nearest.find("ops")->find("changed")->as_array()[0].find("now")->as_string() == "Add_float_ND_32_64_9.json");

    // The compile that misses says the same in one line on stderr, and then compiles.
    const Run miss = run_skc(tmp.path(), compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--json"});
    REQUIRE_MESSAGE(miss.status == 0, miss.err);
    CHECK(skc::parse_json(miss.out).find("outcome")->as_string() == "compiled");
    CHECK(miss.err.find("skc: info: cache miss for key " + skc::parse_json(miss.out).find("key")->as_string() +
                        ": nearest cache entry " + stored +
                        " (CANN-1.0_host-cpu) differs in ops: 1 changed (Add_float_ND_32_64_") != std::string::npos);
    CHECK(std::count(miss.err.begin(), miss.err.end(), '\n') == 1);

    const Run missing =
        run_skc(tmp.path(), {"cache", "explain", "--base", (tmp / "base").string(), "--ops", ops.string()});
    CHECK(missing.status == 2);
    CHECK(missing.err == "skc cache explain: --compiler is required\n" + hint("skc cache explain"));
}

TEST_CASE("skc cache export and import: moved entries hit; a truncated or tampered file adds nothing") {
    TempDir tmp;
    for (const char* b : {"a", "base"}) fs::create_directories(tmp / b);
    const fs::path ops = ops_dir(tmp, {small_op});
    const Run first = run_skc(tmp.path(), compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--json"});
    REQUIRE_MESSAGE(first.status == 0, first.err);
    const std::string key = skc::parse_json(first.out).find("key")->as_string();
    const std::string base = (tmp / "base").string(), file = (tmp / "cache.skcx").string();

    const Run ex = run_skc(tmp.path(), {"cache", "export", "--base", base, "--key", key, "-o", file});
    REQUIRE_MESSAGE(ex.status == 0, ex.err);
    CHECK(ex.out.find("exported 1 entry (") != std::string::npos);
    const Run bad_key = run_skc(tmp.path(), {"cache", "export", "--base", base, "--key", "nothex", "-o", file});
    CHECK(bad_key.status == 2);
    CHECK(bad_key.err.find("--key: bad value 'nothex'") != std::string::npos);
    const Run no_out = run_skc(tmp.path(), {"cache", "export", "--base", base});
    CHECK(no_out.status == 2);
    CHECK(no_out.err == "skc cache export: --output is required\n" + hint("skc cache export"));

    const std::string good = skc_test::slurp(file);
    for (const std::string& bad : {good.substr(0, good.size() / 2), good.substr(0, 40) + "X" + good.substr(41)}) {
        skc_test::spit(tmp / "bad.skcx", bad);
        const Run r =
            run_skc(tmp.path(), {"cache", "import", "--base", (tmp / "a").string(), (tmp / "bad.skcx").string()});
        CHECK(r.status == 1);
        CHECK(r.err.find("nothing was imported") != std::string::npos);
        CHECK_FALSE(fs::exists(tmp / "a" / "static_kernel_compile_outputs" / "static_kernel_cache" /
                               "CANN-1.0_host-cpu" / "entries" / key));
    }

    const Run im = run_skc(tmp.path(), {"cache", "import", "--base", (tmp / "a").string(), file});
    REQUIRE_MESSAGE(im.status == 0, im.err);
    CHECK(im.out == "imported 1 entry (" + std::string(im.out.substr(18, im.out.find(')') - 18)) + ") into " +
                        (tmp / "a").string() + "/static_kernel_compile_outputs/static_kernel_cache\n");
    std::vector<std::string> args = compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--json"};
    args[4] = (tmp / "a").string();
    const Run hit = run_skc(tmp.path(), args);
    REQUIRE_MESSAGE(hit.status == 0, hit.err);
    CHECK(skc::parse_json(hit.out).find("outcome")->as_string() == "hit");
    const Run verify = run_skc(tmp.path(), {"cache", "verify", "--base", (tmp / "a").string()});
    CHECK(verify.status == 0);
    const Run again = run_skc(tmp.path(), {"cache", "import", "--base", (tmp / "a").string(), file, "--json"});
    CHECK(skc::parse_json(again.out).find("present")->as_int() == 1);
}

TEST_CASE(
    "trust: a cache folder other users may write is refused; a group-shared one is used; no flock is a clear error") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const fs::path ops = ops_dir(tmp, {small_op});
    const fs::path cache = tmp / "cache";
    auto compile = [&](std::vector<std::string> env = {}) {
        return skc_test::run_program(
            tool, tmp.path(),
            compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--cache-dir", cache.string(), "--json"},
            std::move(env));
    };
    // Created by skc under umask 002: writable by its owner only.
    const Run first = skc_test::run_program("/bin/sh", tmp.path(),
                                            std::vector<std::string>{"-c", "umask 002 && exec \"$0\" \"$@\"", tool} +
                                                compile_args(tmp, ops, host_compiler) +
                                                std::vector<std::string>{"--cache-dir", cache.string(), "--json"});
    REQUIRE_MESSAGE(first.status == 0, first.err);
    CHECK((fs::status(cache).permissions() & fs::perms::group_write) == fs::perms::none);
    CHECK((fs::status(cache / "CANN-1.0_host-cpu").permissions() & fs::perms::group_write) == fs::perms::none);

    fs::permissions(cache, fs::perms::others_write, fs::perm_options::add);
    const Run world = compile();
    CHECK(world.status == 2);
    CHECK(world.err.find(cache.string() +
                         ": the cache folder is writable by every user (mode 0757); its packages are executed "
                         "when installed, so it is not used") != std::string::npos);
    fs::permissions(cache, fs::perms::others_write, fs::perm_options::remove);

    fs::permissions(cache / "CANN-1.0_host-cpu", fs::perms::group_write, fs::perm_options::add);
    const Run group = compile();
    CHECK(group.status == 2);
    CHECK(group.err.find("the cache folder is writable by its group but not set up as group-shared (mode 0775)") !=
          std::string::npos);
    // Group-shared on purpose (setgid): used, and hits.
    fs::permissions(cache, fs::perms::group_write | fs::perms::set_gid, fs::perm_options::add);
    fs::permissions(cache / "CANN-1.0_host-cpu", fs::perms::set_gid, fs::perm_options::add);
    const Run shared = compile();
    REQUIRE_MESSAGE(shared.status == 0, shared.err);
    CHECK(skc::parse_json(shared.out).find("outcome")->as_string() == "hit");
    const Run ro = compile({"SKC_CACHE_MODE=read-only"});
    CHECK(ro.status == 0);
    fs::permissions(cache / "CANN-1.0_host-cpu" / "packages", fs::perms::others_write, fs::perm_options::add);
    const Run ro_bad = compile({"SKC_CACHE_MODE=read-only"});
    CHECK(ro_bad.status == 2);  // read-only too: its packages would be executed all the same
    CHECK(ro_bad.err.find("packages: the cache folder is writable by every user") != std::string::npos);
    fs::permissions(cache / "CANN-1.0_host-cpu" / "packages", fs::perms::others_write, fs::perm_options::remove);

    // A file system whose flock fails: the error names the folder and the fix.
    for (const char* err : {"37", "38", "95"}) {  // ENOLCK, ENOSYS, EOPNOTSUPP
        const Run r = compile({std::string("LD_PRELOAD=") + SKC_FLOCK_FAILS, std::string("SKC_TEST_FLOCK_ERRNO=") + err,
                               "ASAN_OPTIONS=verify_asan_link_order=0"});
        CAPTURE(r.err);
        CHECK(r.status != 0);
        CHECK(r.err.find("the file system does not support flock (") != std::string::npos);
        CHECK(r.err.find(
                  "mount NFS with lockd (not 'nolock'), Lustre with '-o flock', or put the cache on a local disk") !=
              std::string::npos);
    }
}

TEST_CASE(
    "skc compile on a terminal shows one progress line on stderr; nothing with --json, on a hit, or into a file") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const std::string slow = script(tmp, "slow.sh",
                                    "while [ $# -gt 0 ]; do case \"$1\" in -o) out=$2; shift;; esac; shift; done\n"
                                    "echo 'skc-progress: 0/1'; sleep 0.5; echo 'skc-progress: 1/1 op.json'; sleep 0.5\n"
                                    "cp " +
                                        skc_test::make_package(tmp.path(), "k", {}).string() + " \"$out/k.run\"");
    const auto args = compile_args(tmp, ops_dir(tmp, {small_op}), slow);

    const TtyRun first = run_skc_on_tty(tmp.path(), args);
    INFO(first.tty);
    CHECK(first.status == 0);
    CHECK(first.out.rfind("skc compile: miss, compiled\n", 0) == 0);
    CHECK(first.tty.rfind("\r\033[Kcompiling: 0/1 ops, 0.0 s", 0) == 0);
    // Between the compiler's reports the line is redrawn with the time running.
    bool time_ran = false;
    for (std::size_t at = 0; (at = first.tty.find("compiling: 0/1 ops, ", at)) != std::string::npos; ++at)
        time_ran = time_ran || first.tty.compare(at + 20, 5, "0.0 s") != 0;
    CHECK(time_ran);
    CHECK(first.tty.find("\r\033[Kcompiling: 1/1 ops, ") != std::string::npos);
    CHECK(first.tty.size() > 6);
    CHECK(first.tty.substr(first.tty.size() - 4) == " s\r\n");  // one line feed at the end
    CHECK(first.tty.find('\n') == first.tty.size() - 1);
    CHECK(first.tty.find("looking up") == std::string::npos);

    const TtyRun hit = run_skc_on_tty(tmp.path(), args);
    CHECK(hit.status == 0);
    CHECK(hit.out.rfind("skc compile: hit\n", 0) == 0);
    CHECK(hit.tty.empty());

    const TtyRun json = run_skc_on_tty(tmp.path(), args + std::vector<std::string>{"--no-cache", "--json"});
    CHECK(json.status == 0);
    CHECK(skc::parse_json(json.out).find("outcome")->as_string() == "disabled");
    CHECK(json.tty.empty());

    const Run file = run_skc(tmp.path(), args + std::vector<std::string>{"--no-cache"});
    CHECK(file.status == 0);
    CHECK(file.out.rfind("skc compile: cache disabled, compiled\n", 0) == 0);
    CHECK(file.out.find("\n  kernels    compiled 1 of 1 ops\n") != std::string::npos);
    CHECK(file.err.empty());
}

TEST_CASE("skc compile on a terminal: a failing compile ends the progress line before the error") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const std::string fail =
        script(tmp, "fail.sh", "echo 'skc-progress: 0/1'; sleep 0.3; echo 'no kernel for you' >&2; exit 4");
    const TtyRun r = run_skc_on_tty(tmp.path(), compile_args(tmp, ops_dir(tmp, {small_op}), fail));
    INFO(r.tty);
    CHECK(r.status == 1);
    CHECK(r.out.empty());
    CHECK(r.tty.rfind("\r\033[Kcompiling: 0/1 ops, 0.0 s", 0) == 0);
    const std::size_t end = r.tty.find(" s\r\nskc compile: ");
    REQUIRE(end != std::string::npos);
    CHECK(r.tty.find("\r\033[K", end) == std::string::npos);  // nothing drawn after the error
    CHECK(r.tty.find(
              "the compiler exited with status 4. Last lines of its log:\r\nskc-progress: 0/1\r\nno kernel for you\r\n",
              end) != std::string::npos);
}

TEST_CASE("a package cut short never enters the cache: host_op_compiler and skc each refuse it") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    fs::create_directories(tmp / "bin");
    const fs::path ops = ops_dir(tmp, {small_op});
    const fs::path entries =
        tmp / "base" / "static_kernel_compile_outputs" / "static_kernel_cache" / "CANN-1.0_host-cpu" / "entries";
    // A makeself that, like makeself 2.4 on a full disk, exits 0 after writing a short archive.
    skc_test::spit(tmp / "bin" / "makeself",
                   "#!/bin/sh\n/usr/bin/makeself \"$@\" || exit $?\n"
                   "head -c -100 \"$4\" > \"$4.cut\" && mv \"$4.cut\" \"$4\"\nexit 0\n");
    fs::permissions(tmp / "bin" / "makeself", fs::perms::owner_all);
    const Run host = skc_test::run_program(tool, tmp.path(), compile_args(tmp, ops, host_compiler),
                                           {"PATH=" + (tmp / "bin").string() + ":" + std::getenv("PATH")});
    CAPTURE(host.err);
    CHECK(host.status == 1);
    CHECK(host.err.find("makeself exited with status 0 but wrote a bad package: the package is ") != std::string::npos);
    CHECK(host.err.find(": it was cut short (a write error while it was made?)") != std::string::npos);
    CHECK((!fs::exists(entries) || fs::is_empty(entries)));

    // A compiler that does not check its own output: skc checks it before the cache stores it.
    const fs::path whole =
        skc_test::make_package(tmp.path(), "whole", {{skc_test::digest_of(1), "Gelu", "kernels/k.so", "x"}});
    const std::string bytes = skc_test::slurp(whole);
    skc_test::spit(tmp / "cut.run", bytes.substr(0, bytes.size() - 10));
    const std::string cutter = script(tmp, "cutter.sh",
                                      "while [ $# -gt 0 ]; do case \"$1\" in -o) out=$2; shift;; esac; shift; done\n"
                                      "cp " +
                                          (tmp / "cut.run").string() + " \"$out/static_kernel_1.run\"");
    const Run r = run_skc(tmp.path(), compile_args(tmp, ops, cutter));
    CAPTURE(r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find("the compiler's package is unusable, so it is neither stored nor installed: the package is " +
                     std::to_string(bytes.size() - 10) + " bytes, its makeself header says " +
                     std::to_string(bytes.size())) != std::string::npos);
    CHECK((!fs::exists(entries) || fs::is_empty(entries)));
    // The same compiler with a whole package: stored.
    skc_test::spit(tmp / "cut.run", bytes);
    CHECK(run_skc(tmp.path(), compile_args(tmp, ops, cutter)).status == 0);
    CHECK(std::distance(fs::directory_iterator(entries), fs::directory_iterator()) == 1);
}

TEST_CASE(
    "a cached package stored damaged: its install fails, the entry is discarded and compiled again in the same run") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const fs::path ops = ops_dir(tmp, {small_op, "Add_float_ND_32_64_9.json"});
    const Run first =
        run_skc(tmp.path(), compile_args(tmp, ops, host_compiler) +
                                std::vector<std::string>{"--op-library", (tmp / "lib1").string(), "--json"});
    REQUIRE(first.status == 0);
    const std::string key = skc::parse_json(first.out).find("key")->as_string();

    // Poison the entry as a full disk did before packages were checked: the package cut short, its
    // entry recording the cut bytes' size and checksum.
    {
        skc::CacheConfig quiet;
        quiet.log = skc::null_log();
        auto cache = skc::open_cache(skc::Layout(tmp / "base"), "1.0", "host-cpu", quiet);
        std::vector<skc::CacheEntry> list = cache->entries();
        REQUIRE(list.size() == 1);
        skc::CacheEntry e = list.front();
        REQUIRE(e.key == key);
        const std::string bytes = skc_test::slurp(tmp / "base" / "static_kernel_compile_outputs" /
                                                  "static_kernel_cache" / "CANN-1.0_host-cpu" / e.package);
        const std::string cut = bytes.substr(0, bytes.size() - 10);
        skc_test::spit(tmp / "cut.run", cut);
        skc::detail::Hasher h;
        h.update(cut);
        e.size = cut.size();
        e.checksum = h.digest();
        cache->clear();
        REQUIRE(cache->import_entry(e, tmp / "cut.run"));
    }
    const Run second =
        run_skc(tmp.path(), compile_args(tmp, ops, host_compiler) +
                                std::vector<std::string>{"--op-library", (tmp / "lib2").string(), "--json"});
    CAPTURE(second.err);
    REQUIRE(second.status == 0);
    const skc::Value b = skc::parse_json(second.out);
    CHECK(b.find("outcome")->as_string() == "compiled");
    CHECK(b.find("key")->as_string() == key);
    CHECK(second.err.find("the cached package for key " + key + " cannot be installed (") != std::string::npos);
    CHECK(second.err.find("), so it is discarded and compiled again") != std::string::npos);
    CHECK(skc::parse_json(skc_test::slurp(tmp / "lib2" / "static_kernel" / "host" / "config" / "host-cpu" /
                                          "binary_info_config.json"))
              .find("kernels")
              ->as_object()
              .size() == 2);
    // The cache holds the good package now; a third run hits and installs it.
    CHECK(run_skc(tmp.path(), {"cache", "verify", "--base", (tmp / "base").string()}).status == 0);
    const Run third =
        run_skc(tmp.path(), compile_args(tmp, ops, host_compiler) +
                                std::vector<std::string>{"--op-library", (tmp / "lib3").string(), "--json"});
    REQUIRE(third.status == 0);
    CHECK(skc::parse_json(third.out).find("outcome")->as_string() == "hit");
    const skc::Value stats =
        skc::parse_json(run_skc(tmp.path(), {"cache", "stats", "--base", (tmp / "base").string(), "--json"}).out);
    CHECK(stats.find("total")->find("corrupt")->as_double() == 1);
}

namespace {

/// Whether process `pid` runs (a zombie does not).
bool running(pid_t pid) {
    const std::string stat = skc_test::slurp("/proc/" + std::to_string(pid) + "/stat");
    const std::size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

}  // namespace

TEST_CASE(
    "a signal to skc's whole process group ends the compiler too, and SIGINT, SIGTERM and SIGHUP say what was "
    "interrupted") {
    for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGKILL}) {
        CAPTURE(sig);
        TempDir tmp;
        fs::create_directories(tmp / "base");
        const fs::path pid_file = tmp / "compiler.pid";
        const std::string sleeper = script(tmp, "sleeper.sh",
                                           "echo $$ > " + pid_file.string() + ".tmp; mv " + pid_file.string() +
                                               ".tmp " + pid_file.string() + "\nexec sleep 30");
        const std::vector<std::string> args = compile_args(tmp, ops_dir(tmp, {small_op}), sleeper);
        // skc as a shell starts a job: the leader of a process group of its own.
        TempDir io;
        const pid_t skc = skc_test::start_program(tool, tmp.path(), args, {}, io.path(), /*own_group=*/true).pid;
        const std::string err_file = (io / "stderr").string();

        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (!fs::exists(pid_file) && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        REQUIRE(fs::exists(pid_file));
        const pid_t compiler = static_cast<pid_t>(std::stol(skc_test::slurp(pid_file)));
        REQUIRE(running(compiler));
        REQUIRE(::kill(-skc, sig) == 0);  // the whole group, as Ctrl-C, a hang-up or `kill -- -PGID`
        int status = 0;
        REQUIRE(::waitpid(skc, &status, 0) == skc);
        REQUIRE(WIFSIGNALED(status));  // ended by the signal: the shell shows 128 + signal
        CHECK(WTERMSIG(status) == sig);
        // The compiler, in a group of its own, goes too (the guard sends SIGTERM at once).
        const auto gone_by = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (running(compiler) && std::chrono::steady_clock::now() < gone_by)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        CHECK_FALSE(running(compiler));
        if (running(compiler)) ::kill(compiler, SIGKILL);

        const std::string err = skc_test::slurp(err_file);
        if (sig == SIGKILL) {
            CHECK(err.empty());
        } else {
            const std::string name = sig == SIGINT ? "INT" : sig == SIGTERM ? "TERM" : "HUP";
            CHECK(err.rfind("skc compile: interrupted by SIG" + name + " while compiling 1 ops for cache key ", 0) ==
                  0);
            CHECK(err.find(" (0 done): the compiler is stopped, and the cache holds no part of this compile\n") !=
                  std::string::npos);
        }
        // Nothing stored: the next run compiles (with a compiler that finishes).
        const fs::path entries =
            tmp / "base" / "static_kernel_compile_outputs" / "static_kernel_cache" / "CANN-1.0_host-cpu" / "entries";
        CHECK((!fs::exists(entries) || fs::is_empty(entries)));
    }
}

TEST_CASE("an --ops folder that cannot be listed is bad input: exit status 2, as skc ops inspect") {
    if (::geteuid() != 0) {
        MESSAGE("needs root to act as another user; not run");
        return;
    }
    TempDir tmp;
    fs::permissions(tmp.path(), fs::perms::all);
    const fs::path ops = ops_dir(tmp, {small_op});
    fs::permissions(ops, fs::perms::owner_all, fs::perm_options::replace);  // root's alone
    fs::create_directories(tmp / "nb");
    fs::permissions(tmp / "nb", fs::perms::all);
    const std::vector<std::string> as_nobody{"--reuid=65534", "--regid=65534", "--clear-groups", tool};
    const Run c =
        skc_test::run_program("/usr/bin/setpriv", tmp.path(),
                              as_nobody + std::vector<std::string>{"compile", "--ops", ops.string(), "--base",
                                                                   (tmp / "nb").string(), "--compiler", host_compiler,
                                                                   "--device", "host-cpu", "--toolchain-version", "1"});
    CHECK(c.status == 2);
    CHECK(c.err == "skc compile: " + ops.string() + ": cannot list directory: Permission denied\n");
    CHECK(fs::is_empty(tmp / "nb"));  // nothing written
    const Run i = skc_test::run_program("/usr/bin/setpriv", tmp.path(),
                                        as_nobody + std::vector<std::string>{"ops", "inspect", ops.string()});
    CHECK(i.status == 2);
    CHECK(i.err == "skc ops inspect: " + ops.string() + ": cannot list directory: Permission denied\n");
}

}  // namespace tools_skc_compile_test
