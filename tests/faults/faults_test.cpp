// skc compile in a hostile environment, on real file systems: the real tool with the real
// host_op_compiler (examples/host) compiling three example ops, on tmpfs file systems of chosen
// sizes that this test mounts itself.
//
// The test process first enters a private mount namespace (as root: unshare(CLONE_NEWNS); otherwise
// in a user namespace of its own), so every file system it mounts vanishes with it; a machine where
// neither is possible fails the test with a message saying so. The cases:
//   - a full disk at every point where skc compile writes: a roomy run first measures what each
//     stage writes (the op info files of the run folder, the compiler's work files and package, the
//     cache's entry and package copy, the install), then runs compile at free-space levels chosen in
//     each stage and at levels swept from nothing to the roomy run's peak. At each level the run
//     succeeds with a usable install or fails with a message naming the full disk, leaves no
//     half-written file, and the next run with the space back succeeds with a sound cache and a
//     loadable op library;
//   - a read-only base, no inodes left, and an op library on a full file system of its own;
//   - SIGKILL and SIGINT to skc (alone, or its whole process group as a terminal's Ctrl-C does)
//     during the compile and during the install, also a cover's compile of its rest and its
//     install of its parts;
//   - a rank of a node killed while the other ranks wait for it at the barrier.
// Each level and each signal is one line in the test's output, with the stage named by the message.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <skc/error.hpp>
#include <skc/policy/reselect.hpp>
#include <skc/value.hpp>

#include "host/loader.hpp"
#include "test_support.hpp"

extern char** environ;

namespace faults_faults_test {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using skc_test::TempDir;

const std::string tool = SKC_TOOL;
const std::string host_compiler = SKC_HOST_OP_COMPILER;
const std::vector<std::string> op_files{"Add_float_ND_32_64_9.json", "Gelu_float_ND_32_256_8.json",
                                        "Mul_float_ND_2_16_16_10.json"};
constexpr std::size_t kernel_count = 3;  // host_op_compiler supports all three
const std::string device = "host-cpu";
const std::string enospc = std::strerror(ENOSPC);  // "No space left on device"

// ------------------------------------------------------------------------------------------------
// The private mount namespace and the file systems

void write_proc_file(const char* path, const std::string& text, std::string& error) {
    if (!error.empty()) return;
    const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
        error = std::string("writing ") + path + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
}

/// Enters a mount namespace of this process's own, in which no mount propagates to the rest of the
/// machine; "" on success, else what failed.
std::string enter_private_mount_namespace() {
    auto failed = [](const std::string& what) { return what + ": " + std::strerror(errno); };
    if (::geteuid() == 0) {
        if (::unshare(CLONE_NEWNS) != 0) return failed("unshare(CLONE_NEWNS)");
    } else {
        const uid_t uid = ::geteuid();
        const gid_t gid = ::getegid();
        if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return failed("unshare(CLONE_NEWUSER | CLONE_NEWNS)");
        std::string error;
        write_proc_file("/proc/self/setgroups", "deny", error);
        write_proc_file("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1", error);
        write_proc_file("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1", error);
        if (!error.empty()) return error;
    }
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
        return failed("mount(\"/\", MS_REC | MS_PRIVATE)");
    return {};
}

/// Every case starts here: the private mount namespace (entered once, while the process has no
/// other thread), and the test as the subreaper of what its children leave behind, so that a
/// compiler or an extraction outliving a killed skc is seen (and reaped) by the test.
void require_private_mounts() {
    static const std::string error = enter_private_mount_namespace();
    REQUIRE_MESSAGE(error.empty(),
                    "this test mounts tmpfs file systems in a private mount namespace and cannot enter one ("
                        << error
                        << "): run it as root, or where unprivileged user namespaces are allowed "
                           "(sysctl kernel.unprivileged_userns_clone=1 and no AppArmor restriction on them)");
    static const bool subreaper = ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
    REQUIRE_MESSAGE(subreaper, "prctl(PR_SET_CHILD_SUBREAPER): " << std::strerror(errno));
}

std::uint64_t page_size() { return static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)); }
std::uint64_t pages_down(std::uint64_t bytes) { return bytes / page_size() * page_size(); }
std::uint64_t pages_up(std::uint64_t bytes) { return (bytes + page_size() - 1) / page_size() * page_size(); }
std::string in_pages(std::uint64_t bytes) {
    return std::to_string(bytes) + " bytes (" + std::to_string(bytes / page_size()) + " pages)";
}

/// A tmpfs mounted for the test's lifetime (detached at scope exit; the namespace would drop it
/// anyway). tmpfs counts space in pages: every file with content takes whole pages, a folder none.
class Tmpfs {
public:
    Tmpfs(fs::path at, std::uint64_t bytes, std::uint64_t inodes) : at_(std::move(at)) {
        fs::create_directories(at_);
        const std::string opts =
            "size=" + std::to_string(bytes) + ",nr_inodes=" + std::to_string(inodes) + ",mode=0755";
        const bool ok = ::mount("skc-faults", at_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) == 0;
        REQUIRE_MESSAGE(ok, "cannot mount a tmpfs on " << at_ << " (" << opts << "): " << std::strerror(errno));
        mounted_ = true;
    }
    Tmpfs(const Tmpfs&) = delete;
    Tmpfs& operator=(const Tmpfs&) = delete;
    ~Tmpfs() {
        if (mounted_) ::umount2(at_.c_str(), MNT_DETACH);
    }

    [[nodiscard]] const fs::path& path() const { return at_; }
    [[nodiscard]] fs::path operator/(const std::string& s) const { return at_ / s; }

    [[nodiscard]] struct statvfs stats() const {
        struct statvfs s {};
        REQUIRE(::statvfs(at_.c_str(), &s) == 0);
        return s;
    }
    [[nodiscard]] std::uint64_t free_bytes() const {
        const struct statvfs s = stats();
        return static_cast<std::uint64_t>(s.f_bavail) * s.f_frsize;
    }
    [[nodiscard]] std::uint64_t used_bytes() const {
        const struct statvfs s = stats();
        return static_cast<std::uint64_t>(s.f_blocks - s.f_bfree) * s.f_frsize;
    }
    [[nodiscard]] std::uint64_t free_inodes() const { return stats().f_favail; }
    [[nodiscard]] std::uint64_t used_inodes() const {
        const struct statvfs s = stats();
        return s.f_files - s.f_ffree;
    }

    /// A filler file that leaves exactly `leave` bytes (a multiple of the page size) free.
    void leave_free(std::uint64_t leave) {
        const std::uint64_t now = free_bytes();
        REQUIRE(leave % page_size() == 0);
        REQUIRE_MESSAGE(leave <= now, "cannot leave " << leave << " bytes free: only " << now << " are");
        if (now > leave) {
            const int fd = ::open((at_ / ".filler").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
            REQUIRE(fd >= 0);
            struct stat st {};
            REQUIRE(::fstat(fd, &st) == 0);
            const int rc = ::posix_fallocate(fd, st.st_size, static_cast<off_t>(now - leave));
            ::close(fd);
            REQUIRE_MESSAGE(rc == 0, "posix_fallocate: " << std::strerror(rc));
        }
        REQUIRE(free_bytes() == leave);
    }

    /// Empty files that leave exactly `leave` inodes free.
    void leave_inodes(std::uint64_t leave) {
        const fs::path dir = at_ / ".inode-filler";
        fs::create_directories(dir);
        for (std::uint64_t n = 0; free_inodes() > leave; ++n) {
            const int fd = ::open((dir / std::to_string(n)).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
            REQUIRE_MESSAGE(fd >= 0, "cannot create an empty file: " << std::strerror(errno));
            ::close(fd);
        }
        REQUIRE(free_inodes() == leave);
    }

    /// Removes the fillers (the space and the inodes come back).
    void free_fillers() {
        std::error_code ec;
        for (const char* f : {".filler", ".inode-filler", ".filler-after-compile"}) fs::remove_all(at_ / f, ec);
    }

    /// Removes everything on it.
    void clear() {
        for (const auto& e : fs::directory_iterator(at_)) fs::remove_all(e.path());
    }

    void set_read_only(bool ro) {
        const unsigned long flags = MS_REMOUNT | MS_NOSUID | MS_NODEV | (ro ? MS_RDONLY : 0);
        REQUIRE_MESSAGE(::mount(nullptr, at_.c_str(), nullptr, flags, nullptr) == 0,
                        "cannot remount " << at_ << (ro ? " read-only: " : " read-write: ") << std::strerror(errno));
    }

private:
    fs::path at_;
    bool mounted_ = false;
};

/// Bytes a file takes on its file system.
std::uint64_t allocated(const fs::path& p) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    return static_cast<std::uint64_t>(st.st_blocks) * 512;
}

std::uint64_t allocated_below(const fs::path& dir) {
    std::uint64_t n = 0;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
        n += allocated(it->path());
    return n;
}

// ------------------------------------------------------------------------------------------------
// Processes

/// Environment entries "NAME=value" applied over the test's own; "NAME=" removes NAME. Later
/// entries win.
std::vector<std::string> environment(const std::vector<std::string>& changes) {
    std::map<std::string, std::optional<std::string>> set;
    for (const std::string& c : changes) {
        const std::size_t eq = c.find('=');
        set[c.substr(0, eq)] = c.size() == eq + 1 ? std::nullopt : std::optional<std::string>(c);
    }
    std::vector<std::string> out;
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string entry = *e;
        if (set.find(entry.substr(0, entry.find('='))) == set.end()) out.push_back(entry);
    }
    for (const auto& [name, entry] : set)
        if (entry) out.push_back(*entry);
    return out;
}

