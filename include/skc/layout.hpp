// skc/layout.hpp: every path of docs/spec.md section 4, the base directory rules of section 3, and the
// checks that make a configured path safe to write below.
//
//   <base>/static_kernel_compile_outputs/
//     static_kernel_cache/CANN-<version>_<device>.json|.lock
//     ts<YYYYmmddHHMMSSffffff>_pid<pid>_outputs/
//       <pid>/ <pid>_debug/ <pid>_opcompile/ <pid>_opcompile_selected/ <pid>_opcompile_blacklist/
//       <pid>_opcompile_gathered/ static_kernel_<datetime>.run
//
// Path safety: a configured path with a NUL byte, a `..` component, or an existing component that
// is a symbolic link is rejected (a link could redirect every file skc writes). The base must be
// readable and writable by the calling user; otherwise the error names the path and the missing
// permission.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "error.hpp"
#include "options.hpp"

namespace skc {

/// `YYYYmmddHHMMSSffffff` in local time (microseconds), as the original names its folders.
inline std::string timestamp(std::chrono::system_clock::time_point t) {
    const std::int64_t us_total = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
    std::int64_t secs = us_total / 1000000;
    std::int64_t micros = us_total % 1000000;
    if (micros < 0) {  // before the epoch: floor, not truncation
        micros += 1000000;
        --secs;
    }
    const auto tt = static_cast<std::time_t>(secs);
    std::tm tm{};
    ::localtime_r(&tt, &tm);
    char buf[32];
    const std::size_t n = std::strftime(buf, sizeof buf, "%Y%m%d%H%M%S", &tm);
    std::string out(buf, n);
    const std::string us = std::to_string(micros);
    out.append(6 - us.size(), '0');
    out += us;
    return out;
}

/// Checks that `p` contains no NUL byte and no `..` component, and that no existing component of
/// it (made absolute against the working directory) is a symbolic link. Returns the absolute path.
inline std::filesystem::path check_path_safety(const std::filesystem::path& p, std::string_view option = {}) {
    const std::string& s = p.native();
    const ErrorContext where{
        std::string(s.data(), s.find('\0') == std::string::npos ? s.size() : s.find('\0')), {}, std::string(option)};
    if (s.empty()) throw Error(Errc::unsafe_path, "the path is empty", where);
    if (s.find('\0') != std::string::npos) throw Error(Errc::unsafe_path, "the path contains a NUL byte", where);
    for (const auto& part : p)
        if (part == "..")
            throw Error(Errc::unsafe_path, "the path contains a '..' component; give a path without one", where);
    std::filesystem::path abs = p.is_absolute() ? p : std::filesystem::current_path() / p;
    std::filesystem::path prefix;
    for (const auto& part : abs) {
        prefix /= part;
        if (part == "/" || part == "." || part.empty()) continue;
        struct stat st {};
        if (::lstat(prefix.c_str(), &st) != 0) {
            if (errno == ENOENT) break;  // the rest does not exist yet: nothing to follow
            throw Error(Errc::io_error, std::string("cannot inspect path component: ") + std::strerror(errno),
                        ErrorContext{prefix.string(), {}, std::string(option)});
        }
        if (S_ISLNK(st.st_mode))
            throw Error(Errc::unsafe_path,
                        "component '" + prefix.string() + "' is a symbolic link; give the real path instead", where);
    }
    return abs.lexically_normal();
}

enum class Access : unsigned char { read = 1, write = 2, read_write = 3 };

/// Checks that the calling user may read and/or write (and enter) directory `p`. The error names the
/// path, the missing permission and, when given, the option the path came from.
inline void check_access(const std::filesystem::path& p, Access need = Access::read_write,
                         std::string_view option = {}) {
    const ErrorContext where{p.string(), {}, std::string(option)};
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0)
        throw Error(errno == EACCES ? Errc::permission_denied : Errc::io_error,
                    std::string("cannot access: ") + std::strerror(errno), where);
    if (!S_ISDIR(st.st_mode)) throw Error(Errc::invalid_argument, "not a directory", where);
    const auto has = [&](int mode) { return ::access(p.c_str(), mode) == 0; };
    if ((static_cast<int>(need) & 1) && !has(R_OK))
        throw Error(Errc::permission_denied, "not readable by this user (read permission missing)", where);
    if ((static_cast<int>(need) & 2) && !has(W_OK))
        throw Error(Errc::permission_denied,
                    errno == EROFS ? std::string("not writable: ") + std::strerror(EROFS)
                                   : std::string("not writable by this user (write permission missing)"),
                    where);
    if (!has(X_OK))
        throw Error(Errc::permission_denied, "not searchable by this user (execute permission missing)", where);
}

