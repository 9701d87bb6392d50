#pragma once
// The engine's reference (tests only, in the test library toposched_placement_reference): tries
// every GPU subset, NIC subset and GPU->NIC assignment. Exponential; it defines what "exact"
// means for PlaceOnNode (docs/placement.md), and engine_test.cc compares the two.

#include "toposched/placement/placement.h"

namespace toposched {

PlacementOutcome PlaceByBruteForce(const NodeTopology& topology, const NodeAllocation& allocated,
                                   const PlacementRequest& request, const EngineOptions& options = {},
                                   SharePacking share_packing = {});

}  // namespace toposched
