// skc/policy/installer.hpp: the Installer concept, what an install takes and returns, and
// InstallerTraits. Its models: RunPackageInstaller (run_package_installer.hpp), and NoInstall
// (below), which installs nothing and records the calls.
//
// An installer puts a run package into an op library (docs/spec.md section 9).
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../detail/hash.hpp"

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

/// One package of an install of several (RunPackageInstaller::install_kept): its file and options.
struct InstallRequest {
    std::filesystem::path package;
    InstallOptions options;
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
    Installation(Installation&& o) noexcept { swap(o); }
    Installation& operator=(Installation&& o) noexcept {
        Installation(std::move(o)).swap(*this);  // the temporary gives up what this one held
        return *this;
    }
    void swap(Installation& o) noexcept {
        std::swap(stem_, o.stem_);
        std::swap(folder_, o.folder_);
        std::swap(extracted_, o.extracted_);
        std::swap(reused_, o.reused_);
        std::swap(release_, o.release_);
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
/// `uninstall` and `list` (for tools such as `skc uninstall`), and RunPackageInstaller has `check`
/// (InstallerTraits).
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

/// What the host uses of an install policy when it has it.
template <class I>
struct InstallerTraits {
    /// Why `package` cannot be installed, when the policy can tell (RunPackageInstaller::check), so
    /// that a damaged cached package is discarded and compiled again instead of failing every run;
    /// nullopt otherwise.
    static std::optional<std::string> check(const I& i, const std::filesystem::path& package) {
        if constexpr (requires {
                          { i.check(package) } -> std::convertible_to<std::optional<std::string>>;
                      })
            return i.check(package);
        else return std::nullopt;
    }

    /// Whether the policy installs, in one go, the longest prefix of a list of packages that it can
    /// install without extracting (RunPackageInstaller::install_kept); the caller installs the rest
    /// one by one.
    static constexpr bool installs_kept =
        requires(I & i, const std::vector<InstallRequest>& requests, const std::filesystem::path& library) {
        { i.install_kept(requests, library) } -> std::same_as<std::vector<Installation>>;
    };
};

/// The folder of a backend's packages in an op library: L/static_kernel/<backend>.
inline std::filesystem::path install_base(const std::filesystem::path& library, std::string_view backend) {
    return library / "static_kernel" / std::string(backend);
}

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
        return Installation(package.stem().string(), install_base(library, opt.backend) / package.stem(), false,
                            nullptr);
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

static_assert(Installer<NoInstall>);

}  // namespace skc
