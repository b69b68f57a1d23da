// Batch and Task: the engine's bookkeeping for submitted requests. A task is
// one request; it is split into slices (fabric::Slice) that rails post and
// complete. A task ends once: COMPLETED when all its slices succeed; FAILED
// when a slice failed that no other rail took, but only once none of its
// slices is out any more (a READ still in flight would write the caller's
// buffer after the caller saw the failure and reused it); TIMEOUT when its
// deadline passes first. At the deadline, slices still out have their
// connections cut before the task ends (CheckDeadline), as FAILED if a
// slice had failed before, else TIMEOUT.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engine/counters.h"
#include "engine/peer.h"
#include "fabric/slice.h"
#include "kvfabric/engine.h"

namespace kvfabric::engine {

using Clock = std::chrono::steady_clock;
class Batch;
class NoticeMailer;
class Task;

// The end of a wait of `timeout_ms` from `now`: negative, or further than
// the clock can count (Clock::now() + 2^63 - 1 ms would wrap into the past,
// and the wait would end at once), is time_point::max(): no limit.
inline Clock::time_point WaitDeadline(Clock::time_point now, int64_t timeout_ms) {
  if (timeout_ms < 0) return Clock::time_point::max();
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now);
  if (std::chrono::milliseconds(timeout_ms) >= room) return Clock::time_point::max();
  return now + std::chrono::milliseconds(timeout_ms);
}

// What a task asks of the engine about its slices (the engine implements it).
class Rerouter {
 public:
  virtual ~Rerouter() = default;
  // Moves a slice that failed (`failed`) or stalled on one rail to another
  // rail of the same peer. Returns how many slices it queued there (the bytes
  // may be cut differently), after adding them to the task with AddSlices;
  // 0 when no other rail can take them.
  virtual uint32_t Reroute(Task* task, const fabric::Slice& slice, bool failed) = 0;
  // A slice of `task` that went through a staging slot (owner_tag >= 0)
  // ended: with `copy_back` (a READ that succeeded) its bytes go from the
  // slot to device memory first; the slot is released either way.
  virtual Status Unstage(Task* task, const fabric::Slice& slice, bool copy_back) = 0;
  // Whether Reroute(task, slice, failed=true) would now queue the slice on
  // another rail; queues nothing.
  virtual bool CanReroute(Task* task, const fabric::Slice& slice) = 0;
  // `task` outlived its deadline with slices still out: closes the
  // connections to its peer that carry them, on the rails that can
  // (Rail::CutPeer), so none of them writes local memory after the task
  // says Timeout. Called once per task, before the Timeout, on the thread
  // that found the deadline passed (never under a rail's lock).
  virtual void CutConnections(Task* task) = 0;
  // Where the slices of `task` still out are now (posted, or waiting in a
  // rail's queue, and for how long the provider has refused posts to its
  // peer), for its Timeout message; "" when no rail holds one. Called once
  // per task that times out, before CutConnections.
  virtual std::string Whereabouts(Task* task) = 0;
  // `slice` of `task` completed: the task's next piece not yet posted, if
  // it has one (PiecePlan::up_front), goes to the same rail, its slices
  // added with AddSlices. An error fails the task.
  virtual Status PostNextPiece(Task* task, const fabric::Slice& slice) {
    (void)task;
    (void)slice;
    return Status::OK();
  }
};

// What the engine counts of a task when it ends (Counters::RequestEnded).
// Null counters: nothing is counted (KVF_METRICS=off).
struct TaskTally {
  Counters* counters = nullptr;
  PeerCounters* peer = nullptr;
  bool write = true;
  uint64_t length = 0;  // the request's
};

class Task final : public fabric::SliceOwner {
 public:
  // Tasks belong to their batch from its construction; until Start they are
  // pending with no deadline (reserved by a Submit still being posted).
  void Bind(Batch* batch) { batch_ = batch; }
  // Arms the task before its slices are queued. `what` names the request in
  // error messages (e.g. "WRITE of 1048576 bytes to 10.0.0.2:15000").
  // `peer` (may be null) is marked suspect when the task fails or times out.
  // `rerouter` (may be null) gets slices that fail or stall, and `route`
  // holds what it needs to post them again (the engine's own type).
  // `tally` says what to count when the task ends; its latency runs from here.
  void Start(Batch* batch, uint32_t slices, Clock::time_point deadline, int64_t timeout_ms,
             std::string what, std::shared_ptr<Peer> peer = nullptr, Rerouter* rerouter = nullptr,
             std::shared_ptr<const void> route = nullptr, TaskTally tally = {});
  // Ends the task without slices (local copy, or failure before posting).
  void Complete(size_t bytes, const Status& error);
  // After Start, before its slices are queued: once every slice is back
  // and none failed, the task hands itself to `mailer` to send `notice` to
  // its peer (the segment of `epoch`) instead of completing; it ends when
  // the mailer calls NoticeSent. Its batch is kept (counted as a slice
  // out) until then.
  void MailNotice(NoticeMailer* mailer, uint16_t notice, uint64_t epoch);
  uint16_t mailed_notice() const { return mail_notice_; }
  uint64_t mailed_epoch() const { return mail_epoch_; }
  // The mailer's answer: COMPLETED when the notice was taken, else FAILED
  // with `sent` (unless the task ended meanwhile, by its deadline).
  void NoticeSent(const Status& sent);
  // Ends a pending task now with `error` (engine shutdown): its queued
  // slices are dropped unposted, those in flight are ignored when they return.
  void Abandon(const Status& error) { (void)Finish(TaskState::kFailed, error); }
  // Moves the deadline of a pending task to now: its next status read ends
  // it as TIMEOUT (cutting its connections first, see CheckDeadline).
  bool started() const { return started_.load(); }
  void Expire() {
    expired_early_.store(true);
    // One tick back: Expired() tests "now > deadline".
    const Clock::rep now = Clock::now().time_since_epoch().count() - 1;
    Clock::rep d = deadline_.load();
    while (d > now && !deadline_.compare_exchange_weak(d, now)) {
    }
  }

