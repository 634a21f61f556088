#include <doctest/doctest.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <skc/detail/install_holders.hpp>
#include <skc/detail/process.hpp>

#include "test_support.hpp"

namespace skc_detail_process_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using skc::detail::ChildOptions;
using skc::detail::ChildRun;
using skc::detail::run_child;

/// `/bin/sh -c script`, its output (stdout and stderr) captured through the pipe.
struct Captured {
    ChildRun run;
    std::string output;
};
Captured sh(const std::string& script, ChildOptions opt = {}) {
    Captured c;
    opt.on_output = [&c](std::string_view piece) { c.output.append(piece); };
    c.run = run_child({"/bin/sh", "-c", script}, opt);
    return c;
}

/// Whether process `pid` is gone (or a zombie) within `limit`.
bool gone_within(pid_t pid, std::chrono::milliseconds limit) {
    const auto until = Clock::now() + limit;
    while (skc::detail::process_start_time(pid).has_value()) {
        if (Clock::now() >= until) return false;
        std::this_thread::sleep_for(10ms);
    }
    return true;
}

TEST_CASE("run_child: the exit status, and stdout and stderr through the pipe") {
    const Captured ok = sh("printf 'out\\n'; printf 'err\\n' >&2; exit 0");
    CHECK(ok.run.fault == ChildRun::Fault::none);
    CHECK(ok.run.finished);
    REQUIRE(WIFEXITED(ok.run.status));
    CHECK(WEXITSTATUS(ok.run.status) == 0);
    CHECK(ok.output == "out\nerr\n");

    const Captured three = sh("exit 3");
    CHECK(three.run.finished);
    REQUIRE(WIFEXITED(three.run.status));
    CHECK(WEXITSTATUS(three.run.status) == 3);
    CHECK(three.output.empty());

    // Standard input is /dev/null: a reader gets end of file at once.
    const Captured in = sh("cat; echo done");
    CHECK(in.output == "done\n");

    // More than a pipe holds: all of it arrives, in order.
    const Captured big = sh("head -c 200000 /dev/zero | tr '\\0' x; echo end");
    CHECK(big.run.finished);
    CHECK(big.output == std::string(200000, 'x') + "end\n");
}

TEST_CASE("run_child: output into a descriptor (a memory file)") {
    const skc::detail::MemoryLog log;
    REQUIRE(log.fd() >= 0);
    ChildOptions opt;
    opt.output_fd = log.fd();
    const ChildRun run = run_child({"/bin/sh", "-c", "echo one; echo two >&2; exit 7"}, opt);
    CHECK(run.finished);
    REQUIRE(WIFEXITED(run.status));
    CHECK(WEXITSTATUS(run.status) == 7);
    CHECK(log.tail() == "one\ntwo");
}

TEST_CASE("run_child: a program that cannot start is a fault, with its errno value") {
    ChildOptions opt;
    opt.output_fd = STDERR_FILENO;
    const ChildRun missing = run_child({"/nonexistent/program"}, opt);
    CHECK(missing.fault == ChildRun::Fault::spawn);
    CHECK(missing.error == ENOENT);
    CHECK_FALSE(missing.finished);

    opt.search_path = true;
    const ChildRun not_in_path = run_child({"skc-no-such-program-anywhere"}, opt);
    CHECK(not_in_path.fault == ChildRun::Fault::spawn);
    CHECK(not_in_path.error == ENOENT);

    const ChildRun in_path = run_child({"true"}, opt);  // found in PATH
    CHECK(in_path.fault == ChildRun::Fault::none);
    CHECK(in_path.finished);
}

/// `script` run until a deadline 200 ms away, with `grace`: the signal that ended it, its output and
/// how long the run took.
struct Killed {
    int signal = 0;
    std::string output;
    Clock::duration took{};
};
Killed killed_at_deadline(const std::string& script, std::optional<std::chrono::milliseconds> grace) {
    ChildOptions opt;
    opt.deadline = Clock::now() + 200ms;
    opt.term_grace = grace;
    const auto t0 = Clock::now();
    const Captured c = sh(script, opt);
    Killed k;
    k.took = Clock::now() - t0;
    CHECK_FALSE(c.run.finished);
    if (WIFSIGNALED(c.run.status)) k.signal = WTERMSIG(c.run.status);
    k.output = c.output;
    return k;
}

