// A policy with no default constructor that the constructor is not given is named in one message.
// expect: skc::StaticKernelCompiler: a policy without a default constructor must be passed to the constructor
#include <skc/compiler.hpp>

struct MyInvoker {
    skc::CompileResult compile(const skc::CompileRequest&) { return {}; }
};

struct NeedsAFolder {
    explicit NeedsAFolder(int fd) : fd_(fd) {}
    void reselect(const skc::ReselectContext&) {}
    int fd_;
};

using Compiler = skc::StaticKernelCompiler<MyInvoker, skc::with_reselect<NeedsAFolder>>;

Compiler make() { return Compiler(MyInvoker{}, skc::Options{}, skc::CompilerSettings{}); }
