// install_worker: one process installing a run package with skc::RunPackageInstaller, driven by
// tests/skc/policy/installer_test.cpp. Not a doctest program.
//
//   install_worker LIBRARY PACKAGE MODE [FILE]
//
// Modes
//   scope        install, print, return from main (the handle's destructor uninstalls)
//   exit         install, keep the handle alive (leaked), std::exit(0): the atexit hook uninstalls
//   wait         install, print, sleep until killed
//   wait-file    install, print, wait until FILE exists, then return from main
//   persistent   install persistently, print, exit
// After installing it prints "installed extracted=<0|1> reused=<0|1>" on stdout (flushed): whether
// it extracted the package, or installed it from its kept extraction.
// Exit status: 0 success, 2 usage, 4 skc::Error ("error <code> <message>" on stdout), 5 other.
#include <skc/policy/run_package_installer.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <unistd.h>

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: install_worker LIBRARY PACKAGE MODE [FILE]\n");
        return 2;
    }
    const std::filesystem::path library = argv[1], package = argv[2];
    const std::string mode = argv[3];
    try {
        skc::RunPackageInstaller installer;
        skc::InstallOptions opt;
        opt.persistent = mode == "persistent";
        skc::Installation inst = installer.install(package, library, opt);
        std::printf("installed extracted=%d reused=%d\n", inst.extracted() ? 1 : 0, inst.reused() ? 1 : 0);
        std::fflush(stdout);
        if (mode == "exit") {
            new skc::Installation(std::move(inst));  // leaked on purpose: released by the atexit hook
            std::exit(0);
        }
        // Waits for the signal in sleep() rather than pause(): under ThreadSanitizer a signal that
        // arrives just before pause() is deferred to the next intercepted call, and pause() never
        // returns without another (the SIGTERM case hung once in three runs); sleep() returns.
        if (mode == "wait")
            for (;;) ::sleep(1);
        if (mode == "wait-file") {
            if (argc < 5) return 2;
            while (!std::filesystem::exists(argv[4])) std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        return 0;
    } catch (const skc::Error& e) {
        std::printf("error %s %s\n", std::string(skc::to_string(e.code())).c_str(), e.what());
        return 4;
    } catch (const std::exception& e) {
        std::printf("failure %s\n", e.what());
        return 5;
    }
}
