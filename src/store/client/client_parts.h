// ClientParts: what the calls of one store client share: the engine and
// settings, the members and the messages to them, the runner that moves
// pages, the locations it remembers, the scratch slots region versions are
// READ into, the grants homes gave it, its touches and its counters.
// StoreClient owns one; each GET (GetCall) and PUT (PutCall) works on it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvfabric/engine.h"
#include "kvfabric/settings.h"
#include "store/client/client_counters.h"
#include "store/client/grant_book.h"
#include "store/client/location_cache.h"
#include "store/client/node_calls.h"
#include "store/client/routing.h"
#include "store/client/scratch_slots.h"
#include "store/client/touch_queue.h"
#include "store/members/member_view.h"
#include "store/mover/batch_runner.h"
#include "store/mover/pool_maps.h"
#include "store/wire/checksum.h"
#include "store/wire/region_versions.h"

namespace kvfabric::store {

// Where a key's buffers are, as far as the store cares.
enum class Memory : uint8_t {
  kHost,         // host memory: peers reach it, GETs verify it
  kDevice,       // GPU memory peers reach (FI_HMEM): not verified (no checksum on device memory)
  kDeviceLocal,  // GPU memory no rail registered: a PUT copies it through the bounce buffer
};

uint64_t TotalBytes(const std::vector<StoreBuffer>& buffers);
// The checksum of the first `length` bytes of a key's buffers, in order.
Checksum ChecksumOfBuffers(const std::vector<StoreBuffer>& buffers, uint64_t length);
// The keys `which` of `keys`, as a message to a member names them.
std::vector<std::string_view> KeysOf(const std::vector<std::string>& keys, const std::vector<size_t>& which);

class ClientParts {
 public:
  // `self`: this process's node, or none.
  ClientParts(Engine* engine, const Settings& settings, ControlClient* control, MemberView* members,
              std::optional<LocalNode> self);
  ClientParts(const ClientParts&) = delete;
  ClientParts& operator=(const ClientParts&) = delete;

  // The largest READ of a page verified as it lands (PageReads): half a
  // 1 MiB L2 (docs/design/store-get.md, "Checksums as pages land").
  static constexpr uint64_t kLandingPiece = 512 << 10;
  // What a node's region versions READ takes: the kRegions versions, then
  // the node's epoch (NodeService writes it after them).
  static constexpr size_t kVersionsReadBytes = RegionVersions::kBytes + sizeof(uint64_t);
  static constexpr size_t kScratchSlots = 64;

  // Whether a verified page of `length` bytes is checksummed as it lands
  // (KVF_STORE_VERIFY_OVERLAP as this engine's rails decide it).
  bool VerifiesAsItLands(uint64_t length) const {
    return length > kLandingPiece ? verify_long_as_they_land : verify_short_as_they_land;
  }
  // Time a READ or a lookup needs left before its deadline to be started:
  // a twentieth of KVF_STORE_DEADLINE_MS, at least 1 ms (later, it would
  // time out and blame a home that is fine).
  net::Deadline::duration LateMargin() const;
  // Queues the keys `which` of `keys`, read at `home` without a lookup,
  // for a touch message (TouchQueue), and sends it when one is due.
  void QueueTouches(const std::string& home, const std::vector<std::string>& keys, const std::vector<size_t>& which);
  // Gives credits back to their homes (a commit of nothing), so their slots
  // are free at once; waits for the answers up to `by`.
  void GiveBack(std::vector<Credit> credits, net::Deadline by);

  Engine* const engine;
  const Settings settings;
  ControlClient* const control;
  MemberView* const members;
  ClientCounters counters;
  NodeCaller caller;
  // The pools of same-host members this process maps (KVF_STORE_SHARE_POOLS),
  // attached as the router meets their nodes, forgotten as they leave.
  PoolMaps maps;
  Router router;
  BatchRunner runner;
  LocationCache locations;  // KVF_STORE_LOCATION_CACHE
  ScratchSlots scratch;     // where the region versions of a GET's homes are READ to
  GrantBook grants;
  const bool verify_short_as_they_land;  // pages of at most kLandingPiece
  const bool verify_long_as_they_land;   // longer pages, read in pieces of kLandingPiece

 private:
  TouchQueue touches_;
};

}  // namespace kvfabric::store
