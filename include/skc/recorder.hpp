// skc/recorder.hpp: OpRecorder, the recording session of docs/spec.md section 6, step 1.
//
// One recording session may be active in a process at a time: OpRecorder's constructor claims the
// process-wide session and throws Error(session_active) when another holds it (this is the
// conflict with a profiler that records op arguments from step 0: that profiler holds the session,
// and skc says so instead of silently recording nothing). stop() ends the session and writes what
// it recorded; take() ends it and hands the records over (StaticKernelCompiler writes the folders
// itself, off its critical path); discard() ends it without writing; the destructor releases the session too if
// neither was called.
//
// record() may be called from many threads at once. Each call hashes the record outside any lock,
// then takes the lock of one of 16 shards (chosen by digest) to deduplicate, so threads recording
// different ops rarely contend. stop() writes `<pid>_debug` (every op), `<pid>` (targets) and
// `<pid>_opcompile` (supported ops, without bin_type/bin_info), in the order ops were first seen.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_set>
#include <utility>
#include <vector>

#include "fwd.hpp"
#include "detail/hash.hpp"
#include "error.hpp"
#include "layout.hpp"
#include "op_info_io.hpp"
#include "op_record.hpp"
#include "op_set.hpp"
#include "select.hpp"
#include "session_files.hpp"

namespace skc {

namespace detail {

inline std::atomic<bool>& recording_session_flag() noexcept {
    static std::atomic<bool> active{false};
    return active;
}

}  // namespace detail

/// True while a recording session is active in this process.
inline bool recording_session_active() noexcept {
    return detail::recording_session_flag().load(std::memory_order_acquire);
}

/// Writes the op info folders of a finished recording into `run` (docs/spec.md section 6, step 2):
/// `<pid>_debug` every record, `<pid>` the targets, `<pid>_opcompile` the supported ones (without
/// bin_type/bin_info), in the order given. OpRecorder::stop() uses it; so does a host whose records
/// come from elsewhere (a folder of op info files).
template <TargetPolicy Targets = DefaultTargets, SupportPolicy Support = DefaultSupport>
RecordingResult write_session(const RunLayout& run, const std::vector<const OpRecord*>& records,
                              const Targets& targets = {}, const Support& support = {}) {
    RecordingResult res;
    detail::make_dir(run.debug());
    detail::make_dir(run.targets());
    detail::make_dir(run.opcompile());
    for (const OpRecord* r : records) {
        write_op_info(run.debug(), *r, WriteOptions{true, false});
        ++res.recorded;
        if (targets.is_target(r->op_type)) {
            write_op_info(run.targets(), *r, WriteOptions{true, false});
            ++res.targets;
        }
        if (support.supports(r->op_type)) {
            write_op_info(run.opcompile(), *r, WriteOptions{false, false});
            ++res.supported;
        }
    }
    return res;
}

/// The defaults are in fwd.hpp; a policy that does not fit gets one message per missing member.
template <class Targets, class Support>
class OpRecorder {
    static_assert(detail::diagnose_targets<Targets>() && detail::diagnose_support<Support>());

public:
    /// Starts the process's recording session. Throws Error(session_active) when one is active.
    explicit OpRecorder(Targets targets = {}, Support support = {})
        : targets_(std::move(targets)), support_(std::move(support)) {
        bool expected = false;
        if (!detail::recording_session_flag().compare_exchange_strong(expected, true, std::memory_order_acq_rel))
            throw Error(Errc::session_active,
                        "a recording session is already active in this process (a profiler that records op "
                        "arguments from step 0 holds it); stop it before enabling static kernel compilation");
    }
    OpRecorder(const OpRecorder&) = delete;
    OpRecorder& operator=(const OpRecorder&) = delete;
    ~OpRecorder() { release(); }

    /// Records one op instance; returns true when its content was not recorded before. The record
    /// is validated first (Error with the JSON path of the fault; nothing is recorded then).
    /// Throws Error(no_session) after stop().
    bool record(const OpRecord& r) {
        validate(r);
        return insert(digest(r), r);
    }

    /// Records with a digest computed at compile time (OpDesc::digest); `make` builds the record
    /// only when the op is new. The digest must be skc::digest(make()): a mismatch is an
    /// Error(invalid_argument) and nothing is recorded.
    template <class Make>
    bool record(const Digest& d, Make&& make) {
        Shard& sh = shard_for(d);
        {
            std::lock_guard lock(sh.mu);
            if (sh.seen.count(d) != 0) return false;
        }
        OpRecord r = make();
        validate(r);
        if (digest(r) != d)
            throw Error(Errc::invalid_argument, "the digest given to record() (" + d.hex() +
                                                    ") is not the digest of the record (" + digest(r).hex() + ")");
        return insert(d, r);
    }

