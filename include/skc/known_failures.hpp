// skc/known_failures.hpp: the ops the kernel compiler failed on, remembered in a cache namespace
// (docs/cache.md, "Remembered failures"), so that later runs leave them out without compiling
// them again.
//
// `<cache folder>/<namespace>/known_failures.json`:
//
//     {"format": "skc-known-failures/1", "compiler_fingerprint": "...",
//      "ops": [{"digest": "<32 hex>", "op_type": "MatMulV2", "file": "<op info file name>",
//               "message": "<what the compiler said>"}, ...]}
//
// The list holds only for the compiler whose fingerprint it names: read with another fingerprint it
// is empty, and the next write replaces it. Writers merge under the lock `known_failures` of the
// namespace folder and put the file in place whole (AtomicFile), so two processes that each find a
// failure keep both. A file that cannot be read or parsed counts as empty: a failure is only
// compiled once more.
#pragma once

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "detail/atomic_file.hpp"
#include "detail/hash.hpp"
#include "op_info_io.hpp"
#include "policy/lock.hpp"
#include "value.hpp"

namespace skc {

/// An op the kernel compiler failed on.
struct FailedOp {
    Digest digest;
    std::string op_type;
    std::string file;     // its op info file's name when it failed
    std::string message;  // what the compiler said about it (its first lines)
};

/// The known failures of one cache namespace folder for one compiler fingerprint; an empty folder
/// keeps them in this object only.
class KnownFailures {
public:
    static constexpr std::string_view file_name = "known_failures.json";
    static constexpr std::string_view format = "skc-known-failures/1";

    KnownFailures() = default;
    /// `read_only`: the folder's list is read, and what add() learns is kept in this object only.
    KnownFailures(std::filesystem::path folder, std::string fingerprint, bool read_only = false)
        : folder_(std::move(folder)), fingerprint_(std::move(fingerprint)), read_only_(read_only) {}

    [[nodiscard]] const std::filesystem::path& folder() const noexcept { return folder_; }
    [[nodiscard]] std::filesystem::path file() const { return folder_ / file_name; }

    /// The failures remembered for this fingerprint (read from the folder when there is one).
    [[nodiscard]] std::vector<FailedOp> list() const {
        if (folder_.empty()) return memory_;
        std::vector<FailedOp> all = read(file(), fingerprint_);
        merge(all, memory_);
        return all;
    }

    /// Remembers `ops` beside those already known; returns how many were new.
    std::size_t add(const std::vector<FailedOp>& ops) {
        if (folder_.empty() || read_only_) return merge(memory_, ops);
        std::filesystem::create_directories(folder_);
        FileLock locks(folder_);
        const auto held = detail::lock_waiting(locks, "known_failures", LockMode::exclusive);
        std::vector<FailedOp> all = read(file(), fingerprint_);
        const std::size_t added = merge(all, ops);
        if (added > 0) write(all);
        return added;
    }

    /// Forgets every failure; returns how many were known.
    std::size_t forget() {
        const std::size_t n = list().size();
        memory_.clear();
        if (folder_.empty()) return n;
        std::error_code ec;
        std::filesystem::remove(file(), ec);
        if (ec && ec != std::errc::no_such_file_or_directory)
            throw Error(Errc::io_error, "cannot remove the known failures: " + ec.message(),
                        ErrorContext{file().string(), {}, {}});
        return n;
    }

    /// The file `path` as it is: the fingerprint it holds for and its failures (nothing when it is
    /// missing, unreadable or not such a file).
    struct Stored {
        std::string fingerprint;
        std::vector<FailedOp> ops;
    };
    [[nodiscard]] static std::optional<Stored> load(const std::filesystem::path& path) {
        try {
            std::error_code ec;
            if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
            const Value doc = parse_json(read_file(path, std::size_t{64} << 20));
            const Value* fmt = doc.find("format");
            const Value* fp = doc.find("compiler_fingerprint");
            const Value* ops = doc.find("ops");
            if (!fmt || !fmt->is_string() || fmt->as_string() != format || !fp || !fp->is_string() || !ops ||
                !ops->is_array())
                return std::nullopt;
            Stored out{fp->as_string(), {}};
            for (const Value& o : ops->as_array()) {
                const Value* d = o.find("digest");
                const std::optional<Digest> digest =
                    d && d->is_string() ? Digest::from_hex(d->as_string()) : std::nullopt;
                if (!digest) continue;
                out.ops.push_back(FailedOp{*digest, string_member(o, "op_type"), string_member(o, "file"),
                                           string_member(o, "message")});
            }
            return out;
        } catch (const Error&) {
            return std::nullopt;  // unreadable: the ops are compiled once more, and remembered again
        }
    }

    /// The failures in the file `path` for `fingerprint` (none for another fingerprint, or for a
    /// file that is missing or unreadable).
    [[nodiscard]] static std::vector<FailedOp> read(const std::filesystem::path& path, std::string_view fingerprint) {
        std::optional<Stored> s = load(path);
        if (!s || s->fingerprint != fingerprint) return {};
        return std::move(s->ops);
    }

private:
    static std::size_t merge(std::vector<FailedOp>& into, const std::vector<FailedOp>& ops) {
        std::size_t added = 0;
        for (const FailedOp& op : ops) {
            if (std::any_of(into.begin(), into.end(), [&](const FailedOp& k) { return k.digest == op.digest; }))
                continue;
            into.push_back(op);
            ++added;
        }
        return added;
    }

    void write(const std::vector<FailedOp>& all) const {
        Array ops;
        for (const FailedOp& op : all)
            ops.push_back(Value(Object{{"digest", Value(op.digest.hex())},
                                       {"op_type", Value(op.op_type)},
                                       {"file", Value(op.file)},
                                       {"message", Value(op.message)}}));
        const Value doc(Object{{"format", Value(std::string(format))},
                               {"compiler_fingerprint", Value(fingerprint_)},
                               {"ops", Value(std::move(ops))}});
        detail::AtomicFile f(file());
        f.write(dump_json(doc, 2) + "\n");
        f.commit();
    }

    std::filesystem::path folder_;
    std::string fingerprint_;
    bool read_only_ = false;
    std::vector<FailedOp> memory_;  // without a folder, or read-only: what add() learned
};

}  // namespace skc
