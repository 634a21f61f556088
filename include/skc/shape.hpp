// skc/shape.hpp: tensor shapes, at compile time and at run time.
//
// `Shape<1, 2048>` is a compile-time shape built on Boost.Hana: its dims are a hana::tuple of
// integral constants, so rank, dims and element count are constant expressions; a dynamic dim is
// marked explicitly with `skc::dyn`, and a shape with one has no element count (asking for it is
// a compile error). `RuntimeShape` holds the dims of a recorded tensor: up to rank 8 they live
// inline (no heap); larger ranks spill to the heap. Element counts are overflow-checked in both.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <span>

#include <boost/hana/any_of.hpp>
#include <boost/hana/fold_left.hpp>
#include <boost/hana/integral_constant.hpp>
#include <boost/hana/tuple.hpp>

#include "config.hpp"

namespace skc {

/// Marks a dimension whose size is not known at compile time.
inline constexpr std::int64_t dyn = -1;

/// The largest rank skc accepts from a file (real devices use at most 8).
inline constexpr std::size_t max_rank = 64;

namespace detail {

/// a * b for non-negative a and b, or nullopt when the product does not fit in int64.
constexpr std::optional<std::int64_t> checked_mul(std::int64_t a, std::int64_t b) noexcept {
    if (a < 0 || b < 0) return std::nullopt;
    if (a != 0 && b > std::numeric_limits<std::int64_t>::max() / a) return std::nullopt;
    return a * b;
}

}  // namespace detail

/// A compile-time shape. Each dim is >= 0 or `skc::dyn`.
template <std::int64_t... Dims>
struct Shape {
    static_assert(((Dims >= 0 || Dims == dyn) && ...), "skc::Shape: each dim must be >= 0 or skc::dyn");

    /// The dims as a hana::tuple of hana::llong integral constants.
    static constexpr auto dims = boost::hana::make_tuple(boost::hana::llong_c<Dims>...);
    static constexpr std::size_t rank = sizeof...(Dims);
    /// True when no dim is `skc::dyn`.
    static constexpr bool is_static =
        !boost::hana::any_of(dims, [](auto d) { return boost::hana::bool_c<decltype(d)::value == dyn>; });
    /// The dims as an array (for loops and for building run-time shapes).
    static constexpr std::array<std::int64_t, rank> array{Dims...};

    /// Number of elements; a compile error for a shape with a dynamic dim or one whose element
    /// count overflows int64.
    static constexpr std::int64_t element_count() noexcept requires is_static {
        if constexpr (((Dims == 0) || ...)) return 0;  // zero elements, whatever the other dims
        constexpr std::optional<std::int64_t> n =
            boost::hana::fold_left(dims, std::optional<std::int64_t>{1}, [](std::optional<std::int64_t> acc, auto d) {
                return acc ? detail::checked_mul(*acc, decltype(d)::value) : acc;
            });
        static_assert(((Dims == 0) || ...) || n.has_value(), "skc::Shape: element count overflows 64 bits");
        return n.value_or(0);
    }
};

/// The dims of a tensor known at run time. No heap allocation up to rank 8.
class RuntimeShape {
public:
    static constexpr std::size_t inline_rank = 8;

    SKC_CONSTEXPR_RECORD RuntimeShape() noexcept = default;
    SKC_CONSTEXPR_RECORD RuntimeShape(std::initializer_list<std::int64_t> dims) { assign(dims.begin(), dims.size()); }
    SKC_CONSTEXPR_RECORD explicit RuntimeShape(std::span<const std::int64_t> dims) { assign(dims.data(), dims.size()); }
    template <std::int64_t... Dims>
    SKC_CONSTEXPR_RECORD explicit RuntimeShape(Shape<Dims...>) {
        assign(Shape<Dims...>::array.data(), Shape<Dims...>::rank);
    }

    SKC_CONSTEXPR_RECORD RuntimeShape(const RuntimeShape& o) { assign(o.data(), o.rank_); }
    SKC_CONSTEXPR_RECORD RuntimeShape(RuntimeShape&& o) noexcept { take(o); }
    SKC_CONSTEXPR_RECORD RuntimeShape& operator=(const RuntimeShape& o) {
        if (this != &o) assign(o.data(), o.rank_);
        return *this;
    }
    SKC_CONSTEXPR_RECORD RuntimeShape& operator=(RuntimeShape&& o) noexcept {
        if (this != &o) {
            release();
            take(o);
        }
        return *this;
    }
    SKC_CONSTEXPR_RECORD ~RuntimeShape() { release(); }

