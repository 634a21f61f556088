// skc compile, skc uninstall and skc ops inspect, run as a user runs them: the real host_op_compiler
// (examples/host) compiles real kernels; small shell scripts stand in for compilers that hang or
// fail. Exit statuses, messages, and what is left on disk are checked.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <skc/op_info_io.hpp>

#include "run_tool.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using skc_test::Run;
using skc_test::TempDir;

const std::string tool = SKC_TOOL;
const std::string host_compiler = SKC_HOST_OP_COMPILER;

Run run_skc(const fs::path& cwd, const std::vector<std::string>& args) { return skc_test::run_program(tool, cwd, args); }

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
    return {"compile", "--ops", ops.string(), "--base", (tmp / "base").string(), "--compiler", compiler,
            "--device", "host-cpu", "--toolchain-version", "1.0", "--jobs", "2"};
}

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
    const fs::path run1 = a.find("run_dir")->as_string();
    CHECK(run_packages_in(run1) == 1);  // the compiler's own static_kernel_<datetime>.run
    CHECK(fs::exists(run1 / "op_compiler.log"));
    const fs::path index = lib / "static_kernel/host/config/host-cpu/binary_info_config.json";
    const skc::Value installed = skc::parse_json(skc_test::slurp(index));
    // host_op_compiler skips ConcatD (no host kernel): 11 kernels from 12 selected ops.
    CHECK(installed.find("kernels")->as_object().size() == 11);

    const Run second = run_skc(tmp.path(), args);
    REQUIRE(second.status == 0);
    const skc::Value b = skc::parse_json(second.out);
    CHECK(b.find("outcome")->as_string() == "hit");
    CHECK(b.find("key")->as_string() == key);
    const fs::path run2 = b.find("run_dir")->as_string();
    CHECK(run_packages_in(run2) == 0);  // the compiler did not run
    CHECK_FALSE(fs::exists(run2 / "op_compiler.log"));
    CHECK(b.find("stage_ms")->find("compile")->as_double() == 0.0);

    const Run text = run_skc(tmp.path(), compile_args(tmp, skc_test::example_ops_dir(), host_compiler));
    CHECK(text.status == 0);
    CHECK(text.out.rfind("skc compile: hit\n  key        " + key + "\n", 0) == 0);
    CHECK(text.out.find("  installed  no (give --op-library to install)\n") != std::string::npos);

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
    const auto args = compile_args(tmp, ops_dir(tmp, {small_op}), host_compiler) + std::vector<std::string>{"--no-cache"};
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
    const Run r = run_skc(tmp.path(), compile_args(tmp, ops_dir(tmp, {small_op}), hang) + std::vector<std::string>{"--timeout", "1"});
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

TEST_CASE("skc compile with LOCAL_WORLD_SIZE/LOCAL_RANK: the ranks of a node compile once; a missing rank is 3, the "
          "leader's failure 1") {
    TempDir tmp;
    fs::create_directories(tmp / "base");
    const fs::path ops = ops_dir(tmp, {small_op, "Add_float_ND_32_64_9.json"});
    // Starts `ranks` of a node of `size` with `compiler`; returns each rank's run.
    auto node = [&](std::size_t size, std::size_t ranks, const std::string& run_id, const std::string& compiler,
                    const std::vector<std::string>& extra = {}) {
        std::vector<TempDir> io(ranks);
        std::vector<skc_test::Started> started;
        for (std::size_t k = 0; k < ranks; ++k)
            started.push_back(skc_test::start_program(
                tool, tmp.path(), compile_args(tmp, ops, compiler) + std::vector<std::string>{"--timeout", "2", "--json"} + extra,
                {"LOCAL_WORLD_SIZE=" + std::to_string(size), "LOCAL_RANK=" + std::to_string(k), "SKC_RUN_ID=" + run_id,
                 "TORCHELASTIC_RUN_ID="},
                io[k].path()));
        std::vector<Run> runs;
        for (const auto& st : started) runs.push_back(skc_test::finish(st));
        return runs;
    };

    SUBCASE("three ranks: one compile, the same key and package everywhere, one extraction") {
        const std::string counter = (tmp / "compiles").string();
        const std::string counting = script(tmp, "counting.sh", "echo run >> " + counter + "\nexec " + host_compiler + " \"$@\"");
        const std::vector<Run> runs = node(3, 3, "job-ok", counting, {"--op-library", (tmp / "lib").string()});
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
            CHECK(r.err.find(": local rank 2 of 3 did not arrive within 2 s (run id \"job-missing\")\n") != std::string::npos);
        }
    }
    SUBCASE("bad rank variables are exit status 2, and nothing is written") {
        const Run r = skc_test::run_program(tool, tmp.path(), compile_args(tmp, ops, host_compiler),
                                            {"LOCAL_WORLD_SIZE=2", "LOCAL_RANK=2", "SKC_RUN_ID=job-bad"});
        CHECK(r.status == 2);
        CHECK(r.err == "skc compile: option 'LOCAL_RANK': LOCAL_RANK=2 is out of range for LOCAL_WORLD_SIZE=2 (0 to 1)\n");
        CHECK(fs::is_empty(tmp / "base"));
        const Run no_id = skc_test::run_program(tool, tmp.path(), compile_args(tmp, ops, host_compiler),
                                                {"LOCAL_WORLD_SIZE=2", "LOCAL_RANK=1", "SKC_RUN_ID=", "TORCHELASTIC_RUN_ID="});
        CHECK(no_id.status == 2);
        CHECK(no_id.err.find("no run id: set SKC_RUN_ID (or TORCHELASTIC_RUN_ID, as torchrun does)") != std::string::npos);
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
    check({"compile", "--ops", ops.string()}, "skc compile: missing --base (see skc compile --help)\n");
    check({"compile", "--ops", ops.string(), "--base", (tmp / "base").string(), "--compiler", host_compiler, "--device",
           "d", "--toolchain-version", "1", "--jobs", "0"},
          "skc compile: bad --jobs '0': expected a whole number from 1 to 1024\n");
    check(compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--timeout", "soon"},
          "skc compile: bad --timeout 'soon': expected a whole number from 1 to 604800\n");
    check(compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--backend", "../x"},
          "skc compile: bad --backend '../x': use letters, digits, '_', '-' and '.', not starting with '.'\n");
    check(compile_args(tmp, tmp / "nowhere", host_compiler),
          "skc compile: --ops " + (tmp / "nowhere").string() + ": no such folder\n");
    check(compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--log-level", "loud"},
          "skc compile: bad --log-level 'loud': expected debug, info, warning or error\n");
    check(compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--frobnicate"},
          "skc compile: unknown option '--frobnicate'; options: --ops, --base, --compiler, --device, "
          "--toolchain-version, --op-library, --backend, --no-cache, --cache-dir, --cache-mode, --model-cache, --blacklist, --compiler-arg, "
          "--deterministic, --compiler-check, --jobs, --timeout, --run-id, --mpi, --log-level, --json\n");
    check(compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--device", "x"},
          "skc compile: option --device is given twice; give it once\n");

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
    CHECK(r.out.rfind("skc compile: skipped\n  nothing to compile: 2 distinct ops, 2 supported, 2 blacklisted\n", 0) == 0);
}

