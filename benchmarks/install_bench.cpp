// benchmarks/install_bench.cpp: what RunPackageInstaller::install costs for a cache hit's package,
// by how the package is found in the op library.
//
//   BM_Install/extract        nothing to reuse (keep_bytes 0): makeself extracts the package, the
//                             payload is checked, the shared files are published. What every install
//                             cost before kept extractions, and still costs a package's first install.
//   BM_Install/reuse          the package's extraction is kept (.kept/<stem>), and the checksum is
//                             given, as the compiler host passes the cache entry's: the payload checks,
//                             a rename, the shared files published.
//   BM_Install/reuse_hashing  the same with no checksum given: the installer hashes the package file.
//   BM_Install/held           another handle of this process holds the package: one more holder file.
//
// Each iteration times one install; the release that follows (which deletes or keeps the
// extraction) is outside the timing. At the end the medians are printed as ratios to
// BM_Install/extract. The package is a real makeself archive laid out as host_op_compiler lays
// out its own (one library of 8 kernels, 64 KiB of incompressible bytes, stem = a cache key),
// built in a temporary folder; `--package=FILE` measures a given package instead (e.g. a cache
// entry's `<key>.run` left by the demo: its backend must be `host`).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <skc/policy/run_package_installer.hpp>
#include <skc/policy/filesystem_storage.hpp>

#include "bench_support.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;

fs::path g_package;  // the package installed by every case; set in main
skc::Digest g_checksum;

[[noreturn]] void die(const std::string& message) {
    std::fprintf(stderr, "install_bench: %s\n", message.c_str());
    std::exit(1);
}

/// Runs argv (no shell, PATH searched) with its output to `log`; dies unless it exits 0.
void run_or_die(const std::vector<std::string>& args, const fs::path& log) {
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
    if (rc != 0) die("cannot start " + args[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {}
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die(args[0] + " failed; see " + log.string());
}

/// A run package as host_op_compiler writes one: kernels/<stem>.so holding 8 kernels, the index,
/// a no-op setup.sh; its stem is a cache key (32 hex digits), as the cache names its packages.
fs::path make_package(const fs::path& dir) {
    const std::string stem = "6b02cfb1d59ef4f17dfe08abe4eab0ff";
    const fs::path src = dir / "payload";
    fs::create_directories(src / "kernels");
    std::string library(std::size_t{64} << 10, '\0');
    std::uint64_t x = 0x9E3779B97F4A7C15ULL;  // xorshift: bytes gzip cannot shrink, as machine code barely shrinks
    for (char& c : library) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        c = static_cast<char>(x);
    }
    skc::FilesystemStorage storage(src);
    storage.write("kernels/" + stem + ".so", library);
    std::string index =
        R"({"format": "skc-run-package", "version": 1, "backend": "host", "device": "host-cpu", "kernels": [)";
    for (int i = 0; i < 8; ++i) {
        char digest[33];
        std::snprintf(digest, sizeof digest, "%032x", 0x1000 + i);
        index += std::string(i ? ", " : "") + R"({"digest": ")" + digest +
                 R"(", "op_type": "MatMulV2", "file": "kernels/)" + stem + R"(.so", "symbol": "skc_k_)" + digest +
                 R"("})";
    }
    storage.write("binary_info_config.json", index + "]}\n");
    storage.write("setup.sh", "#!/bin/sh\nexit 0\n");
    fs::permissions(src / "setup.sh", fs::perms::owner_all, fs::perm_options::add);
    const fs::path pkg = dir / (stem + ".run");
    run_or_die({"makeself", "--quiet", "--nox11", src.string(), pkg.string(), "skc host kernels", "./setup.sh"},
               dir / "makeself.log");
    return pkg;
}

enum class Case { extract, reuse, reuse_hashing, held };

void BM_Install(benchmark::State& state, Case c) {
    skc_bench::Scratch scratch("skc-install-bench");
    const fs::path lib = scratch.dir / "lib";
    skc::RunPackageInstaller installer;
    skc::InstallOptions opt;  // the compiler host's: process-scoped, the cache's size as the keep limit
    opt.keep_bytes = c == Case::extract ? 0 : skc::default_keep_bytes;
    if (c != Case::reuse_hashing) opt.checksum = g_checksum;
    skc::Installation anchor;  // held: the other holder
    if (c == Case::held) anchor = installer.install(g_package, lib, opt);
    else if (c != Case::extract) installer.install(g_package, lib, opt).release();  // now kept
    bool as_expected = true;
    for (auto _ : state) {
        skc::Installation inst = installer.install(g_package, lib, opt);
        state.PauseTiming();
        as_expected = as_expected && inst.extracted() == (c == Case::extract) &&
                      inst.reused() == (c == Case::reuse || c == Case::reuse_hashing);
        inst.release();
        state.ResumeTiming();
    }
    if (!as_expected) state.SkipWithError("the install did not take the path this case measures");
}

}  // namespace

int main(int argc, char** argv) {
    constexpr std::string_view package_flag = "--package=";
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg.substr(0, package_flag.size()) == package_flag)
            g_package = std::string(arg.substr(package_flag.size()));
        else argv[kept++] = argv[i];
    }
    argc = kept;
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

    skc_bench::Scratch scratch("skc-install-bench-package");
    if (g_package.empty()) g_package = make_package(scratch.dir);
    g_checksum = skc::detail::hash_bytes(skc::read_file(g_package, std::size_t{1} << 30));
    benchmark::AddCustomContext(
        "package", fs::absolute(g_package).string() + " (" + std::to_string(fs::file_size(g_package)) + " bytes)");
    for (const auto& [name, c] : {std::pair{"extract", Case::extract}, std::pair{"reuse", Case::reuse},
                                  std::pair{"reuse_hashing", Case::reuse_hashing}, std::pair{"held", Case::held}})
        benchmark::RegisterBenchmark((std::string("BM_Install/") + name).c_str(), BM_Install, c)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
    skc_bench::RatioReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::Shutdown();
    const auto extract = std::find_if(reporter.times.begin(), reporter.times.end(),
                                      [](const auto& e) { return e.first == "BM_Install/extract"; });
    if (extract != reporter.times.end()) {
        std::printf("\ninstall time against an extraction:\n");
        for (const auto& [name, t] : reporter.times)
            std::printf("  %-26s %9.3f ms  %7.4f of it (%.0fx less)\n", name.c_str(), t * 1e3, t / extract->second,
                        extract->second / t);
    }
    return 0;
}
