#include "store/mover/copy_movement.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace kvfabric::store {
namespace {

// A flight of `groups` groups of one piece of `bytes` each, from `from`
// into `to` (group g at g * bytes).
CopyPlan PlanOf(std::vector<char>* to, const std::vector<char>& from, size_t groups, size_t bytes, bool writes) {
  CopyPlan plan(groups);
  for (size_t g = 0; g < groups; ++g)
    plan.Add(g, {{to->data() + g * bytes, from.data() + g * bytes, bytes}}, writes);
  return plan;
}

std::vector<char> Pattern(size_t n) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>('a' + (i * 7 + i / 4096) % 26);
  return v;
}

TEST(CopyPolicy, WritesAndLongPagesGoToTheCopierShortReadsStay) {
  EXPECT_FALSE(CopyOnThread(true, kCopyHereBytes - 1, 4096));  // too few bytes: the wake-up costs more
  EXPECT_TRUE(CopyOnThread(true, kCopyHereBytes, 4096));       // a PUT checksums its sources meanwhile
  EXPECT_FALSE(CopyOnThread(false, 8 << 20, kCopyHereGroupBytes));  // short pages: checksummed after each copy
  EXPECT_TRUE(CopyOnThread(false, 8 << 20, kCopyHereGroupBytes + 1));  // long pages: piece by piece as they land
  EXPECT_EQ(HereShare(kSplitBytes - 1), kSplitBytes - 1);
  EXPECT_EQ(HereShare(4 * kSplitBytes), 2 * kSplitBytes);
}

TEST(CopyMovement, ShortReadsAreCopiedHereEachGroupHandedOverRightAfterItsCopy) {
  const std::vector<char> from = Pattern(8 * 4096);
  std::vector<char> to(from.size(), '.');
  Copier copier;
  std::vector<size_t> order;
  CopyMovement m(&copier, PlanOf(&to, from, 8, 4096, false), [&](size_t g) {
    order.push_back(g);
    EXPECT_EQ(std::memcmp(to.data() + g * 4096, from.data() + g * 4096, 4096), 0) << "group " << g << " copied";
  });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  Status failure;
  for (size_t g = 0; g < 8; ++g) {
    EXPECT_TRUE(m.GroupEnded(g, &failure));
    EXPECT_TRUE(failure.ok());
    EXPECT_FALSE(m.LandsMeanwhile(g));
  }
  EXPECT_TRUE(m.WaitUntil(std::chrono::steady_clock::now()));
  EXPECT_FALSE(copier.Busy());
}

TEST(CopyMovement, ALargePutGoesToTheCopierAndLandsGroupByGroup) {
  const size_t groups = 8, bytes = 64 << 10;  // 512 KiB of WRITEs
  const std::vector<char> from = Pattern(groups * bytes);
  std::vector<char> to(from.size(), '.');
  Copier copier;
  size_t handed = 0;
  CopyMovement m(&copier, PlanOf(&to, from, groups, bytes, true), [&](size_t) { ++handed; });
  EXPECT_EQ(handed, 0u) << "nothing is copied on the caller's thread";
  for (size_t g = 0; g < groups; ++g) EXPECT_TRUE(m.LandsMeanwhile(g));
  ASSERT_TRUE(m.WaitUntil(std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  Status failure;
  for (size_t g = 0; g < groups; ++g) {
    EXPECT_TRUE(m.GroupEnded(g, &failure));
    EXPECT_TRUE(m.RequestEnded(g, 0, &failure));
  }
  std::vector<Status> outcomes(groups);
  m.Finish(std::chrono::steady_clock::now(), &outcomes);
  for (const Status& s : outcomes) EXPECT_TRUE(s.ok());
  EXPECT_EQ(std::memcmp(to.data(), from.data(), to.size()), 0);
}

TEST(CopyMovement, ALargeReadOfShortPagesIsSplitAndItsTailCopiedLast) {
  // 4 MiB of 128 KiB pages, then a tail group (a GET's region versions):
  // the caller copies half, the Copier the rest, the tail after the
  // caller's copies.
  const size_t pages = 32, bytes = 128 << 10, tail_bytes = 64;
  const std::vector<char> from = Pattern(pages * bytes + tail_bytes);
  std::vector<char> to(from.size(), '.');
  CopyPlan plan = PlanOf(&to, from, pages, bytes, false);
  CopyPlan with_tail(pages + 1);
  for (size_t g = 0; g < pages; ++g) with_tail.Add(g, {plan.pieces[g]}, false);
  with_tail.Add(pages, {{to.data() + pages * bytes, from.data() + pages * bytes, tail_bytes}}, false);
  with_tail.tail[pages] = true;
  Copier copier;
  std::vector<size_t> here;
  CopyMovement m(&copier, std::move(with_tail), [&](size_t g) { here.push_back(g); });
  ASSERT_FALSE(here.empty());
  EXPECT_LT(here.size(), pages) << "the Copier takes a share";
  EXPECT_EQ(here.front(), 0u);
  for (size_t g : here) EXPECT_FALSE(m.LandsMeanwhile(g));
  EXPECT_TRUE(m.LandsMeanwhile(pages)) << "the tail is the Copier's";
  ASSERT_TRUE(m.WaitUntil(std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  EXPECT_EQ(std::memcmp(to.data(), from.data(), to.size()), 0);
}

TEST(CopyMovement, ATailThroughTheFabricKeepsEveryCopyHere) {
  const std::vector<char> from = Pattern(1 << 20);
  std::vector<char> to(from.size(), '.');
  CopyPlan plan = PlanOf(&to, from, 4, 256 << 10, true);
  plan.tail_through_fabric = true;
  Copier copier;
  size_t handed = 0;
  CopyMovement m(&copier, std::move(plan), [&](size_t) { ++handed; });
  EXPECT_EQ(handed, 4u) << "copied before the fabric's READ is posted";
  EXPECT_EQ(std::memcmp(to.data(), from.data(), to.size()), 0);
}

}  // namespace
}  // namespace kvfabric::store
