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
#include "detail/canon.hpp"
#include "detail/hash.hpp"
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

// ---- canonical encoding and digest ---------------------------------------------------------------

namespace detail {

/// Emits an object's members in canonical order: the caller names its known fields in sorted key
/// order with field(); extra (unknown) members are merged in at their sorted places.
template <class Sink>
class ObjectEmitter {
public:
    SKC_CONSTEXPR_RECORD ObjectEmitter(Sink& s, const Object& extra, std::size_t known_count) : s_(s) {
        if (!extra.empty()) extras_ = sorted_members(extra);  // most objects have no unknown fields
        canon::begin_object(s_, known_count + extras_.size());
    }
    template <class Emit>
    SKC_CONSTEXPR_RECORD void field(std::string_view key, bool present, Emit&& emit) {
        if (!present) return;
        flush_before(key);
        canon::put_key(s_, key);
        emit();
    }
    SKC_CONSTEXPR_RECORD void finish() {
        for (; next_ < extras_.size(); ++next_) emit_extra(*extras_[next_]);
    }

private:
    SKC_CONSTEXPR_RECORD void flush_before(std::string_view key) {
        for (; next_ < extras_.size() && std::string_view(extras_[next_]->key) < key; ++next_)
            emit_extra(*extras_[next_]);
    }
    SKC_CONSTEXPR_RECORD void emit_extra(const Member& m) {
        canon::put_key(s_, m.key);
        encode_value(s_, m.value);
    }

