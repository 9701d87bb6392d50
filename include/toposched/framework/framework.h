#pragma once
// The Framework: runs the configured plugins for one pod over candidate nodes. It is the runner,
// separate from the plugin interfaces (plugin.h), as in kube-scheduler. The extender maps its
// verbs onto it: filter -> RunFilter per node; prioritize -> RunScore per node, then
// the ranking step (ranking.h) at the wire; bind -> RunFilter on the node as it is now, then the cluster
// store applies the placement under the node's lock (the store is the extender's Reserve). The simulators run
// RunReserve on their own node copies.
//
// Thread safety: RunFilter/RunScore/RunReserve may run concurrently on distinct CycleStates.
// The PlacementMemo shared by all cycles is guarded by a mutex, so concurrent cycles serialise
// on engine misses (hits cost one lookup); per-worker memos are the next step if that shows.

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/status.h"
#include "toposched/framework/config.h"
#include "toposched/framework/cycle_state.h"
#include "toposched/framework/node_info.h"
#include "toposched/framework/plugin.h"
#include "toposched/framework/registry.h"
#include "toposched/framework/status.h"

namespace toposched::framework {

// The outcome of filtering one node: ok(), or the first failing plugin's status (its plugin()
// names that plugin).
using FilterResult = PluginStatus;

struct ScorePart {
  std::string plugin;
  int weight = 0;
  int score = 0;  // 0..100, as the plugin returned it (clamped; the explanation says if it was)
  std::string explanation;
  bool counted = true;  // false: the plugin did not apply to the pod (out of the total)
  bool operator==(const ScorePart&) const = default;
};

struct NodeScore {
  // Weighted average of the counted parts, 0..100, rounded half up:
  //   total = round(sum(weight_i * score_i) / sum(weight_i)); 0 when every weight is 0.
  int total = 0;
  long long weighted = 0;        // sum(weight_i * score_i) over the counted parts
  long long weights = 0;         // sum(weight_i) over the counted parts
  std::vector<ScorePart> parts;  // config order
  // The capacity plugin's score (SchedulerConfig::capacity), 0..100; -1 when capacity first is
  // off or this ScoreSet does not hold the plugin.
  int capacity = -1;
  std::string capacity_explanation;  // the capacity plugin's explanation, when explaining
  // Kept for a rarer shape (packing::RareShape, SchedulerConfig::capacity.rare_class_last): the
  // caller sets it from the cluster's hardware; such a node ranks after every node that is not.
  bool reserved = false;
};

// `total` of the parts whose sums these are (two RunScore calls over complementary ScoreSets
// add their sums: the total equals one ScoreSet::kAll call's).
int WeightedTotal(long long weighted, long long weights);

// Which Score plugins RunScore runs: every one, those that read the pod and the node alone, or
// those that read the cluster view too (ScorePlugin::ReadsCluster). The extender scores a pool
// pod's node-only part once per node class and the rest per node.
enum class ScoreSet : std::uint8_t { kAll, kNodeOnly, kClusterOnly };

// The extender wire's scale is 0..10 (kube-scheduler's MaxExtenderPriority). The absolute
// conversion, round half up, score100 / 10 -> 95..100 = 10, 85..94 = 9, ..., 0..4 = 0; inputs
// outside 0..100 are clamped first. Prioritize scores relative to the call's best node
// (CapacityBand::ExtenderScore, ranking.h), which uses this when the best total is 100.
inline constexpr int kMaxExtenderScore = 10;
int ToExtenderScore(int score100);

// What a cycle knows besides the pod (Framework::NewCycle).
struct CycleSetup {
  // The typical pods the packing measure weighs (null: none; CycleState::SetShapeMix).
  std::shared_ptr<const packing::ShapeMix> mix;
  // False while the mix does not yet describe the workload (the extender's window holds fewer
  // than its minimum of pods): the blind packing heuristics stay counted. True: the framework's
  // own setting.
  bool packs_by_mix = true;
  // Whether plugins write explanations (/explain and `place`; the verbs answer with numbers).
  bool explain = false;
  // Where the pod's Prefill/Decode pool runs (null: no pool view; the pool plugins skip).
  std::shared_ptr<const ClusterView> cluster;
};

class Framework {
 public:
  // Builds every configured plugin through `registry`. Errors: unknown or duplicate plugin,
  // weight out of range, bad plugin args, or a config without any Filter or any Reserve plugin
  // (nothing would check or claim devices; two pods could get one GPU).
  static Result<Framework> Create(const SchedulerConfig& config, const Registry& registry);

  Framework(Framework&&) noexcept;
  Framework& operator=(Framework&&) noexcept;
  ~Framework();

  // A cycle for one pod. The cycle computes placements through this Framework's memo, so it must
  // not outlive the Framework.
  CycleState NewCycle(PlacementRequest request) const;
  // The same, set up as every caller that ranks nodes sets it up (the extender's verbs,
  // /explain, the simulators): one place, so they score alike.
  CycleState NewCycle(PlacementRequest request, const CycleSetup& setup) const;

  // Filter plugins in config order; stops at the first that is not ok(). kSkip counts as ok.
  FilterResult RunFilter(CycleState& state, const NodeInfo& node) const;
  // Every Score plugin of `set` (weight 0 included, for the explanation) and the weighted total.
  NodeScore RunScore(CycleState& state, const NodeInfo& node, ScoreSet set = ScoreSet::kAll) const;
  // Reserve plugins in config order. When one fails, the ones that succeeded before it are
  // unreserved in reverse order, so `node` is as it was; returns the failing status.
  PluginStatus RunReserve(CycleState& state, NodeInfo& node) const;

  const SchedulerConfig& config() const;
  // The capacity band to rank this framework's scores with (-1: capacity first is off).
  int CapacityBandWidth() const;
  // The capacity plugin's name; empty when off.
  std::string_view CapacityPluginName() const;
  // Whether nodes kept for a rarer shape rank last (SchedulerConfig::capacity.rare_class_last;
  // the caller sets NodeScore::reserved).
  bool RareClassLast() const;
  // Whether a single vGPU's best nodes rank by the remnants their card leaves
  // (SchedulerConfig::capacity.even_remnants; the caller ranks, packing::RemnantCounts).
  bool EvenRemnants() const;
  // Plugin names per extension point, in run order (for logs and /debug pages).
  std::vector<std::string_view> FilterPluginNames() const;
  std::vector<std::string_view> ScorePluginNames() const;
  std::vector<std::string_view> ReservePluginNames() const;

 private:
  struct Impl;
  explicit Framework(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "total 87 = (5*100 + 3*70 + 2*75) / 10; GpuNicAlignment 100 x5: ...; NvlinkAffinity ..."
std::string ExplainScore(const NodeScore& score);
// One line for a node: "node-a: filtered out by DeviceFit (Unschedulable): ..." or
// "node-a: fits; total 87 = ...". `score` may be null (filter only).
std::string ExplainNode(std::string_view node_name, const FilterResult& filter, const NodeScore* score);

}  // namespace toposched::framework
