// RunPackageInstaller with real makeself packages (built here with `makeself`, through posix_spawn)
// and real processes (tests/workers/install_worker.cpp, started with posix_spawn).
#include <doctest/doctest.h>

#include <skc/policy/installer.hpp>
#include <skc/policy/run_package_installer.hpp>

#include "run_packages.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace skc_policy_installer_test {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using skc_test::slurp;
using skc_test::spit;
using std::chrono::milliseconds;

using Kernel = skc_test::PackagedKernel;
using skc_test::digest_of;
using skc_test::make_package;
using skc_test::run;

// What install_worker prints after installing.
const std::string extracted_line = "installed extracted=1 reused=0\n";
const std::string held_line = "installed extracted=0 reused=0\n";
const std::string reused_line = "installed extracted=0 reused=1\n";

fs::path make_simple(const fs::path& out, const std::string& stem, int digest) {
    return make_package(out, stem, {{digest_of(digest), "Add", "kernels/" + stem + ".so", "kernel " + stem + "\n"}});
}

/// The global index as digest -> package.
std::map<std::string, std::string> index_packages(const fs::path& lib, const std::string& device = "dev0") {
    std::map<std::string, std::string> out;
    const fs::path p = lib / "static_kernel/host/config" / device / "binary_info_config.json";
    if (!fs::exists(p)) return out;
    const skc::Value v = skc::parse_json(slurp(p));
    for (const auto& m : v.find("kernels")->as_object()) out[m.key] = m.value.find("package")->as_string();
    return out;
}

std::vector<std::string> config_stems(const fs::path& lib) {
    std::vector<std::string> out;
    std::istringstream in(slurp(lib / "static_kernel/host/config.ini"));
    bool packages = false;
    for (std::string line; std::getline(in, line);) {
        if (line.empty() || line[0] == '#') continue;
        if (line[0] == '[') packages = line == "[packages]";
        else if (packages) out.push_back(line.substr(0, line.find(" = ")));
    }
    return out;
}

/// Processes started by a test; killed and reaped at scope exit.
class Workers {
public:
    ~Workers() {
        for (pid_t p : live_) {
            ::kill(p, SIGKILL);
            int s = 0;
            ::waitpid(p, &s, 0);
        }
    }
    pid_t spawn(const std::vector<std::string>& args, const fs::path& out) {
        return spawn_program(SKC_INSTALL_WORKER, args, out);
    }
    pid_t spawn_program(const std::string& program, const std::vector<std::string>& args, const fs::path& out) {
        std::vector<std::string> all{program};
        all.insert(all.end(), args.begin(), args.end());
        std::vector<char*> argv;
        for (auto& a : all) argv.push_back(a.data());
        argv.push_back(nullptr);
        posix_spawn_file_actions_t fa;
        ::posix_spawn_file_actions_init(&fa);
        ::posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        ::posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        pid_t pid = -1;
        const int rc = ::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
        ::posix_spawn_file_actions_destroy(&fa);
        REQUIRE(rc == 0);
        live_.insert(pid);
        return pid;
    }
    int wait(pid_t pid, milliseconds timeout = milliseconds(20000)) {
        const auto deadline = Clock::now() + timeout;
        for (;;) {
            int status = 0;
            if (::waitpid(pid, &status, WNOHANG) == pid) {
                live_.erase(pid);
                return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            }
            if (Clock::now() > deadline) {
                ::kill(pid, SIGKILL);
                ::waitpid(pid, &status, 0);
                live_.erase(pid);
                return -1;
            }
            std::this_thread::sleep_for(milliseconds(2));
        }
    }

private:
    std::set<pid_t> live_;
};

/// Waits until `out` holds a line starting with "installed" (or an error); returns the text.
std::string wait_installed(const fs::path& out) {
    const auto deadline = Clock::now() + milliseconds(20000);
    for (;;) {
        const std::string t = slurp(out);
        if (t.find('\n') != std::string::npos || Clock::now() > deadline) return t;
        std::this_thread::sleep_for(milliseconds(2));
    }
}

std::size_t holder_count(const fs::path& lib, const std::string& stem) {
    std::error_code ec;
    std::size_t n = 0;
    for (auto it = fs::directory_iterator(lib / "static_kernel/host/.holders" / stem, ec);
         !ec && it != fs::directory_iterator(); ++it)
        ++n;
    return n;
}

}  // namespace

TEST_CASE("install lays out the package and the shared files; releasing removes them") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path pkg = make_package(
        tmp.path(), "static_kernel_20240101000000",
        {{digest_of(1), "Add", "kernels/add.so", "add\n"}, {digest_of(2), "Mul", "kernels/sub/mul.so", "mul\n"}});
    skc::RunPackageInstaller installer;
    {
        skc::Installation inst = installer.install(pkg, lib, {});
        CHECK(inst.extracted());
        CHECK(inst.holds());
        const fs::path base = lib / "static_kernel/host";
        CHECK(inst.folder() == base / "static_kernel_20240101000000");
        CHECK(slurp(inst.folder() / "kernels/sub/mul.so") == "mul\n");
        CHECK(fs::exists(inst.folder() / "binary_info_config.json"));
        CHECK(fs::exists(inst.folder() / "uninstall.sh"));
        CHECK(fs::exists(base / "uninstall.sh"));
        CHECK(config_stems(lib) == std::vector<std::string>{"static_kernel_20240101000000"});
        const skc::Value idx = skc::parse_json(slurp(base / "config/dev0/binary_info_config.json"));
        const skc::Value* k = idx.find("kernels")->find(digest_of(2));
        REQUIRE(k != nullptr);
        CHECK(k->find("file")->as_string() == "static_kernel_20240101000000/kernels/sub/mul.so");
        CHECK(k->find("symbol")->as_string() == "sym_static_kernel_20240101000000_1");
        CHECK(k->find("op_type")->as_string() == "Mul");
        CHECK(holder_count(lib, "static_kernel_20240101000000") == 1);
        // A second install in the same process: no extraction, one more reference.
        skc::Installation again = installer.install(pkg, lib, {});
        CHECK_FALSE(again.extracted());
        CHECK(holder_count(lib, "static_kernel_20240101000000") == 2);
        again.release();
        CHECK(fs::exists(inst.folder()));
        const auto listed = installer.list(lib, "host");
        REQUIRE(listed.size() == 1);
        CHECK(listed[0].device == "dev0");
        CHECK(listed[0].holders.size() == 1);
    }
    CHECK_FALSE(fs::exists(lib / "static_kernel/host/static_kernel_20240101000000"));
    CHECK(config_stems(lib).empty());
    CHECK(index_packages(lib).empty());
    CHECK_FALSE(fs::exists(lib / "static_kernel/host/.holders/static_kernel_20240101000000"));
}

