#include "store/batch_runner.h"

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

}  // namespace

BatchRunner::~BatchRunner() { FreeEnded(); }

void BatchRunner::Start(const std::vector<TransferRequest>& requests,
                        const std::vector<std::pair<size_t, size_t>>& groups, Flight* flight,
                        std::vector<Status>* outcomes) {
  FreeEnded();
  *flight = Flight{};
  flight->first_task.assign(groups.size(), kNotSubmitted);
  flight->tasks.resize(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) flight->tasks[g] = groups[g].second - groups[g].first;
  outcomes->assign(groups.size(), Status::OK());
  if (requests.empty()) return;
  if (Status s = engine_->AllocateBatch(requests.size(), &flight->batch); !s.ok()) {
    outcomes->assign(groups.size(), s);
    return;
  }
  flight->allocated = true;
  Status whole = engine_->Submit(flight->batch, requests);
  if (whole.ok()) {
    for (size_t g = 0; g < groups.size(); ++g) flight->first_task[g] = groups[g].first;
    return;
  }
  if (whole.code() == Status::Code::kClosed) {
    outcomes->assign(groups.size(), whole);
    return;
  }
  // One group's bad memory refused the whole: find it by submitting each alone.
  size_t next_task = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto [begin, end] = groups[g];
    if (begin == end) continue;
    std::vector<TransferRequest> part(requests.begin() + begin, requests.begin() + end);
    if (Status s = engine_->Submit(flight->batch, part); !s.ok()) {
      (*outcomes)[g] = s;
      continue;
    }
    flight->first_task[g] = next_task;
    next_task += part.size();
  }
}

void BatchRunner::Finish(Flight* flight, net::Deadline deadline, std::vector<Status>* outcomes) {
  if (!flight->allocated) return;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  TransferStatus all;
  Status waited = engine_->WaitBatch(flight->batch, std::max<int64_t>(0, left.count()), &all);
  const bool every_one_completed = waited.ok() && all.state == TaskState::kCompleted;
  // Transfers not done by the call's deadline end here as Timeout, their
  // connections closed first (Engine::ExpireBatch): none of them writes the
  // caller's buffers after the call returns, where the provider allows.
  if (waited.ok() && all.state == TaskState::kPending) (void)engine_->ExpireBatch(flight->batch);
  for (size_t g = 0; g < flight->first_task.size() && !every_one_completed; ++g) {
    if (flight->first_task[g] == kNotSubmitted) continue;
    for (size_t t = 0; t < flight->tasks[g]; ++t) {
      TransferStatus ts;
      Status s = engine_->GetTaskStatus(flight->batch, flight->first_task[g] + t, &ts);
      if (s.ok()) s = TaskOutcome(ts);
      if (!s.ok()) {
        (*outcomes)[g] = s;
        break;
      }
    }
  }
  FreeOrKeep(flight->batch);
  flight->allocated = false;
}

void BatchRunner::Peek(Flight* flight, net::Deadline until, std::vector<bool>* ended,
                       std::vector<Status>* outcomes) {
  ended->assign(flight->first_task.size(), true);
  if (!flight->allocated) return;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
  TransferStatus all;
  Status waited = engine_->WaitBatch(flight->batch, std::max<int64_t>(0, left.count()), &all);
  if (waited.ok() && all.state == TaskState::kCompleted) return;  // every group ended well
  for (size_t g = 0; g < flight->first_task.size(); ++g) {
    if (flight->first_task[g] == kNotSubmitted) continue;
    Status failure;
    (*ended)[g] = GroupEnded(*flight, g, &failure);
    if (!failure.ok() && (*outcomes)[g].ok()) (*outcomes)[g] = failure;
  }
}

bool BatchRunner::GroupEnded(const Flight& flight, size_t g, Status* failure) const {
  *failure = Status::OK();
  if (!flight.allocated || flight.first_task[g] == kNotSubmitted) return true;
  for (size_t t = 0; t < flight.tasks[g]; ++t) {
    Status s;
    if (!RequestEnded(flight, g, t, &s)) return false;
    if (!s.ok() && failure->ok()) *failure = s;
  }
  return true;
}

bool BatchRunner::RequestEnded(const Flight& flight, size_t g, size_t t, Status* failure) const {
  *failure = Status::OK();
  if (!flight.allocated || flight.first_task[g] == kNotSubmitted) return true;
  TransferStatus ts;
  Status s = engine_->GetTaskStatus(flight.batch, flight.first_task[g] + t, &ts);
  if (s.ok() && ts.state == TaskState::kPending) return false;
  if (s.ok()) s = TaskOutcome(ts);
  *failure = s;
  return true;
}

void BatchRunner::Run(const std::vector<TransferRequest>& requests,
                      const std::vector<std::pair<size_t, size_t>>& groups, net::Deadline deadline,
                      std::vector<Status>* outcomes) {
  Flight flight;
  Start(requests, groups, &flight, outcomes);
  Finish(&flight, deadline, outcomes);
}

bool BatchRunner::Drain(net::Deadline deadline) {
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

void BatchRunner::FreeOrKeep(BatchId batch) {
  if (engine_->FreeBatch(batch).code() != Status::Code::kBusy) return;
  std::lock_guard<std::mutex> g(mu_);
  unfinished_.push_back(batch);
}

void BatchRunner::FreeEnded() {
  std::lock_guard<std::mutex> g(mu_);
  std::erase_if(unfinished_, [&](BatchId b) { return engine_->FreeBatch(b).code() != Status::Code::kBusy; });
}

}  // namespace kvfabric::store
