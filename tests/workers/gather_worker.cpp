// gather_worker: one rank of a node, driven by tests/skc/policy/gather_test.cpp, which starts
// several of these on one base directory and kills some of them at chosen moments. Not a doctest
// program.
//
//   gather_worker --base DIR --ops DIR --lib DIR --compiler PATH --report FILE
//                 [--timeout SECONDS] [--compile-timeout SECONDS]
//
// The rank is taken from the environment (LOCAL_WORLD_SIZE, LOCAL_RANK, SKC_RUN_ID or
// TORCHELASTIC_RUN_ID) with LocalFsGather::from_env, before anything is created under --base. The
// op info files of --ops are "recorded" (StaticKernelCompiler::compile(const std::vector<OpRecord>&))
// by StaticKernelCompiler<ProcessInvoker, FilesystemStorage, FileLock, RunPackageInstaller,
// RecordingReselect, LocalFsGather>: --compiler is the kernel compiler (a script), --lib the op
// library, --timeout the gather timeout (default 3 s), --compile-timeout the compiler's (30 s).
//
// Hooks (environment): SKC_TEST_DIE_BEFORE_COMPILE=1 makes the worker _exit(9) after building the
// compiler and before compile(): a rank that dies before it claims its local rank.
// SKC_TEST_BLOCK_FILES=1 plants a file where the rank's `<pid>_opcompile` folder goes when it starts
// waiting for the others, so that its op info files are never written. Its run folder is told by
// being the only one made since the worker started: the test starts such a rank before the others.
//
// The report (--report, written with one rename so the test never reads half of it):
//   success: {"report": CompileReport::to_value(), "reselect": {"calls", "index_existed",
//             "index_names_package", "package"}, "pid"}
//   error:   {"error": {"code", "what", "message", "option"}, "pid"}
// Exit status: 0 success, 2 invalid_option, 3 timeout, 4 peer_failed, 5 compile_failed, 1 another
// skc::Error, 6 another exception, 7 usage, 9 the die-before-compile hook.
//
// The laws mode, driven by tests/skc/policy/gather_law_test.cpp, runs the GatherPolicy laws
// (tests/support/gather_laws.hpp) on this rank's LocalFsGather (from the environment, as above):
//
//   gather_worker laws --base DIR --work DIR --token TEXT --report FILE [--world N] [--timeout SECONDS]
//
// --base is the base directory the node's ranks share, --work this rank's own folder, --token the
// same on every rank, --world the node's size when the caller knows it, --timeout the gather
// timeout (default 30 s). The report is GatherLawResult::to_value(), or the error report above when
// the laws could not run. Exit status: 0 the laws hold, 8 some are broken (the report lists them),
// otherwise as above.
#include <skc/skc.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "../support/gather_laws.hpp"

namespace {

namespace fs = std::filesystem;

[[noreturn]] void usage(const std::string& message) {
    std::fprintf(stderr, "gather_worker: %s\n", message.c_str());
    std::exit(7);
}

struct Args {
    fs::path base, ops, lib, compiler, report;
    long timeout_s = 3;
    long compile_timeout_s = 30;
};

/// v as a whole number of up to 6 digits; else the usage error "<flag> needs a number of <what>".
long to_number(const std::string& flag, const std::string& v, const char* what) {
    if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos)
        usage(flag + " needs a number of " + what + ", got \"" + v + "\"");
    return std::stol(v);
}

/// Calls option(flag, value) for each `--flag value` pair of argv from argv[first] on.
template <class Option>
void for_each_option(int argc, char** argv, int first, Option&& option) {
    for (int i = first; i < argc; ++i) {
        const std::string flag = argv[i];
        if (i + 1 >= argc) usage("missing value after " + flag);
        option(flag, std::string(argv[++i]));
    }
}

