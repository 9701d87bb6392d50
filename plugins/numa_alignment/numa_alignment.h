#pragma once
// NumaAlignment: prefers nodes where the pod's GPUs and NICs share one NUMA node, so its CPU
// threads, host buffers and devices are local (what the kubelet's Topology Manager would ask
// for, made visible to the scheduler).

#include <memory>
#include <string_view>

#include "toposched/common/status.h"
#include "toposched/framework/plugin.h"
#include "toposched/framework/registry.h"

namespace toposched::plugins::numa_alignment {

inline constexpr std::string_view kName = "NumaAlignment";
inline constexpr int kDefaultWeight = 2;

// Score = round(100 * k / n): n = chosen devices (GPUs and NICs) whose NUMA node is known, k =
// how many of them are on the NUMA node holding most of them. One NUMA node -> 100; 8 GPUs and
// 8 NICs split 8/8 over two -> 50. Devices of unknown locality (-1) are left out of both counts;
// when none is known (or nothing is placed) the score is a neutral 100.
class NumaAlignment final : public framework::ScorePlugin {
 public:
  std::string_view Name() const override { return kName; }
  framework::ScoreResult Score(framework::CycleState& state, const framework::NodeInfo& node) const override;
};

// Takes no args.
Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args);

}  // namespace toposched::plugins::numa_alignment
