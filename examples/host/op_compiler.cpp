// host_op_compiler: the kernel compiler of the host (CPU) reference backend.
//
// Same command line as the real op_compiler (docs/spec.md section 8), so skc::ProcessInvoker runs it
// unchanged:
//
//     host_op_compiler -p <json_dir> -v <device> -j <jobs> -o <output_dir>
//                      [-l debug|info|warning|error] [-f true|false] [--opt-level 0-3]
//
// For every op info file in json_dir (name order) it generates the shape-specialised kernel
// (codegen.hpp) under the symbol `skc_k_<content digest>`, compiles each source with the system
// C++ compiler ($CXX, else `c++`; target.hpp's kernel_flags(): `-std=c++17 -O<N> -fPIC
// -ffp-contract=fast -march=<target>`, never -ffast-math) up to -j at a time, reporting each
// one's compile time, plus
// one translation unit holding the library's entry table (loader.hpp, LibraryEntry), links them
// into `kernels/<stem>.so` and packs the payload with makeself into
// `<output_dir>/static_kernel_<datetime>.run` (docs/run-package.md). Unsupported ops are listed and
// skipped; an op whose content was seen before is compiled once.
//
// Children are started with posix_spawnp (no shell, so no file name is ever interpreted) in this
// process's own process group, so that skc::ProcessInvoker, which kills the compiler's whole group
// on a timeout, also ends the C++ compilers. Each child's output goes to a log in the work folder
// and is printed when it fails. SIGINT, SIGTERM and SIGHUP stop the running compilers, remove the
// work folder and end the process by that signal, with no package written.
//
// Progress lines (docs/file-formats.md, "Progress lines") go to stdout whatever -l says, so that
// skc can show how far the compile is: `skc-progress: 0/<n>` once the op info files are read, then
// `skc-progress: <done>/<n> <op info file name>` as each file is done: at once for the unsupported
// ones (skipped), and when its kernel is compiled for the others (a duplicate with its original).
// Only the main thread prints them (children write to their own logs), each flushed at once: whole
// lines, `done` counting up by one.
//
// Exit status: 0 and one new `*.run` on success; 2 for bad usage or bad input (unreadable folder,
// invalid op info file: the message names the file and JSON path); 1 for anything else (nothing
// to compile, the C++ compiler or makeself failed, I/O errors). When kernels fail to compile, the
// others are compiled all the same and `<output_dir>/failed_ops.json` names the op info files of
// those that failed, each with the C++ compiler's output (docs/file-formats.md, "Failed ops"), so
// that skc leaves only them out. The work folder
// (`<output_dir>/.host_op_compiler-XXXXXX`) is removed in every case but SIGKILL.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <skc/detail/atomic_file.hpp>
#include <skc/detail/process.hpp>
#include <skc/detail/text.hpp>
#include <skc/error.hpp>
#include <skc/layout.hpp>
#include <skc/op_info_io.hpp>
#include <skc/op_record.hpp>
#include <skc/options.hpp>
#include <skc/run_package.hpp>
#include <skc/value.hpp>

#include "codegen.hpp"
#include "loader.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;

constexpr const char* usage_text =
    "usage: host_op_compiler -p <json_dir> -v <device> -j <jobs> -o <output_dir>\n"
    "                        [-l debug|info|warning|error] [-f true|false] [--opt-level 0-3]\n"
    "  -p  folder of op info files (*.json) to compile\n"
    "  -v  device name (letters, digits, '_', '-', '.'; not starting with '.')\n"
    "  -j  number of C++ compiles run at once (a positive integer)\n"
    "  -o  folder the run package static_kernel_<datetime>.run is written to (created if missing)\n"
    "  -l  how much to print (default info)\n"
    "  -f  accepted for compatibility with op_compiler; no effect on the host kernels\n"
    "  --opt-level  optimisation level passed to the C++ compiler as -O<N> (default 3)\n"
    "The C++ compiler is $CXX when set, else c++. The kernels are built for this CPU (-march=native),\n"
    "or for the x86-64 level SKC_HOST_ISA names (x86-64, x86-64-v2, x86-64-v3, x86-64-v4).\n";

/// Bad usage: printed with the usage text, exit status 2.
struct UsageError {
    std::string message;
};

/// A failure with its exit status, printed as is.
struct Failure {
    int status;
    std::string message;
};

