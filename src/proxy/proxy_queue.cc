// ProxyQueue: the proxy thread that drains the ring (ring.h) into engine
// batches, and the host producers' PutNbi and Quiet.
//
// The proxy takes up to max_batch published commands at a time, submits
// them as one engine batch (a batch the engine refuses, because one of its
// commands is bad, is submitted again one command per batch, so the bad
// one fails alone), and keeps up to max_in_flight batches unfinished. As
// the oldest batches end, each command's end is counted for its producer
// (ring.h, CountEnded) after its failure, if any, was recorded for the
// producer's next Quiet. With nothing to take and nothing ending, it polls
// with a backoff: a spin of a few microseconds, then yields, then sleeps
// of 50 us, so a quiet proxy costs little CPU and a new command waits at
// most that long.
#include "kvfabric/proxy.h"

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "common/text.h"
#include "proxy/ring.h"

namespace kvfabric::proxy {

using Clock = std::chrono::steady_clock;

void RingDeleter::operator()(kvf_proxy_ring* r) const { std::free(r); }

RingPtr NewRing(uint64_t capacity, uint64_t producers) {
  const size_t bytes = (kvf_proxy_ring_bytes(capacity, producers) + 4095) & ~size_t{4095};
  auto* r = static_cast<kvf_proxy_ring*>(std::aligned_alloc(4096, bytes));
  if (r == nullptr) return nullptr;
  std::memset(static_cast<void*>(r), 0, bytes);
  r->capacity = capacity;
  r->producers = producers;
  kvf_proxy_slot* slots = kvf_proxy_slots(r);
  for (uint64_t i = 0; i < capacity; ++i) slots[i].seq = i;
  return RingPtr(r);
}

namespace {

// Waits a little longer at each idle round: spin, then yield, then sleep.
void Backoff(int idle) {
  if (idle < 64) return;
  if (idle < 256) {
    sched_yield();
    return;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(50));
}

}  // namespace

struct ProxyQueue::Impl {
  Engine* engine = nullptr;
  ProxyOptions options;
  RingPtr ring;
  std::thread thread;
  std::atomic<bool> stop{false};
  mutable std::mutex mu;
  std::vector<Status> errors;  // per producer: the first failure since its last Quiet
  ProxyStats stats;
  // The proxy thread's own: batches submitted and not yet ended, with the
  // producer of each task.
  struct InFlight {
    BatchId batch;
    std::vector<uint64_t> producers;
  };
  std::deque<InFlight> in_flight;

