// kvfabric-fabric-bench: the bare-fabric ceiling. fi_writemsg/fi_read straight
// on one libfabric RDM endpoint (no engine: no batches, no credits, no
// slicing), same provider, block size and completion semantics as the engine,
// a fixed queue depth. Engine figures are printed beside this one.
// Two-sided too: --operation=send streams untagged messages one way into
// receive buffers the target keeps posted; --operation=pingpong sends a
// block and waits for the target's answer of the same size, one round trip
// at a time (the rate counts the block both ways: 2 x block / round trip).
// The initiator's CPU time (user + system) per operation and per GB is
// reported beside the rate.
//   target:    kvfabric-fabric-bench --mode=target --protocol=tcp
//   initiator: kvfabric-fabric-bench --mode=initiator --segment_id=<host:port printed by the target>
// Only the exchange of addresses, keys and the receive buffers' plan uses a
// TCP socket.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "common/hex.h"
#include "fabric/fabric_info.h"
#include "fabric/shm_regions.h"
#include "metadata/frame.h"
#include "metadata/handshake.h"
#include "tools/bench/units.h"
#include "tools/common/flag_names.h"
#include "tools/common/cpu_time.h"
#include "net/address.h"

using namespace kvfabric;
using Clock = std::chrono::steady_clock;

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

[[noreturn]] void Die(const std::string& what, int rc) {
  std::fprintf(stderr, "kvfabric-fabric-bench: %s: %s\n", what.c_str(), rc < 0 ? fi_strerror(-rc) : "failed");
  std::exit(1);
}

struct Endpoint {
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  fid_mr* mr = nullptr;
  bool virt_addr = false;
  bool waitable = false;
  std::string name;
  std::string provider;

  void Open(const fi_info* info) {
    provider = info->fabric_attr->prov_name;
    virt_addr = info->domain_attr->mr_mode & FI_MR_VIRT_ADDR;
    // A killed process of the same pid may have left shm regions that make
    // fi_enable fail with EBUSY (as the engine's rails do).
    if (std::string(info->fabric_attr->prov_name) == "shm") kvfabric::fabric::RemoveStaleShmRegionsOfThisPid();
    int rc = fi_fabric(info->fabric_attr, &fabric, nullptr);
    if (rc) Die("fi_fabric", rc);
    if ((rc = fi_domain(fabric, const_cast<fi_info*>(info), &domain, nullptr))) Die("fi_domain", rc);
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    if ((rc = fi_av_open(domain, &av_attr, &av, nullptr))) Die("fi_av_open", rc);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_CONTEXT;
    cq_attr.size = info->tx_attr->size;
    cq_attr.wait_obj = FI_WAIT_FD;  // shm has none: spin there
    waitable = true;
    if (fi_cq_open(domain, &cq_attr, &cq, nullptr) != 0) {
      cq_attr.wait_obj = FI_WAIT_NONE;
      waitable = false;
      if ((rc = fi_cq_open(domain, &cq_attr, &cq, nullptr))) Die("fi_cq_open", rc);
    }
    if ((rc = fi_endpoint(domain, const_cast<fi_info*>(info), &ep, nullptr))) Die("fi_endpoint", rc);
    if ((rc = fi_ep_bind(ep, &av->fid, 0))) Die("fi_ep_bind av", rc);
    if ((rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV))) Die("fi_ep_bind cq", rc);
    if ((rc = fi_enable(ep))) Die("fi_enable", rc);
    char buf[256];
    size_t len = sizeof(buf);
    if ((rc = fi_getname(&ep->fid, buf, &len))) Die("fi_getname", rc);
    name.assign(buf, len);
  }
  void Register(void* p, size_t len) {
    int rc = fi_mr_reg(domain, p, len, FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 1, 0, &mr, nullptr);
    if (rc) Die("fi_mr_reg", rc);
  }
};

// Reads one completion batch; dies on an error entry. Returns how many.
ssize_t ReadCompletions(fid_cq* cq, fi_cq_entry* out, size_t n) {
  const ssize_t got = fi_cq_read(cq, out, n);
  if (got == -FI_EAVAIL) {
    fi_cq_err_entry err{};
    fi_cq_readerr(cq, &err, 0);
    Die("completion", -err.err);
  }
  return got;
}

