// skc/value.hpp: skc::Value, a JSON value that needs no JSON library.
//
// Op records keep what skc does not interpret (unknown fields, attr values, const_data,
// extra_params) as Values, so they round-trip exactly and count in the op's identity, while only
// op_info_io.hpp depends on a JSON parser. Objects keep their members in insertion order (files are
// written back in the order they were read); the canonical encoding sorts them. Integers are kept
// as int64 unless they only fit in uint64.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "config.hpp"
#include "detail/canon.hpp"

namespace skc {

struct Member;
class Value;
using Array = std::vector<Value>;
using Object = std::vector<Member>;

enum class Kind : unsigned char { null, boolean, integer, unsigned_integer, number, string, array, object };

constexpr std::string_view to_string(Kind k) noexcept {
    switch (k) {
    case Kind::null: return "null";
    case Kind::boolean: return "boolean";
    case Kind::integer: return "integer";
    case Kind::unsigned_integer: return "integer";
    case Kind::number: return "number";
    case Kind::string: return "string";
    case Kind::array: return "array";
    case Kind::object: return "object";
    }
    return "unknown";
}

class Value {
public:
    // Constructors are defined after Member is complete (a variant over vector<Member> needs it).
    SKC_CONSTEXPR_RECORD Value() noexcept;
    SKC_CONSTEXPR_RECORD Value(std::nullptr_t) noexcept;
    SKC_CONSTEXPR_RECORD Value(bool b);
    template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool> && !std::is_same_v<I, char>) SKC_CONSTEXPR_RECORD
        Value(I i);
    SKC_CONSTEXPR_RECORD Value(double d);
    SKC_CONSTEXPR_RECORD Value(std::string s);
    SKC_CONSTEXPR_RECORD Value(std::string_view s);
    SKC_CONSTEXPR_RECORD Value(const char* s);
    SKC_CONSTEXPR_RECORD Value(Array a);
    SKC_CONSTEXPR_RECORD Value(Object o);

    [[nodiscard]] SKC_CONSTEXPR_RECORD Kind kind() const noexcept { return static_cast<Kind>(v_.index()); }
    [[nodiscard]] SKC_CONSTEXPR_RECORD bool is_null() const noexcept { return kind() == Kind::null; }
    [[nodiscard]] SKC_CONSTEXPR_RECORD bool is_bool() const noexcept { return kind() == Kind::boolean; }
    /// True for any integer, signed or unsigned.
    [[nodiscard]] SKC_CONSTEXPR_RECORD bool is_integer() const noexcept {
        return kind() == Kind::integer || kind() == Kind::unsigned_integer;
    }
    [[nodiscard]] SKC_CONSTEXPR_RECORD bool is_number() const noexcept {
        return is_integer() || kind() == Kind::number;
    }
    [[nodiscard]] SKC_CONSTEXPR_RECORD bool is_string() const noexcept { return kind() == Kind::string; }
    [[nodiscard]] SKC_CONSTEXPR_RECORD bool is_array() const noexcept { return kind() == Kind::array; }
    [[nodiscard]] SKC_CONSTEXPR_RECORD bool is_object() const noexcept { return kind() == Kind::object; }

    // Accessors: the caller checks the kind first (std::get throws std::bad_variant_access otherwise).
    [[nodiscard]] SKC_CONSTEXPR_RECORD bool as_bool() const { return std::get<bool>(v_); }
    [[nodiscard]] SKC_CONSTEXPR_RECORD std::int64_t as_int() const { return std::get<std::int64_t>(v_); }
    [[nodiscard]] SKC_CONSTEXPR_RECORD std::uint64_t as_uint() const { return std::get<std::uint64_t>(v_); }
    [[nodiscard]] SKC_CONSTEXPR_RECORD double as_double() const {
        switch (kind()) {
        case Kind::integer: return static_cast<double>(as_int());
        case Kind::unsigned_integer: return static_cast<double>(as_uint());
        default: return std::get<double>(v_);
        }
    }
    [[nodiscard]] SKC_CONSTEXPR_RECORD const std::string& as_string() const { return std::get<std::string>(v_); }
    [[nodiscard]] SKC_CONSTEXPR_RECORD const Array& as_array() const { return std::get<Array>(v_); }
    [[nodiscard]] SKC_CONSTEXPR_RECORD Array& as_array() { return std::get<Array>(v_); }
    [[nodiscard]] SKC_CONSTEXPR_RECORD const Object& as_object() const { return std::get<Object>(v_); }
    [[nodiscard]] SKC_CONSTEXPR_RECORD Object& as_object() { return std::get<Object>(v_); }

