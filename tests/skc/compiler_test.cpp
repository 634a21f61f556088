// StaticKernelCompiler: the whole flow with every combination of the shipped policies, real
// makeself packages (built by the test's invoker) and a real op library.
#include <doctest/doctest.h>

#include <skc/compiler.hpp>

#include "compiler_fixtures.hpp"
#include "packing_compiler.hpp"
#include "run_packages.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace skc_compiler_test {

namespace {

namespace fs = std::filesystem;
using skc_test::slurp;
using skc_test::TempDir;

using skc_test::Inv;
using skc_test::many_ops;
using skc_test::PackingCompiler;

std::vector<skc::OpRecord> example_ops() {
    std::vector<skc::OpRecord> out;
    for (skc::LoadedOp& op : skc::read_op_info_dir(skc_test::example_ops_dir()).ops)
        out.push_back(std::move(op.record));
    return out;
}

using skc_test::options_for;
using skc_test::settings_for;

/// digest -> package stem in the op library's global index (empty when there is none).
std::map<std::string, std::string> installed_index(const fs::path& lib) {
    std::map<std::string, std::string> out;
    const fs::path index = lib / "static_kernel/host/config/dev0/binary_info_config.json";
    if (!fs::exists(index)) return out;
    const skc::Value v = skc::parse_json(slurp(index));
    for (const skc::Member& m : v.find("kernels")->as_object()) out[m.key] = m.value.find("package")->as_string();
    return out;
}

struct SeenReselect {
    std::vector<skc::ReselectContext>* seen = nullptr;
    std::vector<std::size_t>* index_sizes = nullptr;
    void reselect(const skc::ReselectContext& c) {
        seen->push_back(c);
        index_sizes->push_back(installed_index(c.op_library).size());
    }
};

// The configurations the library ships, named by what differs from the defaults.
using Defaults = skc::StaticKernelCompiler<Inv>;
using FsProcessLock = skc::StaticKernelCompiler<Inv, skc::FilesystemStorage, skc::ProcessLock>;
using MemFileLock = skc::StaticKernelCompiler<Inv, skc::MemoryStorage, skc::FileLock>;
using MemProcessLock = skc::StaticKernelCompiler<Inv, skc::MemoryStorage, skc::ProcessLock>;
using FsNoInstall = skc::StaticKernelCompiler<Inv, skc::FilesystemStorage, skc::FileLock, skc::NoInstall>;
using InMemory = skc::InMemoryCompiler<Inv>;

template <class C>
constexpr bool installs =
    std::is_same_v<std::remove_reference_t<decltype(std::declval<C&>().installer())>, skc::RunPackageInstaller>;

}  // namespace

TEST_CASE_TEMPLATE("compile, then the same ops again: the second run hits the cache and does not compile", C, Defaults,
                   FsProcessLock, MemFileLock, MemProcessLock, FsNoInstall, InMemory) {
    TempDir tmp;
    skc::process_compiled().clear();
    PackingCompiler pc;
    const std::vector<skc::OpRecord> ops = example_ops();
    C compiler(pc.invoker(), options_for(tmp.path()), settings_for(tmp / "lib"));

    const skc::CompileReport first = compiler.compile(ops);
    CHECK(first.outcome == skc::CompileOutcome::compiled);
    CHECK(pc.calls == 1);
    CHECK(first.key.size() == 32);
    CHECK(first.recorded == 14);
    CHECK(first.supported == 12);  // 15 files, two with the same content; all but ReduceSum and GatherV2
    CHECK(first.selected == 12);
    CHECK(fs::is_regular_file(first.package));
    CHECK(first.run_dir.parent_path() == tmp / "static_kernel_compile_outputs");
    REQUIRE(pc.requests.size() == 1);
    CHECK(pc.requests[0].json_dir == first.run_dir / (std::to_string(::getpid()) + "_opcompile_selected"));
    CHECK(pc.requests[0].output_dir == first.run_dir);
    CHECK(pc.requests[0].device == "dev0");
    CHECK(pc.requests[0].jobs == 2);
    for (const char* s : {"layout", "record", "select", "key", "cache", "compile"}) CHECK(first.stage(s).count() >= 0);
    CHECK(first.stages.size() == 8);  // layout, record, select, key, cache, compile, install, reselect

    // A new process would not remember what it compiled; this one must forget to look it up again.
    skc::process_compiled().clear();
    const skc::CompileReport second = compiler.compile(ops);
    CHECK(second.outcome == skc::CompileOutcome::hit);
    CHECK(second.cache_hit());
    CHECK(pc.calls == 1);
    CHECK(second.key == first.key);
    CHECK(second.run_dir != first.run_dir);
    CHECK(second.stage("compile").count() == 0);

    // Both runs installed the cache's copy: one package, held twice.
    CHECK(first.installed == first.key);
    CHECK(second.installed == first.key);
    if constexpr (installs<C>) {
        const std::map<std::string, std::string> index = installed_index(tmp / "lib");
        CHECK(index.size() == 12);
        for (const auto& [digest, stem] : index) CHECK(stem == first.key);
        CHECK(compiler.installations().size() == 2);
        CHECK(fs::is_directory(tmp / "lib/static_kernel/host" / first.key / "kernels"));
    } else {
        CHECK(compiler.installer().calls.size() == 2);
        CHECK(compiler.installer().calls[0].package == first.package);
        CHECK_FALSE(fs::exists(tmp / "lib"));
    }
}

TEST_CASE("the installs live as long as the compiler") {
    TempDir tmp;
    skc::process_compiled().clear();
    PackingCompiler pc;
    std::string key;
    {
        skc::StaticKernelCompiler<Inv> compiler(pc.invoker(), options_for(tmp.path()), settings_for(tmp / "lib"));
        key = compiler.compile(example_ops()).key;
        CHECK(installed_index(tmp / "lib").size() == 12);
    }
    CHECK(installed_index(tmp / "lib").empty());
    CHECK_FALSE(fs::exists(tmp / "lib/static_kernel/host" / key));
}

