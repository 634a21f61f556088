// skc/policy/gather.hpp: the GatherPolicy concept and its models SingleRank and LocalFsGather.
//
// With several ranks (processes) on a node, one of them, the node's leader, compiles and installs
// for all (SPEC section 10): every rank publishes the op info it selected; the leader gathers the
// union into `<pid>_opcompile_gathered`, looks up the cache or compiles once and installs once, and
// publishes the outcome; then every rank passes a barrier, reselects, and passes a barrier again.
// A gather policy is that choreography. StaticKernelCompiler hands it three things:
//   - a GatherRequest: this rank's run folder, selected ops and compile folder, and how long the
//     leader's part may take (the compile and install timeouts), which followers wait on top;
//   - `lead`, run once per node, on the leader, with the gathered set; it returns the outcome as a
//     Value, which the policy publishes to the node's ranks;
//   - `share`, run on every rank between the two barriers, with that outcome (hold the install,
//     reselect).
// coordinate() returns the outcome on every rank, or throws skc::Error on every rank: the leader's
// own error on the leader, Errc::peer_failed naming the failed rank on the others, Errc::timeout
// naming the local ranks that never arrived.
//
// LocalFsGather is for the ranks of one node sharing the base directory. Its rendezvous is a folder
// `<outputs>/rendezvous/<run id>/<host>/round-<n>/`, n counting this object's compile() calls (every
// rank calls compile() the same number of times). In it each rank
//   - claims its local rank and publishes its op list in one file, `r<rank>-of-<size>.<nonce>.lock`:
//     its pid, its compile folder and one line per op (digest, file name). It carries an open file
//     description lock (F_OFD_SETLK) for as long as the rank takes part, taken before the file gets
//     its name, so a named claim whose lock is free belongs to a rank that has gone: that is how a
//     rendezvous left by a crashed job is told from the current one (its claims are free), and how
//     a rank that dies is noticed (its claim goes free) without trusting pids;
//   - on the leader: once every rank has claimed, the union is decided in memory (names made unique
//     by `_1`, `_2` suffixes); only when the key misses is the gathered folder filled, by hard links
//     to the ranks' own files (a copy when a link is impossible). Ranks write their op info files
//     only after the exchange (GatherRequest::start_files), so on a miss the leader first creates
//     `files-needed`, which makes the waiting followers start, and waits (bounded) for each file.
//     The outcome, `outcome.<leader nonce>.json`, carries every rank's nonce. It is the first
//     barrier: it exists only once every rank has arrived, and no rank goes on before it is there;
//   - passes the second barrier by appending its nonce to `passed`, or leaves `fail.<nonce>` with
//     the message when its `share` failed.
// Waits sleep on inotify events of the rendezvous folder (a file appearing or written wakes the
// waiter at once), looking again at least every 20 ms for ranks that died (a released lock makes no
// event), or poll with a growing pause where inotify is unavailable.
// Every wait is bounded: arrival and the barrier by `timeout`, the leader's outcome by `timeout`
// plus the leader's budget. A rank that sees a live claim with another LOCAL_WORLD_SIZE leaves a
// note, `mismatch.<nonce>`, so that every rank of the job fails with that message. After a
// successful round the last rank to leave removes the folder; after a failed one it stays (its
// claims are free, so a later job ignores it). docs/file-formats.md lists the files.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../detail/hash.hpp"
#include "../detail/posix.hpp"
#include "../detail/text.hpp"
#include "../error.hpp"
#include "../layout.hpp"
#include "../op_info_io.hpp"
#include "../op_set.hpp"
#include "../session_files.hpp"
#include "../value.hpp"

