// tools/commands.hpp: the skc commands defined outside skc.cpp, one run/usage pair each.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "common.hpp"

namespace skc_tool {

int run_compile(Args args);
std::string compile_usage();

int run_uninstall(Args args);
std::string uninstall_usage();

int run_ops(Args args);

/// `skc cache explain`: the key of the op info files in --ops (as skc compile makes it), and the
/// nearest entry of cache folder `cache_dir` with what differs.
int explain_cache_miss(const std::string& prefix, const ParsedArgs& p, const std::filesystem::path& cache_dir,
                       const std::string& shown, const std::optional<std::string>& ns, bool json);
std::string ops_usage();

}  // namespace skc_tool