struct Proc {
    pid_t pid = -1;
    fs::path io;
    Clock::time_point started;
};

struct Done {
    int status = -1;  // exit status, or 128 + signal
    std::string out, err;
    Clock::time_point ended;
    bool timed_out = false;
};

/// Starts `program` (no shell), stdin from /dev/null, stdout and stderr into files in `io`; with
/// `own_group`, in a process group of its own (its pid), as a shell starts a job.
Proc spawn(const std::string& program, const std::vector<std::string>& args, const std::vector<std::string>& env,
           const fs::path& io, bool own_group = false) {
    fs::create_directories(io);
    const std::string out_file = (io / "stdout").string(), err_file = (io / "stderr").string();
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    REQUIRE(posix_spawn_file_actions_init(&fa) == 0);
    REQUIRE(posix_spawnattr_init(&attr) == 0);
    REQUIRE(posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0) == 0);
    REQUIRE(posix_spawn_file_actions_addopen(&fa, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644) == 0);
    REQUIRE(posix_spawn_file_actions_addopen(&fa, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644) == 0);
    if (own_group) {
        REQUIRE(posix_spawnattr_setpgroup(&attr, 0) == 0);
        REQUIRE(posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP) == 0);
    }
    std::vector<char*> argv{const_cast<char*>(program.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<std::string> env_strings = environment(env);
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    Proc p{-1, io, Clock::now()};
    const int rc = ::posix_spawn(&p.pid, program.c_str(), &fa, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    REQUIRE_MESSAGE(rc == 0, "cannot start " << program << ": " << std::strerror(rc));
    return p;
}

/// Whether `p` has ended (reaped then, with `d` filled in).
bool reap(const Proc& p, Done& d) {
    int status = 0;
    const pid_t w = ::waitpid(p.pid, &status, WNOHANG);
    if (w != p.pid) return false;
    d.ended = Clock::now();
    d.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    d.out = skc_test::slurp(p.io / "stdout");
    d.err = skc_test::slurp(p.io / "stderr");
    return true;
}

/// Waits for `p` at most `limit`; then kills it (and its group, when it has its own) and marks it.
Done await(const Proc& p, Clock::duration limit = 180s) {
    Done d;
    const auto deadline = p.started + limit;
    while (!reap(p, d)) {
        if (Clock::now() >= deadline) {
            ::kill(-p.pid, SIGKILL);
            ::kill(p.pid, SIGKILL);
            while (!reap(p, d)) std::this_thread::sleep_for(1ms);
            d.timed_out = true;
            break;
        }
        std::this_thread::sleep_for(2ms);
    }
    return d;
}

/// The test's own child processes (with the subreaper, also what its children left behind), as
/// pid -> "name (state X)".
std::map<pid_t, std::string> children_of_test() {
    std::map<pid_t, std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
        const std::string name = e.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        std::string stat;
        try {
            stat = skc_test::slurp(e.path() / "stat");
        } catch (const std::exception&) {
            continue;  // the process ended between the listing and the read (ESRCH)
        }
        const std::size_t open = stat.find('('), close = stat.rfind(')');
        if (open == std::string::npos || close == std::string::npos || close + 4 > stat.size()) continue;
        const std::size_t ppid_at = stat.find(' ', close + 2);
        if (ppid_at == std::string::npos) continue;
        if (std::atol(stat.c_str() + ppid_at + 1) == static_cast<long>(::getpid()))
            out.emplace(static_cast<pid_t>(std::stol(name)),
                        stat.substr(open + 1, close - open - 1) + " (state " + stat.substr(close + 2, 1) + ")");
    }
    return out;
}

/// Reaps what has ended among the test's children; returns those still running after `patience`.
std::string processes_left(Clock::duration patience) {
    std::string names;
    for (const auto deadline = Clock::now() + patience;;) {
        while (::waitpid(-1, nullptr, WNOHANG) > 0) {}
        names.clear();
        for (const auto& [pid, name] : children_of_test()) names += " " + std::to_string(pid) + " " + name;
        if (names.empty() || Clock::now() >= deadline) break;
        std::this_thread::sleep_for(20ms);
    }
    return names;
}

/// Kills and reaps every child the test still has.
void kill_children() {
    for (int round = 0; round < 50 && !children_of_test().empty(); ++round) {
        for (const auto& [pid, name] : children_of_test()) ::kill(pid, SIGKILL);
        std::this_thread::sleep_for(10ms);
        while (::waitpid(-1, nullptr, WNOHANG) > 0) {}
    }
}

/// Kills and reaps at scope exit whatever the test's children left running (also when a check
/// ends the case early).
struct Reaper {
    Reaper() = default;
    Reaper(const Reaper&) = delete;
    Reaper& operator=(const Reaper&) = delete;
    ~Reaper() { kill_children(); }
};

/// `text`'s lines joined with " | ", cut to `max` characters (the end kept).
std::string one_line(const std::string& text, std::size_t max = 400) {
    std::string s;
    for (char c : text) s += c == '\n' ? std::string(" | ") : std::string(1, c);
    while (s.size() >= 3 && s.compare(s.size() - 3, 3, " | ") == 0) s.resize(s.size() - 3);
    return s.size() <= max ? s : "..." + s.substr(s.size() - max);
}

/// The error line of skc compile (warnings, "skc: ...", come before it), and what follows it.
std::string compile_error(const std::string& err) {
    const std::size_t at = err.find("skc compile: ");
    return at == std::string::npos ? err : err.substr(at);
}

// ------------------------------------------------------------------------------------------------
// What a run leaves

/// Runs `fn` in a forked child and returns what it returned (or why it died): kernels dlopen'ed by
/// the loader stay mapped in the child only, and so do not keep files of the test's tmpfs alive.
std::string in_child(const std::function<std::string()>& fn) {
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::close(p[0]);
        std::string m;
        try {
            m = fn();
        } catch (const std::exception& e) {
            m = std::string("exception: ") + e.what();
        }
        const char* at = m.data();
        std::size_t left = m.size();
        while (left > 0) {
            const ssize_t n = ::write(p[1], at, left);
            if (n <= 0) break;
            at += n;
            left -= static_cast<std::size_t>(n);
        }
        std::_Exit(0);
    }
    ::close(p[1]);
    std::string m;
    char buf[4096];
    for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) m.append(buf, static_cast<std::size_t>(n));
    ::close(p[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return "the child checking it died (status " + std::to_string(status) + ")";
    return m;
}

/// Why the op library `lib` does not give a runtime the three kernels: its index read and every
/// kernel loaded as the host backend's runtime does (examples/host/loader.hpp); "" when it does.
std::string library_fault(const fs::path& lib) {
    return in_child([&]() -> std::string {
        try {
            const skc::ReselectContext ctx{lib, "host", device, ""};
            const auto kernels = skc_host::load_installed_kernels(ctx);
            if (kernels.size() != kernel_count)
                return "the op library's index " + skc_host::installed_index_path(ctx).string() + " gives " +
                       std::to_string(kernels.size()) + " kernels, not " + std::to_string(kernel_count);
            for (const auto& k : kernels)
                if (k.second == nullptr) return "a kernel of the index did not load";
            return {};
        } catch (const skc::Error& e) {
            return std::string("the op library cannot be loaded: ") + e.what();
        }
    });
}

fs::path cache_root(const fs::path& base) { return base / "static_kernel_compile_outputs" / "static_kernel_cache"; }
fs::path lib_base(const fs::path& lib) { return lib / "static_kernel" / "host"; }

/// makeself's own integrity check of `package`, and its listing naming the package's index (an
/// empty or header-only file passes --check: the shell runs what is there); "" when both pass.
std::string makeself_check(const fs::path& package) {
    TempDir io;
    const Done d = await(spawn("/bin/sh", {package.string(), "--check"}, {}, io.path()), 120s);
    if (d.status != 0)
        return package.string() + ": '/bin/sh PACKAGE --check' exited with status " + std::to_string(d.status) + ": " +
               one_line(d.out + d.err, 300);
    const Done list = await(spawn("/bin/sh", {package.string(), "--list"}, {}, io.path()), 120s);
    if (list.status != 0 || list.out.find("./binary_info_config.json") == std::string::npos)
        return package.string() + " (" + std::to_string(fs::file_size(package)) +
               " bytes) passes --check, but '/bin/sh PACKAGE --list' (status " + std::to_string(list.status) +
               ") does not list binary_info_config.json: " + one_line(list.out + list.err, 300);
    return {};
}

/// Every package in the cache: `<cache>/<namespace>/packages/*.run`.
std::vector<fs::path> cached_packages(const fs::path& base) {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& ns : fs::directory_iterator(cache_root(base), ec)) {
        if (!ns.is_directory()) continue;
        for (const auto& p : fs::directory_iterator(ns.path() / "packages", ec))
            if (p.path().extension() == ".run") out.push_back(p.path());
    }
    return out;
}

