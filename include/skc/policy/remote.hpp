// skc/policy/remote.hpp: the remote tier behind a local cache, for nodes that share no file system.
//
// RemoteTier is what a remote key-value store offers the cache (include/skc/ext/redis.hpp has the
// Redis model, on hiredis): entry records, package chunks, and a lease per key with a fencing token.
// The protocol is the cache's (IndexCache, cache.hpp), so every store gets the same guarantees:
//   lookup   local first; on a local miss the remote entry, its chunks downloaded and checked
//            against the entry's size and checksum, published into the local cache, then used;
//   compile  one per key across nodes: the node that takes the key's lease (SET NX PX, renewed
//            while it compiles) compiles; the others wait for the entry, or for the lease to end
//            (a node that died loses it when it expires), then download or compile;
//   publish  locally, then the chunks (expiring until committed) and last the entry, committed only
//            while the lease still holds this upload's token: readers never see a partial upload,
//            and a node fenced out by an expired lease cannot overwrite the one that took over.
// Any failure of the store (down, unreachable, slow, restarted, evicted keys) falls back to the
// local cache with one warning; it never fails a compile. docs/cache.md, "Several nodes".
//
// The remote is chosen as a policy of StaticKernelCompiler (with_remote<R>): R is constructed from
// a RemoteConfig and gives the RemoteTier (NoRemote: none). The URL comes from the option
// `remote_cache`, else the environment's SKC_REMOTE_CACHE (resolve_remote_config).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../cache_format.hpp"
#include "../detail/hash.hpp"
#include "../detail/text.hpp"
#include "../error.hpp"
#include "../options.hpp"
#include "storage.hpp"

namespace skc {

/// Where the remote tier is and how long to wait for it.
struct RemoteConfig {
    std::string url;         // e.g. redis://[user:password@]host:port[/db]
    bool read_only = false;  // look up and download; never lease, upload or remove
    std::chrono::milliseconds connect_timeout{1000};
    std::chrono::milliseconds command_timeout{2000};  // each command; a large chunk gets more (ext/redis.hpp)
    std::chrono::milliseconds lease_ttl{30000};       // a compiling node renews it every third of this
};

/// A lease on one key, held while compiling it: `token` is the fencing token (strictly increasing
/// across the store), which the commit of the upload checks.
struct RemoteLease {
    std::string ns;   // the cache namespace (CANN-<version>_<device>)
    std::string key;  // the key's hex digest
    std::uint64_t token = 0;
};

/// What a remote store offers the cache. Every member may throw (std::exception) on a fault of the
/// store; the cache then goes on with its local tier for the rest of the process, after one warning.
class RemoteTier {
public:
    virtual ~RemoteTier() = default;

    /// Where the store is, for messages: the URL without its password.
    [[nodiscard]] virtual std::string where() const = 0;
    [[nodiscard]] virtual bool read_only() const = 0;
    /// How long a lease lives unless renewed (a compiling node renews it every third of this).
    [[nodiscard]] virtual std::chrono::milliseconds lease_ttl() const { return RemoteConfig{}.lease_ttl; }

    /// The record of `key` (encode_remote_record), nullopt when there is none.
    virtual std::optional<std::string> get_record(std::string_view ns, std::string_view key) = 0;
    /// Streams chunk `index` of upload `token` of `key` through `fn`; false when it is absent
    /// (evicted, or expired before its upload was committed).
    virtual bool get_chunk(std::string_view ns, std::string_view key, std::uint64_t token, std::uint64_t index,
                           const ChunkFn& fn) = 0;

    /// Takes the lease of `key` for `ttl` when no one holds it (SET NX PX): its token, else nullopt.
    virtual std::optional<std::uint64_t> try_lease(std::string_view ns, std::string_view key,
                                                   std::chrono::milliseconds ttl) = 0;
    /// Extends a lease this process holds; false when it was lost (expired, taken by another).
    virtual bool renew_lease(const RemoteLease& lease, std::chrono::milliseconds ttl) = 0;
    /// Ends a lease this process holds (a lease another took meanwhile is left alone).
    virtual void release_lease(const RemoteLease& lease) = 0;
    /// Whether anyone holds the lease of `key`.
    virtual bool lease_held(std::string_view ns, std::string_view key) = 0;

    /// Stores chunk `index` of the upload of `lease`, expiring after `ttl` unless committed.
    virtual void put_chunk(const RemoteLease& lease, std::uint64_t index, std::string_view bytes,
                           std::chrono::milliseconds ttl) = 0;
    /// Atomically, if the lease still holds `lease.token`: makes chunks [0, chunks) of this upload
    /// permanent, writes `record` as the key's record, and drops the chunks of the record it
    /// replaces. False when fenced out (the lease expired or another holds it) or a chunk is gone.
    virtual bool commit(const RemoteLease& lease, std::uint64_t chunks, std::string_view record) = 0;

