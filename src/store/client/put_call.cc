#include "store/client/put_call.h"

#include <algorithm>

#include "store/client/location_cache.h"

namespace kvfabric::store {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

PutCall::PutCall(ClientParts* parts, const std::vector<std::string>& keys,
                 const std::vector<std::vector<StoreBuffer>>& sources, const std::vector<Memory>& memory,
                 std::vector<Status>* results, bool grants)
    : parts_(parts),
      keys_(keys),
      sources_(sources),
      memory_(memory),
      results_(results),
      grants_(grants),
      deadline_ms_(parts->settings.store_deadline_ms),
      deadline_(net::DeadlineIn(deadline_ms_)),
      writes_by_(deadline_ - std::chrono::milliseconds(std::min<int64_t>(deadline_ms_ / 5, 500))),
      sums_(keys.size()) {}

std::vector<size_t> PutCall::Run(std::vector<NodeCall> calls) {
  calls_ = std::move(calls);
  pushes_.resize(calls_.size());
  Replies reserves = AskForSlots();
  // The writer checksums its pages in host memory (the home then commits
  // them at once; it checksums GPU pages from its slots itself), first
  // while it waits for the reservations, then while the WRITEs move: on
  // few cores the hashing then takes the idle round trip instead of the
  // copies' CPU.
  for (const NodeCall& call : calls_)
    for (size_t i : call.keys)
      if (memory_[i] == Memory::kHost) to_sum_.push_back(i);
  for (size_t c = 0; c < calls_.size(); ++c) {
    if (!pushes_[c].granted) continue;
    StartWrites(c);
    started_.push_back(c);
  }
  if (reserves) TakeSlots(&reserves);
  while (summed_ < to_sum_.size()) SumNext();
  SendCommits();
  TakeCommits();
  return Retry();
}

Replies PutCall::AskForSlots() {
  for (size_t c = 0; c < calls_.size(); ++c) {
    const NodeCall& call = calls_[c];
    if (grants_) {
      std::vector<Credit> back;
      std::optional<GrantBook::Taken> taken = parts_->grants.Take(*call.node, PageLengths(call), &back);
      parts_->GiveBack(std::move(back), Clock::now());
      if (taken) {
        pushes_[c].granted = true;
        pushes_[c].slots = std::move(taken->slots);
        pushes_[c].slot_of = std::move(taken->slot_of);
        continue;
      }
    }
    ReserveRequest reserve;
    reserve.budget_ms = static_cast<uint32_t>(deadline_ms_);
    for (size_t i : call.keys) reserve.items.push_back({keys_[i], TotalBytes(sources_[i])});
    reserving_.push_back(NodeCall{call.node, call.keys, EncodeReserve(reserve), {}, {}});
    asking_.push_back(c);
  }
  if (reserving_.empty()) return {};
  return parts_->caller.Send(&reserving_, writes_by_);
}

std::vector<uint64_t> PutCall::PageLengths(const NodeCall& call) const {
  std::vector<uint64_t> lengths;
  lengths.reserve(call.keys.size());
  for (size_t i : call.keys) lengths.push_back(TotalBytes(sources_[i]));
  return lengths;
}

void PutCall::SumNext() {
  const size_t i = to_sum_[summed_++];
  sums_[i] = ChecksumOfBuffers(sources_[i], TotalBytes(sources_[i]));
}

void PutCall::TakeSlots(Replies* reserves) {
  size_t r = 0;
  for (size_t n = 0; n < reserving_.size(); ++n) {
    while (summed_ < to_sum_.size() && !reserves->Answered()) SumNext();
    if (!reserves->Next(writes_by_ + std::chrono::seconds(1), Wait::kSleep, &r)) break;
    NodeCall& call = calls_[asking_[r]];
    call.status = std::move(reserving_[r].status);
    call.reply = std::move(reserving_[r].reply);
    if (StartPush(asking_[r])) started_.push_back(asking_[r]);
  }
  for (size_t u : reserves->unanswered())
    for (size_t i : reserving_[u].keys) (*results_)[i] = reserving_[u].status;
}

bool PutCall::StartPush(size_t c) {
  NodeCall& call = calls_[c];
  Push& push = pushes_[c];
  Status s = call.status;
  if (s.ok()) s = DecodeSlots(call.reply, call.keys.size(), &push.slots);
  if (!s.ok()) {
    for (size_t i : call.keys) (*results_)[i] = s;
    return false;
  }
  push.slot_of.resize(call.keys.size());
  for (size_t j = 0; j < call.keys.size(); ++j) push.slot_of[j] = j;
  if (push.slots.epoch != call.node->info.epoch) {
    // The home restarted since this process greeted it: its slots are in
    // the new engine, whose segment the view does not hold.
    std::shared_ptr<const NodeView> fresh;
    s = parts_->members->Renew(call.node->name, push.slots.epoch, writes_by_, &fresh);
    if (s.ok() && fresh->info.epoch != push.slots.epoch) s = Status::Unavailable("it restarted again");
    if (!s.ok()) {
      // Its slots are abandoned by the commit, which says nothing was written.
      push.group_of.assign(call.keys.size(), SIZE_MAX);
      s = s.Annotate("store member " + call.node->name + " restarted during the put");
      for (size_t i : call.keys) (*results_)[i] = s;
      return push.slots.ticket != 0;
    }
    call.node = std::move(fresh);
  }
  StartWrites(c);
  return push.slots.ticket != 0;
}

void PutCall::StartWrites(size_t c) {
  const NodeCall& call = calls_[c];
  Push& push = pushes_[c];
  push.group_of.assign(call.keys.size(), SIZE_MAX);
  std::vector<TransferRequest> writes;
  std::vector<std::pair<size_t, size_t>> groups;
  std::vector<uint64_t> copyable;
  for (size_t j = 0; j < call.keys.size(); ++j) {
    const size_t i = call.keys[j];
    const size_t slot = push.slot_of[j];
    if (!push.slots.statuses[slot].ok()) {
      (*results_)[i] = push.slots.statuses[slot];
      continue;
    }
    push.group_of[j] = groups.size();
    groups.push_back({writes.size(), 0});
    copyable.push_back(memory_[i] == Memory::kHost ? call.node->info.epoch : BatchRunner::kNoCopy);
    uint64_t at = push.slots.addrs[slot];
    for (const StoreBuffer& b : sources_[i]) {
      writes.push_back({OpCode::kWrite, b.addr, call.node->segment, at, b.length});
      at += b.length;
    }
    groups.back().second = writes.size();
  }
  parts_->runner.Start(writes, groups, &push.flight, &push.wrote, copyable);
  ClientCounters::Add(parts_->counters.copied_pages, push.flight.Copied());
}

CommitRequest PutCall::CommitOf(size_t c) {
  const NodeCall& call = calls_[c];
  Push& push = pushes_[c];
  parts_->runner.Finish(&push.flight, writes_by_, &push.wrote);
  // The commit says which slots were written: the home frees the slots no
  // WRITE went to and holds back those whose WRITE failed.
  CommitRequest commit{push.slots.ticket, std::vector<CommitItem>(push.slots.statuses.size()), {}};
  for (CommitItem& item : commit.items) item.state = push.granted ? CommitState::kUnused : CommitState::kNotWritten;
  for (size_t j = 0; j < call.keys.size(); ++j) {
    const size_t i = call.keys[j];
    if (push.group_of[j] == SIZE_MAX) continue;
    const Status& w = push.wrote[push.group_of[j]];
    CommitItem& item = commit.items[push.slot_of[j]];
    item.state = w.ok() ? CommitState::kWritten : CommitState::kNotWritten;
    if (push.granted) item.key = keys_[i];
    if (sums_[i]) {
      item.has_checksum = true;
      item.checksum = *sums_[i];
    }
    if (!w.ok()) {
      (*results_)[i] = w.Annotate("store: writing the page of '" + keys_[i] + "' to " + call.node->name);
      // A granted slot of a home that restarted since is in its old
      // engine: its commit says so, and the key is put again.
      if (!push.granted) parts_->caller.MarkDownIfUnreachable(call.node->name, w);
    }
  }
  if (grants_) {
    commit.grant = SlotsToAskFor(PageLengths(call), call.node->info.pool_bytes);
    push.losses = parts_->control->Losses(call.node->name);  // before the commit goes: see Credit::losses
  }
  return commit;
}

void PutCall::SendCommits() {
  commits_.resize(started_.size());  // the replies point into them: sized once
  commit_replies_.resize(started_.size());
  for (size_t k = 0; k < started_.size(); ++k) {
    const size_t c = started_[k];
    pushes_[c].commit = CommitOf(c);
    commits_[k].push_back(NodeCall{calls_[c].node, calls_[c].keys, EncodeCommit(pushes_[c].commit), {}, {}});
    commit_replies_[k] = parts_->caller.Send(&commits_[k], deadline_);
  }
}

void PutCall::TakeCommits() {
  for (size_t k = 0; k < started_.size(); ++k) {
    size_t one = 0;
    commit_replies_[k].Next(deadline_ + std::chrono::seconds(1), Wait::kSleep, &one);
    const NodeCall& call = commits_[k][0];
    const size_t c = started_[k];
    const Push& push = pushes_[c];
    CommitReply reply;
    Status s = call.status;
    if (s.ok()) s = DecodeCommitReply(call.reply, push.commit.items.size(), &reply);
    for (size_t j = 0; j < call.keys.size(); ++j) {
      if (push.group_of[j] == SIZE_MAX) continue;
      const size_t i = call.keys[j];
      const size_t slot = push.slot_of[j];
      if (push.granted && s.code() == Status::Code::kNotFound) {
        again_.push_back(i);
        gone_from_.push_back(call.node->name);
        continue;
      }
      if (push.commit.items[slot].written()) (*results_)[i] = s.ok() ? reply.statuses[slot] : s;
      // Where the page lies now, as a lookup would say: this process's GETs
      // of it read at once (a writer that reads its pages back, as HiCache
      // does, asks its home nothing).
      if ((*results_)[i].ok() && !reply.pages.empty() && reply.pages[slot].found)
        parts_->locations.Put(keys_[i], CachedLocation{call.node->name, call.node->info.epoch, reply.pages[slot]});
      if (push.granted && (*results_)[i].ok()) ClientCounters::Add(parts_->counters.put_granted, 1);
    }
    if (s.ok() && reply.granted.ticket != 0) KeepGrant(c, &reply);
  }
}

void PutCall::KeepGrant(size_t c, CommitReply* reply) {
  const NodeCall& call = calls_[c];
  const Push& push = pushes_[c];
  const auto granted = static_cast<std::ptrdiff_t>(reply->granted.statuses.size());
  Credit credit{call.node,
                reply->granted.ticket,
                reply->granted.epoch,
                push.losses,
                std::move(reply->granted.addrs),
                std::vector<uint64_t>(push.commit.grant.begin(), push.commit.grant.begin() + granted),
                Clock::now() + std::chrono::milliseconds(std::min(kGrantUsableMs, deadline_ms_))};
  std::vector<Credit> back;
  // A grant short of this call's own pages (the home's pool is small for
  // such batches) would fit no PUT like it: back at once.
  if (credit.addrs.size() < call.keys.size()) back.push_back(std::move(credit));
  else parts_->grants.Keep(std::move(credit), &back);
  parts_->GiveBack(std::move(back), Clock::now());
}

std::vector<size_t> PutCall::Retry() {
  if (again_.empty()) return {};
  const bool in_time = Clock::now() + parts_->LateMargin() < writes_by_;
  for (size_t a = 0; a < again_.size(); ++a) {
    const size_t i = again_[a];
    (*results_)[i] = in_time ? Status::OK()
                             : Status::Unavailable("store: the slots that store member " + gone_from_[a] +
                                                   " granted for '" + keys_[i] +
                                                   "' were gone (it restarted, or they outlived their time), and no "
                                                   "time was left to put it again");
  }
  return in_time ? again_ : std::vector<size_t>{};
}

}  // namespace kvfabric::store
