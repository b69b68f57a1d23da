#include "topology/topology.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "common/text.h"

namespace kvfabric::topology {
namespace fs = std::filesystem;

namespace {

std::string ReadLine(const fs::path& p) {
  std::ifstream f(p);
  std::string s;
  std::getline(f, s);
  return s;
}

bool IsPciAddress(const std::string& name) {
  static const std::regex bdf("[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\\.[0-7]");
  return std::regex_match(name, bdf);
}

// The PCI device at or above `dev` (a virtio NIC sits below its PCI function).
fs::path PciDirOf(const fs::path& dev) {
  std::error_code ec;
  fs::path p = fs::canonical(dev, ec);
  if (ec) return {};
  for (; !p.empty() && p != p.root_path(); p = p.parent_path())
    if (IsPciAddress(p.filename().string())) return p;
  return {};
}

int NumaOf(const fs::path& pci_dir) {
  if (pci_dir.empty()) return -1;
  const std::string s = ReadLine(pci_dir / "numa_node");
  try {
    int n = s.empty() ? -1 : std::stoi(s);
    return n < 0 ? -1 : n;
  } catch (...) {
    return -1;
  }
}

// The kernel device behind a libfabric domain, and its sysfs directory.
fs::path DeviceDir(const fabric::RailInfo& r, const std::string& root, std::string* device) {
  const std::string& d = r.domain;
  if (r.provider.rfind("efa", 0) == 0) {
    *device = d.substr(0, d.find('-'));  // rdmap79s0-rdm -> rdmap79s0
    return fs::path(root) / "class/infiniband" / *device / "device";
  }
  if (r.provider.rfind("verbs", 0) == 0) {
    *device = d;
    return fs::path(root) / "class/infiniband" / d / "device";
  }
  if (r.provider.rfind("tcp", 0) == 0 || r.provider.rfind("sockets", 0) == 0 || r.provider.rfind("udp", 0) == 0) {
    *device = d;
    return fs::path(root) / "class/net" / d / "device";
  }
  device->clear();
  return {};
}

// Path components two sysfs PCI paths share.
size_t CommonDepth(const std::string& a, const std::string& b) {
  fs::path pa(a), pb(b);
  size_t n = 0;
  for (auto ia = pa.begin(), ib = pb.begin(); ia != pa.end() && ib != pb.end() && *ia == *ib; ++ia, ++ib) ++n;
  return n;
}

// Depth of the root complex ("pci0000:00") in a sysfs PCI path: sharing
// only that far means sharing no bridge or switch.
size_t RootDepth(const std::string& p) {
  size_t n = 0;
  for (const auto& c : fs::path(p)) {
    ++n;
    if (c.string().rfind("pci", 0) == 0) return n;
  }
  return n;
}

}  // namespace

Topology Topology::Discover(const std::vector<fabric::RailInfo>& rails, const std::string& root) {
  Topology t;
  for (const fabric::RailInfo& r : rails) {
    Nic n;
    n.domain = r.domain;
    n.provider = r.provider;
    fs::path dev = DeviceDir(r, root, &n.device);
    fs::path pci = dev.empty() ? fs::path() : PciDirOf(dev);
    if (!pci.empty()) {
      n.pci = pci.filename().string();
      n.pci_path = pci.string();
      n.numa = NumaOf(pci);
    }
    t.nics_.push_back(std::move(n));
  }
  std::error_code ec;
  std::vector<Gpu> gpus;
  for (const auto& e : fs::directory_iterator(fs::path(root) / "bus/pci/devices", ec)) {
    const std::string vendor = ReadLine(e.path() / "vendor");
    const std::string cls = ReadLine(e.path() / "class");
    // NVIDIA (0x10de) VGA (0x0300) or 3D controller (0x0302).
    if (vendor != "0x10de" || (cls.rfind("0x0300", 0) != 0 && cls.rfind("0x0302", 0) != 0)) continue;
    Gpu g;
    g.pci = e.path().filename().string();
    g.pci_path = fs::canonical(e.path(), ec).string();
    g.numa = NumaOf(e.path());
    gpus.push_back(std::move(g));
  }
  std::sort(gpus.begin(), gpus.end(), [](const Gpu& a, const Gpu& b) { return a.pci < b.pci; });
  for (size_t i = 0; i < gpus.size(); ++i) gpus[i].index = static_cast<int>(i);
  t.gpus_ = std::move(gpus);
  t.FindNearestRails();
  return t;
}

void Topology::FindNearestRails() {
  for (Gpu& g : gpus_) {
    g.nearest_rails.clear();
    size_t best = 0;
    if (!g.pci_path.empty()) {
      for (const Nic& n : nics_)
        if (!n.pci_path.empty()) best = std::max(best, CommonDepth(g.pci_path, n.pci_path));
      if (best > RootDepth(g.pci_path)) {  // a bridge or switch in common
        for (size_t i = 0; i < nics_.size(); ++i)
          if (!nics_[i].pci_path.empty() && CommonDepth(g.pci_path, nics_[i].pci_path) == best)
            g.nearest_rails.push_back(i);
        continue;
      }
    }
    if (g.numa >= 0)
      for (size_t i = 0; i < nics_.size(); ++i)
        if (nics_[i].numa == g.numa) g.nearest_rails.push_back(i);
  }
}

Status Topology::ApplyFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Status::InvalidArgument("topology file " + path + " cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  return ApplyJson(ss.str(), "topology file " + path);
}

Status Topology::ApplyJson(const std::string& text, const std::string& where) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::InvalidArgument(where + ": not a JSON object");
  auto index_of = [&](const std::string& domain) -> int {
    for (size_t i = 0; i < nics_.size(); ++i)
      if (nics_[i].domain == domain) return static_cast<int>(i);
    return -1;
  };
  auto known = [&] {
    std::string s;
    for (const Nic& n : nics_) s += (s.empty() ? "" : ", ") + n.domain;
    return s.empty() ? std::string("none") : s;
  };
  Topology next = *this;
  try {
    if (j.contains("nics")) {
      for (const auto& [domain, v] : j.at("nics").items()) {
        const int i = index_of(domain);
        if (i < 0) return Status::InvalidArgument(where + ": nic '" + domain + "' is not a rail (rails: " + known() + ")");
        if (v.contains("numa")) next.nics_[i].numa = v.at("numa").get<int>();
        if (v.contains("pci")) next.nics_[i].pci = v.at("pci").get<std::string>();
        if (v.contains("pci_path")) next.nics_[i].pci_path = v.at("pci_path").get<std::string>();
      }
    }
    bool explicit_rails = false;
    if (j.contains("gpus")) {
      next.gpus_.clear();
      for (const auto& v : j.at("gpus")) {
        Gpu g;
        g.index = v.at("index").get<int>();
        g.pci = v.value("pci", "");
        g.pci_path = v.value("pci_path", "");
        g.numa = v.value("numa", -1);
        if (v.contains("rails")) {
          explicit_rails = true;
          for (const auto& d : v.at("rails")) {
            const int i = index_of(d.get<std::string>());
            if (i < 0)
              return Status::InvalidArgument(text::Format("{}: gpu {} names rail '{}' (rails: {})", where, g.index,
                                                          d.get<std::string>(), known()));
            g.nearest_rails.push_back(static_cast<size_t>(i));
          }
        }
        next.gpus_.push_back(std::move(g));
      }
    }
    if (!explicit_rails) next.FindNearestRails();
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(where + ": " + e.what());
  }
  *this = std::move(next);
  return Status::OK();
}

