#pragma once
// Expected GPU fragmentation: how much of a node's idle GPU capacity the pods yet to come could
// not use. This is the measure of Fragmentation Gradient Descent (FGD; Weng et al., "Beware of
// Fragmentation", USENIX ATC '23), stated in the paper and in its authors' simulator
// (hkust-adsl/kubernetes-scheduler-simulator, pkg/utils/frag.go):
//
//   F(node) = sum over typical shapes m of  p(m) * (idle GPU milli of the node that m cannot use)
//
// where a shape cannot use ALL of the node's idle GPU when it cannot run there at all (too few
// GPUs with enough left, too little CPU, a GPU model it does not accept, or it asks for no GPU
// at all), and otherwise cannot use the GPUs whose idle part is smaller than what it asks per
// GPU. A placement that makes F grow least strands the least capacity for the pods that follow.
//
// Two departures from FGD's measure. First, a GPU model a shape does not accept is not
// fragmentation for that shape (ForeignModels below): it never could use it. FGD's count is
// kept for the simulator's FGD baseline.
//
// Second, for GPU servers whose RDMA NICs are scarce: a shape also counts the RDMA NICs
// it asks for, and cannot run on a node with fewer free. FGD's pods ask no NIC and its four
// variants pin no model, so on them the measure is FGD's; on a serving cluster it sees that a
// NIC-less pod on an RDMA node takes a GPU the NIC-asking pods could have used, and that a small
// pod on an empty 8-GPU, 8-NIC node strands the whole-node shape, whose GPUs another node would
// otherwise still offer.
//
// Units: milli-GPU (1000 = one whole GPU), milli-CPU. Pure functions: no I/O.

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/placement/placement.h"
#include "toposched/placement/request.h"
#include "toposched/topology/node_topology.h"