TEST_CASE("a persistent install stays after the compiler and the process (skc compile --op-library)") {
    TempDir tmp;
    skc::process_compiled().clear();
    PackingCompiler pc;
    skc::CompilerSettings s = settings_for(tmp / "lib");
    s.persistent_install = true;
    {
        skc::StaticKernelCompiler<Inv> compiler(pc.invoker(), options_for(tmp.path()), s);
        compiler.compile(example_ops());
    }
    CHECK(installed_index(tmp / "lib").size() == 12);
    skc::RunPackageInstaller inst;
    const auto listed = inst.list(tmp / "lib", "host");
    REQUIRE(listed.size() == 1);
    CHECK(listed[0].persistent());
}

TEST_CASE("with the cache disabled every call compiles and nothing is read or written") {
    TempDir tmp;
    PackingCompiler pc;
    skc::StaticKernelCompiler<Inv> compiler(pc.invoker(), options_for(tmp.path(), /*cache=*/false),
                                            settings_for(tmp / "lib"));
    CHECK(compiler.cache() == nullptr);
    skc::process_compiled().clear();
    const skc::CompileReport a = compiler.compile(example_ops());
    skc::process_compiled().clear();
    const skc::CompileReport b = compiler.compile(example_ops());
    CHECK(a.outcome == skc::CompileOutcome::disabled);
    CHECK(b.outcome == skc::CompileOutcome::disabled);
    CHECK(pc.calls == 2);
    CHECK(a.key == b.key);
    CHECK_FALSE(fs::exists(tmp / "static_kernel_compile_outputs/static_kernel_cache"));
    // The freshly compiled packages are installed under their own names; the later one wins.
    CHECK(a.installed.rfind("static_kernel_", 0) == 0);
    CHECK(b.installed.rfind("static_kernel_", 0) == 0);
    CHECK(a.installed != b.installed);
    for (const auto& [digest, stem] : installed_index(tmp / "lib")) CHECK(stem == b.installed);
}

TEST_CASE("ops compiled earlier in this process are not compiled again; nothing left skips quietly") {
    TempDir tmp;
    skc::process_compiled().clear();
    PackingCompiler pc;
    skc::StaticKernelCompiler<Inv> compiler(pc.invoker(), options_for(tmp.path()), settings_for(tmp / "lib"));
    compiler.compile(example_ops());
    const skc::CompileReport again = compiler.compile(example_ops());
    CHECK(again.outcome == skc::CompileOutcome::skipped);
    CHECK(again.already_compiled == 12);
    CHECK(again.selected == 0);
    CHECK(again.key.empty());
    CHECK(again.installed.empty());
    CHECK(pc.calls == 1);
    CHECK(again.stage("cache").count() == 0);
}

TEST_CASE("the blacklist and the key: blacklisted ops are left out and change the key") {
    TempDir tmp;
    PackingCompiler pc;
    skc::Options o = options_for(tmp.path());
    o.op_blacklist = {"MatMulV2"};
    skc::process_compiled().clear();
    skc::StaticKernelCompiler<Inv> all(pc.invoker(), options_for(tmp.path()), settings_for({}));
    const skc::CompileReport full = all.compile(example_ops());
    skc::process_compiled().clear();
    skc::StaticKernelCompiler<Inv> some(pc.invoker(), o, settings_for({}));
    const skc::CompileReport part = some.compile(example_ops());
    CHECK(part.blacklisted == 5);
    CHECK(part.selected == 7);
    CHECK(part.key != full.key);
    CHECK(part.outcome == skc::CompileOutcome::compiled);
    CHECK(fs::is_directory(part.run_dir / (std::to_string(::getpid()) + "_opcompile_blacklist")));
    CHECK(part.installed.empty());  // no op library: nothing installed
    CHECK(part.stage("install").count() == 0);

    o.op_blacklist = {"_"};  // every file name
    skc::StaticKernelCompiler<Inv> none(pc.invoker(), o, settings_for({}));
    skc::process_compiled().clear();
    const skc::CompileReport nothing = none.compile(example_ops());
    CHECK(nothing.outcome == skc::CompileOutcome::skipped);
    CHECK(nothing.blacklisted == 12);
    CHECK(pc.calls == 2);
}

TEST_CASE("the reselect hook runs once per install, after the shared files are written") {
    TempDir tmp;
    skc::process_compiled().clear();
    PackingCompiler pc;
    std::vector<skc::ReselectContext> seen;
    std::vector<std::size_t> sizes;
    skc::StaticKernelCompiler<Inv, skc::FilesystemStorage, skc::FileLock, skc::RunPackageInstaller, SeenReselect>
        compiler(pc.invoker(), options_for(tmp.path()), settings_for(tmp / "lib"), skc::RunPackageInstaller(),
                 SeenReselect{&seen, &sizes});
    const skc::CompileReport r = compiler.compile(example_ops());
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].op_library == tmp / "lib");
    CHECK(seen[0].backend == "host");
    CHECK(seen[0].device == "dev0");
    CHECK(seen[0].package == r.installed);
    CHECK(sizes[0] == 12);
    CHECK(r.stages.back().first == "reselect");

    // Without an op library there is nothing to reselect. The same configuration by name: the
    // reselect hook alone, in the type and in the constructor.
    skc::process_compiled().clear();
    skc::StaticKernelCompiler<Inv, skc::with_reselect<SeenReselect>> dry(pc.invoker(), options_for(tmp.path()),
                                                                         settings_for({}), SeenReselect{&seen, &sizes});
    dry.compile(example_ops());
    CHECK(seen.size() == 1);
}

