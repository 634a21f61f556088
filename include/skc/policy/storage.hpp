// skc/policy/storage.hpp: the Storage concept and its models: FilesystemStorage, MemoryStorage.
//
// A storage keeps named objects (names are relative paths such as `entries/<key>` or
// `packages/<key>.run`) for the cache. What the cache needs from it:
//   read(name)            the whole object, or nullopt when absent (small objects: entries, stats)
//   write(name, bytes)    publish atomically: a reader sees the old object or the new, never a part
//   import_file(name, f)  publish the content of file f atomically (packages), returns its info
//   remove(name)          true when something was removed
//   stat(name)            size, a cheap identity and the modification time, without reading it
//   touch(name)           set the modification time to now (the cache's least-recently-used clock)
//   list(folder)          the names directly in a folder
//   read_chunks(name, fn) stream the content through fn (checksums of large packages)
// A storage may also offer local_path(name), the object's file, for tools that need a real file
// (an installer runs the package); StorageTraits supplies "none" for storages without it.
//
// FilesystemStorage writes to a temporary file in the target folder, fsyncs it, renames it into
// place and fsyncs the folder, and never follows a symlink (a package replaced by a symlink is seen
// as not a regular file, and refused by the cache).
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <csignal>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../detail/dir_handle.hpp"
#include "../error.hpp"

namespace skc {

/// What stat() tells about an object without reading it.
struct ObjectInfo {
    std::uint64_t size = 0;
    std::uint64_t identity = 0;  // changes whenever the object is replaced or modified in place
    std::int64_t mtime_ns = 0;   // modification time (the cache's last-use time)
    bool regular = true;         // false: a symlink, a folder or another non-file where an object was
    friend bool operator==(const ObjectInfo&, const ObjectInfo&) = default;
};

using ChunkFn = std::function<void(std::string_view)>;

template <class S>
concept Storage = requires(S& s, const S& cs, std::string_view name, std::string_view data,
                           const std::filesystem::path& file, const ChunkFn& fn) {
    { cs.read(name) } -> std::same_as<std::optional<std::string>>;
    { s.write(name, data) } -> std::same_as<void>;
    { s.import_file(name, file) } -> std::same_as<ObjectInfo>;
    { s.remove(name) } -> std::same_as<bool>;
    { cs.stat(name) } -> std::same_as<std::optional<ObjectInfo>>;
    { s.touch(name) } -> std::same_as<void>;
    { cs.list(name) } -> std::same_as<std::vector<std::string>>;
    { cs.read_chunks(name, fn) } -> std::same_as<bool>;
};

/// Fills in the optional members of a Storage.
template <class S>
struct StorageTraits {
    /// Removes what writers killed half-way left behind (temporary objects); returns how many.
    /// Storages that publish without temporaries have nothing to collect.
    static std::uint64_t collect_garbage(S& s) {
        if constexpr (requires { { s.collect_garbage() } -> std::convertible_to<std::uint64_t>; })
            return s.collect_garbage();
        else
            return 0;
    }

    /// The object's file, when the storage keeps objects as files; nullopt otherwise.
    static std::optional<std::filesystem::path> local_path(const S& s, std::string_view name) {
        if constexpr (requires { { s.local_path(name) } -> std::same_as<std::optional<std::filesystem::path>>; })
            return s.local_path(name);
        else
            return std::nullopt;
    }
};

namespace detail {

inline void check_object_name(std::string_view name) {
    if (!is_plain_relative_path(name))
        throw Error(Errc::invalid_argument, "storage object name \"" + std::string(name.substr(0, name.find('\0'))) +
                                                "\" is not a plain relative path");
}

[[noreturn]] inline void storage_errno(const std::string& what, const std::filesystem::path& p, int err) {
    throw Error(err == EACCES || err == EPERM ? Errc::permission_denied : Errc::io_error,
                what + ": " + std::strerror(err), ErrorContext{p.string(), {}, {}});
}

inline void write_all(int fd, const char* p, std::size_t n, const std::filesystem::path& path) {
    while (n != 0) {
        const ssize_t w = ::write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            storage_errno("cannot write", path, errno);
        }
        p += w;
        n -= static_cast<std::size_t>(w);
    }
}

inline ObjectInfo info_of(const struct stat& st) {
    ObjectInfo i;
    i.size = static_cast<std::uint64_t>(st.st_size);
    i.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    // Device, inode and change time: a replaced file has another inode, a file changed in place a
    // new ctime (which, unlike mtime, cannot be set back by a user).
    std::uint64_t id = static_cast<std::uint64_t>(st.st_dev) * 0x9E3779B97F4A7C15ULL;
    id ^= static_cast<std::uint64_t>(st.st_ino) + 0x632BE59BD9B4E019ULL + (id << 6) + (id >> 2);
    const auto ctime = static_cast<std::uint64_t>(st.st_ctim.tv_sec) * 1000000000ULL + static_cast<std::uint64_t>(st.st_ctim.tv_nsec);
    id ^= ctime + 0x94D049BB133111EBULL + (id << 6) + (id >> 2);
    i.identity = id;
    i.regular = S_ISREG(st.st_mode);
    return i;
}

}  // namespace detail

