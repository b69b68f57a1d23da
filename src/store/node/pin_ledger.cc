#include "store/node/pin_ledger.h"

#include <iterator>

#include "common/text.h"

namespace kvfabric::store {

Status PinLedger::PinAll(uint64_t connection, const std::vector<std::string_view>& keys, PageTable* table,
                         std::vector<bool>* pinned) {
  auto found = by_connection_.find(connection);
  const uint64_t holds = found == by_connection_.end() ? 0 : found->second.total;
  if (holds + keys.size() > limits_.max_pins)
    return Status::Busy(text::Format(
        "store: pinning {} more page(s) would pass the {} pins one client connection may hold (KVF_STORE_MAX_PINS; "
        "this one holds {}); unpin pages first",
        keys.size(), limits_.max_pins, holds));
  KVF_RETURN_IF_ERROR(table->PinAll(keys, limits_.max_pinned_bytes, pinned).Annotate("store"));
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!(*pinned)[i]) continue;
    Held& mine = by_connection_[connection];
    ++mine.keys[std::string(keys[i])];
    ++mine.total;
  }
  return Status::OK();
}

bool PinLedger::Unpin(uint64_t connection, std::string_view key, PageTable* table) {
  auto c = by_connection_.find(connection);
  if (c == by_connection_.end()) return false;
  auto k = c->second.keys.find(std::string(key));
  if (k == c->second.keys.end()) return false;
  --c->second.total;
  if (--k->second == 0) c->second.keys.erase(k);
  if (c->second.keys.empty()) by_connection_.erase(c);
  return table->Unpin(key);
}

void PinLedger::Forget(std::string_view key) {
  const std::string k(key);
  for (auto c = by_connection_.begin(); c != by_connection_.end();) {
    if (auto it = c->second.keys.find(k); it != c->second.keys.end()) {
      c->second.total -= it->second;
      c->second.keys.erase(it);
    }
    c = c->second.keys.empty() ? by_connection_.erase(c) : std::next(c);
  }
}

uint64_t PinLedger::Release(uint64_t connection, PageTable* table) {
  auto c = by_connection_.find(connection);
  if (c == by_connection_.end()) return 0;
  uint64_t released = 0;
  for (const auto& [key, n] : c->second.keys)
    for (uint32_t i = 0; i < n; ++i) released += table->Unpin(key) ? 1 : 0;
  by_connection_.erase(c);
  return released;
}

}  // namespace kvfabric::store
