// skc/detail/local_fs_round.hpp: one compile()'s meeting of LocalFsGather's ranks in their
// rendezvous folder (policy/local_fs_gather.hpp describes it): the claims, the leader's outcome and
// the barriers.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
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
#include <unistd.h>

#include "../error.hpp"
#include "../layout.hpp"
#include "gather_round.hpp"
#include "../policy/local_ranks.hpp"
#include "../value.hpp"
#include "atomic_file.hpp"
#include "dir_watch.hpp"
#include "hash.hpp"
#include "names.hpp"
#include "posix.hpp"
#include "text.hpp"

namespace skc::detail {

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
        AtomicFile claim(dir_ / claim_name(ranks_.local_rank, ranks_.local_world_size, nonce_));
        struct flock fl {};
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        if (::fcntl(claim.fd(), F_OFD_SETLK, &fl) != 0) throw_errno("cannot lock", claim.temp_path(), errno);
        claim.write(text);
        fd_ = claim.commit_keeping_fd().release();
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
                // A leader whose lead failed at once has published its error and released its
                // claim already: its outcome file names it.
                if (!leader)
                    for (const LocalFsClaim& c : claims)
                        if (c.rank == 0 && exists(dir_ / ("outcome." + c.nonce + ".json"))) leader = c;
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

}  // namespace skc::detail
