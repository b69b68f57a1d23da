#include "store/node/page_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace kvfabric::store {
namespace {

using namespace std::chrono_literals;
using TimePoint = PageTable::TimePoint;

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;
const TimePoint t0 = TimePoint{} + 1h;

uint64_t Reserve(PageTable& t, uint64_t length, TimePoint now) {
  uint64_t at = ~0ull;
  const Status s = t.Reserve(length, now, &at);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return at;
}

PageEntry Put(PageTable& t, std::string_view key, uint64_t length, TimePoint now) {
  return t.Commit(key, Reserve(t, length, now), length, Checksum{length, 42}, now);
}

// The offsets of the pages of `keys`, in that order (a Lookup each).
std::vector<uint64_t> Offsets(PageTable& t, const std::vector<std::string>& keys, TimePoint now) {
  std::vector<uint64_t> at;
  for (const auto& k : keys) {
    PageEntry e;
    EXPECT_TRUE(t.Lookup(k, now, &e)) << k;
    at.push_back(e.offset);
  }
  return at;
}

void ExpectBalanced(const PageTableStats& s) {
  EXPECT_EQ(s.used_bytes + s.reserved_bytes + s.quarantined_bytes + s.free_bytes, s.pool_bytes);
}

// A pool of four 64 KiB slots, filled with pages a, b, c, d in that order
// (offsets 0, 64 KiB, 128 KiB, 192 KiB), never looked up.
PageTable FourPages(std::chrono::milliseconds read_window = 100ms) {
  PageTable t(256 * KiB, read_window);
  for (const char* k : {"a", "b", "c", "d"}) Put(t, k, 64 * KiB, t0);
  return t;
}

TEST(PageTableTest, CommitThenLookupReturnsTheEntry) {
  PageTable t(MiB, 100ms);
  const PageEntry a = Put(t, "a", 5000, t0), b = Put(t, "b", 4096, t0), c = Put(t, "c", 1, t0);
  EXPECT_EQ(a, (PageEntry{0, 5000, 1, Checksum{5000, 42}}));
  EXPECT_EQ(b.offset, 8192u);
  EXPECT_EQ(b.generation, 2u);
  EXPECT_EQ(c.generation, 3u);
  PageEntry got;
  ASSERT_TRUE(t.Lookup("a", t0, &got));
  EXPECT_EQ(got, a);
  EXPECT_FALSE(t.Lookup("x", t0, &got));
  EXPECT_TRUE(t.Contains("b", t0));
  EXPECT_FALSE(t.Contains("x", t0));
  const PageTableStats s = t.stats();
  EXPECT_EQ(s.pages, 3u);
  EXPECT_EQ(s.used_bytes, 16 * KiB);
  EXPECT_EQ(s.free_bytes, MiB - 16 * KiB);
  ExpectBalanced(s);
}

TEST(PageTableTest, CommitOfAnUnreservedSlotChangesNothing) {
  PageTable t(MiB, 100ms);
  const uint64_t at = Reserve(t, 8000, t0);
  const PageTableStats before = t.stats();
  EXPECT_EQ(t.Commit("a", at + 4096, 8000, {}, t0).generation, 0u);  // not a reserved offset
  EXPECT_EQ(t.Commit("a", at, 9000, {}, t0).generation, 0u);         // a larger slot than reserved
  EXPECT_EQ(t.Commit("a", at, 0, {}, t0).generation, 0u);
  EXPECT_EQ(t.stats(), before);
  EXPECT_EQ(t.Commit("a", at, 5000, {}, t0).generation, 1u);  // the same 8 KiB slot
  EXPECT_EQ(t.Commit("b", at, 5000, {}, t0).generation, 0u);  // committed already
}

TEST(PageTableTest, OverwriteQuarantinesALookedUpSlotAndFreesAnUnreadOne) {
  PageTable t(MiB, 100ms);
  const PageEntry first = Put(t, "a", 64 * KiB, t0);
  Put(t, "a", 64 * KiB, t0);  // `first` was never looked up: its slot is free at once
  EXPECT_EQ(t.stats().quarantined_bytes, 0u);
  EXPECT_EQ(Reserve(t, 64 * KiB, t0), first.offset);

  PageEntry second;
  ASSERT_TRUE(t.Lookup("a", t0 + 10ms, &second));
  const PageEntry third = Put(t, "a", 64 * KiB, t0 + 20ms);
  PageTableStats s = t.stats();
  EXPECT_EQ(s.quarantined_bytes, 64 * KiB) << "looked up 10 ms ago: a GET may still read it";
  EXPECT_EQ(s.overwrites, 2u);
  EXPECT_EQ(s.pages, 1u);
  EXPECT_EQ(s.used_bytes, 64 * KiB);
  ExpectBalanced(s);
  PageEntry got;
  ASSERT_TRUE(t.Lookup("a", t0 + 20ms, &got));
  EXPECT_EQ(got, third);
  EXPECT_GT(third.generation, second.generation);

  Reserve(t, 4096, t0 + 110ms);  // the window of `second` is over
  EXPECT_EQ(t.stats().quarantined_bytes, 0u);
}

TEST(PageTableTest, QuarantinedSlotIsReusedOnlyAfterTheWindow) {
  PageTable t(256 * KiB, 100ms);
  ASSERT_EQ(Put(t, "a", 64 * KiB, t0).offset, 0u);
  PageEntry e;
  ASSERT_TRUE(t.Lookup("a", t0 + 10ms, &e));
  ASSERT_TRUE(t.Remove("a", t0 + 20ms));
  EXPECT_EQ(t.stats().quarantined_bytes, 64 * KiB);
  // Best fit would take the 64 KiB hole at 0; it is quarantined until 110 ms.
  EXPECT_EQ(Reserve(t, 64 * KiB, t0 + 109ms), 64 * KiB);
  EXPECT_EQ(Reserve(t, 64 * KiB, t0 + 110ms), 0u);
  EXPECT_EQ(t.stats().quarantined_bytes, 0u);
}

// The observer hears of every page stored and every page gone, with the
// entry it had and why, in the order it happened.
TEST(PageTableTest, TheObserverHearsWhereEveryPageWent) {
  PageTable t(128 * KiB, 100ms);
  std::vector<std::string> heard;
  t.set_observer([&](PageEvent e, std::string_view key, const PageEntry& p) {
    heard.push_back(std::string(PageEventName(e)) + " " + std::string(key) + " " + std::to_string(p.generation));
  });
  Put(t, "a", 4 * KiB, t0);        // 1
  Put(t, "b", 64 * KiB, t0);       // 2
  Put(t, "a", 4 * KiB, t0);        // 3, over 1
  Put(t, "c", 64 * KiB, t0 + 1s);  // 4, for which b goes
  ASSERT_TRUE(t.Remove("c", t0 + 1s));
  Put(t, "d", 4 * KiB, t0 + 1s);  // 5
  EXPECT_FALSE(t.RemoveIf("d", 4, t0 + 1s));  // not that page: nothing heard
  ASSERT_TRUE(t.RemoveIf("d", 5, t0 + 1s, PageEvent::kRemoved));
  ASSERT_TRUE(t.RemoveIf("a", 3, t0 + 1s));
  Put(t, "e", 4 * KiB, t0 + 1s);  // 6
  EXPECT_EQ(t.RemoveAll(t0 + 1s), 1u);
  EXPECT_EQ(heard, (std::vector<std::string>{"stored a 1", "stored b 2", "overwritten a 1", "stored a 3",
                                             "evicted b 2", "stored c 4", "removed c 4", "stored d 5",
                                             "removed d 5", "handed over a 3", "stored e 6", "removed e 6"}));
}

TEST(PageTableTest, EvictsTheLeastRecentlyUsedFirst) {
  PageTable t = FourPages();
  PageEntry e;
  ASSERT_TRUE(t.Lookup("a", t0 + 1ms, &e));
  ASSERT_TRUE(t.Contains("b", t0 + 2ms));  // from oldest: c, d, a, b
  const TimePoint later = t0 + 1s;         // every read window is over
  EXPECT_EQ(Reserve(t, 64 * KiB, later), 128 * KiB);  // c's slot
  EXPECT_EQ(t.stats().evictions, 1u);
  EXPECT_EQ(Reserve(t, 64 * KiB, later), 192 * KiB);  // d's
  EXPECT_EQ(Reserve(t, 64 * KiB, later), 0u);         // a's
  EXPECT_TRUE(t.Contains("b", later));
  EXPECT_FALSE(t.Contains("a", later) || t.Contains("c", later) || t.Contains("d", later));
  EXPECT_EQ(t.stats().evictions, 3u);
}

// Eviction takes the oldest pages whose slots come free at once: an older
// page read within its window is passed over and stays (evicting it would
// lose it and give no room before its window ends).
TEST(PageTableTest, EvictionPassesOverPagesInTheirReadWindow) {
  PageTable t = FourPages();
  PageEntry e;
  ASSERT_TRUE(t.Lookup("a", t0, &e));
  for (const char* k : {"b", "c", "d"}) ASSERT_TRUE(t.Contains(k, t0 + 1ms));
  EXPECT_EQ(Reserve(t, 64 * KiB, t0 + 2ms), 64 * KiB);  // b's slot: a's is not reusable yet
  PageTableStats s = t.stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.quarantined_bytes, 0u);
  EXPECT_EQ(s.pages, 3u);
  ExpectBalanced(s);
  EXPECT_TRUE(t.Lookup("a", t0 + 3ms, &e)) << "a page read within its window was evicted for no room";
  EXPECT_EQ(Reserve(t, 64 * KiB, t0 + 200ms), 128 * KiB) << "c, the oldest page now";
}

