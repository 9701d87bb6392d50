#pragma once
// A rare node class last: which nodes a pod should leave alone because only they can host a
// typical shape that few nodes can host (docs/placement.md, "A rare node class last").
//
// FGD's measure (packing.h) weighs a typical shape by how many pods ask for it, not by how few
// nodes could host it, and once a node is partly used it sees nothing more to lose there. On a
// cluster where only a few nodes carry 8 GPUs and 8 RDMA NICs, small NIC-asking pods then keep
// those nodes partly used for good (GPU->NIC alignment and NVLink prefer their boards) and the
// whole-node pods that only they can run wait. The rule: for a pod that asks RDMA NICs, the
// typical NIC-asking shape that the fewest nodes' hardware can host is the rare shape, when
// fewer nodes can host it than can host the pod; the nodes whose hardware can host the rare
// shape then rank after every other node that fits (framework::NodeScore::reserved), so they
// serve such pods only when nothing else can, and drain for the rare shape.
//
// Hardware, not what is free now: a node's class does not change with its load. Pure functions.

#include <array>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "toposched/placement/packing.h"
#include "toposched/topology/node_topology.h"

namespace toposched::packing {

// What a node has, whatever is in use: GPUs per vendor (VendorIndex) and RDMA NICs.
struct NodeHardware {
  std::array<int, kGpuVendors> gpus{};
  int rdma_nics = 0;
  auto operator<=>(const NodeHardware&) const = default;
};
NodeHardware HardwareOf(const NodeTopology& topology);

// Whether `node`, empty, could run a pod of `shape` with GPUs of `vendor` (whole GPUs and RDMA
// NICs; a share needs one GPU).
bool HostsWhenEmpty(const NodeHardware& node, GpuVendor vendor, const Shape& shape);

// Each distinct hardware of a cluster with how many nodes have it.
using HardwareCensus = std::vector<std::pair<NodeHardware, int>>;
HardwareCensus CensusOf(std::span<const NodeHardware> nodes);

// The rare shape for a pod of shape `pod` and GPU vendor `vendor`: among `mix`'s shapes that
// ask RDMA NICs, the one the fewest nodes of `census` could host (at least one; ties: the shape
// asking more GPUs, then more NICs), when fewer nodes could host it than could host `pod`.
// nullopt when `pod` asks no RDMA NIC or no shape is rarer than the pod's own.
std::optional<Shape> RareShape(const ShapeMix& mix, const Shape& pod, GpuVendor vendor,
                               const HardwareCensus& census);

}  // namespace toposched::packing
