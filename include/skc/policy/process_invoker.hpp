// skc/policy/process_invoker.hpp: ProcessInvoker, the invoker (invoker.hpp) that runs an external
// kernel compiler.
//
// It runs the compiler with docs/spec.md section 8's command line,
//     <compiler> [fixed args] -p <json_dir> -v <device> -j <jobs> -o <out> [-l <level>] [extra args]
// through posix_spawn (never a shell, so no argument is ever interpreted), in a process group of
// its own, with stdin from /dev/null and stdout and stderr into one pipe, which skc copies as it
// comes into a log file in the output folder (so any amount of output is fine, and the log holds
// all of it), looking for progress lines on the way. It waits on a pidfd and the pipe with the
// timeout, so the wait ends the moment the compiler does. On timeout the whole process group gets
// SIGTERM, then SIGKILL after a grace period; after any end, what is left of the group is killed,
// so no compiler process outlives the call. A non-zero exit, a death by signal, a timeout, or no
// new `*.run` in the output folder is an skc::Error that quotes the last lines of the log.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../detail/process.hpp"
#include "../detail/unique_fd.hpp"
#include "../error.hpp"
#include "../options.hpp"
#include "invoker.hpp"

namespace skc {

namespace detail {

inline std::set<std::filesystem::path> run_files(const std::filesystem::path& dir) {
    std::set<std::filesystem::path> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
        if (e.path().extension() == ".run") out.insert(e.path());
    return out;
}

/// Cuts output into lines and hands the progress lines whose `done` is above the last one's to a
/// callback. Keeps at most one line's worth of bytes, and none of a line that cannot be one.
class ProgressScanner {
public:
    explicit ProgressScanner(const ProgressCallback& report) : report_(report) {}

    void feed(std::string_view bytes) {
        while (!bytes.empty()) {
            const std::size_t nl = bytes.find('\n');
            if (!ignore_) {
                const std::string_view part = bytes.substr(0, nl);
                constexpr std::string_view prefix = "skc-progress: ";
                if (line_.size() + part.size() > max_progress_line + 1) {  // + 1: a carriage return
                    ignore_ = true;
                } else {
                    line_.append(part);
                    const std::size_t n = std::min(line_.size(), prefix.size());
                    ignore_ = line_.compare(0, n, prefix, 0, n) != 0;
                }
                if (ignore_) line_.clear();
            }
            if (nl == std::string_view::npos) return;
            end_line();
            bytes.remove_prefix(nl + 1);
        }
    }

    /// The end of the output: a last line without a line feed counts too.
    void finish() { end_line(); }

private:
    void end_line() {
        if (!ignore_ && !line_.empty())
            if (const std::optional<ProgressLine> p = parse_progress_line(line_)) report_(p->done, p->total, p->op);
        line_.clear();
        ignore_ = false;
    }

    ProgressFilter report_;
    std::string line_;
    bool ignore_ = false;  // the rest of this line is not a progress line
};

/// The compiler's output as run_child() reads it from the pipe: written to the log and, when there
/// is a callback, scanned for progress lines. Owns the log's descriptor.
class OutputCopier {
public:
    OutputCopier(int log_fd, const ProgressCallback& report)
        : log_(log_fd), scanner_(report), scan_(static_cast<bool>(report)) {}

    /// A piece of the output.
    void take(std::string_view chunk) {
        write_log(chunk);
        if (!log_ok_) {  // what the log cannot keep is still quoted in errors: the last 8 KiB
            tail_.append(chunk);
            if (tail_.size() > 8192) tail_.erase(0, tail_.size() - 8192);
        }
        if (scan_) scanner_.feed(chunk);
    }

    /// The end of the output (a last line without a line feed is scanned too).
    void finish() {
        if (scan_) scanner_.finish();
    }

    /// Why the log could not be written (an errno value; 0 when it could), and what the compiler
    /// printed since then (its last 8 KiB), for the error message.
    [[nodiscard]] int log_error() const noexcept { return log_error_; }
    [[nodiscard]] const std::string& unlogged_tail() const noexcept { return tail_; }

private:
    /// The log gets every byte; when it cannot be written (a full disk) the rest is kept in memory
    /// (the tail) and the compile goes on, as it would have for a compiler writing the log itself.
    void write_log(std::string_view chunk) {
        while (!chunk.empty() && log_ok_) {
            const ssize_t w = ::write(log_.get(), chunk.data(), chunk.size());
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                log_ok_ = false;
                log_error_ = w < 0 ? errno : ENOSPC;
                tail_.assign(chunk);
                break;
            }
            chunk.remove_prefix(static_cast<std::size_t>(w));
        }
    }

