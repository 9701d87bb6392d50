#pragma once
// Fragmentation: prefers placements that leave whole PCIe switch groups free. A switch group (a
// PCIe switch with its GPUs and RDMA NICs, PIX to each other) is what a large aligned pod
// needs; a small pod that takes one GPU out of an intact group makes that group useless to it.

#include <memory>
#include <string_view>

#include "toposched/common/status.h"
#include "toposched/framework/plugin.h"
#include "toposched/framework/registry.h"

namespace toposched::plugins::fragmentation {

inline constexpr std::string_view kName = "Fragmentation";
inline constexpr int kDefaultWeight = 2;  // the fourth term of the placement objective

// Switch groups as the engine defines them (src/placement/engine.cc, SEMANTICS): a device's group
// is the outermost PCIe switch above it, counted over GPUs and RDMA NICs (a device under no
// switch belongs to none); a group is intact when none of its GPUs is held whole or carries
// vGPUs and none of its RDMA NICs is used. So intact_after equals -cost.neg_intact_groups.
//
// Score = 100 - round(100 * broken / groups), where broken = intact groups before the placement
// minus intact groups after it, and groups = all switch groups of the node. Breaking nothing =
// 100; on an HGX node (4 groups) breaking one = 75.
// Dividing by all groups, not by the intact ones before, is deliberate: dividing by "before"
// would score breaking the last intact group of a busy node (1/1 -> 0) below breaking one of a
// pristine node (1/4 -> 75) and so steer small pods onto pristine nodes, the opposite of what
// keeps whole nodes free for 8-GPU pods. Both cost the cluster one intact group, and score alike.
// Nodes without switch groups (flat VMs, GPUs on root ports) score a neutral 100.
class Fragmentation final : public framework::ScorePlugin {
 public:
  std::string_view Name() const override { return kName; }
  framework::ScoreResult Score(framework::CycleState& state, const framework::NodeInfo& node) const override;
};

struct GroupCount {
  int groups = 0;  // switch groups on the node
  int intact_before = 0;
  int intact_after = 0;
};
GroupCount CountIntactGroups(const NodeTopology& topology, const NodeAllocation& allocated,
                             const Placement& placement);

// Takes no args.
Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args);

}  // namespace toposched::plugins::fragmentation