    Sink& s_;
    std::vector<const Member*> extras_;
    std::size_t next_ = 0;
};

template <class Sink>
SKC_CONSTEXPR_RECORD void encode_dims(Sink& s, const RuntimeShape& shape) {
    canon::begin_array(s, shape.rank());
    for (std::int64_t d : shape) canon::put_int(s, d);
}

template <class... Opts>
SKC_CONSTEXPR_RECORD std::size_t count_present(const Opts&... o) {
    return (std::size_t{0} + ... + static_cast<std::size_t>(o.has_value()));
}

template <class Sink>
SKC_CONSTEXPR_RECORD void encode_tensor(Sink& s, const TensorDesc& t) {
    const std::size_t known =
        3 + count_present(t.name, t.index, t.param_type, t.sub_format, t.c0_format, t.origin_shape, t.origin_format,
                          t.value_depend, t.is_view, t.stride, t.offset, t.const_data);
    ObjectEmitter<Sink> o(s, t.extra, known);
    o.field("c0_format", t.c0_format.has_value(), [&] { encode_value(s, *t.c0_format); });
    o.field("const_data", t.const_data.has_value(), [&] { encode_value(s, *t.const_data); });
    o.field("dtype", true, [&] { canon::put_string(s, t.dtype); });
    o.field("format", true, [&] { canon::put_string(s, t.format); });
    o.field("index", t.index.has_value(), [&] { canon::put_int(s, *t.index); });
    o.field("is_view", t.is_view.has_value(), [&] { canon::put_bool(s, *t.is_view); });
    o.field("name", t.name.has_value(), [&] { canon::put_string(s, *t.name); });
    o.field("offset", t.offset.has_value(), [&] { canon::put_int(s, *t.offset); });
    o.field("origin_format", t.origin_format.has_value(), [&] { canon::put_string(s, *t.origin_format); });
    o.field("origin_shape", t.origin_shape.has_value(), [&] { encode_dims(s, *t.origin_shape); });
    o.field("param_type", t.param_type.has_value(), [&] { canon::put_string(s, to_string(*t.param_type)); });
    o.field("shape", true, [&] { encode_dims(s, t.shape); });
    o.field("stride", t.stride.has_value(), [&] { encode_dims(s, *t.stride); });
    o.field("sub_format", t.sub_format.has_value(), [&] { canon::put_int(s, *t.sub_format); });
    o.field("value_depend", t.value_depend.has_value(), [&] { encode_value(s, *t.value_depend); });
    o.finish();
}

template <class Sink>
SKC_CONSTEXPR_RECORD void encode_slots(Sink& s, const std::vector<TensorSlot>& slots) {
    canon::begin_array(s, slots.size());
    for (const TensorSlot& slot : slots) {
        if (const auto* t = std::get_if<TensorDesc>(&slot)) {
            encode_tensor(s, *t);
        } else if (const auto* list = std::get_if<std::vector<TensorDesc>>(&slot)) {
            canon::begin_array(s, list->size());
            for (const TensorDesc& e : *list) encode_tensor(s, e);
        } else {
            canon::put_null(s);
        }
    }
}

template <class Sink>
SKC_CONSTEXPR_RECORD void encode_attr(Sink& s, const Attr& a) {
    ObjectEmitter<Sink> o(s, a.extra, 3 + count_present(a.index));
    o.field("dtype", true, [&] { canon::put_string(s, a.dtype); });
    o.field("index", a.index.has_value(), [&] { canon::put_int(s, *a.index); });
    o.field("name", true, [&] { canon::put_string(s, a.name); });
    o.field("value", true, [&] { encode_value(s, a.value); });
    o.finish();
}

template <class Sink>
SKC_CONSTEXPR_RECORD void encode_record(Sink& s, const OpRecord& r) {
    const std::size_t known = 3 + count_present(r.attrs, r.tune_mode, r.platform_info, r.impl_mode, r.deterministic,
                                                r.deterministic_level, r.extra_params);
    ObjectEmitter<Sink> o(s, r.extra, known);
    o.field("attrs", r.attrs.has_value(), [&] {
        canon::begin_array(s, r.attrs->size());
        for (const Attr& a : *r.attrs) encode_attr(s, a);
    });
    o.field("deterministic", r.deterministic.has_value(), [&] { canon::put_string(s, *r.deterministic); });
    o.field("deterministic_level", r.deterministic_level.has_value(),
            [&] { canon::put_int(s, *r.deterministic_level); });
    o.field("extra_params", r.extra_params.has_value(), [&] { encode_value(s, *r.extra_params); });
    o.field("impl_mode", r.impl_mode.has_value(), [&] { canon::put_string(s, *r.impl_mode); });
    o.field("inputs", true, [&] { encode_slots(s, r.inputs); });
    o.field("op_type", true, [&] { canon::put_string(s, r.op_type); });
    o.field("outputs", true, [&] { encode_slots(s, r.outputs); });
    o.field("platform_info", r.platform_info.has_value(), [&] {
        const PlatformInfo& p = *r.platform_info;
        ObjectEmitter<Sink> po(s, p.extra, count_present(p.vector_core_cnt, p.cube_core_cnt));
        po.field("cube_core_cnt", p.cube_core_cnt.has_value(), [&] { canon::put_int(s, *p.cube_core_cnt); });
        po.field("vector_core_cnt", p.vector_core_cnt.has_value(), [&] { canon::put_int(s, *p.vector_core_cnt); });
        po.finish();
    });
    o.field("tune_mode", r.tune_mode.has_value(), [&] { canon::put_string(s, *r.tune_mode); });
    o.finish();
}

}  // namespace detail

/// The canonical bytes of a record (the encoding of detail/canon.hpp, without bin_type/bin_info).
[[nodiscard]] SKC_CONSTEXPR_RECORD std::string canonical_bytes(const OpRecord& r) {
    detail::canon::StringSink sink;
    detail::encode_record(sink, r);
    return std::move(sink.bytes);
}

/// The record's content digest: MurmurHash3_x64_128 of its canonical bytes, streamed.
[[nodiscard]] SKC_CONSTEXPR_RECORD Digest digest(const OpRecord& r) {
    detail::Hasher h;
    detail::encode_record(h, r);
    return h.digest();
}

// ---- conversion to and from Value (the JSON document) ----------------------------------------------

