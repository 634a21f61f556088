// The Installer law suite, run over every shipped installer: RunPackageInstaller with real makeself
// packages (tests/support/run_packages.hpp), and NoInstall. NoInstall installs nothing and records
// the calls (installer.hpp): where a law is about what an install puts into the op library or the
// reference it holds, its case says so and checks what NoInstall promises instead.
#include <doctest/doctest.h>

#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <skc/policy/installer.hpp>
#include <skc/policy/run_package_installer.hpp>

#include "run_packages.hpp"
#include "test_support.hpp"

namespace skc_policy_installer_law_test {

namespace {

namespace fs = std::filesystem;

template <class I>
struct Fixture;

template <>
struct Fixture<skc::RunPackageInstaller> {
    static constexpr bool installs = true;  // puts the package into the op library, and holds it
    skc_test::TempDir dir;
    fs::path lib = dir / "lib";
    skc::RunPackageInstaller make() { return skc::RunPackageInstaller(); }
    /// A real package `<stem>.run` with one kernel of its own, built once and shared by the cases
    /// (an install only reads it; each case has an op library of its own).
    static fs::path package(const std::string& stem) {
        static const skc_test::TempDir packages;
        static std::map<std::string, fs::path> built;
        auto it = built.find(stem);
        if (it == built.end()) {
            const std::string digest = skc_test::digest_of(static_cast<int>(built.size()) + 1);
            it = built
                     .emplace(stem, skc_test::make_package(packages.path(), stem,
                                                           {{digest, "Add", "kernels/" + stem + ".so", "kernel\n"}}))
                     .first;
        }
        return it->second;
    }
};

template <>
struct Fixture<skc::NoInstall> {
    static constexpr bool installs = false;  // records the calls; the op library is never touched
    skc_test::TempDir dir;
    fs::path lib = dir / "lib";
    skc::NoInstall make() { return {}; }
    /// NoInstall never opens the package: any file named like one will do.
    fs::path package(const std::string& stem) {
        const fs::path p = dir / (stem + ".run");
        skc_test::spit(p, "not a package: NoInstall never reads it\n");
        return p;
    }
};

/// How many of `list`'s packages are `stem`.
std::size_t count_stem(const std::vector<skc::InstalledPackage>& list, const std::string& stem) {
    std::size_t n = 0;
    for (const skc::InstalledPackage& p : list) n += p.stem == stem;
    return n;
}

const std::string stem_a = "static_kernel_20260101000000_1";

}  // namespace

TEST_CASE_TEMPLATE("installer law: install returns the package's stem and <library>/static_kernel/<backend>/<stem>", I,
                   skc::RunPackageInstaller, skc::NoInstall) {
    Fixture<I> fx;
    I inst = fx.make();
    const fs::path pkg = fx.package(stem_a);
    const skc::Installation a = inst.install(pkg, fx.lib, skc::InstallOptions{});
    CHECK(a.stem() == stem_a);
    CHECK(a.folder() == fx.lib / "static_kernel" / "host" / stem_a);
    CHECK(a.folder() == skc::install_base(fx.lib, "host") / a.stem());
    if constexpr (Fixture<I>::installs) {
        CHECK(a.extracted());  // the first install extracts
        CHECK_FALSE(a.reused());
        CHECK(fs::is_directory(a.folder()));
        CHECK(fs::is_regular_file(a.folder() / "kernels" / (stem_a + ".so")));
    } else {
        // NoInstall installs nothing: nothing extracted, the op library not even created; the call
        // is recorded with what it was given.
        CHECK_FALSE(a.extracted());
        CHECK_FALSE(a.reused());
        CHECK_FALSE(fs::exists(fx.lib));
        REQUIRE(inst.calls.size() == 1);
        CHECK(inst.calls[0].what == "install");
        CHECK(inst.calls[0].package == pkg);
        CHECK(inst.calls[0].library == fx.lib);
        CHECK(inst.calls[0].stem == stem_a);
        CHECK(inst.calls[0].backend == "host");
        CHECK_FALSE(inst.calls[0].persistent);
    }
}

TEST_CASE_TEMPLATE("installer law: installing the same package twice is fine; the second call extracts nothing", I,
                   skc::RunPackageInstaller, skc::NoInstall) {
    Fixture<I> fx;
    I inst = fx.make();
    const fs::path pkg = fx.package(stem_a);
    const skc::Installation a = inst.install(pkg, fx.lib, skc::InstallOptions{});
    const skc::Installation b = inst.install(pkg, fx.lib, skc::InstallOptions{});
    CHECK(b.stem() == a.stem());
    CHECK(b.folder() == a.folder());
    CHECK_FALSE(b.extracted());
    CHECK_FALSE(b.reused());  // installed already: neither extracted nor taken from .kept
    if constexpr (Fixture<I>::installs) {
        CHECK(a.extracted());
        CHECK(fs::is_regular_file(b.folder() / "kernels" / (stem_a + ".so")));
        CHECK(count_stem(inst.list(fx.lib, "host"), stem_a) == 1);  // one package, two references
    } else {
        REQUIRE(inst.calls.size() == 2);
        CHECK(inst.calls[1].what == "install");
        CHECK(inst.calls[1].stem == stem_a);
    }
}

TEST_CASE_TEMPLATE("installer law: a process-scoped installation holds until release(); the last release uninstalls", I,
                   skc::RunPackageInstaller, skc::NoInstall) {
    Fixture<I> fx;
    I inst = fx.make();
    const fs::path pkg = fx.package(stem_a);
    skc::Installation a = inst.install(pkg, fx.lib, skc::InstallOptions{});
    skc::Installation b = inst.install(pkg, fx.lib, skc::InstallOptions{});
    if constexpr (Fixture<I>::installs) {
        CHECK(a.holds());
        CHECK(b.holds());
        a.release();
        CHECK_FALSE(a.holds());
        CHECK(b.holds());
        CHECK(count_stem(inst.list(fx.lib, "host"), stem_a) == 1);  // b still holds it
        CHECK(fs::is_directory(a.folder()));
        a.release();  // a second release gives nothing up again
        CHECK(count_stem(inst.list(fx.lib, "host"), stem_a) == 1);
        b.release();
        CHECK_FALSE(b.holds());
        CHECK(count_stem(inst.list(fx.lib, "host"), stem_a) == 0);
        CHECK_FALSE(fs::exists(a.folder()));
        // Destroying a handle releases it too.
        {
            const skc::Installation c = inst.install(pkg, fx.lib, skc::InstallOptions{});
            CHECK(c.holds());
            CHECK(count_stem(inst.list(fx.lib, "host"), stem_a) == 1);
        }
        CHECK(count_stem(inst.list(fx.lib, "host"), stem_a) == 0);
    } else {
        // Not applicable: NoInstall installs nothing, so its installations hold no reference;
        // release() and destruction are harmless and call nothing back.
        CHECK_FALSE(a.holds());
        CHECK_FALSE(b.holds());
        a.release();
        CHECK_FALSE(a.holds());
        CHECK(inst.calls.size() == 2);  // releasing is not a call of the installer
        CHECK_FALSE(fs::exists(fx.lib));
    }
}

TEST_CASE_TEMPLATE("installer law: a persistent installation holds no handle and stays until uninstalled", I,
                   skc::RunPackageInstaller, skc::NoInstall) {
    Fixture<I> fx;
    I inst = fx.make();
    const fs::path pkg = fx.package(stem_a);
    skc::InstallOptions opt;
    opt.persistent = true;
    {
        const skc::Installation a = inst.install(pkg, fx.lib, opt);
        CHECK(a.stem() == stem_a);
        CHECK_FALSE(a.holds());  // the reference is the op library's, not the handle's
    }
    if constexpr (Fixture<I>::installs) {
        const std::vector<skc::InstalledPackage> listed = inst.list(fx.lib, "host");
        REQUIRE(count_stem(listed, stem_a) == 1);
        CHECK(listed[0].persistent());
        CHECK(inst.uninstall(fx.lib, stem_a, "host", true));
        CHECK(count_stem(inst.list(fx.lib, "host"), stem_a) == 0);
    } else {
        CHECK_FALSE(inst.uninstall(fx.lib, stem_a, "host", true));
        REQUIRE(inst.calls.size() == 2);
        CHECK(inst.calls[0].persistent);
        CHECK(inst.calls[1].what == "uninstall");
        CHECK(inst.calls[1].persistent);
    }
}

TEST_CASE_TEMPLATE("installer law: list after install names the stem", I, skc::RunPackageInstaller, skc::NoInstall) {
    Fixture<I> fx;
    I inst = fx.make();
    CHECK(inst.list(fx.lib, "host").empty());  // nothing installed yet
    const skc::Installation a = inst.install(fx.package(stem_a), fx.lib, skc::InstallOptions{});
    const std::vector<skc::InstalledPackage> listed = inst.list(fx.lib, "host");
    if constexpr (Fixture<I>::installs) {
        REQUIRE(listed.size() == 1);
        CHECK(listed[0].stem == stem_a);
        CHECK(listed[0].folder == a.folder());
        CHECK(listed[0].device == "dev0");
        CHECK(listed[0].holders.size() == 1);  // this process's handle
        CHECK_FALSE(listed[0].persistent());
    } else {
        // NoInstall lists nothing (nothing is installed) and records each list() call.
        CHECK(listed.empty());
        REQUIRE(inst.calls.size() == 3);
        CHECK(inst.calls[0].what == "list");
        CHECK(inst.calls[2].what == "list");
        CHECK(inst.calls[2].library == fx.lib);
        CHECK(inst.calls[2].backend == "host");
    }
}

TEST_CASE_TEMPLATE("installer law: uninstall gives the install up and list no longer names it", I,
                   skc::RunPackageInstaller, skc::NoInstall) {
    Fixture<I> fx;
    I inst = fx.make();
    const fs::path pkg = fx.package(stem_a);
    skc::Installation a = inst.install(pkg, fx.lib, skc::InstallOptions{});
    const bool uninstalled = inst.uninstall(fx.lib, stem_a, "host", false);
    if constexpr (Fixture<I>::installs) {
        CHECK(uninstalled);
        CHECK(count_stem(inst.list(fx.lib, "host"), stem_a) == 0);
        CHECK_FALSE(fs::exists(a.folder()));
        CHECK_NOTHROW(a.release());                                  // the handle was made inert
        CHECK_FALSE(inst.uninstall(fx.lib, stem_a, "host", false));  // nothing left to give up
        CHECK_FALSE(inst.uninstall(fx.lib, "static_kernel_never_installed", "host", false));
        // Installed again afterwards: listed and held again.
        const skc::Installation again = inst.install(pkg, fx.lib, skc::InstallOptions{});
        CHECK(again.holds());
        CHECK(count_stem(inst.list(fx.lib, "host"), stem_a) == 1);
    } else {
        // NoInstall has nothing to uninstall: false, and the call recorded with its arguments.
        CHECK_FALSE(uninstalled);
        REQUIRE(inst.calls.size() == 2);
        CHECK(inst.calls[1].what == "uninstall");
        CHECK(inst.calls[1].library == fx.lib);
        CHECK(inst.calls[1].stem == stem_a);
        CHECK(inst.calls[1].backend == "host");
        CHECK_FALSE(inst.calls[1].persistent);
    }
}

}  // namespace skc_policy_installer_law_test
