// skc/policy/filesystem_storage.hpp: FilesystemStorage, the Storage (storage.hpp) that keeps each
// object as a file below a root folder.
//
// It writes to a temporary file in the target folder, fsyncs it, renames it into place and fsyncs
// the folder, and never follows a symlink (a package replaced by a symlink is seen as not a regular
// file, and refused by the cache). Names are opened relative to the root folder's descriptor.
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
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../detail/atomic_file.hpp"
#include "../detail/dir_handle.hpp"
#include "../detail/names.hpp"
#include "../detail/posix.hpp"
#include "../error.hpp"
#include "storage.hpp"

namespace skc {

namespace detail {

inline void check_object_name(std::string_view name) {
    if (!is_plain_relative_path(name))
        throw Error(Errc::invalid_argument, "storage object name \"" + std::string(name.substr(0, name.find('\0'))) +
                                                "\" is not a plain relative path");
}

inline ObjectInfo info_of(const struct stat& st) {
    ObjectInfo i;
    i.size = static_cast<std::uint64_t>(st.st_size);
    i.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    i.ctime_ns = static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
    // Device, inode and change time: a replaced file has another inode, a file changed in place a
    // new ctime (which, unlike mtime, cannot be set back by a user).
    std::uint64_t id = static_cast<std::uint64_t>(st.st_dev) * 0x9E3779B97F4A7C15ULL;
    id ^= static_cast<std::uint64_t>(st.st_ino) + 0x632BE59BD9B4E019ULL + (id << 6) + (id >> 2);
    const auto ctime =
        static_cast<std::uint64_t>(st.st_ctim.tv_sec) * 1000000000ULL + static_cast<std::uint64_t>(st.st_ctim.tv_nsec);
    id ^= ctime + 0x94D049BB133111EBULL + (id << 6) + (id >> 2);
    i.identity = id;
    i.regular = S_ISREG(st.st_mode);
    return i;
}

}  // namespace detail

/// Objects as files below a root folder.
class FilesystemStorage {
public:
    explicit FilesystemStorage(const std::filesystem::path& root)
        : root_(root.native()), dir_(std::make_shared<const detail::DirHandle>(root)) {}
    /// Objects in `folder` (a plain name) in the folder of `parent`: names are opened relative to
    /// `parent`'s descriptor, so that a cache folder, its locks and a namespace in it share one
    /// (FileLock::dir_handle()), and a fresh process opens one folder, not two.
    FilesystemStorage(std::shared_ptr<const detail::DirHandle> parent, std::string_view folder)
        : root_(parent->path().native() + "/" + std::string(folder)),
          dir_(std::move(parent)),
          prefix_(std::string(folder) + "/") {
        detail::check_object_name(folder);
    }

    [[nodiscard]] std::filesystem::path root() const { return root_; }
    [[nodiscard]] std::optional<std::filesystem::path> local_path(std::string_view name) const {
        detail::check_object_name(name);
        std::string p = root_;
        p += '/';
        p += name;
        return std::filesystem::path(std::move(p));
    }

    /// nullopt also for a symlink or a folder: no object is there (a FIFO reads as empty). Opened
    /// relative to the root folder's descriptor: this is the hot path of a cache lookup.
    [[nodiscard]] std::optional<std::string> read(std::string_view name) const {
        detail::check_object_name(name);
        int fd = open_relative(name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0) {
            if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP || errno == ENXIO) return std::nullopt;
            detail::throw_errno("cannot open", path(name), errno);
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
                detail::throw_errno("cannot read", path(name), err);
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
        publish(name, [&](detail::AtomicFile& f) { f.write(data); });
    }

    /// Publishes several objects, each replaced atomically as by write(), with as few journal
    /// commits as the file system allows: every temporary is written and its writeback started
    /// before the first fsync, so that one commit carries them all and the later fsyncs find little
    /// left to do; each folder is fsync'd once, after every rename. The set is not atomic as a
    /// whole: a failure leaves the objects before it published, as successive write()s do.
    void write_many(const std::vector<std::pair<std::string, std::string>>& objects) {
        std::vector<detail::AtomicFile> temps;
        temps.reserve(objects.size());
        for (const auto& [name, data] : objects) {
            temps.push_back(open_temp(name));
            temps.back().write(data);
            (void)::sync_file_range(temps.back().fd(), 0, 0, SYNC_FILE_RANGE_WRITE);  // start, do not wait
        }
        for (detail::AtomicFile& t : temps) t.sync();
        std::vector<std::filesystem::path> dirs;
        try {
            for (detail::AtomicFile& t : temps) {
                t.commit(detail::Durability::none);  // fsync'd above; the folders below
                std::filesystem::path d = t.target().parent_path();
                if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(std::move(d));
            }
        } catch (...) {
            for (const std::filesystem::path& d : dirs) detail::fsync_dir(d);
            throw;
        }
        for (const std::filesystem::path& d : dirs) detail::fsync_dir(d);
    }

