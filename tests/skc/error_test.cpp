#include <doctest/doctest.h>

#include <skc/error.hpp>

namespace skc_error_test {

TEST_CASE("Error joins file, JSON path, option and message into what()") {
    const skc::Error e(skc::Errc::invalid_op_info, "expected an integer, found string",
                       skc::ErrorContext{"ops/a.json", "inputs[1].shape[2]", {}});
    CHECK(e.code() == skc::Errc::invalid_op_info);
    CHECK_EQ(std::string(e.what()), "ops/a.json: inputs[1].shape[2]: expected an integer, found string");
    CHECK_EQ(e.message(), "expected an integer, found string");
    CHECK_EQ(e.file(), "ops/a.json");
    CHECK_EQ(e.json_path(), "inputs[1].shape[2]");
    CHECK(e.option().empty());
}

TEST_CASE("Error with an option name") {
    const skc::Error e(skc::Errc::invalid_option, "expected true or false, found string",
                       skc::ErrorContext{{}, {}, "static_kernel_compile"});
    CHECK_EQ(std::string(e.what()), "option 'static_kernel_compile': expected true or false, found string");
}

TEST_CASE("in_file adds a file to an error that has none, and keeps one that has") {
    const skc::Error e(skc::Errc::invalid_json, "not valid JSON");
    CHECK_EQ(std::string(e.in_file("x.json").what()), "x.json: not valid JSON");
    const skc::Error f(skc::Errc::io_error, "boom", skc::ErrorContext{"a", {}, {}});
    CHECK_EQ(f.in_file("b").file(), "a");
}

TEST_CASE("every code has a distinct name") {
    using skc::Errc;
    const Errc all[] = {Errc::invalid_json,   Errc::invalid_op_info, Errc::limit_exceeded,    Errc::invalid_option,
                        Errc::invalid_name,   Errc::unsafe_path,     Errc::permission_denied, Errc::io_error,
                        Errc::session_active, Errc::no_session,      Errc::invalid_argument,  Errc::timeout,
                        Errc::corrupt,        Errc::compile_failed};
    for (std::size_t i = 0; i < std::size(all); ++i) {
        CHECK(skc::to_string(all[i]) != "unknown");
        for (std::size_t j = 0; j < i; ++j) CHECK(skc::to_string(all[i]) != skc::to_string(all[j]));
    }
}

}  // namespace skc_error_test
