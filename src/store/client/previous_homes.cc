// StoreClient's calls that read or change a key where it lives: on its home,
// and, for a key that misses there while its home is new to the store, on
// the home it had before. Processes that had not yet seen the new member
// put such keys there; the node holding them hands them over within
// KVF_STORE_HANDOFF_MS (Handoff), and until then they are found where they
// are. A PUT to a new home removes the key from the previous one (unless
// it holds one of the PUT's copies: copies.cc).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <string_view>

#include "store/members/pick.h"
#include "store/client/store_client.h"

namespace kvfabric::store {
namespace {
// The keys whose home holds no page of them.
std::vector<size_t> Missed(const std::vector<Status>& results) {
  std::vector<size_t> out;
  for (size_t i = 0; i < results.size(); ++i)
    if (IsAbsent(results[i])) out.push_back(i);
  return out;
}

// Looks for the keys `moved` (absent on their new home) on their previous
// home, then for those absent there too on the home once more: a
// hand-over drops the previous home's copy only once the home has
// committed it, so a page being handed over is never missed on both when
// they are asked in this order. `ask(previous, which)` asks the keys
// `which` (indices into the batch), on their previous home or their home,
// takes its answers and returns the keys still absent.
template <typename Ask>
void FollowHandOver(const std::vector<size_t>& moved, Ask ask) {
  if (moved.empty()) return;
  if (const std::vector<size_t> absent = ask(true, moved); !absent.empty()) (void)ask(false, absent);
}
}  // namespace

std::vector<size_t> StoreClient::HomedOnNewMembers(const std::vector<std::string>& keys,
                                                   const std::vector<size_t>& which) const {
  return HomedOnNewMembers(keys, which, *parts_.members->Current());
}

std::vector<size_t> StoreClient::HomedOnNewMembers(const std::vector<std::string>& keys,
                                                   const std::vector<size_t>& which,
                                                   const MemberSnapshot& snap) const {
  std::vector<size_t> out;
  if (which.empty()) return out;
  const auto now = std::chrono::steady_clock::now();
  const std::chrono::milliseconds window(parts_.settings.store_handoff_ms);
  if (!snap.AnyRecent(now, window)) return out;
  const std::vector<bool> recent = snap.Recent(now, window);
  for (size_t i : which) {
    const size_t home = snap.placement.Home(keys[i]);
    if (home >= recent.size() || !recent[home]) continue;
    if (snap.PreviousHome(keys[i], home) < snap.nodes.size()) out.push_back(i);
  }
  return out;
}

void StoreClient::Get(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                      std::vector<Status>* results, std::vector<uint64_t>* lengths) {
  const std::shared_ptr<const MemberSnapshot> asked = parts_.members->Current();  // ranks the other copies
  GetVia(Route::Home(), keys, buffers, results, lengths);
  FollowHandOver(HomedOnNewMembers(keys, Missed(*results)), [&](bool previous, const std::vector<size_t>& which) {
    std::vector<Status> found;
    std::vector<uint64_t> length;
    GetVia(previous ? Route::PreviousHome() : Route::Home(), Pick(keys, which), Pick(buffers, which), &found, &length);
    std::vector<size_t> absent;
    for (size_t j = 0; j < which.size(); ++j) {
      if (IsAbsent(found[j])) absent.push_back(which[j]);
      if (found[j].code() == Status::Code::kNotFound) continue;  // the home's first answer stands
      (*results)[which[j]] = found[j];
      (*lengths)[which[j]] = length[j];
    }
    return absent;
  });
  ReadOtherCopies(*asked, keys, buffers, results, lengths);
  ClientCounters::Add(parts_.counters.get_keys, keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((*results)[i].ok()) {
      ClientCounters::Add(parts_.counters.get_hits, 1);
      ClientCounters::Add(parts_.counters.get_bytes, (*lengths)[i]);
    } else if (IsAbsent((*results)[i])) {
      ClientCounters::Add(parts_.counters.misses_absent, 1);
    } else if ((*results)[i].code() != Status::Code::kNotFound) {
      ClientCounters::Add(parts_.counters.get_failures, 1);
    }
  }
}

void StoreClient::Locate(const std::vector<std::string>& keys, std::vector<StorePage>* pages,
                         std::vector<Status>* results) {
  const std::shared_ptr<const MemberSnapshot> asked = parts_.members->Current();  // ranks the other copies
  LocateVia(Route::Home(), keys, pages, results);
  FollowHandOver(HomedOnNewMembers(keys, Missed(*results)), [&](bool previous, const std::vector<size_t>& which) {
    std::vector<StorePage> found;
    std::vector<Status> status;
    LocateVia(previous ? Route::PreviousHome() : Route::Home(), Pick(keys, which), &found, &status);
    std::vector<size_t> absent;
    for (size_t j = 0; j < which.size(); ++j) {
      if (IsAbsent(status[j])) absent.push_back(which[j]);
      if (!status[j].ok()) continue;
      (*results)[which[j]] = status[j];
      (*pages)[which[j]] = found[j];
    }
    return absent;
  });
  LocateOtherCopies(*asked, keys, pages, results);
}

void StoreClient::Exists(const std::vector<std::string>& keys, std::vector<bool>* found) {
  const std::shared_ptr<const MemberSnapshot> asked = parts_.members->Current();  // ranks the other copies
  uint64_t local = 0;
  std::vector<Status> unasked;
  ExistsVia(Route::Home(), keys, found, &local, nullptr, &unasked);
  std::vector<size_t> absent;
  for (size_t i = 0; i < keys.size(); ++i)
    if (!(*found)[i]) absent.push_back(i);
  FollowHandOver(HomedOnNewMembers(keys, absent), [&](bool previous, const std::vector<size_t>& which) {
    std::vector<bool> there;
    ExistsVia(previous ? Route::PreviousHome() : Route::Home(), Pick(keys, which), &there, &local);
    std::vector<size_t> still;
    for (size_t j = 0; j < which.size(); ++j) {
      if (there[j]) (*found)[which[j]] = true;
      else still.push_back(which[j]);
    }
    return still;
  });
  ExistsOnOtherCopies(*asked, keys, &unasked, found, &local);
  ClientCounters::Add(parts_.counters.exists_keys, keys.size());
  ClientCounters::Add(parts_.counters.exists_hits, static_cast<uint64_t>(std::count(found->begin(), found->end(), true)));
  ClientCounters::Add(parts_.counters.exists_local, local);
}

void StoreClient::ExistsAtHomes(const std::vector<std::string>& keys, const std::string& except,
                                std::vector<bool>* found) {
  uint64_t local = 0;
  ExistsVia(Route::Home(), keys, found, &local, &except);
}

void StoreClient::RemoveFromPreviousHomes(const std::vector<std::string>& keys, const std::vector<Status>& results,
                                          const std::shared_ptr<const MemberSnapshot>& routed, uint32_t copies) {
  // Every PUT passes here: no work unless a member is new. The removes go
  // by the snapshot the PUT was placed with, and only while it is still
  // the current one: placed by a newer view, the previous home could be
  // where the page just went.
  if (!routed->AnyRecent(std::chrono::steady_clock::now(), std::chrono::milliseconds(parts_.settings.store_handoff_ms)) ||
      parts_.members->Current() != routed)
    return;
  std::vector<size_t> put;
  for (size_t i = 0; i < keys.size(); ++i)
    if (results[i].ok()) put.push_back(i);
  std::vector<std::vector<std::string_view>> by_node(routed->nodes.size());
  for (size_t i : HomedOnNewMembers(keys, put, *routed)) {
    const size_t previous = routed->PreviousHome(keys[i], routed->placement.Home(keys[i]));
    if (copies > 1) {  // a copy just put there stays
      const std::vector<size_t> holders = routed->placement.Place(keys[i], copies);
      if (std::find(holders.begin(), holders.end(), previous) != holders.end()) continue;
    }
    by_node[previous].push_back(keys[i]);
  }
  std::vector<NodeCall> calls;
  for (size_t n = 0; n < by_node.size(); ++n)
    if (!by_node[n].empty()) calls.push_back(NodeCall{routed->nodes[n], {}, EncodeKeys(Op::kRemove, by_node[n]), {}, {}});
  if (calls.empty()) return;
  // Answers unused: a copy a failed remove leaves is found on the home by
  // its hand-over, and dropped.
  parts_.caller.CallAll(&calls, net::DeadlineIn(parts_.settings.store_deadline_ms), Wait::kPollFirst);
}

void StoreClient::HandOverPut(const std::vector<std::string>& keys,
                              const std::vector<std::vector<StoreBuffer>>& buffers, const std::string& except,
                              PutRequest::HandOver hand_over, std::vector<Status>* results) {
  const NodeCaller::Scope scope(&parts_.caller);
  std::vector<Memory> memory;
  CheckBuffers(keys, buffers, results, &memory);
  std::vector<size_t> which;
  for (size_t i = 0; i < keys.size(); ++i)
    if ((*results)[i].ok()) which.push_back(i);
  PullFrom(keys, buffers, which, results, hand_over, &except);
}

void StoreClient::KeyOp(Op op, const std::vector<std::string>& keys, std::vector<Status>* results) {
  KeyOpVia(Route::Home(), op, keys, results);
  // A remove reaches every member that may hold a copy: OK when any had one.
  for (uint32_t rank = 1; op == Op::kRemove && rank < static_cast<uint32_t>(parts_.settings.store_max_copies); ++rank) {
    std::vector<Status> copy;
    KeyOpVia(Route::Ranked(rank), op, keys, &copy);
    for (size_t i = 0; i < keys.size(); ++i)
      if (copy[i].ok() && (*results)[i].code() == Status::Code::kNotFound) (*results)[i] = copy[i];
  }
  // A pin or unpin that missed is tried where the page may still be; a
  // remove goes there too when it found the page on the home, so that no
  // older copy is handed over to the home afterwards.
  std::vector<size_t> candidates;
  for (size_t i = 0; i < keys.size(); ++i) {
    const Status::Code code = (*results)[i].code();
    if (code == Status::Code::kNotFound || (op == Op::kRemove && code == Status::Code::kOk)) candidates.push_back(i);
  }
  FollowHandOver(HomedOnNewMembers(keys, candidates), [&](bool previous, const std::vector<size_t>& which) {
    std::vector<Status> there;
    KeyOpVia(previous ? Route::PreviousHome() : Route::Home(), op, Pick(keys, which), &there);
    std::vector<size_t> absent;
    for (size_t j = 0; j < which.size(); ++j) {
      if (there[j].ok()) (*results)[which[j]] = there[j];
      else if (there[j].code() == Status::Code::kNotFound) absent.push_back(which[j]);
    }
    return absent;
  });
}

}  // namespace kvfabric::store
