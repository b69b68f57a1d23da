#include "value_table.h"

#include <fmt/format.h>

namespace kvfabric::metadata_server {

Status ValueTable::Admits(const std::string& key, size_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  Expire();
  size_t after = 0;
  return RoomLocked(key, bytes, &after);
}

Status ValueTable::RoomLocked(const std::string& key, size_t bytes, size_t* after) const {
  if (bytes > limits_.max_value)
    return Status::InvalidArgument(fmt::format("a value of {} bytes exceeds --max_value ({} bytes)", bytes,
                                               limits_.max_value));
  auto it = values_.find(key);
  if (it == values_.end() && values_.size() >= limits_.max_keys)
    return Status::Busy(fmt::format("store full: {} keys held, the limit is --max_keys {}", values_.size(),
                                    limits_.max_keys));
  const size_t freed = it == values_.end() ? 0 : key.size() + it->second.value.size();
  *after = total_ - freed + key.size() + bytes;
  if (*after > limits_.max_total_bytes)
    return Status::Busy(fmt::format(
        "store full: {} bytes held, this value would make {}, the limit is --max_total_bytes {}; delete keys "
        "or restart the server with a larger limit",
        total_, *after, limits_.max_total_bytes));
  return Status::OK();
}

Status ValueTable::Put(const std::string& key, std::string value, std::chrono::seconds ttl) {
  std::lock_guard<std::mutex> g(mu_);
  Expire();
  size_t after = 0;
  KVF_RETURN_IF_ERROR(RoomLocked(key, value.size(), &after));
  auto it = values_.find(key);
  if (it == values_.end()) it = values_.emplace(key, Entry{}).first;
  Entry& e = it->second;
  if (e.expires != Clock::time_point::max()) expiries_.erase({e.expires, key});
  e.value = std::move(value);
  e.expires = ttl.count() > 0 ? now_() + ttl : Clock::time_point::max();
  if (e.expires != Clock::time_point::max()) expiries_.emplace(e.expires, key);
  total_ = after;
  return Status::OK();
}

bool ValueTable::Get(const std::string& key, std::string* value) {
  std::lock_guard<std::mutex> g(mu_);
  Expire();
  auto it = values_.find(key);
  if (it == values_.end()) return false;
  *value = it->second.value;
  return true;
}

bool ValueTable::Remove(const std::string& key) {
  std::lock_guard<std::mutex> g(mu_);
  Expire();
  auto it = values_.find(key);
  if (it == values_.end()) return false;
  Erase(it);
  return true;
}

Status ValueTable::List(const std::string& prefix, std::map<std::string, std::string>* out) {
  out->clear();
  std::lock_guard<std::mutex> g(mu_);
  Expire();
  size_t bytes = 0;
  for (auto it = values_.lower_bound(prefix); it != values_.end() && it->first.rfind(prefix, 0) == 0; ++it) {
    bytes += it->first.size() + it->second.value.size();
    if (bytes > limits_.max_list_bytes) {
      out->clear();
      return Status::Busy(fmt::format(
          "the entries under prefix '{}' hold more than --max_list_bytes ({} bytes); list a longer prefix, or "
          "restart the server with a larger limit",
          prefix, limits_.max_list_bytes));
    }
    out->emplace_hint(out->end(), it->first, it->second.value);
  }
  return Status::OK();
}

size_t ValueTable::total_bytes() {
  std::lock_guard<std::mutex> g(mu_);
  Expire();
  return total_;
}

void ValueTable::Expire() {
  const Clock::time_point now = now_();
  while (!expiries_.empty() && expiries_.begin()->first <= now) {
    auto it = values_.find(expiries_.begin()->second);
    if (it != values_.end()) Erase(it);
    else expiries_.erase(expiries_.begin());  // not reached: each expiry has its entry
  }
}

void ValueTable::Erase(std::map<std::string, Entry>::iterator it) {
  if (it->second.expires != Clock::time_point::max()) expiries_.erase({it->second.expires, it->first});
  total_ -= it->first.size() + it->second.value.size();
  values_.erase(it);
}

}  // namespace kvfabric::metadata_server