// Named configurations: each selector sets its role, in any order; the others keep their defaults.
// By position, the trailing policies keep theirs.
namespace named {
using Gather2 = skc::StaticKernelCompiler<Inv, skc::with_install<skc::NoInstall>, skc::with_gather<skc::LocalFsGather>>;
static_assert(std::is_same_v<Gather2::Install, skc::NoInstall>);
static_assert(std::is_same_v<Gather2::Gather, skc::LocalFsGather>);
static_assert(std::is_same_v<Gather2::Storage, skc::FilesystemStorage>);
static_assert(std::is_same_v<Gather2::Lock, skc::FileLock>);
static_assert(std::is_same_v<Gather2::Reselect, skc::NoReselect>);
static_assert(std::is_same_v<Gather2::Support, skc::DefaultSupport>);
static_assert(std::is_same_v<Gather2::Targets, skc::DefaultTargets>);
using Memory = skc::StaticKernelCompiler<Inv, skc::with_lock<skc::ProcessLock>, skc::with_storage<skc::MemoryStorage>>;
static_assert(std::is_same_v<Memory::Storage, skc::MemoryStorage> && std::is_same_v<Memory::Lock, skc::ProcessLock>);
static_assert(std::is_same_v<skc::InMemoryCompiler<Inv>::Install, skc::NoInstall>);
static_assert(std::is_same_v<skc::StaticKernelCompiler<Inv, skc::MemoryStorage>::Lock, skc::FileLock>);
static_assert(std::is_same_v<Defaults::Install, skc::RunPackageInstaller>);
// The constructor takes the objects that differ, in any order; a policy that cannot be made by
// default must be passed.
static_assert(std::is_constructible_v<Gather2, Inv, skc::Options, skc::CompilerSettings, skc::LocalFsGather>);
static_assert(
    std::is_constructible_v<Gather2, Inv, skc::Options, skc::CompilerSettings, skc::LocalFsGather, skc::NoInstall>);
static_assert(
    std::is_constructible_v<Gather2, Inv, skc::Options, skc::CompilerSettings, skc::NoInstall, skc::LocalFsGather>);
static_assert(
    !std::is_constructible_v<Gather2, Inv, skc::Options, skc::CompilerSettings, skc::FileLock>);  // not a constructor's
}  // namespace named

TEST_CASE("compile(recorder) ends the recording session and compiles what it recorded") {
    TempDir tmp;
    skc::process_compiled().clear();
    PackingCompiler pc;
    skc::StaticKernelCompiler<Inv> compiler(pc.invoker(), options_for(tmp.path()), settings_for({}));
    skc::OpRecorder<> rec;
    for (const skc::OpRecord& r : example_ops()) rec.record(r);
    for (const skc::OpRecord& r : example_ops()) rec.record(r);  // repeats are recorded once
    const skc::CompileReport r = compiler.compile(rec);
    CHECK_FALSE(rec.active());
    CHECK_FALSE(skc::recording_session_active());
    CHECK(r.recorded == 14);
    CHECK(r.targets == 9);
    CHECK(r.selected == 12);
    CHECK(r.outcome == skc::CompileOutcome::compiled);
    CHECK_THROWS_AS(compiler.compile(rec), skc::Error);  // already stopped: Errc::no_session
}

TEST_CASE("a failed compile stores nothing, installs nothing and is retried by the next call") {
    TempDir tmp;
    skc::process_compiled().clear();
    PackingCompiler pc;
    pc.fail = true;
    skc::StaticKernelCompiler<Inv> compiler(pc.invoker(), options_for(tmp.path()), settings_for(tmp / "lib"));
    try {
        compiler.compile(example_ops());
        FAIL("expected an error");
    } catch (const skc::Error& e) {
        CHECK(e.code() == skc::Errc::compile_failed);
        CHECK(e.message() == "the compiler exited with status 1");
    }
    CHECK(compiler.cache()->entries().empty());
    CHECK(installed_index(tmp / "lib").empty());
    pc.fail = false;
    const int calls = pc.calls;  // the compile and its search for the ops at fault (none: all failed)
    const skc::CompileReport r = compiler.compile(example_ops());  // the ops were not marked compiled
    CHECK(r.outcome == skc::CompileOutcome::compiled);
    CHECK(r.known_failed == 0);
    CHECK(pc.calls == calls + 1);
    CHECK(compiler.cache()->entries().size() == 1);
}

TEST_CASE("bad settings are refused before anything is written") {
    TempDir tmp;
    PackingCompiler pc;
    auto message_of = [&](skc::Options o, skc::CompilerSettings s) -> std::string {
        try {
            skc::StaticKernelCompiler<Inv> c(pc.invoker(), std::move(o), std::move(s));
        } catch (const skc::Error& e) {
            return e.message();
        }
        return "no error";
    };
    skc::Options off = options_for(tmp.path());
    off.static_kernel_compile = false;
    CHECK(message_of(off, settings_for({})) == "static kernel compilation is off (static_kernel_compile is false)");
    skc::CompilerSettings s = settings_for({});
    s.device = "";
    CHECK(message_of(options_for(tmp.path()), s) == "the device name is empty");
    s = settings_for({});
    s.toolchain_version = "";
    CHECK(message_of(options_for(tmp.path()), s) == "the toolchain version is empty");
    s = settings_for({});
    s.device = "a/b";
    CHECK(message_of(options_for(tmp.path()), s).find("device name") != std::string::npos);
    skc::Options zero = options_for(tmp.path());
    zero.jobs = 0;
    CHECK(message_of(zero, settings_for({})) == "jobs must be at least 1");
    try {
        skc::StaticKernelCompiler<Inv> c(pc.invoker(), options_for(tmp / "missing"), settings_for({}));
        FAIL("expected an error");
    } catch (const skc::Error& e) {
        CHECK(e.message() == "cannot access: No such file or directory");
        CHECK(e.file() == (tmp / "missing").string());
    }
    s = settings_for(tmp / "lib/../lib");
    CHECK(message_of(options_for(tmp.path()), s).find("..") != std::string::npos);
    CHECK(pc.calls == 0);
    CHECK(skc_test::snapshot(tmp.path()).empty());
}

