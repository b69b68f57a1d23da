#include "fabric/efa_options.h"

#include <rdma/fi_errno.h>

#include "common/text.h"

namespace kvfabric::fabric {

void SetEfaOptionsBeforeEnable(const OptionCalls& calls, int rnr_retry, EfaEndpointReport* report) {
  const size_t value = static_cast<size_t>(rnr_retry);
  const int rc = calls.set(kOptEfaRnrRetry, &value, sizeof(value));
  if (rc == 0) {
    report->rnr_retry = value;
    return;
  }
  report->warnings.push_back(text::Format(
      "the efa provider refused RNR retry {} (fi_setopt FI_OPT_EFA_RNR_RETRY: {}); the endpoint keeps the provider's "
      "count, so a busy receiver may fail operations instead of retrying them (KVF_EFA_RNR_RETRY)",
      rnr_retry, fi_strerror(-rc)));
}

void ReadEfaEmulation(const OptionCalls& calls, EfaEndpointReport* report) {
  auto read = [&](int name) -> std::optional<bool> {
    bool v = false;
    size_t len = sizeof(v);
    if (calls.get(name, &v, &len) != 0 || len != sizeof(v)) return std::nullopt;
    return v;
  };
  report->emulated_read = read(kOptEfaEmulatedRead);
  report->emulated_write = read(kOptEfaEmulatedWrite);
  std::string emulated;
  if (report->emulated_read.value_or(false)) emulated = "READ";
  if (report->emulated_write.value_or(false)) emulated += emulated.empty() ? "WRITE" : " and WRITE";
  if (!emulated.empty())
    report->warnings.push_back(text::Format(
        "the efa provider emulates {} in software here (messages and acks, not device RDMA): transfers run far "
        "below line rate. Device RDMA depends on the instance's EFA generation (fi_efa(7), the AWS EFA "
        "documentation), FI_EFA_USE_DEVICE_RDMA unset or 1, and libfabric 1.18 or later",
        emulated));
}

std::string DescribeRma(const EfaEndpointReport& r) {
  if (!r.emulated_read && !r.emulated_write) return "not reported by this libfabric";
  auto one = [](const std::optional<bool>& e) { return !e ? "unknown" : *e ? "emulated" : "by device RDMA"; };
  if (r.emulated_read == r.emulated_write) return text::Format("READ and WRITE {}", one(r.emulated_read));
  return text::Format("READ {}, WRITE {}", one(r.emulated_read), one(r.emulated_write));
}

}  // namespace kvfabric::fabric
