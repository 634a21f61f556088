// skc/detail/gather_round.hpp: the pieces every multi-rank gather shares (LocalFsGather,
// skc::MpiGather): the backoff of a bounded wait, the union of the ranks' selected ops, and the
// outcome a leader publishes.
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "hash.hpp"
#include "names.hpp"
#include "text.hpp"
#include "../error.hpp"
#include "../layout.hpp"
#include "../op_info_io.hpp"
#include "../session_files.hpp"
#include "../policy/gather.hpp"
#include "../value.hpp"

namespace skc {

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

/// "3", "3 and 5", "3, 5 and 7".
inline std::string list_ranks(const std::vector<std::size_t>& ranks) {
    std::string s;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
        if (i > 0) s += i + 1 == ranks.size() ? " and " : ", ";
        s += std::to_string(ranks[i]);
    }
    return s;
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
    auto text = [&](std::string_view k) { return string_member(outcome, k); };
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

}  // namespace skc
