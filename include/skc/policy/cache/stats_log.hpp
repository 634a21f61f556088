// skc/policy/cache/stats_log.hpp: IndexCache's statistics: each process's counters and hits
// appended to the statistics log without a lock, folded into `stats` under the namespace lock.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../cache_format.hpp"
#include "../../error.hpp"
#include "../index_cache.hpp"
#include "../storage.hpp"

namespace skc {

template <class S, class L>
void IndexCache<S, L>::zero_stats() {
    refuse_if_read_only("reset the statistics");
    Guard g =
        locks_.lock_until(names_.namespace_lock, LockMode::exclusive, LockClock::now() + std::chrono::seconds(30));
    if (!g.owns()) throw Error(Errc::timeout, "cannot take the cache's namespace lock to reset the statistics");
    if constexpr (StorageTraits<S>::appends) fold_locked(/*zero=*/true);
    else storage_.write("stats", CacheStats{}.encode());
    std::lock_guard lock(mu_);
    flushed_ = CacheStats{};
    stats_ = CacheStats{};
}

template <class S, class L>
CacheStats IndexCache<S, L>::persisted_stats() const {
    CacheStats s;
    {
        Guard g;
        try {
            g = locks_.lock_until(names_.namespace_lock, LockMode::shared, LockClock::now() + std::chrono::seconds(30));
        } catch (const Error&) {  // a lock file this process may not create: read without it
        }
        s = stored_stats();
    }
    std::lock_guard lock(mu_);
    s += stats_;
    return s;
}

template <class S, class L>
void IndexCache<S, L>::fold_stats() {
    if constexpr (StorageTraits<S>::appends) {
        refuse_if_read_only("fold the statistics");
        Guard g =
            locks_.lock_until(names_.namespace_lock, LockMode::exclusive, LockClock::now() + std::chrono::seconds(30));
        if (!g.owns()) throw Error(Errc::timeout, "cannot take the cache's namespace lock to fold the statistics");
        fold_locked(/*zero=*/false);
    }
}

template <class S, class L>
void IndexCache<S, L>::flush() {
    CacheStats delta;
    std::vector<std::array<char, 32>> touched;
    {
        std::lock_guard lock(mu_);
        delta = std::exchange(stats_, CacheStats{});  // what other threads count meanwhile stays for later
        touched.swap(touched_);
        if (config_.mode == CacheMode::read_only) {  // counted in this process only
            flushed_ += delta;
            return;
        }
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    bool fold_due = false;
    try {
        if constexpr (StorageTraits<S>::appends) {
            if (delta == CacheStats{} && touched.empty()) return;
            const std::int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            std::chrono::system_clock::now().time_since_epoch())
                                            .count();
            const std::string line = detail::stats_log_line(delta, touched, now_ns);
            fold_due = detail::stats_log_fold_due(storage_.append(detail::stats_log, line), line.size());
        } else {
            for (const auto& key : touched) {
                const std::string k(key.data(), key.size());
                storage_.touch("entries/" + k);
                storage_.touch("composites/" + k);
            }
            if (delta == CacheStats{}) return;
            Guard g = locks_.lock_until(names_.namespace_lock, LockMode::exclusive,
                                        LockClock::now() + std::chrono::seconds(30));
            if (!g.owns()) throw Error(Errc::timeout, "cannot take the cache's namespace lock to save statistics");
            CacheStats s;
            if (const auto t = storage_.read("stats")) s = CacheStats::decode(*t);
            s += delta;
            storage_.write("stats", s.encode());
        }
    } catch (...) {
        std::lock_guard lock(mu_);
        stats_ += delta;  // not saved: the next flush tries again
        touched_.insert(touched_.end(), touched.begin(), touched.end());
        throw;
    }
    {
        std::lock_guard lock(mu_);
        flushed_ += delta;
    }
    if (fold_due) fold_quietly();
}

/// Gives `fn` each whole line of the statistics logs that `stats` (text `stats_text`) does not
/// count yet: the log's from the mark `stats` records on (all of it when that mark names another
/// log), and those of logs taken by versions that renamed the log to fold it, beyond the bytes
/// `stats` names. No lock is needed: the log only grows.
template <class S, class L>
template <class Fn>
auto IndexCache<S, L>::read_unfolded_logs(std::string_view stats_text, Fn&& fn) const -> UnfoldedLogs {
    UnfoldedLogs out;
    out.mark = detail::stats_log_mark(stats_text);
    const auto folded = detail::folded_stats_logs(stats_text);
    for (const std::string& name : storage_.list("")) {
        if (name.rfind(detail::taken_stats_log, 0) != 0) continue;
        const std::optional<std::string> log = storage_.read(name);
        if (!log) continue;
        const auto counted = folded.find(name);
        detail::for_each_stats_log_line(*log, counted == folded.end() ? 0 : counted->second, fn);
        out.taken.emplace_back(name, log->size());
    }
    if (const std::optional<LogTail> tail = storage_.read_log(detail::stats_log, out.mark)) {
        detail::for_each_stats_log_line(tail->data, 0, fn);
        out.mark = detail::stats_log_read_to(*tail);
    }
    return out;
}

/// What `stats` and the statistics logs hold: `stats`, plus the lines it does not count yet.
template <class S, class L>
CacheStats IndexCache<S, L>::stored_stats() const {
    const std::optional<std::string> text = storage_.read("stats");
    CacheStats s = text ? CacheStats::decode(*text) : CacheStats{};
    if constexpr (StorageTraits<S>::appends)
        (void)read_unfolded_logs(text ? std::string_view(*text) : std::string_view(),
                                 [&](const detail::StatsLogLine& l) { s += l.counts; });
    return s;
}

/// Under the namespace lock: adds the lines of the statistics log that `stats` does not count
/// to it and applies the use times they record to the entries (with `zero`, resets `stats`
/// instead of adding). The use times are applied first, then `stats` is written (a temporary,
/// fsync'd and renamed) with the sum and the mark where the log was read to; then the space of
/// the log's bytes before the mark is freed. The log is never renamed or shortened, so an
/// appender needs no lock and every append is read by the fold after it: a fold that dies before
/// writing `stats` leaves the old mark, and one that dies after it the new one. Logs taken by
/// older versions (which renamed the log) are added beyond the bytes `stats` names, named in
/// `stats` with their size, and removed after it is written. No count is lost or counted twice;
/// a use time applied twice is the same time.
template <class S, class L>
void IndexCache<S, L>::fold_locked(bool zero) {
    const std::optional<std::string> text = storage_.read("stats");
    const std::string_view stats_text = text ? std::string_view(*text) : std::string_view();
    CacheStats sum = text && !zero ? CacheStats::decode(*text) : CacheStats{};
    std::map<std::string, std::int64_t, std::less<>> used;
    const UnfoldedLogs read = read_unfolded_logs(stats_text, [&](const detail::StatsLogLine& l) {
        if (!zero) sum += l.counts;
        for (const std::string_view key : l.used) note_use(used, key, l.at_ns);
    });
    if (read.taken.empty() && read.mark == detail::stats_log_mark(stats_text) && !zero) return;
    for (const auto& [key, at_ns] : used) {  // a key is an entry's or a composite's
        storage_.touch("entries/" + key, at_ns);
        storage_.touch("composites/" + key, at_ns);
    }
    std::string records = detail::stats_log_mark_line(read.mark);
    for (const auto& [name, size] : read.taken) records += "folded " + name + " " + std::to_string(size) + "\n";
    storage_.write("stats", sum.encode() + records);
    for (const auto& taken : read.taken) storage_.remove(taken.first);
    storage_.discard_log(detail::stats_log, read.mark);
}

/// Keeps the latest use of `key`.
template <class S, class L>
void IndexCache<S, L>::note_use(std::map<std::string, std::int64_t, std::less<>>& used, std::string_view key,
                                std::int64_t at_ns) {
    const auto it = used.find(key);
    if (it == used.end()) used.emplace(std::string(key), at_ns);
    else it->second = std::max(it->second, at_ns);
}

/// The last use of each entry the statistics logs record (not folded yet).
template <class S, class L>
std::map<std::string, std::int64_t, std::less<>> IndexCache<S, L>::logged_uses() const {
    std::map<std::string, std::int64_t, std::less<>> used;
    const std::optional<std::string> text = storage_.read("stats");
    (void)read_unfolded_logs(text ? std::string_view(*text) : std::string_view(), [&](const detail::StatsLogLine& l) {
        for (const std::string_view key : l.used) note_use(used, key, l.at_ns);
    });
    return used;
}

/// Folds the statistics log unless another process holds the namespace lock (it is folding, or
/// zeroing); a failure is logged, never thrown: statistics are not worth failing a publish for.
template <class S, class L>
void IndexCache<S, L>::fold_quietly() {
    if constexpr (StorageTraits<S>::appends) {
        try {
            Guard g = LockTraits<L>::try_lock(locks_, names_.namespace_lock, LockMode::exclusive);
            if (g.owns()) fold_locked(/*zero=*/false);
        } catch (const std::exception& e) {
            log(LogLevel::warning, std::string("the cache's statistics log was not folded: ") + e.what());
        }
    }
}

}  // namespace skc
