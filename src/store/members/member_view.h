// MemberView: a process's picture of the store's members, refreshed in the
// background: who they are (Membership), what each says of itself (a hello
// over the control channel: its segment, pool, epoch), which of them placement
// may use now (reachable, with a pool), and the engine segment through which
// its pool is read. Placement is computed once per change and shared by
// every call as a snapshot.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kvfabric/engine.h"
#include "kvfabric/settings.h"
#include "store/wire/control_client.h"
#include "store/members/membership.h"
#include "store/wire/messages.h"
#include "store/members/placement.h"

namespace kvfabric::store {

// One member as placement sees it.
struct NodeView {
  std::string name;         // control address
  NodeInfo info;            // from its hello
  SegmentHandle segment = -1;  // its engine segment, opened in this process's engine
  std::chrono::steady_clock::time_point born{};  // when it started serving (its hello's age_ms, on this clock)
};

struct MemberSnapshot {
  using TimePoint = std::chrono::steady_clock::time_point;
  Placement placement{{}};
  std::vector<std::shared_ptr<const NodeView>> nodes;  // nodes[i] is placement.members()[i]
  // since[i]: when nodes[i] entered the store as this process sees it: the
  // later of its start and the moment this view took it into placement
  // after it was out (it joined, restarted or came back; the first
  // placement does not count: its members were there before this process).
  std::vector<TimePoint> since;

  // Per member, whether it entered within `window` before `now`: keys
  // that home on it may still lie on their previous home (PreviousHome),
  // put by processes that had not seen it yet, until that home hands them
  // over (Handoff).
  std::vector<bool> Recent(TimePoint now, std::chrono::milliseconds window) const;
  // Whether any member is: Recent without its vector, for every call.
  bool AnyRecent(TimePoint now, std::chrono::milliseconds window) const;
  // The home `key`, whose home is member `home`, had before `home`
  // entered: its home among the members that entered before it (since
  // earlier than since[home]); nodes.size() when there is none (they all
  // entered with it, or after).
  size_t PreviousHome(std::string_view key, size_t home) const;

  // When `nodes` is empty: why, for the error a call returns (the members
  // known and why each is left out, or where none was listed).
  std::string why_none;
};

class MemberView {
 public:
  MemberView(Engine* engine, ControlClient* client, Membership* membership, const Settings& settings);
  ~MemberView();  // Stop()

  // Reads the members once (blocking, bounded by the store deadline per
  // member), then keeps refreshing every KVF_STORE_MEMBERSHIP_REFRESH_MS.
  void Start();
  void Stop();

  std::shared_ptr<const MemberSnapshot> Current() const;
  // The member `name` failed a call (`why`): out of placement for
  // KVF_STORE_DOWN_RETRY_MS, and asked again for its hello after that (it
  // may have restarted).
  void MarkDown(const std::string& name, const Status& why);
  // The member `name` answered with epoch `epoch`, which the view of it a
  // call used does not have: it restarted, and its engine segment is new.
  // Greets it now, unless another call did already, and puts the new view
  // in placement; `out` is the view, whose epoch may still differ when it
  // restarted again meanwhile. Costs a hello and a segment handshake once
  // per restart, bounded by `deadline`.
  Status Renew(const std::string& name, uint64_t epoch, net::Deadline deadline, std::shared_ptr<const NodeView>* out);

 private:
  struct Known {
    std::shared_ptr<const NodeView> view;  // null until a hello succeeded, and while down
    std::chrono::steady_clock::time_point down_until{};
    std::shared_ptr<const NodeView> last;  // the last view it had (a restart shows as a new epoch)
    bool warned = false;                   // its greeting failed and was logged at warning since it last joined
    std::string why;                       // why it is out of placement now ("" while in)
    std::chrono::steady_clock::time_point entered{};  // placement took it after it was out (not the first placement)
  };
  void Refresh();
  // Asks `name` for its hello (by `deadline`) and opens its segment,
  // closing the segment of the view it had before when its epoch changed;
  // the new view becomes its `last` (not in placement). The member's greet
  // lock held (GreetLock): one greeting of a member at a time, so a
  // restarted member's old segment is closed once.
  Status Greet(const std::string& name, net::Deadline deadline, std::shared_ptr<const NodeView>* out);
  // Greet's second half, with the hello's `reply`: decodes it and opens
  // the member's segment.
  Status Adopt(const std::string& name, const std::string& reply, std::shared_ptr<const NodeView>* out);
  // The hellos of `names`, asked all at once and answered by `deadline`:
  // per name, the call's status and the reply.
  std::vector<std::pair<Status, std::string>> HelloAll(const std::vector<std::string>& names,
                                                        net::Deadline deadline);
  // The lock that orders the greetings of `name`.
  std::shared_ptr<std::mutex> GreetLock(const std::string& name);
  void Publish();  // rebuilds the snapshot from known_ (under mu_)
  std::string WhyNone() const;  // MemberSnapshot::why_none (under mu_)

  Engine* const engine_;
  ControlClient* const client_;
  Membership* const membership_;
  const Settings settings_;

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<std::mutex>> greet_locks_;  // under mu_; each taken before mu_
  std::map<std::string, Known> known_;
  std::shared_ptr<const MemberSnapshot> current_;
  std::set<std::string> placed_;  // the members of the last placement (under mu_)
  bool placed_once_ = false;      // placement was published at least once (under mu_)
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kvfabric::store
