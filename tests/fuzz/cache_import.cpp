// Fuzzes the reader of cache export files, import_cache (include/skc/cache_archive.hpp): the input
// is written to a file and imported into an empty cache folder. An export file is full of
// checksums (each entry's check line, its package's checksum, the end line over everything), which
// random changes almost always break, so an input the importer refuses is imported once more,
// repaired: its framing is walked as the importer walks it, and every checksum met on the way is
// recomputed in place. Properties:
//   - an import that fails throws skc::Error (corrupt) and adds nothing: the cache folder stays
//     empty;
//   - an import that succeeds accounts for every entry of the file (added or already present), and
//     the cache then holds, in each namespace, exactly the keys of the file, each with the size and
//     checksum of the last entry of the file for that key, and a package with that checksum;
//   - a file the importer accepts as it is needs no repair.
// Successful imports write to the cache folder with fsync, as the cache always does; run the
// harness with TMPDIR on a memory file system (tests/fuzz/run.sh does) to keep them fast.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <skc/cache_archive.hpp>
#include <skc/policy/cache.hpp>

#include "fuzz_support.hpp"

namespace {

struct Expected {
    std::string key;
    skc::Digest checksum;
    std::uint64_t size = 0;
};

/// What a walk of the file, made as the importer makes it, found: the entries in order, and
/// whether it reached an end line.
struct Walk {
    std::vector<std::pair<std::string, Expected>> entries;  // namespace, entry
    bool ended = false;
};

/// Replaces the 32 hex digits at `at` in `buf` with `d`'s.
void put_hex(std::string& buf, std::size_t at, const skc::Digest& d) { buf.replace(at, 32, d.hex()); }

/// In the `n` bytes at `start` of `buf` (an entry's text or an op list): when it ends with a check
/// line, recompute it; for an entry, first set its last `checksum` line to `package`'s checksum.
void reseal_region(std::string& buf, std::size_t start, std::size_t n, const std::optional<skc::Digest>& package) {
    const std::string_view region(buf.data() + start, n);
    if (package) {
        const std::size_t at = region.rfind("\nchecksum ");
        if (at != std::string_view::npos && at + 10 + 32 < n && region[at + 10 + 32] == '\n')
            put_hex(buf, start + at + 10, *package);
    }
    const std::size_t check = region.rfind("\ncheck ");
    if (check != std::string_view::npos && check + 7 + 32 + 1 == n && region.back() == '\n')
        put_hex(buf, start + check + 7, skc::detail::hash_bytes(std::string_view(buf.data() + start, check + 1)));
}

/// Walks `buf` as import_cache's first pass does; with `repair`, recomputes every checksum met.
Walk walk(std::string& buf, bool repair) {
    Walk w;
    std::size_t pos = buf.find('\n');
    if (pos == std::string::npos) return w;
    ++pos;
    for (;;) {
        const std::size_t nl = buf.find('\n', pos);
        if (nl == std::string::npos || nl - pos > 1024) return w;
        const std::string line = buf.substr(pos, nl - pos);
        if (line.starts_with("end ")) {
            if (repair) {
                const std::string fixed = "end " + std::to_string(w.entries.size()) + " " +
                                          skc::detail::hash_bytes(std::string_view(buf.data(), pos)).hex();
                buf.replace(pos, nl - pos, fixed);
            }
            w.ended = true;
            return w;
        }
        const std::optional<skc::detail::ExportRecord> r = skc::detail::parse_record_line(line);
        if (!r) return w;
        const std::size_t entry_at = nl + 1;
        const std::uint64_t left = buf.size() - entry_at;
        if (r->entry_bytes > left || r->op_list_bytes > left - r->entry_bytes ||
            r->package_bytes > left - r->entry_bytes - r->op_list_bytes)
            return w;
        const std::size_t ops_at = entry_at + r->entry_bytes, package_at = ops_at + r->op_list_bytes;
        const std::size_t next = package_at + r->package_bytes;
        const skc::Digest package =
            skc::detail::hash_bytes(std::string_view(buf.data() + package_at, r->package_bytes));
        if (repair) {
            reseal_region(buf, entry_at, r->entry_bytes, package);
            reseal_region(buf, ops_at, r->op_list_bytes, std::nullopt);
        }
        const std::optional<skc::CacheEntry> e =
            skc::detail::decode_entry(std::string_view(buf.data() + entry_at, r->entry_bytes));
        if (!e) return w;
        w.entries.emplace_back(r->ns, Expected{e->key, e->checksum, e->size});
        pos = next;
    }
}

bool folder_empty(const std::filesystem::path& p) {
    std::error_code ec;
    return !std::filesystem::exists(p, ec) || std::filesystem::is_empty(p, ec);
}

void check_cache(const std::filesystem::path& root, const Walk& w) {
    // namespace -> key -> the last entry of the file for it
    std::map<std::string, std::map<std::string, Expected>> want;
    for (const auto& [ns, e] : w.entries) want[ns][e.key] = e;
    std::size_t namespaces = 0;
    for (const std::string& ns : skc::cache_namespaces(root)) {
        ++namespaces;
        FUZZ_CHECK(want.count(ns) == 1);
        skc::CacheConfig config{{}, std::chrono::seconds(5), skc::null_log()};
        config.mode = skc::CacheMode::read_only;
        auto cache = skc::open_cache_namespace(root, ns, config);
        const std::vector<skc::CacheEntry> entries = cache->entries();
        FUZZ_CHECK(entries.size() == want[ns].size());
        for (const skc::CacheEntry& e : entries) {
            const auto it = want[ns].find(e.key);
            FUZZ_CHECK(it != want[ns].end());
            FUZZ_CHECK(e.checksum == it->second.checksum && e.size == it->second.size);
            const std::optional<std::string> package = cache->storage().read(e.package);
            FUZZ_CHECK(package && package->size() == e.size && skc::detail::hash_bytes(*package) == e.checksum);
        }
    }
    FUZZ_CHECK(namespaces == want.size());
}

/// Imports `bytes` into an empty cache folder; true when it succeeded.
bool import(std::string_view bytes, const Walk& w) {
    static const std::filesystem::path file = fuzz::scratch() / "export";
    static const std::filesystem::path root = fuzz::scratch() / "cache";
    static bool dirty = true;
    if (dirty) {
        fuzz::fresh_dir(root);
        std::filesystem::permissions(root, std::filesystem::perms(0755));  // trusted whatever the umask
    }
    dirty = false;
    fuzz::write_file(file, bytes);
    skc::CacheConfig config{{}, std::chrono::seconds(5), skc::null_log()};
    try {
        const skc::ImportReport report = skc::import_cache(root, file, config);
        dirty = true;
        FUZZ_CHECK(w.ended);
        FUZZ_CHECK(report.added + report.present == w.entries.size());
        FUZZ_CHECK(report.added >= 1 || w.entries.empty());
        check_cache(root, w);
        return true;
    } catch (const skc::Error& e) {
        FUZZ_CHECK(e.code() == skc::Errc::corrupt);
        FUZZ_CHECK(folder_empty(root));
        return false;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string raw(fuzz::as_text(data, size));
    std::string repaired = raw;
    const Walk w = walk(raw, false);
    const Walk wr = walk(repaired, true);
    const bool ok = import(raw, w);
    if (ok) FUZZ_CHECK(repaired == raw);
    else if (repaired != raw) import(repaired, wr);
    return 0;
}