namespace detail {

inline Value dims_value(const RuntimeShape& s) {
    Array a;
    a.reserve(s.rank());
    for (std::int64_t d : s) a.emplace_back(d);
    return Value(std::move(a));
}

inline void append_extra(Object& o, const Object& extra) {
    for (const Member& m : extra) o.push_back(m);
}

inline Value tensor_value(const TensorDesc& t) {
    Object o;
    if (t.name) o.push_back({"name", *t.name});
    if (t.index) o.push_back({"index", *t.index});
    if (t.param_type) o.push_back({"param_type", to_string(*t.param_type)});
    o.push_back({"dtype", t.dtype});
    o.push_back({"shape", dims_value(t.shape)});
    o.push_back({"format", t.format});
    if (t.sub_format) o.push_back({"sub_format", *t.sub_format});
    if (t.c0_format) o.push_back({"c0_format", *t.c0_format});
    if (t.origin_shape) o.push_back({"origin_shape", dims_value(*t.origin_shape)});
    if (t.origin_format) o.push_back({"origin_format", *t.origin_format});
    if (t.value_depend) o.push_back({"value_depend", *t.value_depend});
    if (t.is_view) o.push_back({"is_view", *t.is_view});
    if (t.stride) o.push_back({"stride", dims_value(*t.stride)});
    if (t.offset) o.push_back({"offset", *t.offset});
    if (t.const_data) o.push_back({"const_data", *t.const_data});
    append_extra(o, t.extra);
    return Value(std::move(o));
}

inline Value slots_value(const std::vector<TensorSlot>& slots) {
    Array a;
    a.reserve(slots.size());
    for (const TensorSlot& slot : slots) {
        if (const auto* t = std::get_if<TensorDesc>(&slot)) {
            a.push_back(tensor_value(*t));
        } else if (const auto* list = std::get_if<std::vector<TensorDesc>>(&slot)) {
            Array l;
            for (const TensorDesc& e : *list) l.push_back(tensor_value(e));
            a.emplace_back(std::move(l));
        } else {
            a.emplace_back(nullptr);
        }
    }
    return Value(std::move(a));
}

}  // namespace detail

/// Options for to_value().
struct ToValueOptions {
    bool with_bin_fields = true;  // write bin_type/bin_info (only `<pid>` and `<pid>_debug` keep them)
};

/// The record as the JSON document of its op info file: known fields first, in the order real
/// dumps use (op_type, tune_mode, inputs, outputs, attrs, platform_info, impl_mode, deterministic,
/// deterministic_level, ...), then the unknown ones in the order they were read.
inline Value to_value(const OpRecord& r, ToValueOptions opt = {}) {
    Object o;
    o.push_back({"op_type", r.op_type});
    if (r.tune_mode) o.push_back({"tune_mode", *r.tune_mode});
    o.push_back({"inputs", detail::slots_value(r.inputs)});
    o.push_back({"outputs", detail::slots_value(r.outputs)});
    if (r.attrs) {
        Array a;
        for (const Attr& at : *r.attrs) {
            Object ao;
            ao.push_back({"name", at.name});
            ao.push_back({"dtype", at.dtype});
            if (at.index) ao.push_back({"index", *at.index});
            ao.push_back({"value", at.value});
            detail::append_extra(ao, at.extra);
            a.emplace_back(std::move(ao));
        }
        o.push_back({"attrs", Value(std::move(a))});
    }
    if (r.platform_info) {
        Object p;
        if (r.platform_info->vector_core_cnt) p.push_back({"vector_core_cnt", *r.platform_info->vector_core_cnt});
        if (r.platform_info->cube_core_cnt) p.push_back({"cube_core_cnt", *r.platform_info->cube_core_cnt});
        detail::append_extra(p, r.platform_info->extra);
        o.push_back({"platform_info", Value(std::move(p))});
    }
    if (r.impl_mode) o.push_back({"impl_mode", *r.impl_mode});
    if (r.deterministic) o.push_back({"deterministic", *r.deterministic});
    if (r.deterministic_level) o.push_back({"deterministic_level", *r.deterministic_level});
    if (r.extra_params) o.push_back({"extra_params", *r.extra_params});
    if (opt.with_bin_fields && r.bin_type) o.push_back({"bin_type", *r.bin_type});
    if (opt.with_bin_fields && r.bin_info) o.push_back({"bin_info", *r.bin_info});
    detail::append_extra(o, r.extra);
    return Value(std::move(o));
}