// Every older page was read within its window and the newest were just
// committed: a caller that keeps the pages from a generation on (a node
// granting slots right after a commit) is refused rather than evict them,
// and nothing changes; without the floor the newest page is evicted, one
// page for one slot.
TEST(PageTableTest, AReserveNeverEvictsThePagesItKeeps) {
  PageTable t(8 * 64 * KiB, 100ms);
  for (int i = 0; i < 6; ++i) Put(t, "old" + std::to_string(i), 64 * KiB, t0);
  PageEntry e;
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(t.Lookup("old" + std::to_string(i), t0 + 1ms, &e));
  const uint64_t first_new = t.next_generation();
  for (const char* k : {"new0", "new1"}) Put(t, k, 64 * KiB, t0 + 2ms);
  const PageTableStats before = t.stats();
  uint64_t at = 7;
  EXPECT_EQ(t.Reserve(64 * KiB, t0 + 3ms, &at, first_new).code(), Status::Code::kBusy);
  EXPECT_EQ(at, 7u);
  PageTableStats after = t.stats();
  EXPECT_EQ(after.refusals, 1u);
  after.refusals = 0;
  EXPECT_EQ(after, before);
  EXPECT_EQ(Reserve(t, 64 * KiB, t0 + 3ms), 6 * 64 * KiB) << "new0's slot, the only one free at once";
  EXPECT_EQ(t.stats().evictions, 1u);
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(t.Contains("old" + std::to_string(i), t0 + 4ms)) << i;
  EXPECT_TRUE(t.Contains("new1", t0 + 4ms));
}

