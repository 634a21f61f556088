// expect: the Reselect policy needs a member `void reselect(const ReselectContext&)`
#include <skc/compiler.hpp>

struct MyInvoker {
    skc::CompileResult compile(const skc::CompileRequest&) { return {}; }
};

struct WrongReselect {
    void reselect() {}  // takes no context
};

using Compiler = skc::StaticKernelCompiler<MyInvoker, skc::FilesystemStorage, skc::FileLock, skc::RunPackageInstaller,
                                           WrongReselect>;
static_assert(sizeof(Compiler) > 0);
