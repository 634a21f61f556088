// The LockPolicy law suite, run over every shipped lock policy.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include <skc/policy/lock.hpp>

#include "test_support.hpp"

namespace skc_policy_lock_test {

using namespace std::chrono_literals;
using skc::LockMode;

namespace {

template <class L>
struct Fixture;

template <>
struct Fixture<skc::FileLock> {
    skc_test::TempDir dir;
    skc::FileLock make() { return skc::FileLock(dir.path()); }
};

template <>
struct Fixture<skc::ProcessLock> {
    skc::ProcessLock shared;  // copies share their locks
    skc::ProcessLock make() { return shared; }
};

}  // namespace

TEST_CASE_TEMPLATE("lock law: a granted lock owns, a moved-from guard does not, release frees", L, skc::FileLock,
                   skc::ProcessLock) {
    Fixture<L> fx;
    L a = fx.make();
    auto g = a.try_lock("name", LockMode::exclusive);
    CHECK(g.owns());
    auto moved = std::move(g);
    CHECK(moved.owns());
    CHECK_FALSE(g.owns());  // NOLINT: moved-from is empty by contract
    L b = fx.make();
    CHECK_FALSE(b.try_lock("name", LockMode::exclusive).owns());  // still held, by the moved-to guard
    moved.release();
    CHECK(b.try_lock("name", LockMode::exclusive).owns());
}

TEST_CASE("NoLock grants every lock at once: two exclusive ones on one name, and with a deadline already past") {
    skc::NoLock a, b;
    const auto g1 = a.try_lock("name", LockMode::exclusive);
    const auto g2 = b.try_lock("name", LockMode::exclusive);  // a real lock would refuse this one
    CHECK((g1.owns() && g2.owns()));
    const auto start = skc::LockClock::now();
    const auto g3 = a.lock_until("name", LockMode::exclusive, start - std::chrono::seconds(1));
    CHECK(g3.owns());
    CHECK(a.lock("name", LockMode::shared).owns());
    CHECK(skc::LockClock::now() - start < std::chrono::seconds(1));  // nothing waited
}

TEST_CASE_TEMPLATE("lock law: shared with shared; exclusive with nothing", L, skc::FileLock, skc::ProcessLock) {
    Fixture<L> fx;
    L a = fx.make();
    L b = fx.make();
    {
        auto s1 = a.try_lock("k", LockMode::shared);
        auto s2 = b.try_lock("k", LockMode::shared);
        CHECK(s1.owns());
        CHECK(s2.owns());
        CHECK_FALSE(b.try_lock("k", LockMode::exclusive).owns());
        CHECK(b.try_lock("other", LockMode::exclusive).owns());  // names are independent
    }
    {
        auto x = a.try_lock("k", LockMode::exclusive);
        CHECK(x.owns());
        CHECK_FALSE(b.try_lock("k", LockMode::shared).owns());
        CHECK_FALSE(b.try_lock("k", LockMode::exclusive).owns());
    }
    CHECK(b.try_lock("k", LockMode::exclusive).owns());  // all released
}

TEST_CASE_TEMPLATE("lock law: lock_until gives up at the deadline, not much later", L, skc::FileLock,
                   skc::ProcessLock) {
    Fixture<L> fx;
    L a = fx.make();
    L b = fx.make();
    auto held = a.lock("k", LockMode::exclusive);
    const auto t0 = skc::LockClock::now();
    auto g = b.lock_until("k", LockMode::shared, t0 + 150ms);
    const auto waited = skc::LockClock::now() - t0;
    CHECK_FALSE(g.owns());
    CHECK(waited >= 150ms);
    CHECK(waited < 150ms + 200ms);
}

TEST_CASE_TEMPLATE("lock law: a waiter gets the lock soon after it is released", L, skc::FileLock, skc::ProcessLock) {
    Fixture<L> fx;
    L a = fx.make();
    L b = fx.make();
    auto held = a.lock("k", LockMode::exclusive);
    std::atomic<bool> got{false};
    std::chrono::nanoseconds latency{};
    std::atomic<std::int64_t> released_at{0};
    std::thread waiter([&] {
        auto g = b.lock_until("k", LockMode::exclusive, skc::LockClock::now() + 5s);
        latency = skc::LockClock::now().time_since_epoch() - std::chrono::nanoseconds(released_at.load());
        got = g.owns();
    });
    std::this_thread::sleep_for(100ms);
    released_at = skc::LockClock::now().time_since_epoch().count();
    held.release();
    waiter.join();
    CHECK(got);
    CHECK(latency < 100ms);  // FileLock's backoff is capped at 2 ms; generous for a loaded machine
}

TEST_CASE_TEMPLATE("lock law: blocking lock() waits for the holder", L, skc::FileLock, skc::ProcessLock) {
    Fixture<L> fx;
    L a = fx.make();
    L b = fx.make();
    auto held = a.lock("k", LockMode::exclusive);
    std::atomic<bool> got{false};
    std::thread waiter([&] {
        auto g = b.lock("k", LockMode::exclusive);
        got = g.owns();
    });
    std::this_thread::sleep_for(50ms);
    CHECK_FALSE(got.load());
    held.release();
    waiter.join();
    CHECK(got);
}

TEST_CASE("FileLock: a holder that dies releases its lock") {
    skc_test::TempDir dir;
    skc::FileLock locks(dir.path());
    const std::filesystem::path ready = dir / "ready";
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        skc::FileLock mine(dir.path());
        auto g = mine.lock("k", LockMode::exclusive);
        skc_test::spit(ready, "1");
        for (;;) ::pause();
    }
    while (!std::filesystem::exists(ready)) std::this_thread::sleep_for(1ms);
    CHECK_FALSE(locks.try_lock("k", LockMode::exclusive).owns());
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK(locks.lock_until("k", LockMode::exclusive, skc::LockClock::now() + 2s).owns());
}

