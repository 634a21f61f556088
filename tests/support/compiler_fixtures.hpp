// tests/support/compiler_fixtures.hpp: the Options and CompilerSettings the compiler tests and
// benchmarks construct StaticKernelCompiler with.
#pragma once

#include <filesystem>
#include <string>

#include <skc/compiler.hpp>
#include <skc/log.hpp>
#include <skc/options.hpp>

namespace skc_test {

/// The feature on, the cache on unless `cache` is false, the base `base`, 2 compiler jobs.
inline skc::Options options_for(const std::filesystem::path& base, bool cache = true) {
    skc::Options o;
    o.static_kernel_compile = true;
    o.disable_static_kernel_compile_cache = !cache;
    o.base_dir = base.string();
    o.jobs = 2;
    return o;
}

/// The cache namespace of `version` and `device`; installs into `lib` (none when empty); no log.
inline skc::CompilerSettings settings_for(const std::filesystem::path& lib, std::string version = "8.0.RC1",
                                          std::string device = "dev0") {
    skc::CompilerSettings s;
    s.toolchain_version = std::move(version);
    s.device = std::move(device);
    s.op_library = lib;
    s.log = skc::null_log();
    return s;
}

}  // namespace skc_test
