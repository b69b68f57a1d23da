#include "fabric/rail.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "fabric/fabric_info.h"
#include "fabric/shm_regions.h"

namespace kvfabric::fabric {
namespace {

// Counts the slices that end (and those that failed) and keeps the last
// error; it never moves a slice elsewhere.
struct CountingOwner : SliceOwner {
  std::atomic<int> done{0};
  std::atomic<int> failed{0};
  Status error;
  void OnSliceDone(const Slice&, size_t, const Status& e) override {
    if (!e.ok()) failed.fetch_add(1);
    error = e;
    done.fetch_add(1);
  }
  bool OnSliceStalled(const Slice&) override { return false; }
  bool CanMove(const Slice&) override { return false; }
  bool Abandoned() override { return false; }
};

// A region left in /dev/shm by a killed process whose pid this process now
// has must not stop the shm rail from opening (libfabric 1.17 fails
// fi_enable with EBUSY on it).
TEST(RailTest, ShmOpensOverAStaleRegionOfThisPid) {
  const std::string stale = "/dev/shm/" + std::to_string(getpid()) + ":0:0";
  { std::ofstream(stale) << "left behind by a killed process"; }
  ASSERT_TRUE(std::filesystem::exists(stale));
  InfoList infos;
  ASSERT_TRUE(InfoList::Query("shm", &infos).ok());
  std::unique_ptr<Rail> rail;
  Status s = Rail::Open(infos.entries().front(), RailOptions(), 0, &rail);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// A killed process leaves its shm regions in /dev/shm (16 MiB each): the
// next process to open an shm rail removes them, and never a live one's.
TEST(RailTest, ShmRegionsOfAKilledProcessAreRemovedAndLiveOnesKept) {
  InfoList infos;
  ASSERT_TRUE(InfoList::Query("shm", &infos).ok());
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    std::unique_ptr<Rail> rail;
    const char ok = Rail::Open(infos.entries().front(), RailOptions(), 0, &rail).ok() ? 'y' : 'n';
    (void)!write(ready[1], &ok, 1);
    pause();
    _exit(0);
  }
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, 'y');
  auto regions_of = [](pid_t pid) {
    const std::string prefix = std::string(kShmNamePrefix) + std::to_string(pid) + "-";
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
      if (e.path().filename().string().rfind(prefix, 0) == 0) names.push_back(e.path().filename().string());
    return names;
  };
  ASSERT_EQ(regions_of(child).size(), 1u);
  std::unique_ptr<Rail> mine;
  ASSERT_TRUE(Rail::Open(infos.entries().front(), RailOptions(), 0, &mine).ok());
  ASSERT_EQ(regions_of(getpid()).size(), 1u);
  // A live process's region: locked, and kept however old.
  const std::string live = "/dev/shm/" + regions_of(child)[0];
  const int fd = open(live.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_NE(flock(fd, LOCK_EX | LOCK_NB), 0) << "the child holds its region";
  close(fd);
  // The sweep may remove regions of processes other tests killed meanwhile
  // (ctest runs several at once): what counts is that the child's stays.
  RemoveAbandonedShmRegions("/dev/shm", std::chrono::seconds(0));
  EXPECT_EQ(regions_of(child).size(), 1u) << "a live process's region is kept";

  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_EQ(regions_of(child).size(), 1u) << "SIGKILL leaves the region behind";
  const ShmSweep sweep = RemoveAbandonedShmRegions("/dev/shm", std::chrono::seconds(0));
  EXPECT_GE(sweep.removed, 1u);
  EXPECT_TRUE(regions_of(child).empty());
  EXPECT_EQ(regions_of(getpid()).size(), 1u) << "this process's own region stays";
  close(ready[0]);
  close(ready[1]);
}

// Where the application chooses memory keys (tcp: no FI_MR_PROV_KEY), they
// are random over the provider's key size, not 1, 2, 3... that a client
// scanning the rail's port could guess.
TEST(RailTest, ApplicationChosenKeysAreUnguessable) {
  InfoList infos;
  ASSERT_TRUE(InfoList::Query("tcp;ofi_rxm", &infos).ok());
  const fi_info* info = infos.entries().front();
  ASSERT_EQ(info->domain_attr->mr_mode & FI_MR_PROV_KEY, 0u) << "tcp;ofi_rxm lets the application choose keys";
  std::unique_ptr<Rail> rail;
  ASSERT_TRUE(Rail::Open(info, RailOptions(), 0, &rail).ok());
  std::vector<char> buf(1 << 16);
  std::vector<std::unique_ptr<MemoryRegion>> mrs(16);
  std::set<uint64_t> keys;
  for (size_t i = 0; i < mrs.size(); ++i) {
    ASSERT_TRUE(rail->RegisterMemory(buf.data() + i * 4096, 4096, &mrs[i]).ok());
    keys.insert(mrs[i]->key());
  }
  EXPECT_EQ(keys.size(), mrs.size());
  // 16 keys drawn from 64 bits: all of them above 2^32 but with odds 2^-28.
  size_t small = 0;
  for (uint64_t k : keys) small += k < (1ull << 32);
  EXPECT_LT(small, 4u) << "keys look sequential, first " << *keys.begin();
}

// A passive shm target sees no completion for the WRITEs it serves; its
// remote-access counter tells its progress thread that it is serving.
TEST(RailTest, AShmTargetSeesPeersWritesAsRemoteActivity) {
  InfoList infos;
  ASSERT_TRUE(InfoList::Query("shm", &infos).ok());
  ASSERT_NE(infos.entries().front()->caps & FI_RMA_EVENT, 0u) << "shm rails ask for FI_RMA_EVENT";
  std::unique_ptr<Rail> initiator, target;
  ASSERT_TRUE(Rail::Open(infos.entries().front(), RailOptions(), 0, &initiator).ok());
  ASSERT_TRUE(Rail::Open(infos.entries().front(), RailOptions(), 1, &target).ok());
  std::vector<char> src(4096, 'x'), dst(4096, 0);
  std::unique_ptr<MemoryRegion> src_mr, dst_mr;
  ASSERT_TRUE(initiator->RegisterMemory(src.data(), src.size(), &src_mr).ok());
  ASSERT_TRUE(target->RegisterMemory(dst.data(), dst.size(), &dst_mr).ok());
  EXPECT_FALSE(target->TakeRemoteActivity()) << "nothing served yet";

  fi_addr_t dest;
  ASSERT_TRUE(initiator->InsertPeer(target->address(), getpid(), &dest).ok());
  CountingOwner owner;
  auto write = [&] {
    Slice slice;
    slice.owner = &owner;
    slice.local = src.data();
    slice.length = src.size();
    slice.local_desc = src_mr->desc();
    slice.dest = dest;
    slice.remote_addr = target->virt_addr() ? reinterpret_cast<uint64_t>(dst.data()) : 0;
    slice.remote_key = dst_mr->key();
    const int before = owner.done.load();
    initiator->Enqueue(&slice, 1);
    for (int i = 0; i < 5000000 && owner.done.load() == before; ++i) {
      initiator->Poll();
      target->Poll();
    }
    ASSERT_EQ(owner.done.load(), before + 1) << "the write did not complete";
    ASSERT_TRUE(owner.error.ok()) << owner.error.ToString();
  };
  ASSERT_NO_FATAL_FAILURE(write());
  EXPECT_EQ(dst[0], 'x');
  EXPECT_EQ(dst[4095], 'x');
  bool seen = false;
  for (int i = 0; i < 1000 && !seen; ++i) seen = target->TakeRemoteActivity();
  EXPECT_TRUE(seen) << "the target's counter did not count the write";
  EXPECT_FALSE(target->TakeRemoteActivity()) << "counted once";
  EXPECT_FALSE(initiator->TakeRemoteActivity()) << "the initiator served nothing";
  ASSERT_NO_FATAL_FAILURE(write());
  seen = false;
  for (int i = 0; i < 1000 && !seen; ++i) seen = target->TakeRemoteActivity();
  EXPECT_TRUE(seen) << "a second write moves the counter again";
}

// shm copies a READ inside fi_read: a progress thread that posted its whole
// queue before reading completions reported every READ of a batch at its
// end. A posting burst (RailOptions::post_burst) ends after its time, and
// the next poll reads what completed before it posts on.
TEST(RailTest, APostingBurstEndsSoCompletionsAreReadBetweenCopies) {
  InfoList infos;
  ASSERT_TRUE(InfoList::Query("shm", &infos).ok());
  RailOptions options;
  options.post_burst = std::chrono::microseconds(20);
  std::unique_ptr<Rail> initiator, target;
  ASSERT_TRUE(Rail::Open(infos.entries().front(), options, 0, &initiator).ok());
  ASSERT_TRUE(Rail::Open(infos.entries().front(), options, 1, &target).ok());
  constexpr size_t kReads = 8, kLen = size_t{1} << 20;  // a copy of 1 MiB takes far longer than 20 us
  std::vector<char> src(kReads * kLen), dst(kReads * kLen, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 7 + i / kLen);
  std::unique_ptr<MemoryRegion> src_mr, dst_mr;
  ASSERT_TRUE(target->RegisterMemory(src.data(), src.size(), &src_mr).ok());
  ASSERT_TRUE(initiator->RegisterMemory(dst.data(), dst.size(), &dst_mr).ok());
  fi_addr_t dest;
  ASSERT_TRUE(initiator->InsertPeer(target->address(), getpid(), &dest).ok());
  CountingOwner owner;
  std::vector<Slice> reads(kReads);
  for (size_t i = 0; i < kReads; ++i) {
    Slice& r = reads[i];
    r.owner = &owner;
    r.write = false;
    r.local = dst.data() + i * kLen;
    r.length = kLen;
    r.local_desc = dst_mr->desc();
    r.dest = dest;
    r.remote_addr = target->virt_addr() ? reinterpret_cast<uint64_t>(src.data() + i * kLen) : i * kLen;
    r.remote_key = src_mr->key();
  }
  initiator->Enqueue(reads.data(), kReads, /*post_now=*/false);
  for (int i = 0; i < 5000000 && owner.done.load() == 0; ++i) {
    initiator->Poll();
    target->Poll();
  }
  ASSERT_GT(owner.done.load(), 0) << "no READ completed";
  EXPECT_LT(owner.done.load(), static_cast<int>(kReads)) << "every READ was reported at once, after the last copy";
  EXPECT_TRUE(initiator->BurstLeftPosts()) << "the poll that read the first completion had more to post";
  for (int i = 0; i < 5000000 && owner.done.load() < static_cast<int>(kReads); ++i) {
    initiator->Poll();
    target->Poll();
  }
  ASSERT_EQ(owner.done.load(), static_cast<int>(kReads));
  EXPECT_EQ(owner.failed.load(), 0);
  EXPECT_FALSE(initiator->BurstLeftPosts());
  EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin())) << "the READs' bytes differ";
}

