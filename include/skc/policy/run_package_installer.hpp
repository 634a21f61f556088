// skc/policy/run_package_installer.hpp: RunPackageInstaller, the installer (installer.hpp) of
// makeself run packages.
//
// It extracts a package (makeself, through posix_spawn, never a shell string), checks the payload,
// and under the node-wide install lock renames it into place and rewrites the global index and
// config.ini atomically. Installs are reference-counted across processes by holder files
// (detail/install_holders.hpp), released with the Installation handle, at exit and on SIGINT or
// SIGTERM; orphans of killed processes are cleaned up by the next install. An uninstalled
// package's extraction is kept for reuse (`.kept/`), within a byte limit. docs/run-package.md
// describes the layout, each step and every error. The class is declared here; its members are
// defined in a file for each of its parts, included at the end: installer/extract.hpp,
// installer/kept.hpp, installer/holders.hpp and installer/publish.hpp.
#pragma once

#include <atomic>
#include <cerrno>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "../detail/hash.hpp"
#include "../detail/posix.hpp"
#include "../detail/unique_fd.hpp"
#include "../error.hpp"
#include "../run_package.hpp"
#include "installer.hpp"
#include "lock.hpp"

namespace skc {

/// Installs makeself run packages into an op library (docs/run-package.md).
class RunPackageInstaller {
public:
    /// `shell` runs the package (`/bin/sh <package> --quiet --noexec --nox11 --target <staging>`).
    explicit RunPackageInstaller(std::filesystem::path shell = "/bin/sh") : shell_(std::move(shell)) {}

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
        const std::filesystem::path base = install_base(library, opt.backend);
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
                if (std::optional<std::string> device = reuse_locked(base, stem, package, opt, identify()))
                    return publish_and_hold_locked(base, stem, *device, opt, false, true);
        }
        // Extract and check outside the lock: other installs go on meanwhile.
        static std::atomic<unsigned> counter{0};
        const std::string tag = stem + "-" + std::to_string(::getpid()) + "." + std::to_string(counter++);
        const std::filesystem::path staging = base / (".staging-" + tag);
        const detail::RemovedAtExit cleanup(staging);
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

    /// Installs the longest prefix of `requests` (each package with its options, all for one
    /// backend) whose packages are installed already or reuse their kept extraction, as install() of
    /// each in turn would, but under one hold of the install lock with one cleanup and one
    /// publication of the shared files for them all: a cover's parts in the process after the one
    /// that installed them (docs/cache.md). Returns their handles, in order; install() takes the
    /// package it stopped at (one to extract) and those after it.
    std::vector<Installation> install_kept(const std::vector<InstallRequest>& requests,
                                           const std::filesystem::path& library);

    /// Gives up this process's references to `stem` (persistent = false; handles become inert) or
    /// the persistent reference (persistent = true). True when the package was uninstalled (kept in
    /// .kept within the op library's keep limit, or deleted).
    bool uninstall(const std::filesystem::path& library, std::string_view stem, std::string_view backend,
                   bool persistent);

    /// Removes dead holders, uninstalls packages without holders (kept within the op library's keep
    /// limit) and removes stale staging folders. Returns how many packages were uninstalled.
    std::size_t cleanup(const std::filesystem::path& library, std::string_view backend);

    /// The installed packages in install order (after removing dead holders and orphans); kept
    /// extractions are not installed and not listed.
    std::vector<InstalledPackage> list(const std::filesystem::path& library, std::string_view backend);

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

    struct Payload {
        std::string device;
        std::uint64_t bytes = 0;  // of its regular files, the identity file aside
    };

    // Extraction and the payload's checks (policy/installer/extract.hpp).
    [[noreturn]] static void fail(Errc code, const std::filesystem::path& package, const std::string& what,
                                  const std::string& log_tail = {});
    static void check_name(const std::string& name, const char* what, const std::filesystem::path& where);
    static std::string full_disk_note(const std::filesystem::path& dir, off_t package_size);
    void extract(const std::filesystem::path& package, const std::filesystem::path& staging,
                 std::chrono::seconds timeout) const;
    static Payload check_payload(const std::filesystem::path& package, const std::filesystem::path& root,
                                 const std::string& backend);
    static bool kernel_file_name_ok(const std::string& file);
    static bool digest_text_ok(const std::string& digest);
    static void check_file_name(const std::filesystem::path& package, const std::string& file,
                                const std::filesystem::path& root);
    static std::string package_uninstall_script(const std::string& stem);

    // Kept extractions (policy/installer/kept.hpp).
    static Identity identify_package(const std::filesystem::path& package, const std::optional<Digest>& given);
    static std::string identity_text(const Identity& id);
    static std::optional<Identity> read_identity(const std::filesystem::path& folder);
    static bool write_small_file(const std::filesystem::path& p, const std::string& text);
    static std::uint64_t read_keep_limit(const std::filesystem::path& base);
    static std::optional<std::string> reuse_locked(const std::filesystem::path& base, const std::string& stem,
                                                   const std::filesystem::path& package, const InstallOptions& opt,
                                                   const Identity& want);
    static bool retire_locked(const std::filesystem::path& base, const std::string& stem, std::uint64_t limit);
    static void remove_locked(const std::filesystem::path& base, const std::filesystem::path& path,
                              const std::string& stem);
    static void evict_kept_locked(const std::filesystem::path& base, std::uint64_t limit);

    // Holders, their release, and the cleanup of what is left (policy/installer/holders.hpp).
    static Installation hold_locked(const std::filesystem::path& base, const std::string& stem,
                                    const InstallOptions& opt, bool extracted, bool reused = false);
    static void release_holding(std::uint64_t id);
    static void register_exit_hook_once();
    static void release_all_at_exit() noexcept;
    static std::vector<std::string> holders_of(const std::filesystem::path& base, const std::string& stem);
    static std::size_t cleanup_locked(const std::filesystem::path& base,
                                      std::optional<std::uint64_t> new_limit = std::nullopt);

    // config.ini, the global indexes and the uninstall scripts (policy/installer/publish.hpp).
    static std::string top_uninstall_script(const Order& order);
    static void write_text(const std::filesystem::path& p, const std::string& text);
    static Order read_config(const std::filesystem::path& base);
    static std::string config_text(const Order& order);
    static bool installed_locked(const std::filesystem::path& base, const std::string& stem);
    /// `stem` listed in `order` (config.ini as read, or as about to be published) and its folder there.
    static bool installed_in(const Order& order, const std::filesystem::path& base, const std::string& stem);
    /// `stem` moved to (or added at) the end of `order`: the last installed, whose kernels win.
    static void install_last(Order& order, const std::string& stem, const std::string& device);
    static Installation publish_and_hold_locked(const std::filesystem::path& base, const std::string& stem,
                                                const std::string& device, const InstallOptions& opt, bool extracted,
                                                bool reused);
    static void publish_locked(const std::filesystem::path& base, const Order& order);

    std::filesystem::path shell_;
};

}  // namespace skc

// The definitions of RunPackageInstaller's members, a file for each part.
#include "installer/extract.hpp"
#include "installer/holders.hpp"
#include "installer/kept.hpp"
#include "installer/publish.hpp"

namespace skc {
static_assert(Installer<RunPackageInstaller>);
}  // namespace skc
