// skc/detail/process.hpp: running a child program the way skc runs them (the kernel compiler,
// a run package): posix_spawn, never a shell; its own process group, so all of it can be killed;
// stdin from /dev/null, stdout and stderr into a log; default signal dispositions and an empty
// signal mask whatever the parent has; waiting on a pidfd with a deadline; and a guard that kills
// the group when this process dies first (however it dies: SIGKILL included).
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../error.hpp"

extern char** environ;

namespace skc::detail {

/// The last `max_lines` lines of open file `fd` (at most its last 8 KiB), for error messages.
inline std::string tail_of_fd(int fd, std::size_t max_lines = 20) {
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) return {};
    const off_t want = std::min<off_t>(st.st_size, 8192);
    std::string buf(static_cast<std::size_t>(want), '\0');
    const ssize_t n = ::pread(fd, buf.data(), buf.size(), st.st_size - want);
    buf.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    for (char& c : buf)
        if (c == '\r') c = '\n';  // progress output redrawn in place
    while (!buf.empty() && buf.back() == '\n') buf.pop_back();
    std::size_t lines = 0, start = buf.size();
    while (start > 0) {
        if (buf[start - 1] == '\n' && ++lines == max_lines) break;
        --start;
    }
    return buf.substr(start);
}

/// The last `max_lines` lines of a file (at most its last 8 KiB), for error messages.
inline std::string tail_of(const std::filesystem::path& p, std::size_t max_lines = 20) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return {};
    std::string t = tail_of_fd(fd, max_lines);
    ::close(fd);
    return t;
}

/// A child's output kept in memory (memfd_create), so that what it says survives a full disk, the
/// usual cause of its failure. fd() is -1 when no memory file could be made.
class MemoryLog {
public:
    MemoryLog() noexcept : fd_(::memfd_create("skc-output", MFD_CLOEXEC)) {}
    MemoryLog(const MemoryLog&) = delete;
    MemoryLog& operator=(const MemoryLog&) = delete;
    ~MemoryLog() {
        if (fd_ >= 0) ::close(fd_);
    }
    [[nodiscard]] int fd() const noexcept { return fd_; }
    [[nodiscard]] std::string tail(std::size_t max_lines = 20) const { return tail_of_fd(fd_, max_lines); }

private:
    int fd_;
};

inline std::string signal_name(int sig) {
    const char* d = ::sigdescr_np(sig);
    return "signal " + std::to_string(sig) + (d ? std::string(" (") + d + ")" : std::string());
}

/// Starts `args` (args[0] is the program: searched in PATH when `search_path`) in a new process
/// group, stdin from /dev/null, stdout and stderr to `log_fd`. Returns 0 and sets `pid`, or the
/// error number of the failed start.
inline int spawn_in_group(const std::vector<std::string>& args, int log_fd, bool search_path, pid_t& pid) {
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, log_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
    sigset_t none, all_default;
    sigemptyset(&none);
    sigemptyset(&all_default);
    for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&all_default, s);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all_default);
    posix_spawnattr_setpgroup(&attr, 0);  // its own process group: a timeout kills all of it
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    const int rc = search_path ? ::posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), environ)
                               : ::posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    return rc;
}

/// Waits for `pid` until `deadline`; true (and `status`) when it ended.
inline bool wait_until(pid_t pid, std::chrono::steady_clock::time_point deadline, int& status) {
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    for (;;) {
        const pid_t w = ::waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            if (pidfd >= 0) ::close(pidfd);
            return true;
        }
        if (w < 0 && errno != EINTR) {
            if (pidfd >= 0) ::close(pidfd);
            throw Error(Errc::io_error, std::string("waitpid failed: ") + std::strerror(errno));
        }
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) {
            if (pidfd >= 0) ::close(pidfd);
            return false;
        }
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
        if (pidfd >= 0) {
            pollfd p{pidfd, POLLIN, 0};
            ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000 * 60)));
        } else {  // kernels without pidfd: a short sleep
            std::this_thread::sleep_for(std::chrono::milliseconds(std::min<long long>(left, 10)));
        }
    }
}

/// Kills the process group `pgid` if this process ends before release() (or the destructor) is
/// called, however it ends: SIGKILL, or a signal to its whole process group (a terminal's Ctrl-C or
/// hang-up, a job scheduler's cancel, `kill -- -PGID`): a child group would otherwise run on,
/// unbounded, after its parent. A forked guard process waits on a pipe whose write end only this
/// process holds; it reads one byte when released, and end of file when this process has gone, and
/// then sends the group SIGTERM and, if it is still there 2 seconds later, SIGKILL. The guard is in
/// a process group of its own and ignores SIGINT, SIGQUIT, SIGHUP, SIGTERM and SIGPIPE, so that
/// what ends this process's group does not end the guard with it (signals are blocked from before
/// the fork until the guard has left the group). It closes every other descriptor it inherited at
/// once, so it holds no lock of this process. Best effort: when the pipe or the fork fails, there
/// is no guard.
class GroupGuard {
public:
    explicit GroupGuard(pid_t pgid) noexcept {
        int p[2];
        if (::pipe2(p, O_CLOEXEC) != 0) return;
        sigset_t all, old;
        sigfillset(&all);
        ::pthread_sigmask(SIG_SETMASK, &all, &old);
        const pid_t g = ::fork();
        if (g < 0) {
            ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
            ::close(p[0]);
            ::close(p[1]);
            return;
        }
        if (g == 0) {  // the guard: async-signal-safe calls only (the parent may have threads)
            ::setpgid(0, 0);
            struct sigaction ignore {};
            ignore.sa_handler = SIG_IGN;
            sigemptyset(&ignore.sa_mask);
            for (int sig : {SIGINT, SIGQUIT, SIGHUP, SIGTERM, SIGPIPE}) ::sigaction(sig, &ignore, nullptr);
            sigset_t none;
            sigemptyset(&none);
            ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
            if (::syscall(SYS_close_range, 3u, static_cast<unsigned>(p[0]) - 1u, 0u) != 0 ||
                ::syscall(SYS_close_range, static_cast<unsigned>(p[0]) + 1u, ~0u, 0u) != 0) {
                for (int fd = 3; fd < 65536; ++fd)
                    if (fd != p[0]) ::close(fd);
            }
            char c = 0;
            ssize_t n;
            do n = ::read(p[0], &c, 1);
            while (n < 0 && errno == EINTR);
            if (n <= 0) {
                ::kill(-pgid, SIGTERM);
                for (int i = 0; i < 40 && ::kill(-pgid, 0) == 0; ++i) {  // up to 2 s to end on SIGTERM
                    timespec step{0, 50'000'000};
                    ::nanosleep(&step, nullptr);
                }
                ::kill(-pgid, SIGKILL);
            }
            ::_exit(0);
        }
        ::setpgid(g, g);  // also here: the group is left before either side goes on
        ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
        ::close(p[0]);
        write_fd_ = p[1];
        guard_ = g;
    }
    GroupGuard(const GroupGuard&) = delete;
    GroupGuard& operator=(const GroupGuard&) = delete;
    ~GroupGuard() { release(); }

    /// The group is this process's business again: the guard ends without killing anything.
    void release() noexcept {
        if (guard_ <= 0) return;
        const char c = 'x';
        [[maybe_unused]] const ssize_t w = ::write(write_fd_, &c, 1);
        ::close(write_fd_);
        while (::waitpid(guard_, nullptr, 0) < 0 && errno == EINTR) {}
        guard_ = -1;
    }

private:
    pid_t guard_ = -1;
    int write_fd_ = -1;
};

}  // namespace skc::detail