/// What is wrong with the cache under `base`: skc cache verify must find nothing bad, and every
/// stored package must pass makeself's own check.
std::vector<std::string> cache_faults(const fs::path& base) {
    std::vector<std::string> faults;
    TempDir io;
    const Done v =
        await(spawn(tool, {"cache", "verify", "--base", base.string(), "--json"}, {"SKC_CACHE_DIR="}, io.path()));
    if (v.status != 0) {
        faults.push_back("skc cache verify exited with status " + std::to_string(v.status) + ": " +
                         one_line(v.out + v.err));
    } else {
        try {
            const skc::Value doc = skc::parse_json(v.out);
            const skc::Value* total = doc.find("total");
            if (total != nullptr && total->find("bad") != nullptr && total->find("bad")->as_int() != 0)
                faults.push_back("skc cache verify reports bad entries: " + one_line(v.out));
        } catch (const std::exception& e) {
            faults.push_back(std::string("skc cache verify --json printed no JSON: ") + e.what());
        }
    }
    for (const fs::path& p : cached_packages(base))
        if (std::string f = makeself_check(p); !f.empty())
            faults.push_back("a cached package fails makeself's check: " + f);
    return faults;
}

/// `[packages]` stems of the op library's config.ini.
std::vector<std::string> listed_packages(const fs::path& lib) {
    std::vector<std::string> stems;
    std::istringstream in(skc_test::slurp(lib_base(lib) / "config.ini"));
    bool section = false;
    for (std::string line; std::getline(in, line);) {
        if (line.empty() || line[0] == '#' || line[0] == ';') continue;
        if (line[0] == '[') {
            section = line.rfind("[packages]", 0) == 0;
            continue;
        }
        if (section && line.find(" = ") != std::string::npos) stems.push_back(line.substr(0, line.find(" = ")));
    }
    return stems;
}

/// Files a failed or killed run must not leave: skc's temporary files, the installer's staging
/// folders, the compiler's work folders, a package that fails makeself's check, a JSON file that
/// does not parse, and an op library listing a package that is not there whole.
std::vector<std::string> half_written(const std::vector<fs::path>& roots, const fs::path& lib,
                                      bool staging_allowed = false) {
    std::vector<std::string> found;
    for (const fs::path& root : roots) {
        std::error_code ec;
        for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
             it.increment(ec)) {
            const fs::path& p = it->path();
            const std::string name = p.filename().string();
            const std::string rel = fs::relative(p, root).string();
            if (name.rfind(".tmp.", 0) == 0) found.push_back("a temporary file is left: " + rel);
            if (name.rfind(".staging-", 0) == 0 && !staging_allowed)
                found.push_back("an extraction folder is left: " + rel);
            if (name.rfind(".host_op_compiler-", 0) == 0) found.push_back("the compiler's work folder is left: " + rel);
            if (!it->is_regular_file()) continue;
            if (p.extension() == ".run") {
                if (std::string f = makeself_check(p); !f.empty()) found.push_back("a package cut short: " + f);
            } else if (p.extension() == ".json" && name.rfind(".", 0) != 0) {
                try {
                    (void)skc::parse_json(skc_test::slurp(p));
                } catch (const std::exception& e) {
                    found.push_back("a JSON file that does not parse: " + rel + ": " + e.what());
                }
            }
        }
    }
    for (const std::string& stem : listed_packages(lib))
        if (!fs::is_regular_file(lib_base(lib) / stem / "binary_info_config.json"))
            found.push_back("config.ini lists " + stem + ", which is not installed whole");
    return found;
}

// ------------------------------------------------------------------------------------------------
// The compiler and the extraction the test drives

std::string sh_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

std::string find_in_path(const std::string& program) {
    const char* path = std::getenv("PATH");
    std::istringstream in(path != nullptr ? path : "/usr/bin:/bin");
    for (std::string dir; std::getline(in, dir, ':');)
        if (!dir.empty() && ::access((fs::path(dir) / program).c_str(), X_OK) == 0)
            return (fs::path(dir) / program).string();
    return {};
}

/// The op info files, the kernel compiler (host_op_compiler behind a script with the test's
/// hooks) and a gzip that can be slowed, in a folder of the test's TMPDIR (not on a tmpfs it
/// fills).
struct Rig {
    TempDir tmp;
    fs::path ops = tmp / "ops";
    fs::path compiler = tmp / "op_compiler.sh";
    fs::path shim = tmp / "shim";  // holds `gzip`
    fs::path marks = tmp / "marks";
    int runs = 0;

