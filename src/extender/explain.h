#pragma once
// What the operator's views of the extender compute (docs/operations.md, "Why is my pod
// pending"): the short reason a node refused a pod, the FailedScheduling-style summary of a
// filter that left no node ("0/15 nodes fit: 12 nodes: ...; 3 nodes: ..."), the per-node
// explanation of one pod against the current store (GET/POST /explain), and the nodes' devices
// (GET /nodes). Read-only: nothing here changes the store. Private to the extender.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "toposched/framework/framework.h"
#include "toposched/placement/packing.h"
#include "toposched/placement/placement.h"
#include "toposched/placement/request.h"
#include "toposched/state/cluster_state.h"

namespace toposched::extender {

// The summary line's phrases for refusals that are not the engine's (kept short: they are
// counted per node in an event message).
inline constexpr std::string_view kSummaryNoTopology =
    "no NodeTopology (is the toposched agent running there?)";
inline constexpr std::string_view kSummaryStale = "stale topology (the agent's heartbeat is too old)";
inline constexpr std::string_view kSummaryCordoned = "cordoned";
inline constexpr std::string_view kSummaryHeld =
    "holds a pod whose allocation cannot be read back (AllocationUnreadable event)";

// The node as the framework sees it: topology, allocation, schedulable, held (no labels: no
// plugin's verdict may read them, NodeInfo::labels).
framework::NodeInfo NodeInfoOf(const state::NodeRecord& record);

// The short reason `node` refused the pod, the same for every node refused for the same cause,
// so that a summary can count nodes by it: the node's state (no topology, cordoned, held),
// else the engine's failure kind with the request's figures ("fewer than 4 free GPUs"), else
// the failing plugin's own reason. `outcome`: the cycle's placement outcome for the node, when
// the filter computed one (null otherwise).
std::string RefusalSummary(const PlacementRequest& request, const framework::NodeInfo& node,
                           const framework::FilterResult& filtered, const PlacementOutcome* outcome);

// "0/15 nodes fit: 12 nodes: fewer than 4 free GPUs; 3 nodes: stale topology (...)": refusals
// counted by summary, most first (ties by text), at most `max_groups` groups and the rest as
// "N nodes: other reasons". `reasons`: (summary, node count) pairs, in any order.
std::string SummarizeRefusals(std::size_t total_nodes, std::size_t fitting_nodes,
                              std::vector<std::pair<std::string, std::size_t>> reasons,
                              std::size_t max_groups = 6);

// The printed name of a LinkRank value (placement.h): PIX, PXB, PHB, NODE, SYS; rank 5 (another
// NUMA node of the same package) prints "SYS (same package)".
std::string_view RankName(int rank);

// Whether a placement's worst GPU->NIC link was the best the node allows (the same request on
// the node with every device free): "the best this node allows", or "the node allows PIX; its
// free devices did not". Empty when the placement has no GPU->NIC pairs.
std::string AlignmentNote(const Placement& placement);

struct ExplainInput {
  const framework::Framework* framework = nullptr;
  const state::ClusterStore* store = nullptr;
  std::shared_ptr<const state::Snapshot> snapshot;
  PlacementRequest request;
  std::string pod_label;  // "ns/name"
  // The pod's current allocation, when it has one: its devices are counted free on its node
  // (the question is where it would go now, not whether it fits on top of itself).
  std::optional<state::PodAllocation> allocation;
  std::set<std::string, std::less<>> stale_nodes;  // topology withdrawn for a stale heartbeat
  std::size_t limit = 500;  // nodes listed in detail (fitting ones first); counts cover all
  // The typical pods ExpectedFragmentation packs for (Evaluator::ShapeMixFor); null: the pod's own.
  std::shared_ptr<const packing::ShapeMix> shape_mix;
  bool packs_by_mix = false;  // Evaluator::PacksByMixFor
};

struct NodeExplanation {
  std::string name;
  bool fits = false;
  framework::Code code = framework::Code::kSuccess;
  std::string plugin, reason;  // the refusing plugin and its reason (empty when it fits)
  std::string summary;         // RefusalSummary (empty when it fits)
  int score100 = 0, extender_score = 0;
  // A pod that asks CPU and no device (prioritize-cpu): the node's share of idle GPUs, which
  // lowers its score (CpuPodScore); -1 on a node without NodeTopology; unset for other pods.
  std::optional<double> idle_gpus;
  // Capacity first (framework::CapacityBand), as prioritize ranks: the capacity plugin's score
  // (-1: off) and whether it is within the band of the best; out-of-band nodes rank after the
  // rest and get extender score 0.
  int capacity = -1;
  bool in_band = true;
  // A rare node class last (framework::RareClass): the node is kept for `kept_for` (a typical shape
  // fewer nodes can host than this pod's) and ranks after every node that is not.
  bool reserved = false;
  std::string kept_for;
  std::optional<LinkClass> worst_class;
  // A single vGPU whose card capacity packing chooses: what is left on that card before it
  // (ClassVerdict::share_left, which orders the best nodes); -1 otherwise.
  int share_left = -1;
  std::string alignment;                // AlignmentNote
  std::vector<std::string> gpus, nics;  // "3 (0000:1b:00.0)", "mlx5_0"
  std::string explanation;              // framework::ExplainNode
};

struct Explanation {
  std::string pod;
  std::string request;      // "4 GPUs, 2 RDMA NICs, alignment preferred"
  bool interested = false;  // asks for toposched's devices at all
  bool packs_cpu = false;   // asks CPU and no device: scored by prioritize-cpu (PodEntry::packs_cpu)
  std::optional<state::PodAllocation> bound;
  std::string bound_devices;  // "GPUs 0,1; NICs mlx5_0" of `bound`
  std::size_t total = 0, fitting = 0;
  std::string best;  // the highest-scoring node that fits (name order breaks ties), "" when none
  std::string summary;
  std::vector<std::pair<std::string, std::size_t>> reasons;  // refusal summary -> nodes, most first
  std::vector<NodeExplanation>
      nodes;  // fitting as prioritize ranks them, then refused by name; at most limit
  bool truncated = false;
};

// Runs the pod's filter and score over every node of the snapshot, with explanations.
Explanation Explain(const ExplainInput& in);
// As JSON (docs/operations.md, "Explain") and as text for a terminal (kubectl toposched explain).
std::string ToJson(const Explanation& e);
std::string ToText(const Explanation& e);

// Every node of the snapshot: devices total/free, pods, schedulable, held, stale, class label,
// as JSON and as text (kubectl toposched nodes).
// `dra_unmapped`: allocated DRA devices toposched could not map, by node (BindHooks::UnmappedDraDevices).
std::string NodesJson(const state::Snapshot& snapshot, const std::set<std::string, std::less<>>& stale_nodes,
                      const std::map<std::string, int>& dra_unmapped = {});
std::string NodesText(const state::Snapshot& snapshot, const std::set<std::string, std::less<>>& stale_nodes,
                      const std::map<std::string, int>& dra_unmapped = {});

}  // namespace toposched::extender
