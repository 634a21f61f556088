// skc/detail/isolate.hpp: when the kernel compiler fails on a set of ops, finding the ops at fault
// (docs/cache.md, "One failing op costs only itself"), so that the host compiles the rest.
//
// A failure is the ops' only when the compiler ended by itself with a failure (Errc::compile_failed);
// a timeout, a signal (Errc::compiler_killed) or anything else is never blamed on an op. The ops at
// fault are those the compiler names in `failed_ops.json` in its output folder (the format below),
// checked against the set; a compiler that names none is bisected: both halves of a failing part
// are compiled on their own (op info files linked into a trial folder), down to single ops, so one
// bad op among n costs at most 2 log2(n) trial compiles and every op blamed failed alone. Nothing is
// blamed, and the compiler's error stands, when every op would be (a compiler that fails on
// everything is broken, not the ops), when a trial fails otherwise (timeout, signal, a full disk),
// or after 2 log2(n) + 4 trials (failures that are not one op's each). The host remembers the ops
// blamed only once the rest has compiled.
//
// `<output_dir>/failed_ops.json`, written by the compiler when it fails (optional):
//
//     {"format": "skc-failed-ops/1", "ops": [{"file": "<op info file name>", "message": "<why>"}]}
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../compile_report.hpp"
#include "../error.hpp"
#include "../known_failures.hpp"
#include "../layout.hpp"
#include "../log.hpp"
#include "../op_info_io.hpp"
#include "../policy/gather.hpp"
#include "../policy/invoker.hpp"
#include "hash.hpp"
#include "unique_fd.hpp"

namespace skc::detail {

/// The compiler's list of the op info files it failed on.
inline constexpr std::string_view failed_ops_file = "failed_ops.json";
inline constexpr std::string_view failed_ops_format = "skc-failed-ops/1";

/// Thrown by the host's compile step when the compiler failed because of some ops of the set: the
/// host remembers them and compiles the rest.
struct OpsFailed {
    std::vector<FailedOp> ops;
    std::size_t compiles = 0;  // extra compiles spent finding them
    std::exception_ptr error;  // the compiler's error on the whole set
};

/// Whether `e` may be the ops' fault (the compiler ended by itself and failed).
inline bool may_be_ops_fault(const Error& e) noexcept { return e.code() == Errc::compile_failed; }

/// A compiler's message cut to its first `max` bytes (on a line boundary when there is one).
inline std::string first_part(std::string text, std::size_t max = 2000) {
    if (text.size() <= max) return text;
    const std::size_t nl = text.rfind('\n', max);
    text.resize(nl != std::string::npos && nl > max / 2 ? nl : max);
    return text + "\n...";
}

/// The ops of `set` that `failed_ops.json` in `output_dir` names (none when it is absent, unreadable
/// or names no op of the set).
inline std::vector<FailedOp> named_failures(const std::filesystem::path& output_dir, const GatheredSet& set,
                                            const std::vector<std::string>& op_types) {
    std::vector<FailedOp> out;
    const std::filesystem::path file = output_dir / failed_ops_file;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) return out;
    try {
        const Value doc = parse_json(read_file(file, std::size_t{16} << 20));
        const Value* fmt = doc.find("format");
        const Value* ops = doc.find("ops");
        if (!fmt || !fmt->is_string() || fmt->as_string() != failed_ops_format || !ops || !ops->is_array()) return out;
        for (const Value& o : ops->as_array()) {
            const auto at = std::find(set.names.begin(), set.names.end(), string_member(o, "file"));
            if (at == set.names.end()) continue;
            const auto i = static_cast<std::size_t>(at - set.names.begin());
            if (std::any_of(out.begin(), out.end(), [&](const FailedOp& k) { return k.digest == set.digests[i]; }))
                continue;
            out.push_back(FailedOp{set.digests[i], op_types[i], set.names[i], first_part(string_member(o, "message"))});
        }
    } catch (const Error&) {
        out.clear();  // not a list we can trust: bisect instead
    }
    return out;
}

