// expect: the Support policy needs a member `bool supports(std::string_view op_type) const`
#include <skc/compiler.hpp>

struct MyInvoker {
    skc::CompileResult compile(const skc::CompileRequest&) { return {}; }
};

struct NoSupport {};

using Compiler = skc::StaticKernelCompiler<MyInvoker, skc::FilesystemStorage, skc::FileLock, skc::RunPackageInstaller,
                                           skc::NoReselect, skc::SingleRank, NoSupport>;
static_assert(sizeof(Compiler) > 0);
