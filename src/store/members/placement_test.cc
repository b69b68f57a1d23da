#include "store/members/placement.h"

#include "store/members/member_view.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace kvfabric::store {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

std::vector<Member> Equal(int n) {
  std::vector<Member> m;
  for (int i = 0; i < n; ++i) m.push_back({"10.0.0." + std::to_string(i + 1) + ":15000", 4 * kGiB});
  return m;
}

std::string Key(int i) { return "prefix-hash/" + std::to_string(i * 2654435761u) + "/layer"; }

// The bar: with uniform keys, no pool more than 10% fuller than the
// average (equal pools, equal pages).
TEST(PlacementTest, EqualPoolsFillEvenly) {
  for (int members : {2, 3, 8, 32}) {
    Placement p(Equal(members));
    std::vector<int> count(members);
    const int keys = 200000;
    for (int i = 0; i < keys; ++i) ++count[p.Home(Key(i))];
    const double average = static_cast<double>(keys) / members;
    const int fullest = *std::max_element(count.begin(), count.end());
    EXPECT_LE(fullest, 1.10 * average) << members << " members: the fullest has " << fullest;
  }
}

TEST(PlacementTest, SharesFollowPoolSizes) {
  Placement p({{"a:1", 1 * kGiB}, {"b:1", 2 * kGiB}, {"c:1", 3 * kGiB}, {"d:1", 4 * kGiB}, {"client:1", 0}});
  std::vector<int> count(5);
  const int keys = 200000;
  for (int i = 0; i < keys; ++i) ++count[p.Home(Key(i))];
  EXPECT_EQ(count[4], 0) << "a client holds nothing";
  for (int m = 0; m < 4; ++m) {
    const double expected = keys * (m + 1) / 10.0;
    EXPECT_NEAR(count[m], expected, 0.05 * expected) << p.members()[m].name;
  }
}

TEST(PlacementTest, OrderOfMembersDoesNotMatter) {
  auto members = Equal(6);
  Placement a(members);
  std::reverse(members.begin(), members.end());
  Placement b(members);
  for (int i = 0; i < 2000; ++i) {
    auto pa = a.Place(Key(i), 3), pb = b.Place(Key(i), 3);
    ASSERT_EQ(pa.size(), 3u);
    for (size_t r = 0; r < 3; ++r) EXPECT_EQ(a.members()[pa[r]].name, b.members()[pb[r]].name);
    EXPECT_EQ(a.Home(Key(i)), pa[0]);
  }
}

TEST(PlacementTest, ReplicasAreDistinctAndOnlyFromPools) {
  auto members = Equal(3);
  members.push_back({"client:1", 0});
  Placement p(members);
  auto r = p.Place("k", 10);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_NE(r[0], r[1]);
  EXPECT_NE(r[1], r[2]);
  EXPECT_NE(r[0], r[2]);
  for (size_t i : r) EXPECT_GT(p.members()[i].pool_bytes, 0u);
  Placement clients({{"c:1", 0}, {"d:1", 0}});
  EXPECT_TRUE(clients.Place("k", 1).empty());
  EXPECT_EQ(clients.Home("k"), 2u);
  Placement none({});
  EXPECT_EQ(none.Home("k"), 0u);
}

// A member joining takes only keys that now land on it; one leaving gives up
// only its own: nobody else's pages move.
TEST(PlacementTest, MembershipChangesMoveOnlyTheirShare) {
  auto members = Equal(8);
  Placement before(members);
  members.push_back({"10.0.0.99:15000", 4 * kGiB});
  Placement joined(members);
  members.erase(members.begin() + 2);  // 10.0.0.3 leaves
  Placement left(members);
  const int keys = 50000;
  int moved_to_new = 0, moved_off_leaver = 0;
  for (int i = 0; i < keys; ++i) {
    const std::string k = Key(i);
    const std::string& was = before.members()[before.Home(k)].name;
    const std::string& now = joined.members()[joined.Home(k)].name;
    if (was != now) {
      EXPECT_EQ(now, "10.0.0.99:15000") << k;
      ++moved_to_new;
    }
    const std::string& after = left.members()[left.Home(k)].name;
    if (after != now) {
      EXPECT_EQ(now, "10.0.0.3:15000") << k;
      ++moved_off_leaver;
    }
  }
  // About 1/9 of the keys each way.
  EXPECT_NEAR(moved_to_new, keys / 9.0, 0.1 * keys / 9.0);
  EXPECT_NEAR(moved_off_leaver, keys / 9.0, 0.1 * keys / 9.0);
}

