#include "store/mover/batch_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
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
                        std::vector<Status>* outcomes, const std::vector<uint64_t>& copyable,
                        const std::function<void(size_t)>& on_copied, size_t tail) {
  FreeEnded();
  *flight = Flight{};
  flight->first_task.assign(groups.size(), kNotSubmitted);
  flight->tasks.resize(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) flight->tasks[g] = groups[g].second - groups[g].first;
  outcomes->assign(groups.size(), Status::OK());
  if (requests.empty()) return;
  CopyMapped(requests, groups, copyable, flight, on_copied, tail);
  // Groups not sent: those copied, and those for a same-host pool whose
  // node stopped serving it, failed at once.
  std::vector<bool> copied = flight->copied;
  HoldBackGone(requests, groups, copyable, &copied, outcomes);
  // The others, as one engine batch: group g's requests at sent[g].first.
  std::vector<TransferRequest> rest;
  const std::vector<TransferRequest>* batch = &requests;
  std::vector<std::pair<size_t, size_t>> sent = groups;
  if (!copied.empty()) {
    for (size_t g = 0; g < groups.size(); ++g) {
      if (copied[g]) {
        sent[g] = {rest.size(), rest.size()};
        continue;
      }
      sent[g].first = rest.size();
      rest.insert(rest.end(), requests.begin() + groups[g].first, requests.begin() + groups[g].second);
      sent[g].second = rest.size();
    }
    if (rest.empty()) return;
    batch = &rest;
  }
  if (Status s = engine_->AllocateBatch(batch->size(), &flight->batch); !s.ok()) {
    for (size_t g = 0; g < groups.size(); ++g)
      if (copied.empty() || !copied[g]) (*outcomes)[g] = s;
    return;
  }
  flight->allocated = true;
  Status whole = engine_->Submit(flight->batch, *batch);
  if (whole.ok()) {
    for (size_t g = 0; g < groups.size(); ++g)
      if (copied.empty() || !copied[g]) flight->first_task[g] = sent[g].first;
    return;
  }
  if (whole.code() == Status::Code::kClosed) {
    for (size_t g = 0; g < groups.size(); ++g)
      if (copied.empty() || !copied[g]) (*outcomes)[g] = whole;
    return;
  }
  // One group's bad memory refused the whole: find it by submitting each alone.
  size_t next_task = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto [begin, end] = sent[g];
    if (begin == end) continue;
    std::vector<TransferRequest> part(batch->begin() + begin, batch->begin() + end);
    if (Status s = engine_->Submit(flight->batch, part); !s.ok()) {
      (*outcomes)[g] = s;
      continue;
    }
    flight->first_task[g] = next_task;
    next_task += part.size();
  }
}

