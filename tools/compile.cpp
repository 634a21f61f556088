// skc compile and skc uninstall: the flow without a framework, on a folder of op info files, and
// removing what it installed.
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
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <skc/compiler.hpp>
#include <skc/op_info_io.hpp>
#include <skc/policy/gather.hpp>
#include <skc/policy/installer.hpp>
#include <skc/policy/invoker.hpp>

#ifdef SKC_TOOL_WITH_MPI
#include <mpi.h>

#include <skc/ext/mpi.hpp>
#endif

#include "commands.hpp"
#include "common.hpp"

namespace skc_tool {

namespace {

namespace fs = std::filesystem;

constexpr int exit_compile_failed = 1;
constexpr int exit_timeout = 3;

constexpr std::array compile_specs{
    OptionSpec{"--ops", "DIR", "the op info files to compile (required)"},
    OptionSpec{"--base", "DIR", "output base: static_kernel_compile_outputs/ and the cache go here (required)"},
    OptionSpec{"--compiler", "PATH", "the kernel compiler, run as op_compiler (required)"},
    OptionSpec{"--device", "NAME", "device name, passed as -v (required)"},
    OptionSpec{"--toolchain-version", "VER", "toolchain version: with the device, names the cache (required)"},
    OptionSpec{"--op-library", "DIR", "install the package here, persistently (default: do not install)"},
    OptionSpec{"--backend", "NAME", "op library backend folder (default: host)"},
    OptionSpec{"--no-cache", "", "always compile; do not read or write the cache"},
    OptionSpec{"--cache-dir", "DIR",
               "the cache folder, shared by any number of bases (default: $SKC_CACHE_DIR, else "
               "<base>/static_kernel_compile_outputs/static_kernel_cache)"},
    OptionSpec{"--cache-mode", "MODE",
               "read-write (default: $SKC_CACHE_MODE, else read-write), read-only (look up, never "
               "write the cache) or recache (compile and replace the entry)"},
    OptionSpec{"--model-cache", "", "model compile cache variant: compile <pid>_opcompile directly"},
    OptionSpec{"--blacklist", "SUBSTR", "leave out op info files whose name contains SUBSTR (repeatable)", true},
    OptionSpec{"--compiler-arg", "ARG", "pass ARG to the compiler; part of the cache key (repeatable)", true},
    OptionSpec{"--deterministic", "",
               "the job runs deterministically: part of the cache key, not passed to the compiler"},
    OptionSpec{"--compiler-check", "MODE",
               "how the compiler's fingerprint in the cache key is taken: content (default: a "
               "hash of the executable), mtime, none, string:TEXT or command:CMD"},
    OptionSpec{"--jobs", "N", "parallel jobs for the compiler, 1 to 1024 (default: the number of CPUs)"},
    OptionSpec{"--timeout", "SECONDS",
               "limit for the compile, for waiting on another process's compile and for "
               "each wait on the other ranks, up to 604800 (default 3600)"},
    OptionSpec{"--run-id", "ID",
               "with LOCAL_WORLD_SIZE/LOCAL_RANK: the job's run id when neither SKC_RUN_ID nor "
               "TORCHELASTIC_RUN_ID is set"},
    OptionSpec{"--mpi", "",
               "the ranks of an MPI job (run under mpirun): one leader per node compiles and installs; "
               "--timeout bounds each wait on the other ranks (needs skc built with MPI)"},
    OptionSpec{"--log-level", "LEVEL", "passed to the compiler as -l: debug, info, warning or error"},
    OptionSpec{"--json", "", "print the report as JSON"},
};

constexpr std::array uninstall_specs{
    OptionSpec{"--op-library", "DIR", "the op library (required)"},
    OptionSpec{"--backend", "NAME", "op library backend folder (default: host)"},
};

/// 1 to `max`; `what` names the option in the message. The limits are those of skc::parse_options.
unsigned parse_positive(const std::string& prefix, const std::string& what, const std::string& s, unsigned max) {
    const std::optional<std::uint64_t> n = parse_count(s);
    if (!n || *n == 0 || *n > max)
        throw UsageError{prefix + "bad " + what + " '" + printable(s) + "': expected a whole number from 1 to " +
                         std::to_string(max)};
    return static_cast<unsigned>(*n);
}

/// A folder the command needs, checked before anything is written.
void require_folder(const std::string& prefix, const char* option, const std::string& path) {
    std::error_code ec;
    if (!fs::is_directory(path, ec))
        throw UsageError{prefix + option + " " + printable(path) + ": " +
                         (fs::exists(fs::symlink_status(path, ec)) ? "not a folder" : "no such folder")};
}

/// Letters, digits, '_', '-', '.', not starting with '.': a name that is one path component.
bool plain_name(std::string_view s) {
    if (s.empty() || s.front() == '.' || s.size() > 255) return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
               c == '.';
    });
}

