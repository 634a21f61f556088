// skc/cache_format.hpp: the files of a cache namespace, written and read: an entry
// (`entries/<key>`, a short text with its own checksum line naming the package's size and
// checksum), the op list beside it (`oplists/<key>`), the statistics log (`stats.log`, one line per
// process) and the folded `stats`, the composite entries (`composites/<key>`, the packages of other
// entries that hold a key's ops together) and the manifest `<namespace>.json`. policy/cache.hpp uses them;
// docs/cache.md ("On disk", "Statistics") describes each.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <unistd.h>

#include "cache_key.hpp"
#include "detail/hash.hpp"
#include "detail/names.hpp"
#include "detail/text.hpp"
#include "policy/storage.hpp"

namespace skc {

/// One cache entry: what is stored for a key.
struct CacheEntry {
    std::string key;      // hex digest of the key
    std::string package;  // storage name of the package
    std::uint64_t size = 0;
    Digest checksum;  // MurmurHash3_x64_128 of the package bytes: the entry's package is this content
    std::int64_t created_unix = 0;
    std::int64_t compile_ns = 0;  // how long the compile took (what a hit saves)
    std::uint64_t ops = 0;
    std::vector<std::pair<std::string, std::string>> components;
    std::int64_t last_used_ns = 0;  // the entry object's modification time; not stored in the text
};

/// A package a composite entry uses: another entry's key, and its package's size and checksum
/// when the composite was written.
struct CachePart {
    std::string key;
    std::uint64_t size = 0;
    Digest checksum;
};

/// A composite entry (`composites/<key>`): the op set of `key` is held by the packages of other
/// entries together (a cover: docs/cache.md), installed in this order. It has no package itself.
struct CompositeEntry {
    std::string key;
    std::vector<CachePart> parts;
    std::int64_t created_unix = 0;
    std::int64_t compile_ns = 0;    // the parts' compile times: what a hit saves
    std::uint64_t ops = 0;          // the key's ops (the parts' together)
    std::int64_t last_used_ns = 0;  // the object's modification time; not stored in the text
};

namespace detail {

inline std::string escape_line(std::string_view s) {
    std::string out;
    for (char c : s) {
        if (c == '\\') out += "\\\\";
        else if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else out += c;
    }
    return out;
}

inline std::string unescape_line(std::string_view s) {
    if (s.find('\\') == std::string_view::npos) return std::string(s);
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 1 < s.size()) {
            const char n = s[++i];
            out += n == 'n' ? '\n' : n == 'r' ? '\r' : n;
        } else {
            out += s[i];
        }
    }
    return out;
}

inline constexpr std::string_view entry_magic = "skc-cache-entry 1\n";

/// Ends `t` with its check line: `check <hash of everything before it>`.
inline void append_check_line(std::string& t) { t += "check " + hash_bytes(t).hex() + "\n"; }

inline std::string encode_entry(const CacheEntry& e) {
    std::string t(entry_magic);
    t += "key " + e.key + "\n";
    t += "package " + escape_line(e.package) + "\n";
    t += "size " + std::to_string(e.size) + "\n";
    t += "checksum " + e.checksum.hex() + "\n";
    t += "created_unix " + std::to_string(e.created_unix) + "\n";
    t += "compile_ns " + std::to_string(e.compile_ns) + "\n";
    t += "ops " + std::to_string(e.ops) + "\n";
    for (const auto& [n, v] : e.components) t += "component " + escape_line(n) + "=" + escape_line(v) + "\n";
    append_check_line(t);
    return t;
}

inline bool parse_i64(std::string_view s, std::int64_t& out) {
    const bool neg = !s.empty() && s.front() == '-';
    std::uint64_t u = 0;
    if (!parse_u64(neg ? s.substr(1) : s, u) || u > static_cast<std::uint64_t>(INT64_MAX)) return false;
    out = neg ? -static_cast<std::int64_t>(u) : static_cast<std::int64_t>(u);
    return true;
}

inline bool parse_hex_digest(std::string_view s, Digest& out) {
    if (s.size() != 32) return false;
    for (std::size_t i = 0; i < 16; ++i) {
        int v = 0;
        for (int k = 0; k < 2; ++k) {
            const char c = s[2 * i + static_cast<std::size_t>(k)];
            const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0) return false;
            v = v * 16 + d;
        }
        out.bytes[i] = static_cast<unsigned char>(v);
    }
    return true;
}