// Pins hold at most the bytes the caller allows: a batch that would pass
// them pins nothing, a key named twice or pinned already counts no more.
TEST(PageTableTest, PinAllPinsEveryPageOrNoneWithinItsBytes) {
  PageTable t = FourPages();
  std::vector<bool> pinned;
  ASSERT_TRUE(t.PinAll({"a", "a", "x"}, 128 * KiB, &pinned).ok());
  EXPECT_EQ(pinned, (std::vector<bool>{true, true, false}));
  const PageTableStats before = t.stats();
  const Status s = t.PinAll({"a", "b", "c"}, 128 * KiB, &pinned);
  EXPECT_EQ(s.code(), Status::Code::kBusy) << s.ToString();
  EXPECT_NE(s.message().find("KVF_STORE_MAX_PINNED_SHARE"), std::string::npos) << s.message();
  EXPECT_EQ(t.stats(), before);
  EXPECT_FALSE(t.Unpin("b")) << "a refused batch pinned nothing";
  ASSERT_TRUE(t.PinAll({"a", "b", "b"}, 128 * KiB, &pinned).ok()) << "a is pinned already: only b's slot is added";
  EXPECT_EQ(t.stats().pinned_pages, 2u);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(t.Unpin("a"));
  EXPECT_FALSE(t.Unpin("a"));
}

TEST(PageTableTest, PinnedPagesAreNeverEvicted) {
  PageTable t = FourPages();
  ASSERT_TRUE(t.Pin("a"));
  ASSERT_TRUE(t.Pin("a"));
  ASSERT_TRUE(t.Pin("b"));
  EXPECT_EQ(t.stats().pinned_pages, 2u);
  EXPECT_EQ(Reserve(t, 64 * KiB, t0), 128 * KiB);  // c, the oldest unpinned
  EXPECT_TRUE(t.Unpin("a"));
  EXPECT_EQ(Reserve(t, 64 * KiB, t0), 192 * KiB) << "a is pinned once more";
  EXPECT_TRUE(t.Unpin("a"));
  EXPECT_FALSE(t.Unpin("a"));
  EXPECT_FALSE(t.Pin("x"));
  EXPECT_FALSE(t.Unpin("x"));
  EXPECT_EQ(t.stats().pinned_pages, 1u);
  EXPECT_EQ(Reserve(t, 64 * KiB, t0), 0u);  // a, unpinned
  EXPECT_TRUE(t.Contains("b", t0));
}

TEST(PageTableTest, PinsBelongToTheKey) {
  PageTable t = FourPages();
  ASSERT_TRUE(t.Pin("a"));
  ASSERT_TRUE(t.Remove("b", t0));
  EXPECT_EQ(Put(t, "a", 64 * KiB, t0).offset, 64 * KiB);  // the overwrite keeps a pinned
  EXPECT_EQ(t.stats().pinned_pages, 1u);
  for (uint64_t at : {0 * KiB, 128 * KiB, 192 * KiB}) EXPECT_EQ(Reserve(t, 64 * KiB, t0), at);
  uint64_t at;
  EXPECT_EQ(t.Reserve(64 * KiB, t0, &at).code(), Status::Code::kBusy) << "only a is left, pinned";
  ASSERT_TRUE(t.Remove("a", t0));
  EXPECT_EQ(t.stats().pinned_pages, 0u);
  Put(t, "a", 64 * KiB, t0);
  EXPECT_FALSE(t.Unpin("a")) << "a removed page's pins go with it";
}

