// The engine the GPU tests (gpu_test.cc, gpu_store_test.cc) run: tcp, no
// KVF_* environment, the CUDA driver library named (empty: the host's).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "kvfabric/engine.h"

namespace kvfabric {

inline std::unique_ptr<Engine> NewGpuTestEngine(const std::string& cuda_library, bool cuda = true,
                                                int64_t staging_bytes = 0, const std::string& notice_path = "auto") {
  EngineConfig cfg;
  cfg.settings.notice_path = notice_path;
  if (staging_bytes > 0) cfg.settings.staging_bytes = staging_bytes;
  cfg.protocol = "tcp";
  cfg.apply_environment = false;
  cfg.settings.cuda = cuda;
  cfg.settings.cuda_library = cuda_library;
  cfg.settings.log_level = "warn";
  std::unique_ptr<Engine> e;
  Status s = Engine::Create(cfg, &e);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return e;
}

}  // namespace kvfabric
