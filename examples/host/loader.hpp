// examples/host/loader.hpp: loads the installed host kernels of one op library and device.
//
// After a run package is installed (skc::RunPackageInstaller, docs/run-package.md), the runtime
// reselects: it reads the global kernel index
// `<op_library>/static_kernel/<backend>/config/<device>/binary_info_config.json`
// (format "skc-installed-kernels"), dlopens every kernel file it names and resolves each kernel's
// symbol. The result feeds skc::KernelTable<KernelFn>::reload().
//
// Loaded libraries are never closed: KernelTable keeps old snapshots readable for its whole life,
// so a function pointer handed out once must stay callable. They are kept in a process-wide
// registry with one handle per path, so reloading after every install does not stack up dlopen
// references. A package's folder is named after its file's stem, which carries a microsecond
// timestamp, so one path never names two different libraries; and the kernels of a package that
// is uninstalled stay mapped (the dlopen'ed file is unlinked, not overwritten).
//
// Everything in the index is checked before anything is loaded: a malformed index, a kernel file
// that cannot be loaded or a missing symbol is an skc::Error naming the file and the reason.
#pragma once

#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <dlfcn.h>
#include <sys/stat.h>

#include <skc/detail/hash.hpp>
#include <skc/error.hpp>
#include <skc/op_info_io.hpp>
#include <skc/policy/reselect.hpp>
#include <skc/value.hpp>

namespace skc_host {

/// A compiled host kernel: the calling convention of plan.hpp.
using KernelFn = void (*)(const float* const* inputs, float* const* outputs);

/// One entry of the table every kernel library built by host_op_compiler exports, so that a
/// library can be inspected without any index:
///     extern "C" const skc_host_entry skc_host_kernel_table[];   // this layout
///     extern "C" const std::size_t skc_host_kernel_count;
/// `digest` is the op's content digest (32 lower-case hex digits), `op_type` its op type.
struct LibraryEntry {
    const char* digest;
    const char* op_type;
    KernelFn fn;
};
inline constexpr const char* kernel_table_symbol = "skc_host_kernel_table";
inline constexpr const char* kernel_count_symbol = "skc_host_kernel_count";

namespace detail {

/// 32 lower-case hex digits into a digest; false for anything else (upper case included: the
/// index and the packages always write lower case, so another spelling means a damaged file).
inline bool parse_digest(std::string_view s, skc::Digest& out) {
    if (s.size() != 32) return false;
    for (std::size_t i = 0; i < 16; ++i) {
        unsigned v = 0;
        for (std::size_t k = 0; k < 2; ++k) {
            const char c = s[2 * i + k];
            unsigned d = 0;
            if (c >= '0' && c <= '9') d = static_cast<unsigned>(c - '0');
            else if (c >= 'a' && c <= 'f') d = static_cast<unsigned>(c - 'a' + 10);
            else return false;
            v = v * 16 + d;
        }
        out.bytes[i] = static_cast<unsigned char>(v);
    }
    return true;
}

/// A relative path with no empty, `.` or `..` part: it stays inside the folder it is relative to.
inline bool contained_relative_path(std::string_view s) {
    if (s.empty() || s.front() == '/' || s.find('\0') != std::string_view::npos) return false;
    std::size_t start = 0;
    while (start <= s.size()) {
        std::size_t end = s.find('/', start);
        if (end == std::string_view::npos) end = s.size();
        const std::string_view part = s.substr(start, end - start);
        if (part.empty() || part == "." || part == "..") return false;
        start = end + 1;
    }
    return true;
}

/// The process-wide registry of loaded kernel libraries: never destroyed, never closed.
struct LibraryRegistry {
    std::mutex mu;
    std::map<std::string, void*> handles;  // absolute path -> dlopen handle
};

inline LibraryRegistry& library_registry() {
    static auto* r = new LibraryRegistry;  // leaked on purpose: kernels may run during static destruction
    return *r;
}

/// The handle of `path`, dlopen'ed (RTLD_NOW | RTLD_LOCAL) on first use.
inline void* open_library(const std::filesystem::path& path) {
    LibraryRegistry& reg = library_registry();
    std::lock_guard lk(reg.mu);
    if (auto it = reg.handles.find(path.string()); it != reg.handles.end()) return it->second;
    ::dlerror();  // clear a stale message
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
        const char* why = ::dlerror();
        throw skc::Error(skc::Errc::io_error,
                         std::string("cannot load kernel file: ") + (why != nullptr ? why : "dlopen failed"),
                         skc::ErrorContext{path.string(), {}, {}});
    }
    reg.handles.emplace(path.string(), h);
    return h;
}

[[noreturn]] inline void bad_index(const std::filesystem::path& index, const std::string& json_path,
                                   const std::string& what) {
    throw skc::Error(skc::Errc::corrupt, "bad installed kernel index: " + what,
                     skc::ErrorContext{index.string(), json_path, {}});
}

inline const std::string& string_member(const std::filesystem::path& index, const skc::Value& obj,
                                        const std::string& at, const char* key) {
    const skc::Value* v = obj.find(key);
    if (v == nullptr) bad_index(index, at, std::string("missing \"") + key + "\"");
    if (!v->is_string() || v->as_string().empty()) bad_index(index, at + "." + key, "must be a non-empty string");
    return v->as_string();
}

}  // namespace detail

/// The global kernel index of a device: `<op_library>/static_kernel/<backend>/config/<device>/
/// binary_info_config.json`.
[[nodiscard]] inline std::filesystem::path installed_index_path(const skc::ReselectContext& ctx) {
    return ctx.op_library / "static_kernel" / ctx.backend / "config" / ctx.device / "binary_info_config.json";
}