namespace skc {

/// What one rank brings to the gather.
struct GatherRequest {
    const Layout& layout;                     // the base: LocalFsGather's rendezvous lives under it
    const RunLayout& run;                     // this rank's run folder (the leader's holds `_gathered`)
    const std::vector<SelectedOp>& selected;  // this rank's selected ops, named by their file names
    std::filesystem::path compile_dir;        // the folder holding them; empty when none were selected
    std::chrono::nanoseconds lead_budget{0};  // how long the leader's compile and install may take
    /// Blocks until compile_dir holds every selected file (the host writes them in the background,
    /// session_files.hpp) and throws what failed the writing; empty when they are written already.
    /// A policy that reads the files itself calls it first.
    std::function<void()> await_files;
    /// Starts writing them and returns at once: a follower whose leader needs its files (a miss).
    /// The host otherwise starts only once the exchange is over, to keep the disk free for it.
    std::function<void()> start_files;
    /// Runs `job` off the critical path (the host's background writer, after this compile's op info
    /// files; done at the latest by the host's flush() or destruction); empty: run it at once.
    std::function<void(std::function<void()>)> defer;
};

/// The union of a node's (or job's) selected ops, ready to compile.
struct GatheredSet {
    std::filesystem::path dir;       // the folder to give the compiler; empty when the set is empty
    std::vector<Digest> digests;     // content digests, distinct
    std::vector<std::string> names;  // their op info file names in `dir`, in the same order
    std::size_t ranks = 1;           // ranks whose ops it holds
    /// Fills `dir` (links or writes every op's file, waiting for files that ranks still write);
    /// empty when `dir` needs nothing more than the host's own files. The host calls it only on a
    /// miss, before the compiler, and only within `lead`: a cache hit writes and links nothing.
    std::function<void()> materialize;
};

using LeadFn = std::function<Value(const GatheredSet&)>;
using ShareFn = std::function<void(const Value&)>;

template <class G>
concept GatherPolicy = requires(G& g, const G& cg, const GatherRequest& r, const LeadFn& lead, const ShareFn& share) {
    { g.coordinate(r, lead, share) } -> std::same_as<Value>;
    { cg.local_rank() } -> std::convertible_to<std::size_t>;
    { cg.local_world_size() } -> std::convertible_to<std::size_t>;
};

namespace detail {
/// One message per requirement of GatherPolicy that `G` misses (a host calls it in one line).
template <class G>
consteval bool diagnose_gather() {
    static_assert(
        requires(G & g, const GatherRequest& r, const LeadFn& l, const ShareFn& s) {
            { g.coordinate(r, l, s) } -> std::same_as<Value>;
        },
        "skc: the Gather policy needs a member `Value coordinate(const GatherRequest&, const LeadFn&, "
        "const ShareFn&)`");
    static_assert(GatherPolicy<G>,
                  "skc: the Gather policy needs members `std::size_t local_rank() const` and "
                  "`std::size_t local_world_size() const`");
    return true;
}
}  // namespace detail

/// One process: it is its own leader, nothing is exchanged.
struct SingleRank {
    Value coordinate(const GatherRequest& r, const LeadFn& lead, const ShareFn& share) {
        GatheredSet set;
        if (!r.selected.empty()) set.dir = r.compile_dir;
        set.digests.reserve(r.selected.size());
        set.names.reserve(r.selected.size());
        for (const SelectedOp& e : r.selected) {
            set.digests.push_back(e.digest);
            set.names.push_back(e.name);
        }
        Value out = lead(set);
        share(out);
        return out;
    }
    [[nodiscard]] std::size_t local_rank() const noexcept { return 0; }
    [[nodiscard]] std::size_t local_world_size() const noexcept { return 1; }
};

static_assert(GatherPolicy<SingleRank>);

namespace detail {

/// The pause between two polls of a bounded wait: quick at first (the other ranks are usually
/// close), every 5 ms for the first second, then every 20 ms (a leader's compile can take minutes).
struct Backoff {
    std::chrono::microseconds d{50};
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    void operator()() {
        std::this_thread::sleep_for(d);
        const auto cap = std::chrono::steady_clock::now() - start < std::chrono::seconds(1)
                             ? std::chrono::milliseconds(5)
                             : std::chrono::milliseconds(20);
        d = std::min<std::chrono::microseconds>(d * 2, cap);
    }
};

/// Sleeps until an entry of the watched folder is created, renamed into it or written and closed
/// (inotify), or at most 20 ms (what inotify cannot see: a lock released by a process that died);
/// polls with Backoff where inotify is unavailable. watch() comes before the first look at the
/// folder, so that no change between a look and the sleep is missed.
///
/// One inotify instance serves every folder its owner watches in turn: closing an instance waits
/// for a kernel grace period (6 to 24 ms measured), which a rank would otherwise pay at the end of
/// every round. Removing a watch does not wait. In a child made by fork() the parent's instance is
/// left to the parent and a new one made.
class DirWatch {
public:
    DirWatch() = default;
    DirWatch(DirWatch&& o) noexcept
        : fd_(std::exchange(o.fd_, -1)), wd_(std::exchange(o.wd_, -1)), owner_(o.owner_), backoff_(o.backoff_) {}
    DirWatch& operator=(DirWatch&& o) noexcept {
        if (this != &o) {
            close_fd();
            fd_ = std::exchange(o.fd_, -1);
            wd_ = std::exchange(o.wd_, -1);
            owner_ = o.owner_;
            backoff_ = o.backoff_;
        }
        return *this;
    }
    DirWatch(const DirWatch&) = delete;
    DirWatch& operator=(const DirWatch&) = delete;
    ~DirWatch() { close_fd(); }

    /// Watches `dir` instead of the folder watched so far.
    void watch(const std::filesystem::path& dir) {
        unwatch();
        backoff_ = Backoff{};
        if (fd_ >= 0 && owner_ != ::getpid()) close_fd();  // the parent's, after a fork
        if (fd_ < 0) {
            fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
            owner_ = ::getpid();
        }
        if (fd_ < 0) return;
        // Every rank's file gets its name by creation, link() or rename(); the barrier's `passed`
        // is appended to and closed.
        constexpr std::uint32_t events = IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ONLYDIR;
        wd_ = ::inotify_add_watch(fd_, dir.c_str(), events);
        drain();  // events of an earlier folder
    }

    /// Stops watching (the instance stays for the next folder).
    void unwatch() {
        if (fd_ >= 0 && wd_ >= 0 && owner_ == ::getpid()) ::inotify_rm_watch(fd_, wd_);
        wd_ = -1;
    }

    void wait(std::chrono::steady_clock::time_point deadline) {
        if (fd_ < 0 || wd_ < 0) {
            backoff_();
            return;
        }
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        const auto ms = std::clamp<std::chrono::milliseconds::rep>(left.count(), 0, 20);
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(ms)) > 0) drain();
    }

private:
    void drain() {
        alignas(inotify_event) char buf[4096];
        while (::read(fd_, buf, sizeof buf) > 0) {}
    }
    void close_fd() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = wd_ = -1;
    }

    int fd_ = -1;
    int wd_ = -1;
    pid_t owner_ = 0;
    Backoff backoff_;
};

/// An op info file name read from another process's file: one plain path component (not empty,
/// not `.` or `..`, no '/', newline or NUL), so nothing is ever written outside the gathered folder.
inline bool is_plain_file_name(std::string_view name) {
    return !name.empty() && name.size() <= 255 && name != "." && name != ".." &&
           name.find_first_of(std::string_view("/\n\0", 3)) == std::string_view::npos;
}

/// "3", "3 and 5", "3, 5 and 7".
inline std::string list_ranks(const std::vector<std::size_t>& ranks) {
    std::string s;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
        if (i > 0) s += i + 1 == ranks.size() ? " and " : ", ";
        s += std::to_string(ranks[i]);
    }
    return s;
}

/// A name usable as one path component: kept when plain, else `id-<digest>` of it.
inline std::string path_component(std::string_view s) {
    const bool plain =
        !s.empty() && s.size() <= 64 && s != "." && s != ".." && std::all_of(s.begin(), s.end(), [](char c) {
            return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                   c == '-';
        });
    if (plain && s.front() != '.') return std::string(s);
    return "id-" + hash_bytes(s).hex();
}

