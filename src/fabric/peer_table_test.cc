#include "fabric/peer_table.h"

#include <gtest/gtest.h>
#include <rdma/fi_endpoint.h>
#include <unistd.h>

#include <set>

namespace kvfabric::fabric {
namespace {

constexpr int64_t kMs = 1000000;
constexpr int64_t kT0 = 1000 * kMs;

// Processes as a test declares them: alive unless listed as exited; counts
// the checks.
struct FakeProcesses {
  std::set<int64_t> exited;
  int checks = 0;
  std::function<bool(int64_t)> Probe() {
    return [this](int64_t pid) {
      ++checks;
      return exited.count(pid) == 0;
    };
  }
};

TEST(PeerTableTest, UsersAreCountedAndRemovalsWaitForAQuietSlot) {
  PeerTable t("rail 0 (test)");
  EXPECT_EQ(t.At(3), nullptr);
  t.AddRef(3);
  t.Slot(3)->address = "addr-3";
  fi_addr_t found = 0;
  EXPECT_TRUE(t.FindLive("addr-3", &found));
  EXPECT_EQ(found, 3u);
  EXPECT_FALSE(t.FindLive("addr-4", &found));
  t.AddRef(3);  // the same address again: one slot, two users
  EXPECT_EQ(t.slots_in_use(), 1u);
  EXPECT_EQ(t.At(3)->refs, 2);
  EXPECT_EQ(t.At(1)->refs, 0);  // created on the way, not in use
  EXPECT_FALSE(t.removals_pending());

  EXPECT_TRUE(t.Remove(3));
  EXPECT_TRUE(t.Remove(3));
  EXPECT_FALSE(t.Remove(3));  // nothing left to undo
  EXPECT_FALSE(t.Remove(1));  // never inserted
  EXPECT_FALSE(t.Remove(9));  // beyond the table
  EXPECT_TRUE(t.removals_pending());
  EXPECT_EQ(t.slots_in_use(), 1u);  // in use until quiet

  // An operation in flight holds the slot; so does one still queued.
  t.At(3)->inflight = 1;
  EXPECT_TRUE(t.TakeQuietRemovals({}).empty());
  EXPECT_TRUE(t.removals_pending());
  t.At(3)->inflight = 0;
  EXPECT_TRUE(t.TakeQuietRemovals({false, false, false, true}).empty());
  EXPECT_TRUE(t.removals_pending());

  // Quiet: both users go at once, and the slot's one insert with them;
  // slots past `queued` have nothing queued.
  auto r = t.TakeQuietRemovals({false});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].slot, 3u);
  EXPECT_EQ(r[0].close_ep, nullptr);
  EXPECT_FALSE(t.removals_pending());
  EXPECT_EQ(t.slots_in_use(), 0u);
  EXPECT_FALSE(t.FindLive("addr-3", &found));
  EXPECT_TRUE(t.TakeQuietRemovals({}).empty());
}

TEST(PeerTableTest, AReusedSlotStartsAfresh) {
  PeerTable t("rail 0 (test)");
  PeerTable::Peer* p = t.Slot(2);
  p->pid = 42;
  p->dead = true;
  p->checked_ns = kT0;
  t.AddRef(2);
  ASSERT_TRUE(t.Remove(2));
  ASSERT_EQ(t.TakeQuietRemovals({}).size(), 1u);
  p = t.At(2);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->pid, 0);
  EXPECT_FALSE(p->dead);
  EXPECT_EQ(p->checked_ns, 0);
  EXPECT_EQ(p->refs, 0);
}

// A segment closed while the same peer is open again under a new handle (two
// users of one slot): nothing is removed until the last user goes. On shm an
// fi_av_remove then would unmap the peer's region under the other user.
TEST(PeerTableTest, TheSlotAndEndpointGoWithTheLastUser) {
  PeerTable t("rail 0 (shm)");
  fid_ep ep{};
  PeerTable::Peer* p = t.Slot(0);
  p->ep = &ep;
  t.AddRef(0);
  t.AddRef(0);
  ASSERT_TRUE(t.Remove(0));
  auto r = t.TakeQuietRemovals({});
  EXPECT_TRUE(r.empty());  // one user left: no fi_av_remove, the endpoint stays
  EXPECT_FALSE(t.removals_pending());
  EXPECT_EQ(t.At(0), p);   // and so does the record
  EXPECT_EQ(p->ep, &ep);
  EXPECT_EQ(t.slots_in_use(), 1u);

  ASSERT_TRUE(t.Remove(0));
  r = t.TakeQuietRemovals({});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].close_ep, &ep);
  EXPECT_EQ(t.At(0)->ep, nullptr);
  EXPECT_TRUE(t.TakeEndpoints().empty());
}