TEST_CASE("the report as JSON names the outcome, the key, the counts and the stage times") {
    TempDir tmp;
    skc::process_compiled().clear();
    PackingCompiler pc;
    skc::StaticKernelCompiler<Inv> compiler(pc.invoker(), options_for(tmp.path()), settings_for(tmp / "lib"));
    const skc::CompileReport r = compiler.compile(example_ops());
    const skc::Value v = r.to_value();
    CHECK(v.find("outcome")->as_string() == "compiled");
    CHECK(v.find("cache_hit")->as_bool() == false);
    CHECK(v.find("key")->as_string() == r.key);
    CHECK(v.find("installed")->as_string() == r.key);
    CHECK(v.find("counts")->find("selected")->as_int() == 12);
    CHECK(v.find("counts")->find("compiled")->as_int() == 12);
    CHECK(v.find("counts")->find("reused")->as_int() == 0);
    REQUIRE(v.find("packages")->as_array().size() == 1);
    CHECK(v.find("packages")->as_array()[0].as_string() == r.key);
    CHECK(v.find("stage_ms")->as_object().size() == r.stages.size());
    CHECK(r.work() == "compiled 12 of 12 ops");
    CHECK(r.summary().rfind("static kernel compile: miss, compiled, key " + r.key +
                                ", 12 of 14 ops selected, compiled 12 of 12 ops, installed ",
                            0) == 0);

    // Another process with the same ops: every kernel from the one cached package.
    skc::process_compiled().clear();
    skc::StaticKernelCompiler<Inv> again(pc.invoker(), options_for(tmp.path()), settings_for(tmp / "lib"));
    const skc::CompileReport h = again.compile(example_ops());
    CHECK(h.outcome == skc::CompileOutcome::hit);
    CHECK(h.to_value().find("counts")->find("compiled")->as_int() == 0);
    CHECK(h.to_value().find("counts")->find("reused")->as_int() == 12);
    CHECK(h.work() == "compiled 0 of 12 ops (12 from 1 cached package)");
    CHECK(h.summary().find(", compiled 0 of 12 ops (12 from 1 cached package), installed ") != std::string::npos);

    // Nothing selected: nothing compiled or reused, and no such words.
    const skc::CompileReport none = again.compile(example_ops());
    CHECK(none.outcome == skc::CompileOutcome::skipped);
    CHECK(none.work().empty());
    CHECK(none.to_value().find("packages")->as_array().empty());
}

TEST_CASE("a new shape compiles only itself: the cached packages inside the set, and one compile of the rest") {
    TempDir tmp;
    const std::vector<skc::OpRecord> ops = many_ops(12);
    const std::vector<skc::OpRecord> a(ops.begin(), ops.begin() + 8);
    PackingCompiler pc;
    std::size_t kernels = 0;  // in the op library's index while the process held its installs
    skc::CacheStats stats;    // the process's cache counters
    auto process = [&](const std::vector<skc::OpRecord>& set) {  // a new process: nothing compiled in it
        skc::process_compiled().clear();
        skc::StaticKernelCompiler<Inv> c(pc.invoker(), options_for(tmp.path()), settings_for(tmp / "lib"));
        skc::CompileReport r = c.compile(set);
        kernels = installed_index(tmp / "lib").size();
        stats = c.cache()->stats();
        return r;
    };
    const skc::CompileReport first = process(a);
    CHECK(first.work() == "compiled 8 of 8 ops");

    // 4 new ops beside the 8 cached: the compiler gets the 4, cached under their own key.
    const skc::CompileReport second = process(ops);
    CHECK(second.outcome == skc::CompileOutcome::compiled);
    CHECK(pc.calls == 2);
    CHECK(skc::read_op_info_dir(pc.requests.back().json_dir).ops.size() == 4);
    CHECK(second.work() == "compiled 4 of 12 ops (8 from 1 cached package)");
    REQUIRE(second.packages.size() == 2);
    CHECK(second.packages[0] == first.key);
    CHECK(second.packages[1] != second.key);  // the 4 ops' package has their key, not the set's
    CHECK(kernels == 12);
    CHECK(stats.ops_compiled == 4);
    CHECK(stats.ops_reused == 8);
    CHECK(stats.composite_hits == 0);

    // The same 12 again: both packages, nothing compiled.
    const skc::CompileReport third = process(ops);
    CHECK(third.outcome == skc::CompileOutcome::hit);
    CHECK(pc.calls == 2);
    CHECK(third.work() == "compiled 0 of 12 ops (12 from 2 cached packages)");
    CHECK(third.key == second.key);
    CHECK(kernels == 12);
    CHECK(third.to_value().find("counts")->find("reused")->as_int() == 12);
    // ... found by one lookup: the composite entry the second wrote, naming both packages in order.
    CHECK(stats.composite_hits == 1);
    CHECK(stats.hits == 1);
    CHECK(stats.ops_reused == 12);
    CHECK(third.packages == second.packages);

    // A set the cached packages do not lie inside is compiled whole: the 8 ops and one other.
    std::vector<skc::OpRecord> other(ops.begin(), ops.begin() + 7);
    other.push_back(many_ops(13).back());
    const skc::CompileReport fourth = process(other);
    CHECK(pc.calls == 3);
    CHECK(fourth.work() == "compiled 8 of 8 ops");
}

TEST_CASE("the in-process rule is a cover: a grown set in the same process compiles its new ops and records the set") {
    TempDir tmp;
    const std::vector<skc::OpRecord> ops = many_ops(12);
    const std::vector<skc::OpRecord> a(ops.begin(), ops.begin() + 8);
    PackingCompiler pc;
    skc::process_compiled().clear();
    skc::StaticKernelCompiler<Inv> c(pc.invoker(), options_for(tmp.path()), settings_for(tmp / "lib"));
    const skc::CompileReport first = c.compile(a);
    CHECK(first.work() == "compiled 8 of 8 ops");

    // The 8 and 4 new ones in the same process: the 8 are not compiled again (the in-process rule:
    // their verdict, and their package, installed by this process, is the cover's part) and the set
    // is keyed and recorded as a new process would key it.
    const skc::CompileReport grown = c.compile(ops);
    CHECK(grown.already_compiled == 8);
    CHECK(grown.selected == 4);
    CHECK(pc.calls == 2);
    CHECK(skc::read_op_info_dir(pc.requests.back().json_dir).ops.size() == 4);
    CHECK(grown.work() == "compiled 4 of 12 ops (8 from 1 cached package)");
    REQUIRE(grown.packages.size() == 2);
    CHECK(grown.packages[0] == first.key);
    CHECK(installed_index(tmp / "lib").size() == 12);
    const std::optional<skc::CompositeEntry> composite = c.cache()->composite(grown.key);
    REQUIRE(composite);
    REQUIRE(composite->parts.size() == 2);
    CHECK(composite->parts[0].key == first.key);
    CHECK(composite->parts[1].key == grown.packages[1]);

    // A new process with the 12: one lookup, the same key, nothing compiled.
    skc::process_compiled().clear();
    skc::StaticKernelCompiler<Inv> next(pc.invoker(), options_for(tmp.path()), settings_for(tmp / "lib"));
    const skc::CompileReport hit = next.compile(ops);
    CHECK(hit.key == grown.key);
    CHECK(hit.outcome == skc::CompileOutcome::hit);
    CHECK(hit.work() == "compiled 0 of 12 ops (12 from 2 cached packages)");
    CHECK(next.cache()->stats().composite_hits == 1);
    CHECK(pc.calls == 2);

    // Nothing new: skipped, at no cost (no key, no lookup, no install).
    const skc::CompileReport same = c.compile(ops);
    CHECK(same.outcome == skc::CompileOutcome::skipped);
    CHECK(same.key.empty());
    CHECK(same.stage("cache").count() == 0);
}