/// Parses an entry; nullopt when it is truncated, altered or not an entry at all. Without
/// `with_components` the key components are checked (the check line covers them) but not copied:
/// lookups do not need them.
/// The lines between `magic` and the check line of `t`, when `t` starts with `magic`, ends with a
/// check line and that line's hash matches; nullopt for a truncated, altered or foreign text.
inline std::optional<std::string_view> checked_body(std::string_view t, std::string_view magic) {
    const std::size_t check_at = t.rfind("check ");
    Digest check;
    if (t.substr(0, magic.size()) != magic || check_at == std::string_view::npos || check_at < magic.size() ||
        t[check_at - 1] != '\n' || t.back() != '\n' ||
        !parse_hex_digest(t.substr(check_at + 6, t.size() - check_at - 7), check) ||
        hash_bytes(t.substr(0, check_at)) != check)
        return std::nullopt;
    return t.substr(magic.size(), check_at - magic.size());
}

/// Calls `field(name, value)` for each `<name> <value>` line of `body` (checked_body()); false when a
/// line has no space or `field` returns false for one.
template <class Field>
bool for_each_field(std::string_view body, Field&& field) {
    for (std::size_t pos = 0; pos < body.size();) {
        const std::size_t nl = body.find('\n', pos);
        const std::string_view line = body.substr(pos, nl - pos);
        pos = nl + 1;
        const std::size_t sp = line.find(' ');
        if (sp == std::string_view::npos || !field(line.substr(0, sp), line.substr(sp + 1))) return false;
    }
    return true;
}

inline std::optional<CacheEntry> decode_entry(std::string_view t, bool with_components = true) {
    const std::optional<std::string_view> body = checked_body(t, entry_magic);
    if (!body) return std::nullopt;
    CacheEntry e;
    bool have_key = false, have_package = false, have_checksum = false;
    const bool read = for_each_field(*body, [&](std::string_view name, std::string_view value) {
        bool ok = true;
        if (name == "key") {
            Digest d;
            ok = parse_hex_digest(value, d);
            e.key = std::string(value);
            have_key = true;
        } else if (name == "package") {
            e.package = unescape_line(value);
            have_package = true;
        } else if (name == "size") ok = parse_u64(value, e.size);
        else if (name == "checksum") ok = have_checksum = parse_hex_digest(value, e.checksum);
        else if (name == "created_unix") ok = parse_i64(value, e.created_unix);
        else if (name == "compile_ns") ok = parse_i64(value, e.compile_ns);
        else if (name == "ops") ok = parse_u64(value, e.ops);
        else if (name == "component" && with_components) {
            const std::size_t eq = value.find('=');
            ok = eq != std::string_view::npos;
            if (ok) e.components.emplace_back(unescape_line(value.substr(0, eq)), unescape_line(value.substr(eq + 1)));
        }
        return ok;  // unknown lines are allowed: a newer writer may add fields
    });
    if (!read || !have_key || !have_package || !have_checksum) return std::nullopt;
    return e;
}

inline constexpr std::string_view composite_magic = "skc-cache-composite 1\n";

/// A composite: `key`, `created_unix`, `compile_ns`, `ops`, one `part <key> <size> <checksum>`
/// line per package in install order, then a check line as in an entry.
inline std::string encode_composite(const CompositeEntry& c) {
    std::string t(composite_magic);
    t += "key " + c.key + "\n";
    t += "created_unix " + std::to_string(c.created_unix) + "\n";
    t += "compile_ns " + std::to_string(c.compile_ns) + "\n";
    t += "ops " + std::to_string(c.ops) + "\n";
    for (const CachePart& p : c.parts)
        t += "part " + p.key + " " + std::to_string(p.size) + " " + p.checksum.hex() + "\n";
    append_check_line(t);
    return t;
}