    UniqueFd log_;
    ProgressScanner scanner_;
    bool scan_;
    bool log_ok_ = true;
    int log_error_ = 0;
    std::string tail_;
};

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
        detail::OutputCopier copier(log_fd, r.on_progress);

        const auto t0 = std::chrono::steady_clock::now();
        detail::ChildOptions opt;
        opt.search_path = !compiler_.has_parent_path();
        opt.on_output = [&copier](std::string_view chunk) { copier.take(chunk); };
        opt.deadline = t0 + r.timeout;
        opt.term_grace = kill_grace_;
        const detail::ChildRun run = detail::run_child(command(r), opt);
        if (run.fault == detail::ChildRun::Fault::pipe)
            throw Error(Errc::io_error,
                        std::string("cannot create a pipe for the compiler's output: ") + std::strerror(run.error));
        if (run.fault == detail::ChildRun::Fault::spawn)
            throw Error(run.error == ENOENT ? Errc::invalid_argument : Errc::io_error,
                        "cannot start the compiler: " + std::string(std::strerror(run.error)),
                        ErrorContext{compiler_.string(), {}, {}});
        copier.finish();  // the log is complete before it is quoted
        res.elapsed = std::chrono::steady_clock::now() - t0;

        const int status = run.status;
        if (!run.finished)
            fail(Errc::timeout,
                 "the compiler did not finish within " + std::to_string(r.timeout.count()) +
                     " s; its process group was killed",
                 res.log, copier);
        if (WIFSIGNALED(status))
            fail(Errc::compiler_killed, "the compiler was killed by " + detail::signal_name(WTERMSIG(status)), res.log,
                 copier);
        if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
            fail(Errc::compile_failed, "the compiler exited with status " + std::to_string(WEXITSTATUS(status)),
                 res.log, copier);

        std::vector<std::filesystem::path> fresh;
        for (const auto& p : detail::run_files(r.output_dir))
            if (before.count(p) == 0) fresh.push_back(p);
        if (fresh.empty())
            fail(Errc::compile_failed,
                 "the compiler exited with status 0 but wrote no *.run package in " + r.output_dir.string(), res.log,
                 copier);
        std::sort(fresh.begin(), fresh.end(), [](const auto& a, const auto& b) {
            std::error_code e1, e2;
            return std::filesystem::last_write_time(a, e1) < std::filesystem::last_write_time(b, e2);
        });
        res.package = fresh.back();
        return res;
    }

private:
    /// Error(code) saying `what` and quoting the end of the compiler's output: from its log, or, when
    /// the log could not be written (a full disk), from memory, with why.
    [[noreturn]] static void fail(Errc code, const std::string& what, const std::filesystem::path& log,
                                  const detail::OutputCopier& copier) {
        std::string tail = detail::tail_of(log);
        if (copier.log_error() != 0) {
            std::string kept = copier.unlogged_tail();
            while (!kept.empty() && kept.back() == '\n') kept.pop_back();
            if (const std::size_t cut = kept.size() > 4096 ? kept.find('\n', kept.size() - 4096) : std::string::npos;
                cut != std::string::npos)
                kept.erase(0, cut + 1);
            throw Error(code,
                        what + " (its log could not be written: " + std::strerror(copier.log_error()) + ")" +
                            (kept.empty() ? std::string() : ". Last lines of its output:\n" + kept),
                        ErrorContext{log.string(), {}, {}});
        }
        throw Error(code,
                    what + (tail.empty() ? std::string(" (its log is empty)") : ". Last lines of its log:\n" + tail),
                    ErrorContext{log.string(), {}, {}});
    }

    std::filesystem::path compiler_;
    std::vector<std::string> fixed_args_;
    std::chrono::milliseconds kill_grace_;
};

static_assert(OpCompilerInvoker<ProcessInvoker>);

}  // namespace skc