std::string backend_of(const std::string& prefix, const ParsedArgs& p) {
    const std::string b = p.get("--backend").value_or("host");
    if (!plain_name(b))
        throw UsageError{prefix + "bad --backend '" + printable(b) +
                         "': use letters, digits, '_', '-' and '.', not starting with '.'"};
    return b;
}

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
             (r.installed.empty() ? std::string("no (give --op-library to install)")
                                  : printable(r.installed) + " in " +
                                        printable(skc::RunPackageInstaller::base_of(library, backend).string())) +
             "\n";
        s += "  ops        " + std::to_string(r.selected) + " selected of " + std::to_string(r.recorded) +
             " distinct (" + std::to_string(r.recorded - r.supported) + " unsupported, " +
             std::to_string(r.blacklisted) + " blacklisted)\n";
    }
    std::string stages;
    for (const auto& [name, t] : r.stages) stages += (stages.empty() ? "" : ", ") + name + " " + ms(t);
    s += "  stages     " + stages + "\n";
    s += "  run folder " + printable(r.run_dir.string()) + "\n";
    out(s);
}

/// The options that go into the cache key besides the ops, the toolchain and the device, as
/// `skc compile` and `skc cache explain` read them.
skc::Options key_options(const std::string& prefix, const ParsedArgs& p) {
    skc::Options o;
    o.static_kernel_compile = true;
    o.op_blacklist = p.all("--blacklist");
    o.compiler_options = p.all("--compiler-arg");
    o.deterministic = p.has("--deterministic");
    if (const auto c = p.get("--compiler-check")) {
        try {
            o.compiler_check = skc::parse_compiler_check(*c, "--compiler-check");
        } catch (const skc::Error& e) {
            throw UsageError{prefix + printable(e.what())};
        }
    }
    return o;
}

skc::Object explanation_json(const skc::MissExplanation& x) {
    skc::Object j;
    j.push_back({"key", x.entry.key});
    j.push_back({"namespace", utf8(x.ns)});
    j.push_back({"created_unix", x.entry.created_unix});
    skc::Array parts;
    for (const skc::PartDifference& d : x.parts)
        parts.emplace_back(skc::Object{{"part", d.part}, {"entry", utf8(d.entry)}, {"wanted", utf8(d.wanted)}});
    j.push_back({"parts", std::move(parts)});
    skc::Object ops;
    ops.push_back({"differ", x.ops_differ});
    ops.push_back({"known", x.ops_known});
    ops.push_back({"common", x.common_ops});
    auto names = [](const std::vector<std::string>& v) {
        skc::Array a;
        for (const std::string& n : v) a.emplace_back(utf8(n));
        return a;
    };
    ops.push_back({"added", names(x.added)});
    ops.push_back({"removed", names(x.removed)});
    skc::Array changed;
    for (const auto& [was, now] : x.changed)
        changed.emplace_back(skc::Object{{"entry", utf8(was)}, {"now", utf8(now)}});
    ops.push_back({"changed", std::move(changed)});
    j.push_back({"ops", std::move(ops)});
    j.push_back({"near", x.near()});
    return j;
}

std::string explanation_text(const skc::MissExplanation& x) {
    std::string r = "nearest entry: " + x.entry.key + " in " + printable(x.ns) + ", stored " +
                    local_time(x.entry.created_unix) + "\n";
    if (x.parts.empty() && !x.ops_differ) return r;
    r += "it differs in:\n";
    for (const skc::PartDifference& d : x.parts)
        r += "  " + d.part + ": " + printable(d.entry) + " (entry) -> " + printable(d.wanted) + " (now)\n";
    if (x.ops_differ && !x.ops_known) {
        r += "  ops: the entry keeps no op list to compare with (" + std::to_string(x.entry.ops) + " ops)\n";
    } else if (x.ops_differ) {
        r += "  ops: " + std::to_string(x.changed.size()) + " changed, " + std::to_string(x.added.size()) + " added, " +
             std::to_string(x.removed.size()) + " removed, " + std::to_string(x.common_ops) + " the same\n";
        for (const auto& [was, now] : x.changed)
            r += "    changed  " + printable(now) + " (the entry's " + printable(was) + ")\n";
        for (const std::string& n : x.added) r += "    added    " + printable(n) + "\n";
        for (const std::string& n : x.removed) r += "    removed  " + printable(n) + "\n";
    }
    return r;
}

}  // namespace

