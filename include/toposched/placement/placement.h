#pragma once
// The placement engine: for one node, what it already has allocated and one request, the best
// GPU+NIC set under the objective of docs/placement.md, or a typed reason why none fits. Pure:
// no I/O, no clock, no globals; safe to call from many threads on distinct memos.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/placement/request.h"
#include "toposched/topology/node_topology.h"

namespace toposched {

// Per-GPU shared usage (HAMi vGPUs) in the request's fixed-point units.
struct GpuShareUsage {
  int shares = 0;  // vGPUs placed on this GPU
  std::int64_t memory_mib = 0;
  std::int64_t cores = 0;  // of kFullGpuCores
  bool operator==(const GpuShareUsage&) const = default;
};

// What is already taken on one node. Vectors are indexed like the topology's gpus/nics; empty
// vectors mean "nothing allocated".
struct NodeAllocation {
  std::vector<bool> gpu_exclusive;  // whole GPUs held by pods
  std::vector<bool> nic_used;       // RDMA NICs held by pods
  std::vector<GpuShareUsage> gpu_shares;
  bool operator==(const NodeAllocation&) const = default;
};

// Internal rank of a link class, smaller is better: NV 0, PIX 1, PXB 2, PHB 3, NODE 4, SYS within
// one package (sub-NUMA clusters) 5, SYS across packages or unknown 6.
int LinkRank(LinkClass cls, int package_a, int package_b);

// The lexicographic objective, smaller is better in every field (DESIGN.md "The placement
// objective"); the engine and the brute-force reference compare these.
struct PlacementCost {
  int worst_gpu_nic = 0;      // max LinkRank over GPU->serving NIC pairs (0 without NICs)
  int sum_gpu_nic = 0;        // sum of those ranks
  int worst_gpu_gpu = 0;      // max LinkRank over chosen GPU pairs (NV = 0)
  int neg_nvlinks = 0;        // minus the NVLink links summed over chosen GPU pairs
  int neg_intact_groups = 0;  // minus the switch groups left entirely free after the choice
  int pack = 0;               // binpack: groups newly touched; spread: minus that
  auto operator<=>(const PlacementCost&) const = default;
};

struct GpuNicPair {
  int gpu = 0;
  int nic = 0;
  LinkClass cls = LinkClass::kSYS;
  bool operator==(const GpuNicPair&) const = default;
};

struct Placement {
  std::vector<int> gpus;                    // topology GPU indices, ascending (whole or shared)
  std::vector<int> nics;                    // topology NIC indices, ascending
  std::vector<GpuNicPair> pairs;            // each chosen GPU and the NIC that serves it
  LinkClass worst_class = LinkClass::kPIX;  // printed class of the worst pair (kPIX if no NICs)
  int class_sum = 0;                        // sum of LinkRank over pairs
  PlacementCost cost;
  // The best worst-class this node could give the request with all its devices free, and
  // whether this placement reached it (the simulator's "best allowable class").
  int best_possible_worst = 0;
  std::vector<std::string> reasons;  // per device: why it was chosen
  bool operator==(const Placement&) const = default;
};

enum class FitFailure : std::uint8_t {
  kNone,
  kNotEnoughGpus,           // fewer free GPUs (of the vendor) than requested
  kNotEnoughNics,           // fewer free RDMA NICs than requested
  kAlignmentUnsatisfiable,  // devices are free, but no set meets toposched.io/gpu-nic-alignment
  kNotEnoughShareCapacity,  // no set of GPUs with the memory/cores a shared request needs
  kRequestTooLarge,         // the node has fewer devices in total than requested: never fits
};
std::string_view ToString(FitFailure f);

struct PlacementOutcome {
  std::optional<Placement> placement;
  FitFailure failure = FitFailure::kNone;
  std::string detail;  // a sentence a user can act on
  bool ok() const { return placement.has_value(); }
};

struct EngineOptions {
  PackPolicy default_gpu_policy = PackPolicy::kSpread;  // HAMi's default for GPUs in a node
  int max_shares_per_gpu = 10;                          // HAMi deviceSplitCount
};

namespace packing {
struct ShapeMix;
}

// Capacity first inside a node (docs/placement.md, "Which card a vGPU takes"): the typical pods
// a single vGPU's card is chosen for, with FGD's per-GPU rule: the card that leaves the node's
// expected fragmentation lowest, ties to the fuller card by HAMi's device score. Given only when
// the cycle packs by the typical pods and the pod names no hami.io/gpu-scheduler-policy
// (framework::CycleState::share_packing); `key` identifies the mix's content in memo keys.
// mix null: HAMi's GPU policy alone.
struct SharePacking {
  const packing::ShapeMix* mix = nullptr;
  std::uint64_t key = 0;
};

// The exact engine. Enumerates candidate GPU and NIC sets with bounds that never discard an
// optimum; see docs/placement.md for the search and its cost.
PlacementOutcome PlaceOnNode(const NodeTopology& topology, const NodeAllocation& allocated,
                             const PlacementRequest& request, const EngineOptions& options = {},
                             SharePacking share_packing = {});

// Memoizes PlaceOnNode per (topology fingerprint, free devices and shares, request shape):
// nodes of one hardware type in the same state cost one computation. Thread-compatible (one
// memo per thread, or external locking); bounded by `capacity` entries (cleared when full).
class PlacementMemo {
 public:
  explicit PlacementMemo(std::size_t capacity = 100000);
  ~PlacementMemo();
  PlacementMemo(const PlacementMemo&) = delete;
  PlacementMemo& operator=(const PlacementMemo&) = delete;

  // `fingerprint`: topology.Fingerprint() when the caller has it cached (empty = computed here;
  // it is most of the cost of a hit).
  PlacementOutcome Place(const NodeTopology& topology, const NodeAllocation& allocated,
                         const PlacementRequest& request, const EngineOptions& options = {},
                         std::string_view fingerprint = {}, SharePacking share_packing = {});
  std::size_t hits() const;
  std::size_t misses() const;
  std::size_t size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace toposched
