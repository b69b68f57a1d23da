#include "store/client/grant_book.h"

#include <algorithm>

namespace kvfabric::store {

using Clock = std::chrono::steady_clock;

std::vector<uint64_t> SlotsToAskFor(const std::vector<uint64_t>& page_lengths, uint64_t pool_bytes) {
  uint64_t bytes = 0;
  for (uint64_t n : page_lengths) bytes += n;
  if (page_lengths.empty() || page_lengths.size() > kMaxGrantSlots || bytes > pool_bytes / kGrantPoolShare) return {};
  std::vector<uint64_t> slots = page_lengths;
  slots.insert(slots.end(), page_lengths.size() / 2 + 2, page_lengths.front());
  return slots;
}

bool FitSlots(const std::vector<uint64_t>& slot_lengths, const std::vector<uint64_t>& page_lengths,
              std::vector<size_t>* slot_of) {
  if (slot_lengths.size() < page_lengths.size()) return false;
  std::unordered_map<uint64_t, std::vector<size_t>> free;  // by length, lowest slot last
  for (size_t s = slot_lengths.size(); s-- > 0;) free[slot_lengths[s]].push_back(s);
  std::vector<size_t> taken(page_lengths.size());
  for (size_t j = 0; j < page_lengths.size(); ++j) {
    auto f = free.find(page_lengths[j]);
    if (f == free.end() || f->second.empty()) return false;
    taken[j] = f->second.back();
    f->second.pop_back();
  }
  *slot_of = std::move(taken);
  return true;
}

GrantBook::GrantBook(std::function<uint64_t(const std::string& home)> losses_of) : losses_of_(std::move(losses_of)) {}

void GrantBook::TakeStaleLocked(const std::string& home, std::vector<Credit>* held,
                                const std::function<bool(const Credit&)>& stale, std::vector<Credit>* back) {
  const uint64_t losses = losses_of_(home);
  for (Credit& c : *held)
    if (stale(c) && c.losses == losses) back->push_back(c);
  std::erase_if(*held, stale);
}

std::optional<GrantBook::Taken> GrantBook::Take(const NodeView& home, const std::vector<uint64_t>& page_lengths,
                                                std::vector<Credit>* back) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = credits_.find(home.name);
  if (it == credits_.end()) return std::nullopt;
  std::vector<Credit>& held = it->second;
  const auto now = Clock::now();
  // Past use, or of an earlier life of the home, or granted over a
  // connection that has ended since (the home may have restarted: its
  // grant would be in the old engine, where WRITEs hang until the deadline).
  const uint64_t losses = losses_of_(home.name);
  TakeStaleLocked(
      home.name, &held,
      [&](const Credit& c) { return now >= c.usable_until || c.epoch != home.info.epoch || c.losses != losses; },
      back);
  for (size_t h = 0; h < held.size(); ++h) {
    Credit& credit = held[h];
    Taken taken;
    if (!FitSlots(credit.lengths, page_lengths, &taken.slot_of)) continue;
    taken.slots = Slots{credit.ticket, credit.epoch, std::vector<Status>(credit.addrs.size(), Status::OK()),
                        std::move(credit.addrs)};
    held.erase(held.begin() + static_cast<std::ptrdiff_t>(h));
    return taken;
  }
  return std::nullopt;
}

void GrantBook::Keep(Credit credit, std::vector<Credit>* back) {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<Credit>& held = credits_[credit.node->name];
  held.push_back(std::move(credit));
  if (held.size() > kCreditsPerHome) {
    back->push_back(std::move(held.front()));
    held.erase(held.begin());
  }
}

std::vector<Credit> GrantBook::Sweep() {
  const auto now = Clock::now();
  const int64_t now_ns = now.time_since_epoch().count();
  int64_t due = next_sweep_ns_.load(std::memory_order_relaxed);
  if (now_ns < due ||
      !next_sweep_ns_.compare_exchange_strong(due, now_ns + std::chrono::nanoseconds(kSweepEvery).count()))
    return {};
  std::vector<Credit> back;
  std::lock_guard<std::mutex> g(mu_);
  for (auto& [home, held] : credits_)
    TakeStaleLocked(home, &held, [&](const Credit& c) { return now >= c.usable_until; }, &back);
  return back;
}

std::vector<Credit> GrantBook::TakeAll() {
  std::vector<Credit> all;
  std::lock_guard<std::mutex> g(mu_);
  for (auto& [home, held] : credits_)
    for (Credit& c : held) all.push_back(std::move(c));
  credits_.clear();
  return all;
}

}  // namespace kvfabric::store