struct Args {
    fs::path json_dir, output_dir;
    std::string device;
    unsigned jobs = 0;
    skc::LogLevel level = skc::LogLevel::info;
    int opt_level = 3;
};

bool safe_name(std::string_view s) {
    if (s.empty() || s.size() > 200 || s.front() == '.') return false;
    for (const char c : s)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.'))
            return false;
    return true;
}

/// A decimal integer in [lo, hi], nothing else (no sign, no spaces).
std::optional<unsigned> parse_uint(std::string_view s, unsigned lo, unsigned hi) {
    if (s.empty() || s.size() > 9) return std::nullopt;
    unsigned v = 0;
    for (const char c : s) {
        if (c < '0' || c > '9') return std::nullopt;
        v = v * 10 + static_cast<unsigned>(c - '0');
    }
    if (v < lo || v > hi) return std::nullopt;
    return v;
}

Args parse_args(int argc, char** argv) {
    Args a;
    std::set<std::string> seen;
    std::optional<std::string> p, v, j, o, l, f, opt;
    for (int i = 1; i < argc; ++i) {
        std::string name = argv[i];
        std::optional<std::string> value;
        if (name.rfind("--opt-level=", 0) == 0) {
            value = name.substr(12);
            name = "--opt-level";
        }
        std::optional<std::string>* slot = nullptr;
        if (name == "-p") slot = &p;
        else if (name == "-v") slot = &v;
        else if (name == "-j") slot = &j;
        else if (name == "-o") slot = &o;
        else if (name == "-l") slot = &l;
        else if (name == "-f") slot = &f;
        else if (name == "--opt-level") slot = &opt;
        else throw UsageError{"unknown option '" + name + "'"};
        if (slot->has_value()) throw UsageError{"option " + name + " is given twice"};
        if (!value) {
            if (i + 1 >= argc) throw UsageError{"option " + name + " needs a value"};
            value = argv[++i];
        }
        *slot = std::move(value);
    }
    if (!p) throw UsageError{"missing -p <json_dir>"};
    if (!v) throw UsageError{"missing -v <device>"};
    if (!j) throw UsageError{"missing -j <jobs>"};
    if (!o) throw UsageError{"missing -o <output_dir>"};
    if (p->empty()) throw UsageError{"-p: the folder name is empty"};
    if (o->empty()) throw UsageError{"-o: the folder name is empty"};
    a.json_dir = *p;
    a.output_dir = *o;
    if (!safe_name(*v))
        throw UsageError{"-v: device name \"" + *v +
                         "\" is not accepted: use letters, digits, '_', '-', '.', not starting with '.'"};
    a.device = *v;
    const auto jobs = parse_uint(*j, 1, 1024);
    if (!jobs) throw UsageError{"-j: \"" + *j + "\" is not a positive integer (1 to 1024)"};
    a.jobs = *jobs;
    if (l) {
        if (*l == "debug") a.level = skc::LogLevel::debug;
        else if (*l == "info") a.level = skc::LogLevel::info;
        else if (*l == "warning") a.level = skc::LogLevel::warning;
        else if (*l == "error") a.level = skc::LogLevel::error;
        else throw UsageError{"-l: \"" + *l + "\" is not one of debug, info, warning, error"};
    }
    if (f && *f != "true" && *f != "false") throw UsageError{"-f: \"" + *f + "\" is not true or false"};
    if (opt) {
        const auto n = parse_uint(*opt, 0, 3);
        if (!n) throw UsageError{"--opt-level: \"" + *opt + "\" is not 0, 1, 2 or 3"};
        a.opt_level = static_cast<int>(*n);
    }
    return a;
}

/// Messages below `level` are not printed; errors go to stderr, the rest to stdout.
class Out {
public:
    explicit Out(skc::LogLevel level) : level_(level) {}
    void say(skc::LogLevel at, const std::string& line) const {
        if (static_cast<int>(at) < static_cast<int>(level_)) return;
        std::fputs((line + "\n").c_str(), stdout);
        std::fflush(stdout);
    }

private:
    skc::LogLevel level_;
};

