#pragma once
// What is already allocated on a node, as `toposched place --allocated ALLOC.json` reads it:
//
//   {"exclusiveGpus": [0, "0000:4e:00.0"],          GPU index or PCI bus id
//    "usedNics": ["mlx5_0", "0000:0c:00.0"],         NIC name or PCI bus id
//    "sharedGpus": [{"gpu": 3, "shares": 2, "memoryMiB": 16000, "coresPercent": 60}]}
//
// Every key is optional; unknown keys are errors (a misspelt key must not silently mean "free").

#include <string_view>

#include "toposched/common/status.h"
#include "toposched/placement/placement.h"

namespace toposched {

inline constexpr std::size_t kMaxAllocationJsonBytes = 1u << 20;

Result<NodeAllocation> DecodeAllocationJson(std::string_view text, const NodeTopology& topology);

}  // namespace toposched
