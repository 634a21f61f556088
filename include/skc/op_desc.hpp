// skc/op_desc.hpp: OpDesc, an op instance described at compile time.
//
//   using MatMul = skc::OpDesc<"MatMulV2",
//       skc::desc::Inputs<skc::desc::Tensor<"x1", skc::DType::float32, skc::Format::ND, skc::Shape<1, 2048>>,
//                         skc::desc::Tensor<"x2", skc::DType::float32, skc::Format::ND, skc::Shape<2048, 512>>,
//                         skc::desc::Absent, skc::desc::Absent>,
//       skc::desc::Outputs<skc::desc::Tensor<"y", skc::DType::float32, skc::Format::ND, skc::Shape<1, 512>>>,
//       skc::desc::Attrs<skc::desc::Attr<"transpose_x1", false>, skc::desc::Attr<"transpose_x2", false>,
//                        skc::desc::Attr<"offset_x", 0>>>;
//   static_assert(MatMul::digest == ...);      // a constant expression
//   skc::OpRecord r = MatMul::record();        // the same op as a run-time record
//
// OpDesc::digest is computed at compile time by encoding the description straight into the
// canonical byte stream of detail/canon.hpp (no containers are needed, so every compiler can do
// it), and equals skc::digest(OpDesc::record()). Where the standard library allows containers in
// constant evaluation (SKC_HAS_CONSTEXPR_RECORD), `static_assert(skc::digest_agrees<Op>)` proves
// that equality at compile time; the tests also check it at run time on every compiler.
//
// Each tensor gets its slot's position as `index`, `param_type` "required" ("dynamic" inside a
// List), and `origin_shape`/`origin_format` equal to its shape and format, as real dumps of plain
// tensors do. Attrs get their position as `index`; a bool value has dtype "bool", an integer
// "int", a string "str". Record-level fields (tune_mode, platform_info, ...) come from an optional
// context type; see DefaultContext.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "config.hpp"
#include "detail/canon.hpp"
#include "detail/hash.hpp"
#include "dtype.hpp"
#include "op_record.hpp"
#include "shape.hpp"

