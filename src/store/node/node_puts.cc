// NodeService: the PUT path. A PUT by WRITE reserves slots (ReserveSlots,
// or slots granted ahead: GrantSlots) and commits what the writer wrote
// (TakeCommit, FinishCommit); a PUT by READ reserves its slots and READs
// the writer's buffers on a put thread (StartPut, FinishPut). Slots whose
// writer's budget has passed are abandoned (AbandonExpired).
#include <algorithm>
#include <chrono>
#include <utility>

#include "common/log.h"
#include "common/text.h"
#include "store/node/node_service.h"
#include "store/wire/checksum.h"

namespace kvfabric::store {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

void NodeService::Queue(PutJob job, size_t bytes, bool needs_open) {
  if (!puts_.Push(std::move(job), bytes, needs_open)) DropPut(&job);  // stopping: Push took nothing
}

std::chrono::steady_clock::duration NodeService::PushHold() const {
  return std::chrono::milliseconds(settings_.transfer_timeout_ms + settings_.store_deadline_ms);
}

void NodeService::AbandonExpired(Clock::time_point now) {
  for (const Reservations::Entry& e : reservations_.TakeExpired(now)) {
    for (const Reservations::Slot& slot : e.slots) {
      if (!slot.reserved) continue;
      table_.Abandon(slot.offset, now, PushHold());
      if (!slot.key.empty()) ++counters_.put_failures;  // a granted slot left unused is no failed put
    }
  }
}

std::string NodeService::ReserveSlots(uint64_t connection, std::string_view payload, Status* status) {
  ReserveRequest request;
  *status = DecodeReserve(payload, &request);
  if (!status->ok()) return {};
  const size_t n = request.items.size();
  Slots slots;
  slots.epoch = info_.epoch;
  slots.statuses.assign(n, Status::OK());
  slots.addrs.assign(n, 0);
  std::vector<Reservations::Slot> held(n);
  bool any = false;
  const auto now = Clock::now();
  std::lock_guard<std::mutex> g(table_mu_);
  AbandonExpired(now);
  counters_.puts += n;
  for (size_t i = 0; i < n; ++i) {
    const ReserveItem& item = request.items[i];
    Reservations::Slot& slot = held[i];
    Status& r = slots.statuses[i];
    r = CheckKey(item.key);
    if (r.ok()) r = CheckPageLength(item.key, item.length);
    if (r.ok()) r = table_.Reserve(item.length, now, &slot.offset);
    if (!r.ok()) {
      ++counters_.put_failures;
      continue;
    }
    slot.key = item.key;
    slot.length = item.length;
    slot.reserved = true;
    slots.addrs[i] = info_.pool_addr + slot.offset;
    any = true;
  }
  // The writer gives up on the commit's reply at its budget; the slots are
  // abandoned a little after that (a commit on its way is not cut short).
  const auto budget = std::chrono::milliseconds(std::min<int64_t>(request.budget_ms, settings_.store_deadline_ms));
  if (any) slots.ticket = reservations_.Open(std::move(held), now + budget + std::chrono::seconds(1), connection);
  return EncodeSlots(slots);
}

void NodeService::TakeCommit(uint64_t connection, std::string_view payload, ControlServer::Reply reply) {
  CommitRequest request;
  if (Status s = DecodeCommit(payload, &request); !s.ok()) return reply(s, {});
  PutJob job;
  job.commit = true;
  {
    const auto now = Clock::now();
    std::lock_guard<std::mutex> g(table_mu_);
    AbandonExpired(now);
    // Only the connection that reserved the slots commits them: another
    // one's ticket is answered as if there were none, and stays its owner's.
    if (!reservations_.Take(request.ticket, connection, &job.reservation))
      // NotFound, not Timeout: the node answered, and must not be taken
      // for unreachable.
      return reply(Status::NotFound("store node " + address_ + ": no reservation " + std::to_string(request.ticket) +
                                    " on this connection (its writer's budget passed, its connection broke, or the "
                                    "node restarted): the put failed"),
                   {});
    if (request.items.size() != job.reservation.slots.size()) {
      for (const Reservations::Slot& slot : job.reservation.slots)
        if (slot.reserved) table_.Abandon(slot.offset, now, PushHold());
      return reply(Status::ProtocolError("store: a commit of " + std::to_string(request.items.size()) +
                                         " items for a reservation of " +
                                         std::to_string(job.reservation.slots.size())),
                   {});
    }
  }
  job.commit_items = std::move(request.items);
  job.grant = std::move(request.grant);
  job.reply = std::move(reply);
  const bool sums_needed = std::any_of(job.commit_items.begin(), job.commit_items.end(),
                                       [](const CommitItem& item) { return item.written() && !item.has_checksum; });
  if (sums_needed) return Queue(std::move(job), 0, false);
  job.reply(Status::OK(), EncodeCommitReply(FinishCommit(&job)));
}

CommitReply NodeService::FinishCommit(PutJob* job) {
  std::vector<Reservations::Slot>& slots = job->reservation.slots;
  const size_t n = slots.size();
  CommitReply reply;
  reply.statuses.assign(n, Status::OK());
  reply.pages.assign(n, Location{});
  // A granted slot's page is named by the commit; its key is checked as a
  // reserve checks one.
  const bool granted = job->reservation.granted;
  for (size_t i = 0; granted && i < n; ++i) {
    CommitItem& item = job->commit_items[i];
    if (!slots[i].reserved) continue;
    if (Status s = item.written() ? CheckKey(item.key) : Status::OK(); !s.ok()) {
      reply.statuses[i] = s;
      item.state = CommitState::kNotWritten;  // its slot is held back like any page not committed
    }
    slots[i].key = std::move(item.key);
  }
  std::vector<Checksum> sums(n);
  for (size_t i = 0; i < n; ++i) {
    const CommitItem& item = job->commit_items[i];
    if (!slots[i].reserved || !item.written()) continue;
    sums[i] = item.has_checksum ? item.checksum : ChecksumOfBytes(pool_ + slots[i].offset, slots[i].length);
  }
  const auto now = Clock::now();
  std::lock_guard<std::mutex> g(table_mu_);
  const uint64_t first_committed = table_.next_generation();
  for (size_t i = 0; i < n; ++i) {
    const CommitState state = job->commit_items[i].state;
    if (granted && !slots[i].key.empty()) ++counters_.puts;  // a reserve counts its puts as it reserves
    if (!slots[i].reserved) {
      reply.statuses[i] = Status::Unavailable("store: no slot was reserved for '" + slots[i].key + "'");
    } else if (state == CommitState::kWritten) {
      const PageEntry e = table_.Commit(slots[i].key, slots[i].offset, slots[i].length, sums[i], now);
      // Read after the commit's own bumps (the key's older page leaving).
      if (e.generation != 0) {
        reply.pages[i] = Location{true, info_.pool_addr + e.offset, e.length, e.generation, e.checksum,
                                  versions_.VersionAt(e.offset)};
        counters_.stored_bytes += e.length;
      }
    } else if (state == CommitState::kUnused) {
      // The writer never started a WRITE into it: nothing can land there.
      table_.Unreserve(slots[i].offset, now);
      if (!slots[i].key.empty()) {
        reply.statuses[i] = Status::Unavailable("store: the writer did not write the page of '" + slots[i].key + "'");
        ++counters_.put_failures;
      }
    } else {
      table_.Abandon(slots[i].offset, now, PushHold());
      if (reply.statuses[i].ok())
        reply.statuses[i] = Status::Unavailable("store: the writer did not write the page of '" + slots[i].key + "'");
      if (!slots[i].key.empty()) ++counters_.put_failures;
    }
  }
  // The grant never evicts the pages this commit just stored.
  if (!job->grant.empty()) reply.granted = GrantSlots(job->grant, now, first_committed, job->reservation.owner);
  return reply;
}

Slots NodeService::GrantSlots(const std::vector<uint64_t>& lengths, Clock::time_point now, uint64_t keep_from,
                              uint64_t owner) {
  Slots granted;
  granted.epoch = info_.epoch;
  std::vector<Reservations::Slot> held;
  uint64_t bytes = 0;
  const uint64_t all_grants = info_.pool_bytes / kGrantsPoolShare;
  for (uint64_t length : lengths) {
    if (held.size() == kMaxGrantSlots || bytes + length > info_.pool_bytes / kGrantPoolShare ||
        reservations_.granted_bytes() + bytes + length > all_grants)
      break;
    Reservations::Slot slot;
    if (!CheckPageLength("(granted)", length).ok() || !table_.Reserve(length, now, &slot.offset, keep_from).ok())
      break;
    slot.length = length;
    slot.reserved = true;
    bytes += length;
    granted.statuses.push_back(Status::OK());
    granted.addrs.push_back(info_.pool_addr + slot.offset);
    held.push_back(std::move(slot));
  }
  if (held.empty()) return granted;
  const auto hold = std::chrono::milliseconds(kGrantUsableMs + settings_.store_deadline_ms) + std::chrono::seconds(1);
  granted.ticket = reservations_.Open(std::move(held), now + hold, owner, /*granted=*/true);
  return granted;
}

void NodeService::PutLoop() {
  PutJob job;
  bool opening = false;
  while (puts_.Pop(&job, &opening)) {
    if (job.commit) {
      job.reply(Status::OK(), EncodeCommitReply(FinishCommit(&job)));
      continue;
    }
    if (!job.started) {
      if (Clock::now() >= job.deadline) {  // waited for a thread longer than the writer waits for the reply
        if (opening) puts_.DoneOpening();
        job.reply(Status::Timeout("store node " + address_ +
                                  ": the put waited past its deadline for a thread (KVF_STORE_PUT_THREADS)"),
                  {});
        continue;
      }
      SegmentHandle writer = -1;
      const Status open = writers_.Open(job.request.writer, &writer);
      if (opening) puts_.DoneOpening();
      StartPut(&job, open, writer);
    }
    job.reply(Status::OK(), EncodeStatuses(FinishPut(&job)));
  }
}

Status NodeService::CheckPageLength(const std::string& key, uint64_t length) const {
  if (length == 0) return Status::InvalidArgument("store: key '" + key + "' has no bytes");
  if (length > info_.max_page_bytes)
    return Status::InvalidArgument("store: the page of key '" + key + "' is larger than the largest page, " +
                                   std::to_string(info_.max_page_bytes) + " bytes (KVF_STORE_MAX_PAGE_BYTES)");
  return Status::OK();
}

Status NodeService::CheckItem(const PutItem& item, uint64_t* length) const {
  KVF_RETURN_IF_ERROR(CheckKey(item.key));
  uint64_t total = 0;
  for (const Extent& e : item.sources) {
    if (e.length == 0) return Status::InvalidArgument("store: key '" + item.key + "' has an empty buffer");
    total += e.length;
    if (total < e.length) total = UINT64_MAX;  // overflowed: larger than any page
    if (total > info_.max_page_bytes) return CheckPageLength(item.key, total);
  }
  KVF_RETURN_IF_ERROR(CheckPageLength(item.key, total));
  *length = total;
  return Status::OK();
}

void NodeService::DropPut(PutJob* job) {
  // READs already started are not waited for: their batch is kept until
  // they end, and Stop drains it before the pool goes.
  if (job->started) runner_.Finish(&job->flight, Clock::now(), &job->outcomes);
  // A commit's slots stay reserved: the pool is about to go with them.
  job->reply(Status::Closed("store node " + address_ + " stopped"), {});
}

void NodeService::StartPut(PutJob* job, const Status& open, SegmentHandle writer) {
  const PutRequest& put = job->request;
  const size_t n = put.items.size();
  job->started = true;
  job->results.assign(n, Status::OK());
  job->offsets.assign(n, 0);
  job->lengths.assign(n, 0);
  job->reserved.assign(n, false);
  {
    const auto now = Clock::now();
    std::lock_guard<std::mutex> g(table_mu_);
    counters_.puts += n;
    for (size_t i = 0; i < n; ++i) {
      Status& r = job->results[i];
      r = open.ok() ? CheckItem(put.items[i], &job->lengths[i]) : open.Annotate("store: the writer's segment");
      if (r.ok()) r = table_.Reserve(job->lengths[i], now, &job->offsets[i]);
      job->reserved[i] = r.ok();
    }
  }
  // Every page's READs go in one engine batch (a group each).
  std::vector<TransferRequest> requests;
  std::vector<std::pair<size_t, size_t>> groups(n, {0, 0});
  for (size_t i = 0; i < n; ++i) {
    if (!job->reserved[i]) continue;
    groups[i].first = requests.size();
    uint64_t at = job->offsets[i];
    for (const Extent& e : put.items[i].sources) {
      requests.push_back({OpCode::kRead, pool_ + at, writer, e.addr, static_cast<size_t>(e.length)});
      at += e.length;
    }
    groups[i].second = requests.size();
  }
  runner_.Start(requests, groups, &job->flight, &job->outcomes);
}

std::vector<Status> NodeService::FinishPut(PutJob* job) {
  const PutRequest& put = job->request;
  const size_t n = put.items.size();
  runner_.Finish(&job->flight, job->deadline, &job->outcomes);
  std::vector<Checksum> sums(n);
  for (size_t i = 0; i < n; ++i)
    if (job->reserved[i] && job->outcomes[i].ok()) sums[i] = ChecksumOfBytes(pool_ + job->offsets[i], job->lengths[i]);
  const auto now = Clock::now();
  std::lock_guard<std::mutex> g(table_mu_);
  for (size_t i = 0; i < n; ++i) {
    if (!job->reserved[i]) continue;
    if (job->outcomes[i].ok()) {
      if (put.hand_over != PutRequest::HandOver::kNo && removed_.Has(put.items[i].key, now)) {
        table_.Unreserve(job->offsets[i], now);
        job->results[i] = Status::Unavailable("store: '" + put.items[i].key +
                                              "' was removed on its home during the hand-over: the older copy "
                                              "stays where it was");
      } else if (put.hand_over == PutRequest::HandOver::kIfAbsent && table_.Contains(put.items[i].key, now)) {
        table_.Unreserve(job->offsets[i], now);
      } else if (table_.Commit(put.items[i].key, job->offsets[i], job->lengths[i], sums[i], now).generation != 0)
        counters_.stored_bytes += job->lengths[i];
    } else {
      table_.Abandon(job->offsets[i], now);
      job->results[i] =
          job->outcomes[i].Annotate("store: reading the page of '" + put.items[i].key + "' from " + put.writer);
    }
  }
  for (const Status& s : job->results) counters_.put_failures += s.ok() ? 0 : 1;
  return std::move(job->results);
}

}  // namespace kvfabric::store