/// The files `names` of folder `from` in folder `to` (existing): hard links, copies where a link
/// cannot be made (another file system).
inline void link_or_copy(const std::filesystem::path& from, const std::filesystem::path& to,
                         std::span<const std::string> names) {
    for (const std::string& n : names) {
        std::error_code ec;
        std::filesystem::create_hard_link(from / n, to / n, ec);
        if (ec) std::filesystem::copy_file(from / n, to / n);
    }
}

/// `set` without the ops `drop`, its files linked into `dir` when it is filled (materialize), after
/// `set`'s own folder is.
inline GatheredSet without(const GatheredSet& set, const std::unordered_set<Digest, DigestHash>& drop,
                           std::filesystem::path dir) {
    GatheredSet out;
    out.dir = std::move(dir);
    out.ranks = set.ranks;
    for (std::size_t i = 0; i < set.digests.size(); ++i) {
        if (drop.count(set.digests[i]) != 0) continue;
        out.digests.push_back(set.digests[i]);
        if (i < set.names.size()) out.names.push_back(set.names[i]);
    }
    out.materialize = [fill = set.materialize, from = set.dir, to = out.dir, names = out.names] {
        if (fill) fill();
        std::filesystem::remove_all(to);
        std::filesystem::create_directories(to);
        link_or_copy(from, to, names);
    };
    return out;
}

/// Finds the ops of `set` at fault for `error`, the compiler's failure on all of them with `req`:
/// those `failed_ops.json` names, else by bisection with trial compiles under `work` (removed
/// after). `say(done, most)` is told before each trial compile. Returns nothing when no op is at
/// fault (a trial that fails otherwise throws its error).
template <class Invoker>
std::optional<OpsFailed> find_failed_ops(Invoker& invoker, const CompileRequest& req, const GatheredSet& set,
                                         const Error& error, const std::filesystem::path& work,
                                         const std::function<void(std::size_t, std::size_t)>& say) {
    if (!may_be_ops_fault(error) || set.digests.empty()) return std::nullopt;
    std::vector<std::string> op_types(set.digests.size());
    for (std::size_t i = 0; i < set.names.size() && i < op_types.size(); ++i) {
        try {
            op_types[i] = read_op_info(set.dir / set.names[i]).op_type;
        } catch (const Error&) {  // a file that cannot be read stays nameless
        }
    }
    OpsFailed found;
    found.error = std::make_exception_ptr(error);
    found.ops = named_failures(req.output_dir, set, op_types);
    if (found.ops.size() == set.digests.size()) return std::nullopt;  // all of them: the compiler is at fault
    if (!found.ops.empty()) return found;
    if (set.names.size() != set.digests.size() || set.digests.size() == 1) return std::nullopt;

    // Bisection: both halves of each failing part are compiled, so every op blamed failed alone.
    const auto levels = static_cast<std::size_t>(std::ceil(std::log2(static_cast<double>(set.digests.size()))));
    const std::size_t most = 2 * levels + 4;
    std::size_t trial = 0;
    const RemovedAtExit trials(work);
    // Whether the ops [first, last) compile; fills `message` with the failure's.
    auto fails = [&](std::size_t first, std::size_t last, std::string& message) {
        const std::filesystem::path dir = work / std::to_string(++trial);
        CompileRequest r = req;
        r.json_dir = dir / "ops";
        r.output_dir = dir / "out";
        r.on_progress = nullptr;
        std::filesystem::create_directories(r.json_dir);
        std::filesystem::create_directories(r.output_dir);
        link_or_copy(set.dir, r.json_dir, std::span(set.names).subspan(first, last - first));
        if (say) say(trial, most);
        try {
            (void)invoker.compile(r);
            return false;
        } catch (const Error& e) {
            if (!may_be_ops_fault(e)) throw;
            message = first_part(e.message());
            return true;
        }
    };
    std::vector<std::pair<std::size_t, std::size_t>> failing{{0, set.digests.size()}};
    try {
        while (!failing.empty()) {
            const auto [first, last] = failing.back();
            failing.pop_back();
            const std::size_t mid = first + (last - first) / 2;
            for (const auto& [a, b] : {std::pair{first, mid}, std::pair{mid, last}}) {
                if (trial == most) return std::nullopt;  // not one op's failure each
                std::string message;
                if (!fails(a, b, message)) continue;
                if (b - a == 1) found.ops.push_back(FailedOp{set.digests[a], op_types[a], set.names[a], message});
                else failing.emplace_back(a, b);
            }
        }
    } catch (const Error&) {
        return std::nullopt;  // a trial failed otherwise: the first error stands
    } catch (const std::filesystem::filesystem_error&) {
        return std::nullopt;  // no room for a trial: the same
    }
    found.compiles = trial;
    if (found.ops.empty() || found.ops.size() == set.digests.size()) return std::nullopt;
    return found;
}

