// The sender's held buckets (FirstHeld) and the notices that keep an
// adopted receiver's buckets apart from its dead parent's.
#include <gtest/gtest.h>

#include <set>

#include "weights/weight_sync_impl.h"

namespace kvfabric::weights {
namespace {

TEST(FirstHeldTest, TheSlotBeingFilledNoLongerHoldsItsOldBucket) {
  EXPECT_EQ(FirstHeld(0, 0, 2), 0u) << "nothing sent";
  EXPECT_EQ(FirstHeld(1, 1, 2), 0u) << "bucket 1 fills slot 1: bucket 0 stays in slot 0";
  EXPECT_EQ(FirstHeld(2, 1, 2), 0u) << "bucket 1 sealed, bucket 2 not opened: both held";
  EXPECT_EQ(FirstHeld(2, 2, 2), 1u) << "bucket 2 fills slot 0, where bucket 0 was";
  EXPECT_EQ(FirstHeld(5, 4, 2), 3u);
  EXPECT_EQ(FirstHeld(5, 5, 2), 4u);
  EXPECT_EQ(FirstHeld(5, 5, 1), 5u) << "one slot: nothing sealed while it fills";
  for (uint64_t slots = 1; slots <= 4; ++slots)
    for (uint64_t sent = 0; sent < 12; ++sent)
      for (int64_t open : {static_cast<int64_t>(sent) - 1, static_cast<int64_t>(sent)}) {
        const uint64_t first = FirstHeld(sent, open, slots);
        EXPECT_LE(first, sent);
        EXPECT_LE(sent - first, open >= static_cast<int64_t>(sent) ? slots - 1 : slots) << sent << " " << slots;
      }
}

TEST(NoticeTest, KindsNeverShareAValueAndAdoptedOnesDifferByVersionParity) {
  std::set<uint16_t> data, adopted_odd, adopted_even, failures;
  for (uint64_t b = 0; b < 40000; ++b) {
    data.insert(DataNotice(b));
    adopted_odd.insert(AdoptedNotice(1, b));
    adopted_even.insert(AdoptedNotice(2, b));
    failures.insert(FailureNotice(b));
  }
  for (const auto* kind : {&data, &adopted_odd, &adopted_even, &failures}) {
    EXPECT_EQ(kind->count(0), 0u) << "0 is no notice";
    EXPECT_EQ(kind->count(kWordNotice), 0u);
    EXPECT_EQ(kind->count(kRefusedNotice), 0u);
  }
  for (uint16_t n : data) EXPECT_TRUE(IsDataNotice(n) && !IsAdoptedNotice(n) && !IsFailureNotice(n)) << n;
  for (uint16_t n : failures) EXPECT_TRUE(IsFailureNotice(n) && !IsDataNotice(n) && !IsAdoptedNotice(n)) << n;
  for (const auto* kind : {&adopted_odd, &adopted_even})
    for (uint16_t n : *kind) {
      EXPECT_TRUE(IsAdoptedNotice(n) && !IsDataNotice(n) && !IsFailureNotice(n)) << n;
      EXPECT_EQ((kind == &adopted_odd ? adopted_even : adopted_odd).count(n), 0u) << "parity apart: " << n;
    }
  EXPECT_NE(AdoptedNotice(3, 7), AdoptedNotice(3, 8)) << "buckets apart within a version";
}

TEST(WordTest, AWordCarriesItsVersionFlagsAndCount) {
  const uint64_t w = MakeWord(7, 12, kRequest);
  EXPECT_TRUE(WordOf(w, 7));
  EXPECT_FALSE(WordOf(w, 8));
  EXPECT_EQ(w & kCountMask, 12u);
  EXPECT_NE(w & kRequest, 0u);
  EXPECT_EQ(MakeWord(7, 12) & kRequest, 0u);
  EXPECT_TRUE(WordOf(MakeWord(uint64_t{1} << 33 | 5, 0), 5)) << "the version's low 32 bits";
}

}  // namespace
}  // namespace kvfabric::weights
