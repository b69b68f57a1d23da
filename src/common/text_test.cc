#include "common/text.h"

#include <gtest/gtest.h>

namespace kvfabric::text {
namespace {

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
