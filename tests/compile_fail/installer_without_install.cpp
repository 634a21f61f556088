// An install policy without install() is named in one message.
// expect: the Install policy needs a member `Installation install(const std::filesystem::path& package,
// expect: const std::filesystem::path& library, const InstallOptions&)`
#include <skc/compiler.hpp>

struct MyInvoker {
    skc::CompileResult compile(const skc::CompileRequest&) { return {}; }
};

struct ListOnly {  // what a tool needs, not what the host calls
    std::vector<skc::InstalledPackage> list(const std::filesystem::path&, std::string_view) { return {}; }
};

using Compiler = skc::StaticKernelCompiler<MyInvoker, skc::with_install<ListOnly>>;
static_assert(sizeof(Compiler) > 0);
