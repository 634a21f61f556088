// skc/detail/dir_watch.hpp: waiting for a change in a folder (inotify), for the rendezvous of
// LocalFsGather's ranks (detail/local_fs_round.hpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <utility>

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "gather_round.hpp"

namespace skc::detail {

/// Sleeps until an entry of the watched folder is created, renamed into it or written and closed
/// (inotify), or at most 20 ms (what inotify cannot see: a lock released by a process that died);
/// polls with Backoff where inotify is unavailable. watch() comes before the first look at the
/// folder, so that no change between a look and the sleep is missed.
///
/// One inotify instance serves every folder its owner watches in turn: closing an instance waits
/// for a kernel grace period (6 to 24 ms measured), which a rank would otherwise pay at the end of
/// every round. Removing a watch does not wait. In a child made by fork() the parent's instance is
/// left to the parent and a new one made.
class DirWatch {
public:
    DirWatch() = default;
    DirWatch(DirWatch&& o) noexcept
        : fd_(std::exchange(o.fd_, -1)), wd_(std::exchange(o.wd_, -1)), owner_(o.owner_), backoff_(o.backoff_) {}
    DirWatch& operator=(DirWatch&& o) noexcept {
        if (this != &o) {
            close_fd();
            fd_ = std::exchange(o.fd_, -1);
            wd_ = std::exchange(o.wd_, -1);
            owner_ = o.owner_;
            backoff_ = o.backoff_;
        }
        return *this;
    }
    DirWatch(const DirWatch&) = delete;
    DirWatch& operator=(const DirWatch&) = delete;
    ~DirWatch() { close_fd(); }

    /// Watches `dir` instead of the folder watched so far.
    void watch(const std::filesystem::path& dir) {
        unwatch();
        backoff_ = Backoff{};
        if (fd_ >= 0 && owner_ != ::getpid()) close_fd();  // the parent's, after a fork
        if (fd_ < 0) {
            fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
            owner_ = ::getpid();
        }
        if (fd_ < 0) return;
        // Every rank's file gets its name by creation, link() or rename(); the barrier's `passed`
        // is appended to and closed.
        constexpr std::uint32_t events = IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ONLYDIR;
        wd_ = ::inotify_add_watch(fd_, dir.c_str(), events);
        drain();  // events of an earlier folder
    }

    /// Stops watching (the instance stays for the next folder).
    void unwatch() {
        if (fd_ >= 0 && wd_ >= 0 && owner_ == ::getpid()) ::inotify_rm_watch(fd_, wd_);
        wd_ = -1;
    }

    void wait(std::chrono::steady_clock::time_point deadline) {
        if (fd_ < 0 || wd_ < 0) {
            backoff_();
            return;
        }
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        const auto ms = std::clamp<std::chrono::milliseconds::rep>(left.count(), 0, 20);
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(ms)) > 0) drain();
    }

private:
    void drain() {
        alignas(inotify_event) char buf[4096];
        while (::read(fd_, buf, sizeof buf) > 0) {}
    }
    void close_fd() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = wd_ = -1;
    }

    int fd_ = -1;
    int wd_ = -1;
    pid_t owner_ = 0;
    Backoff backoff_;
};

}  // namespace skc::detail
