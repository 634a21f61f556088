// skc/policy/invoker.hpp: the OpCompilerInvoker concept and its models: ProcessInvoker,
// FunctionInvoker.
//
// An invoker turns a folder of op info files into one run package. ProcessInvoker runs an external
// compiler with SPEC section 8's command line,
//     <compiler> [fixed args] -p <json_dir> -v <device> -j <jobs> -o <out> [-l <level>] [extra args]
// through posix_spawn (never a shell, so no argument is ever interpreted), in a process group of
// its own, with stdin from /dev/null and stdout and stderr appended to a log file in the output
// folder (so any amount of output is fine). It waits on a pidfd with the timeout, so the wait ends
// the moment the compiler does. On timeout the whole process group gets SIGTERM, then SIGKILL after
// a grace period; after any end, what is left of the group is killed, so no compiler process
// outlives the call. A non-zero exit, a death by signal, a timeout, or no new `*.run` in the output
// folder is an skc::Error that quotes the last lines of the log.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <concepts>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../detail/process.hpp"
#include "../error.hpp"
#include "../options.hpp"

namespace skc {

/// What to compile and how: the command line of SPEC section 8.
struct CompileRequest {
    std::filesystem::path json_dir;    // -p: the op info files to compile
    std::string device;                // -v
    unsigned jobs = 1;                 // -j
    std::filesystem::path output_dir;  // -o: where the package (and the log) go
    std::optional<LogLevel> log_level;  // -l
    std::vector<std::string> extra_args;  // options that change the kernels, passed last
    std::chrono::seconds timeout{3600};
};

struct CompileResult {
    std::filesystem::path package;    // the new `*.run` in output_dir
    std::filesystem::path log;        // the compiler's output
    std::chrono::nanoseconds elapsed{0};
};

template <class I>
concept OpCompilerInvoker = requires(I& i, const CompileRequest& r) {
    { i.compile(r) } -> std::same_as<CompileResult>;
};

namespace detail {

inline std::set<std::filesystem::path> run_files(const std::filesystem::path& dir) {
    std::set<std::filesystem::path> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
        if (e.path().extension() == ".run") out.insert(e.path());
    return out;
}

}  // namespace detail

/// Runs an external kernel compiler. See the header comment.
class ProcessInvoker {
public:
    /// `compiler` is run as given (no PATH search when it contains '/'); `fixed_args` come right
    /// after it, before the standard options.
    explicit ProcessInvoker(std::filesystem::path compiler, std::vector<std::string> fixed_args = {},
                            std::chrono::milliseconds kill_grace = std::chrono::seconds(2))
        : compiler_(std::move(compiler)), fixed_args_(std::move(fixed_args)), kill_grace_(kill_grace) {}

    /// The compiler as given (a name without '/' is looked up in PATH when run).
    [[nodiscard]] const std::filesystem::path& compiler_path() const noexcept { return compiler_; }

    /// The argument vector compile() runs (argv[0] included).
    [[nodiscard]] std::vector<std::string> command(const CompileRequest& r) const {
        std::vector<std::string> argv{compiler_.string()};
        argv.insert(argv.end(), fixed_args_.begin(), fixed_args_.end());
        argv.insert(argv.end(), {"-p", r.json_dir.string(), "-v", r.device, "-j", std::to_string(r.jobs), "-o",
                                 r.output_dir.string()});
        if (r.log_level) argv.insert(argv.end(), {"-l", std::string(to_string(*r.log_level))});
        argv.insert(argv.end(), r.extra_args.begin(), r.extra_args.end());
        return argv;
    }

    CompileResult compile(const CompileRequest& r) {
        if (r.jobs == 0) throw Error(Errc::invalid_argument, "jobs must be at least 1");
        std::error_code ec;
        std::filesystem::create_directories(r.output_dir, ec);
        if (ec)
            throw Error(Errc::io_error, "cannot create the compiler's output folder: " + ec.message(),
                        ErrorContext{r.output_dir.string(), {}, {}});
        CompileResult res;
        res.log = r.output_dir / "op_compiler.log";
        const std::set<std::filesystem::path> before = detail::run_files(r.output_dir);
        const int log_fd = ::open(res.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (log_fd < 0)
            throw Error(Errc::io_error, std::string("cannot open the compiler log: ") + std::strerror(errno),
                        ErrorContext{res.log.string(), {}, {}});

        const auto t0 = std::chrono::steady_clock::now();
        pid_t pid = -1;
        const int rc = detail::spawn_in_group(command(r), log_fd, !compiler_.has_parent_path(), pid);
        ::close(log_fd);
        if (rc != 0)
            throw Error(rc == ENOENT ? Errc::invalid_argument : Errc::io_error,
                        "cannot start the compiler: " + std::string(std::strerror(rc)),
                        ErrorContext{compiler_.string(), {}, {}});

        detail::GroupGuard guard(pid);  // a SIGKILLed caller takes its compiler down with it
        int status = 0;
        const bool finished = detail::wait_until(pid, t0 + r.timeout, status);
        if (!finished) {
            ::kill(-pid, SIGTERM);
            if (!detail::wait_until(pid, std::chrono::steady_clock::now() + kill_grace_, status)) {
                ::kill(-pid, SIGKILL);
                while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
                }
            }
        }
        ::kill(-pid, SIGKILL);  // whatever the compiler left running in its group
        guard.release();
        res.elapsed = std::chrono::steady_clock::now() - t0;

        if (!finished)
            fail(Errc::timeout, "the compiler did not finish within " + std::to_string(r.timeout.count()) +
                                    " s; its process group was killed", res.log);
        if (WIFSIGNALED(status))
            fail(Errc::compile_failed, "the compiler was killed by " + detail::signal_name(WTERMSIG(status)), res.log);
        if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
            fail(Errc::compile_failed, "the compiler exited with status " + std::to_string(WEXITSTATUS(status)), res.log);

        std::vector<std::filesystem::path> fresh;
        for (const auto& p : detail::run_files(r.output_dir))
            if (before.count(p) == 0) fresh.push_back(p);
        if (fresh.empty())
            fail(Errc::compile_failed, "the compiler exited with status 0 but wrote no *.run package in " +
                                           r.output_dir.string(), res.log);
        std::sort(fresh.begin(), fresh.end(), [](const auto& a, const auto& b) {
            std::error_code e1, e2;
            return std::filesystem::last_write_time(a, e1) < std::filesystem::last_write_time(b, e2);
        });
        res.package = fresh.back();
        return res;
    }

private:
    [[noreturn]] static void fail(Errc code, const std::string& what, const std::filesystem::path& log) {
        const std::string tail = detail::tail_of(log);
        throw Error(code, what + (tail.empty() ? std::string(" (its log is empty)")
                                               : ". Last lines of its log:\n" + tail),
                    ErrorContext{log.string(), {}, {}});
    }

    std::filesystem::path compiler_;
    std::vector<std::string> fixed_args_;
    std::chrono::milliseconds kill_grace_;
};

/// Any callable `CompileResult(const CompileRequest&)` as an invoker (tests, in-process compilers).
template <class F>
    requires std::is_invocable_r_v<CompileResult, F&, const CompileRequest&>
class FunctionInvoker {
public:
    explicit FunctionInvoker(F f) : f_(std::move(f)) {}
    CompileResult compile(const CompileRequest& r) { return f_(r); }

private:
    F f_;
};

static_assert(OpCompilerInvoker<ProcessInvoker>);

}  // namespace skc
