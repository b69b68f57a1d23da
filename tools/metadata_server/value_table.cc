#include "value_table.h"

#include <fmt/format.h>

namespace kvfabric::metadata_server {

Status ValueTable::Put(const std::string& key, std::string value) {
  if (value.size() > limits_.max_value)
    return Status::InvalidArgument(fmt::format("a value of {} bytes exceeds --max_value ({} bytes)", value.size(),
                                               limits_.max_value));
  std::lock_guard<std::mutex> g(mu_);
  auto it = values_.find(key);
  if (it == values_.end() && values_.size() >= limits_.max_keys)
    return Status::Busy(fmt::format("store full: {} keys held, the limit is --max_keys {}", values_.size(),
                                    limits_.max_keys));
  const size_t freed = it == values_.end() ? 0 : key.size() + it->second.size();
  const size_t after = total_ - freed + key.size() + value.size();
  if (after > limits_.max_total_bytes)
    return Status::Busy(fmt::format(
        "store full: {} bytes held, this value would make {}, the limit is --max_total_bytes {}; delete keys "
        "or restart the server with a larger limit",
        total_, after, limits_.max_total_bytes));
  if (it == values_.end()) values_.emplace(key, std::move(value));
  else it->second = std::move(value);
  total_ = after;
  return Status::OK();
}

bool ValueTable::Get(const std::string& key, std::string* value) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = values_.find(key);
  if (it == values_.end()) return false;
  *value = it->second;
  return true;
}

bool ValueTable::Remove(const std::string& key) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = values_.find(key);
  if (it == values_.end()) return false;
  total_ -= key.size() + it->second.size();
  values_.erase(it);
  return true;
}

size_t ValueTable::total_bytes() const {
  std::lock_guard<std::mutex> g(mu_);
  return total_;
}

}  // namespace kvfabric::metadata_server
