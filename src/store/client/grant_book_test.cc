#include "store/client/grant_book.h"

#include <gtest/gtest.h>

#include <thread>

namespace kvfabric::store {
namespace {

using Clock = std::chrono::steady_clock;

std::shared_ptr<NodeView> Home(const std::string& name, uint64_t epoch) {
  auto node = std::make_shared<NodeView>();
  node->name = name;
  node->info.epoch = epoch;
  return node;
}

Credit CreditOf(std::shared_ptr<const NodeView> node, uint64_t ticket, std::vector<uint64_t> lengths,
                uint64_t losses = 0, std::chrono::milliseconds usable = std::chrono::milliseconds(1000)) {
  Credit c;
  c.node = node;
  c.ticket = ticket;
  c.epoch = node->info.epoch;
  c.losses = losses;
  for (size_t s = 0; s < lengths.size(); ++s) c.addrs.push_back(0x1000 * (s + 1));
  c.lengths = std::move(lengths);
  c.usable_until = Clock::now() + usable;
  return c;
}

TEST(SlotsToAskFor, ThePagesThenHalfAgainOfTheFirst) {
  EXPECT_EQ(SlotsToAskFor({100, 200}, 1 << 20), (std::vector<uint64_t>{100, 200, 100, 100, 100}));
  EXPECT_EQ(SlotsToAskFor({64}, 1 << 20), (std::vector<uint64_t>{64, 64, 64}));
}

TEST(SlotsToAskFor, NothingPastWhatAHomeGrants) {
  EXPECT_TRUE(SlotsToAskFor({}, 1 << 20).empty());
  EXPECT_TRUE(SlotsToAskFor(std::vector<uint64_t>(kMaxGrantSlots + 1, 1), 1 << 30).empty());
  const uint64_t pool = 16 * kGrantPoolShare;
  EXPECT_FALSE(SlotsToAskFor({16}, pool).empty());
  EXPECT_TRUE(SlotsToAskFor({17}, pool).empty());
}

TEST(FitSlots, EachPageTakesTheLowestFreeSlotOfItsLength) {
  std::vector<size_t> slot_of;
  ASSERT_TRUE(FitSlots({8, 4, 8, 4}, {4, 8, 8}, &slot_of));
  EXPECT_EQ(slot_of, (std::vector<size_t>{1, 0, 2}));
  std::vector<size_t> unchanged{7};
  EXPECT_FALSE(FitSlots({8, 4}, {8, 8}, &unchanged));  // one slot of 8 only
  EXPECT_FALSE(FitSlots({8}, {8, 8}, &unchanged));     // fewer slots than pages
  EXPECT_FALSE(FitSlots({8, 8}, {5}, &unchanged));     // no slot of that length
  EXPECT_EQ(unchanged, (std::vector<size_t>{7}));
}

TEST(GrantBook, ACreditThatFitsIsTakenOnceAsItsHomesReservation) {
  uint64_t losses = 0;
  GrantBook book([&](const std::string&) { return losses; });
  auto a = Home("a:1", 5);
  std::vector<Credit> back;
  book.Keep(CreditOf(a, 11, {8, 8, 8}), &back);
  EXPECT_TRUE(back.empty());
  EXPECT_FALSE(book.Take(*a, {8, 8, 8, 8}, &back).has_value());  // four pages, three slots
  auto taken = book.Take(*a, {8, 8}, &back);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->slots.ticket, 11u);
  EXPECT_EQ(taken->slots.epoch, 5u);
  EXPECT_EQ(taken->slots.addrs.size(), 3u);
  EXPECT_EQ(taken->slot_of, (std::vector<size_t>{0, 1}));
  EXPECT_FALSE(book.Take(*a, {8}, &back).has_value());  // gone from the book
  EXPECT_TRUE(back.empty());
}

TEST(GrantBook, NoCreditOfAnEarlierLifeOrALostConnectionIsUsed) {
  uint64_t losses = 0;
  GrantBook book([&](const std::string&) { return losses; });
  auto old_life = Home("a:1", 5);
  std::vector<Credit> back;
  book.Keep(CreditOf(old_life, 1, {8}), &back);
  auto new_life = Home("a:1", 6);
  EXPECT_FALSE(book.Take(*new_life, {8}, &back).has_value());
  ASSERT_EQ(back.size(), 1u);  // the connection lasts: the home holds it, so back it goes
  EXPECT_EQ(back[0].ticket, 1u);
  back.clear();
  book.Keep(CreditOf(new_life, 2, {8}, /*losses=*/0), &back);
  losses = 1;  // the connection it came over ended (the home may have restarted)
  EXPECT_FALSE(book.Take(*new_life, {8}, &back).has_value());
  EXPECT_TRUE(back.empty());  // dropped: no connection to give it back over
}

TEST(GrantBook, AHomeKeepsAtMostItsShareOfCreditsTheOldestGoesBack) {
  GrantBook book([](const std::string&) { return 0; });
  auto a = Home("a:1", 1);
  std::vector<Credit> back;
  for (uint64_t t = 1; t <= GrantBook::kCreditsPerHome + 1; ++t) book.Keep(CreditOf(a, t, {8}), &back);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].ticket, 1u);
  EXPECT_EQ(book.TakeAll().size(), GrantBook::kCreditsPerHome);
  EXPECT_TRUE(book.TakeAll().empty());
}

TEST(GrantBook, ASweepGivesBackWhatIsPastUseAtMostSoOften) {
  GrantBook book([](const std::string&) { return 0; });
  auto a = Home("a:1", 1);
  std::vector<Credit> back;
  book.Keep(CreditOf(a, 1, {8}, 0, std::chrono::milliseconds(0)), &back);
  book.Keep(CreditOf(a, 2, {8}), &back);
  std::vector<Credit> swept = book.Sweep();
  ASSERT_EQ(swept.size(), 1u);
  EXPECT_EQ(swept[0].ticket, 1u);
  book.Keep(CreditOf(a, 3, {8}, 0, std::chrono::milliseconds(0)), &back);
  EXPECT_TRUE(book.Sweep().empty());  // within kSweepEvery of the last
  std::this_thread::sleep_for(GrantBook::kSweepEvery + std::chrono::milliseconds(20));
  swept = book.Sweep();
  ASSERT_EQ(swept.size(), 1u);
  EXPECT_EQ(swept[0].ticket, 3u);
}

}  // namespace
}  // namespace kvfabric::store
