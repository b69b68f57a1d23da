// PutCall: one PUT by WRITE of a batch of keys to the members a route
// names for them, from start to end. Per home: slots first (a reserve, or
// slots the home granted ahead for this process), then the pages' WRITEs
// in one engine batch (or copies into a pool this process maps), then a
// commit that names what was written with the writer's checksums. One
// home's round trips overlap the others' bytes: each home's WRITEs start as
// soon as its slots come, and its commit goes as soon as its WRITEs end.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvfabric/status.h"
#include "store/client/client_parts.h"
#include "store/client/node_calls.h"
#include "store/wire/checksum.h"
#include "store/wire/messages.h"

namespace kvfabric::store {

class PutCall {
 public:
  // Puts keys[i] from sources[i] (memory[i] says where they are); a
  // status per key into `results`. `grants`: whether slots homes granted
  // ahead (KVF_STORE_PUT_GRANTS) may be used and asked for.
  PutCall(ClientParts* parts, const std::vector<std::string>& keys,
          const std::vector<std::vector<StoreBuffer>>& sources, const std::vector<Memory>& memory,
          std::vector<Status>* results, bool grants);
  PutCall(const PutCall&) = delete;
  PutCall& operator=(const PutCall&) = delete;

  // Runs the PUT of the keys of `calls`, grouped by the member each goes
  // to. Returns the keys whose granted slots their home no longer held (it
  // restarted, or they outlived their time), their results OK, to be put
  // again by reserve while there is time (else they fail here).
  std::vector<size_t> Run(std::vector<NodeCall> calls);

 private:
  // A home's part of the PUT.
  struct Push {
    Slots slots;                   // its reserve's reply, or the slots it granted ahead
    bool granted = false;          // slots from a credit: the commit names each page's key
    std::vector<size_t> slot_of;   // per key of its call: its slot in `slots`
    std::vector<size_t> group_of;  // per key of its call: the key's group in the flight, or SIZE_MAX
    BatchRunner::Flight flight;    // its pages' WRITEs
    std::vector<Status> wrote;     // per group
    CommitRequest commit;
    uint64_t losses = 0;  // ControlClient::Losses of the home as the commit went
  };

  // Takes a credit for each home whose pages fit one, and asks the others
  // for slots (one reserve each, all at once).
  Replies AskForSlots();
  // Takes the reserves' replies as they come and starts each home's
  // WRITEs; checksums the host pages while no reply waits.
  void TakeSlots(Replies* reserves);
  // The lengths of the pages of `call`, in its keys' order.
  std::vector<uint64_t> PageLengths(const NodeCall& call) const;
  // Checksums the next host page not yet summed.
  void SumNext();
  // Reads the home's reserve reply in calls_[c] (renewing the view of a
  // home that restarted) and StartWrites. Whether the home holds a
  // reservation, which a commit must then end.
  bool StartPush(size_t c);
  // Starts the WRITEs of the pages of calls_[c] into the slots of its push
  // (one engine batch, a group per page); keys whose slot was refused get
  // their results.
  void StartWrites(size_t c);
  // Waits for the WRITEs of each started home and sends its commit.
  void SendCommits();
  // The commit of calls_[c] once its WRITEs ended: what was written, with
  // the writer's checksums, and the slots to grant for the next PUT.
  CommitRequest CommitOf(size_t c);
  // Takes each commit's reply: the keys' results, their locations, and the
  // slots granted for the next PUT.
  void TakeCommits();
  // Keeps the slots `reply` granted for the next PUT to the home of calls_[c].
  void KeepGrant(size_t c, CommitReply* reply);
  // The keys of `again_`: OK to be put again by reserve when time is left,
  // else failed.
  std::vector<size_t> Retry();

  ClientParts* const parts_;
  const std::vector<std::string>& keys_;
  const std::vector<std::vector<StoreBuffer>>& sources_;
  const std::vector<Memory>& memory_;
  std::vector<Status>* const results_;
  const bool grants_;
  const int64_t deadline_ms_;
  const net::Deadline deadline_;
  const net::Deadline writes_by_;  // early enough to leave the commits their time

  std::vector<NodeCall> calls_;
  std::vector<Push> pushes_;          // per call
  std::vector<NodeCall> reserving_;   // the reserves sent
  std::vector<size_t> asking_;        // per reserve: its call
  std::vector<size_t> started_;       // the calls whose reservations need a commit, in the order they started
  std::vector<std::optional<Checksum>> sums_;  // per key: its checksum, when taken by the writer
  std::vector<size_t> to_sum_;        // the keys in host memory, to checksum
  size_t summed_ = 0;
  std::vector<std::vector<NodeCall>> commits_;  // per started call: its commit
  std::vector<Replies> commit_replies_;
  std::vector<size_t> again_;            // keys whose granted slots their home no longer knew
  std::vector<std::string> gone_from_;   // and those homes
};

}  // namespace kvfabric::store