TEST_CASE("run_child: at the deadline, SIGKILL at once, or SIGTERM and SIGKILL after the grace period") {
    const Killed at_once = killed_at_deadline("echo started; exec sleep 30", std::nullopt);
    CHECK(at_once.signal == SIGKILL);
    CHECK(at_once.output == "started\n");
    CHECK(at_once.took < 10s);

    // A child that ends on SIGTERM ends by it, without waiting out the grace period.
    const Killed on_term = killed_at_deadline("exec sleep 30", 10s);
    CHECK(on_term.signal == SIGTERM);
    CHECK(on_term.took < 9s);

    // A child that ignores SIGTERM gets SIGKILL when the grace period is over.
    const Killed ignoring = killed_at_deadline("trap '' TERM; echo ready; sleep 30; echo 'not killed'", 300ms);
    CHECK(ignoring.signal == SIGKILL);
    CHECK(ignoring.output == "ready\n");
    CHECK(ignoring.took >= 500ms);
    CHECK(ignoring.took < 10s);
}

TEST_CASE("run_child: what the child leaves running in its group is killed when it ends") {
    const Captured c = sh("sleep 30 & echo $!");
    CHECK(c.run.finished);
    REQUIRE(WIFEXITED(c.run.status));
    CHECK(WEXITSTATUS(c.run.status) == 0);
    const pid_t left = static_cast<pid_t>(std::stol(c.output));
    CHECK(gone_within(left, 5000ms));
}

TEST_CASE("run_child: the child's group goes down with a parent killed by SIGKILL") {
    skc_test::TempDir tmp;
    const fs::path pid_file = tmp / "pid";
    const pid_t parent = ::fork();
    REQUIRE(parent >= 0);
    if (parent == 0) {  // the parent of the child: runs it, and is killed while it waits
        ChildOptions opt;
        opt.output_fd = STDERR_FILENO;
        opt.deadline = Clock::now() + 60s;
        const std::string script = "echo $$ > " + pid_file.string() + ".tmp && mv " + pid_file.string() + ".tmp " +
                                   pid_file.string() + " && exec sleep 60";
        (void)run_child({"/bin/sh", "-c", script}, opt);
        std::_Exit(0);
    }
    const auto until = Clock::now() + 10s;
    while (!fs::exists(pid_file) && Clock::now() < until) std::this_thread::sleep_for(10ms);
    REQUIRE(fs::exists(pid_file));
    const pid_t child = static_cast<pid_t>(std::stol(skc_test::slurp(pid_file)));
    CHECK(skc::detail::process_start_time(child).has_value());
    REQUIRE(::kill(parent, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(parent, &status, 0) == parent);
    CHECK(WIFSIGNALED(status));
    CHECK(gone_within(child, 5000ms));         // its guard sent the group SIGTERM
    const auto reaped_by = Clock::now() + 5s;  // nothing is left of the group once init has reaped it
    while (::kill(-child, 0) == 0 && Clock::now() < reaped_by) std::this_thread::sleep_for(10ms);
    errno = 0;
    CHECK(::kill(-child, 0) != 0);
    CHECK(errno == ESRCH);
}

namespace {
volatile sig_atomic_t alarms = 0;
void on_alarm(int) { alarms = alarms + 1; }
}  // namespace

TEST_CASE("run_child: signals that interrupt its waits change nothing") {
    struct sigaction sa {
    }, old{};
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: every wait is interrupted
    REQUIRE(::sigaction(SIGALRM, &sa, &old) == 0);
    itimerval every{{0, 2000}, {0, 2000}};
    REQUIRE(::setitimer(ITIMER_REAL, &every, nullptr) == 0);
    const Captured c = sh("sleep 0.3; echo done; exit 4");
    itimerval off{};
    ::setitimer(ITIMER_REAL, &off, nullptr);
    ::sigaction(SIGALRM, &old, nullptr);
    CHECK(alarms > 0);
    CHECK(c.run.finished);
    REQUIRE(WIFEXITED(c.run.status));
    CHECK(WEXITSTATUS(c.run.status) == 4);
    CHECK(c.output == "done\n");
}

TEST_CASE("run_child: an output sink that throws ends the child's group before the error propagates") {
    pid_t child = -1;
    ChildOptions opt;
    opt.deadline = Clock::now() + 60s;
    opt.on_output = [&child](std::string_view piece) {
        child = static_cast<pid_t>(std::stol(std::string(piece)));
        throw std::runtime_error("no room for the output");
    };
    CHECK_THROWS_WITH_AS(run_child({"/bin/sh", "-c", "echo $$; exec sleep 60"}, opt), "no room for the output",
                         std::runtime_error);
    REQUIRE(child > 0);
    CHECK(gone_within(child, 5000ms));
}

}  // namespace skc_detail_process_test
