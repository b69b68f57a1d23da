// kvfabric-test-store-node: a store node for the integration tests. It
// creates an engine and a store with a pool, prints
// "READY <store name> <segment>" and serves until SIGTERM or SIGINT, when
// it leaves the store and exits 0 (SIGKILL: a crash, as tests need).
// Arguments: PROTOCOL POOL_BYTES [SETTING=VALUE ...] [metadata=URI]
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>

#include "kvfabric/engine.h"
#include "kvfabric/store.h"

using namespace kvfabric;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s PROTOCOL POOL_BYTES [SETTING=VALUE ...] [metadata=URI]\n", argv[0]);
    return 2;
  }
  EngineConfig cfg;
  cfg.protocol = argv[1];
  cfg.apply_environment = false;
  cfg.settings.log_level = "warn";
  for (int i = 3; i < argc; ++i) {
    const std::string kv = argv[i];
    if (kv.rfind("metadata=", 0) == 0) {
      cfg.metadata = kv.substr(9);
      continue;
    }
    if (Status s = cfg.settings.Assign(kv); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 2;
    }
  }
  cfg.settings.store_pool_bytes = std::stoll(argv[2]);
  sigset_t stop_signals;  // blocked in every thread, taken by sigwait below
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::unique_ptr<Engine> engine;
  Status s = Engine::Create(cfg, &engine);
  std::unique_ptr<Store> store;
  if (s.ok()) s = Store::Create(engine.get(), cfg.settings, &store);
  if (!s.ok()) {
    std::printf("ERROR %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("READY %s %s\n", store->name().c_str(), engine->name().c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  store->Close();
  return 0;
}
