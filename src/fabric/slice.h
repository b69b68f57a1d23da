// Slice: one fi_write or fi_read, the unit a rail posts and completes.
#pragma once

#include <rdma/fabric.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kvfabric/status.h"

namespace kvfabric::fabric {

struct Slice;

// Who is told when a slice ends (an engine task). Called from the progress
// thread or from a posting thread; implementations must be thread-safe.
class SliceOwner {
 public:
  virtual ~SliceOwner() = default;
  // The slice finished: `bytes` moved, or `error` is set. The owner may put
  // a failed slice on another rail (see engine::Rerouter) instead of failing.
  virtual void OnSliceDone(const Slice& slice, size_t bytes, const Status& error) = 0;
  // The slice's rail stalled (nothing completed on it for KVF_RAIL_STALL_MS)
  // with this slice queued, or posted on a rail that cannot close its
  // connections (Rail::CheckStall). True: the owner queued the bytes on
  // another rail and the rail forgets the slice (a posted copy that
  // completes later is discarded; its bytes may land then). False: it stays.
  virtual bool OnSliceStalled(const Slice& slice) = 0;
  // The slice's rail stalled with this slice posted, on a rail that can
  // close its connections: whether, were it to fail now, the owner would
  // move it to another rail (and not fail its request). The rail closes a
  // connection, failing its posted slices, only when every one would move.
  virtual bool CanMove(const Slice& slice) = 0;
  // True when the owner no longer wants the slice (timed out or already
  // failed): a slice still queued is then dropped without posting, and
  // OnSliceDone is called with `error` unchanged from the owner's view.
  virtual bool Abandoned() = 0;
};

struct Slice {
  SliceOwner* owner = nullptr;
  uint32_t rail = 0;      // index of the local rail it was queued on
  uint32_t attempts = 0;  // rails it was moved to after a failure or stall
  uint64_t remote_va = 0; // the remote bytes' address as the peer's segment lists them
  // The owner's own number for this slice, opaque to rails (the engine keeps
  // the staging slot of GPU memory it moves through host memory there).
  int32_t owner_tag = -1;
  bool write = true;
  void* local = nullptr;
  size_t length = 0;
  void* local_desc = nullptr;  // fi_mr_desc of the local registration
  fi_addr_t dest = FI_ADDR_UNSPEC;
  uint64_t remote_addr = 0;    // virtual address or MR offset, as the peer rail wants
  uint64_t remote_key = 0;
  // A WRITE that carries remote CQ data (fi_rma(3) FI_REMOTE_CQ_DATA): the
  // target's rail hands `remote_data` to its remote-data sink once these
  // bytes have landed. Only Rail::cq_data_size() bytes of it travel (4 at
  // least where the provider offers it).
  bool has_remote_data = false;
  uint64_t remote_data = 0;
  // A WRITE that completes only once its bytes are visible in the target's
  // memory (FI_DELIVERY_COMPLETE) whatever KVF_WRITE_COMPLETION says: a
  // notice sent after it (KVF_NOTICE_PATH=message) must not overtake it.
  bool delivery_complete = false;
  // Keeps the local registration alive until the provider is done with it,
  // even if the user unregisters the buffer meanwhile.
  std::shared_ptr<const void> keepalive;
};

}  // namespace kvfabric::fabric
