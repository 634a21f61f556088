// install_threads_worker: one process whose threads install run packages with one shared
// skc::RunPackageInstaller, until a signal ends it; driven by tests/skc/policy/installer_test.cpp
// (the installer's signal path with several threads). Not a doctest program.
//
//   install_threads_worker LIBRARY THREADS MODE PACKAGE...
//
// Modes
//   hold    every thread installs every PACKAGE once and keeps the handles; when all threads hold
//           theirs it prints "holding <handles in all>", and every thread waits to be killed
//   churn   thread t keeps one handle of PACKAGE[t % count] and installs and releases that package
//           again and again; once every thread has gone round once it prints "churning"
// Lines on stdout are flushed. Exit status: 2 usage, 4 skc::Error ("error <code> <message>" on
// stdout), 5 other failure; otherwise the process runs until a signal ends it.
#include <skc/policy/run_package_installer.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

std::mutex print_mu;

[[noreturn]] void fail_with(int status, const std::string& line) {
    {
        std::lock_guard lock(print_mu);
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
    }
    std::_Exit(status);
}

void say(const std::string& line) {
    std::lock_guard lock(print_mu);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 5) {
        std::fprintf(stderr, "usage: install_threads_worker LIBRARY THREADS MODE PACKAGE...\n");
        return 2;
    }
    const std::filesystem::path library = argv[1];
    const int threads = std::atoi(argv[2]);
    const std::string mode = argv[3];
    std::vector<std::filesystem::path> packages(argv + 4, argv + argc);
    if (threads < 1 || (mode != "hold" && mode != "churn")) return 2;

    skc::RunPackageInstaller installer;
    std::atomic<int> ready{0};
    auto guarded = [&](auto&& body) {
        try {
            body();
        } catch (const skc::Error& e) {
            fail_with(4, "error " + std::string(skc::to_string(e.code())) + " " + e.what());
        } catch (const std::exception& e) {
            fail_with(5, std::string("failure ") + e.what());
        }
    };
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            guarded([&] {
                if (mode == "hold") {
                    std::vector<skc::Installation> held;
                    for (const auto& p : packages) held.push_back(installer.install(p, library, {}));
                    // Every thread waits until all hold theirs: whichever thread the signal lands on,
                    // every install then happens before it in the memory model, as it does in time.
                    ready.fetch_add(1, std::memory_order_acq_rel);
                    while (ready.load(std::memory_order_acquire) < threads)
                        std::this_thread::sleep_for(std::chrono::milliseconds(1));
                    for (;;) ::sleep(1);  // the handles stay held until the signal (see install_worker.cpp)
                }
                const auto& p = packages[static_cast<std::size_t>(t) % packages.size()];
                const skc::Installation anchor = installer.install(p, library, {});
                for (bool first = true;; first = false) {
                    skc::Installation again = installer.install(p, library, {});
                    again.release();
                    if (first) ready.fetch_add(1, std::memory_order_acq_rel);
                }
            });
        });
    while (ready.load(std::memory_order_acquire) < threads) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    say(mode == "hold" ? "holding " + std::to_string(static_cast<std::size_t>(threads) * packages.size()) : "churning");
    for (auto& th : pool) th.join();  // never returns: the threads run until the signal
    return 0;
}
