#pragma once
// The device rules, in one place: whether a GPU or NIC of a node is taken, what a vGPU (HAMi
// share) takes of a card, and whether one more vGPU fits on a card. The engine, its brute-force
// reference, the framework's allocation arithmetic, the cluster store's checks and the
// simulator's baselines all ask here, so that "free" and "fits" mean one thing everywhere.

#include <cstdint>
#include <optional>

#include "toposched/placement/placement.h"
#include "toposched/placement/request.h"
#include "toposched/topology/node_topology.h"

namespace toposched {

// Allocation lookups; vectors shorter than the topology (or empty) mean "nothing allocated".
bool GpuExclusive(const NodeAllocation& allocated, int gpu);
bool NicUsed(const NodeAllocation& allocated, int nic);
GpuShareUsage GpuShares(const NodeAllocation& allocated, int gpu);
// Neither held whole nor carrying a vGPU.
bool GpuFree(const NodeAllocation& allocated, int gpu);
// An RDMA NIC (the first RdmaNicCount() entries of `nics`) that no pod uses.
bool RdmaNicFree(const NodeTopology& topology, const NodeAllocation& allocated, int nic);

// The memory one vGPU of `shared` needs on `gpu`: 0 when it asks none; its memory_mib, else its
// memory_percent of the card rounded down as HAMi does; nullopt when it asks memory and the card's size is
// unknown (docs/topology-model.md, "Card memory").
std::optional<std::int64_t> ShareMemoryNeed(const Gpu& gpu, const SharedGpuRequest& shared);
// What a vGPU records on the card: the need, or on a card of unknown size the MiB it asked
// (a percentage of an unknown size records 0).
std::int64_t ShareMemoryMib(const Gpu& gpu, const SharedGpuRequest& shared);

// HAMi's device score for one more vGPU of `r` on `gpu`, the order binpack and spread pick cards
// in (pkg/scheduler/policy/gpu_policy.go ComputeScore): the card's vGPU slots, compute and memory
// each as the fraction used once the vGPU is added, summed, here in millionths (0..3,000,000).
// `max_shares_per_gpu` is the card's slot count (deviceSplitCount). A card of unknown memory
// size leaves the memory term out (HAMi, which never sees one, would score the card 0).
std::int64_t ShareUsageScore(const NodeTopology& topology, const NodeAllocation& allocated,
                             const PlacementRequest& r, int max_shares_per_gpu, int gpu);

// Whether one more vGPU of request `r` fits on GPU `gpu` (HAMi's per-card checks, plus the
// card's health and the unknown-memory rule), and if not, why.
enum class ShareVerdict : std::uint8_t {
  kFits,
  kWrongVendor,
  kExclusive,
  kShareLimit,
  kFiltered,       // nvidia.com/use-gputype, nouse-gputype, use-gpuuuid, nouse-gpuuuid
  kMemoryUnknown,  // a card of unknown size already shared (a memory vGPU takes it alone)
  kMemory,
  kCores,
  kNumaUnknown,  // numa-bind asked, the card's NUMA node unknown
  kUnusable,     // Gpu::unusable: unhealthy, in MIG mode, or not in HAMi's AMD registration
  kUnenforced,   // Gpu::shares_unenforced: no device plugin on the node enforces a share
};
ShareVerdict JudgeSharedGpu(const NodeTopology& topology, const NodeAllocation& allocated,
                            const PlacementRequest& r, int max_shares_per_gpu, int gpu);

}  // namespace toposched