/// Objects as files below a root folder.
class FilesystemStorage {
public:
    explicit FilesystemStorage(std::filesystem::path root) : root_(std::move(root)), root_fd_(root_) {}

    [[nodiscard]] const std::filesystem::path& root() const noexcept { return root_; }
    [[nodiscard]] std::optional<std::filesystem::path> local_path(std::string_view name) const {
        detail::check_object_name(name);
        std::string p = root_.native();
        p += '/';
        p += name;
        return std::filesystem::path(std::move(p));
    }

    /// nullopt also for a symlink or a folder: no object is there (a FIFO reads as empty). Opened
    /// relative to the root folder's descriptor: this is the hot path of a cache lookup.
    [[nodiscard]] std::optional<std::string> read(std::string_view name) const {
        detail::check_object_name(name);
        const std::string rel(name);
        int fd = open_relative(rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0) {
            if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP || errno == ENXIO) return std::nullopt;
            detail::storage_errno("cannot open", path(name), errno);
        }
        // Entries are small: usually one read() into a 4 KiB buffer, and no fstat. A folder fails
        // the read with EISDIR (no object); a FIFO reads as empty.
        std::string out(4096, '\0');
        std::size_t got = 0;
        for (;;) {
            const std::size_t want = out.size() - got;
            const ssize_t n = ::read(fd, out.data() + got, want);
            if (n < 0) {
                if (errno == EINTR) continue;
                const int err = errno;
                ::close(fd);
                if (err == EISDIR || err == EAGAIN) return std::nullopt;
                detail::storage_errno("cannot read", path(name), err);
            }
            got += static_cast<std::size_t>(n);
            if (static_cast<std::size_t>(n) < want) break;  // a short read of a file is its end
            out.resize(out.size() * 2);
        }
        ::close(fd);
        out.resize(got);
        return out;
    }

    void write(std::string_view name, std::string_view data) {
        publish(name, [&](int fd, const std::filesystem::path& tmp) { detail::write_all(fd, data.data(), data.size(), tmp); });
    }

    ObjectInfo import_file(std::string_view name, const std::filesystem::path& file) {
        publish(name, [&](int fd, const std::filesystem::path& tmp) {
            const int in = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
            if (in < 0) detail::storage_errno("cannot open", file, errno);
            char buf[1 << 16];
            drain(in, file, buf, sizeof buf,
                  [&](std::string_view c) { detail::write_all(fd, c.data(), c.size(), tmp); });
        });
        return stat(name).value();
    }

    bool remove(std::string_view name) {
        const std::filesystem::path p = path(name);
        if (::unlink(p.c_str()) == 0) return true;
        if (errno == ENOENT || errno == ENOTDIR) return false;
        if (errno == EISDIR || errno == EPERM) {  // a folder where an object should be: remove it
            std::error_code ec;
            return std::filesystem::remove_all(p, ec) > 0;
        }
        detail::storage_errno("cannot remove", p, errno);
    }

    [[nodiscard]] std::optional<ObjectInfo> stat(std::string_view name) const {
        detail::check_object_name(name);
        const std::string rel(name);
        struct stat st {};
        if (stat_relative(rel, st) != 0) {
            if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
            detail::storage_errno("cannot stat", path(name), errno);
        }
        return detail::info_of(st);
    }

    void touch(std::string_view name) {
        const std::filesystem::path p = path(name);
        if (::utimensat(AT_FDCWD, p.c_str(), nullptr, AT_SYMLINK_NOFOLLOW) != 0 && errno != ENOENT)
            detail::storage_errno("cannot touch", p, errno);
    }

    [[nodiscard]] std::vector<std::string> list(std::string_view folder) const {
        std::vector<std::string> out;
        const std::filesystem::path p = folder.empty() ? root_ : path(folder);
        DIR* d = ::opendir(p.c_str());
        if (d == nullptr) {
            if (errno == ENOENT || errno == ENOTDIR) return out;
            detail::storage_errno("cannot list", p, errno);
        }
        while (const dirent* e = ::readdir(d)) {
            const std::string_view n = e->d_name;
            if (n.empty() || n.front() == '.') continue;  // ., .., and our temporary files
            out.emplace_back(folder.empty() ? std::string(n) : std::string(folder) + "/" + std::string(n));
        }
        ::closedir(d);
        std::sort(out.begin(), out.end());
        return out;
    }

    /// Removes temporary files (`.tmp.<pid>.*`) whose writer is gone, or that are older than a day
    /// (a writer's pid may have been reused), in the root and its folders. Returns how many.
    std::uint64_t collect_garbage() {
        std::uint64_t removed = 0;
        std::error_code ec;
        const auto now = std::filesystem::file_time_type::clock::now();
        for (auto it = std::filesystem::recursive_directory_iterator(root_, ec);
             !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
            const std::string name = it->path().filename().string();
            if (name.rfind(".tmp.", 0) != 0 || !it->is_regular_file(ec)) continue;
            const std::string pid_text = name.substr(5, name.find('.', 5) - 5);
            bool gone = false;
            try {
                const long pid = std::stol(pid_text);
                gone = pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
            } catch (const std::exception&) {
                gone = true;  // not one of ours
            }
            std::error_code tec;
            const auto age = now - std::filesystem::last_write_time(it->path(), tec);
            if (gone || (!tec && age > std::chrono::hours(24))) removed += ::unlink(it->path().c_str()) == 0 ? 1 : 0;
        }
        return removed;
    }

    bool read_chunks(std::string_view name, const ChunkFn& fn) const {
        const std::filesystem::path p = path(name);
        const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0) {
            if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return false;
            detail::storage_errno("cannot open", p, errno);
        }
        std::string buf(1 << 20, '\0');
        drain(fd, p, buf.data(), buf.size(), fn);
        return true;
    }

