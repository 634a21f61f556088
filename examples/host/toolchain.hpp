// examples/host/toolchain.hpp: the toolchain version of a kernel compiler, from what it is.
//
// The cache's namespace and key include a toolchain version (docs/spec.md section 7). The kernels
// host_op_compiler makes depend on its own code (the kernel generator is compiled into it) and on
// the C++ compiler it runs ($CXX, else c++), so both go into the version: with a fixed string, a
// rebuilt host_op_compiler would be served the packages of the old one. (An upgrade of the C++
// compiler under the same name is not seen; a real toolchain has a version number for that.)
// The instruction set the kernels are built for (target.hpp) is the last part, readable, so a
// package built for one is a miss on a CPU with another, and `skc cache explain` says why.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

#include <skc/detail/hash.hpp>
#include <skc/error.hpp>

#include "target.hpp"

namespace skc_host {

/// "host-", 16 hex digits of the compiler file's content and the C++ compiler's name, "-" and the
/// target's id (e.g. "host-0123456789abcdef-avx512-1f2e3d4c"). Throws skc::Error (io_error) naming
/// the file when it cannot be read.
inline std::string toolchain_version(const std::filesystem::path& compiler, const Target& target = host_target()) {
    std::ifstream in(compiler, std::ios::binary);  // follows symbolic links: a compiler often is one
    std::string id((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.is_open() || in.bad())
        throw skc::Error(skc::Errc::io_error, "cannot read the kernel compiler",
                         skc::ErrorContext{compiler.string(), {}, {}});
    const char* cxx = std::getenv("CXX");
    id += '\0';
    id += cxx != nullptr && *cxx != '\0' ? cxx : "c++";
    return "host-" + skc::detail::hash_bytes(id).hex().substr(0, 16) + "-" + target.id;
}

}  // namespace skc_host
