// skc/policy/storage.hpp: the Storage concept and StorageTraits. Its models: FilesystemStorage
// (filesystem_storage.hpp), MemoryStorage (memory_storage.hpp).
//
// A storage keeps named objects (names are relative paths such as `entries/<key>` or
// `packages/<key>.run`) for the cache. What the cache needs from it:
//   read(name)            the whole object, or nullopt when absent (small objects: entries, stats)
//   write(name, bytes)    publish atomically: a reader sees the old object or the new, never a part
//   import_file(name, f)  publish the content of file f atomically (packages), returns its info
//   remove(name)          true when something was removed
//   stat(name)            size, a cheap identity and the modification time, without reading it
//   touch(name)           set the modification time to now (the cache's least-recently-used clock)
//   list(folder)          the names directly in a folder
//   read_chunks(name, fn) stream the content through fn (checksums of large packages)
// A storage may also offer local_path(name), the object's file, for tools that need a real file
// (an installer runs the package); StorageTraits supplies "none" for storages without it. And it
// may offer write_stream(name, produce), an object published atomically from bytes produced in
// pieces (a download; StorageTraits falls back to a temporary file and import_file). And it
// may offer an append log (the cache's statistics: many processes add a line each, one folds them):
//   append(name, bytes)   add bytes at the end of an object in one piece, never interleaved with
//                         another append, without a lock; returns the object's size after it
//   read_log(name, mark)  the bytes from where `mark` says a reader stopped (a LogMark: the log's
//                         identity and an offset) to the end, or all of them when the log is not
//                         the one `mark` names; offsets never change, so appends need no lock
//   discard_log(name, mark) free the space of the bytes before the mark (a log is never shortened)
//   touch(name, time)     set the modification time to `time` unless it is later already, or the
//                         object changed after `time` (its change time, ctime, is later)

#pragma once

#include <concepts>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../detail/posix.hpp"

