#include "common/text.h"

#include <gtest/gtest.h>

namespace kvfabric::text {
namespace {

TEST(TextTest, BytesNamesTheLargestWholeUnit) {
  EXPECT_EQ(text::Bytes(UINT64_MAX), "unlimited");
  EXPECT_EQ(text::Bytes(0), "0 bytes");
  EXPECT_EQ(text::Bytes(1000), "1000 bytes");
  EXPECT_EQ(text::Bytes(4096), "4 KiB");
  EXPECT_EQ(text::Bytes(uint64_t{8} << 20), "8 MiB");
  EXPECT_EQ(text::Bytes((uint64_t{1} << 30) + 4096), "1048580 KiB");
  EXPECT_EQ(text::Bytes(uint64_t{3} << 40), "3 TiB");
}

TEST(TextTest, EditDistanceCountsSingleCharacterEdits) {
  EXPECT_EQ(EditDistance("", ""), 0u);
  EXPECT_EQ(EditDistance("abc", ""), 3u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("KVF_LOGLEVEL", "KVF_LOG_LEVEL"), 1u);
  EXPECT_EQ(EditDistance("same", "same"), 0u);
  EXPECT_EQ(EditDistance("ab", "ba"), 2u);
}

}  // namespace
}  // namespace kvfabric::text
