// Two selectors of one role are named in one message.
// expect: skc::StaticKernelCompiler: a policy is chosen twice (two with_<role> of the same role)
#include <skc/compiler.hpp>

struct MyInvoker {
    skc::CompileResult compile(const skc::CompileRequest&) { return {}; }
};

using Compiler = skc::StaticKernelCompiler<MyInvoker, skc::with_lock<skc::FileLock>, skc::with_lock<skc::ProcessLock>>;
static_assert(sizeof(Compiler) > 0);
