#include "weights/relay_plan.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

namespace kvfabric::weights {
namespace {

constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kGiB = 1LL << 30;

std::vector<Member> OnHosts(const std::vector<std::string>& hosts, int rails = 1) {
  std::vector<Member> out;
  for (const auto& h : hosts) out.push_back({h, rails});
  return out;
}

// The plan's invariants: a tree rooted at the sender; children lists agree
// with parents; each host other than the sender's takes the data over the
// network exactly once.
void ExpectTree(const RelayPlan& plan, const Member& sender, const std::vector<Member>& receivers) {
  ASSERT_EQ(plan.size(), receivers.size() + 1);
  EXPECT_EQ(plan.parent[0], RelayPlan::kNone);
  std::map<std::string, int> inbound;
  for (size_t i = 1; i < plan.size(); ++i) {
    const int p = plan.parent[i];
    if (p == RelayPlan::kGone) continue;
    ASSERT_GE(p, 0) << "receiver " << i;
    EXPECT_GT(plan.Depth(static_cast<int>(i)), 0) << "receiver " << i << " reaches the sender";
    const auto& siblings = plan.children[p];
    EXPECT_EQ(std::count(siblings.begin(), siblings.end(), static_cast<int>(i)), 1);
    const std::string& from = p == 0 ? sender.host : receivers[p - 1].host;
    if (from != receivers[i - 1].host) ++inbound[receivers[i - 1].host];
  }
  for (const auto& [host, n] : inbound) EXPECT_EQ(n, 1) << host << " takes the data over the network once";
}

TEST(RelayPlanTest, TheSenderAloneHasNothingToPlan) {
  const RelayPlan plan = PlanRelays({"s", 1}, {}, kGiB, 64 * kMiB);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan.MaxDepth(), 0);
}

TEST(RelayPlanTest, ReceiversOnOtherHostsWithEqualRailsFormAChain) {
  const Member sender{"s", 1};
  const auto receivers = OnHosts({"a", "b", "c", "d"});
  const RelayPlan plan = PlanRelays(sender, receivers, 4 * kGiB, 64 * kMiB);
  ExpectTree(plan, sender, receivers);
  EXPECT_EQ(plan.parent, (std::vector<int>{RelayPlan::kNone, 0, 1, 2, 3}));
  EXPECT_EQ(plan.fanout, 1);
  EXPECT_EQ(plan.MaxDepth(), 4);
}

TEST(RelayPlanTest, ReceiversOnTheSendersHostFormAChainBehindIt) {
  const Member sender{"s", 2};
  const auto receivers = OnHosts({"s", "s", "s"}, 2);
  const RelayPlan plan = PlanRelays(sender, receivers, kGiB, 64 * kMiB);
  ExpectTree(plan, sender, receivers);
  EXPECT_EQ(plan.parent, (std::vector<int>{RelayPlan::kNone, 0, 1, 2}));
}

TEST(RelayPlanTest, EachHostTakesTheDataOnceAndPassesItOnInside) {
  const Member sender{"s", 1};
  const auto receivers = OnHosts({"a", "b", "a", "b", "s"});
  const RelayPlan plan = PlanRelays(sender, receivers, 4 * kGiB, 64 * kMiB);
  ExpectTree(plan, sender, receivers);
  // Heads 1 (a) and 2 (b) in a chain; 3 behind 1, 4 behind 2; 5 behind the sender.
  EXPECT_EQ(plan.parent, (std::vector<int>{RelayPlan::kNone, 0, 1, 1, 2, 0}));
  EXPECT_EQ(plan.children[0], (std::vector<int>{1, 5})) << "the other host first, then the sender's own";
}

TEST(RelayPlanTest, LittleDataForManyHostsGoesOutAsATree) {
  const Member sender{"s", 1};
  std::vector<std::string> hosts;
  for (int i = 0; i < 32; ++i) hosts.push_back("h" + std::to_string(i));
  const auto receivers = OnHosts(hosts);
  // One bucket's worth: a chain would add a bucket per hop, 31 times.
  const RelayPlan tree = PlanRelays(sender, receivers, 64 * kMiB, 64 * kMiB);
  ExpectTree(tree, sender, receivers);
  EXPECT_GT(tree.fanout, 1);
  EXPECT_LT(tree.MaxDepth(), 8);
  // Much data: each extra child would halve a link; a chain it is.
  const RelayPlan chain = PlanRelays(sender, receivers, 64 * kGiB, 64 * kMiB);
  EXPECT_EQ(chain.fanout, 1);
  EXPECT_EQ(chain.MaxDepth(), 32);
}

TEST(RelayPlanTest, ASenderWithMoreRailsFeedsAsManyHostsAtOnce) {
  const Member sender{"s", 4};
  const auto receivers = OnHosts({"a", "b", "c", "d", "e"}, 1);
  const RelayPlan plan = PlanRelays(sender, receivers, 4 * kGiB, 64 * kMiB);
  ExpectTree(plan, sender, receivers);
  EXPECT_EQ(plan.children[0], (std::vector<int>{1, 2, 3, 4})) << "one rail's worth each";
  EXPECT_EQ(plan.parent[5], 1);
  EXPECT_EQ(plan.MaxDepth(), 2);
}

TEST(RelayPlanTest, EveryPlanIsATreeAndTheSameForTheSameArguments) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    const Member sender{"h" + std::to_string(rng() % 4), 1 + static_cast<int>(rng() % 4)};
    std::vector<Member> receivers;
    const int m = 1 + static_cast<int>(rng() % 24);
    for (int i = 0; i < m; ++i) receivers.push_back({"h" + std::to_string(rng() % 6), 1 + static_cast<int>(rng() % 4)});
    const int64_t total = (1 + static_cast<int64_t>(rng() % 4096)) * kMiB;
    const int64_t bucket = (1 + static_cast<int64_t>(rng() % 256)) * kMiB;
    const RelayPlan plan = PlanRelays(sender, receivers, total, bucket);
    ExpectTree(plan, sender, receivers);
    const RelayPlan again = PlanRelays(sender, receivers, total, bucket);
    EXPECT_EQ(plan.parent, again.parent);
    EXPECT_EQ(plan.children, again.children);
  }
}