namespace detail {

/// Reads the typed fields of one JSON object, reporting faults with their JSON paths and keeping
/// the members it was not asked for as extras.
class FieldReader {
public:
    FieldReader(const Value& v, std::string path) : path_(std::move(path)) {
        if (!v.is_object())
            fail(Errc::invalid_op_info, path_,
                 std::string("expected an object, found ") + std::string(to_string(v.kind())));
        obj_ = &v.as_object();
        used_.assign(obj_->size(), false);
    }

    /// The member `key`, or nullptr when absent. Marks it as read.
    const Value* get(std::string_view key) {
        for (std::size_t i = 0; i < obj_->size(); ++i)
            if ((*obj_)[i].key == key) {
                used_[i] = true;
                return &(*obj_)[i].value;
            }
        return nullptr;
    }
    const Value& require(std::string_view key) {
        const Value* v = get(key);
        if (v == nullptr) fail(Errc::invalid_op_info, path_, "missing required field " + quote(key));
        return *v;
    }
    std::string at(std::string_view key) const { return path_join(path_, key); }

    std::optional<std::string> opt_string(std::string_view key) {
        const Value* v = get(key);
        if (v == nullptr) return std::nullopt;
        return as_string(*v, at(key));
    }
    std::optional<std::int64_t> opt_int(std::string_view key) {
        const Value* v = get(key);
        if (v == nullptr) return std::nullopt;
        return as_int(*v, at(key));
    }
    std::optional<Value> opt_value(std::string_view key) {
        const Value* v = get(key);
        if (v == nullptr) return std::nullopt;
        return *v;
    }
    /// Everything not read yet, in file order.
    Object rest() const {
        Object o;
        for (std::size_t i = 0; i < obj_->size(); ++i)
            if (!used_[i]) o.push_back((*obj_)[i]);
        return o;
    }

    static std::string as_string(const Value& v, const std::string& path) {
        if (!v.is_string()) type_error(v, path, "a string");
        return v.as_string();
    }
    static std::int64_t as_int(const Value& v, const std::string& path) {
        if (v.kind() != Kind::integer) type_error(v, path, "an integer");
        return v.as_int();
    }
    static bool as_bool(const Value& v, const std::string& path) {
        if (!v.is_bool()) type_error(v, path, "true or false");
        return v.as_bool();
    }
    [[noreturn]] static void type_error(const Value& v, const std::string& path, std::string_view expected) {
        std::string found(to_string(v.kind()));
        if (v.kind() == Kind::unsigned_integer) found = "an integer above 2^63-1";
        fail(Errc::invalid_op_info, path, "expected " + std::string(expected) + ", found " + found);
    }

private:
    std::string path_;
    const Object* obj_ = nullptr;
    std::vector<bool> used_;
};

inline RuntimeShape dims_from(const Value& v, const std::string& path) {
    if (!v.is_array()) FieldReader::type_error(v, path, "an array of integers");
    const Array& a = v.as_array();
    if (a.size() > max_rank)
        fail(Errc::limit_exceeded, path,
             "rank " + std::to_string(a.size()) + " exceeds the maximum rank " + std::to_string(max_rank));
    RuntimeShape s;
    for (std::size_t i = 0; i < a.size(); ++i) s.push_back(FieldReader::as_int(a[i], path_index(path, i)));
    return s;
}

inline TensorDesc tensor_from(const Value& v, const std::string& path) {
    FieldReader f(v, path);
    TensorDesc t;
    t.name = f.opt_string("name");
    t.index = f.opt_int("index");
    if (const Value* p = f.get("param_type")) {
        const std::string s = FieldReader::as_string(*p, f.at("param_type"));
        if (s == "required") t.param_type = ParamType::required;
        else if (s == "optional") t.param_type = ParamType::optional;
        else if (s == "dynamic") t.param_type = ParamType::dynamic;
        else
            fail(Errc::invalid_op_info, f.at("param_type"),
                 "value " + quote(s) + " is not accepted: use \"required\", \"optional\" or \"dynamic\"");
    }
    t.dtype = FieldReader::as_string(f.require("dtype"), f.at("dtype"));
    t.shape = dims_from(f.require("shape"), f.at("shape"));
    t.format = FieldReader::as_string(f.require("format"), f.at("format"));
    t.sub_format = f.opt_int("sub_format");
    t.c0_format = f.opt_value("c0_format");
    if (const Value* o = f.get("origin_shape")) t.origin_shape = dims_from(*o, f.at("origin_shape"));
    t.origin_format = f.opt_string("origin_format");
    t.value_depend = f.opt_value("value_depend");
    if (const Value* b = f.get("is_view")) t.is_view = FieldReader::as_bool(*b, f.at("is_view"));
    if (const Value* s = f.get("stride")) t.stride = dims_from(*s, f.at("stride"));
    t.offset = f.opt_int("offset");
    t.const_data = f.opt_value("const_data");
    t.extra = f.rest();
    return t;
}

inline std::vector<TensorSlot> slots_from(const Value& v, const std::string& path) {
    if (!v.is_array()) FieldReader::type_error(v, path, "an array of tensors, lists of tensors or null");
    std::vector<TensorSlot> slots;
    slots.reserve(v.as_array().size());
    for (std::size_t i = 0; i < v.as_array().size(); ++i) {
        const Value& e = v.as_array()[i];
        const std::string p = path_index(path, i);
        if (e.is_null()) {
            slots.emplace_back(std::monostate{});
        } else if (e.is_array()) {
            std::vector<TensorDesc> list;
            for (std::size_t j = 0; j < e.as_array().size(); ++j)
                list.push_back(tensor_from(e.as_array()[j], path_index(p, j)));
            slots.emplace_back(std::move(list));
        } else if (e.is_object()) {
            slots.emplace_back(tensor_from(e, p));
        } else {
            FieldReader::type_error(e, p, "a tensor object, an array of tensors, or null");
        }
    }
    return slots;
}

}  // namespace detail