TEST_CASE("the in-process rule holds where no cover can: the cache off, or the earlier package gone from it") {
    TempDir tmp;
    const std::vector<skc::OpRecord> ops = many_ops(12);
    const std::vector<skc::OpRecord> a(ops.begin(), ops.begin() + 8);
    PackingCompiler pc;
    skc::process_compiled().clear();
    SUBCASE("the cache off") {
        skc::Options o = options_for(tmp.path());
        o.disable_static_kernel_compile_cache = true;
        skc::StaticKernelCompiler<Inv> c(pc.invoker(), o, settings_for(tmp / "lib"));
        c.compile(a);
        const skc::CompileReport grown = c.compile(ops);
        CHECK(grown.outcome == skc::CompileOutcome::disabled);
        CHECK(skc::read_op_info_dir(pc.requests.back().json_dir).ops.size() == 4);
        CHECK(grown.work() == "compiled 4 of 4 ops");
        CHECK(installed_index(tmp / "lib").size() == 12);  // the first package is still installed
        // Keyed as the 4 new ops alone, as a new process compiling just those keys them.
        skc::process_compiled().clear();
        skc::StaticKernelCompiler<Inv> alone(pc.invoker(), o, settings_for({}));
        CHECK(alone.compile(std::vector<skc::OpRecord>(ops.begin() + 8, ops.end())).key == grown.key);
        CHECK(pc.calls == 3);
    }
    SUBCASE("the earlier package removed from the cache") {
        skc::StaticKernelCompiler<Inv> c(pc.invoker(), options_for(tmp.path()), settings_for(tmp / "lib"));
        const skc::CompileReport first = c.compile(a);
        c.cache()->clear();  // as a prune by another process would
        const skc::CompileReport grown = c.compile(ops);
        CHECK(skc::read_op_info_dir(pc.requests.back().json_dir).ops.size() == 4);
        CHECK(grown.work() == "compiled 4 of 4 ops");
        CHECK(c.cache()->composites().empty());  // no package of the cache holds the 8
        CHECK(installed_index(tmp / "lib").size() == 12);
        CHECK(first.key != grown.key);
        CHECK(pc.calls == 2);
    }
}

TEST_CASE("a failed install leaves the ops to the next call, which installs them from the cache") {
    TempDir tmp;
    skc::process_compiled().clear();
    PackingCompiler pc;
    fs::create_directories(tmp.path());
    skc_test::spit(tmp / "lib", "a file where the op library should be");
    skc::StaticKernelCompiler<Inv> compiler(pc.invoker(), options_for(tmp.path()), settings_for(tmp / "lib"));
    CHECK_THROWS_AS(compiler.compile(example_ops()), skc::Error);
    CHECK(pc.calls == 1);
    fs::remove(tmp / "lib");
    const skc::CompileReport r = compiler.compile(example_ops());
    CHECK(r.outcome == skc::CompileOutcome::hit);
    CHECK(r.installed == r.key);
    CHECK(installed_index(tmp / "lib").size() == 12);
    CHECK(pc.calls == 1);
}

namespace {

using Phase = skc::CompileProgress::Phase;

/// A progress callback that appends every report to `out`.
std::function<void(const skc::CompileProgress&)> recorder_of(std::vector<skc::CompileProgress>& out) {
    return [&out](const skc::CompileProgress& p) { out.push_back(p); };
}

/// "phase done/total op" per report, e.g. "compiling 1/12 a.json", "lookup", "waiting <what>".
std::vector<std::string> shown(const std::vector<skc::CompileProgress>& reports) {
    std::vector<std::string> out;
    for (const skc::CompileProgress& p : reports) {
        std::string s(skc::to_string(p.phase));
        if (p.phase == Phase::compiling)
            s += " " + std::to_string(p.done) + "/" + std::to_string(p.total) + (p.op.empty() ? "" : " " + p.op);
        if (p.phase == Phase::waiting) s += " " + p.waiting_for;
        out.push_back(s);
    }
    return out;
}

/// One rank of two that is not the leader: it gets a skipped outcome from a leader that does not exist.
struct FollowerGather {
    skc::Value coordinate(const skc::GatherRequest&, const skc::LeadFn&, const skc::ShareFn& share) {
        skc::Value v(skc::Object{{"outcome", skc::Value("skipped")}});
        share(v);
        return v;
    }
    std::size_t local_rank() const { return 1; }
    std::size_t local_world_size() const { return 2; }
};

/// The leader of two ranks whose follower brought nothing.
struct LeaderGather {
    skc::Value coordinate(const skc::GatherRequest& r, const skc::LeadFn& lead, const skc::ShareFn& share) {
        skc::GatheredSet set;
        set.dir = r.compile_dir;
        for (const skc::SelectedOp& e : r.selected) {
            set.digests.push_back(e.digest);
            set.names.push_back(e.name);
        }
        set.ranks = 2;
        skc::Value v = lead(set);
        share(v);
        return v;
    }
    std::size_t local_rank() const { return 0; }
    std::size_t local_world_size() const { return 2; }
};

}  // namespace