int explain_cache_miss(const std::string& prefix, const ParsedArgs& p, const fs::path& cache_dir,
                       const std::string& shown, const std::optional<std::string>& ns, bool json) {
    const skc::Options o = key_options(prefix, p);
    require_folder(prefix, "--ops", *p.get("--ops"));
    // The same selection as skc compile's: supported ops, not blacklisted, distinct, without bin fields.
    skc::DirReadResult in = skc::read_op_info_dir(*p.get("--ops"));
    for (skc::LoadedOp& op : in.ops) op.record = skc::without_bin_fields(std::move(op.record));
    const skc::CompiledSet none;
    const std::vector<skc::Decision> decisions =
        skc::plan_selection(in.ops, skc::SelectOptions{o.op_blacklist, false}, none);
    std::vector<skc::Digest> digests;
    std::vector<skc::KeyOp> named;
    for (const skc::Decision& d : decisions)
        if (d.verdict == skc::Verdict::selected) {
            digests.push_back(d.digest);
            named.push_back({d.digest, d.name});
        }
    if (digests.empty())
        throw skc::Error(skc::Errc::invalid_argument,
                         "no op info file to compile in the folder (none, or all left out)",
                         skc::ErrorContext{*p.get("--ops"), {}, {}});
    const std::string fingerprint =
        skc::compiler_fingerprint(*p.get("--compiler"), o.compiler_check, cache_dir, skc::MemoAccess::read_only);
    skc::CacheKey key = skc::make_cache_key(
        digests, skc::key_inputs(o, *p.get("--toolchain-version"), *p.get("--device"), fingerprint));
    key.ops = std::move(named);
    const std::optional<skc::MissExplanation> x = skc::explain_miss(cache_dir, key, ns.value_or(""));
    if (json) {
        skc::Object root;
        root.push_back({"cache_dir", utf8(shown)});
        root.push_back({"key", key.hex()});
        root.push_back({"ops", digests.size()});
        root.push_back({"hit", x && x->hit});
        root.push_back({"nearest", x && !x->hit ? skc::Value(explanation_json(*x)) : skc::Value(nullptr)});
        print_json(std::move(root));
        return exit_ok;
    }
    std::string r = "cache directory: " + printable(shown) + "\nkey " + key.hex() + " (" +
                    plural(digests.size(), "op", "ops") + ")\n";
    if (x && x->hit) r += "hit: the key has an entry in " + printable(x->ns) + "\n";
    else if (!x) r += "miss: the cache has no entry to compare with\n";
    else r += "miss\n" + explanation_text(*x);
    out(r);
    return exit_ok;
}

std::string compile_usage() {
    return "usage: skc compile --ops DIR --base DIR --compiler PATH --device NAME --toolchain-version VER\n"
           "                   [--op-library DIR] [--no-cache] [--model-cache] [--blacklist SUBSTR]...\n"
           "                   [--jobs N] [--timeout SECONDS] [--json] [...]\n\n"
           "Compiles the op info files in DIR into one run package, or finds it in the cache, as a framework\n"
           "process would; with --op-library installs it there until 'skc uninstall'.\n\noptions:\n" +
           options_help(compile_specs) +
           "\nexit status: 0 done (cache hit, compiled, or nothing to compile); 1 the compile or the install\n"
           "failed; 2 bad usage or bad input; 3 a timeout.\n";
}

