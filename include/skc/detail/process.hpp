// skc/detail/process.hpp: running a child program the way skc runs them (the kernel compiler,
// a run package): posix_spawn, never a shell; its own process group, so all of it can be killed;
// stdin from /dev/null, stdout and stderr into a log; default signal dispositions and an empty
// signal mask whatever the parent has; waiting on a pidfd with a deadline.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../error.hpp"

extern char** environ;

namespace skc::detail {

/// The last `max_lines` lines of a file (at most its last 8 KiB), for error messages.
inline std::string tail_of(const std::filesystem::path& p, std::size_t max_lines = 20) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return {};
    struct stat st {};
    ::fstat(fd, &st);
    const off_t want = std::min<off_t>(st.st_size, 8192);
    std::string buf(static_cast<std::size_t>(want), '\0');
    const ssize_t n = ::pread(fd, buf.data(), buf.size(), st.st_size - want);
    ::close(fd);
    buf.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    while (!buf.empty() && buf.back() == '\n') buf.pop_back();
    std::size_t lines = 0, start = buf.size();
    while (start > 0) {
        if (buf[start - 1] == '\n' && ++lines == max_lines) break;
        --start;
    }
    return buf.substr(start);
}

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

}  // namespace skc::detail
