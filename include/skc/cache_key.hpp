// skc/cache_key.hpp: the cache key. make_cache_key digests named components: the set digest of the
// ops to compile, their count, the toolchain version, the device, the deterministic flag, every
// compiler option and the compiler's fingerprint, each kept by name so that a miss can be explained
// component by component (docs/cache.md, "The key").
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "detail/canon.hpp"
#include "detail/hash.hpp"
#include "op_set.hpp"
#include "options.hpp"

namespace skc {

/// An op of a key: its content digest and the op info file it came from.
struct KeyOp {
    Digest digest;
    std::string name;
};

/// A cache key: the digest and the named components it was computed from.
struct CacheKey {
    Digest digest;
    std::vector<std::pair<std::string, std::string>> components;
    /// The ops with their op info file names, when the caller knows them: not part of the digest;
    /// stored beside the entry (`oplists/<key>`) so that a later miss can name the ops that changed.
    std::vector<KeyOp> ops;

    [[nodiscard]] std::string hex() const { return digest.hex(); }
    /// The components, one per line: `name=value`.
    [[nodiscard]] std::string describe() const {
        std::string out;
        for (const auto& [name, value] : components) out += name + "=" + value + "\n";
        return out;
    }
};

/// Everything besides the op set that changes the kernels a compile produces.
struct KeyInputs {
    std::string toolchain_version;
    std::string device;
    bool deterministic = false;
    std::vector<std::string> compiler_options;
    std::string compiler{};  // the compiler's fingerprint (compiler_check.hpp); empty: not in the key
};

/// The key of compiling the ops with content digests `ops` (distinct, in any order) with `in`:
/// independent of the order of the ops and their file names.
inline CacheKey make_cache_key(const std::vector<Digest>& ops, const KeyInputs& in) {
    CacheKey k;
    k.components = {
        {"format", "skc-cache-key/1"},
        {"ops", OpSet::combine_digests(ops).hex()},
        {"op_count", std::to_string(ops.size())},
        {"toolchain_version", in.toolchain_version},
        {"device", in.device},
        {"deterministic", in.deterministic ? "true" : "false"},
    };
    for (std::size_t i = 0; i < in.compiler_options.size(); ++i)
        k.components.emplace_back("compiler_option[" + std::to_string(i) + "]", in.compiler_options[i]);
    if (!in.compiler.empty()) k.components.emplace_back("compiler", in.compiler);
    detail::Hasher h;
    detail::canon::begin_array(h, k.components.size());
    for (const auto& [name, value] : k.components) {
        detail::canon::put_string(h, name);
        detail::canon::put_string(h, value);
    }
    k.digest = h.digest();
    return k;
}

/// The key of compiling `ops` with `in`.
inline CacheKey make_cache_key(const OpSet& ops, const KeyInputs& in) {
    std::vector<Digest> ds;
    ds.reserve(ops.size());
    for (const OpSet::Entry& e : ops) ds.push_back(e.digest);
    return make_cache_key(ds, in);
}

/// The key inputs an Options object carries (toolchain version and device come from the host).
inline KeyInputs key_inputs(const Options& o, std::string toolchain_version, std::string device,
                            std::string compiler_fingerprint = {}) {
    return KeyInputs{std::move(toolchain_version), std::move(device), o.deterministic, o.compiler_options,
                     std::move(compiler_fingerprint)};
}

}  // namespace skc
