#pragma once
// CycleState: everything about one pod that lives for ONE scheduling cycle (one HTTP call of the
// extender: filter, prioritize or bind). Nothing here outlives the call; what must survive
// between calls belongs to an explicit cache keyed by pod UID and topology generation that
// re-validates (DESIGN.md, "Per-request state lives for one HTTP call").
//
// It holds the request and a per-node cache of the placement engine's outcome, so that Filter
// and every Score plugin read one engine result per node instead of each running the search.
// It also carries plugin scratch data (kube-scheduler's CycleState Write/Read), e.g. what
// DeviceFit reserved so that Unreserve can revert exactly that.
//
// Thread-compatible: one cycle is driven by one thread at a time.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "toposched/framework/cluster_view.h"
#include "toposched/framework/node_info.h"
#include "toposched/placement/packing.h"
#include "toposched/placement/placement.h"
#include "toposched/placement/request.h"

namespace toposched::framework {

// Plugin scratch data stored in a CycleState under a string key.
class StateData {
 public:
  virtual ~StateData() = default;
};

class CycleState {
 public:
  // Computes one node's outcome. The Framework binds it to its PlacementMemo and EngineOptions;
  // tests may pass a fake that returns hand-built outcomes.
  // `fingerprint` is NodeInfo::topology_fingerprint (may be empty: the placer computes it).
  // `share_packing`: share_packing() of the cycle.
  using Placer =
      std::function<PlacementOutcome(const NodeTopology&, std::string_view fingerprint, const NodeAllocation&,
                                     const PlacementRequest&, SharePacking share_packing)>;

  CycleState(PlacementRequest request, Placer placer);
  CycleState(CycleState&&) noexcept;
  CycleState& operator=(CycleState&&) noexcept;
  CycleState(const CycleState&) = delete;
  CycleState& operator=(const CycleState&) = delete;
  ~CycleState();

  const PlacementRequest& request() const { return request_; }

  // The cluster beyond the scored node (pool members, network positions), for pool-aware
  // plugins; null when the caller has none (they then score neutrally and say why).
  void SetCluster(std::shared_ptr<const ClusterView> cluster) { cluster_ = std::move(cluster); }
  const ClusterView* cluster() const { return cluster_.get(); }

  // The workload's typical pod shapes with their weights (FGD's "typical pods"), for the
  // ExpectedFragmentation plugin; null when the caller has none (the plugin then packs for
  // more pods of the request's own shape). The same for every node of the cycle.
  void SetShapeMix(std::shared_ptr<const packing::ShapeMix> mix);
  const packing::ShapeMix* shape_mix() const { return mix_.get(); }
  // Whether a Score plugin that packs for the typical shapes (ScorePlugin::PacksForShapeMix) is
  // counted in this cycle (weighted, or ranking capacity first); the Framework sets it.
  void set_packs_for_shape_mix(bool packs) { packs_for_shape_mix_ = packs; }
  bool packs_for_shape_mix() const { return packs_for_shape_mix_; }
  // Whether capacity packing owns the decision: it packs for the typical shapes, there are
  // some, and neither they nor the pod ask an RDMA NIC (the fragmentation measure then states
  // the whole objective, and the blind heuristics and HAMi's binpack/spread stand down:
  // docs/placement.md, "What closed the gap: packing by the mix" and "Which card a vGPU takes").
  bool packs_by_mix_without_nics() const;
  // What the engine chooses a single vGPU's card for (SharePacking): the typical shapes when
  // packs_by_mix_without_nics() and the pod names no hami.io/gpu-scheduler-policy; else none.
  SharePacking share_packing() const;

  // Whether Score plugins should say how they scored (ScoreResult::explanation); true unless the
  // caller keeps the numbers only, as the extender's verbs do (the CLI and the simulator explain).
  void set_explain(bool explain) { explain_ = explain; }
  bool explain() const { return explain_; }

  // The engine's outcome for `node` as it is now. Computed at most once per node name while the
  // node's topology (by pointer) and allocation stay what they were at the first call; when
  // either changed (a Reserve in this cycle, a refreshed NodeInfo) it is recomputed, so a cached
  // placement never refers to devices that have since been taken. A node without a topology
  // gets an outcome without placement whose detail says so.
  // The reference stays valid until the next Outcome() call for the same node name.
  const PlacementOutcome& Outcome(const NodeInfo& node);

  // How many times this cycle ran the placer (tests prove filter+score share one result).
  std::size_t placer_calls() const { return placer_calls_; }

  // Plugin scratch data. Keys are namespaced by plugin name ("DeviceFit/reserved").
  void Write(std::string key, std::unique_ptr<StateData> data);
  StateData* Read(std::string_view key) const;
  // Typed read: null when absent or of another type.
  template <typename T>
  T* ReadAs(std::string_view key) const {
    return dynamic_cast<T*>(Read(key));
  }
  void Erase(std::string_view key);

 private:
  struct CachedOutcome {
    std::shared_ptr<const NodeTopology> topology;
    NodeAllocation allocated;
    PlacementOutcome outcome;
  };
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  PlacementRequest request_;
  Placer placer_;
  std::shared_ptr<const ClusterView> cluster_;
  std::shared_ptr<const packing::ShapeMix> mix_;
  mutable std::optional<std::uint64_t> mix_key_;  // packing::MixKey of mix_, once asked
  bool packs_for_shape_mix_ = false;
  bool explain_ = true;
  std::unordered_map<std::string, CachedOutcome, StringHash, std::equal_to<>> outcomes_;
  // By NodeInfo::outcome_key: the first outcome computed for each key (never replaced, so a
  // reference given out stays valid for the cycle).
  std::unordered_map<std::uint64_t, CachedOutcome> by_key_;
  std::unordered_map<std::string, std::unique_ptr<StateData>, StringHash, std::equal_to<>> data_;
  std::size_t placer_calls_ = 0;
};

}  // namespace toposched::framework
