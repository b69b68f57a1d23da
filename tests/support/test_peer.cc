// kvfabric-test-peer: a target process for the integration tests. It creates
// an engine, registers one buffer, prints "READY <segment> <addr> <size>",
// then answers commands on stdin, each about its OWN memory (so a test can
// check what really landed in the target):
//   crc OFF LEN        -> "CRC <fnv1a64>"
//   check OFF LEN SEED -> "MISMATCH <index>" (LEN when all bytes match)
//   fill OFF LEN SEED  -> "OK"
//   notices WAIT_MS COUNT CHUNK SEED -> "NOTICES [N:ok|N:bad ...]" (tests/support/notices.h)
//   quit               -> exits (EOF too)
#include <sys/mman.h>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "kvfabric/engine.h"
#include "tests/support/notices.h"
#include "tools/common/pattern.h"

using namespace kvfabric;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s PROTOCOL BUFFER_SIZE [SETTING=VALUE ...] [metadata=URI] [local_server_name=HOST:PORT] [buffer_addr=ADDR]\n", argv[0]);
    return 2;
  }
  EngineConfig cfg;
  cfg.protocol = argv[1];
  cfg.apply_environment = false;
  cfg.settings.log_level = "warn";
  uint64_t fixed_addr = 0;
  for (int i = 3; i < argc; ++i) {
    std::string kv = argv[i];
    auto eq = kv.find('=');
    if (kv.substr(0, eq) == "metadata") {  // not settings: the engine's metadata service and name
      cfg.metadata = kv.substr(eq + 1);
      continue;
    }
    if (kv.substr(0, eq) == "local_server_name") {
      cfg.local_server_name = kv.substr(eq + 1);
      continue;
    }
    if (kv.substr(0, eq) == "buffer_addr") {  // place the buffer here (a restart at the same address)
      fixed_addr = std::strtoull(kv.substr(eq + 1).c_str(), nullptr, 0);
      continue;
    }
    Status s = cfg.settings.Assign(kv);
    if (!s.ok()) { std::fprintf(stderr, "%s\n", s.ToString().c_str()); return 2; }
  }
  const size_t size = std::strtoull(argv[2], nullptr, 0);
  std::unique_ptr<Engine> engine;
  Status s = Engine::Create(cfg, &engine);
  if (!s.ok()) { std::printf("ERROR %s\n", s.ToString().c_str()); return 1; }
  void* buf = nullptr;
  if (fixed_addr != 0) {
    buf = mmap(reinterpret_cast<void*>(fixed_addr), size, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (buf == MAP_FAILED) { std::printf("ERROR cannot map buffer_addr\n"); return 1; }
  } else if (posix_memalign(&buf, 4096, size) != 0) {
    return 1;
  }
  tools::FillPattern(buf, size, 0, 7);
  s = engine->RegisterMemory(buf, size);
  if (!s.ok()) { std::printf("ERROR %s\n", s.ToString().c_str()); return 1; }
  std::printf("READY %s %llu %zu\n", engine->name().c_str(),
              static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(buf)), size);
  std::fflush(stdout);
  auto* base = static_cast<uint8_t*>(buf);
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    size_t off = 0, len = 0;
    uint32_t seed = 0;
    in >> cmd >> off >> len >> seed;
    if (cmd == "quit") break;
    if (cmd == "notices") {  // WAIT_MS COUNT CHUNK SEED
      uint32_t notice_seed = 0;
      in >> notice_seed;
      const std::string got =
          test::GatherNotices(engine.get(), base, size, static_cast<int>(off), len, seed, notice_seed);
      std::printf("NOTICES%s%s\n", got.empty() ? "" : " ", got.c_str());
      std::fflush(stdout);
      continue;
    }
    if (off > size || len > size - off) { std::printf("ERROR range\n"); std::fflush(stdout); continue; }
    if (cmd == "crc") std::printf("CRC %llu\n", static_cast<unsigned long long>(tools::Checksum(base + off, len)));
    else if (cmd == "check") std::printf("MISMATCH %zu\n", tools::CheckPattern(base + off, len, off, seed));
    else if (cmd == "fill") { tools::FillPattern(base + off, len, off, seed); std::printf("OK\n"); }
    else if (cmd == "unregister") std::printf(engine->UnregisterMemory(buf).ok() ? "OK\n" : "ERROR unregister\n");
    else std::printf("ERROR unknown command\n");
    std::fflush(stdout);
  }
  engine.reset();
  if (fixed_addr != 0) munmap(buf, size);
  else std::free(buf);
  return 0;
}
