// Handoff: a node hands over to their homes the pages it holds of keys
// that home on another member now. A process that had not yet seen a new
// member (it joined, restarted, or came back after being unreachable) put
// that member's keys here, on their previous home; readers look for them
// here meanwhile (previous_homes.cc), and this moves them where every
// reader looks once the window is over.
//
// While a member of the snapshot is recent (MemberSnapshot::Recent, within
// KVF_STORE_HANDOFF_MS), and once more after, every
// KVF_STORE_MEMBERSHIP_REFRESH_MS: the pages of keys this node holds no
// copy of by placement (it ranks past KVF_STORE_MAX_COPIES for them) are
// copied out of the pool
// (unpinned ones: a pinned page stays until a pass after its unpin), a
// page the new home has already is dropped here (its copy came from a
// process that routes there: the same bytes for a KV cache, see
// docs/design/store.md), the others are PUT to their homes and dropped here once
// acknowledged, unless overwritten or pinned meanwhile. A key this node
// handed over in the window and that a lagging process wrote here again
// since is PUT over the home's page, which may be the older one this node
// handed: dropping the newer one would lose an acknowledged PUT and leave
// a superseded page on the home. A page its home
// refuses (full, unreachable, or homed here by the home's own view) is
// kept, tried again at the next pass, and left in the pool after the
// window: a process whose view places the key here still reads it, and it
// is evicted in its turn otherwise. Dropping it would lose an acknowledged
// page wherever this node's view differs from its clients'.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kvfabric/engine.h"
#include "kvfabric/settings.h"
#include "store/members/member_view.h"
#include "store/node/node_service.h"
#include "store/client/store_client.h"

namespace kvfabric::store {

class Handoff {
 public:
  // All four outlive it.
  Handoff(Engine* engine, NodeService* node, StoreClient* client, MemberView* members, const Settings& settings);
  ~Handoff();  // Stop()
  void Start();
  // Ends the thread (a pass under way finishes its batch first). Idempotent.
  void Stop();

  // What one pass did.
  struct Moved {
    size_t handed = 0;   // PUT to their homes and dropped here
    size_t present = 0;  // their homes had them already: dropped here
    size_t kept = 0;     // their homes refused them: kept here
  };
  // One pass over the pool now; `last`: the window is over (refusals are
  // said at warning). Nothing when this node is not in its own placement
  // (its view cannot tell which keys are its).
  Moved Pass(bool last);

 private:
  // Hands `pages` (copied into the scratch) over: dropped, PUT if absent,
  // or PUT over the home's page; drops the handed ones here and returns
  // those their homes refused (kept). Counts into `moved`.
  std::vector<NodeService::CopiedPage> HandBatch(const std::vector<NodeService::CopiedPage>& pages, Moved* moved,
                                                 Status* first_refusal);
  void Run();
  // Whether member `me` ranks for one of `key`'s KVF_STORE_MAX_COPIES
  // copies (with 1, whether it is the key's home): its page stays here.
  bool HoldsCopy(const Placement& placement, std::string_view key, size_t me) const;
  Status EnsureScratch();
  void FreeScratch();

  Engine* const engine_;
  NodeService* const node_;
  StoreClient* const client_;
  MemberView* const members_;
  const Settings settings_;
  std::unique_ptr<uint8_t[]> scratch_;  // registered host memory the pages are copied to; null between windows
  uint64_t scratch_bytes_ = 0;
  // Keys this node PUT to their homes in the window, and the generation of
  // the page handed; the handing thread's alone, cleared when the window ends.
  std::unordered_map<std::string, uint64_t> handed_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kvfabric::store
