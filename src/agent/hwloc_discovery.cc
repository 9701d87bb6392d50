// hwloc -> NodeTopology. The only translation unit that includes hwloc.
//
// Pitfalls handled here (see ../shared/reference/hwloc-notes.md):
// - I/O objects are dropped unless the I/O type filter is set, also on XML import;
// - hwloc_get_common_ancestor_obj() crashes on I/O objects in 2.9: we never call it, the tree is
//   flattened into NodeTopology::pcie and DeriveLinks walks parent indices;
// - Debian's hwloc has no NVML/CUDA/RSMI backends: GPUs are found by PCI class and vendor,
//   NVLink/xGMI from distance matrices that an XML export carries, and on a live node NVLink
//   from NVML itself (nvml_links.cc, dlopen);
// - v1 files keep GPU-memory NUMA nodes as plain NUMA nodes: only NUMA nodes with CPUs count.
//
// This file is the hwloc walk (Translator), the NVML additions and DiscoverLive; ParseHwlocXml,
// which runs ImportHwlocXml in a worker process, is in hwloc_import_worker.cc.
#include <fcntl.h>
#include <hwloc.h>
#include <hwloc/distances.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include "hwloc_import.h"
#include "nvml_links.h"
#include "toposched/agent/discovery.h"
#include "toposched/topology/gpu_memory.h"
#include "toposched/topology/json_codec.h"

namespace toposched {
namespace {

// An enum field of an hwloc object as the integer hwloc stored. hwloc's XML importer copies
// numbers from the file into enum fields unchecked (bridge_type="5-1", osdev_type="9"), and
// loading a value outside an enum's range is undefined behaviour in C++ (found by
// fuzz/hwloc_xml_fuzz.cc under UBSan): compare the stored integer instead.
template <class E>
std::underlying_type_t<E> Raw(const E& field) {
  std::underlying_type_t<E> v;
  std::memcpy(&v, &field, sizeof v);
  return v;
}
template <class E>
bool Is(const E& field, E value) {
  return Raw(field) == static_cast<std::underlying_type_t<E>>(value);
}

// A PCI link speed (GB/s) as hwloc read it from the file, or 0 (unknown) when no link has it:
// the NodeTopology codec refuses speeds over 1e6 GB/s (its fingerprint's fixed point), and a
// fuzzed file gave 1.7e25 (fuzz/corpus/hwloc_xml/regress-link-speed-out-of-range.xml).
double LinkSpeed(float gbps) {
  return std::isfinite(gbps) && gbps > 0 && gbps <= 1e6 ? gbps : 0;
}

// hwloc declares its attribute structs inside a union: C++ needs the qualified names.
using PciAttr = hwloc_obj_attr_u::hwloc_pcidev_attr_s;
using BridgeAttr = hwloc_obj_attr_u::hwloc_bridge_attr_s;

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;

std::string BitmapList(hwloc_const_bitmap_t set) {
  if (set == nullptr || hwloc_bitmap_iszero(set)) return {};
  char* text = nullptr;
  if (hwloc_bitmap_list_asprintf(&text, set) < 0 || text == nullptr) return {};
  std::string out(text);
  std::free(text);
  return out;
}

std::string BusId(const PciAttr& p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", static_cast<unsigned>(p.domain), p.bus, p.dev, p.func);
  return buf;
}

std::string Info(hwloc_obj_t obj, const char* name) {
  const char* v = hwloc_obj_get_info_by_name(obj, name);
  return v != nullptr ? std::string(v) : std::string();
}

bool HasComputeOsDevice(hwloc_obj_t pci) {
  for (hwloc_obj_t c = pci->io_first_child; c != nullptr; c = c->next_sibling) {
    if (c->type != HWLOC_OBJ_OS_DEVICE || c->name == nullptr) continue;
    const std::string_view name = c->name;
    if (name.substr(0, 6) == "opencl" || name.substr(0, 4) == "rsmi" || name.substr(0, 4) == "cuda")
      return true;
  }
  return false;
}

// GPUs by PCI class and vendor, never by OS device names (Debian's hwloc has no NVML/RSMI).
// NVIDIA: 3D (0x0302) or VGA (0x0300) class; NVSwitches are 0x0680 and excluded. AMD: Instinct
// parts are 0x1200 (processing accelerator) or 0x0380; an AMD VGA-class device counts only with
// a compute OS device, because servers carry ATI ES1000-style BMC VGAs (1002:515e) of that class.
bool IsGpu(hwloc_obj_t pci) {
  const PciAttr& p = pci->attr->pcidev;
  const unsigned cls = p.class_id;
  if (p.vendor_id == 0x10de) return cls == 0x0302 || cls == 0x0300;
  if (p.vendor_id == 0x1002)
    return cls == 0x1200 || cls == 0x0380 || (cls == 0x0300 && HasComputeOsDevice(pci));
  return false;
}

// Network controllers (0x02xx) and InfiniBand controllers of the old serial-bus class 0x0c06
// (ConnectX-2 era mlx4 HCAs).
bool IsNetworkClass(const PciAttr& p) {
  return (p.class_id >> 8) == 0x02 || p.class_id == 0x0c06;
}

bool IsNvSwitch(hwloc_obj_t o) {
  if (o->type != HWLOC_OBJ_PCI_DEVICE) return false;
  if (o->subtype != nullptr && std::string_view(o->subtype) == "NVSwitch") return true;
  return o->attr->pcidev.vendor_id == 0x10de && o->attr->pcidev.class_id == 0x0680;
}

// What hwloc's translation needs besides the topology handle.
class Translator {
 public:
  Translator(hwloc_topology_t topo, const DiscoveryOptions* live) : topo_(topo), live_(live) {}