int run_compile(Args args) {
    const std::string prefix = "skc compile: ";
    const ParsedArgs p = parse_args(prefix, compile_specs, args, 0, "skc compile --help");
    if (p.help) {
        out(compile_usage());
        return exit_ok;
    }
    for (const char* required : {"--ops", "--base", "--compiler", "--device", "--toolchain-version"})
        if (!p.has(required))
            throw UsageError{prefix + "missing " + std::string(required) + " (see skc compile --help)"};

    skc::Options o = key_options(prefix, p);
    o.disable_static_kernel_compile_cache = p.has("--no-cache");
    o.base_dir = *p.get("--base");
    if (p.has("--model-cache")) {
        o.model_compile_cache = true;
        o.model_compile_cache_dir = o.base_dir;
    }
    if (const auto d = p.get("--cache-dir")) {
        if (d->empty()) throw UsageError{prefix + "--cache-dir is empty; give the cache folder"};
        o.cache_dir = *d;
    }
    if (const auto m = p.get("--cache-mode")) {
        try {
            o.cache_mode = skc::parse_cache_mode(*m, "--cache-mode");
        } catch (const skc::Error& e) {
            throw UsageError{prefix + printable(e.what())};
        }
    }
    if (const auto j = p.get("--jobs")) o.jobs = parse_positive(prefix, "--jobs", *j, 1024);
    if (const auto t = p.get("--timeout"))
        o.compile_timeout = std::chrono::seconds(parse_positive(prefix, "--timeout", *t, 7 * 24 * 3600));
    if (const auto l = p.get("--log-level")) {
        for (const skc::LogLevel level :
             {skc::LogLevel::debug, skc::LogLevel::info, skc::LogLevel::warning, skc::LogLevel::error})
            if (*l == skc::to_string(level)) o.log_level = level;
        if (!o.log_level)
            throw UsageError{prefix + "bad --log-level '" + printable(*l) +
                             "': expected debug, info, warning or error"};
    }

    skc::CompilerSettings s;
    s.toolchain_version = *p.get("--toolchain-version");
    s.device = *p.get("--device");
    s.op_library = p.get("--op-library").value_or("");
    s.backend = backend_of(prefix, p);
    s.persistent_install = true;
    s.cache.wait_timeout = o.compile_timeout;  // waiting for another process's compile is bounded alike
    constexpr skc::LogLevel cache_log_level = skc::LogLevel::info;
    s.cache.log = skc::stderr_log(cache_log_level);
    s.log = skc::null_log();  // the report is printed below

#ifndef SKC_TOOL_WITH_MPI
    if (p.has("--mpi"))
        throw UsageError{prefix +
                         "--mpi: this skc was built without MPI (rebuild it with MPI installed, e.g. Debian's "
                         "libopenmpi-dev, or leave out --mpi)"};
#endif

    // Bad input is found before anything is written.
    require_folder(prefix, "--ops", *p.get("--ops"));
    require_folder(prefix, "--base", o.base_dir);
    if (const fs::path c = *p.get("--compiler"); c.has_parent_path() && ::access(c.c_str(), X_OK) != 0)
        throw UsageError{prefix + "--compiler " + printable(c.string()) + ": " +
                         (fs::exists(c) ? "not executable" : "no such file")};
    interruption::set("reading the op info files: nothing was written");
    interruption::install();
    // Read everything first: a bad file, or a folder that cannot be read, is bad input (exit 2, as
    // skc ops inspect), and nothing is written.
    std::vector<skc::OpRecord> ops;
    try {
        for (skc::LoadedOp& op : skc::read_op_info_dir(*p.get("--ops")).ops) ops.push_back(std::move(op.record));
        if (ops.empty())
            throw skc::Error(skc::Errc::invalid_argument, "no op info files (*.json) in the folder",
                             skc::ErrorContext{*p.get("--ops"), {}, {}});
    } catch (const skc::Error& e) {
        std::fprintf(stderr, "%s%s\n", prefix.c_str(), printable(e.what(), /*keep_newlines=*/true).c_str());
        return exit_usage;
    }
    try {
        // Progress only for a person watching: not with --json, not into a file or a pipe.
        const bool show_progress = !p.has("--json") && ::isatty(2) == 1;
        auto run_with = [&](auto gather) {
            std::optional<ProgressDisplay> display;  // outlives the compiler, whose cache logs through it
            skc::CompilerSettings settings = s;
            if (show_progress) {
                display.emplace();
                settings.cache.log = display->log_sink(cache_log_level);
                interruption::on_terminal = 1;
            }
            settings.progress = [&display, n = ops.size(), &library = s.op_library](const skc::CompileProgress& pr) {
                interruption::follow(pr, n, library);
                if (display) display->update(pr);
            };
            interruption::set("recording and selecting " + std::to_string(ops.size()) +
                              " ops: nothing was compiled or stored");
            skc::StaticKernelCompiler<skc::ProcessInvoker, skc::with_gather<decltype(gather)>> compiler(
                skc::ProcessInvoker(*p.get("--compiler")), o, settings, std::move(gather));
            const skc::CompileReport r = compiler.compile(std::move(ops));
            interruption::set("printing the report: the compile and install are complete");
            if (display) display->finish();
            if (p.has("--json")) out(skc::dump_json(r.to_value(), 2) + "\n");
            else print_report(r, s.op_library, s.backend);
            return exit_ok;
        };
#ifdef SKC_TOOL_WITH_MPI
        if (p.has("--mpi")) {
            // skc owns MPI here; the MpiGather (in the compiler) goes before MPI_Finalize.
            struct MpiSession {
                MpiSession() {
                    if (MPI_Init(nullptr, nullptr) != MPI_SUCCESS)
                        throw skc::Error(skc::Errc::io_error, "MPI_Init failed");
                }
                MpiSession(const MpiSession&) = delete;
                MpiSession& operator=(const MpiSession&) = delete;
                ~MpiSession() { MPI_Finalize(); }
            } mpi;
            return run_with(skc::MpiGather(MPI_COMM_WORLD, o.compile_timeout));
        }
#endif
        if (std::optional<skc::LocalRanks> ranks = skc::local_ranks_from_env(p.get("--run-id").value_or("")))
            return run_with(skc::LocalFsGather(std::move(*ranks), o.compile_timeout));
        return run_with(skc::SingleRank());
    } catch (const skc::Error& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "%s%s\n", prefix.c_str(), printable(e.what(), /*keep_newlines=*/true).c_str());
        return exit_status_of(e);
    }
}

