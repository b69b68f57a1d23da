#include "common/base64.h"

#include <gtest/gtest.h>

namespace kvfabric::base64 {

TEST(Base64Test, Rfc4648Vectors) {
  const char* plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
  const char* coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(Encode(plain[i]), coded[i]);
    std::string back;
    ASSERT_TRUE(Decode(coded[i], &back)) << coded[i];
    EXPECT_EQ(back, plain[i]);
  }
}

TEST(Base64Test, BinaryRoundTrip) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  std::string back;
  ASSERT_TRUE(Decode(Encode(all), &back));
  EXPECT_EQ(back, all);
}

TEST(Base64Test, RejectsMalformed) {
  std::string out;
  EXPECT_FALSE(Decode("Zm9", &out));       // length
  EXPECT_FALSE(Decode("Zm9v!A==", &out));  // alphabet
  EXPECT_FALSE(Decode("Z=9v", &out));      // padding in the middle
  EXPECT_FALSE(Decode("Zg==Zg==", &out));  // padding before the end
}

}  // namespace kvfabric::base64