private:
    /// openat() relative to the root's descriptor (the full path when the root does not exist yet);
    /// a miss in a root that was removed and recreated is retried on the new one.
    int open_relative(const std::string& rel, int flags) const {
        for (int attempt = 0;; ++attempt) {
            const int dir = root_fd_.get();
            const int fd = dir >= 0 ? ::openat(dir, rel.c_str(), flags) : ::open((root_ / rel).c_str(), flags);
            if (fd >= 0 || errno != ENOENT || dir < 0 || attempt > 0 || !root_fd_.stale()) return fd;
        }
    }
    int stat_relative(const std::string& rel, struct stat& st) const {
        for (int attempt = 0;; ++attempt) {
            const int dir = root_fd_.get();
            const int rc = dir >= 0 ? ::fstatat(dir, rel.c_str(), &st, AT_SYMLINK_NOFOLLOW)
                                    : ::lstat((root_ / rel).c_str(), &st);
            if (rc == 0 || errno != ENOENT || dir < 0 || attempt > 0 || !root_fd_.stale()) return rc;
        }
    }

    /// Reads `fd` to its end in pieces of up to `n` bytes through `fn`, then closes it (also when
    /// reading or `fn` fails).
    template <class Fn>
    static void drain(int fd, const std::filesystem::path& p, char* buf, std::size_t n, Fn&& fn) {
        try {
            for (;;) {
                const ssize_t got = ::read(fd, buf, n);
                if (got < 0) {
                    if (errno == EINTR) continue;
                    detail::storage_errno("cannot read", p, errno);
                }
                if (got == 0) break;
                fn(std::string_view(buf, static_cast<std::size_t>(got)));
            }
        } catch (...) {
            ::close(fd);
            throw;
        }
        ::close(fd);
    }

    [[nodiscard]] std::filesystem::path path(std::string_view name) const {
        detail::check_object_name(name);
        return root_ / std::filesystem::path(std::string(name));
    }

    /// Temporary file in the target folder, filled by `fill`, fsync'd, renamed into place, folder
    /// fsync'd. On any failure the temporary file is removed and the old object stays.
    template <class Fill>
    void publish(std::string_view name, Fill&& fill) {
        const std::filesystem::path p = path(name);
        const std::filesystem::path dir = p.parent_path();
        std::error_code ec;
        std::filesystem::create_directories(dir, ec);
        static std::atomic<std::uint64_t> counter{0};
        const std::filesystem::path tmp =
            dir / (".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1)) + "." +
                   p.filename().string());
        const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) detail::storage_errno("cannot create", tmp, errno);
        try {
            fill(fd, tmp);
            if (::fsync(fd) != 0) detail::storage_errno("cannot fsync", tmp, errno);
        } catch (...) {
            ::close(fd);
            ::unlink(tmp.c_str());
            throw;
        }
        ::close(fd);
        if (::rename(tmp.c_str(), p.c_str()) != 0) {
            const int err = errno;
            ::unlink(tmp.c_str());
            detail::storage_errno("cannot publish", p, err);
        }
        const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)::fsync(dfd);
            ::close(dfd);
        }
    }

    std::filesystem::path root_;
    detail::DirHandle root_fd_;  // the root, opened once: lookups open names relative to it
};

