#include <doctest/doctest.h>

#include <fstream>

#include <chrono>
#include <regex>

#include <sys/stat.h>
#include <unistd.h>

#include <skc/layout.hpp>

#include "test_support.hpp"

namespace skc_layout_test {

namespace fs = std::filesystem;

namespace {

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const skc::Error& e) {
        return e.what();
    }
    return "no error";
}

/// Runs `fn` as an unprivileged user (root passes every permission check), in a child process.
/// Returns the child's exit status.
int as_unprivileged(const std::function<int()>& fn) {
    return skc_test::in_child([&] {
        if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return 90;
        return fn();
    });
}

}  // namespace

TEST_CASE("timestamps are YYYYmmddHHMMSSffffff in local time") {
    const std::string ts = skc::timestamp(std::chrono::system_clock::now());
    CHECK(std::regex_match(ts, std::regex("20[0-9]{2}[01][0-9][0-3][0-9][0-2][0-9][0-5][0-9][0-6][0-9][0-9]{6}")));
    std::tm tm{};
    tm.tm_year = 2026 - 1900;
    tm.tm_mon = 11;
    tm.tm_mday = 2;
    tm.tm_hour = 8;
    tm.tm_min = 5;
    tm.tm_sec = 9;
    tm.tm_isdst = -1;
    const auto t = std::chrono::system_clock::from_time_t(std::mktime(&tm)) + std::chrono::microseconds(42);
    CHECK(skc::timestamp(t) == "20261202080509000042");
}

TEST_CASE("every path of the output layout") {
    const skc::Layout l("/base");
    CHECK(l.outputs() == "/base/static_kernel_compile_outputs");
    CHECK(l.cache_dir() == "/base/static_kernel_compile_outputs/static_kernel_cache");
    CHECK(l.cache_index("8.0.RC1 beta", "Ascend 910B") ==
          "/base/static_kernel_compile_outputs/static_kernel_cache/CANN-8.0.RC1-beta_Ascend-910B.json");
    CHECK(l.cache_lock("8.0", "dev") == "/base/static_kernel_compile_outputs/static_kernel_cache/CANN-8.0_dev.lock");
    std::tm tm{};
    tm.tm_year = 126;
    tm.tm_mon = 0;
    tm.tm_mday = 31;
    tm.tm_hour = 23;
    tm.tm_min = 59;
    tm.tm_sec = 58;
    tm.tm_isdst = -1;
    const auto t = std::chrono::system_clock::from_time_t(std::mktime(&tm)) + std::chrono::microseconds(123456);
    const skc::RunLayout r = l.run(t, 4242);
    CHECK(r.dir() == "/base/static_kernel_compile_outputs/ts20260131235958123456_pid4242_outputs");
    CHECK(r.targets().filename() == "4242");
    CHECK(r.debug().filename() == "4242_debug");
    CHECK(r.opcompile().filename() == "4242_opcompile");
    CHECK(r.selected().filename() == "4242_opcompile_selected");
    CHECK(r.blacklisted().filename() == "4242_opcompile_blacklist");
    CHECK(r.gathered().filename() == "4242_opcompile_gathered");
    CHECK(r.package(t).filename() == "static_kernel_20260131235958123456.run");
}

TEST_CASE("toolchain versions and device names that would leave the cache folder are refused") {
    const skc::Layout l("/base");
    CHECK_EQ(error_of([&] { (void)l.cache_index("../8.0", "dev"); }),
             "toolchain version \"../8.0\" cannot be used in a file name: it must be non-empty and contain no '/', "
             "no NUL byte and no leading '.'");
    CHECK_EQ(error_of([&] { (void)l.cache_index("8.0", ""); }),
             "device name \"\" cannot be used in a file name: it must be non-empty and contain no '/', no NUL byte "
             "and no leading '.'");
    CHECK_EQ(error_of([&] { (void)l.cache_index("8.0", std::string("a\0b", 3)); }),
             "device name \"a\" cannot be used in a file name: it must be non-empty and contain no '/', no NUL byte "
             "and no leading '.'");
    // Too long together: the namespace's files would pass the file system's 255 bytes a name.
    CHECK(skc::Layout::cache_stem("8.0", std::string(skc::Layout::max_cache_stem - 9, 'd')).size() ==
          skc::Layout::max_cache_stem);
    CHECK_EQ(error_of([&] { (void)skc::Layout::cache_stem("8.0", std::string(skc::Layout::max_cache_stem - 8, 'd')); }),
             "the toolchain version and the device name are too long together: the cache namespace would be 201 bytes, "
             "at most 200");
}

