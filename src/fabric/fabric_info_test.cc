#include "fabric/fabric_info.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace kvfabric::fabric {
namespace {

namespace fs = std::filesystem;

TEST(DomainForDeviceTest, ExactDomainNamesMatchOnEveryProvider) {
  const std::vector<std::string> efa = {"rdmap79s0-rdm", "rdmap80s0-rdm"};
  EXPECT_EQ(DomainForDevice("rdmap80s0-rdm", efa, "efa"), "rdmap80s0-rdm");
  EXPECT_EQ(DomainForDevice("mlx5_0", {"mlx5_0", "mlx5_1"}, "verbs;ofi_rxm"), "mlx5_0");
  EXPECT_EQ(DomainForDevice("lo", {"lo", "eth0"}, "tcp;ofi_rxm"), "lo");
}

TEST(DomainForDeviceTest, EfaDeviceNamesMeanTheirRdmDomain) {
  const std::vector<std::string> efa = {"rdmap79s0-rdm", "rdmap79s0-dgrm", "rdmap80s0-rdm"};
  EXPECT_EQ(DomainForDevice("rdmap79s0", efa, "efa"), "rdmap79s0-rdm");
  EXPECT_EQ(DomainForDevice("rdmap81s0", efa, "efa"), "");
  // Only efa names its domains after the device plus "-rdm".
  EXPECT_EQ(DomainForDevice("rdmap79s0", {"rdmap79s0-rdm"}, "verbs;ofi_rxm"), "");
}

TEST(DomainForDeviceTest, IbverbsDeviceMeansItsInterfaceOnSocketProviders) {
  const fs::path root = fs::path(::testing::TempDir()) / "kvf-sysfs-domain";
  fs::remove_all(root);
  fs::create_directories(root / "class/infiniband/mlx5_0/device/net/ens1f0");
  fs::create_directories(root / "class/infiniband/mlx5_1/device/net/ens1f1");
  const std::vector<std::string> tcp = {"lo", "ens1f0", "ens1f1"};
  EXPECT_EQ(DomainForDevice("mlx5_1", tcp, "tcp;ofi_rxm", root.string()), "ens1f1");
  EXPECT_EQ(DomainForDevice("mlx5_0", tcp, "sockets", root.string()), "ens1f0");
  EXPECT_EQ(DomainForDevice("mlx5_2", tcp, "tcp;ofi_rxm", root.string()), "");
  // A device whose interface is not among the provider's domains matches nothing.
  EXPECT_EQ(DomainForDevice("mlx5_0", {"lo"}, "tcp;ofi_rxm", root.string()), "");
  fs::remove_all(root);
}

TEST(SelectDomainsTest, DeviceListsAreTrimmedDeduplicatedAndUnknownNamesListWhatExists) {
  InfoList infos;
  ASSERT_TRUE(InfoList::Query("tcp;ofi_rxm", &infos).ok());
  std::vector<fi_info*> out;
  ASSERT_TRUE(SelectDomains(infos, " lo , lo", "127.0.0.1", &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_STREQ(out[0]->domain_attr->name, "lo");
  Status s = SelectDomains(infos, "lo,mlx5_9", "127.0.0.1", &out);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_NE(s.message().find("mlx5_9"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("lo"), std::string::npos) << s.ToString();
}

// KVF_CLOSE_CONNECTIONS: a deadline's cut unless 'off'; a stalled rail's
// cut with 'auto' from libfabric 1.18 on (1.17's tcp provider frees a READ
// twice when its connection closes while the READ's bytes arrive, as they
// do on a link cut mid-transfer), with 'on' on every version, never 'off'.
TEST(MayCloseConnectionsTest, DeadlinesUnlessOffStallsFromLibfabric118) {
  EXPECT_TRUE(MayCloseConnections("auto"));
  EXPECT_TRUE(MayCloseConnections("on"));
  EXPECT_FALSE(MayCloseConnections("off"));
  EXPECT_FALSE(MayCloseConnections("nonsense")) << "settings refuse it before; never on";
  EXPECT_FALSE(MayCloseStalledConnections("auto", FI_VERSION(1, 17)));
  EXPECT_TRUE(MayCloseStalledConnections("auto", FI_VERSION(1, 18)));
  EXPECT_TRUE(MayCloseStalledConnections("auto", FI_VERSION(2, 0)));
  EXPECT_TRUE(MayCloseStalledConnections("on", FI_VERSION(1, 17)));
  EXPECT_FALSE(MayCloseStalledConnections("off", FI_VERSION(2, 0)));
}

TEST(ProviderForProtocolTest, RdmaMeansTheHostsRdmaFabricOrSaysThereIsNone) {
  std::string provider;
  Status s = ProviderForProtocol("rdma", &provider);
  if (ProviderAvailable("efa")) {
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(provider, "efa");
  } else if (ProviderAvailable("verbs;ofi_rxm")) {
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(provider, "verbs;ofi_rxm");
  } else {
    EXPECT_EQ(s.code(), Status::Code::kUnavailable);
    EXPECT_NE(s.message().find("use protocol tcp"), std::string::npos) << s.ToString();
  }
  EXPECT_EQ(ProviderForProtocol("nvlink", &provider).code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(ProviderForProtocol("tcp", &provider).ok());
  EXPECT_EQ(provider, "tcp;ofi_rxm");
}

}  // namespace
}  // namespace kvfabric::fabric