TEST_CASE("a persistent install stays until uninstall(persistent = true)") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path pkg = make_simple(tmp.path(), "pk", 7);
    skc::RunPackageInstaller installer;
    skc::InstallOptions opt;
    opt.persistent = true;
    {
        skc::Installation inst = installer.install(pkg, lib, opt);
        CHECK_FALSE(inst.holds());
    }
    CHECK(installer.cleanup(lib, "host") == 0);
    CHECK(index_packages(lib).at(digest_of(7)) == "pk");
    CHECK_FALSE(installer.uninstall(lib, "pk", "host", false));
    CHECK(installer.uninstall(lib, "pk", "host", true));
    CHECK(index_packages(lib).empty());
}

TEST_CASE("two processes installing one package share it: the first to leave does not remove it") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path pkg = make_simple(tmp.path(), "shared", 3);
    Workers w;
    const pid_t a = w.spawn({lib.string(), pkg.string(), "wait-file", (tmp / "go-a").string()}, tmp / "a.out");
    CHECK(wait_installed(tmp / "a.out") == extracted_line);
    const pid_t b = w.spawn({lib.string(), pkg.string(), "wait-file", (tmp / "go-b").string()}, tmp / "b.out");
    CHECK(wait_installed(tmp / "b.out") == held_line);
    CHECK(holder_count(lib, "shared") == 2);
    spit(tmp / "go-a", "");
    CHECK(w.wait(a) == 0);
    CHECK(fs::exists(lib / "static_kernel/host/shared/kernels/shared.so"));
    CHECK(index_packages(lib).at(digest_of(3)) == "shared");
    CHECK(holder_count(lib, "shared") == 1);
    spit(tmp / "go-b", "");
    CHECK(w.wait(b) == 0);
    CHECK_FALSE(fs::exists(lib / "static_kernel/host/shared"));
    CHECK(fs::is_directory(lib / "static_kernel/host/.kept/shared"));
    CHECK(index_packages(lib).empty());
}

TEST_CASE("process-scoped installs go at exit(), with the handle, and on SIGTERM; SIGKILL leaves an orphan") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path pkg = make_simple(tmp.path(), "proc", 4);
    const fs::path folder = lib / "static_kernel/host/proc";
    const fs::path kept = lib / "static_kernel/host/.kept/proc";
    skc::RunPackageInstaller installer;
    Workers w;
    for (const std::string mode : {"exit", "scope"}) {
        CAPTURE(mode);
        const pid_t p = w.spawn({lib.string(), pkg.string(), mode}, tmp / "x.out");
        CHECK(w.wait(p) == 0);
        // The first process extracts; the package is kept when its holder goes, and the next reuses it.
        CHECK(slurp(tmp / "x.out") == (mode == "exit" ? extracted_line : reused_line));
        CHECK_FALSE(fs::exists(folder));
        CHECK(fs::is_directory(kept));
        CHECK(config_stems(lib).empty());
    }
    {  // SIGTERM: the handler unlinks the holder and the process dies of SIGTERM
        const pid_t p = w.spawn({lib.string(), pkg.string(), "wait"}, tmp / "t.out");
        CHECK(wait_installed(tmp / "t.out") == reused_line);
        CHECK(holder_count(lib, "proc") == 1);
        ::kill(p, SIGTERM);
        CHECK(w.wait(p) == 128 + SIGTERM);
        CHECK(holder_count(lib, "proc") == 0);
        CHECK(installer.cleanup(lib, "host") == 1);
        CHECK_FALSE(fs::exists(folder));
        CHECK(fs::is_directory(kept));
        CHECK(index_packages(lib).empty());
    }
    {  // SIGKILL: the holder stays, names a dead process, and the next install cleans up
        const pid_t p = w.spawn({lib.string(), pkg.string(), "wait"}, tmp / "k.out");
        CHECK(wait_installed(tmp / "k.out") == reused_line);
        ::kill(p, SIGKILL);
        CHECK(w.wait(p) == 128 + SIGKILL);
        CHECK(holder_count(lib, "proc") == 1);
        CHECK(index_packages(lib).at(digest_of(4)) == "proc");
        const fs::path other = make_simple(tmp.path(), "other", 5);
        skc::Installation inst = installer.install(other, lib, {});
        CHECK_FALSE(fs::exists(folder));
        CHECK(fs::is_directory(kept));  // uninstalled, not deleted
        CHECK(index_packages(lib) == std::map<std::string, std::string>{{digest_of(5), "other"}});
        CHECK(config_stems(lib) == std::vector<std::string>{"other"});
    }
}

TEST_CASE("8 processes installing different packages at once") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    std::vector<fs::path> pkgs;
    for (int i = 0; i < 8; ++i) pkgs.push_back(make_simple(tmp.path(), "conc" + std::to_string(i), 100 + i));
    Workers w;
    std::vector<pid_t> pids;
    for (int i = 0; i < 8; ++i)
        pids.push_back(
            w.spawn({lib.string(), pkgs[i].string(), "persistent"}, tmp / ("c" + std::to_string(i) + ".out")));
    for (pid_t p : pids) CHECK(w.wait(p) == 0);
    const auto idx = index_packages(lib);
    CHECK(idx.size() == 8);
    for (int i = 0; i < 8; ++i) CHECK(idx.at(digest_of(100 + i)) == "conc" + std::to_string(i));
    auto stems = config_stems(lib);
    std::sort(stems.begin(), stems.end());
    CHECK(stems == std::vector<std::string>{"conc0", "conc1", "conc2", "conc3", "conc4", "conc5", "conc6", "conc7"});
    for (const auto& e : fs::directory_iterator(lib / "static_kernel/host"))
        CHECK(e.path().filename().string().rfind(".staging", 0) != 0);
}