TEST_CASE("create_run makes a fresh folder each time") {
    skc_test::TempDir dir;
    const skc::Layout l(dir.path());
    const skc::RunLayout a = l.create_run();
    const skc::RunLayout b = l.create_run();
    CHECK(a.dir() != b.dir());
    CHECK(fs::is_directory(a.dir()));
    CHECK(fs::is_directory(b.dir()));
    CHECK(a.dir().filename().string().find("_pid" + std::to_string(::getpid()) + "_outputs") != std::string::npos);
}

TEST_CASE("path safety: NUL bytes, '..' components and symlinked components are rejected") {
    skc_test::TempDir dir;
    fs::create_directory(dir / "real");
    fs::create_directory_symlink(dir / "real", dir / "link");
    const std::string base = dir.path().string();

    CHECK(skc::check_path_safety(dir / "real" / "not" / "yet") == dir / "real" / "not" / "yet");
    CHECK_EQ(error_of([&] { (void)skc::check_path_safety(base + "/a/../b", "base_dir"); }),
             base + "/a/../b: option 'base_dir': the path contains a '..' component; give a path without one");
    CHECK_EQ(error_of([&] { (void)skc::check_path_safety(fs::path(base + std::string("/x\0y", 4))); }),
             base + "/x: the path contains a NUL byte");
    CHECK_EQ(error_of([&] { (void)skc::check_path_safety(dir / "link" / "out"); }),
             base + "/link/out: component '" + base + "/link' is a symbolic link; give the real path instead");
    CHECK_EQ(error_of([&] { (void)skc::check_path_safety(""); }), "the path is empty");
}

TEST_CASE("resolve_base: explicit base, then the model cache directory unless force_eager, then cwd") {
    skc_test::TempDir dir;
    fs::create_directory(dir / "explicit");
    fs::create_directory(dir / "model_cache");
    skc::Options o;
    CHECK(skc::resolve_base(o, dir.path()) == dir.path());
    o.model_compile_cache = true;
    o.model_compile_cache_dir = (dir / "model_cache").string();
    CHECK(skc::resolve_base(o, dir.path()) == dir / "model_cache");
    o.force_eager = true;
    CHECK(skc::resolve_base(o, dir.path()) == dir.path());
    o.base_dir = (dir / "explicit").string();
    CHECK(skc::resolve_base(o, dir.path()) == dir / "explicit");
    o.base_dir = (dir / "missing").string();
    CHECK_EQ(error_of([&] { (void)skc::resolve_base(o, dir.path()); }),
             (dir / "missing").string() + ": option 'base_dir': cannot access: No such file or directory");
    // A file is no base: refused before anything is created inside it.
    { std::ofstream((dir / "file").string()) << "x"; }
    o.base_dir = (dir / "file").string();
    CHECK_EQ(error_of([&] { (void)skc::resolve_base(o, dir.path()); }),
             (dir / "file").string() + ": option 'base_dir': not a directory");
    CHECK(fs::is_regular_file(dir / "file"));
}

TEST_CASE("the base must be readable and writable: the error names the path and the permission") {
    skc_test::TempDir dir;
    fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                    fs::perms::others_read | fs::perms::others_exec);
    fs::create_directory(dir / "ro");
    fs::permissions(dir / "ro", fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                                    fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
    fs::create_directory(dir / "wo");
    fs::permissions(dir / "wo",
                    fs::perms::owner_write | fs::perms::owner_exec | fs::perms::others_write | fs::perms::others_exec);
    fs::create_directory(dir / "rw");
    fs::permissions(dir / "rw", fs::perms::all);
    const std::string ro = (dir / "ro").string();
    const std::string wo = (dir / "wo").string();
    const std::string rw = (dir / "rw").string();
    const int rc = as_unprivileged([&] {
        if (error_of([&] { skc::check_access(ro); }) != ro + ": not writable by this user (write permission missing)")
            return 1;
        if (error_of([&] { skc::check_access(wo); }) != wo + ": not readable by this user (read permission missing)")
            return 2;
        if (error_of([&] { skc::check_access(rw); }) != "no error") return 3;
        skc::Options o;
        o.base_dir = ro;
        if (error_of([&] { (void)skc::resolve_base(o); }) !=
            ro + ": option 'base_dir': not writable by this user (write permission missing)")
            return 4;
        return 0;
    });
    CHECK(rc == 0);
}

}  // namespace skc_layout_test
