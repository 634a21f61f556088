// One op the kernel compiler fails on costs only itself (detail/isolate.hpp): the host finds the ops
// at fault (named by the compiler, or by bisection), compiles the rest, remembers the failures in
// the cache namespace (known_failures.hpp) and leaves them out of later runs; a timeout, a signal or
// a compiler that fails on everything is never blamed on an op.
#include <doctest/doctest.h>

#include <skc/compiler.hpp>
#include <skc/known_failures.hpp>
#include <skc/policy/process_invoker.hpp>

#include "compiler_fixtures.hpp"
#include "packing_compiler.hpp"
#include "test_support.hpp"

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

namespace skc_isolate_test {

namespace {

namespace fs = std::filesystem;
using Compiler = skc::StaticKernelCompiler<skc_test::Inv, skc::FilesystemStorage, skc::FileLock, skc::NoInstall>;
using skc_test::Fn;
using skc_test::Inv;
using skc_test::many_ops;
using skc_test::options_for;
using skc_test::PackingCompiler;
using skc_test::settings_for;
using skc_test::TempDir;

/// The known failures file of the namespace settings_for() names, under `base`.
fs::path known_file(const fs::path& base) {
    return base / "static_kernel_compile_outputs/static_kernel_cache/CANN-8.0.RC1_dev0" /
           std::string(skc::KnownFailures::file_name);
}

skc::CompilerSettings settings_with(const std::string& fingerprint) {
    skc::CompilerSettings s = settings_for({});
    s.compiler_fingerprint = fingerprint;
    return s;
}

/// The digests of the op info files in `dir`.
std::unordered_set<skc::Digest, skc::DigestHash> digests_in(const fs::path& dir) {
    std::unordered_set<skc::Digest, skc::DigestHash> out;
    for (const skc::LoadedOp& op : skc::read_op_info_dir(dir).ops) out.insert(skc::digest(op.record));
    return out;
}

/// The error `fn` throws (Errc::io_error with "no error" when it throws none).
template <class Fn>
skc::Error error_of(Fn&& fn) {
    try {
        fn();
    } catch (const skc::Error& e) {
        return e;
    }
    return skc::Error(skc::Errc::io_error, "no error");
}

}  // namespace

TEST_CASE("a silent compiler: one bad op of 64 is found by bisection, the 63 others compile, later runs skip it") {
    TempDir tmp;
    const std::vector<skc::OpRecord> ops = many_ops(64);
    const skc::Digest bad = skc::digest(ops[37]);
    PackingCompiler pc;
    pc.bad.insert(bad);
    skc::process_compiled().clear();
    {
        Compiler compiler(pc.invoker(), options_for(tmp.path()), settings_with("cc-1"));
        const skc::CompileReport r = compiler.compile(ops);
        CHECK(r.outcome == skc::CompileOutcome::compiled);
        CHECK(r.gathered == 64);
        CHECK(r.failed == 1);
        CHECK(r.known_failed == 0);
        CHECK(r.isolation_compiles >= 1);
        CHECK(r.isolation_compiles <= 12);  // 2 log2(64)
        // The first compile, the trials, and the compile of the rest: at most 2 log2(64) + 1 more.
        CHECK(pc.calls == static_cast<int>(1 + r.isolation_compiles + 1));
        const auto compiled = digests_in(pc.requests.back().json_dir);
        CHECK(compiled.size() == 63);
        CHECK(compiled.count(bad) == 0);
        CHECK(r.summary().find("1 failed in the compiler") != std::string::npos);
        CHECK(r.to_value().find("counts")->find("failed")->as_int() == 1);
    }
    const std::vector<skc::FailedOp> known = skc::KnownFailures::read(known_file(tmp.path()), "cc-1");
    REQUIRE(known.size() == 1);
    CHECK(known[0].digest == bad);
    CHECK(known[0].op_type == "MatMulV2");
    CHECK(known[0].message.find("no kernel for a shape") != std::string::npos);

    // Another process with the same ops: nothing compiled, the failure left out and counted.
    const int before = pc.calls;
    skc::process_compiled().clear();
    {
        Compiler compiler(pc.invoker(), options_for(tmp.path()), settings_with("cc-1"));
        const skc::CompileReport r = compiler.compile(ops);
        CHECK(r.outcome == skc::CompileOutcome::hit);
        CHECK(r.known_failed == 1);
        CHECK(r.failed == 0);
        CHECK(pc.calls == before);
    }

    // Another compiler (its fingerprint changed): the old failures no longer hold; it is tried again.
    skc::process_compiled().clear();
    {
        Compiler compiler(pc.invoker(), options_for(tmp.path()), settings_with("cc-2"));
        const skc::CompileReport r = compiler.compile(ops);
        CHECK(r.known_failed == 0);
        CHECK(r.failed == 1);
        CHECK(pc.calls > before);
    }
    CHECK(skc::KnownFailures::read(known_file(tmp.path()), "cc-1").empty());
    CHECK(skc::KnownFailures::read(known_file(tmp.path()), "cc-2").size() == 1);
}

TEST_CASE("a compiler that names the ops it failed on: one more compile, no bisection") {
    TempDir tmp;
    const std::vector<skc::OpRecord> ops = many_ops(64);
    PackingCompiler pc;
    pc.name_bad = true;
    pc.bad = {skc::digest(ops[3]), skc::digest(ops[50])};
    skc::process_compiled().clear();
    Compiler compiler(pc.invoker(), options_for(tmp.path()), settings_with("cc-1"));
    const skc::CompileReport r = compiler.compile(ops);
    CHECK(r.outcome == skc::CompileOutcome::compiled);
    CHECK(r.failed == 2);
    CHECK(r.isolation_compiles == 0);
    CHECK(pc.calls == 2);
    CHECK(digests_in(pc.requests.back().json_dir).size() == 62);
    const std::vector<skc::FailedOp> known = skc::KnownFailures::read(known_file(tmp.path()), "cc-1");
    REQUIRE(known.size() == 2);
    CHECK(known[0].message == "no kernel for this shape");
}

TEST_CASE("failures that cannot be remembered are a warning: the rest is compiled, cached, and nothing is lost") {
    TempDir tmp;
    const std::vector<skc::OpRecord> ops = many_ops(8);
    PackingCompiler pc;
    pc.name_bad = true;
    pc.bad = {skc::digest(ops[5])};
    // A folder (not empty) where the list goes: it can be neither written nor replaced.
    fs::create_directories(known_file(tmp.path()) / "in the way");
    skc::process_compiled().clear();
    std::vector<std::string> warnings;
    skc::CompilerSettings s = settings_with("cc-1");
    s.log = [&](skc::LogLevel l, std::string_view line) {
        if (l == skc::LogLevel::warning) warnings.emplace_back(line);
    };
    Compiler compiler(pc.invoker(), options_for(tmp.path()), s);
    const skc::CompileReport r = compiler.compile(ops);
    CHECK(r.outcome == skc::CompileOutcome::compiled);
    CHECK(r.failed == 1);
    CHECK(r.ops_compiled == 7);
    REQUIRE(warnings.size() == 2);  // the failure found, then the list not written
    CHECK(warnings[1].rfind("cannot remember the ops the compiler failed on: ", 0) == 0);
    CHECK(warnings[1].find(known_file(tmp.path()).string()) != std::string::npos);
    CHECK(fs::is_directory(known_file(tmp.path()) / "in the way"));
    const skc::VerifyReport v = compiler.cache()->verify_all();
    CHECK(v.checked == 1);
    CHECK(v.bad.empty());

    // The next process finds the failure again (one more compile) and hits the rest's package.
    skc::process_compiled().clear();
    Compiler again(pc.invoker(), options_for(tmp.path()), s);
    const skc::CompileReport r2 = again.compile(ops);
    CHECK(r2.failed == 1);
    CHECK(r2.outcome == skc::CompileOutcome::hit);
    CHECK(r2.key == r.key);
}

TEST_CASE("a timeout, a signal or a compiler that fails on everything is no op's fault and is not remembered") {
    const std::vector<skc::OpRecord> ops = many_ops(16);
    for (const skc::Errc code : {skc::Errc::timeout, skc::Errc::compiler_killed, skc::Errc::io_error}) {
        CAPTURE(skc::to_string(code));
        TempDir tmp;
        PackingCompiler pc;
        pc.fail_with = code;
        skc::process_compiled().clear();
        Compiler compiler(pc.invoker(), options_for(tmp.path()), settings_with("cc-1"));
        CHECK(error_of([&] { (void)compiler.compile(ops); }).code() == code);
        CHECK(pc.calls == 1);  // no trial compile
        CHECK_FALSE(fs::exists(known_file(tmp.path())));
    }
    SUBCASE("every op fails, silently: a bounded search, then the compiler's error") {
        TempDir tmp;
        PackingCompiler pc;
        pc.fail = true;
        skc::process_compiled().clear();
        Compiler compiler(pc.invoker(), options_for(tmp.path()), settings_with("cc-1"));
        const skc::Error e = error_of([&] { (void)compiler.compile(ops); });
        CHECK(e.code() == skc::Errc::compile_failed);
        CHECK(e.message() == "the compiler exited with status 1");
        CHECK(pc.calls <= 1 + 2 * 4 + 4);  // at most 2 log2(16) + 4 trials
        CHECK_FALSE(fs::exists(known_file(tmp.path())));
    }
    SUBCASE("every op named: the compiler's error") {
        TempDir tmp;
        PackingCompiler pc;
        pc.name_bad = true;
        for (const skc::OpRecord& r : ops) pc.bad.insert(skc::digest(r));
        skc::process_compiled().clear();
        Compiler compiler(pc.invoker(), options_for(tmp.path()), settings_with("cc-1"));
        CHECK(error_of([&] { (void)compiler.compile(ops); }).code() == skc::Errc::compile_failed);
        CHECK(pc.calls == 1);
        CHECK_FALSE(fs::exists(known_file(tmp.path())));
    }
    SUBCASE("a failure that is no op's (the set is too large): every half compiles, the error stands") {
        TempDir tmp;
        PackingCompiler pc;
        pc.before = [](const skc::CompileRequest& r) {
            if (skc::read_op_info_dir(r.json_dir).ops.size() > 10)
                throw skc::Error(skc::Errc::compile_failed, "the compiler ran out of memory");
        };
        skc::process_compiled().clear();
        Compiler compiler(pc.invoker(), options_for(tmp.path()), settings_with("cc-1"));
        CHECK(error_of([&] { (void)compiler.compile(ops); }).message() == "the compiler ran out of memory");
        CHECK(pc.calls == 3);  // the set, then its two halves of 8
        CHECK_FALSE(fs::exists(known_file(tmp.path())));
    }
}

TEST_CASE("a cover's rest timing out with a silent compiler: a timeout, nothing remembered, the part intact") {
    using namespace std::chrono_literals;
    TempDir tmp;
    const std::vector<skc::OpRecord> ops = many_ops(6);
    const std::vector<skc::OpRecord> part(ops.begin(), ops.begin() + 4);
    std::unordered_set<skc::Digest, skc::DigestHash> rest;
    for (std::size_t i = 4; i < ops.size(); ++i) rest.insert(skc::digest(ops[i]));
    skc::Options o = options_for(tmp.path());
    o.compile_timeout = 1s;
    PackingCompiler pc;
    skc::process_compiled().clear();
    std::string part_key;
    {
        Compiler compiler(pc.invoker(), o, settings_with("cc-1"));
        const skc::CompileReport r = compiler.compile(part);
        CHECK(r.work() == "compiled 4 of 4 ops");
        part_key = r.key;
    }
    REQUIRE(pc.calls == 1);

    // The set of 6 in another process: the 4 are the cover's part, and the compiler, given the 2
    // others, says one line and names no op, then runs on until the compile timeout kills its
    // process group.
    const fs::path script = tmp / "silent_compiler.sh";
    skc_test::spit(script, "#!/bin/sh\necho compiling\nexec sleep 30\n");
    fs::permissions(script, fs::perms::owner_all);
    skc::ProcessInvoker silent(script);
    std::vector<skc::CompileRequest> requests;
    skc::process_compiled().clear();
    {
        Compiler compiler(Inv(Fn([&](const skc::CompileRequest& r) {
                              requests.push_back(r);
                              return silent.compile(r);
                          })),
                          o, settings_with("cc-1"));
        const auto started = std::chrono::steady_clock::now();
        const skc::Error e = error_of([&] { (void)compiler.compile(ops); });
        const auto took = std::chrono::steady_clock::now() - started;
        CHECK(e.code() == skc::Errc::timeout);
        CHECK(e.message() ==
              "the compiler did not finish within 1 s; its process group was killed. Last lines of its log:\n"
              "compiling");
        CHECK(fs::path(e.file()).filename() == "op_compiler.log");
        CHECK(std::string(e.what()) == e.file() + ": " + e.message());
        CHECK(took < 20s);  // killed, not waited for
        // One compile, of the 2 ops alone: no trial compile to find ops at fault, and the whole set
        // not compiled.
        REQUIRE(requests.size() == 1);
        CHECK(digests_in(requests[0].json_dir) == rest);
        CHECK(requests[0].timeout == 1s);
        // Nothing remembered, the part intact, nothing cached for the 2 ops.
        CHECK_FALSE(fs::exists(known_file(tmp.path())));
        CHECK(skc::KnownFailures(known_file(tmp.path()).parent_path(), "cc-1").list().empty());
        const skc::VerifyReport v = compiler.cache()->verify_all();
        CHECK(v.checked == 1);
        CHECK(v.bad.empty());
        const std::vector<skc::CacheEntry> entries = compiler.cache()->entries();
        REQUIRE(entries.size() == 1);
        CHECK(entries[0].key == part_key);
        CHECK(entries[0].ops == 4);
    }

    // A later process with a compiler that works (the same fingerprint, so a failure remembered would
    // leave the 2 ops out): the part from the cache, and only the 2 ops compiled.
    skc::process_compiled().clear();
    Compiler compiler(pc.invoker(), o, settings_with("cc-1"));
    const skc::CompileReport r = compiler.compile(ops);
    CHECK(r.outcome == skc::CompileOutcome::compiled);
    CHECK(r.work() == "compiled 2 of 6 ops (4 from 1 cached package)");
    CHECK(r.known_failed == 0);
    CHECK(r.failed == 0);
    CHECK(pc.calls == 2);
    CHECK(digests_in(pc.requests.back().json_dir) == rest);
    CHECK(compiler.cache()->verify_all().bad.empty());
    std::size_t parts = 0, rests = 0;  // the part's entry, and the 2 ops' entry under their own key
    for (const skc::CacheEntry& e : compiler.cache()->entries()) {
        parts += e.key == part_key && e.ops == 4 ? 1 : 0;
        rests += e.ops == 2 ? 1 : 0;
    }
    CHECK(parts == 1);
    CHECK(rests == 1);
}

TEST_CASE("a failure found but the rest failing otherwise: nothing is remembered") {
    TempDir tmp;
    const std::vector<skc::OpRecord> ops = many_ops(8);
    PackingCompiler pc;
    pc.name_bad = true;
    pc.bad = {skc::digest(ops[0])};
    pc.before = [&](const skc::CompileRequest& r) {
        if (skc::read_op_info_dir(r.json_dir).ops.size() == 7) throw skc::Error(skc::Errc::timeout, "too slow");
    };
    skc::process_compiled().clear();
    Compiler compiler(pc.invoker(), options_for(tmp.path()), settings_with("cc-1"));
    CHECK(error_of([&] { (void)compiler.compile(ops); }).code() == skc::Errc::timeout);
    CHECK(pc.calls == 2);
    CHECK_FALSE(fs::exists(known_file(tmp.path())));
}

TEST_CASE("known failures: merged between writers, per fingerprint, forgotten on request, unreadable as none") {
    TempDir tmp;
    const std::vector<skc::OpRecord> ops = many_ops(3);
    auto failed = [&](std::size_t i) {
        return skc::FailedOp{skc::digest(ops[i]), "MatMulV2", "op" + std::to_string(i) + ".json",
                             "why " + std::to_string(i)};
    };
    skc::KnownFailures a(tmp / "ns", "fp"), b(tmp / "ns", "fp");
    CHECK(a.list().empty());
    CHECK(a.add({failed(0)}) == 1);
    CHECK(b.add({failed(1), failed(0)}) == 1);  // op 0 is known already
    REQUIRE(a.list().size() == 2);
    CHECK(a.list()[1].file == "op1.json");
    CHECK(a.list()[1].message == "why 1");

    SUBCASE("two threads adding at once keep both") {
        skc::KnownFailures c(tmp / "ns", "fp"), d(tmp / "ns", "fp");
        std::thread t([&] { (void)c.add({failed(2)}); });
        (void)d.add({failed(2), failed(1)});
        t.join();
        CHECK(a.list().size() == 3);
    }
    SUBCASE("another fingerprint sees none, and its first failure replaces the list") {
        skc::KnownFailures other(tmp / "ns", "fp2");
        CHECK(other.list().empty());
        CHECK(other.add({failed(2)}) == 1);
        CHECK(a.list().empty());
        CHECK(other.list().size() == 1);
    }
    SUBCASE("forget") {
        CHECK(a.forget() == 2);
        CHECK(b.list().empty());
        CHECK_FALSE(fs::exists(tmp / "ns" / std::string(skc::KnownFailures::file_name)));
        CHECK(a.forget() == 0);
    }
    SUBCASE("forget what cannot be removed: an error naming the file, and the file left as it was") {
        const fs::path file = tmp / "other" / std::string(skc::KnownFailures::file_name);
        fs::create_directories(file / "in the way");
        skc::KnownFailures c(tmp / "other", "fp");
        const skc::Error e = error_of([&] { (void)c.forget(); });
        CHECK(e.code() == skc::Errc::io_error);
        CHECK(e.message().rfind("cannot remove the known failures: ", 0) == 0);
        CHECK(e.file() == file.string());
        CHECK(fs::is_directory(file / "in the way"));
    }
    SUBCASE("an unreadable list counts as none and is replaced by the next failure") {
        skc_test::spit(tmp / "ns" / std::string(skc::KnownFailures::file_name), "{not json");
        CHECK(a.list().empty());
        CHECK(a.add({failed(2)}) == 1);
        CHECK(b.list().size() == 1);
    }
    SUBCASE("read-only: the folder's list is read, what is learned stays in memory") {
        skc::KnownFailures ro(tmp / "ns", "fp", /*read_only=*/true);
        CHECK(ro.list().size() == 2);
        CHECK(ro.add({failed(2)}) == 1);
        CHECK(ro.list().size() == 3);
        CHECK(a.list().size() == 2);
    }
}

}  // namespace skc_isolate_test
