// PinBook: the pins this process holds, per key: the members that hold
// them and how many each. An unpin goes where its pin went, even when the
// key's home has moved since (a member marked down and back, one joining):
// sent to the new home it would leave the old one's page pinned for good,
// and take another process's pin there. Thread-safe.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvfabric::store {

class PinBook {
 public:
  // One more pin of `key` held by `member` (its pin call answered OK).
  void Record(const std::string& key, const std::string& member);
  // Where the next unpin of `key` goes: the member of its oldest pin still
  // held, or none when this process holds no pin of it (the unpin then
  // goes to the key's home).
  std::optional<std::string> Holder(const std::string& key) const;
  // One pin of `key` at `member` fewer (an unpin was sent there: released,
  // refused or unanswered); nothing when none is recorded there.
  void Forget(const std::string& key, const std::string& member);
  // How many pins of `key` this process holds at `member`.
  uint32_t Count(const std::string& key, const std::string& member) const;

 private:
  struct Held {
    std::string member;
    uint32_t count = 0;
  };
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::vector<Held>> pins_;  // by key, oldest member first
};

}  // namespace kvfabric::store
