// skc/session_files.hpp: a run's op info folders, decided in memory and written off the critical path.
//
// plan_session() decides everything docs/spec.md section 6 steps 2 to 5 write into a run folder, from the
// records in memory: each op's file names (the process-wide counter, in the order write_session()
// has always used), and the selection's verdict for each file of `<pid>_opcompile`, in name order
// (select.hpp's plan, so `skc ops inspect`, select_for_compile() and the compiler agree). Nothing
// is read back from the disk: the cache key comes from the digests the records already have.
//
// write_planned_files() then writes the folders: each record is serialised once per content (with
// and without bin_type/bin_info; once when it has neither), written as a file without a name
// (O_TMPFILE; a named temporary where the file system has none) that is linked to its first name
// once whole, and linked to its other names (`<pid>` and `<pid>_debug` share a content, as do
// `<pid>_opcompile`, `_selected` and `_blacklist`), by names relative to the open folders. Each
// content is also linked into the op info store beside the run folders (op_info_store), and a later
// run links the store's file instead of writing the same bytes again: a warm start makes no file.
// Plans of many ops are written in chunks by two threads, and by a thread that waits for them. The
// files are byte for byte what the one-file-at-a-time writers (write_op_info, select_for_compile)
// produce; a crash at any point leaves whole files or none under every `.json` name.
//
// FileWriter runs write_planned_files() on a thread of its own, so that a cache hit does not wait
// for files nobody reads on the hit path. Plans wait in its queue until start(): the compiler starts
// it once its compile() has passed the critical path (or when the folders are needed), so that the
// writing does not compete with the lookup and the ranks' exchange for the disk, and its thread runs
// at the lowest priority (nice 19), so that it yields the CPU to them. wait() starts it,
// blocks until everything submitted is written (after 50 ms writing chunks of the plan in progress
// itself, at its own priority) and throws the first error (a full disk, say) once.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "detail/hash.hpp"
#include "error.hpp"
#include "layout.hpp"
#include "op_info_io.hpp"
#include "op_record.hpp"
#include "select.hpp"

namespace skc {

/// One distinct op of a finished recording: its content digest (OpRecord's digest()), its record,
/// and where it goes (the Targets and Support policies' verdicts).
struct RecordedOp {
    Digest digest;
    OpRecord record;
    bool target = false;    // also written to `<pid>`
    bool supported = true;  // also written to `<pid>_opcompile`
};

/// What a recording wrote (or, planned, will write).
struct RecordingResult {
    std::size_t recorded = 0;   // distinct ops (files in `<pid>_debug`)
    std::size_t targets = 0;    // files in `<pid>`
    std::size_t supported = 0;  // files in `<pid>_opcompile`
};

/// A run folder's op info files, decided in memory (see the header comment).
struct SessionPlan {
    struct Files {
        std::string debug;         // in `<pid>_debug`
        std::string target;        // in `<pid>`; empty when not a target
        std::string opcompile;     // in `<pid>_opcompile` (and `_selected`, `_blacklist`); empty when unsupported
        bool blacklisted = false;  // also linked into `<pid>_opcompile_blacklist`
        bool selected = false;     // selected for compiling
    };

    RunLayout run;
    std::shared_ptr<const std::vector<RecordedOp>> ops;  // shared with the writer
    std::vector<Files> files;                            // one per op, same order
    RecordingResult recorded;
    std::vector<Decision> decisions;   // one per file of `<pid>_opcompile`, in name order
    std::vector<SelectedOp> selected;  // in name order
    bool write_selected = false;       // `_selected` holds the selected files (else `<pid>_opcompile` is compiled)
    bool blacklist_folder = false;     // some file is blacklisted

