// kvfabric::Store: the parts of a store node, built and torn down in order.
#include "kvfabric/store.h"

#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>

#include "common/clock.h"
#include "common/log.h"
#include "metrics/endpoint.h"
#include "metrics/families.h"
#include "metrics/histogram.h"
#include "store/wire/control_client.h"
#include "store/handoff.h"
#include "store/members/member_view.h"
#include "store/members/membership.h"
#include "store/node/node_service.h"
#include "store/client/store_client.h"

namespace kvfabric {

struct Store::Impl {
  Engine* engine = nullptr;
  Settings settings;
  std::string name;  // the node's control address, or "" for a client
  std::unique_ptr<store::NodeService> node;        // null for a client
  std::unique_ptr<store::ControlClient> control;
  std::unique_ptr<store::Membership> membership;
  std::unique_ptr<store::MemberView> members;
  std::unique_ptr<store::StoreClient> client;
  std::unique_ptr<store::Handoff> handoff;  // null for a client
  std::shared_mutex gate;  // calls hold it shared; Close exclusive
  bool closed = false;
  // The calls' latency, and the endpoint that serves the store's figures
  // (KVF_METRICS_LISTEN); the membership leaves before Close takes the gate,
  // since a scrape under way waits for the gate.
  metrics::Histogram put_latency, get_latency, exists_latency;
  std::mutex metrics_mu;
  std::unique_ptr<metrics::Endpoint::Membership> metrics;
  const pid_t owner = ::getpid();

  // A forked child's copy: the threads, connections, membership record and
  // pool are the parent's. The child must use none of them (its requests
  // would go down the parent's connections) and tear none of them down (a
  // Leave would drop the parent from the store).
  bool forked() const { return ::getpid() != owner; }
  Status ForkedRefusal() const {
    return Status::Closed("this store belongs to process " + std::to_string(owner) + " and this process (" +
                          std::to_string(::getpid()) +
                          ") is a fork of it; create a new Engine and Store in the child");
  }

  ~Impl() {
    LeaveMetrics();
    Shutdown();
  }
  void LeaveMetrics() {
    std::unique_ptr<metrics::Endpoint::Membership> m;
    {
      std::lock_guard<std::mutex> g(metrics_mu);
      m.swap(metrics);
    }
  }
  // Idempotent; also of a half-built store.
  void Shutdown() {
    if (handoff) handoff->Stop();
    if (client) client->GiveBackCredits();
    if (membership) (void)membership->Leave();
    if (members) members->Stop();
    if (node) node->Stop();
    handoff.reset();
    client.reset();
    members.reset();
    control.reset();
    membership.reset();
    node.reset();
  }

