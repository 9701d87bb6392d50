#include "toposched/topology/synthetic.h"

#include <algorithm>
#include <cstdio>

namespace toposched {

namespace {

struct Preset {
  const char* name;
  const char* description;
  SyntheticSpec (*make)();
};

SyntheticSpec HgxH100() {
  SyntheticSpec s;  // defaults are an HGX H100: 2 sockets, 4 PCIe switches, 2 GPU + 2 NIC each
  s.preset = "hgx-h100-8gpu";
  return s;
}

SyntheticSpec HgxA100() {
  SyntheticSpec s;
  s.preset = "hgx-a100-8gpu";
  s.nested_switches = true;  // DGX A100: GPUs and HCAs behind two switch levels, PXB between
  s.gpu_device_id = 0x20b2;
  s.gpu_model = "NVIDIA A100-SXM4-80GB";
  s.gpu_memory_mib = 81920;
  s.nvlinks_per_gpu = 12;
  s.nic_device_id = 0x101b;  // ConnectX-6
  s.nic_rate_mbps = 200000;
  return s;
}

SyntheticSpec Pcie4Gpu() {
  SyntheticSpec s;
  s.preset = "pcie-4gpu";
  s.switches_per_numa = 0;  // every GPU on its own root port
  s.gpus_per_switch = 2;    // per NUMA node
  s.nics_per_switch = 0;
  s.gpu_device_id = 0x20b5;
  s.gpu_model = "NVIDIA A100 80GB PCIe";
  s.gpu_memory_mib = 81920;
  s.nvlink = NvlinkShape::kPairs;  // NVLink bridges join GPU pairs
  s.nvlinks_per_gpu = 12;
  s.cores_per_numa = 32;
  return s;
}

SyntheticSpec CloudVm() {
  SyntheticSpec s;
  s.preset = "cloud-vm-8gpu";
  s.flat_vm = true;  // the hypervisor hides the PCIe tree: NUMA affinity is all that is left
  s.switches_per_numa = 0;
  s.gpus_per_switch = 4;
  s.nics_per_switch = 4;
  s.gpu_device_id = 0x20b2;
  s.gpu_model = "NVIDIA A100-SXM4-80GB";
  s.gpu_memory_mib = 81920;
  s.nvlinks_per_gpu = 12;
  s.nic_device_id = 0x101c;  // ConnectX-6 VF
  s.nic_rate_mbps = 200000;
  s.cores_per_numa = 48;
  return s;
}

SyntheticSpec Inference() {
  SyntheticSpec s;
  s.preset = "inference-4gpu";
  s.sockets = 1;
  s.switches_per_numa = 2;
  s.gpus_per_switch = 2;
  s.nics_per_switch = 0;
  s.ethernet_nics = 2;
  s.gpu_device_id = 0x26b9;
  s.gpu_model = "NVIDIA L40S";
  s.gpu_memory_mib = 46068;
  s.nvlink = NvlinkShape::kNone;
  s.nvlinks_per_gpu = 0;
  s.cores_per_numa = 64;
  return s;
}

constexpr Preset kPresets[] = {
    {"hgx-h100-8gpu", "HGX H100: 2 sockets, 4 PCIe switches with 2 GPUs + 2 CX-7 each, NVSwitch NV18",
     HgxH100},
    {"hgx-a100-8gpu", "HGX A100: like DGX A100, GPUs and HCAs behind two switch levels (PXB), NV12", HgxA100},
    {"pcie-4gpu", "4 PCIe A100 on root ports, NVLink bridge pairs, no RDMA NIC", Pcie4Gpu},
    {"cloud-vm-8gpu", "8-GPU cloud VM: flattened PCIe, NUMA affinity only, 8 VFs", CloudVm},
    {"inference-4gpu", "1 socket, 4 L40S behind 2 switches, Ethernet only (shared-GPU inference)", Inference},
};

class Builder {
 public:
  explicit Builder(const SyntheticSpec& spec) : spec_(spec) {}

  NodeTopology Build() {
    t_.source = TopologySource::kSynthetic;
    t_.source_detail = spec_.preset;
    t_.node_name = ToKubernetesName(spec_.preset.empty() ? "synthetic" : spec_.preset);
    int cpu = 0;
    for (int s = 0; s < spec_.sockets; ++s) {
      for (int k = 0; k < spec_.numa_per_socket; ++k) {
        NumaNode n;
        n.id = static_cast<int>(t_.numa_nodes.size());
        n.package = s;
        n.cpus = std::to_string(cpu) + "-" + std::to_string(cpu + spec_.cores_per_numa - 1);
        n.memory_bytes = spec_.memory_per_numa_bytes;
        cpu += spec_.cores_per_numa;
        t_.numa_nodes.push_back(n);
      }
    }
    for (const NumaNode& n : t_.numa_nodes) BuildNuma(n);
    for (int e = 0; e < spec_.ethernet_nics; ++e) AddEthernet(e);
    AddNvlinks();
    DeriveLinks(t_);
    return std::move(t_);
  }

