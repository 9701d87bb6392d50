#pragma once
// Card memory for sources that record none (NCCL/RCCL topology files; hwloc exports without
// NVML or the GPU's own attributes). Shared-GPU (HAMi) requests that name memory need it; NVML,
// HAMi's registration and GPU Feature Discovery's `nvidia.com/gpu.memory` label give the exact
// figure and win over this estimate (docs/topology-model.md, "Card memory").
//
// The nominal size comes from the model's name when it states one ("Tesla V100-SXM3-32GB-H"),
// else from the PCI device id of a data-center card whose id fixes its size (pci.ids' names, or
// the vendor's data sheet where the name states none). The usable size is estimated below it: 15/16
// of the nominal size less 64 MiB, because the driver reserves part of the card (ECC on GDDR
// cards reserves 1/16: a T4 reports 15,360 MiB of 16 GiB). Estimating low only costs packing;
// estimating high would let shares over-commit a card.

#include <cstdint>
#include <string_view>

#include "toposched/topology/node_topology.h"

namespace toposched {

// The nominal memory in GiB of a card, from its model name or PCI ids; 0 when unknown.
std::uint64_t NominalGpuMemoryGib(std::uint16_t vendor_id, std::uint16_t device_id, std::string_view model);

// The usable memory estimated from a nominal size (see above); 0 for 0.
std::uint64_t EstimatedUsableMib(std::uint64_t nominal_gib);

// Whether the card's figure is this estimate (not measured): exact sources (HAMi's registration,
// GPU Feature Discovery's label) then replace it. A measured figure equal to the estimate to the
// MiB is taken as one, which only lets an exact source restate it.
bool IsMemoryEstimate(const Gpu& gpu);

// Sets memory_mib of every GPU that has none and whose nominal size is known; returns how many.
int FillKnownGpuMemory(NodeTopology& topology);

}  // namespace toposched
