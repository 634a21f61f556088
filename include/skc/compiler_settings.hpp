// skc/compiler_settings.hpp: what a StaticKernelCompiler needs beyond Options: the cache namespace,
// where to install, and where its reports go.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>

#include "compile_report.hpp"
#include "log.hpp"
#include "policy/cache.hpp"
#include "select.hpp"

namespace skc {

/// What a compile needs beyond Options: the cache namespace and where to install.
struct CompilerSettings {
    std::string toolchain_version;     // cache namespace (docs/spec.md section 7), part of the key
    std::string device;                // passed to the compiler as -v; cache namespace; part of the key
    std::filesystem::path op_library;  // empty: nothing is installed and no reselect happens
    std::string backend = "host";      // L/static_kernel/<backend>
    bool persistent_install = false;   // the install outlives the process (as running the package by hand)
    std::chrono::seconds install_timeout{300};
    CacheConfig cache{};  // limits, wait timeout for another process's compile, log
    /// The compiler's fingerprint for the cache key. Empty: taken from the invoker's compiler_path()
    /// (ProcessInvoker has one) as options.compiler_check says; an invoker without one adds none.
    std::string compiler_fingerprint;
    LogSink log = stderr_log();
    /// Told how far each compile() is (CompileProgress); empty: nothing is reported. Called from
    /// the thread that runs compile(); what it throws is caught, logged at debug level and ignored.
    std::function<void(const CompileProgress&)> progress;
    /// The ops this host has compiled: selection skips them, and a compile that succeeds adds its
    /// ops. Null: the process's own set (process_compiled()). A host whose runtime can forget
    /// kernels (a plugin that unloads them, or moves to another op library) keeps a set of its own
    /// and clears it then, or ops it still needs would be skipped for ever.
    CompiledSet* compiled = nullptr;
};

}  // namespace skc