    Rig() {
        fs::create_directories(ops);
        fs::create_directories(shim);
        fs::create_directories(marks);
        for (const std::string& f : op_files) fs::copy_file(skc_test::example_ops_dir() / f, ops / f);
        // The hooks, all off unless the environment names them:
        //   SKC_FAULTS_MARKS=DIR    DIR/compile-started before host_op_compiler, DIR/compile-ended after it
        //   SKC_FAULTS_LINGER=S     sleep S seconds after it: a compile long enough to be signalled
        //   SKC_FAULTS_FS=DIR, SKC_FAULTS_LEAVE=N   after it, fill DIR's file system to leave N bytes
        //                           free, so that what skc writes next (the cache entry, the install)
        //                           meets a full disk
        skc_test::spit(
            compiler,
            "#!/bin/sh\n"
            "if [ -n \"$SKC_FAULTS_MARKS\" ]; then : > \"$SKC_FAULTS_MARKS/compile-started\"; fi\n" +
                sh_quote(host_compiler) +
                " \"$@\" || exit $?\n"
                "if [ -n \"$SKC_FAULTS_MARKS\" ]; then : > \"$SKC_FAULTS_MARKS/compile-ended\"; fi\n"
                "if [ -n \"$SKC_FAULTS_LINGER\" ]; then sleep \"$SKC_FAULTS_LINGER\"; fi\n"
                "if [ -n \"$SKC_FAULTS_LEAVE\" ]; then\n"
                "  set -- $(stat -f -c '%a %S' \"$SKC_FAULTS_FS\") || exit 1\n"
                "  n=$(( $1 * $2 - SKC_FAULTS_LEAVE ))\n"
                "  if [ \"$n\" -gt 0 ]; then head -c \"$n\" /dev/zero > \"$SKC_FAULTS_FS/.filler-after-compile\"; fi\n"
                "fi\n"
                "exit 0\n");
        fs::permissions(compiler, fs::perms::owner_all);
        // makeself extracts with `gzip -cd` from the PATH. With SKC_FAULTS_SLOW=FILE this one
        // creates FILE, waits 1 s, passes the first 4 KiB of the archive on (tar creates the first
        // file and writes part of it), waits 1 s, passes the rest, and waits 4 s more before it
        // ends (tar has written everything and waits for the end of its input): an install that
        // can be hit before, during and after its files are written.
        const std::string gzip = find_in_path("gzip");
        REQUIRE_MESSAGE(!gzip.empty(), "gzip is not in the PATH (makeself needs it)");
        skc_test::spit(shim / "gzip",
                       "#!/bin/sh\n"
                       "case \" $* \" in *\" -cd \"*|*\" -dc \"*|*\" -d \"*)\n"
                       "  if [ -n \"$SKC_FAULTS_SLOW\" ]; then\n"
                       "    : > \"$SKC_FAULTS_SLOW\"\n"
                       "    sleep 1\n    " +
                           sh_quote(gzip) +
                           " \"$@\" | { dd bs=4096 count=1 2>/dev/null; sleep 1; cat; }\n"
                           "    sleep 4\n"
                           "    exit 0\n"
                           "  fi;;\n"
                           "esac\n"
                           "exec " +
                           sh_quote(gzip) + " \"$@\"\n");
        fs::permissions(shim / "gzip", fs::perms::owner_all);
    }

    /// skc compile of the three ops into `base`, installing into `lib` (none when empty), as JSON.
    [[nodiscard]] std::vector<std::string> args(const fs::path& base, const fs::path& lib,
                                                const std::vector<std::string>& extra = {}) const {
        std::vector<std::string> a{"compile",    "--ops",           ops.string(), "--base", base.string(),
                                   "--compiler", compiler.string(), "--device",   device,   "--toolchain-version",
                                   "1.0",        "--jobs",          "2",          "--json"};
        if (!lib.empty()) {
            a.push_back("--op-library");
            a.push_back(lib.string());
        }
        a.insert(a.end(), extra.begin(), extra.end());
        return a;
    }

    /// The environment of every skc run: nothing from the caller's that would change what skc does,
    /// then `extra`.
    static std::vector<std::string> env(std::vector<std::string> extra = {}) {
        std::vector<std::string> e{"SKC_CACHE_DIR=",     "SKC_CACHE_MODE=", "SKC_CACHE_MAX_SIZE=",  "LOCAL_WORLD_SIZE=",
                                   "LOCAL_RANK=",        "SKC_RUN_ID=",     "TORCHELASTIC_RUN_ID=", "SKC_FAULTS_MARKS=",
                                   "SKC_FAULTS_LINGER=", "SKC_FAULTS_FS=",  "SKC_FAULTS_LEAVE=",    "SKC_FAULTS_SLOW="};
        e.insert(e.end(), extra.begin(), extra.end());
        return e;
    }

    [[nodiscard]] fs::path io() { return tmp / ("io-" + std::to_string(++runs)); }

    Proc start(const fs::path& base, const fs::path& lib, const std::vector<std::string>& extra_env = {},
               const std::vector<std::string>& extra_args = {}, bool own_group = false) {
        return spawn(tool, args(base, lib, extra_args), env(extra_env), io(), own_group);
    }

    Done compile(const fs::path& base, const fs::path& lib, const std::vector<std::string>& extra_env = {},
                 const std::vector<std::string>& extra_args = {}) {
        return await(start(base, lib, extra_env, extra_args));
    }
};

/// Member `name` of JSON object `v`; throws when there is none.
const skc::Value& at(const skc::Value& v, const char* name) {
    if (const skc::Value* m = v.find(name)) return *m;
    throw std::out_of_range(std::string("no member ") + name);
}

/// `read(document)` of the JSON text `text`, or `fallback` when it is not JSON or `read` throws (a
/// member missing, or of another type).
template <class T, class Read>
T from_json(const std::string& text, T fallback, Read&& read) {
    try {
        return read(skc::parse_json(text));
    } catch (const std::exception&) {
        return fallback;
    }
}

/// A member of skc compile's JSON report ("" when absent or not JSON).
std::string report(const Done& d, const char* member) {
    return from_json<std::string>(d.out, {}, [&](const skc::Value& v) {
        const skc::Value& m = at(v, member);
        return m.is_string() ? m.as_string() : std::string();
    });
}

/// Whether skc compile's JSON report says every op it looked up was installed: the packages it
/// installed end with `installed` (one under the set's key, or a cover's parts and the rest's), and
/// the ops compiled and reused are every op gathered.
bool installed_all(const Done& d) {
    return from_json(d.out, false, [&](const skc::Value& v) {
        const skc::Array& packages = at(v, "packages").as_array();
        const skc::Value& counts = at(v, "counts");
        return !packages.empty() && packages.back().as_string() == report(d, "installed") &&
               at(counts, "compiled").as_int() + at(counts, "reused").as_int() == at(counts, "gathered").as_int();
    });
}

/// What is wrong with a run that should have succeeded and installed: its status, its report, the
/// op library, the cache.
std::vector<std::string> success_faults(const Done& d, const fs::path& base, const fs::path& lib,
                                        const std::string& what) {
    std::vector<std::string> faults;
    if (d.status != 0) {
        faults.push_back(what + " exited with status " + std::to_string(d.status) + ": " +
                         one_line(compile_error(d.err)));
    } else {
        if (report(d, "key").empty() || !installed_all(d))
            faults.push_back(what + " did not install every package of its ops: " + one_line(d.out));
        if (std::string f = library_fault(lib); !f.empty()) faults.push_back(what + ": " + f);
    }
    for (const std::string& f : cache_faults(base)) faults.push_back("after " + what + ": " + f);
    return faults;
}

std::string join(const std::vector<std::string>& v, const std::string& sep = "\n  ") {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
    return s;
}

// ------------------------------------------------------------------------------------------------
// Full disk

/// What the roomy run wrote, stage by stage (bytes allocated on the tmpfs).
struct Sizes {
    std::uint64_t setup = 0;          // the cache's files written before the run folder (manifest, compiler memo)
    std::uint64_t ops = 0;            // the op info files of the run folder
    std::uint64_t compile_start = 0;  // in use when the compiler started
    std::uint64_t compile_peak = 0;   // the most in use while it ran
    std::uint64_t package = 0;        // its package
    std::uint64_t work = 0;           // its work files at their most (without the package)
    std::uint64_t entry = 0;          // the cache entry: the package's copy, the entry, the op list
    std::uint64_t install = 0;        // the op library
    std::uint64_t total = 0;          // in use at the end
    std::uint64_t peak = 0;           // the most in use at any time
};

