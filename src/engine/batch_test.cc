#include "engine/batch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

namespace kvfabric::engine {
namespace {

Clock::time_point In(int ms) { return Clock::now() + std::chrono::milliseconds(ms); }

// Reserves the one task of a one-task batch and starts it with `slices`
// slices and a deadline `ms` from now.
Task& StartOnlyTask(Batch& b, uint32_t slices, int ms, const char* what, Rerouter* rerouter = nullptr) {
  size_t first;
  EXPECT_TRUE(b.Reserve(1, &first));
  Task& t = b.task(first);
  b.outstanding_slices() += slices;
  t.Start(&b, slices, In(ms), ms, what, nullptr, rerouter);
  return t;
}

TEST(BatchTest, TaskCompletesWhenAllSlicesDo) {
  Batch b(1, 4);
  size_t first;
  ASSERT_TRUE(b.Reserve(2, &first));
  EXPECT_EQ(first, 0u);
  Task& t = b.task(0);
  b.outstanding_slices() += 3;
  t.Start(&b, 3, In(10000), 10000, "WRITE");
  t.OnSliceDone(fabric::Slice(), 100, Status::OK());
  t.OnSliceDone(fabric::Slice(), 100, Status::OK());
  EXPECT_EQ(t.Snapshot().state, TaskState::kPending);
  EXPECT_FALSE(t.Abandoned());
  t.OnSliceDone(fabric::Slice(), 56, Status::OK());
  TransferStatus s = t.Snapshot();
  EXPECT_EQ(s.state, TaskState::kCompleted);
  EXPECT_EQ(s.transferred_bytes, 256u);
  EXPECT_EQ(b.outstanding_slices().load(), 0);
  EXPECT_FALSE(b.AllDone());  // task 1 was reserved but never ended
  b.task(1).Start(&b, 0, In(1000), 1000, "x");
  b.task(1).Complete(0, Status::OK());
  EXPECT_TRUE(b.AllDone());
  EXPECT_FALSE(b.Reserve(3, &first));  // only 2 of 4 left
}

TEST(BatchTest, ATaskIsCountedOnceWhenItEnds) {
  Counters c(4);
  PeerCounters* peer = c.ForPeer("p:1");
  Batch b(1, 3);
  size_t first;
  ASSERT_TRUE(b.Reserve(3, &first));
  b.outstanding_slices() += 2;
  b.task(0).Start(&b, 2, In(10000), 10000, "WRITE", nullptr, nullptr, nullptr, {&c, peer, true, 200});
  b.task(0).OnSliceDone(fabric::Slice(), 100, Status::OK());
  EngineStats mid;
  c.Fill(&mid);
  EXPECT_EQ(mid.peers[0].write_requests, 0u) << "counted before its end";
  b.task(0).OnSliceDone(fabric::Slice(), 100, Status::OK());
  // Failed, then timed out: each ends once, under its code.
  b.task(1).Start(&b, 0, In(10000), 10000, "READ", nullptr, nullptr, nullptr, {&c, peer, false, 64});
  b.task(1).Complete(0, Status::NetworkError("peer gone"));
  b.task(1).Complete(0, Status::OK());  // a second end changes nothing
  b.task(2).Start(&b, 1, In(-1), 0, "READ", nullptr, nullptr, nullptr, {&c, peer, false, 64});
  EXPECT_EQ(b.task(2).Snapshot().state, TaskState::kTimeout);
  EXPECT_TRUE(b.task(2).Abandoned());
  EngineStats s;
  c.Fill(&s);
  ASSERT_EQ(s.peers.size(), 1u);
  EXPECT_EQ(s.peers[0].write_requests, 1u);
  EXPECT_EQ(s.peers[0].write_bytes, 200u);
  EXPECT_EQ(s.peers[0].read_requests, 2u);
  EXPECT_EQ(s.peers[0].failures, 2u);
  ASSERT_EQ(s.failures.size(), 2u);
  EXPECT_EQ(s.failures[0].code, "Timeout");
  EXPECT_EQ(s.failures[1].code, "NetworkError");
  ASSERT_EQ(s.latency.size(), 1u);
  EXPECT_EQ(s.latency[0].histogram.count, 1u);
}

// A failed slice fails the task, but only once its other slices are back:
// a READ still in flight would write the buffer of a caller that saw the
// failure and reused it. Its queued slices are dropped meanwhile.
TEST(BatchTest, AFailedSliceFailsTheTaskOnceItsOtherSlicesAreBack) {
  Batch b(1, 1);
  Task& t = StartOnlyTask(b, 2, 10000, "READ from peer");
  t.OnSliceDone(fabric::Slice(), 0, Status::FabricError("EPIPE"));
  EXPECT_EQ(t.Snapshot().state, TaskState::kPending) << "its other slice is still out";
  EXPECT_FALSE(b.AllDone());
  EXPECT_TRUE(t.Abandoned()) << "its queued slices are dropped unposted";
  t.OnSliceDone(fabric::Slice(), 100, Status::OK());
  TransferStatus s = t.Snapshot();
  EXPECT_EQ(s.state, TaskState::kFailed);
  EXPECT_EQ(s.error.code(), Status::Code::kFabricError) << s.error.ToString();
  EXPECT_NE(s.error.message().find("READ from peer"), std::string::npos);
  EXPECT_NE(s.error.message().find("EPIPE"), std::string::npos) << "the first failure, not the slice that came last";
  EXPECT_EQ(b.Aggregate().state, TaskState::kFailed);
  EXPECT_TRUE(b.AllDone());
}

TEST(BatchTest, DeadlineTurnsPendingIntoTimeout) {
  Batch b(1, 1);
  Task& t = StartOnlyTask(b, 1, 50, "WRITE to dead peer");
  auto t0 = Clock::now();
  b.Wait(In(5000));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(1));
  TransferStatus s = t.Snapshot();
  EXPECT_EQ(s.state, TaskState::kTimeout);
  EXPECT_EQ(s.error.code(), Status::Code::kTimeout);
  EXPECT_TRUE(t.Abandoned());
  t.OnSliceDone(fabric::Slice(), 10, Status::OK());  // a late completion changes nothing
  EXPECT_EQ(t.Snapshot().state, TaskState::kTimeout);
}

TEST(BatchTest, WaitWakesOnCompletion) {
  Batch b(1, 1);
  Task& t = StartOnlyTask(b, 1, 60000, "x");
  std::thread th([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    t.OnSliceDone(fabric::Slice(), 1, Status::OK());
  });
  auto t0 = Clock::now();
  b.Wait(In(10000));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(b.Aggregate().state, TaskState::kCompleted);
  th.join();
}

TEST(BatchTest, WaitDeadlineBeyondTheClockMeansNoLimit) {
  // A timeout the clock cannot add (wait(timeout=1e10): now + 10^13 ms in
  // nanoseconds would wrap into the past) means no limit, never "at once".
  const auto now = Clock::now();
  EXPECT_EQ(WaitDeadline(now, -1), Clock::time_point::max());
  EXPECT_EQ(WaitDeadline(now, INT64_MIN), Clock::time_point::max());
  EXPECT_EQ(WaitDeadline(now, INT64_MAX), Clock::time_point::max());
  EXPECT_EQ(WaitDeadline(now, 10'000'000'000'000), Clock::time_point::max());  // 1e10 s
  EXPECT_EQ(WaitDeadline(now, 0), now);
  EXPECT_EQ(WaitDeadline(now, 1500), now + std::chrono::milliseconds(1500));
  const auto year = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::hours(24 * 365)).count();
  EXPECT_EQ(WaitDeadline(now, year), now + std::chrono::milliseconds(year));

