// skc/policy/reselect.hpp: the ReselectHook concept and NoReselect.
//
// After a package is installed into the op library the runtime must *reselect* (docs/spec.md section 9):
// re-read the global kernel index so that the static kernels are used from the next op call on.
// StaticKernelCompiler calls the hook once per install, after the install is complete (the shared
// files are already rewritten), with where the package went. A runtime typically reads
// `<op_library>/static_kernel/<backend>/config/<device>/binary_info_config.json` and calls
// KernelTable::reload().
#pragma once

#include <concepts>
#include <filesystem>
#include <string>

namespace skc {

/// Where the installed kernels are.
struct ReselectContext {
    std::filesystem::path op_library;  // L
    std::string backend;               // L/static_kernel/<backend>
    std::string device;                // config/<device>/binary_info_config.json
    std::string package;               // stem of the package just installed
};

template <class R>
concept ReselectHook = requires(R& r, const ReselectContext& c) {
    { r.reselect(c) } -> std::same_as<void>;
};

namespace detail {
/// The message for a Reselect policy that does not fit (a host calls it in one line).
template <class R>
consteval bool diagnose_reselect() {
    static_assert(ReselectHook<R>, "skc: the Reselect policy needs a member `void reselect(const ReselectContext&)`");
    return true;
}
}  // namespace detail

/// For hosts without a runtime to refresh (tools, tests).
struct NoReselect {
    void reselect(const ReselectContext&) {}
};

static_assert(ReselectHook<NoReselect>);

}  // namespace skc