// Only pinned pages, a page read within its window, a quarantined slot and a
// put in progress: nothing can make room now, so nothing is evicted.
TEST(PageTableTest, RefusesWithoutChangingAnythingWhenNothingCanMakeRoom) {
  PageTable t(320 * KiB, 100ms);
  for (const char* k : {"a", "b", "c", "d"}) Put(t, k, 64 * KiB, t0);
  Reserve(t, 64 * KiB, t0);  // a put in progress
  ASSERT_TRUE(t.Pin("a") && t.Pin("b"));
  PageEntry e;
  ASSERT_TRUE(t.Lookup("c", t0 + 10ms, &e) && t.Lookup("d", t0 + 10ms, &e));
  ASSERT_TRUE(t.Remove("c", t0 + 10ms));  // quarantined until 110 ms

  const PageTableStats before = t.stats();
  uint64_t at = 7;
  const Status s = t.Reserve(64 * KiB, t0 + 20ms, &at);
  EXPECT_EQ(s.code(), Status::Code::kBusy);
  EXPECT_EQ(at, 7u);
  for (const char* part : {"131072 bytes pinned (2 pages)", "65536 bytes in unpinned pages",
                           "65536 bytes reserved", "65536 bytes quarantined", "comes back in 90 ms",
                           "unpin", "KVF_STORE_POOL_BYTES"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " not in: " << s.message();
  PageTableStats after = t.stats();
  EXPECT_EQ(after.refusals, 1u);
  after.refusals = 0;
  EXPECT_EQ(after, before);
  for (const char* k : {"a", "b", "d"}) EXPECT_TRUE(t.Contains(k, t0 + 20ms)) << k;
}

// Evicting b and d would free 128 KiB, but in two pieces between pinned a
// and c: a 128 KiB page refuses and both stay.
TEST(PageTableTest, RefusesWithoutEvictingWhenEvictionLeavesOnlySmallPieces) {
  PageTable t = FourPages();
  ASSERT_TRUE(t.Pin("a") && t.Pin("c"));
  const PageTableStats before = t.stats();
  uint64_t at;
  EXPECT_EQ(t.Reserve(128 * KiB, t0, &at).code(), Status::Code::kBusy);
  PageTableStats after = t.stats();
  after.refusals = 0;
  EXPECT_EQ(after, before);
  EXPECT_EQ(Offsets(t, {"b", "d"}, t0), (std::vector<uint64_t>{64 * KiB, 192 * KiB}));
  EXPECT_EQ(Reserve(t, 64 * KiB, t0 + 1s), 64 * KiB) << "the freed slots were taken back whole";
}

TEST(PageTableTest, AbandonQuarantinesTheSlot) {
  PageTable t(128 * KiB, 100ms);
  const uint64_t at = Reserve(t, 64 * KiB, t0);
  t.Abandon(at, t0 + 10ms);
  t.Abandon(at, t0 + 10ms);  // no longer reserved: ignored
  PageTableStats s = t.stats();
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.quarantined_bytes, 64 * KiB);
  ExpectBalanced(s);
  EXPECT_EQ(t.Commit("a", at, 64 * KiB, {}, t0 + 10ms).generation, 0u);
  EXPECT_EQ(Reserve(t, 64 * KiB, t0 + 20ms), 64 * KiB);
  uint64_t none;
  const Status busy = t.Reserve(64 * KiB, t0 + 109ms, &none);
  EXPECT_NE(busy.message().find("comes back in 1 ms"), std::string::npos) << busy.ToString();
  EXPECT_EQ(Reserve(t, 64 * KiB, t0 + 110ms), at);
}

TEST(PageTableTest, AbandonHoldsTheSlotForTheLongerOfReadWindowAndHold) {
  PageTable t(64 * KiB, 100ms);
  const uint64_t a = Reserve(t, 64 * KiB, t0);
  t.Abandon(a, t0, 1s);  // a writer's late WRITE: held a second
  uint64_t none;
  EXPECT_EQ(t.Reserve(64 * KiB, t0 + 999ms, &none).code(), Status::Code::kBusy);
  EXPECT_EQ(Reserve(t, 64 * KiB, t0 + 1s), a);
  t.Abandon(a, t0 + 1s, 10ms);  // shorter than the read window: the window holds
  EXPECT_EQ(t.Reserve(64 * KiB, t0 + 1s + 99ms, &none).code(), Status::Code::kBusy);
  EXPECT_EQ(Reserve(t, 64 * KiB, t0 + 1s + 100ms), a);
}

TEST(PageTableTest, UnreserveFreesTheSlotAtOnce) {
  PageTable t(64 * KiB, 100ms);
  const uint64_t a = Reserve(t, 64 * KiB, t0);
  t.Unreserve(a, t0 + 1ms);
  t.Unreserve(a, t0 + 1ms);  // no longer reserved: ignored
  PageTableStats s = t.stats();
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.quarantined_bytes, 0u) << "nothing was written into it: no wait";
  ExpectBalanced(s);
  EXPECT_EQ(t.Commit("a", a, 64 * KiB, {}, t0 + 1ms).generation, 0u) << "no longer reserved";
  EXPECT_EQ(t.Commit("b", Reserve(t, 64 * KiB, t0 + 1ms), 64 * KiB, {}, t0 + 1ms).offset, a);
  t.Unreserve(a, t0 + 2ms);  // a page now, not a reserved slot: ignored
  EXPECT_EQ(Offsets(t, {"b"}, t0 + 2ms), (std::vector<uint64_t>{a}));
  ExpectBalanced(t.stats());
}