  NodeTopology Run(TopologySource source) {
    NodeTopology t;
    t.source = source;
    out_ = &t;
    CollectNumaNodes();
    for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_pcidev(topo_, o)) != nullptr;) {
      const PciAttr& p = o->attr->pcidev;
      if (IsGpu(o))
        AddGpu(o);
      else if (IsNetworkClass(p))
        AddNic(o);
    }
    AddNonPciNics();
    for (const char* name : {"NVLinkBandwidth", "XGMIBandwidth"}) AddPeers(name);
    DeriveLinks(t);
    return t;
  }

 private:
  struct Locality {
    int numa = -1;
    int package = -1;
    std::string cpus;
  };

  void CollectNumaNodes() {
    for (hwloc_obj_t n = nullptr;
         (n = hwloc_get_next_obj_by_type(topo_, HWLOC_OBJ_NUMANODE, n)) != nullptr;) {
      // GPU memory exposed as NUMA (v1 files, POWER9) has no CPUs: not a CPU locality.
      if (n->cpuset == nullptr || hwloc_bitmap_iszero(n->cpuset)) continue;
      NumaNode node;
      node.id = static_cast<int>(n->os_index);
      hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo_, HWLOC_OBJ_PACKAGE, n);
      if (pkg == nullptr) {
        // In hwloc 2.x a NUMA node hangs off its parent; a package below that parent with the
        // same cpuset is its package (e.g. one NUMA node per package, attached to the Machine).
        pkg = hwloc_get_next_obj_covering_cpuset_by_type(topo_, n->cpuset, HWLOC_OBJ_PACKAGE, nullptr);
      }
      node.package = pkg != nullptr ? static_cast<int>(pkg->os_index) : -1;
      node.cpus = BitmapList(n->cpuset);
      node.memory_bytes = n->attr != nullptr ? n->attr->numanode.local_memory : 0;
      cpu_numa_.push_back(n);
      out_->numa_nodes.push_back(std::move(node));
    }
    std::sort(out_->numa_nodes.begin(), out_->numa_nodes.end(),
              [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
  }

  Locality LocalityOf(hwloc_obj_t io) {
    Locality loc;
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo_, io);
    if (anc == nullptr) return loc;
    loc.cpus = BitmapList(anc->cpuset);
    // The local NUMA node: the single CPU-bearing NUMA node in the ancestor's nodeset.
    int found = -1, count = 0;
    for (hwloc_obj_t n : cpu_numa_) {
      if (anc->nodeset != nullptr && hwloc_bitmap_isset(anc->nodeset, n->os_index)) {
        found = static_cast<int>(n->os_index);
        ++count;
      }
    }
    if (count == 1) loc.numa = found;
    hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo_, HWLOC_OBJ_PACKAGE, anc);
    if (pkg == nullptr && anc->type == HWLOC_OBJ_PACKAGE) pkg = anc;
    if (pkg != nullptr) {
      loc.package = static_cast<int>(pkg->os_index);
    } else if (loc.numa >= 0) {
      for (const NumaNode& n : out_->numa_nodes) {
        if (n.id == loc.numa) loc.package = n.package;
      }
    }
    return loc;
  }

  // Returns the pcie index of the bridge directly above `io`, adding the bridge chain on first
  // sight (root first, so parents precede children).
  int ParentBridge(hwloc_obj_t io) {
    hwloc_obj_t parent = io->parent;
    if (parent == nullptr || parent->type != HWLOC_OBJ_BRIDGE) return -1;
    return BridgeIndex(parent);
  }

  int BridgeIndex(hwloc_obj_t bridge) {
    if (auto it = bridge_index_.find(bridge); it != bridge_index_.end()) return it->second;
    const int parent = (bridge->parent != nullptr && bridge->parent->type == HWLOC_OBJ_BRIDGE)
                           ? BridgeIndex(bridge->parent)
                           : -1;
    const BridgeAttr& b = bridge->attr->bridge;
    PcieNode node;
    node.parent = parent;
    if (Is(b.upstream_type, HWLOC_OBJ_BRIDGE_HOST)) {
      node.kind = PcieKind::kHostBridge;
      char buf[48];
      std::snprintf(buf, sizeof buf, "hostbridge:%04x:%02x", static_cast<unsigned>(b.downstream.pci.domain),
                    b.downstream.pci.secondary_bus);
      node.id = buf;
      // Host bridge ids are derived; keep them unique whatever the export says.
      for (int suffix = 1; used_ids_.count(node.id) != 0; ++suffix)
        node.id = std::string(buf) + "-" + std::to_string(suffix);
    } else {
      node.kind = PcieKind::kBridge;
      node.id = BusId(b.upstream.pci);
      node.vendor_id = b.upstream.pci.vendor_id;
      node.device_id = b.upstream.pci.device_id;
      node.link_gbps = LinkSpeed(b.upstream.pci.linkspeed);
      // A switch upstream port sits at even bridge depth >= 2 (host bridge 0, root port 1) and
      // has downstream-port bridges below it.
      bool has_bridge_child = false;
      for (hwloc_obj_t c = bridge->io_first_child; c != nullptr; c = c->next_sibling) {
        if (c->type == HWLOC_OBJ_BRIDGE) has_bridge_child = true;
      }
      node.is_switch = b.depth >= 2 && b.depth % 2 == 0 && has_bridge_child;
    }
    used_ids_.insert(node.id);
    const Locality loc = LocalityOf(bridge);
    node.numa = loc.numa;
    node.package = loc.package;
    out_->pcie.push_back(std::move(node));
    const int index = static_cast<int>(out_->pcie.size()) - 1;
    bridge_index_[bridge] = index;
    return index;
  }

  void AddGpu(hwloc_obj_t pci) {
    const PciAttr& p = pci->attr->pcidev;
    Gpu g;
    g.pci_bus_id = BusId(p);
    g.vendor = p.vendor_id == 0x1002 ? GpuVendor::kAmd : GpuVendor::kNvidia;
    g.vendor_id = p.vendor_id;
    g.device_id = p.device_id;
    g.link_gbps = LinkSpeed(p.linkspeed);
    for (hwloc_obj_t c = pci->io_first_child; c != nullptr; c = c->next_sibling) {
      if (c->type != HWLOC_OBJ_OS_DEVICE) continue;
      if (g.model.empty()) g.model = Info(c, "GPUModel");
      if (g.uuid.empty()) g.uuid = Info(c, "NVIDIAUUID");
      if (g.uuid.empty()) g.uuid = Info(c, "AMDUUID");
      for (const char* key : {"CUDAGlobalMemorySize", "RSMIVRAMSize", "OpenCLGlobalMemorySize"}) {
        const std::string kib = Info(c, key);
        if (g.memory_mib == 0 && !kib.empty()) g.memory_mib = std::strtoull(kib.c_str(), nullptr, 10) / 1024;
      }
    }
    if (g.model.empty()) g.model = Info(pci, "PCIDevice");
    const Locality loc = LocalityOf(pci);
    g.numa = loc.numa;
    g.package = loc.package;
    g.cpus = loc.cpus;
    g.parent = ParentBridge(pci);
    gpu_by_obj_[pci] = static_cast<int>(out_->gpus.size());
    out_->gpus.push_back(std::move(g));
  }

  static NicKind KindOf(const Nic& n, unsigned class_id) {
    const std::string& name = n.name;
    if (n.vendor_id == 0x1d0f || name.starts_with("rdmap") || name.starts_with("efa")) return NicKind::kEfa;
    if (name.starts_with("hfi1")) return NicKind::kOmniPath;
    if (n.vendor_id == 0x17db || name.starts_with("hsi") || name.starts_with("cxi"))
      return NicKind::kSlingshot;
    if (!n.rdma) return NicKind::kEthernet;
    if (class_id == 0x0207 || class_id == 0x0c06) return NicKind::kInfiniband;
    for (const std::string& d : n.netdevs) {
      if (d.starts_with("ib")) return NicKind::kInfiniband;
    }
    return NicKind::kRoce;
  }

  // Name of the RDMA device of a PCI function from sysfs (live discovery only).
  std::string SysfsRdmaName(const std::string& bus_id) const {
    if (live_ == nullptr) return {};
    std::error_code ec;
    const std::filesystem::path dir =
        std::filesystem::path(live_->sysfs_root) / "bus/pci/devices" / bus_id / "infiniband";
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      return entry.path().filename().string();
    }
    return {};
  }

  void AddNic(hwloc_obj_t pci) {
    const PciAttr& p = pci->attr->pcidev;
    Nic n;
    n.pci_bus_id = BusId(p);
    n.vendor_id = p.vendor_id;
    n.device_id = p.device_id;
    n.link_gbps = LinkSpeed(p.linkspeed);
    std::string fabric_name;
    bool usnic = false;
    for (hwloc_obj_t c = pci->io_first_child; c != nullptr; c = c->next_sibling) {
      if (c->type != HWLOC_OBJ_OS_DEVICE || c->name == nullptr) continue;
      if (Is(c->attr->osdev.type, HWLOC_OBJ_OSDEV_OPENFABRICS) && fabric_name.empty()) {
        fabric_name = c->name;
        // Cisco usNIC is OS-bypass UDP, not RDMA: no GPUDirect, NCCL does not use it.
        usnic = fabric_name.starts_with("usnic");
      } else if (Is(c->attr->osdev.type, HWLOC_OBJ_OSDEV_NETWORK)) {
        n.netdevs.emplace_back(c->name);
      }
    }
    if (fabric_name.empty()) fabric_name = SysfsRdmaName(n.pci_bus_id);
    // SR-IOV virtual functions and unbound functions have no OS device: nothing can use them.
    if (fabric_name.empty() && n.netdevs.empty()) return;
    n.rdma = !fabric_name.empty() && !usnic;
    n.name = !fabric_name.empty() ? fabric_name : n.netdevs.front();
    n.kind = KindOf(n, p.class_id);
    const Locality loc = LocalityOf(pci);
    n.numa = loc.numa;
    n.package = loc.package;
    n.cpus = loc.cpus;
    n.parent = ParentBridge(pci);
    out_->nics.push_back(std::move(n));
  }

  // Network OS devices without a PCI parent (hwloc v1 files, some VMs): kept as plain NICs so the
  // JSON lists them; they have no PCI path.
  void AddNonPciNics() {
    for (hwloc_obj_t d = nullptr; (d = hwloc_get_next_osdev(topo_, d)) != nullptr;) {
      if (d->parent == nullptr || d->parent->type == HWLOC_OBJ_PCI_DEVICE || d->name == nullptr) continue;
      const bool network = Is(d->attr->osdev.type, HWLOC_OBJ_OSDEV_NETWORK);
      const bool fabric = Is(d->attr->osdev.type, HWLOC_OBJ_OSDEV_OPENFABRICS);
      if (!network && !fabric) continue;
      const std::string name = d->name;
      if (name == "lo") continue;
      Nic n;
      n.name = name;
      n.rdma = fabric && !name.starts_with("usnic");
      if (network) n.netdevs.push_back(name);
      n.kind = KindOf(n, 0);
      const Locality loc = LocalityOf(d);
      n.numa = loc.numa;
      n.package = loc.package;
      n.cpus = loc.cpus;
      out_->nics.push_back(std::move(n));
    }
  }

  // GPU index of a distance-matrix object: a GPU OS device (nvml*, rsmi*) or its PCI device.
  int GpuOf(hwloc_obj_t o) const {
    for (hwloc_obj_t x = o; x != nullptr; x = x->parent) {
      if (x->type == HWLOC_OBJ_PCI_DEVICE) {
        auto it = gpu_by_obj_.find(x);
        return it != gpu_by_obj_.end() ? it->second : -1;
      }
      if (x->type != HWLOC_OBJ_OS_DEVICE) return -1;
    }
    return -1;
  }

  // Bandwidth of one NVLink as the exporting hwloc encoded it (MB/s): 20000 for NVLink 1
  // (Pascal), 25000 otherwise. hwloc 2.9 wrote 50000 for NVLink 3/4 links; such files give
  // half the link count, which docs/topology-model.md states as a limit.
  std::uint64_t NvlinkUnit() const {
    for (const Gpu& g : out_->gpus) {
      if (g.model.find("P100") != std::string::npos) return 20000;
    }
    return 25000;
  }

  void AddPeers(const char* matrix_name) {
    unsigned nr = 1;
    hwloc_distances_s* dist = nullptr;
    if (hwloc_distances_get_by_name(topo_, matrix_name, &nr, &dist, 0) != 0 || nr == 0 || dist == nullptr)
      return;
    const bool xgmi = std::string_view(matrix_name) == "XGMIBandwidth";
    const unsigned n = dist->nbobjs;
    std::vector<int> gpu(n, -1);
    std::vector<bool> nvswitch(n, false);
    for (unsigned i = 0; i < n; ++i) {
      gpu[i] = GpuOf(dist->objs[i]);
      nvswitch[i] = gpu[i] < 0 && IsNvSwitch(dist->objs[i]);
    }
    const std::uint64_t unit = xgmi ? 0 : NvlinkUnit();
    // Direct links, keyed by GPU pair (several OS devices of one GPU, e.g. MI300A partitions,
    // collapse onto one pair).
    std::map<std::pair<int, int>, std::uint64_t> direct;
    // NVML reports GPU->NVSwitch links only, never switch<->switch trunks, yet all NVSwitches
    // of a node form one fabric (DGX-2 joins its two baseboards through them; nvidia-smi shows
    // NV6 between all 16 GPUs). So every pair of switch-attached GPUs is connected, at the
    // smaller of the two GPUs' switch bandwidths.
    std::vector<std::uint64_t> switch_bw(out_->gpus.size(), 0);
    for (unsigned i = 0; i < n; ++i) {
      for (unsigned j = 0; j < n; ++j) {
        if (i == j) continue;
        const std::uint64_t v = dist->values[i * n + j];
        if (v == 0) continue;
        if (gpu[i] >= 0 && gpu[j] >= 0 && gpu[i] != gpu[j]) {
          auto key = std::minmax(gpu[i], gpu[j]);
          direct[key] = std::max(direct[key], v);
        } else if (gpu[i] >= 0 && nvswitch[j]) {
          switch_bw[static_cast<std::size_t>(gpu[i])] += v;
        }
      }
    }
    auto links_for = [&](std::uint64_t bw) {
      return xgmi ? 0 : static_cast<int>(std::max<std::uint64_t>(1, (bw + unit / 2) / unit));
    };
    auto add = [&](int a, int b, std::uint64_t bw, bool via_switch) {
      for (const std::pair<int, int>& ends : {std::pair{a, b}, std::pair{b, a}}) {
        // Named copies, not a structured binding: clang before 16 cannot capture one in a lambda.
        const int x = ends.first, y = ends.second;
        auto& peers = out_->gpus[static_cast<std::size_t>(x)].peers;
        auto it = std::find_if(peers.begin(), peers.end(), [&](const GpuPeer& p) { return p.gpu == y; });
        GpuPeer peer{y, xgmi ? Fabric::kXgmi : Fabric::kNvlink, links_for(bw), bw, via_switch};
        if (it == peers.end())
          peers.push_back(peer);
        else if (bw > it->bandwidth_mbps)
          *it = peer;
      }
    };
    for (const auto& [pair, bw] : direct) add(pair.first, pair.second, bw, false);
    const int ngpus = static_cast<int>(out_->gpus.size());
    for (int a = 0; a < ngpus; ++a) {
      for (int b = a + 1; b < ngpus; ++b) {
        const std::uint64_t ba = switch_bw[static_cast<std::size_t>(a)];
        const std::uint64_t bb = switch_bw[static_cast<std::size_t>(b)];
        if (ba != 0 && bb != 0) add(a, b, std::min(ba, bb), true);
      }
    }
    hwloc_distances_release(topo_, dist);
  }

  hwloc_topology_t topo_;
  const DiscoveryOptions* live_;
  NodeTopology* out_ = nullptr;
  std::vector<hwloc_obj_t> cpu_numa_;
  std::unordered_map<hwloc_obj_t, int> bridge_index_;
  std::unordered_map<hwloc_obj_t, int> gpu_by_obj_;
  std::set<std::string> used_ids_;
};