TEST_CASE("the last installed package wins a digest; uninstalling it brings the earlier one back") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const std::string d = digest_of(42);
    const fs::path p1 = make_package(tmp.path(), "first", {{d, "Add", "kernels/a.so", "first\n"}});
    const fs::path p2 = make_package(
        tmp.path(), "second", {{d, "Add", "kernels/b.so", "second\n"}, {digest_of(43), "Mul", "kernels/c.so", "c\n"}});
    skc::RunPackageInstaller installer;
    skc::Installation i1 = installer.install(p1, lib, {});
    skc::Installation i2 = installer.install(p2, lib, {});
    CHECK(index_packages(lib) == std::map<std::string, std::string>{{d, "second"}, {digest_of(43), "second"}});
    CHECK(config_stems(lib) == std::vector<std::string>{"first", "second"});
    CHECK(installer.uninstall(lib, "second", "host", false));
    CHECK_FALSE(fs::exists(i2.folder()));
    i2.release();  // inert now
    CHECK(index_packages(lib) == std::map<std::string, std::string>{{d, "first"}});
    const skc::Value idx = skc::parse_json(slurp(lib / "static_kernel/host/config/dev0/binary_info_config.json"));
    CHECK(idx.find("kernels")->find(d)->find("file")->as_string() == "first/kernels/a.so");
}

TEST_CASE(
    "an installed package's own index altered since: its names are checked again when the global index is rebuilt") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path p1 =
        make_package(tmp.path(), "first",
                     {{digest_of(1), "Add", "kernels/a.so", "a\n"}, {digest_of(2), "Mul", "kernels/b.so", "b\n"}});
    const fs::path p2 = make_package(tmp.path(), "second", {{digest_of(3), "Relu", "kernels/c.so", "c\n"}});
    skc::RunPackageInstaller installer;
    skc::Installation i1 = installer.install(p1, lib, {});
    // Another process (or a person) rewrites the installed package's index: a file outside the op
    // library, and a digest that is not one.
    skc_test::spit(i1.folder() / "binary_info_config.json",
                   R"({"format": "skc-run-package", "version": 1, "backend": "host", "device": "dev0", "kernels": [)"
                   R"({"digest": ")" +
                       digest_of(1) +
                       R"(", "op_type": "Add", "file": "kernels/../../../../victim.so", "symbol": "s"},)"
                       R"({"digest": "../x", "op_type": "Mul", "file": "kernels/b.so", "symbol": "s"},)"
                       R"({"digest": ")" +
                       digest_of(2) + R"(", "op_type": "Mul", "file": "kernels/b.so", "symbol": "s"}]})");
    skc::Installation i2 = installer.install(p2, lib, {});  // rebuilds the global index
    CHECK(index_packages(lib) == std::map<std::string, std::string>{{digest_of(2), "first"}, {digest_of(3), "second"}});
    const std::string text = slurp(lib / "static_kernel/host/config/dev0/binary_info_config.json");
    CHECK(text.find("victim") == std::string::npos);
    CHECK(text.find("../x") == std::string::npos);
}

TEST_CASE("bad packages are refused and leave the op library unchanged") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    skc::RunPackageInstaller installer;
    skc::InstallOptions keep;
    keep.persistent = true;
    installer.install(make_simple(tmp.path(), "good", 1), lib, keep);
    const auto before = skc_test::snapshot(lib);
    auto refused = [&](const fs::path& pkg) -> skc::Error {
        try {
            installer.install(pkg, lib, {});
        } catch (const skc::Error& e) {
            return e;
        }
        FAIL("installed " << pkg);
        return skc::Error(skc::Errc::io_error, "");
    };
    SUBCASE("truncated") {
        const fs::path good = make_simple(tmp.path(), "trunc", 2);
        std::string bytes = slurp(good);
        bytes.resize(bytes.size() - 40);
        spit(good, bytes);
        const skc::Error e = refused(good);
        CHECK(e.code() == skc::Errc::corrupt);
        CHECK(e.file() == good.string());
        CHECK(e.message() == "run package trunc: extraction into " + (tmp / "lib/static_kernel/host").string() +
                                 " failed (makeself exited with status 2). Last lines of its output:\n"
                                 " Unexpected archive size.");
    }
    SUBCASE("corrupt payload") {
        const fs::path good = make_simple(tmp.path(), "corr", 2);
        std::string bytes = slurp(good);
        bytes[bytes.size() - 30] = static_cast<char>(bytes[bytes.size() - 30] ^ 0x55);
        spit(good, bytes);
        const skc::Error e = refused(good);
        CHECK(e.code() == skc::Errc::corrupt);
        CHECK(e.message().rfind(
                  "run package corr: extraction into " + (tmp / "lib/static_kernel/host").string() +
                      " failed (makeself exited with status 2). Last lines of its output:\nError in MD5 checksums: ",
                  0) == 0);
    }
    SUBCASE("../ in a file name") {
        const fs::path bad = make_package(tmp.path(), "evil", {{digest_of(9), "Add", "kernels/../../x.so", ""}});
        const skc::Error e = refused(bad);
        CHECK(e.code() == skc::Errc::unsafe_path);
        CHECK(e.message() ==
              "run package evil: kernel file name \"kernels/../../x.so\" is not accepted: it must be a "
              "relative path below kernels/ without '.', '..' or empty parts");
    }
    SUBCASE("missing kernel file") {
        const fs::path bad = make_package(tmp.path(), "missing", {{digest_of(9), "Add", "kernels/none.so", ""}});
        const skc::Error e = refused(bad);
        CHECK(e.code() == skc::Errc::corrupt);
        CHECK(e.message() == "run package missing: kernel file \"kernels/none.so\" is missing");
    }
    SUBCASE("bad digest") {
        const fs::path bad = make_package(tmp.path(), "baddig", {{"xyz", "Add", "kernels/a.so", "a"}});
        const skc::Error e = refused(bad);
        CHECK(e.message() ==
              "run package baddig: bad binary_info_config.json: kernels[0].digest must be 32 lowercase hex digits");
    }
    CHECK(skc_test::snapshot(lib) == before);
}