    [[nodiscard]] SKC_CONSTEXPR_RECORD std::size_t rank() const noexcept { return rank_; }
    [[nodiscard]] SKC_CONSTEXPR_RECORD bool empty() const noexcept { return rank_ == 0; }
    [[nodiscard]] SKC_CONSTEXPR_RECORD const std::int64_t* data() const noexcept {
        return heap_ ? heap_ : inline_.data();
    }
    [[nodiscard]] SKC_CONSTEXPR_RECORD std::int64_t* data() noexcept { return heap_ ? heap_ : inline_.data(); }
    [[nodiscard]] SKC_CONSTEXPR_RECORD const std::int64_t* begin() const noexcept { return data(); }
    [[nodiscard]] SKC_CONSTEXPR_RECORD const std::int64_t* end() const noexcept { return data() + rank_; }
    [[nodiscard]] SKC_CONSTEXPR_RECORD std::int64_t operator[](std::size_t i) const noexcept { return data()[i]; }
    [[nodiscard]] SKC_CONSTEXPR_RECORD std::int64_t& operator[](std::size_t i) noexcept { return data()[i]; }
    /// True when the dims live on the heap (rank above inline_rank).
    [[nodiscard]] SKC_CONSTEXPR_RECORD bool on_heap() const noexcept { return heap_ != nullptr; }

    SKC_CONSTEXPR_RECORD void push_back(std::int64_t d) {
        if (rank_ < inline_rank && heap_ == nullptr) {
            inline_[rank_++] = d;
            return;
        }
        if (rank_ == capacity_()) grow(rank_ * 2);
        heap_[rank_++] = d;
    }

    /// Product of the dims (1 for rank 0); nullopt when a dim is negative or the product
    /// overflows int64.
    [[nodiscard]] SKC_CONSTEXPR_RECORD std::optional<std::int64_t> element_count() const noexcept {
        bool zero = false;
        for (std::int64_t d : *this) {
            if (d < 0) return std::nullopt;
            zero = zero || d == 0;
        }
        if (zero) return 0;  // whatever the other dims, and in any order
        std::optional<std::int64_t> n = 1;
        for (std::int64_t d : *this) {
            n = detail::checked_mul(*n, d);
            if (!n) return n;
        }
        return n;
    }

    friend SKC_CONSTEXPR_RECORD bool operator==(const RuntimeShape& a, const RuntimeShape& b) noexcept {
        if (a.rank_ != b.rank_) return false;
        for (std::size_t i = 0; i < a.rank_; ++i)
            if (a[i] != b[i]) return false;
        return true;
    }

private:
    SKC_CONSTEXPR_RECORD std::size_t capacity_() const noexcept { return heap_ ? heap_cap_ : inline_rank; }

    SKC_CONSTEXPR_RECORD void grow(std::size_t cap) {
        std::allocator<std::int64_t> alloc;
        std::int64_t* fresh = alloc.allocate(cap);
        for (std::size_t i = 0; i < cap; ++i) std::construct_at(fresh + i, i < rank_ ? data()[i] : 0);
        release_heap_only();
        heap_ = fresh;
        heap_cap_ = cap;
    }

    SKC_CONSTEXPR_RECORD void assign(const std::int64_t* p, std::size_t n) {
        release();
        if (n > inline_rank) grow(n);
        for (std::size_t i = 0; i < n; ++i) data()[i] = p[i];
        rank_ = n;
    }

    SKC_CONSTEXPR_RECORD void take(RuntimeShape& o) noexcept {
        inline_ = o.inline_;
        heap_ = o.heap_;
        heap_cap_ = o.heap_cap_;
        rank_ = o.rank_;
        o.heap_ = nullptr;
        o.heap_cap_ = 0;
        o.rank_ = 0;
    }

    SKC_CONSTEXPR_RECORD void release_heap_only() noexcept {
        if (heap_ != nullptr) {
            std::allocator<std::int64_t>().deallocate(heap_, heap_cap_);
            heap_ = nullptr;
            heap_cap_ = 0;
        }
    }

    SKC_CONSTEXPR_RECORD void release() noexcept {
        release_heap_only();
        rank_ = 0;
    }

    std::array<std::int64_t, inline_rank> inline_{};
    std::int64_t* heap_ = nullptr;
    std::size_t heap_cap_ = 0;
    std::size_t rank_ = 0;
};

}  // namespace skc
