#pragma once
// What the exact engine (engine.cc and WholeSearch, whole_search*.cc) and the brute-force
// reference (brute_force.cc) share: the definitions of "free", switch groups, the shared-GPU
// eligibility and key, the failure sentences and the Placement's description. The searches
// themselves and the cost arithmetic are written twice on purpose, so that the reference checks
// the engine rather than repeating it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "toposched/placement/device_rules.h"
#include "toposched/placement/packing.h"
#include "toposched/placement/placement.h"

namespace toposched::placement_internal {

// Rank of a missing or forbidden GPU->NIC edge: larger than every LinkRank.
inline constexpr int kNoEdge = 100;

// "Free" and "fits" are the device rules' (device_rules.h), shared with every other caller.
using ::toposched::GpuExclusive;
using ::toposched::GpuFree;
using ::toposched::GpuShares;
using ::toposched::NicUsed;
using ::toposched::RdmaNicFree;
using ::toposched::ShareVerdict;

LinkClass GpuNicClass(const NodeTopology& t, int gpu, int nic);  // SYS when the matrix lacks the cell
int GpuNicRank(const NodeTopology& t, int gpu, int nic);
// Reads the upper triangle (min, max) so that an asymmetric source cannot make the cost depend
// on argument order.
int GpuGpuRank(const NodeTopology& t, int a, int b);
// NVLink links between two GPUs (Link::count); an xGMI link counts 1; PCIe 0.
int NvlinkCount(const NodeTopology& t, int a, int b);

// PCIe switch groups (outermost switch upstream ports) that hold a GPU or an RDMA NIC. Devices
// outside any switch belong to no group.
struct SwitchGroups {
  std::vector<int> of_gpu;          // group id per topology GPU, -1 for none
  std::vector<int> of_nic;          // group id per topology NIC, -1 for none or non-RDMA
  std::vector<int> pcie_index;      // group id -> index into NodeTopology::pcie
  std::vector<bool> intact_before;  // group id -> no device of it allocated before the choice
  int IntactCount() const;
};
SwitchGroups ComputeSwitchGroups(const NodeTopology& t, const NodeAllocation& a);

// binpack (+1) or spread (-1) sign of PlacementCost::pack.
int WholePackSign(const PlacementRequest& r);
PackPolicy SharedPolicy(const PlacementRequest& r, const EngineOptions& o);

// Whole requests: kRequestTooLarge, kNotEnoughGpus, kNotEnoughNics in that order, or nothing.
std::optional<PlacementOutcome> WholeCountFailure(const NodeTopology& t, const NodeAllocation& a,
                                                  const PlacementRequest& r);

// The chosen devices of a whole request. nic_of_gpu[i] serves gpus[i] (empty without NICs).
struct WholeChoice {
  std::vector<int> gpus;        // ascending
  std::vector<int> nics;        // ascending
  std::vector<int> nic_of_gpu;  // parallel to gpus
  PlacementCost cost;
};
Placement DescribeWhole(const NodeTopology& t, const SwitchGroups& groups, const WholeChoice& c,
                        int best_possible_worst);
// Devices are free but the alignment bound excludes every set; `unbounded` is the best placement
// without the bound.
PlacementOutcome AlignmentFailure(const NodeTopology& t, const PlacementRequest& r,
                                  const Placement& unbounded);

// Shared (vGPU) requests: device_rules.h's JudgeSharedGpu with the engine's share limit.
inline ShareVerdict JudgeSharedGpu(const NodeTopology& t, const NodeAllocation& a, const PlacementRequest& r,
                                   const EngineOptions& o, int gpu) {
  return ::toposched::JudgeSharedGpu(t, a, r, o.max_shares_per_gpu, gpu);
}
// FGD's per-GPU rule for one vGPU (SharePacking): the node's expected fragmentation after the
// vGPU takes each card. Active only for a single vGPU whose pod names no GPU policy, with a mix.
class ShareFragmentation {
 public:
  ShareFragmentation(const NodeTopology& t, const NodeAllocation& a, const PlacementRequest& r,
                     const SharePacking& share_packing);
  bool active() const { return active_; }
  // In millionths of a milli-GPU, rounded: equal fragmentation compares equal. Computed once per
  // card (the key and the reasons both ask).
  std::int64_t After(int gpu) const;

 private:
  bool active_ = false;
  const packing::ShapeMix* mix_ = nullptr;
  mutable std::vector<std::int64_t> after_;  // per card; -1: not computed yet
  const NodeTopology& t_;
  const NodeAllocation& a_;
  const PlacementRequest& r_;
};

// Sort key of an eligible GPU, smaller first: (fragmentation after, when ShareFragmentation is
// active; opens an intact switch group; policy key; index).
struct ShareKey {
  std::int64_t fragmentation = 0;  // ShareFragmentation::After, 0 when inactive
  int opens_group = 0;             // 0: its group is already broken (or it has none); 1: intact
  std::int64_t policy_key = 0;     // binpack: -ShareUsageScore (fullest card first); spread: +it
  int gpu = 0;
  auto operator<=>(const ShareKey&) const = default;
};
// With `frag` active the policy key is binpack's whatever `policy` says (capacity first: among
// cards that strand alike, the fuller).
ShareKey SharedKey(const NodeTopology& t, const NodeAllocation& a, const SwitchGroups& groups,
                   const PlacementRequest& r, const EngineOptions& o, PackPolicy policy,
                   const ShareFragmentation& frag, int gpu);
// kRequestTooLarge or kNotEnoughShareCapacity for a shared request that found no GPU set.
PlacementOutcome SharedFailure(const NodeTopology& t, const NodeAllocation& a, const PlacementRequest& r,
                               const EngineOptions& o);
// `frag` (may be null): when active, the reasons say the card strands least and binpack broke ties.
Placement DescribeShared(const NodeTopology& t, const NodeAllocation& a, const SwitchGroups& groups,
                         const PlacementRequest& r, const EngineOptions& o, std::vector<int> gpus,
                         const ShareFragmentation* frag = nullptr);

}  // namespace toposched::placement_internal
