#include "memory/memory_registry.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "fabric/fabric_info.h"

namespace kvfabric::memory {
namespace {

class MemoryRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fabric::InfoList infos;
    ASSERT_TRUE(fabric::InfoList::Query("tcp;ofi_rxm", &infos).ok());
    std::vector<fi_info*> chosen;
    ASSERT_TRUE(fabric::SelectDomains(infos, "", "127.0.0.1", &chosen).ok());
    ASSERT_TRUE(fabric::Rail::Open(chosen.front(), fabric::RailOptions(), 0, &rail_).ok());
    buf_.resize(64 * 1024);
  }
  uintptr_t at(size_t off) { return reinterpret_cast<uintptr_t>(buf_.data()) + off; }
  std::unique_ptr<fabric::Rail> rail_;
  std::vector<uint8_t> buf_;
};

TEST_F(MemoryRegistryTest, UnmappedMemoryIsRefused) {
  // An integer address that is not mapped is refused: a peer's WRITE there
  // would kill the process.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  auto* bytes = static_cast<uint8_t*>(p);
  EXPECT_TRUE(IsMapped(bytes + 10, 2 * page - 10));
  ASSERT_EQ(munmap(bytes + page, page), 0);  // the second page goes
  EXPECT_TRUE(IsMapped(bytes, page));
  EXPECT_FALSE(IsMapped(bytes + page - 1, 2));
  MemoryRegistry reg({rail_.get()}, 0);
  Status s = reg.Register(bytes, 2 * page, "*");
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("not mapped"), std::string::npos) << s.ToString();
  EXPECT_EQ(reg.Register(bytes + page, 64, "cpu:0").code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(reg.Snapshot().empty());  // refused: nothing registered
  ASSERT_TRUE(reg.Register(bytes, page, "cpu:0").ok());
  ASSERT_TRUE(reg.Unregister(bytes).ok());
  ASSERT_EQ(munmap(bytes, page), 0);
}

TEST_F(MemoryRegistryTest, RegisterFindUnregister) {
  MemoryRegistry reg({rail_.get()}, 0);
  ASSERT_TRUE(reg.Register(buf_.data(), 16384, "cpu:0").ok());
  auto b = reg.Find(at(100), 1000);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->chunks.size(), 1u);
  ASSERT_NE(b->chunks[0].regions[0], nullptr);
  EXPECT_EQ(reg.Find(at(16383), 2), nullptr);
  EXPECT_EQ(reg.Find(at(16384), 1), nullptr);
  // Overlaps are refused: inside, straddling the start, straddling the end.
  EXPECT_EQ(reg.Register(buf_.data() + 100, 10, "cpu:0").code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(reg.Register(buf_.data() + 16000, 1000, "cpu:0").code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(reg.Register(buf_.data() + 16384, 100, "cpu").ok());  // adjacent is fine
  const uint64_t v = reg.version();
  EXPECT_EQ(reg.Unregister(buf_.data() + 1).code(), Status::Code::kNotFound);
  EXPECT_EQ(reg.version(), v);
  ASSERT_TRUE(reg.Unregister(buf_.data()).ok());
  EXPECT_EQ(reg.Find(at(0), 1), nullptr);
  EXPECT_GT(reg.version(), v);
  EXPECT_EQ(reg.Snapshot().size(), 1u);
}

TEST_F(MemoryRegistryTest, WildcardLocationIsHostMemoryWithoutCuda) {
  MemoryRegistry reg({rail_.get()}, 0);
  ASSERT_TRUE(reg.Register(buf_.data(), 4096, kAnyLocation).ok());
  auto b = reg.Find(at(0), 1);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->location.rfind("cpu:", 0), 0u) << b->location;
  EXPECT_EQ(b->device, -1);
  EXPECT_EQ(DetectLocation(buf_.data(), /*cuda=*/false), b->location);
  EXPECT_EQ(reg.Register(nullptr, 10, kAnyLocation).code(), Status::Code::kInvalidArgument);
}