    /// The folder the compiler gets: `_selected`, or `<pid>_opcompile` with the model cache when
    /// nothing was filtered; empty when nothing is selected.
    [[nodiscard]] std::filesystem::path compile_dir() const {
        if (selected.empty()) return {};
        return write_selected ? run.selected() : run.opcompile();
    }
    /// How many files got verdict `v`.
    [[nodiscard]] std::size_t count(Verdict v) const noexcept {
        std::size_t n = 0;
        for (const Decision& d : decisions) n += d.verdict == v;
        return n;
    }
};

/// Plans the op info folders of `ops` (distinct, in the order first seen) in run folder `run`, and
/// the selection on them (docs/spec.md section 6, steps 2 to 5), without touching the disk. Names take values of the
/// process-wide counter. Throws Error (invalid record or name) before anything is decided.
template <SupportPolicy Support = DefaultSupport>
SessionPlan plan_session(const RunLayout& run, std::shared_ptr<const std::vector<RecordedOp>> ops,
                         const SelectOptions& opt, const CompiledSet& already = process_compiled(),
                         const Support& support = {}) {
    SessionPlan p{run, std::move(ops), {}, {}, {}, {}, false, false};
    const std::vector<RecordedOp>& v = *p.ops;
    p.files.resize(v.size());
    std::vector<std::size_t> compilable;  // ops with a `<pid>_opcompile` file
    for (std::size_t i = 0; i < v.size(); ++i) {
        // The same counter order as write_session: debug, then target, then opcompile, op by op.
        const std::string stem = op_info_stem(v[i].record);
        auto name = [&] { return stem + "_" + std::to_string(next_op_info_counter()) + ".json"; };
        SessionPlan::Files& f = p.files[i];
        f.debug = name();
        ++p.recorded.recorded;
        if (v[i].target) {
            f.target = name();
            ++p.recorded.targets;
        }
        if (v[i].supported) {
            f.opcompile = name();
            ++p.recorded.supported;
            compilable.push_back(i);
        }
    }
    // Selection reads `<pid>_opcompile` in file name order.
    std::sort(compilable.begin(), compilable.end(),
              [&](std::size_t a, std::size_t b) { return p.files[a].opcompile < p.files[b].opcompile; });
    detail::SelectionJudge<Support> judge{opt, already, support, {}};
    bool filtered = false;
    p.decisions.reserve(compilable.size());
    for (std::size_t i : compilable) {
        SessionPlan::Files& f = p.files[i];
        const Verdict verdict = judge(f.opcompile, v[i].record.op_type, v[i].digest);
        p.decisions.push_back(Decision{f.opcompile, v[i].digest, verdict});
        f.blacklisted = verdict == Verdict::blacklisted;
        p.blacklist_folder = p.blacklist_folder || f.blacklisted;
        f.selected = verdict == Verdict::selected;
        if (f.selected) p.selected.push_back(SelectedOp{v[i].digest, f.opcompile});
        else filtered = true;
    }
    p.write_selected = !p.selected.empty() && !(opt.model_cache && !filtered);
    return p;
}

namespace detail {

/// A folder of a run, open (O_PATH) for the *at() calls that write its files by name alone.
class RunFolder {
public:
    explicit RunFolder(std::filesystem::path dir) : path_(std::move(dir)) {
        make_dir(path_);
        fd_ = ::open(path_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fd_ < 0) throw_errno("cannot open", path_, errno);
    }
    RunFolder(const RunFolder&) = delete;
    RunFolder& operator=(const RunFolder&) = delete;
    ~RunFolder() { ::close(fd_); }
    [[nodiscard]] int fd() const noexcept { return fd_; }
    [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

private:
    std::filesystem::path path_;
    int fd_ = -1;
};

/// Where one content goes: its names, each in its folder; the first is written, the others linked.
struct Names {
    std::vector<const RunFolder*> dirs;
    std::vector<const std::string*> names;
    void add(const RunFolder& d, const std::string& n) {
        dirs.push_back(&d);
        names.push_back(&n);
    }
    void clear() {
        dirs.clear();
        names.clear();
    }
};

/// Links the open file `fd` to `name` in `dir` (through /proc/self/fd: an unnamed file, or the
/// very file that was checked, whatever its name holds meanwhile); 0, or the errno.
inline int link_open_file(int fd, const RunFolder& dir, const std::string& name) noexcept {
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    return ::linkat(AT_FDCWD, self.c_str(), dir.fd(), name.c_str(), AT_SYMLINK_FOLLOW) == 0 ? 0 : errno;
}

/// Writes `text` as a file without a name (O_TMPFILE) and links it to `name` in `dir` whole: true
/// when done, false when the file system cannot (no O_TMPFILE, or no /proc to link through).
inline bool write_unnamed(const RunFolder& dir, const std::string& name, const std::string& text) {
    const int fd = ::openat(dir.fd(), ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) {
        if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) return false;
        throw_errno("cannot create", dir.path() / name, errno);
    }
    try {
        write_all(fd, text, dir.path() / name);
    } catch (const Error&) {
        ::close(fd);
        throw;
    }
    const int err = link_open_file(fd, dir, name);
    ::close(fd);
    if (err == 0) return true;
    if (err == ENOENT || err == EXDEV) return false;  // no /proc
    throw_errno("cannot publish", dir.path() / name, err);
}

/// The folder beside the run folders (`static_kernel_compile_outputs/.op_info/`) that keeps a link
/// to one file of each op info content written, named after the content's hash: the files of later
/// runs with the same content are links to it, so that a warm start creates no file.
inline constexpr std::string_view op_info_store = ".op_info";

/// Links the store's file `key` to `name` in `dir` when it holds exactly `text`: true when done.
/// A file of other content (changed in place, say) or one that cannot take another link is taken
/// out of the store, and false returned: the caller writes the content afresh.
inline bool link_from_store(const RunFolder& store, const std::string& key, const RunFolder& dir,
                            const std::string& name, const std::string& text) {
    const int fd = ::openat(store.fd(), key.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return false;
    bool same = false;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) == text.size()) {
        std::string bytes(text.size() + 1, '\0');  // one byte more: a file that grew meanwhile differs
        std::size_t got = 0;
        for (ssize_t r = 0; got < bytes.size(); got += static_cast<std::size_t>(r)) {
            r = ::read(fd, bytes.data() + got, bytes.size() - got);
            if (r < 0 && errno == EINTR) r = 0;
            else if (r <= 0) break;
        }
        same = got == text.size() && std::string_view(bytes.data(), got) == text;
    }
    const int err = same ? link_open_file(fd, dir, name) : -1;
    ::close(fd);
    if (err == 0) return true;
    if (same && err == EEXIST) throw_errno("cannot publish", dir.path() / name, err);  // never replaced
    if (!same || err == EMLINK) (void)::unlinkat(store.fd(), key.c_str(), 0);          // room for a good one
    return false;  // (or no /proc, or the file left the store meanwhile)
}

/// Removes the files of the store in `dir` that no run folder links any more (link count 1) and
/// that have not changed for `min_age` (their last other link went that long ago); returns how
/// many. Errors are ignored: the store is a convenience.
inline std::size_t sweep_op_info_store(const std::filesystem::path& dir, std::chrono::seconds min_age) noexcept {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return 0;
    const auto now = std::chrono::system_clock::now();
    std::size_t removed = 0;
    while (const dirent* e = ::readdir(d)) {
        const std::string_view name = e->d_name;
        if (name.front() == '.' || !name.ends_with(".json")) continue;
        struct stat st {};
        if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1)
            continue;
        const auto changed = std::chrono::system_clock::time_point(std::chrono::seconds(st.st_ctim.tv_sec));
        if (changed + min_age <= now && ::unlinkat(::dirfd(d), e->d_name, 0) == 0) ++removed;
    }
    ::closedir(d);
    return removed;
}

