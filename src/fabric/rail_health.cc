#include "fabric/rail_health.h"

namespace kvfabric::fabric {

bool StallIsThePeers(bool in_flight, bool waiting, int64_t latest_refusal_ns, int64_t last_completed_ns) {
  return !in_flight && waiting && latest_refusal_ns != 0 && last_completed_ns > latest_refusal_ns;
}

StalledPeerAction ActionOnStalledPeer(bool may_cut_connections, bool all_may_move) {
  if (!may_cut_connections) return StalledPeerAction::kOffer;
  return all_may_move ? StalledPeerAction::kCut : StalledPeerAction::kLeave;
}

bool RailHealth::Completed(int64_t now_ns) {
  last_progress_ns_.store(now_ns, std::memory_order_relaxed);
  last_completed_ns_.store(now_ns, std::memory_order_relaxed);
  if (out_until_ns_.load(std::memory_order_relaxed) == 0) return false;
  out_until_ns_.store(0);
  return true;
}

void RailHealth::Sample(int64_t now, uint64_t load_bytes, uint64_t done) {
  const bool completed = done != sampled_done_;
  sampled_done_ = done;
  const bool backlog_began = !had_backlog_;
  had_backlog_ = load_bytes >= kBacklogBytes;
  if (load_bytes < kBacklogBytes) {
    sample_start_ns_ = 0;  // the window must see a backlog from start to end
    return;
  }
  // A window starts where the backlog began or at a completion, and ends at
  // a completion: large slices complete in lumps, and a window from one
  // poll to another would count three lumps or four in the same time.
  if (sample_start_ns_ == 0) {
    if (completed || backlog_began) {
      sample_start_ns_ = now;
      sample_start_bytes_ = done;
    }
    return;
  }
  if (!completed || now - sample_start_ns_ < kWindowNs) return;
  const double sample =
      static_cast<double>(done - sample_start_bytes_) * 1e9 / static_cast<double>(now - sample_start_ns_);
  const double old = throughput_.load(std::memory_order_relaxed);
  const bool fresh = now - throughput_at_ns_.load(std::memory_order_relaxed) < kFreshWindows * kWindowNs;
  throughput_.store(fresh && old > 0 ? 0.5 * old + 0.5 * sample : sample, std::memory_order_relaxed);
  throughput_at_ns_.store(now, std::memory_order_relaxed);
  sample_start_ns_ = now;
  sample_start_bytes_ = done;
}

bool RailHealth::CheckStall(int64_t now, bool work_in_flight) {
  if (stall_ns_ <= 0 || !work_in_flight) return false;
  if (now - last_progress_ns_.load(std::memory_order_relaxed) < stall_ns_) return false;
  last_progress_ns_.store(now);  // the next check is one stall period away
  out_until_ns_.store(now + retry_ns_);
  return true;
}

}  // namespace kvfabric::fabric
