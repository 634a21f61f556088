// skc/cache_limits.hpp: a cache namespace's size limits: what a caller sets, what the environment's
// SKC_CACHE_MAX_SIZE and the cache folder's `config` file (skc cache config) store, the default
// (5 GiB), and which one applies (docs/cache.md, "What each step does": eviction).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "detail/text.hpp"
#include "error.hpp"
#include "policy/filesystem_storage.hpp"

namespace skc {

/// Size limits; 0 means no limit. (A cache open_cache returns fills in a limit the caller leaves
/// at 0 from the environment, the cache folder or the default when it applies them:
/// effective_cache_limits.)
struct CacheLimits {
    std::uint64_t max_bytes = 0;
    std::uint64_t max_entries = 0;
};

/// The limits a cache folder applies when its user sets none: 5 GiB in each namespace, as ccache.
inline constexpr CacheLimits default_cache_limits{std::uint64_t{5} << 30, 0};

/// `10G`, `500M`, `1024K`, `65536`: bytes, with an optional suffix K, M, G or T (powers of 1024);
/// nullopt for anything else or a size that does not fit in 64 bits.
inline std::optional<std::uint64_t> parse_size(std::string_view s) {
    int shift = 0;
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
    std::uint64_t n = 0;
    if (!detail::parse_u64(shift == 0 ? s : s.substr(0, s.size() - 1), n) || n > (UINT64_MAX >> shift))
        return std::nullopt;
    return n << shift;
}

namespace detail {
inline constexpr std::string_view limits_file = "config";
}  // namespace detail

/// The limits stored in cache folder `root` (`skc cache config`), as they were written; nullopt in a
/// field that the file does not set (or when there is no file). 0 stored means no limit.
struct StoredLimits {
    std::optional<std::uint64_t> max_bytes;
    std::optional<std::uint64_t> max_entries;
};

inline StoredLimits read_cache_limits(const std::filesystem::path& root) {
    StoredLimits l;
    const std::optional<std::string> text = FilesystemStorage(root).read(detail::limits_file);
    if (!text) return l;
    std::size_t pos = 0;
    while (pos < text->size()) {
        std::size_t nl = text->find('\n', pos);
        if (nl == std::string::npos) nl = text->size();
        const std::string_view line(text->data() + pos, nl - pos);
        pos = nl + 1;
        const std::size_t sp = line.find(' ');
        if (sp == std::string_view::npos) continue;
        std::uint64_t v = 0;
        if (!detail::parse_u64(line.substr(sp + 1), v)) continue;
        if (line.substr(0, sp) == "max_size") l.max_bytes = v;
        else if (line.substr(0, sp) == "max_entries") l.max_entries = v;
    }
    return l;
}

/// Stores `l` in cache folder `root` for every process that opens it (fields not set are kept).
inline void write_cache_limits(const std::filesystem::path& root, const StoredLimits& l) {
    StoredLimits merged = read_cache_limits(root);
    if (l.max_bytes) merged.max_bytes = l.max_bytes;
    if (l.max_entries) merged.max_entries = l.max_entries;
    std::string text;
    if (merged.max_bytes) text += "max_size " + std::to_string(*merged.max_bytes) + "\n";
    if (merged.max_entries) text += "max_entries " + std::to_string(*merged.max_entries) + "\n";
    FilesystemStorage(root).write(detail::limits_file, text);
}

/// Where a limit in effect comes from, for messages and `skc cache stats`.
enum class LimitSource : unsigned char { caller, environment, cache_folder, default_value };

struct EffectiveLimits {
    CacheLimits limits;
    LimitSource size_from = LimitSource::default_value;
    LimitSource entries_from = LimitSource::default_value;
};

namespace detail {

/// The size limit in the environment's `SKC_CACHE_MAX_SIZE` (as --max-size takes it), nullopt when
/// it is not set; a bad value is an Error naming the variable.
inline std::optional<std::uint64_t> env_cache_max_size() {
    const char* env = std::getenv("SKC_CACHE_MAX_SIZE");
    if (env == nullptr || *env == '\0') return std::nullopt;
    const std::optional<std::uint64_t> n = parse_size(env);
    if (!n)
        throw Error(Errc::invalid_option,
                    "value " + quote(env, 64) +
                        " is not a size: expected bytes with an optional suffix K, M, G "
                        "or T, e.g. 10G (0: no limit)",
                    ErrorContext{{}, {}, "SKC_CACHE_MAX_SIZE"});
    return n;
}

}  // namespace detail

/// The limits a process applies to cache folder `root`: a field the caller sets (non-zero) wins;
/// else the size in the environment's `SKC_CACHE_MAX_SIZE` (as --max-size takes it; a bad value is
/// an Error naming the variable); else what the folder stores (`skc cache config`); else the
/// default (5 GiB, no entry limit).
inline EffectiveLimits effective_cache_limits(const CacheLimits& given, const std::filesystem::path& root) {
    EffectiveLimits e;
    const StoredLimits stored = read_cache_limits(root);
    if (given.max_bytes != 0) {
        e.limits.max_bytes = given.max_bytes, e.size_from = LimitSource::caller;
    } else if (const std::optional<std::uint64_t> env = detail::env_cache_max_size()) {
        e.limits.max_bytes = *env, e.size_from = LimitSource::environment;
    } else if (stored.max_bytes) {
        e.limits.max_bytes = *stored.max_bytes, e.size_from = LimitSource::cache_folder;
    } else {
        e.limits.max_bytes = default_cache_limits.max_bytes;
    }
    if (given.max_entries != 0) e.limits.max_entries = given.max_entries, e.entries_from = LimitSource::caller;
    else if (stored.max_entries) e.limits.max_entries = *stored.max_entries, e.entries_from = LimitSource::cache_folder;
    else e.limits.max_entries = default_cache_limits.max_entries;
    return e;
}

}  // namespace skc
