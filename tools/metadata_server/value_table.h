// ValueTable: the key/value map kvfabric-metadata-server holds in memory,
// bounded in keys, in bytes per value and in bytes in all, so that writers
// cannot fill the server's memory, and in bytes per listing. An entry may
// expire: it is gone a given time after its last Put (the store's members
// renew theirs, store/members/membership.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "kvfabric/status.h"

namespace kvfabric::metadata_server {

class ValueTable {
 public:
  using Clock = std::chrono::steady_clock;

  struct Limits {
    size_t max_keys = 1 << 16;
    size_t max_value = 16 << 20;       // bytes of one value
    size_t max_total_bytes = 1 << 30;  // keys' and values' bytes, all entries
    size_t max_list_bytes = 16 << 20;  // keys' and values' bytes of one List
  };

  // `now` is the clock entries expire by (a test's own, to skip waiting).
  explicit ValueTable(const Limits& limits, std::function<Clock::time_point()> now = Clock::now)
      : limits_(limits), now_(std::move(now)) {}

  // Stores `value` under `key`, replacing any entry it had, ttl included:
  // with a `ttl` above zero the entry is gone that long after this call,
  // else it stays until removed. InvalidArgument for a value over
  // max_value; Busy when the table would then hold more than max_keys keys
  // or max_total_bytes bytes (a replaced value's bytes count as freed, and
  // expired entries are gone first). The messages name the server flag to
  // raise. Unchanged on error.
  Status Put(const std::string& key, std::string value, std::chrono::seconds ttl = std::chrono::seconds(0));
  // What Put of a value of `bytes` under `key` would answer now, without
  // storing anything: the server asks before it reads a body.
  Status Admits(const std::string& key, size_t bytes);
  // False when `key` is absent (or expired).
  bool Get(const std::string& key, std::string* value);
  // False when `key` was absent (or expired).
  bool Remove(const std::string& key);
  // Every entry whose key starts with `prefix` (all for ""), in key order.
  // Busy, naming --max_list_bytes, when their keys and values hold more than
  // max_list_bytes bytes; `out` is then empty.
  Status List(const std::string& prefix, std::map<std::string, std::string>* out);
  // Bytes of all keys and values held (expired entries gone).
  size_t total_bytes();

 private:
  struct Entry {
    std::string value;
    Clock::time_point expires = Clock::time_point::max();  // max(): never
  };

  // Removes the entries whose time has come. Called with mu_ held.
  void Expire();
  // Whether a value of `bytes` fits under `key` (Put's refusals), and the
  // bytes the table would then hold. Called with mu_ held.
  Status RoomLocked(const std::string& key, size_t bytes, size_t* after) const;
  // Removes `it`, counting its bytes out. Called with mu_ held.
  void Erase(std::map<std::string, Entry>::iterator it);

  const Limits limits_;
  const std::function<Clock::time_point()> now_;
  std::mutex mu_;
  std::map<std::string, Entry> values_;
  std::set<std::pair<Clock::time_point, std::string>> expiries_;  // of the entries with a ttl, soonest first
  size_t total_ = 0;
};

}  // namespace kvfabric::metadata_server
