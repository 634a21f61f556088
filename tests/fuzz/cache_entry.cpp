// Fuzzes the readers of a cache entry (`entries/<key>`) and of an entry's op list (`oplists/<key>`)
// in include/skc/policy/cache.hpp: detail::decode_entry and detail::decode_op_list. Both texts end
// with a check line (a hash of the lines above), which random bytes almost never match, so each
// input is read twice: as it is, and resealed (its last line dropped when it is a check line, and
// a correct check line appended), which lets the fuzzer reach the line parsers. Properties:
//   - a text that is accepted as it is, is already sealed (resealing gives the same text);
//   - an entry read with its components is also read without them, with the same other fields;
//   - a key is 32 lower-case hex digits;
//   - round trip: an accepted entry or op list, written with encode_entry / encode_op_list and
//     read again, is the same, and writing it again gives the same text.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <skc/policy/cache.hpp>

#include "fuzz_support.hpp"

namespace {

/// `t` with its last line dropped when that is a check line, then a correct check line appended.
std::string reseal(std::string_view t) {
    std::string body(t);
    if (!body.empty() && body.back() == '\n') {
        const std::size_t start = body.rfind('\n', body.size() - 2);
        const std::size_t line = start == std::string::npos ? 0 : start + 1;
        if (std::string_view(body).substr(line).starts_with("check ")) body.erase(line);
    }
    if (!body.empty() && body.back() != '\n') body += '\n';
    skc::detail::append_check_line(body);
    return body;
}

bool same_fields(const skc::CacheEntry& a, const skc::CacheEntry& b) {
    return a.key == b.key && a.package == b.package && a.size == b.size && a.checksum == b.checksum &&
           a.created_unix == b.created_unix && a.compile_ns == b.compile_ns && a.ops == b.ops &&
           a.last_used_ns == b.last_used_ns;
}

bool lower_hex32(std::string_view s) {
    return s.size() == 32 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

void check_entry(std::string_view t, bool raw) {
    const std::optional<skc::CacheEntry> e = skc::detail::decode_entry(t);
    const std::optional<skc::CacheEntry> lean = skc::detail::decode_entry(t, false);
    if (!e) return;
    if (raw) FUZZ_CHECK(reseal(t) == t);
    FUZZ_CHECK(lean && same_fields(*lean, *e) && lean->components.empty());
    FUZZ_CHECK(lower_hex32(e->key));

    const std::string text = skc::detail::encode_entry(*e);
    const std::optional<skc::CacheEntry> back = skc::detail::decode_entry(text);
    FUZZ_CHECK(back && same_fields(*back, *e));
    FUZZ_CHECK(back->components == e->components);
    FUZZ_CHECK(skc::detail::encode_entry(*back) == text);
}

void check_op_list(std::string_view t, bool raw) {
    const std::optional<std::vector<skc::KeyOp>> ops = skc::detail::decode_op_list(t);
    if (!ops) return;
    if (raw) FUZZ_CHECK(reseal(t) == t);
    for (const skc::KeyOp& op : *ops) FUZZ_CHECK(!op.name.empty());
    const std::string text = skc::detail::encode_op_list(*ops);
    const std::optional<std::vector<skc::KeyOp>> back = skc::detail::decode_op_list(text);
    FUZZ_CHECK(back && back->size() == ops->size());
    for (std::size_t i = 0; i < ops->size(); ++i)
        FUZZ_CHECK((*back)[i].digest == (*ops)[i].digest && (*back)[i].name == (*ops)[i].name);
    FUZZ_CHECK(skc::detail::encode_op_list(*back) == text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view raw = fuzz::as_text(data, size);
    const std::string sealed = reseal(raw);
    check_entry(raw, true);
    check_entry(sealed, false);
    check_op_list(raw, true);
    check_op_list(sealed, false);
    return 0;
}
