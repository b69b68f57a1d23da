// Placement: which members of a store hold a key, decided by every client on
// its own from the key and the member list, with no directory service.
//
// Weighted rendezvous hashing: each member scores the key with
// -weight / ln(u), u being a hash of (key, member name) mapped into (0, 1),
// and the highest scores win. The policy is pure: a function of its inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvfabric::store {

struct Member {
  std::string name;        // unique in the membership: the node's segment name
  uint64_t pool_bytes = 0; // memory it contributes; 0: a client, holds nothing
};

class Placement {
 public:
  // `members` in any order; names must be distinct (a duplicate's later
  // entries are ignored).
  explicit Placement(std::vector<Member> members);

  // The members that hold `key`, best first: up to `replicas` distinct
  // indices into members(), fewer when fewer members contribute memory.
  // Contract:
  //  - members with pool_bytes 0 are never chosen;
  //  - the same key and the same set of members, in any order, give the
  //    same names;
  //  - over uniformly distributed keys, a member's share of first choices is
  //    proportional to its pool_bytes;
  //  - adding a member moves only keys whose first choice becomes the new
  //    member; removing one moves only the keys it held first.
  std::vector<size_t> Place(std::string_view key, size_t replicas) const;
  // Place(key, 1)[0]; members().size() when no member contributes memory.
  size_t Home(std::string_view key) const;
  // The home `key` has among the members that `left_out` does not name
  // (left_out[i]: member i is left out; a shorter vector leaves the rest
  // in): what Home(key) answered before those members joined.
  // members().size() when every member with a pool is left out.
  // Contract: equal to Home(key) of a Placement built from the members
  // not left out, in any order; HomeWithout(key, {}) == Home(key).
  size_t HomeWithout(std::string_view key, const std::vector<bool>& left_out) const;

  const std::vector<Member>& members() const { return members_; }

 private:
  // The member's score for the key, or a value that ranks the members the
  // same way (u itself when every member with a pool has the same weight).
  double Score(uint64_t key_hash, size_t member) const;
  // Whether member `a` with `score_a` ranks before `b` with `score_b`: the
  // higher score, and on a tie the smaller name, so member order never matters.
  bool Ranks(double score_a, size_t a, double score_b, size_t b) const;

  std::vector<Member> members_;
  std::vector<uint64_t> seeds_;  // a hash of each member's name
  bool equal_weights_ = true;    // every member with a pool has the same pool_bytes
};

}  // namespace kvfabric::store
