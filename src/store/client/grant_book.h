// GrantBook: the slots homes granted this process for its next PUTs there,
// asked for in the commit of the last one (KVF_STORE_PUT_GRANTS). A PUT
// whose pages all fit a credit WRITEs at once and costs one round trip,
// not two. The book only keeps credits and says which to give back; the
// client sends those (a commit of nothing), since their homes hold the
// slots until then. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/members/member_view.h"
#include "store/wire/messages.h"

namespace kvfabric::store {

// The slots to ask a home to grant for the next PUT there, given the
// lengths of this PUT's pages to it and the home's pool size: those
// lengths, then half again as many slots (plus two) of the first length,
// since the next batch may send more pages there. None when there are no
// pages, more than kMaxGrantSlots, or more bytes than 1/kGrantPoolShare of
// the pool: a home grants no more than that, so such a batch would get
// slots it could never use.
std::vector<uint64_t> SlotsToAskFor(const std::vector<uint64_t>& page_lengths, uint64_t pool_bytes);

// Which slot of a credit each page takes: the lowest free slot of exactly
// its length, in page order. True with slot_of[j] for page j when every
// page finds one; false (slot_of unchanged) when any does not.
bool FitSlots(const std::vector<uint64_t>& slot_lengths, const std::vector<uint64_t>& page_lengths,
              std::vector<size_t>* slot_of);

struct Credit {
  std::shared_ptr<const NodeView> node;
  uint64_t ticket = 0, epoch = 0;
  // ControlClient::Losses of the home when the commit that asked went: the
  // grant is used only while that connection lasts, so never one of a home
  // that restarted since.
  uint64_t losses = 0;
  std::vector<uint64_t> addrs, lengths;
  std::chrono::steady_clock::time_point usable_until;  // kGrantUsableMs (at most the deadline) after it came
};

class GrantBook {
 public:
  static constexpr size_t kCreditsPerHome = 4;
  static constexpr auto kSweepEvery = std::chrono::milliseconds(100);
  // `losses_of(home)`: ControlClient::Losses, how many connections to the
  // home have ended so far.
  explicit GrantBook(std::function<uint64_t(const std::string& home)> losses_of);

  // A credit of `home` (of its epoch, still usable, granted over the
  // connection that still lasts) whose slots fit every page of
  // `page_lengths` (FitSlots): its slots as a reservation, `slot_of` per
  // page, and the credit leaves the book. Credits no PUT may use any more
  // leave it too, into `back` when their homes still hold them.
  struct Taken {
    Slots slots;
    std::vector<size_t> slot_of;
  };
  std::optional<Taken> Take(const NodeView& home, const std::vector<uint64_t>& page_lengths,
                            std::vector<Credit>* back);
  // Keeps a credit for the next PUT; the oldest of its home goes into
  // `back` when the home has kCreditsPerHome.
  void Keep(Credit credit, std::vector<Credit>* back);
  // At most every kSweepEvery (else nothing): the credits past use whose
  // homes still hold them, to give back (an idle writer holds no pool space
  // for long); those whose connection ended are dropped.
  std::vector<Credit> Sweep();
  // Every credit, to give back (at close).
  std::vector<Credit> TakeAll();

 private:
  // Takes the credits `stale` marks out of `held` (mu_ held); those
  // granted over a connection to `home` that still lasts go into `back`.
  void TakeStaleLocked(const std::string& home, std::vector<Credit>* held,
                       const std::function<bool(const Credit&)>& stale, std::vector<Credit>* back);

  const std::function<uint64_t(const std::string&)> losses_of_;
  std::atomic<int64_t> next_sweep_ns_{0};
  std::mutex mu_;
  std::unordered_map<std::string, std::vector<Credit>> credits_;  // by home, oldest first
};

}  // namespace kvfabric::store