  // A pending task and an endless wait: Wait returns when the task ends
  // (here at its 100 ms deadline), not at once.
  Batch b(1, 1);
  Task& t = StartOnlyTask(b, 1, 100, "WRITE to a silent peer");
  const auto t0 = Clock::now();
  b.Wait(WaitDeadline(t0, INT64_MAX));
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(90));
  EXPECT_EQ(t.Snapshot().state, TaskState::kTimeout);
}

// Stands in for the engine: records what it was asked to move and answers
// with a fixed number of replacement slices (0: no other rail).
class FakeRerouter : public Rerouter {
 public:
  explicit FakeRerouter(uint32_t replacements) : replacements_(replacements) {}
  uint32_t Reroute(Task* task, const fabric::Slice& slice, bool failed) override {
    calls.push_back({slice.length, failed});
    const uint32_t n = failed && !failed_move ? 0 : replacements_;
    if (n > 0) task->AddSlices(n);
    if (during_reroute) std::exchange(during_reroute, nullptr)();  // once
    return n;
  }
  bool CanReroute(Task*, const fabric::Slice&) override { return replacements_ > 0; }
  Status Unstage(Task*, const fabric::Slice&, bool) override { return Status::OK(); }
  void CutConnections(Task* task) override {
    ++cuts;
    pending_at_cut = task->pending();
    if (cut_takes_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(cut_takes_ms));
    if (during_cut) during_cut(task);
    cut_done_at = Clock::now();
  }
  std::function<void(Task*)> during_cut;  // runs inside CutConnections (the cut failing the slices out)
  std::string Whereabouts(Task*) override { return whereabouts; }
  std::string whereabouts;  // what Whereabouts says
  bool failed_move = true;  // false: failed slices are not moved (stalled ones are)
  std::function<void()> during_reroute;  // runs inside the next Reroute, after the replacements are added
  int cut_takes_ms = 0;
  Clock::time_point cut_done_at{};
  std::vector<std::pair<size_t, bool>> calls;
  int cuts = 0;
  bool pending_at_cut = false;

