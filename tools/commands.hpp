// tools/commands.hpp: the skc commands defined outside skc.cpp, one run/usage pair each.
#pragma once

#include <string>

#include "common.hpp"

namespace skc_tool {

int run_compile(Args args);
std::string compile_usage();

int run_uninstall(Args args);
std::string uninstall_usage();

int run_ops(Args args);
std::string ops_usage();

}  // namespace skc_tool
