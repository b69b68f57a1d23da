// GetCall: one GET of a batch of keys, from start to end. It owns the
// call's state (the keys' buffers and results, the pages under way, the
// guesses and their probe), so that each step is a method of few
// arguments. The steps, in order:
//  1. the pages whose location this process remembers are read at once
//     (guesses), in one engine batch with their homes' region versions;
//  2. the keys with no usable guess are looked up, one message per home;
//  3. the guesses whose region's version has not changed since their
//     location was answered are confirmed without a lookup; the others
//     are looked up;
//  4. each home's pages are read as soon as it answers;
//  5. every page is verified as its READs land, a guess its answer moved
//     read again at once, and the call returns once no READ can write the
//     caller's buffers any more.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kvfabric/status.h"
#include "store/client/client_parts.h"
#include "store/client/node_calls.h"
#include "store/client/page_reads.h"

namespace kvfabric::store {

class GetCall {
 public:
  // Reads keys[i] into buffers[i] (memory[i] says where they are); a
  // status per key into `results` (those not OK already are left alone),
  // the length of each page read into `lengths`.
  GetCall(ClientParts* parts, const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
          const std::vector<Memory>& memory, std::vector<Status>* results, std::vector<uint64_t>* lengths);
  GetCall(const GetCall&) = delete;
  GetCall& operator=(const GetCall&) = delete;

  // Runs the call on the keys of `calls`, grouped by the member to ask.
  void Run(std::vector<NodeCall> calls);

 private:
  // How long a GET waits for its homes' versions, at least, before it
  // looks up the guesses of the homes whose versions have not come (at
  // most a quarter of the time left: see ConfirmByVersions).
  static constexpr auto kVersionsWait = std::chrono::milliseconds(2);

  // The region versions READ for the guesses: a scratch slot per home, in
  // flights[flight] (group: its READ there).
  struct Probe {
    struct Home {
      std::string name;
      uint8_t* slot = nullptr;
      size_t group = 0;
    };
    std::vector<Home> homes;
    size_t flight = 0;
    bool Covers(const std::string& home) const;
  };
  // The versions words READ from one home (kRegions versions, then its
  // epoch), or none when they did not come in time.
  using Versions = std::optional<std::array<uint64_t, RegionVersions::kRegions + 1>>;

  // No READ starts after its lookup's read window: the slots may be reused from then on.
  net::Deadline ReadBy(const NodeCall& call) const;
  // Step 1: reads every key of calls_ whose location this process
  // remembers from the same member (guessed_[i]: key i's read in
  // reads_.pages()), in one flight that also READs the region versions of
  // the homes whose guesses will be checksummed (probe_).
  void StartGuesses();
  // Moves the keys whose guesses the versions may confirm from calls_ to later_.
  void SetAsideProbedGuesses();
  // Sends the lookups of the keys of `calls` (one message per home, all at
  // once); none when there are none. With less than LateMargin() left
  // before the deadline, sends nothing: the keys are misses, no home blamed.
  Replies Ask(std::vector<NodeCall>* calls);
  // Step 3: waits for the versions (kVersionsWait, or a quarter of the time
  // left when longer), checksumming the guesses as they land meanwhile,
  // and confirms each checksummed guess of later_ whose region's version is
  // the one its location was answered with, on the node of the epoch this
  // view knows: the key's latest page. Those keys leave later_ and are
  // listed per home in unasked_. Gives the scratch slots back.
  void ConfirmByVersions();
  // The versions of each probed home, once the wait is over.
  std::vector<Versions> AwaitVersions();
  // Takes the answers of `replies` as they come (StartReads); the keys of a
  // home that does not answer get its failure.
  void Collect(std::vector<NodeCall>* calls, Replies* replies);
  // Step 4: takes the answer of `call`: starts the READs of the keys it
  // found (one flight), confirms or moves the guesses, remembers the
  // locations, or sets the keys' results (a miss, too small buffers, a
  // refusal).
  void StartReads(const NodeCall& call);
  // Step 5: waits for every page, verifying each as it lands.
  void AwaitPages();
  // Takes page p of reads_, whose READs have ended with `ended`: its key's
  // result, or, for a guess that moved, into `moved` to be read again.
  void TakeLanded(PageRead* read, const Status& ended, std::vector<PageRead>* moved, net::Deadline* moved_by);
  // A confirmed page whose READs ended with `ended`: its key's result, its
  // bytes verified.
  void FinishRead(const PageReads& reads, const PageRead& read, const Status& ended);
  // A page's READs failed (refused or ended in error): the key's status,
  // and the home out of placement when its engine did not serve them.
  Status ReadFailed(const Status& failure, size_t key, const NodeView& home);
  // The results of the pages `refused` (never read).
  void Refuse(const PageReads::Refused& refused);

  ClientParts* const parts_;
  const std::vector<std::string>& keys_;
  const std::vector<std::vector<StoreBuffer>>& buffers_;
  const std::vector<Memory>& memory_;
  std::vector<Status>* const results_;
  std::vector<uint64_t>* const lengths_;
  const std::chrono::steady_clock::time_point asked_;
  const net::Deadline deadline_;
  PageReads reads_;  // guesses and the pages of each home's answer
  PageReads again_;  // guesses whose answer moved them, read again
  std::vector<size_t> guessed_;  // per key: its guess in reads_.pages(), or SIZE_MAX
  Probe probe_;
  std::vector<NodeCall> calls_;  // the lookups sent at once
  std::vector<NodeCall> later_;  // the lookups of guesses the versions did not confirm
  std::vector<std::pair<std::string, std::vector<size_t>>> unasked_;  // per home: keys confirmed by versions
};

}  // namespace kvfabric::store
