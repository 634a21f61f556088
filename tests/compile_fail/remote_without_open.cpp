// A Remote policy without the static open() is named in one message.
// expect: the Remote policy needs a member `static std::unique_ptr<skc::RemoteTier> open(const skc::RemoteConfig&)`
#include <skc/compiler.hpp>

struct MyInvoker {
    skc::CompileResult compile(const skc::CompileRequest&) { return {}; }
};

struct NotRemote {
    std::unique_ptr<skc::RemoteTier> connect(const skc::RemoteConfig&) { return nullptr; }  // not static, misnamed
};

using Compiler = skc::StaticKernelCompiler<MyInvoker, skc::with_remote<NotRemote>>;
static_assert(sizeof(Compiler) > 0);
