// benchmarks/host_kernels_generic.cpp: the generic host kernels, compiled for host_kernels_bench
// with the flags of the generated static kernels (-O3; see benchmarks/meson.build).
//
// Only run_plan is here: the analysis (plan.hpp's string work) stays in the benchmark's own file,
// compiled with the project's flags, so that nothing but the kernels is built with -O3.
#include "host_kernels_generic.hpp"

#include "host/dispatch.hpp"

namespace skc_bench {

void run_plan(const skc_host::Plan& plan, const float* const* inputs, float* const* outputs) {
    skc_host::run_plan(plan, inputs, outputs);
}

}  // namespace skc_bench
