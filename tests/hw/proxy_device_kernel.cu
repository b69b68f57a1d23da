// The proxy queue's device producer (kvfabric/proxy_device.cuh) in a
// kernel: compiled by `make cuda-check` (nvcc from PyPI) and by CMake
// where a CUDA compiler is found; run on a GPU by nothing yet
// (docs/design/proxy.md).
#include "kvfabric/proxy_device.cuh"

// Thread t of the grid is producer t: it puts `per_thread` WRITEs of
// `block` bytes from its own stretch of `local` to the same stretch at
// `remote` of `segment`, waits for them, and writes how many failed.
extern "C" __global__ void kvf_proxy_device_writes(kvf_proxy_ring* ring, int64_t segment, uint64_t local,
                                                   uint64_t remote, uint64_t block, uint64_t per_thread,
                                                   uint64_t* failed_out) {
  const uint64_t id = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= ring->producers) return;
  for (uint64_t i = 0; i < per_thread; ++i) {
    const uint64_t off = (id * per_thread + i) * block;
    kvf_put_nbi(ring, id, local + off, segment, remote + off, block);
  }
  kvf_quiet(ring, id);
  failed_out[id] = kvf_failed(ring, id);
}
