#include <doctest/doctest.h>

#include <cerrno>
#include <filesystem>
#include <type_traits>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include <skc/detail/unique_fd.hpp>

#include "test_support.hpp"

namespace skc_detail_unique_fd_test {

namespace fs = std::filesystem;
using skc::detail::UniqueFd;

static_assert(!std::is_copy_constructible_v<UniqueFd> && !std::is_copy_assignable_v<UniqueFd>);
static_assert(std::is_nothrow_move_constructible_v<UniqueFd> && std::is_nothrow_move_assignable_v<UniqueFd>);

int open_null() {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    return fd;
}

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST_CASE("UniqueFd: closes its descriptor when it ends, and only then") {
    UniqueFd empty;
    CHECK_FALSE(empty);
    CHECK(empty.get() == -1);
    int raw = -1;
    {
        const UniqueFd fd(open_null());
        raw = fd.get();
        CHECK(fd);
        CHECK(is_open(raw));
    }
    errno = 0;
    CHECK_FALSE(is_open(raw));
    CHECK(errno == EBADF);
}

TEST_CASE("UniqueFd: a move hands the descriptor over; the moved-from one closes nothing") {
    UniqueFd a(open_null());
    const int raw = a.get();
    UniqueFd b(std::move(a));
    CHECK(b.get() == raw);
    CHECK(a.get() == -1);  // moved from: empty
    CHECK(is_open(raw));

    // Assigning closes what the target held.
    UniqueFd c(open_null());
    const int other = c.get();
    c = std::move(b);
    CHECK(c.get() == raw);
    CHECK(b.get() == -1);
    CHECK(is_open(raw));
    CHECK_FALSE(is_open(other));

    // reset() closes and takes another; release() gives it up open.
    const int third = open_null();
    c.reset(third);
    CHECK_FALSE(is_open(raw));
    CHECK(c.get() == third);
    const int released = c.release();
    CHECK(released == third);
    CHECK_FALSE(c);
    CHECK(is_open(third));
    ::close(third);
    c.reset();  // empty: nothing to close
    CHECK(c.get() == -1);
}

TEST_CASE("RemovedAtExit: a folder and all below it, or a file, go when it ends") {
    skc_test::TempDir tmp;
    fs::create_directories(tmp / "tree" / "a" / "b");
    skc_test::spit(tmp / "tree" / "a" / "b" / "f", "x");
    skc_test::spit(tmp / "file", "y");
    {
        const skc::detail::RemovedAtExit tree(tmp / "tree");
        const skc::detail::RemovedAtExit file(tmp / "file");
        const skc::detail::RemovedAtExit missing(tmp / "never-made");
        CHECK(tree.path() == tmp / "tree");
        CHECK(fs::exists(tmp / "tree" / "a" / "b" / "f"));
    }
    CHECK(fs::is_empty(tmp.path()));
}

}  // namespace skc_detail_unique_fd_test
