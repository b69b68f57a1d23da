#include "store/client/routing.h"

#include <algorithm>
#include <string_view>

namespace kvfabric::store {
namespace {

constexpr std::string_view kAbsent = "store: no page under key '";

}  // namespace

Status Absent(const std::string& key) { return Status::NotFound(std::string(kAbsent) + key + "'"); }

bool IsAbsent(const Status& s) { return s.code() == Status::Code::kNotFound && s.message().starts_with(kAbsent); }

size_t Router::MemberFor(const MemberSnapshot& snap, const std::vector<std::string>& keys, size_t i, Route route,
                         std::vector<Status>* results) const {
  const size_t none = snap.nodes.size();
  size_t home = snap.placement.Home(keys[i]);
  if (route.kind == Route::Kind::kRanked && route.rank > 0 && home < none) {
    const std::vector<size_t> ranked = snap.placement.Place(keys[i], route.rank + 1);
    if (ranked.size() <= route.rank) {
      (*results)[i] = Status::Unavailable("store: key '" + keys[i] + "' asks for copy " +
                                          std::to_string(route.rank + 1) + " but only " +
                                          std::to_string(ranked.size()) + " member(s) with a pool are reachable");
      return none;
    }
    home = ranked[route.rank];
  }
  if (route.kind == Route::Kind::kNamed) {
    const std::string& name = (*route.named)[i];
    const auto named =
        std::find_if(snap.nodes.begin(), snap.nodes.end(), [&](const auto& node) { return node->name == name; });
    if (named == snap.nodes.end()) {
      (*results)[i] = Status::Unavailable("store: member " + name + " of key '" + keys[i] + "' is not reachable");
      return none;
    }
    home = static_cast<size_t>(named - snap.nodes.begin());
  }
  if (route == Route::PreviousHome() && home < none) {
    home = snap.PreviousHome(keys[i], home);
    if (home >= none) {  // the members changed since the home was asked
      (*results)[i] = Absent(keys[i]);
      return none;
    }
  }
  if (home >= none) (*results)[i] = Status::Unavailable("store: no member with a pool is reachable: " + snap.why_none);
  return home;
}

std::vector<NodeCall> Router::Group(const std::vector<std::string>& keys, std::vector<Status>* results,
                                    Route route) const {
  std::vector<size_t> all(keys.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return Group(keys, all, results, route);
}

std::vector<NodeCall> Router::Group(const std::vector<std::string>& keys, const std::vector<size_t>& which,
                                    std::vector<Status>* results, Route route) const {
  const auto snap = members_->Current();
  std::vector<NodeCall> calls(snap->nodes.size());
  for (size_t i : which) {
    if (!(*results)[i].ok()) continue;
    const size_t member = MemberFor(*snap, keys, i, route, results);
    if (member < calls.size()) calls[member].keys.push_back(i);
  }
  if (maps_for_.exchange(snap.get(), std::memory_order_relaxed) != snap.get()) {
    std::vector<SegmentHandle> live;
    for (const auto& node : snap->nodes) live.push_back(node->segment);
    maps_->Keep(live);
  }
  std::vector<NodeCall> used;
  for (size_t n = 0; n < calls.size(); ++n) {
    if (calls[n].keys.empty()) continue;
    calls[n].node = snap->nodes[n];
    maps_->Attach(calls[n].node->name, calls[n].node->info, calls[n].node->segment);
    used.push_back(std::move(calls[n]));
  }
  return used;
}

std::vector<size_t> Router::TakeCallTo(std::vector<NodeCall>* calls, const std::string* member) {
  std::vector<size_t> keys;
  if (member == nullptr) return keys;
  std::erase_if(*calls, [&](NodeCall& call) {
    if (call.node->name != *member) return false;
    keys = std::move(call.keys);
    return true;
  });
  return keys;
}

}  // namespace kvfabric::store
