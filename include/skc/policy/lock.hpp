// skc/policy/lock.hpp: the LockPolicy concept and its models: FileLock, ProcessLock, NoLock.
//
// A lock policy hands out named shared or exclusive locks as RAII guards. FileLock locks
// `<dir>/<name>.lock` with flock(2), so it works between processes and a holder that dies releases
// its locks with its file descriptors; ProcessLock locks between the threads of one process;
// NoLock never waits (for single-threaded tools and tests).
//
// Waiting: lock() blocks in the kernel (flock without LOCK_NB, or a condition variable) and wakes
// as soon as the lock is free. lock_until() must give up at a deadline: ProcessLock waits on a
// condition variable until then; FileLock, since flock has no timed form, retries a non-blocking
// flock with a backoff from 50 µs doubling to 2 ms, so a released lock is seen within 2 ms and a
// waiter costs about 500 wake-ups a second at most.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../detail/dir_handle.hpp"
#include "../detail/names.hpp"
#include "../error.hpp"

namespace skc {

enum class LockMode : unsigned char { shared, exclusive };

/// Whether a FileLock may create lock files (read_write) or only reads a folder it must not change
/// (read_only: shared locks only; a name without a lock file is held at once, as nobody can hold it).
enum class LockAccess : unsigned char { read_write, read_only };

using LockClock = std::chrono::steady_clock;

/// A lock policy: `lock_until(name, mode, deadline)` waits at most until the deadline and returns a
/// movable Guard whose `owns()` tells whether the lock was acquired, and which releases it when
/// destroyed. `try_lock(name, mode)` (never waits) and `lock(name, mode)` (waits as long as it takes)
/// are optional: LockTraits derives them from lock_until.
/// The requirements of a lock policy, one concept each: LockPolicy is their conjunction and
/// diagnose_lock() names each one a type misses.
namespace detail {
template <class L>
concept lock_guard_type = requires(const typename L::Guard& g) {
    requires std::movable<typename L::Guard>;
    { g.owns() } -> std::convertible_to<bool>;
};
template <class L>
concept lock_lock_until = requires(L& l, std::string_view name, LockMode mode, LockClock::time_point deadline) {
    l.lock_until(name, mode, deadline);
};
template <class L>
concept lock_until_gives_guard = requires(L& l, std::string_view name, LockMode mode, LockClock::time_point deadline) {
    { l.lock_until(name, mode, deadline) } -> std::same_as<typename L::Guard>;
};
}  // namespace detail

template <class L>
concept LockPolicy = detail::lock_guard_type<L> && detail::lock_lock_until<L> && detail::lock_until_gives_guard<L>;

namespace detail {

/// try_lock and lock from lock_until: a deadline already past, and one never reached.
template <class L>
auto lock_without_waiting(L& l, std::string_view name, LockMode mode) {
    return l.lock_until(name, mode, LockClock::time_point::min());
}
template <class L>
auto lock_waiting(L& l, std::string_view name, LockMode mode) {
    return l.lock_until(name, mode, LockClock::time_point::max());
}

/// One message per requirement of LockPolicy that `L` misses (a host calls it in one line).
template <class L>
consteval bool diagnose_lock() {
    static_assert(lock_guard_type<L>,
                  "skc: the Lock policy needs a nested type `Guard` (movable, with `bool owns() const`)");
    static_assert(lock_lock_until<L>,
                  "skc: the Lock policy needs a member "
                  "`Guard lock_until(std::string_view name, LockMode mode, LockClock::time_point deadline)`");
    static_assert(lock_until_gives_guard<L>, "skc: the Lock policy's lock_until must return its `Guard`");
    return true;
}

/// The shipped locks' try_lock and lock, written once, as members.
template <class Derived>
struct LockShorthands {
    auto try_lock(std::string_view name, LockMode mode) {
        return lock_without_waiting(static_cast<Derived&>(*this), name, mode);
    }
    auto lock(std::string_view name, LockMode mode) { return lock_waiting(static_cast<Derived&>(*this), name, mode); }
};

/// Lock names become file paths below the lock folder: '/'-separated parts, none empty, none
/// starting with '.', no NUL byte.
inline void check_lock_name(std::string_view name) {
    if (name.size() > 1000 || !is_plain_relative_path(name))
        throw Error(Errc::invalid_argument,
                    "lock name \"" + std::string(name.substr(0, name.find('\0'))) +
                        "\" is not accepted: use '/'-separated parts, none empty or starting with '.'");
}

/// A file system without working flock (NFS without lockd, Lustre without `-o flock`, some FUSE
/// file systems): a clear error naming the folder and the fix.
[[noreturn]] inline void throw_flock_error(int err, const std::filesystem::path& dir) {
    if (err == ENOLCK || err == ENOSYS || err == EOPNOTSUPP)
        throw Error(Errc::io_error,
                    std::string("the file system does not support flock (") + std::strerror(err) +
                        "): skc needs working file locks where its cache and run folders are; mount NFS with lockd "
                        "(not 'nolock'), Lustre with '-o flock', or put the cache on a local disk (option cache_dir, "
                        "SKC_CACHE_DIR)",
                    ErrorContext{dir.string(), {}, {}});
    throw Error(Errc::io_error, std::string("flock failed: ") + std::strerror(err), ErrorContext{dir.string(), {}, {}});
}

}  // namespace detail

/// try_lock and lock for any LockPolicy: its own when it has them, else derived from lock_until.
template <LockPolicy L>
struct LockTraits {
    using Guard = typename L::Guard;
    static Guard try_lock(L& l, std::string_view name, LockMode mode) {
        if constexpr (requires {
                          { l.try_lock(name, mode) } -> std::same_as<Guard>;
                      })
            return l.try_lock(name, mode);
        else return detail::lock_without_waiting(l, name, mode);
    }
    static Guard lock(L& l, std::string_view name, LockMode mode) {
        if constexpr (requires {
                          { l.lock(name, mode) } -> std::same_as<Guard>;
                      })
            return l.lock(name, mode);
        else return detail::lock_waiting(l, name, mode);
    }
    /// The descriptor of the folder the locks are in, when they are files (FileLock), else -1: the
    /// cache judges the trust of its folders through it.
    static int dir_fd(const L& l) noexcept {
        if constexpr (requires {
                          { l.dir_fd() } -> std::same_as<int>;
                      })
            return l.dir_fd();
        else return -1;
    }
};

/// Locks between processes: flock(2) on `<dir>/<name>.lock` (a name may hold '/' for subfolders),
/// opened with O_CLOEXEC and O_NOFOLLOW.
/// The lock files are created as needed and kept (an empty file per name). If one is removed or
/// replaced while a process waits for it, the waiter notices after acquiring and retries on the
/// new file, so two processes never hold one name through different files.
class FileLock : public detail::LockShorthands<FileLock> {
public:
    class Guard {
    public:
        Guard() = default;
        explicit Guard(int fd) noexcept : fd_(fd) {}
        /// Held without a file: a read-only lock folder has no lock file for the name.
        static Guard vacant() noexcept { return Guard(vacant_fd); }
        Guard(Guard&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
        Guard& operator=(Guard&& o) noexcept {
            if (this != &o) {
                release();
                fd_ = std::exchange(o.fd_, -1);
            }
            return *this;
        }
        Guard(const Guard&) = delete;
        Guard& operator=(const Guard&) = delete;
        ~Guard() { release(); }

        [[nodiscard]] bool owns() const noexcept { return fd_ != -1; }
        explicit operator bool() const noexcept { return owns(); }
        /// Releases the lock now (closing the file releases the flock).
        void release() noexcept {
            if (fd_ >= 0) ::close(fd_);
            fd_ = -1;
        }

    private:
        static constexpr int vacant_fd = -2;
        int fd_ = -1;
    };

