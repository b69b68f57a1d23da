// libFuzzer target: the segment descriptor parser (what a peer, etcd or an
// http store hands us). Invariants: no crash, no leak, no hang; whatever
// parses serializes and parses again to the same descriptor.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "metadata/segment_desc.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvfabric::metadata;
  SegmentDesc d;
  if (!FromJson(std::string_view(reinterpret_cast<const char*>(data), size), &d).ok()) return 0;
  const std::string again = ToJson(d);
  SegmentDesc e;
  if (!FromJson(again, &e).ok() || ToJson(e) != again) std::abort();
  // Lookups on what parsed stay in bounds.
  for (const auto& b : d.buffers) (void)d.FindBuffer(b.addr, b.length);
  (void)d.FindBuffer(0, 1);
  (void)d.FindBuffer(UINT64_MAX - 1, 2);
  return 0;
}
