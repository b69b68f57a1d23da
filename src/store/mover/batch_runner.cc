#include "store/mover/batch_runner.h"

#include <algorithm>

namespace kvfabric::store {

size_t BatchRunner::Flight::Copied(size_t from_group) const {
  size_t n = 0;
  for (size_t g = from_group; g < copied.size(); ++g) n += copied[g] ? 1 : 0;
  return n;
}

bool BatchRunner::Flight::LandsMeanwhile(size_t g) const {
  return way[g] >= 0 && movements[static_cast<size_t>(way[g])]->LandsMeanwhile(g);
}

bool BatchRunner::Flight::AnyLandsMeanwhile() const {
  for (size_t g = 0; g < way.size(); ++g)
    if (LandsMeanwhile(g)) return true;
  return false;
}

void BatchRunner::Start(const std::vector<TransferRequest>& requests,
                        const std::vector<std::pair<size_t, size_t>>& groups, Flight* flight,
                        std::vector<Status>* outcomes, const std::vector<uint64_t>& copyable,
                        const std::function<void(size_t)>& on_copied, size_t tail) {
  keeper_.FreeEnded();
  *flight = Flight{};
  flight->tasks.resize(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) flight->tasks[g] = groups[g].second - groups[g].first;
  flight->way.assign(groups.size(), -1);
  outcomes->assign(groups.size(), Status::OK());
  if (requests.empty()) return;
  // Copies first: when a tail group goes through the fabric, every copy is
  // made before its READ is posted.
  CopyPlan plan = PlanCopies(requests, groups, copyable, tail);
  std::vector<bool> held;  // groups not sent through the fabric
  if (!plan.empty()) {
    flight->copied.assign(groups.size(), false);
    for (size_t g : plan.in_order) {
      flight->copied[g] = true;
      flight->way[g] = 0;
    }
    held = flight->copied;
    flight->movements.push_back(std::make_unique<CopyMovement>(&copier_, std::move(plan), on_copied));
  }
  HoldBackGone(requests, groups, copyable, &held, outcomes);
  std::unique_ptr<FabricMovement> fabric = FabricMovement::Start(&keeper_, requests, groups, held, outcomes);
  if (fabric == nullptr) return;
  const int way = static_cast<int>(flight->movements.size());
  for (size_t g = 0; g < groups.size(); ++g)
    if (held.empty() || !held[g]) flight->way[g] = way;
  flight->movements.push_back(std::move(fabric));
}

bool BatchRunner::PiecesOf(const std::vector<TransferRequest>& requests, std::pair<size_t, size_t> group,
                           uint64_t epoch, MapCursor* cursor, std::vector<Copier::Piece>* pieces,
                           std::vector<std::shared_ptr<const void>>* keep, bool* writes) const {
  std::shared_ptr<const PoolMap>& map = cursor->map;
  for (size_t r = group.first; r < group.second; ++r) {
    const TransferRequest& q = requests[r];
    if (q.target != cursor->segment) {
      map = maps_->Find(q.target);
      cursor->segment = q.target;
      if (map != nullptr && (keep->empty() || keep->back() != map)) keep->push_back(map);
    }
    uint8_t* at = map == nullptr || map->epoch() != epoch ? nullptr : map->Local(q.remote_addr, q.length);
    if (at == nullptr || (q.opcode != OpCode::kRead && q.opcode != OpCode::kWrite)) return false;
    if (q.opcode == OpCode::kRead) pieces->push_back({q.local, at, q.length});
    else pieces->push_back({at, q.local, q.length});
    *writes = *writes || q.opcode == OpCode::kWrite;
  }
  return true;
}

CopyPlan BatchRunner::PlanCopies(const std::vector<TransferRequest>& requests,
                                 const std::vector<std::pair<size_t, size_t>>& groups,
                                 const std::vector<uint64_t>& copyable, size_t tail) const {
  CopyPlan plan(groups.size());
  if (maps_ == nullptr || copyable.empty()) return plan;
  // In the order of the requests, as a rail would post them (a GET's region
  // versions, last, are read after its pages).
  std::vector<size_t> order(std::min(groups.size(), copyable.size()));
  for (size_t g = 0; g < order.size(); ++g) order[g] = g;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return groups[a].first < groups[b].first; });
  MapCursor cursor;  // groups of one home follow each other: its pool is looked up once
  std::vector<Copier::Piece> pieces;
  for (size_t g : order) {
    if (copyable[g] == kNoCopy || groups[g].first == groups[g].second) continue;
    pieces.clear();
    bool writes = false;
    if (PiecesOf(requests, groups[g], copyable[g], &cursor, &pieces, &plan.keep, &writes)) plan.Add(g, pieces, writes);
  }
  if (plan.empty()) return plan;
  for (size_t t = 0; t < std::min(tail, order.size()); ++t) {
    const size_t g = order[order.size() - 1 - t];
    plan.tail[g] = true;
    plan.tail_through_fabric = plan.tail_through_fabric || (groups[g].first != groups[g].second && !plan.Copies(g));
  }
  return plan;
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

void BatchRunner::Finish(Flight* flight, net::Deadline deadline, std::vector<Status>* outcomes) {
  // Copies first: they end whatever the deadline, and write memory the
  // caller is about to use.
  for (auto& m : flight->movements) m->Finish(deadline, outcomes);
  flight->movements.clear();
  std::fill(flight->way.begin(), flight->way.end(), -1);
}

void BatchRunner::Peek(Flight* flight, net::Deadline until, std::vector<bool>* ended,
                       std::vector<Status>* outcomes) {
  ended->assign(flight->tasks.size(), true);
  for (auto& m : flight->movements) {
    if (m->WaitUntil(until)) continue;  // every group of it ended well
    for (size_t g = 0; g < flight->way.size(); ++g) {
      if (flight->way[g] < 0 || flight->movements[static_cast<size_t>(flight->way[g])].get() != m.get()) continue;
      Status failure;
      (*ended)[g] = m->GroupEnded(g, &failure);
      if (!failure.ok() && (*outcomes)[g].ok()) (*outcomes)[g] = failure;
    }
  }
}

bool BatchRunner::GroupEnded(const Flight& flight, size_t g, Status* failure) const {
  *failure = Status::OK();
  if (flight.way.empty() || flight.way[g] < 0) return true;
  return flight.movements[static_cast<size_t>(flight.way[g])]->GroupEnded(g, failure);
}

bool BatchRunner::RequestEnded(const Flight& flight, size_t g, size_t t, Status* failure) const {
  *failure = Status::OK();
  if (flight.way.empty() || flight.way[g] < 0) return true;
  return flight.movements[static_cast<size_t>(flight.way[g])]->RequestEnded(g, t, failure);
}

void BatchRunner::Run(const std::vector<TransferRequest>& requests,
                      const std::vector<std::pair<size_t, size_t>>& groups, net::Deadline deadline,
                      std::vector<Status>* outcomes) {
  Flight flight;
  Start(requests, groups, &flight, outcomes);
  Finish(&flight, deadline, outcomes);
}

}  // namespace kvfabric::store
