// skc compile: the flow without a framework, on a folder of op info files.
//
// `skc compile` reads the op info files first (a bad file is bad input: nothing is written), then
// runs skc::StaticKernelCompiler with ProcessInvoker on them as if a recording session had recorded
// them. With --op-library the package is installed persistently, as when a user runs it by hand;
// `skc uninstall` removes such installs. Exit statuses (docs/cli.md): 0 done (hit, compiled or
// nothing to compile), 2 bad usage or bad input, 3 a timeout, 1 any other failure.
//
// Several `skc compile` processes with LOCAL_WORLD_SIZE and LOCAL_RANK set are the ranks of one
// node (skc::LocalFsGather): local rank 0 compiles the union of their folders once and installs it
// once, and every rank reports the same key and package. Their --base must be the same folder.
// With --mpi (skc built with MPI) the ranks are those of an MPI job started by mpirun instead
// (skc::MpiGather): one leader per node, the nodes sharing --base and so the cache.
//
// On a terminal (standard error is a tty) and without --json, the compile's progress is one line on
// standard error, redrawn in place (ProgressDisplay): `compiling: 3/17 ops, 2.4 s` from the
// compiler's progress lines, `waiting for another process compiling cache key ab12cd34…, 5.0 s`,
// ended with a line feed before the report or the error.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <skc/compiler.hpp>
#include <skc/op_info_io.hpp>
#include <skc/policy/any_gather.hpp>
#include <skc/policy/run_package_installer.hpp>
#include <skc/policy/process_invoker.hpp>

#ifdef SKC_TOOL_WITH_MPI
#include <mpi.h>

#include <skc/ext/mpi.hpp>
#endif
#ifdef SKC_TOOL_WITH_REDIS
#include <skc/ext/redis.hpp>
#endif

#include "cli.hpp"
#include "commands.hpp"
#include "common.hpp"

namespace skc_tool {

namespace {

namespace fs = std::filesystem;

constexpr int exit_compile_failed = 1;
constexpr int exit_timeout = 3;

/// The remote tier behind the cache (--remote-cache, SKC_REMOTE_CACHE): Redis when skc was built
/// with hiredis.
#ifdef SKC_TOOL_WITH_REDIS
using ToolRemote = skc::RedisRemote;
#else
using ToolRemote = skc::NoRemote;
#endif

/// What `skc compile` is given; the key's options are shared with `skc cache explain`.
struct CompileArgs {
    KeyArgs key;
    std::string base;
    std::optional<std::string> op_library;
    std::string backend = "host";
    bool no_cache = false;
    std::optional<std::string> cache_dir;
    std::optional<std::string> cache_mode;
    std::optional<std::string> remote_cache;
    bool remote_read_only = false;
    bool model_cache = false;
    std::optional<unsigned> jobs;
    std::optional<unsigned> timeout;
    std::optional<std::string> run_id;
    bool mpi = false;
    std::optional<std::string> log_level;
    bool json = false;
};

constexpr std::array log_levels{skc::LogLevel::debug, skc::LogLevel::info, skc::LogLevel::warning,
                                skc::LogLevel::error};

std::string ms(std::chrono::nanoseconds t) {
    const double v = static_cast<double>(t.count()) / 1e6;
    return v < 1000 ? format("%.1f ms", v) : format("%.2f s", v / 1000);
}

/// Bad input is exit status 2, a timeout 3, anything else 1.
int exit_status_of(const skc::Error& e) {
    switch (e.code()) {
    case skc::Errc::timeout: return exit_timeout;
    case skc::Errc::invalid_json:
    case skc::Errc::invalid_op_info:
    case skc::Errc::limit_exceeded:
    case skc::Errc::invalid_option:
    case skc::Errc::invalid_name:
    case skc::Errc::unsafe_path:
    case skc::Errc::invalid_argument:
    case skc::Errc::permission_denied: return exit_usage;
    default: return exit_compile_failed;
    }
}

/// The progress of one compile as a single line on standard error, a terminal: redrawn (carriage
/// return, text, clear to the end of the line) on each report and 5 times a second so that the
/// time runs, cut to the terminal's width, and ended with a line feed by finish(). A lookup shows
/// only once it has taken a second (a quick hit shows nothing at all). Log lines written through
/// log_sink() take the line's place and the line is drawn again below them.
class ProgressDisplay {
public:
    ProgressDisplay() : ticker_([this] { tick(); }) {}
    ProgressDisplay(const ProgressDisplay&) = delete;
    ProgressDisplay& operator=(const ProgressDisplay&) = delete;
    ~ProgressDisplay() { finish(); }

