#include "topology/topology.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace kvfabric::topology {
namespace {
namespace fs = std::filesystem;

// A sysfs tree of a 2-socket host: on socket 0, switch 0000:10 holds GPU 0
// and the EFA device rdmap16s0; switch 0000:20 holds GPU 1 and rdmap32s0.
// Socket 1 has an Ethernet NIC and a GPU behind its own switch with no NIC.
class FakeSysfs {
 public:
  FakeSysfs() : root_(fs::temp_directory_path() / ("kvf-sysfs-" + std::to_string(getpid()))) {
    fs::remove_all(root_);
    Pci("pci0000:00/0000:00:01.0/0000:10:00.0/0000:11:00.0", 0, "0x10de", "0x030200");  // GPU 0
    Pci("pci0000:00/0000:00:01.0/0000:10:00.0/0000:12:00.0", 0, "0x1d0f", "0x020000");  // rdmap16s0
    Pci("pci0000:00/0000:00:02.0/0000:20:00.0/0000:21:00.0", 0, "0x10de", "0x030200");  // GPU 1
    Pci("pci0000:00/0000:00:02.0/0000:20:00.0/0000:22:00.0", 0, "0x1d0f", "0x020000");  // rdmap32s0
    Pci("pci0000:80/0000:80:01.0/0000:81:00.0", 1, "0x8086", "0x020000");                // eth1
    Pci("pci0000:80/0000:80:02.0/0000:90:00.0/0000:91:00.0", 1, "0x10de", "0x030000");  // GPU 2
    Link("class/infiniband/rdmap16s0/device", "pci0000:00/0000:00:01.0/0000:10:00.0/0000:12:00.0");
    Link("class/infiniband/rdmap32s0/device", "pci0000:00/0000:00:02.0/0000:20:00.0/0000:22:00.0");
    // A virtio-style NIC: its device link points below the PCI function.
    fs::create_directories(root_ / "devices/pci0000:80/0000:80:01.0/0000:81:00.0/virtio3");
    Link("class/net/eth1/device", "pci0000:80/0000:80:01.0/0000:81:00.0/virtio3");
  }
  ~FakeSysfs() { fs::remove_all(root_); }
  std::string root() const { return root_.string(); }

