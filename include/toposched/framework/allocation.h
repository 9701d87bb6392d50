#pragma once
// Applying a placement to a node's allocation and taking it back, exactly. Reserve uses it to
// claim devices; scoring plugins use it to look at the node as it would be after the placement.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "toposched/common/status.h"
#include "toposched/placement/device_rules.h"
#include "toposched/placement/placement.h"
#include "toposched/placement/request.h"
#include "toposched/topology/node_topology.h"

namespace toposched::framework {

// What one placement adds to a NodeAllocation.
struct AllocationDelta {
  std::vector<int> exclusive_gpus;                    // whole-GPU requests
  std::vector<std::pair<int, GpuShareUsage>> shares;  // shared requests: GPU index, what it adds
  std::vector<int> nics;
  bool operator==(const AllocationDelta&) const = default;
};

AllocationDelta DeltaOf(const NodeTopology& topology, const PlacementRequest& request,
                        const Placement& placement);

// The vector lengths of a NodeAllocation, so that a revert can give back exactly the value it
// started from (NodeAllocation compares vectors, and "empty" is a valid "nothing allocated").
struct AllocationShape {
  std::size_t gpu_exclusive = 0, nic_used = 0, gpu_shares = 0;
  bool operator==(const AllocationShape&) const = default;
};
AllocationShape ShapeOf(const NodeAllocation& allocated);

// Adds `delta` to `allocated`, growing its vectors to the topology's sizes. All or nothing:
// errors (and leaves `allocated` unchanged) when a device index is out of range, a GPU to take
// whole is already exclusive or shared, a GPU to share is exclusive, or a NIC is already used.
// Share capacity (count, memory, cores) is the engine's check, not repeated here.
Status ApplyDelta(const NodeTopology& topology, const AllocationDelta& delta, NodeAllocation& allocated);

// Takes `delta` back out of `allocated` (the inverse of ApplyDelta), never below zero, then
// shrinks each vector back to its length in `before` when what lies past it is all default
// (something reserved in between keeps its entries). Apply then Revert gives back an equal value.
void RevertDelta(const AllocationDelta& delta, const AllocationShape& before, NodeAllocation& allocated);

}  // namespace toposched::framework
