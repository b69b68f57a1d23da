#include "store/members/placement.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

namespace kvfabric::store {
namespace {

// Mixes the key's hash with a member's seed into a well-spread 64-bit value
// (the xxh3 avalanche over both), then into (0, 1): never 0 nor 1, so the
// logarithm below is finite and negative.
double UnitInterval(uint64_t key_hash, uint64_t seed) {
  const uint64_t both[2] = {key_hash, seed};
  const uint64_t h = XXH3_64bits(both, sizeof(both));
  return (static_cast<double>(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);  // 53 bits
}

}  // namespace

Placement::Placement(std::vector<Member> members) {
  std::unordered_set<std::string> seen;
  uint64_t weight = 0;
  for (auto& m : members) {
    if (!seen.insert(m.name).second) continue;
    seeds_.push_back(XXH3_64bits(m.name.data(), m.name.size()));
    if (m.pool_bytes > 0) {
      equal_weights_ = equal_weights_ && (weight == 0 || m.pool_bytes == weight);
      weight = m.pool_bytes;
    }
    members_.push_back(std::move(m));
  }
}

double Placement::Score(uint64_t key_hash, size_t member) const {
  const double u = UnitInterval(key_hash, seeds_[member]);
  // -w / ln(u) grows with u: with one weight for all, u alone ranks the
  // members the same way, without a logarithm per member and key.
  if (equal_weights_) return u;
  const double weight = static_cast<double>(members_[member].pool_bytes);
  return -weight / std::log(u);
}

bool Placement::Ranks(double score_a, size_t a, double score_b, size_t b) const {
  if (score_a != score_b) return score_a > score_b;
  return members_[a].name < members_[b].name;
}

std::vector<size_t> Placement::Place(std::string_view key, size_t replicas) const {
  const uint64_t key_hash = XXH3_64bits(key.data(), key.size());
  std::vector<std::pair<double, size_t>> scored;
  scored.reserve(members_.size());
  for (size_t i = 0; i < members_.size(); ++i)
    if (members_[i].pool_bytes > 0) scored.emplace_back(Score(key_hash, i), i);
  const size_t n = std::min(replicas, scored.size());
  auto better = [this](const std::pair<double, size_t>& a, const std::pair<double, size_t>& b) {
    return Ranks(a.first, a.second, b.first, b.second);
  };
  std::partial_sort(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(n), scored.end(), better);
  std::vector<size_t> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(scored[i].second);
  return out;
}

size_t Placement::Home(std::string_view key) const { return HomeWithout(key, {}); }

size_t Placement::HomeWithout(std::string_view key, const std::vector<bool>& left_out) const {
  // Place(key, 1) without its allocations: this runs once per key of a batch.
  const uint64_t key_hash = XXH3_64bits(key.data(), key.size());
  size_t best = members_.size();
  double best_score = 0;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i].pool_bytes == 0 || (i < left_out.size() && left_out[i])) continue;
    const double score = Score(key_hash, i);
    if (best == members_.size() || Ranks(score, i, best_score, best)) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

}  // namespace kvfabric::store