Args parse(int argc, char** argv) {
    Args a;
    for_each_option(argc, argv, 1, [&](const std::string& flag, const std::string& v) {
        if (flag == "--base") a.base = v;
        else if (flag == "--ops") a.ops = v;
        else if (flag == "--lib") a.lib = v;
        else if (flag == "--compiler") a.compiler = v;
        else if (flag == "--report") a.report = v;
        else if (flag == "--timeout") a.timeout_s = to_number(flag, v, "seconds");
        else if (flag == "--compile-timeout") a.compile_timeout_s = to_number(flag, v, "seconds");
        else usage("unknown option " + flag);
    });
    if (a.base.empty() || a.ops.empty() || a.lib.empty() || a.compiler.empty() || a.report.empty())
        usage("--base, --ops, --lib, --compiler and --report are required");
    return a;
}

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Records each reselect and what the op library looked like at that moment: the hook must run
/// after the node's one install, so the global index must exist and name the installed package.
struct RecordingReselect {
    int calls = 0;
    bool index_existed = false;
    bool index_names_package = false;
    std::string package;

    void reselect(const skc::ReselectContext& c) {
        ++calls;
        package = c.package;
        const fs::path index =
            c.op_library / "static_kernel" / c.backend / "config" / c.device / "binary_info_config.json";
        index_existed = fs::is_regular_file(index);
        index_names_package = false;
        if (!index_existed) return;
        const skc::Value v = skc::parse_json(slurp(index));
        if (const skc::Value* k = v.find("kernels"); k && k->is_object())
            for (const skc::Member& m : k->as_object())
                if (const skc::Value* p = m.value.find("package"); p && p->is_string() && p->as_string() == c.package)
                    index_names_package = true;
    }
};

static_assert(skc::ReselectHook<RecordingReselect>);

using Compiler = skc::StaticKernelCompiler<skc::ProcessInvoker, skc::FilesystemStorage, skc::FileLock,
                                           skc::RunPackageInstaller, RecordingReselect, skc::LocalFsGather>;

/// Writes `v` to `path` through a temporary file and a rename.
void write_report(const fs::path& path, const skc::Value& v) {
    const fs::path tmp = path.string() + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << skc::dump_json(v, 2) << '\n';
    }
    fs::rename(tmp, path);
}

skc::Value with_pid(skc::Object o) {
    o.push_back({"pid", skc::Value(static_cast<std::int64_t>(::getpid()))});
    return skc::Value(std::move(o));
}

int status_of(skc::Errc c) {
    switch (c) {
    case skc::Errc::invalid_option: return 2;
    case skc::Errc::timeout: return 3;
    case skc::Errc::peer_failed: return 4;
    case skc::Errc::compile_failed: return 5;
    default: return 1;
    }
}

int run(const Args& a) {
    // First the rank, so that a misconfigured job writes nothing under the base.
    skc::LocalFsGather gather = skc::LocalFsGather::from_env(std::chrono::seconds(a.timeout_s));

    std::vector<skc::OpRecord> ops;
    for (skc::LoadedOp& op : skc::read_op_info_dir(a.ops).ops) ops.push_back(std::move(op.record));

    skc::Options o;
    o.static_kernel_compile = true;
    o.base_dir = a.base.string();
    o.jobs = 1;
    o.compile_timeout = std::chrono::seconds(a.compile_timeout_s);
    skc::CompilerSettings s;
    s.toolchain_version = "1.0";
    s.device = "dev0";
    s.op_library = a.lib;
    s.install_timeout = std::chrono::seconds(30);
    s.log = skc::null_log();
    const fs::path outputs = skc::Layout(a.base).outputs();
    std::set<fs::path> runs_before;
    bool planted = false;
    if (const char* block = std::getenv("SKC_TEST_BLOCK_FILES"); block && std::string(block) == "1") {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(outputs, ec)) runs_before.insert(e.path());
        s.progress = [&, outputs](const skc::CompileProgress& p) {
            if (planted || p.phase != skc::CompileProgress::Phase::waiting) return;
            std::error_code dec;
            for (const auto& e : fs::directory_iterator(outputs, dec)) {
                const std::string n = e.path().filename().string();
                if (runs_before.count(e.path()) || n == "rendezvous" || n == "static_kernel_cache") continue;
                std::ofstream(e.path() / (std::to_string(::getpid()) + "_opcompile")) << "in the way\n";
                planted = true;
            }
        };
    }

    Compiler compiler(skc::ProcessInvoker(a.compiler), std::move(o), std::move(s), skc::RunPackageInstaller(),
                      RecordingReselect(), std::move(gather));
    if (const char* die = std::getenv("SKC_TEST_DIE_BEFORE_COMPILE"); die && std::string(die) == "1") {
        std::fflush(nullptr);
        ::_exit(9);
    }
    const skc::CompileReport rep = compiler.compile(ops);
    const RecordingReselect& r = compiler.reselect_hook();
    write_report(
        a.report,
        with_pid({{"report", rep.to_value()},
                  {"reselect", skc::Value(skc::Object{{"calls", skc::Value(r.calls)},
                                                      {"index_existed", skc::Value(r.index_existed)},
                                                      {"index_names_package", skc::Value(r.index_names_package)},
                                                      {"package", skc::Value(r.package)}})}}));
    return 0;
}

