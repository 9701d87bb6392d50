#pragma once
// NodeTopology <-> JSON (docs/topology-model.md). The encoding is a Kubernetes-style object:
//   {"apiVersion":"toposched.io/v1alpha1","kind":"NodeTopology","metadata":{"name":...},
//    "status":{"schemaVersion":1, ...}}
// Decoding is strict about what it reads (types, ranges, references, matrix shapes, link
// tokens) and names the JSON path of the first problem; unknown keys are ignored so an older
// reader accepts a newer writer's additive fields of the same schemaVersion.

#include <cstddef>
#include <string>
#include <string_view>

#include "toposched/common/status.h"
#include "toposched/topology/node_topology.h"

namespace toposched {

inline constexpr std::size_t kMaxTopologyJsonBytes = 16u << 20;  // 16 MiB
inline constexpr int kMaxDevicesPerKind = 4096;                  // GPUs, NICs, PCIe nodes, NUMA nodes each

// indent < 0 gives compact JSON.
std::string EncodeTopologyJson(const NodeTopology& topology, int indent = 2);
Result<NodeTopology> DecodeTopologyJson(std::string_view text);

}  // namespace toposched
