// StoreClient: the store's batch calls as any process makes them. It places
// each key on its home (MemberView's snapshot), sends each home one message
// for the whole batch, at once to all homes, and moves the pages with the
// engine: a GET READs them from the homes' pools into the caller's
// buffers and verifies their checksums; a PUT lets the homes READ them from
// the caller's buffers. The calls' contracts are kvfabric::Store's.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "kvfabric/engine.h"
#include "kvfabric/store.h"
#include "store/batch_runner.h"
#include "store/control_client.h"
#include "store/member_view.h"
#include "store/node_service.h"

namespace kvfabric::store {

class StoreClient {
 public:
  // `self`: this process's node, or null for a client; its keys are
  // answered by a direct call instead of a message.
  StoreClient(Engine* engine, const Settings& settings, ControlClient* control, MemberView* members,
              NodeService* self);

  void Put(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
           std::vector<Status>* results);
  void Get(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
           std::vector<Status>* results, std::vector<uint64_t>* lengths);
  void Exists(const std::vector<std::string>& keys, std::vector<bool>* found);
  // kRemove, kPin or kUnpin: per key OK, or NotFound when the node said no.
  void KeyOp(Op op, const std::vector<std::string>& keys, std::vector<Status>* results);
  Status RemoveAll(uint64_t* removed);
  // The client's counters, into `out`.
  void AddStats(StoreStats* out) const;

  // One message to one member, for the keys `keys` (indices into the batch).
  struct NodeCall {
    std::shared_ptr<const NodeView> node;
    std::vector<size_t> keys;
    std::string request;
    Status status;
    std::string reply;
  };

 private:
  // The keys of the batch grouped by home. A key whose results[i] is not
  // OK already is left out; a key with no home (no member has a pool) gets
  // Unavailable in `results` and is left out too.
  std::vector<NodeCall> GroupByHome(const std::vector<std::string>& keys, std::vector<Status>* results) const;
  // Sends every call at once and waits for all replies (or the deadline).
  // A member whose call failed for the network or its deadline is marked down.
  void CallNodes(std::vector<NodeCall>* calls, net::Deadline deadline);
  // The batch's shape, and each key's buffers: InvalidArgument in results.
  void CheckBuffers(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                    std::vector<Status>* results) const;

  Engine* const engine_;
  const Settings settings_;
  ControlClient* const control_;
  MemberView* const members_;
  NodeService* const self_;
  BatchRunner runner_;

  struct Counters {
    std::atomic<uint64_t> put_keys{0}, put_bytes{0}, put_failures{0};
    std::atomic<uint64_t> get_keys{0}, get_hits{0}, get_bytes{0};
    std::atomic<uint64_t> misses_absent{0}, misses_checksum{0}, misses_late{0}, get_failures{0};
    std::atomic<uint64_t> exists_keys{0}, exists_hits{0};
    std::atomic<uint64_t> control_calls{0}, control_failures{0};
  };
  mutable Counters counters_;
};

}  // namespace kvfabric::store
