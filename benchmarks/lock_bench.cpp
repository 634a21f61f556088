// benchmarks/lock_bench.cpp: what taking and releasing a lock costs, with skc's lock policies.
//
//   BM_FileLock/<method>/<mode>     FileLock, uncontended: acquire + release of one name. `lock` blocks
//                                   in flock; `try_lock` (what a cache lookup uses) and `lock_until`
//                                   (what a publish uses) take the non-blocking path.
//   BM_RawFlock/<mode>              for scale: open(O_CREAT) + flock + close of the same lock file, the
//                                   system calls FileLock cannot avoid.
//   BM_ProcessLock/<mode>           ProcessLock, uncontended (between the threads of one process).
//   BM_FileLock_Contended/<method>  4 processes on one name: 3 children loop acquire/release exclusive
//                                   with FileLock::lock for the whole benchmark; the parent's
//                                   acquire + release (exclusive, with `lock` or with `lock_until`) is
//                                   timed. Counters: the parent's latency percentiles, the children's
//                                   acquisitions per second, and lock_until timeouts.
//
// Lock names look like the cache's per-key locks (`CANN-<ver>_<dev>/keys/key-<32 hex digits>`), in
// a temporary folder that is removed at the end. Children are killed and reaped when each run
// ends, also when it fails; they also die with the parent (PR_SET_PDEATHSIG).
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <skc/policy/lock.hpp>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr std::string_view lock_name = "CANN-8.0.0_Ascend910B1/keys/key-6b02cfb1d59ef4f17dfe08abe4eab0ff";
constexpr int contenders = 3;  // children; with the parent, 4 processes

fs::path g_lock_dir;  // set in main

[[noreturn]] void die(const std::string& message) {
    std::fprintf(stderr, "lock_bench: %s\n", message.c_str());
    std::exit(1);
}

const char* mode_name(skc::LockMode m) { return m == skc::LockMode::shared ? "shared" : "exclusive"; }

// ---- uncontended ----------------------------------------------------------------------------------------

enum class Method { lock, try_lock, lock_until };

const char* method_name(Method m) {
    return m == Method::lock ? "lock" : m == Method::try_lock ? "try_lock" : "lock_until";
}

template <class L>
typename L::Guard acquire(L& locks, Method method, skc::LockMode mode) {
    switch (method) {
    case Method::try_lock: return locks.try_lock(lock_name, mode);
    case Method::lock_until: return locks.lock_until(lock_name, mode, skc::LockClock::now() + std::chrono::seconds(10));
    case Method::lock: break;
    }
    return locks.lock(lock_name, mode);
}

void BM_FileLock(benchmark::State& state, Method method, skc::LockMode mode) {
    skc::FileLock locks(g_lock_dir);
    for (auto _ : state) {
        auto g = acquire(locks, method, mode);
        if (!g.owns()) {
            state.SkipWithError("an uncontended lock was refused");
            break;
        }
        g.release();
    }
}

void BM_RawFlock(benchmark::State& state, skc::LockMode mode) {
    const std::string path = skc::FileLock(g_lock_dir).path_of(lock_name).string();
    const int op = mode == skc::LockMode::shared ? LOCK_SH : LOCK_EX;
    for (auto _ : state) {
        const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0 || ::flock(fd, op) != 0) {
            state.SkipWithError("open or flock failed");
            break;
        }
        ::close(fd);
    }
}

void BM_ProcessLock(benchmark::State& state, skc::LockMode mode) {
    skc::ProcessLock locks;
    for (auto _ : state) {
        auto g = locks.lock(lock_name, mode);
        benchmark::DoNotOptimize(g);
        g.release();
    }
}

// ---- contended ------------------------------------------------------------------------------------------

/// Shared with the children (anonymous shared mapping).
struct Shared {
    std::atomic<std::uint64_t> acquired{0};  // the children's acquisitions
    std::atomic<int> ready{0};
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

/// The children of one run: killed and reaped on destruction, whatever happened.
class Contenders {
public:
    Contenders() {
        void* p = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) die(std::string("mmap failed: ") + std::strerror(errno));
        shared_ = new (p) Shared;
    }
    Contenders(const Contenders&) = delete;
    Contenders& operator=(const Contenders&) = delete;
    ~Contenders() {
        stop();
        shared_->~Shared();
        ::munmap(shared_, sizeof(Shared));
    }

    [[nodiscard]] Shared& shared() { return *shared_; }

