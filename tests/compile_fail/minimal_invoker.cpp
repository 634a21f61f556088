// The control: a user's invoker with every other policy defaulted is a working configuration.
#include <skc/compiler.hpp>

struct MyInvoker {
    skc::CompileResult compile(const skc::CompileRequest&) { return {}; }
};

using Compiler = skc::StaticKernelCompiler<MyInvoker>;
static_assert(sizeof(Compiler) > 0);
