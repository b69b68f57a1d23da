// RailSet: the rails an engine opened (one per NIC it uses) and their roles:
// the protocol's rails, and under protocol auto a shm rail for same-host
// peers. Opening them is the first step of Engine::Create.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/rail_choice.h"
#include "fabric/rail.h"
#include "kvfabric/settings.h"

namespace kvfabric::engine {

class Peer;

struct RailSet {
  std::vector<std::unique_ptr<fabric::Rail>> rails;  // by rail index
  std::vector<fabric::RailInfo> infos;               // rails[i]->info(), as opened
  std::vector<size_t> primary;                       // the protocol's rails
  int shm = -1;                                      // the same-host rail, or -1

  // Opens every rail of `protocol` (efa, tcp, shm, verbs, sockets, auto)
  // that `nic_filter` and `bind_ip` allow, then under auto (with
  // KVF_SAME_HOST_SHM) a shm rail for same-host peers when one opens.
  // `provider` gets the protocol's libfabric provider name. With `gpu` (the
  // CUDA driver is loaded), rails ask for FI_HMEM so GPU memory registers
  // in place (not the shm rail: see docs/design/engine.md, GPU memory), and the
  // rails that cannot are named once in the log: GPU memory is staged there.
  Status Open(const std::string& protocol, const std::string& nic_filter, const std::string& bind_ip,
              const Settings& settings, bool gpu, std::string* provider);

  std::vector<fabric::Rail*> raw() const;
  fabric::Rail* operator[](size_t i) const { return rails[i].get(); }
  size_t size() const { return rails.size(); }

  // What rail choice needs of the rails in `usable` for `peer` at `now_ns`:
  // views[r] for each r in `usable` (other entries untouched). `near` is
  // the local memory's near-rail mask (memory::Buffer::near_rails).
  void View(const Peer& peer, std::span<const size_t> usable, uint64_t near, int64_t now_ns,
            RailView* views) const;

 private:
  // Opens the rails of one libfabric provider, appending their indices to
  // `opened`; with `hmem`, asking for FI_HMEM (never on shm).
  Status OpenProvider(const std::string& provider, const std::string& nic_filter, const std::string& bind_ip,
                      fabric::RailOptions options, bool hmem, std::vector<size_t>* opened);
};

}  // namespace kvfabric::engine
