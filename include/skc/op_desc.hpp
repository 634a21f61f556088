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

template <class Sink, class... Slots, std::size_t... I>
constexpr void encode_slots(Sink& s, std::index_sequence<I...>) {
    canon::begin_array(s, sizeof...(Slots));
    (SlotTraits<Slots>::encode(s, static_cast<std::int64_t>(I)), ...);
}

template <class... Slots, std::size_t... I>
SKC_CONSTEXPR_RECORD std::vector<TensorSlot> slots_record(std::index_sequence<I...>) {
    std::vector<TensorSlot> v;
    v.reserve(sizeof...(Slots));
    (v.push_back(SlotTraits<Slots>::record(static_cast<std::int64_t>(I))), ...);
    return v;
}

template <class SlotList>
struct SlotsOf;
template <class... Slots>
struct SlotsOf<desc::Inputs<Slots...>> {
    template <class Sink>
    static constexpr void encode(Sink& s) {
        encode_slots<Sink, Slots...>(s, std::index_sequence_for<Slots...>{});
    }
    static SKC_CONSTEXPR_RECORD std::vector<TensorSlot> record() {
        return slots_record<Slots...>(std::index_sequence_for<Slots...>{});
    }
};
template <class... Slots>
struct SlotsOf<desc::Outputs<Slots...>> : SlotsOf<desc::Inputs<Slots...>> {};

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

template <class AttrList>
struct AttrsOf;
template <class... As>
struct AttrsOf<desc::Attrs<As...>> {
    template <class Sink>
    static constexpr void encode(Sink& s) {
        encode_all<Sink>(s, std::index_sequence_for<As...>{});
    }
    static SKC_CONSTEXPR_RECORD std::vector<skc::Attr> record() { return record_all(std::index_sequence_for<As...>{}); }

private:
    template <class Sink, std::size_t... I>
    static constexpr void encode_all(Sink& s, std::index_sequence<I...>) {
        canon::begin_array(s, sizeof...(As));
        (encode_one<Sink, As>(s, static_cast<std::int64_t>(I)), ...);
    }
    template <class Sink, class A>
    static constexpr void encode_one(Sink& s, std::int64_t index) {
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
    template <std::size_t... I>
    static SKC_CONSTEXPR_RECORD std::vector<skc::Attr> record_all(std::index_sequence<I...>) {
        std::vector<skc::Attr> v;
        v.reserve(sizeof...(As));
        (v.push_back(
             skc::Attr{str(As::name), str(attr_dtype<As>()), static_cast<std::int64_t>(I), attr_value<As>(), {}}),
         ...);
        return v;
    }
};

template <class C>
concept has_tune_mode = requires {
    C::tune_mode;
};
template <class C>
concept has_impl_mode = requires {
    C::impl_mode;
};
template <class C>
concept has_deterministic = requires {
    C::deterministic;
};
template <class C>
concept has_deterministic_level = requires {
    C::deterministic_level;
};
template <class C>
concept has_vector_core_cnt = requires {
    C::vector_core_cnt;
};
template <class C>
concept has_cube_core_cnt = requires {
    C::cube_core_cnt;
};
template <class C>
constexpr bool has_platform_info = has_vector_core_cnt<C> || has_cube_core_cnt<C>;

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
        constexpr std::size_t count = 4 + has_tune_mode<Ctx> + has_impl_mode<Ctx> + has_deterministic<Ctx> +
                                      has_deterministic_level<Ctx> + has_platform_info<Ctx>;
        canon::begin_object(s, count);
        canon::put_key(s, "attrs");
        AttrsOf<At>::encode(s);
        if constexpr (has_deterministic<Ctx>) {
            canon::put_key(s, "deterministic");
            canon::put_string(s, Ctx::deterministic ? "true" : "false");
        }
        if constexpr (has_deterministic_level<Ctx>) {
            canon::put_key(s, "deterministic_level");
            canon::put_int(s, Ctx::deterministic_level);
        }
        if constexpr (has_impl_mode<Ctx>) {
            canon::put_key(s, "impl_mode");
            canon::put_string(s, Ctx::impl_mode);
        }
        canon::put_key(s, "inputs");
        SlotsOf<In>::encode(s);
        canon::put_key(s, "op_type");
        canon::put_string(s, op_type);
        canon::put_key(s, "outputs");
        SlotsOf<Out>::encode(s);
        if constexpr (has_platform_info<Ctx>) {
            canon::put_key(s, "platform_info");
            canon::begin_object(s, std::size_t{has_cube_core_cnt<Ctx>} + std::size_t{has_vector_core_cnt<Ctx>});
            if constexpr (has_cube_core_cnt<Ctx>) {
                canon::put_key(s, "cube_core_cnt");
                canon::put_int(s, Ctx::cube_core_cnt);
            }
            if constexpr (has_vector_core_cnt<Ctx>) {
                canon::put_key(s, "vector_core_cnt");
                canon::put_int(s, Ctx::vector_core_cnt);
            }
        }
        if constexpr (has_tune_mode<Ctx>) {
            canon::put_key(s, "tune_mode");
            canon::put_string(s, Ctx::tune_mode);
        }
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
        OpRecord r;
        r.op_type = str(op_type);
        r.inputs = SlotsOf<In>::record();
        r.outputs = SlotsOf<Out>::record();
        r.attrs = AttrsOf<At>::record();
        if constexpr (has_tune_mode<Ctx>) r.tune_mode = str(Ctx::tune_mode);
        if constexpr (has_platform_info<Ctx>) {
            PlatformInfo p;
            if constexpr (has_vector_core_cnt<Ctx>) p.vector_core_cnt = Ctx::vector_core_cnt;
            if constexpr (has_cube_core_cnt<Ctx>) p.cube_core_cnt = Ctx::cube_core_cnt;
            r.platform_info = std::move(p);
        }
        if constexpr (has_impl_mode<Ctx>) r.impl_mode = str(Ctx::impl_mode);
        if constexpr (has_deterministic<Ctx>) r.deterministic = str(Ctx::deterministic ? "true" : "false");
        if constexpr (has_deterministic_level<Ctx>) r.deterministic_level = Ctx::deterministic_level;
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
