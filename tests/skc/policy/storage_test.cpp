// The Storage law suite, run over every shipped storage.
#include <doctest/doctest.h>

#include <thread>

#include <skc/policy/filesystem_storage.hpp>
#include <skc/policy/memory_storage.hpp>

#include "test_support.hpp"

namespace skc_policy_storage_test {

namespace {

template <class S>
struct Fixture;

template <>
struct Fixture<skc::FilesystemStorage> {
    skc_test::TempDir dir;
    skc::FilesystemStorage make() { return skc::FilesystemStorage(dir / "root"); }
};

template <>
struct Fixture<skc::MemoryStorage> {
    skc_test::TempDir dir;  // for import_file's source
    skc::MemoryStorage make() { return {}; }
};

}  // namespace

TEST_CASE_TEMPLATE("storage law: absent, write, read, overwrite, remove", S, skc::FilesystemStorage,
                   skc::MemoryStorage) {
    Fixture<S> fx;
    S s = fx.make();
    CHECK_FALSE(s.read("entries/a").has_value());
    CHECK_FALSE(s.stat("entries/a").has_value());
    CHECK_FALSE(s.remove("entries/a"));
    s.write("entries/a", "one");
    CHECK(s.read("entries/a") == "one");
    const auto first = s.stat("entries/a");
    REQUIRE(first.has_value());
    CHECK(first->size == 3);
    CHECK(first->regular);
    s.write("entries/a", "three");
    CHECK(s.read("entries/a") == "three");
    const auto second = s.stat("entries/a");
    CHECK(second->size == 5);
    CHECK(second->identity != first->identity);  // replaced: a new identity
    CHECK(s.remove("entries/a"));
    CHECK_FALSE(s.read("entries/a").has_value());
    s.write("entries/empty", "");
    CHECK(s.read("entries/empty") == "");
}

TEST_CASE_TEMPLATE("storage law: list names one folder, sorted, without temporaries", S, skc::FilesystemStorage,
                   skc::MemoryStorage) {
    Fixture<S> fx;
    S s = fx.make();
    CHECK(s.list("entries").empty());
    s.write("entries/b", "x");
    s.write("entries/a", "x");
    s.write("packages/p.run", "x");
    s.write("stats", "x");
    CHECK(s.list("entries") == std::vector<std::string>{"entries/a", "entries/b"});
    CHECK(s.list("packages") == std::vector<std::string>{"packages/p.run"});
}

TEST_CASE_TEMPLATE("storage law: import_file, read_chunks, touch", S, skc::FilesystemStorage, skc::MemoryStorage) {
    Fixture<S> fx;
    S s = fx.make();
    std::string big(3 << 20, 'z');
    big[12345] = 'q';
    skc_test::spit(fx.dir / "pkg.run", big);
    const skc::ObjectInfo info = s.import_file("packages/k.run", fx.dir / "pkg.run");
    CHECK(info.size == big.size());
    std::string back;
    CHECK(s.read_chunks("packages/k.run", [&](std::string_view c) { back.append(c); }));
    CHECK(back == big);
    CHECK_FALSE(s.read_chunks("packages/none.run", [&](std::string_view) {}));
    const auto before = s.stat("packages/k.run")->mtime_ns;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s.touch("packages/k.run");
    CHECK(s.stat("packages/k.run")->mtime_ns > before);
    s.touch("packages/none.run");  // absent: nothing happens
}

TEST_CASE_TEMPLATE("storage law: names that would leave the storage are refused", S, skc::FilesystemStorage,
                   skc::MemoryStorage) {
    Fixture<S> fx;
    S s = fx.make();
    for (const std::string bad : {"../x", "/abs", "a/../b", ".hidden", "a//b", "", "a/."}) {
        INFO("name " << bad);
        CHECK_THROWS_AS(s.write(bad, "x"), skc::Error);
    }
    CHECK_THROWS_WITH_AS((void)s.read("../x"), "storage object name \"../x\" is not a plain relative path", skc::Error);
}

TEST_CASE("FilesystemStorage: never follows a symlink; a symlinked object is not regular") {
    skc_test::TempDir dir;
    skc::FilesystemStorage s(dir / "root");
    s.write("packages/real.run", "payload");
    skc_test::spit(dir / "outside.run", "outside");
    std::filesystem::create_symlink(dir / "outside.run", dir / "root" / "packages" / "link.run");
    const auto info = s.stat("packages/link.run");
    REQUIRE(info.has_value());
    CHECK_FALSE(info->regular);
    CHECK_FALSE(s.read_chunks("packages/link.run", [](std::string_view) {}));
    CHECK_FALSE(s.read("packages/link.run").has_value());  // no object is there, and the link is not followed
    CHECK(skc_test::slurp(dir / "outside.run") == "outside");
}

TEST_CASE("FilesystemStorage: a failed import leaves the old object and no temporary file") {
    skc_test::TempDir dir;
    skc::FilesystemStorage s(dir / "root");
    s.write("packages/k.run", "old");
    CHECK_THROWS_AS(s.import_file("packages/k.run", dir / "missing.run"), skc::Error);
    CHECK(s.read("packages/k.run") == "old");
    CHECK(skc_test::snapshot(dir / "root").size() == 2);  // the folder and the one file
}

TEST_CASE("FilesystemStorage::write_many: replaces every object; a failure before the renames changes none") {
    skc_test::TempDir dir;
    skc::FilesystemStorage s(dir / "root");
    s.write("config.ini", "old");
    s.write("blocker", "a file where a folder would be");
    s.write_many({{"config.ini", "new"}, {"config/cpu/index.json", "{}\n"}, {"uninstall.sh", "#!/bin/sh\n"}});
    CHECK(s.read("config.ini") == "new");
    CHECK(s.read("config/cpu/index.json") == "{}\n");
    CHECK(s.read("uninstall.sh") == "#!/bin/sh\n");
    const auto before = skc_test::snapshot(dir / "root");

    // The temporary's name carries the pid and a counter: the message is checked around them.
    std::string message;
    try {
        s.write_many({{"config.ini", "newer"}, {"blocker/x", "y"}});
    } catch (const skc::Error& e) {
        message = e.what();
    }
    CHECK(message.rfind((dir / "root" / "blocker" / ".tmp.").string(), 0) == 0);
    CHECK(message.ends_with(".x: cannot create: Not a directory"));
    CHECK(s.read("config.ini") == "new");
    CHECK(skc_test::snapshot(dir / "root") == before);  // no temporary left, nothing replaced
}

}  // namespace skc_policy_storage_test