/// Merges ranks' selected ops into one folder: first occurrence of a content wins, a name already
/// taken by other content gets `_1`, `_2`, ... before `.json`. The union is decided in memory; the
/// folder is written only by the set's materialize() (a cache hit never needs it).
class OpUnion {
public:
    /// Waits until a rank's file exists (it may still be written in the background) or throws;
    /// `from` is the value given to add().
    using AwaitSource = std::function<void(const std::filesystem::path& source, std::size_t from)>;

    explicit OpUnion(std::filesystem::path dir) : dir_(std::move(dir)) {}

    /// Adds the op with content digest `d`, named `name`, whose file is `source` (linked when
    /// possible) or whose text is `text` (written when `source` is empty or cannot be linked);
    /// `from` tells the AwaitSource whose file it is.
    void add(const Digest& d, const std::string& name, const std::string& source, std::string_view text = {},
             std::size_t from = 0) {
        if (!is_plain_file_name(name))
            throw Error(Errc::unsafe_path, "gathered op " + quote(name) + " is not a plain file name",
                        ErrorContext{dir_.string(), {}, {}});
        if (source.empty() && text.empty())
            throw Error(Errc::invalid_argument, "gathered op " + quote(name) + " has neither a file nor content");
        if (!seen_.insert(d).second) return;
        const std::string unique = unique_name(name);
        pending_.push_back(Pending{unique, source, std::string(text), from});
        digests_.push_back(d);
        names_out_.push_back(unique);
    }

    /// The gathered set; its materialize() fills the folder, calling `await` (when given) before
    /// linking each rank's file.
    [[nodiscard]] GatheredSet take(std::size_t ranks, AwaitSource await = {}) {
        GatheredSet g;
        if (!digests_.empty()) {
            g.dir = dir_;
            g.materialize = [dir = dir_, pending = std::make_shared<std::vector<Pending>>(std::move(pending_)),
                             await = std::move(await)] { write_all(dir, *pending, await); };
        }
        g.digests = std::move(digests_);
        g.names = std::move(names_out_);
        g.ranks = ranks;
        return g;
    }

private:
    struct Pending {
        std::string name;    // unique in the folder
        std::string source;  // a rank's file, or empty (a string: a path per op would cost more than the rest)
        std::string text;    // the content when there is no file
        std::size_t from = 0;
    };

    static void write_all(const std::filesystem::path& dir, const std::vector<Pending>& pending,
                          const AwaitSource& await) {
        make_dir(dir);
        for (const Pending& p : pending) {
            const std::filesystem::path to = dir / p.name;
            if (!p.source.empty()) {
                if (await) await(std::filesystem::path(p.source), p.from);
                if (::link(p.source.c_str(), to.c_str()) == 0) continue;
                if (errno == EEXIST) throw_errno("cannot publish", to, errno);  // materialized twice
            }
            write_new_file(
                dir, p.name,
                p.text.empty() ? read_file(std::filesystem::path(p.source), ReadLimits{}.max_file_bytes) : p.text,
                false);
        }
    }

    std::string unique_name(const std::string& name) {
        if (names_.insert(name).second) return name;
        const std::string stem = name.size() > 5 && name.ends_with(".json") ? name.substr(0, name.size() - 5) : name;
        for (std::size_t i = 1;; ++i) {
            std::string n = stem + "_" + std::to_string(i) + ".json";
            if (names_.insert(n).second) return n;
        }
    }

    std::filesystem::path dir_;
    std::vector<Pending> pending_;
    std::unordered_set<Digest, DigestHash> seen_;
    std::unordered_set<std::string> names_;
    std::vector<Digest> digests_;
    std::vector<std::string> names_out_;
};

/// The outcome a leader publishes: its result, or its error.
inline Value ok_outcome(Value result) { return Value(Object{{"ok", Value(true)}, {"result", std::move(result)}}); }

/// `own`: the leader's own work failed (compile, install); otherwise the gather itself did (a rank
/// that never arrived or died), which every rank reports alike.
/// The texts are made valid UTF-8 (a message may quote bytes of another rank's file, and the
/// outcome is JSON): an error that cannot be published would leave the others without its reason.
inline Value error_outcome(const Error& e, bool own) {
    return Value(Object{{"ok", Value(false)},
                        {"code", Value(to_string(e.code()))},
                        {"message", Value(to_valid_utf8(e.message()))},
                        {"file", Value(to_valid_utf8(e.file()))},
                        {"option", Value(to_valid_utf8(e.option()))},
                        {"what", Value(to_valid_utf8(e.what()))},
                        {"own", Value(own)}});
}

inline Value error_outcome(Errc code, const std::string& message, bool own) {
    return error_outcome(Error(code, message), own);
}

/// A follower's view of the leader's outcome: the result, or the error it must raise. Errors of the
/// gather itself keep their code and message; the leader's own failures (a compile that failed or
/// timed out, a full disk) become Errc::peer_failed naming the leader.
inline Value result_or_throw(const Value& outcome, std::string_view leader_name) {
    const Value* ok = outcome.find("ok");
    if (ok && ok->is_bool() && ok->as_bool()) {
        const Value* r = outcome.find("result");
        return r ? *r : Value();
    }
    auto text = [&](std::string_view k) {
        const Value* v = outcome.find(k);
        return v && v->is_string() ? v->as_string() : std::string();
    };
    const std::string c = text("code").empty() ? "unknown" : text("code");
    const Value* own = outcome.find("own");
    if (!(own && own->is_bool() && own->as_bool())) {
        // The same error as on the leader, where it was found: same code, message, file, option.
        const ErrorContext where{text("file"), {}, text("option")};
        if (c == to_string(Errc::timeout)) throw Error(Errc::timeout, text("message"), where);
        if (c == to_string(Errc::invalid_option)) throw Error(Errc::invalid_option, text("message"), where);
        throw Error(Errc::peer_failed, text("message"), where);
    }
    throw Error(Errc::peer_failed, std::string(leader_name) + " failed (" + c + "): " + text("what"));
}

}  // namespace detail

/// Who this process is among the ranks of its node, and which job it belongs to.
struct LocalRanks {
    std::size_t local_rank = 0;
    std::size_t local_world_size = 1;
    std::string run_id;
};

