// Test helpers: running programs without a shell, and building real makeself run packages in the
// format of docs/run-package.md. Not part of skc.
#pragma once

#include <doctest/doctest.h>

#include <cstdio>
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

/// Runs argv (no shell, PATH searched) with stdout and stderr to `log`; returns the exit status,
/// or 128 + signal.
inline int run(const std::vector<std::string>& args, const std::filesystem::path& log) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    ::posix_spawn_file_actions_init(&fa);
    ::posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid = -1;
    const int rc = ::posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    ::posix_spawn_file_actions_destroy(&fa);
    REQUIRE(rc == 0);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {}
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// A 32-hex digest made from a number.
inline std::string digest_of(int i) {
    char buf[33];
    std::snprintf(buf, sizeof buf, "%032x", i);
    return buf;
}

struct PackagedKernel {
    std::string digest, op_type, file, content;
};

/// Builds `<out>/<stem>.run` holding an index for `kernels` and their files (a file is written only
/// when it has content and no "..").
inline std::filesystem::path make_package(const std::filesystem::path& out, const std::string& stem,
                                          const std::vector<PackagedKernel>& kernels,
                                          const std::string& device = "dev0") {
    namespace fs = std::filesystem;
    const fs::path src = out / ("src-" + stem);
    fs::create_directories(src / "kernels");
    std::string index =
        R"({"format": "skc-run-package", "version": 1, "backend": "host", "device": ")" + device + R"(", "kernels": [)";
    for (std::size_t i = 0; i < kernels.size(); ++i) {
        const PackagedKernel& k = kernels[i];
        index += (i ? ", " : "") + std::string(R"({"digest": ")") + k.digest + R"(", "op_type": ")" + k.op_type +
                 R"(", "file": ")" + k.file + R"(", "symbol": "sym_)" + stem + "_" + std::to_string(i) + R"("})";
        if (!k.content.empty() && k.file.find("..") == std::string::npos) {
            fs::create_directories((src / k.file).parent_path());
            spit(src / k.file, k.content);
        }
    }
    index += "]}\n";
    spit(src / "binary_info_config.json", index);
    spit(src / "setup.sh", "#!/bin/sh\nexit 0\n");
    fs::permissions(src / "setup.sh", fs::perms::owner_all, fs::perm_options::add);
    const fs::path pkg = out / (stem + ".run");
    REQUIRE(run({"makeself", "--quiet", "--nox11", src.string(), pkg.string(), "skc test " + stem, "./setup.sh"},
                out / ("makeself-" + stem + ".log")) == 0);
    fs::remove_all(src);
    return pkg;
}

}  // namespace skc_test