 private:
  std::string NextBusId() {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%04x:%02x:00.0", next_bus_ / 256, next_bus_ % 256);
    ++next_bus_;
    return buf;
  }

  int AddPcie(PcieKind kind, int parent, bool is_switch, const NumaNode& numa, std::uint16_t vendor,
              std::uint16_t device) {
    PcieNode p;
    p.kind = kind;
    p.id = kind == PcieKind::kHostBridge ? "hostbridge:" + std::to_string(host_bridges_++) : NextBusId();
    p.parent = parent;
    p.is_switch = is_switch;
    p.numa = numa.id;
    p.package = numa.package;
    p.vendor_id = vendor;
    p.device_id = device;
    if (kind == PcieKind::kBridge) {
      p.link_gbps = 63.0;  // Gen5 x16
      p.link_width = 16;
    }
    t_.pcie.push_back(p);
    return static_cast<int>(t_.pcie.size()) - 1;
  }

  // Host bridge + root port; returns the root port.
  int RootPort(const NumaNode& numa) {
    const int hb = AddPcie(PcieKind::kHostBridge, -1, false, numa, 0, 0);
    return AddPcie(PcieKind::kBridge, hb, false, numa, 0x8086, 0x352a);
  }

  // A switch below `parent`; returns the upstream port.
  int Switch(int parent, const NumaNode& numa) {
    return AddPcie(PcieKind::kBridge, parent, true, numa, 0x1000, 0xc030);  // Broadcom PEX89000
  }

  int DownstreamPort(int upstream, const NumaNode& numa) {
    return AddPcie(PcieKind::kBridge, upstream, false, numa, 0x1000, 0xc030);
  }

  void AddGpu(int parent, const NumaNode& numa) {
    Gpu g;
    g.pci_bus_id = NextBusId();
    g.vendor = spec_.vendor;
    g.vendor_id = spec_.vendor == GpuVendor::kAmd ? 0x1002 : 0x10de;
    g.device_id = spec_.gpu_device_id;
    g.model = spec_.gpu_model;
    g.memory_mib = spec_.gpu_memory_mib;
    g.numa = numa.id;
    g.package = numa.package;
    g.cpus = numa.cpus;
    g.parent = parent;
    g.link_gbps = spec_.flat_vm ? 0 : 63.0;
    g.link_width = spec_.flat_vm ? 0 : 16;
    t_.gpus.push_back(g);
  }

  void AddRdmaNic(int parent, const NumaNode& numa) {
    Nic n;
    n.name = "mlx5_" + std::to_string(rdma_nics_);
    n.netdevs = {"ibp" + std::to_string(next_bus_) + "s0"};
    n.pci_bus_id = NextBusId();
    n.rdma = true;
    n.kind = NicKind::kInfiniband;
    n.vendor_id = 0x15b3;
    n.device_id = spec_.nic_device_id;
    n.link_rate_mbps = spec_.nic_rate_mbps;
    n.numa = numa.id;
    n.package = numa.package;
    n.cpus = numa.cpus;
    n.parent = parent;
    n.link_gbps = spec_.flat_vm ? 0 : 63.0;
    n.link_width = spec_.flat_vm ? 0 : 16;
    n.rail = "rail" + std::to_string(rdma_nics_);
    ++rdma_nics_;
    t_.nics.push_back(n);
  }

  void AddEthernet(int e) {
    const NumaNode& numa = t_.numa_nodes.front();
    Nic n;
    n.pci_bus_id = NextBusId();
    n.name = "eno" + std::to_string(e + 1);
    n.netdevs = {n.name};
    n.kind = NicKind::kEthernet;
    n.vendor_id = 0x8086;
    n.device_id = 0x1593;  // E810 25G
    n.link_rate_mbps = 25000;
    n.numa = numa.id;
    n.package = numa.package;
    n.cpus = numa.cpus;
    n.parent = spec_.flat_vm ? -1 : RootPort(numa);
    t_.nics.push_back(n);
  }

