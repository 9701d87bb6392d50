#pragma once
// Plugin interfaces, one per extension point, after kube-scheduler's framework
// (staging/src/k8s.io/kube-scheduler/framework/interface.go). A plugin implements any subset;
// the Framework finds out which with dynamic_cast when it is built. Each interface inherits
// Plugin virtually so one object can implement several behind one Name().
//
// Thread safety: plugins hold configuration only. Every per-pod fact lives in the CycleState,
// so the methods are const and may run concurrently on distinct CycleStates.

#include <string>
#include <string_view>

#include "toposched/common/status.h"
#include "toposched/framework/cycle_state.h"
#include "toposched/framework/node_info.h"
#include "toposched/framework/status.h"

namespace toposched::framework {

// The score scale inside toposched: every ScorePlugin returns 0..kMaxScore (kube's MaxScore).
inline constexpr int kMinScore = 0;
inline constexpr int kMaxScore = 100;

class Plugin {
 public:
  virtual ~Plugin() = default;
  // The name config and the registry use (PascalCase, e.g. "DeviceFit"); stable forever.
  virtual std::string_view Name() const = 0;
  // Called once when the Framework is built, with the config's network tiers: a plugin whose
  // args name a tier checks that it is configured, so a typo stops the config from loading
  // instead of scoring every pod neutrally. The error names the arg.
  virtual Status CheckNetwork(const pd::NetworkConfig& network) const {
    (void)network;
    return Status::Ok();
  }
};

// Called once per candidate node in the extender's filter verb, in config order; the first
// status that is not ok() decides. Must not change anything but `state`.
class FilterPlugin : public virtual Plugin {
 public:
  virtual PluginStatus Filter(CycleState& state, const NodeInfo& node) const = 0;
};

struct ScoreResult {
  int score = kMinScore;  // kMinScore..kMaxScore, higher is better
  // How the score was made, with its arithmetic ("worst GPU->NIC PIX (rank 1) ... -> 100").
  // May be left empty when the cycle does not want it (CycleState::explain()).
  std::string explanation;
  // false: the plugin has nothing to say about this pod (a pool plugin for a pod outside any
  // pool). Its part stays in the explanation but out of the weighted total, so a plugin that
  // does not apply does not compress the others' differences on the extender's 0-10 scale.
  bool counted = true;
};

// Called in the prioritize verb for nodes that passed Filter. A node without a placement (the
// caller skipped Filter) scores kMinScore with an explanation saying so.
class ScorePlugin : public virtual Plugin {
 public:
  virtual ScoreResult Score(CycleState& state, const NodeInfo& node) const = 0;
  // True when the score reads the cycle's cluster view (where the node sits, the pod's pool):
  // then two nodes in one scheduling state can score differently. False (the default) promises
  // that the score depends on the pod and the node alone, so the extender computes it once per
  // node class (Framework::RunScore's ScoreSet). True promises that the score reads of the node
  // only which of the pool's pods stand on it and in each of its domains and its placement's
  // worst GPU->NIC class: the extender computes it once per such position (plugins/README.md).
  virtual bool ReadsCluster() const { return false; }
  // True when the score packs for the workload's typical pods (CycleState::shape_mix), as
  // ExpectedFragmentation does: with it counted, the blind packing heuristics may stand down
  // (CycleState::packs_for_shape_mix).
  virtual bool PacksForShapeMix() const { return false; }
};

// Reserve claims the pod's devices on `node` (in `node.allocated`) before binding, so that pods
// scheduled next see them taken. A failing Reserve must leave nothing behind: the framework
// unreserves only the plugins that succeeded before it.
// Unreserve reverts what Reserve did in this cycle on this node. It must be idempotent and may
// be called without a prior Reserve (then it does nothing).
class ReservePlugin : public virtual Plugin {
 public:
  virtual PluginStatus Reserve(CycleState& state, NodeInfo& node) const = 0;
  virtual void Unreserve(CycleState& state, NodeInfo& node) const = 0;
};

}  // namespace toposched::framework
