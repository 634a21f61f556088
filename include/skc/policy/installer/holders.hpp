// skc/policy/installer/holders.hpp: RunPackageInstaller's holders (the references of processes to
// an installed package, detail/install_holders.hpp), their release, uninstall(), and the cleanup
// under the install lock that removes what dead processes left.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../detail/install_holders.hpp"
#include "../../error.hpp"
#include "../lock.hpp"
#include "../run_package_installer.hpp"

namespace skc {

inline bool RunPackageInstaller::uninstall(const std::filesystem::path& library, std::string_view stem,
                                           std::string_view backend, bool persistent) {
    const std::filesystem::path base = install_base(library, backend);
    check_name(std::string(stem), "package stem", base);
    if (!std::filesystem::exists(base)) return false;
    std::vector<std::string> mine;
    {
        auto& reg = detail::holdings();
        std::lock_guard lk(reg.mu);
        for (auto it = reg.live.begin(); it != reg.live.end();) {
            if (!persistent && it->second.base == base && it->second.stem == stem && it->second.owner == ::getpid()) {
                mine.push_back(it->second.holder);
                detail::free_signal_slot(it->second.slot);
                it = reg.live.erase(it);
            } else {
                ++it;
            }
        }
    }
    if (persistent) mine.push_back("persistent");
    FileLock locks(base);
    auto guard = locks.lock("install", LockMode::exclusive);
    for (const auto& h : mine) ::unlink((base / ".holders" / std::string(stem) / h).c_str());
    const bool was = installed_locked(base, std::string(stem));
    cleanup_locked(base);
    return was && !installed_locked(base, std::string(stem));
}

inline std::size_t RunPackageInstaller::cleanup(const std::filesystem::path& library, std::string_view backend) {
    const std::filesystem::path base = install_base(library, backend);
    if (!std::filesystem::exists(base)) return 0;
    FileLock locks(base);
    auto guard = locks.lock("install", LockMode::exclusive);
    return cleanup_locked(base);
}

/// Adds a holder for `stem` (under the lock) and returns the handle.
inline Installation RunPackageInstaller::hold_locked(const std::filesystem::path& base, const std::string& stem,
                                                     const InstallOptions& opt, bool extracted, bool reused) {
    const std::filesystem::path dir = base / ".holders" / stem;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (opt.persistent) {
        write_text(dir / "persistent", "");
        return Installation(stem, base / stem, extracted, nullptr, reused);
    }
    static std::atomic<unsigned long> counter{0};
    const auto start = detail::process_start_time(0).value_or(0);
    const std::string holder =
        std::to_string(::getpid()) + "-" + std::to_string(start) + "." + std::to_string(counter++);
    const int fd = ::open((dir / holder).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        throw Error(Errc::io_error, "cannot create the holder file: " + std::string(std::strerror(errno)),
                    ErrorContext{(dir / holder).string(), {}, {}});
    ::close(fd);
    register_exit_hook_once();
    detail::install_signal_handlers_once();
    auto& reg = detail::holdings();
    std::uint64_t id = 0;
    {
        std::lock_guard lk(reg.mu);
        id = reg.next++;
        reg.live[id] = detail::Holding{base, stem, holder, ::getpid(), detail::claim_signal_slot(dir / holder)};
    }
    return Installation(
        stem, base / stem, extracted, [id] { release_holding(id); }, reused);
}

/// Gives up one holding of this process (no-op when released already, e.g. by uninstall()).
inline void RunPackageInstaller::release_holding(std::uint64_t id) {
    detail::Holding h;
    {
        auto& reg = detail::holdings();
        std::lock_guard lk(reg.mu);
        auto it = reg.live.find(id);
        if (it == reg.live.end() || it->second.owner != ::getpid()) return;
        h = it->second;
        detail::free_signal_slot(h.slot);
        reg.live.erase(it);
    }
    FileLock locks(h.base);
    auto guard = locks.lock("install", LockMode::exclusive);
    ::unlink((h.base / ".holders" / h.stem / h.holder).c_str());
    cleanup_locked(h.base);
}

inline void RunPackageInstaller::register_exit_hook_once() {
    static std::once_flag once;
    std::call_once(once, [] { std::atexit(+[] { release_all_at_exit(); }); });
}

inline void RunPackageInstaller::release_all_at_exit() noexcept {
    std::vector<std::uint64_t> ids;
    {
        auto& reg = detail::holdings();
        std::lock_guard lk(reg.mu);
        for (const auto& [id, h] : reg.live)
            if (h.owner == ::getpid()) ids.push_back(id);
    }
    for (auto id : ids) {
        try {
            release_holding(id);
        } catch (...) {  // the next process cleans up
        }
    }
}

inline std::vector<std::string> RunPackageInstaller::holders_of(const std::filesystem::path& base,
                                                                const std::string& stem) {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(base / ".holders" / stem, ec))
        out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

/// Under the lock: removes dead holders; uninstalls the packages without a live holder, entries
/// of config.ini whose folder is gone and package folders with an identity that config.ini does
/// not list (a crash between moving a package in and publishing); removes staging and removal
/// folders of dead processes; records `new_limit` as the keep limit; keeps uninstalled packages
/// within the limit (else deletes them) and evicts kept extractions beyond it; republishes the
/// shared files when anything changed. Returns the number of packages uninstalled.
inline std::size_t RunPackageInstaller::cleanup_locked(const std::filesystem::path& base,
                                                       std::optional<std::uint64_t> new_limit) {
    std::error_code ec;
    std::vector<std::string> folders;  // names a package folder may have
    for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind(".staging-", 0) != 0 && name.rfind(".removing-", 0) != 0) {
            if (detail::safe_component(name) && name != "config") folders.push_back(name);
            continue;
        }
        const auto dash = name.rfind('-');
        bool dead = true;
        try {
            const long pid = std::stol(name.substr(dash + 1));
            dead = !(pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM));
        } catch (const std::exception&) {}
        if (dead) std::filesystem::remove_all(e.path(), ec);
    }
    std::optional<std::uint64_t> limit = new_limit;  // read from .kept/ when first needed
    bool evict = false;
    if (new_limit && read_keep_limit(base) != *new_limit) {
        std::filesystem::create_directory(kept_dir(base), ec);
        // Best effort: unrecorded, the limit still applies to this call, and the next install records it.
        write_small_file(kept_dir(base) / limit_file, std::to_string(*new_limit) + "\n");
        evict = true;
    }
    auto retire = [&](const std::string& stem) {
        if (!limit) limit = read_keep_limit(base);
        evict = retire_locked(base, stem, *limit) || evict;
    };
    const Order order = read_config(base);
    Order keep;
    std::size_t removed = 0;
    for (const auto& entry : order) {
        const std::string& stem = entry.first;
        bool live = false;
        for (const auto& h : holders_of(base, stem)) {
            if (detail::holder_alive(h)) live = true;
            else ::unlink((base / ".holders" / stem / h).c_str());
        }
        struct stat st {};
        const bool present = ::lstat((base / stem).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
        if (live && present) {
            keep.push_back(entry);
            continue;
        }
        std::filesystem::remove_all(base / ".holders" / stem, ec);
        if (present) {
            retire(stem);
            ++removed;
        }
    }
    for (const std::string& name : folders) {
        if (std::any_of(order.begin(), order.end(), [&](const auto& e) { return e.first == name; })) continue;
        struct stat st {};
        if (::lstat((base / name).c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
            ::lstat((base / name / identity_file).c_str(), &st) != 0)
            continue;
        std::filesystem::remove_all(base / ".holders" / name, ec);
        retire(name);
    }
    if (keep != order) publish_locked(base, keep);
    if (evict) evict_kept_locked(base, *limit);
    return removed;
}

}  // namespace skc
