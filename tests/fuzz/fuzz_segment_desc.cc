// libFuzzer target: the segment descriptor parser (what a peer, etcd or an
// http store hands us), plain and sealed. Invariants: no crash, no leak, no
// hang; whatever parses serializes and parses again to the same descriptor;
// sealing it and opening it with the same token gives it back; no input
// opens as sealed without the token's MAC.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "metadata/descriptor_seal.h"
#include "metadata/segment_desc.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvfabric::metadata;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  SegmentDesc opened;
  // A forged MAC would take 2^256 tries: any success is a bug.
  if (OpenDescriptor(text, "fuzz-token", &opened).ok()) std::abort();
  (void)OpenDescriptor(text, "", &opened);
  SegmentDesc d;
  if (!FromJson(text, &d).ok()) return 0;
  d.seal_nonce.clear();
  SegmentDesc unsealed;
  if (!OpenDescriptor(SealDescriptor(d, "fuzz-token"), "fuzz-token", &unsealed).ok() ||
      ToJson(unsealed) != ToJson(d))
    std::abort();
  const std::string again = ToJson(d);
  SegmentDesc e;
  if (!FromJson(again, &e).ok() || ToJson(e) != again) std::abort();
  // Lookups on what parsed stay in bounds.
  for (const auto& b : d.buffers) (void)d.FindBuffer(b.addr, b.length);
  (void)d.FindBuffer(0, 1);
  (void)d.FindBuffer(UINT64_MAX - 1, 2);
  return 0;
}
