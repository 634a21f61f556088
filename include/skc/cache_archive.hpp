// skc/cache_archive.hpp: moving cache entries on purpose: export to one file, import from it.
//
// An export file holds whole entries: each entry's text (its own check line), its op list and its
// package; then the composite entries whose parts are all in the file; and a last line with the
// number of records and a checksum of everything before it:
//
//   skc-cache-export 1\n
//   entry <namespace> <entry bytes> <op list bytes> <package bytes>\n <the three, back to back>
//   ...
//   composite <namespace> <composite bytes>\n <the composite's text>
//   ...
//   end <records> <MurmurHash3_x64_128 of every byte above, 32 hex digits>\n
//
// import_cache() reads the file twice: first it checks everything (the framing, each entry's check
// line, each package's size and checksum against its entry, each composite's parts among the
// entries before it, the count and the checksum at the end) and adds nothing if anything is wrong;
// then it adds each entry under its key's lock, as a publish does, and each composite after its
// parts. Entries and composites already in the cache are kept.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "detail/atomic_file.hpp"
#include "detail/unique_fd.hpp"
#include "policy/cache.hpp"

namespace skc {

struct ExportReport {
    std::uint64_t entries = 0;
    std::uint64_t composites = 0;  // composite entries: each with every part among the entries
    std::uint64_t package_bytes = 0;
    std::vector<std::string> skipped;  // keys left out: the entry or its package is bad (`skc cache verify`)
};

struct ImportReport {
    std::uint64_t added = 0;
    std::uint64_t composites_added = 0;
    std::uint64_t present = 0;  // already in the cache with the same package
    std::uint64_t package_bytes = 0;
};

namespace detail {

inline constexpr std::string_view export_magic = "skc-cache-export 1\n";

/// Writes a file through an AtomicFile, renamed into place at commit(), keeping the checksum of
/// what was written. Its errors are io_error and name the file it writes.
class AtomicOut {
public:
    explicit AtomicOut(std::filesystem::path path) : file_(std::move(path), 0644, &fail) {}
    void write(std::string_view s) {
        hasher_.update(s);
        file_.write(s);
    }
    [[nodiscard]] Digest digest() const { return hasher_.digest(); }
    /// Renames the file into place, after an fsync when `durable` (not for scratch files).
    void commit(bool durable = true) { file_.commit(durable ? Durability::file : Durability::none); }

private:
    [[noreturn]] static void fail(AtomicStep step, const std::filesystem::path&, const std::filesystem::path& path,
                                  int err) {
        static constexpr const char* what[] = {"cannot create", "cannot write", "cannot fsync",
                                               "cannot rename into place"};
        throw Error(Errc::io_error, std::string(what[static_cast<int>(step)]) + ": " + std::strerror(err),
                    ErrorContext{path.string(), {}, {}});
    }
    AtomicFile file_;
    Hasher hasher_;
};

/// Reads an export file: each read goes into the running checksum.
class ExportReader {
public:
    explicit ExportReader(const std::filesystem::path& file) : file_(file), in_(file, std::ios::binary) {
        if (!in_) throw Error(Errc::io_error, "cannot open the export file", ErrorContext{file.string(), {}, {}});
    }
    /// A line of at most `max` bytes without its newline; nullopt at the end of the file.
    std::optional<std::string> line(std::size_t max = 1024) {
        std::string l;
        char c = 0;
        while (in_.get(c)) {
            if (c == '\n') {
                hasher_.update(l);
                hasher_.update("\n");
                return l;
            }
            if (l.size() >= max) bad("a line is too long");
            l += c;
        }
        if (!l.empty()) bad("the file is truncated (a line has no end)");
        return std::nullopt;
    }
    /// Exactly `n` bytes given to `fn` in chunks (never held whole unless `fn` keeps them).
    void bytes(std::uint64_t n, const std::function<void(std::string_view)>& fn) {
        char buf[1 << 16];
        while (n > 0) {
            const auto want = static_cast<std::streamsize>(std::min<std::uint64_t>(n, sizeof buf));
            in_.read(buf, want);
            if (in_.gcount() != want) bad("the file is truncated");
            const std::string_view chunk(buf, static_cast<std::size_t>(want));
            hasher_.update(chunk);
            fn(chunk);
            n -= static_cast<std::uint64_t>(want);
        }
    }
    [[nodiscard]] Digest digest() const { return hasher_.digest(); }
    [[nodiscard]] bool at_end() { return in_.peek() == std::char_traits<char>::eof(); }
    [[noreturn]] void bad(const std::string& why) const {
        throw Error(Errc::corrupt, why + "; nothing was imported", ErrorContext{file_.string(), {}, {}});
    }

private:
    std::filesystem::path file_;
    std::ifstream in_;
    Hasher hasher_;
};

struct ExportRecord {
    std::string ns;
    std::uint64_t entry_bytes = 0, op_list_bytes = 0, package_bytes = 0;
};

/// `composite <ns> <n>`: the namespace and the composite's bytes.
inline std::optional<std::pair<std::string, std::uint64_t>> parse_composite_line(std::string_view l) {
    if (!l.starts_with("composite ")) return std::nullopt;
    const std::vector<std::string_view> f = split(l.substr(10), ' ');
    std::uint64_t n = 0;
    if (f.size() != 2 || !valid_namespace(f[0]) || !parse_u64(f[1], n) || n > (1u << 20)) return std::nullopt;
    return std::pair{std::string(f[0]), n};
}

/// `entry <ns> <n> <n> <n>`.
inline std::optional<ExportRecord> parse_record_line(std::string_view l) {
    if (!l.starts_with("entry ")) return std::nullopt;
    l.remove_prefix(6);
    const std::vector<std::string_view> f = split(l, ' ');
    ExportRecord r;
    if (f.size() != 4 || !valid_namespace(f[0]) || !parse_u64(f[1], r.entry_bytes) ||
        !parse_u64(f[2], r.op_list_bytes) || !parse_u64(f[3], r.package_bytes) || r.entry_bytes > (1u << 20) ||
        r.op_list_bytes > (std::uint64_t{1} << 26))
        return std::nullopt;
    r.ns = std::string(f[0]);
    return r;
}

}  // namespace detail

/// Writes the entries of cache folder `root` to `file` (atomically: a whole file or none): those
/// of namespace `only_ns` (empty: every namespace), and of the keys `keys` (empty: every key; a
/// composite's key brings its parts). Then the composites whose parts were all written.
/// Reads the cache without writing to it; each entry is pinned while it is copied, and its package
/// is checked against its checksum first (a bad one is skipped and reported).
inline ExportReport export_cache(const std::filesystem::path& root, const std::filesystem::path& file,
                                 std::string_view only_ns = {}, const std::vector<std::string>& keys = {}) {
    ExportReport report;
    detail::AtomicOut out(file);
    out.write(detail::export_magic);
    for (const std::string& stem : cache_namespaces(root, only_ns)) {
        CacheConfig config{{}, std::chrono::seconds(30), null_log()};
        config.mode = CacheMode::read_only;
        auto cache = open_cache_namespace(root, stem, config);
        const std::vector<CompositeEntry> composites = cache->composites();
        std::vector<std::string> wanted = keys;
        for (const CompositeEntry& c : composites)
            if (std::find(keys.begin(), keys.end(), c.key) != keys.end())
                for (const CachePart& p : c.parts) wanted.push_back(p.key);
        std::map<std::string, Digest> written;  // key -> checksum
        for (const CacheEntry& listed : cache->entries()) {
            if (!keys.empty() && std::find(wanted.begin(), wanted.end(), listed.key) == wanted.end()) continue;
            Digest d;
            if (!detail::parse_hex_digest(listed.key, d)) continue;
            const std::optional<CacheHit<FileLock::Guard>> hit = cache->lookup(CacheKey{d, {}, {}});
            const std::optional<std::string> text = cache->storage().read("entries/" + listed.key);
            if (!hit || !text || !hit->package_path) {
                report.skipped.push_back(listed.key);
                continue;
            }
            const Digest sum = detail::checksum_of(
                [&](const ChunkFn& fn) { return cache->storage().read_chunks(hit->entry.package, fn); });
            if (sum != hit->entry.checksum) {
                report.skipped.push_back(listed.key);
                continue;
            }
            const std::optional<std::string> ops = cache->storage().read("oplists/" + listed.key);
            const std::string op_text = ops && detail::decode_op_list(*ops) ? *ops : std::string();
            out.write("entry " + stem + " " + std::to_string(text->size()) + " " + std::to_string(op_text.size()) +
                      " " + std::to_string(hit->entry.size) + "\n");
            out.write(*text);
            out.write(op_text);
            std::uint64_t copied = 0;
            cache->storage().read_chunks(hit->entry.package, [&](std::string_view c) {
                copied += c.size();
                out.write(c);
            });
            if (copied != hit->entry.size)
                throw Error(Errc::corrupt, "the package of entry " + listed.key + " changed while it was exported",
                            ErrorContext{file.string(), {}, {}});
            ++report.entries;
            report.package_bytes += copied;
            written[listed.key] = hit->entry.checksum;
        }
        for (const CompositeEntry& c : composites) {
            if (!keys.empty() && std::find(keys.begin(), keys.end(), c.key) == keys.end()) continue;
            if (!std::all_of(c.parts.begin(), c.parts.end(), [&](const CachePart& p) {
                    const auto it = written.find(p.key);
                    return it != written.end() && it->second == p.checksum;
                }))
                continue;  // a part is gone or changed: the composite is no longer whole
            const std::string text = detail::encode_composite(c);
            out.write("composite " + stem + " " + std::to_string(text.size()) + "\n" + text);
            ++report.composites;
        }
    }
    out.write("end " + std::to_string(report.entries + report.composites) + " " + out.digest().hex() + "\n");
    out.commit();
    return report;
}

/// Adds the entries of export file `file` to cache folder `root` (see the header comment): all of
/// them, or none with Error(corrupt) naming the file and what is wrong. `config` is used for each
/// namespace (its limits apply after each entry, as after a publish).
inline ImportReport import_cache(const std::filesystem::path& root, const std::filesystem::path& file,
                                 CacheConfig config = {}) {
    // Pass 1: check everything, keep nothing.
    std::uint64_t count = 0;
    {
        std::set<std::string> seen;  // <ns>/<key>/<checksum> of the entries read so far
        detail::ExportReader in(file);
        if (in.line() != std::string(detail::export_magic.substr(0, detail::export_magic.size() - 1)))
            in.bad("not an skc cache export (its first line is not \"skc-cache-export 1\")");
        for (;;) {
            const Digest so_far = in.digest();
            const std::optional<std::string> l = in.line();
            if (!l) in.bad("the file is truncated (no end line)");
            if (l->starts_with("end ")) {
                const std::string expect = "end " + std::to_string(count) + " " + so_far.hex();
                if (*l != expect) in.bad("the end line does not match the content (altered or cut short)");
                if (!in.at_end()) in.bad("bytes follow the end line");
                break;
            }
            if (const auto c = detail::parse_composite_line(*l)) {
                std::string text;
                in.bytes(c->second, [&](std::string_view b) { text.append(b); });
                const std::optional<CompositeEntry> comp = detail::decode_composite(text);
                if (!comp)
                    in.bad("record " + std::to_string(count + 1) + ": the composite text is altered or truncated");
                for (const CachePart& p : comp->parts)
                    if (seen.count(c->first + "/" + p.key + "/" + p.checksum.hex()) == 0)
                        in.bad("composite " + comp->key + ": its part " + p.key +
                               " is not among the entries before it");
                ++count;
                continue;
            }
            const std::optional<detail::ExportRecord> r = detail::parse_record_line(*l);
            if (!r) in.bad("entry " + std::to_string(count + 1) + ": a malformed record line");
            std::string text, ops;
            in.bytes(r->entry_bytes, [&](std::string_view c) { text.append(c); });
            in.bytes(r->op_list_bytes, [&](std::string_view c) { ops.append(c); });
            const std::optional<CacheEntry> e = detail::decode_entry(text);
            if (!e) in.bad("entry " + std::to_string(count + 1) + ": the entry text is altered or truncated");
            if (!ops.empty() && !detail::decode_op_list(ops)) in.bad("entry " + e->key + ": its op list is altered");
            if (e->size != r->package_bytes) in.bad("entry " + e->key + ": the package's size is not the entry's");
            detail::Hasher h;
            in.bytes(r->package_bytes, [&](std::string_view c) { h.update(c); });
            if (h.digest() != e->checksum)
                in.bad("entry " + e->key + ": the package's checksum does not match the entry");
            seen.insert(r->ns + "/" + e->key + "/" + e->checksum.hex());
            ++count;
        }
    }
    // Pass 2: add each entry through a temporary package file in the cache folder.
    ImportReport report;
    detail::make_dir(root);
    const std::filesystem::path tmp = root / (".import." + std::to_string(::getpid()));
    const detail::RemovedAtExit cleanup(tmp);
    detail::ExportReader in(file);
    (void)in.line();
    std::map<std::string, std::unique_ptr<IndexCache<FilesystemStorage, FileLock>>> caches;
    auto cache_of = [&](const std::string& ns) -> IndexCache<FilesystemStorage, FileLock>& {
        auto& cache = caches[ns];
        if (!cache) cache = open_cache_namespace(root, ns, config);
        return *cache;
    };
    auto changed = [&] {
        return Error(Errc::corrupt, "the export file changed while it was imported",
                     ErrorContext{file.string(), {}, {}});
    };
    for (std::uint64_t i = 0; i < count; ++i) {
        // The file was checked whole; if it changes now, import_entry still refuses a package
        // that is not its entry's.
        const std::optional<std::string> line = in.line();
        if (const auto c = line ? detail::parse_composite_line(*line) : std::nullopt) {
            std::string text;
            in.bytes(c->second, [&](std::string_view b) { text.append(b); });
            const std::optional<CompositeEntry> comp = detail::decode_composite(text);
            if (!comp) throw changed();
            if (cache_of(c->first).import_composite(*comp)) ++report.composites_added;
            else ++report.present;
            continue;
        }
        const std::optional<detail::ExportRecord> r = line ? detail::parse_record_line(*line) : std::nullopt;
        if (!r) throw changed();
        std::string text, ops;
        in.bytes(r->entry_bytes, [&](std::string_view c) { text.append(c); });
        in.bytes(r->op_list_bytes, [&](std::string_view c) { ops.append(c); });
        {
            detail::AtomicOut package(tmp);
            in.bytes(r->package_bytes, [&](std::string_view c) { package.write(c); });
            package.commit(/*durable=*/false);  // the cache's own copy is made durable
        }
        const std::optional<CacheEntry> e = detail::decode_entry(text);
        if (!e) throw changed();
        if (cache_of(r->ns).import_entry(*e, tmp, ops)) {
            ++report.added;
            report.package_bytes += r->package_bytes;
        } else {
            ++report.present;
        }
    }
    for (auto& [ns, cache] : caches) cache->apply_limits();  // once, not after every entry
    return report;
}

}  // namespace skc