/// The work folder, removed with everything in it at scope exit.
class WorkDir {
public:
    explicit WorkDir(const fs::path& parent) {
        std::string tmpl = (parent / ".host_op_compiler-XXXXXX").string();
        if (::mkdtemp(tmpl.data()) == nullptr)
            throw Failure{1, "cannot create a work folder in " + parent.string() + ": " + std::strerror(errno)};
        path_ = tmpl;
    }
    WorkDir(const WorkDir&) = delete;
    WorkDir& operator=(const WorkDir&) = delete;
    ~WorkDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    [[nodiscard]] const fs::path& path() const noexcept { return path_; }

private:
    fs::path path_;
};

void write_text(const fs::path& p, const std::string& text) {
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) throw Failure{1, "cannot write " + p.string() + ": " + std::strerror(errno)};
    for (std::string_view left = text; !left.empty();) {
        const ssize_t w = ::write(fd, left.data(), left.size());
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            const int err = w < 0 ? errno : ENOSPC;
            ::close(fd);
            throw Failure{1, "cannot write " + p.string() + ": " + std::strerror(err)};
        }
        left.remove_prefix(static_cast<std::size_t>(w));
    }
    if (::close(fd) != 0) throw Failure{1, "cannot write " + p.string() + ": " + std::strerror(errno)};
}

/// A command line for messages: arguments with anything but safe characters are quoted.
std::string show(const std::vector<std::string>& args) {
    std::string out;
    for (const std::string& a : args) {
        bool plain = !a.empty();
        for (const char c : a)
            plain = plain && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                              std::string_view("_-.,/=+:@%").find(c) != std::string_view::npos);
        out += (out.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
    }
    return out;
}

/// One child process: a compile, the link or makeself.
struct Job {
    std::string what;               // for messages
    std::vector<std::string> args;  // args[0] is looked up in PATH
};

/// Starts `job` with posix_spawnp in this process group, stdin from /dev/null, output to `log`: a
/// file in memory, so that what it says is kept when the disk is full (often the very error).
pid_t start(const Job& job, int log) {
    std::vector<char*> argv;
    for (const std::string& s : job.args) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, log, 1);
    posix_spawn_file_actions_adddup2(&fa, log, 2);
    pid_t pid = -1;
    const int rc = ::posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw Failure{1, job.what + ": cannot start \"" + job.args[0] + "\": " + std::strerror(rc)};
    return pid;
}

std::string describe_status(int status) {
    if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return "was killed by " + skc::detail::signal_name(WTERMSIG(status));
    return "ended with wait status " + std::to_string(status);
}

/// What a job printed into its log (a memory file), capped so a flood of diagnostics stays readable.
std::string output_of(int log) {
    constexpr std::size_t cap = 16384;
    const off_t size = ::lseek(log, 0, SEEK_END);
    std::string text(static_cast<std::size_t>(std::min<off_t>(std::max<off_t>(size, 0), cap)), '\0');
    const ssize_t n = ::pread(log, text.data(), text.size(), 0);
    text.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    if (size > static_cast<off_t>(cap))
        text += "\n[... " + std::to_string(size - static_cast<off_t>(cap)) + " more bytes]";
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
}

/// The jobs' logs, memory files closed with it.
struct Logs {
    std::vector<int> fds;
    explicit Logs(std::size_t n) : fds(n, -1) {}
    Logs(const Logs&) = delete;
    Logs& operator=(const Logs&) = delete;
    ~Logs() {
        for (int fd : fds)
            if (fd >= 0) ::close(fd);
    }
};

// ---- SIGINT, SIGTERM, SIGHUP -------------------------------------------------------------------
//
// A compile can run for a long time and is stopped with a signal (Ctrl-C, or ProcessInvoker's
// timeout, which signals the whole process group, so the C++ compilers get it too). The handler
// only records the signal; waitpid() then returns EINTR (no SA_RESTART), the running children are
// sent SIGTERM and reaped, the work folder is removed while unwinding, and main() re-raises the
// signal with its default action so the exit status still says how the process ended.

volatile std::sig_atomic_t stop_signal = 0;

void on_stop_signal(int sig) { stop_signal = sig; }

void install_stop_handlers() {
    for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
        struct sigaction sa {};
        sa.sa_handler = on_stop_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = 0;
        ::sigaction(sig, &sa, nullptr);
    }
}

struct Interrupted {
    int signal;
};

void check_stop() {
    if (stop_signal != 0) throw Interrupted{stop_signal};
}

/// What each failed job of run_all() said: its index and the message quoting its output.
using JobFailures = std::vector<std::pair<std::size_t, std::string>>;