  void Run();
  // Takes up to max_batch published commands and submits them; how many.
  size_t Drain();
  void Submit(const std::vector<kvf_proxy_slot>& cmds);
  // Ends the oldest batches that have ended (with `wait`, waits up to
  // 100 ms for the oldest first); whether any ended.
  bool Reap(bool wait);
  void End(uint64_t producer, const Status& s);
};

ProxyQueue::ProxyQueue(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Status ProxyQueue::Create(Engine* engine, const ProxyOptions& o, std::unique_ptr<ProxyQueue>* out) {
  if (engine == nullptr) return Status::InvalidArgument("a proxy queue needs an engine");
  if (o.capacity < 2 || (o.capacity & (o.capacity - 1)) != 0 || o.capacity > (uint64_t{1} << 24))
    return Status::InvalidArgument(
        text::Format("proxy capacity {}: a power of two from 2 to 16777216 commands", o.capacity));
  if (o.producers < 1 || o.producers > 65536)
    return Status::InvalidArgument(text::Format("proxy producers {}: 1 to 65536", o.producers));
  if (o.max_batch < 1 || o.max_batch > o.capacity)
    return Status::InvalidArgument(text::Format("proxy max_batch {}: 1 to the capacity ({})", o.max_batch,
                                                o.capacity));
  if (o.max_in_flight < 1) return Status::InvalidArgument("proxy max_in_flight: at least 1");
  auto impl = std::make_unique<Impl>();
  impl->engine = engine;
  impl->options = o;
  impl->ring = NewRing(o.capacity, o.producers);
  if (!impl->ring) return Status::Unavailable("no memory for the proxy ring");
  impl->errors.assign(o.producers, Status::OK());
  Impl* m = impl.get();
  impl->thread = std::thread([m] { m->Run(); });
  out->reset(new ProxyQueue(std::move(impl)));
  return Status::OK();
}

ProxyQueue::~ProxyQueue() {
  impl_->stop.store(true);
  impl_->thread.join();
}

kvf_proxy_ring* ProxyQueue::ring() { return impl_->ring.get(); }

ProxyStats ProxyQueue::stats() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->stats;
}

Status ProxyQueue::PutNbi(uint64_t producer, const void* local, SegmentHandle target, uint64_t remote_addr,
                          uint64_t length) {
  kvf_proxy_ring* r = impl_->ring.get();
  if (producer >= r->producers)
    return Status::InvalidArgument(text::Format("producer {} of a proxy queue of {}", producer, r->producers));
  if (length == 0 || local == nullptr) return Status::InvalidArgument("a proxy WRITE needs local memory and a length");
  const uint64_t ticket = TakeTicket(r);
  for (int idle = 0; !SlotFree(r, ticket); ++idle) Backoff(idle);  // the ring is full: the proxy frees slots
  kvf_proxy_slot cmd{};
  cmd.local = reinterpret_cast<uint64_t>(local);
  cmd.remote = remote_addr;
  cmd.length = length;
  cmd.target = target;
  cmd.producer = producer;
  Publish(r, ticket, cmd);
  return Status::OK();
}

Status ProxyQueue::Quiet(uint64_t producer, int64_t timeout_ms) {
  kvf_proxy_ring* r = impl_->ring.get();
  if (producer >= r->producers)
    return Status::InvalidArgument(text::Format("producer {} of a proxy queue of {}", producer, r->producers));
  const uint64_t issued = LoadAcquire(kvf_proxy_issued(r)[producer]);
  const auto deadline = timeout_ms < 0 ? Clock::time_point::max() : Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (int idle = 0; LoadAcquire(kvf_proxy_ended(r)[producer]) < issued; ++idle) {
    if (Clock::now() >= deadline)
      return Status::Timeout(text::Format("producer {}: {} of its {} WRITEs not ended within {} ms", producer,
                                          issued - LoadAcquire(kvf_proxy_ended(r)[producer]), issued, timeout_ms));
    Backoff(idle);
  }
  std::lock_guard<std::mutex> g(impl_->mu);
  Status e = impl_->errors[producer];
  impl_->errors[producer] = Status::OK();
  return e;
}

void ProxyQueue::Impl::Run() {
  int idle = 0;
  for (;;) {
    const size_t took = in_flight.size() < options.max_in_flight ? Drain() : 0;
    const bool reaped = Reap(/*wait=*/in_flight.size() >= options.max_in_flight);
    if (took > 0 || reaped) {
      idle = 0;
      continue;
    }
    if (stop.load() && in_flight.empty() && LoadAcquire(ring->head) == ring->tail) return;
    Backoff(idle);
    if (idle < 1024) ++idle;
  }
}

size_t ProxyQueue::Impl::Drain() {
  std::vector<kvf_proxy_slot> cmds;
  kvf_proxy_slot c;
  while (cmds.size() < options.max_batch && Take(ring.get(), &c)) cmds.push_back(c);
  if (!cmds.empty()) Submit(cmds);
  return cmds.size();
}

void ProxyQueue::Impl::Submit(const std::vector<kvf_proxy_slot>& cmds) {
  auto request = [](const kvf_proxy_slot& c) {
    return TransferRequest{OpCode::kWrite, reinterpret_cast<void*>(c.local), static_cast<SegmentHandle>(c.target),
                           c.remote, c.length};
  };
  auto submit = [&](size_t first, size_t n) {
    std::vector<TransferRequest> reqs;
    InFlight f;
    for (size_t i = first; i < first + n; ++i) {
      reqs.push_back(request(cmds[i]));
      f.producers.push_back(cmds[i].producer);
    }
    Status s = engine->AllocateBatch(n, &f.batch);
    if (s.ok()) {
      s = engine->Submit(f.batch, reqs);
      if (!s.ok()) (void)engine->FreeBatch(f.batch);  // nothing of it was submitted
    }
    if (s.ok()) {
      in_flight.push_back(std::move(f));
      std::lock_guard<std::mutex> g(mu);
      ++stats.batches;
    }
    return s;
  };
  {
    std::lock_guard<std::mutex> g(mu);
    stats.commands += cmds.size();
  }
  if (submit(0, cmds.size()).ok()) return;
  // One of them is bad: each alone, so only the bad ones fail.
  for (size_t i = 0; i < cmds.size(); ++i) {
    const Status s = submit(i, 1);
    if (!s.ok()) End(cmds[i].producer, s.Annotate(text::Format("proxy WRITE of {} bytes", cmds[i].length)));
  }
}

bool ProxyQueue::Impl::Reap(bool wait) {
  bool any = false;
  while (!in_flight.empty()) {
    InFlight& f = in_flight.front();
    TransferStatus agg;
    Status s = wait && !any ? engine->WaitBatch(f.batch, 100, &agg) : engine->GetBatchStatus(f.batch, &agg);
    if (s.ok() && agg.state == TaskState::kPending) break;
    for (size_t i = 0; i < f.producers.size(); ++i) {
      TransferStatus t;
      Status ts = engine->GetTaskStatus(f.batch, i, &t);
      if (ts.ok() && t.state != TaskState::kCompleted) ts = t.error.ok() ? Status::Internal("a proxy WRITE ended without an error") : t.error;
      End(f.producers[i], ts);
    }
    (void)engine->FreeBatch(f.batch);
    in_flight.pop_front();
    any = true;
  }
  return any;
}

void ProxyQueue::Impl::End(uint64_t producer, const Status& s) {
  if (!s.ok()) {
    std::lock_guard<std::mutex> g(mu);
    if (errors[producer].ok()) errors[producer] = s;
    ++stats.failed;
  }
  CountEnded(ring.get(), producer, !s.ok());
}

}  // namespace kvfabric::proxy
