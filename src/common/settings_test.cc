#include "kvfabric/settings.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <sstream>

namespace kvfabric {
namespace {

TEST(SettingsTest, DefaultsComeFromTheDeclaration) {
  Settings s;
  EXPECT_EQ(s.progress_threads, 1);
  EXPECT_EQ(s.write_completion, "delivery");
  EXPECT_TRUE(s.same_host_shm);
  EXPECT_EQ(Settings::Table().size(), 26u);
  for (const auto& i : Settings::Table()) {
    EXPECT_EQ(i.env.rfind("KVF_", 0), 0u) << i.env;
    EXPECT_FALSE(i.meaning.empty()) << i.env;
    EXPECT_EQ(s.Get(i.field), i.default_value);
  }
}

TEST(SettingsTest, SetByFieldOrVariable) {
  Settings s;
  ASSERT_TRUE(s.Set("tx_depth", "32").ok());
  EXPECT_EQ(s.tx_depth, 32);
  ASSERT_TRUE(s.Set("KVF_TX_DEPTH", "0x40").ok());
  EXPECT_EQ(s.tx_depth, 64);
  ASSERT_TRUE(s.Set("KVF_SAME_HOST_SHM", "false").ok());
  EXPECT_FALSE(s.same_host_shm);
  EXPECT_EQ(s.Set("KVF_TX_DEPTH", "12abc").code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.tx_depth, 64);
  EXPECT_EQ(s.Set("KVF_SAME_HOST_SHM", "maybe").code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.Set("KVF_NO_SUCH", "1").code(), Status::Code::kNotFound);
}

TEST(SettingsTest, AssignTakesNameEqualsValue) {
  Settings s;
  ASSERT_TRUE(s.Assign("KVF_TX_DEPTH=16").ok());
  EXPECT_EQ(s.tx_depth, 16);
  ASSERT_TRUE(s.Assign("log_level=debug").ok());
  EXPECT_EQ(s.log_level, "debug");
  ASSERT_TRUE(s.Assign("KVF_AUTH_TOKEN=a=b").ok());  // the first '=' splits
  EXPECT_EQ(s.auth_token, "a=b");
  EXPECT_EQ(s.Assign("KVF_TX_DEPTH").code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.Assign("KVF_NO_SUCH=1").code(), Status::Code::kNotFound);
  EXPECT_EQ(s.tx_depth, 16);
}

TEST(SettingsTest, EnvironmentOverlayIsAllOrNothing) {
  setenv("KVF_PROGRESS_THREADS", "3", 1);
  setenv("KVF_TX_DEPTH", "not-a-number", 1);
  Settings s;
  Status st = s.ApplyEnvironment();
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("KVF_TX_DEPTH"), std::string::npos);
  EXPECT_EQ(s.progress_threads, 1);  // unchanged
  setenv("KVF_TX_DEPTH", "8", 1);
  ASSERT_TRUE(s.ApplyEnvironment().ok());
  EXPECT_EQ(s.progress_threads, 3);
  EXPECT_EQ(s.tx_depth, 8);
  unsetenv("KVF_PROGRESS_THREADS");
  unsetenv("KVF_TX_DEPTH");
}

// docs/settings.md is generated from the declaration; it must not drift.
TEST(SettingsTest, DocsAreGeneratedFromTheDeclaration) {
  std::ifstream f(std::string(KVF_SOURCE_DIR) + "/docs/settings.md");
  ASSERT_TRUE(f.good()) << "docs/settings.md missing: run `make docs`";
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find(Settings::MarkdownTable()), std::string::npos)
      << "docs/settings.md is stale: run `make docs`";
}

}  // namespace
}  // namespace kvfabric
