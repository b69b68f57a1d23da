#include "common/crypto.h"

#include <gtest/gtest.h>

#include <set>

#include "common/hex.h"

namespace kvfabric {
namespace {

TEST(CryptoTest, HmacSha256MatchesRfc4231) {
  // RFC 4231, test case 2.
  EXPECT_EQ(hex::Encode(crypto::HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(CryptoTest, Sha256OfAbc) {
  EXPECT_EQ(hex::Encode(crypto::Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(CryptoTest, SameBytesComparesSizeAndContent) {
  EXPECT_TRUE(crypto::SameBytes("abc", "abc"));
  EXPECT_FALSE(crypto::SameBytes("abc", "abd"));
  EXPECT_FALSE(crypto::SameBytes("abc", "abcd"));
  EXPECT_TRUE(crypto::SameBytes("", ""));
}

TEST(CryptoTest, RandomValuesDiffer) {
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) seen.insert(crypto::RandomU64());
  EXPECT_EQ(seen.size(), 1000u);
}

}  // namespace
}  // namespace kvfabric
