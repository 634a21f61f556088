// skc/detail/process.hpp: running a child program the way skc runs them all (the kernel compiler,
// a run package's extraction and integrity check, a compiler check command): run_child(). The
// child is started with posix_spawn, never through a shell of skc's making, in a process group of
// its own, so that all of it can be killed; stdin from /dev/null, stdout and stderr into a
// descriptor or a pipe read as it comes; default signal dispositions and an empty signal mask
// whatever the parent has. The wait is on a pidfd (and the pipe) with a deadline, EINTR-safe; at
// the deadline the group is killed (SIGTERM first when asked, then SIGKILL), and after any end what
// is left of the group. Meanwhile a guard kills the group should this process die first (however it
// dies: SIGKILL included).
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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
#include "unique_fd.hpp"

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
    const UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    return fd ? tail_of_fd(fd.get(), max_lines) : std::string();
}

/// A child's output kept in memory (memfd_create), so that what it says survives a full disk, the
/// usual cause of its failure. fd() is -1 when no memory file could be made.
class MemoryLog {
public:
    MemoryLog() noexcept : fd_(::memfd_create("skc-output", MFD_CLOEXEC)) {}
    [[nodiscard]] int fd() const noexcept { return fd_.get(); }
    [[nodiscard]] std::string tail(std::size_t max_lines = 20) const { return tail_of_fd(fd_.get(), max_lines); }

private:
    UniqueFd fd_;
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

/// The read end of a pipe a child writes its output into, read without blocking: each piece read
/// goes to `sink`. Closed at the end of the output (every writer has gone).
class OutputPipe {
public:
    OutputPipe(UniqueFd read_end, const std::function<void(std::string_view)>& sink)
        : fd_(std::move(read_end)), sink_(sink), buf_(fd_ ? 65536 : 0, '\0') {}

    /// The descriptor to poll; -1 once the output has ended.
    [[nodiscard]] int fd() const noexcept { return fd_.get(); }

    /// One read: the bytes read (0 at the end of the output or when nothing is there now).
    std::size_t read_some() {
        if (!fd_) return 0;
        ssize_t n;
        do n = ::read(fd_.get(), buf_.data(), buf_.size());
        while (n < 0 && errno == EINTR);
        if (n == 0 || (n < 0 && errno != EAGAIN)) {  // every writer has gone
            fd_.reset();
            return 0;
        }
        if (n < 0) return 0;
        sink_(std::string_view(buf_.data(), static_cast<std::size_t>(n)));
        return static_cast<std::size_t>(n);
    }

