// skc/policy/installer.hpp: the Installer concept and its models: RunPackageInstaller, NoInstall.
//
// An installer puts a run package (docs/run-package.md) into an op library L (SPEC section 9):
//   L/static_kernel/<backend>/<stem>/            the package's payload plus its own uninstall.sh
//   L/static_kernel/<backend>/config/<device>/binary_info_config.json   the global kernel index
//   L/static_kernel/<backend>/config.ini         install order, one package per line
//   L/static_kernel/<backend>/uninstall.sh       removes every package and the shared files
//   L/static_kernel/<backend>/.holders/<stem>/   one file per holder of the package
//   L/static_kernel/<backend>/install.lock       the node-wide install lock (FileLock, flock)
//
// RunPackageInstaller extracts the package with posix_spawn (`/bin/sh <pkg> --quiet --noexec
// --nox11 --target <staging>`, never a shell string), output to a log whose tail is quoted in
// errors, checks the payload (index, files, names), and then, holding the install lock, renames
// the staging folder into place and rewrites the global index and config.ini atomically (temp file,
// fsync, rename: FilesystemStorage::write). A package already installed is not extracted again:
// the caller only becomes one more holder.
//
// Reference counting: a holder is a file `.holders/<stem>/<pid>-<starttime>.<n>` (starttime from
// /proc/<pid>/stat, so a reused pid is not mistaken for the holder) or `persistent`. A package is
// removed when its last live holder goes; every install, uninstall and cleanup() first removes the
// holders of dead processes and the packages left without a holder (orphans of a SIGKILL).
//
// Process-scoped installs end with the Installation handle, at exit() (an atexit hook releases the
// handles still alive) and on SIGINT/SIGTERM. Signal handling, by design: the handler is installed
// once, and only for signals whose action was SIG_DFL. It does only async-signal-safe work: it
// unlinks this process's holder files (paths kept in a fixed static table), restores SIG_DFL and
// re-raises the signal, so the process ends with the status the signal gives. It does not remove
// packages or rewrite the index (that needs locks, allocation and a possibly interrupted lock
// holder); the next process that installs, uninstalls or cleans up removes the packages left
// without holders. When the host had its own handler for a signal, skc installs none for it: the
// host decides whether the process ends; if it exits normally the atexit hook runs, and if it dies
// otherwise the dead-holder cleanup applies.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <concepts>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../detail/process.hpp"
#include "../error.hpp"
#include "../op_info_io.hpp"
#include "../run_package.hpp"
#include "lock.hpp"
#include "storage.hpp"

namespace skc {

struct InstallOptions {
    std::string backend = "host";  // L/static_kernel/<backend>; the package's index must agree
    bool persistent = false;       // stays until uninstall(stem, persistent = true)
    std::chrono::seconds timeout{300};  // extraction time limit
};

/// One installed package as list() sees it.
struct InstalledPackage {
    std::string stem;
    std::string device;
    std::filesystem::path folder;
    std::vector<std::string> holders;  // holder file names (dead ones are removed before listing)
    [[nodiscard]] bool persistent() const {
        return std::find(holders.begin(), holders.end(), "persistent") != holders.end();
    }
};

/// The result of an install: what was installed and where. For a process-scoped install it is
/// also the reference: destroying it (or release()) gives the reference up. Move-only.
class Installation {
public:
    Installation() = default;
    Installation(std::string stem, std::filesystem::path folder, bool extracted, std::function<void()> release)
        : stem_(std::move(stem)), folder_(std::move(folder)), extracted_(extracted), release_(std::move(release)) {}
    Installation(Installation&& o) noexcept
        : stem_(std::move(o.stem_)), folder_(std::move(o.folder_)), extracted_(o.extracted_),
          release_(std::exchange(o.release_, nullptr)) {}
    Installation& operator=(Installation&& o) noexcept {
        if (this != &o) {
            release_noexcept();
            stem_ = std::move(o.stem_);
            folder_ = std::move(o.folder_);
            extracted_ = o.extracted_;
            release_ = std::exchange(o.release_, nullptr);
        }
        return *this;
    }
    Installation(const Installation&) = delete;
    Installation& operator=(const Installation&) = delete;
    ~Installation() { release_noexcept(); }

    [[nodiscard]] const std::string& stem() const noexcept { return stem_; }
    /// L/static_kernel/<backend>/<stem>
    [[nodiscard]] const std::filesystem::path& folder() const noexcept { return folder_; }
    /// True when this call extracted the package; false when it was installed already.
    [[nodiscard]] bool extracted() const noexcept { return extracted_; }
    /// True while this handle holds a reference (process-scoped installs).
    [[nodiscard]] bool holds() const noexcept { return static_cast<bool>(release_); }

