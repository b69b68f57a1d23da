#include "store/wire/shared_keys.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>

#include "common/cpu_relax.h"

namespace kvfabric::store {

struct SharedKeys::Header {
  uint64_t magic;
  uint64_t capacity;
  uint64_t sequence;  // odd while the node changes the table
  uint64_t missing;   // keys held and not entered
  uint64_t count;     // entries in use
  uint64_t reserved[3];
};

namespace {

constexpr uint64_t kMagic = 0x315359454b46564bULL;  // "KVFKEYS1"
constexpr uint64_t kBytesPerEntry = 16;
constexpr uint64_t kPoolBytesPerEntry = 8 << 10;
constexpr uint64_t kMinEntries = 1024;
// A reader that finds the table changing waits for the change (tens of
// nanoseconds) this many times before it answers kUnknown.
constexpr int kReadTries = 64;

uint64_t& Word(void* base, size_t offset) { return *reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(base) + offset); }

uint64_t LoadWord(const uint64_t& w, std::memory_order order) {
  return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(w)).load(order);
}
void StoreWord(uint64_t& w, uint64_t value, std::memory_order order) { std::atomic_ref<uint64_t>(w).store(value, order); }

}  // namespace

uint64_t SharedKeys::BytesFor(uint64_t pool_bytes) {
  const uint64_t entries = std::bit_ceil(std::max(kMinEntries, pool_bytes / kPoolBytesPerEntry));
  return (sizeof(Header) + entries * kBytesPerEntry + 4095) / 4096 * 4096;
}

SharedKeys SharedKeys::Format(void* memory, uint64_t bytes) {
  const uint64_t room = (bytes - sizeof(Header)) / kBytesPerEntry;
  const uint64_t entries = std::bit_floor(room);
  std::memset(memory, 0, sizeof(Header) + entries * kBytesPerEntry);
  SharedKeys t;
  t.header_ = static_cast<Header*>(memory);
  t.entries_ = &Word(memory, sizeof(Header));
  t.mask_ = entries - 1;
  t.header_->capacity = entries;
  StoreWord(t.header_->magic, kMagic, std::memory_order_release);  // last: a reader sees a whole table or none
  return t;
}

bool SharedKeys::Attach(void* memory, uint64_t bytes, SharedKeys* out) {
  *out = SharedKeys();
  if (memory == nullptr || bytes < sizeof(Header) || reinterpret_cast<uintptr_t>(memory) % 8 != 0) return false;
  auto* h = static_cast<Header*>(memory);
  if (LoadWord(h->magic, std::memory_order_acquire) != kMagic) return false;
  const uint64_t entries = h->capacity;
  if (entries == 0 || !std::has_single_bit(entries) || entries > (bytes - sizeof(Header)) / kBytesPerEntry) return false;
  out->header_ = h;
  out->entries_ = &Word(memory, sizeof(Header));
  out->mask_ = entries - 1;
  return true;
}

SharedKeys::Hash SharedKeys::HashOf(std::string_view key) {
  const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
  return Hash{h.low64 == 0 ? 1 : h.low64, h.high64};
}

uint64_t SharedKeys::Load(uint64_t entry, int word) const {
  return LoadWord(entries_[2 * entry + static_cast<uint64_t>(word)], std::memory_order_relaxed);
}

void SharedKeys::Store(uint64_t entry, int word, uint64_t value) {
  StoreWord(entries_[2 * entry + static_cast<uint64_t>(word)], value, std::memory_order_relaxed);
}

uint64_t SharedKeys::Locate(const Hash& h) const {
  for (uint64_t i = h.high & mask_, n = 0; n <= mask_; i = (i + 1) & mask_, ++n) {
    const uint64_t low = Load(i, 0);
    if (low == 0) break;
    if (low == h.low && Load(i, 1) == h.high) return i;
  }
  return capacity();
}

SharedKeys::Answer SharedKeys::Find(std::string_view key) const {
  if (!valid()) return Answer::kUnknown;
  const Hash h = HashOf(key);
  for (int t = 0; t < kReadTries; ++t) {
    const uint64_t before = LoadWord(header_->sequence, std::memory_order_acquire);
    if (before & 1) {
      CpuRelax();
      continue;
    }
    const bool found = Locate(h) != capacity();
    const uint64_t missing = LoadWord(header_->missing, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (LoadWord(header_->sequence, std::memory_order_relaxed) != before) continue;
    return found ? Answer::kPresent : missing == 0 ? Answer::kAbsent : Answer::kUnknown;
  }
  return Answer::kUnknown;
}

void SharedKeys::BeginChange() {
  StoreWord(header_->sequence, header_->sequence + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}

void SharedKeys::EndChange() { StoreWord(header_->sequence, header_->sequence + 1, std::memory_order_release); }

uint64_t SharedKeys::count() const { return header_ == nullptr ? 0 : header_->count; }
uint64_t SharedKeys::missing() const { return header_ == nullptr ? 0 : header_->missing; }

bool SharedKeys::Insert(std::string_view key) {
  const Hash h = HashOf(key);
  const bool room = (header_->count + 1) * 4 <= capacity() * 3;
  BeginChange();
  // Another key's hash (2^-128), or no room: not entered, counted.
  // The probe is bounded by the capacity, whatever the entries hold: the
  // node never loops on a table that something else wrote over.
  uint64_t i = h.high & mask_, n = 0;
  if (room && Locate(h) == capacity())
    for (; n <= mask_ && Load(i, 0) != 0; ++n) i = (i + 1) & mask_;
  const bool enter = room && n <= mask_ && Load(i, 0) == 0;
  if (enter) {
    Store(i, 1, h.high);
    Store(i, 0, h.low);
    StoreWord(header_->count, header_->count + 1, std::memory_order_relaxed);
  } else {
    StoreWord(header_->missing, header_->missing + 1, std::memory_order_relaxed);
  }
  EndChange();
  return enter;
}

void SharedKeys::Erase(std::string_view key) {
  const Hash h = HashOf(key);
  BeginChange();
  uint64_t hole = Locate(h);
  if (hole == capacity()) {
    if (header_->missing > 0) StoreWord(header_->missing, header_->missing - 1, std::memory_order_relaxed);
    EndChange();
    return;
  }
  // Entries after the hole whose probe starts at or before it move back
  // into it, until an empty entry: every entry stays reachable from its start.
  for (uint64_t j = (hole + 1) & mask_, n = 0; n < mask_; j = (j + 1) & mask_, ++n) {
    const uint64_t low = Load(j, 0);
    if (low == 0) break;
    const uint64_t high = Load(j, 1), start = high & mask_;
    // Stays when its start lies cyclically in (hole, j].
    if (((j - start) & mask_) < ((j - hole) & mask_)) continue;
    Store(hole, 0, low);
    Store(hole, 1, high);
    hole = j;
  }
  Store(hole, 0, 0);
  Store(hole, 1, 0);
  StoreWord(header_->count, header_->count - 1, std::memory_order_relaxed);
  EndChange();
}

void SharedKeys::Clear() {
  BeginChange();
  for (uint64_t i = 0; i <= mask_; ++i) {
    Store(i, 0, 0);
    Store(i, 1, 0);
  }
  StoreWord(header_->count, 0, std::memory_order_relaxed);
  StoreWord(header_->missing, 0, std::memory_order_relaxed);
  EndChange();
}

}  // namespace kvfabric::store
