#include "kvfabric/diagnostics.h"

#include <rdma/fabric.h>

#include "common/log.h"
#include "common/text.h"
#include "engine/rail_options.h"
#include "fabric/fabric_info.h"
#include "fabric/rail.h"
#include "kvfabric/engine.h"
#include "memory/cuda.h"
#include "topology/topology.h"

namespace kvfabric {
namespace {

Status SelectedDomains(const Settings& settings, const std::string& protocol, const std::string& devices,
                       fabric::InfoList* infos, std::vector<fi_info*>* chosen) {
  // GPU memory unusable is not an error here; usable, the rails ask for
  // FI_HMEM as an engine's would.
  const bool gpu = PrepareLibfabric(settings).ok();
  std::string provider;
  KVF_RETURN_IF_ERROR(ResolveProvider(protocol, &provider));
  KVF_RETURN_IF_ERROR(fabric::InfoList::Query(provider, infos, gpu && provider != "shm"));
  *chosen = infos->entries();
  if (!devices.empty()) KVF_RETURN_IF_ERROR(fabric::SelectDomains(*infos, devices, "", chosen));
  return Status::OK();
}

std::string Version(uint32_t v) { return text::Format("{}.{}", FI_MAJOR(v), FI_MINOR(v)); }

}  // namespace

Status ResolveProvider(const std::string& protocol, std::string* provider) {
  if (protocol == "auto") {
    *provider = fabric::ProviderAvailable("efa") ? "efa" : "tcp;ofi_rxm";
    return Status::OK();
  }
  return fabric::ProviderForProtocol(protocol, provider);
}

Status ListFabricDomains(const Settings& settings, const std::string& protocol, const std::string& devices,
                         std::vector<FabricDomain>* out) {
  out->clear();
  fabric::InfoList infos;
  std::vector<fi_info*> chosen;
  Status s = SelectedDomains(settings, protocol, devices, &infos, &chosen);
  if (s.code() == Status::Code::kUnavailable || s.code() == Status::Code::kFabricError) return Status::OK();
  KVF_RETURN_IF_ERROR(s);
  fabric::RailOptions options;
  if (Status o = engine::RailOptionsFromSettings(settings, &options); !o.ok()) return o;
  for (const fi_info* i : chosen) {
    FabricDomain d{i->fabric_attr->prov_name, i->domain_attr->name, i->fabric_attr->name, fabric::SourceIp(i),
                   (i->caps & FI_HMEM) != 0, ""};
    if (d.provider == "efa") {
      // What the provider does for READ and WRITE is known only from an
      // enabled endpoint: open one, as an engine's rail.
      std::unique_ptr<fabric::Rail> rail;
      Status r = fabric::Rail::Open(i, options, 0, &rail);
      d.rma = r.ok() ? fabric::DescribeRma(rail->efa_report()) : "endpoint did not open: " + r.message();
    }
    out->push_back(std::move(d));
  }
  return Status::OK();
}

LibfabricVersions GetLibfabricVersions() {
  return {Version(fi_version()), Version(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)),
          Version(fabric::ApiVersion())};
}

Status DescribeTopology(const Settings& settings, const std::string& protocol, const std::string& devices,
                        TopologyFormat format, std::string* json, const std::string& sysfs_root) {
  fabric::InfoList infos;
  std::vector<fi_info*> chosen;
  KVF_RETURN_IF_ERROR(SelectedDomains(settings, protocol, devices, &infos, &chosen));
  std::vector<fabric::RailInfo> rails;
  for (const fi_info* i : chosen) rails.push_back(fabric::RailInfoOf(i));
  topology::Topology t = topology::Topology::Discover(rails, sysfs_root);
  if (settings.cuda && memory::cuda::Load(settings.cuda_library).ok()) t.SetCudaOrdinals(memory::cuda::PciBusIds());
  if (!settings.topology_file.empty()) KVF_RETURN_IF_ERROR(t.ApplyFile(settings.topology_file).Annotate("KVF_TOPOLOGY_FILE"));
  *json = format == TopologyFormat::kFull ? t.ToJson() : t.ToLocationMatrixJson();
  return Status::OK();
}

int CudaDeviceOf(const void* addr) {
  int device = -1;
  return memory::cuda::IsDevicePointer(addr, &device) ? device : -1;
}

Status CudaStreamSynchronize(uintptr_t stream, int device) { return memory::cuda::StreamSynchronize(stream, device); }

void WriteLog(const std::string& level, const std::string& message) {
  if (level == "error")
    KVF_LOG_ERROR("{}", message);
  else if (level == "warn" || level == "warning")
    KVF_LOG_WARN("{}", message);
  else if (level == "debug")
    KVF_LOG_DEBUG("{}", message);
  else
    KVF_LOG_INFO("{}", message);
}

}  // namespace kvfabric