/// Reads LOCAL_WORLD_SIZE, LOCAL_RANK and the run id (SKC_RUN_ID, else TORCHELASTIC_RUN_ID, else
/// `fallback_run_id`) through `getenv`. Every fault is an Errc::invalid_option error naming the
/// variable and its value. Returns nullopt when neither LOCAL_WORLD_SIZE nor LOCAL_RANK is set
/// (a single-rank job).
inline std::optional<LocalRanks> local_ranks_from_env(
    std::string_view fallback_run_id = {},
    const std::function<const char*(const char*)>& getenv = [](const char* n) { return std::getenv(n); }) {
    const char* size = getenv("LOCAL_WORLD_SIZE");
    const char* rank = getenv("LOCAL_RANK");
    if (!size && !rank) return std::nullopt;
    auto parse = [](const char* name, const char* text, bool positive) -> std::size_t {
        const std::string t = text;
        const bool digits =
            !t.empty() && t.size() <= 9 && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
        const std::size_t v = digits ? static_cast<std::size_t>(std::stoul(t)) : 0;
        if (!digits || (positive && v == 0))
            throw Error(Errc::invalid_option,
                        std::string(name) + "=" + detail::quote(t) + " is not " +
                            (positive ? "a positive integer" : "a non-negative integer"),
                        ErrorContext{{}, {}, name});
        return v;
    };
    auto only_one = [](const char* missing, const char* set, const char* value) {
        return Error(
            Errc::invalid_option,
            std::string(missing) + " is not set, but " + set + " is (" + value + "): a multi-rank job needs both",
            ErrorContext{{}, {}, missing});
    };
    if (!size) throw only_one("LOCAL_WORLD_SIZE", "LOCAL_RANK", rank);
    const std::size_t n = parse("LOCAL_WORLD_SIZE", size, true);
    if (!rank) throw only_one("LOCAL_RANK", "LOCAL_WORLD_SIZE", size);
    const std::size_t k = parse("LOCAL_RANK", rank, false);
    if (k >= n)
        throw Error(Errc::invalid_option,
                    "LOCAL_RANK=" + std::to_string(k) + " is out of range for LOCAL_WORLD_SIZE=" + std::to_string(n) +
                        " (0 to " + std::to_string(n - 1) + ")",
                    ErrorContext{{}, {}, "LOCAL_RANK"});
    LocalRanks r{k, n, {}};
    if (const char* id = getenv("SKC_RUN_ID"); id && *id) r.run_id = id;
    else if (const char* tid = getenv("TORCHELASTIC_RUN_ID"); tid && *tid) r.run_id = tid;
    else r.run_id = std::string(fallback_run_id);
    if (r.run_id.empty())
        throw Error(Errc::invalid_option,
                    "local rank " + std::to_string(k) +
                        ": no run id: set SKC_RUN_ID (or TORCHELASTIC_RUN_ID, as torchrun does) to the same value "
                        "on every rank of the job",
                    ErrorContext{{}, {}, "SKC_RUN_ID"});
    return r;
}

/// The ranks of one node, meeting in the shared base directory (see the header comment).
class LocalFsGather {
public:
    using clock = std::chrono::steady_clock;

    /// `timeout` bounds each wait for the other ranks (arrival, barriers); followers wait for the
    /// leader's outcome `timeout` plus the request's lead budget.
    LocalFsGather(LocalRanks ranks, std::chrono::nanoseconds timeout) : ranks_(std::move(ranks)), timeout_(timeout) {
        if (ranks_.local_world_size == 0)
            throw Error(Errc::invalid_option, "the local world size must be positive",
                        ErrorContext{{}, {}, "LOCAL_WORLD_SIZE"});
        if (ranks_.local_rank >= ranks_.local_world_size)
            throw Error(Errc::invalid_option,
                        "local rank " + std::to_string(ranks_.local_rank) +
                            " is out of range for a local world size of " + std::to_string(ranks_.local_world_size),
                        ErrorContext{{}, {}, "LOCAL_RANK"});
        if (ranks_.run_id.empty())
            throw Error(Errc::invalid_option, "the run id is empty", ErrorContext{{}, {}, "SKC_RUN_ID"});
        if (timeout_ <= std::chrono::nanoseconds{0})
            throw Error(Errc::invalid_argument, "the gather timeout must be positive");
    }

    /// From the environment (local_ranks_from_env); throws when the variables are missing.
    static LocalFsGather from_env(std::chrono::nanoseconds timeout, std::string_view fallback_run_id = {}) {
        std::optional<LocalRanks> r = local_ranks_from_env(fallback_run_id);
        if (!r)
            throw Error(Errc::invalid_option, "LOCAL_WORLD_SIZE and LOCAL_RANK are not set",
                        ErrorContext{{}, {}, "LOCAL_WORLD_SIZE"});
        return LocalFsGather(std::move(*r), timeout);
    }

    LocalFsGather(LocalFsGather&&) noexcept = default;
    LocalFsGather& operator=(LocalFsGather&&) noexcept = default;

    [[nodiscard]] std::size_t local_rank() const noexcept { return ranks_.local_rank; }
    [[nodiscard]] std::size_t local_world_size() const noexcept { return ranks_.local_world_size; }
    [[nodiscard]] const std::string& run_id() const noexcept { return ranks_.run_id; }
    [[nodiscard]] std::chrono::nanoseconds timeout() const noexcept { return timeout_; }

    /// The rendezvous folder of this object's next compile() (for tools and tests).
    [[nodiscard]] std::filesystem::path next_round_dir(const Layout& layout) const {
        return round_dir(layout, round_ + 1);
    }

    Value coordinate(const GatherRequest& req, const LeadFn& lead, const ShareFn& share) {
        Round r(*this, round_dir(req.layout, ++round_));
        r.claim(req);
        // The leader throws its own error after publishing it; a follower throws its view of it.
        // The outcome is the first barrier: the leader publishes it only once every rank has
        // arrived, and no rank goes on before it is there.
        const Value result = ranks_.local_rank == 0
                                 ? r.lead(req, lead)
                                 : detail::result_or_throw(r.await_outcome(req), "local rank 0 (the leader)");
        try {
            share(result);
        } catch (const std::exception& e) {
            r.fail(e.what());
            throw;
        }
        r.barrier();
        r.leave(req.defer);
        return result;
    }

private:
    struct Claim {
        std::size_t rank = 0;
        std::size_t world = 0;
        std::string nonce;
        bool held = false;
    };