TEST(PeerTableTest, RemovalsOfBusySlotsWaitWhileQuietOnesProceed) {
  PeerTable t("rail 0 (test)");
  t.AddRef(0);
  t.AddRef(1);
  t.Remove(0);
  t.Remove(1);
  t.At(0)->inflight = 2;
  auto r = t.TakeQuietRemovals({});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].slot, 1u);
  EXPECT_TRUE(t.removals_pending());
  t.At(0)->inflight = 0;
  r = t.TakeQuietRemovals({});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].slot, 0u);
  EXPECT_FALSE(t.removals_pending());
}

TEST(PeerTableTest, APeerWithoutPidIsAliveWithoutACheck) {
  FakeProcesses procs;
  PeerTable t("rail 0 (tcp)", procs.Probe());
  EXPECT_TRUE(t.Alive(nullptr, kT0));
  EXPECT_TRUE(t.Alive(t.Slot(0), kT0));
  EXPECT_EQ(procs.checks, 0);
}

TEST(PeerTableTest, AnExitedPeerIsFoundAtMostOneCheckPeriodLater) {
  FakeProcesses procs;
  PeerTable t("rail 0 (shm)", procs.Probe());
  PeerTable::Peer* p = t.Slot(0);
  p->pid = 4242;
  EXPECT_TRUE(t.Alive(p, kT0));
  EXPECT_EQ(procs.checks, 1);
  procs.exited.insert(4242);
  // Checked at most once per millisecond.
  EXPECT_TRUE(t.Alive(p, kT0 + kMs - 1));
  EXPECT_EQ(procs.checks, 1);
  EXPECT_FALSE(t.TakeDeadFound());
  EXPECT_FALSE(t.Alive(p, kT0 + kMs));
  EXPECT_EQ(procs.checks, 2);
  EXPECT_TRUE(p->dead);
  EXPECT_TRUE(t.TakeDeadFound());
  EXPECT_FALSE(t.TakeDeadFound());  // once
  // Dead stays dead, without asking again.
  EXPECT_FALSE(t.Alive(p, kT0 + 10 * kMs));
  EXPECT_EQ(procs.checks, 2);
  EXPECT_FALSE(t.TakeDeadFound());
}

TEST(PeerTableTest, BusyPeersAreCheckedEveryHundredMilliseconds) {
  FakeProcesses procs;
  PeerTable t("rail 0 (shm)", procs.Probe());
  t.Slot(0)->pid = 10;
  t.Slot(1)->pid = 11;
  t.At(1)->inflight = 1;
  procs.exited = {10, 11};
  ASSERT_TRUE(t.BusyCheckDue(kT0));
  EXPECT_FALSE(t.BusyCheckDue(kT0 + 100 * kMs));
  t.CheckBusyPeers(kT0);
  EXPECT_EQ(procs.checks, 1);  // only the peer with operations in flight
  EXPECT_FALSE(t.At(0)->dead);
  EXPECT_TRUE(t.At(1)->dead);
  EXPECT_TRUE(t.TakeDeadFound());
  EXPECT_TRUE(t.BusyCheckDue(kT0 + 100 * kMs + 1));
}

TEST(PeerTableTest, DeadPeersAreHandedOverOnce) {
  FakeProcesses procs;
  PeerTable t("rail 0 (shm)", procs.Probe());
  fid_ep ep0{}, ep1{};
  t.Slot(0)->ep = &ep0;
  t.Slot(1)->ep = &ep1;
  t.At(1)->pid = 77;
  procs.exited = {77};
  ASSERT_FALSE(t.Alive(t.At(1), kT0));
  std::vector<fid_ep*> close;
  EXPECT_EQ(t.TakeDeadPeers(&close), 1u);
  EXPECT_EQ(close, std::vector<fid_ep*>{&ep1});
  EXPECT_TRUE(t.At(1)->cleaned);
  EXPECT_EQ(t.At(1)->ep, nullptr);
  close.clear();
  EXPECT_EQ(t.TakeDeadPeers(&close), 0u);
  EXPECT_TRUE(close.empty());
  // The live peer's endpoint is closed with the rail.
  EXPECT_EQ(t.TakeEndpoints(), std::vector<fid_ep*>{&ep0});
}

