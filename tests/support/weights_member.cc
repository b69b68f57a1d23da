// kvfabric-test-weights-member: one member of a weight sync for the
// weights tests. Usage:
//   kvfabric-test-weights-member PROTOCOL DIR INDEX COUNT VERSIONS [damage=BUCKET] [die_in=VERSION,TENSORS]
//                                [notice_path=PATH]
// It writes its description to DIR/member-INDEX, waits for all COUNT,
// connects, then for each version 1..VERSIONS sends (member 0) or receives
// a model of mixed tensors (tensor i of version v: pattern seed v * 1000 + i).
// A receiver checks every tensor's name, dtype, shape and bytes and prints
// "GOT v TENSORS BYTES" or "BAD v <what>"; the sender prints "SENT v
// TENSORS BYTES"; any error is "ERROR <status>". damage=B flips a payload
// byte of bucket B after it is sealed; die_in=V,N exits (at once, as a
// crash would) after N tensors of version V, sent or received.
// notice_path=PATH sets KVF_NOTICE_PATH; with it, the sender prints
// "NOTICES SENT FAILED" (its notices sent as messages) after its last version.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "kvfabric/engine.h"
#include "tools/common/pattern.h"
#include "kvfabric/weights.h"
#include "weights/bucket_manifest.h"

using namespace kvfabric;
using namespace kvfabric::weights;