 private:
  uint32_t replacements_;
};

fabric::Slice SliceOf(size_t length) {
  fabric::Slice s;
  s.length = length;
  return s;
}

TEST(BatchTest, FailedSliceMovedToAnotherRailDoesNotFailTheTask) {
  Batch b(1, 1);
  FakeRerouter rr(2);  // the bytes come back as two slices on another rail
  Task& t = StartOnlyTask(b, 2, 10000, "WRITE", &rr);
  t.OnSliceDone(SliceOf(100), 0, Status::FabricError("link down"));
  ASSERT_EQ(rr.calls.size(), 1u);
  EXPECT_TRUE(rr.calls[0].second);
  EXPECT_EQ(t.Snapshot().state, TaskState::kPending);
  EXPECT_EQ(b.outstanding_slices().load(), 3);  // 1 original + 2 replacements
  t.OnSliceDone(SliceOf(100), 100, Status::OK());
  t.OnSliceDone(SliceOf(60), 60, Status::OK());
  EXPECT_EQ(t.Snapshot().state, TaskState::kPending);
  t.OnSliceDone(SliceOf(40), 40, Status::OK());
  TransferStatus s = t.Snapshot();
  EXPECT_EQ(s.state, TaskState::kCompleted);
  EXPECT_EQ(s.transferred_bytes, 200u);
  EXPECT_EQ(b.outstanding_slices().load(), 0);
}

TEST(BatchTest, FailedSliceWithNowhereToGoFailsTheTask) {
  Batch b(1, 1);
  FakeRerouter rr(0);
  Task& t = StartOnlyTask(b, 1, 10000, "READ", &rr);
  t.OnSliceDone(SliceOf(100), 0, Status::FabricError("EPIPE"));
  EXPECT_EQ(rr.calls.size(), 1u);
  EXPECT_EQ(t.Snapshot().state, TaskState::kFailed);
  EXPECT_EQ(b.outstanding_slices().load(), 0);
}

TEST(BatchTest, StalledSliceIsReplacedAndForgotten) {
  Batch b(1, 1);
  FakeRerouter rr(1);
  Task& t = StartOnlyTask(b, 1, 10000, "WRITE", &rr);
  EXPECT_TRUE(t.OnSliceStalled(SliceOf(100)));
  ASSERT_EQ(rr.calls.size(), 1u);
  EXPECT_FALSE(rr.calls[0].second);
  // The rail forgets the stalled slice: only the replacement is counted.
  EXPECT_EQ(b.outstanding_slices().load(), 1);
  EXPECT_EQ(t.Snapshot().state, TaskState::kPending);
  t.OnSliceDone(SliceOf(100), 100, Status::OK());
  EXPECT_EQ(t.Snapshot().state, TaskState::kCompleted);
  EXPECT_EQ(b.outstanding_slices().load(), 0);
}