    /// A report from the compile (skc::CompilerSettings::progress).
    void update(const skc::CompileProgress& p) {
        std::lock_guard lock(mu_);
        state_ = p;
        since_ = std::chrono::steady_clock::now() - p.elapsed;
        draw_locked();
    }

    /// skc::stderr_log(min_level), writing its lines where the progress line was.
    skc::LogSink log_sink(skc::LogLevel min_level) {
        return [this, min_level, inner = skc::stderr_log(min_level)](skc::LogLevel level, std::string_view line) {
            if (static_cast<int>(level) < static_cast<int>(min_level)) return;
            std::lock_guard lock(mu_);
            if (drawn_) write("\r\033[K");
            drawn_ = false;
            inner(level, line);
            if (!stop_) draw_locked();
        };
    }

    /// Stops the redrawing; the line, if one is shown, stays and gets its line feed.
    void finish() {
        {
            std::lock_guard lock(mu_);
            if (stop_) return;
            stop_ = true;
        }
        cv_.notify_all();
        ticker_.join();
        std::lock_guard lock(mu_);
        if (drawn_) write("\n");
        drawn_ = false;
    }

private:
    void tick() {
        // SIGINT, SIGTERM and SIGHUP go to the compile's thread, whose texts the handler writes
        // (interruption::set runs there): never to this one.
        sigset_t stop;
        sigemptyset(&stop);
        for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop, sig);
        ::pthread_sigmask(SIG_BLOCK, &stop, nullptr);
        std::unique_lock lock(mu_);
        while (!cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stop_; })) draw_locked();
    }

    void draw_locked() {
        if (!state_) return;
        const skc::CompileProgress& p = *state_;
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
        std::string text;
        switch (p.phase) {
        case skc::CompileProgress::Phase::compiling:
            text = "compiling: " + std::to_string(p.done) + "/" + std::to_string(p.total) + " ops";
            break;
        case skc::CompileProgress::Phase::waiting: text = "waiting for " + shorten_key(p.waiting_for, p.key); break;
        case skc::CompileProgress::Phase::lookup:
            if (secs < 1.0) return;
            text = "looking up cache key " + shorten_key(p.key, p.key);
            break;
        case skc::CompileProgress::Phase::installing:
            if (secs < 1.0) return;
            text = "installing the package";
            break;
        }
        text = printable(text) + format(", %.1f s", secs);
        winsize ws{};
        if (::ioctl(2, TIOCGWINSZ, &ws) == 0 &&
            ws.ws_col > 1) {  // a longer line would wrap, and \r not reach its start
            const std::size_t width = ws.ws_col - 1u;
            std::size_t chars = 0, cut = 0;  // count characters, not bytes (the ellipsis)
            for (; cut < text.size(); ++cut)
                if ((static_cast<unsigned char>(text[cut]) & 0xC0) != 0x80 && chars++ == width) break;
            text.resize(cut);
        }
        write("\r\033[K" + text);
        drawn_ = true;
    }

    /// `text` with the cache key in it cut to its first 8 hex digits.
    static std::string shorten_key(std::string text, const std::string& key) {
        if (key.size() > 8)
            if (const std::size_t at = text.find(key); at != std::string::npos)
                text.replace(at, key.size(), key.substr(0, 8) + "\u2026");
        return text;
    }

    static void write(const std::string& s) {
        std::fwrite(s.data(), 1, s.size(), stderr);
        std::fflush(stderr);
    }

    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    bool drawn_ = false;  // the line shows something
    std::optional<skc::CompileProgress> state_;
    std::chrono::steady_clock::time_point since_;
    std::thread ticker_;  // last: it starts once the rest is there
};