namespace {

struct Spec {
  std::string name, dtype;
  std::vector<int64_t> shape;
  uint64_t bytes;
};

// Mixed dtypes and sizes against 1 MiB buckets: tensors larger than a
// bucket, many smaller than one, an empty one.
std::vector<Spec> Model() {
  std::vector<Spec> m = {{"embed_tokens.weight", "bfloat16", {1000, 700}, 1000 * 700 * 2}};
  for (int i = 0; i < 24; ++i) {
    const std::string l = "layers." + std::to_string(i);
    m.push_back({l + ".input_norm.weight", "float32", {257}, 257 * 4});
    m.push_back({l + ".qkv.weight", "bfloat16", {96, 160}, 96 * 160 * 2});
    m.push_back({l + ".bias", "int8", {3}, 3});
  }
  m.push_back({"empty", "float32", {0}, 0});
  m.push_back({"lm_head.weight", "bfloat16", {1500, 1024}, 1500 * 1024 * 2});
  return m;
}

int Fail(const Status& s) {
  std::printf("ERROR %s\n", s.ToString().c_str());
  std::fflush(stdout);
  return 1;
}

std::vector<std::string> Gather(const std::string& dir, int count) {
  std::vector<std::string> out(count);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int i = 0; i < count; ++i) {
    const std::string path = dir + "/member-" + std::to_string(i);
    while (!std::filesystem::exists(path) && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream in(path);
    std::getline(in, out[i]);
  }
  return out;
}

int Send(WeightSync* sync, uint64_t version, int die_after) {
  const std::vector<Spec> model = Model();
  const Status begun = sync->BeginSend(version);
  if (!begun.ok()) return Fail(begun);
  uint64_t bytes = 0;
  int n = 0;
  for (size_t i = 0; i < model.size(); ++i) {
    if (die_after >= 0 && n == die_after) _exit(9);
    std::vector<uint8_t> data(model[i].bytes);
    tools::FillPattern(data.data(), data.size(), 0, static_cast<uint32_t>(version * 1000 + i));
    const Status s = sync->Send({model[i].name, model[i].dtype, model[i].shape, data.data(), data.size()});
    if (!s.ok()) return Fail(s);
    bytes += data.size();
    ++n;
  }
  const Status s = sync->EndSend();
  if (!s.ok()) return Fail(s);
  std::printf("SENT %llu %zu %llu\n", static_cast<unsigned long long>(version), model.size(),
              static_cast<unsigned long long>(bytes));
  return 0;
}

int Receive(WeightSync* sync, uint64_t version, int die_after) {
  const std::vector<Spec> model = Model();
  Status s = sync->BeginReceive(version);
  if (!s.ok()) return Fail(s);
  size_t i = 0;
  uint64_t bytes = 0;
  for (;;) {
    TensorRef t;
    bool done = false;
    if (die_after >= 0 && static_cast<int>(i) == die_after) _exit(9);
    s = sync->Next(&t, &done);
    if (!s.ok()) return Fail(s);
    if (done) break;
    const uint32_t seed = static_cast<uint32_t>(version * 1000 + i);
    if (i >= model.size() || t.name != model[i].name || t.dtype != model[i].dtype || t.shape != model[i].shape ||
        t.bytes != model[i].bytes || (t.bytes > 0 && tools::CheckPattern(t.data, t.bytes, 0, seed) != t.bytes)) {
      std::printf("BAD %llu tensor %zu (%s)\n", static_cast<unsigned long long>(version), i, t.name.c_str());
      return 1;
    }
    bytes += t.bytes;
    ++i;
  }
  std::printf("GOT %llu %zu %llu\n", static_cast<unsigned long long>(version), i,
              static_cast<unsigned long long>(bytes));
  return i == model.size() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s PROTOCOL DIR INDEX COUNT VERSIONS [damage=B] [die_in=V,N] [notice_path=P]\n",
                 argv[0]);
    return 2;
  }
  const std::string dir = argv[2];
  const int me = std::atoi(argv[3]), count = std::atoi(argv[4]), versions = std::atoi(argv[5]);
  int64_t damage = -1;
  int die_version = -1, die_after = -1;
  std::string notice_path;
  for (int i = 6; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("notice_path=", 0) == 0) notice_path = a.substr(12);
    if (a.rfind("damage=", 0) == 0) damage = std::atoll(a.c_str() + 7);
    if (a.rfind("die_in=", 0) == 0 && std::sscanf(a.c_str() + 7, "%d,%d", &die_version, &die_after) != 2)
      return Fail(Status::InvalidArgument("die_in=VERSION,TENSORS: " + a));
  }
  EngineConfig cfg;
  cfg.protocol = argv[1];
  cfg.apply_environment = false;
  cfg.settings.log_level = "error";
  if (!notice_path.empty()) cfg.settings.notice_path = notice_path;
  std::unique_ptr<Engine> engine;
  Status s = Engine::Create(cfg, &engine);
  if (!s.ok()) return Fail(s);
  SyncOptions o;
  o.bucket_bytes = 1 << 20;
  o.manifest_bytes = 64 << 10;
  o.timeout_ms = 4000;
  std::unique_ptr<WeightSync> sync;
  s = WeightSync::Create(engine.get(), o, &sync);
  if (!s.ok()) return Fail(s);
  if (damage >= 0)
    sync->set_seal_hook([damage](uint64_t bucket, uint8_t* slot, uint64_t) {
      if (static_cast<int64_t>(bucket) == damage) slot[kHeaderBytes + 100] ^= 0x40;
    });
  {
    const std::string path = dir + "/member-" + std::to_string(me);
    std::ofstream(path + ".tmp") << sync->Describe() << "\n";
    std::filesystem::rename(path + ".tmp", path);
  }
  s = sync->Connect(Gather(dir, count), me);
  if (!s.ok()) return Fail(s);
  for (int v = 1; v <= versions; ++v) {
    const int dies = v == die_version ? die_after : -1;
    const int rc = me == 0 ? Send(sync.get(), v, dies) : Receive(sync.get(), v, dies);
    std::fflush(stdout);
    if (rc != 0) return rc;
  }
  EngineStats stats;
  if (me == 0 && !notice_path.empty() && engine->Stats(&stats).ok())
    std::printf("NOTICES %llu %llu\n", static_cast<unsigned long long>(stats.notice_messages_sent),
                static_cast<unsigned long long>(stats.notice_messages_failed));
  return 0;
}
