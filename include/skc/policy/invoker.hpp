// skc/policy/invoker.hpp: the OpCompilerInvoker concept, what it is given and returns, and the
// kernel compiler's progress lines. Its models: ProcessInvoker (process_invoker.hpp), which runs an
// external compiler, and FunctionInvoker (below), any callable.
//
// An invoker turns a folder of op info files into one run package. A compiler may report progress
// with lines `skc-progress: <done>/<total> <op>` (docs/file-formats.md "Progress lines"); each
// well-formed one goes to CompileRequest::on_progress.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../error.hpp"
#include "../options.hpp"

namespace skc {

/// Told by the kernel compiler's progress lines: `done` of `total` op info files are done, `op` is
/// the file name of the one just done (empty when the line names none).
using ProgressCallback = std::function<void(std::size_t done, std::size_t total, std::string_view op)>;

/// What to compile and how: the command line of docs/spec.md section 8.
struct CompileRequest {
    std::filesystem::path json_dir;       // -p: the op info files to compile
    std::string device;                   // -v
    unsigned jobs = 1;                    // -j
    std::filesystem::path output_dir;     // -o: where the package (and the log) go
    std::optional<LogLevel> log_level;    // -l
    std::vector<std::string> extra_args;  // options that change the kernels, passed last
    std::chrono::seconds timeout{3600};
    /// Called with each well-formed progress line the compiler prints whose `done` is above the
    /// last one reported (so `done` strictly increases), while it runs, from the thread that runs
    /// compile(). Empty: output is not looked at. What it throws is caught and ignored.
    ProgressCallback on_progress;
};

/// A progress line of a kernel compiler (docs/file-formats.md, "Progress lines").
struct ProgressLine {
    std::size_t done = 0;
    std::size_t total = 0;
    std::string op;  // the op info file's name; empty when the line has none
};

/// The longest progress line, in bytes before its line feed; longer lines are ordinary output.
inline constexpr std::size_t max_progress_line = 4096;

/// `line` (without its line feed; a trailing carriage return is allowed) as a progress line:
/// `skc-progress: <done>/<total>`, optionally followed by a space and the op info file's name, with
/// `done` and `total` plain decimal numbers of at most 18 digits, 0 <= done <= total, 1 <= total,
/// at most max_progress_line bytes in all. Anything else is nullopt: ordinary output.
inline std::optional<ProgressLine> parse_progress_line(std::string_view line) {
    constexpr std::string_view prefix = "skc-progress: ";
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > max_progress_line || line.substr(0, prefix.size()) != prefix) return std::nullopt;
    line.remove_prefix(prefix.size());
    auto number = [&](std::uint64_t& v) {
        std::size_t n = 0;
        v = 0;
        for (; n < line.size() && line[n] >= '0' && line[n] <= '9'; ++n) {
            if (n == 18) return false;
            v = v * 10 + static_cast<std::uint64_t>(line[n] - '0');
        }
        line.remove_prefix(n);
        return n > 0;
    };
    std::uint64_t done = 0, total = 0;
    if (!number(done) || line.empty() || line.front() != '/') return std::nullopt;
    line.remove_prefix(1);
    if (!number(total) || total == 0 || done > total) return std::nullopt;
    if (!line.empty() && line.front() != ' ') return std::nullopt;
    ProgressLine p{static_cast<std::size_t>(done), static_cast<std::size_t>(total), {}};
    if (!line.empty()) p.op = std::string(line.substr(1));
    return p;
}

struct CompileResult {
    std::filesystem::path package;  // the new `*.run` in output_dir
    std::filesystem::path log;      // the compiler's output
    std::chrono::nanoseconds elapsed{0};
};

/// The requirements of an invoker, one concept each: OpCompilerInvoker is their conjunction and
/// diagnose_invoker() names each one a type misses.
namespace detail {
template <class I>
concept invoker_compile = requires(I& i, const CompileRequest& r) {
    i.compile(r);
};
template <class I>
concept invoker_compile_gives_result = requires(I& i, const CompileRequest& r) {
    { i.compile(r) } -> std::same_as<CompileResult>;
};
}  // namespace detail

template <class I>
concept OpCompilerInvoker = detail::invoker_compile<I> && detail::invoker_compile_gives_result<I>;

namespace detail {

/// One message per requirement of OpCompilerInvoker that `I` misses (a host calls it in one line).
template <class I>
consteval bool diagnose_invoker() {
    static_assert(invoker_compile<I>,
                  "skc: the Invoker policy needs a member `CompileResult compile(const CompileRequest&)`");
    static_assert(invoker_compile_gives_result<I>,
                  "skc: the Invoker's `compile(const CompileRequest&)` must return CompileResult");
    return true;
}

}  // namespace detail

namespace detail {

/// What every invoker promises of CompileRequest::on_progress: only reports whose `done` is above
/// the last one's reach it, and what it throws is caught and ignored (a progress report is never
/// worth a failed compile).
class ProgressFilter {
public:
    explicit ProgressFilter(ProgressCallback report) : report_(std::move(report)) {}

    void operator()(std::size_t done, std::size_t total, std::string_view op) {
        if (!report_ || (any_ && done <= last_)) return;
        any_ = true;
        last_ = done;
        try {
            report_(done, total, op);
        } catch (...) {}
    }

private:
    ProgressCallback report_;
    bool any_ = false;
    std::size_t last_ = 0;
};

}  // namespace detail

/// What the host uses of an invoker when it has it.
template <class I>
struct InvokerTraits {
    /// The compiler program the invoker runs (ProcessInvoker::compiler_path()), whose fingerprint
    /// joins the cache key (compiler_check.hpp); nullopt for an invoker that runs none.
    static std::optional<std::filesystem::path> compiler_path(const I& i) {
        if constexpr (requires {
                          { i.compiler_path() } -> std::convertible_to<std::filesystem::path>;
                      })
            return std::filesystem::path(i.compiler_path());
        else return std::nullopt;
    }
};

/// Any callable `CompileResult(const CompileRequest&)` as an invoker (tests, in-process compilers).
template <class F>
requires std::is_invocable_r_v<CompileResult, F&, const CompileRequest&>
class FunctionInvoker {
public:
    explicit FunctionInvoker(F f) : f_(std::move(f)) {}
    /// Calls the function with the request, its on_progress kept to what CompileRequest promises
    /// (detail::ProgressFilter).
    CompileResult compile(const CompileRequest& r) {
        if (!r.on_progress) return f_(r);
        CompileRequest filtered = r;
        filtered.on_progress = [filter = std::make_shared<detail::ProgressFilter>(r.on_progress)](
                                   std::size_t done, std::size_t total, std::string_view op) {
            (*filter)(done, total, op);
        };
        return f_(filtered);
    }

private:
    F f_;
};

}  // namespace skc