/// What `skc compile` says when SIGINT, SIGTERM or SIGHUP ends it: what it was doing, and what is
/// left. The text is prepared as the compile goes (set(), from the compile's thread, the only one
/// that does not block these signals) in one of two buffers, so the handler only writes a finished one; the handler
/// then ends the process with the signal's default action (exit status 128 + signal), and the guards of the compiler
/// and of the package's extraction stop them (skc::detail::GroupGuard). Every file skc writes is renamed into place
/// whole, so what an interrupted run leaves is what was there before or complete.
namespace interruption {
constexpr std::size_t max_text = 2048;
char texts[2][max_text];
std::atomic<int> current{-1};
int next_slot = 0;
volatile std::sig_atomic_t on_terminal = 0;  // a progress line may be drawn: clear it first

void set(const std::string& what) {
    const int slot = next_slot;
    next_slot ^= 1;
    const std::size_t n = std::min(what.size(), max_text - 2);
    std::memcpy(texts[slot], what.data(), n);
    texts[slot][n] = '\n';
    texts[slot][n + 1] = '\0';
    current.store(slot);
}

void write_all(const char* s) noexcept {
    for (std::size_t left = std::strlen(s); left > 0;) {
        const ssize_t w = ::write(2, s, left);
        if (w <= 0) return;
        s += w;
        left -= static_cast<std::size_t>(w);
    }
}

extern "C" void handler(int sig) {
    if (on_terminal) write_all("\r\033[K");
    write_all("skc compile: interrupted by SIG");
    const char* name = ::sigabbrev_np(sig);
    write_all(name ? name : "?");
    const int slot = current.load();
    write_all(slot >= 0 ? " while " : "\n");
    if (slot >= 0) write_all(texts[slot]);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(sig, &dfl, nullptr);
    ::raise(sig);  // blocked while the handler runs: delivered (default action) when it returns
}

void install() {
    struct sigaction sa {};
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
        struct sigaction cur {};
        if (::sigaction(sig, nullptr, &cur) == 0 && cur.sa_handler == SIG_IGN) continue;  // e.g. nohup
        ::sigaction(sig, &sa, nullptr);
    }
}

/// The text for a progress report.
void follow(const skc::CompileProgress& p, std::size_t ops, const fs::path& library) {
    const std::string key = p.key.empty() ? std::string() : " for cache key " + p.key;
    switch (p.phase) {
    case skc::CompileProgress::Phase::waiting:
        set("waiting for " + p.waiting_for + ": nothing was compiled or stored");
        break;
    case skc::CompileProgress::Phase::lookup: set("looking up cache key " + p.key + ": the cache is unchanged"); break;
    case skc::CompileProgress::Phase::compiling:
        set("compiling " + std::to_string(p.total ? p.total : ops) + " ops" + key + " (" + std::to_string(p.done) +
            " done): the compiler is stopped, and the cache holds no part of this compile");
        break;
    case skc::CompileProgress::Phase::installing:
        set("installing the package" + key + " into " + printable(library.string()) +
            ": the package stays in the cache; the op library holds no part of this install (a later run installs it)");
        break;
    }
}
}  // namespace interruption