TEST_CASE("NoInstall records the calls") {
    skc::NoInstall none;
    skc::Installation i = none.install("/x/pkg_1.run", "/lib", {});
    CHECK(i.stem() == "pkg_1");
    CHECK_FALSE(i.holds());
    CHECK_FALSE(none.uninstall("/lib", "pkg_1", "host", true));
    CHECK(none.list("/lib", "host").empty());
    REQUIRE(none.calls.size() == 3);
    CHECK(none.calls[0].what == "install");
    CHECK(none.calls[1].persistent);
}

// ---- kept extractions ------------------------------------------------------------------------------

namespace {

/// The stems kept in the op library's .kept/, sorted.
std::vector<std::string> kept_stems(const fs::path& lib) {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(lib / "static_kernel/host/.kept", ec))
        if (e.is_directory()) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

/// A field of the identity file of a kept or installed package folder.
std::string identity_field(const fs::path& folder, const std::string& field) {
    std::istringstream in(slurp(folder / ".skc-identity"));
    for (std::string line; std::getline(in, line);)
        if (line.rfind(field + " ", 0) == 0) return line.substr(field.size() + 1);
    return {};
}

/// The shared files and the package folder of an op library, to compare a reuse with a fresh install.
std::set<std::string> installed_state(const fs::path& lib, const std::string& stem) {
    const fs::path base = lib / "static_kernel/host";
    std::set<std::string> out;
    for (const char* f : {"config.ini", "uninstall.sh", "config/dev0/binary_info_config.json"})
        out.insert(std::string(f) + "=" + slurp(base / f));
    for (const std::string& line : skc_test::snapshot(base / stem)) out.insert(stem + "/" + line);
    return out;
}

skc::InstallOptions keep(std::uint64_t bytes) {
    skc::InstallOptions opt;
    opt.keep_bytes = bytes;
    return opt;
}

}  // namespace

TEST_CASE("a second process installing a held package does not extract it; both are listed as holders") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path pkg = make_simple(tmp.path(), "held", 12);
    skc::RunPackageInstaller installer;
    Workers w;
    const pid_t a = w.spawn({lib.string(), pkg.string(), "wait-file", (tmp / "go").string()}, tmp / "a.out");
    CHECK(wait_installed(tmp / "a.out") == extracted_line);
    const pid_t b = w.spawn({lib.string(), pkg.string(), "wait-file", (tmp / "go").string()}, tmp / "b.out");
    CHECK(wait_installed(tmp / "b.out") == held_line);
    const auto listed = installer.list(lib, "host");
    REQUIRE(listed.size() == 1);
    REQUIRE(listed[0].holders.size() == 2);
    std::set<std::string> pids;
    for (const std::string& h : listed[0].holders) pids.insert(h.substr(0, h.find('-')));
    CHECK(pids == std::set<std::string>{std::to_string(a), std::to_string(b)});
    CHECK(kept_stems(lib).empty());
    spit(tmp / "go", "");
    CHECK(w.wait(a) == 0);
    CHECK(w.wait(b) == 0);
    CHECK(kept_stems(lib) == std::vector<std::string>{"held"});
    CHECK(installer.list(lib, "host").empty());
}

TEST_CASE(
    "the last holder's release keeps the package; the next process reuses it, with the shared files of a fresh "
    "install") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path base = lib / "static_kernel/host";
    const fs::path pkg = make_package(
        tmp.path(), "reuse",
        {{digest_of(1), "Add", "kernels/add.so", "add\n"}, {digest_of(2), "Mul", "kernels/sub/mul.so", "mul\n"}});
    skc::RunPackageInstaller installer;
    Workers w;
    const pid_t a = w.spawn({lib.string(), pkg.string(), "wait-file", (tmp / "go-a").string()}, tmp / "a.out");
    CHECK(wait_installed(tmp / "a.out") == extracted_line);
    const std::set<std::string> fresh = installed_state(lib, "reuse");
    spit(tmp / "go-a", "");
    CHECK(w.wait(a) == 0);

    // Uninstalled: out of config.ini, the index and list(), but kept with its identity.
    CHECK_FALSE(fs::exists(base / "reuse"));
    CHECK_FALSE(fs::exists(base / ".holders/reuse"));
    CHECK(config_stems(lib).empty());
    CHECK(index_packages(lib).empty());
    CHECK(installer.list(lib, "host").empty());
    CHECK(slurp(base / "uninstall.sh").find("reuse") == std::string::npos);
    CHECK(kept_stems(lib) == std::vector<std::string>{"reuse"});
    CHECK(identity_field(base / ".kept/reuse", "checksum") == skc::detail::hash_bytes(slurp(pkg)).hex());
    CHECK(identity_field(base / ".kept/reuse", "package_bytes") == std::to_string(fs::file_size(pkg)));

    const pid_t b = w.spawn({lib.string(), pkg.string(), "wait-file", (tmp / "go-b").string()}, tmp / "b.out");
    CHECK(wait_installed(tmp / "b.out") == reused_line);
    CHECK(installed_state(lib, "reuse") == fresh);
    CHECK(kept_stems(lib).empty());
    const auto listed = installer.list(lib, "host");
    REQUIRE(listed.size() == 1);
    CHECK(listed[0].holders.size() == 1);
    CHECK(listed[0].holders[0].rfind(std::to_string(b) + "-", 0) == 0);
    spit(tmp / "go-b", "");
    CHECK(w.wait(b) == 0);
    CHECK(kept_stems(lib) == std::vector<std::string>{"reuse"});
    CHECK(config_stems(lib).empty());
}