Result<TopologyPtr> NewTopology() {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return Error("hwloc_topology_init failed");
  TopologyPtr topo(raw);
  // Keep every I/O object: the default filter drops them all, bridges included.
  hwloc_topology_set_io_types_filter(topo.get(), HWLOC_TYPE_FILTER_KEEP_ALL);
  // In a pod with a restricted cpuset, keep the whole machine.
  hwloc_topology_set_flags(topo.get(), HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  return topo;
}

// NVLink, UUIDs and memory sizes from NVML, which Debian's hwloc does not read. Best effort: a
// node without the NVIDIA driver, or with a broken one, keeps what hwloc found.
void AddNvml(NodeTopology& t, const DiscoveryOptions& options) {
  if (options.nvml_note != nullptr) options.nvml_note->clear();
  std::string library = options.nvml_library;
  if (library == DiscoveryOptions{}.nvml_library) {
    if (const char* env = std::getenv("TOPOSCHED_NVML_LIBRARY"); env != nullptr) library = env;
  }
  if (library == "none") library.clear();
  const bool has_nvidia =
      std::any_of(t.gpus.begin(), t.gpus.end(), [](const Gpu& g) { return g.vendor == GpuVendor::kNvidia; });
  if (library.empty() || !has_nvidia) return;
  const Result<int> added = AddNvmlInfo(t, library);
  std::string note;
  if (added.ok()) {
    note = "nvml: " + std::to_string(*added) + " GPUs";
    if (*added > 0) DeriveLinks(t);  // idempotent: recomputes the matrices with the new peers
    DropUnusableGpuUuids(t);         // NVML's UUIDs too (a GPU hidden twice, a virtual GPU)
  } else {
    note = "nvml: " + added.error().message();
  }
  if (options.nvml_note != nullptr) *options.nvml_note = note;
}

}  // namespace