void BatchRunner::CopyMapped(const std::vector<TransferRequest>& requests,
                             const std::vector<std::pair<size_t, size_t>>& groups,
                             const std::vector<uint64_t>& copyable, Flight* flight,
                             const std::function<void(size_t)>& on_copied, size_t tail) {
  if (maps_ == nullptr || copyable.empty()) return;
  SegmentHandle last = -1;
  std::shared_ptr<const PoolMap> map;
  std::vector<Copier::Piece> pieces;
  std::vector<std::shared_ptr<const void>> keep;  // the mappings the pieces are in
  size_t bytes = 0;
  bool writes = false;
  size_t largest = 0;
  std::vector<size_t> in_order;  // the groups copied, in the order of their pieces
  // In the order of the requests, as a rail would post them (a GET's region
  // versions, last, are read after its pages).
  std::vector<size_t> order(std::min(groups.size(), copyable.size()));
  for (size_t g = 0; g < order.size(); ++g) order[g] = g;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return groups[a].first < groups[b].first; });
  for (size_t g : order) {
    const auto [begin, end] = groups[g];
    if (copyable[g] == kNoCopy || begin == end) continue;
    const size_t first = pieces.size();
    size_t group_bytes = 0;
    bool group_writes = false;
    for (size_t r = begin; r < end; ++r) {
      const TransferRequest& q = requests[r];
      if (q.target != last) {
        map = maps_->Find(q.target);
        last = q.target;
        if (map != nullptr && (keep.empty() || keep.back() != map)) keep.push_back(map);
      }
      uint8_t* at = map == nullptr || map->epoch() != copyable[g] ? nullptr : map->Local(q.remote_addr, q.length);
      if (at == nullptr || (q.opcode != OpCode::kRead && q.opcode != OpCode::kWrite)) break;
      if (q.opcode == OpCode::kRead) pieces.push_back({q.local, at, q.length});
      else pieces.push_back({at, q.local, q.length});
      group_writes = group_writes || q.opcode == OpCode::kWrite;
      group_bytes += q.length;
    }
    if (pieces.size() - first != end - begin) {  // not all of it: the fabric's
      pieces.resize(first);
      continue;
    }
    bytes += group_bytes;
    writes = writes || group_writes;
    if (flight->copied.empty()) {
      flight->copied.assign(groups.size(), false);
      flight->first_copy.assign(groups.size(), 0);
    }
    flight->copied[g] = true;
    flight->first_copy[g] = first;
    in_order.push_back(g);
    largest = std::max(largest, group_bytes);
  }
  if (pieces.empty()) return;
  // The tail groups: copied after all the others (the Copier's wait at its
  // gate), or, if one goes through the fabric (submitted once this returns),
  // everything is copied here first.
  std::vector<bool> is_tail(groups.size(), false);
  bool tail_copied = true;
  for (size_t t = 0; t < std::min(tail, order.size()); ++t) {
    const size_t g = order[order.size() - 1 - t];
    is_tail[g] = true;
    tail_copied = tail_copied && (groups[g].first == groups[g].second || flight->copied[g]);
  }
  // A Copier busy with another thread's flight would make this one wait
  // behind it: the caller copies its own then. (Measured, PUT, 4 client
  // threads, 3 nodes, 128 KiB pages, batch 32, alternating with all on the
  // Copier: shm 5.50 -> 6.00 GB/s, tcp 5.62 -> 6.00, medians of 4 and 3
  // runs; one thread and 4-thread GETs unchanged.)
  const bool copier_free = tail_copied && !copier_.Busy();
  if (copier_free && CopyOnThread(writes, bytes, largest)) {
    flight->copies.job = copier_.Start(std::move(pieces), std::move(keep));
    return;
  }
  // Here: the first groups, up to HereShare(bytes), by this thread; the
  // rest at the same time by the Copier.
  const size_t here = copier_free ? HereShare(bytes) : bytes;
  size_t split = 0, done_here = 0;
  while (split < in_order.size() && done_here < here) {
    const size_t g = in_order[split++];
    for (size_t p = flight->first_copy[g]; p < flight->first_copy[g] + flight->tasks[g]; ++p)
      done_here += pieces[p].length;
  }
  // The tail groups (a GET's region versions) wait on the Copier for the
  // caller's copies: they are read after every page, as a rail reads them.
  if (split < in_order.size()) {
    std::vector<Copier::Piece> rest;
    size_t gate = SIZE_MAX;
    for (size_t k = split; k < in_order.size(); ++k) {
      const size_t g = in_order[k];
      const size_t from = flight->first_copy[g];
      flight->first_copy[g] = rest.size();
      if (is_tail[g] && split > 0 && gate == SIZE_MAX) gate = rest.size();
      rest.insert(rest.end(), pieces.begin() + from, pieces.begin() + from + flight->tasks[g]);
    }
    flight->copies.job = copier_.Start(std::move(rest), keep, gate);
  }
  for (size_t k = 0; k < split; ++k) {
    const size_t g = in_order[k];
    for (size_t p = flight->first_copy[g]; p < flight->first_copy[g] + flight->tasks[g]; ++p) {
      std::memcpy(pieces[p].to, pieces[p].from, pieces[p].length);
      std::atomic_thread_fence(std::memory_order_acquire);  // this piece read before the next one
    }
    flight->first_copy[g] = kCopiedHere;
    if (k + 1 == split && flight->copies.job) flight->copies.job->Open();
    if (on_copied) on_copied(g);
  }
}

void BatchRunner::HoldBackGone(const std::vector<TransferRequest>& requests,
                               const std::vector<std::pair<size_t, size_t>>& groups,
                               const std::vector<uint64_t>& copyable, std::vector<bool>* held,
                               std::vector<Status>* outcomes) const {
  if (maps_ == nullptr) return;
  for (size_t g = 0; g < std::min(groups.size(), copyable.size()); ++g) {
    if (copyable[g] == kNoCopy || groups[g].first == groups[g].second || (!held->empty() && (*held)[g])) continue;
    if (!maps_->Gone(requests[groups[g].first].target, copyable[g])) continue;
    if (held->empty()) held->assign(groups.size(), false);
    (*held)[g] = true;
    // NetworkError, as a READ of the node's engine would fail: the member
    // is marked down and greeted again (it may have restarted).
    (*outcomes)[g] = Status::NetworkError(
        "store: the node's pool on this host is no longer served (its process ended, or the node stopped)");
  }
}

bool BatchRunner::CopiedGroupEnded(const Flight& flight, size_t g, size_t pieces) {
  return flight.copies.job == nullptr || flight.first_copy[g] == kCopiedHere ||
         flight.copies.job->done() >= flight.first_copy[g] + pieces;
}

void BatchRunner::Finish(Flight* flight, net::Deadline deadline, std::vector<Status>* outcomes) {
  if (flight->copies.job) {  // copies end, whatever the deadline: they write memory the caller is about to use
    flight->copies.job->Wait();
    flight->copies.job = nullptr;
  }
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
  if (flight->copies.job && !flight->copies.job->WaitUntil(until))
    for (size_t g = 0; g < flight->copied.size(); ++g)
      if (flight->copied[g]) (*ended)[g] = CopiedGroupEnded(*flight, g, flight->tasks[g]);
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
  if (!flight.copied.empty() && flight.copied[g]) return CopiedGroupEnded(flight, g, flight.tasks[g]);
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
  if (!flight.copied.empty() && flight.copied[g]) return CopiedGroupEnded(flight, g, t + 1);
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