void print_report(const skc::CompileReport& r, const fs::path& library, const std::string& backend) {
    std::string s = "skc compile: " + std::string(skc::describe(r.outcome)) + "\n";
    if (r.local_world_size > 1)
        s += "  rank       local rank " + std::to_string(r.local_rank) + " of " + std::to_string(r.local_world_size) +
             (r.local_rank == 0 ? " (the leader)" : "") + ", " + plural(r.gathered, "op", "ops") +
             " gathered from the node\n";
    if (r.outcome == skc::CompileOutcome::skipped) {
        s += "  nothing to compile: " + plural(r.recorded, "distinct op", "distinct ops") + ", " +
             std::to_string(r.supported) + " supported, " + std::to_string(r.blacklisted) + " blacklisted\n";
    } else {
        s += "  key        " + r.key + "\n";
        s += "  package    " + printable(r.package.string()) + "\n";
        s += "  installed  " +
             (r.installed.empty()
                  ? std::string("no (give --op-library to install)")
                  : printable(r.installed) + " in " + printable(skc::install_base(library, backend).string())) +
             "\n";
        s += "  ops        " + std::to_string(r.selected) + " selected of " + std::to_string(r.recorded) +
             " distinct (" + std::to_string(r.recorded - r.supported) + " unsupported, " +
             std::to_string(r.blacklisted) + " blacklisted)\n";
        if (const std::string w = r.work(); !w.empty()) s += "  kernels    " + w + "\n";
    }
    if (r.failed > 0)
        s += "  failed     " + plural(r.failed, "op", "ops") +
             " the compiler failed on, left out and remembered (found with " +
             plural(r.isolation_compiles, "more compile", "more compiles") + "; skc cache failures shows why)\n";
    if (r.known_failed > 0)
        s += "  left out   " + plural(r.known_failed, "op", "ops") +
             " the compiler failed on before (skc cache forget-failures tries them again)\n";
    std::string stages;
    for (const auto& [name, t] : r.stages) stages += (stages.empty() ? "" : ", ") + name + " " + ms(t);
    s += "  stages     " + stages + "\n";
    s += "  run folder " + printable(r.run_dir.string()) + "\n";
    out(s);
}

