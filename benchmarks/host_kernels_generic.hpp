// benchmarks/host_kernels_generic.hpp: the generic host kernels as host_kernels_bench calls them.
#pragma once

#include "host/plan.hpp"

namespace skc_bench {

/// skc_host::run_plan, compiled in host_kernels_generic.cpp with the static kernels' flags.
void run_plan(const skc_host::Plan& plan, const float* const* inputs, float* const* outputs);

}  // namespace skc_bench