Sizes measure_roomy_run(Rig& rig, Tmpfs& disk, const fs::path& base, const fs::path& lib) {
    disk.clear();
    fs::create_directories(base);
    std::error_code ec;
    fs::remove(rig.marks / "compile-started", ec);
    fs::remove(rig.marks / "compile-ended", ec);
    const fs::path started = rig.marks / "compile-started", ended = rig.marks / "compile-ended";
    Sizes s;
    std::atomic<bool> stop{false};
    bool seen_start = false, seen_end = false;
    std::thread sampler([&] {
        while (!stop.load()) {
            const std::uint64_t used = disk.used_bytes();
            s.peak = std::max(s.peak, used);
            const bool a = ::access(started.c_str(), F_OK) == 0, b = a && ::access(ended.c_str(), F_OK) == 0;
            if (a && !seen_start) s.compile_start = used;
            seen_start = seen_start || a;
            if (a && !b) s.compile_peak = std::max(s.compile_peak, used);
            seen_end = seen_end || b;
            std::this_thread::sleep_for(100us);
        }
    });
    const Done d = rig.compile(base, lib, {"SKC_FAULTS_MARKS=" + rig.marks.string()});
    stop = true;
    sampler.join();
    REQUIRE_MESSAGE(d.status == 0, "the roomy run failed: " << d.err);
    REQUIRE(seen_start);
    REQUIRE(seen_end);
    const fs::path run_dir = report(d, "run_dir");
    const std::string key = report(d, "key");
    for (const auto& e : fs::directory_iterator(run_dir))
        if (e.is_directory()) s.ops += allocated_below(e.path());
        else if (e.path().extension() == ".run") s.package += allocated(e.path());
    for (const auto& e : fs::directory_iterator(cache_root(base)))
        if (e.is_regular_file()) s.setup += allocated(e.path());
    for (const auto& e : fs::directory_iterator(cache_root(base)))
        if (e.is_directory())
            s.entry += allocated(e.path() / "packages" / (key + ".run")) + allocated(e.path() / "entries" / key) +
                       allocated(e.path() / "oplists" / key);
    s.install = allocated_below(lib);
    s.total = disk.used_bytes();
    s.peak = std::max(s.peak, s.total);
    s.compile_peak = std::max(s.compile_peak, s.compile_start + s.package);
    s.work = s.compile_peak - s.compile_start - s.package;
    REQUIRE(s.ops > 0);
    REQUIRE(s.package > 0);
    REQUIRE(s.entry >= s.package);
    REQUIRE(s.install > 0);
    CHECK(library_fault(lib).empty());
    return s;
}

/// One free-space level and what happened at it.
struct Level {
    std::string name;
    std::uint64_t free = 0;      // bytes left free
    bool after_compile = false;  // left free once the compiler has ended (else from the start)
    int status = -1;
    std::string stage;  // where the run failed, from its message; "-" when it succeeded
    std::string message;
    std::vector<std::string> faults;
};

/// The stage a failed run's message names.
std::string stage_of(const std::string& err, const fs::path& lib) {
    const std::string e = compile_error(err);
    const std::string first = e.substr(0, e.find('\n'));
    if (first.find(lib.string() + "/") != std::string::npos || first.find("run package ") != std::string::npos)
        return "install";
    if (first.find("package is unusable") != std::string::npos || first.find("cut short") != std::string::npos)
        return "package";
    if (first.find("op_compiler.log: the compiler") != std::string::npos) {
        // The compiler failed: while it packed (makeself, or the payload's own files), else while
        // it compiled and linked.
        if (e.find("makeself") != std::string::npos || e.find("bad package") != std::string::npos) return "package";
        for (std::size_t at = e.find("cannot write "); at != std::string::npos; at = e.find("cannot write ", at + 1))
            if (e.substr(at, e.find('\n', at) - at).find("/payload/") != std::string::npos) return "package";
        return "compile";
    }
    if (first.find("/static_kernel_cache/") != std::string::npos)
        return first.find("/packages/") != std::string::npos || first.find("/entries/") != std::string::npos ||
                       first.find("/oplists/") != std::string::npos
                   ? "entry"
                   : "cache setup";
    if (first.find("_outputs") != std::string::npos || first.find("run folder") != std::string::npos)
        return "op info files";
    return "other";
}

void run_level(Rig& rig, Tmpfs& disk, const fs::path& base, const fs::path& lib, Level& level) {
    disk.clear();
    fs::create_directories(base);
    std::vector<std::string> env;
    if (level.after_compile) {
        env = {"SKC_FAULTS_FS=" + disk.path().string(), "SKC_FAULTS_LEAVE=" + std::to_string(level.free)};
    } else {
        disk.leave_free(level.free);
    }
    const Done d = rig.compile(base, lib, env);
    level.status = d.status;
    level.message = one_line(compile_error(d.err), 300);
    if (d.timed_out) level.faults.push_back("it did not end within its time and was killed");
    if (d.status == 0) {
        level.stage = "-";
        if (std::string f = library_fault(lib); !f.empty()) level.faults.push_back("it succeeded, but " + f);
    } else {
        level.stage = stage_of(d.err, lib);
        if (d.status >= 128) level.faults.push_back("it was killed by signal " + std::to_string(d.status - 128));
        if (d.err.find(enospc) == std::string::npos)
            level.faults.push_back("it failed without saying \"" + enospc + "\": " + one_line(compile_error(d.err)));
        if (!d.out.empty()) level.faults.push_back("it failed but printed a report: " + one_line(d.out));
    }
    for (const std::string& f : half_written({base, lib}, lib)) level.faults.push_back(f);
    // A full disk is no op's fault: no op may be remembered as one the compiler fails on.
    std::error_code ec;
    for (fs::recursive_directory_iterator it(base, ec), end; !ec && it != end; it.increment(ec))
        if (it->path().filename() == "known_failures.json")
            level.faults.push_back("the full disk was blamed on ops: " + it->path().string() + " holds " +
                                   one_line(skc_test::slurp(it->path()), 300));
    disk.free_fillers();
    const Done again = rig.compile(base, lib);
    for (const std::string& f : success_faults(again, base, lib, "the next run, with the space back"))
        level.faults.push_back(f);
}

// ------------------------------------------------------------------------------------------------
// Signals

/// A signal sent to skc at a moment of its run.
struct Hit {
    const char* what;
    int sig;
    bool group;  // to skc's whole process group (a terminal's Ctrl-C), else to skc alone
    std::chrono::milliseconds after;
};

std::string signal_text(const Hit& h) {
    return std::string(h.sig == SIGKILL  ? "SIGKILL"
                       : h.sig == SIGINT ? "SIGINT"
                                         : "signal " + std::to_string(h.sig)) +
           (h.group ? " to skc's process group" : " to skc") + " " + std::to_string(h.after.count()) + " ms " + h.what;
}

bool wait_for_file(const fs::path& p, Clock::duration limit) {
    for (const auto deadline = Clock::now() + limit; Clock::now() < deadline; std::this_thread::sleep_for(2ms))
        if (fs::exists(p)) return true;
    return fs::exists(p);
}

/// Sends `h` to `p` after its delay and waits for `p` to end: it must end at once with a failure, and
/// nothing it started may go on (neither the compiler nor the extraction).
Done after_signal(const Hit& h, const Proc& p) {
    std::this_thread::sleep_for(h.after);
    REQUIRE(::kill(h.group ? -p.pid : p.pid, h.sig) == 0);
    const auto sent = Clock::now();
    const Done d = await(p, 30s);
    INFO("skc's stderr: " << d.err);
    CHECK(d.status != 0);
    CHECK(d.ended - sent < 5s);
    const std::string left = processes_left(2500ms);
    CHECK_MESSAGE(left.empty(), "still running 2.5 s after skc ended:" << left);
    kill_children();
    return d;
}

/// A count of skc compile's JSON report (`counts.<member>`; -1 when absent or not JSON).
std::int64_t count(const Done& d, const char* member) {
    return from_json<std::int64_t>(d.out, -1,
                                   [&](const skc::Value& v) { return at(at(v, "counts"), member).as_int(); });
}

/// The packages skc compile's JSON report says it installed, in its order.
std::vector<std::string> installed_packages(const Done& d) {
    return from_json<std::vector<std::string>>(d.out, {}, [](const skc::Value& v) {
        std::vector<std::string> out;
        for (const skc::Value& p : at(v, "packages").as_array()) out.push_back(p.as_string());
        return out;
    });
}

/// The entries skc cache verify checked under `base` (-1 when it did not say).
std::int64_t verified_entries(const fs::path& base) {
    TempDir io;
    const Done v =
        await(spawn(tool, {"cache", "verify", "--base", base.string(), "--json"}, {"SKC_CACHE_DIR="}, io.path()));
    return from_json<std::int64_t>(v.out, -1,
                                   [](const skc::Value& doc) { return at(at(doc, "total"), "checked").as_int(); });
}

}  // namespace

// ================================================================================================