// Posts with `post` until the provider takes it, driving progress between tries.
template <typename Post>
void PostUntilTaken(fid_cq* cq, const char* what, Post post) {
  for (;;) {
    const ssize_t rc = post();
    if (rc == 0) return;
    if (rc != -FI_EAGAIN) Die(what, static_cast<int>(rc));
    fi_cq_read(cq, nullptr, 0);  // drive progress (connection setup)
  }
}

// What the initiator asks of a target for two-sided runs: receive buffers
// of `block` bytes, `depth` of them kept posted, and for pingpong an
// answer to each message from `peer` (the initiator's endpoint name).
struct ReceivePlan {
  std::string operation;  // "send" or "pingpong"; empty: one-sided only
  size_t block = 0, depth = 0;
  std::string peer;
};

// The target's side: serves the address exchange and drives progress; for
// a two-sided plan it keeps receive buffers posted (and answers each
// message in pingpong). Every libfabric call is made on this thread: the
// handshake thread hands a plan over and waits until it is armed.
class TargetLoop {
 public:
  TargetLoop(Endpoint* ep, char* buf, size_t buffer) : ep_(ep), buf_(buf), buffer_(buffer) {}

  // On the handshake thread: arms `plan` and returns once its receives are
  // posted. A target keeps the receive buffers of its first plan: a later
  // initiator may ask for the same ones only.
  Status Arm(const ReceivePlan& plan) {
    if (plan.depth == 0 || plan.block * (plan.depth + 1) > buffer_)
      return Status::InvalidArgument("block x (depth + 1) must fit the target's buffer");
    std::unique_lock<std::mutex> g(mu_);
    if (armed_ && (plan.block != plan_.block || plan.depth != plan_.depth))
      return Status::InvalidArgument(
          "this target keeps receive buffers of the first run's block size and depth; start another target");
    pending_ = plan;
    has_pending_ = true;
    cv_.wait(g, [this] { return !has_pending_ || g_stop.load(); });
    return Status::OK();
  }

  void Run() {
    fi_cq_entry e[16];
    while (!g_stop.load()) {
      TakePlan();
      const ssize_t n = ep_->waitable ? fi_cq_sread(ep_->cq, e, 16, nullptr, 100) : fi_cq_read(ep_->cq, e, 16);
      if (n == -FI_EAVAIL) {  // an initiator that left: its answer or connection failed
        fi_cq_err_entry err{};
        fi_cq_readerr(ep_->cq, &err, 0);
        OnCompletion(static_cast<fi_context2*>(err.op_context));
      }
      if (n == -FI_EAGAIN && !ep_->waitable) sched_yield();
      for (ssize_t i = 0; i < n; ++i) OnCompletion(static_cast<fi_context2*>(e[i].op_context));
    }
  }

 private:
  void TakePlan() {
    std::lock_guard<std::mutex> g(mu_);
    if (!has_pending_) return;
    if (pending_.operation == "pingpong" && fi_av_insert(ep_->av, pending_.peer.data(), 1, &peer_, 0, nullptr) != 1)
      Die("fi_av_insert", -FI_EINVAL);
    plan_ = pending_;
    if (!armed_) {
      recv_ctx_.assign(plan_.depth, fi_context2{});
      for (size_t i = 0; i < plan_.depth; ++i) PostRecv(i);
      armed_ = true;
    }
    has_pending_ = false;
    cv_.notify_all();
  }
  void PostRecv(size_t slot) {
    PostUntilTaken(ep_->cq, "fi_recv", [&] {
      return fi_recv(ep_->ep, buf_ + slot * plan_.block, plan_.block, fi_mr_desc(ep_->mr), FI_ADDR_UNSPEC,
                     &recv_ctx_[slot]);
    });
  }
  void OnCompletion(fi_context2* ctx) {
    if (ctx == nullptr || ctx == &answer_ctx_ || recv_ctx_.empty()) return;  // an answer went out
    const size_t slot = static_cast<size_t>(ctx - recv_ctx_.data());
    if (slot >= recv_ctx_.size()) return;
    PostRecv(slot);
    if (plan_.operation != "pingpong") return;
    char* answer = buf_ + plan_.depth * plan_.block;
    PostUntilTaken(ep_->cq, "fi_send", [&] {
      return fi_send(ep_->ep, answer, plan_.block, fi_mr_desc(ep_->mr), peer_, &answer_ctx_);
    });
  }

