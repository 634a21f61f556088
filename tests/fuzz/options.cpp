// Fuzzes the options reader (include/skc/options.hpp): the input is the JSON text of an options
// object, read as a host does (parse_json, then parse_options with two host keys of its own).
// Properties:
//   - a rejected text is an skc::Error: invalid_json or limit_exceeded from the JSON reader,
//     invalid_option (naming an option) from parse_options;
//   - accepted options keep their documented ranges (jobs 1 to 1024, a timeout of 1 s to 7 days, no
//     empty blacklist entry, a model cache folder when the model cache is on, super_kernel as the
//     first compiler option);
//   - the order of the keys does not matter: the members reversed give the same result;
//   - round trip: the options written back as a JSON object (every option set) and read again are
//     the same options;
//   - the input as one option value: parse_compiler_check and parse_cache_mode accept exactly what
//     their written forms give back.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <skc/error.hpp>
#include <skc/op_info_io.hpp>
#include <skc/options.hpp>
#include <skc/value.hpp>

#include "fuzz_support.hpp"

namespace {

constexpr std::array<std::string_view, 2> host_keys{"compiler", "device"};

bool same(const skc::Options& a, const skc::Options& b) {
    return a.static_kernel_compile == b.static_kernel_compile &&
           a.disable_static_kernel_compile_cache == b.disable_static_kernel_compile_cache &&
           a.model_compile_cache == b.model_compile_cache && a.model_compile_cache_dir == b.model_compile_cache_dir &&
           a.force_eager == b.force_eager && a.base_dir == b.base_dir && a.op_blacklist == b.op_blacklist &&
           a.compile_timeout == b.compile_timeout && a.jobs == b.jobs && a.log_level == b.log_level &&
           a.deterministic == b.deterministic && a.compiler_options == b.compiler_options &&
           a.compiler_check == b.compiler_check && a.cache_dir == b.cache_dir && a.cache_mode == b.cache_mode;
}

std::string check_text(const skc::CompilerCheck& c) {
    switch (c.mode) {
    case skc::CompilerCheck::Mode::content: return "content";
    case skc::CompilerCheck::Mode::mtime: return "mtime";
    case skc::CompilerCheck::Mode::none: return "none";
    case skc::CompilerCheck::Mode::string: return "string:" + c.text;
    case skc::CompilerCheck::Mode::command: return "command:" + c.text;
    }
    __builtin_trap();
}

skc::Value strings(const std::vector<std::string>& v) {
    skc::Array a;
    for (const std::string& s : v) a.emplace_back(s);
    return skc::Value(std::move(a));
}

/// Every option, as a JSON object parse_options reads back into `o`.
skc::Value written(const skc::Options& o) {
    skc::Object m;
    m.push_back({"static_kernel_compile", o.static_kernel_compile});
    m.push_back({"disable_static_kernel_compile_cache", o.disable_static_kernel_compile_cache});
    m.push_back({"model_compile_cache", o.model_compile_cache});
    m.push_back({"model_compile_cache_dir", o.model_compile_cache_dir});
    m.push_back({"force_eager", o.force_eager});
    m.push_back({"base_dir", o.base_dir});
    m.push_back({"op_blacklist", strings(o.op_blacklist)});
    m.push_back({"compile_timeout_seconds", static_cast<std::int64_t>(o.compile_timeout.count())});
    m.push_back({"jobs", static_cast<std::int64_t>(o.jobs)});
    if (o.log_level) m.push_back({"log_level", std::string(skc::to_string(*o.log_level))});
    m.push_back({"deterministic", o.deterministic});
    m.push_back({"compiler_options", strings(o.compiler_options)});
    m.push_back({"super_kernel", false});
    m.push_back({"compiler_check", check_text(o.compiler_check)});
    m.push_back({"cache_dir", o.cache_dir});
    if (o.cache_mode) m.push_back({"cache_mode", std::string(skc::to_string(*o.cache_mode))});
    return skc::Value(std::move(m));
}

std::optional<skc::Options> parse(const skc::Value& v) {
    try {
        return skc::parse_options(v, host_keys);
    } catch (const skc::Error& e) {
        FUZZ_CHECK(e.code() == skc::Errc::invalid_option);
        return std::nullopt;
    }
}

void check_options(const skc::Value& doc, const skc::Options& o) {
    const skc::Object& members = doc.as_object();
    const auto given = [&](std::string_view k) { return doc.find(k); };

    FUZZ_CHECK(o.jobs >= 1 && o.jobs <= 1024);
    if (given("jobs") == nullptr) FUZZ_CHECK(o.jobs == skc::Options::default_jobs());
    else FUZZ_CHECK(static_cast<std::int64_t>(o.jobs) == given("jobs")->as_int());
    FUZZ_CHECK(o.compile_timeout.count() >= 1 && o.compile_timeout.count() <= 7 * 24 * 3600);
    for (const std::string& b : o.op_blacklist) FUZZ_CHECK(!b.empty());
    if (o.model_compile_cache) FUZZ_CHECK(!o.model_compile_cache_dir.empty());
    if (const skc::Value* sk = given("super_kernel"); sk != nullptr && sk->as_bool())
        FUZZ_CHECK(!o.compiler_options.empty() && o.compiler_options.front() == "--super-kernel=true");
    if (o.compiler_check.mode == skc::CompilerCheck::Mode::command) FUZZ_CHECK(!o.compiler_check.text.empty());
    for (const skc::Member& m : members) {
        const bool known =
            std::find(skc::option_names.begin(), skc::option_names.end(), m.key) != skc::option_names.end();
        const bool host = std::find(host_keys.begin(), host_keys.end(), m.key) != host_keys.end();
        FUZZ_CHECK(known || host);
    }

    // Key order does not matter.
    skc::Object reversed(members.rbegin(), members.rend());
    const std::optional<skc::Options> r = parse(skc::Value(std::move(reversed)));
    FUZZ_CHECK(r && same(*r, o));

    // Round trip through the written object, as a Value and as text.
    const skc::Value w = written(o);
    const std::optional<skc::Options> back = parse(w);
    FUZZ_CHECK(back && same(*back, o));
    const std::optional<skc::Options> from_text = parse(skc::parse_json(skc::dump_json(w)));
    FUZZ_CHECK(from_text && same(*from_text, o));
}

void check_values(std::string_view text) {
    try {
        const skc::CompilerCheck c = skc::parse_compiler_check(text);
        FUZZ_CHECK(check_text(c) == text);
        FUZZ_CHECK(skc::parse_compiler_check(check_text(c)) == c);
    } catch (const skc::Error& e) {
        FUZZ_CHECK(e.code() == skc::Errc::invalid_option && e.option() == "compiler_check");
    }
    try {
        const skc::CacheMode m = skc::parse_cache_mode(text);
        FUZZ_CHECK(skc::to_string(m) == text);
    } catch (const skc::Error& e) {
        FUZZ_CHECK(e.code() == skc::Errc::invalid_option && e.option() == "cache_mode");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text = fuzz::as_text(data, size);
    check_values(text);

    skc::Value doc;
    try {
        doc = skc::parse_json(text);
    } catch (const skc::Error& e) {
        FUZZ_CHECK(e.code() == skc::Errc::invalid_json || e.code() == skc::Errc::limit_exceeded);
        return 0;
    }
    if (doc.is_string()) check_values(doc.as_string());
    if (doc.is_object())
        for (const skc::Member& m : doc.as_object())
            if (m.value.is_string()) check_values(m.value.as_string());
    const std::optional<skc::Options> o = parse(doc);
    if (!doc.is_object()) FUZZ_CHECK(!o);
    if (o) check_options(doc, *o);
    return 0;
}