/// Reads <ctx.op_library>/static_kernel/<ctx.backend>/config/<ctx.device>/binary_info_config.json
/// (format "skc-installed-kernels", see docs/run-package.md "Installed layout"), dlopens each distinct
/// kernel file (RTLD_NOW | RTLD_LOCAL) and resolves each symbol. Returns one entry per kernel, in
/// the index's order (by digest).
/// An absent index file means no kernels (empty vector). A malformed index, a file that cannot be
/// loaded, or a missing symbol is an skc::Error naming the file and the reason.
/// Loaded libraries are never closed (kept in a process-wide registry, one handle per path), because
/// skc::KernelTable keeps old snapshots readable forever; loading the same path twice reuses the handle.
[[nodiscard]] inline std::vector<std::pair<skc::Digest, KernelFn>> load_installed_kernels(
    const skc::ReselectContext& ctx) {
    const std::filesystem::path base = ctx.op_library / "static_kernel" / ctx.backend;
    const std::filesystem::path index = installed_index_path(ctx);
    struct stat st {};
    if (::lstat(index.c_str(), &st) != 0 && errno == ENOENT) return {};  // no package for this device

    skc::Value doc;
    try {
        doc = skc::parse_json(skc::read_file(index, std::size_t{64} << 20));
    } catch (const skc::Error& e) {
        // The last package of the device was removed between the lstat and the read: no kernels.
        if (::lstat(index.c_str(), &st) != 0 && errno == ENOENT) return {};
        throw e.in_file(index.string());
    }
    if (!doc.is_object()) detail::bad_index(index, "", "not a JSON object");
    const skc::Value* format = doc.find("format");
    if (format == nullptr || !format->is_string() || format->as_string() != "skc-installed-kernels")
        detail::bad_index(index, "format", "must be \"skc-installed-kernels\"");
    const skc::Value* version = doc.find("version");
    if (version == nullptr || version->kind() != skc::Kind::integer || version->as_int() != 1)
        detail::bad_index(index, "version", "must be 1");
    const skc::Value* backend = doc.find("backend");
    if (backend == nullptr || !backend->is_string() || backend->as_string() != ctx.backend)
        detail::bad_index(index, "backend", "must be \"" + ctx.backend + "\"");
    const skc::Value* device = doc.find("device");
    if (device == nullptr || !device->is_string() || device->as_string() != ctx.device)
        detail::bad_index(index, "device", "must be \"" + ctx.device + "\"");
    const skc::Value* kernels = doc.find("kernels");
    if (kernels == nullptr || !kernels->is_object()) detail::bad_index(index, "kernels", "must be an object");

    // Check every entry first, so a bad index loads nothing.
    struct Want {
        skc::Digest digest;
        std::filesystem::path file;
        std::string symbol;
    };
    std::vector<Want> wants;
    for (const skc::Member& m : kernels->as_object()) {
        const std::string at = "kernels." + m.key;
        Want w;
        if (!detail::parse_digest(m.key, w.digest))
            detail::bad_index(index, at, "key is not a 32-lower-case-hex digest");
        if (!m.value.is_object()) detail::bad_index(index, at, "must be an object");
        const std::string& file = detail::string_member(index, m.value, at, "file");
        if (!detail::contained_relative_path(file))
            detail::bad_index(index, at + ".file", "\"" + file + "\" is not a relative path inside the op library");
        w.file = base / file;
        w.symbol = detail::string_member(index, m.value, at, "symbol");
        wants.push_back(std::move(w));
    }

    std::vector<std::pair<skc::Digest, KernelFn>> out;
    out.reserve(wants.size());
    for (const Want& w : wants) {
        void* h = detail::open_library(w.file);
        ::dlerror();
        void* sym = ::dlsym(h, w.symbol.c_str());
        if (sym == nullptr)
            throw skc::Error(
                skc::Errc::corrupt,
                "kernel symbol \"" + w.symbol + "\" (digest " + w.digest.hex() + ") not found in kernel file",
                skc::ErrorContext{w.file.string(), {}, {}});
        // dlsym returns an object pointer; POSIX guarantees it converts to the function's type.
        out.emplace_back(w.digest, reinterpret_cast<KernelFn>(sym));
    }
    return out;
}

/// A kernel as the entry table of its library lists it.
struct LibraryKernel {
    skc::Digest digest;
    std::string op_type;
    KernelFn fn = nullptr;
};

/// The entry table of a kernel library built by host_op_compiler (loaded through the same
/// registry, so never closed). A library without the table, or with a malformed entry, is an
/// skc::Error naming the file.
[[nodiscard]] inline std::vector<LibraryKernel> read_entry_table(const std::filesystem::path& library) {
    void* h = detail::open_library(library);
    const auto* table = static_cast<const LibraryEntry*>(::dlsym(h, kernel_table_symbol));
    const auto* count = static_cast<const std::size_t*>(::dlsym(h, kernel_count_symbol));
    if (table == nullptr || count == nullptr)
        throw skc::Error(skc::Errc::corrupt,
                         std::string("no kernel entry table (") + kernel_table_symbol + ", " + kernel_count_symbol +
                             ") in kernel library",
                         skc::ErrorContext{library.string(), {}, {}});
    std::vector<LibraryKernel> out;
    for (std::size_t i = 0; i < *count; ++i) {
        LibraryKernel k;
        if (table[i].digest == nullptr || !detail::parse_digest(table[i].digest, k.digest) ||
            table[i].op_type == nullptr || table[i].fn == nullptr)
            throw skc::Error(skc::Errc::corrupt, "malformed entry " + std::to_string(i) + " in the kernel entry table",
                             skc::ErrorContext{library.string(), {}, {}});
        k.op_type = table[i].op_type;
        k.fn = table[i].fn;
        out.push_back(std::move(k));
    }
    return out;
}

}  // namespace skc_host