TEST(BatchTest, StalledSliceStaysWhenNoRailCanTakeIt) {
  Batch b(1, 1);
  FakeRerouter none(0);
  Task& t = StartOnlyTask(b, 1, 10000, "WRITE");
  EXPECT_FALSE(t.OnSliceStalled(SliceOf(100)));  // no rerouter at all
  Batch b2(2, 1);
  Task& t2 = StartOnlyTask(b2, 1, 10000, "WRITE", &none);
  EXPECT_FALSE(t2.OnSliceStalled(SliceOf(100)));
  EXPECT_EQ(b2.outstanding_slices().load(), 1);
  EXPECT_EQ(t2.Snapshot().state, TaskState::kPending);
  t.OnSliceDone(SliceOf(100), 100, Status::OK());
  t2.OnSliceDone(SliceOf(100), 100, Status::OK());
  EXPECT_EQ(t2.Snapshot().state, TaskState::kCompleted);
}

// A slice moved off a stalled rail while another slice fails for good and
// the replacement is dropped (the task is failing): the task ends FAILED,
// never COMPLETED, whichever slice leaves last (the stall path included).
TEST(BatchTest, ASliceMovedOffAStalledRailWhileAnotherFailsEndsTheTaskFailed) {
  Batch b(1, 1);
  FakeRerouter rr(1);
  rr.failed_move = false;
  Task& t = StartOnlyTask(b, 2, 10000, "READ", &rr);
  rr.during_reroute = [&] {
    t.OnSliceDone(SliceOf(100), 0, Status::NetworkError("the other slice's peer reset"));  // fails for good
    t.OnSliceDone(SliceOf(100), 0, Status::Timeout("dropped before posting"));          // the replacement
  };
  EXPECT_TRUE(t.OnSliceStalled(SliceOf(100)));
  TransferStatus s = t.Snapshot();
  EXPECT_EQ(s.state, TaskState::kFailed) << s.error.ToString();
  EXPECT_EQ(s.error.code(), Status::Code::kNetworkError) << s.error.ToString();
  EXPECT_EQ(b.outstanding_slices().load(), 0);
}

// What a stalled rail asks before it closes a connection: would this posted
// slice move? Not for a failing, ended or expired task, a staged slice, or
// with no other rail.
TEST(BatchTest, APostedSliceCanMoveOnlyWhileItsTaskWantsItAndAnotherRailTakesIt) {
  Batch b(1, 4);
  FakeRerouter one(1), none(0);
  size_t first;
  ASSERT_TRUE(b.Reserve(4, &first));
  b.outstanding_slices() += 5;
  b.task(0).Start(&b, 2, In(10000), 10000, "READ", nullptr, &one);
  b.task(1).Start(&b, 1, In(10000), 10000, "READ", nullptr, &none);
  b.task(2).Start(&b, 1, In(-1), 0, "READ", nullptr, &one);
  b.task(3).Start(&b, 1, In(10000), 10000, "READ");
  EXPECT_TRUE(b.task(0).CanMove(SliceOf(100)));
  fabric::Slice staged = SliceOf(100);
  staged.owner_tag = 3;
  EXPECT_FALSE(b.task(0).CanMove(staged)) << "a staged slice";
  EXPECT_FALSE(b.task(1).CanMove(SliceOf(100))) << "no other rail";
  EXPECT_FALSE(b.task(2).CanMove(SliceOf(100))) << "past its deadline";
  EXPECT_FALSE(b.task(3).CanMove(SliceOf(100))) << "no rerouter";
  one.failed_move = false;
  b.task(0).OnSliceDone(SliceOf(100), 0, Status::NetworkError("reset"));
  EXPECT_FALSE(b.task(0).CanMove(SliceOf(100))) << "a failing task";
}

