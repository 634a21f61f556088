// skc/op_record.hpp: OpRecord, the content of one op info file, and its identity.
//
// An OpRecord holds every field of an op info file (docs/spec.md section 5) typed, plus every field skc
// does not know, kept as a Value so it round-trips and counts in the identity. Absent and empty
// are different (an absent `attrs` is not `"attrs": []`).
//
// Identity: canonical_bytes() encodes the record as the JSON object it is (see detail/canon.hpp:
// keys sorted, typed numbers, lengths before contents), so key order and white space in a file
// never matter. digest() is the 128-bit hash of those bytes (detail/hash.hpp). `bin_type` and
// `bin_info` are left out of both: they say which kernel ran when the op was recorded (they are
// only written to `<pid>` and `<pid>_debug`), not what the op is, so an op recorded before and
// after its static kernel was installed is one op.
//
// record_from_value() checks a parsed document and reports the first fault with its JSON path;
// validate() checks the rules that do not depend on JSON types (names usable in file names,
// non-negative dims, element counts that fit in 64 bits) and is run on records built in code too.
//
// The canonical encoding and digest() are in op_record_digest.hpp, to_value() and
// record_from_value() in op_record_value.hpp; this header includes both at its end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "config.hpp"
#include "detail/names.hpp"
#include "detail/text.hpp"
#include "error.hpp"
#include "shape.hpp"
#include "value.hpp"

namespace skc {

enum class ParamType : unsigned char { required, optional, dynamic };

constexpr std::string_view to_string(ParamType p) noexcept {
    switch (p) {
    case ParamType::required: return "required";
    case ParamType::optional: return "optional";
    case ParamType::dynamic: return "dynamic";
    }
    return {};
}

/// One tensor of an op: an input, an output, or one element of a dynamic (list) parameter.
struct TensorDesc {
    std::optional<std::string> name;
    std::optional<std::int64_t> index;
    std::optional<ParamType> param_type;
    std::string dtype;   // required; e.g. "float", "float16"; unknown names are kept
    RuntimeShape shape;  // required; storage shape
    std::string format;  // required; e.g. "ND"
    std::optional<std::int64_t> sub_format;
    std::optional<Value> c0_format;
    std::optional<RuntimeShape> origin_shape;
    std::optional<std::string> origin_format;
    std::optional<Value> value_depend;
    std::optional<bool> is_view;
    std::optional<RuntimeShape> stride;  // views only
    std::optional<std::int64_t> offset;  // views only
    std::optional<Value> const_data;     // values of a value-dependent input: part of the identity
    Object extra;                        // fields skc does not know, in file order

    friend SKC_CONSTEXPR_RECORD bool operator==(const TensorDesc&, const TensorDesc&) = default;
};

/// One declared parameter: absent (null), one tensor, or a dynamic list of tensors.
using TensorSlot = std::variant<std::monostate, TensorDesc, std::vector<TensorDesc>>;

struct Attr {
    std::string name;
    std::string dtype;  // "bool", "int", "float", "str", "list_int", ...: kept as written
    std::optional<std::int64_t> index;
    Value value;
    Object extra;

    friend SKC_CONSTEXPR_RECORD bool operator==(const Attr&, const Attr&) = default;
};

struct PlatformInfo {
    std::optional<std::int64_t> vector_core_cnt;
    std::optional<std::int64_t> cube_core_cnt;
    Object extra;

    friend SKC_CONSTEXPR_RECORD bool operator==(const PlatformInfo&, const PlatformInfo&) = default;
};

struct OpRecord {
    std::string op_type;
    std::vector<TensorSlot> inputs;
    std::vector<TensorSlot> outputs;
    std::optional<std::vector<Attr>> attrs;
    std::optional<std::string> tune_mode;
    std::optional<PlatformInfo> platform_info;
    std::optional<std::string> impl_mode;
    std::optional<std::string> deterministic;  // "true" or "false", as the files spell it
    std::optional<std::int64_t> deterministic_level;
    std::optional<Value> extra_params;     // communication ops
    std::optional<std::int64_t> bin_type;  // 0 static, 1 dynamic; not part of the identity
    std::optional<Value> bin_info;         // the kernel object used; not part of the identity
    Object extra;

    friend SKC_CONSTEXPR_RECORD bool operator==(const OpRecord&, const OpRecord&) = default;

    /// The tensor whose dtype, format and shape name the file: input 0, or its first element
    /// when input 0 is a list. Falls back to the first present input, then nullptr.
    [[nodiscard]] SKC_CONSTEXPR_RECORD const TensorDesc* naming_tensor() const noexcept {
        for (const TensorSlot& slot : inputs) {
            if (const auto* t = std::get_if<TensorDesc>(&slot)) return t;
            if (const auto* list = std::get_if<std::vector<TensorDesc>>(&slot); list && !list->empty())
                return &list->front();
        }
        return nullptr;
    }

