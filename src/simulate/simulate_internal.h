#pragma once
// Pieces of the simulator shared between its source files; not part of the public API.

#include <algorithm>
#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "toposched/framework/cluster_view.h"
#include "toposched/framework/framework.h"
#include "toposched/framework/ranking.h"
#include "toposched/pd/network.h"
#include "toposched/placement/packing.h"
#include "toposched/simulate/simulator.h"

namespace toposched::simulate {

// A Placement for a baseline's chosen devices: pairs by PairNearest, worst class and class sum
// by LinkRank. nullopt when the request's hard alignment bound is not met.
std::optional<Placement> FinishPlacement(const NodeTopology& topology, const PlacementRequest& request,
                                         std::vector<int> gpus, std::vector<int> nics);

// first-fit, gpu-only or root-complex; null for any other name.
std::unique_ptr<Policy> MakeBaselinePolicy(std::string_view name, const EngineOptions& options);

// The framework path: filter every node, score the feasible ones, reserve on the best.
// `registry` null: the builtin plugins.
// `mix`: the workload's typical shapes for the ExpectedFragmentation plugin (may be null).
Result<std::unique_ptr<Policy>> MakeToposchedPolicy(const framework::SchedulerConfig& config,
                                                    const framework::Registry* registry,
                                                    std::shared_ptr<const packing::ShapeMix> mix);

// Every builtin plugin with its default weight (the framework's default config).
framework::SchedulerConfig BuiltinDefaultConfig();

// The best worst-class rank each (hardware, request shape) allows: the engine's placement on
// the node with everything free, whose first objective term is exactly that rank. Nodes of one
// hardware type share a topology pointer, so the fingerprint is computed once per pointer.
class BestClassOracle {
 public:
  explicit BestClassOracle(EngineOptions options) : options_(options) {}
  std::optional<int> BestRank(const NodeTopology& t, const PlacementRequest& r);

 private:
  EngineOptions options_;
  std::unordered_map<const NodeTopology*, std::string> fingerprints_;
  std::unordered_map<std::string, std::optional<int>> best_;
};

// The toposched policy's order of the nodes for one pod: the framework's filter and score, then
// the ranking step, with the simulator's facts (the hardware census, the pool view, the stable
// order keys), as the extender's prioritize orders them. The toposched policy reserves on the
// first node that takes the pod; the DRA mode lets DRA's allocator take the first that fits.
class ToposchedRanking {
 public:
  ToposchedRanking(framework::Framework framework, std::shared_ptr<const packing::ShapeMix> mix)
      : framework_(std::move(framework)), mix_(std::move(mix)) {}
  // The nodes that pass the framework's filter, best first, into `ranked` (RankedNode::index:
  // into `nodes`); returns the cycle, whose outcomes are the engine's placements on them.
  framework::CycleState Rank(const PlacementRequest& request, const std::vector<VirtualNode>& nodes,
                             const std::shared_ptr<const framework::ClusterView>& cluster,
                             std::vector<framework::RankedNode>& ranked);
  const framework::Framework& framework() const { return framework_; }

 private:
  framework::RareClass RareClassFor(const PlacementRequest& request, const std::vector<VirtualNode>& nodes,
                                    const framework::ClusterView* cluster);

  framework::Framework framework_;
  std::shared_ptr<const packing::ShapeMix> mix_;
  std::vector<packing::NodeHardware> hardware_;
  std::vector<std::uint64_t> order_keys_;  // NodeOrderKey of each node's name
  packing::HardwareCensus census_;
  const VirtualNode* hardware_nodes_ = nullptr;
};

// The class of a placement's worst GPU->NIC pair by LinkRank; kPIX without pairs.
LinkClass WorstPairClass(const NodeTopology& topology, const std::vector<GpuNicPair>& pairs);

// The running cluster as the policies see it (a framework::StaticClusterView: positions by the
// network tiers, free whole GPUs and RDMA NICs, pool members) and the Prefill/Decode figures
// that need it (PdFigures). One per policy run, fed the same events as the nodes:
//
//   per arrival:   BeforeDecision -> the policy's Schedule(view()) -> Placed (when placed)
//                  -> Arrived
//   per departure: Departed, after the node's allocation gave the devices back
//
// Pods are workload indices. Not thread-safe; the view it hands out changes only between
// decisions.
class PdTracker {
 public:
  PdTracker(const std::vector<VirtualNode>& nodes, const pd::NetworkConfig& network, std::size_t pods);

