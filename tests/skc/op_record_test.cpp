#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include <skc/op_desc.hpp>
#include <skc/op_info_io.hpp>
#include <skc/op_record.hpp>

#include "test_support.hpp"

namespace skc_op_record_test {

using skc::Value;

namespace {

Value rich_doc() { return skc::parse_json(skc_test::slurp(skc_test::data_dir() / "rich_op.json")); }

/// Visits every node of a JSON document with its path; the visitor may change the node.
void walk(Value& v, const std::string& path, const std::function<void(Value&, const std::string&)>& fn) {
    fn(v, path);
    if (v.is_array()) {
        for (std::size_t i = 0; i < v.as_array().size(); ++i)
            walk(v.as_array()[i], path + "[" + std::to_string(i) + "]", fn);
    } else if (v.is_object()) {
        for (skc::Member& m : v.as_object()) walk(m.value, path.empty() ? m.key : path + "." + m.key, fn);
    }
}

std::vector<std::string> all_paths(Value doc) {
    std::vector<std::string> out;
    walk(doc, "", [&](Value&, const std::string& p) { out.push_back(p); });
    return out;
}

/// Candidate replacements for a node, tried in order until the document is still a valid op.
std::vector<Value> mutations(const Value& v) {
    switch (v.kind()) {
    case skc::Kind::null: return {Value(0), Value(skc::Array{})};
    case skc::Kind::boolean: return {Value(!v.as_bool())};
    case skc::Kind::integer: return {Value(v.as_int() == 9223372036854775807LL ? v.as_int() - 1 : v.as_int() + 1)};
    case skc::Kind::unsigned_integer: return {Value(v.as_uint() - 1)};
    case skc::Kind::number: return {Value(v.as_double() * 2 + 1)};
    case skc::Kind::string: return {Value(v.as_string() + "X"), Value("optional"), Value("true"), Value("required")};
    case skc::Kind::array: {
        skc::Array a = v.as_array();
        if (a.empty()) return {Value(skc::Array{Value(1)})};
        skc::Array longer = a;
        longer.push_back(a.back());
        skc::Array with_null = a;
        with_null.emplace_back(nullptr);
        skc::Array shorter(a.begin(), a.end() - 1);
        return {Value(longer), Value(with_null), Value(shorter)};
    }
    case skc::Kind::object: {
        skc::Object o = v.as_object();
        o.push_back({"zz_added", 1});
        return {Value(o)};
    }
    }
    return {};
}

Value* at_path(Value& doc, const std::string& path) {
    Value* found = nullptr;
    walk(doc, "", [&](Value& v, const std::string& p) {
        if (p == path) found = &v;
    });
    return found;
}

}  // namespace

TEST_CASE("round trip of a rich op info file keeps every field, known and unknown") {
    const Value doc = rich_doc();
    const skc::OpRecord r = skc::record_from_value(doc);
    CHECK(r.op_type == "FusedRichOp");
    REQUIRE(r.inputs.size() == 4);
    CHECK(std::holds_alternative<std::monostate>(r.inputs[1]));
    const auto& list = std::get<std::vector<skc::TensorDesc>>(r.inputs[2]);
    REQUIRE(list.size() == 2);
    CHECK(list[0].shape.rank() == 0);
    CHECK(list[1].param_type == skc::ParamType::dynamic);
    const auto& x = std::get<skc::TensorDesc>(r.inputs[0]);
    CHECK(x.is_view == true);
    CHECK(*x.stride == skc::RuntimeShape{3, 1});
    CHECK(x.offset == 4);
    CHECK(x.const_data->as_array().size() == 2);
    CHECK(x.extra.size() == 1);
    CHECK(x.extra[0].key == "vendor_tag");
    CHECK(r.attrs->size() == 13);
    CHECK((*r.attrs)[11].value.kind() == skc::Kind::unsigned_integer);
    CHECK((*r.attrs)[11].extra.size() == 1);
    CHECK(r.platform_info->extra.size() == 1);
    CHECK(r.extra_params.has_value());
    CHECK(r.bin_type == 1);
    REQUIRE(r.extra.size() == 1);
    CHECK(r.extra[0].key == "unknown_top");

    // The document written back is the document read (same content, any member order).
    CHECK(skc::to_value(r) == doc);
    const skc::OpRecord again = skc::parse_op_info(skc::dump_json(skc::to_value(r)));
    CHECK(again == r);
    CHECK(skc::digest(again) == skc::digest(r));
    CHECK(skc::canonical_bytes(again) == skc::canonical_bytes(r));
}

TEST_CASE("digest ignores key order and white space") {
    Value doc = rich_doc();
    const skc::Digest base = skc::digest(skc::record_from_value(doc));
    walk(doc, "", [](Value& v, const std::string&) {
        if (v.is_object()) std::reverse(v.as_object().begin(), v.as_object().end());
    });
    const std::string compact = skc::dump_json(doc, -1);
    const std::string spaced = skc::dump_json(doc, 7);
    CHECK(compact != skc_test::slurp(skc_test::data_dir() / "rich_op.json"));
    CHECK(skc::digest(skc::parse_op_info(compact)) == base);
    CHECK(skc::digest(skc::parse_op_info(spaced)) == base);
    CHECK(skc::digest(skc::parse_op_info("\n\t " + compact + " \r\n")) == base);
}

TEST_CASE("changing any single field changes the digest (every node of the document is walked)") {
    const Value doc = rich_doc();
    const skc::Digest base = skc::digest(skc::record_from_value(doc));
    std::size_t checked = 0;
    for (const std::string& path : all_paths(doc)) {
        if (path.empty()) continue;
        const bool run_only = path.rfind("bin_type", 0) == 0 || path.rfind("bin_info", 0) == 0;
        Value probe = doc;
        const std::vector<Value> candidates = mutations(*at_path(probe, path));
        bool applied = false;
        for (const Value& c : candidates) {
            if (c == *at_path(probe, path)) continue;  // not a change
            Value mutated = doc;
            *at_path(mutated, path) = c;
            skc::OpRecord r;
            try {
                r = skc::parse_op_info(skc::dump_json(mutated));
            } catch (const skc::Error&) {
                continue;  // this replacement makes an invalid op; try the next one
            }
            applied = true;
            if (run_only)
                CHECK_MESSAGE(skc::digest(r) == base, "bin field " << path << " must not change the identity");
            else CHECK_MESSAGE(skc::digest(r) != base, "changing " << path << " did not change the digest");
            break;
        }
        CHECK_MESSAGE(applied, "no valid mutation for " << path);
        ++checked;
    }
    CHECK(checked > 150);  // the walk really covered the document
}

TEST_CASE("removing any optional field changes the digest; absent and empty differ") {
    const Value doc = rich_doc();
    const skc::Digest base = skc::digest(skc::record_from_value(doc));
    std::size_t removed = 0;
    Value tree = doc;
    walk(tree, "", [&](Value& node, const std::string& path) {
        if (!node.is_object()) return;
        for (std::size_t i = 0; i < node.as_object().size(); ++i) {
            const std::string key = node.as_object()[i].key;
            Value mutated = doc;
            Value* target = path.empty() ? &mutated : at_path(mutated, path);
            target->as_object().erase(target->as_object().begin() + static_cast<std::ptrdiff_t>(i));
            skc::OpRecord r;
            try {
                r = skc::parse_op_info(skc::dump_json(mutated));
            } catch (const skc::Error&) {
                continue;  // a required field
            }
            const std::string where = path.empty() ? key : path + "." + key;
            if (where.rfind("bin_type", 0) == 0 || where.rfind("bin_info", 0) == 0) CHECK(skc::digest(r) == base);
            else CHECK_MESSAGE(skc::digest(r) != base, "removing " << where << " did not change the digest");
            ++removed;
        }
    });
    CHECK(removed > 40);

    skc::OpRecord a = skc::record_from_value(doc);
    a.attrs.reset();
    skc::OpRecord b = a;
    b.attrs = std::vector<skc::Attr>{};
    CHECK(skc::digest(a) != skc::digest(b));
}

TEST_CASE("the example op info file of the specification") {
    const skc::OpRecord r = skc::read_op_info(skc_test::data_dir() / "MatMulV2_float_ND_1_2048_0.json");
    CHECK(r.op_type == "MatMulV2");
    CHECK(r.inputs.size() == 4);
    CHECK(r.deterministic == "false");
    CHECK(skc::op_info_file_name(r, 0) == "MatMulV2_float_ND_1_2048_0.json");
    // The digest is stable across processes, machines and compilers: pin it.
    CHECK(skc::digest(r).hex() == "4e5576057b45f989e2d9e80a8baa5d21");
}

TEST_CASE("validate rejects records built in code with bad values, naming the field") {
    skc::OpRecord r = skc::parse_op_info(skc_test::slurp(skc_test::data_dir() / "MatMulV2_float_ND_1_2048_0.json"));
    SUBCASE("negative dim") {
        std::get<skc::TensorDesc>(r.outputs[0]).shape = skc::RuntimeShape{1, -512};
        try {
            skc::validate(r);
            FAIL("no error");
        } catch (const skc::Error& e) {
            CHECK(e.code() == skc::Errc::invalid_op_info);
            CHECK_EQ(std::string(e.what()), "outputs[0].shape[1]: dim -512 is negative: dims must be >= 0");
        }
    }
    SUBCASE("an extra field that shadows a known one") {
        r.extra.push_back({"op_type", "Other"});
        try {
            skc::validate(r);
            FAIL("no error");
        } catch (const skc::Error& e) {
            CHECK_EQ(
                std::string(e.what()),
                "op_type: field \"op_type\" is known and must be set through its typed member, not as an extra field");
        }
    }
    SUBCASE("deterministic must be the string true or false") {
        r.deterministic = "yes";
        CHECK_THROWS_WITH_AS(skc::validate(r),
                             "deterministic: value \"yes\" is not accepted: use \"true\" or \"false\"", skc::Error);
    }
}

TEST_CASE("regression: 0.0 and -0.0 compare equal, so they have one digest") {
    skc::OpRecord a = skc::parse_op_info(skc_test::slurp(skc_test::data_dir() / "MatMulV2_float_ND_1_2048_0.json"));
    skc::OpRecord b = a;
    a.attrs->push_back(skc::Attr{"alpha", "float", 3, skc::Value(0.0), {}});
    b.attrs->push_back(skc::Attr{"alpha", "float", 3, skc::Value(-0.0), {}});
    CHECK(a == b);
    CHECK(skc::digest(a) == skc::digest(b));
}

TEST_CASE("regression: duplicate keys in values built in code are refused, with their path") {
    skc::OpRecord r = skc::parse_op_info(skc_test::slurp(skc_test::data_dir() / "MatMulV2_float_ND_1_2048_0.json"));
    SUBCASE("in an attr value") {
        (*r.attrs)[0].value = skc::Value(skc::Object{{"k", 1}, {"k", 2}});
        CHECK_THROWS_WITH_AS(skc::validate(r), "attrs[0].value: duplicate key \"k\" in one object", skc::Error);
    }
    SUBCASE("in the unknown fields of a tensor") {
        std::get<skc::TensorDesc>(r.inputs[0]).extra = {{"vendor", 1}, {"vendor", 2}};
        CHECK_THROWS_WITH_AS(skc::validate(r), "inputs[0]: duplicate key \"vendor\" in one object", skc::Error);
    }
}

TEST_CASE("files are written with the field order real dumps use") {
    const skc::OpRecord r = skc::read_op_info(skc_test::data_dir() / "MatMulV2_float_ND_1_2048_0.json");
    const skc::Value v = skc::to_value(r);
    std::vector<std::string> keys;
    for (const skc::Member& m : v.as_object()) keys.push_back(m.key);
    CHECK(keys == std::vector<std::string>{"op_type", "tune_mode", "inputs", "outputs", "attrs", "platform_info",
                                           "impl_mode", "deterministic", "deterministic_level"});
}

TEST_CASE("plain_tensor and make_op build the record a framework's live tensors give, the one OpDesc describes") {
    const skc::TensorDesc x = skc::plain_tensor("x1", 0, {32, 64});
    CHECK(x.name == "x1");
    CHECK(x.index == 0);
    CHECK(x.param_type == skc::ParamType::required);
    CHECK(x.dtype == "float");
    CHECK(x.format == "ND");
    CHECK(x.shape == skc::RuntimeShape{32, 64});
    CHECK(x.origin_shape == skc::RuntimeShape{32, 64});
    CHECK(x.origin_format == "ND");
    const skc::TensorDesc unnamed = skc::plain_tensor({7}, "int64");
    CHECK_FALSE(unnamed.name.has_value());
    CHECK_FALSE(unnamed.param_type.has_value());
    CHECK(unnamed.dtype == "int64");
    CHECK(unnamed.origin_shape == skc::RuntimeShape{7});

    const skc::OpRecord add =
        skc::make_op("Add", {x, skc::plain_tensor("x2", 1, {32, 64})}, {skc::plain_tensor("y", 0, {32, 64})});
    CHECK(add.op_type == "Add");
    REQUIRE(add.inputs.size() == 2);
    REQUIRE(add.attrs.has_value());
    CHECK(add.attrs->empty());
    CHECK_FALSE(add.tune_mode.has_value());

    using namespace skc::desc;
    using Add = skc::OpDesc<"Add",
                            Inputs<Tensor<"x1", skc::DType::float32, skc::Format::ND, skc::Shape<32, 64>>,
                                   Tensor<"x2", skc::DType::float32, skc::Format::ND, skc::Shape<32, 64>>>,
                            Outputs<Tensor<"y", skc::DType::float32, skc::Format::ND, skc::Shape<32, 64>>>>;
    CHECK(skc::digest(add) == Add::digest);
}

}  // namespace skc_op_record_test
