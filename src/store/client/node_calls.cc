#include "store/client/node_calls.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>

#include "common/cpu_relax.h"

namespace kvfabric::store {

using Clock = std::chrono::steady_clock;

// Shared with the callbacks: a reply that comes after the caller stopped
// waiting is written here, never into the caller's frame.
struct Replies::State {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<Status, std::string>> got;
  std::deque<size_t> arrived;  // calls answered and not taken yet
  std::vector<bool> taken;
};

bool Replies::Answered() const {
  std::lock_guard<std::mutex> g(state_->mu);
  return !state_->arrived.empty();
}

bool Replies::Next(net::Deadline until, Wait wait, size_t* which) {
  State& s = *state_;
  std::unique_lock<std::mutex> g(s.mu);
  if (s.arrived.empty()) {
    const auto stop = std::min(until, Clock::now() + caller_->PollTime(wait));
    while (s.arrived.empty() && Clock::now() < stop) {
      g.unlock();
      for (int i = 0; i < 64; ++i) CpuRelax();
      g.lock();
    }
  }
  if (s.cv.wait_until(g, until, [&] { return !s.arrived.empty(); })) {
    *which = s.arrived.front();
    s.arrived.pop_front();
    s.taken[*which] = true;
    auto& [status, reply] = s.got[*which];
    Status st = std::move(status);
    std::string r = std::move(reply);
    g.unlock();
    caller_->Settle(&(*calls_)[*which], std::move(st), std::move(r));
    return true;
  }
  const size_t before = unanswered_.size();
  for (size_t c = 0; c < calls_->size(); ++c) {
    if (s.taken[c]) continue;
    s.taken[c] = true;  // a reply coming later is dropped with the state
    unanswered_.push_back(c);
  }
  g.unlock();
  for (size_t u = before; u < unanswered_.size(); ++u)
    caller_->Settle(&(*calls_)[unanswered_[u]], Status::Timeout("no answer in time"), {});
  return false;
}

NodeCaller::NodeCaller(const Settings& settings, ControlClient* control, std::optional<LocalNode> self,
                       MarkDown mark_down, ClientCounters* counters)
    : spin_(settings.store_spin_us),
      control_(control),
      self_(std::move(self)),
      mark_down_(std::move(mark_down)),
      counters_(counters) {}

Replies NodeCaller::Send(std::vector<NodeCall>* calls, net::Deadline deadline) {
  Replies replies;
  replies.state_ = std::make_shared<Replies::State>();
  replies.caller_ = this;
  replies.calls_ = calls;
  replies.state_->got.resize(calls->size());
  replies.state_->taken.resize(calls->size(), false);
  std::vector<ControlClient::Request> remote;
  remote.reserve(calls->size());
  for (size_t c = 0; c < calls->size(); ++c) {
    NodeCall& call = (*calls)[c];
    auto done = [state = replies.state_, c](Status s, std::string reply) {
      std::lock_guard<std::mutex> g(state->mu);
      state->got[c] = {std::move(s), std::move(reply)};
      state->arrived.push_back(c);
      state->cv.notify_all();
    };
    ClientCounters::Add(counters_->control_calls, 1);
    if (IsSelf(call.node->name)) self_->handle(std::move(call.request), std::move(done));
    else remote.push_back({call.node->name, std::move(call.request), std::move(done)});
  }
  if (!remote.empty()) control_->CallAll(std::move(remote), deadline);
  return replies;
}

void NodeCaller::CallAll(std::vector<NodeCall>* calls, net::Deadline deadline, Wait wait) {
  Replies replies = Send(calls, deadline);
  const auto until = deadline + std::chrono::seconds(1);
  size_t which = 0;
  for (size_t n = 0; n < calls->size(); ++n)
    if (!replies.Next(until, wait, &which)) break;
}

void NodeCaller::Settle(NodeCall* call, Status status, std::string reply) {
  call->status = std::move(status);
  call->reply = std::move(reply);
  if (call->status.ok()) return;
  ClientCounters::Add(counters_->control_failures, 1);
  call->status = call->status.Annotate("store member " + call->node->name);
  MarkDownIfUnreachable(call->node->name, call->status);
}

std::chrono::microseconds NodeCaller::PollTime(Wait wait) const {
  // Polling pays only when no other call of this process needs the core.
  if (wait == Wait::kSleep || active_.load(std::memory_order_relaxed) != 1) return std::chrono::microseconds(0);
  return spin_;
}

void NodeCaller::MarkDownIfUnreachable(const std::string& member, const Status& failure) {
  if (Unreachable(failure)) mark_down_(member, failure);
}

}  // namespace kvfabric::store
