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

/// Runs `program` with `args` in `cwd`. `env` entries (NAME=value) replace or extend the
/// environment of the test.
inline Run run_program(const std::string& program, const std::filesystem::path& cwd, const std::vector<std::string>& args,
                       const std::vector<std::string>& env = {}) {
    TempDir io;
    const std::string out_file = (io / "stdout").string(), err_file = (io / "stderr").string();
    posix_spawn_file_actions_t fa;
    REQUIRE(posix_spawn_file_actions_init(&fa) == 0);
    REQUIRE(posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0) == 0);
    REQUIRE(posix_spawn_file_actions_addopen(&fa, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644) == 0);
    REQUIRE(posix_spawn_file_actions_addopen(&fa, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644) == 0);
    REQUIRE(posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str()) == 0);
    std::vector<char*> argv{const_cast<char*>(program.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<std::string> env_strings = env;
    for (char** e = environ; *e != nullptr; ++e) {
        const char* eq = std::strchr(*e, '=');
        const std::size_t name_len = eq ? static_cast<std::size_t>(eq - *e) + 1 : std::strlen(*e);
        bool replaced = false;
        for (const std::string& mine : env) replaced = replaced || mine.compare(0, name_len, *e, name_len) == 0;
        if (!replaced) env_strings.emplace_back(*e);
    }
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, program.c_str(), &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    REQUIRE(rc == 0);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    Run r;
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(out_file);
    r.err = slurp(err_file);
    return r;
}

}  // namespace skc_test
