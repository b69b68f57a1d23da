#include "store/batch_runner.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

namespace kvfabric::store {
namespace {

constexpr size_t kNotSubmitted = std::numeric_limits<size_t>::max();

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

void BatchRunner::Run(const std::vector<TransferRequest>& requests,
                      const std::vector<std::pair<size_t, size_t>>& groups, net::Deadline deadline,
                      std::vector<Status>* outcomes) {
  FreeEnded();
  outcomes->assign(groups.size(), Status::OK());
  if (requests.empty()) return;
  BatchId batch = 0;
  if (Status s = engine_->AllocateBatch(requests.size(), &batch); !s.ok()) {
    outcomes->assign(groups.size(), s);
    return;
  }
  std::vector<size_t> first_task;
  SubmitGroups(batch, requests, groups, &first_task, outcomes);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  TransferStatus all;
  (void)engine_->WaitBatch(batch, std::max<int64_t>(0, left.count()), &all);  // tasks are read one by one below
  for (size_t g = 0; g < groups.size(); ++g) {
    if (first_task[g] == kNotSubmitted) continue;
    for (size_t t = 0; t < groups[g].second - groups[g].first; ++t) {
      TransferStatus ts;
      Status s = engine_->GetTaskStatus(batch, first_task[g] + t, &ts);
      if (s.ok()) s = TaskOutcome(ts);
      if (!s.ok()) {
        (*outcomes)[g] = s;
        break;
      }
    }
  }
  FreeOrKeep(batch);
}

Status BatchRunner::Start(const std::vector<TransferRequest>& requests, BatchId* batch) {
  FreeEnded();
  KVF_RETURN_IF_ERROR(engine_->AllocateBatch(requests.size(), batch));
  Status s = engine_->Submit(*batch, requests);
  if (!s.ok()) (void)engine_->FreeBatch(*batch);
  return s;
}

Status BatchRunner::Finish(BatchId batch, size_t count, net::Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  TransferStatus all;
  Status out = engine_->WaitBatch(batch, std::max<int64_t>(0, left.count()), &all);
  if (out.ok() && all.state != TaskState::kCompleted) {
    for (size_t t = 0; t < count && out.ok(); ++t) {
      TransferStatus ts;
      out = engine_->GetTaskStatus(batch, t, &ts);
      if (out.ok()) out = TaskOutcome(ts);
    }
    if (out.ok()) out = TaskOutcome(all);
  }
  FreeOrKeep(batch);
  return out;
}

void BatchRunner::SubmitGroups(BatchId batch, const std::vector<TransferRequest>& requests,
                               const std::vector<std::pair<size_t, size_t>>& groups,
                               std::vector<size_t>* first_task, std::vector<Status>* outcomes) {
  first_task->assign(groups.size(), kNotSubmitted);
  Status whole = engine_->Submit(batch, requests);
  if (whole.ok()) {
    for (size_t g = 0; g < groups.size(); ++g) (*first_task)[g] = groups[g].first;
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
    Status s = engine_->Submit(batch, part);
    if (!s.ok()) {
      (*outcomes)[g] = s;
      continue;
    }
    (*first_task)[g] = next_task;
    next_task += part.size();
  }
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