namespace skc {

/// What stat() tells about an object without reading it.
struct ObjectInfo {
    std::uint64_t size = 0;
    std::uint64_t identity = 0;  // changes whenever the object is replaced or modified in place
    std::int64_t mtime_ns = 0;   // modification time (the cache's last-use time)
    bool regular = true;         // false: a symlink, a folder or another non-file where an object was
    std::int64_t ctime_ns = 0;   // change time: when it was last written, replaced or had its time set
    friend bool operator==(const ObjectInfo&, const ObjectInfo&) = default;
};

using ChunkFn = std::function<void(std::string_view)>;

/// Where a reader of an append log stopped: the log's identity (another when the log was removed
/// and made anew) and the offset of the first byte it has not read.
struct LogMark {
    std::uint64_t id = 0;
    std::uint64_t offset = 0;
    friend bool operator==(const LogMark&, const LogMark&) = default;
};

/// What read_log() read: the log's identity, the offset of the first byte read, and the bytes from
/// there to the end.
struct LogTail {
    std::uint64_t id = 0;
    std::uint64_t from = 0;
    std::string data;
};

/// The members a Storage must have, one concept each: the Storage concept is their conjunction and
/// diagnose_storage() names each one a type misses (the requirement is written here only).
namespace detail {
template <class S>
concept storage_read = requires(const S& s, std::string_view name) {
    { s.read(name) } -> std::same_as<std::optional<std::string>>;
};
template <class S>
concept storage_write = requires(S& s, std::string_view name, std::string_view data) {
    { s.write(name, data) } -> std::same_as<void>;
};
template <class S>
concept storage_import_file = requires(S& s, std::string_view name, const std::filesystem::path& file) {
    { s.import_file(name, file) } -> std::same_as<ObjectInfo>;
};
template <class S>
concept storage_remove = requires(S& s, std::string_view name) {
    { s.remove(name) } -> std::same_as<bool>;
};
template <class S>
concept storage_stat = requires(const S& s, std::string_view name) {
    { s.stat(name) } -> std::same_as<std::optional<ObjectInfo>>;
};
template <class S>
concept storage_touch = requires(S& s, std::string_view name) {
    { s.touch(name) } -> std::same_as<void>;
};
template <class S>
concept storage_list = requires(const S& s, std::string_view folder) {
    { s.list(folder) } -> std::same_as<std::vector<std::string>>;
};
template <class S>
concept storage_read_chunks = requires(const S& s, std::string_view name, const ChunkFn& fn) {
    { s.read_chunks(name, fn) } -> std::same_as<bool>;
};
}  // namespace detail

template <class S>
concept Storage = detail::storage_read<S> && detail::storage_write<S> && detail::storage_import_file<S> &&
    detail::storage_remove<S> && detail::storage_stat<S> && detail::storage_touch<S> && detail::storage_list<S> &&
    detail::storage_read_chunks<S>;

namespace detail {

/// One message per member of the Storage concept that `S` misses (a host calls it in one line).
template <class S>
consteval bool diagnose_storage() {
    static_assert(
        storage_read<S>,
        "skc: the Storage policy needs a member `std::optional<std::string> read(std::string_view name) const`");
    static_assert(storage_write<S>,
                  "skc: the Storage policy needs a member `void write(std::string_view name, std::string_view data)`");
    static_assert(storage_import_file<S>,
                  "skc: the Storage policy needs a member "
                  "`ObjectInfo import_file(std::string_view name, const std::filesystem::path& file)`");
    static_assert(storage_remove<S>, "skc: the Storage policy needs a member `bool remove(std::string_view name)`");
    static_assert(
        storage_stat<S>,
        "skc: the Storage policy needs a member `std::optional<ObjectInfo> stat(std::string_view name) const`");
    static_assert(storage_touch<S>, "skc: the Storage policy needs a member `void touch(std::string_view name)`");
    static_assert(
        storage_list<S>,
        "skc: the Storage policy needs a member `std::vector<std::string> list(std::string_view folder) const`");
    static_assert(
        storage_read_chunks<S>,
        "skc: the Storage policy needs a member `bool read_chunks(std::string_view name, const ChunkFn& fn) const`");
    return true;
}

}  // namespace detail

/// Fills in the optional members of a Storage.
template <class S>
struct StorageTraits {
    /// Removes what writers killed half-way left behind (temporary objects); returns how many.
    /// Storages that publish without temporaries have nothing to collect.
    static std::uint64_t collect_garbage(S& s) {
        if constexpr (requires {
                          { s.collect_garbage() } -> std::convertible_to<std::uint64_t>;
                      })
            return s.collect_garbage();
        else return 0;
    }

    /// Whether the storage offers an append log (append, read_log, discard_log, and touch at a
    /// given time, which a fold applies for the hits the log records).
    static constexpr bool appends = requires(S & s, std::string_view n, std::int64_t t, const LogMark& m) {
        { s.append(n, n) } -> std::same_as<std::uint64_t>;
        { s.read_log(n, m) } -> std::same_as<std::optional<LogTail>>;
        { s.discard_log(n, m) } -> std::same_as<void>;
        { s.touch(n, t) } -> std::same_as<void>;
    };

    /// Publishes object `name` atomically from the bytes `produce` gives its writer, in pieces; if
    /// `produce` throws, nothing is published and the exception propagates. Storages without
    /// write_stream get a temporary file and import_file.
    static ObjectInfo write_stream(S& s, std::string_view name, const std::function<void(const ChunkFn&)>& produce) {
        if constexpr (requires {
                          { s.write_stream(name, produce) } -> std::same_as<ObjectInfo>;
                      }) {
            return s.write_stream(name, produce);
        } else {
            detail::TempFile tmp = detail::TempFile::create("skc-object-");
            produce([&](std::string_view c) { detail::write_all(tmp.fd(), c, tmp.path()); });
            tmp.close();
            return s.import_file(name, tmp.path());
        }
    }

    /// The object's file, when the storage keeps objects as files; nullopt otherwise.
    static std::optional<std::filesystem::path> local_path(const S& s, std::string_view name) {
        if constexpr (requires {
                          { s.local_path(name) } -> std::same_as<std::optional<std::filesystem::path>>;
                      })
            return s.local_path(name);
        else return std::nullopt;
    }
};

}  // namespace skc