    /// True until stop() (the session is this process's while the recorder is active).
    [[nodiscard]] bool active() const noexcept { return active_.load(std::memory_order_acquire); }

    /// Distinct ops recorded so far.
    [[nodiscard]] std::size_t size() const {
        std::size_t n = 0;
        for (const Shard& sh : shards_) {
            std::lock_guard lock(sh.mu);
            n += sh.items.size();
        }
        return n;
    }

    /// The distinct ops recorded so far, in the order first seen (bin fields dropped, names empty).
    [[nodiscard]] OpSet snapshot() const {
        OpSet set;
        for (const Item* it : ordered()) set.insert(it->digest, without_bin_fields(it->record));
        return set;
    }

    /// Ends the session (the process may start another one) and writes its op info folders into
    /// `run`. Throws Error(no_session) when already stopped. Ops recorded by other threads while
    /// stop() runs are refused with Error(no_session), never half-written.
    RecordingResult stop(const RunLayout& run) {
        end_session();
        std::vector<const OpRecord*> records;
        for (const Item* it : ordered()) records.push_back(&it->record);
        return write_session(run, records, targets_, support_);
    }

    /// Ends the session (as stop()) and hands over what it recorded, in the order first seen, with
    /// the Targets and Support policies' verdicts, without writing anything: the compiler writes
    /// the op info folders itself, off its critical path (session_files.hpp). Throws
    /// Error(no_session) when already stopped.
    std::vector<RecordedOp> take() {
        end_session();
        std::vector<Item*> items;
        for (Shard& sh : shards_)
            for (Item& it : sh.items) items.push_back(&it);
        std::sort(items.begin(), items.end(), [](const Item* a, const Item* b) { return a->seq < b->seq; });
        std::vector<RecordedOp> out;
        out.reserve(items.size());
        for (Item* it : items) {
            const bool target = targets_.is_target(it->record.op_type);
            const bool supported = support_.supports(it->record.op_type);
            out.push_back(RecordedOp{it->digest, std::move(it->record), target, supported});
        }
        for (Shard& sh : shards_) sh.items.clear();
        return out;
    }

    /// Ends the session without writing anything: what was recorded is dropped, the process may
    /// start another session, and record() calls from now on (also from other threads) get
    /// Error(no_session). For a host that turns the feature off before compiling. Does nothing
    /// when already stopped or discarded.
    void discard() noexcept {
        {
            std::array<std::unique_lock<std::mutex>, shard_count> locks;
            for (std::size_t i = 0; i < shard_count; ++i) locks[i] = std::unique_lock(shards_[i].mu);
            active_.store(false, std::memory_order_release);
        }
        release();
    }

private:
    struct Item {
        std::uint64_t seq;
        Digest digest;
        OpRecord record;
    };
    struct Shard {
        mutable std::mutex mu;
        std::unordered_set<Digest, DigestHash> seen;
        std::deque<Item> items;  // a deque: records keep their address while others are added
    };
    static constexpr std::size_t shard_count = 16;

    Shard& shard_for(const Digest& d) { return shards_[d.bytes[15] % shard_count]; }

    bool insert(const Digest& d, const OpRecord& r) {
        Shard& sh = shard_for(d);
        std::lock_guard lock(sh.mu);
        if (!active_.load(std::memory_order_acquire))
            throw Error(Errc::no_session, "the recording session was stopped; start a new OpRecorder to record again");
        if (!sh.seen.insert(d).second) return false;
        sh.items.push_back(Item{next_seq_.fetch_add(1, std::memory_order_relaxed), d, r});
        return true;
    }

    std::vector<const Item*> ordered() const {
        std::vector<const Item*> all;
        for (const Shard& sh : shards_) {
            std::lock_guard lock(sh.mu);
            for (const Item& it : sh.items) all.push_back(&it);
        }
        std::sort(all.begin(), all.end(), [](const Item* a, const Item* b) { return a->seq < b->seq; });
        return all;
    }

    /// Ends the session; throws Error(no_session) when already ended. Taking every shard lock orders
    /// this after any record() in progress; later ones are refused.
    void end_session() {
        {
            std::array<std::unique_lock<std::mutex>, shard_count> locks;
            for (std::size_t i = 0; i < shard_count; ++i) locks[i] = std::unique_lock(shards_[i].mu);
            if (!active_.exchange(false, std::memory_order_acq_rel))
                throw Error(Errc::no_session, "the recording session was already stopped");
        }
        release();
    }

    /// Gives the process-wide session back, once.
    void release() noexcept {
        if (!released_.exchange(true)) detail::recording_session_flag().store(false, std::memory_order_release);
    }

    Targets targets_;
    Support support_;
    std::atomic<bool> active_{true};
    std::atomic<bool> released_{false};
    std::array<Shard, shard_count> shards_;
    std::atomic<std::uint64_t> next_seq_{0};
};

}  // namespace skc
