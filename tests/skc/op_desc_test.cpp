#include <doctest/doctest.h>

#include <skc/op_desc.hpp>
#include <skc/op_info_io.hpp>

#include "test_support.hpp"

namespace skc_op_desc_test {

namespace {

using namespace skc::desc;
using skc::DType;
using skc::Format;
using skc::Shape;

// The context of the specification's example file.
struct ExampleContext : skc::DefaultContext {
    static constexpr std::string_view tune_mode = "all";
    static constexpr std::int64_t vector_core_cnt = 48;
    static constexpr std::int64_t cube_core_cnt = 24;
    static constexpr std::string_view impl_mode = "high_performance";
    static constexpr bool deterministic = false;
    static constexpr std::int64_t deterministic_level = 0;
};

using ExampleMatMul =
    skc::OpDesc<"MatMulV2",
                Inputs<Tensor<"x1", DType::float32, Format::ND, Shape<1, 2048>>,
                       Tensor<"x2", DType::float32, Format::ND, Shape<2048, 512>>, Absent, Absent>,
                Outputs<Tensor<"y", DType::float32, Format::ND, Shape<1, 512>>>,
                Attrs<Attr<"transpose_x1", false>, Attr<"transpose_x2", false>, Attr<"offset_x", 0>>, ExampleContext>;

using Concat = skc::OpDesc<"ConcatD",
                           Inputs<List<Tensor<"x", DType::float16, Format::ND, Shape<2, 3>>,
                                       Tensor<"x", DType::float16, Format::ND, Shape<>>>>,
                           Outputs<Tensor<"y", DType::float16, Format::ND, Shape<4, 3>>>,
                           Attrs<Attr<"concat_dim", 0>, Attr<"mode", skc::FixedString("fast")>, Attr<"n", 2u>>>;

using Bare = skc::OpDesc<"Relu", Inputs<Tensor<"x", DType::bfloat16, Format::NC1HWC0, Shape<1, 1, 4, 4, 16>>>,
                         Outputs<Tensor<"y", DType::bfloat16, Format::NC1HWC0, Shape<1, 1, 4, 4, 16>>>>;

// The digest is a constant expression.
constexpr skc::Digest example_digest = ExampleMatMul::digest;
static_assert(example_digest != Concat::digest);
static_assert(Concat::digest != Bare::digest);

#if SKC_HAS_CONSTEXPR_RECORD
// Where the standard library allows it, the agreement itself is proved at compile time.
static_assert(skc::digest_agrees<ExampleMatMul>);
static_assert(skc::digest_agrees<Concat>);
static_assert(skc::digest_agrees<Bare>);
#endif

}  // namespace

TEST_CASE("OpDesc yields the record and digest of the specification's example file") {
    const skc::OpRecord from_file = skc::read_op_info(skc_test::data_dir() / "MatMulV2_float_ND_1_2048_0.json");
    const skc::OpRecord from_desc = ExampleMatMul::record();
    CHECK(from_desc == from_file);
    CHECK(ExampleMatMul::digest == skc::digest(from_file));
    CHECK(ExampleMatMul::digest == skc::digest(from_desc));
    CHECK(skc::op_info_file_name(from_desc, 0) == "MatMulV2_float_ND_1_2048_0.json");
}

TEST_CASE("compile-time and run-time digests agree for lists, rank-0 tensors, string and unsigned attrs") {
    CHECK(Concat::digest == skc::digest(Concat::record()));
    CHECK(Bare::digest == skc::digest(Bare::record()));
    const skc::OpRecord r = Concat::record();
    const auto& list = std::get<std::vector<skc::TensorDesc>>(r.inputs[0]);
    CHECK(list.size() == 2);
    CHECK(list[1].shape.rank() == 0);
    CHECK(list[0].param_type == skc::ParamType::dynamic);
    CHECK((*r.attrs)[1].dtype == "str");
    CHECK((*r.attrs)[1].value.as_string() == "fast");
    CHECK(!Bare::record().platform_info.has_value());
    // The record survives a trip through a file with the same digest.
    const skc::OpRecord back = skc::parse_op_info(skc::dump_json(skc::to_value(r)));
    CHECK(skc::digest(back) == Concat::digest);
}

TEST_CASE("canonical bytes streamed by OpDesc equal those of its record") {
    skc::detail::canon::StringSink sink;
    Concat::encode(sink);
    CHECK(sink.bytes == skc::canonical_bytes(Concat::record()));
}

}  // namespace skc_op_desc_test
