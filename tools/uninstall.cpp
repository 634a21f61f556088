// skc uninstall: removes the persistent installs that `skc compile --op-library` made, one package
// or all of them. A package that running processes still use stays (they hold it) until the last
// one ends. Exit statuses (docs/cli.md): 0 done, 1 the op library could not be changed, 2 bad usage
// or a package that is not installed.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <skc/layout.hpp>
#include <skc/policy/run_package_installer.hpp>

#include "cli.hpp"
#include "commands.hpp"
#include "common.hpp"

namespace skc_tool {

namespace {

namespace fs = std::filesystem;

constexpr int exit_not_changed = 1;  // the op library could not be changed

struct UninstallArgs {
    std::string op_library;
    std::optional<std::string> package;
    std::string backend = "host";
};

int run_uninstall(const UninstallArgs& a) {
    const std::string prefix = "skc uninstall: ";
    const fs::path library = a.op_library;
    const std::string& backend = a.backend;
    require_folder("--op-library", library.string());
    try {
        skc::check_path_safety(library, "--op-library");
        skc::RunPackageInstaller installer;
        const std::vector<skc::InstalledPackage> installed = installer.list(library, backend);
        std::vector<std::string> stems;
        if (!!a.package) {
            const std::string& want = *a.package;
            const bool found = std::any_of(installed.begin(), installed.end(),
                                           [&](const skc::InstalledPackage& i) { return i.stem == want; });
            if (!found) {
                std::string names;
                for (const auto& i : installed) names += (names.empty() ? "" : ", ") + printable(i.stem);
                throw UsageError{"no package '" + printable(want) + "' in " +
                                     printable(skc::install_base(library, backend).string()) + "; " +
                                     (names.empty() ? std::string("none is installed") : "installed: " + names),
                                 false};
            }
            stems.push_back(want);
        } else {
            for (const auto& i : installed) stems.push_back(i.stem);
        }
        if (stems.empty())
            out("nothing installed in " + printable(skc::install_base(library, backend).string()) + "\n");
        for (const std::string& stem : stems) {
            if (installer.uninstall(library, stem, backend, /*persistent=*/true)) {
                out("uninstalled " + printable(stem) + "\n");
            } else {
                std::size_t users = 0;
                for (const auto& i : installer.list(library, backend))
                    if (i.stem == stem) users = i.holders.size();
                out(printable(stem) +
                    " stays installed: " + plural(users, "running process uses", "running processes use") + " it\n");
            }
        }
        return exit_ok;
    } catch (const skc::Error& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "%s%s\n", prefix.c_str(), printable(e.what()).c_str());
        return e.code() == skc::Errc::unsafe_path || e.code() == skc::Errc::invalid_name ? exit_usage
                                                                                         : exit_not_changed;
    }
}

}  // namespace

void add_uninstall(CLI::App& skc, Action& action) {
    const auto a = std::make_shared<UninstallArgs>();
    CLI::App* u = skc.add_subcommand("uninstall", "remove packages that 'skc compile --op-library' installed");
    u->footer(
        "Removes the persistent install of PACKAGE (a package stem, as 'skc compile' printed it), or of every\n"
        "package without PACKAGE. A package that running processes still use stays until the last one ends.\n\n"
        "exit status: 0 done; 1 the op library could not be changed; 2 bad usage, or PACKAGE is not installed.");
    add_value(*u, "PACKAGE", a->package, "", "the package to remove (default: every package installed)");
    add_value(*u, "--op-library", a->op_library, "DIR", "the op library")->required();
    add_value(*u, "--backend", a->backend, "NAME", "op library backend folder (default: host)")
        ->check(plain_name_value());
    u->callback([&action, a] { action = [a] { return run_uninstall(*a); }; });
}

}  // namespace skc_tool