    /// Gives the reference up now (the package goes when no live holder is left). Throws on I/O errors.
    void release() {
        if (auto f = std::exchange(release_, nullptr)) f();
    }
    /// Keeps the reference for the rest of the process (released at exit or by uninstall()).
    void detach() noexcept { release_ = nullptr; }

private:
    void release_noexcept() noexcept {
        try {
            release();
        } catch (...) {  // a destructor must not throw; the next process cleans up
        }
    }

    std::string stem_;
    std::filesystem::path folder_;
    bool extracted_ = false;
    std::function<void()> release_;
};

template <class I>
concept Installer = requires(I& i, const std::filesystem::path& package, const std::filesystem::path& library,
                             const InstallOptions& opt, std::string_view stem, bool persistent) {
    { i.install(package, library, opt) } -> std::same_as<Installation>;
    { i.uninstall(library, stem, opt.backend, persistent) } -> std::same_as<bool>;
    { i.list(library, opt.backend) } -> std::same_as<std::vector<InstalledPackage>>;
};

namespace detail {

inline bool safe_component(std::string_view s) {
    if (s.empty() || s.size() > 200 || s.front() == '.') return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
               c == '.';
    });
}

/// The start time of a process (field 22 of /proc/<pid>/stat), nullopt when it is gone or a zombie.
inline std::optional<unsigned long long> process_start_time(long pid) {
    const std::string p = pid == 0 ? std::string("/proc/self/stat") : "/proc/" + std::to_string(pid) + "/stat";
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    char buf[1024];
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) return std::nullopt;
    const std::string_view s(buf, static_cast<std::size_t>(n));
    std::size_t pos = s.rfind(')');
    if (pos == std::string_view::npos || pos + 2 >= s.size()) return std::nullopt;
    if (s[pos + 2] == 'Z' || s[pos + 2] == 'X') return std::nullopt;  // dead, not reaped yet
    pos += 2;  // field 3 (state) starts here; field 22 is 19 fields further
    for (int field = 3; field < 22; ++field) {
        pos = s.find(' ', pos);
        if (pos == std::string_view::npos) return std::nullopt;
        ++pos;
    }
    unsigned long long v = 0;
    for (; pos < s.size() && s[pos] >= '0' && s[pos] <= '9'; ++pos) v = v * 10 + static_cast<unsigned>(s[pos] - '0');
    return v;
}

/// Whether holder file `name` stands for a live holder.
inline bool holder_alive(const std::string& name) {
    if (name == "persistent") return true;
    const auto dash = name.find('-'), dot = name.find('.');
    if (dash == std::string::npos || dot == std::string::npos || dot < dash) return false;
    try {
        const long pid = std::stol(name.substr(0, dash));
        const unsigned long long start = std::stoull(name.substr(dash + 1, dot - dash - 1));
        const auto now = process_start_time(pid);
        return pid > 0 && now && *now == start;
    } catch (const std::exception&) {
        return false;
    }
}

// ---- the process's holdings, reachable from a signal handler --------------------------------------

constexpr std::size_t max_signal_holders = 256;
/// A holder file's path, readable from a signal handler on any thread. `state` hands the slot over:
/// 0 free, 1 being written (claim), 2 ready, 3 taken by the handler. Every change is a lock-free
/// atomic compare-and-swap, so a slot is never rewritten while the handler reads it, and the
/// handler reads only a path whose writing happened before (release, then acquire).
struct SignalSlot {
    std::atomic<int> state{0};
    std::atomic<pid_t> owner{0};  // the process that wrote it (a forked child skips it)
    char path[4096] = {};
};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<pid_t>::is_always_lock_free,
              "the signal handler needs lock-free atomics");
inline SignalSlot g_signal_slots[max_signal_holders];
inline struct sigaction g_prev_int {}, g_prev_term {};

extern "C" inline void skc_installer_signal_handler(int sig) {
    const int saved = errno;
    const pid_t self = ::getpid();
    for (SignalSlot& s : g_signal_slots) {
        int ready = 2;
        if (!s.state.compare_exchange_strong(ready, 3, std::memory_order_acquire)) continue;
        if (s.owner.load(std::memory_order_relaxed) == self) ::unlink(s.path);
    }
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(sig, &dfl, nullptr);
    errno = saved;
    ::raise(sig);  // blocked while the handler runs: delivered (default action) when it returns
}

/// One process-scoped holding: released at exit if still alive.
struct Holding {
    std::filesystem::path base;  // L/static_kernel/<backend>
    std::string stem;
    std::string holder;  // file name under .holders/<stem>/
    pid_t owner = 0;
    int slot = -1;
};

