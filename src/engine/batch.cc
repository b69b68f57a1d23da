#include "engine/batch.h"

#include "common/clock.h"
#include "common/text.h"
#include "engine/notice_mailer.h"

namespace kvfabric::engine {


void Task::Start(Batch* batch, uint32_t slices, Clock::time_point deadline, int64_t timeout_ms,
                 std::string what, std::shared_ptr<Peer> peer, Rerouter* rerouter,
                 std::shared_ptr<const void> route, TaskTally tally) {
  tally_ = tally;
  if (tally_.counters != nullptr) started_ns_ = SteadyNowNs();
  peer_ = std::move(peer);
  rerouter_ = rerouter;
  route_ = std::move(route);
  batch_ = batch;
  slices_left_.store(slices);
  bytes_.store(0);
  deadline_.store(deadline.time_since_epoch().count());
  timeout_ms_ = timeout_ms;
  what_ = std::move(what);
  error_ = Status::OK();
  cut_.store(false);
  where_known_.store(false);
  where_.clear();
  failed_late_.store(false);
  failing_.store(false);
  failure_ = Status::OK();
  expired_early_.store(false);
  mailer_ = nullptr;
  mail_notice_ = 0;
  mail_epoch_ = 0;
  state_.store(static_cast<int>(TaskState::kPending));
  started_.store(true);
}

bool Task::Finish(TaskState terminal, const Status& error) {
  {
    // The error is written before the state flips, so readers that see a
    // terminal state also see its error.
    std::lock_guard<std::mutex> g(mu_);
    if (state_.load() != static_cast<int>(TaskState::kPending)) return false;
    error_ = error;
    state_.store(static_cast<int>(terminal));
  }
  // The peer may have died or restarted: its next request refetches its descriptor.
  if (terminal != TaskState::kCompleted && peer_) peer_->MarkSuspect();
  if (tally_.counters != nullptr)
    tally_.counters->RequestEnded(tally_.peer, tally_.write, tally_.length, bytes_.load(std::memory_order_relaxed),
                                  terminal == TaskState::kCompleted ? Status::Code::kOk
                                  : terminal == TaskState::kTimeout ? Status::Code::kTimeout
                                                                    : error.code(),
                                  SteadyNowNs() - started_ns_);
  batch_->OnTaskFinished();
  return true;
}

void Task::RecordFailure(const Status& error) {
  std::lock_guard<std::mutex> g(mu_);
  if (failing_.load()) return;
  failure_ = error;
  failing_.store(true);
}

bool Task::FinishFailed() {
  Status error;
  {
    std::lock_guard<std::mutex> g(mu_);
    error = failure_;
  }
  return Finish(TaskState::kFailed, error);
}

void Task::Complete(size_t bytes, const Status& error) {
  bytes_.fetch_add(bytes);
  Finish(error.ok() ? TaskState::kCompleted : TaskState::kFailed, error);
}

void Task::MailNotice(NoticeMailer* mailer, uint16_t notice, uint64_t epoch) {
  mailer_ = mailer;
  mail_notice_ = notice;
  mail_epoch_ = epoch;
}

void Task::NoticeSent(const Status& sent) {
  Batch* batch = batch_;
  if (sent.ok())
    Finish(TaskState::kCompleted, Status::OK());
  else
    Finish(TaskState::kFailed, sent.Annotate(text::Format("{} landed, but its notice {} did not reach the target",
                                                          what_, mail_notice_)));
  batch->outstanding_slices().fetch_sub(1);
}

bool Task::CheckDeadline() {
  if (!Expired() || !pending()) return false;
  // Slices still out may write local memory when their peer goes on (a
  // stopped process, a link that comes back): their connections close
  // first, so the caller can reuse its buffers once it sees the Timeout.
  // A second reader waits for the first one's cut: it must not report the
  // Timeout while the connections are still open. Never under a rail's
  // lock: with slices out this runs only on the threads that read status.
  // Where the slices were goes into the Timeout's message (taken before
  // the cut, which ends the posted ones). Published before the cut: the
  // cut's last failed slice may end the task on the progress thread
  // (SliceLeft), whose message must carry it too.
  if (rerouter_ != nullptr && slices_left_.load() > 0) {
    std::lock_guard<std::mutex> g(cut_mu_);
    if (!cut_.load()) {
      where_ = rerouter_->Whereabouts(this);
      where_known_.store(true, std::memory_order_release);
      rerouter_->CutConnections(this);
      cut_.store(true);
    }
  }
  // A slice had failed before the deadline: that is the task's end, now
  // that the slices still out can land nowhere.
  if (failing_.load()) return FinishFailed();
  const std::string where =
      where_known_.load(std::memory_order_acquire) && !where_.empty() ? " (" + where_ + ")" : std::string();
  if (expired_early_.load())
    return Finish(TaskState::kTimeout,
                  Status::Timeout(text::Format("{} was ended by its caller before completing (ExpireBatch){}; is the "
                                               "peer alive?",
                                               what_, where)));
  return Finish(TaskState::kTimeout,
                Status::Timeout(text::Format("{} did not complete within {} ms (KVF_TRANSFER_TIMEOUT_MS){}; is the peer "
                                             "alive?",
                                             what_, timeout_ms_, where)));
}

void Task::AddSlices(uint32_t n) {
  slices_left_.fetch_add(n);
  batch_->outstanding_slices().fetch_add(n);
}

bool Task::OnSliceStalled(const fabric::Slice& slice) {
  if (rerouter_ == nullptr || !pending() || failing_.load() || Expired()) return false;
  if (rerouter_->Reroute(this, slice, /*failed=*/false) == 0) return false;
  // The rail forgets the slice: count it as ended (its replacements count
  // now, and may all have ended already, failed or dropped).
  Batch* batch = batch_;
  SliceLeft();
  batch->outstanding_slices().fetch_sub(1);
  return true;
}

bool Task::CanMove(const fabric::Slice& slice) {
  return rerouter_ != nullptr && pending() && !failing_.load() && !Expired() && slice.owner_tag < 0 &&
         rerouter_->CanReroute(this, slice);
}

void Task::SliceLeft() {
  if (slices_left_.fetch_sub(1) != 1) return;
  if (failed_late_.load()) {
    CheckDeadline();  // none out: nothing to cut
  } else if (failing_.load()) {
    FinishFailed();
  } else if (pending() && mailer_ != nullptr) {
    batch_->outstanding_slices().fetch_add(1);  // the notice, until NoticeSent
    mailer_->Send(this);
  } else if (pending()) {
    Finish(TaskState::kCompleted, Status::OK());
  }
}

void Task::OnSliceDone(const fabric::Slice& slice, size_t bytes, const Status& in) {
  Batch* batch = batch_;
  Status error = in;
  if (slice.owner_tag >= 0 && rerouter_ != nullptr) {
    // A READ's bytes are in the staging slot: they reach device memory
    // before the task may complete. Under the task's lock (Finish takes it),
    // and never past the deadline: no copy into the caller's memory may
    // follow the task's Timeout.
    std::lock_guard<std::mutex> g(mu_);
    const bool wanted = error.ok() && !slice.write && pending();
    const bool copy_back = wanted && !Expired();
    Status s = rerouter_->Unstage(this, slice, copy_back);
    if (wanted && !copy_back) s = Status::Timeout("its bytes came after the deadline; not copied to device memory");
    if (error.ok() && !s.ok()) {
      error = s;
      bytes = 0;
    }
  }
  bytes_.fetch_add(bytes);
  // Past the deadline a slice that ends (dropped unposted, or failed) is
  // not moved, and the task's Timeout waits for CheckDeadline, which cuts
  // the slices still out first; when this was the last one, nothing is
  // left to cut.
  const bool expired = pending() && Expired();
  if (expired && !error.ok()) failed_late_.store(true);
  // A failed slice goes to another rail while the task still wants it; only
  // when none can take it does the task fail, and then only once its other
  // slices are back: until then they may still write the caller's memory.
  const bool rerouted = !error.ok() && !expired && rerouter_ != nullptr && pending() && !failing_.load() &&
                        slice.owner_tag < 0 && rerouter_->Reroute(this, slice, /*failed=*/true) > 0;
  if (!error.ok() && !rerouted && !expired && pending()) RecordFailure(error.Annotate(what_));
  // Before this slice leaves: the task must not look finished while
  // pieces of it wait to be posted.
  if (error.ok() && !expired && rerouter_ != nullptr && pending() && !failing_.load()) {
    const Status next = rerouter_->PostNextPiece(this, slice);
    if (!next.ok()) RecordFailure(next.Annotate(what_));
  }
  SliceLeft();
  // Last touch of the batch: after this a freed batch may be released.
  batch->outstanding_slices().fetch_sub(1);
}

bool Task::Abandoned() {
  // No Timeout from here: the rail asks under its post lock, and a Timeout
  // may first cut connections (CheckDeadline), which takes that lock. A
  // failing task's queued slices are dropped: it ends when they are back.
  return !pending() || failing_.load() || Expired();
}

TransferStatus Task::Snapshot() {
  TransferStatus s;
  // Pending, there is no error to copy: no lock, so a caller that polls
  // its tasks (the store checksums pages as they land) does not take it
  // against the progress thread finishing them.
  if (pending() && !CheckDeadline() && pending()) {
    s.state = TaskState::kPending;
    s.transferred_bytes = bytes_.load();
    return s;
  }
  std::lock_guard<std::mutex> g(mu_);
  s.state = static_cast<TaskState>(state_.load());
  s.transferred_bytes = bytes_.load();
  s.error = error_;
  return s;
}

Batch::Batch(BatchId id, size_t capacity)
    : id_(id), capacity_(capacity), tasks_(new Task[capacity]) {
  for (size_t i = 0; i < capacity; ++i) tasks_[i].Bind(this);
}

bool Batch::Reserve(size_t n, size_t* first) {
  std::lock_guard<std::mutex> g(reserve_mu_);
  size_t u = used_.load();
  if (n > capacity_ - u) return false;
  *first = u;
  used_.store(u + n);
  return true;
}

void Batch::OnTaskFinished() {
  // Wake waiters once, when the last task ends, not at every task: a wake-up
  // per request costs a futex call and a context switch each, enough to slow
  // tcp writes measurably. Deadlines need no wake-up: waiters
  // check them every 10 ms.
  const size_t finished = finished_.fetch_add(1) + 1;
  if (finished >= used_.load() && waiters_.load() > 0) {
    std::lock_guard<std::mutex> g(wait_mu_);
    cv_.notify_all();
  }
}

bool Batch::AllDone() {
  size_t used = used_.load();
  if (finished_.load() >= used) return true;
  for (size_t i = 0; i < used; ++i)
    if (tasks_[i].pending()) tasks_[i].Snapshot();  // applies deadlines
  return finished_.load() >= used;
}

TransferStatus Batch::Aggregate() {
  TransferStatus agg;
  agg.state = TaskState::kCompleted;
  bool pending = false;
  size_t used = used_.load();
  for (size_t i = 0; i < used; ++i) {
    TransferStatus s = tasks_[i].Snapshot();
    agg.transferred_bytes += s.transferred_bytes;
    if (s.state == TaskState::kPending) pending = true;
    else if (s.state != TaskState::kCompleted && agg.state == TaskState::kCompleted) {
      agg.state = s.state;
      agg.error = s.error;
    }
  }
  // A task's state flips before the batch counts it (Task::Finish): until the
  // count catches up the batch is still pending, so a caller that sees it
  // ended can always free it (FreeBatch checks the count).
  if (pending || finished_.load() < used) agg.state = TaskState::kPending;
  return agg;
}

bool Batch::Wait(Clock::time_point until) {
  // Deadlines are checked at least every 10 ms while waiting.
  while (!AllDone() && Clock::now() < until) {
    if (waits_cancelled_.load()) return false;
    waiters_.fetch_add(1);
    {
      std::unique_lock<std::mutex> g(wait_mu_);
      if (finished_.load() < used_.load() && !waits_cancelled_.load()) {
        auto next = std::min(until, Clock::now() + std::chrono::milliseconds(10));
        cv_.wait_until(g, next);
      }
    }
    waiters_.fetch_sub(1);
  }
  return true;
}

void Batch::AbandonPending(const Status& error) {
  const size_t used = used_.load();
  for (size_t i = 0; i < used; ++i)
    if (tasks_[i].pending()) tasks_[i].Abandon(error);
}

void Batch::ExpirePending() {
  const size_t used = used_.load();
  for (size_t i = 0; i < used; ++i)
    if (tasks_[i].started() && tasks_[i].pending()) {
      tasks_[i].Expire();
      (void)tasks_[i].Snapshot();
    }
}

void Batch::CancelWaits() {
  std::lock_guard<std::mutex> g(wait_mu_);
  waits_cancelled_.store(true);
  cv_.notify_all();
}

}  // namespace kvfabric::engine
