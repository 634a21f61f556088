// A child forked while the op info folders of a compile are being written. Run without the
// sanitizers: clang 14's AddressSanitizer allocator is not fork-safe (a child forked while another
// thread holds its lock waits for it forever), which glibc's malloc, what a user's process forks
// with, is.
#include <doctest/doctest.h>

#include <skc/compiler.hpp>
#include <skc/op_info_io.hpp>

#include "compiler_fixtures.hpp"
#include "packing_compiler.hpp"
#include "test_support.hpp"

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace skc_session_fork_test {

namespace {

namespace fs = std::filesystem;
using FsNoInstall = skc::StaticKernelCompiler<skc_test::Inv, skc::FilesystemStorage, skc::FileLock, skc::NoInstall>;
using skc_test::many_ops;
using skc_test::options_for;
using skc_test::PackingCompiler;
using skc_test::settings_for;
using skc_test::TempDir;

}  // namespace

TEST_CASE("op info folders: a child forked while they are written neither waits for nor writes the parent's") {
    TempDir tmp;
    PackingCompiler pc;
    const std::vector<skc::OpRecord> ops = many_ops(2000);
    FsNoInstall compiler(pc.invoker(), options_for(tmp.path()), settings_for({}));
    skc::process_compiled().clear();
    (void)compiler.compile(ops);  // the miss
    compiler.flush();
    skc::process_compiled().clear();
    const skc::CompileReport hit = compiler.compile(ops);  // its folders are being written now
    REQUIRE(hit.outcome == skc::CompileOutcome::hit);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::alarm(60);  // a deadlock ends the child instead of the test
        int status = 0;
        try {
            compiler.flush();  // nothing of its own to wait for
            skc::process_compiled().clear();
            const skc::CompileReport mine = compiler.compile(many_ops(10));  // its own, written by its own thread
            compiler.flush();
            std::size_t n = 0;
            for ([[maybe_unused]] const auto& e :
                 fs::directory_iterator(mine.run_dir / (std::to_string(::getpid()) + "_debug")))
                ++n;
            status = n == 10 ? 0 : 5;
        } catch (...) {
            status = 6;
        }
        ::_exit(status);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    compiler.flush();
    CHECK(skc::read_op_info_dir(hit.run_dir / (std::to_string(::getpid()) + "_debug")).ops.size() == 2000);
}

}  // namespace skc_session_fork_test
