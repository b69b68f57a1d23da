// RailHealth: how well one rail moves data, from its clock readings alone.
// It measures the rail's throughput while it has a backlog, and takes the
// rail out of service when work stays in flight and nothing completes (a
// link that went down). Every call takes the steady-clock reading `now_ns`
// from its caller, so tests drive it with a fake clock. No libfabric here.
//
// Threads: Throughput and InService may be called from any thread;
// WorkStarted from a posting thread; Sample, CheckStall and Completed from
// the rail's progress thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace kvfabric::fabric {

// Whether a stall due on a rail is its peers' doing, not its link's, so the
// rail stays in service: nothing is in flight, work is waiting, every
// waiting slice's peer is in a run of refused posts (the latest of those
// runs began at `latest_refusal_ns`; 0 when some waiting peer is not
// refused), and an operation (to another peer: the refused ones' posts
// were not taken) completed on the rail after that, at
// `last_completed_ns`. A link that is down completes nothing, so it stalls.
bool StallIsThePeers(bool in_flight, bool waiting, int64_t latest_refusal_ns, int64_t last_completed_ns);

// What a stalled rail does with the operations it has posted to one peer:
//  - kCut: close the peer's connection (Rail::CutPeer), so that they fail
//    at once and move as failed slices do, and none lands later (the link
//    may come back: a late READ would land in a buffer its caller has
//    reused); where the rail may close stalled connections and every one
//    of them may move;
//  - kLeave: leave them to the link, or to their deadline's cut; where it
//    may close connections but some may not move;
//  - kOffer: offer each to its owner, which moves it while the provider
//    keeps it (it may still complete when the link comes back); where
//    closing a connection is not safe (efa, shm, tcp without AV cleanup).
enum class StalledPeerAction : uint8_t { kCut, kLeave, kOffer };
StalledPeerAction ActionOnStalledPeer(bool may_cut_connections, bool all_may_move);

class RailHealth {
 public:
  // A window counts towards throughput only with at least this many bytes
  // queued or in flight throughout (an idle rail shows its demand, not its
  // speed).
  static constexpr uint64_t kBacklogBytes = 1 << 20;
  // Length of one throughput sample.
  static constexpr int64_t kWindowNs = 50000000;
  // A new sample is averaged (half and half) with the previous estimate if
  // that one is younger than this many windows, else it replaces it.
  static constexpr int64_t kFreshWindows = 4;

  // `stall_ns` <= 0: never stalls. `retry_ns`: how long a stalled rail stays
  // out of service (KVF_RAIL_STALL_MS, KVF_RAIL_RETRY_MS).
  RailHealth(int64_t stall_ns, int64_t retry_ns) : stall_ns_(stall_ns), retry_ns_(retry_ns) {}
  RailHealth(const RailHealth&) = delete;
  RailHealth& operator=(const RailHealth&) = delete;

  int64_t stall_ns() const { return stall_ns_; }
  int64_t retry_ns() const { return retry_ns_; }

  // An idle rail got work (its first operation in flight): the stall clock
  // starts now.
  void WorkStarted(int64_t now_ns) { last_progress_ns_.store(now_ns, std::memory_order_relaxed); }

  // Something completed on the rail: the stall clock restarts, and a rail
  // out of service (or on probation) is back in service. Returns true when
  // it was not in service until now, for the caller to say so.
  bool Completed(int64_t now_ns);
  // When something last completed on the rail (Completed), 0 if never.
  int64_t last_completed_ns() const { return last_completed_ns_.load(std::memory_order_relaxed); }

  // Progress thread, every poll: `load_bytes` queued or in flight now,
  // `completed_bytes` the rail's running total. Takes a sample at the end of
  // each kWindowNs window in which the load never fell below kBacklogBytes;
  // a load below it discards the window under way. Windows start where a
  // backlog began or at a completion, and end at a completion.
  void Sample(int64_t now_ns, uint64_t load_bytes, uint64_t completed_bytes);

  // Bytes per second the rail drained while it had a backlog (its capacity
  // as last seen), or 0 when not measured within the last `max_age_ns`.
  double Throughput(int64_t now_ns, int64_t max_age_ns) const {
    return now_ns - throughput_at_ns_.load(std::memory_order_relaxed) <= max_age_ns
               ? throughput_.load(std::memory_order_relaxed)
               : 0.0;
  }

  // Progress thread, on a poll that completed nothing. True when the rail
  // has just stalled: `work_in_flight`, a stall period set, and nothing
  // completed (nor work started on an idle rail) for stall_ns(). The rail is
  // then out of service until now + retry_ns(), and the next stall is
  // reported one stall period later at the earliest. The caller moves the
  // rail's work elsewhere.
  bool CheckStall(int64_t now_ns, bool work_in_flight);
  // Whether a stall period set has passed with nothing completed (nor work
  // started on an idle rail): CheckStall with work in flight would now
  // report a stall. Changes nothing.
  bool StallDue(int64_t now_ns) const {
    return stall_ns_ > 0 && now_ns - last_progress_ns_.load(std::memory_order_relaxed) >= stall_ns_;
  }
  // The work that waited was not the rail's to move (its peers cannot be
  // connected to): the stall clock restarts, the rail stays in service.
  void Excused(int64_t now_ns) { last_progress_ns_.store(now_ns, std::memory_order_relaxed); }

  // False while the rail is out of service after a stall, until retry_ns()
  // pass or something completes on it again. After that, until something
  // completes, it is on probation: in service only while its `load_bytes`
  // (queued or in flight) is 0, so a link still down costs one request's
  // worth of stall per period, not a full share of the traffic.
  bool InService(int64_t now_ns, uint64_t load_bytes) const {
    const int64_t until = out_until_ns_.load(std::memory_order_relaxed);
    return until == 0 || (until <= now_ns && load_bytes == 0);
  }

 private:
  const int64_t stall_ns_;
  const int64_t retry_ns_;
  std::atomic<double> throughput_{0};
  std::atomic<int64_t> throughput_at_ns_{0};
  int64_t sample_start_ns_ = 0;  // 0: no window under way
  uint64_t sample_start_bytes_ = 0;
  uint64_t sampled_done_ = 0;  // completed_bytes at the last Sample
  bool had_backlog_ = false;   // the last Sample saw a backlog
  std::atomic<int64_t> last_progress_ns_{0};  // last completion, or first post into an idle rail
  std::atomic<int64_t> last_completed_ns_{0};  // last completion only
  std::atomic<int64_t> out_until_ns_{0};      // 0: in service
};

}  // namespace kvfabric::fabric
