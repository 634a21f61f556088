// skc/detail/unique_fd.hpp: what a scope owns of the operating system and gives back when it ends:
// a file descriptor (UniqueFd), and a path removed with everything below it (RemovedAtExit).
#pragma once

#include <filesystem>
#include <system_error>
#include <utility>

#include <unistd.h>

namespace skc::detail {

/// A file descriptor owned by one object: move-only, closed when the object ends or reset() gives
/// it another. Empty (-1) when default-made, moved from or released. A descriptor is closed once
/// and close() is never retried: Linux frees it even when close() fails with EINTR, and a second
/// close() could hit a descriptor another thread has been given since.
class UniqueFd {
public:
    UniqueFd() noexcept = default;
    explicit UniqueFd(int fd) noexcept : fd_(fd) {}
    UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    UniqueFd& operator=(UniqueFd&& o) noexcept {
        if (this != &o) reset(std::exchange(o.fd_, -1));
        return *this;
    }
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;
    ~UniqueFd() { reset(); }

    [[nodiscard]] int get() const noexcept { return fd_; }
    explicit operator bool() const noexcept { return fd_ >= 0; }

    /// Closes the descriptor held (if any) and holds `fd` instead.
    void reset(int fd = -1) noexcept {
        const int old = std::exchange(fd_, fd);
        if (old >= 0) (void)::close(old);
    }
    /// Gives the descriptor up without closing it.
    [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }

private:
    int fd_ = -1;
};

/// A path removed, with everything below it, when this object ends (a staging folder, a scratch
/// file). Failures to remove are ignored.
class RemovedAtExit {
public:
    explicit RemovedAtExit(std::filesystem::path p) : path_(std::move(p)) {}
    RemovedAtExit(const RemovedAtExit&) = delete;
    RemovedAtExit& operator=(const RemovedAtExit&) = delete;
    ~RemovedAtExit() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

private:
    std::filesystem::path path_;
};

}  // namespace skc::detail
