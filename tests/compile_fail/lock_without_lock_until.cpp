// expect: the Lock policy needs a member `Guard lock_until(std::string_view name, LockMode mode,
// expect: LockClock::time_point deadline)`
#include <skc/compiler.hpp>

struct MyInvoker {
    skc::CompileResult compile(const skc::CompileRequest&) { return {}; }
};

struct PartialLock {
    using Guard = skc::NoLock::Guard;
    Guard try_lock(std::string_view, skc::LockMode) { return {}; }
    Guard lock(std::string_view, skc::LockMode) { return {}; }
};

using Compiler = skc::StaticKernelCompiler<MyInvoker, skc::FilesystemStorage, PartialLock>;
static_assert(sizeof(Compiler) > 0);
