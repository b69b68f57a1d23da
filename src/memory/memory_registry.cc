#include "memory/memory_registry.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "common/hex.h"
#include "common/log.h"
#include "common/text.h"
#include "memory/cuda.h"

namespace kvfabric::memory {

using hex::Address;

namespace {

// Most threads one registration uses (EFA hosts have up to 32 NICs, each
// pinning on its own).
constexpr size_t kRegisterThreads = 32;

}  // namespace

const Chunk& Buffer::ChunkAt(uintptr_t a) const {
  if (chunks.size() == 1) return chunks.front();
  size_t lo = 0, hi = chunks.size();
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (chunks[mid].addr <= a) lo = mid; else hi = mid;
  }
  return chunks[lo];
}

uint64_t RegistrationRails(const std::vector<RailRole>& roles, uint64_t near, bool device, bool all) {
  uint64_t candidates = 0, near_candidates = 0, always = 0;
  for (size_t r = 0; r < roles.size(); ++r) {
    const uint64_t bit = uint64_t{1} << r;
    if (device) {
      if (!roles[r].hmem) continue;
    } else if (!roles[r].nic) {
      always |= bit;
      continue;
    }
    candidates |= bit;
    if (near & bit) near_candidates |= bit;
  }
  return always | (all || near_candidates == 0 ? candidates : near_candidates);
}

size_t ChunkBytes(const std::vector<RailRole>& roles, uint64_t on, size_t chunk_bytes, size_t efa_chunk_bytes) {
  bool efa = false;
  for (size_t r = 0; r < roles.size(); ++r) efa = efa || ((on >> r & 1) && roles[r].efa);
  size_t chunk = chunk_bytes;
  if (efa && efa_chunk_bytes > 0 && (chunk == 0 || efa_chunk_bytes < chunk)) chunk = efa_chunk_bytes;
  return chunk;
}

Status ParseLocation(const std::string& location, std::string* kind, int* index) {
  std::string k = location;
  int idx = 0;
  auto colon = location.find(':');
  if (colon != std::string::npos) {
    k = location.substr(0, colon);
    std::string n = location.substr(colon + 1);
    char* end = nullptr;
    long v = std::strtol(n.c_str(), &end, 10);
    if (n.empty() || *end != '\0' || v < 0 || v > 4096)
      return Status::InvalidArgument("location '" + location + "': expected cpu:N or cuda:N");
    idx = static_cast<int>(v);
  }
  if (k != "cpu" && k != "cuda")
    return Status::InvalidArgument("location '" + location + "': expected cpu:N or cuda:N");
  *kind = k;
  *index = idx;
  return Status::OK();
}

std::string DetectLocation(const void* addr, bool cuda) {
  int device = -1;
  if (cuda && cuda::Load().ok() && cuda::IsDevicePointer(addr, &device)) return text::Format("cuda:{}", device);
  // move_pages with no target nodes only reports where each page lives
  // (negative errno in `node` for a page not yet faulted in). Called through
  // syscall() so kvfabric needs no libnuma.
  const long page = sysconf(_SC_PAGESIZE);
  void* pages[1] = {reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(addr) & ~static_cast<uintptr_t>(page - 1))};
  int node = -1;
  if (syscall(SYS_move_pages, 0, 1UL, pages, nullptr, &node, 0) != 0 || node < 0) node = 0;
  return text::Format("cpu:{}", node);
}

bool IsMapped(const void* addr, size_t length) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t start = a & ~(page - 1);
  // msync fails with ENOMEM when part of the range is not mapped; MS_ASYNC
  // writes nothing back.
  return msync(reinterpret_cast<void*>(start), a + length - start, MS_ASYNC) == 0;
}

