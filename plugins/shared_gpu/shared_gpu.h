#pragma once
// SharedGpu: HAMi's node policy for shared (vGPU) pods. Binpack fills nodes that already carry
// vGPUs so whole nodes stay free for whole-GPU pods; spread evens load out across nodes. Which
// GPUs inside the node take the vGPUs is the engine's choice (EngineOptions::default_gpu_policy,
// the pod's hami.io/gpu-scheduler-policy), not this plugin's.

#include <memory>
#include <string_view>

#include "toposched/common/status.h"
#include "toposched/framework/plugin.h"
#include "toposched/framework/registry.h"
#include "toposched/placement/request.h"

namespace toposched::plugins::shared_gpu {

inline constexpr std::string_view kName = "SharedGpu";
inline constexpr int kDefaultWeight = 1;  // the last term of the placement objective
// Plugin arg: the node policy for pods that do not set hami.io/node-scheduler-policy; binpack
// (HAMi's default) or spread.
inline constexpr std::string_view kDefaultNodePolicyArg = "defaultNodePolicy";

// How busy the node's GPUs would be after the placement, 0..1: the mean of
//   GPUs in use (whole or carrying a vGPU) / GPUs,
//   memory held (whole GPUs count their full memory) / memory,  -- left out when no GPU's memory is known
//   compute held (whole GPUs count 100 %) / compute,
// as HAMi's node score sums used devices, cores and memory over their totals.
// Score: binpack -> round(100 * usage); spread -> round(100 * (1 - usage)). Whole-GPU pods get a
// neutral 100: this plugin only ranks nodes for shared pods.
class SharedGpu final : public framework::ScorePlugin {
 public:
  explicit SharedGpu(PackPolicy default_node_policy) : default_node_policy_(default_node_policy) {}
  std::string_view Name() const override { return kName; }
  framework::ScoreResult Score(framework::CycleState& state, const framework::NodeInfo& node) const override;

 private:
  PackPolicy default_node_policy_;
};

struct NodeUsage {
  int gpus = 0, gpus_in_use = 0;
  double memory_fraction = 0;  // -1 when no GPU's memory is known
  double cores_fraction = 0;
  double usage = 0;  // the mean above
};
NodeUsage UsageOf(const NodeTopology& topology, const NodeAllocation& allocated);

// Args: defaultNodePolicy = binpack (default) | spread; any other key is an error.
Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args);

}  // namespace toposched::plugins::shared_gpu
