// skc/compiler_check.hpp: the kernel compiler's fingerprint, a part of the cache key.
//
// A rebuilt compiler under an unchanged toolchain version must miss: the cache key holds a
// fingerprint of the compiler, taken as ccache's `compiler_check` option takes it:
//   content       a hash of the compiler executable's bytes (the default). Remembered per path, size
//                 and modification time in a small file beside the cache, so a compiler is hashed
//                 once, not on every run. An identical copy at another path has the same one.
//   mtime         the executable's size and modification time (cheap; a copy that keeps them hits).
//   none          nothing: only the toolchain version tells compilers apart.
//   string:TEXT   TEXT, e.g. a version the user manages.
//   command:CMD   what `/bin/sh -c CMD` prints, its standard output and error as one stream (with
//                 %compiler% replaced by the compiler's path), for a compiler that is a wrapper
//                 (`command:%compiler% --version`); a command that fails, or runs longer than a
//                 minute, is an error.
#pragma once

#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "detail/atomic_file.hpp"
#include "detail/hash.hpp"
#include "detail/process.hpp"
#include "detail/text.hpp"
#include "detail/unique_fd.hpp"
#include "error.hpp"
#include "options.hpp"

namespace skc {

namespace detail {

/// `compiler` as run: a name without '/' is looked up in PATH, as posix_spawnp does.
inline std::filesystem::path resolve_program(const std::filesystem::path& compiler) {
    if (compiler.has_parent_path()) return compiler;
    const char* path = std::getenv("PATH");
    std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
    while (true) {
        const std::size_t colon = dirs.find(':');
        const std::filesystem::path candidate =
            std::filesystem::path(dirs.substr(0, colon).empty() ? "." : std::string(dirs.substr(0, colon))) / compiler;
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
        if (colon == std::string_view::npos) break;
        dirs.remove_prefix(colon + 1);
    }
    throw Error(Errc::invalid_argument, "the compiler was not found in PATH", ErrorContext{compiler.string(), {}, {}});
}

inline struct stat stat_compiler(const std::filesystem::path& p) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0)
        throw Error(errno == EACCES ? Errc::permission_denied : Errc::io_error,
                    std::string("cannot inspect the compiler: ") + std::strerror(errno),
                    ErrorContext{p.string(), {}, {}});
    return st;
}

inline std::int64_t mtime_ns(const struct stat& st) {
    return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

/// The hash of a file's bytes, read in 1 MiB chunks (following symbolic links: compilers often are).
inline Digest hash_file(const std::filesystem::path& p) {
    const UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd)
        throw Error(errno == EACCES ? Errc::permission_denied : Errc::io_error,
                    std::string("cannot read the compiler: ") + std::strerror(errno), ErrorContext{p.string(), {}, {}});
    Hasher h;
    std::string buf(std::size_t{1} << 20, '\0');
    for (;;) {
        const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int err = errno;
            throw Error(Errc::io_error, std::string("cannot read the compiler: ") + std::strerror(err),
                        ErrorContext{p.string(), {}, {}});
        }
        if (n == 0) break;
        h.update(std::string_view(buf.data(), static_cast<std::size_t>(n)));
    }
    return h.digest();
}

/// The remembered content fingerprints: one line per compiler, "<path hex> <size> <mtime_ns> <digest>".
inline std::optional<std::string> memo_lookup(const std::filesystem::path& memo, const std::string& line_prefix) {
    std::ifstream in(memo);
    std::string line;
    while (std::getline(in, line))
        if (line.size() == line_prefix.size() + 32 && line.compare(0, line_prefix.size(), line_prefix) == 0)
            return line.substr(line_prefix.size());
    return std::nullopt;
}

/// Adds or replaces the line of `path_hex`, keeping at most 64 compilers; written whole through an
/// AtomicFile (not fsync'd), so a reader sees the old file or the new one. Best effort: a memo is
/// only a shortcut.
inline void memo_store(const std::filesystem::path& memo, const std::string& path_hex, const std::string& line) {
    std::vector<std::string> lines{line};
    {
        std::ifstream in(memo);
        std::string l;
        while (std::getline(in, l) && lines.size() < 64)
            if (l.compare(0, path_hex.size() + 1, path_hex + " ") != 0 && !l.empty()) lines.push_back(l);
    }
    std::string text;
    for (const std::string& l : lines) text += l + '\n';
    try {
        AtomicFile out(memo, 0666);  // as a stream makes it: readable and writable as the umask allows
        out.write(text);
        out.commit(Durability::none);
    } catch (const Error&) {  // not remembered: the next run hashes the compiler again
    }
}

