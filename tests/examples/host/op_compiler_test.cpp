// host_op_compiler (examples/host/op_compiler.cpp), run as skc runs it: a child process
// (posix_spawn, no shell) with real C++ compiles and a real makeself package, which is then
// installed with skc::RunPackageInstaller, loaded with skc_host::load_installed_kernels
// (examples/host/loader.hpp) and run against the generic kernels. Bad command lines and bad input
// are checked message by message; the loader's errors on a hand-made op library.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <skc/compiler.hpp>
#include <skc/detail/process.hpp>
#include <skc/op_info_io.hpp>
#include <skc/policy/run_package_installer.hpp>
#include <skc/policy/process_invoker.hpp>

#include "host/codegen.hpp"
#include "host/dispatch.hpp"
#include "host/loader.hpp"
#include "host/toolchain.hpp"
#include "run_tool.hpp"
#include "test_support.hpp"

namespace examples_host_op_compiler_test {

namespace {

namespace fs = std::filesystem;
using skc_test::slurp;
using skc_test::spit;
using skc_test::TempDir;

const std::string tool = SKC_HOST_OP_COMPILER;

using skc_test::Run;

/// Runs host_op_compiler to its end; `env` as for skc_test::start_program.
Run run_tool(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    TempDir io;
    return skc_test::finish(skc_test::start_program(tool, {}, args, env, io.path()));
}

/// Names in `dir` (not recursive), sorted.
std::vector<std::string> names_in(const fs::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

/// A folder holding copies of the named example op info files.
void copy_examples(const fs::path& dir, const std::vector<std::string>& names) {
    fs::create_directories(dir);
    for (const std::string& n : names) fs::copy_file(skc_test::example_ops_dir() / n, dir / n);
}

/// One float buffer per float tensor (random for inputs), in the kernels' calling convention: a list
/// slot's tensors one after the other (host/plan.hpp); empty for absent slots and other dtypes.
/// The example ops' tensors are dense.
std::vector<std::vector<float>> buffers(const std::vector<skc::TensorSlot>& slots, std::mt19937& rng, bool random) {
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    std::vector<std::vector<float>> out;
    auto one = [&](const skc::TensorDesc* t) {
        if (t == nullptr || t->dtype != "float") {
            out.emplace_back();
            return;
        }
        std::vector<float> v(static_cast<std::size_t>(t->shape.element_count().value()),
                             std::numeric_limits<float>::quiet_NaN());
        if (random)
            for (float& f : v) f = dist(rng);
        out.push_back(std::move(v));
    };
    for (const skc::TensorSlot& s : slots) {
        if (const auto* list = std::get_if<std::vector<skc::TensorDesc>>(&s))
            for (const skc::TensorDesc& t : *list) one(&t);
        else one(std::get_if<skc::TensorDesc>(&s));
    }
    return out;
}

template <class T>
std::vector<T*> pointers(std::vector<std::vector<float>>& b) {
    std::vector<T*> p;
    for (auto& v : b) p.push_back(v.empty() ? nullptr : v.data());
    return p;
}

const std::string usage_first_line = "usage: host_op_compiler -p <json_dir> -v <device> -j <jobs> -o <output_dir>\n";

/// The progress lines in `text`, in order (docs/file-formats.md, "Progress lines").
std::vector<skc::ProgressLine> progress_lines(const std::string& text) {
    std::vector<skc::ProgressLine> out;
    std::size_t pos = 0;
    while (pos < text.size()) {
        const std::size_t nl = std::min(text.find('\n', pos), text.size());
        if (auto p = skc::parse_progress_line(std::string_view(text).substr(pos, nl - pos)))
            out.push_back(std::move(*p));
        pos = nl + 1;
    }
    return out;
}

/// Progress as host_op_compiler reports it for the op info files `names`: 0/n first, then each
/// file once, `done` counting up by one; the skipped (unsupported) files `first` come right after 0/n.
void check_progress(const std::vector<skc::ProgressLine>& lines, const std::set<std::string>& names,
                    const std::set<std::string>& first = {}) {
    REQUIRE(lines.size() == names.size() + 1);
    CHECK(lines[0].done == 0);
    CHECK(lines[0].op.empty());
    std::set<std::string> seen, seen_first;
    for (std::size_t i = 0; i < lines.size(); ++i) {
        CAPTURE(i);
        CHECK(lines[i].done == i);
        CHECK(lines[i].total == names.size());
        if (i == 0) continue;
        CHECK(seen.insert(lines[i].op).second);
        if (i <= first.size()) seen_first.insert(lines[i].op);
    }
    CHECK(seen == names);
    CHECK(seen_first == first);
}

std::set<std::string> example_names() {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(skc_test::example_ops_dir())) out.insert(e.path().filename().string());
    return out;
}

/// A bad command line: exit status 2, the message, then the usage text; nothing on stdout.
void check_usage_error(const Run& r, const std::string& message) {
    CHECK(r.status == 2);
    CHECK(r.out.empty());
    CHECK(r.err.rfind("host_op_compiler: " + message + "\n" + usage_first_line, 0) == 0);
}

}  // namespace

TEST_CASE(
    "host_op_compiler compiles the example ops into a run package that installs, loads and matches the generic "
    "kernels") {
    TempDir tmp;
    const fs::path out = tmp / "out", lib = tmp / "lib";
    const Run r = run_tool({"-p", skc_test::example_ops_dir().string(), "-v", "dev0", "-j", "2", "-o", out.string()});
    INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
    REQUIRE(r.status == 0);
    CHECK(r.err.empty());

    // Exactly one package, nothing else left in the output folder (no work folder).
    const std::vector<std::string> left = names_in(out);
    REQUIRE(left.size() == 1);
    const std::string& name = left[0];
    CHECK(name.rfind("static_kernel_", 0) == 0);
    CHECK(name.size() == std::string("static_kernel_").size() + 20 + 4);
    CHECK(name.substr(name.size() - 4) == ".run");
    const fs::path package = out / name;
    const std::string stem = package.stem().string();

    // What it printed: every unsupported file skipped with its reason, the duplicate, progress, summary.
    const std::string supported_list =
        " is not supported by the host kernels (supported: " + std::string(skc_host::supported_op_types) + ")\n";
    CHECK(r.out.rfind("15 op info files in " + skc_test::example_ops_dir().string() +
                          ": 12 kernels to compile, 2 unsupported, 1 duplicate\n",
                      0) == 0);
    CHECK(r.out.find("skipped GatherV2_float_ND_1000_64_13.json: GatherV2: op type GatherV2" + supported_list) !=
          std::string::npos);
    CHECK(r.out.find("skipped ReduceSum_float_ND_32_64_11.json: ReduceSum: op type ReduceSum" + supported_list) !=
          std::string::npos);
    CHECK(r.out.find("duplicate MatMulV2_float_ND_32_64_14.json: same op as MatMulV2_float_ND_32_64_1.json\n") !=
          std::string::npos);
    for (int i = 1; i <= 13; ++i) CHECK(r.out.find("[" + std::to_string(i) + "/13] compiled ") != std::string::npos);
    // Each compile with its time, then the whole compile step and the slowest translation unit.
    CHECK(r.out.find("] compiled MatMulV2 [32,64] [64,192] -> [32,192] in ") != std::string::npos);
    CHECK(r.out.find("] compiled entry table in ") != std::string::npos);
    CHECK(r.out.find("\ncompiled 13 translation units for " + skc_host::host_target().id +
                     " (-march=" + skc_host::host_target().march + ") in ") != std::string::npos);
    CHECK(r.out.find(" at a time; ") != std::string::npos);
    CHECK(r.out.find(" in all, slowest ") != std::string::npos);
    CHECK(r.out.find("linked kernels/" + stem + ".so (12 kernels)\n") != std::string::npos);
    // Progress lines: every file once, the two unsupported ones at once, the duplicate with its original.
    check_progress(progress_lines(r.out), example_names(),
                   {"GatherV2_float_ND_1000_64_13.json", "ReduceSum_float_ND_32_64_11.json"});
    CHECK(r.out.find("\nskc-progress: 0/15\n") != std::string::npos);
    const std::string summary =
        "compiled 12 kernels (1 duplicate op info files compiled once), skipped 2 unsupported ops; package " +
        package.string() + "\n";
    CHECK(r.out.size() >= summary.size());
    CHECK(r.out.substr(r.out.size() - std::min(r.out.size(), summary.size())) == summary);

    // Install it, then load what the global index names.
    skc::RunPackageInstaller installer;
    skc::Installation inst = installer.install(package, lib, skc::InstallOptions{});
    CHECK(inst.extracted());
    const fs::path base = lib / "static_kernel" / "host";
    CHECK(fs::is_regular_file(base / stem / "binary_info_config.json"));
    CHECK(fs::is_regular_file(base / stem / "kernels" / (stem + ".so")));
    CHECK(fs::is_regular_file(base / stem / "setup.sh"));
    const skc::Value own = skc::parse_json(slurp(base / stem / "binary_info_config.json"));
    CHECK(own.find("format")->as_string() == "skc-run-package");
    CHECK(own.find("version")->as_int() == 1);
    CHECK(own.find("backend")->as_string() == "host");
    CHECK(own.find("device")->as_string() == "dev0");
    REQUIRE(own.find("kernels")->as_array().size() == 12);

    const skc::ReselectContext ctx{lib, "host", "dev0", stem};
    const auto loaded = skc_host::load_installed_kernels(ctx);
    REQUIRE(loaded.size() == 12);
    std::map<skc::Digest, skc_host::KernelFn> by_digest(loaded.begin(), loaded.end());
    CHECK(by_digest.size() == 12);
    CHECK(skc_host::load_installed_kernels(ctx) == loaded);  // the same handles, the same functions

    // The library's entry table lists the same kernels without any index.
    const auto table = skc_host::read_entry_table(base / stem / "kernels" / (stem + ".so"));
    REQUIRE(table.size() == 12);
    for (const auto& k : table) {
        CAPTURE(k.digest.hex());
        REQUIRE(by_digest.count(k.digest) == 1);
        CHECK((by_digest[k.digest] == k.fn));
    }

    // Every supported example op: its static kernel agrees with the generic one on random inputs, within
    // generated_tolerance().
    std::mt19937 rng(20240607);
    std::set<std::string> types;
    std::size_t checked = 0;
    for (const skc::LoadedOp& op : skc::read_op_info_dir(skc_test::example_ops_dir()).ops) {
        const std::string file = op.path.filename().string();
        CAPTURE(file);
        const skc::Digest d = skc::digest(skc::without_bin_fields(op.record));
        if (!skc_host::supported(op.record)) {
            CHECK(by_digest.count(d) == 0);
            continue;
        }
        REQUIRE(by_digest.count(d) == 1);
        const auto entry = std::find_if(table.begin(), table.end(), [&](const auto& k) { return k.digest == d; });
        REQUIRE(entry != table.end());
        CHECK(entry->op_type == op.record.op_type);
        types.insert(op.record.op_type);

        auto in = buffers(op.record.inputs, rng, true);
        auto out_static = buffers(op.record.outputs, rng, false);
        auto out_generic = buffers(op.record.outputs, rng, false);
        const auto in_p = pointers<const float>(in);
        by_digest[d](in_p.data(), pointers<float>(out_static).data());
        skc_host::run_generic(op.record, in_p.data(), pointers<float>(out_generic).data());
        double worst = 0.0;
        std::size_t differ = 0, elements = 0, unwritten = 0;
        for (std::size_t o = 0; o < out_static.size(); ++o) {
            REQUIRE(out_static[o].size() == out_generic[o].size());
            for (std::size_t e = 0; e < out_static[o].size(); ++e) {
                const float s = out_static[o][e], g = out_generic[o][e];
                unwritten += std::isfinite(s) ? 0 : 1;  // outputs start as NaN
                worst = std::max(
                    worst, std::abs(static_cast<double>(s) - g) / std::max(1.0, std::abs(static_cast<double>(g))));
                differ += std::memcmp(&s, &g, sizeof s) != 0 ? 1 : 0;
                ++elements;
            }
        }
        CHECK(elements > 0);
        CHECK_MESSAGE(unwritten == 0, unwritten << " output elements not written (or not finite)");
        const double bound = skc_host::generated_tolerance(*skc_host::analyze(op.record).plan);
        CHECK_MESSAGE(worst <= bound, differ << " of " << elements
                                             << " elements differ in their bits, max relative error " << worst
                                             << " (bound " << bound << ")");
        ++checked;
    }
    CHECK(checked == 13);  // 12 distinct kernels; one file is a duplicate
    CHECK(types == std::set<std::string>{"Add", "BatchMatMulV2", "ConcatD", "Gelu", "LayerNorm", "MatMulV2", "Mul",
                                         "SoftmaxV2", "Transpose"});

    // Uninstalled: no package folder, no index, nothing to load.
    CHECK(installer.uninstall(lib, stem, "host", false));
    CHECK_FALSE(fs::exists(base / stem));
    CHECK_FALSE(fs::exists(base / "config" / "dev0" / "binary_info_config.json"));
    CHECK(skc_host::load_installed_kernels(ctx).empty());
    CHECK(installer.list(lib, "host").empty());
}

TEST_CASE("host_op_compiler: --opt-level, -l debug and -l error") {
    TempDir tmp;
    copy_examples(tmp / "ops", {"Add_float_ND_32_64_9.json", "ReduceSum_float_ND_32_64_11.json"});

    SUBCASE("-l debug shows the compiler command lines with -O0") {
        const Run r = run_tool({"-p", (tmp / "ops").string(), "-v", "dev0", "-j", "1", "-o", (tmp / "out").string(),
                                "-l", "debug", "--opt-level", "0", "-f", "true"},
                               {"CXX=c++"});
        INFO(r.out << r.err);
        REQUIRE(r.status == 0);
        CHECK(r.err.empty());
        CHECK(r.out.find("$ c++ -std=c++17 -O0 -fPIC -ffp-contract=fast -march=" + skc_host::host_target().march +
                         " -c -o ") != std::string::npos);
        CHECK(r.out.find("$ c++ -shared -fPIC -o ") != std::string::npos);
        CHECK(r.out.find("$ makeself --quiet --nox11 ") != std::string::npos);
        CHECK(r.out.find("skipped ReduceSum_float_ND_32_64_11.json: ReduceSum: ") != std::string::npos);
        CHECK(r.out.find("[2/2] compiled ") != std::string::npos);
        CHECK(names_in(tmp / "out").size() == 1);
    }
    SUBCASE("-l error prints nothing but the progress lines on success") {
        const Run r = run_tool({"-p", (tmp / "ops").string(), "-v", "dev0", "-j", "4", "-o", (tmp / "out").string(),
                                "-l", "error", "--opt-level=1"});
        REQUIRE(r.status == 0);
        CHECK(r.out ==
              "skc-progress: 0/2\nskc-progress: 1/2 ReduceSum_float_ND_32_64_11.json\n"
              "skc-progress: 2/2 Add_float_ND_32_64_9.json\n");
        CHECK(r.err.empty());
        const std::vector<std::string> left = names_in(tmp / "out");
        REQUIRE(left.size() == 1);
        CHECK(left[0].rfind("static_kernel_", 0) == 0);
    }
}

TEST_CASE("host_op_compiler: bad command lines exit 2 with the message and the usage") {
    TempDir tmp;
    const std::string ops = skc_test::example_ops_dir().string(), out = (tmp / "out").string();
    check_usage_error(run_tool({"-v", "dev0", "-j", "1", "-o", out}), "missing -p <json_dir>");
    check_usage_error(run_tool({"-p", ops, "-j", "1", "-o", out}), "missing -v <device>");
    check_usage_error(run_tool({"-p", ops, "-v", "dev0", "-o", out}), "missing -j <jobs>");
    check_usage_error(run_tool({"-p", ops, "-v", "dev0", "-j", "1"}), "missing -o <output_dir>");
    check_usage_error(run_tool({"-p", ops, "-v", "dev0", "-j", "1", "-o", out, "--fast"}), "unknown option '--fast'");
    check_usage_error(run_tool({"-p", ops, "-v", "dev0", "-j", "1", "-o", out, "extra"}), "unknown option 'extra'");
    check_usage_error(run_tool({"-p", ops, "-v", "dev0", "-j", "0", "-o", out}),
                      "-j: \"0\" is not a positive integer (1 to 1024)");
    check_usage_error(run_tool({"-p", ops, "-v", "dev0", "-j", "-3", "-o", out}),
                      "-j: \"-3\" is not a positive integer (1 to 1024)");
    check_usage_error(run_tool({"-p", ops, "-v", "dev0", "-j", "2x", "-o", out}),
                      "-j: \"2x\" is not a positive integer (1 to 1024)");
    check_usage_error(
        run_tool({"-p", ops, "-v", "../dev", "-j", "1", "-o", out}),
        "-v: device name \"../dev\" is not accepted: use letters, digits, '_', '-', '.', not starting with '.'");
    check_usage_error(
        run_tool({"-p", ops, "-v", "a b", "-j", "1", "-o", out}),
        "-v: device name \"a b\" is not accepted: use letters, digits, '_', '-', '.', not starting with '.'");
    check_usage_error(run_tool({"-p", ops, "-v", "dev0", "-j", "1", "-o", out, "-l", "loud"}),
                      "-l: \"loud\" is not one of debug, info, warning, error");
    check_usage_error(run_tool({"-p", ops, "-v", "dev0", "-j", "1", "-o", out, "--opt-level", "4"}),
                      "--opt-level: \"4\" is not 0, 1, 2 or 3");
    check_usage_error(run_tool({"-p", ops, "-v", "dev0", "-j", "1", "-o", out, "-f", "yes"}),
                      "-f: \"yes\" is not true or false");
    check_usage_error(run_tool({"-p", ops, "-p", ops, "-v", "dev0", "-j", "1", "-o", out}), "option -p is given twice");
    check_usage_error(run_tool({"-p", ops, "-v", "dev0", "-j", "1", "-o"}), "option -o needs a value");
    CHECK_FALSE(fs::exists(tmp / "out"));  // nothing was created
}

TEST_CASE("host_op_compiler: bad input") {
    TempDir tmp;
    const std::string out = (tmp / "out").string();

    SUBCASE("a folder that cannot be read: exit 2 with the reader's message") {
        const fs::path missing = tmp / "no-such-folder";
        std::string expected;
        try {
            (void)skc::read_op_info_dir(missing);
        } catch (const skc::Error& e) {
            expected = e.what();
        }
        REQUIRE(!expected.empty());
        const Run r = run_tool({"-p", missing.string(), "-v", "dev0", "-j", "1", "-o", out});
        CHECK(r.status == 2);
        CHECK(r.err == "host_op_compiler: " + expected + "\n");
        CHECK(r.err.find(missing.string()) != std::string::npos);
    }
    SUBCASE("an invalid op info file: exit 2, the message names the file and the JSON path") {
        copy_examples(tmp / "ops", {"Add_float_ND_32_64_9.json"});
        const fs::path bad = tmp / "ops" / "Bad_float_ND_1_0.json";
        spit(bad,
             R"({"op_type": "Add", "inputs": [{"dtype": "float", "shape": [2, -1], "format": "ND"}], "outputs": []})");
        std::string expected;
        try {
            (void)skc::read_op_info(bad);
        } catch (const skc::Error& e) {
            expected = e.what();
        }
        REQUIRE(expected.rfind(bad.string() + ": inputs[0]", 0) == 0);
        const Run r = run_tool({"-p", (tmp / "ops").string(), "-v", "dev0", "-j", "1", "-o", out});
        CHECK(r.status == 2);
        CHECK(r.out.empty());
        CHECK(r.err == "host_op_compiler: " + expected + "\n");
        CHECK_FALSE(fs::exists(out));
    }
    SUBCASE("not JSON at all") {
        fs::create_directories(tmp / "ops");
        spit(tmp / "ops" / "x.json", "{not json");
        const Run r = run_tool({"-p", (tmp / "ops").string(), "-v", "dev0", "-j", "1", "-o", out});
        CHECK(r.status == 2);
        CHECK(r.err.rfind("host_op_compiler: " + (tmp / "ops" / "x.json").string() + ": ", 0) == 0);
    }
    SUBCASE("an empty folder: nothing to compile, exit 1") {
        fs::create_directories(tmp / "ops");
        const Run r = run_tool({"-p", (tmp / "ops").string(), "-v", "dev0", "-j", "1", "-o", out});
        CHECK(r.status == 1);
        CHECK(r.out.empty());
        CHECK(r.err == "host_op_compiler: nothing to compile in " + (tmp / "ops").string() +
                           ": 0 op info file(s), 0 unsupported by the host kernels\n");
        CHECK_FALSE(fs::exists(out));
    }
    SUBCASE("only unsupported ops: listed, then nothing to compile, exit 1") {
        copy_examples(tmp / "ops", {"GatherV2_float_ND_1000_64_13.json", "ReduceSum_float_ND_32_64_11.json"});
        const Run r = run_tool({"-p", (tmp / "ops").string(), "-v", "dev0", "-j", "1", "-o", out});
        CHECK(r.status == 1);
        CHECK(r.out.find("skipped GatherV2_float_ND_1000_64_13.json: GatherV2: op type GatherV2 is not supported") ==
              0);
        CHECK(r.out.find("\nskipped ReduceSum_float_ND_32_64_11.json: ReduceSum: op type ReduceSum is not supported") !=
              std::string::npos);
        CHECK(r.err == "host_op_compiler: nothing to compile in " + (tmp / "ops").string() +
                           ": 2 op info file(s), 2 unsupported by the host kernels\n");
        CHECK_FALSE(fs::exists(out));
    }
}

TEST_CASE("host_op_compiler: a failing C++ compiler or makeself exits 1, quotes the output and leaves nothing") {
    TempDir tmp;
    copy_examples(tmp / "ops", {"Add_float_ND_32_64_9.json"});
    const fs::path op_file = tmp / "ops" / "Add_float_ND_32_64_9.json";
    const std::string symbol = "skc_k_" + skc::digest(skc::read_op_info(op_file)).hex();
    const fs::path out = tmp / "out";

    SUBCASE("a compiler script that prints and exits 1") {
        const fs::path script = tmp / "bad-cxx";
        spit(script, "#!/bin/sh\nfor a; do last=$a; done\necho \"bad-cxx: cannot compile $last\" >&2\nexit 1\n");
        fs::permissions(script, fs::perms::owner_all);
        const Run r = run_tool({"-p", (tmp / "ops").string(), "-v", "dev0", "-j", "1", "-o", out.string()},
                               {"CXX=" + script.string()});
        CHECK(r.status == 1);
        const std::string head = "host_op_compiler: compiling " + op_file.string() +
                                 " (Add [32,64] [32,64] -> [32,64]) failed: " + script.string() +
                                 " -std=c++17 -O3 -fPIC -ffp-contract=fast -march=" + skc_host::host_target().march +
                                 " -c -o ";
        INFO(r.err);
        CHECK(r.err.rfind(head, 0) == 0);
        const std::string tail = "/src/" + symbol + ".cpp exited with status 1. Its output:\nbad-cxx: cannot compile ";
        CHECK(r.err.find(tail) != std::string::npos);
        // Every translation unit is compiled after a failure too (so that failed_ops.json can name
        // every op that fails); the entry table failed as well, so no op is named.
        CHECK(r.err.find("\ncompiling the entry table failed: " + script.string()) != std::string::npos);
        CHECK(names_in(out).empty());  // no package, no work folder, no failed_ops.json
    }
    SUBCASE("a compiler that fails on one kernel: the others compile, and failed_ops.json names its op info file") {
        copy_examples(tmp / "ops", {"MatMulV2_float_ND_32_64_0.json"});
        const fs::path script = tmp / "picky-cxx";
        spit(script, "#!/bin/sh\ncase \"$*\" in *" + symbol +
                         "*) echo \"picky-cxx: no kernel for this shape\" >&2; exit 1 ;; esac\nexec c++ \"$@\"\n");
        fs::permissions(script, fs::perms::owner_all);
        const Run r = run_tool({"-p", (tmp / "ops").string(), "-v", "dev0", "-j", "1", "-o", out.string()},
                               {"CXX=" + script.string()});
        INFO(r.err);
        CHECK(r.status == 1);
        CHECK(r.out.find("compiled MatMulV2") != std::string::npos);  // compiled after the failure
        CHECK(r.out.find("compiled entry table") != std::string::npos);
        CHECK(names_in(out) == std::vector<std::string>{"failed_ops.json"});
        const skc::Value doc = skc::parse_json(skc_test::slurp(out / "failed_ops.json"));
        CHECK(doc.find("format")->as_string() == "skc-failed-ops/1");
        const skc::Array& ops = doc.find("ops")->as_array();
        REQUIRE(ops.size() == 1);
        CHECK(ops[0].find("file")->as_string() == "Add_float_ND_32_64_9.json");
        CHECK(ops[0].find("message")->as_string().find("picky-cxx: no kernel for this shape") != std::string::npos);
    }
    SUBCASE("CXX=false") {
        const Run r =
            run_tool({"-p", (tmp / "ops").string(), "-v", "dev0", "-j", "2", "-o", out.string()}, {"CXX=false"});
        CHECK(r.status == 1);
        CHECK(r.err.rfind("host_op_compiler: compiling " + op_file.string() +
                              " (Add [32,64] [32,64] -> [32,64]) failed: false -std=c++17 -O3 ",
                          0) == 0);
        CHECK(r.err.find(" exited with status 1. Its output:\n(no output)\n") != std::string::npos);
        // -j 2: the entry table was compiled at the same time and failed too; reported second.
        CHECK(r.err.find("\ncompiling the entry table failed: false -std=c++17 -O3 ") != std::string::npos);
        CHECK(names_in(out).empty());
    }
    SUBCASE("a compiler that does not exist") {
        const Run r = run_tool({"-p", (tmp / "ops").string(), "-v", "dev0", "-j", "1", "-o", out.string()},
                               {"CXX=skc-no-such-compiler"});
        CHECK(r.status == 1);
        CHECK(r.err == "host_op_compiler: compiling " + op_file.string() +
                           " (Add [32,64] [32,64] -> [32,64]): cannot start \"skc-no-such-compiler\": No such file or "
                           "directory\n");
        CHECK(names_in(out).empty());
    }
    SUBCASE("makeself fails") {
        // A makeself first in PATH that prints and exits 2; the real compiler runs.
        fs::create_directories(tmp / "bin");
        spit(tmp / "bin" / "makeself", "#!/bin/sh\necho \"makeself: no space left on device\" >&2\nexit 2\n");
        fs::permissions(tmp / "bin" / "makeself", fs::perms::owner_all);
        const char* path = std::getenv("PATH");
        const Run r = run_tool({"-p", (tmp / "ops").string(), "-v", "dev0", "-j", "1", "-o", out.string()},
                               {"PATH=" + (tmp / "bin").string() + ":" + (path != nullptr ? path : "/usr/bin:/bin")});
        INFO(r.err);
        CHECK(r.status == 1);
        CHECK(r.out.find("[2/2] compiled ") != std::string::npos);
        CHECK(r.err.rfind("host_op_compiler: packing static_kernel_", 0) == 0);
        CHECK(r.err.find(".run failed: makeself --quiet --nox11 ") != std::string::npos);
        CHECK(r.err.find(" 'skc host kernels' ./setup.sh exited with status 2. Its output:\nmakeself: no space left on "
                         "device\n") != std::string::npos);
        CHECK(names_in(out).empty());
    }
}

TEST_CASE("host_op_compiler: SIGTERM stops the compilers, removes the work folder and ends by the signal") {
    TempDir tmp, io;
    const fs::path out = tmp / "out";
    const skc_test::Started st = skc_test::start_program(
        tool, {}, {"-p", skc_test::example_ops_dir().string(), "-v", "dev0", "-j", "1", "-o", out.string()}, {},
        io.path());
    // Wait until the first kernel is compiled (12 more compiles to go at -j 1), then stop it.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (slurp(io / "stdout").find("[1/13] compiled ") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    REQUIRE(::kill(st.pid, SIGTERM) == 0);
    const Run r = skc_test::finish(st);
    INFO(r.out << r.err);
    CHECK(r.status == 128 + SIGTERM);
    CHECK(slurp(io / "stderr") ==
          "host_op_compiler: stopped by " + skc::detail::signal_name(SIGTERM) + "; no package written\n");
    CHECK(slurp(io / "stdout").find("[13/13]") == std::string::npos);
    CHECK(names_in(out).empty());
}

TEST_CASE("load_installed_kernels: absent, malformed and unloadable indexes") {
    TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path base = lib / "static_kernel" / "host";
    const fs::path index = base / "config" / "dev0" / "binary_info_config.json";
    const skc::ReselectContext ctx{lib, "host", "dev0", "pkg"};
    const std::string digest = "0123456789abcdef0123456789abcdef";

    // A real shared library to point the index at: the C math library this test is linked with.
    Dl_info info{};
    double (*cos_fn)(double) = &std::cos;
    REQUIRE(::dladdr(reinterpret_cast<void*>(cos_fn), &info) != 0);
    REQUIRE(info.dli_fname != nullptr);
    fs::create_directories(base / "pkg" / "kernels");
    fs::copy_file(info.dli_fname, base / "pkg" / "kernels" / "k.so");
    spit(base / "pkg" / "kernels" / "garbage.so", "not a shared object\n");
    fs::create_directories(index.parent_path());

    auto with_kernels = [&](const std::string& kernels) {
        spit(index,
             R"({"format": "skc-installed-kernels", "version": 1, "backend": "host", "device": "dev0", "kernels": )" +
                 kernels + "}\n");
    };
    auto entry = [&](const std::string& file, const std::string& symbol) {
        return R"({")" + digest + R"(": {"package": "pkg", "file": ")" + file + R"(", "symbol": ")" + symbol +
               R"(", "op_type": "Add"}})";
    };
    auto error_of = [&]() -> skc::Error {
        try {
            (void)skc_host::load_installed_kernels(ctx);
        } catch (const skc::Error& e) {
            return e;
        }
        FAIL("no error");
        return skc::Error(skc::Errc::io_error, "");
    };

    SUBCASE("no index: no kernels") {
        CHECK(skc_host::load_installed_kernels(ctx).empty());
        CHECK(skc_host::load_installed_kernels(skc::ReselectContext{tmp / "nothing", "host", "dev0", ""}).empty());
    }
    SUBCASE("a good index pointing at a real library") {
        with_kernels(entry("pkg/kernels/k.so", "cos"));
        const auto k = skc_host::load_installed_kernels(ctx);
        REQUIRE(k.size() == 1);
        CHECK(k[0].first.hex() == digest);
        CHECK((k[0].second != nullptr));
        CHECK(skc_host::load_installed_kernels(ctx) == k);
    }
    SUBCASE("malformed indexes") {
        struct Case {
            std::string text, json_path, message;
        };
        const std::string head =
            R"({"format": "skc-installed-kernels", "version": 1, "backend": "host", "device": "dev0", "kernels": )";
        const std::vector<Case> cases{
            {"[]", "", "bad installed kernel index: not a JSON object"},
            {R"({"format": "skc-run-package", "version": 1})", "format",
             "bad installed kernel index: must be \"skc-installed-kernels\""},
            {R"({"format": "skc-installed-kernels", "version": 2})", "version",
             "bad installed kernel index: must be 1"},
            {R"({"format": "skc-installed-kernels", "version": 1, "backend": "npu", "device": "dev0", "kernels": {}})",
             "backend", "bad installed kernel index: must be \"host\""},
            {R"({"format": "skc-installed-kernels", "version": 1, "backend": "host", "device": "dev1", "kernels": {}})",
             "device", "bad installed kernel index: must be \"dev0\""},
            {head + "[]}", "kernels", "bad installed kernel index: must be an object"},
            {head + R"({"0123": {"file": "pkg/kernels/k.so", "symbol": "cos"}}})", "kernels.0123",
             "bad installed kernel index: key is not a 32-lower-case-hex digest"},
            {head + R"({"0123456789ABCDEF0123456789abcdef": {"file": "pkg/kernels/k.so", "symbol": "cos"}}})",
             "kernels.0123456789ABCDEF0123456789abcdef",
             "bad installed kernel index: key is not a 32-lower-case-hex digest"},
            {head + R"({")" + digest + R"(": "k.so"}})", "kernels." + digest,
             "bad installed kernel index: must be an object"},
            {head + R"({")" + digest + R"(": {"symbol": "cos"}}})", "kernels." + digest,
             "bad installed kernel index: missing \"file\""},
            {head + R"({")" + digest + R"(": {"file": "pkg/kernels/k.so", "symbol": ""}}})",
             "kernels." + digest + ".symbol", "bad installed kernel index: must be a non-empty string"},
            {head + R"({")" + digest + R"(": {"file": "../../k.so", "symbol": "cos"}}})", "kernels." + digest + ".file",
             "bad installed kernel index: \"../../k.so\" is not a relative path inside the op library"},
            {head + R"({")" + digest + R"(": {"file": "/usr/lib/k.so", "symbol": "cos"}}})",
             "kernels." + digest + ".file",
             "bad installed kernel index: \"/usr/lib/k.so\" is not a relative path inside the op library"},
        };
        for (const Case& c : cases) {
            CAPTURE(c.text);
            spit(index, c.text);
            const skc::Error e = error_of();
            CHECK(e.code() == skc::Errc::corrupt);
            CHECK(e.file() == index.string());
            CHECK(e.json_path() == c.json_path);
            CHECK(e.message() == c.message);
        }
        spit(index, "{\"format\": ");
        const skc::Error e = error_of();
        CHECK(e.code() == skc::Errc::invalid_json);
        CHECK(e.file() == index.string());
    }
    SUBCASE("a missing symbol") {
        with_kernels(entry("pkg/kernels/k.so", "skc_k_" + digest));
        const skc::Error e = error_of();
        CHECK(e.code() == skc::Errc::corrupt);
        CHECK(e.file() == (base / "pkg/kernels/k.so").string());
        CHECK(e.message() == "kernel symbol \"skc_k_" + digest + "\" (digest " + digest + ") not found in kernel file");
    }
    SUBCASE("a file that is not a shared object, or is missing") {
        with_kernels(entry("pkg/kernels/garbage.so", "cos"));
        skc::Error e = error_of();
        CHECK(e.code() == skc::Errc::io_error);
        CHECK(e.file() == (base / "pkg/kernels/garbage.so").string());
        CHECK(e.message().rfind("cannot load kernel file: ", 0) == 0);
        with_kernels(entry("pkg/kernels/gone.so", "cos"));
        e = error_of();
        CHECK(e.code() == skc::Errc::io_error);
        CHECK(e.file() == (base / "pkg/kernels/gone.so").string());
        CHECK(e.message().find("No such file or directory") != std::string::npos);
    }
    SUBCASE("a library without an entry table") {
        CHECK_THROWS_WITH_AS(
            (void)skc_host::read_entry_table(base / "pkg/kernels/k.so"),
            ((base / "pkg/kernels/k.so").string() +
             ": no kernel entry table (skc_host_kernel_table, skc_host_kernel_count) in kernel library")
                .c_str(),
            skc::Error);
    }
}