TEST_CASE("a package with the same stem and another checksum is extracted, not reused") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path v1 = make_simple(tmp / "v1", "same", 1);
    const fs::path v2 =
        make_package(tmp / "v2", "same", {{digest_of(2), "Mul", "kernels/same.so", "another kernel\n"}});
    skc::RunPackageInstaller installer;
    installer.install(v1, lib, {}).release();
    REQUIRE(kept_stems(lib) == std::vector<std::string>{"same"});
    {
        skc::Installation inst = installer.install(v2, lib, {});
        CHECK(inst.extracted());
        CHECK_FALSE(inst.reused());
        CHECK(slurp(inst.folder() / "kernels/same.so") == "another kernel\n");
        CHECK(index_packages(lib) == std::map<std::string, std::string>{{digest_of(2), "same"}});
        CHECK(kept_stems(lib).empty());  // the other package's extraction is gone
    }
    SUBCASE("the checksum the host gives decides") {
        skc::InstallOptions opt;
        opt.checksum = skc::detail::hash_bytes(slurp(v2));  // as the cache entry records it
        skc::Installation same = installer.install(v2, lib, opt);
        CHECK(same.reused());
        CHECK_FALSE(same.extracted());
        same.release();
        opt.checksum = skc::detail::hash_bytes("another package");
        skc::Installation other = installer.install(v2, lib, opt);
        CHECK(other.extracted());
        CHECK_FALSE(other.reused());
    }
    SUBCASE("computed from the file when not given") {
        skc::Installation again = installer.install(v2, lib, {});
        CHECK(again.reused());
        CHECK(slurp(again.folder() / "kernels/same.so") == "another kernel\n");
    }
}

TEST_CASE("kept extractions beyond the keep limit go, least recently released first; with 0 nothing is kept") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path kept = lib / "static_kernel/host/.kept";
    // Same-length stems and contents: every extraction has the same size.
    const fs::path a = make_simple(tmp.path(), "lru_a", 1), b = make_simple(tmp.path(), "lru_b", 2),
                   c = make_simple(tmp.path(), "lru_c", 3), d = make_simple(tmp.path(), "lru_d", 4);
    skc::RunPackageInstaller installer;
    installer.install(a, lib, {}).release();
    installer.install(b, lib, {}).release();
    CHECK(kept_stems(lib) == std::vector<std::string>{"lru_a", "lru_b"});
    const std::uint64_t size = std::stoull(identity_field(kept / "lru_a", "extracted_bytes"));
    CHECK(size > 0);
    CHECK(identity_field(kept / "lru_b", "extracted_bytes") == std::to_string(size));

    // Room for two: releasing a third evicts the least recently released.
    skc::Installation hc = installer.install(c, lib, keep(2 * size));
    CHECK(kept_stems(lib) == std::vector<std::string>{"lru_a", "lru_b"});
    hc.release();
    CHECK(kept_stems(lib) == std::vector<std::string>{"lru_b", "lru_c"});
    // A reuse makes b the most recently released: d's release evicts c.
    skc::Installation hb = installer.install(b, lib, keep(2 * size));
    CHECK(hb.reused());
    hb.release();
    installer.install(d, lib, keep(2 * size)).release();
    CHECK(kept_stems(lib) == std::vector<std::string>{"lru_b", "lru_d"});
    // The limit recorded by the latest install also applies to cleanups without options.
    CHECK(slurp(kept / ".limit") == std::to_string(2 * size) + "\n");
    {
        skc::InstallOptions persistent = keep(2 * size);
        persistent.persistent = true;
        installer.install(a, lib, persistent);
        CHECK(installer.uninstall(lib, "lru_a", "host", true));
        CHECK(kept_stems(lib) == std::vector<std::string>{"lru_a", "lru_d"});
    }
    // A package larger than the limit is not kept.
    installer.install(c, lib, keep(size - 1)).release();
    CHECK(kept_stems(lib).empty());

    // 0: the install evicts everything kept, writes no identity, and its package is deleted at release.
    installer.install(a, lib, {}).release();
    REQUIRE(kept_stems(lib) == std::vector<std::string>{"lru_a"});
    skc::Installation h0 = installer.install(b, lib, keep(0));
    CHECK(kept_stems(lib).empty());
    CHECK_FALSE(fs::exists(h0.folder() / ".skc-identity"));
    h0.release();
    CHECK(kept_stems(lib).empty());
    CHECK_FALSE(fs::exists(h0.folder()));
    CHECK(config_stems(lib).empty());
}

TEST_CASE("a damaged kept extraction is not reused: the package is extracted again, without an error") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path kept = lib / "static_kernel/host/.kept/dmg";
    const fs::path pkg = make_package(
        tmp.path(), "dmg",
        {{digest_of(1), "Add", "kernels/a.so", "a kernel\n"}, {digest_of(2), "Mul", "kernels/b.so", "b kernel\n"}});
    skc::RunPackageInstaller installer;
    installer.install(pkg, lib, {}).release();
    REQUIRE(fs::is_directory(kept));
    SUBCASE("index removed") { fs::remove(kept / "binary_info_config.json"); }
    SUBCASE("kernel file removed") { fs::remove(kept / "kernels/b.so"); }
    SUBCASE("kernel file cut short") { spit(kept / "kernels/a.so", "a"); }
    SUBCASE("index rewritten to name a file outside kernels/") {
        spit(kept / "binary_info_config.json",
             R"({"format": "skc-run-package", "version": 1, "backend": "host", "device": "dev0", "kernels": [)"
             R"({"digest": ")" +
                 digest_of(1) + R"(", "op_type": "Add", "file": "kernels/../../x.so", "symbol": "s"}]})");
    }
    SUBCASE("identity removed") { fs::remove(kept / ".skc-identity"); }
    SUBCASE("identity garbled") { spit(kept / ".skc-identity", "checksum 0\n"); }
    skc::Installation inst = installer.install(pkg, lib, {});
    CHECK(inst.extracted());
    CHECK_FALSE(inst.reused());
    CHECK(slurp(inst.folder() / "kernels/a.so") == "a kernel\n");
    CHECK(slurp(inst.folder() / "kernels/b.so") == "b kernel\n");
    CHECK(index_packages(lib) == std::map<std::string, std::string>{{digest_of(1), "dmg"}, {digest_of(2), "dmg"}});
    CHECK(kept_stems(lib).empty());
}