    /// After the end: what is still in the pipe (up to 256 MiB), without waiting for writers that
    /// may be left.
    void drain() {
        for (std::size_t bytes = 0; fd_ && bytes < (std::size_t{256} << 20);) {
            const std::size_t n = read_some();
            if (n == 0) break;
            bytes += n;
        }
    }

private:
    UniqueFd fd_;
    const std::function<void(std::string_view)>& sink_;
    std::string buf_;
};

/// Waits for `pid` until `deadline`, reading `output` (when given) as it comes; true (and `status`)
/// when it ended. Waits on a pidfd; without one (old kernels) the end is noticed by a short poll.
inline bool wait_until(pid_t pid, std::chrono::steady_clock::time_point deadline, int& status,
                       OutputPipe* output = nullptr) {
    const UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    for (;;) {
        const pid_t w = ::waitpid(pid, &status, WNOHANG);
        if (w == pid) return true;
        if (w < 0 && errno != EINTR)
            throw Error(Errc::io_error, std::string("waitpid failed: ") + std::strerror(errno));
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) return false;
        const long long left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
        pollfd p[2] = {{output != nullptr ? output->fd() : -1, POLLIN, 0}, {pidfd.get(), POLLIN, 0}};
        const int n = ::poll(p, 2, static_cast<int>(std::min<long long>(left, pidfd ? 60'000 : 10)));
        if (n > 0 && output != nullptr && (p[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) output->read_some();
    }
}

/// Waits for `pid`, which was sent SIGKILL, to end (its `status`).
inline void reap(pid_t pid, int& status) {
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
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
        write_fd_.reset(p[1]);
        guard_ = g;
    }
    GroupGuard(const GroupGuard&) = delete;
    GroupGuard& operator=(const GroupGuard&) = delete;
    ~GroupGuard() { release(); }

    /// The group is this process's business again: the guard ends without killing anything.
    void release() noexcept {
        if (guard_ <= 0) return;
        const char c = 'x';
        [[maybe_unused]] const ssize_t w = ::write(write_fd_.get(), &c, 1);
        write_fd_.reset();
        while (::waitpid(guard_, nullptr, 0) < 0 && errno == EINTR) {}
        guard_ = -1;
    }

private:
    pid_t guard_ = -1;
    UniqueFd write_fd_;
};

/// How run_child() runs a program and ends it.
struct ChildOptions {
    /// args[0] (the program) is looked up in PATH when it has no '/' (posix_spawnp); else it is run
    /// as given.
    bool search_path = false;
    /// Where stdout and stderr go (one of the two must be given): this descriptor (a log file, a
    /// memory file), ...
    int output_fd = -1;
    /// ... or, when this is set, a pipe that run_child() reads while it waits: each piece read is
    /// given to it, from the calling thread.
    std::function<void(std::string_view)> on_output;
    /// When the child is ended if it has not ended by itself.
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    /// At the deadline: nullopt sends the group SIGKILL; a grace period sends it SIGTERM, and
    /// SIGKILL when the child has not ended that much later.
    std::optional<std::chrono::milliseconds> term_grace;
};

/// How a run_child() ended.
struct ChildRun {
    enum class Fault : unsigned char {
        none,   // it ran
        pipe,   // the output pipe could not be made: nothing ran
        spawn,  // the program could not be started
    };
    Fault fault = Fault::none;
    int error = 0;          // with a fault: its errno value
    bool finished = false;  // it ended by itself before the deadline (else it was killed)
    int status = 0;         // waitpid()'s status of the child
};

/// Runs `args` (args[0] is the program) as a child in a process group of its own (see the header
/// comment) and waits for it to end, or until `opt.deadline`, when its group is killed. After any
/// end, what the child left running in its group is killed too, and the output still in the pipe
/// is read. While it runs, a GroupGuard takes the group down should this process die. A fault of
/// the wait (waitpid failing, or `on_output` throwing) kills the group before it propagates.
inline ChildRun run_child(const std::vector<std::string>& args, const ChildOptions& opt) {
    ChildRun run;
    UniqueFd read_end, write_end;
    int out = opt.output_fd;
    if (opt.on_output) {
        int p[2];
        if (::pipe2(p, O_CLOEXEC) != 0) {
            run.fault = ChildRun::Fault::pipe;
            run.error = errno;
            return run;
        }
        read_end.reset(p[0]);
        write_end.reset(p[1]);
        // Only the read end: the child's writes block.
        ::fcntl(p[0], F_SETFL, ::fcntl(p[0], F_GETFL) | O_NONBLOCK);
        out = p[1];
    }
    OutputPipe output(std::move(read_end), opt.on_output);
    pid_t pid = -1;
    run.error = spawn_in_group(args, out, opt.search_path, pid);
    write_end.reset();  // the output ends when the child's group has closed its copies too
    if (run.error != 0) {
        run.fault = ChildRun::Fault::spawn;
        return run;
    }
    GroupGuard guard(pid);
    try {
        run.finished = wait_until(pid, opt.deadline, run.status, &output);
        const auto ended_on_sigterm = [&] {
            ::kill(-pid, SIGTERM);
            return wait_until(pid, std::chrono::steady_clock::now() + *opt.term_grace, run.status, &output);
        };
        if (!run.finished && !(opt.term_grace && ended_on_sigterm())) {
            ::kill(-pid, SIGKILL);
            reap(pid, run.status);
        }
    } catch (...) {
        ::kill(-pid, SIGKILL);
        reap(pid, run.status);
        throw;
    }
    ::kill(-pid, SIGKILL);  // whatever the child left running in its group
    guard.release();
    output.drain();
    return run;
}

}  // namespace skc::detail