TEST_CASE(
    "host_op_compiler's progress lines reach ProcessInvoker's callback in order; the log keeps all of its output") {
    TempDir tmp;
    const std::set<std::string> names = {"Add_float_ND_32_64_9.json", "Gelu_float_ND_32_256_8.json",
                                         "MatMulV2_float_ND_32_64_1.json", "MatMulV2_float_ND_32_64_14.json",
                                         "ReduceSum_float_ND_32_64_11.json"};
    copy_examples(tmp / "ops", {names.begin(), names.end()});
    skc::ProcessInvoker inv(tool);
    skc::CompileRequest r;
    r.json_dir = tmp / "ops";
    r.device = "dev0";
    r.jobs = 3;
    r.output_dir = tmp / "out";
    std::vector<skc::ProgressLine> seen;
    r.on_progress = [&](std::size_t done, std::size_t total, std::string_view op) {
        seen.push_back({done, total, std::string(op)});
    };
    const skc::CompileResult res = inv.compile(r);
    check_progress(seen, names, {"ReduceSum_float_ND_32_64_11.json"});
    const std::string log = slurp(res.log);
    INFO(log);
    const std::vector<skc::ProgressLine> logged = progress_lines(log);
    REQUIRE(logged.size() == seen.size());
    for (std::size_t i = 0; i < seen.size(); ++i) CHECK(logged[i].op == seen[i].op);
    CHECK(log.rfind(
              "5 op info files in " + (tmp / "ops").string() + ": 3 kernels to compile, 1 unsupported, 1 duplicate\n",
              0) == 0);
    CHECK(log.find("[4/4] compiled ") != std::string::npos);
    CHECK(log.find("compiled 3 kernels (1 duplicate op info files compiled once), skipped 1 unsupported ops; package " +
                   res.package.string() + "\n") != std::string::npos);
}