    ObjectInfo write_stream(std::string_view name, const std::function<void(const ChunkFn&)>& produce) {
        publish(name, [&](detail::AtomicFile& f) { produce([&](std::string_view c) { f.write(c); }); });
        return stat(name).value();
    }

    ObjectInfo import_file(std::string_view name, const std::filesystem::path& file) {
        publish(name, [&](detail::AtomicFile& f) {
            const int in = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
            if (in < 0) detail::throw_errno("cannot open", file, errno);
            char buf[1 << 16];
            drain(in, file, buf, sizeof buf, [&](std::string_view c) { f.write(c); });
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
        detail::throw_errno("cannot remove", p, errno);
    }

    [[nodiscard]] std::optional<ObjectInfo> stat(std::string_view name) const {
        detail::check_object_name(name);
        struct stat st {};
        if (stat_relative(name, st) != 0) {
            if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
            detail::throw_errno("cannot stat", path(name), errno);
        }
        return detail::info_of(st);
    }

    void touch(std::string_view name) { set_mtime(name, nullptr); }

    /// Sets the modification time to `mtime_ns` (ns since the epoch; when a hit used the object)
    /// unless it is later already, or the object was changed after `mtime_ns` (its change time is
    /// later: it was replaced, or its time was set since).
    void touch(std::string_view name, std::int64_t mtime_ns) {
        const std::optional<ObjectInfo> info = stat(name);
        if (!info || info->mtime_ns >= mtime_ns || info->ctime_ns >= mtime_ns) return;
        const struct timespec times[2] = {{0, UTIME_OMIT}, {mtime_ns / 1000000000, mtime_ns % 1000000000}};
        set_mtime(name, times);
    }

    /// One write on a descriptor opened with O_APPEND, so that appends never interleave, and no lock:
    /// the log is never renamed or shortened, so every append reaches it, and read_log() tells a
    /// reader which bytes it has not read. The object is created with mode 0666 less the umask, as
    /// lock files are: every member of a group-shared cache can add to it.
    std::uint64_t append(std::string_view name, std::string_view data) {
        detail::check_object_name(name);
        constexpr int flags = O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
        int fd = open_relative(name, flags, 0666);
        if (fd < 0 && errno == ENOENT) {  // its folder is missing
            std::error_code ec;
            std::filesystem::create_directories(path(name).parent_path(), ec);
            fd = open_relative(name, flags, 0666);
        }
        if (fd < 0) {
            const int err = errno;
            detail::throw_errno("cannot open for appending", path(name), err);
        }
        ssize_t w = 0;
        while ((w = ::write(fd, data.data(), data.size())) < 0 && errno == EINTR) {}
        const int err = errno;
        const off_t end = w < 0 ? -1 : ::lseek(fd, 0, SEEK_CUR);  // after an append: the end of this one
        ::close(fd);
        if (w < 0) detail::throw_errno("cannot append", path(name), err);
        if (static_cast<std::size_t>(w) != data.size())
            throw Error(Errc::io_error,
                        "cannot append: only " + std::to_string(w) + " of " + std::to_string(data.size()) +
                            " bytes were written (is the disk full?)",
                        ErrorContext{path(name).string(), {}, {}});
        return end < 0 ? data.size() : static_cast<std::uint64_t>(end);
    }

    /// The bytes of log `name` from `mark.offset` to its end when it is the log `mark` names (the
    /// same inode, at least that long), else all of them; nullopt when there is no log. Anything but
    /// a regular file reads as empty.
    [[nodiscard]] std::optional<LogTail> read_log(std::string_view name, const LogMark& mark) const {
        detail::check_object_name(name);
        const int fd = open_relative(name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0) {
            const int err = errno;
            if (err == ENOENT || err == ENOTDIR) return std::nullopt;
            detail::throw_errno("cannot open", path(name), err);
        }
        struct stat st {};
        if (::fstat(fd, &st) != 0) {
            const int err = errno;
            ::close(fd);
            detail::throw_errno("cannot stat", path(name), err);
        }
        LogTail t;
        t.id = static_cast<std::uint64_t>(st.st_ino);
        if (!S_ISREG(st.st_mode)) {
            ::close(fd);
            return t;
        }
        const bool same = t.id == mark.id && static_cast<std::uint64_t>(st.st_size) >= mark.offset;
        t.from = same ? mark.offset : 0;
        if (::lseek(fd, static_cast<off_t>(t.from), SEEK_SET) < 0) {
            const int err = errno;
            ::close(fd);
            detail::throw_errno("cannot seek", path(name), err);
        }
        char buf[1 << 16];  // to the end, also what was appended meanwhile
        drain(fd, path(name), buf, sizeof buf, [&](std::string_view c) { t.data.append(c); });
        return t;
    }

    /// Frees the disk blocks of log `name` that hold only bytes before `mark.offset` (a hole: its
    /// size and offsets stay) when it is the log `mark` names. Where the file system cannot punch
    /// holes the bytes stay; no error is reported: space is not worth failing a fold for.
    void discard_log(std::string_view name, const LogMark& mark) {
        detail::check_object_name(name);
        const int fd = open_relative(name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0) return;
        struct stat st {};
        if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_ino) == mark.id) {
            const auto block = static_cast<std::uint64_t>(st.st_blksize > 0 ? st.st_blksize : 4096);
            const std::uint64_t len = mark.offset / block * block;
            if (len > 0) (void)::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(len));
        }
        ::close(fd);
    }