TEST(PeerTableTest, APeerRefusedForTheWholePeriodIsGivenUpOn) {
  PeerTable t("rail 0 (tcp)");
  PeerTable::Peer* p = t.Slot(3);
  constexpr int64_t kLimit = 1000 * kMs;
  EXPECT_EQ(PeerTable::RefusedSince(p), 0);
  // Refused every poll (every 50 ms here): the run lasts.
  EXPECT_FALSE(PeerTable::RefusedTooLong(p, kT0, kLimit)) << "the first refusal starts the run";
  EXPECT_EQ(PeerTable::RefusedSince(p), kT0);
  for (int64_t t = 50; t < 1000; t += 50) EXPECT_FALSE(PeerTable::RefusedTooLong(p, kT0 + t * kMs, kLimit)) << t;
  EXPECT_TRUE(PeerTable::RefusedTooLong(p, kT0 + 1000 * kMs, kLimit));
  // Nothing, null or no limit: never given up on.
  EXPECT_FALSE(PeerTable::RefusedTooLong(p, kT0 + 1050 * kMs, 0));
  EXPECT_FALSE(PeerTable::RefusedTooLong(nullptr, kT0, kLimit));
  EXPECT_EQ(PeerTable::RefusedSince(nullptr), 0);
  PeerTable::Taken(nullptr);
}

TEST(PeerTableTest, ATakenPostAGapOrWorkInFlightEndsARunOfRefusals) {
  PeerTable t("rail 0 (tcp)");
  PeerTable::Peer* p = t.Slot(1);
  constexpr int64_t kLimit = 1000 * kMs;
  EXPECT_FALSE(PeerTable::RefusedTooLong(p, kT0, kLimit));
  PeerTable::Taken(p);  // connected after all
  EXPECT_EQ(PeerTable::RefusedSince(p), 0);
  EXPECT_FALSE(PeerTable::RefusedTooLong(p, kT0 + 999 * kMs, kLimit));
  EXPECT_FALSE(PeerTable::RefusedTooLong(p, kT0 + 1000 * kMs, kLimit)) << "a new run, 1 ms long";
  // Nothing waited for the peer for longer than kRefusalGapNs: the idle
  // time is no refusal, and the next one starts a new run.
  const int64_t later = kT0 + 1000 * kMs + PeerTable::kRefusalGapNs + 1;
  EXPECT_FALSE(PeerTable::RefusedTooLong(p, later, kLimit));
  EXPECT_EQ(PeerTable::RefusedSince(p), later);
  // With operations in flight to the peer a refusal is flow control.
  p->inflight = 1;
  EXPECT_FALSE(PeerTable::RefusedTooLong(p, later + 5000 * kMs, kLimit));
  EXPECT_EQ(PeerTable::RefusedSince(p), 0);
  p->inflight = 0;
  // A new insert of the slot (a peer restarted at the same address) starts afresh.
  EXPECT_FALSE(PeerTable::RefusedTooLong(p, later + 6000 * kMs, kLimit));
  t.AddRef(1);
  EXPECT_EQ(PeerTable::RefusedSince(p), 0);
}

TEST(PeerTableTest, AnEndpointWhoseNameMayBeUnreadIsProbedOnce) {
  PeerTable t("rail 0 (shm)");
  fid_ep ep{};
  PeerTable::Peer* p = t.Slot(0);
  PeerTable::PostRefused(p, 0x1000, 7);
  EXPECT_FALSE(PeerTable::NameMayBeUnread(*p)) << "no endpoint of its own: no name of its own";
  p->ep = &ep;
  EXPECT_FALSE(PeerTable::NameMayBeUnread(*p)) << "nothing posted yet: no name sent";
  PeerTable::PostRefused(p, 0x2000, 9);
  EXPECT_TRUE(PeerTable::NameMayBeUnread(*p));
  EXPECT_EQ(p->probe_addr, 0x2000u);
  EXPECT_EQ(p->probe_key, 9u);
  p->name_probe = true;
  EXPECT_FALSE(PeerTable::NameMayBeUnread(*p)) << "a probe is already queued";
  p->name_probe = false;
  p->dead = true;
  EXPECT_FALSE(PeerTable::NameMayBeUnread(*p)) << "a dead peer reads nothing";
  p->dead = false;
  PeerTable::PostTaken(p);
  EXPECT_FALSE(PeerTable::NameMayBeUnread(*p)) << "a taken post shows the name was read";
  PeerTable::PostRefused(p, 0x3000, 1);  // flow control later: the name stays read
  EXPECT_FALSE(PeerTable::NameMayBeUnread(*p));
  EXPECT_EQ(p->probe_addr, 0x2000u);
  PeerTable::PostTaken(nullptr);
  PeerTable::PostRefused(nullptr, 0, 0);
  // A removed slot reused by a new insert starts afresh (a new endpoint).
  t.AddRef(0);
  ASSERT_TRUE(t.Remove(0));
  const auto removals = t.TakeQuietRemovals({});
  ASSERT_EQ(removals.size(), 1u);
  EXPECT_EQ(removals[0].close_ep, &ep);
  EXPECT_FALSE(t.At(0)->name_read);
  EXPECT_FALSE(t.At(0)->name_sent);
}

TEST(PeerTableTest, ProcessExistsKnowsThisProcess) {
  EXPECT_TRUE(ProcessExists(getpid()));
}

}  // namespace
}  // namespace kvfabric::fabric