struct HoldingRegistry {
    std::mutex mu;
    std::map<std::uint64_t, Holding> live;
    std::uint64_t next = 1;
};
inline HoldingRegistry& holdings() {
    static auto* r = new HoldingRegistry;  // never destroyed: used from the atexit hook
    return *r;
}

inline int claim_signal_slot(const std::filesystem::path& holder_file) {
    const std::string p = holder_file.string();
    if (p.size() >= sizeof(SignalSlot::path)) return -1;
    for (std::size_t i = 0; i < max_signal_holders; ++i) {
        SignalSlot& s = g_signal_slots[i];
        int free = 0;
        if (!s.state.compare_exchange_strong(free, 1, std::memory_order_acquire)) continue;
        std::memcpy(s.path, p.c_str(), p.size() + 1);
        s.owner.store(::getpid(), std::memory_order_relaxed);
        s.state.store(2, std::memory_order_release);
        return static_cast<int>(i);
    }
    return -1;  // table full: this holding is cleaned up as a dead holder after a signal
}

/// Frees slot `i`, unless the signal handler has taken it (the process is ending then; the slot
/// stays taken).
inline void free_signal_slot(int i) {
    if (i < 0) return;
    int ready = 2;
    g_signal_slots[i].state.compare_exchange_strong(ready, 0, std::memory_order_acq_rel);
}

inline void install_signal_handlers_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        for (auto [sig, prev] : {std::pair{SIGINT, &g_prev_int}, std::pair{SIGTERM, &g_prev_term}}) {
            struct sigaction cur {};
            if (::sigaction(sig, nullptr, &cur) != 0) continue;
            if ((cur.sa_flags & SA_SIGINFO) != 0 || cur.sa_handler != SIG_DFL) continue;  // the host's
            struct sigaction sa {};
            sa.sa_handler = skc_installer_signal_handler;
            sigemptyset(&sa.sa_mask);
            sa.sa_flags = 0;
            ::sigaction(sig, &sa, prev);
        }
    });
}

}  // namespace detail

/// Installs makeself run packages into an op library. See the header comment.
class RunPackageInstaller {
public:
    /// `shell` runs the package (`/bin/sh <package> --quiet --noexec --nox11 --target <staging>`).
    explicit RunPackageInstaller(std::filesystem::path shell = "/bin/sh") : shell_(std::move(shell)) {}

    static std::filesystem::path base_of(const std::filesystem::path& library, std::string_view backend) {
        return library / "static_kernel" / std::string(backend);
    }

    /// Why `package` cannot be installed as it is (cut short, or failing makeself's own integrity
    /// check), or nullopt (run_package.hpp). The compiler host checks a new package with it before
    /// the cache stores it, and a cached one whose install failed.
    [[nodiscard]] std::optional<std::string> check(const std::filesystem::path& package) const {
        return run_package_fault(package, shell_);
    }

    Installation install(const std::filesystem::path& package, const std::filesystem::path& library,
                         const InstallOptions& opt) {
        const std::string stem = package.stem().string();
        check_name(stem, "package stem", package);
        check_name(opt.backend, "backend", package);
        const std::filesystem::path base = base_of(library, opt.backend);
        std::error_code ec;
        std::filesystem::create_directories(base, ec);
        if (ec)
            throw Error(Errc::io_error, "cannot create the op library folder: " + ec.message(),
                        ErrorContext{base.string(), {}, {}});
        FileLock locks(base);
        {
            auto guard = locks.lock("install", LockMode::exclusive);
            cleanup_locked(base);
            if (installed_locked(base, stem)) return hold_locked(base, stem, opt, false);
        }
        // Extract and check outside the lock: other installs go on meanwhile.
        static std::atomic<unsigned> counter{0};
        const std::string tag = stem + "-" + std::to_string(::getpid()) + "." + std::to_string(counter++);
        const std::filesystem::path staging = base / (".staging-" + tag);
        struct Cleanup {
            std::filesystem::path a;
            ~Cleanup() {
                std::error_code e;
                std::filesystem::remove_all(a, e);
            }
        } cleanup{staging};
        extract(package, staging, opt.timeout);
        const std::string device = check_payload(package, staging, opt.backend);
        write_text(staging / "uninstall.sh", package_uninstall_script(stem));
        ::chmod((staging / "uninstall.sh").c_str(), 0755);

        auto guard = locks.lock("install", LockMode::exclusive);
        cleanup_locked(base);
        if (installed_locked(base, stem)) return hold_locked(base, stem, opt, false);  // a racer won
        const std::filesystem::path folder = base / stem;
        std::filesystem::remove_all(folder, ec);  // a leftover not listed in config.ini
        if (::rename(staging.c_str(), folder.c_str()) != 0)
            throw Error(Errc::io_error, "run package " + stem + ": cannot move the package into place: " +
                                            std::strerror(errno), ErrorContext{folder.string(), {}, {}});
        fsync_dir(base);
        auto order = read_config(base);
        order.erase(std::remove_if(order.begin(), order.end(), [&](const auto& e) { return e.first == stem; }),
                    order.end());
        order.emplace_back(stem, device);
        Installation inst = hold_locked(base, stem, opt, true);
        publish_locked(base, order);
        return inst;
    }

