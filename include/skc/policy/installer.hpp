// skc/policy/installer.hpp: the Installer concept and its models: RunPackageInstaller, NoInstall.
//
// An installer puts a run package into an op library (docs/spec.md section 9). RunPackageInstaller
// extracts it (makeself, through posix_spawn, never a shell string), checks the payload, and under
// the node-wide install lock renames it into place and rewrites the global index and config.ini
// atomically. Installs are reference-counted across processes by holder files
// (detail/install_holders.hpp), released with the Installation handle, at exit and on SIGINT or
// SIGTERM; orphans of killed processes are cleaned up by the next install. An uninstalled
// package's extraction is kept for reuse (`.kept/`), within a byte limit. docs/run-package.md
// describes the layout, each step and every error. The Installer concept, the install types and
// RunPackageInstaller's interface are in run_package_installer.hpp, its members' definitions in one
// file for each role: installer/extract.hpp, installer/kept.hpp, installer/holders.hpp and
// installer/publish.hpp.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "run_package_installer.hpp"
#include "installer/extract.hpp"
#include "installer/holders.hpp"
#include "installer/kept.hpp"
#include "installer/publish.hpp"

namespace skc {

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