/// docs/spec.md section 3: an explicit base_dir wins; else the model compile cache's directory when it is
/// on and force_eager is off; else `cwd`. The result is checked for safety and access.
inline std::filesystem::path resolve_base(const Options& o,
                                          const std::filesystem::path& cwd = std::filesystem::current_path()) {
    std::filesystem::path base;
    std::string_view option;
    if (!o.base_dir.empty()) {
        base = o.base_dir;
        option = "base_dir";
    } else if (o.use_model_cache_dir()) {
        base = o.model_compile_cache_dir;
        option = "model_compile_cache_dir";
    } else {
        base = cwd;
    }
    base = check_path_safety(base, option);
    check_access(base, Access::read_write, option);
    return base;
}

namespace detail {
inline void make_cache_dir(const std::filesystem::path& p);
}  // namespace detail

/// The cache's folder: the option `cache_dir` when set, else the environment's `SKC_CACHE_DIR` when
/// set, else `default_dir` (`<base>/static_kernel_compile_outputs/static_kernel_cache`, the
/// original's place). Any number of bases, ranks, jobs and users may name one folder: they share
/// its packages. The folder is created when missing; a path with a NUL byte, a `..` component or a
/// symbolic-link component is refused, naming the option or variable it came from.
/// With `mode` read-only the folder is neither created nor required to be writable.
inline std::filesystem::path resolve_cache_dir(const Options& o, const std::filesystem::path& default_dir,
                                               CacheMode mode = CacheMode::read_write) {
    std::filesystem::path dir;
    std::string_view from;
    if (!o.cache_dir.empty()) {
        dir = o.cache_dir;
        from = "cache_dir";
    } else if (const char* env = std::getenv("SKC_CACHE_DIR"); env != nullptr && *env != '\0') {
        dir = env;
        from = "SKC_CACHE_DIR";
    } else {
        return default_dir;
    }
    dir = check_path_safety(std::filesystem::absolute(dir), from);
    if (mode == CacheMode::read_only) {
        // A folder that is not there is an empty cache: every lookup misses.
        if (std::filesystem::exists(dir)) check_access(dir, Access::read, from);
        return dir;
    }
    try {
        detail::make_cache_dir(dir);
    } catch (const Error& e) {
        throw Error(e.code(), "cannot create the cache folder: " + e.message(),
                    ErrorContext{dir.string(), {}, std::string(from)});
    }
    check_access(dir, Access::read_write, from);
    return dir;
}

