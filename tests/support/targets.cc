#include "tests/support/targets.h"

#include "tests/support/process.h"
#include "tests/support/servers.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <vector>

#include "tests/support/notices.h"
#include "tools/common/pattern.h"

#ifndef KVF_TEST_PEER_PATH
#error "KVF_TEST_PEER_PATH must name the kvfabric-test-peer binary"
#endif

namespace kvfabric::test {
namespace {

using tools::CheckPattern;
using tools::FillPattern;

class ProcessTarget : public Target {
 public:
  ~ProcessTarget() override {
    if (pid_ > 0) {
      Send("quit");
      close(in_);
      for (int i = 0; i < 200 && waitpid(pid_, nullptr, WNOHANG) == 0; ++i) usleep(10000);
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) close(out_);
  }

  bool Start(const std::string& protocol, size_t size, const std::string& settings, std::string* error) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) { *error = "pipe failed"; return false; }
    std::vector<std::string> args = {KVF_TEST_PEER_PATH, protocol, std::to_string(size)};
    std::istringstream ss(settings);
    for (std::string w; ss >> w;) args.push_back(w);
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a crashed test
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    in_ = to_child[1];
    out_ = from_child[0];
    std::string line = ReadLine(20000);
    std::istringstream ready(line);
    std::string word;
    ready >> word >> name >> addr >> this->size;
    if (word != "READY") { *error = "test peer did not start: '" + line + "'"; return false; }
    return true;
  }

  size_t Check(size_t off, size_t len, uint32_t seed) override {
    std::string r = Command("check " + std::to_string(off) + " " + std::to_string(len) + " " + std::to_string(seed));
    if (r.rfind("MISMATCH ", 0) != 0) return static_cast<size_t>(-1);
    return std::strtoull(r.c_str() + 9, nullptr, 10);
  }
  void Fill(size_t off, size_t len, uint32_t seed) override {
    Command("fill " + std::to_string(off) + " " + std::to_string(len) + " " + std::to_string(seed));
  }
  // Returns once every thread of the target has stopped (SIGSTOP alone
  // returns before: a request posted right after could still be served).
  bool Freeze() override { return pid_ > 0 && StopProcess(pid_); }
  bool Thaw() override { return pid_ > 0 && kill(pid_, SIGCONT) == 0; }
  bool Unregister() override { return Command("unregister 0 0 0") == "OK"; }
  std::string Notices(int wait_ms, size_t count, size_t chunk, uint32_t seed) override {
    const std::string r = Command("notices " + std::to_string(wait_ms) + " " + std::to_string(count) + " " +
                                  std::to_string(chunk) + " " + std::to_string(seed));
    return r.rfind("NOTICES", 0) == 0 ? r.substr(r.size() > 8 ? 8 : 7) : "ERROR " + r;
  }
  bool Kill() override {
    if (pid_ <= 0) return false;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    // A killed process cannot remove its shm regions (1-16 MiB each): do it.
    const std::string prefix = std::to_string(pid_) + ":";
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec))
      if (e.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove(e.path(), ec);
    pid_ = -1;
    return true;
  }

 private:
  void Send(const std::string& cmd) {
    std::string l = cmd + "\n";
    ssize_t r = write(in_, l.data(), l.size());
    (void)r;
  }
  std::string Command(const std::string& cmd) {
    Send(cmd);
    return ReadLine(60000);
  }
  std::string ReadLine(int timeout_ms) { return test::ReadLine(out_, timeout_ms); }
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
};

class LocalTarget : public Target {
 public:
  ~LocalTarget() override {
    if (owner_ != nullptr) {
      Status s = owner_->UnregisterMemory(buf_);
      if (!s.ok()) std::fprintf(stderr, "LocalTarget: %s\n", s.ToString().c_str());
    }
    own_engine_.reset();
    std::free(buf_);
  }
  bool Start(const std::string& protocol, size_t size, Engine* engine, std::string* error) {
    if (engine == nullptr) {
      EngineConfig cfg;
      cfg.protocol = protocol;
      cfg.apply_environment = false;
      cfg.settings.log_level = "warn";
      Status s = Engine::Create(cfg, &own_engine_);
      if (!s.ok()) { *error = s.ToString(); return false; }
      engine = own_engine_.get();
    }
    owner_ = engine;
    if (posix_memalign(&buf_, 4096, size) != 0) { *error = "out of memory"; return false; }
    FillPattern(buf_, size, 0, 7);
    Status s = engine->RegisterMemory(buf_, size);
    if (!s.ok()) { *error = s.ToString(); return false; }
    name = engine->name();
    addr = reinterpret_cast<uintptr_t>(buf_);
    this->size = size;
    return true;
  }
  size_t Check(size_t off, size_t len, uint32_t seed) override {
    return CheckPattern(static_cast<uint8_t*>(buf_) + off, len, off, seed);
  }
  void Fill(size_t off, size_t len, uint32_t seed) override {
    FillPattern(static_cast<uint8_t*>(buf_) + off, len, off, seed);
  }
  bool Unregister() override { return owner_->UnregisterMemory(buf_).ok(); }
  std::string Notices(int wait_ms, size_t count, size_t chunk, uint32_t seed) override {
    return GatherNotices(owner_, static_cast<uint8_t*>(buf_), size, wait_ms, count, chunk, seed);
  }

 private:
  std::unique_ptr<Engine> own_engine_;
  Engine* owner_ = nullptr;
  void* buf_ = nullptr;
};

}  // namespace

std::unique_ptr<Target> StartProcessTarget(const std::string& protocol, size_t size,
                                           const std::string& settings, std::string* error) {
  auto t = std::make_unique<ProcessTarget>();
  if (!t->Start(protocol, size, settings, error)) return nullptr;
  return t;
}

std::unique_ptr<Target> StartLocalTarget(const std::string& protocol, size_t size, Engine* engine,
                                         std::string* error) {
  auto t = std::make_unique<LocalTarget>();
  if (!t->Start(protocol, size, engine, error)) return nullptr;
  return t;
}

}  // namespace kvfabric::test
