// skc/policy/installer.hpp: the Installer concept and its models: RunPackageInstaller, NoInstall.
//
// An installer puts a run package into an op library (docs/spec.md section 9). RunPackageInstaller
// extracts it (makeself, through posix_spawn, never a shell string), checks the payload, and under
// the node-wide install lock renames it into place and rewrites the global index and config.ini
// atomically. Installs are reference-counted across processes by holder files
// (detail/install_holders.hpp), released with the Installation handle, at exit and on SIGINT or
// SIGTERM; orphans of killed processes are cleaned up by the next install. An uninstalled
// package's extraction is kept for reuse (`.kept/`), within a byte limit. docs/run-package.md
// describes the layout, each step and every error.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <concepts>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../detail/hash.hpp"
#include "../detail/install_holders.hpp"
#include "../detail/posix.hpp"
#include "../detail/process.hpp"
#include "../error.hpp"
#include "../op_info_io.hpp"
#include "../run_package.hpp"
#include "lock.hpp"
#include "storage.hpp"

namespace skc {

/// How many bytes of kept extractions an op library holds when its installs set no other limit:
/// the cache's default size limit (default_cache_limits in cache.hpp), since what is kept is an
/// extraction of a cached package.
inline constexpr std::uint64_t default_keep_bytes = std::uint64_t{5} << 30;

struct InstallOptions {
    std::string backend = "host";       // L/static_kernel/<backend>; the package's index must agree
    bool persistent = false;            // stays until uninstall(stem, persistent = true)
    std::chrono::seconds timeout{300};  // extraction time limit
    /// Bytes of extracted packages kept in L/static_kernel/<backend>/.kept/ after their last holder
    /// goes, for a later install of the same package to reuse without extracting; the least
    /// recently released go first. 0 keeps nothing (and writes no identity); UINT64_MAX has no
    /// limit. The op library applies the latest install's value.
    std::uint64_t keep_bytes = default_keep_bytes;
    /// The package's content: the checksum of its bytes (detail::Hasher, as a cache entry records
    /// it). Unset: computed from the package file when it is needed (an extraction to keep, or a
    /// kept extraction of the same stem to compare with).
    std::optional<Digest> checksum;
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
    Installation(std::string stem, std::filesystem::path folder, bool extracted, std::function<void()> release,
                 bool reused = false)
        : stem_(std::move(stem)),
          folder_(std::move(folder)),
          extracted_(extracted),
          reused_(reused),
          release_(std::move(release)) {}
    Installation(Installation&& o) noexcept
        : stem_(std::move(o.stem_)),
          folder_(std::move(o.folder_)),
          extracted_(o.extracted_),
          reused_(o.reused_),
          release_(std::exchange(o.release_, nullptr)) {}
    Installation& operator=(Installation&& o) noexcept {
        if (this != &o) {
            release_noexcept();
            stem_ = std::move(o.stem_);
            folder_ = std::move(o.folder_);
            extracted_ = o.extracted_;
            reused_ = o.reused_;
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
    /// True when this call extracted the package; false when it was installed already or reused.
    [[nodiscard]] bool extracted() const noexcept { return extracted_; }
    /// True when this call installed the package from its kept extraction (.kept/<stem>), without
    /// extracting.
    [[nodiscard]] bool reused() const noexcept { return reused_; }
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
    bool reused_ = false;
    std::function<void()> release_;
};

/// What a host needs of an install policy: install(). The shipped installers also have
/// `uninstall` and `list` (for tools such as `skc uninstall`) and `check` (a host that finds it asks
/// it why a package cannot be installed before storing it).
template <class I>
concept Installer = requires(I& i, const std::filesystem::path& package, const std::filesystem::path& library,
                             const InstallOptions& opt) {
    { i.install(package, library, opt) } -> std::same_as<Installation>;
};

namespace detail {
/// The message for an Install policy that does not fit (a host calls it in one line).
template <class I>
consteval bool diagnose_install() {
    static_assert(Installer<I>,
                  "skc: the Install policy needs a member `Installation install(const std::filesystem::path& package, "
                  "const std::filesystem::path& library, const InstallOptions&)`");
    return true;
}
}  // namespace detail

/// Installs makeself run packages into an op library (docs/run-package.md).
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
        // The package's identity, computed at most once and outside the lock when it can be.
        std::optional<Identity> identity;
        auto identify = [&]() -> const Identity& {
            if (!identity) identity = identify_package(package, opt.checksum);
            return *identity;
        };
        struct stat kept_st {};
        if (opt.keep_bytes > 0 && !opt.checksum && ::lstat((kept_dir(base) / stem).c_str(), &kept_st) == 0) identify();
        FileLock locks(base);
        {
            auto guard = locks.lock("install", LockMode::exclusive);
            cleanup_locked(base, opt.keep_bytes);
            if (installed_locked(base, stem)) return hold_locked(base, stem, opt, false);
            if (opt.keep_bytes > 0 && ::lstat((kept_dir(base) / stem).c_str(), &kept_st) == 0)
                if (std::optional<Installation> inst = reuse_locked(base, stem, package, opt, identify()))
                    return std::move(*inst);
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
        write_text(staging / "uninstall.sh", package_uninstall_script(stem));
        ::chmod((staging / "uninstall.sh").c_str(), 0755);
        const Payload payload = check_payload(package, staging, opt.backend);
        if (opt.keep_bytes > 0) {  // without an identity the package is simply not kept
            Identity id = identify();
            id.extracted_bytes = payload.bytes;
            write_small_file(staging / identity_file, identity_text(id));
        }

        auto guard = locks.lock("install", LockMode::exclusive);
        cleanup_locked(base);
        if (installed_locked(base, stem)) return hold_locked(base, stem, opt, false);  // a racer won
        const std::filesystem::path folder = base / stem;
        std::filesystem::remove_all(folder, ec);  // a leftover not listed in config.ini
        if (::rename(staging.c_str(), folder.c_str()) != 0)
            throw Error(Errc::io_error,
                        "run package " + stem + ": cannot move the package into place: " + std::strerror(errno),
                        ErrorContext{folder.string(), {}, {}});
        detail::fsync_dir(base);
        return publish_and_hold_locked(base, stem, payload.device, opt, true, false);
    }

    /// Gives up this process's references to `stem` (persistent = false; handles become inert) or
    /// the persistent reference (persistent = true). True when the package was uninstalled (kept in
    /// .kept within the op library's keep limit, or deleted).
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
                if (!persistent && it->second.base == base && it->second.stem == stem &&
                    it->second.owner == ::getpid()) {
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

    /// Removes dead holders, uninstalls packages without holders (kept within the op library's keep
    /// limit) and removes stale staging folders. Returns how many packages were uninstalled.
    std::size_t cleanup(const std::filesystem::path& library, std::string_view backend) {
        const std::filesystem::path base = base_of(library, backend);
        if (!std::filesystem::exists(base)) return 0;
        FileLock locks(base);
        auto guard = locks.lock("install", LockMode::exclusive);
        return cleanup_locked(base);
    }

    /// The installed packages in install order (after removing dead holders and orphans); kept
    /// extractions are not installed and not listed.
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

    /// What identifies an extraction: the package file's checksum and size, and the bytes of the
    /// extracted folder's regular files (the identity file aside). Kept in the folder as
    /// `.skc-identity`, so that it moves with the folder in one rename.
    struct Identity {
        Digest checksum;
        std::uint64_t package_bytes = 0;
        std::uint64_t extracted_bytes = 0;
    };
    static constexpr const char* identity_file = ".skc-identity";
    static constexpr const char* limit_file = ".limit";  // in .kept/: the latest install's keep_bytes

    static std::filesystem::path kept_dir(const std::filesystem::path& base) { return base / ".kept"; }

    /// The checksum (`given`, else detail::Hasher over the file's bytes, as the cache computes it) and
    /// size of the package file.
    static Identity identify_package(const std::filesystem::path& package, const std::optional<Digest>& given) {
        const int fd = ::open(package.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
            fail(Errc::invalid_argument, package, "cannot read the package file: " + std::string(std::strerror(errno)));
        struct Closer {
            int fd;
            ~Closer() { ::close(fd); }
        } closer{fd};
        struct stat st {};
        if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
            fail(Errc::invalid_argument, package, "cannot read the package file: not a regular file");
        Identity id;
        id.package_bytes = static_cast<std::uint64_t>(st.st_size);
        if (given) {
            id.checksum = *given;
            return id;
        }
        detail::Hasher h;
        std::string buf(std::size_t{1} << 16, '\0');
        for (;;) {
            const ssize_t n = ::read(fd, buf.data(), buf.size());
            if (n < 0 && errno == EINTR) continue;
            if (n < 0)
                fail(Errc::io_error, package, "cannot read the package file: " + std::string(std::strerror(errno)));
            if (n == 0) break;
            h.update(buf.data(), static_cast<std::size_t>(n));
        }
        id.checksum = h.digest();
        return id;
    }

    static std::string identity_text(const Identity& id) {
        return "skc-kept-extraction 1\nchecksum " + id.checksum.hex() + "\npackage_bytes " +
               std::to_string(id.package_bytes) + "\nextracted_bytes " + std::to_string(id.extracted_bytes) + "\n";
    }

    /// The identity file of package folder `folder`; nullopt when it is missing or not exactly as
    /// identity_text() writes it.
    static std::optional<Identity> read_identity(const std::filesystem::path& folder) {
        std::string text;
        try {
            text = read_file(folder / identity_file, 4096);
        } catch (const Error&) {
            return std::nullopt;
        }
        Identity id;
        const char* p = text.data();
        const char* const end = p + text.size();
        auto expect = [&](std::string_view word) {
            if (static_cast<std::size_t>(end - p) < word.size() || std::string_view(p, word.size()) != word)
                return false;
            p += word.size();
            return true;
        };
        auto number = [&](std::uint64_t& v) {
            const auto [next, err] = std::from_chars(p, end, v);
            if (err != std::errc() || next == p) return false;
            p = next;
            return true;
        };
        if (!expect("skc-kept-extraction 1\nchecksum ") || end - p < 32) return std::nullopt;
        const std::optional<Digest> checksum = Digest::from_hex(std::string_view(p, 32));
        p += 32;
        if (!checksum || !expect("\npackage_bytes ") || !number(id.package_bytes) || !expect("\nextracted_bytes ") ||
            !number(id.extracted_bytes) || !expect("\n") || p != end)
            return std::nullopt;
        id.checksum = *checksum;
        return id;
    }

    /// Writes a small file through a temporary file and a rename, so that a reader sees all of it or
    /// none; false when it cannot. For the installer's own dot names, which FilesystemStorage does not
    /// take (and which no package stem can be).
    static bool write_small_file(const std::filesystem::path& p, const std::string& text) {
        const std::filesystem::path tmp =
            p.parent_path() / (".tmp." + std::to_string(::getpid()) + p.filename().string());
        const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) return false;
        const bool written =
            ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
        ::close(fd);
        if (written && ::rename(tmp.c_str(), p.c_str()) == 0) return true;
        ::unlink(tmp.c_str());
        return false;
    }

    /// The keep limit recorded in .kept/ (0 when none is).
    static std::uint64_t read_keep_limit(const std::filesystem::path& base) {
        std::string text;
        try {
            text = read_file(kept_dir(base) / limit_file, 64);
        } catch (const Error&) {
            return 0;
        }
        std::uint64_t v = 0;
        const auto [next, err] = std::from_chars(text.data(), text.data() + text.size(), v);
        return err == std::errc() && next != text.data() ? v : 0;
    }

    [[noreturn]] static void fail(Errc code, const std::filesystem::path& package, const std::string& what,
                                  const std::string& log_tail = {}) {
        throw Error(code,
                    "run package " + package.stem().string() + ": " + what +
                        (log_tail.empty() ? std::string() : ". Last lines of its output:\n" + log_tail),
                    ErrorContext{package.string(), {}, {}});
    }

    static void check_name(const std::string& name, const char* what, const std::filesystem::path& where) {
        if (!detail::safe_component(name))
            throw Error(Errc::invalid_name,
                        std::string(what) + " \"" + name +
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
        if (fs.f_files > 0 && fs.f_favail == 0)
            return " (its file system has no inodes left: " + std::string(std::strerror(ENOSPC)) + ")";
        if (free_bytes >= 4ULL * static_cast<unsigned long long>(package_size)) return {};
        return " (its file system has only " + std::to_string(free_bytes / 1024) +
               " KiB free, less than the package needs unpacked: " + std::strerror(ENOSPC) + ")";
    }

    /// Extracts `package` into `staging`; its output is kept in memory (a full op library is a
    /// usual cause of failure, and the message must still say so).
    void extract(const std::filesystem::path& package, const std::filesystem::path& staging,
                 std::chrono::seconds timeout) const {
        struct stat st {};
        if (::stat(package.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
            fail(Errc::invalid_argument, package,
                 "cannot read the package file: " + std::string(errno ? std::strerror(errno) : "not a regular file"));
        const detail::MemoryLog log;
        if (log.fd() < 0)
            fail(Errc::io_error, package, std::string("cannot keep the extraction's output: ") + std::strerror(errno));
        const std::vector<std::string> args{
            shell_.string(), std::filesystem::absolute(package).string(), "--quiet", "--noexec", "--nox11", "--target",
            staging.string()};
        pid_t pid = -1;
        const int rc = detail::spawn_in_group(args, log.fd(), false, pid);
        if (rc != 0) fail(Errc::io_error, package, "cannot start " + shell_.string() + ": " + std::strerror(rc));
        detail::GroupGuard guard(pid);
        int status = 0;
        const bool done = detail::wait_until(pid, std::chrono::steady_clock::now() + timeout, status);
        ::kill(-pid, SIGKILL);  // whatever is left of its process group (tar, gzip)
        guard.release();
        const auto into = [&] {
            return " into " + staging.parent_path().string() + full_disk_note(staging.parent_path(), st.st_size);
        };
        if (!done) {
            while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
            fail(Errc::timeout, package,
                 "extraction" + into() + " did not finish within " + std::to_string(timeout.count()) + " s",
                 log.tail());
        }
        if (WIFSIGNALED(status))
            fail(Errc::corrupt, package,
                 "extraction" + into() + " failed: makeself was ended by " + detail::signal_name(WTERMSIG(status)) +
                     (WTERMSIG(status) == SIGTERM ? " (it ends itself so when tar fails)" : ""),
                 log.tail());
        if (WEXITSTATUS(status) != 0)
            fail(Errc::corrupt, package,
                 "extraction" + into() + " failed (makeself exited with status " + std::to_string(WEXITSTATUS(status)) +
                     ")",
                 log.tail());
    }

    struct Payload {
        std::string device;
        std::uint64_t bytes = 0;  // of its regular files, the identity file aside
    };

    /// Checks the extracted payload; returns the package's device and the payload's size.
    static Payload check_payload(const std::filesystem::path& package, const std::filesystem::path& root,
                                 const std::string& backend) {
        // No symlink in the payload may point outside it.
        std::error_code ec;
        const std::filesystem::path canon_root = std::filesystem::canonical(root, ec);
        if (ec) fail(Errc::corrupt, package, "the payload is missing after extraction");
        Payload out;
        for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
             !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
            if (!it->is_symlink(ec)) {
                std::error_code size_ec;
                if (it->is_regular_file(size_ec) && (it.depth() != 0 || it->path().filename() != identity_file))
                    if (const std::uintmax_t n = it->file_size(size_ec); !size_ec) out.bytes += n;
                continue;
            }
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
                fail(Errc::corrupt, package,
                     "bad binary_info_config.json: " + where + key + " must be a non-empty string");
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
        out.device = str(index, "device", "");
        if (!detail::safe_component(out.device))
            fail(Errc::unsafe_path, package, "device \"" + out.device + "\" cannot be used as a folder name");
        const Value* kernels = index.find("kernels");
        if (kernels == nullptr || !kernels->is_array())
            fail(Errc::corrupt, package, "bad binary_info_config.json: kernels must be an array");
        std::size_t i = 0;
        for (const Value& k : kernels->as_array()) {
            const std::string where = "kernels[" + std::to_string(i++) + "].";
            if (!k.is_object())
                fail(Errc::corrupt, package, "bad binary_info_config.json: " + where + " not an object");
            const std::string digest = str(k, "digest", where);
            if (!digest_text_ok(digest))
                fail(Errc::corrupt, package,
                     "bad binary_info_config.json: " + where + "digest must be 32 lowercase hex digits");
            str(k, "op_type", where);
            str(k, "symbol", where);
            const std::string file = str(k, "file", where);
            check_file_name(package, file, root);
        }
        return out;
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
            fail(Errc::unsafe_path, package,
                 "kernel file name \"" + file +
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
               "# Removes the run package " +
               stem +
               " from this op library.\n"
               "# It removes the package folder and its holder files only; the shared files\n"
               "# (config.ini, config/<device>/binary_info_config.json) drop it at the next skc\n"
               "# install, uninstall or cleanup. Do not run it while a process uses the package.\n"
               "set -e\n"
               "here=$(cd \"$(dirname \"$0\")\" && pwd)\n"
               "base=$(dirname \"$here\")\n"
               "rm -rf -- \"$base/.holders/" +
               stem + "\" \"$here\"\n";
    }

    static std::string top_uninstall_script(const Order& order) {
        std::string s =
            "#!/bin/sh\n"
            "# Removes every run package installed here, the kept extractions and the shared files\n"
            "# (written by skc).\n"
            "# Do not run it while a process uses the packages.\n"
            "set -e\n"
            "cd \"$(dirname \"$0\")\"\n";
        for (const auto& [stem, device] : order) s += "rm -rf -- \"" + stem + "\"\n";
        s += "rm -rf -- config .holders .kept config.ini uninstall.sh\n";
        return s;
    }

    static void write_text(const std::filesystem::path& p, const std::string& text) {
        FilesystemStorage(p.parent_path()).write(p.filename().string(), text);
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
        std::string s =
            "# Run packages installed here by skc, in install order (for a kernel in several\n"
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

    /// Under the lock, with the package folder in place: lists `stem` last in config.ini, rebuilds the
    /// shared files, then adds a holder. Published first: should publishing fail, no handle exists
    /// whose release would wait for the lock this thread holds (a package listed without a holder is
    /// uninstalled by the next cleanup).
    static Installation publish_and_hold_locked(const std::filesystem::path& base, const std::string& stem,
                                                const std::string& device, const InstallOptions& opt, bool extracted,
                                                bool reused) {
        auto order = read_config(base);
        order.erase(std::remove_if(order.begin(), order.end(), [&](const auto& e) { return e.first == stem; }),
                    order.end());
        order.emplace_back(stem, device);
        publish_locked(base, order);
        return hold_locked(base, stem, opt, extracted, reused);
    }

    /// Under the lock: installs `stem` from its kept extraction when that is the same package (`want`)
    /// and passes the payload checks; otherwise deletes the kept folder and returns nullopt (the
    /// caller extracts).
    static std::optional<Installation> reuse_locked(const std::filesystem::path& base, const std::string& stem,
                                                    const std::filesystem::path& package, const InstallOptions& opt,
                                                    const Identity& want) {
        const std::filesystem::path kept = kept_dir(base) / stem;
        const std::optional<Identity> have = read_identity(kept);
        std::optional<Payload> payload;
        if (have && have->checksum == want.checksum && have->package_bytes == want.package_bytes) {
            try {
                payload = check_payload(package, kept, opt.backend);
            } catch (const Error&) {  // damaged since it was kept
            }
        }
        const std::filesystem::path folder = base / stem;
        std::error_code ec;
        if (payload && payload->bytes == have->extracted_bytes) {
            std::filesystem::remove_all(folder, ec);  // a leftover not listed in config.ini
            if (::rename(kept.c_str(), folder.c_str()) == 0)
                return publish_and_hold_locked(base, stem, payload->device, opt, false, true);
        }
        remove_locked(base, kept, stem);
        return std::nullopt;
    }

    /// Adds a holder for `stem` (under the lock) and returns the handle.
    static Installation hold_locked(const std::filesystem::path& base, const std::string& stem,
                                    const InstallOptions& opt, bool extracted, bool reused = false) {
        const std::filesystem::path dir = base / ".holders" / stem;
        std::error_code ec;
        std::filesystem::create_directories(dir, ec);
        if (opt.persistent) {
            write_text(dir / "persistent", "");
            return Installation(stem, base / stem, extracted, nullptr, reused);
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
        return Installation(
            stem, base / stem, extracted, [id] { release_holding(id); }, reused);
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

    /// Under the lock: removes dead holders; uninstalls the packages without a live holder, entries
    /// of config.ini whose folder is gone and package folders with an identity that config.ini does
    /// not list (a crash between moving a package in and publishing); removes staging and removal
    /// folders of dead processes; records `new_limit` as the keep limit; keeps uninstalled packages
    /// within the limit (else deletes them) and evicts kept extractions beyond it; republishes the
    /// shared files when anything changed. Returns the number of packages uninstalled.
    static std::size_t cleanup_locked(const std::filesystem::path& base,
                                      std::optional<std::uint64_t> new_limit = std::nullopt) {
        std::error_code ec;
        std::vector<std::string> folders;  // names a package folder may have
        for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
            const std::string name = e.path().filename().string();
            if (name.rfind(".staging-", 0) != 0 && name.rfind(".removing-", 0) != 0) {
                if (detail::safe_component(name) && name != "config") folders.push_back(name);
                continue;
            }
            const auto dash = name.rfind('-');
            bool dead = true;
            try {
                const long pid = std::stol(name.substr(dash + 1));
                dead = !(pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM));
            } catch (const std::exception&) {}
            if (dead) std::filesystem::remove_all(e.path(), ec);
        }
        std::optional<std::uint64_t> limit = new_limit;  // read from .kept/ when first needed
        bool evict = false;
        if (new_limit && read_keep_limit(base) != *new_limit) {
            std::filesystem::create_directory(kept_dir(base), ec);
            // Best effort: unrecorded, the limit still applies to this call, and the next install records it.
            write_small_file(kept_dir(base) / limit_file, std::to_string(*new_limit) + "\n");
            evict = true;
        }
        auto retire = [&](const std::string& stem) {
            if (!limit) limit = read_keep_limit(base);
            evict = retire_locked(base, stem, *limit) || evict;
        };
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
            if (present) {
                retire(stem);
                ++removed;
            }
        }
        for (const std::string& name : folders) {
            if (std::any_of(order.begin(), order.end(), [&](const auto& e) { return e.first == name; })) continue;
            struct stat st {};
            if (::lstat((base / name).c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
                ::lstat((base / name / identity_file).c_str(), &st) != 0)
                continue;
            std::filesystem::remove_all(base / ".holders" / name, ec);
            retire(name);
        }
        if (keep != order) publish_locked(base, keep);
        if (evict) evict_kept_locked(base, *limit);
        return removed;
    }

    /// Under the lock: takes package folder `stem` out of its installed place: renamed to
    /// .kept/<stem> (replacing an older kept extraction of the stem) when it has an identity and fits
    /// `limit`, else deleted. Returns whether it was kept.
    static bool retire_locked(const std::filesystem::path& base, const std::string& stem, std::uint64_t limit) {
        const std::filesystem::path folder = base / stem;
        if (const std::optional<Identity> id = limit > 0 ? read_identity(folder) : std::nullopt;
            id && id->extracted_bytes <= limit) {
            const std::filesystem::path kept = kept_dir(base) / stem;
            std::error_code ec;
            std::filesystem::create_directory(kept_dir(base), ec);
            struct stat st {};
            if (::lstat(kept.c_str(), &st) == 0) remove_locked(base, kept, stem);
            if (::rename(folder.c_str(), kept.c_str()) == 0) {
                // Released now: the time LRU eviction goes by (the precise clock: a file system's own
                // "now" is coarse, and releases follow each other closely).
                struct timespec now[2]{};
                ::clock_gettime(CLOCK_REALTIME, &now[0]);
                now[1] = now[0];
                ::utimensat(AT_FDCWD, kept.c_str(), now, 0);
                return true;
            }
        }
        remove_locked(base, folder, stem);
        return false;
    }

    /// Under the lock: deletes `path` (a package folder, installed or kept), renamed away first so
    /// that a crash half-way leaves no half package under its name.
    static void remove_locked(const std::filesystem::path& base, const std::filesystem::path& path,
                              const std::string& stem) {
        std::error_code ec;
        const std::filesystem::path gone = base / (".removing-" + stem + "-" + std::to_string(::getpid()));
        if (::rename(path.c_str(), gone.c_str()) == 0) std::filesystem::remove_all(gone, ec);
        else std::filesystem::remove_all(path, ec);
    }

    /// Under the lock: deletes kept extractions, least recently released first, until their sizes add
    /// up to `limit` at most; also whatever else is in .kept/ (a folder without a valid identity, a
    /// temporary file of a killed writer of the limit).
    static void evict_kept_locked(const std::filesystem::path& base, std::uint64_t limit) {
        struct Kept {
            std::int64_t released_ns;
            std::uint64_t bytes;
            std::string stem;
        };
        const std::filesystem::path dir = kept_dir(base);
        std::vector<std::string> names;
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(dir, ec))
            names.push_back(e.path().filename().string());
        std::vector<Kept> kept;
        std::uint64_t total = 0;
        for (const std::string& name : names) {
            if (name == limit_file) continue;
            const std::filesystem::path p = dir / name;
            struct stat st {};
            const bool is_dir = ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
            const std::optional<Identity> id = is_dir && detail::safe_component(name) ? read_identity(p) : std::nullopt;
            if (!id) {
                if (is_dir) remove_locked(base, p, name);
                else ::unlink(p.c_str());
                continue;
            }
            kept.push_back(Kept{static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                                id->extracted_bytes, name});
            total += id->extracted_bytes;
        }
        std::sort(kept.begin(), kept.end(), [](const Kept& a, const Kept& b) { return a.released_ns < b.released_ns; });
        for (const Kept& k : kept) {
            if (total <= limit) break;
            remove_locked(base, dir / k.stem, k.stem);
            total -= k.bytes;
        }
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
                if (!d || !f || !s || !o || !d->is_string() || !f->is_string() || !s->is_string() || !o->is_string())
                    continue;
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
        std::vector<std::pair<std::string, std::string>> files;
        for (const auto& [device, kernels] : per_device) {
            Object ks;
            for (const auto& [digest, v] : kernels) ks.push_back(Member{digest, v});
            const Value doc(Object{{"format", Value("skc-installed-kernels")},
                                   {"version", Value(1)},
                                   {"backend", Value(base.filename().string())},
                                   {"device", Value(device)},
                                   {"kernels", Value(std::move(ks))}});
            files.emplace_back("config/" + device + "/binary_info_config.json", dump_json(doc) + "\n");
        }
        files.emplace_back("config.ini", config_text(order));
        files.emplace_back("uninstall.sh", top_uninstall_script(order));
        storage.write_many(files);  // one journal commit for all of them, not two each
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
        return Installation(package.stem().string(),
                            RunPackageInstaller::base_of(library, opt.backend) / package.stem(), false, nullptr);
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
