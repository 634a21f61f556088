// expect: the Install policy needs a member `std::vector<InstalledPackage> list(const std::filesystem::path& library, std::string_view backend)`
#include <skc/compiler.hpp>

struct MyInvoker {
    skc::CompileResult compile(const skc::CompileRequest&) { return {}; }
};

struct PartialInstaller {
    skc::Installation install(const std::filesystem::path&, const std::filesystem::path&, const skc::InstallOptions&) {
        return {};
    }
    bool uninstall(const std::filesystem::path&, std::string_view, std::string_view, bool) { return false; }
};

using Compiler = skc::StaticKernelCompiler<MyInvoker, skc::FilesystemStorage, skc::FileLock, PartialInstaller>;
static_assert(sizeof(Compiler) > 0);