namespace skc {

/// A string literal usable as a template argument.
template <std::size_t N>
struct FixedString {
    char chars[N]{};
    constexpr FixedString(const char (&s)[N]) noexcept {
        for (std::size_t i = 0; i < N; ++i) chars[i] = s[i];
    }
    [[nodiscard]] constexpr std::string_view view() const noexcept { return {chars, N - 1}; }
};

namespace desc {

/// One tensor: name, dtype, format and a fully static Shape.
template <FixedString Name, DType D, Format F, class S>
struct Tensor {
    static_assert(S::is_static, "skc::desc::Tensor: the shape of a compile-time op must not have skc::dyn dims");
    static constexpr std::string_view name = Name.view();
    static constexpr std::string_view dtype = to_string(D);
    static constexpr std::string_view format = to_string(F);
    using shape = S;
};

/// An optional parameter that is absent (null in the file).
struct Absent {};

/// A dynamic (list) parameter.
template <class... Ts>
struct List {};

template <class... Slots>
struct Inputs {};
template <class... Slots>
struct Outputs {};

/// An attribute with a bool, integer or string (FixedString) value.
template <FixedString Name, auto V>
struct Attr {
    static constexpr std::string_view name = Name.view();
    static constexpr auto value = V;
};

template <class... As>
struct Attrs {};

}  // namespace desc

/// Record-level fields of an OpDesc. Derive from it (or write your own type) and declare any of:
/// `static constexpr std::string_view tune_mode`, `impl_mode`; `static constexpr bool
/// deterministic`; `static constexpr std::int64_t deterministic_level`, `vector_core_cnt`,
/// `cube_core_cnt`. What is not declared is absent from the record.
struct DefaultContext {};

namespace detail::descimpl {

/// A std::string from a view, built from iterators: the pointer-and-length constructor compares
/// the pointer with null, which GCC cannot constant-evaluate for template parameter objects when
/// UndefinedBehaviorSanitizer instruments the code.
SKC_CONSTEXPR_RECORD std::string str(std::string_view v) { return std::string(v.begin(), v.end()); }

template <class Sink, class S>
constexpr void encode_shape(Sink& s) {
    canon::begin_array(s, S::rank);
    for (std::int64_t d : S::array) canon::put_int(s, d);
}

template <class Sink, class T>
constexpr void encode_tensor(Sink& s, std::int64_t index, ParamType pt) {
    canon::begin_object(s, 8);  // keys in canonical (sorted) order
    canon::put_key(s, "dtype");
    canon::put_string(s, T::dtype);
    canon::put_key(s, "format");
    canon::put_string(s, T::format);
    canon::put_key(s, "index");
    canon::put_int(s, index);
    canon::put_key(s, "name");
    canon::put_string(s, T::name);
    canon::put_key(s, "origin_format");
    canon::put_string(s, T::format);
    canon::put_key(s, "origin_shape");
    encode_shape<Sink, typename T::shape>(s);
    canon::put_key(s, "param_type");
    canon::put_string(s, to_string(pt));
    canon::put_key(s, "shape");
    encode_shape<Sink, typename T::shape>(s);
}

template <class T>
SKC_CONSTEXPR_RECORD TensorDesc tensor_record(std::int64_t index, ParamType pt) {
    TensorDesc t;
    t.name = str(T::name);
    t.index = index;
    t.param_type = pt;
    t.dtype = str(T::dtype);
    t.shape = RuntimeShape(typename T::shape{});
    t.format = str(T::format);
    t.origin_shape = t.shape;
    t.origin_format = t.format;
    return t;
}

// A slot: Absent, List<...> or a Tensor.
template <class Slot>
struct SlotTraits {
    template <class Sink>
    static constexpr void encode(Sink& s, std::int64_t index) {
        encode_tensor<Sink, Slot>(s, index, ParamType::required);
    }
    static SKC_CONSTEXPR_RECORD TensorSlot record(std::int64_t index) {
        return TensorSlot(tensor_record<Slot>(index, ParamType::required));
    }
};

template <>
struct SlotTraits<desc::Absent> {
    template <class Sink>
    static constexpr void encode(Sink& s, std::int64_t) {
        canon::put_null(s);
    }
    static SKC_CONSTEXPR_RECORD TensorSlot record(std::int64_t) { return TensorSlot(std::monostate{}); }
};

template <class... Ts>
struct SlotTraits<desc::List<Ts...>> {
    template <class Sink>
    static constexpr void encode(Sink& s, std::int64_t index) {
        canon::begin_array(s, sizeof...(Ts));
        (encode_tensor<Sink, Ts>(s, index, ParamType::dynamic), ...);
    }
    static SKC_CONSTEXPR_RECORD TensorSlot record(std::int64_t index) {
        std::vector<TensorDesc> list;
        list.reserve(sizeof...(Ts));
        (list.push_back(tensor_record<Ts>(index, ParamType::dynamic)), ...);
        return TensorSlot(std::move(list));
    }
};

template <class A>
constexpr std::string_view attr_dtype() {
    using V = std::remove_cv_t<decltype(A::value)>;
    if constexpr (std::is_same_v<V, bool>) return "bool";
    else if constexpr (std::is_integral_v<V>) return "int";
    else return "str";
}

template <class Sink, class A>
constexpr void encode_attr_value(Sink& s) {
    using V = std::remove_cv_t<decltype(A::value)>;
    if constexpr (std::is_same_v<V, bool>) canon::put_bool(s, A::value);
    else if constexpr (std::is_integral_v<V> && std::is_signed_v<V>) canon::put_int(s, A::value);
    else if constexpr (std::is_integral_v<V>) canon::put_uint(s, A::value);
    else canon::put_string(s, A::value.view());
}

template <class A>
SKC_CONSTEXPR_RECORD Value attr_value() {
    using V = std::remove_cv_t<decltype(A::value)>;
    if constexpr (std::is_integral_v<V>) return Value(A::value);
    else return Value(A::value.view());
}

/// Attribute A of an Attrs list, at position `index`.
template <class A>
struct AttrTraits {
    template <class Sink>
    static constexpr void encode(Sink& s, std::int64_t index) {
        canon::begin_object(s, 4);
        canon::put_key(s, "dtype");
        canon::put_string(s, attr_dtype<A>());
        canon::put_key(s, "index");
        canon::put_int(s, index);
        canon::put_key(s, "name");
        canon::put_string(s, A::name);
        canon::put_key(s, "value");
        encode_attr_value<Sink, A>(s);
    }
    static SKC_CONSTEXPR_RECORD skc::Attr record(std::int64_t index) {
        return skc::Attr{str(A::name), str(attr_dtype<A>()), index, attr_value<A>(), {}};
    }
};

/// The items of an Inputs, Outputs or Attrs list, each described by Traits<Item> at its position:
/// an array of their encodings, and a vector of their records.
template <class Record, template <class> class Traits, class... Items>
struct ItemList {
    template <class Sink>
    static constexpr void encode(Sink& s) {
        canon::begin_array(s, sizeof...(Items));
        [&]<std::size_t... I>(std::index_sequence<I...>) {
            (Traits<Items>::encode(s, static_cast<std::int64_t>(I)), ...);
        }
        (std::index_sequence_for<Items...>{});
    }
    static SKC_CONSTEXPR_RECORD std::vector<Record> record() {
        std::vector<Record> v;
        v.reserve(sizeof...(Items));
        [&]<std::size_t... I>(std::index_sequence<I...>) {
            (v.push_back(Traits<Items>::record(static_cast<std::int64_t>(I))), ...);
        }
        (std::index_sequence_for<Items...>{});
        return v;
    }
};

template <class List>
struct ListOf;
template <class... Slots>
struct ListOf<desc::Inputs<Slots...>> : ItemList<TensorSlot, SlotTraits, Slots...> {};
template <class... Slots>
struct ListOf<desc::Outputs<Slots...>> : ItemList<TensorSlot, SlotTraits, Slots...> {};
template <class... As>
struct ListOf<desc::Attrs<As...>> : ItemList<skc::Attr, AttrTraits, As...> {};

/// One member of an encoded object: its key, then its value (an integer or a string).
template <class Sink, class V>
constexpr void encode_member(Sink& s, std::string_view key, const V& value) {
    canon::put_key(s, key);
    if constexpr (std::is_integral_v<V>) canon::put_int(s, value);
    else canon::put_string(s, value);
}

/// Which of the optional members a context type C declares.
template <class C>
struct ContextHas {
    static constexpr bool tune_mode = requires { C::tune_mode; };
    static constexpr bool impl_mode = requires { C::impl_mode; };
    static constexpr bool deterministic = requires { C::deterministic; };
    static constexpr bool deterministic_level = requires { C::deterministic_level; };
    static constexpr bool vector_core_cnt = requires { C::vector_core_cnt; };
    static constexpr bool cube_core_cnt = requires { C::cube_core_cnt; };
    static constexpr bool platform_info = vector_core_cnt || cube_core_cnt;
};

}  // namespace detail::descimpl

/// An op instance known at compile time. See the header comment.
template <FixedString OpType, class In, class Out, class At = desc::Attrs<>, class Ctx = DefaultContext>
struct OpDesc {
    static_assert(is_safe_name(OpType.view()), "skc::OpDesc: the op type must be 1 to 128 letters, digits and '_'");

