// expect: the Storage policy needs a member `ObjectInfo import_file(std::string_view name,
// expect: const std::filesystem::path& file)`
#include <skc/compiler.hpp>

struct MyInvoker {
    skc::CompileResult compile(const skc::CompileRequest&) { return {}; }
};

// Everything a Storage needs but import_file.
struct PartialStorage {
    std::optional<std::string> read(std::string_view) const { return {}; }
    void write(std::string_view, std::string_view) {}
    bool remove(std::string_view) { return false; }
    std::optional<skc::ObjectInfo> stat(std::string_view) const { return {}; }
    void touch(std::string_view) {}
    std::vector<std::string> list(std::string_view) const { return {}; }
    bool read_chunks(std::string_view, const skc::ChunkFn&) const { return false; }
};

using Compiler = skc::StaticKernelCompiler<MyInvoker, PartialStorage>;
static_assert(sizeof(Compiler) > 0);
