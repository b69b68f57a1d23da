/* The store's counters, one row each: X(name, meaning). C++ StoreStats
 * (kvfabric/store.h), C kvf_store_stats (kvfabric.h) and Python's
 * Store.stats() have a field per row, in this order. Plain C. */
#ifndef KVFABRIC_STORE_STATS_H_
#define KVFABRIC_STORE_STATS_H_

#define KVF_STORE_STATS(X)                                                                                  \
  /* This process's calls. */                                                                             \
  X(put_keys, "keys this process asked to put")                                                           \
  X(put_bytes, "bytes of the pages it put")                                                               \
  X(put_failures, "keys whose put failed")                                                                \
  X(put_bounced, "pages put from GPU memory no rail exposes, copied through host memory first")          \
  X(put_granted, "pages written into slots their home granted ahead, with no reserve round trip (KVF_STORE_PUT_GRANTS)") \
  X(get_keys, "keys it asked to get")                                                                     \
  X(get_hits, "keys whose page it got")                                                                   \
  X(get_bytes, "bytes of the pages it got")                                                               \
  X(misses_absent, "misses: no page under the key")                                                      \
  X(misses_checksum, "misses: read, but the bytes did not verify (changed under the READ, or corrupt)")  \
  X(misses_late, "misses: the READ could not start within the read window of its lookup")                \
  X(get_failures, "gets failed: member unreachable, timeout, transfer error")                            \
  X(get_unverified, "hits read into GPU memory, where no checksum is taken (the read window keeps them whole)") \
  X(get_cached, "pages read at once from a remembered location and confirmed, by their region's version or their lookup (KVF_STORE_LOCATION_CACHE)") \
  X(get_no_lookup, "of those, pages confirmed by the version of their pool region alone: no message to their home") \
  X(get_cached_stale, "remembered locations their lookup did not confirm: read again from the new one, or a miss") \
  X(exists_keys, "keys it asked about")                                                                   \
  X(exists_hits, "keys found")                                                                            \
  X(exists_local, "of the keys asked about, those answered from the table of keys of a member on its host, with no message (KVF_STORE_SHARE_POOLS)") \
  X(control_calls, "control messages it sent to members")                                                \
  X(control_failures, "control messages that failed (unreachable, timeout)")                             \
  X(copied_pages, "pages it got or put by copying them itself from or into the shared pool of a member on its host, not through the fabric (KVF_STORE_SHARE_POOLS)") \
  /* This node's pool (zero for a client). */                                                             \
  X(pool_bytes, "bytes of the pool")                                                                      \
  X(used_bytes, "bytes of the pool holding pages")                                                        \
  X(quarantined_bytes, "bytes freed but not reusable yet (a GET may still read them)")                    \
  X(pages, "pages held")                                                                                  \
  X(pinned_pages, "pages pinned")                                                                         \
  X(evictions, "pages evicted to make room")                                                              \
  X(removals, "pages removed")                                                                            \
  X(overwrites, "pages replaced by a put of the same key")                                                \
  X(refusals, "puts refused: the pool was full of pages in use")                                          \
  X(pins_released, "pins released because the connection that took them closed (its process died or closed)") \
  X(stored_bytes, "bytes of the pages this node stored (puts it committed)")                              \
  X(located_bytes, "bytes of the pages it located for clients to read (lookup hits)")                     \
  X(touched_bytes, "bytes of the pages clients read from a remembered location and reported (a key at most once per client every 200 ms: a lower bound)") \
  /* Members now in placement (reachable, with a pool). */                                                \
  X(members, "members in placement now")

#endif  /* KVFABRIC_STORE_STATS_H_ */
