// skc/policy/local_fs_gather.hpp: LocalFsGather, the ranks of one node meeting in the base
// directory they share (LOCAL_WORLD_SIZE, LOCAL_RANK and a run id, as torchrun sets them).
//
// Each compile() is a round in `<outputs>/rendezvous/<run id>/<host>/round-<n>/`
// (detail::LocalFsRound): every rank claims its place with a file holding its op list and an open
// file description lock (so a rank that dies is noticed, and a crashed job's files are told from a
// live one's); the leader decides the union in memory, fills the gathered folder only on a miss,
// and publishes the outcome, which is the first barrier; each rank then appends to `passed`, the
// second barrier. Waits sleep on inotify events of the round folder and look again at least every
// 20 ms; every wait is bounded. docs/file-formats.md ("The rendezvous of several ranks") lists the
// files and the steps; docs/tutorial.md (section 10) shows the errors each fault gives.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "../detail/hash.hpp"
#include "../detail/names.hpp"
#include "../detail/posix.hpp"
#include "../detail/text.hpp"
#include "../error.hpp"
#include "../layout.hpp"
#include "../value.hpp"
#include "gather_core.hpp"

namespace skc {

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

namespace detail {

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

/// A name usable as one path component: kept when plain, else `id-<digest>` of it.
inline std::string path_component(std::string_view s) {
    if (is_portable_name(s, 64)) return std::string(s);
    return "id-" + hash_bytes(s).hex();
}

struct LocalFsClaim {
    std::size_t rank = 0;
    std::size_t world = 0;
    std::string nonce;
    bool held = false;
};

/// One compile()'s meeting; the claim is released (and, on the leader, the folder removed)
/// when it ends, however it ends.
class LocalFsRound {
public:
    LocalFsRound(const LocalRanks& ranks, std::chrono::nanoseconds timeout, DirWatch& watch, std::filesystem::path dir)
        : ranks_(ranks), timeout_(timeout), watch_(watch), dir_(std::move(dir)) {}
    LocalFsRound(const LocalFsRound&) = delete;
    LocalFsRound& operator=(const LocalFsRound&) = delete;
    ~LocalFsRound() {
        if (fd_ >= 0) ::close(fd_);
        watch_.unwatch();
    }

    /// Claims this rank's place and publishes its op list in one file: written and locked
    /// under a temporary name, then renamed, so a named claim always holds the whole list.
    void claim(const GatherRequest& req) {
        std::string text = std::to_string(::getpid()) + "\nskc-gather/1\n" + std::to_string(ranks_.local_world_size) +
                           "\n" + req.compile_dir.string() + "\n";
        text.reserve(text.size() + req.selected.size() * 80);
        for (const SelectedOp& e : req.selected) {
            if (!is_plain_file_name(e.name))
                throw Error(Errc::invalid_argument, "a selected op has no plain file name: " + quote(e.name));
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
        watch_.watch(dir_);
        nonce_ = make_nonce();
        const std::filesystem::path tmp = dir_ / (".claim." + nonce_);
        fd_ = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd_ < 0) throw_errno("cannot create", tmp, errno);
        const auto fail = [&](const char* what, const std::filesystem::path& p, int err) {
            ::unlink(tmp.c_str());
            throw_errno(what, p, err);
        };
        struct flock fl {};
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        if (::fcntl(fd_, F_OFD_SETLK, &fl) != 0) fail("cannot lock", tmp, errno);
        try {
            write_all(fd_, text, tmp);
        } catch (const Error&) {
            ::unlink(tmp.c_str());
            throw;
        }
        const std::filesystem::path name = dir_ / claim_name(ranks_.local_rank, ranks_.local_world_size, nonce_);
        if (::rename(tmp.c_str(), name.c_str()) != 0) fail("cannot publish", name, errno);
        // Another live process with this local rank: two jobs share the run id and base.
        for (const LocalFsClaim& c : scan())
            if (c.held && c.rank == ranks_.local_rank && c.nonce != nonce_)
                throw Error(Errc::invalid_option,
                            "local rank " + std::to_string(c.rank) + " is already taken by a live process (pid " +
                                pid_of(c) + ") with run id " + quote(ranks_.run_id) +
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
            OpUnion u(req.run.gathered());
            for (const auto& [rank, nonce] : all) read_ops_into(u, rank, nonce);
            GatheredSet set = u.take(all.size(), [this](const std::filesystem::path& source, std::size_t rank) {
                await_source(source, rank);
            });
            own_error = true;
            result = lead(set);
        } catch (const Error& e) {
            publish_outcome(error_outcome(e, own_error));
            abandon();  // the followers read the error; the folder stays (it tells ranks yet to come)
            throw;
        } catch (const std::exception& e) {
            publish_outcome(error_outcome(Error(Errc::io_error, e.what()), own_error));
            abandon();
            throw;
        }
        publish_outcome(ok_outcome(result));
        return result;
    }