TEST_CASE(
    "a full disk at every point where skc compile writes: a clear failure, nothing half-written, and the next "
    "run succeeds") {
    require_private_mounts();
    Rig rig;
    Tmpfs disk(rig.tmp / "disk", 8u << 20, 4096);
    const Reaper reaper;
    const fs::path base = disk / "base", lib = disk / "lib";

    const Sizes s = measure_roomy_run(rig, disk, base, lib);
    MESSAGE("roomy run, bytes on the tmpfs (page "
            << page_size() << "): cache setup " << in_pages(s.setup) << "; op info files " << in_pages(s.ops)
            << "; in use when the compiler started " << in_pages(s.compile_start) << ", at most while it ran "
            << in_pages(s.compile_peak) << " (work files " << in_pages(s.work) << ", package " << in_pages(s.package)
            << "); cache entry and package copy " << in_pages(s.entry) << "; install " << in_pages(s.install)
            << "; at the end " << in_pages(s.total) << "; peak " << in_pages(s.peak));

    std::vector<Level> levels;
    auto add = [&](std::string name, std::uint64_t free, bool after_compile) {
        levels.push_back(Level{std::move(name), pages_down(free), after_compile, -1, {}, {}, {}});
    };
    // A level in the middle of each stage.
    add("op info files", s.setup + s.ops / 2, false);
    add("compile", s.compile_start + s.work / 2, false);
    add("package", s.compile_start + s.work + s.package / 2, false);
    add("entry, nothing left after the compile", 0, true);
    add("entry", s.entry / 2, true);
    add("install", s.entry + s.install / 2, true);
    // The sweep, from nothing to the peak.
    const std::uint64_t peak_pages = pages_up(s.peak) / page_size();
    std::set<std::uint64_t> swept;
    for (std::uint64_t i = 0; i <= 24; ++i) swept.insert((i * peak_pages + 12) / 24 * page_size());
    for (const std::uint64_t free : swept) add("sweep", free, false);

    for (Level& level : levels) run_level(rig, disk, base, lib, level);

    std::string table;
    std::set<std::string> stages;
    for (const Level& l : levels) {
        stages.insert(l.stage);
        table += "\n  " + l.name + ": " + std::to_string(l.free / page_size()) + " pages free" +
                 (l.after_compile ? " after the compile" : "") + ": exit " + std::to_string(l.status) + ", stage " +
                 l.stage + (l.status == 0 ? std::string() : ": " + l.message) +
                 (l.faults.empty() ? std::string() : "\n      FAULTS: " + join(l.faults, "\n      "));
    }
    MESSAGE("levels:" << table);
    for (const Level& l : levels)
        CHECK_MESSAGE(l.faults.empty(), l.name << " level, " << in_pages(l.free) << " free"
                                               << (l.after_compile ? " after the compile" : "") << " (exit " << l.status
                                               << ", stage " << l.stage << "):\n  " << join(l.faults));
    for (const char* stage : {"op info files", "compile", "package", "entry", "install"})
        CHECK_MESSAGE(stages.count(stage) == 1, "no level failed in the " << stage << " stage");
}

TEST_CASE("a read-only base: exit status 2 naming the read-only file system, and nothing changes") {
    require_private_mounts();
    Rig rig;
    Tmpfs disk(rig.tmp / "disk", 16u << 20, 4096);
    const Reaper reaper;
    const fs::path base = disk / "base", lib = disk / "lib";
    fs::create_directories(base);
    for (const bool filled : {false, true}) {
        CAPTURE(filled);
        if (filled) REQUIRE(rig.compile(base, lib).status == 0);  // a cache entry and an install: a hit is possible
        const auto before = skc_test::snapshot_with_times(disk.path());
        disk.set_read_only(true);
        const Done d = rig.compile(base, lib);
        disk.set_read_only(false);
        INFO(d.err);
        CHECK(d.status == 2);  // docs/cli.md: a --base that is not writable is bad input
        CHECK(d.out.empty());
        CHECK(d.err.rfind("skc compile: ", 0) == 0);
        CHECK(d.err.find(base.string()) != std::string::npos);
        const std::string erofs = std::strerror(EROFS);  // "Read-only file system"
        CHECK_MESSAGE(d.err.find(erofs) != std::string::npos,
                      "the message does not say that the file system is read-only (\"" << erofs << "\")");
        CHECK(skc_test::snapshot_with_times(disk.path()) == before);
        const Done again = rig.compile(base, lib);
        CHECK_MESSAGE(success_faults(again, base, lib, "the run on the file system made writable again").empty(),
                      join(success_faults(again, base, lib, "the run on the file system made writable again")));
    }
}

TEST_CASE("no inodes left: a clear failure, nothing half-written, and a correct run once inodes are free") {
    require_private_mounts();
    Rig rig;
    Tmpfs disk(rig.tmp / "disk", 16u << 20, 400);
    const Reaper reaper;
    const fs::path base = disk / "base", lib = disk / "lib";
    fs::create_directories(base);
    const std::uint64_t before = disk.used_inodes();
    REQUIRE(rig.compile(base, lib).status == 0);
    const std::uint64_t run = disk.used_inodes() - before;
    MESSAGE("a run takes " << run << " inodes");
    for (const std::uint64_t leave : {std::uint64_t{0}, run / 3, 2 * run / 3}) {
        CAPTURE(leave);
        disk.clear();
        fs::create_directories(base);
        disk.leave_inodes(leave);
        const Done d = rig.compile(base, lib);
        MESSAGE(leave << " inodes free: exit " << d.status << ": " << one_line(compile_error(d.err), 300));
        CHECK(d.status < 128);
        if (d.status != 0) {
            CHECK_MESSAGE(d.err.find(enospc) != std::string::npos,
                          "the message does not say \"" << enospc << "\": " << d.err);
            CHECK(d.out.empty());
        } else {
            CHECK(library_fault(lib).empty());
        }
        const std::vector<std::string> left = half_written({base, lib}, lib);
        CHECK_MESSAGE(left.empty(), join(left));
        disk.free_fillers();
        const Done again = rig.compile(base, lib);
        const std::vector<std::string> faults = success_faults(again, base, lib, "the run with inodes free");
        CHECK_MESSAGE(faults.empty(), join(faults));
    }
}

TEST_CASE(
    "the op library on a full file system of its own: compiled and stored, the install fails clearly, the next "
    "run hits and installs") {
    require_private_mounts();
    Rig rig;
    Tmpfs disk(rig.tmp / "disk", 16u << 20, 4096);
    Tmpfs libfs(rig.tmp / "libfs", 1u << 20, 4096);
    const Reaper reaper;
    const fs::path base = disk / "base", lib = libfs / "lib";
    fs::create_directories(base);
    // How much an install takes, measured on the roomy disk.
    REQUIRE(rig.compile(base, disk / "probe").status == 0);
    const std::uint64_t install = allocated_below(disk / "probe");
    for (const std::uint64_t leave : {std::uint64_t{0}, pages_down(install / 2)}) {
        CAPTURE(leave);
        disk.clear();
        libfs.clear();
        fs::create_directories(base);
        libfs.leave_free(leave);
        const Done d = rig.compile(base, lib);
        MESSAGE("op library with " << in_pages(leave) << " free: exit " << d.status << ": "
                                   << one_line(compile_error(d.err), 300));
        CHECK(d.status == 1);
        CHECK(d.out.empty());
        CHECK_MESSAGE(d.err.find(enospc) != std::string::npos,
                      "the message does not say \"" << enospc << "\": " << d.err);
        CHECK_MESSAGE(d.err.find(lib.string()) != std::string::npos,
                      "the message does not name the op library: " << d.err);
        CHECK(cached_packages(base).size() == 1);  // compiled and stored
        const std::vector<std::string> cache = cache_faults(base);
        CHECK_MESSAGE(cache.empty(), join(cache));
        const std::vector<std::string> left = half_written({base, lib}, lib);
        CHECK_MESSAGE(left.empty(), join(left));
        libfs.free_fillers();
        const Done again = rig.compile(base, lib);
        CHECK(report(again, "outcome") == "hit");
        const std::vector<std::string> faults =
            success_faults(again, base, lib, "the run with the op library's space back");
        CHECK_MESSAGE(faults.empty(), join(faults));
    }
}

