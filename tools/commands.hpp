// tools/commands.hpp: the skc commands, each registered on the one CLI::App of skc (skc.cpp) by
// its add_ function, which adds its options and sets `action` when the command is given.
#pragma once

#include <string>
#include <vector>

#include <skc/options.hpp>

#include "cli.hpp"

namespace skc_tool {

void add_compile(CLI::App& skc, Action& action);    // compile.cpp
void add_uninstall(CLI::App& skc, Action& action);  // uninstall.cpp
void add_ops(CLI::App& skc, Action& action);        // ops.cpp: skc ops inspect
void add_cache(CLI::App& skc, Action& action);      // cache.cpp and cache_*.cpp

/// The options that make the cache key besides the package format: the ops, the compiler and its
/// arguments, the device and the toolchain, as `skc compile` and `skc cache explain` take them.
struct KeyArgs {
    std::string ops;
    std::string compiler;
    std::string device;
    std::string toolchain_version;
    std::vector<std::string> compiler_args;
    std::vector<std::string> blacklist;
    bool deterministic = false;
    std::optional<std::string> compiler_check;
};

/// Adds the key's options to `app` (compile.cpp); --ops, --compiler, --device and --toolchain-version are required.
void add_key_options(CLI::App& app, KeyArgs& key);

/// skc::Options with the key's options set as `skc compile` sets them (compile.cpp).
skc::Options key_options(const KeyArgs& key);

}  // namespace skc_tool
