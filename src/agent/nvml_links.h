#pragma once
// NVLink discovery through NVML, loaded at run time. Internal to toposched::discovery.
//
// Debian's hwloc is built without its NVML backend, so a live HGX node shows no NVLink at all.
// This reads what that backend would have read, straight from the driver's libnvidia-ml.so.1,
// opened with dlopen: toposched neither builds against NVIDIA headers nor links NVIDIA
// libraries, and a node without the driver simply has no NVML.

#include <string>

#include "toposched/common/status.h"
#include "toposched/topology/node_topology.h"

namespace toposched {

// Opens the NVML library at `library_path` (a file name for the loader's search path, or a
// path), matches NVML devices to t.gpus by PCI bus id and adds:
// - uuid, model and memory_mib where the GPU has none yet;
// - NVLink peers (Fabric::kNvlink): direct GPU-GPU links, and through NVSwitches a peer for
//   every pair of switch-attached GPUs (all NVSwitches of a node form one fabric), with links
//   = bonded NVLinks and bandwidth_mbps = links x per-link bandwidth (0 when NVML does not say
//   the NVLink version). An existing peer is replaced only by one with more links.
// Returns the number of GPUs of `t` that NVML knew. Does not call DeriveLinks: the caller does,
// once, after every source has been merged. Errors (library missing, a required symbol missing,
// nvmlInit failing) leave `t` untouched and mean "no NVML on this node", not a failed discovery.
Result<int> AddNvmlInfo(NodeTopology& t, const std::string& library_path);

}  // namespace toposched
