#include "store/wire/shared_pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/host.h"

namespace kvfabric::store {

const std::string& SharedPoolHostKey() {
  static const std::string key = [] {
    std::string k = host::BootId();
    for (const char* ns : {"/proc/self/ns/pid", "/proc/self/ns/net"}) {
      char link[128] = {0};
      const ssize_t n = readlink(ns, link, sizeof(link) - 1);
      k += "/" + (n > 0 ? std::string(link, static_cast<size_t>(n)) : std::string("?"));
    }
    return k;
  }();
  return key;
}

Status SharedPool::Create(size_t pool_bytes, size_t keys_bytes, SharedPool* out, PoolShare* share) {
  const size_t bytes = KeysOffset(pool_bytes) + keys_bytes;
  const int fd = memfd_create("kvfabric-store-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status::Unavailable(std::string("store: memfd_create for a shared pool: ") + std::strerror(errno));
  auto fail = [&](const std::string& what) {
    const int why = errno;
    close(fd);
    return Status::Unavailable("store: " + what + " for a shared pool of " + std::to_string(bytes) +
                               " bytes: " + std::strerror(why) + " (KVF_STORE_SHARE_POOLS=0 keeps the pool private)");
  };
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) return fail("ftruncate");
  // Sealed: no one can shrink the file under a peer's mapping (a read past
  // a file's end is SIGBUS) or grow it.
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) return fail("sealing");
  struct stat st{};
  if (fstat(fd, &st) != 0) return fail("fstat");
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return fail("mmap");
  *out = SharedPool();
  out->fd_ = fd;
  out->base_ = static_cast<uint8_t*>(base);
  out->pool_bytes_ = pool_bytes;
  share->host = SharedPoolHostKey();
  share->pid = static_cast<uint64_t>(getpid());
  share->fd = static_cast<uint64_t>(fd);
  share->inode = static_cast<uint64_t>(st.st_ino);
  share->bytes = bytes;
  return Status::OK();
}

SharedPool::SharedPool(SharedPool&& other) noexcept { *this = std::move(other); }

SharedPool& SharedPool::operator=(SharedPool&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    base_ = std::exchange(other.base_, nullptr);
    pool_bytes_ = other.pool_bytes_;
  }
  return *this;
}

SharedPool::~SharedPool() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace kvfabric::store
