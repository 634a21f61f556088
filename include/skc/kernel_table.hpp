// skc/kernel_table.hpp: KernelTable, the run-time lookup from an op instance to its static kernel.
//
// Keys are op content digests (skc::digest of the record, or OpDesc::digest computed at compile
// time). The table is an open-addressing hash table with linear probing over a power-of-two array
// at most half full, indexed by the digest's first 8 bytes (already uniformly mixed), so a lookup
// is one or two probes and no allocation. Looking up a run-time OpRecord hashes its canonical
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
        struct Memo {
            std::uint64_t snapshot_id = 0;  // ids are unique in the process: no stale match
            const Kernel* kernel = nullptr;
        };
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
    struct Slot {
        Digest key;
        Kernel kernel{};
        bool used = false;
    };
    struct Snapshot {
        std::vector<Slot> slots;
        std::size_t mask = 0;
        std::size_t size = 0;
        std::uint64_t id = next_id();
    };

    static std::uint64_t next_id() noexcept {
        static std::atomic<std::uint64_t> counter{0};
        return counter.fetch_add(1, std::memory_order_relaxed) + 1;
    }

    static const Kernel* find_in(const Snapshot& s, const Digest& d) noexcept {
        std::size_t i = static_cast<std::size_t>(d.low64()) & s.mask;
        for (;;) {
            const Slot& slot = s.slots[i];
            if (!slot.used) return nullptr;
            if (slot.key.same_as(d)) return &slot.kernel;
            i = (i + 1) & s.mask;
        }
    }

    static std::unique_ptr<Snapshot> build(const std::vector<Entry>& entries) {
        auto s = std::make_unique<Snapshot>();
        std::size_t cap = 8;
        while (cap < entries.size() * 2) cap *= 2;
        s->slots.resize(cap);
        s->mask = cap - 1;
        for (const auto& [key, kernel] : entries) {
            std::size_t i = static_cast<std::size_t>(key.low64()) & s->mask;
            while (s->slots[i].used && !s->slots[i].key.same_as(key)) i = (i + 1) & s->mask;
            if (!s->slots[i].used) ++s->size;
            s->slots[i] = Slot{key, kernel, true};
        }
        return s;
    }

    void publish(std::unique_ptr<Snapshot> s) {
        std::lock_guard lock(mu_);
        current_.store(s.get(), std::memory_order_release);
        all_.push_back(std::move(s));
    }

    std::atomic<const Snapshot*> current_{nullptr};
    std::mutex mu_;                                // serialises reloads
    std::vector<std::unique_ptr<Snapshot>> all_;  // every table ever published (see the header comment)
};

}  // namespace skc