TEST_CASE(
    "StaticKernelCompiler forwards host_op_compiler's progress: the op info files it was given, in order, with the "
    "time") {
    TempDir tmp;
    skc::process_compiled().clear();
    std::vector<skc::OpRecord> ops;
    for (const char* n : {"Add_float_ND_32_64_9.json", "Gelu_float_ND_32_256_8.json", "MatMulV2_float_ND_32_64_1.json"})
        ops.push_back(skc::read_op_info(skc_test::example_ops_dir() / n));
    skc::Options o;
    o.static_kernel_compile = true;
    o.base_dir = tmp.path().string();
    o.jobs = 2;
    skc::CompilerSettings s;
    s.toolchain_version = "1.0";
    s.device = "dev0";
    s.log = skc::null_log();
    s.cache.log = skc::null_log();
    std::vector<skc::CompileProgress> seen;
    s.progress = [&](const skc::CompileProgress& p) { seen.push_back(p); };
    skc::InMemoryCompiler<skc::ProcessInvoker> compiler(skc::ProcessInvoker(tool), o, s);
    const skc::CompileReport rep = compiler.compile(ops);
    REQUIRE(rep.outcome == skc::CompileOutcome::compiled);

    // The names the compiler saw: those in the run folder's selected folder.
    std::set<std::string> names;
    for (const auto& d : fs::directory_iterator(rep.run_dir))
        if (d.path().filename().string().ends_with("_opcompile_selected"))
            for (const auto& f : fs::directory_iterator(d.path())) names.insert(f.path().filename().string());
    REQUIRE(names.size() == 3);
    REQUIRE(seen.size() == 5);
    CHECK(seen[0].phase == skc::CompileProgress::Phase::lookup);
    std::set<std::string> reported;
    for (std::size_t i = 1; i < seen.size(); ++i) {
        CAPTURE(i);
        CHECK(seen[i].phase == skc::CompileProgress::Phase::compiling);
        CHECK(seen[i].done == i - 1);
        CHECK(seen[i].total == 3);
        CHECK(seen[i].key == rep.key);
        CHECK(seen[i].elapsed >= seen[i - 1].elapsed);
        if (i > 1) CHECK(reported.insert(seen[i].op).second);
    }
    CHECK(seen[1].op.empty());
    CHECK(reported == names);
    CHECK(seen.back().elapsed <= rep.stage("compile"));
}