TEST(PageTableTest, RemoveAllKeepsPutsInProgress) {
  PageTable t(MiB, 100ms);
  for (const char* k : {"a", "b", "c"}) Put(t, k, 64 * KiB, t0);
  ASSERT_TRUE(t.Pin("b"));
  const uint64_t at = Reserve(t, 64 * KiB, t0);
  EXPECT_EQ(t.RemoveAll(t0), 3u);
  PageTableStats s = t.stats();
  EXPECT_EQ(s.pages, 0u);
  EXPECT_EQ(s.pinned_pages, 0u);
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_EQ(s.removals, 3u);
  EXPECT_EQ(s.reserved_bytes, 64 * KiB);
  EXPECT_EQ(s.free_bytes, MiB - 64 * KiB);
  EXPECT_FALSE(t.Contains("b", t0));
  EXPECT_EQ(t.Commit("a", at, 64 * KiB, {}, t0).generation, 4u);
  EXPECT_EQ(t.RemoveAll(t0), 1u);
}

TEST(PageTableTest, RejectsPagesLargerThanThePool) {
  PageTable t(MiB + 100, 100ms);
  uint64_t at;
  EXPECT_EQ(t.Reserve(MiB + 1, t0, &at).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(t.Reserve(0, t0, &at).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(t.Reserve(~0ull, t0, &at).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(t.stats().refusals, 0u);
  EXPECT_EQ(Reserve(t, MiB, t0), 0u);
}

// The reference: what the table should hold, and every slot it should have
// handed out, quarantined or kept.
class Model {
 public:
  struct Page {
    PageEntry entry;
    TimePoint last_lookup = TimePoint::min();
    uint64_t last_use = 0;
    int pins = 0;
  };
  static constexpr std::chrono::milliseconds kWindow = 300ms;
  static constexpr uint64_t kPool = 8 * MiB;

  static uint64_t Slot(uint64_t length) { return (length + 4095) / 4096 * 4096; }

  void Free(const Page& p, TimePoint now) {
    const TimePoint reusable_at = p.last_lookup + kWindow;
    if (reusable_at > now) quarantine.emplace(reusable_at, std::make_pair(p.entry.offset, Slot(p.entry.length)));
  }
  void ReleaseExpired(TimePoint now) { quarantine.erase(quarantine.begin(), quarantine.upper_bound(now)); }
  // The `n` least recently used unpinned pages whose slots are free at
  // once (not read within their window) go.
  void Evict(size_t n, TimePoint now) {
    std::vector<std::pair<uint64_t, std::string>> by_age;
    for (const auto& [key, p] : pages)
      if (p.pins == 0 && p.last_lookup + kWindow <= now) by_age.emplace_back(p.last_use, key);
    std::sort(by_age.begin(), by_age.end());
    ASSERT_LE(n, by_age.size());
    for (size_t i = 0; i < n; ++i) {
      Free(pages[by_age[i].second], now);
      pages.erase(by_age[i].second);
    }
  }
  // Every slot in use (pages, puts, quarantine) as offset -> bytes; false
  // when two overlap or one leaves the pool.
  bool Slots(std::map<uint64_t, uint64_t>* out, bool with_movable, TimePoint now) const {
    std::vector<std::pair<uint64_t, uint64_t>> all;
    for (const auto& [key, p] : pages)
      if (with_movable || p.pins > 0 || p.last_lookup + kWindow > now)
        all.emplace_back(p.entry.offset, Slot(p.entry.length));
    for (const auto& [at, length] : reserved) all.emplace_back(at, Slot(length));
    for (const auto& [when, slot] : quarantine) all.push_back(slot);
    std::sort(all.begin(), all.end());
    for (size_t i = 0; i < all.size(); ++i) {
      const uint64_t end = i + 1 < all.size() ? all[i + 1].first : kPool;
      if (all[i].first + all[i].second > end) return false;
      out->insert(all[i]);
    }
    return true;
  }
  // Whether evicting every unpinned page reusable at `now` leaves a free
  // run of `bytes`.
  bool CanMakeRoom(uint64_t bytes, TimePoint now) const {
    std::map<uint64_t, uint64_t> kept;
    Slots(&kept, false, now);
    uint64_t start = 0;
    for (const auto& [at, size] : kept) {
      if (at - start >= bytes) return true;
      start = at + size;
    }
    return kPool - start >= bytes;
  }
  PageTableStats Expected() const {
    PageTableStats s;
    s.pool_bytes = kPool;
    s.pages = pages.size();
    for (const auto& [key, p] : pages) {
      s.used_bytes += Slot(p.entry.length);
      s.pinned_pages += p.pins > 0;
    }
    for (const auto& [at, length] : reserved) s.reserved_bytes += Slot(length);
    for (const auto& [when, slot] : quarantine) s.quarantined_bytes += slot.second;
    s.free_bytes = kPool - s.used_bytes - s.reserved_bytes - s.quarantined_bytes;
    return s;
  }

  std::map<std::string, Page> pages;
  std::map<uint64_t, uint64_t> reserved;  // offset -> length
  std::multimap<TimePoint, std::pair<uint64_t, uint64_t>> quarantine;  // reusable at -> offset, bytes
  uint64_t tick = 0;
};

// 100,000 random operations against the model: the same pages and entries,
// eviction in LRU order, Reserve refusing exactly when no eviction can make
// room, no two slots overlapping, and the pool's bytes all accounted for.
TEST(PageTableTest, RandomOperationsMatchAModel) {
  PageTable t(Model::kPool, Model::kWindow);
  Model m;
  std::mt19937_64 rng(15);
  TimePoint now = t0;
  uint64_t last_generation = 0;
  PageTableStats counters;  // evictions, removals, overwrites, refusals as expected
  auto key = [&] { return "key-" + std::to_string(rng() % 60); };
  for (int op = 0; op < 100000; ++op) {
    now += std::chrono::milliseconds(rng() % 8);
    const int what = static_cast<int>(rng() % 100);
    if (what < 25 && m.reserved.size() < 6) {  // Reserve
      const uint64_t length = rng() % 4 == 0 ? 1 + rng() % (2 * MiB) : 64 * KiB + rng() % (512 * KiB);
      m.ReleaseExpired(now);
      const bool can = m.CanMakeRoom(Model::Slot(length), now);
      uint64_t at;
      const Status s = t.Reserve(length, now, &at);
      ASSERT_EQ(s.ok(), can) << "op " << op << ": " << s.ToString();
      if (!s.ok()) {
        ASSERT_EQ(s.code(), Status::Code::kBusy);
        ++counters.refusals;
      } else {
        const size_t evicted = m.pages.size() - t.stats().pages;
        m.Evict(evicted, now);
        counters.evictions += evicted;
        m.reserved.emplace(at, length);
      }
    } else if (what < 50 && !m.reserved.empty()) {  // Commit (or Abandon)
      auto slot = m.reserved.begin();
      std::advance(slot, static_cast<long>(rng() % m.reserved.size()));
      const auto [at, length] = *slot;
      m.reserved.erase(slot);
      if (rng() % 10 == 0) {
        t.Abandon(at, now);
        m.quarantine.emplace(now + Model::kWindow, std::make_pair(at, Model::Slot(length)));
      } else {
        const std::string k = key();
        const Checksum sum{rng(), rng()};
        const PageEntry e = t.Commit(k, at, length, sum, now);
        ASSERT_GT(e.generation, last_generation);
        last_generation = e.generation;
        ASSERT_EQ(e, (PageEntry{at, length, e.generation, sum}));
        Model::Page& p = m.pages[k];
        if (p.entry.generation != 0) {
          m.Free(p, now);
          ++counters.overwrites;
        }
        p = {e, TimePoint::min(), ++m.tick, p.pins};
      }
    } else if (what < 70) {  // Lookup
      const std::string k = key();
      PageEntry e;
      auto p = m.pages.find(k);
      ASSERT_EQ(t.Lookup(k, now, &e), p != m.pages.end()) << k;
      if (p == m.pages.end()) continue;
      ASSERT_EQ(e, p->second.entry);
      p->second.last_lookup = now;
      p->second.last_use = ++m.tick;
    } else if (what < 85) {  // Contains
      const std::string k = key();
      auto p = m.pages.find(k);
      ASSERT_EQ(t.Contains(k, now), p != m.pages.end()) << k;
      if (p != m.pages.end()) p->second.last_use = ++m.tick;
    } else if (what < 90) {  // Remove
      const std::string k = key();
      auto p = m.pages.find(k);
      ASSERT_EQ(t.Remove(k, now), p != m.pages.end());
      if (p == m.pages.end()) continue;
      m.Free(p->second, now);
      m.pages.erase(p);
      ++counters.removals;
    } else if (what < 95) {  // Pin
      const std::string k = key();
      auto p = m.pages.find(k);
      ASSERT_EQ(t.Pin(k), p != m.pages.end());
      if (p != m.pages.end()) ++p->second.pins;
    } else if (what < 99 || rng() % 200 != 0) {  // Unpin
      const std::string k = key();
      auto p = m.pages.find(k);
      const bool pinned = p != m.pages.end() && p->second.pins > 0;
      ASSERT_EQ(t.Unpin(k), pinned);
      if (pinned && --p->second.pins == 0) p->second.last_use = ++m.tick;
    } else {  // RemoveAll
      ASSERT_EQ(t.RemoveAll(now), m.pages.size());
      counters.removals += m.pages.size();
      for (const auto& [k, p] : m.pages) m.Free(p, now);
      m.pages.clear();
    }
    std::map<uint64_t, uint64_t> slots;
    ASSERT_TRUE(m.Slots(&slots, true, now)) << "op " << op << ": two slots overlap";
    PageTableStats expected = m.Expected();
    expected.evictions = counters.evictions;
    expected.removals = counters.removals;
    expected.overwrites = counters.overwrites;
    expected.refusals = counters.refusals;
    ASSERT_EQ(t.stats(), expected) << "op " << op;
  }
  std::printf("page table model: %llu evictions, %llu removals, %llu overwrites, %llu refusals\n",
              static_cast<unsigned long long>(counters.evictions), static_cast<unsigned long long>(counters.removals),
              static_cast<unsigned long long>(counters.overwrites),
              static_cast<unsigned long long>(counters.refusals));
  EXPECT_GT(counters.evictions, 1000u);
  EXPECT_GT(counters.refusals, 100u);
  EXPECT_GT(counters.overwrites, 1000u);
}

TEST(RegionVersionsTest, RegionsCoverThePoolAndBumpsCountPerRegion) {
  EXPECT_EQ(RegionVersions::RegionBytes(512 * MiB, 4096), 2 * MiB);
  EXPECT_EQ(RegionVersions::RegionBytes(1 * MiB, 4096), 4096u);
  EXPECT_EQ(RegionVersions::RegionBytes(100, 4096), 4096u) << "never below the alignment";
  EXPECT_EQ(RegionVersions::RegionBytes(256 * 4096 + 1, 4096), 8192u) << "rounded up: every byte has a region";
  std::vector<uint64_t> words(RegionVersions::kRegions, 0);
  RegionVersions v(words.data(), 64 * KiB);
  EXPECT_EQ(v.RegionOf(0), 0u);
  EXPECT_EQ(v.RegionOf(64 * KiB - 1), 0u);
  EXPECT_EQ(v.RegionOf(64 * KiB), 1u);
  EXPECT_EQ(v.RegionOf(1ull << 40), RegionVersions::kRegions - 1) << "past the end: the last region";
  v.Bump(70 * KiB);
  v.Bump(100 * KiB);
  EXPECT_EQ(v.VersionAt(64 * KiB), 2u);
  EXPECT_EQ(v.VersionAt(0), 0u);
  EXPECT_EQ(words[1], 2u) << "the words peers READ";
  v.BumpAll();
  EXPECT_EQ(v.VersionAt(0), 1u);
  EXPECT_EQ(v.VersionAt(64 * KiB), 3u);
}

// A page's region version goes up exactly when the page leaves its key:
// evicted, removed, overwritten, or all removed; never on a lookup, a pin,
// a new key's commit or an abandoned put. So a client that remembers a
// page with its region's version knows, by reading the same version, that
// the page is still its key's.
TEST(RegionVersionsTest, APageLeavingItsKeyBumpsItsRegionAndNothingElseDoes) {
  std::vector<uint64_t> words(RegionVersions::kRegions, 0);
  RegionVersions v(words.data(), 64 * KiB);  // one 64 KiB slot per region
  PageTable t(4 * 64 * KiB, 100ms, 4096, &v);
  auto all = [&] { return std::vector<uint64_t>(words.begin(), words.begin() + 4); };
  const PageEntry a = Put(t, "a", 64 * KiB, t0), b = Put(t, "b", 64 * KiB, t0);
  Put(t, "c", 64 * KiB, t0);
  Put(t, "d", 64 * KiB, t0);
  EXPECT_EQ(all(), (std::vector<uint64_t>{0, 0, 0, 0})) << "new keys change nothing";
  PageEntry e;
  ASSERT_TRUE(t.Lookup("a", t0, &e));
  ASSERT_TRUE(t.Contains("b", t0));
  ASSERT_TRUE(t.Pin("c"));
  ASSERT_TRUE(t.Unpin("c"));
  EXPECT_EQ(all(), (std::vector<uint64_t>{0, 0, 0, 0})) << "reading and pinning change nothing";
  // An overwrite of b in a full pool: the least recently used page (d: c's
  // unpin made it recent) is evicted for the new slot, and b's old page
  // leaves its key.
  const PageEntry d = [&] { PageEntry x; EXPECT_TRUE(t.Lookup("d", t0, &x)); return x; }();
  ASSERT_TRUE(t.Lookup("a", t0, &e));
  ASSERT_TRUE(t.Lookup("b", t0, &e));
  ASSERT_TRUE(t.Lookup("c", t0, &e));  // d is the oldest now
  Put(t, "b", 64 * KiB, t0 + 1s);
  EXPECT_EQ(words[v.RegionOf(b.offset)], 1u) << "b's old page";
  EXPECT_EQ(words[v.RegionOf(d.offset)], 1u) << "d, evicted";
  uint64_t bumps = 0;
  for (uint64_t w : all()) bumps += w;
  EXPECT_EQ(bumps, 2u);
  EXPECT_TRUE(t.Remove("a", t0 + 2s));
  EXPECT_EQ(words[v.RegionOf(a.offset)], 1u) << "a, removed";
  uint64_t after_remove = 0;
  for (uint64_t w : all()) after_remove += w;
  EXPECT_EQ(after_remove, 3u);
  uint64_t at = 0;
  ASSERT_TRUE(t.Reserve(4096, t0 + 3s, &at).ok());
  t.Abandon(at, t0 + 3s);
  uint64_t after_abandon = 0;
  for (uint64_t w : all()) after_abandon += w;
  EXPECT_EQ(after_abandon, 3u) << "an abandoned put held no key";
  t.RemoveAll(t0 + 4s);
  for (size_t r = 0; r < RegionVersions::kRegions; ++r) EXPECT_GE(words[r], 1u) << "region " << r;
}


// Pages handed over to another member: selected without touching them, up
// to a byte budget, pinned ones left; removed only while still the page
// that was selected.
TEST(PageTableTest, SelectPicksUnpinnedPagesAndRemoveIfTakesOnlyTheSamePage) {
  PageTable t(MiB, 100ms);
  const TimePoint now = std::chrono::steady_clock::now();
  for (const char* k : {"a1", "a2", "a3", "b1"}) Put(t, k, 4096, now);
  Put(t, "a4", 3 * 4096, now);
  ASSERT_TRUE(t.Pin("a2"));
  const auto stats = t.stats();
  auto is_a = [](std::string_view k) { return k[0] == 'a'; };
  auto picked = t.Select(is_a, 2 * 4096);
  ASSERT_EQ(picked.size(), 2u) << "two 4 KiB pages fit; the 12 KiB one is passed over";
  std::vector<std::string> keys;
  for (const auto& [k, e] : picked) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"a1", "a3"})) << "a2 is pinned";
  EXPECT_EQ(t.stats(), stats) << "selecting changes nothing";
  EXPECT_EQ(t.Select(is_a, MiB).size(), 3u);
  EXPECT_TRUE(t.Select(is_a, 4095).empty());

  const auto& [k1, e1] = picked[0];
  const uint64_t old_generation = picked[1].second.generation;
  Put(t, picked[1].first, 4096, now);  // overwritten since it was selected
  EXPECT_FALSE(t.RemoveIf(picked[1].first, old_generation, now)) << "a newer page of the key stays";
  EXPECT_TRUE(t.Contains(picked[1].first, now));
  EXPECT_TRUE(t.RemoveIf(k1, e1.generation, now));
  EXPECT_FALSE(t.Contains(k1, now));
  PageEntry pinned;
  ASSERT_TRUE(t.Lookup("a2", now, &pinned));
  EXPECT_FALSE(t.RemoveIf("a2", pinned.generation, now)) << "pinned: a caller is using it";
  EXPECT_FALSE(t.RemoveIf("missing", 1, now));
  EXPECT_EQ(t.stats().removals, 1u);
}