int run_compile(const CompileArgs& a) {
    const std::string prefix = "skc compile: ";
    skc::Options o = key_options(a.key);
    o.disable_static_kernel_compile_cache = a.no_cache;
    o.base_dir = a.base;
    if (a.model_cache) {
        o.model_compile_cache = true;
        o.model_compile_cache_dir = o.base_dir;
    }
    if (a.cache_dir) o.cache_dir = *a.cache_dir;
    if (a.cache_mode) {
        try {
            o.cache_mode = skc::parse_cache_mode(*a.cache_mode, "--cache-mode");
        } catch (const skc::Error& e) {
            throw UsageError{printable(e.what())};
        }
    }
    if (a.remote_cache) o.remote_cache = *a.remote_cache;
    o.remote_cache_read_only = a.remote_read_only;
    if (a.jobs) o.jobs = *a.jobs;
    if (a.timeout) o.compile_timeout = std::chrono::seconds(*a.timeout);
    if (a.log_level)
        for (const skc::LogLevel level : log_levels)
            if (*a.log_level == skc::to_string(level)) o.log_level = level;

    skc::CompilerSettings s;
    s.toolchain_version = a.key.toolchain_version;
    s.device = a.key.device;
    s.op_library = a.op_library.value_or("");
    s.backend = a.backend;
    s.persistent_install = true;
    s.cache.wait_timeout = o.compile_timeout;  // waiting for another process's compile is bounded alike
    constexpr skc::LogLevel cache_log_level = skc::LogLevel::info;
    s.cache.log = skc::stderr_log(cache_log_level);
    s.log = skc::stderr_log(skc::LogLevel::warning);  // warnings only: the report is printed below

#ifndef SKC_TOOL_WITH_REDIS
    if (a.remote_cache)
        throw UsageError{
            "--remote-cache: this skc was built without hiredis (rebuild it with Debian's libhiredis-dev "
            "installed, or leave out --remote-cache)"};
#endif
#ifndef SKC_TOOL_WITH_MPI
    if (a.mpi)
        throw UsageError{
            "--mpi: this skc was built without MPI (rebuild it with MPI installed, e.g. Debian's "
            "libopenmpi-dev, or leave out --mpi)"};
#endif

    // Bad input is found before anything is written.
    require_folder("--ops", a.key.ops);
    require_folder("--base", o.base_dir);
    if (const fs::path c = a.key.compiler; c.has_parent_path() && ::access(c.c_str(), X_OK) != 0)
        throw UsageError{
            "--compiler " + printable(c.string()) + ": " + (fs::exists(c) ? "not executable" : "no such file"), false};
    interruption::set("reading the op info files: nothing was written");
    interruption::install();
    // Read everything first: a bad file, or a folder that cannot be read, is bad input (exit 2, as
    // skc ops inspect), and nothing is written.
    std::vector<skc::OpRecord> ops;
    try {
        for (skc::LoadedOp& op : skc::read_op_info_dir(a.key.ops).ops) ops.push_back(std::move(op.record));
        if (ops.empty())
            throw skc::Error(skc::Errc::invalid_argument, "no op info files (*.json) in the folder",
                             skc::ErrorContext{a.key.ops, {}, {}});
    } catch (const skc::Error& e) {
        std::fprintf(stderr, "%s%s\n", prefix.c_str(), printable(e.what(), /*keep_newlines=*/true).c_str());
        return exit_usage;
    }
    try {
        // Progress only for a person watching: not with --json, not into a file or a pipe.
        const bool show_progress = !a.json && ::isatty(2) == 1;
#ifdef SKC_TOOL_WITH_MPI
        // skc owns MPI here; the MpiGather (in the compiler, declared later) goes before MPI_Finalize.
        struct MpiSession {
            MpiSession() {
                if (MPI_Init(nullptr, nullptr) != MPI_SUCCESS) throw skc::Error(skc::Errc::io_error, "MPI_Init failed");
            }
            MpiSession(const MpiSession&) = delete;
            MpiSession& operator=(const MpiSession&) = delete;
            ~MpiSession() { MPI_Finalize(); }
        };
        std::optional<MpiSession> mpi;
        if (a.mpi) mpi.emplace();
        skc::AnyGather gather = a.mpi ? skc::AnyGather(skc::MpiGather(MPI_COMM_WORLD, o.compile_timeout))
                                      : skc::AnyGather::from_env(o.compile_timeout, a.run_id.value_or(""));
#else
        skc::AnyGather gather = skc::AnyGather::from_env(o.compile_timeout, a.run_id.value_or(""));
#endif
        std::optional<ProgressDisplay> display;  // outlives the compiler, whose cache logs through it
        skc::CompilerSettings settings = s;
        if (show_progress) {
            display.emplace();
            settings.cache.log = display->log_sink(cache_log_level);
            settings.log = display->log_sink(skc::LogLevel::warning);
            interruption::on_terminal = 1;
        }
        settings.progress = [&display, n = ops.size(), &library = s.op_library](const skc::CompileProgress& pr) {
            interruption::follow(pr, n, library);
            if (display) display->update(pr);
        };
        interruption::set("recording and selecting " + std::to_string(ops.size()) +
                          " ops: nothing was compiled or stored");
        skc::NodeCompiler<skc::ProcessInvoker, ToolRemote> compiler(skc::ProcessInvoker(a.key.compiler), o, settings,
                                                                    std::move(gather));
        const skc::CompileReport r = compiler.compile(std::move(ops));
        interruption::set("printing the report: the compile and install are complete");
        if (display) display->finish();
        if (a.json) out(skc::dump_json(r.to_value(), 2) + "\n");
        else print_report(r, s.op_library, s.backend);
        return exit_ok;
    } catch (const skc::Error& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "%s%s\n", prefix.c_str(), printable(e.what(), /*keep_newlines=*/true).c_str());
        return exit_status_of(e);
    }
}

}  // namespace

/// skc::Options with the key's options as `skc compile` and `skc cache explain` read them.
skc::Options key_options(const KeyArgs& key) {
    skc::Options o;
    o.static_kernel_compile = true;
    o.op_blacklist = key.blacklist;
    o.compiler_options = key.compiler_args;
    o.deterministic = key.deterministic;
    if (key.compiler_check) {
        try {
            o.compiler_check = skc::parse_compiler_check(*key.compiler_check, "--compiler-check");
        } catch (const skc::Error& e) {
            throw UsageError{printable(e.what())};
        }
    }
    return o;
}

void add_key_options(CLI::App& app, KeyArgs& key) {
    add_value(app, "--ops", key.ops, "DIR", "the folder of op info files")->required();
    add_value(app, "--compiler", key.compiler, "PATH", "the kernel compiler, run as op_compiler")->required();
    add_value(app, "--device", key.device, "NAME", "device name, passed to the compiler as -v")->required();
    add_value(app, "--toolchain-version", key.toolchain_version, "VER",
              "toolchain version: with the device, names the cache namespace")
        ->required();
    add_values(app, "--compiler-arg", key.compiler_args, "ARG", "pass ARG to the compiler; part of the cache key");
    add_values(app, "--blacklist", key.blacklist, "SUBSTR", "leave out op info files whose name contains SUBSTR");
    add_switch(app, "--deterministic", key.deterministic,
               "the job runs deterministically: part of the cache key, not passed to the compiler");
    add_value(app, "--compiler-check", key.compiler_check, "MODE",
              "how the compiler's fingerprint in the cache key is taken: content (default: a hash of the "
              "executable), mtime, none, string:TEXT or command:CMD");
}