    /// One compile()'s meeting; the claim is released (and, on the leader, the folder removed)
    /// when it ends, however it ends.
    class Round {
    public:
        Round(LocalFsGather& g, std::filesystem::path dir) : g_(g), dir_(std::move(dir)) {}
        Round(const Round&) = delete;
        Round& operator=(const Round&) = delete;
        ~Round() {
            if (fd_ >= 0) ::close(fd_);
            g_.watch_.unwatch();
        }

        /// Claims this rank's place and publishes its op list in one file: written and locked
        /// under a temporary name, then renamed, so a named claim always holds the whole list.
        void claim(const GatherRequest& req) {
            std::string text = std::to_string(::getpid()) + "\nskc-gather/1\n" +
                               std::to_string(g_.ranks_.local_world_size) + "\n" + req.compile_dir.string() + "\n";
            text.reserve(text.size() + req.selected.size() * 80);
            for (const SelectedOp& e : req.selected) {
                if (!detail::is_plain_file_name(e.name))
                    throw Error(Errc::invalid_argument,
                                "a selected op has no plain file name: " + detail::quote(e.name));
                text += e.digest.hex();
                text += ' ';
                text += e.name;
                text += '\n';
            }
            // The last rank out of an earlier round removes empty host and run id folders in the
            // background: one that goes between the creation of a parent and of this folder is
            // created again.
            std::error_code ec;
            for (int attempt = 0; attempt < 3; ++attempt) {
                std::filesystem::create_directories(dir_, ec);
                if (!ec) break;
            }
            if (ec)
                throw Error(Errc::io_error, "cannot create the rendezvous folder: " + ec.message(),
                            ErrorContext{dir_.string(), {}, {}});
            g_.watch_.watch(dir_);
            nonce_ = make_nonce();
            const std::filesystem::path tmp = dir_ / (".claim." + nonce_);
            fd_ = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
            if (fd_ < 0) detail::throw_errno("cannot create", tmp, errno);
            const auto fail = [&](const char* what, const std::filesystem::path& p, int err) {
                ::unlink(tmp.c_str());
                detail::throw_errno(what, p, err);
            };
            struct flock fl {};
            fl.l_type = F_WRLCK;
            fl.l_whence = SEEK_SET;
            if (::fcntl(fd_, F_OFD_SETLK, &fl) != 0) fail("cannot lock", tmp, errno);
            try {
                detail::write_all(fd_, text, tmp);
            } catch (const Error&) {
                ::unlink(tmp.c_str());
                throw;
            }
            const std::filesystem::path name =
                dir_ / claim_name(g_.ranks_.local_rank, g_.ranks_.local_world_size, nonce_);
            if (::rename(tmp.c_str(), name.c_str()) != 0) fail("cannot publish", name, errno);
            // Another live process with this local rank: two jobs share the run id and base.
            for (const Claim& c : scan())
                if (c.held && c.rank == g_.ranks_.local_rank && c.nonce != nonce_)
                    throw Error(Errc::invalid_option,
                                "local rank " + std::to_string(c.rank) + " is already taken by a live process (pid " +
                                    pid_of(c) + ") with run id " + detail::quote(g_.ranks_.run_id) +
                                    ": two jobs with the same run id share this base directory",
                                ErrorContext{dir_.string(), {}, "SKC_RUN_ID"});
        }

        /// The leader: wait for every rank, gather, run `lead`, publish the outcome (its error too);
        /// returns `lead`'s result.
        Value lead(const GatherRequest& req, const LeadFn& lead) {
            Value result;
            bool own_error = false;
            try {
                const std::map<std::size_t, std::string> all = await_all_ops();
                detail::OpUnion u(req.run.gathered());
                for (const auto& [rank, nonce] : all) read_ops_into(u, rank, nonce);
                GatheredSet set = u.take(all.size(), [this](const std::filesystem::path& source, std::size_t rank) {
                    await_source(source, rank);
                });
                own_error = true;
                result = lead(set);
            } catch (const Error& e) {
                publish_outcome(detail::error_outcome(e, own_error));
                abandon();  // the followers read the error; the folder stays (it tells ranks yet to come)
                throw;
            } catch (const std::exception& e) {
                publish_outcome(detail::error_outcome(Error(Errc::io_error, e.what()), own_error));
                abandon();
                throw;
            }
            publish_outcome(detail::ok_outcome(result));
            return result;
        }