    /// Gives up this process's references to `stem` (persistent = false; handles become inert) or
    /// the persistent reference (persistent = true). True when the package was removed.
    bool uninstall(const std::filesystem::path& library, std::string_view stem, std::string_view backend,
                   bool persistent) {
        const std::filesystem::path base = base_of(library, backend);
        check_name(std::string(stem), "package stem", base);
        if (!std::filesystem::exists(base)) return false;
        std::vector<std::string> mine;
        {
            auto& reg = detail::holdings();
            std::lock_guard lk(reg.mu);
            for (auto it = reg.live.begin(); it != reg.live.end();) {
                if (!persistent && it->second.base == base && it->second.stem == stem && it->second.owner == ::getpid()) {
                    mine.push_back(it->second.holder);
                    detail::free_signal_slot(it->second.slot);
                    it = reg.live.erase(it);
                } else {
                    ++it;
                }
            }
        }
        if (persistent) mine.push_back("persistent");
        FileLock locks(base);
        auto guard = locks.lock("install", LockMode::exclusive);
        for (const auto& h : mine) ::unlink((base / ".holders" / std::string(stem) / h).c_str());
        const bool was = installed_locked(base, std::string(stem));
        cleanup_locked(base);
        return was && !installed_locked(base, std::string(stem));
    }

    /// Removes dead holders, packages without holders and stale staging folders. Returns how many
    /// packages were removed.
    std::size_t cleanup(const std::filesystem::path& library, std::string_view backend) {
        const std::filesystem::path base = base_of(library, backend);
        if (!std::filesystem::exists(base)) return 0;
        FileLock locks(base);
        auto guard = locks.lock("install", LockMode::exclusive);
        return cleanup_locked(base);
    }

    /// The installed packages in install order (after removing dead holders and orphans).
    std::vector<InstalledPackage> list(const std::filesystem::path& library, std::string_view backend) {
        const std::filesystem::path base = base_of(library, backend);
        std::vector<InstalledPackage> out;
        if (!std::filesystem::exists(base)) return out;
        FileLock locks(base);
        auto guard = locks.lock("install", LockMode::exclusive);
        cleanup_locked(base);
        for (const auto& [stem, device] : read_config(base)) {
            InstalledPackage p{stem, device, base / stem, holders_of(base, stem)};
            out.push_back(std::move(p));
        }
        return out;
    }

private:
    using Order = std::vector<std::pair<std::string, std::string>>;  // (stem, device) in install order

    [[noreturn]] static void fail(Errc code, const std::filesystem::path& package, const std::string& what,
                                  const std::string& log_tail = {}) {
        throw Error(code, "run package " + package.stem().string() + ": " + what +
                              (log_tail.empty() ? std::string() : ". Last lines of its output:\n" + log_tail),
                    ErrorContext{package.string(), {}, {}});
    }

    static void check_name(const std::string& name, const char* what, const std::filesystem::path& where) {
        if (!detail::safe_component(name))
            throw Error(Errc::invalid_name, std::string(what) + " \"" + name +
                                                "\" is not accepted: use letters, digits, '_', '-', '.', not starting with '.'",
                        ErrorContext{where.string(), {}, {}});
    }

    /// When the file system of `dir` has little space or no inodes left (less than 4 times the
    /// package's size, which unpacks larger), what to add to an extraction error: makeself itself
    /// only says "Extraction failed." when tar cannot write.
    static std::string full_disk_note(const std::filesystem::path& dir, off_t package_size) {
        struct statvfs fs {};
        if (::statvfs(dir.c_str(), &fs) != 0) return {};
        const unsigned long long free_bytes = static_cast<unsigned long long>(fs.f_bavail) * fs.f_frsize;
        if (fs.f_files > 0 && fs.f_favail == 0) return " (its file system has no inodes left: " + std::string(std::strerror(ENOSPC)) + ")";
        if (free_bytes >= 4ULL * static_cast<unsigned long long>(package_size)) return {};
        return " (its file system has only " + std::to_string(free_bytes / 1024) + " KiB free, less than the package needs unpacked: " +
               std::strerror(ENOSPC) + ")";
    }