TEST_CASE(
    "progress: the lookup, the compiler's start, then its progress lines in order with the time since it started") {
    TempDir tmp;
    skc::process_compiled().clear();
    PackingCompiler pc;
    // An in-process compiler reporting as a kernel compiler's progress lines would: a repeat, a
    // step back and its own 0/n are not forwarded.
    pc.before = [](const skc::CompileRequest& r) {
        REQUIRE(r.on_progress);
        r.on_progress(0, 12, "");
        r.on_progress(1, 12, "a.json");
        r.on_progress(1, 12, "a-again.json");
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        r.on_progress(3, 12, "c.json");
        r.on_progress(2, 12, "b.json");
        r.on_progress(12, 12, "z.json");
    };
    skc::CompilerSettings s = settings_for(tmp / "lib");
    std::vector<skc::CompileProgress> seen;
    s.progress = recorder_of(seen);
    FsNoInstall compiler(pc.invoker(), options_for(tmp.path()), s);
    const skc::CompileReport rep = compiler.compile(example_ops());
    CHECK(rep.outcome == skc::CompileOutcome::compiled);
    CHECK(shown(seen) == std::vector<std::string>{"lookup", "compiling 0/12", "compiling 1/12 a.json",
                                                  "compiling 3/12 c.json", "compiling 12/12 z.json", "installing"});
    for (const skc::CompileProgress& p : seen) CHECK(p.key == rep.key);
    REQUIRE(seen.size() == 6);
    CHECK(seen[1].elapsed.count() == 0);
    CHECK(seen[3].elapsed >= std::chrono::milliseconds(2));
    CHECK(seen[4].elapsed >= seen[3].elapsed);

    // A hit: the lookup, then the install.
    seen.clear();
    skc::process_compiled().clear();
    CHECK(compiler.compile(example_ops()).outcome == skc::CompileOutcome::hit);
    CHECK(shown(seen) == std::vector<std::string>{"lookup", "installing"});
}

TEST_CASE(
    "progress: a compiler without progress lines gives the start report only (then the install); the cache off gives "
    "no lookup") {
    TempDir tmp;
    skc::process_compiled().clear();
    PackingCompiler pc;
    skc::CompilerSettings s = settings_for(tmp / "lib");
    std::vector<skc::CompileProgress> seen;
    s.progress = recorder_of(seen);
    FsNoInstall compiler(pc.invoker(), options_for(tmp.path(), /*cache=*/false), s);
    CHECK(compiler.compile(example_ops()).outcome == skc::CompileOutcome::disabled);
    CHECK(shown(seen) == std::vector<std::string>{"compiling 0/12", "installing"});
    // Nothing to compile: nothing reported.
    seen.clear();
    CHECK(compiler.compile(example_ops()).outcome == skc::CompileOutcome::skipped);
    CHECK(seen.empty());
}

TEST_CASE("progress: a callback that throws does not break the compile") {
    TempDir tmp;
    skc::process_compiled().clear();
    PackingCompiler pc;
    pc.before = [](const skc::CompileRequest& r) { r.on_progress(1, 12, "a.json"); };
    skc::CompilerSettings s = settings_for(tmp / "lib");
    int calls = 0;
    s.progress = [&](const skc::CompileProgress&) {
        ++calls;
        throw std::runtime_error("the terminal is gone");
    };
    FsNoInstall compiler(pc.invoker(), options_for(tmp.path()), s);
    CHECK(compiler.compile(example_ops()).outcome == skc::CompileOutcome::compiled);
    CHECK(calls == 4);  // lookup, start, 1/12, installing
    CHECK(pc.calls == 1);
}

TEST_CASE("progress: waiting while another process holds the key's lock, then compiling when it lets go") {
    TempDir tmp;
    PackingCompiler pc;
    // The key of these ops, from a first compile in another base and cache.
    std::string key;
    {
        skc::process_compiled().clear();
        fs::create_directories(tmp / "a");
        FsNoInstall first(pc.invoker(), options_for(tmp / "a"), settings_for(tmp / "lib"));
        key = first.compile(example_ops()).key;
    }
    fs::create_directories(tmp / "b");
    skc::Options o = options_for(tmp / "b");
    o.cache_dir = (tmp / "cache-b").string();
    skc::CompilerSettings s = settings_for(tmp / "lib");
    std::vector<skc::CompileProgress> seen;
    std::atomic<bool> waiting{false};
    s.progress = [&](const skc::CompileProgress& p) {
        seen.push_back(p);
        if (p.phase == Phase::waiting) waiting = true;
    };
    FsNoInstall compiler(pc.invoker(), o, s);

    // "Another process": a lock of its own on the key's lock file, as a compiling process holds it.
    skc::FileLock other(tmp / "cache-b");
    skc::FileLock::Guard held =
        other.lock(skc::Layout::cache_stem("8.0.RC1", "dev0") + "/keys/key-" + key, skc::LockMode::exclusive);
    REQUIRE(held.owns());
    skc::process_compiled().clear();
    skc::CompileReport rep;
    std::thread t([&] { rep = compiler.compile(example_ops()); });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!waiting && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    held.release();
    t.join();
    CHECK(waiting);
    CHECK(rep.key == key);
    CHECK(rep.outcome == skc::CompileOutcome::compiled);
    CHECK(shown(seen) == std::vector<std::string>{"waiting another process compiling cache key " + key,
                                                  "compiling 0/12", "installing"});
    REQUIRE_FALSE(seen.empty());
    CHECK(seen[0].key == key);
}

TEST_CASE("progress: with several ranks, the wait for the other ranks or for the leader") {
    TempDir tmp;
    PackingCompiler pc;
    skc::CompilerSettings s = settings_for(tmp / "lib");
    std::vector<skc::CompileProgress> seen;
    s.progress = recorder_of(seen);
    SUBCASE("a follower waits for the leader") {
        skc::process_compiled().clear();
        skc::StaticKernelCompiler<Inv, skc::FilesystemStorage, skc::FileLock, skc::NoInstall, skc::NoReselect,
                                  FollowerGather>
            compiler(pc.invoker(), options_for(tmp.path()), s);
        CHECK(compiler.compile(example_ops()).outcome == skc::CompileOutcome::skipped);
        CHECK(shown(seen) == std::vector<std::string>{
                                 "waiting the node's leader (local rank 0) compiling or looking up the node's ops"});
        REQUIRE(seen.size() == 1);
        CHECK(seen[0].key.empty());
        CHECK(pc.calls == 0);
    }
    SUBCASE("the leader waits for the other ranks, then looks up and compiles") {
        skc::process_compiled().clear();
        skc::StaticKernelCompiler<Inv, skc::FilesystemStorage, skc::FileLock, skc::NoInstall, skc::NoReselect,
                                  LeaderGather>
            compiler(pc.invoker(), options_for(tmp.path()), s);
        CHECK(compiler.compile(example_ops()).outcome == skc::CompileOutcome::compiled);
        CHECK(shown(seen) ==
              std::vector<std::string>{"waiting the node's other ranks", "lookup", "compiling 0/12", "installing"});
    }
}

