#include <doctest/doctest.h>

#include <filesystem>
#include <optional>
#include <string>

#include <skc/run_package.hpp>

#include "run_packages.hpp"
#include "test_support.hpp"

namespace skc_run_package_test {

namespace fs = std::filesystem;

TEST_CASE("a whole package passes both checks; cut, grown, altered or foreign ones say why") {
    skc_test::TempDir tmp;
    const fs::path pkg = skc_test::make_package(
        tmp.path(), "p", {{skc_test::digest_of(7), "Add", "kernels/k.so", std::string(5000, 'k')}});
    const std::string bytes = skc_test::slurp(pkg);
    CHECK(skc::run_package_header_fault(bytes, bytes.size()) == std::nullopt);
    CHECK(skc::run_package_fault(pkg) == std::nullopt);

    // Cut anywhere in the archive: the header check alone tells.
    for (std::size_t cut : {std::size_t{1}, std::size_t{10}, std::size_t{200}}) {
        CAPTURE(cut);
        const std::string part = bytes.substr(0, bytes.size() - cut);
        const std::optional<std::string> f = skc::run_package_header_fault(part, part.size());
        REQUIRE(f.has_value());
        CHECK(f->find("the package is " + std::to_string(part.size()) + " bytes, its makeself header says " +
                      std::to_string(bytes.size()) + " (") == 0);
        CHECK(f->find(": it was cut short (a write error while it was made?)") != std::string::npos);
        skc_test::spit(tmp / "cut.run", part);
        CHECK(skc::run_package_fault(tmp / "cut.run") == f);
    }
    // Cut inside the header.
    const std::string head = bytes.substr(0, 3000);
    const std::optional<std::string> in_header = skc::run_package_header_fault(head, head.size());
    REQUIRE(in_header.has_value());
    CHECK(in_header->find(" bytes, shorter than its own ") != std::string::npos);
    // Only the start read, of a longer file: no verdict on what was not read.
    CHECK(skc::run_package_header_fault(head, bytes.size()) == std::nullopt);
    // Bytes added after the archive.
    const std::string grown = bytes + "extra";
    const std::optional<std::string> g = skc::run_package_header_fault(grown, grown.size());
    REQUIRE(g.has_value());
    CHECK(g->find("cut short") == std::string::npos);
    // Not a makeself package at all.
    CHECK(skc::run_package_header_fault("PK\x03\x04", 4) ==
          "not a makeself run package (it does not start with \"#!\")");
    CHECK(skc::run_package_header_fault("#!/bin/sh\necho hi\n", 18) ==
          "no skip or filesizes line in its 18 bytes: not a makeself run package, or one cut short in its header");
    // The right size, one archive byte changed: makeself's own check finds it.
    std::string altered = bytes;
    altered[altered.size() - 100] = static_cast<char>(altered[altered.size() - 100] ^ 0x5a);
    skc_test::spit(tmp / "altered.run", altered);
    CHECK(skc::run_package_header_fault(altered, altered.size()) == std::nullopt);
    const std::optional<std::string> a = skc::run_package_fault(tmp / "altered.run");
    REQUIRE(a.has_value());
    CHECK(a->find("makeself's integrity check failed (status ") == 0);
    // A package that cannot be read.
    CHECK(skc::run_package_fault(tmp / "missing.run") == "cannot read the package: No such file or directory");
    CHECK(skc::run_package_fault(tmp.path()) == "the package is not a regular file");
}

}  // namespace skc_run_package_test
