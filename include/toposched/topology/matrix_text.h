#pragma once
// The `nvidia-smi topo -m` style matrix: GPU0.., NIC0.. (RDMA NICs), CPU and NUMA affinity,
// the class legend and the NIC legend.

#include <string>

#include "toposched/topology/node_topology.h"

namespace toposched {

std::string RenderTopologyMatrix(const NodeTopology& topology);

// The one line printed for a machine or file without GPUs.
std::string NoGpuStatement(const NodeTopology& topology);

}  // namespace toposched