    /// Extracts `package` into `staging`; its output is kept in memory (a full op library is a
    /// usual cause of failure, and the message must still say so).
    void extract(const std::filesystem::path& package, const std::filesystem::path& staging, std::chrono::seconds timeout) const {
        struct stat st {};
        if (::stat(package.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
            fail(Errc::invalid_argument, package, "cannot read the package file: " +
                                                      std::string(errno ? std::strerror(errno) : "not a regular file"));
        const detail::MemoryLog log;
        if (log.fd() < 0) fail(Errc::io_error, package, std::string("cannot keep the extraction's output: ") + std::strerror(errno));
        const std::vector<std::string> args{shell_.string(), std::filesystem::absolute(package).string(), "--quiet",
                                            "--noexec", "--nox11", "--target", staging.string()};
        pid_t pid = -1;
        const int rc = detail::spawn_in_group(args, log.fd(), false, pid);
        if (rc != 0) fail(Errc::io_error, package, "cannot start " + shell_.string() + ": " + std::strerror(rc));
        detail::GroupGuard guard(pid);
        int status = 0;
        const bool done = detail::wait_until(pid, std::chrono::steady_clock::now() + timeout, status);
        ::kill(-pid, SIGKILL);  // whatever is left of its process group (tar, gzip)
        guard.release();
        const auto into = [&] { return " into " + staging.parent_path().string() + full_disk_note(staging.parent_path(), st.st_size); };
        if (!done) {
            while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            fail(Errc::timeout, package, "extraction" + into() + " did not finish within " + std::to_string(timeout.count()) + " s",
                 log.tail());
        }
        if (WIFSIGNALED(status))
            fail(Errc::corrupt, package,
                 "extraction" + into() + " failed: makeself was ended by " + detail::signal_name(WTERMSIG(status)) +
                     (WTERMSIG(status) == SIGTERM ? " (it ends itself so when tar fails)" : ""),
                 log.tail());
        if (WEXITSTATUS(status) != 0)
            fail(Errc::corrupt, package, "extraction" + into() + " failed (makeself exited with status " +
                                             std::to_string(WEXITSTATUS(status)) + ")", log.tail());
    }

    /// Checks the extracted payload; returns the package's device.
    static std::string check_payload(const std::filesystem::path& package, const std::filesystem::path& root,
                                     const std::string& backend) {
        // No symlink in the payload may point outside it.
        std::error_code ec;
        const std::filesystem::path canon_root = std::filesystem::canonical(root, ec);
        if (ec) fail(Errc::corrupt, package, "the payload is missing after extraction");
        for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
             !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
            if (!it->is_symlink(ec)) continue;
            const std::string rel = std::filesystem::relative(it->path(), root).string();
            const auto target = std::filesystem::weakly_canonical(it->path(), ec);
            const std::string t = target.string(), r = canon_root.string() + "/";
            if (ec || t.compare(0, r.size(), r) != 0)
                fail(Errc::unsafe_path, package, "symbolic link \"" + rel + "\" points outside the package");
        }
        const std::filesystem::path index_path = root / "binary_info_config.json";
        Value index;
        try {
            index = parse_json(read_file(index_path, std::size_t{16} << 20));
        } catch (const Error& e) {
            fail(Errc::corrupt, package, "bad binary_info_config.json: " + e.message());
        }
        auto str = [&](const Value& obj, const char* key, const std::string& where) -> std::string {
            const Value* v = obj.find(key);
            if (v == nullptr || !v->is_string() || v->as_string().empty())
                fail(Errc::corrupt, package, "bad binary_info_config.json: " + where + key +
                                                 " must be a non-empty string");
            return v->as_string();
        };
        if (!index.is_object()) fail(Errc::corrupt, package, "bad binary_info_config.json: not a JSON object");
        if (str(index, "format", "") != "skc-run-package")
            fail(Errc::corrupt, package, "bad binary_info_config.json: format is not \"skc-run-package\"");
        const Value* version = index.find("version");
        if (version == nullptr || !version->is_integer() || version->kind() != Kind::integer || version->as_int() != 1)
            fail(Errc::corrupt, package, "bad binary_info_config.json: version must be 1");
        if (const std::string b = str(index, "backend", ""); b != backend)
            fail(Errc::invalid_argument, package, "the package is for backend \"" + b + "\", not \"" + backend + "\"");
        const std::string device = str(index, "device", "");
        if (!detail::safe_component(device))
            fail(Errc::unsafe_path, package, "device \"" + device + "\" cannot be used as a folder name");
        const Value* kernels = index.find("kernels");
        if (kernels == nullptr || !kernels->is_array())
            fail(Errc::corrupt, package, "bad binary_info_config.json: kernels must be an array");
        std::size_t i = 0;
        for (const Value& k : kernels->as_array()) {
            const std::string where = "kernels[" + std::to_string(i++) + "].";
            if (!k.is_object()) fail(Errc::corrupt, package, "bad binary_info_config.json: " + where + " not an object");
            const std::string digest = str(k, "digest", where);
            if (!digest_text_ok(digest))
                fail(Errc::corrupt, package, "bad binary_info_config.json: " + where + "digest must be 32 lowercase hex digits");
            str(k, "op_type", where);
            str(k, "symbol", where);
            const std::string file = str(k, "file", where);
            check_file_name(package, file, root);
        }
        return device;
    }

    /// A kernel file name as the index may give it: a relative path below kernels/ without '.', '..'
    /// or empty parts.
    static bool kernel_file_name_ok(const std::string& file) {
        bool ok = file.rfind("kernels/", 0) == 0 && file.find('\0') == std::string::npos && file.size() < 1000;
        std::size_t start = 0;
        while (ok && start <= file.size()) {
            const std::size_t end = std::min(file.find('/', start), file.size());
            const std::string part = file.substr(start, end - start);
            ok = !part.empty() && part != "." && part != "..";
            start = end + 1;
        }
        return ok;
    }

    static bool digest_text_ok(const std::string& digest) {
        return digest.size() == 32 && digest.find_first_not_of("0123456789abcdef") == std::string::npos;
    }

    static void check_file_name(const std::filesystem::path& package, const std::string& file,
                                const std::filesystem::path& root) {
        std::filesystem::path p = root;
        if (!kernel_file_name_ok(file))
            fail(Errc::unsafe_path, package, "kernel file name \"" + file +
                                                 "\" is not accepted: it must be a relative path below kernels/ without "
                                                 "'.', '..' or empty parts");
        const std::filesystem::path rel(file);
        for (const auto& part : rel) {
            p /= part;
            struct stat st {};
            if (::lstat(p.c_str(), &st) != 0) fail(Errc::corrupt, package, "kernel file \"" + file + "\" is missing");
            if (S_ISLNK(st.st_mode))
                fail(Errc::unsafe_path, package, "kernel file \"" + file + "\" goes through a symbolic link");
        }
        struct stat st {};
        if (::lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
            fail(Errc::corrupt, package, "kernel file \"" + file + "\" is not a regular file");
    }

    static std::string package_uninstall_script(const std::string& stem) {
        return "#!/bin/sh\n"
               "# Removes the run package " + stem + " from this op library.\n"
               "# It removes the package folder and its holder files only; the shared files\n"
               "# (config.ini, config/<device>/binary_info_config.json) drop it at the next skc\n"
               "# install, uninstall or cleanup. Do not run it while a process uses the package.\n"
               "set -e\n"
               "here=$(cd \"$(dirname \"$0\")\" && pwd)\n"
               "base=$(dirname \"$here\")\n"
               "rm -rf -- \"$base/.holders/" + stem + "\" \"$here\"\n";
    }

    static std::string top_uninstall_script(const Order& order) {
        std::string s = "#!/bin/sh\n"
                        "# Removes every run package installed here and the shared files (written by skc).\n"
                        "# Do not run it while a process uses the packages.\n"
                        "set -e\n"
                        "cd \"$(dirname \"$0\")\"\n";
        for (const auto& [stem, device] : order) s += "rm -rf -- \"" + stem + "\"\n";
        s += "rm -rf -- config .holders config.ini uninstall.sh\n";
        return s;
    }

    static void write_text(const std::filesystem::path& p, const std::string& text) {
        FilesystemStorage(p.parent_path()).write(p.filename().string(), text);
    }

    static void fsync_dir(const std::filesystem::path& dir) {
        const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0) {
            (void)::fsync(fd);
            ::close(fd);
        }
    }

    /// config.ini: "[packages]" then one "<stem> = <device>" line per package, in install order.
    static Order read_config(const std::filesystem::path& base) {
        Order out;
        std::optional<std::string> text = FilesystemStorage(base).read("config.ini");
        if (!text) return out;
        std::size_t start = 0;
        bool in_packages = false;
        while (start < text->size()) {
            std::size_t end = text->find('\n', start);
            if (end == std::string::npos) end = text->size();
            std::string line = text->substr(start, end - start);
            start = end + 1;
            if (line.empty() || line[0] == '#' || line[0] == ';') continue;
            if (line[0] == '[') {
                in_packages = line == "[packages]";
                continue;
            }
            const auto eq = line.find(" = ");
            if (!in_packages || eq == std::string::npos) continue;
            std::string stem = line.substr(0, eq), device = line.substr(eq + 3);
            if (detail::safe_component(stem) && detail::safe_component(device)) out.emplace_back(stem, device);
        }
        return out;
    }

    static std::string config_text(const Order& order) {
        std::string s = "# Run packages installed here by skc, in install order (for a kernel in several\n"
                        "# packages, the last one wins). Format: <package stem> = <device>\n[packages]\n";
        for (const auto& [stem, device] : order) s += stem + " = " + device + "\n";
        return s;
    }

    static bool installed_locked(const std::filesystem::path& base, const std::string& stem) {
        const Order order = read_config(base);
        struct stat st {};
        return std::any_of(order.begin(), order.end(), [&](const auto& e) { return e.first == stem; }) &&
               ::lstat((base / stem).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    }

    static std::vector<std::string> holders_of(const std::filesystem::path& base, const std::string& stem) {
        std::vector<std::string> out;
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(base / ".holders" / stem, ec))
            out.push_back(e.path().filename().string());
        std::sort(out.begin(), out.end());
        return out;
    }

    /// Adds a holder for `stem` (under the lock) and returns the handle.
    static Installation hold_locked(const std::filesystem::path& base, const std::string& stem,
                                    const InstallOptions& opt, bool extracted) {
        const std::filesystem::path dir = base / ".holders" / stem;
        std::error_code ec;
        std::filesystem::create_directories(dir, ec);
        if (opt.persistent) {
            write_text(dir / "persistent", "");
            return Installation(stem, base / stem, extracted, nullptr);
        }
        static std::atomic<unsigned long> counter{0};
        const auto start = detail::process_start_time(0).value_or(0);
        const std::string holder =
            std::to_string(::getpid()) + "-" + std::to_string(start) + "." + std::to_string(counter++);
        const int fd = ::open((dir / holder).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
            throw Error(Errc::io_error, "cannot create the holder file: " + std::string(std::strerror(errno)),
                        ErrorContext{(dir / holder).string(), {}, {}});
        ::close(fd);
        register_exit_hook_once();
        detail::install_signal_handlers_once();
        auto& reg = detail::holdings();
        std::uint64_t id = 0;
        {
            std::lock_guard lk(reg.mu);
            id = reg.next++;
            reg.live[id] = detail::Holding{base, stem, holder, ::getpid(), detail::claim_signal_slot(dir / holder)};
        }
        return Installation(stem, base / stem, extracted, [id] { release_holding(id); });
    }

    /// Gives up one holding of this process (no-op when released already, e.g. by uninstall()).
    static void release_holding(std::uint64_t id) {
        detail::Holding h;
        {
            auto& reg = detail::holdings();
            std::lock_guard lk(reg.mu);
            auto it = reg.live.find(id);
            if (it == reg.live.end() || it->second.owner != ::getpid()) return;
            h = it->second;
            detail::free_signal_slot(h.slot);
            reg.live.erase(it);
        }
        FileLock locks(h.base);
        auto guard = locks.lock("install", LockMode::exclusive);
        ::unlink((h.base / ".holders" / h.stem / h.holder).c_str());
        cleanup_locked(h.base);
    }

    static void register_exit_hook_once() {
        static std::once_flag once;
        std::call_once(once, [] { std::atexit(+[] { release_all_at_exit(); }); });
    }

    static void release_all_at_exit() noexcept {
        std::vector<std::uint64_t> ids;
        {
            auto& reg = detail::holdings();
            std::lock_guard lk(reg.mu);
            for (const auto& [id, h] : reg.live)
                if (h.owner == ::getpid()) ids.push_back(id);
        }
        for (auto id : ids) {
            try {
                release_holding(id);
            } catch (...) {  // the next process cleans up
            }
        }
    }

    /// Under the lock: removes dead holders, packages without a live holder, entries of config.ini
    /// whose folder is gone and staging folders of dead processes; republishes the shared files when
    /// anything changed. Returns the number of packages removed.
    static std::size_t cleanup_locked(const std::filesystem::path& base) {
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
            const std::string name = e.path().filename().string();
            if (name.rfind(".staging-", 0) != 0 && name.rfind(".removing-", 0) != 0) continue;
            const auto dash = name.rfind('-');
            bool dead = true;
            try {
                const long pid = std::stol(name.substr(dash + 1));
                dead = !(pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM));
            } catch (const std::exception&) {
            }
            if (dead) std::filesystem::remove_all(e.path(), ec);
        }
        const Order order = read_config(base);
        Order keep;
        std::size_t removed = 0;
        for (const auto& entry : order) {
            const std::string& stem = entry.first;
            bool live = false;
            for (const auto& h : holders_of(base, stem)) {
                if (detail::holder_alive(h)) live = true;
                else ::unlink((base / ".holders" / stem / h).c_str());
            }
            struct stat st {};
            const bool present = ::lstat((base / stem).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
            if (live && present) {
                keep.push_back(entry);
                continue;
            }
            std::filesystem::remove_all(base / ".holders" / stem, ec);
            if (present) {  // rename first: a crash half-way leaves no half package under its name
                const std::filesystem::path gone =
                    base / (".removing-" + stem + "-" + std::to_string(::getpid()));
                if (::rename((base / stem).c_str(), gone.c_str()) == 0) std::filesystem::remove_all(gone, ec);
                else std::filesystem::remove_all(base / stem, ec);
                ++removed;
            }
        }
        if (keep != order) publish_locked(base, keep);
        return removed;
    }

    /// Under the lock: writes config.ini, every device's global index and the top-level uninstall.sh.
    static void publish_locked(const std::filesystem::path& base, const Order& order) {
        FilesystemStorage storage(base);
        // device -> digest -> entry; later packages override earlier ones.
        std::map<std::string, std::map<std::string, Value>> per_device;
        for (const auto& [stem, device] : order) {
            auto& kernels = per_device[device];
            Value index;
            try {
                index = parse_json(read_file(base / stem / "binary_info_config.json", std::size_t{16} << 20));
            } catch (const Error&) {
                continue;  // checked at install; a package damaged since contributes nothing
            }
            const Value* ks = index.find("kernels");
            if (ks == nullptr || !ks->is_array()) continue;
            for (const Value& k : ks->as_array()) {
                const Value *d = k.find("digest"), *f = k.find("file"), *s = k.find("symbol"), *o = k.find("op_type");
                if (!d || !f || !s || !o || !d->is_string() || !f->is_string() || !s->is_string() || !o->is_string()) continue;
                // Checked at install; a package's index altered since is checked again, as every name read from a file.
                if (!digest_text_ok(d->as_string()) || !kernel_file_name_ok(f->as_string())) continue;
                kernels[d->as_string()] = Value(Object{{"package", Value(stem)},
                                                       {"file", Value(stem + "/" + f->as_string())},
                                                       {"symbol", *s},
                                                       {"op_type", *o}});
            }
        }
        // Devices that had an index but have no package left lose it.
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(base / "config", ec)) {
            const std::string dev = e.path().filename().string();
            if (per_device.count(dev) == 0) storage.remove("config/" + dev + "/binary_info_config.json");
        }
        for (const auto& [device, kernels] : per_device) {
            Object ks;
            for (const auto& [digest, v] : kernels) ks.push_back(Member{digest, v});
            const Value doc(Object{{"format", Value("skc-installed-kernels")},
                                   {"version", Value(1)},
                                   {"backend", Value(base.filename().string())},
                                   {"device", Value(device)},
                                   {"kernels", Value(std::move(ks))}});
            storage.write("config/" + device + "/binary_info_config.json", dump_json(doc) + "\n");
        }
        storage.write("config.ini", config_text(order));
        storage.write("uninstall.sh", top_uninstall_script(order));
        ::chmod((base / "uninstall.sh").c_str(), 0755);
    }

    std::filesystem::path shell_;
};

/// Installs nothing; records the calls. For tests.
class NoInstall {
public:
    struct Call {
        std::string what;  // "install", "uninstall", "list"
        std::filesystem::path package, library;
        std::string stem, backend;
        bool persistent = false;
    };

    Installation install(const std::filesystem::path& package, const std::filesystem::path& library,
                         const InstallOptions& opt) {
        calls.push_back({"install", package, library, package.stem().string(), opt.backend, opt.persistent});
        return Installation(package.stem().string(), RunPackageInstaller::base_of(library, opt.backend) / package.stem(),
                            false, nullptr);
    }
    bool uninstall(const std::filesystem::path& library, std::string_view stem, std::string_view backend,
                   bool persistent) {
        calls.push_back({"uninstall", {}, library, std::string(stem), std::string(backend), persistent});
        return false;
    }
    std::vector<InstalledPackage> list(const std::filesystem::path& library, std::string_view backend) {
        calls.push_back({"list", {}, library, {}, std::string(backend), false});
        return {};
    }

    std::vector<Call> calls;
};

static_assert(Installer<RunPackageInstaller> && Installer<NoInstall>);

}  // namespace skc
