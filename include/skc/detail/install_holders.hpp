// skc/detail/install_holders.hpp: the holders of an installed run package, for
// RunPackageInstaller. A holder is a file `.holders/<stem>/<pid>-<starttime>.<n>` (the start time
// from /proc/<pid>/stat, so a reused pid is not mistaken for the holder) or `persistent`; a package
// goes when its last live holder does. A process's holder files are also kept in a fixed table that
// a signal handler can reach: on SIGINT or SIGTERM it unlinks them (async-signal-safe work only),
// restores the default action and re-raises the signal. The handler is installed once, and only
// for signals whose action was SIG_DFL (docs/run-package.md, "Signals").
#pragma once

#include <atomic>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <unistd.h>

#include "names.hpp"

namespace skc::detail {

/// A package stem, device or holder name of an op library: a portable name of at most 200.
constexpr bool safe_component(std::string_view s) noexcept { return is_portable_name(s, 200); }

/// The start time of a process (field 22 of /proc/<pid>/stat), nullopt when it is gone or a zombie.
inline std::optional<unsigned long long> process_start_time(long pid) {
    const std::string p = pid == 0 ? std::string("/proc/self/stat") : "/proc/" + std::to_string(pid) + "/stat";
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    char buf[1024];
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) return std::nullopt;
    const std::string_view s(buf, static_cast<std::size_t>(n));
    std::size_t pos = s.rfind(')');
    if (pos == std::string_view::npos || pos + 2 >= s.size()) return std::nullopt;
    if (s[pos + 2] == 'Z' || s[pos + 2] == 'X') return std::nullopt;  // dead, not reaped yet
    pos += 2;  // field 3 (state) starts here; field 22 is 19 fields further
    for (int field = 3; field < 22; ++field) {
        pos = s.find(' ', pos);
        if (pos == std::string_view::npos) return std::nullopt;
        ++pos;
    }
    unsigned long long v = 0;
    for (; pos < s.size() && s[pos] >= '0' && s[pos] <= '9'; ++pos) v = v * 10 + static_cast<unsigned>(s[pos] - '0');
    return v;
}

/// Whether holder file `name` stands for a live holder.
inline bool holder_alive(const std::string& name) {
    if (name == "persistent") return true;
    const auto dash = name.find('-'), dot = name.find('.');
    if (dash == std::string::npos || dot == std::string::npos || dot < dash) return false;
    try {
        const long pid = std::stol(name.substr(0, dash));
        const unsigned long long start = std::stoull(name.substr(dash + 1, dot - dash - 1));
        const auto now = process_start_time(pid);
        return pid > 0 && now && *now == start;
    } catch (const std::exception&) {
        return false;
    }
}

// ---- the process's holdings, reachable from a signal handler --------------------------------------

constexpr std::size_t max_signal_holders = 256;
/// A holder file's path, readable from a signal handler on any thread. `state` hands the slot over:
/// 0 free, 1 being written (claim), 2 ready, 3 taken by the handler. Every change is a lock-free
/// atomic compare-and-swap, so a slot is never rewritten while the handler reads it, and the
/// handler reads only a path whose writing happened before (release, then acquire).
struct SignalSlot {
    std::atomic<int> state{0};
    std::atomic<pid_t> owner{0};  // the process that wrote it (a forked child skips it)
    char path[4096] = {};
};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<pid_t>::is_always_lock_free,
              "the signal handler needs lock-free atomics");
inline SignalSlot g_signal_slots[max_signal_holders];
inline struct sigaction g_prev_int {
}, g_prev_term{};

extern "C" inline void skc_installer_signal_handler(int sig) {
    const int saved = errno;
    const pid_t self = ::getpid();
    for (SignalSlot& s : g_signal_slots) {
        int ready = 2;
        if (!s.state.compare_exchange_strong(ready, 3, std::memory_order_acquire)) continue;
        if (s.owner.load(std::memory_order_relaxed) == self) ::unlink(s.path);
    }
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(sig, &dfl, nullptr);
    errno = saved;
    ::raise(sig);  // blocked while the handler runs: delivered (default action) when it returns
}

/// One process-scoped holding: released at exit if still alive.
struct Holding {
    std::filesystem::path base;  // L/static_kernel/<backend>
    std::string stem;
    std::string holder;  // file name under .holders/<stem>/
    pid_t owner = 0;
    int slot = -1;
};

struct HoldingRegistry {
    std::mutex mu;
    std::map<std::uint64_t, Holding> live;
    std::uint64_t next = 1;
};
inline HoldingRegistry& holdings() {
    static auto* r = new HoldingRegistry;  // never destroyed: used from the atexit hook
    return *r;
}

inline int claim_signal_slot(const std::filesystem::path& holder_file) {
    const std::string p = holder_file.string();
    if (p.size() >= sizeof(SignalSlot::path)) return -1;
    for (std::size_t i = 0; i < max_signal_holders; ++i) {
        SignalSlot& s = g_signal_slots[i];
        int free = 0;
        if (!s.state.compare_exchange_strong(free, 1, std::memory_order_acquire)) continue;
        std::memcpy(s.path, p.c_str(), p.size() + 1);
        s.owner.store(::getpid(), std::memory_order_relaxed);
        s.state.store(2, std::memory_order_release);
        return static_cast<int>(i);
    }
    return -1;  // table full: this holding is cleaned up as a dead holder after a signal
}

/// Frees slot `i`, unless the signal handler has taken it (the process is ending then; the slot
/// stays taken).
inline void free_signal_slot(int i) {
    if (i < 0) return;
    int ready = 2;
    g_signal_slots[i].state.compare_exchange_strong(ready, 0, std::memory_order_acq_rel);
}

inline void install_signal_handlers_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        for (auto [sig, prev] : {std::pair{SIGINT, &g_prev_int}, std::pair{SIGTERM, &g_prev_term}}) {
            struct sigaction cur {};
            if (::sigaction(sig, nullptr, &cur) != 0) continue;
            if ((cur.sa_flags & SA_SIGINFO) != 0 || cur.sa_handler != SIG_DFL) continue;  // the host's
            struct sigaction sa {};
            sa.sa_handler = skc_installer_signal_handler;
            sigemptyset(&sa.sa_mask);
            sa.sa_flags = 0;
            ::sigaction(sig, &sa, prev);
        }
    });
}

}  // namespace skc::detail