void add_compile(CLI::App& skc, Action& action) {
    const auto a = std::make_shared<CompileArgs>();
    CLI::App* c =
        skc.add_subcommand("compile", "compile a folder of op info files into a run package (or find it in the cache)");
    c->footer(
        "Compiles the op info files in --ops into one run package, or finds it in the cache, as a framework\n"
        "process would; with --op-library installs it there until 'skc uninstall'.\n\n"
        "exit status: 0 done (cache hit, compiled, or nothing to compile); 1 the compile or the install\n"
        "failed; 2 bad usage or bad input; 3 a timeout.");
    add_key_options(*c, a->key);
    add_value(*c, "--base", a->base, "DIR", "output base: static_kernel_compile_outputs/ and the cache go here")
        ->required();
    add_value(*c, "--op-library", a->op_library, "DIR",
              "install the package here, persistently (default: do not install)");
    add_value(*c, "--backend", a->backend, "NAME", "op library backend folder (default: host)")
        ->check(plain_name_value());
    add_switch(*c, "--no-cache", a->no_cache, "always compile; do not read or write the cache");
    add_value(*c, "--cache-dir", a->cache_dir, "DIR",
              "the cache folder, shared by any number of bases (default: $SKC_CACHE_DIR, else "
              "<base>/static_kernel_compile_outputs/static_kernel_cache)");
    add_value(*c, "--cache-mode", a->cache_mode, "MODE",
              "read-write (default: $SKC_CACHE_MODE, else read-write), read-only (look up, never write the cache) "
              "or recache (compile and replace the entry)");
    add_value(*c, "--remote-cache", a->remote_cache, "URL",
              "a remote cache tier behind the local cache, shared by nodes: redis://[user:password@]host[:port][/db] "
              "(default: $SKC_REMOTE_CACHE; needs skc built with hiredis)");
    add_switch(*c, "--remote-read-only", a->remote_read_only,
               "only look up and download from the remote cache: never lease, upload or replace there (also "
               "$SKC_REMOTE_CACHE_READ_ONLY=1)");
    add_switch(*c, "--model-cache", a->model_cache, "model compile cache variant: compile <pid>_opcompile directly");
    add_value(*c, "--jobs", a->jobs, "N", "parallel jobs for the compiler, 1 to 1024 (default: the number of CPUs)")
        ->check(positive_value(1024));
    add_value(*c, "--timeout", a->timeout, "SECONDS",
              "limit for the compile, for waiting on another process's compile and for each wait on the other "
              "ranks, up to 604800 (default 3600)")
        ->check(positive_value(7 * 24 * 3600));
    add_value(*c, "--run-id", a->run_id, "ID",
              "with LOCAL_WORLD_SIZE/LOCAL_RANK: the job's run id when neither SKC_RUN_ID nor TORCHELASTIC_RUN_ID "
              "is set");
    add_switch(*c, "--mpi", a->mpi,
               "the ranks of an MPI job (run under mpirun): one leader per node compiles and installs; --timeout "
               "bounds each wait on the other ranks (needs skc built with MPI)");
    add_value(*c, "--log-level", a->log_level, "LEVEL", "passed to the compiler as -l: debug, info, warning or error")
        ->check(validator([](std::string& s) {
            for (const skc::LogLevel level : log_levels)
                if (s == skc::to_string(level)) return std::string();
            return bad_value(s) + "expected debug, info, warning or error";
        }));
    add_switch(*c, "--json", a->json, "print the report as JSON");
    c->callback([&action, a] { action = [a] { return run_compile(*a); }; });
}

}  // namespace skc_tool