/// Runs `jobs`, at most `parallel` at once; calls done(i) as job i succeeds. When one fails no more
/// are started, unless `keep_going` is given: then every job runs and it gets each failure. The
/// running ones are waited for, then every failure is reported. Returns what each job printed;
/// throws Failure quoting the output of those that failed.
template <class Done>
std::vector<std::string> run_all(const std::vector<Job>& jobs, unsigned parallel, const Out& out, Done&& done,
                                 JobFailures* keep_going = nullptr) {
    Logs logs(jobs.size());
    std::map<pid_t, std::size_t> running;
    std::vector<std::chrono::steady_clock::time_point> started(jobs.size());
    std::vector<std::pair<std::size_t, int>> failed;
    std::size_t next = 0;
    std::optional<Failure> start_failure;
    while (true) {
        if (stop_signal != 0) {
            for (const auto& r : running) ::kill(r.first, SIGTERM);
            for (const auto& r : running) {
                int ignored = 0;
                while (::waitpid(r.first, &ignored, 0) < 0 && errno == EINTR) {}
            }
            throw Interrupted{stop_signal};
        }
        while ((failed.empty() || keep_going) && !start_failure && next < jobs.size() && running.size() < parallel) {
            out.say(skc::LogLevel::debug, "$ " + show(jobs[next].args));
            try {
                logs.fds[next] = ::memfd_create("job-output", MFD_CLOEXEC);
                if (logs.fds[next] < 0)
                    throw Failure{1, std::string("cannot create a log in memory: ") + std::strerror(errno)};
                started[next] = std::chrono::steady_clock::now();
                running.emplace(start(jobs[next], logs.fds[next]), next);
            } catch (const Failure& f) {
                start_failure = f;
            }
            ++next;
        }
        if (running.empty()) break;
        int status = 0;
        const pid_t pid = ::waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR) continue;
            throw Failure{1, std::string("waitpid failed: ") + std::strerror(errno)};
        }
        const auto it = running.find(pid);
        if (it == running.end()) continue;
        const std::size_t i = it->second;
        running.erase(it);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) done(i, std::chrono::steady_clock::now() - started[i]);
        else failed.emplace_back(i, status);
    }
    if (start_failure) throw *start_failure;
    if (!failed.empty()) {
        std::sort(failed.begin(), failed.end());  // in job order, whichever ended first
        std::string msg;
        for (const auto& [i, status] : failed) {
            if (!msg.empty()) msg += "\n";
            const std::string said = output_of(logs.fds[i]);
            const std::string one = jobs[i].what + " failed: " + show(jobs[i].args) + " " + describe_status(status) +
                                    ". Its output:\n" + (said.empty() ? "(no output)" : said);
            if (keep_going) keep_going->emplace_back(i, one);
            msg += one;
        }
        throw Failure{1, msg};
    }
    std::vector<std::string> outputs;
    for (int fd : logs.fds) outputs.push_back(fd >= 0 ? output_of(fd) : std::string());
    return outputs;
}

/// `<output_dir>/failed_ops.json` (docs/file-formats.md, "Failed ops"): the op info files of the
/// kernels whose compile failed, each with its compiler's message, for skc to leave out. Only the
/// kernels' own failures: with the entry table's, or any other, the file is not written.
template <class Kernels>
void write_failed_ops(const fs::path& output_dir, const Kernels& kernels, const JobFailures& failures) {
    skc::Array ops;
    for (const auto& [i, message] : failures) {
        if (i >= kernels.size()) return;  // not a kernel's failure
        for (const std::string& name : kernels[i].files)
            ops.push_back(skc::Value(skc::Object{{"file", skc::Value(name)}, {"message", skc::Value(message)}}));
    }
    if (ops.empty()) return;
    try {  // whole or not at all (a full disk is a likely reason for the failure)
        skc::detail::AtomicFile f(output_dir / "failed_ops.json");
        f.write(skc::dump_json(skc::Value(
                    skc::Object{{"format", skc::Value("skc-failed-ops/1")}, {"ops", skc::Value(std::move(ops))}})) +
                "\n");
        f.commit();
    } catch (...) {  // the failure itself is what the caller reports
    }
}

/// A C++ string literal for `s` (anything but plain characters is an octal escape).
std::string c_literal(std::string_view s) {
    std::string out = "\"";
    for (const char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
            c == '.' || c == ' ') {
            out += c;
        } else {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\%03o", u);
            out += buf;
        }
    }
    return out + "\"";
}