/// Builds and validates a record from the JSON document of an op info file. Throws skc::Error
/// (invalid_op_info, invalid_name or limit_exceeded) with the JSON path of the first fault.
inline OpRecord record_from_value(const Value& doc) {
    using detail::FieldReader;
    if (!doc.is_object())
        detail::fail(Errc::invalid_op_info, "",
                     std::string("an op info file holds one JSON object, found ") + std::string(to_string(doc.kind())));
    FieldReader f(doc, "");
    OpRecord r;
    r.op_type = FieldReader::as_string(f.require("op_type"), "op_type");
    r.inputs = detail::slots_from(f.require("inputs"), "inputs");
    r.outputs = detail::slots_from(f.require("outputs"), "outputs");
    if (const Value* a = f.get("attrs")) {
        if (!a->is_array()) FieldReader::type_error(*a, "attrs", "an array of attrs");
        std::vector<Attr> attrs;
        for (std::size_t i = 0; i < a->as_array().size(); ++i) {
            const std::string p = detail::path_index("attrs", i);
            FieldReader af(a->as_array()[i], p);
            Attr at;
            at.name = FieldReader::as_string(af.require("name"), af.at("name"));
            at.dtype = FieldReader::as_string(af.require("dtype"), af.at("dtype"));
            at.index = af.opt_int("index");
            at.value = af.require("value");
            at.extra = af.rest();
            attrs.push_back(std::move(at));
        }
        r.attrs = std::move(attrs);
    }
    r.tune_mode = f.opt_string("tune_mode");
    if (const Value* p = f.get("platform_info")) {
        FieldReader pf(*p, "platform_info");
        PlatformInfo info;
        info.vector_core_cnt = pf.opt_int("vector_core_cnt");
        info.cube_core_cnt = pf.opt_int("cube_core_cnt");
        info.extra = pf.rest();
        r.platform_info = std::move(info);
    }
    r.impl_mode = f.opt_string("impl_mode");
    r.deterministic = f.opt_string("deterministic");
    r.deterministic_level = f.opt_int("deterministic_level");
    r.extra_params = f.opt_value("extra_params");
    r.bin_type = f.opt_int("bin_type");
    r.bin_info = f.opt_value("bin_info");
    r.extra = f.rest();
    validate(r);
    return r;
}

/// The record without bin_type and bin_info, as written to `<pid>_opcompile` and below.
inline OpRecord without_bin_fields(OpRecord r) {
    r.bin_type.reset();
    r.bin_info.reset();
    return r;
}

}  // namespace skc
