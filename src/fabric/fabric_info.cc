#include "fabric/fabric_info.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "common/environment.h"
#include "common/log.h"
#include "fabric/signal_handlers.h"

namespace kvfabric::fabric {

uint32_t ApiVersion() {
  uint32_t lib = fi_version();
  uint32_t hdr = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
  return lib < hdr ? lib : hdr;
}

namespace {

FakeAnswers& Fake() {
  static FakeAnswers f;
  return f;
}

}  // namespace

void SetFakeAnswersForTesting(const FakeAnswers& answers) { Fake() = answers; }

bool HmemGranted(const fi_info* info, bool asked) {
  return (info->caps & FI_HMEM) != 0 || (asked && Fake().hmem);
}

bool DmabufOffered() {
  const uint32_t v = Fake().api_version != 0 ? Fake().api_version : ApiVersion();
  return v >= FI_VERSION(1, 20);
}

void ApplyProviderDefaults(bool rxm_fast_connect, bool host_memory_only, bool av_remove_cleanup) {
  std::lock_guard<std::recursive_mutex> env(EnvironmentLock());
  // rxm closes its connection to an address removed from the AV, so that
  // Rail::CutPeer can end a peer's operations (MayCloseConnections).
  if (av_remove_cleanup) setenv("FI_AV_REMOVE_CLEANUP", "1", 0);
  // Otherwise a provider may create a CUDA context (and take GPU memory) in
  // a process that never touches the GPU.
  if (host_memory_only) setenv("FI_HMEM", "system", 0);
  // A process that may register GPU memory on efa keeps same-host peers off
  // EFA's shm path, which copied host bytes into CUDA destinations and
  // crashed (libfabric issue 12328); they go through the NIC, which is
  // GPU-aware. kvfabric's own shm rail carries same-host host memory.
  else setenv("FI_EFA_ENABLE_SHM_TRANSFER", "0", 0);
  if (!rxm_fast_connect) return;
  // rxm runs its connection state machine only every 10 ms of CQ polling by
  // default, and fills a pool of 16 KiB bounce buffers per connection: the
  // first write to a tcp peer took 10-20 ms here, 2-3 ms with these (a
  // 4-rail one 8-11 ms with 2 KiB buffers, 5-6 ms with 256 bytes).
  setenv("FI_OFI_RXM_CM_PROGRESS_INTERVAL", "100", 0);
  setenv("FI_OFI_RXM_BUFFER_SIZE", "256", 0);
}

namespace {

bool SocketBased(const std::string& provider) {
  return provider.rfind("tcp", 0) == 0 || provider.rfind("sockets", 0) == 0 ||
         provider.rfind("verbs", 0) == 0;
}

}  // namespace

Status ProviderForProtocol(const std::string& p, std::string* provider) {
  if (p == "tcp") *provider = "tcp;ofi_rxm";
  else if (p == "verbs") *provider = "verbs;ofi_rxm";
  else if (p == "efa" || p == "shm" || p == "sockets") *provider = p;
  else if (p == "rdma") {
    const bool efa = ProviderAvailable("efa");
    if (!efa && !ProviderAvailable("verbs;ofi_rxm"))
      return Status::Unavailable(
          "protocol rdma: this host has no RDMA fabric (neither the efa nor the verbs provider finds a device; "
          "`kvfabric doctor` lists what libfabric sees); use protocol tcp (Mooncake callers: MC_FORCE_TCP=1)");
    *provider = efa ? "efa" : "verbs;ofi_rxm";
    KVF_LOG_INFO("protocol rdma: using {} ({})", *provider,
                 efa ? "this host has EFA devices" : "no EFA device here; InfiniBand/RoCE through verbs");
  } else {
    return Status::InvalidArgument("unknown protocol '" + p +
                                   "': use efa, tcp, shm, verbs, rdma (efa or verbs, whichever the host has), "
                                   "sockets or auto");
  }
  return Status::OK();
}

std::string DomainForDevice(const std::string& device, const std::vector<std::string>& domains,
                            const std::string& provider, const std::string& sysfs_root) {
  auto has = [&](const std::string& d) {
    for (const auto& x : domains)
      if (x == d) return true;
    return false;
  };
  if (has(device)) return device;
  if (provider == "efa" && has(device + "-rdm")) return device + "-rdm";
  if (SocketBased(provider) && provider.rfind("verbs", 0) != 0) {
    std::error_code ec;
    const std::filesystem::path net = std::filesystem::path(sysfs_root) / "class/infiniband" / device / "device/net";
    for (const auto& e : std::filesystem::directory_iterator(net, ec))
      if (has(e.path().filename().string())) return e.path().filename().string();
  }
  return "";
}

InfoList::~InfoList() {
  if (head_ != nullptr) fi_freeinfo(head_);
}

namespace {

fi_info* MakeHints(const std::string& provider, bool hmem) {
  fi_info* h = fi_allocinfo();
  h->ep_attr->type = FI_EP_RDM;
  h->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | (hmem ? FI_HMEM : 0);
  // shm: peers' READs and WRITEs are counted at the target (Rail::
  // TakeRemoteActivity), the only sign a passive target's progress thread
  // has that it is serving someone (shm has no wait object).
  if (provider == "shm") h->caps |= FI_RMA_EVENT;
  // Every operation carries a fi_context2 at the start of its OpContext.
  h->mode = FI_CONTEXT | FI_CONTEXT2;
  // The mr_mode bits we can honour; the provider returns those it requires.
  h->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | (hmem ? FI_MR_HMEM : 0);
  // Posts are serialized per rail by us, but MR registration and CQ reads
  // happen on other threads than posting.
  h->domain_attr->threading = FI_THREAD_SAFE;
  h->fabric_attr->prov_name = strdup(provider.c_str());
  return h;
}

}  // namespace

bool AvRemoveClosesConnections() {
  static const bool on = [] {
    const char* v = getenv("FI_AV_REMOVE_CLEANUP");
    // libfabric's reading of a boolean (fi_param_get_bool): 1, yes, true,
    // on, y, any case.
    std::string s = v != nullptr ? v : "";
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s == "1" || s == "yes" || s == "true" || s == "on" || s == "y";
  }();
  return on;
}

bool MayCloseConnections(const std::string& mode) { return mode == "auto" || mode == "on"; }

bool MayCloseStalledConnections(const std::string& mode, uint32_t version) {
  if (mode == "on") return true;
  if (mode == "auto") return version >= FI_VERSION(1, 18);
  return false;
}

Status InfoList::Query(const std::string& provider, InfoList* out, bool hmem) {
  std::lock_guard<std::recursive_mutex> env(EnvironmentLock());
  RestoreForeignSignalHandlers();
  (void)AvRemoveClosesConnections();  // before libfabric reads its variables
  fi_info* head = nullptr;
  int rc = -FI_ENODATA;
  if (hmem) {
    fi_info* hints = MakeHints(provider, true);
    rc = fi_getinfo(ApiVersion(), nullptr, nullptr, 0, hints, &head);
    fi_freeinfo(hints);
    if (rc == 0 && head == nullptr) rc = -FI_ENODATA;
  }
  if (rc == -FI_ENODATA) {
    fi_info* hints = MakeHints(provider, false);
    rc = fi_getinfo(ApiVersion(), nullptr, nullptr, 0, hints, &head);
    fi_freeinfo(hints);
  }
  if (rc == -FI_ENODATA || (rc == 0 && head == nullptr))
    return Status::Unavailable("libfabric provider '" + provider +
                               "' offers no RDM endpoint with RMA here (check `fi_info -p " +
                               provider + "`)");
  if (rc != 0)
    return Status::FabricError("fi_getinfo(" + provider + "): " + fi_strerror(-rc));
  InfoList list;
  list.head_ = head;
  std::set<std::pair<std::string, std::string>> seen;
  const bool sockets = SocketBased(provider);
  for (fi_info* i = head; i != nullptr; i = i->next) {
    if (sockets && i->addr_format != FI_SOCKADDR_IN) continue;
    // tcp;ofi_rxm returns the wrong provider names for "verbs" requests and
    // vice versa when layering; keep exactly what was asked.
    if (provider != i->fabric_attr->prov_name) continue;
    if (!seen.insert({i->domain_attr->name, i->fabric_attr->name}).second) continue;
    list.entries_.push_back(i);
  }
  if (list.entries_.empty())
    return Status::Unavailable("libfabric provider '" + provider + "' has no usable domain here");
  *out = std::move(list);
  return Status::OK();
}

bool ProviderAvailable(const std::string& provider) {
  InfoList l;
  return InfoList::Query(provider, &l).ok();
}

RailInfo RailInfoOf(const fi_info* info) {
  RailInfo r;
  r.provider = info->fabric_attr->prov_name;
  r.domain = info->domain_attr->name;
  r.fabric = info->fabric_attr->name;
  r.virt_addr = (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
  return r;
}

std::string SourceIp(const fi_info* info) {
  if (info->addr_format != FI_SOCKADDR_IN || info->src_addr == nullptr) return "";
  const auto* sin = static_cast<const sockaddr_in*>(info->src_addr);
  char buf[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf));
  return buf;
}

Status SelectDomains(const InfoList& infos, const std::string& nic_filter,
                     const std::string& bind_ip, std::vector<fi_info*>* out) {
  out->clear();
  const auto& all = infos.entries();
  if (!nic_filter.empty()) {
    const std::string provider = all.front()->fabric_attr->prov_name;
    std::vector<std::string> domains;
    for (fi_info* i : all) domains.push_back(i->domain_attr->name);
    std::stringstream ss(nic_filter);
    std::string name;
    while (std::getline(ss, name, ',')) {
      name.erase(0, name.find_first_not_of(" \t"));
      name.erase(name.find_last_not_of(" \t") + 1);
      if (name.empty()) continue;
      const std::string domain = DomainForDevice(name, domains, provider);
      if (domain.empty()) {
        std::string have;
        for (const auto& d : domains) have += (have.empty() ? "" : ", ") + d;
        return Status::NotFound("device '" + name + "' is not a NIC of provider " + provider + " (it has: " + have +
                                "); name one of those, its ibverbs device, or none to use them all");
      }
      fi_info* found = nullptr;
      for (fi_info* i : all)
        if (domain == i->domain_attr->name) { found = i; break; }
      if (std::find(out->begin(), out->end(), found) == out->end()) out->push_back(found);
    }
    if (out->empty()) return Status::InvalidArgument("NIC filter '" + nic_filter + "' names no domain");
    return Status::OK();
  }
  if (!SocketBased(all.front()->fabric_attr->prov_name) ||
      std::string(all.front()->fabric_attr->prov_name).rfind("verbs", 0) == 0) {
    *out = all;
    return Status::OK();
  }
  for (fi_info* i : all)
    if (!bind_ip.empty() && SourceIp(i) == bind_ip) { out->push_back(i); return Status::OK(); }
  const bool loopback = bind_ip.rfind("127.", 0) == 0;
  for (fi_info* i : all)
    if ((std::string(i->domain_attr->name) == "lo") == loopback) { out->push_back(i); return Status::OK(); }
  out->push_back(all.front());
  return Status::OK();
}

}  // namespace kvfabric::fabric