/// How many times `name` was renamed into `dir` while `f` ran (inotify): each publication of the
/// shared files renames a new config.ini into place once.
template <class F>
int renames_into(const fs::path& dir, const std::string& name, F&& f) {
    const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::inotify_add_watch(fd, dir.c_str(), IN_MOVED_TO) >= 0);
    f();
    int n = 0;
    alignas(inotify_event) char buf[1 << 16];
    for (ssize_t len; (len = ::read(fd, buf, sizeof buf)) > 0;)
        for (char* p = buf; p < buf + len;) {
            const auto* e = reinterpret_cast<const inotify_event*>(p);
            if (e->len > 0 && name == e->name) ++n;
            p += sizeof(inotify_event) + e->len;
        }
    ::close(fd);
    return n;
}

TEST_CASE("install_kept installs the kept and installed packages before the first to extract, with one publication") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path base = lib / "static_kernel/host";
    // kb and kc share a kernel: the later installed wins it.
    const fs::path held = make_simple(tmp.path(), "held", 1), ka = make_simple(tmp.path(), "ka", 2),
                   kb = make_simple(tmp.path(), "kb", 3), kc = make_simple(tmp.path(), "kc", 3),
                   fresh = make_simple(tmp.path(), "fresh", 4);
    skc::RunPackageInstaller installer;
    for (const fs::path& p : {ka, kb, kc}) installer.install(p, lib, {}).release();
    skc::Installation h = installer.install(held, lib, {});
    REQUIRE(kept_stems(lib) == std::vector<std::string>{"ka", "kb", "kc"});
    auto request = [](const fs::path& p) { return skc::InstallRequest{p, {}}; };

    SUBCASE("in order, up to the first package to extract") {
        std::vector<skc::Installation> got;
        const int published = renames_into(base, "config.ini", [&] {
            got = installer.install_kept(
                {request(kc), request(held), request(ka), request(kb), request(fresh), request(kc)}, lib);
        });
        CHECK(published == 1);
        REQUIRE(got.size() == 4);
        CHECK(got[0].reused());
        CHECK_FALSE(got[1].reused());  // installed already: held, not moved
        CHECK_FALSE(got[1].extracted());
        CHECK(got[2].reused());
        CHECK(got[3].reused());
        CHECK(config_stems(lib) == std::vector<std::string>{"held", "kc", "ka", "kb"});
        CHECK(index_packages(lib) ==
              std::map<std::string, std::string>{{digest_of(1), "held"}, {digest_of(2), "ka"}, {digest_of(3), "kb"}});
        CHECK(kept_stems(lib).empty());
        CHECK(holder_count(lib, "held") == 2);
        // The rest is install()'s: one extraction.
        skc::Installation rest = installer.install(fresh, lib, {});
        CHECK(rest.extracted());
        // Each handle holds its package as install()'s does: released, it is kept again.
        got.clear();
        CHECK(kept_stems(lib) == std::vector<std::string>{"ka", "kb", "kc"});
        CHECK(config_stems(lib) == std::vector<std::string>{"held", "fresh"});
    }
    SUBCASE("nothing to reuse: nothing installed, nothing published") {
        std::vector<skc::Installation> got;
        CHECK(renames_into(base, "config.ini", [&] {
                  got = installer.install_kept({request(fresh), request(ka)}, lib);
              }) == 0);
        CHECK(got.empty());
        CHECK(kept_stems(lib) == std::vector<std::string>{"ka", "kb", "kc"});
    }
    SUBCASE("a damaged kept extraction ends the prefix and is deleted; install() extracts it") {
        fs::remove(base / ".kept/kb/kernels/kb.so");
        std::vector<skc::Installation> got = installer.install_kept({request(ka), request(kb), request(kc)}, lib);
        REQUIRE(got.size() == 1);
        CHECK(kept_stems(lib) == std::vector<std::string>{"kc"});
        skc::Installation b = installer.install(kb, lib, {});
        CHECK(b.extracted());
        CHECK(slurp(b.folder() / "kernels/kb.so") == "kernel kb\n");
        CHECK(config_stems(lib) == std::vector<std::string>{"held", "ka", "kb"});
    }
    SUBCASE("another backend ends the prefix") {
        skc::InstallRequest other = request(kb);
        other.options.backend = "other";
        CHECK(installer.install_kept({request(ka), other, request(kc)}, lib).size() == 1);
    }
    SUBCASE("a package stem that is not accepted: an error, and nothing changed") {
        const fs::path bad = tmp / "bad name.run";
        fs::copy_file(ka, bad);
        const std::string before = slurp(base / "config.ini");
        try {
            installer.install_kept({request(ka), request(bad)}, lib);
            FAIL("installed " << bad);
        } catch (const skc::Error& e) {
            CHECK(e.code() == skc::Errc::invalid_name);
            CHECK(e.file() == bad.string());
            CHECK(
                e.message() ==
                "package stem \"bad name\" is not accepted: use letters, digits, '_', '-', '.', not starting with '.'");
        }
        CHECK(slurp(base / "config.ini") == before);
        CHECK(kept_stems(lib) == std::vector<std::string>{"ka", "kb", "kc"});
    }
}

TEST_CASE("a SIGKILLed holder's package is kept by the next cleanup, not deleted and not left installed") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path pkg = make_simple(tmp.path(), "killed", 8);
    skc::RunPackageInstaller installer;
    Workers w;
    const pid_t p = w.spawn({lib.string(), pkg.string(), "wait"}, tmp / "k.out");
    CHECK(wait_installed(tmp / "k.out") == extracted_line);
    ::kill(p, SIGKILL);
    CHECK(w.wait(p) == 128 + SIGKILL);
    CHECK(holder_count(lib, "killed") == 1);
    CHECK(installer.cleanup(lib, "host") == 1);
    CHECK(kept_stems(lib) == std::vector<std::string>{"killed"});
    CHECK_FALSE(fs::exists(lib / "static_kernel/host/killed"));
    CHECK_FALSE(fs::exists(lib / "static_kernel/host/.holders/killed"));
    CHECK(config_stems(lib).empty());
    CHECK(index_packages(lib).empty());
    skc::Installation inst = installer.install(pkg, lib, {});
    CHECK(inst.reused());
    CHECK(index_packages(lib) == std::map<std::string, std::string>{{digest_of(8), "killed"}});
}

