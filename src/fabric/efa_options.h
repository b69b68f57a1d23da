// EFA endpoint options (fi_efa(7)): what kvfabric sets on an efa endpoint
// before fi_enable, and what it reads back after, through OptionCalls so the
// rules run against fake provider answers on hosts without EFA
// (efa_options_test.cc). Rail::Open calls them with fi_setopt/fi_getopt.
#pragma once

#include <rdma/fi_ext.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kvfabric::fabric {

// FI_OPT_EFA_* (fi_ext.h). Debian's 1.17 headers name only the first; the
// others are the values of later libraries, which a 1.17 library answers
// with -FI_ENOPROTOOPT.
inline constexpr int kOptEfaRnrRetry = -(0xefa << 16);
inline constexpr int kOptEfaEmulatedRead = kOptEfaRnrRetry + 1;
inline constexpr int kOptEfaEmulatedWrite = kOptEfaRnrRetry + 2;
static_assert(kOptEfaRnrRetry == FI_OPT_EFA_RNR_RETRY);

// The endpoint-level option calls of one endpoint (level FI_OPT_ENDPOINT);
// each returns 0 or a negative fi_errno.
struct OptionCalls {
  std::function<int(int name, const void* value, size_t len)> set;
  std::function<int(int name, void* value, size_t* len)> get;
};

// RNR retry count meaning "retry for ever" in the EFA firmware.
inline constexpr int kEfaRnrRetryForever = 7;

struct EfaEndpointReport {
  // The RNR retry count the endpoint runs with, when set or read back.
  std::optional<size_t> rnr_retry;
  // Whether the provider emulates READ / WRITE in software (messages and
  // acks instead of device RDMA); empty when the library does not say
  // (before the options existed).
  std::optional<bool> emulated_read, emulated_write;
  // What a user should know, one sentence each (logged at warn).
  std::vector<std::string> warnings;
};

// Before fi_enable: sets FI_OPT_EFA_RNR_RETRY to `rnr_retry`. A refusal is
// a warning, not a failure: the endpoint still works with the provider's
// count.
// REQUIRES: 0 <= rnr_retry <= 7.
void SetEfaOptionsBeforeEnable(const OptionCalls& calls, int rnr_retry, EfaEndpointReport* report);

// After fi_enable: reads FI_OPT_EFA_EMULATED_READ and _WRITE where the
// library offers them, and warns when either is emulated (far below line
// rate, and GPU memory through bounce buffers).
void ReadEfaEmulation(const OptionCalls& calls, EfaEndpointReport* report);

// "READ and WRITE by device RDMA", "READ emulated, WRITE by device RDMA",
// or "not reported by this libfabric".
std::string DescribeRma(const EfaEndpointReport& report);

}  // namespace kvfabric::fabric
