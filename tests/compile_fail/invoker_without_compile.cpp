// expect: the Invoker policy needs a member `CompileResult compile(const CompileRequest&)`
#include <skc/compiler.hpp>

struct NotAnInvoker {
    void run() {}
};

using Compiler = skc::StaticKernelCompiler<NotAnInvoker>;
static_assert(sizeof(Compiler) > 0);
