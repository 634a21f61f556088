// A gather policy without coordinate() is named in one message.
// expect: the Gather policy needs a member `Value coordinate(const GatherRequest&, const LeadFn&, const ShareFn&)`
#include <skc/compiler.hpp>

struct MyInvoker {
    skc::CompileResult compile(const skc::CompileRequest&) { return {}; }
};
struct NoCoordinate {
    [[nodiscard]] std::size_t local_rank() const { return 0; }
    [[nodiscard]] std::size_t local_world_size() const { return 1; }
};

using Compiler = skc::StaticKernelCompiler<MyInvoker, skc::FilesystemStorage, skc::FileLock, skc::RunPackageInstaller,
                                           skc::NoReselect, NoCoordinate>;
static_assert(sizeof(Compiler) > 0);
