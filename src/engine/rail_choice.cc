#include "engine/rail_choice.h"

#include <algorithm>

namespace kvfabric::engine {

size_t CandidateRails(std::span<const size_t> usable, const RailView* views, int exclude, bool fallback,
                      size_t* out) {
  auto take = [&](auto ok) {
    size_t n = 0;
    for (size_t r : usable)
      if (static_cast<int>(r) != exclude && ok(views[r])) out[n++] = r;
    return n;
  };
  auto serving = [](const RailView& v) { return v.in_service && v.up_for_peer; };
  size_t n = take([&](const RailView& v) { return v.near && serving(v); });
  if (n == 0) n = take(serving);
  if (n == 0 && fallback) n = take([](const RailView&) { return true; });
  return n;
}

size_t PickRail(std::span<const size_t> cand, const RailView* views, size_t len, const uint64_t* planned,
                size_t first) {
  double lo = 0, hi = 0;
  for (size_t i = 0; i < cand.size(); ++i) {
    const double s = views[cand[i]].speed;
    lo = i == 0 ? s : std::min(lo, s);
    hi = std::max(hi, s);
  }
  const bool by_speed = lo > 0 && hi >= 1.3 * lo;
  const size_t n = cand.size();
  size_t best = cand[first % n];
  double best_cost = 0;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (first + k) % n;
    const size_t r = cand[i];
    double cost = static_cast<double>(views[r].load_bytes + planned[r] + len);
    if (by_speed) cost /= views[r].speed;
    if (k == 0 || cost < best_cost) {
      best = r;
      best_cost = cost;
    }
  }
  return best;
}

size_t PairedRails(std::span<const size_t> rails, const PairView* pairs, size_t* out) {
  bool any_in_place = false;
  for (size_t r : rails) any_in_place = any_in_place || (pairs[r].peer_rail >= 0 && pairs[r].local_in_place);
  size_t n = 0;
  for (size_t r : rails) {
    const PairView& p = pairs[r];
    if (p.peer_rail < 0) continue;
    if (p.local_in_place || (!any_in_place && p.local_staged)) out[n++] = r;
  }
  return n;
}

}  // namespace kvfabric::engine
