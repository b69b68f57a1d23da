#include "store/mover/pool_maps.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "store/wire/region_versions.h"
#include "store/wire/shared_keys.h"
#include "store/wire/shared_pool.h"

namespace kvfabric::store {
namespace {

constexpr size_t kPool = (1 << 20) + 100;  // not a multiple of 4 KiB: the versions' page starts after the next one
const uint64_t kKeys = SharedKeys::BytesFor(kPool);
constexpr uint64_t kEpoch = 0x5eed;

// A node's hello for a pool `pool` shares as `share`, its segment
// addresses made up (they are the node's own, not this process's).
NodeInfo InfoOf(const PoolShare& share) {
  NodeInfo info;
  info.pool_addr = 0x10000000;
  info.pool_bytes = kPool;
  info.versions_addr = 0x20000000;
  info.epoch = kEpoch;
  info.share = share;
  return info;
}

// A node's file, with a keys' table holding "held" (or no table).
struct Pool {
  SharedPool shared;
  PoolShare share;
  uint8_t* pool = nullptr;
  uint8_t* versions = nullptr;
  uint64_t keys_bytes;
  explicit Pool(uint64_t keys = kKeys) : keys_bytes(keys) {
    EXPECT_TRUE(SharedPool::Create(kPool, keys, &shared, &share).ok());
    pool = shared.pool();
    versions = shared.versions();
    for (size_t i = 0; i < kPool; ++i) pool[i] = static_cast<uint8_t>(i * 7 + 1);
    reinterpret_cast<uint64_t*>(versions)[RegionVersions::kRegions] = kEpoch;
    if (keys != 0) {
      EXPECT_TRUE(SharedKeys::Format(shared.keys(), keys).Insert("held"));
    }
  }
  ~Pool() {
    shared.Release();
    munmap(pool, SharedPool::KeysOffset(kPool) + keys_bytes);
  }
};

TEST(PoolMapsTest, APoolSharedOnThisHostIsMappedAndItsAddressesTranslated) {
  Pool p;
  PoolMaps maps(true);
  maps.Attach("n1", InfoOf(p.share), 5);
  ASSERT_EQ(maps.mapped(), 1u);
  auto map = maps.Find(5);
  ASSERT_NE(map, nullptr);
  EXPECT_EQ(maps.Find(6), nullptr) << "another segment";
  uint8_t* at = map->Local(0x10000000 + 4096, 128);
  ASSERT_NE(at, nullptr);
  EXPECT_EQ(std::memcmp(at, p.pool + 4096, 128), 0) << "the same bytes, through another mapping";
  p.pool[4096] ^= 0xff;
  EXPECT_EQ(at[0], p.pool[4096]) << "a shared mapping sees the node's writes";
  at[1] = 0x42;
  EXPECT_EQ(p.pool[4097], 0x42) << "and the node sees a writer's";
  EXPECT_EQ(map->Local(0x10000000 + kPool - 16, 16), map->Local(0x10000000, 1) + kPool - 16);
  EXPECT_EQ(map->Local(0x10000000 + kPool - 16, 17), nullptr) << "past the pool's end";
  EXPECT_EQ(map->Local(0x10000000 - 1, 2), nullptr) << "before the pool";
  EXPECT_EQ(map->Local(0x10000000 + 8, UINT64_MAX), nullptr) << "a length that wraps";
  uint8_t* words = map->Local(0x20000000, (RegionVersions::kRegions + 1) * 8);
  ASSERT_NE(words, nullptr);
  uint64_t epoch = 0;
  std::memcpy(&epoch, words + RegionVersions::kRegions * 8, 8);
  EXPECT_EQ(epoch, kEpoch) << "the versions' page follows the pool";
  EXPECT_EQ(map->Local(0x20000000, SharedPool::kVersionsBytes + 1), nullptr) << "the keys' table is no segment memory";
  ASSERT_NE(map->keys(), nullptr);
  EXPECT_EQ(map->keys()->Find("held"), SharedKeys::Answer::kPresent) << "the node's keys, read here";
  EXPECT_EQ(map->keys()->Find("other"), SharedKeys::Answer::kAbsent);
  maps.Keep({7});
  EXPECT_EQ(maps.Find(5), nullptr) << "a member that left is forgotten";
  // A node that stops in a process that goes on clears its epoch (NodeService::Stop).
  maps.Attach("n1", InfoOf(p.share), 5);
  ASSERT_NE(maps.Find(5), nullptr);
  reinterpret_cast<uint64_t*>(p.versions)[RegionVersions::kRegions] = 0;
  EXPECT_EQ(maps.Find(5), nullptr) << "a node that stopped serving its pool";
}

// The node's region versions and table of keys, after the pool in its
// file, are mapped read-only in a client: a write there kills the writer
// (here a child), not the node's table or its promise of no older page.
TEST(PoolMapsTest, TheNodesVersionsAndKeysAreReadOnlyInAClient) {
  Pool p;
  PoolMaps maps(true);
  maps.Attach("n1", InfoOf(p.share), 5);
  auto map = maps.Find(5);
  ASSERT_NE(map, nullptr);
  uint8_t* versions = map->Local(0x20000000, 8);
  ASSERT_NE(versions, nullptr);
  uint8_t* keys = versions + SharedPool::kVersionsBytes;
  // How a child that writes one byte at `at` ends: the signal, or 0.
  auto write_in_child = [](uint8_t* at) {
    const pid_t pid = fork();
    if (pid == 0) {
      std::signal(SIGSEGV, SIG_DFL);  // not the crash handler's report
      *static_cast<volatile uint8_t*>(at) = 1;
      std::_Exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  };
  EXPECT_EQ(write_in_child(versions), SIGSEGV) << "the versions are writable";
  EXPECT_EQ(write_in_child(keys + 64), SIGSEGV) << "the table of keys is writable";
  EXPECT_EQ(write_in_child(map->Local(0x10000000, 1)), 0) << "the pool is not writable";
  EXPECT_EQ(map->keys()->Find("held"), SharedKeys::Answer::kPresent);
}

TEST(PoolMapsTest, AFileWithNoKeysTableIsMappedWithoutOne) {
  Pool p(0);
  PoolMaps maps(true);
  maps.Attach("n1", InfoOf(p.share), 5);
  auto map = maps.Find(5);
  ASSERT_NE(map, nullptr);
  EXPECT_EQ(map->keys(), nullptr) << "exists asks the node";
}

TEST(PoolMapsTest, APoolIsNotMappedWhenItsHelloDoesNotMatchTheFile) {
  Pool p;
  {
    PoolMaps off(false);
    off.Attach("n1", InfoOf(p.share), 5);
    EXPECT_EQ(off.mapped(), 0u) << "KVF_STORE_SHARE_POOLS off";
  }
  auto refused = [&](NodeInfo info) {
    PoolMaps maps(true);
    maps.Attach("n1", info, 5);
    return maps.mapped() == 0;
  };
  NodeInfo info = InfoOf(p.share);
  info.share.host = "another-boot/pid:[1]";
  EXPECT_TRUE(refused(info)) << "another host";
  info = InfoOf(p.share);
  info.share.inode += 1;
  EXPECT_TRUE(refused(info)) << "another file at that fd (a reused pid)";
  info = InfoOf(p.share);
  info.share.bytes += 4096;
  EXPECT_TRUE(refused(info)) << "another length";
  info = InfoOf(p.share);
  info.share.bytes = SharedPool::VersionsOffset(kPool) + 8;
  EXPECT_TRUE(refused(info)) << "too short for the versions";
  info.share.bytes = SharedPool::KeysOffset(kPool);
  EXPECT_TRUE(refused(info)) << "another length: no keys' table";
  info = InfoOf(p.share);
  info.epoch = kEpoch + 1;
  EXPECT_TRUE(refused(info)) << "the file holds another epoch";
  info = InfoOf(p.share);
  info.share.fd = 100000;
  EXPECT_TRUE(refused(info)) << "no such fd";
  info = InfoOf(p.share);
  info.share.host.clear();
  EXPECT_TRUE(refused(info)) << "not shared";
  EXPECT_FALSE(refused(InfoOf(p.share)));
}

// A node in another process: mapped while it lives, its bytes read here;
// once it has died, Find forgets it (its pages go through the fabric, which
// fails them) though the mapping would still hold its memory.
TEST(PoolMapsTest, ANodeThatDiedIsNoLongerFound) {
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Pool p;
    char go = 0;
    (void)!write(to_parent[1], &p.share.fd, sizeof(p.share.fd));
    (void)!write(to_parent[1], &p.share.inode, sizeof(p.share.inode));
    (void)!read(to_child[0], &go, 1);
    _exit(0);
  }
  PoolShare share;
  share.host = SharedPoolHostKey();
  share.pid = static_cast<uint64_t>(child);
  share.bytes = SharedPool::KeysOffset(kPool) + kKeys;
  ASSERT_EQ(read(to_parent[0], &share.fd, sizeof(share.fd)), static_cast<ssize_t>(sizeof(share.fd)));
  ASSERT_EQ(read(to_parent[0], &share.inode, sizeof(share.inode)), static_cast<ssize_t>(sizeof(share.inode)));
  PoolMaps maps(true);
  maps.Attach("n1", InfoOf(share), 5);
  auto map = maps.Find(5);
  ASSERT_NE(map, nullptr) << "the child's pool, mapped through /proc/<pid>/fd";
  EXPECT_EQ(map->Local(0x10000000 + 3, 1)[0], static_cast<uint8_t>(3 * 7 + 1));
  map.reset();
  ASSERT_EQ(write(to_child[1], "x", 1), 1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (maps.Find(5) != nullptr && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(maps.Find(5), nullptr) << "a dead node's mapping is not used";
  EXPECT_EQ(maps.mapped(), 0u);
  waitpid(child, nullptr, 0);
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) close(fd);
}

}  // namespace
}  // namespace kvfabric::store