Status MemoryRegistry::CheckLocation(void* addr, size_t length, const std::string& location, const std::string& kind,
                                     int index) const {
  const std::string what = text::Format("register {} as {}", text::Range(reinterpret_cast<uintptr_t>(addr), length),
                                        location);
  int device = -1;
  if (kind != "cuda") {
    if (cuda_ && cuda::Load().ok() && cuda::IsDevicePointer(addr, &device))
      return Status::InvalidArgument(
          text::Format("{}: this is device memory of cuda:{}; register it as cuda:{}", what, device, device));
    if (!IsMapped(addr, length))
      return Status::InvalidArgument(what + ": part of the range is not mapped memory of this process (freed, or "
                                            "never allocated); register memory the process owns");
    return Status::OK();
  }
  if (!cuda_) return Status::Unavailable(what + ": GPU memory is off in this engine (KVF_CUDA=0)");
  Status s = cuda::Load();
  if (!s.ok())
    return Status::Unavailable(what + ": " + s.message() +
                               "; GPU memory needs the NVIDIA driver (or register host memory as cpu:N)");
  int last = -1;
  if (!cuda::IsDevicePointer(addr, &device) ||
      !cuda::IsDevicePointer(reinterpret_cast<const char*>(addr) + length - 1, &last) || last != device)
    return Status::InvalidArgument(what +
                                   ": not device memory the CUDA driver knows, in one allocation (host memory is cpu:N)");
  if (device != index) return Status::InvalidArgument(text::Format("{}: the memory is on cuda:{}", what, device));
  return Status::OK();
}

std::shared_ptr<const Buffer> MemoryRegistry::OverlapLocked(uintptr_t a, size_t length) const {
  auto it = buffers_.upper_bound(a);
  if (it != buffers_.end() && it->first < a + length) return it->second;
  if (it != buffers_.begin()) {
    --it;
    if (it->first + it->second->length > a) return it->second;
  }
  return nullptr;
}

MemoryRegistry::Dmabuf::~Dmabuf() {
  if (fd >= 0) close(fd);
}

MemoryRegistry::Dmabuf MemoryRegistry::ExportFor(void* addr, size_t length, int device) const {
  Dmabuf d;
  bool wanted = false;
  for (fabric::Rail* r : rails_) wanted |= r->hmem() && r->dmabuf();
  if (!wanted) return d;
  if (!cuda::DmabufSupported(device)) {
    KVF_LOG_DEBUG("cuda:{} exports no dma-buf: registering device addresses", device);
    return d;
  }
  Status s = cuda::ExportDmabuf(addr, length, &d.fd, &d.offset);
  if (!s.ok()) KVF_LOG_WARN("{}; registering the device address instead", s.message());
  return d;
}

Status MemoryRegistry::RegisterChunks(Buffer* buf, uint64_t on, size_t step, const Dmabuf& dmabuf) {
  // One task per (rail, chunk). Where registering pins pages (efa, verbs:
  // the slow part, once per NIC and page) the tasks run on several threads;
  // where a registration is a table insert (tcp, shm: tens of microseconds
  // a rail), threads cost more than they save (measured:
  // tools/bench/lab_register.py), so tcp and shm stay on this thread.
  std::vector<fabric::Rail*> targets;
  bool pins = false;
  for (fabric::Rail* r : rails_)
    if (on >> r->index() & 1) {
      targets.push_back(r);
      pins = pins || r->info().provider == "efa" || r->info().provider.rfind("verbs", 0) == 0;
    }
  const size_t tasks = targets.size() * buf->chunks.size();
  std::vector<Status> results(tasks);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t t; (t = next.fetch_add(1)) < tasks;) {
      fabric::Rail* r = targets[t % targets.size()];
      const size_t i = t / targets.size();
      Chunk& c = buf->chunks[i];
      const fabric::MemorySource m{reinterpret_cast<void*>(c.addr), c.length, buf->device, dmabuf.fd,
                                   dmabuf.offset + i * step};
      results[t] = r->RegisterMemory(m, &c.regions[r->index()],
                                     buf->read_only ? fabric::PeerAccess::kRead : fabric::PeerAccess::kReadWrite);
    }
  };
  const size_t threads = parallel_ && pins ? std::min<size_t>({tasks, kRegisterThreads,
                                                              std::max(1u, std::thread::hardware_concurrency())})
                                           : 1;
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (auto& h : helpers) h.join();
  for (const Status& st : results) KVF_RETURN_IF_ERROR(st);
  return Status::OK();
}