/// The standard output and error of `/bin/sh -c cmd`; Error when it fails or outlives `timeout`.
inline std::string command_output(const std::string& cmd, std::chrono::seconds timeout) {
    char tmpl[] = "/tmp/skc-compiler-check-XXXXXX";
    const UniqueFd fd(::mkstemp(tmpl));
    if (!fd) throw Error(Errc::io_error, std::string("cannot create a temporary file: ") + std::strerror(errno));
    ::unlink(tmpl);
    ChildOptions opt;
    opt.output_fd = fd.get();
    opt.deadline = std::chrono::steady_clock::now() + timeout;
    const ChildRun run = run_child({"/bin/sh", "-c", cmd}, opt);
    if (run.fault != ChildRun::Fault::none)
        throw Error(Errc::io_error, "cannot run the compiler check command: " + std::string(std::strerror(run.error)));
    if (!run.finished)
        throw Error(Errc::timeout, "the compiler check command ran longer than " + std::to_string(timeout.count()) +
                                       " s: " + quote(cmd, 200));
    std::string out;
    char buf[4096];
    for (off_t at = 0;;) {
        const ssize_t n = ::pread(fd.get(), buf, sizeof buf, at);
        if (n <= 0) break;
        out.append(buf, static_cast<std::size_t>(n));
        at += n;
    }
    const int status = run.status;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw Error(Errc::invalid_option,
                    "the compiler check command " + quote(cmd, 200) + " failed (" +
                        (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                           : signal_name(WTERMSIG(status))) +
                        "): " + quote(out.substr(0, 400), 400),
                    ErrorContext{{}, {}, "compiler_check"});
    return out;
}

}  // namespace detail

/// The fingerprint of `compiler` taken as `check` says, for the cache key: `content:<32 hex>`,
/// `mtime:<size>:<ns>`, `none`, `string:TEXT` or `command:<32 hex>` (of the command's output).
/// With `memo_dir` (an existing folder), content fingerprints are remembered there
/// (`compilers`) by path, size and modification time; with `memo` read_only they are looked up
/// there but not stored. Throws Error naming the compiler when it cannot be read.
enum class MemoAccess : unsigned char { read_write, read_only };
inline std::string compiler_fingerprint(const std::filesystem::path& compiler, const CompilerCheck& check,
                                        const std::filesystem::path& memo_dir = {},
                                        MemoAccess access = MemoAccess::read_write) {
    switch (check.mode) {
    case CompilerCheck::Mode::none: return "none";
    case CompilerCheck::Mode::string: return "string:" + check.text;
    case CompilerCheck::Mode::command: {
        std::string cmd = check.text;
        const std::string path = detail::resolve_program(compiler).string();
        for (std::size_t at = 0; (at = cmd.find("%compiler%", at)) != std::string::npos; at += path.size())
            cmd.replace(at, 10, path);
        return "command:" + detail::hash_bytes(detail::command_output(cmd, std::chrono::seconds(60))).hex();
    }
    case CompilerCheck::Mode::mtime: {
        const struct stat st = detail::stat_compiler(detail::resolve_program(compiler));
        return "mtime:" + std::to_string(st.st_size) + ":" + std::to_string(detail::mtime_ns(st));
    }
    case CompilerCheck::Mode::content: break;
    }
    std::error_code ec;
    std::filesystem::path path = detail::resolve_program(compiler);
    if (const std::filesystem::path canonical = std::filesystem::canonical(path, ec); !ec) path = canonical;
    const struct stat st = detail::stat_compiler(path);
    const std::string path_hex = detail::hash_bytes(path.string()).hex();
    const std::string prefix =
        path_hex + " " + std::to_string(st.st_size) + " " + std::to_string(detail::mtime_ns(st)) + " ";
    const std::filesystem::path memo = memo_dir.empty() ? std::filesystem::path() : memo_dir / "compilers";
    if (!memo.empty())
        if (const std::optional<std::string> d = detail::memo_lookup(memo, prefix)) return "content:" + *d;
    const std::string digest = detail::hash_file(path).hex();
    if (!memo.empty() && access == MemoAccess::read_write) detail::memo_store(memo, path_hex, prefix + digest);
    return "content:" + digest;
}

}  // namespace skc
