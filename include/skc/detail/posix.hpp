// skc/detail/posix.hpp: the system-call helpers every header needs alike: an errno as an
// skc::Error naming the path, a write that finishes, and the fsync of a folder.
#pragma once

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "../error.hpp"

namespace skc::detail {

/// `what: <strerror(err)>` for `p`: permission_denied for EACCES and EPERM, else io_error.
[[noreturn]] inline void throw_errno(const std::string& what, const std::filesystem::path& p, int err) {
    const Errc code = (err == EACCES || err == EPERM) ? Errc::permission_denied : Errc::io_error;
    throw Error(code, what + ": " + std::strerror(err), ErrorContext{p.string(), {}, {}});
}

/// Writes all of `data` to `fd` (short writes and EINTR retried); throws "cannot write" for `path`.
inline void write_all(int fd, std::string_view data, const std::filesystem::path& path) {
    while (!data.empty()) {
        const ssize_t n = ::write(fd, data.data(), data.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            throw_errno("cannot write", path, errno);
        }
        data.remove_prefix(static_cast<std::size_t>(n));
    }
}

/// Makes the names in `dir` durable (after a rename into it); an error is ignored: the files
/// themselves were fsync'd, and a folder that cannot be opened has nothing to sync.
inline void fsync_dir(const std::filesystem::path& dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)::fsync(fd);
        ::close(fd);
    }
}

/// A file of its own in the temporary folder ($TMPDIR, else /tmp), open for writing, removed with
/// this object: a download before it is checked and copied into place.
class TempFile {
public:
    static TempFile create(std::string_view prefix) {
        TempFile t;
        std::string name = (std::filesystem::temp_directory_path() / (std::string(prefix) + "XXXXXX")).string();
        t.fd_ = ::mkostemp(name.data(), O_CLOEXEC);
        if (t.fd_ < 0) throw_errno("cannot create a temporary file", name, errno);
        t.path_ = std::move(name);
        return t;
    }
    TempFile(TempFile&& o) noexcept : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)) { o.path_.clear(); }
    TempFile& operator=(TempFile&& o) noexcept {
        if (this != &o) {
            remove();
            fd_ = std::exchange(o.fd_, -1);
            path_ = std::move(o.path_);
            o.path_.clear();
        }
        return *this;
    }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
    ~TempFile() { remove(); }
    [[nodiscard]] int fd() const noexcept { return fd_; }
    [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
    void close() noexcept {
        if (fd_ >= 0) ::close(std::exchange(fd_, -1));
    }

private:
    TempFile() = default;
    void remove() noexcept {
        close();
        if (!path_.empty()) ::unlink(path_.c_str());
    }
    int fd_ = -1;
    std::filesystem::path path_;
};

}  // namespace skc::detail