// Memory registered for peers to READ only: the provider refuses a WRITE
// whatever key the peer holds, and the bytes stay as they were. tcp ends
// the WRITE with an error (and drops that peer's connection); shm leaves
// it pending for ever, stalling only the peer that sent it: another peer
// READs the memory afterwards. (On shm a same-host peer of the same uid can
// write the memory anyway, docs/security.md.)
TEST(RailTest, APeerCannotWriteMemoryRegisteredForReadingOnly) {
  for (const char* provider : {"tcp;ofi_rxm", "shm"}) {
    SCOPED_TRACE(provider);
    const bool shm = std::string(provider) == "shm";
    InfoList infos;
    if (!InfoList::Query(provider, &infos).ok() || infos.entries().empty()) continue;
    std::unique_ptr<Rail> writer, reader, target;
    ASSERT_TRUE(Rail::Open(infos.entries().front(), RailOptions(), 0, &writer).ok());
    ASSERT_TRUE(Rail::Open(infos.entries().front(), RailOptions(), 1, &reader).ok());
    ASSERT_TRUE(Rail::Open(infos.entries().front(), RailOptions(), 2, &target).ok());
    std::vector<char> written(1048576, 'w'), read(1048576, 0), theirs(1048576, 'r');
    std::unique_ptr<MemoryRegion> written_mr, read_mr, theirs_mr;
    ASSERT_TRUE(writer->RegisterMemory(written.data(), written.size(), &written_mr).ok());
    ASSERT_TRUE(reader->RegisterMemory(read.data(), read.size(), &read_mr).ok());
    ASSERT_TRUE(target->RegisterMemory(theirs.data(), theirs.size(), &theirs_mr, PeerAccess::kRead).ok());
    // Runs one operation from `from` into the target's memory, polling
    // until it ends or `polls` ran out; returns whether it ended.
    auto run = [&](Rail* from, char* local, MemoryRegion* mr, bool write, CountingOwner* owner, int polls) {
      fi_addr_t dest;
      EXPECT_TRUE(from->InsertPeer(target->address(), getpid(), &dest).ok());
      Slice slice;
      slice.owner = owner;
      slice.write = write;
      slice.local = local;
      slice.length = theirs.size();
      slice.local_desc = mr->desc();
      slice.dest = dest;
      slice.remote_addr = target->virt_addr() ? reinterpret_cast<uint64_t>(theirs.data()) : 0;
      slice.remote_key = theirs_mr->key();
      from->Enqueue(&slice, 1);
      for (int i = 0; i < polls && owner->done.load() == 0; ++i) {
        from->Poll();
        target->Poll();
      }
      return owner->done.load() == 1;
    };
    CountingOwner wrote, got;
    const bool ended = run(writer.get(), written.data(), written_mr.get(), true, &wrote, shm ? 200000 : 5000000);
    if (!shm) {
      ASSERT_TRUE(ended) << "the refused WRITE did not end";
      EXPECT_FALSE(wrote.error.ok()) << "the WRITE was accepted";
    } else {
      EXPECT_TRUE(!ended || !wrote.error.ok()) << "the WRITE was accepted";
    }
    EXPECT_EQ(std::count(theirs.begin(), theirs.end(), 'r'), 1048576) << "the WRITE changed the memory";
    ASSERT_TRUE(run(reader.get(), read.data(), read_mr.get(), false, &got, 5000000)) << "the READ did not end";
    EXPECT_TRUE(got.error.ok()) << got.error.ToString();
    EXPECT_EQ(std::count(read.begin(), read.end(), 'r'), 1048576) << "the READ did not bring the bytes";
  }
}
// A WRITE carrying remote CQ data: the target's rail hands the data to its
// sink once that WRITE's bytes are in its memory, once per WRITE, and the
// WRITEs without data beside them give it nothing.
TEST(RailTest, RemoteCqDataReachesTheTargetOnceItsWriteLanded) {
  for (const char* provider : {"tcp;ofi_rxm", "shm"}) {
    SCOPED_TRACE(provider);
    InfoList infos;
    ASSERT_TRUE(InfoList::Query(provider, &infos).ok());
    std::unique_ptr<Rail> initiator, target;
    ASSERT_TRUE(Rail::Open(infos.entries().front(), RailOptions(), 0, &initiator).ok());
    ASSERT_TRUE(Rail::Open(infos.entries().front(), RailOptions(), 1, &target).ok());
    ASSERT_GE(target->cq_data_size(), 4u);
    constexpr size_t kPiece = 64 << 10;
    constexpr int kPieces = 4;
    std::vector<char> src(kPiece * kPieces), dst(kPiece * kPieces, 0);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>('a' + i / kPiece);
    std::unique_ptr<MemoryRegion> src_mr, dst_mr;
    ASSERT_TRUE(initiator->RegisterMemory(src.data(), src.size(), &src_mr).ok());
    ASSERT_TRUE(target->RegisterMemory(dst.data(), dst.size(), &dst_mr).ok());
    std::vector<uint64_t> arrived;
    std::vector<bool> landed_first;
    target->set_remote_data_sink([&](uint64_t data) {
      arrived.push_back(data);
      const size_t piece = data & 0xff;
      landed_first.push_back(piece < kPieces && dst[piece * kPiece] == src[piece * kPiece] &&
                             dst[(piece + 1) * kPiece - 1] == src[(piece + 1) * kPiece - 1]);
    });
    fi_addr_t dest;
    ASSERT_TRUE(initiator->InsertPeer(target->address(), getpid(), &dest).ok());
    CountingOwner owner;
    std::vector<Slice> slices(kPieces);
    for (int i = 0; i < kPieces; ++i) {
      Slice& s = slices[i];
      s.owner = &owner;
      s.local = src.data() + i * kPiece;
      s.length = kPiece;
      s.local_desc = src_mr->desc();
      s.dest = dest;
      const uint64_t at = reinterpret_cast<uint64_t>(dst.data()) + i * kPiece;
      s.remote_addr = target->virt_addr() ? at : i * kPiece;
      s.remote_key = dst_mr->key();
      // Pieces 0..2 carry their number under a tag in the high bits; 3 carries nothing.
      s.has_remote_data = i < 3;
      s.remote_data = 0xabcd0000u | static_cast<uint64_t>(i);
    }
    initiator->Enqueue(slices.data(), slices.size());
    for (int i = 0; i < 5000000 && (owner.done.load() < kPieces || arrived.size() < 3); ++i) {
      initiator->Poll();
      target->Poll();
    }
    ASSERT_EQ(owner.done.load(), kPieces) << "the writes did not complete";
    ASSERT_EQ(owner.failed.load(), 0) << owner.error.ToString();
    std::sort(arrived.begin(), arrived.end());
    EXPECT_EQ(arrived, (std::vector<uint64_t>{0xabcd0000u, 0xabcd0001u, 0xabcd0002u}));
    EXPECT_EQ(std::count(landed_first.begin(), landed_first.end(), true), 3) << "data before its bytes";
    EXPECT_EQ(dst, src);
    EXPECT_EQ(target->counters().remote_data.load(), 3u);
    EXPECT_EQ(initiator->counters().remote_data.load(), 0u);
    EXPECT_EQ(target->counters().stray_completions.load(), 0u);
  }
}

}  // namespace
}  // namespace kvfabric::fabric
