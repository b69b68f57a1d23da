// kvfabric-gpu-ceiling: the GPU ceilings the hardware runbook (tests/hw/)
// sets beside each GPU transfer figure: device-to-device and host-to-device
// copy throughput through the CUDA driver (cuMemcpy; the host side pinned),
// per GPU, as GB/s (10^9 bytes per second), median of --rounds.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "memory/cuda.h"

namespace {

using kvfabric::Status;
namespace cuda = kvfabric::memory::cuda;

// GB/s of `rounds` copies of `n` bytes, median.
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Status Measure(void* dst, const void* src, size_t n, int device, int rounds, double* gbps) {
  std::vector<double> runs;
  KVF_RETURN_IF_ERROR(cuda::Copy(dst, src, n, device));  // warm-up
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    KVF_RETURN_IF_ERROR(cuda::Copy(dst, src, n, device));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    runs.push_back(static_cast<double>(n) / s / 1e9);
  }
  *gbps = Median(runs);
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvfabric-gpu-ceiling: cuMemcpy device-to-device and host-to-device throughput per GPU"};
  size_t bytes = 256 << 20;
  int gpu = -1, rounds = 5;
  bool json = false;
  app.add_option("--bytes", bytes, "bytes per copy")->check(CLI::PositiveNumber);
  app.add_option("--gpu_id", gpu, "the GPU, or -1 for every GPU")->check(CLI::Range(-1, 65536));
  app.add_option("--rounds", rounds, "copies timed per figure (the median is printed)")->check(CLI::PositiveNumber);
  app.add_flag("--json", json, "one JSON object per GPU instead of text");
  CLI11_PARSE(app, argc, argv);

  Status s = cuda::Load(getenv("KVF_CUDA_LIBRARY") ? getenv("KVF_CUDA_LIBRARY") : "");
  if (!s.ok()) {
    std::fprintf(stderr, "kvfabric-gpu-ceiling: %s\n", s.message().c_str());
    return 2;
  }
  const int count = cuda::DeviceCount();
  if (gpu >= count) {
    std::fprintf(stderr, "kvfabric-gpu-ceiling: --gpu_id=%d: this host has %d GPU(s)\n", gpu, count);
    return 2;
  }
  std::vector<char> host(bytes);
  s = cuda::PinHost(host.data(), bytes);
  if (!s.ok()) {
    std::fprintf(stderr, "kvfabric-gpu-ceiling: pinning host memory: %s\n", s.message().c_str());
    return 1;
  }
  int failed = 0;
  for (int d = gpu < 0 ? 0 : gpu; d < (gpu < 0 ? count : gpu + 1); ++d) {
    void* a = nullptr;
    void* b = nullptr;
    double d2d = 0, h2d = 0;
    s = cuda::Alloc(d, bytes, &a);
    if (s.ok()) s = cuda::Alloc(d, bytes, &b);
    if (s.ok()) s = Measure(b, a, bytes, d, rounds, &d2d);
    if (s.ok()) s = Measure(a, host.data(), bytes, d, rounds, &h2d);
    cuda::Free(a);
    cuda::Free(b);
    if (!s.ok()) {
      std::fprintf(stderr, "kvfabric-gpu-ceiling: cuda:%d: %s\n", d, s.message().c_str());
      ++failed;
      continue;
    }
    if (json)
      std::printf("{\"gpu\": %d, \"bytes\": %zu, \"d2d_gbps\": %.2f, \"h2d_gbps\": %.2f}\n", d, bytes, d2d, h2d);
    else
      std::printf("cuda:%d  device-to-device %.2f GB/s  host-to-device %.2f GB/s  (%zu bytes, median of %d)\n", d,
                  d2d, h2d, bytes, rounds);
  }
  cuda::UnpinHost(host.data());
  return failed == 0 ? 0 : 1;
}