// Past its deadline with slices out, a task has its peer's connections cut
// before it says Timeout (once, however many times it is read), so none of
// its slices can write the caller's memory after that. Its slices that end
// later are not moved to other rails.
TEST(BatchTest, ATimeoutCutsTheConnectionsOfItsSlicesFirst) {
  Batch b(1, 1);
  FakeRerouter rr(1);
  Task& t = StartOnlyTask(b, 2, 50, "READ from a stopped peer", &rr);
  EXPECT_FALSE(t.Abandoned());
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  EXPECT_TRUE(t.Abandoned()) << "its queued slices are dropped";
  EXPECT_TRUE(t.pending()) << "Abandoned, asked under a rail's lock, never ends the task (no cut from there)";
  EXPECT_EQ(rr.cuts, 0);
  TransferStatus s = t.Snapshot();
  EXPECT_EQ(s.state, TaskState::kTimeout);
  EXPECT_EQ(rr.cuts, 1);
  EXPECT_TRUE(rr.pending_at_cut) << "cut before the Timeout is visible";
  (void)t.Snapshot();
  EXPECT_EQ(rr.cuts, 1);
  // The cut fails the slices: they end, and none is moved elsewhere.
  t.OnSliceDone(SliceOf(100), 0, Status::NetworkError("connection closed"));
  t.OnSliceDone(SliceOf(100), 0, Status::NetworkError("connection closed"));
  EXPECT_TRUE(rr.calls.empty());
  EXPECT_EQ(t.Snapshot().state, TaskState::kTimeout);
}

// A task failing with a slice that does not come back: at the deadline its
// connections are cut (the slice can land nowhere after that), and the task
// ends with the failure it had, not a Timeout. A failing task moves no slice.
TEST(BatchTest, AFailingTaskWithASliceStuckOutCutsItAtTheDeadlineAndFails) {
  Batch b(1, 1);
  FakeRerouter rr(0);  // no other rail: the first failure stays
  Task& t = StartOnlyTask(b, 3, 60, "READ from a half-dead peer", &rr);
  t.OnSliceDone(SliceOf(100), 0, Status::NetworkError("connection reset"));
  EXPECT_EQ(rr.calls.size(), 1u);
  EXPECT_EQ(t.Snapshot().state, TaskState::kPending);
  EXPECT_FALSE(t.OnSliceStalled(SliceOf(100))) << "a failing task's stalled slices are not moved";
  EXPECT_EQ(rr.calls.size(), 1u);
  t.OnSliceDone(SliceOf(100), 0, Status::Timeout("dropped before posting"));  // Abandoned at the rail
  EXPECT_EQ(rr.calls.size(), 1u) << "a failing task's failed slices are not moved";
  EXPECT_EQ(t.Snapshot().state, TaskState::kPending) << "one slice is still out";
  EXPECT_EQ(rr.cuts, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(90));
  TransferStatus s = t.Snapshot();
  EXPECT_EQ(rr.cuts, 1) << "the stuck slice's connections are cut first";
  EXPECT_TRUE(rr.pending_at_cut);
  EXPECT_EQ(s.state, TaskState::kFailed);
  EXPECT_EQ(s.error.code(), Status::Code::kNetworkError) << s.error.ToString();
  t.OnSliceDone(SliceOf(100), 0, Status::NetworkError("connection closed"));  // the cut fails it
  EXPECT_EQ(t.Snapshot().state, TaskState::kFailed);
  EXPECT_EQ(b.outstanding_slices().load(), 0);
}

// A Timeout says where the slices still out were when the deadline passed
// (before the cut ended them): the rail, posted or waiting, refused posts.
TEST(BatchTest, ATimeoutSaysWhereItsSlicesWere) {
  Batch b(1, 1);
  FakeRerouter rr(0);
  rr.whereabouts = "rail 0: 0 slice(s) posted, 1 waiting to be posted";
  Task& t = StartOnlyTask(b, 1, 20, "READ of 4096 bytes", &rr);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  const TransferStatus s = t.Snapshot();
  EXPECT_EQ(s.state, TaskState::kTimeout);
  EXPECT_NE(s.error.message().find("(KVF_TRANSFER_TIMEOUT_MS) (rail 0: 0 slice(s) posted, 1 waiting to be posted)"),
            std::string::npos)
      << s.error.ToString();
  EXPECT_EQ(rr.cuts, 1);
}