  void OnSliceDone(const fabric::Slice& slice, size_t bytes, const Status& error) override;
  bool OnSliceStalled(const fabric::Slice& slice) override;
  bool CanMove(const fabric::Slice& slice) override;
  bool Abandoned() override;
  // The rerouter queued `n` more slices for this task.
  void AddSlices(uint32_t n);
  const std::shared_ptr<Peer>& peer() const { return peer_; }
  const std::shared_ptr<const void>& route() const { return route_; }

  // Current status; a pending task past its deadline becomes TIMEOUT here.
  TransferStatus Snapshot();
  bool pending() const { return state_.load() == static_cast<int>(TaskState::kPending); }

 private:
  bool Finish(TaskState terminal, const Status& error);
  bool CheckDeadline();
  // A slice failed for good: the first such error is kept, and the task
  // ends FAILED with it when its last slice is back (or at its deadline).
  void RecordFailure(const Status& error);
  bool FinishFailed();
  // A slice left the task (it ended, or moved elsewhere): the last one to
  // leave ends a task still pending, as its story says (failed_late_,
  // failing_, else COMPLETED).
  void SliceLeft();
  bool Expired() const { return Clock::now().time_since_epoch().count() > deadline_.load(std::memory_order_relaxed); }

  Batch* batch_ = nullptr;
  std::atomic<int> state_{static_cast<int>(TaskState::kPending)};
  std::atomic<uint32_t> slices_left_{0};
  std::atomic<uint64_t> bytes_{0};
  // The deadline in steady-clock ticks (atomic: Expire moves it while
  // other threads read it).
  std::atomic<Clock::rep> deadline_{Clock::time_point::max().time_since_epoch().count()};
  int64_t timeout_ms_ = 0;
  std::mutex mu_;
  Status error_;
  std::string what_;
  std::shared_ptr<Peer> peer_;
  Rerouter* rerouter_ = nullptr;
  std::shared_ptr<const void> route_;
  std::mutex cut_mu_;                     // held while CutConnections runs
  std::atomic<bool> cut_{false};          // Rerouter::CutConnections done
  // Rerouter::Whereabouts, taken before the cut; written once (under
  // cut_mu_), then where_known_ set: readers read it only after that.
  std::string where_;
  std::atomic<bool> where_known_{false};
  std::atomic<bool> failed_late_{false};  // a slice failed past the deadline
  std::atomic<bool> failing_{false};      // a slice failed for good: see RecordFailure
  Status failure_;                        // its error (under mu_)
  std::atomic<bool> expired_early_{false};  // Expire moved the deadline
  std::atomic<bool> started_{false};        // Start has run (ExpirePending skips the others)
  TaskTally tally_;
  int64_t started_ns_ = 0;
  NoticeMailer* mailer_ = nullptr;  // MailNotice
  uint16_t mail_notice_ = 0;
  uint64_t mail_epoch_ = 0;
};

class Batch {
 public:
  Batch(BatchId id, size_t capacity);
  BatchId id() const { return id_; }
  size_t capacity() const { return capacity_; }
  size_t used() const { return used_.load(); }
  Task& task(size_t i) { return tasks_[i]; }

  // Reserves `n` task slots; false when they do not fit.
  bool Reserve(size_t n, size_t* first);
  // Slices handed to rails and not yet returned; the batch's memory must
  // outlive them, so a freed batch with slices out waits as a zombie.
  std::atomic<int64_t>& outstanding_slices() { return outstanding_; }

  bool AllDone();
  // Aggregate over the used tasks (deadlines applied). PENDING until the
  // batch has counted every task's end, so an ended batch can be freed.
  TransferStatus Aggregate();
  // Blocks until every used task has ended or `until` passes; false when
  // CancelWaits ended the wait first (the engine is closing).
  bool Wait(Clock::time_point until);
  // Wakes every Wait now and makes later ones return false at once.
  void CancelWaits();
  // Abandons every pending task (Task::Abandon).
  void AbandonPending(const Status& error);
  // Ends every pending task now as TIMEOUT, as if its deadline had passed
  // (Task::Expire, then its status read: connections cut first).
  void ExpirePending();
  void OnTaskFinished();

 private:
  BatchId id_;
  size_t capacity_;
  std::unique_ptr<Task[]> tasks_;
  std::mutex reserve_mu_;
  std::atomic<size_t> used_{0};
  std::atomic<size_t> finished_{0};
  std::atomic<int64_t> outstanding_{0};
  std::mutex wait_mu_;
  std::condition_variable cv_;
  std::atomic<int> waiters_{0};
  std::atomic<bool> waits_cancelled_{false};
};

}  // namespace kvfabric::engine
