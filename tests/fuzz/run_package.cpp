// Fuzzes the check of a makeself run package's header, run_package_header_fault
// (include/skc/run_package.hpp): the input is the whole package, or its start with the size of a
// longer file. Properties:
//   - it never throws and always gives a verdict for a whole file;
//   - a whole file it accepts starts with "#!", and one byte more or less is refused (the header's
//     sizes fix the file's size exactly);
//   - the start of a file it accepts is never refused when the size given is the whole file's;
//   - a refusal is a non-empty sentence.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <skc/run_package.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in = fuzz::as_text(data, size);
    const std::optional<std::string> whole = skc::run_package_header_fault(in, in.size());
    if (whole) {
        FUZZ_CHECK(!whole->empty());
        return 0;
    }
    FUZZ_CHECK(in.substr(0, 2) == "#!");
    const std::string longer = std::string(in) + "x";
    FUZZ_CHECK(skc::run_package_header_fault(longer, longer.size()).has_value());
    FUZZ_CHECK(skc::run_package_header_fault(in.substr(0, in.size() - 1), in.size() - 1).has_value());
    // Read only in part (as run_package_fault reads at most 1 MiB of a bigger file): no false refusal.
    for (std::size_t part : {in.size() / 2, in.size() - 1})
        FUZZ_CHECK(!skc::run_package_header_fault(in.substr(0, part), in.size()));
    return 0;
}