namespace toposched::packing {

inline constexpr int kMilli = 1000;

// What one pod asks for, as the fragmentation measure sees it.
struct Shape {
  int gpus = 0;   // 0: no GPU
  int milli = 0;  // per GPU: kMilli for whole GPUs, less for one share of one GPU
  std::int64_t cpu_milli = 0;
  // GPU models the pod accepts (case-insensitive substrings of the node's model, as HAMi's
  // nvidia.com/use-gputype); empty: any.
  std::vector<std::string> models;
  int nics = 0;  // RDMA NICs
  auto operator<=>(const Shape&) const = default;
};

struct WeightedShape {
  Shape shape;
  double weight = 0;  // the shape's share of the workload's pods; a mix's weights sum to 1
  bool operator==(const WeightedShape&) const = default;
};

// The "typical pods" of FGD.
struct ShapeMix {
  std::vector<WeightedShape> shapes;  // most frequent first
  bool operator==(const ShapeMix&) const = default;
};
// A 64-bit hash of a mix's content (FNV-1a over its shapes and weights): equal mixes, equal keys.
std::uint64_t MixKey(const ShapeMix& mix);

// FGD's typical pods from a workload's pods: shapes counted, most frequent first (ties: the
// larger shape by CPU, then milli, GPUs and models first, as the FGD simulator orders them), the
// shortest prefix holding at least `coverage` of the pods, weights renormalised to sum to 1.
// CPU-only pods are included, as in the FGD experiments (isInvolvedCpuPods: true,
// podPopularityThreshold: 95). Empty input: an empty mix.
//
// kPodsAndGpuDemand also keeps the shortest prefix, by GPU demand (pods x GPUs x milli), that
// holds `coverage` of the workload's GPU demand: a rare large shape (5 % of pods asking 8 GPUs
// each) holds a third of the demand, and packing that forgets it strands whole nodes. The
// weights stay each shape's share of the kept pods. Equal counts keep the map's order here
// (the smaller shape first): this mix is toposched's, not the FGD simulator's, and the
// embedded `simulate` default was measured with it (docs/placement.md, "Capacity by default").
enum class Coverage : std::uint8_t { kPods, kPodsAndGpuDemand };
ShapeMix TypicalShapes(const std::vector<Shape>& pods, double coverage = 0.95, Coverage by = Coverage::kPods);

// The shape of a placement request: whole GPUs, or one share of one GPU (cores as a fraction of
// kMilli: HAMi's gpucores percent x 10; no cores asked: the share of the card's memory it asks,
// when known; else a whole GPU's worth, since such a vGPU may use all the compute).
// `cpu_milli` is what the pod asks of the node's CPU (0 when the caller does not know); `nics`
// its RDMA NICs.
Shape ShapeOf(const PlacementRequest& request, std::int64_t cpu_milli = 0);

// A node as the measure sees it.
struct NodeState {
  std::vector<int> milli_left;  // per GPU: what is idle (0 when held whole)
  std::int64_t cpu_left = -1;   // -1: unknown, counted as enough for every shape
  std::string model;            // the node's GPU model, for Shape::models
  int nics_left = 0;            // RDMA NICs no pod uses
};

// The idle part of each GPU of `vendor`: 0 for a GPU held whole or unusable; for a shared GPU,
// kMilli less the larger of its used cores (x10) and its used memory fraction (when the card's
// memory is known). The one meaning of "how much of this GPU is left" for packing.
NodeState StateOf(const NodeTopology& topology, const NodeAllocation& allocated, GpuVendor vendor,
                  std::int64_t cpu_left = -1);

// What is left on the GPU with index `gpu_index` (StateOf's meaning); -1 when the node has none.
int MilliLeft(const NodeTopology& topology, const NodeAllocation& allocated, int gpu_index);

// Whether `shape` can run on `node` (GPU model, CPU, RDMA NICs, enough GPUs with enough left).
bool Fits(const NodeState& node, const Shape& shape);

// How a typical shape counts a node whose GPU model it does not accept (Shape::models).
//   kCounted: all the node's idle GPU is fragmentation for it, as for a node it does not fit
//     (FGD's measure, pkg/utils/frag.go: the shape cannot run there).
//   kNotCounted: nothing: that GPU was never the shape's, so it is not fragmented for it.
//     Counting it makes every placement on a model few shapes accept look like it removes
//     fragmentation, which pulls pods without a model constraint onto the models the pinned
//     pods need (docs/placement.md, "Workload families"). toposched's measure.
enum class ForeignModels : std::uint8_t { kCounted, kNotCounted };

// F(node) for `mix`, in milli-GPU.
double Fragmentation(const NodeState& node, const ShapeMix& mix,
                     ForeignModels foreign = ForeignModels::kNotCounted);

// `node` after one pod of `shape` takes the GPUs listed in `gpus` (indices into milli_left;
// kMilli of each for whole GPUs, shape.milli for a share), its CPU and its NICs.
NodeState After(const NodeState& node, const Shape& shape, const std::vector<int>& gpus);

// The GPU a share of `shape` should take on `node` to make F grow least (ties: the GPU with
// the least left, then the lowest index); -1 when none has enough left.
int BestShareGpu(const NodeState& node, const Shape& shape, const ShapeMix& mix);

// How many partly used GPUs of a cluster have each amount left (milli-GPU, 1..kMilli - 1):
// the gaps of the bin-packing Sum-of-Squares rule (Csirik, Johnson, Kenyon, Orlin, Shor and
// Weber, "On the Sum-of-Squares algorithm for bin packing", J. ACM 53(1), 2006). A GPU that is
// free, held whole or full is not a gap.
class RemnantCounts {
 public:
  void Add(int left);
  void Add(const NodeState& node);
  // Every GPU of `vendor` on a node (StateOf's meaning of what is left).
  void Add(const NodeTopology& topology, const NodeAllocation& allocated, GpuVendor vendor);
  int Count(int left) const;
  // How Σ count(g)^2 over the gaps changes when one share of `milli` goes on a GPU with `left`:
  // the GPU leaves gap `left` (unless it was free) and joins gap `left - milli` (unless full).
  // Negative: the placement evens the gaps out, taking a GPU whose remnant is common and leaving
  // one that is rare, so that the shares still to come find GPUs that fit them closely.
  long SumOfSquaresDelta(int left, int milli) const;
  // How nodes that score alike for a single vGPU are ranked, lower first: the delta where it is
  // negative, else 0 (then the caller's fixed node order decides, which packs equal pods where
  // the last ones went). Measured on the Alibaba trace in docs/placement.md ("Evening out the
  // remnants"): ranking by the delta itself, positive too, did worse.
  long TieRank(int left, int milli) const { return std::min(SumOfSquaresDelta(left, milli), 0L); }

 private:
  std::array<int, kMilli> count_{};
};

}  // namespace toposched::packing
