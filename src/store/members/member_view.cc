#include "store/members/member_view.h"

#include <algorithm>
#include <condition_variable>
#include <set>
#include <utility>

#include "common/log.h"
#include "common/text.h"

namespace kvfabric::store {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

std::vector<bool> MemberSnapshot::Recent(TimePoint now, std::chrono::milliseconds window) const {
  std::vector<bool> out(since.size());
  for (size_t i = 0; i < since.size(); ++i) out[i] = now - since[i] < window;
  return out;
}

bool MemberSnapshot::AnyRecent(TimePoint now, std::chrono::milliseconds window) const {
  return std::any_of(since.begin(), since.end(), [&](TimePoint t) { return now - t < window; });
}

size_t MemberSnapshot::PreviousHome(std::string_view key, size_t home) const {
  std::vector<bool> later(since.size());
  for (size_t i = 0; i < since.size(); ++i) later[i] = since[i] >= since[home];
  return placement.HomeWithout(key, later);
}

MemberView::MemberView(Engine* engine, ControlClient* client, Membership* membership, const Settings& settings)
    : engine_(engine),
      client_(client),
      membership_(membership),
      settings_(settings),
      current_(std::make_shared<MemberSnapshot>()) {}

MemberView::~MemberView() { Stop(); }

void MemberView::Start() {
  Refresh();
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> g(mu_);
    while (!cv_.wait_for(g, std::chrono::milliseconds(settings_.store_membership_refresh_ms), [&] { return stopping_; })) {
      g.unlock();
      Refresh();
      g.lock();
    }
  });
}

void MemberView::Stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<const MemberSnapshot> MemberView::Current() const {
  std::lock_guard<std::mutex> g(mu_);
  return current_;
}

void MemberView::MarkDown(const std::string& name, const Status& why) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = known_.find(name);
  if (it == known_.end() || it->second.view == nullptr) return;  // already down, or gone
  it->second.view = nullptr;
  it->second.why = "failed a call: " + why.ToString();
  it->second.down_until = Clock::now() + std::chrono::milliseconds(settings_.store_down_retry_ms);
  KVF_LOG_WARN("store member {} failed a call ({}): its keys count as misses, and new pages go to other members, "
               "until it answers again (retried in {} ms)",
               name, why.ToString(), settings_.store_down_retry_ms);
  Publish();
}

void MemberView::Refresh() {
  std::vector<MemberRecord> listed;
  if (Status s = membership_->List(&listed); !s.ok()) {
    KVF_LOG_WARN("store: reading the members from {} failed ({}); keeping the last list", membership_->Describe(),
                 s.ToString());
    return;
  }
  std::vector<std::string> to_greet;
  {
    std::lock_guard<std::mutex> g(mu_);
    std::set<std::string> names;
    for (const MemberRecord& r : listed) names.insert(r.name);
    std::erase_if(known_, [&](const auto& k) {
      if (names.contains(k.first)) return false;
      if (k.second.view != nullptr)
        KVF_LOG_INFO("store member {} left: its record is gone from {}; its keys home on the other members now",
                     k.first, membership_->Describe());
      return true;
    });
    std::erase_if(greet_locks_, [&](const auto& k) { return !names.contains(k.first); });
    const auto now = Clock::now();
    for (const std::string& name : names) {
      Known& k = known_[name];
      if (k.view == nullptr && now >= k.down_until) to_greet.push_back(name);
    }
  }
  // Every hello at once, under one deadline: members that never answer
  // cost that deadline once, not each in turn.
  const net::Deadline deadline = net::DeadlineIn(settings_.store_deadline_ms);
  const std::vector<std::pair<Status, std::string>> hellos = HelloAll(to_greet, deadline);
  for (size_t i = 0; i < to_greet.size(); ++i) {
    const std::string& name = to_greet[i];
    const auto lock = GreetLock(name);
    std::lock_guard<std::mutex> greeting(*lock);
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = known_.find(name);
      if (it == known_.end() || it->second.view != nullptr) continue;  // gone, or renewed meanwhile
    }
    std::shared_ptr<const NodeView> view;
    Status s = hellos[i].first;
    if (s.ok()) s = Adopt(name, hellos[i].second, &view);
    std::lock_guard<std::mutex> g(mu_);
    auto it = known_.find(name);
    if (it == known_.end()) continue;
    Known& k = it->second;
    if (s.ok()) {
      k.view = std::move(view);
      k.warned = false;
      k.why.clear();
      KVF_LOG_INFO("store member {} joined placement (segment {}, pool {})", name, k.view->info.segment,
                   text::Bytes(k.view->info.pool_bytes));
    } else {
      k.down_until = Clock::now() + std::chrono::milliseconds(settings_.store_down_retry_ms);
      k.why = s.ToString();
      // Once per outage at warning; each retry that fails again at debug.
      if (!std::exchange(k.warned, true))
        KVF_LOG_WARN("store member {} is left out of placement: {} (tried again every {} ms)", name, s.ToString(),
                     settings_.store_down_retry_ms);
      else
        KVF_LOG_DEBUG("store member {} still not reachable: {}", name, s.ToString());
    }
  }
  std::lock_guard<std::mutex> g(mu_);
  Publish();
}