TEST_F(MemoryRegistryTest, BadArgumentsChangeNothing) {
  MemoryRegistry reg({rail_.get()}, 0);
  EXPECT_EQ(reg.Register(nullptr, 10, "cpu:0").code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(reg.Register(buf_.data(), 0, "cpu:0").code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(reg.Register(buf_.data(), 10, "gpu:0").code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(reg.Register(buf_.data(), 10, "cpu:x").code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(reg.Register(buf_.data(), 10, "cuda:0").code(), Status::Code::kUnavailable);
  EXPECT_TRUE(reg.Snapshot().empty());
  EXPECT_EQ(reg.version(), 0u);
}

TEST_F(MemoryRegistryTest, LargeBuffersAreChunked) {
  MemoryRegistry reg({rail_.get()}, 4096);
  ASSERT_TRUE(reg.Register(buf_.data(), 3 * 4096 + 10, "cpu:0").ok());
  auto b = reg.Find(at(0), 3 * 4096 + 10);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->chunks.size(), 4u);
  EXPECT_EQ(b->chunks[3].length, 10u);
  EXPECT_EQ(&b->ChunkAt(at(4095)), &b->chunks[0]);
  EXPECT_EQ(&b->ChunkAt(at(4096)), &b->chunks[1]);
  EXPECT_EQ(&b->ChunkAt(at(3 * 4096 + 9)), &b->chunks[3]);
  // Each chunk has its own registration and key.
  EXPECT_NE(b->chunks[0].regions[0]->key(), b->chunks[1].regions[0]->key());
}

TEST(LocationTest, Parse) {
  std::string k;
  int i;
  ASSERT_TRUE(ParseLocation("cpu:3", &k, &i).ok());
  EXPECT_EQ(k, "cpu");
  EXPECT_EQ(i, 3);
  ASSERT_TRUE(ParseLocation("cuda:1", &k, &i).ok());
  EXPECT_FALSE(ParseLocation("cpu:", &k, &i).ok());
  EXPECT_FALSE(ParseLocation("cpu:-1", &k, &i).ok());
  EXPECT_FALSE(ParseLocation("", &k, &i).ok());
}

}  // namespace
}  // namespace kvfabric::memory

namespace kvfabric::memory {
namespace {

TEST(RegistrationRailsTest, HostMemoryGoesOnItsNearNicsAndShm) {
  // Rails 0-3 are NICs, 0 and 1 near NUMA node 0; rail 4 is shm.
  const std::vector<RailRole> roles = {{true, false}, {true, false}, {true, false}, {true, false}, {false, false}};
  EXPECT_EQ(RegistrationRails(roles, 0b00011, false, false), 0b10011u);
  // All rails when asked, or when no NIC is near (the topology is silent).
  EXPECT_EQ(RegistrationRails(roles, 0b00011, false, true), 0b11111u);
  EXPECT_EQ(RegistrationRails(roles, 0, false, false), 0b11111u);
  EXPECT_EQ(RegistrationRails(roles, 0b10000, false, false), 0b11111u);  // only shm "near": every NIC
}

TEST(RegistrationRailsTest, GpuMemoryGoesOnlyOnRailsThatRegisterItInPlace) {
  // Rails 0-3 are EFA NICs with FI_HMEM, 2 and 3 behind the GPU's switch;
  // rail 4 is shm, kept to host memory.
  const std::vector<RailRole> roles = {{true, true}, {true, true}, {true, true}, {true, true}, {false, false}};
  EXPECT_EQ(RegistrationRails(roles, 0b01100, true, false), 0b01100u);
  EXPECT_EQ(RegistrationRails(roles, 0b01100, true, true), 0b01111u);
  EXPECT_EQ(RegistrationRails(roles, 0, true, false), 0b01111u);
  // tcp: no rail registers GPU memory; it is staged.
  const std::vector<RailRole> tcp = {{true, false}, {true, false}};
  EXPECT_EQ(RegistrationRails(tcp, 0b11, true, false), 0u);
}

TEST(ChunkBytesTest, EfaRailsBoundTheChunkAndZeroMeansNoBound) {
  const std::vector<RailRole> roles = {{true, true, true}, {true, true, true}, {false, false, false}};
  constexpr size_t GiB = size_t{1} << 30;
  EXPECT_EQ(ChunkBytes(roles, 0b011, 0, 4 * GiB), 4 * GiB);
  EXPECT_EQ(ChunkBytes(roles, 0b011, GiB, 4 * GiB), GiB);      // the smaller wins
  EXPECT_EQ(ChunkBytes(roles, 0b011, 8 * GiB, 4 * GiB), 4 * GiB);
  EXPECT_EQ(ChunkBytes(roles, 0b100, 0, 4 * GiB), 0u);        // shm only: no EFA bound
  EXPECT_EQ(ChunkBytes(roles, 0b100, GiB, 4 * GiB), GiB);
  EXPECT_EQ(ChunkBytes(roles, 0b011, 0, 0), 0u);
}

}  // namespace
}  // namespace kvfabric::memory