/// Objects in memory, shared by copies of one instance; for tests and single-process caches.
class MemoryStorage {
    struct Object {
        std::string data;
        std::uint64_t version;
        std::int64_t mtime_ns;
    };
    struct State {
        mutable std::mutex mu;
        std::map<std::string, Object, std::less<>> objects;
        std::uint64_t next_version = 1;
    };

public:
    MemoryStorage() : state_(std::make_shared<State>()) {}

    [[nodiscard]] std::optional<std::string> read(std::string_view name) const {
        detail::check_object_name(name);
        std::lock_guard lock(state_->mu);
        auto it = state_->objects.find(name);
        if (it == state_->objects.end()) return std::nullopt;
        return it->second.data;
    }
    void write(std::string_view name, std::string_view data) { put(name, std::string(data)); }
    ObjectInfo import_file(std::string_view name, const std::filesystem::path& file) {
        std::string data;
        FilesystemStorage(file.parent_path()).read_chunks(file.filename().string(), [&](std::string_view c) { data.append(c); });
        put(name, std::move(data));
        return stat(name).value();
    }
    bool remove(std::string_view name) {
        detail::check_object_name(name);
        std::lock_guard lock(state_->mu);
        return state_->objects.erase(std::string(name)) != 0;
    }
    [[nodiscard]] std::optional<ObjectInfo> stat(std::string_view name) const {
        detail::check_object_name(name);
        std::lock_guard lock(state_->mu);
        auto it = state_->objects.find(name);
        if (it == state_->objects.end()) return std::nullopt;
        return ObjectInfo{it->second.data.size(), it->second.version, it->second.mtime_ns, true};
    }
    void touch(std::string_view name) {
        std::lock_guard lock(state_->mu);
        auto it = state_->objects.find(name);
        if (it != state_->objects.end()) it->second.mtime_ns = now_ns();
    }
    [[nodiscard]] std::vector<std::string> list(std::string_view folder) const {
        std::lock_guard lock(state_->mu);
        std::vector<std::string> out;
        const std::string prefix = folder.empty() ? std::string() : std::string(folder) + "/";
        for (const auto& [name, obj] : state_->objects)
            if (name.compare(0, prefix.size(), prefix) == 0 && name.find('/', prefix.size()) == std::string::npos)
                out.push_back(name);
        return out;
    }
    bool read_chunks(std::string_view name, const ChunkFn& fn) const {
        std::optional<std::string> data = read(name);
        if (!data) return false;
        fn(*data);
        return true;
    }
    /// Replaces an object's bytes in place, keeping its identity: what silent corruption looks
    /// like (a disk error, or a careless hand). Tests use it.
    void corrupt_in_place(std::string_view name, std::string data) {
        std::lock_guard lock(state_->mu);
        auto it = state_->objects.find(name);
        if (it != state_->objects.end()) it->second.data = std::move(data);
    }

private:
    static std::int64_t now_ns() {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    }
    void put(std::string_view name, std::string data) {
        detail::check_object_name(name);
        std::lock_guard lock(state_->mu);
        state_->objects[std::string(name)] = Object{std::move(data), state_->next_version++, now_ns()};
    }

    std::shared_ptr<State> state_;
};

static_assert(Storage<FilesystemStorage> && Storage<MemoryStorage>);

}  // namespace skc
