#include "store/node/reservations.h"

#include <gtest/gtest.h>

#include <limits>

namespace kvfabric::store {
namespace {

using namespace std::chrono_literals;
const Reservations::TimePoint t0{};
constexpr uint64_t kOwner = 3;

std::vector<Reservations::Slot> Slots(const char* key) { return {{key, 4096, 100, true}, {"refused", 0, 0, false}}; }

TEST(ReservationsTest, TakeReturnsTheSlotsOnce) {
  Reservations r(7);
  const uint64_t a = r.Open(Slots("a"), t0 + 1s, kOwner);
  const uint64_t b = r.Open(Slots("b"), t0 + 1s, kOwner);
  EXPECT_NE(a, b);
  EXPECT_EQ(r.size(), 2u);
  Reservations::Entry e;
  ASSERT_TRUE(r.Take(b, kOwner, &e));
  ASSERT_EQ(e.slots.size(), 2u);
  EXPECT_EQ(e.slots[0].key, "b");
  EXPECT_EQ(e.slots[0].offset, 4096u);
  EXPECT_TRUE(e.slots[0].reserved);
  EXPECT_FALSE(e.slots[1].reserved);
  EXPECT_FALSE(r.Take(b, kOwner, &e)) << "a ticket is taken once";
  EXPECT_FALSE(r.Take(12345, kOwner, &e)) << "a ticket never opened";
  EXPECT_EQ(r.size(), 1u);
}

TEST(ReservationsTest, ExpiredEntriesAreTakenSoonestFirstAndNoLongerCommitted) {
  Reservations r(1);
  const uint64_t late = r.Open(Slots("late"), t0 + 3s, kOwner);
  const uint64_t soon = r.Open(Slots("soon"), t0 + 1s, kOwner);
  const uint64_t mid = r.Open(Slots("mid"), t0 + 2s, kOwner);
  Reservations::Entry e;
  ASSERT_TRUE(r.Take(mid, kOwner, &e));  // committed in time: not expired later
  EXPECT_TRUE(r.TakeExpired(t0 + 999ms).empty());
  auto gone = r.TakeExpired(t0 + 3s);
  ASSERT_EQ(gone.size(), 2u);
  EXPECT_EQ(gone[0].slots[0].key, "soon");
  EXPECT_EQ(gone[1].slots[0].key, "late");
  EXPECT_FALSE(r.Take(soon, kOwner, &e)) << "an expired reservation cannot be committed";
  EXPECT_FALSE(r.Take(late, kOwner, &e));
  EXPECT_EQ(r.size(), 0u);
}

TEST(ReservationsTest, TicketsAreNeverZero) {
  Reservations r(std::numeric_limits<uint64_t>::max());
  const uint64_t a = r.Open(Slots("a"), t0, kOwner);
  const uint64_t b = r.Open(Slots("b"), t0, kOwner);
  EXPECT_NE(a, 0u);
  EXPECT_NE(b, 0u);
  EXPECT_NE(a, b);
}

// A commit matches its ticket only on the connection that reserved it:
// another connection's commit takes nothing and leaves the entry to its
// owner; a connection that closes takes its entries with it.
TEST(ReservationsTest, OnlyTheOwnerTakesItsEntries) {
  Reservations r(1);
  const uint64_t mine = r.Open(Slots("mine"), t0 + 1s, kOwner);
  const uint64_t other = r.Open(Slots("other"), t0 + 1s, kOwner + 1);
  Reservations::Entry e;
  EXPECT_FALSE(r.Take(mine, kOwner + 1, &e)) << "another connection's ticket";
  EXPECT_EQ(r.size(), 2u);
  ASSERT_TRUE(r.Take(mine, kOwner, &e));
  EXPECT_EQ(e.slots[0].key, "mine");
  EXPECT_EQ(e.owner, kOwner);
  const uint64_t more = r.Open(Slots("more"), t0 + 1s, kOwner);
  auto gone = r.TakeOwnedBy(kOwner);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].slots[0].key, "more");
  EXPECT_FALSE(r.Take(more, kOwner, &e));
  ASSERT_TRUE(r.Take(other, kOwner + 1, &e));
  EXPECT_EQ(r.size(), 0u);
}

// Granted entries' reserved bytes are counted while they are open, however
// they end.
TEST(ReservationsTest, GrantedBytesCountOpenGrantsOnly) {
  Reservations r(1);
  const uint64_t asked = r.Open(Slots("asked"), t0 + 1s, kOwner);
  EXPECT_EQ(r.granted_bytes(), 0u) << "a reserve is no grant";
  const uint64_t a = r.Open({{"", 0, 4096, true}, {"", 0, 8192, true}, {"", 0, 1, false}}, t0 + 1s, kOwner, true);
  r.Open({{"", 0, 100, true}}, t0 + 2s, kOwner, true);
  r.Open({{"", 0, 10, true}}, t0 + 3s, kOwner + 1, true);
  EXPECT_EQ(r.granted_bytes(), 4096u + 8192 + 100 + 10);
  Reservations::Entry e;
  ASSERT_TRUE(r.Take(a, kOwner, &e));
  EXPECT_EQ(r.granted_bytes(), 110u);
  EXPECT_EQ(r.TakeExpired(t0 + 2s).size(), 2u);  // `asked` and the grant of 100
  EXPECT_EQ(r.granted_bytes(), 10u);
  EXPECT_EQ(r.TakeOwnedBy(kOwner + 1).size(), 1u);
  EXPECT_EQ(r.granted_bytes(), 0u);
  EXPECT_FALSE(r.Take(asked, kOwner, &e));
}

}  // namespace
}  // namespace kvfabric::store