std::vector<std::pair<Status, std::string>> MemberView::HelloAll(const std::vector<std::string>& names,
                                                                 net::Deadline deadline) {
  struct Answers {
    std::mutex mu;
    std::condition_variable cv;
    size_t left = 0;
    std::vector<std::pair<Status, std::string>> got;
  };
  auto answers = std::make_shared<Answers>();
  answers->left = names.size();
  answers->got.resize(names.size());
  std::vector<ControlClient::Request> calls;
  for (size_t i = 0; i < names.size(); ++i)
    calls.push_back({names[i], EncodeBare(Op::kHello), [answers, i](Status s, std::string reply) {
                       std::lock_guard<std::mutex> g(answers->mu);
                       answers->got[i] = {std::move(s), std::move(reply)};
                       if (--answers->left == 0) answers->cv.notify_all();
                     }});
  if (!calls.empty()) client_->CallAll(std::move(calls), deadline);
  std::unique_lock<std::mutex> g(answers->mu);
  answers->cv.wait(g, [&] { return answers->left == 0; });  // the client ends every call by its deadline
  return std::move(answers->got);
}

std::shared_ptr<std::mutex> MemberView::GreetLock(const std::string& name) {
  std::lock_guard<std::mutex> g(mu_);
  auto& lock = greet_locks_[name];
  if (!lock) lock = std::make_shared<std::mutex>();
  return lock;
}

Status MemberView::Greet(const std::string& name, net::Deadline deadline, std::shared_ptr<const NodeView>* out) {
  std::string reply;
  KVF_RETURN_IF_ERROR(client_->CallSync(name, EncodeBare(Op::kHello), deadline, &reply));
  return Adopt(name, reply, out);
}

Status MemberView::Adopt(const std::string& name, const std::string& reply, std::shared_ptr<const NodeView>* out) {
  auto view = std::make_shared<NodeView>();
  view->name = name;
  KVF_RETURN_IF_ERROR(DecodeNodeInfo(reply, &view->info));
  view->born = Clock::now() - std::chrono::milliseconds(std::min<uint64_t>(view->info.age_ms, 1ull << 40));
  std::shared_ptr<const NodeView> last;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (auto it = known_.find(name); it != known_.end()) last = it->second.last;
  }
  // A node that restarted: its engine's descriptor (memory keys) is new too.
  if (last != nullptr && last->info.epoch != view->info.epoch && last->segment >= 0) (void)engine_->CloseSegment(last->segment);
  KVF_RETURN_IF_ERROR(engine_->OpenSegment(view->info.segment, &view->segment).Annotate("store member " + name));
  {
    std::lock_guard<std::mutex> g(mu_);
    if (auto it = known_.find(name); it != known_.end()) it->second.last = view;
  }
  *out = std::move(view);
  return Status::OK();
}

Status MemberView::Renew(const std::string& name, uint64_t epoch, net::Deadline deadline,
                         std::shared_ptr<const NodeView>* out) {
  const auto lock = GreetLock(name);
  std::lock_guard<std::mutex> greeting(*lock);
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = known_.find(name);
    if (it == known_.end()) return Status::Unavailable("store: " + name + " is no longer a member");
    if (it->second.last != nullptr && it->second.last->info.epoch == epoch) {  // renewed by another call
      if (it->second.view == nullptr) {
        it->second.view = it->second.last;
        Publish();
      }
      *out = it->second.last;
      return Status::OK();
    }
  }
  std::shared_ptr<const NodeView> view;
  KVF_RETURN_IF_ERROR(Greet(name, deadline, &view));
  std::lock_guard<std::mutex> g(mu_);
  if (auto it = known_.find(name); it != known_.end()) {
    it->second.view = view;
    Publish();
  }
  KVF_LOG_INFO("store member {} restarted (epoch {}): its new segment is {}", name, view->info.epoch, view->info.segment);
  *out = std::move(view);
  return Status::OK();
}

void MemberView::Publish() {
  auto snap = std::make_shared<MemberSnapshot>();
  std::vector<Member> members;
  std::set<std::string> placed;
  const auto now = Clock::now();
  for (auto& [name, k] : known_) {
    if (k.view == nullptr || k.view->info.pool_bytes == 0) continue;
    if (placed_once_ && !placed_.contains(name)) k.entered = now;
    members.push_back(Member{name, k.view->info.pool_bytes});
    snap->nodes.push_back(k.view);
    snap->since.push_back(std::max(k.view->born, k.entered));
    placed.insert(name);
  }
  placed_ = std::move(placed);
  placed_once_ = true;
  if (snap->nodes.empty()) snap->why_none = WhyNone();
  snap->placement = Placement(std::move(members));
  current_ = std::move(snap);
}

std::string MemberView::WhyNone() const {
  if (known_.empty()) return "no member is listed in " + membership_->Describe();
  // The first few, so that a large cluster's error stays one readable line.
  constexpr size_t kNamed = 3;
  std::string why;
  size_t named = 0;
  for (const auto& [name, k] : known_) {
    if (named++ == kNamed) {
      why += fmt::format("; and {} more (logged at warning)", known_.size() - kNamed);
      break;
    }
    if (!why.empty()) why += "; ";
    why += name + ": ";
    if (k.view != nullptr) why += "it has no pool (a client)";
    else why += k.why.empty() ? std::string("not answered yet") : k.why;
  }
  return why;
}

}  // namespace kvfabric::store
