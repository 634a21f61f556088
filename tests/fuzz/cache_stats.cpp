// Fuzzes the cache's statistics reader, CacheStats::decode (a namespace's `stats` object), and the
// cache folder's limits file reader, read_cache_limits (`<cache folder>/config`, written by
// `skc cache config`), both in include/skc/policy/cache.hpp, with parse_size (the sizes that
// --max-size and SKC_CACHE_MAX_SIZE take). The input is used as all three: as a stats text, as the
// limits file, and each of its lines as a size. Properties:
//   - decoding never fails (an unreadable line counts as zero) and, written with encode() and read
//     again, gives the same statistics; lines later in a text win over earlier ones;
//   - adding statistics saturates at the limits of each counter instead of wrapping;
//   - the limits read from the file, written back in its format and read again, are the same, and
//     they are the limits a cache applies when neither the caller nor the environment sets one;
//   - parse_size agrees with a plain reference implementation, and accepts its own output.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <skc/policy/cache.hpp>

#include "fuzz_support.hpp"

namespace {

template <class T>
T saturated_sum(T a, T b) {
    T r{};
    if (!__builtin_add_overflow(a, b, &r)) return r;
    return b > 0 ? std::numeric_limits<T>::max() : std::numeric_limits<T>::min();
}

void check_stats(std::string_view t) {
    const skc::CacheStats s = skc::CacheStats::decode(t);
    const std::string text = s.encode();
    FUZZ_CHECK(skc::CacheStats::decode(text) == s);
    FUZZ_CHECK(skc::CacheStats::decode(text).encode() == text);

    // Later lines win: a whole written text after the input replaces every counter.
    skc::CacheStats later;
    later.hits = 1, later.misses = 2, later.corrupt = 3, later.evictions = 4, later.compiles = 5, later.waits = 6;
    later.lock_wait_ns = -7, later.compile_time_saved_ns = 8;
    FUZZ_CHECK(skc::CacheStats::decode(std::string(t) + "\n" + later.encode()) == later);
    // ... and the input after a written text replaces what it sets.
    FUZZ_CHECK(skc::CacheStats::decode(skc::CacheStats{}.encode() + std::string(t)) == s);

    skc::CacheStats sum = s;
    sum += later;
    sum += s;
    const auto both = [](auto a, auto b) { return saturated_sum(saturated_sum(a, b), a); };
    FUZZ_CHECK(sum.hits == both(s.hits, later.hits));
    FUZZ_CHECK(sum.misses == both(s.misses, later.misses));
    FUZZ_CHECK(sum.corrupt == both(s.corrupt, later.corrupt));
    FUZZ_CHECK(sum.evictions == both(s.evictions, later.evictions));
    FUZZ_CHECK(sum.compiles == both(s.compiles, later.compiles));
    FUZZ_CHECK(sum.waits == both(s.waits, later.waits));
    FUZZ_CHECK(sum.lock_wait_ns == both(s.lock_wait_ns, later.lock_wait_ns));
    FUZZ_CHECK(sum.compile_time_saved_ns == both(s.compile_time_saved_ns, later.compile_time_saved_ns));
}

/// The limits file's text as write_cache_limits writes it (that function also syncs the file to
/// disk, which is not needed here).
std::string limits_text(const skc::StoredLimits& l) {
    std::string text;
    if (l.max_bytes) text += "max_size " + std::to_string(*l.max_bytes) + "\n";
    if (l.max_entries) text += "max_entries " + std::to_string(*l.max_entries) + "\n";
    return text;
}

void check_limits(std::string_view t) {
    static const std::filesystem::path root = [] {
        ::unsetenv("SKC_CACHE_MAX_SIZE");  // the limits of the folder, not of the environment
        const std::filesystem::path p = fuzz::scratch() / "cache";
        fuzz::fresh_dir(p);
        return p;
    }();
    const std::filesystem::path file = root / "config";
    fuzz::write_file(file, t);
    const skc::StoredLimits l = skc::read_cache_limits(root);

    const skc::EffectiveLimits e = skc::effective_cache_limits(skc::CacheLimits{}, root);
    if (l.max_bytes) FUZZ_CHECK(e.limits.max_bytes == *l.max_bytes && e.size_from == skc::LimitSource::cache_folder);
    else
        FUZZ_CHECK(e.limits.max_bytes == skc::default_cache_limits.max_bytes &&
                   e.size_from == skc::LimitSource::default_value);
    if (l.max_entries)
        FUZZ_CHECK(e.limits.max_entries == *l.max_entries && e.entries_from == skc::LimitSource::cache_folder);
    else
        FUZZ_CHECK(e.limits.max_entries == skc::default_cache_limits.max_entries &&
                   e.entries_from == skc::LimitSource::default_value);
    const skc::EffectiveLimits given = skc::effective_cache_limits(skc::CacheLimits{5, 6}, root);
    FUZZ_CHECK(given.limits.max_bytes == 5 && given.limits.max_entries == 6);

    fuzz::write_file(file, limits_text(l));
    const skc::StoredLimits back = skc::read_cache_limits(root);
    FUZZ_CHECK(back.max_bytes == l.max_bytes && back.max_entries == l.max_entries);
}

/// parse_size as documented: 1 to 20 decimal digits, an optional K, M, G or T (either case) for
/// powers of 1024, and a result that fits in 64 bits.
std::optional<std::uint64_t> reference_size(std::string_view s) {
    unsigned shift = 0;
    if (!s.empty()) {
        switch (s.back()) {
        case 'K':
        case 'k': shift = 10; break;
        case 'M':
        case 'm': shift = 20; break;
        case 'G':
        case 'g': shift = 30; break;
        case 'T':
        case 't': shift = 40; break;
        default: break;
        }
    }
    if (shift != 0) s.remove_suffix(1);
    if (s.empty() || s.size() > 20) return std::nullopt;
    unsigned __int128 v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return std::nullopt;
        v = v * 10 + static_cast<unsigned>(c - '0');
    }
    v <<= shift;
    if (v > std::numeric_limits<std::uint64_t>::max()) return std::nullopt;
    return static_cast<std::uint64_t>(v);
}

void check_size(std::string_view s) {
    const std::optional<std::uint64_t> v = skc::parse_size(s);
    FUZZ_CHECK(v == reference_size(s));
    if (!v) return;
    FUZZ_CHECK(skc::parse_size(std::to_string(*v)) == v);
    if (*v % 1024 == 0) FUZZ_CHECK(skc::parse_size(std::to_string(*v / 1024) + "K") == v);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view t = fuzz::as_text(data, size);
    check_stats(t);
    check_limits(t);
    check_size(t);
    for (std::size_t pos = 0; pos < t.size();) {
        std::size_t nl = t.find('\n', pos);
        if (nl == std::string_view::npos) nl = t.size();
        const std::string_view line = t.substr(pos, nl - pos);
        check_size(line);
        if (const std::size_t sp = line.find(' '); sp != std::string_view::npos) check_size(line.substr(sp + 1));
        pos = nl + 1;
    }
    return 0;
}