/// Parses a composite; nullopt when it is truncated, altered, has no part, or is not one.
inline std::optional<CompositeEntry> decode_composite(std::string_view t) {
    const std::optional<std::string_view> body = checked_body(t, composite_magic);
    if (!body) return std::nullopt;
    CompositeEntry c;
    Digest d;
    const bool read = for_each_field(*body, [&](std::string_view name, std::string_view value) {
        bool ok = true;
        if (name == "key") {
            ok = parse_hex_digest(value, d);
            c.key = std::string(value);
        } else if (name == "created_unix") ok = parse_i64(value, c.created_unix);
        else if (name == "compile_ns") ok = parse_i64(value, c.compile_ns);
        else if (name == "ops") ok = parse_u64(value, c.ops);
        else if (name == "part") {
            const std::size_t a = value.find(' '), b = value.rfind(' ');
            CachePart p;
            ok = a == 32 && b > a && parse_hex_digest(value.substr(0, a), d) &&
                 parse_u64(value.substr(a + 1, b - a - 1), p.size) && parse_hex_digest(value.substr(b + 1), p.checksum);
            p.key = std::string(value.substr(0, a));
            c.parts.push_back(std::move(p));
        }
        return ok;
    });
    if (!read || c.key.empty() || c.parts.empty()) return std::nullopt;
    return c;
}

inline constexpr std::string_view op_list_magic = "skc-cache-ops 1\n";

/// An entry's op list: one line `<digest> <name>` per op, then a check line as in an entry.
inline std::string encode_op_list(const std::vector<KeyOp>& ops) {
    std::string t(op_list_magic);
    for (const KeyOp& op : ops) t += op.digest.hex() + " " + escape_line(op.name) + "\n";
    append_check_line(t);
    return t;
}

inline std::optional<std::vector<KeyOp>> decode_op_list(std::string_view t) {
    const std::optional<std::string_view> body = checked_body(t, op_list_magic);
    if (!body) return std::nullopt;
    std::vector<KeyOp> out;
    for (std::size_t pos = 0; pos < body->size();) {
        const std::size_t nl = body->find('\n', pos);
        const std::string_view line = body->substr(pos, nl - pos);
        pos = nl + 1;
        KeyOp op;
        if (line.size() < 34 || line[32] != ' ' || !parse_hex_digest(line.substr(0, 32), op.digest))
            return std::nullopt;
        op.name = unescape_line(line.substr(33));
        out.push_back(std::move(op));
    }
    return out;
}

/// This machine's name for the cache's per-node memos: the host name with anything but letters,
/// digits, '-', '_' and '.' replaced by '_' ("node" when there is none).
inline const std::string& node_name() {
    static const std::string name = [] {
        char buf[256] = {};
        std::string n;
        if (::gethostname(buf, sizeof buf - 1) == 0) n = buf;
        for (char& c : n)
            if (!is_name_char(c)) c = '_';
        if (n.empty() || n.front() == '.') n = "node" + n;
        return n.substr(0, 64);
    }();
    return name;
}

inline Digest checksum_of(const std::function<bool(const ChunkFn&)>& read) {
    Hasher h;
    if (!read([&](std::string_view c) { h.update(c); })) return Digest{};
    return h.digest();
}

}  // namespace detail

// ---- statistics ------------------------------------------------------------------------------------

struct CacheStats {
    std::uint64_t hits = 0;
    std::uint64_t misses = 0;
    std::uint64_t corrupt = 0;  // entries found bad (each also a miss) and removed
    std::uint64_t evictions = 0;
    std::uint64_t compiles = 0;  // compiles this cache ran (single flight: at most one per key)
    std::uint64_t waits = 0;     // hits that first waited for another process's compile
    std::int64_t lock_wait_ns = 0;
    std::int64_t compile_time_saved_ns = 0;  // the recorded compile time of every hit
    // The remote tier (policy/remote.hpp), when there is one: lookups there after a local miss.
    std::uint64_t remote_hits = 0;            // packages downloaded (checked, stored locally)
    std::uint64_t remote_misses = 0;          // not there (or evicted, or refused: see remote_errors)
    std::uint64_t remote_uploads = 0;         // packages this cache compiled and uploaded
    std::uint64_t remote_upload_bytes = 0;    // their bytes
    std::uint64_t remote_download_bytes = 0;  // the bytes of the packages downloaded
    std::uint64_t remote_errors = 0;          // faults: the store failed, or a package was refused
    // Covers (docs/cache.md): sets answered by the packages of several entries.
    std::uint64_t composite_hits = 0;  // hits on a composite entry (each also one of `hits`)
    std::uint64_t ops_compiled = 0;    // ops the compiles of sets looked up here compiled
    std::uint64_t ops_reused = 0;      // ops of those sets that cached packages held