// ---- the op info folders, off the critical path ---------------------------------------------------

namespace {

/// The op info folders of run folder `dir`: folder suffix -> sorted (name without its counter, bytes).
using Folders = std::map<std::string, std::vector<std::pair<std::string, std::string>>>;

Folders op_info_folders(const fs::path& dir) {
    Folders out;
    const std::string pid = std::to_string(::getpid());
    for (const std::string suffix : {"", "_debug", "_opcompile", "_opcompile_selected", "_opcompile_blacklist"}) {
        const fs::path f = dir / (pid + suffix);
        if (!fs::is_directory(f)) continue;
        auto& files = out[suffix.empty() ? "<pid>" : suffix];
        for (const auto& e : fs::directory_iterator(f)) {
            std::string name = e.path().filename().string();
            const std::size_t cut = name.find_last_of('_');
            REQUIRE(cut != std::string::npos);
            files.emplace_back(name.substr(0, cut) + "_#.json", slurp(e.path()));
        }
        std::sort(files.begin(), files.end());
    }
    return out;
}

/// The example ops, two with bin_type/bin_info (their `<pid>` and `_debug` files differ from the
/// others), and one repeated.
std::vector<skc::OpRecord> ops_with_bin_fields() {
    std::vector<skc::OpRecord> ops = example_ops();
    ops[0].bin_type = 0;
    ops[0].bin_info = skc::Value(skc::Object{{"file", skc::Value("kernel_0.o")}});
    ops[3].bin_type = 1;
    ops.push_back(ops[5]);
    return ops;
}

/// What the one-file-at-a-time writers make of `ops`: write_session, then select_for_compile.
Folders reference_folders(const fs::path& base, const std::vector<skc::OpRecord>& ops, const skc::SelectOptions& opt) {
    const skc::RunLayout run(base / "reference", static_cast<long>(::getpid()));
    fs::create_directories(run.dir());
    std::vector<const skc::OpRecord*> records;
    std::unordered_set<skc::Digest, skc::DigestHash> seen;
    for (const skc::OpRecord& r : ops)
        if (seen.insert(skc::digest(r)).second) records.push_back(&r);
    (void)skc::write_session(run, records);
    const skc::CompiledSet none;
    (void)skc::select_for_compile(run, opt, none);
    return op_info_folders(run.dir());
}

}  // namespace

TEST_CASE("op info folders: after a miss and after a hit, byte for byte what the one-file writers make") {
    for (const bool model_cache : {false, true}) {
        for (const std::vector<std::string>& blacklist :
             {std::vector<std::string>{}, std::vector<std::string>{"MatMulV2", "_2_16_"}}) {
            CAPTURE(model_cache);
            CAPTURE(blacklist.size());
            TempDir tmp;
            PackingCompiler pc;
            skc::Options o = options_for(tmp / "base");
            o.op_blacklist = blacklist;
            if (model_cache) {
                o.model_compile_cache = true;
                o.model_compile_cache_dir = (tmp / "model").string();
                fs::create_directories(tmp / "model");
            }
            fs::create_directories(tmp / "base");
            const std::vector<skc::OpRecord> ops = ops_with_bin_fields();
            const Folders want =
                reference_folders(tmp.path(), ops, skc::SelectOptions{blacklist, o.use_model_cache_dir()});
            CHECK(want.count("_opcompile_blacklist") == (blacklist.empty() ? 0u : 1u));
            CHECK(want.count("_opcompile_selected") == (model_cache && blacklist.empty() ? 0u : 1u));
            skc::StaticKernelCompiler<Inv, skc::FilesystemStorage, skc::FileLock, skc::NoInstall> compiler(
                pc.invoker(), o, settings_for({}));
            for (const skc::CompileOutcome expected : {skc::CompileOutcome::compiled, skc::CompileOutcome::hit}) {
                skc::process_compiled().clear();
                const skc::CompileReport r = compiler.compile(ops);
                CHECK(r.outcome == expected);
                CHECK(r.recorded == want.at("_debug").size());
                compiler.flush();  // from here the folders are complete
                CHECK(op_info_folders(r.run_dir) == want);
            }
            CHECK(pc.calls == 1);
        }
    }
}

TEST_CASE("op info folders: complete when the compiler starts, and when the compiler object goes") {
    TempDir tmp;
    std::size_t files_seen = 0;
    PackingCompiler pc;
    pc.before = [&](const skc::CompileRequest& r) {
        for ([[maybe_unused]] const auto& e : fs::directory_iterator(r.json_dir)) ++files_seen;
    };
    fs::path run_dir;
    {
        FsNoInstall compiler(pc.invoker(), options_for(tmp.path()), settings_for({}));
        skc::process_compiled().clear();
        run_dir = compiler.compile(many_ops(500)).run_dir;
    }
    CHECK(files_seen == 500);
    const std::string pid = std::to_string(::getpid());
    for (const std::string suffix : {"_debug", "_opcompile", "_opcompile_selected"})
        CHECK(skc::read_op_info_dir(run_dir / (pid + suffix)).ops.size() == 500);
    // A hit: the compiler's destruction waits for the folders.
    {
        FsNoInstall compiler(pc.invoker(), options_for(tmp.path()), settings_for({}));
        skc::process_compiled().clear();
        const skc::CompileReport r = compiler.compile(many_ops(500));
        CHECK(r.outcome == skc::CompileOutcome::hit);
        run_dir = r.run_dir;
    }
    for (const std::string suffix : {"", "_debug", "_opcompile", "_opcompile_selected"})
        CHECK(skc::read_op_info_dir(run_dir / (pid + suffix)).ops.size() == 500);
}

