// A pause in a polling loop: lets the sibling hyperthread run, and tells
// the core the loop spins (no memory-order mis-speculation on its exit).
#pragma once

namespace kvfabric {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace kvfabric
