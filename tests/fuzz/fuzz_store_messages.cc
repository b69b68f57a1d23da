// libFuzzer target: the store's control messages (what any client or node
// on the network can send). Invariants: no crash, no leak, no hang, no
// allocation the input cannot pay for (a count larger than the bytes left
// is refused before anything is reserved); whatever decodes encodes back
// to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "store/wire/messages.h"

using namespace kvfabric::store;

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  Op op;
  if (PeekOp(in, &op).ok()) {
    std::vector<std::string_view> keys;
    if (DecodeKeys(in, &keys).ok()) Check(EncodeKeys(op, keys) == in);
    PutRequest put;
    if (op == Op::kPut && DecodePut(in, &put).ok()) Check(EncodePut(put) == in);
    ReserveRequest reserve;
    if (op == Op::kReserve && DecodeReserve(in, &reserve).ok()) Check(EncodeReserve(reserve) == in);
    CommitRequest commit;
    if (op == Op::kCommit && DecodeCommit(in, &commit).ok()) Check(EncodeCommit(commit) == in);
  }
  // Replies, for any number of keys the input could describe.
  const size_t expected = size >= 4 ? static_cast<uint8_t>(in[0]) : 0;  // a reply starts with its count
  std::vector<Location> locations;
  if (DecodeLocations(in, expected, &locations).ok()) Check(EncodeLocations(locations) == in);
  std::vector<bool> bits;
  if (DecodeBits(in, expected, &bits).ok()) Check(EncodeBits(bits) == in);
  std::vector<kvfabric::Status> statuses;
  if (DecodeStatuses(in, expected, &statuses).ok()) Check(EncodeStatuses(statuses) == in);
  Slots slots;  // its count follows the ticket and the epoch
  if (DecodeSlots(in, size >= 20 ? static_cast<uint8_t>(in[16]) : 0, &slots).ok()) Check(EncodeSlots(slots) == in);
  NodeInfo info;
  if (DecodeNodeInfo(in, &info).ok()) Check(EncodeNodeInfo(info) == in);
  NodeStats stats;
  if (DecodeNodeStats(in, &stats).ok()) Check(EncodeNodeStats(stats) == in);
  return 0;
}
