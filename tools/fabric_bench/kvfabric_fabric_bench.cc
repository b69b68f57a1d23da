// kvfabric-fabric-bench: the bare-fabric ceiling. fi_writemsg/fi_read straight
// on one libfabric RDM endpoint (no engine: no batches, no credits, no
// slicing), same provider, block size and completion semantics as the engine,
// a fixed queue depth. Engine figures are printed beside this one.
//   target:    kvfabric-fabric-bench --mode=target --protocol=tcp
//   initiator: kvfabric-fabric-bench --mode=initiator --segment_id=<host:port printed by the target>
// Only the exchange of addresses and keys uses a TCP socket.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/hex.h"
#include "fabric/fabric_info.h"
#include "fabric/shm_regions.h"
#include "metadata/frame.h"
#include "metadata/handshake.h"
#include "tools/bench/units.h"
#include "tools/common/flag_names.h"
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

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "initiator", protocol = "tcp", target, local = "127.0.0.1:0", operation = "write";
  std::string device, unit = "GB";
  size_t block = 1 << 20, depth = 16, buffer = 256 << 20;
  double duration = 5;
  bool json = false, transmit_complete = false;
  CLI::App app{"kvfabric-fabric-bench: bare libfabric RMA throughput, the ceiling for kvfabric-bench"};
  app.add_option("--mode", mode)->check(CLI::IsMember({"target", "initiator"}));
  app.add_option("--protocol", protocol, "efa, tcp, shm, verbs or sockets");
  app.add_option("--segment_id", target, "initiator: host:port printed by the target");
  app.add_option("--local_server_name", local, "target: host:port for the address exchange");
  app.add_option("--operation", operation)->check(CLI::IsMember({"read", "write"}));
  app.add_option("--block_size", block)->check(CLI::PositiveNumber);
  app.add_option("--queue_depth", depth, "operations kept in flight")->check(CLI::PositiveNumber);
  app.add_option("--buffer_size", buffer);
  app.add_option("--duration", duration);
  app.add_option("--nic_filter", device, "the NIC (libfabric domain) to use");
  app.add_option("--report_unit", unit);
  app.add_flag("--json", json);
  app.add_flag("--transmit_complete", transmit_complete,
               "count writes complete when the source is reusable (default: delivered, as the engine)");
  tools::UseCurrentFlagNames(argc, argv, "kvfabric-fabric-bench");
  CLI11_PARSE(app, argc, argv);
  if (buffer < block * depth) buffer = block * depth;

  std::string prov;
  Status s = fabric::ProviderForProtocol(protocol, &prov);
  fabric::InfoList infos;
  if (s.ok()) s = fabric::InfoList::Query(prov, &infos);
  std::string host, ip;
  uint16_t port = 0;
  if (s.ok()) s = net::ParseHostPort(mode == "target" ? local : target, &host, &port);
  if (s.ok()) s = net::ResolveIPv4(host, &ip);
  std::vector<fi_info*> chosen;
  if (s.ok()) s = fabric::SelectDomains(infos, device, ip, &chosen);
  if (!s.ok()) {
    std::fprintf(stderr, "kvfabric-fabric-bench: %s\n", s.ToString().c_str());
    return 1;
  }
  Endpoint ep;
  ep.Open(chosen.front());
  void* buf = nullptr;
  if (posix_memalign(&buf, 1 << 21, buffer) != 0) return 1;
  std::memset(buf, 1, buffer);
  ep.Register(buf, buffer);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);

  if (mode == "target") {
    nlohmann::json info = {{"address", hex::Encode(ep.name)}, {"addr", reinterpret_cast<uintptr_t>(buf)},
                           {"length", buffer}, {"key", fi_mr_key(ep.mr)}, {"virt_addr", ep.virt_addr}};
    const std::string reply = info.dump();
    metadata::HandshakeServer::Options so;
    so.host = ip;
    so.port = port;
    std::unique_ptr<metadata::HandshakeServer> server;
    s = metadata::HandshakeServer::Start(so, [&](uint16_t, const std::string&, std::string* r) {
      *r = reply;
      return Status::OK();
    }, &server);
    if (!s.ok()) {
      std::fprintf(stderr, "kvfabric-fabric-bench: %s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("kvfabric-fabric-bench target ready (%s %s): run the initiator with --segment_id=%s:%u\n",
                ep.provider.c_str(), chosen.front()->domain_attr->name, host.c_str(), server->port());
    std::fflush(stdout);
    // A passive target must drive progress for manual-progress providers.
    fi_cq_entry e[16];
    while (!g_stop.load()) {
      if (ep.waitable) fi_cq_sread(ep.cq, e, 16, nullptr, 100);
      else if (fi_cq_read(ep.cq, e, 16) == -FI_EAGAIN) sched_yield();
    }
    return 0;
  }

  std::string text;
  s = metadata::HandshakeCall(target, metadata::kGetSegment, "", {}, &text);
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
  if (rlen < block * depth) {
    std::fprintf(stderr, "kvfabric-fabric-bench: target buffer %llu < block x depth\n", (unsigned long long)rlen);
    return 1;
  }
  fi_addr_t dest;
  if (fi_av_insert(ep.av, peer.data(), 1, &dest, 0, nullptr) != 1) Die("fi_av_insert", -FI_EINVAL);
  void* desc = fi_mr_desc(ep.mr);
  const bool write = operation == "write";
  const uint64_t flags = FI_COMPLETION | (transmit_complete ? 0 : FI_DELIVERY_COMPLETE);
  std::vector<fi_context2> ctx(depth);
  auto post = [&](size_t slot) {
    const size_t off = slot * block;
    char* local_p = static_cast<char*>(buf) + off;
    const uint64_t r = rvirt ? raddr + off : off;
    for (;;) {
      ssize_t rc;
      if (write) {
        iovec iov{local_p, block};
        fi_rma_iov rma{r, block, rkey};
        fi_msg_rma msg{};
        msg.msg_iov = &iov;
        msg.desc = &desc;
        msg.iov_count = 1;
        msg.addr = dest;
        msg.rma_iov = &rma;
        msg.rma_iov_count = 1;
        msg.context = &ctx[slot];
        rc = fi_writemsg(ep.ep, &msg, flags);
      } else {
        rc = fi_read(ep.ep, local_p, block, desc, dest, r, rkey, &ctx[slot]);
      }
      if (rc == 0) return;
      if (rc != -FI_EAGAIN) Die("post", static_cast<int>(rc));
      fi_cq_read(ep.cq, nullptr, 0);  // drive progress (connection setup)
    }
  };
  uint64_t bytes = 0;
  for (size_t i = 0; i < depth; ++i) post(i);
  const auto t0 = Clock::now();
  const auto until = t0 + std::chrono::duration<double>(duration);
  fi_cq_entry comp[64];
  size_t inflight = depth;
  while (inflight > 0) {
    ssize_t n = fi_cq_read(ep.cq, comp, 64);
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(ep.cq, &err, 0);
      Die("completion", -err.err);
    }
    if (n <= 0) continue;
    for (ssize_t i = 0; i < n; ++i) {
      bytes += block;
      --inflight;
      if (Clock::now() < until && !g_stop.load()) {
        post(static_cast<fi_context2*>(comp[i].op_context) - ctx.data());
        ++inflight;
      }
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  double rate = 0;
  bench::ToUnit(bytes / secs, unit, &rate);
  if (json)
    std::printf("%s\n", nlohmann::json({{"tool", "kvfabric-fabric-bench"}, {"operation", operation},
                                         {"protocol", ep.provider}, {"block_size", block}, {"queue_depth", depth},
                                         {"duration_s", secs}, {"bytes", bytes}, {"bytes_per_s", bytes / secs},
                                         {"rate", rate}, {"unit", unit + "/s"}})
                            .dump()
                            .c_str());
  std::printf("kvfabric-fabric-bench %s: %s, block %zu, queue depth %zu, %.1f s: %.2f %s/s\n", operation.c_str(),
              ep.provider.c_str(), block, depth, secs, rate, unit.c_str());
  return 0;
}