/// Writes `text` under `n.names[0]` whole and links it to the other names; a name is never
/// replaced. The content is linked from `store` when it holds it; otherwise it is written (an
/// unnamed file linked to its name, or a named temporary) and linked into `store`. True when it
/// made a file.
inline bool write_linked(const Names& n, const std::string& text, const RunFolder* store) {
    const RunFolder& first = *n.dirs[0];
    const std::string& name = *n.names[0];
    const std::string key = store != nullptr ? hash_bytes(text).hex() + ".json" : std::string();
    const bool made = store == nullptr || !link_from_store(*store, key, first, name, text);
    if (made) {
        if (!write_unnamed(first, name, text)) write_new_file(first.path(), name, text, false);
        if (store != nullptr) (void)::linkat(first.fd(), name.c_str(), store->fd(), key.c_str(), 0);  // or another's
    }
    for (std::size_t i = 1; i < n.names.size(); ++i) {
        if (::linkat(first.fd(), name.c_str(), n.dirs[i]->fd(), n.names[i]->c_str(), 0) == 0) continue;
        const int err = errno;
        if (err == EEXIST) throw_errno("cannot publish", n.dirs[i]->path() / *n.names[i], err);  // never replaced
        write_new_file(n.dirs[i]->path(), *n.names[i], text, false);  // a file system without hard links
    }
    return made;
}

