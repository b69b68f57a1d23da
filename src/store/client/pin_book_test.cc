#include "store/client/pin_book.h"

#include <gtest/gtest.h>

namespace kvfabric::store {
namespace {

TEST(PinBook, AnUnpinGoesWherePinWentWhateverTheHomeIsNow) {
  PinBook pins;
  pins.Record("k", "a:1");  // pinned while a:1 was the key's home
  // The key's home is now b:2 (a:1 was marked down and back, or b:2
  // joined): nothing of that reaches the book, and the unpin still goes to a:1.
  ASSERT_TRUE(pins.Holder("k").has_value());
  EXPECT_EQ(*pins.Holder("k"), "a:1");
  pins.Record("k", "b:2");  // a second pin, taken at the new home
  EXPECT_EQ(*pins.Holder("k"), "a:1");  // the oldest first
  pins.Forget("k", "a:1");
  EXPECT_EQ(*pins.Holder("k"), "b:2");
  pins.Forget("k", "b:2");
  EXPECT_FALSE(pins.Holder("k").has_value());  // none held: to the home
}

TEST(PinBook, PinsAtOneMemberAreCountedAndForgottenOneByOne) {
  PinBook pins;
  pins.Record("k", "a:1");
  pins.Record("k", "a:1");
  EXPECT_EQ(pins.Count("k", "a:1"), 2u);
  pins.Forget("k", "a:1");
  EXPECT_EQ(*pins.Holder("k"), "a:1");
  pins.Forget("k", "a:1");
  EXPECT_FALSE(pins.Holder("k").has_value());
}

TEST(PinBook, ForgettingWhatWasNeverPinnedChangesNothing) {
  PinBook pins;
  pins.Forget("k", "a:1");
  pins.Record("k", "a:1");
  pins.Forget("k", "b:2");  // an unpin the home answered for a pin of another process
  pins.Forget("other", "a:1");
  EXPECT_EQ(pins.Count("k", "a:1"), 1u);
  EXPECT_FALSE(pins.Holder("other").has_value());
}

}  // namespace
}  // namespace kvfabric::store