    explicit FileLock(std::filesystem::path dir, LockAccess access = LockAccess::read_write)
        : handle_(std::make_shared<const detail::DirHandle>(std::move(dir))), access_(access) {}

    [[nodiscard]] const std::filesystem::path& dir() const noexcept { return handle_->path(); }
    /// The lock folder's descriptor (O_PATH, opened on first use and kept), -1 when it does not
    /// exist: for checks of the folder itself without another walk of its path.
    [[nodiscard]] int dir_fd() const noexcept { return handle_->get(); }
    /// The lock folder's handle, for a storage in a folder below it to open names relative to
    /// (FilesystemStorage's second constructor): one descriptor for both.
    [[nodiscard]] const std::shared_ptr<const detail::DirHandle>& dir_handle() const noexcept { return handle_; }
    [[nodiscard]] std::filesystem::path path_of(std::string_view name) const {
        return dir() / (std::string(name) + ".lock");
    }

    Guard lock_until(std::string_view name, LockMode mode, LockClock::time_point deadline) {
        return acquire(name, mode, deadline);
    }

private:
    Guard acquire(std::string_view name, LockMode mode, LockClock::time_point deadline) {
        detail::check_lock_name(name);
        const std::string rel = std::string(name) + ".lock";  // relative to the lock folder
        const int op = mode == LockMode::shared ? LOCK_SH : LOCK_EX;
        if (access_ == LockAccess::read_only) {
            if (mode == LockMode::exclusive)
                throw Error(Errc::permission_denied, "an exclusive lock in a lock folder opened read-only",
                            ErrorContext{path_of(name).string(), {}, {}});
            const int fd = open_relative(rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
            if (fd < 0 && (errno == ENOENT || errno == ENOTDIR)) return Guard::vacant();
            if (fd < 0) throw_open_error(name, errno);
            Guard g(fd);
            return flock_until(fd, op, deadline, dir()) ? std::move(g) : Guard{};
        }
        for (;;) {
            int fd = open_relative(rel, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW);
            if (fd < 0 && errno == ENOENT) {
                std::error_code ec;
                const std::filesystem::path folder = (dir() / rel).parent_path();
                std::filesystem::create_directories(folder, ec);
                // A folder that cannot be made (another user's cache): say so, not "no such file".
                if (ec && (ec.value() == EACCES || ec.value() == EPERM || ec.value() == EROFS))
                    throw Error(Errc::permission_denied, "cannot create the lock file's folder: " + ec.message(),
                                ErrorContext{folder.string(), {}, {}});
                fd = open_relative(rel, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW);
            }
            if (fd < 0 && (errno == EACCES || errno == EROFS) && mode == LockMode::shared) {
                const int denied = errno;
                fd = open_relative(rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);  // readers of a read-only cache
                if (fd < 0 && errno == ENOENT) errno = denied;               // it cannot be created: that is the error
            }
            if (fd < 0) throw_open_error(name, errno);
            Guard g(fd);
            if (!flock_until(fd, op, deadline, dir())) return Guard{};
            // An exclusive lock must be on the file that is at the path (not one removed or replaced
            // meanwhile), or two processes could hold one name. skc never removes lock files; a
            // shared lock on a removed file only weakens a reader's pin, so readers skip the check.
            if (mode == LockMode::shared) return g;
            struct stat held {
            }, now{};
            const int dfd = handle_->get();
            const int rc = dfd >= 0 ? ::fstatat(dfd, rel.c_str(), &now, AT_SYMLINK_NOFOLLOW)
                                    : ::lstat((dir() / rel).c_str(), &now);
            if (::fstat(fd, &held) == 0 && rc == 0 && held.st_ino == now.st_ino && held.st_dev == now.st_dev) return g;
        }
    }

    [[noreturn]] void throw_open_error(std::string_view name, int err) const {
        throw Error(
            err == EACCES || err == EPERM || err == EROFS ? Errc::permission_denied
            : err == ELOOP                                ? Errc::unsafe_path
                                                          : Errc::io_error,
            std::string("cannot open lock file: ") + (err == ELOOP ? "it is a symbolic link" : std::strerror(err)),
            ErrorContext{path_of(name).string(), {}, {}});
    }

    /// openat() relative to the lock folder's descriptor; the full path while the folder does not
    /// exist yet, and again after it was removed and recreated.
    int open_relative(const std::string& rel, int flags) const {
        for (int attempt = 0;; ++attempt) {
            const int dfd = handle_->get();
            // 0666 less the umask: a group-shared cache (umask 002) gets lock files its group can lock.
            const int fd =
                dfd >= 0 ? ::openat(dfd, rel.c_str(), flags, 0666) : ::open((dir() / rel).c_str(), flags, 0666);
            if (fd >= 0 || errno != ENOENT || dfd < 0 || attempt > 0 || !handle_->stale()) return fd;
        }
    }

    /// flock with a deadline: min() means one try, max() blocks in the kernel.
    static bool flock_until(int fd, int op, LockClock::time_point deadline, const std::filesystem::path& dir) {
        if (deadline == LockClock::time_point::max()) {
            while (::flock(fd, op) != 0)
                if (errno != EINTR) detail::throw_flock_error(errno, dir);
            return true;
        }
        auto pause = std::chrono::microseconds(50);
        for (;;) {
            if (::flock(fd, op | LOCK_NB) == 0) return true;
            if (errno != EWOULDBLOCK && errno != EINTR) detail::throw_flock_error(errno, dir);
            const auto now = LockClock::now();
            if (deadline == LockClock::time_point::min() || now >= deadline) return false;
            std::this_thread::sleep_for(std::min<LockClock::duration>(pause, deadline - now));
            pause = std::min(pause * 2, std::chrono::microseconds(2000));
        }
    }

    // The lock folder, opened once: lock files are opened relative to it. Copies share it.
    std::shared_ptr<const detail::DirHandle> handle_;
    LockAccess access_ = LockAccess::read_write;
};

/// Locks between the threads of one process. Copies share their locks; separate instances
/// (constructed, not copied) do not.
class ProcessLock : public detail::LockShorthands<ProcessLock> {
    struct State {
        std::mutex mu;
        std::condition_variable cv;
        std::map<std::string, std::pair<int, bool>, std::less<>> held;  // name -> (readers, writer)
    };

public:
    class Guard {
    public:
        Guard() = default;
        Guard(std::shared_ptr<State> s, std::string name, LockMode mode) : held_{std::move(s), std::move(name), mode} {}
        Guard(Guard&& o) noexcept : held_(std::exchange(o.held_, {})) {}
        Guard& operator=(Guard&& o) noexcept {
            if (this != &o) {
                release();
                held_ = std::exchange(o.held_, {});
            }
            return *this;
        }
        Guard(const Guard&) = delete;
        Guard& operator=(const Guard&) = delete;
        ~Guard() { release(); }

