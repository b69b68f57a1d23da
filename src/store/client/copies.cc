// StoreClient's copies of a page: a PUT of n copies stores them on the n
// members placement ranks first for the key (its home, then the next), all
// at once, each as a PUT to its home would be; a GET whose home fails the
// key reads the next copy; a PUT of fewer copies than KVF_STORE_MAX_COPIES
// removes what an older PUT of more left past them, so no GET ever reads an
// older page there. When a member leaves, the next-ranked member becomes
// the key's home (rendezvous placement moves only the keys the member
// ranked first for) and holds the copy already. With one copy, a read
// whose home cannot be reached still asks the next-ranked member: that is
// the key's home once the first is out of the view, where a writer that
// saw it go, or the hand-over of a member leaving, put the page.
#include <algorithm>
#include <future>

#include "store/members/pick.h"
#include "store/client/store_client.h"

namespace kvfabric::store {

void StoreClient::PutCopies(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& sources,
                            const std::vector<Memory>& memory, const std::vector<size_t>& which, uint32_t copies,
                            std::vector<Status>* results) {
  std::vector<std::vector<Status>> others(copies > 1 ? copies - 1 : 0, *results);
  std::vector<std::future<void>> puts;
  for (uint32_t rank = 1; rank < copies; ++rank)
    puts.push_back(std::async(std::launch::async, [&, rank] {
      PutFrom(keys, sources, memory, which, &others[rank - 1], true, Route::Ranked(rank));
    }));
  PutFrom(keys, sources, memory, which, results);
  for (auto& put : puts) put.wait();
  for (size_t i : which) {
    for (uint32_t rank = 1; rank < copies && (*results)[i].ok(); ++rank) {
      const Status& copy = others[rank - 1][i];
      if (!copy.ok())
        (*results)[i] = copy.Annotate("copy " + std::to_string(rank + 1) + " of " + std::to_string(copies));
    }
  }
}

void StoreClient::RemoveCopiesPast(const std::vector<std::string>& keys, const std::vector<Status>& results,
                                   uint32_t copies) {
  std::vector<size_t> put;
  for (size_t i = 0; i < keys.size(); ++i)
    if (results[i].ok()) put.push_back(i);
  if (put.empty()) return;
  std::vector<NodeCall> calls;  // one per member, whatever ranks it has for the keys
  std::vector<std::vector<std::string_view>> names;
  for (uint32_t rank = copies; rank < static_cast<uint32_t>(parts_.settings.store_max_copies); ++rank) {
    std::vector<Status> placed(keys.size());  // a key with no member of that rank is skipped
    for (NodeCall& call : parts_.router.Group(keys, put, &placed, Route::Ranked(rank))) {
      auto same = std::find_if(calls.begin(), calls.end(), [&](const NodeCall& c) { return c.node == call.node; });
      if (same == calls.end()) {
        calls.push_back(NodeCall{call.node, {}, {}, {}, {}});
        names.emplace_back();
        same = calls.end() - 1;
      }
      for (size_t i : call.keys) names[same - calls.begin()].push_back(keys[i]);
    }
  }
  for (size_t n = 0; n < calls.size(); ++n) calls[n].request = EncodeKeys(Op::kRemove, names[n]);
  // Answers unused: a member that cannot be reached now holds nothing a
  // GET reads before the members ranked ahead of it fail.
  if (!calls.empty()) parts_.caller.CallAll(&calls, net::DeadlineIn(parts_.settings.store_deadline_ms), Wait::kPollFirst);
}

void StoreClient::TryOtherCopies(const MemberSnapshot& asked, const std::vector<std::string>& keys,
                                 std::vector<Status>* results, const CopyAttempt& attempt) {
  // With one copy, only a home out of reach sends a key on: the member
  // ranked next is its home while the first is out of the view.
  const auto copies = static_cast<size_t>(parts_.settings.store_max_copies);
  std::vector<size_t> failed;
  for (size_t i = 0; i < keys.size(); ++i) {
    const Status& s = (*results)[i];
    if (!s.ok() && !IsAbsent(s) && s.code() != Status::Code::kInvalidArgument && (copies > 1 || Unreachable(s)))
      failed.push_back(i);
  }
  const size_t most = std::max<size_t>(copies, 2);
  for (size_t rank = 1; rank < most && !failed.empty(); ++rank) {
    std::vector<size_t> which;
    std::vector<std::string> members;
    for (size_t i : failed) {
      const std::vector<size_t> ranked = asked.placement.Place(keys[i], rank + 1);
      if (ranked.size() <= rank) continue;
      which.push_back(i);
      members.push_back(asked.nodes[ranked[rank]]->name);
    }
    if (which.empty()) return;
    const std::vector<Status> found = attempt(Route::Named(&members), which);
    failed.clear();
    for (size_t j = 0; j < which.size(); ++j) {
      if (found[j].ok()) (*results)[which[j]] = found[j];
      else failed.push_back(which[j]);
    }
  }
}

void StoreClient::ReadOtherCopies(const MemberSnapshot& asked, const std::vector<std::string>& keys,
                                  const std::vector<std::vector<StoreBuffer>>& buffers, std::vector<Status>* results,
                                  std::vector<uint64_t>* lengths) {
  TryOtherCopies(asked, keys, results, [&](Route route, const std::vector<size_t>& which) {
    std::vector<Status> found;
    std::vector<uint64_t> length;
    GetVia(route, Pick(keys, which), Pick(buffers, which), &found, &length);
    for (size_t j = 0; j < which.size(); ++j)
      if (found[j].ok()) (*lengths)[which[j]] = length[j];
    return found;
  });
}

void StoreClient::LocateOtherCopies(const MemberSnapshot& asked, const std::vector<std::string>& keys,
                                    std::vector<StorePage>* pages, std::vector<Status>* results) {
  TryOtherCopies(asked, keys, results, [&](Route route, const std::vector<size_t>& which) {
    std::vector<Status> found;
    std::vector<StorePage> page;
    LocateVia(route, Pick(keys, which), &page, &found);
    for (size_t j = 0; j < which.size(); ++j)
      if (found[j].ok()) (*pages)[which[j]] = page[j];
    return found;
  });
}

void StoreClient::ExistsOnOtherCopies(const MemberSnapshot& asked, const std::vector<std::string>& keys,
                                      std::vector<Status>* failed, std::vector<bool>* found, uint64_t* local) {
  for (size_t i = 0; i < keys.size(); ++i)
    if ((*found)[i]) (*failed)[i] = Status::OK();  // found on a previous home meanwhile
  TryOtherCopies(asked, keys, failed, [&](Route route, const std::vector<size_t>& which) {
    const std::vector<std::string> picked = Pick(keys, which);
    std::vector<bool> there;
    std::vector<Status> out;
    ExistsVia(route, picked, &there, local, nullptr, &out);
    for (size_t j = 0; j < which.size(); ++j) {
      if (there[j]) (*found)[which[j]] = true;
      else if (out[j].ok()) out[j] = Absent(picked[j]);
    }
    return out;
  });
}

}  // namespace kvfabric::store
