// skc/kernel_table.hpp: KernelTable, the run-time lookup from an op instance to its static kernel.
//
// Keys are op content digests (skc::digest of the record, or OpDesc::digest computed at compile
// time). The table is an open-addressing hash table with linear probing over a power-of-two array
// of keys at most half full, indexed by the digest's first 8 bytes (already uniformly mixed), so a
// lookup is one or two probes of 16 bytes and no allocation; the kernels are in a parallel array
// that a lookup does not read. Looking up a run-time OpRecord hashes its canonical
// encoding on the fly, without allocating (unless it carries unknown fields, whose order must be
// sorted).
//
// A compile-time op's slot is remembered per thread and table generation, so its repeated lookups
// cost one load and one compare.
//
// reload() (after a reselect) builds a new table and publishes it with one atomic store; lookups
// running meanwhile finish on the old table. Old tables are kept until the KernelTable is
// destroyed, so a reader never touches freed memory; a reload happens once per compile, so this
// costs one small table per compile.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "detail/hash.hpp"
#include "op_record.hpp"

namespace skc {

template <class Kernel>
class KernelTable {
public:
    using Entry = std::pair<Digest, Kernel>;

    KernelTable() { publish(build({})); }
    explicit KernelTable(const std::vector<Entry>& entries) { publish(build(entries)); }
    KernelTable(const KernelTable&) = delete;
    KernelTable& operator=(const KernelTable&) = delete;

    /// The kernel for digest `d`, or nullptr. Safe from any thread, also during reload().
    [[nodiscard]] const Kernel* find(const Digest& d) const noexcept {
        return find_in(*current_.load(std::memory_order_acquire), d);
    }

    /// The kernel of a compile-time op (OpDesc). Its digest is a constant, and the slot found is
    /// remembered per thread for the table it was found in, so repeated lookups of the same op cost
    /// one load and one compare until the next reload.
    template <class Op>
    [[nodiscard]] const Kernel* find() const noexcept {
        static constexpr Digest d = Op::digest;
        thread_local Memo memo;
        const Snapshot* s = current_.load(std::memory_order_acquire);
        if (memo.snapshot_id == s->id) return memo.kernel;
        const Kernel* k = find_in(*s, d);
        memo = Memo{s->id, k};
        return k;
    }

    /// The kernel of a recorded op; its digest is computed without heap allocation for records
    /// without unknown fields.
    [[nodiscard]] const Kernel* find(const OpRecord& r) const { return find(digest(r)); }

    /// Replaces the table's content (a reselect). Lookups in progress finish on the old content.
    /// When a digest appears twice, the later entry wins (as the last installed package does).
    void reload(const std::vector<Entry>& entries) { publish(build(entries)); }

    /// Number of kernels in the current table.
    [[nodiscard]] std::size_t size() const noexcept { return current_.load(std::memory_order_acquire)->size; }

private:
    /// One published table. Keys and kernels are separate arrays, so a lookup reads only keys
    /// (16 bytes a slot, four to a cache line) and returns the kernel's address without loading it.
    /// An empty slot holds the all-zero digest; a kernel whose digest is all zero (which a real
    /// digest is with probability 2^-128, but nothing forbids) is kept beside the array.
    struct Snapshot {
        std::uint64_t id = next_id();  // first: every find<Op>() reads it (at the end it cost a cycle)
        std::unique_ptr<Digest[]> keys;
        std::unique_ptr<Kernel[]> kernels;
        std::size_t mask = 0;
        std::size_t size = 0;
        bool has_zero = false;
        Kernel zero_kernel{};
    };

    static std::uint64_t next_id() noexcept {
        static std::atomic<std::uint64_t> counter{0};
        return counter.fetch_add(1, std::memory_order_relaxed) + 1;
    }

    static bool is_zero(const Digest& d) noexcept {
        std::uint64_t w[2];
        std::memcpy(w, d.bytes.data(), 16);
        return (w[0] | w[1]) == 0;
    }

    /// A compile-time op's slot, remembered per thread (see find<Op>()).
    struct Memo {
        std::uint64_t snapshot_id = 0;  // ids are unique in the process: no stale match
        const Kernel* kernel = nullptr;
    };

    /// The first probe; probe() handles collisions, absent keys and the zero digest.
    static const Kernel* find_in(const Snapshot& s, const Digest& d) noexcept {
        const std::size_t i = static_cast<std::size_t>(d.low64()) & s.mask;
        if (s.keys[i].same_as(d) && !is_zero(d)) [[likely]]
            return &s.kernels[i];
        return probe(s, d, i);
    }

    static const Kernel* probe(const Snapshot& s, const Digest& d, std::size_t i) noexcept {
        if (is_zero(d)) return s.has_zero ? &s.zero_kernel : nullptr;
        const Digest* keys = s.keys.get();
        for (;;) {
            if (is_zero(keys[i])) return nullptr;
            i = (i + 1) & s.mask;
            if (keys[i].same_as(d)) return &s.kernels[i];
        }
    }

    static std::unique_ptr<Snapshot> build(const std::vector<Entry>& entries) {
        auto s = std::make_unique<Snapshot>();
        std::size_t cap = 8;
        while (cap < entries.size() * 2) cap *= 2;  // at most half full
        s->keys = std::make_unique<Digest[]>(cap);  // value-initialised: all zero, all empty
        s->kernels = std::make_unique<Kernel[]>(cap);
        s->mask = cap - 1;
        for (const auto& [key, kernel] : entries) {
            if (is_zero(key)) {
                if (!s->has_zero) ++s->size;
                s->has_zero = true;
                s->zero_kernel = kernel;
                continue;
            }
            std::size_t i = static_cast<std::size_t>(key.low64()) & s->mask;
            while (!is_zero(s->keys[i]) && !s->keys[i].same_as(key)) i = (i + 1) & s->mask;
            if (is_zero(s->keys[i])) ++s->size;
            s->keys[i] = key;
            s->kernels[i] = kernel;
        }
        return s;
    }

    void publish(std::unique_ptr<Snapshot> s) {
        std::lock_guard lock(mu_);
        current_.store(s.get(), std::memory_order_release);
        all_.push_back(std::move(s));
    }

    std::atomic<const Snapshot*> current_{nullptr};
    std::mutex mu_;                               // serialises reloads
    std::vector<std::unique_ptr<Snapshot>> all_;  // every table ever published (see the header comment)
};

}  // namespace skc