    /// Adds counts, saturating at the types' limits (a hostile or huge `stats` file must not wrap
    /// them, nor be undefined behaviour).
    CacheStats& operator+=(const CacheStats& o) {
        const auto add = [](auto& a, auto b) {
            using T = std::remove_reference_t<decltype(a)>;
            if (__builtin_add_overflow(a, b, &a))
                a = b > 0 ? std::numeric_limits<T>::max() : std::numeric_limits<T>::min();
        };
        add(hits, o.hits);
        add(misses, o.misses);
        add(corrupt, o.corrupt);
        add(evictions, o.evictions);
        add(compiles, o.compiles);
        add(waits, o.waits);
        add(lock_wait_ns, o.lock_wait_ns);
        add(compile_time_saved_ns, o.compile_time_saved_ns);
        add(remote_hits, o.remote_hits);
        add(remote_misses, o.remote_misses);
        add(remote_uploads, o.remote_uploads);
        add(remote_upload_bytes, o.remote_upload_bytes);
        add(remote_download_bytes, o.remote_download_bytes);
        add(remote_errors, o.remote_errors);
        add(composite_hits, o.composite_hits);
        add(ops_compiled, o.ops_compiled);
        add(ops_reused, o.ops_reused);
        return *this;
    }
    friend bool operator==(const CacheStats&, const CacheStats&) = default;

    /// Calls `f(name, counter)` for each counter, in the order encode() writes them (`s` is a
    /// CacheStats, const or not).
    template <class Self, class F>
    static void visit(Self& s, F&& f) {
        f(std::string_view("hits"), s.hits);
        f(std::string_view("misses"), s.misses);
        f(std::string_view("corrupt"), s.corrupt);
        f(std::string_view("evictions"), s.evictions);
        f(std::string_view("compiles"), s.compiles);
        f(std::string_view("waits"), s.waits);
        f(std::string_view("lock_wait_ns"), s.lock_wait_ns);
        f(std::string_view("compile_time_saved_ns"), s.compile_time_saved_ns);
        f(std::string_view("remote_hits"), s.remote_hits);
        f(std::string_view("remote_misses"), s.remote_misses);
        f(std::string_view("remote_uploads"), s.remote_uploads);
        f(std::string_view("remote_upload_bytes"), s.remote_upload_bytes);
        f(std::string_view("remote_download_bytes"), s.remote_download_bytes);
        f(std::string_view("remote_errors"), s.remote_errors);
        f(std::string_view("composite_hits"), s.composite_hits);
        f(std::string_view("ops_compiled"), s.ops_compiled);
        f(std::string_view("ops_reused"), s.ops_reused);
    }

    /// Sets counter `name` from its text `value`; false when `value` is not a number of its type.
    /// A name that is no counter is left alone (true): a later version may add counters.
    bool set(std::string_view name, std::string_view value) {
        bool ok = true;
        visit(*this, [&](std::string_view n, auto& counter) {
            if (n != name) return;
            if constexpr (std::is_signed_v<std::remove_reference_t<decltype(counter)>>) {
                std::int64_t v = 0;
                if ((ok = detail::parse_i64(value, v))) counter = v;
            } else {
                std::uint64_t v = 0;
                if ((ok = detail::parse_u64(value, v))) counter = v;
            }
        });
        return ok;
    }

    [[nodiscard]] std::string encode() const {
        std::string out;
        visit(*this, [&](std::string_view name, auto counter) {
            out += name;
            out += ' ';
            out += std::to_string(counter);
            out += '\n';
        });
        return out;
    }
    /// Reads what encode() wrote; unreadable lines count as zero (statistics are not worth failing for).
    static CacheStats decode(std::string_view t) {
        CacheStats s;
        std::size_t pos = 0;
        while (pos < t.size()) {
            std::size_t nl = t.find('\n', pos);
            if (nl == std::string_view::npos) nl = t.size();
            const std::string_view line = t.substr(pos, nl - pos);
            pos = nl + 1;
            const std::size_t sp = line.find(' ');
            if (sp != std::string_view::npos) s.set(line.substr(0, sp), line.substr(sp + 1));
        }
        return s;
    }
};

