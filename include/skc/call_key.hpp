// skc/call_key.hpp: CallKey and CallMap, an op call's identity taken from its raw arguments.
//
// A framework plugin sees each op call as the framework's own arguments: dtype codes, sizes,
// strides, attribute values. Building the OpRecord those arguments describe and hashing its
// canonical encoding (skc::digest) costs about a microsecond, and a model calls the same few
// hundred op instances over and over. So a plugin keys every call by its raw arguments instead:
// CallKey copies them into at most `Words` 64-bit words on the stack, and CallMap remembers, once per distinct key,
// what the plugin derived from the arguments the first time (the record's digest, which the recorder and the
// KernelTable know).
//
// Exactness: CallMap compares the whole key, word for word, not only its hash, so two calls that
// differ in any word never share an entry. The plugin's side of the contract: the record must be a
// function of what went into the key (every argument the record depends on is added), and each key
// starts with something that fixes the sequence of additions after it (an op id). dims(), text()
// and tensor() write their lengths, so a key reads back unambiguously.
//
// Threads: CallMap::find() takes no lock and never allocates; emplace() inserts under a mutex.
// Entries never move and live as long as the map, so a pointer to a value stays valid.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "detail/hash.hpp"

namespace skc {

/// The raw arguments of one op call, packed into at most `Words` words. Adding past the capacity
/// sets ok() to false (the plugin then takes its slow path); nothing is ever written out of bounds.
template <std::size_t Words>
class BasicCallKey {
    static_assert(Words >= 4, "a call key needs room for at least four words");
    static_assert(sizeof(std::int64_t) == sizeof(std::uint64_t));

public:
    static constexpr std::size_t capacity = Words;

    /// One word as it is.
    constexpr BasicCallKey& word(std::uint64_t w) noexcept {
        if (std::uint64_t* p = reserve(1)) *p = w;
        return *this;
    }
    constexpr BasicCallKey& integer(std::int64_t v) noexcept { return word(static_cast<std::uint64_t>(v)); }
    constexpr BasicCallKey& boolean(bool b) noexcept { return word(b ? 1 : 0); }
    /// A double by its bits (so 0.0 and -0.0 are two keys; both map to whatever the plugin derives).
    constexpr BasicCallKey& real(double d) noexcept { return word(std::bit_cast<std::uint64_t>(d)); }

    /// A list of integers: its length, then the values.
    constexpr BasicCallKey& dims(std::span<const std::int64_t> v) noexcept {
        std::uint64_t* p = reserve(1 + v.size());
        if (p == nullptr) return *this;
        *p++ = v.size();
        copy(p, v);
        return *this;
    }

    /// A tensor: a dtype code of the plugin's choosing, its sizes and its strides (which may be
    /// empty, e.g. for a dense tensor), lengths first.
    constexpr BasicCallKey& tensor(std::uint32_t dtype, std::span<const std::int64_t> sizes,
                                   std::span<const std::int64_t> strides) noexcept {
        std::uint64_t* p = reserve(2 + sizes.size() + strides.size());
        if (p == nullptr) return *this;
        *p++ = (std::uint64_t{dtype} << 32) | sizes.size();
        *p++ = strides.size();
        p = copy(p, sizes);
        copy(p, strides);
        return *this;
    }

    /// A string: its length, then its bytes, eight to a word.
    constexpr BasicCallKey& text(std::string_view s) noexcept {
        std::uint64_t* p = reserve(1 + (s.size() + 7) / 8);
        if (p == nullptr) return *this;
        *p++ = s.size();
        for (std::size_t i = 0; i < s.size(); i += 8) {
            std::uint64_t w = 0;
            for (std::size_t k = 0; k < 8 && i + k < s.size(); ++k)
                w |= std::uint64_t{static_cast<unsigned char>(s[i + k])} << (8 * k);
            *p++ = w;
        }
        return *this;
    }

    /// False once an addition did not fit; such a key must not be looked up.
    [[nodiscard]] constexpr bool ok() const noexcept { return !overflow_; }
    /// Words held (an addition that did not fit added none).
    [[nodiscard]] constexpr std::size_t size() const noexcept { return size_; }
    [[nodiscard]] constexpr std::span<const std::uint64_t> words() const noexcept { return {words_, size_}; }

    /// A well-mixed 64-bit hash of the words (for bucket selection; equality compares the words).
    [[nodiscard]] constexpr std::uint64_t hash() const noexcept { return hash_words(words()); }