TEST_CASE("skc ops inspect: the summary, the JSON, and unreadable files") {
    TempDir tmp;
    const Run text = run_skc(tmp.path(), {"ops", "inspect", skc_test::example_ops_dir().string()});
    CHECK(text.status == 0);
    CHECK(text.out.rfind("15 op info files in " + skc_test::example_ops_dir().string() +
                             ": 14 distinct ops, 12 selected for compilation\n", 0) == 0);
    CHECK(text.out.find("  GatherV2_float_ND_1000_64_13.json        unsupported: GatherV2 does not support static "
                        "compilation\n") != std::string::npos);

    const Run json = run_skc(tmp.path(), {"ops", "inspect", skc_test::example_ops_dir().string(), "--json", "--blacklist", "Gelu"});
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
    CHECK(no_cmd.err == "skc ops: no command given; commands: inspect (see skc ops --help)\n");
    const Run no_dir = run_skc(tmp.path(), {"ops", "inspect"});
    CHECK(no_dir.status == 2);
    CHECK(no_dir.err == "skc ops inspect: no folder given (see skc ops --help)\n");
}

TEST_CASE("skc compile: a base copied with cp -r (and its packages chmod'ed) hits, and skc cache verify finds it clean") {
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

    const Run bad = run_skc(tmp.path(), compile_args(tmp, ops, host_compiler) + std::vector<std::string>{"--compiler-check", "size"});
    CHECK(bad.status == 2);
    CHECK(bad.err == "skc compile: option '--compiler-check': value \"size\" is not accepted: use content, mtime, none, "
                     "string:TEXT or command:CMD\n");
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
    const Run bad = run_skc(tmp.path(), args_for("a") + std::vector<std::string>{"--cache-dir", (tmp / "link").string()});
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
                           "\nlimits: at most 5.0 GiB (default), no entry limit (default), in each namespace; applied after each compile\n");
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
    const Run zero = run_skc(tmp.path(), {"cache", "config", "--cache-dir", cache.string(), "--max-size", "0", "--max-entries", "0"});
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
        return compile_args(tmp, o, host_compiler) + std::vector<std::string>{"--cache-dir", cache.string(), "--json"} + more;
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
    const Run re = skc_test::run_program(tool, tmp.path(), args(ops, {"--cache-mode", "recache"}), {"SKC_CACHE_MODE=read-only"});
    REQUIRE_MESSAGE(re.status == 0, re.err);
    CHECK(outcome(re) == "compiled");
    CHECK(skc_test::snapshot_with_times(cache) != before);
    const Run after = run_skc(tmp.path(), args(ops, {}));
    CHECK(outcome(after) == "hit");
    const Run bad_env = skc_test::run_program(tool, tmp.path(), args(ops, {}), {"SKC_CACHE_MODE=sometimes"});
    CHECK(bad_env.status == 2);
    CHECK(bad_env.err == "skc compile: option 'SKC_CACHE_MODE': value \"sometimes\" is not accepted: use read-write, "
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
