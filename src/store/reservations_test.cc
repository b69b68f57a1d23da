#include "store/reservations.h"

#include <gtest/gtest.h>

#include <limits>

namespace kvfabric::store {
namespace {

using namespace std::chrono_literals;
const Reservations::TimePoint t0{};

std::vector<Reservations::Slot> Slots(const char* key) { return {{key, 4096, 100, true}, {"refused", 0, 0, false}}; }

TEST(ReservationsTest, TakeReturnsTheSlotsOnce) {
  Reservations r(7);
  const uint64_t a = r.Open(Slots("a"), t0 + 1s);
  const uint64_t b = r.Open(Slots("b"), t0 + 1s);
  EXPECT_NE(a, b);
  EXPECT_EQ(r.size(), 2u);
  Reservations::Entry e;
  ASSERT_TRUE(r.Take(b, &e));
  ASSERT_EQ(e.slots.size(), 2u);
  EXPECT_EQ(e.slots[0].key, "b");
  EXPECT_EQ(e.slots[0].offset, 4096u);
  EXPECT_TRUE(e.slots[0].reserved);
  EXPECT_FALSE(e.slots[1].reserved);
  EXPECT_FALSE(r.Take(b, &e)) << "a ticket is taken once";
  EXPECT_FALSE(r.Take(12345, &e)) << "a ticket never opened";
  EXPECT_EQ(r.size(), 1u);
}

TEST(ReservationsTest, ExpiredEntriesAreTakenSoonestFirstAndNoLongerCommitted) {
  Reservations r(1);
  const uint64_t late = r.Open(Slots("late"), t0 + 3s);
  const uint64_t soon = r.Open(Slots("soon"), t0 + 1s);
  const uint64_t mid = r.Open(Slots("mid"), t0 + 2s);
  Reservations::Entry e;
  ASSERT_TRUE(r.Take(mid, &e));  // committed in time: not expired later
  EXPECT_TRUE(r.TakeExpired(t0 + 999ms).empty());
  auto gone = r.TakeExpired(t0 + 3s);
  ASSERT_EQ(gone.size(), 2u);
  EXPECT_EQ(gone[0].slots[0].key, "soon");
  EXPECT_EQ(gone[1].slots[0].key, "late");
  EXPECT_FALSE(r.Take(soon, &e)) << "an expired reservation cannot be committed";
  EXPECT_FALSE(r.Take(late, &e));
  EXPECT_EQ(r.size(), 0u);
}

TEST(ReservationsTest, TicketsAreNeverZero) {
  Reservations r(std::numeric_limits<uint64_t>::max());
  const uint64_t a = r.Open(Slots("a"), t0);
  const uint64_t b = r.Open(Slots("b"), t0);
  EXPECT_NE(a, 0u);
  EXPECT_NE(b, 0u);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace kvfabric::store