// The cut fails the last slice out, which ends the task then and there
// (SliceLeft, on the thread that reads the completion), before the reader
// that cut: that Timeout says where the slice was too.
TEST(BatchTest, ATimeoutEndedByItsCutSaysWhereItsSlicesWere) {
  Batch b(1, 1);
  FakeRerouter rr(0);
  rr.whereabouts = "rail 0: 1 slice(s) posted, 0 waiting to be posted";
  rr.during_cut = [](Task* t) { t->OnSliceDone(SliceOf(100), 0, Status::NetworkError("connection closed")); };
  Task& t = StartOnlyTask(b, 1, 20, "READ of 4096 bytes", &rr);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  const TransferStatus s = t.Snapshot();
  EXPECT_EQ(s.state, TaskState::kTimeout);
  EXPECT_NE(s.error.message().find("(rail 0: 1 slice(s) posted, 0 waiting to be posted)"), std::string::npos)
      << s.error.ToString();
  EXPECT_EQ(b.outstanding_slices().load(), 0);
}

// A slice dropped unposted past the deadline (the rail saw Abandoned) ends
// the task as a Timeout once it was the last one out: nothing to cut.
TEST(BatchTest, TheLastSliceDroppedPastTheDeadlineEndsTheTaskAsATimeout) {
  Batch b(1, 1);
  FakeRerouter rr(1);
  Task& t = StartOnlyTask(b, 1, 20, "WRITE", &rr);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  ASSERT_TRUE(t.Abandoned());
  t.OnSliceDone(SliceOf(100), 0, Status::Timeout("dropped before posting"));
  EXPECT_FALSE(t.pending()) << "ended by its last slice, before anyone read its status";
  EXPECT_TRUE(rr.calls.empty()) << "not moved to another rail";
  EXPECT_EQ(rr.cuts, 0) << "nothing was out to cut";
  EXPECT_EQ(t.Snapshot().state, TaskState::kTimeout);
  EXPECT_TRUE(b.AllDone());
}

// Two threads read a task past its deadline at once: the second must not
// report the Timeout while the first is still cutting its connections.
TEST(BatchTest, ASecondReaderWaitsForTheCutBeforeTheTimeout) {
  Batch b(1, 1);
  FakeRerouter rr(1);
  rr.cut_takes_ms = 200;
  Task& t = StartOnlyTask(b, 1, 20, "READ", &rr);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  Clock::time_point seen[2];
  std::thread readers[2];
  for (int i = 0; i < 2; ++i)
    readers[i] = std::thread([&, i] {
      while (t.Snapshot().state == TaskState::kPending) {
      }
      seen[i] = Clock::now();
    });
  for (auto& r : readers) r.join();
  EXPECT_EQ(rr.cuts, 1);
  for (int i = 0; i < 2; ++i) EXPECT_GE(seen[i], rr.cut_done_at) << "reader " << i << " saw the Timeout before the cut ended";
}

// ExpirePending ends a started task at once (cut first), and leaves alone
// one reserved by a Submit that has not started it yet.
TEST(BatchTest, ExpirePendingEndsStartedTasksAtOnce) {
  Batch b(1, 2);
  FakeRerouter rr(1);
  Task& t = StartOnlyTask(b, 1, 60000, "READ", &rr);
  size_t reserved;
  ASSERT_TRUE(b.Reserve(1, &reserved));
  b.ExpirePending();
  EXPECT_FALSE(t.pending());
  EXPECT_EQ(t.Snapshot().state, TaskState::kTimeout);
  EXPECT_NE(t.Snapshot().error.ToString().find("ended by its caller"), std::string::npos);
  EXPECT_EQ(rr.cuts, 1);
  EXPECT_TRUE(b.task(reserved).pending()) << "not started: left to its Submit";
}

}  // namespace
}  // namespace kvfabric::engine