// With a table of keys, every key the page table holds is found there and
// no other, through puts, overwrites, evictions, removals, pins and
// RemoveAll; keys beyond the table's room are counted missing, not lost.
TEST(PageTableTest, ATableOfKeysHoldsExactlyTheKeysOfThePages) {
  const uint64_t bytes = SharedKeys::BytesFor(0);  // 1024 entries: room for 768 keys
  std::vector<uint64_t> memory(bytes / 8);
  SharedKeys keys = SharedKeys::Format(memory.data(), bytes);
  PageTable t(4 * MiB, 0ms, 4096, nullptr, &keys);  // 1024 slots of 4 KiB: evictions once full
  std::mt19937_64 rng(3);
  TimePoint now = t0;
  uint64_t most_missing = 0;
  for (int step = 0; step < 40; ++step) {
    for (int op = 0; op < 200; ++op) {
      now += 1ms;
      const std::string k = "k" + std::to_string(rng() % 1500);
      switch (rng() % 8) {
        case 0: t.Remove(k, now); break;
        case 1: t.Pin(k); break;
        case 2: t.Unpin(k); break;
        default: {
          uint64_t at = 0;
          const uint64_t length = 1 + rng() % (rng() % 4 == 0 ? 3 * 4096 : 4096);
          if (t.Reserve(length, now, &at).ok()) t.Commit(k, at, length, Checksum{1, 2}, now);
        }
      }
    }
    const uint64_t held = t.stats().pages;
    ASSERT_EQ(keys.count() + keys.missing(), held) << "step " << step;
    most_missing = std::max(most_missing, keys.missing());
    for (int i = 0; i < 1500; ++i) {
      const std::string k = "k" + std::to_string(i);
      const SharedKeys::Answer a = keys.Find(k);
      if (t.Contains(k, now)) {
        ASSERT_NE(a, SharedKeys::Answer::kAbsent) << k << " held, step " << step;
      } else {
        ASSERT_NE(a, SharedKeys::Answer::kPresent) << k << " not held, step " << step;
      }
      if (keys.missing() == 0) {
        ASSERT_NE(a, SharedKeys::Answer::kUnknown) << k;
      }
    }
  }
  EXPECT_GT(most_missing, 0u) << "the table overflowed at times";
  t.RemoveAll(now);
  EXPECT_EQ(keys.count(), 0u);
  EXPECT_EQ(keys.missing(), 0u);
  EXPECT_EQ(keys.Find("k1"), SharedKeys::Answer::kAbsent);
}

}  // namespace
}  // namespace kvfabric::store
