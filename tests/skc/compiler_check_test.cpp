// The compiler's fingerprint in the cache key: every compiler_check mode, the remembered content
// hash, and the errors.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include <sys/stat.h>
#include <utime.h>

#include <skc/compiler_check.hpp>
#include <skc/op_info_io.hpp>

#include "test_support.hpp"

namespace skc_compiler_check_test {

namespace {

namespace fs = std::filesystem;
using skc::CompilerCheck;

fs::path executable(const skc_test::TempDir& dir, const std::string& name, const std::string& body) {
    const fs::path p = dir / name;
    skc_test::spit(p, "#!/bin/sh\n" + body + "\n");
    fs::permissions(p, fs::perms::owner_all);
    return p;
}

std::string error_of(const std::string& text) {
    try {
        (void)skc::parse_compiler_check(text);
    } catch (const skc::Error& e) {
        CHECK(e.code() == skc::Errc::invalid_option);
        return e.what();
    }
    return "no error";
}

/// Sets a file's modification time (seconds since the epoch).
void set_mtime(const fs::path& p, long seconds) {
    struct utimbuf t {};
    t.actime = seconds;
    t.modtime = seconds;
    REQUIRE(::utime(p.c_str(), &t) == 0);
}

}  // namespace

TEST_CASE("parse: the five modes, and the errors") {
    CHECK(skc::parse_compiler_check("content") == CompilerCheck{});
    CHECK(skc::parse_compiler_check("mtime").mode == CompilerCheck::Mode::mtime);
    CHECK(skc::parse_compiler_check("none").mode == CompilerCheck::Mode::none);
    CHECK(skc::parse_compiler_check("string:8.0.RC1 build 7") ==
          CompilerCheck{CompilerCheck::Mode::string, "8.0.RC1 build 7"});
    CHECK(skc::parse_compiler_check("command:%compiler% --version") ==
          CompilerCheck{CompilerCheck::Mode::command, "%compiler% --version"});
    CHECK(error_of("contents") ==
          "option 'compiler_check': value \"contents\" is not accepted: use content, mtime, none, string:TEXT or "
          "command:CMD");
    CHECK(error_of("command:") ==
          "option 'compiler_check': command: needs a command, e.g. command:%compiler% --version");
    CHECK(skc::parse_options(skc::parse_json(R"({"compiler_check": "mtime"})")).compiler_check.mode ==
          CompilerCheck::Mode::mtime);
}

TEST_CASE("content: equal bytes at any path are one fingerprint; other bytes another") {
    skc_test::TempDir dir;
    const fs::path a = executable(dir, "a", "echo one"), b = executable(dir, "b", "echo one"),
                   c = executable(dir, "c", "echo two");
    const std::string fa = skc::compiler_fingerprint(a, {});
    CHECK(fa.rfind("content:", 0) == 0);
    CHECK(fa.size() == 8 + 32);
    CHECK(skc::compiler_fingerprint(b, {}) == fa);
    CHECK(skc::compiler_fingerprint(c, {}) != fa);
    // Looked up in PATH like the compiler is run.
    CHECK(skc::compiler_fingerprint("sh", {}).rfind("content:", 0) == 0);
}

TEST_CASE("content: remembered by path, size and modification time, so a compiler is hashed once") {
    skc_test::TempDir dir;
    const fs::path memo = dir / "memo";
    fs::create_directories(memo);
    const fs::path a = executable(dir, "a", "echo one");
    set_mtime(a, 1700000000);
    const std::string first = skc::compiler_fingerprint(a, {}, memo);
    CHECK(fs::exists(memo / "compilers"));
    // The same size and time, other bytes: the memo answers (proof it was not hashed again).
    skc_test::spit(a, "#!/bin/sh\necho two\n");
    set_mtime(a, 1700000000);
    CHECK(skc::compiler_fingerprint(a, {}, memo) == first);
    CHECK(skc::compiler_fingerprint(a, {}) != first);  // without the memo: hashed
    // A new modification time: hashed again, and remembered anew.
    set_mtime(a, 1700000100);
    const std::string second = skc::compiler_fingerprint(a, {}, memo);
    CHECK(second != first);
    CHECK(second == skc::compiler_fingerprint(a, {}));
    // A damaged memo is only a shortcut lost.
    skc_test::spit(memo / "compilers", "garbage\n\n\x01");
    CHECK(skc::compiler_fingerprint(a, {}, memo) == second);
}

TEST_CASE("mtime, none, string") {
    skc_test::TempDir dir;
    const fs::path a = executable(dir, "a", "echo one");
    set_mtime(a, 1700000000);
    const std::string size = std::to_string(fs::file_size(a));
    CHECK(skc::compiler_fingerprint(a, skc::parse_compiler_check("mtime")) == "mtime:" + size + ":1700000000000000000");
    CHECK(skc::compiler_fingerprint(a, skc::parse_compiler_check("none")) == "none");
    CHECK(skc::compiler_fingerprint(a, skc::parse_compiler_check("string:v7")) == "string:v7");
    CHECK(skc::compiler_fingerprint(dir / "missing", skc::parse_compiler_check("string:v7")) ==
          "string:v7");  // not read
}

TEST_CASE("command: the hash of what the command prints, %compiler% replaced; a failing command is an error") {
    skc_test::TempDir dir;
    const fs::path a = executable(dir, "a", "echo \"compiler 1.2 ($0 $1)\"");
    const std::string f = skc::compiler_fingerprint(a, skc::parse_compiler_check("command:%compiler% --version"));
    CHECK(f == "command:" + skc::detail::hash_bytes("compiler 1.2 (" + a.string() + " --version)\n").hex());
    CHECK(skc::compiler_fingerprint(a, skc::parse_compiler_check("command:echo 1")) !=
          skc::compiler_fingerprint(a, skc::parse_compiler_check("command:echo 2")));
    try {
        (void)skc::compiler_fingerprint(a, skc::parse_compiler_check("command:echo oops; exit 3"));
        FAIL("a failing command was accepted");
    } catch (const skc::Error& e) {
        CHECK(std::string(e.what()) ==
              "option 'compiler_check': the compiler check command \"echo oops; exit 3\" failed (exit status 3): "
              "\"oops\\x0a\"");
    }
}

TEST_CASE("a compiler that cannot be found or read is an error naming it") {
    skc_test::TempDir dir;
    try {
        (void)skc::compiler_fingerprint(dir / "missing", {});
        FAIL("no error");
    } catch (const skc::Error& e) {
        CHECK(std::string(e.what()) ==
              (dir / "missing").string() + ": cannot inspect the compiler: No such file or directory");
    }
    try {
        (void)skc::compiler_fingerprint("no-such-compiler-anywhere", {});
        FAIL("no error");
    } catch (const skc::Error& e) {
        CHECK(std::string(e.what()) == "no-such-compiler-anywhere: the compiler was not found in PATH");
    }
}

}  // namespace skc_compiler_check_test