 private:
  void Pci(const std::string& path, int numa, const char* vendor, const char* cls) {
    fs::path d = root_ / "devices" / path;
    fs::create_directories(d);
    std::ofstream(d / "numa_node") << numa << "\n";
    std::ofstream(d / "vendor") << vendor << "\n";
    std::ofstream(d / "class") << cls << "\n";
    fs::create_directories(root_ / "bus/pci/devices");
    fs::create_symlink(d, root_ / "bus/pci/devices" / d.filename());
  }
  void Link(const std::string& from, const std::string& to) {
    fs::create_directories((root_ / from).parent_path());
    fs::create_symlink(root_ / "devices" / to, root_ / from);
  }
  fs::path root_;
};

fabric::RailInfo Rail(const char* provider, const char* domain) {
  fabric::RailInfo r;
  r.provider = provider;
  r.domain = domain;
  return r;
}

std::vector<fabric::RailInfo> Rails() {
  return {Rail("efa", "rdmap16s0-rdm"), Rail("efa", "rdmap32s0-rdm"), Rail("tcp;ofi_rxm", "eth1"),
          Rail("shm", "shm")};
}

TEST(TopologyTest, NicsGetTheirPciAddressAndNumaNode) {
  FakeSysfs sys;
  Topology t = Topology::Discover(Rails(), sys.root());
  ASSERT_EQ(t.nics().size(), 4u);
  EXPECT_EQ(t.nics()[0].device, "rdmap16s0");
  EXPECT_EQ(t.nics()[0].pci, "0000:12:00.0");
  EXPECT_EQ(t.nics()[0].numa, 0);
  EXPECT_EQ(t.nics()[1].pci, "0000:22:00.0");
  EXPECT_EQ(t.nics()[2].pci, "0000:81:00.0");  // found above the virtio device
  EXPECT_EQ(t.nics()[2].numa, 1);
  EXPECT_EQ(t.nics()[3].pci, "");  // shm: no device
  EXPECT_EQ(t.nics()[3].numa, -1);
}

TEST(TopologyTest, GpusInPciOrderWithTheRailsBehindTheirSwitch) {
  FakeSysfs sys;
  Topology t = Topology::Discover(Rails(), sys.root());
  ASSERT_EQ(t.gpus().size(), 3u);
  EXPECT_EQ(t.gpus()[0].pci, "0000:11:00.0");
  EXPECT_EQ(t.gpus()[0].nearest_rails, (std::vector<size_t>{0}));
  EXPECT_EQ(t.gpus()[1].nearest_rails, (std::vector<size_t>{1}));
  // GPU 2 shares no switch with a NIC: its NUMA node's NIC.
  EXPECT_EQ(t.gpus()[2].numa, 1);
  EXPECT_EQ(t.gpus()[2].nearest_rails, (std::vector<size_t>{2}));
}

TEST(TopologyTest, TheCudaDriversNumberingWins) {
  FakeSysfs sys;
  Topology t = Topology::Discover(Rails(), sys.root());
  // CUDA_VISIBLE_DEVICES=1,0: cuda:0 is the second GPU in PCI order, and
  // the third GPU is hidden.
  t.SetCudaOrdinals({"0000:21:00.0", "0000:11:00.0"});
  ASSERT_EQ(t.gpus().size(), 2u);
  std::vector<size_t> pref, rest;
  t.RailsFor("cuda:0", &pref, &rest);
  EXPECT_EQ(pref, (std::vector<size_t>{1}));
  t.RailsFor("cuda:1", &pref, &rest);
  EXPECT_EQ(pref, (std::vector<size_t>{0}));
}

TEST(TopologyTest, LocationsMapToPreferredAndFallbackRails) {
  FakeSysfs sys;
  Topology t = Topology::Discover(Rails(), sys.root());
  std::vector<size_t> pref, rest;
  t.RailsFor("cuda:1", &pref, &rest);
  EXPECT_EQ(pref, (std::vector<size_t>{1}));
  EXPECT_EQ(rest, (std::vector<size_t>{0, 2, 3}));
  t.RailsFor("cpu:0", &pref, &rest);
  EXPECT_EQ(pref, (std::vector<size_t>{0, 1}));
  t.RailsFor("cpu:1", &pref, &rest);
  EXPECT_EQ(pref, (std::vector<size_t>{2}));
  // Nothing known near: every rail.
  t.RailsFor("cpu:7", &pref, &rest);
  EXPECT_EQ(pref.size(), 4u);
  EXPECT_TRUE(rest.empty());
  t.RailsFor("cuda:9", &pref, &rest);
  EXPECT_EQ(pref.size(), 4u);
  t.RailsFor("cpu", &pref, &rest);
  EXPECT_EQ(pref.size(), 4u);
}

TEST(TopologyTest, LocationMatrixHasMooncakesShape) {
  FakeSysfs sys;
  Topology t = Topology::Discover(Rails(), sys.root());
  EXPECT_EQ(t.ToLocationMatrixJson(),
            "{\"cpu:0\":[[\"rdmap16s0\",\"rdmap32s0\"],[\"eth1\",\"shm\"]],"
            "\"cpu:1\":[[\"eth1\"],[\"rdmap16s0\",\"rdmap32s0\",\"shm\"]],"
            "\"cuda:0\":[[\"rdmap16s0\"],[\"rdmap32s0\",\"eth1\",\"shm\"]],"
            "\"cuda:1\":[[\"rdmap32s0\"],[\"rdmap16s0\",\"eth1\",\"shm\"]],"
            "\"cuda:2\":[[\"eth1\"],[\"rdmap16s0\",\"rdmap32s0\",\"shm\"]]}");
  // No NIC reports a NUMA node and no GPU: one host location, every rail near.
  Topology bare = Topology::Discover({Rail("tcp;ofi_rxm", "lo")}, sys.root() + "/none");
  EXPECT_EQ(bare.ToLocationMatrixJson(), "{\"cpu:0\":[[\"lo\"],[]]}");
}

TEST(TopologyTest, FileCorrectsWhatSysfsGotWrong) {
  FakeSysfs sys;
  Topology t = Topology::Discover(Rails(), sys.root());
  ASSERT_TRUE(t.ApplyJson(R"({"nics": {"eth1": {"numa": 0}},
                               "gpus": [{"index": 0, "rails": ["eth1", "rdmap32s0-rdm"]}]})", "test")
                  .ok());
  EXPECT_EQ(t.nics()[2].numa, 0);
  ASSERT_EQ(t.gpus().size(), 1u);
  EXPECT_EQ(t.gpus()[0].nearest_rails, (std::vector<size_t>{2, 1}));
  std::vector<size_t> pref, rest;
  t.RailsFor("cpu:0", &pref, &rest);
  EXPECT_EQ(pref, (std::vector<size_t>{0, 1, 2}));
  EXPECT_NE(t.ToJson().find("\"nearest_rails\""), std::string::npos);
}

TEST(TopologyTest, BadFileChangesNothingAndSaysWhy) {
  FakeSysfs sys;
  Topology t = Topology::Discover(Rails(), sys.root());
  const std::string before = t.ToJson();
  Status s = t.ApplyJson(R"({"nics": {"eth9": {"numa": 0}}})", "topology file x.json");
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("eth9"), std::string::npos);
  EXPECT_NE(s.message().find("rdmap16s0-rdm"), std::string::npos);  // lists the rails
  EXPECT_FALSE(t.ApplyJson("{not json", "x").ok());
  EXPECT_FALSE(t.ApplyJson(R"({"gpus": [{"pci": "no index"}]})", "x").ok());
  EXPECT_EQ(t.ToJson(), before);
  EXPECT_FALSE(t.ApplyFile("/nonexistent/topology.json").ok());
}

}  // namespace
}  // namespace kvfabric::topology
