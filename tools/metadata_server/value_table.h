// ValueTable: the key/value map kvfabric-metadata-server holds in memory,
// bounded in keys, in bytes per value and in bytes in all, so that writers
// cannot fill the server's memory (issue 12, item 13).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "kvfabric/status.h"

namespace kvfabric::metadata_server {

class ValueTable {
 public:
  struct Limits {
    size_t max_keys = 1 << 16;
    size_t max_value = 16 << 20;       // bytes of one value
    size_t max_total_bytes = 1 << 30;  // keys' and values' bytes, all entries
  };

  explicit ValueTable(const Limits& limits) : limits_(limits) {}

  // Stores `value` under `key`, replacing any value it had. InvalidArgument
  // for a value over max_value; Busy when the table would then hold more
  // than max_keys keys or max_total_bytes bytes (a replaced value's bytes
  // count as freed). The messages name the server flag to raise. Unchanged
  // on error.
  Status Put(const std::string& key, std::string value);
  // False when `key` is absent.
  bool Get(const std::string& key, std::string* value) const;
  // False when `key` was absent.
  bool Remove(const std::string& key);
  // Bytes of all keys and values held.
  size_t total_bytes() const;

 private:
  const Limits limits_;
  mutable std::mutex mu_;
  std::map<std::string, std::string> values_;
  size_t total_ = 0;
};

}  // namespace kvfabric::metadata_server
