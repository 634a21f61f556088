// skc/run_package.hpp: whether a file is a whole, intact makeself run package (docs/run-package.md).
//
// Two checks, cheapest first:
//   header   our own: the makeself header's `skip` (its length in lines) and `filesizes` (the
//            archive's length) must add up to the file's size. A package cut short by a full disk
//            (makeself 2.4 exits 0 after `cat: write error`) fails here without running anything.
//   makeself the package's own `--check` (its CRC and MD5 sums over the archive), run with posix_spawn
//            as `<shell> <package> --check`, bounded in time.
// A package is checked before the cache stores it and whenever its install fails on a hit; `skc
// cache verify` checks every stored package this way.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "detail/process.hpp"
#include "detail/text.hpp"
#include "detail/unique_fd.hpp"

namespace skc {

/// Why `head`, the start of a makeself package whose whole size is `file_size` bytes, is not the
/// start of a whole package, or nullopt. `head` must hold the header (its first `skip` lines); a
/// shorter `head` is a fault only when `file_size` says the header is cut short too.
inline std::optional<std::string> run_package_header_fault(std::string_view head, std::uint64_t file_size) {
    if (head.substr(0, 2) != "#!") return "not a makeself run package (it does not start with \"#!\")";
    // Read in part: the last line may be cut short (a value that reads differently), so only whole
    // lines count.
    if (file_size > head.size()) head = head.substr(0, head.rfind('\n') + 1);
    // The header's variables, each on a line of its own: name="value".
    auto variable = [&](std::string_view name) -> std::optional<std::string_view> {
        std::size_t pos = 0;
        while (pos < head.size()) {
            std::size_t end = head.find('\n', pos);
            if (end == std::string_view::npos) end = head.size();
            const std::string_view line = head.substr(pos, end - pos);
            if (line.size() > name.size() + 2 && line.substr(0, name.size()) == name && line[name.size()] == '=' &&
                line[name.size() + 1] == '"' && line.back() == '"')
                return line.substr(name.size() + 2, line.size() - name.size() - 3);
            pos = end + 1;
        }
        return std::nullopt;
    };
    const std::optional<std::string_view> skip_text = variable("skip");
    const std::optional<std::string_view> sizes_text = variable("filesizes");
    if (!skip_text || !sizes_text) {
        if (file_size > head.size()) return std::nullopt;  // the caller read too little to tell
        return "no skip or filesizes line in its " + std::to_string(file_size) +
               " bytes: not a makeself run package, or one cut short in its header";
    }
    std::uint64_t skip = 0;
    if (!detail::parse_u64(*skip_text, skip) || skip == 0 || skip > 1'000'000)
        return "the makeself header's skip=\"" + std::string(*skip_text) + "\" is not a line count";
    std::uint64_t archive = 0;
    for (std::string_view part : detail::split(*sizes_text, ' ')) {
        std::uint64_t n = 0;
        if (part.empty()) continue;
        if (!detail::parse_u64(part, n) || n > (std::uint64_t{1} << 50))
            return "the makeself header's filesizes=\"" + std::string(*sizes_text) + "\" is not a list of sizes";
        archive += n;
    }
    std::uint64_t header = 0, lines = 0;
    for (std::size_t pos = 0; lines < skip; ++lines) {
        const std::size_t nl = head.find('\n', pos);
        if (nl == std::string_view::npos) {
            if (file_size > head.size()) return std::nullopt;  // the caller read too little to tell
            return "the package is " + std::to_string(file_size) + " bytes, shorter than its own " +
                   std::to_string(skip) + "-line header: it was cut short";
        }
        pos = nl + 1;
        header = pos;
    }
    if (header + archive != file_size)
        return "the package is " + std::to_string(file_size) + " bytes, its makeself header says " +
               std::to_string(header + archive) + " (" + std::to_string(header) + " of header and " +
               std::to_string(archive) + " of archive)" +
               (file_size < header + archive ? ": it was cut short (a write error while it was made?)" : "");
    return std::nullopt;
}

/// Why `package` is not a whole, intact makeself run package, or nullopt: the header check above,
/// then the package's own `--check`, run with `shell` and ended after `timeout`.
inline std::optional<std::string> run_package_fault(const std::filesystem::path& package,
                                                    const std::filesystem::path& shell = "/bin/sh",
                                                    std::chrono::seconds timeout = std::chrono::seconds(300)) {
    constexpr std::size_t head_max = std::size_t{1} << 20;
    {
        const detail::UniqueFd fd(::open(package.c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd) return std::string("cannot read the package: ") + std::strerror(errno);
        struct stat st {};
        if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return "the package is not a regular file";
        std::string head(std::min<std::uint64_t>(static_cast<std::uint64_t>(st.st_size), head_max), '\0');
        std::size_t got = 0;
        while (got < head.size()) {
            const ssize_t n = ::pread(fd.get(), head.data() + got, head.size() - got, static_cast<off_t>(got));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            got += static_cast<std::size_t>(n);
        }
        head.resize(got);
        if (auto fault = run_package_header_fault(head, static_cast<std::uint64_t>(st.st_size))) return fault;
    }
    // makeself's own check, its output kept in memory for the message.
    const detail::MemoryLog log;
    if (log.fd() < 0) return std::string("cannot check the package: memfd_create failed: ") + std::strerror(errno);
    const std::vector<std::string> args{shell.string(), std::filesystem::absolute(package).string(), "--check"};
    detail::ChildOptions run;
    run.output_fd = log.fd();
    run.deadline = std::chrono::steady_clock::now() + timeout;
    const detail::ChildRun r = detail::run_child(args, run);
    if (r.fault != detail::ChildRun::Fault::none)
        return "cannot run " + shell.string() + " to check the package: " + std::strerror(r.error);
    std::string out = log.tail(10);
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    const std::string said = out.empty() ? std::string() : ": " + out;
    if (!r.finished)
        return "makeself's integrity check did not finish within " + std::to_string(timeout.count()) + " s";
    if (WIFSIGNALED(r.status))
        return "makeself's integrity check was killed by " + detail::signal_name(WTERMSIG(r.status));
    if (WEXITSTATUS(r.status) != 0)
        return "makeself's integrity check failed (status " + std::to_string(WEXITSTATUS(r.status)) + ")" + said;
    return std::nullopt;
}

}  // namespace skc
