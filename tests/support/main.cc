// The main of the suites whose cases come from the providers found at run
// time (transport_test, store_test): gtest's, plus one check. ctest runs
// each case by the full name it listed at discovery
// (--gtest_filter=Suite.Test/case). The cases come from the providers found
// when the binary starts, so a case listed then but not generated now (an
// efa or verbs provider gone since discovery, or tests discovered on another
// host) would match no test and pass having run nothing: that is a failure,
// with the reason.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const std::string filter = GTEST_FLAG_GET(filter);
  const bool one_test = filter.find_first_of("*?:-") == std::string::npos;
  if (rc == 0 && one_test && !GTEST_FLAG_GET(list_tests) &&
      ::testing::UnitTest::GetInstance()->test_to_run_count() == 0) {
    std::fprintf(stderr,
                 "no test %s in this binary on this host: its provider is not here now (the cases were "
                 "listed when ctest discovered the tests; build again to list them anew)\n",
                 filter.c_str());
    return 1;
  }
  return rc;
}