    static constexpr std::string_view op_type = OpType.view();

    /// Streams the canonical bytes of record() into `s` (constexpr).
    template <class Sink>
    static constexpr void encode(Sink& s) {
        using namespace detail::descimpl;
        namespace canon = detail::canon;
        using Has = ContextHas<Ctx>;
        constexpr std::size_t count =
            4 + Has::tune_mode + Has::impl_mode + Has::deterministic + Has::deterministic_level + Has::platform_info;
        canon::begin_object(s, count);
        canon::put_key(s, "attrs");
        ListOf<At>::encode(s);
        if constexpr (Has::deterministic)
            encode_member(s, "deterministic", std::string_view(Ctx::deterministic ? "true" : "false"));
        if constexpr (Has::deterministic_level) encode_member(s, "deterministic_level", Ctx::deterministic_level);
        if constexpr (Has::impl_mode) encode_member(s, "impl_mode", Ctx::impl_mode);
        canon::put_key(s, "inputs");
        ListOf<In>::encode(s);
        canon::put_key(s, "op_type");
        canon::put_string(s, op_type);
        canon::put_key(s, "outputs");
        ListOf<Out>::encode(s);
        if constexpr (Has::platform_info) {
            canon::put_key(s, "platform_info");
            canon::begin_object(s, std::size_t{Has::cube_core_cnt} + std::size_t{Has::vector_core_cnt});
            if constexpr (Has::cube_core_cnt) encode_member(s, "cube_core_cnt", Ctx::cube_core_cnt);
            if constexpr (Has::vector_core_cnt) encode_member(s, "vector_core_cnt", Ctx::vector_core_cnt);
        }
        if constexpr (Has::tune_mode) encode_member(s, "tune_mode", Ctx::tune_mode);
    }

    /// The content digest, computed at compile time.
    static constexpr Digest digest = [] {
        detail::Hasher h;
        encode(h);
        return h.digest();
    }();

    /// The same op as a run-time record.
    static SKC_CONSTEXPR_RECORD OpRecord record() {
        using namespace detail::descimpl;
        using Has = ContextHas<Ctx>;
        OpRecord r;
        r.op_type = str(op_type);
        r.inputs = ListOf<In>::record();
        r.outputs = ListOf<Out>::record();
        r.attrs = ListOf<At>::record();
        if constexpr (Has::tune_mode) r.tune_mode = str(Ctx::tune_mode);
        if constexpr (Has::platform_info) {
            PlatformInfo p;
            if constexpr (Has::vector_core_cnt) p.vector_core_cnt = Ctx::vector_core_cnt;
            if constexpr (Has::cube_core_cnt) p.cube_core_cnt = Ctx::cube_core_cnt;
            r.platform_info = std::move(p);
        }
        if constexpr (Has::impl_mode) r.impl_mode = str(Ctx::impl_mode);
        if constexpr (Has::deterministic) r.deterministic = str(Ctx::deterministic ? "true" : "false");
        if constexpr (Has::deterministic_level) r.deterministic_level = Ctx::deterministic_level;
        return r;
    }
};

#if SKC_HAS_CONSTEXPR_RECORD
/// True when Op's compile-time digest equals the digest of its run-time record, evaluated at
/// compile time: `static_assert(skc::digest_agrees<MyOp>);`. Only where SKC_HAS_CONSTEXPR_RECORD.
template <class Op>
inline constexpr bool digest_agrees = skc::digest(Op::record()) == Op::digest;
#endif

}  // namespace skc
