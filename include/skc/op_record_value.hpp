// skc/op_record_value.hpp: an OpRecord as the JSON document (skc::Value) of its op info file and
// back: to_value() and record_from_value(), which checks the document and reports its first fault.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "detail/text.hpp"
#include "error.hpp"
#include "op_record.hpp"
#include "shape.hpp"
#include "value.hpp"

namespace skc {

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

}  // namespace skc
