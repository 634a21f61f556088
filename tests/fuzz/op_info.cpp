// Fuzzes the op info file reader (include/skc/op_info_io.hpp): the input is the text of one op info
// file. Properties:
//   - a rejected file is an skc::Error with one of the reader's codes, and the file reader
//     (read_op_info) and the text parser (parse_op_info) agree on the result or the error code;
//   - an accepted record is valid, has a file name, and its digest is the hash of its canonical
//     bytes, which are the canonical encoding of its JSON document without bin_type/bin_info;
//   - round trip: written (indented or on one line, with or without the bin fields) and read
//     again, it is the same record with the same digest, and writing it again gives the same text.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <skc/detail/canon.hpp>
#include <skc/detail/hash.hpp>
#include <skc/error.hpp>
#include <skc/op_info_io.hpp>
#include <skc/op_record.hpp>
#include <skc/value.hpp>

#include "fuzz_support.hpp"

namespace {

bool reader_code(skc::Errc c) {
    return c == skc::Errc::invalid_json || c == skc::Errc::invalid_op_info || c == skc::Errc::limit_exceeded ||
           c == skc::Errc::invalid_name;
}

std::string canonical_of_document(const skc::OpRecord& r) {
    skc::detail::canon::StringSink sink;
    skc::detail::encode_value(sink, skc::to_value(r, skc::ToValueOptions{false}));
    return std::move(sink.bytes);
}

void check_record(const skc::OpRecord& r) {
    skc::validate(r);  // an accepted record is valid: throwing here escapes as a failure below

    const std::string bytes = skc::canonical_bytes(r);
    FUZZ_CHECK(skc::digest(r) == skc::detail::hash_bytes(bytes));
    FUZZ_CHECK(bytes == canonical_of_document(r));

    const std::string name = skc::op_info_file_name(r, 7);
    FUZZ_CHECK(name.starts_with(r.op_type) && name.ends_with("_7.json"));
    FUZZ_CHECK(name.find('/') == std::string::npos);

    // Round trip through the writer's text.
    const std::string text = skc::dump_json(skc::to_value(r)) + "\n";
    const skc::OpRecord again = skc::parse_op_info(text);
    FUZZ_CHECK(again == r);
    FUZZ_CHECK(skc::digest(again) == skc::digest(r));
    FUZZ_CHECK(skc::dump_json(skc::to_value(again)) + "\n" == text);

    // On one line.
    const skc::OpRecord compact = skc::parse_op_info(skc::dump_json(skc::to_value(r), -1));
    FUZZ_CHECK(compact == r);

    // Without the bin fields: the same op (same digest), without them.
    const skc::OpRecord stripped = skc::parse_op_info(skc::dump_json(skc::to_value(r, skc::ToValueOptions{false})));
    FUZZ_CHECK(stripped == skc::without_bin_fields(r));
    FUZZ_CHECK(!stripped.bin_type && !stripped.bin_info);
    FUZZ_CHECK(skc::digest(stripped) == skc::digest(r));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text = fuzz::as_text(data, size);

    std::optional<skc::OpRecord> parsed;
    std::optional<skc::Errc> parse_error;
    try {
        parsed = skc::parse_op_info(text);
    } catch (const skc::Error& e) {
        FUZZ_CHECK(reader_code(e.code()));
        FUZZ_CHECK(!e.message().empty());
        parse_error = e.code();
    }

    // The same text read from a file.
    static const std::filesystem::path file = fuzz::scratch() / "op.json";
    fuzz::write_file(file, text);
    try {
        const skc::OpRecord r = skc::read_op_info(file);
        FUZZ_CHECK(parsed && r == *parsed);
    } catch (const skc::Error& e) {
        FUZZ_CHECK(parse_error && *parse_error == e.code());
        FUZZ_CHECK(e.file() == file.string());
    }

    if (parsed) check_record(*parsed);
    return 0;
}