Status MemoryRegistry::Register(void* addr, size_t length, const std::string& requested, bool read_only) {
  const std::string location = requested == kAnyLocation && addr != nullptr ? DetectLocation(addr, cuda_) : requested;
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  if (addr == nullptr || length == 0)
    return Status::InvalidArgument("register: null address or zero length");
  if (a + length < a) return Status::InvalidArgument("register: range wraps around the address space");
  std::string kind;
  int index = 0;
  KVF_RETURN_IF_ERROR(ParseLocation(location, &kind, &index));
  KVF_RETURN_IF_ERROR(CheckLocation(addr, length, location, kind, index));
  const std::string range = "register " + text::Range(a, length);
  {
    std::shared_lock<std::shared_mutex> g(mu_);
    if (auto o = OverlapLocked(a, length))
      return Status::InvalidArgument(
          text::Format("{} overlaps registered buffer {}", range, text::Range(o->addr, o->length)));
  }

  // Register outside the lock: it is slow on EFA and must not stall transfers.
  auto buf = std::make_shared<Buffer>();
  buf->addr = a;
  buf->length = length;
  buf->location = text::Format("{}:{}", kind, index);
  if (near_rails_) buf->near_rails = near_rails_(buf->location);
  buf->device = kind == "cuda" ? index : -1;
  buf->read_only = read_only;
  // GPU memory goes on the rails that register it in place (FI_HMEM); the
  // others stage it. One dma-buf of its allocation serves every chunk and
  // rail, closed once they hold their own references.
  const Dmabuf dmabuf = buf->device >= 0 ? ExportFor(addr, length, buf->device) : Dmabuf{};
  std::vector<RailRole> roles;
  for (fabric::Rail* r : rails_) roles.push_back({r->info().provider != "shm", r->hmem(), r->info().provider == "efa"});
  const uint64_t on = RegistrationRails(roles, buf->near_rails, buf->device >= 0, all_rails_);
  const size_t chunk = ChunkBytes(roles, on, chunk_bytes_, efa_chunk_bytes_);
  const size_t step = chunk == 0 ? length : chunk;
  for (size_t off = 0; off < length; off += step) {
    Chunk c;
    c.addr = a + off;
    c.length = std::min(step, length - off);
    c.regions.resize(rails_.size());
    buf->chunks.push_back(std::move(c));
  }
  KVF_RETURN_IF_ERROR(RegisterChunks(buf.get(), on, step, dmabuf));  // what it registered closes with `buf`

  std::unique_lock<std::shared_mutex> g(mu_);
  if (auto o = OverlapLocked(a, length))  // registered concurrently by another thread
    return Status::InvalidArgument(
        text::Format("{} overlaps registered buffer {}", range, text::Range(o->addr, o->length)));
  buffers_[a] = std::move(buf);
  ++version_;
  KVF_LOG_DEBUG("registered {} {} on {} of {} rail(s)", text::Range(a, length), location, __builtin_popcountll(on),
                rails_.size());
  return Status::OK();
}

Status MemoryRegistry::Unregister(void* addr) {
  std::unique_lock<std::shared_mutex> g(mu_);
  auto it = buffers_.find(reinterpret_cast<uintptr_t>(addr));
  if (it == buffers_.end())
    return Status::NotFound("unregister " + Address(reinterpret_cast<uintptr_t>(addr)) +
                            ": not the start of a registered buffer");
  // Slices in flight hold a reference; the MRs close when the last one ends.
  buffers_.erase(it);
  ++version_;
  return Status::OK();
}

std::shared_ptr<const Buffer> MemoryRegistry::Find(uintptr_t addr, size_t len) const {
  std::shared_lock<std::shared_mutex> g(mu_);
  auto it = buffers_.upper_bound(addr);
  if (it == buffers_.begin()) return nullptr;
  --it;
  return it->second->Contains(addr, len) ? it->second : nullptr;
}

std::vector<std::shared_ptr<const Buffer>> MemoryRegistry::Snapshot() const {
  std::shared_lock<std::shared_mutex> g(mu_);
  std::vector<std::shared_ptr<const Buffer>> out;
  out.reserve(buffers_.size());
  for (const auto& [a, b] : buffers_) out.push_back(b);
  return out;
}

uint64_t MemoryRegistry::version() const {
  std::shared_lock<std::shared_mutex> g(mu_);
  return version_;
}

}  // namespace kvfabric::memory