/// Plans of at least this many ops are written by two threads: a file's creation waits for the
/// disk and the folder's lock, the other thread meanwhile serialises and links.
inline constexpr std::size_t parallel_write_ops = 256;

/// The writing of one plan in chunks of ops that any thread may claim: the writer's thread and its
/// helper, and a thread that waits for the writing (FileWriter::wait), which so writes at its own
/// priority rather than waiting for a writer that yields the CPU to everything else.
class PlanWriting {
public:
    explicit PlanWriting(std::shared_ptr<const SessionPlan> plan) : plan_(std::move(plan)) {}

    /// Writes chunks until none is left to claim (or one failed); returns at once when none is.
    void work() {
        {
            std::lock_guard lock(mu_);
            if (failed_ || next_ >= plan_->files.size()) return;
            ++workers_;
        }
        std::exception_ptr failed;
        try {
            open_folders();
            for (;;) {
                std::size_t from = 0;
                {
                    std::lock_guard lock(mu_);
                    if (failed_ || next_ >= plan_->files.size()) break;
                    from = next_;
                    next_ = std::min(next_ + chunk_ops, plan_->files.size());
                }
                write_ops(from, std::min(from + chunk_ops, plan_->files.size()));
            }
        } catch (...) {
            failed = std::current_exception();
        }
        std::lock_guard lock(mu_);
        if (failed && !failed_) failed_ = failed;
        if (--workers_ == 0) done_.notify_all();
    }

    /// True while a chunk is left to claim.
    [[nodiscard]] bool claimable() const {
        std::lock_guard lock(mu_);
        return !failed_ && next_ < plan_->files.size();
    }

    /// How many files the writing made (contents the store did not hold).
    [[nodiscard]] std::size_t made() const noexcept { return made_.load(std::memory_order_relaxed); }
    /// The store folder of the plan's run folder.
    [[nodiscard]] std::filesystem::path store_dir() const { return plan_->run.dir().parent_path() / op_info_store; }

    /// Blocks until every chunk claimed is written; then throws the first error, if any.
    void finish() {
        std::unique_lock lock(mu_);
        done_.wait(lock, [&] { return workers_ == 0; });
        if (failed_) std::rethrow_exception(failed_);
    }

private:
    // Small: a chunk a starved writer thread has claimed is what a waiter that writes the rest still
    // waits for.
    static constexpr std::size_t chunk_ops = 8;

    void open_folders() {
        std::lock_guard lock(open_mu_);
        if (opened_) return;
        const SessionPlan& p = *plan_;
        debug_.emplace(p.run.debug());
        targets_.emplace(p.run.targets());
        opcompile_.emplace(p.run.opcompile());
        if (p.blacklist_folder) blacklisted_.emplace(p.run.blacklisted());
        if (p.write_selected) selected_.emplace(p.run.selected());
        try {
            store_.emplace(p.run.dir().parent_path() / op_info_store);
        } catch (const Error&) {  // the files are written without it
        }
        opened_ = true;  // only now: a worker after a failure here tries again (and fails alike)
    }