    /// A follower: wait for the leader's outcome and learn who takes part.
    Value await_outcome(const GatherRequest& req) {
        const auto start = std::chrono::steady_clock::now();
        const auto deadline = start + timeout_ + req.lead_budget;
        bool writing = false;  // this rank's op info files (the leader asks for them on a miss)
        const auto arrival_deadline = start + timeout_;
        std::optional<LocalFsClaim> leader;
        auto looked = std::chrono::steady_clock::time_point{};
        for (;;) {
            // The full look (every claim, every note) until the leader is known, then at least
            // every 20 ms; an event in between only needs the outcome file checked.
            std::vector<LocalFsClaim> claims;
            if (!leader || std::chrono::steady_clock::now() - looked >= std::chrono::milliseconds(20)) {
                claims = scan();
                check_sizes(claims);
                looked = std::chrono::steady_clock::now();
            }
            if (!leader) {
                for (const LocalFsClaim& c : claims)
                    if (c.rank == 0 && c.held) leader = c;
                if (!leader && std::chrono::steady_clock::now() >= arrival_deadline)
                    throw Error(Errc::timeout,
                                "local rank " + std::to_string(ranks_.local_rank) +
                                    ": local rank 0 (the leader) did not arrive within " + seconds_text(timeout_),
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
                            if (!parse_u64(mem.key, rank) || rank > 1000000)
                                throw bad("member " + quote(mem.key) + " is not a rank number");
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
            if (std::chrono::steady_clock::now() >= deadline)
                throw Error(Errc::timeout,
                            "local rank " + std::to_string(ranks_.local_rank) +
                                ": local rank 0 (the leader) published no outcome within " +
                                seconds_text(deadline - start),
                            ErrorContext{dir_.string(), {}, {}});
            watch_.wait(leader ? deadline : arrival_deadline);
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
            if (fd < 0) throw_errno("cannot open", passed, errno);
            ssize_t n = 0;
            do n = ::write(fd, line.data(), line.size());  // one write: O_APPEND keeps lines whole
            while (n < 0 && errno == EINTR);
            const int err = errno;
            ::close(fd);
            if (n != static_cast<ssize_t>(line.size())) throw_errno("cannot write", passed, n < 0 ? err : EIO);
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
        const auto deadline = std::chrono::steady_clock::now() + timeout_;
        for (;;) {
            std::vector<std::size_t> missing;
            const std::string seen = read_passed();  // once per look, not once per rank
            for (const auto& [rank, nonce] : members_) {
                if (nonce == nonce_ || has(seen, nonce)) continue;
                failed(rank, nonce);
                const LocalFsClaim c{rank, ranks_.local_world_size, nonce, true};
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
            if (std::chrono::steady_clock::now() >= deadline)
                throw Error(Errc::timeout,
                            std::string(missing.size() == 1 ? "local rank " : "local ranks ") + list_ranks(missing) +
                                " did not reach the second barrier within " + seconds_text(timeout_),
                            ErrorContext{dir_.string(), {}, {}});
            watch_.wait(deadline);
        }
    }

    /// This rank's `share` failed: the others learn it at the next barrier.
    void fail(const std::string& what) {
        try {
            write_new_file(dir_, "fail." + nonce_, what, false);
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
        for (const LocalFsClaim& c : scan())  // every live claim, also of ranks this one never met
            if (c.held) return;               // still in use: its last rank removes it
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
        return n.size() == 24 &&
               std::all_of(n.begin(), n.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
    }

    /// 24 lowercase hexadecimal digits.
    static std::string make_nonce() {
        std::random_device rd;
        const std::uint64_t a = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
        const std::uint64_t b = static_cast<std::uint64_t>(::getpid()) ^
                                static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
        char buf[40];
        std::snprintf(buf, sizeof buf, "%016llx%08llx", static_cast<unsigned long long>(a),
                      static_cast<unsigned long long>(b & 0xffffffffu));
        return buf;
    }

    /// Every named claim in the folder, with whether a live process holds it.
    [[nodiscard]] std::vector<LocalFsClaim> scan() const {
        std::vector<LocalFsClaim> out;
        std::error_code ec;
        for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
            const std::string n = entry.path().filename().string();
            // r<rank>-of-<world>.<nonce>.lock
            if (n.size() < 6 || n[0] != 'r' || !n.ends_with(".lock")) continue;
            const std::size_t dash = n.find("-of-");
            const std::size_t dot = n.find('.', dash == std::string::npos ? 0 : dash);
            if (dash == std::string::npos || dot == std::string::npos) continue;
            LocalFsClaim c;
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

    [[nodiscard]] bool is_held(const LocalFsClaim& c) const {
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
    [[nodiscard]] std::string pid_of(const LocalFsClaim& c) const {
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
    void check_sizes(const std::vector<LocalFsClaim>& claims) const {
        for (const LocalFsClaim& c : claims)
            if (c.held && c.world != ranks_.local_world_size) {
                const std::string msg =
                    "LOCAL_WORLD_SIZE differs between ranks: local rank " + std::to_string(ranks_.local_rank) +
                    " has " + std::to_string(ranks_.local_world_size) + ", local rank " + std::to_string(c.rank) +
                    " (pid " + pid_of(c) + ") has " + std::to_string(c.world);
                try {
                    write_new_file(dir_, "mismatch." + nonce_, msg, false);
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
            if (tec || now - t > timeout_) continue;
            if (auto msg = read_if(entry.path()))
                throw Error(Errc::invalid_option, *msg, ErrorContext{dir_.string(), {}, "LOCAL_WORLD_SIZE"});
        }
    }

    /// The leader waits until every local rank has claimed (and so published its op list);
    /// rank -> nonce. A rank that dies after arriving is noticed at the second barrier.
    std::map<std::size_t, std::string> await_all_ops() {
        const std::size_t n = ranks_.local_world_size;
        const auto deadline = std::chrono::steady_clock::now() + timeout_;
        for (;;) {
            const std::vector<LocalFsClaim> claims = scan();
            check_sizes(claims);
            for (const LocalFsClaim& c : claims)
                if (c.held && c.rank < n) members_.emplace(c.rank, c.nonce);  // the first live claim seen
            if (members_.size() == n) return members_;
            std::vector<std::size_t> missing;
            for (std::size_t k = 0; k < n; ++k)
                if (!members_.count(k)) missing.push_back(k);
            if (std::chrono::steady_clock::now() >= deadline)
                throw Error(Errc::timeout,
                            std::string(missing.size() == 1 ? "local rank " : "local ranks ") + list_ranks(missing) +
                                " of " + std::to_string(n) + " did not arrive within " + seconds_text(timeout_) +
                                " (run id " + quote(ranks_.run_id) + ")",
                            ErrorContext{dir_.string(), {}, {}});
            watch_.wait(deadline);
        }
    }

    void read_ops_into(OpUnion& u, std::size_t rank, const std::string& nonce) const {
        const std::filesystem::path file = dir_ / claim_name(rank, ranks_.local_world_size, nonce);
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
            if (!d || l->size() < 34 || (*l)[32] != ' ') throw bad("bad line " + quote(std::string(*l)));
            const std::string name(l->substr(33));
            if (!is_plain_file_name(name)) throw bad("op file name " + quote(name) + " is not a plain file name");
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
        const LocalFsClaim c{rank, ranks_.local_world_size, it == members_.end() ? std::string() : it->second, true};
        const auto deadline = std::chrono::steady_clock::now() + timeout_;
        Backoff wait;
        while (!exists(source)) {
            if (!is_held(c) && !exists(source))
                throw Error(Errc::peer_failed,
                            "local rank " + std::to_string(rank) + " (pid " + pid_of(c) +
                                ") ended before writing its op info file",
                            ErrorContext{source.string(), {}, {}});
            if (std::chrono::steady_clock::now() >= deadline)
                throw Error(Errc::timeout,
                            "local rank " + std::to_string(rank) + " did not write its op info file within " +
                                seconds_text(timeout_),
                            ErrorContext{source.string(), {}, {}});
            wait();
        }
    }

    void publish_outcome(const Value& outcome) {
        Object members;
        for (const auto& [rank, nonce] : members_) members.push_back({std::to_string(rank), Value(nonce)});
        const Value doc(Object{{"outcome", outcome}, {"members", Value(std::move(members))}});
        try {
            write_new_file(dir_, "outcome." + nonce_ + ".json", dump_json(doc, -1), false);
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
        if (fd < 0) throw_errno("cannot create", p, errno);
        ::close(fd);
    }

    const LocalRanks& ranks_;
    std::chrono::nanoseconds timeout_;
    DirWatch& watch_;
    std::filesystem::path dir_;
    std::string nonce_;
    int fd_ = -1;
    bool files_needed_ = false;
    std::map<std::size_t, std::string> members_;  // rank -> nonce of everyone taking part
};

}  // namespace detail

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
        detail::LocalFsRound r(ranks_, timeout_, watch_, round_dir(req.layout, ++round_));
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
