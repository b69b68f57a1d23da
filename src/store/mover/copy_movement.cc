#include "store/mover/copy_movement.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace kvfabric::store {

bool CopyOnThread(bool writes, size_t bytes, size_t largest) {
  return bytes >= kCopyHereBytes && (writes || largest > kCopyHereGroupBytes);
}

size_t HereShare(size_t bytes) { return bytes < kSplitBytes ? bytes : bytes / 2; }

void CopyPlan::Add(size_t g, const std::vector<Copier::Piece>& group, bool group_writes) {
  first[g] = pieces.size();
  count[g] = group.size();
  size_t group_bytes = 0;
  for (const Copier::Piece& p : group) group_bytes += p.length;
  pieces.insert(pieces.end(), group.begin(), group.end());
  in_order.push_back(g);
  bytes += group_bytes;
  largest = std::max(largest, group_bytes);
  writes = writes || group_writes;
}

CopyMovement::CopyMovement(Copier* copier, CopyPlan plan, const std::function<void(size_t)>& copied)
    : first_(plan.first.size(), kCopiedHere), count_(plan.count) {
  const bool copier_free = !plan.tail_through_fabric && !copier->Busy();
  if (copier_free && CopyOnThread(plan.writes, plan.bytes, plan.largest)) {
    for (size_t g : plan.in_order) first_[g] = plan.first[g];
    job_ = copier->Start(std::move(plan.pieces), std::move(plan.keep));
    return;
  }
  // Here: the first groups, up to HereShare(bytes), by this thread; the
  // rest at the same time by the Copier.
  const size_t here = copier_free ? HereShare(plan.bytes) : plan.bytes;
  size_t split = 0, done_here = 0;
  while (split < plan.in_order.size() && done_here < here) {
    const size_t g = plan.in_order[split++];
    for (size_t p = plan.first[g]; p < plan.first[g] + plan.count[g]; ++p) done_here += plan.pieces[p].length;
  }
  // The tail groups (a GET's region versions) wait on the Copier for the
  // caller's copies: they are read after every page, as a rail reads them.
  if (split < plan.in_order.size()) {
    std::vector<Copier::Piece> rest;
    size_t gate = SIZE_MAX;
    for (size_t k = split; k < plan.in_order.size(); ++k) {
      const size_t g = plan.in_order[k];
      first_[g] = rest.size();
      if (plan.tail[g] && split > 0 && gate == SIZE_MAX) gate = rest.size();
      rest.insert(rest.end(), plan.pieces.begin() + plan.first[g],
                  plan.pieces.begin() + plan.first[g] + plan.count[g]);
    }
    job_ = copier->Start(std::move(rest), plan.keep, gate);
  }
  CopyHere(plan, split, copied);
}

void CopyMovement::CopyHere(const CopyPlan& plan, size_t split, const std::function<void(size_t)>& copied) {
  for (size_t k = 0; k < split; ++k) {
    const size_t g = plan.in_order[k];
    for (size_t p = plan.first[g]; p < plan.first[g] + plan.count[g]; ++p) {
      std::memcpy(plan.pieces[p].to, plan.pieces[p].from, plan.pieces[p].length);
      std::atomic_thread_fence(std::memory_order_acquire);  // this piece read before the next one
    }
    if (k + 1 == split && job_) job_->Open();
    if (copied) copied(g);
  }
}

CopyMovement::~CopyMovement() {
  if (job_) job_->Wait();
}

bool CopyMovement::Copied(size_t g, size_t pieces) const {
  return job_ == nullptr || first_[g] == kCopiedHere || job_->done() >= first_[g] + pieces;
}

bool CopyMovement::RequestEnded(size_t g, size_t t, Status* failure) const {
  *failure = Status::OK();
  return Copied(g, t + 1);
}

bool CopyMovement::GroupEnded(size_t g, Status* failure) const {
  *failure = Status::OK();
  return Copied(g, count_[g]);
}

bool CopyMovement::WaitUntil(net::Deadline until) { return job_ == nullptr || job_->WaitUntil(until); }

void CopyMovement::Finish(net::Deadline, std::vector<Status>*) {
  if (job_) job_->Wait();
  job_ = nullptr;
}

}  // namespace kvfabric::store