    void write_ops(std::size_t from, std::size_t to) const {
        const SessionPlan& p = *plan_;
        const RunFolder* const store = store_ ? &*store_ : nullptr;
        Names names;
        for (std::size_t i = from; i < to; ++i) {
            const OpRecord& r = (*p.ops)[i].record;
            const SessionPlan::Files& f = p.files[i];
            names.clear();
            names.add(*debug_, f.debug);
            if (!f.target.empty()) names.add(*targets_, f.target);
            if (r.bin_type.has_value() || r.bin_info.has_value()) {
                // The two contents differ: `<pid>` and `_debug` keep the bin fields.
                made_ += write_linked(names, dump_json(to_value(r, ToValueOptions{true})) + "\n", store);
                names.clear();
            }
            if (!f.opcompile.empty()) {
                names.add(*opcompile_, f.opcompile);
                if (f.blacklisted) names.add(*blacklisted_, f.opcompile);
                if (f.selected && p.write_selected) names.add(*selected_, f.opcompile);
            }
            if (!names.names.empty())
                made_ += write_linked(names, dump_json(to_value(r, ToValueOptions{false})) + "\n", store);
        }
    }

    std::shared_ptr<const SessionPlan> plan_;
    mutable std::atomic<std::size_t> made_{0};
    mutable std::mutex mu_;
    std::condition_variable done_;
    std::size_t next_ = 0;  // the first op not claimed
    std::size_t workers_ = 0;
    std::exception_ptr failed_;
    std::mutex open_mu_;  // the folders are opened once, by the first worker, before any chunk
    bool opened_ = false;
    std::optional<RunFolder> debug_, targets_, opcompile_, blacklisted_, selected_, store_;
};

/// Writes `w` on this thread and, for a big plan on a machine with two CPUs or more, a helper
/// thread (it inherits this thread's priority); returns when it is written, or throws its error.
inline void write_plan(PlanWriting& w, std::size_t ops) {
    std::optional<std::thread> helper;
    if (ops >= parallel_write_ops && std::thread::hardware_concurrency() >= 2) helper.emplace([&w] { w.work(); });
    w.work();
    if (helper) helper->join();
    w.finish();
    // Once per process, after a plan that added to the store: the files no run folder links for an
    // hour go (a hit adds nothing, so a warm start never pays for it).
    static std::atomic<bool> swept{false};
    if (w.made() > 0 && !swept.exchange(true)) (void)sweep_op_info_store(w.store_dir(), std::chrono::hours(1));
}

}  // namespace detail

/// Writes the planned folders (see the header comment). Throws Error on the first failure; the
/// files written until then stay whole.
inline void write_planned_files(const SessionPlan& p) {
    detail::PlanWriting w(std::shared_ptr<const SessionPlan>(std::shared_ptr<const SessionPlan>(), &p));
    detail::write_plan(w, p.files.size());
}

/// Writes submitted plans, and runs other deferred work, on a thread of its own, in submission
/// order, from start() on (see the header comment). The thread starts with the first start() and
/// ends with the writer.
///
/// A child made by fork() (a data loader's worker, say) has no such thread: the parent writes what
/// was queued, and the child's writer starts afresh, empty, at its first use.
class FileWriter {
public:
    FileWriter() = default;
    FileWriter(const FileWriter&) = delete;
    FileWriter& operator=(const FileWriter&) = delete;
    /// Finishes what was submitted (an error is dropped: call wait() to see it).
    ~FileWriter() {
        if (::getpid() != owner_) {  // forked: the thread is the parent's
            if (thread_.joinable()) thread_.detach();
            return;
        }
        start();
        {
            std::lock_guard lock(mu_);
            stop_ = true;
        }
        work_.notify_all();
        if (thread_.joinable()) thread_.join();
    }

    /// Queues `plan`; it is written from start() on. A thread in wait() writes a part of it too.
    void submit(std::shared_ptr<const SessionPlan> plan) {
        defer([this, p = std::move(plan)] {
            const std::size_t ops = p->files.size();
            auto w = std::make_shared<detail::PlanWriting>(p);
            {
                std::lock_guard lock(mu_);
                writing_ = w;
            }
            idle_.notify_all();  // a waiter may help
            try {
                detail::write_plan(*w, ops);
            } catch (...) {
                std::lock_guard lock(mu_);
                writing_.reset();
                throw;
            }
            std::lock_guard lock(mu_);
            writing_.reset();
        });
    }

