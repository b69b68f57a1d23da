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

TEST(ValueTableTest, EntriesWithATtlExpireAndFreeTheirRoom) {
  using std::chrono::seconds;
  ValueTable::Clock::time_point now{};
  ValueTable t({/*max_keys=*/2, /*max_value=*/10, /*max_total_bytes=*/100}, [&] { return now; });
  ASSERT_TRUE(t.Put("a", "1", seconds(2)).ok());
  ASSERT_TRUE(t.Put("b", "2").ok());  // no ttl: never expires
  EXPECT_EQ(t.Put("c", "3").code(), Status::Code::kBusy);
  std::string v;
  now += std::chrono::milliseconds(1999);
  EXPECT_TRUE(t.Get("a", &v));
  // Putting again restarts the ttl.
  ASSERT_TRUE(t.Put("a", "1", seconds(2)).ok());
  now += seconds(1);
  EXPECT_TRUE(t.Get("a", &v));
  now += seconds(1);
  EXPECT_FALSE(t.Get("a", &v));
  EXPECT_FALSE(t.Remove("a"));
  EXPECT_EQ(t.total_bytes(), 2u);
  EXPECT_TRUE(t.Put("c", "3").ok());  // the expired key's room is free

  // A put without a ttl makes an entry permanent; one with a ttl makes it expire.
  ASSERT_TRUE(t.Put("c", "3", seconds(1)).ok());
  ASSERT_TRUE(t.Put("c", "4").ok());
  ASSERT_TRUE(t.Put("b", "5", seconds(1)).ok());
  now += seconds(5);
  EXPECT_TRUE(t.Get("c", &v));
  EXPECT_EQ(v, "4");
  EXPECT_FALSE(t.Get("b", &v));
  EXPECT_EQ(t.total_bytes(), 2u);
}

TEST(ValueTableTest, ListingsTakeAPrefixAndAreBounded) {
  ValueTable::Clock::time_point now{};
  ValueTable t({/*max_keys=*/10, /*max_value=*/10, /*max_total_bytes=*/100, /*max_list_bytes=*/12},
               [&] { return now; });
  for (const char* k : {"m/b", "m/a", "n/a", "m", "m/c"}) ASSERT_TRUE(t.Put(k, "v").ok());
  ASSERT_TRUE(t.Put("m/d", "gone", std::chrono::seconds(1)).ok());
  now += std::chrono::seconds(1);
  std::map<std::string, std::string> out;
  ASSERT_TRUE(t.List("m/", &out).ok());
  EXPECT_EQ(out, (std::map<std::string, std::string>{{"m/a", "v"}, {"m/b", "v"}, {"m/c", "v"}}));  // 12 bytes
  ASSERT_TRUE(t.List("n/", &out).ok());
  EXPECT_EQ(out.size(), 1u);
  ASSERT_TRUE(t.List("x", &out).ok());
  EXPECT_TRUE(out.empty());

  // 18 bytes: refused, naming the flag.
  Status s = t.List("", &out);
  EXPECT_EQ(s.code(), Status::Code::kBusy);
  EXPECT_NE(s.message().find("--max_list_bytes"), std::string::npos) << s.ToString();
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace kvfabric::metadata_server
