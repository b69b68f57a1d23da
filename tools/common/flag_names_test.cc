#include "tools/common/flag_names.h"

#include <gtest/gtest.h>

namespace kvfabric::tools {
namespace {

TEST(FlagNamesTest, OldNamesBecomeNewOnesWithAWarningEach) {
  std::vector<std::string> args = {"--mode=initiator", "--device_name=a0,a1", "--engine_address",
                                   "10.0.0.1:0", "--set", "KVF_TX_DEPTH=64", "--setting=KVF_LOG_LEVEL=warn"};
  const std::vector<std::string> warnings = RenameFlags(args);
  EXPECT_EQ(args, (std::vector<std::string>{"--mode=initiator", "--nic_filter=a0,a1", "--local_server_name",
                                            "10.0.0.1:0", "--set", "KVF_TX_DEPTH=64", "--set=KVF_LOG_LEVEL=warn"}));
  ASSERT_EQ(warnings.size(), 3u);
  EXPECT_EQ(warnings[0], "--device_name is now --nic_filter (the old name still works)");
  EXPECT_EQ(warnings[1], "--engine_address is now --local_server_name (the old name still works)");
  EXPECT_EQ(warnings[2], "--setting is now --set (the old name still works)");
}

TEST(FlagNamesTest, OnlyWholeFlagNamesAreRewritten) {
  // A longer flag that starts like an old one, a value that spells one, and
  // the word "target" as a mode are left alone.
  std::vector<std::string> args = {"--targets=3", "--nicsx", "--segment_id", "--target", "target", "--mode=target"};
  const std::vector<std::string> warnings = RenameFlags(args);
  EXPECT_EQ(args, (std::vector<std::string>{"--targets=3", "--nicsx", "--segment_id", "--segment_id", "target",
                                            "--mode=target"}));
  EXPECT_EQ(warnings.size(), 1u);
}

TEST(FlagNamesTest, UseCurrentFlagNamesRewritesArgvInPlace) {
  std::string w0 = "tool", w1 = "--nics=b0", w2 = "--protocol=tcp";
  char* argv[] = {w0.data(), w1.data(), w2.data()};
  testing::internal::CaptureStderr();
  UseCurrentFlagNames(3, argv, "tool");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "tool: --nics is now --nic_filter (the old name still works)\n");
  EXPECT_STREQ(argv[0], "tool");
  EXPECT_STREQ(argv[1], "--nic_filter=b0");
  EXPECT_STREQ(argv[2], "--protocol=tcp");
}

}  // namespace
}  // namespace kvfabric::tools