namespace detail {

/// Spaces become '-'; '/', NUL and a leading '.' are refused (they would leave the cache folder).
inline std::string cache_name_part(std::string_view s, std::string_view what) {
    if (s.empty() || s.front() == '.' || s.find('/') != std::string_view::npos ||
        s.find('\0') != std::string_view::npos)
        throw Error(Errc::invalid_name, std::string(what) + " \"" + std::string(s.substr(0, s.find('\0'))) +
                                            "\" cannot be used in a file name: it must be non-empty and contain no "
                                            "'/', no NUL byte and no leading '.'");
    std::string out(s);
    for (char& c : out)
        if (c == ' ') c = '-';
    return out;
}

/// Creates `p` and its missing parents, refusing to create or use anything through a symbolic link.
inline void make_dir(const std::filesystem::path& p) {
    check_path_safety(p);
    std::error_code ec;
    std::filesystem::create_directories(p, ec);
    if (ec) throw Error(Errc::io_error, "cannot create directory: " + ec.message(), ErrorContext{p.string(), {}, {}});
}

/// Creates cache folder `p` (and missing parents) as a folder only its owner may write, mode 0755;
/// or 02775 when its parent is setgid (a group-shared cache, docs/cache.md). An existing folder is
/// left as it is (check_cache_trust judges it).
inline void make_cache_dir(const std::filesystem::path& p) {
    std::error_code ec;
    if (std::filesystem::is_directory(std::filesystem::symlink_status(p, ec))) return;
    make_dir(p);
    struct stat parent {};
    const bool shared = ::stat(p.parent_path().c_str(), &parent) == 0 && (parent.st_mode & S_ISGID) != 0;
    if (::chmod(p.c_str(), shared ? 02775 : 0755) != 0)
        throw Error(Errc::io_error, std::string("cannot set the folder's mode: ") + std::strerror(errno),
                    ErrorContext{p.string(), {}, {}});
}

/// Refuses cache folder `root`/`sub` (`sub` empty: the cache folder itself) with status `st` when
/// every user may write it, or its group without it being set up as group-shared (`group_matters`).
inline void judge_cache_folder(const struct stat& st, const std::filesystem::path& root, std::string_view sub,
                               bool group_matters) {
    if (!S_ISDIR(st.st_mode)) return;
    const bool world = (st.st_mode & S_IWOTH) != 0;
    if (!world && !(group_matters && (st.st_mode & S_IWGRP) != 0 && (st.st_mode & S_ISGID) == 0)) return;
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    const std::string dir = sub.empty() ? root.string() : (root / std::string(sub)).string();
    if (world)
        throw Error(Errc::unsafe_path,
                    std::string("the cache folder is writable by every user (mode ") + mode +
                        "); its packages are executed when installed, so it is not used: chmod o-w it (and see "
                        "docs/cache.md, \"Sharing a cache\")",
                    ErrorContext{dir, {}, {}});
    throw Error(Errc::unsafe_path,
                std::string("the cache folder is writable by its group but not set up as group-shared (mode ") + mode +
                    "); its packages are executed when installed: chmod g-w it, or share it with the group on "
                    "purpose: chmod g+s it and use umask 002 (docs/cache.md, \"Sharing a cache\")",
                ErrorContext{dir, {}, {}});
}

}  // namespace detail

