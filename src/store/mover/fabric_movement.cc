#include "store/mover/fabric_movement.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace kvfabric::store {
namespace {

// The outcome of one task as a Status.
Status TaskOutcome(const TransferStatus& t) {
  switch (t.state) {
    case TaskState::kCompleted: return Status::OK();
    case TaskState::kPending: return Status::Timeout("transfer not done by the store's deadline (KVF_STORE_DEADLINE_MS)");
    default: return t.error.ok() ? Status::Internal("transfer ended without a cause") : t.error;
  }
}

int64_t MsLeft(net::Deadline until) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
  return std::max<int64_t>(0, left.count());
}

}  // namespace

void BatchKeeper::FreeOrKeep(BatchId batch) {
  if (engine_->FreeBatch(batch).code() != Status::Code::kBusy) return;
  std::lock_guard<std::mutex> g(mu_);
  unfinished_.push_back(batch);
}

void BatchKeeper::FreeEnded() {
  std::lock_guard<std::mutex> g(mu_);
  std::erase_if(unfinished_, [&](BatchId b) { return engine_->FreeBatch(b).code() != Status::Code::kBusy; });
}

bool BatchKeeper::Drain(net::Deadline deadline) {
  for (;;) {
    FreeEnded();
    {
      std::lock_guard<std::mutex> g(mu_);
      if (unfinished_.empty()) return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

FabricMovement::FabricMovement(BatchKeeper* keeper, BatchId batch, size_t groups)
    : keeper_(keeper), engine_(keeper->engine()), batch_(batch), first_task_(groups, kNotSubmitted), tasks_(groups) {}

FabricMovement::~FabricMovement() {
  if (allocated_) keeper_->FreeOrKeep(batch_);
}

std::unique_ptr<FabricMovement> FabricMovement::Start(BatchKeeper* keeper,
                                                      const std::vector<TransferRequest>& requests,
                                                      const std::vector<std::pair<size_t, size_t>>& groups,
                                                      const std::vector<bool>& skip, std::vector<Status>* outcomes) {
  const auto skipped = [&](size_t g) { return !skip.empty() && skip[g]; };
  // The groups sent, as one batch: group g's requests at sent[g].
  std::vector<TransferRequest> batch_requests;
  std::vector<std::pair<size_t, size_t>> sent(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    sent[g] = {batch_requests.size(), batch_requests.size()};
    if (skipped(g)) continue;
    batch_requests.insert(batch_requests.end(), requests.begin() + groups[g].first,
                          requests.begin() + groups[g].second);
    sent[g].second = batch_requests.size();
  }
  if (batch_requests.empty()) return nullptr;
  BatchId batch = 0;
  if (Status s = keeper->engine()->AllocateBatch(batch_requests.size(), &batch); !s.ok()) {
    for (size_t g = 0; g < groups.size(); ++g)
      if (!skipped(g)) (*outcomes)[g] = s;
    return nullptr;
  }
  std::unique_ptr<FabricMovement> m(new FabricMovement(keeper, batch, groups.size()));
  for (size_t g = 0; g < groups.size(); ++g) m->tasks_[g] = sent[g].second - sent[g].first;
  m->Submit(batch_requests, sent, outcomes);
  return m;
}

void FabricMovement::Submit(const std::vector<TransferRequest>& batch_requests,
                            const std::vector<std::pair<size_t, size_t>>& sent, std::vector<Status>* outcomes) {
  Status whole = engine_->Submit(batch_, batch_requests);
  if (whole.ok() || whole.code() == Status::Code::kClosed) {
    for (size_t g = 0; g < sent.size(); ++g) {
      if (sent[g].first == sent[g].second) continue;
      if (whole.ok()) first_task_[g] = sent[g].first;
      else (*outcomes)[g] = whole;
    }
    return;
  }
  // One group's bad memory refused the whole: find it by submitting each alone.
  size_t next_task = 0;
  for (size_t g = 0; g < sent.size(); ++g) {
    const auto [begin, end] = sent[g];
    if (begin == end) continue;
    std::vector<TransferRequest> part(batch_requests.begin() + begin, batch_requests.begin() + end);
    if (Status s = engine_->Submit(batch_, part); !s.ok()) {
      (*outcomes)[g] = s;
      continue;
    }
    first_task_[g] = next_task;
    next_task += part.size();
  }
}

bool FabricMovement::RequestEnded(size_t g, size_t t, Status* failure) const {
  *failure = Status::OK();
  if (!allocated_ || first_task_[g] == kNotSubmitted) return true;
  TransferStatus ts;
  Status s = engine_->GetTaskStatus(batch_, first_task_[g] + t, &ts);
  if (s.ok() && ts.state == TaskState::kPending) return false;
  if (s.ok()) s = TaskOutcome(ts);
  *failure = s;
  return true;
}

bool FabricMovement::GroupEnded(size_t g, Status* failure) const {
  *failure = Status::OK();
  if (!allocated_ || first_task_[g] == kNotSubmitted) return true;
  for (size_t t = 0; t < tasks_[g]; ++t) {
    Status s;
    if (!RequestEnded(g, t, &s)) return false;
    if (!s.ok() && failure->ok()) *failure = s;
  }
  return true;
}

bool FabricMovement::WaitUntil(net::Deadline until) {
  if (!allocated_) return true;
  TransferStatus all;
  Status waited = engine_->WaitBatch(batch_, MsLeft(until), &all);
  return waited.ok() && all.state == TaskState::kCompleted;
}

void FabricMovement::Finish(net::Deadline deadline, std::vector<Status>* outcomes) {
  if (!allocated_) return;
  TransferStatus all;
  Status waited = engine_->WaitBatch(batch_, MsLeft(deadline), &all);
  const bool every_one_completed = waited.ok() && all.state == TaskState::kCompleted;
  // Transfers not done by the call's deadline end here as Timeout, their
  // connections closed first (Engine::ExpireBatch): none of them writes the
  // caller's buffers after the call returns, where the provider allows.
  if (waited.ok() && all.state == TaskState::kPending) (void)engine_->ExpireBatch(batch_);
  for (size_t g = 0; g < first_task_.size() && !every_one_completed; ++g) {
    if (first_task_[g] == kNotSubmitted) continue;
    for (size_t t = 0; t < tasks_[g]; ++t) {
      TransferStatus ts;
      Status s = engine_->GetTaskStatus(batch_, first_task_[g] + t, &ts);
      if (s.ok()) s = TaskOutcome(ts);
      if (!s.ok()) {
        (*outcomes)[g] = s;
        break;
      }
    }
  }
  keeper_->FreeOrKeep(batch_);
  allocated_ = false;
}

}  // namespace kvfabric::store