        /// A follower: wait for the leader's outcome and learn who takes part.
        Value await_outcome(const GatherRequest& req) {
            const auto start = clock::now();
            const auto deadline = start + g_.timeout_ + req.lead_budget;
            bool writing = false;  // this rank's op info files (the leader asks for them on a miss)
            const auto arrival_deadline = start + g_.timeout_;
            std::optional<Claim> leader;
            auto looked = clock::time_point{};
            for (;;) {
                // The full look (every claim, every note) until the leader is known, then at least
                // every 20 ms; an event in between only needs the outcome file checked.
                std::vector<Claim> claims;
                if (!leader || clock::now() - looked >= std::chrono::milliseconds(20)) {
                    claims = scan();
                    check_sizes(claims);
                    looked = clock::now();
                }
                if (!leader) {
                    for (const Claim& c : claims)
                        if (c.rank == 0 && c.held) leader = c;
                    if (!leader && clock::now() >= arrival_deadline)
                        throw Error(Errc::timeout,
                                    "local rank " + std::to_string(g_.ranks_.local_rank) +
                                        ": local rank 0 (the leader) did not arrive within " +
                                        detail::seconds_text(g_.timeout_),
                                    ErrorContext{dir_.string(), {}, {}});
                }
                if (!writing && exists(dir_ / "files-needed")) {
                    if (req.start_files) req.start_files();
                    writing = true;
                }
                if (leader) {
                    const std::filesystem::path outcome_file = dir_ / ("outcome." + leader->nonce + ".json");
                    if (auto text = read_if(outcome_file)) {
                        const auto bad = [&](const std::string& why) {
                            return Error(Errc::corrupt, "the leader's outcome file is unreadable: " + why,
                                         ErrorContext{outcome_file.string(), {}, {}});
                        };
                        Value v;
                        try {
                            v = parse_json(*text);
                        } catch (const Error& e) {
                            throw bad(e.message());
                        }
                        if (const Value* m = v.find("members"); m && m->is_object())
                            for (const Member& mem : m->as_object()) {
                                std::uint64_t rank = 0;
                                if (!detail::parse_u64(mem.key, rank) || rank > 1000000)
                                    throw bad("member " + detail::quote(mem.key) + " is not a rank number");
                                if (!mem.value.is_string() || !is_nonce(mem.value.as_string()))
                                    throw bad("member " + mem.key + " has no nonce (24 hexadecimal digits)");
                                members_[static_cast<std::size_t>(rank)] = mem.value.as_string();
                            }
                        const Value* o = v.find("outcome");
                        return o ? *o : Value();
                    }
                    // The claim is released after the outcome is written: look once more before
                    // calling the leader dead.
                    if (!is_held(*leader) && !exists(dir_ / ("outcome." + leader->nonce + ".json")))
                        throw Error(
                            Errc::peer_failed,
                            "local rank 0 (the leader, pid " + pid_of(*leader) + ") died before publishing the outcome",
                            ErrorContext{dir_.string(), {}, {}});
                }
                if (clock::now() >= deadline)
                    throw Error(Errc::timeout,
                                "local rank " + std::to_string(g_.ranks_.local_rank) +
                                    ": local rank 0 (the leader) published no outcome within " +
                                    detail::seconds_text(deadline - start),
                                ErrorContext{dir_.string(), {}, {}});
                g_.watch_.wait(leader ? deadline : arrival_deadline);
            }
        }