        [[nodiscard]] bool owns() const noexcept { return held_.state != nullptr; }
        explicit operator bool() const noexcept { return owns(); }
        void release() noexcept {
            State* const state = held_.state.get();
            if (!state) return;
            {
                std::lock_guard lock(state->mu);
                auto it = state->held.find(held_.name);
                if (it != state->held.end()) {
                    if (held_.mode == LockMode::shared) --it->second.first;
                    else it->second.second = false;
                    if (it->second.first == 0 && !it->second.second) state->held.erase(it);
                }
            }
            state->cv.notify_all();
            held_.state.reset();
        }

    private:
        struct Held {
            std::shared_ptr<State> state;  // null when nothing is held
            std::string name;
            LockMode mode = LockMode::shared;
        };
        Held held_;
    };

    ProcessLock() : state_(std::make_shared<State>()) {}

    Guard lock_until(std::string_view name, LockMode mode, LockClock::time_point deadline) {
        return acquire(name, mode, deadline);
    }

private:
    Guard acquire(std::string_view name, LockMode mode, LockClock::time_point deadline) {
        detail::check_lock_name(name);
        std::unique_lock lock(state_->mu);
        auto free = [&] {
            auto it = state_->held.find(name);
            if (it == state_->held.end()) return true;
            return mode == LockMode::shared ? !it->second.second : (!it->second.second && it->second.first == 0);
        };
        if (deadline == LockClock::time_point::min()) {
            if (!free()) return Guard{};
        } else if (deadline == LockClock::time_point::max()) {
            state_->cv.wait(lock, free);
        } else if (!state_->cv.wait_until(lock, deadline, free)) {
            return Guard{};
        }
        auto& h = state_->held[std::string(name)];
        if (mode == LockMode::shared) ++h.first;
        else h.second = true;
        return Guard(state_, std::string(name), mode);
    }

    std::shared_ptr<State> state_;
};

/// No locking: every lock is granted at once. For one process with one thread.
class NoLock : public detail::LockShorthands<NoLock> {
public:
    struct Guard {
        [[nodiscard]] bool owns() const noexcept { return true; }
        explicit operator bool() const noexcept { return true; }
        void release() noexcept {}
    };
    Guard lock_until(std::string_view, LockMode, LockClock::time_point) { return {}; }
};

static_assert(LockPolicy<FileLock> && LockPolicy<ProcessLock> && LockPolicy<NoLock>);

}  // namespace skc
