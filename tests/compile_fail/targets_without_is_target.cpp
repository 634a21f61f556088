// A Targets policy without is_target() is named in one message.
// expect: the Targets policy needs a member `bool is_target(std::string_view op_type) const`
#include <skc/compiler.hpp>

struct MyInvoker {
    skc::CompileResult compile(const skc::CompileRequest&) { return {}; }
};

struct NotTargets {
    [[nodiscard]] bool supports(std::string_view) const { return true; }  // the wrong role's member
};

using Compiler = skc::StaticKernelCompiler<MyInvoker, skc::with_targets<NotTargets>>;
static_assert(sizeof(Compiler) > 0);
