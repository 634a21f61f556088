// skc/op_set.hpp: a set of op records, deduplicated by content digest.
//
// OpSet keeps records in insertion order with their digests computed once, on insert. Its
// set_digest() does not depend on that order, nor on file names: it is the hash of the element
// count followed by the sorted record digests (the set digest of docs/spec.md section 7, computed on
// canonical content instead of file bytes).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "detail/hash.hpp"
#include "op_record.hpp"

namespace skc {

class OpSet {
public:
    struct Entry {
        Digest digest;
        OpRecord record;
        std::string name;  // the op info file name it came from or was written as; may be empty
    };

    /// Inserts `r` unless a record with the same content is present. Returns true when inserted.
    bool insert(OpRecord r, std::string name = {}) {
        const Digest d = skc::digest(r);
        return insert(d, std::move(r), std::move(name));
    }

    /// Inserts with a digest the caller already has (it must be skc::digest(r)).
    bool insert(const Digest& d, OpRecord r, std::string name = {}) {
        auto [it, fresh] = index_.try_emplace(d, entries_.size());
        if (!fresh) return false;
        entries_.push_back(Entry{d, std::move(r), std::move(name)});
        return true;
    }

    [[nodiscard]] bool contains(const Digest& d) const { return index_.count(d) != 0; }
    [[nodiscard]] const Entry* find(const Digest& d) const {
        auto it = index_.find(d);
        return it == index_.end() ? nullptr : &entries_[it->second];
    }
    [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
    [[nodiscard]] bool empty() const noexcept { return entries_.empty(); }
    [[nodiscard]] const std::vector<Entry>& entries() const noexcept { return entries_; }
    [[nodiscard]] auto begin() const noexcept { return entries_.begin(); }
    [[nodiscard]] auto end() const noexcept { return entries_.end(); }

    /// Order-independent digest of the set's content.
    [[nodiscard]] Digest set_digest() const {
        std::vector<Digest> ds;
        ds.reserve(entries_.size());
        for (const Entry& e : entries_) ds.push_back(e.digest);
        return combine_digests(std::move(ds));
    }

    /// The set digest of any collection of record digests (duplicates must already be removed).
    static Digest combine_digests(std::vector<Digest> ds) {
        // Sorting pairs of big-endian words orders the digests byte by byte, with integer compares.
        std::vector<std::pair<std::uint64_t, std::uint64_t>> keys;
        keys.reserve(ds.size());
        for (const Digest& d : ds) keys.emplace_back(d.word(0), d.word(1));
        std::sort(keys.begin(), keys.end());
        detail::Hasher h;
        h.update_u64(keys.size());
        for (const auto& [hi, lo] : keys) {
            for (int i = 7; i >= 0; --i) h.update_byte(static_cast<unsigned char>(hi >> (8 * i)));
            for (int i = 7; i >= 0; --i) h.update_byte(static_cast<unsigned char>(lo >> (8 * i)));
        }
        return h.digest();
    }

private:
    std::vector<Entry> entries_;
    std::unordered_map<Digest, std::size_t, DigestHash> index_;
};

}  // namespace skc
