#include "store/node/writer_segments.h"

#include "common/text.h"

namespace kvfabric::store {

bool WriterSegments::Known(const std::string& name, SegmentHandle* out) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = open_.find(name);
  if (it == open_.end()) return false;
  *out = it->second;
  return true;
}

Status WriterSegments::Unreachable(const std::string& name) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = unreachable_.find(name);
  if (it == unreachable_.end()) return Status::OK();
  const auto left = it->second.first - Clock::now();
  if (left <= left.zero()) {
    unreachable_.erase(it);
    return Status::OK();
  }
  return it->second.second.Annotate(text::Format(
      "store: the writer's segment was not reached on the last try; not tried again for {} ms "
      "(KVF_STORE_DOWN_RETRY_MS)",
      std::chrono::ceil<std::chrono::milliseconds>(left).count()));
}

Status WriterSegments::Open(const std::string& name, SegmentHandle* out) {
  KVF_RETURN_IF_ERROR(Unreachable(name));  // another thread tried it meanwhile
  const Status open = engine_->OpenSegment(name, out);
  const auto now = Clock::now();
  std::lock_guard<std::mutex> g(mu_);
  if (open.ok()) {
    open_[name] = *out;
    return open;
  }
  std::erase_if(unreachable_, [&](const auto& w) { return w.second.first <= now; });
  if (unreachable_.size() < kMaxUnreachable) unreachable_[name] = {now + retry_, open};
  return open;
}

}  // namespace kvfabric::store