namespace {

/// Sets an environment variable for the scope (the compiler's children inherit it), then puts back
/// what was there.
class ScopedEnv {
public:
    ScopedEnv(std::string name, const std::string& value) : name_(std::move(name)) {
        if (const char* old = std::getenv(name_.c_str())) old_ = old;
        ::setenv(name_.c_str(), value.c_str(), 1);
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;
    ~ScopedEnv() {
        if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
        else ::unsetenv(name_.c_str());
    }

private:
    std::string name_;
    std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("host kernels: the instruction set is part of the key; a package for another one is a miss") {
#if defined(__x86_64__)
    const auto f = skc_host::detail::cpu_features();
    using skc_host::detail::has;
    if (!has(f, "avx512f") || !has(f, "avx512bw") || !has(f, "avx512vl") || !has(f, "avx512dq")) {
        MESSAGE("skipped: this CPU cannot run x86-64-v4 code");
        return;
    }
#else
    MESSAGE("skipped: x86-64 only");
    return;
#endif
    TempDir tmp;
    std::vector<skc::OpRecord> ops;
    for (const char* n : {"Gelu_float_ND_32_256_8.json", "MatMulV2_float_ND_32_64_1.json"})
        ops.push_back(skc::read_op_info(skc_test::example_ops_dir() / n));
    skc::Options o;
    o.static_kernel_compile = true;
    o.base_dir = tmp.path().string();
    o.jobs = 2;
    struct Built {
        std::string version;
        skc::CompileReport report;
        bool zmm = false;  // the installed library uses AVX-512 registers
    };
    auto compile_for = [&](const std::string& isa) {
        const ScopedEnv env("SKC_HOST_ISA", isa);
        skc::process_compiled().clear();
        skc::CompilerSettings s;
        s.toolchain_version = skc_host::toolchain_version(tool);
        s.device = "dev0";
        s.log = skc::null_log();
        s.cache.log = skc::null_log();
        s.op_library = tmp / "lib";
        skc::StaticKernelCompiler<skc::ProcessInvoker> compiler(skc::ProcessInvoker(tool), o, s);  // the file cache
        Built r{s.toolchain_version, compiler.compile(ops), false};
        // The package's library, installed into an op library of its own.
        TempDir dis;
        skc::RunPackageInstaller installer;
        const skc::Installation inst = installer.install(r.report.package, dis / "lib", skc::InstallOptions{});
        std::optional<fs::path> so;
        for (const auto& e : fs::recursive_directory_iterator(dis / "lib"))
            if (e.path().extension() == ".so") so = e.path();
        REQUIRE(so.has_value());
        const int rc = std::system(("objdump -d '" + so->string() + "' > '" + (dis / "d.txt").string() + "'").c_str());
        REQUIRE(rc == 0);
        r.zmm = slurp(dis / "d.txt").find("%zmm") != std::string::npos;
        return r;
    };
    const Built v4 = compile_for("x86-64-v4");
    CHECK(v4.report.outcome == skc::CompileOutcome::compiled);
    CHECK(v4.version.ends_with("-x86-64-v4"));
    CHECK(v4.zmm);
    CHECK(compile_for("x86-64-v4").report.outcome == skc::CompileOutcome::hit);

    // Another instruction set: another toolchain version and key, so a miss, compiled again, and a
    // package without AVX-512 instructions.
    const Built v3 = compile_for("x86-64-v3");
    CHECK(v3.version.ends_with("-x86-64-v3"));
    CHECK(v3.version.substr(0, v3.version.size() - 3) == v4.version.substr(0, v4.version.size() - 3));
    CHECK(v3.report.key != v4.report.key);
    CHECK(v3.report.outcome == skc::CompileOutcome::compiled);
    CHECK_FALSE(v3.zmm);
    CHECK(compile_for("x86-64-v4").report.outcome == skc::CompileOutcome::hit);  // both kept

    // An unknown level: the accepted names; host_op_compiler exits 2 (bad input) and writes nothing.
    {
        const ScopedEnv env("SKC_HOST_ISA", "avx9000");
        CHECK_THROWS_WITH(skc_host::host_target(),
                          "SKC_HOST_ISA=\"avx9000\": expected native, x86-64, x86-64-v2, x86-64-v3 or x86-64-v4");
    }
    copy_examples(tmp / "ops", {"Add_float_ND_32_64_9.json"});
    const Run r = run_tool({"-p", (tmp / "ops").string(), "-v", "dev0", "-j", "1", "-o", (tmp / "out").string()},
                           {"SKC_HOST_ISA=avx9000"});
    CHECK(r.status == 2);
    CHECK(r.err ==
          "host_op_compiler: SKC_HOST_ISA=\"avx9000\": expected native, x86-64, x86-64-v2, x86-64-v3 or x86-64-v4\n");
    CHECK(r.out.empty());
    CHECK_FALSE(fs::exists(tmp / "out"));
}

}  // namespace examples_host_op_compiler_test
