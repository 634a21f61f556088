#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include <skc/op_info_io.hpp>
#include <skc/options.hpp>
#include <skc/policy/remote.hpp>

namespace skc_options_test {

namespace {

skc::Options parse(std::string_view json) { return skc::parse_options(skc::parse_json(json)); }

std::string error_of(std::string_view json) {
    try {
        (void)parse(json);
    } catch (const skc::Error& e) {
        CHECK(e.code() == skc::Errc::invalid_option);
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST_CASE("defaults") {
    const skc::Options o = parse("{}");
    CHECK_FALSE(o.static_kernel_compile);
    CHECK_FALSE(o.disable_static_kernel_compile_cache);
    CHECK_FALSE(o.cache_enabled());
    CHECK_FALSE(o.model_compile_cache);
    CHECK_FALSE(o.force_eager);
    CHECK(o.op_blacklist.empty());
    CHECK(o.compile_timeout == std::chrono::seconds(3600));
    CHECK(o.jobs >= 1);
    CHECK_FALSE(o.log_level.has_value());
    CHECK_FALSE(o.deterministic);
    CHECK(o.compiler_options.empty());
}

TEST_CASE("every option is read") {
    const skc::Options o = parse(R"({
        "static_kernel_compile": true, "disable_static_kernel_compile_cache": true,
        "model_compile_cache": true, "model_compile_cache_dir": "/cache", "force_eager": true,
        "base_dir": "/out", "op_blacklist": ["Gelu", "MatMulV2_float"], "compile_timeout_seconds": 90,
        "jobs": 6, "log_level": "debug", "deterministic": true, "compiler_options": ["--opt=1"],
        "super_kernel": true})");
    CHECK(o.static_kernel_compile);
    CHECK(o.disable_static_kernel_compile_cache);
    CHECK_FALSE(o.cache_enabled());  // the feature is on but the cache is disabled
    CHECK(o.model_compile_cache);
    CHECK(o.model_compile_cache_dir == "/cache");
    CHECK(o.force_eager);
    CHECK_FALSE(o.use_model_cache_dir());  // force_eager wins
    CHECK(o.base_dir == "/out");
    CHECK(o.op_blacklist == std::vector<std::string>{"Gelu", "MatMulV2_float"});
    CHECK(o.compile_timeout == std::chrono::seconds(90));
    CHECK(o.jobs == 6);
    CHECK(o.log_level == skc::LogLevel::debug);
    CHECK(o.deterministic);
    CHECK(o.compiler_options == std::vector<std::string>{"--super-kernel=true", "--opt=1"});
}

TEST_CASE("the cache switch only matters when the feature is on") {
    CHECK(parse(R"({"static_kernel_compile": true})").cache_enabled());
    CHECK_FALSE(parse(R"({"disable_static_kernel_compile_cache": false})").cache_enabled());
}

TEST_CASE("an unknown key is an error that names it and lists the known keys") {
    CHECK_EQ(error_of(R"({"static_kernel_compiles": true})"),
             "option 'static_kernel_compiles': unknown option; known options are: static_kernel_compile, "
             "disable_static_kernel_compile_cache, model_compile_cache, model_compile_cache_dir, force_eager, "
             "base_dir, op_blacklist, compile_timeout_seconds, jobs, log_level, deterministic, compiler_options, "
             "super_kernel, compiler_check, cache_dir, cache_mode, remote_cache, remote_cache_read_only");
}

TEST_CASE("wrongly typed and out-of-range values name the key and what is accepted") {
    CHECK_EQ(error_of(R"({"static_kernel_compile": "true"})"),
             "option 'static_kernel_compile': expected true or false, found string \"true\"");
    CHECK_EQ(error_of(R"({"disable_static_kernel_compile_cache": 1})"),
             "option 'disable_static_kernel_compile_cache': expected true or false, found integer 1");
    CHECK_EQ(error_of(R"({"jobs": 0})"), "option 'jobs': expected an integer from 1 to 1024, found 0");
    CHECK_EQ(error_of(R"({"jobs": 2.5})"), "option 'jobs': expected an integer from 1 to 1024, found number 2.5");
    CHECK_EQ(error_of(R"({"compile_timeout_seconds": -1})"),
             "option 'compile_timeout_seconds': expected an integer from 1 to 604800, found -1");
    CHECK_EQ(error_of(R"({"op_blacklist": "Gelu"})"),
             "option 'op_blacklist': expected an array of strings, found string \"Gelu\"");
    CHECK_EQ(error_of(R"({"op_blacklist": ["Gelu", 3]})"),
             "option 'op_blacklist': element 1: expected a string, found integer 3");
    CHECK_EQ(error_of(R"({"op_blacklist": [""]})"),
             "option 'op_blacklist': an empty substring would blacklist every op");
    CHECK_EQ(
        error_of(R"({"log_level": "verbose"})"),
        "option 'log_level': value \"verbose\" is not accepted: use \"debug\", \"info\", \"warning\" or \"error\"");
    CHECK_EQ(error_of(R"({"model_compile_cache": true})"),
             "option 'model_compile_cache_dir': required when model_compile_cache is true");
    CHECK_EQ(error_of(R"([])"), "options must be a JSON object, found array");
}

TEST_CASE("the value found is shown: strings quoted, escaped and cut, scalars as they are") {
    CHECK_EQ(error_of(R"({"base_dir": 7})"), "option 'base_dir': expected a string, found integer 7");
    CHECK_EQ(error_of(R"({"force_eager": null})"), "option 'force_eager': expected true or false, found null");
    CHECK_EQ(error_of(R"({"force_eager": [true]})"), "option 'force_eager': expected true or false, found array");
    CHECK_EQ(error_of(R"({"force_eager": {"a": 1}})"), "option 'force_eager': expected true or false, found object");
    CHECK_EQ(error_of(R"({"jobs": "4"})"), "option 'jobs': expected an integer from 1 to 1024, found string \"4\"");
    CHECK_EQ(error_of(R"({"jobs": 18446744073709551615})"),
             "option 'jobs': expected an integer from 1 to 1024, found an integer above 2^63-1");
    CHECK_EQ(error_of(R"({"static_kernel_compile": "a\"b\n"})"),
             "option 'static_kernel_compile': expected true or false, found string \"a\\x22b\\x0a\"");
    const std::string long_text(100, 'x');
    CHECK_EQ(error_of(R"({"deterministic": ")" + long_text + R"("})"),
             "option 'deterministic': expected true or false, found string \"" + std::string(64, 'x') + "\"...");
    CHECK_EQ(error_of(R"({"log_level": "\u0001"})"),
             "option 'log_level': value \"\\x01\" is not accepted: use \"debug\", \"info\", \"warning\" or \"error\"");
}

TEST_CASE("a host's own keys are skipped, and listed when a key is unknown") {
    constexpr std::array<std::string_view, 2> host{"compiler", "device"};
    const skc::Options o =
        skc::parse_options(skc::parse_json(R"({"static_kernel_compile": true, "compiler": 3, "device": "x"})"), host);
    CHECK(o.static_kernel_compile);
    try {
        (void)skc::parse_options(skc::parse_json(R"({"compilr": "/bin/true"})"), host);
        FAIL("an unknown key was accepted");
    } catch (const skc::Error& e) {
        CHECK_EQ(e.option(), "compilr");
        CHECK_EQ(std::string(e.what()),
                 "option 'compilr': unknown option; known options are: static_kernel_compile, "
                 "disable_static_kernel_compile_cache, model_compile_cache, model_compile_cache_dir, force_eager, "
                 "base_dir, op_blacklist, compile_timeout_seconds, jobs, log_level, deterministic, compiler_options, "
                 "super_kernel, compiler_check, cache_dir, cache_mode, remote_cache, remote_cache_read_only, compiler, "
                 "device");
    }
}

TEST_CASE("cache_mode: the option, else SKC_CACHE_MODE, else unset") {
    ::unsetenv("SKC_CACHE_MODE");
    CHECK_FALSE(skc::requested_cache_mode(skc::Options{}).has_value());
    CHECK(skc::parse_options(skc::parse_json(R"({"cache_mode": "read-only"})")).cache_mode ==
          skc::CacheMode::read_only);
    CHECK_EQ(error_of(R"({"cache_mode": "ro"})"),
             "option 'cache_mode': value \"ro\" is not accepted: use read-write, read-only or recache");
    ::setenv("SKC_CACHE_MODE", "recache", 1);
    CHECK(skc::requested_cache_mode(skc::Options{}) == skc::CacheMode::recache);
    skc::Options o;
    o.cache_mode = skc::CacheMode::read_write;
    CHECK(skc::requested_cache_mode(o) == skc::CacheMode::read_write);
    ::setenv("SKC_CACHE_MODE", "never", 1);
    CHECK_THROWS_WITH(skc::requested_cache_mode(skc::Options{}),
                      "option 'SKC_CACHE_MODE': value \"never\" is not accepted: use read-write, read-only or recache");
    ::unsetenv("SKC_CACHE_MODE");
}

TEST_CASE("remote_cache: the option, else SKC_REMOTE_CACHE; read-only by option or environment") {
    ::unsetenv("SKC_REMOTE_CACHE");
    ::unsetenv("SKC_REMOTE_CACHE_READ_ONLY");
    CHECK_FALSE(skc::resolve_remote_config(skc::Options{}).has_value());
    const skc::Options o = skc::parse_options(
        skc::parse_json(R"({"remote_cache": "redis://cache:6380/2", "remote_cache_read_only": true})"));
    std::optional<skc::RemoteConfig> c = skc::resolve_remote_config(o);
    REQUIRE(c);
    CHECK(c->url == "redis://cache:6380/2");
    CHECK(c->read_only);
    CHECK(c->connect_timeout == std::chrono::milliseconds(1000));
    CHECK_EQ(error_of(R"({"remote_cache": 6379})"), "option 'remote_cache': expected a string, found integer 6379");
    CHECK_EQ(error_of(R"({"remote_cache_read_only": "yes"})"),
             "option 'remote_cache_read_only': expected true or false, found string \"yes\"");

    ::setenv("SKC_REMOTE_CACHE", "redis://env:6379", 1);
    c = skc::resolve_remote_config(skc::Options{});
    REQUIRE(c);
    CHECK(c->url == "redis://env:6379");
    CHECK_FALSE(c->read_only);
    CHECK(skc::resolve_remote_config(o)->url == "redis://cache:6380/2");  // the option first
    ::setenv("SKC_REMOTE_CACHE_READ_ONLY", "1", 1);
    CHECK(skc::resolve_remote_config(skc::Options{})->read_only);
    ::setenv("SKC_REMOTE_CACHE_READ_ONLY", "yes", 1);
    CHECK_THROWS_WITH(skc::resolve_remote_config(skc::Options{}),
                      "option 'SKC_REMOTE_CACHE_READ_ONLY': SKC_REMOTE_CACHE_READ_ONLY=\"yes\": expected 1, true, 0 "
                      "or false");
    ::unsetenv("SKC_REMOTE_CACHE_READ_ONLY");
    ::unsetenv("SKC_REMOTE_CACHE");
}

}  // namespace skc_options_test
