#pragma once
// Synthetic topologies for tests and simulation: parameterised machine shapes with named
// presets (HGX-style 8 GPU + 8 NIC, 4-GPU PCIe servers, flattened cloud VMs, shared-GPU
// inference boxes).

#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/status.h"
#include "toposched/topology/node_topology.h"

namespace toposched {

enum class NvlinkShape { kNone, kPairs, kNvswitch };

struct SyntheticSpec {
  std::string preset;  // name, for source_detail
  int sockets = 2;
  int numa_per_socket = 1;
  int switches_per_numa = 2;     // PCIe switches (each on its own host bridge); 0 = flat
  int gpus_per_switch = 2;       // when switches_per_numa == 0: GPUs per NUMA node
  int nics_per_switch = 2;       // RDMA NICs; when flat: per NUMA node
  bool nested_switches = false;  // GPUs and NICs behind a second switch level (PXB between them)
  bool flat_vm = false;          // no bridges at all: every device on the CPU side
  int ethernet_nics = 1;         // plain Ethernet ports on socket 0
  GpuVendor vendor = GpuVendor::kNvidia;
  std::uint16_t gpu_device_id = 0x2330;  // H100 SXM5
  std::string gpu_model = "NVIDIA H100 80GB HBM3";
  std::uint64_t gpu_memory_mib = 81559;
  NvlinkShape nvlink = NvlinkShape::kNvswitch;
  int nvlinks_per_gpu = 18;              // NV18 on H100 HGX
  std::uint16_t nic_device_id = 0x1021;  // ConnectX-7
  std::uint64_t nic_rate_mbps = 400000;
  int cores_per_numa = 28;
  std::uint64_t memory_per_numa_bytes = 512ull << 30;
};

std::vector<std::string> SyntheticPresetNames();
std::string SyntheticPresetDescription(std::string_view name);  // empty if unknown
Result<SyntheticSpec> SyntheticPreset(std::string_view name);
// Rejects specs outside sane bounds (negative counts, > 64 GPUs, ...).
Result<NodeTopology> GenerateSynthetic(const SyntheticSpec& spec);

}  // namespace toposched
