// Who forwards a weight sync's buckets to whom (docs/design/weights.md).
//
// A sync has one sender and M receivers. Sending every receiver its own
// copy makes the sender's link carry M copies; instead receivers relay each
// bucket to the next receivers as soon as it has landed and been checked,
// so the sender sends each byte once and the time for M receivers stays
// close to the time for one (plus one bucket per hop while the pipeline
// fills). PlanRelays decides the shape from where the members run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvfabric::weights {

// A process of a sync: the host it runs on (any name that is equal for
// processes of one host) and the number of rails (NICs) its engine uses.
struct Member {
  std::string host;
  int rails = 1;
};

// Members are numbered 0 (the sender) to M (the receivers, in the order
// given to PlanRelays).
struct RelayPlan {
  static constexpr int kNone = -1;  // the sender's parent
  static constexpr int kGone = -2;  // a receiver left out (Without)

  std::vector<int> parent;                 // parent[0] == kNone
  std::vector<std::vector<int>> children;  // in the order a member sends to them
  int fanout = 1;                          // cross-host children per member (1: a chain of hosts)

  size_t size() const { return parent.size(); }
  // Hops from the sender to member i (0 for the sender; -1 for one left out).
  int Depth(int i) const;
  // The largest Depth.
  int MaxDepth() const;
};

// The plan for `receivers` fed by `sender`, moving `total_bytes` in buckets
// of `bucket_bytes`. Contract:
// - every receiver has exactly one parent, the sender or another receiver,
//   and the parent links form a tree rooted at the sender;
// - the receivers of one host take the buckets over the network once: the
//   first of them in the given order (the host's head) from another host,
//   the others in a chain behind it (hops inside a host leave the NICs
//   alone). Receivers on the sender's host form a chain behind the sender;
// - across hosts the heads form a tree, filled in the given order, where
//   each member sends to `fanout` heads of other hosts. fanout is the f in
//   1..M minimising the estimated time of the slowest path,
//     total / min(parent rails / f, child rails) + (depth - 1) * bucket,
//   smallest f on a tie: a chain (f = 1) unless the data is small against
//   bucket times hops, or a parent has rails enough for several children;
// - the result depends only on the arguments (every member computes it and
//   gets the same plan).
// An empty `receivers` gives the plan of the sender alone.
RelayPlan PlanRelays(const Member& sender, const std::vector<Member>& receivers, int64_t total_bytes,
                     int64_t bucket_bytes);

// `plan` with receiver `gone` (1..M) left out: its children take its parent
// as theirs, in its place among that parent's children, so every other
// receiver keeps its position and a chain stays a chain. Contract: the
// sender cannot be left out (gone == 0 returns the plan unchanged), and
// leaving out a receiver already gone changes nothing.
RelayPlan Without(const RelayPlan& plan, int gone);

}  // namespace kvfabric::weights
