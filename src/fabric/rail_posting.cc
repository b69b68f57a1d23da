// Rail: posting and completions. Slices wait in a queue for a credit (a
// free operation context, one per operation the provider holds), are
// posted in order under the post lock (a peer the provider refuses goes to
// the back, and fails after RailOptions::refused_period), and end when
// their completion is read from the CQ.
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sys/uio.h>

#include <mutex>

#include "common/clock.h"
#include "common/log.h"
#include "common/text.h"
#include "fabric/completion_error.h"
#include "fabric/rail.h"

namespace kvfabric::fabric {

void Rail::Enqueue(Slice* slices, size_t n, bool post_now) {
  uint64_t bytes = 0;
  {
    std::lock_guard<std::mutex> g(queue_mu_);
    // The stall clock starts when an idle rail gets work (not at each
    // post: a post that the provider refuses with -FI_EAGAIN, as tcp does
    // forever on a link that is down, must not restart it).
    if (queued_.load() == 0 && inflight_.load() == 0) health_.WorkStarted(SteadyNowNs());
    for (size_t i = 0; i < n; ++i) {
      bytes += slices[i].length;
      pending_.push_back(std::move(slices[i]));
    }
    queued_.fetch_add(static_cast<int64_t>(n));
    unfinished_.fetch_add(static_cast<int64_t>(n));
  }
  load_bytes_.fetch_add(bytes);
  if (post_now && !post_from_progress_) KickPosting(0);
  if (waker_) waker_();
}

bool Rail::KickPosting(int64_t burst_ns) {
  // Whoever holds post_mu_ re-checks the queue after releasing it, so a slice
  // queued while another thread drains is never stranded.
  while (queued_.load() > 0) {
    {
      std::lock_guard<std::mutex> g(queue_mu_);
      if (free_.empty()) return false;  // the progress thread posts when credits return
    }
    if (!post_mu_.try_lock()) return false;
    const int64_t before = queued_.load();
    const bool burst_over = DrainLocked(burst_ns);
    post_mu_.unlock();
    if (burst_over) return queued_.load() > 0;  // completions are read before the next posts
    if (queued_.load() >= before) return false;  // no progress (EAGAIN): let the poller drive
  }
  return false;
}

int Rail::PostOne(OpContext* op) {
  Slice& s = op->slice;
  fid_ep* ep = op->peer != nullptr && op->peer->ep != nullptr ? op->peer->ep : ep_;
  if (s.write) {
    iovec iov{s.local, s.length};
    void* desc = s.local_desc;
    fi_rma_iov rma{s.remote_addr, s.length, s.remote_key};
    fi_msg_rma msg{};
    msg.msg_iov = &iov;
    msg.desc = &desc;
    msg.iov_count = 1;
    msg.addr = s.dest;
    msg.rma_iov = &rma;
    msg.rma_iov_count = 1;
    msg.context = &op->ctx;
    const uint64_t flags = write_flags_ | (s.delivery_complete ? FI_DELIVERY_COMPLETE : 0);
    if (!s.has_remote_data) return static_cast<int>(fi_writemsg(ep, &msg, flags));
    if (cq_data_size_ == 0) return -FI_EOPNOTSUPP;
    msg.data = cq_data_size_ >= 8 ? s.remote_data : s.remote_data & ((uint64_t{1} << (8 * cq_data_size_)) - 1);
    return static_cast<int>(fi_writemsg(ep, &msg, flags | FI_REMOTE_CQ_DATA));
  }
  return static_cast<int>(fi_read(ep, s.local, s.length, s.local_desc, s.dest, s.remote_addr,
                                  s.remote_key, &op->ctx));
}

bool Rail::DrainLocked(int64_t burst_ns) {
  // -FI_EAGAIN for one peer (connecting, or dead: tcp returns it forever) must
  // not block the others: such a slice goes to the back of the queue.
  // A burst bounds the time spent posting: where the provider copies inside
  // the post (shm), the completions of the posts made so far are read
  // before the next ones, instead of all at the end of a long batch.
  int eagain_streak = 0;
  int64_t budget = queued_.load();
  const int64_t drain_ns = SteadyNowNs();  // also the time of its posts (WhereaboutsOf counts in ms)
  last_drain_ns_.store(drain_ns, std::memory_order_relaxed);
  while (budget-- > 0) {
    OpContext* op = nullptr;
    {
      std::lock_guard<std::mutex> g(queue_mu_);
      if (pending_.empty() || free_.empty()) return false;
      op = free_.back();
      free_.pop_back();
      op->slice = std::move(pending_.front());
      pending_.pop_front();
      queued_.fetch_sub(1);
      if (op->slice.owner == NameProbe()) probes_queued_.fetch_sub(1);
    }
    if (op->slice.owner->Abandoned()) {
      FailUnposted(op, Status::Timeout("dropped before posting"));
      continue;
    }
    RemotePeer* peer = peers_.At(op->slice.dest);
    if (!PeerAlive(peer)) {
      FailUnposted(op, Status::NetworkError(text::Format("peer process {} on this host has exited", peer->pid)));
      continue;
    }
    op->peer = peer;
    if (peer != nullptr) peer->inflight.fetch_add(1);
    inflight_.fetch_add(1);
    op->posted = true;
    int rc = PostOne(op);
    if (rc == 0) {
      eagain_streak = 0;
      last_post_ns_.store(drain_ns, std::memory_order_relaxed);
      PeerTable::PostTaken(peer);
      if (peer != nullptr) peer->cut_since_post = false;
      if (burst_ns > 0 && SteadyNowNs() - drain_ns >= burst_ns) return true;
      continue;
    }
    op->posted = false;
    inflight_.fetch_sub(1);
    if (peer != nullptr) peer->inflight.fetch_sub(1);
    op->peer = nullptr;
    if (rc == -FI_EAGAIN) PeerTable::PostRefused(peer, op->slice.remote_addr, op->slice.remote_key);
    if (rc == -FI_EAGAIN && PeerTable::RefusedTooLong(peer, SteadyNowNs(), refused_ns_)) {
      FailUnposted(op, Status::NetworkError(text::Format(
                           "{}: the provider refused every post to peer {} for {} ms: it cannot connect (the peer "
                           "died, or its address cannot be reached; KVF_HANDSHAKE_TIMEOUT_MS)",
                           label_, PeerText(*peer), refused_ns_ / 1000000)));
      continue;
    }
    if (rc == -FI_EAGAIN) {
      {
        std::lock_guard<std::mutex> g(queue_mu_);
        if (op->slice.owner == NameProbe()) probes_queued_.fetch_add(1);
        pending_.push_back(std::move(op->slice));
        op->slice = Slice();
        free_.push_back(op);
        queued_.fetch_add(1);
      }
      if (++eagain_streak >= 4) return false;
      continue;
    }
    Status err = Status::FabricError(
        text::Format("{} on {} failed: {}", op->slice.write ? "fi_writemsg" : "fi_read", label_, fi_strerror(-rc)));
    KVF_LOG_WARN("{}", err.message());
    FailUnposted(op, err);
  }
  return false;
}

void Rail::FailUnposted(OpContext* op, const Status& error) {
  Slice s = std::move(op->slice);
  ReleaseContext(op);
  load_bytes_.fetch_sub(s.length);
  unfinished_.fetch_sub(1);
  s.owner->OnSliceDone(s, 0, error);
}

void Rail::ReleaseContext(OpContext* op) {
  op->slice.keepalive.reset();
  op->slice.owner = nullptr;
  std::lock_guard<std::mutex> g(queue_mu_);
  free_.push_back(op);
}

void Rail::Finish(OpContext* op, const Status& error) {
  if (op->peer != nullptr) op->peer->inflight.fetch_sub(1);
  op->peer = nullptr;
  op->posted = false;
  if (op->detached) {
    // Moved to another rail after a stall: its owner has forgotten it.
    op->detached = false;
    ReleaseContext(op);
    return;
  }
  Slice s = std::move(op->slice);
  ReleaseContext(op);
  load_bytes_.fetch_sub(s.length);
  unfinished_.fetch_sub(1);
  if (s.owner == NameProbe()) {
    // Not the user's traffic: no counters.
  } else if (error.ok()) {
    completed_bytes_.fetch_add(s.length, std::memory_order_relaxed);
    RailCounters::Add(s.write ? counters_.writes : counters_.reads);
    RailCounters::Add(s.write ? counters_.write_bytes : counters_.read_bytes, s.length);
  } else {
    RailCounters::Add(counters_.errors);
  }
  inflight_.fetch_sub(1);
  s.owner->OnSliceDone(s, error.ok() ? s.length : 0, error);
}

size_t Rail::ReadCompletions() {
  fi_cq_data_entry entries[64];
  std::unique_lock<std::mutex> g(cq_mu_);
  ssize_t n = fi_cq_read(cq_, entries, 64);
  if (n == -FI_EAGAIN) return 0;
  g.unlock();
  if (n > 0) {
    // Peers' WRITEs that carried remote CQ data complete here too, naming
    // no operation of ours: only our own completions bring a rail back.
    bool own = false;
    for (ssize_t i = 0; i < n; ++i) own = own || !(entries[i].flags & FI_REMOTE_CQ_DATA);
    if (own && health_.Completed(SteadyNowNs())) {
      RailCounters::Add(counters_.recoveries);
      KVF_LOG_INFO("{}: operations complete again; back in service", label_);
    }
    for (ssize_t i = 0; i < n; ++i) {
      const fi_cq_data_entry& e = entries[i];
      if (e.flags & FI_REMOTE_CQ_DATA) {
        RailCounters::Add(counters_.remote_data);
        if (remote_data_sink_) remote_data_sink_(e.data);
      } else if (e.op_context == nullptr) {
        RailCounters::Add(counters_.stray_completions);
        KVF_LOG_DEBUG("{}: a completion naming no operation (flags {:#x}); ignored", label_, e.flags);
      } else {
        Finish(reinterpret_cast<OpContext*>(e.op_context), Status::OK());
      }
    }
    return static_cast<size_t>(n);
  }
  if (n == -FI_EAVAIL) {
    fi_cq_err_entry err{};
    g.lock();
    ssize_t got = fi_cq_readerr(cq_, &err, 0);
    g.unlock();
    if (got <= 0) return 0;
    char buf[256] = {0};
    const char* text = fi_cq_strerror(cq_, err.prov_errno, err.err_data, buf, sizeof(buf));
    const Status::Code code = CompletionErrorCode(info_.provider, err.err, err.prov_errno);
    const std::string msg =
        text::Format("operation on {} failed: {} ({}){}", label_, fi_strerror(err.err), text ? text : "",
                     code == Status::Code::kNetworkError ? "; the connection to the peer was lost" : "");
    if (err.op_context != nullptr) {
      Finish(reinterpret_cast<OpContext*>(err.op_context),
             code == Status::Code::kNetworkError ? Status::NetworkError(msg) : Status::FabricError(msg));
    } else {
      // shm reports a dead peer this way; the liveness check or the request
      // deadline ends the affected work.
      KVF_LOG_DEBUG("{} (no operation context)", msg);
    }
    return 1;
  }
  if (n < 0 && n != -FI_EAGAIN)
    KVF_LOG_ERROR("fi_cq_read on {} failed: {}", label_, fi_strerror(-n));
  return 0;
}

size_t Rail::Poll() {
  size_t done = ReadCompletions();
  if (per_peer_ep_ && done == 0 && inflight_.load(std::memory_order_relaxed) > 0) {
    // Nothing completes: every 100 ms, check the processes of busy peers.
    const int64_t now = SteadyNowNs();
    if (peers_.BusyCheckDue(now)) {
      std::lock_guard<std::mutex> g(post_mu_);
      peers_.CheckBusyPeers(now);
    }
  }
  if (peers_.TakeDeadFound()) ReapDeadPeers();
  if (peers_.removals_pending()) ReapRemovedPeers();
  const int64_t now = SteadyNowNs();
  last_poll_ns_.store(now, std::memory_order_relaxed);
  health_.Sample(now, load_bytes_.load(std::memory_order_relaxed), completed_bytes_.load(std::memory_order_relaxed));
  if (done == 0) CheckStall(now);
  burst_left_posts_ = queued_.load(std::memory_order_relaxed) > 0 && KickPosting(post_burst_ns_);
  return done;
}

}  // namespace kvfabric::fabric