TEST_CASE(
    "signals during the install and the compile: nothing half-installed, nothing left running, and the next run "
    "installs") {
    require_private_mounts();
    Rig rig;
    Tmpfs disk(rig.tmp / "disk", 64u << 20, 16384);
    const Reaper reaper;
    const fs::path base = disk / "base";
    fs::create_directories(base);
    // The cache has the package: each install below is a hit's.
    const Done first = rig.compile(base, {});
    REQUIRE_MESSAGE(first.status == 0, first.err);
    const std::string key = report(first, "key");
    const std::string path =
        "PATH=" + rig.shim.string() + ":" + std::string(std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin");

    int serial = 0;

    const std::vector<Hit> install_hits{
        {"into the install, before the archive is read", SIGKILL, false, 500ms},
        {"into the install, while its first file is written", SIGKILL, false, 1500ms},
        {"into the install, while its first file is written", SIGINT, false, 1500ms},
        {"into the install, while its first file is written", SIGINT, true, 1500ms},
        {"into the install, once its files are written", SIGKILL, true, 2600ms},
    };
    for (const Hit& h : install_hits) {
        INFO(signal_text(h));
        const fs::path lib = disk / ("lib-" + std::to_string(++serial));
        const fs::path slow = rig.tmp / ("extracting-" + std::to_string(serial));
        const Proc p = rig.start(base, lib, {path, "SKC_FAULTS_SLOW=" + slow.string()}, {}, /*own_group=*/true);
        REQUIRE_MESSAGE(wait_for_file(slow, 60s), "the extraction did not start");
        const Done d = after_signal(h, p);
        MESSAGE(signal_text(h) << ": exit " << d.status
                               << (d.err.empty() ? std::string() : ", " + one_line(compile_error(d.err), 200)));
        // Not installed, not half-installed.
        const std::vector<std::string> listed = listed_packages(lib);
        CHECK_MESSAGE(std::find(listed.begin(), listed.end(), key) == listed.end(), "config.ini lists the package");
        CHECK_MESSAGE(skc_test::slurp(lib_base(lib) / "config" / device / "binary_info_config.json").find(key) ==
                          std::string::npos,
                      "the index names the package");
        CHECK_FALSE(fs::exists(lib_base(lib) / key));
        const std::vector<std::string> left = half_written({base}, lib, /*staging_allowed=*/true);
        CHECK_MESSAGE(left.empty(), join(left));
        // The next run installs it (and removes what the killed one left).
        const Done again = rig.compile(base, lib);
        CHECK(report(again, "outcome") == "hit");
        const std::vector<std::string> faults = success_faults(again, base, lib, "the next run");
        CHECK_MESSAGE(faults.empty(), join(faults));
        const std::vector<std::string> after = half_written({base, lib}, lib);
        CHECK_MESSAGE(after.empty(), join(after));
    }

    // Into the compile: while host_op_compiler runs (it dies of SIGPIPE at its next line of output
    // once skc is gone, so this alone would not show an orphaned compiler), and once it has ended
    // while the compiler script lingers 5 s without a word: a compiler skc no longer ends goes on.
    const std::vector<std::pair<Hit, const char*>> compile_hits{
        {{"into the compile", SIGINT, true, 500ms}, "compile-started"},
        {{"into the compile's last 5 s (the compiler says nothing)", SIGINT, true, 300ms}, "compile-ended"},
        {{"into the compile's last 5 s (the compiler says nothing)", SIGKILL, true, 300ms}, "compile-ended"},
        {{"into the compile's last 5 s (the compiler says nothing)", SIGKILL, false, 300ms}, "compile-ended"},
    };
    for (const auto& hit_at : compile_hits) {
        const Hit& h = hit_at.first;
        const std::string mark = hit_at.second;
        INFO(signal_text(h));
        const fs::path b = disk / ("base-" + std::to_string(++serial)), lib = disk / ("lib-" + std::to_string(serial));
        fs::create_directories(b);
        std::error_code ec;
        fs::remove(rig.marks / "compile-started", ec);
        fs::remove(rig.marks / "compile-ended", ec);
        const Proc p = rig.start(b, lib, {"SKC_FAULTS_MARKS=" + rig.marks.string(), "SKC_FAULTS_LINGER=5"}, {},
                                 /*own_group=*/true);
        REQUIRE_MESSAGE(wait_for_file(rig.marks / mark, 60s), "the compiler did not come to " << mark);
        const Done d = after_signal(h, p);
        MESSAGE(signal_text(h) << ": exit " << d.status
                               << (d.err.empty() ? std::string() : ", " + one_line(compile_error(d.err), 200)));
        CHECK(cached_packages(b).empty());
        CHECK(listed_packages(lib).empty());
        const Done again = rig.compile(b, lib);
        CHECK(report(again, "outcome") == "compiled");
        const std::vector<std::string> faults = success_faults(again, b, lib, "the next run");
        CHECK_MESSAGE(faults.empty(), join(faults));
    }

    // Into a cover's compile of the rest: two of the three ops are cached as one package; the run
    // of all three compiles the third alone and is killed there. The part stays cached and sound,
    // nothing of the third is cached or installed, and the next run compiles only the third.
    {
        const Hit h{"into the compile of a cover's rest", SIGKILL, true, 300ms};
        INFO(signal_text(h));
        const fs::path b = disk / "base-cover", lib = disk / "lib-cover";
        fs::create_directories(b);
        const fs::path all_ops = rig.ops;
        rig.ops = rig.tmp / "two-ops";
        fs::create_directories(rig.ops);
        for (std::size_t i = 0; i < 2; ++i) fs::copy_file(all_ops / op_files[i], rig.ops / op_files[i]);
        const Done part = rig.compile(b, {});
        REQUIRE_MESSAGE(part.status == 0, part.err);
        rig.ops = all_ops;
        std::error_code ec;
        fs::remove(rig.marks / "compile-ended", ec);
        const Proc p = rig.start(b, lib, {"SKC_FAULTS_MARKS=" + rig.marks.string(), "SKC_FAULTS_LINGER=5"}, {},
                                 /*own_group=*/true);
        REQUIRE_MESSAGE(wait_for_file(rig.marks / "compile-ended", 60s), "the compiler did not end");
        const Done d = after_signal(h, p);
        MESSAGE(signal_text(h) << ": exit " << d.status
                               << (d.err.empty() ? std::string() : ", " + one_line(compile_error(d.err), 200)));
        CHECK(cached_packages(b).size() == 1);  // the part's
        CHECK(listed_packages(lib).empty());
        const Done again = rig.compile(b, lib);
        CHECK(report(again, "outcome") == "compiled");
        CHECK(again.out.find("\"compiled\": 1,") != std::string::npos);
        CHECK(again.out.find("\"reused\": 2") != std::string::npos);
        const std::vector<std::string> faults = success_faults(again, b, lib, "the next run after the cover's");
        CHECK_MESSAGE(faults.empty(), join(faults));
    }
}

TEST_CASE(
    "SIGKILL while a cover's parts are installed: the cache verifies clean, every entry intact, and the next run "
    "installs every kernel") {
    // A cover (docs/cache.md, "A new shape compiles only itself") pins its parts, compiles and caches
    // the rest, then installs every part and the rest's package. Each case caches its parts, then runs
    // skc compile of all three ops with the slow extraction (the Rig's gzip) and kills it while it
    // extracts the package of its `extraction`th install: nothing is lost.
    require_private_mounts();
    Rig rig;
    Tmpfs disk(rig.tmp / "disk", 64u << 20, 16384);
    const Reaper reaper;
    const std::string path =
        "PATH=" + rig.shim.string() + ":" + std::string(std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin");
    const fs::path all_ops = rig.ops;
    int serial = 0;
    // skc compile of the op files `files` alone into `base`, not installed: a part of the covers below.
    auto cache_part = [&](const fs::path& base, const std::vector<std::string>& files) {
        rig.ops = rig.tmp / ("part-ops-" + std::to_string(++serial));
        fs::create_directories(rig.ops);
        for (const std::string& f : files) fs::copy_file(all_ops / f, rig.ops / f);
        const Done d = rig.compile(base, {});
        rig.ops = all_ops;
        REQUIRE_MESSAGE(d.status == 0, d.err);
        return report(d, "key");
    };
    struct Case {
        Hit hit;
        std::vector<std::vector<std::string>> parts;  // the op files of each package cached first
        bool rest;                                    // whether the cover compiles a rest (the third op)
        std::size_t extraction;                       // the install killed: 1 is the first part's
    };
    const std::vector<Case> cases{
        {{"into the install of a cover's first part (the rest compiled and cached before)", SIGKILL, false, 1500ms},
         {{op_files[0], op_files[1]}},
         true,
         1},
        {{"into the install of a cover's middle part (the second of 3 packages)", SIGKILL, true, 1500ms},
         {{op_files[0]}, {op_files[1]}},
         true,
         2},
        {{"into the install of the first part of a cover with no rest", SIGKILL, true, 1500ms},
         {{op_files[0], op_files[1]}, {op_files[2]}},
         false,
         1},
    };
    for (const Case& c : cases) {
        INFO(signal_text(c.hit));
        const fs::path b = disk / ("base-" + std::to_string(++serial)), lib = disk / ("lib-" + std::to_string(serial));
        fs::create_directories(b);
        std::vector<std::string> part_keys;
        for (const std::vector<std::string>& files : c.parts) part_keys.push_back(cache_part(b, files));
        const std::size_t entries = c.parts.size() + (c.rest ? 1 : 0);
        const fs::path slow = rig.tmp / ("extracting-" + std::to_string(serial));
        const Proc p = rig.start(b, lib, {path, "SKC_FAULTS_SLOW=" + slow.string()}, {}, /*own_group=*/true);
        for (std::size_t i = 1; i <= c.extraction; ++i) {
            REQUIRE_MESSAGE(wait_for_file(slow, 120s), "extraction " << i << " did not start");
            if (i < c.extraction) fs::remove(slow);  // each extraction takes 6 s: the next one makes it again
        }
        const Done d = after_signal(c.hit, p);
        MESSAGE(signal_text(c.hit) << ": exit " << d.status
                                   << (d.err.empty() ? std::string() : ", " + one_line(compile_error(d.err), 200)));
        // Every package is cached (the rest's before the first install), every entry verifies, and the
        // installs before the one killed are whole, that one is not there.
        CHECK(cached_packages(b).size() == entries);
        CHECK(verified_entries(b) == static_cast<std::int64_t>(entries));
        const std::vector<std::string> cache = cache_faults(b);
        CHECK_MESSAGE(cache.empty(), join(cache));
        const std::vector<std::string> left = half_written({b}, lib, /*staging_allowed=*/true);
        CHECK_MESSAGE(left.empty(), join(left));
        const std::vector<std::string> listed = listed_packages(lib);
        CHECK(listed.size() == c.extraction - 1);
        for (const std::string& stem : listed)
            CHECK_MESSAGE(std::find(part_keys.begin(), part_keys.end(), stem) != part_keys.end(),
                          "config.ini lists " << stem << ", which is not a part");
        // A fresh process with the same set: the cover now holds every op; it compiles nothing and
        // installs every package, and the op library gives the three kernels.
        const Done again = rig.compile(b, lib);
        CHECK(report(again, "outcome") == "hit");
        CHECK(count(again, "compiled") == 0);
        CHECK(count(again, "reused") == static_cast<std::int64_t>(kernel_count));
        const std::vector<std::string> installed = installed_packages(again);
        CHECK(installed.size() == entries);
        for (const std::string& key : part_keys)
            CHECK_MESSAGE(std::find(installed.begin(), installed.end(), key) != installed.end(),
                          "the next run did not install the part " << key);
        const std::vector<std::string> faults = success_faults(again, b, lib, "the next run");
        CHECK_MESSAGE(faults.empty(), join(faults));
        CHECK(cached_packages(b).size() == entries);
        const std::vector<std::string> after = half_written({b, lib}, lib);
        CHECK_MESSAGE(after.empty(), join(after));
    }
}

TEST_CASE(
    "a rank killed while the others wait for it at the second barrier: the others end at once with a clear error, "
    "and the next job works") {
    // tests/skc/policy/gather_test.cpp kills a rank while the leader compiles; the others find it dead
    // when they come to the barrier. Here the others are already waiting in the barrier when it dies.
    require_private_mounts();
    Rig rig;
    Tmpfs disk(rig.tmp / "disk", 64u << 20, 16384);
    const Reaper reaper;
    const fs::path base = disk / "base", lib = disk / "lib";
    fs::create_directories(base);
    constexpr int world = 3;
    auto start_job = [&](const std::string& run_id) {
        std::vector<Proc> ranks;
        for (int k = 0; k < world; ++k)
            ranks.push_back(rig.start(base, lib,
                                      {"LOCAL_WORLD_SIZE=" + std::to_string(world), "LOCAL_RANK=" + std::to_string(k),
                                       "SKC_RUN_ID=" + run_id},
                                      {"--timeout", "20"}));
        return ranks;
    };
    // In the job's rendezvous folders: files named `prefix*`, and lines of `passed` (ranks past the
    // second barrier).
    auto each_file = [&](const std::string& run_id, const std::function<void(const fs::path&)>& fn) {
        std::error_code ec;
        const fs::path dir = base / "static_kernel_compile_outputs" / "rendezvous" / run_id;
        for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
             it.increment(ec))
            fn(it->path());
    };
    auto count_files = [&](const std::string& run_id, const std::string& prefix) {
        std::size_t n = 0;
        each_file(run_id, [&](const fs::path& p) { n += p.filename().string().rfind(prefix, 0) == 0 ? 1 : 0; });
        return n;
    };
    auto count_passed = [&](const std::string& run_id) {
        std::size_t n = 0;
        each_file(run_id, [&](const fs::path& p) {
            if (p.filename() != "passed") return;
            std::ifstream in(p);
            for (std::string line; std::getline(in, line);) ++n;
        });
        return n;
    };
    auto wait_for = [&](const std::function<bool()>& done) {
        for (const auto deadline = Clock::now() + 60s; Clock::now() < deadline; std::this_thread::sleep_for(5ms))
            if (done()) return true;
        return false;
    };

    std::vector<Proc> ranks = start_job("faults-job-1");
    // Rank 2 has claimed its place with its ops (so the leader gathers them and compiles), then stops
    // before the second barrier; once ranks 0 and 1 wait at it, rank 2 dies.
    REQUIRE(wait_for([&] { return count_files("faults-job-1", "r2-of-3.") >= 1; }));
    REQUIRE(::kill(ranks[2].pid, SIGSTOP) == 0);
    REQUIRE_MESSAGE(wait_for([&] { return count_passed("faults-job-1") >= 2; }),
                    "ranks 0 and 1 did not come to the second barrier");
    std::this_thread::sleep_for(300ms);
    Done probe;
    REQUIRE_FALSE(reap(ranks[0], probe));  // both still wait
    REQUIRE_FALSE(reap(ranks[1], probe));
    REQUIRE(::kill(ranks[2].pid, SIGKILL) == 0);
    const auto killed = Clock::now();
    const Done dead = await(ranks[2], 10s);
    CHECK(dead.status == 128 + SIGKILL);
    const std::string died = "local rank 2 (pid " + std::to_string(ranks[2].pid) + ") died before the second barrier";
    for (int k = 0; k < 2; ++k) {
        const Done d = await(ranks[static_cast<std::size_t>(k)], 60s);
        MESSAGE("local rank " << k << ": exit " << d.status << " "
                              << std::chrono::duration_cast<std::chrono::milliseconds>(d.ended - killed).count()
                              << " ms after the kill: " << one_line(d.err, 300));
        CHECK(d.status == 1);  // docs/cli.md: another rank died
        CHECK(d.out.empty());
        CHECK(d.err.find(died) != std::string::npos);
        CHECK(d.ended - killed < 3s);  // at once, not at the end of the barrier's 20 s
    }
    CHECK(processes_left(2s).empty());

    // The next job: every rank succeeds with the same key, and the op library serves the kernels.
    std::vector<Proc> next = start_job("faults-job-2");
    std::set<std::string> keys;
    for (int k = 0; k < world; ++k) {
        const Done d = await(next[static_cast<std::size_t>(k)], 120s);
        INFO("local rank " << k << ": " << d.err);
        CHECK(d.status == 0);
        keys.insert(report(d, "key"));
    }
    CHECK(keys.size() == 1);
    CHECK(library_fault(lib).empty());
    const std::vector<std::string> cache = cache_faults(base);
    CHECK_MESSAGE(cache.empty(), join(cache));
}

}  // namespace faults_faults_test