std::string uninstall_usage() {
    return "usage: skc uninstall --op-library DIR [PACKAGE] [--backend NAME]\n\n"
           "Removes the persistent install of PACKAGE (a package stem, as 'skc compile' printed it), or of every\n"
           "package without PACKAGE. A package that running processes still use stays until the last one ends.\n\n"
           "options:\n" +
           options_help(uninstall_specs) +
           "\nexit status: 0 done; 1 the op library could not be changed; 2 bad usage, "
           "or PACKAGE is not installed.\n";
}

int run_uninstall(Args args) {
    const std::string prefix = "skc uninstall: ";
    const ParsedArgs p = parse_args(prefix, uninstall_specs, args, 1, "skc uninstall --help");
    if (p.help) {
        out(uninstall_usage());
        return exit_ok;
    }
    if (!p.has("--op-library")) throw UsageError{prefix + "missing --op-library (see skc uninstall --help)"};
    const fs::path library = *p.get("--op-library");
    const std::string backend = backend_of(prefix, p);
    require_folder(prefix, "--op-library", library.string());
    try {
        skc::check_path_safety(library, "--op-library");
        skc::RunPackageInstaller installer;
        const std::vector<skc::InstalledPackage> installed = installer.list(library, backend);
        std::vector<std::string> stems;
        if (!p.positional.empty()) {
            const std::string& want = p.positional.front();
            const bool found = std::any_of(installed.begin(), installed.end(),
                                           [&](const skc::InstalledPackage& i) { return i.stem == want; });
            if (!found) {
                std::string names;
                for (const auto& i : installed) names += (names.empty() ? "" : ", ") + printable(i.stem);
                throw UsageError{prefix + "no package '" + printable(want) + "' in " +
                                 printable(skc::RunPackageInstaller::base_of(library, backend).string()) + "; " +
                                 (names.empty() ? std::string("none is installed") : "installed: " + names)};
            }
            stems.push_back(want);
        } else {
            for (const auto& i : installed) stems.push_back(i.stem);
        }
        if (stems.empty())
            out("nothing installed in " + printable(skc::RunPackageInstaller::base_of(library, backend).string()) +
                "\n");
        for (const std::string& stem : stems) {
            if (installer.uninstall(library, stem, backend, /*persistent=*/true)) {
                out("uninstalled " + printable(stem) + "\n");
            } else {
                std::size_t users = 0;
                for (const auto& i : installer.list(library, backend))
                    if (i.stem == stem) users = i.holders.size();
                out(printable(stem) +
                    " stays installed: " + plural(users, "running process uses", "running processes use") + " it\n");
            }
        }
        return exit_ok;
    } catch (const skc::Error& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "%s%s\n", prefix.c_str(), printable(e.what()).c_str());
        return e.code() == skc::Errc::unsafe_path || e.code() == skc::Errc::invalid_name ? exit_usage
                                                                                         : exit_compile_failed;
    }
}

}  // namespace skc_tool
