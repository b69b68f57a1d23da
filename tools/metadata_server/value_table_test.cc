#include "value_table.h"

#include <gtest/gtest.h>

namespace kvfabric::metadata_server {
namespace {

TEST(ValueTableTest, ValuesKeysAndTotalBytesAreBounded) {
  ValueTable t({/*max_keys=*/3, /*max_value=*/10, /*max_total_bytes=*/25});
  EXPECT_EQ(t.Put("a", std::string(11, 'x')).code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(t.Put("a", std::string(10, 'x')).ok());  // 11 bytes with its key
  EXPECT_TRUE(t.Put("b", std::string(10, 'y')).ok());  // 22
  Status s = t.Put("c", std::string(3, 'z'));           // 26 > 25
  EXPECT_EQ(s.code(), Status::Code::kBusy);
  EXPECT_NE(s.message().find("--max_total_bytes"), std::string::npos) << s.ToString();
  EXPECT_EQ(t.total_bytes(), 22u);
  std::string v;
  EXPECT_FALSE(t.Get("c", &v));

  // A replaced value's bytes are freed first.
  EXPECT_TRUE(t.Put("a", "1").ok());  // 2 + 11
  EXPECT_EQ(t.total_bytes(), 13u);
  EXPECT_TRUE(t.Put("c", "2").ok());
  s = t.Put("d", "3");
  EXPECT_EQ(s.code(), Status::Code::kBusy);
  EXPECT_NE(s.message().find("--max_keys"), std::string::npos) << s.ToString();
  EXPECT_TRUE(t.Put("c", "22").ok());  // replacing is no new key

  EXPECT_TRUE(t.Remove("b"));
  EXPECT_FALSE(t.Remove("b"));
  EXPECT_EQ(t.total_bytes(), 2u + 3u);
  EXPECT_TRUE(t.Get("c", &v));
  EXPECT_EQ(v, "22");
}

}  // namespace
}  // namespace kvfabric::metadata_server
