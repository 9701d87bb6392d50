#pragma once
// Reader for NCCL/RCCL topology XML (`<system version="N">`, the format of NCCL_TOPO_FILE and
// NCCL_TOPO_DUMP_FILE). Cloud GPU VMs ship such files because the VM hides the real PCIe tree.
// See docs/topology-model.md for how NCCL's elements map onto the model and what they cannot say.

#include <cstddef>
#include <string_view>

#include "toposched/common/status.h"
#include "toposched/topology/node_topology.h"

namespace toposched {

inline constexpr std::size_t kMaxNcclXmlBytes = 16u << 20;

Result<NodeTopology> ParseNcclXml(std::string_view content);

}  // namespace toposched