  // Runs `call` unless the store is closed, with Close kept out until it returns.
  template <typename F>
  Status Guarded(F&& call) {
    if (forked()) return ForkedRefusal();
    std::shared_lock<std::shared_mutex> g(gate);
    if (closed) return Status::Closed("the store is closed");
    return call();
  }
  // Guarded, timed into `latency`.
  template <typename F>
  Status Timed(metrics::Histogram& latency, F&& call) {
    const int64_t t0 = SteadyNowNs();
    Status s = Guarded(std::forward<F>(call));
    if (s.code() != Status::Code::kClosed) latency.Add(SteadyNowNs() - t0);
    return s;
  }
};

Status Store::Create(Engine* engine, const Settings& settings, std::unique_ptr<Store>* out) {
  if (engine == nullptr) return Status::InvalidArgument("store: no engine");
  if (settings.store_read_window_ms <= settings.store_deadline_ms)
    return Status::InvalidArgument("store: KVF_STORE_READ_WINDOW_MS (" + std::to_string(settings.store_read_window_ms) +
                                   ") must exceed KVF_STORE_DEADLINE_MS (" + std::to_string(settings.store_deadline_ms) +
                                   "): a slot must outlast every READ of it");
  if (settings.store_handoff_ms <= settings.store_membership_refresh_ms)
    return Status::InvalidArgument("store: KVF_STORE_HANDOFF_MS (" + std::to_string(settings.store_handoff_ms) +
                                   ") must exceed KVF_STORE_MEMBERSHIP_REFRESH_MS (" +
                                   std::to_string(settings.store_membership_refresh_ms) +
                                   "): every process must see a new member before its pages are looked for only there");
  auto impl = std::make_unique<Impl>();
  Impl& s = *impl;
  s.engine = engine;
  s.settings = settings;
  if (settings.store_pool_bytes > 0) {
    KVF_RETURN_IF_ERROR(store::NodeService::Start(engine, settings, &s.node));
    s.name = s.node->address();
  }
  s.control = std::make_unique<store::ControlClient>(settings);
  KVF_RETURN_IF_ERROR(store::OpenMembership(engine->metadata(), settings, &s.membership));
  if (s.node) {
    const store::NodeInfo& info = s.node->info();
    KVF_RETURN_IF_ERROR(s.membership->Join({s.name, info.segment, info.pool_bytes}).Annotate("store: joining " + s.membership->Describe()));
  }
  s.members = std::make_unique<store::MemberView>(engine, s.control.get(), s.membership.get(), settings);
  s.members->Start();
  std::optional<store::LocalNode> local;
  if (s.node) {
    store::NodeService* node = s.node.get();
    local = store::LocalNode{s.name, [node](std::string request, store::ControlClient::Done done) {
                               node->Handle(store::NodeService::kLocal, std::move(request), std::move(done));
                             }};
  }
  s.client =
      std::make_unique<store::StoreClient>(engine, settings, s.control.get(), s.members.get(), std::move(local));
  if (s.node) {
    // Pages put here for a member that entered the store meanwhile go to it.
    s.handoff = std::make_unique<store::Handoff>(engine, s.node.get(), s.client.get(), s.members.get(), settings);
    s.handoff->Start();
  }
  out->reset(new Store(std::move(impl)));
  Store* store = out->get();
  const std::string engine_name = engine->name();
  std::unique_ptr<metrics::Endpoint::Membership> m;
  if (Status joined = metrics::Endpoint::JoinIfSet(
          settings.metrics_listen, "store",
          [store, engine_name] {
            return metrics::StoreFamilies(engine_name, store->name(), store->Stats(), store->Latency());
          },
          &m);
      !joined.ok()) {
    out->reset();
    return joined;
  }
  {
    std::lock_guard<std::mutex> g(s.metrics_mu);
    s.metrics = std::move(m);
  }
  KVF_LOG_INFO("store {} ({}): {} member(s) in placement", s.name.empty() ? "client" : "node " + s.name,
               s.membership->Describe(), s.members->Current()->nodes.size());
  return Status::OK();
}

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() {
  // A forked child's copy is leaked on purpose, its parts untouched.
  if (impl_ && impl_->forked()) (void)impl_.release();
  else Close();
}

void Store::Close() {
  if (impl_->forked()) return;
  impl_->LeaveMetrics();
  std::unique_lock<std::shared_mutex> g(impl_->gate);
  if (impl_->closed) return;
  impl_->closed = true;
  impl_->Shutdown();
}

namespace {
// The shape every batch call checks first.
Status CheckShape(size_t keys, size_t buffers) {
  if (keys == buffers) return Status::OK();
  return Status::InvalidArgument("store: " + std::to_string(keys) + " keys but " + std::to_string(buffers) +
                                 " buffer lists (one per key)");
}
}  // namespace

Status Store::BatchPut(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                       std::vector<Status>* results, const StorePutOptions& options) {
  return impl_->Timed(impl_->put_latency, [&] {
    KVF_RETURN_IF_ERROR(CheckShape(keys.size(), buffers.size()));
    const int64_t most = impl_->settings.store_max_copies;
    if (options.copies == 0 || options.copies > most)
      return Status::InvalidArgument("store: " + std::to_string(options.copies) + " copies asked; a PUT stores 1 to " +
                                     std::to_string(most) + " (KVF_STORE_MAX_COPIES, the same on every process)");
    impl_->client->Put(keys, buffers, results, options.copies);
    return Status::OK();
  });
}

Status Store::BatchGet(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                       std::vector<Status>* results, std::vector<uint64_t>* lengths) {
  return impl_->Timed(impl_->get_latency, [&] {
    KVF_RETURN_IF_ERROR(CheckShape(keys.size(), buffers.size()));
    impl_->client->Get(keys, buffers, results, lengths);
    return Status::OK();
  });
}

Status Store::BatchExists(const std::vector<std::string>& keys, std::vector<bool>* found, size_t* leading_hits) {
  return impl_->Timed(impl_->exists_latency, [&] {
    impl_->client->Exists(keys, found);
    size_t n = 0;
    while (n < found->size() && (*found)[n]) ++n;
    if (leading_hits != nullptr) *leading_hits = n;
    return Status::OK();
  });
}

Status Store::BatchLocate(const std::vector<std::string>& keys, std::vector<StorePage>* pages,
                          std::vector<Status>* results) {
  return impl_->Guarded([&] {
    impl_->client->Locate(keys, pages, results);
    return Status::OK();
  });
}

Status Store::BatchRemove(const std::vector<std::string>& keys, std::vector<Status>* results) {
  return impl_->Guarded([&] {
    impl_->client->KeyOp(store::Op::kRemove, keys, results);
    return Status::OK();
  });
}

Status Store::BatchPin(const std::vector<std::string>& keys, std::vector<Status>* results) {
  return impl_->Guarded([&] {
    impl_->client->KeyOp(store::Op::kPin, keys, results);
    return Status::OK();
  });
}

Status Store::BatchUnpin(const std::vector<std::string>& keys, std::vector<Status>* results) {
  return impl_->Guarded([&] {
    impl_->client->KeyOp(store::Op::kUnpin, keys, results);
    return Status::OK();
  });
}

Status Store::RemoveAll(uint64_t* removed) {
  return impl_->Guarded([&] { return impl_->client->RemoveAll(removed); });
}

std::vector<LatencyStats> Store::Latency() const {
  std::vector<LatencyStats> out;
  if (impl_->forked()) return out;
  for (auto [call, h] : {std::pair<const char*, const metrics::Histogram*>{"put", &impl_->put_latency},
                         {"get", &impl_->get_latency},
                         {"exists", &impl_->exists_latency}})
    if (h->count() > 0) out.push_back({call, "batch", h->Read()});
  return out;
}

StoreStats Store::Stats() const {
  StoreStats out;
  if (impl_->forked()) return out;
  std::shared_lock<std::shared_mutex> g(impl_->gate);
  if (impl_->closed) return out;
  impl_->client->AddStats(&out);
  if (impl_->node) {
    const store::NodeStats n = impl_->node->Stats();
    out.pool_bytes = n.pool_bytes;
    out.used_bytes = n.used_bytes;
    out.quarantined_bytes = n.quarantined_bytes;
    out.pages = n.pages;
    out.pinned_pages = n.pinned_pages;
    out.evictions = n.evictions;
    out.removals = n.removals;
    out.overwrites = n.overwrites;
    out.refusals = n.refusals;
    out.pins_released = n.pins_released;
    out.stored_bytes = n.stored_bytes;
    out.located_bytes = n.located_bytes;
    out.touched_bytes = n.touched_bytes;
  }
  out.members = impl_->members->Current()->nodes.size();
  return out;
}

const std::string& Store::name() const { return impl_->name; }

std::vector<std::string> Store::Members() const {
  std::vector<std::string> out;
  if (impl_->forked()) return out;
  std::shared_lock<std::shared_mutex> g(impl_->gate);
  if (impl_->closed) return out;
  for (const auto& n : impl_->members->Current()->nodes) out.push_back(n->name);
  return out;
}

}  // namespace kvfabric
