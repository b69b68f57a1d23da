#include "store/client/client_parts.h"

#include <algorithm>

#include "store/client/verify_overlap.h"
#include "store/wire/messages.h"

namespace kvfabric::store {

uint64_t TotalBytes(const std::vector<StoreBuffer>& buffers) {
  uint64_t n = 0;
  for (const StoreBuffer& b : buffers) n += b.length;
  return n;
}

Checksum ChecksumOfBuffers(const std::vector<StoreBuffer>& buffers, uint64_t length) {
  std::vector<ByteRange> pieces;
  pieces.reserve(buffers.size());
  for (const StoreBuffer& b : buffers) pieces.push_back({b.addr, b.length});
  return ChecksumOf(pieces, length);
}

std::vector<std::string_view> KeysOf(const std::vector<std::string>& keys, const std::vector<size_t>& which) {
  std::vector<std::string_view> out;
  out.reserve(which.size());
  for (size_t i : which) out.push_back(keys[i]);
  return out;
}

ClientParts::ClientParts(Engine* engine, const Settings& settings, ControlClient* control, MemberView* members,
                         std::optional<LocalNode> self)
    : engine(engine),
      settings(settings),
      control(control),
      members(members),
      caller(settings, control, std::move(self),
             [members](const std::string& member, const Status& why) { members->MarkDown(member, why); }, &counters),
      maps(settings.store_share_pools),
      router(members, &maps),
      runner(engine, &maps),
      locations(static_cast<size_t>(settings.store_location_cache)),
      scratch(engine, kVersionsReadBytes, kScratchSlots),
      grants([control](const std::string& home) { return control->Losses(home); }),
      verify_short_as_they_land(settings.store_verify && VerifyAsPageLands(settings.store_verify_overlap,
                                                                          engine->rails(), kLandingPiece,
                                                                          kLandingPiece)),
      verify_long_as_they_land(settings.store_verify && VerifyAsPageLands(settings.store_verify_overlap,
                                                                         engine->rails(), kLandingPiece + 1,
                                                                         kLandingPiece)) {}

net::Deadline::duration ClientParts::LateMargin() const {
  return std::chrono::milliseconds(std::max<int64_t>(1, settings.store_deadline_ms / 20));
}

void ClientParts::QueueTouches(const std::string& home, const std::vector<std::string>& keys,
                               const std::vector<size_t>& which) {
  const std::vector<std::string> batch = touches_.Add(home, KeysOf(keys, which), std::chrono::steady_clock::now());
  if (batch.empty()) return;
  std::vector<std::string_view> due(batch.begin(), batch.end());
  ClientCounters::Add(counters.control_calls, 1);
  control->Call(home, EncodeKeys(Op::kTouch, due), net::DeadlineIn(settings.store_deadline_ms),
                [](Status, std::string) {});
}

void ClientParts::GiveBack(std::vector<Credit> credits, net::Deadline by) {
  std::vector<NodeCall> calls;
  for (const Credit& c : credits) {
    CommitRequest nothing{c.ticket, std::vector<CommitItem>(c.addrs.size()), {}};
    for (CommitItem& item : nothing.items) item.state = CommitState::kUnused;
    calls.push_back(NodeCall{c.node, {}, EncodeCommit(nothing), {}, {}});
  }
  if (calls.empty()) return;
  // Answered or not, the slots are the home's again: only a close waits.
  Replies replies = caller.Send(&calls, net::DeadlineIn(settings.store_deadline_ms));
  size_t which = 0;
  for (size_t n = 0; n < calls.size() && std::chrono::steady_clock::now() < by; ++n)
    if (!replies.Next(by, Wait::kSleep, &which)) break;
}

}  // namespace kvfabric::store