struct LawArgs {
    fs::path base, work, report;
    std::string token;
    std::size_t world = 0;
    long timeout_s = 30;
};

LawArgs parse_laws(int argc, char** argv) {
    LawArgs a;
    for_each_option(argc, argv, 2, [&](const std::string& flag, const std::string& v) {
        if (flag == "--base") a.base = v;
        else if (flag == "--work") a.work = v;
        else if (flag == "--token") a.token = v;
        else if (flag == "--report") a.report = v;
        else if (flag == "--world") a.world = static_cast<std::size_t>(to_number(flag, v, "ranks"));
        else if (flag == "--timeout") a.timeout_s = to_number(flag, v, "seconds");
        else usage("unknown option " + flag);
    });
    if (a.base.empty() || a.work.empty() || a.token.empty() || a.report.empty())
        usage("laws: --base, --work, --token and --report are required");
    return a;
}

int run_laws(const LawArgs& a) {
    skc::LocalFsGather gather = skc::LocalFsGather::from_env(std::chrono::seconds(a.timeout_s));
    skc_test::GatherLawSetup setup{a.base, a.work, a.token, a.world, std::chrono::seconds(a.timeout_s)};
    const skc_test::GatherLawResult r = skc_test::check_gather_laws(gather, setup);
    write_report(a.report, r.to_value());
    if (!r.ok())
        std::fprintf(stderr, "gather_worker %ld: broken laws:\n%s", static_cast<long>(::getpid()), r.text().c_str());
    return r.ok() ? 0 : 8;
}

}  // namespace

int main(int argc, char** argv) {
    const bool laws = argc > 1 && std::string(argv[1]) == "laws";
    const LawArgs la = laws ? parse_laws(argc, argv) : LawArgs{};
    Args a;
    if (laws) a.report = la.report;  // where an error that stops the laws is reported
    else a = parse(argc, argv);
    try {
        return laws ? run_laws(la) : run(a);
    } catch (const skc::Error& e) {
        write_report(
            a.report,
            with_pid({{"error", skc::Value(skc::Object{{"code", skc::Value(std::string(skc::to_string(e.code())))},
                                                       {"what", skc::Value(std::string(e.what()))},
                                                       {"message", skc::Value(e.message())},
                                                       {"option", skc::Value(e.option())}})}}));
        std::fprintf(stderr, "gather_worker %ld: %s: %s\n", static_cast<long>(::getpid()),
                     std::string(skc::to_string(e.code())).c_str(), e.what());
        return status_of(e.code());
    } catch (const std::exception& e) {
        write_report(a.report,
                     with_pid({{"error", skc::Value(skc::Object{{"code", skc::Value("exception")},
                                                                {"what", skc::Value(std::string(e.what()))},
                                                                {"message", skc::Value(std::string(e.what()))},
                                                                {"option", skc::Value("")}})}}));
        std::fprintf(stderr, "gather_worker %ld: %s\n", static_cast<long>(::getpid()), e.what());
        return 6;
    }
}
