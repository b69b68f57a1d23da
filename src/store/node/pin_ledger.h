// PinLedger: which control connection holds which pins on a node's pages.
// A pin belongs to the connection that took it: only that connection's
// unpin ends it, and the connection's close releases it (its process
// exited, closed its store, or lost the connection). It also bounds pins,
// so that no client takes the pool from the others: a connection holds at
// most max_pins pins, and the pinned pages together at most
// max_pinned_bytes of the pool.
//
// A pure data structure: the node calls it under its table's lock, with
// the table the pins are taken in.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvfabric/status.h"
#include "store/node/page_table.h"

namespace kvfabric::store {

class PinLedger {
 public:
  struct Limits {
    uint64_t max_pins = 0;          // per connection (KVF_STORE_MAX_PINS)
    uint64_t max_pinned_bytes = 0;  // all connections' (KVF_STORE_MAX_PINNED_SHARE of the pool)
  };
  explicit PinLedger(Limits limits) : limits_(limits) {}

  // Pins in `table` every key of `keys` that has a page, for `connection`
  // ((*pinned)[i]: whether key i had one); or none, with Busy naming the
  // setting, when the connection would then hold more than max_pins pins
  // or the table pin more than max_pinned_bytes.
  Status PinAll(uint64_t connection, const std::vector<std::string_view>& keys, PageTable* table,
                std::vector<bool>* pinned);
  // Ends one pin of `key` that `connection` took (true), in `table` too;
  // false when it holds none (another connection's pin stays).
  bool Unpin(uint64_t connection, std::string_view key, PageTable* table);
  // The page of `key` went (removed, or dropped), its pins with it.
  void Forget(std::string_view key);
  // Every page went (remove all).
  void Clear() { by_connection_.clear(); }
  // Releases every pin `connection` holds, in `table` too; how many.
  uint64_t Release(uint64_t connection, PageTable* table);

 private:
  struct Held {
    std::unordered_map<std::string, uint32_t> keys;  // key -> pins
    uint64_t total = 0;
  };
  const Limits limits_;
  std::unordered_map<uint64_t, Held> by_connection_;
};

}  // namespace kvfabric::store
