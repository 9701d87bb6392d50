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
};

// Discovers the running machine: I/O objects kept, disallowed CPUs and NUMA nodes included.
Result<NodeTopology> DiscoverLive(const DiscoveryOptions& options);

// Imports an hwloc XML export (v1 or v2 format) held in memory.
Result<NodeTopology> ParseHwlocXml(std::string_view content);

// Reads a file (bounded in size), detects its format (hwloc XML, NCCL XML, NodeTopology JSON)
// and returns its topology. Errors name the file and the problem.
Result<NodeTopology> LoadTopologyFile(const std::string& path);

}  // namespace toposched
