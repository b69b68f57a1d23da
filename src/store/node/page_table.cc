#include "store/node/page_table.h"

#include <algorithm>
#include <iterator>
#include <unordered_set>

#include "common/text.h"

namespace kvfabric::store {

const char* PageEventName(PageEvent e) {
  switch (e) {
    case PageEvent::kStored: return "stored";
    case PageEvent::kEvicted: return "evicted";
    case PageEvent::kRemoved: return "removed";
    case PageEvent::kOverwritten: return "overwritten";
    case PageEvent::kHandedOver: return "handed over";
  }
  return "?";
}

PageTable::PageTable(uint64_t pool_bytes, std::chrono::milliseconds read_window, uint64_t alignment,
                     RegionVersions* versions, SharedKeys* keys)
    : allocator_(pool_bytes, alignment),
      read_window_(std::max(read_window, std::chrono::milliseconds(0))),
      versions_(versions),
      keys_(keys) {}

void PageTable::Retire(const Page& p) {
  if (versions_ != nullptr) versions_->Bump(p.entry.offset);
}

PageTable::Pages::iterator PageTable::Find(std::string_view key) {
  auto it = index_.find(key);
  return it == index_.end() ? unpinned_.end() : it->second;
}

void PageTable::Touch(Pages::iterator page) {
  Pages& list = ListOf(*page);
  list.splice(list.begin(), list, page);
}

void PageTable::Count(const Page& p, bool add) {
  const uint64_t bytes = SlotBytes(p), pinned = p.pins > 0 ? bytes : 0;
  if (add) {
    used_bytes_ += bytes;
    pinned_bytes_ += pinned;
  } else {
    used_bytes_ -= bytes;
    pinned_bytes_ -= pinned;
  }
}

void PageTable::Release(uint64_t offset, uint64_t bytes, TimePoint reusable_at, TimePoint now) {
  if (reusable_at <= now) {
    allocator_.Free(offset);
    return;
  }
  quarantine_.push({reusable_at, offset, bytes});
  quarantined_bytes_ += bytes;
}

void PageTable::Forget(Pages::iterator page, PageEvent why) {
  Tell(why, *page);
  Count(*page, false);
  if (keys_ != nullptr) keys_->Erase(page->key);
  index_.erase(page->key);
  ListOf(*page).erase(page);
}

void PageTable::ReleaseExpired(TimePoint now) {
  while (!quarantine_.empty() && quarantine_.top().reusable_at <= now) {
    allocator_.Free(quarantine_.top().offset);
    quarantined_bytes_ -= quarantine_.top().bytes;
    quarantine_.pop();
  }
}

// Frees, oldest first, the slots of the pages Reserve may evict, until a
// free extent of `bytes` exists; those pages are then evicted. When the walk
// ends without room, their slots are claimed back: nothing was evicted.
bool PageTable::EvictFor(uint64_t bytes, TimePoint now, uint64_t keep_from) {
  if (allocator_.free_bytes() + (used_bytes_ - pinned_bytes_) < bytes) return false;
  std::vector<Pages::iterator> victims;
  for (auto it = unpinned_.rbegin(); it != unpinned_.rend() && allocator_.largest_free() < bytes; ++it) {
    if (ReusableAt(*it) > now || it->entry.generation >= keep_from) continue;
    allocator_.Free(it->entry.offset);
    victims.push_back(std::prev(it.base()));
  }
  if (allocator_.largest_free() < bytes) {
    for (Pages::iterator p : victims) allocator_.Claim(p->entry.offset, SlotBytes(*p));
    return false;
  }
  for (Pages::iterator p : victims) {
    Retire(*p);
    Forget(p, PageEvent::kEvicted);
    ++evictions_;
  }
  return true;
}

Status PageTable::NoRoom(uint64_t length, TimePoint now) const {
  using std::chrono::milliseconds;
  const auto window_ms = std::chrono::duration_cast<milliseconds>(read_window_).count();
  std::string quarantined = "nothing quarantined";
  if (!quarantine_.empty())
    quarantined = text::Format(
        "{} bytes quarantined (freed, awaiting the read window; the first slot comes back in {} ms)",
        quarantined_bytes_, std::chrono::ceil<milliseconds>(quarantine_.top().reusable_at - now).count());
  return Status::Busy(text::Format(
      "store pool full: no room for a page of {} bytes in a pool of {} bytes, and evicting would not make any: "
      "{} bytes pinned ({} pages), {} bytes in unpinned pages (too few, read within the last {} ms, or not next "
      "to free space), {} bytes reserved by puts in progress, {}, {} bytes free (largest piece {}); unpin pages, "
      "retry once quarantined slots come back, or give the node a larger KVF_STORE_POOL_BYTES",
      length, allocator_.pool_bytes(), pinned_bytes_, pinned_.size(), used_bytes_ - pinned_bytes_, window_ms,
      reserved_bytes_, quarantined, allocator_.free_bytes(), allocator_.largest_free()));
}

Status PageTable::Reserve(uint64_t length, TimePoint now, uint64_t* offset, uint64_t keep_from) {
  if (length == 0 || length > allocator_.pool_bytes())
    return Status::InvalidArgument(text::Format("a page of {} bytes cannot be stored in a pool of {} bytes", length,
                                                allocator_.pool_bytes()));
  const uint64_t bytes = allocator_.ExtentBytes(length);
  ReleaseExpired(now);
  auto at = allocator_.Allocate(bytes);
  if (!at && EvictFor(bytes, now, keep_from)) at = allocator_.Allocate(bytes);
  if (!at) {
    ++refusals_;
    return NoRoom(length, now);
  }
  reserved_.emplace(*at, bytes);
  reserved_bytes_ += bytes;
  *offset = *at;
  return Status::OK();
}

void PageTable::Abandon(uint64_t offset, TimePoint now, std::chrono::steady_clock::duration hold) {
  auto it = reserved_.find(offset);
  if (it == reserved_.end()) return;
  reserved_bytes_ -= it->second;
  Release(offset, it->second, now + std::max(read_window_, hold), now);
  reserved_.erase(it);
}

void PageTable::Unreserve(uint64_t offset, TimePoint now) {
  auto it = reserved_.find(offset);
  if (it == reserved_.end()) return;
  reserved_bytes_ -= it->second;
  Release(offset, it->second, now, now);
  reserved_.erase(it);
}

PageEntry PageTable::Commit(std::string_view key, uint64_t offset, uint64_t length, Checksum checksum,
                            TimePoint now) {
  auto slot = reserved_.find(offset);
  if (slot == reserved_.end() || length == 0 || allocator_.ExtentBytes(length) != slot->second) return {};
  reserved_bytes_ -= slot->second;
  reserved_.erase(slot);
  const PageEntry entry{offset, length, next_generation_++, checksum};
  auto page = Find(key);
  if (page == unpinned_.end()) {
    unpinned_.push_front(Page{std::string(key), entry, kNever});
    index_.emplace(unpinned_.front().key, unpinned_.begin());
    Count(unpinned_.front(), true);
    if (keys_ != nullptr) (void)keys_->Insert(key);  // not entered: counted as missing there
    Tell(PageEvent::kStored, unpinned_.front());
    return entry;
  }
  Tell(PageEvent::kOverwritten, *page);
  Retire(*page);
  ReleaseSlot(*page, now);
  Count(*page, false);
  page->entry = entry;
  page->last_lookup = kNever;
  Count(*page, true);
  Touch(page);
  ++overwrites_;
  Tell(PageEvent::kStored, *page);
  return entry;
}

bool PageTable::Lookup(std::string_view key, TimePoint now, PageEntry* out) {
  auto page = Find(key);
  if (page == unpinned_.end()) return false;
  page->last_lookup = now;
  Touch(page);
  *out = page->entry;
  return true;
}

bool PageTable::Contains(std::string_view key, TimePoint now, uint64_t* length) {
  auto page = Find(key);
  if (page == unpinned_.end()) return false;
  Touch(page);
  if (length != nullptr) *length = page->entry.length;
  return true;
}

void PageTable::RemovePage(Pages::iterator page, PageEvent why, TimePoint now) {
  Retire(*page);
  ReleaseSlot(*page, now);
  Forget(page, why);
  ++removals_;
}

bool PageTable::Remove(std::string_view key, TimePoint now) {
  auto page = Find(key);
  if (page == unpinned_.end()) return false;
  RemovePage(page, PageEvent::kRemoved, now);
  return true;
}

size_t PageTable::RemoveAll(TimePoint now) {
  const size_t n = index_.size();
  if (versions_ != nullptr && n > 0) versions_->BumpAll();
  for (Pages* list : {&unpinned_, &pinned_}) {
    for (const Page& p : *list) {
      Tell(PageEvent::kRemoved, p);
      ReleaseSlot(p, now);
    }
    list->clear();
  }
  index_.clear();
  if (keys_ != nullptr) keys_->Clear();
  used_bytes_ = pinned_bytes_ = 0;
  removals_ += n;
  return n;
}

std::vector<std::pair<std::string, PageEntry>> PageTable::Select(
    const std::function<bool(std::string_view key)>& pick, uint64_t max_bytes) const {
  std::vector<std::pair<std::string, PageEntry>> out;
  uint64_t bytes = 0;
  for (const Page& p : unpinned_) {
    if (p.entry.length > max_bytes - bytes || !pick(p.key)) continue;
    out.emplace_back(p.key, p.entry);
    bytes += p.entry.length;
    if (bytes == max_bytes) break;
  }
  return out;
}

bool PageTable::RemoveIf(std::string_view key, uint64_t generation, TimePoint now, PageEvent why) {
  auto page = Find(key);
  if (page == unpinned_.end() || page->entry.generation != generation || page->pins > 0) return false;
  RemovePage(page, why, now);
  return true;
}

bool PageTable::Pin(std::string_view key) {
  auto page = Find(key);
  if (page == unpinned_.end()) return false;
  if (page->pins++ == 0) {
    pinned_.splice(pinned_.begin(), unpinned_, page);
    pinned_bytes_ += SlotBytes(*page);
  }
  return true;
}

Status PageTable::PinAll(const std::vector<std::string_view>& keys, uint64_t max_pinned_bytes,
                         std::vector<bool>* pinned) {
  std::unordered_set<const Page*> newly;
  uint64_t added = 0;
  for (std::string_view key : keys) {
    auto page = Find(key);
    if (page == unpinned_.end() || page->pins > 0 || !newly.insert(&*page).second) continue;
    added += SlotBytes(*page);
  }
  if (added > 0 && pinned_bytes_ + added > max_pinned_bytes)
    return Status::Busy(text::Format(
        "pinning {} more page(s) of {} bytes would pin {} of the pool's {} bytes, past the {} bytes pins may hold "
        "(KVF_STORE_MAX_PINNED_SHARE); unpin pages first",
        newly.size(), added, pinned_bytes_ + added, allocator_.pool_bytes(), max_pinned_bytes));
  pinned->assign(keys.size(), false);
  for (size_t i = 0; i < keys.size(); ++i) (*pinned)[i] = Pin(keys[i]);
  return Status::OK();
}

bool PageTable::Unpin(std::string_view key) {
  auto page = Find(key);
  if (page == unpinned_.end() || page->pins == 0) return false;
  if (--page->pins == 0) {
    unpinned_.splice(unpinned_.begin(), pinned_, page);
    pinned_bytes_ -= SlotBytes(*page);
  }
  return true;
}

PageTableStats PageTable::stats() const {
  PageTableStats s;
  s.pool_bytes = allocator_.pool_bytes();
  s.used_bytes = used_bytes_;
  s.reserved_bytes = reserved_bytes_;
  s.quarantined_bytes = quarantined_bytes_;
  s.free_bytes = allocator_.free_bytes();
  s.pages = index_.size();
  s.pinned_pages = pinned_.size();
  s.evictions = evictions_;
  s.removals = removals_;
  s.overwrites = overwrites_;
  s.refusals = refusals_;
  return s;
}

}  // namespace kvfabric::store
