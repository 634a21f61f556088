#include <doctest/doctest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <skc/detail/atomic_file.hpp>
#include <skc/error.hpp>

#include "test_support.hpp"

namespace skc_detail_atomic_file_test {

namespace fs = std::filesystem;
using skc::detail::AtomicFile;
using skc::detail::AtomicStep;
using skc::detail::Durability;

std::set<std::string> names_in(const fs::path& dir) {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
    return out;
}

mode_t mode_of(const fs::path& p) {
    struct stat st {};
    REQUIRE(::stat(p.c_str(), &st) == 0);
    return st.st_mode & 07777;
}

/// Sets the umask for a scope.
struct Umask {
    explicit Umask(mode_t m) : old(::umask(m)) {}
    ~Umask() { ::umask(old); }
    mode_t old;
};

/// Makes the next write of `f` fail (EBADF): its descriptor is replaced by one open for reading.
void break_writes(const AtomicFile& f) {
    const int ro = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    REQUIRE(ro >= 0);
    REQUIRE(::dup2(ro, f.fd()) == f.fd());
    ::close(ro);
}

TEST_CASE("AtomicFile: the temporary is beside the target, named for the writer, and hidden") {
    skc_test::TempDir tmp;
    const fs::path t = skc::detail::temporary_beside(tmp / "sub" / "a.json");
    CHECK(t.parent_path() == tmp / "sub");
    const std::string name = t.filename().string();
    const std::string start = ".tmp." + std::to_string(::getpid()) + ".";
    CHECK(name.rfind(start, 0) == 0);
    CHECK(name.ends_with(".a.json"));
    CHECK(skc::detail::temporary_beside(tmp / "sub" / "a.json") != t);  // a fresh one each time
}

TEST_CASE("AtomicFile: commit puts the whole content in place with its mode, and leaves no temporary") {
    skc_test::TempDir tmp;
    const Umask umask(022);
    {
        AtomicFile f(tmp / "a.txt");
        CHECK(names_in(tmp.path()) == std::set<std::string>{f.temp_path().filename().string()});
        f.write("hello ");
        f.write("world\n");
        CHECK_FALSE(fs::exists(tmp / "a.txt"));  // not before commit
        f.commit();
    }
    CHECK(skc_test::slurp(tmp / "a.txt") == "hello world\n");
    CHECK(mode_of(tmp / "a.txt") == 0644);
    CHECK(names_in(tmp.path()) == std::set<std::string>{"a.txt"});

    // Replacing: a reader of the old file keeps the old content; the name has the new one.
    const int reader = ::open((tmp / "a.txt").c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(reader >= 0);
    for (const Durability d : {Durability::none, Durability::file, Durability::full}) {
        AtomicFile f(tmp / "a.txt", 0600);
        f.write("new " + std::to_string(static_cast<int>(d)));
        f.commit(d);
        CHECK(skc_test::slurp(tmp / "a.txt") == "new " + std::to_string(static_cast<int>(d)));
        CHECK(mode_of(tmp / "a.txt") == 0600);
    }
    char buf[64] = {};
    CHECK(::read(reader, buf, sizeof buf) == 12);
    CHECK(std::string(buf) == "hello world\n");
    ::close(reader);
    CHECK(names_in(tmp.path()) == std::set<std::string>{"a.txt"});

    // The mode is less the umask.
    const Umask strict(077);
    AtomicFile g(tmp / "b.txt", 0666);
    g.commit();
    CHECK(mode_of(tmp / "b.txt") == 0600);
}

TEST_CASE("AtomicFile: a relative target is placed in the current folder") {
    skc_test::TempDir tmp;
    const fs::path before = fs::current_path();
    fs::current_path(tmp.path());
    {
        AtomicFile f("rel.txt");
        CHECK(f.temp_path().parent_path().empty());
        f.write("x");
        f.commit();
    }
    fs::current_path(before);
    CHECK(skc_test::slurp(tmp / "rel.txt") == "x");
    CHECK(names_in(tmp.path()) == std::set<std::string>{"rel.txt"});
}

TEST_CASE("AtomicFile: a failed write, a failed create and an object that ends uncommitted leave nothing") {
    skc_test::TempDir tmp;
    skc_test::spit(tmp / "kept", "");
    {
        AtomicFile f(tmp / "kept");
        f.write("partial");
        break_writes(f);
        std::string message;
        try {
            f.write("more");
        } catch (const skc::Error& e) {
            message = e.what();
        }
        CHECK(message == f.temp_path().string() + ": cannot write: Bad file descriptor");
        CHECK_FALSE(fs::exists(f.temp_path()));  // removed at once
        CHECK(skc_test::slurp(tmp / "kept").empty());
    }
    {
        AtomicFile f(tmp / "dropped");
        f.write("never placed");
    }
    CHECK(names_in(tmp.path()) == std::set<std::string>{"kept"});

    // The temporary cannot be made: the error names it.
    std::string message;
    try {
        AtomicFile f(tmp / "missing" / "x");
    } catch (const skc::Error& e) {
        message = e.what();
        CHECK(e.code() == skc::Errc::io_error);
    }
    CHECK(message.rfind((tmp / "missing" / ".tmp.").string(), 0) == 0);
    CHECK(message.ends_with(".x: cannot create: No such file or directory"));
}

TEST_CASE("AtomicFile: commit_new never replaces a file; a failed placing removes the temporary") {
    skc_test::TempDir tmp;
    {
        AtomicFile f(tmp / "one");
        f.write("first");
        f.commit_new(Durability::none);
    }
    CHECK(skc_test::slurp(tmp / "one") == "first");
    std::string message;
    try {
        AtomicFile f(tmp / "one");
        f.write("second");
        f.commit_new(Durability::file);
    } catch (const skc::Error& e) {
        message = e.message();
    }
    CHECK(message == "cannot publish: File exists");
    CHECK(skc_test::slurp(tmp / "one") == "first");
    CHECK(names_in(tmp.path()) == std::set<std::string>{"one"});

    // commit() onto a folder fails the same way, and the folder stays.
    fs::create_directory(tmp / "dir");
    try {
        AtomicFile f(tmp / "dir");
        f.commit();
    } catch (const skc::Error& e) {
        message = e.what();
    }
    CHECK(message == (tmp / "dir").string() + ": cannot publish: Is a directory");
    CHECK(fs::is_directory(tmp / "dir"));
    CHECK(names_in(tmp.path()) == std::set<std::string>{"dir", "one"});
}

TEST_CASE("AtomicFile: commit_keeping_fd places the file while its descriptor stays open") {
    skc_test::TempDir tmp;
    AtomicFile f(tmp / "claim");
    f.write("a");
    const skc::detail::UniqueFd fd = f.commit_keeping_fd();
    REQUIRE(fd);
    CHECK(f.fd() == -1);
    CHECK(::write(fd.get(), "b", 1) == 1);
    CHECK(skc_test::slurp(tmp / "claim") == "ab");
    CHECK(names_in(tmp.path()) == std::set<std::string>{"claim"});
}

/// A writer with messages of its own.
std::vector<AtomicStep> failed_steps;
[[noreturn]] void own_failure(AtomicStep step, const fs::path&, const fs::path& target, int err) {
    failed_steps.push_back(step);
    throw skc::Error(skc::Errc::io_error, "step " + std::to_string(static_cast<int>(step)) + ", errno " +
                                              std::to_string(err) + ": " + target.filename().string());
}

TEST_CASE("AtomicFile: a writer's own failure reports") {
    skc_test::TempDir tmp;
    failed_steps.clear();
    CHECK_THROWS_WITH_AS(AtomicFile(tmp / "no" / "x", 0644, &own_failure), "step 0, errno 2: x", skc::Error);
    {
        AtomicFile f(tmp / "y", 0644, &own_failure);
        break_writes(f);
        CHECK_THROWS_WITH_AS(f.write("z"), "step 1, errno 9: y", skc::Error);
    }
    fs::create_directory(tmp / "d");
    {
        AtomicFile f(tmp / "d", 0644, &own_failure);
        CHECK_THROWS_WITH_AS(f.commit(Durability::none), "step 3, errno 21: d", skc::Error);
    }
    CHECK(failed_steps == std::vector<AtomicStep>{AtomicStep::create, AtomicStep::write, AtomicStep::place});
    CHECK(names_in(tmp.path()) == std::set<std::string>{"d"});
}

}  // namespace skc_detail_atomic_file_test