  void BuildNuma(const NumaNode& numa) {
    if (spec_.flat_vm) {
      for (int i = 0; i < spec_.gpus_per_switch; ++i) AddGpu(-1, numa);
      for (int i = 0; i < spec_.nics_per_switch; ++i) AddRdmaNic(-1, numa);
      return;
    }
    if (spec_.switches_per_numa == 0) {
      for (int i = 0; i < spec_.gpus_per_switch; ++i) AddGpu(RootPort(numa), numa);
      for (int i = 0; i < spec_.nics_per_switch; ++i) AddRdmaNic(RootPort(numa), numa);
      return;
    }
    for (int s = 0; s < spec_.switches_per_numa; ++s) {
      const int upstream = Switch(RootPort(numa), numa);
      if (spec_.nested_switches) {
        const int gpu_side = Switch(DownstreamPort(upstream, numa), numa);
        const int nic_side = Switch(DownstreamPort(upstream, numa), numa);
        for (int i = 0; i < spec_.gpus_per_switch; ++i) AddGpu(DownstreamPort(gpu_side, numa), numa);
        for (int i = 0; i < spec_.nics_per_switch; ++i) AddRdmaNic(DownstreamPort(nic_side, numa), numa);
      } else {
        for (int i = 0; i < spec_.gpus_per_switch; ++i) AddGpu(DownstreamPort(upstream, numa), numa);
        for (int i = 0; i < spec_.nics_per_switch; ++i) AddRdmaNic(DownstreamPort(upstream, numa), numa);
      }
    }
  }

  void AddNvlinks() {
    const int n = static_cast<int>(t_.gpus.size());
    const std::uint64_t per_link_mbps = 25000;
    auto link = [&](int a, int b, bool via_switch) {
      const std::uint64_t bw = per_link_mbps * static_cast<std::uint64_t>(spec_.nvlinks_per_gpu);
      t_.gpus[static_cast<std::size_t>(a)].peers.push_back(
          GpuPeer{b, Fabric::kNvlink, spec_.nvlinks_per_gpu, bw, via_switch});
    };
    if (spec_.nvlinks_per_gpu <= 0) return;
    for (int a = 0; a < n; ++a) {
      for (int b = 0; b < n; ++b) {
        if (a == b) continue;
        if (spec_.nvlink == NvlinkShape::kNvswitch) link(a, b, true);
        if (spec_.nvlink == NvlinkShape::kPairs && a / 2 == b / 2) link(a, b, false);
      }
    }
  }

  const SyntheticSpec& spec_;
  NodeTopology t_;
  int next_bus_ = 0x10;
  int host_bridges_ = 0;
  int rdma_nics_ = 0;
};

}  // namespace

std::vector<std::string> SyntheticPresetNames() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

std::string SyntheticPresetDescription(std::string_view name) {
  for (const Preset& p : kPresets) {
    if (name == p.name) return p.description;
  }
  return {};
}

Result<SyntheticSpec> SyntheticPreset(std::string_view name) {
  for (const Preset& p : kPresets) {
    if (name == p.name) return p.make();
  }
  std::string known;
  for (const Preset& p : kPresets) known += std::string(known.empty() ? "" : ", ") + p.name;
  return Error("unknown synthetic preset '" + std::string(name) + "' (known: " + known + ")");
}

Result<NodeTopology> GenerateSynthetic(const SyntheticSpec& spec) {
  auto in = [](int v, int lo, int hi) { return v >= lo && v <= hi; };
  if (!in(spec.sockets, 1, 8) || !in(spec.numa_per_socket, 1, 8) || !in(spec.switches_per_numa, 0, 16) ||
      !in(spec.gpus_per_switch, 0, 16) || !in(spec.nics_per_switch, 0, 16) || !in(spec.ethernet_nics, 0, 8) ||
      !in(spec.nvlinks_per_gpu, 0, 64) || !in(spec.cores_per_numa, 1, 1024)) {
    return Error(
        "synthetic spec out of range (sockets 1-8, NUMA per socket 1-8, switches per NUMA 0-16, "
        "devices per switch 0-16, Ethernet NICs 0-8, NVLinks 0-64, cores per NUMA 1-1024)");
  }
  const int groups = spec.sockets * spec.numa_per_socket * std::max(spec.switches_per_numa, 1);
  if (groups * spec.gpus_per_switch > 64 || groups * spec.nics_per_switch > 64) {
    return Error("synthetic spec has more than 64 GPUs or 64 RDMA NICs");
  }
  return Builder(spec).Build();
}

}  // namespace toposched
