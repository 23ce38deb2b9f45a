// doctest's implementation and main(), compiled once and linked into every test program. A run
// whose filters select no test case fails: the unit tests are one program that each meson test
// narrows to its files (--source-file), and a filter that matched nothing would pass unseen.
#define DOCTEST_CONFIG_IMPLEMENT
#include "doctest.hpp"

#include <cstdio>

namespace {

int selected_cases = -1;  // how many cases the run's filters selected, once it ended
bool queried = false;     // --count, --list-test-cases and the like: nothing runs

// A listener that only reads the run's totals.
struct SelectedCases : doctest::IReporter {
  explicit SelectedCases(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override { queried = true; }
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override { selected_cases = static_cast<int>(s.numTestCasesPassingFilters); }
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
DOCTEST_REGISTER_LISTENER("selected_cases", 1, SelectedCases);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int rc = context.run();
  if (context.shouldExit() || queried || rc != 0) return rc;
  if (selected_cases == 0) {
    std::fprintf(stderr, "error: no test case matches this run's filters: nothing was tested\n");
    return 1;
  }
  return rc;
}
