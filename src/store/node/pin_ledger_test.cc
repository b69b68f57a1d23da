#include "store/node/pin_ledger.h"

#include <gtest/gtest.h>

namespace kvfabric::store {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t KiB = 1024;
const PageTable::TimePoint t0 = PageTable::TimePoint{} + 1h;

// A pool of four 64 KiB pages a, b, c, d.
PageTable FourPages() {
  PageTable t(256 * KiB, 100ms);
  for (const char* k : {"a", "b", "c", "d"}) {
    uint64_t at = 0;
    EXPECT_TRUE(t.Reserve(64 * KiB, t0, &at).ok());
    t.Commit(k, at, 64 * KiB, {}, t0);
  }
  return t;
}

// A pin is its connection's: another's unpin ends nothing, its own does,
// and its connection's release ends the rest.
TEST(PinLedgerTest, PinsBelongToTheirConnection) {
  PageTable t = FourPages();
  PinLedger pins({100, 256 * KiB});
  std::vector<bool> pinned;
  ASSERT_TRUE(pins.PinAll(1, {"a", "a", "b", "x"}, &t, &pinned).ok());
  EXPECT_EQ(pinned, (std::vector<bool>{true, true, true, false}));
  ASSERT_TRUE(pins.PinAll(2, {"c"}, &t, &pinned).ok());
  EXPECT_FALSE(pins.Unpin(2, "a", &t)) << "another connection's pin";
  EXPECT_TRUE(pins.Unpin(1, "a", &t));
  EXPECT_EQ(t.stats().pinned_pages, 3u);
  EXPECT_EQ(pins.Release(1, &t), 2u) << "a once more, and b";
  EXPECT_EQ(pins.Release(1, &t), 0u);
  EXPECT_EQ(t.stats().pinned_pages, 1u);
  EXPECT_FALSE(pins.Unpin(1, "b", &t));
  EXPECT_TRUE(pins.Unpin(2, "c", &t));
  EXPECT_EQ(t.stats().pinned_pages, 0u);
}

// A connection holds at most max_pins; the pool at most max_pinned_bytes
// pinned, whoever pinned it. A refused batch pins nothing.
TEST(PinLedgerTest, LimitsRefuseWholeBatches) {
  PageTable t = FourPages();
  PinLedger pins({3, 128 * KiB});
  std::vector<bool> pinned;
  ASSERT_TRUE(pins.PinAll(1, {"a", "a"}, &t, &pinned).ok());
  Status s = pins.PinAll(1, {"a", "b"}, &t, &pinned);
  EXPECT_EQ(s.code(), Status::Code::kBusy);
  EXPECT_NE(s.message().find("KVF_STORE_MAX_PINS"), std::string::npos) << s.message();
  EXPECT_EQ(t.stats().pinned_pages, 1u);
  ASSERT_TRUE(pins.PinAll(2, {"b"}, &t, &pinned).ok());
  s = pins.PinAll(2, {"c"}, &t, &pinned);
  EXPECT_EQ(s.code(), Status::Code::kBusy) << "a third page of 64 KiB past 128 KiB pinned";
  EXPECT_NE(s.message().find("KVF_STORE_MAX_PINNED_SHARE"), std::string::npos) << s.message();
  EXPECT_EQ(t.stats().pinned_pages, 2u);
  EXPECT_FALSE(pins.Unpin(2, "c", &t));
}

// A page that goes (removed, dropped) takes its pins from every ledger
// entry, and remove-all takes them all: a page put again under the key is
// not pinned, and no connection's unpin or release touches it.
TEST(PinLedgerTest, PinsGoWithTheirPages) {
  PageTable t = FourPages();
  PinLedger pins({100, 256 * KiB});
  std::vector<bool> pinned;
  ASSERT_TRUE(pins.PinAll(1, {"a", "b"}, &t, &pinned).ok());
  ASSERT_TRUE(pins.PinAll(2, {"a"}, &t, &pinned).ok());
  ASSERT_TRUE(t.Remove("a", t0));
  pins.Forget("a");
  uint64_t at = 0;
  ASSERT_TRUE(t.Reserve(64 * KiB, t0 + 1s, &at).ok());
  t.Commit("a", at, 64 * KiB, {}, t0 + 1s);
  EXPECT_FALSE(pins.Unpin(2, "a", &t));
  EXPECT_EQ(pins.Release(1, &t), 1u) << "b alone";
  EXPECT_EQ(t.stats().pinned_pages, 0u);
  ASSERT_TRUE(pins.PinAll(3, {"c"}, &t, &pinned).ok());
  EXPECT_EQ(t.RemoveAll(t0 + 1s), 4u);
  pins.Clear();
  EXPECT_EQ(pins.Release(3, &t), 0u);
}

}  // namespace
}  // namespace kvfabric::store