namespace detail {

/// The statistics log of a namespace: each process appends one line with its counts when it
/// flushes, and folds merge the log into `stats` off the lookup path. The log only grows: a fold
/// records in `stats` where it stopped reading (stats_log_mark) and frees the space of what it read
/// (Storage::discard_log). Versions before 2026-12 renamed the log to `stats.log.<pid>.<ns>`
/// (taken_stats_log) to fold it; a fold adds and removes such logs too.
inline constexpr std::string_view stats_log = "stats.log";
inline constexpr std::string_view taken_stats_log = "stats.log.";
/// The appender whose line takes the log past a multiple of this size folds it (if no other
/// process is folding): a fold fsyncs `stats`, so it is rare, and reading this much takes
/// milliseconds.
inline constexpr std::uint64_t stats_log_fold_bytes = 1024 * 1024;

/// Whether an append of `bytes` that ended the log at `end` took it past a multiple of
/// stats_log_fold_bytes.
constexpr bool stats_log_fold_due(std::uint64_t end, std::uint64_t bytes) noexcept {
    return end / stats_log_fold_bytes != (end - std::min(end, bytes)) / stats_log_fold_bytes;
}

/// Where the fold that wrote `stats` stopped reading the log (its `log stats.log <id> <offset>`
/// line); {0, 0} when it names none: the log is read from its start.
inline LogMark stats_log_mark(std::string_view stats) {
    constexpr std::string_view tag = "log stats.log ";
    for (std::size_t pos = 0; pos < stats.size();) {
        std::size_t nl = stats.find('\n', pos);
        if (nl == std::string_view::npos) nl = stats.size();
        const std::string_view line = stats.substr(pos, nl - pos);
        pos = nl + 1;
        if (line.substr(0, tag.size()) != tag) continue;
        const std::string_view rest = line.substr(tag.size());
        const std::size_t sp = rest.find(' ');
        LogMark m;
        if (sp != std::string_view::npos && parse_u64(rest.substr(0, sp), m.id) &&
            parse_u64(rest.substr(sp + 1), m.offset))
            return m;
    }
    return {};
}

/// The line of `stats` that records mark `m` (stats_log_mark reads it).
inline std::string stats_log_mark_line(const LogMark& m) {
    return "log stats.log " + std::to_string(m.id) + " " + std::to_string(m.offset) + "\n";
}

/// Where a reader of `tail` stops: after its last line feed (a line not finished yet, by a writer
/// still at it, is read again from there).
inline LogMark stats_log_read_to(const LogTail& tail) {
    const std::size_t nl = tail.data.rfind('\n');
    return LogMark{tail.id, tail.from + (nl == std::string::npos ? 0 : nl + 1)};
}

/// One line of the statistics log: a process's counts, and the entries it hit, at a time.
struct StatsLogLine {
    CacheStats counts;
    std::vector<std::string_view> used;  // keys of the entries hit (in the text parsed)
    std::int64_t at_ns = 0;              // when they were last used (ns since the epoch)
};

/// A line of the statistics log: `skc-stats`, the counters that are not zero as name-value pairs,
/// `used <key>` for each entry hit and `at <ns>`, then `check` with the hash of what precedes it. It
/// starts with a line feed as well as ending with one: a line a writer left unfinished (the disk
/// filled) ends there, is no whole line (for_each_stats_log_line) and cannot spoil the next one.
inline std::string stats_log_line(const CacheStats& s, const std::vector<std::array<char, 32>>& used,
                                  std::int64_t at_ns) {
    std::string body = "skc-stats";
    body.reserve(96 + 38 * used.size());
    CacheStats::visit(s, [&](std::string_view name, auto counter) {
        if (counter == 0) return;
        body += ' ';
        body += name;
        body += ' ';
        body += std::to_string(counter);
    });
    for (const auto& key : used) {
        body += " used ";
        body.append(key.data(), key.size());
    }
    if (!used.empty()) {
        body += " at ";
        body += std::to_string(at_ns);
    }
    const std::string check = hash_bytes(body).hex();
    std::string line;
    line.reserve(body.size() + check.size() + 9);
    line += '\n';
    line += body;
    line += " check ";
    line += check;
    line += '\n';
    return line;
}

/// Reads a line of the log (without its line feeds) into `l`; false for anything else. The keys
/// it names are views of `line`.
inline bool parse_stats_log_line(std::string_view line, StatsLogLine& l) {
    const std::size_t at = line.rfind(" check ");
    Digest check;
    if (at == std::string_view::npos || !parse_hex_digest(line.substr(at + 7), check) ||
        hash_bytes(line.substr(0, at)) != check)
        return false;
    std::string_view rest = line.substr(0, at);
    if (rest.substr(0, 9) != "skc-stats") return false;
    rest.remove_prefix(9);
    l.counts = CacheStats{};
    l.used.clear();  // keeps its capacity: a fold reads thousands of lines
    l.at_ns = 0;
    while (!rest.empty()) {  // " <name> <value>" pairs
        const std::size_t name_end = rest.find(' ', 1);
        if (rest.front() != ' ' || name_end == std::string_view::npos) return false;
        const std::string_view name = rest.substr(1, name_end - 1);
        rest.remove_prefix(name_end + 1);
        const std::string_view value = rest.substr(0, rest.find(' '));
        rest.remove_prefix(value.size());
        Digest key;
        if (name == "used") {
            if (!parse_hex_digest(value, key)) return false;
            l.used.push_back(value);
        } else if (name == "at") {
            if (!parse_i64(value, l.at_ns)) return false;
        } else if (!l.counts.set(name, value)) {
            return false;
        }
    }
    return true;
}

/// The whole lines of log text `log` from byte `from` on, each given to `fn`. A line is whole when
/// it passes its check and its line feed is its own: the log ends there, or the next line starts
/// (with its own line feed). A line a writer wrote only part of (the disk filled) fails, even when
/// only its last line feed is missing and the next line's first one follows: so the writer may
/// append its counts again. A final line without its line feed is skipped too (being written).
template <class Fn>
void for_each_stats_log_line(std::string_view log, std::uint64_t from, Fn&& fn) {
    if (from >= log.size()) return;
    log.remove_prefix(from);
    StatsLogLine line;
    for (std::size_t pos = 0;;) {
        const std::size_t nl = log.find('\n', pos);
        if (nl == std::string_view::npos) break;
        const bool own_line_feed = nl + 1 == log.size() || log[nl + 1] == '\n';
        if (nl > pos && own_line_feed && parse_stats_log_line(log.substr(pos, nl - pos), line)) fn(line);
        pos = nl + 1;
    }
}

/// The sum of the counts of log text `log` from byte `from` on.
inline CacheStats sum_stats_log(std::string_view log, std::uint64_t from = 0) {
    CacheStats s;
    for_each_stats_log_line(log, from, [&](const StatsLogLine& l) { s += l.counts; });
    return s;
}

/// The logs the fold that wrote `stats` took, as it recorded them there (`folded <name> <bytes>`):
/// each name with how many of its bytes `stats` already counts.
inline std::map<std::string, std::uint64_t, std::less<>> folded_stats_logs(std::string_view stats) {
    std::map<std::string, std::uint64_t, std::less<>> out;
    for (std::size_t pos = 0; pos < stats.size();) {
        std::size_t nl = stats.find('\n', pos);
        if (nl == std::string_view::npos) nl = stats.size();
        const std::string_view line = stats.substr(pos, nl - pos);
        pos = nl + 1;
        if (line.substr(0, 7) != "folded ") continue;
        const std::size_t sp = line.find(' ', 7);
        std::uint64_t bytes = 0;
        if (sp == std::string_view::npos || !parse_u64(line.substr(sp + 1), bytes)) continue;
        out[std::string(line.substr(7, sp - 7))] = bytes;
    }
    return out;
}

/// The manifest `<stem>.json` beside a namespace folder: where its entries and packages are.
inline std::string cache_manifest(std::string_view stem) {
    std::string quoted;  // the stem as a JSON string body
    for (char c : stem) {
        if (c == '"' || c == '\\') quoted += '\\';
        if (static_cast<unsigned char>(c) < 0x20) continue;
        quoted += c;
    }
    return "{\n    \"format\": \"skc-cache\",\n    \"version\": 1,\n    \"entries\": \"" + quoted +
           "/entries\",\n    \"packages\": \"" + quoted +
           "/packages\",\n    \"note\": \"one file per entry; list them with: skc cache ls\"\n}\n";
}

}  // namespace detail

}  // namespace skc
