#include "fabric/efa_options.h"

#include <gtest/gtest.h>
#include <rdma/fi_errno.h>

#include <cstring>
#include <map>

namespace kvfabric::fabric {
namespace {

// An endpoint's option table as a provider might answer: a missing name is
// -FI_ENOPROTOOPT, as libfabric 1.17 answers the emulation options.
struct FakeEndpoint {
  std::map<int, bool> bools;
  int set_result = 0;
  std::map<int, size_t> set;
  OptionCalls Calls() {
    return {[this](int name, const void* v, size_t len) {
              if (set_result != 0) return set_result;
              if (len != sizeof(size_t)) return -FI_EINVAL;
              std::memcpy(&set[name], v, len);
              return 0;
            },
            [this](int name, void* v, size_t* len) {
              auto it = bools.find(name);
              if (it == bools.end()) return -FI_ENOPROTOOPT;
              if (*len < sizeof(bool)) return -FI_ETOOSMALL;
              *static_cast<bool*>(v) = it->second;
              *len = sizeof(bool);
              return 0;
            }};
  }
};

TEST(EfaOptionsTest, RnrRetryIsSetAsASizeT) {
  FakeEndpoint ep;
  EfaEndpointReport r;
  SetEfaOptionsBeforeEnable(ep.Calls(), kEfaRnrRetryForever, &r);
  ASSERT_EQ(ep.set.count(kOptEfaRnrRetry), 1u);
  EXPECT_EQ(ep.set[kOptEfaRnrRetry], 7u);
  EXPECT_EQ(r.rnr_retry, 7u);
  EXPECT_TRUE(r.warnings.empty());
}

TEST(EfaOptionsTest, ARefusedRnrRetryIsAWarningNamingTheSetting) {
  FakeEndpoint ep;
  ep.set_result = -FI_ENOSYS;  // the device cannot change it
  EfaEndpointReport r;
  SetEfaOptionsBeforeEnable(ep.Calls(), 7, &r);
  EXPECT_FALSE(r.rnr_retry);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("KVF_EFA_RNR_RETRY"), std::string::npos) << r.warnings[0];
}

TEST(EfaOptionsTest, DeviceRdmaIsQuiet) {
  FakeEndpoint ep;
  ep.bools = {{kOptEfaEmulatedRead, false}, {kOptEfaEmulatedWrite, false}};
  EfaEndpointReport r;
  ReadEfaEmulation(ep.Calls(), &r);
  EXPECT_EQ(r.emulated_read, false);
  EXPECT_EQ(r.emulated_write, false);
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(DescribeRma(r), "READ and WRITE by device RDMA");
}

TEST(EfaOptionsTest, EmulatedWriteWarns) {
  // p4d and p5: READ by device RDMA, WRITE emulated.
  FakeEndpoint ep;
  ep.bools = {{kOptEfaEmulatedRead, false}, {kOptEfaEmulatedWrite, true}};
  EfaEndpointReport r;
  ReadEfaEmulation(ep.Calls(), &r);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("emulates WRITE in software"), std::string::npos) << r.warnings[0];
  EXPECT_EQ(DescribeRma(r), "READ by device RDMA, WRITE emulated");
}

TEST(EfaOptionsTest, BothEmulatedWarnOnce) {
  FakeEndpoint ep;
  ep.bools = {{kOptEfaEmulatedRead, true}, {kOptEfaEmulatedWrite, true}};
  EfaEndpointReport r;
  ReadEfaEmulation(ep.Calls(), &r);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("READ and WRITE"), std::string::npos) << r.warnings[0];
}

TEST(EfaOptionsTest, AnOlderLibrarySaysNothingAndWarnsOfNothing) {
  FakeEndpoint ep;  // no emulation options: libfabric 1.17
  EfaEndpointReport r;
  ReadEfaEmulation(ep.Calls(), &r);
  EXPECT_FALSE(r.emulated_read);
  EXPECT_FALSE(r.emulated_write);
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(DescribeRma(r), "not reported by this libfabric");
}

}  // namespace
}  // namespace kvfabric::fabric
