// skc/detail/dir_handle.hpp: a folder opened once, so that hot paths (cache lookups, lock files)
// open and stat names relative to it instead of walking the whole path every time.
#pragma once

#include <atomic>
#include <filesystem>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace skc::detail {

/// An O_PATH descriptor of a folder, opened on first use and reopened when the folder it names was
/// removed (its link count drops to 0). Copies open their own. get() returns -1 while the folder
/// does not exist: callers then use the full path.
class DirHandle {
public:
    explicit DirHandle(std::filesystem::path dir) : dir_(std::move(dir)) {}
    DirHandle(const DirHandle& o) : dir_(o.dir_) {}
    DirHandle& operator=(const DirHandle& o) {
        if (this != &o) {
            reset();
            dir_ = o.dir_;
        }
        return *this;
    }
    ~DirHandle() { reset(); }

    [[nodiscard]] const std::filesystem::path& path() const noexcept { return dir_; }

    /// The descriptor, opening it if needed; -1 when the folder cannot be opened.
    int get() const noexcept {
        int fd = fd_.load(std::memory_order_acquire);
        if (fd >= 0) return fd;
        const int fresh = ::open(dir_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fresh < 0) return -1;
        int expected = -1;
        if (fd_.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return fresh;
        ::close(fresh);
        return expected;
    }

    /// True when the folder behind the descriptor was removed; the next get() opens the path anew.
    /// Call it after a name was not found, before concluding that it does not exist.
    bool stale() const noexcept {
        const int fd = fd_.load(std::memory_order_acquire);
        struct stat st {};
        if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_nlink != 0) return false;
        int expected = fd;
        if (fd_.compare_exchange_strong(expected, -1, std::memory_order_acq_rel)) ::close(fd);
        return true;
    }

private:
    void reset() noexcept {
        const int fd = fd_.exchange(-1);
        if (fd >= 0) ::close(fd);
    }

    std::filesystem::path dir_;
    mutable std::atomic<int> fd_{-1};
};

}  // namespace skc::detail