        /// The second barrier: appends this rank's nonce to `passed` and waits until every member's
        /// is there (one file for the round, not one per rank: each costs the journal a create
        /// and an unlink).
        void barrier() {
            const std::filesystem::path passed = dir_ / "passed";
            {
                const std::string line = nonce_ + "\n";
                const int fd = ::open(passed.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
                if (fd < 0) detail::throw_errno("cannot open", passed, errno);
                ssize_t n = 0;
                do n = ::write(fd, line.data(), line.size());  // one write: O_APPEND keeps lines whole
                while (n < 0 && errno == EINTR);
                const int err = errno;
                ::close(fd);
                if (n != static_cast<ssize_t>(line.size()))
                    detail::throw_errno("cannot write", passed, n < 0 ? err : EIO);
            }
            // Whole lines only: a nonce is there when a line holds exactly it.
            const auto has = [](const std::string& text, const std::string& nonce) {
                return text.starts_with(nonce + "\n") || text.find("\n" + nonce + "\n") != std::string::npos;
            };
            const auto read_passed = [&] { return read_if(passed).value_or(std::string()); };
            const auto failed = [&](std::size_t rank, const std::string& nonce) {
                if (auto msg = read_if(dir_ / ("fail." + nonce)))
                    throw Error(Errc::peer_failed, "local rank " + std::to_string(rank) + " failed: " + *msg,
                                ErrorContext{dir_.string(), {}, {}});
            };
            const auto deadline = clock::now() + g_.timeout_;
            for (;;) {
                std::vector<std::size_t> missing;
                const std::string seen = read_passed();  // once per look, not once per rank
                for (const auto& [rank, nonce] : members_) {
                    if (nonce == nonce_ || has(seen, nonce)) continue;
                    failed(rank, nonce);
                    const Claim c{rank, g_.ranks_.local_world_size, nonce, true};
                    if (!is_held(c)) {
                        // A rank marks the barrier (or its failure) before it releases its claim, so
                        // a second look after seeing the claim free tells a rank that passed the
                        // barrier and left from one that died.
                        if (has(read_passed(), nonce)) continue;
                        failed(rank, nonce);
                        throw Error(Errc::peer_failed,
                                    "local rank " + std::to_string(rank) + " (pid " + pid_of(c) +
                                        ") died before the second barrier",
                                    ErrorContext{dir_.string(), {}, {}});
                    }
                    missing.push_back(rank);
                }
                if (missing.empty()) return;
                if (clock::now() >= deadline)
                    throw Error(Errc::timeout,
                                std::string(missing.size() == 1 ? "local rank " : "local ranks ") +
                                    detail::list_ranks(missing) + " did not reach the second barrier within " +
                                    detail::seconds_text(g_.timeout_),
                                ErrorContext{dir_.string(), {}, {}});
                g_.watch_.wait(deadline);
            }
        }

        /// This rank's `share` failed: the others learn it at the next barrier.
        void fail(const std::string& what) {
            try {
                detail::write_new_file(dir_, "fail." + nonce_, what, false);
            } catch (const Error&) {
                // The claim's release still tells the others that this rank has gone.
            }
        }

        /// Ends the round: releases this rank's claim and, after a success, the last rank out (the
        /// one that then sees no live claim) removes the folder; nobody waits for the others to go.
        /// The removal is off the critical path: the folder is renamed out of the way at once (a
        /// later job with the same run id never meets it) and removed by `defer`. After a failure
        /// the folder stays: a rank that comes late finds the note or outcome that explains it; its
        /// claims are free, so a later job ignores it.
        void leave(const std::function<void(std::function<void()>)>& defer) {
            ::close(fd_);
            fd_ = -1;
            for (const Claim& c : scan())  // every live claim, also of ranks this one never met
                if (c.held) return;        // still in use: its last rank removes it
            const std::filesystem::path host = dir_.parent_path();
            const std::filesystem::path gone = host / (".gone." + nonce_);
            // Two ranks leaving at once may both see no live claim: the one whose rename works
            // removes the folder.
            if (::rename(dir_.c_str(), gone.c_str()) != 0) return;
            auto remove = [gone, host] {
                std::error_code ec;
                std::filesystem::remove_all(gone, ec);
                // Finished rounds whose removal a process did not live to run: a `.gone.` folder is
                // never used again, whoever renamed it.
                std::vector<std::filesystem::path> finished;
                for (auto it = std::filesystem::directory_iterator(host, ec);
                     !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
                    if (it->path().filename().string().starts_with(".gone.")) finished.push_back(it->path());
                for (const std::filesystem::path& p : finished) std::filesystem::remove_all(p, ec);
                // The host and run id folders too, once empty (rmdir fails on a folder still in use).
                ::rmdir(host.c_str());
                ::rmdir(host.parent_path().c_str());
            };
            if (defer) defer(std::move(remove));
            else remove();
        }

        /// Ends a failed round: releases the claim and keeps the folder.
        void abandon() {
            ::close(fd_);
            fd_ = -1;
        }

    private:
        static std::string claim_name(std::size_t rank, std::size_t world, const std::string& nonce) {
            return "r" + std::to_string(rank) + "-of-" + std::to_string(world) + "." + nonce + ".lock";
        }

        static bool is_nonce(std::string_view n) {
            return n.size() == 24 && std::all_of(n.begin(), n.end(), [](char c) {
                       return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                   });
        }

        /// 24 lowercase hexadecimal digits.
        static std::string make_nonce() {
            std::random_device rd;
            const std::uint64_t a = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
            const std::uint64_t b = static_cast<std::uint64_t>(::getpid()) ^
                                    static_cast<std::uint64_t>(clock::now().time_since_epoch().count());
            char buf[40];
            std::snprintf(buf, sizeof buf, "%016llx%08llx", static_cast<unsigned long long>(a),
                          static_cast<unsigned long long>(b & 0xffffffffu));
            return buf;
        }

        /// Every named claim in the folder, with whether a live process holds it.
        [[nodiscard]] std::vector<Claim> scan() const {
            std::vector<Claim> out;
            std::error_code ec;
            for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
                const std::string n = entry.path().filename().string();
                // r<rank>-of-<world>.<nonce>.lock
                if (n.size() < 6 || n[0] != 'r' || !n.ends_with(".lock")) continue;
                const std::size_t dash = n.find("-of-");
                const std::size_t dot = n.find('.', dash == std::string::npos ? 0 : dash);
                if (dash == std::string::npos || dot == std::string::npos) continue;
                Claim c;
                try {
                    c.rank = std::stoul(n.substr(1, dash - 1));
                    c.world = std::stoul(n.substr(dash + 4, dot - dash - 4));
                } catch (const std::exception&) {
                    continue;
                }
                c.nonce = n.substr(dot + 1, n.size() - dot - 1 - 5);
                c.held = is_held(c);
                out.push_back(std::move(c));
            }
            return out;
        }

        [[nodiscard]] bool is_held(const Claim& c) const {
            const std::filesystem::path p = dir_ / claim_name(c.rank, c.world, c.nonce);
            const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
            if (fd < 0) return false;
            struct flock fl {};
            fl.l_type = F_WRLCK;
            fl.l_whence = SEEK_SET;
            const int rc = ::fcntl(fd, F_OFD_GETLK, &fl);
            ::close(fd);
            return rc == 0 && fl.l_type != F_UNLCK;
        }

        /// The first line of the claim: the pid of the process that made it.
        [[nodiscard]] std::string pid_of(const Claim& c) const {
            const std::filesystem::path p = dir_ / claim_name(c.rank, c.world, c.nonce);
            const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
            if (fd < 0) return "unknown";
            char buf[24] = {};
            const ssize_t n = ::read(fd, buf, sizeof buf - 1);
            ::close(fd);
            const std::string_view t(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
            const std::size_t end = t.find('\n');
            if (end == 0 || end == std::string_view::npos) return "unknown";
            return std::string(t.substr(0, end));
        }

        /// Live claims must agree with this rank's LOCAL_WORLD_SIZE.
        /// Live claims must agree with this rank's LOCAL_WORLD_SIZE. A rank that finds one that does
        /// not leaves a note, `mismatch.<nonce>`, so that the ranks that come later (or have not
        /// looked yet) fail with the same message rather than wait for a rank that will not come.
        /// Notes older than the timeout are taken for an earlier job's and ignored.
        void check_sizes(const std::vector<Claim>& claims) const {
            for (const Claim& c : claims)
                if (c.held && c.world != g_.ranks_.local_world_size) {
                    const std::string msg =
                        "LOCAL_WORLD_SIZE differs between ranks: local rank " + std::to_string(g_.ranks_.local_rank) +
                        " has " + std::to_string(g_.ranks_.local_world_size) + ", local rank " +
                        std::to_string(c.rank) + " (pid " + pid_of(c) + ") has " + std::to_string(c.world);
                    try {
                        detail::write_new_file(dir_, "mismatch." + nonce_, msg, false);
                    } catch (const Error&) {
                        // A second mismatch seen by this rank: the first note stands.
                    }
                    throw Error(Errc::invalid_option, msg, ErrorContext{dir_.string(), {}, "LOCAL_WORLD_SIZE"});
                }
            std::error_code ec;
            const auto now = std::filesystem::file_time_type::clock::now();
            for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
                const std::string n = entry.path().filename().string();
                if (!n.starts_with("mismatch.") || n == "mismatch." + nonce_) continue;
                std::error_code tec;
                const auto t = std::filesystem::last_write_time(entry.path(), tec);
                if (tec || now - t > g_.timeout_) continue;
                if (auto msg = read_if(entry.path()))
                    throw Error(Errc::invalid_option, *msg, ErrorContext{dir_.string(), {}, "LOCAL_WORLD_SIZE"});
            }
        }

        /// The leader waits until every local rank has claimed (and so published its op list);
        /// rank -> nonce. A rank that dies after arriving is noticed at the second barrier.
        std::map<std::size_t, std::string> await_all_ops() {
            const std::size_t n = g_.ranks_.local_world_size;
            const auto deadline = clock::now() + g_.timeout_;
            for (;;) {
                const std::vector<Claim> claims = scan();
                check_sizes(claims);
                for (const Claim& c : claims)
                    if (c.held && c.rank < n) members_.emplace(c.rank, c.nonce);  // the first live claim seen
                if (members_.size() == n) return members_;
                std::vector<std::size_t> missing;
                for (std::size_t k = 0; k < n; ++k)
                    if (!members_.count(k)) missing.push_back(k);
                if (clock::now() >= deadline)
                    throw Error(Errc::timeout,
                                std::string(missing.size() == 1 ? "local rank " : "local ranks ") +
                                    detail::list_ranks(missing) + " of " + std::to_string(n) +
                                    " did not arrive within " + detail::seconds_text(g_.timeout_) + " (run id " +
                                    detail::quote(g_.ranks_.run_id) + ")",
                                ErrorContext{dir_.string(), {}, {}});
                g_.watch_.wait(deadline);
            }
        }

        void read_ops_into(detail::OpUnion& u, std::size_t rank, const std::string& nonce) const {
            const std::filesystem::path file = dir_ / claim_name(rank, g_.ranks_.local_world_size, nonce);
            const std::string text = read_file(file, std::size_t{1} << 30);
            auto bad = [&](const std::string& why) {
                return Error(Errc::corrupt, "local rank " + std::to_string(rank) + "'s op list is unreadable: " + why,
                             ErrorContext{file.string(), {}, {}});
            };
            std::size_t pos = 0;
            auto line = [&]() -> std::optional<std::string_view> {
                if (pos >= text.size()) return std::nullopt;
                const std::size_t e = text.find('\n', pos);
                if (e == std::string::npos) throw bad("no final newline");
                std::string_view l(text.data() + pos, e - pos);
                pos = e + 1;
                return l;
            };
            if (!line()) throw bad("no pid");
            if (line() != std::optional<std::string_view>("skc-gather/1")) throw bad("unknown format");
            if (!line()) throw bad("no world size");
            const std::optional<std::string_view> dir = line();
            if (!dir) throw bad("no folder");
            const std::string src = std::string(*dir) + "/";
            while (const std::optional<std::string_view> l = line()) {
                const std::optional<Digest> d = Digest::from_hex(l->substr(0, 32));
                if (!d || l->size() < 34 || (*l)[32] != ' ') throw bad("bad line " + detail::quote(std::string(*l)));
                const std::string name(l->substr(33));
                if (!detail::is_plain_file_name(name))
                    throw bad("op file name " + detail::quote(name) + " is not a plain file name");
                u.add(*d, name, src + name, {}, rank);
            }
        }

        /// On a miss, before linking rank `rank`'s file `source`: the rank writes its op info files in
        /// the background, so wait (bounded) until it is there, or the rank is gone.
        void await_source(const std::filesystem::path& source, std::size_t rank) {
            if (!files_needed_) {  // the followers write their files only when asked (a miss)
                touch(dir_ / "files-needed");
                files_needed_ = true;
            }
            // A symbolic link is there too (it is linked as it is, never followed).
            const auto exists = [](const std::filesystem::path& p) {
                return ::faccessat(AT_FDCWD, p.c_str(), F_OK, AT_SYMLINK_NOFOLLOW) == 0;
            };
            if (exists(source)) return;
            const auto it = members_.find(rank);
            const Claim c{rank, g_.ranks_.local_world_size, it == members_.end() ? std::string() : it->second, true};
            const auto deadline = clock::now() + g_.timeout_;
            detail::Backoff wait;
            while (!exists(source)) {
                if (!is_held(c) && !exists(source))
                    throw Error(Errc::peer_failed,
                                "local rank " + std::to_string(rank) + " (pid " + pid_of(c) +
                                    ") ended before writing its op info file",
                                ErrorContext{source.string(), {}, {}});
                if (clock::now() >= deadline)
                    throw Error(Errc::timeout,
                                "local rank " + std::to_string(rank) + " did not write its op info file within " +
                                    detail::seconds_text(g_.timeout_),
                                ErrorContext{source.string(), {}, {}});
                wait();
            }
        }

        void publish_outcome(const Value& outcome) {
            Object members;
            for (const auto& [rank, nonce] : members_) members.push_back({std::to_string(rank), Value(nonce)});
            const Value doc(Object{{"outcome", outcome}, {"members", Value(std::move(members))}});
            try {
                detail::write_new_file(dir_, "outcome." + nonce_ + ".json", dump_json(doc, -1), false);
            } catch (const Error&) {
                // The followers then see this rank's claim go free and fail with "died".
            }
        }

        static bool exists(const std::filesystem::path& p) { return ::access(p.c_str(), F_OK) == 0; }

        static std::optional<std::string> read_if(const std::filesystem::path& p) {
            if (!exists(p)) return std::nullopt;
            try {
                return read_file(p, std::size_t{1} << 20);
            } catch (const Error&) {
                return std::nullopt;
            }
        }

        void touch(const std::filesystem::path& p) const {
            const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
            if (fd < 0) detail::throw_errno("cannot create", p, errno);
            ::close(fd);
        }

        LocalFsGather& g_;
        std::filesystem::path dir_;
        std::string nonce_;
        int fd_ = -1;
        bool files_needed_ = false;
        std::map<std::size_t, std::string> members_;  // rank -> nonce of everyone taking part
    };

    [[nodiscard]] std::filesystem::path round_dir(const Layout& layout, std::size_t round) const {
        char host[256] = {};
        if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
        return layout.outputs() / "rendezvous" / detail::path_component(ranks_.run_id) / detail::path_component(host) /
               ("round-" + std::to_string(round));
    }

    LocalRanks ranks_;
    std::chrono::nanoseconds timeout_;
    std::size_t round_ = 0;
    detail::DirWatch watch_;  // the current round's folder; one inotify instance for every round
};

static_assert(GatherPolicy<LocalFsGather>);

}  // namespace skc
