#pragma once
// Topology discovery: the live machine through hwloc, an hwloc XML export, or any file
// `toposched topo --input` reads. The only component that links hwloc.

#include <cstddef>
#include <string>
#include <string_view>

#include "toposched/common/status.h"
#include "toposched/topology/node_topology.h"

namespace toposched {

inline constexpr std::size_t kMaxTopologyFileBytes = 64u << 20;  // 64 MiB

struct DiscoveryOptions {
  // Where the host's sysfs is mounted (a pod mounts the host /sys read-only elsewhere); used to
  // confirm RDMA capability (`<sysfs>/bus/pci/devices/<bdf>/infiniband`) where hwloc has no
  // OpenFabrics object. hwloc itself honours HWLOC_FSROOT.
  std::string sysfs_root = "/sys";
  std::string node_name;  // empty: the host name
  // NVML library read for NVLink, GPU UUIDs and memory (Debian's hwloc has no NVML backend),
  // opened with dlopen only when the machine has NVIDIA GPUs. Empty disables it. While this is
  // the default, the environment variable TOPOSCHED_NVML_LIBRARY overrides it (empty or "none"
  // disables). A node without the library is not an error: the GPUs keep their PCIe classes.
  std::string nvml_library = "libnvidia-ml.so.1";
  // When set, receives what NVML contributed: "nvml: N GPUs", or why it contributed nothing
  // ("nvml: cannot load ..."); left empty when NVML was not tried (no NVIDIA GPU, disabled).
  std::string* nvml_note = nullptr;
};

// Discovers the running machine: I/O objects kept, disallowed CPUs and NUMA nodes included.
Result<NodeTopology> DiscoverLive(const DiscoveryOptions& options);

// Imports an hwloc XML export (v1 or v2 format) held in memory.
Result<NodeTopology> ParseHwlocXml(std::string_view content);

// Reads a file (bounded in size), detects its format (hwloc XML, NCCL XML, NodeTopology JSON)
// and returns its topology. Errors name the file and the problem.
Result<NodeTopology> LoadTopologyFile(const std::string& path);

}  // namespace toposched