/// One kernel to build.
struct Kernel {
    skc::Digest digest;
    std::string symbol;
    std::string op_type;
    std::string description;         // for progress lines
    fs::path op_file;                // the first op info file with this content
    std::vector<std::string> files;  // the names of every op info file with this content
    std::string source;
};

/// The progress lines: `skc-progress: <done>/<total> <op info file name>`, one per op info file as
/// it is done, after `skc-progress: 0/<total>`. Printed at every -l level: they are for skc.
class Progress {
public:
    explicit Progress(std::size_t total) : total_(total) { print("skc-progress: 0/" + std::to_string(total_) + "\n"); }
    void done(std::string_view file) {
        std::string line = "skc-progress: " + std::to_string(++done_) + "/" + std::to_string(total_) + " ";
        for (const char c : file)
            line += static_cast<unsigned char>(c) < 0x20 ? '?' : c;  // one line, whatever the name
        print(line + "\n");
    }

private:
    static void print(const std::string& line) {
        std::fputs(line.c_str(), stdout);
        std::fflush(stdout);
    }
    std::size_t total_;
    std::size_t done_ = 0;
};

/// The translation unit with the library's entry table (layout: skc_host::LibraryEntry).
std::string entry_table_source(const std::vector<Kernel>& kernels) {
    std::string s =
        "// Entry table of a host kernel library (generated by host_op_compiler; layout: skc_host::LibraryEntry\n"
        "// in examples/host/loader.hpp): the kernels of this library without any index.\n"
        "// No #include, as the kernels' sources: __SIZE_TYPE__ is std::size_t.\n\n"
        "struct skc_host_entry {\n"
        "    const char* digest;\n"
        "    const char* op_type;\n"
        "    void (*fn)(const float* const* inputs, float* const* outputs);\n"
        "};\n\n"
        "extern \"C\" {\n";
    for (const Kernel& k : kernels) s += "void " + k.symbol + "(const float* const* inputs, float* const* outputs);\n";
    s += "extern const skc_host_entry skc_host_kernel_table[];\n"
         "extern const __SIZE_TYPE__ skc_host_kernel_count;\n"
         "}\n\n"
         "const skc_host_entry skc_host_kernel_table[] = {\n";
    for (const Kernel& k : kernels)
        s += "    {\"" + k.digest.hex() + "\", " + c_literal(k.op_type) + ", " + k.symbol + "},\n";
    s += "};\n"
         "const __SIZE_TYPE__ skc_host_kernel_count = " +
         std::to_string(kernels.size()) + ";\n";
    return s;
}

/// The payload's own index (docs/run-package.md, "The package").
std::string package_index(const std::string& device, const std::string& file, const std::vector<Kernel>& kernels) {
    skc::Array ks;
    for (const Kernel& k : kernels)
        ks.emplace_back(skc::Object{{"digest", skc::Value(k.digest.hex())},
                                    {"op_type", skc::Value(k.op_type)},
                                    {"file", skc::Value(file)},
                                    {"symbol", skc::Value(k.symbol)}});
    const skc::Value doc(skc::Object{{"format", skc::Value("skc-run-package")},
                                     {"version", skc::Value(1)},
                                     {"backend", skc::Value("host")},
                                     {"device", skc::Value(device)},
                                     {"kernels", skc::Value(std::move(ks))}});
    return skc::dump_json(doc) + "\n";
}

std::string cxx_program() {
    const char* e = std::getenv("CXX");
    return e != nullptr && *e != '\0' ? e : "c++";
}

