// SharedKeys: the keys a node holds, as a table in its shared pool's file
// (SharedPool), so that processes on its host answer `exists` by reading
// it, with no message to the node. The node (PageTable, under its lock) is
// the only writer; any number of same-host processes read at once.
//
// The table: a header, then `capacity` (a power of two) entries of two
// 64-bit words, the 128-bit xxh3 of a key (its low word never 0: 0 marks an
// empty entry), placed by linear probing from the high word, deleted by
// shifting the entries after it back (no tombstones, so churn never fills
// it). Every change the node makes is inside a sequence lock (the header's
// sequence is odd meanwhile): a reader that saw it change reads again, and
// after a few tries answers kUnknown (the caller asks the node instead).
//
// Every probe of the table, the node's and a reader's, ends within its
// capacity, so entries that something else wrote over can cost wrong
// answers, never a node that loops forever. Readers map the table
// read-only (PoolMaps).
//
// It is kept at most 3/4 full. A key that would overfill it, or whose hash
// another key holds already (2^-128), is not entered: the header counts
// such keys (`missing`), and while any are held a key not found in the
// table is kUnknown, not kAbsent. A key found is always held, whatever
// `missing` says. So the answers are exact, and a table too small for
// many tiny pages only sends their lookups back to the node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvfabric::store {

class SharedKeys {
 public:
  enum class Answer { kPresent, kAbsent, kUnknown };

  // The bytes of a table for a pool of `pool_bytes`: an entry per 8 KiB of
  // pool (0.2% of it; 1/16 full with pages of 128 KiB; pages of 11 KiB or
  // less on average would fill it), at least 1024 entries, a power of two,
  // with its header, rounded up to 4 KiB.
  static uint64_t BytesFor(uint64_t pool_bytes);

  // The node's: an empty table over `memory` (`bytes` from BytesFor, zeroed
  // or not, 8-aligned, outliving this object).
  static SharedKeys Format(void* memory, uint64_t bytes);
  // A reader's: the table another process formatted in `memory` of `bytes`
  // (mapped from its file). False when the bytes hold no valid table
  // (then *out is unusable and stays so).
  static bool Attach(void* memory, uint64_t bytes, SharedKeys* out);

  SharedKeys() = default;
  bool valid() const { return entries_ != nullptr; }
  uint64_t capacity() const { return mask_ + 1; }

  // Reader's side (any process, any thread): whether the node holds `key`.
  Answer Find(std::string_view key) const;

  // Writer's side (the node; one thread at a time).
  // `key` was entered (false: counted as missing, see above). REQUIRES: the
  // node holds no other page under `key` (a key is entered once).
  bool Insert(std::string_view key);
  // The node no longer holds `key` (entered or missing).
  void Erase(std::string_view key);
  // The node holds no key.
  void Clear();
  // Entries in use, and keys held but not entered.
  uint64_t count() const;
  uint64_t missing() const;

 private:
  struct Header;
  struct Hash {
    uint64_t low, high;
  };
  static Hash HashOf(std::string_view key);
  uint64_t Load(uint64_t entry, int word) const;
  void Store(uint64_t entry, int word, uint64_t value);
  // The entry holding `h`, or capacity() when none.
  uint64_t Locate(const Hash& h) const;
  void BeginChange();
  void EndChange();

  Header* header_ = nullptr;
  uint64_t* entries_ = nullptr;  // 2 words each
  uint64_t mask_ = 0;
};

}  // namespace kvfabric::store