/// Packages in a cache are executed when installed, so a cache that other users may write is
/// refused: the cache folder `root` and its namespace folder `root/stem` must not be writable by
/// everyone, nor by their group unless the cache is group-shared (the folder is setgid, as ccache
/// documents: `chmod g+s`, and `umask 002` for its users). Folders that do not exist yet are not
/// judged. They are judged through the cache folder's descriptor `root_fd` (O_PATH, -1 when it is
/// not there), which the cache opened anyway, so that no path is walked twice; `root` names it in
/// messages. Returns whether the namespace folder exists.
inline bool check_cache_trust(int root_fd, const std::filesystem::path& root, const std::string& stem) {
    struct stat st {};
    if (root_fd < 0) return false;
    if (::fstat(root_fd, &st) == 0) detail::judge_cache_folder(st, root, {}, true);
    if (::fstatat(root_fd, stem.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) return false;
    detail::judge_cache_folder(st, root, stem, true);
    return true;
}

/// The same for the folders below namespace `stem` (entries/, packages/, oplists/, composites/, keys/): they
/// must not be writable by everyone. The cache judges them before it first stores or uses a package
/// (IndexCache::verify, publish), not on every open.
inline void check_cache_subfolders_trust(int root_fd, const std::filesystem::path& root, const std::string& stem) {
    if (root_fd < 0) return;
    struct stat st {};
    std::string sub = stem + "/";
    for (const char* name : {"entries", "packages", "oplists", "composites", "keys"}) {
        sub.resize(stem.size() + 1);
        sub += name;
        if (::fstatat(root_fd, sub.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
            detail::judge_cache_folder(st, root, sub, false);
    }
}

/// The folders and files of one compile attempt: `ts<timestamp>_pid<pid>_outputs/`.
class RunLayout {
public:
    RunLayout(std::filesystem::path dir, long pid) : dir_(std::move(dir)), pid_(std::to_string(pid)) {}

    [[nodiscard]] const std::filesystem::path& dir() const noexcept { return dir_; }
    [[nodiscard]] std::filesystem::path targets() const { return dir_ / pid_; }
    [[nodiscard]] std::filesystem::path debug() const { return dir_ / (pid_ + "_debug"); }
    [[nodiscard]] std::filesystem::path opcompile() const { return dir_ / (pid_ + "_opcompile"); }
    [[nodiscard]] std::filesystem::path selected() const { return dir_ / (pid_ + "_opcompile_selected"); }
    [[nodiscard]] std::filesystem::path blacklisted() const { return dir_ / (pid_ + "_opcompile_blacklist"); }
    [[nodiscard]] std::filesystem::path gathered() const { return dir_ / (pid_ + "_opcompile_gathered"); }
    /// `static_kernel_<datetime>.run` in the run folder.
    [[nodiscard]] std::filesystem::path package(std::chrono::system_clock::time_point t) const {
        return dir_ / ("static_kernel_" + timestamp(t) + ".run");
    }

private:
    std::filesystem::path dir_;
    std::string pid_;
};

/// Every path below `<base>/static_kernel_compile_outputs`.
class Layout {
public:
    /// `base` must already be resolved (see resolve_base()).
    explicit Layout(std::filesystem::path base) : base_(std::move(base)) {}

    [[nodiscard]] const std::filesystem::path& base() const noexcept { return base_; }
    [[nodiscard]] std::filesystem::path outputs() const { return base_ / "static_kernel_compile_outputs"; }
    [[nodiscard]] std::filesystem::path cache_dir() const {
        return base_ / "static_kernel_compile_outputs/static_kernel_cache";
    }
    /// `CANN-<version>_<device>` with spaces turned into '-'.
    /// The longest cache namespace name (the stem): what the cache writes beside and below it
    /// (`<stem>.json`, temporaries `.tmp.<pid>.<n>.<name>`) must stay under 255 bytes.
    static constexpr std::size_t max_cache_stem = 200;

    [[nodiscard]] static std::string cache_stem(std::string_view toolchain_version, std::string_view device) {
        std::string stem = "CANN-" + detail::cache_name_part(toolchain_version, "toolchain version") + "_" +
                           detail::cache_name_part(device, "device name");
        if (stem.size() > max_cache_stem)
            throw Error(Errc::invalid_name,
                        "the toolchain version and the device name are too long together: the cache "
                        "namespace would be " +
                            std::to_string(stem.size()) + " bytes, at most " + std::to_string(max_cache_stem));
        return stem;
    }
    [[nodiscard]] std::filesystem::path cache_index(std::string_view version, std::string_view device) const {
        return cache_dir() / (cache_stem(version, device) + ".json");
    }
    [[nodiscard]] std::filesystem::path cache_lock(std::string_view version, std::string_view device) const {
        return cache_dir() / (cache_stem(version, device) + ".lock");
    }

    /// The run folder for a compile attempt started at `t` by process `pid` (not created).
    [[nodiscard]] RunLayout run(std::chrono::system_clock::time_point t, long pid) const {
        return RunLayout(outputs() / ("ts" + timestamp(t) + "_pid" + std::to_string(pid) + "_outputs"), pid);
    }

    /// Creates a fresh run folder for this process now; its parents are created as needed.
    [[nodiscard]] RunLayout create_run() const {
        detail::make_dir(outputs());
        for (;;) {
            RunLayout r = run(std::chrono::system_clock::now(), static_cast<long>(::getpid()));
            if (::mkdir(r.dir().c_str(), 0755) == 0) return r;
            if (errno != EEXIST)
                throw Error(Errc::io_error, std::string("cannot create run folder: ") + std::strerror(errno),
                            ErrorContext{r.dir().string(), {}, {}});
            // Same microsecond in the same process: take the next one.
        }
    }

private:
    std::filesystem::path base_;
};

}  // namespace skc
