// examples/host/target.hpp: the instruction set the host kernels are built for.
//
// host_op_compiler builds every kernel for one target: by default the CPU it runs on
// (`-march=native`), or the x86-64 level named by the environment variable SKC_HOST_ISA
// (`x86-64`, `x86-64-v2`, `x86-64-v3`, `x86-64-v4`: a package for a fleet of older CPUs, or a
// smaller instruction set than the host's). The target decides:
//   - the compiler flags (kernel_flags());
//   - the vector width of the generated code (codegen.hpp): 16 floats where AVX-512F is there, 8
//     with AVX2 and FMA, 4 otherwise;
//   - a part of the toolchain version (toolchain.hpp), so a package built for one instruction set
//     is never served from the cache to a CPU with another: a package with AVX-512 instructions
//     would die of SIGILL on a CPU without them.
// The id of a native target names its vector class and a digest of every CPU feature the
// compiler may use under -march=native, so two CPUs that differ in any of them get different
// packages; the id of a named level is the level.
#pragma once

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <skc/detail/hash.hpp>

namespace skc_host {

struct Target {
    int vector_floats = 4;  // floats in one vector register of the generated code: 4, 8 or 16
    std::string march;      // the compiler's -march value: "native" or an x86-64 level
    std::string id;         // what goes into the toolchain version, e.g. "avx512-1f2e3d4c" or "x86-64-v3"
};

namespace detail {

/// The CPU features a compiler may use under -march=native that change which instructions run
/// (x86-64; GCC and Clang know them all by these names).
inline std::vector<std::string_view> cpu_features() {
    std::vector<std::string_view> have;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
#define SKC_HOST_FEATURE(name) \
    if (__builtin_cpu_supports(name)) have.emplace_back(name);
    SKC_HOST_FEATURE("sse3")
    SKC_HOST_FEATURE("ssse3")
    SKC_HOST_FEATURE("sse4.1")
    SKC_HOST_FEATURE("sse4.2")
    SKC_HOST_FEATURE("popcnt")
    SKC_HOST_FEATURE("avx")
    SKC_HOST_FEATURE("avx2")
    SKC_HOST_FEATURE("fma")
    SKC_HOST_FEATURE("bmi")
    SKC_HOST_FEATURE("bmi2")
    SKC_HOST_FEATURE("avx512f")
    SKC_HOST_FEATURE("avx512dq")
    SKC_HOST_FEATURE("avx512cd")
    SKC_HOST_FEATURE("avx512bw")
    SKC_HOST_FEATURE("avx512vl")
    SKC_HOST_FEATURE("avx512ifma")
    SKC_HOST_FEATURE("avx512vbmi")
    SKC_HOST_FEATURE("avx512vbmi2")
    SKC_HOST_FEATURE("avx512vnni")
    SKC_HOST_FEATURE("avx512bitalg")
    SKC_HOST_FEATURE("avx512vpopcntdq")
    SKC_HOST_FEATURE("avx512bf16")
#undef SKC_HOST_FEATURE
#endif
    return have;
}

inline bool has(const std::vector<std::string_view>& v, std::string_view f) {
    for (std::string_view x : v)
        if (x == f) return true;
    return false;
}

}  // namespace detail

/// The target named by `isa`: "" or "native" for this CPU, else an x86-64 level. Throws
/// std::invalid_argument for anything else.
inline Target target_for(std::string_view isa) {
    Target t;
    if (isa.empty() || isa == "native") {
        const std::vector<std::string_view> f = detail::cpu_features();
        t.march = "native";
        t.vector_floats = detail::has(f, "avx512f") ? 16 : detail::has(f, "avx2") && detail::has(f, "fma") ? 8 : 4;
        std::string all;
        for (std::string_view x : f) all.append(x).push_back(' ');
#if defined(__x86_64__)
        all += "x86_64";
#elif defined(__aarch64__)
        all += "aarch64";
#else
        all += "other";
#endif
        const char* cls = t.vector_floats == 16 ? "avx512-" : t.vector_floats == 8 ? "avx2-" : "base-";
        t.id = cls + skc::detail::hash_bytes(all).hex().substr(0, 8);
        return t;
    }
    struct Level {
        std::string_view name;
        int floats;
    };
    for (const Level& l : {Level{"x86-64", 4}, Level{"x86-64-v2", 4}, Level{"x86-64-v3", 8}, Level{"x86-64-v4", 16}})
        if (isa == l.name) {
            t.vector_floats = l.floats;
            t.march = t.id = std::string(l.name);
            return t;
        }
    throw std::invalid_argument("SKC_HOST_ISA=\"" + std::string(isa) +
                                "\": expected native, x86-64, x86-64-v2, x86-64-v3 or x86-64-v4");
}

/// The target of this process: SKC_HOST_ISA, or this CPU when it is unset or empty.
inline Target host_target() {
    const char* isa = std::getenv("SKC_HOST_ISA");
    return target_for(isa == nullptr ? std::string_view() : std::string_view(isa));
}

/// The flags every kernel translation unit is compiled with (after the compiler's name and before
/// -c / -o): optimisation `opt_level`, the target's instruction set, fused multiply-adds wherever
/// the source multiplies and adds (no -ffast-math: no reassociation the source does not write, and
/// NaN and infinities keep their meaning).
inline std::vector<std::string> kernel_flags(const Target& t, int opt_level = 3) {
    std::vector<std::string> f{"-std=c++17", "-O" + std::to_string(opt_level), "-fPIC", "-ffp-contract=fast"};
#if defined(__x86_64__) || defined(__i386__)
    f.push_back("-march=" + t.march);
#else
    if (t.march == "native") f.push_back("-mcpu=native");
#endif
    return f;
}

}  // namespace skc_host