TEST_CASE("op info folders: a process killed while they are written leaves only whole files") {
    TempDir tmp;
    PackingCompiler pc;
    const std::vector<skc::OpRecord> ops = many_ops(3000);
    {
        FsNoInstall compiler(pc.invoker(), options_for(tmp.path()), settings_for({}));
        skc::process_compiled().clear();
        fs::remove_all(compiler.compile(ops).run_dir);  // the miss; the child hits
    }
    const fs::path outputs = tmp / "static_kernel_compile_outputs";
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        try {
            FsNoInstall compiler(pc.invoker(), options_for(tmp.path()), settings_for({}));
            skc::process_compiled().clear();
            const skc::CompileReport r = compiler.compile(ops);
            if (r.outcome != skc::CompileOutcome::hit) ::_exit(4);
            // Killed once the writing is under way, long before it ends.
            const fs::path debug = r.run_dir / (std::to_string(::getpid()) + "_debug");
            for (;;) {
                std::error_code ec;
                std::size_t n = 0;
                for (fs::directory_iterator it(debug, ec), end; !ec && it != end; it.increment(ec)) ++n;
                if (n >= 100) ::kill(::getpid(), SIGKILL);
                std::this_thread::sleep_for(std::chrono::microseconds(100));
            }
        } catch (...) {}
        ::_exit(3);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
    std::size_t whole = 0, runs = 0;
    for (const auto& run : fs::directory_iterator(outputs)) {
        if (run.path().filename().string().rfind("ts", 0) != 0) continue;
        ++runs;
        for (const auto& e : fs::recursive_directory_iterator(run.path())) {
            const std::string name = e.path().filename().string();
            if (!e.is_regular_file() || name.front() == '.') continue;  // a hidden temporary is no op info file
            CAPTURE(e.path());
            CHECK_NOTHROW((void)skc::read_op_info(e.path()));
            ++whole;
        }
    }
    CHECK(runs == 1);
    CHECK(whole > 0);
    CHECK(whole < 4 * ops.size());  // killed part-way: the folders were not complete
}

TEST_CASE("op info folders: a failure to write them after a hit is thrown by flush() once; what was written is whole") {
    TempDir tmp;
    PackingCompiler pc;
    const std::vector<skc::OpRecord> ops = many_ops(50);
    const fs::path outputs = skc::Layout(tmp.path()).outputs();
    const std::string opcompile_name = std::to_string(::getpid()) + "_opcompile";
    std::set<fs::path> runs_before;
    fs::path planted;
    {
        FsNoInstall first(pc.invoker(), options_for(tmp.path()), settings_for({}));
        skc::process_compiled().clear();
        REQUIRE(first.compile(ops).outcome == skc::CompileOutcome::compiled);
    }
    for (const auto& e : fs::directory_iterator(outputs)) runs_before.insert(e.path());

    // A compiler whose writer has not started yet (its first compile()): at the lookup the hit's run
    // folder exists and its folders are not written; a file where `<pid>_opcompile` must go makes
    // the background writing fail.
    skc::CompilerSettings st = settings_for({});
    st.progress = [&](const skc::CompileProgress& p) {
        if (p.phase != skc::CompileProgress::Phase::lookup) return;
        for (const auto& e : fs::directory_iterator(outputs))
            if (e.is_directory() && !runs_before.count(e.path()) && e.path().filename() != "static_kernel_cache") {
                planted = e.path() / opcompile_name;
                skc_test::spit(planted, "in the way");
            }
    };
    FsNoInstall compiler(pc.invoker(), options_for(tmp.path()), st);
    skc::process_compiled().clear();
    const skc::CompileReport hit = compiler.compile(ops);  // the lookup plants the file
    CHECK(hit.outcome == skc::CompileOutcome::hit);
    REQUIRE(planted == hit.run_dir / opcompile_name);
    std::string message;
    try {
        compiler.flush();
    } catch (const skc::Error& e) {
        CHECK(e.code() == skc::Errc::io_error);
        message = e.what();
    }
    CHECK(message == planted.string() + ": cannot create directory: Not a directory");
    CHECK_NOTHROW(compiler.flush());                  // reported once
    CHECK(skc_test::slurp(planted) == "in the way");  // nothing replaced
    // The folders made before the failure hold only whole files.
    for (const char* suffix : {"_debug", ""}) {
        const fs::path d = hit.run_dir / (std::to_string(::getpid()) + suffix);
        if (fs::exists(d)) CHECK_NOTHROW((void)skc::read_op_info_dir(d));
    }
}

namespace {
/// A lock with lock_until alone (the host derives try_lock and lock), over file locks.
struct UntilOnlyLock {
    using Guard = skc::FileLock::Guard;
    explicit UntilOnlyLock(std::filesystem::path dir) : inner(std::move(dir)) {}  // made for the cache's folder
    skc::FileLock inner;
    Guard lock_until(std::string_view name, skc::LockMode mode, skc::LockClock::time_point deadline) {
        return inner.lock_until(name, mode, deadline);
    }
};
}  // namespace

TEST_CASE("the host asks only for what it calls: a lock with lock_until alone compiles, stores and hits") {
    TempDir tmp;
    PackingCompiler pc;
    using Lean = skc::StaticKernelCompiler<Inv, skc::with_lock<UntilOnlyLock>, skc::with_install<skc::NoInstall>>;
    Lean compiler(pc.invoker(), options_for(tmp.path()), settings_for({}));
    skc::process_compiled().clear();
    CHECK(compiler.compile(example_ops()).outcome == skc::CompileOutcome::compiled);
    skc::process_compiled().clear();
    CHECK(compiler.compile(example_ops()).outcome == skc::CompileOutcome::hit);
    CHECK(pc.calls == 1);
}

TEST_CASE("a remote cache asked of a compiler without a remote tier: one warning, the local cache only") {
    TempDir tmp;
    PackingCompiler pc;
    skc::Options o = options_for(tmp.path());
    o.remote_cache = "redis://cache-host:6379";
    skc::CompilerSettings s = settings_for(tmp / "lib");
    std::vector<std::pair<skc::LogLevel, std::string>> lines;
    s.log = [&](skc::LogLevel l, std::string_view line) { lines.emplace_back(l, std::string(line)); };
    skc::StaticKernelCompiler<Inv> compiler(pc.invoker(), o, s);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].first == skc::LogLevel::warning);
    CHECK(lines[0].second ==
          "a remote cache is configured (remote_cache or SKC_REMOTE_CACHE), but this program has "
          "no remote tier (its Remote policy is NoRemote): the local cache only");
    REQUIRE(compiler.cache() != nullptr);
    CHECK(compiler.cache()->remote() == nullptr);
    skc::process_compiled().clear();
    CHECK(compiler.compile(example_ops()).outcome == skc::CompileOutcome::compiled);
}

}  // namespace skc_compiler_test
