// StoreClient's calls that read or change a key where it lives: on its home,
// and, for a key that misses there while its home is new to the store, on
// the home it had before. Processes that had not yet seen the new member
// put such keys there; the node holding them hands them over within
// KVF_STORE_HANDOFF_MS (Handoff), and until then they are found where they
// are. A PUT to a new home removes the key from the previous one.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <string_view>

#include "store/store_client.h"

namespace kvfabric::store {
namespace {

template <typename T>
std::vector<T> Pick(const std::vector<T>& all, const std::vector<size_t>& which) {
  std::vector<T> out;
  out.reserve(which.size());
  for (size_t i : which) out.push_back(all[i]);
  return out;
}

constexpr std::string_view kAbsent = "store: no page under key '";

}  // namespace

Status StoreClient::Absent(const std::string& key) { return Status::NotFound(std::string(kAbsent) + key + "'"); }

bool StoreClient::IsAbsent(const Status& s) {
  return s.code() == Status::Code::kNotFound && s.message().starts_with(kAbsent);
}

namespace {
// The keys whose home holds no page of them.
std::vector<size_t> Missed(const std::vector<Status>& results) {
  std::vector<size_t> out;
  for (size_t i = 0; i < results.size(); ++i)
    if (StoreClient::IsAbsent(results[i])) out.push_back(i);
  return out;
}
}  // namespace

std::vector<size_t> StoreClient::HomedOnNewMembers(const std::vector<std::string>& keys,
                                                   const std::vector<size_t>& which) const {
  std::vector<size_t> out;
  if (which.empty()) return out;
  const auto snap = members_->Current();
  const auto now = std::chrono::steady_clock::now();
  const std::chrono::milliseconds window(settings_.store_handoff_ms);
  if (!snap->AnyRecent(now, window)) return out;
  const std::vector<bool> recent = snap->Recent(now, window);
  for (size_t i : which) {
    const size_t home = snap->placement.Home(keys[i]);
    if (home >= recent.size() || !recent[home]) continue;
    if (snap->PreviousHome(keys[i], home) < snap->nodes.size()) out.push_back(i);
  }
  return out;
}

void StoreClient::Get(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                      std::vector<Status>* results, std::vector<uint64_t>* lengths) {
  GetVia(Route::kHome, keys, buffers, results, lengths);
  if (const std::vector<size_t> again = HomedOnNewMembers(keys, Missed(*results)); !again.empty()) {
    std::vector<Status> found;
    std::vector<uint64_t> length;
    GetVia(Route::kPreviousHome, Pick(keys, again), Pick(buffers, again), &found, &length);
    for (size_t j = 0; j < again.size(); ++j) {
      if (found[j].code() == Status::Code::kNotFound) continue;  // the home's answer stands
      (*results)[again[j]] = found[j];
      (*lengths)[again[j]] = length[j];
    }
  }
  Add(counters_.get_keys, keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((*results)[i].ok()) {
      Add(counters_.get_hits, 1);
      Add(counters_.get_bytes, (*lengths)[i]);
    } else if (IsAbsent((*results)[i])) {
      Add(counters_.misses_absent, 1);
    } else if ((*results)[i].code() != Status::Code::kNotFound) {
      Add(counters_.get_failures, 1);
    }
  }
}

void StoreClient::Locate(const std::vector<std::string>& keys, std::vector<StorePage>* pages,
                         std::vector<Status>* results) {
  LocateVia(Route::kHome, keys, pages, results);
  if (const std::vector<size_t> again = HomedOnNewMembers(keys, Missed(*results)); !again.empty()) {
    std::vector<StorePage> found;
    std::vector<Status> status;
    LocateVia(Route::kPreviousHome, Pick(keys, again), &found, &status);
    for (size_t j = 0; j < again.size(); ++j) {
      if (!status[j].ok()) continue;
      (*results)[again[j]] = status[j];
      (*pages)[again[j]] = found[j];
    }
  }
}

void StoreClient::Exists(const std::vector<std::string>& keys, std::vector<bool>* found) {
  uint64_t local = 0;
  ExistsVia(Route::kHome, keys, found, &local);
  std::vector<size_t> absent;
  for (size_t i = 0; i < keys.size(); ++i)
    if (!(*found)[i]) absent.push_back(i);
  if (const std::vector<size_t> again = HomedOnNewMembers(keys, absent); !again.empty()) {
    std::vector<bool> there;
    ExistsVia(Route::kPreviousHome, Pick(keys, again), &there, &local);
    for (size_t j = 0; j < again.size(); ++j)
      if (there[j]) (*found)[again[j]] = true;
  }
  Add(counters_.exists_keys, keys.size());
  Add(counters_.exists_hits, static_cast<uint64_t>(std::count(found->begin(), found->end(), true)));
  Add(counters_.exists_local, local);
}

void StoreClient::ExistsAtHomes(const std::vector<std::string>& keys, const std::string& except,
                                std::vector<bool>* found) {
  uint64_t local = 0;
  ExistsVia(Route::kHome, keys, found, &local, &except);
}

void StoreClient::RemoveFromPreviousHomes(const std::vector<std::string>& keys, const std::vector<Status>& results) {
  if (!members_->Current()->AnyRecent(std::chrono::steady_clock::now(),
                                      std::chrono::milliseconds(settings_.store_handoff_ms)))
    return;  // every PUT passes here: no work unless a member is new
  std::vector<size_t> put;
  for (size_t i = 0; i < keys.size(); ++i)
    if (results[i].ok()) put.push_back(i);
  const std::vector<size_t> again = HomedOnNewMembers(keys, put);
  if (again.empty()) return;
  std::vector<Status> removed;  // a failure leaves a copy that its home's hand-over finds there already
  KeyOpVia(Route::kPreviousHome, Op::kRemove, Pick(keys, again), &removed);
}

void StoreClient::PutIfAbsent(const std::vector<std::string>& keys,
                              const std::vector<std::vector<StoreBuffer>>& buffers, const std::string& except,
                              std::vector<Status>* results) {
  const CallScope scope(&active_calls_);
  std::vector<Memory> memory;
  CheckBuffers(keys, buffers, results, &memory);
  std::vector<size_t> which;
  for (size_t i = 0; i < keys.size(); ++i)
    if ((*results)[i].ok()) which.push_back(i);
  PullFrom(keys, buffers, which, results, true, &except);
}

void StoreClient::KeyOp(Op op, const std::vector<std::string>& keys, std::vector<Status>* results) {
  KeyOpVia(Route::kHome, op, keys, results);
  // A pin or unpin that missed is tried where the page may still be; a
  // remove goes there too when it found the page on the home, so that no
  // older copy is handed over to the home afterwards.
  std::vector<size_t> candidates;
  for (size_t i = 0; i < keys.size(); ++i) {
    const Status::Code code = (*results)[i].code();
    if (code == Status::Code::kNotFound || (op == Op::kRemove && code == Status::Code::kOk)) candidates.push_back(i);
  }
  const std::vector<size_t> again = HomedOnNewMembers(keys, candidates);
  if (again.empty()) return;
  std::vector<Status> there;
  KeyOpVia(Route::kPreviousHome, op, Pick(keys, again), &there);
  for (size_t j = 0; j < again.size(); ++j)
    if (there[j].ok()) (*results)[again[j]] = there[j];
}

}  // namespace kvfabric::store
