#include "engine/engine_impl.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/clock.h"
#include "common/environment.h"
#include "common/log.h"
#include "common/text.h"
#include "engine/startup.h"
#include "fabric/fabric_info.h"
#include "memory/cuda.h"
#include "metrics/families.h"

namespace kvfabric {
namespace {

// How long Close lets operations already with the provider return before
// the rails close (a dead or stopped peer never returns them).
constexpr int64_t kCloseDrainMs = 1000;

}  // namespace

Status PrepareLibfabric(const Settings& settings) {
  // GPU memory is possible only with the driver; without it libfabric must
  // not initialize CUDA either.
  Status cuda = settings.cuda ? memory::cuda::Load(settings.cuda_library) : Status::Unavailable("KVF_CUDA=0");
  if (!cuda.ok()) KVF_LOG_DEBUG("host memory only ({}): FI_HMEM=system", cuda.message());
  fabric::ApplyProviderDefaults(settings.rxm_fast_connect, /*host_memory_only=*/!cuda.ok(),
                                fabric::MayCloseConnections(settings.close_connections));
  return cuda;
}

Status Engine::Impl::Build(const EngineConfig& config) {
  KVF_RETURN_IF_ERROR(engine::ResolveSettings(config, &settings));
  metadata = config.metadata;
  engine::ListenAddress listen;
  KVF_RETURN_IF_ERROR(engine::ResolveListenAddress(config.local_server_name, &listen));
  KVF_RETURN_IF_ERROR(engine::CheckAdvertisedHost(listen.host, config.metadata));
  KVF_RETURN_IF_ERROR(engine::OpenMetadata(config.metadata, settings, &store));
  // One engine at a time writes and reads the environment (EnvironmentLock).
  std::unique_lock<std::recursive_mutex> env(EnvironmentLock());
  const Status cuda = PrepareLibfabric(settings);
  std::string provider;
  KVF_RETURN_IF_ERROR(rails.Open(config.protocol, config.nic_filter, listen.bind_ip, settings, cuda.ok(), &provider));
  env.unlock();
  for (const auto& r : rails.rails) r->set_remote_data_sink([this](uint64_t data) { notices.Arrived(data); });
  KVF_RETURN_IF_ERROR(engine::DiscoverTopology(rails.infos, cuda.ok(), settings, &topo));
  BuildRegistry();
  KVF_RETURN_IF_ERROR(BuildServing(listen));
  KVF_RETURN_IF_ERROR(server->Publish().Annotate("engine " + server->name()));
  name = server->name();
  gate.set_owner("engine " + name);
  KVF_RETURN_IF_ERROR(StartMetrics());
  KVF_LOG_INFO("engine {} ready: {} rail(s) of {}{}, {} progress thread(s){}", server->name(), rails.primary.size(),
               provider, rails.shm >= 0 ? " + shm for same-host peers" : "", progress->thread_count(),
               store ? ", segment published in " + store->uri() : "");
  return Status::OK();
}

void Engine::Impl::BuildRegistry() {
  const topology::Topology* t = &topo;
  registry = std::make_unique<memory::MemoryRegistry>(
      rails.raw(), static_cast<size_t>(settings.mr_chunk_bytes), [t](const std::string& location) {
        std::vector<size_t> near, rest;
        t->RailsFor(location, &near, &rest);
        uint64_t mask = 0;
        for (size_t r : near) mask |= uint64_t{1} << r;
        return mask;
      });
  registry->set_cuda(settings.cuda);
  registry->set_all_rails(settings.register_rails == "all");
  registry->set_parallel(settings.register_parallel);
  registry->set_efa_chunk_bytes(static_cast<size_t>(settings.efa_mr_chunk_bytes));
}

Status Engine::Impl::BuildServing(const engine::ListenAddress& listen) {
  KVF_RETURN_IF_ERROR(engine::SegmentServer::Start(engine::HandshakeOptions(settings, listen), listen.host, &rails,
                                                   registry.get(), store.get(), &notices, &server));
  if (settings.metrics) counters = std::make_unique<engine::Counters>(settings.metrics_peer_labels);
  segments = std::make_unique<engine::SegmentDirectory>(server->name(), &rails, store.get(),
                                                        engine::HandshakeCallOptions(settings), counters.get());
  engine::Poster::Options po;
  po.transfer_timeout_ms = settings.transfer_timeout_ms;
  po.stripe_threshold = static_cast<size_t>(settings.stripe_threshold);
  po.rail_policy = settings.rail_policy == "least_loaded" ? engine::RailPolicy::kLeastLoaded
                   : settings.rail_policy == "round_robin" ? engine::RailPolicy::kRoundRobin
                   : settings.rail_policy == "split"       ? engine::RailPolicy::kSplit
                                                           : engine::RailPolicy::kAuto;
  po.rail_retry_ms = settings.rail_retry_ms;
  po.staging_bytes = static_cast<size_t>(settings.staging_bytes);
  po.notice_path = settings.notice_path == "cq_data"   ? engine::NoticePath::kCqData
                   : settings.notice_path == "message" ? engine::NoticePath::kMessage
                                                       : engine::NoticePath::kAuto;
  mailer = std::make_unique<engine::NoticeMailer>(engine::HandshakeCallOptions(settings));
  poster = std::make_unique<engine::Poster>(&rails, po, counters.get());
  poster->set_own_notices(&notices);
  poster->set_notice_mailer(mailer.get());
  progress = std::make_unique<fabric::Progress>(rails.raw(), static_cast<int>(settings.progress_threads),
                                                settings.progress_spin_us, settings.progress_idle_us);
  return Status::OK();
}

void Engine::Impl::Drain() {
  batches.CancelWaits();  // WaitBatch and Transfer return Closed now
  notices.Close();        // and WaitNotices
  gate.WaitForCallers();
  // Requests still queued are dropped; those with the provider get a moment
  // to return: a shm peer left holding operations of an endpoint that
  // closed can crash in libfabric's progress.
  batches.AbandonAll(Status::Closed(text::Format("engine {} was closed before the request ended", name)));
  // And a shm peer that has not yet read an endpoint's name must read it
  // before the endpoint closes (Rail::ProbeUnreadNames).
  for (const auto& r : rails.rails) r->ProbeUnreadNames();
  const auto drain_until = engine::Clock::now() + std::chrono::milliseconds(kCloseDrainMs);
  auto busy = [this] {
    for (const auto& r : rails.rails)
      if (r->Busy()) return true;
    return false;
  };
  while (busy() && engine::Clock::now() < drain_until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  Shutdown();
}

void Engine::Impl::Shutdown() {
  metrics.reset();   // scrapes read the parts below: the last one ends first
  server.reset();    // peers stop finding us, no new requests
  progress.reset();  // no more completions
  mailer.reset();    // nor notices: the tasks it holds end before their batches go
  batches.Clear();
  registry.reset();  // MRs close while their domains are open
  poster.reset();    // and the staging pool's
  segments.reset();
  rails.rails.clear();
  store.reset();
}

void Engine::Impl::FillStats(EngineStats* out) const {
  out->engine = name;
  out->counting = counters != nullptr;
  const int64_t now = SteadyNowNs();
  for (const auto& r : rails.rails) {
    const fabric::RailCounters& c = r->counters();
    RailStats s;
    s.index = r->index();
    s.label = r->label();
    s.provider = r->info().provider;
    s.domain = r->info().domain;
    s.write_bytes = c.write_bytes.load(std::memory_order_relaxed);
    s.read_bytes = c.read_bytes.load(std::memory_order_relaxed);
    s.writes = c.writes.load(std::memory_order_relaxed);
    s.reads = c.reads.load(std::memory_order_relaxed);
    s.errors = c.errors.load(std::memory_order_relaxed);
    s.stalls = c.stalls.load(std::memory_order_relaxed);
    s.recoveries = c.recoveries.load(std::memory_order_relaxed);
    s.in_service = r->InService(now);
    s.queued = r->queued();
    s.in_flight = r->in_flight();
    s.credits = r->info().tx_depth;
    s.peer_slots = r->peer_slots();
    out->rails.push_back(std::move(s));
  }
  if (counters) counters->Fill(out);
  for (const auto& b : registry->Snapshot()) {
    auto it = std::find_if(out->registrations.begin(), out->registrations.end(),
                           [&](const RegistrationStats& r) { return r.location == b->location; });
    if (it == out->registrations.end()) it = out->registrations.insert(it, RegistrationStats{b->location, 0, 0});
    it->buffers += 1;
    it->bytes += b->length;
  }
  out->handshakes_refused = server->refused();
  out->segments_open = segments->size();
  out->notice_messages_sent = mailer->sent();
  out->notice_messages_failed = mailer->failed();
}

Status Engine::Impl::StartMetrics() {
  return metrics::Endpoint::JoinIfSet(
      settings.metrics_listen, "engine " + name,
      [this] {
        EngineStats st;
        FillStats(&st);
        return metrics::EngineFamilies(st);
      },
      &metrics);
}

std::shared_ptr<engine::Batch> Engine::Impl::FindBatch(BatchId id, Status* error) {
  auto b = batches.Find(id);
  if (!b) *error = Status::NotFound(text::Format("unknown batch {}", id));
  return b;
}

}  // namespace kvfabric