void Topology::SetCudaOrdinals(const std::vector<std::string>& pci_by_ordinal) {
  std::vector<Gpu> seen;
  for (size_t n = 0; n < pci_by_ordinal.size(); ++n)
    for (const Gpu& g : gpus_)
      if (g.pci == pci_by_ordinal[n]) {
        seen.push_back(g);
        seen.back().index = static_cast<int>(n);
      }
  gpus_ = std::move(seen);
}

void Topology::RailsFor(const std::string& location, std::vector<size_t>* preferred,
                        std::vector<size_t>* fallback) const {
  preferred->clear();
  fallback->clear();
  const auto colon = location.find(':');
  std::vector<size_t> near;
  if (colon != std::string::npos) {
    const std::string kind = location.substr(0, colon);
    int index = -1;
    try {
      index = std::stoi(location.substr(colon + 1));
    } catch (...) {
    }
    if (kind == "cpu") {
      for (size_t i = 0; i < nics_.size(); ++i)
        if (nics_[i].numa == index) near.push_back(i);
    } else if (kind == "cuda") {
      for (const Gpu& g : gpus_)
        if (g.index == index) near = g.nearest_rails;
    }
  }
  for (size_t i = 0; i < nics_.size(); ++i) {
    const bool is_near = near.empty() || std::find(near.begin(), near.end(), i) != near.end();
    (is_near ? preferred : fallback)->push_back(i);
  }
}

std::string Topology::ToJson() const {
  nlohmann::json nics = nlohmann::json::array();
  for (const Nic& n : nics_)
    nics.push_back({{"domain", n.domain}, {"provider", n.provider}, {"device", n.device}, {"pci", n.pci},
                    {"numa", n.numa}});
  nlohmann::json gpus = nlohmann::json::array();
  for (const Gpu& g : gpus_) {
    nlohmann::json near = nlohmann::json::array();
    for (size_t i : g.nearest_rails) near.push_back(nics_[i].domain);
    gpus.push_back({{"index", g.index}, {"pci", g.pci}, {"numa", g.numa}, {"nearest_rails", near}});
  }
  return nlohmann::json({{"nics", nics}, {"gpus", gpus}}).dump(2);
}

std::string Topology::ToLocationMatrixJson() const {
  std::vector<std::string> locations;
  for (const Nic& n : nics_) {
    const std::string loc = text::Format("cpu:{}", n.numa);
    if (n.numa >= 0 && std::find(locations.begin(), locations.end(), loc) == locations.end())
      locations.push_back(loc);
  }
  if (locations.empty()) locations.push_back("cpu:0");
  std::sort(locations.begin(), locations.end());
  for (const Gpu& g : gpus_) locations.push_back(text::Format("cuda:{}", g.index));
  auto names = [&](const std::vector<size_t>& rails) {
    nlohmann::json out = nlohmann::json::array();
    for (size_t r : rails) out.push_back(nics_[r].device.empty() ? nics_[r].domain : nics_[r].device);
    return out;
  };
  nlohmann::json matrix = nlohmann::json::object();
  for (const std::string& loc : locations) {
    std::vector<size_t> near, rest;
    RailsFor(loc, &near, &rest);
    matrix[loc] = nlohmann::json::array({names(near), names(rest)});
  }
  return matrix.dump();
}

}  // namespace kvfabric::topology
