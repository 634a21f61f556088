// expect: the Invoker's `compile(const CompileRequest&)` must return CompileResult
#include <skc/compiler.hpp>

struct WrongReturn {
    int compile(const skc::CompileRequest&) { return 0; }
};

using Compiler = skc::StaticKernelCompiler<WrongReturn>;
static_assert(sizeof(Compiler) > 0);
