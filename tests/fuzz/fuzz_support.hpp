// tests/fuzz/fuzz_support.hpp: what the fuzz harnesses share.
//
// FUZZ_CHECK(cond) traps (a crash libFuzzer reports, with the input) when a property does not hold,
// after printing which one. scratch() is a folder for this process's files, made once below the
// system's temporary folder ($TMPDIR, else /tmp) and removed when the process exits normally.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

#define FUZZ_CHECK(cond)                                                 \
    do {                                                                 \
        if (!(cond)) ::fuzz::property_failed(#cond, __FILE__, __LINE__); \
    } while (0)

namespace fuzz {

[[noreturn]] inline void property_failed(const char* what, const char* file, int line) {
    std::fprintf(stderr, "%s:%d: property does not hold: %s\n", file, line, what);
    __builtin_trap();
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
    return {reinterpret_cast<const char*>(data), size};
}

/// This process's scratch folder (created on first use, removed at exit).
inline const std::filesystem::path& scratch() {
    // Never destroyed: the exit hook below runs after static destructors would.
    static const std::filesystem::path* const dir = [] {
        std::error_code ec;
        std::filesystem::path base = std::filesystem::temp_directory_path(ec);
        if (ec) base = "/tmp";
        std::string templ = (base / "skc-fuzz-XXXXXX").string();
        if (::mkdtemp(templ.data()) == nullptr) {
            std::perror("mkdtemp");
            std::abort();
        }
        auto* p = new std::filesystem::path(templ);
        std::atexit([] {
            std::error_code e;
            std::filesystem::remove_all(scratch(), e);
        });
        return p;
    }();
    return *dir;
}

/// Replaces `p` with a new file holding `content`. No fsync (scratch files need no durability), and
/// no truncation of the old file either: some file systems flush a file rewritten in place.
inline void write_file(const std::filesystem::path& p, std::string_view content) {
    ::unlink(p.c_str());
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        std::perror(p.c_str());
        std::abort();
    }
    while (!content.empty()) {
        const ssize_t n = ::write(fd, content.data(), content.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            std::perror(p.c_str());
            std::abort();
        }
        content.remove_prefix(static_cast<std::size_t>(n));
    }
    ::close(fd);
}

/// An empty folder at `p` (whatever was there is removed).
inline void fresh_dir(const std::filesystem::path& p) {
    std::error_code ec;
    std::filesystem::remove_all(p, ec);
    std::filesystem::create_directories(p, ec);
    if (ec) {
        std::fprintf(stderr, "%s: %s\n", p.c_str(), ec.message().c_str());
        std::abort();
    }
}

/// `text` cut at the first occurrence of `sep`: the part before it, and `text` becomes the rest
/// (empty when there is no separator left).
inline std::string_view take_part(std::string_view& text, std::string_view sep) {
    const std::size_t at = text.find(sep);
    if (at == std::string_view::npos) {
        const std::string_view all = text;
        text = {};
        return all;
    }
    const std::string_view part = text.substr(0, at);
    text.remove_prefix(at + sep.size());
    return part;
}

/// `s` with every `from` replaced by `to`.
inline std::string replace_all(std::string_view s, std::string_view from, const std::string& to) {
    std::string out;
    for (std::size_t pos = 0;;) {
        const std::size_t at = s.find(from, pos);
        if (at == std::string_view::npos) {
            out.append(s.substr(pos));
            return out;
        }
        out.append(s.substr(pos, at - pos));
        out += to;
        pos = at + from.size();
    }
}

}  // namespace fuzz
