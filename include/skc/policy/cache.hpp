// skc/policy/cache.hpp: the CachePolicy concept and its models: IndexCache, one entry per key
// beside the package it names, shared by every process that opens the folder (per-key locks, single
// flight on a miss, checksummed entries, LRU eviction, lazily merged statistics); and NoCache, which
// compiles every time (`disable_static_kernel_compile_cache`). open_cache opens a namespace of a
// cache folder. The key is in cache_key.hpp, the files in cache_format.hpp, the limits in
// cache_limits.hpp; docs/cache.md describes each step, its system calls and its faults.
// IndexCache's interface and state are in index_cache.hpp, its members' definitions in one file
// for each role: cache/lookup.hpp, cache/cover.hpp, cache/eviction.hpp, cache/stats_log.hpp,
// cache/remote_tier.hpp.
#pragma once

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "../cache_limits.hpp"
#include "../detail/names.hpp"
#include "../layout.hpp"
#include "index_cache.hpp"
#include "cache/cover.hpp"
#include "cache/eviction.hpp"
#include "cache/lookup.hpp"
#include "cache/remote_tier.hpp"
#include "cache/stats_log.hpp"
#include "lock.hpp"
#include "filesystem_storage.hpp"
#include "memory_storage.hpp"

namespace skc {

/// `disable_static_kernel_compile_cache`: every call compiles; nothing is read or written.
class NoCache {
public:
    using Guard = NoLock::Guard;
    std::optional<CacheHit<Guard>> lookup(const CacheKey&) {
        ++stats_.misses;
        return std::nullopt;
    }
    template <class Compile>
    CacheOutcome<Guard> get_or_compile(const CacheKey&, Compile&& compile) {
        CacheOutcome<Guard> out;
        out.result = CacheResult::disabled;
        out.compiled_package = compile();
        ++stats_.compiles;
        return out;
    }
    [[nodiscard]] CacheStats stats() const { return stats_; }

private:
    CacheStats stats_;
};

static_assert(CachePolicy<IndexCache<>> && CachePolicy<IndexCache<MemoryStorage, ProcessLock>> && CachePolicy<NoCache>);

/// The file-system cache of docs/spec.md section 4 for one toolchain version and device, in the cache folder
/// `root` (`<base>/static_kernel_compile_outputs/static_kernel_cache` by default, or any folder
/// shared by many bases: resolve_cache_dir):
///   <root>/CANN-<version>_<device>.json   a small manifest (format, where entries are)
///   <root>/CANN-<version>_<device>.lock   the namespace lock (statistics, pruning)
///   <root>/CANN-<version>_<device>/       entries/, packages/, keys/ (per-key locks), stats, verified/
/// The namespace `stem` (`CANN-<version>_<device>`, as Layout::cache_stem makes it) of cache folder `root`.
/// Opening is cheap: the cache folder is opened once (locks and objects are opened relative to it),
/// it and the namespace folder are judged (check_cache_trust), and created when missing (with the
/// manifest). The folders below are created when first written and judged before a package is
/// first stored or verified; the limits (`<root>/config`) are read when applied, and a publish
/// rewrites a manifest that is missing or differs. Read-only creates nothing.
inline std::unique_ptr<IndexCache<FilesystemStorage, FileLock>> open_cache_namespace(std::filesystem::path root,
                                                                                     const std::string& stem,
                                                                                     CacheConfig config = {}) {
    const bool read_only = config.mode == CacheMode::read_only;
    // A bad SKC_CACHE_MAX_SIZE is an error now, not after a compile.
    if (!read_only && config.limits.max_bytes == 0) (void)detail::env_cache_max_size();
    FileLock locks(std::move(root),
                   read_only ? LockAccess::read_only : LockAccess::read_write);  // a path is costly to copy
    const std::filesystem::path& dir = locks.dir();
    if (!read_only && locks.dir_fd() < 0) detail::make_cache_dir(dir);
    if (!check_cache_trust(locks.dir_fd(), dir, stem) && !read_only) {
        // A new namespace: its folder, and the manifest that names it a namespace (`skc cache`
        // lists it before anything is stored).
        detail::make_cache_dir(dir / stem);
        FilesystemStorage(dir).write(stem + ".json", detail::cache_manifest(stem));
    }
    FilesystemStorage storage(locks.dir_handle(), stem);
    auto cache = std::make_unique<IndexCache<FilesystemStorage, FileLock>>(
        std::move(storage), std::move(locks), std::move(config), CacheLockNames{stem + "/keys/", stem});
    cache->set_cache_folder(cache->locks().dir(), stem);
    return cache;
}

namespace detail {

/// A namespace name as read from a folder or a file: `CANN-` and more, no '/', NUL or space (stems
/// have '-' for spaces), not a manifest or lock file name.
inline bool valid_namespace(std::string_view ns) {
    return ns.size() > 5 && ns.size() <= Layout::max_cache_stem && ns.starts_with("CANN-") && is_plain_file_name(ns) &&
           ns.find(' ') == std::string_view::npos && !ns.ends_with(".json") && !ns.ends_with(".lock");
}

}  // namespace detail

/// The namespaces of cache folder `root` that hold entries (or only `only_ns`), in name order; none
/// when the folder does not exist.
inline std::vector<std::string> cache_namespaces(const std::filesystem::path& root, std::string_view only_ns = {}) {
    std::vector<std::string> stems;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (detail::valid_namespace(name) && (only_ns.empty() || name == only_ns) &&
            std::filesystem::is_directory(it->path() / "entries", ec))
            stems.push_back(name);
    }
    std::sort(stems.begin(), stems.end());
    return stems;
}

/// The namespace of toolchain `version` and `device` in cache folder `root`.
inline std::unique_ptr<IndexCache<FilesystemStorage, FileLock>> open_cache(std::filesystem::path root,
                                                                           std::string_view version,
                                                                           std::string_view device,
                                                                           CacheConfig config = {}) {
    return open_cache_namespace(std::move(root), Layout::cache_stem(version, device), std::move(config));
}

/// The same in the base's own cache folder (`layout.cache_dir()`).
inline std::unique_ptr<IndexCache<FilesystemStorage, FileLock>> open_cache(const Layout& layout,
                                                                           std::string_view version,
                                                                           std::string_view device,
                                                                           CacheConfig config = {}) {
    return open_cache(layout.cache_dir(), version, device, std::move(config));
}

}  // namespace skc
