#include "weights/relay_plan.h"

#include <algorithm>
#include <deque>
#include <limits>

namespace kvfabric::weights {
namespace {

// Receivers (1..M) by host, hosts in order of first appearance; the
// receivers on the sender's host apart.
struct Hosts {
  std::vector<int> with_sender;
  std::vector<std::vector<int>> others;  // others[h][0] is host h's head
};

Hosts GroupByHost(const Member& sender, const std::vector<Member>& receivers) {
  Hosts out;
  std::vector<std::string> names;
  for (size_t i = 0; i < receivers.size(); ++i) {
    const int id = static_cast<int>(i) + 1;
    if (receivers[i].host == sender.host) {
      out.with_sender.push_back(id);
      continue;
    }
    const auto it = std::find(names.begin(), names.end(), receivers[i].host);
    if (it == names.end()) {
      names.push_back(receivers[i].host);
      out.others.push_back({id});
    } else {
      out.others[it - names.begin()].push_back(id);
    }
  }
  return out;
}

int RailsOf(const Member& sender, const std::vector<Member>& receivers, int id) {
  return std::max(1, id == 0 ? sender.rails : receivers[id - 1].rails);
}

void Link(RelayPlan* plan, int parent, int child) {
  plan->parent[child] = parent;
  plan->children[parent].push_back(child);
}

// The plan with `fanout` cross-host children per member, times the member's
// rails over the heads' widest (a member with k times their rails feeds k
// times as many), filled breadth first in the heads' order.
RelayPlan Build(const Member& sender, const std::vector<Member>& receivers, const Hosts& hosts, int fanout) {
  RelayPlan plan;
  plan.fanout = fanout;
  plan.parent.assign(receivers.size() + 1, RelayPlan::kNone);
  plan.children.assign(receivers.size() + 1, {});
  int head_rails = 1;
  for (const auto& group : hosts.others) head_rails = std::max(head_rails, RailsOf(sender, receivers, group[0]));
  auto slots = [&](int id) { return fanout * std::max(1, RailsOf(sender, receivers, id) / head_rails); };
  std::deque<std::pair<int, int>> open = {{0, slots(0)}};  // member, cross-host children it may still take
  for (const auto& group : hosts.others) {
    const int head = group[0];
    Link(&plan, open.front().first, head);
    if (--open.front().second == 0) open.pop_front();
    open.push_back({head, slots(head)});
  }
  for (const auto& group : hosts.others)
    for (size_t k = 1; k < group.size(); ++k) Link(&plan, group[k - 1], group[k]);
  int previous = 0;
  for (int id : hosts.with_sender) {
    Link(&plan, previous, id);
    previous = id;
  }
  return plan;
}

// Estimated time of a plan, in units of bytes over one rail: the slowest
// cross-host link carries everything, and every hop but the first adds a
// bucket while the pipeline fills.
double Estimate(const RelayPlan& plan, const Member& sender, const std::vector<Member>& receivers, const Hosts& hosts,
                int64_t total, int64_t bucket) {
  double rate = std::numeric_limits<double>::infinity();
  for (const auto& group : hosts.others) {
    const int head = group[0];
    const int parent = plan.parent[head];
    int cross = 0;
    for (int c : plan.children[parent])
      cross += receivers[c - 1].host != (parent == 0 ? sender.host : receivers[parent - 1].host);
    const double out = static_cast<double>(RailsOf(sender, receivers, parent)) / std::max(1, cross);
    rate = std::min(rate, std::min(out, static_cast<double>(RailsOf(sender, receivers, head))));
  }
  if (rate == std::numeric_limits<double>::infinity()) rate = 1;
  const int64_t b = std::min(bucket, total);
  return (static_cast<double>(total) + static_cast<double>(std::max(0, plan.MaxDepth() - 1)) * b) / rate;
}

}  // namespace

int RelayPlan::Depth(int i) const {
  int d = 0;
  while (i > 0) {
    if (parent[i] == kGone) return -1;
    i = parent[i];
    ++d;
  }
  return d;
}

int RelayPlan::MaxDepth() const {
  int d = 0;
  for (size_t i = 0; i < parent.size(); ++i) d = std::max(d, Depth(static_cast<int>(i)));
  return d;
}

RelayPlan PlanRelays(const Member& sender, const std::vector<Member>& receivers, int64_t total_bytes,
                     int64_t bucket_bytes) {
  const Hosts hosts = GroupByHost(sender, receivers);
  const int heads = static_cast<int>(hosts.others.size());
  RelayPlan best = Build(sender, receivers, hosts, 1);
  double best_time = Estimate(best, sender, receivers, hosts, total_bytes, bucket_bytes);
  for (int f = 2; f <= heads; ++f) {
    RelayPlan plan = Build(sender, receivers, hosts, f);
    const double t = Estimate(plan, sender, receivers, hosts, total_bytes, bucket_bytes);
    if (t < best_time) {
      best = std::move(plan);
      best_time = t;
    }
  }
  return best;
}

RelayPlan Without(const RelayPlan& plan, int gone) {
  if (gone <= 0 || gone >= static_cast<int>(plan.size()) || plan.parent[gone] == RelayPlan::kGone) return plan;
  RelayPlan out = plan;
  const int parent = plan.parent[gone];
  auto& siblings = out.children[parent];
  const auto at = std::find(siblings.begin(), siblings.end(), gone);
  const std::vector<int> orphans = plan.children[gone];
  siblings.insert(siblings.erase(at), orphans.begin(), orphans.end());
  for (int c : orphans) out.parent[c] = parent;
  out.parent[gone] = RelayPlan::kGone;
  out.children[gone].clear();
  return out;
}

}  // namespace kvfabric::weights
