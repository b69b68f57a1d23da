// NodeCaller: a store client's messages to its members, many at once.
// Each call of a batch goes to one member (a NodeCall); they are sent
// together, over the control channel or, to this process's own node, by a
// direct call of its handler, and their replies are taken in the order they
// arrive (Replies), so that a caller acts on the first home that answers
// while the others are still on their way.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/unreachable.h"
#include "kvfabric/settings.h"
#include "kvfabric/status.h"
#include "net/socket.h"
#include "store/client/client_counters.h"
#include "store/members/member_view.h"
#include "store/wire/control_client.h"

namespace kvfabric::store {

// This process's own node, as its client reaches it: the address the node
// serves under, and its request handler, called directly for that node's
// keys instead of sending a message.
struct LocalNode {
  std::string address;
  std::function<void(std::string request, ControlClient::Done done)> handle;
};

// One message to one member, for the keys `keys` (indices into the batch).
struct NodeCall {
  std::shared_ptr<const NodeView> node;
  std::vector<size_t> keys;
  std::string request;
  Status status;
  std::string reply;
};

// How a caller waits for replies: polling first (KVF_STORE_SPIN_US), for
// calls whose replies come within a round trip, or asleep at once, for
// calls whose replies wait for bytes to move (PUTs, GETs with READs under
// way), where polling would take a core from the transfer. Only a lone
// call of the client polls (NodeCaller::Scope counts them): with 4 threads
// calling exists at once, polling halved their keys/s on 2 vCPUs.
enum class Wait : uint8_t { kPollFirst, kSleep };

class NodeCaller;

// The replies of one fan-out (NodeCaller::Send), taken as they arrive. The
// calls it was sent for must outlive it and keep their places. A reply
// that comes after the caller stopped waiting is dropped with it.
class Replies {
 public:
  Replies() = default;
  explicit operator bool() const { return state_ != nullptr; }
  // Whether a reply waits to be taken (never blocks).
  bool Answered() const;
  // Takes the next reply into its call (status and reply, settled by
  // NodeCaller::Settle) and says which in *which; false when none came by
  // `until`: every call not taken yet is then settled with Timeout, and
  // unanswered() lists them.
  bool Next(net::Deadline until, Wait wait, size_t* which);
  const std::vector<size_t>& unanswered() const { return unanswered_; }

 private:
  friend class NodeCaller;
  struct State;
  std::shared_ptr<State> state_;
  NodeCaller* caller_ = nullptr;
  std::vector<NodeCall>* calls_ = nullptr;
  std::vector<size_t> unanswered_;
};

class NodeCaller {
 public:
  // Who a member that cannot be reached is reported to (MemberView::MarkDown).
  using MarkDown = std::function<void(const std::string& member, const Status& why)>;
  // `self`: this process's node, or none. Counts every call and failure
  // in `counters`.
  NodeCaller(const Settings& settings, ControlClient* control, std::optional<LocalNode> self, MarkDown mark_down,
             ClientCounters* counters);

  // Whether `member` is this process's own node.
  bool IsSelf(const std::string& member) const { return self_ && member == self_->address; }
  // Sends every call at once; their replies come through the result.
  Replies Send(std::vector<NodeCall>* calls, net::Deadline deadline);
  // Send, then waits for every reply, or until a second past `deadline`
  // (the control client ends every call by its deadline; this node's own
  // puts may run a little past it).
  void CallAll(std::vector<NodeCall>* calls, net::Deadline deadline, Wait wait);
  // Reports `member` when `failure` says it could not be reached
  // (Unreachable; a control call never fails with the fabric's error, so
  // calls and READs share this one rule).
  void MarkDownIfUnreachable(const std::string& member, const Status& failure);

  // One public call of the client under way, for as long as it lives.
  class Scope {
   public:
    explicit Scope(NodeCaller* caller) : n_(&caller->active_) { n_->fetch_add(1, std::memory_order_relaxed); }
    ~Scope() { n_->fetch_sub(1, std::memory_order_relaxed); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    std::atomic<int>* n_;
  };

 private:
  friend class Replies;
  // A call's end: its status named after the member, the counters, and
  // the member reported when it could not be reached.
  void Settle(NodeCall* call, Status status, std::string reply);
  // How long a wait of kind `wait` polls now.
  std::chrono::microseconds PollTime(Wait wait) const;

  const std::chrono::microseconds spin_;
  ControlClient* const control_;
  const std::optional<LocalNode> self_;
  const MarkDown mark_down_;
  ClientCounters* const counters_;
  std::atomic<int> active_{0};
};

}  // namespace kvfabric::store