    static constexpr std::uint64_t hash_words(std::span<const std::uint64_t> w) noexcept {
        // Four independent lanes of multiply-rotate, so the multiplications overlap; fmix64 at the end.
        std::uint64_t a = 0x9e3779b97f4a7c15ULL ^ w.size(), b = 0xc2b2ae3d27d4eb4fULL, c = 0x165667b19e3779f9ULL,
                      d = 0x27d4eb2f165667c5ULL;
        std::size_t i = 0;
        for (; i + 4 <= w.size(); i += 4) {
            a = std::rotl((a ^ w[i]) * 0x87c37b91114253d5ULL, 31);
            b = std::rotl((b ^ w[i + 1]) * 0x4cf5ad432745937fULL, 33);
            c = std::rotl((c ^ w[i + 2]) * 0x87c37b91114253d5ULL, 29);
            d = std::rotl((d ^ w[i + 3]) * 0x4cf5ad432745937fULL, 27);
        }
        if (i < w.size()) a = std::rotl((a ^ w[i]) * 0x87c37b91114253d5ULL, 31);
        if (i + 1 < w.size()) b = std::rotl((b ^ w[i + 1]) * 0x4cf5ad432745937fULL, 33);
        if (i + 2 < w.size()) c = std::rotl((c ^ w[i + 2]) * 0x87c37b91114253d5ULL, 29);
        return detail::fmix64(a ^ std::rotl(b, 17) ^ std::rotl(c, 37) ^ std::rotl(d, 49));
    }

    friend constexpr bool operator==(const BasicCallKey& x, const BasicCallKey& y) noexcept {
        return x.ok() && y.ok() && same_words(x.words(), y.words());
    }

    /// Word-for-word equality.
    static constexpr bool same_words(std::span<const std::uint64_t> x, std::span<const std::uint64_t> y) noexcept {
        if (x.size() != y.size()) return false;
        if (std::is_constant_evaluated()) {
            for (std::size_t i = 0; i < x.size(); ++i)
                if (x[i] != y[i]) return false;
            return true;
        }
        return x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(std::uint64_t)) == 0;
    }

private:
    /// Room for n more words: where they go, or nullptr (and the key overflowed).
    constexpr std::uint64_t* reserve(std::size_t n) noexcept {
        if (overflow_ || n > Words - size_) {
            overflow_ = true;
            return nullptr;
        }
        std::uint64_t* p = words_ + size_;
        size_ += n;
        return p;
    }

    /// A plain loop: dims are a handful of values, fewer than a memcpy call costs.
    static constexpr std::uint64_t* copy(std::uint64_t* p, std::span<const std::int64_t> v) noexcept {
        for (std::int64_t x : v) *p++ = static_cast<std::uint64_t>(x);
        return p;
    }

    std::uint64_t words_[Words];  // only [0, size_) is ever read
    std::size_t size_ = 0;
    bool overflow_ = false;
};

/// Room for three rank-8 tensors with their strides, or a dozen small ones.
using CallKey = BasicCallKey<64>;

/// What a plugin derived once per distinct call key: key -> T. Lookups are lock-free and do not
/// allocate; inserts are serialised. Values are never moved or destroyed before the map.
template <class T, std::size_t Words = 64>
class CallMap {
public:
    using Key = BasicCallKey<Words>;

    CallMap() { publish(std::make_unique<Table>(initial_capacity)); }
    CallMap(const CallMap&) = delete;
    CallMap& operator=(const CallMap&) = delete;

    /// The value of `key`, or nullptr. Safe from any thread, also while another inserts.
    [[nodiscard]] const T* find(const Key& key) const noexcept {
        if (!key.ok()) return nullptr;
        return find_in(*current_.load(std::memory_order_acquire), key.words(), key.hash());
    }

    /// The value of `key`, made by `make()` (which returns a T, built in place) when the key is new. make() runs
    /// under the map's lock, at most once per key however many threads ask; when it throws,
    /// nothing is inserted and the exception propagates. A key that is not ok() is an error of the
    /// caller's (std::length_error).
    template <class Make>
    const T& emplace(const Key& key, Make&& make) {
        if (!key.ok()) throw std::length_error("skc::CallMap: the call key overflowed its capacity");
        const std::uint64_t h = key.hash();
        if (const T* v = find_in(*current_.load(std::memory_order_acquire), key.words(), h)) return *v;
        std::lock_guard lock(mu_);
        const Table* t = current_.load(std::memory_order_relaxed);
        if (const T* v = find_in(*t, key.words(), h)) return *v;  // inserted meanwhile
        EntryPtr e = Entry::make(h, key.words(), std::forward<Make>(make));
        if ((count_ + 1) * 2 > t->mask + 1) t = grow();
        insert_into(*t, e.get());
        ++count_;
        entries_.push_back(std::move(e));
        return entries_.back()->value;
    }