TEST_CASE("leftovers of killed processes around the kept extractions are cleaned up") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path base = lib / "static_kernel/host";
    const fs::path pkg = make_simple(tmp.path(), "left", 9);
    skc::RunPackageInstaller installer;
    installer.install(pkg, lib, {}).release();
    // Killed between moving a kept package back in and publishing: a package folder with an
    // identity that config.ini does not list goes back to .kept.
    fs::rename(base / ".kept/left", base / "left");
    CHECK(installer.cleanup(lib, "host") == 0);
    CHECK(kept_stems(lib) == std::vector<std::string>{"left"});
    CHECK_FALSE(fs::exists(base / "left"));
    CHECK(installer.list(lib, "host").empty());
    // Killed while removing a kept package, while writing the limit; a folder without an identity.
    const std::string dead = "999999999";
    fs::create_directories(base / (".removing-old-" + dead) / "kernels");
    spit(base / ".kept" / (".tmp." + dead + ".limit"), "12");
    fs::create_directories(base / ".kept/stray/kernels");
    skc::Installation inst =
        installer.install(pkg, lib, keep(skc::default_keep_bytes - 1));  // a new limit: .kept is checked
    CHECK(inst.reused());
    CHECK_FALSE(fs::exists(base / (".removing-old-" + dead)));
    CHECK_FALSE(fs::exists(base / ".kept" / (".tmp." + dead + ".limit")));
    CHECK_FALSE(fs::exists(base / ".kept/stray"));
    CHECK(slurp(base / ".kept/.limit") == std::to_string(skc::default_keep_bytes - 1) + "\n");
}

TEST_CASE("the top-level uninstall.sh also removes the kept extractions") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path base = lib / "static_kernel/host";
    skc::RunPackageInstaller installer;
    installer.install(make_simple(tmp.path(), "gone", 1), lib, {}).release();
    skc::InstallOptions persistent;
    persistent.persistent = true;
    installer.install(make_simple(tmp.path(), "here", 2), lib, persistent);
    REQUIRE(kept_stems(lib) == std::vector<std::string>{"gone"});
    CHECK(run({"/bin/sh", (base / "uninstall.sh").string()}, tmp / "uninstall.log") == 0);
    CHECK_FALSE(fs::exists(base / ".kept"));
    CHECK_FALSE(fs::exists(base / "here"));
    CHECK_FALSE(fs::exists(base / "config.ini"));
}

// ---- several threads of one process ------------------------------------------------------------

TEST_CASE("8 threads install one package at once: one extraction, 8 holders; 8 threads releasing remove it once") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path pkg = make_simple(tmp.path(), "together", 11);
    skc::RunPackageInstaller installer;  // one installer shared by the threads
    constexpr std::size_t n = 8;
    std::vector<skc::Installation> handles(n);
    std::vector<std::string> errors(n);
    std::atomic<bool> go{false};
    auto in_threads = [&](auto&& work) {
        go = false;
        std::vector<std::thread> threads;
        for (std::size_t t = 0; t < n; ++t)
            threads.emplace_back([&, t] {
                while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
                try {
                    work(t);
                } catch (const std::exception& e) {
                    errors[t] = e.what();
                }
            });
        go.store(true, std::memory_order_release);
        for (auto& th : threads) th.join();
    };
    in_threads([&](std::size_t t) { handles[t] = installer.install(pkg, lib, {}); });
    for (const std::string& e : errors) CHECK(e.empty());
    int extracted = 0;
    for (const skc::Installation& h : handles) {
        CHECK(h.holds());
        CHECK(h.folder() == lib / "static_kernel/host/together");
        extracted += h.extracted() ? 1 : 0;
    }
    CHECK(extracted == 1);
    CHECK(holder_count(lib, "together") == n);
    CHECK(config_stems(lib) == std::vector<std::string>{"together"});
    CHECK(index_packages(lib) == std::map<std::string, std::string>{{digest_of(11), "together"}});
    CHECK(skc_test::slurp(lib / "static_kernel/host/together/kernels/together.so") == "kernel together\n");
    for (const auto& e : fs::directory_iterator(lib / "static_kernel/host"))
        CHECK(e.path().filename().string().rfind(".staging", 0) != 0);  // the losers' extractions are gone

    in_threads([&](std::size_t t) { handles[t].release(); });
    for (const std::string& e : errors) CHECK(e.empty());
    CHECK_FALSE(fs::exists(lib / "static_kernel/host/together"));
    CHECK_FALSE(fs::exists(lib / "static_kernel/host/.holders/together"));
    CHECK(config_stems(lib).empty());
    CHECK(index_packages(lib).empty());
}