    [[nodiscard]] std::vector<std::string> list(std::string_view folder) const {
        std::vector<std::string> out;
        const std::filesystem::path p = folder.empty() ? root() : path(folder);
        DIR* d = ::opendir(p.c_str());
        if (d == nullptr) {
            if (errno == ENOENT || errno == ENOTDIR) return out;
            detail::throw_errno("cannot list", p, errno);
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
        for (auto it = std::filesystem::recursive_directory_iterator(root(), ec);
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
            detail::throw_errno("cannot open", p, errno);
        }
        std::string buf(1 << 20, '\0');
        drain(fd, p, buf.data(), buf.size(), fn);
        return true;
    }

private:
    /// Object `name` relative to the folder descriptor.
    [[nodiscard]] std::string relative(std::string_view name) const {
        std::string at;
        at.reserve(prefix_.size() + name.size());
        at += prefix_;
        at += name;
        return at;
    }

    /// openat() relative to the root's descriptor (the full path when the root does not exist yet);
    /// a miss in a root that was removed and recreated is retried on the new one.
    int open_relative(std::string_view name, int flags, mode_t mode = 0) const {
        const std::string at = relative(name);
        for (int attempt = 0;; ++attempt) {
            const int dir = dir_->get();
            const int fd = dir >= 0 ? ::openat(dir, at.c_str(), flags, mode) : ::open(path(name).c_str(), flags, mode);
            if (fd >= 0 || errno != ENOENT || dir < 0 || attempt > 0 || !dir_->stale()) return fd;
        }
    }
    int stat_relative(std::string_view name, struct stat& st) const {
        const std::string at = relative(name);
        for (int attempt = 0;; ++attempt) {
            const int dir = dir_->get();
            const int rc =
                dir >= 0 ? ::fstatat(dir, at.c_str(), &st, AT_SYMLINK_NOFOLLOW) : ::lstat(path(name).c_str(), &st);
            if (rc == 0 || errno != ENOENT || dir < 0 || attempt > 0 || !dir_->stale()) return rc;
        }
    }
    /// utimensat relative to the folder's descriptor: `times` as it takes them (nullptr: now).
    void set_mtime(std::string_view name, const struct timespec* times) {
        detail::check_object_name(name);
        const int dir = dir_->get();
        const int rc = dir >= 0 ? ::utimensat(dir, relative(name).c_str(), times, AT_SYMLINK_NOFOLLOW)
                                : ::utimensat(AT_FDCWD, path(name).c_str(), times, AT_SYMLINK_NOFOLLOW);
        if (rc != 0 && errno != ENOENT) {
            const int err = errno;
            detail::throw_errno("cannot touch", path(name), err);
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
                    detail::throw_errno("cannot read", p, errno);
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
        std::string p = root_;
        p += '/';
        p += name;
        return std::filesystem::path(std::move(p));
    }

    /// An AtomicFile for object `name` (its folder made when missing), filled by `fill`, fsync'd,
    /// renamed into place, folder fsync'd. On any failure the temporary file is removed and the old
    /// object stays.
    template <class Fill>
    void publish(std::string_view name, Fill&& fill) {
        detail::AtomicFile f = open_temp(name);
        fill(f);
        f.commit(detail::Durability::full);
    }

    /// The temporary of object `name`, beside it (detail::temporary_beside: collect_garbage() knows
    /// its name).
    detail::AtomicFile open_temp(std::string_view name) {
        const std::filesystem::path final = path(name);
        std::error_code ec;
        std::filesystem::create_directories(final.parent_path(), ec);
        return detail::AtomicFile(final);
    }

    std::string root_;  // the root folder's path (a path object costs an allocation per component)
    // The folder, opened once, that lookups open names relative to: the root, or its parent with
    // prefix_ ("<root's name>/") before each name. Copies share it.
    std::shared_ptr<const detail::DirHandle> dir_;
    std::string prefix_;
};

}  // namespace skc