    /// The member named `key` of an object, or nullptr (also when this is not an object).
    [[nodiscard]] SKC_CONSTEXPR_RECORD const Value* find(std::string_view key) const;

    friend SKC_CONSTEXPR_RECORD bool operator==(const Value& a, const Value& b);

private:
    std::variant<std::nullptr_t, bool, std::int64_t, std::uint64_t, double, std::string, Array, Object> v_;
};

struct Member {
    std::string key;
    Value value;
};

SKC_CONSTEXPR_RECORD bool operator==(const Member& a, const Member& b) { return a.key == b.key && a.value == b.value; }

SKC_CONSTEXPR_RECORD Value::Value() noexcept : v_(nullptr) {}
SKC_CONSTEXPR_RECORD Value::Value(std::nullptr_t) noexcept : v_(nullptr) {}
SKC_CONSTEXPR_RECORD Value::Value(bool b) : v_(b) {}
template <class I>
requires(std::is_integral_v<I> && !std::is_same_v<I, bool> &&
         !std::is_same_v<I, char>) SKC_CONSTEXPR_RECORD Value::Value(I i) {
    if constexpr (std::is_signed_v<I>) {
        v_ = static_cast<std::int64_t>(i);
    } else if (static_cast<std::uint64_t>(i) <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        v_ = static_cast<std::int64_t>(i);
    } else {
        v_ = static_cast<std::uint64_t>(i);
    }
}
SKC_CONSTEXPR_RECORD Value::Value(double d) : v_(d) {}
SKC_CONSTEXPR_RECORD Value::Value(std::string s) : v_(std::move(s)) {}
SKC_CONSTEXPR_RECORD Value::Value(std::string_view s) : v_(std::in_place_type<std::string>, s.begin(), s.end()) {}
SKC_CONSTEXPR_RECORD Value::Value(const char* s) : v_(std::in_place_type<std::string>, s) {}
SKC_CONSTEXPR_RECORD Value::Value(Array a) : v_(std::move(a)) {}
SKC_CONSTEXPR_RECORD Value::Value(Object o) : v_(std::move(o)) {}

SKC_CONSTEXPR_RECORD const Value* Value::find(std::string_view key) const {
    if (!is_object()) return nullptr;
    for (const Member& m : as_object())
        if (m.key == key) return &m.value;
    return nullptr;
}

/// The string member `key` of `object`; empty when it is absent or not a string (how the messages
/// and files skc reads take their optional text fields).
inline std::string string_member(const Value& object, std::string_view key) {
    const Value* v = object.find(key);
    return v && v->is_string() ? v->as_string() : std::string();
}

/// Equality of content: objects are equal when they hold the same members in any order.
SKC_CONSTEXPR_RECORD bool operator==(const Value& a, const Value& b) {
    if (a.kind() != b.kind()) return false;
    if (!a.is_object()) return a.v_ == b.v_;
    const Object& x = a.as_object();
    const Object& y = b.as_object();
    if (x.size() != y.size()) return false;
    for (const Member& m : x) {
        const Value* other = b.find(m.key);
        if (other == nullptr || !(*other == m.value)) return false;
    }
    return true;
}

namespace detail {

/// Members of an object in canonical (bytewise key) order.
SKC_CONSTEXPR_RECORD std::vector<const Member*> sorted_members(const Object& o) {
    std::vector<const Member*> order;
    order.reserve(o.size());
    for (const Member& m : o) order.push_back(&m);
    std::sort(order.begin(), order.end(), [](const Member* a, const Member* b) { return a->key < b->key; });
    return order;
}

template <class Sink>
SKC_CONSTEXPR_RECORD void encode_value(Sink& s, const Value& v) {
    switch (v.kind()) {
    case Kind::null: canon::put_null(s); return;
    case Kind::boolean: canon::put_bool(s, v.as_bool()); return;
    case Kind::integer: canon::put_int(s, v.as_int()); return;
    case Kind::unsigned_integer: canon::put_uint(s, v.as_uint()); return;
    case Kind::number: canon::put_double(s, v.as_double()); return;
    case Kind::string: canon::put_string(s, v.as_string()); return;
    case Kind::array:
        canon::begin_array(s, v.as_array().size());
        for (const Value& e : v.as_array()) encode_value(s, e);
        return;
    case Kind::object: {
        canon::begin_object(s, v.as_object().size());
        for (const Member* m : sorted_members(v.as_object())) {
            canon::put_key(s, m->key);
            encode_value(s, m->value);
        }
        return;
    }
    }
}

}  // namespace detail
}  // namespace skc