TEST_CASE("FileLock: files, names and the lock file being replaced") {
    skc_test::TempDir dir;
    skc::FileLock locks(dir.path());
    {
        auto g = locks.lock("sub/dir/k", LockMode::shared);
        CHECK(g.owns());
        CHECK(std::filesystem::exists(dir / "sub" / "dir" / "k.lock"));
    }
    CHECK_THROWS_WITH_AS(
        locks.lock("../escape", LockMode::shared),
        "lock name \"../escape\" is not accepted: use '/'-separated parts, none empty or starting with '.'",
        skc::Error);
    CHECK_THROWS_AS(locks.lock("", LockMode::shared), skc::Error);
    CHECK_THROWS_AS(locks.lock("a//b", LockMode::shared), skc::Error);

    // A lock file that is a symlink is refused, not followed.
    std::filesystem::create_symlink(dir / "elsewhere", dir / "link.lock");
    try {
        (void)locks.lock("link", LockMode::exclusive);
        FAIL("no error");
    } catch (const skc::Error& e) {
        CHECK(e.code() == skc::Errc::unsafe_path);
        CHECK(e.message() == "cannot open lock file: it is a symbolic link");
    }
    CHECK_FALSE(std::filesystem::exists(dir / "elsewhere"));

    // The holder's file is removed and recreated: a new locker must not believe it holds the same lock
    // as the old holder through a different file, and it does get the new file's lock.
    auto old = locks.lock("k", LockMode::exclusive);
    std::filesystem::remove(dir / "k.lock");
    skc::FileLock other(dir.path());
    auto fresh = other.try_lock("k", LockMode::exclusive);
    CHECK(fresh.owns());  // the old holder's file is gone; the path now names a new, free file
}

TEST_CASE("ProcessLock: separate instances do not share locks, copies do") {
    skc::ProcessLock a;
    skc::ProcessLock b;
    skc::ProcessLock a2 = a;
    auto g = a.lock("k", LockMode::exclusive);
    CHECK(b.try_lock("k", LockMode::exclusive).owns());
    CHECK_FALSE(a2.try_lock("k", LockMode::exclusive).owns());
}

TEST_CASE("FileLock in another user's folder: permission denied, not \"no such file\"") {
    if (::geteuid() != 0) {
        MESSAGE("needs root to act as another user; not run");
        return;
    }
    skc_test::TempDir tmp;
    const std::filesystem::path dir = tmp / "locks";
    std::filesystem::create_directories(dir / "keys");
    std::filesystem::permissions(tmp.path(), std::filesystem::perms::all);  // others may enter
    {
        skc::FileLock mine(dir);
        CHECK(mine.try_lock("keys/key-made", skc::LockMode::shared).owns());  // a lock file root made
    }
    // A process of user nobody (65534) tries three locks in root's 0755 folder; it writes one line
    // per attempt: "owns" or "<code>|<message>".
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::close(fds[0]);
        if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
        std::string out;
        skc::FileLock theirs(dir);
        for (const char* name : {"keys/key-new", "other/key-new", "keys/key-made"}) {
            try {
                out += theirs.try_lock(name, skc::LockMode::shared).owns() ? "owns" : "busy";
            } catch (const skc::Error& e) {
                out += std::string(skc::to_string(e.code())) + "|" + e.what();
            } catch (...) {
                out += "other exception";
            }
            out += "\n";
        }
        [[maybe_unused]] const ssize_t w = ::write(fds[1], out.data(), out.size());
        ::_exit(0);
    }
    ::close(fds[1]);
    std::string got;
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
    ::close(fds[0]);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    CHECK(got == "permission_denied|" + (dir / "keys/key-new.lock").string() +
                     ": cannot open lock file: Permission denied\n"
                     "permission_denied|" +
                     (dir / "other").string() +
                     ": cannot create the lock file's folder: Permission denied\n"
                     "owns\n");  // an existing lock file is opened read-only for a shared lock
}

namespace {
/// A lock with lock_until alone, over a ProcessLock.
struct UntilOnly {
    using Guard = skc::ProcessLock::Guard;
    skc::ProcessLock inner;
    int calls = 0;
    Guard lock_until(std::string_view name, LockMode mode, skc::LockClock::time_point deadline) {
        ++calls;
        return inner.lock_until(name, mode, deadline);
    }
};
static_assert(skc::LockPolicy<UntilOnly>);
}  // namespace

TEST_CASE("LockTraits makes try_lock and lock from lock_until: try_lock does not wait, lock does") {
    UntilOnly l;
    using T = skc::LockTraits<UntilOnly>;
    auto held = T::lock(l, "name", LockMode::exclusive);
    CHECK(held.owns());
    const auto start = skc::LockClock::now();
    CHECK_FALSE(T::try_lock(l, "name", LockMode::shared).owns());
    CHECK(skc::LockClock::now() - start < std::chrono::seconds(1));
    std::thread releaser([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        held.release();
    });
    CHECK(T::lock(l, "name", LockMode::shared).owns());  // waited for the release
    releaser.join();
    CHECK(l.calls == 3);  // every call went through lock_until
}

}  // namespace skc_policy_lock_test
