// The main of the test executables. Each executable holds several areas, and meson runs one area per
// test with doctest's --source-file filter; a filter that matches no test case (a renamed or moved
// test file) fails the run instead of passing with nothing tested.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

namespace {

int matched_test_cases = -1;  // -1: the run did not reach its end (a query such as --help)

struct CountMatched : doctest::IReporter {
    explicit CountMatched(const doctest::ContextOptions&) {}
    void report_query(const doctest::QueryData&) override {}
    void test_run_start() override {}
    void test_run_end(const doctest::TestRunStats& stats) override {
        matched_test_cases = static_cast<int>(stats.numTestCasesPassingFilters);
    }
    void test_case_start(const doctest::TestCaseData&) override {}
    void test_case_reenter(const doctest::TestCaseData&) override {}
    void test_case_end(const doctest::CurrentTestCaseStats&) override {}
    void test_case_exception(const doctest::TestCaseException&) override {}
    void subcase_start(const doctest::SubcaseSignature&) override {}
    void subcase_end() override {}
    void log_assert(const doctest::AssertData&) override {}
    void log_message(const doctest::MessageData&) override {}
    void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

REGISTER_LISTENER("count_matched", 1, CountMatched);

int main(int argc, char** argv) {
    doctest::Context context(argc, argv);
    const int result = context.run();
    if (context.shouldExit() || result != 0) {
        return result;
    }
    if (matched_test_cases == 0) {
        std::fprintf(stderr, "no test case matches the filters\n");
        return 1;
    }
    return result;
}
