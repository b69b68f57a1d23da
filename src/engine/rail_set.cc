#include "engine/rail_set.h"

#include <cstdlib>

#include "common/log.h"
#include "common/text.h"
#include "engine/peer.h"
#include "engine/rail_options.h"
#include "fabric/fabric_info.h"
#include "kvfabric/diagnostics.h"

namespace kvfabric::engine {
namespace {

// Rail throughput older than this is not used to divide work by speed.
constexpr int64_t kFreshSpeedNs = 500000000;

}  // namespace

Status RailSet::OpenProvider(const std::string& provider, const std::string& nic_filter, const std::string& bind_ip,
                             fabric::RailOptions options, bool hmem, std::vector<size_t>* opened) {
  // shm stays host memory only: its same-host path is where libfabric
  // copies host bytes into CUDA destinations (libfabric issue 12328).
  options.hmem = hmem && provider != "shm";
  fabric::InfoList list;
  KVF_RETURN_IF_ERROR(fabric::InfoList::Query(provider, &list, options.hmem));
  std::vector<fi_info*> chosen;
  KVF_RETURN_IF_ERROR(fabric::SelectDomains(list, nic_filter, bind_ip, &chosen));
  if (rails.size() + chosen.size() > kMaxLocalRails)
    return Status::InvalidArgument(text::Format("{} rails; at most {} are supported: narrow them with the NIC filter",
                                                rails.size() + chosen.size(), kMaxLocalRails));
  for (fi_info* info : chosen) {
    std::unique_ptr<fabric::Rail> rail;
    KVF_RETURN_IF_ERROR(fabric::Rail::Open(info, options, rails.size(), &rail));
    opened->push_back(rails.size());
    infos.push_back(rail->info());
    rails.push_back(std::move(rail));
  }
  return Status::OK();
}

Status RailSet::Open(const std::string& protocol, const std::string& nic_filter, const std::string& bind_ip,
                     const Settings& settings, bool gpu, std::string* provider) {
  const bool auto_protocol = protocol == "auto";
  KVF_RETURN_IF_ERROR(ResolveProvider(protocol, provider));
  fabric::RailOptions options;
  KVF_RETURN_IF_ERROR(RailOptionsFromSettings(settings, &options));
  KVF_RETURN_IF_ERROR(
      OpenProvider(*provider, nic_filter, bind_ip, options, gpu, &primary).Annotate("protocol " + protocol));
  if (auto_protocol && settings.same_host_shm && *provider != "shm") {
    std::vector<size_t> opened;
    Status s = OpenProvider("shm", "", bind_ip, options, gpu, &opened);
    if (s.ok() && !opened.empty())
      shm = static_cast<int>(opened.front());
    else
      KVF_LOG_INFO("same-host shm rail not available ({}); same-host peers use {}", s.ToString(), *provider);
  }
  if (gpu) {
    std::string staged;
    for (const auto& r : rails) {
      if (r->hmem()) {
        KVF_LOG_INFO("{}: GPU memory is registered in place (FI_HMEM, {})", r->label(),
                     r->dmabuf() ? "by dma-buf where the driver exports one" : "by device address");
        continue;
      }
      staged += text::Format("{}{} ({})", staged.empty() ? "" : ", ", r->label(),
                             r->info().provider == "shm" ? "kept to host memory" : "the provider grants no FI_HMEM");
    }
    if (*provider == "efa") {
      const char* v = getenv("FI_EFA_ENABLE_SHM_TRANSFER");
      const bool off = v != nullptr && (std::string(v) == "0" || std::string(v) == "false" || std::string(v) == "no");
      if (off)
        KVF_LOG_INFO("FI_EFA_ENABLE_SHM_TRANSFER={}: same-host GPU transfers over efa go through the NIC, not EFA's "
                     "shm path (libfabric issue 12328)", v);
      else
        KVF_LOG_WARN("FI_EFA_ENABLE_SHM_TRANSFER={} in a process with GPU memory: EFA's same-host shm path copies host "
                     "bytes into CUDA destinations and crashes (libfabric issue 12328); unset it (kvfabric then sets "
                     "0) unless no two processes of this host move GPU memory between them over efa",
                     v == nullptr ? "(set by another library first)" : v);
    }
    if (!staged.empty())
      KVF_LOG_INFO("GPU memory moves through pinned host staging on {}, libfabric {}.{} (docs/design/engine.md, GPU memory)",
                   staged, FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
  }
  return Status::OK();
}

std::vector<fabric::Rail*> RailSet::raw() const {
  std::vector<fabric::Rail*> out;
  for (const auto& r : rails) out.push_back(r.get());
  return out;
}

void RailSet::View(const Peer& peer, std::span<const size_t> usable, uint64_t near, int64_t now_ns,
                   RailView* views) const {
  for (size_t r : usable) {
    const fabric::Rail& rail = *rails[r];
    views[r] = {rail.InService(now_ns), peer.RailUp(r, now_ns), (near >> r & 1) != 0,
                rail.Throughput(now_ns, kFreshSpeedNs), rail.load_bytes()};
  }
}

}  // namespace kvfabric::engine
