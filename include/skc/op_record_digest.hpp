// skc/op_record_digest.hpp: the identity of an OpRecord (op_record.hpp describes it): its canonical
// encoding, canonical_bytes(), and digest(), the hash of those bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "config.hpp"
#include "detail/canon.hpp"
#include "detail/hash.hpp"
#include "op_record.hpp"
#include "shape.hpp"
#include "value.hpp"

namespace skc {

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

}  // namespace skc
