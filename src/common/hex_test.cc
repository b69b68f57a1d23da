#include "common/hex.h"

#include <gtest/gtest.h>

namespace kvfabric::hex {
namespace {

TEST(HexTest, RoundTripAndRejects) {
  const std::string bin("\x00\x01\xab\xff", 4);
  EXPECT_EQ(Encode(bin), "0001abff");
  std::string out = "untouched";
  ASSERT_TRUE(Decode("0001ABff", &out));
  EXPECT_EQ(out, bin);
  out = "untouched";
  EXPECT_FALSE(Decode("abc", &out));  // odd length
  EXPECT_FALSE(Decode("zz", &out));   // not hex
  EXPECT_EQ(out, "untouched");
  EXPECT_EQ(Address(0x7f12a0000000ull), "0x7f12a0000000");
}

}  // namespace
}  // namespace kvfabric::hex