    /// Distinct keys held.
    [[nodiscard]] std::size_t size() const {
        std::lock_guard lock(mu_);
        return count_;
    }

    /// Calls `fn(const T&)` for every value, in insertion order (under the lock: no inserts meanwhile).
    template <class Fn>
    void for_each(Fn&& fn) const {
        std::lock_guard lock(mu_);
        for (const auto& e : entries_) fn(std::as_const(e->value));
    }

private:
    static constexpr std::size_t initial_capacity = 64;

    /// One key and its value, in one allocation: the header, the value, then the key's words (so a
    /// lookup reads one or two cache lines, not a second block).
    struct alignas(std::uint64_t) Entry {
        template <class Make>
        Entry(std::uint64_t h, std::size_t n, Make&& make) : hash(h), size(n), value(std::forward<Make>(make)()) {}
        Entry(const Entry&) = delete;
        Entry& operator=(const Entry&) = delete;

        /// A new entry holding a copy of `w`; the value is made in place (T need not be movable).
        template <class Make>
        static std::unique_ptr<Entry, void (*)(Entry*)> make(std::uint64_t h, std::span<const std::uint64_t> w,
                                                             Make&& make) {
            void* raw = ::operator new(sizeof(Entry) + w.size() * sizeof(std::uint64_t));
            Entry* e = nullptr;
            try {
                e = ::new (raw) Entry(h, w.size(), std::forward<Make>(make));
            } catch (...) {
                ::operator delete(raw);
                throw;
            }
            std::uninitialized_copy(w.begin(), w.end(), e->words_begin());
            return {e, [](Entry* x) {
                        x->~Entry();
                        ::operator delete(static_cast<void*>(x));
                    }};
        }

        [[nodiscard]] std::uint64_t* words_begin() noexcept {
            return reinterpret_cast<std::uint64_t*>(reinterpret_cast<unsigned char*>(this) + sizeof(Entry));
        }
        [[nodiscard]] std::span<const std::uint64_t> words() const noexcept {
            return {
                reinterpret_cast<const std::uint64_t*>(reinterpret_cast<const unsigned char*>(this) + sizeof(Entry)),
                size};
        }

        std::uint64_t hash;
        std::size_t size;
        T value;
    };
    static_assert(alignof(Entry) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "skc::CallMap: an over-aligned value type");
    using EntryPtr = std::unique_ptr<Entry, void (*)(Entry*)>;
    struct Table {
        explicit Table(std::size_t cap) : mask(cap - 1), slots(new std::atomic<const Entry*>[cap]) {
            for (std::size_t i = 0; i < cap; ++i) slots[i].store(nullptr, std::memory_order_relaxed);
        }
        std::size_t mask;
        std::unique_ptr<std::atomic<const Entry*>[]> slots;
    };

    static const T* find_in(const Table& t, std::span<const std::uint64_t> w, std::uint64_t h) noexcept {
        for (std::size_t i = static_cast<std::size_t>(h) & t.mask;; i = (i + 1) & t.mask) {
            const Entry* e = t.slots[i].load(std::memory_order_acquire);
            if (e == nullptr) return nullptr;
            if (e->hash == h && Key::same_words(e->words(), w)) return &e->value;
        }
    }

    static void insert_into(const Table& t, const Entry* e) noexcept {
        std::size_t i = static_cast<std::size_t>(e->hash) & t.mask;
        while (t.slots[i].load(std::memory_order_relaxed) != nullptr) i = (i + 1) & t.mask;
        t.slots[i].store(e, std::memory_order_release);
    }

    /// A table twice the size with every entry; the old one stays readable (readers may hold it).
    const Table* grow() {
        auto t = std::make_unique<Table>(2 * (current_.load(std::memory_order_relaxed)->mask + 1));
        for (const auto& e : entries_) insert_into(*t, e.get());
        return publish(std::move(t));
    }

    const Table* publish(std::unique_ptr<Table> t) {
        const Table* p = t.get();
        tables_.push_back(std::move(t));
        current_.store(p, std::memory_order_release);
        return p;
    }

    std::atomic<const Table*> current_{nullptr};
    mutable std::mutex mu_;
    std::size_t count_ = 0;
    std::vector<EntryPtr> entries_;               // insertion order
    std::vector<std::unique_ptr<Table>> tables_;  // every table published; the last is current
};

}  // namespace skc