/// "MatMulV2 (MatMulV2_float_ND_2_3_0.json), ..." for `ops`.
inline std::string name_ops(const std::vector<FailedOp>& ops) {
    std::string s;
    for (const FailedOp& op : ops) {
        if (!s.empty()) s += ", ";
        s += (op.op_type.empty() ? op.digest.hex() : op.op_type) + " (" + op.file + ")";
    }
    return s;
}

/// The gathered `set` without the ops `known` says the compiler fails on (counted in
/// rep.known_failed and named in one warning); its folder, when filled, in `run`.
inline GatheredSet leave_out_known(const KnownFailures& known, const GatheredSet& set, const RunLayout& run,
                                   CompileReport& rep, const LogSink& log) {
    std::vector<FailedOp> left_out;
    std::unordered_set<Digest, DigestHash> drop;
    for (const FailedOp& k : known.list())
        for (std::size_t i = 0; i < set.digests.size(); ++i)
            if (set.digests[i] == k.digest && drop.insert(k.digest).second) {
                left_out.push_back(k);
                if (i < set.names.size()) left_out.back().file = set.names[i];
            }
    if (left_out.empty()) return set;
    rep.known_failed = left_out.size();
    if (log)
        log(LogLevel::warning, std::to_string(left_out.size()) +
                                   " op(s) left out, which the kernel compiler failed on before (`skc cache failures` "
                                   "shows why, `skc cache forget-failures` tries them again): " +
                                   name_ops(left_out));
    return without(set, drop, run.dir() / "without_known_failures");
}

/// After the compiler failed because of `failed.ops`: adds them to `blamed` (for remember_failures
/// once the rest has compiled), counts and names them, and returns `set` without them (its folder,
/// when filled, in `run`).
inline GatheredSet leave_out_failed(const OpsFailed& failed, const GatheredSet& set, const RunLayout& run,
                                    CompileReport& rep, std::vector<FailedOp>& blamed, const LogSink& log) {
    std::unordered_set<Digest, DigestHash> drop;
    for (const FailedOp& op : failed.ops) drop.insert(op.digest);
    blamed.insert(blamed.end(), failed.ops.begin(), failed.ops.end());
    rep.failed += failed.ops.size();
    rep.isolation_compiles += failed.compiles;
    if (log)
        log(LogLevel::warning, "the kernel compiler failed on " + std::to_string(failed.ops.size()) + " of " +
                                   std::to_string(set.digests.size()) + " ops (found with " +
                                   std::to_string(failed.compiles) + " more compiles): " + name_ops(failed.ops) +
                                   "; they are left out and the other " +
                                   std::to_string(set.digests.size() - drop.size()) +
                                   " compiled. The first: " + failed.ops.front().message);
    return without(set, drop, run.dir() / ("without_failed_" + std::to_string(rep.failed)));
}

/// Remembers `blamed` in `known` (a failure to write them is logged: the next run finds them again).
inline void remember_failures(KnownFailures& known, const std::vector<FailedOp>& blamed, const LogSink& log) {
    if (blamed.empty()) return;
    try {
        (void)known.add(blamed);
    } catch (const std::exception& e) {
        if (log) log(LogLevel::warning, std::string("cannot remember the ops the compiler failed on: ") + e.what());
    }
}

}  // namespace skc::detail
