// ClientCounters: what a store client counts, shared by its calls and read
// into StoreStats (include/kvfabric/store_stats.h says what each means).
#pragma once

#include <atomic>
#include <cstdint>

#include "kvfabric/store.h"

namespace kvfabric::store {

struct ClientCounters {
  std::atomic<uint64_t> put_keys{0}, put_bytes{0}, put_failures{0};
  std::atomic<uint64_t> get_keys{0}, get_hits{0}, get_bytes{0};
  std::atomic<uint64_t> misses_absent{0}, misses_checksum{0}, misses_late{0}, get_failures{0};
  std::atomic<uint64_t> get_unverified{0}, get_cached{0}, get_cached_stale{0}, get_no_lookup{0}, put_bounced{0};
  std::atomic<uint64_t> put_granted{0};
  std::atomic<uint64_t> exists_keys{0}, exists_hits{0}, exists_local{0};
  std::atomic<uint64_t> control_calls{0}, control_failures{0}, copied_pages{0};

  static void Add(std::atomic<uint64_t>& c, uint64_t n) { c.fetch_add(n, std::memory_order_relaxed); }

  // Copies every counter into the fields of `out` of the same name.
  void CopyTo(StoreStats* out) const {
    auto get = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
    out->put_keys = get(put_keys);
    out->put_bytes = get(put_bytes);
    out->put_failures = get(put_failures);
    out->get_keys = get(get_keys);
    out->get_hits = get(get_hits);
    out->get_bytes = get(get_bytes);
    out->misses_absent = get(misses_absent);
    out->misses_checksum = get(misses_checksum);
    out->misses_late = get(misses_late);
    out->get_failures = get(get_failures);
    out->get_unverified = get(get_unverified);
    out->get_cached = get(get_cached);
    out->get_cached_stale = get(get_cached_stale);
    out->get_no_lookup = get(get_no_lookup);
    out->put_bounced = get(put_bounced);
    out->put_granted = get(put_granted);
    out->exists_keys = get(exists_keys);
    out->exists_hits = get(exists_hits);
    out->exists_local = get(exists_local);
    out->control_calls = get(control_calls);
    out->control_failures = get(control_failures);
    out->copied_pages = get(copied_pages);
  }
};

}  // namespace kvfabric::store