  Endpoint* ep_;
  char* buf_;
  size_t buffer_;
  std::mutex mu_;
  std::condition_variable cv_;
  ReceivePlan pending_, plan_;
  bool has_pending_ = false;
  bool armed_ = false;  // receives posted (the first plan's)
  fi_addr_t peer_ = FI_ADDR_UNSPEC;
  std::vector<fi_context2> recv_ctx_;
  fi_context2 answer_ctx_{};
};

struct Options {
  std::string mode = "initiator", protocol = "tcp", target, local = "127.0.0.1:0", operation = "write";
  std::string device, unit = "GB";
  size_t block = 1 << 20, depth = 16, buffer = 256 << 20;
  double duration = 5;
  bool json = false, transmit_complete = false;
};

int ServeTarget(Endpoint& ep, char* buf, const Options& o, const std::string& ip, const std::string& host,
                uint16_t port, const char* domain) {
  const nlohmann::json info = {{"address", hex::Encode(ep.name)}, {"addr", reinterpret_cast<uintptr_t>(buf)},
                               {"length", o.buffer}, {"key", fi_mr_key(ep.mr)}, {"virt_addr", ep.virt_addr}};
  const std::string reply = info.dump();
  TargetLoop loop(&ep, buf, o.buffer);
  metadata::HandshakeServer::Options so;
  so.host = ip;
  so.port = port;
  std::unique_ptr<metadata::HandshakeServer> server;
  Status s = metadata::HandshakeServer::Start(
      so,
      [&](uint16_t, const std::string& payload, std::string* r) {
        if (!payload.empty()) {  // a two-sided run's plan
          const auto plan = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
          if (!plan.is_object()) return Status::InvalidArgument("a malformed receive plan");
          std::string peer;
          if (!hex::Decode(plan.value("peer", ""), &peer)) return Status::InvalidArgument("a malformed peer name");
          KVF_RETURN_IF_ERROR(loop.Arm({plan.value("operation", ""), plan.value("block", size_t{0}),
                                        plan.value("depth", size_t{0}), peer}));
        }
        *r = reply;
        return Status::OK();
      },
      &server);
  if (!s.ok()) {
    std::fprintf(stderr, "kvfabric-fabric-bench: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("kvfabric-fabric-bench target ready (%s %s): run the initiator with --segment_id=%s:%u\n",
              ep.provider.c_str(), domain, host.c_str(), server->port());
  std::fflush(stdout);
  loop.Run();  // a passive target must drive progress for manual-progress providers
  return 0;
}

// What a timed run measured.
struct Run {
  uint64_t bytes = 0, ops = 0;
  double secs = 0, cpu = 0;
  std::vector<double> rtt_us;  // pingpong's round trips
};

// Keeps `depth` operations in flight for `duration` seconds; `post(slot)`
// posts one into slot `slot`, whose context is ctx[slot].
template <typename Post>
Run Stream(Endpoint& ep, const Options& o, std::vector<fi_context2>& ctx, Post post) {
  Run run;
  const double cpu0 = tools::CpuSeconds();
  for (size_t i = 0; i < o.depth; ++i) post(i);
  const auto t0 = Clock::now();
  const auto until = t0 + std::chrono::duration<double>(o.duration);
  fi_cq_entry comp[64];
  size_t inflight = o.depth;
  while (inflight > 0) {
    const ssize_t n = ReadCompletions(ep.cq, comp, 64);
    for (ssize_t i = 0; i < n; ++i) {
      run.bytes += o.block;
      ++run.ops;
      --inflight;
      if (Clock::now() < until && !g_stop.load()) {
        post(static_cast<fi_context2*>(comp[i].op_context) - ctx.data());
        ++inflight;
      }
    }
  }
  run.secs = std::chrono::duration<double>(Clock::now() - t0).count();
  run.cpu = tools::CpuSeconds() - cpu0;
  return run;
}

// One message out, the target's answer back, one round trip at a time.
Run PingPong(Endpoint& ep, const Options& o, char* buf, fi_addr_t dest) {
  Run run;
  void* desc = fi_mr_desc(ep.mr);
  fi_context2 send_ctx{}, recv_ctx{};
  const double cpu0 = tools::CpuSeconds();
  const auto t0 = Clock::now();
  const auto until = t0 + std::chrono::duration<double>(o.duration);
  fi_cq_entry comp[4];
  while (Clock::now() < until && !g_stop.load()) {
    const auto start = Clock::now();
    PostUntilTaken(ep.cq, "fi_recv",
                   [&] { return fi_recv(ep.ep, buf + o.block, o.block, desc, FI_ADDR_UNSPEC, &recv_ctx); });
    PostUntilTaken(ep.cq, "fi_send", [&] { return fi_send(ep.ep, buf, o.block, desc, dest, &send_ctx); });
    for (int done = 0; done < 2;) done += static_cast<int>(std::max<ssize_t>(0, ReadCompletions(ep.cq, comp, 4)));
    run.rtt_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    run.bytes += 2 * o.block;
    ++run.ops;
  }
  run.secs = std::chrono::duration<double>(Clock::now() - t0).count();
  run.cpu = tools::CpuSeconds() - cpu0;
  return run;
}

void Report(const Options& o, const Endpoint& ep, Run& run) {
  double rate = 0;
  bench::ToUnit(run.bytes / run.secs, o.unit, &rate);
  const double cpu_us_per_op = run.ops ? 1e6 * run.cpu / run.ops : 0;
  const double cpu_s_per_gb = run.bytes ? run.cpu / (run.bytes / 1e9) : 0;
  double rtt_median = 0, rtt_p99 = 0;
  if (!run.rtt_us.empty()) {
    std::sort(run.rtt_us.begin(), run.rtt_us.end());
    rtt_median = run.rtt_us[run.rtt_us.size() / 2];
    rtt_p99 = run.rtt_us[std::min(run.rtt_us.size() - 1, run.rtt_us.size() * 99 / 100)];
  }
  if (o.json) {
    nlohmann::json j = {{"tool", "kvfabric-fabric-bench"}, {"operation", o.operation},
                        {"protocol", ep.provider},         {"block_size", o.block},
                        {"queue_depth", o.depth},          {"duration_s", run.secs},
                        {"bytes", run.bytes},              {"operations", run.ops},
                        {"bytes_per_s", run.bytes / run.secs}, {"rate", rate},
                        {"unit", o.unit + "/s"},           {"cpu_s", run.cpu},
                        {"cpu_us_per_op", cpu_us_per_op},  {"cpu_s_per_gb", cpu_s_per_gb}};
    if (!run.rtt_us.empty()) {
      j["rtt_us_median"] = rtt_median;
      j["rtt_us_p99"] = rtt_p99;
    }
    std::printf("%s\n", j.dump().c_str());
  }
  std::printf("kvfabric-fabric-bench %s: %s, block %zu, queue depth %zu, %.1f s: %.2f %s/s, CPU %.2f us/op, "
              "%.3f s/GB",
              o.operation.c_str(), ep.provider.c_str(), o.block, o.depth, run.secs, rate, o.unit.c_str(),
              cpu_us_per_op, cpu_s_per_gb);
  if (!run.rtt_us.empty()) std::printf(", round trip %.1f us median, %.1f us p99", rtt_median, rtt_p99);
  std::printf("\n");
}

int RunInitiator(Endpoint& ep, char* buf, const Options& o) {
  const bool two_sided = o.operation == "send" || o.operation == "pingpong";
  const std::string plan =
      two_sided ? nlohmann::json({{"operation", o.operation}, {"block", o.block}, {"depth", o.depth},
                                  {"peer", hex::Encode(ep.name)}})
                      .dump()
                : std::string();
  std::string text;
  Status s = metadata::HandshakeCall(o.target, metadata::kGetSegment, plan, {}, &text);
  if (!s.ok()) {
    std::fprintf(stderr, "kvfabric-fabric-bench: %s\n", s.ToString().c_str());
    return 1;
  }
  auto info = nlohmann::json::parse(text);
  std::string peer;
  if (!hex::Decode(info["address"].get<std::string>(), &peer)) {
    std::fprintf(stderr, "kvfabric-fabric-bench: the target sent a malformed address\n");
    return 1;
  }
  const uint64_t raddr = info["addr"].get<uint64_t>(), rlen = info["length"].get<uint64_t>();
  const uint64_t rkey = info["key"].get<uint64_t>();
  const bool rvirt = info["virt_addr"].get<bool>();
  if (rlen < o.block * o.depth) {
    std::fprintf(stderr, "kvfabric-fabric-bench: target buffer %llu < block x depth\n", (unsigned long long)rlen);
    return 1;
  }
  fi_addr_t dest;
  if (fi_av_insert(ep.av, peer.data(), 1, &dest, 0, nullptr) != 1) Die("fi_av_insert", -FI_EINVAL);
  void* desc = fi_mr_desc(ep.mr);
  const uint64_t flags = FI_COMPLETION | (o.transmit_complete ? 0 : FI_DELIVERY_COMPLETE);
  std::vector<fi_context2> ctx(o.depth);
  Run run;
  if (o.operation == "pingpong") {
    run = PingPong(ep, o, buf, dest);
  } else {
    run = Stream(ep, o, ctx, [&](size_t slot) {
      char* local_p = buf + slot * o.block;
      const uint64_t r = rvirt ? raddr + slot * o.block : slot * o.block;
      iovec iov{local_p, o.block};
      PostUntilTaken(ep.cq, "post", [&]() -> ssize_t {
        if (o.operation == "read") return fi_read(ep.ep, local_p, o.block, desc, dest, r, rkey, &ctx[slot]);
        if (o.operation == "send") {
          fi_msg msg{&iov, &desc, 1, dest, &ctx[slot], 0};
          return fi_sendmsg(ep.ep, &msg, flags);
        }
        fi_rma_iov rma{r, o.block, rkey};
        fi_msg_rma msg{};
        msg.msg_iov = &iov;
        msg.desc = &desc;
        msg.iov_count = 1;
        msg.addr = dest;
        msg.rma_iov = &rma;
        msg.rma_iov_count = 1;
        msg.context = &ctx[slot];
        return fi_writemsg(ep.ep, &msg, flags);
      });
    });
  }
  Report(o, ep, run);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"kvfabric-fabric-bench: bare libfabric throughput (RMA and messages), the ceiling for kvfabric-bench"};
  app.add_option("--mode", o.mode)->check(CLI::IsMember({"target", "initiator"}));
  app.add_option("--protocol", o.protocol, "efa, tcp, shm, verbs or sockets");
  app.add_option("--segment_id", o.target, "initiator: host:port printed by the target");
  app.add_option("--local_server_name", o.local, "target: host:port for the address exchange");
  app.add_option("--operation", o.operation,
                 "write, read (one-sided), send (a one-way stream of messages into posted receives) or pingpong "
                 "(a message and the target's answer, one round trip at a time)")
      ->check(CLI::IsMember({"read", "write", "send", "pingpong"}));
  app.add_option("--block_size", o.block)->check(CLI::PositiveNumber);
  app.add_option("--queue_depth", o.depth, "operations kept in flight (pingpong: 1)")->check(CLI::PositiveNumber);
  app.add_option("--buffer_size", o.buffer);
  app.add_option("--duration", o.duration);
  app.add_option("--nic_filter", o.device, "the NIC (libfabric domain) to use");
  app.add_option("--report_unit", o.unit);
  app.add_flag("--json", o.json);
  app.add_flag("--transmit_complete", o.transmit_complete,
               "count writes and sends complete when the source is reusable (default: delivered, as the engine)");
  tools::UseCurrentFlagNames(argc, argv, "kvfabric-fabric-bench");
  CLI11_PARSE(app, argc, argv);
  if (o.operation == "pingpong") o.depth = 1;
  if (o.buffer < o.block * (o.depth + 1)) o.buffer = o.block * (o.depth + 1);

  std::string prov;
  Status s = fabric::ProviderForProtocol(o.protocol, &prov);
  fabric::InfoList infos;
  if (s.ok()) s = fabric::InfoList::Query(prov, &infos);
  std::string host, ip;
  uint16_t port = 0;
  if (s.ok()) s = net::ParseHostPort(o.mode == "target" ? o.local : o.target, &host, &port);
  if (s.ok()) s = net::ResolveIPv4(host, &ip);
  std::vector<fi_info*> chosen;
  if (s.ok()) s = fabric::SelectDomains(infos, o.device, ip, &chosen);
  if (!s.ok()) {
    std::fprintf(stderr, "kvfabric-fabric-bench: %s\n", s.ToString().c_str());
    return 1;
  }
  Endpoint ep;
  ep.Open(chosen.front());
  void* buf = nullptr;
  if (posix_memalign(&buf, 1 << 21, o.buffer) != 0) return 1;
  std::memset(buf, 1, o.buffer);
  ep.Register(buf, o.buffer);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  if (o.mode == "target")
    return ServeTarget(ep, static_cast<char*>(buf), o, ip, host, port, chosen.front()->domain_attr->name);
  return RunInitiator(ep, static_cast<char*>(buf), o);
}
