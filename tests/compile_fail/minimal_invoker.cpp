// The controls: a user's invoker with every other policy defaulted is a working configuration, and
// the host asks only for what it calls (an installer with install() alone, a lock with lock_until()
// alone: LockTraits derives try_lock and lock).
#include <skc/compiler.hpp>

struct MyInvoker {
    skc::CompileResult compile(const skc::CompileRequest&) { return {}; }
};

using Compiler = skc::StaticKernelCompiler<MyInvoker>;
static_assert(sizeof(Compiler) > 0);

struct InstallOnly {
    skc::Installation install(const std::filesystem::path&, const std::filesystem::path&, const skc::InstallOptions&) {
        return {};
    }
};
struct LockUntilOnly {
    using Guard = skc::NoLock::Guard;
    Guard lock_until(std::string_view, skc::LockMode, skc::LockClock::time_point) { return {}; }
};
using Lean = skc::StaticKernelCompiler<MyInvoker, skc::with_install<InstallOnly>, skc::with_lock<LockUntilOnly>>;
static_assert(sizeof(Lean) > 0);