    /// The namespaces that hold records, and the keys of the records of one.
    virtual std::vector<std::string> namespaces() = 0;
    virtual std::vector<std::string> keys(std::string_view ns) = 0;
    /// Removes the record of `key` and its chunks.
    virtual void remove(std::string_view ns, std::string_view key) = 0;
};

/// The size of the chunks a package is stored in: far below Redis's 512 MB per value, and small
/// enough that one command stays within a few seconds.
inline constexpr std::uint64_t remote_chunk_bytes = 32ull << 20;
/// How long the chunks of an upload live before it is committed (a node that dies uploading leaves
/// nothing behind for longer).
inline constexpr std::chrono::milliseconds remote_chunk_ttl = std::chrono::hours(1);
/// The largest package the remote tier takes (bigger ones stay local, with a warning).
inline constexpr std::uint64_t remote_max_package_bytes = 16ull << 30;

/// A remote record: a line with the upload's token and chunk count, then the local entry's text
/// (encode_entry; its `check` line covers it).
struct RemoteRecord {
    std::uint64_t token = 0;
    std::uint64_t chunks = 0;
    CacheEntry entry;
};

namespace detail {
inline constexpr std::string_view remote_record_head = "skc-remote-record 1 ";
}  // namespace detail

inline std::string encode_remote_record(const RemoteRecord& r) {
    return std::string(detail::remote_record_head) + std::to_string(r.token) + " " + std::to_string(r.chunks) + "\n" +
           detail::encode_entry(r.entry);
}

/// The record in `text`, nullopt when it is not a whole, unaltered record of key `key`.
inline std::optional<RemoteRecord> decode_remote_record(std::string_view text, std::string_view key) {
    if (!text.starts_with(detail::remote_record_head)) return std::nullopt;
    const std::size_t eol = text.find('\n');
    if (eol == std::string_view::npos) return std::nullopt;
    std::string_view head = text.substr(detail::remote_record_head.size(), eol - detail::remote_record_head.size());
    const std::size_t sp = head.find(' ');
    if (sp == std::string_view::npos) return std::nullopt;
    RemoteRecord r;
    if (!detail::parse_u64(head.substr(0, sp), r.token) || !detail::parse_u64(head.substr(sp + 1), r.chunks))
        return std::nullopt;
    std::optional<CacheEntry> e = detail::decode_entry(text.substr(eol + 1), /*with_components=*/true);
    if (!e || e->key != key) return std::nullopt;
    // The chunks must hold the package exactly: a record that says otherwise is altered.
    const std::uint64_t need = e->size == 0 ? 1 : (e->size + remote_chunk_bytes - 1) / remote_chunk_bytes;
    if (r.chunks != need) return std::nullopt;
    r.entry = std::move(*e);
    return r;
}

/// A composite's record (docs/cache.md, covers): the head of a package's with no chunks, then the
/// composite's text (encode_composite; its `check` line covers it). Its parts are records of their own.
inline std::string encode_remote_composite(std::uint64_t token, const CompositeEntry& c) {
    return std::string(detail::remote_record_head) + std::to_string(token) + " 0\n" + detail::encode_composite(c);
}

/// The composite in record `text` of key `key`; nullopt when it is no whole, unaltered composite's.
inline std::optional<CompositeEntry> decode_remote_composite(std::string_view text, std::string_view key) {
    const std::size_t eol = text.find('\n');
    if (!text.starts_with(detail::remote_record_head) || eol == std::string_view::npos ||
        !text.substr(0, eol).ends_with(" 0"))
        return std::nullopt;
    std::optional<CompositeEntry> c = detail::decode_composite(text.substr(eol + 1));
    return c && c->key == key ? c : std::nullopt;
}

/// What reading a remote package found.
struct RemoteRead {
    enum class Status : unsigned char {
        whole,    // every chunk read, the size and checksum are the record's
        absent,   // no record
        evicted,  // a chunk is gone (the store evicted it): a miss
        refused,  // the record is unreadable, or the bytes are not the package it names (tampered)
    };
    Status status = Status::absent;
    std::string why;  // refused: what is wrong
    RemoteRecord record;
};

/// Reads the package of `key` in namespace `ns` through `sink`, chunk by chunk, and checks it against
/// its record (size, then the checksum of the bytes). `sink` sees bytes before they are checked: what
/// it wrote is to be used only when the status is `whole`. `record` is the record's text when the
/// caller read it already (else it is read here). Faults of the store propagate.
inline RemoteRead read_remote_package(RemoteTier& remote, std::string_view ns, std::string_view key,
                                      const ChunkFn& sink, std::optional<std::string> record = std::nullopt) {
    RemoteRead out;
    const std::optional<std::string> text = record ? std::move(record) : remote.get_record(ns, key);
    if (!text) return out;
    std::optional<RemoteRecord> rec = decode_remote_record(*text, key);
    if (!rec) {
        out.status = RemoteRead::Status::refused;
        out.why = "its record is unreadable (truncated or altered)";
        return out;
    }
    out.record = std::move(*rec);
    detail::Hasher h;
    std::uint64_t size = 0;
    for (std::uint64_t i = 0; i < out.record.chunks; ++i) {
        std::uint64_t got = 0;
        const bool there = remote.get_chunk(ns, key, out.record.token, i, [&](std::string_view c) {
            got += c.size();
            h.update(c);
            sink(c);
        });
        if (!there) {
            out.status = RemoteRead::Status::evicted;
            return out;
        }
        size += got;
        if (size > out.record.entry.size) break;  // more than it should be: refused below
    }
    out.status = RemoteRead::Status::refused;
    if (size != out.record.entry.size)
        out.why = "its package has " + std::to_string(size) + " bytes, the record says " +
                  std::to_string(out.record.entry.size);
    else if (h.digest() != out.record.entry.checksum) out.why = "its package's checksum does not match the record";
    else out.status = RemoteRead::Status::whole;
    return out;
}

/// An entry found bad by a verify (IndexCache::verify_all, verify_remote).
struct BadEntry {
    std::string key;       // the entry's key
    std::string reason;    // what is wrong with it
    bool removed = false;  // local: false when another process was using it (it goes when that use ends)
};

/// What verify_remote() found in one namespace of a remote tier.
struct RemoteVerifyReport {
    std::uint64_t checked = 0;
    std::vector<BadEntry> bad;
};

/// Reads every record of namespace `ns` and its package in full (`skc cache verify --remote`):
/// records that are unreadable, whose package is not whole (a chunk evicted) or not the one they
/// name are reported, and removed unless the tier is read-only. Faults of the store propagate.
inline RemoteVerifyReport verify_remote(RemoteTier& remote, std::string_view ns) {
    RemoteVerifyReport r;
    for (const std::string& key : remote.keys(ns)) {
        std::optional<std::string> record = remote.get_record(ns, key);
        if (!record) continue;  // removed meanwhile
        if (const std::optional<CompositeEntry> c = decode_remote_composite(*record, key)) {
            ++r.checked;  // its parts are checked as records of their own; each must be there
            for (const CachePart& p : c->parts) {
                const std::optional<std::string> part = remote.get_record(ns, p.key);
                const std::optional<RemoteRecord> pr = part ? decode_remote_record(*part, p.key) : std::nullopt;
                if (pr && pr->entry.checksum == p.checksum) continue;
                const bool remove = !remote.read_only();
                if (remove) remote.remove(ns, key);
                r.bad.push_back(BadEntry{key, "its part " + p.key + " is not the package it recorded", remove});
                break;
            }
            continue;
        }
        const RemoteRead read = read_remote_package(
            remote, ns, key, [](std::string_view) {}, std::move(record));
        if (read.status == RemoteRead::Status::absent) continue;  // removed meanwhile
        ++r.checked;
        std::string why;
        if (read.status == RemoteRead::Status::evicted) why = "a chunk of its package is gone (evicted)";
        else if (read.status == RemoteRead::Status::refused) why = read.why;
        else continue;
        const bool remove = !remote.read_only();
        if (remove) remote.remove(ns, key);
        r.bad.push_back(BadEntry{key, std::move(why), remove});
    }
    return r;
}

/// The remote tier a program asks for: the option `remote_cache`, else the environment's
/// SKC_REMOTE_CACHE (empty: none); read-only when the option `remote_cache_read_only` or
/// SKC_REMOTE_CACHE_READ_ONLY=1 says so. The URL itself is the store's to parse.
inline std::optional<RemoteConfig> resolve_remote_config(const Options& o) {
    RemoteConfig c;
    if (!o.remote_cache.empty()) c.url = o.remote_cache;
    else if (const char* env = std::getenv("SKC_REMOTE_CACHE"); env && *env) c.url = env;
    else return std::nullopt;
    c.read_only = o.remote_cache_read_only;
    if (const char* env = std::getenv("SKC_REMOTE_CACHE_READ_ONLY"); env && *env) {
        const std::string_view v(env);
        if (v == "1" || v == "true") c.read_only = true;
        else if (v != "0" && v != "false")
            throw Error(Errc::invalid_option,
                        "SKC_REMOTE_CACHE_READ_ONLY=\"" + std::string(v) + "\": expected 1, true, 0 or false",
                        ErrorContext{{}, {}, "SKC_REMOTE_CACHE_READ_ONLY"});
    }
    return c;
}

/// The remote policy of a compiler without a remote tier: a program that asks for one (the option
/// `remote_cache`, SKC_REMOTE_CACHE) is told once that this build has none.
struct NoRemote {
    static std::unique_ptr<RemoteTier> open(const RemoteConfig&) { return nullptr; }
};

/// What StaticKernelCompiler asks of its remote policy: `R::open(config)`, the tier (or nullptr).
/// A URL that is not the store's is an Error(invalid_option); a store that cannot be reached is
/// not an error here (the cache falls back when it first fails).
template <class R>
concept RemotePolicy = requires(const RemoteConfig& c) {
    { R::open(c) } -> std::same_as<std::unique_ptr<RemoteTier>>;
};

namespace detail {
template <class R>
consteval bool diagnose_remote() {
    static_assert(RemotePolicy<R>,
                  "skc: the Remote policy needs a member "
                  "`static std::unique_ptr<skc::RemoteTier> open(const skc::RemoteConfig&)`");
    return true;
}
}  // namespace detail

}  // namespace skc