TEST(RelayPlanTest, AReceiverLeftOutIsBridgedAndTheOthersKeepTheirPlaces) {
  const Member sender{"s", 1};
  const auto receivers = OnHosts({"a", "b", "c", "d"});
  const RelayPlan chain = PlanRelays(sender, receivers, 4 * kGiB, 64 * kMiB);
  const RelayPlan bridged = Without(chain, 2);
  EXPECT_EQ(bridged.parent, (std::vector<int>{RelayPlan::kNone, 0, RelayPlan::kGone, 1, 3}));
  EXPECT_EQ(bridged.children[1], (std::vector<int>{3}));
  EXPECT_TRUE(bridged.children[2].empty());
  EXPECT_EQ(bridged.Depth(2), -1);
  EXPECT_EQ(bridged.Depth(4), 3);
  ExpectTree(bridged, sender, receivers);
  // The sender stays; a receiver already gone changes nothing.
  EXPECT_EQ(Without(chain, 0).parent, chain.parent);
  EXPECT_EQ(Without(bridged, 2).parent, bridged.parent);
  EXPECT_EQ(Without(Without(bridged, 1), 4).parent,
            (std::vector<int>{RelayPlan::kNone, RelayPlan::kGone, RelayPlan::kGone, 0, RelayPlan::kGone}));
}

TEST(RelayPlanTest, AHeadLeftOutHandsItsChildrenToItsParentInItsPlace) {
  const Member sender{"s", 4};
  const auto receivers = OnHosts({"a", "b", "a", "c", "d", "e"}, 1);
  const RelayPlan plan = PlanRelays(sender, receivers, 4 * kGiB, 64 * kMiB);
  ASSERT_EQ(plan.children[0], (std::vector<int>{1, 2, 4, 5}));
  ASSERT_EQ(plan.children[1], (std::vector<int>{6, 3})) << "host e behind a's head, then a's own";
  const RelayPlan bridged = Without(plan, 1);
  EXPECT_EQ(bridged.children[0], (std::vector<int>{6, 3, 2, 4, 5}));
  EXPECT_EQ(bridged.parent[3], 0);
  EXPECT_EQ(bridged.parent[6], 0);
}

}  // namespace
}  // namespace kvfabric::weights
