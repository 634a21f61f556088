// Policies given partly by name and partly by position are named in one message.
// expect: skc::StaticKernelCompiler: name every policy (with_gather<...>, ...) or give them all by position, not both
#include <skc/compiler.hpp>

struct MyInvoker {
    skc::CompileResult compile(const skc::CompileRequest&) { return {}; }
};

using Compiler = skc::StaticKernelCompiler<MyInvoker, skc::FilesystemStorage, skc::with_lock<skc::ProcessLock>>;
static_assert(sizeof(Compiler) > 0);
