// Test helpers: temporary directories, file helpers and child processes. Not part of skc.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace skc_test {

/// A fresh directory under $TMPDIR (or /tmp), removed with everything in it at scope exit.
class TempDir {
public:
    TempDir() {
        const char* base = std::getenv("TMPDIR");
        std::string tmpl = std::string(base && *base ? base : "/tmp") + "/skc-test-XXXXXX";
        if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
        path_ = std::filesystem::canonical(tmpl);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    ~TempDir() {
        std::error_code ec;
        std::filesystem::permissions(path_, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
        std::filesystem::remove_all(path_, ec);
    }
    [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
    [[nodiscard]] std::filesystem::path operator/(std::string_view s) const { return path_ / s; }

private:
    std::filesystem::path path_;
};

inline std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void spit(const std::filesystem::path& p, std::string_view content) {
    std::ofstream out(p, std::ios::binary);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
}

/// Every path below `root` (files and folders), relative to it, with each file's content: two
/// snapshots compare equal exactly when nothing was added, removed or changed.
inline std::set<std::string> snapshot(const std::filesystem::path& root) {
    std::set<std::string> out;
    for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
        std::string line = std::filesystem::relative(e.path(), root).string();
        if (e.is_regular_file()) line += "=" + slurp(e.path());
        out.insert(line);
    }
    return out;
}

/// As snapshot(), with each object's modification time in nanoseconds and its mode: equal exactly
/// when nothing in the tree was written at all (a touch included).
inline std::set<std::string> snapshot_with_times(const std::filesystem::path& root) {
    std::set<std::string> out;
    for (const std::string& line : snapshot(root)) {
        const std::filesystem::path p = root / line.substr(0, line.find('='));
        struct stat st {};
        if (::lstat(p.c_str(), &st) != 0) continue;
        out.insert(line + " mode=" + std::to_string(st.st_mode) + " mtime=" + std::to_string(st.st_mtim.tv_sec) + "." +
                   std::to_string(st.st_mtim.tv_nsec));
    }
    return out;
}

/// Directory of the test data shipped with the sources.
inline std::filesystem::path data_dir() { return SKC_TEST_DATA_DIR; }
/// Directory of the example op info files shipped with the sources.
inline std::filesystem::path example_ops_dir() { return SKC_EXAMPLE_OPS_DIR; }

/// Runs `fn` in a forked child and returns its exit status (or 128 + signal).
template <class Fn>
int in_child(Fn&& fn) {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
        int rc = 1;
        try {
            rc = fn();
        } catch (...) {
            rc = 99;
        }
        std::_Exit(rc);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

}  // namespace skc_test