int run(const Args& a) {
    const Out out(a.level);
    skc_host::Target target;
    try {
        target = skc_host::host_target();
    } catch (const std::invalid_argument& e) {
        throw Failure{2, e.what()};
    }

    // Read and analyse everything first: a bad file is bad input, whatever else is in the folder.
    skc::DirReadResult dir;
    try {
        dir = skc::read_op_info_dir(a.json_dir);
    } catch (const skc::Error& e) {
        throw Failure{2, e.what()};
    }
    std::vector<Kernel> kernels;
    std::map<skc::Digest, std::size_t> by_digest;
    std::size_t unsupported = 0, duplicates = 0;
    std::vector<std::pair<skc::LogLevel, std::string>> notes;  // printed after the overview line
    std::vector<std::string> skipped;                          // unsupported op info files
    for (const skc::LoadedOp& op : dir.ops) {
        const skc::OpRecord record = skc::without_bin_fields(op.record);
        Kernel k;
        k.digest = skc::digest(record);
        k.symbol = "skc_k_" + k.digest.hex();
        const std::string name = op.path.filename().string();
        if (const auto it = by_digest.find(k.digest); it != by_digest.end()) {
            ++duplicates;
            kernels[it->second].files.push_back(name);
            notes.emplace_back(skc::LogLevel::info,
                               "duplicate " + name + ": same op as " + kernels[it->second].op_file.filename().string());
            continue;
        }
        std::optional<std::string> src = skc_host::generate_kernel(record, k.symbol, target);
        if (!src) {
            ++unsupported;
            skipped.push_back(name);
            notes.emplace_back(skc::LogLevel::warning, "skipped " + name + ": " + skc_host::unsupported_reason(record));
            continue;
        }
        k.op_type = record.op_type;
        k.description = skc_host::detail::describe(record);
        k.op_file = op.path;
        k.files.push_back(name);
        k.source = std::move(*src);
        by_digest.emplace(k.digest, kernels.size());
        kernels.push_back(std::move(k));
    }
    if (kernels.empty()) {
        for (const auto& [level, line] : notes) out.say(level, line);
        throw Failure{1, "nothing to compile in " + a.json_dir.string() + ": " + std::to_string(dir.ops.size()) +
                             " op info file(s), " + std::to_string(unsupported) + " unsupported by the host kernels"};
    }
    out.say(skc::LogLevel::info, std::to_string(dir.ops.size()) + " op info files in " + a.json_dir.string() + ": " +
                                     std::to_string(kernels.size()) + " kernels to compile, " +
                                     std::to_string(unsupported) + " unsupported, " + std::to_string(duplicates) +
                                     " duplicate");
    for (const auto& [level, line] : notes) out.say(level, line);
    Progress progress(dir.ops.size());
    for (const std::string& name : skipped) progress.done(name);

    std::error_code ec;
    fs::create_directories(a.output_dir, ec);
    if (ec) throw Failure{1, "cannot create the output folder " + a.output_dir.string() + ": " + ec.message()};
    const WorkDir work(a.output_dir);
    const fs::path src_dir = work.path() / "src", payload = work.path() / "payload";
    fs::create_directories(src_dir);
    fs::create_directories(payload / "kernels");

    // The package name comes first: the library inside is named after it.
    std::string stem;
    fs::path package;
    do {
        stem = "static_kernel_" + skc::timestamp(std::chrono::system_clock::now());
        package = a.output_dir / (stem + ".run");
    } while (fs::exists(fs::symlink_status(package)));

    // Compile: one translation unit per kernel, plus the entry table.
    const std::string cxx = cxx_program();
    std::vector<std::string> compile{cxx};
    for (std::string& f : skc_host::kernel_flags(target, a.opt_level)) compile.push_back(std::move(f));
    compile.emplace_back("-c");
    std::vector<Job> jobs;
    std::vector<std::string> objects;
    auto add_job = [&](std::string what, const std::string& stem_name, const std::string& source) {
        const fs::path cpp = src_dir / (stem_name + ".cpp"), obj = src_dir / (stem_name + ".o");
        write_text(cpp, source);
        std::vector<std::string> args = compile;
        args.insert(args.end(), {"-o", obj.string(), cpp.string()});
        jobs.push_back(Job{std::move(what), std::move(args)});
        objects.push_back(obj.string());
    };
    for (const Kernel& k : kernels)
        add_job("compiling " + k.op_file.string() + " (" + k.description + ")", k.symbol, k.source);
    add_job("compiling the entry table", "entry_table", entry_table_source(kernels));
    std::size_t finished = 0;
    std::chrono::nanoseconds compile_time{0}, slowest{0};
    std::string slowest_what;
    const auto compile_start = std::chrono::steady_clock::now();
    // Every kernel is compiled even when one fails, so that failed_ops.json names all that do.
    JobFailures failures;
    try {
        run_all(
            jobs, a.jobs, out,
            [&](std::size_t i, std::chrono::nanoseconds took) {
                ++finished;
                const std::string what = i < kernels.size() ? kernels[i].description : "entry table";
                compile_time += took;
                if (took > slowest) slowest = took, slowest_what = what;
                out.say(skc::LogLevel::info, "[" + std::to_string(finished) + "/" + std::to_string(jobs.size()) +
                                                 "] compiled " + what + " in " + skc::detail::seconds_text(took));
                if (i < kernels.size())
                    for (const std::string& name : kernels[i].files) progress.done(name);
            },
            &failures);
    } catch (const Failure&) {
        write_failed_ops(a.output_dir, kernels, failures);
        throw;
    }

    out.say(skc::LogLevel::info,
            "compiled " + std::to_string(jobs.size()) + " translation units for " + target.id + " (-march=" +
                target.march + ") in " + skc::detail::seconds_text(std::chrono::steady_clock::now() - compile_start) +
                " (" + std::to_string(a.jobs) + " at a time; " + skc::detail::seconds_text(compile_time) +
                " in all, slowest " + skc::detail::seconds_text(slowest) + ": " + slowest_what + ")");

    // Link into one shared library.
    const std::string lib_file = "kernels/" + stem + ".so";
    std::vector<std::string> link{cxx, "-shared", "-fPIC", "-o", (payload / lib_file).string()};
    link.insert(link.end(), objects.begin(), objects.end());
    check_stop();
    run_all({Job{"linking " + lib_file, link}}, 1, out, [](std::size_t, std::chrono::nanoseconds) {});
    out.say(skc::LogLevel::info, "linked " + lib_file + " (" + std::to_string(kernels.size()) + " kernels)");

    // The payload, then the archive (built in the work folder, then linked into place without
    // replacing anything: the output folder never shows a half-written package).
    write_text(payload / "binary_info_config.json", package_index(a.device, lib_file, kernels));
    write_text(payload / "setup.sh",
               "#!/bin/sh\n# Startup script required by makeself. skc installs the payload itself and never runs "
               "it.\nexit 0\n");
    ::chmod((payload / "setup.sh").c_str(), 0755);
    const fs::path built = work.path() / (stem + ".run");
    const std::vector<std::string> packed = run_all(
        {Job{"packing " + package.filename().string(),
             {"makeself", "--quiet", "--nox11", payload.string(), built.string(), "skc host kernels", "./setup.sh"}}},
        1, out, [](std::size_t, std::chrono::nanoseconds) {});
    if (!fs::is_regular_file(built)) throw Failure{1, "makeself exited with status 0 but wrote no " + built.string()};
    // makeself can exit 0 after a write error (a full disk): only a package that passes the header
    // check and its own integrity check leaves the work folder.
    check_stop();
    if (const std::optional<std::string> fault = skc::run_package_fault(built)) {
        throw Failure{1, "makeself exited with status 0 but wrote a bad package: " + *fault +
                             (packed.front().empty() ? std::string() : "; makeself said:\n" + packed.front())};
    }
    check_stop();
    if (::link(built.c_str(), package.c_str()) != 0) {
        // A file system without hard links: a rename (which would replace a file of that name,
        // checked absent above) is the next best thing.
        const int err = errno;
        if ((err != EPERM && err != EOPNOTSUPP) || ::rename(built.c_str(), package.c_str()) != 0)
            throw Failure{1, "cannot create " + package.string() + ": " + std::strerror(err)};
    }

    out.say(skc::LogLevel::info, "compiled " + std::to_string(kernels.size()) + " kernels (" +
                                     std::to_string(duplicates) + " duplicate op info files compiled once), skipped " +
                                     std::to_string(unsupported) + " unsupported ops; package " + package.string());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    install_stop_handlers();
    try {
        return run(parse_args(argc, argv));
    } catch (const Interrupted& i) {
        std::fprintf(stderr, "host_op_compiler: stopped by %s; no package written\n",
                     skc::detail::signal_name(i.signal).c_str());
        std::fflush(stderr);
        std::signal(i.signal, SIG_DFL);
        std::raise(i.signal);
        return 128 + i.signal;
    } catch (const UsageError& e) {
        std::fprintf(stderr, "host_op_compiler: %s\n%s", e.message.c_str(), usage_text);
        return 2;
    } catch (const Failure& f) {
        std::fprintf(stderr, "host_op_compiler: %s\n", f.message.c_str());
        return f.status;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "host_op_compiler: %s\n", e.what());
        return 1;
    }
}