    /// naming_tensor() with its JSON path (`inputs[1]`, `inputs[0][0]`); {nullptr, ""} when none.
    [[nodiscard]] std::pair<const TensorDesc*, std::string> naming_tensor_at() const {
        for (std::size_t i = 0; i < inputs.size(); ++i) {
            const std::string at = "inputs[" + std::to_string(i) + "]";
            if (const auto* t = std::get_if<TensorDesc>(&inputs[i])) return {t, at};
            if (const auto* list = std::get_if<std::vector<TensorDesc>>(&inputs[i]); list && !list->empty())
                return {&list->front(), at + "[0]"};
        }
        return {nullptr, {}};
    }
};

// ---- building records at run time ---------------------------------------------------------------

/// A plain tensor as a framework describes a live one (the fields real op info dumps of plain
/// tensors carry): storage and origin shape the same, format and origin format `ND`.
inline TensorDesc plain_tensor(RuntimeShape shape, std::string dtype = "float") {
    TensorDesc t;
    t.dtype = std::move(dtype);
    t.format = "ND";
    t.origin_shape = shape;
    t.origin_format = "ND";
    t.shape = std::move(shape);
    return t;
}

/// The same, as parameter `name` at `index` of its op (a required parameter).
inline TensorDesc plain_tensor(std::string name, std::int64_t index, RuntimeShape shape, std::string dtype = "float") {
    TensorDesc t = plain_tensor(std::move(shape), std::move(dtype));
    t.name = std::move(name);
    t.index = index;
    t.param_type = ParamType::required;
    return t;
}

/// An op of `op_type` with these inputs, outputs and attributes (`attrs` is set, an empty list when
/// there are none); the record-level fields (tune mode, platform, ...) are left unset.
inline OpRecord make_op(std::string op_type, std::vector<TensorSlot> inputs, std::vector<TensorSlot> outputs,
                        std::vector<Attr> attrs = {}) {
    OpRecord r;
    r.op_type = std::move(op_type);
    r.inputs = std::move(inputs);
    r.outputs = std::move(outputs);
    r.attrs = std::move(attrs);
    return r;
}

/// The record without bin_type and bin_info, as written to `<pid>_opcompile` and below.
inline OpRecord without_bin_fields(OpRecord r) {
    r.bin_type.reset();
    r.bin_info.reset();
    return r;
}

// ---- names ---------------------------------------------------------------------------------------

/// Op types, dtypes and formats become parts of file names, so they must be non-empty, at most 128
/// characters, and made of letters, digits and '_' only.
constexpr bool is_safe_name(std::string_view s) noexcept {
    if (s.empty() || s.size() > 128) return false;
    for (char c : s)
        if (!detail::is_alnum(c) && c != '_') return false;
    return true;
}

namespace detail {

inline std::string path_join(std::string_view base, std::string_view field) {
    if (base.empty()) return std::string(field);
    std::string out(base);
    out += '.';
    out += field;
    return out;
}

inline std::string path_index(std::string_view base, std::size_t i) {
    return std::string(base) + "[" + std::to_string(i) + "]";
}

[[noreturn]] inline void fail(Errc code, const std::string& path, std::string message) {
    throw Error(code, std::move(message), ErrorContext{{}, path, {}});
}

}  // namespace detail

// ---- validation ------------------------------------------------------------------------------------

namespace detail {

inline void validate_name(std::string_view value, const std::string& path, std::string_view what) {
    if (!is_safe_name(value))
        fail(Errc::invalid_name, path,
             std::string(what) + " " + quote(value) +
                 " cannot be used in a file name: accepted are 1 to 128 letters, digits and '_'");
}

inline void validate_dims(const RuntimeShape& s, const std::string& path, bool need_count) {
    if (s.rank() > max_rank)
        fail(Errc::limit_exceeded, path,
             "rank " + std::to_string(s.rank()) + " exceeds the maximum rank " + std::to_string(max_rank));
    for (std::size_t i = 0; i < s.rank(); ++i)
        if (s[i] < 0)
            fail(Errc::invalid_op_info, path_index(path, i),
                 "dim " + std::to_string(s[i]) + " is negative: dims must be >= 0");
    if (need_count && !s.element_count()) fail(Errc::limit_exceeded, path, "element count overflows 64 bits");
}

/// Objects inside a Value must not repeat a key (the identity would be ambiguous). Values read from
/// files are checked by the parser; this catches Values built in code.
inline void validate_keys(const Value& v, const std::string& path) {
    if (v.is_array()) {
        for (std::size_t i = 0; i < v.as_array().size(); ++i) validate_keys(v.as_array()[i], path_index(path, i));
    } else if (v.is_object()) {
        const std::vector<const Member*> sorted = sorted_members(v.as_object());
        for (std::size_t i = 1; i < sorted.size(); ++i)
            if (sorted[i]->key == sorted[i - 1]->key)
                fail(Errc::invalid_op_info, path, "duplicate key " + quote(sorted[i]->key) + " in one object");
        for (const Member& m : v.as_object()) validate_keys(m.value, path_join(path, m.key));
    }
}

inline void validate_extra(const Object& extra, std::initializer_list<std::string_view> known,
                           const std::string& path) {
    const std::vector<const Member*> sorted = sorted_members(extra);
    for (std::size_t i = 1; i < sorted.size(); ++i)
        if (sorted[i]->key == sorted[i - 1]->key)
            fail(Errc::invalid_op_info, path, "duplicate key " + quote(sorted[i]->key) + " in one object");
    for (const Member& m : extra) validate_keys(m.value, path_join(path, m.key));
    for (const Member& m : extra)
        for (std::string_view k : known)
            if (m.key == k)
                fail(Errc::invalid_op_info, path_join(path, m.key),
                     "field " + quote(m.key) +
                         " is known and must be set through its typed member, not as an extra field");
}

inline void validate_tensor(const TensorDesc& t, const std::string& path) {
    validate_name(t.dtype, path_join(path, "dtype"), "dtype");
    validate_name(t.format, path_join(path, "format"), "format");
    validate_dims(t.shape, path_join(path, "shape"), true);
    if (t.origin_shape) validate_dims(*t.origin_shape, path_join(path, "origin_shape"), true);
    if (t.stride) validate_dims(*t.stride, path_join(path, "stride"), false);
    if (t.c0_format) validate_keys(*t.c0_format, path_join(path, "c0_format"));
    if (t.value_depend) validate_keys(*t.value_depend, path_join(path, "value_depend"));
    if (t.const_data) validate_keys(*t.const_data, path_join(path, "const_data"));
    if (t.offset && *t.offset < 0)
        fail(Errc::invalid_op_info, path_join(path, "offset"), "offset " + std::to_string(*t.offset) + " is negative");
    validate_extra(t.extra,
                   {"name", "index", "param_type", "dtype", "shape", "format", "sub_format", "c0_format",
                    "origin_shape", "origin_format", "value_depend", "is_view", "stride", "offset", "const_data"},
                   path);
}

inline void validate_slots(const std::vector<TensorSlot>& slots, const std::string& path) {
    for (std::size_t i = 0; i < slots.size(); ++i) {
        const std::string p = path_index(path, i);
        if (const auto* t = std::get_if<TensorDesc>(&slots[i])) validate_tensor(*t, p);
        if (const auto* list = std::get_if<std::vector<TensorDesc>>(&slots[i]))
            for (std::size_t j = 0; j < list->size(); ++j) validate_tensor((*list)[j], path_index(p, j));
    }
}

}  // namespace detail

/// Checks the rules a record must meet to be written, named and compiled. Throws skc::Error with
/// the JSON path of the first fault.
inline void validate(const OpRecord& r) {
    detail::validate_name(r.op_type, "op_type", "op type");
    detail::validate_slots(r.inputs, "inputs");
    detail::validate_slots(r.outputs, "outputs");
    if (r.deterministic && *r.deterministic != "true" && *r.deterministic != "false")
        detail::fail(Errc::invalid_op_info, "deterministic",
                     "value " + detail::quote(*r.deterministic) + " is not accepted: use \"true\" or \"false\"");
    if (r.attrs)
        for (std::size_t i = 0; i < r.attrs->size(); ++i) {
            const std::string at = detail::path_index("attrs", i);
            detail::validate_keys((*r.attrs)[i].value, detail::path_join(at, "value"));
            detail::validate_extra((*r.attrs)[i].extra, {"name", "dtype", "index", "value"}, at);
        }
    if (r.extra_params) detail::validate_keys(*r.extra_params, "extra_params");
    if (r.bin_info) detail::validate_keys(*r.bin_info, "bin_info");
    if (r.platform_info)
        detail::validate_extra(r.platform_info->extra, {"vector_core_cnt", "cube_core_cnt"}, "platform_info");
    detail::validate_extra(r.extra,
                           {"op_type", "inputs", "outputs", "attrs", "tune_mode", "platform_info", "impl_mode",
                            "deterministic", "deterministic_level", "extra_params", "bin_type", "bin_info"},
                           "");
}

}  // namespace skc

// The identity of a record and its JSON document, each in a header of its own.
#include "op_record_digest.hpp"
#include "op_record_value.hpp"
