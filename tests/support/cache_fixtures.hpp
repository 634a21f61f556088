// The keys and packages that the multi-process cache test and its worker program agree on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <skc/op_set.hpp>
#include <skc/policy/cache.hpp>

namespace skc_test {

/// Key I: a set of (I % 3) + 1 small records whose shapes depend on I.
inline skc::CacheKey make_key(std::size_t i) {
    skc::OpSet ops;
    for (std::size_t j = 0; j <= i % 3; ++j) {
        skc::OpRecord r;
        r.op_type = "Add";
        skc::TensorDesc t;
        t.dtype = "float16";
        t.shape = skc::RuntimeShape{1, static_cast<std::int64_t>(i) + 1, static_cast<std::int64_t>(j) + 1};
        t.format = "ND";
        r.inputs.emplace_back(t);
        r.outputs.emplace_back(t);
        ops.insert(std::move(r));
    }
    return skc::make_cache_key(ops, skc::KeyInputs{"8.0", "dev", false, {}});
}

/// The package a compile of key `hex` produces: 2 to 6 KB of lines naming the key.
inline std::string package_content(const std::string& hex) {
    const std::size_t size = 2048 + std::stoul(hex.substr(0, 4), nullptr, 16) % 4096;
    std::string out;
    for (std::size_t line = 0; out.size() < size; ++line)
        out += "skc test package " + hex + " line " + std::to_string(line) + "\n";
    out.resize(size);
    return out;
}

}  // namespace skc_test