TEST_CASE("8 threads install a kept package at once: one reuses it, the others hold it; releasing keeps it again") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path pkg = make_simple(tmp.path(), "kept_together", 13);
    skc::RunPackageInstaller installer;
    installer.install(pkg, lib, {}).release();
    REQUIRE(fs::is_directory(lib / "static_kernel/host/.kept/kept_together"));
    constexpr std::size_t n = 8;
    std::vector<skc::Installation> handles(n);
    std::vector<std::string> errors(n);
    std::atomic<bool> go{false};
    auto in_threads = [&](auto&& work) {
        go = false;
        std::vector<std::thread> threads;
        for (std::size_t t = 0; t < n; ++t)
            threads.emplace_back([&, t] {
                while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
                try {
                    work(t);
                } catch (const std::exception& e) {
                    errors[t] = e.what();
                }
            });
        go.store(true, std::memory_order_release);
        for (auto& th : threads) th.join();
    };
    in_threads([&](std::size_t t) { handles[t] = installer.install(pkg, lib, {}); });
    for (const std::string& e : errors) CHECK(e.empty());
    int reused = 0, extracted = 0;
    for (const skc::Installation& h : handles) {
        reused += h.reused() ? 1 : 0;
        extracted += h.extracted() ? 1 : 0;
    }
    CHECK(reused == 1);
    CHECK(extracted == 0);
    CHECK(holder_count(lib, "kept_together") == n);
    CHECK(index_packages(lib) == std::map<std::string, std::string>{{digest_of(13), "kept_together"}});
    CHECK_FALSE(fs::exists(lib / "static_kernel/host/.kept/kept_together"));
    in_threads([&](std::size_t t) { handles[t].release(); });
    for (const std::string& e : errors) CHECK(e.empty());
    CHECK(fs::is_directory(lib / "static_kernel/host/.kept/kept_together"));
    CHECK(config_stems(lib).empty());
    CHECK(installer.list(lib, "host").empty());
}

TEST_CASE("4 threads install and release different packages at once: each is listed while held, none after") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    constexpr int n = 4;
    std::vector<fs::path> pkgs;
    for (int i = 0; i < n; ++i) pkgs.push_back(make_simple(tmp.path(), "own" + std::to_string(i), 200 + i));
    skc::RunPackageInstaller installer;
    std::atomic<int> installed{0}, released{0}, failures{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < n; ++t)
        threads.emplace_back([&, t] {
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            try {
                for (int round = 0; round < 3; ++round) {  // the others install and release meanwhile
                    skc::Installation h = installer.install(pkgs[static_cast<std::size_t>(t)], lib, {});
                    // Nobody else holds this package: extracted the first time, then reused from .kept.
                    if (h.extracted() != (round == 0) || h.reused() != (round != 0)) ++failures;
                    ++installed;
                    const auto idx = index_packages(lib);
                    const auto it = idx.find(digest_of(200 + t));
                    if (it == idx.end() || it->second != "own" + std::to_string(t)) ++failures;
                    h.release();
                    ++released;
                }
            } catch (const std::exception&) {
                ++failures;
            }
        });
    go.store(true, std::memory_order_release);
    for (auto& th : threads) th.join();
    CHECK(failures.load() == 0);
    CHECK(installed.load() == 3 * n);
    CHECK(released.load() == 3 * n);
    CHECK(config_stems(lib).empty());
    CHECK(index_packages(lib).empty());
    CHECK(installer.list(lib, "host").empty());
}

// The signal path with threads: a process whose threads hold installs (or are installing and
// releasing) is ended by SIGTERM or SIGINT. The worker is tests/workers/install_threads_worker.cpp.

TEST_CASE("a signal to a process whose 4 threads hold installs: the handler unlinks every thread's holders") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path a = make_simple(tmp.path(), "sig_a", 21);
    const fs::path b = make_simple(tmp.path(), "sig_b", 22);
    skc::RunPackageInstaller installer;
    Workers w;
    for (const int sig : {SIGTERM, SIGINT}) {
        CAPTURE(sig);
        const fs::path out = tmp / ("hold" + std::to_string(sig) + ".out");
        const pid_t p =
            w.spawn_program(SKC_INSTALL_THREADS_WORKER, {lib.string(), "4", "hold", a.string(), b.string()}, out);
        CHECK(wait_installed(out) == "holding 8\n");
        CHECK(holder_count(lib, "sig_a") == 4);
        CHECK(holder_count(lib, "sig_b") == 4);
        ::kill(p, sig);
        CHECK(w.wait(p) == 128 + sig);  // ended by the signal, as without skc
        // The handler removed every holder file, whichever thread it ran on; the packages stay
        // until the next install, uninstall or cleanup.
        CHECK(holder_count(lib, "sig_a") == 0);
        CHECK(holder_count(lib, "sig_b") == 0);
        CHECK(fs::exists(lib / "static_kernel/host/sig_a"));
        CHECK(installer.cleanup(lib, "host") == 2);
        CHECK(index_packages(lib).empty());
        CHECK(config_stems(lib).empty());
    }
}

TEST_CASE("SIGTERM while 4 threads install and release: the process ends at once, and cleanup leaves nothing") {
    skc_test::TempDir tmp;
    const fs::path lib = tmp / "lib";
    const fs::path a = make_simple(tmp.path(), "churn_a", 31);
    const fs::path b = make_simple(tmp.path(), "churn_b", 32);
    skc::RunPackageInstaller installer;
    Workers w;
    for (const int delay_ms : {0, 50, 200}) {
        CAPTURE(delay_ms);
        const fs::path out = tmp / ("churn" + std::to_string(delay_ms) + ".out");
        const pid_t p =
            w.spawn_program(SKC_INSTALL_THREADS_WORKER, {lib.string(), "4", "churn", a.string(), b.string()}, out);
        CHECK(wait_installed(out) == "churning\n");
        std::this_thread::sleep_for(milliseconds(delay_ms));
        ::kill(p, SIGTERM);
        CHECK(w.wait(p) == 128 + SIGTERM);  // no thread holding a lock keeps it from ending
        // Holder files the handler could not know of yet (created, not yet registered) name a dead
        // process, and so do packages half-removed by a thread the signal cut short: cleanup removes
        // them. (Threads still running while the handler unlinked may have removed a package already.)
        CHECK(installer.cleanup(lib, "host") <= 2);
        CHECK(installer.list(lib, "host").empty());
        CHECK(index_packages(lib).empty());
        CHECK(config_stems(lib).empty());
        CHECK_FALSE(fs::exists(lib / "static_kernel/host/.holders/churn_a"));
        CHECK_FALSE(fs::exists(lib / "static_kernel/host/.holders/churn_b"));
        for (const auto& e : fs::directory_iterator(lib / "static_kernel/host")) {
            const std::string name = e.path().filename().string();
            CHECK(name.rfind(".staging", 0) != 0);
            CHECK(name.rfind(".removing", 0) != 0);
        }
    }
}

}  // namespace skc_policy_installer_test