  std::shared_ptr<const framework::ClusterView> view() const { return view_; }

  // Snapshot for the cheapest-path figure: when `request` is a P/D pod with counterparts, the
  // cheapest expected transfer among the nodes that could host it now.
  void BeforeDecision(const PlacementRequest& request, const std::vector<VirtualNode>& nodes);
  // Pod `pod` was placed: pairs, transfer times, the cheapest-path check, a pool member, the
  // node's free devices.
  void Placed(std::size_t pod, const PlacementRequest& request, const std::vector<VirtualNode>& nodes,
              const Decision& decision);
  // After every arrival, placed or not: samples the ratio error when the pod is a P/D pod.
  void Arrived(const PlacementRequest& request);
  // Pod `pod` left node `node` (its devices already given back).
  void Departed(std::size_t pod, const std::vector<VirtualNode>& nodes, int node);

  // The view agrees with the nodes' allocations and with the running pods (`running_node`:
  // the node of each pod still running, -1 for the others). Errors name the disagreement.
  Status Check(const std::vector<VirtualNode>& nodes, const std::vector<int>& running_node) const;

  PdFigures Finish() const;

 private:
  struct Member {
    std::string uid;  // the view's key: the pod's UID (unique unless a workload file repeats one)
    int node = -1;
    PodRole role = PodRole::kNone;
    std::string pool;
    pd::Endpoint end;
    bool ipc = false;
  };
  struct Pool {
    std::vector<std::size_t> members;         // running pods of the pool (workload indices)
    int ratio_prefill = 0, ratio_decode = 0;  // 0: no target given
    std::int64_t kv_bytes_per_token = 0;
    int prompt_tokens = 0;
    std::vector<std::array<int, 2>> at_domain;  // prefill, decode count per ratio domain
  };

  Pool& PoolOf(const PlacementRequest& request);
  void UpdateFree(const std::vector<VirtualNode>& nodes, int node);
  double Bytes(const Pool& pool) const;
  // Seconds for one pair, prefill end first.
  double PairSeconds(const pd::Location& prefill_at, const pd::Endpoint& prefill, bool prefill_ipc,
                     const pd::Location& decode_at, const pd::Endpoint& decode, bool decode_ipc,
                     double bytes) const;
  // Mean transfer seconds if `request` ran on `node` with an aligned end, over `counterparts`.
  double ExpectedSeconds(const PlacementRequest& request, int node, const Pool& pool,
                         const std::vector<std::size_t>& counterparts) const;
  std::vector<std::size_t> Counterparts(const Pool& pool, PodRole role) const;
  std::optional<double> RatioError() const;

  pd::NetworkConfig network_;
  std::shared_ptr<framework::StaticClusterView> view_;
  std::vector<pd::Location> locations_;
  std::vector<int> location_class_;  // nodes of one class share every tier domain
  int location_classes_ = 0;
  std::vector<int> ratio_domain_;  // per node: its domain at the ratio tier
  int ratio_domains_ = 0;
  std::vector<std::optional<Member>> members_;  // by workload index
  std::map<std::string, Pool, std::less<>> pools_;

  // BeforeDecision's snapshot for the next Placed.
  std::optional<double> cheapest_s_;
  std::vector<std::size_t> counterparts_;

  PdFigures figures_;
  std::vector<double> transfer_s_;
  double ratio_error_sum_ = 0;
};

}  // namespace toposched::simulate
