// engine_stress: N threads call an engine at random (transfers checked byte
// for byte, batches submitted, polled, waited and freed, batches of other
// threads freed, the segment closed and opened again, memory registered and
// unregistered) while one of them, or the main thread, closes the engine at
// a random moment; then a new engine, round after round, over tcp and shm,
// against target processes forked at start. Built with AddressSanitizer and
// UndefinedBehaviorSanitizer on the engine layer (`make stress`, part of
// `make test`): any sanitizer report, crash, hang, wrong byte or unexpected
// error fails it.
//
//   engine_stress [--seconds S] [--threads N] [--seed X]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvfabric/engine.h"
#include "tools/common/pattern.h"

extern "C" const char* __asan_default_options() { return "halt_on_error=1:detect_leaks=1"; }
extern "C" const char* __ubsan_default_options() { return "halt_on_error=1:print_stacktrace=1"; }

namespace {

using namespace kvfabric;
using Clock = std::chrono::steady_clock;

constexpr size_t KiB = 1024, MiB = 1024 * KiB;
constexpr size_t kSlot = 2 * MiB;  // each thread's part of the local and the remote buffer
constexpr size_t kLen = 64 * KiB;

// A target engine in a child process forked before this process has an
// engine (or threads): it registers `size` bytes, writes "<name> <addr>\n"
// to a pipe and serves until its stdin pipe closes.
struct TargetProcess {
  pid_t pid = -1;
  int keep_alive = -1;  // closing it ends the child
  std::string name;
  uint64_t addr = 0;
};

bool StartTarget(const std::string& protocol, size_t size, TargetProcess* out) {
  int ready[2], alive[2];
  if (pipe(ready) != 0 || pipe(alive) != 0) return false;
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    close(ready[0]);
    close(alive[1]);
    EngineConfig cfg;
    cfg.protocol = protocol;
    cfg.apply_environment = false;
    cfg.settings.log_level = "error";
    std::unique_ptr<Engine> e;
    void* buf = nullptr;
    Status s = Engine::Create(cfg, &e);
    if (s.ok() && posix_memalign(&buf, 4096, size) != 0) s = Status::Internal("no memory");
    if (s.ok()) s = e->RegisterMemory(buf, size);
    const std::string line = s.ok() ? e->name() + " " + std::to_string(reinterpret_cast<uintptr_t>(buf)) + "\n"
                                     : "ERROR " + s.ToString() + "\n";
    if (write(ready[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(1);
    char c;
    while (read(alive[0], &c, 1) > 0) {
    }
    e.reset();
    std::free(buf);
    std::exit(s.ok() ? 0 : 1);
  }
  close(ready[1]);
  close(alive[0]);
  std::string line;
  char c;
  while (read(ready[0], &c, 1) == 1 && c != '\n') line += c;
  close(ready[0]);
  const size_t space = line.find(' ');
  if (line.rfind("ERROR", 0) == 0 || space == std::string::npos) {
    std::fprintf(stderr, "engine_stress: %s target did not start: %s\n", protocol.c_str(), line.c_str());
    return false;
  }
  out->pid = pid;
  out->keep_alive = alive[1];
  out->name = line.substr(0, space);
  out->addr = std::strtoull(line.c_str() + space + 1, nullptr, 10);
  return true;
}

// What the threads of all rounds did, and what went wrong.
struct Tally {
  std::mutex mu;
  std::map<std::string, uint64_t> counts;  // "op:code" -> calls
  std::vector<std::string> problems;

  void Count(const char* op, const Status& s) {
    std::lock_guard<std::mutex> g(mu);
    ++counts[std::string(op) + ":" + std::string(Status::CodeName(s.code()))];
  }
  void Problem(const std::string& what) {
    std::lock_guard<std::mutex> g(mu);
    if (problems.size() < 20) problems.push_back(what);
  }
};

// One round's shared state.
struct Round {
  Engine* engine = nullptr;
  const TargetProcess* target = nullptr;
  uint8_t* local = nullptr;
  std::atomic<SegmentHandle> seg{-1};
  std::atomic<BatchId> last_batch{0};
  std::atomic<bool> engine_closed{false};  // Close has returned
  Tally* tally = nullptr;
};

// The codes a call may end with here: OK; Closed once the engine closes;
// NotFound for a segment or batch another thread closed or freed; Busy for
// a batch freed while pending or being submitted to.
bool Expected(const Status& s) {
  switch (s.code()) {
    case Status::Code::kOk:
    case Status::Code::kClosed:
    case Status::Code::kNotFound:
    case Status::Code::kBusy:
      return true;
    default:
      return false;
  }
}

void Worker(Round* r, size_t t, uint32_t seed) {
  std::mt19937 rng(seed);
  Engine* e = r->engine;
  uint8_t* mine = r->local + t * kSlot;
  const uint64_t remote = r->target->addr + t * kSlot;
  std::vector<BatchId> batches;  // submitted by this thread, not freed yet
  std::vector<uint8_t> extra(64 * KiB);
  bool extra_registered = false;
  bool closed_before = false;  // Close had returned when this step began
  auto check = [&](const char* op, const Status& s) {
    r->tally->Count(op, s);
    if (!Expected(s)) r->tally->Problem(std::string(op) + ": " + s.ToString());
    if (closed_before && s.code() != Status::Code::kClosed)
      r->tally->Problem(std::string(op) + " after Close returned: " + s.ToString());
    return s;
  };
  for (uint32_t i = 0;; ++i) {
    closed_before = r->engine_closed.load();
    Status s;
    const uint32_t pick = rng() % 100;
    if (pick < 25) {  // a write, read back and compared
      const uint64_t at = remote + (rng() % 8) * kLen;
      const uint32_t pattern = seed + i;
      tools::FillPattern(mine, kLen, at, pattern);
      const SegmentHandle seg = r->seg.load();
      s = check("transfer", e->Transfer({{OpCode::kWrite, mine, seg, at, kLen}}));
      if (s.ok()) s = check("transfer", e->Transfer({{OpCode::kRead, mine + kLen, seg, at, kLen}}));
      if (s.ok() && tools::CheckPattern(mine + kLen, kLen, at, pattern) != kLen)
        r->tally->Problem("read back other bytes than written");
    } else if (pick < 45) {  // submit a batch, keep it
      BatchId b;
      s = check("allocate", e->AllocateBatch(4, &b));
      if (s.ok()) {
        r->last_batch.store(b);
        std::vector<TransferRequest> reqs;
        for (size_t k = 0; k < 4; ++k)
          reqs.push_back({OpCode::kWrite, mine + 2 * kLen + k * kLen, r->seg.load(), remote + kSlot / 2 + k * kLen, kLen});
        s = check("submit", e->Submit(b, reqs));
        if (s.ok()) batches.push_back(b);
        else if (s.code() != Status::Code::kClosed) (void)check("free", e->FreeBatch(b));  // nothing was submitted
      }
    } else if (pick < 70 && !batches.empty()) {  // look at one, maybe wait, free it
      const size_t k = rng() % batches.size();
      const BatchId b = batches[k];
      TransferStatus st;
      switch (rng() % 4) {
        case 0: s = check("batch_status", e->GetBatchStatus(b, &st)); break;
        case 1: s = check("task_status", e->GetTaskStatus(b, rng() % 4, &st)); break;
        case 2: s = check("wait", e->WaitBatch(b, 5, &st)); break;
        default: s = check("wait", e->WaitBatch(b, -1, &st)); break;
      }
      // A request whose segment another thread closed meanwhile fails with NotFound.
      if (s.ok() && st.state != TaskState::kPending && st.state != TaskState::kCompleted &&
          st.error.code() != Status::Code::kNotFound)
        r->tally->Problem("request ended " + std::string(TaskStateName(st.state)) + ": " + st.error.ToString());
      const Status freed = check("free", e->FreeBatch(b));
      if (freed.ok() || freed.code() == Status::Code::kNotFound) batches.erase(batches.begin() + k);
      if (s.ok()) s = freed;
    } else if (pick < 75) {  // free whatever batch was allocated last, maybe another thread's
      s = check("free_other", e->FreeBatch(r->last_batch.load()));
    } else if (pick < 80) {  // close the segment and open it again
      s = check("close_segment", e->CloseSegment(r->seg.load()));
      SegmentHandle h;
      if (s.code() != Status::Code::kClosed) {
        s = check("open_segment", e->OpenSegment(r->target->name, &h));
        if (s.ok()) r->seg.store(h);
      }
    } else if (pick < 85) {  // open (cached: the same handle)
      SegmentHandle h;
      s = check("open_segment", e->OpenSegment(r->target->name, &h));
      if (s.ok()) r->seg.store(h);
    } else if (pick < 93) {  // register or unregister a private buffer
      s = extra_registered ? check("unregister", e->UnregisterMemory(extra.data()))
                           : check("register", e->RegisterMemory(extra.data(), extra.size()));
      if (s.ok()) extra_registered = !extra_registered;
    } else if (pick < 99) {  // the calls without a Status
      (void)e->rails();
      (void)e->closed();
      if (e->name().empty()) r->tally->Problem("empty engine name");
    } else if (rng() % 8 == 0) {  // close the engine (now and then)
      e->Close();
      r->engine_closed.store(true);
      s = Status::Closed("closed it");
    }
    if (s.code() == Status::Code::kClosed) {
      // After Close every call refuses: check a few, then stop.
      TransferStatus st;
      BatchId b;
      closed_before = r->engine_closed.load();
      if (closed_before) {
        (void)check("after_close", e->GetBatchStatus(1, &st));
        (void)check("after_close", e->AllocateBatch(1, &b));
      }
      if (r->engine_closed.load() || e->closed()) return;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 20;
  size_t threads = 6;
  uint32_t seed = static_cast<uint32_t>(std::random_device{}());
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--seconds")) seconds = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::strtoul(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--seed")) seed = static_cast<uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
    else {
      std::fprintf(stderr, "usage: %s [--seconds S] [--threads N] [--seed X]\n", argv[0]);
      return 2;
    }
  }
  const std::vector<std::string> protocols = {"tcp", "shm"};
  const size_t remote_size = threads * kSlot;
  std::vector<TargetProcess> targets(protocols.size());
  for (size_t p = 0; p < protocols.size(); ++p)
    if (!StartTarget(protocols[p], remote_size, &targets[p])) return 1;

  std::printf("engine_stress: %zu threads, %.0f s, seed %u\n", threads, seconds, seed);
  std::fflush(stdout);
  std::mt19937 rng(seed);
  Tally tally;
  void* local = nullptr;
  if (posix_memalign(&local, 4096, threads * kSlot) != 0) return 1;
  std::memset(local, 0, threads * kSlot);
  const auto end = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  size_t rounds = 0, closed_by_main = 0;
  while (Clock::now() < end) {
    const size_t p = rounds % protocols.size();
    EngineConfig cfg;
    cfg.protocol = protocols[p];
    cfg.apply_environment = false;
    cfg.settings.log_level = "error";
    cfg.settings.transfer_timeout_ms = 20000;
    std::unique_ptr<Engine> e;
    Status s = Engine::Create(cfg, &e);
    if (s.ok()) s = e->RegisterMemory(local, threads * kSlot);
    SegmentHandle h = -1;
    if (s.ok()) s = e->OpenSegment(targets[p].name, &h);
    if (!s.ok()) {
      std::fprintf(stderr, "engine_stress: round %zu (%s): %s\n", rounds, cfg.protocol.c_str(), s.ToString().c_str());
      return 1;
    }
    Round r;
    r.engine = e.get();
    r.target = &targets[p];
    r.local = static_cast<uint8_t*>(local);
    r.seg.store(h);
    r.tally = &tally;
    std::vector<std::thread> workers;
    for (size_t t = 0; t < threads; ++t) workers.emplace_back(Worker, &r, t, static_cast<uint32_t>(rng()));
    // The main thread closes the engine after 20-300 ms, unless a worker did.
    const auto close_at = Clock::now() + std::chrono::milliseconds(20 + rng() % 280);
    while (!r.engine_closed.load() && Clock::now() < close_at) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!r.engine_closed.load()) {
      ++closed_by_main;
      const auto t0 = Clock::now();
      e->Close();
      r.engine_closed.store(true);
      if (Clock::now() - t0 > std::chrono::seconds(6)) tally.Problem("Close took more than 6 s");
    }
    for (auto& w : workers) w.join();
    e.reset();
    ++rounds;
  }
  // The last started first: a later target inherited the earlier ones' pipes.
  for (auto t = targets.rbegin(); t != targets.rend(); ++t) {
    close(t->keep_alive);
    int status = 0;
    waitpid(t->pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) tally.Problem("a target process failed (wait status " +
                                                                      std::to_string(status) + ")");
  }
  std::free(local);
  std::printf("engine_stress: %zu rounds (%zu closed by the main thread, %zu by a worker)\n", rounds, closed_by_main,
              rounds - closed_by_main);
  for (const auto& [what, n] : tally.counts) std::printf("  %-28s %llu\n", what.c_str(), static_cast<unsigned long long>(n));
  for (const auto& p : tally.problems) std::printf("PROBLEM %s\n", p.c_str());
  std::printf("engine_stress: %s\n", tally.problems.empty() ? "no problem" : "FAILED");
  return tally.problems.empty() ? 0 : 1;
}