// A key's home without some members is its home in a placement of the
// others: what it was before they joined, whatever their pools.
TEST(PlacementTest, HomeWithoutSomeMembersIsTheirPlacementsHome) {
  const std::vector<Member> all = {{"a:1", 1 * kGiB}, {"b:1", 2 * kGiB}, {"c:1", 2 * kGiB}, {"client:1", 0},
                                   {"d:1", 4 * kGiB}};
  const Placement p(all);
  for (const std::vector<bool>& out : {std::vector<bool>{false, true}, std::vector<bool>{true, false, true},
                                       std::vector<bool>{false, false, false, false, true}}) {
    std::vector<Member> kept;
    for (size_t i = 0; i < all.size(); ++i)
      if (i >= out.size() || !out[i]) kept.push_back(all[i]);
    std::reverse(kept.begin(), kept.end());
    const Placement before(kept);
    for (int i = 0; i < 20000; ++i) {
      const size_t home = p.HomeWithout(Key(i), out);
      ASSERT_LT(home, all.size());
      EXPECT_FALSE(home < out.size() && out[home]);
      EXPECT_EQ(all[home].name, kept[before.Home(Key(i))].name) << Key(i);
    }
  }
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(p.HomeWithout(Key(i), {}), p.Home(Key(i)));
  EXPECT_EQ(p.HomeWithout(Key(1), {true, true, true, false, true}), all.size()) << "only the client is left";
}

// A member's keys came from the homes they had before it entered: among
// the members that entered earlier, not those that came with it or after.
TEST(PlacementTest, PreviousHomeIsTheHomeAmongMembersThatEnteredEarlier) {
  using namespace std::chrono_literals;
  const auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  MemberSnapshot snap;
  snap.placement = Placement({{"a:1", kGiB}, {"b:1", kGiB}, {"c:1", kGiB}, {"d:1", kGiB}});
  snap.nodes.resize(4);
  snap.since = {t0, t0, t0 + 5s, t0 + 9s};  // a and b together, then c, then d
  EXPECT_EQ(snap.Recent(t0 + 10s, 3s), (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(snap.Recent(t0 + 10s, 6s), (std::vector<bool>{false, false, true, true}));
  EXPECT_TRUE(snap.AnyRecent(t0 + 10s, 3s));
  EXPECT_FALSE(snap.AnyRecent(t0 + 10s, 1s)) << "d entered 1 s ago: not within 1 s";
  const Placement ab({{"a:1", kGiB}, {"b:1", kGiB}}), abc({{"a:1", kGiB}, {"b:1", kGiB}, {"c:1", kGiB}});
  int seen[4] = {};
  for (int i = 0; i < 4000; ++i) {
    const std::string k = Key(i);
    const size_t home = snap.placement.Home(k);
    ++seen[home];
    const size_t previous = snap.PreviousHome(k, home);
    if (home == 3) EXPECT_EQ(previous, abc.Home(k)) << k;
    else if (home == 2) EXPECT_EQ(previous, ab.Home(k)) << k;
    else EXPECT_EQ(previous, 4u) << k << ": a and b entered together, before anyone";
  }
  for (int n : seen) EXPECT_GT(n, 0);
}

TEST(PlacementTest, DuplicateNamesCountOnce) {
  Placement p({{"a:1", kGiB}, {"a:1", 100 * kGiB}, {"b:1", kGiB}});
  ASSERT_EQ(p.members().size(), 2u);
  EXPECT_EQ(p.members()[0].pool_bytes, kGiB);
}

// Equal pools rank members by the hash alone (no logarithm); pools one byte
// apart take the weighted formula. Both must place every key alike: the
// shortcut is the same order, not another placement.
TEST(PlacementTest, EqualPoolsShortcutPlacesKeysAsTheWeightedFormula) {
  std::vector<Member> equal = Equal(5), almost = Equal(5);
  almost[2].pool_bytes += 1;
  equal.push_back({"client:1", 0});
  Placement a(equal), b(almost);
  for (int i = 0; i < 100000; ++i) {
    ASSERT_EQ(a.members()[a.Home(Key(i))].name, b.members()[b.Home(Key(i))].name) << Key(i);
    const auto pa = a.Place(Key(i), 3), pb = b.Place(Key(i), 3);
    for (size_t r = 0; r < 3; ++r) ASSERT_EQ(a.members()[pa[r]].name, b.members()[pb[r]].name) << Key(i);
  }
}

}  // namespace
}  // namespace kvfabric::store
