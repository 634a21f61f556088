// Test helper: runs a program as a user runs it, in a child process (posix_spawn, no shell), with
// stdin from /dev/null and its standard output and error captured. Not part of skc.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_support.hpp"

extern char** environ;

namespace skc_test {

struct Run {
    int status = -1;  // exit status, or 128 + signal
    std::string out;
    std::string err;
};

/// A started program whose output goes to files in `io`.
struct Started {
    pid_t pid = -1;
    std::filesystem::path io;  // holds stdout and stderr
};

/// Starts `program` with `args` in `cwd` (empty: the test's own), stdin from /dev/null, stdout and
/// stderr to `io`/stdout and `io`/stderr. `env` entries "NAME=value" replace or extend the test's
/// environment; "NAME=" alone removes NAME. With `own_group`, the program leads a process group of
/// its own (its pid), as a shell starts a job.
inline Started start_program(const std::string& program, const std::filesystem::path& cwd,
                             const std::vector<std::string>& args, const std::vector<std::string>& env,
                             const std::filesystem::path& io, bool own_group = false) {
    const std::string out_file = (io / "stdout").string(), err_file = (io / "stderr").string();
    posix_spawn_file_actions_t fa;
    REQUIRE(posix_spawn_file_actions_init(&fa) == 0);
    REQUIRE(posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0) == 0);
    REQUIRE(posix_spawn_file_actions_addopen(&fa, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644) == 0);
    REQUIRE(posix_spawn_file_actions_addopen(&fa, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644) == 0);
    if (!cwd.empty()) REQUIRE(posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str()) == 0);
    posix_spawnattr_t attr;
    REQUIRE(posix_spawnattr_init(&attr) == 0);
    if (own_group) {
        REQUIRE(posix_spawnattr_setpgroup(&attr, 0) == 0);
        REQUIRE(posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP) == 0);
    }
    std::vector<char*> argv{const_cast<char*>(program.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<std::string> env_strings;
    for (const std::string& mine : env)
        if (mine.back() != '=') env_strings.push_back(mine);
    for (char** e = environ; *e != nullptr; ++e) {
        bool replaced = false;
        for (const std::string& mine : env) {
            const std::size_t name_len = mine.find('=') + 1;
            replaced = replaced || std::strncmp(*e, mine.c_str(), name_len) == 0;
        }
        if (!replaced) env_strings.emplace_back(*e);
    }
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    Started st{-1, io};
    const int rc = posix_spawn(&st.pid, program.c_str(), &fa, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    REQUIRE(rc == 0);
    return st;
}

/// Waits for a started program and collects what it wrote.
inline Run finish(const Started& st) {
    int status = 0;
    while (::waitpid(st.pid, &status, 0) < 0) {}
    Run r;
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(st.io / "stdout");
    r.err = slurp(st.io / "stderr");
    return r;
}

/// Runs `program` with `args` in `cwd` to its end (see start_program).
inline Run run_program(const std::string& program, const std::filesystem::path& cwd,
                       const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    TempDir io;
    return finish(start_program(program, cwd, args, env, io.path()));
}

}  // namespace skc_test