    /// Queues `job` (work off the critical path, such as removing a finished rendezvous); it runs
    /// from start() on, after what was queued before it. What it throws is reported as a plan's
    /// error is.
    void defer(std::function<void()> job) {
        adopt_after_fork();
        {
            std::lock_guard lock(mu_);
            queue_.push_back(std::move(job));
        }
        work_.notify_all();
    }

    /// Lets the thread write what is queued and what comes later; returns at once.
    void start() {
        adopt_after_fork();
        {
            std::lock_guard lock(mu_);
            if (started_) return;
            started_ = true;
            thread_ = std::thread([this] { run(); });
        }
        work_.notify_all();
    }

    /// Starts the writing and blocks until every submitted plan and job is done; then throws the first
    /// error since the last wait(), if any. From help_after on, this thread writes chunks of the plan
    /// in progress too, at its own priority.
    void wait() {
        start();  // (adopts the writer after a fork)
        const auto help_from = std::chrono::steady_clock::now() + help_after;
        std::unique_lock lock(mu_);
        while (!queue_.empty() || busy_) {
            const bool late = std::chrono::steady_clock::now() >= help_from;
            if (const std::shared_ptr<detail::PlanWriting> w = writing_; late && w && w->claimable()) {
                lock.unlock();
                w->work();  // at this thread's priority; its error is the plan's, thrown below
                lock.lock();
                continue;
            }
            // Woken when idle, and when a plan starts.
            if (late) idle_.wait(lock);
            else idle_.wait_until(lock, help_from);
        }
        if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    }

    /// How long wait() leaves the writing to the writer's threads before it writes chunks too. The
    /// writer yields the CPU to everything else (nice 19); a waiter that joined at once would take
    /// it from the node's other ranks, still in their compile() when this one ends (with 8 ranks on
    /// 2 cores the gather's tail on a hit went from 9 to 15 ms to 21 to 43 ms), while one that
    /// never joined waited seconds for a writer starved by other work on the machine.
    static constexpr std::chrono::milliseconds help_after{50};

    /// True while plans or jobs are waiting or running.
    [[nodiscard]] bool pending() const {
        std::lock_guard lock(mu_);
        return !queue_.empty() || busy_;
    }

private:
    /// In a child of fork(): drops the parent's queue and thread, and the state of its locks (the
    /// forking thread was the only one copied; the writer thread may have held them).
    void adopt_after_fork() {
        if (::getpid() == owner_) return;
        if (thread_.joinable()) thread_.detach();
        std::destroy_at(&mu_);  // never destroyed or waited on by a thread of this process
        std::construct_at(&mu_);
        std::destroy_at(&work_);
        std::construct_at(&work_);
        std::destroy_at(&idle_);
        std::construct_at(&idle_);
        queue_.clear();
        writing_.reset();
        busy_ = started_ = stop_ = false;
        error_ = nullptr;
        owner_ = ::getpid();
    }

    void run() {
        // Background work: the lowest priority (Linux nice 19 for this thread only), so that the
        // writing yields the CPU to the process's and the node's critical work (the other ranks'
        // exchange, the model) and runs at full speed when nothing else wants the CPU.
        ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
        std::unique_lock lock(mu_);
        for (;;) {
            work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
            if (queue_.empty()) return;  // stopping, nothing left
            std::function<void()> job = std::move(queue_.front());
            queue_.pop_front();
            busy_ = true;
            lock.unlock();
            std::exception_ptr failed;
            try {
                job();
            } catch (...) {
                failed = std::current_exception();
            }
            job = nullptr;
            lock.lock();
            if (failed && !error_) error_ = failed;
            busy_ = false;
            if (queue_.empty()) idle_.notify_all();
        }
    }

    mutable std::mutex mu_;
    std::condition_variable work_, idle_;
    std::deque<std::function<void()>> queue_;
    std::shared_ptr<detail::PlanWriting> writing_;  // the plan being written, for waiters to help
    bool busy_ = false;
    bool started_ = false;
    bool stop_ = false;
    std::exception_ptr error_;
    std::thread thread_;
    pid_t owner_ = ::getpid();
};

}  // namespace skc