namespace agent_internal {

Result<NodeTopology> ImportHwlocXml(std::string_view content) {
  TOPOSCHED_ASSIGN_OR_RETURN(TopologyPtr topo, NewTopology());
  // hwloc's XML importers expect the buffer to be NUL-terminated and `size` to include it.
  std::string buffer(content);
  if (hwloc_topology_set_xmlbuffer(topo.get(), buffer.c_str(), static_cast<int>(buffer.size() + 1)) != 0) {
    return Error("hwloc refused the XML buffer");
  }
  if (hwloc_topology_load(topo.get()) != 0) {
    return Error(
        "hwloc could not import this XML (malformed, truncated, or not hwloc v1/v2 format; "
        "set HWLOC_XML_VERBOSE=1 for hwloc's own diagnostics)");
  }
  Translator translator(topo.get(), nullptr);
  NodeTopology t = translator.Run(TopologySource::kHwlocXml);
  // hwloc imports an XML that gives two NUMA nodes one os_index; the NodeTopology codec refuses
  // such a document, so the agent would publish an object no extender can read (found by
  // fuzz/hwloc_xml_fuzz.cc). numa_nodes is sorted by id.
  for (std::size_t i = 1; i < t.numa_nodes.size(); ++i) {
    if (t.numa_nodes[i].id == t.numa_nodes[i - 1].id) {
      return Error("hwloc XML gives two NUMA nodes the os_index " + std::to_string(t.numa_nodes[i].id) +
                   " (an inconsistent export)");
    }
  }
  if (hwloc_obj_t root = hwloc_get_root_obj(topo.get()); root != nullptr) {
    const std::string host = Info(root, "HostName");
    if (!host.empty()) t.node_name = ToKubernetesName(host);
  }
  // What the agent publishes must decode. hwloc imports exports the NodeTopology codec refuses
  // (two NUMA nodes with one os_index above; two PCI devices with one bus id), and an object no
  // extender can read is worse than an error here (both found by fuzz/hwloc_xml_fuzz.cc).
  // The node's name is the caller's to give (--node-name, the file's name): a stand-in here.
  NodeTopology named = t;
  if (named.node_name.empty()) named.node_name = "node";
  if (Result<NodeTopology> back = DecodeTopologyJson(EncodeTopologyJson(named)); !back.ok()) {
    return Error("hwloc XML gives a topology toposched cannot represent (an inconsistent export): " +
                 back.error().message());
  }
  return t;
}

}  // namespace agent_internal

Result<NodeTopology> DiscoverLive(const DiscoveryOptions& options) {
  // The gl/opencl plugins would probe X servers and OpenCL runtimes: not our business.
  setenv("HWLOC_COMPONENTS", "-gl,-opencl", /*overwrite=*/0);
  TOPOSCHED_ASSIGN_OR_RETURN(TopologyPtr topo, NewTopology());
  if (hwloc_topology_load(topo.get()) != 0) {
    return Error(std::string("hwloc could not discover this machine: ") + std::strerror(errno));
  }
  Translator translator(topo.get(), &options);
  NodeTopology t = translator.Run(TopologySource::kHwloc);
  AddNvml(t, options);
  FillKnownGpuMemory(t);  // without NVML: estimated from the model or PCI id (gpu_memory.h)
  t.node_name = options.node_name;
  if (const char* env = std::getenv("NODE_NAME"); t.node_name.empty() && env != nullptr) {
    t.node_name = env;  // the DaemonSet passes spec.nodeName through the downward API
  }
  if (t.node_name.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0) t.node_name = ToKubernetesName(host);
  }
  t.source_detail = t.node_name;
  return t;
}

}  // namespace toposched