    /// Starts `count` children looping on the lock; false when one cannot start.
    bool start(int count) {
        std::fflush(nullptr);  // the children must not flush the parent's buffers (they _exit anyway)
        const pid_t parent = ::getpid();
        for (int k = 0; k < count; ++k) {
            const pid_t pid = ::fork();
            if (pid < 0) return false;
            if (pid == 0) child(parent);
            pids_.push_back(pid);
        }
        const auto deadline = Clock::now() + std::chrono::seconds(10);
        while (shared_->ready.load() < count) {
            if (Clock::now() > deadline || !alive()) return false;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return true;
    }

    /// True when no child has exited.
    bool alive() {
        for (pid_t pid : pids_) {
            int status = 0;
            if (::waitpid(pid, &status, WNOHANG) != 0) return false;
        }
        return true;
    }

    void stop() noexcept {
        for (pid_t pid : pids_) ::kill(pid, SIGKILL);
        for (pid_t pid : pids_) {
            int status = 0;
            while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        }
        pids_.clear();
    }

private:
    [[noreturn]] void child(pid_t parent) noexcept {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(0);
        try {
            skc::FileLock locks(g_lock_dir);
            bool first = true;
            for (;;) {
                auto g = locks.lock(lock_name, skc::LockMode::exclusive);
                shared_->acquired.fetch_add(1, std::memory_order_relaxed);
                if (first) shared_->ready.fetch_add(1);
                first = false;
            }
        } catch (...) {
            ::_exit(2);
        }
    }

    Shared* shared_ = nullptr;
    std::vector<pid_t> pids_;
};

double percentile(std::vector<double>& v, double q) {
    if (v.empty()) return 0;
    const auto k = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return v[k];
}

void BM_FileLock_Contended(benchmark::State& state, Method method) {
    Contenders children;
    if (!children.start(contenders)) {
        state.SkipWithError("the contending processes did not start");
        return;
    }
    skc::FileLock locks(g_lock_dir);
    std::vector<double> latency_us;
    latency_us.reserve(static_cast<std::size_t>(state.max_iterations));
    std::uint64_t timeouts = 0;
    const std::uint64_t children_before = children.shared().acquired.load();
    const auto t_begin = Clock::now();
    for (auto _ : state) {
        const auto t0 = Clock::now();
        auto g = acquire(locks, method, skc::LockMode::exclusive);
        const bool owned = g.owns();
        g.release();
        latency_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        if (!owned) ++timeouts;
    }
    const double elapsed_s = std::chrono::duration<double>(Clock::now() - t_begin).count();
    const std::uint64_t children_acquired = children.shared().acquired.load() - children_before;
    const bool ok = children.alive();
    children.stop();
    if (!ok) {
        state.SkipWithError("a contending process exited during the run");
        return;
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
    state.counters["p50_us"] = percentile(latency_us, 0.50);
    state.counters["p90_us"] = percentile(latency_us, 0.90);
    state.counters["p99_us"] = percentile(latency_us, 0.99);
    state.counters["p999_us"] = percentile(latency_us, 0.999);
    state.counters["max_us"] = latency_us.empty() ? 0 : *std::max_element(latency_us.begin(), latency_us.end());
    state.counters["children_per_second"] = elapsed_s > 0 ? static_cast<double>(children_acquired) / elapsed_s : 0;
    state.counters["timeouts"] = static_cast<double>(timeouts);
}

void register_all() {
    using skc::LockMode;
    for (LockMode mode : {LockMode::shared, LockMode::exclusive})
        for (Method method : {Method::lock, Method::try_lock, Method::lock_until})
            benchmark::RegisterBenchmark(
                (std::string("BM_FileLock/") + method_name(method) + "/" + mode_name(mode)).c_str(), BM_FileLock,
                method, mode)
                ->Unit(benchmark::kMicrosecond)
                ->UseRealTime();
    for (LockMode mode : {LockMode::shared, LockMode::exclusive})
        benchmark::RegisterBenchmark((std::string("BM_RawFlock/") + mode_name(mode)).c_str(), BM_RawFlock, mode)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
    for (LockMode mode : {LockMode::shared, LockMode::exclusive})
        benchmark::RegisterBenchmark((std::string("BM_ProcessLock/") + mode_name(mode)).c_str(), BM_ProcessLock, mode)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
    for (Method method : {Method::lock, Method::lock_until})
        benchmark::RegisterBenchmark((std::string("BM_FileLock_Contended/") + method_name(method)).c_str(),
                                     BM_FileLock_Contended, method)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
}

/// The temporary lock folder, removed at the end.
struct LockDir {
    LockDir() {
        std::string tmpl = (fs::temp_directory_path() / "skc-lock-bench.XXXXXX").string();
        if (::mkdtemp(tmpl.data()) == nullptr) die(std::string("mkdtemp failed: ") + std::strerror(errno));
        g_lock_dir = tmpl;
    }
    LockDir(const LockDir&) = delete;
    LockDir& operator=(const LockDir&) = delete;
    ~LockDir() {
        std::error_code ec;
        fs::remove_all(g_lock_dir, ec);
    }
};

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    const LockDir dir;
    register_all();
    benchmark::AddCustomContext("contending_processes", std::to_string(contenders + 1));
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
